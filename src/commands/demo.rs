//! `gap-auditor demo`: the seed incident, reproduced in one process with no external
//! services, caught with its cause, and repaired.
//!
//! - Kafka: librdkafka's built-in mock cluster (`rdkafka::mocking`), a real protocol peer.
//! - Pipeline: SIMULATED — a Flink-like job in group `FlinkSQLFromKafka2Doris` that writes
//!   rows to the sink and commits on checkpoint, killed after records 0–1 and restarted
//!   from `latest` after 2–3 were produced, exactly like the job of the incident.
//! - Sink: SIMULATED — an in-process table standing in for Doris.
//! - Auditor: the real daemon code (`app::run_with`) running the repository's documented
//!   `config/gap-auditor.toml` (key columns client_ip, domain, time against the seed's
//!   table), with brokers, start, state path and timings overridden through
//!   `GAP_AUDITOR__…` variables exactly as an operator would. It runs as a sidecar from
//!   the start, so it sees the pipeline's commits move and can name the cause.
//! - Repair: the real `replay` code ([`crate::commands::replay::run`]) into the simulated table.

use crate::app;
use crate::commands::replay::{self, Destination, Outcome};
use crate::config::Config;
use crate::gap::{Gap, GapCause, GapState};
use crate::metrics::Metrics;
use crate::sink::AnySink;
use crate::sink::memory::MemorySink;
use crate::status::StatusBoard;
use crate::store::{GapFilter, StateFilter, Store};
use crate::types::{Key, Offset};
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
const AUDIT: &str = "dns_logs";
/// `config/gap-auditor.toml`, built in so the demo needs no file.
const EXAMPLE_CONFIG: &str = include_str!("../../config/gap-auditor.toml");
const PIPELINE_GROUP: &str = "FlinkSQLFromKafka2Doris";
/// The seed's csv columns (its `dns_logs` lines), in order: what `config/gap-auditor.toml`
/// declares, and the one list the tests and benchmarks build seed records from.
pub const SEED_FIELDS: [&str; 9] = [
    "client_ip",
    "domain",
    "time",
    "target_ip",
    "rcode",
    "query_type",
    "authority_record",
    "add_msg",
    "dns_ip",
];
/// The example's 30 s grace and 5 s rounds would make a newcomer wait a minute; the mock
/// cluster and the in-process table answer at once.
const GRACE: &str = "1s";
const VERIFY_INTERVAL: &str = "250ms";
/// How long any one step may wait for the auditor: far beyond what it needs (a few
/// rounds), so only a broken demo reaches it.
const STEP_TIMEOUT: Duration = Duration::from_secs(20);
/// Kafka calls of the simulated pipeline.
const KAFKA_TIMEOUT: Duration = Duration::from_secs(5);

/// The demo's repair: `gap-auditor replay --gap ID --to-sink` into `table`, as the CLI
/// runs it (marked before the write, since a verify round between the write and the mark
/// would settle the gap `late` for good, and logged in the store). The CLI's tests compare
/// the two (src/cli/replay.rs).
pub async fn replay_gap(
    config: &Config,
    store: &Store,
    gap_id: &str,
    table: &AnySink,
) -> anyhow::Result<(replay::Target, replay::Replayed)> {
    let req = replay::Request {
        target: replay::target_of_gap(store, gap_id)?,
        dest: Destination::Sink,
        dry_run: false,
        force: false,
    };
    let replayed = replay::run(config, store, &req, table).await?;
    Ok((req.target, replayed))
}

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

