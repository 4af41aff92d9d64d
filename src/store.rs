//! The embedded gap store: every gap ever detected and each partition's audit progress, in
//! one SQLite file (`<state.path>/gaps.sqlite`).
//!
//! Why SQLite rather than a pure-Rust embedded store such as redb:
//!
//! - **Several processes share the file.** The daemon writes it while short-lived CLI
//!   commands (`gap-auditor gaps`, `gap-auditor ack`) read and update the same file. SQLite
//!   in WAL mode gives one writer plus any number of readers across processes, with a busy
//!   timeout for the rare write/write overlap; redb takes an exclusive file lock, so the CLI
//!   could not run while the daemon does.
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

use crate::gap::{Gap, GapCause, GapState, Offset};
use chrono::{DateTime, SecondsFormat, Utc};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// File name of the store inside the state directory.
pub const DB_FILE: &str = "gaps.sqlite";

/// Schema version this binary writes (`PRAGMA user_version`).
const SCHEMA_VERSION: i32 = 7;

/// How long a statement waits for another process's write lock before failing. The daemon's
/// round transactions are short; 5 s covers an fsync on a slow disk with a wide margin.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Every gap state, to turn [`StateFilter::Unresolved`] into a SQL `IN` list without
/// duplicating the rule of [`GapState::is_unresolved`].
const ALL_STATES: [GapState; 6] = [
    GapState::Open,
    GapState::Late,
    GapState::Repaired,
    GapState::Unrecoverable,
    GapState::Unverifiable,
    GapState::Acknowledged,
];

