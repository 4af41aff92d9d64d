//! The two Kafka Connect REST answers the evidence needs, read as Kafka documents them
//! (pure: no I/O). The Connect REST reference (<https://kafka.apache.org/documentation/#connect_rest>)
//! and the class behind the status (`ConnectorStateInfo`):
//!
//! - `GET /connectors/{name}/status`: `{"name", "connector": {"state", "worker_id",
//!   "trace"?}, "tasks": [{"id", "state", "worker_id", "trace"?}], "type"}`. States are
//!   `UNASSIGNED`, `RUNNING`, `PAUSED`, `FAILED`, `RESTARTING` and `STOPPED`; `trace` is the
//!   Java stack trace of a FAILED connector or task. What a real Kafka 4.4 worker answered
//!   (docs/TESTING.md "A real Kafka Connect worker", fixtures/): a `version` (the plugin's)
//!   on the connector and each task; a STOPPED connector lists no tasks; a trace's first
//!   line is the runtime's wrapper (`Exiting WorkerSinkTask due to unrecoverable
//!   exception.`, `Tolerance exceeded in error handler`), the reason in its last
//!   `Caused by:`; a RESTARTING task still carries its old trace; an unknown connector's
//!   status is 404 `No status found for connector x`.
//! - `GET /connectors/{name}/config`: the connector's configuration, a flat object of
//!   strings (`connector.class`, `topics`, `errors.tolerance`,
//!   `errors.deadletterqueue.topic.name`, ...).
//!
//! Errors answer `{"error_code": 404, "message": "Connector x not found"}`. Fields this
//! build does not read are ignored, so later Connect versions that add some change nothing.
//! Nothing of the config is kept but the two error-handling keys: the rest may hold the
//! sink's own passwords.

use crate::logging::printable;
use serde::Deserialize;

pub use crate::evidence::http::RestError;

/// `what` is not the documented JSON.
fn shape(what: &'static str, e: serde_json::Error) -> RestError {
    RestError::shape("Kafka Connect", what, &e)
}

/// The state of the connector or of one task (`ConnectorStateInfo.AbstractState`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct StateInfo {
    /// `UNASSIGNED`, `RUNNING`, `PAUSED`, `FAILED`, `RESTARTING` or `STOPPED` (as Connect
    /// wrote it; cleaned by the history).
    pub state: String,
    /// The worker running it (`host:port`).
    #[serde(default)]
    pub worker_id: String,
    /// The stack trace of a FAILED one.
    #[serde(default)]
    pub trace: Option<String>,
}

/// One task of the connector (`ConnectorStateInfo.TaskState`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct TaskStateInfo {
    /// The task's number within the connector.
    pub id: i32,
    /// Its state, worker and trace.
    #[serde(flatten)]
    pub info: StateInfo,
}

/// `GET /connectors/{name}/status`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ConnectorStatus {
    /// The connector's name.
    pub name: String,
    /// The connector's own state.
    pub connector: StateInfo,
    /// Its tasks.
    #[serde(default)]
    pub tasks: Vec<TaskStateInfo>,
    /// `sink` or `source` (absent before Kafka 2.0).
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
}

/// What the evidence reads of `GET /connectors/{name}/config`: how the connector handles
/// records it cannot convert or transform.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ErrorHandling {
    /// `errors.tolerance` as configured (`none`, Connect's default, when absent).
    pub tolerance: String,
    /// `errors.deadletterqueue.topic.name` is set (and not blank): a sink connector writes
    /// the records it skips there.
    pub dead_letter_queue: bool,
}

impl ErrorHandling {
    /// The connector skips what it cannot convert or transform (`errors.tolerance=all`)
    /// and writes it nowhere: such records are lost without a trace in Kafka.
    pub fn skips_silently(&self) -> bool {
        self.tolerance.eq_ignore_ascii_case("all") && !self.dead_letter_queue
    }
}

/// The longest `errors.tolerance` kept (the documented values are `none` and `all`).
const TOLERANCE_CHARS: usize = 32;

