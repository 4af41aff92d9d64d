//! Issue 34 item 7: a partition's log that no longer holds the auditor's position — truncated
//! below it (an unclean leader election) or the topic deleted and created again — at a
//! (re)assignment and while reading. The audit resumes where the new log diverged, lets the
//! old ledger's undecided records and followed keys go, keeps the confirmations (their rows
//! are in the sink), and says so (WARN, `gap_auditor_log_divergences_total`, `/api/status`).

use super::harness::*;
use crate::kafka::{Tagged, TailEvent};
use crate::record::Tag;
use crate::types::{Key, Offset};
use std::sync::Arc;

fn key(k: &str) -> Key {
    Key::new([k])
}

/// Keyed records of partition 0 from offset `first`, one per key.
fn keyed(first: Offset, keys: &[String]) -> Vec<Tagged> {
    keys.iter()
        .enumerate()
        .map(|(i, k)| Tagged {
            topic: Arc::from(TOPIC),
            partition: 0,
            offset: first + i as Offset,
            timestamp_ms: Some(1),
            tag: Tag::Expected { key: Some(key(k)) },
        })
        .collect()
}

fn keys(r: std::ops::Range<usize>) -> Vec<String> {
    r.map(|i| format!("k{i}")).collect()
}

fn set_log(h: &Harness, log: (Offset, Offset)) {
    h.kafka.watermarks.lock().expect("lock").insert(tp(0), log);
}

fn set_id(h: &Harness, id: &str) {
    h.kafka
        .topic_ids
        .lock()
        .expect("lock")
        .insert(TOPIC.to_string(), id.to_string());
}

fn divergences(h: &Harness, kind: &str) -> u64 {
    h.families
        .log_divergences
        .with_label_values(&[AUDIT, TOPIC, "0", kind])
        .get()
}

fn note(h: &mut Harness) -> Option<crate::status::DivergenceNote> {
    h.audit.publish();
    h.audit.io.status.snapshot()[0].partitions[0]
        .divergence
        .clone()
}

/// key_columns, records 0–9 (keys k0–k9) confirmed and stored; the partition is revoked
/// (a stop); the log now ends at 6 with the same topic id: truncated. The partition is
/// assigned at its stored 10, the fetch there is out of range, and it resumes at 6, not at
/// the log start (main: at 0, records 0–5 decided twice, each asking its key for a second
/// row: six false losses). New records at 6–7 reuse keys k6, k7: their rows are written
/// beside the old ones and confirm them; a new record at 8 with key k8 is not written and is
/// lost — exactly it.
#[tokio::test]
async fn a_log_truncated_below_the_stored_position_resumes_at_its_end() {
    let mut h = keyed_harness("");
    set_id(&h, "A");
    set_log(&h, (0, 0));
    h.audit.assign(vec![tp(0)]).await;
    h.audit.ingest(keyed(0, &keys(0..10)));
    for k in keys(0..10) {
        h.sink.insert_key(&key(&k));
    }
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_confirmed), 10);
    h.audit.revoke(&[tp(0)]).await;

    set_log(&h, (0, 6));
    // The fetch at the stored 10 is out of range: the broker's word that the log no longer
    // reaches it (a high watermark read at the assignment may lag a new leader's log end).
    let starts = h.audit.assign(vec![tp(0)]).await;
    assert_eq!(starts, vec![(tp(0), 10)]);
    h.audit.on_event(TailEvent::OffsetOutOfRange).await;
    assert_eq!(
        h.audit.parts[&tp(0)].ledger.next_offset(),
        6,
        "resumed at the divergence point"
    );
    assert_eq!(divergences(&h, "truncated"), 1);
    let n = note(&mut h).expect("status names the divergence");
    assert_eq!((n.kind, n.from, n.resumed_at), ("truncated", 10, 6));

    h.sink.insert_key(&key("k6"));
    h.sink.insert_key(&key("k7"));
    h.audit.on_event(TailEvent::Repositioned(1)).await;
    h.audit.ingest(keyed(6, &keys(6..9)));
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_confirmed), 12);
    assert_eq!(h.counter(|m| &m.records_lost), 1);
    let gaps: Vec<_> = h
        .stored_gaps()
        .iter()
        .map(|g| (g.first_offset, g.last_offset))
        .collect();
    assert_eq!(gaps, vec![(8, 8)]);
}

