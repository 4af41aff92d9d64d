//! Given-up gaps live in the store only (issue 41 item 1): the ledger keeps an aggregate of
//! them, restored from the store with one query, and the gauges, completeness and
//! acknowledgements answer as when every gap was held in memory.

use super::harness::*;
use crate::gap::GapState;

/// `gap_auditor_gaps_open` and `gap_auditor_records_missing` of partition 0.
fn open_gauges(h: &Harness) -> (i64, i64) {
    let l = [AUDIT, TOPIC, "0"];
    (
        h.families.gaps_open.with_label_values(&l).get(),
        h.families.records_missing.with_label_values(&l).get(),
    )
}

/// Ten isolated losses (odd offsets of 0..21) declared, then given up.
async fn ten_given_up(h: &mut Harness) {
    h.assign_and_read((0, 0), expected(0..21)).await;
    h.in_sink((0..21).filter(|o| o % 2 == 0));
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(h.stored_gaps().len(), 10);
    assert_eq!(open_gauges(h), (10, 10));
    h.clock.advance(31_000);
    h.audit.round().await;
}

#[tokio::test]
async fn given_up_gaps_leave_memory() {
    let mut h = harness(r#"give_up_after = "30s""#);
    ten_given_up(&mut h).await;
    let l = &mut h.audit.parts.get_mut(&tp(0)).expect("part").ledger;
    assert_eq!(l.gaps().count(), 0, "given-up gaps still in memory");
    assert_eq!(open_gauges(&h), (10, 10));
}

#[tokio::test]
async fn given_up_gaps_are_not_reloaded_at_assignment() {
    let mut h = harness(r#"give_up_after = "30s""#);
    ten_given_up(&mut h).await;
    let l = &mut h.audit.parts.get_mut(&tp(0)).expect("part").ledger;
    let (gauges, completeness, missing) = (l.gauges(), l.completeness(), l.missing());
    assert_eq!((gauges.open, gauges.missing, missing), (10, 10, 10));
    assert_eq!(completeness.blocking_gaps, 10);
    assert_eq!(open_gauges(&h), (10, 10));

    h.audit.revoke(&[tp(0)]).await;
    h.audit.assign(vec![tp(0)]).await;
    let l = &mut h.audit.parts.get_mut(&tp(0)).expect("part").ledger;
    assert_eq!(l.gaps().count(), 0, "given-up gaps reloaded at assignment");
    assert_eq!(l.gauges(), gauges, "gauges as before the restart");
    assert_eq!(l.completeness().blocking_gaps, 10);
    assert_eq!(
        l.completeness().gaps,
        completeness.gaps,
        "the same gaps listed"
    );
    assert_eq!(l.missing(), 10);
    h.audit.publish();
    assert_eq!(open_gauges(&h), (10, 10));
    // The store rows are final and unchanged.
    let stored = h.stored_gaps();
    assert_eq!(stored.len(), 10);
    assert!(
        stored
            .iter()
            .all(|g| g.state == GapState::Open && g.missing_records == 1)
    );
}

#[tokio::test]
async fn an_acknowledged_given_up_gap_leaves_the_gauges() {
    let mut h = harness(r#"give_up_after = "30s""#);
    ten_given_up(&mut h).await;
    let id = h
        .stored_gaps()
        .into_iter()
        .find(|g| g.first_offset == 1)
        .expect("gap at 1")
        .id;
    assert!(h.store.ack(&id, "known").expect("ack"));
    h.audit.round().await;
    assert_eq!(open_gauges(&h), (9, 9));
    let l = &mut h.audit.parts.get_mut(&tp(0)).expect("part").ledger;
    assert_eq!(l.missing(), 9);
    let c = l.completeness();
    assert_eq!(c.blocking_gaps, 9);
    assert!(c.gaps.iter().all(|g| g.first != 1), "{c:?}");
}

#[tokio::test]
async fn the_log_start_passing_given_up_gaps_makes_them_unrecoverable() {
    let mut h = harness(r#"give_up_after = "30s""#);
    ten_given_up(&mut h).await;
    // Kafka deletes offsets below 6: the gaps at 1, 3 and 5.
    h.audit
        .tail
        .watermarks
        .lock()
        .expect("lock")
        .insert(tp(0), (6, 21));
    h.audit.round().await;
    let mut got: Vec<_> = h
        .stored_gaps()
        .into_iter()
        .map(|g| (g.first_offset, g.state, g.unrecoverable_at.is_some()))
        .collect();
    got.sort_by_key(|g| g.0);
    for (first, state, _) in &got {
        let want = if *first < 6 {
            GapState::Unrecoverable
        } else {
            GapState::Open
        };
        assert_eq!(*state, want, "gap at {first}: {got:?}");
    }
    let l = &mut h.audit.parts.get_mut(&tp(0)).expect("part").ledger;
    let g = l.gauges();
    assert_eq!((g.open, g.missing), (10, 10));
    assert!(
        g.deleted_ms.is_some(),
        "the deletion reaches the gauges: {g:?}"
    );
    let c = l.completeness();
    let unrecoverable = c
        .gaps
        .iter()
        .filter(|g| g.state == GapState::Unrecoverable)
        .count();
    assert_eq!(unrecoverable, 3, "{c:?}");
}

#[tokio::test]
async fn beyond_max_open_gaps_the_oldest_fold_into_one_overflow_gap() {
    let mut h = harness("max_open_gaps = 5");
    // Twenty isolated losses: the odd offsets of 0..41.
    h.assign_and_read((0, 0), expected(0..41)).await;
    h.in_sink((0..41).filter(|o| o % 2 == 0));
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    let mut gaps: Vec<_> = h
        .stored_gaps()
        .into_iter()
        .map(|g| {
            (
                g.first_offset,
                g.last_offset,
                g.missing_records,
                g.cause.as_str(),
            )
        })
        .collect();
    gaps.sort_by_key(|g| g.0);
    assert_eq!(
        gaps,
        vec![
            (1, 31, 16, "folded"),
            (33, 33, 1, "unknown"),
            (35, 35, 1, "unknown"),
            (37, 37, 1, "unknown"),
            (39, 39, 1, "unknown"),
        ],
        "one overflow gap spanning the 16 oldest, the rest exact"
    );
    let folded = h.families.gaps_folded.with_label_values(&[AUDIT]).get();
    assert_eq!(folded, 16);
    assert_eq!(
        open_gauges(&h),
        (5, 20),
        "every missing record still counted"
    );
    assert_eq!(h.counter(|m| &m.records_lost), 20);
    assert_eq!(h.audit.parts[&tp(0)].ledger.gaps_in_memory(), 5);
}

/// A topic deleted and created again: the retired gaps of the old log are no longer
/// followed, like the gaps in memory (unrecoverable, out of the gauges).
#[tokio::test]
async fn a_recreated_topic_lets_go_of_the_old_logs_given_up_gaps() {
    let mut h = harness(r#"give_up_after = "30s""#);
    h.kafka
        .topic_ids
        .lock()
        .expect("lock")
        .insert(TOPIC.to_string(), "A".to_string());
    ten_given_up(&mut h).await;
    h.audit.revoke(&[tp(0)]).await;
    h.kafka
        .topic_ids
        .lock()
        .expect("lock")
        .insert(TOPIC.to_string(), "B".to_string());
    h.kafka
        .watermarks
        .lock()
        .expect("lock")
        .insert(tp(0), (0, 25));
    let starts = h.audit.assign(vec![tp(0)]).await;
    assert_eq!(starts, vec![(tp(0), 0)], "the new log from its start");
    let l = &mut h.audit.parts.get_mut(&tp(0)).expect("part").ledger;
    let g = l.gauges();
    assert_eq!((g.open, g.missing, l.missing()), (0, 0, 0), "{g:?}");
    assert_eq!(l.completeness().blocking_gaps, 0);
    let stored = h.stored_gaps();
    assert_eq!(stored.len(), 10);
    assert!(
        stored.iter().all(|g| g.state == GapState::Unrecoverable),
        "{stored:?}"
    );
}

/// An operator acknowledges a gap while the round that folds it is under way (after the
/// round read the acknowledgements, before its write). The fold kept the acknowledged row
/// and the overflow gap counted its record too: the acknowledgement never left the gauges,
/// and the listed rows counted the record twice (the acknowledged row and the overflow
/// gap). The write now sees the acknowledgement under its lock and the overflow gap lets
/// the gap go.
#[tokio::test]
async fn a_gap_acknowledged_while_it_is_folded_leaves_the_overflow_gaps_count() {
    let mut h = harness("");
    // Twenty isolated losses: the odd offsets of 0..41.
    h.assign_and_read((0, 0), expected(0..41)).await;
    h.in_sink((0..41).filter(|o| o % 2 == 0));
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(open_gauges(&h), (20, 20));
    let id = h
        .stored_gaps()
        .into_iter()
        .find(|g| g.first_offset == 5)
        .expect("gap at 5")
        .id;
    // The round under way: it read the acknowledgements, then the operator acknowledges,
    // then it folds and writes.
    h.audit.refresh_acknowledged().await;
    assert!(h.store.ack(&id, "known").expect("ack"));
    h.audit.cfg.max_open_gaps = 5;
    h.audit.cap_open_gaps();
    h.audit.persist().await;
    h.audit.round().await;
    let stored = h.stored_gaps();
    let listed: u64 = stored.iter().map(|g| g.missing_records).sum();
    assert_eq!(listed, 20, "each missing record listed once: {stored:?}");
    let counted: u64 = stored
        .iter()
        .filter(|g| g.state != GapState::Acknowledged)
        .map(|g| g.missing_records)
        .sum();
    assert_eq!(counted, 19);
    assert_eq!(
        open_gauges(&h).1,
        19,
        "the acknowledged record still counted"
    );
    let folded = h.families.gaps_folded.with_label_values(&[AUDIT]).get();
    assert_eq!(folded, 15, "the acknowledged gap was not folded");
    // A restart reads every acknowledgement again: nothing is taken out twice.
    h.audit.revoke(&[tp(0)]).await;
    h.audit.assign(vec![tp(0)]).await;
    h.audit.round().await;
    assert_eq!(open_gauges(&h).1, 19);
}

/// The gauges agree with a brute-force count of the store rows (open and unrecoverable
/// rows with records missing: gaps and missing records) through a fold, give-up, the log
/// start passing some gaps, and a restart.
#[tokio::test]
async fn gauges_equal_a_recount_of_the_store_rows_through_fold_give_up_and_restart() {
    let mut h = harness("max_open_gaps = 5\ngive_up_after = \"30s\"");
    let recount = |h: &Harness| -> (i64, i64) {
        let rows: Vec<_> = h
            .stored_gaps()
            .into_iter()
            .filter(|g| {
                g.missing_records > 0 && matches!(g.state, GapState::Open | GapState::Unrecoverable)
            })
            .collect();
        (
            rows.len() as i64,
            rows.iter().map(|g| g.missing_records as i64).sum(),
        )
    };
    h.assign_and_read((0, 0), expected(0..41)).await;
    h.in_sink((0..41).filter(|o| o % 2 == 0));
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(open_gauges(&h), recount(&h), "after the fold");
    h.clock.advance(31_000);
    h.audit.round().await;
    assert_eq!(open_gauges(&h), recount(&h), "after the give-up");
    h.audit
        .tail
        .watermarks
        .lock()
        .expect("lock")
        .insert(tp(0), (36, 41));
    h.audit.round().await;
    assert_eq!(open_gauges(&h), recount(&h), "after the log start moved");
    h.audit.revoke(&[tp(0)]).await;
    h.audit.assign(vec![tp(0)]).await;
    h.audit.round().await;
    assert_eq!(open_gauges(&h), recount(&h), "after a restart");
    let stored = h.stored_gaps();
    let listed: u64 = stored.iter().map(|g| g.missing_records).sum();
    assert_eq!(listed, 20, "each missing record listed once: {stored:?}");
}
