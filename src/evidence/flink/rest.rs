//! The two JobManager REST answers the evidence needs, read as Flink documents them (pure:
//! no I/O). Flink's REST reference (`rest_v1_dispatcher.yml`) and the classes behind it:
//!
//! - `GET /jobs/overview` (`MultipleJobsDetails`): `{"jobs": [JobDetails]}`, each with
//!   `jid`, `name`, `state` (`INITIALIZING`, `CREATED`, `RUNNING`, `FAILING`, `FAILED`,
//!   `CANCELLING`, `CANCELED`, `FINISHED`, `RESTARTING`, `SUSPENDED`, `RECONCILING`),
//!   `start-time` (when the job entered INITIALIZING, ms) and `end-time` (-1 while it runs).
//!   A job resubmitted after a crash is a new job (a new `jid`, a new `start-time`) under
//!   the same name, which is why several may share one.
//! - `GET /jobs/{jid}/checkpoints` (`CheckpointingStatistics`): `counts` (`restored`,
//!   `total`, `in_progress`, `completed`, `failed`) and `latest` with `completed` (id,
//!   `latest_ack_timestamp`, `external_path`), `savepoint`, `failed` and `restored` (id,
//!   `restore_timestamp`, `is_savepoint`, `external_path`), each `null` when there is none.
//!   A job without checkpointing answers an error instead (`{"errors": [...]}`).
//!
//! Fields this build does not read are ignored, so later Flink versions that add some
//! change nothing.

use serde::{Deserialize, Serialize};

pub use crate::evidence::http::RestError;

/// `what` is not the documented JSON.
fn shape(what: &'static str, e: serde_json::Error) -> RestError {
    RestError::shape("Flink", what, &e)
}

/// One job of `/jobs/overview`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct JobOverview {
    /// The job's id (32 hex digits).
    pub jid: String,
    /// The job's name (`pipeline.name`, or what the client named it).
    pub name: String,
    /// The job's status (`RUNNING`, `FAILED`, ...).
    pub state: String,
    /// When the job entered INITIALIZING (unix ms).
    #[serde(rename = "start-time")]
    pub start_time: i64,
    /// When it reached a globally terminal state (unix ms; -1 while it has not).
    #[serde(rename = "end-time", default = "minus_one")]
    pub end_time: i64,
    /// How long it has run: for a job not yet ended, the JobManager's clock at the answer
    /// minus `start-time`, so `start-time + duration` is the JobManager's "now" (the clock
    /// skew estimate, review 37 F1). Absent in some answers: then unknown.
    #[serde(default)]
    pub duration: Option<i64>,
}

fn minus_one() -> i64 {
    -1
}

#[derive(Deserialize)]
struct Overview {
    jobs: Vec<JobOverview>,
}

/// A checkpoint a job run restored (`latest.restored`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoredCheckpoint {
    /// The checkpoint's id (`chk-<id>` in its directory).
    pub id: u64,
    /// When the job restored it (unix ms).
    pub restore_timestamp: i64,
    /// A savepoint, not a checkpoint.
    #[serde(default)]
    pub is_savepoint: bool,
    /// Where it is stored (`file:/.../chk-7`, `s3://...`), when Flink knows.
    #[serde(default)]
    pub external_path: Option<String>,
}

/// The latest completed checkpoint of a job run (`latest.completed`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompletedCheckpoint {
    /// The checkpoint's id.
    pub id: u64,
    /// When its last subtask acknowledged it (unix ms).
    pub latest_ack_timestamp: i64,
    /// Where it is stored, when it is retained (externalized) or a savepoint.
    #[serde(default)]
    pub external_path: Option<String>,
}

#[derive(Deserialize, Default)]
struct Counts {
    #[serde(default)]
    completed: u64,
    #[serde(default)]
    restored: u64,
}

#[derive(Deserialize, Default)]
struct Latest {
    #[serde(default)]
    completed: Option<CompletedCheckpoint>,
    #[serde(default)]
    restored: Option<RestoredCheckpoint>,
}

/// One entry of `history` (the most recent checkpoints, `web.checkpoints.history` of them).
#[derive(Deserialize)]
struct HistoryEntry {
    #[serde(default)]
    status: String,
    #[serde(default)]
    latest_ack_timestamp: i64,
}

#[derive(Deserialize)]
struct Statistics {
    #[serde(default)]
    counts: Counts,
    #[serde(default)]
    latest: Latest,
    #[serde(default)]
    history: Vec<HistoryEntry>,
}

