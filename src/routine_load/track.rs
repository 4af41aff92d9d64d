//! Successive reads of one Routine Load job, turned into the pipeline positions the due
//! rule takes and the facts a gap's cause needs (pure: no I/O).
//!
//! The one fact beyond the positions: whether a partition's position moved *across a pause*
//! of the job. `ALTER ROUTINE LOAD ... FROM KAFKA ("kafka_partitions" = ...,
//! "kafka_offsets" = ...)` is only accepted while the job is PAUSED, and a plain pause and
//! resume continues from the stored position. So a forward step over records the sink
//! never got, seen across a pause, is an ALTER that skipped them (`skipped_by_alter`),
//! whether or not a poll happened to see the job PAUSED: a pause is also known from a
//! changed `PauseTime`, or from a position shown as `OFFSET_END`/`OFFSET_BEGINNING` again
//! (what an ALTER to those leaves until the next task commits).

use super::job::{JobRow, JobState};
use crate::types::Offset;
use std::collections::{BTreeMap, BTreeSet};

/// One read of the job, for the audit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// Per partition the job's progress names: its committed position (the next offset it
    /// reads; `None`: nothing committed) and whether the position moved across a pause of
    /// the job since it last moved (an ALTER: see the module docs).
    pub positions: BTreeMap<i32, (Option<Offset>, bool)>,
    /// The job's state when it does not consume (`PAUSED`, `STOPPED`, `CANCELLED`, ...),
    /// with Doris's reason: a stall, never loss.
    pub not_consuming: Option<String>,
    /// The job's Kafka topic, when the answer names it.
    pub topic: Option<String>,
}

/// The memory of past reads that a pause needs.
#[derive(Debug, Default)]
pub struct JobTrack {
    /// The last position read per partition.
    last: BTreeMap<i32, Option<Offset>>,
    /// Partitions that saw a pause since their position last moved to a commit.
    across_pause: BTreeSet<i32>,
    /// `PauseTime` at the last read (`None` before the first).
    last_pause_time: Option<Option<String>>,
}

impl JobTrack {
    /// Takes one read of the job.
    pub fn read(&mut self, row: &JobRow) -> Reading {
        let pause_changed = self
            .last_pause_time
            .as_ref()
            .is_some_and(|last| *last != row.pause_time);
        let paused = !row.state.consumes() || pause_changed;
        let mut positions = BTreeMap::new();
        for (&p, &now) in &row.committed {
            let before = self.last.get(&p).copied();
            // A commit shown as "nothing committed" after one was seen: reset by an ALTER
            // (or the job re-created): also a pause's mark.
            let reset = now.is_none() && matches!(before, Some(Some(_)));
            if paused || reset {
                self.across_pause.insert(p);
            }
            let moved = before.is_some_and(|b| b != now);
            let altered = moved && self.across_pause.contains(&p);
            // Cleared only by a move to a commit while the job consumes: after an ALTER to
            // OFFSET_END the position reads "nothing committed" until the first task
            // commits, and that later step is the one that skipped the records.
            if moved && now.is_some() && row.state.consumes() {
                self.across_pause.remove(&p);
            }
            positions.insert(p, (now, altered));
            self.last.insert(p, now);
        }
        self.last_pause_time = Some(row.pause_time.clone());
        let not_consuming = (!row.state.consumes()).then(|| match (&row.state, &row.reason) {
            (s, Some(r)) => format!("{s}: {r}"),
            (s, None) => s.to_string(),
        });
        Reading {
            positions,
            not_consuming,
            topic: row.topic.clone(),
        }
    }
}

