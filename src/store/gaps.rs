//! Gap rows: listing, lookup and the state changes of the CLI commands (`replay`,
//! `unrecoverable`, `forget`), with the row decoding that names the gap on corruption.

use super::{ALL_STATES, GapFilter, StateFilter, Store, StoreError, fmt_ts, parse_ts};
use crate::gap::{Gap, GapCause, GapState};
use crate::types::Offset;
use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, TransactionBehavior, params};
use std::path::Path;

/// Column list shared by every gap query, in [`RawGap::from_row`] order.
pub(super) const GAP_COLUMNS: &str = "id, audit, topic, partition, first_offset, last_offset, \
    missing_records, size_known, first_timestamp, last_timestamp, detected_at, state, \
    unrecoverable_at, ack_reason, cause, pipeline_commit_from, pipeline_commit_to, \
    pipeline_commit_at, shared_key, replayed_at, evidence";

/// How many columns [`GAP_COLUMNS`] names: a query's own columns after them start here.
pub(super) const GAP_COLUMN_COUNT: usize = 21;

/// A gap row as SQLite returns it, before timestamps and state are decoded (decoding errors
/// are reported as [`StoreError::Corrupt`] with the gap id, not as a bare SQLite error).
/// One field per column of [`GAP_COLUMNS`], in its order: the row is as wide as the table.
pub(super) struct RawGap {
    pub(super) id: String,
    audit: String,
    topic: String,
    partition: i32,
    first_offset: i64,
    last_offset: i64,
    missing_records: i64,
    size_known: bool,
    first_timestamp: Option<String>,
    last_timestamp: Option<String>,
    pub(super) detected_at: String,
    state: String,
    unrecoverable_at: Option<String>,
    ack_reason: Option<String>,
    cause: String,
    pipeline_commit_from: Option<i64>,
    pipeline_commit_to: Option<i64>,
    pipeline_commit_at: Option<String>,
    shared_key: bool,
    replayed_at: Option<String>,
    evidence: Option<String>,
}

impl RawGap {
    pub(super) fn from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawGap> {
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
            replayed_at: row.get(19)?,
            evidence: row.get(20)?,
        })
    }
}

/// What a marked gap query selects after [`GAP_COLUMNS`]: whether `replay` marked the gap,
/// and whether it is retired.
const MARKS: &str = "replayed_at IS NOT NULL, retired = 1";

/// Reads what [`MARKS`] selects.
fn marks(row: &rusqlite::Row<'_>) -> rusqlite::Result<(bool, bool)> {
    Ok((row.get(GAP_COLUMN_COUNT)?, row.get(GAP_COLUMN_COUNT + 1)?))
}

/// For a gap query that selects nothing after [`GAP_COLUMNS`].
fn nothing(_: &rusqlite::Row<'_>) -> rusqlite::Result<()> {
    Ok(())
}

