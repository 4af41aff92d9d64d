//! Crash safety (SPEC guarantee 3): `kill -9` of the real binary at several moments while it
//! decides a stream with known losses, restart each time, and the final gap set must be
//! exactly the one the stream implies — no gap missing, none recorded twice, none invented.

use crate::support::*;
use gap_auditor::store::Store;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_and_restart_yields_the_same_gaps_once() {
    let s = Scenario::with_seed_ddl("crash", 1).await;
    const N: usize = 240;
    assert_eq!(
        s.send(&dns_lines(0..N)).await.last().copied(),
        Some(N as i64 - 1)
    );
    // Lost ranges the pipeline "drops": three gaps.
    let lost = |o: i64| (40..50).contains(&o) || o == 120 || (200..205).contains(&o);
    let expected = vec![(0, 40, 49, 10), (0, 120, 120, 1), (0, 200, 204, 5)];

    let store_dir = s.state.path().join("store");
    let cfg_path = s.state.path().join("gap-auditor.toml");
    let spec = AuditSpec {
        state_dir: &store_dir,
        ..s.spec("key_columns", "1s", "200ms")
    };
    std::fs::write(&cfg_path, config_toml(&spec)).expect("write config");
    let mut auditor = Daemon::spawn(
        &cfg_path,
        vec![("GAP_AUDITOR_LOG", "info,gap_auditor=debug".into())],
        s.state.path().join("auditor.log"),
    );

    // The pipeline advances in steps (20 records per commit, 300 ms apart) so that the
    // auditor decides across many rounds while it is being killed.
    let pipe = tokio::spawn(
        s.pipeline()
            .records(N)
            .copies(move |o| if lost(o) { 0 } else { 1 })
            .commit_every(20, Duration::from_millis(300))
            .run(),
    );
    for pause_ms in [2500u64, 1800, 3100] {
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        auditor.kill9_and_restart();
    }
    pipe.await.expect("pipeline");

    // Wait until the last incarnation has settled everything.
    let dir = &store_dir;
    auditor
        .wait_until(90, || async move {
            let settled = Store::open(dir)
                .ok()
                .and_then(|s| s.load_progress("dns_logs").ok())
                .and_then(|p| p.first().map(|p| p.settled))
                .unwrap_or(0);
            if settled >= N as i64 {
                Ok(())
            } else {
                Err(format!("settled only {settled}/{N}"))
            }
        })
        .await;
    // Graceful stop of the last one (SIGTERM path: exit 0).
    auditor.stop();

    let gaps = stored_gaps(&Store::open(&store_dir).expect("store"));
    assert_eq!(
        stored_gap_tuples(&gaps),
        expected,
        "log:\n{}",
        auditor.log_text()
    );
    let mut ids: Vec<&str> = gaps.iter().map(|g| g.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "no gap stored twice");
}