/// The topic id changed (deleted and created again) while the new log already reaches past
/// the stored position: only the id tells. The partition is read from the new log's start
/// (main: from the stored 10, the new records 0–9 never audited: a loss among them missed).
#[tokio::test]
async fn a_recreated_topic_is_read_from_its_new_start_wherever_its_end_is() {
    let mut h = harness("");
    set_id(&h, "A");
    h.assign_and_read((0, 0), expected(0..10)).await;
    h.in_sink(0..10);
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    h.audit.revoke(&[tp(0)]).await;

    set_id(&h, "B");
    set_log(&h, (0, 25));
    let starts = h.audit.assign(vec![tp(0)]).await;
    assert_eq!(starts, vec![(tp(0), 0)], "the new log from its start");
    assert_eq!(divergences(&h, "recreated"), 1);
    let n = note(&mut h).expect("status names the divergence");
    assert_eq!((n.kind, n.from, n.resumed_at), ("recreated", 10, 0));
    // The new id is what the next start compares against: no second divergence.
    h.audit.round().await;
    h.audit.revoke(&[tp(0)]).await;
    let starts = h.audit.assign(vec![tp(0)]).await;
    assert_eq!(starts, vec![(tp(0), 0)]);
    assert_eq!(divergences(&h, "recreated"), 1);
}

/// An id the broker does not give (or a lookup that failed) is never a change: the same
/// start as before ids were read, the stored position inside the log.
#[tokio::test]
async fn an_unknown_topic_id_changes_nothing() {
    let mut h = harness("");
    set_id(&h, "A");
    h.assign_and_read((0, 0), expected(0..10)).await;
    h.in_sink(0..10);
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    h.audit.revoke(&[tp(0)]).await;
    h.kafka.topic_ids.lock().expect("lock").clear();
    set_log(&h, (0, 25));
    let starts = h.audit.assign(vec![tp(0)]).await;
    assert_eq!(starts, vec![(tp(0), 10)]);
    assert_eq!(
        divergences(&h, "recreated") + divergences(&h, "truncated"),
        0
    );
    assert_eq!(note(&mut h), None);
}

/// While reading: records 1000–1009 decided (confirmed), the log is truncated to end at
/// 1005 (same id) and the fetch at 1010 is out of range. The partition resumes at 1005, not
/// at the log start (main: at 0, reading 0–1004 again as new records).
#[tokio::test]
async fn a_truncation_seen_while_reading_resumes_at_the_new_log_end() {
    let mut h = harness("");
    set_id(&h, "A");
    h.assign_and_read((0, 1000), expected(1000..1010)).await;
    h.in_sink(1000..1010);
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_confirmed), 10);
    set_log(&h, (0, 1005));
    h.audit.on_event(TailEvent::OffsetOutOfRange).await;
    assert_eq!(h.audit.parts[&tp(0)].ledger.next_offset(), 1005);
    assert_eq!(divergences(&h, "truncated"), 1);
    // Records 1005.. of the new log are new records, audited.
    h.audit.on_event(TailEvent::Repositioned(1)).await;
    h.audit
        .on_event(TailEvent::Records(expected(1005..1008)))
        .await;
    assert_eq!(h.audit.parts[&tp(0)].ledger.pending(), 3);
}

