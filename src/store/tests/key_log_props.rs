//! The key log against a model: arbitrary sequences of change and whole writes for two
//! audits, within a chunk and across chunks, after v8 `key_log` rows (a migrated file) or
//! none, and reopened files, read back as each key's last entry (order included), the
//! log's size and `key_confirmed`.

use super::*;
use proptest::prelude::*;
use rusqlite::params;
use std::collections::HashMap;

#[derive(Debug, Clone)]
enum Op {
    Changes(bool, Vec<(u8, u8)>),
    Whole(bool, Vec<(u8, u8)>),
    Reopen,
}

/// Few claims, a few hundred, or past one chunk (4,096 claims).
fn claims() -> impl Strategy<Value = Vec<(u8, u8)>> {
    prop_oneof![
        4 => proptest::collection::vec((0u8..200, 0u8..3), 0..6),
        4 => proptest::collection::vec((0u8..200, 0u8..3), 60..200),
        1 => proptest::collection::vec((0u8..200, 0u8..3), 4090..4200),
    ]
}

/// What a v8 file held of an audit's log: often nothing, as on a fresh file.
fn legacy() -> impl Strategy<Value = Vec<(u8, u8)>> {
    prop_oneof![Just(Vec::new()), claims()]
}

/// Writes `rows` as a v8 binary did, one `key_log` row per claim (seqs with holes: only
/// their order counts).
fn insert_v8_rows(store: &Store, audit: &str, rows: &[(Vec<u8>, u64)]) {
    let conn = store.lock();
    let mut stmt = conn
        .prepare("INSERT INTO key_log (audit, seq, key, confirmed) VALUES (?1, ?2, ?3, ?4)")
        .unwrap();
    for (i, (k, n)) in rows.iter().enumerate() {
        stmt.execute(params![audit, 3 * i as i64 + 1, k, *n as i64])
            .unwrap();
    }
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<bool>(), claims()).prop_map(|(a, c)| Op::Changes(a, c)),
        1 => (any::<bool>(), claims()).prop_map(|(a, c)| Op::Whole(a, c)),
        1 => Just(Op::Reopen),
    ]
}

/// Packed keys, some sharing prefixes, one with the empty value, one of no value.
fn key(i: u8) -> Vec<u8> {
    match i {
        0 => vec![0xff],
        1 => Vec::new(),
        _ => format!("{}\u{ff}{}\u{ff}", i % 7, i).into_bytes(),
    }
}

fn last_rows(rows: &[(Vec<u8>, u64)]) -> Vec<(Vec<u8>, u64)> {
    let mut last: HashMap<&[u8], (usize, u64)> = HashMap::new();
    for (i, (k, n)) in rows.iter().enumerate() {
        last.insert(k, (i, *n));
    }
    let mut v: Vec<(usize, Vec<u8>, u64)> = last
        .into_iter()
        .filter(|(_, (_, n))| *n > 0)
        .map(|(k, (i, n))| (i, k.to_vec(), n))
        .collect();
    v.sort();
    v.into_iter().map(|(_, k, n)| (k, n)).collect()
}

proptest! {
    #![proptest_config(crate::test_seed::with_cases(64))]

    #[test]
    fn the_key_log_reads_back_as_its_model(
        v8 in [legacy(), legacy()],
        ops in proptest::collection::vec(op(), 1..25),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(dir.path()).unwrap();
        let mut model: [Vec<(Vec<u8>, u64)>; 2] = [Vec::new(), Vec::new()];
        let name = |a: bool| if a { "b" } else { "a" };
        for (a, rows) in [false, true].into_iter().zip(v8) {
            let rows: Vec<(Vec<u8>, u64)> =
                rows.into_iter().map(|(k, n)| (key(k), u64::from(n))).collect();
            insert_v8_rows(&store, name(a), &rows);
            model[usize::from(a)] = rows;
        }
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Changes(a, c) => {
                    let c: Vec<(Vec<u8>, u64)> =
                        c.into_iter().map(|(k, n)| (key(k), u64::from(n))).collect();
                    store
                        .commit_round_with_keys(name(a), &[], &[], KeyClaims::Changes(&c))
                        .unwrap();
                    model[usize::from(a)].extend(c);
                }
                Op::Whole(a, c) => {
                    let c: Vec<(Vec<u8>, u64)> =
                        c.into_iter().map(|(k, n)| (key(k), u64::from(n))).collect();
                    store
                        .commit_round_with_keys(name(a), &[], &[], KeyClaims::Whole(&c))
                        .unwrap();
                    let m = &mut model[usize::from(a)];
                    m.clear();
                    m.extend(c.into_iter().filter(|(_, n)| *n > 0));
                }
                Op::Reopen => {
                    drop(store);
                    store = Store::open(dir.path()).unwrap();
                }
            }
            for a in [false, true] {
                let m = &model[usize::from(a)];
                let log = store.load_key_log(name(a)).unwrap();
                prop_assert_eq!(log.rows, m.len() as u64, "step {} audit {}", step, name(a));
                let want = last_rows(m);
                prop_assert_eq!(&log.claims, &want, "step {} audit {}", step, name(a));
                let all: Vec<Vec<u8>> = (0..200).map(key).collect();
                let got = store.key_confirmed(name(a), &all).unwrap();
                let want: Vec<u64> = all
                    .iter()
                    .map(|k| want.iter().find(|(x, _)| x == k).map_or(0, |(_, n)| *n))
                    .collect();
                prop_assert_eq!(got, want, "step {} audit {}: key_confirmed", step, name(a));
            }
        }
    }
}
