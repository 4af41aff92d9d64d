//! `check` and `run` agree on the same data: the records of three partitions and the rows of
//! the sink, decided once by the daemon's round and once as closed ranges
//! ([`crate::closed_range`], what `check` and `replay` decide with), give the same counts
//! and the same gaps (SPEC guarantee 9).

use super::harness::*;
use crate::closed_range::{ClosedRange, DueRule};
use crate::config::MatchStrategy;
use crate::kafka::Tagged;
use crate::record::{FilterReason, Tag};
use crate::types::Key;
use crate::types::Offset;
use crate::verify::Checker;
use proptest::prelude::*;
use std::sync::Arc;

const PARTITIONS: i32 = 3;

/// One record: its key (key_columns) or nothing (offset_columns), or filtered.
#[derive(Debug, Clone)]
enum Rec {
    Expected(u8),
    Filtered,
}

#[derive(Debug, Clone)]
struct Scenario {
    keyed: bool,
    /// Per partition, its records from offset 0.
    records: Vec<Vec<Rec>>,
    /// key_columns: rows per key of the pool; offset_columns: per partition, per record,
    /// the rows written for it (taken from `rows_of`).
    rows: Vec<u8>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let rec = prop_oneof![8 => (0u8..4).prop_map(Rec::Expected), 1 => Just(Rec::Filtered)];
    (
        any::<bool>(),
        proptest::collection::vec(proptest::collection::vec(rec, 0..8), PARTITIONS as usize),
        proptest::collection::vec(prop_oneof![2 => Just(0u8), 5 => Just(1u8), 1 => 2u8..4], 32),
    )
        .prop_map(|(keyed, records, rows)| Scenario {
            keyed,
            records,
            rows,
        })
}

fn key(k: u8) -> Key {
    Key::new([format!("k{k}")])
}

fn tagged(s: &Scenario, p: i32) -> Vec<Tagged> {
    s.records[p as usize]
        .iter()
        .enumerate()
        .map(|(o, r)| Tagged {
            topic: Arc::from(TOPIC),
            partition: p,
            offset: o as Offset,
            timestamp_ms: Some(1),
            tag: match r {
                Rec::Expected(k) => Tag::Expected {
                    key: s.keyed.then(|| key(*k)),
                },
                Rec::Filtered => Tag::Filtered(FilterReason::Filter),
            },
        })
        .collect()
}

/// The sink's rows: per key of the pool (keyed), or per record of each partition.
fn fill(s: &Scenario, h: &Harness) {
    if s.keyed {
        for k in 0..4u8 {
            for _ in 0..s.rows[k as usize] {
                h.sink.insert_key(&key(k));
            }
        }
        return;
    }
    for p in 0..PARTITIONS {
        for o in 0..s.records[p as usize].len() {
            let n = s.rows[(p as usize * 8 + o) % s.rows.len()];
            for _ in 0..n {
                h.sink.insert_offset(TOPIC, p, o as Offset);
            }
        }
    }
}

/// Per partition (confirmed, lost, duplicate rows), and the gaps' (partition, first,
/// last, shared key).
type Outcome = (Vec<(u64, u64, u64)>, Vec<(i32, Offset, Offset, bool)>);

fn by_run(rt: &tokio::runtime::Runtime, s: &Scenario) -> Outcome {
    rt.block_on(async {
        let mut h = if s.keyed {
            keyed_harness("")
        } else {
            harness("")
        };
        let tps: Vec<_> = (0..PARTITIONS).map(tp).collect();
        for t in &tps {
            h.kafka
                .watermarks
                .lock()
                .expect("lock")
                .insert(t.clone(), (0, 0));
        }
        h.audit.assign(tps).await;
        fill(s, &h);
        for p in 0..PARTITIONS {
            h.audit.ingest(tagged(s, p));
        }
        h.clock.advance(GRACE_MS + 1);
        h.audit.round().await;
        let counters = (0..PARTITIONS)
            .map(|p| {
                (
                    h.counter_of(p, |m| &m.records_confirmed),
                    h.counter_of(p, |m| &m.records_lost),
                    h.counter_of(p, |m| &m.records_duplicated),
                )
            })
            .collect();
        (counters, h.gap_spans())
    })
}

/// As `check` decides: every partition read, its keys adopted by the audit's key book,
/// then each decided in turn under the due rule, grace after the records were appended.
fn by_check(rt: &tokio::runtime::Runtime, s: &Scenario) -> Outcome {
    rt.block_on(async {
        let h = if s.keyed {
            keyed_harness("")
        } else {
            harness("")
        };
        fill(s, &h);
        let strategy = if s.keyed {
            MatchStrategy::KeyColumns
        } else {
            MatchStrategy::OffsetColumns
        };
        let mut checker = Checker::new(strategy, 100, 1_000);
        let mut ranges = Vec::new();
        for p in 0..PARTITIONS {
            let mut r = ClosedRange::new(tp(p), 0, s.keyed);
            for t in tagged(s, p) {
                r.ingest(t.offset, t.timestamp_ms, t.tag, 0)
                    .expect("resolved");
            }
            r.due_input(true, None);
            if let Some(book) = checker.book_mut() {
                book.adopt(r.ledger());
            }
            ranges.push(r);
        }
        let rule = DueRule::At { grace_ms: GRACE_MS };
        let mut counters = Vec::new();
        let mut gaps = Vec::new();
        for r in &mut ranges {
            let d = r
                .decide(&mut checker, h.sink.as_ref(), rule, GRACE_MS + 1, None)
                .await
                .expect("decided");
            counters.push((d.confirmed, d.lost, d.duplicates));
            gaps.extend(r.take_gaps(AUDIT, chrono::Utc::now()).iter().map(span));
        }
        gaps.sort_unstable();
        (counters, gaps)
    })
}

proptest! {
    #![proptest_config(crate::test_seed::with_cases(64))]

    /// The same records and rows, decided by the daemon's round and by closed ranges.
    #[test]
    fn check_and_run_agree_on_the_same_data(s in scenario()) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        prop_assert_eq!(by_check(&rt, &s), by_run(&rt, &s));
    }
}
