//! The replay log: one row per `gap-auditor replay` (and the demo's), so an operator can see
//! when and where a gap was replayed and what came of it, and a second replay of a gap the
//! daemon has not confirmed yet can say so when it refuses.

use super::{Store, StoreError, fmt_ts};
use crate::types::Offset;
use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, params};
use serde::Serialize;

/// One replay as the store keeps it: what was asked and what came of it.
/// One field per column of the store's replay log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplayRecord {
    /// When the replay finished.
    pub at: DateTime<Utc>,
    /// The gap replayed (`--gap`), or `None` for `--audit --partition --offsets`.
    pub gap_id: Option<String>,
    /// Audit name.
    pub audit: String,
    /// Topic read.
    pub topic: String,
    /// Partition read.
    pub partition: i32,
    /// First offset asked for (inclusive).
    pub first_offset: Offset,
    /// Last offset asked for (inclusive).
    pub last_offset: Offset,
    /// The topic the records were re-produced to; `None`: written into the sink.
    pub to_topic: Option<String>,
    /// `--dry-run`: nothing was written, `written` counts what would have been.
    pub dry_run: bool,
    /// `--force`: replayed although an earlier replay was not confirmed yet.
    pub forced: bool,
    /// Records written (or, dry, to be written).
    pub written: u64,
    /// Records already in the sink, skipped.
    pub present: u64,
    /// Records not expected in the sink (filter, undecodable, tombstone), skipped.
    pub filtered: u64,
    /// Records that could not be written.
    pub failed: u64,
    /// The sink took the write but not every row of it (Stream Load filtered rows).
    pub partial: bool,
    /// Why the replay stopped, when it did (nothing after it was written).
    pub error: Option<String>,
}

impl ReplayRecord {
    /// Where the records went, in words: `the sink` or `topic T`.
    pub fn destination(&self) -> String {
        match &self.to_topic {
            Some(t) => format!("topic {t}"),
            None => "the sink".to_owned(),
        }
    }
}

const REPLAY_COLUMNS: &str = "at, gap_id, audit, topic, partition, first_offset, last_offset, \
    to_topic, dry_run, forced, written, present, filtered, failed, partial, error";