/// Runs the demonstration: detection with its cause, then the repair. Fails when the
/// auditor does not tell the story it should (the gap, its cause, the repair).
pub async fn run(listen: SocketAddr, cancel: CancellationToken) -> anyhow::Result<()> {
    let cluster = MockCluster::new(1).context("starting librdkafka's mock cluster")?;
    cluster
        .create_topic(TOPIC, 1, 1)
        .context("creating topic")?;
    let brokers = cluster.bootstrap_servers();
    let state = tempdir()?;
    println!("gap-auditor demo — the seed incident, end to end (nothing external needed)\n");
    println!("  Kafka    : librdkafka mock cluster at {brokers}, topic `{TOPIC}` (1 partition)");
    println!(
        "  pipeline : SIMULATED Flink job, consumer group `{PIPELINE_GROUP}` (writes, then commits)"
    );
    println!("  sink     : SIMULATED in-process table standing in for Doris");
    println!(
        "  auditor  : the real daemon as a sidecar, running config/gap-auditor.toml (key_columns\n             client_ip, domain, time); brokers, state and timings (grace {GRACE}, verify\n             every {VERIFY_INTERVAL}) overridden by GAP_AUDITOR__ variables"
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
        ("AUDITS__0__GRACE", GRACE),
        ("AUDITS__0__VERIFY_INTERVAL", VERIFY_INTERVAL),
    ]
    .map(|(k, v)| (format!("GAP_AUDITOR__{k}"), v.to_string()));
    let config = Config::load_with_env(Some(&example), overrides).context("demo configuration")?;
    let sink = Arc::new(MemorySink::new());
    let store = Arc::new(Store::open(&config.state.path)?);
    let metrics = Arc::new(Metrics::new());
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            let l = tokio::net::TcpListener::bind((listen.ip(), 0))
                .await
                .with_context(|| format!("listening on a free port of {}", listen.ip()))?;
            println!("  ({listen} is in use: serving on a free port instead)");
            l
        }
        Err(e) => return Err(e).with_context(|| format!("listening on {listen}")),
    };
    let addr = listener.local_addr()?;
    println!("  metrics  : http://{addr}/metrics   gaps: http://{addr}/api/gaps\n");

    let auditor_cancel = cancel.child_token();
    let mut auditor = tokio::spawn(app::run_with(
        config.clone(),
        vec![AnySink::Memory(sink.clone())],
        store.clone(),
        metrics.clone(),
        StatusBoard::new(),
        listener,
        auditor_cancel.clone(),
    ));
    let story = tokio::select! {
        r = tell(&config, &brokers, &sink, &store, &metrics, &cancel) => r,
        // The auditor stopping on its own is a failure the story must not wait out.
        r = &mut auditor => {
            r.context("auditor task")??;
            anyhow::bail!("the auditor stopped before the demo ended")
        }
    };
    auditor_cancel.cancel();
    auditor.await.context("auditor task")??;
    drop(cluster);
    story
}

