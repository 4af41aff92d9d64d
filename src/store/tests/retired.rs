//! Retired gaps (issue 41 item 1): the store's count of them is the ledger's own
//! aggregate of the same gaps, and its operations are the ledger's rules.

use super::super::*;
use crate::gap::{Gap, GapCause};
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
    let tp = crate::types::TopicPartition::new("t", 0);
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
    let tp = crate::types::TopicPartition::new("t", 0);
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
    let tp = crate::types::TopicPartition::new("t", 0);
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

/// Review of format 3 (T5): a partition's stale copies go whole. Retired rows of every
/// state the aggregate counts (unverifiable and dead_lettered too, not only open and
/// unrecoverable) leave with `retired_too`: the side topic's import brings the owner's
/// versions back, and a copy it lacks (folded, acknowledged and dropped there) would count
/// twice or list as unresolved here. Not retired, an unverifiable copy is unresolved and
/// goes too; a dead_lettered one (never in a handover state) and acknowledged ones stay.
#[test]
fn stale_retired_rows_of_every_counted_state_are_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let tp = crate::types::TopicPartition::new("t", 0);
    let unverifiable = GapRecord {
        size_known: false,
        cause: GapCause::DeletedUnread,
        deleted_ms: Some(70_000),
        ..record(10, 7, None, None)
    };
    let dead = GapRecord {
        missing: 0,
        dead_lettered: 2,
        cause: GapCause::DeadLettered,
        ..record(20, 0, Some(3_000), None)
    };
    let open = record(30, 2, Some(5_000), None);
    let acked = record(40, 2, Some(5_000), None);
    let retired: Vec<Gap> = [&unverifiable, &dead, &open, &acked]
        .iter()
        .map(|g| g.to_gap("a", &tp))
        .collect();
    assert_eq!(retired[0].state, GapState::Unverifiable);
    assert_eq!(retired[1].state, GapState::DeadLettered);
    let ids: Vec<String> = retired.iter().map(|g| g.id.clone()).collect();
    store
        .commit_round_retiring::<&[u8]>("a", &retired, &[], KeyClaims::Changes(&[]), &ids, &[])
        .unwrap();
    assert!(store.ack(&ids[3], "known").unwrap());
    // Not retired: an unverifiable and a dead_lettered copy.
    let live: Vec<Gap> = [
        GapRecord {
            size_known: false,
            cause: GapCause::DeletedUnread,
            deleted_ms: Some(70_000),
            ..record(50, 3, None, None)
        },
        GapRecord {
            missing: 0,
            dead_lettered: 1,
            cause: GapCause::DeadLettered,
            ..record(60, 0, Some(3_000), None)
        },
    ]
    .iter()
    .map(|g| g.to_gap("a", &tp))
    .collect();
    store.commit_round("a", &live, &[]).unwrap();
    assert_eq!(store.settle_retired("a", "t", 0, &[]).unwrap().gaps, 3);
    assert!(
        store
            .partitions_with_unresolved_gaps("a")
            .unwrap()
            .contains(&("t".to_string(), 0))
    );

    // An import's drop (below its settled offset, keeping the state's gaps: none here).
    let mut dropped = store
        .forget_unresolved("a", "t", 0, 1_000, &[], true)
        .unwrap();
    dropped.sort();
    let mut want = vec![
        ids[0].clone(),
        ids[1].clone(),
        ids[2].clone(),
        live[0].id.clone(),
    ];
    want.sort();
    assert_eq!(dropped, want);
    assert_eq!(store.settle_retired("a", "t", 0, &[]).unwrap().gaps, 0);
    assert!(
        store.get_gap(&ids[3]).unwrap().is_some(),
        "acknowledged kept"
    );
    assert!(
        store.get_gap(&live[1].id).unwrap().is_some(),
        "dead_lettered kept"
    );
}

/// A partition whose only counted rows are retired dead_lettered ones is still found as
/// one to forget when another instance owns it (review of format 3, T5).
#[test]
fn a_partition_with_only_retired_dead_letters_is_found_to_forget() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let tp = crate::types::TopicPartition::new("t", 3);
    let dead = GapRecord {
        missing: 0,
        dead_lettered: 2,
        cause: GapCause::DeadLettered,
        ..record(20, 0, Some(3_000), None)
    }
    .to_gap("a", &tp);
    store
        .commit_round_retiring::<&[u8]>(
            "a",
            std::slice::from_ref(&dead),
            &[],
            KeyClaims::Changes(&[]),
            std::slice::from_ref(&dead.id),
            &[],
        )
        .unwrap();
    assert!(
        store
            .partitions_with_unresolved_gaps("a")
            .unwrap()
            .contains(&("t".to_string(), 3))
    );
    // A dead_lettered row nobody retired is history: not a reason to forget a partition.
    let other = GapRecord {
        missing: 0,
        dead_lettered: 2,
        cause: GapCause::DeadLettered,
        ..record(20, 0, Some(3_000), None)
    }
    .to_gap("a", &crate::types::TopicPartition::new("t", 4));
    store.commit_round("a", &[other], &[]).unwrap();
    assert!(
        !store
            .partitions_with_unresolved_gaps("a")
            .unwrap()
            .contains(&("t".to_string(), 4))
    );
}

