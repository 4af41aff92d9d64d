//! What a handover publish reads (issue 41 item 3): a base, the partition's unresolved gaps
//! (never its resolved history); a delta, the changed gaps by id; and the replay marks
//! since the last look.

use super::super::*;
use super::gap;
use crate::gap::Gap;
use rusqlite::params;

/// A base reads the unresolved gaps of its partition only, with their marks.
#[test]
fn a_base_reads_the_unresolved_gaps_of_its_partition_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let gaps = [
        gap("a", 0, 9, 0, GapState::Open),
        gap("a", 0, 2, 0, GapState::Acknowledged),
        gap("a", 0, 30, 0, GapState::Late),
        gap("a", 0, 40, 0, GapState::Repaired),
        gap("a", 0, 50, 0, GapState::Unrecoverable),
        gap("a", 1, 5, 0, GapState::Open),
        gap("b", 0, 4, 0, GapState::Open),
    ];
    store.commit_round("a", &gaps, &[]).unwrap();
    store.mark_replayed(&gaps[0].id).unwrap();
    let got: Vec<(Offset, GapState, bool)> = store
        .unresolved_gaps_of_partition("a", "t", 0)
        .unwrap()
        .into_iter()
        .map(|(g, r, _)| (g.first_offset, g.state, r))
        .collect();
    assert_eq!(
        got,
        vec![
            (9, GapState::Open, true),
            (50, GapState::Unrecoverable, false)
        ]
    );
}

/// The query goes through the `(audit, state)` index: resolved rows (a long incident's
/// history, millions) are never visited, not even to be filtered out.
#[test]
fn the_unresolved_read_searches_the_state_index_never_scans_the_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let conn = store.lock();
    let sql = format!(
        "EXPLAIN QUERY PLAN {}",
        super::super::gaps::unresolved_of_partition_sql()
    );
    let mut stmt = conn.prepare(&sql).unwrap();
    let plan: Vec<String> = stmt
        .query_map(params!["a", "t", 0], |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let plan = plan.join("; ");
    assert!(
        plan.contains("USING INDEX gaps_audit_state (audit=? AND state=?)")
            && !plan.contains("SCAN gaps"),
        "{plan}"
    );
}

/// A delta reads the changed gaps by id; ids without a row (folded) are left out.
#[test]
fn a_delta_reads_the_changed_gaps_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let gaps = [
        gap("a", 0, 9, 0, GapState::Open),
        gap("a", 0, 20, 0, GapState::Late),
    ];
    store.commit_round("a", &gaps, &[]).unwrap();
    let got: Vec<Offset> = store
        .gaps_by_ids(&[
            gaps[1].id.clone(),
            Gap::make_id("a", "t", 0, 77),
            gaps[0].id.clone(),
        ])
        .unwrap()
        .into_iter()
        .map(|(g, _, _)| g.first_offset)
        .collect();
    assert_eq!(got, vec![20, 9]);
}

fn replay(gap_id: Option<&str>, audit: &str, first: Offset) -> ReplayRecord {
    ReplayRecord {
        at: Utc::now(),
        gap_id: gap_id.map(str::to_string),
        audit: audit.into(),
        topic: "t".into(),
        partition: 0,
        first_offset: first,
        last_offset: first + 1,
        to_topic: None,
        dry_run: false,
        forced: false,
        written: 2,
        present: 0,
        filtered: 0,
        failed: 0,
        partial: false,
        error: None,
    }
}

/// Replays are read from a position on, of one audit, and the position moves past them.
#[test]
fn replays_are_read_since_a_position() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    store
        .record_replay(&replay(Some("a:t:0:1"), "a", 1))
        .unwrap();
    let start = store.replay_position().unwrap();
    store
        .record_replay(&replay(Some("a:t:0:5"), "a", 5))
        .unwrap();
    store.record_replay(&replay(None, "a", 9)).unwrap();
    store
        .record_replay(&replay(Some("b:t:0:5"), "b", 5))
        .unwrap();
    let (rows, pos) = store.replays_since("a", start).unwrap();
    let got: Vec<(Option<String>, Offset)> = rows.into_iter().map(|r| (r.0, r.3)).collect();
    assert_eq!(got, vec![(Some("a:t:0:5".into()), 5), (None, 9)]);
    let (rows, _) = store.replays_since("a", pos).unwrap();
    assert!(rows.is_empty());
}

