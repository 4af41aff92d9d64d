//! Live status of every audit, shared between the audit loops (writers) and the HTTP
//! server (`/api/status`, `/readyz`).
//!
//! Each audit loop publishes a whole [`AuditStatus`] after a round rather than patching
//! fields: readers always see one round's consistent picture, and the lock is held only for
//! a map insert. Nothing here may hold a secret: `/api/status` serializes it verbatim, so
//! callers redact sink error texts before they get here.

use crate::completeness::AuditCompleteness;
use crate::gap::Offset;
use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Shortest readiness window: a very short verify interval must not make `/readyz` flap on
/// ordinary scheduling jitter.
const MIN_READY_WINDOW: TimeDelta = TimeDelta::seconds(10);

/// Whether the sink answered the last query.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkState {
    /// The last sink query succeeded.
    Up,
    /// The last sink query failed.
    Down,
    /// No sink query yet.
    #[default]
    Unknown,
}

/// Status of one audit, as published after each round.
#[derive(Debug, Clone, Serialize)]
pub struct AuditStatus {
    /// Audit name.
    pub audit: String,
    /// The auditor's own consumer group.
    pub consumer_group: String,
    /// The pipeline's consumer group, when configured.
    pub pipeline_group: Option<String>,
    /// Sink kind (`doris`, `mysql`, `elasticsearch`).
    pub sink_kind: String,
    /// Whether the last sink query succeeded.
    pub sink_state: SinkState,
    /// Text of the last sink error. Callers must redact secrets before setting it.
    pub sink_error: Option<String>,
    /// When a sink query last succeeded.
    pub last_sink_ok: Option<DateTime<Utc>>,
    /// When Kafka last answered.
    pub last_kafka_ok: Option<DateTime<Utc>>,
    /// The audit's verify interval, in milliseconds.
    pub verify_interval_ms: u64,
    /// avro/protobuf: the error of the last schema fetch, when it failed (records wait,
    /// unknown, until it succeeds). Left out of the JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema_registry_error: Option<String>,
    /// Per assigned partition.
    pub partitions: Vec<PartitionStatus>,
    /// Completeness as of this round (SPEC "Completeness"): `/api/completeness` answers from
    /// it; `/api/status` shows only its time, as `complete_until`.
    #[serde(rename = "complete_until", serialize_with = "complete_until")]
    pub completeness: AuditCompleteness,
}

fn complete_until<S: serde::Serializer>(c: &AuditCompleteness, s: S) -> Result<S::Ok, S::Error> {
    use chrono::TimeZone;
    let t = c
        .complete_until_ms
        .and_then(|ms| Utc.timestamp_millis_opt(ms).single());
    serde::Serialize::serialize(&t, s)
}

/// Status of one partition of an audit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionStatus {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Next offset the auditor will read.
    pub consumed: Offset,
    /// Settled watermark.
    pub settled: Offset,
    /// The pipeline group's committed offset, when known.
    pub pipeline_committed: Option<Offset>,
    /// High watermark, when known.
    pub log_end: Option<Offset>,
    /// Log start offset (retention boundary), when known.
    pub log_start: Option<Offset>,
    /// Expected records not yet due or verified.
    pub pending: u64,
    /// Records currently missing.
    pub missing: u64,
    /// Whether consumption is paused for backpressure (`max_pending`).
    pub paused: bool,
    /// Records waiting for their schema (avro/protobuf), and those behind them: neither
    /// pending nor filtered yet. Left out of the JSON while 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub awaiting_schema: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The shared board: cheap to clone (an `Arc`), ordered by audit name so the API output is
/// stable.
#[derive(Debug, Clone, Default)]
pub struct StatusBoard {
    inner: Arc<RwLock<BTreeMap<String, AuditStatus>>>,
}

impl StatusBoard {
    /// An empty board.
    pub fn new() -> StatusBoard {
        StatusBoard::default()
    }

