//! Issue 14: the bad day for `key_columns` — a pipeline that writes NOTHING (a sink writing
//! to the wrong table, a filter dropping everything) while records arrive as fast as the
//! machine audits them, for 10 minutes. The real binary, the shared Kafka broker and
//! MariaDB; the sink table stays empty, so every record is missing and each partition holds
//! one gap that grows for the whole run. The daemon's resident memory must be flat after
//! the first minute: every later VmRSS sample (one every 10 s) within 10 % of the first
//! minute's level (the highest sample of its last 30 s; see the assertion for why not one
//! sample). Also asserted: the cap was reached before that sample, `records_lost_total`
//! rises in every 30 s window after it (the daemon still verifies), no panic, and at the
//! end every record is decided lost (nothing confirmed) in one gap per partition. Why 30 s,
//! not one 10 s sample: the counter moves once the round's verdicts are in the store, whose
//! commit fsyncs; with four cargo builds writing to the same disk (load 6 on 2 cores) one
//! commit took over 10 s, and the daemon rightly decided nothing more until it was done.
//!
//! What the old code did wrong: a missing record's key was kept for re-checks (late
//! arrivals) until `give_up_after` (24 h by default), and nothing else bounded them:
//! `max_pending` caps undecided records only. A total loss at 10 k rec/s kept ~860 M keys a
//! day, resident memory growing with every record until the process was killed. Now the
//! audit keeps at most `max_missing_keys` of them (the oldest missing records beyond it
//! stop being re-checked; they stay missing, counted in
//! `gap_auditor_missing_keys_dropped_total`). With `GAP_AUDITOR_KEYS_LOSS_CAP=100000000` (a
//! cap never reached: the old behaviour) this test fails on the RSS assertion: measured
//! 404 MiB at 1 minute, 742 MiB at 3 minutes.
//!
//! The load: a producer thread sends DNS lines with unique keys of a fixed width ([`line`])
//! round-robin to 2 partitions in batches of [`BATCH`], waits for the broker's acks, and
//! like a checkpointing pipeline commits the acknowledged ends for the pipeline group every
//! [`COMMIT_EVERY`] (writing no rows), so every record becomes due `grace` (1 s) after;
//! `verify_interval` is 1 s. It sends as fast as it can, but never more than [`WINDOW`]
//! records ahead of what the daemon has decided: on 2 shared cores an unthrottled producer
//! (and the broker it feeds) would starve the daemon, and the run would measure
//! backpressure at `max_pending` instead of the audit. The rate achieved is therefore the
//! highest rate the machine audits end to end, and is reported (12.8–14.4 k rec/s with
//! the debug build the suite runs).
//!
//! [`MAX_MISSING_KEYS`] = 50,000: a few seconds of that rate, so the cap is reached long
//! before the 1-minute baseline (by the first 10 s sample in every run so far; a machine 5x
//! slower still reaches it within the minute), and the baseline is in the capped regime —
//! the test asserts it. The default (1,000,000) is reached only after ~75 s at that rate.
//! `GAP_AUDITOR_KEYS_LOSS_CAP` runs it with any cap, `GAP_AUDITOR_KEYS_LOSS_MAX_PENDING` with
//! a `max_pending` (default: the product's), `GAP_AUDITOR_KEYS_LOSS_SECS` shortens the run
//! (default 600); the figures say which ran.
//!
//! Broker behaviour relied on: produced offsets come from the producer's acknowledgements
//! and, at the end, from one last record per partition sent alone (needed on tansu, the
//! broker before Apache Kafka, whose end offsets were right only after a one-record batch;
//! Kafka's are exact either way). The topic is deleted at the end: the broker's log dir
//! survives restarts and keeps a topic's records for its retention (7 days by default), so
//! the millions of records would otherwise stay on disk.

use super::soak::{commit_final, cpu_secs, delete_topic, line, per_partitions, written_bytes};
use super::*;
use crate::support::*;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset as KOffset, TopicPartitionList};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 2;
/// The audit's `max_missing_keys` (see the module docs for why this value).
const MAX_MISSING_KEYS: u64 = 50_000;
/// Records produced but not yet decided, at most (the producer waits beyond it).
const WINDOW: u64 = 150_000;
/// Records per produce batch (then the producer waits for the acks).
const BATCH: usize = 2_000;
/// The pipeline's checkpoint interval: it commits the acknowledged ends this often.
const COMMIT_EVERY: Duration = Duration::from_millis(500);
/// VmRSS sampling period.
const SAMPLE_EVERY: u64 = 10;
/// The end of the first minute: RSS must be flat after it.
const BASELINE_SECS: u64 = 60;
/// Allowed growth over the baseline.
const FLAT: f64 = 1.10;

