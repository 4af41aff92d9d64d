//! Ranges Kafka deleted unread, settled in pieces: exact at every step, across a restart,
//! and bounded by the most offsets one range is asked about.

use super::*;
use crate::gap::GapState;
use crate::types::TopicPartition;

/// The state the API, the store and the CLI would show for gap `first`.
fn state(l: &PartitionLedger, first: Offset) -> (GapState, u64) {
    let g = l.gaps().find(|g| g.first == first).expect("gap");
    let shown = g.to_gap("a", &TopicPartition::new("t", 0));
    (shown.state, shown.missing_records)
}

/// Settles the next piece of every deleted range (at most `piece` offsets), the sink
/// holding `sink`; returns what was counted.
fn settle_pieces(l: &mut PartitionLedger, piece: u64, sink: &BTreeSet<Offset>) -> Applied {
    let mut all = Applied::default();
    for d in l.deleted_to_settle() {
        let NextPiece::Ask(run) = d.next(piece, u64::MAX) else {
            panic!("no limit: always asked");
        };
        let present: Vec<OffsetRun> = (run.first..=run.last)
            .filter(|o| sink.contains(o))
            .map(|o| r(o, o))
            .collect();
        all = all.merge(l.settle_deleted(d.gap, run, &runs::normalize(present)));
    }
    all
}

#[test]
fn a_fully_present_range_settles_in_pieces_and_is_late_only_after_the_last() {
    let mut l = PartitionLedger::new(0, false);
    l.skipped_by_retention(0, 99, 0).expect("gap");
    let sink: BTreeSet<Offset> = (0..100).collect();
    for (i, missing) in [(1, 70), (2, 40), (3, 10)] {
        let a = settle_pieces(&mut l, 30, &sink);
        assert_eq!(
            (a.confirmed, a.unverifiable, a.lost),
            (30, 0, 0),
            "piece {i}"
        );
        // Everything asked so far was found, but 10·k offsets are not asked yet: the gap
        // must not read as late (nothing missing) before its last piece.
        assert_eq!(state(&l, 0), (GapState::Unverifiable, missing), "piece {i}");
        assert_eq!(
            l.deleted_to_settle(),
            vec![DeletedRest {
                gap: 0,
                rest: r(30 * i, 99)
            }]
        );
        assert_eq!(l.missing(), 0, "a deleted range is never counted missing");
    }
    let a = settle_pieces(&mut l, 30, &sink);
    assert_eq!((a.confirmed, a.unverifiable), (10, 0));
    assert!(l.deleted_to_settle().is_empty(), "settled");
    assert_eq!(state(&l, 0), (GapState::Late, 0));
    let g = l.take_dirty_gaps().pop().expect("gap");
    assert!(!g.unsettled);
    assert_eq!(g.settle_cursor, 0, "a settled gap keeps no cursor");
}

#[test]
fn a_partly_present_range_ends_exact_and_unverifiable() {
    let mut l = PartitionLedger::new(0, false);
    l.skipped_by_retention(0, 99, 0).expect("gap");
    // Every second offset in the sink.
    let sink: BTreeSet<Offset> = (0..100).filter(|o| o % 2 == 0).collect();
    let mut total = Applied::default();
    let mut steps = 0;
    while !l.deleted_to_settle().is_empty() {
        let before = state(&l, 0).1;
        let a = settle_pieces(&mut l, 16, &sink);
        assert_eq!(state(&l, 0), (GapState::Unverifiable, before - a.confirmed));
        total = total.merge(a);
        steps += 1;
    }
    assert_eq!(steps, 7, "pieces of 16");
    assert_eq!(
        (total.confirmed, total.unverifiable, total.lost),
        (50, 50, 0)
    );
    assert_eq!(state(&l, 0), (GapState::Unverifiable, 50));
}

