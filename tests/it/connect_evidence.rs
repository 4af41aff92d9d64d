//! Kafka Connect's evidence on gaps (issue 37), through the daemon: the seed incident with
//! a Connect worker stand-in ([`FakeConnect`], Kafka's documented JSON, shaped as a real
//! Kafka 4.4 worker answered: docs/TESTING.md "A real Kafka Connect worker") whose task 0
//! FAILED and is stopped and resumed the way an operator skips a record, between the
//! pipeline's commit 2 and its jump to 4; and a Connect REST API that cannot be reached,
//! which changes nothing.

use crate::fake_connect::{FakeConnect, Task};
use crate::support::*;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const CONNECTOR: &str = "es-sink";
/// The first line of a real worker's trace for a sink task whose `put` threw: the runtime's
/// wrapper, the same for every such failure.
const EXCEPTION: &str = "org.apache.kafka.connect.errors.ConnectException: Exiting WorkerSinkTask due to unrecoverable exception.";
/// Its last `Caused by:`: what the sink threw.
const CAUSE: &str = "org.apache.kafka.connect.errors.ConnectException: es-sink cannot index the record at dns-0 offset 2";

/// A FAILED task's trace in the shape a real Kafka 4.4 worker printed (scripts/connect-seed.sh).
fn real_trace() -> String {
    format!(
        "{EXCEPTION}\n\tat org.apache.kafka.connect.runtime.WorkerSinkTask.deliverMessages(WorkerSinkTask.java:658)\n\tat org.apache.kafka.connect.runtime.WorkerSinkTask.poll(WorkerSinkTask.java:359)\n\tat java.base/java.lang.Thread.run(Thread.java:840)\nCaused by: {CAUSE}\n\tat example.EsSinkTask.put(EsSinkTask.java:141)\n\tat org.apache.kafka.connect.runtime.WorkerSinkTask.deliverMessages(WorkerSinkTask.java:628)\n\t... 11 more\n"
    )
}

/// The seed scenario's config with the Connect evidence keys (user and password in the
/// URL: they must not show anywhere).
fn config_with_connect(s: &Scenario, connect_url: &str) -> String {
    let url = connect_url.replace("http://", "http://ops:s3cret@");
    format!(
        "{}\n[audits.pipeline]\nconnect_url = \"{url}\"\nconnect_connector = \"{CONNECTOR}\"\n",
        config_toml(&s.spec("offset_columns", "2s", "500ms"))
    )
}

/// The `connect` block of the audit's /api/status.
async fn connect_status(a: &Auditor) -> serde_json::Value {
    api_status(a).await["audits"][0]["connect"].clone()
}

