//! Doris Stream Load evidence (issue 37): with `[audits.pipeline] doris_fe_url` and
//! `doris_label_prefix`, the auditor reads the pipeline's Stream Loads from the FE
//! (`SHOW STREAM LOAD`) on a timer and keeps those that left rows out: rows Doris filtered
//! (it could not convert them; `max_filter_ratio` let the load succeed without them) or
//! left out by the load's `WHERE`. A `dropped_in_flight` gap then names the loads of its
//! commit step's window: "Doris Stream Load doris_sink_example_db_dns_logs_0_12 (checkpoint
//! 12, subtask 0) filtered 3 of 1000 rows ... at T (error log: URL)". flink-doris-connector's
//! two-phase-commit labels name the Flink subtask and checkpoint.
//!
//! Doris counts the rows a load dropped; it does not say which records they were. So this
//! is evidence, not a verdict: the records stay missing (the sink does not hold them), and
//! a gap names the loads that may have dropped them. The FE lists a load up to
//! `fetch_stream_load_record_interval_second` after it finished (its records are pulled
//! from the BEs), so a gap's words wait `stream_load_record_delay` past its step.
//!
//! Evidence only: it never holds, makes or changes a verdict. An FE that cannot be read
//! leaves gaps as they were before this module existed, with one warning (and its state in
//! `/api/status`).
//!
//! `record` reads the statement's rows and labels, `history` keeps the loads and explains
//! a gap (both pure), `poller` talks to the FE (src/doris_fe.rs).

pub mod history;
pub mod poller;
pub mod record;

pub use history::{DroppedLoad, FeClock, History};
pub use poller::{SharedView, SourceError, StreamLoadSource, StreamLoadView};
pub use record::LoadRecord;
