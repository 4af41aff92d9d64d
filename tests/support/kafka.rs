//! Kafka for tests: topics, a producer that sends one record per batch, the mock cluster.

use gap_auditor::config::Config;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{
    BaseProducer, BaseRecord, DefaultProducerContext, FutureProducer, FutureRecord, Producer,
};
use std::path::Path;
use std::time::Duration;

use super::*;

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
/// `cleanup.policy`, ...). A broker may accept configs it does not enforce (tansu, the test
/// broker before Apache Kafka, accepted `max.message.bytes` without enforcing it).
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

/// Commits `tpl` for `consumer`'s group, retrying what the broker calls retriable, as a real
/// pipeline does: a coordinator still loading `__consumer_offsets` (CoordinatorLoadInProgress),
/// moving or not yet elected answers a commit with an error that passes within seconds on a
/// busy broker. Anything else, or 30 s of retries, fails the test naming `what`.
pub fn commit_retrying(consumer: &BaseConsumer, tpl: &rdkafka::TopicPartitionList, what: &str) {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode as C};
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match consumer.commit(tpl, rdkafka::consumer::CommitMode::Sync) {
            Ok(()) => return,
            Err(KafkaError::ConsumerCommit(
                code @ (C::CoordinatorLoadInProgress
                | C::CoordinatorNotAvailable
                | C::NotCoordinator
                | C::RequestTimedOut),
            )) if std::time::Instant::now() < deadline => {
                eprintln!("{what}: {code:?}, retrying");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("{what}: {e:?}"),
        }
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

    /// Sends one value to `partition` with the CreateTime `ts_ms` (an event-time producer,
    /// a backfill), waits for the ack, returns its offset.
    pub async fn send_at(&self, partition: i32, value: &[u8], ts_ms: i64) -> i64 {
        let d = self
            .producer
            .send(
                FutureRecord::<(), [u8]>::to(&self.topic)
                    .partition(partition)
                    .payload(value)
                    .timestamp(ts_ms),
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

/// librdkafka's mock cluster (`rdkafka::mocking`) with one topic `t` of one partition. It
/// deletes a partition's oldest records once it holds more than ~5 MiB, like retention, in
/// process and at once (the real broker's retention: tests/it/real_broker.rs).
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

/// The log end of a partition once it reaches `end` (polled for up to 30 s), or the last
/// one seen. A transaction's commit or abort marker is written by the transaction
/// coordinator after `commit_transaction` returns (Kafka's WriteTxnMarkers is
/// asynchronous), and a read_committed watermark query (librdkafka's default isolation)
/// answers the last stable offset, which moves past the transaction only then.
pub async fn log_end_reaching(topic: &str, partition: i32, end: i64) -> i64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (t, p) = (topic.to_string(), partition);
        let seen = tokio::task::spawn_blocking(move || watermarks(&t, p).1)
            .await
            .expect("watermark task");
        if seen >= end || std::time::Instant::now() >= deadline {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// (log start, log end) of a partition on the test broker.
pub fn watermarks(topic: &str, partition: i32) -> (i64, i64) {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .create()
        .expect("watermark reader");
    c.fetch_watermarks(topic, partition, Duration::from_secs(10))
        .expect("watermarks")
}

/// Deletes a partition's records below `before` (DeleteRecords: what retention does), and
/// returns the new log start.
pub async fn delete_records(topic: &str, partition: i32, before: i64) -> i64 {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .create()
        .expect("admin client");
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, rdkafka::Offset::Offset(before))
        .expect("tpl");
    let out = admin
        .delete_records(
            &tpl,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("delete_records");
    let e = out
        .find_partition(topic, partition)
        .expect("the partition in the answer");
    e.error().expect("records deleted");
    match e.offset() {
        rdkafka::Offset::Offset(o) => o,
        o => panic!("no log start after deleting records: {o:?}"),
    }
}

/// Deletes consumer group `group` (DeleteGroups: what `kafka-consumer-groups --delete`
/// does, and what offset expiry does to an empty group). Kafka refuses a group with
/// members: close the group's consumers first.
pub async fn delete_group(group: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .create()
        .expect("admin client");
    let out = admin
        .delete_groups(
            &[group],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("delete_groups");
    for r in out {
        r.expect("group deleted");
    }
}

/// A transactional producer (`transactional.id` of its own): each call is one transaction
/// on one partition. Blocking transaction calls run in `block_in_place`: multi-thread
/// runtimes only.
pub struct TxnProducer {
    producer: FutureProducer,
    pub topic: String,
}

impl TxnProducer {
    pub async fn new(topic: &str) -> Self {
        let producer: FutureProducer = ClientConfig::new()
            .set("bootstrap.servers", kafka())
            .set("transactional.id", unique("txn_id"))
            .set("linger.ms", "0")
            .create()
            .expect("transactional producer");
        tokio::task::block_in_place(|| producer.init_transactions(Duration::from_secs(30)))
            .expect("init_transactions");
        Self {
            producer,
            topic: topic.to_string(),
        }
    }

    /// Sends `values` to `partition` in one transaction, each acknowledged (so in the log)
    /// before the next: their offsets.
    async fn send_in_txn(&self, partition: i32, values: &[String]) -> Vec<i64> {
        self.producer
            .begin_transaction()
            .expect("begin_transaction");
        let mut offsets = Vec::new();
        for v in values {
            let d = self
                .producer
                .send(
                    FutureRecord::<(), str>::to(&self.topic)
                        .partition(partition)
                        .payload(v),
                    Duration::from_secs(10),
                )
                .await
                .map_err(|(e, _)| e)
                .expect("transactional produce");
            assert_eq!(d.partition, partition);
            offsets.push(d.offset);
        }
        offsets
    }

    /// One committed transaction of `values` on `partition`: their offsets (its commit
    /// marker follows the last).
    pub async fn commit(&self, partition: i32, values: &[String]) -> Vec<i64> {
        let offsets = self.send_in_txn(partition, values).await;
        tokio::task::block_in_place(|| self.producer.commit_transaction(Duration::from_secs(30)))
            .expect("commit_transaction");
        offsets
    }

    /// A transaction of `values` on `partition` left open (it holds the last stable
    /// offset): their offsets. [`TxnProducer::commit_open`] ends it.
    pub async fn open(&self, partition: i32, values: &[String]) -> Vec<i64> {
        self.send_in_txn(partition, values).await
    }

    /// Commits the transaction [`TxnProducer::open`] left open.
    pub fn commit_open(&self) {
        tokio::task::block_in_place(|| self.producer.commit_transaction(Duration::from_secs(30)))
            .expect("commit_transaction");
    }

    /// One aborted transaction of `values` on `partition`: every record is acknowledged,
    /// so in the log, before the abort (an abort purges what was not sent yet): their
    /// offsets (the abort marker follows the last).
    pub async fn abort(&self, partition: i32, values: &[String]) -> Vec<i64> {
        let offsets = self.send_in_txn(partition, values).await;
        tokio::task::block_in_place(|| self.producer.abort_transaction(Duration::from_secs(30)))
            .expect("abort_transaction");
        offsets
    }
}
