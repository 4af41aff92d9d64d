//! A key's claims never exceed the rows the sink last showed for it (issue 34 item 3, SPEC
//! guarantee 10): rows the sink deleted free the claims of the records they confirmed, so a
//! reused key's new row confirms its new record — and a row that is still there keeps its
//! claim, so a new record whose write was lost is still missing.

use super::*;
use proptest::prelude::*;

/// A book in which record A with key `a` was confirmed by the sink's one row.
fn confirmed_once() -> KeyBook {
    let mut b = KeyBook::new(10);
    b.pend(&k("a"));
    assert_eq!(b.decide_due(&k("a"), 1, 1).confirmed, 1);
    b.persisted();
    b
}

#[test]
fn a_row_deleted_before_the_new_one_is_written_frees_its_claim() {
    let mut b = confirmed_once();
    // Record B with the same key is read: its key holds A's claim, so it is looked at early.
    b.pend(&k("a"));
    let keys = b.take_refresh(10);
    assert_eq!(keys, vec![k("a")]);
    // The sink deleted A's row; B's is not written yet.
    assert_eq!(b.cap_all(&[(&k("a"), 0)]), vec![1]);
    assert_eq!(b.counts(&k("a")), (1, 0, 0));
    assert_eq!(
        b.dirty_count(&k("a")),
        Some(0),
        "the freed claim is persisted"
    );
    // B's row lands: it is B's.
    let o = b.decide_due(&k("a"), 1, 1);
    assert_eq!((o.confirmed, o.shared), (1, false));
    assert_eq!(b.counts(&k("a")), (0, 1, 0));
}

#[test]
fn a_row_still_there_keeps_its_claim_and_a_lost_write_is_missing() {
    let mut b = confirmed_once();
    b.pend(&k("a"));
    assert_eq!(b.take_refresh(10), vec![k("a")]);
    // A's row is still there and B's write was lost.
    assert_eq!(b.cap_all(&[(&k("a"), 1)]), vec![0]);
    let o = b.decide_due(&k("a"), 1, 1);
    assert_eq!((o.confirmed, o.shared), (0, true));
    assert_eq!(b.counts(&k("a")), (0, 1, 1));
}

#[test]
fn a_due_decision_and_a_recheck_cap_the_claims_too() {
    let mut b = KeyBook::new(10);
    for _ in 0..3 {
        b.pend(&k("a"));
    }
    assert_eq!(b.decide_due(&k("a"), 2, 2).confirmed, 2);
    // Two rows deleted: the third record finds none, and the two claims are gone.
    let o = b.decide_due(&k("a"), 1, 0);
    assert_eq!((o.confirmed, o.shared), (0, false));
    assert_eq!(b.counts(&k("a")), (0, 0, 1));
    // One row lands: it is the missing record's (nothing else claims a row any more).
    assert_eq!(b.recheck(&k("a"), 1, 1).late, 1);
    assert_eq!(b.counts(&k("a")), (0, 1, 0));
}

#[test]
fn duplicates_on_deleted_rows_are_forgotten_so_a_new_extra_row_counts() {
    let mut b = KeyBook::new(10);
    b.pend(&k("a"));
    assert_eq!(b.decide_due(&k("a"), 1, 2).duplicates, 1);
    b.pend(&k("a"));
    assert_eq!(b.take_refresh(10).len(), 1);
    // Every row of the key deleted (a TTL).
    assert_eq!(b.cap_all(&[(&k("a"), 0)]), vec![1]);
    // The new record is written twice: one row is its own, one a new duplicate.
    let o = b.decide_due(&k("a"), 1, 2);
    assert_eq!((o.confirmed, o.duplicates), (1, 1));
}

#[test]
fn only_records_of_keys_holding_claims_are_looked_at_early_once_each() {
    let mut b = confirmed_once();
    b.pend(&k("b"));
    assert!(b.take_refresh(10).is_empty(), "a new key holds no claim");
    b.pend(&k("a"));
    b.pend(&k("a"));
    b.pend(&k("c"));
    assert_eq!(b.take_refresh(10), vec![k("a")], "one look per key");
    assert!(b.take_refresh(10).is_empty());
}

