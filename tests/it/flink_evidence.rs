//! Flink's restore evidence on gaps (issue 37), through the daemon: the seed incident with
//! a JobManager stand-in ([`FakeFlink`], Flink's documented JSON) that lists the job's crash
//! and its restart. The real Flink run is scripts/flink-seed.sh (docs/TESTING.md).

use crate::fake_flink::{FakeFlink, Run};
use crate::support::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const JOB: &str = "FlinkSQLFromKafka2Doris";
const OLD: &str = "7684be6004e4e955c2a558a9bc463f65";
const NEW: &str = "49b6cbb8b7e4f3c1a2d5e6f708192a3b";

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// The job running since a minute ago, with two completed checkpoints.
fn first_run() -> Run {
    Run {
        jid: OLD.into(),
        name: JOB.into(),
        state: "RUNNING",
        start_ms: now_ms() - 60_000,
        end_ms: -1,
        restored: None,
        completed: Some((2, now_ms() - 5_000)),
    }
}

/// Waits for the seed's verdicts (2 lost, 4 confirmed) and returns `/api/gaps`, checked to
/// hold the one seed gap, 2–3, caused by the restart: evidence or not, the verdict is the
/// same.
async fn the_seed_gap(s: &Scenario, auditor: &Auditor) -> Vec<serde_json::Value> {
    let topic = s.topic.clone();
    auditor
        .wait_for(60, "2 lost and 4 confirmed", |a| {
            a.lost(&topic, 0) == 2 && a.confirmed(&topic, 0) == 4
        })
        .await;
    let gaps = api_gaps(auditor).await;
    assert_eq!(gap_tuples(&gaps), vec![(0, 2, 3, 2)], "{gaps:?}");
    assert_eq!(gaps[0]["cause"], "skipped_by_restart", "{gaps:?}");
    gaps
}

/// The seed scenario's config with the Flink evidence keys (user and password in the URL:
/// they must not show anywhere).
fn config_with_flink(s: &Scenario, flink_url: &str) -> String {
    let url = flink_url.replace("http://", "http://ops:s3cret@");
    format!(
        "{}\n[audits.pipeline]\nflink_rest_url = \"{url}\"\nflink_job = \"{JOB}\"\n",
        config_toml(&s.spec("offset_columns", "2s", "500ms"))
    )
}

