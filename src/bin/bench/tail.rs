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
use anyhow::{Context, Result, bail};
use gap_auditor::config::KafkaConfig;
use gap_auditor::kafka::client;
use gap_auditor::kafka::tail::{self, TailEvent};
use gap_auditor::ledger::PartitionLedger;
use gap_auditor::metrics::{AuditMetrics, Metrics};
use gap_auditor::record::DecodeFormat;
use gap_auditor::types::TopicPartition;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset as KOffset, TopicPartitionList};
use std::collections::HashMap;
use std::io::Read;
use std::process::{Command, Stdio};
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
pub fn produce(
    brokers: &str,
    topic: &str,
    n: usize,
    line: fn(usize) -> String,
) -> Result<Duration> {
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
        let line = line(i);
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
/// It carries the two librdkafka settings the auditor's consumer overrides by default
/// (`fetch.queue.backoff.ms`, `queued.max.messages.kbytes`): with librdkafka's own 1 s
/// backoff a consumer that drains its queue faster than a fetch refills it idles most of
/// each second (382 k rec/s on Kafka 4.4 against kcat's 1.62 M), and a baseline slowed by a
/// setting the auditor does not share makes every ratio against it flattering.
pub fn bare_consume(brokers: &str, topic: &str, n: u64) -> Result<f64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", unique("bench_bare"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("fetch.queue.backoff.ms", client::FETCH_QUEUE_BACKOFF_MS)
        .set("queued.max.messages.kbytes", client::PREFETCH_KBYTES)
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

/// kcat as `kcat -V` names itself ("kcat 1.7.1, librdkafka 2.0.2"), or `None` when `bin`
/// cannot be run (not installed): the kcat rows are then skipped with a note.
pub fn kcat_version(bin: &str) -> Option<String> {
    let out = kcat_command(bin).arg("-V").output().ok()?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    // "Version 1.7.1 (JSON, Transactions, IncrementalAssign, librdkafka 2.0.2 builtin...)"
    let version = text
        .split_whitespace()
        .skip_while(|w| *w != "Version")
        .nth(1)
        .unwrap_or("(version unknown)");
    let lib = text
        .split_whitespace()
        .skip_while(|w| *w != "librdkafka")
        .nth(1)
        .map(|v| format!(", librdkafka {}", v.trim_end_matches([')', ','])))
        .unwrap_or_default();
    Some(format!("kcat {version}{lib}"))
}

/// The size of the blocks kcat's stdio writes to a pipe (glibc: the pipe's `st_blksize`).
const KCAT_BLOCK: usize = 4096;

/// Same-run baseline beside the bare consumer: kcat reads the whole topic from the start to
/// its end (`-o beginning -e`), printing one newline per record (`-f '\n'`, the cheapest
/// output that still shows every record), and this counts the newlines. Returns the rate
/// and kcat's CPU (user + system, the whole process) in µs per record.
///
/// kcat's stdout to a pipe is written in 4 KiB blocks (4,096 records); the last, partial
/// block only when kcat exits, which librdkafka delays by up to `fetch.wait.max.ms`
/// (500 ms) while it waits out the fetch in flight at the end of the log. So the window
/// runs from the first block read to the last block before the final one, and the records
/// are counted between the two, like the bare consumer's first-to-last-record window. The
/// run fails unless every record was printed.
pub fn kcat_consume(bin: &str, brokers: &str, topic: &str, n: u64) -> Result<(f64, f64)> {
    let cpu0 = cpu_children();
    let mut child = kcat_command(bin)
        .args(["-C", "-b", brokers, "-t", topic])
        .args(["-o", "beginning", "-e", "-q", "-f", "\\n"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting {bin}"))?;
    // A kcat that never reaches the end of the topic is killed after 10 minutes.
    let pid = child.id() as libc::pid_t;
    let (done, watch) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            watch.recv_timeout(Duration::from_secs(600))
        {
            // SAFETY: kill has no memory preconditions; `done` is sent before the child is
            // waited for, so the pid is still the child's.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    let mut out = child.stdout.take().context("kcat's stdout")?;
    // One block a read: a bigger buffer took several blocks at once when this thread was
    // late (a busy 2-core machine), and a short run then saw fewer than two reads before
    // the last ("too few blocks to time": CI of d4c2211, 20,000 records in the smoke run).
    let mut buf = vec![0u8; KCAT_BLOCK];
    let mut count = 0u64;
    // (time, records so far) at the first read, the one before the last, and the last.
    let mut first: Option<(Instant, u64)> = None;
    let mut before_last: Option<(Instant, u64)> = None;
    let mut last: Option<(Instant, u64)> = None;
    let read = loop {
        match out.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(k) => {
                count += memchr::memchr_iter(b'\n', &buf[..k]).count() as u64;
                let at = (Instant::now(), count);
                first.get_or_insert(at);
                before_last = last.replace(at);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Err(e),
        }
    };
    // kcat closes its stdout when it exits: the watchdog is no longer needed.
    let _ = done.send(());
    let _ = watchdog.join();
    let status = child.wait();
    read.context("reading kcat's output")?;
    let status = status.context("waiting for kcat")?;
    if !status.success() {
        bail!("kcat exited with {status} after printing {count} of {n} records");
    }
    if count != n {
        bail!("kcat printed {count} records, expected {n}");
    }
    let cpu = us_per_record(cpu_children().saturating_sub(cpu0), n);
    match (first, before_last) {
        (Some((t0, c0)), Some((t1, c1))) if c1 > c0 => Ok((per_sec(c1 - c0, t1 - t0), cpu)),
        _ => bail!("kcat's output came in too few blocks to time ({n} records)"),
    }
}

/// A command running kcat on the librdkafka it was installed with. `cargo run` puts the
/// build directories of the bench's own dependencies on `LD_LIBRARY_PATH`, rdkafka-sys's
/// `librdkafka.so.1` among them, and kcat would load that one instead of its own (Debian's
/// 2.0.2): those entries (under this binary's target directory) are left out; any other
/// entry is kept, so a librdkafka chosen on purpose with `LD_LIBRARY_PATH` still applies.
fn kcat_command(bin: &str) -> Command {
    let mut cmd = Command::new(bin);
    // target/release/bench → target.
    let target = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.to_path_buf()));
    if let (Some(target), Some(paths)) = (target, std::env::var_os("LD_LIBRARY_PATH")) {
        let kept: Vec<_> = std::env::split_paths(&paths)
            .filter(|p| !p.starts_with(&target))
            .collect();
        if kept.is_empty() {
            cmd.env_remove("LD_LIBRARY_PATH");
        } else if let Ok(joined) = std::env::join_paths(kept) {
            cmd.env("LD_LIBRARY_PATH", joined);
        }
    }
    cmd
}

/// CPU time (user + system) of this process's children that have ended and been waited for.
fn cpu_children() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(us(u.ru_utime) + us(u.ru_stime))
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

/// kcat as the bench found it: the binary to run and how it names itself.
#[derive(Debug, Clone)]
pub struct Kcat {
    pub bin: String,
    pub version: String,
}

/// Produces `n` records to a fresh topic and adds the baseline rows (the bare consumer, and
/// kcat when it is installed) and the auditor-path rows (key_columns, offset_columns) with
/// their ratios to both.
pub async fn rows(
    brokers: &str,
    n: u64,
    avg: usize,
    kcat: Option<&Kcat>,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let topic = unique("bench");
    create_topic(brokers, &topic).await?;
    let result = measure(brokers, &topic, n, avg, kcat, rows).await;
    // The broker is shared and keeps what it is sent (2 M records are ~400 MiB on disk).
    crate::daemon::delete_topics(brokers, std::slice::from_ref(&topic)).await;
    result
}

/// [`rows`] on its fresh `topic`.
async fn measure(
    brokers: &str,
    topic: &str,
    n: u64,
    avg: usize,
    kcat: Option<&Kcat>,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let brokers = brokers.to_string();
    let topic = topic.to_string();
    let b = brokers.clone();
    let t = topic.clone();
    let produced =
        tokio::task::spawn_blocking(move || produce(&b, &t, n as usize, dns_line)).await??;
    eprintln!(
        "produced {n} records (avg {avg} B) to {topic} in {:.1}s",
        produced.as_secs_f64()
    );
    if kcat.is_none() {
        eprintln!("kcat not found: the kcat baseline rows are skipped (apt-get install kcat)");
    }

    // This VM's speed moves by tens of percent within minutes, so one pass of each path
    // compares different machines. The paths are run PASSES times, interleaved, and each
    // ratio is taken within its pass; the rows give the median pass.
    let paths = [
        ("key_columns (client_ip,domain,time)", "key_columns", true),
        ("offset_columns (no key)", "offset_columns", false),
    ];
    let mut bare_runs: Vec<(f64, f64)> = Vec::new();
    let mut kcat_runs: Vec<(f64, f64)> = Vec::new();
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
        if let Some(k) = kcat {
            let bin = k.bin.clone();
            let b = brokers.clone();
            let t = topic.clone();
            let (rate, cpu) =
                tokio::task::spawn_blocking(move || kcat_consume(&bin, &b, &t, n)).await??;
            eprintln!(
                "pass {pass}: kcat: {} ({cpu:.2} µs CPU/record)",
                fmt_rate(rate)
            );
            kcat_runs.push((rate, cpu));
        }
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
    // Each pass's a / b, by `by` (rate or CPU).
    let per_pass = |a: &[(f64, f64)], b: &[(f64, f64)], by: fn(&(f64, f64)) -> f64| -> Vec<f64> {
        a.iter()
            .zip(b)
            .map(|(x, y)| by(x) / by(y).max(1e-9))
            .collect()
    };
    let rate_of: fn(&(f64, f64)) -> f64 = |p| p.0;
    let cpu_of: fn(&(f64, f64)) -> f64 = |p| p.1;
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
    let kcat_rate = match kcat {
        Some(k) => {
            let ratio = per_pass(&kcat_runs, &bare_runs, rate_of);
            let (r, _) = median_pair(&kcat_runs, |(r, _)| *r);
            rows.push(row(
                &format!(
                    "{}, `-C -o beginning -e -f '\\n'`, newlines counted (same topic; median of {PASSES} passes)",
                    k.version
                ),
                fmt_rate(r),
                &format!("bare consumer {}", fmt_rate(bare)),
                format!("{:.2} (passes {})", median(&ratio), spread(&ratio, "")),
                "— (baseline)",
            ));
            Some(r)
        }
        None => {
            rows.push(row(
                "kcat, same topic",
                "not measured: kcat not found (`apt-get install kcat`)".into(),
                "—",
                "—".into(),
                "— (baseline)",
            ));
            None
        }
    };
    let mut kcat_rows = Vec::new();
    let mut cpu_rows = Vec::new();
    for (i, (name, short, _)) in paths.iter().enumerate() {
        let rate = per_pass(&runs[i], &bare_runs, rate_of);
        let cpu = per_pass(&runs[i], &bare_runs, cpu_of);
        let (r, _) = median_pair(&runs[i], |(r, _)| *r);
        let (_, c) = median_pair(&runs[i], |(_, c)| *c);
        rows.push(row(
            &format!("Auditor tail + decode + ledger, {name}"),
            fmt_rate(r),
            &fmt_rate(bare),
            format!("{:.2} (passes {})", median(&rate), spread(&rate, "")),
            "≥ 0.90",
        ));
        if let Some(k) = kcat_rate {
            let vs = per_pass(&runs[i], &kcat_runs, rate_of);
            kcat_rows.push(row(
                &format!("Auditor tail + decode + ledger, {short} vs kcat"),
                fmt_rate(r),
                &format!("kcat {}", fmt_rate(k)),
                format!("{:.2} (passes {})", median(&vs), spread(&vs, "")),
                "— (reported)",
            ));
        }
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
    rows.append(&mut kcat_rows);
    if kcat.is_some() {
        let cpu = per_pass(&kcat_runs, &bare_runs, cpu_of);
        let (_, c) = median_pair(&kcat_runs, |(_, c)| *c);
        cpu_rows.push(row(
            "CPU per record: kcat (its whole process, start to exit) vs bare consumer",
            format!("{c:.2} µs"),
            &format!("{bare_cpu:.2} µs"),
            format!("{:.2}× (passes {})", median(&cpu), spread(&cpu, "×")),
            "— (diagnostic)",
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
pub const NOTES: &str = "Tailing rows: the bare consumer, kcat and the two auditor paths \
run 3 times, interleaved (bare, kcat, key_columns, offset_columns; again; again) on the \
same topic; each ratio is taken within its pass (this VM's speed moves by tens of percent \
within minutes), the Ratio column gives the median pass and every pass's figure, the Value \
and Baseline columns the median pass's rates. kcat (the Debian package, its defaults) reads \
the topic from the start to its end (`kcat -C -b BROKERS -t TOPIC -o beginning -e -q -f \
'\\n'`: one newline per record, the cheapest output that still shows every record), the \
bench counts the newlines and fails the run unless every record was printed. kcat writes \
to the pipe in 4 KiB blocks (4,096 records); its last, partial block only when it exits, \
up to `fetch.wait.max.ms` (500 ms) after its last record while librdkafka waits out the \
fetch in flight at the end of the log, so kcat's window runs from the first block read to \
the last full one, over the records between them (the others' windows: first record to \
last). When kcat is not installed its rows say so and the run goes on. CPU per record: \
the bench process's user + system time (`getrusage(RUSAGE_SELF)`, every thread: \
librdkafka's, the tailing thread, the ledger feed) over that path alone, consumer creation \
to the last record, over the records; kcat's is its whole process's \
(`getrusage(RUSAGE_CHILDREN)`), start to exit.";

/// Microseconds of CPU per record.
fn us_per_record(cpu: Duration, n: u64) -> f64 {
    cpu.as_secs_f64() * 1e6 / n.max(1) as f64
}