    /// Publishes (replaces) the status of `s.audit`.
    pub fn update(&self, s: AuditStatus) {
        self.write().insert(s.audit.clone(), s);
    }

    /// Every audit's status, ordered by audit name.
    pub fn snapshot(&self) -> Vec<AuditStatus> {
        self.read().values().cloned().collect()
    }

    /// One audit's completeness as of its last round (`None`: no such audit on the board).
    pub fn completeness(&self, audit: &str) -> Option<AuditCompleteness> {
        self.read().get(audit).map(|s| s.completeness.clone())
    }

    /// The names of the audits on the board, ordered.
    pub fn audits(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    /// Forgets an audit (it stopped).
    pub fn remove(&self, audit: &str) {
        self.write().remove(audit);
    }

    /// Ready when there is at least one audit and every audit had a successful Kafka contact
    /// and sink query within max(2 × its verify interval, 10 s) of `now`.
    pub fn is_ready(&self, now: DateTime<Utc>) -> bool {
        self.not_ready_reasons(now).is_empty()
    }

    /// Why the board is not ready, one short line per problem; empty when ready. Used as
    /// the `/readyz` body so an operator sees which audit and which dependency is stale.
    pub fn not_ready_reasons(&self, now: DateTime<Utc>) -> Vec<String> {
        let board = self.read();
        if board.is_empty() {
            return vec!["no audit has reported yet".to_string()];
        }
        let mut reasons = Vec::new();
        for s in board.values() {
            let window = ready_window(s.verify_interval_ms);
            let fresh = |t: Option<DateTime<Utc>>| t.is_some_and(|t| now - t <= window);
            let secs = window.num_seconds();
            if !fresh(s.last_kafka_ok) {
                reasons.push(format!(
                    "audit {}: no Kafka contact in the last {secs}s",
                    s.audit
                ));
            }
            if s.sink_state == SinkState::Down {
                // SPEC: ready only when the sink answered within the LAST verify round.
                reasons.push(format!(
                    "audit {}: the last verify round could not query the sink",
                    s.audit
                ));
            } else if !fresh(s.last_sink_ok) {
                reasons.push(format!(
                    "audit {}: no successful sink query in the last {secs}s",
                    s.audit
                ));
            }
            // The registry is a dependency like the sink: while it fails, records wait.
            if let Some(e) = &s.schema_registry_error {
                reasons.push(format!(
                    "audit {}: the last schema fetch failed: {e}",
                    s.audit
                ));
            }
        }
        reasons
    }

    /// A panicking writer replaces whole entries, so the map is never half-updated: a
    /// poisoned lock is safe to keep using, and must not take the HTTP server down.
    fn read(&self) -> RwLockReadGuard<'_, BTreeMap<String, AuditStatus>> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, BTreeMap<String, AuditStatus>> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }
}

/// max(2 × verify interval, 10 s): one missed round is tolerated, two are not.
fn ready_window(verify_interval_ms: u64) -> TimeDelta {
    let twice = i64::try_from(verify_interval_ms.saturating_mul(2)).unwrap_or(i64::MAX);
    TimeDelta::try_milliseconds(twice)
        .unwrap_or(TimeDelta::MAX)
        .max(MIN_READY_WINDOW)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(audit: &str, interval_ms: u64, kafka: Option<i64>, sink: Option<i64>) -> AuditStatus {
        let base = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        AuditStatus {
            audit: audit.to_string(),
            consumer_group: "gap-auditor".to_string(),
            pipeline_group: Some("flink".to_string()),
            sink_kind: "doris".to_string(),
            sink_state: SinkState::Up,
            sink_error: None,
            last_sink_ok: sink.map(|s| base + TimeDelta::seconds(s)),
            last_kafka_ok: kafka.map(|s| base + TimeDelta::seconds(s)),
            verify_interval_ms: interval_ms,
            schema_registry_error: None,
            partitions: vec![PartitionStatus {
                topic: "t".to_string(),
                partition: 0,
                consumed: 10,
                settled: 5,
                pipeline_committed: Some(9),
                log_end: Some(10),
                log_start: Some(0),
                pending: 4,
                missing: 1,
                paused: false,
                awaiting_schema: 0,
            }],
            completeness: AuditCompleteness {
                complete_until_ms: Some(1_700_000_000_000),
                ..Default::default()
            },
        }
    }

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap()
    }

