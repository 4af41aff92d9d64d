//! Issue 34 item 1: key_columns on an upsert table (a PRIMARY KEY on the key columns, the
//! pipeline writing `INSERT … ON DUPLICATE KEY UPDATE`: the MariaDB form of a Doris UNIQUE
//! KEY table and of Flink's JDBC sink in upsert mode), on the real MariaDB.
//!
//! The table keeps one row per key, so records sharing a key (a DNS client's A and AAAA
//! answers in one second) have one row between them. Counted as a multiset, every record
//! beyond the first of its key read as a `shared_key` loss that never turned late; the audit
//! now reads the table's model (`presence`) and one row confirms every record of its key.

use crate::faults::record;
use crate::support::*;
use std::time::Duration;

/// Key `i`'s record: an A answer, or with `aaaa` the AAAA answer sharing its key.
fn line(i: usize, aaaa: bool) -> String {
    let (answer, qtype) = if aaaa {
        ("::1", "AAAA")
    } else {
        ("1.1.1.1", "A")
    };
    format!(
        "10.0.4.{i}|host{i}.example.com|2024-01-01 10:00:{i:02}|{answer}|NOERROR|{qtype}|-|-|8.8.8.8"
    )
}

/// 48 records on 2 partitions, 8 of them sharing the key of another record (4 on each
/// partition, their A answer on the other), 2 truly dropped: exactly those 2 are reported
/// (before: 10, the 8 others `shared_key` gaps), nothing is a duplicate, and the status
/// shows the semantics.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_sharing_a_key_in_an_upsert_table_are_not_lost() {
    let s = Scenario::with_upsert_table("upsert", 2).await;
    let topic = &s.topic;
    let auditor = s.start_auditor("key_columns", "1s", "300ms").await;
    // Partition 0: A answers of keys 0..20, AAAA answers of keys 20..24.
    // Partition 1: A answers of keys 20..40, AAAA answers of keys 0..4.
    let p0: Vec<String> = (0..20)
        .map(|i| line(i, false))
        .chain((20..24).map(|i| line(i, true)))
        .collect();
    let p1: Vec<String> = (20..40)
        .map(|i| line(i, false))
        .chain((0..4).map(|i| line(i, true)))
        .collect();
    assert_eq!(
        s.producer.send_all(0, &p0).await,
        (0..24).collect::<Vec<i64>>()
    );
    assert_eq!(
        s.producer.send_all(1, &p1).await,
        (0..24).collect::<Vec<i64>>()
    );
    // Truly dropped: key 10's A answer (partition 0 offset 10) and key 30's (partition 1
    // offset 10); no other record has their keys.
    s.pipeline()
        .records(24)
        .copies(|o| usize::from(o != 10))
        .run()
        .await;
    s.pipeline()
        .partition(1)
        .records(24)
        .copies(|o| usize::from(o != 10))
        .run()
        .await;
    // 40 keys, 2 of them never written: 38 rows for 46 written records.
    assert_eq!(s.rows().await, 38);
    let decided = |a: &Auditor| {
        (0..2)
            .map(|p| a.confirmed(topic, p) + a.lost(topic, p))
            .sum::<u64>()
    };
    auditor
        .wait_decided(60, "all 48 records decided", |a| decided(a) >= 48)
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let reported = gap_tuples(&api_gaps(&auditor).await);
    let expected = [(0, 10, 10, 1), (1, 10, 10, 1)];
    let lost: u64 = (0..2).map(|p| auditor.lost(topic, p)).sum();
    record(
        "upsert_key_shared_rows",
        1,
        2,
        &expected,
        &reported,
        lost,
        format!(
            "48 records on 2 partitions into a PRIMARY KEY table written with upserts, 8 \
             sharing another record's key, 2 dropped: lost {lost}, duplicated {}",
            (0..2).map(|p| auditor.duplicated(topic, p)).sum::<u64>()
        ),
    );
    assert_eq!(reported, expected.to_vec());
    for p in 0..2 {
        assert_eq!(
            (
                auditor.confirmed(topic, p),
                auditor.lost(topic, p),
                auditor.duplicated(topic, p)
            ),
            (23, 1, 0),
            "partition {p}"
        );
    }

    // The model the verdicts were computed in (SPEC "The sink's model").
    let (code, body) = auditor.get("/api/status").await;
    assert_eq!(code, 200, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).expect("status json");
    assert_eq!(
        status["audits"][0]["sink_model"]["key_semantics"], "presence",
        "{body}"
    );
    auditor.stop().await;
}

/// `match.key_semantics = "presence"` on a table that keeps every row (no PRIMARY or
/// UNIQUE index within the key columns): the audit refuses to start, naming the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn presence_on_a_table_that_keeps_every_row_is_refused() {
    let s = Scenario::with_seed_ddl("presence_refused", 1).await;
    let toml = with_key_semantics(
        &config_toml(&s.spec("key_columns", "1s", "300ms")),
        "presence",
    );
    let auditor = Auditor::start(&toml).await;
    let result = tokio::time::timeout(Duration::from_secs(30), auditor.handle)
        .await
        .expect("the audit stops by itself")
        .expect("no panic");
    let error = format!("{:#}", result.expect_err("refused"));
    assert!(error.contains("match.key_semantics"), "{error}");
    assert!(error.contains("multiset"), "{error}");
}

/// SPEC guarantee 9 on an upsert table: `check` and `replay` read the table's model as `run`
/// does. Five records, the first two sharing a key (one row between them), offset 3 dropped:
/// `check` reports exactly offset 3 (counted as a multiset it would also report offset 1);
/// `replay --to-sink` finds the other four present and writes offset 3 once, as an upsert;
/// a second replay writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_and_replay_decide_as_run_on_an_upsert_table() {
    let s = Scenario::with_upsert_table("upsert_cmds", 1).await;
    let lines = vec![
        line(0, false),
        line(0, true),
        line(1, false),
        line(2, false),
        line(3, false),
    ];
    assert_eq!(s.send(&lines).await, vec![0, 1, 2, 3, 4]);
    s.pipeline()
        .records(5)
        .copies(|o| usize::from(o != 3))
        .run()
        .await;
    assert_eq!(s.rows().await, 3, "keys 0, 1 and 3: one row each");
    let config = s.state.path().join("gap-auditor.toml");
    std::fs::write(&config, config_toml(&s.spec("key_columns", "1s", "300ms"))).expect("config");
    // Past grace: the records are due for check as they would be for run.
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gap-auditor"))
        .args(["check", "-c"])
        .arg(&config)
        .args(["--from", "offset:0", "--to", "offset:5", "--format", "json"])
        .output()
        .expect("run check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    let gaps = report["gaps"].as_array().expect("gaps");
    assert_eq!(gap_tuples(gaps), vec![(0, 3, 3, 1)], "{report}");
    assert_eq!(
        (report["confirmed"].as_u64(), report["lost"].as_u64()),
        (Some(4), Some(1)),
        "{report}"
    );

    let (code, out, err) = run_replay(
        &config,
        &[
            "--audit",
            "dns_logs",
            "--partition",
            "0",
            "--offsets",
            "0-4",
            "--to-sink",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("1 record(s) written"), "{out}");
    assert_eq!(s.rows().await, 4, "offset 3's row written once");
    let (code, out, err) = run_replay(
        &config,
        &[
            "--audit",
            "dns_logs",
            "--partition",
            "0",
            "--offsets",
            "0-4",
            "--to-sink",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("0 record(s) written"),
        "a second replay writes nothing: {out}"
    );
    assert_eq!(s.rows().await, 4);
}
