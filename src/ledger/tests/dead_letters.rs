//! Dead-lettered records (issue 37): the verdict between present and missing, decided with
//! the dead-letter topic's coordinates, at decision time or after.

use super::*;
use crate::gap::GapState;
use std::collections::BTreeMap;

/// The dead-letter oracle: the offsets of `run` in `named`.
fn named_in(named: &BTreeSet<Offset>, run: OffsetRun) -> Vec<OffsetRun> {
    runs::normalize(
        named
            .range(run.first..=run.last)
            .map(|&o| r(o, o))
            .collect(),
    )
}

/// Decides offsets `0..n` at once against a sink holding `sink`, with `dlq` dead-lettered.
fn decide(
    n: Offset,
    sink: &BTreeSet<Offset>,
    dlq: &BTreeSet<Offset>,
) -> (PartitionLedger, Applied, Vec<GapRecord>) {
    let mut l = PartitionLedger::new(0, false);
    for o in 0..n {
        l.ingest(o, None, exp(), 0);
    }
    l.pipeline.observe(0, Some(n));
    let segs = l.due(10_000, GRACE, 1_000);
    let a = l.apply_with_dead_letters(&oracle(&segs, sink), 10_000, &|run| named_in(dlq, run));
    let gaps = l.take_dirty_gaps();
    (l, a, gaps)
}

#[test]
fn dead_lettered_records_are_neither_lost_nor_missing_and_have_their_own_gaps() {
    // 20 records: 3, 4 and 10 dead-lettered, 7 and 15 dropped silently.
    let dlq: BTreeSet<Offset> = [3, 4, 10].into();
    let sink: BTreeSet<Offset> = (0..20).filter(|o| ![3, 4, 7, 10, 15].contains(o)).collect();
    let (mut l, a, gaps) = decide(20, &sink, &dlq);
    assert_eq!((a.confirmed, a.lost, a.dead_lettered), (15, 2, 3));
    assert_eq!(l.missing(), 2);
    assert_eq!(l.missing_runs(), vec![r(7, 7), r(15, 15)]);
    let states: Vec<(Offset, Offset, GapState, u64)> = gaps
        .iter()
        .map(|g| {
            let gap = g.to_gap("a", &crate::types::TopicPartition::new("t", 0));
            (g.first, g.last, gap.state, gap.missing_records)
        })
        .collect();
    assert_eq!(
        states,
        vec![
            (3, 4, GapState::DeadLettered, 2),
            (7, 7, GapState::Open, 1),
            (10, 10, GapState::DeadLettered, 1),
            (15, 15, GapState::Open, 1),
        ]
    );
    assert_eq!(l.gauges().open, 2, "dead_lettered gaps are not open");
    assert_eq!(
        l.gaps_in_memory(),
        2,
        "decided dead_lettered gaps leave memory"
    );
}

#[test]
fn present_wins_over_the_dead_letter_topic() {
    let dlq: BTreeSet<Offset> = [2, 5].into();
    let sink: BTreeSet<Offset> = (0..8).filter(|o| *o != 5).collect();
    let (_, a, gaps) = decide(8, &sink, &dlq);
    assert_eq!((a.confirmed, a.lost, a.dead_lettered), (7, 0, 1));
    assert_eq!(gaps.len(), 1);
    assert_eq!((gaps[0].first, gaps[0].dead_lettered), (5, 1));
}

#[test]
fn a_dead_letter_read_after_the_verdict_turns_the_missing_record_dead_lettered() {
    let sink: BTreeSet<Offset> = (0..10).filter(|o| ![4, 5, 6].contains(o)).collect();
    let (mut l, a, gaps) = decide(10, &sink, &BTreeSet::new());
    assert_eq!((a.lost, gaps.len()), (3, 1));
    // 4 and 6 appear in the dead-letter topic later; 5 stays missing.
    let moved = l.dead_letter_missing(&[r(4, 4), r(6, 6), r(42, 42)]);
    assert_eq!(moved.dead_lettered, 2);
    assert_eq!(l.missing(), 1);
    assert_eq!(l.missing_runs(), vec![r(5, 5)]);
    let g = &l.take_dirty_gaps()[0];
    let gap = g.to_gap("a", &crate::types::TopicPartition::new("t", 0));
    assert_eq!((gap.state, gap.missing_records), (GapState::Open, 1));
    // Then 5 too: the whole gap is dead-lettered.
    assert_eq!(l.dead_letter_missing(&[r(5, 5)]).dead_lettered, 1);
    let g = &l.take_dirty_gaps()[0];
    let gap = g.to_gap("a", &crate::types::TopicPartition::new("t", 0));
    assert_eq!(
        (gap.state, gap.missing_records),
        (GapState::DeadLettered, 3)
    );
    assert_eq!(l.gauges().open, 0);
    assert_eq!(l.dead_letter_missing(&[r(5, 5)]).dead_lettered, 0, "once");
}

