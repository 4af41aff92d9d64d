//! Issue 41 item 1: a day-long incident, accelerated. A pipeline that drops every second
//! record (a filter bug, a `max_filter_ratio` eating one record type) for 10 minutes at the
//! highest rate the machine audits, with `give_up_after` shortened from 24 h to 30 s so
//! that the run goes through give-up twenty times over, as a day does at the default. The
//! real binary, offset_columns, 2 partitions, the shared Apache Kafka and MariaDB.
//!
//! Asserted: peak VmHWM <= 256 MiB; VmRSS flat once gaps are being given up (the middle of
//! every three consecutive 10 s samples after the baseline within +10 % of it, see
//! [`baseline_secs`]; a sample is the lowest of 10 per-second readings, what is held
//! between rounds, see [`Sample::rss_kib`]); the daemon keeps
//! deciding (records_lost_total rises in every 30 s window after the baseline); once every
//! record is decided and given up, an idle round costs at most 2 sink queries per
//! partition; the store holds exactly one one-record gap per lost (odd) offset, none
//! missing, none extra, and all of them but at most each partition's tail gap are
//! *retired* (store only); `gap_auditor_gaps_open` and `gap_auditor_records_missing` still
//! count every lost record (the retired aggregate); no panic.
//!
//! What the old code did (before the retired gaps, e5f5ae4): a given-up gap stayed in the
//! partition ledger, so memory grew with every lost record for as long as the incident
//! lasted (~8.6 M gaps a day at 1 % loss of 10 k rec/s). `GAP_AUDITOR_GIVEUP_SOAK_GIVE_UP_SECS`
//! = 86400 (the default `give_up_after`) keeps every gap in memory the same way (none is
//! given up within the run) and this test then fails on the flatness assertion: measured
//! over 90 s at ~16 k rec/s, VmRSS 174 MiB at 60 s, then 206, 226 and 270 MiB (+55 %),
//! peak VmHWM 281 MiB, where the same run with 30 s stayed at 155..161 MiB after 60 s
//! (peak 206 MiB).
//!
//! The load (as in keys_total_loss): a producer thread sends fixed-width DNS lines
//! ([`line`]) round-robin to 2 partitions in batches of [`BATCH`], waits for the broker's
//! acks, then, as the pipeline, writes the rows of the batch's EVEN offsets (multi-row
//! INSERTs of `partition` and `offset` only: offset_columns reads nothing else, and a thin
//! row keeps MariaDB's share of the two cores small so that the rate measures the auditor)
//! and commits the pipeline group every [`COMMIT_EVERY`], after the rows: a checkpoint.
//! Every odd offset is lost, one one-record gap per lost record. It never runs more than
//! [`WINDOW`] records ahead of what the daemon has decided, so the rate is the highest the
//! machine audits end to end; it is reported.
//!
//! Measured at full length (600 s), load 1.7-1.9 (only this test beside the services):
//! 9.86 M records at 16.4 k rec/s, 4,932,000 gaps, every one exact and retired, gaps_open
//! and records_missing 4,932,000, 0.5 sink queries per idle round and partition, peak
//! VmHWM 210 MiB; but VmRSS, flat at 166..174 MiB from 60 s to 180 s, then swung between
//! 150 and 209 MiB (+23.5 % over the 169 MiB baseline at 330 s) and came back down
//! (147..160 MiB in minute 10): no trend, yet the flatness assertion FAILS. A run beside
//! other builds (load 3-4) did the same (+16.9 %, 4,118,000 gaps, all else passing). The
//! swings are heap (RssAnon; RssFile stayed at 23 MiB) and their cause is not established
//! (they correlate only weakly with the records decided per 10 s, 0.23, and with
//! records_pending, -0.14). The assertion is kept as issue 41 states it. The 120 s form
//! (scripts/test.sh) passed: +2.6 %, peak 171 MiB on a quiet machine; +7.0 %, peak 183 MiB
//! beside builds; and failed in CI (+13.9 %, a baseline taken before the level).
//!
//! Those were single readings, one per 10 s. heaptrack of a 120 s run (the daemon built
//! with glibc's malloc; its RssAnon had the same shape) showed why they swing: within every
//! 1 s round the heap rises by 30-45 MiB (the round's new and given-up gaps as `Gap` values
//! and their store rows, the ledger delta's JSON items) and falls back, so one reading lands
//! anywhere in that band; the heap between rounds rose to 111 MiB by 70 s and stayed at
//! 111..117 MiB to the end. That rise was the ledger's maps: appends leave B-tree nodes half
//! full, and they were rebuilt only while they grew, so within one give_up_after every full
//! node was replaced by a half-full one (now rebuilt as they turn over, see
//! `PartitionLedger::compact`). A sample is now the lowest of its 10 per-second readings
//! (the held memory; the peak bounds the rest), and the short form's baseline is taken after
//! the first give_up_after has turned over (see [`baseline_secs`]).
//!
//! Measured after both changes (180 s, beside two helper builds): 2.9 M records at 15.7 k
//! rec/s, 1,419,000 gaps exact and retired; VmRSS floor 147 MiB at the 90 s baseline, then
//! 129..139 MiB (-5.0 %); 10 s medians up to +5.5 %; single readings up to 185 MiB; peak
//! VmHWM 187 MiB. The same run before the ledger change: floor 167 MiB, then up to +6.9 %,
//! peak 203 MiB. The old behaviour with these statistics (`..._GIVE_UP_SECS=86400`, 120 s):
//! floor 200 MiB at 90 s, then 222..261 MiB (+30.6 %: NOT FLAT), peak 310 MiB: it fails.
//! At full length (600 s) after both changes, beside two builds (load 3-4): 7.86 M records
//! at 13.1 k rec/s, 3,932,000 gaps exact and retired; floor 130 MiB at the minute-2
//! baseline, then 103..139 MiB (+6.3 %: flat; medians +6.1 %), peak VmHWM 182 MiB (was
//! 210 MiB); passed.
//!
//! `GAP_AUDITOR_GIVEUP_SOAK_SECS` sets the length of the load (default 600; scripts/test.sh
//! runs 180, scripts/reliability.sh the default); the figures say which ran.

