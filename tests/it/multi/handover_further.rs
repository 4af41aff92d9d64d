//! Review of format 3 (2026-12-06), findings F2 and F1, and the reviews of the merge and the
//! supersede that first fixed F2, on the real broker: an owner that resumes a partition from
//! its own store further than a format-3 state, or takes its own state back, must neither
//! publish chunks that lack gaps the state it publishes counts (its store let them go: lost
//! for good) nor replace the chunks another owner's state names (a next owner taking that
//! state would import a mixture).

use super::handover_idle::{AUDIT, handed};
use super::handover_retired::{
    HELD_END, HELD_RETIRED, LIVE, a_decided, held_retired_rows, newest_state, side_topic_states_of,
    state_term,
};
use super::*;
use gap_auditor::handover::{Handover, retired};
use gap_auditor::store::ImportMark;

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

/// `owner`'s copy of the partition's newest state, settled at `settled`, published under
/// the term its read of the handover topic gives it: its client and the mark of an import
/// of that state (its owner, term, settled offset and generation).
async fn publish_as(
    handover: &str,
    tp: &gap_auditor::types::TopicPartition,
    owner: &str,
    settled: i64,
) -> (std::sync::Arc<Handover>, ImportMark) {
    let h = other_owner(handover, owner);
    let (hh, t) = (h.clone(), tp.clone());
    let mut states = tokio::task::spawn_blocking(move || hh.read(AUDIT, &[t]))
        .await
        .expect("read task")
        .expect("read the handover topic");
    let mut st = states.remove(tp).expect("a state");
    assert_eq!(st.version, 3);
    let before = st.term;
    st.owner = h.owner().to_string();
    st.settled = settled;
    st.base = None;
    st.prev = None;
    st.removed = Vec::new();
    st.claims_kept = false;
    h.publish(&[st]).await.expect("the state");
    let st = newest_state(handover, tp).await;
    assert!(
        st.term > before,
        "{owner}'s term {} after {before}",
        st.term
    );
    let mark = ImportMark {
        owner: st.owner,
        term: st.term,
        below: Some(st.settled),
        generation: Some(st.generation),
    };
    (h, mark)
}

/// Waits (up to a minute) for a state of a term above `than` and returns its term.
async fn newer_term(
    handover: &str,
    tp: &gap_auditor::types::TopicPartition,
    than: u64,
    a: &Instance,
) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut term = than;
    while term <= than && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        term = state_term(handover, tp).await;
    }
    assert!(
        term > than,
        "A's state lands; A log tail:\n{}",
        tail(&a.log_text(), 30)
    );
    term
}

/// A's store as an import of the state `mark` names, cut with the first `imported` of A's
/// given-up gaps in the store, leaves it.
fn cut_import(a: &Instance, handover: &str, topic: &str, mark: &ImportMark, imported: usize) {
    let store = Store::open(&a.store).expect("store");
    store
        .clear_handover_swept(AUDIT, &[(topic.to_string(), 0)])
        .expect("unmark");
    store
        .set_importing(handover, AUDIT, topic, 0, Some(mark))
        .expect("mark the import");
    drop(store);
    let conn = rusqlite::Connection::open(a.store.join(gap_auditor::store::DB_FILE)).expect("db");
    for g in held_retired_rows(topic).iter().skip(imported) {
        conn.execute("DELETE FROM gaps WHERE id = ?1", [&g.id])
            .expect("not imported yet");
    }
}

/// A, started over its cut import, resumes it: its state lands under a term past `than`,
/// the side topic holds its ten given-up gaps under that term, it counts them with its live
/// ones, and its store holds them as it decided them (`a_gaps`). Returns A's store after.
async fn resumes_to_all_ten(
    a: &mut Instance,
    handover: &str,
    tp: &gap_auditor::types::TopicPartition,
    than: u64,
    a_gaps: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    a.start();
    wait_settled(a, HELD_END, "A resumes").await;
    let term = newer_term(handover, tp, than, a).await;
    assert_eq!(
        side_under(handover, &tp.topic, term).await,
        held_open(&tp.topic),
        "all ten under A's term; A log tail:\n{}",
        tail(&a.log_text(), 30)
    );
    stays_open(a, HELD_RETIRED + LIVE).await;
    a.stop();
    let after = handed(&a.store);
    for g in held_retired_rows(&tp.topic) {
        assert_eq!(after.get(&g.id), a_gaps.get(&g.id), "{} in A's store", g.id);
    }
    after
}

/// The given-up gaps the side topic holds under `term`, by id, with their state.
async fn side_under(handover: &str, topic: &str, term: u64) -> BTreeMap<String, String> {
    let (side, topic) = (retired::side_topic(handover), topic.to_string());
    tokio::task::spawn_blocking(move || side_topic_states_of(&side, &topic, Some(term)))
        .await
        .expect("side task")
}

/// A's given-up gaps, all open, by id.
fn held_open(topic: &str) -> BTreeMap<String, String> {
    held_retired_rows(topic)
        .into_iter()
        .map(|g| (g.id, "open".to_string()))
        .collect()
}

