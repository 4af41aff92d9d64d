//! Review of format 3 (2026-12-06), findings F2 and F1, and the review of the merge that
//! first fixed F2 (N1-N6), on the real broker: an owner that resumes a partition from its
//! own store further than a format-3 state, or takes its own state back, must neither
//! publish chunks that lack gaps the state counts (its store let them go: lost for good)
//! nor leave chunks of the side topic it has no row in (a next owner would import and
//! count them twice).

use super::handover_idle::{AUDIT, handed};
use super::handover_retired::{
    HELD_END, HELD_RETIRED, LIVE, a_decided, held_retired_rows, side_topic_states,
};
use super::*;
use gap_auditor::handover::{Handover, retired};

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

/// F2 and N1-N5: A's store is further than the format-3 state on the handover topic,
/// another owner's (B took the partition over from an older state of A's, gave up gaps at
/// 40 and 70 that A decided otherwise, an operator acknowledged A's gap 3 there; then the
/// partition came back to A, whose store had gone on). A's swept mark is unset. Before the
/// first fix, A swept its store's rows over B's chunk 0 only: chunk 1 (gap 70) stayed for
/// a next owner to import and count twice. The merge that followed brought B's gaps into
/// A's store against A's own verdicts and could count them twice. Now A's verdicts stand,
/// as a store resumed further always had them (record format 2 replaced the other owner's
/// base whole): its chunk 0 replaces B's, chunk 1 gets an empty version, and the one thing
/// of B's it takes is the acknowledgement of a gap it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_further_than_another_owners_state_supersedes_its_chunks() {
    let (s, handover, mut a, _b, mut a_gaps) = a_decided("handover_supersede_further").await;
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
    let theirs = [
        open_gap(AUDIT, &s.topic, 40, 40),
        open_gap(AUDIT, &s.topic, 70, 70),
    ];
    rows.extend(theirs.iter().cloned());
    b.publish_retired(&retired::chunks(
        AUDIT,
        &tp,
        rows,
        b.owner(),
        chrono::Utc::now(),
    ))
    .await
    .expect("B's chunks");
    Store::open(&a.store)
        .expect("store")
        .clear_handover_swept(AUDIT, &[(s.topic.clone(), 0)])
        .expect("unmark");
    a.start();
    wait_settled(&a, HELD_END, "A resumes from its store").await;
    // The side topic ends as A's store holds the partition: A's given-up gaps, gap 3
    // acknowledged, neither of B's.
    let side = retired::side_topic(&handover);
    let mut want: BTreeMap<String, String> = held_retired_rows(&s.topic)
        .into_iter()
        .map(|g| (g.id, "open".to_string()))
        .collect();
    want.insert(acked.clone(), "acknowledged".into());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut on_side = BTreeMap::new();
    while std::time::Instant::now() < deadline {
        let (side, topic) = (side.clone(), s.topic.clone());
        on_side = tokio::task::spawn_blocking(move || side_topic_states(&side, &topic))
            .await
            .expect("side task");
        if on_side == want {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        on_side,
        want,
        "the side topic as A's store holds it; A log tail:\n{}",
        tail(&a.log_text(), 30)
    );
    // A counts its own gaps but the acknowledged one; none of B's.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            a.metric("gap_auditor_gaps_open").await,
            (HELD_RETIRED + LIVE - 1) as f64,
            "A's log tail:\n{}",
            tail(&a.log_text(), 30)
        );
    }
    a.stop();
    let after = handed(&a.store);
    for g in &theirs {
        assert!(
            !after.contains_key(&g.id),
            "B's gap {} not in A's store",
            g.id
        );
    }
    assert!(
        after
            .get(&acked)
            .is_some_and(|v| v.starts_with("acknowledged")),
        "{:?}",
        after.get(&acked)
    );
    a_gaps.remove(&acked);
    for id in a_gaps.keys() {
        assert_eq!(after.get(id), a_gaps.get(id), "A's gap {id} as it was");
    }
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
        st.forget_progress(AUDIT, &s.topic, 0)
            .expect("forget progress");
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