#[test]
fn the_looks_are_bounded_per_round_and_the_rest_wait() {
    let mut b = KeyBook::new(10);
    for key in ["a", "b", "c"] {
        b.pend(&k(key));
        b.decide_due(&k(key), 1, 1);
    }
    for key in ["a", "b", "c"] {
        b.pend(&k(key));
    }
    assert_eq!(b.take_refresh(2), vec![k("a"), k("b")]);
    // A sink that could not be asked: the keys wait, in their order.
    b.requeue_refresh(vec![k("a"), k("b")]);
    assert_eq!(b.take_refresh(2), vec![k("a"), k("b")]);
    assert_eq!(b.take_refresh(2), vec![k("c")]);
}

#[test]
fn a_record_decided_before_its_look_needs_none() {
    let mut b = confirmed_once();
    b.pend(&k("a"));
    // Due in the round it was read (an auditor behind the pipeline): its decision counted
    // the key, with the same cap.
    b.decide_due(&k("a"), 1, 1);
    assert!(b.take_refresh(10).is_empty());
}

#[test]
fn under_presence_claims_decide_nothing_and_no_key_is_looked_at_early() {
    let mut b = KeyBook::new(10);
    b.set_semantics(KeySemantics::Presence);
    b.pend(&k("a"));
    assert_eq!(b.decide_due(&k("a"), 1, 1).confirmed, 1);
    b.pend(&k("a"));
    assert!(b.take_refresh(10).is_empty());
    // The upsert table's row was deleted, then written again by the new record.
    assert_eq!(b.decide_due(&k("a"), 1, 1).confirmed, 1);
    // Deleted again: a new record without a row is missing.
    b.pend(&k("a"));
    assert_eq!(b.decide_due(&k("a"), 1, 0).confirmed, 0);
}

/// One look at a key: what the sink showed.
#[derive(Debug, Clone)]
enum Look {
    Pend,
    Due(u64, u64),
    Recheck(u64, u64),
    Refresh(u64),
}

fn look() -> impl Strategy<Value = Look> {
    prop_oneof![
        3 => Just(Look::Pend),
        3 => (1u64..3, 0u64..5).prop_map(|(d, r)| Look::Due(d, r)),
        2 => (1u64..3, 0u64..5).prop_map(|(m, r)| Look::Recheck(m, r)),
        2 => (0u64..5).prop_map(Look::Refresh),
    ]
}

proptest! {
    #![proptest_config(crate::test_seed::config())]

    /// Whatever the sink showed, a key's claims never exceed the rows of its last answer;
    /// and capping early with the rows a decision is then made with changes neither that
    /// decision nor the book it leaves (a refresh frees rows for LATER decisions only).
    #[test]
    fn claims_never_exceed_the_rows_last_shown(looks in prop::collection::vec(look(), 0..40)) {
        let key = k("a");
        let mut b = KeyBook::new(10);
        for l in looks {
            let (p, _, m) = b.counts(&key);
            let rows = match l {
                Look::Pend => { b.pend(&key); continue; }
                Look::Due(d, rows) => {
                    let d = d.min(p);
                    if d == 0 { continue; }
                    let mut early = b.clone();
                    early.cap_all(&[(&key, rows)]);
                    let want = early.decide_due(&key, d, rows);
                    prop_assert_eq!(b.decide_due(&key, d, rows), want);
                    prop_assert_eq!(b.counts(&key), early.counts(&key));
                    rows
                }
                Look::Recheck(n, rows) => {
                    let n = n.min(m);
                    let mut early = b.clone();
                    early.cap_all(&[(&key, rows)]);
                    let want = early.recheck(&key, n, rows);
                    prop_assert_eq!(b.recheck(&key, n, rows), want);
                    prop_assert_eq!(b.counts(&key), early.counts(&key));
                    rows
                }
                Look::Refresh(rows) => {
                    let (_, c, _) = b.counts(&key);
                    let freed = b.cap_all(&[(&key, rows)]);
                    prop_assert_eq!(freed, vec![c.saturating_sub(rows)]);
                    rows
                }
            };
            let (_, confirmed, _) = b.counts(&key);
            prop_assert!(confirmed <= rows, "{} claims on {} rows", confirmed, rows);
        }
    }
}
