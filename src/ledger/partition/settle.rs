//! Deciding: the due rule, verdicts applied in offset order, missing runs and their gaps,
//! and the runs retention or the give-up time settle without a verdict.

use super::{
    Applied, GapRecord, MERGED_KEYS_MAX, MissingRun, PartitionLedger, PendingRun, Segment, Verdict,
    max_opt, min_opt,
};
use crate::gap::GapCause;
use crate::ledger::due::{CommitStep, Frontier};
use crate::ledger::runs::{self, OffsetRun};
use crate::types::{Key, Offset};
use std::collections::VecDeque;

/// What one decided run of a segment is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decided {
    /// In the sink.
    Present,
    /// Not in the sink, not dead-lettered: missing.
    Absent,
    /// Not in the sink, named by the dead-letter topic.
    DeadLettered,
}

/// One segment of a decision, as the sink and the dead-letter topic see it.
struct Plan {
    present: Vec<OffsetRun>,
    absent: Vec<OffsetRun>,
    /// Offsets the dead-letter topic names.
    named: Vec<OffsetRun>,
    /// Absent offsets whose key the key book lent a stand-in credit.
    lent: Vec<OffsetRun>,
}

/// key_columns: which record of a shared key is absent is the sink's count by offset order,
/// not a fact about that record. A record the dead-letter topic names but the count calls
/// present stands for an absent record with its key: that one is dead-lettered instead
/// (once per named record), so the pipeline's dead letter is never turned into a loss of
/// its key's other record. Over the whole decision (`plans`, every segment of it), with
/// the credits the key book lent for named records it confirmed in earlier decisions, on
/// any partition (`Plan::lent`): returns, per segment, the absent offsets so taken, and a
/// key per credit left over (named records no absent one took the place of, lent credits
/// no record needed), for the key book to keep (`KeyBook::credit`).
///
/// Which offset is reported dead-lettered is then a convention, like the position of a
/// shared key's missing record, and it cannot be decided from the sink (its rows carry no
/// coordinates): the named record may be absent and the stand-in written (the stand-in is
/// wrongly named, the count is right), or the pipeline may have written the named record
/// after all (a dead letter for a record the sink holds: "present wins") while the
/// stand-in was dropped, a loss reported as dead-lettered. The stand-in's gap says
/// `shared_key` so that neither reads as exact.
fn shared_key_swaps(
    pending: &VecDeque<PendingRun>,
    plans: &[Plan],
) -> (Vec<Vec<OffsetRun>>, Vec<Key>) {
    use std::collections::HashMap;
    let mut spare: HashMap<&Key, u64> = HashMap::new();
    for (p, plan) in pending.iter().zip(plans) {
        let key = |o: Offset| p.keys.get((o - p.run.first) as usize);
        let named_present = plan
            .present
            .iter()
            .flat_map(|r| runs::intersect(*r, &plan.named));
        for n in named_present.chain(plan.lent.iter().copied()) {
            for o in n.first..=n.last {
                if let Some(k) = key(o) {
                    *spare.entry(k).or_default() += 1;
                }
            }
        }
    }
    let mut out = vec![Vec::new(); plans.len()];
    if spare.is_empty() {
        return (out, Vec::new());
    }
    for ((p, plan), taken) in pending.iter().zip(plans).zip(out.iter_mut()) {
        let key = |o: Offset| p.keys.get((o - p.run.first) as usize);
        for r in &plan.absent {
            for left in runs::subtract(*r, &plan.named) {
                for o in left.first..=left.last {
                    if let Some(n) = key(o).and_then(|k| spare.get_mut(k))
                        && *n > 0
                    {
                        *n -= 1;
                        taken.push(OffsetRun::new(o, o));
                    }
                }
            }
        }
        *taken = runs::normalize(std::mem::take(taken));
    }
    let left = spare
        .into_iter()
        .flat_map(|(k, n)| std::iter::repeat_n(k.clone(), n as usize))
        .collect();
    (out, left)
}