/// While reading, records read but not decided yet below the new log end are read again
/// (they are still there); the ones beyond it are gone and leave the key book without a
/// verdict. Records 0–3 confirmed, 4–9 read and pending; the log now ends at 6: reading
/// resumes at the settled 4 (main: at 0, records 0–3 decided twice).
#[tokio::test]
async fn undecided_records_below_the_new_log_end_are_read_again() {
    let mut h = keyed_harness("");
    set_log(&h, (0, 0));
    h.audit.assign(vec![tp(0)]).await;
    h.audit.ingest(keyed(0, &keys(0..4)));
    for k in keys(0..4) {
        h.sink.insert_key(&key(&k));
    }
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_confirmed), 4);
    h.audit.ingest(keyed(4, &keys(4..10)));
    assert_eq!(h.audit.checker.book().expect("book").total_pending(), 6);
    set_log(&h, (0, 6));
    h.audit.on_event(TailEvent::OffsetOutOfRange).await;
    assert_eq!(h.audit.parts[&tp(0)].ledger.next_offset(), 4);
    assert_eq!(
        h.audit.checker.book().expect("book").total_pending(),
        0,
        "the old ledger's pending keys left the book"
    );
    h.audit.on_event(TailEvent::Repositioned(1)).await;
    h.audit
        .on_event(TailEvent::Records(keyed(4, &keys(4..6))))
        .await;
    assert_eq!(h.audit.parts[&tp(0)].ledger.pending(), 2);
    assert_eq!(h.audit.checker.book().expect("book").total_pending(), 2);
    assert_eq!(h.counter(|m| &m.records_lost), 0);
}

/// Missing records at and beyond the divergence point leave the ledger (their records are
/// gone from Kafka: never re-checked, and their gap says they cannot be replayed); those
/// below it are still followed. Records 0–9, 2 and 8 missing; truncated to end at 6.
#[tokio::test]
async fn missing_records_beyond_the_divergence_point_are_no_longer_followed() {
    let mut h = harness("");
    h.assign_and_read((0, 0), expected(0..10)).await;
    h.in_sink((0..10).filter(|o| *o != 2 && *o != 8));
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_lost), 2);
    h.audit.revoke(&[tp(0)]).await;
    set_log(&h, (0, 6));
    let starts = h.audit.assign(vec![tp(0)]).await;
    assert_eq!(starts, vec![(tp(0), 10)]);
    h.audit.on_event(TailEvent::OffsetOutOfRange).await;
    let ledger = &h.audit.parts[&tp(0)].ledger;
    assert_eq!(ledger.next_offset(), 6);
    assert_eq!(ledger.missing(), 1, "offset 2 still followed, 8 not");
    assert_eq!(ledger.missing_runs().len(), 1);
    h.audit.persist().await;
    let gaps = h.stored_gaps();
    let g8 = gaps.iter().find(|g| g.first_offset == 8).expect("gap 8");
    assert!(
        g8.unrecoverable_at.is_some(),
        "the gone gap says its records cannot be replayed: {g8:?}"
    );
    let g2 = gaps.iter().find(|g| g.first_offset == 2).expect("gap 2");
    assert!(g2.unrecoverable_at.is_none(), "{g2:?}");
    // Nothing was counted again.
    assert_eq!(h.counter(|m| &m.records_lost), 2);
}

/// Gap ids across a divergence (review of issue 34 item 7): a gap the old log left at offset
/// 8 (its record lost, acknowledged by an operator, then gone with the truncation) and a new
/// loss at offset 8 of the new log are two gaps. With the id made of (audit, topic,
/// partition, first offset) alone, the new gap's store write landed on the old gap's row:
/// the old loss vanished from the report (its `unrecoverable_at` wiped), and the new one
/// took the operator's acknowledgement (its alert silenced) and the old extent.
#[tokio::test]
async fn a_new_gap_at_an_offset_of_a_gone_gap_is_a_gap_of_its_own() {
    let mut h = harness("");
    set_id(&h, "A");
    h.assign_and_read((0, 0), expected(0..10)).await;
    h.in_sink((0..10).filter(|o| *o != 8));
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_lost), 1);
    let old = h.stored_gaps();
    assert_eq!(old.len(), 1);
    assert!(h.store.ack(&old[0].id, "known outage").expect("ack"));
    h.audit.round().await;
    h.audit.revoke(&[tp(0)]).await;

    set_log(&h, (0, 6));
    h.audit.assign(vec![tp(0)]).await;
    h.audit.on_event(TailEvent::OffsetOutOfRange).await;
    assert_eq!(h.audit.parts[&tp(0)].ledger.next_offset(), 6);
    h.audit.on_event(TailEvent::Repositioned(1)).await;
    // New records 6–9; the sink holds the old log's rows at 6, 7 and 9 (offset_columns
    // cannot tell them apart, docs/SEMANTICS.md); the new record at 8 is lost.
    h.audit.on_event(TailEvent::Records(expected(6..10))).await;
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    h.audit.persist().await;
    assert_eq!(h.counter(|m| &m.records_lost), 2);

    let gaps = h.stored_gaps();
    let at8: Vec<_> = gaps.iter().filter(|g| g.first_offset == 8).collect();
    assert_eq!(at8.len(), 2, "the old gap and the new one: {gaps:#?}");
    let acked = at8
        .iter()
        .find(|g| g.id == old[0].id)
        .expect("the old gap keeps its id");
    assert_eq!(acked.state, crate::gap::GapState::Acknowledged);
    assert_eq!(acked.ack_reason.as_deref(), Some("known outage"));
    let new = at8
        .iter()
        .find(|g| g.id != old[0].id)
        .expect("the new gap has an id of its own");
    assert_eq!(new.state, crate::gap::GapState::Open, "{new:?}");
    assert_eq!((new.last_offset, new.missing_records), (8, 1));
    let reported: u64 = gaps.iter().map(|g| g.missing_records).sum();
    assert_eq!(reported, 2, "each lost record in exactly one gap");
}

