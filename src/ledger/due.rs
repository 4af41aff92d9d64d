//! The due rule (SPEC "Due rule"), pure.
//!
//! A record at offset `o` is due when the pipeline's group has committed an offset `> o`
//! AND `grace` has passed since the auditor first saw such a commit. Equivalently: `o` is due
//! iff `o < frontier(now)`, where `frontier(now)` is the largest committed offset observed at
//! or before `now - grace`. Observations are kept only as long as they can still matter, so
//! this state is O(grace / poll interval), never O(records).
//!
//! Only where NO pipeline group is configured is a record due once it was first seen more
//! than `grace` ago (the time-only rule). With a configured group, time alone never makes a
//! record due (SPEC "Due rule"): a partition the group has not committed on yet is lag, and
//! the audit holds every verdict back while the group cannot be read or has no commit at all
//! (a misspelt name must never page "data loss"); see [`PipelineCommits::set_time_rule`].

use crate::types::Offset;
use std::collections::VecDeque;

/// Where the due boundary lies for one partition at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frontier {
    /// Records with offset `< 0.0` are due (pipeline rule).
    Offset(Offset),
    /// Records first seen at or before this wall-clock time (unix ms) are due (fallback).
    SeenBefore(i64),
}

/// Commit steps kept per partition for cause attribution: gaps are decided `grace` after
/// the step that passed them, so only recent steps matter.
const MAX_STEPS: usize = 256;

/// One movement of the pipeline group's committed offset, as first seen by the auditor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CommitStep {
    /// Committed offset before.
    pub from: Offset,
    /// Committed offset after.
    pub to: Offset,
    /// When the auditor first saw it (unix ms).
    pub at_ms: i64,
    /// The position moved across a pause of a Doris Routine Load job (an ALTER moved it:
    /// src/routine_load/track.rs); always false for a Kafka group.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub altered: bool,
    /// The last poll before the one that first saw `from` (unix ms): `from` was committed
    /// after it, so a restart that made this step happened between it and `at_ms` (Flink
    /// evidence, src/evidence/flink). `None` when `from` was the first commit seen: then
    /// the time `from` was first seen, a bound that can only narrow the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since_ms: Option<i64>,
    /// The poll that first saw `from` (unix ms): a pipeline run already committing by then
    /// committed `from` and did not jump from it (Flink evidence). `None` in steps persisted
    /// before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_seen_ms: Option<i64>,
}

impl CommitStep {
    /// Whether the step moved backwards (the pipeline is re-reading: duplicates, not loss).
    pub fn is_rewind(&self) -> bool {
        self.to < self.from
    }
}

/// The pipeline group's committed offsets of one partition, as observed over time.
#[derive(Debug, Clone, Default)]
pub struct PipelineCommits {
    /// `(observed_at_ms, committed)`, observed_at ascending, committed strictly increasing
    /// (a rewind is kept out: once the pipeline passed a record it was due to write it).
    observations: VecDeque<(i64, Offset)>,
    /// The latest committed offset seen (may be lower than the max after a rewind).
    latest: Option<Offset>,
    /// Recent movements, oldest first.
    steps: VecDeque<CommitStep>,
    /// When the committed offset last moved (or was first seen), unix ms.
    last_move_ms: Option<i64>,
    /// The time of the last poll ([`Self::observe_moved`]), unix ms.
    last_poll_ms: Option<i64>,
    /// The last poll before the one that first saw `latest` (or that poll itself when it
    /// was the first): `latest` was committed after it ([`CommitStep::since_ms`]).
    latest_since_ms: Option<i64>,
    /// The poll that first saw `latest` ([`CommitStep::from_seen_ms`]).
    latest_seen_ms: Option<i64>,
    /// No pipeline group is configured: records are due by time alone.
    time_rule: bool,
    /// The group answered "no commit" after it had committed: the last commit seen before
    /// they disappeared (the group was deleted, or its offsets expired). Nothing new becomes
    /// due until it commits again: what it did in between is unknown.
    vanished: Option<Offset>,
}

impl PipelineCommits {
    /// Whether records are due by time alone (true only where no pipeline group is
    /// configured). Off, a partition without a commit has nothing due.
    pub fn set_time_rule(&mut self, on: bool) {
        self.time_rule = on;
    }

