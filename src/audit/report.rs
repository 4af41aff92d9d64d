//! Report: counters once the store holds what they count, gauges, retention deadlines and
//! the status board.

use super::pipeline::PipelineWatch;
use super::{Audit, RETENTION_REFRESH};
use crate::kafka::retention;
use crate::kafka::retention::Retention;
use crate::metrics::PartitionGauges;
use crate::sink::{SinkError, Verifier};
use crate::status::{AuditStatus, PartitionStatus, SinkState};
use chrono::{DateTime, Utc};
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use std::collections::{BTreeMap, HashMap};

/// What the audit watches besides its partitions: topic retention (gap deadlines), whether
/// the sink and Kafka answer, the pipeline group, and the audited topics' partitions.
pub(super) struct Watches {
    /// Topic retention, for gap deadlines.
    pub(super) retention: RetentionWatch,
    /// Whether the sink and Kafka answer.
    pub(super) health: Health,
    /// The pipeline group's readability (pipeline.rs).
    pub(super) pipeline: PipelineWatch,
    /// Partitions per audited topic, from Kafka's metadata every round (pipeline.rs): the
    /// completeness answer says how many there are, so that answers of several instances
    /// can be checked for a partition none of them covers.
    pub(super) topic_partitions: BTreeMap<String, usize>,
}

impl Watches {
    /// Nothing watched yet; `admin` reads topic retention (`None`: deadlines unknown).
    pub(super) fn new(admin: Option<AdminClient<DefaultClientContext>>) -> Self {
        Self {
            retention: RetentionWatch::new(admin),
            health: Health::default(),
            pipeline: PipelineWatch::default(),
            topic_partitions: BTreeMap::new(),
        }
    }
}

/// Whether the sink and Kafka answer, for the status board.
#[derive(Default)]
pub(super) struct Health {
    pub(super) sink_state: SinkState,
    pub(super) sink_error: Option<String>,
    pub(super) last_sink_ok: Option<DateTime<Utc>>,
    pub(super) last_kafka_ok: Option<DateTime<Utc>>,
}

/// Topic retention settings, for the deadline of each gap.
pub(super) struct RetentionWatch {
    /// Admin client for DescribeConfigs (`None`: deadlines unknown).
    pub(super) admin: Option<AdminClient<DefaultClientContext>>,
    /// Retention settings per topic, refreshed every [`RETENTION_REFRESH`].
    pub(super) topics: HashMap<String, Retention>,
    pub(super) read_at: Option<std::time::Instant>,
}

impl Health {
    /// Records how the sink answered this round (`failure`: it did not); logs the changes.
    /// Returns whether it is up.
    pub(super) fn sink_answered(&mut self, audit: &str, failure: Option<&SinkError>) -> bool {
        match failure {
            Some(e) => {
                if self.sink_state != SinkState::Down {
                    tracing::warn!(audit = %audit, error = %e, "sink unreachable: nothing is declared missing until it answers");
                }
                self.sink_state = SinkState::Down;
                self.sink_error = Some(e.to_string());
            }
            None => {
                if self.sink_state == SinkState::Down {
                    tracing::info!(audit = %audit, "sink answers again");
                }
                self.sink_state = SinkState::Up;
                self.sink_error = None;
                self.last_sink_ok = Some(Utc::now());
            }
        }
        self.sink_state == SinkState::Up
    }
}

impl RetentionWatch {
    pub(super) fn new(admin: Option<AdminClient<DefaultClientContext>>) -> Self {
        RetentionWatch {
            admin,
            topics: HashMap::new(),
            read_at: None,
        }
    }

    /// When retention deletes a record of `topic` with timestamp `ts` (time-based only).
    pub(super) fn deadline_ms(&self, topic: &str, ts: Option<i64>) -> Option<i64> {
        self.topics.get(topic)?.deadline_ms(ts)
    }

    /// Reads the topics' retention settings (at start, then every [`RETENTION_REFRESH`]).
    pub(super) async fn refresh(&mut self, audit: &str, topics: &[String]) {
        if self
            .read_at
            .is_some_and(|t| t.elapsed() < RETENTION_REFRESH)
        {
            return;
        }
        self.read_at = Some(std::time::Instant::now());
        let Some(admin) = &self.admin else { return };
        for topic in topics {
            match retention::describe(admin, topic).await {
                Ok(r) => {
                    if r.compact {
                        tracing::info!(audit = %audit, topic, "compacted topic: a replay can only recover each key's latest record");
                    }
                    self.topics.insert(topic.clone(), r);
                }
                // A property of the broker that every refresh would find again: not a warning.
                Err(retention::RetentionError::Unsupported) => {
                    tracing::info!(audit = %audit, topic,
                    "the broker does not implement DescribeConfigs: gap deadlines unknown, the log start is still watched")
                }
                Err(e) => tracing::warn!(audit = %audit, topic, error = %e,
                    "cannot read the topic's retention (DescribeConfigs): gap deadlines unknown, the log start is still watched"),
            }
        }
    }
}

