//! The fault-injection suite (issue 8) on the SHARED services: each scenario injects faults
//! against the real broker and MariaDB, ends with "expected gap set == reported gap set",
//! and records its figures ([`crate::figures`]) for docs/RELIABILITY.md
//! (`scripts/reliability.sh`). Faults that need a broker to go away run against a private
//! tansu in tests/faults_private.rs; sink faults go through a [`proxy::Proxy`] in front of
//! the shared MariaDB, so no other test ever sees them.

mod backpressure;
mod deleted_range;
mod giveup_soak;
mod hung_sink;
mod keys_total_loss;
mod kill9;
mod lag;
pub mod proxy;
mod shutdown;
mod sink;
mod soak;
mod stalled_partition;
mod systematic_loss;
mod tools;

pub use tools::*;
