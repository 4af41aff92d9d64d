//! Tailing: the auditor's consume + decode + ledger path vs a bare consumer, same topic.
//!
//! Both paths run in this process one after the other, so the CPU per record of each is
//! the process's user + system time (`getrusage(RUSAGE_SELF)`) over that path alone,
//! consumer creation to the last record (the auditor's path also holds its group join and
//! leave, idle time that costs next to no CPU), divided by the records.

use crate::util::{
    PARTITIONS, Row, cpu_self, decoder, dns_line, fmt_rate, median_pair, now_ms, per_sec, row,
    spread, unique,
};
use anyhow::{Result, bail};
use gap_auditor::config::KafkaConfig;
use gap_auditor::gap::TopicPartition;
use gap_auditor::kafka::tail::{self, TailEvent};
use gap_auditor::ledger::PartitionLedger;
use gap_auditor::metrics::{AuditMetrics, Metrics};
use gap_auditor::record::DecodeFormat;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset as KOffset, TopicPartitionList};
use std::collections::HashMap;
use std::time::{Duration, Instant};

pub async fn create_topic(brokers: &str, topic: &str) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()?;
    let r = admin
        .create_topics(
            &[NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await?;
    for x in r {
        x.map_err(|(t, e)| anyhow::anyhow!("create topic {t}: {e}"))?;
    }
    Ok(())
}

/// Produces `n` lines round-robin over the partitions, in big batches.
pub fn produce(brokers: &str, topic: &str, n: usize) -> Result<Duration> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "50")
        .set("batch.size", "1000000")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .set("message.max.bytes", "2000000")
        .create()?;
    let start = Instant::now();
    for i in 0..n {
        let line = dns_line(i);
        let mut rec = BaseRecord::<(), str>::to(topic)
            .partition(i as i32 % PARTITIONS)
            .payload(&line);
        loop {
            match producer.send(rec) {
                Ok(()) => break,
                Err((e, r)) => {
                    if !matches!(
                        e.rdkafka_error_code(),
                        Some(rdkafka::error::RDKafkaErrorCode::QueueFull)
                    ) {
                        bail!("produce: {e}");
                    }
                    rec = r;
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
        if i % 10_000 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    producer.flush(Duration::from_secs(120))?;
    Ok(start.elapsed())
}

/// Baseline: a bare consumer, `assign()` from offset 0 (it never joins a group: rdkafka
/// wants a `group.id` for `assign()`, a unique one that is never used), counting records.
pub fn bare_consume(brokers: &str, topic: &str, n: u64) -> Result<f64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", unique("bench_bare"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, KOffset::Offset(0))?;
    }
    consumer.assign(&tpl)?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut count = 0u64;
    let mut first: Option<Instant> = None;
    while count < n {
        // The clock is read once per 4,096 records, not per record: the baseline must not
        // carry a cost a bare consumer does not have (clock_gettime was 4.6 % of its
        // thread in the profile).
        if count.is_multiple_of(4096) && Instant::now() > deadline {
            bail!("bare consumer read {count} of {n} records before the deadline");
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(_m)) => {
                if first.is_none() {
                    first = Some(Instant::now());
                }
                count += 1;
            }
            Some(Err(e)) => {
                bail!("bare consumer: {e}")
            }
            None => {
                if Instant::now() > deadline {
                    bail!("bare consumer read {count} of {n} records before the deadline");
                }
            }
        }
    }
    let first = first.unwrap_or_else(Instant::now);
    Ok(per_sec(count, first.elapsed()))
}

