use super::*;
use crate::gap::{Gap, GapCause};
use chrono::TimeZone;
use rusqlite::params;
use serde_json::json;

fn ts(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + secs, 123_456_789)
        .unwrap()
}

fn gap(audit: &str, partition: i32, first: Offset, detected: i64, state: GapState) -> Gap {
    Gap {
        id: Gap::make_id(audit, "t", partition, first),
        audit: audit.to_string(),
        topic: "t".to_string(),
        partition,
        first_offset: first,
        last_offset: first + 9,
        missing_records: 10,
        size_known: true,
        first_timestamp: Some(ts(0)),
        last_timestamp: Some(ts(5)),
        detected_at: ts(detected),
        state,
        unrecoverable_at: Some(ts(86_400)),
        ack_reason: None,
        cause: Default::default(),
        pipeline_commit_from: None,
        pipeline_commit_to: None,
        pipeline_commit_at: None,
        evidence: None,
        shared_key: false,
        replayed_at: None,
    }
}

#[test]
fn the_key_book_is_written_with_the_round_and_deleted_at_zero() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let a = b"10.0.0.1\xffa.com\xff".to_vec();
    let b = b"x\xff".to_vec();
    store
        .commit_round_with_keys(
            "au",
            &[],
            &[progress(0, 5)],
            KeyClaims::Changes(&[(a.clone(), 2), (b.clone(), 1)]),
        )
        .unwrap();
    let mut book = store.load_key_book("au").unwrap();
    book.sort();
    assert_eq!(book, vec![(a.clone(), 2), (b.clone(), 1)]);
    store
        .commit_round_with_keys(
            "au",
            &[],
            &[],
            KeyClaims::Changes(&[(b.clone(), 0), (a.clone(), 3)]),
        )
        .unwrap();
    assert_eq!(store.load_key_book("au").unwrap(), vec![(a.clone(), 3)]);
    assert_eq!(store.key_confirmed("au", &[a, b]).unwrap(), vec![3, 0]);
    assert!(store.load_key_book("other").unwrap().is_empty());
}

/// The key log: a key's last row wins (a key counted, forgotten, counted again reads as
/// its last count; one forgotten last reads as absent), claims come back in the order they
/// were last written, audits do not see each other's rows, and a whole write leaves exactly
/// the book it was given.
#[test]
fn the_key_log_reads_last_rows_and_a_whole_write_replaces_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let k = |s: &str| format!("{s}\u{ff}").into_bytes();
    let changes =
        |v: &[(&str, u64)]| -> Vec<(Vec<u8>, u64)> { v.iter().map(|(s, n)| (k(s), *n)).collect() };
    let write = |audit: &str, c: KeyClaims<'_, Vec<u8>>| {
        store.commit_round_with_keys(audit, &[], &[], c).unwrap()
    };
    write(
        "au",
        KeyClaims::Changes(&changes(&[("a", 1), ("b", 1), ("c", 2)])),
    );
    write("other", KeyClaims::Changes(&changes(&[("a", 7)])));
    write("au", KeyClaims::Changes(&changes(&[("a", 0), ("c", 3)])));
    write("au", KeyClaims::Changes(&changes(&[("b", 0), ("a", 4)])));
    write("au", KeyClaims::Changes(&changes(&[("d", 1)])));
    let log = store.load_key_log("au").unwrap();
    assert_eq!(log.rows, 8);
    assert_eq!(log.claims, changes(&[("c", 3), ("a", 4), ("d", 1)]));
    assert_eq!(
        store
            .key_confirmed("au", &[k("a"), k("b"), k("c"), k("x")])
            .unwrap(),
        vec![4, 0, 3, 0]
    );
    assert_eq!(store.load_key_book("other").unwrap(), changes(&[("a", 7)]));

    write(
        "au",
        KeyClaims::Whole(&changes(&[("d", 1), ("a", 4), ("z", 0), ("c", 3)])),
    );
    let log = store.load_key_log("au").unwrap();
    assert_eq!(log.rows, 3, "dead rows and zero counts are gone");
    assert_eq!(log.claims, changes(&[("d", 1), ("a", 4), ("c", 3)]));
    assert_eq!(store.load_key_book("other").unwrap(), changes(&[("a", 7)]));
    write("au", KeyClaims::Changes(&changes(&[("d", 0)])));
    assert_eq!(
        store.load_key_book("au").unwrap(),
        changes(&[("a", 4), ("c", 3)])
    );
}

fn progress(partition: i32, settled: Offset) -> PartitionProgress {
    PartitionProgress {
        items: None,
        topic: "t".to_string(),
        partition,
        settled,
        ledger: json!({"runs": [[settled, settled + 5]], "note": "opaque"}),
        updated_at: ts(10),
    }
}

fn all(audit: Option<&str>) -> GapFilter {
    GapFilter {
        state: StateFilter::All,
        audit: audit.map(str::to_string),
    }
}

#[test]
fn round_trip_gaps_and_progress() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("nested/state")).unwrap();
    let mut g = gap("a", 0, 100, 1, GapState::Open);
    g.first_timestamp = None;
    g.size_known = false;
    let g2 = gap("a", 1, 7, 2, GapState::Unrecoverable);
    store
        .commit_round(
            "a",
            &[g.clone(), g2.clone()],
            &[progress(0, 110), progress(1, 20)],
        )
        .unwrap();

    assert_eq!(store.get_gap(&g.id).unwrap(), Some(g.clone()));
    assert_eq!(store.get_gap("nope").unwrap(), None);
    // Newest detected first.
    assert_eq!(store.list_gaps(&all(None)).unwrap(), vec![g2, g]);
    assert_eq!(
        store.load_progress("a").unwrap(),
        vec![progress(0, 110), progress(1, 20)]
    );
    assert!(store.load_progress("other").unwrap().is_empty());
}

#[test]
fn upsert_is_idempotent_and_updates_fields() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let g = gap("a", 0, 100, 5, GapState::Open);
    store
        .commit_round("a", std::slice::from_ref(&g), &[progress(0, 100)])
        .unwrap();
    store
        .commit_round("a", std::slice::from_ref(&g), &[progress(0, 100)])
        .unwrap();
    assert_eq!(store.list_gaps(&all(None)).unwrap(), vec![g.clone()]);

    let mut grown = g.clone();
    grown.last_offset = 150;
    grown.missing_records = 51;
    grown.detected_at = ts(50); // re-detected after a crash: must keep the first time
    grown.state = GapState::Late;
    store
        .commit_round("a", std::slice::from_ref(&grown), &[progress(0, 151)])
        .unwrap();
    let rows = store.list_gaps(&all(None)).unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(
        rows[0],
        Gap {
            detected_at: g.detected_at,
            ..grown
        }
    );
    let p = store.load_progress("a").unwrap();
    assert_eq!(p.len(), 1);
    assert_eq!(p[0].settled, 151);
}

#[test]
fn ack_survives_a_later_round() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let g = gap("a", 0, 100, 5, GapState::Open);
    store
        .commit_round("a", std::slice::from_ref(&g), &[])
        .unwrap();
    assert!(store.ack(&g.id, "known outage").unwrap());
    assert!(!store.ack("a:t:0:999", "x").unwrap());

    let mut again = g.clone();
    again.missing_records = 3;
    store.commit_round("a", &[again], &[]).unwrap();
    let got = store.get_gap(&g.id).unwrap().unwrap();
    assert_eq!(got.state, GapState::Acknowledged);
    assert_eq!(got.ack_reason.as_deref(), Some("known outage"));
    assert_eq!(got.missing_records, 3, "counts still update");
}

