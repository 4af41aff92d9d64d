//! What the pipeline itself tells of a gap's cause, read from the pipeline's own interfaces
//! (SPEC "Pipeline position and evidence"): Flink's restarts and restores, Kafka Connect's
//! task changes, Doris Stream Loads that filtered rows. Evidence only: it never holds,
//! makes or changes a verdict. Each source is read by the one poll loop ([`poll`]) through
//! the one bounded HTTP client ([`http`]) or the Doris FE's MySQL protocol.

pub mod connect;
pub mod flink;
pub mod http;
pub mod poll;
pub mod stream_load;
