//! The audit loop's metrics: one method per event, series handles looked up once.
//!
//! A handle is looked up on the event that first touches its series and kept from then on,
//! so every series appears exactly when the loop first reports it (a series that has never
//! been touched is absent from /metrics, as dashboards and alert tests expect), and the hot
//! paths (ingest, verdicts, gauges every round) never hash label strings again. Series the
//! loop removes (a gauge whose value became unknown, the gauges of a revoked partition)
//! drop their handle with them.

use super::Metrics;
use crate::ledger::Applied;
use crate::record::FilterReason;
use crate::types::TopicPartition;
use prometheus::{Gauge, Histogram, IntCounter, IntGauge};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// What one ingested batch added to one partition's counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Ingested {
    /// Records read (new offsets only).
    pub consumed: u64,
    /// Of those, records expected in the sink.
    pub expected: u64,
    /// Of those, records not expected, by [`FilterReason::ALL`] index.
    pub filtered: [u64; FilterReason::ALL.len()],
    /// Of those, records stamped ahead of the auditor's clock (clamped for completeness).
    pub future_ts: u64,
}

impl Ingested {
    /// Counts one new record: `None` is expected, `Some(reason)` filtered.
    pub fn add(&mut self, filtered: Option<FilterReason>) {
        self.consumed += 1;
        match filtered {
            None => self.expected += 1,
            Some(reason) => {
                let i = FilterReason::ALL
                    .iter()
                    .position(|r| *r == reason)
                    .unwrap_or(0);
                self.filtered[i] += 1;
            }
        }
    }

    /// Adds another batch's counts.
    pub fn merge(&mut self, other: &Ingested) {
        self.consumed += other.consumed;
        self.expected += other.expected;
        self.future_ts += other.future_ts;
        for (s, v) in self.filtered.iter_mut().zip(other.filtered) {
            *s += v;
        }
    }
}

/// The gauges of one partition, as one round publishes them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PartitionGauges {
    /// Expected records not yet due or verified.
    pub pending: u64,
    /// Records waiting for their schema.
    pub awaiting_schema: u64,
    /// Records in open gaps.
    pub missing: u64,
    /// Open gaps.
    pub gaps_open: u64,
    /// Seconds until retention deletes the oldest open gap's records; `None`: no series.
    pub unrecoverable_seconds: Option<f64>,
    /// The next offset the auditor reads.
    pub consumed_offset: i64,
    /// The settled watermark.
    pub settled_offset: i64,
    /// The pipeline group's commit, once seen.
    pub pipeline_committed: Option<i64>,
    /// The log end, once known.
    pub log_end: Option<i64>,
}

/// Locks a mutex whose data stays valid whatever a panicking holder did (handles only).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The metrics of one audit.
/// One handle per audit-level metric family, resolved at its first use so that later
/// events cost no label lookup.
pub struct AuditMetrics {
    families: Arc<Metrics>,
    audit: String,
    sink_ok: OnceLock<IntCounter>,
    sink_error: OnceLock<IntCounter>,
    sink_seconds: OnceLock<Histogram>,
    sink_up: OnceLock<IntGauge>,
    kafka_up: OnceLock<IntGauge>,
    pipeline_group_up: OnceLock<IntGauge>,
    schema_registry_up: OnceLock<IntGauge>,
    missing_keys_dropped: OnceLock<IntCounter>,
    gaps_folded: OnceLock<IntCounter>,
    complete_until: Mutex<Option<Gauge>>,
    gaps_detected: Mutex<HashMap<&'static str, IntCounter>>,
    partitions: Mutex<HashMap<TopicPartition, Arc<PartitionMetrics>>>,
}

impl std::fmt::Debug for AuditMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditMetrics")
            .field("audit", &self.audit)
            .finish_non_exhaustive()
    }
}

impl AuditMetrics {
    /// The metrics of `audit`, on `families`.
    pub fn new(families: Arc<Metrics>, audit: &str) -> Self {
        AuditMetrics {
            families,
            audit: audit.to_string(),
            sink_ok: OnceLock::new(),
            sink_error: OnceLock::new(),
            sink_seconds: OnceLock::new(),
            sink_up: OnceLock::new(),
            kafka_up: OnceLock::new(),
            pipeline_group_up: OnceLock::new(),
            schema_registry_up: OnceLock::new(),
            missing_keys_dropped: OnceLock::new(),
            gaps_folded: OnceLock::new(),
            complete_until: Mutex::new(None),
            gaps_detected: Mutex::new(HashMap::new()),
            partitions: Mutex::new(HashMap::new()),
        }
    }

