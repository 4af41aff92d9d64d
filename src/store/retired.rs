//! Retired gaps (schema v12): rows of gaps that left the daemon's memory, the changes only
//! the store can make to them, and the aggregate the ledger keeps of them
//! ([`crate::ledger::RetiredGaps`]), counted in one query, never by loading every row.

use super::{Store, StoreError, fmt_ts, parse_ts};
use crate::completeness::{BlockingGap, MAX_LISTED_GAPS, Since};
use crate::gap::{Gap, GapState};
use crate::ledger::{RetiredGaps, RetiredOp};
use crate::store::gaps::GAP_COLUMNS;
use crate::store::keys::KeyClaims;
use crate::types::Offset;
use chrono::{TimeZone, Utc};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use std::collections::HashSet;
use std::path::Path;

/// Which rows of a partition count: retired, with records missing or dead-lettered, not
/// acknowledged (an acknowledged gap left the ledger's answers; late and repaired ones have
/// none missing). A dead_lettered row's `missing_records` counts its dead-lettered records.
const COUNTED: &str = "audit = ?1 AND topic = ?2 AND partition = ?3 AND retired = 1
    AND missing_records > 0
    AND state IN ('open', 'unrecoverable', 'unverifiable', 'dead_lettered')";

/// Marks the gaps `ids` retired (inside the round's transaction).
pub(super) fn mark(tx: &Connection, ids: &[String]) -> rusqlite::Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    let mut stmt = tx.prepare_cached("UPDATE gaps SET retired = 1 WHERE id = ?1")?;
    for id in ids {
        stmt.execute(params![id])?;
    }
    Ok(())
}

/// Which of the gaps `ids` an operator acknowledged (inside the round's transaction).
pub(super) fn acknowledged(tx: &Connection, ids: &[String]) -> rusqlite::Result<Vec<String>> {
    let mut stmt =
        tx.prepare_cached("SELECT 1 FROM gaps WHERE id = ?1 AND state = 'acknowledged'")?;
    let mut out = Vec::new();
    for id in ids {
        if stmt.exists(params![id])? {
            out.push(id.clone());
        }
    }
    Ok(out)
}

/// Deletes the rows of gaps folded into an overflow gap (inside the round's transaction,
/// which writes the overflow gap). A row an operator acknowledged meanwhile stays.
pub(super) fn fold(tx: &Connection, ids: &[String]) -> rusqlite::Result<()> {
    if ids.is_empty() {
        return Ok(());
    }
    // Under an import mark: remembered, so an import resumed from a newer state does not
    // take its version of a gap this store folded (review 26b, G1).
    let mut note = tx.prepare_cached(
        "INSERT OR REPLACE INTO handover_resumed
            (handover_topic, audit, topic, partition, id, folded)
         SELECT i.handover_topic, g.audit, g.topic, g.partition, g.id, 1
         FROM gaps g JOIN handover_importing i
             ON i.audit = g.audit AND i.topic = g.topic AND i.partition = g.partition
         WHERE g.id = ?1 AND g.state <> 'acknowledged'",
    )?;
    for id in ids {
        note.execute(params![id])?;
    }
    let mut stmt =
        tx.prepare_cached("DELETE FROM gaps WHERE id = ?1 AND state <> 'acknowledged'")?;
    for id in ids {
        stmt.execute(params![id])?;
    }
    Ok(())
}

/// A ledger time (unix ms) as the store writes times.
fn ms_ts(ms: i64) -> String {
    fmt_ts(
        Utc.timestamp_millis_opt(ms)
            .single()
            .unwrap_or_else(Utc::now),
    )
}

impl Store {
    /// Applies `ops` to the retired gaps of one partition, in order, and counts them, in one
    /// transaction: the aggregate the ledger keeps of them.
    pub fn settle_retired(
        &self,
        audit: &str,
        topic: &str,
        partition: i32,
        ops: &[RetiredOp],
    ) -> Result<RetiredGaps, StoreError> {
        self.settle_retired_changed(audit, topic, partition, ops)
            .map(|(agg, _)| agg)
    }

