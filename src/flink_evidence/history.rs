//! The runs of one Flink job as successive polls saw them, and the explanation of a commit
//! jump from them (pure: no I/O, times passed in).
//!
//! What Flink does that decides the rules here:
//! - A job resubmitted after a crash (the seed's kill -9 and restart) is a new run: a new
//!   `jid` and a new `start-time`, the old run (if the JobManager survived) archived as
//!   FAILED or CANCELED under the same name. A run either restored a checkpoint or savepoint
//!   when it started (`latest.restored`, `execution.savepoint.path`) or started from its
//!   sources' startup mode: for the Kafka source without a restore that is the configured
//!   `scan.startup.mode`, and a jump of the committed offset over records never written is
//!   the signature of `latest-offset`.
//! - A job restores before it runs (its scheduler restores state while creating the
//!   execution graph, before the job is RUNNING) and before its first checkpoint. So a run
//!   seen RUNNING, or with a completed checkpoint, and no `latest.restored` restored
//!   nothing; before that, whether it will is not known yet, and nothing is claimed.
//! - Flink's times are the JobManager's wall clock; the auditor's commit steps are its own.
//!   A small slack ([`CLOCK_SLACK_MS`]) absorbs clock skew between the two; a restart
//!   outside the window (widened by it) is not named, so a narrow window can only lose
//!   evidence, never name a run that did not start in it.

use super::rest::{CheckpointStats, CompletedCheckpoint, JobOverview, RestoredCheckpoint};
use chrono::{TimeZone, Utc};
use serde::Serialize;

/// Runs of the job kept (newest kept): a restart loop must not grow memory.
const MAX_RUNS: usize = 32;

/// Clock skew tolerated between the JobManager and the auditor, ms.
pub const CLOCK_SLACK_MS: i64 = 2_000;

/// What a run restored when it started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Restore {
    /// Not known yet: the run was not seen RUNNING or with a completed checkpoint, and named
    /// no restored checkpoint.
    Unknown,
    /// Nothing: the run started from its sources' startup mode.
    None,
    /// This checkpoint or savepoint.
    Checkpoint(RestoredCheckpoint),
}

/// One run of the job (one `jid`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobRun {
    /// The run's job id.
    pub jid: String,
    /// Its status as the JobManager last listed it (`RUNNING`, `FAILED`, ...).
    pub state: String,
    /// The last overview listed it. A run the JobManager stopped listing (it died with the
    /// run, as a per-job cluster or a MiniCluster does, or it forgot an old job) keeps the
    /// state it was last listed in, and is not asked about again.
    pub listed: bool,
    /// When it started (the JobManager's unix ms).
    pub started_ms: i64,
    /// When it ended, once it did.
    pub ended_ms: Option<i64>,
    /// What it restored when it started.
    pub restore: Restore,
    /// Its last completed checkpoint, as last seen.
    pub last_completed: Option<CompletedCheckpoint>,
}

impl JobRun {
    /// Whether the run may still change what it says: listed, not globally terminal.
    pub fn is_live(&self) -> bool {
        self.listed && !matches!(self.state.as_str(), "FAILED" | "CANCELED" | "FINISHED")
    }

    /// The run in words for `/api/status`: "started at T, restored from chk-7 (path)".
    pub fn summary(&self) -> String {
        format!(
            "{} {}",
            started_words(self.started_ms),
            restore_words(&self.restore)
        )
    }
}

/// A restart found in a commit jump's window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartEvidence {
    /// The run that started in the window (the one that made the jump).
    pub run: JobRun,
    /// The last completed checkpoint of the run before it, when it was seen: what a correct
    /// restart would have restored.
    pub previous_checkpoint: Option<CompletedCheckpoint>,
}

impl RestartEvidence {
    /// The evidence in words, as a gap carries it: `restarted at 2026-12-06T02:14:00Z
    /// without restoring a checkpoint (latest-offset)`, or `restarted at T, restored from
    /// chk-7 (file:/.../chk-7)`.
    pub fn text(&self) -> String {
        let restarted = format!("restarted at {}", rfc3339(self.run.started_ms));
        match &self.run.restore {
            Restore::None => {
                format!("{restarted} without restoring a checkpoint (latest-offset)")
            }
            Restore::Checkpoint(c) => format!("{restarted}, restored from {}", checkpoint_words(c)),
            Restore::Unknown => {
                format!("{restarted} (whether it restored a checkpoint was not seen)")
            }
        }
    }
}