const SCHEMA_V1: &str = "
CREATE TABLE IF NOT EXISTS gaps (
    id               TEXT PRIMARY KEY NOT NULL,
    audit            TEXT NOT NULL,
    topic            TEXT NOT NULL,
    partition        INTEGER NOT NULL,
    first_offset     INTEGER NOT NULL,
    last_offset      INTEGER NOT NULL,
    missing_records  INTEGER NOT NULL,
    size_known       INTEGER NOT NULL,
    first_timestamp  TEXT,
    last_timestamp   TEXT,
    detected_at      TEXT NOT NULL,
    state            TEXT NOT NULL,
    unrecoverable_at TEXT,
    ack_reason       TEXT,
    updated_at       TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS gaps_detected_at ON gaps (detected_at DESC);
CREATE INDEX IF NOT EXISTS gaps_audit_state ON gaps (audit, state);
CREATE TABLE IF NOT EXISTS progress (
    audit      TEXT NOT NULL,
    topic      TEXT NOT NULL,
    partition  INTEGER NOT NULL,
    settled    INTEGER NOT NULL,
    ledger     TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    PRIMARY KEY (audit, topic, partition)
) WITHOUT ROWID;
";

/// v2: why a gap happened (the pipeline commit step that passed over it).
const SCHEMA_V2: &str = "
ALTER TABLE gaps ADD COLUMN cause TEXT NOT NULL DEFAULT 'unknown';
ALTER TABLE gaps ADD COLUMN pipeline_commit_from INTEGER;
ALTER TABLE gaps ADD COLUMN pipeline_commit_to INTEGER;
ALTER TABLE gaps ADD COLUMN pipeline_commit_at TEXT;
";

/// v3: when `gap-auditor replay` wrote a gap's records again, so that the daemon reports
/// the gap `repaired` (not merely `late`) once it confirms them.
const SCHEMA_V3: &str = "
ALTER TABLE gaps ADD COLUMN replayed_at TEXT;
";

/// v4: whether a gap's key was shared by other records (key_columns multiset).
const SCHEMA_V4: &str = "
ALTER TABLE gaps ADD COLUMN shared_key INTEGER NOT NULL DEFAULT 0;
";

/// v5: the key_columns multiset's confirmed counts, written with the settled offsets they
/// lie below, so a restart decides shared keys as the process before it would have.
const SCHEMA_V5: &str = "
CREATE TABLE IF NOT EXISTS key_book (
    audit     TEXT NOT NULL,
    key       BLOB NOT NULL,
    confirmed INTEGER NOT NULL,
    PRIMARY KEY (audit, key)
) WITHOUT ROWID;
";

/// v6: a partition's missing runs and ledger gaps, one row each (`kind` 0: missing run, 1:
/// gap), so that a round writes what changed, not the whole ledger: under a systematic
/// loss the ledger holds hundreds of thousands of them. `progress.ledger` keeps the rest.
const SCHEMA_V6: &str = "
CREATE TABLE IF NOT EXISTS ledger_items (
    audit     TEXT NOT NULL,
    topic     TEXT NOT NULL,
    partition INTEGER NOT NULL,
    kind      INTEGER NOT NULL,
    first     INTEGER NOT NULL,
    body      TEXT NOT NULL,
    PRIMARY KEY (audit, topic, partition, kind, first)
) WITHOUT ROWID;
";

/// v7: every acknowledgement in order, so the daemon reads only the new ones each round
/// (listing every acknowledged gap made a round's cost grow with all the acks ever given).
const SCHEMA_V7: &str = "
CREATE TABLE IF NOT EXISTS ack_log (
    seq    INTEGER PRIMARY KEY AUTOINCREMENT,
    gap_id TEXT NOT NULL
);
";

/// `ledger_items.kind` of a missing run.
const ITEM_MISSING: i64 = 0;
/// `ledger_items.kind` of a ledger gap.
const ITEM_GAP: i64 = 1;
/// Where the items of each kind live in the ledger's JSON snapshot, and the path to their
/// first offset.
const ITEM_KINDS: [(i64, &str, &[&str]); 2] = [
    (ITEM_MISSING, "missing", &["run", "first"]),
    (ITEM_GAP, "gaps", &["first"]),
];

/// Errors of the gap store. Each names the database file (and the gap id where one is
/// involved) so an operator can find what failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A store call panicked (caught by the caller, so nothing it carried is lost).
    #[error("gap store write panicked: {0}")]
    Panicked(String),
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
        if version < 1 {
            tx.execute_batch(SCHEMA_V1)
                .map_err(sq("create schema v1"))?;
        }
        if version < 2 {
            tx.execute_batch(SCHEMA_V2)
                .map_err(sq("migrate schema to v2"))?;
        }
        if version < 3 {
            tx.execute_batch(SCHEMA_V3)
                .map_err(sq("migrate schema to v3"))?;
        }
        if version < 4 {
            tx.execute_batch(SCHEMA_V4)
                .map_err(sq("migrate schema to v4"))?;
        }
        if version < 5 {
            tx.execute_batch(SCHEMA_V5)
                .map_err(sq("migrate schema to v5"))?;
        }
        if version < 6 {
            tx.execute_batch(SCHEMA_V6)
                .map_err(sq("migrate schema to v6"))?;
            migrate_items(&tx).map_err(|e| match e {
                ItemError::Sql(source) => StoreError::Sqlite {
                    path: path.clone(),
                    context: "migrate ledgers to ledger_items".to_string(),
                    source,
                },
                ItemError::Shape(what) => StoreError::Corrupt {
                    path: path.clone(),
                    what,
                },
            })?;
        }
        if version < 7 {
            tx.execute_batch(SCHEMA_V7)
                .map_err(sq("migrate schema to v7"))?;
        }
        // Future migrations: `if version < 8 { ... }`, each within this tx.
        if version != SCHEMA_VERSION {
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(sq("write user_version"))?;
        }
        tx.commit().map_err(sq("commit migration"))?;

        Ok(Store {
            conn: Mutex::new(conn),
            path,
        })
    }

    /// Path of the database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one verify round in one transaction: upserts `gaps` by id and the per-partition
    /// `progress` of `audit`. An upsert updates offsets, counts, timestamps and state, but
    /// never overwrites what an operator set: a gap in state `acknowledged` stays
    /// acknowledged, and an `ack_reason` is kept. `detected_at` keeps the earliest value,
    /// so a re-detection after a crash does not make an old gap look new.
    pub fn commit_round(
        &self,
        audit: &str,
        gaps: &[Gap],
        progress: &[PartitionProgress],
    ) -> Result<(), StoreError> {
        self.commit_round_with_keys(audit, gaps, progress, &[])
    }

    /// [`Self::commit_round`], plus key_columns confirmed counts in the same transaction:
    /// `(packed key, confirmed)`, 0 deleting the key.
    pub fn commit_round_with_keys(
        &self,
        audit: &str,
        gaps: &[Gap],
        progress: &[PartitionProgress],
        keys: &[(Vec<u8>, u64)],
    ) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let now = fmt_ts(Utc::now());
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.sq(format!("begin round of audit {audit}")))?;
        {
            let mut upsert_gap = tx
                .prepare_cached(
                    "INSERT INTO gaps (id, audit, topic, partition, first_offset, last_offset,
                        missing_records, size_known, first_timestamp, last_timestamp,
                        detected_at, state, unrecoverable_at, ack_reason, updated_at,
                        cause, pipeline_commit_from, pipeline_commit_to, pipeline_commit_at,
                        shared_key)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,
                        ?16, ?17, ?18, ?19, ?20)
                     ON CONFLICT (id) DO UPDATE SET
                        last_offset      = excluded.last_offset,
                        missing_records  = excluded.missing_records,
                        size_known       = excluded.size_known,
                        first_timestamp  = excluded.first_timestamp,
                        last_timestamp   = excluded.last_timestamp,
                        detected_at      = MIN(gaps.detected_at, excluded.detected_at),
                        state            = CASE WHEN gaps.state = 'acknowledged'
                                                THEN gaps.state
                                                WHEN excluded.state = 'late'
                                                     AND gaps.replayed_at IS NOT NULL
                                                THEN 'repaired'
                                                ELSE excluded.state END,
                        unrecoverable_at = excluded.unrecoverable_at,
                        ack_reason       = COALESCE(gaps.ack_reason, excluded.ack_reason),
                        updated_at       = excluded.updated_at,
                        cause            = excluded.cause,
                        pipeline_commit_from = excluded.pipeline_commit_from,
                        pipeline_commit_to   = excluded.pipeline_commit_to,
                        pipeline_commit_at   = excluded.pipeline_commit_at,
                        shared_key           = excluded.shared_key",
                )
                .map_err(self.sq("prepare gap upsert".to_string()))?;
            for gap in gaps {
                let missing =
                    i64::try_from(gap.missing_records).map_err(|_| StoreError::Corrupt {
                        path: self.path.clone(),
                        what: format!(
                            "gap {}: missing_records {} exceeds the i64 range",
                            gap.id, gap.missing_records
                        ),
                    })?;
                upsert_gap
                    .execute(params![
                        gap.id,
                        gap.audit,
                        gap.topic,
                        gap.partition,
                        gap.first_offset,
                        gap.last_offset,
                        missing,
                        gap.size_known,
                        gap.first_timestamp.map(fmt_ts),
                        gap.last_timestamp.map(fmt_ts),
                        fmt_ts(gap.detected_at),
                        gap.state.as_str(),
                        gap.unrecoverable_at.map(fmt_ts),
                        gap.ack_reason,
                        now,
                        gap.cause.as_str(),
                        gap.pipeline_commit_from,
                        gap.pipeline_commit_to,
                        gap.pipeline_commit_at.map(fmt_ts),
                        gap.shared_key,
                    ])
                    .map_err(self.sq(format!("upsert gap {}", gap.id)))?;
            }

            let mut upsert_progress = tx
                .prepare_cached(
                    "INSERT INTO progress (audit, topic, partition, settled, ledger, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT (audit, topic, partition) DO UPDATE SET
                        settled = excluded.settled,
                        ledger = excluded.ledger,
                        updated_at = excluded.updated_at",
                )
                .map_err(self.sq("prepare progress upsert".to_string()))?;
            for p in progress {
                let what = || format!("ledger of {audit}/{}-{}", p.topic, p.partition);
                let item_err = |e: ItemError| match e {
                    ItemError::Sql(source) => StoreError::Sqlite {
                        path: self.path.clone(),
                        context: format!("write the {}", what()),
                        source,
                    },
                    ItemError::Shape(w) => StoreError::Corrupt {
                        path: self.path.clone(),
                        what: format!("{}: {w}", what()),
                    },
                };
                let mut head = p.ledger.clone();
                match &p.items {
                    None => replace_items(&tx, audit, &p.topic, p.partition, &mut head)
                        .map_err(item_err)?,
                    Some(items) => {
                        write_items(&tx, audit, &p.topic, p.partition, items).map_err(item_err)?
                    }
                }
                let ledger = serde_json::to_string(&head).map_err(|e| StoreError::Corrupt {
                    path: self.path.clone(),
                    what: format!("{}: {e}", what()),
                })?;
                upsert_progress
                    .execute(params![
                        audit,
                        p.topic,
                        p.partition,
                        p.settled,
                        ledger,
                        fmt_ts(p.updated_at)
                    ])
                    .map_err(self.sq(format!(
                        "upsert progress of {audit}/{}-{}",
                        p.topic, p.partition
                    )))?;
            }
            if !keys.is_empty() {
                let mut upsert_key = tx
                    .prepare_cached(
                        "INSERT INTO key_book (audit, key, confirmed) VALUES (?1, ?2, ?3)
                         ON CONFLICT (audit, key) DO UPDATE SET confirmed = excluded.confirmed",
                    )
                    .map_err(self.sq("prepare key upsert".to_string()))?;
                let mut delete_key = tx
                    .prepare_cached("DELETE FROM key_book WHERE audit = ?1 AND key = ?2")
                    .map_err(self.sq("prepare key delete".to_string()))?;
                // In key order: the table is a B-tree on (audit, key), and a round's keys
                // come in hash order. Sorted, each page is visited once and in order, instead
                // of every write landing on a random page (a page-cache miss per key once
                // the book outgrows the cache): 400,000 keys took 6.9 s unsorted.
                let mut sorted: Vec<&(Vec<u8>, u64)> = keys.iter().collect();
                sorted.sort_unstable_by(|a, b| a.0.cmp(&b.0));
                for (k, n) in sorted {
                    let r = match i64::try_from(*n) {
                        Ok(0) => delete_key.execute(params![audit, k]),
                        Ok(n) => upsert_key.execute(params![audit, k, n]),
                        Err(_) => upsert_key.execute(params![audit, k, i64::MAX]),
                    };
                    r.map_err(self.sq(format!("write the key book of audit {audit}")))?;
                }
            }
        }
        tx.commit()
            .map_err(self.sq(format!("commit round of audit {audit}")))
    }

    /// The key_columns confirmed counts of one audit, as `(packed key, confirmed)`.
    pub fn load_key_book(&self, audit: &str) -> Result<Vec<(Vec<u8>, u64)>, StoreError> {
        let conn = self.lock();
        let ctx = || format!("load the key book of audit {audit}");
        let mut stmt = conn
            .prepare_cached("SELECT key, confirmed FROM key_book WHERE audit = ?1")
            .map_err(self.sq(ctx()))?;
        let rows = stmt
            .query_map(params![audit], |row| {
                Ok((row.get::<_, Vec<u8>>(0)?, row.get::<_, i64>(1)?))
            })
            .map_err(self.sq(ctx()))?;
        let mut out = Vec::new();
        for row in rows {
            let (k, n) = row.map_err(self.sq(ctx()))?;
            out.push((k, n.max(0) as u64));
        }
        Ok(out)
    }

    /// Confirmed counts of the given keys (packed), for `replay`; absent keys are 0.
    pub fn key_confirmed(&self, audit: &str, keys: &[Vec<u8>]) -> Result<Vec<u64>, StoreError> {
        let conn = self.lock();
        let ctx = || format!("read the key book of audit {audit}");
        let mut stmt = conn
            .prepare_cached("SELECT confirmed FROM key_book WHERE audit = ?1 AND key = ?2")
            .map_err(self.sq(ctx()))?;
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            let n: Option<i64> = stmt
                .query_row(params![audit, k], |row| row.get(0))
                .optional()
                .map_err(self.sq(ctx()))?;
            out.push(n.unwrap_or(0).max(0) as u64);
        }
        Ok(out)
    }

    /// Progress rows of one audit, ordered by topic and partition.
    pub fn load_progress(&self, audit: &str) -> Result<Vec<PartitionProgress>, StoreError> {
        let conn = self.lock();
        let ctx = || format!("load progress of audit {audit}");
        let mut stmt = conn
            .prepare_cached(
                "SELECT topic, partition, settled, ledger, updated_at FROM progress
                 WHERE audit = ?1 ORDER BY topic, partition",
            )
            .map_err(self.sq(ctx()))?;
        let rows = stmt
            .query_map(params![audit], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, i32>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, String>(3)?,
                    row.get::<_, String>(4)?,
                ))
            })
            .map_err(self.sq(ctx()))?;
        let mut out = Vec::new();
        for row in rows {
            let (topic, partition, settled, ledger, updated_at) = row.map_err(self.sq(ctx()))?;
            let what = format!("progress of {audit}/{topic}-{partition}");
            let mut ledger = serde_json::from_str(&ledger).map_err(|e| StoreError::Corrupt {
                path: self.path.clone(),
                what: format!("{what}: ledger is not JSON: {e}"),
            })?;
            read_items(&conn, audit, &topic, partition, &mut ledger).map_err(|e| match e {
                ItemError::Sql(source) => StoreError::Sqlite {
                    path: self.path.clone(),
                    context: format!("read the items of {what}"),
                    source,
                },
                ItemError::Shape(w) => StoreError::Corrupt {
                    path: self.path.clone(),
                    what: format!("{what}: {w}"),
                },
            })?;
            let updated_at = self.parse_ts(&updated_at, &what)?;
            out.push(PartitionProgress {
                topic,
                partition,
                settled,
                ledger,
                updated_at,
                items: None,
            });
        }
        Ok(out)
    }

    /// Gaps matching `filter`, newest detected first (ties by id, for a stable order).
    pub fn list_gaps(&self, filter: &GapFilter) -> Result<Vec<Gap>, StoreError> {
        let states: Option<Vec<&'static str>> = match filter.state {
            StateFilter::All => None,
            f => Some(
                ALL_STATES
                    .iter()
                    .filter(|s| f.matches(**s))
                    .map(|s| s.as_str())
                    .collect(),
            ),
        };
        let mut sql = format!("SELECT {GAP_COLUMNS} FROM gaps WHERE 1 = 1");
        let mut args: Vec<&dyn rusqlite::ToSql> = Vec::new();
        if let Some(states) = &states {
            // Placeholders only: the state names are constants, but binding keeps one pattern.
            let marks: Vec<&str> = states.iter().map(|_| "?").collect();
            sql.push_str(&format!(" AND state IN ({})", marks.join(", ")));
            for s in states {
                args.push(s);
            }
        }
        if let Some(audit) = &filter.audit {
            sql.push_str(" AND audit = ?");
            args.push(audit);
        }
        sql.push_str(" ORDER BY detected_at DESC, id ASC");

        let conn = self.lock();
        let mut stmt = conn
            .prepare(&sql)
            .map_err(self.sq("list gaps".to_string()))?;
        let rows = stmt
            .query_map(args.as_slice(), RawGap::from_row)
            .map_err(self.sq("list gaps".to_string()))?;
        let mut out = Vec::new();
        for row in rows {
            let raw = row.map_err(self.sq("list gaps".to_string()))?;
            out.push(self.decode_gap(raw)?);
        }
        Ok(out)
    }

    /// Every gap of one partition of `audit`, with whether `replay` marked it, in offset
    /// order: one query for a handover (which used to ask for each gap by id).
    pub fn gaps_of_partition(
        &self,
        audit: &str,
        topic: &str,
        partition: i32,
    ) -> Result<Vec<(Gap, bool)>, StoreError> {
        let conn = self.lock();
        let ctx = || format!("list the gaps of {audit}/{topic}-{partition}");
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {GAP_COLUMNS}, replayed_at IS NOT NULL FROM gaps
                 WHERE audit = ?1 AND topic = ?2 AND partition = ?3 ORDER BY first_offset"
            ))
            .map_err(self.sq(ctx()))?;
        let rows = stmt
            .query_map(params![audit, topic, partition], |row| {
                Ok((RawGap::from_row(row)?, row.get::<_, bool>(19)?))
            })
            .map_err(self.sq(ctx()))?;
        let mut out = Vec::new();
        for row in rows {
            let (raw, replayed) = row.map_err(self.sq(ctx()))?;
            out.push((self.decode_gap(raw)?, replayed));
        }
        Ok(out)
    }

    /// One gap by id.
    pub fn get_gap(&self, id: &str) -> Result<Option<Gap>, StoreError> {
        let conn = self.lock();
        let raw = conn
            .query_row(
                &format!("SELECT {GAP_COLUMNS} FROM gaps WHERE id = ?1"),
                params![id],
                RawGap::from_row,
            )
            .optional()
            .map_err(self.sq(format!("read gap {id}")))?;
        drop(conn);
        raw.map(|r| self.decode_gap(r)).transpose()
    }

    /// Records that `gap-auditor replay` wrote the gap's records again: once the daemon
    /// confirms them the gap becomes `repaired`. Ok(false) when no such gap.
    pub fn mark_replayed(&self, id: &str) -> Result<bool, StoreError> {
        let conn = self.lock();
        let n = conn
            .execute(
                "UPDATE gaps SET replayed_at = ?2, updated_at = ?2 WHERE id = ?1",
                params![id, fmt_ts(Utc::now())],
            )
            .map_err(self.sq(format!("mark gap {id} replayed")))?;
        Ok(n > 0)
    }

    /// Takes back [`Store::mark_replayed`] (a replay that wrote nothing). A gap the daemon
    /// already reported `repaired` keeps that state.
    pub fn clear_replayed(&self, id: &str) -> Result<bool, StoreError> {
        let conn = self.lock();
        let n = conn
            .execute(
                "UPDATE gaps SET replayed_at = NULL, updated_at = ?2
                 WHERE id = ?1 AND state <> 'repaired'",
                params![id, fmt_ts(Utc::now())],
            )
            .map_err(self.sq(format!("clear the replay mark of gap {id}")))?;
        Ok(n > 0)
    }

    /// Whether `gap-auditor replay` marked the gap ([`Store::mark_replayed`]); `false` for
    /// an unknown id.
    pub fn is_replayed(&self, id: &str) -> Result<bool, StoreError> {
        let conn = self.lock();
        let at: Option<Option<String>> = conn
            .query_row(
                "SELECT replayed_at FROM gaps WHERE id = ?1",
                params![id],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.sq(format!("read gap {id}")))?;
        Ok(at.flatten().is_some())
    }

    /// Kafka no longer holds the gap's records (a replay found them deleted).
    pub fn mark_unrecoverable(&self, id: &str, at: DateTime<Utc>) -> Result<bool, StoreError> {
        let conn = self.lock();
        let n = conn
            .execute(
                "UPDATE gaps SET state = CASE WHEN state = 'acknowledged' THEN state
                                               ELSE 'unrecoverable' END,
                                 unrecoverable_at = COALESCE(unrecoverable_at, ?2),
                                 updated_at = ?2
                 WHERE id = ?1",
                params![id, fmt_ts(at)],
            )
            .map_err(self.sq(format!("mark gap {id} unrecoverable")))?;
        Ok(n > 0)
    }

    /// Drops this store's copies of the unresolved gaps of one partition below `below`,
    /// except `keep` — for several auditor instances sharing a `state.handover_topic`, where
    /// an unresolved gap is listed by the instance that owns its partition:
    /// - for a partition another instance owns now (`below` = `Offset::MAX`, nothing
    ///   kept): that owner took the gaps over from the handover topic and follows them;
    /// - for a partition coming back: an unresolved gap always stays in the owner's
    ///   ledger, so one below the handed-over settled watermark that is not among the
    ///   handed-over gaps (`keep`) was resolved by another instance, whose store holds its
    ///   final state.
    ///
    /// Acknowledged, late and repaired rows are never dropped. Returns the dropped ids.
    pub fn forget_unresolved(
        &self,
        audit: &str,
        topic: &str,
        partition: i32,
        below: Offset,
        keep: &[String],
    ) -> Result<Vec<String>, StoreError> {
        let mut conn = self.lock();
        let ctx = || format!("drop stale gaps of {audit} {topic}-{partition}");
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.sq(ctx()))?;
        let ids: Vec<String> = {
            let mut stmt = tx
                .prepare(
                    "SELECT id FROM gaps WHERE audit = ?1 AND topic = ?2 AND partition = ?3
                        AND state IN ('open', 'unrecoverable') AND first_offset < ?4",
                )
                .map_err(self.sq(ctx()))?;
            let rows = stmt
                .query_map(params![audit, topic, partition, below], |r| r.get(0))
                .map_err(self.sq(ctx()))?;
            let mut ids = Vec::new();
            for r in rows {
                let id: String = r.map_err(self.sq(ctx()))?;
                if !keep.contains(&id) {
                    ids.push(id);
                }
            }
            ids
        };
        for id in &ids {
            tx.execute("DELETE FROM gaps WHERE id = ?1", params![id])
                .map_err(self.sq(ctx()))?;
        }
        tx.commit().map_err(self.sq(ctx()))?;
        Ok(ids)
    }

    /// Marks a gap acknowledged with the operator's reason (stops its alert). A later
    /// [`Store::commit_round`] never reverts it. `Ok(false)` when no gap has this id.
    pub fn ack(&self, id: &str, reason: &str) -> Result<bool, StoreError> {
        let mut conn = self.lock();
        let ctx = || format!("ack gap {id}");
        let tx = conn.transaction().map_err(self.sq(ctx()))?;
        let changed = tx
            .execute(
                "UPDATE gaps SET state = 'acknowledged', ack_reason = ?2, updated_at = ?3
                 WHERE id = ?1",
                params![id, reason, fmt_ts(Utc::now())],
            )
            .map_err(self.sq(ctx()))?;
        if changed > 0 {
            tx.execute("INSERT INTO ack_log (gap_id) VALUES (?1)", params![id])
                .map_err(self.sq(ctx()))?;
        }
        tx.commit().map_err(self.sq(ctx()))?;
        Ok(changed > 0)
    }

    /// The position of the newest acknowledgement ([`Store::acks_since`] from it on).
    pub fn ack_position(&self) -> Result<i64, StoreError> {
        self.lock()
            .query_row("SELECT COALESCE(MAX(seq), 0) FROM ack_log", [], |r| {
                r.get(0)
            })
            .map_err(self.sq("read the ack log position".to_string()))
    }

    /// Gaps of `audit` acknowledged after position `since` (still acknowledged), and the
    /// newest position read: a round's cost follows the new acknowledgements only.
    pub fn acks_since(&self, audit: &str, since: i64) -> Result<(Vec<Gap>, i64), StoreError> {
        let conn = self.lock();
        let ctx = || format!("read acknowledgements of {audit} since {since}");
        let newest: i64 = conn
            .query_row(
                "SELECT COALESCE(MAX(seq), ?1) FROM ack_log WHERE seq > ?1",
                params![since],
                |r| r.get(0),
            )
            .map_err(self.sq(ctx()))?;
        if newest == since {
            return Ok((Vec::new(), since));
        }
        let cols = GAP_COLUMNS
            .split(',')
            .map(|c| format!("g.{}", c.trim()))
            .collect::<Vec<_>>()
            .join(", ");
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT DISTINCT {cols} FROM ack_log a JOIN gaps g ON g.id = a.gap_id
                 WHERE a.seq > ?1 AND a.seq <= ?2 AND g.audit = ?3
                   AND g.state = 'acknowledged'"
            ))
            .map_err(self.sq(ctx()))?;
        let rows = stmt
            .query_map(params![since, newest, audit], RawGap::from_row)
            .map_err(self.sq(ctx()))?;
        let mut out = Vec::new();
        for row in rows {
            let raw = row.map_err(self.sq(ctx()))?;
            out.push(self.decode_gap(raw)?);
        }
        Ok((out, newest))
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
        DateTime::parse_from_rfc3339(s)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| StoreError::Corrupt {
                path: self.path.clone(),
                what: format!("{what}: bad timestamp {s:?}: {e}"),
            })
    }

    fn parse_opt_ts(
        &self,
        s: Option<String>,
        what: &str,
    ) -> Result<Option<DateTime<Utc>>, StoreError> {
        s.map(|s| self.parse_ts(&s, what)).transpose()
    }

    fn decode_gap(&self, raw: RawGap) -> Result<Gap, StoreError> {
        let what = format!("gap {}", raw.id);
        let state = GapState::parse(&raw.state).ok_or_else(|| StoreError::Corrupt {
            path: self.path.clone(),
            what: format!("{what}: unknown state {:?}", raw.state),
        })?;
        let missing_records =
            u64::try_from(raw.missing_records).map_err(|_| StoreError::Corrupt {
                path: self.path.clone(),
                what: format!("{what}: negative missing_records {}", raw.missing_records),
            })?;
        Ok(Gap {
            first_timestamp: self.parse_opt_ts(raw.first_timestamp, &what)?,
            last_timestamp: self.parse_opt_ts(raw.last_timestamp, &what)?,
            detected_at: self.parse_ts(&raw.detected_at, &what)?,
            unrecoverable_at: self.parse_opt_ts(raw.unrecoverable_at, &what)?,
            id: raw.id,
            audit: raw.audit,
            topic: raw.topic,
            partition: raw.partition,
            first_offset: raw.first_offset,
            last_offset: raw.last_offset,
            missing_records,
            size_known: raw.size_known,
            state,
            ack_reason: raw.ack_reason,
            cause: GapCause::parse(&raw.cause),
            pipeline_commit_from: raw.pipeline_commit_from,
            pipeline_commit_to: raw.pipeline_commit_to,
            pipeline_commit_at: self.parse_opt_ts(raw.pipeline_commit_at, &what)?,
            shared_key: raw.shared_key,
        })
    }
}

