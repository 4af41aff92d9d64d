//! A gap's life after detection: causes, unrecoverable, bounded keys, acknowledgements, rechecks
//! and compaction.

use super::*;

#[test]
fn cause_skipped_by_restart_is_the_commit_jump_from_the_first_missing_record() {
    use crate::gap::GapCause;
    let mut l = PartitionLedger::new(0, false);
    for o in 0..6 {
        l.ingest(o, None, exp(), 0);
    }
    // Committed 2 before the crash, 4 right after the restart from latest, then 6.
    l.pipeline.observe(0, Some(2));
    l.pipeline.observe(1_000, Some(4));
    l.pipeline.observe(2_000, Some(6));
    let segs = l.due(10_000, GRACE, 100);
    l.apply(&oracle(&segs, &[0, 1, 4, 5].into()), 10_000);
    let g = &l.take_dirty_gaps()[0];
    assert_eq!(g.cause, GapCause::SkippedByRestart);
    let step = g.commit.expect("step");
    assert_eq!((step.from, step.to, step.at_ms), (2, 4, 1_000));
}

/// Review 27, G4: the rest of a gap split by an acknowledgement, past where the commit
/// jump landed, takes its own step as its cause and none of the jump's evidence (it said
/// "restarted …: offsets 4–9 skipped" of records the jump did not skip).
#[test]
fn the_rest_of_a_split_gap_past_the_jump_has_its_own_cause() {
    use crate::gap::GapCause;
    let mut l = PartitionLedger::new(0, false);
    for o in 0..10 {
        l.ingest(o, None, exp(), 0);
    }
    l.pipeline.observe(0, Some(2));
    l.pipeline.observe(1_000, Some(4));
    let segs = l.due(10_000, GRACE, 100);
    l.apply(&oracle(&segs, &[0, 1].into()), 10_000);
    let g = l.take_dirty_gaps().remove(0);
    assert_eq!(
        (g.first, g.last, g.cause),
        (2, 3, GapCause::SkippedByRestart)
    );
    assert!(l.set_gap_evidence(2, "restarted at T without restoring".into()));
    // The restarted job then writes none of 4–9: the tail gap grows to 2–9.
    l.pipeline.observe(11_000, Some(10));
    let segs = l.due(20_000, GRACE, 100);
    l.apply(&oracle(&segs, &[0, 1].into()), 20_000);
    l.take_dirty_gaps();
    assert_eq!(
        l.gaps().map(|g| (g.first, g.last)).collect::<Vec<_>>(),
        vec![(2, 9)]
    );
    // The operator acknowledges 2–3, the gap as it was shown.
    assert!(l.acknowledge_through(2, 3));
    let rest = l.gaps().next().cloned().expect("the rest");
    assert_eq!((rest.first, rest.last), (4, 9));
    assert_eq!(rest.commit.map(|s| (s.from, s.to)), Some((4, 10)));
    assert_eq!(rest.evidence, None, "the jump 2 → 4 did not skip 4–9");
    // A rest still below the landing keeps the jump: acknowledging 2 alone of 2–3.
    let mut l = PartitionLedger::new(0, false);
    for o in 0..6 {
        l.ingest(o, None, exp(), 0);
    }
    l.pipeline.observe(0, Some(2));
    l.pipeline.observe(1_000, Some(4));
    l.pipeline.observe(2_000, Some(6));
    let segs = l.due(10_000, GRACE, 100);
    l.apply(&oracle(&segs, &[0, 1, 4, 5].into()), 10_000);
    l.take_dirty_gaps();
    assert!(l.set_gap_evidence(2, "restarted".into()));
    assert!(l.acknowledge_through(2, 2));
    let rest = l.gaps().next().cloned().expect("the rest");
    assert_eq!((rest.first, rest.cause), (3, GapCause::SkippedByRestart));
    assert_eq!(rest.commit.map(|s| (s.from, s.to)), Some((2, 4)));
    assert_eq!(rest.evidence.as_deref(), Some("restarted"));
}

#[test]
fn cause_dropped_in_flight_is_a_hole_inside_normal_progress() {
    use crate::gap::GapCause;
    let mut l = PartitionLedger::new(0, false);
    for o in 0..10 {
        l.ingest(o, None, exp(), 0);
    }
    l.pipeline.observe(0, Some(0));
    l.pipeline.observe(1_000, Some(10));
    let segs = l.due(10_000, GRACE, 100);
    let sink: BTreeSet<Offset> = (0..10).filter(|o| *o != 5).collect();
    l.apply(&oracle(&segs, &sink), 10_000);
    let g = &l.take_dirty_gaps()[0];
    assert_eq!((g.first, g.cause), (5, GapCause::DroppedInFlight));
    assert_eq!(g.commit.map(|s| (s.from, s.to)), Some((0, 10)));
}

