//! Completeness (issue 18, SPEC "Completeness"): what this partition holds back, computed only
//! when the ledger changed. Kept apart from the rest of the ledger on purpose.

use super::PartitionLedger;
use crate::types::Offset;

/// The newest record time read, and [`PartitionLedger::completeness`]'s last answer with the
/// ledger state it was computed at.
#[derive(Debug, Clone, Default)]
pub(super) struct CompletenessCache {
    /// Never ahead of the clock of the reads that set it (see
    /// [`PartitionLedger::note_record_ts`]).
    newest_ts: Option<i64>,
    /// Records whose timestamp was ahead of that clock.
    future_ts: u64,
    /// ((revision, next offset, pending count), aggregate). Pending records change without a
    /// revision (it follows only the persisted part): every change to them moves the next
    /// offset (a record read) or the pending count (records decided), so the triple changes
    /// whenever the answer can.
    cached: Option<((u64, Offset, u64), crate::completeness::LedgerCompleteness)>,
}

impl PartitionLedger {
    /// Notes the timestamp of a record just taken by [`Self::ingest`] at `now_ms`, expected or
    /// filtered: a filtered record is decided too, so it moves completeness forward.
    ///
    /// A timestamp ahead of `now_ms` (a producer's skewed clock, an event time in the future)
    /// is taken as `now_ms`: the newest record read is what an idle partition counts as
    /// complete up to, and one record stamped an hour ahead would otherwise prove an hour
    /// nobody has produced yet (SPEC "Completeness": never ahead of the wall clock). Returns
    /// whether it was clamped, so the caller counts it.
    pub fn note_record_ts(&mut self, ts: Option<i64>, now_ms: i64) -> bool {
        let Some(t) = ts else {
            return false;
        };
        let future = t > now_ms;
        let t = t.min(now_ms);
        self.completeness.newest_ts = Some(self.completeness.newest_ts.map_or(t, |n| n.max(t)));
        if future {
            self.completeness.future_ts += 1;
        }
        future
    }

    /// Records read with a timestamp ahead of the clock (see [`Self::note_record_ts`]).
    pub fn future_timestamps(&self) -> u64 {
        self.completeness.future_ts
    }

    /// What this partition holds completeness back at: its oldest pending record, its
    /// earliest gaps with records the sink is not proven to hold, missing or dead-lettered
    /// ([`super::GapRecord::unconfirmed`]; acknowledged gaps left the ledger; late and repaired ones
    /// have none). Recomputed only after a change, so an idle round
    /// costs O(1); a change costs one pass over the pending runs and the gaps, as
    /// [`Self::gauges`] does. Timestamps are bounds: a pending run split by the due frontier
    /// keeps both halves' bounds, so a hold may be a little earlier than exact, never later.
    pub fn completeness(&mut self) -> crate::completeness::LedgerCompleteness {
        use crate::completeness::{BlockingGap, LedgerCompleteness, MAX_LISTED_GAPS, Since};
        let key = (
            self.unstored.revision,
            self.queue.next_offset,
            self.queue.count,
        );
        if let Some((k, c)) = &self.completeness.cached
            && *k == key
        {
            return c.clone();
        }
        let pending = self.queue.runs.iter().map(|p| Since::of(p.min_ts)).min();
        let mut blocking = 0u64;
        // The earliest MAX_LISTED_GAPS by record time, kept sorted while scanning.
        let mut earliest: Vec<(Since, Offset)> = Vec::with_capacity(MAX_LISTED_GAPS + 1);
        for g in self.gaps.by_first.values().filter(|g| g.unconfirmed()) {
            blocking += 1;
            let s = Since::of(g.min_ts);
            if earliest.len() == MAX_LISTED_GAPS
                && earliest.last().is_some_and(|(last, _)| *last <= s)
            {
                continue;
            }
            let at = earliest.partition_point(|(x, f)| (*x, *f) <= (s, g.first));
            earliest.insert(at, (s, g.first));
            earliest.truncate(MAX_LISTED_GAPS);
        }
        // States as reported (the same rule as the API's), for the kept few only.
        let nowhere = crate::types::TopicPartition::new(String::new(), 0);
        let mut listed = self.retirement.aggregate.clone();
        for (since, first) in earliest {
            if let Some(g) = self.gaps.by_first.get(&first) {
                let gap = g.to_gap("", &nowhere);
                listed.list(BlockingGap {
                    first,
                    since,
                    missing: gap.missing_records,
                    state: gap.state,
                    epoch: g.epoch,
                });
            }
        }
        // Retired gaps block as they did in memory (`retired.rs`), the earliest listed.
        blocking += self.retirement.aggregate.gaps;
        let gaps = listed.earliest;
        let out = LedgerCompleteness {
            pending,
            gaps,
            blocking_gaps: blocking,
            newest_ts: self.completeness.newest_ts,
        };
        self.completeness.cached = Some((key, out.clone()));
        out
    }
}