/// The incident, the detection and the repair, in order; each step waits until the
/// auditor has seen what the next one depends on, so the story does not depend on timing.
async fn tell(
    config: &Config,
    brokers: &str,
    sink: &Arc<MemorySink>,
    store: &Store,
    metrics: &Metrics,
    cancel: &CancellationToken,
) -> anyhow::Result<()> {
    let sim = Arc::new(Simulation::new(brokers, sink.clone())?);
    let labels = [AUDIT, TOPIC, "0"];
    let seen_commit = |want: Offset| {
        let g = metrics.pipeline_committed_offset.with_label_values(&labels);
        move || Ok((g.get() == want).then_some(()))
    };

    blocking(&sim, |s| s.produce(0, 2)).await?;
    println!("producer : offsets 0–1 produced");
    let job = blocking(&sim, |s| {
        let job = s.start(KOffset::Beginning)?;
        s.write(&job, 2)?;
        Ok(job)
    })
    .await?;
    println!(
        "pipeline : started from the earliest offset, wrote offsets 0–1, checkpoint commits 2"
    );
    until(
        "the auditor to see the pipeline's commit 2",
        cancel,
        seen_commit(2),
    )
    .await?;
    println!("auditor  : sees pipeline group {PIPELINE_GROUP} at 2");
    blocking(&sim, move |_| {
        drop(job);
        Ok(())
    })
    .await?;
    println!("pipeline : KILLED");
    blocking(&sim, |s| s.produce(2, 4)).await?;
    println!("producer : offsets 2–3 produced while the pipeline is down");
    // The auditor tails them as they are written; waited for, so the story does not hang
    // on the mock cluster's fetch timing. A record the auditor has not read yet is not
    // decided when its commit falls due, only in the round after it is read: offset 3,
    // read late, was decided a round after 2 and the gap alerted twice (2–2, then 2–3),
    // in 1 of 3 to 10 runs.
    let consumed = metrics.records_consumed.with_label_values(&labels);
    until("the auditor to read offsets 2–3", cancel, || {
        Ok((consumed.get() >= 4).then_some(()))
    })
    .await?;
    let (job, start) = blocking(&sim, |s| {
        let latest = s.latest()?;
        let job = s.start(KOffset::Offset(latest))?;
        s.commit(&job, latest)?;
        Ok((job, latest))
    })
    .await?;
    println!(
        "pipeline : restarted with scan.startup.mode = latest-offset: starts at {start}, checkpoint commits {start}"
    );
    until(
        "the auditor to see the pipeline's commit 4",
        cancel,
        seen_commit(4),
    )
    .await?;
    println!("auditor  : sees pipeline group {PIPELINE_GROUP} move 2 → 4");
    blocking(&sim, move |s| {
        s.produce(4, 6)?;
        s.write(&job, 2)
    })
    .await?;
    println!("producer : offsets 4–5 produced");
    println!(
        "pipeline : wrote offsets 4–5, checkpoint commits 6 — its lag is 0, every lag exporter is green"
    );

    println!(
        "\nauditor  : checking the sink once each record is due (pipeline commit + grace {GRACE});\n           alerts go to its log (stderr), gaps to its store, /api/gaps and /metrics"
    );
    // Reported once the store holds the gap, the records around it are confirmed and the
    // round that found it has published its gauges.
    let confirmed = metrics.records_confirmed.with_label_values(&labels);
    let missing = metrics.records_missing.with_label_values(&labels);
    let all = GapFilter {
        state: StateFilter::All,
        audit: None,
    };
    let gap = until("the auditor to report the gap", cancel, || {
        let gap = store.list_gaps(&all)?.into_iter().next();
        Ok(gap.filter(|g| confirmed.get() >= 4 && missing.get() == g.missing_records as i64))
    })
    .await?;
    println!("{}", gap_line(&gap, gap.missing_records));
    println!("{}", cause_lines(&gap));
    print_metrics(metrics);

    println!(
        "\nreplay   : gap-auditor replay --gap {} --to-sink   (the replay code, into the simulated table)",
        gap.id
    );
    let table = AnySink::Memory(sink.clone());
    let (target, replayed) = replay_gap(config, store, &gap.id, &table).await?;
    let mut written = 0;
    for o in &replayed.outcomes {
        let line = match o {
            Outcome::Written { offset } => {
                written += 1;
                format!("offset {offset}: read from Kafka, written to the sink")
            }
            Outcome::Present { offset } => format!("offset {offset}: already in the sink"),
            Outcome::Filtered { offset, reason } => {
                format!("offset {offset}: not expected in the sink ({reason})")
            }
            Outcome::Failed { offset, error } => format!("offset {offset}: FAILED: {error}"),
        };
        println!(
            "           {}-{} {line}",
            target.tp.topic, target.tp.partition
        );
    }
    anyhow::ensure!(
        written == gap.missing_records,
        "replay wrote {written} of the gap's {} records",
        gap.missing_records
    );
    // Logged as the CLI logs it: the demo exercises the same bookkeeping.
    anyhow::ensure!(
        store.last_write_of_gap(&gap.id)?.is_some(),
        "the replay of gap {} is not in the store's replay log",
        gap.id
    );
    println!("auditor  : re-checks the gap's records in the sink...");
    let repaired = until("the auditor to confirm the repair", cancel, || {
        Ok(store
            .get_gap(&gap.id)?
            .filter(|g| g.state == GapState::Repaired))
    })
    .await?;
    println!("{}", gap_line(&repaired, gap.missing_records));
    // The gauges follow once the round that repaired the gap has published.
    until("the metrics to show the repair", cancel, || {
        Ok((missing.get() == 0).then_some(()))
    })
    .await?;
    print_metrics(metrics);
    println!(
        "           (lost counts each record once, for good; late counts those found afterwards)"
    );

    let cause = (gap.cause, gap.pipeline_commit_from, gap.pipeline_commit_to);
    anyhow::ensure!(
        (gap.first_offset, gap.last_offset, gap.missing_records) == (2, 3, 2),
        "expected the gap at offsets 2–3 (2 records), found {}–{} ({} records)",
        gap.first_offset,
        gap.last_offset,
        gap.missing_records
    );
    anyhow::ensure!(
        cause == (GapCause::SkippedByRestart, Some(2), Some(4)),
        "expected cause skipped_by_restart with the commit jump 2 → 4, found {cause:?}"
    );
    println!(
        "\nNext: copy config/gap-auditor.toml, set brokers, pipeline_group and the sink, then\n`gap-auditor validate-config -c FILE` and `gap-auditor run -c FILE` (see README.md)."
    );
    Ok(())
}

