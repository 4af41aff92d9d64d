//! Successive reads of one Routine Load job, turned into the pipeline positions the due
//! rule takes and the facts a gap's cause needs (pure: no I/O).
//!
//! What Doris does that decides the rules here (apache/doris `RoutineLoadJob`,
//! `KafkaRoutineLoadJob`, `KafkaProgress`):
//! - `ALTER ROUTINE LOAD ... "kafka_offsets"` is only accepted while the job is PAUSED, and
//!   its new offsets show in `Progress` at once (`OFFSET_END`/`OFFSET_BEGINNING` are turned
//!   into real offsets when the ALTER is made), although nothing is loaded from them until
//!   the job is resumed — and a later ALTER, still paused, can move them back. So while the
//!   job is PAUSED its shown progress is an intent, not a commit: the position the audit
//!   takes is the last one seen while the job consumed. A job first seen PAUSED has no
//!   position until it consumes (its progress may already be such an intent).
//! - A plain pause and resume continues from the stored position, and Routine Load has no
//!   restart that loses its position: its position only ever jumps over records it never
//!   loaded through an ALTER. `PauseTime` is reset to NULL on resume, so a pause, ALTER and
//!   resume between two polls leaves no other trace. Every step of a job is therefore
//!   marked as a Routine Load step (`altered`), which makes a gap starting exactly at a
//!   step's start `skipped_by_alter`; a job re-created under the same name (a new `Id`)
//!   starts anew and its first step is not marked (`skipped_by_restart`).
//! - STOPPED and CANCELLED are final: the progress shown is the last commit, and stays the
//!   position (its records below it stay due; nothing past it ever becomes due).

use super::job::{JobRow, JobState};
use crate::types::Offset;
use std::collections::BTreeMap;

/// One read of the job, for the audit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// Per partition the job's progress names: its committed position (the next offset it
    /// reads; `None`: none known) and whether a move now is the job's own (`false` right
    /// after the job was re-created: see the module docs).
    pub positions: BTreeMap<i32, (Option<Offset>, bool)>,
    /// The job's state when it does not consume (`PAUSED`, `STOPPED`, `CANCELLED`, ...),
    /// with Doris's reason: a stall, never loss.
    pub not_consuming: Option<String>,
    /// The job's Kafka topic, when the answer names it.
    pub topic: Option<String>,
    /// The partitions the job reads (`DataSourceProperties.currentKafkaPartitions`), when
    /// the answer names them.
    pub partitions: Option<Vec<i32>>,
}

/// The memory of past reads.
#[derive(Debug, Default)]
pub struct JobTrack {
    /// The job's `Id` at the last read.
    id: Option<String>,
    /// The position per partition as last taken: the progress of the last read in which the
    /// job consumed (or was final).
    taken: BTreeMap<i32, Option<Offset>>,
}

impl JobTrack {
    /// Takes one read of the job.
    pub fn read(&mut self, row: &JobRow) -> Reading {
        let recreated = self.id.is_some() && self.id != row.id;
        if recreated {
            self.taken.clear();
        }
        self.id = row.id.clone();
        // PAUSED (or a state this build does not know): the shown progress may be an ALTER
        // not yet applied; the position stays what it was.
        let intent_only = !row.state.consumes() && !super::track::is_final(&row.state);
        if !intent_only {
            for (&p, &c) in &row.committed {
                self.taken.insert(p, c);
            }
        }
        let positions = row
            .committed
            .keys()
            .chain(self.taken.keys())
            .map(|&p| (p, (self.taken.get(&p).copied().flatten(), !recreated)))
            .collect();
        let not_consuming = (!row.state.consumes()).then(|| match (&row.state, &row.reason) {
            (s, Some(r)) => format!("{s}: {r}"),
            (s, None) => s.to_string(),
        });
        Reading {
            positions,
            not_consuming,
            topic: row.topic.clone(),
            partitions: row.partitions.clone(),
        }
    }
}

