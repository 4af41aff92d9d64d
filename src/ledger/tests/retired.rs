//! Given-up gaps leave the ledger's memory (issue 41 item 1): a long incident's gaps stay
//! exact in the store, while the ledger keeps a small aggregate of them that answers the
//! gauges and completeness as the gaps themselves did.

use super::*;

/// `n` records of which every second one (the odd offsets) is missing: `n / 2` isolated
/// gaps, the last record present (no tail gap), all declared at `GRACE`.
fn isolated_losses(n: Offset) -> PartitionLedger {
    let mut l = PartitionLedger::new(0, false);
    for o in 0..n {
        l.ingest(o, Some(o), exp(), 0);
    }
    l.pipeline.observe(0, Some(n));
    let segs = l.due(GRACE, GRACE, n as u64);
    let present: BTreeSet<Offset> = (0..n).filter(|o| o % 2 == 0).collect();
    l.apply(&oracle(&segs, &present), GRACE);
    l.take_dirty_gaps();
    l
}

#[test]
fn given_up_gaps_leave_the_ledgers_memory_and_the_answers_stay_the_same() {
    let n = 200_001;
    let mut l = isolated_losses(n);
    assert_eq!(l.gaps().count(), 100_000);
    let gauges = l.gauges();
    let completeness = l.completeness();
    let missing = l.missing();
    assert_eq!((gauges.open, gauges.missing), (100_000, 100_000));

    l.give_up(GRACE + 60_000, 60_000);
    l.take_dirty_gaps();
    assert!(
        l.gaps().count() <= 1,
        "given-up gaps still held in memory: {}",
        l.gaps().count()
    );
    assert_eq!(l.missing_runs(), Vec::new());
    assert_eq!(l.gauges(), gauges, "gauges as before");
    assert_eq!(l.completeness(), completeness, "completeness as before");
    assert_eq!(l.missing(), missing, "missing records as before");
}

/// `max_open_gaps`: the oldest gaps fold into one overflow gap that spans them and counts
/// their missing records; the answers about missing records stay the same.
#[test]
fn folded_gaps_become_one_overflow_gap_that_spans_and_counts_them() {
    // Gaps at the odd offsets 1..=39, the last record (40) present.
    let mut l = isolated_losses(41);
    assert_eq!(l.gaps_in_memory(), 20);
    let missing = l.missing();
    let reduced = l.fold_oldest(15);
    assert_eq!(reduced, 15);
    assert_eq!(l.gaps_in_memory(), 5);
    assert_eq!(
        l.take_folded(),
        16,
        "16 gaps folded, the first became the overflow gap"
    );
    assert_eq!(l.folded_unstored().len(), 15, "their rows replaced by it");
    let dirty = l.take_dirty_gaps();
    let o = dirty
        .iter()
        .find(|g| g.cause == crate::gap::GapCause::Folded)
        .expect("the overflow gap is reported");
    assert_eq!((o.first, o.last, o.missing), (1, 31, 16));
    // Timestamps are bounds (a split pending run keeps its bounds): the folded gaps' own.
    assert_eq!((o.min_ts, o.max_ts), (Some(0), Some(40)));
    assert_eq!(l.overflow(), Some(1));
    assert_eq!(l.missing(), missing, "no record dropped");
    let g = l.gauges();
    assert_eq!((g.open, g.missing), (5, 20));
    assert_eq!(
        l.missing_runs(),
        vec![r(33, 33), r(35, 35), r(37, 37), r(39, 39)],
        "folded records are no longer re-checked"
    );
    // A later fold grows the same overflow gap; it never retires.
    assert_eq!(l.fold_oldest(2), 2);
    l.take_dirty_gaps();
    let o = l.gaps().find(|g| g.first == 1).expect("overflow");
    assert_eq!((o.first, o.last, o.missing), (1, 35, 18));
    assert_eq!(l.gaps_in_memory(), 3);
    assert_eq!(l.take_folded(), 2);
    // A restart keeps it the overflow gap.
    let back = PartitionLedger::restore(41, false, l.snapshot());
    assert_eq!(back.overflow(), Some(1));
}

