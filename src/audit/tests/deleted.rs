//! Ranges Kafka deleted before the auditor read them (an outage longer than retention),
//! settled in bounded pieces after the round's due work (issue 41 item 2; SPEC guarantees
//! 8 and 12).

use super::harness::*;
use crate::gap::GapState;
use crate::kafka::Tagged;
use crate::record::Tag;
use crate::types::Offset;

/// Offsets Kafka deleted unread on partition 0 in the tests below: `0..DELETED`.
const DELETED: Offset = 1_000_000;

/// Assigns partition 0 resuming at 0 (the store's settled offset) with the log starting at
/// `deleted` (Kafka deleted `0..deleted` unread), and partition 1 fresh at its end, 0.
async fn assign_after_outage(h: &mut Harness, deleted: Offset) {
    let progress = crate::store::PartitionProgress {
        topic: TOPIC.to_string(),
        partition: 0,
        settled: 0,
        ledger: serde_json::to_value(crate::ledger::PartitionLedger::new(0, false).snapshot())
            .expect("json"),
        updated_at: chrono::Utc::now(),
        items: None,
    };
    h.store
        .commit_round(AUDIT, &[], &[progress])
        .expect("store");
    h.kafka
        .watermarks
        .lock()
        .expect("lock")
        .extend([(tp(0), (deleted, deleted)), (tp(1), (0, 0))]);
    let starts = h.audit.assign(vec![tp(0), tp(1)]).await;
    assert!(starts.contains(&(tp(0), deleted)), "{starts:?}");
    let p0 = &h.audit.parts[&tp(0)].ledger;
    assert_eq!(
        p0.deleted_to_settle().len(),
        1,
        "the deleted range is a gap"
    );
}

/// Expected records at `offsets` of partition 1.
fn expected_p1(offsets: std::ops::Range<Offset>) -> Vec<Tagged> {
    offsets
        .map(|offset| Tagged {
            topic: std::sync::Arc::from(TOPIC),
            partition: 1,
            offset,
            timestamp_ms: Some(1),
            tag: Tag::Expected { key: None },
        })
        .collect()
}

/// A counter of partition `p`.
fn counter_of(
    h: &Harness,
    p: i32,
    f: impl Fn(&crate::metrics::Metrics) -> &prometheus::IntCounterVec,
) -> u64 {
    f(&h.families)
        .with_label_values(&[AUDIT, TOPIC, &p.to_string()])
        .get()
}

/// The stored gap of partition `p` starting at `first`.
fn stored_gap(h: &Harness, p: i32, first: Offset) -> crate::gap::Gap {
    h.stored_gaps()
        .into_iter()
        .find(|g| g.partition == p && g.first_offset == first)
        .expect("stored gap")
}

/// A sink too slow for any settlement question (every piece times out): partition 1's loss
/// is still reported in the same round, the sink is still up, and the deleted range waits,
/// unverifiable, for the next round. Before pieces, one question over the whole range
/// timed out and tripped the round before any partition was verified, every round.
#[tokio::test]
async fn a_deleted_range_the_sink_times_out_on_never_stops_other_partitions_verdicts() {
    let mut h = harness("");
    assign_after_outage(&mut h, DELETED).await;
    h.audit.ingest(expected_p1(0..10));
    for o in (0..10).filter(|o| !(4..=5).contains(o)) {
        h.sink.insert_offset(TOPIC, 1, o);
    }
    h.in_sink(0..50_000);
    // A count over more than 1,000 offsets times out: every piece of the range does.
    h.sink.time_out_over(1_000);
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(
        counter_of(&h, 1, |m| &m.records_lost),
        2,
        "partition 1's loss"
    );
    assert_eq!(counter_of(&h, 1, |m| &m.records_confirmed), 8);
    assert_eq!(
        h.families.sink_up.with_label_values(&[AUDIT]).get(),
        1,
        "the sink answered the round's verdicts: not down"
    );
    // Nothing of the deleted range is decided without an answer.
    assert_eq!(h.counter(|m| &m.records_unverifiable), 0);
    assert_eq!(h.counter(|m| &m.records_confirmed), 0);
    assert_eq!(h.counter(|m| &m.records_lost), 0);
    let g = stored_gap(&h, 0, 0);
    assert_eq!(
        (g.state, g.missing_records, g.size_known),
        (GapState::Unverifiable, DELETED as u64, false)
    );
    // The sink copes again: the next round settles pieces of it.
    h.sink.time_out_over(0);
    h.audit.round().await;
    let settled = h.counter(|m| &m.records_confirmed) + h.counter(|m| &m.records_unverifiable);
    assert!(settled > 0, "pieces settled once the sink answers");
    assert_eq!(h.counter(|m| &m.records_lost), 0, "never lost");
}

