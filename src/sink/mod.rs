//! Sinks the auditor verifies against. A [`Verifier`] answers counting questions only; the
//! algorithms that turn counts into verdicts (range counts, bisection, key multiplicity) live
//! in [`crate::verify`] so they are tested without a database.

pub mod elasticsearch;
pub mod memory;
pub mod mysql;
pub mod sql;
pub mod stream_load;
pub mod tls;

use crate::config::{AuditConfig, SinkKind};
use crate::gap::{Offset, TopicPartition};
use crate::ledger::OffsetRun;
use crate::record::Key;
use anyhow::Context;
use elasticsearch::{ElasticsearchSink, EsAuth, EsTarget};
use memory::MemorySink;
use mysql::{MysqlSink, MysqlTarget};
use std::future::Future;
use std::sync::Arc;
use tls::TlsSettings;

/// Rows and distinct offsets found in a set of offset runs of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RangeCount {
    /// All matching rows (duplicates included).
    pub rows: u64,
    /// Distinct offsets among them.
    pub distinct: u64,
}

/// Why a sink question could not be answered. Every variant means "unknown", never
/// "missing"; the distinction only decides how loudly it is logged.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SinkError {
    /// Timeouts, refused connections, 5xx, 429: retried next round.
    #[error("sink unavailable: {0}")]
    Unavailable(String),
    /// The sink answered but refused the question (bad table, column, permissions): a
    /// configuration problem the operator must fix; retried too, in case they do.
    #[error("sink rejected the query: {0}")]
    Rejected(String),
}

/// Questions the auditor asks a sink. Implementations escape or bind every value.
pub trait Verifier: Send + Sync {
    /// Short name for logs and status (`doris`, `mysql`, `memory`).
    fn kind(&self) -> &'static str;

    /// The cheapest question the sink can answer: proves it is reachable in rounds where
    /// nothing was due (readiness, `sink_up`).
    fn ping(&self) -> impl Future<Output = Result<(), SinkError>> + Send;

    /// Rows and distinct offsets whose (topic,) partition and offset fall in `runs`
    /// (offset_columns strategy).
    fn count_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> impl Future<Output = Result<RangeCount, SinkError>> + Send;

    /// Each present offset within `runs` with its row count (offset_columns strategy; only
    /// called for small ranges).
    fn list_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> impl Future<Output = Result<Vec<(Offset, u64)>, SinkError>> + Send;

    /// Rows per key, aligned with `keys` (key_columns strategy). Keys are distinct.
    fn count_keys(&self, keys: &[&Key])
    -> impl Future<Output = Result<Vec<u64>, SinkError>> + Send;

    /// The most derived-key rows ([`sql::derived_rows`] per key) one [`Self::count_keys`]
    /// may carry: a bound the sink's query parser sets (Doris's expression limits), on top
    /// of `batch_size`. Unbounded by default.
    fn max_key_rows(&self) -> usize {
        usize::MAX
    }

    /// How many questions may be in flight at once (the sink's connection pool): key
    /// batches are counted this many at a time. One by default.
    fn parallelism(&self) -> usize {
        1
    }

    /// Whether a document exists with each id, aligned with `ids` (doc_id strategy). Ids are
    /// distinct. An id names at most one document of an index, so there are no duplicates
    /// to count. Sinks without document ids refuse the question.
    fn find_ids(&self, ids: &[&str]) -> impl Future<Output = Result<Vec<bool>, SinkError>> + Send {
        let _ = ids;
        let kind = self.kind();
        async move {
            Err(SinkError::Rejected(format!(
                "sink kind {kind} has no document ids: match.strategy doc_id needs elasticsearch"
            )))
        }
    }
}

/// Any sink the daemon can verify against.
pub enum AnySink {
    /// Doris or MySQL over the MySQL protocol.
    Mysql(MysqlSink),
    /// The in-process table (demo and tests).
    Memory(Arc<MemorySink>),
    /// Elasticsearch (or an API-compatible server) over HTTP.
    Elasticsearch(ElasticsearchSink),
}

