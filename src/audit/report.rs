//! Report: counters once the store holds what they count, gauges, retention deadlines and
//! the status board.

use super::*;

impl<V: Verifier> Audit<V> {
    /// Adds the verdicts and gaps the store now holds to the counters (see `uncounted`).
    pub(super) fn count_persisted(&mut self) {
        for (tp, applied, decided_at) in std::mem::take(&mut self.uncounted) {
            self.metrics.partition(&tp).decided(&applied, decided_at);
        }
        for (_, cause) in std::mem::take(&mut self.uncounted_causes) {
            self.metrics.gap_detected(cause);
        }
    }

    /// Reads the topics' retention settings (at start, then every 10 minutes).
    pub(super) async fn refresh_retention(&mut self) {
        if self
            .retention_read_at
            .is_some_and(|t| t.elapsed() < RETENTION_REFRESH)
        {
            return;
        }
        self.retention_read_at = Some(std::time::Instant::now());
        let Some(admin) = &self.admin else { return };
        for topic in &self.cfg.topics {
            match retention::describe(admin, topic).await {
                Ok(r) => {
                    if r.compact {
                        tracing::info!(audit = %self.cfg.name, topic, "compacted topic: a replay can only recover each key's latest record");
                    }
                    self.retention.insert(topic.clone(), r);
                }
                // A property of the broker that every refresh would find again: not a warning.
                Err(retention::RetentionError::Unsupported) => {
                    tracing::info!(audit = %self.cfg.name, topic,
                    "the broker does not implement DescribeConfigs: gap deadlines unknown, the log start is still watched")
                }
                Err(e) => tracing::warn!(audit = %self.cfg.name, topic, error = %e,
                    "cannot read the topic's retention (DescribeConfigs): gap deadlines unknown, the log start is still watched"),
            }
        }
    }

    /// Gaps whose first record Kafka deleted (the log start passed them) become
    /// unrecoverable.
    pub(super) fn watch_log_start(&mut self) {
        let now = self.clock.now_ms();
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
        if let Some(r) = self.decoder.registry()
            && let Some(h) = r.health()
        {
            self.metrics.schema_registry_up(h.is_ok());
        }
        let watermarks = self.watermarks();
        let audit = self.cfg.name.clone();
        let mut partitions = Vec::new();
        let mut completeness = Vec::with_capacity(self.parts.len());
        for (tp, part) in self.parts.iter_mut() {
            if let Some(w) = watermarks.get(tp) {
                part.log = Some(*w);
            }
            // Caught up only against the log end learnt while fetching (librdkafka's
            // statistics): the start-up lookup may be stale, and on tansu it is too low.
            let caught_up = part.ledger.is_anchored()
                && watermarks
                    .get(tp)
                    .is_some_and(|(_, end)| part.ledger.next_offset() >= *end);
            completeness.push(crate::completeness::PartitionInput {
                topic: tp.topic.clone(),
                partition: tp.partition,
                ledger: part.ledger.completeness(),
                caught_up,
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
                gauges.oldest_undeleted_ts.and_then(|ts| {
                    self.retention
                        .get(&tp.topic)
                        .and_then(|r| r.deadline_ms(Some(ts)))
                }),
            ];
            // Open gaps without a known deletion time (retention unknown, infinite, or a
            // compacted topic) export +Inf: never alerting, yet visible.
            let unrecoverable_seconds =
                match retention::seconds_left(deadlines, self.clock.now_ms()) {
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
                pipeline_committed: led.pipeline.latest(),
                log_end: part.log.map(|(_, end)| end),
            });
            partitions.push(PartitionStatus {
                topic: tp.topic.clone(),
                partition: tp.partition,
                consumed: led.next_offset(),
                settled: led.settled(),
                pipeline_committed: led.pipeline.latest(),
                log_end: part.log.map(|(_, e)| e),
                log_start: part.log.map(|(s, _)| s).filter(|s| *s >= 0),
                pending: led.pending(),
                missing: led.missing(),
                paused: self.flow.is_paused(tp),
                awaiting_schema: part.held.len() as u64,
            });
        }
        let completeness = crate::completeness::evaluate(
            &audit,
            &completeness,
            self.clock.now_ms(),
            self.completeness_horizon_ms(),
        );
        // Unknown is not "complete up to 1970": no series, so a lag panel shows no data
        // rather than 55 years (GapAuditorCompletenessLag covers a lasting absence).
        self.metrics.complete_until(completeness.complete_until_ms);
        self.status.update(AuditStatus {
            audit,
            consumer_group: self.group.clone(),
            pipeline_group: self.cfg.pipeline_group.clone(),
            sink_kind: self.sink.kind().to_string(),
            sink_state: self.sink_state,
            sink_error: self.sink_error.clone(),
            last_sink_ok: self.last_sink_ok,
            last_kafka_ok: self.last_kafka_ok,
            verify_interval_ms: self.cfg.verify_interval.as_millis() as u64,
            schema_registry_error: self
                .decoder
                .registry()
                .and_then(|r| r.health())
                .and_then(Result::err),
            partitions,
            completeness,
        });
    }

    /// How long a record produced to an idle partition may take to be seen: grace (the
    /// producer's delivery is assumed shorter), plus the age of the log end the auditor
    /// knows (librdkafka's statistics interval) and of the published round.
    pub(super) fn completeness_horizon_ms(&self) -> i64 {
        let d = self.cfg.grace + self.kafka.statistics_interval() + self.cfg.verify_interval;
        i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
    }
}