/// A range with the sink's rows interleaved (the costliest bisection) costs a bounded
/// number of queries per round, and settles exactly over several rounds: every offset the
/// sink holds confirmed, the rest unverifiable, none lost, the gap unverifiable (never
/// late nor open) at every step.
#[tokio::test]
async fn a_deleted_range_settles_in_bounded_pieces_per_round_and_ends_exact() {
    const N: Offset = 200_000;
    let mut h = harness("");
    assign_after_outage(&mut h, N).await;
    // Every second offset of the first half, all of the second half.
    h.in_sink((0..N / 2).filter(|o| o % 2 == 0));
    h.in_sink(N / 2..N);
    let in_sink = (N / 4 + N / 2) as u64;
    h.clock.advance(GRACE_MS + 1);
    let mut rounds = 0;
    let mut most = 0;
    while !h.audit.parts[&tp(0)].ledger.deleted_to_settle().is_empty() {
        let before = h.sink.queries();
        h.audit.round().await;
        most = most.max(h.sink.queries() - before);
        rounds += 1;
        let g = stored_gap(&h, 0, 0);
        assert_eq!(g.state, GapState::Unverifiable, "round {rounds}: {g:?}");
        let found = h.counter(|m| &m.records_confirmed);
        assert_eq!(g.missing_records, N as u64 - found, "round {rounds}: exact");
        assert_eq!(h.counter(|m| &m.records_lost), 0);
        assert!(rounds < 100, "settles");
    }
    // 16 queries a partition, plus at most one piece started within them (47).
    assert!(most <= 62, "{most} queries in one round");
    assert!(rounds > 1, "in pieces, not one round: {rounds}");
    assert_eq!(h.counter(|m| &m.records_confirmed), in_sink);
    assert_eq!(h.counter(|m| &m.records_unverifiable), N as u64 - in_sink);
    let g = stored_gap(&h, 0, 0);
    assert_eq!(
        (g.state, g.missing_records),
        (GapState::Unverifiable, N as u64 - in_sink)
    );
}

/// Past `max_deleted_checked` offsets the rest of a range is unverifiable at once, without
/// a question; what was asked is exact.
#[tokio::test]
async fn past_max_deleted_checked_the_rest_is_unverifiable_without_asking() {
    let mut h = harness("max_deleted_checked = 32000");
    assign_after_outage(&mut h, DELETED).await;
    h.in_sink(0..40_000);
    h.clock.advance(GRACE_MS + 1);
    let before = h.sink.queries();
    h.audit.round().await;
    // Two pieces of 16,000 offsets, each wholly in the sink: one count each.
    assert_eq!(h.sink.queries() - before, 2);
    assert_eq!(h.counter(|m| &m.records_confirmed), 32_000);
    assert_eq!(
        h.counter(|m| &m.records_unverifiable),
        DELETED as u64 - 32_000
    );
    assert_eq!(h.counter(|m| &m.records_lost), 0);
    assert!(h.audit.parts[&tp(0)].ledger.deleted_to_settle().is_empty());
    let g = stored_gap(&h, 0, 0);
    assert_eq!(
        (g.state, g.missing_records),
        (GapState::Unverifiable, DELETED as u64 - 32_000)
    );
}

/// Under key_columns the sink's rows carry no offsets: the whole range is unverifiable in
/// the first round, without a question about it.
#[tokio::test]
async fn under_key_columns_a_deleted_range_is_unverifiable_without_asking() {
    let mut h = keyed_harness("");
    assign_after_outage(&mut h, DELETED).await;
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_unverifiable), DELETED as u64);
    assert!(h.audit.parts[&tp(0)].ledger.deleted_to_settle().is_empty());
    assert_eq!(stored_gap(&h, 0, 0).state, GapState::Unverifiable);
}