/// A gap whose records arrived after all (late, repaired) is not acknowledged: the ack
/// would overwrite the state that says they arrived. Refused with the reason, nothing written.
#[test]
fn ack_of_a_resolved_gap_is_refused_and_keeps_its_state() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    for (first, state) in [(100, GapState::Late), (200, GapState::Repaired)] {
        let g = gap("a", 0, first, 5, state);
        store
            .commit_round("a", std::slice::from_ref(&g), &[])
            .unwrap();
        let position = store.ack_position().unwrap();
        match store.ack(&g.id, "known outage") {
            Err(StoreError::Resolved { id, state: s }) => {
                assert_eq!((id.as_str(), s.as_str()), (g.id.as_str(), state.as_str()));
            }
            other => panic!("{state:?}: {other:?}"),
        }
        let got = store.get_gap(&g.id).unwrap().unwrap();
        assert_eq!((got.state, got.ack_reason), (state, None));
        assert_eq!(store.ack_position().unwrap(), position, "nothing logged");
    }
    let open = gap("a", 0, 300, 5, GapState::Unrecoverable);
    store
        .commit_round("a", std::slice::from_ref(&open), &[])
        .unwrap();
    assert!(store.ack(&open.id, "known outage").unwrap());
}

/// Issue 35 item 7: an acknowledgement covers the records the gap held when it was given.
/// A round that was under way when the ack landed extended the tail gap (100..=109 became
/// 100..=114, 15 missing): its write keeps the acknowledged extent, which is what the next
/// round's acknowledgement reading hands the ledger (the 5 new records stay open there).
#[test]
fn a_round_never_grows_an_acknowledged_gap() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let g = gap("a", 0, 100, 5, GapState::Open);
    store
        .commit_round("a", std::slice::from_ref(&g), &[])
        .unwrap();
    let position = store.ack_position().unwrap();
    assert!(store.ack(&g.id, "known outage").unwrap());

    let mut extended = g.clone();
    extended.last_offset = 114;
    extended.missing_records = 15;
    extended.last_timestamp = Some(ts(9));
    store.commit_round("a", &[extended], &[]).unwrap();
    let got = store.get_gap(&g.id).unwrap().unwrap();
    assert_eq!(got.state, GapState::Acknowledged);
    assert_eq!(
        (got.first_offset, got.last_offset, got.missing_records),
        (100, 109, 10),
        "the extent acknowledged"
    );
    assert_eq!(got.last_timestamp, Some(ts(5)));
    let (acked, _) = store.acks_since("a", position).unwrap();
    assert_eq!(
        acked
            .iter()
            .map(|g| (g.last_offset, g.missing_records))
            .collect::<Vec<_>>(),
        vec![(109, 10)]
    );
}

#[test]
fn acks_since_reads_only_the_new_acknowledgements_of_one_audit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let gaps: Vec<Gap> = (0..4)
        .map(|i| gap("a", 0, i * 10, i, GapState::Open))
        .collect();
    store.commit_round("a", &gaps, &[]).unwrap();
    let other = gap("b", 0, 0, 0, GapState::Open);
    store
        .commit_round("b", std::slice::from_ref(&other), &[])
        .unwrap();
    let start = store.ack_position().unwrap();
    assert_eq!(store.acks_since("a", start).unwrap(), (Vec::new(), start));

    assert!(store.ack(&gaps[1].id, "x").unwrap());
    assert!(store.ack(&other.id, "x").unwrap());
    let (got, pos) = store.acks_since("a", start).unwrap();
    assert_eq!(got.iter().map(|g| &g.id).collect::<Vec<_>>(), [&gaps[1].id]);
    assert_eq!(got[0].state, GapState::Acknowledged);
    assert!(pos > start);
    // Read up to `pos`: nothing new; a gap acknowledged twice is listed once.
    assert_eq!(store.acks_since("a", pos).unwrap(), (Vec::new(), pos));
    assert!(store.ack(&gaps[3].id, "y").unwrap());
    assert!(store.ack(&gaps[3].id, "z").unwrap());
    let (got, pos2) = store.acks_since("a", pos).unwrap();
    assert_eq!(got.iter().map(|g| &g.id).collect::<Vec<_>>(), [&gaps[3].id]);
    assert_eq!(store.acks_since("a", pos2).unwrap().0, Vec::new());
    // An unknown id logs nothing.
    assert!(!store.ack("a:t:0:999", "x").unwrap());
    assert_eq!(store.acks_since("a", pos2).unwrap().0, Vec::new());
    // A second process (the `ack` command) is read the same way.
    let cli = Store::open(dir.path()).unwrap();
    assert!(cli.ack(&gaps[0].id, "cli").unwrap());
    let (got, _) = store.acks_since("a", pos2).unwrap();
    assert_eq!(got.iter().map(|g| &g.id).collect::<Vec<_>>(), [&gaps[0].id]);
}

#[test]
fn filters_by_state_and_audit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let open_a = gap("a", 0, 1, 1, GapState::Open);
    let late_a = gap("a", 0, 50, 2, GapState::Late);
    let unrec_b = gap("b", 0, 1, 3, GapState::Unrecoverable);
    let acked_b = gap("b", 1, 1, 4, GapState::Open);
    store
        .commit_round("a", &[open_a.clone(), late_a.clone()], &[])
        .unwrap();
    store
        .commit_round("b", &[unrec_b.clone(), acked_b.clone()], &[])
        .unwrap();
    store.ack(&acked_b.id, "fine").unwrap();

    let ids = |f: GapFilter| -> Vec<String> {
        store
            .list_gaps(&f)
            .unwrap()
            .into_iter()
            .map(|g| g.id)
            .collect()
    };
    assert_eq!(
        ids(GapFilter::default()),
        vec![unrec_b.id.clone(), open_a.id.clone()]
    );
    assert_eq!(
        ids(GapFilter {
            state: StateFilter::Unresolved,
            audit: Some("a".into())
        }),
        vec![open_a.id.clone()]
    );
    assert_eq!(
        ids(GapFilter {
            state: StateFilter::Only(GapState::Late),
            audit: None
        }),
        vec![late_a.id.clone()]
    );
    assert_eq!(
        ids(GapFilter {
            state: StateFilter::Only(GapState::Acknowledged),
            audit: None
        }),
        vec![acked_b.id.clone()]
    );
    assert_eq!(ids(all(Some("b"))), vec![acked_b.id, unrec_b.id]);
    assert_eq!(ids(all(Some("zzz"))), Vec::<String>::new());
    // Values are bound, never spliced into SQL.
    assert!(ids(all(Some("' OR 1=1 --"))).is_empty());
}

#[test]
fn all_states_lists_every_variant() {
    // No wildcard: adding a GapState variant breaks this match until ALL_STATES (used
    // by the `open` filter) is updated too.
    for s in ALL_STATES {
        match s {
            GapState::Open
            | GapState::Late
            | GapState::Repaired
            | GapState::Unrecoverable
            | GapState::Unverifiable
            | GapState::Acknowledged
            | GapState::DeadLettered => {}
        }
    }
    assert_eq!(ALL_STATES.len(), 7);
}

#[test]
fn concurrent_writers_wait_instead_of_failing() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Store::open(dir.path()).unwrap();
    let cli = Store::open(dir.path()).unwrap();
    let gaps: Vec<Gap> = (0..50)
        .map(|i| gap("a", 0, i * 100, i, GapState::Open))
        .collect();
    daemon.commit_round("a", &gaps, &[]).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..50 {
                daemon.commit_round("a", &gaps, &[progress(0, i)]).unwrap();
            }
        });
        s.spawn(|| {
            for g in &gaps {
                assert!(cli.ack(&g.id, "bulk").unwrap());
            }
        });
    });
    let acked = GapFilter {
        state: StateFilter::Only(GapState::Acknowledged),
        audit: None,
    };
    assert_eq!(cli.list_gaps(&acked).unwrap().len(), 50);
    assert_eq!(cli.load_progress("a").unwrap()[0].settled, 49);
}

#[test]
fn state_filter_parse() {
    assert_eq!(StateFilter::parse("open"), Some(StateFilter::Unresolved));
    assert_eq!(StateFilter::parse("all"), Some(StateFilter::All));
    assert_eq!(
        StateFilter::parse("late"),
        Some(StateFilter::Only(GapState::Late))
    );
    assert_eq!(
        StateFilter::parse("acknowledged"),
        Some(StateFilter::Only(GapState::Acknowledged))
    );
    assert_eq!(StateFilter::parse("OPEN"), None);
    assert_eq!(StateFilter::parse(""), None);
}

