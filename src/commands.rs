//! The commands that give an answer once and exit, beside the daemon (`gap-auditor run`,
//! [`crate::app`]): each reuses the daemon's own steps (the ledger, the due rule, the
//! checker, the store), never a copy of them (SPEC guarantee 9).
//!
//! - [`check`]: audit a closed range of the past once ([`crate::closed_range`]);
//! - [`replay`]: re-read lost offsets from Kafka and write them again, to a topic or the
//!   sink, marked and logged in the store;
//! - [`wait`]: the batch job's sensor on `/api/completeness`;
//! - [`demo`]: the seed incident end to end in one process, nothing external needed.

pub mod check;
pub mod demo;
pub mod replay;
pub mod wait;
