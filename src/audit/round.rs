//! The verify round: due records → verify against the sink → verdicts into the ledgers,
//! then persist and commit.

use super::{Audit, OFFSET_ROUND_RECORDS};
use crate::config::MatchStrategy;
use crate::ledger::{Applied, NextPiece, OffsetRun, RecheckBudget, Segment, Verdict};
use crate::sink::{SinkError, Verifier};
use crate::time_scan;
use crate::types::TopicPartition;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A piece of a range Kafka deleted unread covers this many listing leaves
/// (`verify::Limits::list_threshold`, `batch_size` up to 10,000 offsets): its bisection ends
/// after at most four splits, so one piece costs at most 1 + 2·15 + 16 = 47 queries however
/// its offsets lie, and its first count reads at most 16 × list_threshold index entries —
/// far inside `query_timeout` on any sink that answers at all.
pub(super) const DELETED_PIECE_LEAVES: u64 = 16;

/// Queries a partition's deleted ranges may use per round before the next piece waits for
/// the next round: 16, the budget of a partition's re-checks (`Checker::recheck_budget`).
/// A piece started within it may finish past it, so a partition costs at most
/// 15 + 47 = 62 settlement queries a round; a range wholly in the sink (or wholly absent)
/// settles 16 pieces a round, 256 × list_threshold offsets (256,000 at the default
/// `batch_size`).
pub(super) const DELETED_QUERIES: u64 = 16;

/// What settling the deleted ranges told about the sink ([`Audit::settle_deleted`]).
pub(super) enum Settled {
    /// The sink was not asked, or refused a question (about that question, not the sink).
    Quiet,
    /// The sink answered at least one question.
    Answered,
    /// The sink could not be reached (a timeout, a refused connection) and answered nothing.
    Unreachable(SinkError),
}

/// `$ask`, a question to the sink, unless shutdown (`$cancel`) comes first: then "shutting
/// down", an unknown answer on which nothing is decided. Dropping a question mid-way is
/// safe: verdicts (and the key book) change only once every query of it has answered. The
/// one cancel-aware sink call of the round; a macro, not an `async fn`, so that the
/// question's future is not moved into a second one (the round's future is deep enough
/// that a debug build's test thread ran out of stack with that extra level).
macro_rules! unless_shut_down {
    ($cancel:expr, $ask:expr $(,)?) => {
        tokio::select! {
            biased;
            _ = $cancel.cancelled() => Err(SinkError::Unavailable("shutting down".to_string())),
            r = $ask => r,
        }
    };
}

/// What a round's partitions share when their due records are taken.
struct DueRule {
    now: i64,
    /// The moment records must have been due at to be decided: `now`, or, with a
    /// dead-letter topic, the last moment its reader had read everything written before
    /// (`kafka::dead_letters`), so that every dead letter of a due record is known first.
    due_at: i64,
    grace: i64,
    give_up: i64,
    limit: u64,
    hold: bool,
    time_rule: bool,
    keyed_book: bool,
}

/// How the sink answered a round's questions, for the round to judge it by (what the
/// partitions decided goes to persist as each is decided).
#[derive(Default)]
struct Answers {
    /// Whether the sink was asked anything.
    queried: bool,
    /// The sink could not be reached (a timeout, a refused connection): nothing more is
    /// asked this round, so a black-holed sink costs one timeout per round, not one per
    /// partition, and the tail's events keep being drained.
    tripped: bool,
    /// The round's last sink error.
    failure: Option<SinkError>,
}

impl Answers {
    /// A question failed. A refusal (a server error) may be about one partition's data (a
    /// key value the sink's column type rejects): it ends that partition's work only, or
    /// one poisoned record would stop every later partition's verdicts for good.
    fn failed(&mut self, e: SinkError) {
        self.queried = true;
        self.tripped |= matches!(e, SinkError::Unavailable(_));
        self.failure = Some(e);
    }
}