/// An acknowledgement of the overflow gap covers what it held when the operator saw it:
/// gaps folded into it since (a round under way when the ack landed) stay open, as an
/// overflow gap over the rest of the span with the rest of the count.
#[test]
fn an_acknowledged_overflow_gap_keeps_what_was_folded_after_the_ack_open() {
    let mut l = isolated_losses(41);
    l.fold_oldest(2);
    l.take_dirty_gaps();
    let o = l.gaps().find(|g| g.first == 1).cloned().expect("overflow");
    assert_eq!((o.first, o.last, o.missing), (1, 5, 3));
    // The operator saw 1..=3 with 2 missing; 5 was folded in since.
    assert!(l.acknowledge_overflow(1, 3, 2));
    let dirty = l.take_dirty_gaps();
    let rest = dirty
        .iter()
        .find(|g| g.first == 4)
        .expect("the rest, reported");
    assert_eq!(
        (rest.first, rest.last, rest.missing, rest.cause),
        (4, 5, 1, crate::gap::GapCause::Folded)
    );
    assert_eq!(l.overflow(), Some(4));
    assert_eq!(l.missing(), 18, "only the acknowledged 2 left");
    assert_eq!(l.gauges().missing, 18);
    // Acknowledged as it is: nothing left.
    assert!(l.acknowledge_overflow(4, 5, 1));
    assert_eq!(l.overflow(), None);
    assert_eq!(l.missing(), 17);
}

/// Rounds of the long incident below.
const ROUNDS: i64 = 60;
/// Records a round (every second one lost).
const PER_ROUND: i64 = 2_000;
/// Rounds after which missing records are given up.
const GIVE_UP_ROUNDS: i64 = 10;

/// A long incident: [`ROUNDS`] rounds of [`PER_ROUND`] records, every second one lost,
/// given up after [`GIVE_UP_ROUNDS`]; `after_round(round, ledger)` looks at each round's
/// end. Returns the ledger.
fn given_up_incident(mut after_round: impl FnMut(i64, &PartitionLedger)) -> PartitionLedger {
    let mut l = PartitionLedger::new(0, false);
    for round in 0..ROUNDS {
        let now = round * 10 * GRACE;
        let from = round * PER_ROUND;
        for o in from..from + PER_ROUND {
            l.ingest(o, Some(now), exp(), now);
        }
        l.pipeline.observe(now, Some(from + PER_ROUND));
        let segs = l.due(now + GRACE, GRACE, PER_ROUND as u64);
        let present: BTreeSet<Offset> = (from..from + PER_ROUND).filter(|o| o % 2 == 0).collect();
        l.apply(&oracle(&segs, &present), now + GRACE);
        l.give_up(now + GRACE, GIVE_UP_ROUNDS * 10 * GRACE);
        l.take_dirty_gaps();
        l.stored();
        after_round(round, &l);
    }
    l
}

/// A long incident: every second record lost, round after round, with records given up
/// after 10 rounds. The gaps in memory stay at about 10 rounds' worth however long it
/// lasts (flat after the first give-ups), while every gap stays counted.
#[test]
fn an_incident_longer_than_give_up_after_keeps_the_gaps_in_memory_flat() {
    let mut peak_after_first_give_up = 0;
    let mut l = given_up_incident(|round, l| {
        if round > GIVE_UP_ROUNDS {
            peak_after_first_give_up = peak_after_first_give_up.max(l.gaps_in_memory());
        }
    });
    let per_round = (PER_ROUND / 2) as usize;
    assert!(
        peak_after_first_give_up <= (GIVE_UP_ROUNDS as usize + 1) * per_round,
        "gaps in memory grew with the incident: {peak_after_first_give_up}"
    );
    let total = (ROUNDS * PER_ROUND / 2) as u64;
    assert_eq!(l.missing(), total);
    let g = l.gauges();
    assert_eq!((g.open, g.missing), (total, total));
    assert_eq!(l.completeness().blocking_gaps, total);
}