/// Rows only the store changes (retired gaps the log start passed) are named, so the
/// handover's next delta carries them.
#[test]
fn settling_retired_gaps_names_the_rows_it_changed() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let gaps = [
        gap("a", 0, 2, 0, GapState::Open),
        gap("a", 0, 20, 0, GapState::Open),
        gap("a", 0, 40, 0, GapState::Open),
    ];
    let ids: Vec<String> = gaps.iter().map(|g| g.id.clone()).collect();
    store
        .commit_round_retiring("a", &gaps, &[], KeyClaims::<&[u8]>::Changes(&[]), &ids, &[])
        .unwrap();
    let (_, changed) = store
        .settle_retired_changed(
            "a",
            "t",
            0,
            &[crate::ledger::RetiredOp::Deleted {
                below: 30,
                at_ms: 1_700_000_000_000,
            }],
        )
        .unwrap();
    let mut changed = changed;
    changed.sort();
    assert_eq!(changed, vec![ids[0].clone(), ids[1].clone()]);
    let (_, again) = store
        .settle_retired_changed(
            "a",
            "t",
            0,
            &[crate::ledger::RetiredOp::Deleted {
                below: 30,
                at_ms: 1_700_000_000_000,
            }],
        )
        .unwrap();
    assert!(again.is_empty(), "unrecoverable already: {again:?}");
}

/// Record format 3: a base no longer reads the partition's retired gaps (millions after a
/// day-long incident); their chunks read them by offset range, every state included.
#[test]
fn retired_gaps_are_read_by_chunk_never_by_a_base() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let gaps = [
        gap("a", 0, 9, 0, GapState::Open),
        gap("a", 0, 100, 0, GapState::Open),
        gap("a", 0, 300, 0, GapState::Open),
        gap("a", 0, 400, 0, GapState::Unrecoverable),
        gap("a", 1, 110, 0, GapState::Open),
    ];
    let retired: Vec<String> = gaps[1..].iter().map(|g| g.id.clone()).collect();
    store
        .commit_round_retiring(
            "a",
            &gaps,
            &[],
            KeyClaims::<&[u8]>::Changes(&[]),
            &retired,
            &[],
        )
        .unwrap();
    assert!(store.ack(&gaps[2].id, "known").unwrap());
    let base: Vec<Offset> = store
        .unresolved_gaps_of_partition("a", "t", 0)
        .unwrap()
        .into_iter()
        .map(|(g, ..)| g.first_offset)
        .collect();
    assert_eq!(base, vec![9], "a base reads no retired gap");
    let chunk: Vec<(Offset, GapState)> = store
        .retired_gaps_between("a", "t", 0, 0, 512, 100)
        .unwrap()
        .into_iter()
        .map(|g| (g.first_offset, g.state))
        .collect();
    assert_eq!(
        chunk,
        vec![
            (100, GapState::Open),
            (300, GapState::Acknowledged),
            (400, GapState::Unrecoverable)
        ]
    );
    assert_eq!(
        store
            .retired_gaps_between("a", "t", 0, 0, 512, 2)
            .unwrap()
            .len(),
        2,
        "at most the limit"
    );
}

/// An import writes handed-over retired gaps as retired rows (counted by the aggregate),
/// with their marks; a later chunk's row replaces an earlier one's, and an acknowledgement
/// in the store stays.
#[test]
fn imported_retired_gaps_are_retired_rows() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut a = gap("a", 0, 100, 0, GapState::Open);
    a.replayed_at = Some(chrono::Utc::now());
    let b = gap("a", 0, 200, 0, GapState::Open);
    store.import_retired("a", &[a.clone(), b.clone()]).unwrap();
    let agg = store.settle_retired("a", "t", 0, &[]).unwrap();
    assert_eq!((agg.gaps, agg.open), (2, 2));
    assert!(store.is_replayed(&a.id).unwrap());
    let mut b2 = b.clone();
    b2.state = GapState::Acknowledged;
    b2.ack_reason = Some("known".into());
    store.import_retired("a", &[b2]).unwrap();
    assert_eq!(store.settle_retired("a", "t", 0, &[]).unwrap().gaps, 1);
    store.import_retired("a", &[b]).unwrap();
    assert_eq!(
        store
            .get_gap(&gap("a", 0, 200, 0, GapState::Open).id)
            .unwrap()
            .map(|g| g.state),
        Some(GapState::Acknowledged),
        "an acknowledgement stays"
    );
}

