//! Shared test support: the real services started by `scripts/test-env.sh` (Apache Kafka
//! as the broker, MariaDB as the MySQL-protocol stand-in for Doris) and the fixtures
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
//! Every producer here sends ONE record per batch (flush after each) and the pipeline
//! stand-in "restarts from latest" by seeking to the end offset the test itself knows from
//! the producer's acknowledgements: needed on tansu, the broker before Apache Kafka (its
//! ListOffsets "latest" was wrong for multi-record batches), and still exact on Kafka.
//!
//! The stand-in writes its rows with prepared statements (binary protocol): independent of
//! the auditor's own literal escaping, so an escaping bug cannot cancel itself out.

#![allow(dead_code)]

// Each job in its own file under tests/support/; every binary that includes this file
// sees them all through the re-exports.
#[path = "../support/config_toml.rs"]
pub mod config_toml;
#[path = "../support/daemon.rs"]
mod daemon;
#[path = "../support/db.rs"]
mod db;
#[path = "../support/doris_fe.rs"]
pub mod doris_fe;
#[path = "../support/env.rs"]
mod env;
#[path = "../support/fixtures.rs"]
mod fixtures;
#[path = "../support/http.rs"]
mod http;
#[path = "../support/kafka.rs"]
mod kafka;
#[path = "../support/pipeline.rs"]
mod pipeline;

// A binary that uses nothing of one job would warn about its re-export.
#[allow(unused_imports)]
pub use {
    config_toml::{AuditToml, ConfigToml, SEED_FIELDS},
    daemon::*,
    db::*,
    env::*,
    fixtures::*,
    http::*,
    kafka::*,
    pipeline::*,
};
