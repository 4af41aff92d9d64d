//! librdkafka configuration shared by every client the auditor creates.

use crate::config::KafkaConfig;
use rdkafka::ClientConfig;

/// The base configuration: brokers, the user's pass-through properties (SASL, SSL,
/// tuning, ...), and settings the auditor's correctness depends on, which the user cannot
/// override (config validation refuses them).
pub fn base(kafka: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &kafka.brokers);
    // The values in effect, whether they came from the dedicated keys or the properties.
    // Under KIP-848's protocol the broker sets both (group.consumer.* configs), and
    // librdkafka refuses a consumer that names them.
    if !kafka.consumer_group_protocol() {
        c.set("session.timeout.ms", millis(kafka.session_timeout()));
        c.set("heartbeat.interval.ms", millis(kafka.heartbeat_interval()));
    }
    for (k, v) in &kafka.properties {
        // `statistics.interval.ms` is set by the tailing consumer only: the other clients
        // have no statistics handler, and rdkafka's default one logs every report.
        if !KafkaConfig::is_timing_property(k) {
            c.set(k, v.expose());
        }
    }
    c
}

/// librdkafka's prefetch queue unless `kafka.properties` sets `queued.max.messages.kbytes`:
/// twice a fetch of four partitions (see [`consumer`]).
pub const PREFETCH_KBYTES: &str = "8192";

/// librdkafka's wait before it fetches again for a partition whose local queue is full
/// enough, unless `kafka.properties` sets `fetch.queue.backoff.ms` (see [`consumer`]).
pub const FETCH_QUEUE_BACKOFF_MS: &str = "5";

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
        c.set("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS);
    }
    // Another: librdkafka prefetches up to 64 MiB per consumer by default, memory a sidecar
    // beside the pipeline holds for nothing once it keeps up, and memory that follows the
    // load: with 16 MiB, a total loss on a loaded machine rose from 92 to 106 MiB each time
    // the audit fell behind (keys_total_loss), with 4 MiB it stayed within +4 %. But a
    // queue no larger than one fetch (1 MiB per partition, 4 here) leaves the fetcher idle
    // while the queue drains below it and the next fetch is in flight: on a machine where
    // the bare consumer reads 2.3 M rec/s the tail read 0.78-0.87 of it with 4 MiB, 1.04-1.08
    // with 8 MiB (`bench --only tail`, same runs), as much as with librdkafka's 64 MiB.
    if !kafka.properties.contains_key("queued.max.messages.kbytes") {
        c.set("queued.max.messages.kbytes", PREFETCH_KBYTES);
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

#[cfg(test)]
mod tests;

/// The librdkafka linked in offers what secured clusters need: Kerberos (GSSAPI, through
/// Cyrus SASL) and OIDC (`sasl.oauthbearer.method=oidc`, through libcurl). A build that
/// drops either does so silently (librdkafka's build probes and disables), so these fail
/// instead. No KDC or OIDC provider is contacted: clients are only created.
#[cfg(all(test, feature = "kerberos-oidc"))]
mod build_features {
    use super::base;
    use crate::config::Config;
    use rdkafka::ClientConfig;
    use rdkafka::consumer::BaseConsumer;

    fn with_properties(props: &str) -> ClientConfig {
        let toml = format!(
            "[kafka]\nbrokers = \"127.0.0.1:1\"\n[kafka.properties]\n{props}\n\
             [[audits]]\nname = \"a\"\ntopics = [\"t\"]\n[audits.record]\nformat = \"raw\"\n\
             fields = [\"v\"]\n[audits.match]\nstrategy = \"key_columns\"\nkey = [\"v\"]\n\
             [audits.sink]\nkind = \"mysql\"\nurl = \"mysql://u@127.0.0.1:3306/db\"\ntable = \"t\"\n"
        );
        let cfg = Config::from_toml_str(&toml).expect("config");
        base(&cfg.kafka)
    }

    fn create(c: &ClientConfig) -> Result<(), String> {
        c.create::<BaseConsumer>()
            .map(drop)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn builtin_features_list_kerberos_and_oidc() {
        let n = ClientConfig::new().create_native_config().expect("config");
        let features = n.get("builtin.features").expect("builtin.features");
        let have: Vec<&str> = features.split(',').collect();
        for f in [
            "ssl",
            "sasl_plain",
            "sasl_scram",
            "sasl_gssapi",
            "sasl_oauthbearer",
            "http",
            "oidc",
            "zstd",
        ] {
            assert!(
                have.contains(&f),
                "librdkafka built without {f}: {features}"
            );
        }
    }

    #[test]
    fn a_kerberos_client_can_be_created() {
        // min.time.before.relogin = 0: no kinit at creation (no keytab here).
        let c = with_properties(
            "\"security.protocol\" = \"SASL_PLAINTEXT\"\n\"sasl.mechanisms\" = \"GSSAPI\"\n\
             \"sasl.kerberos.service.name\" = \"kafka\"\n\
             \"sasl.kerberos.min.time.before.relogin\" = \"0\"\n",
        );
        create(&c).expect("a GSSAPI client");
    }

    #[test]
    fn an_oidc_client_can_be_created() {
        let c = with_properties(
            "\"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanisms\" = \"OAUTHBEARER\"\n\
             \"sasl.oauthbearer.method\" = \"oidc\"\n\
             \"sasl.oauthbearer.client.id\" = \"gap-auditor\"\n\
             \"sasl.oauthbearer.client.secret\" = \"s\"\n\
             \"sasl.oauthbearer.token.endpoint.url\" = \"http://127.0.0.1:1/token\"\n",
        );
        create(&c).expect("an OIDC client");
    }
}
