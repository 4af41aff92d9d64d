//! The environment of the test services: broker and MySQL addresses, unique names.

use std::sync::atomic::{AtomicU32, Ordering};

/// A broker address that replaces `GAP_AUDITOR_TEST_KAFKA` for the whole test binary: set
/// (once, before any client is made) by a binary that runs its own private broker.
pub static KAFKA_OVERRIDE: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Where a service variable is missing: run the whole suite, and gate a new binary.
const NOT_SET: &str = "run scripts/test.sh (it starts Apache Kafka, MariaDB and OpenSearch); \
     a test binary that needs the services has `required-features = [\"services\"]` in \
     Cargo.toml";

/// Address of the test broker. Fails loudly: these tests need the real services.
pub fn kafka() -> String {
    if let Some(k) = KAFKA_OVERRIDE.get() {
        return k.clone();
    }
    std::env::var("GAP_AUDITOR_TEST_KAFKA")
        .unwrap_or_else(|_| panic!("GAP_AUDITOR_TEST_KAFKA is not set: {NOT_SET}"))
}

/// URL of the test MariaDB database.
pub fn mysql_url() -> String {
    std::env::var("GAP_AUDITOR_TEST_MYSQL")
        .unwrap_or_else(|_| panic!("GAP_AUDITOR_TEST_MYSQL is not set: {NOT_SET}"))
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
