//! Kafka Connect's evidence on a new gap (src/audit/evidence/connect.rs): the seed incident and a
//! drop in flight on the test clock, with the poller's view filled by hand.

use super::harness::*;
use crate::audit::evidence::connect::ConnectWatch;
use crate::audit::evidence::flink::FlinkWatch;
use crate::evidence::connect::history::rfc3339;
use crate::evidence::connect::rest::{ConnectorConfig, ErrorHandling, parse_status};
use crate::evidence::connect::{ConnectView, History};
use crate::evidence::flink::rest::{CheckpointStats, JobOverview};
use crate::evidence::flink::{FlinkView, History as FlinkHistory};
use crate::evidence::http::SourceState;
use crate::gap::GapCause;
use crate::types::Offset;

/// Between two polls of the view, ms.
pub(super) const POLL_MS: i64 = 1_000;
const EXCEPTION: &str =
    "org.apache.kafka.connect.errors.ConnectException: Tolerance exceeded in error handler";

fn pipeline_commits(h: &Harness, to: Offset) {
    h.kafka
        .pipeline
        .lock()
        .expect("lock")
        .as_mut()
        .expect("pipeline group")
        .insert(tp(0), Some(to));
}

/// Connector `es-sink` with task 0 `state` on `worker`.
fn status(state: &str, worker: &str) -> crate::evidence::connect::ConnectorStatus {
    let trace = if state == "FAILED" {
        format!(
            r#","trace":"{EXCEPTION}\n\tat org.apache.kafka.connect.runtime.WorkerSinkTask.execute(WorkerSinkTask.java:200)""#
        )
    } else {
        String::new()
    };
    parse_status(
        format!(
            r#"{{"name":"es-sink","connector":{{"state":"RUNNING","worker_id":"connect-1:8083"}},
            "tasks":[{{"id":0,"state":"{state}","worker_id":"{worker}"{trace}}}],"type":"sink"}}"#
        )
        .as_bytes(),
    )
    .expect("fixture")
}

/// The polls: task 0 RUNNING at the baseline, then at each `(at, state, worker)`.
fn view(polls: &[(i64, &str, &str)], tolerance: &str) -> ConnectView {
    let mut history = History::default();
    history.observe_status(&status("RUNNING", "connect-1:8083"), 0);
    for &(at, state, worker) in polls {
        history.observe_status(&status(state, worker), at);
    }
    history.observe_config(
        ConnectorConfig {
            errors: ErrorHandling {
                tolerance: tolerance.into(),
                dead_letter_queue: false,
            },
            fingerprint: 0,
        },
        0,
    );
    ConnectView {
        history,
        state: SourceState::Ok,
        // Read after every step of the test.
        read_as_of_ms: Some(i64::MAX),
        ..Default::default()
    }
}

/// The seed's restart as the connector's polls saw it: task 0 FAILED at `t0 + 1.5 s`,
/// RUNNING on another worker at `t0 + 1.8 s`.
fn restart_seen(t0: i64) -> ConnectWatch {
    ConnectWatch::fixed(
        view(
            &[
                (t0 + 1_500, "FAILED", "connect-1:8083"),
                (t0 + 1_800, "RUNNING", "connect-2:8083"),
            ],
            "none",
        ),
        POLL_MS,
    )
}

/// The records 0–5 read, `in_sink` written; the pipeline commits `first`, then jumps to 4
/// and to 6. `setup(t0)` installs the evidence once commit `first` was seen (`t0`, the
/// clock then). Returns `t0`, the one gap (its first and last offsets and cause) and its
/// evidence as stored and as the ledger keeps it.
pub(super) async fn gap_with(
    in_sink: &[Offset],
    first: Offset,
    setup: impl Fn(&mut Harness, i64),
) -> (
    i64,
    (Offset, Offset, GapCause),
    Option<String>,
    Option<String>,
) {
    let (h, t0) = rounds_to_the_gap(in_sink, first, setup).await;
    let (gap, stored, kept) = the_gap(&h);
    (t0, gap, stored, kept)
}

