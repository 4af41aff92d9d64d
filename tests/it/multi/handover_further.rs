//! Review of format 3 (2026-12-06), findings F2 and F1, and the reviews of the merge and the
//! supersede that first fixed F2, on the real broker: an owner that resumes a partition from
//! its own store further than a format-3 state, or takes its own state back, must neither
//! publish chunks that lack gaps the state it publishes counts (its store let them go: lost
//! for good) nor replace the chunks another owner's state names (a next owner taking that
//! state would import a mixture).

use super::handover_idle::{AUDIT, handed};
use super::handover_retired::{
    HELD_END, HELD_RETIRED, LIVE, a_decided, held_retired_rows, side_topic_states_of, state_term,
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

/// F2, N1-N6 and R1-R5: A's store is further than the format-3 state on the handover topic,
/// another owner's (B took the partition over from A's state, under the next term, gave up
/// gaps at 40 and 70 that A decided otherwise, an operator acknowledged A's gap 3 there;
/// then the partition came back to A, whose store had gone on), and A's swept mark is
/// unset. Before, A swept its store's rows over B's chunk 0 only (chunk 1 stayed for a next
/// owner), then merged B's gaps into its store, then replaced B's chunks with its own and
/// empty ones before its state landed. Now A's verdicts stand, as a store resumed further
/// always had them (format 2's new base replaced the other owner's whole): A publishes its
/// given-up gaps under its own new term and its state names that term; B's chunks stay
/// under B's term, untouched, named by B's state until A's replaced it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_store_further_than_another_owners_state_keeps_its_verdicts_under_its_own_term() {
    let (s, handover, mut a, _b, a_gaps) = a_decided("handover_further_own_term").await;
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
    let a_term = st.term;
    // B's state: less far than A's store, under the next term (its read made it B's).
    st.owner = b.owner().to_string();
    st.settled = HELD_END - 2;
    st.base = None;
    st.prev = None;
    st.removed = Vec::new();
    st.claims_kept = false;
    b.publish(&[st]).await.expect("B's state");
    let b_term = state_term(&handover, &tp).await;
    assert!(b_term > a_term, "B's term {b_term} after A's {a_term}");
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
    let side = retired::side_topic(&handover);
    let read_side = |term: u64| {
        let (side, topic) = (side.clone(), s.topic.clone());
        async move {
            tokio::task::spawn_blocking(move || side_topic_states_of(&side, &topic, Some(term)))
                .await
                .expect("side task")
        }
    };
    let b_side = read_side(b_term).await;
    Store::open(&a.store)
        .expect("store")
        .clear_handover_swept(AUDIT, &[(s.topic.clone(), 0)])
        .expect("unmark");
    a.start();
    wait_settled(&a, HELD_END, "A resumes from its store").await;
    // A's state lands, under a term past B's, and its chunks hold A's given-up gaps as
    // A's store does (gap 3 open: B's acknowledgement is B's verdict, not followed).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut term = b_term;
    while term <= b_term && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        term = state_term(&handover, &tp).await;
    }
    assert!(
        term > b_term,
        "A's state lands; A log tail:\n{}",
        tail(&a.log_text(), 30)
    );
    let want: BTreeMap<String, String> = held_retired_rows(&s.topic)
        .into_iter()
        .map(|g| (g.id, "open".to_string()))
        .collect();
    assert_eq!(
        read_side(term).await,
        want,
        "A's chunks under its term; A log tail:\n{}",
        tail(&a.log_text(), 30)
    );
    assert_eq!(read_side(b_term).await, b_side, "B's chunks untouched");
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
    for g in &theirs {
        assert!(
            !after.contains_key(&g.id),
            "B's gap {} not in A's store",
            g.id
        );
    }
    assert_eq!(
        after.get(&acked),
        a_gaps.get(&acked),
        "gap 3 as A decided it"
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

/// R1 of the supersede's review: an import cut by a rebalance or a stop after the
/// partition's progress went past the state it imports. Here A (as the importer) took over
/// B's state (settled 2 below A's store, under B's term, its chunk holding A's ten given-up
/// gaps) and was stopped with five of them imported: its store marks the import, and its
/// progress is further than B's state. Before, A took that for a store further than the
/// handover, published its five under its own term and its state named them: the other
/// five lost for good. Now the import resumes over A's progress and A ends counting and
/// publishing all ten.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_import_cut_after_its_progress_went_past_the_state_resumes() {
    let (s, handover, mut a, _b, a_gaps) = a_decided("handover_import_resumes").await;
    a.stop();
    let tp = gap_auditor::gap::TopicPartition::new(s.topic.clone(), 0);
    let b = other_owner(&handover, "other-owner");
    let (bb, t) = (b.clone(), tp.clone());
    let mut states = tokio::task::spawn_blocking(move || bb.read(AUDIT, &[t]))
        .await
        .expect("read task")
        .expect("read the handover topic");
    let mut st = states.remove(&tp).expect("A's state");
    st.owner = b.owner().to_string();
    st.settled = HELD_END - 2;
    st.base = None;
    st.prev = None;
    st.removed = Vec::new();
    st.claims_kept = false;
    b.publish(&[st]).await.expect("B's state");
    let b_term = state_term(&handover, &tp).await;
    b.publish_retired(&retired::chunks(
        AUDIT,
        &tp,
        held_retired_rows(&s.topic),
        b.owner(),
        chrono::Utc::now(),
    ))
    .await
    .expect("B's chunk");
    {
        // A's store as an import of B's state cut halfway leaves it.
        let store = Store::open(&a.store).expect("store");
        store
            .clear_handover_swept(AUDIT, &[(s.topic.clone(), 0)])
            .expect("unmark");
        store
            .set_importing(&handover, AUDIT, &s.topic, 0, Some((b.owner(), b_term)))
            .expect("mark the import");
        drop(store);
        let conn =
            rusqlite::Connection::open(a.store.join(gap_auditor::store::DB_FILE)).expect("db");
        for g in held_retired_rows(&s.topic).iter().skip(5) {
            conn.execute("DELETE FROM gaps WHERE id = ?1", [&g.id])
                .expect("not imported yet");
        }
    }
    a.start();
    wait_settled(&a, HELD_END, "A resumes").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut term = b_term;
    while term <= b_term && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        term = state_term(&handover, &tp).await;
    }
    assert!(
        term > b_term,
        "A's state lands; A log tail:\n{}",
        tail(&a.log_text(), 30)
    );
    let want: BTreeMap<String, String> = held_retired_rows(&s.topic)
        .into_iter()
        .map(|g| (g.id, "open".to_string()))
        .collect();
    let (side, topic) = (retired::side_topic(&handover), s.topic.clone());
    let on_side =
        tokio::task::spawn_blocking(move || side_topic_states_of(&side, &topic, Some(term)))
            .await
            .expect("side task");
    assert_eq!(
        on_side,
        want,
        "all ten under A's term; A log tail:\n{}",
        tail(&a.log_text(), 30)
    );
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
    for g in held_retired_rows(&s.topic) {
        assert_eq!(after.get(&g.id), a_gaps.get(&g.id), "{} in A's store", g.id);
    }
}

