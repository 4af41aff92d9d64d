//! Partitions: assignment (where each starts, taking over from a previous owner),
//! revocation, and re-positioning after an offset left the log.

use super::divergence::{Divergence, DivergenceNote, diverged};
use super::starts::{Resolved, TopicIds, resolve_starts};
use super::{Audit, KafkaView, Part, blocking::blocking};
use crate::audit::held::Held;
use crate::config::MatchStrategy;
use crate::handover;
use crate::kafka::Command;
use crate::ledger::{KeyBook, PartitionLedger, Snapshot};
use crate::store::PartitionProgress;
use crate::types::{Offset, TopicPartition};
use chrono::Utc;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::convert::Infallible;

impl Audit {
    /// A fetch position left the log. For each partition: below the log start means Kafka
    /// deleted records the auditor never read — recorded as a gap of unknown size, then
    /// reading resumes at the log start; beyond the log end (or a changed topic id) means the
    /// log was truncated or the topic recreated — the partition resumes where the new log
    /// diverged from the old ([`diverged`]). Every other partition is simply re-positioned
    /// where its ledger stands (re-delivered records are ignored).
    pub(super) async fn out_of_range(&mut self) {
        let tps: Vec<TopicPartition> = self.parts.keys().cloned().collect();
        let view = self.io.kafka_view.clone();
        let (marks, ids) = blocking(move || {
            let ids = topic_ids(&*view, &tps);
            let marks = tps
                .into_iter()
                .map(|tp| {
                    let w = view.watermarks(&tp);
                    (tp, w)
                })
                .collect::<Vec<_>>();
            Ok::<_, Infallible>((marks, ids))
        })
        .await
        .unwrap_or_default();
        let now = self.io.clock.now_ms();
        let mut positions = Vec::new();
        for (tp, w) in marks {
            // Taken out of the map while it is changed, so gaps can be reported through self.
            let Some(mut part) = self.parts.remove(&tp) else {
                continue;
            };
            let next = part.ledger.next_offset();
            let mut replaced = false;
            let now_id = ids.get(&tp.topic).map(String::as_str);
            let split = w.as_ref().ok().and_then(|log| {
                diverged(
                    next,
                    part.ledger.settled(),
                    *log,
                    part.topic_id.as_deref(),
                    now_id,
                )
            });
            let seek = match (w, split) {
                (Err(e), _) => {
                    tracing::warn!(%tp, error = %e, "offset out of range, and the watermarks cannot be read; restarting at the ledger's position");
                    next
                }
                // The log no longer holds the position: the partition resumes where the new
                // log diverged from the old one (`divergence.rs`), its ledger cut there.
                (Ok(log), Some(d)) => {
                    let snap = part.ledger.snapshot();
                    // The old ledger's undecided records and followed missing keys leave the
                    // book; its confirmations stay (their rows are still in the sink). What
                    // the cut ledger keeps is adopted again below.
                    if let Some(book) = self.checker.book_mut() {
                        book.release(&mut part.ledger, true);
                    }
                    let (mut ledger, note) = self.diverged_ledger(&tp, &d, next, log, snap, now);
                    let cut = match &d {
                        Divergence::Truncated { resume } => *resume,
                        Divergence::Recreated { .. } => Offset::MIN,
                    };
                    // Gaps the old ledger retired but had not stored yet, beyond the cut:
                    // gone like the ones the cut took out.
                    for mut g in ledger.inherit_unstored(&mut part.ledger, cut) {
                        if !g.size_known || g.missing == 0 {
                            continue;
                        }
                        g.deleted_ms.get_or_insert(now);
                        g.is_new = false;
                        self.report_gap(&tp, &g);
                    }
                    if let Some(book) = self.checker.book_mut() {
                        book.adopt(&ledger);
                    }
                    part.ledger = ledger;
                    part.divergence = Some(note);
                    // The new log's id, or unknown (never the old log's: see `assign`).
                    part.topic_id = now_id.map(str::to_string);
                    replaced = true;
                    d.resume()
                }
                (Ok((low, _)), None) if next < low && part.ledger.is_anchored() => {
                    if part
                        .ledger
                        .skipped_by_retention(next, low - 1, now)
                        .is_some()
                    {
                        self.report_deleted(&tp, &mut part.ledger);
                    }
                    low
                }
                (Ok(_), None) => next,
            };
            reposition_held(&mut part, seek, replaced, self.checker.book_mut());
            self.parts.insert(tp.clone(), part);
            positions.push((tp, seek));
        }
        // Before the write, as at assignment (see `assign`).
        self.settle_retired().await;
        self.persist().await;
        // Until the thread has served this command, it may still report the old fetchers'
        // positions (the error's offset + 1, or where the recreated topic's old log was
        // read to): none of them may reach the restarted ledgers.
        self.tail.repositions += 1;
        for (tp, _) in &positions {
            if let Some(part) = self.parts.get_mut(tp) {
                part.repositioning = Some(self.tail.repositions);
            }
        }
        let _ = self.tail.commands.send(Command::Reposition(positions));
    }

