//! End-to-end throughput and memory benchmark (issue 7, first increment).
//!
//! Against a Kafka broker (`--brokers`, default `$GAP_AUDITOR_TEST_KAFKA`) it creates a
//! unique 4-partition topic, produces `--records` seed-shaped DNS lines (~200 bytes, 9
//! `|`-separated fields), then measures in the SAME run, each from offset 0:
//!
//! - baseline: a bare rdkafka `BaseConsumer` (group-less `assign()`) that only counts;
//! - the auditor's path: `kafka::tail::start` with the seed decoder, every record ingested
//!   into a `PartitionLedger` per partition by the daemon's own `audit::ingest_batch`
//!   (key_columns, then offset_columns);
//! - decode-only records/s on one core (csv and json);
//! - ledger memory (RSS growth) for 10 M contiguous unkeyed offsets and 1 M keyed records.
//!
//! Prints a Markdown table; `--write docs/BENCHMARKS.md` also writes it with the machine
//! description and the command. `--smoke` runs everything tiny (CI keeps it from rotting;
//! no timing is asserted anywhere).
//!
//! Throughput windows start at the first record delivered, so the consumer-group join of
//! the auditor's path (about `session.timeout.ms / 2`) is not counted against it.

use anyhow::{Context, Result, bail};
use clap::Parser;
use gap_auditor::config::KafkaConfig;
use gap_auditor::gap::TopicPartition;
use gap_auditor::kafka::tail::{self, TailEvent};
use gap_auditor::ledger::PartitionLedger;
use gap_auditor::ledger::partition::Observed;
use gap_auditor::metrics::Metrics;
use gap_auditor::record::{DecodeFormat, Decoder, DecoderSpec, Key, Tag};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset as KOffset, TopicPartitionList};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 4;
const FIELDS: [&str; 9] = [
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
const KEY: [&str; 3] = ["client_ip", "domain", "time"];

#[derive(Parser, Debug)]
#[command(about = "gap-auditor throughput and memory benchmark")]
struct Args {
    /// Kafka bootstrap brokers (default: $GAP_AUDITOR_TEST_KAFKA).
    #[arg(long, env = "GAP_AUDITOR_TEST_KAFKA")]
    brokers: Option<String>,
    /// Records to produce and consume.
    #[arg(long, default_value_t = 2_000_000)]
    records: usize,
    /// Contiguous offsets for the unkeyed ledger memory figure.
    #[arg(long, default_value_t = 10_000_000)]
    offsets: u64,
    /// Keyed records for the keyed ledger memory figure.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    /// Tiny sizes (seconds): 20k records, 100k offsets, 20k keys.
    #[arg(long)]
    smoke: bool,
    /// Also write the table, machine description and command to this Markdown file.
    #[arg(long)]
    write: Option<std::path::PathBuf>,
}

/// One row of the result table.
struct Row {
    what: String,
    value: String,
    baseline: String,
    ratio: String,
    target: String,
}

fn row(what: &str, value: String, baseline: &str, ratio: String, target: &str) -> Row {
    Row {
        what: what.to_string(),
        value,
        baseline: baseline.to_string(),
        ratio,
        target: target.to_string(),
    }
}

/// A seed-shaped DNS log line of about 200 bytes; `i` makes it unique.
fn dns_line(i: usize) -> String {
    format!(
        "10.{}.{}.{}|host{i:08}.subdomain.example-cdn-provider.com.cn|2024-05-01 12:{:02}:{:02}|93.184.216.34|NOERROR|A|ns1.authoritative-dns.example-cdn-provider.com|query-from-recursive-resolver-pool-{:04}|8.8.8.8",
        (i / 65_536) % 256,
        (i / 256) % 256,
        i % 256,
        (i / 60) % 60,
        i % 60,
        i % 10_000
    )
}

fn dns_json(i: usize) -> String {
    let line = dns_line(i);
    let obj: serde_json::Map<String, serde_json::Value> = FIELDS
        .iter()
        .zip(line.split('|'))
        .map(|(k, v)| (k.to_string(), serde_json::Value::from(v)))
        .collect();
    serde_json::Value::Object(obj).to_string()
}

fn decoder(format: DecodeFormat, keyed: bool) -> Result<Decoder> {
    let spec = DecoderSpec {
        format,
        delimiter: "|".into(),
        quote: false,
        fields: FIELDS.iter().map(|s| s.to_string()).collect(),
        field_count: matches!(format, DecodeFormat::Csv).then_some(9),
        min_fields: None,
        require: Vec::new(),
        key: keyed.then(|| KEY.iter().map(|s| s.to_string()).collect()),
        id_template: None,
    };
    Decoder::new(spec).context("decoder")
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Resident set size in bytes (/proc/self/statm).
fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn per_sec(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

fn fmt_rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2} M rec/s", r / 1e6)
    } else {
        format!("{:.0} k rec/s", r / 1e3)
    }
}