/// Review 26b, G1 and G2: under an import mark, a gap this store folds is never taken by an
/// import resumed from a newer state (its row went with the fold; before, the newer owner's
/// version came back beside the overflow gap counting it); one the resume wrote may be
/// replaced by a later version; one this store has a row of is not taken; an unknown one
/// is. An import that ends, or a new one, forgets the notes.
#[test]
fn a_resumed_import_takes_unknown_gaps_and_its_own_never_folded_ones() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let tp = crate::types::TopicPartition::new("t", 0);
    let mark = ImportMark {
        owner: "b".into(),
        term: 3,
        below: Some(100),
        generation: Some(7),
    };
    store.set_importing("h", "a", "t", 0, Some(&mark)).unwrap();
    let folded = record(10, 1, Some(5_000), None).to_gap("a", &tp);
    let own = record(20, 1, Some(5_000), None).to_gap("a", &tp);
    store
        .commit_round("a", &[folded.clone(), own.clone()], &[])
        .unwrap();
    store
        .commit_round_retiring::<&[u8]>(
            "a",
            &[],
            &[],
            KeyClaims::Changes(&[]),
            &[],
            std::slice::from_ref(&folded.id),
        )
        .unwrap();
    assert_eq!(store.get_gap(&folded.id).unwrap(), None, "folded: row gone");
    // A gap the resume wrote: its row is there, and noted.
    let resumed = record(30, 1, Some(5_000), None).to_gap("a", &tp);
    store
        .import_retired("a", std::slice::from_ref(&resumed))
        .unwrap();
    let written = resumed.id.clone();
    let unknown = Gap::make_id("a", "t", 0, 40);
    store
        .note_resumed("h", "a", "t", 0, std::slice::from_ref(&written))
        .unwrap();
    let ids = [
        folded.id.clone(),
        own.id.clone(),
        written.clone(),
        unknown.clone(),
    ];
    assert_eq!(
        store.folded_under_mark("h", "a", "t", 0, &ids).unwrap(),
        std::collections::HashSet::from([folded.id.clone()]),
        "no import takes a gap folded under the mark back (review 26c, H2)"
    );
    let take = store.resumable_ids("h", "a", "t", 0, &ids).unwrap();
    assert_eq!(
        take,
        std::collections::HashSet::from([written.clone(), unknown.clone()])
    );
    // The import ends: its notes go (a later import starts from what the store holds).
    store.set_importing("h", "a", "t", 0, None).unwrap();
    let take = store.resumable_ids("h", "a", "t", 0, &ids).unwrap();
    assert_eq!(
        take,
        std::collections::HashSet::from([folded.id.clone(), unknown])
    );
}

/// Review 26c, H1: acknowledgements a newer owner gave, found by a resumed import, are taken
/// on the rows this store holds (logged for the ledger's refresh), never over a resolved
/// row, and never twice.
#[test]
fn acknowledgements_found_by_an_import_are_taken_on_open_rows_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let tp = crate::types::TopicPartition::new("t", 0);
    let open = record(10, 1, Some(5_000), None).to_gap("a", &tp);
    let late = record(20, 0, Some(5_000), None).to_gap("a", &tp);
    assert_eq!(late.state, GapState::Late);
    store
        .commit_round("a", &[open.clone(), late.clone()], &[])
        .unwrap();
    let before = store.ack_position().unwrap();
    let acks = [
        (open.id.clone(), "on B".to_string()),
        (late.id.clone(), "on B".to_string()),
        ("a:t:0:99".to_string(), "no row".to_string()),
    ];
    assert_eq!(store.take_acks(&acks).unwrap(), vec![open.id.clone()]);
    let got = store.get_gap(&open.id).unwrap().expect("row");
    assert_eq!(
        (got.state, got.ack_reason.as_deref()),
        (GapState::Acknowledged, Some("on B"))
    );
    assert_eq!(
        store.get_gap(&late.id).unwrap().map(|g| g.state),
        Some(GapState::Late)
    );
    let (logged, _) = store.acks_since("a", before).unwrap();
    assert_eq!(logged.len(), 1);
    assert!(store.take_acks(&acks).unwrap().is_empty(), "not twice");
}