impl Store {
    /// The rows `sql` selects for `params`, in its order: the gap's columns
    /// ([`GAP_COLUMNS`]) first, then what `rest` reads. Each row is decoded as it is read (a
    /// decoding error names the gap), so a long list never sits in memory twice; `context`
    /// names the read in an error.
    pub(super) fn query_gaps<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        context: String,
        rest: impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<(Gap, T)>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare_cached(sql).map_err(self.sq(context.clone()))?;
        let rows = stmt
            .query_map(params, |row| Ok((RawGap::from_row(row)?, rest(row)?)))
            .map_err(self.sq(context.clone()))?;
        let mut out = Vec::new();
        for row in rows {
            let (raw, t) = row.map_err(self.sq(context.clone()))?;
            out.push((self.decode_gap(raw)?, t));
        }
        Ok(out)
    }

    /// [`Self::query_gaps`] of a query that selects only the gap's columns.
    pub(super) fn query_plain_gaps(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        context: String,
    ) -> Result<Vec<Gap>, StoreError> {
        let gaps = self.query_gaps(sql, params, context, nothing)?;
        Ok(gaps.into_iter().map(|(g, ())| g).collect())
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
        self.query_plain_gaps(&sql, args.as_slice(), "list gaps".to_string())
    }

    /// Every gap of one partition of `audit`, with whether `replay` marked it and whether
    /// it is retired (in the store only, see `retired.rs`), in offset order. (The handover
    /// no longer reads this: see [`Store::unresolved_gaps_of_partition`].)
    pub fn gaps_of_partition(
        &self,
        audit: &str,
        topic: &str,
        partition: i32,
    ) -> Result<Vec<(Gap, bool, bool)>, StoreError> {
        let gaps = self.query_gaps(
            &format!(
                "SELECT {GAP_COLUMNS}, {MARKS} FROM gaps
                 WHERE audit = ?1 AND topic = ?2 AND partition = ?3 ORDER BY first_offset"
            ),
            params![audit, topic, partition],
            format!("list the gaps of {audit}/{topic}-{partition}"),
            marks,
        )?;
        Ok(gaps.into_iter().map(|(g, (r, t))| (g, r, t)).collect())
    }

    /// The unresolved gaps (open, unrecoverable, unverifiable) of one partition of `audit`
    /// that are not retired, with whether `replay` marked it and whether it is retired
    /// (never, here), in offset order: a handover base reads these (and the acknowledged
    /// ones it names by id), never the partition's resolved history (issue 41 item 3) nor
    /// its retired gaps (record format 3: they travel as chunks, `handover::retired`, and
    /// may be millions). Through the `(audit, state)` index.
    pub fn unresolved_gaps_of_partition(
        &self,
        audit: &str,
        topic: &str,
        partition: i32,
    ) -> Result<Vec<(Gap, bool, bool)>, StoreError> {
        let gaps = self.query_gaps(
            &unresolved_of_partition_sql(),
            params![audit, topic, partition],
            format!("list the unresolved gaps of {audit}/{topic}-{partition}"),
            marks,
        )?;
        Ok(gaps.into_iter().map(|(g, (r, t))| (g, r, t)).collect())
    }

    /// The gaps of `ids` that exist, with whether `replay` marked them and whether they are
    /// retired: what a handover delta reads (only the gaps that changed), by primary key.
    pub fn gaps_by_ids(&self, ids: &[String]) -> Result<Vec<(Gap, bool, bool)>, StoreError> {
        let conn = self.lock();
        let ctx = || format!("read {} gaps by id", ids.len());
        let mut stmt = conn
            .prepare_cached(&format!(
                "SELECT {GAP_COLUMNS}, {MARKS} FROM gaps WHERE id = ?1"
            ))
            .map_err(self.sq(ctx()))?;
        let mut raws = Vec::new();
        for id in ids {
            let row = stmt
                .query_row(params![id], |row| Ok((RawGap::from_row(row)?, marks(row)?)))
                .optional()
                .map_err(self.sq(ctx()))?;
            raws.extend(row);
        }
        drop(stmt);
        drop(conn);
        raws.into_iter()
            .map(|(raw, (replayed, retired))| Ok((self.decode_gap(raw)?, replayed, retired)))
            .collect()
    }

    /// The open gaps of one partition of `audit` that share an offset with
    /// `[first, last]`, in offset order: what `replay --offsets` repairs. Filtered in SQL:
    /// a partition may hold a million gaps in a long total loss, and only these are read.
    pub fn open_gaps_overlapping(
        &self,
        audit: &str,
        topic: &str,
        partition: i32,
        first: Offset,
        last: Offset,
    ) -> Result<Vec<Gap>, StoreError> {
        self.query_plain_gaps(
            &format!(
                "SELECT {GAP_COLUMNS} FROM gaps
                 WHERE audit = ?1 AND state = 'open' AND topic = ?2 AND partition = ?3
                   AND first_offset <= ?5 AND last_offset >= ?4
                 ORDER BY first_offset"
            ),
            params![audit, topic, partition, first, last],
            format!("list the open gaps of {audit}/{topic}-{partition} in {first}-{last}"),
        )
    }

    /// One gap by id.
    pub fn get_gap(&self, id: &str) -> Result<Option<Gap>, StoreError> {
        let gaps = self.query_plain_gaps(
            &format!("SELECT {GAP_COLUMNS} FROM gaps WHERE id = ?1"),
            params![id],
            format!("read gap {id}"),
        )?;
        Ok(gaps.into_iter().next())
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
    /// Acknowledged, late and repaired rows are never dropped, nor a dead_lettered one
    /// nobody retired (history: no handover state carries it). Retired rows go only with
    /// `retired_too` (an owner taking back its own format-3 state keeps them: they are not
    /// in its state, they are on the side topic as this store holds them), and then in
    /// every state their aggregate counts (review of format 3, T5: an unverifiable or
    /// dead_lettered copy the owner folded or acknowledged would count twice after the
    /// import, or list as unresolved here). Returns the dropped ids.
    pub fn forget_unresolved(
        &self,
        audit: &str,
        topic: &str,
        partition: i32,
        below: Offset,
        keep: &[String],
        retired_too: bool,
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
                        AND first_offset < ?4
                        AND ((retired = 0 AND state IN ('open', 'unrecoverable', 'unverifiable'))
                          OR (?5 AND retired = 1
                              AND state IN ('open', 'unrecoverable', 'unverifiable', 'dead_lettered')))",
                )
                .map_err(self.sq(ctx()))?;
            let rows = stmt
                .query_map(params![audit, topic, partition, below, retired_too], |r| {
                    r.get(0)
                })
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

    pub(super) fn decode_gap(&self, raw: RawGap) -> Result<Gap, StoreError> {
        decode_gap(&self.path, raw)
    }
}

