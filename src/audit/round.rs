//! The verify round: due records → verify against the sink → verdicts into the ledgers,
//! then persist and commit.

use super::{Audit, OFFSET_ROUND_RECORDS};
use crate::config::MatchStrategy;
use crate::gap::TopicPartition;
use crate::ledger::{Applied, Segment, Verdict};
use crate::sink::{SinkError, Verifier};
use std::time::Duration;

impl<V: Verifier> Audit<V> {
    /// One verify round.
    pub(super) async fn round(&mut self) {
        // Timed for the scale benchmark and for operators (debug level: once per round).
        let started = std::time::Instant::now();
        // First: a gap acknowledged since the last round leaves the ledger before anything
        // is decided, so a missing record right after it opens a new gap (that pages)
        // instead of growing the acknowledged one silently.
        self.refresh_acknowledged().await;
        self.poll_pipeline().await;
        let now = self.clock.now_ms();
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
        let mut queried = false;
        let mut failure: Option<SinkError> = None;
        let hold = self.hold_verdicts();
        let time_rule = self.cfg.pipeline_group.is_none();
        let keyed_book = self.checker.book().is_some();
        let tps: Vec<TopicPartition> = self.parts.keys().cloned().collect();
        // A sink that could not be reached once this round (a timeout, a refused
        // connection) is not asked again until the next: a black-holed sink costs one
        // timeout per round, not one per partition, and the tail's events keep being
        // drained. A refusal (a server error) may be about one partition's data (a key
        // value the sink's column type rejects): it ends that partition's work only, or one
        // poisoned record would stop every later partition's verdicts for good.
        let trips = |e: &SinkError| matches!(e, SinkError::Unavailable(_));
        let mut tripped = false;
        if let Err(e) = self.settle_deleted(&tps).await {
            tripped = trips(&e);
            failure = Some(e);
        }
        let budget = self.checker.recheck_budget();
        for tp in &tps {
            if self.cancel.is_cancelled() || tripped {
                break;
            }
            // Whether this partition's due records hit the round's limit (a backlog).
            let mut full = false;
            let segs = match self.parts.get_mut(tp) {
                Some(p) => {
                    // Set every round, so no ledger (new, restored, reset) can miss it.
                    p.ledger.pipeline.set_time_rule(time_rule);
                    p.ledger.track_confirmations(keyed_book);
                    p.ledger.give_up(now, give_up);
                    // Given-up records hold no claim on their keys' rows any more.
                    if let Some(book) = self.checker.book_mut() {
                        for k in p.ledger.take_released_keys() {
                            book.forget_missing(&k);
                        }
                    }
                    if hold {
                        Vec::new()
                    } else {
                        let due = p.ledger.due(now, grace, limit);
                        let n: u64 = due.iter().map(|s| s.run.len()).sum();
                        full = n >= limit;
                        due
                    }
                }
                None => continue,
            };
            let mut applied = Applied::default();
            let mut failed_here = false;
            if !segs.is_empty() {
                queried = true;
                match self.verify(tp, &segs, false).await {
                    Ok(v) => {
                        let decided_at = self.clock.now_ms();
                        if let Some(part) = self.parts.get_mut(tp) {
                            applied = part.ledger.apply(&v, decided_at);
                        }
                        // Only a backlog that is being worked off calls for the next round
                        // at once: one the sink refuses would spin rounds back to back.
                        self.backlog |= full;
                    }
                    Err(e) => {
                        failed_here = true;
                        tripped |= trips(&e);
                        failure = Some(e);
                    }
                }
            }
            // Late arrivals, after the due verdicts (which may have grown the missing span).
            if !failed_here {
                match self.recheck(tp, budget).await {
                    Ok(Some(a)) => {
                        queried = true;
                        applied = applied.merge(a);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        queried = true;
                        tripped |= trips(&e);
                        failure = Some(e);
                    }
                }
            }
            let decided_at = self.clock.now_ms();
            let Some(part) = self.parts.get_mut(tp) else {
                continue;
            };
            let dirty = part.ledger.take_dirty_gaps();
            // Only rounds that decided something: while the store refuses writes this list
            // must grow with verdicts, not with partitions × rounds.
            if applied != Applied::default() {
                self.writes.verdicts.push((tp.clone(), applied, decided_at));
            }
            for g in dirty {
                self.report_gap(tp, &g);
            }
        }
        self.cap_missing_keys();
        if self.cancel.is_cancelled() {
            // Shutting down: what was decided is persisted by the drain; the questions cut
            // short say nothing about the sink.
            return;
        }
        if !queried && failure.is_none() {
            let t = std::time::Instant::now();
            let r = self.sink.ping().await;
            self.metrics.sink_query(t.elapsed(), r.is_ok());
            if let Err(e) = r {
                failure = Some(e);
            }
        }
        // An unreachable sink: the next round waits verify_interval, backlog or not (an
        // instant refusal of the connection would otherwise spin rounds back to back, each
        // polling the pipeline group and the store).
        if failure.is_some() && tripped {
            self.backlog = false;
        }
        let up = self.health.sink_answered(&self.cfg.name, failure.as_ref());
        self.metrics.sink_up(up);
        self.retention
            .refresh(&self.cfg.name, &self.cfg.topics)
            .await;
        self.watch_log_start();
        let verified_ms = started.elapsed().as_millis() as u64;
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
            "verify round finished"
        );
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
        let metrics = &self.metrics;
        let obs = move |d: Duration, ok: bool| metrics.sink_query(d, ok);
        let cancel = self.cancel.clone();
        // Dropping it mid-way is safe: the ledger changes only once answers are applied.
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(SinkError::Unavailable("shutting down".to_string())),
            r = self.checker.recheck_ledger(&self.sink, tp, &mut part.ledger, budget, &obs) => r,
        }
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

    pub(super) async fn verify(
        &mut self,
        tp: &TopicPartition,
        segs: &[Segment],
        recheck: bool,
    ) -> Result<Vec<Verdict>, SinkError> {
        if segs.is_empty() {
            return Ok(Vec::new());
        }
        let metrics = &self.metrics;
        let obs = move |d: Duration, ok: bool| metrics.sink_query(d, ok);
        let cancel = self.cancel.clone();
        let ask = async {
            if recheck {
                self.checker.recheck(&self.sink, tp, segs, &obs).await
            } else {
                self.checker.due(&self.sink, tp, segs, &obs).await
            }
        };
        // Dropping the verification mid-way is safe: verdicts (and the key book) change
        // only once every query of it has answered.
        tokio::select! {
            biased;
            _ = cancel.cancelled() => Err(SinkError::Unavailable("shutting down".to_string())),
            r = ask => r,
        }
    }

    /// Ranges Kafka deleted before the auditor read them (SPEC guarantee 8): with
    /// offset_columns the sink settles what it holds (its rows carry the offsets); the rest,
    /// and everything under the other strategies, is counted unverifiable — never lost.
    pub(super) async fn settle_deleted(&mut self, tps: &[TopicPartition]) -> Result<(), SinkError> {
        for tp in tps {
            let Some(runs) = self.parts.get(tp).map(|p| p.ledger.deleted_to_settle()) else {
                continue;
            };
            for run in runs {
                let present = if self.cfg.matching.strategy == MatchStrategy::OffsetColumns {
                    let seg = Segment {
                        run,
                        keys: Vec::new(),
                        max_ts: None,
                    };
                    match self
                        .verify(tp, std::slice::from_ref(&seg), false)
                        .await?
                        .first()
                    {
                        Some(Verdict::Known { present, .. }) => present.clone(),
                        _ => continue,
                    }
                } else {
                    Vec::new()
                };
                let Some(part) = self.parts.get_mut(tp) else {
                    continue;
                };
                let applied = part.ledger.settle_deleted(run.first, &present);
                let dirty = part.ledger.take_dirty_gaps();
                tracing::warn!(audit = %self.cfg.name, %tp, first = run.first, last = run.last,
                    in_sink = applied.confirmed, unverifiable = applied.unverifiable,
                    "offsets Kafka deleted before the auditor read them: {} found in the sink, {} unverifiable (not counted as lost)",
                    applied.confirmed, applied.unverifiable);
                self.writes
                    .verdicts
                    .push((tp.clone(), applied, self.clock.now_ms()));
                for g in dirty {
                    self.report_gap(tp, &g);
                }
            }
        }
        Ok(())
    }
}