/// The same without an acknowledgement: the old gap, gone with the truncation, stays
/// `unrecoverable` with its record counted, beside the new loss at its offset.
#[tokio::test]
async fn a_gone_gap_is_not_overwritten_by_a_new_gap_at_its_offset() {
    let mut h = harness("");
    set_id(&h, "A");
    h.assign_and_read((0, 0), expected(0..10)).await;
    h.in_sink((0..10).filter(|o| *o != 8));
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    h.audit.revoke(&[tp(0)]).await;
    set_log(&h, (0, 6));
    h.audit.assign(vec![tp(0)]).await;
    h.audit.on_event(TailEvent::OffsetOutOfRange).await;
    h.audit.on_event(TailEvent::Repositioned(1)).await;
    h.audit.on_event(TailEvent::Records(expected(6..10))).await;
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    h.audit.persist().await;
    // A restart: the new log's gaps keep their epoch (stored with the progress).
    h.audit.revoke(&[tp(0)]).await;
    h.audit.assign(vec![tp(0)]).await;
    h.audit.round().await;
    h.audit.persist().await;
    let gaps = h.stored_gaps();
    let mut at8: Vec<_> = gaps
        .iter()
        .filter(|g| g.first_offset == 8)
        .map(|g| (g.id.clone(), g.state, g.missing_records))
        .collect();
    at8.sort_by(|a, b| a.0.cmp(&b.0));
    use crate::gap::GapState::{Open, Unrecoverable};
    assert_eq!(
        at8,
        vec![
            ("a:t:0:8".to_string(), Unrecoverable, 1),
            ("a:t:0:8@1".to_string(), Open, 1),
        ],
        "{gaps:#?}"
    );
    assert_eq!(h.counter(|m| &m.records_lost), 2);
    assert_eq!(
        h.audit.parts[&tp(0)].ledger.epoch(),
        1,
        "the epoch survives a restart"
    );
}

/// A topic id lookup that fails at an assignment (review of issue 34 item 7): the stored id
/// must not be carried onto a log it was never checked against. The topic is recreated
/// while the auditor is stopped and its new log already reaches past the stored position;
/// the lookup fails at the next start, so nothing is seen (documented: records below the
/// position skipped). The partition then reads the new log from 10 and confirms records
/// 10–11. Had the old id "A" been kept with that progress, the next start (the lookup
/// working again, id "B") would read "recreated", resume at 0 and decide records 0–11 a
/// second time: under key_columns records 10 and 11 ask their keys for a second row, two
/// false losses.
#[tokio::test]
async fn an_id_that_could_not_be_read_is_not_kept_for_a_log_it_was_not_checked_on() {
    let mut h = keyed_harness("");
    set_id(&h, "A");
    set_log(&h, (0, 0));
    h.audit.assign(vec![tp(0)]).await;
    h.audit.ingest(keyed(0, &keys(0..10)));
    for k in keys(0..10) {
        h.sink.insert_key(&key(&k));
    }
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    h.audit.persist().await;
    h.audit.revoke(&[tp(0)]).await;

    // Recreated; its new records n0–n11 are all in the sink; the id lookup fails.
    let new: Vec<String> = (0..12).map(|i| format!("n{i}")).collect();
    for k in &new {
        h.sink.insert_key(&key(k));
    }
    h.kafka.topic_ids.lock().expect("lock").clear();
    set_log(&h, (0, 12));
    let starts = h.audit.assign(vec![tp(0)]).await;
    assert_eq!(
        starts,
        vec![(tp(0), 10)],
        "nothing tells: the stored position"
    );
    h.audit.ingest(keyed(10, &new[10..12]));
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    h.audit.persist().await;
    assert_eq!(h.counter(|m| &m.records_confirmed), 12);
    h.audit.revoke(&[tp(0)]).await;

    // The lookup works again.
    set_id(&h, "B");
    let starts = h.audit.assign(vec![tp(0)]).await;
    assert_eq!(
        starts,
        vec![(tp(0), 12)],
        "the position was taken on this log: no divergence"
    );
    assert_eq!(divergences(&h, "recreated"), 0);
    h.audit.ingest(keyed(12, &[]));
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_lost), 0);
}

