//! Persist: gaps and progress to the store first, then the handover topic, and only then
//! the settled offsets to Kafka (store → handover → commit).

use super::{Audit, GapLog, TRIM_AFTER_GAPS, blocking::blocking, ms_to_time};
use crate::gap::{Gap, GapState};
use crate::kafka::Command;
use crate::ledger::{Applied, ClaimsWrite, GapRecord, KeyBook, PartitionLedger};
use crate::store::{KeyClaims, PartitionProgress};
use crate::types::{Offset, TopicPartition};
use chrono::Utc;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::convert::Infallible;

/// What was decided and is not yet in the store, or not yet in Kafka.
#[derive(Default)]
pub(super) struct Writes {
    /// Gaps changed but not yet persisted (a failed store write is retried next round).
    pub(super) gaps: BTreeMap<String, Gap>,
    /// Verdicts (and new gaps' causes) decided but not yet persisted: they reach the
    /// counters only once the store holds them, so a crash between deciding and persisting
    /// cannot count a record in this lifetime and again in the next, which re-decides it.
    pub(super) verdicts: Vec<(TopicPartition, Applied, i64)>,
    pub(super) causes: Vec<(TopicPartition, &'static str)>,
    /// Gaps folded into overflow gaps, counted once stored.
    pub(super) folded: u64,
    /// (settled, ledger revision) last written per partition: unchanged ones are skipped.
    pub(super) stored: HashMap<TopicPartition, (Offset, u64)>,
    /// The settled offset last sent to Kafka per partition.
    pub(super) committed: HashMap<TopicPartition, Offset>,
    /// Gap changes of this round, logged together when it persists.
    pub(super) log: GapLog,
}

impl Writes {
    /// Puts gaps whose write failed back, unless a newer version arrived meanwhile.
    fn put_back(&mut self, gaps: Vec<Gap>) {
        for g in gaps {
            self.gaps.entry(g.id.clone()).or_insert(g);
        }
    }
}

/// What was decided and is not yet in the store, or in Kafka, and the gaps an operator
/// acknowledged.
#[derive(Default)]
pub(super) struct Persisting {
    /// The writes the next persist carries.
    pub(super) writes: Writes,
    /// Gaps an operator acknowledged.
    pub(super) acks: Acks,
}

/// Gaps an operator acknowledged (`gap-auditor ack` writes the store from another process).
#[derive(Default)]
pub(super) struct Acks {
    /// Their ids (refreshed from the store every round).
    pub(super) ids: std::collections::HashSet<String>,
    /// Where the store's ack log was read up to; `None`: list every acknowledged gap next.
    pub(super) position: Option<i64>,
    /// Acknowledged gaps taken out of a ledger since the last write: their rows are marked
    /// retired with the next write (as given-up gaps), so they travel as side-topic chunks,
    /// never inline in every handover base (review item 7).
    /// By id: the partition and first offset (its chunk).
    pub(super) unretired: BTreeMap<String, (TopicPartition, Offset)>,
}

impl Audit {
    pub(super) fn to_gap(&self, tp: &TopicPartition, g: &GapRecord) -> Gap {
        let mut gap = g.to_gap(&self.cfg.name, tp);
        if gap.unrecoverable_at.is_none() {
            gap.unrecoverable_at = self.deadline_ms(tp, g).and_then(ms_to_time);
        }
        gap
    }

    /// When retention will delete the gap's first record (time-based; size-based deletion
    /// shows up as the log start passing the gap).
    pub(super) fn deadline_ms(&self, tp: &TopicPartition, g: &GapRecord) -> Option<i64> {
        self.watch.retention.deadline_ms(&tp.topic, g.min_ts)
    }

