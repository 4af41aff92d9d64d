//! Rounds and progress: one transaction per verify round (gaps, partition progress, key
//! counts), and the progress a restart resumes from.

use super::{PartitionProgress, ProgressProblem, Store, StoreError, StoredProgress, fmt_ts};
use crate::gap::Gap;
use crate::store::items::{ItemError, read_items, replace_items, write_items};
use crate::store::keys::{KeyClaims, write_key_claims};
use chrono::{DateTime, Utc};
use rusqlite::{TransactionBehavior, params};

impl Store {
    /// Writes one verify round in one transaction: upserts `gaps` by id and the per-partition
    /// `progress` of `audit`. An upsert updates offsets, counts, timestamps and state, but
    /// never overwrites what an operator set: a gap in state `acknowledged` stays
    /// acknowledged, an `ack_reason` is kept, and an acknowledged gap never grows: the
    /// acknowledgement covers the records it held when it was given (a round under way when
    /// the ack landed may have extended it; the ledger keeps those records open, issue 35
    /// item 7). Its count still falls as records inside that extent arrive late. `detected_at` keeps the earliest value,
    /// so a re-detection after a crash does not make an old gap look new.
    pub fn commit_round(
        &self,
        audit: &str,
        gaps: &[Gap],
        progress: &[PartitionProgress],
    ) -> Result<(), StoreError> {
        self.commit_round_with_keys::<&[u8]>(audit, gaps, progress, KeyClaims::Changes(&[]))
    }

    /// [`Self::commit_round`], plus key_columns confirmed counts in the same transaction:
    /// `(packed key, confirmed)` (see [`KeyClaims`]).
    pub fn commit_round_with_keys<K: AsRef<[u8]>>(
        &self,
        audit: &str,
        gaps: &[Gap],
        progress: &[PartitionProgress],
        keys: KeyClaims<'_, K>,
    ) -> Result<(), StoreError> {
        self.commit_round_retiring(audit, gaps, progress, keys, &[], &[])
    }

