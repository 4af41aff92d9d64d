//! The embedded gap store: every gap ever detected and each partition's audit progress, in
//! one SQLite file (`<state.path>/gaps.sqlite`).
//!
//! Why SQLite rather than a pure-Rust embedded store such as redb:
//!
//! - **Several processes share the file.** The daemon writes it while short-lived CLI
//!   commands (`gap-auditor gaps`, `gap-auditor ack`) read and update the same file. SQLite
//!   in WAL mode gives one writer plus any number of readers across processes, with a busy
//!   timeout for the rare write/write overlap; redb takes an exclusive file lock, so the CLI
//!   could not run while the daemon does. Within the daemon, `/api/gaps` reads through
//!   read-only connections of its own ([`GapReader`]), never the one the rounds write through.
//! - **Atomic rounds.** A verify round's gaps and the partition progress (settled
//!   watermark and ledger state) go in one transaction, so after a crash the store never
//!   holds a watermark that skips past a gap it does not also hold. The auditor commits
//!   its Kafka offset only after that transaction is durable (`synchronous = FULL`).
//! - **Operators can look inside** with the stock `sqlite3` shell during an incident.
//!
//! Timestamps are stored as RFC 3339 UTC text with exactly nine fractional digits
//! (`2024-05-01T12:00:00.000000000Z`): readable in the sqlite3 shell, lossless for
//! `DateTime<Utc>`, and of fixed width so text order is time order (`ORDER BY
//! detected_at` and `MIN()` work on the column directly).
//!
//! The schema version lives in `PRAGMA user_version`; [`Store::open`] migrates forward and
//! refuses a file written by a newer binary instead of misreading it.

use crate::gap::GapState;
use crate::types::Offset;
use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::{Connection, TransactionBehavior};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

mod acks;
mod checkpoint;
mod gaps;
mod items;
mod key_chunk;
mod keys;
mod listing;
mod progress;
mod replays;
mod retired;
mod schema;

pub use keys::{KeyClaims, StoredKeys};
pub use listing::{GapCursor, GapPage, GapReader, MAX_PAGE};
pub use replays::ReplayRecord;
pub use retired::{ImportMark, Importing, PartitionChunks};
use schema::{SCHEMA_VERSION, migrate};
// The tests build files of older versions from the same batches.
#[cfg(test)]
use schema::{
    SCHEMA_V1, SCHEMA_V2, SCHEMA_V3, SCHEMA_V4, SCHEMA_V5, SCHEMA_V6, SCHEMA_V7, SCHEMA_V8,
    SCHEMA_V9, SCHEMA_V10,
};

/// File name of the store inside the state directory.
pub const DB_FILE: &str = "gaps.sqlite";

/// How long a statement waits for another process's write lock before failing. The daemon's
/// round transactions are short; 5 s covers an fsync on a slow disk with a wide margin.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Every gap state, to turn [`StateFilter::Unresolved`] into a SQL `IN` list without
/// duplicating the rule of [`GapState::is_unresolved`].
const ALL_STATES: [GapState; 7] = [
    GapState::Open,
    GapState::Late,
    GapState::Repaired,
    GapState::Unrecoverable,
    GapState::Unverifiable,
    GapState::Acknowledged,
    GapState::DeadLettered,
];

/// Errors of the gap store. Each names the database file (and the gap id where one is
/// involved) so an operator can find what failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A store call panicked (caught by the caller, so nothing it carried is lost).
    #[error("gap store write panicked: {0}")]
    Panicked(String),
    /// Nothing written: an operator acknowledged gaps (`ids`) the round folded into an
    /// overflow gap, after the round read the acknowledgements. The overflow gap must not
    /// count their records; the caller takes them out of it and writes again.
    #[error("gaps folded by this round were acknowledged meanwhile: {}", ids.join(", "))]
    FoldedAcknowledged {
        /// The acknowledged gaps.
        ids: Vec<String>,
    },
    /// `ack` of a gap whose records reached the sink after all (`late`, `repaired`): there
    /// is nothing to acknowledge, and overwriting the state would hide that they arrived.
    #[error("gap {id} is {state}: its records reached the sink, there is nothing to acknowledge")]
    Resolved {
        /// The gap.
        id: String,
        /// Its state as stored.
        state: String,
    },
    /// The state directory could not be created.
    #[error("cannot create state directory {path}: {source}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A SQLite call failed; `context` says which operation.
    #[error("gap store {path}: {context}: {source}")]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// What the store was doing.
        context: String,
        /// The SQLite error.
        source: rusqlite::Error,
    },
    /// The file was written by a newer gap-auditor with a schema this binary does not know.
    #[error(
        "gap store {path} has schema version {found}, this binary supports up to {supported}; \
         upgrade gap-auditor"
    )]
    SchemaTooNew {
        /// The database file.
        path: PathBuf,
        /// `PRAGMA user_version` found in the file.
        found: i32,
        /// Highest version this binary understands.
        supported: i32,
    },
    /// The thread that checkpoints the WAL could not be started.
    #[error("gap store {path}: cannot start the checkpoint thread: {source}")]
    CheckpointThread {
        /// The database file.
        path: PathBuf,
        /// Why the thread did not start.
        source: std::io::Error,
    },
    /// SQLite refused WAL mode (e.g. the directory is on a network filesystem without
    /// shared-memory support); without it the CLI and the daemon would block each other.
    #[error("gap store {path}: cannot enable WAL journal mode (got {mode:?})")]
    NoWal {
        /// The database file.
        path: PathBuf,
        /// The journal mode SQLite reported.
        mode: String,
    },
    /// A stored value could not be decoded or a value does not fit the schema.
    #[error("gap store {path}: {what}")]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What is wrong, naming the gap id or partition.
        what: String,
    },
}

