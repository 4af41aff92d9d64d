//! The families against the contract (SPEC.md, docs/METRICS.md) and promtool.

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
    ("gap_auditor_records_dead_lettered_total", "counter"),
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
    ("gap_auditor_gaps_folded_total", "counter"),
    ("gap_auditor_build_info", "gauge"),
];

/// Families beyond the contract's table (root-cause reporting), kept deliberately few.
const EXTRA_FAMILIES: &[(&str, &str)] = &[
    ("gap_auditor_gaps_detected_total", "counter"),
    ("gap_auditor_pipeline_rewinds_total", "counter"),
    ("gap_auditor_pipeline_stalls_total", "counter"),
    ("gap_auditor_log_divergences_total", "counter"),
    ("gap_auditor_records_future_timestamp_total", "counter"),
    ("gap_auditor_missing_keys_dropped_total", "counter"),
    ("gap_auditor_due_keys_counted_total", "counter"),
    ("gap_auditor_audit_info", "gauge"),
    ("gap_auditor_records_awaiting_schema", "gauge"),
    ("gap_auditor_schema_registry_up", "gauge"),
    ("gap_auditor_dead_letters_ignored_total", "counter"),
    ("gap_auditor_records_acknowledged_total", "counter"),
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
        &m.records_acknowledged,
        &m.records_unverifiable,
        &m.records_duplicated,
        &m.records_dead_lettered,
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
    m.dead_letters_ignored
        .with_label_values(&[audit, "headers"])
        .inc();
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
    m.due_keys_counted.with_label_values(&[audit, "time"]).inc();
    m.gaps_folded.with_label_values(&[audit]).inc();
    m.gaps_detected
        .with_label_values(&[audit, "skipped_by_restart"])
        .inc();
    m.pipeline_rewinds
        .with_label_values(&[audit, topic, partition])
        .inc();
    m.pipeline_stalls
        .with_label_values(&[audit, topic, partition])
        .inc();
    m.log_divergences
        .with_label_values(&[audit, topic, partition, "truncated"])
        .inc();
    m.records_future_timestamp
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
    assert!(text.contains("gap_auditor_settled_offset{audit=\"b\",partition=\"0\",topic=\"t\"} 7"));
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
        text.contains("gap_auditor_records_lost_total{audit=\"a\",partition=\"0\",topic=\"t\"}"),
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
    let required =
        std::env::var_os("CI").is_some() || std::env::var_os("GAP_AUDITOR_TEST_PROMTOOL").is_some();
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
                &format!("{row}\n| `gap_auditor_records_vanished_total` | counter | `audit` | x |"),
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

/// The audit facade keeps series handles; a series the loop removes must come back when
/// the loop reports it again, with the new value — never a handle detached from the
/// registry whose updates no scrape sees (the old code looked every series up each time).
#[test]
fn the_audit_facade_exports_again_what_it_removed() {
    use super::audit::{AuditMetrics, PartitionGauges};
    use crate::types::TopicPartition;
    let families = std::sync::Arc::new(Metrics::new());
    let m = AuditMetrics::new(families.clone(), "a");
    let tp = TopicPartition::new("t".to_string(), 0);
    let gauges = |settled: i64, unrecoverable: Option<f64>| PartitionGauges {
        pending: 1,
        awaiting_schema: 0,
        missing: 2,
        gaps_open: 1,
        unrecoverable_seconds: unrecoverable,
        consumed_offset: settled + 1,
        settled_offset: settled,
        pipeline_committed: Some(settled),
        log_end: Some(settled + 5),
    };
    let series = |page: &str, name: &str| {
        page.lines()
            .find(|l| l.starts_with(&format!("{name}{{")) && l.contains("audit=\"a\""))
            .map(|l| l.rsplit(' ').next().unwrap_or("").to_string())
    };
    m.partition(&tp).published(&gauges(10, Some(60.0)));
    m.complete_until(Some(5_000));
    let page = families.render();
    assert_eq!(
        series(&page, "gap_auditor_settled_offset").as_deref(),
        Some("10")
    );
    assert_eq!(
        series(&page, "gap_auditor_gap_unrecoverable_seconds").as_deref(),
        Some("60")
    );
    assert_eq!(
        series(&page, "gap_auditor_log_end_offset").as_deref(),
        Some("15")
    );
    assert_eq!(
        series(&page, "gap_auditor_complete_until_timestamp_seconds").as_deref(),
        Some("5")
    );

    // Revoked: every gauge goes, then the partition comes back and is published again.
    m.partition_revoked(&tp);
    let page = families.render();
    for name in [
        "gap_auditor_settled_offset",
        "gap_auditor_records_pending",
        "gap_auditor_gap_unrecoverable_seconds",
        "gap_auditor_log_end_offset",
        "gap_auditor_pipeline_committed_offset",
    ] {
        assert_eq!(series(&page, name), None, "{name} left with the partition");
    }
    m.partition(&tp).published(&gauges(20, Some(30.0)));
    let page = families.render();
    assert_eq!(
        series(&page, "gap_auditor_settled_offset").as_deref(),
        Some("20")
    );
    assert_eq!(
        series(&page, "gap_auditor_records_pending").as_deref(),
        Some("1")
    );
    assert_eq!(
        series(&page, "gap_auditor_gap_unrecoverable_seconds").as_deref(),
        Some("30")
    );
    assert_eq!(
        series(&page, "gap_auditor_log_end_offset").as_deref(),
        Some("25")
    );
    assert_eq!(
        series(&page, "gap_auditor_pipeline_committed_offset").as_deref(),
        Some("20")
    );

    // Unknown deadline / completeness: no series; known again: the series is back.
    m.partition(&tp).published(&gauges(21, None));
    m.complete_until(None);
    let page = families.render();
    assert_eq!(series(&page, "gap_auditor_gap_unrecoverable_seconds"), None);
    assert_eq!(
        series(&page, "gap_auditor_complete_until_timestamp_seconds"),
        None
    );
    m.partition(&tp).published(&gauges(22, Some(7.0)));
    m.complete_until(Some(9_000));
    let page = families.render();
    assert_eq!(
        series(&page, "gap_auditor_gap_unrecoverable_seconds").as_deref(),
        Some("7")
    );
    assert_eq!(
        series(&page, "gap_auditor_complete_until_timestamp_seconds").as_deref(),
        Some("9")
    );
    assert_eq!(
        series(&page, "gap_auditor_settled_offset").as_deref(),
        Some("22")
    );
}

#[test]
fn every_confirmed_record_is_one_visibility_observation() {
    let m = std::sync::Arc::new(Metrics::new());
    let a = AuditMetrics::new(m.clone(), "a");
    let p = a.partition(&crate::types::TopicPartition::new("t", 0));
    let applied = crate::ledger::Applied {
        confirmed: 5,
        confirmed_ts: vec![(Some(1_000), 3), (None, 1), (Some(3_500), 1)],
        ..Default::default()
    };
    p.decided(&applied, 4_000);
    let text = m.render();
    // 3 records at 3 s, 1 at 0.5 s; the one without a timestamp is not observed.
    for line in [
        "gap_auditor_sink_visibility_seconds_count{audit=\"a\",topic=\"t\"} 4",
        "gap_auditor_sink_visibility_seconds_sum{audit=\"a\",topic=\"t\"} 9.5",
        "gap_auditor_records_confirmed_total{audit=\"a\",partition=\"0\",topic=\"t\"} 5",
    ] {
        assert!(text.contains(line), "no {line:?} in:\n{text}");
    }
}