#[test]
fn the_floor_is_the_first_undecided_record() {
    let sink: BTreeSet<Offset> = (0..10).filter(|o| *o != 3).collect();
    let (mut l, _, _) = decide(10, &sink, &BTreeSet::new());
    l.ingest(10, None, exp(), 0);
    assert_eq!(l.dead_letter_floor(), 10);
    // A coordinate below it naming a missing record is still taken (before forgetting).
    assert_eq!(l.dead_letter_missing(&[r(3, 3)]).dead_lettered, 1);
}

/// key_columns, a key shared by 0 and 1, one row for it: the sink's count calls 0 present
/// and 1 absent (offset order). The pipeline dead-lettered 0: its key's absent record is the
/// dead-lettered one, never a loss of the other.
#[test]
fn a_dead_letter_on_a_shared_key_is_never_turned_into_the_other_records_loss() {
    let mut l = PartitionLedger::new(0, true);
    let k = Key::new(["shared"]);
    l.ingest(
        0,
        None,
        Observed::Expected {
            key: Some(k.clone()),
        },
        0,
    );
    l.ingest(
        1,
        None,
        Observed::Expected {
            key: Some(k.clone()),
        },
        0,
    );
    l.ingest(
        2,
        None,
        Observed::Expected {
            key: Some(Key::new(["own"])),
        },
        0,
    );
    l.pipeline.observe(0, Some(3));
    let segs = l.due(10_000, GRACE, 100);
    let dlq: BTreeSet<Offset> = [0].into();
    let a = l.apply_with_dead_letters(&oracle(&segs, &[0, 2].into()), 10_000, &|run| {
        named_in(&dlq, run)
    });
    assert_eq!((a.confirmed, a.lost, a.dead_lettered), (2, 0, 1));
    assert_eq!(l.missing(), 0);
    assert_eq!(
        l.take_released_keys(),
        vec![k],
        "the book stops counting it missing"
    );
}

/// Review of issue 37 (key_columns swap): a key shared by 0 and 1, one row for it, a dead
/// letter naming 0. The swap reports 1 dead-lettered although the topic named 0: which of
/// them the sink lacks cannot be decided (the row carries no coordinates). Either 0 was
/// rejected and 1 written (right count, wrong offset), or the pipeline wrote 0 after all
/// (a dead letter for a record the sink holds) and dropped 1 (a loss reported as
/// dead-lettered). So the stand-in's gap says `shared_key`, as a shared key's missing
/// record does: its position is a convention, not the dead letter's coordinate. A record
/// the topic names itself (absent, named) stays exact.
#[test]
fn a_shared_key_stand_in_is_dead_lettered_by_convention_and_says_so() {
    let mut l = PartitionLedger::new(0, true);
    let k = Key::new(["shared"]);
    for (o, key) in [(0, k.clone()), (1, k.clone()), (2, Key::new(["own"]))] {
        l.ingest(o, None, Observed::Expected { key: Some(key) }, 0);
    }
    l.pipeline.observe(0, Some(3));
    let segs = l.due(10_000, GRACE, 100);
    // The sink holds K once (offset order calls 0 present); 2 is absent and named itself.
    let dlq: BTreeSet<Offset> = [0, 2].into();
    let a = l.apply_with_dead_letters(&oracle(&segs, &[0].into()), 10_000, &|run| {
        named_in(&dlq, run)
    });
    assert_eq!((a.confirmed, a.lost, a.dead_lettered), (1, 0, 2));
    let gaps: Vec<(Offset, Offset, bool)> = l
        .take_dirty_gaps()
        .iter()
        .map(|g| (g.first, g.last, g.shared_key))
        .collect();
    assert_eq!(
        gaps,
        vec![(1, 2, true)],
        "1 stands in for the named 0: its gap is not exact"
    );

    // Only records the topic names themselves: exact.
    let (_, _, gaps) = decide(4, &[0, 1].into(), &[2, 3].into());
    assert_eq!(
        gaps.iter()
            .map(|g| (g.first, g.shared_key))
            .collect::<Vec<_>>(),
        vec![(2, false)]
    );
}

