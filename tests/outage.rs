//! Sink outage: MariaDB really stopped (its own test binary, because it stops the MariaDB
//! that every other test shares; cargo runs test binaries one after another).
//!
//! Proves SPEC guarantee 2 for a sink that is down: records that become due while the sink
//! cannot answer are unknown, never missing; `gap_auditor_sink_up` is 0 meanwhile; after
//! the restart every record is confirmed and no gap was ever recorded.

#[path = "it/support.rs"]
mod support;

use std::process::Command;
use std::time::Duration;
use support::*;

fn mysql_ctl(action: &str) {
    let ctl = std::env::var("GAP_AUDITOR_TEST_MYSQL_CTL")
        .expect("GAP_AUDITOR_TEST_MYSQL_CTL is not set: run scripts/test.sh");
    let st = Command::new("bash")
        .arg(&ctl)
        .arg(action)
        .status()
        .expect("run mysql-ctl");
    assert!(st.success(), "mysql-ctl {action} failed");
}

/// Restarts MariaDB even when the test fails half-way, so later test binaries have it.
struct Restart;
impl Drop for Restart {
    fn drop(&mut self) {
        mysql_ctl("start");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sink_down_is_unknown_not_missing() {
    let s = Scenario::new("outage").await;
    let topic = &s.topic;
    let lines = dns_lines(0..10);
    let auditor = s.start_auditor("offset_columns", "1s", "500ms").await;
    s.send(&lines[0..5]).await;
    s.pipeline().records(5).run().await;
    auditor
        .wait_for(30, "first 5 confirmed, sink up", |a| {
            a.confirmed(topic, 0) == 5 && a.sink_up() == 1
        })
        .await;

    // The pipeline writes the next 5 rows, then the sink goes down before they are due.
    s.send(&lines[5..10]).await;
    s.pipeline().start_at(5).records(5).run().await;
    let guard = Restart;
    mysql_ctl("stop");
    auditor
        .wait_for(30, "sink_up 0", |a| a.sink_up() == 0)
        .await;
    // Several verify rounds (more than 2) with every pending record due and the sink down.
    keep_checking(Duration::from_secs(3), Duration::from_millis(100), || {
        assert_eq!(
            auditor.lost(topic, 0),
            0,
            "a down sink produced missing records"
        );
        assert_eq!(auditor.sink_up(), 0);
    })
    .await;
    assert_eq!(auditor.confirmed(topic, 0), 5);
    let (code, body) = auditor.get("/readyz").await;
    assert_eq!(code, 503, "not ready while the sink is down: {body}");
    drop(guard); // restarts MariaDB

    auditor
        .wait_for(60, "recovery: all 10 confirmed, sink up", |a| {
            assert_eq!(a.lost(topic, 0), 0);
            a.confirmed(topic, 0) == 10 && a.sink_up() == 1
        })
        .await;
    assert!(api_gaps(&auditor).await.is_empty());
    let status = auditor.status.snapshot();
    assert_eq!(status[0].partitions[0].settled, 10);
    auditor.stop().await;
}