/// `records`: the gap's size when detected (a repaired gap has none missing any more).
fn gap_line(g: &Gap, records: u64) -> String {
    format!(
        "GAP {}-{} offsets {}–{}, {records} records, {} (id {})",
        g.topic, g.partition, g.first_offset, g.last_offset, g.state, g.id
    )
}

/// The cause in words, and how long a replay can still repair it.
fn cause_lines(g: &Gap) -> String {
    let step = match (
        g.pipeline_commit_from,
        g.pipeline_commit_to,
        g.pipeline_commit_at,
    ) {
        (Some(from), Some(to), Some(at)) => format!(
            "the pipeline group's commit jumped {from} → {to} at {} UTC",
            at.format("%H:%M:%S")
        ),
        _ => "no commit step of the pipeline group covers it".to_string(),
    };
    let words = match g.cause {
        GapCause::SkippedByRestart => format!(
            "the restarted job started at latest and skipped offsets {}–{}",
            g.first_offset, g.last_offset
        ),
        GapCause::DroppedInFlight => "committed in normal progress, never written".to_string(),
        GapCause::DeletedUnread => "Kafka deleted the records before anyone read them".to_string(),
        GapCause::Unknown => "the commits seen do not tell".to_string(),
        GapCause::Folded => "several gaps folded into one beyond max_open_gaps".to_string(),
        GapCause::DeadLettered => "the pipeline wrote them to its dead-letter topic".to_string(),
        GapCause::SkippedByAlter => format!(
            "an ALTER of the Routine Load job moved it over offsets {}–{}",
            g.first_offset, g.last_offset
        ),
    };
    let deadline = match g.unrecoverable_at {
        Some(at) => format!(
            "possible until {} UTC, when Kafka retention deletes offset {}",
            at.format("%Y-%m-%d %H:%M:%S"),
            g.first_offset
        ),
        None => "possible while Kafka holds the records; the deadline (record time +\n           retention.ms) is unknown here: the mock cluster does not implement DescribeConfigs".to_string(),
    };
    format!(
        "  cause  : {} — {step}:\n           {words}\n  replay : {deadline}",
        g.cause.as_str()
    )
}

fn print_metrics(m: &Metrics) {
    let l = [AUDIT, TOPIC, "0"];
    let c = |f: &prometheus::IntCounterVec| f.with_label_values(&l).get();
    let g = |f: &prometheus::IntGaugeVec| f.with_label_values(&l).get();
    println!(
        "metrics  : consumed {} · expected {} · confirmed {} · lost {} · late {} · missing {} · gaps open {}",
        c(&m.records_consumed),
        c(&m.records_expected),
        c(&m.records_confirmed),
        c(&m.records_lost),
        c(&m.records_late),
        g(&m.records_missing),
        g(&m.gaps_open)
    );
}