/// Column list shared by every gap query, in [`RawGap::from_row`] order.
const GAP_COLUMNS: &str = "id, audit, topic, partition, first_offset, last_offset, \
    missing_records, size_known, first_timestamp, last_timestamp, detected_at, state, \
    unrecoverable_at, ack_reason, cause, pipeline_commit_from, pipeline_commit_to, \
    pipeline_commit_at, shared_key";

/// A gap row as SQLite returns it, before timestamps and state are decoded (decoding errors
/// are reported as [`StoreError::Corrupt`] with the gap id, not as a bare SQLite error).
struct RawGap {
    id: String,
    audit: String,
    topic: String,
    partition: i32,
    first_offset: i64,
    last_offset: i64,
    missing_records: i64,
    size_known: bool,
    first_timestamp: Option<String>,
    last_timestamp: Option<String>,
    detected_at: String,
    state: String,
    unrecoverable_at: Option<String>,
    ack_reason: Option<String>,
    cause: String,
    pipeline_commit_from: Option<i64>,
    pipeline_commit_to: Option<i64>,
    pipeline_commit_at: Option<String>,
    shared_key: bool,
}

impl RawGap {
    fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawGap> {
        Ok(RawGap {
            id: row.get(0)?,
            audit: row.get(1)?,
            topic: row.get(2)?,
            partition: row.get(3)?,
            first_offset: row.get(4)?,
            last_offset: row.get(5)?,
            missing_records: row.get(6)?,
            size_known: row.get(7)?,
            first_timestamp: row.get(8)?,
            last_timestamp: row.get(9)?,
            detected_at: row.get(10)?,
            state: row.get(11)?,
            unrecoverable_at: row.get(12)?,
            ack_reason: row.get(13)?,
            cause: row.get(14)?,
            pipeline_commit_from: row.get(15)?,
            pipeline_commit_to: row.get(16)?,
            pipeline_commit_at: row.get(17)?,
            shared_key: row.get(18)?,
        })
    }
}

