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
//!   The skew between the two is measured at each poll (a job not ended reports `duration`
//!   up to the JobManager's "now": `start-time + duration` against the auditor's clock at
//!   the answer) and the window is shifted by it; a small slack ([`CLOCK_SLACK_MS`]) absorbs
//!   what is left (the request's own latency). A restart outside the window is not named,
//!   so a narrow window can only lose evidence, never name a run that did not start in it.
//! - Flink commits a Kafka source's offsets when a checkpoint completes. A run that had
//!   completed a checkpoint by the time the auditor first saw the position the jump left
//!   was already committing then: it committed that position (or a later one), so it did
//!   not jump from it, however near its start is to the window (review 37, F1). When it did
//!   is Flink's own ack time of its earliest completed checkpoint seen (shifted by the
//!   skew), or the auditor's poll that first saw one, whichever is earlier.
//! - A job id names a run only with its start time: Flink reuses ids (application mode with
//!   HA, operator-made ids, a JobManager failover recovering the job), so an id seen again
//!   with another `start-time` is a new run (F3).
//! - Several jobs may carry one name (Flink SQL's default `insert-into_…`, a blue/green
//!   copy). A restart in the window whose run was seen RUNNING beside another RUNNING run
//!   of the name cannot be told apart from that other pipeline's: nothing is named (F2). A
//!   run still cancelling, failing or restarting when the next one started is the usual
//!   resubmission, not another pipeline.
//! - `latest.restored` is the *last* restore of a run, and `counts.restored` counts them
//!   all, the start's and each failover's. A start restores before the run's first
//!   checkpoint; a failover restores one of the run's own, after it completed. So the one
//!   restore of a run is the start's if it came before the run's first checkpoint (or the
//!   run has none), and a failover's if after (then the start restored nothing); with more
//!   than one, or without the first checkpoint's time, the start is not known.

use super::rest::{CheckpointStats, CompletedCheckpoint, JobOverview, RestoredCheckpoint};
use crate::logging::printable;
use chrono::{TimeZone, Utc};
use serde::Serialize;

/// Runs of the job kept (newest kept): a restart loop must not grow memory.
const MAX_RUNS: usize = 32;

/// Clock difference left after the skew estimate (the request's own latency), ms.
pub const CLOCK_SLACK_MS: i64 = 2_000;

/// Restarts in one window named in a gap's evidence (the last ones).
const MAX_NAMED: usize = 3;

/// Longest job id, state or checkpoint path kept from the JobManager's answers (a hostile
/// or broken server's text goes into every gap row, log line and terminal).
const MAX_JID: usize = 64;
const MAX_STATE: usize = 32;
const MAX_PATH: usize = 512;

/// What a run restored when it started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Restore {
    /// Not known: the run was not seen with a completed checkpoint (RUNNING is not enough:
    /// the JobManager's statistics are cached a few seconds), or the restore Flink reports
    /// may be a failover's, not the start's.
    Unknown,
    /// Nothing: the run started from its sources' startup mode.
    None,
    /// This checkpoint or savepoint.
    Checkpoint(RestoredCheckpoint),
}

/// One run of the job (one `jid` and `start-time`).
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
    /// When the auditor first saw it with a completed checkpoint (the auditor's clock):
    /// from then at the latest it was committing offsets.
    #[serde(skip)]
    pub checkpointed_seen_ms: Option<i64>,
    /// The earliest ack time of a completed checkpoint of the run seen (the JobManager's
    /// clock): its first checkpoint completed no later.
    #[serde(skip)]
    pub earliest_ack_ms: Option<i64>,
    /// `earliest_ack_ms` is its first checkpoint's (read when Flink's history held all).
    #[serde(skip)]
    pub first_ack_known: bool,
    /// Seen RUNNING in the same overview as another RUNNING run of the name.
    #[serde(skip)]
    pub ran_beside: bool,
    /// Its checkpoints were read after it ended (a run is asked once more then: a crash loop
    /// ends runs between polls).
    #[serde(skip)]
    pub final_read: bool,
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

    /// The ack time of its first checkpoint, when known.
    fn first_ack(&self) -> Option<i64> {
        self.earliest_ack_ms.filter(|_| self.first_ack_known)
    }
}

/// The restarts found in a commit jump's window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestartEvidence {
    /// The last run that started in the window.
    pub run: JobRun,
    /// Runs that started in the window before it, oldest first (at most a few; see
    /// `not_named`).
    pub earlier: Vec<JobRun>,
    /// Runs in the window left out of the text.
    pub not_named: usize,
    /// The last completed checkpoint of the run before the first of them, when it was seen:
    /// what a correct restart would have restored.
    pub previous_checkpoint: Option<CompletedCheckpoint>,
}