/// A stored timestamp that may be absent.
fn parse_opt_ts(
    path: &Path,
    s: Option<String>,
    what: &str,
) -> Result<Option<DateTime<Utc>>, StoreError> {
    s.map(|s| parse_ts(path, &s, what)).transpose()
}

/// Decodes a row of the store file at `path` (shared by the store's own connection and the
/// read-only [`super::GapReader`]); a bad value is [`StoreError::Corrupt`] naming the gap.
pub(super) fn decode_gap(path: &Path, raw: RawGap) -> Result<Gap, StoreError> {
    let what = format!("gap {}", raw.id);
    let state = GapState::parse(&raw.state).ok_or_else(|| StoreError::Corrupt {
        path: path.to_path_buf(),
        what: format!("{what}: unknown state {:?}", raw.state),
    })?;
    let missing_records = u64::try_from(raw.missing_records).map_err(|_| StoreError::Corrupt {
        path: path.to_path_buf(),
        what: format!("{what}: negative missing_records {}", raw.missing_records),
    })?;
    Ok(Gap {
        first_timestamp: parse_opt_ts(path, raw.first_timestamp, &what)?,
        last_timestamp: parse_opt_ts(path, raw.last_timestamp, &what)?,
        detected_at: parse_ts(path, &raw.detected_at, &what)?,
        unrecoverable_at: parse_opt_ts(path, raw.unrecoverable_at, &what)?,
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
        pipeline_commit_at: parse_opt_ts(path, raw.pipeline_commit_at, &what)?,
        evidence: raw.evidence,
        shared_key: raw.shared_key,
        replayed_at: parse_opt_ts(path, raw.replayed_at, &what)?,
    })
}

/// The query of [`Store::unresolved_gaps_of_partition`]: through the `(audit, state)`
/// index, so resolved rows are never visited.
pub(super) fn unresolved_of_partition_sql() -> String {
    format!(
        "SELECT {GAP_COLUMNS}, {MARKS} FROM gaps
         WHERE audit = ?1 AND state IN ('open', 'unrecoverable', 'unverifiable')
           AND topic = ?2 AND partition = ?3 AND retired = 0 ORDER BY first_offset"
    )
}
