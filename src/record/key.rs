//! The match key lives in [`crate::types`], the shared vocabulary; `record::Key` stays its
//! path for the decoder and its callers.

pub use crate::types::Key;
