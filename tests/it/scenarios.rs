//! The seed incident and its variations, end to end.

use crate::support::*;
use std::time::Duration;

/// The seed ([`Scenario::play_seed_incident`]): the pipeline writes 0–1 and commits 2; it
/// stops; 2–3 are produced; it restarts "from latest" (at 4) and writes 4–5. Exactly one gap
/// {partition 0, 2..=3, 2 records}; 0,1,4,5 confirmed.
async fn seed_scenario(strategy: &str) {
    let s = Scenario::new("seed").await;
    let auditor = s.start_auditor(strategy, "2s", "500ms").await;
    s.play_seed_incident().await;
    assert_eq!(s.rows().await, 4);

    let topic = &s.topic;
    auditor
        .wait_for(60, "2 lost and 4 confirmed", |a| {
            a.lost(topic, 0) == 2 && a.confirmed(topic, 0) == 4
        })
        .await;
    // A few more rounds: nothing else may appear.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let gaps = api_gaps(&auditor).await;
    assert_eq!(gap_tuples(&gaps), vec![(0, 2, 3, 2)], "{gaps:?}");
    assert_eq!(gaps[0]["state"], "open");
    assert_eq!(gaps[0]["id"], format!("dns_logs:{topic}:0:2"));
    assert_eq!(auditor.lost(topic, 0), 2);
    assert_eq!(auditor.confirmed(topic, 0), 4);
    let (_, metrics) = auditor.get("/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("gap_auditor_records_lost_total")
                && l.contains(&format!("topic=\"{topic}\""))
                && l.ends_with(" 2")),
        "lost_total 2 in /metrics"
    );
    auditor.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_incident_offset_columns() {
    seed_scenario("offset_columns").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_incident_key_columns() {
    seed_scenario("key_columns").await;
}

/// Lag is not loss: the pipeline stops committing for 3× grace while records keep coming,
/// then catches up. Records it has not passed are never due, so no loss may be reported at
/// any moment (checked continuously, not only at the end). Its sink is also slow: each row
/// is written 1 s AFTER the commit that passes it (less than grace), like a sink whose
/// writes become visible after a delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lag_and_a_slow_sink_are_not_loss() {
    let s = Scenario::new("lag").await;
    let topic = &s.topic;
    let lines = dns_lines(0..12);
    let auditor = s.start_auditor("offset_columns", "2s", "500ms").await;
    s.send(&lines[0..4]).await;
    s.pipeline().records(4).run().await;
    auditor
        .wait_for(30, "first 4 confirmed", |a| a.confirmed(topic, 0) == 4)
        .await;
    // The pipeline stalls for 3x grace while 8 more records arrive.
    s.send(&lines[4..12]).await;
    keep_checking(Duration::from_secs(6), Duration::from_millis(100), || {
        assert_eq!(auditor.lost(topic, 0), 0, "lag reported as loss");
    })
    .await;
    // Catching up, with a sink that shows each row 1 s after the commit.
    s.pipeline()
        .start_at(4)
        .records(8)
        .write_after_commit(Duration::from_secs(1), || {
            assert_eq!(auditor.lost(topic, 0), 0, "slow sink reported as loss");
        })
        .run()
        .await;
    auditor
        .wait_for(30, "all 12 confirmed", |a| {
            assert_eq!(a.lost(topic, 0), 0, "lag reported as loss");
            a.confirmed(topic, 0) == 12
        })
        .await;
    assert!(api_gaps(&auditor).await.is_empty());
    auditor.stop().await;
}
