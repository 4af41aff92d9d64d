//! Reading: records and offsets entering the ledger, and offsets the log deleted before they
//! were read.

use super::{GapRecord, Observed, PartitionLedger, PendingRun, RUN_SEEN_SPAN_MS, max_opt, min_opt};
use crate::gap::GapCause;
use crate::ledger::runs::OffsetRun;
use crate::types::{Key, Offset};
use std::collections::VecDeque;

/// Records read and not decided yet, in offset order.
#[derive(Debug, Clone)]
pub(super) struct PendingQueue {
    /// The next offset the consumer will deliver.
    pub(super) next_offset: Offset,
    /// Keep a match key per pending record (key_columns, doc_id); otherwise memory is
    /// O(runs).
    pub(super) keyed: bool,
    /// The pending runs.
    pub(super) runs: VecDeque<PendingRun>,
    /// Records in `runs`.
    pub(super) count: u64,
}

impl PendingQueue {
    /// Nothing read yet; the next record is expected at `next_offset`.
    pub(super) fn new(next_offset: Offset, keyed: bool) -> Self {
        Self {
            next_offset,
            keyed,
            runs: VecDeque::new(),
            count: 0,
        }
    }
}

impl PartitionLedger {
    /// Takes one consumed record. Offsets at or below an already observed one are ignored
    /// (re-delivery after a seek); the jump from `next_offset` to `offset` is a hole.
    pub fn ingest(
        &mut self,
        offset: Offset,
        ts_ms: Option<i64>,
        what: Observed,
        now_ms: i64,
    ) -> bool {
        if offset < self.queue.next_offset {
            return false;
        }
        self.queue.next_offset = offset + 1;
        let Observed::Expected { key } = what else {
            return true;
        };
        self.queue.count += 1;
        if let Some(last) = self.queue.runs.back_mut()
            && last.run.last + 1 == offset
            && now_ms - last.first_seen_ms < RUN_SEEN_SPAN_MS
        {
            last.run.last = offset;
            last.last_seen_ms = now_ms.max(last.last_seen_ms);
            last.min_ts = min_opt(last.min_ts, ts_ms);
            last.max_ts = max_opt(last.max_ts, ts_ms);
            if self.queue.keyed {
                last.keys
                    .push(key.unwrap_or_else(|| Key::new([] as [&str; 0])));
            }
            return true;
        }
        self.queue.runs.push_back(PendingRun {
            run: OffsetRun::new(offset, offset),
            first_seen_ms: now_ms,
            last_seen_ms: now_ms,
            min_ts: ts_ms,
            max_ts: ts_ms,
            keys: if self.queue.keyed {
                vec![key.unwrap_or_else(|| Key::new([] as [&str; 0]))]
            } else {
                Vec::new()
            },
        });
        true
    }

    /// The consumer's position reached `position`: every record below it has been taken by
    /// [`Self::ingest`] (the caller guarantees it: the tailing thread reports a position only
    /// after the records it covers), so the offsets from `next_offset` up to it held no record
    /// the consumer delivers — transaction markers, aborted batches under read_committed.
    /// They are holes, like the jumps [`Self::ingest`] makes (SPEC guarantee 4), and reading
    /// moves past them: without this a partition whose log ends in a marker would never be
    /// read to its end, and its settled watermark would stay on the marker. A position at or
    /// behind what was read changes nothing. Returns whether the ledger moved.
    pub fn read_to(&mut self, position: Offset) -> bool {
        if position <= self.queue.next_offset {
            return false;
        }
        self.queue.next_offset = position;
        true
    }

    /// Records that Kafka deleted offsets `first..=last` before the auditor read them
    /// (its resume point fell below the log start): a gap of unknown size, never silence.
    /// Moves `next_offset` past them.
    pub fn skipped_by_retention(
        &mut self,
        first: Offset,
        last: Offset,
        now_ms: i64,
    ) -> Option<GapRecord> {
        if last < first || last < self.queue.next_offset {
            return None;
        }
        let first = first.max(self.queue.next_offset);
        let g = GapRecord {
            first,
            last,
            missing: (last - first + 1) as u64,
            size_known: false,
            min_ts: None,
            max_ts: None,
            detected_ms: now_ms,
            cause: GapCause::DeletedUnread,
            commit: None,
            evidence: None,
            deleted_ms: Some(now_ms),
            unsettled: true,
            shared_key: false,
            epoch: self.log.epoch,
            is_new: true,
            settle_cursor: 0,
            dead_lettered: 0,
        };
        self.queue.next_offset = last + 1;
        // Such a gap is never re-checked: its records are gone. It is not the tail: a later
        // missing record is a different incident.
        if let Some(t) = self.gaps.tail.take() {
            self.gaps.untailed.push(t);
        }
        self.end_dead_tail();
        self.unstored.changed();
        self.gaps.dirty.insert(first);
        self.unstored.gap(first);
        self.gaps.by_first.insert(first, g.clone());
        Some(g)
    }
}
