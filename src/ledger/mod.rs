//! The offset ledger: pure bookkeeping of every consumed offset, the due rule, gap merging
//! and the settled watermark. No Kafka, no sink, no clock: everything it needs is passed in,
//! so all of it is unit- and property-tested without a broker.

pub mod due;
pub mod keys;
pub mod partition;
pub mod runs;
pub mod sharded;

#[cfg(test)]
mod tests;

pub use due::{CommitStep, Frontier, PipelineCommits};
pub use keys::{ClaimsWrite, KeyBook, LOG_REWRITE_SLACK};
pub use partition::{
    Applied, DeletedRest, Delta, GapGauges, GapRecord, MissingRun, NextPiece, Observed,
    PartitionLedger, Probe, RecheckBudget, RetiredGaps, RetiredOp, RetiredWork, Segment, Snapshot,
    Verdict,
};
pub use runs::OffsetRun;
