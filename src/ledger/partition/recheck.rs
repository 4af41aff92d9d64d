//! Looking again: the sink probe, rechecks of missing runs and operator acknowledgements.

use super::{
    Applied, FORCE_LOOK_EVERY, GapRecord, MissingRun, PartitionLedger, Probe, RecheckBudget,
    Segment, Verdict,
};
use crate::gap::GapCause;
use crate::ledger::runs::{self, OffsetRun};
use crate::types::{Key, Offset};

/// Re-checks of the missing runs: offset_columns' probe, and the budgeted rotation over the
/// runs.
#[derive(Debug, Clone)]
pub(super) struct Rotation {
    /// Keyed records the last re-checks found late, or lent a stand-in credit (`true`),
    /// with their keys: settled against the dead-letter topic by
    /// [`PartitionLedger::settle_recheck_marks`] (a named record found late leaves a credit;
    /// a named one lent a credit is dead-lettered in its own right and gives the credit
    /// back).
    pub(super) marks: Vec<(Offset, Key, bool)>,
    /// offset_columns re-checks: one range count tells whether anything arrived late.
    pub(super) probe: Option<Probe>,
    /// Confirmed offsets decided beyond the probe's span, not yet inside it: they join the
    /// baseline when a later missing run extends the span over them.
    pub(super) confirmed_beyond_probe: u64,
    /// Where the next budgeted re-check pass continues (rotation over the missing runs).
    pub(super) cursor: Offset,
    /// Where the cursor goes once the last [`PartitionLedger::rechecks`] is answered
    /// (`None` inside: the rotation passed the last run).
    pub(super) next: Option<Option<Offset>>,
    /// The last missing offset when the current rotation started: the rotation ends there,
    /// not at the last run (runs declared since are behind it only if they arrive slower
    /// than the budget; otherwise a rotation, and a look, would never end and the runs it
    /// passed would never be re-checked again). `None`: set by the next
    /// [`PartitionLedger::rechecks`].
    pub(super) lap_end: Option<Offset>,
}

impl Default for Rotation {
    fn default() -> Self {
        Self {
            marks: Vec::new(),
            probe: None,
            confirmed_beyond_probe: 0,
            cursor: Offset::MIN,
            next: None,
            lap_end: None,
        }
    }
}

impl Rotation {
    /// Records `run` decided present: beyond the probe's span they join its baseline once a
    /// later missing run extends the span over them.
    pub(super) fn confirmed(&mut self, run: OffsetRun) {
        if self.probe.is_some_and(|p| run.first > p.span.last) {
            self.confirmed_beyond_probe += run.len();
        }
    }

    /// Records `run` declared missing (counted absent just now): the probe's span grows
    /// over it and over the records decided since its end, and those confirmed are present,
    /// so the baseline (and a look's count) grows by exactly them; without a probe, one
    /// starts on `run`, none of whose offsets the sink holds.
    pub(super) fn missing(&mut self, run: OffsetRun) {
        match self.probe.as_mut() {
            Some(p) => {
                let grown = std::mem::take(&mut self.confirmed_beyond_probe);
                p.span.last = p.span.last.max(run.last);
                p.baseline = p.baseline.map(|b| b + grown);
                p.look = p.look.map(|c| c + grown);
            }
            None => {
                self.confirmed_beyond_probe = 0;
                self.probe = Some(Probe {
                    span: run,
                    baseline: Some(0),
                    look: None,
                    unchanged: 0,
                });
            }
        }
    }

    /// No missing run is left: nothing to probe.
    pub(super) fn nothing_missing(&mut self) {
        self.probe = None;
    }
}

impl PartitionLedger {
    /// offset_columns: the range to count instead of re-checking every missing run, with
    /// what it held (see [`Probe`]). `None`: nothing to re-check.
    pub fn probe(&self) -> Option<Probe> {
        self.rotation.probe
    }