/// Whether a job in this state is final (it will never consume again without being
/// re-created): shown as such, still a stall and not loss.
pub fn is_final(state: &JobState) -> bool {
    matches!(state, JobState::Stopped | JobState::Cancelled)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(state: JobState, pause: Option<&str>, positions: &[(i32, Option<Offset>)]) -> JobRow {
        JobRow {
            state,
            committed: positions.iter().copied().collect(),
            pause_time: pause.map(str::to_owned),
            reason: None,
            topic: Some("dns".into()),
        }
    }

    fn altered(r: &Reading, p: i32) -> bool {
        r.positions[&p].1
    }

    #[test]
    fn consumption_while_running_is_never_an_alter() {
        let mut t = JobTrack::default();
        for (i, o) in [(0, 10), (1, 20), (2, 35)] {
            let r = t.read(&row(JobState::Running, None, &[(0, Some(o))]));
            assert!(!altered(&r, 0), "read {i}");
            assert_eq!(r.not_consuming, None);
        }
    }

    #[test]
    fn an_alter_to_offset_end_seen_paused_marks_the_next_step() {
        let mut t = JobTrack::default();
        t.read(&row(
            JobState::Running,
            None,
            &[(0, Some(100)), (1, Some(7))],
        ));
        let r = t.read(&row(
            JobState::Paused,
            Some("t1"),
            &[(0, Some(100)), (1, Some(7))],
        ));
        assert_eq!(r.not_consuming.as_deref(), Some("PAUSED"));
        // ALTER ... "kafka_offsets" = "OFFSET_END" on partition 0 only.
        let r = t.read(&row(
            JobState::Paused,
            Some("t1"),
            &[(0, None), (1, Some(7))],
        ));
        assert_eq!(r.positions[&0].0, None);
        // RESUME: the first task has not committed yet.
        t.read(&row(
            JobState::NeedSchedule,
            Some("t1"),
            &[(0, None), (1, Some(7))],
        ));
        let r = t.read(&row(
            JobState::Running,
            Some("t1"),
            &[(0, Some(150)), (1, Some(9))],
        ));
        assert!(altered(&r, 0), "the jump from 100 to 150 is the ALTER's");
        // Partition 1 also moved across the pause: its step starts where it stood, so a
        // gap it passed could only start later (dropped in flight); the flag is the fact.
        assert!(altered(&r, 1));
        // Later steps are consumption again.
        let r = t.read(&row(
            JobState::Running,
            Some("t1"),
            &[(0, Some(160)), (1, Some(12))],
        ));
        assert!(!altered(&r, 0) && !altered(&r, 1));
    }

    #[test]
    fn a_pause_and_alter_between_two_polls_is_known_from_the_pause_time() {
        let mut t = JobTrack::default();
        t.read(&row(JobState::Running, Some("t0"), &[(0, Some(100))]));
        // PAUSE, ALTER to offset 500, RESUME and a first commit, all between two polls.
        let r = t.read(&row(JobState::Running, Some("t1"), &[(0, Some(520))]));
        assert!(altered(&r, 0));
        // No pause since: consumption.
        let r = t.read(&row(JobState::Running, Some("t1"), &[(0, Some(600))]));
        assert!(!altered(&r, 0));
    }

    #[test]
    fn the_first_read_is_no_pause_and_a_stop_says_why() {
        let mut t = JobTrack::default();
        let r = t.read(&row(JobState::Running, Some("long ago"), &[(0, Some(5))]));
        assert!(!altered(&r, 0));
        let r = t.read(&row(JobState::Running, Some("long ago"), &[(0, Some(9))]));
        assert!(!altered(&r, 0), "an unchanged PauseTime is no new pause");
        let mut stopped = row(JobState::Cancelled, Some("long ago"), &[(0, Some(9))]);
        stopped.reason = Some("too many filtered rows".into());
        let r = t.read(&stopped);
        assert_eq!(
            r.not_consuming.as_deref(),
            Some("CANCELLED: too many filtered rows")
        );
        assert!(is_final(&stopped.state) && !is_final(&JobState::Paused));
    }

    #[test]
    fn a_reset_to_nothing_committed_while_running_still_marks_the_next_step() {
        // A job dropped and re-created under the same name between two polls: it shows
        // nothing committed, then its first commit far ahead.
        let mut t = JobTrack::default();
        t.read(&row(JobState::Running, None, &[(0, Some(100))]));
        t.read(&row(JobState::Running, None, &[(0, None)]));
        let r = t.read(&row(JobState::Running, None, &[(0, Some(900))]));
        assert!(altered(&r, 0));
    }
}
