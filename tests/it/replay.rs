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
    seed_gap_with(name, strategy, "").await
}

/// The audit's declaration that the pipeline maps the `gap-auditor.origin` header to the
/// coordinate columns, appended to the config (it belongs to the last `[[audits]]`).
const ORIGIN_MAPPED: &str = "[audits.replay]\npipeline_maps_origin = true\n";

/// [`seed_gap`] with `extra` appended to the config.
async fn seed_gap_with(
    name: &str,
    strategy: &str,
    extra: &str,
) -> (Scenario, Auditor, std::path::PathBuf, String) {
    let s = Scenario::new(name).await;
    let toml = config_toml(&s.spec(strategy, "1s", "300ms")) + extra;
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
                .find(|h| h.key == gap_auditor::commands::replay::ORIGIN_HEADER)
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

    // The pipeline reads the repair topic too and writes them: key_columns rows carry the
    // records' keys, whatever topic they came through.
    s.pipeline().reading(&repair).records(2).run().await;
    auditor
        .wait_for(30, "the gap is repaired", |a| {
            a.stored_gaps()
                .iter()
                .any(|g| g.id == id && g.state == GapState::Repaired)
        })
        .await;
    let log = auditor.store.replays_of_gap(&id).expect("replay log");
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].to_topic.as_deref(), Some(repair.as_str()));
    assert_eq!((log[0].written, log[0].dry_run), (2, false));
    auditor.stop().await;
}

/// Issue 35 item 3: offset_columns rows carry Kafka coordinates, and a record re-produced
/// to a repair topic gets that topic's; unless the pipeline is declared to map the origin
/// header to the columns, its row could never confirm the gap, and every replay would
/// write it again. Refused up front (exit 2) with the reason, nothing written, no mark;
/// so is a replay into the audited topic itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replay_to_topic_is_refused_for_offset_columns_without_the_origin_mapping() {
    let (s, auditor, config, id) = seed_gap("replaynomap", "offset_columns").await;
    let repair = unique("repair");
    create_topic(&repair, 1).await;
    for extra in [&[][..], &["--dry-run"][..]] {
        let mut args = vec!["--gap", id.as_str(), "--to-topic", repair.as_str()];
        args.extend_from_slice(extra);
        let (code, out, err) = run_replay(&config, &args);
        assert_eq!(code, 2, "{extra:?}: {out}{err}");
        for needle in [
            "refused for audit dns_logs",
            "offset_columns: `partition`, `offset`",
            "--to-sink",
            "pipeline_maps_origin = true",
            "gap-auditor.origin",
        ] {
            assert!(err.contains(needle), "{extra:?}: `{needle}` not in {err}");
        }
    }
    let (code, out, err) = run_replay(
        &config,
        &["--gap", id.as_str(), "--to-topic", s.topic.as_str()],
    );
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains("is a topic the audit reads"), "{err}");
    assert_eq!(watermarks(&repair, 0).1, 0, "nothing re-produced");
    assert_eq!(watermarks(&s.topic, 0).1, 6, "nothing re-produced");
    assert_eq!(s.rows().await, 4);
    assert!(!auditor.store.is_replayed(&id).expect("mark"), "no mark");
    assert!(auditor.store.replays_of_gap(&id).expect("log").is_empty());
    auditor.stop().await;
}

