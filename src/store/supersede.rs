//! What a store resuming a partition further than a format-3 handover state needs of the
//! side topic's chunks (`retired_flow`'s supersede, review of format 3 F2/F3 and N1-N6): the
//! store's own verdicts stand and replace the chunks, so only which chunks it holds rows in
//! and an operator's acknowledgement of a gap it holds under the same id are asked here.

use super::*;

impl Store {
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

    /// Takes another instance's acknowledgement of gap `id` (with its `reason`) when this
    /// store holds the gap, not acknowledged nor resolved (`late`, `repaired`): as
    /// [`Store::ack`], logged for the daemon's next round. An acknowledgement is an
    /// operator's act on that gap and never goes back, whoever's verdicts stand on its
    /// offsets. `Ok(false)` when nothing changed.
    pub fn take_acknowledgement(&self, id: &str, reason: &str) -> Result<bool, StoreError> {
        match self.get_gap(id)? {
            Some(g)
                if !matches!(
                    g.state,
                    GapState::Acknowledged | GapState::Late | GapState::Repaired
                ) =>
            {
                self.ack(id, reason)
            }
            _ => Ok(false),
        }
    }
}
