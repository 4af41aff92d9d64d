//! `gap-auditor replay` (the real binary) repairing the seed incident while the daemon (in
//! process) watches: the gap turns `repaired`, and a second replay changes nothing.

use crate::support::*;
use gap_auditor::gap::GapState;

fn missing(a: &Auditor, topic: &str) -> i64 {
    a.metrics
        .records_missing
        .with_label_values(&["dns_logs", topic, "0"])
        .get()
}

/// The seed incident under an in-process daemon whose config is also written to a file for
/// the binary: (scenario, daemon, config path, id of the {2,3} gap once reported).
async fn seed_gap(name: &str, strategy: &str) -> (Scenario, Auditor, std::path::PathBuf, String) {
    let s = Scenario::new(name).await;
    let toml = config_toml(&s.spec(strategy, "1s", "300ms"));
    let config = s.state.path().join("gap-auditor.toml");
    std::fs::write(&config, &toml).expect("config");
    let auditor = Auditor::start(&toml).await;
    let a = &auditor;
    s.play_seed_incident(|o| async move { pipeline_committed(a) == Some(o) })
        .await;
    let topic = s.topic.clone();
    auditor
        .wait_for(60, "the seed gap", |a| a.lost(&topic, 0) == 2)
        .await;
    let id = format!("dns_logs:{topic}:0:2");
    (s, auditor, config, id)
}

async fn replay_to_sink_repairs_the_seed_gap(strategy: &str) {
    let (s, auditor, config, id) = seed_gap("replay", strategy).await;
    let topic = s.topic.clone();

    let (code, out, err) = run_replay(&config, &["--gap", &id, "--to-sink", "--dry-run"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("2 record(s) would write"), "{out}");
    assert_eq!(s.rows().await, 4, "a dry run writes nothing");

    let (code, out, err) = run_replay(&config, &["--gap", &id, "--to-sink"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("offset 2: written") && out.contains("offset 3: written"),
        "{out}"
    );
    assert_eq!(s.rows().await, 6);
    auditor
        .wait_for(30, "the gap is repaired", |a| {
            a.stored_gaps()
                .iter()
                .any(|g| g.id == id && g.state == GapState::Repaired)
        })
        .await;
    auditor
        .wait_for(10, "records_missing back to 0", |a| missing(a, &topic) == 0)
        .await;
    assert_eq!(auditor.counter(&auditor.metrics.records_late, &topic, 0), 2);

    // Idempotent: everything is present now.
    let (code, out, err) = run_replay(&config, &["--gap", &id, "--to-sink"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("0 record(s) written"), "{out}");
    assert!(out.contains("offset 2: already in the sink"), "{out}");
    assert_eq!(s.rows().await, 6, "no duplicate rows");
    auditor.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replay_to_sink_offset_columns() {
    replay_to_sink_repairs_the_seed_gap("offset_columns").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replay_to_sink_key_columns() {
    replay_to_sink_repairs_the_seed_gap("key_columns").await;
}

/// `--to-topic`: the 2 records are re-produced, with origin headers, to a repair topic the
/// pipeline also reads; the pipeline stand-in writes them; the gap closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replay_to_topic_reaches_the_sink_through_the_pipeline() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Headers, Message};
    let (s, auditor, config, id) = seed_gap("replaytopic", "key_columns").await;
    let topic = s.topic.clone();
    let repair = unique("repair");
    create_topic(&repair, 1).await;
    let (code, out, err) = run_replay(&config, &["--gap", &id, "--to-topic", &repair]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("2 record(s) written"), "{out}");

    // The records carry their origin.
    let c: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .set("group.id", unique("reader"))
        .create()
        .expect("consumer");
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(&repair, 0, rdkafka::Offset::Beginning)
        .expect("tpl");
    c.assign(&tpl).expect("assign");
    let mut origins = Vec::new();
    while origins.len() < 2 {
        if let Some(m) = c.poll(std::time::Duration::from_secs(10)) {
            let m = m.expect("message");
            let h = m.headers().expect("headers");
            let origin = h
                .iter()
                .find(|h| h.key == gap_auditor::replay::ORIGIN_HEADER)
                .and_then(|h| h.value)
                .map(|v| String::from_utf8_lossy(v).into_owned());
            origins.push(origin.expect("origin header"));
        } else {
            panic!("replayed records not found in {repair}");
        }
    }
    assert_eq!(
        origins,
        vec![format!("{topic}/0/2"), format!("{topic}/0/3")]
    );

    // The pipeline reads the repair topic too and writes them.
    s.pipeline().reading(&repair).records(2).run().await;
    auditor
        .wait_for(30, "the gap is repaired", |a| {
            a.stored_gaps()
                .iter()
                .any(|g| g.id == id && g.state == GapState::Repaired)
        })
        .await;
    auditor.stop().await;
}