impl Audit {
    /// One verify round.
    pub(super) async fn round(&mut self) {
        // Timed for the scale benchmark and for operators (debug level: once per round).
        let started = std::time::Instant::now();
        // First: a gap acknowledged since the last round leaves the ledger before anything
        // is decided, so a missing record right after it opens a new gap (that pages)
        // instead of growing the acknowledged one silently.
        self.refresh_acknowledged().await;
        self.poll_pipeline().await;
        let now = self.io.clock.now_ms();
        let grace = self.cfg.grace.as_millis() as i64;
        let give_up = self.cfg.give_up_after.as_millis() as i64;
        let limit = match self.cfg.matching.strategy {
            MatchStrategy::KeyColumns | MatchStrategy::DocId => {
                (self.cfg.batch_size as u64 * 100).max(100_000)
            }
            // Bounded so that one round's transient work (new gaps, their store rows) stays
            // bounded in an incident; a round that hits it is followed at once by another.
            _ => (self.cfg.max_pending as u64).min(OFFSET_ROUND_RECORDS),
        };
        self.backlog = false;
        let mut answers = Answers::default();
        // Both asked every round: each keeps its own state and status. A sink table that
        // may hold another topic's rows holds every verdict, late arrivals and settled
        // deletions too: any of its rows may be the other topic's.
        let held_for_pipeline = self.hold_verdicts();
        let (table_hold, table_error) = self.hold_for_shared_table().await;
        let hold = table_hold | held_for_pipeline;
        let time_rule = !self.cfg.has_position_source();
        let keyed_book = self.checker.book().is_some();
        let tps: Vec<TopicPartition> = self.parts.keys().cloned().collect();
        if table_hold {
            // Nothing below is asked of the sink; the look's own error is the round's.
            if let Some(e) = table_error {
                answers.failed(e);
            }
        }
        // key_columns: keys of new records that hold claims from earlier ones are counted
        // before any of this round's decisions, so rows the sink deleted free their claims
        // while the new rows are (most likely) not written yet.
        if !answers.tripped && !self.io.cancel.is_cancelled() {
            match self.refresh_claims().await {
                Ok(q) => answers.queried |= q,
                Err(e) => answers.failed(e),
            }
        }
        let budget = self.checker.recheck_budget();
        if let Some(letters) = &self.io.dead_letters {
            // Before reading how far it caught up: a partition assigned since the last
            // round sets it back until the reader has read the topic again.
            letters.set_owned(self.parts.keys().cloned());
        }
        let due_at = self
            .io
            .dead_letters
            .as_ref()
            .map_or(now, |letters| letters.caught_up_ms().min(now));
        let rule = DueRule {
            now,
            due_at,
            grace,
            give_up,
            limit,
            hold,
            time_rule,
            keyed_book,
        };
        // key_columns read by time: every partition's due keys read once, before the
        // partitions decide one after the other as always.
        let prefetch_started = std::time::Instant::now();
        if !answers.tripped && !self.io.cancel.is_cancelled() {
            self.prefetch_due(&tps, &rule, &mut answers).await;
        }
        let prefetch_ms = prefetch_started.elapsed().as_millis() as u64;
        let decide_started = std::time::Instant::now();
        for tp in &tps {
            if self.io.cancel.is_cancelled() || answers.tripped {
                break;
            }
            // Persist takes what was decided at once, whatever comes next (a shutdown's drain
            // writes it).
            if let Some(decided) = self
                .decide_partition(tp, &rule, budget, table_hold, &mut answers)
                .await
            {
                self.persisting.writes.verdicts.push(decided);
            }
        }
        let decide_ms = decide_started.elapsed().as_millis() as u64;
        // Ranges Kafka deleted unread, after every partition's due work: bounded pieces, and
        // a failure of theirs ends only their own work this round (`settle_deleted`).
        if !answers.tripped && !table_hold && !self.io.cancel.is_cancelled() {
            match self.settle_deleted(&tps).await {
                Settled::Answered => answers.queried = true,
                Settled::Quiet => {}
                // Nothing else asked the sink this round and it could not be reached: that
                // is the round's answer (a ping would only wait for a second timeout).
                Settled::Unreachable(e) if !answers.queried => answers.failed(e),
                // The round's other questions tell whether the sink is up.
                Settled::Unreachable(_) => {}
            }
        }
        self.checker.end_round();
        self.cap_missing_keys();
        self.cap_open_gaps();
        if let Some(book) = self.checker.book_mut() {
            let (by_time, by_key) = book.take_counted();
            self.metrics.due_keys_counted(by_time, by_key);
        }
        if self.io.cancel.is_cancelled() {
            // Shutting down: what was decided is persisted by the drain; the questions cut
            // short say nothing about the sink.
            return;
        }
        if !answers.queried && answers.failure.is_none() {
            let t = std::time::Instant::now();
            let r = self.io.sink.ping().await;
            self.metrics.sink_query(t.elapsed(), r.is_ok());
            if let Err(e) = r {
                answers.failure = Some(e);
            }
        }
        // An unreachable sink: the next round waits verify_interval, backlog or not (an
        // instant refusal of the connection would otherwise spin rounds back to back, each
        // polling the pipeline group and the store).
        if answers.failure.is_some() && answers.tripped {
            self.backlog = false;
        }
        let up = self
            .watch
            .health
            .sink_answered(&self.cfg.name, answers.failure.as_ref());
        self.metrics.sink_up(up);
        if !up {
            self.sink_was_down();
        }
        self.watch
            .retention
            .refresh(&self.cfg.name, &self.cfg.topics)
            .await;
        self.watch_log_start();
        let verified_ms = started.elapsed().as_millis() as u64;
        self.read_unread().await;
        self.settle_waiting_evidence();
        if self.persist().await {
            self.commit_settled();
        }
        self.update_flow();
        self.publish();
        tracing::debug!(
            audit = %self.cfg.name,
            partitions = tps.len(),
            took_ms = started.elapsed().as_millis() as u64,
            // Before the store write: the rest of `took_ms` is persisting the round.
            verified_ms,
            // Of it: reading every partition's due keys by time (key_columns), then the
            // partitions' questions and verdicts.
            prefetch_ms,
            decide_ms,
            "verify round finished"
        );
    }

