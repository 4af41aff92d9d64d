//! `gap-auditor check`: a one-shot audit of a past range by the real binary, against the
//! real broker and MariaDB. Exit 1 with exactly the known losses, exit 0 on a clean range,
//! a progress bar on a terminal (driven through `script`, which gives the binary a pty) and
//! none when piped.

use crate::support::*;
use std::process::Command;

fn check_cmd(config: &std::path::Path, from: &str, to: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gap-auditor"));
    c.args(["check", "-c"])
        .arg(config)
        .args(["--from", from, "--to", to]);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_reports_exactly_the_losses_of_a_range() {
    let s = Scenario::new("check").await;
    s.send(&dns_lines(0..20)).await;
    let lost = |o: i64| [4, 9, 15].contains(&o);
    s.pipeline()
        .records(20)
        .copies(move |o| usize::from(!lost(o)))
        .run()
        .await;
    let config = s.state.path().join("gap-auditor.toml");
    std::fs::write(
        &config,
        config_toml(&s.spec("offset_columns", "1s", "500ms")),
    )
    .expect("config");
    // The daemon's due rule holds for check too: records within grace (1 s) of now are not
    // due yet. A real check runs over the past; this one waits out grace.
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;

    // Three losses: exit 1, exactly those offsets.
    let out = check_cmd(&config, "offset:0", "offset:20")
        .args(["--format", "json"])
        .output()
        .expect("run check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    let gaps = report["gaps"].as_array().expect("gaps");
    assert_eq!(
        gap_tuples(gaps),
        vec![(0, 4, 4, 1), (0, 9, 9, 1), (0, 15, 15, 1)],
        "{report}"
    );
    assert_eq!(report["confirmed"], 17);
    assert_eq!(report["lost"], 3);
    assert!(
        !stderr.contains("records"),
        "no progress bar when piped: {stderr}"
    );

    // A clean sub-range: exit 0.
    let out = check_cmd(&config, "offset:0", "offset:4")
        .output()
        .expect("run check");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("no gaps"));

    // Under a terminal the progress bar is drawn (`script` runs the command on a pty).
    let cmd = format!(
        "{} check -c {} --from offset:0 --to offset:20",
        env!("CARGO_BIN_EXE_gap-auditor"),
        config.display()
    );
    let out = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .output()
        .expect("run script");
    let tty = String::from_utf8_lossy(&out.stdout);
    // indicatif limits its redraw rate, so which counts get drawn varies; some do.
    assert!(tty.contains("/20 records"), "progress bar on a tty: {tty}");
    assert!(tty.contains("3 missing"), "{tty}");
}

/// Guarantee 9 (`check` never reports what `run` would not): records the pipeline group has
/// not passed are lag, not checked and never missing; a misspelt group gives no verdict
/// (exit 2) instead of calling every record lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_applies_the_due_rule() {
    let s = Scenario::new("check_due").await;
    s.send(&dns_lines(0..10)).await;
    // The pipeline has written and committed 0..6; 6..10 are still on their way.
    s.pipeline().records(6).run().await;
    let config = s.state.path().join("gap-auditor.toml");
    std::fs::write(
        &config,
        config_toml(&s.spec("offset_columns", "1s", "500ms")),
    )
    .expect("config");
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    let out = check_cmd(&config, "offset:0", "offset:10")
        .args(["--format", "json"])
        .output()
        .expect("run check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "lag is not loss: {stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    assert_eq!(report["lost"], 0, "{report}");
    assert_eq!(report["confirmed"], 6, "{report}");
    let range = &report["ranges"][0];
    assert_eq!(
        (range["to"].as_i64(), range["requested_to"].as_i64()),
        (Some(6), Some(10)),
        "{report}"
    );
    assert!(
        range["not_checked"]
            .as_str()
            .is_some_and(|w| w.contains("lag")),
        "{report}"
    );

    // The pipeline group misspelt: no verdict, exit 2, and the error says why.
    let typo = format!("{}x", s.pipeline_group);
    let mut spec = s.spec("offset_columns", "1s", "500ms");
    spec.pipeline_group = Some(&typo);
    std::fs::write(&config, config_toml(&spec)).expect("config");
    let out = check_cmd(&config, "offset:0", "offset:10")
        .output()
        .expect("run check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no committed offset"), "{stderr}");
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// `check` (JSON) off the runtime's workers: (exit code, report or `null`, stderr).
async fn check_json(
    config: &std::path::Path,
    from: &str,
    to: &str,
) -> (Option<i32>, serde_json::Value, String) {
    let mut cmd = check_cmd(config, from, to);
    cmd.args(["--format", "json"]);
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("run check"))
        .await
        .expect("check task");
    let report = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (
        out.status.code(),
        report,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Guarantee 9 without a pipeline group (a pipeline that never commits, as Spark Structured
/// Streaming): `grace` runs from when a record was appended, never from its CreateTime.
/// 20 records are backfilled with a CreateTime 10 minutes old; `check` and `run` start right
/// after, and the pipeline writes 17 of them a second later, within grace (10 s). Kafka keeps
/// no append time on a CreateTime topic, so check counts from the log end it observed and
/// waits grace out: it reports exactly the 3 records the pipeline lost, the gaps `run`
/// reports, and never the 17 written within grace.
///
/// Before: check took the CreateTime as the clock, found all 20 older than grace and reported
/// them missing at once (one gap 0-19, exit 1) while `run` reported nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_without_a_group_counts_grace_from_the_append_not_the_create_time() {
    let s = Scenario::new("check_backfill").await;
    let lost = |o: i64| [4, 9, 15].contains(&o);
    let backfill = now_ms() - 600_000;
    for (i, line) in dns_lines(0..20).iter().enumerate() {
        let at = backfill + i as i64;
        assert_eq!(s.producer.send_at(0, line.as_bytes(), at).await, i as i64);
    }
    // Grace must outlast the auditor's start and the pipeline on a busy lane: the same
    // margin the LogAppendTime test below needed (CI of stop 49 overran its 6 s).
    let mut spec = s.spec("offset_columns", "10s", "300ms");
    spec.pipeline_group = None;
    let toml = config_toml(&spec);
    let config = s.state.path().join("gap-auditor.toml");
    std::fs::write(&config, &toml).expect("config");

    let started = std::time::Instant::now();
    let check = tokio::spawn({
        let config = config.clone();
        async move { check_json(&config, "offset:0", "offset:20").await }
    });
    let auditor = Auditor::start(&toml).await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    s.pipeline()
        .records(20)
        .copies(move |o| usize::from(!lost(o)))
        .run()
        .await;
    assert_eq!(
        auditor.lost(&s.topic, 0),
        0,
        "run: nothing due within grace"
    );

    let (code, report, stderr) = check.await.expect("check");
    assert_eq!(code, Some(1), "{report}\n{stderr}");
    assert_eq!(
        gap_tuples(report["gaps"].as_array().expect("gaps")),
        vec![(0, 4, 4, 1), (0, 9, 9, 1), (0, 15, 15, 1)],
        "{report}"
    );
    assert_eq!(
        (report["confirmed"].as_i64(), report["lost"].as_i64()),
        (Some(17), Some(3))
    );
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(10),
        "check decided before grace had passed since it saw the records: {stderr}"
    );
    assert!(stderr.contains("not yet due"), "{stderr}");

    // `run` on the same data: the same gaps.
    auditor
        .wait_decided(30, "3 lost, 17 confirmed", |a| {
            a.lost(&s.topic, 0) == 3 && a.confirmed(&s.topic, 0) == 17
        })
        .await;
    assert_eq!(
        gap_tuples(&api_gaps(&auditor).await),
        gap_tuples(report["gaps"].as_array().expect("gaps"))
    );
    auditor.stop().await;
}

/// Guarantee 9 on a LogAppendTime topic (`message.timestamp.type=LogAppendTime`): the broker
/// stamps each record with when it appended it, so `check` knows when each record falls due
/// and answers at once. Right after 20 records are backfilled (CreateTime 10 minutes old,
/// overwritten by the broker) and written, 3 of them lost, by the pipeline: exit 0, nothing
/// missing, "20 records not yet due", as `run` reports nothing. Once grace has passed, check
/// and run report the same 3 lost records.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_on_a_log_append_time_topic_says_what_is_not_yet_due() {
    let s = Scenario::new("check_lat").await;
    let topic = unique("check_lat_append");
    create_topic_with(&topic, 1, &[("message.timestamp.type", "LogAppendTime")]).await;
    let producer = TestProducer::new(&topic);
    let lost = |o: i64| [4, 9, 15].contains(&o);
    let backfill = now_ms() - 600_000;
    for (i, line) in dns_lines(0..20).iter().enumerate() {
        let at = backfill + i as i64;
        assert_eq!(producer.send_at(0, line.as_bytes(), at).await, i as i64);
    }
    // Grace is measured from the broker's append time, so it must outlast the auditor's start,
    // the pipeline and two checks on a busy CI lane (6 s did not: CI of stop 49).
    let mut spec = s.spec("offset_columns", "20s", "300ms");
    spec.pipeline_group = None;
    spec.topic = &topic;
    let toml = config_toml(&spec);
    let config = s.state.path().join("gap-auditor.toml");
    std::fs::write(&config, &toml).expect("config");
    let auditor = Auditor::start(&toml).await;
    s.pipeline()
        .reading(&topic)
        .records(20)
        .copies(move |o| usize::from(!lost(o)))
        .run()
        .await;

    // At once: nothing is due, check says so and does not wait.
    let started = std::time::Instant::now();
    let (code, report, stderr) = check_json(&config, "offset:0", "offset:20").await;
    assert_eq!(code, Some(0), "not due is not missing: {report}\n{stderr}");
    assert_eq!(
        (report["lost"].as_i64(), report["not_due"].as_i64()),
        (Some(0), Some(20)),
        "{report}"
    );
    let out = check_cmd(&config, "offset:0", "offset:20")
        .output()
        .expect("run check");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("20 records not yet due"), "{stdout}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "check answered at once, without waiting grace"
    );
    assert_eq!(auditor.lost(&topic, 0), 0, "run: nothing due within grace");

    // After grace both report the same loss.
    auditor
        .wait_decided(60, "3 lost, 17 confirmed", |a| {
            a.lost(&topic, 0) == 3 && a.confirmed(&topic, 0) == 17
        })
        .await;
    let (code, report, stderr) = check_json(&config, "offset:0", "offset:20").await;
    assert_eq!(code, Some(1), "{report}\n{stderr}");
    assert_eq!(report["not_due"].as_i64(), Some(0), "{report}");
    assert_eq!(
        gap_tuples(report["gaps"].as_array().expect("gaps")),
        gap_tuples(&api_gaps(&auditor).await),
    );
    assert_eq!(
        gap_tuples(report["gaps"].as_array().expect("gaps")),
        vec![(0, 4, 4, 1), (0, 9, 9, 1), (0, 15, 15, 1)]
    );
    auditor.stop().await;
}
