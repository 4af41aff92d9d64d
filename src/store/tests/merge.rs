//! Review of format 3, F2/F3: another owner's retired gaps merged into a store whose own
//! rows stand (`Store::merge_retired`): nothing of the store dropped or set back, a gap of
//! theirs added only where the store has no verdict against it.

use super::super::*;
use super::gap;

fn state_of(store: &Store, g: &Gap) -> Option<GapState> {
    store.get_gap(&g.id).unwrap().map(|g| g.state)
}

/// A gap of theirs the store has no row of (nor an overlapping one) is written, retired and
/// counted; this store's own rows stay, also those their chunk lacks.
#[test]
fn a_gap_of_theirs_new_here_is_merged_and_none_of_ours_goes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let ours = gap("a", 0, 0, 0, GapState::Open);
    store
        .import_retired("a", std::slice::from_ref(&ours))
        .unwrap();
    let theirs = gap("a", 0, 20, 0, GapState::Open);
    let m = store
        .merge_retired("a", std::slice::from_ref(&theirs), &[])
        .unwrap();
    assert_eq!(m.written, std::slice::from_ref(&theirs.id));
    assert!(m.conflicting.is_empty());
    assert_eq!(state_of(&store, &ours), Some(GapState::Open), "ours stays");
    assert_eq!(store.settle_retired("a", "t", 0, &[]).unwrap().gaps, 2);
}

/// Of two verdicts on one gap the further settled stays: theirs acknowledged replaces ours
/// open; theirs open never sets back ours late (nor ours acknowledged).
#[test]
fn of_one_gap_the_further_settled_verdict_stays() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let open = gap("a", 0, 0, 0, GapState::Open);
    let late = gap("a", 0, 20, 0, GapState::Late);
    store
        .import_retired("a", &[open.clone(), late.clone()])
        .unwrap();
    let mut acked = open.clone();
    acked.state = GapState::Acknowledged;
    acked.ack_reason = Some("theirs".into());
    let mut reopened = late.clone();
    reopened.state = GapState::Open;
    let m = store.merge_retired("a", &[acked, reopened], &[]).unwrap();
    assert_eq!(m.written, std::slice::from_ref(&open.id));
    assert_eq!(state_of(&store, &open), Some(GapState::Acknowledged));
    assert_eq!(
        state_of(&store, &late),
        Some(GapState::Late),
        "never set back"
    );
}

/// A gap of theirs overlapping another gap of this store (a retired row, or one its ledger
/// holds) is not written and is named: the two verdicts differ, neither is dropped.
#[test]
fn a_gap_of_theirs_overlapping_one_of_ours_is_not_merged() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    // Ours: 100..=109 retired; the ledger holds 300..=309.
    let ours = gap("a", 0, 100, 0, GapState::Open);
    store
        .import_retired("a", std::slice::from_ref(&ours))
        .unwrap();
    let mut inside = gap("a", 0, 105, 0, GapState::Open);
    inside.last_offset = 105;
    let across = gap("a", 0, 95, 0, GapState::Open);
    let held = gap("a", 0, 302, 0, GapState::Open);
    let clear = gap("a", 0, 110, 0, GapState::Open);
    let m = store
        .merge_retired(
            "a",
            &[inside.clone(), across.clone(), held.clone(), clear.clone()],
            &[(300, 309)],
        )
        .unwrap();
    assert_eq!(
        m.conflicting,
        [inside.id.clone(), across.id.clone(), held.id.clone()]
    );
    assert_eq!(m.written, std::slice::from_ref(&clear.id));
    for g in [&inside, &across, &held] {
        assert_eq!(state_of(&store, g), None, "{} not written", g.id);
    }
    assert_eq!(state_of(&store, &ours), Some(GapState::Open));
}
