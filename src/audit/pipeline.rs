//! The pipeline's position: a Kafka group's commits, or a Doris Routine Load job's
//! progress (`[audits.pipeline] kind = "doris_routine_load"`), feed the due rule; rewinds
//! and stalls are reported, and verdicts are held back while the position cannot be seen.

use super::{Audit, blocking::blocking};
use crate::routine_load::{JobReader, JobTrack, Reading};
use crate::types::{Offset, TopicPartition};
use chrono::Utc;

/// Whether the pipeline's position can be seen.
#[derive(Default)]
pub(super) struct PipelineWatch {
    /// The last read of the pipeline's position succeeded (with a position source).
    pub(super) read_ok: bool,
    /// Why verdicts are held back (a configured position source that cannot be read, has
    /// no commit, or whose commits disappeared), as last logged and shown in `/api/status`;
    /// `None` while they are not.
    pub(super) hold: Option<String>,
    /// With `kind = "doris_routine_load"`: the job and what its reads told.
    pub(super) job: Option<JobWatch>,
}

/// A Routine Load job as the pipeline's position.
pub(super) struct JobWatch {
    reader: JobReader,
    track: JobTrack,
    /// The last successful read.
    last: Option<Reading>,
    /// Why the last read failed (`None` after a success), as logged.
    error: Option<String>,
}

impl JobWatch {
    /// Watches the job `reader` reads.
    pub(super) fn new(reader: JobReader) -> Self {
        Self {
            reader,
            track: JobTrack::default(),
            last: None,
            error: None,
        }
    }

    /// The job's name as configured.
    pub(super) fn job(&self) -> &str {
        self.reader.job()
    }

    /// Why the job does not consume now (state and Doris's reason), from the last read.
    pub(super) fn not_consuming(&self) -> Option<&str> {
        self.last.as_ref()?.not_consuming.as_deref()
    }

    /// Reads the job once; logs a failure when it changes, and state changes.
    async fn poll(&mut self, audit: &str) -> Option<Reading> {
        match self.reader.read().await {
            Ok(row) => {
                let reading = self.track.read(&row);
                if self.error.take().is_some() {
                    tracing::info!(audit = %audit, job = %self.reader.job(), "Routine Load job read again");
                }
                let before = self.last.as_ref().and_then(|r| r.not_consuming.clone());
                match (&reading.not_consuming, &before) {
                    (Some(now), b) if b.as_ref() != Some(now) => {
                        let last = crate::routine_load::track::is_final(&row.state);
                        tracing::warn!(audit = %audit, job = %self.reader.job(), final_state = last,
                            "Routine Load job does not consume: {now}; its records wait (lag, never loss)")
                    }
                    (None, Some(_)) => {
                        tracing::info!(audit = %audit, job = %self.reader.job(), "Routine Load job consumes again")
                    }
                    _ => {}
                }
                self.last = Some(reading.clone());
                Some(reading)
            }
            Err(e) => {
                let e = e.to_string();
                if self.error.as_ref() != Some(&e) {
                    tracing::warn!(audit = %audit, job = %self.reader.job(), error = %e,
                        "cannot read the Routine Load job; verdicts wait until it can be read");
                }
                self.error = Some(e);
                None
            }
        }
    }
}

/// How many partitions a reason names before it says "and N more" (a log line, not a list).
const NAMED_PARTITIONS: usize = 5;

/// Why the pipeline group's commits cannot be used for verdicts, as logged and shown in
/// `/api/status`.
fn vanished_reason(source: &str, job: bool, vanished: &[(TopicPartition, Offset)]) -> String {
    let mut named: Vec<String> = vanished
        .iter()
        .take(NAMED_PARTITIONS)
        .map(|(tp, last)| format!("{tp} (last commit seen {last})"))
        .collect();
    if vanished.len() > NAMED_PARTITIONS {
        named.push(format!("and {} more", vanished.len() - NAMED_PARTITIONS));
    }
    if job {
        return format!(
            "the {source} shows nothing committed again on {} (the job re-created, or an FE that shows an ALTER to OFFSET_END as such); verdicts on those partitions are held until it commits again",
            named.join(", ")
        );
    }
    format!(
        "the {source} had committed offsets that disappeared: Kafka answers no commit on {} (the group was deleted, or its offsets expired after offsets.retention.minutes with no member); verdicts on those partitions are held until it commits again",
        named.join(", ")
    )
}