fn mib(b: u64) -> String {
    format!("{:.2} MiB", b as f64 / (1024.0 * 1024.0))
}

fn unique(prefix: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("{prefix}_{}_{t}", std::process::id())
}

// ---------------------------------------------------------------------------------------
// Memory

/// RSS growth of one unkeyed ledger holding `n` contiguous pending offsets.
fn ledger_offsets_memory(n: u64) -> u64 {
    let before = rss_bytes();
    let mut ledger = PartitionLedger::new(0, false);
    let mut now = now_ms();
    for o in 0..n as i64 {
        if o % 4096 == 0 {
            now = now_ms();
        }
        ledger.ingest(o, Some(now), Observed::Expected { key: None }, now);
    }
    let grown = rss_bytes().saturating_sub(before);
    assert_eq!(ledger.pending(), n);
    drop(ledger);
    grown
}

/// RSS growth of one keyed ledger holding `n` pending records with ~40-byte keys, and the
/// key bytes themselves.
fn ledger_keys_memory(n: u64) -> (u64, u64) {
    let before = rss_bytes();
    let mut ledger = PartitionLedger::new(0, true);
    let mut key_bytes = 0u64;
    let mut now = now_ms();
    for o in 0..n as i64 {
        if o % 4096 == 0 {
            now = now_ms();
        }
        let i = o as usize;
        // client_ip (~11 B) + domain (~17 B) + time (~12 B) ≈ 40 bytes of key.
        let key = Key(vec![
            format!("10.{}.{}.{}", (i / 65_536) % 256, (i / 256) % 256, i % 256),
            format!("h{i:08}.example.io"),
            format!("12:{:02}:{:02}.{:03}", (i / 60) % 60, i % 60, i % 1000),
        ]);
        key_bytes += key.0.iter().map(|s| s.len() as u64).sum::<u64>();
        ledger.ingest(o, Some(now), Observed::Expected { key: Some(key) }, now);
    }
    let grown = rss_bytes().saturating_sub(before);
    assert_eq!(ledger.pending(), n);
    drop(ledger);
    (grown, key_bytes)
}

// ---------------------------------------------------------------------------------------
// Decoding

/// Records/s of `Decoder::tag` on one core over pre-built payloads; runs at least `min`.
fn decode_rate(decoder: &Decoder, payloads: &[Vec<u8>], min: Duration) -> f64 {
    let mut n = 0u64;
    let mut expected = 0u64;
    let start = Instant::now();
    while start.elapsed() < min || n == 0 {
        for p in payloads {
            if matches!(decoder.tag(Some(p)), Tag::Expected { .. }) {
                expected += 1;
            }
        }
        n += payloads.len() as u64;
    }
    let rate = per_sec(n, start.elapsed());
    assert_eq!(expected, n, "every bench payload must decode as expected");
    rate
}

// ---------------------------------------------------------------------------------------
// Kafka