#[test]
fn cause_is_unknown_without_pipeline_commits() {
    use crate::gap::GapCause;
    let mut l = PartitionLedger::new(0, false);
    l.pipeline.set_time_rule(true);
    l.ingest(0, None, exp(), 0);
    let segs = l.due(10_000, GRACE, 100);
    l.apply(&oracle(&segs, &BTreeSet::new()), 10_000);
    let g = &l.take_dirty_gaps()[0];
    assert_eq!((g.cause, g.commit), (GapCause::Unknown, None));
}

#[test]
fn a_gap_becomes_unrecoverable_when_the_log_start_passes_it() {
    let mut l = PartitionLedger::new(0, false);
    for o in 0..6 {
        l.ingest(o, None, exp(), 0);
    }
    l.pipeline.observe(0, Some(6));
    let segs = l.due(GRACE, GRACE, 100);
    l.apply(&oracle(&segs, &[0, 1, 4, 5].into()), GRACE);
    l.take_dirty_gaps();
    let rev = l.revision();
    assert!(
        !l.log_start_moved(2, 5_000),
        "the log start has not passed offset 2 yet"
    );
    assert_eq!(l.revision(), rev);
    assert!(l.log_start_moved(3, 6_000));
    let g = &l.take_dirty_gaps()[0];
    assert_eq!((g.first, g.deleted_ms), (2, Some(6_000)));
    assert!(!l.log_start_moved(10, 7_000), "reported once");
    assert_ne!(l.revision(), rev, "persisted");
}

/// A keyed ledger whose records `0..n` were all due and absent: one gap, one merged run.
fn total_loss(n: Offset, rounds: Offset) -> PartitionLedger {
    let mut l = PartitionLedger::new(0, true);
    let per = n / rounds;
    for round in 0..rounds {
        let now = round * 10 * GRACE;
        for o in round * per..(round + 1) * per {
            let key = Some(Key::new([format!("k{o}")]));
            l.ingest(o, None, Observed::Expected { key }, now);
        }
        l.pipeline.observe(now, Some((round + 1) * per));
        let segs = l.due(now + GRACE, GRACE, 1_000);
        l.apply(&oracle(&segs, &BTreeSet::new()), now + GRACE);
        l.take_dirty_gaps();
    }
    l
}

/// The `max_missing_keys` budget gives up the OLDEST records only: a total loss merges
/// each round's missing records into one run per gap, and giving up that whole run (as a
/// run-granular drop would) stopped re-checking every record of the incident at once.
#[test]
fn dropping_missing_keys_cuts_the_oldest_records_off_a_merged_run() {
    let mut l = total_loss(100, 4);
    assert_eq!(
        l.missing_runs(),
        vec![r(0, 99)],
        "adjacent runs of one gap merge"
    );
    assert_eq!(l.missing_key_count(), 100);
    assert_eq!(l.drop_missing_keys(30), 30);
    assert_eq!(l.missing_key_count(), 70);
    assert_eq!(l.missing_runs(), vec![r(30, 99)]);
    let released = l.take_released_keys();
    assert_eq!(released.first(), Some(&Key::new(["k0"])));
    assert_eq!(released.len(), 30);
    // Still missing, still one gap: only the re-checks stop.
    assert_eq!(l.missing(), 100);
    assert_eq!(l.gauges().missing, 100);
    assert_eq!(l.rechecks(RecheckBudget::UNLIMITED)[0].run, r(30, 99));
    assert_eq!(
        l.rechecks(RecheckBudget::UNLIMITED)[0].keys[0],
        Key::new(["k30"])
    );
}

/// An acknowledged gap leaves the hot ledger: no re-checks, no gauges, its keys released,
/// and a missing record right after it opens a new gap (the operator accepted that
/// incident, not what follows).
#[test]
fn an_acknowledged_gap_leaves_the_hot_ledger() {
    let mut l = total_loss(10, 1);
    assert_eq!(l.gauges().open, 1);
    assert!(l.acknowledge(0));
    assert!(!l.acknowledge(0), "once");
    assert_eq!(l.gauges(), GapGauges::default());
    assert!(l.rechecks(RecheckBudget::UNLIMITED).is_empty());
    assert_eq!(l.take_released_keys().len(), 10);
    assert_eq!(l.missing(), 0);
    let d = l.delta();
    assert!(
        d.gaps.contains(&(0, None)),
        "the store drops it: {:?}",
        d.gaps
    );
    l.ingest(
        10,
        None,
        Observed::Expected {
            key: Some(Key::new(["k10"])),
        },
        100 * GRACE,
    );
    l.pipeline.observe(100 * GRACE, Some(11));
    let segs = l.due(101 * GRACE, GRACE, 100);
    l.apply(&oracle(&segs, &BTreeSet::new()), 101 * GRACE);
    let gaps = l.take_dirty_gaps();
    assert_eq!((gaps.len(), gaps[0].first, gaps[0].is_new), (1, 10, true));
}

