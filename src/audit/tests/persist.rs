//! Persist: the store first, then the offsets; counters only for what the store holds.

use super::harness::*;

#[tokio::test]
async fn a_refused_store_write_commits_nothing_and_counts_nothing() {
    let mut h = harness("");
    h.assign_and_read((0, 0), expected(0..10)).await;
    h.in_sink(0..8);
    // Whatever assignment itself committed is not what this test is about.
    let _ = h.commits();
    h.break_store();
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    // Decided in memory, but neither counted nor committed: a crash now re-decides them.
    assert_eq!(h.audit.parts[&tp(0)].ledger.settled(), 10);
    assert_eq!(h.counter(|m| &m.records_lost), 0);
    assert_eq!(h.counter(|m| &m.records_confirmed), 0);
    assert!(
        h.commits().is_empty(),
        "no offset before the store holds it"
    );
    assert!(h.stored_gaps().is_empty());
    // The next round's write goes through: counted once, then committed.
    h.heal_store();
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_lost), 2);
    assert_eq!(h.counter(|m| &m.records_confirmed), 8);
    assert_eq!(h.stored_gaps().len(), 1);
    assert_eq!(h.commits(), vec![vec![(tp(0), 10)]]);
    // Nothing is counted twice by a later round.
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_lost), 2);
}

#[tokio::test]
async fn the_store_holds_the_settled_offset_before_kafka_is_asked_to_commit_it() {
    let mut h = harness("");
    h.assign_and_read((0, 0), expected(0..5)).await;
    h.in_sink(0..5);
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    let commits = h.commits();
    assert_eq!(commits.last(), Some(&vec![(tp(0), 5)]));
    let stored = h.store.load_progress(AUDIT).expect("progress");
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].settled, 5, "the store is never behind the commit");
    // An unchanged ledger is neither written nor committed again.
    h.audit.round().await;
    assert!(h.commits().is_empty());
}
