//! Unit tests of the key book.

use super::*;

fn k(s: &str) -> Key {
    Key::new([s])
}

#[test]
fn a_shared_key_on_two_partitions_is_confirmed_twice_by_two_rows() {
    let mut b = KeyBook::new(10);
    b.pend(&k("a"));
    b.pend(&k("a"));
    // Partition 0 decides first: its record takes one row, the other row is the pending
    // record's, not a duplicate.
    let o = b.decide_due(&k("a"), 1, 2);
    assert_eq!((o.confirmed, o.duplicates, o.shared), (1, 0, true));
    let o = b.decide_due(&k("a"), 1, 2);
    assert_eq!((o.confirmed, o.duplicates), (1, 0));
    assert_eq!(b.counts(&k("a")), (0, 2, 0));
}

#[test]
fn a_shortfall_is_missing_and_turns_late_when_the_row_lands() {
    let mut b = KeyBook::new(10);
    b.pend(&k("a"));
    b.pend(&k("a"));
    let o = b.decide_due(&k("a"), 2, 1);
    assert_eq!((o.confirmed, o.shared), (1, true));
    assert_eq!(b.counts(&k("a")), (0, 1, 1));
    assert_eq!(b.recheck(&k("a"), 1, 1).late, 0);
    let r = b.recheck(&k("a"), 1, 2);
    assert_eq!((r.late, r.duplicates), (1, 0));
    assert_eq!(b.counts(&k("a")), (0, 2, 0));
}

#[test]
fn duplicates_are_charged_once_and_only_when_nothing_waits_for_the_key() {
    let mut b = KeyBook::new(10);
    b.pend(&k("a"));
    b.pend(&k("a"));
    assert_eq!(
        b.decide_due(&k("a"), 1, 3).duplicates,
        0,
        "one record still pending"
    );
    assert_eq!(b.decide_due(&k("a"), 1, 3).duplicates, 1);
    b.pend(&k("a"));
    // The third record finds the extra row free: confirmed, no loss, nothing recharged.
    let o = b.decide_due(&k("a"), 1, 3);
    assert_eq!((o.confirmed, o.duplicates), (1, 0));
    b.pend(&k("a"));
    // Five rows for four records: the one extra row was charged before (it is the row the
    // third record then took: a duplicate counted early is never taken back).
    assert_eq!(b.decide_due(&k("a"), 1, 5).duplicates, 0);
    assert_eq!(
        b.recheck(&k("a"), 0, 6).duplicates,
        1,
        "a sixth row is a new duplicate"
    );
}

#[test]
fn a_unique_key_is_not_shared() {
    let mut b = KeyBook::new(10);
    b.pend(&k("a"));
    let o = b.decide_due(&k("a"), 1, 0);
    assert_eq!((o.confirmed, o.shared), (0, false));
}

#[test]
fn idle_keys_are_forgotten_oldest_first_busy_ones_never() {
    let mut b = KeyBook::new(2);
    for s in ["a", "b", "c"] {
        b.pend(&k(s));
        b.decide_due(&k(s), 1, 1);
    }
    b.pend(&k("m"));
    b.decide_due(&k("m"), 1, 0);
    b.pend(&k("p"));
    assert_eq!(
        b.counts(&k("a")),
        (0, 0, 0),
        "the oldest idle key is forgotten"
    );
    assert_eq!(b.counts(&k("c")), (0, 1, 0));
    assert_eq!(b.counts(&k("m")), (0, 0, 1), "missing keys are kept");
    assert_eq!(b.counts(&k("p")), (1, 0, 0), "pending keys are kept");
    for i in 0..100 {
        let key = k(&format!("x{i}"));
        b.pend(&key);
        b.decide_due(&key, 1, 1);
    }
    assert!(b.len() <= 2 + 2, "{} keys", b.len());
    assert_eq!(b.counts(&k("m")), (0, 0, 1));
}