#[test]
fn second_connection_reads_and_acks_while_first_is_open() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Store::open(dir.path()).unwrap();
    let g = gap("a", 0, 100, 5, GapState::Open);
    daemon
        .commit_round("a", std::slice::from_ref(&g), &[progress(0, 110)])
        .unwrap();

    let cli = Store::open(dir.path()).unwrap();
    assert_eq!(
        cli.list_gaps(&GapFilter::default()).unwrap(),
        vec![g.clone()]
    );
    assert!(cli.ack(&g.id, "from the CLI").unwrap());

    // The daemon sees the ack and its next round does not undo it.
    assert_eq!(
        daemon.get_gap(&g.id).unwrap().unwrap().state,
        GapState::Acknowledged
    );
    daemon
        .commit_round("a", std::slice::from_ref(&g), &[progress(0, 120)])
        .unwrap();
    assert_eq!(
        cli.get_gap(&g.id).unwrap().unwrap().state,
        GapState::Acknowledged
    );
    assert_eq!(cli.load_progress("a").unwrap()[0].settled, 120);
}

#[test]
fn reopen_keeps_data_and_schema_version() {
    let dir = tempfile::tempdir().unwrap();
    let g = gap("a", 3, 42, 5, GapState::Open);
    {
        let store = Store::open(dir.path()).unwrap();
        store
            .commit_round("a", std::slice::from_ref(&g), &[progress(3, 52)])
            .unwrap();
    }
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(store.get_gap(&g.id).unwrap(), Some(g));
    assert_eq!(store.load_progress("a").unwrap(), vec![progress(3, 52)]);
    assert_eq!(store.path(), dir.path().join(DB_FILE));
    let conn = store.lock();
    let v: i32 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION);
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
}

#[test]
fn refuses_a_newer_schema() {
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path()).unwrap());
    let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let err = Store::open(dir.path()).unwrap_err();
    assert!(
        matches!(err, StoreError::SchemaTooNew { found: 99, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains(DB_FILE),
        "message names the file: {err}"
    );
}

/// A ledger with its items: missing runs and gaps as the ledger serializes them.
fn full_ledger(firsts: &[i64]) -> serde_json::Value {
    json!({
        "missing": firsts.iter().map(|f| json!({"run": {"first": f, "last": f}, "gap": f})).collect::<Vec<_>>(),
        "gaps": firsts.iter().map(|f| json!({"first": f, "last": f, "missing": 1})).collect::<Vec<_>>(),
        "tail_gap": firsts.last(),
    })
}

/// v6 stores a ledger's items one row each and writes deltas: before, every round that
/// decided anything rewrote the whole ledger JSON (6 MB at 10,000 gaps). A delta must
/// upsert and delete exactly its items, a whole write must replace every stored item,
/// and a load must give back the ledger as written.
#[test]
fn ledger_items_are_written_as_deltas_and_loaded_whole() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut p = progress(0, 10);
    p.ledger = full_ledger(&[1, 3, 5]);
    store.commit_round("a", &[], &[p.clone()]).unwrap();
    assert_eq!(
        store.load_progress("a").unwrap()[0].ledger,
        full_ledger(&[1, 3, 5])
    );
    // Delta: 3 goes, 7 comes; 1 and 5 are not written at all.
    let item = |f: i64| json!({"run": {"first": f, "last": f}, "gap": f}).to_string();
    let gap = |f: i64| json!({"first": f, "last": f, "missing": 1}).to_string();
    let mut d = progress(0, 12);
    d.ledger = json!({"tail_gap": 7});
    d.items = Some(LedgerItems {
        missing: vec![(3, None), (7, Some(item(7)))],
        gaps: vec![(3, None), (7, Some(gap(7)))],
    });
    store.commit_round("a", &[], &[d]).unwrap();
    let back = store.load_progress("a").unwrap();
    assert_eq!(back[0].settled, 12);
    assert_eq!(back[0].ledger, full_ledger(&[1, 5, 7]));
    // A whole write replaces everything: nothing stale survives.
    p.ledger = full_ledger(&[9]);
    store.commit_round("a", &[], &[p]).unwrap();
    assert_eq!(
        store.load_progress("a").unwrap()[0].ledger,
        full_ledger(&[9])
    );
    let rows: i64 = store
        .lock()
        .query_row("SELECT COUNT(*) FROM ledger_items", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows, 2);
}

/// A v5 store kept each ledger whole in `progress.ledger`: the migration moves its items
/// into rows, so that the first delta written afterwards cannot drop them.
#[test]
fn a_v5_ledger_is_migrated_into_items() {
    let dir = tempfile::tempdir().unwrap();
    let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
    for schema in [SCHEMA_V1, SCHEMA_V2, SCHEMA_V3, SCHEMA_V4, SCHEMA_V5] {
        conn.execute_batch(schema).unwrap();
    }
    conn.pragma_update(None, "user_version", 5).unwrap();
    conn.execute(
        "INSERT INTO progress (audit, topic, partition, settled, ledger, updated_at)
             VALUES ('a', 't', 0, 10, ?1, ?2)",
        params![full_ledger(&[1, 3]).to_string(), fmt_ts(Utc::now())],
    )
    .unwrap();
    drop(conn);
    let store = Store::open(dir.path()).unwrap();
    let head: String = store
        .lock()
        .query_row("SELECT ledger FROM progress", [], |r| r.get(0))
        .unwrap();
    assert_eq!(head, json!({"tail_gap": 3}).to_string());
    let mut d = progress(0, 11);
    d.ledger = json!({"tail_gap": 3});
    d.items = Some(LedgerItems::default());
    store.commit_round("a", &[], &[d]).unwrap();
    assert_eq!(
        store.load_progress("a").unwrap()[0].ledger,
        full_ledger(&[1, 3])
    );
}

#[test]
fn a_v1_store_is_migrated_and_keeps_its_gaps() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path()).unwrap();
    let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
    conn.execute_batch(SCHEMA_V1).unwrap();
    conn.pragma_update(None, "user_version", 1).unwrap();
    conn.execute(
        "INSERT INTO gaps (id, audit, topic, partition, first_offset, last_offset,
                missing_records, size_known, detected_at, state, updated_at)
             VALUES ('a:t:0:2', 'a', 't', 0, 2, 3, 2, 1, ?1, 'open', ?1)",
        params![fmt_ts(Utc::now())],
    )
    .unwrap();
    drop(conn);
    let store = Store::open(dir.path()).unwrap();
    let g = store
        .get_gap("a:t:0:2")
        .unwrap()
        .expect("gap survives the migration");
    assert_eq!(
        (g.first_offset, g.last_offset, g.missing_records),
        (2, 3, 2)
    );
    assert_eq!(g.cause, GapCause::Unknown);
    assert_eq!(g.pipeline_commit_from, None);
    let mut g2 = g.clone();
    g2.cause = GapCause::SkippedByRestart;
    g2.pipeline_commit_from = Some(2);
    g2.pipeline_commit_to = Some(4);
    g2.pipeline_commit_at = Some(Utc::now());
    store.commit_round("a", &[g2.clone()], &[]).unwrap();
    let back = store.get_gap("a:t:0:2").unwrap().unwrap();
    assert_eq!(back.cause, GapCause::SkippedByRestart);
    assert_eq!(
        (back.pipeline_commit_from, back.pipeline_commit_to),
        (Some(2), Some(4))
    );
    assert_eq!(back.pipeline_commit_at, g2.pipeline_commit_at);
}