    /// The ledger a partition resumes with on a log that no longer holds its position `from`
    /// (`d`, the log now `log`), from what the old ledger held (`snap`): cut at the
    /// divergence point when the log was truncated, empty when the topic was recreated.
    /// The gaps it no longer follows are reported once more with their records gone (they
    /// can no longer be replayed); they keep what they counted. Said at WARN, counted, and
    /// returned as the status note.
    pub(super) fn diverged_ledger(
        &mut self,
        tp: &TopicPartition,
        d: &Divergence,
        from: Offset,
        log: (Offset, Offset),
        snap: Snapshot,
        now_ms: i64,
    ) -> (PartitionLedger, DivergenceNote) {
        let keyed = self.keyed();
        let (ledger, gone) = match d {
            Divergence::Truncated { resume } => {
                let (mut l, gone) = PartitionLedger::restore_diverged(*resume, keyed, snap);
                // The old log's rows above the new end are this topic's own (`shared_table`).
                l.note_truncated_from(from);
                (l, gone)
            }
            // Every offset of the old ledger named a record of the old topic.
            Divergence::Recreated { resume } => (
                PartitionLedger::new_diverged(*resume, keyed, snap.epoch),
                snap.gaps,
            ),
        };
        // The retired gaps beyond the divergence point (in the store only) go the same way.
        let mut ledger = ledger;
        let cut = match d {
            Divergence::Truncated { resume } => *resume,
            Divergence::Recreated { .. } => Offset::MIN,
        };
        ledger.retired_gone(cut, now_ms);
        let mut n = 0;
        for mut g in gone {
            if !g.size_known || g.missing == 0 {
                continue;
            }
            g.deleted_ms.get_or_insert(now_ms);
            g.is_new = false;
            self.report_gap(tp, &g);
            n += 1;
        }
        let note = DivergenceNote::new(d, from, log, Utc::now().to_rfc3339());
        tracing::warn!(audit = %self.cfg.name, %tp, kind = d.kind(), from,
            resumed_at = note.resumed_at, log_start = log.0, log_end = log.1,
            gaps_no_longer_followed = n, "{}", note.reason);
        self.metrics.log_diverged(tp, d.kind());
        // Written at the next store write whatever its offsets and revision: the row must
        // carry the new log's topic id and lose the items cut.
        self.persisting.writes.stored.remove(tp);
        (ledger, note)
    }

    /// Reports the gaps a ledger just recorded for offsets Kafka deleted before the auditor
    /// read them, right away: they must reach the store before the settled offset that skips
    /// them does.
    pub(super) fn report_deleted(&mut self, tp: &TopicPartition, ledger: &mut PartitionLedger) {
        for g in ledger.take_dirty_gaps() {
            if g.is_new && !g.size_known {
                tracing::error!(audit = %self.cfg.name, %tp, first = g.first, last = g.last,
                    "Kafka deleted offsets {}..={} before the auditor read them: recorded as an unverifiable gap", g.first, g.last);
                // Guarantee 8: only what was checked is a verdict. Nobody can tell whether
                // these offsets held expected records (holes, filtered records, trailing
                // transaction markers); the next round asks the sink what it can settle
                // (`settle_deleted`), and the rest is unverifiable — its own counter and gap
                // state, never records_lost_total.
            }
            self.report_gap(tp, &g);
        }
    }