    /// [`Store::settle_retired`], and the ids of the rows its operations changed (the
    /// handover's next delta carries them: issue 41 item 3).
    pub fn settle_retired_changed(
        &self,
        audit: &str,
        topic: &str,
        partition: i32,
        ops: &[RetiredOp],
    ) -> Result<(RetiredGaps, Vec<String>), StoreError> {
        let mut conn = self.lock();
        let ctx = || format!("count the retired gaps of {audit}/{topic}-{partition}");
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.sq(ctx()))?;
        let now = fmt_ts(Utc::now());
        let mut changed = Vec::new();
        for op in ops {
            let (sql, args) = match *op {
                // As `log_start_moved` marks a gap in memory.
                RetiredOp::Deleted { below, at_ms } => (
                    "UPDATE gaps SET state = 'unrecoverable', unrecoverable_at = ?5,
                            updated_at = ?6
                     WHERE audit = ?1 AND topic = ?2 AND partition = ?3 AND retired = 1
                       AND state = 'open' AND missing_records > 0 AND first_offset < ?4
                     RETURNING id",
                    (below, at_ms),
                ),
                // As `diverged_ledger` reports the gaps it no longer follows.
                RetiredOp::Gone { from, at_ms } => (
                    "UPDATE gaps SET
                        state = CASE WHEN state = 'open' AND size_known AND missing_records > 0
                                     THEN 'unrecoverable' ELSE state END,
                        unrecoverable_at = CASE WHEN state = 'open' AND size_known
                                                     AND missing_records > 0
                                                THEN ?5 ELSE unrecoverable_at END,
                        retired = 0, updated_at = ?6
                     WHERE audit = ?1 AND topic = ?2 AND partition = ?3 AND retired = 1
                       AND first_offset >= ?4
                     RETURNING id",
                    (from, at_ms),
                ),
            };
            let mut stmt = tx.prepare_cached(sql).map_err(self.sq(ctx()))?;
            let ids = stmt
                .query_map(
                    params![audit, topic, partition, args.0, ms_ts(args.1), now],
                    |r| r.get::<_, String>(0),
                )
                .map_err(self.sq(ctx()))?
                .collect::<Result<Vec<String>, _>>()
                .map_err(self.sq(ctx()))?;
            changed.extend(ids);
        }
        let out = count(&tx, &self.path, audit, topic, partition).map_err(|e| match e {
            CountError::Sql(e) => self.sq(ctx())(e),
            CountError::Corrupt(s) => s,
        })?;
        tx.commit().map_err(self.sq(ctx()))?;
        Ok((out, changed))
    }
}

/// Why the count failed: the query, or a row the store cannot read.
enum CountError {
    Sql(rusqlite::Error),
    Corrupt(StoreError),
}

impl From<rusqlite::Error> for CountError {
    fn from(e: rusqlite::Error) -> Self {
        CountError::Sql(e)
    }
}

