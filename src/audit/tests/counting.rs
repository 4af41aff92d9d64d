//! Counting: each offset once, by what it is.

use super::harness::*;
use crate::record::FilterReason;

#[tokio::test]
async fn a_redelivered_record_is_counted_once() {
    let mut h = harness("");
    h.assign_and_read((0, 0), expected(0..5)).await;
    // A re-positioning delivers the same offsets again.
    h.audit.ingest(expected(0..5));
    h.audit.ingest(expected(3..7));
    assert_eq!(h.counter(|m| &m.records_consumed), 7);
    assert_eq!(h.counter(|m| &m.records_expected), 7);
    assert_eq!(h.audit.parts[&tp(0)].ledger.pending(), 7);
}

#[tokio::test]
async fn filtered_records_are_counted_by_reason_and_never_expected() {
    let mut h = harness("");
    h.assign_and_read(
        (0, 0),
        vec![
            filtered(0, FilterReason::Filter),
            filtered(1, FilterReason::Tombstone),
            filtered(2, FilterReason::Tombstone),
        ],
    )
    .await;
    h.audit.ingest(expected(3..4));
    assert_eq!(h.counter(|m| &m.records_consumed), 4);
    assert_eq!(h.counter(|m| &m.records_expected), 1);
    let by = |r: FilterReason| {
        h.families
            .records_filtered
            .with_label_values(&[AUDIT, TOPIC, "0", r.as_str()])
            .get()
    };
    assert_eq!(by(FilterReason::Filter), 1);
    assert_eq!(by(FilterReason::Tombstone), 2);
    // A reason that never occurred has no series at all.
    let page = h.families.render();
    assert!(!page.contains(r#"reason="undecodable""#), "{page}");
}

#[tokio::test]
async fn records_of_a_partition_not_assigned_are_not_counted() {
    let mut h = harness("");
    h.audit.ingest(expected(0..5));
    assert!(
        !h.families
            .render()
            .contains("gap_auditor_records_consumed_total{")
    );
}

#[tokio::test]
async fn verdicts_reach_the_counters_once_and_series_appear_when_first_reported() {
    let mut h = harness("");
    h.assign_and_read((0, 0), expected(0..4)).await;
    let page = h.families.render();
    assert!(!page.contains("gap_auditor_records_lost_total{"), "{page}");
    assert!(!page.contains("gap_auditor_sink_queries_total{"), "{page}");
    h.in_sink(0..4);
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_confirmed), 4);
    assert_eq!(h.counter(|m| &m.records_lost), 0);
    let page = h.families.render();
    assert!(page.contains(r#"gap_auditor_sink_queries_total{audit="a",result="ok"}"#));
    assert!(!page.contains(r#"result="error""#), "{page}");
}
