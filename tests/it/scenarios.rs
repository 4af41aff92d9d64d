//! The seed incident and its variations, end to end.

use crate::support::*;
use std::time::Duration;

/// The seed ([`Scenario::play_seed_incident`]): the pipeline writes 0–1 and commits 2; it
/// stops; 2–3 are produced; it restarts "from latest" (at 4) and writes 4–5. Exactly one gap
/// {partition 0, 2..=3, 2 records}, caused by the pipeline's 2 → 4 commit jump; 0,1,4,5
/// confirmed. key_columns runs on the README's seed DDL (`time DATETIME`, VARCHAR keys).
async fn seed_scenario(strategy: &str) {
    let s = match strategy {
        "key_columns" => Scenario::with_seed_ddl("seed", 1).await,
        _ => Scenario::new("seed").await,
    };
    let auditor = s.start_auditor(strategy, "2s", "500ms").await;
    let a = &auditor;
    s.play_seed_incident(|o| async move { pipeline_committed(a) == Some(o) })
        .await;
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
    // Root cause: the pipeline's commit jumped 2 → 4 over records it never wrote.
    assert_eq!(gaps[0]["cause"], "skipped_by_restart", "{gaps:?}");
    assert_eq!(gaps[0]["pipeline_commit_from"], 2);
    assert_eq!(gaps[0]["pipeline_commit_to"], 4);
    assert!(gaps[0]["pipeline_commit_at"].is_string(), "{gaps:?}");
    assert_eq!(
        auditor
            .metrics
            .gaps_detected
            .with_label_values(&["dns_logs", "skipped_by_restart"])
            .get(),
        1
    );
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

/// A pipeline that commits normally — one checkpoint over records 0–9 — but silently drops
/// record 5: the gap is `dropped_in_flight`, attributed to the 0 → 10 commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cause_dropped_in_flight() {
    let s = Scenario::new("inflight").await;
    let auditor = s.start_auditor("offset_columns", "2s", "500ms").await;
    // The job starts at 0 and checkpoints its start position first.
    s.play_drop_in_flight(&auditor, || ()).await;
    let gaps = api_gaps(&auditor).await;
    assert_eq!(gap_tuples(&gaps), vec![(0, 5, 5, 1)]);
    assert_eq!(gaps[0]["cause"], "dropped_in_flight", "{gaps:?}");
    assert_eq!(gaps[0]["pipeline_commit_from"], 0);
    assert_eq!(gaps[0]["pipeline_commit_to"], 10);
    auditor.stop().await;
}

/// A rewind: the pipeline re-reads from an older offset and writes those records again.
/// That is a rewind event and duplicates, never loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rewind_is_duplicates_not_loss() {
    let s = Scenario::new("rewind").await;
    let auditor = s.start_auditor("offset_columns", "4s", "500ms").await;
    s.send(&dns_lines(0..10)).await;
    s.pipeline().commit_start().records(0).run().await;
    until_seen(&auditor, 0).await;
    s.pipeline()
        .records(10)
        .commit_every(10, Duration::ZERO)
        .run()
        .await;
    until_seen(&auditor, 10).await;
    // Restored from an older checkpoint: back to 5, then 5–9 written again.
    s.pipeline()
        .start_at(5)
        .commit_start()
        .records(0)
        .run()
        .await;
    until_seen(&auditor, 5).await;
    s.pipeline()
        .start_at(5)
        .records(5)
        .commit_every(5, Duration::ZERO)
        .run()
        .await;
    let topic = &s.topic;
    auditor
        .wait_for(30, "10 confirmed", |a| a.confirmed(topic, 0) == 10)
        .await;
    assert_eq!(auditor.lost(topic, 0), 0, "a rewind is not loss");
    assert_eq!(
        auditor.duplicated(topic, 0),
        5,
        "the re-written rows are duplicates"
    );
    let rewinds = auditor
        .metrics
        .pipeline_rewinds
        .with_label_values(&["dns_logs", topic, "0"])
        .get();
    assert_eq!(rewinds, 1);
    assert!(api_gaps(&auditor).await.is_empty());
    auditor.stop().await;
}

/// A stall: the pipeline stops committing while records keep arriving. It is reported
/// (event + `gap_auditor_pipeline_stalls_total`) and is never loss; it clears when the
/// pipeline moves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stall_is_reported_and_is_not_loss() {
    let s = Scenario::new("stall").await;
    let toml = config_toml(&s.spec("offset_columns", "1s", "300ms"))
        .replace("grace = \"1s\"", "grace = \"1s\"\nstall_after = \"2s\"");
    let auditor = Auditor::start(&toml).await;
    s.send(&dns_lines(0..5)).await;
    s.pipeline().commit_start().records(0).run().await;
    until_seen(&auditor, 0).await;
    s.pipeline().records(5).run().await;
    until_seen(&auditor, 5).await;
    // The pipeline stops; the topic keeps growing.
    s.send(&dns_lines(5..10)).await;
    let topic = s.topic.clone();
    let stalls = |a: &Auditor| {
        a.metrics
            .pipeline_stalls
            .with_label_values(&["dns_logs", &topic, "0"])
            .get()
    };
    auditor
        .wait_for(30, "the stall is reported", |a| {
            assert_eq!(a.lost(&topic, 0), 0, "a stall is not loss");
            stalls(a) == 1
        })
        .await;
    keep_checking(Duration::from_secs(1), Duration::from_millis(100), || {
        assert_eq!(stalls(&auditor), 1, "reported once per stall");
        assert_eq!(auditor.lost(&topic, 0), 0);
    })
    .await;
    // It resumes: everything is confirmed, nothing lost.
    s.pipeline().start_at(5).records(5).run().await;
    auditor
        .wait_for(30, "all 10 confirmed", |a| a.confirmed(&topic, 0) == 10)
        .await;
    assert_eq!(auditor.lost(&topic, 0), 0);
    assert!(api_gaps(&auditor).await.is_empty());
    auditor.stop().await;
}