/// Persisted progress of one partition of one audit: where the auditor resumes after a
/// restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionProgress {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Settled watermark: every expected record below it is confirmed or in a stored gap.
    pub settled: Offset,
    /// Opaque persisted ledger state of the partition (owned by the ledger). Its `missing`
    /// and `gaps` arrays are stored one row per item; the rest as TEXT. Written whole
    /// (replacing every stored item) unless `items` is set.
    pub ledger: serde_json::Value,
    /// When this row was last written.
    pub updated_at: DateTime<Utc>,
    /// A delta instead of a whole ledger: `ledger` then holds no `missing`/`gaps` arrays,
    /// and only these items change. Never set by [`Store::load_progress`].
    #[serde(skip)]
    pub items: Option<LedgerItems>,
}

/// One audit's stored progress as [`Store::load_progress_checked`] read it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StoredProgress {
    /// The partitions whose settled offset could be read, with every readable item.
    pub rows: Vec<PartitionProgress>,
    /// What could not be read, per partition (a partition may have several).
    pub problems: Vec<ProgressProblem>,
}

/// Something of one partition's stored progress that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgressProblem {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// What is wrong and what was done about it.
    pub what: String,
}

/// Changed items of a partition's ledger, by first offset, as JSON text; `None` deletes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LedgerItems {
    /// Missing runs.
    pub missing: Vec<(Offset, Option<String>)>,
    /// Ledger gaps.
    pub gaps: Vec<(Offset, Option<String>)>,
}

/// Which gap states [`Store::list_gaps`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StateFilter {
    /// `open`: gaps that still need an operator ([`GapState::is_unresolved`]).
    Unresolved,
    /// `all`: every gap.
    All,
    /// Exactly one state.
    Only(GapState),
}

impl StateFilter {
    /// Parses the `--state` / `?state=` value: `open` (unresolved), `all`, or any state name.
    /// Note `open` means "unresolved" (open or unrecoverable), the operator's meaning.
    pub fn parse(s: &str) -> Option<StateFilter> {
        match s {
            "open" => Some(StateFilter::Unresolved),
            "all" => Some(StateFilter::All),
            other => GapState::parse(other).map(StateFilter::Only),
        }
    }

    /// The `--state` / `?state=` value that parses back to this filter (every filter
    /// [`StateFilter::parse`] returns; it never returns `Only(Open)`, which has no name).
    pub fn as_str(self) -> &'static str {
        match self {
            StateFilter::Unresolved => "open",
            StateFilter::All => "all",
            StateFilter::Only(s) => s.as_str(),
        }
    }

    /// Whether a gap in `state` passes this filter.
    pub fn matches(self, state: GapState) -> bool {
        match self {
            StateFilter::Unresolved => state.is_unresolved(),
            StateFilter::All => true,
            StateFilter::Only(s) => s == state,
        }
    }
}

/// Filter for [`Store::list_gaps`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GapFilter {
    /// Which states.
    pub state: StateFilter,
    /// Only this audit, when set.
    pub audit: Option<String>,
}

impl Default for GapFilter {
    /// Unresolved gaps of every audit: what `gaps` and `/api/gaps` show without options.
    fn default() -> Self {
        GapFilter {
            state: StateFilter::Unresolved,
            audit: None,
        }
    }
}

