//! Sink outage: MariaDB really stopped (its own test binary, because it stops the MariaDB
//! that every other test shares; cargo runs test binaries one after another).
//!
//! Proves SPEC guarantee 2 for a sink that is down: records that become due while the sink
//! cannot answer are unknown, never missing; `gap_auditor_sink_up` is 0 meanwhile; after
//! the restart every record is confirmed and no gap was ever recorded.

#[path = "it/support.rs"]
mod support;

use std::process::Command;
use std::time::{Duration, Instant};
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
    let topic = unique("outage");
    let table = unique("outage_t");
    let pipeline = unique("pipeline");
    let state = tempfile::tempdir().expect("tempdir");
    create_topic(&topic, 1).await;
    let db = Db::new();
    db.create_dns_table(&table).await;
    let p = TestProducer::new(&topic);
    let lines: Vec<String> = (0..10).map(dns_line).collect();
    let group = unique("auditor");
    let auditor = Auditor::start(&config_toml(&AuditSpec {
        topic: &topic,
        table: &table,
        pipeline_group: Some(&pipeline),
        strategy: "offset_columns",
        grace: "1s",
        verify_interval: "500ms",
        state_dir: state.path(),
        group: &group,
        listen: "127.0.0.1:0",
    }))
    .await;
    p.send_all(0, &lines[0..5]).await;
    run_pipeline(&pipeline, &topic, 0, 0, 5, &db, &table).await;
    auditor
        .wait_for(30, "first 5 confirmed, sink up", |a| {
            a.confirmed(&topic, 0) == 5 && a.sink_up() == 1
        })
        .await;

    // The pipeline writes the next 5 rows, then the sink goes down before they are due.
    p.send_all(0, &lines[5..10]).await;
    run_pipeline(&pipeline, &topic, 0, 5, 5, &db, &table).await;
    let guard = Restart;
    mysql_ctl("stop");
    auditor
        .wait_for(30, "sink_up 0", |a| a.sink_up() == 0)
        .await;
    // Several verify rounds (more than 2) with every pending record due and the sink down.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        assert_eq!(
            auditor.lost(&topic, 0),
            0,
            "a down sink produced missing records"
        );
        assert_eq!(auditor.sink_up(), 0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(auditor.confirmed(&topic, 0), 5);
    let (code, body) = auditor.get("/readyz").await;
    assert_eq!(code, 503, "not ready while the sink is down: {body}");
    drop(guard); // restarts MariaDB

    auditor
        .wait_for(60, "recovery: all 10 confirmed, sink up", |a| {
            assert_eq!(a.lost(&topic, 0), 0);
            a.confirmed(&topic, 0) == 10 && a.sink_up() == 1
        })
        .await;
    assert!(api_gaps(&auditor).await.is_empty());
    let status = auditor.status.snapshot();
    assert_eq!(status[0].partitions[0].settled, 10);
    auditor.stop().await;
}