    /// Decides where each newly assigned partition starts: the store's settled watermark,
    /// else the group's committed offset, else `kafka.start`. A resume point below the log
    /// start means Kafka deleted records the auditor never read: a gap of unknown size.
    pub(super) async fn assign(
        &mut self,
        partitions: Vec<TopicPartition>,
    ) -> Vec<(TopicPartition, Offset)> {
        // What of each partition's stored state could not be read: that partition alone
        // says so (log, status) and resumes from what could be.
        let mut unreadable: HashMap<TopicPartition, Vec<String>> = HashMap::new();
        let mut progress: HashMap<TopicPartition, PartitionProgress> = {
            let store = self.io.store.clone();
            let audit = self.cfg.name.clone();
            match blocking(move || store.load_progress_checked(&audit)).await {
                Ok(read) => {
                    for p in read.problems {
                        let tp = TopicPartition::new(p.topic, p.partition);
                        unreadable.entry(tp).or_default().push(p.what);
                    }
                    read.rows
                        .into_iter()
                        .map(|p| (TopicPartition::new(p.topic.clone(), p.partition), p))
                        .collect()
                }
                Err(e) => {
                    tracing::error!(audit = %self.cfg.name, error = %e, "cannot read progress from the store; falling back to Kafka commits");
                    HashMap::new()
                }
            }
        };
        let TakenOver {
            handed_retired,
            foreign,
        } = self.take_over(&partitions, &mut progress).await;
        let view = self.io.kafka_view.clone();
        let start = self.io.kafka.start;
        let tps = partitions.clone();
        let stored: HashMap<TopicPartition, Offset> = progress
            .iter()
            .map(|(k, v)| (k.clone(), v.settled))
            .collect();
        let stored_ids: HashMap<TopicPartition, String> = progress
            .iter()
            .filter_map(|(k, v)| Some((k.clone(), stored_topic_id(&v.ledger)?)))
            .collect();
        let resolved = blocking(move || {
            let ids = TopicIds {
                now: topic_ids(&*view, &tps),
                stored: stored_ids,
            };
            let r = resolve_starts(&*view, &tps, &stored, &ids, start);
            Ok::<_, Infallible>((r, ids))
        })
        .await;
        let (resolved, ids) = match resolved {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "start offset resolution panicked");
                Default::default()
            }
        };
        let now = self.io.clock.now_ms();
        let keyed = self.keyed();
        let mut out = Vec::new();
        // Restored records whose key has another arity than `match.key` (see below).
        let mut other_arity = 0u64;
        for Resolved {
            tp,
            start,
            log,
            diverged,
        } in resolved
        {
            // Where the ledger resumes: the store's settled offset, or the auditor group's
            // commit when that is further (see `resolve_starts`); records Kafka deleted below
            // it are recorded by `skipped_by_retention` next.
            let at = start.deleted.map_or(start.resume, |(first, _)| first);
            let mut problems = unreadable.remove(&tp).unwrap_or_default();
            let mut note = None;
            let mut ledger = match (&diverged, log, progress.get(&tp)) {
                // The log no longer holds the stored position (`divergence.rs`): the stored
                // state belongs to the old log and is replaced in full, what of it could not
                // be read included.
                (Some((d, from)), Some(log), p) => {
                    let snap = match p {
                        Some(p) => {
                            let (snap, bad) = Snapshot::from_stored(&p.ledger);
                            for what in bad.iter().chain(&problems) {
                                tracing::warn!(audit = %self.cfg.name, %tp, problem = %what,
                                    "unreadable stored state of the old log dropped with it");
                            }
                            snap
                        }
                        None => Snapshot::default(),
                    };
                    problems.clear();
                    let (ledger, n) = self.diverged_ledger(&tp, d, *from, log, snap, now);
                    note = Some(n);
                    ledger
                }
                (_, _, Some(p)) => {
                    // Item by item: an unreadable one costs only itself.
                    let (snap, bad) = Snapshot::from_stored(&p.ledger);
                    problems.extend(bad);
                    PartitionLedger::restore_at(at, p.settled, keyed, snap)
                }
                // From `at`, not the resume point: a range Kafka deleted below it (the
                // group's commit under the log start, no stored progress: a new volume) is
                // recorded by `skipped_by_retention` below only from a ledger that starts
                // at its first offset.
                (_, _, None) => PartitionLedger::new(at, keyed),
            };
            let state_problem = describe_unreadable(&problems);
            if let Some(summary) = &state_problem {
                // Never replace what could not be read: it stays in the store.
                ledger.keep_stored_items();
                for what in &problems {
                    tracing::error!(audit = %self.cfg.name, %tp, problem = %what,
                        "stored partition state partly unreadable");
                }
                tracing::error!(audit = %self.cfg.name, %tp, resume = ledger.next_offset(), %summary,
                    "partition resumes from what the store could read; the unreadable part stays in the store, not re-checked");
            }
            if self.cfg.matching.strategy == MatchStrategy::KeyColumns {
                // Keys stored before `match.key` changed fit no query of the configured
                // columns: given up (still missing), never re-checked with the wrong arity.
                // The book never held them (it adopts the ledger below).
                other_arity += ledger.give_up_other_arity(self.cfg.matching.key.len());
                ledger.take_released_keys();
            }
            if let Some((first, last)) = start.deleted
                && ledger.skipped_by_retention(first, last, now).is_some()
            {
                self.report_deleted(&tp, &mut ledger);
            }
            tracing::info!(audit = %self.cfg.name, %tp, offset = ledger.next_offset(), "partition assigned");
            out.push((tp.clone(), ledger.next_offset()));
            // A partition assigned again (eager rebalances revoke and assign everything)
            // replaces its old ledger: the old one's claims go first.
            if let Some(book) = self.checker.book_mut() {
                if let Some(old) = self.parts.get_mut(&tp) {
                    book.release(&mut old.ledger, false);
                    old.held.clear(Some(&mut *book));
                }
                book.adopt(&ledger);
            }
            // The id the ledger's offsets belong to: today's, compared with the stored one
            // above. Unknown when today's lookup failed: the stored id is then not carried
            // on, as the log read from here may be a new incarnation nothing could tell
            // (its new log past the position). Carried on, a later start would read that id's
            // change as a re-creation under this position, resume at the log start and
            // decide again records already decided on it (under key_columns each asking its
            // key for a second row: losses invented). Forgotten, a later re-creation is
            // seen only from the log end (a loss missed, never one invented).
            let topic_id = ids.now.get(&tp.topic).cloned();
            self.requeue_unexplained(&tp, &ledger);
            self.parts.insert(
                tp,
                Part {
                    ledger,
                    log,
                    state_problem,
                    stalled: false,
                    held: Held::for_decoder(&self.io.decoder),
                    read_to: None,
                    repositioning: None,
                    topic_id,
                    divergence: note,
                    transaction: Default::default(),
                },
            );
        }
        if other_arity > 0 {
            tracing::warn!(audit = %self.cfg.name, records = other_arity, key_fields = self.cfg.matching.key.len(),
                "stored missing records have keys of another arity than match.key (the key changed \
                 since they were stored): given up, they stay missing and are no longer re-checked; \
                 settle them with `gap-auditor check` or `replay`");
        }
        // Retired gaps (record format 3): a partition taken over counts its previous owner's
        // aggregate at once and imports their rows in the background; any other sweeps its
        // store's retired gaps to the side topic (`retired_flow`) unless the store says they
        // are there already. Both hold it meanwhile.
        if let Some(h) = self.handover.link.clone() {
            let (store, audit, topic) = (
                self.io.store.clone(),
                self.cfg.name.clone(),
                h.topic().to_string(),
            );
            let mut swept = match blocking(move || store.handover_swept(&topic, &audit)).await {
                Ok(s) => s,
                Err(e) => {
                    // Unknown: every partition is swept (never one left off the side topic).
                    tracing::warn!(audit = %self.cfg.name, error = %e, "cannot read which partitions' given-up gaps are on the handover side topic: all are published again");
                    std::collections::BTreeMap::new()
                }
            };
            let (store, audit, topic) = (
                self.io.store.clone(),
                self.cfg.name.clone(),
                h.topic().to_string(),
            );
            let mut unpublished = match blocking(move || store.unpublished_chunks(&topic, &audit))
                .await
            {
                Ok(u) => u,
                Err(e) => {
                    // Unknown: those partitions are swept whole instead.
                    tracing::warn!(audit = %self.cfg.name, error = %e, "cannot read which given-up gaps' chunks wait for their publish: the partitions are published again whole");
                    swept.clear();
                    crate::store::PartitionChunks::new()
                }
            };
            for tp in &partitions {
                // Swept under this owner's term (its own state taken back under its own
                // term, `keep_term`): the side topic holds the store's rows as the next
                // state names them. Under any other term (a new one: taken over, resumed
                // further than another owner's state, no state): swept again.
                let term = h.term(&self.cfg.name, tp);
                if !handed_retired.contains_key(tp)
                    && swept.get(&(tp.topic.clone(), tp.partition)) == Some(&term)
                {
                    // Swept, but a write retired gaps whose chunks were not published
                    // before the stop: those chunks go before its next state (not a
                    // whole sweep again, review item 9).
                    if let Some(chunks) = unpublished.remove(&(tp.topic.clone(), tp.partition)) {
                        self.handover
                            .pending
                            .entry(tp.clone())
                            .or_default()
                            .chunks
                            .extend(chunks);
                        self.handover.dirty.insert(tp.clone());
                    }
                    continue;
                }
                if !handed_retired.contains_key(tp) && foreign.contains(tp) {
                    // Another owner's format-3 state without retired gaps: its chunks may be
                    // newer than this store's rows; a sweep could overwrite them.
                    tracing::debug!(audit = %self.cfg.name, %tp, "taken over from another owner's state: this store's given-up gaps are not swept to the handover side topic");
                    continue;
                }
                let flow = match handed_retired.get(tp) {
                    Some((agg, src)) => {
                        if let Some(p) = self.parts.get_mut(tp) {
                            p.ledger.retired_handed_over(agg.clone());
                        }
                        super::retired_flow::Flow::Import(
                            crate::handover::retired::ImportCursor::start(),
                            src.clone(),
                        )
                    }
                    None => super::retired_flow::Flow::Sweep(Offset::MIN),
                };
                self.handover.retired_flows.insert(tp.clone(), flow);
            }
        }
        // Restored ledgers hold no retired gap: their aggregate is counted in the store
        // (but for those just taken over with their aggregate, above).
        // Before the write: a diverged ledger's old retired gaps are let go while the store
        // still says the log diverged (a crash in between finds the divergence again).
        self.settle_retired().await;
        if !self.persisting.writes.gaps.is_empty() {
            self.persist().await;
        }
        if self.handover.link.is_some() {
            self.forget_not_owned().await;
        }
        // Restored ledgers may hold gaps acknowledged meanwhile (in the store, or by the
        // previous owner): the next refresh takes every acknowledgement out of them again.
        self.persisting.acks.ids.clear();
        self.persisting.acks.position = None;
        out
    }

    /// After an assignment (with a handover topic): the store may still hold open gaps of
    /// partitions this instance owned before a rebalance or a restart, which another
    /// instance owns now and took over from the handover topic. Those copies are dropped:
    /// an unresolved gap is listed by its partition's owner only, and the partition's
    /// progress goes with them (it comes back from the handover). Not done at revoke: the
    /// partition may come straight back (eager rebalances revoke everything), and a store
    /// stopped between revoke and assignment keeps what it followed.
    pub(super) async fn forget_not_owned(&self) {
        let store = self.io.store.clone();
        let audit = self.cfg.name.clone();
        let owned: BTreeSet<TopicPartition> = self.parts.keys().cloned().collect();
        let r = blocking(move || {
            // The partitions only, never every unresolved row (millions given up after a
            // long incident, read into memory at each assignment before).
            let elsewhere: BTreeSet<TopicPartition> = store
                .partitions_with_unresolved_gaps(&audit)?
                .into_iter()
                .map(|(topic, partition)| TopicPartition::new(topic, partition))
                .filter(|tp| !owned.contains(tp))
                .collect();
            let mut n = 0;
            for tp in elsewhere {
                // Its progress first (a crash before the rows go leaves rows the next
                // assignment drops, never a progress without its rows: review of format
                // 3, F1), and its retired rows too: the side topic no longer holds them as
                // this store does.
                store.forget_progress(&audit, &tp.topic, tp.partition)?;
                store.clear_handover_swept(&audit, &[(tp.topic.clone(), tp.partition)])?;
                n += store
                    .forget_unresolved(&audit, &tp.topic, tp.partition, Offset::MAX, &[], true)?
                    .len();
            }
            Ok::<_, crate::store::StoreError>(n)
        })
        .await;
        match r {
            Ok(n) if n > 0 => {
                tracing::info!(audit = %self.cfg.name, gaps = n, "open gaps (and progress) of partitions other instances own now dropped from the local store")
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(audit = %self.cfg.name, error = %e, "cannot drop gaps of partitions owned elsewhere")
            }
        }
    }

    /// With `state.handover_topic`: the previous owner's state of newly assigned partitions
    /// replaces the local progress when it is at least as far, and its gaps are written to
    /// the local store (so `gaps` and /api/gaps show them) without being counted again —
    /// the previous owner counted them. Without a readable handover topic the partitions
    /// resume from the local store or the group's commit: nothing unread is skipped, but
    /// the previous owner's open gaps are not followed here.
    ///
    /// See [`TakenOver`] for what it returns.
    pub(super) async fn take_over(
        &mut self,
        partitions: &[TopicPartition],
        progress: &mut HashMap<TopicPartition, PartitionProgress>,
    ) -> TakenOver {
        let mut out = TakenOver::default();
        let Some(h) = self.handover.link.clone() else {
            return out;
        };
        // A background retry of an earlier read is of no use for these: this read is newer.
        self.drop_reading(partitions);
        let audit = self.cfg.name.clone();
        let tps = partitions.to_vec();
        let me = h.owner().to_string();
        let states = match blocking(move || h.read(&audit, &tps)).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(audit = %self.cfg.name, error = %e, "cannot read the handover topic: the assigned partitions resume without their previous owner's open gaps; their state is neither handed over nor committed until a read succeeds (retried in the background)");
                return out;
            }
        };
        self.past_used_terms(partitions).await;
        // Which of this owner's own format-3 states its store proves current (review of
        // format 3, F1): see `own_proofs`.
        let proofs = self.own_proofs(&states, &me).await;
        // Imports this store began of states still the newest (review of the supersede,
        // R1): their progress, further than the state, is the import's own, not a store
        // further than the handover; see `resumable_imports`.
        let resumable = self.resumable_imports(&states).await;
        let TakenOver {
            handed_retired,
            foreign,
        } = &mut out;
        let mut imports = Vec::new();
        let mut abandoned = Vec::new();
        // What this process noted for a handover before is stale: it starts from what it
        // takes now (or from its local store, then with a whole state as its next publish).
        for tp in partitions {
            self.handover.pending.remove(tp);
            self.handover.claims.remove(tp);
        }
        for (tp, st) in states {
            let local = progress.get(&tp).map(|p| p.settled);
            let theirs = !super::retired_flow::may_sweep(Some((st.version, &st.owner)), &me);
            if !handover::prefer_handover(local, &st) {
                if let Some(h) = &self.handover.link {
                    h.forget_chain(&self.cfg.name, &tp);
                }
                if let Some((counted, below, only_unknown)) = resumable.get(&tp) {
                    // Its own progress stands (it went on from the state its import began
                    // from), and the import of the given-up gaps below that state's settled
                    // offset resumes, from the state found (that one, or a newer one of
                    // another owner holding newer versions of them), counting both the
                    // handed-over aggregate and the store's rows until it ends (never less
                    // than either; some counted twice meanwhile).
                    tracing::info!(audit = %self.cfg.name, %tp, local = ?local, handed_over = st.settled, previous_owner = %st.owner, below,
                        "the import of the previous owner's given-up gaps did not finish before this partition left: resumed, from this store's progress");
                    let handed = st.retired_gaps.clone().unwrap_or_default();
                    handed_retired.insert(
                        tp.clone(),
                        (
                            handed.merged(counted),
                            super::retired_flow::Source {
                                term: st.term,
                                owner: st.owner.clone(),
                                below: *below,
                                only_unknown: *only_unknown,
                            },
                        ),
                    );
                    continue;
                }
                tracing::info!(audit = %self.cfg.name, %tp, local = ?local, handed_over = st.settled,
                    "the local store is further than the handover topic: resuming from it");
                // The store's verdicts stand (it decided these offsets last; a store that
                // let a partition's gaps go forgot its progress with them, so it is never
                // further, see `forget_not_owned`). Its given-up gaps go to the side topic
                // under this owner's new term before its first state (the assignment's
                // sweep): another owner's chunks stay under theirs, named by their state
                // until ours replaces it. This owner's own state whose term the store is
                // swept under keeps that term: its chunks are the store's already.
                if st.version >= 3
                    && !theirs
                    && proofs.swept.get(&tp) == Some(&st.term)
                    && self
                        .handover
                        .link
                        .as_ref()
                        .is_some_and(|h| h.keep_term(&self.cfg.name, &tp, st.term))
                {
                    tracing::debug!(audit = %self.cfg.name, %tp, term = st.term, "this owner's own state: its given-up gaps stay under its term");
                }
                // An import this store began and could not resume is over (its mark left,
                // every later fold of the partition would be noted for it: review 26c, H5).
                abandoned.push(tp.clone());
                continue;
            }
            tracing::info!(audit = %self.cfg.name, %tp, settled = st.settled, gaps = st.gaps.len(),
                previous_owner = %st.owner, "partition state taken over from its previous owner");
            // The previous owner's claims on its missing records' keys: at least as many rows
            // are held as it had confirmed (max, never a sum: the counts may overlap ours).
            if let Some(book) = self.checker.book_mut() {
                for (values, n) in &st.key_claims {
                    book.claim_at_least(&crate::types::Key::new(values), *n);
                }
            }
            let row = PartitionProgress {
                topic: tp.topic.clone(),
                partition: tp.partition,
                settled: st.settled,
                ledger: st.ledger.clone(),
                updated_at: Utc::now(),
                items: None,
            };
            // Format 3: the retired gaps are chunks on the side topic, counted here by the
            // aggregate (none retired: nothing to import). Older formats carry them inline
            // (`st.retired`), written to the store below and counted from it.
            // This owner's own format-3 state (taken back after a revoke or a restart: the
            // owner id survives it) whose rows the store proves it holds: they are counted
            // from it and kept, not imported again (before, every restart scanned the side
            // topic for every partition). Unproven (its rows let go when another instance
            // owned the partition, or a store copied or restored from a backup), it is
            // imported as another owner's would be (review of format 3, F1): the side
            // topic holds every gap the state counts.
            let own = st.version >= 3
                && !theirs
                && proofs.current(&tp, &st)
                && self
                    .handover
                    .link
                    .as_ref()
                    .is_some_and(|h| h.keep_term(&self.cfg.name, &tp, st.term));
            if st.version >= 3 && !theirs && !own {
                tracing::info!(audit = %self.cfg.name, %tp,
                    "this owner's own handover state counts given-up gaps its store does not prove it holds (not marked swept, or another count): they are imported from the side topic");
            }
            if st.version >= 3 && !own {
                // Theirs (or ours unproven): counted by the aggregate (none: their chunks
                // may still hold other given-up gaps, acknowledged or late, newer than
                // this store's rows): this store takes them (and drops its rows they
                // lack) before it publishes a chunk of its own, so neither a sweep nor a
                // changed chunk overwrites theirs with a stale row (review item 2).
                handed_retired.insert(
                    tp.clone(),
                    (
                        st.retired_gaps.clone().unwrap_or_default(),
                        super::retired_flow::Source {
                            term: st.term,
                            owner: st.owner.clone(),
                            below: Offset::MAX,
                            only_unknown: false,
                        },
                    ),
                );
            }
            if theirs {
                foreign.insert(tp.clone());
            }
            // An import starts: marked with the progress it starts from (see
            // `resumable_imports`).
            let importing = (st.version >= 3 && !own).then(|| crate::store::ImportMark {
                owner: st.owner.clone(),
                term: st.term,
                below: Some(st.settled),
                generation: Some(st.generation),
            });
            progress.insert(tp, row.clone());
            imports.push((row, st.gaps, st.replayed, st.retired, own, importing));
        }
        self.record_used_terms(partitions).await;
        self.abandon_imports(abandoned).await;
        if imports.is_empty() {
            return out;
        }
        let store = self.io.store.clone();
        let audit = self.cfg.name.clone();
        let handover = self
            .handover
            .link
            .as_ref()
            .map(|h| h.topic().to_string())
            .unwrap_or_default();
        let written = blocking(move || {
            let mut unretired = Vec::new();
            for (row, gaps, replayed, retired, own, importing) in imports {
                // Given-up gaps inline (record format 2) are not on the side topic: swept.
                if !retired.is_empty() {
                    store.set_handover_swept(&handover, &audit, &row.topic, row.partition, None)?;
                }
                let keep: Vec<String> = gaps.iter().map(|g| g.id.clone()).collect();
                // The retired ones were in the previous owner's store only: the ledger
                // restored here counts them from this one (`settle_retired`). Marked in the
                // transaction that writes them and the ledger without them, so a crash in
                // between cannot leave a gap neither in the ledger nor counted as retired.
                store.commit_round_retiring(
                    &audit,
                    &gaps,
                    std::slice::from_ref(&row),
                    crate::store::KeyClaims::<&[u8]>::Changes(&[]),
                    &retired,
                    &[],
                )?;
                store.set_importing(
                    &handover,
                    &audit,
                    &row.topic,
                    row.partition,
                    importing.as_ref(),
                )?;
                for id in &replayed {
                    store.mark_replayed(id)?;
                }
                // A gap the state's ledger holds is not retired here, whatever this store
                // says (review of format 3, F4: a round retired it and stopped before the
                // state that said so; kept retired it would count twice, in the ledger and
                // in the retired rows). Its chunk goes again without it. Neither an
                // acknowledged gap (the state carries it inline until its row is marked
                // retired: review R6) nor one the state says is retired (format 2 carries
                // those inline too).
                let inline: HashSet<&String> = retired.iter().collect();
                let in_ledger: Vec<String> = gaps
                    .iter()
                    .filter(|g| {
                        g.state != crate::gap::GapState::Acknowledged && !inline.contains(&g.id)
                    })
                    .map(|g| g.id.clone())
                    .collect();
                let back = store.unretire(&in_ledger)?;
                if !back.is_empty() {
                    tracing::info!(audit = %audit, topic = %row.topic, partition = row.partition, gaps = ?back,
                        "gaps the state taken over holds in its ledger are no longer counted as given up here");
                    unretired.push((TopicPartition::new(row.topic.clone(), row.partition), back));
                }
                // Retired rows are the side topic's to settle (an import), but for this
                // owner's own state: they are its own, kept.
                let dropped = store.forget_unresolved(
                    &audit,
                    &row.topic,
                    row.partition,
                    row.settled,
                    &keep,
                    !own,
                )?;
                if !dropped.is_empty() {
                    tracing::info!(audit = %audit, topic = %row.topic, partition = row.partition, ?dropped,
                        "stale copies of gaps another instance resolved dropped from the local store");
                }
            }
            Ok::<_, crate::store::StoreError>(unretired)
        })
        .await;
        match written {
            Ok(unretired) => {
                for (tp, ids) in unretired {
                    self.handover
                        .pending
                        .entry(tp)
                        .or_default()
                        .chunks
                        .extend(super::retired_flow::chunks_of_ids(&ids));
                }
            }
            Err(e) => {
                tracing::error!(audit = %self.cfg.name, error = %e, "cannot write the handed-over gaps to the local store; they reach it when they next change")
            }
        }
        out
    }

    /// Of `states`, those whose partition's store marks an import unfinished that the state
    /// found may complete, with the store's count of their retired rows, the offset the
    /// import stops at and whether it takes only gaps this store has no row of
    /// ([`resume_of`]): the import was cut (a rebalance or a stop) after the partition's
    /// progress went past the state it began from. The state found is that one, or a newer
    /// one (another owner took the partition meanwhile, or its owner took it back and went
    /// on: review of format 3, N2 and T2, and review 26, F2: before, a newer state made the
    /// store "further" with part of the gaps never imported, lost, and a newer state of the
    /// same owner and term resumed as if it were the first, its owner's later verdicts on
    /// gaps this store had decided itself merged in). Unreadable: none (those partitions
    /// resume from their store as further).
    pub(super) async fn resumable_imports(
        &self,
        states: &HashMap<TopicPartition, handover::PartitionState>,
    ) -> HashMap<TopicPartition, (crate::ledger::RetiredGaps, Offset, bool)> {
        let Some(h) = &self.handover.link else {
            return HashMap::new();
        };
        let found: Vec<(TopicPartition, String, u64, u64, Offset)> = states
            .iter()
            .filter(|(_, st)| st.version >= 3)
            .map(|(tp, st)| {
                (
                    tp.clone(),
                    st.owner.clone(),
                    st.term,
                    st.generation,
                    st.settled,
                )
            })
            .collect();
        if found.is_empty() {
            return HashMap::new();
        }
        let (store, audit, topic) = (
            self.io.store.clone(),
            self.cfg.name.clone(),
            h.topic().to_string(),
        );
        let read = blocking(move || {
            let marks = store.importing(&topic, &audit)?;
            let mut out = HashMap::new();
            for (tp, owner, term, generation, settled) in found {
                let Some(mark) = marks.get(&(tp.topic.clone(), tp.partition)) else {
                    continue;
                };
                if let Some((below, only_unknown)) =
                    resume_of(mark, (&owner, term, generation, settled))
                {
                    let n = store.settle_retired(&audit, &tp.topic, tp.partition, &[])?;
                    out.insert(tp, (n, below, only_unknown));
                }
            }
            Ok::<_, crate::store::StoreError>(out)
        })
        .await;
        read.unwrap_or_else(|e| {
            tracing::warn!(audit = %self.cfg.name, error = %e, "cannot read which imports of given-up gaps were cut: none is resumed");
            HashMap::new()
        })
    }

    /// Forgets the import marks of `tps` (imports this store began and will not resume: the
    /// partition resumed from its own store, as further than the handover). Unwritable: a
    /// warning (the mark is read again at the next assignment).
    pub(super) async fn abandon_imports(&self, tps: Vec<TopicPartition>) {
        let Some(h) = &self.handover.link else {
            return;
        };
        if tps.is_empty() {
            return;
        }
        let (store, audit, topic) = (
            self.io.store.clone(),
            self.cfg.name.clone(),
            h.topic().to_string(),
        );
        let r = blocking(move || {
            for tp in tps {
                store.set_importing(&topic, &audit, &tp.topic, tp.partition, None)?;
            }
            Ok::<_, crate::store::StoreError>(())
        })
        .await;
        if let Err(e) = r {
            tracing::warn!(audit = %self.cfg.name, error = %e, "cannot forget the marks of imports not resumed");
        }
    }

    /// What the store proves of this owner's own format-3 states among `states` (review of
    /// format 3, F1): which partitions it marks swept (the side topic holds their retired
    /// gaps as it does), and for those the count of their retired rows and whether chunks
    /// of theirs are noted unpublished. Unreadable: nothing proven (those states are
    /// imported: slower, never short).
    async fn own_proofs(
        &self,
        states: &HashMap<TopicPartition, handover::PartitionState>,
        me: &str,
    ) -> super::own_proof::OwnProofs {
        let Some(h) = &self.handover.link else {
            return super::own_proof::OwnProofs::default();
        };
        let own: Vec<TopicPartition> = states
            .iter()
            .filter(|(_, st)| {
                st.version >= 3 && super::retired_flow::may_sweep(Some((st.version, &st.owner)), me)
            })
            .map(|(tp, _)| tp.clone())
            .collect();
        if own.is_empty() {
            return super::own_proof::OwnProofs::default();
        }
        let (store, audit, topic) = (
            self.io.store.clone(),
            self.cfg.name.clone(),
            h.topic().to_string(),
        );
        let read = blocking(move || {
            let swept = store.handover_swept(&topic, &audit)?;
            let noted = store.unpublished_chunks(&topic, &audit)?;
            let mut out = super::own_proof::OwnProofs::default();
            for tp in own {
                let key = (tp.topic.clone(), tp.partition);
                if let Some(term) = swept.get(&key) {
                    let n = store.settle_retired(&audit, &tp.topic, tp.partition, &[])?;
                    out.swept.insert(tp.clone(), *term);
                    if noted.get(&key).is_some_and(|c| !c.is_empty()) {
                        out.noted.insert(tp.clone());
                    }
                    out.counted.insert(tp, n);
                }
            }
            Ok::<_, crate::store::StoreError>(out)
        })
        .await;
        read.unwrap_or_else(|e| {
            tracing::warn!(audit = %self.cfg.name, error = %e, "cannot read what the store holds of this owner's given-up gaps: its own handover states are imported from the side topic");
            super::own_proof::OwnProofs::default()
        })
    }

    #[cfg(test)]
    pub(super) async fn revoke(
        &mut self,
        partitions: &[TopicPartition],
    ) -> Vec<(TopicPartition, Offset)> {
        self.revoke_as(partitions, false).await
    }

    /// Revokes `partitions`; `lost`: the consumer reports the assignment lost (its session
    /// or poll interval expired: another instance may own them and publish their state
    /// already). A lost partition's state is stored locally but neither published to the
    /// handover topic (it would replace the new owner's) nor committed (no offsets back).
    pub(super) async fn revoke_as(
        &mut self,
        partitions: &[TopicPartition],
        lost: bool,
    ) -> Vec<(TopicPartition, Offset)> {
        // An acknowledgement given since the last round goes with the handover (and leaves
        // the ledger stored here), as a round would have taken it.
        self.refresh_acknowledged().await;
        if lost {
            tracing::warn!(audit = %self.cfg.name, partitions = ?partitions,
                "assignment lost (session or poll interval expired): the state of these partitions is neither handed over nor committed");
            self.handover.lost.extend(partitions.iter().cloned());
        } else if self.handover.link.is_some() {
            // The next owner gets the latest state of each, marks set from the CLI (replay)
            // included, even when the ledger did not change since the last handover.
            let owned: Vec<TopicPartition> = partitions
                .iter()
                .filter(|tp| self.parts.contains_key(*tp))
                .cloned()
                .collect();
            self.handover.dirty.extend(owned);
        }
        let ok = self.persist().await;
        // A background read of partitions whose read failed: of no use for these any more
        // (the next round starts another for those still owned and unread). Only after the
        // last persist: a read finished but not taken yet holds them there, as in a round
        // (review 26b, G3: dropped before, they were published under a term no sweep ran
        // under, and committed).
        self.drop_reading(partitions);
        let mut out = Vec::new();
        for tp in partitions {
            if let Some(mut part) = self.parts.remove(tp) {
                // Verdicts that did not reach the store are decided again by the next owner
                // (maybe this instance): their confirmations must not hold rows twice.
                if let Some(book) = self.checker.book_mut() {
                    book.release(&mut part.ledger, ok);
                    part.held.clear(Some(book));
                }
                if ok && !lost && !self.handover.held.contains(tp) {
                    out.push((tp.clone(), part.ledger.settled()));
                }
                // Counters stay: summed over the instances of the group they are the truth.
                self.metrics.partition_revoked(tp);
                self.persisting.writes.committed.remove(tp);
                self.persisting.writes.stored.remove(tp);
                self.handover.dirty.remove(tp);
                self.handover.pending.remove(tp);
                self.handover.claims.remove(tp);
                self.handover.retired_flows.remove(tp);
                self.handover.retired_garbage.remove(tp);
                tracing::info!(audit = %self.cfg.name, %tp, settled = part.ledger.settled(), "partition revoked");
            }
        }
        if !ok {
            // Not stored, so not counted: the next owner decides these records again and
            // counts them there.
            self.persisting
                .writes
                .verdicts
                .retain(|(tp, ..)| !partitions.contains(tp));
            self.persisting
                .writes
                .causes
                .retain(|(tp, _)| !partitions.contains(tp));
        }
        // Keys the release forgot (beyond the book's capacity) leave the store too.
        if ok && self.checker.book().is_some_and(KeyBook::has_changes) {
            self.persist().await;
        }
        for tp in partitions {
            self.handover.lost.remove(tp);
        }
        self.publish();
        out
    }

    /// The stand-in credits the store kept (`KeyBook::credit`), after the claims they are
    /// confirmations of. Unreadable, the book starts without them and says so: a stand-in
    /// decided next is then missing with `shared_key`.
    async fn load_key_credits(&mut self) {
        let store = self.io.store.clone();
        let audit = self.cfg.name.clone();
        match blocking(move || store.load_key_credits(&audit)).await {
            Ok(stored) => {
                let credits = stored
                    .into_iter()
                    .filter_map(|(k, n)| Some((crate::types::Key::from_bytes(&k)?, n)));
                if let Some(book) = self.checker.book_mut() {
                    book.load_credits(credits);
                }
            }
            Err(e) => {
                tracing::error!(audit = %self.cfg.name, error = %e, "cannot read the key book's stand-in credits from the store: a dead letter's stand-in decided next may be reported missing (shared_key)")
            }
        }
    }

    /// key_columns: the confirmed counts stored with the settled offsets, so records decided
    /// before a restart keep their rows (a shared key's later record needs its own row).
    /// Unreadable, the book starts empty: a loss may then be missed, never invented.
    pub(super) async fn load_key_book(&mut self) {
        if self.checker.book().is_none() {
            return;
        }
        let store = self.io.store.clone();
        let audit = self.cfg.name.clone();
        match blocking(move || store.load_key_log(&audit)).await {
            Ok(stored) => {
                let n = stored.claims.len();
                let keys = stored
                    .claims
                    .into_iter()
                    .filter_map(|(k, c)| Some((crate::types::Key::from_bytes(&k)?, c)));
                if let Some(book) = self.checker.book_mut() {
                    book.load(keys);
                    book.set_log_rows(stored.rows);
                }
                tracing::debug!(audit = %self.cfg.name, keys = n, log_rows = stored.rows, "key book loaded from the store");
                self.load_key_credits().await;
            }
            Err(e) => {
                // Appended to only: a whole write would delete the claims it could not read,
                // and the next process that can read them should still find them.
                if let Some(book) = self.checker.book_mut() {
                    book.set_rewrite_slack(u64::MAX);
                }
                tracing::error!(audit = %self.cfg.name, error = %e, "cannot read the key book from the store: shared keys start unclaimed")
            }
        }
    }
}

