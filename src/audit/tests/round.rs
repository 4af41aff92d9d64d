//! The round: due → verify → verdicts, on the in-memory sink and a clock the test moves.

use super::harness::*;

#[tokio::test]
async fn nothing_is_asked_before_grace_has_passed() {
    let mut h = harness("");
    h.assign_and_read((0, 0), expected(0..10)).await;
    h.in_sink(0..10);
    h.clock.advance(GRACE_MS - 1);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_confirmed), 0);
    assert_eq!(h.audit.parts[&tp(0)].ledger.pending(), 10);
    assert_eq!(h.audit.parts[&tp(0)].ledger.settled(), 0);
}

#[tokio::test]
async fn present_records_are_confirmed_and_absent_ones_become_one_gap() {
    let mut h = harness("");
    h.assign_and_read((0, 0), expected(0..10)).await;
    h.in_sink((0..10).filter(|o| !(4..=5).contains(o)));
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_confirmed), 8);
    assert_eq!(h.counter(|m| &m.records_lost), 2);
    let gaps = h.stored_gaps();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert_eq!((gaps[0].first_offset, gaps[0].last_offset), (4, 5));
    assert_eq!(h.audit.parts[&tp(0)].ledger.settled(), 10);
    assert_eq!(h.commits().last(), Some(&vec![(tp(0), 10)]));
}

#[tokio::test]
async fn an_unreachable_sink_decides_nothing_and_moves_no_offset() {
    let mut h = harness("");
    h.assign_and_read((0, 0), expected(0..10)).await;
    h.sink.set_down(true);
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_lost), 0);
    assert!(h.stored_gaps().is_empty());
    assert_eq!(h.audit.parts[&tp(0)].ledger.settled(), 0);
    let up = h.families.sink_up.with_label_values(&[AUDIT]).get();
    assert_eq!(up, 0);
    // The sink answers again: the same records are decided then, once.
    h.sink.set_down(false);
    h.in_sink(0..10);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_confirmed), 10);
    assert_eq!(h.families.sink_up.with_label_values(&[AUDIT]).get(), 1);
    assert_eq!(h.commits().last(), Some(&vec![(tp(0), 10)]));
}

#[tokio::test]
async fn with_a_pipeline_group_time_alone_never_makes_a_record_due() {
    let mut h = harness(r#"pipeline_group = "flink""#);
    h.assign_and_read((0, 0), expected(0..10)).await;
    // The group has no commit yet: lag, not loss, however long it lasts.
    h.clock.advance(10 * GRACE_MS);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_lost), 0);
    let up = || {
        h.families
            .pipeline_group_up
            .with_label_values(&[AUDIT])
            .get()
    };
    assert_eq!(up(), 0, "verdicts are held back");
    // The group commits past offset 6; `grace` later records 0..6 are due.
    h.kafka
        .pipeline
        .lock()
        .expect("lock")
        .as_mut()
        .expect("pipeline group")
        .insert(tp(0), Some(6));
    h.audit.round().await;
    assert_eq!(up(), 1);
    assert_eq!(h.counter(|m| &m.records_lost), 0, "not before grace");
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_lost), 6);
    assert_eq!(h.audit.parts[&tp(0)].ledger.settled(), 6);
    assert_eq!(h.audit.parts[&tp(0)].ledger.pending(), 4);
}
