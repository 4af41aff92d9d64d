//! A closed range decided on the in-memory sink: the verdicts, the gaps and the due rule
//! `check` and `replay` get from it.

use super::*;
use crate::config::MatchStrategy;
use crate::record::Unresolved;
use crate::sink::memory::MemorySink;
use crate::types::Key;

const T: &str = "t";
const GRACE: i64 = 10_000;

fn tp() -> TopicPartition {
    TopicPartition::new(T, 0)
}

fn expected() -> Tag {
    Tag::Expected { key: None }
}

fn keyed(k: &str) -> Tag {
    Tag::Expected {
        key: Some(Key::new([k])),
    }
}

/// Records 0..n, each expected, appended at `appended_ms`.
fn read(n: Offset, appended_ms: i64) -> ClosedRange {
    let mut r = ClosedRange::new(tp(), 0, false);
    for o in 0..n {
        r.ingest(o, Some(o), expected(), appended_ms)
            .expect("resolved");
    }
    r
}

fn sink_with(offsets: impl IntoIterator<Item = Offset>) -> MemorySink {
    let s = MemorySink::new();
    for o in offsets {
        s.insert_offset(T, 0, o);
    }
    s
}

fn offsets_checker() -> Checker {
    Checker::new(MatchStrategy::OffsetColumns, 100, 1_000)
}

fn run(first: Offset, last: Offset) -> OffsetRun {
    OffsetRun { first, last }
}

#[tokio::test]
async fn absent_records_are_one_gap_and_the_rest_confirmed() {
    let mut r = read(10, 0);
    let sink = sink_with((0..10).filter(|o| !(4..=5).contains(o)));
    let d = r
        .decide(&mut offsets_checker(), &sink, DueRule::Everything, 50, None)
        .await
        .expect("decided");
    assert_eq!((d.confirmed, d.lost, d.duplicates), (8, 2, 0));
    assert_eq!(d.present, vec![run(0, 3), run(6, 9)]);
    assert_eq!(d.absent, vec![run(4, 5)]);
    let gaps = r.take_gaps("a", chrono::Utc::now());
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert_eq!((gaps[0].first_offset, gaps[0].last_offset), (4, 5));
    assert_eq!(r.not_due(GRACE), NotDue::default());
    assert!(
        r.take_gaps("a", chrono::Utc::now()).is_empty(),
        "taken once"
    );
}

#[tokio::test]
async fn filtered_records_are_neither_asked_about_nor_lost() {
    let mut r = ClosedRange::new(tp(), 0, false);
    assert_eq!(r.ingest(0, None, expected(), 0).expect("ok"), None);
    let why = r
        .ingest(1, None, Tag::Filtered(FilterReason::Tombstone), 0)
        .expect("ok");
    assert_eq!(why, Some(FilterReason::Tombstone));
    assert_eq!(r.ingest(2, None, expected(), 0).expect("ok"), None);
    assert_eq!((r.consumed(), r.expected()), (3, 2));
    let d = r
        .decide(
            &mut offsets_checker(),
            &sink_with([0, 2]),
            DueRule::Everything,
            5,
            None,
        )
        .await
        .expect("decided");
    assert_eq!((d.confirmed, d.lost), (2, 0));
    assert!(d.absent.is_empty());
}

#[tokio::test]
async fn under_the_due_rule_only_records_below_a_commit_seen_grace_ago_are_decided() {
    let mut r = read(10, 0);
    // The pipeline's commit, 6, seen at t = 1000; records 6.. are lag.
    r.due_input(false, Some((1_000, 6)));
    let sink = sink_with(0..10);
    let at = DueRule::At { grace_ms: GRACE };
    let early = 1_000 + GRACE - 1;
    let d = r
        .decide(&mut offsets_checker(), &sink, at, early, None)
        .await
        .expect("nothing due");
    assert_eq!(d, Decision::default(), "not before grace has passed");
    let due = 1_000 + GRACE;
    let d = r
        .decide(&mut offsets_checker(), &sink, at, due, None)
        .await
        .expect("decided");
    assert_eq!((d.confirmed, d.lost), (6, 0));
    let left = r.not_due(GRACE);
    assert_eq!((left.records, left.first), (4, Some(6)));
}