    /// One partition's questions in a round: its due records, then its re-checks (late
    /// arrivals), then what the dead-letter topic and the re-checks' keyed findings settle.
    /// Returns what it decided and when (`None`: nothing, or not assigned); the sink's
    /// errors go to `answers`.
    async fn decide_partition(
        &mut self,
        tp: &TopicPartition,
        rule: &DueRule,
        budget: RecheckBudget,
        table_hold: bool,
        answers: &mut Answers,
    ) -> Option<(TopicPartition, Applied, i64)> {
        // Whether this partition's due records hit the round's limit (a backlog).
        let (segs, full) = self.due_of(tp, rule)?;
        let mut applied = Applied::default();
        let mut failed_here = false;
        if !segs.is_empty() {
            answers.queried = true;
            match self.verify(tp, &segs, false).await {
                Ok(v) => {
                    let decided_at = self.io.clock.now_ms();
                    if let Some(part) = self.parts.get_mut(tp) {
                        applied = match &self.io.dead_letters {
                            Some(letters) => {
                                let index = letters.lock();
                                part.ledger.apply_with_dead_letters(&v, decided_at, &|run| {
                                    index.named_in(tp, run)
                                })
                            }
                            None => part.ledger.apply(&v, decided_at),
                        };
                        self.checker.take_credits(&mut part.ledger);
                    }
                    // Only a backlog that is being worked off calls for the next round
                    // at once: one the sink refuses would spin rounds back to back.
                    self.backlog |= full;
                }
                Err(e) => {
                    failed_here = true;
                    answers.failed(e);
                }
            }
        }
        // Late arrivals, after the due verdicts (which may have grown the missing span).
        if !failed_here && !table_hold {
            match self.recheck(tp, budget).await {
                Ok(Some(a)) => {
                    answers.queried = true;
                    applied = applied.merge(a);
                }
                Ok(None) => {}
                Err(e) => answers.failed(e),
            }
        }
        let decided_at = self.io.clock.now_ms();
        let part = self.parts.get_mut(tp)?;
        // Dead letters read after their records were declared missing: those records
        // turn dead-lettered (like late arrivals); then what can no longer change a
        // verdict is forgotten.
        // Then the re-checks' keyed findings, while the coordinates are still held: a
        // named record found late leaves a stand-in credit, a lent credit turns its
        // record dead-lettered or goes back (key_columns).
        if let Some(letters) = &self.io.dead_letters {
            let mut index = letters.lock();
            if part.ledger.missing() > 0 {
                let named = index.named_on(tp);
                if !named.is_empty() {
                    applied = applied.merge(part.ledger.dead_letter_missing(&named));
                }
            }
            applied = applied.merge(
                part.ledger
                    .settle_recheck_marks(&|run| index.named_in(tp, run)),
            );
            index.forget_below(tp, part.ledger.dead_letter_floor());
        } else {
            applied = applied.merge(part.ledger.settle_recheck_marks(&|_| Vec::new()));
        }
        self.checker.take_credits(&mut part.ledger);
        let dirty = part.ledger.take_dirty_gaps();
        for g in dirty {
            self.report_gap(tp, &g);
        }
        // Only rounds that decided something: while the store refuses writes the verdicts
        // waiting for it must grow with verdicts, not with partitions × rounds.
        (applied != Applied::default()).then(|| (tp.clone(), applied, decided_at))
    }

