//! Issue 37, review: a record the dead-letter topic names but the key book confirms
//! ("present wins") may hold the row of another record of its key, written while the named
//! one was rejected. Before, the stand-in swap only happened inside one segment, so when the
//! two records were decided in different segments, rounds or partitions, the other record
//! was reported LOST although the sink may hold it: an invented loss. These tests drive the
//! one implementation the daemon and `check` share (`Checker::due`, the ledger's
//! `apply_with_dead_letters`, `Checker::take_credits`, `Checker::recheck_ledger`) against
//! a sink that holds one row for the key.

use super::*;
use crate::config::MatchStrategy;
use crate::ledger::{Observed, PartitionLedger};
use std::collections::BTreeSet;

const GRACE: i64 = 1_000;

fn tp_of(p: i32) -> TopicPartition {
    TopicPartition {
        topic: "t".into(),
        partition: p,
    }
}

/// A partition's ledger holding `keys` at offsets 0.. (ingested into the book too, as the
/// daemon does), committed past all of them by the pipeline.
fn partition(checker: &mut Checker, keys: &[&str]) -> PartitionLedger {
    let mut l = PartitionLedger::new(0, true);
    for (o, k) in keys.iter().enumerate() {
        let key = Key::new([*k]);
        if let Some(b) = checker.book_mut() {
            b.pend(&key);
        }
        l.ingest(o as Offset, None, Observed::Expected { key: Some(key) }, 0);
    }
    l.pipeline.observe(0, Some(keys.len() as Offset));
    l
}

/// One decision on `l` of at most `limit` due records (a round's limit splits a backlog
/// over decisions), with `named` the offsets the dead-letter topic names.
async fn decide(
    checker: &mut Checker,
    sink: &MemorySink,
    tp: &TopicPartition,
    l: &mut PartitionLedger,
    named: &BTreeSet<Offset>,
    limit: u64,
) -> Applied {
    let segs = l.due(10_000, GRACE, limit);
    let v = checker.due(sink, tp, &segs, &|_, _| {}).await.expect("ok");
    let a = l.apply_with_dead_letters(&v, 10_000, &|run| {
        runs::normalize(
            named
                .range(run.first..=run.last)
                .map(|&o| OffsetRun::new(o, o))
                .collect(),
        )
    });
    checker.take_credits(l);
    a
}

fn shared_key_gaps(l: &mut PartitionLedger) -> Vec<(Offset, u64, u64, bool)> {
    l.take_dirty_gaps()
        .iter()
        .map(|g| (g.first, g.missing, g.dead_lettered, g.shared_key))
        .collect()
}

fn setup() -> (Checker, MemorySink) {
    let sink = MemorySink::new();
    sink.insert_key(&Key::new(["k"]));
    (Checker::new(MatchStrategy::KeyColumns, 100, 1_000), sink)
}

#[tokio::test]
async fn a_stand_in_decided_in_a_later_round_is_dead_lettered_not_lost() {
    // 0 (named) and 1 share key k; the sink holds one row. Two decisions of one record each.
    let (mut c, sink) = setup();
    let tp = tp_of(0);
    let mut l = partition(&mut c, &["k", "k"]);
    let named: BTreeSet<Offset> = [0].into();
    let a0 = decide(&mut c, &sink, &tp, &mut l, &named, 1).await;
    assert_eq!((a0.confirmed, a0.lost), (1, 0), "present wins for 0");
    let a1 = decide(&mut c, &sink, &tp, &mut l, &named, 1).await;
    assert_eq!(
        (a1.confirmed, a1.lost, a1.dead_lettered),
        (0, 0, 1),
        "1 stands in for the named 0: never a loss"
    );
    assert_eq!(shared_key_gaps(&mut l), vec![(1, 0, 1, true)]);
    assert_eq!(l.missing(), 0);
}

#[tokio::test]
async fn a_stand_in_on_another_partition_is_dead_lettered_not_lost() {
    let (mut c, sink) = setup();
    let (tp0, tp1) = (tp_of(0), tp_of(1));
    let mut l0 = partition(&mut c, &["k"]);
    let mut l1 = partition(&mut c, &["k"]);
    let a0 = decide(&mut c, &sink, &tp0, &mut l0, &[0].into(), 100).await;
    assert_eq!((a0.confirmed, a0.lost), (1, 0));
    let a1 = decide(&mut c, &sink, &tp1, &mut l1, &BTreeSet::new(), 100).await;
    assert_eq!((a1.confirmed, a1.lost, a1.dead_lettered), (0, 0, 1));
    assert_eq!(shared_key_gaps(&mut l1), vec![(0, 0, 1, true)]);
}