    /// Logs a changed gap and counts new ones by cause.
    pub(super) fn report_gap(&mut self, tp: &TopicPartition, g: &GapRecord) {
        // A new gap's evidence is decided once, with it or a few rounds later (evidence.rs),
        // and kept in its ledger item (a restart or the partition's next owner reports the
        // same words).
        let explained = match g.is_new {
            true => self.new_gap_evidence(tp, g).map(|e| {
                if let Some(p) = self.parts.get_mut(tp) {
                    p.ledger.set_gap_evidence(g.first, e.clone());
                }
                GapRecord {
                    evidence: Some(e),
                    ..g.clone()
                }
            }),
            _ => None,
        };
        let g = explained.as_ref().unwrap_or(g);
        let gap = self.to_gap(tp, g);
        if g.is_new {
            self.persisting
                .writes
                .causes
                .push((tp.clone(), g.cause.as_str()));
        }
        self.persisting.writes.log.add(&gap);
        self.persisting.writes.gaps.insert(gap.id.clone(), gap);
    }

    /// Writes unsaved gaps and the progress of every partition that changed, in one
    /// transaction.
    pub(super) async fn persist(&mut self) -> bool {
        self.persisting
            .writes
            .log
            .flush(self.cfg.pipeline_group.as_deref());
        // Moved, not copied (an incident round holds tens of thousands); put back if the
        // write fails.
        let gaps: Vec<Gap> = std::mem::take(&mut self.persisting.writes.gaps)
            .into_values()
            .collect();
        let big_round = gaps.len() >= TRIM_AFTER_GAPS;
        let now = Utc::now();
        let mut marks = Vec::new();
        let progress: Vec<PartitionProgress> = self
            .parts
            .iter()
            // An unanchored ledger is stored too (its negative settled offset says "known,
            // no position yet"), so a restart does not take it for a partition added later.
            .filter(|(tp, p)| {
                self.persisting.writes.stored.get(*tp)
                    != Some(&(p.ledger.settled(), p.ledger.revision()))
            })
            .map(|(tp, p)| {
                marks.push((tp.clone(), (p.ledger.settled(), p.ledger.revision())));
                // What changed since the last write, not the whole ledger: under a systematic
                // loss it holds hundreds of thousands of gaps.
                let (ledger, items) = ledger_write(&p.ledger, p.topic_id.as_deref());
                PartitionProgress {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    settled: p.ledger.settled(),
                    ledger,
                    updated_at: now,
                    items,
                }
            })
            .collect();
        let keys: ClaimsWrite = self
            .checker
            .book()
            .map(KeyBook::claims_to_write)
            .unwrap_or_default();
        // Stand-in credits, kept with the confirmations they belong to (a restart between a
        // dead letter's record and its stand-in would report the stand-in lost).
        let credits: Vec<(crate::types::Key, u64)> = self
            .checker
            .book()
            .map(KeyBook::credits_to_write)
            .unwrap_or_default();
        // Gaps that left memory since the last write: marked retired with the write that
        // drops their ledger items (their ledgers' revisions moved, so they are in `progress`).
        let retired: Vec<String> = self
            .parts
            .iter()
            .flat_map(|(tp, p)| {
                p.ledger
                    .retired_unstored()
                    .iter()
                    .map(|g| g.id(&self.cfg.name, tp))
            })
            .chain(self.persisting.acks.unretired.keys().cloned())
            .collect();
        let acks_retired: Vec<String> = self.persisting.acks.unretired.keys().cloned().collect();
        // The chunks of the gaps this write retires (or whose acknowledgement it marks):
        // until they are published they are not on the handover's side topic as the store
        // holds them. Noted in the store first, so a crash in between republishes those
        // chunks at the next assignment (before, the whole partition was swept again:
        // review item 9).
        let unpublished: (String, crate::store::PartitionChunks) = match &self.handover.link {
            Some(h) => {
                let mut by = crate::store::PartitionChunks::new();
                for (tp, p) in &self.parts {
                    let chunks: BTreeSet<i64> = p
                        .ledger
                        .retired_unstored()
                        .iter()
                        .map(|g| crate::handover::retired::chunk_of(g.first))
                        .collect();
                    if !chunks.is_empty() {
                        by.entry((tp.topic.clone(), tp.partition))
                            .or_default()
                            .extend(chunks);
                    }
                }
                for (tp, first) in self.persisting.acks.unretired.values() {
                    if self.parts.contains_key(tp) {
                        by.entry((tp.topic.clone(), tp.partition))
                            .or_default()
                            .insert(crate::handover::retired::chunk_of(*first));
                    }
                }
                (h.topic().to_string(), by)
            }
            None => (String::new(), crate::store::PartitionChunks::new()),
        };
        // Gaps folded into an overflow gap since the last write: their rows go as it is
        // written.
        let folded: Vec<String> = self
            .parts
            .iter()
            .flat_map(|(tp, p)| {
                p.ledger
                    .folded_unstored()
                    .iter()
                    .map(|g| g.id(&self.cfg.name, tp))
            })
            .collect();
        // What the next handover delta must carry, applied once the store holds it.
        let handed: Vec<super::hand_over::Change> = if self.handover.link.is_some() {
            super::hand_over::changes(&self.cfg.name, &gaps, &progress, &self.parts)
        } else {
            Vec::new()
        };
        if gaps.is_empty()
            && progress.is_empty()
            && keys.claims.is_empty()
            && !keys.whole
            && credits.is_empty()
            && acks_retired.is_empty()
        {
            self.count_persisted();
            self.settle_retired().await;
            self.hand_over().await;
            return true;
        }
        if self.handover.link.is_some() {
            self.handover
                .dirty
                .extend(marks.iter().map(|(tp, _)| tp.clone()));
            self.handover.dirty.extend(
                gaps.iter()
                    .map(|g| TopicPartition::new(g.topic.clone(), g.partition)),
            );
        }
        let store = self.io.store.clone();
        let audit = self.cfg.name.clone();
        // The gaps come back with the write's outcome (put back into `unsaved` should it fail).
        match blocking(move || {
            // A panic in the write must not take the gaps with it: they go back to `unsaved`.
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let claims = if keys.whole {
                    KeyClaims::Whole(&keys.claims)
                } else {
                    KeyClaims::Changes(&keys.claims)
                };
                store
                    .note_unpublished_chunks(&unpublished.0, &audit, &unpublished.1)
                    .and_then(|()| {
                        store.commit_round_retiring(
                            &audit, &gaps, &progress, claims, &retired, &folded,
                        )
                    })
                    .and_then(|()| store.write_key_credits(&audit, &credits))
                    .map(|()| (keys, credits))
            }))
            .unwrap_or_else(|_| {
                Err(crate::store::StoreError::Panicked(format!(
                    "the round of audit {audit} panicked while writing"
                )))
            });
            Ok::<_, Infallible>((r, gaps))
        })
        .await
        {
            Ok((Ok((keys, credits)), gaps)) => {
                drop(gaps);
                if big_round {
                    crate::memory::release_free();
                }
                self.persisting.writes.stored.extend(marks);
                self.pend(handed);
                for id in &acks_retired {
                    self.persisting.acks.unretired.remove(id);
                }
                if let Some(book) = self.checker.book_mut() {
                    book.written(&keys);
                    book.credits_written(&credits);
                }
                for p in self.parts.values_mut() {
                    p.ledger.stored();
                }
                self.count_persisted();
                self.settle_retired().await;
                self.hand_over().await;
                true
            }
            Ok((Err(crate::store::StoreError::FoldedAcknowledged { ids }), gaps)) => {
                // Nothing was written. The acknowledged gaps keep their rows: the overflow
                // gaps stop counting them, and the next write stores the corrected ones.
                self.persisting.writes.put_back(gaps);
                self.unfold_acknowledged(&ids);
                false
            }
            Ok((Err(e), gaps)) => {
                tracing::error!(audit = %self.cfg.name, error = %e, "gap store write failed; the settled watermark stays uncommitted until it succeeds");
                self.persisting.writes.put_back(gaps);
                false
            }
            Err(e) => {
                // The gaps went with the panicked task: their ledgers still hold them, so
                // they are written again whole (see `resave_gaps`).
                tracing::error!(audit = %self.cfg.name, error = %e, "gap store write panicked");
                self.resave_gaps();
                false
            }
        }
    }

    /// Gaps (`ids`) an operator acknowledged after the round read the acknowledgements, and
    /// that the round folded into their partition's overflow gap: taken out of it (their
    /// acknowledged rows stand for them), the overflow gap reported again.
    fn unfold_acknowledged(&mut self, ids: &[String]) {
        let mut unfolded = 0u64;
        let tps: Vec<TopicPartition> = self.parts.keys().cloned().collect();
        for tp in tps {
            let Some(part) = self.parts.get_mut(&tp) else {
                continue;
            };
            let firsts: Vec<crate::types::Offset> = part
                .ledger
                .folded_unstored()
                .iter()
                .filter(|g| ids.contains(&g.id(&self.cfg.name, &tp)))
                .map(|g| g.first)
                .collect();
            if firsts.is_empty() {
                continue;
            }
            for f in firsts {
                if part.ledger.unfold_acknowledged(f) {
                    unfolded += 1;
                }
            }
            for g in part.ledger.take_dirty_gaps() {
                self.report_gap(&tp, &g);
            }
        }
        self.persisting.writes.folded = self.persisting.writes.folded.saturating_sub(unfolded);
        tracing::warn!(audit = %self.cfg.name, acknowledged = ids.len(),
            "gaps folded by this round were acknowledged meanwhile: the overflow gap no longer counts them; written next round");
    }

    /// After a lost write: every gap the ledgers hold is to be written again, and those
    /// that left memory since the last write (their final rows went with it).
    pub(super) fn resave_gaps(&mut self) {
        let all: Vec<(TopicPartition, GapRecord)> = self
            .parts
            .iter()
            .flat_map(|(tp, p)| {
                p.ledger
                    .gaps()
                    .chain(p.ledger.retired_unstored())
                    .map(move |g| (tp.clone(), g.clone()))
            })
            .collect();
        for (tp, g) in all {
            let gap = self.to_gap(&tp, &g);
            self.persisting
                .writes
                .gaps
                .entry(gap.id.clone())
                .or_insert(gap);
        }
    }

    /// The store work the ledgers' retired gaps wait for ([`crate::ledger::RetiredWork`]):
    /// rows the log start passed made unrecoverable, rows of a diverged log let go, and the
    /// aggregate counted again, one partition at a time. Only once the store marks every
    /// retirement (after a write): a failure leaves the work for the next round, the
    /// aggregate as it was.
    pub(super) async fn settle_retired(&mut self) {
        let work: Vec<(TopicPartition, Vec<crate::ledger::RetiredOp>)> = self
            .parts
            .iter()
            // A partition importing a previous owner's retired gaps keeps the handed-over
            // aggregate: its store holds only part of them yet (`retired_flow`).
            .filter(|(tp, _)| !self.importing(tp))
            .filter_map(|(tp, p)| Some((tp.clone(), p.ledger.retired_work()?.ops.clone())))
            .collect();
        for (tp, ops) in work {
            let store = self.io.store.clone();
            let audit = self.cfg.name.clone();
            let t = tp.clone();
            let read = blocking(move || {
                let n = ops.len();
                store
                    .settle_retired_changed(&audit, &t.topic, t.partition, &ops)
                    .map(|(agg, changed)| (n, agg, changed))
            })
            .await;
            match read {
                Ok((done, agg, changed)) => {
                    if let Some(p) = self.parts.get_mut(&tp) {
                        p.ledger.retired_recounted(done, agg);
                    }
                    // Rows only the store changed: the next handover delta carries them.
                    if self.handover.link.is_some() && !changed.is_empty() {
                        self.handover
                            .pending
                            .entry(tp.clone())
                            .or_default()
                            .changed(changed);
                        self.handover.dirty.insert(tp.clone());
                    }
                }
                Err(e) => {
                    tracing::error!(audit = %self.cfg.name, %tp, error = %e,
                        "cannot count the gaps that left memory (given up) in the store; their gauges stay as they were until it answers");
                }
            }
        }
    }

    /// Reloads which gaps an operator acknowledged (`gap-auditor ack` writes the store from
    /// another process), so they stop counting as open.
    pub(super) async fn refresh_acknowledged(&mut self) {
        let store = self.io.store.clone();
        let audit = self.cfg.name.clone();
        let since = self.persisting.acks.position;
        // After a start or an assignment every acknowledged gap (restored ledgers may hold
        // any of them); then only those acknowledged since, from the store's ack log, so a
        // round does not read every acknowledgement ever given.
        let read = blocking(move || match since {
            None => {
                // Position first: an ack landing during the listing is read again next
                // round, never missed.
                let position = store.ack_position()?;
                let filter = crate::store::GapFilter {
                    state: crate::store::StateFilter::Only(GapState::Acknowledged),
                    audit: Some(audit),
                };
                Ok::<_, crate::store::StoreError>((store.list_gaps(&filter)?, position, true))
            }
            Some(since) => {
                let (gaps, position) = store.acks_since(&audit, since)?;
                Ok((gaps, position, false))
            }
        })
        .await;
        let (gaps, position, full) = match read {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(audit = %self.cfg.name, error = %e, "cannot read acknowledgements; retried next round");
                return;
            }
        };
        for g in gaps
            .iter()
            .filter(|g| !self.persisting.acks.ids.contains(&g.id))
        {
            let tp = TopicPartition::new(g.topic.clone(), g.partition);
            let Some(part) = self.parts.get_mut(&tp) else {
                continue;
            };
            // Out of the hot ledger: no more re-checks, gauges or claims on its keys. Only
            // what the gap held when it was acknowledged (its stored extent): records a
            // round added since stay open, never folded into the acknowledgement. A gap
            // only the store holds (retired) leaves the aggregate when it is counted again.
            // By offset and log epoch: after a divergence the old log's gap and the new
            // log's at the same offset are two gaps, and acknowledging one never takes the
            // other out.
            let held =
                part.ledger.gap_epoch(g.first_offset) == Some(crate::gap::Gap::epoch_of_id(&g.id));
            let taken_out = held
                && part.ledger.acknowledge_overflow(
                    g.first_offset,
                    g.last_offset,
                    g.missing_records,
                );
            if taken_out {
                // Its row is marked retired with the next write (see `Acks::unretired`).
                self.persisting
                    .acks
                    .unretired
                    .insert(g.id.clone(), (tp.clone(), g.first_offset));
            } else {
                part.ledger.retired_changed();
            }
            if let Some(book) = self.checker.book_mut() {
                for k in part.ledger.take_released_keys() {
                    book.forget_missing(&k);
                }
            }
            // Counted once, as it arrives (not on the full reload after a start or an
            // assignment, which lists acknowledgements counted before): the alert rule
            // weighs it against the records lost in its window.
            if !full {
                self.metrics
                    .partition(&tp)
                    .acknowledged(acknowledged_in_window(
                        g.detected_at,
                        g.missing_records,
                        chrono::Utc::now(),
                    ));
            }
            // A new acknowledgement changes what the next owner must know. Not on the full
            // reload for a partition whose sweep or import runs: every given-up gap of it
            // goes to the side topic under this owner's term anyway (review of format 3,
            // F7: each acknowledged gap's chunk was queued again at every assignment).
            if self.handover.link.is_some()
                && !(full && self.handover.retired_flows.contains_key(&tp))
            {
                self.handover
                    .pending
                    .entry(tp.clone())
                    .or_default()
                    .changed([g.id.clone()]);
                self.handover.dirty.insert(tp);
            }
        }
        let ids = gaps.into_iter().map(|g| g.id);
        if full {
            self.persisting.acks.ids = ids.collect();
        } else {
            self.persisting.acks.ids.extend(ids);
        }
        self.persisting.acks.position = Some(position);
    }

    pub(super) fn commit_settled(&mut self) {
        let mut offsets = Vec::new();
        for (tp, p) in &self.parts {
            let s = p.ledger.settled();
            // A partition whose handover publish was not acknowledged (or whose handover
            // topic is unread) keeps its previous commit; the others go ahead.
            if self.handover.held.contains(tp) {
                continue;
            }
            if p.ledger.is_anchored() && self.persisting.writes.committed.get(tp) != Some(&s) {
                offsets.push((tp.clone(), s));
            }
        }
        if offsets.is_empty() {
            return;
        }
        for (tp, s) in &offsets {
            self.persisting.writes.committed.insert(tp.clone(), *s);
        }
        let _ = self.tail.commands.send(Command::Commit(offsets));
    }
}

