use super::*;

#[test]
fn defaults_and_parsing() {
    let r = Retention::from_entries([]);
    assert_eq!(r.ms, Some(604_800_000));
    assert!(r.delete && !r.compact);
    let r = Retention::from_entries([
        ("retention.ms", Some("60000")),
        ("retention.bytes", Some("-1")),
        ("cleanup.policy", Some("compact,delete")),
    ]);
    assert_eq!(
        (r.ms, r.bytes, r.delete, r.compact),
        (Some(60_000), None, true, true)
    );
    let r = Retention::from_entries([
        ("retention.ms", Some("-1")),
        ("cleanup.policy", Some("compact")),
    ]);
    assert_eq!((r.ms, r.delete), (None, false));
}

#[test]
fn deadline_is_timestamp_plus_retention() {
    let r = Retention::from_entries([("retention.ms", Some("60000"))]);
    assert_eq!(r.deadline_ms(Some(1_000)), Some(61_000));
    assert_eq!(r.deadline_ms(None), None);
    let compact = Retention::from_entries([("cleanup.policy", Some("compact"))]);
    assert_eq!(
        compact.deadline_ms(Some(1_000)),
        None,
        "compaction never deletes by time"
    );
}

/// librdkafka sent DescribeConfigs to the controller named in metadata; the mock
/// cluster names broker 0, which does not exist, so every read waited out the whole
/// 10 s timeout (blocking the verify round) and then logged a WARN.
#[tokio::test(flavor = "multi_thread")]
async fn a_broker_without_describe_configs_answers_at_once() {
    let cluster = rdkafka::mocking::MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("t", 1, 1).expect("topic");
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .create()
        .expect("admin client");
    let started = std::time::Instant::now();
    let r = describe(&admin, "t").await;
    assert!(matches!(r, Err(RetentionError::Unsupported)), "{r:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn the_countdown_decreases_and_stops_at_zero() {
    let d = [Some(61_000), None, Some(90_000)];
    assert_eq!(seconds_left(d, 1_000), Some(60.0));
    assert_eq!(seconds_left(d, 31_000), Some(30.0));
    assert_eq!(seconds_left(d, 70_000), Some(0.0));
    assert_eq!(seconds_left([None], 0), None);
}
