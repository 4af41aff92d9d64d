//! A stand-in for a Kafka Connect worker's REST API, for the tests only: it answers the two
//! calls the auditor's Connect evidence makes with bodies that follow Kafka's documented
//! JSON (the Connect REST reference, <https://kafka.apache.org/documentation/#connect_rest>,
//! and `ConnectorStateInfo`):
//! - `GET /connectors/{name}/status` → `{"name", "connector": {"state", "worker_id",
//!   "version"}, "tasks": [{"id", "state", "worker_id", "version", "trace"?}], "type":
//!   "sink"}` (`version`, the plugin's, as a real Kafka 4.4 worker adds it; a STOPPED
//!   connector lists no tasks, as the real one does: docs/TESTING.md "A real Kafka Connect
//!   worker");
//! - `GET /connectors/{name}/config` → the connector's config, a flat object of strings;
//! - anything else, or another connector, → 404 `{"error_code": 404, "message":
//!   "Connector x not found"}` (`No status found for connector x` for its status, as the
//!   real worker words it), Connect's error shape.
//!
//! The test sets the task states it lists. It is not a worker: no rebalance, no task ever changes by itself.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};

use crate::fake_http::{json_reply, serve};

/// One task as the fake lists it.
#[derive(Clone, Debug)]
pub struct Task {
    pub state: &'static str,
    pub worker_id: &'static str,
    /// The Java stack trace of a FAILED task.
    pub trace: Option<String>,
}

struct State {
    name: String,
    tasks: Mutex<Vec<Task>>,
    connector_state: Mutex<&'static str>,
    config: Value,
    requests: AtomicUsize,
    /// The `Authorization` header of the last request.
    authorization: Mutex<Option<String>>,
}

/// A running fake Connect worker; stops with the test's runtime.
#[derive(Clone)]
pub struct FakeConnect {
    state: Arc<State>,
    pub url: String,
}

impl FakeConnect {
    /// Starts one on a free loopback port with sink connector `name` (`config` its
    /// configuration) and its task 0 RUNNING on `connect-1:8083`.
    pub async fn start(name: &str, config: Value) -> Self {
        let state = Arc::new(State {
            name: name.to_owned(),
            tasks: Mutex::new(vec![Task {
                state: "RUNNING",
                worker_id: "connect-1:8083",
                trace: None,
            }]),
            connector_state: Mutex::new("RUNNING"),
            config,
            requests: AtomicUsize::new(0),
            authorization: Mutex::new(None),
        });
        let s = state.clone();
        let url = serve(Arc::new(move |req| handle(&s, req))).await;
        Self { state, url }
    }

    /// Task 0 from now on.
    pub fn set_task(&self, task: Task) {
        *self.state.tasks.lock().expect("lock") = vec![task];
    }

    /// The connector's own state from now on, and its tasks (none for STOPPED, as a real
    /// worker lists them).
    pub fn set_connector(&self, state: &'static str, tasks: Vec<Task>) {
        *self.state.connector_state.lock().expect("lock") = state;
        *self.state.tasks.lock().expect("lock") = tasks;
    }

    /// Requests so far, whatever the answer.
    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// The `Authorization` header of the last request.
    pub fn authorization(&self) -> Option<String> {
        self.state.authorization.lock().expect("lock").clone()
    }
}

fn not_found(message: String) -> Response<Full<Bytes>> {
    json_reply(
        StatusCode::NOT_FOUND,
        json!({"error_code": 404, "message": message}),
    )
}

fn handle(s: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    s.requests.fetch_add(1, Ordering::SeqCst);
    *s.authorization.lock().expect("lock") = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let path = req.uri().path().trim_end_matches('/');
    let parts: Vec<&str> = path.split('/').collect();
    let ["", "connectors", name, what] = parts.as_slice() else {
        return not_found("HTTP 404 Not Found".into());
    };
    if *name != s.name {
        // A real Kafka 4.4 worker's words: the status of an unknown connector is "No status
        // found" (as for one just created, before its first status is written), its config
        // "Connector x not found".
        return not_found(if *what == "status" {
            format!("No status found for connector {name}")
        } else {
            format!("Connector {name} not found")
        });
    }
    match *what {
        "status" => {
            let tasks: Vec<Value> = s
                .tasks
                .lock()
                .expect("lock")
                .iter()
                .enumerate()
                .map(|(id, t)| {
                    let mut v = json!({"id": id, "state": t.state, "worker_id": t.worker_id, "version": "1"});
                    if let Some(trace) = &t.trace {
                        v["trace"] = json!(trace);
                    }
                    v
                })
                .collect();
            json_reply(
                StatusCode::OK,
                json!({
                    "name": s.name,
                    "connector": {
                        "state": *s.connector_state.lock().expect("lock"),
                        "worker_id": "connect-1:8083",
                        "version": "1"
                    },
                    "tasks": tasks,
                    "type": "sink"
                }),
            )
        }
        "config" => json_reply(StatusCode::OK, s.config.clone()),
        _ => not_found("HTTP 404 Not Found".into()),
    }
}
