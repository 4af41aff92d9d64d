//! Review of format 3 (2026-12-06), findings F2 and F1, on the real broker: an owner that
//! resumes a partition from its own store, or takes its own format-3 state back, must not
//! publish chunks of given-up gaps that lack gaps the side topic holds (another owner's,
//! or its own that its store let go): a gap lost there is lost for good.

use super::handover_idle::{AUDIT, handed};
use super::handover_retired::{
    HELD_END, HELD_RETIRED, LIVE, a_decided, held_retired_rows, side_topic_states,
};
use super::*;
use gap_auditor::handover::{Handover, retired};

/// The debug line of a sweep that ended (`retired_flow`).
const SWEPT: &str = "retired gaps on the handover side topic";

/// A handover client writing as another owner, `owner`.
fn other_owner(handover: &str, owner: &str) -> std::sync::Arc<Handover> {
    let h = Handover::new(
        &gap_auditor::config::KafkaConfig {
            brokers: kafka(),
            ..Default::default()
        },
        handover,
    )
    .expect("handover client")
    .with_owner(owner.to_string());
    std::sync::Arc::new(h)
}

/// F2: A's store is further than the format-3 state on the handover topic, another owner's
/// (B took the partition over from an older state of A's, gave up a gap at offset 40 and an
/// operator acknowledged gap 3 there, then the partition came back to A, whose store had
/// gone on). A's swept mark is unset (cleared when its store dropped the partition's gaps,
/// owned elsewhere). Before, A skipped B's state before noting whose it was and swept its
/// store's rows over B's chunk: B's gap 40 and acknowledgement were gone from the side
/// topic for good. Now A merges B's chunk into its store (gap 40 added, gap 3 acknowledged,
/// none of its own dropped) and then publishes the merged chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_further_than_another_owners_state_merges_its_chunks_instead_of_sweeping_over_them()
{
    let (s, handover, mut a, _b, a_gaps) = a_decided("handover_merge_further").await;
    a.stop();
    let tp = gap_auditor::gap::TopicPartition::new(s.topic.clone(), 0);
    let b = other_owner(&handover, "other-owner");
    let (bb, t) = (b.clone(), tp.clone());
    let mut states = tokio::task::spawn_blocking(move || bb.read(AUDIT, &[t]))
        .await
        .expect("read task")
        .expect("read the handover topic");
    let mut st = states.remove(&tp).expect("A's state");
    assert_eq!(st.version, 3);
    // B's state: less far than A's store.
    st.owner = b.owner().to_string();
    st.settled = HELD_END - 2;
    st.base = None;
    st.prev = None;
    st.removed = Vec::new();
    st.claims_kept = false;
    b.publish(&[st]).await.expect("B's state");
    let mut rows = held_retired_rows(&s.topic);
    let acked = rows[1].id.clone();
    rows[1].state = GapState::Acknowledged;
    rows[1].ack_reason = Some("acknowledged on B".into());
    let theirs = open_gap(AUDIT, &s.topic, 40, 40);
    rows.push(theirs.clone());
    b.publish_retired(&retired::chunks(
        AUDIT,
        &tp,
        rows,
        b.owner(),
        chrono::Utc::now(),
    ))
    .await
    .expect("B's chunk");
    Store::open(&a.store)
        .expect("store")
        .clear_handover_swept(AUDIT, &[(s.topic.clone(), 0)])
        .expect("unmark");
    let swept_before = a.log_text().matches(SWEPT).count();
    a.start();
    wait_settled(&a, HELD_END, "A resumes from its store").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while a.log_text().matches(SWEPT).count() <= swept_before
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        a.log_text().matches(SWEPT).count() > swept_before,
        "A publishes its given-up gaps; log tail:\n{}",
        tail(&a.log_text(), 30)
    );
    let side = retired::side_topic(&handover);
    let topic = s.topic.clone();
    let on_side = tokio::task::spawn_blocking(move || side_topic_states(&side, &topic))
        .await
        .expect("side task");
    assert_eq!(
        on_side.get(&theirs.id).map(String::as_str),
        Some("open"),
        "B's given-up gap stays on the side topic: {on_side:?}; A log tail:\n{}",
        tail(&a.log_text(), 30)
    );
    assert_eq!(
        on_side.get(&acked).map(String::as_str),
        Some("acknowledged"),
        "B's acknowledgement stays: {on_side:?}"
    );
    assert_eq!(on_side.len() as i64, HELD_RETIRED + 1, "{on_side:?}");
    // A counts B's gap, not the acknowledged one; none of its own went.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            a.metric("gap_auditor_gaps_open").await,
            (HELD_RETIRED + LIVE) as f64,
            "A's log tail:\n{}",
            tail(&a.log_text(), 30)
        );
    }
    a.stop();
    let after = handed(&a.store);
    for id in a_gaps.keys() {
        assert!(after.contains_key(id), "A's gap {id} stays");
    }
    assert!(
        after
            .get(&theirs.id)
            .is_some_and(|v| v.starts_with("open") && v.contains("retired=1")),
        "{:?}",
        after.get(&theirs.id)
    );
}

/// F1: A's store let the partition's gaps go (`forget_not_owned`: another instance owned
/// it and published nothing, so the handover still holds A's own format-3 state) and its
/// swept mark with them. Before, A took its own state back as proven, counted its given-up
/// gaps from a store without them (`gaps_open` ten short, completeness passing) and would
/// sweep chunks without them. Now the store proves nothing: A imports its own state's
/// chunks and counts every gap again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_owner_whose_store_let_its_gaps_go_imports_its_own_state_back() {
    let (s, _handover, mut a, _b, a_gaps) = a_decided("handover_own_let_go").await;
    a.stop();
    {
        // What `forget_not_owned` does to a partition owned elsewhere.
        let st = Store::open(&a.store).expect("store");
        st.clear_handover_swept(AUDIT, &[(s.topic.clone(), 0)])
            .expect("unmark");
        let dropped = st
            .forget_unresolved(AUDIT, &s.topic, 0, i64::MAX, &[], true)
            .expect("forget");
        assert_eq!(dropped.len() as i64, HELD_RETIRED + LIVE);
    }
    a.start();
    wait_settled(&a, HELD_END, "A takes its partition back").await;
    let done = "the previous owner's retired gaps are in the store";
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !a.log_text().contains(done) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        a.log_text().contains(done),
        "A imports its own given-up gaps; log tail:\n{}",
        tail(&a.log_text(), 30)
    );
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            a.metric("gap_auditor_gaps_open").await,
            (HELD_RETIRED + LIVE) as f64,
            "A counts every gap; log tail:\n{}",
            tail(&a.log_text(), 30)
        );
    }
    a.stop();
    assert_eq!(handed(&a.store), a_gaps, "A's store holds its gaps again");
}
