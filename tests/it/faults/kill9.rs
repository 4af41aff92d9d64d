//! Item 1: `kill -9` of the real binary at 20 random moments (seeded) while it audits a
//! 100 k-record run with known losses. After the last restart has settled everything:
//! the stored gap set is exactly the truth, no gap is stored twice, and no record was
//! counted twice in `gap_auditor_records_lost_total` across the process lifetimes.
//!
//! What is persisted, and so what the counter guarantee is: a round's verdicts and gaps
//! reach the SQLite store in one transaction, and only then the counters (src/audit/report.rs,
//! `count_persisted`). A kill before that transaction loses the verdicts AND their counts;
//! the next lifetime re-decides those records and counts them once. So in every lifetime
//! the lost count it exported is at most what it persisted (checked here: the last scrape
//! before each kill against the store's growth over that lifetime), and the persisted
//! amounts add up to the truth exactly. A scrape cannot see increments made after it and
//! before the kill: summed scrapes can only fall short of the truth, never exceed it.

use super::*;
use crate::support::*;
use gap_auditor::store::Store;
use std::sync::Arc;
use std::time::{Duration, Instant};

const KILLS: usize = 20;

/// One process lifetime: the lost counter it exported last, and the store's lost records
/// when it started and when it was killed.
#[derive(Debug)]
struct Lifetime {
    scraped_lost: Option<u64>,
    stored_at_start: u64,
    stored_at_end: u64,
}

