//! Property tests of the key book against a model of the store it writes: whatever the
//! sequence of operations, writes (changes or whole), failed writes and restarts, the
//! `live` counter counts the entries holding a claim, and the store always holds exactly
//! the book's claims once a write succeeds (no claim omitted, none resurrected).

use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

#[derive(Debug, Clone)]
enum Op {
    Pend(u8),
    Unpend(u8),
    Due(u8, u8, u8),
    Recheck(u8, u8, u8),
    Restore(u8),
    Forget(u8),
    Claim(u8, u8),
    Unconfirm(u8),
    Write,
    /// A write that failed: computed, never applied.
    FailWrite,
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u8..12;
    prop_oneof![
        3 => k.clone().prop_map(Op::Pend),
        1 => k.clone().prop_map(Op::Unpend),
        3 => (k.clone(), 0u8..3, 0u8..4).prop_map(|(a, b, c)| Op::Due(a, b, c)),
        2 => (k.clone(), 0u8..3, 0u8..4).prop_map(|(a, b, c)| Op::Recheck(a, b, c)),
        1 => k.clone().prop_map(Op::Restore),
        1 => k.clone().prop_map(Op::Forget),
        1 => (k.clone(), 0u8..4).prop_map(|(a, b)| Op::Claim(a, b)),
        1 => k.clone().prop_map(Op::Unconfirm),
        2 => Just(Op::Write),
        1 => Just(Op::FailWrite),
        1 => Just(Op::Restart),
    ]
}

/// The store's key log: rows in order, a key's last row wins.
#[derive(Default)]
struct Log {
    rows: Vec<(Key, u64)>,
}

impl Log {
    fn apply(&mut self, w: &ClaimsWrite) {
        if w.whole {
            self.rows.clear();
            self.rows
                .extend(w.claims.iter().filter(|(_, n)| *n > 0).cloned());
        } else {
            self.rows.extend(w.claims.iter().cloned());
        }
    }

    /// What `load_key_log` reads: each key's last count above 0, in last-written order.
    fn load(&self) -> Vec<(Key, u64)> {
        let mut last: HashMap<Key, (usize, u64)> = HashMap::new();
        for (i, (k, n)) in self.rows.iter().enumerate() {
            last.insert(k.clone(), (i, *n));
        }
        let mut v: Vec<(usize, Key, u64)> = last
            .into_iter()
            .filter(|(_, (_, n))| *n > 0)
            .map(|(k, (i, n))| (i, k, n))
            .collect();
        v.sort();
        v.into_iter().map(|(_, k, n)| (k, n)).collect()
    }
}

fn check(b: &KeyBook, log: &Log, step: usize) -> Result<(), TestCaseError> {
    let live = b.entries.values().filter(|e| e.confirmed > 0).count() as u64;
    prop_assert_eq!(b.live, live, "step {}: live counter", step);
    // Every key the store and the book disagree on is dirty (the next write fixes it).
    let stored: HashMap<Key, u64> = log.load().into_iter().collect();
    let mut all: Vec<Key> = stored.keys().cloned().collect();
    all.extend(b.entries.iter().map(|(k, _)| k.clone()));
    for k in all {
        let s = stored.get(&k).copied().unwrap_or(0);
        let m = b.entries.get(&k).map_or(0, |e| e.confirmed);
        prop_assert!(
            s == m || b.dirty_count(&k).is_some(),
            "step {}: {:?} stored {} held {} and not dirty",
            step,
            k,
            s,
            m
        );
        // A dirty key carries the count the book holds now: a write takes it from there.
        if let Some(d) = b.dirty_count(&k) {
            prop_assert_eq!(d, m, "step {}: {:?} dirty with a stale count", step, k);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(crate::test_seed::with_cases(2_000))]

    #[test]
    fn the_store_holds_the_books_claims_and_live_counts_them(
        ops in proptest::collection::vec(op(), 1..120),
        capacity in 1usize..6,
        slack in 0u64..4,
    ) {
        let key = |i: u8| Key::new([format!("k{i}")]);
        let mut b = KeyBook::new(capacity);
        b.set_rewrite_slack(slack);
        let mut log = Log::default();
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Pend(k) => b.pend(&key(k)),
                Op::Unpend(k) => b.unpend(&key(k)),
                Op::Due(k, due, rows) => {
                    let due = u64::from(due).min(b.counts(&key(k)).0);
                    b.decide_due(&key(k), due, rows.into());
                }
                Op::Recheck(k, missing, rows) => {
                    let missing = u64::from(missing).min(b.counts(&key(k)).2);
                    b.recheck(&key(k), missing, rows.into());
                }
                Op::Restore(k) => b.restore_missing(&key(k)),
                Op::Forget(k) => b.forget_missing(&key(k)),
                Op::Claim(k, n) => b.claim_at_least(&key(k), n.into()),
                Op::Unconfirm(k) => b.unconfirm(&key(k)),
                Op::Write => {
                    let w = b.claims_to_write();
                    log.apply(&w);
                    b.written(&w);
                    prop_assert_eq!(b.log_rows, log.rows.len() as u64, "step {}", step);
                    let mut want: Vec<(Key, u64)> = b
                        .entries
                        .iter()
                        .filter(|(_, e)| e.confirmed > 0)
                        .map(|(k, e)| (k.clone(), e.confirmed))
                        .collect();
                    let mut got = log.load();
                    want.sort();
                    got.sort();
                    prop_assert_eq!(got, want, "step {}: the store after a write", step);
                }
                Op::FailWrite => {
                    let _ = b.claims_to_write();
                }
                Op::Restart => {
                    b = KeyBook::new(capacity);
                    b.set_rewrite_slack(slack);
                    b.load(log.load());
                    b.set_log_rows(log.rows.len() as u64);
                }
            }
            check(&b, &log, step)?;
        }
    }
}