/// offset_columns without topic_column (review of issue 34 items 4 and 7): after a
/// truncation, the table holds the old log's rows at offsets the new log has not reached
/// yet. They are this topic's own rows, not another topic's; read as another writer's they
/// held every verdict of the audit for good (each look after a sink outage or a restart
/// finds them "at or beyond the log end"): the new log's loss at 12, beyond the old rows,
/// was never reported, where docs/SEMANTICS.md promises exact verdicts there.
#[tokio::test]
async fn a_truncated_partitions_own_rows_are_not_another_topics() {
    let mut h = harness("");
    h.sink.report_extent(true);
    set_id(&h, "A");
    h.assign_and_read((0, 0), expected(0..10)).await;
    set_log(&h, (0, 10));
    h.in_sink(0..10);
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(
        h.counter(|m| &m.records_confirmed),
        10,
        "the first look found the table clear"
    );
    set_log(&h, (0, 6));
    h.audit.on_event(TailEvent::OffsetOutOfRange).await;
    assert_eq!(h.audit.parts[&tp(0)].ledger.next_offset(), 6);
    h.audit.on_event(TailEvent::Repositioned(1)).await;
    // A sink outage: the table is looked at again once it answers.
    h.sink.set_down(true);
    h.audit.round().await;
    h.sink.set_down(false);
    h.audit.round().await;
    assert_eq!(h.audit.shared_table_hold(), None, "after an outage");
    // A restart before the new log reaches the old position: looked at again.
    h.audit.persist().await;
    h.audit.revoke(&[tp(0)]).await;
    h.audit.shared.table = super::super::shared_table::SharedTable::Pending;
    h.audit.assign(vec![tp(0)]).await;
    h.audit.round().await;
    assert_eq!(h.audit.shared_table_hold(), None, "after a restart");
    // The new log: 6–14; its rows 10–14 are written but 12's.
    set_log(&h, (0, 15));
    h.audit.on_event(TailEvent::Records(expected(6..15))).await;
    h.in_sink((10..15).filter(|o| *o != 12));
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_lost), 1);
}

/// Review of issue 41 item 1: acknowledgements are applied to the ledger by offset. After a
/// restart every acknowledgement is read again, and the old log's acknowledged gap at 8
/// took the new log's gap at 8 (`@1`, never acknowledged) out of the ledger: its record
/// left `missing`, the gauges and completeness while its row stayed open.
#[tokio::test]
async fn an_old_logs_acknowledgement_never_takes_the_new_logs_gap_at_its_offset() {
    let mut h = harness("");
    set_id(&h, "A");
    h.assign_and_read((0, 0), expected(0..10)).await;
    h.in_sink((0..10).filter(|o| *o != 8));
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    let old = h.stored_gaps();
    assert!(h.store.ack(&old[0].id, "known outage").expect("ack"));
    h.audit.round().await;
    h.audit.revoke(&[tp(0)]).await;
    set_log(&h, (0, 6));
    h.audit.assign(vec![tp(0)]).await;
    h.audit.on_event(TailEvent::OffsetOutOfRange).await;
    h.audit.on_event(TailEvent::Repositioned(1)).await;
    h.audit.on_event(TailEvent::Records(expected(6..10))).await;
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    h.audit.persist().await;
    assert_eq!(h.audit.parts[&tp(0)].ledger.missing(), 1);
    // A restart: every acknowledgement is read again.
    h.audit.revoke(&[tp(0)]).await;
    h.audit.assign(vec![tp(0)]).await;
    h.audit.round().await;
    h.audit.persist().await;
    let l = &mut h.audit.parts.get_mut(&tp(0)).expect("part").ledger;
    assert_eq!(l.missing(), 1, "the new log's loss left the ledger");
    assert_eq!(l.completeness().blocking_gaps, 1);
    let new = h
        .stored_gaps()
        .into_iter()
        .find(|g| g.id == "a:t:0:8@1")
        .expect("the new gap");
    assert_eq!(new.state, crate::gap::GapState::Open);
}