/// A sink that cannot be reached, and nothing but a deleted range to ask it about: one
/// question a round (no ping after the settlement's timeout), the sink reported down,
/// nothing decided.
#[tokio::test]
async fn an_unreachable_sink_costs_one_question_a_round_and_reads_down() {
    let mut h = harness("");
    assign_after_outage(&mut h, DELETED).await;
    h.sink.set_down(true);
    h.clock.advance(GRACE_MS + 1);
    let before = h.sink.queries();
    h.audit.round().await;
    assert_eq!(h.sink.queries() - before, 1, "one timeout a round");
    assert_eq!(h.families.sink_up.with_label_values(&[AUDIT]).get(), 0);
    assert_eq!(h.counter(|m| &m.records_unverifiable), 0);
    assert_eq!(h.counter(|m| &m.records_confirmed), 0);
    // Back: the settlement goes on, the sink reads up.
    h.sink.set_down(false);
    h.audit.round().await;
    assert_eq!(h.families.sink_up.with_label_values(&[AUDIT]).get(), 1);
    assert!(h.counter(|m| &m.records_unverifiable) > 0);
}

/// The cursor goes through the store: revoked half-way and assigned again (a restart, a
/// rebalance), the partition resumes the settlement where it stopped, and nothing is
/// counted twice.
#[tokio::test]
async fn a_partition_assigned_again_resumes_the_settlement_at_its_stored_cursor() {
    let mut h = harness("");
    assign_after_outage(&mut h, DELETED).await;
    h.in_sink(0..100_000);
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    // Some pieces of 16,000 offsets asked, not all of the range.
    let asked = h.counter(|m| &m.records_confirmed) + h.counter(|m| &m.records_unverifiable);
    assert_eq!(h.counter(|m| &m.records_confirmed), 100_000);
    assert!(
        asked.is_multiple_of(16_000) && asked < DELETED as u64,
        "{asked}"
    );
    let out = h.audit.revoke(&[tp(0), tp(1)]).await;
    assert!(out.contains(&(tp(0), DELETED)), "{out:?}");
    let starts = h.audit.assign(vec![tp(0), tp(1)]).await;
    assert!(starts.contains(&(tp(0), DELETED)), "{starts:?}");
    let rests = h.audit.parts[&tp(0)].ledger.deleted_to_settle();
    assert_eq!(rests.len(), 1);
    assert_eq!(
        (rests[0].gap, rests[0].rest.first, rests[0].rest.last),
        (0, asked as Offset, DELETED - 1),
        "resumed at the stored cursor"
    );
    let mut rounds = 0;
    while !h.audit.parts[&tp(0)].ledger.deleted_to_settle().is_empty() {
        h.audit.round().await;
        rounds += 1;
        assert!(rounds < 100, "settles");
    }
    assert_eq!(h.counter(|m| &m.records_confirmed), 100_000, "not twice");
    assert_eq!(
        h.counter(|m| &m.records_unverifiable),
        DELETED as u64 - 100_000
    );
    let g = stored_gap(&h, 0, 0);
    assert_eq!(
        (g.state, g.missing_records),
        (GapState::Unverifiable, DELETED as u64 - 100_000)
    );
}

/// No stored progress (a new volume, a store deleted) but the auditor group committed 100,
/// below the log start 1,000: Kafka deleted `100..1000` unread, and that range is a gap
/// (unverifiable where the sink cannot settle it), exactly as with stored progress. Before,
/// the fresh ledger started at the log start, `skipped_by_retention` found the range below
/// it and recorded nothing: 900 offsets never checked, never said.
#[tokio::test]
async fn a_group_commit_below_the_log_start_without_stored_progress_is_a_deleted_range() {
    let mut h = keyed_harness("");
    h.kafka
        .committed
        .lock()
        .expect("lock")
        .insert(tp(0), Some(100));
    h.kafka
        .watermarks
        .lock()
        .expect("lock")
        .insert(tp(0), (1_000, 1_000));
    let starts = h.audit.assign(vec![tp(0)]).await;
    assert!(starts.contains(&(tp(0), 1_000)), "{starts:?}");
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_unverifiable), 900);
    let g = stored_gap(&h, 0, 100);
    assert_eq!((g.first_offset, g.last_offset), (100, 999));
    assert_eq!(g.state, GapState::Unverifiable);
}
