//! Issue 41 item 3 on the real broker, through the `Handover` API: a partition's state as a
//! base plus deltas. A reader takes the base with every delta applied; a delta needs a known
//! base; once the deltas outweigh the base a new base replaces the chain and the old
//! deltas' keys are deleted (tombstones), chunked ones included.

use crate::support::*;
use chrono::Utc;
use gap_auditor::config::KafkaConfig;
use gap_auditor::gap::Gap;
use gap_auditor::handover::{Handover, PartitionState, VERSION, apply, delta_key, key};
use gap_auditor::types::TopicPartition;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

const AUDIT: &str = "chain";

fn client(topic: &str) -> Arc<Handover> {
    let k = KafkaConfig {
        brokers: kafka(),
        ..Default::default()
    };
    Arc::new(Handover::new(&k, topic).expect("handover client"))
}

fn tp() -> TopicPartition {
    TopicPartition::new("logs", 0)
}

/// A whole state of partition 0 with one-record gaps at `firsts`.
fn whole(settled: i64, firsts: &[i64]) -> PartitionState {
    PartitionState {
        version: VERSION,
        audit: AUDIT.into(),
        topic: "logs".into(),
        partition: 0,
        settled,
        ledger: serde_json::json!({"tail_gap": null, "missing": [], "gaps": []}),
        gaps: firsts
            .iter()
            .map(|f| Gap {
                audit: AUDIT.into(),
                ..open_gap(AUDIT, "logs", *f, *f)
            })
            .collect(),
        replayed: Vec::new(),
        retired: firsts
            .iter()
            .map(|f| Gap::make_id(AUDIT, "logs", 0, *f))
            .collect(),
        retired_gaps: None,
        key_claims: Vec::new(),
        generation: 0,
        base: None,
        base_id: None,
        prev: None,
        term: 0,
        removed: Vec::new(),
        claims_kept: false,
        written_at: Utc::now(),
        owner: "test".into(),
        owner_url: None,
    }
}

/// A delta adding gaps at `firsts`.
fn delta(settled: i64, firsts: &[i64]) -> PartitionState {
    PartitionState {
        ledger: serde_json::json!({"tail_gap": null}),
        base: Some(0),
        ..whole(settled, firsts)
    }
}

async fn read(h: &Arc<Handover>) -> Option<PartitionState> {
    let h = h.clone();
    tokio::task::spawn_blocking(move || h.read(AUDIT, &[tp()]))
        .await
        .expect("read task")
        .expect("read the handover topic")
        .remove(&tp())
}

/// The live value of every key of the topic (`None`: its last record is a tombstone).
fn live_keys(topic: &str) -> BTreeMap<Vec<u8>, Option<usize>> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    let c: BaseConsumer = group_client(&unique("chain_reader"))
        .create()
        .expect("reader");
    let (_, high) = c
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .expect("watermarks");
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Beginning)
        .expect("tpl");
    c.assign(&tpl).expect("assign");
    let mut out = BTreeMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut reached = 0;
    while reached < high && std::time::Instant::now() < deadline {
        let Some(m) = c.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.expect("read");
        reached = m.offset() + 1;
        out.insert(
            m.key().unwrap_or_default().to_vec(),
            m.payload().map(<[u8]>::len),
        );
    }
    out
}

