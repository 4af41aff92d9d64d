//! Acknowledgements against rounds (issue 35 item 7): an ack covers the records the gap held
//! when the operator gave it, never records a round added while it was on its way.

use super::harness::*;
use crate::gap::GapState;

#[tokio::test]
async fn an_ack_that_lands_while_a_round_extends_the_tail_gap_leaves_the_new_records_open() {
    let mut h = harness("");
    h.assign_and_read((0, 0), expected(0..5)).await;
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    let gaps = h.stored_gaps();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert_eq!((gaps[0].first_offset, gaps[0].last_offset), (0, 4));

    // The operator acknowledges 0..=4 just after the next round read the ack log: that
    // round extends the tail gap over 5..=9 and writes it.
    assert!(h.store.ack(&gaps[0].id, "known outage").expect("ack"));
    h.hide_ack_log();
    h.audit.ingest(expected(5..10));
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    h.restore_ack_log();
    // The round after reads the acknowledgement.
    h.audit.round().await;

    let mut got: Vec<_> = h
        .stored_gaps()
        .into_iter()
        .map(|g| (g.first_offset, g.last_offset, g.missing_records, g.state))
        .collect();
    got.sort_by_key(|g| g.0);
    assert_eq!(
        got,
        vec![(0, 4, 5, GapState::Acknowledged), (5, 9, 5, GapState::Open)],
        "the acknowledged extent, and the records added since as an open gap"
    );
    assert_eq!(
        h.audit.parts[&tp(0)].ledger.missing(),
        5,
        "still re-checked"
    );
    assert_eq!(h.counter(|m| &m.records_lost), 10, "each record once");
}