    /// One partition's round preamble and its due records (`None`: not assigned). Set
    /// every round, so no ledger (new, restored, reset) can miss them: the due rule's mode
    /// and whether confirmations are tracked; records past `give_up_after` given up, their
    /// keys' claims released.
    fn due_of(&mut self, tp: &TopicPartition, rule: &DueRule) -> Option<(Vec<Segment>, bool)> {
        let p = self.parts.get_mut(tp)?;
        p.ledger.pipeline.set_time_rule(rule.time_rule);
        p.ledger.track_confirmations(rule.keyed_book);
        p.ledger.give_up(rule.now, rule.give_up);
        // Given-up records hold no claim on their keys' rows any more.
        if let Some(book) = self.checker.book_mut() {
            for k in p.ledger.take_released_keys() {
                book.forget_missing(&k);
            }
        }
        // A partition whose pipeline commits disappeared (the group deleted or expired)
        // waits too: whether the pipeline wrote what it read before is known only once it
        // commits again, from wherever it restarts.
        if rule.hold || p.ledger.pipeline.vanished().is_some() {
            return Some((Vec::new(), false));
        }
        let due = p.ledger.due(rule.due_at, rule.grace, rule.limit);
        let n: u64 = due.iter().map(|s| s.run.len()).sum();
        Some((due, n >= rule.limit))
    }

    /// key_columns read by time: the seconds of the keys every partition has due this
    /// round read once ([`crate::verify::Checker::prefetch_due`]). The due records are
    /// taken as [`Self::due_of`] takes them (the same rule: `due` only splits runs, so
    /// taking them again there gives the same ones), without its preamble, which stays in
    /// partition order. Up to [`time_scan::PREFETCH_KEYS`] keys: the partitions past them
    /// read for themselves. A failure is the round's, as a partition's question's would
    /// be (an unreachable sink ends the round's questions).
    async fn prefetch_due(
        &mut self,
        tps: &[TopicPartition],
        rule: &DueRule,
        answers: &mut Answers,
    ) {
        // No count of an earlier round's outlives it, whatever ended that round early.
        self.checker.end_round();
        if rule.hold || self.checker.book().and_then(|b| b.time_column()).is_none() {
            return;
        }
        let (mut parts, mut keys) = (Vec::new(), 0usize);
        for tp in tps {
            let Some(p) = self.parts.get_mut(tp) else {
                continue;
            };
            p.ledger.pipeline.set_time_rule(rule.time_rule);
            p.ledger.track_confirmations(rule.keyed_book);
            if p.ledger.pipeline.vanished().is_none() {
                let due = p.ledger.due(rule.due_at, rule.grace, rule.limit);
                keys += due.iter().map(|s| s.keys.len()).sum::<usize>();
                parts.push((tp.clone(), due));
            }
            // Bounded: the keys of every partition held at once would be `max_pending`.
            if keys >= time_scan::PREFETCH_KEYS {
                break;
            }
        }
        if parts.iter().all(|(_, due)| due.is_empty()) {
            return;
        }
        let obs = self.metrics.query_observer();
        let r = unless_shut_down!(
            self.io.cancel,
            self.checker.prefetch_due(&self.io.sink, &parts, &obs),
        );
        match r {
            Ok(()) => answers.queried = true,
            Err(e) => answers.failed(e),
        }
    }