/// A key that went idle, busy and idle again has two slots in the idle queue: the stale
/// one (its first stamp) forgets nothing when it reaches the front; only the slot of its
/// last idle spell does. (The queue finds a key by its hash and stamp, not by the key.)
#[test]
fn a_stale_idle_slot_forgets_nothing_and_the_keys_current_one_does() {
    let mut b = KeyBook::new(1);
    b.pend(&k("a"));
    b.decide_due(&k("a"), 1, 1);
    // Busy again, and idle again: [a (stale), a].
    b.pend(&k("a"));
    b.decide_due(&k("a"), 1, 2);
    assert_eq!(
        b.counts(&k("a")),
        (0, 2, 0),
        "the stale slot forgot nothing"
    );
    // b goes idle: a's current slot is the oldest past capacity.
    b.pend(&k("b"));
    b.decide_due(&k("b"), 1, 1);
    assert_eq!(b.counts(&k("a")), (0, 0, 0), "a's current slot forgot it");
    assert_eq!(b.counts(&k("b")), (0, 1, 0));
    assert_eq!(b.len(), 1);
    // Forgetting a confirmed key writes it as gone.
    assert!(b.changes().contains(&(k("a"), 0)));
}

#[test]
fn keys_forgotten_while_loading_are_deleted_from_the_store() {
    let mut b = KeyBook::new(2);
    b.load([(k("a"), 1), (k("b"), 1), (k("c"), 1)]);
    let changes = b.changes();
    assert_eq!(
        changes,
        vec![(k("a"), 0)],
        "the oldest loaded key is forgotten"
    );
    assert_eq!(b.counts(&k("c")), (0, 1, 0));
}

/// A key changed and not yet written keeps its place among the changes when the store's
/// claims are loaded over it, with the count the book holds after the load.
#[test]
fn a_load_over_an_unwritten_change_writes_the_count_held_after_it() {
    let mut b = KeyBook::new(10);
    b.pend(&k("a"));
    b.decide_due(&k("a"), 1, 1);
    b.load([(k("a"), 2), (k("b"), 1)]);
    assert_eq!(b.counts(&k("a")), (0, 3, 0));
    assert_eq!(b.changes(), vec![(k("a"), 3)]);
}

/// The book is written as changes until the store's log would hold more than 1.5 times
/// its live keys plus the slack, then whole: every key confirmed at least once and only
/// those, whatever was forgotten or taken back before.
#[test]
fn claims_are_written_as_changes_then_whole_once_dead_rows_pile_up() {
    let mut b = KeyBook::new(3);
    b.set_rewrite_slack(1);
    for s in ["a", "b", "c", "d"] {
        b.pend(&k(s));
        b.decide_due(&k(s), 1, 1);
    }
    // "a" is forgotten (capacity 3): a change to 0.
    let w = b.claims_to_write();
    assert!(!w.whole, "an empty log takes the changes: {w:?}");
    assert_eq!(w.claims.len(), 4);
    b.written(&w);
    assert!(!b.has_changes());
    b.unconfirm(&k("b"));
    let w = b.claims_to_write();
    // 4 rows + 1 change > 2 live (c, d) + 1 + 1 slack.
    assert!(w.whole, "{w:?}");
    let mut claims = w.claims.clone();
    claims.sort_by(|x, y| x.0.as_bytes().cmp(y.0.as_bytes()));
    assert_eq!(claims, vec![(k("c"), 1), (k("d"), 1)]);
    b.written(&w);
    b.pend(&k("e"));
    b.decide_due(&k("e"), 1, 1);
    let w = b.claims_to_write();
    assert!(
        !w.whole,
        "2 rows + 1 change is within 3 live + 1 + 1: {w:?}"
    );
    assert_eq!(w.claims, vec![(k("e"), 1)]);
}

#[test]
fn unpend_and_forget_release_claims() {
    let mut b = KeyBook::new(10);
    b.pend(&k("a"));
    b.unpend(&k("a"));
    assert_eq!(b.total_pending(), 0);
    b.restore_missing(&k("a"));
    assert_eq!(b.total_missing(), 1);
    b.forget_missing(&k("a"));
    assert_eq!(b.total_missing(), 0);
}

mod idle_tests {
    use super::*;

