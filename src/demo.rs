//! `gap-auditor demo`: the seed incident, reproduced in one process with no external
//! services, and caught.
//!
//! - Kafka: librdkafka's built-in mock cluster (`rdkafka::mocking`), a real protocol peer.
//! - Pipeline: SIMULATED — a consumer in group `FlinkSQLFromKafka2Doris` that writes rows
//!   to the sink and commits after writing, killed after records 0–1 and restarted from
//!   `latest` after 2–3 were produced, exactly like the Flink job of the incident.
//! - Sink: SIMULATED — an in-process table standing in for Doris.
//! - Auditor: the real daemon code (`app::run_with`) running the repository's documented
//!   `config/gap-auditor.toml` (key columns client_ip, domain, time against the seed's
//!   table), with brokers, start, state path and timings overridden through
//!   `GAP_AUDITOR__…` variables exactly as an operator would.

use crate::app::{self, AnySink};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::record::Key;
use crate::sink::memory::MemorySink;
use crate::status::StatusBoard;
use crate::store::{GapFilter, StateFilter, Store};
use anyhow::Context;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset as KOffset, TopicPartitionList};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const TOPIC: &str = "test";
/// `config/gap-auditor.toml`, built in so the demo needs no file.
const EXAMPLE_CONFIG: &str = include_str!("../config/gap-auditor.toml");
const PIPELINE_GROUP: &str = "FlinkSQLFromKafka2Doris";

/// The seed's records: pipe-delimited DNS log lines, 9 fields.
fn dns_line(i: usize) -> String {
    format!(
        "192.168.1.{}|www.example{}.com|2024-05-01 12:00:0{}|93.184.216.{}|NOERROR|A|ns1.example.com|-|8.8.8.8",
        10 + i,
        i,
        i,
        30 + i
    )
}

fn key_of(line: &str) -> Key {
    Key::new(line.split('|').take(3))
}

/// Runs the demonstration; returns once the gap is reported (or after a timeout).
pub async fn run(listen: SocketAddr, cancel: CancellationToken) -> anyhow::Result<()> {
    let cluster = MockCluster::new(1).context("starting librdkafka's mock cluster")?;
    cluster
        .create_topic(TOPIC, 1, 1)
        .context("creating topic")?;
    let brokers = cluster.bootstrap_servers();
    let state = tempdir()?;
    println!("gap-auditor demo — the seed incident, end to end (nothing external needed)\n");
    println!("  Kafka    : librdkafka mock cluster at {brokers}, topic `{TOPIC}`");
    println!("  pipeline : SIMULATED consumer group `{PIPELINE_GROUP}` (writes, then commits)");
    println!("  sink     : SIMULATED in-process table standing in for Doris");
    println!(
        "  auditor  : the real daemon running config/gap-auditor.toml (key_columns client_ip,\n             domain, time), brokers/state/grace overridden by GAP_AUDITOR__ variables\n"
    );

    // The repository's documented example config, as shipped, with only what a deployment
    // changes overridden the way an operator would: through GAP_AUDITOR__ variables.
    let example = state.path().join("gap-auditor.toml");
    std::fs::write(&example, EXAMPLE_CONFIG).context("writing the example config")?;
    let overrides = [
        ("KAFKA__BROKERS", brokers.as_str()),
        ("KAFKA__START", "earliest"),
        ("KAFKA__SESSION_TIMEOUT", "6s"),
        ("KAFKA__HEARTBEAT_INTERVAL", "500ms"),
        (
            "STATE__PATH",
            &state.path().join("store").display().to_string(),
        ),
        ("AUDITS__0__GRACE", "2s"),
        ("AUDITS__0__VERIFY_INTERVAL", "1s"),
    ]
    .map(|(k, v)| (format!("GAP_AUDITOR__{k}"), v.to_string()));
    let config = Config::load_with_env(Some(&example), overrides).context("demo configuration")?;
    let store_path = config.state.path.clone();
    let sink = Arc::new(MemorySink::new());
    let store = Arc::new(Store::open(&store_path)?);
    let metrics = Arc::new(Metrics::new());
    let status = StatusBoard::new();
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(_) => tokio::net::TcpListener::bind("127.0.0.1:0").await?,
    };
    let addr = listener.local_addr()?;
    println!("  metrics  : http://{addr}/metrics   gaps: http://{addr}/api/gaps\n");
    let auditor_cancel = cancel.child_token();
    let auditor = tokio::spawn(app::run_with(
        config,
        vec![AnySink::Memory(sink.clone())],
        store.clone(),
        metrics.clone(),
        status,
        listener,
        auditor_cancel.clone(),
    ));

    let pipeline_sink = sink.clone();
    let b = brokers.clone();
    tokio::task::spawn_blocking(move || simulate_incident(&b, &pipeline_sink))
        .await
        .context("pipeline simulation")??;

    println!("\nauditor: waiting for the records to become due (pipeline commit + grace)...");
    let deadline = Instant::now() + Duration::from_secs(60);
    let filter = GapFilter {
        state: StateFilter::All,
        audit: None,
    };
    let mut found = Vec::new();
    while Instant::now() < deadline && !cancel.is_cancelled() {
        let confirmed: u64 = metrics
            .records_confirmed
            .with_label_values(&["dns_logs", TOPIC, "0"])
            .get();
        found = store.list_gaps(&filter)?;
        if !found.is_empty() && confirmed >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    println!();
    if found.is_empty() {
        println!("auditor: no gap reported within 60s — this should not happen; see the log above");
    }
    for g in &found {
        println!(
            "auditor: GAP {}-{} offsets {}–{}, {} records, {} (id {})",
            g.topic, g.partition, g.first_offset, g.last_offset, g.missing_records, g.state, g.id
        );
    }
    let m = |f: &prometheus::IntCounterVec| f.with_label_values(&["dns_logs", TOPIC, "0"]).get();
    println!(
        "\nmetrics: consumed {} · expected {} · confirmed {} · lost {}   (gap_auditor_records_*_total)",
        m(&metrics.records_consumed),
        m(&metrics.records_expected),
        m(&metrics.records_confirmed),
        m(&metrics.records_lost)
    );
    println!(
        "the pipeline's group lag is 0 — it committed past the lost records; only the audit sees them."
    );
    auditor_cancel.cancel();
    auditor.await.context("auditor task")??;
    drop(cluster);
    if found
        .iter()
        .any(|g| g.first_offset == 2 && g.last_offset == 3 && g.missing_records == 2)
    {
        Ok(())
    } else {
        anyhow::bail!("the demo did not find the expected gap (offsets 2–3)")
    }
}