    /// Records one poll of the pipeline group's committed offset (`None`: no commit; after
    /// commits were seen, they vanished: see [`Self::vanished`]). Returns the step when the
    /// offset moved.
    pub fn observe(&mut self, now_ms: i64, committed: Option<Offset>) -> Option<CommitStep> {
        self.observe_capped(now_ms, committed, None)
    }

    /// [`Self::observe`], with the due frontier capped at `cap` (the log end: a commit beyond
    /// what the log holds cannot have passed records not written yet). Steps, rewinds and
    /// stalls follow the real commit, so causes are never attributed to a capped value.
    pub fn observe_capped(
        &mut self,
        now_ms: i64,
        committed: Option<Offset>,
        cap: Option<Offset>,
    ) -> Option<CommitStep> {
        self.observe_moved(now_ms, committed, cap, false)
    }

    /// [`Self::observe_capped`], saying whether a move now is across a pause of a Routine
    /// Load job (then its step is `altered`).
    pub fn observe_moved(
        &mut self,
        now_ms: i64,
        committed: Option<Offset>,
        cap: Option<Offset>,
        altered: bool,
    ) -> Option<CommitStep> {
        let previous_poll = self.last_poll_ms.replace(now_ms);
        let Some(c) = committed else {
            // Kept, not forgotten: the commits seen before still passed their records, and
            // the step from them to the next commit is a gap's cause (a restart from latest).
            if self.vanished.is_none() {
                self.vanished = self.latest;
            }
            return None;
        };
        self.vanished = None;
        let due_to = cap.map_or(c, |cap| c.min(cap));
        let step = match self.latest {
            Some(prev) if prev != c => Some(CommitStep {
                from: prev,
                to: c,
                at_ms: now_ms,
                altered,
                since_ms: self.latest_since_ms,
                from_seen_ms: self.latest_seen_ms,
            }),
            _ => None,
        };
        if self.latest != Some(c) {
            self.latest_since_ms = Some(previous_poll.unwrap_or(now_ms));
            self.latest_seen_ms = Some(now_ms);
        }
        if self.latest.is_none() || step.is_some() {
            self.last_move_ms = Some(now_ms);
        }
        if let Some(s) = step {
            if self.steps.len() >= MAX_STEPS {
                self.steps.pop_front();
            }
            self.steps.push_back(s);
        }
        self.latest = Some(c);
        if self
            .observations
            .back()
            .is_none_or(|&(_, max)| due_to > max)
        {
            self.observations.push_back((now_ms, due_to));
        }
        step
    }

    /// The last `n` movements seen (rewinds included), oldest first: the gap page's
    /// timeline of the pipeline's commits.
    pub fn recent_steps(&self, n: usize) -> Vec<CommitStep> {
        self.steps
            .iter()
            .skip(self.steps.len().saturating_sub(n))
            .copied()
            .collect()
    }

    /// The most recent forward step that passed over offset `o` (`from <= o < to`).
    pub fn step_over(&self, o: Offset) -> Option<CommitStep> {
        self.steps
            .iter()
            .rev()
            .find(|s| !s.is_rewind() && s.from <= o && o < s.to)
            .copied()
    }

    /// Whether records are due by the time they were seen: no pipeline group is configured
    /// and no commit was observed (the frontier is [`Frontier::SeenBefore`]).
    pub fn uses_time_rule(&self) -> bool {
        self.time_rule && self.observations.is_empty()
    }

    /// Whether any commit was ever observed.
    pub fn has_commits(&self) -> bool {
        self.latest.is_some()
    }

    /// The last commit seen before the group's commits disappeared on this partition
    /// (`None` while it has commits, or never had any).
    pub fn vanished(&self) -> Option<Offset> {
        self.vanished
    }

    /// The committed offset as the group holds it now: `None` once it vanished.
    pub fn current(&self) -> Option<Offset> {
        self.latest.filter(|_| self.vanished.is_none())
    }

    /// When the committed offset last moved (unix ms).
    pub fn last_move_ms(&self) -> Option<i64> {
        self.last_move_ms
    }

    /// The latest committed offset observed, for status and metrics.
    pub fn latest(&self) -> Option<Offset> {
        self.latest
    }

