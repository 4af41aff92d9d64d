//! Ranges Kafka deleted before the auditor read them (SPEC guarantee 8), settled by the
//! sink piece by piece: a cursor in the gap says how far the sink has been asked, so a range
//! of tens of millions of offsets costs a bounded amount of work per round and survives a
//! restart half-way (the audit round decides the piece sizes, `audit::round`).
//!
//! While a range is being settled its gap stays `unsettled` and its `missing` is exact at
//! every step: the offsets not asked yet plus those asked and not found, never fewer (so the
//! gap never reads as `late` before the last piece), never counted as lost.

use super::{Applied, PartitionLedger};
use crate::ledger::runs::{self, OffsetRun};
use crate::types::Offset;

/// A deleted-unread range still to settle: its gap (by first offset) and the offsets the
/// sink has not been asked about yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeletedRest {
    /// First offset of the gap: its identity, and where the range started.
    pub gap: Offset,
    /// From the gap's cursor to its last offset.
    pub rest: OffsetRun,
}

/// What to do next with a deleted-unread range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextPiece {
    /// Ask the sink about these offsets (the next piece from the cursor).
    Ask(OffsetRun),
    /// The sink is not asked about these: past the most offsets of one range it is asked
    /// about (or under a strategy whose rows carry no offsets). Settled as unverifiable.
    Beyond(OffsetRun),
}

impl DeletedRest {
    /// The next piece: at most `piece_len` offsets from the cursor, and none past the first
    /// `max_asked` offsets of the range (0: none is asked); what lies beyond is
    /// [`NextPiece::Beyond`], all of it at once.
    pub fn next(&self, piece_len: u64, max_asked: u64) -> NextPiece {
        let asked = self.rest.first.saturating_sub(self.gap).max(0) as u64;
        if asked >= max_asked {
            return NextPiece::Beyond(self.rest);
        }
        let room = (max_asked - asked).min(piece_len.max(1));
        // `room` is at most `piece_len`: far below any offset's range.
        let last = self
            .rest
            .first
            .saturating_add(room.min(i64::MAX as u64) as Offset - 1)
            .min(self.rest.last);
        NextPiece::Ask(OffsetRun::new(self.rest.first, last))
    }
}

impl PartitionLedger {
    /// Ranges Kafka deleted unread that the sink has not finished answering about: each
    /// from its cursor on.
    pub fn deleted_to_settle(&self) -> Vec<DeletedRest> {
        self.gaps
            .by_first
            .values()
            // A cursor past the end (a stored state no version writes) has nothing to ask.
            .filter(|g| g.unsettled && g.settle_cursor <= g.last)
            .map(|g| DeletedRest {
                gap: g.first,
                rest: OffsetRun::new(g.settle_cursor.max(g.first), g.last),
            })
            .collect()
    }

    /// The sink's answer about `piece` of the deleted range of gap `gap` (`present`: offsets
    /// found there, for offset_columns; empty where the sink cannot tell or was not asked):
    /// present offsets were written and leave `missing`, the rest of the piece stays in the
    /// gap, unverifiable. The cursor moves past the piece; past the range's end the gap is
    /// settled. Only the piece at the cursor is taken: an answer about anything else (a
    /// question repeated after a restart, a stale one) counts nothing twice. Returns what to
    /// count.
    pub fn settle_deleted(
        &mut self,
        gap: Offset,
        piece: OffsetRun,
        present: &[OffsetRun],
    ) -> Applied {
        let Some(g) = self.gaps.by_first.get_mut(&gap).filter(|g| g.unsettled) else {
            return Applied::default();
        };
        if piece.first != g.settle_cursor.max(g.first)
            || piece.last < piece.first
            || piece.last > g.last
        {
            return Applied::default();
        }
        let found = runs::count(&runs::intersect(piece, &runs::normalize(present.to_vec())));
        g.missing = g.missing.saturating_sub(found);
        if piece.last >= g.last {
            g.unsettled = false;
            // Settled: the cursor says nothing any more (and is not stored).
            g.settle_cursor = 0;
        } else {
            g.settle_cursor = piece.last + 1;
        }
        self.unstored.changed();
        self.gaps.dirty.insert(gap);
        self.unstored.gap(gap);
        Applied {
            confirmed: found,
            unverifiable: piece.len() - found,
            ..Applied::default()
        }
    }
}