/// The aggregate of one partition's retired gaps: one aggregate query and one for the
/// earliest few (completeness lists them).
fn count(
    tx: &Connection,
    path: &Path,
    audit: &str,
    topic: &str,
    partition: i32,
) -> Result<RetiredGaps, CountError> {
    type Row = (
        i64,
        i64,
        i64,
        i64,
        Option<String>,
        Option<String>,
        i64,
        Option<i64>,
        i64,
    );
    let row: Row = tx
        .prepare_cached(&format!(
            "SELECT COUNT(*),
                COALESCE(SUM(CASE WHEN size_known AND state <> 'dead_lettered'
                                  THEN missing_records ELSE 0 END), 0),
                COALESCE(SUM(state IN ('open', 'unrecoverable')), 0),
                COALESCE(SUM(CASE WHEN state IN ('open', 'unrecoverable')
                                  THEN missing_records ELSE 0 END), 0),
                MIN(CASE WHEN state = 'unrecoverable' THEN unrecoverable_at END),
                MIN(CASE WHEN state = 'open' THEN first_timestamp END),
                COALESCE(SUM(state = 'open' AND first_timestamp IS NULL), 0),
                MIN(CASE WHEN state = 'open' THEN first_offset END),
                COALESCE(SUM(state = 'dead_lettered'), 0)
             FROM gaps WHERE {COUNTED}"
        ))?
        .query_row(params![audit, topic, partition], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
                r.get(7)?,
                r.get(8)?,
            ))
        })?;
    let what = format!("retired gaps of {audit}/{topic}-{partition}");
    let ms = |s: Option<String>| -> Result<Option<i64>, CountError> {
        s.map(|s| parse_ts(path, &s, &what).map(|t| t.timestamp_millis()))
            .transpose()
            .map_err(CountError::Corrupt)
    };
    let n = |v: i64| u64::try_from(v).unwrap_or(0);
    let mut out = RetiredGaps {
        gaps: n(row.0),
        dead_lettered: n(row.8),
        missing_known: n(row.1),
        open: n(row.2),
        open_missing: n(row.3),
        deleted_ms: ms(row.4)?,
        oldest_undeleted_ts: ms(row.5)?,
        undeleted_without_ts: n(row.6),
        undeleted_first: row.7,
        earliest: Vec::new(),
    };
    // Completeness order: no timestamp first (it could be older than anything), then by
    // time and first offset (`Since`).
    let mut stmt = tx.prepare_cached(&format!(
        "SELECT id, first_offset, first_timestamp, missing_records, state FROM gaps
         WHERE {COUNTED}
         ORDER BY first_timestamp IS NOT NULL, first_timestamp, first_offset LIMIT {MAX_LISTED_GAPS}"
    ))?;
    let rows: Vec<(String, i64, Option<String>, i64, String)> = stmt
        .query_map(params![audit, topic, partition], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })?
        .collect::<Result<_, _>>()?;
    for (id, first, ts, missing, state) in rows {
        let state = GapState::parse(&state).ok_or_else(|| {
            CountError::Corrupt(StoreError::Corrupt {
                path: path.to_path_buf(),
                what: format!("gap {id}: unknown state {state:?}"),
            })
        })?;
        out.earliest.push(BlockingGap {
            first,
            since: Since::of(ms(ts)?),
            missing: n(missing),
            state,
            epoch: Gap::epoch_of_id(&id),
        });
    }
    Ok(out)
}

