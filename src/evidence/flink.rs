//! Flink's restore evidence (SPEC "Pipeline position and evidence"): with
//! `[audits.pipeline] flink_rest_url` and `flink_job`, the auditor reads the JobManager's
//! REST API on a timer and keeps what it learnt of the job's runs: when each started, which
//! checkpoint it restored (or none), its last completed checkpoint. A gap whose cause is
//! `skipped_by_restart` then says *why* the pipeline's commit jumped: "restarted at T without
//! restoring a checkpoint (latest-offset)", or "restarted at T, restored from chk-N (path)".
//!
//! Evidence only: it never holds, makes or changes a verdict. A source that cannot be read
//! leaves gaps as they were before this module existed, with one warning (and its state in
//! `/api/status`).
//!
//! `rest` reads Flink's documented JSON, `history` keeps the runs and explains a commit jump
//! (both pure), `poller` talks to the JobManager.

pub mod history;
pub mod poller;
pub mod rest;

pub use history::{History, JobRun, RestartEvidence, Restore};
pub use poller::{FlinkSource, FlinkView, SharedView, SourceError, SourceState};
pub use rest::{CheckpointStats, CompletedCheckpoint, JobOverview, RestError, RestoredCheckpoint};