impl PartitionLedger {
    /// The due prefix of pending records, split at the due frontier, at most `limit` records,
    /// as segments in offset order. `verdicts` passed to [`Self::apply`] must align with it.
    pub fn due(&mut self, now_ms: i64, grace_ms: i64, limit: u64) -> Vec<Segment> {
        let frontier = self.pipeline.frontier(now_ms, grace_ms);
        let mut out = Vec::new();
        let mut budget = limit;
        let mut i = 0;
        while i < self.queue.runs.len() && budget > 0 {
            let run = self.queue.runs[i].run;
            let due_last = match frontier {
                Frontier::Offset(f) => (f - 1).min(run.last),
                Frontier::SeenBefore(t) => {
                    if self.queue.runs[i].last_seen_ms <= t {
                        run.last
                    } else {
                        break;
                    }
                }
            };
            if due_last < run.first {
                break;
            }
            let cap_last = run.first + (budget.min(run.len()) as Offset) - 1;
            let cut = due_last.min(cap_last);
            if cut < run.last {
                let right = self.queue.runs[i].split_off(cut + 1);
                self.queue.runs.insert(i + 1, right);
            }
            let p = &self.queue.runs[i];
            budget -= p.run.len();
            out.push(Segment {
                run: p.run,
                keys: p.keys.clone(),
                max_ts: p.max_ts,
            });
            i += 1;
            if cut < run.last {
                break;
            }
        }
        out
    }

    /// When the first pending record falls due (unix ms; at or before `now_ms`: due now),
    /// or `None` when nothing pending can fall due without a new pipeline commit. It
    /// agrees with [`Self::due`]: the round scheduler waits for it when it is only just
    /// ahead of a round, so a record is not left to the round after.
    pub fn next_due_ms(&self, grace_ms: i64) -> Option<i64> {
        let first = self.queue.runs.front()?;
        if self.pipeline.uses_time_rule() {
            return Some(first.last_seen_ms.saturating_add(grace_ms));
        }
        self.pipeline.due_at_ms(first.run.first, grace_ms)
    }

    /// Applies the verifier's answers for the segments returned by the last [`Self::due`].
    /// Only the longest prefix of Known verdicts is applied; the rest stays pending, so
    /// decisions always advance in offset order.
    pub fn apply(&mut self, verdicts: &[Verdict], now_ms: i64) -> Applied {
        self.apply_with_dead_letters(verdicts, now_ms, &|_| Vec::new())
    }

    /// [`Self::apply`], where `dead_letters(run)` gives the offsets of `run` the pipeline's
    /// dead-letter topic names: those of them the sink lacks are dead-lettered instead of
    /// missing (their own gap, `dead_lettered`, never counted as lost). A record the sink
    /// holds is confirmed whatever the dead-letter topic says: present wins.
    pub fn apply_with_dead_letters(
        &mut self,
        verdicts: &[Verdict],
        now_ms: i64,
        dead_letters: &dyn Fn(OffsetRun) -> Vec<OffsetRun>,
    ) -> Applied {
        let mut out = Applied::default();
        // The decision: its Known prefix, a segment each (the rest stays pending).
        let mut plans: Vec<Plan> = Vec::new();
        let mut dups: Vec<u64> = Vec::new();
        let mut shared: Vec<&[OffsetRun]> = Vec::new();
        for (v, p) in verdicts.iter().zip(&self.queue.runs) {
            let Verdict::Known {
                present,
                duplicate_rows,
                shared_keys,
                stand_ins,
            } = v
            else {
                break;
            };
            let present = runs::intersect(p.run, &runs::normalize(present.clone()));
            let absent = runs::subtract(p.run, &present);
            let named = runs::normalize(dead_letters(p.run));
            let lent = if p.keys.is_empty() {
                Vec::new()
            } else {
                runs::intersect(p.run, &runs::normalize(stand_ins.clone()))
            };
            plans.push(Plan {
                present,
                absent,
                named,
                lent,
            });
            dups.push(*duplicate_rows);
            shared.push(shared_keys);
        }
        // Stand-ins: dead-lettered by convention, not because the topic named them.
        let keyed = plans
            .iter()
            .zip(&self.queue.runs)
            .any(|(_, p)| !p.keys.is_empty());
        let (swaps, credits) = if keyed {
            shared_key_swaps(&self.queue.runs, &plans)
        } else {
            (vec![Vec::new(); plans.len()], Vec::new())
        };
        self.key_changes.credited.extend(credits);
        for (((plan, swapped), duplicate_rows), shared_keys) in
            plans.into_iter().zip(swaps).zip(dups).zip(shared)
        {
            let Some(p) = self.queue.runs.pop_front() else {
                break;
            };
            self.queue.count -= p.run.len();
            out.duplicates += duplicate_rows;
            let Plan {
                present,
                absent,
                named,
                ..
            } = plan;
            // Absent offsets the dead-letter topic names: neither present nor missing.
            let dead: Vec<OffsetRun> = absent
                .iter()
                .flat_map(|a| runs::intersect(*a, &named))
                .chain(swapped.iter().copied())
                .collect();
            let dead = runs::normalize(dead);
            let absent: Vec<OffsetRun> = absent
                .iter()
                .flat_map(|a| runs::subtract(*a, &dead))
                .collect();
            let mut events: Vec<(OffsetRun, Decided)> =
                present.iter().map(|r| (*r, Decided::Present)).collect();
            events.extend(absent.iter().map(|r| (*r, Decided::Absent)));
            events.extend(dead.iter().map(|r| (*r, Decided::DeadLettered)));
            events.sort_unstable_by_key(|(r, _)| r.first);
            for (r, decided) in events {
                if decided == Decided::DeadLettered {
                    out.dead_lettered += r.len();
                    if !p.keys.is_empty() {
                        // No row is owed for them: the key book stops counting them.
                        let a = (r.first - p.run.first) as usize;
                        self.key_changes
                            .released
                            .extend_from_slice(&p.keys[a..a + r.len() as usize]);
                    }
                    let stand_in = !runs::intersect(r, &swapped).is_empty();
                    self.declare_dead_lettered(r, p.min_ts, p.max_ts, now_ms, stand_in);
                    continue;
                }
                self.end_dead_tail();
                if decided == Decided::Present {
                    if self.key_changes.track_confirmations && !p.keys.is_empty() {
                        let a = (r.first - p.run.first) as usize;
                        self.key_changes
                            .unstored_confirmations
                            .extend_from_slice(&p.keys[a..a + r.len() as usize]);
                    }
                    out.confirmed += r.len();
                    out.confirmed_ts.push((p.max_ts, r.len()));
                    self.rotation.confirmed(r);
                    if let Some(t) = self.gaps.tail.take() {
                        self.gaps.untailed.push(t);
                        self.unstored.changed();
                    }
                } else {
                    out.lost += r.len();
                    let keys = if p.keys.is_empty() {
                        Vec::new()
                    } else {
                        let a = (r.first - p.run.first) as usize;
                        p.keys[a..a + r.len() as usize].to_vec()
                    };
                    let shared = !runs::intersect(r, shared_keys).is_empty();
                    self.declare_missing(r, keys, p.min_ts, p.max_ts, shared, now_ms);
                }
            }
        }
        out
    }