/// The seed incident: the job is killed after committing 2 and resubmitted with
/// `latest-offset` (a new run, nothing restored); the gap 2–3 says so, in /api/gaps, in the
/// store (what `gaps` prints) and on the gap page; /api/status shows the source and the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_seed_gap_carries_the_restart_without_a_restore() {
    let s = Scenario::new("flinkev").await;
    let flink = FakeFlink::start().await;
    flink.set_runs(vec![first_run()]);
    let auditor = Auditor::start(&config_with_flink(&s, &flink.url)).await;
    let a = &auditor;
    let restarted_at = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let restarted = Arc::new(AtomicBool::new(false));
    let (fl, at, done) = (flink.clone(), restarted_at.clone(), restarted.clone());
    s.play_seed_incident(move |o| {
        let (fl, at, done) = (fl.clone(), at.clone(), done.clone());
        async move {
            let seen = pipeline_committed(a) == Some(o);
            // Once the auditor saw commit 2 the job "crashes" and is resubmitted: the old
            // run FAILED, a new one RUNNING, restored from nothing.
            if seen && o == 2 && !done.swap(true, Ordering::SeqCst) {
                let t = now_ms();
                at.store(t, Ordering::SeqCst);
                let mut old = first_run();
                old.state = "FAILED";
                old.end_ms = t - 100;
                fl.set_runs(vec![
                    old,
                    Run {
                        jid: NEW.into(),
                        name: JOB.into(),
                        state: "RUNNING",
                        start_ms: t,
                        end_ms: -1,
                        restored: None,
                        completed: Some((1, t + 500)),
                    },
                ]);
            }
            seen
        }
    })
    .await;
    let gaps = the_seed_gap(&s, &auditor).await;
    let t = restarted_at.load(Ordering::SeqCst);
    let words = format!(
        "restarted at {} without restoring a checkpoint (latest-offset)",
        chrono::DateTime::from_timestamp_millis(t)
            .expect("time")
            .format("%Y-%m-%dT%H:%M:%SZ")
    );
    assert_eq!(gaps[0]["evidence"], words.as_str(), "{gaps:?}");
    // What `gaps` prints under the row, from the store.
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
    assert!(page.contains(&format!("the Flink job {words}")), "{page}");
    // The source and the current run in /api/status; the URL without its credentials.
    let status = api_status(&auditor).await;
    let f = &status["audits"][0]["flink"];
    assert_eq!(f["state"], "ok", "{status}");
    assert_eq!(f["job"], JOB);
    assert_eq!(f["run"]["jid"], NEW, "{status}");
    assert_eq!(f["run"]["restore"]["kind"], "none", "{status}");
    // The crashed run and its last completed checkpoint: what a correct restart restores.
    assert_eq!(f["previous_run"]["jid"], OLD, "{status}");
    assert_eq!(f["previous_run"]["last_completed"]["id"], 2, "{status}");
    // The fake JobManager shares this machine's clock: the measured skew is at most half
    // a request's time (a loaded machine's seconds, not the minute a wrong duration gives).
    assert!(
        f["clock_skew_ms"]
            .as_i64()
            .is_some_and(|ms| ms.abs() < 5_000),
        "{status}"
    );
    let shown = status.to_string();
    assert!(
        !shown.contains("s3cret") && !shown.contains("ops:"),
        "{shown}"
    );
    assert!(flink.requests() > 0);
    auditor.stop().await;
}

/// A JobManager that cannot be read degrades to today's behaviour: the same gap, with its
/// cause and no evidence; the source is `error` in /api/status; when it answers again
/// its run shows (here one restored from a checkpoint: "restored from chk-7").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreadable_jobmanager_changes_no_verdict() {
    let s = Scenario::new("flinkdown").await;
    let flink = FakeFlink::start().await;
    flink.set_down(true);
    let auditor = Auditor::start(&config_with_flink(&s, &flink.url)).await;
    let a = &auditor;
    s.play_seed_incident(|o| async move { pipeline_committed(a) == Some(o) })
        .await;
    let gaps = the_seed_gap(&s, &auditor).await;
    assert!(gaps[0]["evidence"].is_null(), "{gaps:?}");
    let status = api_status(&auditor).await;
    let f = &status["audits"][0]["flink"];
    assert_eq!(f["state"], "error", "{status}");
    assert!(
        f["reason"].as_str().is_some_and(|r| r.contains("HTTP 503")),
        "{status}"
    );
    assert!(!status.to_string().contains("s3cret"), "{status}");

    // Up again, with the job resubmitted from its retained checkpoint.
    let t = now_ms();
    flink.set_runs(vec![Run {
        jid: NEW.into(),
        name: JOB.into(),
        state: "RUNNING",
        start_ms: t,
        end_ms: -1,
        restored: Some((7, t + 300, format!("file:/tmp/ck/{OLD}/chk-7"))),
        completed: None,
    }]);
    flink.set_down(false);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status = api_status(&auditor).await;
        let f = &status["audits"][0]["flink"];
        if f["state"] == "ok" && f["run"]["jid"] == NEW {
            assert_eq!(f["run"]["restore"]["kind"], "checkpoint", "{status}");
            assert!(
                f["run"]["summary"].as_str().is_some_and(
                    |s| s.ends_with(&format!("restored from chk-7 (file:/tmp/ck/{OLD}/chk-7)"))
                ),
                "{status}"
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{status}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The gap found while it was down keeps no evidence (decided once).
    let gaps = api_gaps(&auditor).await;
    assert!(gaps[0]["evidence"].is_null(), "{gaps:?}");
    auditor.stop().await;
}