impl RestartEvidence {
    /// The evidence in words, as a gap carries it: `restarted at 2026-12-06T02:14:00Z
    /// without restoring a checkpoint (latest-offset)`, or `restarted at T, restored from
    /// chk-7 (file:/.../chk-7)`; several restarts in the window are each named
    /// (`restarted 2 times: at T1 ...; at T2, restored from chk-5`), since the one that
    /// made the jump may not be the last.
    pub fn text(&self) -> String {
        if self.earlier.is_empty() {
            return format!("restarted {}", restart_words(&self.run));
        }
        let n = self.earlier.len() + 1 + self.not_named;
        let parts: Vec<String> = self
            .earlier
            .iter()
            .chain(std::iter::once(&self.run))
            .map(restart_words)
            .collect();
        let left_out = if self.not_named > 0 {
            format!(" ({} earlier not named)", self.not_named)
        } else {
            String::new()
        };
        format!("restarted {n} times{left_out}: {}", parts.join("; "))
    }
}

/// "at T without restoring a checkpoint (latest-offset)" and the like.
fn restart_words(run: &JobRun) -> String {
    let at = format!("at {}", rfc3339(run.started_ms));
    match &run.restore {
        Restore::None => format!("{at} without restoring a checkpoint (latest-offset)"),
        Restore::Checkpoint(c) => format!("{at}, restored from {}", checkpoint_words(c)),
        Restore::Unknown => format!("{at} (whether it restored a checkpoint was not seen)"),
    }
}

/// The runs of one job, by start time.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Oldest first.
    runs: Vec<JobRun>,
    /// The JobManager's clock minus the auditor's, as last measured (ms).
    skew_ms: Option<i64>,
}

impl History {
    /// Takes one `/jobs/overview`, answered at `now_ms` (the auditor's clock): every run
    /// named `job` is added or updated, and the clock skew measured. Returns the ids of the
    /// runs whose checkpoints are worth reading now: those still live, and those whose
    /// restore is not known yet.
    pub fn observe_jobs(&mut self, jobs: &[JobOverview], job: &str, now_ms: i64) -> Vec<String> {
        // Every job not ended tells the JobManager's "now", whatever its name; the latest
        // of them is the nearest. Not a SUSPENDED one: the JobManager keeps those archived,
        // their duration frozen when they were.
        if let Some(jm_now) = jobs
            .iter()
            .filter(|j| j.end_time <= 0 && j.start_time > 0 && j.state != "SUSPENDED")
            .filter_map(|j| j.duration.filter(|d| *d >= 0)?.checked_add(j.start_time))
            .max()
        {
            self.skew_ms = jm_now.checked_sub(now_ms);
        }
        for r in &mut self.runs {
            r.listed = false;
        }
        // A job not yet initialized shows no start time: nothing to place it by. Only the
        // newest MAX_RUNS can be kept, so only they are matched, each by a map lookup
        // (review 28, R28-1: a 4 MiB answer listing 66,801 runs of the name took 20 s of a
        // core per poll, matched one by one against the list).
        let mut named: Vec<&JobOverview> = jobs
            .iter()
            .filter(|j| j.name == job && j.start_time > 0)
            .collect();
        named.sort_unstable_by_key(|j| std::cmp::Reverse(j.start_time));
        named.truncate(MAX_RUNS);
        let mut known: std::collections::HashMap<(String, i64), usize> = self
            .runs
            .iter()
            .enumerate()
            .map(|(i, r)| ((r.jid.clone(), r.started_ms), i))
            .collect();
        for j in named {
            let jid = printable(&j.jid, MAX_JID);
            let state = printable(&j.state, MAX_STATE);
            let ended = (j.end_time > 0).then_some(j.end_time);
            match known.get(&(jid.clone(), j.start_time)) {
                Some(&i) => {
                    let r = &mut self.runs[i];
                    r.state = state;
                    r.ended_ms = ended;
                    r.listed = true;
                }
                None => {
                    known.insert((jid.clone(), j.start_time), self.runs.len());
                    self.runs.push(JobRun {
                        jid,
                        state,
                        listed: true,
                        started_ms: j.start_time,
                        ended_ms: ended,
                        restore: Restore::Unknown,
                        last_completed: None,
                        checkpointed_seen_ms: None,
                        earliest_ack_ms: None,
                        first_ack_known: false,
                        ran_beside: false,
                        final_read: false,
                    });
                }
            }
        }
        if self.running_runs() > 1 {
            for r in self
                .runs
                .iter_mut()
                .filter(|r| r.listed && r.state == "RUNNING")
            {
                r.ran_beside = true;
            }
        }
        self.runs
            .sort_by(|a, b| (a.started_ms, &a.jid).cmp(&(b.started_ms, &b.jid)));
        if self.runs.len() > MAX_RUNS {
            self.runs.drain(..self.runs.len() - MAX_RUNS);
        }
        self.runs
            .iter()
            .filter(|r| r.listed && (r.is_live() || r.restore == Restore::Unknown || !r.final_read))
            .map(|r| r.jid.clone())
            .collect()
    }

