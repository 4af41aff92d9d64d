//! Completeness (issue 18, SPEC "Completeness") end to end on Apache Kafka 4.4 + MariaDB:
//! the gauge `gap_auditor_complete_until_timestamp_seconds`, `GET /api/completeness` and
//! the real `gap-auditor wait` binary polling an in-process daemon.
//!
//! Record times are read back from Kafka (the producer's CreateTime), never taken from the
//! auditor's own answers. Broker behaviour relied on: the log end offsets the broker reports
//! while fetching are exact (Kafka's are for any batching; support's producer still sends
//! one record per batch, which tansu, the broker before, needed for them).

use crate::support::*;
use chrono::{TimeZone, Utc};
use gap_auditor::completeness::AuditCompleteness;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use std::path::Path;
use std::time::{Duration, Instant};

/// The timestamp (unix ms) of the record at `offset` of `partition`, read from Kafka.
pub(super) fn record_ts(topic: &str, partition: i32, offset: i64) -> i64 {
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .set("group.id", unique("ts_reader"))
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, rdkafka::Offset::Offset(offset))
        .expect("tpl");
    c.assign(&tpl).expect("assign");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(
            Instant::now() < deadline,
            "record {topic}-{partition}@{offset} not read"
        );
        if let Some(m) = c.poll(Duration::from_millis(500)) {
            let m = m.expect("message");
            assert_eq!(m.offset(), offset, "read from the offset asked");
            return m.timestamp().to_millis().expect("record timestamp");
        }
    }
}

pub(super) fn rfc3339(ms: i64) -> String {
    Utc.timestamp_millis_opt(ms)
        .single()
        .expect("time")
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The instant (unix ms) of an RFC 3339 time the API wrote: it leaves out a zero fraction
/// ("…:13Z", not "…:13.000Z"), so times are compared as instants (CI of 30c98b9 failed on a
/// record stamped on a whole second).
pub(super) fn instant_ms(v: &serde_json::Value) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(v.as_str()?)
        .ok()
        .map(|t| t.timestamp_millis())
}

/// What the audit published last round.
pub(super) fn completeness(a: &Auditor) -> AuditCompleteness {
    a.status
        .completeness(&a.audit)
        .expect("the audit is on the status board")
}

fn complete_until(a: &Auditor) -> Option<i64> {
    completeness(a).complete_until_ms
}

fn gauge(a: &Auditor) -> f64 {
    a.metrics
        .complete_until_timestamp_seconds
        .with_label_values(&[a.audit.as_str()])
        .get()
}

/// `GET /api/completeness?audit=…&until=…` as JSON.
pub(super) async fn api(a: &Auditor, until_ms: i64) -> serde_json::Value {
    let (code, body) = a
        .get(&format!(
            "/api/completeness?audit={}&until={}",
            a.audit,
            rfc3339(until_ms)
        ))
        .await;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("completeness json")
}

/// Runs `gap-auditor ARGS…` (the real binary) off the runtime's workers: (exit code,
/// stdout, stderr).
async fn run_bin(args: Vec<String>) -> (i32, String, String) {
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gap-auditor"))
            .args(&args)
            .output()
            .expect("run gap-auditor");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .expect("binary task")
}

/// `gap-auditor wait --url <the in-process daemon> --audit dns_logs --until T --timeout D`.
pub(super) async fn wait_bin(a: &Auditor, until_ms: i64, timeout: &str) -> (i32, String, String) {
    run_bin(
        [
            "wait",
            "--url",
            &format!("http://{}", a.addr),
            "--audit",
            &a.audit,
            "--until",
            &rfc3339(until_ms),
            "--timeout",
            timeout,
            "--poll",
            "200ms",
        ]
        .map(str::to_string)
        .to_vec(),
    )
    .await
}

/// The seed incident under an in-process daemon whose config is also written to a file for
/// the binary, waiting until its gap {2,3} is reported: (scenario, daemon, config, gap id).
/// The auditor has verified 0-1 before the job dies (a real auditor runs long before an
/// incident), so the lost records start a pending run of their own and the gap's first
/// timestamp is theirs exactly.
async fn seed(name: &str, strategy: &str) -> (Scenario, Auditor, std::path::PathBuf, String) {
    // key_columns meets the README's seed DDL (a DATETIME time), offset_columns the table
    // with coordinate columns.
    let s = match strategy {
        "key_columns" => Scenario::with_seed_ddl(name, 1).await,
        _ => Scenario::new(name).await,
    };
    let toml = config_toml(&s.spec(strategy, "1s", "300ms"));
    let config = s.state.path().join("gap-auditor.toml");
    std::fs::write(&config, &toml).expect("config");
    let auditor = Auditor::start(&toml).await;
    let a = &auditor;
    let topic = s.topic.clone();
    let t = &topic;
    s.play_seed_incident(|o| async move {
        pipeline_committed(a) == Some(o) && (o != 2 || a.confirmed(t, 0) == 2)
    })
    .await;
    auditor
        .wait_decided(60, "the seed gap and 4 confirmed", |a| {
            a.lost(&topic, 0) == 2 && a.confirmed(&topic, 0) == 4
        })
        .await;
    let id = format!("dns_logs:{topic}:0:2");
    (s, auditor, config, id)
}