/// The auditor's path: `tail::start` + per-partition ledgers fed by `audit::ingest_batch`.
pub async fn auditor_consume(brokers: &str, topic: &str, n: u64, keyed: bool) -> Result<f64> {
    let kafka = KafkaConfig {
        brokers: brokers.to_string(),
        session_timeout: Some(Duration::from_secs(6)),
        heartbeat_interval: Some(Duration::from_millis(500)),
        ..KafkaConfig::default()
    };
    let group = unique("bench_group");
    let mut tail = tail::start(
        &kafka,
        &group,
        &[topic.to_string()],
        decoder(DecodeFormat::Csv, keyed)?,
        // As the daemon would with a max_pending above the whole run: never pauses here.
        n.saturating_mul(2).max(1),
    )?;
    let metrics = AuditMetrics::new(std::sync::Arc::new(Metrics::new()), "bench");
    let mut parts: HashMap<TopicPartition, PartitionLedger> = HashMap::new();
    // The daemon feeds the audit-wide key multiset as it reads (key_columns).
    let mut book = keyed.then(|| gap_auditor::ledger::KeyBook::new(n as usize));
    let mut ingested = 0u64;
    let mut first: Option<Instant> = None;
    let deadline = Instant::now() + Duration::from_secs(600);
    while ingested < n {
        let ev = tokio::time::timeout_at(deadline.into(), tail.events.recv())
            .await
            .map_err(|_| anyhow::anyhow!("auditor path read {ingested} of {n} records"))?;
        let Some(ev) = ev else {
            bail!("tailing thread ended early after {ingested} records");
        };
        match ev {
            TailEvent::Records(batch) => {
                first.get_or_insert_with(Instant::now);
                let len = batch.len() as u64;
                ingested += gap_auditor::audit::ingest_batch(
                    &metrics,
                    &mut parts,
                    book.as_mut(),
                    batch,
                    now_ms(),
                );
                tail.flow.ingested(len);
                tail.flow
                    .set_pending(parts.iter().map(|(tp, l)| (tp, l.pending())));
            }
            TailEvent::Assigned { partitions, reply } => {
                let starts = partitions
                    .into_iter()
                    .map(|tp| {
                        parts.insert(tp.clone(), PartitionLedger::new(0, keyed));
                        (tp, 0)
                    })
                    .collect();
                let _ = reply.send(starts);
            }
            TailEvent::Revoked { reply, .. } => {
                let _ = reply.send(Vec::new());
            }
            // As the audit task does: the ledgers move past offsets without a record.
            TailEvent::ReadTo(positions) => {
                for (tp, p) in positions {
                    if let Some(l) = parts.get_mut(&tp) {
                        l.read_to(p);
                    }
                }
            }
            TailEvent::Error(e) => eprintln!("tail error: {e}"),
            TailEvent::OffsetOutOfRange => bail!("offset out of range"),
            // No Reposition is ever sent here.
            TailEvent::Repositioned(_) => {}
        }
    }
    let rate = per_sec(ingested, first.unwrap_or_else(Instant::now).elapsed());
    // Leave the group cleanly: answer revocations until the thread ends.
    tail.stop();
    while let Some(ev) = tail.events.recv().await {
        match ev {
            TailEvent::Assigned { reply, .. } | TailEvent::Revoked { reply, .. } => {
                let _ = reply.send(Vec::new());
            }
            _ => {}
        }
    }
    tokio::task::spawn_blocking(move || tail.join()).await?;
    let pending: u64 = parts.values().map(PartitionLedger::pending).sum();
    if pending != n {
        bail!("ledgers hold {pending} pending records, expected {n}");
    }
    Ok(rate)
}