impl Store {
    /// The retired gaps (any state) of one partition of `audit` starting in `[lo, hi)`, in
    /// offset order, at most `limit`: what a chunk of retired gaps on the handover's side
    /// topic holds (`handover::retired`). Through the `gaps_retired` index.
    pub fn retired_gaps_between(
        &self,
        audit: &str,
        topic: &str,
        partition: i32,
        lo: Offset,
        hi: Offset,
        limit: usize,
    ) -> Result<Vec<Gap>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.query_plain_gaps(
            &format!(
                "SELECT {GAP_COLUMNS} FROM gaps
                 WHERE audit = ?1 AND topic = ?2 AND partition = ?3 AND retired = 1
                   AND first_offset >= ?4 AND first_offset < ?5
                 ORDER BY first_offset, id LIMIT ?6"
            ),
            params![audit, topic, partition, lo, hi, limit],
            format!("list the retired gaps of {audit}/{topic}-{partition} in {lo}..{hi}"),
        )
    }

    /// Deletes the retired rows of one partition of `audit` starting in `[lo, hi)` that are
    /// not acknowledged and whose ids are not in `keep`, in one transaction; returns their
    /// ids. An import applies the newest version of a chunk whole with it: a gap its owner
    /// resolved or let go since an older version must not stay here (review item 2).
    pub fn drop_retired_lacking(
        &self,
        audit: &str,
        topic: &str,
        partition: i32,
        lo: Offset,
        hi: Offset,
        keep: &[String],
    ) -> Result<Vec<String>, StoreError> {
        let mut conn = self.lock();
        let ctx = || format!("drop the retired gaps of {audit}/{topic}-{partition} in {lo}..{hi}");
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.sq(ctx()))?;
        let ids: Vec<String> = {
            let mut stmt = tx
                .prepare_cached(
                    "SELECT id FROM gaps
                     WHERE audit = ?1 AND topic = ?2 AND partition = ?3 AND retired = 1
                       AND state <> 'acknowledged' AND first_offset >= ?4 AND first_offset < ?5",
                )
                .map_err(self.sq(ctx()))?;
            stmt.query_map(params![audit, topic, partition, lo, hi], |r| {
                r.get::<_, String>(0)
            })
            .map_err(self.sq(ctx()))?
            .collect::<Result<_, _>>()
            .map_err(self.sq(ctx()))?
        };
        let keep: HashSet<&str> = keep.iter().map(String::as_str).collect();
        let gone: Vec<String> = ids
            .into_iter()
            .filter(|id| !keep.contains(id.as_str()))
            .collect();
        {
            let mut stmt = tx
                .prepare_cached(
                    "DELETE FROM gaps WHERE id = ?1 AND retired = 1 AND state <> 'acknowledged'",
                )
                .map_err(self.sq(ctx()))?;
            for id in &gone {
                stmt.execute(params![id]).map_err(self.sq(ctx()))?;
            }
        }
        tx.commit().map_err(self.sq(ctx()))?;
        Ok(gone)
    }

    /// Writes retired gaps a previous owner handed over (chunks of the handover's side
    /// topic, applied in log order: a later chunk's row replaces an earlier one's) as
    /// retired rows, with their replay marks, in one transaction. An acknowledgement
    /// already in the store stays, and so does `unrecoverable`: Kafka deleting a gap's
    /// first record is never undone, so a chunk saying `open` (its owner had not seen the
    /// log start pass yet) does not reopen a row this store saw unrecoverable (review
    /// item 4).
    pub fn import_retired(&self, audit: &str, gaps: &[Gap]) -> Result<(), StoreError> {
        if gaps.is_empty() {
            return Ok(());
        }
        let mut gaps = gaps.to_vec();
        for g in gaps.iter_mut().filter(|g| g.state == GapState::Open) {
            if let Some(old) = self.get_gap(&g.id)?
                && old.state == GapState::Unrecoverable
            {
                g.state = GapState::Unrecoverable;
                g.unrecoverable_at = old.unrecoverable_at.or(g.unrecoverable_at);
            }
        }
        let gaps = gaps.as_slice();
        let ids: Vec<String> = gaps.iter().map(|g| g.id.clone()).collect();
        self.commit_round_retiring(
            audit,
            gaps,
            &[],
            KeyClaims::<&[u8]>::Changes(&[]),
            &ids,
            &[],
        )?;
        for g in gaps.iter().filter(|g| g.replayed_at.is_some()) {
            self.mark_replayed(&g.id)?;
        }
        Ok(())
    }
}

impl Store {
    /// The partitions of `audit` whose retired gaps are on handover topic `handover`'s side
    /// topic as this store holds them (schema v14): a new assignment need not sweep them.
    pub fn handover_swept(
        &self,
        handover: &str,
        audit: &str,
    ) -> Result<std::collections::BTreeMap<(String, i32), u64>, StoreError> {
        self.terms_by_partition(
            "SELECT topic, partition, term FROM handover_swept
             WHERE handover_topic = ?1 AND audit = ?2",
            handover,
            audit,
            format!("read the swept partitions of {audit}"),
        )
    }

    /// The `(topic, partition) → term` rows `sql` selects for one handover topic and audit
    /// (`?1`, `?2`): the swept marks and the used terms are read the same way.
    fn terms_by_partition(
        &self,
        sql: &str,
        handover: &str,
        audit: &str,
        ctx: String,
    ) -> Result<std::collections::BTreeMap<(String, i32), u64>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(sql).map_err(self.sq(ctx.clone()))?;
        let rows = stmt
            .query_map(params![handover, audit], |r| {
                Ok(((r.get(0)?, r.get(1)?), r.get::<_, i64>(2)?))
            })
            .map_err(self.sq(ctx.clone()))?
            .collect::<Result<Vec<((String, i32), i64)>, _>>()
            .map_err(self.sq(ctx))?;
        Ok(rows
            .into_iter()
            .map(|(tp, term)| (tp, u64::try_from(term).unwrap_or(0)))
            .collect())
    }

    /// Records whether the retired gaps of one partition are on `handover`'s side topic as
    /// this store holds them, and under which ownership term (`Some`; `None`: they are not
    /// known to be, e.g. rows came inline in a format-2 state, and must be swept).
    pub fn set_handover_swept(
        &self,
        handover: &str,
        audit: &str,
        topic: &str,
        partition: i32,
        term: Option<u64>,
    ) -> Result<(), StoreError> {
        let conn = self.lock();
        let ctx = || format!("mark the retired gaps of {audit}/{topic}-{partition} swept");
        match term {
            Some(term) => conn.execute(
                "INSERT OR REPLACE INTO handover_swept
                    (handover_topic, audit, topic, partition, at, term)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    handover,
                    audit,
                    topic,
                    partition,
                    fmt_ts(Utc::now()),
                    i64::try_from(term).unwrap_or(i64::MAX)
                ],
            ),
            None => conn.execute(
                "DELETE FROM handover_swept
                 WHERE handover_topic = ?1 AND audit = ?2 AND topic = ?3 AND partition = ?4",
                params![handover, audit, topic, partition],
            ),
        }
        .map_err(self.sq(ctx()))?;
        Ok(())
    }
}