/// What [`Audit::take_over`] found.
#[derive(Debug, Default)]
pub(super) struct TakenOver {
    /// Partitions taken over from a record of format 3 this owner may not count from its
    /// store, with the aggregate of their retired gaps (zero: none counted) and which
    /// chunks hold them: their rows are imported from the side topic afterwards,
    /// never on this path (`retired_flow`).
    pub handed_retired:
        HashMap<TopicPartition, (crate::ledger::RetiredGaps, super::retired_flow::Source)>,
    /// Partitions taken over from a state this owner may not sweep over
    /// ([`super::retired_flow::may_sweep`]).
    pub foreign: BTreeSet<TopicPartition>,
}

/// Whether the cut import `mark` resumes from the state `found` (its owner, term,
/// generation and settled offset), and how (see [`Audit::resumable_imports`]): from the
/// very state it began from, as it began (`Source::only_unknown` false, unbounded); from a newer one
/// (a higher term, or a later generation of the same owner and term), only with the gaps
/// below where the first state was settled that this store has no row of (`only_unknown`
/// true). Never from an older state: it is not the newest. A mark of schema v15 (no offset,
/// no generation) resumes from a state of its owner and term only, as it began.
pub(super) fn resume_of(
    mark: &crate::store::ImportMark,
    found: (&str, u64, u64, Offset),
) -> Option<(Offset, bool)> {
    let (owner, term, generation, settled) = found;
    let same_owner = mark.owner == owner && mark.term == term;
    let same = same_owner && mark.generation.is_none_or(|g| g == generation);
    if same {
        return Some((Offset::MAX, false));
    }
    let newer = term > mark.term || (same_owner && mark.generation.is_some_and(|g| generation > g));
    match mark.below {
        Some(below) if newer => Some((below.min(settled), true)),
        _ => None,
    }
}

