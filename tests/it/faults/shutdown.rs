//! Graceful shutdown: SIGTERM at a random moment (seeded) while rounds are in flight — the
//! sink answers 700 ms late, longer than the 500 ms verify interval, so a round is almost
//! always waiting on it. The binary must finish the round, persist, commit the settled
//! watermark to its group (read back with the group's committed offsets: equal to the
//! store's settled offset) and exit 0 within a bound: 15 s, a functional bound (a hung
//! drain), not a performance figure; the measured times are recorded. Restarted after
//! each stop, the last lifetime settles the run: known losses found, nothing else.

use super::proxy::{Mode, Proxy};
use super::*;
use crate::support::*;
use gap_auditor::store::Store;
use std::time::{Duration, Instant};

const STOPS: usize = 4;
const BOUND: Duration = Duration::from_secs(15);

fn settled(dir: &std::path::Path) -> Option<i64> {
    Store::open(dir)
        .ok()?
        .load_progress("dns_logs")
        .ok()?
        .first()
        .map(|p| p.settled)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_mid_round_commits_the_settled_watermark_and_exits_0() {
    const N: usize = 3000;
    let lost = |o: i64| (700..705).contains(&o) || o == 2222;
    let expected = expected_gaps(N as i64, lost);
    let mut rng = Rng::from_env("sigterm_mid_round_commits_the_settled_watermark_and_exits_0");
    let s = Scenario::new("sigterm").await;
    let topic = s.topic.clone();
    produce_bulk(&topic, N).await;
    let proxy = Proxy::start(mysql_addr()).await;
    proxy.set(Mode::Delay(Duration::from_millis(700)));
    let listen = format!("127.0.0.1:{}", free_port());
    let addr: std::net::SocketAddr = listen.parse().expect("addr");
    let store_dir = s.state.path().join("store");
    let spec = AuditSpec {
        listen: &listen,
        state_dir: &store_dir,
        ..s.spec("offset_columns", "1s", "500ms")
    };
    // A round queries the sink once per batch_size due records: with 1000, a round of
    // this run's backlog is a few 700 ms queries, and that is what SIGTERM waits for.
    let toml = via_proxy(&config_toml(&spec), proxy.addr)
        .replace("query_timeout = \"3s\"", "query_timeout = \"20s\"")
        .replace("batch_size = 100", "batch_size = 1000");
    let cfg = s.state.path().join("gap-auditor.toml");
    std::fs::write(&cfg, toml).expect("config");
    let mut daemon = Daemon::spawn(
        &cfg,
        vec![("GAP_AUDITOR_LOG", "info".into())],
        s.state.path().join("auditor.log"),
    );
    // The pipeline checkpoints 50 records every 800 ms meanwhile: about as long as the
    // stops take, so each lands while records are still being decided.
    let pipe = {
        let bulk = BulkPipeline::new(&s);
        tokio::spawn(async move {
            for c in 0..(N as i64 / 50) {
                bulk.chunk(c * 50..(c + 1) * 50, |o| usize::from(!lost(o)))
                    .await;
                tokio::time::sleep(Duration::from_millis(800)).await;
            }
        })
    };

    let mut exits = Vec::new();
    let mut commits = Vec::new();
    for i in 0..STOPS {
        // Wait until this lifetime audits (it has its partition), then a random moment.
        daemon
            .wait_until(60, || async {
                let t = scrape(addr).await.ok_or("no /metrics")?;
                sample(&t, "gap_auditor_settled_offset", &[("topic", &topic)])
                    .map(|_| ())
                    .ok_or_else(|| "not assigned yet".to_string())
            })
            .await;
        tokio::time::sleep(Duration::from_millis(rng.range(500, 4000))).await;
        let t = Instant::now();
        daemon.stop(); // SIGTERM; asserts exit status 0
        let took = t.elapsed();
        exits.push(took);
        let stored = settled(&store_dir).expect("settled offset stored");
        let committed = group_committed(&s.auditor_group, &topic);
        commits.push((stored, committed));
        assert_eq!(
            committed,
            Some(stored),
            "stop {i}: the group's committed offset is the stored settled watermark"
        );
        assert!(took < BOUND, "stop {i} took {took:?}");
        daemon.restart();
    }
    pipe.await.expect("pipeline");
    // The last lifetime (restarted above) answers and has everything settled.
    daemon
        .wait_until(120, || async {
            let t = scrape(addr).await.ok_or("no /metrics")?;
            match sample(&t, "gap_auditor_settled_offset", &[("topic", &topic)]) {
                Some(s) if s >= N as f64 => Ok(()),
                s => Err(format!("settled {s:?}/{N}")),
            }
        })
        .await;
    let (_, body) = http_get(addr, "/api/gaps?state=all").await;
    let reported =
        gap_tuples(&serde_json::from_str::<Vec<serde_json::Value>>(&body).expect("json"));
    let t = Instant::now();
    daemon.stop();
    exits.push(t.elapsed());
    let reported_lost = missing(&reported);
    let mid_run = commits.iter().filter(|(s, _)| *s < N as i64).count();
    let secs: Vec<String> = exits
        .iter()
        .map(|d| format!("{:.2}", d.as_secs_f64()))
        .collect();
    record(
        "graceful_shutdown_sigterm",
        1,
        STOPS as u32 + 1,
        &expected,
        &reported,
        reported_lost,
        format!(
            "seed {}: {} SIGTERMs with sink replies delayed 700 ms > verify_interval 500 ms \
             ({mid_run} while records were still undecided, 1 after settling): all exit 0; \
             time to exit {} s (bound {} s); (stored settled, group committed) at each stop: \
             {commits:?}",
            rng.seed,
            exits.len(),
            secs.join(", "),
            BOUND.as_secs()
        ),
    );
    assert_eq!(reported, expected);
    assert!(
        mid_run >= 1,
        "no SIGTERM landed while records were undecided: {commits:?}"
    );
    assert!(daemon.log_text().contains("shutting down"));
}

/// Issue 13 item 17: SIGTERM during a key_columns backlog round. 20,000 records are due at
/// once and the sink answers every query 700 ms late: a round is ~200 such queries (two
/// minutes), and the daemon used to finish it before exiting. The round in flight is cut
/// short (its open questions stay unknown; nothing is decided on them), what was decided is
/// persisted, and the process exits 0 within 5 s — a functional bound, not a benchmark.
/// Restarted, it settles the run exactly: the one known loss, nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_cuts_a_long_key_columns_round_short() {
    const N: usize = 20_000;
    const QUICK: Duration = Duration::from_secs(5);
    let lost = |o: i64| o == 12_345;
    let s = Scenario::new("sigterm_keys").await;
    let topic = s.topic.clone();
    produce_bulk(&topic, N).await;
    BulkPipeline::new(&s)
        .chunk(0..N as i64, |o| usize::from(!lost(o)))
        .await;
    let proxy = Proxy::start(mysql_addr()).await;
    proxy.set(Mode::Delay(Duration::from_millis(700)));
    let listen = format!("127.0.0.1:{}", free_port());
    let addr: std::net::SocketAddr = listen.parse().expect("addr");
    let store_dir = s.state.path().join("store");
    let spec = AuditSpec {
        listen: &listen,
        state_dir: &store_dir,
        ..s.spec("key_columns", "1s", "500ms")
    };
    let toml = via_proxy(&config_toml(&spec), proxy.addr)
        .replace("query_timeout = \"3s\"", "query_timeout = \"20s\"");
    let cfg = s.state.path().join("gap-auditor.toml");
    std::fs::write(&cfg, toml).expect("config");
    let mut daemon = Daemon::spawn(
        &cfg,
        vec![("GAP_AUDITOR_LOG", "info".into())],
        s.state.path().join("auditor.log"),
    );
    // Wait until the backlog round is asking the sink (queries counted), then stop.
    daemon
        .wait_until(60, || async {
            let t = scrape(addr).await.ok_or("no /metrics")?;
            match sample(&t, "gap_auditor_sink_queries_total", &[("result", "ok")]) {
                Some(q) if q >= 3.0 => Ok(()),
                q => Err(format!("sink queries {q:?}")),
            }
        })
        .await;
    let t = Instant::now();
    daemon.stop(); // SIGTERM; asserts exit status 0
    let took = t.elapsed();
    assert!(
        took < QUICK,
        "SIGTERM took {took:?} with a long round in flight"
    );
    // Restarted with a prompt sink, the run settles exactly.
    proxy.set(Mode::Pass);
    daemon.restart();
    daemon
        .wait_until(180, || async {
            let t = scrape(addr).await.ok_or("no /metrics")?;
            match sample(&t, "gap_auditor_settled_offset", &[("topic", &topic)]) {
                Some(s) if s >= N as f64 => Ok(()),
                s => Err(format!("settled {s:?}/{N}")),
            }
        })
        .await;
    let (_, body) = http_get(addr, "/api/gaps?state=all").await;
    let reported =
        gap_tuples(&serde_json::from_str::<Vec<serde_json::Value>>(&body).expect("json"));
    let expected = vec![(0, 12_345, 12_345, 1)];
    record(
        "sigterm_key_columns_backlog",
        1,
        1,
        &expected,
        &reported,
        missing(&reported),
        format!(
            "SIGTERM while a key_columns round asked about {N} due keys, every sink reply \
             delayed 700 ms: exit 0 after {:.2} s (bound {} s); restarted, settled exactly",
            took.as_secs_f64(),
            QUICK.as_secs()
        ),
    );
    assert_eq!(reported, expected);
    daemon.stop();
}