impl Audit {
    /// With a configured pipeline group, whether verdicts wait this round: the group could
    /// not be read, or it has no commit on any partition this audit owns (a misspelt name, a
    /// job before its first checkpoint). Lag is never loss, so nothing becomes due on time
    /// alone (SPEC "Due rule"). Sets `gap_auditor_pipeline_group_up` and logs changes.
    ///
    /// Commits that disappeared (the group deleted or expired, see
    /// [`crate::ledger::PipelineCommits::vanished`]) hold back the partitions they vanished
    /// from (see `due_of`), not the whole audit; the group is reported down all the same:
    /// a pipeline that lost its position is about to restart from somewhere, and the
    /// operator must know why verdicts stopped.
    pub(super) fn hold_verdicts(&mut self) -> bool {
        let Some(source) = self.position_source() else {
            return false;
        };
        let vanished: Vec<(TopicPartition, Offset)> = self
            .parts
            .iter()
            .filter_map(|(tp, p)| p.ledger.pipeline.vanished().map(|o| (tp.clone(), o)))
            .collect();
        let job = self.watch.pipeline.job.as_ref();
        let reading = job.and_then(|j| j.last.as_ref());
        // The job's answer must name its topic: a progress not tied to the audit's topic
        // could drive verdicts on partitions of another (fail closed).
        let topic_problem = reading.and_then(|r| match &r.topic {
            None => Some("names no topic (DataSourceProperties.topic), so its progress cannot be tied to this audit's partitions".to_owned()),
            Some(t) if !self.cfg.topics.contains(t) => Some(format!(
                "reads topic {t:?}, which this audit does not audit (is pipeline.job the right job?)"
            )),
            Some(_) => None,
        });
        // Partitions of the job's topic that the job does not read (`kafka_partitions`):
        // nothing there ever becomes due, which must be said, not left as silent lag.
        let unread: Vec<TopicPartition> = match reading {
            Some(r) => match (&r.topic, &r.partitions) {
                (Some(t), Some(read)) => self
                    .parts
                    .keys()
                    .filter(|tp| tp.topic == *t && !read.contains(&tp.partition))
                    .cloned()
                    .collect(),
                _ => Vec::new(),
            },
            None => Vec::new(),
        };
        let (reason, hold_all) = if self.parts.is_empty() {
            // Nothing assigned yet: nothing to hold, and nothing was read.
            (None, false)
        } else if !self.watch.pipeline.read_ok {
            let why = match job {
                Some(j) => j.error.clone().unwrap_or_default(),
                None => "no DESCRIBE permission on it, or its coordinator is unavailable".into(),
            };
            (Some(format!("the {source} cannot be read ({why})")), true)
        } else if let Some(problem) = topic_problem {
            (Some(format!("the {source} {problem}")), true)
        } else if !unread.is_empty() {
            let named: Vec<String> = unread
                .iter()
                .take(NAMED_PARTITIONS)
                .map(|tp| tp.to_string())
                .collect();
            (
                Some(format!(
                    "the {source} does not read {}{} (its kafka_partitions): nothing there becomes due, its records are neither confirmed nor lost",
                    named.join(", "),
                    if unread.len() > NAMED_PARTITIONS {
                        format!(" and {} more", unread.len() - NAMED_PARTITIONS)
                    } else {
                        String::new()
                    }
                )),
                false,
            )
        } else if !vanished.is_empty() {
            (
                Some(vanished_reason(&source, job.is_some(), &vanished)),
                false,
            )
        } else if !self.parts.values().any(|p| p.ledger.pipeline.has_commits()) {
            let hint = if job.is_some() {
                "is pipeline.job spelt right? has the job committed its first task?"
            } else {
                "is pipeline_group spelt right? has the job completed its first checkpoint?"
            };
            (
                Some(format!(
                    "the {source} has no committed offset on any audited partition ({hint})"
                )),
                true,
            )
        } else {
            (None, false)
        };
        // An instance that owns nothing holds nothing back (a standby must not page).
        let up = reason.is_none();
        self.metrics.pipeline_group_up(up);
        match (&reason, &self.watch.pipeline.hold) {
            (Some(r), old) if old.as_ref() != Some(r) => {
                tracing::warn!(audit = %self.cfg.name, pipeline = %source,
                    "verdicts held back: {r}; nothing is declared missing until its commits are seen")
            }
            (None, Some(_)) => {
                tracing::info!(audit = %self.cfg.name, pipeline = %source,
                    "{source} commits read again: verdicts resume")
            }
            _ => {}
        }
        self.watch.pipeline.hold = reason;
        hold_all
    }