    /// The round's claim refresh ([`crate::verify::Checker::refresh_claims`]); whether the
    /// sink was asked. Cut short by shutdown (the keys taken are then not looked at early).
    async fn refresh_claims(&mut self) -> Result<bool, SinkError> {
        let max = self.checker.refresh_budget();
        let obs = self.metrics.query_observer();
        let freed = unless_shut_down!(
            self.io.cancel,
            self.checker.refresh_claims(&self.io.sink, max, &obs),
        )?;
        let Some(freed) = freed else {
            return Ok(false);
        };
        if freed > 0 {
            tracing::debug!(audit = %self.cfg.name, freed,
                "claims of records whose rows the sink no longer holds were freed (rows deleted by the sink)");
        }
        Ok(true)
    }

    /// Re-checks one partition's missing records within the round's budget
    /// ([`Checker::recheck_ledger`]). `None`: the sink was not asked.
    pub(super) async fn recheck(
        &mut self,
        tp: &TopicPartition,
        budget: crate::ledger::RecheckBudget,
    ) -> Result<Option<Applied>, SinkError> {
        let Some(part) = self.parts.get_mut(tp) else {
            return Ok(None);
        };
        let obs = self.metrics.query_observer();
        unless_shut_down!(
            self.io.cancel,
            self.checker
                .recheck_ledger(&self.io.sink, tp, &mut part.ledger, budget, &obs),
        )
    }

    /// key_columns / doc_id: keeps the keys held for missing records within
    /// `max_missing_keys` (memory bounded in a total loss), giving up the oldest first.
    pub(super) fn cap_missing_keys(&mut self) {
        let cap = self.cfg.max_missing_keys as u64;
        let mut total: u64 = self
            .parts
            .values()
            .map(|p| p.ledger.missing_key_count())
            .sum();
        if total <= cap {
            return;
        }
        let mut dropped = 0;
        while total > cap {
            // The partition holding the most keys gives up its oldest runs first.
            let Some(part) = self
                .parts
                .values_mut()
                .max_by_key(|p| p.ledger.missing_key_count())
            else {
                break;
            };
            let n = part.ledger.drop_missing_keys(total - cap);
            if n == 0 {
                break;
            }
            total -= n;
            dropped += n;
            if let Some(book) = self.checker.book_mut() {
                for k in part.ledger.take_released_keys() {
                    book.forget_missing(&k);
                }
            }
        }
        self.metrics.missing_keys_dropped(dropped);
        tracing::warn!(audit = %self.cfg.name, dropped, max_missing_keys = cap,
            "max_missing_keys reached: the oldest {dropped} missing records are no longer re-checked (they stay missing; a late arrival among them goes unseen)");
    }

