//! Live status of every audit, shared between the audit loops (writers) and the HTTP
//! server (`/api/status`, `/readyz`).
//!
//! Each audit loop publishes a whole [`AuditStatus`] after a round rather than patching
//! fields: readers always see one round's consistent picture, and the lock is held only for
//! a map insert. Nothing here may hold a secret: `/api/status` serializes it verbatim, so
//! callers redact sink error texts before they get here.

use crate::completeness::AuditCompleteness;
use crate::key_domain::KeyDomain;
use crate::types::Offset;
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

/// The dead-letter topic reader of an audit (docs/SEMANTICS.md "Dead-lettered records").
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DeadLetterStatus {
    /// The topic.
    pub topic: String,
    /// Everything written to the topic before this moment has been read: records due
    /// before it may be decided (`null`: not yet; verdicts wait).
    pub read_through: Option<DateTime<Utc>>,
    /// Coordinates held that can still change a verdict.
    pub coordinates: usize,
    /// Why the topic cannot be read, while it cannot (verdicts wait).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// The Flink evidence source of an audit (src/evidence/flink), for `/api/status`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FlinkStatus {
    /// The JobManager's REST URL, without credentials.
    pub url: String,
    /// The job's name.
    pub job: String,
    /// `pending` (not read yet), `ok`, or `error` with its `reason`: an error only means
    /// gaps carry no Flink evidence; no verdict waits for it.
    #[serde(flatten)]
    pub source: crate::evidence::flink::SourceState,
    /// When the JobManager was last asked.
    pub checked_at: Option<DateTime<Utc>>,
    /// The JobManager's clock minus this auditor's, as last measured (ms; `null` before a
    /// job that has not ended was listed): restart times are placed in a gap's window after
    /// this shift.
    pub clock_skew_ms: Option<i64>,
    /// The job's run that started last, as last seen (kept while the JobManager cannot be
    /// read); `null` before one was seen.
    pub run: Option<FlinkRunStatus>,
    /// The run before it, when one was seen: after a crash, its `last_completed` is the
    /// checkpoint a correct restart restores. Left out of the JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous_run: Option<FlinkRunStatus>,
}

/// One run of the Flink job, for `/api/status`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FlinkRunStatus {
    /// The run's job id.
    pub jid: String,
    /// Its status as the JobManager last listed it (`RUNNING`, `FAILED`, ...).
    pub state: String,
    /// The JobManager's last answer listed it; `false` when it no longer does (it died
    /// with the run, or forgot it): `state` is then as last seen.
    pub listed: bool,
    /// When it started (the JobManager's clock).
    pub started_at: Option<DateTime<Utc>>,
    /// What it restored when it started: `{"kind": "none"}`, `{"kind": "unknown"}` or
    /// `{"kind": "checkpoint", "id": 7, "restore_timestamp": ..., "is_savepoint": false,
    /// "external_path": "..."}`.
    pub restore: crate::evidence::flink::Restore,
    /// Its last completed checkpoint, when one was seen.
    pub last_completed: Option<crate::evidence::flink::CompletedCheckpoint>,
    /// The run in words: "started at 2026-12-06T02:14:00Z restored from chk-7 (path)".
    pub summary: String,
}

impl FlinkRunStatus {
    /// The status of `run`.
    pub fn of(run: &crate::evidence::flink::JobRun) -> Self {
        Self {
            jid: run.jid.clone(),
            state: run.state.clone(),
            listed: run.listed,
            started_at: DateTime::<Utc>::from_timestamp_millis(run.started_ms),
            restore: run.restore.clone(),
            last_completed: run.last_completed.clone(),
            summary: run.summary(),
        }
    }
}

/// The Kafka Connect evidence source of an audit (src/evidence/connect), for `/api/status`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ConnectStatus {
    /// The Connect REST URL, without credentials or query.
    pub url: String,
    /// The connector's name.
    pub connector: String,
    /// `pending` (not read yet), `ok`, or `error` with its `reason`: an error only means
    /// gaps carry no Kafka Connect evidence; no verdict waits for it.
    #[serde(flatten)]
    pub source: crate::evidence::http::SourceState,
    /// When the Connect REST API was last asked.
    pub checked_at: Option<DateTime<Utc>>,
    /// The connector's own state as last read (`RUNNING`, `FAILED`, `PAUSED`, ...); `null`
    /// before a read.
    pub connector_state: Option<String>,
    /// Its tasks as last read, by id.
    pub tasks: Vec<ConnectTaskStatus>,
    /// The connector's `errors.tolerance` (`none`, `all`); `null` until its config was read.
    pub errors_tolerance: Option<String>,
    /// `errors.deadletterqueue.topic.name` is set; `null` until its config was read.
    pub dead_letter_queue: Option<bool>,
    /// Why the connector's config could not be read while its status could (a proxy may
    /// refuse it: it holds the connector's own secrets). Left out of the JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub config_problem: Option<String>,
    /// The last changes the polls saw, oldest first.
    pub events: Vec<ConnectEventStatus>,
}