/// Review item 4 of format 3: an imported chunk saying `open` never reopens a row this
/// store holds `unrecoverable` (Kafka's deletion is not undone), and keeps its time.
#[test]
fn an_import_never_undoes_unrecoverable() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let a = gap("a", 0, 100, 0, GapState::Open);
    store.import_retired("a", std::slice::from_ref(&a)).unwrap();
    let at_ms = 1_700_000_000_000;
    let agg = store
        .settle_retired(
            "a",
            "t",
            0,
            &[crate::ledger::RetiredOp::Deleted { below: 150, at_ms }],
        )
        .unwrap();
    assert_eq!(agg.deleted_ms, Some(at_ms));
    store.import_retired("a", std::slice::from_ref(&a)).unwrap();
    let g = store.get_gap(&a.id).unwrap().expect("row");
    assert_eq!(g.state, GapState::Unrecoverable, "reopened by the import");
    assert_eq!(
        g.unrecoverable_at.map(|t| t.timestamp_millis()),
        Some(at_ms)
    );
    assert_eq!(
        store.settle_retired("a", "t", 0, &[]).unwrap().deleted_ms,
        Some(at_ms)
    );
}

/// Review item 2 of format 3: applying a chunk's newest version drops the retired rows of
/// its offsets it lacks, never an acknowledged one, a kept one, a row not retired, or one
/// outside the chunk or of another partition.
#[test]
fn a_chunks_newest_version_drops_the_retired_rows_it_lacks() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let kept = gap("a", 0, 1, 0, GapState::Open);
    let lacking = gap("a", 0, 3, 0, GapState::Unrecoverable);
    let mut acked = gap("a", 0, 5, 0, GapState::Acknowledged);
    acked.ack_reason = Some("known".into());
    let beyond = gap("a", 0, 64, 0, GapState::Open);
    let other = gap("a", 1, 3, 0, GapState::Open);
    store
        .import_retired(
            "a",
            &[
                kept.clone(),
                lacking.clone(),
                acked.clone(),
                beyond.clone(),
                other.clone(),
            ],
        )
        .unwrap();
    let live = gap("a", 0, 7, 0, GapState::Open);
    store
        .commit_round("a", std::slice::from_ref(&live), &[])
        .unwrap();
    let gone = store
        .drop_retired_lacking("a", "t", 0, 0, 64, std::slice::from_ref(&kept.id))
        .unwrap();
    assert_eq!(gone, std::slice::from_ref(&lacking.id));
    assert!(store.get_gap(&lacking.id).unwrap().is_none());
    for g in [&kept, &acked, &beyond, &other, &live] {
        assert!(store.get_gap(&g.id).unwrap().is_some(), "{} stays", g.id);
    }
}

/// Schema v14/v15: which partitions' retired gaps are on a handover topic's side topic, and
/// under which term.
#[test]
fn swept_partitions_are_remembered_per_handover_topic() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    assert!(store.handover_swept("h", "a").unwrap().is_empty());
    store.set_handover_swept("h", "a", "t", 0, Some(3)).unwrap();
    store.set_handover_swept("h", "a", "t", 0, Some(4)).unwrap();
    store.set_handover_swept("h", "a", "t", 1, Some(1)).unwrap();
    store
        .set_handover_swept("other", "a", "t", 2, Some(1))
        .unwrap();
    assert_eq!(
        store.handover_swept("h", "a").unwrap(),
        std::collections::BTreeMap::from([(("t".to_string(), 0), 4), (("t".to_string(), 1), 1)])
    );
    store.set_handover_swept("h", "a", "t", 0, None).unwrap();
    assert_eq!(store.handover_swept("h", "a").unwrap().len(), 1);
    assert!(store.handover_swept("h", "b").unwrap().is_empty());
    // Gaps of partition 1 retiring: unmarked for every handover topic.
    store
        .set_handover_swept("other", "a", "t", 1, Some(1))
        .unwrap();
    store
        .clear_handover_swept("a", &[("t".to_string(), 1)])
        .unwrap();
    assert!(store.handover_swept("h", "a").unwrap().is_empty());
    assert_eq!(store.handover_swept("other", "a").unwrap().len(), 1);
}