/// Waits until /api/status's `connect` block satisfies `cond`.
async fn wait_connect(a: &Auditor, what: &str, cond: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c = connect_status(a).await;
        if cond(&c) {
            return;
        }
        assert!(Instant::now() < deadline, "never {what}: {c}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `at` of an event in /api/status as the gap's words write it (whole seconds, UTC).
fn words_time(event: &serde_json::Value) -> String {
    chrono::DateTime::parse_from_rfc3339(event["at"].as_str().expect("at"))
        .expect("rfc3339")
        .with_timezone(&chrono::Utc)
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The seed incident on a Kafka Connect sink: once the auditor saw commit 2, task 0 FAILED
/// (its put threw), and the operator stopped the connector (a real worker then lists no
/// tasks) and resumed it; the gap 2–3 names the failure with its root cause and the
/// restart, in /api/gaps, in the store (what `gaps` prints) and on the gap page;
/// /api/status shows the connector, its task, its error handling and the changes, with no
/// credential.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_seed_gap_carries_the_task_failure_and_restart() {
    let s = Scenario::new("connectev").await;
    let connect = FakeConnect::start(
        CONNECTOR,
        json!({
            "connector.class": "io.confluent.connect.elasticsearch.ElasticsearchSinkConnector",
            "tasks.max": "1",
            "topics": s.topic,
            "errors.tolerance": "all",
            "errors.deadletterqueue.topic.name": "dlq-es"
        }),
    )
    .await;
    let auditor = Auditor::start(&config_with_connect(&s, &connect.url)).await;
    let a = &auditor;
    // The baseline: task 0 RUNNING before anything happens.
    wait_connect(a, "read", |c| c["state"] == "ok").await;
    let done = Arc::new(AtomicBool::new(false));
    let (kc, done2) = (connect.clone(), done.clone());
    s.play_seed_incident(move |o| {
        let (kc, done) = (kc.clone(), done2.clone());
        async move {
            let seen = pipeline_committed(a) == Some(o);
            if seen && o == 2 && !done.swap(true, Ordering::SeqCst) {
                kc.set_task(Task {
                    state: "FAILED",
                    worker_id: "connect-1:8083",
                    trace: Some(real_trace()),
                });
                wait_connect(a, "saw the failure", |c| c["tasks"][0]["state"] == "FAILED").await;
                // PUT /connectors/es-sink/stop: STOPPED, no tasks listed.
                kc.set_connector("STOPPED", vec![]);
                wait_connect(a, "saw the stop", |c| c["connector_state"] == "STOPPED").await;
                // PATCH .../offsets, PUT .../resume: task 0 RUNNING again.
                kc.set_connector(
                    "RUNNING",
                    vec![Task {
                        state: "RUNNING",
                        worker_id: "connect-1:8083",
                        trace: None,
                    }],
                );
                wait_connect(a, "saw the restart", |c| {
                    c["tasks"][0]["state"] == "RUNNING"
                })
                .await;
            }
            seen
        }
    })
    .await;
    let topic = s.topic.clone();
    auditor
        .wait_for(60, "2 lost and 4 confirmed", |a| {
            a.lost(&topic, 0) == 2 && a.confirmed(&topic, 0) == 4
        })
        .await;
    let c = connect_status(&auditor).await;
    let events = c["events"].as_array().expect("events").clone();
    assert_eq!(events.len(), 4, "{c}");
    assert_eq!(
        (&events[0]["task"], &events[0]["from"], &events[0]["to"]),
        (&json!(0), &json!("RUNNING"), &json!("FAILED")),
        "{c}"
    );
    assert_eq!(
        events[0]["trace"],
        format!("{EXCEPTION}; caused by {CAUSE}"),
        "{c}"
    );
    assert_eq!(
        (&events[3]["task"], &events[3]["from"], &events[3]["to"]),
        (&json!(0), &json!("FAILED"), &json!("RUNNING")),
        "{c}"
    );
    let words = format!(
        "Kafka Connect task 0 of {CONNECTOR} FAILED at {} ({EXCEPTION}; caused by {CAUSE}), RUNNING again at {}; \
         Kafka Connect connector {CONNECTOR} STOPPED at {}, RUNNING again at {}; \
         the connector was STOPPED between the commits: its offsets then move only through \
         Connect's offsets API, a consumer group reset or its tasks' last commit as they stopped",
        words_time(&events[0]),
        words_time(&events[3]),
        words_time(&events[1]),
        words_time(&events[2])
    );

    let gaps = api_gaps(&auditor).await;
    assert_eq!(gap_tuples(&gaps), vec![(0, 2, 3, 2)], "{gaps:?}");
    assert_eq!(gaps[0]["cause"], "skipped_by_restart", "{gaps:?}");
    assert_eq!(gaps[0]["evidence"], words.as_str(), "{gaps:?}");
    let stored = auditor
        .store
        .get_gap(gaps[0]["id"].as_str().expect("id"))
        .expect("store")
        .expect("stored");
    assert_eq!(
        stored.evidence_line().as_deref(),
        Some(format!("{words}: offsets 2–3 skipped").as_str())
    );
    let (code, page) = auditor.get("/ui").await;
    assert_eq!(code, 200);
    assert!(page.contains(&format!("Z; {words}")), "{page}");
    assert!(!page.contains("the Flink job"), "{page}");

    // The source in /api/status: the URL without its credentials (sent as Basic auth).
    assert_eq!(c["state"], "ok", "{c}");
    assert_eq!(c["url"], format!("{}/", connect.url), "{c}");
    assert_eq!(c["connector"], CONNECTOR);
    assert_eq!(c["connector_state"], "RUNNING", "{c}");
    assert_eq!(
        c["tasks"],
        json!([{"id": 0, "state": "RUNNING", "worker_id": "connect-1:8083"}]),
        "{c}"
    );
    assert_eq!(c["errors_tolerance"], "all", "{c}");
    assert_eq!(c["dead_letter_queue"], true, "{c}");
    let shown = api_status(&auditor).await.to_string();
    assert!(
        !shown.contains("s3cret") && !shown.contains("ops:"),
        "{shown}"
    );
    assert_eq!(
        connect.authorization().as_deref(),
        Some("Basic b3BzOnMzY3JldA==")
    );
    assert!(connect.requests() >= 4, "{}", connect.requests());
    auditor.stop().await;
}

/// A Connect REST API that cannot be reached changes no verdict: the same gap, with its
/// cause, at once; its evidence, after waiting for the source a bounded time, says only
/// that Connect was not observed (review 27c, F-1: it said nothing, as if nothing had
/// happened); the source is `error` in /api/status, its reason
/// naming the URL without credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreachable_connect_changes_no_verdict() {
    let s = Scenario::new("connectdown").await;
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let url = format!("http://127.0.0.1:{port}");
    let auditor = Auditor::start(&config_with_connect(&s, &url)).await;
    let a = &auditor;
    s.play_seed_incident(|o| async move { pipeline_committed(a) == Some(o) })
        .await;
    let topic = s.topic.clone();
    auditor
        .wait_for(60, "2 lost and 4 confirmed", |a| {
            a.lost(&topic, 0) == 2 && a.confirmed(&topic, 0) == 4
        })
        .await;
    let gaps = api_gaps(&auditor).await;
    assert_eq!(gap_tuples(&gaps), vec![(0, 2, 3, 2)], "{gaps:?}");
    assert_eq!(gaps[0]["cause"], "skipped_by_restart", "{gaps:?}");
    // The evidence of a gap found while the source cannot be read waits up to 30 s for it
    // to answer (src/audit/evidence.rs), then says what is known.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    let mut gaps = gaps;
    while gaps[0]["evidence"].is_null() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        gaps = api_gaps(&auditor).await;
    }
    let not_observed = "Kafka Connect connector es-sink not observed since ";
    assert!(
        gaps[0]["evidence"]
            .as_str()
            .is_some_and(|e| e.starts_with(not_observed)
                && e.contains(&format!("(cannot reach Kafka Connect at {url}/:"))),
        "{gaps:?}"
    );
    let c = connect_status(&auditor).await;
    assert_eq!(c["state"], "error", "{c}");
    assert!(
        c["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with(&format!("cannot reach Kafka Connect at {url}/:"))),
        "{c}"
    );
    assert!(
        c["connector_state"].is_null() && c["events"] == json!([]),
        "{c}"
    );
    let shown = api_status(&auditor).await.to_string();
    assert!(!shown.contains("s3cret"), "{shown}");
    auditor.stop().await;
}
