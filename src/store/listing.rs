//! The gap listing for readers that must never hold up the audit (`/api/gaps`): a
//! read-only SQLite connection of their own, and pages in one stable order with a keyset
//! cursor.
//!
//! **Why a connection of its own.** [`Store`] keeps one connection behind a mutex, and every
//! verify round writes through it. A listing that read through that connection held the
//! mutex for as long as it read (seconds at 100,000 gaps), and the round's verdicts waited.
//! In WAL mode a reader on another connection never blocks the writer, nor the writer it;
//! the background checkpoint is PASSIVE and does not wait for readers either.
//!
//! **Order and cursor.** Newest detected first, ties by id (the order `gap-auditor gaps` and
//! the whole `/api/gaps` array always had). A page starts strictly after the cursor's
//! `(detected_at, id)`, with no OFFSET. A gap's id never changes and its `detected_at` can
//! only move earlier (the upsert keeps the earliest: a re-detection after a crash, or a
//! handover that knew of an earlier one), that is further down the listing. So a gap that
//! stays stored while a client pages is listed: exactly once, unless its `detected_at`
//! moved earlier past the cursor after it was listed, in which case it comes again (never
//! missed; a client that counts should key on `id`). That holds for a cursor that keeps
//! the position it was listed at ([`GapCursor::at`]; `/api/gaps` puts it in the `Link` as
//! `at`): resolved from the id alone, the cursor gap's own move would skip every gap
//! between its old and new place. A gap detected after the listing began
//! sorts before the cursor and is not listed (the next listing has it).
//!
//! **No long snapshot.** Each page is one short read (its own implicit transaction): a
//! client that reads a streamed listing slowly holds no SQLite snapshot while it stalls, so
//! the WAL checkpoint is not held back by it.

use super::{ALL_STATES, BUSY_TIMEOUT, GapFilter, StateFilter, StoreError, fmt_ts};
use crate::gap::Gap;
use crate::store::gaps::{GAP_COLUMNS, RawGap, decode_gap};
use chrono::{DateTime, Utc};
use rusqlite::types::Value;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use std::path::{Path, PathBuf};

/// The largest page a reader may ask for (`limit`): ~500 B of JSON a gap, so a page's
/// answer stays under ~5 MB however many gaps are stored.
pub const MAX_PAGE: usize = 10_000;

/// A position in the listing order: "after this gap". Built from a stored gap (by
/// [`GapReader::cursor`] or as a page's [`GapPage::next`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GapCursor {
    /// The gap's `detected_at` exactly as stored (fixed-width text, so text order is time
    /// order), not re-formatted: the comparison must meet the stored bytes.
    detected_at: String,
    id: String,
}

impl GapCursor {
    /// The id of the gap the cursor points after: what a client passes back as `after`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The `detected_at` the gap had when it was listed, as stored: what a client passes
    /// back as `at`, so the next page starts where this one ended even if the gap's
    /// `detected_at` has moved since.
    pub fn detected_at(&self) -> &str {
        &self.detected_at
    }

    /// The position "after gap `id` as listed with `detected_at`" (an RFC 3339 time, as
    /// [`GapCursor::detected_at`] gave it); `None` when `detected_at` is not such a time.
    /// Needs no stored gap: the gap may have moved or left the store since.
    pub fn at(detected_at: &str, id: &str) -> Option<GapCursor> {
        let t = DateTime::parse_from_rfc3339(detected_at).ok()?;
        Some(GapCursor {
            // The stored spelling, so the comparison meets the stored bytes.
            detected_at: fmt_ts(t.with_timezone(&Utc)),
            id: id.to_string(),
        })
    }
}

/// One page of the listing.
#[derive(Debug, Clone, PartialEq)]
pub struct GapPage {
    /// At most the asked `limit` gaps, in listing order.
    pub gaps: Vec<Gap>,
    /// Where the next page starts: `Some` exactly when more gaps match after this page.
    pub next: Option<GapCursor>,
}

/// A read-only connection to the store file, for listings. Not shared: open one per
/// listing (cheap: no schema work, no lock taken), and move it between threads as needed.
pub struct GapReader {
    conn: Connection,
    path: PathBuf,
}

impl std::fmt::Debug for GapReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GapReader")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Which of the page queries [`page_sql`] builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    /// From the top of the listing.
    First,
    /// The cursor's own `detected_at`, ids after the cursor's.
    Ties,
    /// Everything detected before the cursor's gap.
    Older,
}

