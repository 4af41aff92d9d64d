//! The repository's documented example, `config/gap-auditor.toml`, used as is by the real
//! binary against the seed's table (`dns_logs_from_flink01`, Doris DDL translated for
//! MariaDB, `time` a DATETIME as in Doris), with only the deployment-specific keys
//! overridden through `GAP_AUDITOR__…` environment variables — which also proves the
//! override mechanism end to end.

use crate::support::*;
use mysql_async::prelude::Queryable;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn documented_config_catches_the_seed_incident() {
    let topic = unique("test");
    let pipeline = unique("FlinkSQLFromKafka2Doris");
    let dbname = unique("gap_auditor_test_seed");
    let state = tempfile::tempdir().expect("tempdir");
    create_topic(&topic, 1).await;

    // The seed's table, in its own database so the documented table name is used as is.
    let root = Db::new();
    let mut c = root.pool.get_conn().await.expect("conn");
    c.query_drop(format!("CREATE DATABASE `{dbname}`"))
        .await
        .expect("create db");
    c.query_drop(format!(
        "CREATE TABLE `{dbname}`.dns_logs_from_flink01 (
            client_ip VARCHAR(64) COLLATE utf8mb4_bin, domain VARCHAR(512) COLLATE utf8mb4_bin,
            time DATETIME, target_ip VARCHAR(64), rcode VARCHAR(16), query_type VARCHAR(16),
            authority_record VARCHAR(512), add_msg VARCHAR(512), dns_ip VARCHAR(64)
        ) DEFAULT CHARSET = utf8mb4"
    ))
    .await
    .expect("create seed table");
    drop(c);
    let base = mysql_url();
    let url = format!("{}/{dbname}", base.rsplit_once('/').expect("db in url").0);
    let db = Db {
        pool: mysql_async::Pool::new(url.as_str()),
    };

    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/gap-auditor.toml");
    let log = state.path().join("auditor.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_gap-auditor"))
        .args(["run", "-c", config])
        .env("GAP_AUDITOR__KAFKA__BROKERS", kafka())
        .env("GAP_AUDITOR__KAFKA__GROUP_ID", unique("auditor"))
        .env("GAP_AUDITOR__KAFKA__START", "earliest")
        .env("GAP_AUDITOR__KAFKA__SESSION_TIMEOUT", "6s")
        .env("GAP_AUDITOR__KAFKA__HEARTBEAT_INTERVAL", "500ms")
        .env("GAP_AUDITOR__SERVER__LISTEN", format!("127.0.0.1:{port}"))
        .env("GAP_AUDITOR__STATE__PATH", state.path().join("store"))
        .env("GAP_AUDITOR__AUDITS__0__TOPICS", &topic)
        .env("GAP_AUDITOR__AUDITS__0__PIPELINE_GROUP", &pipeline)
        .env("GAP_AUDITOR__AUDITS__0__GRACE", "2s")
        .env("GAP_AUDITOR__AUDITS__0__VERIFY_INTERVAL", "500ms")
        .env("GAP_AUDITOR__AUDITS__0__SINK__URL", &url)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("spawn");

    // The incident: seed-shaped lines; the pipeline's rows go into the seed table.
    let p = TestProducer::new(&topic);
    let lines: Vec<String> = (0..6).map(dns_line).collect();
    p.send_all(0, &lines[0..2]).await;
    seed_pipeline(&pipeline, &topic, 0, 2, &db).await;
    p.send_all(0, &lines[2..4]).await;
    let restarted = {
        let (pipeline, topic, url) = (pipeline.clone(), topic.clone(), url.clone());
        tokio::spawn(async move {
            let db = Db {
                pool: mysql_async::Pool::new(url.as_str()),
            };
            seed_pipeline(&pipeline, &topic, 4, 2, &db).await;
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    p.send_all(0, &lines[4..6]).await;
    restarted.await.expect("pipeline");

    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    let deadline = Instant::now() + Duration::from_secs(60);
    let gaps = loop {
        let body =
            match tokio::time::timeout(Duration::from_secs(2), http_get(addr, "/api/gaps")).await {
                Ok((200, body)) => body,
                _ => String::new(),
            };
        let gaps: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap_or_default();
        if !gaps.is_empty() {
            break gaps;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "no gap reported; log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, metrics) = http_get(addr, "/metrics").await;
    let (_, body) = http_get(addr, "/api/gaps").await;
    let gaps_now: Vec<serde_json::Value> = serde_json::from_str(&body).expect("json");
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let code = child.wait().expect("wait");
    assert!(code.success(), "clean exit on SIGTERM: {code:?}");
    assert_eq!(gap_tuples(&gaps), vec![(0, 2, 3, 2)]);
    assert_eq!(gap_tuples(&gaps_now), vec![(0, 2, 3, 2)]);
    let confirmed = metrics
        .lines()
        .find(|l| l.starts_with("gap_auditor_records_confirmed_total{") && l.contains(&topic))
        .unwrap_or_default()
        .to_string();
    assert!(confirmed.ends_with(" 4"), "{confirmed}");
    let log_text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        log_text.contains("offsets 2–3, 2 records"),
        "the gap is logged:\n{log_text}"
    );
}

/// The seed pipeline stand-in: writes only the 9 seed columns (no Kafka coordinates).
async fn seed_pipeline(group: &str, topic: &str, start: i64, count: usize, db: &Db) {
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
    tpl.add_partition_offset(topic, 0, Offset::Offset(start))
        .expect("tpl");
    consumer.assign(&tpl).expect("assign");
    let mut done = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while done < count {
        assert!(Instant::now() < deadline, "seed pipeline stuck");
        let Some(m) = consumer.poll(Duration::from_millis(50)) else {
            continue;
        };
        let m = m.expect("poll");
        let line = String::from_utf8_lossy(m.payload().unwrap_or_default()).to_string();
        let f: Vec<&str> = line.split('|').collect();
        let mut c = db.pool.get_conn().await.expect("conn");
        c.exec_drop(
            "INSERT INTO dns_logs_from_flink01 VALUES (?,?,?,?,?,?,?,?,?)",
            (f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8]),
        )
        .await
        .expect("insert");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, Offset::Offset(m.offset() + 1))
            .expect("tpl");
        consumer.commit(&tpl, CommitMode::Sync).expect("commit");
        done += 1;
    }
}
