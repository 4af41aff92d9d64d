//! What a supersede takes of another owner's chunks (`Store::take_acknowledgement`): an
//! acknowledgement of a gap this store holds, never one of a gap it lacks nor over a
//! resolved or already acknowledged row.

use super::super::*;
use super::gap;

fn state_of(store: &Store, g: &Gap) -> Option<GapState> {
    store.get_gap(&g.id).unwrap().map(|g| g.state)
}

#[test]
fn an_acknowledgement_is_taken_only_for_a_gap_held_and_unsettled() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let open = gap("a", 0, 0, 0, GapState::Open);
    let late = gap("a", 0, 10, 0, GapState::Late);
    let acked = gap("a", 0, 20, 0, GapState::Acknowledged);
    let unrec = gap("a", 0, 30, 0, GapState::Unrecoverable);
    store
        .import_retired(
            "a",
            &[open.clone(), late.clone(), acked.clone(), unrec.clone()],
        )
        .unwrap();
    let before = store.ack_position().unwrap();
    assert!(store.take_acknowledgement(&open.id, "on B").unwrap());
    assert_eq!(state_of(&store, &open), Some(GapState::Acknowledged));
    assert!(store.take_acknowledgement(&unrec.id, "on B").unwrap());
    assert!(!store.take_acknowledgement(&late.id, "on B").unwrap());
    assert_eq!(
        state_of(&store, &late),
        Some(GapState::Late),
        "resolved stays"
    );
    assert!(!store.take_acknowledgement(&acked.id, "on B").unwrap());
    let missing = gap("a", 0, 40, 0, GapState::Open);
    assert!(!store.take_acknowledgement(&missing.id, "on B").unwrap());
    assert_eq!(
        state_of(&store, &missing),
        None,
        "never a row of theirs added"
    );
    // The daemon's next round reads the two from the ack log.
    let (got, _) = store.acks_since("a", before).unwrap();
    let mut ids: Vec<String> = got.into_iter().map(|g| g.id).collect();
    ids.sort();
    let mut want = vec![open.id.clone(), unrec.id.clone()];
    want.sort();
    assert_eq!(ids, want);
    let reason = store.get_gap(&open.id).unwrap().and_then(|g| g.ack_reason);
    assert_eq!(reason.as_deref(), Some("on B"));
}