/// What `/jobs/{jid}/checkpoints` tells about one job run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CheckpointStats {
    /// `counts.completed`: checkpoints this run completed.
    pub completed_count: u64,
    /// `counts.restored`: restores this run made, at its start and at each failover.
    pub restored_count: u64,
    /// `latest.completed`.
    pub latest_completed: Option<CompletedCheckpoint>,
    /// `latest.restored`: the checkpoint or savepoint the run restored, last.
    pub restored: Option<RestoredCheckpoint>,
    /// The earliest ack time (the JobManager's unix ms) of a completed checkpoint in the
    /// answer (`history` and `latest.completed`): the run completed its first checkpoint,
    /// and so first committed offsets, no later than this.
    pub earliest_ack: Option<i64>,
    /// `earliest_ack` is the run's first checkpoint's: `history` holds every checkpoint the
    /// run completed (no more than it keeps).
    pub earliest_ack_is_first: bool,
}

/// Reads the body of `/jobs/overview`.
pub fn parse_overview(body: &[u8]) -> Result<Vec<JobOverview>, RestError> {
    serde_json::from_slice::<Overview>(body)
        .map(|o| o.jobs)
        .map_err(|e| shape("/jobs/overview", e))
}

/// Reads the body of `/jobs/{jid}/checkpoints`.
pub fn parse_checkpoints(body: &[u8]) -> Result<CheckpointStats, RestError> {
    let s: Statistics =
        serde_json::from_slice(body).map_err(|e| shape("/jobs/{jid}/checkpoints", e))?;
    let completed: Vec<i64> = s
        .history
        .iter()
        .filter(|h| h.status == "COMPLETED" && h.latest_ack_timestamp > 0)
        .map(|h| h.latest_ack_timestamp)
        .collect();
    let earliest_ack = completed
        .iter()
        .copied()
        .chain(
            s.latest
                .completed
                .as_ref()
                .map(|c| c.latest_ack_timestamp)
                .filter(|t| *t > 0),
        )
        .min();
    Ok(CheckpointStats {
        completed_count: s.counts.completed,
        restored_count: s.counts.restored,
        earliest_ack,
        earliest_ack_is_first: s.counts.completed > 0
            && completed.len() as u64 >= s.counts.completed,
        latest_completed: s.latest.completed,
        restored: s.latest.restored,
    })
}

