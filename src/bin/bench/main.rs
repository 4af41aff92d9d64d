//! End-to-end throughput and memory benchmark (issue 7, first increment).
//!
//! Against a Kafka broker (`--brokers`, default `$GAP_AUDITOR_TEST_KAFKA`) it creates a
//! unique 4-partition topic, produces `--records` seed-shaped DNS lines (~200 bytes, 9
//! `|`-separated fields), then measures in the SAME run, each from offset 0:
//!
//! - baselines: a bare rdkafka `BaseConsumer` (group-less `assign()`) that only counts, and
//!   kcat (the Debian package) reading the same topic, when installed;
//! - the auditor's path: `kafka::tail::start` with the seed decoder, every record ingested
//!   into a `PartitionLedger` per partition by the daemon's own `audit::ingest_batch`
//!   (key_columns, then offset_columns);
//! - decode-only records/s on one core (csv and json);
//! - ledger memory (RSS growth) for 10 M contiguous unkeyed offsets and 1 M keyed records;
//! - verification on MariaDB (`--mysql`, default `$GAP_AUDITOR_TEST_MYSQL`) through the
//!   crate's verifier: offset_columns queries per round and to locate 1/10/100 missing rows
//!   among 10 M, key_columns keys/s (see `verify.rs`);
//! - key_columns end to end through the real daemon binary beside the bare consumer on the
//!   same topic, with CPU per record for both (see `keys_e2e.rs`);
//! - offset_columns end to end through the real daemon binary beside the bare consumer:
//!   the rate to all settled, how many rounds settled trails consumed, CPU per record for
//!   both (see `offsets_e2e.rs`).
//!
//! Prints a Markdown table; `--write docs/BENCHMARKS.md` also writes it with the machine
//! description and the command. `--smoke` runs everything tiny (CI keeps it from rotting;
//! no timing is asserted anywhere).
//!
//! Throughput windows start at the first record delivered, so the consumer-group join of
//! the auditor's path (about `session.timeout.ms / 2`) is not counted against it.

// The daemon's allocator and options: the tailing path runs in this process, and must be
// measured on the allocator it ships with.
gap_auditor::daemon_allocator!();

mod daemon;
mod decode;
mod e2e;
mod keys_e2e;
mod keys_ordered;
mod latency;
mod memory;
mod offsets_e2e;
mod scale;
mod tail;
mod util;
mod verify;

use anyhow::{Context, Result};
use clap::Parser;
use std::fmt::Write as _;
use util::Row;

/// The benchmark's command line: one field per flag.
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
    /// MariaDB URL for the verification figures (default: $GAP_AUDITOR_TEST_MYSQL).
    #[arg(long, env = "GAP_AUDITOR_TEST_MYSQL")]
    mysql: Option<String>,
    /// Rows of the offset_columns verification table.
    #[arg(long, default_value_t = 10_000_000)]
    verify_rows: u64,
    /// Rows of the key_columns verification table.
    #[arg(long, default_value_t = 1_000_000)]
    key_rows: u64,
    /// Keys verified against it.
    #[arg(long, default_value_t = 200_000)]
    keys_asked: u64,
    /// The daemon binary for the latency and scale figures (default: `gap-auditor` next to
    /// this binary; `cargo build --release --bins` builds both).
    #[arg(long)]
    daemon: Option<std::path::PathBuf>,
    /// Records of the key_columns end-to-end run through the daemon.
    #[arg(long, default_value_t = 1_000_000)]
    key_records: u64,
    /// Records of the offset_columns end-to-end run through the daemon.
    #[arg(long, default_value_t = 2_000_000)]
    offset_records: u64,
    /// Injected losses for the detection-latency figure.
    #[arg(long, default_value_t = 100)]
    losses: usize,
    /// Topics of the scale run.
    #[arg(long, default_value_t = 10)]
    scale_topics: usize,
    /// Partitions per topic of the scale run.
    #[arg(long, default_value_t = 100)]
    scale_partitions: i32,
    /// Records per second (all partitions) of the scale run.
    #[arg(long, default_value_t = 500)]
    scale_rate: u64,
    /// Seconds of production in the scale run.
    #[arg(long, default_value_t = 60)]
    scale_seconds: u64,
    /// kcat, the tailing section's second baseline (skipped with a note when it cannot be
    /// run).
    #[arg(long, default_value = "kcat")]
    kcat: String,
    /// Names the broker in the document's Machine section (default: Apache Kafka's version
    /// read from the jars of the broker process scripts/test-env.sh started).
    #[arg(long)]
    broker_name: Option<String>,
    /// Run only these sections (default: all). `--write` wants all of them.
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Section>,
    /// Tiny sizes (seconds): 20k records, 100k offsets, 20k keys, 20k-row sink tables.
    #[arg(long)]
    smoke: bool,
    /// Also write the table, machine description and command to this Markdown file.
    #[arg(long)]
    write: Option<std::path::PathBuf>,
}