    /// The due frontier at `now_ms`; prunes observations that can no longer matter.
    pub fn frontier(&mut self, now_ms: i64, grace_ms: i64) -> Frontier {
        let cutoff = now_ms.saturating_sub(grace_ms);
        if self.observations.is_empty() {
            return if self.time_rule {
                Frontier::SeenBefore(cutoff)
            } else {
                Frontier::Offset(0)
            };
        }
        // Keep only the newest observation at or before the cutoff plus all later ones.
        while self.observations.len() >= 2 && self.observations[1].0 <= cutoff {
            self.observations.pop_front();
        }
        match self.observations.front() {
            Some(&(at, c)) if at <= cutoff => Frontier::Offset(c),
            // The pipeline committed, but not yet `grace` ago: nothing is due by commit.
            // The time fallback must not apply once a commit exists (that would call lag loss).
            _ => Frontier::Offset(0),
        }
    }

    /// When the frontier (pipeline rule) first passes offset `o`: the earliest
    /// `observed_at + grace` of a commit beyond `o`, or `None` when no observed commit
    /// passes it. At or before `now_ms` means `o` is due already. The time rule is the
    /// ledger's, which knows when its records were seen.
    pub fn due_at_ms(&self, o: Offset, grace_ms: i64) -> Option<i64> {
        // Observations ascend in both time and offset: the first one past `o` is earliest.
        self.observations
            .iter()
            .find(|&&(_, c)| c > o)
            .map(|&(at, _)| at.saturating_add(grace_ms))
    }

