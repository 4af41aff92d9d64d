//! Behaviour that needs a broker with exact watermarks and retention: librdkafka's mock
//! cluster (`rdkafka::mocking`), which deletes a partition's oldest records once it holds
//! more than ~5 MiB — tansu's memory storage never deletes anything. No external service.

use gap_auditor::app::{self, AnySink};
use gap_auditor::config::Config;
use gap_auditor::gap::GapState;
use gap_auditor::metrics::Metrics;
use gap_auditor::sink::memory::MemorySink;
use gap_auditor::status::StatusBoard;
use gap_auditor::store::{GapFilter, PartitionProgress, StateFilter, Store};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The auditor stopped at offset 0 long ago; meanwhile Kafka retention deleted the start of
/// the partition. On restart it must report the deleted range as a gap of unknown size
/// (state `unrecoverable`, counted as lost), never skip it silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resume_below_log_start_is_an_unknown_size_gap() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic("t", 1, 1).expect("topic");
    let brokers = cluster.bootstrap_servers();
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let payload = "x".repeat(1024);
    for _ in 0..8_000 {
        loop {
            match producer.send(
                BaseRecord::<(), str>::to("t")
                    .partition(0)
                    .payload(&payload),
            ) {
                Ok(()) => break,
                Err((_, _)) => {
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    let probe: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .create()
        .expect("probe");
    let (low, high) = probe
        .fetch_watermarks("t", 0, Duration::from_secs(5))
        .expect("watermarks");
    assert!(
        low > 0,
        "the mock cluster must have deleted old records (low={low}, high={high})"
    );

    let state = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(state.path()).expect("store"));
    store
        .commit_round(
            "a",
            &[],
            &[PartitionProgress {
                topic: "t".into(),
                partition: 0,
                settled: 0,
                ledger: serde_json::json!({}),
                updated_at: chrono::Utc::now(),
            }],
        )
        .expect("seed progress");
    let config = Config::from_toml_str(&format!(
        r#"
[kafka]
brokers = "{brokers}"
session_timeout = "6s"
heartbeat_interval = "500ms"
[state]
path = "{}"
[[audits]]
name = "a"
topics = ["t"]
grace = "1s"
verify_interval = "500ms"
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
    let cancel = CancellationToken::new();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let task = tokio::spawn(app::run_with(
        config,
        vec![AnySink::Memory(Arc::new(MemorySink::new()))],
        store.clone(),
        metrics.clone(),
        StatusBoard::new(),
        listener,
        cancel.clone(),
    ));
    let deadline = Instant::now() + Duration::from_secs(30);
    let gaps = loop {
        let gaps = store
            .list_gaps(&GapFilter {
                state: StateFilter::All,
                audit: None,
            })
            .expect("gaps");
        if !gaps.is_empty() {
            break gaps;
        }
        assert!(Instant::now() < deadline, "no gap for the deleted range");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let lost = metrics
        .records_lost
        .with_label_values(&["a", "t", "0"])
        .get();
    cancel.cancel();
    task.await.expect("join").expect("auditor");
    assert_eq!(gaps.len(), 1);
    let g = &gaps[0];
    assert_eq!((g.first_offset, g.last_offset), (0, low - 1));
    assert!(!g.size_known);
    assert_eq!(g.state, GapState::Unrecoverable);
    assert_eq!(lost, low as u64, "counted as lost so the loss alert fires");
}