    fn declare_missing(
        &mut self,
        r: OffsetRun,
        keys: Vec<Key>,
        min_ts: Option<i64>,
        max_ts: Option<i64>,
        shared_key: bool,
        now_ms: i64,
    ) {
        let gap_first = match self.gaps.tail.and_then(|t| self.gaps.by_first.get_mut(&t)) {
            Some(g) => {
                g.shared_key |= shared_key;
                g.last = r.last;
                g.missing += r.len();
                g.min_ts = min_opt(g.min_ts, min_ts);
                g.max_ts = max_opt(g.max_ts, max_ts);
                // A gap with nothing missing when the log start passed its first offset was
                // skipped by `log_start_moved` (which never looks below the last log start
                // again): growing again, it is unrecoverable now.
                if g.deleted_ms.is_none() && g.first < self.log.start {
                    g.deleted_ms = Some(now_ms);
                }
                g.first
            }
            None => {
                let (cause, commit) = self.cause_of(r.first);
                // Declared after Kafka deleted its first record (it was read in time, then
                // waited out grace): unrecoverable from the start.
                let deleted_ms = (r.first < self.log.start).then_some(now_ms);
                self.gaps.by_first.insert(
                    r.first,
                    GapRecord {
                        first: r.first,
                        last: r.last,
                        missing: r.len(),
                        size_known: true,
                        min_ts,
                        max_ts,
                        detected_ms: now_ms,
                        cause,
                        commit,
                        evidence: None,
                        deleted_ms,
                        unsettled: false,
                        shared_key,
                        epoch: self.log.epoch,
                        is_new: true,
                        settle_cursor: 0,
                        dead_lettered: 0,
                    },
                );
                r.first
            }
        };
        self.gaps.tail = Some(gap_first);
        self.unstored.changed();
        self.gaps.dirty.insert(gap_first);
        self.unstored.gap(gap_first);
        self.missing.count += r.len();
        self.rotation.missing(r);
        // Adjacent to the previous run of the same gap (one pending run decided in parts
        // over several rounds): one run, so that a total loss keeps one entry per gap.
        if let Some(mut prev) = self
            .missing
            .runs
            .range(..r.first)
            .next_back()
            .filter(|(_, m)| {
                m.gap == gap_first
                    && m.run.last + 1 == r.first
                    && m.keys.is_empty() == keys.is_empty()
                    // A run carrying keys is rewritten whole whenever it changes: merged
                    // without bound, a total loss rewrote every missing key each round.
                    && (keys.is_empty() || m.keys.len() + keys.len() <= MERGED_KEYS_MAX)
            })
            .map(|(f, _)| *f)
            .and_then(|f| self.remove_missing(f))
        {
            prev.run.last = r.last;
            // The later detection time: re-checks of the earlier records last a little
            // longer, never shorter.
            prev.detected_ms = prev.detected_ms.max(now_ms);
            let mut keys = keys;
            prev.keys.append(&mut keys);
            self.insert_missing(prev);
            return;
        }
        self.insert_missing(MissingRun {
            run: r,
            gap: gap_first,
            detected_ms: now_ms,
            keys,
            given_up: false,
        });
    }