/// Acceptance (issue 18): the seed incident holds completeness exactly at the first lost
/// record's timestamp — gauge, API and `status` agree; `wait --until` that time exits 0
/// (everything before it is in the sink), one millisecond later exits 1 naming the gap.
/// Then `replay --to-sink` repairs it and the same `wait` exits 0: a repaired gap stops
/// blocking once its records are confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn seed_gap_blocks_completeness_until_replayed() {
    let (s, auditor, config, id) = seed("cpl_seed", "offset_columns").await;
    let topic = s.topic.clone();
    let (t1, t2, t5) = (
        record_ts(&topic, 0, 1),
        record_ts(&topic, 0, 2),
        record_ts(&topic, 0, 5),
    );
    assert!(
        t1 < t2,
        "the lost records were produced after the written ones"
    );
    auditor
        .wait_for(20, "completeness held at the lost record", |a| {
            complete_until(a) == Some(t2)
        })
        .await;
    assert_eq!(gauge(&auditor), t2 as f64 / 1000.0);
    // Held there round after round: the partition is idle, the gap does not go away.
    keep_checking(Duration::from_secs(2), Duration::from_millis(100), || {
        assert_eq!(complete_until(&auditor), Some(t2));
    })
    .await;

    let v = api(&auditor, t2).await;
    assert_eq!(v["complete"], true, "everything before the gap is in: {v}");
    assert_eq!(instant_ms(&v["complete_until"]), Some(t2), "{v}");
    let v = api(&auditor, t2 + 1).await;
    assert_eq!(v["complete"], false, "{v}");
    assert_eq!(v["blocking"], serde_json::json!([id]), "{v}");
    assert_eq!(v["blockers"][0]["state"], "open");
    assert_eq!(v["blockers"][0]["missing_records"], 2);
    let (_, status) = auditor.get("/api/status").await;
    let status: serde_json::Value = serde_json::from_str(&status).expect("status");
    assert_eq!(
        instant_ms(&status["audits"][0]["complete_until"]),
        Some(t2),
        "{status}"
    );

    let (code, out, err) = wait_bin(&auditor, t1 + 1, "0s").await;
    assert_eq!(code, 0, "before the gap: complete\n{out}{err}");
    assert!(out.starts_with("complete: audit dns_logs"), "{out}");
    let started = Instant::now();
    let (code, out, err) = wait_bin(&auditor, t2 + 1, "60s").await;
    assert_eq!(code, 1, "after the gap's first record: blocked\n{out}{err}");
    assert!(
        out.contains(&format!("gap {id} (open): 2 record(s) missing")),
        "{out}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "a gap fails the wait at once, not at the timeout"
    );

    let (code, out, err) = run_replay(&config, &["--gap", &id, "--to-sink"]);
    assert_eq!(code, 0, "{out}{err}");
    // The daemon sees the records on its next re-check; until then the gap still blocks
    // (and `wait` would still exit 1).
    auditor
        .wait_for(30, "the repaired gap stops blocking", |a| {
            complete_until(a).is_some_and(|c| c > t5)
        })
        .await;
    let (code, out, err) = wait_bin(&auditor, t5 + 1, "30s").await;
    assert_eq!(code, 0, "repaired: complete after the gap too\n{out}{err}");
    assert!(complete_until(&auditor).is_some_and(|c| c > t5));
    assert!(completeness(&auditor).blockers.is_empty());
    auditor.stop().await;
}