/// Review of the terms, N1: an instance that owned the partition under a term above its
/// own newest state's (a later ownership whose state never landed, its chunks maybe stale
/// under its keys) must never write under that term or keep an older one again: taking
/// its own state back, it goes past every term it used, imports its state's chunks and
/// publishes them under the new term.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instance_never_writes_under_a_term_it_used_before() {
    let (s, handover, mut a, _b, _a_gaps) = a_decided("handover_terms_used").await;
    a.stop();
    let tp = gap_auditor::gap::TopicPartition::new(s.topic.clone(), 0);
    let own = state_term(&handover, &tp).await;
    Store::open(&a.store)
        .expect("store")
        .use_term(&handover, AUDIT, &s.topic, 0, own + 3)
        .expect("a later term used");
    a.start();
    wait_settled(&a, HELD_END, "A takes its partition back").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut term = own;
    while term <= own + 3 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        term = state_term(&handover, &tp).await;
    }
    assert!(
        term > own + 3,
        "A's state lands under a term past every one it used ({term}); A log tail:\n{}",
        tail(&a.log_text(), 30)
    );
    let want: BTreeMap<String, String> = held_retired_rows(&s.topic)
        .into_iter()
        .map(|g| (g.id, "open".to_string()))
        .collect();
    let (side, topic) = (retired::side_topic(&handover), s.topic.clone());
    let on_side =
        tokio::task::spawn_blocking(move || side_topic_states_of(&side, &topic, Some(term)))
            .await
            .expect("side task");
    assert_eq!(on_side, want, "A's given-up gaps under its new term");
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            a.metric("gap_auditor_gaps_open").await,
            (HELD_RETIRED + LIVE) as f64
        );
    }
    a.stop();
}
