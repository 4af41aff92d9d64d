//! The pipeline group: its commits feed the due rule; rewinds and stalls are reported,
//! and verdicts are held back while its commits cannot be seen.

use super::{Audit, blocking::blocking};
use crate::gap::{Offset, TopicPartition};
use crate::sink::Verifier;
use chrono::Utc;

/// Whether the pipeline group's commits can be seen.
#[derive(Default)]
pub(super) struct PipelineWatch {
    /// The last read of the pipeline group's commits succeeded (with a pipeline group).
    pub(super) read_ok: bool,
    /// Why verdicts are held back (a configured pipeline group that cannot be read, has no
    /// commit, or whose commits disappeared), as last logged and shown in `/api/status`;
    /// `None` while they are not.
    pub(super) hold: Option<String>,
}

/// How many partitions a reason names before it says "and N more" (a log line, not a list).
const NAMED_PARTITIONS: usize = 5;

/// Why the pipeline group's commits cannot be used for verdicts, as logged and shown in
/// `/api/status`.
fn vanished_reason(group: &str, vanished: &[(TopicPartition, Offset)]) -> String {
    let mut named: Vec<String> = vanished
        .iter()
        .take(NAMED_PARTITIONS)
        .map(|(tp, last)| format!("{tp} (last commit seen {last})"))
        .collect();
    if vanished.len() > NAMED_PARTITIONS {
        named.push(format!("and {} more", vanished.len() - NAMED_PARTITIONS));
    }
    format!(
        "the pipeline group {group:?} had committed offsets that disappeared: Kafka answers no commit on {} (the group was deleted, or its offsets expired after offsets.retention.minutes with no member); verdicts on those partitions are held until it commits again",
        named.join(", ")
    )
}

impl<V: Verifier> Audit<V> {
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
        let Some(group) = self.cfg.pipeline_group.clone() else {
            return false;
        };
        let vanished: Vec<(TopicPartition, Offset)> = self
            .parts
            .iter()
            .filter_map(|(tp, p)| p.ledger.pipeline.vanished().map(|o| (tp.clone(), o)))
            .collect();
        let (reason, hold_all) = if self.parts.is_empty() {
            // Nothing assigned yet: nothing to hold, and nothing was read.
            (None, false)
        } else if !self.pipeline.read_ok {
            (
                Some(format!(
                    "the pipeline group {group:?} cannot be read (no DESCRIBE permission on it, or its coordinator is unavailable)"
                )),
                true,
            )
        } else if !vanished.is_empty() {
            (Some(vanished_reason(&group, &vanished)), false)
        } else if !self.parts.values().any(|p| p.ledger.pipeline.has_commits()) {
            (
                Some(format!(
                    "the pipeline group {group:?} has no committed offset on any audited partition (is pipeline_group spelt right? has the job completed its first checkpoint?)"
                )),
                true,
            )
        } else {
            (None, false)
        };
        // An instance that owns nothing holds nothing back (a standby must not page).
        let up = reason.is_none();
        self.metrics.pipeline_group_up(up);
        match (&reason, &self.pipeline.hold) {
            (Some(r), old) if old.as_ref() != Some(r) => {
                tracing::warn!(audit = %self.cfg.name, pipeline_group = %group,
                    "verdicts held back: {r}; nothing is declared missing until its commits are seen")
            }
            (None, Some(_)) => {
                tracing::info!(audit = %self.cfg.name, pipeline_group = %group,
                    "pipeline group commits read again: verdicts resume")
            }
            _ => {}
        }
        self.pipeline.hold = reason;
        hold_all
    }

    pub(super) async fn poll_pipeline(&mut self) {
        let tps: Vec<TopicPartition> = self.parts.keys().cloned().collect();
        if tps.is_empty() {
            return;
        }
        let view = self.kafka_view.clone();
        let topics = self.cfg.topics.clone();
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
            let commits = match view.pipeline_committed(&tps) {
                Some(commits) => commits.map(Some),
                // Without a pipeline group, a metadata request proves the cluster answers.
                None => view.partitions(&tps[0].topic).map(|_| None),
            };
            commits.map(|c| (c, counts))
        })
        .await;
        // Stamped when the answer came: a commit made while the request was in flight is
        // seen no earlier than it happened, so `grace` is never counted from before it.
        let now = self.clock.now_ms();
        self.pipeline.read_ok = matches!(result, Ok((Some(_), _)));
        match result {
            Ok((commits, counts)) => {
                self.topic_partitions.extend(counts);
                self.health.last_kafka_ok = Some(Utc::now());
                if let Some(commits) = commits {
                    for (tp, c) in commits {
                        self.observe_pipeline(&tp, c, now);
                    }
                }
            }
            Err(e) => {
                tracing::warn!(audit = %self.cfg.name, error = %e, "cannot read from Kafka this round")
            }
        }
        let up = self.health.last_kafka_ok.is_some_and(|t| {
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
    ) {
        let audit = self.cfg.name.clone();
        let group = self.cfg.pipeline_group.clone().unwrap_or_default();
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
        let step = p.ledger.pipeline.observe_capped(now, committed, held);
        if let Some(s) = step.filter(|s| s.is_rewind()) {
            self.metrics.partition(tp).pipeline_rewound();
            tracing::warn!(audit = %audit, %tp, from = s.from, to = s.to, pipeline_group = %group,
                "pipeline group {group} rewound {tp} from {} to {}: it is re-reading, expect duplicates (not loss)", s.from, s.to);
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
            tracing::warn!(audit = %audit, %tp, committed = ?committed, log_end = ?log_end, pipeline_group = %group,
                "pipeline group {group} has not committed on {tp} for {} s while the log grew: stalled (lag, not loss)",
                stall_after / 1000);
        } else if !stalled && p.stalled {
            tracing::info!(audit = %audit, %tp, pipeline_group = %group, "pipeline group {group} commits on {tp} again");
        }
        p.stalled = stalled;
    }
}
