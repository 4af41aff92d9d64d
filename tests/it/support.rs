//! Shared test support: the real services started by `scripts/test-env.sh` (tansu as the
//! Kafka-protocol broker, MariaDB as the MySQL-protocol stand-in for Doris), a pipeline
//! stand-in, and an in-process auditor.
//!
//! Broker behaviour relied on (see ../shared/TESTING.md): tansu's ListOffsets "latest" is
//! wrong for multi-record batches, so every producer here sends ONE record per batch
//! (flush after each) and the pipeline stand-in "restarts from latest" by seeking to the end
//! offset the test itself knows from the producer's acknowledgements.

#![allow(dead_code)]

use gap_auditor::app::{self, AnySink};
use gap_auditor::config::Config;
use gap_auditor::metrics::Metrics;
use gap_auditor::sink::mysql::{MysqlSink, MysqlTarget};
use gap_auditor::status::StatusBoard;
use gap_auditor::store::Store;
use mysql_async::prelude::Queryable;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{ClientConfig, Offset as KOffset, TopicPartitionList};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Address of the test broker. Fails loudly: these tests need the real services.
pub fn kafka() -> String {
    std::env::var("GAP_AUDITOR_TEST_KAFKA").expect(
        "GAP_AUDITOR_TEST_KAFKA is not set: run scripts/test.sh (it starts tansu and MariaDB)",
    )
}

/// URL of the test MariaDB database.
pub fn mysql_url() -> String {
    std::env::var("GAP_AUDITOR_TEST_MYSQL").expect(
        "GAP_AUDITOR_TEST_MYSQL is not set: run scripts/test.sh (it starts tansu and MariaDB)",
    )
}

