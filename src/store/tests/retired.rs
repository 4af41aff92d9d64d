//! Retired gaps (issue 41 item 1): the store's count of them is the ledger's own
//! aggregate of the same gaps, and its operations are the ledger's rules.

use super::super::*;
use crate::gap::GapCause;
use crate::ledger::{GapRecord, RetiredGaps, RetiredOp};
use std::collections::BTreeMap;

fn record(first: Offset, missing: u64, ts: Option<i64>, deleted: Option<i64>) -> GapRecord {
    GapRecord {
        first,
        last: first + 2,
        missing,
        size_known: true,
        min_ts: ts,
        max_ts: ts,
        detected_ms: 1_000,
        cause: GapCause::Unknown,
        commit: None,
        evidence: None,
        deleted_ms: deleted,
        unsettled: false,
        shared_key: false,
        epoch: 0,
        is_new: false,
        settle_cursor: 0,
        dead_lettered: 0,
    }
}

/// Every kind the count tells apart: open with and without a timestamp, unrecoverable,
/// unverifiable, late (nothing missing), and more than 16 (the listed few).
fn records() -> Vec<GapRecord> {
    let mut out = vec![
        record(10, 3, Some(5_000), None),
        record(20, 1, None, None),
        record(30, 2, Some(4_000), Some(90_000)),
        record(40, 0, Some(1_000), None),
        GapRecord {
            size_known: false,
            cause: GapCause::DeletedUnread,
            deleted_ms: Some(70_000),
            ..record(50, 7, None, None)
        },
    ];
    out.extend((0..20).map(|i| record(100 + 10 * i, 1, Some(9_000 - i), None)));
    out
}

#[test]
fn the_stores_count_is_the_ledgers_aggregate_and_ops_follow_the_ledgers_rules() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let tp = crate::gap::TopicPartition::new("t", 0);
    let recs = records();
    let gaps: Vec<Gap> = recs.iter().map(|g| g.to_gap("a", &tp)).collect();
    let ids: Vec<String> = gaps.iter().map(|g| g.id.clone()).collect();
    store
        .commit_round_retiring::<&[u8]>("a", &gaps, &[], KeyClaims::Changes(&[]), &ids, &[])
        .unwrap();
    // A row nobody retired, and one acknowledged: neither counts.
    let mut other = record(5, 4, Some(1), None).to_gap("a", &tp);
    other.id = Gap::make_id("a", "t", 0, 5);
    store.commit_round("a", &[other], &[]).unwrap();
    assert!(store.ack(&ids[0], "known").unwrap());
    let mut rows: BTreeMap<Offset, GapRecord> =
        recs.iter().skip(1).map(|g| (g.first, g.clone())).collect();
    let got = store.settle_retired("a", "t", 0, &[]).unwrap();
    assert_eq!(got, RetiredGaps::count(rows.values()));
    assert_eq!((got.gaps, got.missing_known, got.open), (23, 23, 22));
    assert_eq!(got.earliest.len(), crate::completeness::MAX_LISTED_GAPS);

    // The log start passes 115, then the log diverges at 150.
    let ops = [
        RetiredOp::Deleted {
            below: 115,
            at_ms: 123_000,
        },
        RetiredOp::Gone {
            from: 150,
            at_ms: 124_000,
        },
    ];
    let got = store.settle_retired("a", "t", 0, &ops).unwrap();
    for op in ops {
        RetiredGaps::apply(op, &mut rows);
    }
    assert_eq!(got, RetiredGaps::count(rows.values()));
    let state = |first: Offset| {
        store
            .get_gap(&Gap::make_id("a", "t", 0, first))
            .unwrap()
            .map(|g| (g.state, g.unrecoverable_at.map(|t| t.timestamp_millis())))
    };
    assert_eq!(state(20), Some((GapState::Unrecoverable, Some(123_000))));
    assert_eq!(
        state(30),
        Some((GapState::Unrecoverable, Some(90_000))),
        "kept"
    );
    assert_eq!(
        state(120).map(|s| s.0),
        Some(GapState::Open),
        "above the log start"
    );
    assert_eq!(
        state(160),
        Some((GapState::Unrecoverable, Some(124_000))),
        "gone"
    );
    assert_eq!(
        state(5).map(|s| s.0),
        Some(GapState::Open),
        "not retired: untouched"
    );
}

