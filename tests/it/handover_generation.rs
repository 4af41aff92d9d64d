//! Issue 35 item 8 on the real broker: every state published to the handover topic carries
//! the partition's generation, one more than the state its writer took over, so that ties
//! between equal settled watermarks are decided by the handover's own order and never by a
//! writer's wall clock.

use crate::support::*;
use chrono::{Duration as ChronoDuration, Utc};
use gap_auditor::config::KafkaConfig;
use gap_auditor::handover::{Handover, PartitionState, VERSION};
use gap_auditor::types::TopicPartition;
use std::sync::Arc;

const AUDIT: &str = "gen";

fn client(topic: &str) -> Arc<Handover> {
    let k = KafkaConfig {
        brokers: kafka(),
        ..Default::default()
    };
    Arc::new(Handover::new(&k, topic).expect("handover client"))
}

/// A state of partition 0 at `settled`, written (by its writer's clock) at `written_at`;
/// `generation` is what the caller claims, which publish must not trust.
fn state(settled: i64, owner: &str, written_at: chrono::DateTime<Utc>) -> PartitionState {
    PartitionState {
        version: VERSION,
        audit: AUDIT.into(),
        topic: "logs".into(),
        partition: 0,
        settled,
        ledger: serde_json::json!({}),
        gaps: Vec::new(),
        replayed: Vec::new(),
        retired: Vec::new(),
        retired_gaps: None,
        key_claims: Vec::new(),
        generation: 99,
        base: None,
        base_id: None,
        prev: None,
        term: 0,
        removed: Vec::new(),
        claims_kept: false,
        written_at,
        owner: owner.into(),
        owner_url: None,
    }
}

async fn read(h: &Arc<Handover>) -> Option<PartitionState> {
    let h = h.clone();
    let tp = TopicPartition::new("logs", 0);
    tokio::task::spawn_blocking(move || h.read(AUDIT, std::slice::from_ref(&tp)))
        .await
        .expect("read task")
        .expect("read the handover topic")
        .remove(&TopicPartition::new("logs", 0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_owner_publishes_one_generation_past_the_state_it_took_over() {
    let topic = unique("handover_gen");
    let a = client(&topic);
    a.ensure_topic().await.expect("handover topic");
    assert!(read(&a).await.is_none(), "a new topic holds no state");

    // A (its clock an hour fast) publishes first: generation 1, whatever the caller claims.
    let fast = Utc::now() + ChronoDuration::hours(1);
    a.publish(&[state(10, "a", fast)])
        .await
        .expect("A publishes");
    let seen = read(&client(&topic)).await.expect("A's state");
    assert_eq!((seen.owner.as_str(), seen.generation), ("a", 1));

    // B takes the partition over (reads A's state) and publishes at the same watermark by
    // a slower clock: generation 2, so B's state is the later one in every comparison.
    let b = client(&topic);
    assert_eq!(read(&b).await.expect("B takes over").generation, 1);
    b.publish(&[state(10, "b", Utc::now())])
        .await
        .expect("B publishes");
    let seen = read(&client(&topic)).await.expect("B's state");
    assert_eq!((seen.owner.as_str(), seen.generation), ("b", 2));
    assert_eq!(
        gap_auditor::handover::newer(seen.clone(), state_at(10, "a", fast, 1)).owner,
        "b",
        "equal watermarks: A's older state loses despite its later clock"
    );

    // B's next publish continues its own count.
    b.publish(&[state(11, "b", Utc::now())])
        .await
        .expect("B publishes again");
    let seen = read(&client(&topic)).await.expect("B's next state");
    assert_eq!((seen.settled, seen.generation), (11, 3));
}

fn state_at(
    settled: i64,
    owner: &str,
    written_at: chrono::DateTime<Utc>,
    generation: u64,
) -> PartitionState {
    PartitionState {
        generation,
        ..state(settled, owner, written_at)
    }
}
