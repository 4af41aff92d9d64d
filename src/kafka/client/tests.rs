use super::*;
use crate::config::Config;

const CONFIG: &str = r#"
[kafka]
brokers = "127.0.0.1:1"
[kafka.properties]
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"
"statistics.interval.ms" = "250"
"fetch.max.bytes" = "1048576"
"fetch.queue.backoff.ms" = "50"

[[audits]]
name = "a"
topics = ["t"]
[audits.record]
format = "raw"
fields = ["v"]
[audits.match]
strategy = "key_columns"
key = ["v"]
[audits.sink]
kind = "mysql"
url = "mysql://u@127.0.0.1:3306/db"
table = "t"
"#;

/// librdkafka's own view of a configuration: what `rd_kafka_conf_get` answers after
/// every property went through `rd_kafka_conf_set` (an unknown or out-of-range one
/// fails here, as it would when the client is created).
fn native(c: &ClientConfig, key: &str) -> String {
    match c.create_native_config() {
        Ok(n) => n.get(key).unwrap_or_else(|e| panic!("{key}: {e}")),
        Err(e) => panic!("librdkafka refused the configuration: {e}"),
    }
}

#[test]
fn tuning_properties_reach_librdkafka() {
    let cfg = Config::from_toml_str(CONFIG).expect("config");
    let c = tailing_consumer(&cfg.kafka, "g");
    assert_eq!(native(&c, "session.timeout.ms"), "6000");
    assert_eq!(native(&c, "heartbeat.interval.ms"), "500");
    assert_eq!(native(&c, "fetch.max.bytes"), "1048576");
    assert_eq!(
        native(&c, "fetch.queue.backoff.ms"),
        "50",
        "the user's value wins"
    );
    // Managed ones keep the auditor's values.
    assert_eq!(native(&c, "enable.auto.commit"), "false");
    assert_eq!(native(&c, "auto.offset.reset"), "error");
    assert_eq!(native(&c, "group.id"), "g");
    // The auditor's tuning defaults, where the user set none.
    assert_eq!(native(&c, "queued.max.messages.kbytes"), PREFETCH_KBYTES);
    // Only the tailing consumer reports statistics (crate::kafka::tail sets it).
    assert_eq!(native(&base(&cfg.kafka), "statistics.interval.ms"), "0");
}

#[test]
fn dedicated_keys_reach_librdkafka() {
    let toml = CONFIG
        .replace("\"session.timeout.ms\" = \"6000\"\n", "")
        .replace("\"heartbeat.interval.ms\" = \"500\"\n", "")
        .replace(
            "brokers = \"127.0.0.1:1\"\n",
            "brokers = \"127.0.0.1:1\"\nsession_timeout = \"7s\"\nheartbeat_interval = \"700ms\"\n",
        );
    let cfg = Config::from_toml_str(&toml).expect("config");
    let c = consumer(&cfg.kafka, "g");
    assert_eq!(native(&c, "session.timeout.ms"), "7000");
    assert_eq!(native(&c, "heartbeat.interval.ms"), "700");
}