/// The status line of a partition whose stored state was partly unreadable (`None`: all
/// of it was read).
pub(super) fn describe_unreadable(problems: &[String]) -> Option<String> {
    let first = problems.first()?;
    Some(match problems.len() {
        1 => format!("stored state partly unreadable: {first}"),
        n => format!(
            "stored state partly unreadable: {first} (and {} more, see the log)",
            n - 1
        ),
    })
}

/// The ids of the topics of `tps` as the brokers give them now (see `kafka::topic_id`);
/// a topic whose id cannot be had is left out (unknown: never read as a change).
fn topic_ids(view: &dyn KafkaView, tps: &[TopicPartition]) -> HashMap<String, String> {
    let topics: BTreeSet<&str> = tps.iter().map(|tp| tp.topic.as_str()).collect();
    let mut out = HashMap::new();
    for t in topics {
        match view.topic_id(t) {
            Ok(Some(id)) => {
                out.insert(t.to_string(), id);
            }
            Ok(None) => {}
            // A lookup that timed out (a busy broker, or one that never answers
            // DescribeTopics, as librdkafka's mock cluster of `demo`) is tried again at the
            // next assignment; a refusal (no Describe permission, an old broker) is the
            // operator's to fix, and says so.
            Err(e) if is_timeout(&e) => {
                tracing::debug!(topic = t, error = %e, "the topic's id lookup timed out: tried again at the next assignment")
            }
            Err(e) => {
                tracing::warn!(topic = t, error = %e, "cannot read the topic's id: a topic deleted and created again is seen only when its log ends below the auditor's position")
            }
        }
    }
    out
}