/// The incident: write 0–1, crash, 2–3 produced meanwhile, restart from latest, write 4–5.
fn simulate_incident(brokers: &str, sink: &MemorySink) -> anyhow::Result<()> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()?;
    let produce = |from: usize, to: usize| -> anyhow::Result<()> {
        for i in from..to {
            let line = dns_line(i);
            producer
                .send(BaseRecord::<(), str>::to(TOPIC).payload(line.as_str()))
                .map_err(|(e, _)| e)?;
            // One record per batch keeps offsets obvious.
            producer.flush(Duration::from_secs(5))?;
        }
        Ok(())
    };
    produce(0, 2)?;
    println!("pipeline [SIMULATED]: started, reading from the beginning");
    run_pipeline(brokers, sink, KOffset::Beginning, 2)?;
    println!("pipeline [SIMULATED]: wrote offsets 0–1, committed 2 — then the job was KILLED");
    produce(2, 4)?;
    println!("producer            : offsets 2–3 produced while the pipeline was down");
    println!("pipeline [SIMULATED]: restarted with scan.startup.mode = latest-offset");
    let restarted = std::thread::scope(|s| {
        let h = s.spawn(|| run_pipeline(brokers, sink, KOffset::End, 2));
        std::thread::sleep(Duration::from_millis(1500));
        produce(4, 6)?;
        h.join()
            .map_err(|_| anyhow::anyhow!("pipeline thread panicked"))?
    });
    restarted?;
    println!(
        "pipeline [SIMULATED]: wrote offsets 4–5, committed 6 — its lag is 0, nothing looks wrong"
    );
    Ok(())
}

/// A pipeline run: assign partition 0 at `start`, write `count` records to the sink, commit
/// after each write (as Flink does on checkpoint).
fn run_pipeline(
    brokers: &str,
    sink: &MemorySink,
    start: KOffset,
    count: usize,
) -> anyhow::Result<()> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", PIPELINE_GROUP)
        .set("enable.auto.commit", "false")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(TOPIC, 0, start)?;
    consumer.assign(&tpl)?;
    let mut written = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while written < count && Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m?;
            if let Some(Ok(line)) = m.payload_view::<str>() {
                sink.insert_key(&key_of(line));
            }
            let mut c = TopicPartitionList::new();
            c.add_partition_offset(TOPIC, 0, KOffset::Offset(m.offset() + 1))?;
            consumer.commit(&c, CommitMode::Sync)?;
            written += 1;
        }
    }
    anyhow::ensure!(
        written == count,
        "pipeline read {written} of {count} records"
    );
    Ok(())
}

fn tempdir() -> anyhow::Result<TempDir> {
    let base = std::env::temp_dir().join(format!("gap-auditor-demo-{}", std::process::id()));
    std::fs::create_dir_all(&base)?;
    Ok(TempDir(base))
}

/// A directory removed on drop (the demo's gap store).
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
