//! A closed range of one partition decided once, offline: the records read → the daemon's
//! ledger → the due rule → the daemon's [`Checker`] against the sink → verdicts and gaps.
//!
//! `gap-auditor check` and `gap-auditor replay` (and through it the CLI and `demo`) both
//! come through here, so "which records are due", "ask until nothing due is left" and
//! "what a verdict makes of a record" have one implementation (SPEC guarantee 9: `check`
//! never reports what `run` would not; replay writes what `run` would find absent, dead
//! letters aside: it does not read the dead-letter topic). Reading Kafka stays with the
//! caller: `check` streams a range and keeps nothing of it, `replay` keeps the records'
//! bytes to write them again.

use crate::gap::Gap;
use crate::ledger::{Observed, OffsetRun, PartitionLedger, Verdict, runs};
use crate::record::{FilterReason, Tag};
use crate::sink::{SinkError, Verifier};
use crate::types::{Offset, TopicPartition};
use crate::verify::Checker;
use std::time::Duration;

/// Most due records `check` asks about in one pass; a range holding more takes several,
/// each decided as the daemon decides a round. Replay asks about everything it read in one
/// pass: its sink is written from the answer, and answers of passes counted at different
/// moments could make it write a record whose row only showed up late and skip a lost one
/// of the same key (review of issue 39, finding 1).
const PASS: u64 = 1_000_000;

/// When the records of a closed range fall due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DueRule {
    /// The daemon's due rule at the decision's instant (`check`): below the pipeline's
    /// commits observed `grace` before, or, with the time-only rule, appended `grace`
    /// before.
    At {
        /// The audit's grace (ms).
        grace_ms: i64,
    },
    /// Every record read, whatever the pipeline did (`replay`: the offsets asked for are
    /// decided as of now).
    Everything,
}

/// Why a closed range gave no verdict. Unknown is never missing: nothing is reported.
#[derive(Debug, thiserror::Error)]
pub enum ClosedRangeError {
    /// A record's schema could not be resolved: its key, and so its verdict, is unknown.
    #[error("{tp} offset {offset}: schema id {schema_id} unknown")]
    Unresolved {
        /// The partition.
        tp: TopicPartition,
        /// The record.
        offset: Offset,
        /// The schema id the record names.
        schema_id: u32,
    },
    /// The sink refused a question.
    #[error("{tp}: {source}")]
    Sink {
        /// The partition.
        tp: TopicPartition,
        /// The sink's error.
        source: SinkError,
    },
    /// The sink answered without deciding anything (every verdict unknown): asking again
    /// at the same instant would loop.
    #[error("the sink gave no answer about {tp}")]
    NoAnswer {
        /// The partition.
        tp: TopicPartition,
    },
}

/// The dead-letter topic's say in a decision: the offsets it names, and when it was read
/// (only records due before that reading are decided, as the daemon does).
pub struct DeadLetters<'a> {
    /// The offsets of a run the topic names.
    pub named: &'a dyn Fn(OffsetRun) -> Vec<OffsetRun>,
    /// When the reading that `named` answers from began (unix ms).
    pub read_at_ms: i64,
}

/// What one [`ClosedRange::decide`] decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    /// Expected records the sink holds.
    pub confirmed: u64,
    /// Expected records absent (newly declared missing).
    pub lost: u64,
    /// Expected records absent that the dead-letter topic names.
    pub dead_lettered: u64,
    /// Extra rows.
    pub duplicates: u64,
    /// The offsets the verdicts found in the sink, as runs in offset order.
    pub present: Vec<OffsetRun>,
    /// The decided offsets the verdicts did not find, as runs in offset order.
    pub absent: Vec<OffsetRun>,
}

/// What the due rule left undecided.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NotDue {
    /// Expected records not due yet.
    pub records: u64,
    /// The first of them.
    pub first: Option<Offset>,
    /// When the first falls due (unix ms).
    pub due_at_ms: Option<i64>,
}

/// One partition's closed range: what was read of it, in the daemon's ledger.
#[derive(Debug)]
pub struct ClosedRange {
    tp: TopicPartition,
    ledger: PartitionLedger,
    /// Records read.
    consumed: u64,
    /// Records expected in the sink.
    expected: u64,
}

impl ClosedRange {
    /// An empty range of `tp` starting at `first`; `keyed` for the strategies that match
    /// by key (key_columns, doc_id).
    pub fn new(tp: TopicPartition, first: Offset, keyed: bool) -> Self {
        Self {
            tp,
            ledger: PartitionLedger::new(first, keyed),
            consumed: 0,
            expected: 0,
        }
    }

    /// Takes the next record as the decoder tagged it: `timestamp_ms` is its Kafka
    /// timestamp, `appended_ms` when it was appended at the latest (the clock grace runs
    /// on). Returns why it is not expected in the sink, if it is not; a record whose schema
    /// is unresolved is an error, never a guess.
    pub fn ingest(
        &mut self,
        offset: Offset,
        timestamp_ms: Option<i64>,
        tag: Tag,
        appended_ms: i64,
    ) -> Result<Option<FilterReason>, ClosedRangeError> {
        let (observed, filtered) = match tag {
            Tag::Expected { key } => {
                self.expected += 1;
                (Observed::Expected { key }, None)
            }
            Tag::Filtered(reason) => (Observed::Filtered, Some(reason)),
            Tag::Unresolved(u) => {
                return Err(ClosedRangeError::Unresolved {
                    tp: self.tp.clone(),
                    offset,
                    schema_id: u.schema_id,
                });
            }
        };
        self.consumed += 1;
        self.ledger
            .ingest(offset, timestamp_ms, observed, appended_ms);
        Ok(filtered)
    }