    /// A key whose records went missing and were then given up (or dropped beyond
    /// `max_missing_keys`) holds no row: the book forgets it at once. It used to queue it as
    /// idle, up to the idle capacity: in a total loss, a million such entries (~250 MB) that
    /// said nothing an absent entry does not.
    #[test]
    fn a_given_up_key_without_rows_is_forgotten_at_once() {
        let mut book = KeyBook::new(1_000_000);
        let k = Key::new(["a"]);
        book.pend(&k);
        let out = book.decide_due(&k, 1, 0);
        assert_eq!(out.confirmed, 0);
        assert_eq!(book.counts(&k), (0, 0, 1), "missing");
        book.forget_missing(&k);
        assert_eq!(book.len(), 0, "nothing confirmed, nothing kept");
        // A key with a confirmed row is still remembered while idle (a later record with
        // it must not take that row).
        let c = Key::new(["c"]);
        book.pend(&c);
        book.decide_due(&c, 1, 1);
        assert_eq!(book.len(), 1);
        assert_eq!(book.counts(&c).1, 1);
    }
}

mod claims;
mod props;

/// A book whose stored claims could not be read never rewrites the log whole (that would
/// delete them): it only appends, however many dead rows pile up.
#[test]
fn a_book_that_could_not_load_never_writes_whole() {
    let mut b = KeyBook::new(2);
    b.set_rewrite_slack(u64::MAX);
    b.set_log_rows(u64::MAX - 1);
    for s in ["a", "b", "c", "d"] {
        b.pend(&k(s));
        b.decide_due(&k(s), 1, 1);
    }
    let w = b.claims_to_write();
    assert!(!w.whole, "{w:?}");
    assert_eq!(w.claims.len(), 4);
}

proptest::proptest! {
    #![proptest_config(crate::test_seed::config())]
    /// Deciding many keys at once (in the book's table order) gives every key the outcome,
    /// and leaves the book with the counts and store changes, that one decision per key in
    /// the order given does, whatever the book held before, with a capacity small enough
    /// that keys are forgotten on the way.
    #[test]
    fn deciding_keys_at_once_is_deciding_them_one_by_one(
        before in proptest::collection::vec((0u8..40, 0u8..3), 0..120),
        asks in proptest::collection::vec((0u8..40, 1u64..4, 0u64..5), 0..60),
        recheck in proptest::bool::ANY,
        capacity in 1usize..50,
    ) {
        let mut one = KeyBook::new(capacity);
        // Earlier history: pending records, some decided (confirmed or missing).
        for &(key, what) in &before {
            let key = k(&key.to_string());
            one.pend(&key);
            match what {
                0 => {}
                1 => { one.decide_due(&key, 1, 1); }
                _ => { one.decide_due(&key, 1, 0); }
            }
        }
        // Distinct keys, each with as many pending records as it is asked about.
        let mut seen = std::collections::HashSet::new();
        let asks: Vec<(Key, u64, u64)> = asks
            .into_iter()
            .filter(|(key, _, _)| seen.insert(*key))
            .map(|(key, m, rows)| (k(&key.to_string()), m, rows))
            .collect();
        for (key, m, _) in &asks {
            for _ in 0..*m {
                one.pend(key);
            }
        }
        let mut all = one.clone();
        let refs: Vec<(&Key, u64, u64)> = asks.iter().map(|(key, m, r)| (key, *m, *r)).collect();
        if recheck {
            let want: Vec<RecheckOutcome> =
                refs.iter().map(|&(key, m, r)| one.recheck(key, m, r)).collect();
            proptest::prop_assert_eq!(all.recheck_all(&refs), want);
        } else {
            let want: Vec<DueOutcome> =
                refs.iter().map(|&(key, m, r)| one.decide_due(key, m, r)).collect();
            proptest::prop_assert_eq!(all.decide_due_all(&refs), want);
        }
        for key in (0u8..40).map(|key| k(&key.to_string())) {
            proptest::prop_assert_eq!(all.counts(&key), one.counts(&key));
        }
        let sorted = |b: &KeyBook| {
            let mut c = b.changes();
            c.sort();
            c
        };
        proptest::prop_assert_eq!(sorted(&all), sorted(&one));
        proptest::prop_assert_eq!(all.len(), one.len());
    }
}