/// Whether a job in this state is final (it will never consume again without being
/// re-created): its progress is its last commit.
pub fn is_final(state: &JobState) -> bool {
    matches!(state, JobState::Stopped | JobState::Cancelled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: &str, state: JobState, positions: &[(i32, Option<Offset>)]) -> JobRow {
        JobRow {
            id: Some(id.into()),
            state,
            committed: positions.iter().copied().collect(),
            reason: None,
            topic: Some("dns".into()),
            partitions: None,
        }
    }

    fn at(r: &Reading, p: i32) -> (Option<Offset>, bool) {
        r.positions[&p]
    }

    #[test]
    fn a_running_jobs_progress_is_its_position_and_its_own_step() {
        let mut t = JobTrack::default();
        for o in [10, 20, 35] {
            let r = t.read(&row("1", JobState::Running, &[(0, Some(o))]));
            assert_eq!(at(&r, 0), (Some(o), true));
            assert_eq!(r.not_consuming, None);
        }
    }

    #[test]
    fn an_alter_while_paused_is_an_intent_until_the_job_consumes() {
        let mut t = JobTrack::default();
        t.read(&row("1", JobState::Running, &[(0, Some(100))]));
        let r = t.read(&row("1", JobState::Paused, &[(0, Some(100))]));
        assert_eq!(r.not_consuming.as_deref(), Some("PAUSED"));
        // ALTER ... "kafka_offsets" = "OFFSET_END": Doris shows the real end offset at once.
        let r = t.read(&row("1", JobState::Paused, &[(0, Some(500))]));
        assert_eq!(at(&r, 0).0, Some(100), "an intent is not a commit");
        // ALTERed back before resuming: nothing was ever skipped.
        t.read(&row("1", JobState::Paused, &[(0, Some(100))]));
        let r = t.read(&row("1", JobState::NeedSchedule, &[(0, Some(100))]));
        assert_eq!(at(&r, 0), (Some(100), true));
        // Or resumed at the ALTERed offset: now it is the position.
        t.read(&row("1", JobState::Paused, &[(0, Some(500))]));
        let r = t.read(&row("1", JobState::Running, &[(0, Some(500))]));
        assert_eq!(at(&r, 0), (Some(500), true));
    }

    #[test]
    fn a_job_first_seen_paused_has_no_position_until_it_consumes() {
        let mut t = JobTrack::default();
        let r = t.read(&row("1", JobState::Paused, &[(0, Some(700))]));
        assert_eq!(at(&r, 0).0, None);
        let r = t.read(&row("1", JobState::Running, &[(0, Some(700))]));
        assert_eq!(at(&r, 0).0, Some(700));
    }

    #[test]
    fn a_final_jobs_progress_stays_its_position_and_says_why() {
        let mut t = JobTrack::default();
        t.read(&row("1", JobState::Running, &[(0, Some(5))]));
        let mut stopped = row("1", JobState::Cancelled, &[(0, Some(9))]);
        stopped.reason = Some("too many filtered rows".into());
        let r = t.read(&stopped);
        assert_eq!(at(&r, 0).0, Some(9));
        assert_eq!(
            r.not_consuming.as_deref(),
            Some("CANCELLED: too many filtered rows")
        );
        assert!(is_final(&stopped.state) && !is_final(&JobState::Paused));
    }

    #[test]
    fn a_recreated_job_starts_anew_and_its_first_step_is_not_its_own() {
        let mut t = JobTrack::default();
        t.read(&row("1", JobState::Running, &[(0, Some(100))]));
        let r = t.read(&row("2", JobState::Running, &[(0, Some(900))]));
        assert_eq!(at(&r, 0), (Some(900), false));
        let r = t.read(&row("2", JobState::Running, &[(0, Some(950))]));
        assert_eq!(at(&r, 0), (Some(950), true));
    }

    #[test]
    fn a_partition_the_progress_stops_naming_keeps_its_position() {
        let mut t = JobTrack::default();
        t.read(&row(
            "1",
            JobState::Running,
            &[(0, Some(10)), (1, Some(20))],
        ));
        let r = t.read(&row("1", JobState::Running, &[(0, Some(11))]));
        assert_eq!(at(&r, 1).0, Some(20));
    }
}
