//! The acknowledgement log: operator acks, and the ordered log the daemon reads a round at a
//! time.

use super::{Store, StoreError, fmt_ts};
use crate::gap::Gap;
use crate::store::gaps::{GAP_COLUMNS, RawGap};
use chrono::Utc;
use rusqlite::{OptionalExtension, TransactionBehavior, params};

impl Store {
    /// Marks a gap acknowledged with the operator's reason (stops its alert). A later
    /// [`Store::commit_round`] never reverts it. `Ok(false)` when no gap has this id;
    /// [`StoreError::Resolved`] when its records arrived after all (`late`, `repaired`).
    pub fn ack(&self, id: &str, reason: &str) -> Result<bool, StoreError> {
        let mut conn = self.lock();
        let ctx = || format!("ack gap {id}");
        // Immediate: the write lock is taken (waiting out the busy timeout) before the read
        // below; a read transaction upgraded to a write fails at once with SQLITE_BUSY when
        // another writer committed meanwhile.
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.sq(ctx()))?;
        let state: Option<String> = tx
            .query_row("SELECT state FROM gaps WHERE id = ?1", params![id], |r| {
                r.get(0)
            })
            .optional()
            .map_err(self.sq(ctx()))?;
        match state.as_deref() {
            None => return Ok(false),
            Some(s @ ("late" | "repaired")) => {
                return Err(StoreError::Resolved {
                    id: id.to_string(),
                    state: s.to_string(),
                });
            }
            Some(_) => {}
        }
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

    /// Acknowledgements another instance gave (`(id, reason)`, as an import found them):
    /// applied to the rows this store holds that are neither acknowledged already nor
    /// resolved (`late`, `repaired`), each logged as [`Store::ack`] does (a ledger holding
    /// the gap takes it out at its next refresh). Returns the ids acknowledged here.
    pub fn take_acks(&self, acks: &[(String, String)]) -> Result<Vec<String>, StoreError> {
        if acks.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.lock();
        let ctx = || format!("take {} acknowledgements", acks.len());
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.sq(ctx()))?;
        let now = fmt_ts(Utc::now());
        let mut out = Vec::new();
        for (id, reason) in acks {
            let changed = tx
                .execute(
                    "UPDATE gaps SET state = 'acknowledged', ack_reason = ?2, updated_at = ?3
                     WHERE id = ?1 AND state NOT IN ('acknowledged', 'late', 'repaired')",
                    params![id, reason, now],
                )
                .map_err(self.sq(ctx()))?;
            if changed > 0 {
                tx.execute("INSERT INTO ack_log (gap_id) VALUES (?1)", params![id])
                    .map_err(self.sq(ctx()))?;
                out.push(id.clone());
            }
        }
        tx.commit().map_err(self.sq(ctx()))?;
        Ok(out)
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
}
