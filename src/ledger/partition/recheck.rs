//! Looking again: the sink probe, rechecks of missing runs and operator acknowledgements.

use super::*;

impl PartitionLedger {
    /// offset_columns: the range to count instead of re-checking every missing run, with
    /// what it held (see [`Probe`]). `None`: nothing to re-check.
    pub fn probe(&self) -> Option<Probe> {
        self.probe
    }

    /// The probe's answer: how many distinct offsets of its span the sink holds now.
    /// Returns whether the missing runs must be looked at one by one ([`Self::rechecks`]);
    /// while a look is in progress it continues whatever the count.
    pub fn probe_answered(&mut self, distinct: u64) -> bool {
        let Some(p) = self.probe.as_mut() else {
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
        self.recheck_cursor = p.span.first;
        self.recheck_lap_end = None;
        true
    }

    /// Whether a look (offset_columns) or a rotation (keys) is between two rounds.
    pub fn look_in_progress(&self) -> bool {
        self.probe.is_some_and(|p| p.look.is_some())
    }

    pub(super) fn span_of_missing(&self) -> Option<OffsetRun> {
        let first = self.missing.values().next()?.run.first;
        let last = self.missing.values().next_back()?.run.last;
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
        let cursor = self.recheck_cursor;
        // A run re-checked in part last round continues at the cursor.
        let start = self
            .missing
            .range(..=cursor)
            .next_back()
            .filter(|(_, m)| m.run.contains(cursor))
            .map_or(cursor, |(f, _)| *f);
        let last_missing = self.missing.values().next_back().map(|m| m.run.last);
        let lap_end = *self
            .recheck_lap_end
            .get_or_insert(last_missing.unwrap_or(Offset::MIN));
        let mut next = None;
        for (f, m) in self.missing.range(start..) {
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
        self.recheck_next = Some(next);
        out
    }

    /// Applies re-check answers (aligned with the last [`Self::rechecks`]): offsets found
    /// now are late; they leave their missing run and their gap's missing count.
    pub fn apply_rechecks(&mut self, segments: &[Segment], verdicts: &[Verdict]) -> Applied {
        let mut out = Applied::default();
        let answered = verdicts.len() == segments.len()
            && verdicts.iter().all(|v| matches!(v, Verdict::Known { .. }));
        if let Some(next) = self.recheck_next.take().filter(|_| answered) {
            match next {
                Some(c) => self.recheck_cursor = c,
                None => {
                    self.recheck_cursor = Offset::MIN;
                    self.recheck_lap_end = None;
                    if let Some(p) = self.probe.as_mut()
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
                            self.recheck_marks.push((o, k.clone(), true));
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
            self.revision += 1;
            let found = runs::count(&present);
            for r in &present {
                for o in r.first..=r.last {
                    if let Some(k) = m.key_of(o) {
                        if self.track_confirmations {
                            self.unstored_confirmations.push(k.clone());
                        }
                        self.recheck_marks.push((o, k.clone(), false));
                    }
                }
            }
            out.late += found;
            self.missing_count -= found;
            for rest in runs::subtract(m.run, &present) {
                self.insert_missing(m.sub(rest));
            }
            if let Some(g) = self.gaps.get_mut(&m.gap) {
                g.missing = g.missing.saturating_sub(found);
                self.dirty_gaps.insert(m.gap);
                self.unstored_gaps.insert(m.gap);
            }
        }
        if self.missing.is_empty() {
            self.probe = None;
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
        for (o, k, lent) in std::mem::take(&mut self.recheck_marks) {
            let one = OffsetRun::new(o, o);
            let is_named = !named(one).is_empty();
            if is_named || (lent && !self.is_missing(o)) {
                self.credited_keys.push(k);
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
        let Some(g) = self.gaps.remove(&first) else {
            return false;
        };
        if self.overflow == Some(first) {
            // The next fold starts another overflow gap.
            self.overflow = None;
        }
        self.unstored_gaps.insert(first);
        // A gap's runs lie inside it: not a walk over every run of the partition per
        // acknowledgement (an operator acknowledging an incident's gaps one by one).
        let runs: Vec<Offset> = self
            .missing
            .range(g.first..=g.last)
            .filter(|(_, m)| m.gap == first)
            .map(|(f, _)| *f)
            .collect();
        // The part beyond `last` (only where the gap counts its records: a range Kafka
        // deleted unread never grows by rounds).
        let mut open: Vec<MissingRun> = Vec::new();
        for f in runs {
            let Some(m) = self.missing.get(&f) else {
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
            self.missing_count = self
                .missing_count
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
            self.gaps.insert(
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
            self.dirty_gaps.insert(rest);
            self.unstored_gaps.insert(rest);
        }
        if self.tail_gap == Some(first) {
            self.tail_gap = rest;
        }
        if self.dead_tail == Some(first) {
            // The next dead-lettered record opens a gap of its own, as after a missing one.
            self.dead_tail = None;
        }
        // Giving up the acknowledged head can empty the missing runs for a moment, which
        // drops the probe; the rest put back needs one over its span again, or no late
        // arrival in it would ever be looked for. What the sink holds of the span is not
        // known here: the first answer starts a look.
        if self.probe.is_none() {
            self.probe = self.span_of_missing().map(|span| Probe {
                span,
                baseline: None,
                look: None,
                unchanged: 0,
            });
        }
        self.dirty_gaps.remove(&first);
        self.revision += 1;
        true
    }
}
