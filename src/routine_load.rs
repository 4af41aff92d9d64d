//! Doris Routine Load as the pipeline's position (SPEC "Pipeline position and evidence"):
//! Routine Load keeps its progress inside Doris, not in a Kafka group, so with
//! `[audits.pipeline] kind = "doris_routine_load"` the due rule takes the job's committed
//! offsets from `SHOW ALL ROUTINE LOAD` on the FE. A job that does not consume (PAUSED,
//! STOPPED, CANCELLED) is a stall with Doris's reason, never loss; while PAUSED its shown
//! progress is an intent, not a position; a jump of its position over records it never
//! loaded is an `ALTER ROUTINE LOAD ... kafka_offsets` (`skipped_by_alter`).
//!
//! `job` reads the statement's answer, `track` turns successive answers into positions and
//! pauses (both pure), `reader` talks to the FE.

pub mod job;
pub mod reader;
pub mod track;

pub use job::{JobError, JobRow, JobState};
pub use reader::{JobReader, ReadError};
pub use track::{JobTrack, Reading};