#[tokio::test]
async fn a_stand_in_in_another_segment_of_one_decision_is_dead_lettered_not_lost() {
    // 0 (named, k), 1 (own key, absent: a real loss), 2 (k): 1 ends the first segment's
    // run of present records... the due segments split at the pending runs' bounds.
    let (mut c, sink) = setup();
    let tp = tp_of(0);
    let mut l = partition(&mut c, &["k"]);
    // A second pending run: ingested after a gap in the offsets (the ledger keeps runs).
    let k = Key::new(["k"]);
    if let Some(b) = c.book_mut() {
        b.pend(&k);
    }
    l.ingest(5, None, Observed::Expected { key: Some(k) }, 0);
    l.pipeline.observe(0, Some(6));
    let segs = l.due(10_000, GRACE, 100);
    assert!(segs.len() >= 2, "two segments in one decision: {segs:?}");
    let a = decide(&mut c, &sink, &tp, &mut l, &[0].into(), 100).await;
    assert_eq!((a.confirmed, a.lost, a.dead_lettered), (1, 0, 1));
}

#[tokio::test]
async fn a_credit_is_never_spent_on_a_record_the_topic_names_itself() {
    // 0 named and confirmed (credit); 1 named and absent (its own dead letter, exact);
    // 2 not named and absent: it takes 0's credit, so nothing is lost.
    let (mut c, sink) = setup();
    let tp = tp_of(0);
    let mut l = partition(&mut c, &["k", "k", "k"]);
    let named: BTreeSet<Offset> = [0, 1].into();
    let mut total = Applied::default();
    for _ in 0..3 {
        total = total.merge(decide(&mut c, &sink, &tp, &mut l, &named, 1).await);
    }
    assert_eq!(
        (total.confirmed, total.lost, total.dead_lettered),
        (1, 0, 2)
    );
}

#[tokio::test]
async fn without_a_dead_letter_the_later_record_is_still_lost() {
    // The control: nobody named 0, so 1 has no row of its own: missing, as before.
    let (mut c, sink) = setup();
    let tp = tp_of(0);
    let mut l = partition(&mut c, &["k", "k"]);
    let none = BTreeSet::new();
    decide(&mut c, &sink, &tp, &mut l, &none, 1).await;
    let a1 = decide(&mut c, &sink, &tp, &mut l, &none, 1).await;
    assert_eq!((a1.lost, a1.dead_lettered), (1, 0));
}

#[tokio::test]
async fn a_deleted_row_takes_its_credit_with_it() {
    // 0 named, confirmed; then the sink deletes the row (TTL): the credit goes with the
    // claim, and 1, written later, is confirmed by its own row, not dead-lettered.
    let (mut c, sink) = setup();
    let tp = tp_of(0);
    let mut l = partition(&mut c, &["k", "k"]);
    let named: BTreeSet<Offset> = [0].into();
    decide(&mut c, &sink, &tp, &mut l, &named, 1).await;
    let k = Key::new(["k"]);
    assert_eq!(c.book().map(|b| b.stand_ins(&k)), Some(1));
    sink.delete_key(&k);
    c.book_mut().map(|b| b.cap_all(&[(&k, 0)]));
    assert_eq!(c.book().map(|b| b.stand_ins(&k)), Some(0));
    sink.insert_key(&k);
    let a1 = decide(&mut c, &sink, &tp, &mut l, &named, 1).await;
    assert_eq!((a1.confirmed, a1.lost, a1.dead_lettered), (1, 0, 0));
}

#[tokio::test]
async fn a_missing_record_turns_stand_in_when_the_named_one_is_confirmed_later() {
    // p1's record (k) is decided first, while the sink holds no row: missing. Then the row
    // lands and p0's named record is confirmed by it: p1's record is its stand-in, taken
    // out of missing at its next re-check (it was counted lost once, like a late arrival).
    let sink = MemorySink::new();
    let mut c = Checker::new(MatchStrategy::KeyColumns, 100, 1_000);
    let (tp0, tp1) = (tp_of(0), tp_of(1));
    let mut l1 = partition(&mut c, &["k"]);
    let a1 = decide(&mut c, &sink, &tp1, &mut l1, &BTreeSet::new(), 100).await;
    assert_eq!(a1.lost, 1);
    let mut l0 = partition(&mut c, &["k"]);
    sink.insert_key(&Key::new(["k"]));
    let a0 = decide(&mut c, &sink, &tp0, &mut l0, &[0].into(), 100).await;
    assert_eq!(a0.confirmed, 1);
    let budget = c.recheck_budget();
    let r = c
        .recheck_ledger(&sink, &tp1, &mut l1, budget, &|_, _| {})
        .await
        .expect("ok")
        .unwrap_or_default()
        .merge(l1.settle_recheck_marks(&|_| Vec::new()));
    assert_eq!((r.late, r.dead_lettered), (0, 1));
    assert_eq!(l1.missing(), 0);
    assert_eq!(shared_key_gaps(&mut l1), vec![(0, 0, 1, true)]);
}

