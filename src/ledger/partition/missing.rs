//! The missing runs: every missing record, as runs each inside exactly one gap.

use super::MissingRun;
use crate::types::Offset;
use std::collections::BTreeMap;

/// The missing runs by first offset, and what they hold.
#[derive(Debug, Clone, Default)]
pub(super) struct MissingRuns {
    /// The runs.
    pub(super) runs: BTreeMap<Offset, MissingRun>,
    /// Records missing in the gaps held in memory.
    pub(super) count: u64,
    /// Keys held by the runs.
    pub(super) keys: u64,
}