    /// Keeps the gaps the audit holds in memory within `max_open_gaps`: the partitions
    /// holding most fold their oldest gaps into their overflow gap (`fold.rs`), never a
    /// silent drop: the overflow gap spans and counts them, `gaps_folded_total` counts them.
    pub(super) fn cap_open_gaps(&mut self) {
        let cap = self.cfg.max_open_gaps;
        let total: usize = self.parts.values().map(|p| p.ledger.gaps_in_memory()).sum();
        if total <= cap {
            return;
        }
        let mut excess = total - cap;
        let mut order: Vec<(usize, TopicPartition)> = self
            .parts
            .iter()
            .map(|(tp, p)| (p.ledger.gaps_in_memory(), tp.clone()))
            .collect();
        order.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        let mut folded = 0;
        for (_, tp) in order {
            if excess == 0 {
                break;
            }
            let Some(part) = self.parts.get_mut(&tp) else {
                continue;
            };
            excess -= part.ledger.fold_oldest(excess).min(excess);
            let n = part.ledger.take_folded();
            if n == 0 {
                continue;
            }
            folded += n;
            if let Some(book) = self.checker.book_mut() {
                for k in part.ledger.take_released_keys() {
                    book.forget_missing(&k);
                }
            }
            let dirty = part.ledger.take_dirty_gaps();
            for g in dirty {
                self.report_gap(&tp, &g);
            }
        }
        self.persisting.writes.folded += folded;
        if folded > 0 {
            tracing::warn!(audit = %self.cfg.name, folded, max_open_gaps = cap,
                "max_open_gaps reached: the oldest {folded} gaps were folded into their partition's overflow gap (cause `folded`: it spans them and counts their missing records; they are no longer re-checked)");
        }
    }

    pub(super) async fn verify(
        &mut self,
        tp: &TopicPartition,
        segs: &[Segment],
        recheck: bool,
    ) -> Result<Vec<Verdict>, SinkError> {
        if segs.is_empty() {
            return Ok(Vec::new());
        }
        let obs = self.metrics.query_observer();
        let ask = async {
            if recheck {
                self.checker.recheck(&self.io.sink, tp, segs, &obs).await
            } else {
                self.checker.due(&self.io.sink, tp, segs, &obs).await
            }
        };
        unless_shut_down!(self.io.cancel, ask)
    }

