//! The consumer's position (issue 35, SPEC "Completeness"): offsets it passed without a
//! record — transaction markers, aborted batches under read_committed — are holes, and the
//! ledger reads past them even when no record follows.

use super::*;

/// 5 records in a committed transaction, its commit marker at 5, nothing after: the
/// position (6) moves the ledger past the marker, so the partition is read to its log end
/// and, once the records are confirmed, settled there — not on the marker, where a restart
/// after retention would find an offset Kafka deleted unread.
#[test]
fn a_position_past_a_trailing_marker_reads_and_settles_past_it() {
    let mut l = PartitionLedger::new(0, false);
    for o in 0..5 {
        l.ingest(o, Some(1_000 + o), exp(), 0);
    }
    assert_eq!(l.next_offset(), 5, "the marker is never delivered");
    assert!(l.read_to(6));
    assert_eq!(l.next_offset(), 6);
    // Pending records still hold the settled watermark where they start.
    assert_eq!(l.settled(), 0);
    assert_eq!(l.pending(), 5);
    l.pipeline.observe(0, Some(5));
    let segs = l.due(GRACE, GRACE, 100);
    assert_eq!(
        segs.iter().map(|s| s.run).collect::<Vec<_>>(),
        vec![r(0, 4)],
        "the marker is not expected"
    );
    let applied = l.apply(&oracle(&segs, &(0..5).collect()), GRACE);
    assert_eq!((applied.confirmed, applied.lost), (5, 0));
    assert!(l.take_dirty_gaps().is_empty());
    assert_eq!(l.settled(), 6, "settled past the marker");
    let c = l.completeness();
    assert_eq!((c.pending, c.blocking_gaps), (None, 0));
}

/// A position at or behind what was read (a report older than the records after it, a
/// partition re-read after a re-positioning) changes nothing.
#[test]
fn a_position_behind_what_was_read_changes_nothing() {
    let mut l = PartitionLedger::new(0, false);
    for o in 0..4 {
        l.ingest(o, None, exp(), 0);
    }
    assert!(!l.read_to(4));
    assert!(!l.read_to(2));
    assert_eq!(l.next_offset(), 4);
    assert!(l.read_to(7));
    // A record delivered at or below the position is a re-delivery: ignored.
    assert!(!l.ingest(6, None, exp(), 0));
    assert!(l.ingest(7, None, exp(), 0));
    assert_eq!((l.next_offset(), l.pending()), (8, 5));
}

/// An aborted batch in the middle (2-3, its abort marker 4) and at the end (6-7 and the
/// marker 8) of the log: never expected, never missing; the missing records on either side
/// of the middle one stay one gap (holes do not split gaps), and the trailing one is read
/// past and settled.
#[test]
fn aborted_batches_passed_by_the_position_are_holes_in_the_middle_and_at_the_end() {
    let mut l = PartitionLedger::new(0, false);
    l.ingest(0, None, exp(), 0);
    l.ingest(1, None, exp(), 0);
    // The consumer skipped the aborted records and the marker: the next record is 5.
    l.ingest(5, None, exp(), 0);
    assert!(l.read_to(9));
    l.pipeline.observe(0, Some(9));
    let segs = l.due(GRACE, GRACE, 100);
    assert_eq!(
        segs.iter().map(|s| s.run).collect::<Vec<_>>(),
        vec![r(0, 1), r(5, 5)]
    );
    // The pipeline lost 1 and 5.
    let applied = l.apply(&oracle(&segs, &[0].into()), GRACE);
    assert_eq!(
        (applied.confirmed, applied.lost, applied.unverifiable),
        (1, 2, 0)
    );
    let gaps = l.take_dirty_gaps();
    assert_eq!(
        gaps.iter()
            .map(|g| (g.first, g.last, g.missing))
            .collect::<Vec<_>>(),
        vec![(1, 5, 2)],
        "one gap across the aborted batch, with only the two records missing"
    );
    assert_eq!(
        l.settled(),
        9,
        "read and settled past the trailing aborted batch"
    );
}

/// A ledger resumed at the settled watermark a position moved resumes past the marker:
/// nothing below it is read, decided or reported again.
#[test]
fn a_ledger_restored_at_a_settled_position_resumes_past_the_marker() {
    let mut l = PartitionLedger::new(0, false);
    for o in 0..5 {
        l.ingest(o, None, exp(), 0);
    }
    l.read_to(6);
    l.pipeline.observe(0, Some(5));
    let segs = l.due(GRACE, GRACE, 100);
    l.apply(&oracle(&segs, &(0..5).collect()), GRACE);
    let settled = l.settled();
    let snap = l.snapshot();
    let mut l2 = PartitionLedger::restore(settled, false, snap);
    assert_eq!(l2.next_offset(), 6);
    assert!(!l2.read_to(6));
    assert!(l2.take_dirty_gaps().is_empty());
    assert_eq!(l2.settled(), 6);
}

/// A ledger started at a logical position (the watermarks could not be read) anchors on
/// the first position the consumer reports, as it would on a first record: reading began
/// there, and nothing before it was delivered.
#[test]
fn an_unanchored_ledger_anchors_on_a_position() {
    let mut l = PartitionLedger::new(-1, false);
    assert!(!l.is_anchored());
    assert!(l.read_to(9));
    assert!(l.is_anchored());
    assert_eq!((l.next_offset(), l.settled(), l.pending()), (9, 9, 0));
}
