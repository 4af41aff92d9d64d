//! `gap-auditor replay --to-sink` into Elasticsearch (the OpenSearch 2.19 node of
//! `scripts/test-env.sh`; see tests/es_support/mod.rs): the seed incident leaves
//! the gap {1,2}; the real binary writes the 2 documents with `_bulk` `create` and the
//! audit's document ids; the daemon (in process) marks the gap `repaired`; a second replay
//! writes nothing. Own binary so that it does not run while tests/es_outage.rs stops the
//! server.

#[path = "it/support.rs"]
mod support;

#[path = "es_support/mod.rs"]
mod es_support;

use es_support::*;
use gap_auditor::gap::GapState;
use std::time::Duration;
use support::*;

/// Documents in `index` after a refresh.
async fn doc_count(index: &str) -> u64 {
    let c = es_client();
    let _ = c
        .indices()
        .refresh(elasticsearch::indices::IndicesRefreshParts::Index(&[index]))
        .send()
        .await
        .expect("refresh");
    let r = c
        .count(elasticsearch::CountParts::Index(&[index]))
        .send()
        .await
        .expect("count");
    let v: serde_json::Value = r.json().await.expect("count answer");
    v["count"].as_u64().expect("count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replay_to_elasticsearch_doc_id_repairs_the_seed_gap() {
    let s = EsScenario::new("es_replay", 1, true).await;
    let topic = s.topic.clone();
    let toml = es_config_toml(&s.spec("doc_id", "1s", "300ms"));
    let config = s.state.path().join("gap-auditor.toml");
    std::fs::write(&config, &toml).expect("config");
    let a = Auditor::start(&toml).await;

    // The seed incident: 1 record written, the job killed, 2 records arrive, the job
    // restarts from `latest` and writes the 2 after it.
    let producer = TestProducer::new(&topic);
    let lines = dns_lines(0..5);
    assert_eq!(producer.send_all(0, &lines[0..1]).await, vec![0]);
    s.pipeline("doc_id").records(1).run().await;
    assert_eq!(producer.send_all(0, &lines[1..3]).await, vec![1, 2]);
    let restarted = tokio::spawn(s.pipeline("doc_id").from(vec![(0, 3)]).records(2).run());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(producer.send_all(0, &lines[3..5]).await, vec![3, 4]);
    restarted.await.expect("pipeline restarted");
    a.wait_for(60, "the seed gap", |a| a.lost(&topic, 0) == 2)
        .await;
    assert_eq!(doc_count(&s.index).await, 3);
    let id = format!("es_audit:{topic}:0:1");

    let (code, out, err) = run_replay(&config, &["--gap", &id, "--to-sink", "--dry-run"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("2 record(s) would write"), "{out}");
    assert_eq!(doc_count(&s.index).await, 3, "a dry run writes nothing");

    let (code, out, err) = run_replay(&config, &["--gap", &id, "--to-sink"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("offset 1: written") && out.contains("offset 2: written"),
        "{out}"
    );
    assert!(out.contains("2 record(s) written, 0 failed"), "{out}");
    assert_eq!(doc_count(&s.index).await, 5);
    // The documents carry the record's fields under the audit's ids.
    let r = es_client()
        .get(elasticsearch::GetParts::IndexId(
            &s.index,
            &format!("{topic}+0+1"),
        ))
        .send()
        .await
        .expect("get");
    let v: serde_json::Value = r.json().await.expect("doc");
    let want = doc_of(&topic, 0, 1, &lines[1]);
    assert_eq!(v["_source"]["domain"], want["domain"], "{v}");
    assert_eq!(v["_source"]["client_ip"], want["client_ip"], "{v}");

    a.wait_for(30, "the gap is repaired", |a| {
        a.stored_gaps()
            .iter()
            .any(|g| g.id == id && g.state == GapState::Repaired)
    })
    .await;

    // Idempotent: everything is present now; nothing is written.
    let (code, out, err) = run_replay(&config, &["--gap", &id, "--to-sink"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("0 record(s) written"), "{out}");
    assert!(out.contains("offset 1: already in the sink"), "{out}");
    assert_eq!(doc_count(&s.index).await, 5, "no duplicate documents");

    // Replaying offsets that are all present (0-4 by coordinates) writes nothing either.
    let (code, out, err) = run_replay(
        &config,
        &[
            "--audit",
            "es_audit",
            "--partition",
            "0",
            "--offsets",
            "0-4",
            "--to-sink",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("0 record(s) written, 0 failed"), "{out}");
    assert_eq!(doc_count(&s.index).await, 5);

    // Had the presence check missed a document, `create` of its id answers 409 per item:
    // reported as already present, the document untouched.
    let cfg = gap_auditor::config::Config::from_toml_str(&toml).expect("config");
    let gap_auditor::app::AnySink::Elasticsearch(es) =
        gap_auditor::app::build_sink(&cfg.audits[0]).expect("sink")
    else {
        panic!("not an elasticsearch sink");
    };
    use gap_auditor::sink::elasticsearch::BulkCreate;
    let items = es
        .bulk_create(&[
            (
                Some(format!("{topic}+0+1")),
                serde_json::json!({"domain": "x"}),
            ),
            (Some("fresh".into()), serde_json::json!({"domain": "y"})),
        ])
        .await
        .expect("bulk");
    assert_eq!(items, vec![BulkCreate::Exists, BulkCreate::Created]);
    assert_eq!(doc_count(&s.index).await, 6);
    a.stop().await;
    s.cleanup().await;
}