#[test]
fn an_absent_range_is_unverifiable_whole() {
    let mut l = PartitionLedger::new(5, false);
    l.skipped_by_retention(5, 44, 0).expect("gap");
    let mut total = Applied::default();
    while !l.deleted_to_settle().is_empty() {
        total = total.merge(settle_pieces(&mut l, 16, &BTreeSet::new()));
    }
    assert_eq!(
        (total.confirmed, total.unverifiable, total.lost),
        (0, 40, 0)
    );
    assert_eq!(state(&l, 5), (GapState::Unverifiable, 40));
}

#[test]
fn a_restart_in_the_middle_resumes_at_the_cursor_and_counts_nothing_twice() {
    let mut l = PartitionLedger::new(0, false);
    l.skipped_by_retention(0, 99, 0).expect("gap");
    let sink: BTreeSet<Offset> = (0..100).filter(|o| o % 3 != 0).collect();
    let first = settle_pieces(&mut l, 40, &sink);
    // kill -9: what the store holds is the snapshot's JSON.
    let stored = serde_json::to_value(l.snapshot()).expect("json");
    assert_eq!(stored["gaps"][0]["settle_cursor"], 40, "{stored}");
    let (snap, problems) = Snapshot::from_stored(&stored);
    assert!(problems.is_empty(), "{problems:?}");
    let mut back = PartitionLedger::restore(100, false, snap);
    assert_eq!(
        back.deleted_to_settle(),
        vec![DeletedRest {
            gap: 0,
            rest: r(40, 99)
        }]
    );
    assert_eq!(state(&back, 0), state(&l, 0));
    // The question asked before the crash, answered again: nothing counted twice.
    assert_eq!(
        back.settle_deleted(0, r(0, 39), &[r(0, 39)]),
        Applied::default()
    );
    let mut total = first;
    while !back.deleted_to_settle().is_empty() {
        total = total.merge(settle_pieces(&mut back, 40, &sink));
    }
    let found = sink.len() as u64;
    assert_eq!((total.confirmed, total.unverifiable), (found, 100 - found));
    assert_eq!(state(&back, 0), (GapState::Unverifiable, 100 - found));
}

#[test]
fn a_gap_stored_before_pieces_loads_and_settles_from_its_first_offset() {
    // The stored shape of an unsettled gap before the cursor existed.
    let stored = serde_json::json!({
        "missing": [],
        "gaps": [{
            "first": 10, "last": 19, "missing": 10, "size_known": false,
            "min_ts": null, "max_ts": null, "detected_ms": 1,
            "cause": "deleted_unread", "deleted_ms": 1, "unsettled": true
        }],
        "tail_gap": null
    });
    let (snap, problems) = Snapshot::from_stored(&stored);
    assert!(problems.is_empty(), "{problems:?}");
    let mut l = PartitionLedger::restore(20, false, snap);
    assert_eq!(
        l.deleted_to_settle(),
        vec![DeletedRest {
            gap: 10,
            rest: r(10, 19)
        }]
    );
    let a = l.settle_deleted(10, r(10, 19), &[r(10, 14)]);
    assert_eq!((a.confirmed, a.unverifiable), (5, 5));
    // Settled: the stored shape is the old one again (no cursor written).
    let after = serde_json::to_value(l.snapshot()).expect("json");
    assert!(after["gaps"][0].get("settle_cursor").is_none(), "{after}");
}

#[test]
fn only_the_piece_at_the_cursor_is_taken() {
    let mut l = PartitionLedger::new(0, false);
    l.skipped_by_retention(0, 99, 0).expect("gap");
    // Not at the cursor, or past the range: nothing counted, nothing moved.
    assert_eq!(
        l.settle_deleted(0, r(10, 19), &[r(10, 19)]),
        Applied::default()
    );
    assert_eq!(
        l.settle_deleted(0, r(0, 120), &[r(0, 99)]),
        Applied::default()
    );
    assert_eq!(
        l.settle_deleted(7, r(7, 9), &[]),
        Applied::default(),
        "no such gap"
    );
    assert_eq!(state(&l, 0), (GapState::Unverifiable, 100));
    // Present offsets outside the piece are not the piece's.
    let a = l.settle_deleted(0, r(0, 9), &[r(0, 99)]);
    assert_eq!((a.confirmed, a.unverifiable), (10, 0));
    assert_eq!(state(&l, 0), (GapState::Unverifiable, 90));
}

