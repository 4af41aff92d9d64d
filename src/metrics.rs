//! Prometheus metric families. Names, types, help texts and labels follow the contract's
//! table exactly: alert rules and dashboards are written against them (loss is
//! `increase(gap_auditor_records_lost_total[5m]) > 0`).
//!
//! Every family lives on this struct's own [`Registry`] rather than the process-global
//! default one, so tests (and a `demo` run inside a test) can build as many independent
//! `Metrics` as they like without duplicate-registration errors.
//!
//! Label conventions: `audit`, `topic`, `partition` (the partition as a decimal string)
//! unless noted. Units are base units (seconds, records, offsets) as Prometheus expects.

use prometheus::core::{Collector, MetricVec, MetricVecBuilder};
#[cfg(target_os = "linux")]
use prometheus::process_collector::ProcessCollector;
use prometheus::{
    Encoder, GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// Labels of the per-partition families.
const PARTITION_LABELS: &[&str] = &["audit", "topic", "partition"];
/// Labels of `gap_auditor_records_filtered_total`.
const FILTERED_LABELS: &[&str] = &["audit", "topic", "partition", "reason"];

/// Buckets of `gap_auditor_sink_visibility_seconds`: from sub-second (ES refresh) to an hour
/// (a Flink job with long checkpoints, Doris publish under load).
const VISIBILITY_BUCKETS: &[f64] = &[
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0,
];
/// Buckets of `gap_auditor_sink_query_seconds`: 1 ms (a cached point lookup) to 10 s (a
/// range count on a cold table).
const QUERY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// All metric families of the auditor, registered on [`Metrics::registry`].
#[derive(Clone)]
pub struct Metrics {
    /// The registry every family below is registered on; [`Metrics::render`] encodes it.
    pub registry: Registry,
    /// `gap_auditor_records_consumed_total{audit,topic,partition}`.
    pub records_consumed: IntCounterVec,
    /// `gap_auditor_records_expected_total{audit,topic,partition}`.
    pub records_expected: IntCounterVec,
    /// `gap_auditor_records_filtered_total{audit,topic,partition,reason}`; reason is
    /// `filter`, `undecodable` or `tombstone`.
    pub records_filtered: IntCounterVec,
    /// `gap_auditor_records_confirmed_total{audit,topic,partition}`.
    pub records_confirmed: IntCounterVec,
    /// `gap_auditor_records_lost_total{audit,topic,partition}`: each record counted once.
    pub records_lost: IntCounterVec,
    /// `gap_auditor_records_late_total{audit,topic,partition}`.
    pub records_late: IntCounterVec,
    /// `gap_auditor_records_unverifiable_total{audit,topic,partition}`: records Kafka
    /// deleted before the auditor could check them (never added to `records_lost_total`).
    pub records_unverifiable: IntCounterVec,
    /// `gap_auditor_records_duplicated_total{audit,topic,partition}`.
    pub records_duplicated: IntCounterVec,
    /// `gap_auditor_records_pending{audit,topic,partition}`.
    pub records_pending: IntGaugeVec,
    /// `gap_auditor_records_missing{audit,topic,partition}`.
    pub records_missing: IntGaugeVec,
    /// `gap_auditor_gaps_open{audit,topic,partition}`.
    pub gaps_open: IntGaugeVec,
    /// `gap_auditor_gap_unrecoverable_seconds{audit,topic,partition}`.
    pub gap_unrecoverable_seconds: GaugeVec,
    /// `gap_auditor_consumed_offset{audit,topic,partition}`.
    pub consumed_offset: IntGaugeVec,
    /// `gap_auditor_settled_offset{audit,topic,partition}`.
    pub settled_offset: IntGaugeVec,
    /// `gap_auditor_pipeline_committed_offset{audit,topic,partition}`.
    pub pipeline_committed_offset: IntGaugeVec,
    /// `gap_auditor_log_end_offset{audit,topic,partition}`.
    pub log_end_offset: IntGaugeVec,
    /// `gap_auditor_sink_visibility_seconds{audit,topic}` (histogram).
    pub sink_visibility_seconds: HistogramVec,
    /// `gap_auditor_sink_queries_total{audit,result}`; result is `ok` or `error`.
    pub sink_queries: IntCounterVec,
    /// `gap_auditor_sink_query_seconds{audit}` (histogram).
    pub sink_query_seconds: HistogramVec,
    /// `gap_auditor_sink_up{audit}`.
    pub sink_up: IntGaugeVec,
    /// `gap_auditor_kafka_up{audit}`.
    pub kafka_up: IntGaugeVec,
    /// `gap_auditor_pipeline_group_up{audit}`: the configured pipeline group's commits
    /// were read and it has commits (0: verdicts are held back). Absent without a group.
    pub pipeline_group_up: IntGaugeVec,
    /// `gap_auditor_missing_keys_dropped_total{audit}`: keys of missing records no longer
    /// kept for re-checks because `max_missing_keys` was reached (they stay missing).
    pub missing_keys_dropped: IntCounterVec,
    /// `gap_auditor_build_info{version, revision}`, always 1.
    pub build_info: IntGaugeVec,
    /// `gap_auditor_complete_until_timestamp_seconds{audit}`: the sink is proven complete up
    /// to this record time (Unix seconds); absent while unknown (SPEC "Completeness").
    pub complete_until_timestamp_seconds: GaugeVec,
    /// Beyond SPEC's table: gaps detected, by cause (audit, cause) — no topic/partition, so
    /// its cardinality is fixed.
    pub gaps_detected: IntCounterVec,
    /// Beyond SPEC's table: the pipeline group's committed offset moved backwards
    /// (reprocessing: duplicates expected, not loss).
    pub pipeline_rewinds: IntCounterVec,
    /// Beyond SPEC's table: the pipeline group stopped committing while the log grew.
    pub pipeline_stalls: IntCounterVec,
    /// Beyond SPEC's table: `gap_auditor_audit_info{audit, pipeline_group, sink_kind,
    /// strategy}`, 1 per configured audit (see [`Metrics::set_audit_info`]).
    pub audit_info: IntGaugeVec,
    /// Every family registered on `registry`, for [`Metrics::family_names`].
    families: Vec<String>,
    /// Beyond SPEC's table: `gap_auditor_records_awaiting_schema{audit,topic,partition}`,
    /// records read but not decided because their schema is not fetched yet (and the
    /// records behind them): neither expected nor filtered.
    pub records_awaiting_schema: IntGaugeVec,
    /// Beyond SPEC's table: `gap_auditor_schema_registry_up{audit}`, 1 when the last
    /// schema fetch succeeded; absent for audits without a schema registry.
    pub schema_registry_up: IntGaugeVec,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Registers families on one registry and remembers their names, so that the metrics
/// reference (docs/METRICS.md) can be checked against what is really registered, families
/// that have no series yet included.
struct Families {
    registry: Registry,
    names: Vec<String>,
}

impl Families {
    /// Registers `c` and returns the handle the auditor updates (a clone shares the series).
    fn register<C: Collector + Clone + 'static>(&mut self, c: C) -> C {
        self.add(Box::new(c.clone()));
        c
    }

    /// The names and label sets are constants of this file, so a failure is a programming
    /// error caught by every test run, not a runtime condition: hence `expect`.
    fn add(&mut self, c: Box<dyn Collector>) {
        self.names
            .extend(c.desc().iter().map(|d| d.fq_name.clone()));
        self.registry
            .register(c)
            .expect("metric families are constant and registered once");
    }

    fn int_counter(&mut self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.register(IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter"))
    }

    fn int_gauge(&mut self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        self.register(IntGaugeVec::new(Opts::new(name, help), labels).expect("valid gauge"))
    }

    fn gauge(&mut self, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
        self.register(GaugeVec::new(Opts::new(name, help), labels).expect("valid gauge"))
    }

    fn histogram(&mut self, name: &str, help: &str, labels: &[&str], b: &[f64]) -> HistogramVec {
        let opts = HistogramOpts::new(name, help).buckets(b.to_vec());
        self.register(HistogramVec::new(opts, labels).expect("valid histogram"))
    }

    /// The standard `process_*` families (resident memory, start time, open and maximum
    /// file descriptors, CPU seconds, threads, virtual memory), read from /proc at each
    /// scrape. Linux only: /proc is where they come from.
    #[cfg(target_os = "linux")]
    fn process(&mut self) {
        self.add(Box::new(ProcessCollector::for_self()));
    }

    #[cfg(not(target_os = "linux"))]
    fn process(&mut self) {}
}

impl Metrics {
    /// Creates every family on a fresh registry and sets
    /// `gap_auditor_build_info{version=<crate version>, revision=<git revision>} 1`.
    pub fn new() -> Metrics {
        let mut f = Families {
            registry: Registry::new(),
            names: Vec::new(),
        };
        f.process();
        let p = PARTITION_LABELS;
        let m = Metrics {
            records_consumed: f.int_counter(
                "gap_auditor_records_consumed_total",
                "Records read from Kafka by the auditor.",
                p,
            ),
            records_expected: f.int_counter(
                "gap_auditor_records_expected_total",
                "Records consumed that the pipeline is expected to write to the sink.",
                p,
            ),
            records_filtered: f.int_counter(
                "gap_auditor_records_filtered_total",
                "Records consumed that are not expected in the sink, by reason (filter, undecodable, tombstone).",
                FILTERED_LABELS,
            ),
            records_confirmed: f.int_counter(
                "gap_auditor_records_confirmed_total",
                "Expected records found in the sink.",
                p,
            ),
            records_lost: f.int_counter(
                "gap_auditor_records_lost_total",
                "Expected records declared missing from the sink (each record counted once).",
                p,
            ),
            records_late: f.int_counter(
                "gap_auditor_records_late_total",
                "Records found in the sink after they had been declared missing.",
                p,
            ),
            records_unverifiable: f.int_counter(
                "gap_auditor_records_unverifiable_total",
                "Records Kafka deleted before the auditor could check them (offsets; an upper bound on records).",
                p,
            ),
            records_duplicated: f.int_counter(
                "gap_auditor_records_duplicated_total",
                "Extra copies of expected records found in the sink.",
                p,
            ),
            records_pending: f.int_gauge(
                "gap_auditor_records_pending",
                "Expected records not yet due or not yet verified.",
                p,
            ),
            records_missing: f.int_gauge(
                "gap_auditor_records_missing",
                "Expected records currently missing from the sink (in open gaps).",
                p,
            ),
            gaps_open: f.int_gauge(
                "gap_auditor_gaps_open", "Open gaps.", p),
            gap_unrecoverable_seconds: f.gauge(
                "gap_auditor_gap_unrecoverable_seconds",
                "Seconds until Kafka retention deletes the records of the oldest open gap (0 once they are gone).",
                p,
            ),
            consumed_offset: f.int_gauge(
                "gap_auditor_consumed_offset",
                "Next offset the auditor will read.",
                p,
            ),
            settled_offset: f.int_gauge(
                "gap_auditor_settled_offset",
                "Settled watermark: every expected record below it is confirmed or recorded in a gap.",
                p,
            ),
            pipeline_committed_offset: f.int_gauge(
                "gap_auditor_pipeline_committed_offset",
                "Offset committed by the pipeline's consumer group.",
                p,
            ),
            log_end_offset: f.int_gauge(
                "gap_auditor_log_end_offset",
                "Partition high watermark (log end offset).",
                p,
            ),
            sink_visibility_seconds: f.histogram(
                "gap_auditor_sink_visibility_seconds",
                "Time from a record's Kafka timestamp to its first confirmation in the sink.",
                &["audit", "topic"],
                VISIBILITY_BUCKETS,
            ),
            sink_queries: f.int_counter(
                "gap_auditor_sink_queries_total",
                "Sink queries, by result (ok, error).",
                &["audit", "result"],
            ),
            sink_query_seconds: f.histogram(
                "gap_auditor_sink_query_seconds",
                "Sink query latency.",
                &["audit"],
                QUERY_BUCKETS,
            ),
            sink_up: f.int_gauge(
                "gap_auditor_sink_up",
                "1 when the last sink query succeeded, else 0.",
                &["audit"],
            ),
            kafka_up: f.int_gauge(
                "gap_auditor_kafka_up",
                "1 when the Kafka broker answered recently, else 0.",
                &["audit"],
            ),
            pipeline_group_up: f.int_gauge(
                "gap_auditor_pipeline_group_up",
                "1 when the pipeline group's commits were read and it has commits; 0 holds verdicts back.",
                &["audit"],
            ),
            records_awaiting_schema: f.int_gauge(
                "gap_auditor_records_awaiting_schema",
                "Records read but not decided yet because their schema is being fetched from the schema registry (and the records behind them): neither expected nor filtered.",
                PARTITION_LABELS,
            ),
            schema_registry_up: f.int_gauge(
                "gap_auditor_schema_registry_up",
                "1 when the last schema registry fetch succeeded, else 0 (records wait for their schema, unknown).",
                &["audit"],
            ),
            missing_keys_dropped: f.int_counter(
                "gap_auditor_missing_keys_dropped_total",
                "Keys of missing records dropped beyond max_missing_keys: those records are no longer re-checked (they stay missing).",
                &["audit"],
            ),
            complete_until_timestamp_seconds: f.gauge(
                "gap_auditor_complete_until_timestamp_seconds",
                "The sink is proven complete up to this record time (Unix seconds): every expected record with an earlier timestamp is confirmed. Absent while unknown.",
                &["audit"],
            ),
            build_info: f.int_gauge(
                "gap_auditor_build_info",
                "Build information of the running gap-auditor; always 1.",
                &["version", "revision"],
            ),
            gaps_detected: f.int_counter(
                "gap_auditor_gaps_detected_total",
                "Gaps detected, by cause: skipped_by_restart, dropped_in_flight, deleted_unread, unknown.",
                &["audit", "cause"],
            ),
            pipeline_rewinds: f.int_counter(
                "gap_auditor_pipeline_rewinds_total",
                "Times the pipeline group's committed offset moved backwards (reprocessing, not loss).",
                p,
            ),
            pipeline_stalls: f.int_counter(
                "gap_auditor_pipeline_stalls_total",
                "Times the pipeline group stopped committing while the log end kept growing.",
                p,
            ),
            audit_info: f.int_gauge(
                "gap_auditor_audit_info",
                "One series per configured audit, always 1: its pipeline group (empty without one), sink kind and match strategy, to join with lag exporters.",
                &["audit", "pipeline_group", "sink_kind", "strategy"],
            ),
            registry: f.registry,
            families: f.names,
        };
        m.build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION"), crate::REVISION])
            .set(1);
        m
    }

    /// Sets `gap_auditor_audit_info{audit, pipeline_group, sink_kind, strategy} 1` for one
    /// configured audit; `pipeline_group` is the empty string (no label, to Prometheus)
    /// when the audit has none.
    pub fn set_audit_info(
        &self,
        audit: &str,
        pipeline_group: Option<&str>,
        sink_kind: &str,
        strategy: &str,
    ) {
        self.audit_info
            .with_label_values(&[audit, pipeline_group.unwrap_or(""), sink_kind, strategy])
            .set(1);
    }

    /// The name of every family registered on [`Metrics::registry`], series or not, in
    /// registration order.
    pub fn family_names(&self) -> &[String] {
        &self.families
    }

    /// The registry in the Prometheus text exposition format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut buf = Vec::new();
        // Encoding only fails on a malformed family, which the constant definitions above
        // rule out; an empty page is better than taking the HTTP server down.
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut buf) {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        String::from_utf8(buf).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into())
    }

    /// Drops every per-partition series of `audit`'s `topic`/`partition`, counters (all
    /// reasons of the filtered counter included) and gauges.
    pub fn remove_partition(&self, audit: &str, topic: &str, partition: i32) {
        self.remove_partition_gauges(audit, topic, partition);
        let partition = partition.to_string();
        let key = [audit, topic, partition.as_str()];
        for c in [
            &self.records_consumed,
            &self.records_expected,
            &self.records_confirmed,
            &self.records_lost,
            &self.records_late,
            &self.records_unverifiable,
            &self.records_duplicated,
            &self.pipeline_rewinds,
            &self.pipeline_stalls,
        ] {
            // Err only means the series did not exist: nothing to drop.
            let _ = c.remove_label_values(&key);
        }
        remove_with_prefix(&self.records_filtered, FILTERED_LABELS, &key);
    }

    /// Drops the per-partition GAUGES of a partition this instance no longer owns (a
    /// rebalance moved it), keeping its counters: their final values are what this instance
    /// counted, so summing a counter over the instances of one auditor group stays the
    /// truth. The new owner publishes the gauges from then on.
    pub fn remove_partition_gauges(&self, audit: &str, topic: &str, partition: i32) {
        let partition = partition.to_string();
        let key = [audit, topic, partition.as_str()];
        for g in [
            &self.records_pending,
            &self.records_missing,
            &self.gaps_open,
            &self.consumed_offset,
            &self.settled_offset,
            &self.pipeline_committed_offset,
            &self.log_end_offset,
            &self.records_awaiting_schema,
        ] {
            let _ = g.remove_label_values(&key);
        }
        let _ = self.gap_unrecoverable_seconds.remove_label_values(&key);
    }
}