    /// The families these handles belong to.
    pub fn families(&self) -> &Arc<Metrics> {
        &self.families
    }

    /// The metrics of one partition of this audit.
    pub fn partition(&self, tp: &TopicPartition) -> Arc<PartitionMetrics> {
        let mut parts = lock(&self.partitions);
        if let Some(p) = parts.get(tp) {
            return p.clone();
        }
        let p = Arc::new(PartitionMetrics::new(
            self.families.clone(),
            &self.audit,
            tp,
        ));
        parts.insert(tp.clone(), p.clone());
        p
    }

    /// A partition moved to another instance: its gauges go (the new owner publishes them),
    /// its counters stay (summed over the group's instances they are the truth).
    pub fn partition_revoked(&self, tp: &TopicPartition) {
        lock(&self.partitions).remove(tp);
        self.families
            .remove_partition_gauges(&self.audit, &tp.topic, tp.partition);
    }

    /// [`Self::sink_query`] as the observer the verification calls after each query.
    pub fn query_observer(&self) -> impl Fn(Duration, bool) + Send + Sync + '_ {
        move |took, ok| self.sink_query(took, ok)
    }

    /// One sink query answered (`ok`) or failed, after `took`.
    pub fn sink_query(&self, took: Duration, ok: bool) {
        let (cell, result) = if ok {
            (&self.sink_ok, "ok")
        } else {
            (&self.sink_error, "error")
        };
        cell.get_or_init(|| {
            self.families
                .sink_queries
                .with_label_values(&[&self.audit, result])
        })
        .inc();
        self.sink_seconds
            .get_or_init(|| {
                self.families
                    .sink_query_seconds
                    .with_label_values(&[&self.audit])
            })
            .observe(took.as_secs_f64());
    }

    /// Whether the sink answered this round.
    pub fn sink_up(&self, up: bool) {
        self.audit_gauge(&self.sink_up, &self.families.sink_up)
            .set(i64::from(up));
    }

    /// Whether Kafka answered recently.
    pub fn kafka_up(&self, up: bool) {
        self.audit_gauge(&self.kafka_up, &self.families.kafka_up)
            .set(i64::from(up));
    }

    /// Whether the pipeline group's commits could be read (`false` holds verdicts back).
    pub fn pipeline_group_up(&self, up: bool) {
        self.audit_gauge(&self.pipeline_group_up, &self.families.pipeline_group_up)
            .set(i64::from(up));
    }

    /// Whether the last schema registry fetch succeeded.
    pub fn schema_registry_up(&self, up: bool) {
        self.audit_gauge(&self.schema_registry_up, &self.families.schema_registry_up)
            .set(i64::from(up));
    }

    /// key_columns: distinct due keys counted from reads by time and key by key.
    pub fn due_keys_counted(&self, by_time: u64, by_key: u64) {
        for (how, n) in [("time", by_time), ("key", by_key)] {
            if n > 0 {
                self.families
                    .due_keys_counted
                    .with_label_values(&[&self.audit, how])
                    .inc_by(n);
            }
        }
    }

    /// `n` keys of missing records dropped beyond `max_missing_keys`.
    pub fn missing_keys_dropped(&self, n: u64) {
        self.missing_keys_dropped
            .get_or_init(|| {
                self.families
                    .missing_keys_dropped
                    .with_label_values(&[&self.audit])
            })
            .inc_by(n);
    }

    /// `n` gaps folded into overflow gaps beyond `max_open_gaps` (counted once stored).
    pub fn gaps_folded(&self, n: u64) {
        self.gaps_folded
            .get_or_init(|| self.families.gaps_folded.with_label_values(&[&self.audit]))
            .inc_by(n);
    }

    /// `tp`'s log no longer held the auditor's position (`kind`: `truncated`, `recreated`).
    /// Rare: the series is looked up each time.
    pub fn log_diverged(&self, tp: &TopicPartition, kind: &str) {
        let partition = tp.partition.to_string();
        self.families
            .log_divergences
            .with_label_values(&[&self.audit, &tp.topic, &partition, kind])
            .inc();
    }

    /// A new gap, by cause (counted once the store holds it).
    pub fn gap_detected(&self, cause: &'static str) {
        lock(&self.gaps_detected)
            .entry(cause)
            .or_insert_with(|| {
                self.families
                    .gaps_detected
                    .with_label_values(&[&self.audit, cause])
            })
            .inc();
    }

    /// The record time the sink is proven complete up to; `None` (unknown) removes the
    /// series rather than exporting 1970.
    pub fn complete_until(&self, ms: Option<i64>) {
        let mut slot = lock(&self.complete_until);
        match ms {
            Some(ms) => slot
                .get_or_insert_with(|| {
                    self.families
                        .complete_until_timestamp_seconds
                        .with_label_values(&[&self.audit])
                })
                .set(ms as f64 / 1000.0),
            None => {
                *slot = None;
                let _ = self
                    .families
                    .complete_until_timestamp_seconds
                    .remove_label_values(&[&self.audit]);
            }
        }
    }

    fn audit_gauge<'a>(
        &self,
        cell: &'a OnceLock<IntGauge>,
        family: &prometheus::IntGaugeVec,
    ) -> &'a IntGauge {
        cell.get_or_init(|| family.with_label_values(&[&self.audit]))
    }
}