/// A count as SQLite stores it (an i64); counts of one replay never come near the limit.
fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A logged replay as the handover needs it: (gap id, topic, partition, first offset, last
/// offset).
pub type ReplayedRange = (Option<String>, String, i32, Offset, Offset);

impl Store {
    /// Appends one replay to the log.
    pub fn record_replay(&self, r: &ReplayRecord) -> Result<(), StoreError> {
        let conn = self.lock();
        conn.execute(
            &format!(
                "INSERT INTO replays ({REPLAY_COLUMNS})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"
            ),
            params![
                fmt_ts(r.at),
                r.gap_id,
                r.audit,
                r.topic,
                r.partition,
                r.first_offset,
                r.last_offset,
                r.to_topic,
                r.dry_run,
                r.forced,
                count(r.written),
                count(r.present),
                count(r.filtered),
                count(r.failed),
                r.partial,
                r.error,
            ],
        )
        .map_err(self.sq(format!(
            "record the replay of {}/{}-{} offsets {}-{}",
            r.audit, r.topic, r.partition, r.first_offset, r.last_offset
        )))?;
        Ok(())
    }

    /// Every replay of gap `id`, oldest first.
    pub fn replays_of_gap(&self, id: &str) -> Result<Vec<ReplayRecord>, StoreError> {
        self.read_replays(
            &format!("SELECT {REPLAY_COLUMNS} FROM replays WHERE gap_id = ?1 ORDER BY seq"),
            id,
        )
    }

    /// The newest replay of gap `id` that wrote something (not a dry run): the one whose
    /// records the daemon has yet to confirm while the gap stays open.
    pub fn last_write_of_gap(&self, id: &str) -> Result<Option<ReplayRecord>, StoreError> {
        Ok(self
            .read_replays(
                &format!(
                    "SELECT {REPLAY_COLUMNS} FROM replays
                     WHERE gap_id = ?1 AND dry_run = 0 AND written > 0
                     ORDER BY seq DESC LIMIT 1"
                ),
                id,
            )?
            .pop())
    }

    /// When `replay` marked gap `id` ([`Store::mark_replayed`]); `None` when unmarked or no
    /// such gap.
    pub fn replayed_at(&self, id: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
        let at: Option<Option<String>> = self
            .lock()
            .query_row(
                "SELECT replayed_at FROM gaps WHERE id = ?1",
                params![id],
                |r| r.get(0),
            )
            .optional()
            .map_err(self.sq(format!("read gap {id}")))?;
        at.flatten()
            .map(|s| self.parse_ts(&s, &format!("gap {id} replayed_at")))
            .transpose()
    }

    fn read_replays(&self, sql: &str, id: &str) -> Result<Vec<ReplayRecord>, StoreError> {
        type Raw = (
            String,
            Option<String>,
            String,
            String,
            i32,
            i64,
            i64,
            Option<String>,
            bool,
            bool,
            [i64; 4],
            bool,
            Option<String>,
        );
        let ctx = || format!("read the replays of gap {id}");
        let raws: Vec<Raw> = {
            let conn = self.lock();
            let mut stmt = conn.prepare_cached(sql).map_err(self.sq(ctx()))?;
            let rows = stmt
                .query_map(params![id], |r| {
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
                        r.get(9)?,
                        [r.get(10)?, r.get(11)?, r.get(12)?, r.get(13)?],
                        r.get(14)?,
                        r.get(15)?,
                    ))
                })
                .map_err(self.sq(ctx()))?;
            rows.collect::<Result<_, _>>().map_err(self.sq(ctx()))?
        };
        let what = format!("replay of gap {id}");
        raws.into_iter()
            .map(|raw| {
                let (at, gap_id, audit, topic, partition, first, last, to_topic, dry, forced) = (
                    raw.0, raw.1, raw.2, raw.3, raw.4, raw.5, raw.6, raw.7, raw.8, raw.9,
                );
                // Negative counts were never written: one would mean a damaged file.
                let n = |v: i64| {
                    u64::try_from(v).map_err(|_| StoreError::Corrupt {
                        path: self.path.clone(),
                        what: format!("{what}: negative count {v}"),
                    })
                };
                let [w, p, f, x] = raw.10;
                Ok(ReplayRecord {
                    at: self.parse_ts(&at, &what)?,
                    gap_id,
                    audit,
                    topic,
                    partition,
                    first_offset: first,
                    last_offset: last,
                    to_topic,
                    dry_run: dry,
                    forced,
                    written: n(w)?,
                    present: n(p)?,
                    filtered: n(f)?,
                    failed: n(x)?,
                    partial: raw.11,
                    error: raw.12,
                })
            })
            .collect()
    }

    /// Replays of `audit` logged after `since` (the log's `seq`): (gap id, topic, partition,
    /// first offset, last offset) each, and the position to ask from next. What the daemon
    /// hands over again (a replay marks gaps `replayed`), without reading every gap.
    pub fn replays_since(
        &self,
        audit: &str,
        since: i64,
    ) -> Result<(Vec<ReplayedRange>, i64), StoreError> {
        let conn = self.lock();
        let ctx = || format!("read the replays of {audit} since {since}");
        let mut stmt = conn
            .prepare_cached(
                "SELECT seq, gap_id, topic, partition, first_offset, last_offset FROM replays
                 WHERE seq > ?1 AND audit = ?2 ORDER BY seq",
            )
            .map_err(self.sq(ctx()))?;
        let mut pos = since;
        let mut out = Vec::new();
        let rows = stmt
            .query_map(params![since, audit], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, i32>(3)?,
                    r.get::<_, i64>(4)?,
                    r.get::<_, i64>(5)?,
                ))
            })
            .map_err(self.sq(ctx()))?;
        for r in rows {
            let (seq, id, topic, partition, first, last) = r.map_err(self.sq(ctx()))?;
            pos = pos.max(seq);
            out.push((id, topic, partition, first, last));
        }
        Ok((out, pos))
    }

    /// The replay log's last position (`seq`), 0 when empty.
    pub fn replay_position(&self) -> Result<i64, StoreError> {
        let conn = self.lock();
        conn.query_row("SELECT COALESCE(MAX(seq), 0) FROM replays", [], |r| {
            r.get(0)
        })
        .map_err(self.sq("read the replay log's position".to_string()))
    }
}