#[test]
fn unresolved_copies_of_a_moved_partition_are_forgotten_others_kept() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let resolved_elsewhere = gap("a", 0, 10, 2, GapState::Open);
    let handed_over = gap("a", 0, 20, 2, GapState::Open);
    let above = gap("a", 0, 90, 2, GapState::Open);
    let late = gap("a", 0, 5, 0, GapState::Late);
    let other_partition = gap("a", 1, 10, 2, GapState::Open);
    let other_audit = gap("b", 0, 10, 2, GapState::Open);
    let all = [
        &resolved_elsewhere,
        &handed_over,
        &above,
        &late,
        &other_partition,
        &other_audit,
    ];
    for g in all {
        store
            .commit_round(&g.audit, std::slice::from_ref(g), &[])
            .unwrap();
    }
    let acked = gap("a", 0, 30, 2, GapState::Open);
    store
        .commit_round("a", std::slice::from_ref(&acked), &[])
        .unwrap();
    assert!(store.ack(&acked.id, "known").unwrap());
    let dropped = store
        .forget_unresolved("a", "t", 0, 50, std::slice::from_ref(&handed_over.id), true)
        .unwrap();
    assert_eq!(dropped, vec![resolved_elsewhere.id.clone()]);
    assert_eq!(store.get_gap(&resolved_elsewhere.id).unwrap(), None);
    for g in all.iter().skip(1).copied().chain([&acked]) {
        assert!(store.get_gap(&g.id).unwrap().is_some(), "{} kept", g.id);
    }
    // Owned elsewhere: every unresolved gap of the partition goes, acknowledged/late stay.
    let dropped = store
        .forget_unresolved("a", "t", 0, Offset::MAX, &[], true)
        .unwrap();
    assert_eq!(dropped.len(), 2, "{dropped:?}");
    assert!(store.get_gap(&acked.id).unwrap().is_some());
    assert!(store.get_gap(&late.id).unwrap().is_some());
    assert!(store.get_gap(&other_partition.id).unwrap().is_some());
}

#[test]
fn a_replayed_gap_turns_repaired_when_its_records_arrive() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut g = gap("a", 0, 2, 0, GapState::Open);
    store.commit_round("a", &[g.clone()], &[]).unwrap();
    assert!(!store.is_replayed(&g.id).unwrap());
    assert!(store.mark_replayed(&g.id).unwrap());
    assert!(store.is_replayed(&g.id).unwrap());
    assert!(!store.is_replayed("nope").unwrap());
    assert!(!store.mark_replayed("nope").unwrap());
    g.missing_records = 0;
    g.state = GapState::Late;
    store.commit_round("a", &[g.clone()], &[]).unwrap();
    assert_eq!(
        store.get_gap(&g.id).unwrap().unwrap().state,
        GapState::Repaired
    );

    let other = gap("a", 0, 9, 0, GapState::Open);
    store
        .commit_round("a", std::slice::from_ref(&other), &[])
        .unwrap();
    assert!(store.mark_unrecoverable(&other.id, Utc::now()).unwrap());
    let back = store.get_gap(&other.id).unwrap().unwrap();
    assert_eq!(back.state, GapState::Unrecoverable);
    assert!(back.unrecoverable_at.is_some());
}

/// A handover reads a partition's gaps in one query, with their replay marks.
#[test]
fn gaps_of_one_partition_come_in_offset_order_with_their_replay_marks() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let gaps = [
        gap("a", 0, 9, 0, GapState::Open),
        gap("a", 0, 2, 0, GapState::Acknowledged),
        gap("a", 1, 5, 0, GapState::Open),
        gap("b", 0, 4, 0, GapState::Open),
    ];
    store.commit_round("a", &gaps, &[]).unwrap();
    store.mark_replayed(&gaps[0].id).unwrap();
    let got: Vec<(Offset, bool)> = store
        .gaps_of_partition("a", "t", 0)
        .unwrap()
        .into_iter()
        .map(|(g, r, _)| (g.first_offset, r))
        .collect();
    assert_eq!(got, vec![(2, false), (9, true)]);
}

/// `replay` marks a gap before writing (a round confirming the records in between must
/// see the mark) and takes the mark back when it wrote nothing; a gap already reported
/// repaired keeps its state.
#[test]
fn a_replay_mark_is_taken_back_unless_the_gap_is_repaired() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let mut g = gap("a", 0, 2, 0, GapState::Open);
    store.commit_round("a", &[g.clone()], &[]).unwrap();
    store.mark_replayed(&g.id).unwrap();
    assert!(store.clear_replayed(&g.id).unwrap());
    assert!(!store.is_replayed(&g.id).unwrap());
    g.missing_records = 0;
    g.state = GapState::Late;
    store.commit_round("a", &[g.clone()], &[]).unwrap();
    assert_eq!(
        store.get_gap(&g.id).unwrap().unwrap().state,
        GapState::Late,
        "late, not repaired: nothing was replayed"
    );
    let h = gap("a", 0, 7, 0, GapState::Open);
    store
        .commit_round("a", std::slice::from_ref(&h), &[])
        .unwrap();
    store.mark_replayed(&h.id).unwrap();
    let mut late = h.clone();
    late.missing_records = 0;
    late.state = GapState::Late;
    store.commit_round("a", &[late], &[]).unwrap();
    assert!(!store.clear_replayed(&h.id).unwrap());
    assert_eq!(
        store.get_gap(&h.id).unwrap().unwrap().state,
        GapState::Repaired
    );
}

/// The two columns of every row `sql` selects.
fn pairs<A: rusqlite::types::FromSql, B: rusqlite::types::FromSql>(
    conn: &Connection,
    sql: &str,
) -> Vec<(A, B)> {
    let mut stmt = conn.prepare(sql).unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// A file's schema as SQLite keeps it: every table's and index's SQL, by name.
fn schema_of(path: &Path) -> Vec<(String, String)> {
    let conn = Connection::open(path).unwrap();
    pairs(
        &conn,
        "SELECT name, COALESCE(sql, '') FROM sqlite_master ORDER BY name",
    )
}

/// Every older version, built the way the binaries of that version built it (the batches
/// applied by hand, not through `MIGRATIONS`), opens to the very schema of a fresh file,
/// at the current version, with its gap and its ledger's items.
#[test]
fn every_old_version_migrates_to_the_fresh_schema_with_its_data() {
    let fresh = tempfile::tempdir().unwrap();
    drop(Store::open(fresh.path()).unwrap());
    let want = schema_of(&fresh.path().join(DB_FILE));
    let batches = [
        SCHEMA_V1, SCHEMA_V2, SCHEMA_V3, SCHEMA_V4, SCHEMA_V5, SCHEMA_V6, SCHEMA_V7, SCHEMA_V8,
        SCHEMA_V9, SCHEMA_V10,
    ];
    for version in 1..=10usize {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
        for sql in &batches[..version] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", version as i32)
            .unwrap();
        conn.execute(
            "INSERT INTO gaps (id, audit, topic, partition, first_offset, last_offset,
                    missing_records, size_known, detected_at, state, updated_at)
                 VALUES ('a:t:0:2', 'a', 't', 0, 2, 3, 2, 1, ?1, 'acknowledged', ?1)",
            params![fmt_ts(Utc::now())],
        )
        .unwrap();
        let ledger = if version < 6 {
            full_ledger(&[1, 3])
        } else {
            json!({"tail_gap": 3})
        };
        conn.execute(
            "INSERT INTO progress (audit, topic, partition, settled, ledger, updated_at)
                 VALUES ('a', 't', 0, 10, ?1, ?2)",
            params![ledger.to_string(), fmt_ts(Utc::now())],
        )
        .unwrap();
        if (5..8).contains(&version) {
            // v5–v7 kept the key book in a table keyed by the key.
            conn.execute_batch(
                "INSERT INTO key_book (audit, key, confirmed) VALUES
                    ('a', x'62ff', 1), ('a', x'61ff', 2), ('b', x'61ff', 5)",
            )
            .unwrap();
        }
        if version >= 8 {
            // v8 to v10: the same book as a log, with a key counted and then forgotten.
            conn.execute_batch(
                "INSERT INTO key_log (audit, seq, key, confirmed) VALUES
                    ('a', 1, x'63ff', 4), ('a', 2, x'61ff', 2), ('a', 3, x'62ff', 1),
                    ('a', 4, x'63ff', 0), ('b', 1, x'61ff', 5)",
            )
            .unwrap();
        }
        drop(conn);
        let store = Store::open(dir.path()).unwrap();
        let v: i32 = store
            .lock()
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION, "v{version}");
        drop(store);
        assert_eq!(schema_of(&dir.path().join(DB_FILE)), want, "v{version}");
        let store = Store::open(dir.path()).unwrap();
        let g = store.get_gap("a:t:0:2").unwrap().expect("gap kept");
        assert_eq!(g.state, GapState::Acknowledged, "v{version}");
        assert_eq!(g.cause, GapCause::Unknown, "v{version}");
        let p = store.load_progress("a").unwrap();
        assert_eq!(p.len(), 1, "v{version}");
        assert_eq!(p[0].settled, 10, "v{version}");
        if version < 6 {
            assert_eq!(p[0].ledger, full_ledger(&[1, 3]), "v{version}");
        }
        if version >= 5 {
            assert_eq!(
                store.load_key_book("a").unwrap(),
                vec![(b"a\xff".to_vec(), 2), (b"b\xff".to_vec(), 1)],
                "v{version}"
            );
            let rows = if version >= 8 { 4 } else { 2 };
            assert_eq!(store.load_key_log("a").unwrap().rows, rows, "v{version}");
            assert_eq!(store.load_key_log("b").unwrap().rows, 1, "v{version}");
            // Appended after the migrated rows, which they override.
            let (a, b, d) = (b"a\xff".to_vec(), b"b\xff".to_vec(), b"d\xff".to_vec());
            store
                .commit_round_with_keys(
                    "a",
                    &[],
                    &[],
                    KeyClaims::Changes(&[(a.clone(), 0), (d.clone(), 3)]),
                )
                .unwrap();
            let log = store.load_key_log("a").unwrap();
            assert_eq!(
                log.claims,
                vec![(b.clone(), 1), (d.clone(), 3)],
                "v{version}"
            );
            assert_eq!(log.rows, rows + 2, "v{version}");
            assert_eq!(
                store.key_confirmed("a", &[a, b, d]).unwrap(),
                vec![0, 1, 3],
                "v{version}"
            );
            assert_eq!(
                store.load_key_book("b").unwrap(),
                vec![(b"a\xff".to_vec(), 5)],
                "v{version}"
            );
        }
    }
}