    /// Number of retained observations (for tests of boundedness).
    pub fn retained(&self) -> usize {
        self.observations.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step says after which poll the position it left was committed: the window in
    /// which a restart that made it happened (Flink evidence).
    #[test]
    fn a_step_names_the_poll_before_its_start_was_first_seen() {
        let mut p = PipelineCommits::default();
        // The first commit seen: committed at some unknown time before 1 000; its own
        // sighting is the (narrowing) bound.
        assert_eq!(p.observe(1_000, Some(2)), None);
        p.observe(2_000, Some(2));
        let s = p.observe(3_000, Some(4)).expect("moved");
        assert_eq!((s.from, s.to, s.since_ms), (2, 4, Some(1_000)));
        assert_eq!(s.from_seen_ms, Some(1_000), "2 was first seen at 1 000");
        // 4 was committed after the poll at 2 000 (which still saw 2); polls that see it
        // again change nothing, nor does a poll that sees no commit.
        p.observe(4_000, Some(4));
        p.observe(5_000, None);
        let s = p.observe(6_000, Some(9)).expect("moved");
        assert_eq!((s.from, s.to, s.since_ms), (4, 9, Some(2_000)));
        assert_eq!(s.from_seen_ms, Some(3_000), "4 was first seen at 3 000");
    }

    #[test]
    fn a_configured_group_without_commits_makes_nothing_due() {
        let mut p = PipelineCommits::default();
        assert_eq!(p.frontier(10_000, 3_000), Frontier::Offset(0));
        p.observe(10_000, None);
        assert_eq!(p.frontier(1_000_000, 3_000), Frontier::Offset(0));
    }

    #[test]
    fn no_group_falls_back_to_time() {
        let mut p = PipelineCommits::default();
        p.set_time_rule(true);
        assert_eq!(p.frontier(10_000, 3_000), Frontier::SeenBefore(7_000));
        p.observe(10_000, None);
        assert_eq!(p.frontier(10_000, 3_000), Frontier::SeenBefore(7_000));
    }

    #[test]
    fn due_at_is_the_first_commit_past_the_offset_plus_grace() {
        let mut p = PipelineCommits::default();
        assert_eq!(p.due_at_ms(0, 3_000), None);
        p.observe(1_000, Some(4));
        p.observe(5_000, Some(10));
        assert_eq!(p.due_at_ms(0, 3_000), Some(4_000));
        assert_eq!(p.due_at_ms(3, 3_000), Some(4_000));
        // Offset 4 is not passed by a commit of 4 (the next record the pipeline will read).
        assert_eq!(p.due_at_ms(4, 3_000), Some(8_000));
        assert_eq!(p.due_at_ms(10, 3_000), None);
        // It agrees with the frontier at every instant around the boundary.
        for now in [7_999, 8_000, 8_001] {
            let due = matches!(p.frontier(now, 3_000), Frontier::Offset(f) if 4 < f);
            assert_eq!(
                due,
                p.due_at_ms(4, 3_000).is_some_and(|at| at <= now),
                "at {now}"
            );
        }
    }

    #[test]
    fn commit_becomes_effective_after_grace() {
        let mut p = PipelineCommits::default();
        p.observe(1_000, Some(4));
        assert_eq!(p.frontier(1_000, 3_000), Frontier::Offset(0));
        assert_eq!(p.frontier(3_999, 3_000), Frontier::Offset(0));
        assert_eq!(p.frontier(4_000, 3_000), Frontier::Offset(4));
        p.observe(5_000, Some(10));
        assert_eq!(p.frontier(6_000, 3_000), Frontier::Offset(4));
        assert_eq!(p.frontier(8_000, 3_000), Frontier::Offset(10));
    }

    #[test]
    fn rewind_does_not_move_the_frontier_back() {
        let mut p = PipelineCommits::default();
        p.set_time_rule(true);
        p.observe(0, Some(10));
        p.observe(1_000, Some(3));
        assert_eq!(p.latest(), Some(3));
        assert_eq!(p.frontier(10_000, 3_000), Frontier::Offset(10));
    }

    #[test]
    fn steps_are_recorded_and_found() {
        let mut p = PipelineCommits::default();
        assert_eq!(p.observe(0, Some(2)), None, "the first sight is not a step");
        assert_eq!(p.observe(10, Some(2)), None);
        let s = p.observe(20, Some(4)).expect("step");
        assert_eq!((s.from, s.to, s.at_ms), (2, 4, 20));
        assert_eq!(p.step_over(2), Some(s));
        assert_eq!(p.step_over(3), Some(s));
        assert_eq!(p.step_over(4), None);
        assert_eq!(p.step_over(1), None);
        let r = p.observe(30, Some(1)).expect("rewind");
        assert!(r.is_rewind());
        assert_eq!(p.step_over(3), Some(s), "rewinds never pass over records");
        assert_eq!(p.last_move_ms(), Some(30));
    }

    #[test]
    fn a_capped_commit_keeps_its_real_steps() {
        let mut p = PipelineCommits::default();
        p.observe_capped(0, Some(2), Some(2));
        // The pipeline jumps to 1000 while the log holds 5: due up to 5 only, and the step
        // recorded is the real 2 -> 1000, not the cap's movements.
        let s = p.observe_capped(10, Some(1000), Some(5)).expect("step");
        assert_eq!((s.from, s.to), (2, 1000));
        assert_eq!(p.frontier(20, 5), Frontier::Offset(5));
        assert_eq!(
            p.observe_capped(30, Some(1000), Some(8)),
            None,
            "the cap moved, not the commit"
        );
        assert_eq!(p.frontier(40, 5), Frontier::Offset(8));
        assert_eq!(p.latest(), Some(1000));
    }

    #[test]
    fn commits_that_disappear_are_marked_until_the_group_commits_again() {
        let mut p = PipelineCommits::default();
        p.observe(0, None);
        assert_eq!(p.vanished(), None, "never committed is not vanished");
        p.observe(1_000, Some(4));
        assert_eq!(p.observe(2_000, None), None);
        assert_eq!(p.vanished(), Some(4));
        assert_eq!(p.current(), None);
        assert_eq!(p.latest(), Some(4), "the last commit seen is kept");
        p.observe(3_000, None);
        assert_eq!(p.vanished(), Some(4));
        // Restarted from latest: the step from the old commit is the cause of a gap.
        let s = p.observe(4_000, Some(9)).expect("step");
        assert_eq!((s.from, s.to), (4, 9));
        assert_eq!(p.vanished(), None);
        assert_eq!(p.current(), Some(9));
    }

    #[test]
    fn observations_stay_bounded() {
        let mut p = PipelineCommits::default();
        for i in 0..10_000 {
            p.observe(i * 100, Some(i));
            p.frontier(i * 100, 1_000);
        }
        assert!(p.retained() <= 12, "retained {}", p.retained());
    }
}
