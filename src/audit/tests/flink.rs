//! Flink's restore evidence on a new gap (src/audit/evidence/flink.rs): the seed incident on the
//! test clock, with the poller's view filled by hand.

use super::harness::*;
use crate::audit::evidence::flink::FlinkWatch;
use crate::evidence::flink::history::rfc3339;
use crate::evidence::flink::rest::{CheckpointStats, JobOverview};
use crate::evidence::flink::{FlinkView, History, SourceState};
use crate::gap::GapCause;
use crate::types::Offset;

fn pipeline_commits(h: &Harness, to: Offset) {
    h.kafka
        .pipeline
        .lock()
        .expect("lock")
        .as_mut()
        .expect("pipeline group")
        .insert(tp(0), Some(to));
}

/// The job's runs: one per start time, the last one RUNNING, each seen with a completed
/// checkpoint `seen_after` ms after its start and nothing restored.
fn view(starts: &[i64], seen_after: i64) -> FlinkView {
    let mut history = History::default();
    let jobs: Vec<JobOverview> = starts
        .iter()
        .enumerate()
        .map(|(i, &s)| JobOverview {
            jid: format!("{i:032x}"),
            name: "FlinkSQLFromKafka2Doris".into(),
            state: if i + 1 == starts.len() {
                "RUNNING"
            } else {
                "FAILED"
            }
            .into(),
            start_time: s,
            end_time: -1,
            duration: None,
        })
        .collect();
    // One overview and checkpoint read per run, at the time it was seen checkpointing.
    for (i, &s) in starts.iter().enumerate() {
        let upto = &jobs[..=i];
        history.observe_jobs(upto, "FlinkSQLFromKafka2Doris", s + seen_after);
        history.observe_checkpoints(
            &format!("{i:032x}"),
            &CheckpointStats {
                completed_count: 1,
                ..Default::default()
            },
            s + seen_after,
        );
    }
    FlinkView {
        history,
        state: SourceState::Ok,
        // Read after every step of the test (a view read before one makes its gap's
        // evidence wait: `evidence_waits_for_a_view_read_past_the_jump`).
        read_as_of_ms: Some(i64::MAX),
        ..Default::default()
    }
}

