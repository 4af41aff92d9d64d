//! The seed incident and its variations, end to end.

use crate::support::*;
use std::time::Duration;

/// The seed: the pipeline writes 0–1 and commits 2; it stops; 2–3 are produced; it restarts
/// "from latest" (at 4, the end the test knows from the producer's acks) and writes 4–5.
/// Exactly one gap {partition 0, 2..=3, 2 records}; 0,1,4,5 confirmed.
async fn seed_scenario(strategy: &str) {
    let topic = unique("seed");
    let table = unique("seed_t");
    let pipeline = unique("FlinkSQLFromKafka2Doris");
    let state = tempfile::tempdir().expect("tempdir");
    create_topic(&topic, 1).await;
    let db = Db::new();
    db.create_dns_table(&table).await;
    let p = TestProducer::new(&topic);
    let lines: Vec<String> = (0..6).map(dns_line).collect();

    let group = unique("auditor");
    let auditor = Auditor::start(&config_toml(&AuditSpec {
        topic: &topic,
        table: &table,
        pipeline_group: Some(&pipeline),
        strategy,
        grace: "2s",
        verify_interval: "500ms",
        state_dir: state.path(),
        group: &group,
        listen: "127.0.0.1:0",
    }))
    .await;

    assert_eq!(p.send_all(0, &lines[0..2]).await, vec![0, 1]);
    run_pipeline(&pipeline, &topic, 0, 0, 2, &db, &table).await;
    // The job is killed; records arrive meanwhile.
    assert_eq!(p.send_all(0, &lines[2..4]).await, vec![2, 3]);
    // Restart from latest-offset: the end is 4.
    let restarted = {
        let (pipeline, topic, table) = (pipeline.clone(), topic.clone(), table.clone());
        tokio::spawn(async move {
            let db = Db::new();
            run_pipeline(&pipeline, &topic, 0, 4, 2, &db, &table).await;
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(p.send_all(0, &lines[4..6]).await, vec![4, 5]);
    restarted.await.expect("pipeline restarted");
    assert_eq!(db.count(&table).await, 4);

    auditor
        .wait_for(60, "2 lost and 4 confirmed", |a| {
            a.lost(&topic, 0) == 2 && a.confirmed(&topic, 0) == 4
        })
        .await;
    // A few more rounds: nothing else may appear.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let gaps = api_gaps(&auditor).await;
    assert_eq!(gap_tuples(&gaps), vec![(0, 2, 3, 2)], "{gaps:?}");
    assert_eq!(gaps[0]["state"], "open");
    assert_eq!(gaps[0]["id"], format!("dns_logs:{topic}:0:2"));
    assert_eq!(auditor.lost(&topic, 0), 2);
    assert_eq!(auditor.confirmed(&topic, 0), 4);
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