/// Issue 35 item 7: an acknowledgement covers the records the gap held when it was given
/// (its stored extent), not what a round added since. Round 1 declares 0..=4 missing and the
/// operator acknowledges that gap; round 2 extends the tail gap to 9 (merging the runs)
/// before the acknowledgement reaches the ledger. 5..=9 stay missing, as an open gap.
#[test]
fn an_acknowledgement_covers_only_what_the_gap_held_when_it_was_given() {
    let mut l = total_loss(10, 2);
    assert_eq!(
        l.missing_runs(),
        vec![r(0, 9)],
        "one merged run straddles the ack"
    );
    assert!(l.acknowledge_through(0, 4));
    assert!(!l.acknowledge_through(0, 4), "once");
    assert_eq!(l.missing(), 5);
    assert_eq!(l.missing_runs(), vec![r(5, 9)]);
    let g = l.gaps().cloned().collect::<Vec<_>>();
    assert_eq!(g.len(), 1);
    assert_eq!((g[0].first, g[0].last, g[0].missing), (5, 9, 5));
    assert_eq!((l.gauges().open, l.gauges().missing), (1, 5));
    assert_eq!(
        l.take_released_keys().len(),
        5,
        "only the acknowledged records' keys"
    );
    assert_eq!(
        l.rechecks(RecheckBudget::UNLIMITED)[0].keys[0],
        Key::new(["k5"])
    );
    let d = l.delta();
    assert!(d.gaps.contains(&(0, None)), "acknowledged: {:?}", d.gaps);
    assert!(
        d.gaps.iter().any(|(f, g)| *f == 5 && g.is_some()),
        "the open part is stored: {:?}",
        d.gaps
    );
    assert_eq!(d.tail_gap, Some(5), "the open part is the tail now");
    let dirty = l.take_dirty_gaps();
    assert_eq!(
        dirty
            .iter()
            .map(|g| (g.first, g.is_new))
            .collect::<Vec<_>>(),
        vec![(5, true)],
        "reported as a new gap (it pages)"
    );
    // An acknowledgement that covers the whole gap leaves nothing open.
    assert!(l.acknowledge_through(5, 9));
    assert_eq!((l.missing(), l.gaps().count()), (0, 0));
}

/// A budgeted rotation visits every run across rounds and starts over; within a run it
/// continues where the records budget cut it.
#[test]
fn rechecks_rotate_within_the_budget() {
    let mut l = PartitionLedger::new(0, false);
    for o in 0..10 {
        l.ingest(o, None, exp(), 0);
    }
    l.pipeline.observe(0, Some(10));
    let segs = l.due(GRACE, GRACE, 100);
    // Even offsets present: five one-record gaps at 1, 3, 5, 7, 9.
    l.apply(&oracle(&segs, &[0, 2, 4, 6, 8].into()), GRACE);
    let budget = RecheckBudget {
        runs: 2,
        records: u64::MAX,
    };
    let mut seen = Vec::new();
    for _ in 0..3 {
        let c = l.rechecks(budget);
        seen.extend(c.iter().map(|s| s.run.first));
        let v = oracle(&c, &BTreeSet::new());
        l.apply_rechecks(&c, &v);
    }
    assert_eq!(seen, vec![1, 3, 5, 7, 9]);
    let c = l.rechecks(budget);
    assert_eq!(
        c.iter().map(|s| s.run.first).collect::<Vec<_>>(),
        vec![1, 3],
        "starts over"
    );
    // Unanswered (an error): the rotation does not move on.
    let again = l.rechecks(budget);
    assert_eq!(
        again.iter().map(|s| s.run.first).collect::<Vec<_>>(),
        vec![1, 3]
    );
}

/// Compaction rebuilds the maps; nothing in them changes.
#[test]
fn compaction_keeps_every_gap_and_run() {
    let mut l = PartitionLedger::new(0, false);
    let n = 20_000;
    for o in 0..n {
        l.ingest(o, None, exp(), 0);
    }
    l.pipeline.observe(0, Some(n));
    let segs = l.due(GRACE, GRACE, n as u64);
    let present: BTreeSet<Offset> = (0..n).filter(|o| o % 2 == 0).collect();
    l.apply(&oracle(&segs, &present), GRACE);
    let gaps = |l: &PartitionLedger| -> Vec<(Offset, Offset, u64)> {
        l.gaps().map(|g| (g.first, g.last, g.missing)).collect()
    };
    let (runs_before, gaps_before) = (l.missing_runs(), gaps(&l));
    l.take_dirty_gaps();
    assert!(
        l.missing_runs() == runs_before,
        "missing runs changed by the rebuild"
    );
    assert!(gaps(&l) == gaps_before, "gaps changed by the rebuild");
    assert_eq!(l.gaps().count(), 10_000);
}

/// Runs carrying keys merge only up to 4,096 keys: a run is rewritten whole in the store
/// whenever it changes, and merged without bound a total loss rewrote every missing key
/// each round (27.5 MiB a round at 1,000,000 keys).
#[test]
fn keyed_runs_merge_only_up_to_a_bounded_size() {
    // Six rounds of 1,000 missing records: four merge (4,000 keys), the fifth would pass
    // the bound and starts a run of its own.
    let l = total_loss(6_000, 6);
    assert_eq!(l.missing_runs(), vec![r(0, 3999), r(4000, 5999)]);
    assert_eq!(l.gaps().count(), 1, "still one gap");
}