/// A ledger's store write: its changes since the last write ([`PartitionLedger::delta`]),
/// or, should an item not serialize, the whole ledger (which replaces what is stored).
/// `topic_id`, when known, goes with it: the incarnation of the topic the ledger's offsets
/// belong to, compared at the next start (`divergence.rs`).
pub(super) fn ledger_write(
    ledger: &PartitionLedger,
    topic_id: Option<&str>,
) -> (serde_json::Value, Option<crate::store::LedgerItems>) {
    pub(super) fn items<T: serde::Serialize>(
        list: Vec<(Offset, Option<T>)>,
    ) -> Option<Vec<(Offset, Option<String>)>> {
        list.into_iter()
            .map(|(f, v)| match v {
                Some(v) => serde_json::to_string(&v).ok().map(|b| (f, Some(b))),
                None => Some((f, None)),
            })
            .collect()
    }
    let with_id = |v| with_topic_id(v, topic_id);
    let d = ledger.delta();
    let head = ledger_head(ledger, topic_id);
    match (items(d.missing), items(d.gaps)) {
        (Some(missing), Some(gaps)) if !d.replace => {
            (head, Some(crate::store::LedgerItems { missing, gaps }))
        }
        _ => (
            with_id(serde_json::to_value(ledger.snapshot()).unwrap_or(serde_json::Value::Null)),
            None,
        ),
    }
}