/// An unfinished import of a partition's handover state ([`Store::set_importing`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportMark {
    /// The owner whose state the import began from.
    pub owner: String,
    /// That state's term.
    pub term: u64,
    /// That state's settled offset: the store's verdicts below it are the state's, the
    /// import's to complete; `None` in marks of schema v15.
    pub below: Option<Offset>,
    /// That state's generation (of two states of one owner and term, the later one has
    /// the higher); `None` in marks of schema v15.
    pub generation: Option<u64>,
}

/// Partitions importing another owner's state: `(topic, partition) → mark`.
pub type Importing = std::collections::BTreeMap<(String, i32), ImportMark>;

impl Store {
    /// Records that one partition imports the state `mark` names from `handover`'s side
    /// topic (`Some`), or that it finished (`None`).
    pub fn set_importing(
        &self,
        handover: &str,
        audit: &str,
        topic: &str,
        partition: i32,
        mark: Option<&ImportMark>,
    ) -> Result<(), StoreError> {
        let conn = self.lock();
        let ctx = || format!("mark the import of {audit}/{topic}-{partition}");
        let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        match mark {
            Some(m) => conn.execute(
                "INSERT OR REPLACE INTO handover_importing
                    (handover_topic, audit, topic, partition, owner, term, below, generation)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    handover,
                    audit,
                    topic,
                    partition,
                    m.owner,
                    int(m.term),
                    m.below,
                    m.generation.map(int)
                ],
            ),
            None => conn.execute(
                "DELETE FROM handover_importing
                 WHERE handover_topic = ?1 AND audit = ?2 AND topic = ?3 AND partition = ?4",
                params![handover, audit, topic, partition],
            ),
        }
        .map_err(self.sq(ctx()))?;
        // What a resume noted belongs to the import that ended or the one replaced.
        conn.execute(
            "DELETE FROM handover_resumed
             WHERE handover_topic = ?1 AND audit = ?2 AND topic = ?3 AND partition = ?4",
            params![handover, audit, topic, partition],
        )
        .map_err(self.sq(ctx()))?;
        Ok(())
    }

    /// Of gaps `ids` of one partition: which an import resumed from a newer state may take
    /// (review 26b, G1 and G2): those this store has no row of and did not fold, and those
    /// a resume wrote before (their later versions replace them). Returns them.
    pub fn resumable_ids(
        &self,
        handover: &str,
        audit: &str,
        topic: &str,
        partition: i32,
        ids: &[String],
    ) -> Result<HashSet<String>, StoreError> {
        let conn = self.lock();
        let read = || -> rusqlite::Result<HashSet<String>> {
            let mut noted = conn.prepare_cached(
                "SELECT folded FROM handover_resumed WHERE handover_topic = ?1 AND audit = ?2
                   AND topic = ?3 AND partition = ?4 AND id = ?5",
            )?;
            let mut row = conn.prepare_cached("SELECT 1 FROM gaps WHERE id = ?1")?;
            ids_kept(ids, |id| {
                let folded: Option<bool> = noted
                    .query_row(params![handover, audit, topic, partition, id], |r| r.get(0))
                    .optional()?;
                Ok(match folded {
                    Some(folded) => !folded,
                    None => !row.exists(params![id])?,
                })
            })
        };
        read().map_err(self.sq(format!(
            "read the resumed import's gaps of {audit}/{topic}-{partition}"
        )))
    }

    /// Of gaps `ids` of one partition: those this store folded into an overflow gap under
    /// an import mark (their rows went: no import takes them back, review 26c H2).
    pub fn folded_under_mark(
        &self,
        handover: &str,
        audit: &str,
        topic: &str,
        partition: i32,
        ids: &[String],
    ) -> Result<HashSet<String>, StoreError> {
        let conn = self.lock();
        let read = || -> rusqlite::Result<HashSet<String>> {
            let mut stmt = conn.prepare_cached(
                "SELECT 1 FROM handover_resumed WHERE handover_topic = ?1 AND audit = ?2
                   AND topic = ?3 AND partition = ?4 AND id = ?5 AND folded = 1",
            )?;
            ids_kept(ids, |id| {
                stmt.exists(params![handover, audit, topic, partition, id])
            })
        };
        read().map_err(self.sq(format!(
            "read the folded gaps of {audit}/{topic}-{partition}"
        )))
    }

    /// Notes that an import resumed from a newer state wrote gaps `ids` of one partition.
    pub fn note_resumed(
        &self,
        handover: &str,
        audit: &str,
        topic: &str,
        partition: i32,
        ids: &[String],
    ) -> Result<(), StoreError> {
        let conn = self.lock();
        let ctx = || format!("note the resumed import's gaps of {audit}/{topic}-{partition}");
        let mut stmt = conn
            .prepare_cached(
                "INSERT OR IGNORE INTO handover_resumed
                    (handover_topic, audit, topic, partition, id, folded)
                 VALUES (?1, ?2, ?3, ?4, ?5, 0)",
            )
            .map_err(self.sq(ctx()))?;
        for id in ids {
            stmt.execute(params![handover, audit, topic, partition, id])
                .map_err(self.sq(ctx()))?;
        }
        Ok(())
    }

    /// The partitions of `audit` importing a state from `handover`'s side topic.
    pub fn importing(&self, handover: &str, audit: &str) -> Result<Importing, StoreError> {
        let conn = self.lock();
        let ctx = || format!("read the imports of {audit}");
        let mut stmt = conn
            .prepare_cached(
                "SELECT topic, partition, owner, term, below, generation FROM handover_importing
                 WHERE handover_topic = ?1 AND audit = ?2",
            )
            .map_err(self.sq(ctx()))?;
        let rows = stmt
            .query_map(params![handover, audit], |r| {
                Ok((
                    (r.get::<_, String>(0)?, r.get::<_, i32>(1)?),
                    ImportMark {
                        owner: r.get(2)?,
                        term: u64::try_from(r.get::<_, i64>(3)?).unwrap_or(0),
                        below: r.get(4)?,
                        generation: r
                            .get::<_, Option<i64>>(5)?
                            .map(|g| u64::try_from(g).unwrap_or(0)),
                    },
                ))
            })
            .map_err(self.sq(ctx()))?
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.sq(ctx()))?;
        Ok(rows.into_iter().collect())
    }
}