#[tokio::test]
async fn without_a_position_source_grace_runs_from_the_append() {
    let mut r = read(3, 5_000);
    r.due_input(true, None);
    let sink = sink_with([]);
    let at = DueRule::At { grace_ms: GRACE };
    let d = r
        .decide(&mut offsets_checker(), &sink, at, 5_000 + GRACE - 1, None)
        .await
        .expect("nothing due");
    assert_eq!(d.lost, 0);
    assert_eq!(r.not_due(GRACE).due_at_ms, Some(5_000 + GRACE));
    let d = r
        .decide(&mut offsets_checker(), &sink, at, 5_000 + GRACE, None)
        .await
        .expect("decided");
    assert_eq!(d.lost, 3);
}

#[tokio::test]
async fn records_the_dead_letter_topic_names_are_dead_lettered_not_lost() {
    let mut r = read(6, 0);
    let sink = sink_with([0, 1, 2, 5]);
    let named = |seg: OffsetRun| runs::intersect(seg, &[run(3, 3)]);
    let dead = DeadLetters {
        named: &named,
        read_at_ms: 1_000,
    };
    let d = r
        .decide(
            &mut offsets_checker(),
            &sink,
            DueRule::Everything,
            2_000,
            Some(&dead),
        )
        .await
        .expect("decided");
    assert_eq!((d.confirmed, d.lost, d.dead_lettered), (4, 1, 1));
    let gaps = r.take_gaps("a", chrono::Utc::now());
    let lost: Vec<_> = gaps
        .iter()
        .filter(|g| g.state == crate::gap::GapState::Open)
        .map(|g| (g.first_offset, g.last_offset))
        .collect();
    assert_eq!(lost, vec![(4, 4)], "{gaps:?}");
}

#[tokio::test]
async fn a_sink_that_refuses_gives_no_verdict() {
    let mut r = read(4, 0);
    let sink = sink_with([]);
    sink.set_down(true);
    let e = r
        .decide(&mut offsets_checker(), &sink, DueRule::Everything, 0, None)
        .await
        .expect_err("unknown is not missing");
    assert!(matches!(e, ClosedRangeError::Sink { .. }), "{e}");
    assert!(r.take_gaps("a", chrono::Utc::now()).is_empty());
    assert_eq!(r.pending(), 4);
}

#[test]
fn a_record_of_an_unknown_schema_is_an_error_not_a_guess() {
    let mut r = ClosedRange::new(tp(), 0, false);
    let tag = Tag::Unresolved(Box::new(Unresolved {
        schema_id: 7,
        value: Box::new([]),
        key: None,
    }));
    let e = r.ingest(0, None, tag, 0).expect_err("unresolved");
    assert!(e.to_string().contains("schema id 7"), "{e}");
    assert_eq!(r.consumed(), 0);
}

#[tokio::test]
async fn keys_shared_by_records_need_a_row_each() {
    let mut r = ClosedRange::new(tp(), 0, true);
    for (o, k) in ["A", "A", "B", "A"].iter().enumerate() {
        r.ingest(o as Offset, None, keyed(k), 0).expect("ok");
    }
    let sink = MemorySink::new();
    for k in ["A", "A", "B"] {
        sink.insert_key(&Key::new([k]));
    }
    let mut checker = Checker::new(MatchStrategy::KeyColumns, 100, 1_000);
    if let Some(book) = checker.book_mut() {
        book.adopt(r.ledger());
    }
    let d = r
        .decide(&mut checker, &sink, DueRule::Everything, 0, None)
        .await
        .expect("decided");
    assert_eq!(
        (d.confirmed, d.lost),
        (3, 1),
        "three records of A, two rows"
    );
    let gaps = r.take_gaps("a", chrono::Utc::now());
    assert_eq!(gaps.len(), 1);
    assert!(
        gaps[0].shared_key,
        "the lost one's key is shared: which record is unknown"
    );
}