    /// The probe's answer: how many distinct offsets of its span the sink holds now.
    /// Returns whether the missing runs must be looked at one by one ([`Self::rechecks`]);
    /// while a look is in progress it continues whatever the count.
    pub fn probe_answered(&mut self, distinct: u64) -> bool {
        let Some(p) = self.rotation.probe.as_mut() else {
            return false;
        };
        if p.look.is_some() {
            return true;
        }
        if p.baseline == Some(distinct) && p.unchanged < FORCE_LOOK_EVERY {
            p.unchanged += 1;
            return false;
        }
        p.unchanged = 0;
        p.look = Some(distinct);
        self.rotation.cursor = p.span.first;
        self.rotation.lap_end = None;
        true
    }

    /// Whether a look (offset_columns) or a rotation (keys) is between two rounds.
    pub fn look_in_progress(&self) -> bool {
        self.rotation.probe.is_some_and(|p| p.look.is_some())
    }

    pub(super) fn span_of_missing(&self) -> Option<OffsetRun> {
        let first = self.missing.runs.values().next()?.run.first;
        let last = self.missing.runs.values().next_back()?.run.last;
        Some(OffsetRun::new(first, last))
    }

    /// Missing records to re-check this round, at most `budget`, continuing where the last
    /// call stopped (a rotation: the next call after the last run starts over). A rotation
    /// covers the records missing when it started: records declared since wait for the next
    /// one, so that a rotation ends even while an incident adds runs faster than the budget.
    /// A look started by [`Self::probe_answered`] is complete once its rotation ends: its
    /// count becomes the probe's baseline (rows landing in the span since make the next
    /// probe differ from it, so they start another look).
    pub fn rechecks(&mut self, budget: RecheckBudget) -> Vec<Segment> {
        let mut out = Vec::new();
        let (mut runs_left, mut records_left) = (budget.runs, budget.records);
        let cursor = self.rotation.cursor;
        // A run re-checked in part last round continues at the cursor.
        let start = self
            .missing
            .runs
            .range(..=cursor)
            .next_back()
            .filter(|(_, m)| m.run.contains(cursor))
            .map_or(cursor, |(f, _)| *f);
        let last_missing = self.missing.runs.values().next_back().map(|m| m.run.last);
        let lap_end = *self
            .rotation
            .lap_end
            .get_or_insert(last_missing.unwrap_or(Offset::MIN));
        let mut next = None;
        for (f, m) in self.missing.runs.range(start..) {
            // Records declared since the rotation started (new runs, or a run that grew) are
            // the next rotation's.
            let last = m.run.last.min(lap_end);
            let from = m.run.first.max(cursor);
            if from > last {
                break;
            }
            if runs_left == 0 || records_left == 0 {
                next = Some(*f);
                break;
            }
            let avail = (last - from) as u64 + 1;
            let take = avail.min(records_left);
            let part = OffsetRun::new(from, from + take as Offset - 1);
            out.push(Segment {
                run: part,
                keys: m.sub(part).keys,
                max_ts: None,
            });
            runs_left -= 1;
            records_left -= take;
            if take < avail {
                next = Some(part.last + 1);
                break;
            }
        }
        // Advanced only once the answers are applied: a failed query re-checks the same
        // runs next round, and a look never completes on questions the sink did not answer.
        self.rotation.next = Some(next);
        out
    }