impl Store {
    /// The highest ownership term this instance used per partition of `audit` on
    /// `handover`: `(topic, partition) → term`.
    pub fn used_terms(
        &self,
        handover: &str,
        audit: &str,
    ) -> Result<std::collections::BTreeMap<(String, i32), u64>, StoreError> {
        self.terms_by_partition(
            "SELECT topic, partition, term FROM handover_terms
             WHERE handover_topic = ?1 AND audit = ?2",
            handover,
            audit,
            format!("read the terms used for {audit}"),
        )
    }

    /// Records `term` as used for one partition (never lowers what is recorded).
    pub fn use_term(
        &self,
        handover: &str,
        audit: &str,
        topic: &str,
        partition: i32,
        term: u64,
    ) -> Result<(), StoreError> {
        let t = i64::try_from(term).unwrap_or(i64::MAX);
        self.lock()
            .execute(
                "INSERT INTO handover_terms (handover_topic, audit, topic, partition, term)
                 VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (handover_topic, audit, topic, partition)
                 DO UPDATE SET term = MAX(term, excluded.term)",
                params![handover, audit, topic, partition, t],
            )
            .map_err(self.sq(format!(
                "record the term used for {audit}/{topic}-{partition}"
            )))?;
        Ok(())
    }
}

impl Store {
    /// Of the gaps `ids`, those this store marks retired are marked not retired (a ledger
    /// holds them: see `take_over`); returns them.
    pub fn unretire(&self, ids: &[String]) -> Result<Vec<String>, StoreError> {
        let mut conn = self.lock();
        let ctx = || "unmark gaps a ledger holds as retired".to_string();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.sq(ctx()))?;
        let mut back = Vec::new();
        {
            let mut stmt = tx
                .prepare_cached("UPDATE gaps SET retired = 0 WHERE id = ?1 AND retired = 1")
                .map_err(self.sq(ctx()))?;
            for id in ids {
                if stmt.execute(params![id]).map_err(self.sq(ctx()))? > 0 {
                    back.push(id.clone());
                }
            }
        }
        tx.commit().map_err(self.sq(ctx()))?;
        Ok(back)
    }
}