/// What an assignment asks to drop the gaps of partitions owned elsewhere: the partitions
/// with unresolved gaps, not their rows.
#[test]
fn the_partitions_with_unresolved_gaps_are_listed_without_their_rows() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let gaps = [
        gap("a", 0, 9, 0, GapState::Open),
        gap("a", 0, 30, 0, GapState::Open),
        gap("a", 1, 5, 0, GapState::Late),
        gap("a", 2, 5, 0, GapState::Unverifiable),
        gap("b", 3, 4, 0, GapState::Open),
    ];
    store.commit_round("a", &gaps[..4], &[]).unwrap();
    store.commit_round("b", &gaps[4..], &[]).unwrap();
    assert_eq!(
        store.partitions_with_unresolved_gaps("a").unwrap(),
        std::collections::BTreeSet::from([("t".to_string(), 0), ("t".to_string(), 2)])
    );
}

/// Review item 7 of format 3: the v14 migration marks acknowledged rows retired (they left
/// the ledger; they travel as side-topic chunks, no longer inline in every base), and only
/// those: an open row stays as it was.
#[test]
fn the_v14_migration_retires_acknowledged_rows() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let acked = gap("a", 0, 100, 0, GapState::Acknowledged);
    let open = gap("a", 0, 200, 0, GapState::Open);
    store
        .commit_round("a", &[acked.clone(), open.clone()], &[])
        .unwrap();
    drop(store);
    let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
    conn.execute_batch("UPDATE gaps SET retired = 0").unwrap();
    conn.pragma_update(None, "user_version", 13).unwrap();
    drop(conn);
    let store = Store::open(dir.path()).unwrap();
    let rows = store
        .retired_gaps_between("a", "t", 0, 0, 1000, 100)
        .unwrap();
    assert_eq!(
        rows.iter().map(|g| g.id.clone()).collect::<Vec<_>>(),
        vec![acked.id.clone()]
    );
    // Opening again (the migration done) changes nothing.
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(
        store
            .retired_gaps_between("a", "t", 0, 0, 1000, 100)
            .unwrap()
            .len(),
        1
    );
}

/// Review item 9 of format 3: the chunks a write retires gaps of are noted before it and
/// cleared once published, per handover topic and partition; a crash in between leaves
/// exactly those to publish again (not the whole partition), and a partition dropped as
/// owned elsewhere loses them with its swept mark.
#[test]
fn unpublished_chunks_are_noted_listed_and_cleared() {
    use std::collections::BTreeSet;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut noted = crate::store::PartitionChunks::new();
    noted.insert(("t".into(), 0), BTreeSet::from([0, 3]));
    noted.insert(("t".into(), 1), BTreeSet::from([9]));
    store.note_unpublished_chunks("h", "a", &noted).unwrap();
    store.note_unpublished_chunks("h", "a", &noted).unwrap();
    assert_eq!(store.unpublished_chunks("h", "a").unwrap(), noted);
    assert!(store.unpublished_chunks("other", "a").unwrap().is_empty());
    assert!(store.unpublished_chunks("h", "b").unwrap().is_empty());
    store
        .clear_unpublished_chunks("h", "a", "t", 0, &BTreeSet::from([3]))
        .unwrap();
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    let left = store.unpublished_chunks("h", "a").unwrap();
    assert_eq!(left[&("t".to_string(), 0)], BTreeSet::from([0]));
    store.clear_handover_swept("a", &[("t".into(), 1)]).unwrap();
    let left = store.unpublished_chunks("h", "a").unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
}

/// Review of the terms, N1: the highest term used per partition and handover topic, never
/// lowered.
#[test]
fn used_terms_are_remembered_and_never_lowered() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    assert!(store.used_terms("h", "a").unwrap().is_empty());
    store.use_term("h", "a", "t", 0, 4).unwrap();
    store.use_term("h", "a", "t", 0, 2).unwrap();
    store.use_term("h", "a", "t", 1, 7).unwrap();
    store.use_term("other", "a", "t", 0, 9).unwrap();
    assert_eq!(
        store.used_terms("h", "a").unwrap(),
        std::collections::BTreeMap::from([(("t".to_string(), 0), 4), (("t".to_string(), 1), 7)])
    );
}