    #[test]
    fn empty_board_is_not_ready() {
        let b = StatusBoard::new();
        assert!(!b.is_ready(at(0)));
        assert_eq!(b.not_ready_reasons(at(0)).len(), 1);
    }

    #[test]
    fn ready_window_is_twice_the_interval_with_a_10s_floor() {
        let b = StatusBoard::new();
        b.update(status("a", 1_000, Some(0), Some(0)));
        assert!(b.is_ready(at(10)), "10 s floor");
        assert!(!b.is_ready(at(11)));

        b.update(status("a", 30_000, Some(0), Some(0)));
        assert!(b.is_ready(at(60)));
        assert!(!b.is_ready(at(61)));
        assert!(ready_window(u64::MAX) > TimeDelta::days(365), "no overflow");
    }

    #[test]
    fn a_failing_schema_registry_is_not_ready() {
        let b = StatusBoard::new();
        let mut s = status("a", 1_000, Some(0), Some(0));
        s.schema_registry_error = Some("schema registry unavailable: HTTP 503".into());
        b.update(s);
        let reasons = b.not_ready_reasons(at(1));
        assert_eq!(
            reasons,
            ["audit a: the last schema fetch failed: schema registry unavailable: HTTP 503"]
        );
    }

    #[test]
    fn a_failed_last_round_is_not_ready_even_with_a_recent_success() {
        let b = StatusBoard::new();
        let mut s = status("a", 1_000, Some(0), Some(0));
        s.sink_state = SinkState::Down;
        b.update(s);
        assert_eq!(
            b.not_ready_reasons(at(1)),
            vec!["audit a: the last verify round could not query the sink"]
        );
    }

    #[test]
    fn every_audit_needs_both_kafka_and_sink() {
        let b = StatusBoard::new();
        b.update(status("a", 5_000, Some(0), Some(0)));
        b.update(status("b", 5_000, Some(0), None));
        assert!(!b.is_ready(at(1)));
        let reasons = b.not_ready_reasons(at(1));
        assert_eq!(
            reasons,
            vec!["audit b: no successful sink query in the last 10s"]
        );

        b.update(status("b", 5_000, None, Some(0)));
        assert!(b.not_ready_reasons(at(1))[0].contains("Kafka"));
        b.update(status("b", 5_000, Some(1), Some(1)));
        assert!(b.is_ready(at(1)));
        b.remove("b");
        b.remove("a");
        assert!(!b.is_ready(at(1)));
    }

    #[test]
    fn snapshot_is_ordered_and_serializes_snake_case() {
        let b = StatusBoard::new();
        let clone = b.clone();
        clone.update(status("zeta", 5_000, Some(0), None));
        b.update(status("alpha", 5_000, Some(0), Some(0)));
        let snap = b.snapshot();
        assert_eq!(
            snap.iter().map(|s| s.audit.as_str()).collect::<Vec<_>>(),
            ["alpha", "zeta"]
        );
        let v = serde_json::to_value(&snap[0]).unwrap();
        assert_eq!(v["sink_state"], "up");
        assert_eq!(v["partitions"][0]["pipeline_committed"], 9);
        assert_eq!(v["last_kafka_ok"], "2023-11-14T22:13:20Z");
        assert_eq!(v["complete_until"], "2023-11-14T22:13:20Z");
        let c = b.completeness("zeta");
        assert_eq!(c.and_then(|c| c.complete_until_ms), Some(1_700_000_000_000));
        assert_eq!(b.audits(), ["alpha", "zeta"]);
        assert!(b.completeness("nope").is_none());
        assert_eq!(serde_json::to_value(SinkState::Unknown).unwrap(), "unknown");
    }
}
