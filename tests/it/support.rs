//! Shared test support: the real services started by `scripts/test-env.sh` (tansu as the
//! Kafka-protocol broker, MariaDB as the MySQL-protocol stand-in for Doris) and the fixtures
//! every end-to-end test is built from:
//!
//! - [`Scenario`]: a fresh topic, sink table, pipeline group, auditor group, state dir and
//!   producer; [`Scenario::spec`] / [`Scenario::start_auditor`] for the auditor config.
//! - [`Pipeline`]: the one pipeline stand-in (start offset, count, rows per record, commit
//!   cadence, commit-before-write with a check while it waits, which table shape it writes).
//! - [`Auditor`]: an auditor in this process, with its metrics, status and store at hand.
//! - [`Daemon`]: the real binary as a child process, with a log file.
//! - [`MockKafka`]: librdkafka's mock cluster, for tests that need exact watermarks and
//!   retention (no external service).
//!
//! Broker behaviour relied on (see ../shared/TESTING.md): tansu's ListOffsets "latest" is
//! wrong for multi-record batches, so every producer here sends ONE record per batch
//! (flush after each) and the pipeline stand-in "restarts from latest" by seeking to the end
//! offset the test itself knows from the producer's acknowledgements.
//!
//! The stand-in writes its rows with prepared statements (binary protocol): independent of
//! the auditor's own literal escaping, so an escaping bug cannot cancel itself out.

#![allow(dead_code)]

#[path = "../support/config_toml.rs"]
pub mod config_toml;
pub use config_toml::{AuditToml, ConfigToml, SEED_FIELDS};