/// A ledger's head (everything but its items) as a progress row holds it: the tail gap,
/// the epoch, truncation point and dead-lettered tail when set, the topic id when known.
pub(super) fn ledger_head(ledger: &PartitionLedger, topic_id: Option<&str>) -> serde_json::Value {
    let mut head = serde_json::json!({ "tail_gap": ledger.tail_gap() });
    // The epoch goes with every write: the head replaces the stored one (see `Snapshot::epoch`).
    if ledger.epoch() > 0
        && let Some(o) = head.as_object_mut()
    {
        o.insert("epoch".to_string(), serde_json::Value::from(ledger.epoch()));
    }
    if let (Some(t), Some(o)) = (ledger.truncated_from(), head.as_object_mut()) {
        o.insert("truncated_from".to_string(), serde_json::Value::from(t));
    }
    // As the tail gap: the dead_lettered gap a restart goes on extending.
    if let (Some(t), Some(o)) = (ledger.dead_tail(), head.as_object_mut()) {
        o.insert("dead_tail".to_string(), serde_json::Value::from(t));
    }
    with_topic_id(head, topic_id)
}

/// `ledger` (a progress row's JSON object) with `topic_id` in it, when known.
pub(super) fn with_topic_id(
    mut ledger: serde_json::Value,
    topic_id: Option<&str>,
) -> serde_json::Value {
    if let (Some(id), Some(o)) = (topic_id, ledger.as_object_mut()) {
        o.insert("topic_id".to_string(), serde_json::Value::from(id));
    }
    ledger
}