/// A's `gaps_open` stays `want` for six samples.
async fn stays_open(a: &Instance, want: i64) {
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            a.metric("gap_auditor_gaps_open").await,
            want as f64,
            "A's log tail:\n{}",
            tail(&a.log_text(), 30)
        );
    }
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
    let tp = gap_auditor::types::TopicPartition::new(s.topic.clone(), 0);
    // B's state: less far than A's store, under the next term (its read made it B's).
    let (b, b_mark) = publish_as(&handover, &tp, "other-owner", HELD_END - 2).await;
    let b_term = b_mark.term;
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
    let b_side = side_under(&handover, &s.topic, b_term).await;
    Store::open(&a.store)
        .expect("store")
        .clear_handover_swept(AUDIT, &[(s.topic.clone(), 0)])
        .expect("unmark");
    a.start();
    wait_settled(&a, HELD_END, "A resumes from its store").await;
    // A's state lands, under a term past B's, and its chunks hold A's given-up gaps as
    // A's store does (gap 3 open: B's acknowledgement is B's verdict, not followed).
    let term = newer_term(&handover, &tp, b_term, &a).await;
    assert_eq!(
        side_under(&handover, &s.topic, term).await,
        held_open(&s.topic),
        "A's chunks under its term; A log tail:\n{}",
        tail(&a.log_text(), 30)
    );
    assert_eq!(
        side_under(&handover, &s.topic, b_term).await,
        b_side,
        "B's chunks untouched"
    );
    stays_open(&a, HELD_RETIRED + LIVE).await;
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
    let tp = gap_auditor::types::TopicPartition::new(s.topic.clone(), 0);
    let (b, b_mark) = publish_as(&handover, &tp, "other-owner", HELD_END - 2).await;
    b.publish_retired(&retired::chunks(
        AUDIT,
        &tp,
        held_retired_rows(&s.topic),
        b.owner(),
        chrono::Utc::now(),
    ))
    .await
    .expect("B's chunk");
    cut_import(&a, &handover, &s.topic, &b_mark, 5);
    resumes_to_all_ten(&mut a, &handover, &tp, b_mark.term, &a_gaps).await;
}

/// Review of format 3, N2 and T2: A's import of B's state (settled at 20, where A's own
/// verdicts begin) was cut with five of B's ten given-up gaps imported, A went on to
/// `HELD_END`, and meanwhile a third owner C took B's state over, published its own newer
/// state (less far than A's store) and its chunk: B's ten gaps as C holds them, and two
/// gaps C gave up at 40 and 70, offsets A decided itself (present). Before, the mark named
/// B's state only: A took C's state for a store further than the handover and published
/// its five under its own term (the other five lost for good). Resumed without a bound, A
/// would import C's 40 and 70 too (counted twice over A's verdicts there). Now A resumes
/// the import from C's state, below 20 only: all ten, and neither 40 nor 70.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cut_import_resumes_from_a_newer_state_below_where_it_began() {
    let (s, handover, mut a, _b, a_gaps) = a_decided("handover_import_newer").await;
    a.stop();
    let tp = gap_auditor::types::TopicPartition::new(s.topic.clone(), 0);
    let (_b, b_mark) = publish_as(&handover, &tp, "other-owner", 20).await;
    let (c, c_mark) = publish_as(&handover, &tp, "third-owner", HELD_END - 2).await;
    let theirs = [
        open_gap(AUDIT, &s.topic, 40, 40),
        open_gap(AUDIT, &s.topic, 70, 70),
    ];
    let mut rows = held_retired_rows(&s.topic);
    rows.extend(theirs.iter().cloned());
    c.publish_retired(&retired::chunks(
        AUDIT,
        &tp,
        rows,
        c.owner(),
        chrono::Utc::now(),
    ))
    .await
    .expect("C's chunk");
    cut_import(&a, &handover, &s.topic, &b_mark, 5);
    // All ten under A's term, not C's 40 and 70.
    let after = resumes_to_all_ten(&mut a, &handover, &tp, c_mark.term, &a_gaps).await;
    for g in &theirs {
        assert!(
            !after.contains_key(&g.id),
            "C's gap {} not in A's store",
            g.id
        );
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
    let tp = gap_auditor::types::TopicPartition::new(s.topic.clone(), 0);
    let own = state_term(&handover, &tp).await;
    Store::open(&a.store)
        .expect("store")
        .use_term(&handover, AUDIT, &s.topic, 0, own + 3)
        .expect("a later term used");
    a.start();
    wait_settled(&a, HELD_END, "A takes its partition back").await;
    // A's state lands under a term past every one it used.
    let term = newer_term(&handover, &tp, own + 3, &a).await;
    assert_eq!(
        side_under(&handover, &s.topic, term).await,
        held_open(&s.topic),
        "A's given-up gaps under its new term"
    );
    stays_open(&a, HELD_RETIRED + LIVE).await;
    a.stop();
}