async fn create_topic(brokers: &str, topic: &str) -> Result<()> {
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
fn produce(brokers: &str, topic: &str, n: usize) -> Result<Duration> {
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
fn bare_consume(brokers: &str, topic: &str, n: u64) -> Result<f64> {
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
        if Instant::now() > deadline {
            bail!("bare consumer read {count} of {n} records before the deadline");
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(_m)) => {
                first.get_or_insert_with(Instant::now);
                count += 1;
            }
            Some(Err(e)) => bail!("bare consumer: {e}"),
            None => {}
        }
    }
    let first = first.unwrap_or_else(Instant::now);
    Ok(per_sec(count, first.elapsed()))
}

/// The auditor's path: `tail::start` + per-partition ledgers fed by `audit::ingest_batch`.
async fn auditor_consume(brokers: &str, topic: &str, n: u64, keyed: bool) -> Result<f64> {
    let kafka = KafkaConfig {
        brokers: brokers.to_string(),
        session_timeout: Duration::from_secs(6),
        heartbeat_interval: Duration::from_millis(500),
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
    let metrics = Metrics::new();
    let audit = "bench".to_string();
    let mut parts: HashMap<TopicPartition, PartitionLedger> = HashMap::new();
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
                ingested +=
                    gap_auditor::audit::ingest_batch(&audit, &metrics, &mut parts, batch, now_ms());
                tail.flow.ingested(len);
                tail.flow
                    .set_pending(parts.values().map(PartitionLedger::pending).sum());
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
            TailEvent::Error(e) => eprintln!("tail error: {e}"),
            TailEvent::OffsetOutOfRange => bail!("offset out of range"),
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

// ---------------------------------------------------------------------------------------

fn machine() -> String {
    let nproc = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<u64>().ok())
        })
        .map(|kb| format!("{:.1} GiB", kb as f64 / 1024.0 / 1024.0))
        .unwrap_or_else(|| "unknown".into());
    let os = std::fs::read_to_string("/etc/os-release")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("PRETTY_NAME=")).map(|l| {
                l.trim_start_matches("PRETTY_NAME=")
                    .trim_matches('"')
                    .to_string()
            })
        })
        .unwrap_or_else(|| "unknown".into());
    format!("- nproc: {nproc}\n- CPU: {cpu}\n- memory: {mem}\n- OS: {os}\n")
}