/// One task of the connector, for `/api/status`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ConnectTaskStatus {
    /// The task's id.
    pub id: i32,
    /// Its state (`RUNNING`, `FAILED`, ...).
    pub state: String,
    /// The worker it runs on.
    pub worker_id: String,
}

/// One change of the connector or a task between two polls, for `/api/status`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ConnectEventStatus {
    /// The poll that saw it (the auditor's clock): at most one poll after it happened.
    pub at: Option<DateTime<Utc>>,
    /// The task's id; `null` for the connector itself.
    pub task: Option<i32>,
    /// The state before; `null`: the task appeared.
    pub from: Option<String>,
    /// The state after; `null`: the task is no longer listed.
    pub to: Option<String>,
    /// The worker after the change.
    pub worker_id: Option<String>,
    /// The first line of its trace (the exception) and its root cause (`; caused by ...`),
    /// when it FAILED with one.
    pub trace: Option<String>,
    /// The change in words: "FAILED at 2026-12-06T02:14:00Z (exception)".
    pub words: String,
}

impl ConnectEventStatus {
    /// The status of `e`.
    pub fn of(e: &crate::evidence::connect::StateEvent) -> Self {
        Self {
            at: DateTime::<Utc>::from_timestamp_millis(e.at_ms),
            task: e.task,
            from: e.from.clone(),
            to: e.to.clone(),
            worker_id: e.worker_id.clone(),
            trace: e.trace.clone(),
            words: e.phrase(),
        }
    }
}

/// The Doris Stream Load evidence source of an audit (src/evidence/stream_load), for
/// `/api/status`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StreamLoadStatus {
    /// The FE's URL, without credentials.
    pub url: String,
    /// The pipeline's label prefix.
    pub label_prefix: String,
    /// `pending` (not read yet), `ok`, or `error` with its `reason`: an error only means
    /// gaps carry no Stream Load evidence; no verdict waits for it.
    #[serde(flatten)]
    pub source: crate::evidence::http::SourceState,
    /// When the FE was last asked.
    pub checked_at: Option<DateTime<Utc>>,
    /// The FE's clock minus this auditor's, as last measured (ms, to about a second).
    pub clock_skew_ms: Option<i64>,
    /// The FE's time zone (minutes east of UTC), in which Doris prints load times.
    pub zone_offset_minutes: Option<i64>,
    /// How many of the pipeline's loads the last read listed.
    pub listed: usize,
    /// Why some rows of the last answer could not be read. Left out of the JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// The newest loads of the pipeline that left rows out, oldest first.
    pub loads: Vec<StreamLoadEventStatus>,
}

/// One load of the pipeline that left rows out, for `/api/status`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StreamLoadEventStatus {
    /// Its label.
    pub label: String,
    /// When it finished, on the auditor's clock.
    pub finished_at: Option<DateTime<Utc>>,
    /// Rows it read, filtered and left out by its `WHERE`.
    pub total_rows: u64,
    pub filtered_rows: u64,
    pub unselected_rows: u64,
    /// The load in words, as a gap names it.
    pub words: String,
}

impl StreamLoadEventStatus {
    /// The status of `l`.
    pub fn of(l: &crate::evidence::stream_load::DroppedLoad) -> Self {
        Self {
            label: crate::logging::printable(&l.record.label, 160),
            finished_at: DateTime::<Utc>::from_timestamp_millis(l.finished_ms),
            total_rows: l.record.total_rows,
            filtered_rows: l.record.filtered_rows,
            unselected_rows: l.record.unselected_rows,
            words: l.phrase(),
        }
    }
}