/// The metrics of one partition of one audit.
/// One handle per partition-level metric family, resolved at its first use so that later
/// events cost no label lookup.
pub struct PartitionMetrics {
    families: Arc<Metrics>,
    /// audit, topic, partition.
    labels: [String; 3],
    consumed: OnceLock<IntCounter>,
    expected: OnceLock<IntCounter>,
    filtered: [OnceLock<IntCounter>; FilterReason::ALL.len()],
    verdicts: OnceLock<Verdicts>,
    rewinds: OnceLock<IntCounter>,
    stalls: OnceLock<IntCounter>,
    future_ts: OnceLock<IntCounter>,
    gauges: OnceLock<Gauges>,
    pipeline_committed: OnceLock<IntGauge>,
    log_end: OnceLock<IntGauge>,
    unrecoverable: Mutex<Option<Gauge>>,
}

/// The verdict counters, touched together.
struct Verdicts {
    confirmed: IntCounter,
    lost: IntCounter,
    unverifiable: IntCounter,
    late: IntCounter,
    acknowledged: IntCounter,
    duplicated: IntCounter,
    dead_lettered: IntCounter,
    visibility: Histogram,
}

/// The gauges every round sets.
struct Gauges {
    pending: IntGauge,
    awaiting_schema: IntGauge,
    missing: IntGauge,
    gaps_open: IntGauge,
    consumed_offset: IntGauge,
    settled_offset: IntGauge,
}

impl PartitionMetrics {
    fn new(families: Arc<Metrics>, audit: &str, tp: &TopicPartition) -> Self {
        PartitionMetrics {
            families,
            labels: [
                audit.to_string(),
                tp.topic.clone(),
                tp.partition.to_string(),
            ],
            consumed: OnceLock::new(),
            expected: OnceLock::new(),
            filtered: Default::default(),
            verdicts: OnceLock::new(),
            rewinds: OnceLock::new(),
            stalls: OnceLock::new(),
            future_ts: OnceLock::new(),
            gauges: OnceLock::new(),
            pipeline_committed: OnceLock::new(),
            log_end: OnceLock::new(),
            unrecoverable: Mutex::new(None),
        }
    }

    fn l(&self) -> [&str; 3] {
        [&self.labels[0], &self.labels[1], &self.labels[2]]
    }

