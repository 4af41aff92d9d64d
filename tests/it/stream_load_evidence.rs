//! Doris Stream Load evidence on gaps (issue 37), through the daemon: a pipeline that
//! commits one checkpoint over records 0–9 while its Stream Load filtered record 5 (the sink
//! could not convert it; `max_filter_ratio` let the load succeed without it), and a fake
//! FE (tests/support/doris_fe.rs: NOT Doris, the documented `SHOW STREAM LOAD` answer over
//! the MySQL protocol, its clock in UTC+8) that lists the load. The sink is MariaDB; the
//! gap stays `dropped_in_flight` (Doris counts the rows, it does not say which records),
//! and carries the load in its words.

use crate::support::doris_fe::FeJob;
use crate::support::*;
use std::time::Duration;

const PREFIX: &str = "doris_sink";

/// The scenario's config with the Stream Load evidence keys (user and password in the FE's
/// URL: they must not show anywhere).
fn config_with_fe(s: &Scenario, fe: &FeJob) -> String {
    let url = fe.url().replace("mysql://auditor@", "mysql://ops:s3cret@");
    format!(
        "{}\n[audits.pipeline]\ndoris_fe_url = \"{url}\"\ndoris_label_prefix = \"{PREFIX}\"\nstream_load_record_delay = \"1s\"\n",
        config_toml(&s.spec("offset_columns", "2s", "500ms"))
    )
}

/// The `stream_load` block of the audit's /api/status.
async fn stream_load_status(a: &Auditor) -> serde_json::Value {
    api_status(a).await["audits"][0]["stream_load"].clone()
}

/// Waits up to `secs` for `probe` to give a value (its error says what it saw).
async fn eventually<T, F: std::future::Future<Output = Result<T, String>>>(
    secs: u64,
    what: &str,
    probe: impl Fn() -> F,
) -> T {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        match probe().await {
            Ok(v) => return v,
            Err(e) if std::time::Instant::now() > deadline => panic!("never {what}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gap_names_the_stream_load_that_filtered_its_record() {
    let s = Scenario::new("slev").await;
    let fe = FeJob::start("unused_job", &s.topic, 1).await;
    // Loads from before: two of the pipeline a minute ago (one that filtered rows, one
    // that dropped nothing), and one of another pipeline into the same table that
    // filtered rows just now.
    let minute = Duration::from_secs(60);
    let earlier = format!("{PREFIX}_example_db_{}_0_1", s.table);
    fe.add_stream_load(&earlier, &s.table, (4, 2), minute);
    fe.add_stream_load(&format!("{earlier}_x"), &s.table, (4, 0), minute);
    fe.add_stream_load(
        &format!("other_example_db_{}_0_1", s.table),
        &s.table,
        (9, 9),
        Duration::ZERO,
    );
    let auditor = Auditor::start(&config_with_fe(&s, &fe)).await;
    let a = &auditor;
    eventually(30, "the FE read", || async {
        let st = stream_load_status(a).await;
        (st["state"] == "ok").then_some(()).ok_or(st.to_string())
    })
    .await;
    // Checkpoint 2: its load read 10 rows and filtered one (record 5), then the pipeline
    // committed past all ten.
    let label = format!("{PREFIX}_example_db_{}_0_2", s.table);
    s.play_drop_in_flight(a, || {
        fe.add_stream_load(&label, &s.table, (10, 1), Duration::ZERO)
    })
    .await;
    let words = eventually(40, "the gap's Stream Load evidence", || async {
        let gaps = api_gaps(a).await;
        gaps.first()
            .and_then(|g| g["evidence"].as_str().map(str::to_owned))
            .ok_or(format!("{gaps:?}"))
    })
    .await;
    let gaps = api_gaps(a).await;
    assert_eq!(gap_tuples(&gaps), vec![(0, 5, 5, 1)]);
    assert_eq!(gaps[0]["cause"], "dropped_in_flight", "{gaps:?}");
    assert_eq!(
        gaps[0]["state"], "open",
        "evidence changes no verdict: {gaps:?}"
    );
    assert!(
        words.starts_with(&format!(
            "Doris Stream Load {label} (checkpoint 2, subtask 0) filtered 1 of 10 rows"
        )),
        "{words}"
    );
    assert!(words.contains("error log: http://be1:8040/"), "{words}");
    // Only the load of the step's window: not the pipeline's earlier load, not the other
    // pipeline's.
    assert_eq!(words.matches("Doris Stream Load").count(), 1, "{words}");
    // The store has it too (what `gaps` prints).
    let stored = a
        .store
        .get_gap(gaps[0]["id"].as_str().expect("id"))
        .expect("store")
        .expect("stored");
    assert_eq!(stored.evidence.as_deref(), Some(words.as_str()));
    let st = stream_load_status(a).await;
    assert_eq!(st["zone_offset_minutes"], 480, "{st}");
    assert_eq!(st["label_prefix"], PREFIX, "{st}");
    assert_eq!(st["listed"], 3, "{st}");
    assert_eq!(st["loads"][0]["label"], earlier.as_str(), "{st}");
    assert_eq!(st["loads"][1]["label"], label.as_str(), "{st}");
    assert_eq!(st["loads"][1]["filtered_rows"], 1, "{st}");
    let shown = st.to_string();
    assert!(
        !shown.contains("s3cret") && !shown.contains("ops"),
        "{shown}"
    );
    auditor.stop().await;
}

/// An FE that cannot be reached changes nothing: the gap is reported as without the source,
/// its state in /api/status says why, and no credential shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreachable_fe_changes_no_verdict() {
    let s = Scenario::new("sldown").await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    let port = closed.local_addr().expect("addr").port();
    drop(closed);
    let toml = format!(
        "{}\n[audits.pipeline]\ndoris_fe_url = \"mysql://ops:s3cret@127.0.0.1:{port}/example_db\"\ndoris_label_prefix = \"{PREFIX}\"\nstream_load_record_delay = \"1s\"\n",
        config_toml(&s.spec("offset_columns", "2s", "500ms"))
    );
    let auditor = Auditor::start(&toml).await;
    let a = &auditor;
    s.play_drop_in_flight(a, || ()).await;
    let gaps = api_gaps(a).await;
    assert_eq!(gap_tuples(&gaps), vec![(0, 5, 5, 1)]);
    assert_eq!(gaps[0]["cause"], "dropped_in_flight", "{gaps:?}");
    let st = stream_load_status(a).await;
    assert_eq!(st["state"], "error", "{st}");
    let shown = st.to_string();
    assert!(!shown.contains("s3cret"), "{shown}");
    auditor.stop().await;
}