    /// [`Self::commit_round_with_keys`], and the gaps (by id) that left the daemon's memory
    /// this round marked retired in the same transaction as the ledger write that drops
    /// their items: the retired rows are exactly the ones no ledger holds (`retired.rs`).
    /// `folded`: rows of gaps folded into their partition's overflow gap (`max_open_gaps`),
    /// deleted as the overflow gap that now counts their records is written.
    pub fn commit_round_retiring<K: AsRef<[u8]>>(
        &self,
        audit: &str,
        gaps: &[Gap],
        progress: &[PartitionProgress],
        keys: KeyClaims<'_, K>,
        retired: &[String],
        folded: &[String],
    ) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let now = fmt_ts(Utc::now());
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.sq(format!("begin round of audit {audit}")))?;
        // Under the write lock: an acknowledgement cannot land between this look and the
        // write. A folded row an operator acknowledged after the round read the
        // acknowledgements would stay, and the overflow gap would count its records too.
        let acked = super::retired::acknowledged(&tx, folded)
            .map_err(self.sq(format!("read the folded gaps of audit {audit}")))?;
        if !acked.is_empty() {
            return Err(StoreError::FoldedAcknowledged { ids: acked });
        }
        {
            let mut upsert_gap = tx
                .prepare_cached(
                    "INSERT INTO gaps (id, audit, topic, partition, first_offset, last_offset,
                        missing_records, size_known, first_timestamp, last_timestamp,
                        detected_at, state, unrecoverable_at, ack_reason, updated_at,
                        cause, pipeline_commit_from, pipeline_commit_to, pipeline_commit_at,
                        shared_key, evidence)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15,
                        ?16, ?17, ?18, ?19, ?20, ?21)
                     ON CONFLICT (id) DO UPDATE SET
                        last_offset      = CASE WHEN gaps.state = 'acknowledged'
                                                THEN gaps.last_offset
                                                ELSE excluded.last_offset END,
                        missing_records  = CASE WHEN gaps.state = 'acknowledged'
                                                     AND excluded.last_offset > gaps.last_offset
                                                THEN gaps.missing_records
                                                ELSE excluded.missing_records END,
                        size_known       = excluded.size_known,
                        first_timestamp  = excluded.first_timestamp,
                        last_timestamp   = CASE WHEN gaps.state = 'acknowledged'
                                                     AND excluded.last_offset > gaps.last_offset
                                                THEN gaps.last_timestamp
                                                ELSE excluded.last_timestamp END,
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
                        shared_key           = excluded.shared_key,
                        -- Decided once, when the gap was found: a copy without it (a build
                        -- before it, a retired gap's compact form) does not erase it.
                        -- An overflow gap (`folded`) keeps its first gap's row, not its words.
                        evidence             = CASE WHEN excluded.cause = 'folded' THEN NULL
                                                    ELSE COALESCE(gaps.evidence, excluded.evidence)
                                               END",
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
                        gap.evidence,
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
                let item_err = |e: ItemError| {
                    e.into_store(&self.path, format!("write the {}", what()), &what())
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
            write_key_claims(&tx, audit, keys)
                .map_err(self.sq(format!("write the key book of audit {audit}")))?;
            super::retired::mark(&tx, retired)
                .map_err(self.sq(format!("mark the retired gaps of audit {audit}")))?;
            super::retired::fold(&tx, folded)
                .map_err(self.sq(format!("fold gaps of audit {audit}")))?;
        }
        tx.commit()
            .map_err(self.sq(format!("commit round of audit {audit}")))?;
        drop(conn);
        self.checkpoint_soon();
        Ok(())
    }

    /// Forgets the progress of one partition of `audit` (its settled offset and ledger): the
    /// store is about to let the partition's gaps go (another instance owns it and took its
    /// state over), and a progress kept without them would later resume as "further" than
    /// the handover with gaps missing (review of format 3, F1). Without it the partition
    /// comes back from the handover (or the group's commit), as one never followed here.
    pub fn forget_progress(
        &self,
        audit: &str,
        topic: &str,
        partition: i32,
    ) -> Result<(), StoreError> {
        let mut conn = self.lock();
        let ctx = || format!("forget the progress of {audit} {topic}-{partition}");
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.sq(ctx()))?;
        for sql in [
            "DELETE FROM progress WHERE audit = ?1 AND topic = ?2 AND partition = ?3",
            "DELETE FROM ledger_items WHERE audit = ?1 AND topic = ?2 AND partition = ?3",
        ] {
            tx.execute(sql, params![audit, topic, partition])
                .map_err(self.sq(ctx()))?;
        }
        tx.commit().map_err(self.sq(ctx()))
    }

    /// Progress rows of one audit, ordered by topic and partition. Strict: any unreadable
    /// row or item is an error naming it; the daemon reads with
    /// [`Self::load_progress_checked`], which keeps going per partition.
    pub fn load_progress(&self, audit: &str) -> Result<Vec<PartitionProgress>, StoreError> {
        let read = self.load_progress_checked(audit)?;
        match read.problems.into_iter().next() {
            Some(p) => Err(StoreError::Corrupt {
                path: self.path.clone(),
                what: format!(
                    "progress of {audit}/{}-{}: {}",
                    p.topic, p.partition, p.what
                ),
            }),
            None => Ok(read.rows),
        }
    }

    /// Progress rows of one audit, ordered by topic and partition, each partition on its
    /// own: a row or ledger item that cannot be read is reported in
    /// [`StoredProgress::problems`] and the rest of that partition (and every other one) is
    /// still returned. An unreadable ledger head reads as an empty one (it holds only the
    /// tail gap: the next missing record then starts a new gap); an unreadable item is left
    /// out; an unreadable settled offset leaves the partition's row out. Errors only when
    /// the store itself cannot be queried.
    pub fn load_progress_checked(&self, audit: &str) -> Result<StoredProgress, StoreError> {
        let conn = self.lock();
        let ctx = || format!("load progress of audit {audit}");
        let mut stmt = conn
            .prepare_cached(
                "SELECT topic, partition, settled, ledger, updated_at FROM progress
                 WHERE audit = ?1 ORDER BY topic, partition",
            )
            .map_err(self.sq(ctx()))?;
        // Read as SQLite values: one bad cell must not fail the query of every partition.
        type Cells = (
            String,
            i32,
            rusqlite::types::Value,
            rusqlite::types::Value,
            rusqlite::types::Value,
        );
        let rows: Vec<Cells> = stmt
            .query_map(params![audit], |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, i32>(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                ))
            })
            .map_err(self.sq(ctx()))?
            .collect::<Result<_, _>>()
            .map_err(self.sq(ctx()))?;
        let mut out = StoredProgress::default();
        for (topic, partition, settled, ledger, updated_at) in rows {
            let mut problem = |what: String| {
                out.problems.push(ProgressProblem {
                    topic: topic.clone(),
                    partition,
                    what,
                })
            };
            use rusqlite::types::Value;
            let Value::Integer(settled) = settled else {
                problem(format!(
                    "the settled offset is not an integer ({settled:?}); the partition \
                     resumes from the auditor group's commit"
                ));
                continue;
            };
            let mut ledger = match ledger {
                Value::Text(t) => match serde_json::from_str::<serde_json::Value>(&t) {
                    Ok(v) if v.is_object() => v,
                    Ok(_) => {
                        problem("the ledger is not a JSON object; read as empty".to_string());
                        serde_json::json!({})
                    }
                    Err(e) => {
                        problem(format!("the ledger is not JSON ({e}); read as empty"));
                        serde_json::json!({})
                    }
                },
                other => {
                    problem(format!("the ledger is not text ({other:?}); read as empty"));
                    serde_json::json!({})
                }
            };
            for skipped in
                read_items(&conn, audit, &topic, partition, &mut ledger).map_err(|e| {
                    e.into_store(
                        &self.path,
                        format!("read the items of {audit}/{topic}-{partition}"),
                        "",
                    )
                })?
            {
                problem(skipped);
            }
            let updated_at = match &updated_at {
                Value::Text(t) => DateTime::parse_from_rfc3339(t)
                    .map(|t| t.with_timezone(&Utc))
                    .ok(),
                _ => None,
            }
            // Only shown, never decided on: an unreadable time is not worth a problem.
            .unwrap_or_else(Utc::now);
            out.rows.push(PartitionProgress {
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
}
