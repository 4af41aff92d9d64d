//! Everything that talks to Kafka: the tailing consumer of the auditor's own group, the
//! read-only view of the pipeline group's commits, offset lookups, and the bounded range
//! read of `check` and `replay`.
//!
//! librdkafka's callbacks never do work: the rebalance callback hands the assignment to the
//! audit task over the event channel and waits for its answer (start offsets to assign,
//! settled offsets to commit on revoke), the statistics callback only stores watermarks.

pub mod client;
pub mod dead_letters;
pub mod lookup;
pub mod range;
pub mod retention;
pub mod tail;
pub mod topic_id;

pub use lookup::{Lookup, PipelineReader};
pub use tail::{Command, LastStable, Tagged, TailEvent, TailHandle, Watermarks};