    /// Ranges Kafka deleted before the auditor read them (SPEC guarantee 8): with
    /// offset_columns the sink settles what it holds (its rows carry the offsets); the rest,
    /// everything past `max_deleted_checked` offsets of a range, and everything under the
    /// other strategies, is counted unverifiable — never lost.
    ///
    /// Such a range can be tens of millions of offsets (an outage longer than retention):
    /// asked in one question it timed out, or bisected into a million queries, and held
    /// every partition's verdicts meanwhile. So each partition's ranges are asked in pieces
    /// of [`DELETED_PIECE_LEAVES`] listing leaves, pieces after pieces while the partition
    /// has used fewer than [`DELETED_QUERIES`] queries this round; the gap's cursor keeps the
    /// place (persisted with the gap). This runs after the round's due work.
    ///
    /// A failure (the sink refused or timed out on a piece) is logged and ends that
    /// partition's settlement for the round (every partition's, when the sink could not be
    /// reached): the piece is asked again next round. It never undoes the round's verdicts,
    /// and it is the round's failure (`sink_up` 0) only when nothing else asked the sink this
    /// round and the sink could not be reached ([`Settled::Unreachable`]): otherwise the
    /// round's other answers, or the ping, tell whether the sink is up — a refusal of one
    /// settlement question is not a sink outage.
    pub(super) async fn settle_deleted(&mut self, tps: &[TopicPartition]) -> Settled {
        let offsets = self.cfg.matching.strategy == MatchStrategy::OffsetColumns;
        let limits = self.checker.limits();
        let piece_len = DELETED_PIECE_LEAVES * limits.list_threshold.max(1);
        let max_checked = if offsets {
            self.cfg.max_deleted_checked
        } else {
            0
        };
        let mut answered = false;
        let mut unreachable = None;
        'parts: for tp in tps {
            let Some(rests) = self.parts.get(tp).map(|p| p.ledger.deleted_to_settle()) else {
                continue;
            };
            let mut used = 0u64;
            for mut d in rests {
                loop {
                    if self.io.cancel.is_cancelled() {
                        break 'parts;
                    }
                    let (piece, present) = match d.next(piece_len, max_checked) {
                        NextPiece::Beyond(rest) => {
                            // Under the other strategies the sink's rows carry no offsets:
                            // the summary below says it all.
                            if offsets {
                                tracing::warn!(audit = %self.cfg.name, %tp, first = rest.first, last = rest.last,
                                    max_deleted_checked = max_checked,
                                    "offsets {}..={} Kafka deleted before the auditor read them are unverifiable without asking the sink: the range is longer than max_deleted_checked ({max_checked} offsets asked about); not counted as lost",
                                    rest.first, rest.last);
                            }
                            (rest, Vec::new())
                        }
                        NextPiece::Ask(piece) => {
                            if used >= DELETED_QUERIES {
                                // The rest waits for the next round.
                                continue 'parts;
                            }
                            match self.ask_deleted(tp, piece).await {
                                Ok((present, n)) => {
                                    used += n;
                                    answered = true;
                                    (piece, present)
                                }
                                Err(_) if self.io.cancel.is_cancelled() => break 'parts,
                                Err(e) => {
                                    tracing::warn!(audit = %self.cfg.name, %tp, first = piece.first,
                                        last = piece.last, error = %e,
                                        "a piece of a range Kafka deleted unread could not be settled: asked again next round");
                                    if matches!(e, SinkError::Unavailable(_)) {
                                        unreachable = Some(e);
                                        break 'parts;
                                    }
                                    continue 'parts;
                                }
                            }
                        }
                    };
                    let Some(part) = self.parts.get_mut(tp) else {
                        continue 'parts;
                    };
                    let applied = part.ledger.settle_deleted(d.gap, piece, &present);
                    let dirty = part.ledger.take_dirty_gaps();
                    tracing::debug!(audit = %self.cfg.name, %tp, gap = d.gap, first = piece.first,
                        last = piece.last, in_sink = applied.confirmed,
                        unverifiable = applied.unverifiable, "a piece of a deleted range settled");
                    self.persisting.writes.verdicts.push((
                        tp.clone(),
                        applied,
                        self.io.clock.now_ms(),
                    ));
                    for g in dirty {
                        if g.first == d.gap && !g.unsettled {
                            let len = (g.last - g.first + 1) as u64;
                            tracing::warn!(audit = %self.cfg.name, %tp, first = g.first, last = g.last,
                                in_sink = len - g.missing, unverifiable = g.missing,
                                "offsets Kafka deleted before the auditor read them: {} found in the sink, {} unverifiable (not counted as lost)",
                                len - g.missing, g.missing);
                        }
                        self.report_gap(tp, &g);
                    }
                    if piece.last >= d.rest.last {
                        break;
                    }
                    d.rest.first = piece.last + 1;
                }
            }
        }
        match unreachable {
            _ if answered => Settled::Answered,
            Some(e) => Settled::Unreachable(e),
            None => Settled::Quiet,
        }
    }

    /// Asks the sink which offsets of `piece` (a piece of a range Kafka deleted unread) it
    /// holds (offset_columns: a count, then bisection down to listing leaves); with the
    /// number of queries that took. Cut short by shutdown.
    async fn ask_deleted(
        &self,
        tp: &TopicPartition,
        piece: OffsetRun,
    ) -> Result<(Vec<OffsetRun>, u64), SinkError> {
        let queries = AtomicU64::new(0);
        let metrics = &self.metrics;
        let obs = |d: Duration, ok: bool| {
            queries.fetch_add(1, Ordering::Relaxed);
            metrics.sink_query(d, ok);
        };
        let seg = Segment {
            run: piece,
            keys: Vec::new(),
            max_ts: None,
        };
        let limits = self.checker.limits();
        let verdicts = unless_shut_down!(
            self.io.cancel,
            crate::verify::by_offsets(&self.io.sink, tp, std::slice::from_ref(&seg), limits, &obs),
        )?;
        let present = match verdicts.into_iter().next() {
            Some(Verdict::Known { present, .. }) => present,
            // Nothing is decided without an answer.
            _ => {
                return Err(SinkError::Unavailable(
                    "no answer about the piece".to_string(),
                ));
            }
        };
        Ok((present, queries.load(Ordering::Relaxed)))
    }
}