/// Review of issue 41 item 1: a log truncated inside the overflow gap (`max_open_gaps`). The
/// overflow gap keeps its span and count (which of its records lay beyond the cut is not
/// known) and retires; the gaps beyond the cut are no longer followed; the new log's gaps
/// fold into an overflow gap of their own epoch; every row says no more records missing
/// than its span holds, and the gauges equal a recount of the rows, before and after a
/// restart.
#[tokio::test]
async fn a_log_truncated_inside_the_overflow_gap_keeps_every_row_consistent() {
    let mut h = harness("max_open_gaps = 5");
    set_id(&h, "A");
    // Twenty isolated losses (odd offsets of 0..41): overflow gap 1..=31 (16), 33..39.
    h.assign_and_read((0, 0), expected(0..41)).await;
    h.in_sink((0..41).filter(|o| o % 2 == 0));
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    h.audit.revoke(&[tp(0)]).await;
    set_log(&h, (0, 10));
    h.audit.assign(vec![tp(0)]).await;
    h.audit.on_event(TailEvent::OffsetOutOfRange).await;
    assert_eq!(h.audit.parts[&tp(0)].ledger.next_offset(), 10);
    h.audit.on_event(TailEvent::Repositioned(1)).await;
    // The new log: 10..60, every record from 42 on lost (the sink holds the old rows
    // below 41 at their offsets).
    h.audit.on_event(TailEvent::Records(expected(10..60))).await;
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    h.audit.round().await;
    h.audit.persist().await;
    let check = |h: &mut Harness, when: &str| {
        let rows = h.stored_gaps();
        for g in &rows {
            assert!(
                g.missing_records <= (g.last_offset - g.first_offset + 1) as u64,
                "{when}: {g:?}"
            );
        }
        let folded: Vec<_> = rows
            .iter()
            .filter(|g| g.cause == crate::gap::GapCause::Folded)
            .map(|g| {
                (
                    g.id.clone(),
                    g.first_offset,
                    g.last_offset,
                    g.missing_records,
                )
            })
            .collect();
        assert!(
            folded.contains(&("a:t:0:1".to_string(), 1, 31, 16)),
            "{when}: the old log's overflow gap as it stood: {folded:?}"
        );
        let counted: Vec<_> = rows
            .iter()
            .filter(|g| {
                g.missing_records > 0
                    && matches!(
                        g.state,
                        crate::gap::GapState::Open | crate::gap::GapState::Unrecoverable
                    )
                    // The old log's gaps at and beyond the cut are no longer followed.
                    && g.unrecoverable_at.is_none_or(|_| g.first_offset < 10 || g.id.contains('@'))
            })
            .collect();
        let l = &mut h.audit.parts.get_mut(&tp(0)).expect("part").ledger;
        let gauges = l.gauges();
        let want: u64 = counted.iter().map(|g| g.missing_records).sum();
        assert_eq!(gauges.missing, want, "{when}: {rows:#?}");
        assert_eq!(l.missing(), want, "{when}");
    };
    check(&mut h, "after the truncation");
    h.audit.revoke(&[tp(0)]).await;
    h.audit.assign(vec![tp(0)]).await;
    h.audit.round().await;
    check(&mut h, "after a restart");
}