/// Parts of the benchmark that `--only` can select.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Section {
    /// Ledger memory.
    Memory,
    /// Decoder rates.
    Decode,
    /// Tailing vs the bare consumer.
    Tail,
    /// Verification on MariaDB.
    Verify,
    /// key_columns end to end through the daemon binary, beside the bare consumer.
    KeysE2e,
    /// key_columns end to end on a table read by time (in time order and out of it), with
    /// losses and duplicates, beside the bare consumer.
    KeysOrdered,
    /// offset_columns end to end through the daemon binary, beside the bare consumer.
    OffsetsE2e,
    /// Detection latency through the daemon binary.
    Latency,
    /// 1,000 partitions through the daemon binary.
    Scale,
}

/// The broker the run used and the clients of the tailing rows, for the document.
fn setup(brokers: &str, given: Option<&str>, kcat: Option<&tail::Kcat>) -> String {
    let broker = given
        .map(str::to_string)
        .or_else(kafka_from_test_env)
        .unwrap_or_else(|| {
            "unknown (not the Apache Kafka of scripts/test-env.sh: name it with --broker-name)"
                .into()
        });
    let (_, librdkafka) = rdkafka::util::get_rdkafka_version();
    let kcat = kcat.map_or_else(
        || "not found: its rows are skipped".to_string(),
        |k| format!("{} (`{}`)", k.version, k.bin),
    );
    format!(
        "- broker: {broker}, at {brokers}\n\
         - bare consumer and auditor: librdkafka {librdkafka} (rdkafka-sys, built in)\n\
         - kcat: {kcat}\n"
    )
}

