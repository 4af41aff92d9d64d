//! gap-auditor: proves, record by record, that what a streaming pipeline read from Kafka
//! landed in its sink (Apache Doris over the MySQL protocol, or Elasticsearch), and names
//! exactly which offsets did not.
//!
//! The data flow, top-down:
//!
//! ```text
//!  kafka::tail      consume the audited topics with the auditor's own group
//!     │             (rebalance events + record batches over one channel)
//!  record           decode (csv | json | raw | avro | protobuf), filter, build the match
//!     │             key → Tag; held: records waiting for their schema (record::registry)
//!  ledger           per partition: runs of offsets pending → confirmed | missing | late;
//!     │             the due rule; gap merging; the settled watermark      (pure, no I/O)
//!  verify + sink    ask the sink about DUE records only: offset-range counts with
//!     │             bisection, or batched key counts; errors are "unknown", never "missing"
//!  store            persist gaps + progress (SQLite) BEFORE committing the settled offset
//!     │
//!  metrics / http   Prometheus families, /api/gaps, /api/status
//! ```
//!
//! Every step speaks the shared vocabulary of `types`: `Offset`, `TopicPartition`, `Key`
//! (only there: `gap::` and `record::` no longer re-export them).
//!
//! Threads and channels of `run`, one set per audit (`app` starts them, `audit` owns the
//! loop; `main.rs` is a thin CLI over it):
//!
//! ```text
//!  tail thread (OS thread, kafka::tail)          audit task (tokio, audit/)
//!  ┌───────────────────────────────┐  TailEvent  ┌───────────────────────────────────┐
//!  │ poll librdkafka, decode + tag │ ──────────▶ │ ingest → ledgers, key book        │
//!  │ (record), rebalance callbacks │  bounded 16 │ round: due → verify (sink pool)   │
//!  │                               │ ◀────────── │ persist: store → handover → commit│
//!  │ assign at starts, commit,     │  Command    │ pipeline group, retention, report │
//!  │ pause/resume (Flow atomics)   │  (std mpsc) │ answers rebalances (oneshot)      │
//!  └───────────────────────────────┘             └───────────────────────────────────┘
//!         ▲ schema cache (read-only)                  │ blocking pool: SQLite, lookups
//!  registry fetcher task (record::registry) ◀── want(id) ┘ metrics ─▶ http task (/metrics, /api)
//! ```
//!
//! Shutdown is one `CancellationToken`: the audit task drains its round, persists, commits
//! the settled watermark through the tail thread and ends the event channel; the thread
//! exits after it.

/// The git revision this binary was built from (`build.rs`: `git rev-parse --short=12`,
/// else the `GAP_AUDITOR_GIT_REV` build variable, else `unknown`).
pub const REVISION: &str = env!("GAP_AUDITOR_REVISION");

/// Whether the binary embeds its dependency list (an SBOM): `cargo-auditable` when it was
/// built with `cargo auditable build` (the container image is), else `none` (`build.rs`).
pub const SBOM: &str = env!("GAP_AUDITOR_SBOM");

/// `gap-auditor --version`: the crate version, the revision and whether an SBOM is
/// embedded, `0.1.0 (rev 1a2b3c4d5e6f; SBOM: cargo-auditable)`.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (rev ",
    env!("GAP_AUDITOR_REVISION"),
    "; SBOM: ",
    env!("GAP_AUDITOR_SBOM"),
    ")"
);

// The commands besides the daemon (check, replay, wait, demo).
pub mod commands;

// The daemon: `app` starts one audit loop per audit (`audit`, with its daemon-only steps:
// held records, the coverage check), and what the loops share with the HTTP server.
pub mod app;
pub mod audit;
pub mod completeness;
pub mod handover;
pub mod memory;
pub mod status;

// The outside world: configuration, Kafka, the sink, the store, what the pipeline itself
// says (evidence, Doris's own position and loads), and what the daemon serves.
pub mod config;
pub mod doris_fe;
pub mod evidence;
pub mod http;
pub mod kafka;
pub mod logging;
pub mod metrics;
pub mod routine_load;
pub mod sink;
pub mod store;

// The core, no I/O: the vocabulary, decoding and tagging, the ledger and its due rule, the
// checker's plan, a closed range decided once, and the values the sink's model needs.
pub mod clock;
pub mod closed_range;
pub mod dead_letters;
pub mod gap;
pub mod key_domain;
pub mod key_semantics;
pub mod ledger;
pub mod record;
pub mod template;
pub mod time_scan;
pub mod types;
pub mod verify;

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod test_seed;
