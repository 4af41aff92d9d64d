//! Elasticsearch outage: the test server (the OpenSearch 2.19 node of
//! `scripts/test-env.sh`) really stopped and started again with `scripts/es-ctl.sh`. Its own test
//! binary, because it stops the server every ES test shares (cargo runs test binaries one
//! after another).
//!
//! Transient errors (connection refused while it is down) are unknown, never missing:
//! `gap_auditor_sink_up` is 0 and `/readyz` fails meanwhile; after the restart every record
//! is confirmed and no gap was ever recorded.

#[path = "it/support.rs"]
mod support;

#[path = "es_support/mod.rs"]
mod es_support;

use es_support::*;
use std::process::Command;
use std::time::Duration;
use support::*;

fn es_ctl(action: &str) {
    let ctl = std::env::var("GAP_AUDITOR_TEST_ES_CTL")
        .expect("GAP_AUDITOR_TEST_ES_CTL is not set: run scripts/test.sh");
    let st = Command::new("bash")
        .arg(&ctl)
        .arg(action)
        .status()
        .expect("run es-ctl");
    assert!(st.success(), "es-ctl {action} failed");
}

/// Restarts the server even when the test fails half-way, so later test binaries have it.
struct Restart;
impl Drop for Restart {
    fn drop(&mut self) {
        es_ctl("start");
    }
}

async fn outage(strategy: &str) {
    let s = EsScenario::new("es_outage", 1, true).await;
    let topic = s.topic.clone();
    let lines = dns_lines(0..10);
    let producer = TestProducer::new(&topic);
    let a = s.start_auditor(strategy, "1s", "500ms").await;
    producer.send_all(0, &lines[0..5]).await;
    s.pipeline(strategy).records(5).run().await;
    a.wait_for(30, "first 5 confirmed, sink up", |a| {
        a.confirmed(&topic, 0) == 5 && a.sink_up() == 1
    })
    .await;

    // The pipeline writes the next 5 documents, then the server goes down before they are due.
    producer.send_all(0, &lines[5..10]).await;
    s.pipeline(strategy)
        .from(vec![(0, 5)])
        .records(5)
        .run()
        .await;
    let guard = Restart;
    es_ctl("stop");
    a.wait_for(30, "sink_up 0", |a| a.sink_up() == 0).await;
    keep_checking(Duration::from_secs(3), Duration::from_millis(100), || {
        assert_eq!(a.lost(&topic, 0), 0, "a down sink produced missing records");
        assert_eq!(a.sink_up(), 0);
    })
    .await;
    assert_eq!(a.confirmed(&topic, 0), 5);
    let err = a.status.snapshot()[0]
        .sink_error
        .clone()
        .unwrap_or_default();
    assert!(
        err.starts_with("sink unavailable"),
        "transient, not rejected: {err}"
    );
    let (code, _) = a.get("/readyz").await;
    assert_eq!(code, 503, "not ready while the sink is down");
    drop(guard); // starts the server again

    a.wait_for(60, "recovery: all 10 confirmed, sink up", |a| {
        assert_eq!(a.lost(&topic, 0), 0);
        a.confirmed(&topic, 0) == 10 && a.sink_up() == 1
    })
    .await;
    assert!(api_gaps(&a).await.is_empty());
    assert_eq!(a.settled(), Some(10));
    a.stop().await;
    s.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn es_down_is_unknown_not_missing() {
    // One test function: the server is stopped and started once per strategy, in turn.
    outage("offset_columns").await;
    outage("doc_id").await;
}
