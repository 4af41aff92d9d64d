//! What the store does not hold yet: the changes the next write carries.

use super::GapRecord;
use crate::types::Offset;
use std::collections::BTreeSet;

/// The ledger's changes since [`super::PartitionLedger::stored`].
#[derive(Debug, Clone)]
pub(super) struct Unstored {
    /// Bumped whenever [`super::PartitionLedger::snapshot`] would change, so callers
    /// persist only changes.
    pub(super) revision: u64,
    /// Missing runs (by first offset) changed since the last write: the next write carries
    /// only these ([`super::PartitionLedger::delta`]), so a round's write does not grow
    /// with the number of gaps.
    pub(super) missing: BTreeSet<Offset>,
    /// Gaps (by first offset) changed since the last write.
    pub(super) gaps: BTreeSet<Offset>,
    /// A fresh ledger: whatever the store holds for the partition is stale, so the first
    /// write replaces it whole.
    pub(super) replace: bool,
    /// Gaps retired since the last write (see
    /// [`super::PartitionLedger::retired_unstored`]).
    pub(super) retired: Vec<GapRecord>,
    /// Gaps folded since the last write (see [`super::PartitionLedger::folded_unstored`]).
    pub(super) folded: Vec<GapRecord>,
}

impl Default for Unstored {
    fn default() -> Self {
        Self {
            revision: 0,
            missing: BTreeSet::new(),
            gaps: BTreeSet::new(),
            replace: true,
            retired: Vec::new(),
            folded: Vec::new(),
        }
    }
}

impl Unstored {
    /// Something [`super::PartitionLedger::snapshot`] shows changed.
    pub(super) fn changed(&mut self) {
        self.revision += 1;
    }

    /// Gap `first` changed: the next write carries it.
    pub(super) fn gap(&mut self, first: Offset) {
        self.gaps.insert(first);
    }

    /// Missing run `first` changed: the next write carries it.
    pub(super) fn missing_run(&mut self, first: Offset) {
        self.missing.insert(first);
    }

    /// The store holds every change: the next write carries only what changes from now on,
    /// and never replaces the partition's rows whole.
    pub(super) fn all_stored(&mut self) {
        self.missing.clear();
        self.gaps.clear();
        self.replace = false;
        self.retired.clear();
        self.folded.clear();
    }
}