/// Status of one audit, as published after each round.
/// One field per key of an audit in `/api/status` (SPEC): the API's shape, not state.
#[derive(Debug, Clone, Serialize)]
pub struct AuditStatus {
    /// Audit name.
    pub audit: String,
    /// The auditor's own consumer group.
    pub consumer_group: String,
    /// The pipeline's consumer group, when configured.
    pub pipeline_group: Option<String>,
    /// Why verdicts wait for the pipeline group (it cannot be read, has no commit, or its
    /// commits disappeared), while `gap_auditor_pipeline_group_up` is 0. Left out of the
    /// JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline_group_hold: Option<String>,
    /// With `[audits.pipeline] kind = "doris_routine_load"`: the Routine Load job whose
    /// progress is the pipeline's position (`pipeline_group_hold` then speaks of it). Left
    /// out of the JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline_job: Option<String>,
    /// The Routine Load job's state while it does not consume (`PAUSED: <Doris's reason>`,
    /// `STOPPED`, `CANCELLED: ...`): a stall, never loss. Left out of the JSON otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pipeline_job_state: Option<String>,
    /// offset_columns without `match.topic_column`: why verdicts are held because the sink
    /// table holds rows of another topic (the key to add is named). Left out of the JSON
    /// otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sink_table_hold: Option<String>,
    /// `[audits.pipeline] dead_letter_topic`: its reader's state. Left out of the JSON
    /// without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead_letters: Option<DeadLetterStatus>,
    /// `[audits.pipeline] flink_rest_url`: the Flink evidence source, its state and what it
    /// tells of the job now (a correct restore leaves no gap: it shows here). Left out of
    /// the JSON without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flink: Option<FlinkStatus>,
    /// `[audits.pipeline] connect_url`: the Kafka Connect evidence source, its state, the
    /// connector's and its tasks' states and the last changes seen. Left out of the JSON
    /// without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect: Option<ConnectStatus>,
    /// `[audits.pipeline] doris_fe_url`: the Doris Stream Load evidence source, its state
    /// and the pipeline's last loads that left rows out. Left out of the JSON without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream_load: Option<StreamLoadStatus>,
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
    /// What the audit read of the sink table (SPEC "The sink's model"); left out of the
    /// JSON until it was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sink_model: Option<SinkModel>,
    /// Per assigned partition.
    pub partitions: Vec<PartitionStatus>,
    /// Completeness as of this round (SPEC "Completeness"): `/api/completeness` answers from
    /// it; `/api/status` shows only its time, as `complete_until`.
    #[serde(rename = "complete_until", serialize_with = "complete_until")]
    pub completeness: AuditCompleteness,
}

/// The sink table as the audit reads it, for `/api/status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SinkModel {
    /// key_columns: each key column's declared type, what its values are converted to, its
    /// collation, and the server's rule for fractional seconds ([`KeyDomain`]).
    pub key_columns: KeyDomain,
    /// key_columns: `multiset` (rows are counted against records) or `presence` (the table
    /// keeps one row per key: one row confirms every record of its key).
    pub key_semantics: crate::key_semantics::KeySemantics,
}

fn complete_until<S: serde::Serializer>(c: &AuditCompleteness, s: S) -> Result<S::Ok, S::Error> {
    use chrono::TimeZone;
    let t = c
        .complete_until_ms
        .and_then(|ms| Utc.timestamp_millis_opt(ms).single());
    serde::Serialize::serialize(&t, s)
}

/// Status of one partition of an audit.
/// One field per key of a partition in `/api/status` (SPEC): the API's shape, not state.
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
    /// What of the partition's stored state (progress row, ledger items) could not be read
    /// at its assignment: the partition resumed from what could be, and the unreadable part
    /// stays in the store, not re-checked. Left out of the JSON when everything was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state_problem: Option<String>,
    /// The last time the partition's log was found to no longer hold the auditor's
    /// position (truncated or recreated) since it was assigned, and what that means; left
    /// out while never.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub divergence: Option<DivergenceNote>,
    /// The pipeline group's last commit movements on the partition as the auditor saw them
    /// (at most [`COMMIT_TIMELINE`], oldest first; `at_ms` unix ms): the gap page's
    /// timeline around each gap. Left out while none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pipeline_commits: Vec<crate::ledger::CommitStep>,
    /// An open transaction holding the partition's last stable offset where reading stops
    /// (read_committed): lag, never loss. Left out while none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transaction_hold: Option<crate::audit::transaction_hold::Hold>,
}

/// Commit movements a partition's status keeps for the gap page's timeline.
pub const COMMIT_TIMELINE: usize = 32;

/// A partition's log that no longer held the auditor's position (issue 34 item 7): where
/// reading resumed and why (`audit/divergence.rs`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DivergenceNote {
    /// `truncated` or `recreated`.
    pub kind: &'static str,
    /// The auditor's position on the old log.
    pub from: Offset,
    /// Where reading resumed on the new one.
    pub resumed_at: Offset,
    /// The new log's start when it was seen.
    pub log_start: Offset,
    /// The new log's end when it was seen.
    pub log_end: Offset,
    /// When it was seen (RFC 3339).
    pub detected_at: String,
    /// What happened and what the verdicts mean for the offsets involved.
    pub reason: String,
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
mod tests;
