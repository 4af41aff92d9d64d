//! librdkafka configuration shared by every client the auditor creates.

use crate::config::KafkaConfig;
use rdkafka::ClientConfig;

/// The base configuration: brokers, the user's pass-through properties (SASL, SSL, ...),
/// and settings the auditor's correctness depends on, which the user cannot override.
pub fn base(kafka: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &kafka.brokers);
    c.set("session.timeout.ms", millis(kafka.session_timeout));
    c.set("heartbeat.interval.ms", millis(kafka.heartbeat_interval));
    for (k, v) in &kafka.properties {
        c.set(k, v.expose());
    }
    c
}

/// A consumer configuration for `group`, with offsets moved only by explicit commits.
pub fn consumer(kafka: &KafkaConfig, group: &str) -> ClientConfig {
    let mut c = base(kafka);
    c.set("group.id", group);
    // Offsets move only on proof: the audit commits the settled watermark itself.
    c.set("enable.auto.commit", "false");
    c.set("enable.auto.offset.store", "false");
    c.set("isolation.level", kafka.isolation_level.as_librdkafka());
    // An explicit start offset is always assigned; when it is out of range anyway (topic
    // recreated), re-reading is safe and skipping is not.
    c.set("auto.offset.reset", "earliest");
    // A tuning default the user may override: librdkafka stops fetching a partition whose
    // local queue is over `queued.min.messages` and looks again only after this backoff
    // (1 s by default). A consumer doing real work per record (decode, key building) keeps
    // tripping that threshold and then idles for the whole second: measured 3-4x slower
    // tailing on the benchmark topic. 5 ms keeps the fetcher just ahead of us.
    if !kafka.properties.contains_key("fetch.queue.backoff.ms") {
        c.set("fetch.queue.backoff.ms", "5");
    }
    // Another: librdkafka prefetches up to 64 MiB per consumer by default, memory a sidecar
    // beside the pipeline holds for nothing once it keeps up (a fetch is 1 MiB per
    // partition); 16 MiB still keeps many partitions' fetches in flight.
    if !kafka.properties.contains_key("queued.max.messages.kbytes") {
        c.set("queued.max.messages.kbytes", "16384");
    }
    c
}

/// The tailing consumer's configuration: like [`consumer`], but an out-of-range position is
/// an ERROR the audit handles, never a silent jump. A position falls out of range when Kafka
/// retention deletes records the auditor has not read yet (it lagged or was paused); jumping
/// to the log start would make the deleted records look like offset holes.
pub fn tailing_consumer(kafka: &KafkaConfig, group: &str) -> ClientConfig {
    let mut c = consumer(kafka, group);
    c.set("auto.offset.reset", "error");
    c
}

fn millis(d: std::time::Duration) -> String {
    d.as_millis().max(1).to_string()
}
