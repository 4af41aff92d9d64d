//! Restore: what a partition resumes from when its stored state is partly unreadable or was
//! written with another key (issue 34 items 6 and 8).

use super::harness::*;
use crate::ledger::{Observed, OffsetRun, PartitionLedger, Verdict};
use crate::store::PartitionProgress;
use crate::types::Key;

/// A stored ledger of partition `p` with one missing record at offset 2 keyed `key`, settled
/// at 4.
fn stored_with_missing(p: i32, key: Key) -> PartitionProgress {
    let mut l = PartitionLedger::new(0, true);
    for o in 0..4 {
        let key = Some(if o == 2 {
            key.clone()
        } else {
            Key::new([format!("k{o}")])
        });
        l.ingest(o, None, Observed::Expected { key }, 0);
    }
    l.pipeline.observe(0, Some(4));
    let segs = l.due(GRACE_MS, GRACE_MS, 100);
    let verdicts: Vec<Verdict> = segs
        .iter()
        .map(|s| Verdict::Known {
            present: crate::ledger::runs::normalize(
                (s.run.first..=s.run.last)
                    .filter(|&o| o != 2)
                    .map(|o| OffsetRun::new(o, o))
                    .collect(),
            ),
            duplicate_rows: 0,
            shared_keys: Vec::new(),
            stand_ins: Vec::new(),
        })
        .collect();
    l.apply(&verdicts, GRACE_MS);
    l.take_dirty_gaps();
    assert_eq!(l.missing(), 1);
    PartitionProgress {
        topic: TOPIC.to_string(),
        partition: p,
        settled: l.settled(),
        ledger: serde_json::to_value(l.snapshot()).expect("json"),
        updated_at: chrono::Utc::now(),
        items: None,
    }
}

/// Item 6: a missing record stored with a two-value key, the audit's key now one field: given
/// up at restore (still missing), never in a re-check; one of the configured arity stays.
#[tokio::test]
async fn restored_keys_of_another_arity_are_given_up() {
    let mut h = keyed_harness("");
    h.store
        .commit_round(AUDIT, &[], &[stored_with_missing(0, Key::new(["a", "b"]))])
        .expect("store");
    h.kafka
        .watermarks
        .lock()
        .expect("lock")
        .insert(tp(0), (0, 4));
    h.audit.assign(vec![tp(0)]).await;
    let part = &h.audit.parts[&tp(0)];
    assert_eq!(part.ledger.missing(), 1, "still missing");
    assert_eq!(part.ledger.missing_key_count(), 0, "not re-checked");
    assert_eq!(part.state_problem, None);

    let mut h = keyed_harness("");
    h.store
        .commit_round(AUDIT, &[], &[stored_with_missing(0, Key::new(["a"]))])
        .expect("store");
    h.kafka
        .watermarks
        .lock()
        .expect("lock")
        .insert(tp(0), (0, 4));
    h.audit.assign(vec![tp(0)]).await;
    assert_eq!(h.audit.parts[&tp(0)].ledger.missing_key_count(), 1);
}

/// Item 8: partition 0's ledger item unreadable, partition 1 intact: partition 1 restores
/// whole, partition 0 restores what it can, says why, and its writes keep the bad item.
#[tokio::test]
async fn an_unreadable_item_costs_only_its_partition() {
    let mut h = keyed_harness("");
    let rows = [
        stored_with_missing(0, Key::new(["a"])),
        stored_with_missing(1, Key::new(["b"])),
    ];
    h.store.commit_round(AUDIT, &[], &rows).expect("store");
    let db = rusqlite::Connection::open(h.store_dir().join(crate::store::DB_FILE)).expect("db");
    assert_eq!(
        db.execute(
            "UPDATE ledger_items SET body = 'garbage' WHERE partition = 0 AND kind = 0",
            []
        )
        .expect("corrupt"),
        1
    );
    for p in 0..2 {
        h.kafka
            .watermarks
            .lock()
            .expect("lock")
            .insert(tp(p), (0, 4));
    }
    h.audit.assign(vec![tp(0), tp(1)]).await;
    let (p0, p1) = (&h.audit.parts[&tp(0)], &h.audit.parts[&tp(1)]);
    assert_eq!(p1.ledger.missing_key_count(), 1, "partition 1 whole");
    assert_eq!(p1.state_problem, None);
    assert_eq!(p0.ledger.settled(), 4, "partition 0 at its settled offset");
    assert_eq!(p0.ledger.missing_key_count(), 0);
    let why = p0.state_problem.clone().expect("partition 0 says why");
    assert!(why.contains("`missing` item at offset 2"), "{why}");
    h.audit.persist().await;
    let kept: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM ledger_items WHERE partition = 0 AND body = 'garbage'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(kept, 1, "never replaced");
}