/// Issue 35 item 3, closed: the pipeline writes the `gap-auditor.origin` header into the
/// coordinate columns (declared: `pipeline_maps_origin`), so the replayed rows name the
/// lost records and the gap turns `repaired`. A second replay before the daemon confirmed
/// refuses, naming when and where the first went; `--force` replays anyway and writes
/// only what the sink lacks: nothing once the pipeline wrote the rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replay_to_topic_with_the_origin_mapped_repairs_the_gap_once() {
    let (s, auditor, config, id) =
        seed_gap_with("replaymapped", "offset_columns", ORIGIN_MAPPED).await;
    let repair = unique("repair");
    create_topic(&repair, 1).await;
    let args = ["--gap", id.as_str(), "--to-topic", repair.as_str()];
    let (code, out, err) = run_replay(&config, &args);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("2 record(s) written"), "{out}");

    // Nothing confirmed yet (the pipeline has not read the repair topic): refused.
    let (code, out, err) = run_replay(&config, &args);
    assert_eq!(code, 2, "{out}{err}");
    for needle in [
        format!("gap {id} was already replayed"),
        format!("2 record(s) to topic {repair}"),
        "has not confirmed it yet".to_string(),
        "--force".to_string(),
    ] {
        assert!(err.contains(&needle), "`{needle}` not in {err}");
    }
    assert_eq!(watermarks(&repair, 0).1, 2, "refused: nothing re-produced");
    let marked = auditor.store.get_gap(&id).expect("store").expect("gap");
    assert!(
        marked.replayed_at.is_some(),
        "shown with the gap: {marked:?}"
    );

    s.pipeline()
        .reading(&repair)
        .map_origin()
        .records(2)
        .run()
        .await;
    assert_eq!(s.rows().await, 6);
    // Whether or not the daemon confirmed them yet, --force writes what the sink lacks.
    let (code, out, err) = run_replay(&config, &[&args[..], &["--force"][..]].concat());
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("0 record(s) written"), "{out}");
    assert!(out.contains("offset 3: already in the sink"), "{out}");
    assert_eq!(watermarks(&repair, 0).1, 2, "nothing more re-produced");
    assert_eq!(s.rows().await, 6, "no copy more");
    auditor
        .wait_for(30, "the gap is repaired", |a| {
            a.stored_gaps()
                .iter()
                .any(|g| g.id == id && g.state == GapState::Repaired)
        })
        .await;
    assert_eq!(
        auditor.counter(&auditor.metrics.records_late, &s.topic, 0),
        2
    );

    let log = auditor.store.replays_of_gap(&id).expect("replay log");
    let got: Vec<_> = log
        .iter()
        .map(|r| (r.to_topic.as_deref(), r.written, r.present, r.forced))
        .collect();
    assert_eq!(
        got,
        vec![
            (Some(repair.as_str()), 2, 0, false),
            (Some(repair.as_str()), 0, 2, true)
        ],
        "the refused replay wrote nothing and is not logged"
    );
    auditor.stop().await;
}

/// Review (issue 35 item 3, guarantee 11): `replay --audit --partition --offsets` over an
/// open gap is the same repair as `--gap`. Before, it set no replay mark: a second replay
/// to the repair topic wrote the records again (4 copies), and once the pipeline wrote
/// them the gap turned `late`, never `repaired`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replay_by_offsets_marks_the_gap_it_covers_and_refuses_a_second_write() {
    let (s, auditor, config, id) = seed_gap("replayoffsets", "key_columns").await;
    let repair = unique("repair");
    create_topic(&repair, 1).await;
    let args = [
        "--audit",
        "dns_logs",
        "--partition",
        "0",
        "--offsets",
        "1-4",
        "--to-topic",
        repair.as_str(),
    ];
    let (code, out, err) = run_replay(&config, &args);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("2 record(s) written"), "{out}");
    let marked = auditor.store.get_gap(&id).expect("store").expect("gap");
    assert!(marked.replayed_at.is_some(), "marked: {marked:?}");

    let (code, out, err) = run_replay(&config, &args);
    assert_eq!(code, 2, "refused: {out}{err}");
    assert!(
        err.contains(&format!("gap {id} was already replayed")),
        "{err}"
    );
    assert_eq!(watermarks(&repair, 0).1, 2, "nothing re-produced twice");

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

/// Review (guarantee 11): key_columns on a table that keeps every row (multiset): a record
/// re-produced into the audited topic itself is a second record of its key, and the one
/// row the pipeline writes for it cannot confirm both. Before, the replay was accepted and
/// the gap stayed open (or the copy was reported lost); now it is refused up front.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replay_to_the_audited_topic_is_refused_for_multiset_keys() {
    let (s, auditor, config, id) = seed_gap("replayownkeys", "key_columns").await;
    let (_, end_before) = watermarks(&s.topic, 0);
    let (code, out, err) = run_replay(&config, &["--gap", &id, "--to-topic", &s.topic]);
    assert_eq!(code, 2, "refused: {out}{err}");
    assert!(
        err.contains("key semantics multiset") && err.contains("--to-sink"),
        "{err}"
    );
    assert_eq!(watermarks(&s.topic, 0).1, end_before, "nothing re-produced");
    let gap = auditor.store.get_gap(&id).expect("store").expect("gap");
    assert!(gap.replayed_at.is_none(), "no mark: {gap:?}");
    auditor.stop().await;
}
