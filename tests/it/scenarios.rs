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

/// Lag is not loss: the pipeline stops committing for 3× grace while records keep coming,
/// then catches up. Records it has not passed are never due, so no loss may be reported at
/// any moment (checked continuously, not only at the end). Its sink is also slow: each row
/// is written 1 s AFTER the commit that passes it (less than grace), like a sink whose
/// writes become visible after a delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lag_and_a_slow_sink_are_not_loss() {
    let topic = unique("lag");
    let table = unique("lag_t");
    let pipeline = unique("pipeline");
    let state = tempfile::tempdir().expect("tempdir");
    create_topic(&topic, 1).await;
    let db = Db::new();
    db.create_dns_table(&table).await;
    let p = TestProducer::new(&topic);
    let lines: Vec<String> = (0..12).map(dns_line).collect();
    let group = unique("auditor");
    let auditor = Auditor::start(&config_toml(&AuditSpec {
        topic: &topic,
        table: &table,
        pipeline_group: Some(&pipeline),
        strategy: "offset_columns",
        grace: "2s",
        verify_interval: "500ms",
        state_dir: state.path(),
        group: &group,
        listen: "127.0.0.1:0",
    }))
    .await;
    p.send_all(0, &lines[0..4]).await;
    run_pipeline(&pipeline, &topic, 0, 0, 4, &db, &table).await;
    auditor
        .wait_for(30, "first 4 confirmed", |a| a.confirmed(&topic, 0) == 4)
        .await;
    // The pipeline stalls for 3x grace while 8 more records arrive.
    p.send_all(0, &lines[4..12]).await;
    let stall_until = std::time::Instant::now() + Duration::from_secs(6);
    while std::time::Instant::now() < stall_until {
        assert_eq!(auditor.lost(&topic, 0), 0, "lag reported as loss");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Catching up, with a sink that shows each row 1 s after the commit.
    run_slow_pipeline(
        &pipeline,
        &topic,
        4,
        8,
        &table,
        Duration::from_secs(1),
        &auditor,
    )
    .await;
    auditor
        .wait_for(30, "all 12 confirmed", |a| {
            assert_eq!(a.lost(&topic, 0), 0, "lag reported as loss");
            a.confirmed(&topic, 0) == 12
        })
        .await;
    assert!(api_gaps(&auditor).await.is_empty());
    auditor.stop().await;
}

/// Commits each record first, writes its row `delay` later (checking for false loss while
/// it waits).
async fn run_slow_pipeline(
    group: &str,
    topic: &str,
    start: i64,
    count: usize,
    table: &str,
    delay: Duration,
    a: &Auditor,
) {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::message::Message;
    use rdkafka::{ClientConfig, Offset, TopicPartitionList};
    let db = Db::new();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(start))
        .expect("tpl");
    consumer.assign(&tpl).expect("assign");
    let mut done = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while done < count {
        assert!(std::time::Instant::now() < deadline, "slow pipeline stuck");
        let Some(m) = consumer.poll(Duration::from_millis(50)) else {
            continue;
        };
        let m = m.expect("poll");
        let (payload, offset) = (m.payload().map(<[u8]>::to_vec), m.offset());
        let mut c = TopicPartitionList::new();
        c.add_partition_offset(topic, 0, Offset::Offset(offset + 1))
            .expect("tpl");
        consumer.commit(&c, CommitMode::Sync).expect("commit");
        let until = std::time::Instant::now() + delay;
        while std::time::Instant::now() < until {
            assert_eq!(a.lost(topic, 0), 0, "slow sink reported as loss");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if let Some(p) = payload {
            db.insert_line(table, &p, 0, offset).await;
        }
        done += 1;
    }
}
