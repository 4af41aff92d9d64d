//! The round: due → verify → verdicts, on the in-memory sink and a clock the test moves.

use super::harness::*;
use crate::types::Offset;
use std::time::Duration;

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
    pipeline_commits(&h, 6);
    h.audit.round().await;
    assert_eq!(up(), 1);
    assert_eq!(h.counter(|m| &m.records_lost), 0, "not before grace");
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_lost), 6);
    assert_eq!(h.audit.parts[&tp(0)].ledger.settled(), 6);
    assert_eq!(h.audit.parts[&tp(0)].ledger.pending(), 4);
}

#[tokio::test]
async fn commits_that_disappear_hold_verdicts_and_report_the_group_down() {
    let mut h = harness(r#"pipeline_group = "flink""#);
    h.assign_and_read((0, 0), expected(0..10)).await;
    h.in_sink(0..8);
    let up = || {
        h.families
            .pipeline_group_up
            .with_label_values(&[AUDIT])
            .get()
    };
    pipeline_commits(&h, 6);
    h.audit.round().await;
    assert_eq!(up(), 1);
    // The group is deleted (or expires) before `grace` has passed since that commit.
    pipeline_loses_commits(&h);
    h.audit.round().await;
    assert_eq!(up(), 0, "the vanished commits are reported");
    let hold = h.audit.watch.pipeline.hold.clone().expect("a reason");
    assert!(
        hold.contains("disappeared") && hold.contains("last commit seen 6"),
        "{hold}"
    );
    // However long it lasts, nothing is decided: not even what the old commit passed.
    h.clock.advance(10 * GRACE_MS);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_confirmed), 0);
    assert_eq!(h.counter(|m| &m.records_lost), 0);
    assert_eq!(up(), 0);
    // The pipeline commits again: verdicts resume, `grace` after the new commit.
    pipeline_commits(&h, 10);
    h.audit.round().await;
    assert_eq!(up(), 1);
    assert_eq!(h.audit.watch.pipeline.hold, None);
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_confirmed), 8);
    assert_eq!(h.counter(|m| &m.records_lost), 2);
}

/// Makes the pipeline group of a `pipeline_group` harness answer "no commit" on
/// partition 0 (deleted, or expired).
fn pipeline_loses_commits(h: &Harness) {
    h.kafka
        .pipeline
        .lock()
        .expect("lock")
        .as_mut()
        .expect("pipeline group")
        .insert(tp(0), None);
}

/// Makes the pipeline group of a `pipeline_group` harness commit `to` on partition 0.
fn pipeline_commits(h: &Harness, to: Offset) {
    h.kafka
        .pipeline
        .lock()
        .expect("lock")
        .as_mut()
        .expect("pipeline group")
        .insert(tp(0), Some(to));
}

#[tokio::test]
async fn a_round_just_before_records_fall_due_waits_for_them_and_no_longer() {
    // verify_interval 1 s: a round waits at most 100 ms.
    let mut h = harness("pipeline_group = \"flink\"\nverify_interval = \"1s\"");
    h.assign_and_read((0, 0), expected(0..10)).await;
    h.in_sink(0..10);
    assert_eq!(h.audit.due_soon(), None, "no commit: nothing can fall due");
    pipeline_commits(&h, 10);
    h.audit.round().await;
    // The commit was seen now: its records fall due GRACE_MS later.
    h.clock.advance(GRACE_MS - 150);
    assert_eq!(h.audit.due_soon(), None, "150 ms ahead is beyond the wait");
    h.clock.advance(60);
    assert_eq!(h.audit.due_soon(), Some(Duration::from_millis(91)));
    // A round that did not wait would decide nothing: the records are not due yet.
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_confirmed), 0);
    // Where the wait ends, they are.
    h.clock.advance(91);
    assert_eq!(h.audit.due_soon(), None, "due now: the round runs at once");
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_confirmed), 10);
    assert_eq!(h.audit.due_soon(), None, "nothing pending");
}

#[tokio::test]
async fn without_a_pipeline_group_the_wait_follows_when_records_were_seen() {
    let mut h = harness("verify_interval = \"10s\"");
    h.assign_and_read((0, 0), expected(0..10)).await;
    h.in_sink(0..10);
    // A first round (nothing due yet) sets the ledger's rule.
    h.audit.round().await;
    // verify_interval 10 s: the wait is capped at 250 ms.
    h.clock.advance(GRACE_MS - 300);
    assert_eq!(h.audit.due_soon(), None);
    h.clock.advance(100);
    assert_eq!(h.audit.due_soon(), Some(Duration::from_millis(201)));
    h.clock.advance(201);
    assert_eq!(h.audit.due_soon(), None);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_confirmed), 10);
}