impl Audit {
    /// Adds the verdicts and gaps the store now holds to the counters (see `uncounted`).
    pub(super) fn count_persisted(&mut self) {
        for (tp, applied, decided_at) in std::mem::take(&mut self.persisting.writes.verdicts) {
            self.metrics.partition(&tp).decided(&applied, decided_at);
        }
        for (_, cause) in std::mem::take(&mut self.persisting.writes.causes) {
            self.metrics.gap_detected(cause);
        }
        let folded = std::mem::take(&mut self.persisting.writes.folded);
        if folded > 0 {
            self.metrics.gaps_folded(folded);
        }
    }

    /// Gaps whose first record Kafka deleted (the log start passed them) become
    /// unrecoverable.
    pub(super) fn watch_log_start(&mut self) {
        let now = self.io.clock.now_ms();
        let watermarks = self.watermarks();
        let mut changed = Vec::new();
        for (tp, part) in self.parts.iter_mut() {
            if let Some(w) = watermarks.get(tp) {
                part.log = Some(*w);
            }
            if let Some((start, _)) = part.log
                && start > 0
                && part.ledger.log_start_moved(start, now)
            {
                changed.push((tp.clone(), part.ledger.take_dirty_gaps()));
            }
        }
        for (tp, gaps) in changed {
            for g in gaps {
                self.report_gap(&tp, &g);
            }
        }
    }