/// Review of issue 37, finding 1: a dead letter for a record the sink holds after all (the
/// pipeline retried it) leaves no credit when no other record of its key is there to own
/// the row: the key's next record, read later and dropped, is lost, not a stand-in.
#[tokio::test]
async fn a_credit_needs_another_record_of_the_key_there_now() {
    let (mut c, sink) = setup();
    let tp = tp_of(0);
    let k = Key::new(["k"]);
    let mut l = partition(&mut c, &["k"]);
    decide(&mut c, &sink, &tp, &mut l, &[0].into(), 100).await;
    assert_eq!(c.book().map(|b| b.stand_ins(&k)), Some(0));
    // Hours later: the same key again, dropped.
    if let Some(b) = c.book_mut() {
        b.pend(&k);
    }
    l.ingest(1, None, Observed::Expected { key: Some(k) }, 0);
    l.pipeline.observe(0, Some(2));
    let a = decide(&mut c, &sink, &tp, &mut l, &[0].into(), 100).await;
    assert_eq!(
        (a.lost, a.dead_lettered),
        (1, 0),
        "a certain loss is reported"
    );
}

/// Finding 1, second half: a credit the key's records there at the time did not need
/// (they were written) goes once the key has no undecided or missing record left.
#[tokio::test]
async fn a_credit_goes_when_the_key_has_no_record_left() {
    let sink = MemorySink::new();
    let k = Key::new(["k"]);
    sink.insert_key(&k);
    sink.insert_key(&k);
    let mut c = Checker::new(MatchStrategy::KeyColumns, 100, 1_000);
    let tp = tp_of(0);
    let mut l = partition(&mut c, &["k", "k"]);
    decide(&mut c, &sink, &tp, &mut l, &[0].into(), 1).await;
    assert_eq!(c.book().map(|b| b.stand_ins(&k)), Some(1), "1 was there");
    let a1 = decide(&mut c, &sink, &tp, &mut l, &[0].into(), 1).await;
    assert_eq!(a1.confirmed, 1, "1 has its own row");
    assert_eq!(
        c.book().map(|b| b.stand_ins(&k)),
        Some(0),
        "nobody left to lend to"
    );
}

/// Finding 2: a re-check never spends a credit on a record the dead-letter topic names
/// itself. M (0) missing, its dead letter read late; N (1, named) confirmed when X's row
/// lands; M and N rejected, X (2) written: nothing may be reported lost but M's first
/// count. Before, M's re-check spent N's credit and X was reported lost.
#[tokio::test]
async fn a_recheck_gives_back_a_credit_lent_to_a_named_record() {
    let sink = MemorySink::new();
    let k = Key::new(["k"]);
    let mut c = Checker::new(MatchStrategy::KeyColumns, 100, 1_000);
    let tp = tp_of(0);
    let mut l = partition(&mut c, &["k", "k", "k"]);
    // Round 1: M due, no row: missing (its dead letter is not read yet).
    let a = decide(&mut c, &sink, &tp, &mut l, &BTreeSet::new(), 1).await;
    assert_eq!(a.lost, 1);
    // X's row lands; round 2: N (named) confirmed by it, leaving a credit.
    sink.insert_key(&k);
    let named: BTreeSet<Offset> = [0, 1].into();
    let a = decide(&mut c, &sink, &tp, &mut l, &named, 1).await;
    assert_eq!(a.confirmed, 1);
    // M's re-check is lent the credit, but M is named: exact, and the credit goes back.
    let budget = c.recheck_budget();
    c.recheck_ledger(&sink, &tp, &mut l, budget, &|_, _| {})
        .await
        .expect("ok");
    let moved = l.dead_letter_missing(&[OffsetRun::new(0, 0)]);
    assert_eq!(moved.dead_lettered, 1);
    let lookup = |run: OffsetRun| runs::intersect(run, &[OffsetRun::new(0, 1)]);
    l.settle_recheck_marks(&lookup);
    c.take_credits(&mut l);
    // M's gap says shared_key since it was declared (N and X were pending with its key).
    assert_eq!(shared_key_gaps(&mut l), vec![(0, 0, 1, true)]);
    // Round 3: X finds the row held by N, and takes N's credit back from M.
    let a = decide(&mut c, &sink, &tp, &mut l, &named, 1).await;
    assert_eq!(
        (a.lost, a.dead_lettered),
        (0, 1),
        "X is N's stand-in, not lost"
    );
}