fn key_chunk_seqs(store: &Store) -> Vec<(String, i64)> {
    pairs(
        &store.lock(),
        "SELECT audit, seq FROM key_chunks ORDER BY audit, seq",
    )
}

/// Changes go in chunks of 4,096 claims numbered on from the audit's last one, after its
/// v8 rows, which they override; a whole write empties both tables of that audit alone.
#[test]
fn key_claims_are_appended_in_chunks_after_the_v8_rows() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let k = |i: usize| {
        let mut key = i.to_string().into_bytes();
        key.push(0xff);
        key
    };
    store
        .lock()
        .execute_batch(
            "INSERT INTO key_log (audit, seq, key, confirmed) VALUES
                ('au', 1, x'31ff', 2), ('au', 2, x'32ff', 1), ('other', 1, x'31ff', 9)",
        )
        .unwrap();
    let write = |c: KeyClaims<'_, Vec<u8>>| store.commit_round_with_keys("au", &[], &[], c);
    let first: Vec<(Vec<u8>, u64)> = (0..5000).map(|i| (k(i), 1)).collect();
    write(KeyClaims::Changes(&first)).unwrap();
    write(KeyClaims::Changes(&[(k(1), 0), (k(4999), 3)])).unwrap();
    let au = |seqs: &[i64]| -> Vec<(String, i64)> {
        seqs.iter().map(|s| ("au".to_string(), *s)).collect()
    };
    assert_eq!(
        key_chunk_seqs(&store),
        au(&[1, 2, 3]),
        "4,096 + 904, then 2"
    );
    let log = store.load_key_log("au").unwrap();
    assert_eq!(log.rows, 2 + 5000 + 2);
    let mut want: Vec<(Vec<u8>, u64)> = (0..4999).filter(|i| *i != 1).map(|i| (k(i), 1)).collect();
    want.push((k(4999), 3));
    assert_eq!(log.claims, want);
    assert_eq!(
        store.key_confirmed("au", &[k(1), k(2), k(4999)]).unwrap(),
        vec![0, 1, 3]
    );

    write(KeyClaims::Whole(&[(k(7), 2), (k(8), 0)])).unwrap();
    assert_eq!(key_chunk_seqs(&store), au(&[1]));
    let old: i64 = store
        .lock()
        .query_row("SELECT COUNT(*) FROM key_log WHERE audit = 'au'", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(old, 0, "the v8 rows went with the whole write");
    let log = store.load_key_log("au").unwrap();
    assert_eq!((log.claims, log.rows), (vec![(k(7), 2)], 1));
    assert_eq!(store.load_key_book("other").unwrap(), vec![(k(1), 9)]);
}

/// A chunk that does not decode, or is not a BLOB, fails the load (and `replay`'s read)
/// with an error naming the audit and the chunk; other audits still load.
#[test]
fn a_bad_key_chunk_is_an_error_naming_audit_and_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    for audit in ["au", "other"] {
        store
            .commit_round_with_keys(audit, &[], &[], KeyClaims::Changes(&[(b"k\xff", 1)]))
            .unwrap();
    }
    for (bad, says) in [
        ("x'05'", "chunk 1 does not decode"),
        ("'text'", "chunk 1 is Text"),
    ] {
        store
            .lock()
            .execute(
                &format!("UPDATE key_chunks SET claims = {bad} WHERE audit = 'au'"),
                [],
            )
            .unwrap();
        for err in [
            store.load_key_log("au").unwrap_err(),
            store.key_confirmed("au", &[b"k\xff".to_vec()]).unwrap_err(),
        ] {
            assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
            let text = err.to_string();
            assert!(text.contains("audit au") && text.contains(says), "{text}");
        }
        assert_eq!(store.load_key_book("other").unwrap().len(), 1);
    }
}

mod handover_reads;
mod key_log_props;
mod retired;

mod checkpoints {
    use super::*;
    use std::time::Instant;

    /// Rounds of `claims` new 40-byte keys each, numbered from `first`.
    fn round(store: &Store, first: usize, claims: usize) {
        let keys: Vec<(Vec<u8>, u64)> = (first..first + claims)
            .map(|i| (format!("{i:040}").into_bytes(), 1))
            .collect();
        store
            .commit_round_with_keys("au", &[], &[], KeyClaims::Changes(&keys))
            .unwrap();
    }

    fn wal_bytes(dir: &Path) -> u64 {
        std::fs::metadata(dir.join(format!("{DB_FILE}-wal")))
            .map(|m| m.len())
            .unwrap_or(0)
    }

    /// Waits until the background checkpoints passed `n`.
    fn checkpointed_past(store: &Store, n: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let done = store
                .checkpoints_complete()
                .expect("background checkpoints");
            if done > n {
                return done;
            }
            assert!(
                Instant::now() < deadline,
                "no complete checkpoint within 20 s of a round's commit"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The daemon's connection leaves checkpoints to the thread, which runs one after each
    /// round: the WAL starts over instead of holding every round (each ~1 MB here), and
    /// every claim is in the file, read by another connection.
    #[test]
    fn rounds_are_checkpointed_beside_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.checkpoints_complete(), None);
        store.checkpoint_in_background().unwrap();
        store.checkpoint_in_background().unwrap();
        let auto: i64 = store
            .lock()
            .pragma_query_value(None, "wal_autocheckpoint", |r| r.get(0))
            .unwrap();
        assert_eq!(auto, 0, "the writer must not checkpoint in its commits");
        const ROUNDS: usize = 20;
        const CLAIMS: usize = 20_000;
        let mut done = 0;
        let mut largest = 0;
        for r in 0..ROUNDS {
            round(&store, r * CLAIMS, CLAIMS);
            largest = largest.max(wal_bytes(dir.path()));
            done = checkpointed_past(&store, done);
        }
        // One round's frames is ~1 MB; without the thread the WAL would hold all 20.
        let one_round = (CLAIMS * 42) as u64;
        assert!(
            largest < 4 * one_round,
            "the WAL grew to {largest} bytes, {:.1} rounds' worth",
            largest as f64 / one_round as f64
        );
        let other = Store::open(dir.path()).unwrap();
        assert_eq!(other.load_key_book("au").unwrap().len(), ROUNDS * CLAIMS);
    }

