//! Sinks the auditor verifies against. A [`Verifier`] answers counting questions only; the
//! algorithms that turn counts into verdicts (range counts, bisection, key multiplicity) live
//! in [`crate::verify`] so they are tested without a database.

pub mod elasticsearch;
pub mod memory;
pub mod mysql;
pub mod sql;
pub mod stream_load;
pub mod tls;

use crate::config::{EsAuthSpec, Secret, SecretSource, SinkSpec, SqlTls};
use crate::key_domain::KeyDomain;
use crate::ledger::OffsetRun;
use crate::time_scan::{TimeColumn, TimeRange};
use crate::types::{Key, Offset, TopicPartition};
use anyhow::Context;
use elasticsearch::{ElasticsearchSink, EsAuth, EsTarget};
use memory::MemorySink;
use mysql::{MysqlSink, MysqlTarget};
use std::future::Future;
use std::sync::Arc;
use tls::TlsSettings;

/// What an offset_columns table without a topic column holds, at a glance: the smallest
/// and largest partition of any row, and the largest offset on each partition asked for
/// (`None`: no row). Rows a topic cannot have (a partition it does not have, an offset at
/// or beyond its log end) were written by another topic ([`Verifier::offset_extent`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetExtent {
    /// (smallest, largest) partition of any row; `None` for an empty table.
    pub partitions: Option<(i64, i64)>,
    /// Largest offset per partition asked for.
    pub max_offsets: Vec<(i32, Option<Offset>)>,
}

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

    /// key_columns: how the sink stores each key column's values (type, precision, scale,
    /// collation, the server's fraction rule), read from the sink; the audit takes it at
    /// start and writes every key in it ([`crate::key_domain`]). `Ok(None)` where nothing
    /// is converted (no key columns; the memory sink and Elasticsearch compare as sent).
    fn key_domain(&self) -> impl Future<Output = Result<Option<KeyDomain>, SinkError>> + Send {
        async { Ok(None) }
    }

    /// key_columns: whether the table merges rows with equal keys (SPEC "The sink's model",
    /// [`crate::key_semantics`]), read at start. `Ok(None)` where the sink does not say (the
    /// memory sink, Elasticsearch): the configured value holds, `auto` being multiset.
    fn key_model(
        &self,
    ) -> impl Future<Output = Result<Option<crate::key_semantics::Learned>, SinkError>> + Send {
        async { Ok(None) }
    }

    /// key_columns: the key semantics the audit decided on ([`Self::key_model`] reconciled
    /// with the configuration), which the key counts follow from then on: a table that
    /// merges rows compares keys as it merges them. A no-op where the sink compares as sent.
    fn audit_semantics(&self, _semantics: crate::key_semantics::KeySemantics) {}

    /// Rows and distinct offsets whose (topic,) partition and offset fall in `runs`
    /// (offset_columns strategy).
    fn count_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> impl Future<Output = Result<RangeCount, SinkError>> + Send;

    /// offset_columns without a topic column: the table's [`OffsetExtent`] over
    /// `partitions` (the audited topic's), read once at start to see rows another topic
    /// wrote. `Ok(None)` where the sink does not say (a topic column is set, or the sink
    /// cannot answer it cheaply).
    fn offset_extent(
        &self,
        _partitions: &[i32],
    ) -> impl Future<Output = Result<Option<OffsetExtent>, SinkError>> + Send {
        async { Ok(None) }
    }

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

    /// key_columns: the key column whose rows the sink keeps in time order, read at start
    /// ([`crate::time_scan`]): a round then counts its due keys from the rows of their
    /// seconds ([`Self::count_keys_in_time`]). `Ok(Err(why))` when it cannot (no such
    /// column, no index starting with it, a key column compared otherwise than by its
    /// text): every key is counted by [`Self::count_keys`].
    fn time_scan(
        &self,
    ) -> impl Future<Output = Result<Result<TimeColumn, String>, SinkError>> + Send {
        let kind = self.kind();
        async move { Ok(Err(format!("a {kind} sink is not read by time"))) }
    }

    /// Rows per key, aligned with `keys` and counted as [`Self::count_keys`] counts them,
    /// read from every row whose `column` value lies in `ranges` (each key's own time lies
    /// in one of them). A key listed twice (due on two partitions) gets its count at each
    /// place. `Ok(None)` when the keys were not counted: more than `limit` rows
    /// lie there, or the table can no longer be read by time (an index dropped since):
    /// they are then counted by key.
    fn count_keys_in_time(
        &self,
        column: &TimeColumn,
        ranges: &[TimeRange],
        keys: &[&Key],
        limit: u64,
    ) -> impl Future<Output = Result<Option<Vec<u64>>, SinkError>> + Send {
        let _ = (column, ranges, keys, limit);
        async { Ok(None) }
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

    async fn key_model(&self) -> Result<Option<crate::key_semantics::Learned>, SinkError> {
        match self {
            AnySink::Mysql(s) => s.key_model().await,
            AnySink::Memory(s) => s.key_model().await,
            AnySink::Elasticsearch(s) => s.key_model().await,
        }
    }

    fn audit_semantics(&self, semantics: crate::key_semantics::KeySemantics) {
        match self {
            AnySink::Mysql(s) => s.audit_semantics(semantics),
            AnySink::Memory(s) => s.audit_semantics(semantics),
            AnySink::Elasticsearch(s) => s.audit_semantics(semantics),
        }
    }

    async fn offset_extent(&self, partitions: &[i32]) -> Result<Option<OffsetExtent>, SinkError> {
        match self {
            AnySink::Mysql(s) => s.offset_extent(partitions).await,
            AnySink::Memory(s) => s.offset_extent(partitions).await,
            AnySink::Elasticsearch(s) => s.offset_extent(partitions).await,
        }
    }

    async fn key_domain(&self) -> Result<Option<KeyDomain>, SinkError> {
        match self {
            AnySink::Mysql(s) => s.key_domain().await,
            AnySink::Memory(s) => s.key_domain().await,
            AnySink::Elasticsearch(s) => s.key_domain().await,
        }
    }

    async fn time_scan(&self) -> Result<Result<TimeColumn, String>, SinkError> {
        match self {
            AnySink::Mysql(s) => s.time_scan().await,
            AnySink::Memory(s) => s.time_scan().await,
            AnySink::Elasticsearch(s) => s.time_scan().await,
        }
    }

    async fn count_keys_in_time(
        &self,
        column: &TimeColumn,
        ranges: &[TimeRange],
        keys: &[&Key],
        limit: u64,
    ) -> Result<Option<Vec<u64>>, SinkError> {
        match self {
            AnySink::Mysql(s) => s.count_keys_in_time(column, ranges, keys, limit).await,
            AnySink::Memory(s) => s.count_keys_in_time(column, ranges, keys, limit).await,
            AnySink::Elasticsearch(s) => s.count_keys_in_time(column, ranges, keys, limit).await,
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

/// Builds the sink of audit `audit` from its validated spec ([`crate::config::Validated`]).
/// Connects lazily: an unreachable sink is "unknown" at run time, not a startup failure. What
/// can still fail here is what validation cannot see: files (CA bundle, client identity, a
/// secret file of a config that was never loaded) and the clients' own URL parsing.
pub fn build_sink(audit: &str, spec: &SinkSpec) -> anyhow::Result<AnySink> {
    match spec {
        SinkSpec::Sql(s) => {
            let target = MysqlTarget {
                table: s.table.clone(),
                columns: s.columns.clone(),
            };
            let password = s.password.as_ref().map(SecretSource::read).transpose()?;
            let sink = MysqlSink::new(
                s.url.expose(),
                s.username.as_deref(),
                password.as_ref().map(Secret::expose),
                target,
                s.query_timeout,
                s.kind.as_str(),
                &TlsSettings::from(&s.tls),
            )
            .map_err(|e| anyhow::anyhow!("audits.{audit}.sink: {e}"))?;
            Ok(AnySink::Mysql(sink))
        }
        SinkSpec::Elasticsearch(s) => {
            let target = EsTarget {
                index: s.index.clone(),
                columns: s.columns.clone(),
            };
            let auth = match &s.auth {
                EsAuthSpec::None => EsAuth::None,
                EsAuthSpec::ApiKey(key) => EsAuth::ApiKey(key.read()?.expose().to_string()),
                EsAuthSpec::Basic { username, password } => EsAuth::Basic {
                    username: username.clone(),
                    // A user without a password sends an empty one.
                    password: match password {
                        Some(p) => p.read()?.expose().to_string(),
                        None => String::new(),
                    },
                },
            };
            let ca = match &s.ca_file {
                Some(path) => Some(std::fs::read(path).with_context(|| {
                    format!(
                        "audits.{audit}.sink.ca_file: cannot read {}",
                        path.display()
                    )
                })?),
                None => None,
            };
            let sink = ElasticsearchSink::new(&s.url, auth, ca.as_deref(), target, s.query_timeout)
                .map_err(|e| anyhow::anyhow!("audits.{audit}.sink: {e}"))?;
            Ok(AnySink::Elasticsearch(sink))
        }
    }
}

impl From<&SqlTls> for TlsSettings {
    fn from(tls: &SqlTls) -> Self {
        Self {
            mode: tls.mode,
            ca_file: tls.ca_file.clone(),
            identity_file: tls.client_identity_file.clone(),
            identity_password: tls
                .client_identity_password
                .as_ref()
                .map(|p| p.expose().to_string()),
        }
    }
}
