//! Folding (`max_open_gaps`, SPEC guarantee 12): when an audit holds more gaps in memory than
//! its budget, the oldest gaps still re-checked are given up early and merged into the
//! partition's one *overflow gap* (cause [`GapCause::Folded`]): its first and last offsets
//! span every gap folded into it and its missing count is their sum, so the report says
//! exactly where it stopped being gap by gap. The folded gaps' own store rows are replaced by
//! it (see [`PartitionLedger::folded_unstored`]).
//!
//! The overflow gap never retires (`retired.rs`) and is never folded into itself: one per
//! partition, whatever the incident's length. It only grows upwards: a gap is folded into
//! it only when it lies wholly above its last offset, so the records folded after any moment
//! are exactly its part beyond its last offset at that moment (an acknowledgement of it
//! relies on that, see [`PartitionLedger::acknowledge_overflow`]).

use super::{GapRecord, PartitionLedger, max_opt, min_opt};
use crate::gap::GapCause;
use crate::types::Offset;

/// The partition's overflow gap.
#[derive(Debug, Clone, Default)]
pub(super) struct Fold {
    /// The overflow gap's first offset.
    pub(super) overflow: Option<Offset>,
    /// Gaps folded since [`PartitionLedger::take_folded`].
    pub(super) count: u64,
}

impl PartitionLedger {
    /// The first offset of the partition's overflow gap, if it has one.
    pub fn overflow(&self) -> Option<Offset> {
        self.fold.overflow
    }

    /// Gaps folded since the last [`Self::stored`] whose store rows the overflow gap
    /// replaces (deleted in the write that stores it), and how many were folded since the
    /// last [`Self::take_folded`].
    pub fn folded_unstored(&self) -> &[GapRecord] {
        &self.unstored.folded
    }

    /// How many gaps were folded since the last call (the audit counts them once stored).
    pub fn take_folded(&mut self) -> u64 {
        std::mem::take(&mut self.fold.count)
    }

    /// Folds the oldest gaps (lowest offsets) until the gaps in memory are `excess` fewer, or
    /// none is left to fold. Never folded: the tail gap (the next missing record extends
    /// it), a range Kafka deleted unread that the sink has not settled (`unsettled`), a gap
    /// with nothing missing (forgotten at the next [`Self::take_dirty_gaps`]), the overflow
    /// gap itself, and a gap of an earlier log (a log that diverged: its gaps never share a
    /// row with this log's; they retire once given up). Returns by how many the gaps in memory went down.
    pub fn fold_oldest(&mut self, excess: usize) -> usize {
        let before = self.gaps.by_first.len();
        let mut next = Offset::MIN;
        while before - self.gaps.by_first.len() < excess {
            let above = self
                .fold
                .overflow
                .and_then(|o| self.gaps.by_first.get(&o))
                .map_or(Offset::MIN, |o| o.last.saturating_add(1));
            let Some(first) = self
                .gaps
                .by_first
                .range(next.max(above)..)
                .find(|(f, g)| {
                    Some(**f) != self.gaps.tail
                        && Some(**f) != self.fold.overflow
                        && !g.unsettled
                        && g.missing > 0
                        // A gap of a log that diverged (an earlier epoch) never shares a row
                        // with this log's: it stays until given up (it can no longer grow).
                        && g.epoch == self.log.epoch
                })
                .map(|(f, _)| *f)
            else {
                break;
            };
            next = first + 1;
            self.fold(first);
        }
        before - self.gaps.by_first.len()
    }

