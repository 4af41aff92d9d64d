//! Doris Routine Load as the pipeline's position (issue 37): the real broker, MariaDB as
//! the sink table, and a fake FE (tests/support/doris_fe.rs: NOT Doris, the documented
//! answer of `SHOW ROUTINE LOAD` over the MySQL protocol) standing for the job's progress.
//! Before this, `kind = "doris_routine_load"` was refused at start, and such an audit could
//! only run on the time-only rule, where a job paused longer than `grace` reads as loss.

use crate::support::doris_fe::FeJob;
use crate::support::*;
use std::time::Duration;

const JOB: &str = "dns_logs_load";

/// The scenario's offset_columns audit with the fake FE's job as its position.
async fn start_auditor(s: &Scenario, fe: &FeJob, job: &str) -> Auditor {
    let mut spec = s.spec("offset_columns", "1s", "300ms");
    spec.pipeline_group = None;
    let mut toml = config_toml(&spec);
    toml.push_str(&format!(
        "\n[audits.pipeline]\nkind = \"doris_routine_load\"\nurl = \"{}\"\njob = \"{job}\"\n",
        fe.url()
    ));
    Auditor::start(&toml).await
}

fn audit_status(a: &Auditor) -> Option<gap_auditor::status::AuditStatus> {
    a.status.snapshot().into_iter().next()
}

/// Pause → lag, ALTER to OFFSET_END → the exact gap with its cause, resume. The job loads
/// 0-3; it is paused while 4-5 arrive (a stall: nothing becomes due, for as long as it
/// lasts); the operator ALTERs it to OFFSET_END (the FE shows the end offset, 6, at once)
/// and, still paused, that is only an intent: nothing is declared until it resumes. It
/// resumes and loads 6-7 from there. 4-5 are the loss, `skipped_by_alter`, and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_job_is_lag_and_an_alter_to_offset_end_is_an_exact_gap_with_its_cause() {
    let s = Scenario::new("rl_alter").await;
    let topic = &s.topic;
    let fe = FeJob::start(JOB, topic, 1).await;
    let auditor = start_auditor(&s, &fe, JOB).await;
    let group_up = || pipeline_group_up(&auditor);

    let lines = dns_lines(0..8);
    assert_eq!(s.send(&lines[0..4]).await, vec![0, 1, 2, 3]);
    for (o, l) in lines[0..4].iter().enumerate() {
        s.write_row(l.as_bytes(), 0, o as i64).await;
    }
    fe.load(0, 4);
    auditor
        .wait_decided(30, "0-3 confirmed on the job's progress", |a| {
            a.confirmed(topic, 0) == 4 && pipeline_committed(a) == Some(4)
        })
        .await;
    assert_eq!(group_up(), 1);
    assert!(fe.shows() > 0);
    assert_eq!(fe.last_sql(), format!("SHOW ALL ROUTINE LOAD FOR `{JOB}`"));

    // Paused while 4-5 arrive: far longer than grace, never a loss.
    fe.pause("2026-12-06 02:14:00");
    assert_eq!(s.send(&lines[4..6]).await, vec![4, 5]);
    auditor
        .wait_for(10, "the pause on the status board", |a| {
            audit_status(a)
                .and_then(|st| st.pipeline_job_state)
                .is_some_and(|st| st.starts_with("PAUSED") && st.contains("pauses"))
        })
        .await;
    keep_checking(Duration::from_secs(3), Duration::from_millis(100), || {
        assert_eq!(
            auditor.lost(topic, 0),
            0,
            "a paused job's lag declared lost"
        );
        assert_eq!(group_up(), 1, "a pause is no hold: the position is read");
    })
    .await;

    // ALTER ... OFFSET_END: the FE shows 6 at once, but the job is still paused and the
    // operator could ALTER it back: 4-5 are not declared, however long it stays so.
    fe.alter_offset(0, 6);
    keep_checking(Duration::from_secs(3), Duration::from_millis(100), || {
        assert_eq!(
            auditor.lost(topic, 0),
            0,
            "an ALTER not yet applied declared loss"
        );
        assert_eq!(pipeline_committed(&auditor), Some(4));
    })
    .await;
    fe.resume();
    fe.running();
    // It starts at 6 and loads 6-7.
    assert_eq!(s.send(&lines[6..8]).await, vec![6, 7]);
    for (o, l) in lines.iter().enumerate().skip(6) {
        s.write_row(l.as_bytes(), 0, o as i64).await;
    }
    fe.load(0, 8);
    auditor
        .wait_decided(30, "4-5 lost, 0-3 and 6-7 confirmed", |a| {
            a.lost(topic, 0) == 2 && a.confirmed(topic, 0) == 6
        })
        .await;
    let gaps = api_gaps(&auditor).await;
    assert_eq!(gap_tuples(&gaps), vec![(0, 4, 5, 2)]);
    assert_eq!(gaps[0]["cause"], "skipped_by_alter", "{gaps:?}");
    assert_eq!(gaps[0]["pipeline_commit_from"], 4, "{gaps:?}");
    // 6 when a read saw the job resumed before its first commit, else 8.
    let to = gaps[0]["pipeline_commit_to"].as_i64();
    assert!(matches!(to, Some(6 | 8)), "{gaps:?}");
    assert_eq!(group_up(), 1);
    let st = audit_status(&auditor).expect("status");
    assert_eq!(st.pipeline_job.as_deref(), Some(JOB));
    assert_eq!(st.pipeline_job_state, None, "consuming again");
    auditor.stop().await;
}