/// The window of the DataLoss rule's `increase(...[5m])` terms (config/alerts).
const ALERT_WINDOW: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// The records an acknowledgement of a gap first declared at `detected_at`, holding
/// `missing` records, counts in `gap_auditor_records_acknowledged_total`,
/// which the DataLoss rule weighs against the records lost in the same 5 minutes: all of
/// them for a gap first declared within that window, none for an older one. An ack of an
/// old gap then never covers a new loss of the same partition (review of issue 38: acking
/// a 500-record gap from last week silenced a 10-record loss of this minute); its own
/// losses are older than the window and do not fire anyway.
fn acknowledged_in_window(
    detected_at: chrono::DateTime<chrono::Utc>,
    missing: u64,
    now: chrono::DateTime<chrono::Utc>,
) -> u64 {
    if now - detected_at <= ALERT_WINDOW {
        missing
    } else {
        0
    }
}

#[cfg(test)]
mod ack_window_tests {
    use super::*;

    #[test]
    fn only_a_gap_declared_within_the_alert_window_counts_its_acked_records() {
        let now = chrono::Utc::now();
        let ago = |m| now - chrono::TimeDelta::minutes(m);
        assert_eq!(acknowledged_in_window(ago(4), 500, now), 500);
        assert_eq!(
            acknowledged_in_window(ago(6), 500, now),
            0,
            "an old gap covers nothing"
        );
    }
}