    /// Takes one `/jobs/{jid}/checkpoints` of a run the last overview listed, answered at
    /// `now_ms` (the auditor's clock).
    pub fn observe_checkpoints(&mut self, jid: &str, stats: &CheckpointStats, now_ms: i64) {
        let Some(r) = self.runs.iter_mut().find(|r| r.listed && r.jid == jid) else {
            return;
        };
        if let Some(c) = &stats.latest_completed {
            r.last_completed = Some(CompletedCheckpoint {
                external_path: c
                    .external_path
                    .as_deref()
                    .map(|p| printable(&crate::logging::redact(p), MAX_PATH)),
                ..c.clone()
            });
        }
        if stats.completed_count > 0 && r.checkpointed_seen_ms.is_none() {
            r.checkpointed_seen_ms = Some(now_ms);
        }
        if let Some(ack) = stats.earliest_ack {
            r.earliest_ack_ms = Some(r.earliest_ack_ms.map_or(ack, |a| a.min(ack)));
            r.first_ack_known |= stats.earliest_ack_is_first;
        }
        if !r.is_live() {
            r.final_read = true;
        }
        // Decided once: a later failover that restores another checkpoint does not change
        // what the run did when it started.
        if r.restore == Restore::Unknown {
            let cleaned = |c: &RestoredCheckpoint| {
                Restore::Checkpoint(RestoredCheckpoint {
                    external_path: c
                        .external_path
                        .as_deref()
                        .map(|p| printable(&crate::logging::redact(p), MAX_PATH)),
                    ..c.clone()
                })
            };
            r.restore = match &stats.restored {
                // Restores happen before the first checkpoint. Not "before RUNNING" (review
                // 28, R28-4): the JobManager caches these statistics for a few seconds
                // (rest.cache.checkpoint-statistics.timeout), so a run just RUNNING may
                // show no restore yet. With checkpointing on, its Kafka source commits
                // offsets only with a checkpoint, so waiting for one loses no gap's
                // evidence; with it off, the restore stays unknown and the words say so.
                None if stats.completed_count > 0 => Restore::None,
                None => Restore::Unknown,
                // `latest.restored` is the last of several: the start's is not shown.
                Some(_) if stats.restored_count > 1 => Restore::Unknown,
                // The one restore (review 37 F4, review 27 G3): the start's when it came
                // before the run's first checkpoint (or the run has none: a failover has
                // nothing of its own to restore then), a failover's when after — and then
                // the start restored nothing. Without the first checkpoint's time, unknown.
                Some(c) => match (stats.completed_count, r.first_ack()) {
                    (0, _) => cleaned(c),
                    (_, Some(first)) if c.restore_timestamp < first => cleaned(c),
                    (_, Some(_)) => Restore::None,
                    (_, None) => Restore::Unknown,
                },
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

    /// How many runs of the job the last overview listed RUNNING: more than one means
    /// several pipelines carry the name (their restarts explain nothing, see
    /// [`Self::explain`]).
    pub fn running_runs(&self) -> usize {
        self.runs
            .iter()
            .filter(|r| r.listed && r.state == "RUNNING")
            .count()
    }

    /// The JobManager's clock minus the auditor's, when measured (ms).
    pub fn skew_ms(&self) -> Option<i64> {
        self.skew_ms
    }

    /// The restarts behind a commit jump: runs that started after `after_ms` (when the
    /// position the jump left was committed, at the latest) and no later than `by_ms` (when
    /// the jump was seen), both the auditor's clock, shifted by the measured skew and
    /// widened by [`CLOCK_SLACK_MS`]; a run seen checkpointing by `from_seen_ms` (when the
    /// auditor first saw that position) is left out, since it committed it. `None`: no run
    /// started in the window (or none was seen), or one that did overlapped another run of
    /// the same name (which pipeline restarted cannot be told).
    pub fn explain(
        &self,
        after_ms: i64,
        from_seen_ms: Option<i64>,
        by_ms: i64,
    ) -> Option<RestartEvidence> {
        let shift = self.skew_ms.unwrap_or(0);
        let lo = after_ms
            .saturating_add(shift)
            .saturating_sub(CLOCK_SLACK_MS);
        let hi = by_ms.saturating_add(shift).saturating_add(CLOCK_SLACK_MS);
        // When the run was committing by, on the auditor's clock: the earlier of the poll
        // that first saw a completed checkpoint and Flink's own ack time shifted back.
        let committing_before = |r: &JobRun| {
            let by_ack = r.earliest_ack_ms.map(|a| a.saturating_sub(shift));
            let since = [r.checkpointed_seen_ms, by_ack].into_iter().flatten().min();
            matches!((since, from_seen_ms), (Some(c), Some(f)) if c <= f)
        };
        let found: Vec<usize> = self
            .runs
            .iter()
            .enumerate()
            .filter(|(_, r)| r.started_ms > lo && r.started_ms <= hi && !committing_before(r))
            .map(|(i, _)| i)
            .collect();
        let (&first, &last) = (found.first()?, found.last()?);
        if found.iter().any(|&i| self.runs[i].ran_beside) {
            tracing::debug!(
                "a Flink run that started in a commit jump's window ran beside another of its name: no evidence"
            );
            return None;
        }
        let named_from = found.len().saturating_sub(MAX_NAMED);
        let previous_checkpoint = self.runs[..first]
            .iter()
            .rev()
            .find_map(|r| r.last_completed.clone());
        Some(RestartEvidence {
            run: self.runs[last].clone(),
            earlier: found[named_from..found.len() - 1]
                .iter()
                .map(|&i| self.runs[i].clone())
                .collect(),
            not_named: named_from,
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
        Restore::Unknown => "(whether it restored a checkpoint is not known)".to_owned(),
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

    /// When [`OVERVIEW`] was answered, by the JobManager's clock (another-job's
    /// `start-time + duration`): polls at this time of the auditor's see no skew.
    const ANSWERED: i64 = 1_796_523_301_000;

    fn seen(overview: &str, checkpoints: &[(&str, &str)]) -> History {
        let mut h = History::default();
        let jobs = parse_overview(overview.as_bytes()).expect("fixture");
        let asked = h.observe_jobs(&jobs, JOB, ANSWERED);
        for (jid, body) in checkpoints {
            assert!(asked.iter().any(|a| a == jid), "{jid} asked: {asked:?}");
            h.observe_checkpoints(
                jid,
                &parse_checkpoints(body.as_bytes()).expect("fixture"),
                ANSWERED,
            );
        }
        h
    }

    fn run(jid: &str, state: &str, start: i64, end: i64) -> JobOverview {
        JobOverview {
            jid: jid.into(),
            name: JOB.into(),
            state: state.into(),
            start_time: start,
            end_time: end,
            duration: None,
        }
    }

    /// Checkpoint statistics: `completed` checkpoints, the last restore (of chk-3 from
    /// `restored`, at time 0) and how many restores there were.
    fn checkpoints(completed: u64, restored: Option<&str>, restored_count: u64) -> CheckpointStats {
        CheckpointStats {
            completed_count: completed,
            restored_count,
            latest_completed: None,
            restored: restored.map(|p| RestoredCheckpoint {
                id: 3,
                restore_timestamp: 0,
                is_savepoint: false,
                external_path: Some(p.into()),
            }),
            earliest_ack: None,
            earliest_ack_is_first: false,
        }
    }

    /// The same, with Flink's history holding every completed checkpoint, the first acked
    /// at `first_ack`.
    fn with_first_ack(mut stats: CheckpointStats, first_ack: i64) -> CheckpointStats {
        stats.earliest_ack = Some(first_ack);
        stats.earliest_ack_is_first = true;
        stats
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
        assert_eq!(h.skew_ms(), Some(0));
        let ev = h
            .explain(RESTART - 30_000, None, RESTART + 20_000)
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
        let ev = h
            .explain(RESTART - 1, None, RESTART + 1)
            .expect("in the window");
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
            h.explain(RESTART + CLOCK_SLACK_MS + 1, None, RESTART + 60_000),
            None
        );
        // Window entirely before it.
        assert_eq!(
            h.explain(RESTART - 60_000, None, RESTART - CLOCK_SLACK_MS - 1),
            None
        );
        // Within the slack of either bound: named.
        assert!(
            h.explain(RESTART + CLOCK_SLACK_MS - 1, None, RESTART + 60_000)
                .is_some()
        );
        assert!(
            h.explain(RESTART - 60_000, None, RESTART - CLOCK_SLACK_MS)
                .is_some()
        );
        assert_eq!(History::default().explain(0, None, i64::MAX), None);
    }

    /// Before the run is RUNNING or has checkpointed, an absent `latest.restored` proves
    /// nothing: the evidence says so instead of claiming latest-offset; a later poll decides.
    #[test]
    fn a_restore_is_claimed_absent_only_once_the_run_checkpointed() {
        let initializing = OVERVIEW.replace(
            r#""duration":60000,"state":"RUNNING""#,
            r#""duration":60000,"state":"INITIALIZING""#,
        );
        let empty = r#"{"counts":{"restored":0,"total":0,"in_progress":0,"completed":0,"failed":0},
            "latest":{"completed":null,"savepoint":null,"failed":null,"restored":null},"history":[]}"#;
        let mut h = seen(&initializing, &[(NEW, empty)]);
        let ev = h
            .explain(RESTART - 1, None, RESTART + 1)
            .expect("in the window");
        assert_eq!(ev.run.restore, Restore::Unknown);
        assert!(
            ev.text()
                .ends_with("(whether it restored a checkpoint was not seen)")
        );
        // Next poll: RUNNING, still no restore: still not known (review 28, R28-4: the
        // JobManager's cached statistics may predate the restore).
        let jobs = parse_overview(OVERVIEW.as_bytes()).expect("fixture");
        let asked = h.observe_jobs(&jobs, JOB, ANSWERED);
        assert!(asked.contains(&NEW.to_owned()));
        h.observe_checkpoints(
            NEW,
            &parse_checkpoints(empty.as_bytes()).expect("fixture"),
            ANSWERED,
        );
        assert_eq!(h.current().map(|r| &r.restore), Some(&Restore::Unknown));
        // A completed checkpoint and no restore: now it is known.
        h.observe_checkpoints(NEW, &checkpoints(1, None, 0), ANSWERED);
        assert_eq!(h.current().map(|r| &r.restore), Some(&Restore::None));
        // Decided once: a later failover restoring chk-9 does not rewrite the start.
        h.observe_checkpoints(
            NEW,
            &parse_checkpoints(RESTORED_RUN.as_bytes()).expect("fixture"),
            ANSWERED,
        );
        assert_eq!(h.current().map(|r| &r.restore), Some(&Restore::None));
    }

    #[test]
    fn runs_of_other_jobs_are_ignored_and_the_history_is_bounded() {
        let h = seen(OVERVIEW, &[]);
        assert_eq!(h.runs().len(), 2, "another-job is not kept");
        let mut h = History::default();
        for i in 0..(MAX_RUNS as i64 + 10) {
            let jobs = vec![run(&format!("{i:032x}"), "FAILED", 1_000 + i, 2_000 + i)];
            // Restore unknown: still asked about, though ended.
            assert_eq!(h.observe_jobs(&jobs, JOB, 3_000).len(), 1);
        }
        assert_eq!(h.runs().len(), MAX_RUNS);
        assert_eq!(h.runs()[0].started_ms, 1_010, "the oldest went first");
        // Runs the JobManager no longer lists are not asked about again (it died with
        // them, or forgot them); what was seen of them stays.
        assert!(h.observe_jobs(&[], JOB, 3_000).is_empty());
        assert_eq!(h.runs().len(), MAX_RUNS);
        assert!(h.runs().iter().all(|r| !r.listed && !r.is_live()));
    }

    /// Review 37, F1: a run that started just before the position the jump left was first
    /// seen, and was already checkpointing (so committing) when it was seen, committed that
    /// position: it did not jump from it, though its start is in the window.
    #[test]
    fn a_run_already_checkpointing_when_the_left_position_was_seen_is_not_named() {
        let since = 1_000_000;
        let mut h = History::default();
        h.observe_jobs(&[run(NEW, "RUNNING", since + 500, -1)], JOB, since + 600);
        h.observe_checkpoints(NEW, &checkpoints(0, None, 0), since + 600);
        // Its first checkpoint (and offset commit) seen at +3 500.
        h.observe_jobs(&[run(NEW, "RUNNING", since + 500, -1)], JOB, since + 3_500);
        h.observe_checkpoints(NEW, &checkpoints(1, None, 0), since + 3_500);
        // `from` first seen at +5 000, the jump at +20 000: B was committing before.
        assert_eq!(h.explain(since, Some(since + 5_000), since + 20_000), None);
        // Had `from` been seen before B checkpointed, B may have jumped from it.
        let ev = h
            .explain(since, Some(since + 3_000), since + 20_000)
            .expect("named");
        assert_eq!(ev.run.jid, NEW);
        // A step persisted before `from_seen_ms` existed: the window alone, as before.
        assert!(h.explain(since, None, since + 20_000).is_some());
    }

    /// Review 37, F1: the JobManager's clock 60 s ahead of the auditor's. Its times are
    /// shifted by the skew measured from a running job's `start-time + duration`: the run
    /// that restarted in the window is named, and one that only looks in it unshifted is
    /// not.
    #[test]
    fn the_window_is_shifted_by_the_measured_clock_skew() {
        let skew = 60_000;
        let t = 5_000_000; // the auditor's clock: the jump's window is (t, t + 10 000]
        let mut h = History::default();
        let restarted = run(NEW, "RUNNING", t + 4_000 + skew, -1);
        let jobs = [
            run(OLD, "FAILED", t - 100_000 + skew, t + 3_000 + skew),
            restarted.clone(),
            JobOverview {
                duration: Some(6_000),
                ..restarted
            },
        ];
        // A poll answered at t + 10 000 (auditor), t + 10 000 + skew (JobManager).
        h.observe_jobs(&jobs[..1], JOB, t + 10_000);
        assert_eq!(h.skew_ms(), None, "an ended job tells no clock");
        h.observe_jobs(&jobs[1..], JOB, t + 10_000);
        assert_eq!(h.skew_ms(), Some(skew));
        h.observe_checkpoints(NEW, &checkpoints(1, None, 0), t + 10_000);
        let ev = h
            .explain(t, None, t + 10_000)
            .expect("the shifted start is in the window");
        assert_eq!(ev.run.jid, NEW);
        // Unshifted, a run 50 s "early" by the JobManager's clock would have been inside.
        let mut h2 = History::default();
        let early = run(OLD, "RUNNING", t + 4_000, -1);
        h2.observe_jobs(
            &[JobOverview {
                duration: Some(6_000 + skew),
                ..early
            }],
            JOB,
            t + 10_000,
        );
        assert_eq!(h2.skew_ms(), Some(skew));
        assert_eq!(h2.explain(t, None, t + 10_000), None);
    }

    /// Review 37, F2: two pipelines under one name (Flink SQL's default name, a blue/green
    /// copy). A restart of one in the window cannot be told from the other's: nothing is
    /// named, and the source says why.
    #[test]
    fn runs_of_one_name_at_the_same_time_explain_nothing() {
        let mut h = History::default();
        h.observe_jobs(
            &[
                run(OLD, "RUNNING", 1_000, -1),
                run(NEW, "RUNNING", 50_000, -1),
            ],
            JOB,
            60_000,
        );
        assert_eq!(h.running_runs(), 2);
        assert_eq!(h.explain(40_000, None, 60_000), None);
        // One after the other (the crashed run ended before the new one started): named.
        let mut h = History::default();
        h.observe_jobs(
            &[
                run(OLD, "FAILED", 1_000, 45_000),
                run(NEW, "RUNNING", 50_000, -1),
            ],
            JOB,
            60_000,
        );
        assert_eq!(h.running_runs(), 1);
        assert!(h.explain(40_000, None, 60_000).is_some());
        // Review 27, G5: cancelled, then resubmitted before the cancel finished (the old
        // one CANCELLING when the new one was listed, CANCELED 5 s after it started): one
        // pipeline resubmitted, named.
        let mut h = History::default();
        h.observe_jobs(
            &[
                run(OLD, "CANCELLING", 1_000, -1),
                run(NEW, "RUNNING", 50_000, -1),
            ],
            JOB,
            52_000,
        );
        h.observe_jobs(
            &[
                run(OLD, "CANCELED", 1_000, 55_000),
                run(NEW, "RUNNING", 50_000, -1),
            ],
            JOB,
            60_000,
        );
        assert!(h.explain(40_000, None, 60_000).is_some());
        // Once seen RUNNING beside another, a run stays suspect after the other ended.
        let mut h = History::default();
        h.observe_jobs(
            &[
                run(OLD, "RUNNING", 1_000, -1),
                run(NEW, "RUNNING", 50_000, -1),
            ],
            JOB,
            52_000,
        );
        h.observe_jobs(
            &[
                run(OLD, "CANCELED", 1_000, 55_000),
                run(NEW, "RUNNING", 50_000, -1),
            ],
            JOB,
            60_000,
        );
        assert_eq!(h.explain(40_000, None, 60_000), None);
    }

    /// Review 37, F3: a job id seen again with another start time (application mode with
    /// HA, a JobManager failover) is a new run: its restart is named, and the status shows
    /// it, not the old incarnation.
    #[test]
    fn a_reused_job_id_with_a_new_start_is_a_new_run() {
        let restored_old = checkpoints(0, Some("file:/ck/other/chk-7"), 1);
        let mut h = History::default();
        h.observe_jobs(&[run(NEW, "RUNNING", 1_000, -1)], JOB, 2_000);
        h.observe_checkpoints(NEW, &restored_old, 2_000);
        h.observe_jobs(&[run(NEW, "RUNNING", 50_000, -1)], JOB, 55_000);
        h.observe_checkpoints(NEW, &checkpoints(1, None, 0), 55_000);
        assert_eq!(h.runs().len(), 2);
        let ev = h
            .explain(40_000, None, 60_000)
            .expect("the new incarnation");
        assert_eq!(ev.run.started_ms, 50_000);
        assert_eq!(ev.run.restore, Restore::None);
        assert_eq!(h.current().map(|r| &r.restore), Some(&Restore::None));
        assert!(matches!(
            h.previous().map(|r| &r.restore),
            Some(Restore::Checkpoint(_))
        ));
    }

    /// Review 37, F4: `latest.restored` is the last restore. First seen after a failover
    /// that restored the run's own checkpoint (or after several restores), it says nothing
    /// of what the run did at its start: unknown, never "restored from chk-3".
    #[test]
    fn a_failover_restore_is_not_taken_for_the_start() {
        let own = format!("file:/ck/{NEW}/chk-3");
        for stats in [
            checkpoints(3, Some(&own), 1),
            with_first_ack(checkpoints(3, Some("file:/ck/other/chk-3"), 2), 2_000),
        ] {
            let mut h = History::default();
            h.observe_jobs(&[run(NEW, "RUNNING", 1_000, -1)], JOB, 9_000);
            h.observe_checkpoints(NEW, &stats, 9_000);
            let ev = h.explain(0, None, 9_000).expect("in the window");
            assert_eq!(ev.run.restore, Restore::Unknown, "{stats:?}");
            assert!(
                ev.text()
                    .ends_with("(whether it restored a checkpoint was not seen)")
            );
        }
        // Review 27, G3: told by time, not by path. The one restore, before the run's first
        // checkpoint: the start's, whatever the path says (a reused job id's own
        // directory, as application mode with HA has it).
        let reused = "file:/ck/00000000000000000000000000000000/chk-41";
        for (path, first_ack, want_start) in [
            ("file:/ck/other/chk-3", 2_000, true),
            (reused, 2_000, true),
            // After its first checkpoint: a failover's (storage without paths), and the
            // start restored nothing.
            ("<checkpoint-not-externally-addressable>", -1, false),
        ] {
            let mut stats = checkpoints(3, Some(path), 1);
            if let Some(r) = &mut stats.restored {
                r.restore_timestamp = 1_500;
            }
            let stats = with_first_ack(stats, if first_ack < 0 { 1_200 } else { first_ack });
            let mut h = History::default();
            h.observe_jobs(&[run(NEW, "RUNNING", 1_000, -1)], JOB, 9_000);
            h.observe_checkpoints(NEW, &stats, 9_000);
            let restore = h.current().map(|r| r.restore.clone());
            if want_start {
                assert!(
                    matches!(restore, Some(Restore::Checkpoint(_))),
                    "{path}: {restore:?}"
                );
            } else {
                assert_eq!(restore, Some(Restore::None), "{path}");
            }
        }
        // Checkpoints but not the first one's time: not known.
        let mut h = History::default();
        h.observe_jobs(&[run(NEW, "RUNNING", 1_000, -1)], JOB, 9_000);
        h.observe_checkpoints(NEW, &checkpoints(3, Some("file:/ck/other/chk-3"), 1), 9_000);
        assert_eq!(h.current().map(|r| &r.restore), Some(&Restore::Unknown));
        // No checkpoint of its own yet: the one restore is the start's.
        let mut h = History::default();
        h.observe_jobs(&[run(NEW, "RUNNING", 1_000, -1)], JOB, 9_000);
        h.observe_checkpoints(NEW, &checkpoints(0, Some(reused), 1), 9_000);
        assert!(matches!(
            h.current().map(|r| &r.restore),
            Some(Restore::Checkpoint(_))
        ));
    }

    /// Review 37, F10: two restarts in one window (the jump seen late): both are named, the
    /// one without a restore included, not only the last.
    #[test]
    fn every_restart_in_the_window_is_named() {
        let mut h = History::default();
        let jobs = [
            run(OLD, "FAILED", 10_000, 20_000),
            run(NEW, "RUNNING", 40_000, -1),
        ];
        h.observe_jobs(&jobs, JOB, 50_000);
        h.observe_checkpoints(OLD, &checkpoints(1, None, 0), 50_000);
        h.observe_checkpoints(
            NEW,
            &with_first_ack(checkpoints(1, Some("file:/ck/other/chk-5"), 1), 45_000),
            50_000,
        );
        let ev = h.explain(5_000, None, 50_000).expect("named");
        assert_eq!(
            ev.text(),
            "restarted 2 times: at 1970-01-01T00:00:10Z without restoring a checkpoint \
             (latest-offset); at 1970-01-01T00:00:40Z, restored from chk-3 (file:/ck/other/chk-5)"
        );
        // Many: the last few named, the rest counted.
        let mut h = History::default();
        let many: Vec<JobOverview> = (0..6)
            .map(|i| {
                run(
                    &format!("{i:032x}"),
                    "FAILED",
                    10_000 * (i + 1),
                    10_000 * (i + 1) + 5_000,
                )
            })
            .collect();
        h.observe_jobs(&many, JOB, 100_000);
        let ev = h.explain(0, None, 100_000).expect("named");
        assert!(
            ev.text()
                .starts_with("restarted 6 times (3 earlier not named): at 1970-01-01T00:00:40Z"),
            "{}",
            ev.text()
        );
    }

    /// Review 37, F9: what the JobManager says goes into gap rows, logs and terminals:
    /// control characters are dropped and lengths capped.
    #[test]
    fn outside_text_is_cleaned_and_capped() {
        let mut h = History::default();
        let long = format!("file:/ck/\x1b[2J\n{}", "a".repeat(100_000));
        h.observe_jobs(&[run(NEW, "RUN\x1b[31mNING", 1_000, -1)], JOB, 9_000);
        h.observe_checkpoints(NEW, &checkpoints(0, Some(&long), 1), 9_000);
        let text = h.explain(0, None, 9_000).expect("named").text();
        assert!(!text.chars().any(char::is_control), "{text:.80}");
        assert!(text.len() < 700, "{}", text.len());
        let r = h.current().expect("run");
        assert!(!r.state.chars().any(char::is_control));
    }

    /// Review 27, G1: the poller's ticks fell on either side of the run's first checkpoint
    /// and past the poll that first saw `from`: Flink's own ack time (from its checkpoint
    /// history) still says the run was committing before `from` was seen.
    #[test]
    fn flinks_own_checkpoint_time_says_a_run_was_already_committing() {
        let since = 1_000_000;
        let mut h = History::default();
        let b = JobOverview {
            duration: Some(500),
            ..run(NEW, "RUNNING", since + 500, -1)
        };
        h.observe_jobs(std::slice::from_ref(&b), JOB, since + 1_000);
        h.observe_checkpoints(NEW, &checkpoints(0, None, 0), since + 1_000);
        let b = JobOverview {
            duration: Some(5_500),
            ..b
        };
        h.observe_jobs(std::slice::from_ref(&b), JOB, since + 6_000);
        h.observe_checkpoints(
            NEW,
            &with_first_ack(checkpoints(1, None, 0), since + 3_500),
            since + 6_000,
        );
        assert_eq!(h.skew_ms(), Some(0));
        assert_eq!(h.explain(since, Some(since + 5_000), since + 25_000), None);
        // First acked after `from` was seen: it may have jumped from it.
        let mut h2 = History::default();
        h2.observe_jobs(std::slice::from_ref(&b), JOB, since + 6_000);
        h2.observe_checkpoints(
            NEW,
            &with_first_ack(checkpoints(1, None, 0), since + 5_500),
            since + 6_000,
        );
        assert!(
            h2.explain(since, Some(since + 5_000), since + 25_000)
                .is_some()
        );
    }

    /// Review 28, R28-10: a checkpoint path with credentials in it (an object store URL)
    /// is kept without them, for `/api/status` and the gap's words.
    #[test]
    fn a_checkpoint_path_loses_its_credentials() {
        let mut h = History::default();
        h.observe_jobs(&[run(NEW, "RUNNING", 1_000, -1)], JOB, 2_000);
        let stats = CheckpointStats {
            completed_count: 1,
            latest_completed: Some(CompletedCheckpoint {
                id: 5,
                latest_ack_timestamp: 1_500,
                external_path: Some("s3://AKIA1:se/cret@bucket/chk-5".into()),
            }),
            ..checkpoints(1, Some("s3://AKIA1:pw@bucket/chk-3"), 1)
        };
        h.observe_checkpoints(NEW, &stats, 2_000);
        let shown = format!("{:?}", h.current());
        assert!(
            !shown.contains("AKIA1") && !shown.contains("cret") && !shown.contains(":pw@"),
            "{shown}"
        );
        assert!(shown.contains("s3://[redacted]@bucket/chk-5"), "{shown}");
    }

    /// Review 28, R28-1: an answer listing thousands of runs of the name keeps the newest
    /// MAX_RUNS, matched again on the next answer (not added twice).
    #[test]
    fn a_huge_overview_keeps_the_newest_runs() {
        let jobs: Vec<JobOverview> = (0..20_000)
            .map(|i| run(&format!("{i:032x}"), "FAILED", 1_000 + i, 2_000 + i))
            .collect();
        let mut h = History::default();
        h.observe_jobs(&jobs, JOB, 50_000);
        h.observe_jobs(&jobs, JOB, 51_000);
        assert_eq!(h.runs().len(), MAX_RUNS);
        assert_eq!(
            h.runs().first().map(|r| r.started_ms),
            Some(1_000 + 20_000 - MAX_RUNS as i64)
        );
        assert!(h.runs().iter().all(|r| r.listed));
    }

    /// Review 27, G1: a run that ended between two polls is read once more, so what it
    /// checkpointed is known (a crash loop).
    #[test]
    fn an_ended_run_is_read_once_more() {
        let mut h = History::default();
        assert_eq!(
            h.observe_jobs(&[run(NEW, "RUNNING", 1_000, -1)], JOB, 2_000),
            vec![NEW.to_owned()]
        );
        h.observe_checkpoints(NEW, &checkpoints(0, None, 0), 2_000);
        assert_eq!(h.current().map(|r| &r.restore), Some(&Restore::Unknown));
        let asked = h.observe_jobs(&[run(NEW, "FAILED", 1_000, 4_000)], JOB, 5_000);
        assert_eq!(asked, vec![NEW.to_owned()], "asked once after it ended");
        h.observe_checkpoints(NEW, &checkpoints(1, None, 0), 5_000);
        assert_eq!(
            h.current().and_then(|r| r.checkpointed_seen_ms),
            Some(5_000)
        );
        assert_eq!(h.current().map(|r| &r.restore), Some(&Restore::None));
        assert!(
            h.observe_jobs(&[run(NEW, "FAILED", 1_000, 4_000)], JOB, 6_000)
                .is_empty(),
            "not again"
        );
    }

    /// Review 27, G6: a SUSPENDED job's duration was frozen when it was archived: it tells
    /// no clock.
    #[test]
    fn a_suspended_job_tells_no_clock() {
        let mut h = History::default();
        let suspended = JobOverview {
            duration: Some(1_000),
            ..run(OLD, "SUSPENDED", 1_000, -1)
        };
        h.observe_jobs(&[suspended], JOB, 10_000_000);
        assert_eq!(h.skew_ms(), None);
    }
}