#[test]
fn under_presence_one_row_confirms_every_record_of_its_key_and_is_never_a_duplicate() {
    let mut b = KeyBook::new(10);
    b.set_semantics(KeySemantics::Presence);
    for _ in 0..3 {
        b.pend(&k("a"));
    }
    // Two partitions decide; the upsert table holds one row for the three records.
    let o = b.decide_due(&k("a"), 2, 1);
    assert_eq!((o.confirmed, o.duplicates), (2, 0));
    let o = b.decide_due(&k("a"), 1, 1);
    assert_eq!((o.confirmed, o.duplicates), (1, 0));
    assert_eq!(b.counts(&k("a")), (0, 3, 0));
    // However many rows a re-check shows, none is a duplicate.
    assert_eq!(b.recheck(&k("a"), 0, 5).duplicates, 0);
}

#[test]
fn under_presence_no_row_is_every_record_missing_and_one_row_makes_them_late() {
    let mut b = KeyBook::new(10);
    b.set_semantics(KeySemantics::Presence);
    b.pend(&k("a"));
    b.pend(&k("a"));
    let o = b.decide_due(&k("a"), 2, 0);
    assert_eq!((o.confirmed, o.shared), (0, true));
    assert_eq!(b.counts(&k("a")), (0, 0, 2));
    let r = b.recheck(&k("a"), 2, 1);
    assert_eq!((r.late, r.duplicates), (2, 0));
    assert_eq!(b.counts(&k("a")), (0, 2, 0));
}

/// The book holds up to millions of entries (the key soak's memory bound): the stand-in
/// credit fits beside the duplicate count in the 40 bytes an entry had before it.
#[test]
fn an_entry_stays_40_bytes() {
    assert_eq!(std::mem::size_of::<Entry>(), 40);
}

/// A credit is a confirmation lent to an absent record: never more credits than
/// confirmations, none under presence, and a lent one comes back only by `credit`.
#[test]
fn stand_in_credits_are_confirmations_lent_once() {
    let k = Key::new(["k"]);
    let mut b = KeyBook::new(10);
    b.credit(&k);
    assert_eq!(b.stand_ins(&k), 0, "a key the book does not hold confirmed");
    b.pend(&k);
    b.pend(&k);
    b.pend(&k);
    assert_eq!(b.decide_due(&k, 1, 1).confirmed, 1);
    b.credit(&k);
    b.credit(&k);
    assert_eq!(b.stand_ins(&k), 1, "one confirmation, one credit");
    let o = b.decide_due(&k, 2, 1);
    assert_eq!(
        (o.confirmed, o.stand_ins),
        (0, 1),
        "one of two absent records"
    );
    assert_eq!(b.stand_ins(&k), 0);
    let mut p = KeyBook::new(10);
    p.set_semantics(KeySemantics::Presence);
    p.pend(&k);
    p.decide_due(&k, 1, 1);
    p.credit(&k);
    assert_eq!(
        p.stand_ins(&k),
        0,
        "presence: no record of a key with a row is absent"
    );
}

/// Pends wait for the book's next use, and no longer: every round's end (`take_counted`)
/// enters them, and a buffer an incident made large is given back, so the queue holds at
/// most the records ingested between two rounds (bounded by `max_pending`).
#[test]
fn pends_are_entered_by_the_rounds_end_and_a_large_buffer_is_given_back() {
    let mut b = KeyBook::new(10);
    let n = UNBOOKED_KEPT + 1;
    for i in 0..n {
        b.pend(&Key::new([i.to_string()]));
    }
    assert_eq!(b.entries.len(), 0, "pends wait for the book's next use");
    assert_eq!(b.total_pending(), n as u64, "but count at once");
    b.take_counted();
    assert_eq!(b.entries.len(), n, "the round's end entered every pend");
    assert!(b.unbooked.is_empty());
    assert_eq!(b.unbooked.capacity(), 0, "a buffer over the kept size goes");
    b.pend(&k("x"));
    b.take_counted();
    assert!(b.unbooked.capacity() > 0 && b.unbooked.capacity() <= UNBOOKED_KEPT);
    assert_eq!(b.counts(&k("x")), (1, 0, 0));
}
