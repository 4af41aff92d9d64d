//! Merging another owner's retired gaps into a store whose own verdicts stand (review of
//! format 3, F2/F3): the store resumed a partition from its own progress, further than (or
//! read before) that owner's format-3 state, so it decided the same offsets itself. Neither
//! side's verdict is known to be the later one: no row of this store is dropped or set back,
//! and a gap of theirs is added only where this store has no verdict that contradicts it.

use super::*;

/// What [`Store::merge_retired`] did with a chunk's gaps.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Merged {
    /// Gaps of theirs written (new here, or this store's row of the same id moved on to
    /// their further state).
    pub written: Vec<String>,
    /// Gaps of theirs not written: they overlap another gap of this store (its own verdict
    /// on those offsets differs; which is right cannot be told).
    pub conflicting: Vec<String>,
}

/// How far a gap's state is settled: of two verdicts on one gap, the further one is
/// kept. An acknowledgement (an operator's) and records seen later (`late`, `repaired`)
/// or named by the dead-letter topic are evidence that never goes back to `open`; Kafka's
/// deletion (`unrecoverable`) is never undone.
pub fn settled_rank(s: GapState) -> u8 {
    match s {
        GapState::Open | GapState::Unverifiable => 0,
        GapState::Unrecoverable => 1,
        GapState::DeadLettered => 2,
        GapState::Late | GapState::Repaired => 3,
        GapState::Acknowledged => 4,
    }
}

/// Whether `[a0, a1]` and `[b0, b1]` share an offset.
pub fn overlaps(a: (Offset, Offset), b: (Offset, Offset)) -> bool {
    a.0 <= b.1 && b.0 <= a.1
}

impl Store {
    /// Merges `gaps` (retired gaps of one partition of `audit` that another owner handed
    /// over, none of them held in this owner's memory) into this store, whose own rows
    /// stand: a gap is written when this store holds no row of its id and none of its
    /// retired rows nor `held` (the offsets of the gaps this owner's ledger holds) overlaps
    /// it, or when this store's row of its id is less settled ([`settled_rank`]); a row of
    /// this store is never dropped nor set back. A gap overlapping another gap of this
    /// store is not written (`conflicting`: the caller says so). Relies on one owner's gaps
    /// of a partition being disjoint: only the retired row starting last at or before a
    /// gap's last offset can overlap it (through the `gaps_retired` index).
    pub fn merge_retired(
        &self,
        audit: &str,
        gaps: &[Gap],
        held: &[(Offset, Offset)],
    ) -> Result<Merged, StoreError> {
        let mut out = Merged::default();
        let mut write = Vec::new();
        for g in gaps {
            let span = (g.first_offset, g.last_offset);
            if let Some(ours) = self.get_gap(&g.id)? {
                if settled_rank(g.state) > settled_rank(ours.state) {
                    out.written.push(g.id.clone());
                    write.push(g.clone());
                }
                continue;
            }
            let near = self.retired_row_before(audit, &g.topic, g.partition, g.last_offset)?;
            let clash = near.is_some_and(|(first, last)| overlaps((first, last), span))
                || held.iter().any(|h| overlaps(*h, span));
            if clash {
                out.conflicting.push(g.id.clone());
            } else {
                out.written.push(g.id.clone());
                write.push(g.clone());
            }
        }
        self.import_retired(audit, &write)?;
        Ok(out)
    }

    /// The offsets of the retired row of one partition starting last at or before `at`.
    fn retired_row_before(
        &self,
        audit: &str,
        topic: &str,
        partition: i32,
        at: Offset,
    ) -> Result<Option<(Offset, Offset)>, StoreError> {
        let conn = self.lock();
        let ctx = || format!("find the retired gap of {audit}/{topic}-{partition} before {at}");
        let mut stmt = conn
            .prepare_cached(
                "SELECT first_offset, last_offset FROM gaps
                 WHERE audit = ?1 AND topic = ?2 AND partition = ?3 AND retired = 1
                   AND first_offset <= ?4
                 ORDER BY first_offset DESC LIMIT 1",
            )
            .map_err(self.sq(ctx()))?;
        let row = stmt
            .query_row(params![audit, topic, partition, at], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .optional()
            .map_err(self.sq(ctx()))?;
        Ok(row)
    }

    /// Whether this store holds any retired row of one partition of `audit` starting in
    /// `[lo, hi)` (a chunk's offsets).
    pub fn has_retired_between(
        &self,
        audit: &str,
        topic: &str,
        partition: i32,
        lo: Offset,
        hi: Offset,
    ) -> Result<bool, StoreError> {
        Ok(!self
            .retired_gaps_between(audit, topic, partition, lo, hi, 1)?
            .is_empty())
    }
}
