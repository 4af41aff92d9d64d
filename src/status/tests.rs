use super::*;

fn status(audit: &str, interval_ms: u64, kafka: Option<i64>, sink: Option<i64>) -> AuditStatus {
    let base = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
    AuditStatus {
        audit: audit.to_string(),
        consumer_group: "gap-auditor".to_string(),
        pipeline_group: Some("flink".to_string()),
        pipeline_group_hold: None,
        pipeline_job: None,
        pipeline_job_state: None,
        sink_table_hold: None,
        dead_letters: None,
        flink: None,
        connect: None,
        stream_load: None,
        sink_kind: "doris".to_string(),
        sink_state: SinkState::Up,
        sink_error: None,
        last_sink_ok: sink.map(|s| base + TimeDelta::seconds(s)),
        last_kafka_ok: kafka.map(|s| base + TimeDelta::seconds(s)),
        verify_interval_ms: interval_ms,
        schema_registry_error: None,
        sink_model: None,
        partitions: vec![PartitionStatus {
            topic: "t".to_string(),
            partition: 0,
            consumed: 10,
            settled: 5,
            pipeline_committed: Some(9),
            log_end: Some(10),
            log_start: Some(0),
            pending: 4,
            missing: 1,
            paused: false,
            awaiting_schema: 0,
            state_problem: None,
            divergence: None,
            pipeline_commits: Vec::new(),
            transaction_hold: None,
        }],
        completeness: AuditCompleteness {
            complete_until_ms: Some(1_700_000_000_000),
            ..Default::default()
        },
    }
}

fn at(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
}

#[test]
fn empty_board_is_not_ready() {
    let b = StatusBoard::new();
    assert!(!b.is_ready(at(0)));
    assert_eq!(b.not_ready_reasons(at(0)).len(), 1);
}

#[test]
fn ready_window_is_twice_the_interval_with_a_10s_floor() {
    let b = StatusBoard::new();
    b.update(status("a", 1_000, Some(0), Some(0)));
    assert!(b.is_ready(at(10)), "10 s floor");
    assert!(!b.is_ready(at(11)));

    b.update(status("a", 30_000, Some(0), Some(0)));
    assert!(b.is_ready(at(60)));
    assert!(!b.is_ready(at(61)));
    assert!(ready_window(u64::MAX) > TimeDelta::days(365), "no overflow");
}

#[test]
fn a_failing_schema_registry_is_not_ready() {
    let b = StatusBoard::new();
    let mut s = status("a", 1_000, Some(0), Some(0));
    s.schema_registry_error = Some("schema registry unavailable: HTTP 503".into());
    b.update(s);
    let reasons = b.not_ready_reasons(at(1));
    assert_eq!(
        reasons,
        ["audit a: the last schema fetch failed: schema registry unavailable: HTTP 503"]
    );
}

#[test]
fn a_failed_last_round_is_not_ready_even_with_a_recent_success() {
    let b = StatusBoard::new();
    let mut s = status("a", 1_000, Some(0), Some(0));
    s.sink_state = SinkState::Down;
    b.update(s);
    assert_eq!(
        b.not_ready_reasons(at(1)),
        vec!["audit a: the last verify round could not query the sink"]
    );
}

#[test]
fn every_audit_needs_both_kafka_and_sink() {
    let b = StatusBoard::new();
    b.update(status("a", 5_000, Some(0), Some(0)));
    b.update(status("b", 5_000, Some(0), None));
    assert!(!b.is_ready(at(1)));
    let reasons = b.not_ready_reasons(at(1));
    assert_eq!(
        reasons,
        vec!["audit b: no successful sink query in the last 10s"]
    );

    b.update(status("b", 5_000, None, Some(0)));
    assert!(b.not_ready_reasons(at(1))[0].contains("Kafka"));
    b.update(status("b", 5_000, Some(1), Some(1)));
    assert!(b.is_ready(at(1)));
    b.remove("b");
    b.remove("a");
    assert!(!b.is_ready(at(1)));
}

#[test]
fn snapshot_is_ordered_and_serializes_snake_case() {
    let b = StatusBoard::new();
    let clone = b.clone();
    clone.update(status("zeta", 5_000, Some(0), None));
    b.update(status("alpha", 5_000, Some(0), Some(0)));
    let snap = b.snapshot();
    assert_eq!(
        snap.iter().map(|s| s.audit.as_str()).collect::<Vec<_>>(),
        ["alpha", "zeta"]
    );
    let v = serde_json::to_value(&snap[0]).unwrap();
    assert_eq!(v["sink_state"], "up");
    assert_eq!(v["partitions"][0]["pipeline_committed"], 9);
    assert_eq!(v["last_kafka_ok"], "2023-11-14T22:13:20Z");
    assert_eq!(v["complete_until"], "2023-11-14T22:13:20Z");
    let c = b.completeness("zeta");
    assert_eq!(c.and_then(|c| c.complete_until_ms), Some(1_700_000_000_000));
    assert_eq!(b.audits(), ["alpha", "zeta"]);
    assert!(b.completeness("nope").is_none());
    assert_eq!(serde_json::to_value(SinkState::Unknown).unwrap(), "unknown");
}