    /// Should the thread stop, the next round's commit turns SQLite's automatic checkpoint
    /// back on, so the WAL cannot grow for the rest of the daemon's life.
    #[test]
    fn a_stopped_checkpoint_thread_hands_checkpoints_back_to_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store.checkpoint_in_background().unwrap();
        store.checkpointer.get().unwrap().stop();
        let auto = || -> i64 {
            store
                .lock()
                .pragma_query_value(None, "wal_autocheckpoint", |r| r.get(0))
                .unwrap()
        };
        assert_eq!(auto(), 0);
        round(&store, 0, 1000);
        assert_eq!(auto(), 1000);
    }

    /// Without the thread (commands, tests), SQLite's automatic checkpoint stays.
    #[test]
    fn a_store_without_the_thread_checkpoints_as_sqlite_does() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let auto: i64 = store
            .lock()
            .pragma_query_value(None, "wal_autocheckpoint", |r| r.get(0))
            .unwrap();
        assert_eq!(auto, 1000, "SQLite's default");
        round(&store, 0, 1000);
        assert_eq!(store.checkpoints_complete(), None);
    }
}

/// Every replay is logged in order with what it did; the newest one that wrote (not a dry
/// run, not one that wrote nothing) is what a second replay quotes; `replayed_at` is the
/// gap's mark.
#[test]
fn replays_are_logged_and_the_last_write_of_a_gap_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let g = gap("a", 0, 2, 0, GapState::Open);
    store
        .commit_round("a", std::slice::from_ref(&g), &[])
        .unwrap();
    let base = ReplayRecord {
        at: ts(10),
        gap_id: Some(g.id.clone()),
        audit: "a".into(),
        topic: "t".into(),
        partition: 0,
        first_offset: 2,
        last_offset: 11,
        to_topic: Some("repair".into()),
        dry_run: true,
        forced: false,
        written: 10,
        present: 0,
        filtered: 0,
        failed: 0,
        partial: false,
        error: None,
    };
    assert_eq!(store.last_write_of_gap(&g.id).unwrap(), None);
    assert_eq!(store.replayed_at(&g.id).unwrap(), None);
    store.record_replay(&base).unwrap();
    assert_eq!(
        store.last_write_of_gap(&g.id).unwrap(),
        None,
        "a dry run writes nothing"
    );
    let wrote = ReplayRecord {
        at: ts(20),
        dry_run: false,
        ..base.clone()
    };
    store.record_replay(&wrote).unwrap();
    let nothing = ReplayRecord {
        at: ts(30),
        to_topic: None,
        dry_run: false,
        forced: true,
        written: 0,
        present: 10,
        ..base.clone()
    };
    store.record_replay(&nothing).unwrap();
    let failed = ReplayRecord {
        at: ts(40),
        dry_run: false,
        written: 0,
        error: Some("Kafka no longer holds offsets 2..5".into()),
        ..base.clone()
    };
    store.record_replay(&failed).unwrap();
    let other = ReplayRecord {
        gap_id: None,
        dry_run: false,
        ..base.clone()
    };
    store.record_replay(&other).unwrap();
    assert_eq!(
        store.replays_of_gap(&g.id).unwrap(),
        vec![base, wrote.clone(), nothing, failed]
    );
    assert_eq!(store.last_write_of_gap(&g.id).unwrap(), Some(wrote.clone()));
    assert_eq!(wrote.destination(), "topic repair");
    assert!(store.replays_of_gap("nope").unwrap().is_empty());
    store.mark_replayed(&g.id).unwrap();
    let at = store.replayed_at(&g.id).unwrap();
    assert!(at.is_some());
    assert_eq!(store.replayed_at("nope").unwrap(), None);
    // Shown with the gap (/api/gaps, `gaps --format json`).
    assert_eq!(store.get_gap(&g.id).unwrap().unwrap().replayed_at, at);
    let listed = store.list_gaps(&GapFilter {
        state: StateFilter::All,
        audit: None,
    });
    assert_eq!(listed.unwrap()[0].replayed_at, at);
}

/// Issue 34 item 8: one partition's unreadable progress row or item is that partition's
/// problem alone. The daemon's load returns every readable row and item with the problems
/// named per partition; the strict load (`check`, `replay`) refuses; a later delta write of
/// the partition leaves the item it could not read in place.
#[test]
fn an_unreadable_row_or_item_costs_only_its_partition() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let with_items = |partition: i32| PartitionProgress {
        ledger: json!({
            "missing": [{"run": {"first": 3, "last": 4}, "gap": 3, "detected_ms": 1}],
            "gaps": [{"first": 3}],
            "tail_gap": 3
        }),
        ..progress(partition, 10)
    };
    store
        .commit_round("a", &[], &[with_items(0), with_items(1)])
        .unwrap();
    let exec = |sql: &str| store.lock().execute(sql, []).unwrap();
    assert_eq!(
        exec("UPDATE progress SET ledger = '{x' WHERE partition = 0"),
        1
    );
    assert_eq!(
        exec("UPDATE ledger_items SET body = '{y' WHERE partition = 0 AND kind = 0"),
        1
    );
    let read = store.load_progress_checked("a").unwrap();
    assert_eq!(read.rows.len(), 2, "both partitions come back");
    let p0 = &read.rows[0];
    assert_eq!((p0.partition, p0.settled), (0, 10));
    assert_eq!(
        p0.ledger,
        json!({"gaps": [{"first": 3}]}),
        "head empty, bad item out"
    );
    assert_eq!(read.rows[1], {
        let mut p = with_items(1);
        p.updated_at = read.rows[1].updated_at;
        p
    });
    let problems: Vec<(i32, &str)> = read
        .problems
        .iter()
        .map(|p| (p.partition, p.what.as_str()))
        .collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems.iter().all(|(p, _)| *p == 0), "{problems:?}");
    assert!(problems[0].1.contains("not JSON"), "{problems:?}");
    assert!(
        problems[1].1.contains("`missing` item at offset 3"),
        "{problems:?}"
    );
    let strict = store.load_progress("a").unwrap_err();
    assert!(matches!(strict, StoreError::Corrupt { .. }), "{strict}");
    // A delta write of partition 0 (a new gap) keeps the unreadable item.
    let delta = PartitionProgress {
        ledger: json!({"tail_gap": 20}),
        items: Some(LedgerItems {
            missing: Vec::new(),
            gaps: vec![(20, Some(json!({"first": 20}).to_string()))],
        }),
        ..progress(0, 21)
    };
    store.commit_round("a", &[], &[delta]).unwrap();
    let kept: i64 = store
        .lock()
        .query_row(
            "SELECT COUNT(*) FROM ledger_items WHERE partition = 0 AND body = '{y'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(kept, 1);
    let read = store.load_progress_checked("a").unwrap();
    assert_eq!(
        read.problems.len(),
        1,
        "only the item is left: {:?}",
        read.problems
    );
    // A settled offset that is not a number leaves the row out, named.
    exec("UPDATE progress SET settled = 'ten' WHERE partition = 1");
    let read = store.load_progress_checked("a").unwrap();
    assert_eq!(
        read.rows.iter().map(|p| p.partition).collect::<Vec<_>>(),
        vec![0]
    );
    assert!(
        read.problems
            .iter()
            .any(|p| p.partition == 1 && p.what.contains("settled offset")),
        "{:?}",
        read.problems
    );
}