/// A store written before v12 holds every given-up gap among its ledger items: the
/// migration retires the ones the ledger would (no run left, not the tail gap), so the
/// first start of this version does not load them all back.
#[test]
fn the_v12_migration_retires_the_given_up_gaps_of_stored_ledgers() {
    let dir = tempfile::tempdir().unwrap();
    let tp = crate::gap::TopicPartition::new("t", 0);
    // 1: given up (no run); 5: a run left; 9: the tail gap; 13: a deleted range unsettled.
    let recs = vec![
        record(1, 1, Some(1), None),
        record(5, 1, Some(1), None),
        record(9, 1, Some(1), None),
        GapRecord {
            unsettled: true,
            size_known: false,
            cause: GapCause::DeletedUnread,
            ..record(13, 3, None, Some(1))
        },
    ];
    let run = serde_json::json!({"run": {"first": 5, "last": 5}, "gap": 5, "detected_ms": 1});
    let ledger = serde_json::json!({
        "missing": [run],
        "gaps": recs,
        "tail_gap": 9,
    });
    {
        let store = Store::open(dir.path()).unwrap();
        let gaps: Vec<Gap> = recs.iter().map(|g| g.to_gap("a", &tp)).collect();
        let row = PartitionProgress {
            topic: "t".to_string(),
            partition: 0,
            settled: 20,
            ledger,
            updated_at: Utc::now(),
            items: None,
        };
        store.commit_round("a", &gaps, &[row]).unwrap();
    }
    {
        // Back to v11: no `retired` column.
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute_batch(
            "DROP INDEX gaps_retired; ALTER TABLE gaps DROP COLUMN retired;
             PRAGMA user_version = 11;",
        )
        .unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    let p = store.load_progress("a").unwrap().pop().unwrap();
    let (snap, bad) = crate::ledger::Snapshot::from_stored(&p.ledger);
    assert!(bad.is_empty(), "{bad:?}");
    let firsts: Vec<Offset> = snap.gaps.iter().map(|g| g.first).collect();
    assert_eq!(
        firsts,
        vec![5, 9, 13],
        "the given-up gap left the stored ledger"
    );
    let counted = store.settle_retired("a", "t", 0, &[]).unwrap();
    assert_eq!(
        counted,
        RetiredGaps::count([&recs[0]]),
        "and is counted retired"
    );
    assert_eq!(
        store.list_gaps(&GapFilter::default()).unwrap().len(),
        4,
        "every row kept"
    );
}

/// Review of issue 37: a retired dead_lettered gap blocks completeness until acknowledged,
/// so the store counts it (not as missing, not as open), as the ledger's aggregate does;
/// acknowledged, it no longer counts.
#[test]
fn a_retired_dead_lettered_gap_counts_until_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let tp = crate::gap::TopicPartition::new("t", 0);
    let recs = [
        record(10, 2, Some(5_000), None),
        GapRecord {
            missing: 0,
            dead_lettered: 2,
            cause: GapCause::DeadLettered,
            ..record(20, 0, Some(3_000), None)
        },
    ];
    let gaps: Vec<Gap> = recs.iter().map(|g| g.to_gap("a", &tp)).collect();
    assert_eq!(gaps[1].state, GapState::DeadLettered);
    let ids: Vec<String> = gaps.iter().map(|g| g.id.clone()).collect();
    store
        .commit_round_retiring::<&[u8]>("a", &gaps, &[], KeyClaims::Changes(&[]), &ids, &[])
        .unwrap();
    let got = store.settle_retired("a", "t", 0, &[]).unwrap();
    assert_eq!(got, RetiredGaps::count(recs.iter()));
    assert_eq!(
        (got.gaps, got.dead_lettered, got.missing_known, got.open),
        (2, 1, 2, 1)
    );
    assert_eq!(
        got.earliest
            .iter()
            .map(|b| (b.first, b.missing, b.state))
            .collect::<Vec<_>>(),
        vec![(20, 2, GapState::DeadLettered), (10, 2, GapState::Open)]
    );
    assert!(store.ack(&ids[1], "known rejects").unwrap());
    let got = store.settle_retired("a", "t", 0, &[]).unwrap();
    assert_eq!((got.gaps, got.dead_lettered), (1, 0));
}