/// Whether a Kafka error is a request that timed out (as opposed to one the broker refused).
fn is_timeout(e: &rdkafka::error::KafkaError) -> bool {
    use rdkafka::types::RDKafkaErrorCode::{OperationTimedOut, RequestTimedOut};
    matches!(
        e.rdkafka_error_code(),
        Some(OperationTimedOut | RequestTimedOut)
    )
}

/// The topic id stored with a partition's progress (`ledger.topic_id`, see
/// [`super::persist::ledger_write`]).
fn stored_topic_id(ledger: &serde_json::Value) -> Option<String> {
    ledger.get("topic_id")?.as_str().map(str::to_string)
}

/// What [`Audit::out_of_range`] does to a partition's held records when it re-positions
/// the partition at `seek` (`replaced`: its ledger was started again).
/// The held records at or after `seek` stay ([`Held::forget_below`]): batches the tail read
/// before it re-positions are still on their way, and must queue behind them. A ledger
/// started again (topic recreated) forgets them all.
pub(super) fn reposition_held(
    part: &mut Part,
    seek: Offset,
    replaced: bool,
    book: Option<&mut KeyBook>,
) {
    if replaced {
        part.held.clear(book);
    } else {
        part.held.forget_below(seek, book);
    }
    // A position the consumer reported before this one re-positioning is not where the
    // restarted fetch stands (nor the replaced ledger's): it reports again once it reads.
    part.read_to = None;
}