    /// Every change to `missing` goes through here and [`Self::remove_missing`]: the store
    /// write and the key count follow it.
    pub(super) fn insert_missing(&mut self, m: MissingRun) {
        self.compaction.declared_since += 1;
        self.unstored.missing_run(m.run.first);
        self.missing.keys += m.keys.len() as u64;
        self.missing.runs.insert(m.run.first, m);
    }

    pub(super) fn remove_missing(&mut self, first: Offset) -> Option<MissingRun> {
        let m = self.missing.runs.remove(&first)?;
        self.unstored.missing_run(first);
        self.missing.keys -= m.keys.len() as u64;
        Some(m)
    }

    /// Attributes a new gap starting at `first` to the pipeline commit step that passed over
    /// it. A step starting exactly at the gap means the pipeline's committed position was
    /// the first record it then never wrote: it resumed elsewhere (a restart from `latest`,
    /// a lost checkpoint). A step starting before the gap passed over records it did write:
    /// the gap's records were dropped in flight. Heuristic limit: a batch whose FIRST
    /// record is dropped in flight looks like a restart.
    pub(super) fn cause_of(&self, first: Offset) -> (GapCause, Option<CommitStep>) {
        match self.pipeline.step_over(first) {
            Some(s) if s.from == first && s.altered => (GapCause::SkippedByAlter, Some(s)),
            Some(s) if s.from == first => (GapCause::SkippedByRestart, Some(s)),
            Some(s) => (GapCause::DroppedInFlight, Some(s)),
            None => (GapCause::Unknown, None),
        }
    }

    /// Kafka's log start is now `log_start`: open gaps whose first record it deleted become
    /// unrecoverable (at least their prefix can no longer be replayed). Returns whether any
    /// gap changed (then it is reported by [`Self::take_dirty_gaps`]).
    pub fn log_start_moved(&mut self, log_start: Offset, now_ms: i64) -> bool {
        let mut changed = false;
        if log_start <= self.log.start {
            return false;
        }
        // Only the gaps the log start passed since last time (later gaps below it are born
        // unrecoverable, see `declare_missing`).
        for g in self
            .gaps
            .by_first
            .range_mut(self.log.start..log_start)
            .map(|(_, g)| g)
        {
            if g.missing > 0 && g.deleted_ms.is_none() {
                g.deleted_ms = Some(now_ms);
                self.gaps.dirty.insert(g.first);
                self.unstored.gap(g.first);
                changed = true;
            }
        }
        changed |= self.retired_log_start(log_start, now_ms);
        self.log.start = log_start;
        if changed {
            self.unstored.changed();
        }
        changed
    }

    /// Gives up missing runs older than `give_up_ms`: they stay missing and in their gap,
    /// but leave the ledger (their keys are released, see [`Self::take_released_keys`]), so
    /// neither memory nor re-checks keep growing with an incident's age.
    pub fn give_up(&mut self, now_ms: i64, give_up_ms: i64) {
        // Runs are declared in offset order, so detection times rise with offsets: the scan
        // stops at the first run still young (a clock step back only delays a give-up).
        let old: Vec<Offset> = self
            .missing
            .runs
            .iter()
            .take_while(|(_, m)| now_ms - m.detected_ms >= give_up_ms)
            .map(|(f, _)| *f)
            .collect();
        for f in old {
            self.give_up_run(f);
        }
    }

    pub(super) fn give_up_run(&mut self, first: Offset) -> u64 {
        let Some(mut m) = self.remove_missing(first) else {
            return 0;
        };
        self.unstored.changed();
        let keys = m.keys.len() as u64;
        self.key_changes.released.append(&mut m.keys);
        // Its gap may have no run left: it leaves memory at the next `take_dirty_gaps`.
        self.gaps.retire_candidates.push(m.gap);
        if self.missing.runs.is_empty() {
            self.rotation.nothing_missing();
        }
        keys
    }
}