    fn counter<'a>(
        &self,
        cell: &'a OnceLock<IntCounter>,
        family: &prometheus::IntCounterVec,
    ) -> &'a IntCounter {
        cell.get_or_init(|| family.with_label_values(&self.l()))
    }

    fn gauge<'a>(
        &self,
        cell: &'a OnceLock<IntGauge>,
        family: &prometheus::IntGaugeVec,
    ) -> &'a IntGauge {
        cell.get_or_init(|| family.with_label_values(&self.l()))
    }

    /// A batch was read (consumed and expected always; each filter reason once it occurs).
    pub fn ingested(&self, c: &Ingested) {
        let f = &self.families;
        self.counter(&self.consumed, &f.records_consumed)
            .inc_by(c.consumed);
        self.counter(&self.expected, &f.records_expected)
            .inc_by(c.expected);
        if c.future_ts > 0 {
            self.counter(&self.future_ts, &f.records_future_timestamp)
                .inc_by(c.future_ts);
        }
        for (i, reason) in FilterReason::ALL.iter().enumerate() {
            if c.filtered[i] > 0 {
                self.filtered[i]
                    .get_or_init(|| {
                        let [a, t, p] = self.l();
                        f.records_filtered
                            .with_label_values(&[a, t, p, reason.as_str()])
                    })
                    .inc_by(c.filtered[i]);
            }
        }
    }

    /// The verdict counters, created together (all at 0) on the partition's first verdict:
    /// the acknowledged counter then exists before its first increment, which
    /// `increase()` would otherwise not see.
    fn verdicts(&self) -> &Verdicts {
        self.verdicts.get_or_init(|| {
            let f = &self.families;
            let l = self.l();
            Verdicts {
                confirmed: f.records_confirmed.with_label_values(&l),
                lost: f.records_lost.with_label_values(&l),
                unverifiable: f.records_unverifiable.with_label_values(&l),
                late: f.records_late.with_label_values(&l),
                acknowledged: f.records_acknowledged.with_label_values(&l),
                duplicated: f.records_duplicated.with_label_values(&l),
                dead_lettered: f.records_dead_lettered.with_label_values(&l),
                visibility: f.sink_visibility_seconds.with_label_values(&[l[0], l[1]]),
            }
        })
    }

    /// `records` missing records of a gap just acknowledged, taken in by this daemon.
    pub fn acknowledged(&self, records: u64) {
        self.verdicts().acknowledged.inc_by(records);
    }

    /// Verdicts the store now holds, decided at `now` (ms): counted, and each confirmed
    /// record's time to visibility observed.
    pub fn decided(&self, a: &Applied, now: i64) {
        let v = self.verdicts();
        v.confirmed.inc_by(a.confirmed);
        v.lost.inc_by(a.lost);
        v.unverifiable.inc_by(a.unverifiable);
        v.late.inc_by(a.late);
        v.duplicated.inc_by(a.duplicates);
        v.dead_lettered.inc_by(a.dead_lettered);
        // Observed locally and added once: a key_columns round confirms its records one
        // run each (hundreds of thousands), and an observation of the shared histogram is
        // three atomic updates.
        let local = v.visibility.local();
        for (ts, n) in &a.confirmed_ts {
            if let Some(ts) = ts {
                let secs = (now - ts).max(0) as f64 / 1000.0;
                for _ in 0..*n {
                    local.observe(secs);
                }
            }
        }
        local.flush();
    }

    /// The pipeline group's commit moved backwards.
    pub fn pipeline_rewound(&self) {
        self.counter(&self.rewinds, &self.families.pipeline_rewinds)
            .inc();
    }

    /// The pipeline group stopped committing while the log grew.
    pub fn pipeline_stalled(&self) {
        self.counter(&self.stalls, &self.families.pipeline_stalls)
            .inc();
    }

    /// One round's gauges.
    pub fn published(&self, g: &PartitionGauges) {
        let f = &self.families;
        let gauges = self.gauges.get_or_init(|| {
            let l = self.l();
            Gauges {
                pending: f.records_pending.with_label_values(&l),
                awaiting_schema: f.records_awaiting_schema.with_label_values(&l),
                missing: f.records_missing.with_label_values(&l),
                gaps_open: f.gaps_open.with_label_values(&l),
                consumed_offset: f.consumed_offset.with_label_values(&l),
                settled_offset: f.settled_offset.with_label_values(&l),
            }
        });
        gauges.pending.set(g.pending as i64);
        gauges.awaiting_schema.set(g.awaiting_schema as i64);
        gauges.missing.set(g.missing as i64);
        gauges.gaps_open.set(g.gaps_open as i64);
        {
            let mut slot = lock(&self.unrecoverable);
            match g.unrecoverable_seconds {
                Some(secs) => slot
                    .get_or_insert_with(|| f.gap_unrecoverable_seconds.with_label_values(&self.l()))
                    .set(secs),
                None => {
                    *slot = None;
                    let _ = f.gap_unrecoverable_seconds.remove_label_values(&self.l());
                }
            }
        }
        gauges.consumed_offset.set(g.consumed_offset);
        gauges.settled_offset.set(g.settled_offset);
        if let Some(c) = g.pipeline_committed {
            self.gauge(&self.pipeline_committed, &f.pipeline_committed_offset)
                .set(c);
        }
        if let Some(end) = g.log_end {
            self.gauge(&self.log_end, &f.log_end_offset).set(end);
        }
    }
}
