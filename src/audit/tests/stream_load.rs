//! Doris Stream Load evidence on a new gap (src/audit/evidence/stream_load.rs): a drop in flight on
//! the test clock, with the poller's view filled by hand.

use super::connect::{gap_with, rounds_to_the_gap, the_gap};
use crate::audit::evidence::stream_load::StreamLoadWatch;
use crate::evidence::http::SourceState;
use crate::evidence::stream_load::{FeClock, History, LoadRecord, StreamLoadView};
use crate::gap::GapCause;

/// The FE on the auditor's clock (UTC, no skew).
const SAME_CLOCK: FeClock = FeClock {
    zone_offset_ms: 0,
    skew_ms: 0,
};

/// A view holding one load of the pipeline that finished at `finished_ms` and filtered
/// one of ten rows, read as of `read_as_of_ms`.
fn view(finished_ms: i64, read_as_of_ms: i64) -> StreamLoadView {
    let finished = chrono::DateTime::from_timestamp_millis(finished_ms)
        .expect("time")
        .naive_utc();
    let record = LoadRecord {
        label: "doris_sink_example_db_dns_logs_0_7".into(),
        db: "example_db".into(),
        table: "dns_logs".into(),
        status: "Success".into(),
        message: "OK".into(),
        error_url: None,
        total_rows: 10,
        loaded_rows: 9,
        filtered_rows: 1,
        unselected_rows: 0,
        finished,
        checkpoint: Some((0, 7)),
    };
    let mut history = History::default();
    history.observe(
        vec![record],
        SAME_CLOCK,
        ("doris_sink", "example_db", "dns_logs"),
        finished_ms,
    );
    StreamLoadView {
        history,
        state: SourceState::Ok,
        read_as_of_ms: Some(read_as_of_ms),
        ..Default::default()
    }
}

const WORDS: &str = "Doris Stream Load doris_sink_example_db_dns_logs_0_7 (checkpoint 7, subtask 0) filtered 1 of 10 rows";

/// Record 2 dropped while the pipeline committed 1 → 4, a load of the window having
/// filtered a row: the gap stays dropped_in_flight and names the load.
#[tokio::test]
async fn a_drop_in_flight_names_the_load_that_filtered_a_row() {
    let (_, gap, stored, kept) = gap_with(&[0, 1, 3, 4, 5], 1, |h, t0| {
        h.audit.evidence.stream_load = Some(StreamLoadWatch::fixed(view(t0 + 1_500, i64::MAX), 0));
    })
    .await;
    assert_eq!(gap, (2, 2, GapCause::DroppedInFlight));
    assert!(
        stored.as_deref().is_some_and(|w| w.starts_with(WORDS)),
        "{stored:?}"
    );
    assert_eq!(stored, kept);
}

/// A load that finished long before the step is not its cause; nor does a skip (the
/// records never reached a load) take a load's words.
#[tokio::test]
async fn a_load_outside_the_window_or_a_skip_names_nothing() {
    let (_, gap, stored, _) = gap_with(&[0, 1, 3, 4, 5], 1, |h, t0| {
        h.audit.evidence.stream_load = Some(StreamLoadWatch::fixed(view(t0 - 60_000, i64::MAX), 0));
    })
    .await;
    assert_eq!(gap, (2, 2, GapCause::DroppedInFlight));
    assert_eq!(stored, None);
    let (_, gap, stored, _) = gap_with(&[0, 1, 4, 5], 2, |h, t0| {
        h.audit.evidence.stream_load = Some(StreamLoadWatch::fixed(view(t0 + 1_500, i64::MAX), 0));
    })
    .await;
    assert_eq!(gap, (2, 3, GapCause::SkippedByRestart));
    assert_eq!(stored, None);
}

/// The FE lists a load up to `stream_load_record_delay` after it finished: a view read
/// before the step plus that delay holds the gap's words back (the gap is reported at
/// once); the next read past it names the load.
#[tokio::test]
async fn evidence_waits_for_the_fes_record_delay() {
    const DELAY_MS: i64 = 60_000;
    let (mut h, t0) = rounds_to_the_gap(&[0, 1, 3, 4, 5], 1, |h, t0| {
        // Read after the step, but before the FE could list its loads; none listed yet.
        let mut early = view(t0 + 1_500, t0 + 10_000);
        early.history = History::default();
        h.audit.evidence.stream_load = Some(StreamLoadWatch::fixed(early, DELAY_MS));
    })
    .await;
    let (gap, stored, kept) = the_gap(&h);
    assert_eq!(gap, (2, 2, GapCause::DroppedInFlight));
    assert_eq!((stored, kept), (None, None), "reported, not explained yet");
    // Past the usual 30 s wait, within the delay: still waiting.
    h.clock.advance(40_000);
    h.audit.round().await;
    assert_eq!(the_gap(&h).1, None);
    h.audit.evidence.stream_load = Some(StreamLoadWatch::fixed(
        view(t0 + 1_500, t0 + 2_000 + DELAY_MS + 1),
        DELAY_MS,
    ));
    h.clock.advance(1_000);
    h.audit.round().await;
    let (_, stored, kept) = the_gap(&h);
    assert!(
        stored.as_deref().is_some_and(|w| w.starts_with(WORDS)),
        "{stored:?}"
    );
    assert_eq!(stored, kept);
}