fn run_secs() -> u64 {
    std::env::var("GAP_AUDITOR_KEYS_LOSS_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600)
}

/// `max_pending` of the audit: the product default unless `GAP_AUDITOR_KEYS_LOSS_MAX_PENDING`
/// says otherwise (the key book's idle capacity is `min(max_pending, 1,000,000)`).
fn max_pending() -> Option<u64> {
    std::env::var("GAP_AUDITOR_KEYS_LOSS_MAX_PENDING")
        .ok()
        .and_then(|v| v.parse().ok())
}

fn cap() -> u64 {
    std::env::var("GAP_AUDITOR_KEYS_LOSS_CAP")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MAX_MISSING_KEYS)
}

/// What the producer thread and the test share.
#[derive(Default)]
struct Flow {
    stop: AtomicBool,
    /// Records the daemon decided (records_lost_total + confirmed, over the partitions).
    decided: AtomicU64,
    /// Records acknowledged by the broker.
    produced: AtomicU64,
    /// Milliseconds the producer waited for the daemon (the window was full).
    waited_ms: AtomicU64,
}

/// Produces until `flow.stop`; returns the records acknowledged per partition and the next
/// line number.
fn produce(topic: &str, group: &str, flow: &Flow) -> (Vec<i64>, usize) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .set("linger.ms", "5")
        .set("enable.idempotence", "true")
        .create()
        .expect("load producer");
    let pipeline: BaseConsumer = group_client(group).create().expect("pipeline consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, KOffset::Beginning)
            .expect("tpl");
    }
    pipeline.assign(&tpl).expect("assign");
    let commit = |counts: &[i64]| {
        let mut tpl = TopicPartitionList::new();
        for (p, n) in counts.iter().enumerate() {
            tpl.add_partition_offset(topic, p as i32, KOffset::Offset(*n))
                .expect("tpl");
        }
        commit_retrying(&pipeline, &tpl, "pipeline commit");
    };
    let mut counts = vec![0i64; PARTITIONS as usize];
    let mut committed = counts.clone();
    let mut last_commit = Instant::now();
    let mut i = 0usize;
    while !flow.stop.load(Ordering::Relaxed) {
        let produced: u64 = counts.iter().sum::<i64>() as u64;
        if produced.saturating_sub(flow.decided.load(Ordering::Relaxed)) >= WINDOW {
            if counts != committed && last_commit.elapsed() >= COMMIT_EVERY {
                commit(&counts);
                committed = counts.clone();
                last_commit = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(10));
            flow.waited_ms.fetch_add(10, Ordering::Relaxed);
            continue;
        }
        for _ in 0..BATCH {
            let p = (i % PARTITIONS as usize) as i32;
            let v = line(i);
            let mut rec = BaseRecord::<(), str>::to(topic).partition(p).payload(&v);
            loop {
                match producer.send(rec) {
                    Ok(()) => break,
                    Err((_, r)) => {
                        rec = r;
                        producer.poll(Duration::from_millis(5));
                    }
                }
            }
            counts[p as usize] += 1;
            i += 1;
        }
        producer.flush(Duration::from_secs(60)).expect("flush");
        flow.produced
            .store(counts.iter().sum::<i64>() as u64, Ordering::Relaxed);
        if last_commit.elapsed() >= COMMIT_EVERY {
            commit(&counts);
            committed = counts.clone();
            last_commit = Instant::now();
        }
    }
    (counts, i)
}

/// (false positives, false negatives) in records between gap tuples, by interval arithmetic
/// (millions of offsets: no per-offset sets).
fn interval_misses(
    expected: &[(i64, i64, i64, i64)],
    reported: &[(i64, i64, i64, i64)],
) -> (u64, u64) {
    fn merged(g: &[(i64, i64, i64, i64)]) -> Vec<(i64, i64, i64)> {
        let mut v: Vec<(i64, i64, i64)> = g.iter().map(|&(p, f, l, _)| (p, f, l)).collect();
        v.sort();
        let mut out: Vec<(i64, i64, i64)> = Vec::new();
        for (p, f, l) in v {
            match out.last_mut() {
                Some(x) if x.0 == p && f <= x.2 + 1 => x.2 = x.2.max(l),
                _ => out.push((p, f, l)),
            }
        }
        out
    }
    let size = |v: &[(i64, i64, i64)]| v.iter().map(|x| (x.2 - x.1 + 1) as u64).sum::<u64>();
    let (e, r) = (merged(expected), merged(reported));
    let mut both = 0u64;
    for a in &e {
        for b in r.iter().filter(|b| b.0 == a.0) {
            let (lo, hi) = (a.1.max(b.1), a.2.min(b.2));
            if lo <= hi {
                both += (hi - lo + 1) as u64;
            }
        }
    }
    (size(&r) - both, size(&e) - both)
}