fn table(rows: &[Row]) -> String {
    let mut s = String::from(
        "| Measure | Value | Baseline (same run) | Ratio | Target |\n|---|---|---|---|---|\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} |",
            r.what, r.value, r.baseline, r.ratio, r.target
        );
    }
    s
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let mut args = Args::parse();
    if args.smoke {
        args.records = args.records.min(20_000);
        args.offsets = args.offsets.min(100_000);
        args.keys = args.keys.min(20_000);
    }
    let brokers = args
        .brokers
        .clone()
        .context("no broker: pass --brokers or set GAP_AUDITOR_TEST_KAFKA")?;
    let n = args.records as u64;
    let mut rows = Vec::new();

    // Memory first, while the heap is fresh (freed memory would hide growth later).
    let grown = ledger_offsets_memory(args.offsets);
    eprintln!(
        "ledger, {} contiguous offsets: +{}",
        args.offsets,
        mib(grown)
    );
    rows.push(row(
        &format!(
            "Ledger RSS growth, {} contiguous unkeyed offsets",
            args.offsets
        ),
        mib(grown),
        "—",
        "—".into(),
        "< 16 MiB",
    ));
    let (grown, key_bytes) = ledger_keys_memory(args.keys);
    let per = grown as f64 / args.keys.max(1) as f64;
    let key_per = key_bytes as f64 / args.keys.max(1) as f64;
    eprintln!(
        "ledger, {} keyed records: +{} ({per:.0} B/record, keys {key_per:.0} B)",
        args.keys,
        mib(grown)
    );
    rows.push(row(
        &format!("Ledger RSS growth, {} keyed records", args.keys),
        format!("{} = {per:.0} B/record", mib(grown)),
        &format!("key bytes {key_per:.0} B/record"),
        format!("{:.0} B overhead/record", per - key_per),
        "< 64 B + key bytes",
    ));

    // Decoding, one core.
    let count = if args.smoke { 2_000 } else { 100_000 };
    let min = if args.smoke {
        Duration::from_millis(100)
    } else {
        Duration::from_secs(2)
    };
    let csv: Vec<Vec<u8>> = (0..count).map(|i| dns_line(i).into_bytes()).collect();
    let json: Vec<Vec<u8>> = (0..count).map(|i| dns_json(i).into_bytes()).collect();
    let avg = csv.iter().map(Vec::len).sum::<usize>() / csv.len();
    let javg = json.iter().map(Vec::len).sum::<usize>() / json.len();
    for (name, payloads, format, keyed) in [
        ("csv, key_columns (3 fields)", &csv, DecodeFormat::Csv, true),
        (
            "csv, offset_columns (no key)",
            &csv,
            DecodeFormat::Csv,
            false,
        ),
        (
            "json, key_columns (3 fields)",
            &json,
            DecodeFormat::Json,
            true,
        ),
    ] {
        let r = decode_rate(&decoder(format, keyed)?, payloads, min);
        eprintln!("decode {name}: {}", fmt_rate(r));
        rows.push(row(
            &format!("Decoder::tag, {name}, one core"),
            fmt_rate(r),
            "—",
            "—".into(),
            "—",
        ));
    }

    // Kafka.
    let topic = unique("bench");
    create_topic(&brokers, &topic).await?;
    let b = brokers.clone();
    let t = topic.clone();
    let produced = tokio::task::spawn_blocking(move || produce(&b, &t, n as usize)).await??;
    eprintln!(
        "produced {n} records (avg {avg} B) to {topic} in {:.1}s",
        produced.as_secs_f64()
    );

    let b = brokers.clone();
    let t = topic.clone();
    let bare = tokio::task::spawn_blocking(move || bare_consume(&b, &t, n)).await??;
    eprintln!("bare consumer: {}", fmt_rate(bare));
    rows.push(row(
        &format!("Bare BaseConsumer, count only ({n} × {avg} B, {PARTITIONS} partitions)"),
        fmt_rate(bare),
        "(baseline)",
        "1.00".into(),
        "—",
    ));
    for (name, keyed) in [
        ("key_columns (client_ip,domain,time)", true),
        ("offset_columns (no key)", false),
    ] {
        let r = auditor_consume(&brokers, &topic, n, keyed).await?;
        eprintln!("auditor path, {name}: {}", fmt_rate(r));
        rows.push(row(
            &format!("Auditor tail + decode + ledger, {name}"),
            fmt_rate(r),
            &fmt_rate(bare),
            format!("{:.2}", r / bare),
            "≥ 0.90",
        ));
    }
    let table = table(&rows);
    println!("{table}");
    if let Some(path) = &args.write {
        let command: Vec<String> = std::env::args().collect();
        let doc = format!(
            "# Benchmarks\n\n\
             Generated by `src/bin/bench.rs`. Every throughput figure is compared with its \
             baseline measured in the SAME run.\n\n\
             ## Command\n\n```sh\n. /tmp/gap-auditor-test/env\ncargo run --release --bin bench -- {}\n```\n\n\
             ## Machine\n\n{}\n\
             ## Results\n\n{table}\n\
             csv payload: seed-shaped 9-field `|` lines, avg {avg} bytes; json payload: the \
             same fields as a JSON object, avg {javg} bytes.\n",
            command
                .iter()
                .skip(1)
                .cloned()
                .collect::<Vec<_>>()
                .join(" "),
            machine(),
        );
        // Hand-written analysis after `## Notes` survives a re-run.
        let notes = std::fs::read_to_string(path)
            .ok()
            .and_then(|old| old.find("\n## Notes").map(|i| old[i..].to_string()))
            .unwrap_or_default();
        let doc = doc + &notes;
        std::fs::write(path, doc).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
