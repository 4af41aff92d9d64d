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

pub mod audit;

pub use audit::{AuditMetrics, Ingested, PartitionGauges, PartitionMetrics};
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
/// Labels of `gap_auditor_log_divergences_total`.
const DIVERGENCE_LABELS: &[&str] = &["audit", "topic", "partition", "kind"];

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
/// One field per metric family SPEC names (they are the contract dashboards and alerts
/// read), so the struct is as wide as the list of families.
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
    /// `gap_auditor_records_acknowledged_total{audit,topic,partition}`: missing records
    /// whose gap an operator acknowledged, counted when the owning daemon takes the
    /// acknowledgement in (GapAuditorDataLoss ends when every record lost in its window is
    /// acknowledged, config/alerts).
    pub records_acknowledged: IntCounterVec,
    /// `gap_auditor_records_unverifiable_total{audit,topic,partition}`: records Kafka
    /// deleted before the auditor could check them (never added to `records_lost_total`).
    pub records_unverifiable: IntCounterVec,
    /// `gap_auditor_records_duplicated_total{audit,topic,partition}`.
    pub records_duplicated: IntCounterVec,
    /// `gap_auditor_records_dead_lettered_total{audit,topic,partition}`: expected records
    /// absent from the sink whose coordinates a record of the pipeline's dead-letter topic
    /// names (not lost; SPEC "Pipeline position and evidence").
    pub records_dead_lettered: IntCounterVec,
    /// Beyond SPEC's table: `gap_auditor_dead_letters_ignored_total{audit,reason}`: records
    /// of the dead-letter topic that name no record this audit reads (`headers`: missing or
    /// unreadable `__connect.errors.*` headers; `other_topic`: a topic it does not audit;
    /// `other_connector`: written by another connector than `connect_connector`;
    /// `beyond_log_end`: an offset at or beyond the audited partition's high watermark).
    pub dead_letters_ignored: IntCounterVec,
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
    /// `gap_auditor_due_keys_counted_total{audit,how}`: key_columns, distinct due keys
    /// counted in the sink, `how` `time` (from one read of their seconds' rows) or `key`
    /// (key by key).
    pub due_keys_counted: IntCounterVec,
    /// `gap_auditor_gaps_folded_total{audit}`: gaps folded into their partition's overflow
    /// gap because the audit held more than `max_open_gaps` in memory (SPEC guarantee 12).
    pub gaps_folded: IntCounterVec,
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
    /// Beyond SPEC's table: a partition's log no longer held the auditor's position
    /// (`kind`: `truncated` or `recreated`), and reading resumed where the new log diverged
    /// (labels: audit, topic, partition, kind).
    pub log_divergences: IntCounterVec,
    /// Beyond SPEC's table: records whose timestamp was ahead of the auditor's clock when
    /// read, clamped to it for completeness (SPEC "Completeness": never ahead of the wall
    /// clock).
    pub records_future_timestamp: IntCounterVec,
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
            records_acknowledged: f.int_counter(
                "gap_auditor_records_acknowledged_total",
                "Missing records whose gap an operator acknowledged (counted once, when the daemon owning the partition takes the acknowledgement in).",
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
            records_dead_lettered: f.int_counter(
                "gap_auditor_records_dead_lettered_total",
                "Expected records absent from the sink that the pipeline's dead-letter topic names (not lost).",
                p,
            ),
            dead_letters_ignored: f.int_counter(
                "gap_auditor_dead_letters_ignored_total",
                "Dead-letter topic records naming no audited record (reason: headers, other_topic, other_connector, beyond_log_end).",
                &["audit", "reason"],
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
            due_keys_counted: f.int_counter(
                "gap_auditor_due_keys_counted_total",
                "key_columns: distinct due keys counted in the sink, by how: time (from one read of the rows of their seconds) or key (key by key).",
                &["audit", "how"],
            ),
            gaps_folded: f.int_counter(
                "gap_auditor_gaps_folded_total",
                "Gaps folded into their partition's overflow gap beyond max_open_gaps: their records are no longer re-checked; the overflow gap spans them and counts their missing records.",
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
                "Gaps detected, by cause: skipped_by_restart, dropped_in_flight, deleted_unread, unknown, dead_lettered (records the pipeline dead-lettered: not lost).",
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
            log_divergences: f.int_counter(
                "gap_auditor_log_divergences_total",
                "Times a partition's log no longer held the auditor's position (kind: truncated below it, or the topic recreated); reading resumed where the new log diverged, and the old log's records beyond it are neither lost nor confirmed.",
                DIVERGENCE_LABELS,
            ),
            records_future_timestamp: f.int_counter(
                "gap_auditor_records_future_timestamp_total",
                "Records whose timestamp was ahead of the auditor's clock when read (completeness counts them as read at that instant).",
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
            &self.records_acknowledged,
            &self.records_unverifiable,
            &self.records_duplicated,
            &self.records_dead_lettered,
            &self.pipeline_rewinds,
            &self.pipeline_stalls,
            &self.records_future_timestamp,
        ] {
            // Err only means the series did not exist: nothing to drop.
            let _ = c.remove_label_values(&key);
        }
        remove_with_prefix(&self.records_filtered, FILTERED_LABELS, &key);
        remove_with_prefix(&self.log_divergences, DIVERGENCE_LABELS, &key);
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
mod tests;
