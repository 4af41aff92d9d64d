//! `gap-auditor check` with `match.strategy = "doc_id"` against the Elasticsearch API (issue
//! 13, item 6), driven through the real binary: the test broker (Apache Kafka 4.4) and the
//! OpenSearch 2.19 node started by `scripts/test-env.sh` (see tests/es_support/mod.rs for
//! what that does and does not prove about Elasticsearch). Its own test binary, beside tests/es.rs, which it shares fixtures with.

#[path = "it/support.rs"]
mod support;

#[path = "es_support/mod.rs"]
mod es_support;

use es_support::*;
use std::process::Command;
use std::time::Duration;
use support::*;

/// Issue 13, item 6: `check` with `doc_id` (`id_template = "{topic}+{partition}+{offset}"`)
/// reports exactly the documents that are absent.
///
/// 40 records; the pipeline stand-in (Kafka Connect with `key.ignore=true`: `_id =
/// topic+partition+offset`) writes 34 documents, losing offsets 3, 11, 12, 25, 30 and 39,
/// then commits 40. `check --from offset:0 --to offset:40 --format json` must exit 1 and
/// list exactly those 6 offsets (5 gaps: 11–12 are one), 34 confirmed, 6 lost.
///
/// Broker behaviour relied on: `check` clamps `--to` to the high watermark from ListOffsets,
/// one past the last record; every record is sent as its own batch, so the watermark is
/// 40. `check` applies the daemon's due rule (the pipeline
/// group's commit, 40 here, and `grace`, waited out before the run). `_mget` is real-time (it
/// reads the translog, no refresh needed), and the stand-in writes with `refresh=true` anyway.
///
/// What the old code did wrong, and why this fails if the fix is reverted: `check` tagged
/// records without their coordinates (`Decoder::tag` on the payload only, where the daemon
/// passes `RecordMeta`), so every id was built with empty `{topic}`, `{partition}` and
/// `{offset}`: no id matched, and all 40 records were reported missing (exit 1 too, but
/// `lost` 40 and one gap 0–39). Reverted locally (`decoder.tag(payload)` again), this test
/// failed with exactly that: gaps `[(0, 0, 39, 40)]`, confirmed 0, lost 40.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_with_doc_id_reports_exactly_the_absent_documents() {
    let s = EsScenario::new("es_check", 1, true).await;
    let lines = dns_lines(0..40);
    let producer = TestProducer::new(&s.topic);
    assert_eq!(
        producer.send_all(0, &lines).await,
        (0..40).collect::<Vec<_>>()
    );
    const LOST: [i64; 6] = [3, 11, 12, 25, 30, 39];
    let read = s
        .pipeline("doc_id")
        .records(40)
        .copies(|_, o| usize::from(!LOST.contains(&o)))
        .run()
        .await;
    assert_eq!(read.get(&0), Some(&40));

    let config = s.state.path().join("gap-auditor.toml");
    std::fs::write(&config, es_config_toml(&s.spec("doc_id", "1s", "500ms"))).expect("config");
    // Records younger than grace (1 s) are not due: a real check runs over the past.
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    let out = Command::new(env!("CARGO_BIN_EXE_gap-auditor"))
        .args(["check", "-c"])
        .arg(&config)
        .args([
            "--from",
            "offset:0",
            "--to",
            "offset:40",
            "--format",
            "json",
        ])
        .output()
        .expect("run check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "loss found must exit 1\nstdout: {stdout}\nstderr: {stderr}"
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("json report ({e}): {stdout}\nstderr: {stderr}"));
    let gaps = report["gaps"].as_array().expect("gaps");
    assert_eq!(
        gap_tuples(gaps),
        vec![
            (0, 3, 3, 1),
            (0, 11, 12, 2),
            (0, 25, 25, 1),
            (0, 30, 30, 1),
            (0, 39, 39, 1)
        ],
        "{report}"
    );
    assert_eq!(report["expected"], 40, "{report}");
    assert_eq!(report["confirmed"], 34, "{report}");
    assert_eq!(report["lost"], 6, "{report}");
    assert_eq!(report["duplicated"], 0, "{report}");
    let range = &report["ranges"][0];
    assert_eq!(
        (range["from"].as_i64(), range["to"].as_i64()),
        (Some(0), Some(40)),
        "the whole range was checked: {report}"
    );
    assert!(range["not_checked"].is_null(), "{report}");
    for g in gaps {
        assert_eq!(g["audit"], "es_audit", "{g}");
        assert_eq!(g["topic"], s.topic.as_str(), "{g}");
    }
    s.cleanup().await;
}
