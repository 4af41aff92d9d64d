//! The round with a dead-letter topic: verdicts wait for the dead-letter reader, and the
//! records it names are dead-lettered, not lost.

use super::harness::*;
use crate::gap::GapState;
use crate::kafka::dead_letters::DeadLetters;
use crate::types::TopicPartition;
use std::sync::Arc;

#[tokio::test]
async fn verdicts_wait_until_the_dead_letter_reader_has_read_past_the_due_moment() {
    let mut h = harness("");
    let d = Arc::new(DeadLetters::default());
    h.audit.io.dead_letters = Some(d.clone());
    let read_at = h.audit.io.clock.now_ms();
    h.assign_and_read((0, 0), expected(0..10)).await;
    h.in_sink((0..10).filter(|o| !(4..=6).contains(o)));
    h.clock.advance(GRACE_MS + 1);
    // The reader caught up only at the moment the records were read: before they were due.
    d.mark_caught_up(read_at);
    h.audit.round().await;
    assert_eq!(
        h.counter(|m| &m.records_confirmed),
        0,
        "nothing decided yet"
    );
    assert_eq!(h.counter(|m| &m.records_lost), 0);
    assert_eq!(h.audit.parts[&tp(0)].ledger.pending(), 10);
    // It reads the dead letters of 4 and 5, then catches up past the due moment.
    {
        let mut index = d.lock();
        index.insert(TopicPartition::new(TOPIC, 0), 4);
        index.insert(TopicPartition::new(TOPIC, 0), 5);
        index.insert(TopicPartition::new("other", 0), 6);
    }
    d.mark_caught_up(h.audit.io.clock.now_ms());
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_confirmed), 7);
    assert_eq!(h.counter(|m| &m.records_lost), 1, "only 6 is lost");
    assert_eq!(h.counter(|m| &m.records_dead_lettered), 2);
    let mut gaps: Vec<_> = h
        .stored_gaps()
        .into_iter()
        .map(|g| (g.first_offset, g.last_offset, g.state, g.missing_records))
        .collect();
    gaps.sort_by_key(|g| g.0);
    assert_eq!(
        gaps,
        vec![(4, 5, GapState::DeadLettered, 2), (6, 6, GapState::Open, 1)]
    );
    // Decided for good: the index forgets what can no longer change a verdict, but keeps
    // what the open gap may still need.
    assert!(d.lock().named_on(&TopicPartition::new(TOPIC, 0)).is_empty());
    d.lock().insert(TopicPartition::new(TOPIC, 0), 6);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_dead_lettered), 3);
    assert_eq!(
        h.stored_gaps()
            .iter()
            .filter(|g| g.state == GapState::Open)
            .count(),
        0
    );
}

/// Review of issue 37: the dead_lettered gap the next dead-lettered record extends is
/// written with the ledger, so a restart goes on extending it (it was not persisted: a
/// crash split one gap in two at the settled offset).
#[tokio::test]
async fn the_dead_lettered_tail_is_stored_with_the_ledger() {
    let mut h = harness("");
    let d = Arc::new(DeadLetters::default());
    h.audit.io.dead_letters = Some(d.clone());
    h.assign_and_read((0, 0), expected(0..10)).await;
    // A first round stores the whole ledger; the next one writes only its changes.
    h.audit.round().await;
    h.in_sink(0..8);
    {
        let mut index = d.lock();
        index.insert(TopicPartition::new(TOPIC, 0), 8);
        index.insert(TopicPartition::new(TOPIC, 0), 9);
    }
    h.clock.advance(GRACE_MS + 1);
    d.mark_caught_up(h.audit.io.clock.now_ms());
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_dead_lettered), 2);
    let stored = h.store.load_progress(AUDIT).expect("progress");
    let p = stored
        .iter()
        .find(|p| p.partition == 0)
        .expect("partition 0");
    let (snap, bad) = crate::ledger::Snapshot::from_stored(&p.ledger);
    assert!(bad.is_empty(), "{bad:?}");
    assert_eq!(snap.dead_tail, Some(8), "{}", p.ledger);
}