/// The runs of one job, by start time.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Oldest first.
    runs: Vec<JobRun>,
}

impl History {
    /// Takes one `/jobs/overview`: every run named `job` is added or updated. Returns the
    /// ids of the runs whose checkpoints are worth reading now: those still live, and those
    /// whose restore is not known yet.
    pub fn observe_jobs(&mut self, jobs: &[JobOverview], job: &str) -> Vec<String> {
        for r in &mut self.runs {
            r.listed = false;
        }
        // A job not yet initialized shows no start time: nothing to place it by.
        for j in jobs.iter().filter(|j| j.name == job && j.start_time > 0) {
            let ended = (j.end_time > 0).then_some(j.end_time);
            match self.runs.iter_mut().find(|r| r.jid == j.jid) {
                Some(r) => {
                    r.state = j.state.clone();
                    r.ended_ms = ended;
                    r.listed = true;
                }
                None => self.runs.push(JobRun {
                    jid: j.jid.clone(),
                    state: j.state.clone(),
                    listed: true,
                    started_ms: j.start_time,
                    ended_ms: ended,
                    restore: Restore::Unknown,
                    last_completed: None,
                }),
            }
        }
        self.runs
            .sort_by(|a, b| (a.started_ms, &a.jid).cmp(&(b.started_ms, &b.jid)));
        if self.runs.len() > MAX_RUNS {
            self.runs.drain(..self.runs.len() - MAX_RUNS);
        }
        self.runs
            .iter()
            .filter(|r| r.listed && (r.is_live() || r.restore == Restore::Unknown))
            .map(|r| r.jid.clone())
            .collect()
    }

    /// Takes one `/jobs/{jid}/checkpoints` of a run already observed.
    pub fn observe_checkpoints(&mut self, jid: &str, stats: &CheckpointStats) {
        let Some(r) = self.runs.iter_mut().find(|r| r.jid == jid) else {
            return;
        };
        if stats.latest_completed.is_some() {
            r.last_completed = stats.latest_completed.clone();
        }
        // Decided once: a later failover that restores another checkpoint does not change
        // what the run did when it started.
        if r.restore == Restore::Unknown {
            r.restore = match &stats.restored {
                Some(c) => Restore::Checkpoint(c.clone()),
                // Restores happen before RUNNING and before the first checkpoint.
                None if stats.completed_count > 0 || r.state == "RUNNING" => Restore::None,
                None => Restore::Unknown,
            };
        }
    }

    /// The run that started last.
    pub fn current(&self) -> Option<&JobRun> {
        self.runs.last()
    }

    /// The run that started before the current one: after a crash, its last completed
    /// checkpoint is the one a correct restart restores.
    pub fn previous(&self) -> Option<&JobRun> {
        self.runs
            .len()
            .checked_sub(2)
            .and_then(|i| self.runs.get(i))
    }

    /// Every run kept, oldest first.
    pub fn runs(&self) -> &[JobRun] {
        &self.runs
    }

    /// The restart behind a commit jump: the last run that started after `after_ms` (when
    /// the position the jump left was committed, at the latest) and no later than `by_ms`
    /// (when the jump was seen), within [`CLOCK_SLACK_MS`]. `None`: no run started in the
    /// window (or none was seen).
    pub fn explain(&self, after_ms: i64, by_ms: i64) -> Option<RestartEvidence> {
        let lo = after_ms.saturating_sub(CLOCK_SLACK_MS);
        let hi = by_ms.saturating_add(CLOCK_SLACK_MS);
        let i = self
            .runs
            .iter()
            .rposition(|r| r.started_ms > lo && r.started_ms <= hi)?;
        let previous_checkpoint = self.runs[..i]
            .iter()
            .rev()
            .find_map(|r| r.last_completed.clone());
        Some(RestartEvidence {
            run: self.runs[i].clone(),
            previous_checkpoint,
        })
    }
}

/// Unix ms as `2026-12-06T02:14:00Z` (the JobManager's clock; whole seconds suffice).
pub fn rfc3339(ms: i64) -> String {
    Utc.timestamp_millis_opt(ms).single().map_or_else(
        || format!("{ms} ms"),
        |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    )
}

fn started_words(ms: i64) -> String {
    format!("started at {}", rfc3339(ms))
}

fn restore_words(r: &Restore) -> String {
    match r {
        Restore::None => "without restoring a checkpoint".to_owned(),
        Restore::Checkpoint(c) => format!("restored from {}", checkpoint_words(c)),
        Restore::Unknown => "(whether it restored a checkpoint is not known yet)".to_owned(),
    }
}

