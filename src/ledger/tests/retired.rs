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