/// Fixed-width RFC 3339 (nine fractional digits, `Z`): lossless and text-sortable.
/// Why a ledger's items could not be written or read.
enum ItemError {
    Sql(rusqlite::Error),
    Shape(String),
}

impl From<rusqlite::Error> for ItemError {
    fn from(e: rusqlite::Error) -> Self {
        ItemError::Sql(e)
    }
}

/// Stores a whole ledger: its `missing` and `gaps` arrays (taken out of `head`) replace
/// every item stored for the partition.
fn replace_items(
    conn: &Connection,
    audit: &str,
    topic: &str,
    partition: i32,
    head: &mut serde_json::Value,
) -> Result<(), ItemError> {
    conn.prepare_cached(
        "DELETE FROM ledger_items WHERE audit = ?1 AND topic = ?2 AND partition = ?3",
    )?
    .execute(params![audit, topic, partition])?;
    let mut insert = conn.prepare_cached(
        "INSERT OR REPLACE INTO ledger_items (audit, topic, partition, kind, first, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for (kind, field, path) in ITEM_KINDS {
        let Some(items) = head.as_object_mut().and_then(|o| o.remove(field)) else {
            continue;
        };
        let serde_json::Value::Array(items) = items else {
            return Err(ItemError::Shape(format!("`{field}` is not an array")));
        };
        for item in items {
            let first = path
                .iter()
                .try_fold(&item, |v, k| v.get(k))
                .and_then(serde_json::Value::as_i64)
                .ok_or_else(|| {
                    ItemError::Shape(format!("an item of `{field}` has no {}", path.join(".")))
                })?;
            insert.execute(params![
                audit,
                topic,
                partition,
                kind,
                first,
                item.to_string()
            ])?;
        }
    }
    Ok(())
}