/// Reads the body of `/connectors/{name}/status`.
pub fn parse_status(body: &[u8]) -> Result<ConnectorStatus, RestError> {
    serde_json::from_slice(body).map_err(|e| shape("/connectors/{name}/status", e))
}

/// What the evidence keeps of `GET /connectors/{name}/config`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnectorConfig {
    /// Its error handling.
    pub errors: ErrorHandling,
    /// A hash of the whole config, to tell that it changed (a reconfiguration around a
    /// commit jump — a new `topics`, an offset reset override — is evidence). The config
    /// itself is never kept: it may hold the sink's passwords. In memory only, never shown.
    pub fingerprint: u64,
}

/// Reads the body of `/connectors/{name}/config`: its error-handling keys and a
/// fingerprint of the rest.
pub fn parse_config(body: &[u8]) -> Result<ConnectorConfig, RestError> {
    let map: std::collections::BTreeMap<String, serde_json::Value> =
        serde_json::from_slice(body).map_err(|e| shape("/connectors/{name}/config", e))?;
    // Key order in the answer is the worker's; the map is sorted, so equal configs hash
    // equal.
    let fingerprint = {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        for (k, v) in &map {
            k.hash(&mut h);
            v.to_string().hash(&mut h);
        }
        h.finish()
    };
    let text = |key: &str| {
        map.get(key)
            .and_then(serde_json::Value::as_str)
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    Ok(ConnectorConfig {
        errors: ErrorHandling {
            tolerance: printable(text("errors.tolerance").unwrap_or("none"), TOLERANCE_CHARS),
            dead_letter_queue: text("errors.deadletterqueue.topic.name").is_some(),
        },
        fingerprint,
    })
}

/// Connect's error body (`{"error_code": 404, "message": "..."}`) in a few words, else the
/// start of the body; cleaned, at most 200 characters.
pub fn error_message(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Error {
        message: String,
    }
    let text = match serde_json::from_slice::<Error>(body) {
        // A server error may carry a stack trace: the first line says it.
        Ok(e) => e
            .message
            .lines()
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned(),
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    };
    printable(&crate::logging::redact(&text), 200)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The example of `GET /connectors/(string:name)/status` in Kafka's Connect REST
    /// reference, with the `type` newer workers add.
    pub(crate) const STATUS: &str = r#"{
        "name": "hdfs-sink-connector",
        "connector": {
            "state": "RUNNING",
            "worker_id": "fakehost:8083"
        },
        "tasks":
        [
            {
                "id": 0,
                "state": "RUNNING",
                "worker_id": "fakehost:8083"
            },
            {
                "id": 1,
                "state": "FAILED",
                "worker_id": "fakehost:8083",
                "trace": "org.apache.kafka.common.errors.RecordTooLargeException\n"
            }
        ],
        "type": "sink"
    }"#;

    /// The example of `GET /connectors/(string:name)/config` in the same reference.
    pub(crate) const CONFIG: &str = r#"{
        "connector.class": "io.confluent.connect.hdfs.HdfsSinkConnector",
        "tasks.max": "10",
        "topics": "test-topic",
        "hdfs.url": "hdfs://fakehost:9000",
        "hadoop.conf.dir": "/opt/hadoop/conf",
        "hadoop.home": "/opt/hadoop",
        "flush.size": "100",
        "rotate.interval.ms": "1000"
    }"#;

    #[test]
    fn the_documented_status_reads_the_connector_and_every_task() {
        let s = parse_status(STATUS.as_bytes()).expect("documented shape");
        assert_eq!(s.name, "hdfs-sink-connector");
        assert_eq!(s.kind.as_deref(), Some("sink"));
        assert_eq!(
            (s.connector.state.as_str(), s.connector.worker_id.as_str()),
            ("RUNNING", "fakehost:8083")
        );
        assert_eq!(s.connector.trace, None);
        assert_eq!(s.tasks.len(), 2);
        assert_eq!(
            (s.tasks[1].id, s.tasks[1].info.state.as_str()),
            (1, "FAILED")
        );
        assert_eq!(
            s.tasks[1].info.trace.as_deref(),
            Some("org.apache.kafka.common.errors.RecordTooLargeException\n")
        );
        // A connector without tasks yet, and without `type` (Kafka before 2.0).
        let s = parse_status(
            br#"{"name":"x","connector":{"state":"UNASSIGNED","worker_id":"w:8083"},"tasks":[]}"#,
        )
        .expect("no tasks");
        assert!(s.tasks.is_empty() && s.kind.is_none());
    }

    /// What a real Kafka 4.4 worker answered (scripts/connect-seed.sh): `version` fields are
    /// ignored; a STOPPED connector has no tasks; a RESTARTING task keeps its old trace; an
    /// unknown connector's status is a 404 whose words are read.
    #[test]
    fn a_real_workers_answers_read() {
        let s = parse_status(include_bytes!("fixtures/status-stopped.json")).expect("real");
        assert_eq!(
            (s.connector.state.as_str(), s.tasks.len(), s.kind.as_deref()),
            ("STOPPED", 0, Some("sink"))
        );
        let s = parse_status(include_bytes!("fixtures/status-restarting.json")).expect("real");
        assert_eq!(s.tasks[0].info.state, "RESTARTING");
        assert!(
            s.tasks[0]
                .info
                .trace
                .as_deref()
                .is_some_and(|t| t.starts_with(
                    "org.apache.kafka.connect.errors.ConnectException: Exiting WorkerSinkTask"
                ))
        );
        assert_eq!(
            error_message(br#"{"error_code":404,"message":"No status found for connector nope"}"#),
            "No status found for connector nope"
        );
        // Its config: flat strings, the connector's own password among them (not kept).
        let c = parse_config(include_bytes!("fixtures/config-tolerate.json")).expect("real");
        assert!(c.errors.skips_silently());
        assert!(
            !format!("{c:?}").contains("gap"),
            "nothing but errors.* is kept"
        );
    }

    #[test]
    fn the_config_keeps_only_its_error_handling() {
        // Connect's defaults: nothing tolerated, no dead-letter queue.
        let c = parse_config(CONFIG.as_bytes())
            .expect("documented shape")
            .errors;
        assert_eq!(
            c,
            ErrorHandling {
                tolerance: "none".into(),
                dead_letter_queue: false
            }
        );
        assert!(!c.skips_silently());
        let all = CONFIG.replace(
            r#""tasks.max": "10","#,
            r#""tasks.max": "10", "errors.tolerance": "all", "errors.deadletterqueue.topic.name": " ","#,
        );
        let c = parse_config(all.as_bytes())
            .expect("documented shape")
            .errors;
        assert_eq!(c.tolerance, "all");
        assert!(!c.dead_letter_queue, "a blank topic is no queue");
        assert!(c.skips_silently());
        let with_dlq = CONFIG.replace(
            r#""tasks.max": "10","#,
            r#""tasks.max": "10", "errors.tolerance": "ALL", "errors.deadletterqueue.topic.name": "dlq-dns","#,
        );
        let c = parse_config(with_dlq.as_bytes())
            .expect("documented shape")
            .errors;
        assert!(c.dead_letter_queue && !c.skips_silently());
    }

    #[test]
    fn an_undocumented_answer_is_an_error_that_names_it() {
        let e = parse_status(br#"{"name":"x","tasks":[]}"#).expect_err("no connector");
        assert!(
            e.to_string()
                .starts_with("/connectors/{name}/status is not"),
            "{e}"
        );
        assert!(parse_status(b"<html>").is_err());
        assert!(parse_config(b"[]").is_err());
        assert_eq!(
            error_message(br#"{"error_code":404,"message":"Connector es-sink not found"}"#),
            "Connector es-sink not found"
        );
        assert_eq!(
            error_message(b"{\"error_code\":500,\"message\":\"boom\\u001b[31m\\nat x\"}"),
            "boom[31m"
        );
        assert_eq!(error_message(b"Bad Gateway"), "Bad Gateway");
    }
}