/// Polls `probe` until it yields a value; fails after [`STEP_TIMEOUT`] naming `what` it
/// waited for.
async fn until<T>(
    what: &str,
    cancel: &CancellationToken,
    mut probe: impl FnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<T> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        if let Some(v) = probe()? {
            return Ok(v);
        }
        anyhow::ensure!(!cancel.is_cancelled(), "interrupted");
        anyhow::ensure!(
            Instant::now() < deadline,
            "waited {} s for {what}: see the log above",
            STEP_TIMEOUT.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs a step of the simulation (blocking librdkafka calls) off the async threads.
async fn blocking<T: Send + 'static>(
    sim: &Arc<Simulation>,
    f: impl FnOnce(&Simulation) -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    let sim = sim.clone();
    tokio::task::spawn_blocking(move || f(&sim))
        .await
        .context("pipeline simulation")?
}

/// The producer and the SIMULATED pipeline job.
struct Simulation {
    brokers: String,
    producer: BaseProducer,
    sink: Arc<MemorySink>,
}

impl Simulation {
    fn new(brokers: &str, sink: Arc<MemorySink>) -> anyhow::Result<Self> {
        let producer = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .create()
            .context("creating the producer")?;
        Ok(Self {
            brokers: brokers.to_string(),
            producer,
            sink,
        })
    }

    /// Produces records `from..to`, one per batch so offsets are record numbers.
    fn produce(&self, from: usize, to: usize) -> anyhow::Result<()> {
        for i in from..to {
            let line = dns_line(i);
            self.producer
                .send(BaseRecord::<(), str>::to(TOPIC).payload(line.as_str()))
                .map_err(|(e, _)| e)?;
            self.producer.flush(KAFKA_TIMEOUT)?;
        }
        Ok(())
    }

    /// The end of the log, where a job started at `latest-offset` begins (resolved here,
    /// as Flink's source does, rather than left to `auto.offset.reset`).
    fn latest(&self) -> anyhow::Result<Offset> {
        let probe: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .create()?;
        let (_, high) = probe.fetch_watermarks(TOPIC, 0, KAFKA_TIMEOUT)?;
        Ok(high)
    }

    /// A job run: partition 0 assigned at `start`, the pipeline's group for commits.
    fn start(&self, start: KOffset) -> anyhow::Result<BaseConsumer> {
        let job: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", PIPELINE_GROUP)
            .set("enable.auto.commit", "false")
            .create()?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(TOPIC, 0, start)?;
        job.assign(&tpl)?;
        Ok(job)
    }

    /// A checkpoint: the job's position committed for its group.
    fn commit(&self, job: &BaseConsumer, next: Offset) -> anyhow::Result<()> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(TOPIC, 0, KOffset::Offset(next))?;
        job.commit(&tpl, CommitMode::Sync)?;
        Ok(())
    }

    /// Writes the next `count` records to the sink, then checkpoints past them.
    fn write(&self, job: &BaseConsumer, count: usize) -> anyhow::Result<()> {
        let mut written = 0;
        let mut next = None;
        let deadline = Instant::now() + KAFKA_TIMEOUT;
        while written < count && Instant::now() < deadline {
            if let Some(m) = job.poll(Duration::from_millis(100)) {
                let m = m?;
                if let Some(Ok(line)) = m.payload_view::<str>() {
                    self.sink.insert_key(&key_of(line));
                }
                next = Some(m.offset() + 1);
                written += 1;
            }
        }
        anyhow::ensure!(
            written == count,
            "pipeline read {written} of {count} records"
        );
        if let Some(next) = next {
            self.commit(job, next)?;
        }
        Ok(())
    }
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

#[cfg(test)]
mod tests;