/// The same incident at a constant size: new gaps appended, the oldest given up. Appends
/// leave B-tree nodes half full, so without a rebuild the maps' nodes all turn half full
/// within one give_up_after while their length stays put (heaptrack of the giveup_soak
/// fault test: the held heap rose by half in the minute after the first give-ups). The
/// maps are rebuilt as they turn over, not only while they grow.
#[test]
fn gaps_given_up_as_fast_as_they_come_keep_the_maps_rebuilt() {
    let mut at_first_give_up = None;
    let l = given_up_incident(|round, l| {
        if round == GIVE_UP_ROUNDS + 1 {
            at_first_give_up = Some(l.compactions());
        }
    });
    let before = at_first_give_up.expect("reached");
    // ~11,000 gaps in memory, 1,000 new a round: a quarter turns over every ~3 rounds.
    let after = l.compactions() - before;
    assert!(
        after >= 10,
        "{after} rebuilds in the {} rounds after the first give-ups",
        ROUNDS - GIVE_UP_ROUNDS - 1
    );
    assert!(
        l.gaps_in_memory() <= (GIVE_UP_ROUNDS as usize + 1) * (PER_ROUND / 2) as usize,
        "{} gaps in memory",
        l.gaps_in_memory()
    );
    assert_eq!(l.missing(), (ROUNDS * PER_ROUND / 2) as u64);
}

/// A log truncated inside the overflow gap (review of issue 41 item 1): the overflow gap
/// holds no missing run, so the cut cannot tell how many of its records lay beyond the
/// divergence point. Trimmed to end before it with the whole count, its row said more
/// records missing than its span holds (16 in 1..=9). Kept whole, its row is the old log's
/// as it stood (span and count agree), and nothing it counted is dropped.
#[test]
fn a_log_truncated_inside_the_overflow_gap_never_leaves_more_missing_than_its_span() {
    let mut l = isolated_losses(41);
    l.fold_oldest(15);
    l.take_dirty_gaps();
    l.stored();
    let o = l.gaps().find(|g| g.first == 1).cloned().expect("overflow");
    assert_eq!((o.first, o.last, o.missing), (1, 31, 16));
    let (back, gone) = PartitionLedger::restore_diverged(10, false, l.snapshot());
    for g in back.gaps().chain(gone.iter()) {
        assert!(
            g.missing <= (g.last - g.first + 1) as u64,
            "gap {}..={} says {} missing",
            g.first,
            g.last,
            g.missing
        );
    }
    let o = back
        .gaps()
        .find(|g| g.first == 1)
        .expect("the overflow gap");
    assert_eq!(
        (o.first, o.last, o.missing),
        (1, 31, 16),
        "kept as it stood"
    );
}

/// The overflow gap of a log that diverged is the old log's: a gap found on the new log
/// (the next epoch) is never folded into it, nor with the old log's gaps still re-checked,
/// or an old gap's row would be rewritten with records of another log (SEMANTICS: "never a
/// rewrite of the old one").
#[test]
fn gaps_of_a_new_log_never_fold_into_the_old_logs_overflow_gap() {
    let mut l = isolated_losses(41);
    l.fold_oldest(15);
    l.take_dirty_gaps();
    l.stored();
    // Truncated at 41 (nothing cut): the new log goes on from there.
    let (mut back, gone) = PartitionLedger::restore_diverged(41, false, l.snapshot());
    assert!(gone.is_empty());
    let now = 10 * GRACE;
    for o in 41..81 {
        back.ingest(o, Some(o), exp(), now);
    }
    back.pipeline.observe(now, Some(81));
    let segs = back.due(now + GRACE, GRACE, 40);
    let present: BTreeSet<Offset> = (41..81).filter(|o| o % 2 == 0).collect();
    back.apply(&oracle(&segs, &present), now + GRACE);
    back.take_dirty_gaps();
    back.fold_oldest(back.gaps_in_memory() - 2);
    back.take_dirty_gaps();
    for g in back.gaps().filter(|g| g.epoch == 0) {
        assert!(
            g.last < 41,
            "an old log's gap {}..={} took records of the new log",
            g.first,
            g.last
        );
    }
    let old = back.gaps().find(|g| g.first == 1 && g.epoch == 0);
    if let Some(old) = old {
        assert_eq!(
            (old.last, old.missing),
            (31, 16),
            "the old log's overflow gap took records of the new log"
        );
    }
    let new = back
        .gaps()
        .find(|g| g.cause == crate::gap::GapCause::Folded && g.epoch == back.epoch())
        .expect("the new log's own overflow gap");
    assert_eq!(new.first, 41, "it starts at the new log's first folded gap");
    assert_eq!(
        back.missing(),
        16 + 4 + 20,
        "every missing record counted once"
    );
}