/// What a real FE shows when the pause, the ALTER and the resume all fall between two
/// reads: only the job RUNNING further on (PauseTime is reset on resume). The jump is still
/// the ALTER's (Routine Load has no other way to skip records). Then the job is STOPPED:
/// `SHOW ROUTINE LOAD` no longer lists it (`ALL` does), its last progress stays the
/// position and the stop is a stall, never a hold or a loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_alter_between_two_reads_and_a_stopped_job() {
    let s = Scenario::new("rl_between").await;
    let topic = &s.topic;
    let fe = FeJob::start(JOB, topic, 1).await;
    let auditor = start_auditor(&s, &fe, JOB).await;
    let lines = dns_lines(0..6);
    assert_eq!(s.send(&lines[0..5]).await, vec![0, 1, 2, 3, 4]);
    for o in [0usize, 1, 4] {
        s.write_row(lines[o].as_bytes(), 0, o as i64).await;
    }
    fe.load(0, 2);
    auditor
        .wait_decided(30, "0-1 confirmed", |a| a.confirmed(topic, 0) == 2)
        .await;
    // Paused, ALTERed to 4, resumed, and 4 loaded: all unseen.
    fe.alter_between_reads(0, 5);
    auditor
        .wait_decided(30, "2-3 lost, 4 confirmed", |a| {
            a.lost(topic, 0) == 2 && a.confirmed(topic, 0) == 3
        })
        .await;
    let gaps = api_gaps(&auditor).await;
    assert_eq!(gap_tuples(&gaps), vec![(0, 2, 3, 2)]);
    assert_eq!(gaps[0]["cause"], "skipped_by_alter", "{gaps:?}");

    fe.stop();
    assert_eq!(s.send(&lines[5..6]).await, vec![5]);
    auditor
        .wait_for(10, "the stop on the status board", |a| {
            audit_status(a)
                .and_then(|st| st.pipeline_job_state)
                .is_some_and(|st| st.starts_with("STOPPED"))
        })
        .await;
    keep_checking(Duration::from_secs(3), Duration::from_millis(100), || {
        assert_eq!(
            auditor.lost(topic, 0),
            2,
            "a stopped job's lag declared lost"
        );
        let st = audit_status(&auditor).expect("status");
        assert_eq!(st.pipeline_group_hold, None, "a stopped job is no hold");
    })
    .await;
    auditor.stop().await;
}

/// A job name the FE does not know (misspelt): no position, verdicts held with the reason,
/// the gauge down; a record nobody loads is never declared lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unknown_job_holds_verdicts_and_says_so() {
    let s = Scenario::new("rl_unknown").await;
    let topic = &s.topic;
    let fe = FeJob::start(JOB, topic, 1).await;
    let auditor = start_auditor(&s, &fe, "dns_logs_lod").await;
    assert_eq!(s.send(&dns_lines(0..1)).await, vec![0]);
    auditor
        .wait_for(15, "the hold on the status board", |a| {
            audit_status(a)
                .and_then(|st| st.pipeline_group_hold)
                .is_some_and(|h| h.contains("dns_logs_lod") && h.contains("There is no job named"))
        })
        .await;
    assert_eq!(pipeline_group_up(&auditor), 0);
    keep_checking(Duration::from_secs(3), Duration::from_millis(100), || {
        assert_eq!(auditor.lost(topic, 0), 0);
    })
    .await;
    auditor.stop().await;
}

/// `check` takes the same position: the job's progress cuts the range (records past it are
/// lag, not checked) and the losses below it are exact. Before, `check` of such an audit
/// had no position and decided every record on the time-only rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_cuts_the_range_at_the_jobs_progress() {
    let s = Scenario::new("rl_check").await;
    let fe = FeJob::start(JOB, &s.topic, 1).await;
    let lines = dns_lines(0..10);
    assert_eq!(s.send(&lines).await, (0..10).collect::<Vec<i64>>());
    for (o, l) in lines.iter().enumerate() {
        if ![3, 7].contains(&o) {
            s.write_row(l.as_bytes(), 0, o as i64).await;
        }
    }
    // The job loaded 0-7 (3 and 7 never reached the table); 8-9 are lag.
    fe.load(0, 8);
    let mut spec = s.spec("offset_columns", "1s", "500ms");
    spec.pipeline_group = None;
    let mut toml = config_toml(&spec);
    toml.push_str(&format!(
        "\n[audits.pipeline]\nkind = \"doris_routine_load\"\nurl = \"{}\"\njob = \"{JOB}\"\n",
        fe.url()
    ));
    let config = s.state.path().join("gap-auditor.toml");
    std::fs::write(&config, toml).expect("config");
    let (code, report, stderr) = run_check_json(&config, "offset:0", "offset:10").await;
    assert_eq!(code, 1, "{stderr}");
    let gaps = report["gaps"].as_array().expect("gaps");
    assert_eq!(
        gap_tuples(gaps),
        vec![(0, 3, 3, 1), (0, 7, 7, 1)],
        "{report}"
    );
    assert_eq!(report["lost"], 2, "{report}");
    assert_eq!(report["confirmed"], 6, "{report}");
    assert!(
        report
            .to_string()
            .contains(&format!("Routine Load job \\\"{JOB}\\\" has committed 8")),
        "8-9 named as lag: {report}"
    );
    assert!(fe.shows() >= 1);
}
