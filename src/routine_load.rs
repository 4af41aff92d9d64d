//! Doris Routine Load as the pipeline's position (SPEC "Pipeline position and evidence"):
//! Routine Load keeps its progress inside Doris, not in a Kafka group, so with
//! `[audits.pipeline] kind = "doris_routine_load"` the due rule takes the job's committed
//! offsets from `SHOW ROUTINE LOAD` on the FE. A job that does not consume (PAUSED,
//! STOPPED, CANCELLED) is a stall with Doris's reason, never loss; a position that moved
//! forward across a pause of the job (an `ALTER ROUTINE LOAD ... kafka_offsets`) is the
//! cause of the gap it skipped (`skipped_by_alter`).
//!
//! `job` reads the statement's answer, `track` turns successive answers into positions and
//! pauses (both pure), `reader` talks to the FE.

pub mod job;
pub mod reader;
pub mod track;

pub use job::{JobError, JobRow, JobState};
pub use reader::{JobReader, ReadError};
pub use track::{JobTrack, Reading};