/// Acceptance (issue 18): `gap-auditor ack` releases completeness: an acknowledged gap was
/// accepted, so it no longer blocks (`key_columns`, the seed's own strategy). Before the
/// acknowledgement the same `wait` exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_acknowledged_gap_no_longer_blocks() {
    let (s, auditor, config, id) = seed("cpl_ack", "key_columns").await;
    let t5 = record_ts(&s.topic, 0, 5);
    let (code, out, err) = wait_bin(&auditor, t5 + 1, "0s").await;
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains(&id), "{out}");
    let (code, out, err) = run_bin(
        [
            "ack",
            "-c",
            &config.display().to_string(),
            "--gap",
            &id,
            "--reason",
            "records re-sent by the producer team",
        ]
        .map(str::to_string)
        .to_vec(),
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    // The daemon reads acknowledgements from the store every round.
    auditor
        .wait_for(30, "the acknowledged gap stops blocking", |a| {
            complete_until(a).is_some_and(|c| c > t5)
        })
        .await;
    let (code, out, err) = wait_bin(&auditor, t5 + 1, "30s").await;
    assert_eq!(code, 0, "acknowledged: no longer blocking\n{out}{err}");
    let v = api(&auditor, t5 + 1).await;
    assert_eq!(v["complete"], true, "{v}");
    assert_eq!(v["blocking"], serde_json::json!([]));
    assert_eq!(
        auditor.lost(&s.topic, 0),
        2,
        "the loss itself stays counted"
    );
    auditor.stop().await;
}

/// Acceptance (issue 18): lag holds completeness back without any gap. The pipeline stops
/// committing after 4 records while 8 more arrive: completeness stays at the first record it
/// has not passed (`pending:<topic>-0` blocks, no gap, no loss) for 3× grace, and `wait`
/// after them times out with exit 3 — lag is "not yet", never "blocked". Once the pipeline
/// catches up, the same `wait` exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lag_holds_completeness_back_without_a_gap() {
    let s = Scenario::new("cpl_lag").await;
    let topic = s.topic.clone();
    let auditor = s.start_auditor("offset_columns", "1s", "300ms").await;
    let lines = dns_lines(0..12);
    s.send(&lines[0..4]).await;
    s.pipeline().records(4).run().await;
    auditor
        .wait_decided(30, "first 4 confirmed", |a| a.confirmed(&topic, 0) == 4)
        .await;
    s.send(&lines[4..12]).await;
    let (t4, t11) = (record_ts(&topic, 0, 4), record_ts(&topic, 0, 11));
    auditor
        .wait_for(20, "held at the first record not passed", |a| {
            complete_until(a) == Some(t4)
        })
        .await;
    let pending = format!("pending:{topic}-0");
    keep_checking(Duration::from_secs(3), Duration::from_millis(100), || {
        assert_eq!(complete_until(&auditor), Some(t4), "lag holds it at 4");
        assert_eq!(auditor.lost(&topic, 0), 0, "lag reported as loss");
    })
    .await;
    let v = api(&auditor, t11 + 1).await;
    assert_eq!(
        v["blocking"],
        serde_json::json!(["pending", pending]),
        "{v}"
    );
    assert_eq!(v["blockers"][0]["kind"], "pending");
    let (code, out, err) = wait_bin(&auditor, t11 + 1, "2s").await;
    assert_eq!(code, 3, "lag is not yet, never blocked\n{out}{err}");
    assert!(out.contains("timed out after 2s"), "{out}");
    assert!(err.contains(&format!("{topic}-0 holds it back")), "{err}");

    s.pipeline().start_at(4).records(8).run().await;
    let (code, out, err) = wait_bin(&auditor, t11 + 1, "30s").await;
    assert_eq!(code, 0, "caught up: complete\n{out}{err}");
    assert_eq!(auditor.lost(&topic, 0), 0);
    assert!(api_gaps(&auditor).await.is_empty());
    auditor.stop().await;
}

/// Acceptance (issue 18): an idle partition does not freeze completeness. Partition 1
/// receives one record and then nothing; partition 0 keeps receiving records (one every
/// 400 ms, written by the pipeline as they come). While partition 0 is busy, completeness
/// moves with it — seconds past partition 1's only record — and only `pending:<topic>-0`
/// ever blocks; partition 1, read to its end with nothing pending, holds nothing back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idle_partition_does_not_freeze_completeness() {
    let s = Scenario::with_partitions("cpl_idle", 2).await;
    let topic = s.topic.clone();
    let auditor = s.start_auditor("offset_columns", "1s", "300ms").await;
    assert_eq!(s.producer.send_all(1, &dns_lines(100..101)).await, vec![0]);
    s.pipeline().partition(1).records(1).run().await;
    auditor
        .wait_decided(30, "partition 1's record confirmed", |a| {
            a.confirmed(&topic, 1) == 1
        })
        .await;
    let t_idle = record_ts(&topic, 1, 0);

    const N: usize = 20;
    let busy = tokio::spawn(s.pipeline().partition(0).records(N).run());
    // (records produced so far, complete_until) after each record.
    let mut seen = Vec::new();
    for (i, line) in dns_lines(0..N).iter().enumerate() {
        assert_eq!(s.producer.send(0, line.as_bytes()).await, i as i64);
        tokio::time::sleep(Duration::from_millis(400)).await;
        let c = completeness(&auditor);
        for b in &c.blockers {
            assert_eq!(
                b.id,
                format!("pending:{topic}-0"),
                "only the busy partition: {c:?}"
            );
        }
        seen.push((i + 1, c.complete_until_ms));
    }
    busy.await.expect("pipeline");
    // While partition 0 was still being produced to, completeness passed its third record,
    // produced seconds after partition 1's last one.
    let t2 = record_ts(&topic, 0, 2);
    assert!(t2 > t_idle + 1_000);
    assert!(
        seen.iter()
            .any(|(n, cu)| *n < N && cu.is_some_and(|cu| cu > t2)),
        "completeness did not move with partition 0 while partition 1 was idle: {seen:?}"
    );
    let t_last = record_ts(&topic, 0, N as i64 - 1);
    let (code, out, err) = wait_bin(&auditor, t_last + 1, "30s").await;
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(auditor.lost(&topic, 0) + auditor.lost(&topic, 1), 0);
    auditor.stop().await;
}