/// Review of issue 37: the dead_lettered gap the next dead-lettered record extends is
/// persisted like the tail gap. Before, a restart between 8-9 and 10 (all dead-lettered,
/// nothing decided between) split one gap into two at the settled offset.
#[test]
fn a_restart_goes_on_extending_the_dead_lettered_gap() {
    let sink: BTreeSet<Offset> = (0..8).collect();
    let (l, _, gaps) = decide(10, &sink, &[8, 9, 10].into());
    assert_eq!(
        gaps.iter().map(|g| (g.first, g.last)).collect::<Vec<_>>(),
        vec![(8, 9)]
    );
    // As the store holds it (JSON), then restored at the settled offset.
    let stored = serde_json::to_value(l.snapshot()).expect("json");
    let (snap, bad) = Snapshot::from_stored(&stored);
    assert!(bad.is_empty(), "{bad:?}");
    let mut l = PartitionLedger::restore(l.settled(), false, snap);
    l.ingest(10, None, exp(), 0);
    l.ingest(11, None, exp(), 0);
    l.pipeline.observe(0, Some(12));
    let segs = l.due(10_000, GRACE, 1_000);
    let dlq: BTreeSet<Offset> = [10].into();
    let a = l.apply_with_dead_letters(&oracle(&segs, &[11].into()), 10_000, &|run| {
        named_in(&dlq, run)
    });
    assert_eq!(a.dead_lettered, 1);
    let gaps: Vec<(Offset, Offset, u64)> = l
        .take_dirty_gaps()
        .iter()
        .map(|g| (g.first, g.last, g.dead_lettered))
        .collect();
    assert_eq!(gaps, vec![(8, 10, 3)], "one gap, as without the restart");

    // Restored beyond the settled offset (another owner decided between): a new gap.
    let (l, _, _) = decide(10, &sink, &[8, 9].into());
    let snap = l.snapshot();
    let l2 = PartitionLedger::restore_at(12, l.settled(), false, snap.clone());
    assert_eq!(l2.dead_tail(), None);
    // Nor across a divergence of the log (a new epoch's records never join an old gap).
    let (l3, _) = PartitionLedger::restore_diverged(l.settled(), false, snap);
    assert_eq!(l3.dead_tail(), None);
}

/// key_columns: a loss of 5,000 records declared in one round leaves two neighbouring
/// missing runs (a keyed run stops merging at 4,096 keys). Dead letters for all of them,
/// read after the verdict, move every one: a hit spanning both runs is taken run by run.
#[test]
fn late_dead_letters_across_neighbouring_keyed_runs_all_move() {
    const N: i64 = 5_000;
    let mut l = PartitionLedger::new(0, true);
    for o in 0..N {
        l.ingest(
            o,
            None,
            Observed::Expected {
                key: Some(Key::new([format!("k{o}")])),
            },
            0,
        );
    }
    l.pipeline.observe(0, Some(N));
    for _ in 0..10 {
        let segs = l.due(10_000, GRACE, 1_000);
        if segs.is_empty() {
            break;
        }
        l.apply(&oracle(&segs, &BTreeSet::new()), 10_000);
    }
    assert_eq!(l.missing(), N as u64);
    assert!(
        l.missing_runs().len() >= 2,
        "neighbouring runs: {:?}",
        l.missing_runs()
    );
    let moved = l.dead_letter_missing(&[r(0, N - 1)]);
    assert_eq!(moved.dead_lettered, N as u64);
    assert_eq!(l.missing(), 0);
    assert_eq!(l.gauges().open, 0);
}

