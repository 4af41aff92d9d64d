//! Reporting: gauges, deltas and dirty gaps for persistence, and read-only views of the runs.

use super::{Delta, GapGauges, GapRecord, PartitionLedger, Segment, min_opt};
use crate::gap::GapCause;
use crate::ledger::runs::{self, OffsetRun};
use crate::types::Offset;
use std::collections::BTreeMap;

/// When the gap maps were last rebuilt ([`PartitionLedger::compact`]).
#[derive(Debug, Clone, Default)]
pub(super) struct Compaction {
    /// Map sizes at the last rebuild.
    pub(super) at: usize,
    /// Missing runs inserted since the last rebuild (every new gap comes with one).
    pub(super) declared_since: usize,
    /// Rebuilds done (tests).
    pub(super) count: u64,
}

impl PartitionLedger {
    /// Open-gap gauges, recomputed only when the ledger changed (idle rounds cost O(1)).
    pub fn gauges(&mut self) -> GapGauges {
        if let Some((rev, g)) = &self.gaps.gauges
            && *rev == self.unstored.revision
        {
            return g.clone();
        }
        let mut out = GapGauges::default();
        for g in self.gaps.by_first.values() {
            let unverifiable = !g.size_known && g.cause == GapCause::DeletedUnread;
            if g.missing == 0 || unverifiable {
                continue;
            }
            out.open += 1;
            out.missing += g.missing;
            match g.deleted_ms {
                Some(at) => out.deleted_ms = min_opt(out.deleted_ms, Some(at)),
                None => match g.min_ts {
                    Some(ts) => {
                        out.oldest_undeleted_ts = min_opt(out.oldest_undeleted_ts, Some(ts))
                    }
                    None => out.undeleted_without_ts += 1,
                },
            }
        }
        // The retired gaps, as they were counted when they left memory.
        let r = &self.retirement.aggregate;
        out.open += r.open;
        out.missing += r.open_missing;
        out.deleted_ms = min_opt(out.deleted_ms, r.deleted_ms);
        out.oldest_undeleted_ts = min_opt(out.oldest_undeleted_ts, r.oldest_undeleted_ts);
        out.undeleted_without_ts += r.undeleted_without_ts;
        self.gaps.gauges = Some((self.unstored.revision, out.clone()));
        out
    }

    /// What the store does not hold yet (see [`Self::stored`]).
    pub fn delta(&self) -> Delta {
        Delta {
            replace: self.unstored.replace,
            missing: self
                .unstored
                .missing
                .iter()
                .map(|f| (*f, self.missing.runs.get(f).cloned()))
                .collect(),
            gaps: self
                .unstored
                .gaps
                .iter()
                .map(|f| (*f, self.gaps.by_first.get(f).cloned()))
                .collect(),
            tail_gap: self.gaps.tail,
        }
    }

    /// First offset of the gap the next missing record extends.
    pub fn tail_gap(&self) -> Option<Offset> {
        self.gaps.tail
    }

    /// The log epoch of the gap the ledger holds at `first` ([`GapRecord::epoch`]).
    pub fn gap_epoch(&self, first: Offset) -> Option<u32> {
        self.gaps.by_first.get(&first).map(|g| g.epoch)
    }

    /// Attaches what an evidence source told of the gap at `first` (src/evidence/flink),
    /// unless it already carries some: decided once, stored with its item. Returns whether
    /// the ledger holds the gap.
    pub fn set_gap_evidence(&mut self, first: Offset, evidence: String) -> bool {
        let Some(g) = self.gaps.by_first.get_mut(&first) else {
            return false;
        };
        if g.evidence.is_none() {
            g.evidence = Some(evidence);
            self.unstored.gap(first);
            self.unstored.changed();
        }
        true
    }

    /// Gaps changed since the last call. Gaps with nothing unconfirmed that are not the tail
    /// are forgotten afterwards (their final state is in the returned list); dead_lettered
    /// ones retire (`retired.rs`).
    pub fn take_dirty_gaps(&mut self) -> Vec<GapRecord> {
        let dirty = std::mem::take(&mut self.gaps.dirty);
        let out: Vec<GapRecord> = dirty
            .iter()
            .filter_map(|f| {
                let g = self.gaps.by_first.get_mut(f)?;
                let out = g.clone();
                g.is_new = false;
                Some(out)
            })
            .collect();
        self.compact();
        // Only gaps that changed, or stopped being the tail, can have become forgettable:
        // a round does not walk every gap.
        let tail = self.gaps.tail;
        let mut check: Vec<Offset> = dirty.into_iter().collect();
        check.append(&mut self.gaps.untailed);
        for &f in &check {
            // A dead_lettered gap is not forgotten: it blocks completeness until
            // acknowledged, so it retires below (kept in the retired aggregate).
            if Some(f) != tail
                && Some(f) != self.gaps.dead_tail
                && self.gaps.by_first.get(&f).is_some_and(|g| !g.unconfirmed())
            {
                self.gaps.by_first.remove(&f);
                self.unstored.gap(f);
                self.unstored.changed();
            }
        }
        // Gaps with nothing left to re-check leave memory (their final state is in `out`
        // or already in the store).
        let given_up = std::mem::take(&mut self.gaps.retire_candidates);
        self.retire_done(check.into_iter().chain(given_up));
        out
    }