/// The rounds of [`gap_with`], up to the gap found; returns the harness and `t0`.
pub(super) async fn rounds_to_the_gap(
    in_sink: &[Offset],
    first: Offset,
    setup: impl Fn(&mut Harness, i64),
) -> (Harness, i64) {
    let mut h = harness(r#"pipeline_group = "connect-es-sink""#);
    h.assign_and_read((0, 0), expected(0..6)).await;
    h.in_sink(in_sink.iter().copied());
    let t0 = h.clock.now_ms();
    pipeline_commits(&h, first);
    h.audit.round().await;
    h.clock.advance(1_000);
    h.audit.round().await;
    setup(&mut h, t0);
    h.clock.advance(1_000);
    pipeline_commits(&h, 4);
    h.audit.round().await;
    h.clock.advance(GRACE_MS + 1);
    pipeline_commits(&h, 6);
    h.audit.round().await;
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    (h, t0)
}

/// The one gap (its first and last offsets and cause) and its evidence as stored and as
/// the ledger keeps it.
pub(super) fn the_gap(h: &Harness) -> ((Offset, Offset, GapCause), Option<String>, Option<String>) {
    let gaps = h.stored_gaps();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    let kept = h.audit.parts[&tp(0)]
        .ledger
        .gaps()
        .find(|g| g.first == gaps[0].first_offset)
        .and_then(|g| g.evidence.clone());
    (
        (gaps[0].first_offset, gaps[0].last_offset, gaps[0].cause),
        gaps[0].evidence.clone(),
        kept,
    )
}

/// Review 28, R28-12: a connector history last read before the jump's window ended (the
/// worker not answering, a slow poll) holds the gap's evidence back; a view read after
/// names the restart it could not hold yet.
#[tokio::test]
async fn evidence_waits_for_a_connector_read_past_the_window() {
    let (mut h, t0) = rounds_to_the_gap(&[0, 1, 4, 5], 2, |h, t0| {
        let stale = ConnectView {
            read_as_of_ms: Some(t0 + 1_200),
            ..view(&[], "none")
        };
        h.audit.evidence.connect = Some(ConnectWatch::fixed(stale, POLL_MS));
    })
    .await;
    let (gap, stored, kept) = the_gap(&h);
    assert_eq!(gap, (2, 3, GapCause::SkippedByRestart));
    assert_eq!((stored, kept), (None, None), "reported, not explained yet");
    h.audit.evidence.connect = Some(restart_seen(t0));
    h.clock.advance(1_000);
    h.audit.round().await;
    let (_, stored, kept) = the_gap(&h);
    assert!(
        stored
            .as_deref()
            .is_some_and(|w| w.contains("FAILED at") && w.contains("RUNNING again")),
        "{stored:?}"
    );
    assert_eq!(stored, kept);
}

/// The seed incident on Kafka Connect: task 0 FAILED, then RUNNING on another worker,
/// between commit 2 and the jump to 4; the gap 2–3 names both, stored and kept.
#[tokio::test]
async fn a_task_restart_between_the_commits_explains_the_gap() {
    let (t0, gap, stored, kept) = gap_with(&[0, 1, 4, 5], 2, |h, t0| {
        h.audit.evidence.connect = Some(restart_seen(t0));
    })
    .await;
    assert_eq!(gap, (2, 3, GapCause::SkippedByRestart));
    let words = format!(
        "Kafka Connect task 0 of es-sink FAILED at {} ({EXCEPTION}), RUNNING again at {} on worker connect-2:8083",
        rfc3339(t0 + 1_500),
        rfc3339(t0 + 1_800)
    );
    assert_eq!(stored.as_deref(), Some(words.as_str()));
    assert_eq!(
        kept.as_deref(),
        Some(words.as_str()),
        "kept with the ledger's gap"
    );
}

/// A task that failed long before the jump (seen more than a poll before the commit it
/// left) does not explain it: the gap keeps its cause and carries no evidence.
#[tokio::test]
async fn a_change_before_the_window_leaves_the_gap_without_evidence() {
    let (_, gap, stored, kept) = gap_with(&[0, 1, 4, 5], 2, |h, t0| {
        h.audit.evidence.connect = Some(ConnectWatch::fixed(
            view(
                &[
                    (t0 - 60_000, "FAILED", "connect-1:8083"),
                    (t0 - 50_000, "RUNNING", "connect-2:8083"),
                ],
                "none",
            ),
            POLL_MS,
        ));
    })
    .await;
    assert_eq!(gap, (2, 3, GapCause::SkippedByRestart));
    assert_eq!((stored, kept), (None, None));
}

/// Records committed in normal progress and never written, by a connector that tolerates
/// every conversion error and has no dead-letter queue: the gap says so (no change in its
/// window); with `errors.tolerance=none` it says nothing.
#[tokio::test]
async fn a_drop_in_flight_names_a_tolerance_without_dead_letter_queue() {
    for (tolerance, want) in [
        (
            "all",
            Some(
                "Kafka Connect connector es-sink skips records it cannot convert or transform \
                 (errors.tolerance=all) and has no dead-letter queue",
            ),
        ),
        ("none", None),
    ] {
        let (_, gap, stored, _) = gap_with(&[0, 1, 3, 4, 5], 1, |h, _| {
            h.audit.evidence.connect = Some(ConnectWatch::fixed(view(&[], tolerance), POLL_MS));
        })
        .await;
        assert_eq!(gap, (2, 2, GapCause::DroppedInFlight), "{tolerance}");
        assert_eq!(stored.as_deref(), want, "{tolerance}");
    }
}

/// The `tolerate` case of scripts/connect-seed.sh on a real worker: commit 2 seen, then the
/// record at 2 failed the converter (errors.tolerance=all, no dead-letter queue) and the
/// next commit jumped 2 -> 6: the jump begins at the gap, so the ledger calls it
/// skipped_by_restart; with no restart seen the tolerance explains it (it said nothing).
/// A restart seen in the window is named instead.
#[tokio::test]
async fn a_jump_from_a_record_the_connector_skipped_names_its_tolerance() {
    let (_, gap, stored, _) = gap_with(&[0, 1, 3, 4, 5], 2, |h, _| {
        h.audit.evidence.connect = Some(ConnectWatch::fixed(view(&[], "all"), POLL_MS));
    })
    .await;
    assert_eq!(gap, (2, 2, GapCause::SkippedByRestart));
    assert_eq!(
        stored.as_deref(),
        Some(
            "Kafka Connect connector es-sink skips records it cannot convert or transform \
             (errors.tolerance=all) and has no dead-letter queue"
        )
    );
    let (t0, _, stored, _) = gap_with(&[0, 1, 3, 4, 5], 2, |h, t0| {
        h.audit.evidence.connect = Some(ConnectWatch::fixed(
            view(&[(t0 + 1_600, "FAILED", "connect-1:8083")], "all"),
            POLL_MS,
        ));
    })
    .await;
    assert_eq!(
        stored,
        Some(format!(
            "Kafka Connect task 0 of es-sink FAILED at {} ({EXCEPTION})",
            rfc3339(t0 + 1_600)
        ))
    );
}

/// Flink and Kafka Connect both explain the gap: Flink's words first, joined with "; ".
#[tokio::test]
async fn flink_and_connect_words_are_joined() {
    let (t0, _, stored, _) = gap_with(&[0, 1, 4, 5], 2, |h, t0| {
        let mut runs = FlinkHistory::default();
        let jobs = [JobOverview {
            jid: format!("{:032x}", 1),
            name: "FlinkSQLFromKafka2Doris".into(),
            state: "RUNNING".into(),
            start_time: t0 + 1_500,
            end_time: -1,
            duration: None,
        }];
        // Seen checkpointing after commit 2 was first seen (t0): it may have jumped.
        for jid in runs.observe_jobs(&jobs, "FlinkSQLFromKafka2Doris", t0 + 1_800) {
            runs.observe_checkpoints(
                &jid,
                &CheckpointStats {
                    completed_count: 1,
                    ..Default::default()
                },
                t0 + 1_800,
            );
        }
        h.audit.evidence.flink = Some(FlinkWatch::fixed(FlinkView {
            history: runs,
            state: crate::evidence::flink::SourceState::Ok,
            read_as_of_ms: Some(i64::MAX),
            ..Default::default()
        }));
        h.audit.evidence.connect = Some(ConnectWatch::fixed(
            view(&[(t0 + 1_600, "FAILED", "connect-1:8083")], "all"),
            POLL_MS,
        ));
    })
    .await;
    assert_eq!(
        stored,
        Some(format!(
            "restarted at {} without restoring a checkpoint (latest-offset); Kafka Connect task 0 of es-sink FAILED at {} ({EXCEPTION})",
            rfc3339(t0 + 1_500),
            rfc3339(t0 + 1_600)
        ))
    );
}
