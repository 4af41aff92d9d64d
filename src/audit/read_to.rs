//! Where the consumer has read each partition to (issue 35, SPEC "Completeness"): the
//! tailing thread's positions ([`crate::kafka::TailEvent::ReadTo`]) move the ledgers past
//! offsets no record was delivered at — transaction markers, aborted batches under
//! read_committed — so a quiet transactional partition is read to its log end, counts as
//! caught up, and settles (and is committed, and resumes after a restart) past its last
//! marker, like any other partition.

use super::Part;
use crate::types::{Offset, TopicPartition};
use std::collections::BTreeMap;

impl Part {
    /// The consumer has read this partition up to `position`: every record below it has
    /// come through the event channel before this.
    ///
    /// Dropped while a re-positioning of the partition is not yet served: the position may
    /// be the stopped fetcher's, and the thread reports the new fetcher's once proven.
    pub(super) fn read_to(&mut self, position: Offset) {
        if self.repositioning.is_some() {
            return;
        }
        self.read_to = self.read_to.max(Some(position));
        self.catch_up();
    }

    /// Moves the ledger to the last position reported, unless records wait for their
    /// schema: those are below the position but not in the ledger yet, and a ledger moved
    /// past them would take them for holes. Called again once they are released.
    pub(super) fn catch_up(&mut self) {
        if let Some(p) = self.read_to
            && self.held.is_empty()
        {
            self.ledger.read_to(p);
        }
    }
}

/// The tailing thread has served the first `served` re-positionings: the positions it
/// reports from now on are of the restarted fetchers (or proven to be, see the thread's
/// `read_to.rs`).
pub(super) fn repositioned(parts: &mut BTreeMap<TopicPartition, Part>, served: u64) {
    for part in parts.values_mut() {
        if part.repositioning.is_some_and(|n| n <= served) {
            part.repositioning = None;
        }
    }
}

/// Applies the tailing thread's positions; positions of partitions no longer assigned
/// (revoked after they were read) are dropped.
pub(super) fn apply(
    parts: &mut BTreeMap<TopicPartition, Part>,
    positions: Vec<(TopicPartition, Offset)>,
) {
    for (tp, position) in positions {
        if let Some(part) = parts.get_mut(&tp) {
            part.read_to(position);
        }
    }
}
