//! key_columns rounds on a multi-thread runtime, where a partition's due keys are decided
//! while the sink is asked about the next partition's (`round::due_keys`): the same
//! verdicts as one question after another, and no count applied out of the order it was
//! taken in.

use super::harness::*;
use crate::kafka::Tagged;
use crate::metrics::Metrics;
use crate::record::Tag;
use crate::types::{Key, Offset};
use proptest::prelude::*;
use std::sync::Arc;

const PARTITIONS: i32 = 3;

fn key(k: &str) -> Key {
    Key::new([k])
}

/// Records of partition `p` from offset `first`, one per key.
fn keyed(p: i32, first: Offset, keys: &[&str]) -> Vec<Tagged> {
    keys.iter()
        .enumerate()
        .map(|(i, k)| Tagged {
            topic: Arc::from(TOPIC),
            partition: p,
            offset: first + i as Offset,
            timestamp_ms: Some(1),
            tag: Tag::Expected { key: Some(key(k)) },
        })
        .collect()
}

async fn assign(h: &mut Harness) {
    let tps: Vec<_> = (0..PARTITIONS).map(tp).collect();
    for t in &tps {
        h.kafka
            .watermarks
            .lock()
            .expect("lock")
            .insert(t.clone(), (0, 0));
    }
    h.audit.assign(tps).await;
}

fn count(h: &Harness, p: i32, f: impl Fn(&Metrics) -> &prometheus::IntCounterVec) -> u64 {
    f(&h.families)
        .with_label_values(&[AUDIT, TOPIC, &p.to_string()])
        .get()
}

/// (confirmed, lost, late, duplicate rows) per partition, and the stored gaps'
/// (partition, first, last, shared key).
type Outcome = (Vec<(u64, u64, u64, u64)>, Vec<(i32, Offset, Offset, bool)>);

fn outcome(h: &Harness) -> Outcome {
    let counters = (0..PARTITIONS)
        .map(|p| {
            (
                count(h, p, |m| &m.records_confirmed),
                count(h, p, |m| &m.records_lost),
                count(h, p, |m| &m.records_late),
                count(h, p, |m| &m.records_duplicated),
            )
        })
        .collect();
    let mut gaps: Vec<_> = h
        .stored_gaps()
        .iter()
        .map(|g| (g.partition, g.first_offset, g.last_offset, g.shared_key))
        .collect();
    gaps.sort_unstable();
    (counters, gaps)
}

/// Two rounds of `scenario` (per partition: keys read before round 1, keys read before
/// round 2; rows in the sink before each round) on `rt`.
fn run(rt: &tokio::runtime::Runtime, scenario: &Scenario) -> Outcome {
    rt.block_on(async {
        let mut h = keyed_harness("");
        assign(&mut h).await;
        let mut next: Vec<Offset> = vec![0; PARTITIONS as usize];
        for round in 0..2 {
            for (k, n) in &scenario.rows[round] {
                for _ in 0..*n {
                    h.sink.insert_key(&key(k));
                }
            }
            for p in 0..PARTITIONS {
                let keys = &scenario.reads[round][p as usize];
                let ks: Vec<&str> = keys.iter().map(String::as_str).collect();
                h.audit.ingest(keyed(p, next[p as usize], &ks));
                next[p as usize] += keys.len() as Offset;
            }
            h.clock.advance(GRACE_MS + 1);
            h.audit.round().await;
        }
        outcome(&h)
    })
}

/// A current-thread runtime (one question after another) and a multi-thread one (a
/// partition decided while the next is asked).
fn runtimes() -> (tokio::runtime::Runtime, tokio::runtime::Runtime) {
    let serial = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let overlapped = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    (serial, overlapped)
}

