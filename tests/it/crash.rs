//! Crash safety (SPEC guarantee 3): `kill -9` of the real binary at several moments while it
//! decides a stream with known losses, restart each time, and the final gap set must be
//! exactly the one the stream implies — no gap missing, none recorded twice, none invented.

use crate::support::*;
use gap_auditor::store::{GapFilter, StateFilter, Store};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn spawn_auditor(config: &std::path::Path, log: &std::path::Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("log file");
    Command::new(env!("CARGO_BIN_EXE_gap-auditor"))
        .args(["run", "-c"])
        .arg(config)
        .env("GAP_AUDITOR_LOG", "info,gap_auditor=debug")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn gap-auditor")
}

fn kill9(child: &mut Child) {
    // SIGKILL: no drain, no final commit, no store close.
    child.kill().expect("kill -9");
    let _ = child.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_and_restart_yields_the_same_gaps_once() {
    let topic = unique("crash");
    let table = unique("crash_t");
    let pipeline = unique("pipeline");
    let state = tempfile::tempdir().expect("tempdir");
    create_topic(&topic, 1).await;
    let db = Db::new();
    db.create_dns_table(&table).await;
    let p = TestProducer::new(&topic);
    const N: usize = 240;
    let lines: Vec<String> = (0..N).map(dns_line).collect();
    assert_eq!(
        p.send_all(0, &lines).await.last().copied(),
        Some(N as i64 - 1)
    );
    // Lost ranges the pipeline "drops": three gaps.
    let lost = |o: usize| (40..50).contains(&o) || o == 120 || (200..205).contains(&o);
    let expected = vec![(0, 40, 49, 10), (0, 120, 120, 1), (0, 200, 204, 5)];

    let group = unique("auditor");
    let cfg_path = state.path().join("gap-auditor.toml");
    std::fs::write(
        &cfg_path,
        config_toml(&AuditSpec {
            topic: &topic,
            table: &table,
            pipeline_group: Some(&pipeline),
            strategy: "key_columns",
            grace: "1s",
            verify_interval: "200ms",
            state_dir: &state.path().join("store"),
            group: &group,
            listen: "127.0.0.1:0",
        }),
    )
    .expect("write config");
    let log = state.path().join("auditor.log");
    let mut child = spawn_auditor(&cfg_path, &log);

    // The pipeline advances in steps so that the auditor decides across many rounds while
    // it is being killed.
    let pipe = {
        let (pipeline, topic, table) = (pipeline.clone(), topic.clone(), table.clone());
        tokio::spawn(async move {
            let db = Db::new();
            stepwise_pipeline(&pipeline, &topic, &table, &db, N, lost).await;
        })
    };
    for pause_ms in [2500u64, 1800, 3100] {
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        kill9(&mut child);
        child = spawn_auditor(&cfg_path, &log);
    }
    pipe.await.expect("pipeline");

    // Wait until the last incarnation has settled everything.
    let store_dir = state.path().join("store");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let settled = Store::open(&store_dir)
            .ok()
            .and_then(|s| s.load_progress("dns_logs").ok())
            .and_then(|p| p.first().map(|p| p.settled))
            .unwrap_or(0);
        if settled >= N as i64 {
            break;
        }
        if Instant::now() > deadline {
            kill9(&mut child);
            panic!(
                "settled only {settled}/{N}; log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Graceful stop of the last one (SIGTERM path: exit 0).
    let pid = child.id().to_string();
    let st = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill -TERM");
    assert!(st.success());
    let code = child.wait().expect("wait");
    assert!(code.success(), "SIGTERM must exit 0, got {code:?}");

    let store = Store::open(&store_dir).expect("store");
    let gaps = store
        .list_gaps(&GapFilter {
            state: StateFilter::All,
            audit: None,
        })
        .expect("gaps");
    let mut got: Vec<(i64, i64, i64, i64)> = gaps
        .iter()
        .map(|g| {
            (
                g.partition as i64,
                g.first_offset,
                g.last_offset,
                g.missing_records as i64,
            )
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        expected,
        "log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let mut ids: Vec<&str> = gaps.iter().map(|g| g.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 3, "no gap stored twice");
}

/// Writes every record except the `lost` ones, committing 20 records at a time with a
/// pause between steps.
async fn stepwise_pipeline(
    group: &str,
    topic: &str,
    table: &str,
    db: &Db,
    n: usize,
    lost: impl Fn(usize) -> bool,
) {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::message::Message;
    use rdkafka::{ClientConfig, Offset, TopicPartitionList};
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(0))
        .expect("tpl");
    consumer.assign(&tpl).expect("assign");
    let mut done = 0usize;
    let deadline = Instant::now() + Duration::from_secs(60);
    while done < n {
        assert!(
            Instant::now() < deadline,
            "stepwise pipeline stuck at {done}"
        );
        let Some(m) = consumer.poll(Duration::from_millis(50)) else {
            continue;
        };
        let m = m.expect("poll");
        let offset = m.offset();
        if !lost(offset as usize)
            && let Some(p) = m.payload()
        {
            db.insert_line(table, p, 0, offset).await;
        }
        done += 1;
        if done.is_multiple_of(20) || done == n {
            let mut c = TopicPartitionList::new();
            c.add_partition_offset(topic, 0, Offset::Offset(offset + 1))
                .expect("tpl");
            consumer.commit(&c, CommitMode::Sync).expect("commit");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
}
