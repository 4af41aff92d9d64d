//! The gaps a ledger holds in memory, and which of them changed, stopped being the tail or
//! may be forgotten.

use super::{GapGauges, GapRecord};
use crate::types::Offset;
use std::collections::{BTreeMap, BTreeSet};

/// The gaps by first offset, and their bookkeeping between reports.
#[derive(Debug, Clone, Default)]
pub(super) struct Gaps {
    /// The gaps.
    pub(super) by_first: BTreeMap<Offset, GapRecord>,
    /// Gaps changed since [`super::PartitionLedger::take_dirty_gaps`].
    pub(super) dirty: BTreeSet<Offset>,
    /// First offset of the gap the next missing record extends.
    pub(super) tail: Option<Offset>,
    /// First offset of the dead_lettered gap the next dead-lettered record extends (like
    /// `tail`, and persisted like it).
    pub(super) dead_tail: Option<Offset>,
    /// Gaps that stopped being the tail since [`super::PartitionLedger::take_dirty_gaps`]:
    /// forgotten there if nothing in them is missing.
    pub(super) untailed: Vec<Offset>,
    /// Gaps whose missing runs were given up since
    /// [`super::PartitionLedger::take_dirty_gaps`]: retired there when none is left
    /// (`retired.rs`).
    pub(super) retire_candidates: Vec<Offset>,
    /// Gauges computed at a revision: idle rounds do not walk every gap.
    pub(super) gauges: Option<(u64, GapGauges)>,
}