#[test]
fn pieces_stop_at_the_most_offsets_asked_and_the_rest_is_beyond() {
    let d = DeletedRest {
        gap: 100,
        rest: r(100, 1_099),
    };
    assert_eq!(d.next(300, 500), NextPiece::Ask(r(100, 399)));
    let d = DeletedRest {
        gap: 100,
        rest: r(400, 1_099),
    };
    // The limit cuts the piece short.
    assert_eq!(d.next(300, 500), NextPiece::Ask(r(400, 599)));
    let d = DeletedRest {
        gap: 100,
        rest: r(600, 1_099),
    };
    assert_eq!(d.next(300, 500), NextPiece::Beyond(r(600, 1_099)));
    // The range's end cuts the piece short.
    let d = DeletedRest {
        gap: 0,
        rest: r(0, 9),
    };
    assert_eq!(d.next(300, 500), NextPiece::Ask(r(0, 9)));
    // Nothing asked at all (a strategy whose rows carry no offsets).
    assert_eq!(d.next(300, 0), NextPiece::Beyond(r(0, 9)));
    // A zero piece still moves.
    assert_eq!(d.next(0, 500), NextPiece::Ask(r(0, 0)));
}

#[test]
fn past_the_limit_the_rest_is_unverifiable_at_once_never_lost() {
    let mut l = PartitionLedger::new(0, false);
    l.skipped_by_retention(0, 999, 0).expect("gap");
    let mut total = Applied::default();
    let mut asked = 0;
    while let Some(d) = l.deleted_to_settle().pop() {
        // The sink holds every offset of the range.
        let (run, present) = match d.next(100, 250) {
            NextPiece::Ask(run) => {
                asked += run.len();
                (run, vec![run])
            }
            NextPiece::Beyond(run) => (run, Vec::new()),
        };
        total = total.merge(l.settle_deleted(d.gap, run, &present));
    }
    assert_eq!(asked, 250);
    assert_eq!(
        (total.confirmed, total.unverifiable, total.lost),
        (250, 750, 0)
    );
    assert_eq!(state(&l, 0), (GapState::Unverifiable, 750));
}

#[test]
fn a_log_cut_inside_a_range_being_settled_leaves_only_what_is_left_to_ask() {
    let mut l = PartitionLedger::new(0, false);
    l.skipped_by_retention(0, 99, 0).expect("gap");
    // 0..39 asked, every second offset found: 20 asked and not found, 60 not asked.
    let a = l.settle_deleted(
        0,
        r(0, 39),
        &(0..40).step_by(2).map(|o| r(o, o)).collect::<Vec<_>>(),
    );
    assert_eq!((a.confirmed, a.unverifiable), (20, 20));
    assert_eq!(state(&l, 0), (GapState::Unverifiable, 80));
    // The log diverged at 60: 60..99 are not the range's any more.
    let mut snap = l.snapshot();
    snap.cut_at(60);
    let cut = PartitionLedger::restore(60, false, snap);
    assert_eq!(
        cut.deleted_to_settle(),
        vec![DeletedRest {
            gap: 0,
            rest: r(40, 59)
        }]
    );
    assert_eq!(state(&cut, 0), (GapState::Unverifiable, 40));
    // Diverged at 30, below the cursor: nothing is left to ask (and nothing panics).
    let mut snap = l.snapshot();
    snap.cut_at(30);
    let cut = PartitionLedger::restore(30, false, snap);
    assert!(cut.deleted_to_settle().is_empty());
    let g = cut.gaps().next().expect("gap");
    assert_eq!(
        (g.first, g.last, g.unsettled, g.settle_cursor),
        (0, 29, false, 0)
    );
}