/// `n` gaps over two audits and three states, detected in blocks of 7 that share one
/// `detected_at` (a round stamps its gaps alike), stored in an order unrelated to the
/// listing's.
fn listing_fixture(store: &Store, n: i64) -> Vec<Gap> {
    let states = [
        GapState::Open,
        GapState::Acknowledged,
        GapState::Unrecoverable,
    ];
    let mut gaps: Vec<Gap> = (0..n)
        .map(|i| {
            let audit = if i % 3 == 0 { "b" } else { "a" };
            let mut g = gap(
                audit,
                (i % 4) as i32,
                i * 10,
                (i * 7919) % n / 7,
                states[(i % 5 % 3) as usize],
            );
            g.ack_reason = (g.state == GapState::Acknowledged).then(|| "known".to_string());
            g
        })
        .collect();
    for audit in ["a", "b"] {
        let mine: Vec<Gap> = gaps.iter().filter(|g| g.audit == audit).cloned().collect();
        store.commit_round(audit, &mine, &[]).unwrap();
    }
    gaps.sort_by(|x, y| y.detected_at.cmp(&x.detected_at).then(x.id.cmp(&y.id)));
    gaps
}

/// Every page size and filter: following `next` lists exactly what the whole listing does,
/// in its order, each gap once; `next` is `None` exactly on the last page (also when the
/// last page is full).
#[test]
fn gap_pages_list_every_gap_once_in_the_listing_order() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let all_gaps = listing_fixture(&store, 700);
    let reader = GapReader::open(store.path()).unwrap();
    let filters = [
        all(None),
        all(Some("a")),
        GapFilter::default(),
        GapFilter {
            state: StateFilter::Only(GapState::Acknowledged),
            audit: Some("b".into()),
        },
        all(Some("nobody")),
    ];
    for filter in &filters {
        let want = store.list_gaps(filter).unwrap();
        assert_eq!(
            want,
            all_gaps
                .iter()
                .filter(|g| filter.state.matches(g.state)
                    && filter.audit.as_deref().is_none_or(|a| a == g.audit))
                .cloned()
                .collect::<Vec<_>>(),
            "{filter:?}: the fixture's order is the listing order"
        );
        for limit in [1, 6, 7, 8, 100, want.len().max(1), MAX_PAGE] {
            let mut got = Vec::new();
            let mut after: Option<GapCursor> = None;
            let mut pages = 0;
            loop {
                let page = reader.page(filter, after.as_ref(), limit).unwrap();
                pages += 1;
                assert!(page.gaps.len() <= limit);
                got.extend(page.gaps.iter().cloned());
                match page.next {
                    Some(c) => {
                        assert_eq!(page.gaps.len(), limit, "only a full page has a next");
                        assert_eq!(c.id(), page.gaps.last().unwrap().id);
                        assert_eq!(reader.cursor(c.id()).unwrap(), Some(c.clone()));
                        after = Some(c);
                    }
                    None => break,
                }
            }
            assert_eq!(got, want, "{filter:?} limit {limit}");
            assert_eq!(
                pages,
                want.len().div_ceil(limit).max(1),
                "{filter:?} limit {limit}"
            );
        }
    }
    assert_eq!(reader.cursor("no such gap").unwrap(), None);
}

/// A cursor stays good when its own gap leaves the store (its partition handed over): the
/// next page starts where it would have.
#[test]
fn a_page_after_a_removed_gap_starts_where_it_would_have() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let gaps = listing_fixture(&store, 60);
    let reader = GapReader::open(store.path()).unwrap();
    let first = reader.page(&all(None), None, 10).unwrap();
    let cursor = first.next.unwrap();
    let gone = gaps[9].clone();
    assert_eq!(cursor.id(), gone.id);
    // As `forget_unresolved` drops it (the gap may be in any state here).
    store
        .lock()
        .execute("DELETE FROM gaps WHERE id = ?1", params![gone.id])
        .unwrap();
    let dropped = [gone.id.clone()];
    let rest = reader.page(&all(None), Some(&cursor), 1000).unwrap();
    let want: Vec<Gap> = gaps[10..]
        .iter()
        .filter(|g| !dropped.contains(&g.id))
        .cloned()
        .collect();
    assert_eq!(rest.gaps, want);
    assert_eq!(rest.next, None);
}

/// The page queries seek the listing index and never sort: a page costs its own rows, not
/// every gap stored (no OFFSET, no temporary B-tree), whatever the filter.
#[test]
fn page_queries_seek_the_listing_index_without_sorting() {
    use super::listing::{Part, page_sql};
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    listing_fixture(&store, 50);
    let reader = GapReader::open(store.path()).unwrap();
    let cursor = reader
        .page(&all(None), None, 5)
        .unwrap()
        .next
        .expect("more than 5 gaps");
    let conn = store.lock();
    let filters = [
        all(None),
        all(Some("a")),
        GapFilter::default(),
        GapFilter {
            state: StateFilter::Only(GapState::Late),
            audit: Some("it's; DROP TABLE gaps".into()),
        },
    ];
    for filter in &filters {
        for (part, after) in [
            (Part::First, None),
            (Part::Ties, Some(&cursor)),
            (Part::Older, Some(&cursor)),
        ] {
            let (sql, args) = page_sql(filter, part, after, 10);
            assert!(!sql.contains("OFFSET"), "{sql}");
            assert!(
                !sql.contains("DROP") && !sql.contains("'"),
                "values are bound, not spliced: {sql}"
            );
            let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let plan: Vec<String> = stmt
                .query_map(rusqlite::params_from_iter(args), |r| r.get::<_, String>(3))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let plan = plan.join(" | ");
            assert!(plan.contains("gaps_listing"), "{part:?} {filter:?}: {plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{part:?} {filter:?}: {plan}");
            if part != Part::First {
                assert!(plan.contains("SEARCH"), "{part:?} {filter:?}: {plan}");
            }
        }
    }
}

/// A reader never waits for the store's writer: a page is read while the store's own
/// connection sits inside a write transaction, and a round commits while a reader is in
/// the middle of a page's statement.
#[test]
fn a_reader_and_the_store_writer_never_wait_for_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    listing_fixture(&store, 40);
    let reader = GapReader::open(store.path()).unwrap();
    {
        let mut conn = store.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .unwrap();
        tx.execute("DELETE FROM gaps WHERE audit = 'a'", [])
            .unwrap();
        let started = std::time::Instant::now();
        let page = reader.page(&all(None), None, 1000).unwrap();
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(page.gaps.len(), 40, "the reader sees the last commit");
        drop(tx); // rolled back
    }
    // A statement of the reader's left open (a page's rows half-stepped through).
    let mut stmt = reader.conn().prepare("SELECT id FROM gaps").unwrap();
    let mut rows = stmt.query([]).unwrap();
    assert!(rows.next().unwrap().is_some());
    let started = std::time::Instant::now();
    store
        .commit_round("a", &[gap("a", 9, 1, 99, GapState::Open)], &[])
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
}

/// A gap whose `detected_at` moves earlier while a client pages (the upsert keeps the
/// earliest: a handover that knew of an earlier detection) comes again further down, and
/// no gap is missed: what the docs promise (OPERATOR.md, paging).
#[test]
fn a_gap_detected_earlier_meanwhile_is_listed_again_never_missed() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let gaps = listing_fixture(&store, 60);
    let reader = GapReader::open(store.path()).unwrap();
    let first = reader.page(&all(None), None, 10).unwrap();
    let mut moved = first.gaps[0].clone();
    moved.detected_at = ts(-1_000);
    store
        .commit_round(&moved.audit.clone(), std::slice::from_ref(&moved), &[])
        .unwrap();
    let rest = reader
        .page(&all(None), first.next.as_ref(), 1000)
        .unwrap()
        .gaps;
    assert_eq!(
        rest.last().map(|g| &g.id),
        Some(&moved.id),
        "again, now last"
    );
    let mut seen: Vec<&str> = first
        .gaps
        .iter()
        .chain(&rest)
        .map(|g| g.id.as_str())
        .collect();
    assert_eq!(seen.len(), gaps.len() + 1);
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), gaps.len(), "every gap listed");
}