/// The seed: commit 2 seen, the job resubmitted (latest-offset), the commit jumps 2 → 4
/// over records it never wrote. `starts(t0)` are the job's runs' start times, `t0` when
/// commit 2 was first seen. Returns `t0` and the gap's evidence as stored and as the
/// ledger keeps it.
async fn seed_with(
    starts: impl Fn(i64) -> Vec<i64>,
    seen_after: i64,
) -> (i64, Option<String>, Option<String>) {
    let mut h = harness(r#"pipeline_group = "flink""#);
    let t0 = seed_rounds(&mut h, |t0| view(&starts(t0), seen_after)).await;
    let (stored, kept) = evidence_of_the_gap(&h);
    (t0, stored, kept)
}

/// The seed's rounds up to the gap 2–3 being found, the Flink view `view(t0)` installed
/// before the jump; returns `t0` (commit 2 first seen; the jump is seen at `t0 + 2 s`).
async fn seed_rounds(h: &mut Harness, view: impl Fn(i64) -> FlinkView) -> i64 {
    h.assign_and_read((0, 0), expected(0..6)).await;
    h.in_sink([0, 1, 4, 5]);
    let t0 = h.clock.now_ms();
    pipeline_commits(h, 2);
    h.audit.round().await;
    h.clock.advance(1_000);
    h.audit.round().await;
    h.audit.evidence.flink = Some(FlinkWatch::fixed(view(t0)));
    h.clock.advance(1_000);
    pipeline_commits(h, 4);
    h.audit.round().await;
    h.clock.advance(GRACE_MS + 1);
    pipeline_commits(h, 6);
    h.audit.round().await;
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    t0
}

/// The one gap's evidence, as stored and as the ledger keeps it.
fn evidence_of_the_gap(h: &Harness) -> (Option<String>, Option<String>) {
    let gaps = h.stored_gaps();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    assert_eq!(
        (gaps[0].first_offset, gaps[0].last_offset, gaps[0].cause),
        (2, 3, GapCause::SkippedByRestart)
    );
    let kept = h.audit.parts[&tp(0)]
        .ledger
        .gaps()
        .find(|g| g.first == 2)
        .and_then(|g| g.evidence.clone());
    (gaps[0].evidence.clone(), kept)
}

/// Review 27, G7: a view last read before the jump was seen (the JobManager was not
/// answering, or its poll was slow) is not what explains the gap: the gap is reported at
/// once, its evidence waits until a view read after the jump (here one that shows a
/// restart the stale one did not), and is then stored and kept.
#[tokio::test]
async fn evidence_waits_for_a_view_read_past_the_jump() {
    let mut h = harness(r#"pipeline_group = "flink""#);
    let stale = |t0: i64| FlinkView {
        read_as_of_ms: Some(t0 + 1_800),
        ..view(&[t0 - 60_000], 300)
    };
    let t0 = seed_rounds(&mut h, stale).await;
    assert_eq!(
        evidence_of_the_gap(&h),
        (None, None),
        "reported, not explained yet"
    );
    h.audit.evidence.flink = Some(FlinkWatch::fixed(view(&[t0 - 60_000, t0 + 1_900], 50)));
    h.clock.advance(1_000);
    h.audit.round().await;
    let words = format!(
        "restarted at {} without restoring a checkpoint (latest-offset)",
        rfc3339(t0 + 1_900)
    );
    let (stored, kept) = evidence_of_the_gap(&h);
    assert_eq!(stored.as_deref(), Some(words.as_str()));
    assert_eq!(kept.as_deref(), Some(words.as_str()));
}

/// Review 28, R28-5: which gaps wait for evidence is not stored; a process that stops
/// while one waits (here: its memory dropped, the partition assigned again from the store)
/// queues it again, and a view read after the jump explains it.
#[tokio::test]
async fn a_gap_waiting_for_evidence_waits_again_after_a_restart() {
    let mut h = harness(r#"pipeline_group = "flink""#);
    let stale = |t0: i64| FlinkView {
        read_as_of_ms: Some(t0 + 1_800),
        ..view(&[t0 - 60_000], 300)
    };
    let t0 = seed_rounds(&mut h, stale).await;
    assert_eq!(evidence_of_the_gap(&h), (None, None));
    h.audit.evidence.waiting.clear();
    h.audit.parts.clear();
    h.audit.assign(vec![tp(0)]).await;
    assert_eq!(h.audit.evidence.waiting.len(), 1, "queued again");
    h.audit.evidence.flink = Some(FlinkWatch::fixed(view(&[t0 - 60_000, t0 + 1_900], 50)));
    h.clock.advance(1_000);
    h.audit.round().await;
    let (stored, kept) = evidence_of_the_gap(&h);
    assert!(
        stored
            .as_deref()
            .is_some_and(|w| w.starts_with("restarted at")),
        "{stored:?}"
    );
    assert_eq!(stored, kept);
}

/// A view that never catches up (the JobManager stays down) holds the evidence back for
/// at most `EVIDENCE_WAIT_MS`; then what it holds is said.
#[tokio::test]
async fn evidence_waits_a_bounded_time() {
    let mut h = harness(r#"pipeline_group = "flink""#);
    let stale = |t0: i64| FlinkView {
        read_as_of_ms: Some(t0 + 1_800),
        ..view(&[t0 - 60_000, t0 + 1_500], 300)
    };
    let t0 = seed_rounds(&mut h, stale).await;
    assert_eq!(evidence_of_the_gap(&h), (None, None));
    h.clock
        .advance(crate::audit::evidence::EVIDENCE_WAIT_MS / 2);
    h.audit.round().await;
    assert_eq!(evidence_of_the_gap(&h), (None, None), "still waiting");
    h.clock
        .advance(crate::audit::evidence::EVIDENCE_WAIT_MS / 2);
    h.audit.round().await;
    let (stored, kept) = evidence_of_the_gap(&h);
    let words = format!(
        "restarted at {} without restoring a checkpoint (latest-offset)",
        rfc3339(t0 + 1_500)
    );
    assert_eq!(stored.as_deref(), Some(words.as_str()));
    assert_eq!(kept.as_deref(), Some(words.as_str()));
}

#[tokio::test]
async fn a_run_started_between_the_commits_explains_the_gap() {
    let (t0, stored, kept) = seed_with(|t0| vec![t0 - 60_000, t0 + 1_500], 300).await;
    let words = format!(
        "restarted at {} without restoring a checkpoint (latest-offset)",
        rfc3339(t0 + 1_500)
    );
    assert_eq!(stored.as_deref(), Some(words.as_str()));
    assert_eq!(
        kept.as_deref(),
        Some(words.as_str()),
        "kept with the ledger's gap"
    );
}

/// A job that has run since long before the jump did not restart: the gap keeps its cause
/// and carries no evidence.
#[tokio::test]
async fn no_run_started_in_the_window_leaves_the_gap_without_evidence() {
    let (_, stored, kept) = seed_with(|t0| vec![t0 - 60_000], 300).await;
    assert_eq!((stored, kept), (None, None));
}

/// Review 37, F1: a run resubmitted just before commit 2 was first seen, and already
/// checkpointing (committing) when it was, committed 2: the later jump 2 → 4 is not its
/// restart, though its start is inside the window's slack.
#[tokio::test]
async fn a_run_committing_when_the_left_position_was_seen_explains_nothing() {
    let (_, stored, kept) = seed_with(|t0| vec![t0 - 60_000, t0 - 500], 300).await;
    assert_eq!((stored, kept), (None, None));
    // The same start, seen checkpointing only after 2 was seen: it may have jumped.
    let (_, stored, _) = seed_with(|t0| vec![t0 - 60_000, t0 - 500], 1_000).await;
    assert!(stored.is_some_and(|e| e.contains("without restoring")));
}
