//! A stand-in for a Flink JobManager's REST API, for the tests only: it answers the two
//! calls the auditor's Flink evidence makes with canned bodies that follow Flink's
//! documented JSON (`rest_v1_dispatcher.yml`: `MultipleJobsDetails`,
//! `CheckpointingStatistics`), as a Flink 2.0 MiniCluster answered them here
//! (docs/TESTING.md "A real Flink job" has the run against the real one):
//! - `GET /jobs/overview` → `{"jobs": [{"jid", "name", "start-time", "end-time", "duration",
//!   "state", "last-modification", "tasks"}]}`;
//! - `GET /jobs/{jid}/checkpoints` → `{"counts", "summary", "latest": {"completed",
//!   "savepoint", "failed", "restored"}, "history"}`, or 404 `{"errors": [...]}` for a job
//!   it does not know.
//!
//! The test sets the runs it lists; it can be switched "down" (503 to everything).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};

use crate::fake_http::{json_reply as reply, serve};

/// One run of the job as the fake lists it.
#[derive(Clone, Debug)]
pub struct Run {
    pub jid: String,
    pub name: String,
    pub state: &'static str,
    pub start_ms: i64,
    pub end_ms: i64,
    /// `latest.restored`: (checkpoint id, restore time, external path).
    pub restored: Option<(u64, i64, String)>,
    /// `latest.completed`: (checkpoint id, ack time).
    pub completed: Option<(u64, i64)>,
}

#[derive(Default)]
struct State {
    runs: Mutex<Vec<Run>>,
    down: AtomicBool,
    requests: AtomicUsize,
}

/// A running fake JobManager; stops with the test's runtime.
#[derive(Clone)]
pub struct FakeFlink {
    state: Arc<State>,
    pub url: String,
}

impl FakeFlink {
    /// Starts one on a free loopback port, listing no job.
    pub async fn start() -> Self {
        let state = Arc::new(State::default());
        let s = state.clone();
        let url = serve(Arc::new(move |req| handle(&s, req))).await;
        Self { state, url }
    }

    /// The runs listed from now on.
    pub fn set_runs(&self, runs: Vec<Run>) {
        *self.state.runs.lock().expect("lock") = runs;
    }

    /// Every request answers 503 while down.
    pub fn set_down(&self, down: bool) {
        self.state.down.store(down, Ordering::SeqCst);
    }

    /// Requests so far, whatever the answer.
    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }
}

fn tasks(running: bool) -> Value {
    let (r, f) = if running { (2, 0) } else { (0, 2) };
    json!({"running": r, "canceling": 0, "canceled": 0, "total": 2, "created": 0,
           "scheduled": 0, "deploying": 0, "reconciling": 0, "finished": 0,
           "initializing": 0, "failed": f})
}

fn overview(runs: &[Run]) -> Value {
    // As Flink computes it (`JobDetails`): up to the end, or up to the JobManager's now for
    // a job not ended (the auditor measures its clock skew from it).
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let jobs: Vec<Value> = runs
        .iter()
        .map(|r| {
            let duration = if r.end_ms > 0 { r.end_ms } else { now_ms } - r.start_ms;
            json!({"jid": r.jid, "name": r.name, "start-time": r.start_ms,
                   "end-time": r.end_ms, "duration": duration, "state": r.state,
                   "last-modification": r.start_ms, "tasks": tasks(r.state == "RUNNING"),
                   "pending-operators": 0})
        })
        .collect();
    json!({ "jobs": jobs })
}

fn checkpoints(r: &Run) -> Value {
    let completed = r.completed.map(|(id, at)| {
        json!({"className": "completed", "id": id, "status": "COMPLETED",
               "is_savepoint": false, "savepointFormat": null, "trigger_timestamp": at - 10,
               "latest_ack_timestamp": at, "checkpointed_size": 0, "state_size": 0,
               "end_to_end_duration": 10, "alignment_buffered": 0, "processed_data": 0,
               "persisted_data": 0, "num_subtasks": 2, "num_acknowledged_subtasks": 2,
               "checkpoint_type": "CHECKPOINT", "tasks": {},
               "external_path": format!("file:/tmp/ck/{}/chk-{id}", r.jid), "discarded": false})
    });
    // Flink 2.0 reports a retained checkpoint restored by its path as a savepoint.
    let restored = r.restored.as_ref().map(|(id, at, path)| {
        json!({"id": id, "restore_timestamp": at, "is_savepoint": true, "external_path": path})
    });
    let n = r.completed.map_or(0, |(id, _)| id);
    json!({
        "counts": {"restored": u64::from(restored.is_some()), "total": n, "in_progress": 0,
                   "completed": n, "failed": 0},
        "summary": {},
        "latest": {"completed": completed, "savepoint": null, "failed": null, "restored": restored},
        "history": []
    })
}

fn handle(s: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    s.requests.fetch_add(1, Ordering::SeqCst);
    if s.down.load(Ordering::SeqCst) {
        return reply(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"errors": ["down for the test"]}),
        );
    }
    let runs = s.runs.lock().expect("lock").clone();
    let path = req.uri().path().trim_end_matches('/');
    if path == "/jobs/overview" {
        return reply(StatusCode::OK, overview(&runs));
    }
    let parts: Vec<&str> = path.split('/').collect();
    if let ["", "jobs", jid, "checkpoints"] = parts.as_slice()
        && let Some(r) = runs.iter().find(|r| r.jid == *jid)
    {
        return reply(StatusCode::OK, checkpoints(r));
    }
    reply(
        StatusCode::NOT_FOUND,
        json!({"errors": ["Not found: /".to_owned() + path.trim_start_matches('/')]}),
    )
}