fn stored_lost(dir: &std::path::Path) -> u64 {
    let store = Store::open(dir).expect("store");
    missing(&stored_gap_tuples(&stored_gaps(&store)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_at_random_moments_of_a_100k_run() {
    let n: usize = std::env::var("GAP_AUDITOR_FAULT_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    assert!(n >= 1000, "GAP_AUDITOR_FAULT_RECORDS below 1000");
    let mut rng = Rng::from_env("kill_9_at_random_moments_of_a_100k_run");
    // Known losses: 25 runs of 1–20 records at random places.
    let mut lost = vec![false; n];
    for _ in 0..25 {
        let first = rng.range(0, n as u64 - 20) as usize;
        let len = rng.range(1, 21) as usize;
        lost[first..first + len].iter_mut().for_each(|l| *l = true);
    }
    let lost = Arc::new(lost);
    let expected = {
        let lost = lost.clone();
        expected_gaps(n as i64, move |o| lost[o as usize])
    };

    let s = Scenario::new("kill9").await;
    let t0 = Instant::now();
    produce_bulk(&s.topic, n).await;
    let produced_in = t0.elapsed();

    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let addr: std::net::SocketAddr = listen.parse().expect("addr");
    let store_dir = s.state.path().join("store");
    let cfg_path = s.state.path().join("gap-auditor.toml");
    let spec = AuditSpec {
        state_dir: &store_dir,
        listen: &listen,
        ..s.spec("offset_columns", "1s", "500ms")
    };
    // A 3 s session: after a kill -9 the group waits that long for the dead member before
    // the next lifetime gets the partition.
    let toml = config_toml(&spec)
        .replace("batch_size = 100", "batch_size = 1000")
        .replace("session_timeout = \"6s\"", "session_timeout = \"3s\"");
    std::fs::write(&cfg_path, toml).expect("write config");
    let mut auditor = Daemon::spawn(
        &cfg_path,
        vec![("GAP_AUDITOR_LOG", "info".into())],
        s.state.path().join("auditor.log"),
    );

    // The pipeline checkpoints every 1 % of the run, 1 s apart, writing all but the lost
    // records: it lasts about as long as the kills, so they land while records are decided.
    let t_run = Instant::now();
    let pipe = {
        let bulk = BulkPipeline::new(&s);
        let lost = lost.clone();
        let chunk = (n / 100).max(1) as i64;
        tokio::spawn(async move {
            let mut o = 0i64;
            while o < n as i64 {
                let end = (o + chunk).min(n as i64);
                bulk.chunk(o..end, |x| usize::from(!lost[x as usize])).await;
                o = end;
                tokio::time::sleep(Duration::from_millis(1000)).await;
            }
            Instant::now()
        })
    };

    let topic = s.topic.clone();
    let mut lives = Vec::new();
    let mut stored_at_start = 0;
    let mut assigned_at_kill = 0;
    let mut startup_kills = 0;
    let assigned = |t: &Option<String>| {
        t.as_ref().is_some_and(|t| {
            sample(t, "gap_auditor_settled_offset", &[("topic", &topic)]).is_some()
        })
    };
    for _ in 0..KILLS {
        // One kill in four at a random moment of startup (store open, group join); the
        // others at a random moment up to 3 s after the lifetime got its partition.
        if rng.range(0, 4) == 0 {
            startup_kills += 1;
            tokio::time::sleep(Duration::from_millis(rng.range(100, 3000))).await;
        } else {
            let since = Instant::now();
            while !assigned(&scrape(addr).await) && since.elapsed() < Duration::from_secs(30) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            tokio::time::sleep(Duration::from_millis(rng.range(0, 3000))).await;
        }
        let text = scrape(addr).await;
        let scraped_lost = text.as_ref().map(|t| {
            sample(t, "gap_auditor_records_lost_total", &[("topic", &topic)]).unwrap_or(0.0) as u64
        });
        if assigned(&text) {
            assigned_at_kill += 1;
        }
        auditor.kill9();
        let stored_at_end = stored_lost(&store_dir);
        lives.push(Lifetime {
            scraped_lost,
            stored_at_start,
            stored_at_end,
        });
        stored_at_start = stored_at_end;
        auditor.restart();
    }
    let kills_done = t_run.elapsed();
    let pipeline_done = pipe.await.expect("pipeline") - t_run;

    // The last lifetime settles everything.
    let dir = store_dir.clone();
    auditor
        .wait_until(240, || {
            let dir = dir.clone();
            async move {
                let settled = Store::open(&dir)
                    .ok()
                    .and_then(|s| s.load_progress("dns_logs").ok())
                    .and_then(|p| p.first().map(|p| p.settled))
                    .unwrap_or(0);
                if settled >= n as i64 {
                    Ok(())
                } else {
                    Err(format!("settled only {settled}/{n}"))
                }
            }
        })
        .await;
    // Its counters catch up with the store within a round.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let last = scrape(addr)
        .await
        .expect("the last lifetime answers /metrics");
    let last_lost = sample(
        &last,
        "gap_auditor_records_lost_total",
        &[("topic", &topic)],
    )
    .unwrap_or(0.0) as u64;
    auditor.stop();
    let total = t_run.elapsed();
    lives.push(Lifetime {
        scraped_lost: Some(last_lost),
        stored_at_start,
        stored_at_end: stored_lost(&store_dir),
    });

    let store = Store::open(&store_dir).expect("store");
    let gaps = stored_gaps(&store);
    let reported = stored_gap_tuples(&gaps);
    let scraped_sum: u64 = lives.iter().filter_map(|l| l.scraped_lost).sum();
    let persisted_sum: u64 = lives
        .iter()
        .map(|l| l.stored_at_end - l.stored_at_start)
        .sum();
    record(
        "kill9_random_moments",
        1,
        KILLS as u32,
        &expected,
        &reported,
        scraped_sum,
        format!(
            "seed {seed}: {n} records, {KILLS} kill -9 ({startup_kills} aimed at startup; \
             {assigned_at_kill} with the partition assigned), restarted each time; records_lost_total summed over the {} lifetimes (last \
             scrape before each kill) = {scraped_sum}, persisted per lifetime sum = \
             {persisted_sum}, every lifetime exported <= what it persisted; produce {:.1} s, \
             pipeline {:.1} s, kills {:.1} s, settled after {:.1} s",
            lives.len(),
            produced_in.as_secs_f64(),
            pipeline_done.as_secs_f64(),
            kills_done.as_secs_f64(),
            total.as_secs_f64(),
            seed = rng.seed,
        ),
    );

    assert_eq!(reported, expected, "log:\n{}", auditor.log_text());
    let mut ids: Vec<&str> = gaps.iter().map(|g| g.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), expected.len(), "no gap stored twice");
    for (i, l) in lives.iter().enumerate() {
        if let Some(scraped) = l.scraped_lost {
            assert!(
                scraped <= l.stored_at_end - l.stored_at_start,
                "lifetime {i} exported {scraped} lost records but persisted only {}: \
                 a record counted without its verdict stored would be counted again: {lives:?}",
                l.stored_at_end - l.stored_at_start
            );
        }
    }
    assert_eq!(persisted_sum, missing(&expected));
    assert!(scraped_sum <= missing(&expected), "{lives:?}");
    // The last lifetime exported every record it persisted (nothing left uncounted).
    let l = lives.last().expect("last lifetime");
    assert_eq!(l.scraped_lost, Some(l.stored_at_end - l.stored_at_start));
}