/// Apache Kafka's version from the broker process scripts/test-env.sh started
/// (`$GAP_AUDITOR_TEST_KAFKA_PID`): the `kafka-server-VERSION.jar` on its class path, and
/// its KRaft roles from the properties file it was started with.
fn kafka_from_test_env() -> Option<String> {
    let pid = std::env::var("GAP_AUDITOR_TEST_KAFKA_PID").ok()?;
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", pid.trim())).ok()?;
    let args: Vec<String> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    if !args.iter().any(|a| a == "kafka.Kafka") {
        return None;
    }
    let cp = args
        .iter()
        .position(|a| a == "-cp" || a == "-classpath")
        .and_then(|i| args.get(i + 1))?;
    let version = cp.split(':').find_map(|entry| {
        let dir = entry.strip_suffix("/*")?;
        std::fs::read_dir(dir).ok()?.find_map(|f| {
            let name = f.ok()?.file_name().into_string().ok()?;
            name.strip_prefix("kafka-server-")?
                .strip_suffix(".jar")
                .filter(|v| v.starts_with(|c: char| c.is_ascii_digit()))
                .map(str::to_string)
        })
    })?;
    let roles = args
        .last()
        .filter(|a| a.ends_with(".properties"))
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|props| {
            props
                .lines()
                .find_map(|l| l.trim().strip_prefix("process.roles="))
                .map(|r| r.trim().to_string())
        });
    Some(match roles {
        Some(r) => format!(
            "Apache Kafka {version} (single node, KRaft `process.roles={r}`; scripts/test-env.sh)"
        ),
        None => format!("Apache Kafka {version} (scripts/test-env.sh)"),
    })
}

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
        args.verify_rows = args.verify_rows.min(20_000);
        args.key_rows = args.key_rows.min(20_000);
        args.keys_asked = args.keys_asked.min(5_000);
        args.key_records = args.key_records.min(20_000);
        args.offset_records = args.offset_records.min(20_000);
        args.losses = args.losses.min(5);
        args.scale_topics = args.scale_topics.min(2);
        args.scale_partitions = args.scale_partitions.min(5);
        args.scale_rate = args.scale_rate.min(50);
        args.scale_seconds = args.scale_seconds.min(6);
    }
    let run = |s: Section| args.only.is_empty() || args.only.contains(&s);
    let brokers = args
        .brokers
        .clone()
        .context("no broker: pass --brokers or set GAP_AUDITOR_TEST_KAFKA")?;
    let n = args.records as u64;
    let kcat = tail::kcat_version(&args.kcat).map(|version| tail::Kcat {
        bin: args.kcat.clone(),
        version,
    });
    let mut rows = Vec::new();

    // Memory first, while the heap is fresh (freed memory would hide growth later).
    if run(Section::Memory) {
        memory::rows(args.offsets, args.keys, &mut rows);
    }

    // Decoding, one core (always: the tailing rows name the payload size).
    let mut decoded = Vec::new();
    let (avg, javg) = decode::rows(args.smoke, &mut decoded)?;
    if run(Section::Decode) {
        rows.extend(decoded);
    }

    // Kafka: tailing vs the bare consumer.
    if run(Section::Tail) {
        tail::rows(&brokers, n, avg, kcat.as_ref(), &mut rows).await?;
    }

    // Verification on MariaDB.
    let mut verified = verify::Report {
        rows: Vec::new(),
        explain: String::new(),
    };
    if run(Section::Verify) {
        let url = args
            .mysql
            .clone()
            .context("no MariaDB: pass --mysql or set GAP_AUDITOR_TEST_MYSQL")?;
        verify::offset_rows(&url, args.verify_rows, &mut verified).await?;
        verify::key_rows(&url, args.key_rows, args.keys_asked, &mut verified).await?;
        rows.append(&mut verified.rows);
    }

    // The daemon binary end to end: key_columns, offset_columns, detection latency, scale.
    if [
        Section::KeysE2e,
        Section::KeysOrdered,
        Section::OffsetsE2e,
        Section::Latency,
        Section::Scale,
    ]
    .into_iter()
    .any(run)
    {
        let bin = daemon::binary(args.daemon.as_deref())?;
        let url = args
            .mysql
            .clone()
            .context("no MariaDB: pass --mysql or set GAP_AUDITOR_TEST_MYSQL")?;
        if run(Section::KeysE2e) {
            keys_e2e::rows(&bin, &brokers, &url, args.key_records, &mut rows).await?;
        }
        if run(Section::KeysOrdered) {
            keys_ordered::rows(
                &bin,
                &brokers,
                &url,
                args.key_records,
                kcat.as_ref(),
                &mut rows,
            )
            .await?;
        }
        if run(Section::OffsetsE2e) {
            offsets_e2e::rows(&bin, &brokers, &url, args.offset_records, &mut rows).await?;
        }
        if run(Section::Latency) {
            latency::rows(&bin, &brokers, &url, args.losses, &mut rows).await?;
        }
        if run(Section::Scale) {
            let sizes = scale::Sizes {
                topics: args.scale_topics,
                partitions: args.scale_partitions,
                rate: args.scale_rate,
                duration: std::time::Duration::from_secs(args.scale_seconds),
                // The default interval; 1 s keeps the smoke run short.
                verify_interval: std::time::Duration::from_secs(if args.smoke { 1 } else { 5 }),
            };
            scale::rows(&bin, &brokers, &url, &sizes, &mut rows).await?;
        }
    }
    let table = table(&rows);
    println!("{table}");
    if let Some(path) = &args.write {
        let command: Vec<String> = std::env::args().collect();
        let doc = format!(
            "# Benchmarks\n\n\
             Generated by `src/bin/bench/`. Every throughput figure is compared with its \
             baseline measured in the SAME run.\n\n\
             ## Command\n\n```sh\n. /tmp/gap-auditor-test/env\ncargo build --release --bins\ncargo run --release --bin bench -- {}\n```\n\n\
             ## Machine\n\n{}{}\n\
             ## Results\n\n{table}\n\
             csv payload: seed-shaped 9-field `|` lines, avg {avg} bytes; json payload: the \
             same fields as a JSON object, avg {javg} bytes. {}\n\n\
             ## Verification\n\n{}\n\
             EXPLAIN of the queries the verifier sends, on the bench tables:\n\n{}\n\
             ## key_columns end to end\n\n{}\n\
             ## key_columns read by time\n\n{}\n\
             ## offset_columns end to end\n\n{}\n\
             ## Detection latency\n\n{}\n\
             ## Scale\n\n{}\n\
             ## max_pending\n\n\
             Pausing consumption at `max_pending` (flat RSS, nothing dropped) is measured by \
             the fault suite and reported in [RELIABILITY.md](RELIABILITY.md), not measured \
             twice here.\n",
            command
                .iter()
                .skip(1)
                .cloned()
                .collect::<Vec<_>>()
                .join(" "),
            machine(),
            setup(&brokers, args.broker_name.as_deref(), kcat.as_ref()),
            tail::NOTES,
            verify::NOTES,
            verified.explain,
            keys_e2e::NOTES,
            keys_ordered::NOTES,
            offsets_e2e::NOTES,
            latency::NOTES,
            scale::NOTES,
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