use gap_auditor::app::{self, AnySink};
use gap_auditor::config::Config;
use gap_auditor::gap::Gap;
use gap_auditor::metrics::Metrics;
use gap_auditor::status::StatusBoard;
use gap_auditor::store::{GapFilter, StateFilter, Store};
use mysql_async::prelude::Queryable;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{
    BaseProducer, BaseRecord, DefaultProducerContext, FutureProducer, FutureRecord, Producer,
};
use rdkafka::{ClientConfig, Offset as KOffset, TopicPartitionList};
use std::ffi::OsString;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// A broker address that replaces `GAP_AUDITOR_TEST_KAFKA` for the whole test binary: set
/// (once, before any client is made) by a binary that runs its own private broker.
pub static KAFKA_OVERRIDE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Address of the test broker. Fails loudly: these tests need the real services.
pub fn kafka() -> String {
    if let Some(k) = KAFKA_OVERRIDE.get() {
        return k.clone();
    }
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

/// Creates a topic on the test broker with topic configs (`max.message.bytes`,
/// `cleanup.policy`, ...). A broker may accept configs it does not enforce: tansu does.
pub async fn create_topic_with(name: &str, partitions: i32, configs: &[(&str, &str)]) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .create()
        .expect("admin client");
    let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    for (k, v) in configs {
        topic = topic.set(k, v);
    }
    let r = admin
        .create_topics(
            &[topic],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("create_topics");
    for x in r {
        x.expect("topic created");
    }
}

/// Client settings of a member of consumer group `group` that commits by hand.
pub fn group_client(group: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", kafka())
        .set("group.id", group)
        .set("enable.auto.commit", "false");
    c
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

/// [`dns_line`] for each of `range`.
pub fn dns_lines(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(dns_line).collect()
}

/// The table the documented example (`config/gap-auditor.toml`) audits.
pub const SEED_TABLE: &str = "dns_logs_from_flink01";

/// The shape of a sink table, which decides the rows the pipeline stand-in writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableShape {
    /// The seed's 9 columns plus the record's Kafka `partition` and `offset`
    /// ([`Db::create_dns_table`]).
    DnsWithCoordinates,
    /// Only the seed's 9 columns, as in the seed's Doris table ([`Db::create_seed_table`]).
    Seed,
}

/// The test database.
#[derive(Clone)]
pub struct Db {
    pub pool: mysql_async::Pool,
}

impl Db {
    pub fn new() -> Self {
        Self::at(&mysql_url())
    }

    pub fn at(url: &str) -> Self {
        Self {
            pool: mysql_async::Pool::new(url),
        }
    }

    /// Creates the seed-shaped table with Kafka coordinate columns too. Key columns in
    /// `utf8mb4_bin`: case-sensitive, but PAD SPACE on MariaDB ('a' = 'a '), so NOT
    /// byte-exact like Doris. Kept on purpose: the sink (kind `mysql`) must notice and
    /// compare such columns byte-exactly itself, and every key_columns test on these tables
    /// exercises that (tests/it/keys_at_scale.rs; byte-exact tables use `utf8mb4_nopad_bin`).
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

    /// Creates database `dbname` holding the seed's table (Doris DDL translated for MariaDB,
    /// `time` a DATETIME as in Doris) under its documented name [`SEED_TABLE`]; returns the
    /// database's URL.
    pub async fn create_seed_table(&self, dbname: &str) -> String {
        let mut c = self.pool.get_conn().await.expect("conn");
        c.query_drop(format!("CREATE DATABASE `{dbname}`"))
            .await
            .expect("create db");
        c.query_drop(format!(
            "CREATE TABLE `{dbname}`.{SEED_TABLE} (
                client_ip VARCHAR(64) COLLATE utf8mb4_bin, domain VARCHAR(512) COLLATE utf8mb4_bin,
                time DATETIME, target_ip VARCHAR(64), rcode VARCHAR(16), query_type VARCHAR(16),
                authority_record VARCHAR(512), add_msg VARCHAR(512), dns_ip VARCHAR(64)
            ) DEFAULT CHARSET = utf8mb4"
        ))
        .await
        .expect("create seed table");
        let base = mysql_url();
        format!("{}/{dbname}", base.rsplit_once('/').expect("db in url").0)
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
                "INSERT INTO `{table}` ({}, `partition`, `offset`) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                SEED_FIELDS.join(", ")
            ),
            (
                &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7], &f[8], partition, offset,
            ),
        )
        .await
        .expect("insert");
    }

    /// Inserts one record's row into a [`TableShape::Seed`] table: the 9 fields only, no
    /// Kafka coordinates (prepared statement, like [`Db::insert_line`]).
    pub async fn insert_seed_line(&self, table: &str, line: &[u8]) {
        let line = String::from_utf8_lossy(line).to_string();
        let f: Vec<&str> = line.split('|').collect();
        let mut c = self.pool.get_conn().await.expect("conn");
        c.exec_drop(
            format!("INSERT INTO `{table}` VALUES (?,?,?,?,?,?,?,?,?)"),
            (f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8]),
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

/// Everything one end-to-end test needs, each name fresh: a topic, a sink table, the
/// pipeline's consumer group, the auditor's own group, a state dir and a producer.
pub struct Scenario {
    pub topic: String,
    /// The sink table the pipeline stand-in writes and the auditor verifies.
    pub table: String,
    pub shape: TableShape,
    /// The pipeline's consumer group, which the auditor reads (`pipeline_group`).
    pub pipeline_group: String,
    /// The auditor's own consumer group.
    pub auditor_group: String,
    pub state: tempfile::TempDir,
    pub db: Db,
    /// URL of the database holding `table`.
    pub db_url: String,
    pub producer: TestProducer,
}

impl Scenario {
    /// One partition and a [`TableShape::DnsWithCoordinates`] table in the test database.
    pub async fn new(name: &str) -> Self {
        Self::with_partitions(name, 1).await
    }

    pub async fn with_partitions(name: &str, partitions: i32) -> Self {
        let db = Db::new();
        let table = unique(&format!("{name}_t"));
        db.create_dns_table(&table).await;
        Self::build(
            name,
            partitions,
            db,
            mysql_url(),
            table,
            TableShape::DnsWithCoordinates,
        )
        .await
    }

    /// One partition and the seed's own table ([`Db::create_seed_table`]) in a database of
    /// its own, so the documented table name is used as is.
    pub async fn with_seed_table(name: &str) -> Self {
        let dbname = unique("gap_auditor_test_seed");
        let url = Db::new().create_seed_table(&dbname).await;
        let db = Db::at(&url);
        Self::build(name, 1, db, url, SEED_TABLE.to_string(), TableShape::Seed).await
    }

    async fn build(
        name: &str,
        partitions: i32,
        db: Db,
        db_url: String,
        table: String,
        shape: TableShape,
    ) -> Self {
        let topic = unique(name);
        create_topic(&topic, partitions).await;
        Self {
            producer: TestProducer::new(&topic),
            topic,
            table,
            shape,
            pipeline_group: unique(&format!("{name}_pipeline")),
            auditor_group: unique("auditor"),
            state: tempfile::tempdir().expect("tempdir"),
            db,
            db_url,
        }
    }

    /// Sends `values` to partition 0, one record per batch; returns their offsets.
    pub async fn send(&self, values: &[String]) -> Vec<i64> {
        self.producer.send_all(0, values).await
    }

    /// Rows in the sink table.
    pub async fn rows(&self) -> i64 {
        self.db.count(&self.table).await
    }

    /// The audit of this scenario, with the pipeline group set, state in the state dir and
    /// the HTTP server on a free port.
    pub fn spec<'a>(&'a self, strategy: &'a str, grace: &'a str, verify: &'a str) -> AuditSpec<'a> {
        AuditSpec {
            topic: &self.topic,
            table: &self.table,
            pipeline_group: Some(&self.pipeline_group),
            strategy,
            grace,
            verify_interval: verify,
            state_dir: self.state.path(),
            group: &self.auditor_group,
            listen: "127.0.0.1:0",
        }
    }

    /// An in-process auditor running [`Scenario::spec`].
    pub async fn start_auditor(&self, strategy: &str, grace: &str, verify: &str) -> Auditor {
        Auditor::start(&config_toml(&self.spec(strategy, grace, verify))).await
    }

    /// A pipeline stand-in of this scenario's pipeline group, from offset 0 of partition 0
    /// into this scenario's table (see [`Pipeline`] for the rest).
    pub fn pipeline(&self) -> Pipeline<'static> {
        Pipeline {
            group: self.pipeline_group.clone(),
            topic: self.topic.clone(),
            partition: 0,
            start: 0,
            count: 0,
            db: self.db.clone(),
            table: self.table.clone(),
            shape: self.shape,
            copies: Box::new(|_| 1),
            commit_every: 1,
            pause_after_commit: Duration::ZERO,
            write_after_commit: None,
            deadline: Duration::from_secs(60),
            commit_start: false,
        }
    }

    /// The seed incident on partition 0: the pipeline writes 0–1 and commits 2; it stops;
    /// 2–3 are produced; it restarts "from latest" (at 4, the end the test knows from the
    /// producer's acks), commits 4 at once like Flink's first checkpoint after the restart,
    /// and writes 4–5, which are produced once the auditor has seen the 2 → 4 jump.
    /// `seen_commit(o)` tells when the auditor has observed the pipeline's commit `o`: a
    /// real auditor runs long before an incident and polls faster than a pipeline restarts,
    /// so it sees commit 2, then the jump to 4, before anything else happens.
    pub async fn play_seed_incident<F, Fut>(&self, seen_commit: F)
    where
        F: Fn(i64) -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let lines = dns_lines(0..6);
        assert_eq!(self.send(&lines[0..2]).await, vec![0, 1]);
        self.pipeline().records(2).run().await;
        let deadline = Instant::now() + Duration::from_secs(60);
        let wait_seen = |offset: i64| {
            let seen = &seen_commit;
            async move {
                while !seen(offset).await {
                    assert!(
                        Instant::now() < deadline,
                        "the auditor never saw the pipeline's commit {offset}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        wait_seen(2).await;
        // The job is killed; records arrive meanwhile.
        assert_eq!(self.send(&lines[2..4]).await, vec![2, 3]);
        // Restart from latest-offset: the end is 4.
        let restarted = tokio::spawn(self.pipeline().start_at(4).commit_start().records(2).run());
        wait_seen(4).await;
        assert_eq!(self.send(&lines[4..6]).await, vec![4, 5]);
        restarted.await.expect("pipeline restarted");
    }
}

/// Runs `check` every `every` for `how_long` (it asserts: a condition that must hold at
/// every moment, not only at the end).
pub async fn keep_checking(how_long: Duration, every: Duration, check: impl Fn()) {
    let until = Instant::now() + how_long;
    while Instant::now() < until {
        check();
        tokio::time::sleep(every).await;
    }
}

type Check<'a> = Box<dyn Fn() + Send + Sync + 'a>;

/// The pipeline stand-in (made by [`Scenario::pipeline`]): consumer group `group`, reads
/// `partition` from `start`, and for each record writes `copies(offset)` rows (0 = the
/// pipeline loses it, 2 = a duplicate) to `table`, then commits offset+1 (like Flink's
/// exactly-once sink committing on checkpoint; the group passes lost records too, as a real
/// lossy pipeline does). Stops after `count` records. Uses assign(): it never joins the
/// group, so the group has committed offsets but no member, and never waits for a rebalance.
pub struct Pipeline<'a> {
    group: String,
    topic: String,
    partition: i32,
    start: i64,
    count: usize,
    db: Db,
    table: String,
    shape: TableShape,
    copies: Box<dyn Fn(i64) -> usize + Send + Sync + 'a>,
    commit_every: usize,
    pause_after_commit: Duration,
    write_after_commit: Option<(Duration, Check<'a>)>,
    deadline: Duration,
    commit_start: bool,
}

impl<'a> Pipeline<'a> {
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = partition;
        self
    }

    /// Reads another topic (e.g. a repair topic the pipeline also consumes).
    pub fn reading(mut self, topic: &str) -> Self {
        self.topic = topic.to_string();
        self
    }

    /// The offset it starts reading at ("restart from latest" = the end the test knows).
    pub fn start_at(mut self, offset: i64) -> Self {
        self.start = offset;
        self
    }

    /// How many records it reads before it stops.
    pub fn records(mut self, count: usize) -> Self {
        self.count = count;
        self
    }

    /// Rows written per record, by offset (default 1).
    pub fn copies(mut self, copies: impl Fn(i64) -> usize + Send + Sync + 'a) -> Self {
        self.copies = Box::new(copies);
        self
    }

    /// Commits only after every `n`th record (and the last), then pauses `pause`: the
    /// pipeline advances in steps.
    pub fn commit_every(mut self, n: usize, pause: Duration) -> Self {
        self.commit_every = n;
        self.pause_after_commit = pause;
        self
    }

    /// Commits each record FIRST and writes its row `delay` later, running `check` every
    /// 50 ms meanwhile: a sink whose writes become visible after a delay.
    pub fn write_after_commit(
        mut self,
        delay: Duration,
        check: impl Fn() + Send + Sync + 'a,
    ) -> Self {
        self.write_after_commit = Some((delay, Box::new(check)));
        self
    }

    /// Commits its start offset as soon as it starts, before reading anything — what a
    /// Flink job restarted from `latest` does at its first checkpoint.
    pub fn commit_start(mut self) -> Self {
        self.commit_start = true;
        self
    }

    /// Fails the test when it has not read `count` records by then (default 60 s).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    async fn write(&self, payload: &Option<Vec<u8>>, offset: i64) {
        let Some(p) = payload else { return };
        for _ in 0..(self.copies)(offset) {
            match self.shape {
                TableShape::DnsWithCoordinates => {
                    self.db
                        .insert_line(&self.table, p, self.partition, offset)
                        .await
                }
                TableShape::Seed => self.db.insert_seed_line(&self.table, p).await,
            }
        }
    }

    /// Runs it; returns the offsets it read, in order.
    pub async fn run(self) -> Vec<i64> {
        let consumer: BaseConsumer = group_client(&self.group)
            .set("isolation.level", "read_committed")
            .create()
            .expect("pipeline consumer");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, self.partition, KOffset::Offset(self.start))
            .expect("tpl");
        consumer.assign(&tpl).expect("assign");
        if self.commit_start {
            consumer
                .commit(&tpl, CommitMode::Sync)
                .expect("commit the start offset");
        }
        let deadline = Instant::now() + self.deadline;
        let mut seen = Vec::new();
        while seen.len() < self.count {
            assert!(
                Instant::now() < deadline,
                "pipeline stand-in read only {}/{} records: {seen:?}",
                seen.len(),
                self.count
            );
            let msg = consumer.poll(Duration::from_millis(50)).map(|m| {
                let m = m.expect("pipeline poll");
                (m.payload().map(<[u8]>::to_vec), m.offset())
            });
            let Some((payload, offset)) = msg else {
                tokio::task::yield_now().await;
                continue;
            };
            if self.write_after_commit.is_none() {
                self.write(&payload, offset).await;
            }
            seen.push(offset);
            if seen.len().is_multiple_of(self.commit_every) || seen.len() == self.count {
                let mut c = TopicPartitionList::new();
                c.add_partition_offset(&self.topic, self.partition, KOffset::Offset(offset + 1))
                    .expect("tpl");
                consumer
                    .commit(&c, CommitMode::Sync)
                    .expect("pipeline commit");
                if !self.pause_after_commit.is_zero() {
                    tokio::time::sleep(self.pause_after_commit).await;
                }
            }
            if let Some((delay, check)) = &self.write_after_commit {
                keep_checking(*delay, Duration::from_millis(50), check).await;
                self.write(&payload, offset).await;
            }
        }
        seen
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

/// The auditor configuration for a test, as the shared builder: the seed audit
/// `dns_logs` on the test's MySQL table, with the tests' short timings.
pub fn config_builder(s: &AuditSpec) -> ConfigToml {
    let mut audit = AuditToml::new("dns_logs", &[s.topic]);
    if let Some(group) = s.pipeline_group {
        audit = audit.set("pipeline_group", group);
    }
    let audit = audit
        .set("grace", s.grace)
        .set("verify_interval", s.verify_interval)
        .set("batch_size", 100)
        .seed_csv();
    let audit = match s.strategy {
        "key_columns" => audit.seed_key_columns(),
        _ => audit.offset_columns(),
    };
    ConfigToml::new(&kafka())
        .test_group(s.group)
        .kafka("statistics_interval", "500ms")
        .server("listen", s.listen)
        .state_path(s.state_dir)
        .audit(
            audit
                .sql_sink("mysql", &mysql_url(), s.table)
                .sink("query_timeout", "3s"),
        )
}

/// Audit `a` of topic `t`: raw records matched by offset, against a MySQL URL nothing
/// listens on, for tests that run the audit against a memory sink or never query it.
pub fn unreachable_sink_audit() -> AuditToml {
    AuditToml::new("a", &["t"])
        .record("format", "raw")
        .strategy("offset_columns")
        .sql_sink("mysql", "mysql://u@127.0.0.1:1/db", "x")
}

/// The auditor configuration for a test, as TOML (also written to files for the binary).
pub fn config_toml(s: &AuditSpec) -> String {
    config_builder(s).render()
}

/// An auditor running in this process, with its metrics, status and store at hand.
pub struct Auditor {
    /// The name of its (first) audit, the first label of its metrics.
    pub audit: String,
    pub cancel: CancellationToken,
    pub handle: tokio::task::JoinHandle<anyhow::Result<()>>,
    pub metrics: Arc<Metrics>,
    pub status: StatusBoard,
    pub store: Arc<Store>,
    pub addr: std::net::SocketAddr,
}

impl Auditor {
    /// Runs a TOML config whose first audit has a MySQL-protocol sink, built as the daemon
    /// builds it.
    pub async fn start(toml: &str) -> Auditor {
        let config = Config::from_toml_str(toml).expect("test config is valid");
        let sink = app::build_sink(&config.audits[0]).expect("sink");
        Self::start_with(config, sink).await
    }

    /// Runs `config` (one audit) against `sink`, with the store in `config.state.path`.
    pub async fn start_with(config: Config, sink: AnySink) -> Auditor {
        let audit = config.audits[0].name.clone();
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
            vec![sink],
            store.clone(),
            metrics.clone(),
            status.clone(),
            listener,
            cancel.clone(),
        ));
        Auditor {
            audit,
            cancel,
            handle,
            metrics,
            status,
            store,
            addr,
        }
    }

    pub fn counter(&self, f: &prometheus::IntCounterVec, topic: &str, partition: i32) -> u64 {
        f.with_label_values(&[self.audit.as_str(), topic, &partition.to_string()])
            .get()
    }

    pub fn lost(&self, topic: &str, p: i32) -> u64 {
        self.counter(&self.metrics.records_lost, topic, p)
    }

    pub fn confirmed(&self, topic: &str, p: i32) -> u64 {
        self.counter(&self.metrics.records_confirmed, topic, p)
    }

    pub fn duplicated(&self, topic: &str, p: i32) -> u64 {
        self.counter(&self.metrics.records_duplicated, topic, p)
    }

    pub fn consumed(&self, topic: &str, p: i32) -> u64 {
        self.counter(&self.metrics.records_consumed, topic, p)
    }

    /// Records of partition `p` not expected, with this reason label.
    pub fn filtered(&self, topic: &str, p: i32, reason: &str) -> u64 {
        self.metrics
            .records_filtered
            .with_label_values(&[self.audit.as_str(), topic, &p.to_string(), reason])
            .get()
    }

    /// Sink queries that failed.
    pub fn sink_errors(&self) -> u64 {
        self.metrics
            .sink_queries
            .with_label_values(&[self.audit.as_str(), "error"])
            .get()
    }

    pub fn sink_up(&self) -> i64 {
        self.metrics
            .sink_up
            .with_label_values(&[self.audit.as_str()])
            .get()
    }

    /// The settled watermark of the first partition of the first audit, from the status.
    pub fn settled(&self) -> Option<i64> {
        self.status
            .snapshot()
            .first()
            .and_then(|s| s.partitions.first())
            .map(|p| p.settled)
    }

    /// Every gap in its store.
    pub fn stored_gaps(&self) -> Vec<Gap> {
        stored_gaps(&self.store)
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

    /// Like [`Auditor::wait_for`], but fails at once (not at the timeout) when the auditor
    /// task ended or a sink query failed: for tests whose sink is always up, where any
    /// sink error is a bug.
    pub async fn wait_decided(&self, secs: u64, what: &str, cond: impl Fn(&Auditor) -> bool) {
        self.wait_for(secs, what, |a| {
            cond(a) || a.handle.is_finished() || a.sink_errors() > 0
        })
        .await;
        assert!(
            !self.handle.is_finished(),
            "the auditor task ended while waiting for: {what}"
        );
        assert_eq!(
            self.sink_errors(),
            0,
            "a sink query failed while waiting for: {what}\nstatus: {:?}",
            self.status.snapshot()
        );
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

/// The real `gap-auditor run` binary as a child process, its stderr appended to a log file
/// (kept across restarts). Killed (SIGKILL) when dropped while it still runs.
pub struct Daemon {
    child: Child,
    config: PathBuf,
    env: Vec<(&'static str, OsString)>,
    pub log: PathBuf,
}

impl Daemon {
    /// Starts `gap-auditor run -c config` with `env` added to the test's environment.
    pub fn spawn(config: &Path, env: Vec<(&'static str, OsString)>, log: PathBuf) -> Daemon {
        let child = Self::spawn_child(config, &env, &log);
        Daemon {
            child,
            config: config.to_path_buf(),
            env,
            log,
        }
    }

    fn spawn_child(config: &Path, env: &[(&'static str, OsString)], log: &Path) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("log file");
        Command::new(env!("CARGO_BIN_EXE_gap-auditor"))
            .args(["run", "-c"])
            .arg(config)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn gap-auditor")
    }

    /// The process id of the running child.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts it again (after [`Daemon::stop`]) with the same config, environment and log.
    pub fn restart(&mut self) {
        self.child = Self::spawn_child(&self.config, &self.env, &self.log);
    }

    /// SIGKILL: no drain, no final commit, no store close.
    pub fn kill9(&mut self) {
        self.child.kill().expect("kill -9");
        let _ = self.child.wait();
    }

    /// [`Daemon::kill9`], then start it again with the same config, environment and log.
    pub fn kill9_and_restart(&mut self) {
        self.kill9();
        self.child = Self::spawn_child(&self.config, &self.env, &self.log);
    }

    /// What it has logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Graceful stop (SIGTERM path): it must exit 0.
    pub fn stop(&mut self) {
        let pid = self.child.id().to_string();
        let st = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill -TERM");
        assert!(st.success(), "kill -TERM {pid}");
        let code: ExitStatus = self.child.wait().expect("wait");
        assert!(
            code.success(),
            "SIGTERM must exit 0, got {code:?}; log:\n{}",
            self.log_text()
        );
    }

    /// Calls `probe` every 200 ms until it returns `Ok`; after `secs`, kills the daemon and
    /// fails the test with the last `Err` and the log.
    pub async fn wait_until<T, F: Future<Output = Result<T, String>>>(
        &mut self,
        secs: u64,
        mut probe: impl FnMut() -> F,
    ) -> T {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            match probe().await {
                Ok(v) => return v,
                Err(e) if Instant::now() > deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    panic!("{e}; log:\n{}", self.log_text());
                }
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A port free at the time of the call (for a child process's `server.listen`).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Like [`http_get`], but `None` while nothing listens (a daemon still starting).
pub async fn try_http_get(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    tokio::net::TcpStream::connect(addr).await.ok()?;
    tokio::time::timeout(std::time::Duration::from_secs(2), http_get(addr, path))
        .await
        .ok()
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

/// Every gap in a store, in any state.
pub fn stored_gaps(store: &Store) -> Vec<Gap> {
    store
        .list_gaps(&GapFilter {
            state: StateFilter::All,
            audit: None,
        })
        .expect("gaps")
}

/// [`gap_tuples`] of gaps read from a store.
pub fn stored_gap_tuples(gaps: &[Gap]) -> Vec<(i64, i64, i64, i64)> {
    let mut v: Vec<(i64, i64, i64, i64)> = gaps
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
    v.sort();
    v
}

/// librdkafka's mock cluster (`rdkafka::mocking`) with one topic `t` of one partition. It
/// deletes a partition's oldest records once it holds more than ~5 MiB, like retention
/// (tansu's memory storage never deletes anything).
pub struct MockKafka {
    pub cluster: MockCluster<'static, DefaultProducerContext>,
    pub brokers: String,
    pub producer: BaseProducer,
    probe: BaseConsumer,
}

impl MockKafka {
    pub fn new() -> Self {
        let cluster = MockCluster::new(1).expect("mock cluster");
        cluster.create_topic("t", 1, 1).expect("topic");
        let brokers = cluster.bootstrap_servers();
        let producer: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .set("linger.ms", "5")
            .create()
            .expect("producer");
        let probe: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .create()
            .expect("probe");
        Self {
            cluster,
            brokers,
            producer,
            probe,
        }
    }

    /// Produces `n` copies of `payload` to partition 0 (waiting while the queue is full),
    /// then flushes.
    pub fn produce(&self, n: usize, payload: &str) {
        for _ in 0..n {
            while self
                .producer
                .send(BaseRecord::<(), str>::to("t").partition(0).payload(payload))
                .is_err()
            {
                self.producer.poll(Duration::from_millis(10));
            }
        }
        self.producer.flush(Duration::from_secs(30)).expect("flush");
    }

    /// (log start, end) of partition 0.
    pub fn watermarks(&self) -> (i64, i64) {
        self.probe
            .fetch_watermarks("t", 0, Duration::from_secs(5))
            .expect("watermarks")
    }

    /// A config with one audit `a` of topic `t`, raw records matched by offset, state in
    /// `state`; `kafka` and `audit` are more lines of the `[kafka]` and `[[audits]]` tables.
    /// The sink is an unreachable MySQL URL: tests run it against a memory sink.
    pub fn config(&self, state: &Path, kafka: &str, audit: &str) -> Config {
        let toml = ConfigToml::new(&self.brokers)
            .kafka("session_timeout", "6s")
            .kafka("heartbeat_interval", "500ms")
            .kafka_lines(kafka)
            .state_path(state)
            .audit(unreachable_sink_audit().lines(audit));
        Config::from_toml_str(&toml.render()).expect("config")
    }
}

/// The pipeline group's committed offset the auditor last saw on partition 0.
pub fn pipeline_committed(a: &Auditor) -> Option<i64> {
    a.status
        .snapshot()
        .first()
        .and_then(|s| s.partitions.first())
        .and_then(|p| p.pipeline_committed)
}

/// Runs `gap-auditor replay -c CONFIG ARGS…` (the real binary): (exit code, stdout, stderr).
pub fn run_replay(config: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gap-auditor"))
        .args(["replay", "-c"])
        .arg(config)
        .args(args)
        .output()
        .expect("run replay");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