#[derive(Debug, Clone)]
struct Scenario {
    /// Per round, per partition: the keys of the records read.
    reads: Vec<Vec<Vec<String>>>,
    /// Per round: rows that land before it, (key, how many).
    rows: Vec<Vec<(String, u8)>>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    // A pool of four keys: most keys are shared within and across partitions.
    let k = || (0u8..4).prop_map(|i| format!("k{i}"));
    let reads = proptest::collection::vec(
        proptest::collection::vec(proptest::collection::vec(k(), 0..6), PARTITIONS as usize),
        2,
    );
    let rows = proptest::collection::vec(proptest::collection::vec((k(), 0u8..4), 0..6), 2);
    (reads, rows).prop_map(|(reads, rows)| Scenario { reads, rows })
}

proptest! {
    #![proptest_config(crate::test_seed::with_cases(48))]

    /// With the sink still during a round, deciding one partition while the next is asked
    /// gives the verdicts of one question after another, partition by partition.
    #[test]
    fn overlapped_rounds_decide_as_one_question_after_another(s in scenario()) {
        let (serial, overlapped) = runtimes();
        prop_assert_eq!(run(&overlapped, &s), run(&serial, &s));
    }
}

/// Rows of a key land after the next partition's keys were counted and before this
/// partition's re-check counts them: that older count must not be applied after the
/// re-check's (it would take the row the re-check gave to a late arrival and declare the
/// next partition's record with the key missing, a false loss).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_taken_before_a_recheck_is_not_applied_after_it() {
    let mut h = keyed_harness("");
    assign(&mut h).await;
    // Round 1: partition 0's record with K has no row: missing.
    h.audit.ingest(keyed(0, 0, &["K"]));
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(count(&h, 0, |m| &m.records_lost), 1);
    // Round 2: partition 0 has a new record (X, present), partition 1 one with K. The
    // round asks: partition 0's due keys (X), partition 1's (K, while X is decided), then
    // partition 0's re-check of K. Two rows of K land just before that re-check.
    h.audit.ingest(keyed(0, 1, &["X"]));
    h.audit.ingest(keyed(1, 0, &["K"]));
    h.sink.insert_key(&key("X"));
    let asked = h.sink.queries();
    h.sink.land_before_query(asked + 3, &key("K"), 2);
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    // Two rows, two records with K: partition 0's arrived late, partition 1's is there.
    assert_eq!(count(&h, 0, |m| &m.records_late), 1);
    assert_eq!(
        count(&h, 1, |m| &m.records_lost),
        0,
        "partition 1's record decided on a count older than the re-check's"
    );
    assert_eq!(count(&h, 1, |m| &m.records_confirmed), 1);
    // The questions were asked in the order the hook assumes: the re-check was the third
    // of the round, and partition 1's key was counted once more after it.
    assert_eq!(h.sink.queries(), asked + 4);
}

/// Sink queries of a round after one where every partition lost a record, each partition
/// then reading `present` keys of its own (in the sink) on `rt`.
fn incident_queries(rt: &tokio::runtime::Runtime) -> u64 {
    rt.block_on(async {
        let mut h = keyed_harness("");
        assign(&mut h).await;
        for p in 0..PARTITIONS {
            h.audit.ingest(keyed(p, 0, &[&format!("lost{p}")]));
        }
        h.clock.advance(GRACE_MS + 1);
        h.audit.round().await;
        for p in 0..PARTITIONS {
            let ks: Vec<String> = (0..3).map(|i| format!("ok{p}_{i}")).collect();
            for k in &ks {
                h.sink.insert_key(&key(k));
            }
            let ks: Vec<&str> = ks.iter().map(String::as_str).collect();
            h.audit.ingest(keyed(p, 1, &ks));
        }
        let before = h.sink.queries();
        h.clock.advance(GRACE_MS + 1);
        h.audit.round().await;
        assert_eq!(count(&h, 0, |m| &m.records_confirmed), 3);
        h.sink.queries() - before
    })
}

/// In an incident every partition re-checks its missing records each round. The next
/// partition's answer is counted again only for the keys a re-check counted in between
/// (none here): an overlapped round asks the sink no more than one after another does.
#[test]
fn an_incident_does_not_count_the_next_partitions_keys_twice() {
    let (serial, overlapped) = runtimes();
    assert_eq!(incident_queries(&overlapped), incident_queries(&serial));
}