    /// Rebuilds the gap and missing maps once they doubled since the last rebuild, or once a
    /// quarter of them is new since it. Gaps are declared in offset order, so a map grows by
    /// appends, which leave every node but the last half full: rebuilt from sorted entries,
    /// nodes are full, and an incident with 500,000 gaps holds about half the memory.
    ///
    /// The second trigger is for a long incident whose gaps are given up (`give_up_after`):
    /// new ones are appended at the end while the oldest leave from the front, so the maps
    /// keep their size while, within one `give_up_after`, every full node of the last
    /// rebuild is replaced by half-full ones: the held memory rose by half over the minute
    /// after the first give-ups (heaptrack: 70 to 111 MiB at a steady 9,000 gaps a second).
    /// Rebuilt after a quarter turned over, the maps stay within 1.25x of full. Amortized
    /// O(1) per gap either way (a rebuild of n entries follows >= n/4 declarations).
    fn compact(&mut self) {
        const MIN: usize = 4096;
        let len = self.gaps.by_first.len().max(self.missing.runs.len());
        let grown = len >= 2 * self.compaction.at;
        let turned_over = self.compaction.declared_since >= len / 4;
        if len < MIN || !(grown || turned_over) {
            return;
        }
        rebuild(&mut self.gaps.by_first);
        rebuild(&mut self.missing.runs);
        self.compaction.at = len;
        self.compaction.declared_since = 0;
        self.compaction.count += 1;
    }

    /// How many times [`Self::compact`] rebuilt the maps.
    #[cfg(test)]
    pub(crate) fn compactions(&self) -> u64 {
        self.compaction.count
    }

    /// The pending records as segments (offsets with their keys), in offset order.
    pub fn pending_segments(&self) -> impl Iterator<Item = Segment> + '_ {
        self.queue.runs.iter().map(|p| Segment {
            run: p.run,
            keys: p.keys.clone(),
            max_ts: p.max_ts,
        })
    }

    /// All missing offsets as runs (tests, status).
    pub fn missing_runs(&self) -> Vec<OffsetRun> {
        self.missing.runs.values().map(|m| m.run).collect()
    }

    /// Pending offsets as runs (tests).
    pub fn pending_runs(&self) -> Vec<OffsetRun> {
        runs::normalize(self.queue.runs.iter().map(|p| p.run).collect())
    }

    /// The gaps the ledger currently holds.
    pub fn gaps(&self) -> impl Iterator<Item = &GapRecord> {
        self.gaps.by_first.values()
    }

    /// The gap starting at `first`, if one does.
    pub fn gap(&self, first: Offset) -> Option<&GapRecord> {
        self.gaps.by_first.get(&first)
    }
}

/// Rebuilds `map` with full nodes, in place of `into_iter().collect()`: `collect` first
/// gathers every entry into one Vec and sorts it with a scratch buffer, large allocations
/// on fresh pages while the old nodes' freed pages wait for the allocator's decay, so for a
/// moment a 262,144-gap ledger was resident two to three times over (the 500,000-gap fault
/// test's resident peak went 190 to 264 MiB within a second). `append` into a non-empty
/// map merges both maps' sorted iterators straight into a new tree, freeing the old nodes
/// as it reads them; the new nodes are of their size, which the allocator hands out again
/// at once.
fn rebuild<K: Ord, V>(map: &mut BTreeMap<K, V>) {
    let Some((k, v)) = map.pop_first() else {
        return;
    };
    let mut out = BTreeMap::new();
    out.insert(k, v);
    out.append(map);
    *map = out;
}

#[cfg(test)]
mod tests {
    use super::rebuild;
    use std::collections::BTreeMap;

    #[test]
    fn rebuild_keeps_every_entry_in_order() {
        for n in [0u64, 1, 2, 11, 12, 5_000] {
            let want: BTreeMap<u64, u64> = (0..n).map(|k| (k * 3, k)).collect();
            let mut map = want.clone();
            rebuild(&mut map);
            assert_eq!(map, want, "{n} entries");
            assert_eq!(map.len() as u64, n);
        }
    }
}
