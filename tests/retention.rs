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
grace = "6s"
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
    assert_eq!(consumed(&metrics), 200);
    // While it is paused (records not due before 6 s), retention deletes past offset 200.
    produce(&producer, 8_000, &"x".repeat(1024));
    let (low, high) = watermarks();
    assert!(
        low > 200,
        "the mock must have deleted unread records (low={low})"
    );

    let deadline = Instant::now() + Duration::from_secs(60);
    while confirmed(&metrics) < 200 + (high - low) as u64 {
        assert!(
            Instant::now() < deadline,
            "confirmed {} of {}; status {:?}",
            confirmed(&metrics),
            200 + high - low,
            status.snapshot()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
    assert_eq!((g.first_offset, g.last_offset), (200, low - 1));
    assert!(!g.size_known);
    assert_eq!(g.state, GapState::Unrecoverable);
    assert_eq!(lost, (low - 200) as u64);
}