/// Flink's error body (`{"errors": ["..."]}`) in a few words, else the start of the body.
pub fn error_message(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Errors {
        errors: Vec<String>,
    }
    let text = match serde_json::from_slice::<Errors>(body) {
        // Flink appends whole stack traces to some: the first line says it.
        Ok(e) => e
            .errors
            .iter()
            .map(|m| m.lines().next().unwrap_or_default().trim().to_owned())
            .filter(|m| !m.is_empty())
            .collect::<Vec<_>>()
            .join("; "),
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned(),
    };
    // Shown in /api/status and the log: no control characters, a few lines' worth.
    crate::logging::printable(&crate::logging::redact(&text), 300)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `/jobs/overview` as a Flink 2.0 JobManager answers it (field set of `JobDetails`):
    /// the crashed run, archived as FAILED, and the run resubmitted under the same name.
    pub(crate) const OVERVIEW: &str = r#"{"jobs":[
      {"jid":"7684be6004e4e955c2a558a9bc463f65","name":"FlinkSQLFromKafka2Doris",
       "start-time":1796523000000,"end-time":1796523200000,"duration":200000,"state":"FAILED",
       "last-modification":1796523200000,
       "tasks":{"running":0,"canceling":0,"canceled":0,"total":2,"created":0,"scheduled":0,
                "deploying":0,"reconciling":0,"finished":0,"initializing":0,"failed":2}},
      {"jid":"49b6cbb8b7e4f3c1a2d5e6f708192a3b","name":"FlinkSQLFromKafka2Doris",
       "start-time":1796523240000,"end-time":-1,"duration":60000,"state":"RUNNING",
       "last-modification":1796523241000,
       "tasks":{"running":2,"canceling":0,"canceled":0,"total":2,"created":0,"scheduled":0,
                "deploying":0,"reconciling":0,"finished":0,"initializing":0,"failed":0}},
      {"jid":"0a0b0c0d0e0f10111213141516171819","name":"another-job",
       "start-time":1796523300000,"end-time":-1,"duration":1000,"state":"RUNNING",
       "last-modification":1796523300000,"tasks":{"total":1,"running":1}}
    ]}"#;

    /// `/jobs/{jid}/checkpoints` of a run started without a checkpoint to restore
    /// (`CheckpointingStatistics`, `latest.restored` null).
    pub(crate) const FRESH_RUN: &str = r#"{
      "counts":{"restored":0,"total":2,"in_progress":0,"completed":2,"failed":0},
      "summary":{"checkpointed_size":{"min":0,"max":0,"avg":0,"p50":0.0,"p90":0.0,"p95":0.0,"p99":0.0,"p999":0.0},
                 "state_size":{"min":0,"max":0,"avg":0,"p50":0.0,"p90":0.0,"p95":0.0,"p99":0.0,"p999":0.0},
                 "end_to_end_duration":{"min":12,"max":40,"avg":26,"p50":26.0,"p90":40.0,"p95":40.0,"p99":40.0,"p999":40.0}},
      "latest":{
        "completed":{"className":"completed","id":2,"status":"COMPLETED","is_savepoint":false,
          "savepointFormat":null,"trigger_timestamp":1796523259000,"latest_ack_timestamp":1796523259040,
          "checkpointed_size":4120,"state_size":4120,"end_to_end_duration":40,"alignment_buffered":0,
          "processed_data":0,"persisted_data":0,"num_subtasks":2,"num_acknowledged_subtasks":2,
          "checkpoint_type":"CHECKPOINT","tasks":{},
          "external_path":"file:/tmp/flink-ckpt/49b6cbb8b7e4f3c1a2d5e6f708192a3b/chk-2","discarded":false},
        "savepoint":null,"failed":null,"restored":null},
      "history":[]}"#;

    /// The same for a run resubmitted from a retained checkpoint
    /// (`execution.savepoint.path`): `latest.restored` names it.
    pub(crate) const RESTORED_RUN: &str = r#"{
      "counts":{"restored":1,"total":0,"in_progress":0,"completed":0,"failed":0},
      "summary":{},
      "latest":{"completed":null,"savepoint":null,"failed":null,
        "restored":{"id":7,"restore_timestamp":1796523241500,"is_savepoint":false,
          "external_path":"file:/tmp/flink-ckpt/7684be6004e4e955c2a558a9bc463f65/chk-7"}},
      "history":[]}"#;

    #[test]
    fn the_overview_reads_every_job() {
        let jobs = parse_overview(OVERVIEW.as_bytes()).expect("documented shape");
        assert_eq!(jobs.len(), 3);
        assert_eq!(jobs[0].end_time, 1_796_523_200_000);
        let n = &jobs[1];
        assert_eq!(n.jid, "49b6cbb8b7e4f3c1a2d5e6f708192a3b");
        assert_eq!((n.state.as_str(), n.end_time), ("RUNNING", -1));
        assert_eq!(n.duration, Some(60_000));
        let without = parse_overview(
            br#"{"jobs":[{"jid":"a","name":"n","state":"RUNNING","start-time":1}]}"#,
        )
        .expect("duration and end-time optional");
        assert_eq!((without[0].duration, without[0].end_time), (None, -1));
    }

    #[test]
    fn checkpoint_statistics_read_the_latest_completed_and_restored() {
        let fresh = parse_checkpoints(FRESH_RUN.as_bytes()).expect("documented shape");
        assert_eq!(fresh.completed_count, 2);
        assert_eq!(fresh.restored, None);
        let c = fresh.latest_completed.expect("completed");
        assert_eq!((c.id, c.latest_ack_timestamp), (2, 1_796_523_259_040));
        assert!(c.external_path.is_some_and(|p| p.ends_with("/chk-2")));

        let restored = parse_checkpoints(RESTORED_RUN.as_bytes()).expect("documented shape");
        assert_eq!((fresh.restored_count, restored.restored_count), (0, 1));
        // FRESH_RUN's history is empty: the latest completed one bounds the first.
        assert_eq!(
            (fresh.earliest_ack, fresh.earliest_ack_is_first),
            (Some(1_796_523_259_040), false)
        );
        let with_history = parse_checkpoints(
            br#"{"counts":{"restored":0,"completed":2},"latest":{"completed":{"id":2,
            "latest_ack_timestamp":2000}},"history":[
              {"id":3,"status":"IN_PROGRESS","latest_ack_timestamp":0},
              {"id":2,"status":"COMPLETED","latest_ack_timestamp":2000},
              {"id":1,"status":"COMPLETED","latest_ack_timestamp":1000}]}"#,
        )
        .expect("documented shape");
        assert_eq!(
            (
                with_history.earliest_ack,
                with_history.earliest_ack_is_first
            ),
            (Some(1000), true)
        );
        let r = restored.restored.expect("restored");
        assert_eq!((r.id, r.is_savepoint), (7, false));
        assert_eq!(r.restore_timestamp, 1_796_523_241_500);
        assert_eq!(restored.latest_completed, None);
    }

    #[test]
    fn an_undocumented_answer_is_an_error_that_names_it() {
        let e = parse_overview(b"{\"jobs\": 3}").expect_err("not a list");
        assert!(e.to_string().starts_with("/jobs/overview is not"), "{e}");
        assert!(parse_checkpoints(b"<html>").is_err());
        // Flink's error body, first line of each message.
        assert_eq!(
            error_message(br#"{"errors":["Checkpointing has not been enabled.\n\tat org..."]}"#),
            "Checkpointing has not been enabled."
        );
        assert_eq!(error_message(b"Not Found"), "Not Found");
    }
}