/// Stores the changed items of a ledger (upserts and deletes).
fn write_items(
    conn: &Connection,
    audit: &str,
    topic: &str,
    partition: i32,
    items: &LedgerItems,
) -> Result<(), ItemError> {
    let mut upsert = conn.prepare_cached(
        "INSERT OR REPLACE INTO ledger_items (audit, topic, partition, kind, first, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    let mut delete = conn.prepare_cached(
        "DELETE FROM ledger_items
         WHERE audit = ?1 AND topic = ?2 AND partition = ?3 AND kind = ?4 AND first = ?5",
    )?;
    for (kind, list) in [(ITEM_MISSING, &items.missing), (ITEM_GAP, &items.gaps)] {
        for (first, body) in list {
            match body {
                Some(b) => upsert.execute(params![audit, topic, partition, kind, first, b])?,
                None => delete.execute(params![audit, topic, partition, kind, first])?,
            };
        }
    }
    Ok(())
}

/// Puts a partition's stored items back into its ledger's JSON (`missing`, `gaps`), in
/// offset order.
fn read_items(
    conn: &Connection,
    audit: &str,
    topic: &str,
    partition: i32,
    head: &mut serde_json::Value,
) -> Result<(), ItemError> {
    let mut stmt = conn.prepare_cached(
        "SELECT kind, body FROM ledger_items
         WHERE audit = ?1 AND topic = ?2 AND partition = ?3 ORDER BY kind, first",
    )?;
    let rows: Vec<(i64, String)> = stmt
        .query_map(params![audit, topic, partition], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
        })?
        .collect::<Result<_, _>>()?;
    if rows.is_empty() {
        return Ok(());
    }
    let Some(obj) = head.as_object_mut() else {
        return Err(ItemError::Shape("ledger is not a JSON object".to_string()));
    };
    for (kind, body) in rows {
        let Some((_, field, _)) = ITEM_KINDS.iter().find(|(k, ..)| *k == kind) else {
            return Err(ItemError::Shape(format!("unknown item kind {kind}")));
        };
        let item: serde_json::Value = serde_json::from_str(&body)
            .map_err(|e| ItemError::Shape(format!("an item of `{field}` is not JSON: {e}")))?;
        match obj
            .entry(field.to_string())
            .or_insert_with(|| serde_json::Value::Array(Vec::new()))
        {
            serde_json::Value::Array(a) => a.push(item),
            _ => return Err(ItemError::Shape(format!("`{field}` is not an array"))),
        }
    }
    Ok(())
}

/// v6: moves the `missing` and `gaps` arrays of every stored ledger into `ledger_items`.
fn migrate_items(tx: &Connection) -> Result<(), ItemError> {
    let rows: Vec<(String, String, i32, String)> = tx
        .prepare("SELECT audit, topic, partition, ledger FROM progress")?
        .query_map([], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })?
        .collect::<Result<_, _>>()?;
    for (audit, topic, partition, ledger) in rows {
        let mut head: serde_json::Value = serde_json::from_str(&ledger).map_err(|e| {
            ItemError::Shape(format!(
                "ledger of {audit}/{topic}-{partition} is not JSON: {e}"
            ))
        })?;
        replace_items(tx, &audit, &topic, partition, &mut head)?;
        tx.execute(
            "UPDATE progress SET ledger = ?4 WHERE audit = ?1 AND topic = ?2 AND partition = ?3",
            params![audit, topic, partition, head.to_string()],
        )?;
    }
    Ok(())
}

fn fmt_ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Nanos, true)
}

#[cfg(test)]
mod tests;