/// `chk-7 (file:/.../chk-7)` or `savepoint 7 (s3://...)`. A retained checkpoint restored
/// by its path (`execution.state-recovery.path`, the usual restart after a crash) is
/// reported by Flink 2.0 with `is_savepoint: true`: its directory (`chk-<id>`) says what
/// it is.
pub fn checkpoint_words(c: &RestoredCheckpoint) -> String {
    let checkpoint_dir = format!("chk-{}", c.id);
    let in_checkpoint_dir = c
        .external_path
        .as_deref()
        .is_some_and(|p| p.trim_end_matches('/').rsplit('/').next() == Some(&checkpoint_dir));
    let name = if c.is_savepoint && !in_checkpoint_dir {
        format!("savepoint {}", c.id)
    } else {
        checkpoint_dir
    };
    match &c.external_path {
        Some(p) if !p.is_empty() => format!("{name} ({p})"),
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::super::rest::tests::{FRESH_RUN, OVERVIEW, RESTORED_RUN};
    use super::super::rest::{parse_checkpoints, parse_overview};
    use super::*;

    const JOB: &str = "FlinkSQLFromKafka2Doris";
    const OLD: &str = "7684be6004e4e955c2a558a9bc463f65";
    const NEW: &str = "49b6cbb8b7e4f3c1a2d5e6f708192a3b";
    /// 2026-12-06T02:14:00Z, the resubmitted run's start in [`OVERVIEW`].
    const RESTART: i64 = 1_796_523_240_000;

    fn seen(overview: &str, checkpoints: &[(&str, &str)]) -> History {
        let mut h = History::default();
        let jobs = parse_overview(overview.as_bytes()).expect("fixture");
        let asked = h.observe_jobs(&jobs, JOB);
        for (jid, body) in checkpoints {
            assert!(asked.iter().any(|a| a == jid), "{jid} asked: {asked:?}");
            h.observe_checkpoints(jid, &parse_checkpoints(body.as_bytes()).expect("fixture"));
        }
        h
    }

    /// The seed incident: the job crashed, was resubmitted with `latest-offset` (no
    /// restore) and its commit jumped; the gap carries the words SPEC asks for.
    #[test]
    fn a_run_started_in_the_window_without_a_restore_explains_the_jump() {
        let old_ckpt = r#"{"counts":{"completed":7},"latest":{"completed":{"id":7,
            "latest_ack_timestamp":1796523190000,"external_path":"file:/ck/chk-7"},"restored":null}}"#;
        let h = seen(OVERVIEW, &[(OLD, old_ckpt), (NEW, FRESH_RUN)]);
        assert_eq!(h.current().map(|r| r.jid.as_str()), Some(NEW));
        // The position the jump left was committed at 02:13:30, the jump seen at 02:14:20.
        let ev = h
            .explain(RESTART - 30_000, RESTART + 20_000)
            .expect("a run started in the window");
        assert_eq!(ev.run.jid, NEW);
        assert_eq!(
            ev.text(),
            "restarted at 2026-12-06T02:14:00Z without restoring a checkpoint (latest-offset)"
        );
        assert_eq!(ev.previous_checkpoint.map(|c| c.id), Some(7));
        assert_eq!(h.previous().map(|r| r.jid.as_str()), Some(OLD));
    }

    #[test]
    fn a_run_that_restored_a_checkpoint_says_which() {
        let h = seen(OVERVIEW, &[(NEW, RESTORED_RUN)]);
        let ev = h.explain(RESTART - 1, RESTART + 1).expect("in the window");
        assert_eq!(
            ev.text(),
            "restarted at 2026-12-06T02:14:00Z, restored from chk-7 (file:/tmp/flink-ckpt/7684be6004e4e955c2a558a9bc463f65/chk-7)"
        );
        let run = h.current().expect("run");
        assert_eq!(
            run.summary(),
            "started at 2026-12-06T02:14:00Z restored from chk-7 (file:/tmp/flink-ckpt/7684be6004e4e955c2a558a9bc463f65/chk-7)"
        );
        let savepoint = RestoredCheckpoint {
            id: 3,
            restore_timestamp: 0,
            is_savepoint: true,
            external_path: None,
        };
        assert_eq!(checkpoint_words(&savepoint), "savepoint 3");
        // What a Flink 2.0 MiniCluster answered for a run restarted from a retained
        // checkpoint's path: `is_savepoint` true, the path a checkpoint's directory.
        let by_path = RestoredCheckpoint {
            id: 21,
            restore_timestamp: 1_796_569_794_397,
            is_savepoint: true,
            external_path: Some("file:/tmp/fl/ck/91600285afaee6c4db6d25f3a28847d7/chk-21".into()),
        };
        assert_eq!(
            checkpoint_words(&by_path),
            "chk-21 (file:/tmp/fl/ck/91600285afaee6c4db6d25f3a28847d7/chk-21)"
        );
    }

    /// A run outside the window, even by a little more than the slack, is never named: the
    /// jump may have another cause.
    #[test]
    fn no_run_started_in_the_window_explains_nothing() {
        let h = seen(OVERVIEW, &[(NEW, FRESH_RUN)]);
        // Window entirely after the restart (the job ran all along).
        assert_eq!(
            h.explain(RESTART + CLOCK_SLACK_MS + 1, RESTART + 60_000),
            None
        );
        // Window entirely before it.
        assert_eq!(
            h.explain(RESTART - 60_000, RESTART - CLOCK_SLACK_MS - 1),
            None
        );
        // Within the slack of either bound: named.
        assert!(
            h.explain(RESTART + CLOCK_SLACK_MS - 1, RESTART + 60_000)
                .is_some()
        );
        assert!(
            h.explain(RESTART - 60_000, RESTART - CLOCK_SLACK_MS)
                .is_some()
        );
        assert_eq!(History::default().explain(0, i64::MAX), None);
    }

    /// Before the run is RUNNING or has checkpointed, an absent `latest.restored` proves
    /// nothing: the evidence says so instead of claiming latest-offset; a later poll decides.
    #[test]
    fn a_restore_is_claimed_absent_only_once_the_run_runs() {
        let initializing = OVERVIEW.replace(
            r#""duration":60000,"state":"RUNNING""#,
            r#""duration":60000,"state":"INITIALIZING""#,
        );
        let empty = r#"{"counts":{"restored":0,"total":0,"in_progress":0,"completed":0,"failed":0},
            "latest":{"completed":null,"savepoint":null,"failed":null,"restored":null},"history":[]}"#;
        let mut h = seen(&initializing, &[(NEW, empty)]);
        let ev = h.explain(RESTART - 1, RESTART + 1).expect("in the window");
        assert_eq!(ev.run.restore, Restore::Unknown);
        assert!(
            ev.text()
                .ends_with("(whether it restored a checkpoint was not seen)")
        );
        // Next poll: RUNNING, still no restore: now it is known.
        let jobs = parse_overview(OVERVIEW.as_bytes()).expect("fixture");
        let asked = h.observe_jobs(&jobs, JOB);
        assert!(asked.contains(&NEW.to_owned()));
        h.observe_checkpoints(NEW, &parse_checkpoints(empty.as_bytes()).expect("fixture"));
        assert_eq!(h.current().map(|r| &r.restore), Some(&Restore::None));
        // Decided once: a later failover restoring chk-9 does not rewrite the start.
        h.observe_checkpoints(
            NEW,
            &parse_checkpoints(RESTORED_RUN.as_bytes()).expect("fixture"),
        );
        assert_eq!(h.current().map(|r| &r.restore), Some(&Restore::None));
    }

    #[test]
    fn runs_of_other_jobs_are_ignored_and_the_history_is_bounded() {
        let h = seen(OVERVIEW, &[]);
        assert_eq!(h.runs().len(), 2, "another-job is not kept");
        let mut h = History::default();
        for i in 0..(MAX_RUNS as i64 + 10) {
            let jobs = vec![JobOverview {
                jid: format!("{i:032x}"),
                name: JOB.into(),
                state: "FAILED".into(),
                start_time: 1_000 + i,
                end_time: 2_000 + i,
            }];
            // Restore unknown: still asked about, though ended.
            assert_eq!(h.observe_jobs(&jobs, JOB).len(), 1);
        }
        assert_eq!(h.runs().len(), MAX_RUNS);
        assert_eq!(h.runs()[0].started_ms, 1_010, "the oldest went first");
        // Runs the JobManager no longer lists are not asked about again (it died with
        // them, or forgot them); what was seen of them stays.
        assert!(h.observe_jobs(&[], JOB).is_empty());
        assert_eq!(h.runs().len(), MAX_RUNS);
        assert!(h.runs().iter().all(|r| !r.listed && !r.is_live()));
    }
}