/// Removes every series of `vec` whose first labels equal `prefix`, whatever the values of
/// the remaining labels. The reason label of the filtered counter is open-ended in
/// principle, so the series to drop are found by looking at what exists.
fn remove_with_prefix<T: MetricVecBuilder>(vec: &MetricVec<T>, names: &[&str], prefix: &[&str]) {
    let mut doomed: Vec<Vec<String>> = Vec::new();
    for family in vec.collect() {
        for metric in family.get_metric() {
            let labels = metric.get_label();
            let value = |name: &str| {
                labels
                    .iter()
                    .find(|l| l.name() == name)
                    .map(|l| l.value().to_string())
            };
            let values: Option<Vec<String>> = names.iter().map(|n| value(n)).collect();
            if let Some(values) = values
                && values.iter().zip(prefix).all(|(v, p)| v == p)
            {
                doomed.push(values);
            }
        }
    }
    for values in doomed {
        let refs: Vec<&str> = values.iter().map(String::as_str).collect();
        let _ = vec.remove_label_values(&refs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};
    use std::io::Write;
    use std::process::{Command, Stdio};

    /// The contract's table: (name, TYPE).
    const SPEC_FAMILIES: &[(&str, &str)] = &[
        ("gap_auditor_records_consumed_total", "counter"),
        ("gap_auditor_records_expected_total", "counter"),
        ("gap_auditor_records_filtered_total", "counter"),
        ("gap_auditor_records_confirmed_total", "counter"),
        ("gap_auditor_records_lost_total", "counter"),
        ("gap_auditor_records_late_total", "counter"),
        ("gap_auditor_records_duplicated_total", "counter"),
        ("gap_auditor_records_unverifiable_total", "counter"),
        ("gap_auditor_records_pending", "gauge"),
        ("gap_auditor_records_missing", "gauge"),
        ("gap_auditor_gaps_open", "gauge"),
        ("gap_auditor_gap_unrecoverable_seconds", "gauge"),
        ("gap_auditor_consumed_offset", "gauge"),
        ("gap_auditor_settled_offset", "gauge"),
        ("gap_auditor_pipeline_committed_offset", "gauge"),
        ("gap_auditor_log_end_offset", "gauge"),
        ("gap_auditor_sink_visibility_seconds", "histogram"),
        ("gap_auditor_sink_queries_total", "counter"),
        ("gap_auditor_sink_query_seconds", "histogram"),
        ("gap_auditor_sink_up", "gauge"),
        ("gap_auditor_kafka_up", "gauge"),
        ("gap_auditor_pipeline_group_up", "gauge"),
        ("gap_auditor_complete_until_timestamp_seconds", "gauge"),
        ("gap_auditor_build_info", "gauge"),
    ];

    /// Families beyond the contract's table (root-cause reporting), kept deliberately few.
    const EXTRA_FAMILIES: &[(&str, &str)] = &[
        ("gap_auditor_gaps_detected_total", "counter"),
        ("gap_auditor_pipeline_rewinds_total", "counter"),
        ("gap_auditor_pipeline_stalls_total", "counter"),
        ("gap_auditor_missing_keys_dropped_total", "counter"),
        ("gap_auditor_audit_info", "gauge"),
        ("gap_auditor_records_awaiting_schema", "gauge"),
        ("gap_auditor_schema_registry_up", "gauge"),
    ];

    /// The prometheus crate's process collector (Linux): the names every exporter uses.
    const PROCESS_FAMILIES: &[(&str, &str)] = &[
        ("process_cpu_seconds_total", "counter"),
        ("process_open_fds", "gauge"),
        ("process_max_fds", "gauge"),
        ("process_virtual_memory_bytes", "gauge"),
        ("process_resident_memory_bytes", "gauge"),
        ("process_start_time_seconds", "gauge"),
        ("process_threads", "gauge"),
    ];

    /// Gives every family at least one series, so that vector families (which render
    /// nothing until a label set exists) appear in the output.
    fn touch_all(m: &Metrics, audit: &str, topic: &str, partition: &str) {
        let l = [audit, topic, partition];
        for c in [
            &m.records_consumed,
            &m.records_expected,
            &m.records_confirmed,
            &m.records_lost,
            &m.records_late,
            &m.records_unverifiable,
            &m.records_duplicated,
        ] {
            c.with_label_values(&l).inc();
        }
        for g in [
            &m.records_pending,
            &m.records_missing,
            &m.gaps_open,
            &m.consumed_offset,
            &m.settled_offset,
            &m.pipeline_committed_offset,
            &m.log_end_offset,
            &m.records_awaiting_schema,
        ] {
            g.with_label_values(&l).set(7);
        }
        m.schema_registry_up.with_label_values(&[audit]).set(1);
        m.gap_unrecoverable_seconds
            .with_label_values(&l)
            .set(3600.5);
        for reason in ["filter", "undecodable", "tombstone"] {
            m.records_filtered
                .with_label_values(&[audit, topic, partition, reason])
                .inc();
        }
        m.sink_visibility_seconds
            .with_label_values(&[audit, topic])
            .observe(1.5);
        m.sink_queries.with_label_values(&[audit, "ok"]).inc();
        m.sink_queries.with_label_values(&[audit, "error"]).inc();
        m.sink_query_seconds
            .with_label_values(&[audit])
            .observe(0.02);
        m.sink_up.with_label_values(&[audit]).set(1);
        m.kafka_up.with_label_values(&[audit]).set(1);
        m.pipeline_group_up.with_label_values(&[audit]).set(1);
        m.complete_until_timestamp_seconds
            .with_label_values(&[audit])
            .set(1_714_564_800.5);
        m.missing_keys_dropped.with_label_values(&[audit]).inc();
        m.gaps_detected
            .with_label_values(&[audit, "skipped_by_restart"])
            .inc();
        m.pipeline_rewinds
            .with_label_values(&[audit, topic, partition])
            .inc();
        m.pipeline_stalls
            .with_label_values(&[audit, topic, partition])
            .inc();
        m.set_audit_info(
            audit,
            Some("FlinkSQLFromKafka2Doris"),
            "doris",
            "key_columns",
        );
    }

    /// Runs `promtool check metrics` on `text`. `None` when promtool is not installed.
    fn promtool_check(text: &str) -> Option<Result<(), String>> {
        let mut child = match Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => return Some(Err(format!("cannot run promtool: {e}"))),
        };
        let written = child
            .stdin
            .take()
            .map(|mut stdin| stdin.write_all(text.as_bytes()));
        let out = match child.wait_with_output() {
            Ok(out) => out,
            Err(e) => return Some(Err(format!("promtool failed: {e}"))),
        };
        if let Some(Err(e)) = written {
            return Some(Err(format!("cannot feed promtool: {e}")));
        }
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        // promtool exits 0 with lint warnings on stdout only in some versions: treat any
        // output as a finding.
        if out.status.success() && report.trim().is_empty() {
            Some(Ok(()))
        } else {
            Some(Err(format!(
                "promtool check metrics ({}):\n{report}",
                out.status
            )))
        }
    }

    #[test]
    fn every_spec_family_has_help_and_type() {
        let m = Metrics::new();
        touch_all(&m, "a", "t", "0");
        let text = m.render();
        for (name, kind) in SPEC_FAMILIES
            .iter()
            .chain(EXTRA_FAMILIES)
            .chain(PROCESS_FAMILIES)
        {
            assert!(
                text.contains(&format!("# HELP {name} ")),
                "no HELP for {name}:\n{text}"
            );
            assert!(
                text.contains(&format!("# TYPE {name} {kind}\n")),
                "no TYPE {kind} for {name}"
            );
        }
        let families = text.lines().filter(|l| l.starts_with("# TYPE ")).count();
        assert_eq!(
            families,
            SPEC_FAMILIES.len() + EXTRA_FAMILIES.len() + PROCESS_FAMILIES.len(),
            "a family outside the contract:\n{text}"
        );
        assert!(text.contains(&format!(
            "gap_auditor_build_info{{revision=\"{}\",version=\"{}\"}} 1\n",
            crate::REVISION,
            env!("CARGO_PKG_VERSION")
        )));
        for line in [
            "gap_auditor_sink_visibility_seconds_bucket{audit=\"a\",topic=\"t\",le=\"3600\"} 1",
            "gap_auditor_sink_visibility_seconds_bucket{audit=\"a\",topic=\"t\",le=\"1\"} 0",
            "gap_auditor_sink_query_seconds_bucket{audit=\"a\",le=\"0.001\"} 0",
            "gap_auditor_sink_query_seconds_bucket{audit=\"a\",le=\"10\"} 1",
        ] {
            assert!(text.contains(line), "no {line:?} in:\n{text}");
        }
    }

    #[test]
    fn build_info_is_present_without_touching_anything() {
        let text = Metrics::new().render();
        assert!(
            text.contains("# TYPE gap_auditor_build_info gauge"),
            "{text}"
        );
    }

    #[test]
    fn independent_instances_do_not_collide() {
        let a = Metrics::new();
        let b = Metrics::new();
        a.records_lost.with_label_values(&["x", "t", "0"]).inc();
        assert!(!b.render().contains("gap_auditor_records_lost_total{"));
    }

    #[test]
    fn remove_partition_drops_only_that_partition() {
        let m = Metrics::new();
        touch_all(&m, "a", "t", "0");
        touch_all(&m, "a", "t", "1");
        touch_all(&m, "b", "t", "0");
        m.remove_partition("a", "t", 0);
        let text = m.render();
        let stale: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("audit=\"a\"") && l.contains("partition=\"0\""))
            .collect();
        assert!(stale.is_empty(), "stale series remain: {stale:#?}");
        assert!(text.contains(
            "gap_auditor_records_filtered_total{audit=\"a\",partition=\"1\",reason=\"tombstone\",topic=\"t\"} 1"
        ));
        assert!(
            text.contains("gap_auditor_settled_offset{audit=\"b\",partition=\"0\",topic=\"t\"} 7")
        );
        // Non-partition families are untouched.
        assert!(text.contains("gap_auditor_sink_up{audit=\"a\"} 1"));
        // Removing again (or an unknown partition) is harmless.
        m.remove_partition("a", "t", 0);
        m.remove_partition("zzz", "t", 9);
    }

    #[test]
    fn removing_gauges_keeps_the_counters_of_a_moved_partition() {
        let m = Metrics::new();
        touch_all(&m, "a", "t", "0");
        m.remove_partition_gauges("a", "t", 0);
        let text = m.render();
        assert!(
            !text.contains("gap_auditor_settled_offset{audit=\"a\""),
            "{text}"
        );
        assert!(
            !text.contains("gap_auditor_records_missing{audit=\"a\""),
            "{text}"
        );
        assert!(
            text.contains(
                "gap_auditor_records_lost_total{audit=\"a\",partition=\"0\",topic=\"t\"}"
            ),
            "{text}"
        );
    }

    /// Lints the exposition with promtool. Locally it is skipped (with a note) when promtool
    /// is not installed; in CI (`CI` set) or with `GAP_AUDITOR_TEST_PROMTOOL=1` it must run.
    #[test]
    fn promtool_accepts_the_exposition() {
        let m = Metrics::new();
        touch_all(&m, "dns_logs", "test", "0");
        touch_all(&m, "dns_logs", "test", "1");
        let required = std::env::var_os("CI").is_some()
            || std::env::var_os("GAP_AUDITOR_TEST_PROMTOOL").is_some();
        match promtool_check(&m.render()) {
            Some(result) => {
                if let Err(report) = result {
                    panic!("{report}");
                }
            }
            None if required => panic!(
                "promtool is not installed but CI/GAP_AUDITOR_TEST_PROMTOOL requires the metrics \
                 lint: run scripts/test.sh (it installs promtool, Debian package `prometheus`)"
            ),
            None => eprintln!(
                "SKIPPED promtool lint: promtool not on PATH (apt-get install prometheus, or run \
                 scripts/test.sh)"
            ),
        }
    }

    /// The process collector is on the auditor's own registry and reads this process:
    /// its start time is in the past and recent, it holds memory and file descriptors.
    #[cfg(target_os = "linux")]
    #[test]
    fn process_families_describe_this_process() {
        let m = Metrics::new();
        let families = m.registry.gather();
        let value = |name: &str| -> f64 {
            let f = families
                .iter()
                .find(|f| f.name() == name)
                .unwrap_or_else(|| panic!("{name} not gathered"));
            let metric = &f.get_metric()[0];
            if f.get_field_type() == prometheus::proto::MetricType::COUNTER {
                metric.get_counter().value()
            } else {
                metric.get_gauge().value()
            }
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_secs_f64();
        let start = value("process_start_time_seconds");
        // Test binaries start fresh; an hour covers a slow machine with a long test run.
        assert!(
            start <= now + 1.0 && start > now - 3600.0,
            "start {start}, now {now}"
        );
        assert!(value("process_resident_memory_bytes") > 1e6);
        assert!(value("process_open_fds") >= 3.0);
        assert!(value("process_max_fds") >= value("process_open_fds"));
    }

    #[test]
    fn audit_info_has_one_series_per_audit_and_an_empty_group_when_none() {
        let m = Metrics::new();
        m.set_audit_info(
            "dns_logs",
            Some("FlinkSQLFromKafka2Doris"),
            "doris",
            "key_columns",
        );
        m.set_audit_info("es_logs", None, "elasticsearch", "doc_id");
        let text = m.render();
        for line in [
            "gap_auditor_audit_info{audit=\"dns_logs\",pipeline_group=\"FlinkSQLFromKafka2Doris\",sink_kind=\"doris\",strategy=\"key_columns\"} 1\n",
            "gap_auditor_audit_info{audit=\"es_logs\",pipeline_group=\"\",sink_kind=\"elasticsearch\",strategy=\"doc_id\"} 1\n",
        ] {
            assert!(text.contains(line), "no {line:?} in:\n{text}");
        }
    }

    // ------------------------------------------------------ the metrics reference

    const METRICS_DOC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/METRICS.md");

    /// One row of docs/METRICS.md's tables: name, type, label names.
    #[derive(Debug, PartialEq)]
    struct DocRow {
        kind: String,
        labels: Vec<String>,
    }

    /// The rows of `doc`'s tables whose first cell is a backticked metric name:
    /// `| `name` | type | `a`, `b` | meaning |`. A name twice is an error.
    fn doc_rows(doc: &str) -> Result<BTreeMap<String, DocRow>, String> {
        let mut rows = BTreeMap::new();
        for line in doc.lines().filter(|l| l.trim_start().starts_with('|')) {
            let cells: Vec<&str> = line
                .trim()
                .trim_matches('|')
                .split('|')
                .map(str::trim)
                .collect();
            let Some(name) = cells
                .first()
                .and_then(|c| c.strip_prefix('`'))
                .and_then(|c| c.strip_suffix('`'))
            else {
                continue;
            };
            if cells.len() < 4 {
                return Err(format!(
                    "row of {name}: expected name | type | labels | meaning"
                ));
            }
            let mut labels: Vec<String> = cells[2]
                .split(',')
                .map(|l| l.trim().trim_matches('`').to_string())
                .filter(|l| !l.is_empty() && l != "—")
                .collect();
            labels.sort();
            let row = DocRow {
                kind: cells[1].to_string(),
                labels,
            };
            if rows.insert(name.to_string(), row).is_some() {
                return Err(format!("{name} is listed twice"));
            }
        }
        Ok(rows)
    }

    /// What the registry really serves: name -> (type, label names), `le` of histograms
    /// left out (it is the bucket, not a label one selects on).
    fn registered_rows(m: &Metrics) -> BTreeMap<String, DocRow> {
        use prometheus::proto::MetricType;
        m.registry
            .gather()
            .iter()
            .map(|f| {
                let kind = match f.get_field_type() {
                    MetricType::COUNTER => "counter",
                    MetricType::GAUGE => "gauge",
                    MetricType::HISTOGRAM => "histogram",
                    MetricType::SUMMARY => "summary",
                    MetricType::UNTYPED => "untyped",
                };
                let mut labels: Vec<String> = f.get_metric()[0]
                    .get_label()
                    .iter()
                    .map(|l| l.name().to_string())
                    .collect();
                labels.sort();
                (
                    f.name().to_string(),
                    DocRow {
                        kind: kind.to_string(),
                        labels,
                    },
                )
            })
            .collect()
    }

    /// Differences between the doc's rows and the registry's, one line each.
    fn reference_mismatches(
        doc: &BTreeMap<String, DocRow>,
        real: &BTreeMap<String, DocRow>,
    ) -> Vec<String> {
        let mut out = Vec::new();
        for (name, row) in real {
            match doc.get(name) {
                None => out.push(format!("{name} is registered but not in docs/METRICS.md")),
                Some(d) if d != row => out.push(format!(
                    "{name}: docs/METRICS.md says {d:?}, the registry serves {row:?}"
                )),
                Some(_) => {}
            }
        }
        for name in doc.keys().filter(|n| !real.contains_key(*n)) {
            out.push(format!(
                "{name} is in docs/METRICS.md but no such family is registered"
            ));
        }
        out
    }

    /// docs/METRICS.md lists exactly the registered families, with their types and labels.
    /// Every family is touched first (vector families render nothing without a series),
    /// and that touching is itself checked against the registration list, so a family
    /// added later cannot slip past both.
    #[test]
    fn the_metrics_reference_lists_exactly_the_registered_families() {
        let m = Metrics::new();
        touch_all(&m, "a", "t", "0");
        let real = registered_rows(&m);
        let registered: BTreeSet<&str> = m.family_names().iter().map(String::as_str).collect();
        assert_eq!(
            real.keys().map(String::as_str).collect::<BTreeSet<_>>(),
            registered,
            "touch_all must give every registered family a series"
        );
        let doc = std::fs::read_to_string(METRICS_DOC).expect("docs/METRICS.md");
        let rows = doc_rows(&doc).unwrap_or_else(|e| panic!("docs/METRICS.md: {e}"));
        let mismatches = reference_mismatches(&rows, &real);
        assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
    }

    /// The comparison above can fail: a doc without one family, with an invented one, or
    /// with a wrong label set is caught.
    #[test]
    fn the_reference_check_notices_a_missing_an_invented_and_a_wrong_row() {
        let m = Metrics::new();
        touch_all(&m, "a", "t", "0");
        let real = registered_rows(&m);
        let doc = std::fs::read_to_string(METRICS_DOC).expect("docs/METRICS.md");
        let lost = "| `gap_auditor_records_lost_total` |";
        let row = doc
            .lines()
            .find(|l| l.starts_with(lost))
            .expect("the lost counter's row");
        for (what, broken) in [
            ("missing", doc.replace(row, "")),
            (
                "invented",
                doc.replace(
                    row,
                    &format!(
                        "{row}\n| `gap_auditor_records_vanished_total` | counter | `audit` | x |"
                    ),
                ),
            ),
            (
                "wrong labels",
                doc.replace(row, &row.replacen("`partition`", "`offset`", 1)),
            ),
        ] {
            let rows = doc_rows(&broken).expect("parses");
            assert!(
                !reference_mismatches(&rows, &real).is_empty(),
                "a {what} row passed"
            );
        }
    }
}