    /// The due rule's input as `run` sets it up: the time-only rule without a position
    /// source; else the pipeline's commit, `end`, as observed at `at_ms` (`None`: not read).
    pub fn due_input(&mut self, time_rule: bool, commit_seen: Option<(i64, Offset)>) {
        self.ledger.pipeline.set_time_rule(time_rule);
        if let Some((at_ms, end)) = commit_seen {
            self.ledger.pipeline.observe(at_ms, Some(end));
        }
    }

    /// Decides every record due under `rule` at `now_ms` (unix ms): asks the sink through `checker` until nothing
    /// due is left, applies each answer to the ledger as the daemon does (the dead-letter
    /// topic's names, the key book's credits) and returns what was decided. A sink that
    /// refuses, or answers nothing, is an error: nothing is reported on a guess.
    pub async fn decide<V: Verifier>(
        &mut self,
        checker: &mut Checker,
        sink: &V,
        rule: DueRule,
        now_ms: i64,
        dead: Option<&DeadLetters<'_>>,
    ) -> Result<Decision, ClosedRangeError> {
        let (at_ms, grace_ms, pass) = match rule {
            DueRule::At { grace_ms } => (now_ms, grace_ms, PASS),
            DueRule::Everything => {
                // Everything read is below a commit seen at the start of time.
                let end = self.ledger.next_offset();
                self.ledger.pipeline.observe(0, Some(end));
                (i64::MAX / 2, 0, u64::MAX)
            }
        };
        // With a dead-letter topic, only records due before its reading began are decided
        // (`kafka::dead_letters`).
        let at_ms = dead.map_or(at_ms, |d| at_ms.min(d.read_at_ms));
        let mut out = Decision::default();
        loop {
            let segs = self.ledger.due(at_ms, grace_ms, pass);
            if segs.is_empty() {
                break;
            }
            let obs = |_d: Duration, _ok: bool| {};
            let verdicts: Vec<Verdict> =
                checker
                    .due(sink, &self.tp, &segs, &obs)
                    .await
                    .map_err(|source| ClosedRangeError::Sink {
                        tp: self.tp.clone(),
                        source,
                    })?;
            // The ledger applies the Known prefix; the rest stays pending for the next pass.
            for (seg, v) in segs.iter().zip(&verdicts) {
                let Verdict::Known { present, .. } = v else {
                    break;
                };
                let present = runs::intersect(seg.run, &runs::normalize(present.clone()));
                out.absent.extend(runs::subtract(seg.run, &present));
                out.present.extend(present);
            }
            let before = self.ledger.pending();
            let applied = match dead {
                Some(d) => self
                    .ledger
                    .apply_with_dead_letters(&verdicts, now_ms, d.named),
                None => self.ledger.apply(&verdicts, now_ms),
            };
            checker.take_credits(&mut self.ledger);
            out.confirmed += applied.confirmed;
            out.lost += applied.lost;
            out.dead_lettered += applied.dead_lettered;
            out.duplicates += applied.duplicates;
            if self.ledger.pending() == before {
                return Err(ClosedRangeError::NoAnswer {
                    tp: self.tp.clone(),
                });
            }
        }
        out.present = runs::normalize(out.present);
        out.absent = runs::normalize(out.absent);
        Ok(out)
    }

    /// The gaps decided since the last call, as the daemon reports them, found at `now`.
    pub fn take_gaps(&mut self, audit: &str, now: chrono::DateTime<chrono::Utc>) -> Vec<Gap> {
        self.ledger
            .take_dirty_gaps()
            .into_iter()
            .map(|g| {
                let mut gap = g.to_gap(audit, &self.tp);
                gap.detected_at = now;
                gap
            })
            .collect()
    }

    /// What the due rule left undecided, with `grace_ms` the audit's grace.
    pub fn not_due(&self, grace_ms: i64) -> NotDue {
        NotDue {
            records: self.ledger.pending(),
            first: self.ledger.pending_runs().first().map(|r| r.first),
            due_at_ms: self.ledger.next_due_ms(grace_ms),
        }
    }

    /// The partition.
    pub fn tp(&self) -> &TopicPartition {
        &self.tp
    }

    /// Records read.
    pub fn consumed(&self) -> u64 {
        self.consumed
    }

    /// Records expected in the sink.
    pub fn expected(&self) -> u64 {
        self.expected
    }

    /// Expected records not decided yet.
    pub fn pending(&self) -> u64 {
        self.ledger.pending()
    }

    /// The ledger, for the key book to adopt its keys before any partition is decided
    /// (key_columns: the multiset is the audit's) and for replay's claims.
    pub fn ledger(&self) -> &PartitionLedger {
        &self.ledger
    }
}

#[cfg(test)]
mod tests;