/// Issue 35 item 6: completeness never runs ahead of the wall clock. One record stamped an
/// hour ahead (a producer with a skewed clock, an event time in the future) is written by
/// the pipeline and confirmed; then the partition is idle. Before: the idle partition counted
/// as complete up to that future time, so `wait --until` half an hour from now exited 0 for
/// records nobody had produced yet. Now the timestamp is clamped to when the record was read
/// and counted: `complete_until` (and the gauge) stay at or before now, and the same `wait`
/// times out (exit 3, "not yet").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_future_timestamp_never_completes_the_future() {
    let s = Scenario::new("cpl_future").await;
    let topic = s.topic.clone();
    let auditor = s.start_auditor("offset_columns", "1s", "300ms").await;
    let ahead = Utc::now().timestamp_millis() + 3_600_000;
    assert_eq!(
        s.producer.send_at(0, dns_line(0).as_bytes(), ahead).await,
        0
    );
    s.pipeline().records(1).run().await;
    auditor
        .wait_decided(30, "the record confirmed", |a| a.confirmed(&topic, 0) == 1)
        .await;
    // A few rounds of an idle partition, read to its end with nothing pending.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let now = Utc::now().timestamp_millis();
    let cu = complete_until(&auditor);
    assert!(
        cu.is_some_and(|cu| cu <= now),
        "complete_until {cu:?} is ahead of now {now}"
    );
    assert!(
        gauge(&auditor) <= now as f64 / 1000.0,
        "{}",
        gauge(&auditor)
    );
    let half_hour = now + 1_800_000;
    let answer = api(&auditor, half_hour).await;
    assert_eq!(answer["complete"], false, "{answer}");
    let (code, out, err) = wait_bin(&auditor, half_hour, "2s").await;
    assert_eq!(
        code, 3,
        "nothing is proven for a time no record has reached\n{out}{err}"
    );
    // Counted, once.
    assert_eq!(
        auditor.counter(&auditor.metrics.records_future_timestamp, &topic, 0),
        1
    );
    auditor.stop().await;
}

/// `wait` refuses what it cannot answer with exit 2: an audit the daemon does not run, or
/// one the config does not have; a bad `--until` is a usage error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wait_exits_2_on_an_unknown_audit() {
    let s = Scenario::new("cpl_unknown").await;
    let toml = config_toml(&s.spec("offset_columns", "1s", "300ms"));
    let config = s.state.path().join("gap-auditor.toml");
    std::fs::write(&config, &toml).expect("config");
    let auditor = Auditor::start(&toml).await;
    auditor
        .wait_for(20, "the audit is published", |a| {
            a.status.completeness(&a.audit).is_some()
        })
        .await;
    let url = format!("http://{}", auditor.addr);
    let args = |extra: &[&str]| {
        let mut v: Vec<String> = ["wait", "--until", "2024-05-01T11:00:00Z", "--timeout", "5s"]
            .map(str::to_string)
            .to_vec();
        v.extend(extra.iter().map(|x| x.to_string()));
        v
    };
    let (code, _, err) = run_bin(args(&["--url", &url, "--audit", "dns_log"])).await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("runs no audit \"dns_log\" (it runs: dns_logs)"),
        "{err}"
    );
    let (code, _, err) = run_bin(args(&["-c", &path(&config), "--audit", "nope"])).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no audit \"nope\""), "{err}");
    let (code, _, err) = run_bin(
        [
            "wait", "--url", &url, "--audit", "dns_logs", "--until", "11:00",
        ]
        .map(str::to_string)
        .to_vec(),
    )
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("RFC 3339"), "{err}");
    auditor.stop().await;
}

fn path(p: &Path) -> String {
    p.display().to_string()
}