/// One 10 s sample of the daemon.
#[derive(Debug, Clone)]
struct Sample {
    secs: u64,
    rss_kib: u64,
    lost: f64,
    /// records_pending over the partitions (undecided records the daemon holds).
    pending: f64,
    dropped: f64,
    produced: u64,
    written: u64,
    queries: f64,
    cpu: f64,
}

/// Before b125c2c the key book was a hash table and a 180 s run went from 116,788 KiB at
/// 60 s to 132,404 KiB at 100 s (+13 %, one doubling once the live keys passed 7/8 of
/// 131,072 buckets) and 138,480 KiB at 170 s; on a B-tree a 240 s run stayed within +1.1 %.
///
/// Then (at 1e0dc62) the sharded key book, in the suite's own run on a fresh clone, went
/// from 92,216 KiB at 60 s to 101,696 KiB (+10.3 %), and 300 s runs here reached +10 to
/// +22 %, while heaptrack showed the live heap flat (~40 MiB): glibc's arenas kept the
/// freed keys' blocks. With jemalloc (a background thread, 1 s decay, two arenas), shared
/// `Arc` keys and librdkafka's queue at 4 MiB, a 600 s run beside other builds (load 7-10)
/// stayed within +4.1 % of the first minute's level.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn key_columns_total_loss_keeps_rss_flat() {
    let secs = run_secs();
    let cap = cap();
    assert!(
        secs >= BASELINE_SECS + 3 * SAMPLE_EVERY,
        "GAP_AUDITOR_KEYS_LOSS_SECS={secs}: at least {} s",
        BASELINE_SECS + 3 * SAMPLE_EVERY
    );
    let s = Scenario::with_partitions("keyloss", PARTITIONS).await;
    let topic = s.topic.clone();
    let listen = format!("127.0.0.1:{}", free_port());
    let addr: SocketAddr = listen.parse().expect("addr");
    let spec = AuditSpec {
        listen: &listen,
        ..s.spec("key_columns", "1s", "1s")
    };
    let toml = config_toml(&spec).replace(
        "batch_size = 100",
        &format!(
            "batch_size = 1000\nmax_missing_keys = {cap}{}",
            max_pending().map_or(String::new(), |m| format!("\nmax_pending = {m}"))
        ),
    );
    let cfg = s.state.path().join("gap-auditor.toml");
    std::fs::write(&cfg, toml).expect("config");
    let log = s.state.path().join("auditor.log");
    let mut daemon = Daemon::spawn(&cfg, vec![("GAP_AUDITOR_LOG", "info".into())], log.clone());
    let pid = daemon.pid();
    daemon
        .wait_until(60, || async {
            scrape(addr)
                .await
                .map(|_| ())
                .ok_or("no /metrics yet".into())
        })
        .await;
    let rss_idle = rss_kib(pid).expect("VmRSS of the daemon");

    let flow = Arc::new(Flow::default());
    let started = Instant::now();
    let producer = {
        let (flow, topic, group) = (flow.clone(), topic.clone(), s.pipeline_group.clone());
        std::thread::spawn(move || produce(&topic, &group, &flow))
    };

    // Every second: what the daemon decided (the producer's window); every 10 s: a sample.
    let decided = |t: &str| {
        per_partitions(t, "gap_auditor_records_lost_total", &topic)
            + per_partitions(t, "gap_auditor_records_confirmed_total", &topic)
    };
    let mut samples: Vec<Sample> = Vec::new();
    let mut scrape_failures = 0u32;
    let mut next = SAMPLE_EVERY;
    while next <= secs {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let text = scrape(addr).await;
        match &text {
            Some(t) => flow.decided.store(decided(t) as u64, Ordering::Relaxed),
            None => scrape_failures += 1,
        }
        assert!(
            !producer.is_finished(),
            "the producer thread ended (panicked?)"
        );
        let at = started.elapsed().as_secs();
        if at < next {
            continue;
        }
        let t = match text {
            Some(t) => t,
            None => scrape(addr).await.unwrap_or_else(|| {
                panic!(
                    "the daemon stopped answering at {at} s; log:\n{}",
                    daemon.log_text()
                )
            }),
        };
        let x = Sample {
            secs: at,
            rss_kib: rss_kib(pid).unwrap_or_else(|| {
                panic!("the daemon is gone at {at} s; log:\n{}", daemon.log_text())
            }),
            lost: per_partitions(&t, "gap_auditor_records_lost_total", &topic),
            pending: per_partitions(&t, "gap_auditor_records_pending", &topic),
            dropped: sample(&t, "gap_auditor_missing_keys_dropped_total", &[]).unwrap_or(0.0),
            produced: flow.produced.load(Ordering::Relaxed),
            written: written_bytes(pid).unwrap_or(0),
            queries: sample(&t, "gap_auditor_sink_queries_total", &[("result", "ok")])
                .unwrap_or(0.0),
            cpu: cpu_secs(pid).unwrap_or(0.0),
        };
        eprintln!("keys_total_loss: {x:?}");
        samples.push(x);
        next += SAMPLE_EVERY;
    }
    let load_secs = started.elapsed().as_secs_f64();

    // The end: the producer stops; one last record per partition alone proves the offsets.
    flow.stop.store(true, Ordering::Relaxed);
    let (mut counts, mut i) = producer.join().expect("producer thread");
    let waited_ms = flow.waited_ms.load(Ordering::Relaxed);
    for p in 0..PARTITIONS {
        let at = s.producer.send(p, line(i).as_bytes()).await;
        assert_eq!(
            at, counts[p as usize],
            "partition {p} holds exactly offsets 0..{}",
            counts[p as usize]
        );
        counts[p as usize] += 1;
        i += 1;
    }
    commit_final(&s.pipeline_group, &topic, &counts);
    let n: i64 = counts.iter().sum();
    let text = daemon
        .wait_until(300, || async {
            let t = scrape(addr).await.ok_or("no /metrics")?;
            let lost = per_partitions(&t, "gap_auditor_records_lost_total", &topic);
            if lost == n as f64 {
                Ok(t)
            } else {
                Err(format!("lost {lost} of {n} after the load stopped"))
            }
        })
        .await;
    let confirmed = per_partitions(&text, "gap_auditor_records_confirmed_total", &topic);
    let consumed = per_partitions(&text, "gap_auditor_records_consumed_total", &topic);
    let reported_lost = per_partitions(&text, "gap_auditor_records_lost_total", &topic);
    let dropped = sample(&text, "gap_auditor_missing_keys_dropped_total", &[]).unwrap_or(0.0);
    let (_, body) = http_get(addr, "/api/gaps?state=all").await;
    let gaps: Vec<serde_json::Value> = serde_json::from_str(&body).expect("gaps json");
    let reported = gap_tuples(&gaps);
    let peak = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .unwrap_or(0);
    daemon.stop();
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    let panics = log_text.lines().filter(|l| l.contains("panicked")).count();
    delete_topic(&topic, "keys_total_loss").await;

    // Figures.
    let expected: Vec<(i64, i64, i64, i64)> = counts
        .iter()
        .enumerate()
        .map(|(p, &c)| (p as i64, 0, c - 1, c))
        .collect();
    let baseline = samples
        .iter()
        .find(|x| x.secs >= BASELINE_SECS)
        .cloned()
        .expect("a sample at 1 minute");
    // The first minute's level: the highest sample of its last 30 s (cap reached by then,
    // asserted below). One sample alone is a coin toss: resident memory follows the backlog
    // the load leaves in librdkafka's queue and the ledger, and a loaded run once put a
    // trough at 60 s (82 MiB, 96 MiB at 40 s), which made +10 % of it a test of the load.
    // A creep is still caught: every later sample, spikes too, must stay within +10 % of
    // the highest level the first minute reached.
    let level = samples
        .iter()
        .filter(|x| x.secs + 30 >= BASELINE_SECS && x.secs <= baseline.secs)
        .map(|x| x.rss_kib)
        .max()
        .unwrap_or(baseline.rss_kib);
    let after: Vec<&Sample> = samples.iter().filter(|x| x.secs > baseline.secs).collect();
    let max_after = after.iter().map(|x| x.rss_kib).max().unwrap_or(0);
    let min_after = after.iter().map(|x| x.rss_kib).min().unwrap_or(0);
    let last = samples.last().cloned().expect("samples");
    let steady = last.secs.saturating_sub(baseline.secs).max(1) as f64;
    let rate = (last.lost - baseline.lost) / steady;
    let per_round_bytes = (last.written - baseline.written) as f64 / steady; // verify_interval 1 s
    let per_round_queries = (last.queries - baseline.queries) / steady;
    let cpu_share = (last.cpu - baseline.cpu) / steady;
    let pending_peak = after.iter().map(|x| x.pending).fold(0.0, f64::max);
    let cap_reached_at = samples.iter().find(|x| x.dropped > 0.0).map(|x| x.secs);
    // The first sample at or after each whole minute.
    let per_minute: Vec<String> = (1..=last.secs / 60)
        .filter_map(|m| samples.iter().find(|x| x.secs >= m * 60))
        .map(|x| format!("{}", x.rss_kib / 1024))
        .collect();
    let (false_positives, false_negatives) = interval_misses(&expected, &reported);
    let notes = format!(
        "key_columns, empty table, {PARTITIONS} partitions, {load_secs:.0} s of load, \
         max_missing_keys {cap}, max_pending {}: {n} records produced ({:.0} rec/s; the producer kept at most \
         {WINDOW} undecided and waited {:.0} s of it), all lost; after the first minute the \
         daemon decided {rate:.0} rec/s at {:.0} % of a core, {per_round_queries:.1} sink \
         queries and {:.1} MiB written per 1 s round, records_pending peak {pending_peak}; cap {}, \
         {dropped} keys dropped in all; VmRSS {} MiB idle, {} MiB in the first minute's last \
         30 s, then {}..{} MiB (max {:+.1} % of that, bound +{:.0} %: {}), peak VmHWM {} MiB; VmRSS per \
         minute (MiB): {}; {scrape_failures} failed scrapes, {panics} panics",
        max_pending().map_or("default".to_string(), |m| m.to_string()),
        n as f64 / load_secs,
        waited_ms as f64 / 1000.0,
        cpu_share * 100.0,
        per_round_bytes / (1024.0 * 1024.0),
        cap_reached_at.map_or("never reached".to_string(), |s| format!("reached by {s} s")),
        rss_idle / 1024,
        level / 1024,
        min_after / 1024,
        max_after / 1024,
        (max_after as f64 / level as f64 - 1.0) * 100.0,
        (FLAT - 1.0) * 100.0,
        if max_after as f64 <= FLAT * level as f64 {
            "flat"
        } else {
            "NOT FLAT"
        },
        peak / 1024,
        per_minute.join(", "),
    );
    eprintln!("keys_total_loss_rss_flat: {notes}");
    crate::figures::record(&crate::figures::Figures {
        scenario: "keys_total_loss_rss_flat",
        runs: 1,
        faults: 1,
        expected_lost: n as u64,
        reported_lost: reported_lost as u64,
        expected_gaps: expected.len() as u64,
        reported_gaps: reported.len() as u64,
        false_positives,
        false_negatives,
        notes,
    });

    assert!(
        max_after as f64 <= FLAT * level as f64,
        "VmRSS grew after the first minute: up to {level} KiB by {} s, max {max_after} KiB \
         after; samples: {:?}",
        baseline.secs,
        samples
            .iter()
            .map(|x| (x.secs, x.rss_kib))
            .collect::<Vec<_>>()
    );
    assert!(
        baseline.dropped > 0.0,
        "max_missing_keys {cap} not reached by {} s (only {} records decided): the 1-minute \
         baseline is not in the capped regime",
        baseline.secs,
        baseline.lost
    );
    let seq: Vec<&Sample> = std::iter::once(&baseline)
        .chain(after.iter().copied())
        .collect();
    // Three samples: 30 s (see the module docs).
    for w in seq.windows(4) {
        assert!(
            w[3].lost > w[0].lost,
            "records_lost_total stopped increasing between {} s and {} s ({}; {} produced)",
            w[0].secs,
            w[3].secs,
            w[3].lost,
            w[3].produced
        );
    }
    assert_eq!(panics, 0, "the daemon panicked");
    assert_eq!(confirmed, 0.0, "nothing is in the table");
    assert_eq!(consumed, n as f64, "every record consumed once");
    assert_eq!(reported_lost, n as f64, "every record decided lost");
    assert!(dropped > 0.0, "gap_auditor_missing_keys_dropped_total");
    assert_eq!(
        reported, expected,
        "one gap per partition, over every record"
    );
}