/// The keys of delta `generation` (its single key, or its chunks', whatever its base) that
/// hold a record.
fn delta_records(live: &BTreeMap<Vec<u8>, Option<usize>>, generation: u64) -> usize {
    // `{partition key}\0d\0{generation}.{base id}`: the prefix up to the dot.
    let k = delta_key(&key(AUDIT, &tp()), generation, "");
    live.iter()
        .filter(|(key, v)| key.starts_with(&k) && v.is_some())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deltas_build_on_a_base_and_a_new_base_deletes_them() {
    let topic = unique("handover_chain");
    let a = client(&topic);
    a.ensure_topic().await.expect("handover topic");
    assert!(read(&a).await.is_none());
    assert!(a.wants_base(AUDIT, &tp()), "nothing read: a base first");
    let refused = a.publish(&[delta(10, &[1])]).await;
    assert!(
        refused.is_err_and(|e| e.to_string().contains("no base")),
        "a delta without a base is refused"
    );

    // Base (generation 1), a small delta (2), a delta of 3,000 gaps chunked at 1 MB (3).
    let b = whole(10, &[1, 3, 5]);
    a.publish(std::slice::from_ref(&b)).await.expect("base");
    let small = delta(20, &[11]);
    a.publish(std::slice::from_ref(&small))
        .await
        .expect("delta");
    assert!(!a.wants_base(AUDIT, &tp()), "a small delta on a base");
    let firsts: Vec<i64> = (0..3000).map(|i| 1001 + 2 * i).collect();
    let big = delta(7000, &firsts);
    a.publish(std::slice::from_ref(&big))
        .await
        .expect("big delta");
    let stamp = |s: &PartitionState, generation: u64, base: Option<u64>| PartitionState {
        generation,
        base,
        ..s.clone()
    };
    let want = apply(
        apply(stamp(&b, 1, None), stamp(&small, 2, Some(1))),
        stamp(&big, 3, Some(1)),
    );
    let got = read(&client(&topic)).await.expect("state");
    // Stamped by the publish: the base's id and the writer's term.
    assert!(got.base_id.is_some() && got.term >= 1);
    let want = PartitionState {
        base_id: got.base_id.clone(),
        term: got.term,
        ..want
    };
    assert_eq!(got, want, "the base with both deltas");
    assert_eq!(
        (got.settled, got.generation, got.gaps.len()),
        (7000, 3, 3004)
    );
    let live = {
        let t = topic.clone();
        tokio::task::spawn_blocking(move || live_keys(&t))
            .await
            .expect("task")
    };
    assert_eq!(delta_records(&live, 2), 1);
    assert!(delta_records(&live, 3) > 1, "the big delta is chunked");

    // The deltas now outweigh the base: the next publish is a new base (generation 4),
    // after which the old deltas' keys hold tombstones only.
    assert!(a.wants_base(AUDIT, &tp()));
    let rebased = PartitionState {
        settled: 7010,
        ..want.clone()
    };
    a.publish(std::slice::from_ref(&rebased))
        .await
        .expect("new base");
    let live = {
        let t = topic.clone();
        tokio::task::spawn_blocking(move || live_keys(&t))
            .await
            .expect("task")
    };
    assert_eq!(
        (delta_records(&live, 2), delta_records(&live, 3)),
        (0, 0),
        "the old chain's deltas are deleted"
    );
    let got = read(&client(&topic)).await.expect("state");
    assert_eq!(
        (got.settled, got.generation, got.gaps.len()),
        (7010, 4, 3004)
    );

    // Another owner does not continue the chain it read (a zombie still writing on it
    // could write into it): its first publish is a base of its own (generation 5), under a
    // term past the one it read; then deltas on it.
    let c = client(&topic);
    let taken = read(&c).await.expect("taken over");
    assert_eq!(taken.generation, 4);
    assert!(c.wants_base(AUDIT, &tp()), "its own chain: a base first");
    let refused = c.publish(&[delta(7020, &[])]).await;
    assert!(refused.is_err_and(|e| e.to_string().contains("no base")));
    c.publish(std::slice::from_ref(&taken))
        .await
        .expect("the new owner's base");
    c.publish(&[delta(7020, &[])]).await.expect("delta");
    let got = read(&client(&topic)).await.expect("state");
    assert_eq!(
        (got.settled, got.generation, got.gaps.len()),
        (7020, 6, 3004)
    );
    assert_eq!(got.term, taken.term + 1, "the new owner's term");
    assert_ne!(got.base_id, taken.base_id, "its own base");
}

/// Issue 41 item 3, points 1 and 2 on the real broker: a zombie owner (A, which has not
/// seen its assignment lost) goes on publishing on its own chain after B took the
/// partition over. Its deltas of the same generations as B's land under keys of their own
/// and never reach B's state; once it writes a base over B's, the state is not usable
/// (B's deltas have a higher term): the next owner falls back to its store, never takes
/// the zombie's state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_owner_never_replaces_the_new_owners_state() {
    let topic = unique("handover_zombie");
    let a = client(&topic);
    a.ensure_topic().await.expect("handover topic");
    assert!(read(&a).await.is_none());
    a.publish(&[whole(10, &[1, 3])]).await.expect("A's base"); // generation 1
    a.publish(&[delta(20, &[5])]).await.expect("A's delta"); // 2

    // B takes over: a base of its own (3), then a delta (4).
    let b = client(&topic);
    let taken = read(&b).await.expect("B takes over");
    assert_eq!((taken.settled, taken.gaps.len()), (20, 3));
    b.publish(std::slice::from_ref(&taken))
        .await
        .expect("B's base");
    b.publish(&[delta(30, &[7])]).await.expect("B's delta");
    let firsts = |s: &PartitionState| s.gaps.iter().map(|g| g.first_offset).collect::<Vec<_>>();
    let before = read(&client(&topic)).await.expect("B's state");
    assert_eq!((before.settled, firsts(&before)), (30, vec![1, 3, 5, 7]));

    // The zombie's deltas 3 and 4 (its own count) on its own base.
    a.publish(&[delta(25, &[9])]).await.expect("zombie delta");
    a.publish(&[delta(26, &[11])]).await.expect("zombie delta");
    let got = read(&client(&topic)).await.expect("B's state still");
    assert_eq!(got, before, "exactly B's state");

    // The zombie rebases: its base (term 1) replaces B's base record (term 2).
    let zombie = PartitionState {
        settled: 27,
        ..whole(27, &[1, 3, 5, 9, 11])
    };
    a.publish(std::slice::from_ref(&zombie))
        .await
        .expect("zombie base");
    assert!(
        read(&client(&topic)).await.is_none(),
        "not the zombie's state: B's term-2 deltas outrank its base"
    );
}

