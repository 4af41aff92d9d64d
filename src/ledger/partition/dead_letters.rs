//! Dead letters: records absent from the sink that the pipeline's dead-letter topic names
//! (`[audits.pipeline] dead_letter_topic`). They are their own verdict: neither confirmed
//! (the sink lacks them) nor missing (the pipeline rejected them on purpose and said so).
//!
//! - Known when the record is decided ([`PartitionLedger::apply_with_dead_letters`]): the
//!   record goes into a `dead_lettered` gap (a run of such records with nothing decided
//!   otherwise between them), counted in `Applied::dead_lettered`, never as lost.
//! - Known only after the record was declared missing (the dead-letter record was read
//!   late): [`PartitionLedger::dead_letter_missing`] takes it out of its missing run and its
//!   gap's missing count, like a late arrival, into the gap's dead-lettered count. It was
//!   counted lost once already (a counter cannot go back); the due rule waits for the
//!   dead-letter reader (`audit::dead_letters`) so that this stays the exception.

use super::{Applied, GapRecord, PartitionLedger, max_opt, min_opt};
use crate::gap::GapCause;
use crate::ledger::due::CommitStep;
use crate::ledger::runs::{self, OffsetRun};
use crate::types::Offset;

impl PartitionLedger {
    /// Records `r` (absent, named by the dead-letter topic) as dead-lettered: they extend
    /// the dead_lettered gap the last decided records opened, or open one. A missing gap
    /// before them ends here, as at a confirmed record. `stand_in`: key_columns stand-ins
    /// for a named record the sink's count calls present (`settle::shared_key_swaps`): the
    /// gap says `shared_key`, its position being a convention.
    pub(super) fn declare_dead_lettered(
        &mut self,
        r: OffsetRun,
        min_ts: Option<i64>,
        max_ts: Option<i64>,
        now_ms: i64,
        stand_in: bool,
    ) {
        if let Some(t) = self.gaps.tail.take() {
            self.gaps.untailed.push(t);
        }
        let first = match self
            .gaps
            .dead_tail
            .and_then(|t| self.gaps.by_first.get_mut(&t))
        {
            Some(g) if g.missing == 0 && g.last < r.first => {
                g.last = r.last;
                g.dead_lettered += r.len();
                g.min_ts = min_opt(g.min_ts, min_ts);
                g.max_ts = max_opt(g.max_ts, max_ts);
                g.shared_key |= stand_in;
                g.first
            }
            _ => {
                let (cause, commit) = self.cause_of_dead(r.first);
                self.gaps.by_first.insert(
                    r.first,
                    GapRecord {
                        first: r.first,
                        last: r.last,
                        missing: 0,
                        size_known: true,
                        min_ts,
                        max_ts,
                        detected_ms: now_ms,
                        cause,
                        commit,
                        evidence: None,
                        deleted_ms: None,
                        unsettled: false,
                        shared_key: stand_in,
                        epoch: self.log.epoch,
                        is_new: true,
                        settle_cursor: 0,
                        dead_lettered: r.len(),
                    },
                );
                r.first
            }
        };
        self.gaps.dead_tail = Some(first);
        self.unstored.changed();
        self.gaps.dirty.insert(first);
        self.unstored.gap(first);
    }

    /// A record decided otherwise ends the dead_lettered gap being extended: it leaves
    /// memory at the next [`Self::take_dirty_gaps`] (its final state is reported there).
    pub(super) fn end_dead_tail(&mut self) {
        if let Some(t) = self.gaps.dead_tail.take() {
            self.gaps.untailed.push(t);
        }
    }

    fn cause_of_dead(&self, first: Offset) -> (GapCause, Option<CommitStep>) {
        // The commit step is kept as evidence (when the pipeline passed them).
        (GapCause::DeadLettered, self.pipeline.step_over(first))
    }

    /// The lowest offset a dead-letter coordinate can still change a verdict at, once
    /// [`Self::dead_letter_missing`] has taken the coordinates naming missing records: the
    /// first undecided record (the settled offset). Below it every record is decided, and a
    /// missing one named later is taken the round its coordinate is read, before the
    /// caller forgets what lies below (`audit::round`). Coordinates can be forgotten there.
    pub fn dead_letter_floor(&self) -> Offset {
        self.settled()
    }

    /// The missing runs' offsets among `named` (offsets the dead-letter topic names, any
    /// order), as runs: what [`Self::dead_letter_missing`] would move.
    pub fn missing_among(&self, named: &[OffsetRun]) -> Vec<OffsetRun> {
        runs::normalize(self.missing_hits(named))
    }

    /// [`Self::missing_among`] run by run: each hit lies inside ONE missing run. Neighbouring
    /// runs (keyed runs stop merging at `MERGED_KEYS_MAX` keys) are not merged into a hit no
    /// single run holds, which [`Self::dead_letter_missing`] could not take (review of issue
    /// 37: their records stayed missing and the coordinates were then forgotten).
    fn missing_hits(&self, named: &[OffsetRun]) -> Vec<OffsetRun> {
        let mut out = Vec::new();
        for n in runs::normalize(named.to_vec()) {
            let from = self
                .missing
                .runs
                .range(..=n.first)
                .next_back()
                .map_or(n.first, |(f, _)| *f);
            for (_, m) in self.missing.runs.range(from..=n.last) {
                out.extend(runs::intersect(m.run, &[n]));
            }
        }
        out
    }

    /// Missing records the dead-letter topic names after they were declared missing: each
    /// leaves its missing run (its key's claim released) and moves from its gap's missing
    /// count to its dead-lettered count. Returns how many moved (`Applied::dead_lettered`).
    pub fn dead_letter_missing(&mut self, named: &[OffsetRun]) -> Applied {
        self.missing_to_dead(named, false)
    }

    /// Missing records a key book's stand-in credit took (key_columns, see
    /// `KeyBook::credit`): dead-lettered like [`Self::dead_letter_missing`], their gap saying
    /// `shared_key` (which record of the key is the dead-lettered one is a convention).
    pub(super) fn stand_in_missing(&mut self, lent: &[OffsetRun]) -> Applied {
        self.missing_to_dead(lent, true)
    }

    fn missing_to_dead(&mut self, named: &[OffsetRun], stand_in: bool) -> Applied {
        let mut out = Applied::default();
        for hit in self.missing_hits(named) {
            let Some(first) = self
                .missing
                .runs
                .range(..=hit.first)
                .next_back()
                .filter(|(_, m)| m.run.contains(hit.first) && m.run.contains(hit.last))
                .map(|(f, _)| *f)
            else {
                continue;
            };
            let Some(mut m) = self.remove_missing(first) else {
                continue;
            };
            let n = hit.len();
            for o in hit.first..=hit.last {
                if let Some(k) = m.key_of(o) {
                    self.key_changes.released.push(k.clone());
                }
            }
            for rest in runs::subtract(m.run, &[hit]) {
                self.insert_missing(m.sub(rest));
            }
            m.keys.clear();
            self.missing.count -= n;
            out.dead_lettered += n;
            self.unstored.changed();
            if let Some(g) = self.gaps.by_first.get_mut(&m.gap) {
                g.missing = g.missing.saturating_sub(n);
                g.dead_lettered += n;
                g.shared_key |= stand_in;
                self.gaps.dirty.insert(m.gap);
                self.unstored.gap(m.gap);
            }
        }
        if self.missing.runs.is_empty() {
            self.rotation.nothing_missing();
        }
        out
    }
}
