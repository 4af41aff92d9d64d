//! Retention racing a lagging auditor, on librdkafka's mock cluster (it deletes a
//! partition's oldest records beyond ~5 MiB, like retention; tansu's memory storage never
//! deletes). No external service.
//!
//! The auditor is paused by backpressure (`max_pending`) while Kafka deletes records it has
//! not read. When it resumes, its fetch position is below the log start: the deleted range
//! must become ONE gap of unknown size (`unrecoverable`, counted as lost), never offset
//! holes, and everything around it must still be verified normally.

use gap_auditor::app::{self, AnySink};
use gap_auditor::config::Config;
use gap_auditor::gap::GapState;
use gap_auditor::metrics::Metrics;
use gap_auditor::sink::memory::MemorySink;
use gap_auditor::status::StatusBoard;
use gap_auditor::store::{GapFilter, StateFilter, Store};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

fn produce(producer: &BaseProducer, n: usize, payload: &str) {
    for _ in 0..n {
        while producer
            .send(BaseRecord::<(), str>::to("t").partition(0).payload(payload))
            .is_err()
        {
            producer.poll(Duration::from_millis(10));
        }
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_deleted_while_paused_are_an_unknown_size_gap_not_holes() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("info")
        .with_test_writer()
        .try_init();
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("t", 1, 1).expect("topic");
    let brokers = cluster.bootstrap_servers();
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let probe: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .create()
        .expect("probe");
    let watermarks = || {
        probe
            .fetch_watermarks("t", 0, Duration::from_secs(5))
            .expect("watermarks")
    };

    // Every offset is "in the sink": the only loss is what retention deletes unread.
    let sink = Arc::new(MemorySink::new());
    for o in 0..20_000 {
        sink.insert_offset("t", 0, o);
    }
    let state = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(state.path()).expect("store"));
    let config = Config::from_toml_str(&format!(
        r#"
[kafka]
brokers = "{brokers}"
start = "earliest"
session_timeout = "6s"
heartbeat_interval = "500ms"
[state]
path = "{}"
[[audits]]
name = "a"
topics = ["t"]
grace = "4s"
verify_interval = "250ms"
batch_size = 50
max_pending = 100
[audits.record]
format = "raw"
[audits.match]
strategy = "offset_columns"
[audits.sink]
kind = "mysql"
url = "mysql://u@127.0.0.1:1/db"
table = "x"
"#,
        state.path().display()
    ))
    .expect("config");
    let metrics = Arc::new(Metrics::new());
    let status = StatusBoard::new();
    let cancel = CancellationToken::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let task = tokio::spawn(app::run_with(
        config,
        vec![AnySink::Memory(sink.clone())],
        store.clone(),
        metrics.clone(),
        status.clone(),
        listener,
        cancel.clone(),
    ));
    let consumed = |m: &Metrics| m.records_consumed.with_label_values(&["a", "t", "0"]).get();
    let confirmed = |m: &Metrics| {
        m.records_confirmed
            .with_label_values(&["a", "t", "0"])
            .get()
    };

    produce(&producer, 200, "small record");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !status
        .snapshot()
        .first()
        .is_some_and(|s| s.partitions.first().is_some_and(|p| p.paused))
    {
        assert!(
            Instant::now() < deadline,
            "auditor never paused: {:?}",
            status.snapshot()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(consumed(&metrics), 100, "paused at max_pending");
    // While it is paused (records not due before 4 s), retention deletes past offset 100.
    produce(&producer, 8_000, &"x".repeat(1024));
    let (low, high) = watermarks();
    assert!(
        low > 200,
        "the mock must have deleted unread records (low={low})"
    );

    // Paused at 100 undecided records, the auditor confirms about 100 records per grace
    // period: 300 confirmed means it resumed AT the log start and kept verifying from there.
    let _ = high;
    let deadline = Instant::now() + Duration::from_secs(60);
    while confirmed(&metrics) < 300 {
        assert!(
            Instant::now() < deadline,
            "confirmed {}; status {:?}",
            confirmed(&metrics),
            status.snapshot()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(status.snapshot()[0].partitions[0].consumed > low);
    let lost = metrics
        .records_lost
        .with_label_values(&["a", "t", "0"])
        .get();
    cancel.cancel();
    task.await.expect("join").expect("auditor");
    let gaps = store
        .list_gaps(&GapFilter {
            state: StateFilter::All,
            audit: None,
        })
        .expect("gaps");
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    let g = &gaps[0];
    assert_eq!((g.first_offset, g.last_offset), (100, low - 1));
    assert!(!g.size_known);
    assert_eq!(g.state, GapState::Unrecoverable);
    assert_eq!(lost, (low - 100) as u64);
}

/// SPEC guarantee 6: pending state is capped by `max_pending`; above it consumption
/// pauses, and nothing is dropped — every record is verified once the backlog drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pending_is_capped_by_max_pending_and_nothing_is_dropped() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("t", 1, 1).expect("topic");
    let brokers = cluster.bootstrap_servers();
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    const N: u64 = 2_000;
    const MAX: u64 = 500;
    produce(&producer, N as usize, "r");
    let sink = Arc::new(MemorySink::new());
    for o in 0..N as i64 {
        sink.insert_offset("t", 0, o);
    }
    let state = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(state.path()).expect("store"));
    let config = Config::from_toml_str(&format!(
        r#"
[kafka]
brokers = "{brokers}"
start = "earliest"
session_timeout = "6s"
heartbeat_interval = "500ms"
[state]
path = "{}"
[[audits]]
name = "a"
topics = ["t"]
grace = "3s"
verify_interval = "200ms"
batch_size = 100
max_pending = {MAX}
[audits.record]
format = "raw"
[audits.match]
strategy = "offset_columns"
[audits.sink]
kind = "mysql"
url = "mysql://u@127.0.0.1:1/db"
table = "x"
"#,
        state.path().display()
    ))
    .expect("config");
    let metrics = Arc::new(Metrics::new());
    let status = StatusBoard::new();
    let cancel = CancellationToken::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let task = tokio::spawn(app::run_with(
        config,
        vec![AnySink::Memory(sink.clone())],
        store.clone(),
        metrics.clone(),
        status.clone(),
        listener,
        cancel.clone(),
    ));
    let consumed = || {
        metrics
            .records_consumed
            .with_label_values(&["a", "t", "0"])
            .get()
    };
    let confirmed = || {
        metrics
            .records_confirmed
            .with_label_values(&["a", "t", "0"])
            .get()
    };
    // Until the first records are due (3 s after they were read) nothing is decided, so
    // everything consumed is pending.
    let deadline = Instant::now() + Duration::from_secs(30);
    while consumed() == 0 {
        assert!(Instant::now() < deadline, "never assigned");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut saw_pause = false;
    let mut peak = 0;
    let until = Instant::now() + Duration::from_millis(2_000);
    while Instant::now() < until {
        assert_eq!(confirmed(), 0, "nothing is due yet");
        peak = peak.max(consumed());
        assert!(
            consumed() <= MAX,
            "pending {} above max_pending {MAX}",
            consumed()
        );
        saw_pause |= status
            .snapshot()
            .first()
            .is_some_and(|s| s.partitions.iter().any(|p| p.paused));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(peak, MAX, "consumption stops exactly at the cap");
    assert!(saw_pause, "status shows the pause");
    let deadline = Instant::now() + Duration::from_secs(90);
    while confirmed() < N {
        assert!(
            Instant::now() < deadline,
            "confirmed {} of {N}: something was dropped",
            confirmed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lost = metrics
        .records_lost
        .with_label_values(&["a", "t", "0"])
        .get();
    assert_eq!(consumed(), N);
    cancel.cancel();
    task.await.expect("join").expect("auditor");
    assert_eq!(lost, 0);
}
