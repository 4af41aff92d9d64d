//! Reading: records and offsets entering the ledger, and offsets the log deleted before they
//! were read.

use super::*;

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
        if offset < self.next_offset {
            return false;
        }
        self.next_offset = offset + 1;
        let Observed::Expected { key } = what else {
            return true;
        };
        self.pending_count += 1;
        if let Some(last) = self.pending.back_mut()
            && last.run.last + 1 == offset
            && now_ms - last.first_seen_ms < RUN_SEEN_SPAN_MS
        {
            last.run.last = offset;
            last.last_seen_ms = now_ms.max(last.last_seen_ms);
            last.min_ts = min_opt(last.min_ts, ts_ms);
            last.max_ts = max_opt(last.max_ts, ts_ms);
            if self.keyed {
                last.keys
                    .push(key.unwrap_or_else(|| Key::new([] as [&str; 0])));
            }
            return true;
        }
        self.pending.push_back(PendingRun {
            run: OffsetRun::new(offset, offset),
            first_seen_ms: now_ms,
            last_seen_ms: now_ms,
            min_ts: ts_ms,
            max_ts: ts_ms,
            keys: if self.keyed {
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
        if position <= self.next_offset {
            return false;
        }
        self.next_offset = position;
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
        if last < first || last < self.next_offset {
            return None;
        }
        let first = first.max(self.next_offset);
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
            epoch: self.epoch,
            is_new: true,
            settle_cursor: 0,
            dead_lettered: 0,
        };
        self.next_offset = last + 1;
        // Such a gap is never re-checked: its records are gone. It is not the tail: a later
        // missing record is a different incident.
        if let Some(t) = self.tail_gap.take() {
            self.untailed.push(t);
        }
        self.end_dead_tail();
        self.revision += 1;
        self.dirty_gaps.insert(first);
        self.unstored_gaps.insert(first);
        self.gaps.insert(first, g.clone());
        Some(g)
    }
}