    /// Applies re-check answers (aligned with the last [`Self::rechecks`]): offsets found
    /// now are late; they leave their missing run and their gap's missing count.
    pub fn apply_rechecks(&mut self, segments: &[Segment], verdicts: &[Verdict]) -> Applied {
        let mut out = Applied::default();
        let answered = verdicts.len() == segments.len()
            && verdicts.iter().all(|v| matches!(v, Verdict::Known { .. }));
        if let Some(next) = self.rotation.next.take().filter(|_| answered) {
            match next {
                Some(c) => self.rotation.cursor = c,
                None => {
                    self.rotation.cursor = Offset::MIN;
                    self.rotation.lap_end = None;
                    if let Some(p) = self.rotation.probe.as_mut()
                        && let Some(c) = p.look.take()
                    {
                        p.baseline = Some(c);
                    }
                }
            }
        }
        for (seg, v) in segments.iter().zip(verdicts) {
            let Verdict::Known {
                present,
                duplicate_rows,
                stand_ins,
                ..
            } = v
            else {
                continue;
            };
            if !seg.keys.is_empty() {
                let key = |o: Offset| seg.keys.get((o - seg.run.first) as usize);
                for r in runs::intersect(seg.run, &runs::normalize(stand_ins.clone())) {
                    for o in r.first..=r.last {
                        if let Some(k) = key(o) {
                            self.rotation.marks.push((o, k.clone(), true));
                        }
                    }
                }
            }
            let present = runs::intersect(seg.run, &runs::normalize(present.clone()));
            if present.is_empty() {
                continue;
            }
            // The run holding the segment (a segment may be part of a run).
            let Some(first) = self
                .missing
                .runs
                .range(..=seg.run.first)
                .next_back()
                .filter(|(_, m)| m.run.contains(seg.run.first) && m.run.contains(seg.run.last))
                .map(|(f, _)| *f)
            else {
                continue;
            };
            let Some(m) = self.remove_missing(first) else {
                continue;
            };
            out.duplicates += duplicate_rows;
            self.unstored.changed();
            let found = runs::count(&present);
            for r in &present {
                for o in r.first..=r.last {
                    if let Some(k) = m.key_of(o) {
                        if self.key_changes.track_confirmations {
                            self.key_changes.unstored_confirmations.push(k.clone());
                        }
                        self.rotation.marks.push((o, k.clone(), false));
                    }
                }
            }
            out.late += found;
            self.missing.count -= found;
            for rest in runs::subtract(m.run, &present) {
                self.insert_missing(m.sub(rest));
            }
            if let Some(g) = self.gaps.by_first.get_mut(&m.gap) {
                g.missing = g.missing.saturating_sub(found);
                self.gaps.dirty.insert(m.gap);
                self.unstored.gap(m.gap);
            }
        }
        if self.missing.runs.is_empty() {
            self.rotation.nothing_missing();
        }
        out
    }

    /// Settles the last re-checks' keyed findings against the dead-letter topic (`named`:
    /// the offsets of a run it names), once the coordinates read this round have been
    /// applied ([`Self::dead_letter_missing`]), before they are forgotten:
    /// - a named record found late holds its row like a named record confirmed when due: a
    ///   stand-in credit for its key (`KeyBook::credit`);
    /// - a record lent a credit and named itself is dead-lettered in its own right (exact):
    ///   the credit goes back, for the key's next absent record;
    /// - a record lent a credit and still missing is dead-lettered as a stand-in, like a
    ///   late arrival (it was counted lost once); one no longer missing gives it back.
    ///
    /// The credits go to [`Self::take_credited_keys`].
    pub fn settle_recheck_marks(&mut self, named: &dyn Fn(OffsetRun) -> Vec<OffsetRun>) -> Applied {
        let mut stand_ins = Vec::new();
        for (o, k, lent) in std::mem::take(&mut self.rotation.marks) {
            let one = OffsetRun::new(o, o);
            let is_named = !named(one).is_empty();
            if is_named || (lent && !self.is_missing(o)) {
                self.key_changes.credited.push(k);
            } else if lent {
                stand_ins.push(one);
            }
        }
        if stand_ins.is_empty() {
            return Applied::default();
        }
        self.stand_in_missing(&runs::normalize(stand_ins))
    }

    /// Whether `o` lies in a missing run.
    fn is_missing(&self, o: Offset) -> bool {
        self.missing
            .runs
            .range(..=o)
            .next_back()
            .is_some_and(|(_, m)| m.run.contains(o))
    }

    /// An operator acknowledged the whole gap starting at `first`: it leaves the hot ledger
    /// (no re-checks, no gauges; its missing runs' keys are released). A missing record right
    /// after it opens a new gap: the operator accepted that incident, not later losses.
    /// Returns whether anything changed.
    pub fn acknowledge(&mut self, first: Offset) -> bool {
        self.acknowledge_through(first, Offset::MAX)
    }