/// The same for a gap still in memory whose records were given up (the tail gap: it never
/// retires): cut with its whole count, 5 missing in 5..=6.
#[test]
fn a_log_truncated_inside_a_given_up_tail_gap_never_leaves_more_missing_than_its_span() {
    let mut l = PartitionLedger::new(0, false);
    for o in 0..10 {
        l.ingest(o, Some(o), exp(), 0);
    }
    l.pipeline.observe(0, Some(10));
    let segs = l.due(GRACE, GRACE, 10);
    l.apply(&oracle(&segs, &(0..5).collect()), GRACE);
    l.take_dirty_gaps();
    l.give_up(GRACE + 60_000, 60_000);
    l.take_dirty_gaps();
    l.stored();
    let g = l.gaps().next().cloned().expect("the tail gap");
    assert_eq!((g.first, g.last, g.missing), (5, 9, 5));
    let (back, _) = PartitionLedger::restore_diverged(7, false, l.snapshot());
    for g in back.gaps() {
        assert!(
            g.missing <= (g.last - g.first + 1) as u64,
            "gap {}..={} says {} missing",
            g.first,
            g.last,
            g.missing
        );
    }
    assert_eq!(back.missing(), 5, "nothing it counted dropped");
}

/// A log truncated while retirements are not stored yet (the last write failed): the old
/// ledger's retired gaps at and beyond the cut are gone gaps (returned to be reported
/// unrecoverable, never marked retired), those below count in the new ledger's aggregate at
/// once, and the store can let go of its retired rows beyond the cut before the write (a
/// crash after the write must not leave them counted: the store then no longer says the
/// log diverged).
#[test]
fn a_truncation_with_unstored_retirements_lets_those_beyond_the_cut_go_before_the_write() {
    let mut l = isolated_losses(41);
    l.give_up(GRACE + 60_000, 60_000);
    l.take_dirty_gaps();
    assert_eq!(
        l.retired_unstored().len(),
        20,
        "not stored: the write failed"
    );
    let (mut next, gone) = PartitionLedger::restore_diverged(21, false, l.snapshot());
    assert!(gone.is_empty());
    next.retired_gone(21, 5 * GRACE);
    let gone = next.inherit_unstored(&mut l, 21);
    assert_eq!(
        gone.iter().map(|g| g.first).collect::<Vec<_>>(),
        vec![21, 23, 25, 27, 29, 31, 33, 35, 37, 39]
    );
    assert!(next.retired_unstored().iter().all(|g| g.first < 21));
    assert_eq!(next.retired().gaps, 10, "the inherited ones count at once");
    assert_eq!(next.missing(), 10);
    assert!(
        next.retired_work().is_some(),
        "the store's rows beyond the cut wait for the write"
    );
}

/// Review item 4 (format 3): while a taken-over partition imports its previous owner's
/// retired gaps, the aggregate is the handed-over one and the store's recount waits; a log
/// start passing an open retired gap makes the countdown 0 at once (it used to wait for
/// the import's end), and the store's operation stays queued for after the import.
#[test]
fn a_log_start_passing_handed_over_retired_gaps_counts_at_once_and_stays_queued() {
    let mut l = PartitionLedger::new(0, false);
    let handed = RetiredGaps {
        gaps: 2,
        missing_known: 2,
        open: 2,
        open_missing: 2,
        oldest_undeleted_ts: Some(1_000),
        undeleted_first: Some(10),
        ..RetiredGaps::default()
    };
    l.retired_handed_over(handed);
    assert_eq!(l.gauges().deleted_ms, None);
    assert!(l.log_start_moved(20, 7_000));
    assert_eq!(l.gauges().deleted_ms, Some(7_000), "countdown at 0 at once");
    assert_eq!(l.gauges().open, 2);
    let work = l.retired_work().expect("the store's work stays queued");
    assert_eq!(
        work.ops,
        vec![RetiredOp::Deleted {
            below: 20,
            at_ms: 7_000
        }]
    );
    // A later move keeps the earliest time.
    assert!(l.log_start_moved(30, 9_000));
    assert_eq!(l.gauges().deleted_ms, Some(7_000));
    // A log start below every open retired gap changes nothing.
    let mut l = PartitionLedger::new(0, false);
    l.retired_handed_over(RetiredGaps {
        undeleted_first: Some(50),
        ..handed_one()
    });
    l.log_start_moved(20, 7_000);
    assert_eq!(l.gauges().deleted_ms, None);
}

fn handed_one() -> RetiredGaps {
    RetiredGaps {
        gaps: 1,
        missing_known: 1,
        open: 1,
        open_missing: 1,
        ..RetiredGaps::default()
    }
}
