//! Sinks the auditor verifies against. A [`Verifier`] answers counting questions only; the
//! algorithms that turn counts into verdicts (range counts, bisection, key multiplicity) live
//! in [`crate::verify`] so they are tested without a database.

pub mod elasticsearch;
pub mod memory;
pub mod mysql;
pub mod sql;
pub mod stream_load;
pub mod tls;

use crate::gap::{Offset, TopicPartition};
use crate::ledger::OffsetRun;
use crate::record::Key;
use std::future::Future;

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