/// The SQL of one page query and its arguments in placeholder order. The filter values are
/// bound, never spliced. `INDEXED BY` pins the listing index (schema v10): without it the
/// planner may take `gaps_audit_state` for an `audit = ?` filter and sort every gap of the
/// audit for each page.
pub(super) fn page_sql(
    filter: &GapFilter,
    part: Part,
    after: Option<&GapCursor>,
    limit: usize,
) -> (String, Vec<Value>) {
    let mut sql = format!("SELECT {GAP_COLUMNS} FROM gaps INDEXED BY gaps_listing WHERE ");
    let mut args = Vec::new();
    match (part, after) {
        (Part::Ties, Some(c)) => {
            sql.push_str("detected_at = ? AND id > ?");
            args.push(Value::Text(c.detected_at.clone()));
            args.push(Value::Text(c.id.clone()));
        }
        (Part::Older, Some(c)) => {
            sql.push_str("detected_at < ?");
            args.push(Value::Text(c.detected_at.clone()));
        }
        _ => sql.push_str("1 = 1"),
    }
    if !matches!(filter.state, StateFilter::All) {
        let states: Vec<&str> = ALL_STATES
            .iter()
            .filter(|s| filter.state.matches(**s))
            .map(|s| s.as_str())
            .collect();
        let marks = vec!["?"; states.len()].join(", ");
        sql.push_str(&format!(" AND state IN ({marks})"));
        args.extend(states.into_iter().map(|s| Value::Text(s.to_string())));
    }
    if let Some(audit) = &filter.audit {
        sql.push_str(" AND audit = ?");
        args.push(Value::Text(audit.clone()));
    }
    sql.push_str(match part {
        // One detected_at: id order is the listing order.
        Part::Ties => " ORDER BY id ASC LIMIT ?",
        Part::First | Part::Older => " ORDER BY detected_at DESC, id ASC LIMIT ?",
    });
    args.push(Value::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
    (sql, args)
}

impl GapReader {
    /// Opens `path` (the store file, [`Store::path`]) read-only. The file must exist and be
    /// at this binary's schema: open the [`Store`] first, which migrates it.
    ///
    /// [`Store`]: super::Store
    /// [`Store::path`]: super::Store::path
    pub fn open(path: &Path) -> Result<GapReader, StoreError> {
        let sq = |context: &str| {
            let path = path.to_path_buf();
            let context = context.to_string();
            move |source| StoreError::Sqlite {
                path,
                context,
                source,
            }
        };
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).map_err(sq("open read-only"))?;
        // A reader waits only while another process recovers the WAL, never for a writer.
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(sq("set busy_timeout"))?;
        Ok(GapReader {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// The cursor of gap `id` (`None`: no such gap stored, e.g. dropped after its partition
    /// was handed to another instance).
    pub fn cursor(&self, id: &str) -> Result<Option<GapCursor>, StoreError> {
        self.conn
            .query_row(
                "SELECT detected_at, id FROM gaps WHERE id = ?1",
                params![id],
                |r| {
                    Ok(GapCursor {
                        detected_at: r.get(0)?,
                        id: r.get(1)?,
                    })
                },
            )
            .optional()
            .map_err(|source| self.error(format!("read gap {id}"), source))
    }

    /// Up to `limit` gaps matching `filter` after `after` (from the top when `None`), in
    /// listing order. Reads one gap more than it returns to know whether more remain.
    pub fn page(
        &self,
        filter: &GapFilter,
        after: Option<&GapCursor>,
        limit: usize,
    ) -> Result<GapPage, StoreError> {
        let want = limit.saturating_add(1);
        let mut rows = Vec::new();
        match after {
            None => self.query(filter, Part::First, None, want, &mut rows)?,
            Some(c) => {
                // Two index seeks rather than one `(d < ? OR (d = ? AND id > ?))`, which
                // SQLite would answer by walking the index from the top for every page.
                self.query(filter, Part::Ties, Some(c), want, &mut rows)?;
                if rows.len() < want {
                    let rest = want - rows.len();
                    self.query(filter, Part::Older, Some(c), rest, &mut rows)?;
                }
            }
        }
        let more = rows.len() > limit;
        rows.truncate(limit);
        let next = match rows.last() {
            Some(last) if more => Some(GapCursor {
                detected_at: last.detected_at.clone(),
                id: last.id.clone(),
            }),
            _ => None,
        };
        let gaps = rows
            .into_iter()
            .map(|raw| decode_gap(&self.path, raw))
            .collect::<Result<_, _>>()?;
        Ok(GapPage { gaps, next })
    }

    fn query(
        &self,
        filter: &GapFilter,
        part: Part,
        after: Option<&GapCursor>,
        limit: usize,
        out: &mut Vec<RawGap>,
    ) -> Result<(), StoreError> {
        let (sql, args) = page_sql(filter, part, after, limit);
        let ctx = || "list gaps".to_string();
        let mut stmt = self
            .conn
            .prepare_cached(&sql)
            .map_err(|e| self.error(ctx(), e))?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(args), RawGap::from_row)
            .map_err(|e| self.error(ctx(), e))?;
        for row in rows {
            out.push(row.map_err(|e| self.error(ctx(), e))?);
        }
        Ok(())
    }

    /// The connection itself (tests that hold a statement open on it).
    #[cfg(test)]
    pub(super) fn conn(&self) -> &Connection {
        &self.conn
    }

    fn error(&self, context: String, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.clone(),
            context,
            source,
        }
    }
}