impl Store {
    /// Forgets, for every handover topic, that the retired gaps of `partitions` of `audit`
    /// are on its side topic: gaps of theirs are about to retire (schema v14).
    pub fn clear_handover_swept(
        &self,
        audit: &str,
        partitions: &[(String, i32)],
    ) -> Result<(), StoreError> {
        if partitions.is_empty() {
            return Ok(());
        }
        let conn = self.lock();
        let ctx = || format!("unmark the swept partitions of {audit}");
        // Its unpublished chunks go too: a whole sweep covers them.
        for sql in [
            "DELETE FROM handover_swept WHERE audit = ?1 AND topic = ?2 AND partition = ?3",
            "DELETE FROM handover_unpublished WHERE audit = ?1 AND topic = ?2 AND partition = ?3",
            "DELETE FROM handover_importing WHERE audit = ?1 AND topic = ?2 AND partition = ?3",
            "DELETE FROM handover_resumed WHERE audit = ?1 AND topic = ?2 AND partition = ?3",
        ] {
            let mut stmt = conn.prepare_cached(sql).map_err(self.sq(ctx()))?;
            for (topic, partition) in partitions {
                stmt.execute(params![audit, topic, partition])
                    .map_err(self.sq(ctx()))?;
            }
        }
        Ok(())
    }
}

/// Chunks of partitions, `(topic, partition) → chunks`.
pub type PartitionChunks =
    std::collections::BTreeMap<(String, i32), std::collections::BTreeSet<i64>>;