    /// An operator acknowledged the overflow gap starting at `first` when it ended at
    /// `last` with `missing` records missing (its stored extent then). What was folded into
    /// it since (a fold in a round under way when the acknowledgement landed: their own rows
    /// are gone) was never shown to the operator: it stays open, as an overflow gap of its
    /// own over `last + 1 ..` its end, with the rest of the count. Any other gap: as
    /// [`Self::acknowledge_through`]. Returns whether anything changed.
    pub fn acknowledge_overflow(&mut self, first: Offset, last: Offset, missing: u64) -> bool {
        if self.fold.overflow != Some(first) {
            return self.acknowledge_through(first, last);
        }
        let Some(g) = self.gaps.by_first.get(&first).cloned() else {
            return false;
        };
        if !self.acknowledge_through(first, last) {
            return false;
        }
        let rest = g.missing.saturating_sub(missing);
        if g.last > last && rest > 0 {
            let at = last + 1;
            self.gaps.by_first.insert(
                at,
                // Not new: its records were detected (and counted) before they were folded.
                GapRecord {
                    first: at,
                    missing: rest,
                    is_new: false,
                    ..g
                },
            );
            // Still missing: `acknowledge_through` took the whole gap's count.
            if g.size_known {
                self.missing.count += rest;
            }
            self.fold.overflow = Some(at);
            self.gaps.dirty.insert(at);
            self.unstored.gap(at);
        }
        true
    }

    /// The gap at `first`, folded since the last [`Self::stored`], was acknowledged before
    /// that fold reached the store (its row stays, acknowledged): the overflow gap no longer
    /// counts its records, and its row is not replaced. Its span stays a bound. Returns
    /// whether it was one of them.
    pub fn unfold_acknowledged(&mut self, first: Offset) -> bool {
        let Some(at) = self.unstored.folded.iter().position(|g| g.first == first) else {
            return false;
        };
        let g = self.unstored.folded.remove(at);
        if let Some(o) = self
            .fold
            .overflow
            .and_then(|o| self.gaps.by_first.get_mut(&o))
        {
            o.missing = o.missing.saturating_sub(g.missing);
            let o = o.first;
            self.gaps.dirty.insert(o);
            self.unstored.gap(o);
        }
        if g.size_known {
            self.missing.count = self.missing.count.saturating_sub(g.missing);
        }
        self.fold.count = self.fold.count.saturating_sub(1);
        self.unstored.changed();
        true
    }

    /// Folds the gap at `first` into the overflow gap (which it becomes when there is none).
    fn fold(&mut self, first: Offset) {
        let Some(g) = self.gaps.by_first.get(&first) else {
            return;
        };
        let (lo, hi) = (g.first, g.last);
        // Its records are no longer re-checked: given up as after `give_up_after`.
        let runs: Vec<Offset> = self
            .missing
            .runs
            .range(lo..=hi)
            .filter(|(_, m)| m.gap == first)
            .map(|(f, _)| *f)
            .collect();
        for f in runs {
            self.give_up_run(f);
        }
        let Some(g) = self.gaps.by_first.remove(&first) else {
            return;
        };
        self.fold.count += 1;
        self.unstored.changed();
        let merged = match self
            .fold
            .overflow
            .and_then(|o| self.gaps.by_first.remove(&o))
        {
            None => GapRecord {
                cause: GapCause::Folded,
                commit: None,
                evidence: None,
                is_new: false,
                ..g
            },
            Some(o) => {
                // The row of whichever of the two is not the merged gap's first goes.
                let (keep, gone) = if o.first <= g.first { (o, g) } else { (g, o) };
                let merged = GapRecord {
                    last: keep.last.max(gone.last),
                    missing: keep.missing + gone.missing,
                    size_known: keep.size_known && gone.size_known,
                    min_ts: min_opt(keep.min_ts, gone.min_ts),
                    max_ts: max_opt(keep.max_ts, gone.max_ts),
                    detected_ms: keep.detected_ms.min(gone.detected_ms),
                    deleted_ms: min_opt(keep.deleted_ms, gone.deleted_ms),
                    shared_key: keep.shared_key || gone.shared_key,
                    cause: GapCause::Folded,
                    commit: None,
                    evidence: None,
                    is_new: false,
                    ..keep.clone()
                };
                self.unstored.gap(gone.first);
                self.gaps.dirty.remove(&gone.first);
                self.unstored.folded.push(gone);
                merged
            }
        };
        let at = merged.first;
        self.fold.overflow = Some(at);
        self.unstored.gap(at);
        self.gaps.dirty.insert(at);
        self.gaps.by_first.insert(at, merged);
    }
}
