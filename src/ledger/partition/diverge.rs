//! A log that no longer holds what the ledger decided: truncated below the ledger's position
//! (an unclean leader election) or a topic deleted and created again. The offsets at and
//! beyond the divergence point now name other records (or none): what the ledger holds there
//! leaves it.

use super::{GapRecord, PartitionLedger, Snapshot};
use crate::gap::GapCause;
use crate::ledger::runs::OffsetRun;
use crate::types::Offset;
use std::collections::BTreeMap;

/// Which log of the partition the ledger is on, and where Kafka's log starts.
#[derive(Debug, Clone)]
pub(super) struct LogPosition {
    /// The epoch of the gaps it finds ([`Snapshot::epoch`]).
    pub(super) epoch: u32,
    /// See [`Snapshot::truncated_from`].
    pub(super) truncated_from: Option<Offset>,
    /// The log start last passed to [`PartitionLedger::log_start_moved`].
    pub(super) start: Offset,
}

impl Default for LogPosition {
    fn default() -> Self {
        Self {
            epoch: 0,
            truncated_from: None,
            start: Offset::MIN,
        }
    }
}

impl Snapshot {
    /// Keeps what lies below `at`: missing runs are cut at `at`, gaps starting at or after it
    /// are taken out and returned (their records are gone from Kafka: the caller reports
    /// them once more as such), and a gap reaching past `at` ends at `at - 1`, its missing
    /// count less the missing records cut from it, unless some of its records were given
    /// up (they are not located): then it stays whole, span and count. The tail gap goes whenever anything was
    /// cut: the records between it and the next record read are gone, and nobody can say
    /// whether one of them was confirmed, so the next missing record starts a gap of its own.
    pub fn cut_at(&mut self, at: Offset) -> Vec<GapRecord> {
        let mut cut_from: BTreeMap<Offset, u64> = BTreeMap::new();
        // Missing records each gap still holds as runs: the rest were given up (or folded),
        // and where they lie is not known.
        let mut located: BTreeMap<Offset, u64> = BTreeMap::new();
        for m in &self.missing {
            *located.entry(m.gap).or_default() += m.run.len();
        }
        let mut kept = Vec::with_capacity(self.missing.len());
        for m in std::mem::take(&mut self.missing) {
            if m.run.last < at {
                kept.push(m);
                continue;
            }
            let below = (m.run.first < at).then(|| m.sub(OffsetRun::new(m.run.first, at - 1)));
            let gone = m.run.len() - below.as_ref().map_or(0, |b| b.run.len());
            *cut_from.entry(m.gap).or_default() += gone;
            kept.extend(below);
        }
        self.missing = kept;
        let mut removed = Vec::new();
        let mut trimmed = false;
        let mut gaps = Vec::with_capacity(self.gaps.len());
        for mut g in std::mem::take(&mut self.gaps) {
            if g.first >= at {
                removed.push(g);
                continue;
            }
            let unlocated = g.cause == GapCause::Folded
                || (g.size_known && g.missing > located.get(&g.first).copied().unwrap_or(0));
            if g.last >= at && unlocated {
                // Some of its records were given up (an overflow gap holds none as runs):
                // which of them lay beyond the cut is not known. Trimmed with its whole
                // count, its row would say more records missing than its span holds; it
                // stays the old log's gap as it stood (span and count), nothing it counted
                // dropped. Its runs beyond the cut are no longer followed.
                trimmed = true;
            } else if g.last >= at {
                if g.size_known {
                    g.missing = g
                        .missing
                        .saturating_sub(cut_from.get(&g.first).copied().unwrap_or(0));
                } else if g.unsettled {
                    // A deleted range being settled in pieces: the offsets cut that the sink
                    // was not asked about yet leave its count; past its cursor nothing is left
                    // to ask.
                    let cursor = g.settle_cursor.max(g.first);
                    if cursor <= g.last {
                        let unasked = (g.last - cursor.max(at) + 1).max(0) as u64;
                        g.missing = g.missing.saturating_sub(unasked);
                    }
                    if cursor >= at {
                        g.unsettled = false;
                        g.settle_cursor = 0;
                    }
                }
                g.last = at - 1;
                trimmed = true;
            }
            gaps.push(g);
        }
        self.gaps = gaps;
        if trimmed || !removed.is_empty() || !cut_from.is_empty() {
            self.tail_gap = None;
        }
        removed
    }
}