/// v13 was `handover_swept` in a build that was merged and reverted, and is `key_credits`
/// now: a file at v13 from either build opens to the fresh schema (v14 creates both tables
/// if absent), and its stand-in credits can be written.
#[test]
fn a_v13_file_of_either_numbering_migrates_to_the_fresh_schema() {
    let fresh = tempfile::tempdir().unwrap();
    drop(Store::open(fresh.path()).unwrap());
    let want = schema_of(&fresh.path().join(DB_FILE));
    for dropped in ["key_credits", "handover_swept"] {
        let dir = tempfile::tempdir().unwrap();
        drop(Store::open(dir.path()).unwrap());
        let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute_batch(&format!("DROP TABLE {dropped}"))
            .unwrap();
        conn.pragma_update(None, "user_version", 13).unwrap();
        drop(conn);
        let store = Store::open(dir.path()).unwrap();
        store
            .write_key_credits("a", &[(b"k\xff".to_vec(), 1u64)])
            .unwrap();
        assert_eq!(
            store.load_key_credits("a").unwrap(),
            vec![(b"k\xff".to_vec(), 1)],
            "{dropped}"
        );
        drop(store);
        assert_eq!(schema_of(&dir.path().join(DB_FILE)), want, "{dropped}");
    }
}

/// The schema of a fresh file, and another fresh file (its directory, a connection to it)
/// for a test to take back to an older version.
fn fresh_schema_and_a_file() -> (Vec<(String, String)>, tempfile::TempDir, Connection) {
    let fresh = tempfile::tempdir().unwrap();
    drop(Store::open(fresh.path()).unwrap());
    let want = schema_of(&fresh.path().join(DB_FILE));
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path()).unwrap());
    let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
    (want, dir, conn)
}

/// The build that was merged and reverted numbered `key_credits` v14 (and `handover_swept`
/// v13): a file it left at v14 lacks v14's other tables, and opens to the fresh schema.
#[test]
fn a_v14_file_of_the_reverted_numbering_is_completed() {
    let (want, dir, conn) = fresh_schema_and_a_file();
    conn.execute_batch("DROP TABLE handover_unpublished; DROP TABLE instance;")
        .unwrap();
    conn.pragma_update(None, "user_version", 14).unwrap();
    drop(conn);
    let store = Store::open(dir.path()).unwrap();
    assert!(!store.instance_id().unwrap().is_empty());
    drop(store);
    assert_eq!(schema_of(&dir.path().join(DB_FILE)), want);
}

/// Review of format 3, F9: v14's completion runs once (at v15), not at every open: it is a
/// full scan of the gaps in a write transaction, which a big store's CLI calls would wait
/// on beside the daemon. A row it would mark is left alone at the next open.
#[test]
fn a_current_file_does_not_run_a_migration_again() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let acked = gap("a", 0, 0, 0, GapState::Acknowledged);
    store
        .import_retired("a", std::slice::from_ref(&acked))
        .unwrap();
    drop(store);
    let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
    conn.execute("UPDATE gaps SET retired = 0", []).unwrap();
    drop(conn);
    drop(Store::open(dir.path()).unwrap());
    let conn = Connection::open(dir.path().join(DB_FILE)).unwrap();
    let retired: i64 = conn
        .query_row("SELECT retired FROM gaps", [], |r| r.get(0))
        .unwrap();
    assert_eq!(retired, 0, "v14's batch ran again at an open");
}

/// v16: a file at v15 keeps its import marks, read without the offset the import stops at
/// (such a mark resumes its own state only), and opens to the fresh schema.
#[test]
fn a_v15_files_import_marks_survive_without_their_offset() {
    let (want, dir, conn) = fresh_schema_and_a_file();
    conn.execute_batch(
        "ALTER TABLE handover_importing DROP COLUMN generation;
         ALTER TABLE handover_importing DROP COLUMN below;
         INSERT INTO handover_importing VALUES ('h', 'a', 't', 0, 'b', 7);",
    )
    .unwrap();
    conn.pragma_update(None, "user_version", 15).unwrap();
    drop(conn);
    let store = Store::open(dir.path()).unwrap();
    let marks = store.importing("h", "a").unwrap();
    assert_eq!(
        marks.get(&("t".to_string(), 0)),
        Some(&ImportMark {
            owner: "b".into(),
            term: 7,
            below: None,
            generation: None
        })
    );
    let mark = ImportMark {
        owner: "c".into(),
        term: 8,
        below: Some(40),
        generation: Some(12),
    };
    store.set_importing("h", "a", "t", 1, Some(&mark)).unwrap();
    assert_eq!(
        store
            .importing("h", "a")
            .unwrap()
            .get(&("t".to_string(), 1)),
        Some(&mark)
    );
    drop(store);
    assert_eq!(schema_of(&dir.path().join(DB_FILE)), want);
}

/// v17: a gap keeps the evidence it was found with; a later copy without it (the daemon's
/// next report of the gap, a retired gap's compact form) does not erase it, and one with
/// other words does not rewrite it (decided once).
#[test]
fn a_gaps_evidence_is_kept_by_every_later_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let words = "restarted at 2026-12-06T02:14:00Z without restoring a checkpoint (latest-offset)";
    let mut g = gap("a", 0, 2, 0, GapState::Open);
    g.cause = GapCause::SkippedByRestart;
    g.evidence = Some(words.to_owned());
    store
        .commit_round("a", std::slice::from_ref(&g), &[])
        .unwrap();
    let mut later = g.clone();
    later.evidence = None;
    later.state = GapState::Late;
    store
        .commit_round("a", std::slice::from_ref(&later), &[])
        .unwrap();
    let got = store.get_gap(&g.id).unwrap().expect("stored");
    assert_eq!(
        (got.state, got.evidence.as_deref()),
        (GapState::Late, Some(words))
    );
    later.evidence = Some("other words".to_owned());
    store
        .commit_round("a", std::slice::from_ref(&later), &[])
        .unwrap();
    let listed = store.list_gaps(&all(Some("a"))).unwrap();
    assert_eq!(listed[0].evidence.as_deref(), Some(words));
}

/// v17 adds `gaps.evidence` to a v16 file, and running the step again on a file that has
/// it (a migration that crashed before writing `user_version`) changes nothing.
#[test]
fn the_evidence_column_migration_is_idempotent() {
    let fresh = tempfile::tempdir().unwrap();
    drop(Store::open(fresh.path()).unwrap());
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path()).unwrap());
    let columns = |path: &Path| -> Vec<String> {
        let conn = Connection::open(path).unwrap();
        let mut stmt = conn
            .prepare("SELECT name FROM pragma_table_info('gaps') ORDER BY cid")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let file = dir.path().join(DB_FILE);
    let conn = Connection::open(&file).unwrap();
    conn.execute_batch("ALTER TABLE gaps DROP COLUMN evidence;")
        .unwrap();
    conn.pragma_update(None, "user_version", 16).unwrap();
    drop(conn);
    assert!(!columns(&file).contains(&"evidence".to_owned()));
    drop(Store::open(dir.path()).unwrap());
    assert_eq!(
        columns(&file),
        columns(&fresh.path().join(DB_FILE)),
        "from v16"
    );
    // Again, with the column already there: the file is left as it was.
    let before = schema_of(&file);
    let conn = Connection::open(&file).unwrap();
    conn.pragma_update(None, "user_version", 16).unwrap();
    drop(conn);
    drop(Store::open(dir.path()).unwrap());
    assert_eq!(schema_of(&file), before, "v17 twice");
}

/// Review 37, F12: a file written by the Flink branch's build before its merge says
/// user_version 16 for "evidence" and has none of the handover's v16 (its table, the
/// import mark's columns): opening it gives the fresh schema.
#[test]
fn a_file_of_the_flink_branchs_v16_gets_the_handovers_v16() {
    let (want, dir, conn) = fresh_schema_and_a_file();
    conn.execute_batch(
        "DROP TABLE handover_resumed;
         ALTER TABLE handover_importing DROP COLUMN generation;
         ALTER TABLE handover_importing DROP COLUMN below;",
    )
    .unwrap();
    conn.pragma_update(None, "user_version", 16).unwrap();
    drop(conn);
    drop(Store::open(dir.path()).unwrap());
    assert_eq!(schema_of(&dir.path().join(DB_FILE)), want);
}
