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