/// Review item 2: one partition's failed publish (here a delta without a base) leaves the
/// other partitions of the batch published and acknowledged: only the failed one's commit
/// waits. Before, the whole batch was refused and nothing was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_partitions_failed_publish_leaves_the_others_acknowledged() {
    let topic = unique("handover_each");
    let a = client(&topic);
    a.ensure_topic().await.expect("handover topic");
    assert!(read(&a).await.is_none());
    let other = PartitionState {
        partition: 1,
        ..delta(12, &[])
    };
    let r = a.publish(&[whole(10, &[1]), other.clone()]).await;
    assert!(r.is_err(), "partition 1 has no base: {r:?}");
    let got = read(&client(&topic))
        .await
        .expect("partition 0 was published");
    assert_eq!(got.settled, 10);
    let p = a.publish_each(&[delta(20, &[]), other]).await;
    assert_eq!(p.acked, vec![true, false], "{:?}", p.error);
    assert_eq!(read(&client(&topic)).await.expect("state").settled, 20);
}

/// Review item 4: a publish whose later state leaves no room for a chunk (record limit too
/// small) still awaits and accounts for a base enqueued before it in the batch. Before,
/// the early return left that base unaccounted: it landed, but the chain stayed on the old
/// base, and the next delta (on the old base) was skipped by every reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_base_sent_before_a_limit_error_is_accounted_for() {
    let topic = unique("handover_limit");
    let mut k = KafkaConfig {
        brokers: kafka(),
        ..Default::default()
    };
    // librdkafka's smallest limit: a small state fits one record, a larger one needs
    // chunks, and no chunk fits next to the key, header and framing.
    k.properties
        .insert("message.max.bytes".into(), "1000".into());
    let a = Arc::new(Handover::new(&k, &topic).expect("handover client"));
    a.ensure_topic().await.expect("handover topic");
    assert!(read(&a).await.is_none());
    let small = |settled| PartitionState {
        retired: Vec::new(),
        retired_gaps: None,
        gaps: Vec::new(),
        ..whole(settled, &[])
    };
    a.publish(&[small(10)]).await.expect("first base");
    a.publish(&[delta(20, &[])]).await.expect("a delta");
    let firsts: Vec<i64> = (0..20).collect();
    let large = PartitionState {
        partition: 1,
        ..whole(5, &firsts)
    };
    let r = a.publish(&[small(30), large]).await;
    assert!(r.is_err(), "no room for a chunk of partition 1: {r:?}");
    a.publish(&[delta(40, &[])])
        .await
        .expect("a delta after it");
    let got = read(&client(&topic)).await.expect("partition 0's state");
    assert_eq!(
        got.settled, 40,
        "the delta builds on the base that landed, never on the old chain"
    );
}