    pub(super) async fn poll_pipeline(&mut self) {
        let tps: Vec<TopicPartition> = self.parts.keys().cloned().collect();
        if tps.is_empty() {
            return;
        }
        let view = self.io.kafka_view.clone();
        let topics = self.cfg.topics.clone();
        let asked = tps.clone();
        let result = blocking(move || {
            // Each topic's partition count, for completeness answers to say how much of the
            // audit they cover. A failed lookup keeps the last count (a blip is not a shrink).
            let counts: Vec<(String, usize)> = topics
                .into_iter()
                .filter_map(|t| {
                    let n = view.partitions(&t).ok()?.len();
                    (n > 0).then_some((t, n))
                })
                .collect();
            let commits = match view.pipeline_committed(&asked) {
                Some(commits) => commits.map(Some),
                // Without a pipeline group, a metadata request proves the cluster answers.
                None => view.partitions(&asked[0].topic).map(|_| None),
            };
            commits.map(|c| (c, counts))
        })
        .await;
        let audit = self.cfg.name.clone();
        let job = match self.watch.pipeline.job.as_mut() {
            Some(j) => Some(j.poll(&audit).await),
            None => None,
        };
        // Stamped when the answer came: a commit made while the request was in flight is
        // seen no earlier than it happened, so `grace` is never counted from before it.
        let now = self.io.clock.now_ms();
        self.watch.pipeline.read_ok = match &job {
            Some(reading) => reading.is_some(),
            None => matches!(result, Ok((Some(_), _))),
        };
        if let Some(Some(reading)) = job {
            for tp in &tps {
                let (c, altered) = Self::job_position(&reading, tp);
                self.observe_pipeline(tp, c, now, altered);
            }
        }
        match result {
            Ok((commits, counts)) => {
                self.watch.topic_partitions.extend(counts);
                self.watch.health.last_kafka_ok = Some(Utc::now());
                if let Some(commits) = commits {
                    for (tp, c) in commits {
                        self.observe_pipeline(&tp, c, now, false);
                    }
                }
            }
            Err(e) => {
                tracing::warn!(audit = %self.cfg.name, error = %e, "cannot read from Kafka this round")
            }
        }
        let up = self.watch.health.last_kafka_ok.is_some_and(|t| {
            (Utc::now() - t).to_std().unwrap_or_default() <= self.cfg.verify_interval * 3
        });
        self.metrics.kafka_up(up);
    }

    /// Feeds one poll of the pipeline group's commit to the ledger and reports the events
    /// that are not loss: rewinds (reprocessing; duplicates expected) and stalls (no commit
    /// movement for `stall_after` while the log grows).
    pub(super) fn observe_pipeline(
        &mut self,
        tp: &TopicPartition,
        committed: Option<Offset>,
        now: i64,
        altered: bool,
    ) {
        let audit = self.cfg.name.clone();
        let group = self.position_source().unwrap_or_default();
        let stall_after = self.cfg.stall_after.as_millis() as i64;
        let Some(p) = self.parts.get_mut(tp) else {
            return;
        };
        // A commit beyond what the log holds cannot have passed over records not written
        // yet: capped at the log end (or what the auditor has read), later records become
        // due `grace` after they exist, never on arrival.
        // Uncapped while neither the log end nor an anchored position is known; steps and
        // causes always follow the real commit.
        let log_end = p.log.map(|(_, end)| end);
        let anchored = p.ledger.is_anchored().then(|| p.ledger.next_offset());
        let held = match (log_end, anchored) {
            (Some(e), Some(n)) => Some(e.max(n)),
            (e, n) => e.or(n),
        };
        let step = p
            .ledger
            .pipeline
            .observe_moved(now, committed, held, altered);
        if let Some(s) = step.filter(|s| s.is_rewind()) {
            self.metrics.partition(tp).pipeline_rewound();
            tracing::warn!(audit = %audit, %tp, from = s.from, to = s.to, pipeline = %group,
                "{group} rewound {tp} from {} to {}: it is re-reading, expect duplicates (not loss)", s.from, s.to);
        }
        let behind = matches!((committed, log_end), (Some(c), Some(end)) if end > c);
        let idle = p
            .ledger
            .pipeline
            .last_move_ms()
            .is_some_and(|t| now - t > stall_after);
        let stalled = behind && idle && step.is_none();
        if stalled && !p.stalled {
            self.metrics.partition(tp).pipeline_stalled();
            tracing::warn!(audit = %audit, %tp, committed = ?committed, log_end = ?log_end, pipeline = %group,
                "{group} has not committed on {tp} for {} s while the log grew: stalled (lag, not loss)",
                stall_after / 1000);
        } else if !stalled && p.stalled {
            tracing::info!(audit = %audit, %tp, pipeline = %group, "{group} commits on {tp} again");
        }
        p.stalled = stalled;
    }

    /// The pipeline's position source in words (`pipeline group "g"`, `Routine Load job
    /// "j"`), `None` without one (the time-only rule).
    pub(super) fn position_source(&self) -> Option<String> {
        match (&self.watch.pipeline.job, &self.cfg.pipeline_group) {
            (Some(j), _) => Some(format!("Routine Load job {:?}", j.job())),
            (None, Some(g)) => Some(format!("pipeline group {g:?}")),
            (None, None) => None,
        }
    }

    /// A partition's position in a read of the Routine Load job, and whether a move now is
    /// the job's own (src/routine_load/track.rs): the job reads one topic, named in its
    /// answer (an answer that names none gives no position: `hold_verdicts` says why); a
    /// partition its progress does not name has no commit.
    fn job_position(r: &Reading, tp: &TopicPartition) -> (Option<Offset>, bool) {
        if r.topic.as_deref() != Some(tp.topic.as_str()) {
            return (None, false);
        }
        r.positions
            .get(&tp.partition)
            .copied()
            .unwrap_or((None, false))
    }
}