/// A name unique across tests and runs (topics, groups, tables).
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() % 100_000_000)
        .unwrap_or(0);
    format!(
        "{prefix}_{}_{t}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Creates a topic on the test broker.
pub async fn create_topic(name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .create()
        .expect("admin client");
    let r = admin
        .create_topics(
            &[NewTopic::new(name, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("create_topics");
    for x in r {
        x.expect("topic created");
    }
}

/// A producer sending one record per batch (see module docs).
pub struct TestProducer {
    producer: FutureProducer,
    pub topic: String,
}

impl TestProducer {
    pub fn new(topic: &str) -> Self {
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", kafka())
            .set("linger.ms", "0")
            .create()
            .expect("producer");
        Self {
            producer,
            topic: topic.to_string(),
        }
    }

    /// Sends one value to `partition`, waits for the ack, returns its offset.
    pub async fn send(&self, partition: i32, value: &[u8]) -> i64 {
        let d = self
            .producer
            .send(
                FutureRecord::<(), [u8]>::to(&self.topic)
                    .partition(partition)
                    .payload(value),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)
            .expect("produce");
        assert_eq!(d.partition, partition);
        d.offset
    }

    pub async fn send_all(&self, partition: i32, values: &[String]) -> Vec<i64> {
        let mut out = Vec::new();
        for v in values {
            out.push(self.send(partition, v.as_bytes()).await);
        }
        let _ = self.producer.flush(Duration::from_secs(5));
        out
    }
}

/// A seed-like DNS log line (9 pipe-separated fields); `i` makes it unique.
pub fn dns_line(i: usize) -> String {
    format!(
        "10.0.{}.{}|host{i}.example.com|2024-05-01 12:{:02}:{:02}|93.184.216.34|NOERROR|A|ns1.example.com|-|8.8.8.8",
        i / 250,
        i % 250,
        (i / 60) % 60,
        i % 60
    )
}

/// The test database.
pub struct Db {
    pub pool: mysql_async::Pool,
}

impl Db {
    pub fn new() -> Self {
        Self {
            pool: mysql_async::Pool::new(mysql_url().as_str()),
        }
    }

    /// Creates the seed-shaped table with Kafka coordinate columns too. Binary collation:
    /// Doris compares strings byte-wise, MariaDB's default collation would not.
    pub async fn create_dns_table(&self, table: &str) {
        let mut c = self.pool.get_conn().await.expect("mysql conn");
        c.query_drop(format!(
            "CREATE TABLE `{table}` (
                client_ip VARCHAR(80) COLLATE utf8mb4_bin,
                domain LONGTEXT COLLATE utf8mb4_bin,
                time VARCHAR(40) COLLATE utf8mb4_bin,
                target_ip VARCHAR(80), rcode VARCHAR(20), query_type VARCHAR(20),
                authority_record TEXT, add_msg TEXT, dns_ip VARCHAR(80),
                `partition` INT, `offset` BIGINT,
                KEY po (`partition`, `offset`),
                KEY k (client_ip, time)
            ) DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin"
        ))
        .await
        .expect("create table");
    }

    /// Inserts one record's row with a prepared statement (binary protocol): independent of
    /// the auditor's own literal escaping, so an escaping bug cannot cancel itself out.
    pub async fn insert_line(&self, table: &str, line: &[u8], partition: i32, offset: i64) {
        let text = String::from_utf8_lossy(line).to_string();
        let mut f: Vec<String> = text.split('|').map(str::to_string).collect();
        f.resize(9, String::new());
        let mut c = self.pool.get_conn().await.expect("mysql conn");
        c.exec_drop(
            format!(
                "INSERT INTO `{table}` (client_ip, domain, time, target_ip, rcode, query_type, authority_record, add_msg, dns_ip, `partition`, `offset`) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
            ),
            (
                &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8], partition, offset,
            ),
        )
        .await
        .expect("insert");
    }

    pub async fn count(&self, table: &str) -> i64 {
        let mut c = self.pool.get_conn().await.expect("mysql conn");
        c.query_first::<i64, _>(format!("SELECT COUNT(*) FROM `{table}`"))
            .await
            .expect("count")
            .unwrap_or(0)
    }
}

/// The pipeline stand-in: consumer group `group`, reads `partition` from `start`, writes
/// each record to `table`, and commits offset+1 after writing (like Flink's exactly-once
/// sink committing on checkpoint). Stops after `count` records. Uses assign(), so it never
/// waits for a group rebalance.
pub async fn run_pipeline(
    group: &str,
    topic: &str,
    partition: i32,
    start: i64,
    count: usize,
    db: &Db,
    table: &str,
) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("pipeline consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, KOffset::Offset(start))
        .expect("tpl");
    consumer.assign(&tpl).expect("assign");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut written = 0;
    while written < count {
        assert!(
            Instant::now() < deadline,
            "pipeline stand-in wrote only {written}/{count}"
        );
        let msg = consumer.poll(Duration::from_millis(50)).map(|m| {
            let m = m.expect("pipeline poll");
            (m.payload().map(<[u8]>::to_vec), m.offset())
        });
        let Some((payload, offset)) = msg else {
            tokio::task::yield_now().await;
            continue;
        };
        if let Some(p) = payload {
            db.insert_line(table, &p, partition, offset).await;
        }
        let mut c = TopicPartitionList::new();
        c.add_partition_offset(topic, partition, KOffset::Offset(offset + 1))
            .expect("tpl");
        consumer
            .commit(&c, CommitMode::Sync)
            .expect("pipeline commit");
        written += 1;
    }
}

/// Audit settings a test varies.
pub struct AuditSpec<'a> {
    pub topic: &'a str,
    pub table: &'a str,
    pub pipeline_group: Option<&'a str>,
    pub strategy: &'a str,
    pub grace: &'a str,
    pub verify_interval: &'a str,
    pub state_dir: &'a std::path::Path,
    pub group: &'a str,
    pub listen: &'a str,
}

/// The auditor configuration for a test, as TOML (also written to files for the binary).
pub fn config_toml(s: &AuditSpec) -> String {
    let pipeline = s
        .pipeline_group
        .map(|g| format!("pipeline_group = \"{g}\""))
        .unwrap_or_default();
    let matching = match s.strategy {
        "key_columns" => "strategy = \"key_columns\"\nkey = [\"client_ip\",\"domain\",\"time\"]".to_string(),
        _ => "strategy = \"offset_columns\"\npartition_column = \"partition\"\noffset_column = \"offset\"".to_string(),
    };
    format!(
        r#"
[kafka]
brokers = "{brokers}"
group_id = "{group}"
start = "earliest"
session_timeout = "6s"
heartbeat_interval = "500ms"
statistics_interval = "500ms"
[server]
listen = "{listen}"
[state]
path = "{state}"
[[audits]]
name = "dns_logs"
topics = ["{topic}"]
{pipeline}
grace = "{grace}"
verify_interval = "{verify}"
batch_size = 100
[audits.record]
format = "csv"
delimiter = "|"
fields = ["client_ip","domain","time","target_ip","rcode","query_type","authority_record","add_msg","dns_ip"]
[audits.record.filter]
field_count = 9
[audits.match]
{matching}
[audits.sink]
kind = "mysql"
url = "{url}"
table = "{table}"
query_timeout = "3s"
"#,
        brokers = kafka(),
        group = s.group,
        listen = s.listen,
        state = s.state_dir.display(),
        topic = s.topic,
        grace = s.grace,
        verify = s.verify_interval,
        table = s.table,
        url = mysql_url(),
    )
}

/// An auditor running in this process, with its metrics, status and store at hand.
pub struct Auditor {
    pub cancel: CancellationToken,
    pub handle: tokio::task::JoinHandle<anyhow::Result<()>>,
    pub metrics: Arc<Metrics>,
    pub status: StatusBoard,
    pub store: Arc<Store>,
    pub addr: std::net::SocketAddr,
}

impl Auditor {
    pub async fn start(toml: &str) -> Auditor {
        let config = Config::from_toml_str(toml).expect("test config is valid");
        let a = &config.audits[0];
        let target = MysqlTarget {
            table: a.sink.table.clone().expect("table"),
            partition_column: a.matching.partition_column.clone(),
            offset_column: a.matching.offset_column.clone(),
            topic_column: a.matching.topic_column.clone(),
            key_columns: a.matching.sink_columns().to_vec(),
        };
        let sink = MysqlSink::new(
            a.sink.url.expose(),
            None,
            None,
            target,
            a.sink.query_timeout,
            "mysql",
        )
        .expect("sink");
        let store = Arc::new(Store::open(&config.state.path).expect("store"));
        let metrics = Arc::new(Metrics::new());
        let status = StatusBoard::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let cancel = CancellationToken::new();
        let handle = tokio::spawn(app::run_with(
            config,
            vec![AnySink::Mysql(sink)],
            store.clone(),
            metrics.clone(),
            status.clone(),
            listener,
            cancel.clone(),
        ));
        Auditor {
            cancel,
            handle,
            metrics,
            status,
            store,
            addr,
        }
    }

    pub fn counter(&self, f: &prometheus::IntCounterVec, topic: &str, partition: i32) -> u64 {
        f.with_label_values(&["dns_logs", topic, &partition.to_string()])
            .get()
    }

    pub fn lost(&self, topic: &str, p: i32) -> u64 {
        self.counter(&self.metrics.records_lost, topic, p)
    }

    pub fn confirmed(&self, topic: &str, p: i32) -> u64 {
        self.counter(&self.metrics.records_confirmed, topic, p)
    }

    pub fn sink_up(&self) -> i64 {
        self.metrics.sink_up.with_label_values(&["dns_logs"]).get()
    }

    /// Waits until `cond` holds, failing the test after `secs`.
    pub async fn wait_for(&self, secs: u64, what: &str, cond: impl Fn(&Auditor) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !cond(self) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for: {what}\nstatus: {:?}",
                self.status.snapshot()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// GET a path of the auditor's HTTP server, returning (status, body).
    pub async fn get(&self, path: &str) -> (u16, String) {
        http_get(self.addr, path).await
    }

    pub async fn stop(self) {
        self.cancel.cancel();
        let r = tokio::time::timeout(Duration::from_secs(30), self.handle).await;
        r.expect("auditor drains within 30s")
            .expect("auditor task")
            .expect("auditor result");
    }
}

/// Minimal HTTP/1.1 GET (no client dependency needed).
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.expect("read");
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    // The server may answer chunked; strip chunk framing for JSON bodies.
    let body = if text
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(&body)
    } else {
        body
    };
    (status, body)
}

fn dechunk(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

/// Gaps from /api/gaps?state=all as JSON values.
pub async fn api_gaps(a: &Auditor) -> Vec<serde_json::Value> {
    let (code, body) = a.get("/api/gaps?state=all").await;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("gaps json")
}

/// (partition, first, last, missing) of each gap, sorted.
pub fn gap_tuples(gaps: &[serde_json::Value]) -> Vec<(i64, i64, i64, i64)> {
    let mut v: Vec<(i64, i64, i64, i64)> = gaps
        .iter()
        .map(|g| {
            (
                g["partition"].as_i64().expect("partition"),
                g["first_offset"].as_i64().expect("first"),
                g["last_offset"].as_i64().expect("last"),
                g["missing_records"].as_i64().expect("missing"),
            )
        })
        .collect();
    v.sort();
    v
}