impl Store {
    /// This store's id (schema v14), made at its first call from the time and the process
    /// id and kept: it names the handover owner across restarts (`handover::owner_of`). A
    /// copy of the file given to another instance must lose it (`DELETE FROM instance`), or
    /// the two would take each other's states for their own.
    pub fn instance_id(&self) -> Result<String, StoreError> {
        let mut conn = self.lock();
        let ctx = || "read or make the store's instance id".to_string();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.sq(ctx()))?;
        let id: Option<String> = tx
            .query_row("SELECT id FROM instance LIMIT 1", [], |r| r.get(0))
            .optional()
            .map_err(self.sq(ctx()))?;
        let id = match id {
            Some(id) => id,
            None => {
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0);
                let id = format!("{nanos:x}-{:x}", std::process::id());
                tx.execute("INSERT INTO instance (id) VALUES (?1)", params![id])
                    .map_err(self.sq(ctx()))?;
                id
            }
        };
        tx.commit().map_err(self.sq(ctx()))?;
        Ok(id)
    }

    /// Notes chunks of `audit` whose gaps a write is about to retire or acknowledge, for
    /// handover topic `handover`: until [`Store::clear_unpublished_chunks`] they are to be
    /// published again at the partition's next assignment (schema v14).
    pub fn note_unpublished_chunks(
        &self,
        handover: &str,
        audit: &str,
        chunks: &PartitionChunks,
    ) -> Result<(), StoreError> {
        if chunks.values().all(|c| c.is_empty()) {
            return Ok(());
        }
        let mut conn = self.lock();
        let ctx = || format!("note the unpublished chunks of {audit}");
        let tx = conn.transaction().map_err(self.sq(ctx()))?;
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO handover_unpublished
                        (handover_topic, audit, topic, partition, chunk)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(self.sq(ctx()))?;
            for ((topic, partition), cs) in chunks {
                for c in cs {
                    stmt.execute(params![handover, audit, topic, partition, c])
                        .map_err(self.sq(ctx()))?;
                }
            }
        }
        tx.commit().map_err(self.sq(ctx()))
    }

    /// The chunks noted by [`Store::note_unpublished_chunks`] and not cleared since.
    pub fn unpublished_chunks(
        &self,
        handover: &str,
        audit: &str,
    ) -> Result<PartitionChunks, StoreError> {
        let conn = self.lock();
        let ctx = || format!("read the unpublished chunks of {audit}");
        let mut stmt = conn
            .prepare_cached(
                "SELECT topic, partition, chunk FROM handover_unpublished
                 WHERE handover_topic = ?1 AND audit = ?2",
            )
            .map_err(self.sq(ctx()))?;
        let rows = stmt
            .query_map(params![handover, audit], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i32>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })
            .map_err(self.sq(ctx()))?;
        let mut out = PartitionChunks::new();
        for r in rows {
            let (t, p, c) = r.map_err(self.sq(ctx()))?;
            out.entry((t, p)).or_default().insert(c);
        }
        Ok(out)
    }

    /// The side topic acknowledged chunks `chunks` of partition `topic`-`partition`.
    pub fn clear_unpublished_chunks(
        &self,
        handover: &str,
        audit: &str,
        topic: &str,
        partition: i32,
        chunks: &std::collections::BTreeSet<i64>,
    ) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let ctx = || format!("clear the unpublished chunks of {audit}/{topic}-{partition}");
        let tx = conn.transaction().map_err(self.sq(ctx()))?;
        {
            let mut stmt = tx
                .prepare_cached(
                    "DELETE FROM handover_unpublished WHERE handover_topic = ?1 AND audit = ?2
                        AND topic = ?3 AND partition = ?4 AND chunk = ?5",
                )
                .map_err(self.sq(ctx()))?;
            for c in chunks {
                stmt.execute(params![handover, audit, topic, partition, c])
                    .map_err(self.sq(ctx()))?;
            }
        }
        tx.commit().map_err(self.sq(ctx()))
    }
}

impl Store {
    /// The partitions of `audit` holding unresolved gaps (open, unrecoverable,
    /// unverifiable) or retired dead_lettered ones (counted until acknowledged): those
    /// [`Store::forget_unresolved`] has copies of to drop. Without reading the rows: through
    /// the `(audit, state)` index.
    pub fn partitions_with_unresolved_gaps(
        &self,
        audit: &str,
    ) -> Result<std::collections::BTreeSet<(String, i32)>, StoreError> {
        let conn = self.lock();
        let ctx = || format!("list the partitions with unresolved gaps of {audit}");
        let mut stmt = conn
            .prepare_cached(
                "SELECT DISTINCT topic, partition FROM gaps
                 WHERE audit = ?1 AND state IN ('open', 'unrecoverable', 'unverifiable', 'dead_lettered')
                   AND (state <> 'dead_lettered' OR retired = 1)",
            )
            .map_err(self.sq(ctx()))?;
        let rows = stmt
            .query_map(params![audit], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(self.sq(ctx()))?
            .collect::<Result<_, _>>()
            .map_err(self.sq(ctx()))?;
        Ok(rows)
    }
}

/// Of `ids`, those `keep` says yes to, each asked in turn.
fn ids_kept(
    ids: &[String],
    mut keep: impl FnMut(&str) -> rusqlite::Result<bool>,
) -> rusqlite::Result<HashSet<String>> {
    let mut out = HashSet::new();
    for id in ids {
        if keep(id)? {
            out.insert(id.clone());
        }
    }
    Ok(out)
}