    /// An operator acknowledged the gap starting at `first` when it ended at `last` (its
    /// extent as stored at acknowledgement time). Records up to `last` leave the hot ledger
    /// like [`Self::acknowledge`]; records a round added since (the tail gap extended, or a
    /// run merged into it, while the acknowledgement was on its way) were never shown to the
    /// operator: they stay missing, as an open gap of their own that starts at the first of
    /// them. Returns whether anything changed.
    pub fn acknowledge_through(&mut self, first: Offset, last: Offset) -> bool {
        let Some(g) = self.gaps.by_first.remove(&first) else {
            return false;
        };
        if self.fold.overflow == Some(first) {
            // The next fold starts another overflow gap.
            self.fold.overflow = None;
        }
        self.unstored.gap(first);
        // A gap's runs lie inside it: not a walk over every run of the partition per
        // acknowledgement (an operator acknowledging an incident's gaps one by one).
        let runs: Vec<Offset> = self
            .missing
            .runs
            .range(g.first..=g.last)
            .filter(|(_, m)| m.gap == first)
            .map(|(f, _)| *f)
            .collect();
        // The part beyond `last` (only where the gap counts its records: a range Kafka
        // deleted unread never grows by rounds).
        let mut open: Vec<MissingRun> = Vec::new();
        for f in runs {
            let Some(m) = self.missing.runs.get(&f) else {
                continue;
            };
            if g.size_known && m.run.last > last {
                let Some(m) = self.remove_missing(f) else {
                    continue;
                };
                if m.run.first <= last {
                    // A run merged across the acknowledged end: its head is acknowledged.
                    let head = m.sub(OffsetRun::new(m.run.first, last));
                    self.insert_missing(head);
                    self.give_up_run(m.run.first);
                    open.push(m.sub(OffsetRun::new(last + 1, m.run.last)));
                } else {
                    open.push(m);
                }
            } else {
                self.give_up_run(f);
            }
        }
        let still: u64 = open.iter().map(|m| m.run.len()).sum();
        if g.size_known {
            self.missing.count = self
                .missing
                .count
                .saturating_sub(g.missing - still.min(g.missing));
        }
        let rest = open.first().map(|m| m.run.first);
        let detected_ms = open.iter().map(|m| m.detected_ms).min();
        if let Some(rest) = rest {
            for mut m in open {
                m.gap = rest;
                self.insert_missing(m);
            }
            // Its own gap, reported as new (it pages); the timestamps are the old gap's
            // bounds, as for a split pending run. A commit jump explains the rest only
            // while the rest starts below where it landed; past that, the rest's own step
            // is its cause, and the jump's evidence is not its own (review 27, G4).
            let (cause, commit, evidence) = match (g.cause, g.commit) {
                (
                    GapCause::SkippedByRestart
                    | GapCause::SkippedByAlter
                    | GapCause::DroppedInFlight,
                    Some(s),
                ) if rest >= s.to => {
                    let (cause, commit) = self.cause_of(rest);
                    (cause, commit, None)
                }
                _ => (g.cause, g.commit, g.evidence.clone()),
            };
            self.gaps.by_first.insert(
                rest,
                GapRecord {
                    first: rest,
                    missing: still,
                    detected_ms: detected_ms.unwrap_or(g.detected_ms),
                    is_new: true,
                    cause,
                    commit,
                    evidence,
                    ..g
                },
            );
            self.gaps.dirty.insert(rest);
            self.unstored.gap(rest);
        }
        if self.gaps.tail == Some(first) {
            self.gaps.tail = rest;
        }
        if self.gaps.dead_tail == Some(first) {
            // The next dead-lettered record opens a gap of its own, as after a missing one.
            self.gaps.dead_tail = None;
        }
        // Giving up the acknowledged head can empty the missing runs for a moment, which
        // drops the probe; the rest put back needs one over its span again, or no late
        // arrival in it would ever be looked for. What the sink holds of the span is not
        // known here: the first answer starts a look.
        if self.rotation.probe.is_none() {
            self.rotation.probe = self.span_of_missing().map(|span| Probe {
                span,
                baseline: None,
                look: None,
                unchanged: 0,
            });
        }
        self.gaps.dirty.remove(&first);
        self.unstored.changed();
        true
    }
}