impl PartitionLedger {
    /// A ledger resuming at `at` on a log that diverged from the one `snap` was decided on:
    /// `snap` cut at `at` ([`Snapshot::cut_at`]), restored, and written whole at the next
    /// store write (the store still holds the items cut). Returns the gaps taken out.
    /// Its gaps from now on are of the next epoch ([`Snapshot::epoch`]): gaps at the
    /// offsets of the gaps taken out get ids of their own.
    pub fn restore_diverged(at: Offset, keyed: bool, mut snap: Snapshot) -> (Self, Vec<GapRecord>) {
        let removed = snap.cut_at(at);
        let mut l = Self::restore(at, keyed, snap);
        l.log.epoch = l.log.epoch.saturating_add(1);
        // The old log's overflow gap is not this log's: a gap found from now on folds into
        // an overflow gap of the new epoch, never into an old gap's row. The old one, with
        // nothing left to re-check, retires at the next round.
        l.fold.overflow = None;
        // Nor does a dead-lettered record of the new log extend the old log's gap.
        l.end_dead_tail();
        l.unstored.replace = true;
        l.unstored.changed();
        (l, removed)
    }

    /// An empty ledger resuming at `at` on a new log (a topic created again) replacing a
    /// ledger of epoch `before`: its gaps are of the next epoch ([`Snapshot::epoch`]).
    pub fn new_diverged(at: Offset, keyed: bool, before: u32) -> Self {
        let mut l = Self::new(at, keyed);
        l.log.epoch = before.saturating_add(1);
        l.unstored.replace = true;
        l.unstored.changed();
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::partition::MissingRun;
    use crate::types::Key;

    fn run(first: Offset, last: Offset, gap: Offset) -> MissingRun {
        MissingRun {
            run: OffsetRun::new(first, last),
            gap,
            detected_ms: 1,
            keys: (first..=last).map(|o| Key::new([o.to_string()])).collect(),
            given_up: false,
        }
    }

    fn gap(first: Offset, last: Offset, missing: u64) -> GapRecord {
        GapRecord {
            first,
            last,
            missing,
            size_known: true,
            min_ts: None,
            max_ts: None,
            detected_ms: 1,
            cause: GapCause::default(),
            commit: None,
            evidence: None,
            deleted_ms: None,
            unsettled: false,
            shared_key: false,
            epoch: 0,
            is_new: false,
            settle_cursor: 0,
            dead_lettered: 0,
        }
    }

    /// Gaps [2–3] (2, 3 missing), [5–9] (5–6 and 8–9 missing), [12] (the tail); cut at 8.
    fn snapshot() -> Snapshot {
        Snapshot {
            missing: vec![run(2, 3, 2), run(5, 6, 5), run(8, 9, 5), run(12, 12, 12)],
            gaps: vec![gap(2, 3, 2), gap(5, 9, 4), gap(12, 12, 1)],
            tail_gap: Some(12),
            dead_tail: None,
            epoch: 0,
            truncated_from: None,
        }
    }

    #[test]
    fn what_lies_below_the_cut_stays_whole() {
        let mut s = snapshot();
        let gone = s.cut_at(20);
        assert!(gone.is_empty());
        assert_eq!(s, snapshot(), "nothing at or beyond 20: unchanged");
    }

    #[test]
    fn a_cut_takes_out_gaps_beyond_it_and_trims_the_one_across_it() {
        let mut s = snapshot();
        let gone = s.cut_at(9);
        assert_eq!(gone.iter().map(|g| g.first).collect::<Vec<_>>(), vec![12]);
        let runs: Vec<_> = s
            .missing
            .iter()
            .map(|m| (m.run.first, m.run.last))
            .collect();
        assert_eq!(runs, vec![(2, 3), (5, 6), (8, 8)]);
        // The cut run keeps the keys of its offsets only.
        assert_eq!(s.missing[2].keys, vec![Key::new(["8"])]);
        let gaps: Vec<_> = s
            .gaps
            .iter()
            .map(|g| (g.first, g.last, g.missing))
            .collect();
        assert_eq!(gaps, vec![(2, 3, 2), (5, 8, 3)]);
        assert_eq!(
            s.tail_gap, None,
            "records between are gone: no gap extends over them"
        );
    }

    #[test]
    fn a_cut_at_a_gaps_first_offset_takes_it_out() {
        let mut s = snapshot();
        let gone = s.cut_at(5);
        assert_eq!(
            gone.iter().map(|g| g.first).collect::<Vec<_>>(),
            vec![5, 12]
        );
        assert_eq!(s.gaps.len(), 1);
        assert_eq!(s.missing.len(), 1);
    }

    #[test]
    fn a_restored_diverged_ledger_resumes_at_the_cut_and_replaces_what_is_stored() {
        let (l, gone) = PartitionLedger::restore_diverged(9, true, snapshot());
        assert_eq!(gone.len(), 1);
        assert_eq!(l.next_offset(), 9);
        assert_eq!(l.settled(), 9);
        assert_eq!(l.missing(), 2 + 3);
        assert!(
            l.delta().replace,
            "the store's items beyond the cut must go"
        );
        assert_eq!(l.missing_keys().count(), 2 + 2 + 1);
    }
}