impl Verifier for AnySink {
    fn kind(&self) -> &'static str {
        match self {
            AnySink::Mysql(s) => s.kind(),
            AnySink::Memory(s) => s.kind(),
            AnySink::Elasticsearch(s) => s.kind(),
        }
    }

    async fn ping(&self) -> Result<(), SinkError> {
        match self {
            AnySink::Mysql(s) => s.ping().await,
            AnySink::Memory(s) => s.ping().await,
            AnySink::Elasticsearch(s) => s.ping().await,
        }
    }

    async fn count_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<RangeCount, SinkError> {
        match self {
            AnySink::Mysql(s) => s.count_offsets(tp, runs).await,
            AnySink::Memory(s) => s.count_offsets(tp, runs).await,
            AnySink::Elasticsearch(s) => s.count_offsets(tp, runs).await,
        }
    }

    async fn list_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<Vec<(Offset, u64)>, SinkError> {
        match self {
            AnySink::Mysql(s) => s.list_offsets(tp, runs).await,
            AnySink::Memory(s) => s.list_offsets(tp, runs).await,
            AnySink::Elasticsearch(s) => s.list_offsets(tp, runs).await,
        }
    }

    async fn count_keys(&self, keys: &[&Key]) -> Result<Vec<u64>, SinkError> {
        match self {
            AnySink::Mysql(s) => s.count_keys(keys).await,
            AnySink::Memory(s) => s.count_keys(keys).await,
            AnySink::Elasticsearch(s) => s.count_keys(keys).await,
        }
    }

    fn max_key_rows(&self) -> usize {
        match self {
            AnySink::Mysql(s) => s.max_key_rows(),
            AnySink::Memory(s) => s.max_key_rows(),
            AnySink::Elasticsearch(s) => s.max_key_rows(),
        }
    }

    fn parallelism(&self) -> usize {
        match self {
            AnySink::Mysql(s) => s.parallelism(),
            AnySink::Memory(s) => s.parallelism(),
            AnySink::Elasticsearch(s) => s.parallelism(),
        }
    }

    async fn find_ids(&self, ids: &[&str]) -> Result<Vec<bool>, SinkError> {
        match self {
            AnySink::Mysql(s) => s.find_ids(ids).await,
            AnySink::Memory(s) => s.find_ids(ids).await,
            AnySink::Elasticsearch(s) => s.find_ids(ids).await,
        }
    }
}

/// Builds the sink of an audit. Connects lazily: an unreachable sink is "unknown" at run
/// time, not a startup failure.
pub fn build_sink(audit: &AuditConfig) -> anyhow::Result<AnySink> {
    let s = &audit.sink;
    match s.kind {
        SinkKind::Doris | SinkKind::Mysql => {
            let target = MysqlTarget {
                table: s.table.clone().unwrap_or_default(),
                partition_column: audit.matching.partition_column.clone(),
                offset_column: audit.matching.offset_column.clone(),
                topic_column: audit.matching.topic_column.clone(),
                key_columns: audit.matching.sink_columns().to_vec(),
            };
            let kind = if s.kind == SinkKind::Doris {
                "doris"
            } else {
                "mysql"
            };
            let password = s.password.as_ref().map(|p| p.expose().to_string());
            let sink = MysqlSink::new(
                s.url.expose(),
                s.username.as_deref(),
                password.as_deref(),
                target,
                s.query_timeout,
                kind,
                &TlsSettings::from_config(s),
            )
            .map_err(|e| anyhow::anyhow!("audits.{}.sink: {e}", audit.name))?;
            Ok(AnySink::Mysql(sink))
        }
        SinkKind::Elasticsearch => {
            let target = EsTarget {
                index: s.index.clone().unwrap_or_default(),
                partition_field: audit.matching.partition_column.clone(),
                offset_field: audit.matching.offset_column.clone(),
                topic_field: audit.matching.topic_column.clone(),
                key_fields: audit.matching.sink_columns().to_vec(),
            };
            let auth = match (&s.api_key, s.effective_username(), s.effective_password()) {
                (Some(k), _, _) => EsAuth::ApiKey(k.expose().to_string()),
                (None, Some(username), password) => EsAuth::Basic {
                    username,
                    password: password.map(|p| p.expose().to_string()).unwrap_or_default(),
                },
                (None, None, Some(_)) => anyhow::bail!(
                    "audits.{}.sink.password: a password needs a username (sink.username)",
                    audit.name
                ),
                (None, None, None) => EsAuth::None,
            };
            let ca = match &s.ca_file {
                Some(path) => Some(std::fs::read(path).with_context(|| {
                    format!(
                        "audits.{}.sink.ca_file: cannot read {}",
                        audit.name,
                        path.display()
                    )
                })?),
                None => None,
            };
            let sink = ElasticsearchSink::new(
                &s.url.without_credentials(),
                auth,
                ca.as_deref(),
                target,
                s.query_timeout,
            )
            .map_err(|e| anyhow::anyhow!("audits.{}.sink: {e}", audit.name))?;
            Ok(AnySink::Elasticsearch(sink))
        }
    }
}