/// Review of issue 37: a dead-lettered record is absent from the sink, so not confirmed
/// (SPEC "Completeness"): its gap blocks completeness like a missing record's, until
/// acknowledged. While it is the dead-letter tail it is in memory; once it is ended it
/// leaves memory retired, and the retired aggregate keeps blocking (it used to be
/// forgotten: completeness ran past the dead-lettered record's time).
#[test]
fn a_dead_lettered_gap_blocks_completeness_in_memory_and_retired_until_acknowledged() {
    // 9 is dead-lettered and the last record decided: the dead-letter tail, in memory.
    let sink: BTreeSet<Offset> = (0..9).collect();
    let (mut l, a, _) = decide(10, &sink, &[9].into());
    assert_eq!(a.dead_lettered, 1);
    let c = l.completeness();
    assert_eq!(c.blocking_gaps, 1, "{c:?}");
    assert_eq!(
        c.gaps
            .iter()
            .map(|g| (g.first, g.missing, g.state))
            .collect::<Vec<_>>(),
        vec![(9, 1, GapState::DeadLettered)]
    );
    assert!(l.acknowledge(9));
    assert_eq!(
        l.completeness().blocking_gaps,
        0,
        "acknowledged: no longer blocks"
    );

    // 3 and 4 dead-lettered, the rest confirmed after them: the gap is ended and retires.
    let sink: BTreeSet<Offset> = (0..10).filter(|o| ![3, 4].contains(o)).collect();
    let (mut l, _, gaps) = decide(10, &sink, &[3, 4].into());
    assert_eq!(gaps.len(), 1);
    assert_eq!(l.gaps_in_memory(), 0, "out of memory");
    assert_eq!((l.retired().gaps, l.retired().dead_lettered), (1, 1));
    assert_eq!(l.retired().missing_known, 0, "dead-lettered is not missing");
    assert_eq!((l.missing(), l.gauges().open, l.open_gaps()), (0, 0, 0));
    let c = l.completeness();
    assert_eq!(c.blocking_gaps, 1, "{c:?}");
    assert_eq!(
        c.gaps
            .iter()
            .map(|g| (g.first, g.missing, g.state))
            .collect::<Vec<_>>(),
        vec![(3, 2, GapState::DeadLettered)]
    );
    // The store counts the retired row as the ledger did.
    assert_eq!(RetiredGaps::count(l.retired_unstored()), *l.retired());
}

/// A late dead letter that empties an open gap (it turns dead_lettered) keeps it blocking.
#[test]
fn a_gap_turned_dead_lettered_late_keeps_blocking() {
    let sink: BTreeSet<Offset> = (0..10).filter(|o| *o != 4).collect();
    let (mut l, _, _) = decide(10, &sink, &BTreeSet::new());
    assert_eq!(l.completeness().blocking_gaps, 1);
    assert_eq!(l.dead_letter_missing(&[r(4, 4)]).dead_lettered, 1);
    l.take_dirty_gaps();
    let c = l.completeness();
    assert_eq!(c.blocking_gaps, 1, "{c:?}");
    assert_eq!(c.gaps[0].state, GapState::DeadLettered);
}

proptest! {
    /// Against the model: every decided offset is exactly one of confirmed (in the sink),
    /// dead-lettered (absent, named) or lost (absent, not named), whatever the order of
    /// the segments; and gaps never mix missing and dead-lettered records at decision time.
    #[test]
    fn each_record_gets_exactly_one_verdict(
        n in 1i64..80,
        sink_bits in proptest::collection::vec(any::<bool>(), 80),
        dlq_bits in proptest::collection::vec(any::<bool>(), 80),
        chunk in 1u64..20,
    ) {
        let sink: BTreeSet<Offset> = (0..n).filter(|&o| sink_bits[o as usize]).collect();
        let dlq: BTreeSet<Offset> = (0..n).filter(|&o| dlq_bits[o as usize]).collect();
        let mut l = PartitionLedger::new(0, false);
        for o in 0..n {
            l.ingest(o, None, exp(), 0);
        }
        l.pipeline.observe(0, Some(n));
        let mut total = Applied::default();
        let mut gaps: BTreeMap<Offset, GapRecord> = BTreeMap::new();
        loop {
            let segs = l.due(10_000, GRACE, chunk);
            if segs.is_empty() { break; }
            let a = l.apply_with_dead_letters(&oracle(&segs, &sink), 10_000, &|run| named_in(&dlq, run));
            total = total.merge(a);
            for g in l.take_dirty_gaps() { gaps.insert(g.first, g); }
        }
        let want_confirmed = sink.len() as u64;
        let want_dead = (0..n).filter(|o| !sink.contains(o) && dlq.contains(o)).count() as u64;
        let want_lost = n as u64 - want_confirmed - want_dead;
        prop_assert_eq!((total.confirmed, total.dead_lettered, total.lost), (want_confirmed, want_dead, want_lost));
        prop_assert_eq!(l.missing(), want_lost);
        let dead_in_gaps: u64 = gaps.values().map(|g| g.dead_lettered).sum();
        let missing_in_gaps: u64 = gaps.values().map(|g| g.missing).sum();
        prop_assert_eq!((dead_in_gaps, missing_in_gaps), (want_dead, want_lost));
        for g in gaps.values() {
            prop_assert!(g.missing == 0 || g.dead_lettered == 0, "mixed gap {:?}", g);
        }
    }
}