/// Produces `n` records to a fresh topic and adds the bare-consumer baseline row and the
/// auditor-path rows (key_columns, offset_columns) with their ratio to the baseline.
pub async fn rows(brokers: &str, n: u64, avg: usize, rows: &mut Vec<Row>) -> Result<()> {
    let brokers = brokers.to_string();
    let topic = unique("bench");
    create_topic(&brokers, &topic).await?;
    let b = brokers.clone();
    let t = topic.clone();
    let produced = tokio::task::spawn_blocking(move || produce(&b, &t, n as usize)).await??;
    eprintln!(
        "produced {n} records (avg {avg} B) to {topic} in {:.1}s",
        produced.as_secs_f64()
    );

    // This VM's speed moves by tens of percent within minutes, so one pass of each path
    // compares different machines. The paths are run PASSES times, interleaved, and each
    // ratio is taken within its pass; the rows give the median pass.
    let paths = [
        ("key_columns (client_ip,domain,time)", "key_columns", true),
        ("offset_columns (no key)", "offset_columns", false),
    ];
    let mut bare_runs: Vec<(f64, f64)> = Vec::new();
    let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new(); paths.len()];
    for pass in 1..=PASSES {
        let b = brokers.clone();
        let t = topic.clone();
        let cpu0 = cpu_self();
        let bare = tokio::task::spawn_blocking(move || bare_consume(&b, &t, n)).await??;
        let bare_cpu = us_per_record(cpu_self().saturating_sub(cpu0), n);
        eprintln!(
            "pass {pass}: bare consumer: {} ({bare_cpu:.2} µs CPU/record)",
            fmt_rate(bare)
        );
        bare_runs.push((bare, bare_cpu));
        for (i, (name, _, keyed)) in paths.iter().enumerate() {
            let cpu0 = cpu_self();
            let r = auditor_consume(&brokers, &topic, n, *keyed).await?;
            let cpu = us_per_record(cpu_self().saturating_sub(cpu0), n);
            eprintln!(
                "pass {pass}: auditor path, {name}: {} ({cpu:.2} µs CPU/record)",
                fmt_rate(r)
            );
            runs[i].push((r, cpu));
        }
    }
    let (bare, bare_cpu) = median_pair(&bare_runs, |(r, _)| *r);
    rows.push(row(
        &format!(
            "Bare BaseConsumer, count only ({n} × {avg} B, {PARTITIONS} partitions; median of {PASSES} passes)"
        ),
        fmt_rate(bare),
        "(baseline)",
        "1.00".into(),
        "—",
    ));
    let mut cpu_rows = Vec::new();
    for (i, (name, short, _)) in paths.iter().enumerate() {
        let rate: Vec<f64> = runs[i]
            .iter()
            .zip(&bare_runs)
            .map(|(a, b)| a.0 / b.0)
            .collect();
        let cpu: Vec<f64> = runs[i]
            .iter()
            .zip(&bare_runs)
            .map(|(a, b)| a.1 / b.1.max(1e-9))
            .collect();
        let (r, _) = median_pair(&runs[i], |(r, _)| *r);
        let (_, c) = median_pair(&runs[i], |(_, c)| *c);
        rows.push(row(
            &format!("Auditor tail + decode + ledger, {name}"),
            fmt_rate(r),
            &fmt_rate(bare),
            format!("{:.2} (passes {})", median(&rate), spread(&rate, "")),
            "≥ 0.90",
        ));
        cpu_rows.push(row(
            &format!(
                "CPU per record: tail, {short} vs bare consumer (bench process, that path only)"
            ),
            format!("{c:.2} µs"),
            &format!("{bare_cpu:.2} µs"),
            format!("{:.2}× (passes {})", median(&cpu), spread(&cpu, "×")),
            "≤ 1.2×",
        ));
    }
    rows.append(&mut cpu_rows);
    Ok(())
}

/// Passes of the bare consumer and the auditor's paths, interleaved.
const PASSES: usize = 3;

/// The median of `xs`.
fn median(xs: &[f64]) -> f64 {
    crate::daemon::median_max(&mut xs.to_vec()).0
}

/// How the tailing rows are made (written into docs/BENCHMARKS.md).
pub const NOTES: &str = "Tailing rows: the bare consumer and the two auditor paths run 3 \
times, interleaved (bare, key_columns, offset_columns; again; again) on the same topic; \
each ratio is taken within its pass (this VM's speed moves by tens of percent within \
minutes), the Ratio column gives the median pass and every pass's figure, the Value and \
Baseline columns the median pass's rates. CPU per record: the bench process's user + \
system time (`getrusage(RUSAGE_SELF)`, every thread: librdkafka's, the tailing thread, the \
ledger feed) over that path alone, consumer creation to the last record, over the records.";

/// Microseconds of CPU per record.
fn us_per_record(cpu: Duration, n: u64) -> f64 {
    cpu.as_secs_f64() * 1e6 / n.max(1) as f64
}