    /// Refreshes gauges and the status board.
    pub(super) fn publish(&mut self) {
        if let Some(r) = self.io.decoder.registry()
            && let Some(h) = r.health()
        {
            self.metrics.schema_registry_up(h.is_ok());
        }
        let watermarks = self.watermarks();
        let last_stable = self.last_stable();
        let now_ms = self.io.clock.now_ms();
        let audit = self.cfg.name.clone();
        let mut partitions = Vec::new();
        let mut completeness = Vec::with_capacity(self.parts.len());
        for (tp, part) in self.parts.iter_mut() {
            if let Some(w) = watermarks.get(tp) {
                part.log = Some(*w);
            }
            // Caught up only against the log end learnt while fetching (librdkafka's
            // statistics): the start-up lookup may be stale, and on tansu it is too low.
            // The ledger's next offset follows the consumer's position too (`read_to.rs`),
            // so a log ending in a transaction marker or an aborted batch is read to its end.
            let caught_up = part.ledger.is_anchored()
                && watermarks
                    .get(tp)
                    .is_some_and(|(_, end)| part.ledger.next_offset() >= *end);
            let transaction = part.transaction.observe(
                last_stable.get(tp).copied(),
                watermarks.get(tp).map(|(_, end)| *end),
                part.ledger.next_offset(),
                self.tail.flow.is_paused(tp),
                now_ms,
            );
            completeness.push(crate::completeness::PartitionInput {
                topic: tp.topic.clone(),
                partition: tp.partition,
                ledger: part.ledger.completeness(),
                caught_up,
                unread_cause: transaction
                    .filter(|_| !caught_up)
                    .map(|h| h.describe(now_ms)),
            });
            // Acknowledged gaps left the ledger (they stop alerting); the countdown covers
            // the open ones: 0 once Kafka deleted one, no series without any. Unverifiable
            // ranges (deleted unread) are not missing records: nobody knows whether they
            // were written (GapAuditorRecordsUnverifiable covers them). Cached in the
            // ledger: an idle round does not walk every gap.
            let gauges = part.ledger.gauges();
            let led = &part.ledger;
            let deadlines = [
                gauges.deleted_ms,
                gauges
                    .oldest_undeleted_ts
                    .and_then(|ts| self.watch.retention.deadline_ms(&tp.topic, Some(ts))),
            ];
            // Open gaps without a known deletion time (retention unknown, infinite, or a
            // compacted topic) export +Inf: never alerting, yet visible.
            let unrecoverable_seconds =
                match retention::seconds_left(deadlines, self.io.clock.now_ms()) {
                    Some(secs) => Some(secs),
                    None if gauges.open > 0 => Some(f64::INFINITY),
                    None => None,
                };
            self.metrics.partition(tp).published(&PartitionGauges {
                pending: led.pending(),
                awaiting_schema: part.held.len() as u64,
                missing: gauges.missing,
                gaps_open: gauges.open,
                unrecoverable_seconds,
                consumed_offset: led.next_offset(),
                settled_offset: led.settled(),
                pipeline_committed: led.pipeline.current(),
                log_end: part.log.map(|(_, end)| end),
            });
            partitions.push(PartitionStatus {
                topic: tp.topic.clone(),
                partition: tp.partition,
                consumed: led.next_offset(),
                settled: led.settled(),
                pipeline_committed: led.pipeline.current(),
                log_end: part.log.map(|(_, e)| e),
                log_start: part.log.map(|(s, _)| s).filter(|s| *s >= 0),
                pending: led.pending(),
                missing: led.missing(),
                paused: self.tail.flow.is_paused(tp),
                awaiting_schema: part.held.len() as u64,
                state_problem: part.state_problem.clone(),
                divergence: part.divergence.clone(),
                pipeline_commits: led.pipeline.recent_steps(crate::status::COMMIT_TIMELINE),
                transaction_hold: transaction,
            });
        }
        let mut completeness = crate::completeness::evaluate(
            &audit,
            &completeness,
            self.io.clock.now_ms(),
            self.completeness_horizon_ms(),
        );
        completeness.topic_partitions = self.watch.topic_partitions.clone();
        // Unknown is not "complete up to 1970": no series, so a lag panel shows no data
        // rather than 55 years (GapAuditorCompletenessLag covers a lasting absence).
        self.metrics.complete_until(completeness.complete_until_ms);
        self.io.status.update(AuditStatus {
            audit,
            consumer_group: self.io.group.clone(),
            pipeline_group: self.cfg.pipeline_group.clone(),
            pipeline_group_hold: self.watch.pipeline.hold.clone(),
            pipeline_job: self.watch.pipeline.job.as_ref().map(|j| j.job().to_owned()),
            pipeline_job_state: self
                .watch
                .pipeline
                .job
                .as_ref()
                .and_then(|j| j.not_consuming().map(str::to_owned)),
            sink_table_hold: self.shared_table_hold(),
            dead_letters: self.dead_letter_status(),
            flink: self.evidence.flink.as_ref().map(|f| f.status()),
            connect: self.evidence.connect.as_ref().map(|c| c.status()),
            stream_load: self.evidence.stream_load.as_ref().map(|s| s.status()),
            sink_kind: self.io.sink.kind().to_string(),
            sink_state: self.watch.health.sink_state,
            sink_error: self.watch.health.sink_error.clone(),
            last_sink_ok: self.watch.health.last_sink_ok,
            last_kafka_ok: self.watch.health.last_kafka_ok,
            verify_interval_ms: self.cfg.verify_interval.as_millis() as u64,
            schema_registry_error: self
                .io
                .decoder
                .registry()
                .and_then(|r| r.health())
                .and_then(Result::err),
            sink_model: self
                .io
                .decoder
                .key_domain()
                .map(|d| crate::status::SinkModel {
                    key_columns: d.clone(),
                    key_semantics: self
                        .checker
                        .book()
                        .map(|b| b.semantics())
                        .unwrap_or_default(),
                }),
            partitions,
            completeness,
        });
    }

    /// The dead-letter reader's state for `/api/status`.
    fn dead_letter_status(&self) -> Option<crate::status::DeadLetterStatus> {
        let topic = self.cfg.pipeline.dead_letter_topic.clone()?;
        let d = self.io.dead_letters.as_ref()?;
        let ms = d.caught_up_ms();
        Some(crate::status::DeadLetterStatus {
            topic,
            read_through: (ms > 0)
                .then(|| DateTime::<Utc>::from_timestamp_millis(ms))
                .flatten(),
            coordinates: d.lock().len(),
            problem: d.problem(),
        })
    }

    /// How long a record produced to an idle partition may take to be seen: grace (the
    /// producer's delivery is assumed shorter), plus the age of the log end the auditor
    /// knows (librdkafka's statistics interval) and of the published round.
    pub(super) fn completeness_horizon_ms(&self) -> i64 {
        let d = self.cfg.grace + self.io.kafka.statistics_interval() + self.cfg.verify_interval;
        i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
    }
}