use super::soak::{
    commit_final, cpu_secs, delete_topic, line, peak_kib, per_partitions, written_bytes,
};
use super::*;
use crate::support::*;
use mysql_async::prelude::Queryable;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset as KOffset, TopicPartitionList};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 2;
/// Records produced but not yet decided, at most (the producer waits beyond it).
const WINDOW: u64 = 150_000;
/// Records per produce batch (then the producer waits for the acks and writes the rows).
const BATCH: usize = 2_000;
/// The pipeline's checkpoint interval: it commits what it has written this often.
const COMMIT_EVERY: Duration = Duration::from_millis(500);
/// VmRSS sampling period.
const SAMPLE_EVERY: u64 = 10;
/// The shortened `give_up_after`, seconds.
const GIVE_UP_SECS: u64 = 30;
/// Allowed growth over the baseline.
const FLAT: f64 = 1.10;
/// Peak resident memory bound (issue 41's acceptance; SPEC guarantee 7).
const PEAK_RSS_BOUND_KIB: u64 = 256 * 1024;
/// Idle rounds measured at the end (verify_interval 1 s).
const IDLE_ROUNDS: u64 = 10;
/// The audit's name in the tests' config.
const AUDIT: &str = "dns_logs";

fn run_secs() -> u64 {
    std::env::var("GAP_AUDITOR_GIVEUP_SOAK_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600)
}

/// `give_up_after` in seconds: [`GIVE_UP_SECS`] unless `GAP_AUDITOR_GIVEUP_SOAK_GIVE_UP_SECS`
/// says otherwise (86400 shows the old behaviour: nothing leaves memory within the run).
fn give_up_secs() -> u64 {
    std::env::var("GAP_AUDITOR_GIVEUP_SOAK_GIVE_UP_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(GIVE_UP_SECS)
}

/// The end of the baseline: minute 2 for a run long enough to leave 2 minutes after it (the
/// issue's "minute-2 level"), else 2 × `give_up_after` + 30 s (90 s: the short CI form),
/// once the gaps of the first give_up_after have all left memory and been replaced. A CI
/// run whose baseline ended at 60 s failed on the rise before that (148 MiB at 60 s,
/// 161..171 MiB after, no trend; the ledger's half-full maps, since fixed, see the module
/// doc). Always on the 30 s schedule, whatever
/// `GAP_AUDITOR_GIVEUP_SOAK_GIVE_UP_SECS` says, so the old behaviour is measured against
/// the same baseline.
fn baseline_secs(run: u64) -> u64 {
    if run >= 240 {
        120
    } else {
        2 * GIVE_UP_SECS + 30
    }
}

/// The median of `xs` (the lower middle of an even count; 0 when empty).
fn median(xs: impl Iterator<Item = u64>) -> u64 {
    let mut v: Vec<u64> = xs.collect();
    v.sort_unstable();
    v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0)
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

/// Is the record at `offset` lost (the pipeline drops it)?
fn lost(offset: i64) -> bool {
    offset % 2 == 1
}

/// The pipeline's rows: `(partition, offset)` of each record it writes, in multi-row
/// INSERTs of 1,000 rows (prepared: integers only, bound by the protocol). Like a real
/// pipeline it retries a failed write (up to 5 minutes): the shared MariaDB is restarted by
/// other tests now and then. A retried INSERT that had landed leaves duplicate rows, which
/// offset_columns counts as duplicates, never as a confirmation of another offset.
async fn write_rows(db: &Db, table: &str, rows: &[(i32, i64)]) {
    for part in rows.chunks(1_000) {
        let mut params: Vec<mysql_async::Value> = Vec::with_capacity(part.len() * 2);
        for &(p, o) in part {
            params.push(p.into());
            params.push(o.into());
        }
        let marks = vec!["(?,?)"; part.len()].join(",");
        let sql = format!("INSERT INTO `{table}` (`partition`, `offset`) VALUES {marks}");
        let mut tries = 0;
        loop {
            let done = match db.pool.get_conn().await {
                Ok(mut c) => c
                    .exec_drop(&sql, mysql_async::Params::Positional(params.clone()))
                    .await
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match done {
                Ok(()) => break,
                Err(e) if tries < 300 => {
                    tries += 1;
                    eprintln!("giveup_soak: pipeline write failed ({e}), retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(e) => panic!("pipeline write failed for 5 minutes: {e}"),
            }
        }
    }
}

/// Produces until `flow.stop`, writing the kept records' rows and committing after them;
/// returns the records acknowledged per partition and the next line number.
fn produce(
    s: (&str, &str, &str),
    db: &Db,
    rt: &tokio::runtime::Handle,
    flow: &Flow,
) -> (Vec<i64>, usize) {
    let (topic, group, table) = s;
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
    let mut rows: Vec<(i32, i64)> = Vec::with_capacity(BATCH);
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
        rows.clear();
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
            let offset = counts[p as usize];
            if !lost(offset) {
                rows.push((p, offset));
            }
            counts[p as usize] += 1;
            i += 1;
        }
        producer.flush(Duration::from_secs(60)).expect("flush");
        // The rows first, then (at the checkpoint) the commit that covers them.
        rt.block_on(write_rows(db, table, &rows));
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

/// One 10 s sample of the daemon.
#[derive(Debug, Clone)]
struct Sample {
    secs: u64,
    /// The lowest of the window's per-second VmRSS readings: what the daemon holds between
    /// rounds. A round allocates and frees 30-45 MiB (its new and given-up gaps, their
    /// store rows, the ledger delta's JSON) within its second or two, so one reading lands
    /// anywhere between the held memory and that peak: a median still moved with the
    /// rounds' length (+8.9 % beside two builds, where rounds took 2-3 s). Growth of what is
    /// held (gaps kept in memory, an allocator's creep) raises the floor as much as any
    /// reading; what a round adds on top is bounded by the peak (VmHWM, asserted).
    rss_kib: u64,
    /// The median and the highest per-second VmRSS reading of the window (figures only).
    rss_median_kib: u64,
    rss_max_kib: u64,
    /// RssAnon and RssFile + RssShmem of the daemon: heap growth vs pages of mapped files.
    anon_kib: u64,
    file_kib: u64,
    lost: f64,
    confirmed: f64,
    /// records_pending over the partitions (undecided records the daemon holds).
    pending: f64,
    /// gap_auditor_gaps_open over the partitions (retired gaps included).
    open: f64,
    produced: u64,
    written: u64,
    queries: f64,
    cpu: f64,
}

/// A `name` line of /proc/PID/status, KiB.
fn status_kib(pid: u32, name: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The gaps of `topic` in the store, checked against the truth (every odd offset below
/// each partition's end lost, alone) row by row as they stream out of SQLite: millions of
/// rows, no per-offset set.
#[derive(Debug, Default)]
struct StoreCheck {
    rows: u64,
    /// Rows that are exactly one lost offset (first = last odd, missing 1), each above the
    /// previous row of its partition (so no offset twice).
    exact: u64,
    /// Lost offsets some row covers (each counted once).
    covered: u64,
    /// Offsets rows cover that were not lost, or that an earlier row covered already.
    false_positives: u64,
    retired: u64,
    /// The first few rows that are not exact, for the failure message.
    wrong: Vec<(i64, i64, i64, i64)>,
}

fn check_store(state: &Path, topic: &str, counts: &[i64]) -> StoreCheck {
    let db = rusqlite::Connection::open_with_flags(
        state.join("gaps.sqlite"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("gap store");
    let mut stmt = db
        .prepare(
            "SELECT partition, first_offset, last_offset, missing_records, retired FROM gaps \
             WHERE audit = ?1 AND topic = ?2 ORDER BY partition, first_offset",
        )
        .expect("query");
    let mut rows = stmt.query([AUDIT, topic]).expect("gap rows");
    let mut c = StoreCheck::default();
    // Per partition: the highest offset a row covered so far.
    let mut high = vec![-1i64; counts.len()];
    while let Some(r) = rows.next().expect("gap row") {
        let (p, first, last, missing, retired): (i64, i64, i64, i64, i64) = (
            r.get(0).expect("partition"),
            r.get(1).expect("first_offset"),
            r.get(2).expect("last_offset"),
            r.get(3).expect("missing_records"),
            r.get(4).expect("retired"),
        );
        c.rows += 1;
        c.retired += u64::from(retired == 1);
        let Some(end) = usize::try_from(p).ok().and_then(|i| counts.get(i)) else {
            c.false_positives += (last - first + 1).max(0) as u64;
            c.wrong.truncate(4);
            c.wrong.push((p, first, last, missing));
            continue;
        };
        let h = &mut high[p as usize];
        let exact = first == last && missing == 1 && lost(first) && first < *end && first > *h;
        // Lost offsets in [from, to]: the odd ones, below the partition's end.
        let from = first.max(*h + 1);
        let to = last.min(end - 1);
        let odd = if from > to {
            0
        } else {
            ((to + 1) / 2 - from / 2).max(0) as u64
        };
        c.covered += odd;
        c.false_positives += (last - first + 1).max(0) as u64 - odd;
        *h = (*h).max(last);
        if exact {
            c.exact += 1;
        } else if c.wrong.len() < 5 {
            c.wrong.push((p, first, last, missing));
        }
    }
    c
}

/// Gap rows of `topic` the store marks retired (read-only beside the running daemon: the
/// store is in WAL mode, a reader never blocks its writer).
fn retired_rows(state: &Path, topic: &str) -> u64 {
    let Ok(db) = rusqlite::Connection::open_with_flags(
        state.join("gaps.sqlite"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    ) else {
        return 0;
    };
    db.query_row(
        "SELECT COUNT(*) FROM gaps WHERE audit = ?1 AND topic = ?2 AND retired = 1",
        [AUDIT, topic],
        |r| r.get::<_, i64>(0),
    )
    .map_or(0, |n| n as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_second_record_lost_for_minutes_given_up_keeps_rss_flat_and_the_store_exact() {
    let secs = run_secs();
    let give_up = give_up_secs();
    let baseline_at = baseline_secs(secs);
    assert!(
        secs >= baseline_at + 3 * SAMPLE_EVERY,
        "GAP_AUDITOR_GIVEUP_SOAK_SECS={secs}: at least {} s",
        baseline_at + 3 * SAMPLE_EVERY
    );
    let s = Scenario::with_partitions("giveupsoak", PARTITIONS).await;
    let topic = s.topic.clone();
    let listen = format!("127.0.0.1:{}", free_port());
    let addr: SocketAddr = listen.parse().expect("addr");
    let spec = AuditSpec {
        listen: &listen,
        ..s.spec("offset_columns", "1s", "1s")
    };
    let toml = config_toml(&spec).replace(
        "batch_size = 100",
        &format!("batch_size = 1000\ngive_up_after = \"{give_up}s\""),
    );
    assert!(toml.contains("give_up_after"), "config: {toml}");
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
        let (flow, topic, group, table) = (
            flow.clone(),
            topic.clone(),
            s.pipeline_group.clone(),
            s.table.clone(),
        );
        let (db, rt) = (s.db.clone(), tokio::runtime::Handle::current());
        std::thread::spawn(move || produce((&topic, &group, &table), &db, &rt, &flow))
    };

    // Every second: what the daemon decided (the producer's window); every 10 s: a sample.
    let decided = |t: &str| {
        per_partitions(t, "gap_auditor_records_lost_total", &topic)
            + per_partitions(t, "gap_auditor_records_confirmed_total", &topic)
    };
    let queries =
        |t: &str| sample(t, "gap_auditor_sink_queries_total", &[("result", "ok")]).unwrap_or(0.0);
    let mut samples: Vec<Sample> = Vec::new();
    let mut scrape_failures = 0u32;
    let mut next = SAMPLE_EVERY;
    // VmRSS and RssAnon read every second; a sample takes the floor of its 10 s window.
    let mut window: Vec<(u64, u64)> = Vec::new();
    while next <= secs {
        tokio::time::sleep(Duration::from_secs(1)).await;
        if let (Some(r), Some(a)) = (rss_kib(pid), status_kib(pid, "RssAnon:")) {
            window.push((r, a));
        }
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
        if window.is_empty() {
            panic!("the daemon is gone at {at} s; log:\n{}", daemon.log_text());
        }
        let x = Sample {
            secs: at,
            rss_kib: window.iter().map(|w| w.0).min().unwrap_or(0),
            rss_median_kib: median(window.iter().map(|w| w.0)),
            rss_max_kib: window.iter().map(|w| w.0).max().unwrap_or(0),
            anon_kib: window.iter().map(|w| w.1).min().unwrap_or(0),
            file_kib: status_kib(pid, "RssFile:").unwrap_or(0)
                + status_kib(pid, "RssShmem:").unwrap_or(0),
            lost: per_partitions(&t, "gap_auditor_records_lost_total", &topic),
            confirmed: per_partitions(&t, "gap_auditor_records_confirmed_total", &topic),
            pending: per_partitions(&t, "gap_auditor_records_pending", &topic),
            open: per_partitions(&t, "gap_auditor_gaps_open", &topic),
            produced: flow.produced.load(Ordering::Relaxed),
            written: written_bytes(pid).unwrap_or(0),
            queries: queries(&t),
            cpu: cpu_secs(pid).unwrap_or(0.0),
        };
        eprintln!("giveup_soak: {x:?}");
        samples.push(x);
        window.clear();
        next += SAMPLE_EVERY;
    }
    let load_secs = started.elapsed().as_secs_f64();

    // The end: the producer stops; one last record per partition alone proves the offsets
    // (its acknowledged offset), written by the pipeline if it is kept.
    flow.stop.store(true, Ordering::Relaxed);
    let (mut counts, next_line) = producer.join().expect("producer thread");
    let waited_ms = flow.waited_ms.load(Ordering::Relaxed);
    for p in 0..PARTITIONS {
        let at = s
            .producer
            .send(p, line(next_line + p as usize).as_bytes())
            .await;
        assert_eq!(
            at, counts[p as usize],
            "partition {p} holds exactly offsets 0..{}",
            counts[p as usize]
        );
        if !lost(at) {
            write_rows(&s.db, &s.table, &[(p, at)]).await;
        }
        counts[p as usize] += 1;
    }
    commit_final(&s.pipeline_group, &topic, &counts);
    let n: i64 = counts.iter().sum();
    // Offsets 0..c of a partition: c / 2 odd ones, lost.
    let want_lost: i64 = counts.iter().map(|c| c / 2).sum();
    let want_confirmed = n - want_lost;
    let all_decided = Instant::now();
    daemon
        .wait_until(600, || async {
            let t = scrape(addr).await.ok_or("no /metrics")?;
            let l = per_partitions(&t, "gap_auditor_records_lost_total", &topic);
            let c = per_partitions(&t, "gap_auditor_records_confirmed_total", &topic);
            if l == want_lost as f64 && c == want_confirmed as f64 {
                Ok(())
            } else {
                Err(format!(
                    "lost {l} of {want_lost}, confirmed {c} of {want_confirmed} after the load stopped"
                ))
            }
        })
        .await;
    let decided_after = all_decided.elapsed().as_secs_f64();

    // Every gap given up: all but at most each partition's tail gap retired (store only).
    // Skipped when give_up_after is longer than a wait (the old behaviour, run by hand).
    let retired_wait = Instant::now();
    if give_up <= 60 {
        let state = s.state.path().to_path_buf();
        let (tp, want) = (topic.clone(), want_lost as u64 - PARTITIONS as u64);
        daemon
            .wait_until(give_up + 120, || {
                let (state, tp) = (state.clone(), tp.clone());
                async move {
                    let got = tokio::task::spawn_blocking(move || retired_rows(&state, &tp))
                        .await
                        .expect("store count task");
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    if got >= want {
                        Ok(())
                    } else {
                        Err(format!("{got} gaps retired, want at least {want}"))
                    }
                }
            })
            .await;
    }
    let retired_after = if give_up <= 60 {
        format!(
            "all given up {:.0} s later",
            retired_wait.elapsed().as_secs_f64()
        )
    } else {
        "give-up not waited for".to_string()
    };

    // Idle: nothing arrives, nothing is due, every gap given up. IDLE_ROUNDS rounds of
    // verify_interval = 1 s.
    let t = scrape(addr).await.expect("/metrics");
    let (q0, w0) = (queries(&t), written_bytes(pid).expect("/proc/PID/io"));
    tokio::time::sleep(Duration::from_secs(IDLE_ROUNDS)).await;
    let t = scrape(addr).await.expect("/metrics");
    let (q1, w1) = (queries(&t), written_bytes(pid).expect("/proc/PID/io"));
    let idle_queries = (q1 - q0) / IDLE_ROUNDS as f64 / f64::from(PARTITIONS);
    let idle_bytes = (w1 - w0) as f64 / IDLE_ROUNDS as f64;
    let open = per_partitions(&t, "gap_auditor_gaps_open", &topic);
    let missing = per_partitions(&t, "gap_auditor_records_missing", &topic);
    let reported_lost = per_partitions(&t, "gap_auditor_records_lost_total", &topic);
    let consumed = per_partitions(&t, "gap_auditor_records_consumed_total", &topic);
    let folded = sample(&t, "gap_auditor_gaps_folded_total", &[]).unwrap_or(0.0);
    let peak = peak_kib(pid).expect("VmHWM of the daemon");
    let rss_end = rss_kib(pid).unwrap_or(0);
    daemon.stop();
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    let panics = log_text.lines().filter(|l| l.contains("panicked")).count();
    delete_topic(&topic, "giveup_soak").await;

    let read_at = Instant::now();
    let store = {
        let (state, tp, c) = (s.state.path().to_path_buf(), topic.clone(), counts.clone());
        tokio::task::spawn_blocking(move || check_store(&state, &tp, &c))
            .await
            .expect("store check task")
    };
    let read_secs = read_at.elapsed().as_secs_f64();
    // The sink table holds millions of rows: dropped (best effort) once read.
    if let Ok(mut c) = s.db.pool.get_conn().await {
        let _ = c
            .query_drop(format!("DROP TABLE IF EXISTS `{}`", s.table))
            .await;
    }

    // Figures.
    let baseline = samples
        .iter()
        .find(|x| x.secs >= baseline_at)
        .cloned()
        .expect("a baseline sample");
    // The baseline: the highest sample of the 30 s before it. One sample alone is a coin
    // toss: resident memory follows the backlog the load leaves in librdkafka's queue and
    // the ledger (keys_total_loss once saw a trough 15 % under its neighbours). A creep is
    // still caught: every later sample must stay within +10 % of the highest level the
    // baseline's window reached.
    let level = samples
        .iter()
        .filter(|x| x.secs + 30 >= baseline.secs && x.secs <= baseline.secs)
        .map(|x| x.rss_kib)
        .max()
        .unwrap_or(baseline.rss_kib);
    let after: Vec<&Sample> = samples.iter().filter(|x| x.secs > baseline.secs).collect();
    // Held memory that grows stays up: what is compared with the level is the middle of
    // every three consecutive samples (30 s) after the baseline. One 10 s window above it
    // alone is not growth: a fresh-clone CI run was flat at 132..139 MiB from 60 s to 170 s
    // (level 139 MiB) and its last window alone read 153 MiB (+10.4 %), failing the run.
    // The old behaviour grows in every window (+30.6 %); the peak bounds any excursion.
    let max_after = after
        .windows(3)
        .map(|w| {
            let mut v = [w[0].rss_kib, w[1].rss_kib, w[2].rss_kib];
            v.sort_unstable();
            v[1]
        })
        .max()
        .unwrap_or(0);
    let min_after = after.iter().map(|x| x.rss_kib).min().unwrap_or(0);
    let last = samples.last().cloned().expect("samples");
    let steady = last.secs.saturating_sub(baseline.secs).max(1) as f64;
    let rate = (last.lost + last.confirmed - baseline.lost - baseline.confirmed) / steady;
    let per_round_bytes = (last.written - baseline.written) as f64 / steady; // verify_interval 1 s
    let per_round_queries = (last.queries - baseline.queries) / steady;
    let cpu_share = (last.cpu - baseline.cpu) / steady;
    let pending_peak = samples.iter().map(|x| x.pending).fold(0.0, f64::max);
    let per_minute: Vec<String> = (1..=last.secs / 60)
        .filter_map(|m| samples.iter().find(|x| x.secs >= m * 60))
        .map(|x| {
            format!(
                "{} ({} anon, {} file)",
                x.rss_kib / 1024,
                x.anon_kib / 1024,
                x.file_kib / 1024
            )
        })
        .collect();
    let flat = max_after as f64 <= FLAT * level as f64;
    let false_negatives = (want_lost as u64).saturating_sub(store.covered);
    let notes = format!(
        "offset_columns, {PARTITIONS} partitions, every odd offset lost (the pipeline writes \
         the even ones), give_up_after {give_up} s, grace 1 s, verify_interval 1 s, \
         batch_size 1000, {load_secs:.0} s of load: {n} records produced ({:.0} rec/s; the \
         producer kept at most {WINDOW} undecided and waited {:.0} s of it), {want_lost} lost; \
         after the baseline the daemon decided {rate:.0} rec/s at {:.0} % of a core, \
         {per_round_queries:.1} sink queries and {:.1} MiB written per 1 s round, \
         records_pending peak {pending_peak}, gaps_open {} when the load stopped; all decided {decided_after:.0} s after the load \
         stopped, {retired_after}; VmRSS {} MiB idle, {} MiB at the \
         baseline ({} s, the highest sample of its last 30 s; a sample is the lowest of 10 \
         per-second readings), then {}..{} MiB (30 s middles up to {:+.1} % of it, bound \
         +{:.0} %: {}; \
         10 s medians up to {:+.1} % of the baseline's, single readings up to {} MiB), {} MiB \
         at the end; peak VmHWM {} MiB (bound {} MiB); \
         VmRSS per minute (MiB): {}; idle: {idle_queries:.2} sink queries per round and \
         partition, {idle_bytes:.0} bytes written per round; store: {} gap rows ({} exact, \
         {} retired), read in {read_secs:.1} s; gaps_open {open}, records_missing {missing}, \
         gaps_folded_total {folded}; {scrape_failures} failed scrapes, {panics} panics",
        n as f64 / load_secs,
        waited_ms as f64 / 1000.0,
        cpu_share * 100.0,
        per_round_bytes / (1024.0 * 1024.0),
        last.open,
        rss_idle / 1024,
        level / 1024,
        baseline.secs,
        min_after / 1024,
        max_after / 1024,
        (max_after as f64 / level as f64 - 1.0) * 100.0,
        (FLAT - 1.0) * 100.0,
        if flat { "flat" } else { "NOT FLAT" },
        (after.iter().map(|x| x.rss_median_kib).max().unwrap_or(0) as f64
            / samples
                .iter()
                .filter(|x| x.secs + 30 >= baseline.secs && x.secs <= baseline.secs)
                .map(|x| x.rss_median_kib)
                .max()
                .unwrap_or(1)
                .max(1) as f64
            - 1.0)
            * 100.0,
        after.iter().map(|x| x.rss_max_kib).max().unwrap_or(0) / 1024,
        rss_end / 1024,
        peak / 1024,
        PEAK_RSS_BOUND_KIB / 1024,
        per_minute.join(", "),
        store.rows,
        store.exact,
        store.retired,
    );
    eprintln!("giveup_soak_every_second_record: {notes}");
    crate::figures::record(&crate::figures::Figures {
        scenario: "giveup_soak_every_second_record",
        runs: 1,
        faults: 1,
        expected_lost: want_lost as u64,
        reported_lost: reported_lost as u64,
        expected_gaps: want_lost as u64,
        reported_gaps: store.rows,
        false_positives: store.false_positives,
        false_negatives,
        notes,
    });

    // Exactness first: a wrong report is worse than memory.
    assert_eq!(panics, 0, "the daemon panicked");
    assert_eq!(consumed, n as f64, "every record consumed once");
    assert_eq!(reported_lost, want_lost as f64, "every odd offset lost");
    assert_eq!(
        (store.false_positives, false_negatives),
        (0, 0),
        "(false positives, false negatives); first wrong rows: {:?}",
        store.wrong
    );
    assert_eq!(
        (store.rows, store.exact),
        (want_lost as u64, want_lost as u64),
        "one one-record gap per lost offset; first wrong rows: {:?}",
        store.wrong
    );
    assert!(
        store.retired + PARTITIONS as u64 >= want_lost as u64,
        "{} of {want_lost} gaps retired: given-up gaps must leave memory",
        store.retired
    );
    assert_eq!(
        folded, 0.0,
        "max_open_gaps (500,000 by default) never reached"
    );
    assert_eq!(
        open, want_lost as f64,
        "gap_auditor_gaps_open counts the retired gaps"
    );
    assert_eq!(
        missing, want_lost as f64,
        "gap_auditor_records_missing counts the retired gaps' records"
    );
    assert!(
        idle_queries <= 2.0,
        "an idle round cost {idle_queries:.2} sink queries per partition"
    );
    assert!(
        flat,
        "VmRSS grew after the baseline: up to {level} KiB by {} s, max {max_after} KiB \
         after; samples: {:?}",
        baseline.secs,
        samples
            .iter()
            .map(|x| (x.secs, x.rss_kib))
            .collect::<Vec<_>>()
    );
    assert!(
        peak <= PEAK_RSS_BOUND_KIB,
        "peak VmHWM {} MiB over the bound {} MiB",
        peak / 1024,
        PEAK_RSS_BOUND_KIB / 1024
    );
    let seq: Vec<&Sample> = std::iter::once(&baseline)
        .chain(after.iter().copied())
        .collect();
    // Three samples: 30 s (a round's store commit fsyncs; beside builds one took > 10 s).
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
}