/// The gap store. One SQLite connection behind a mutex: rounds are serialized anyway, and
/// a single connection keeps the write path simple. `Send + Sync`, share it in an `Arc`.
pub struct Store {
    conn: Mutex<Connection>,
    path: PathBuf,
    /// Set by [`Store::checkpoint_in_background`] (the daemon).
    checkpointer: OnceLock<checkpoint::Checkpointer>,
    /// Set once the checkpoint thread was found stopped (see `checkpoint_soon`).
    checkpoint_fallback: AtomicBool,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens the store in `dir` (creating the directory and `gaps.sqlite` inside it) with
    /// WAL journaling, a 5 s busy timeout and `synchronous = FULL` — a commit must survive
    /// `kill -9` and power loss before the auditor commits its Kafka offsets — and migrates
    /// the schema (versioned with `PRAGMA user_version`).
    pub fn open(dir: &Path) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join(DB_FILE);
        let sq = |context: &str| {
            let path = path.clone();
            let context = context.to_string();
            move |source| StoreError::Sqlite {
                path,
                context,
                source,
            }
        };

        let mut conn = Connection::open(&path).map_err(sq("open"))?;
        // Set first: the pragmas and the migration below may meet another process's lock.
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(sq("set busy_timeout"))?;
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(sq("set journal_mode=WAL"))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::NoWal { path, mode });
        }
        // FULL fsyncs the WAL at every commit. NORMAL, the usual WAL setting, may lose the
        // last commits on power loss; the settled watermark is committed to Kafka right after
        // a round, so a lost round would make the auditor skip records after a restart.
        conn.pragma_update(None, "synchronous", "FULL")
            .map_err(sq("set synchronous=FULL"))?;

        // IMMEDIATE: two processes starting on a fresh file must not both run the migration.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sq("begin migration"))?;
        let version: i32 = tx
            .pragma_query_value(None, "user_version", |row| row.get(0))
            .map_err(sq("read user_version"))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew {
                path,
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        migrate(&tx, &path, version)?;
        if version != SCHEMA_VERSION {
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(sq("write user_version"))?;
        }
        tx.commit().map_err(sq("commit migration"))?;

        Ok(Store {
            conn: Mutex::new(conn),
            path,
            checkpointer: OnceLock::new(),
            checkpoint_fallback: AtomicBool::new(false),
        })
    }

    /// From now on this connection does not checkpoint the WAL itself: a thread with a
    /// connection of its own does, after every round committed
    /// ([`Self::commit_round_with_keys`]), so that rounds do not wait for it (see
    /// checkpoint.rs). For the daemon; short-lived commands keep SQLite's automatic
    /// checkpoint. Calling it again changes nothing.
    pub fn checkpoint_in_background(&self) -> Result<(), StoreError> {
        if self.checkpointer.get().is_some() {
            return Ok(());
        }
        let c = checkpoint::Checkpointer::start(&self.path)?;
        self.lock()
            .pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(self.sq("set wal_autocheckpoint=0".into()))?;
        let _ = self.checkpointer.set(c);
        Ok(())
    }

    /// Background checkpoints that copied the whole WAL so far (`None`: SQLite's own).
    pub fn checkpoints_complete(&self) -> Option<u64> {
        self.checkpointer
            .get()
            .map(checkpoint::Checkpointer::complete)
    }

    /// After a round's commit: a checkpoint soon, if one runs in the background. Should
    /// its thread have stopped, this connection checkpoints again itself (SQLite's
    /// automatic checkpoint): the WAL must not grow for the rest of the daemon's life.
    fn checkpoint_soon(&self) {
        let Some(c) = self.checkpointer.get() else {
            return;
        };
        if c.request() || self.checkpoint_fallback.swap(true, Ordering::Relaxed) {
            return;
        }
        tracing::error!(store = %self.path.display(),
            "the store's checkpoint thread has stopped: rounds checkpoint the WAL themselves again (slower)");
        if let Err(e) = self.lock().pragma_update(None, "wal_autocheckpoint", 1000) {
            tracing::error!(store = %self.path.display(), error = %e,
                "cannot turn SQLite's automatic checkpoint back on: the WAL grows until a restart");
        }
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Locks the connection. A panic while the lock was held cannot leave SQLite
    /// half-written (an unfinished transaction rolls back when dropped), so a poisoned
    /// mutex is safe to reuse rather than a reason to fail every later call.
    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Error mapper for a SQLite failure while doing `context`.
    fn sq(&self, context: String) -> impl FnOnce(rusqlite::Error) -> StoreError + '_ {
        move |source| StoreError::Sqlite {
            path: self.path.clone(),
            context,
            source,
        }
    }

    fn parse_ts(&self, s: &str, what: &str) -> Result<DateTime<Utc>, StoreError> {
        parse_ts(&self.path, s, what)
    }
}

/// A stored timestamp; a bad one is [`StoreError::Corrupt`] naming `what` in `path`.
fn parse_ts(path: &Path, s: &str, what: &str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::Corrupt {
            path: path.to_path_buf(),
            what: format!("{what}: bad timestamp {s:?}: {e}"),
        })
}

fn fmt_ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Nanos, true)
}

#[cfg(test)]
mod tests;
