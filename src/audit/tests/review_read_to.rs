//! Review of issue 35 (positions): librdkafka's application position is not "what was
//! delivered". `rd_kafka_consume_batch_queue` (the thread's queue read, `queue.rs`) moves a
//! partition's position to `offset + 1` of every message it returns, error messages included
//! (librdkafka 2.12.1, rdkafka_queue.c `rd_kafka_q_serve_rkmessages`, the loop after the
//! batch). A consumer error carries the partition's fetch offset F (rdkafka_offset.c
//! `rd_kafka_offset_reset` for ERR__AUTO_OFFSET_RESET; rdkafka_fetcher.c for
//! TOPIC_AUTHORIZATION_FAILED and every "default" fetch error): the position becomes F + 1
//! though no record at F was ever fetched. The tailing thread reports it
//! (`report_positions`, every 500 ms) unless the partition was restarted first.
//!
//! These tests feed the audit loop the event sequence the tailing thread produced then.
//! The fix is on both sides: the thread no longer trusts a partition's position after an
//! error message of it until a record of it follows (`kafka/tail/read_to.rs`), and the audit
//! drops the positions of a partition it re-positioned until the thread says it served the
//! re-positioning (`TailEvent::Repositioned`, `audit/read_to.rs`) — a position asked for
//! before then may be the stopped fetcher's, whatever the thread knew of it.

use super::harness::*;
use crate::kafka::TailEvent;

/// The topic is deleted and recreated (its id changes) while the auditor reads at 1010:
/// the fetch at 1010 is out of range, the thread reports
/// OffsetOutOfRange, and before the audit's Reposition reaches it (the audit reads the
/// watermarks of every partition and writes the store first) its next position report
/// carries librdkafka's position 1011 (the error's offset + 1). The audit restarts the
/// partition at the log start (0) with a new ledger, then applies the stale position:
/// the new ledger jumps to 1011 and every record of the new log below it is "re-delivered"
/// and ignored — never expected, never checked, never missing. Silent loss of the whole
/// re-read.
#[tokio::test]
async fn review_a_position_reported_after_an_out_of_range_error_skips_the_reread_log() {
    let mut h = harness("");
    let set_id = |h: &Harness, id: &str| {
        h.kafka
            .topic_ids
            .lock()
            .expect("lock")
            .insert(TOPIC.to_string(), id.to_string())
    };
    set_id(&h, "A");
    h.assign_and_read((0, 1000), expected(1000..1010)).await;
    h.audit
        .on_event(TailEvent::ReadTo(vec![(tp(0), 1010)]))
        .await;
    // The log now ends at 5: a new topic under the old name (a truncation resumes at the
    // log end instead: `divergence.rs`).
    set_id(&h, "B");
    h.kafka
        .watermarks
        .lock()
        .expect("lock")
        .insert(tp(0), (0, 5));
    h.audit.on_event(TailEvent::OffsetOutOfRange).await;
    assert_eq!(
        h.audit.parts[&tp(0)].ledger.next_offset(),
        0,
        "restarted at the log start"
    );
    // Sent by the thread after the error, before it served the Reposition command.
    h.audit
        .on_event(TailEvent::ReadTo(vec![(tp(0), 1011)]))
        .await;
    // The restarted fetcher delivers the new log.
    h.audit.on_event(TailEvent::Records(expected(0..5))).await;
    assert_eq!(
        h.audit.parts[&tp(0)].ledger.pending(),
        5,
        "the new log's records 0..5 must be audited, not taken for re-deliveries \
         (next offset {})",
        h.audit.parts[&tp(0)].ledger.next_offset()
    );
    // Once the thread has served the Reposition, its positions are the new fetcher's, and
    // apply again (a quiet partition must still be read to its end).
    h.audit.on_event(TailEvent::Repositioned(1)).await;
    h.audit.on_event(TailEvent::ReadTo(vec![(tp(0), 5)])).await;
    assert_eq!(h.audit.parts[&tp(0)].read_to, Some(5));
}

/// A transient out-of-range (the watermarks, read a moment later, put the ledger's
/// position inside the log again, or cannot be read): the partition is re-positioned where
/// its ledger stands (1010), and the stale position 1011 makes offset 1010 a hole: the
/// record there, fetched by the restarted fetcher, is ignored as a re-delivery.
#[tokio::test]
async fn review_a_position_reported_after_a_transient_out_of_range_skips_one_record() {
    let mut h = harness("");
    h.assign_and_read((0, 1000), expected(1000..1010)).await;
    h.audit
        .on_event(TailEvent::ReadTo(vec![(tp(0), 1010)]))
        .await;
    h.kafka
        .watermarks
        .lock()
        .expect("lock")
        .insert(tp(0), (0, 1020));
    h.audit.on_event(TailEvent::OffsetOutOfRange).await;
    h.audit
        .on_event(TailEvent::ReadTo(vec![(tp(0), 1011)]))
        .await;
    h.audit
        .on_event(TailEvent::Records(expected(1010..1012)))
        .await;
    assert_eq!(
        h.audit.parts[&tp(0)].ledger.pending(),
        12,
        "offset 1010 was never delivered before the position passed it"
    );
}

/// Any other fetch error with the partition's offset (TOPIC_AUTHORIZATION_FAILED during an
/// ACL change, MSG_SIZE_TOO_LARGE, INCONSISTENT_TOPIC_ID, ...) is only logged
/// (`TailEvent::Error`): nothing re-positions the partition, so librdkafka's position F + 1
/// stands while the fetcher backs off (fetch.error.backoff.ms) and retries F.
///
/// The review fed the audit `Error`, `ReadTo(1011)`, `Records(1010..1011)`. The thread no
/// longer produces that order: the error message makes partition 0 unproven, and its
/// position is reported again only after a record of it was handed over after the error
/// (replayed on the thread's tracker in `kafka::tail::read_to::tests::
/// a_partition_is_not_trusted_after_an_error_until_a_record_of_it_follows`). The audit
/// cannot tell which partition an `Error` was of, so this test feeds the order the thread
/// produces now and keeps the assertion: the record at 1010 is expected, and the position
/// then reported (1011, the record's) moves nothing past an unread offset.
#[tokio::test]
async fn review_a_position_reported_after_a_fetch_error_skips_the_record_at_the_fetch_offset() {
    let mut h = harness("");
    h.assign_and_read((0, 1000), expected(1000..1010)).await;
    h.audit
        .on_event(TailEvent::Error(
            "Fetch from broker 1 failed at offset 1010: Broker: Topic authorization failed".into(),
        ))
        .await;
    h.audit
        .on_event(TailEvent::Records(expected(1010..1011)))
        .await;
    h.audit
        .on_event(TailEvent::ReadTo(vec![(tp(0), 1011)]))
        .await;
    assert_eq!(
        h.audit.parts[&tp(0)].ledger.pending(),
        11,
        "the record at 1010 must be expected"
    );
    assert_eq!(h.audit.parts[&tp(0)].ledger.next_offset(), 1011);
}
