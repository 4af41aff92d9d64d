use super::*;
use chrono::TimeZone;

fn seed_gap() -> Gap {
    Gap {
        id: Gap::make_id(AUDIT, TOPIC, 0, 2),
        audit: AUDIT.into(),
        topic: TOPIC.into(),
        partition: 0,
        first_offset: 2,
        last_offset: 3,
        missing_records: 2,
        size_known: true,
        first_timestamp: None,
        last_timestamp: None,
        detected_at: chrono::Utc::now(),
        state: GapState::Open,
        unrecoverable_at: None,
        cause: GapCause::SkippedByRestart,
        pipeline_commit_from: Some(2),
        pipeline_commit_to: Some(4),
        pipeline_commit_at: chrono::Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 7).single(),
        evidence: None,
        ack_reason: None,
        shared_key: false,
        replayed_at: None,
    }
}

/// The old demo printed only the gap's range and state: the cause, the commit jump
/// that proves it and the repair deadline were nowhere on the screen.
#[test]
fn the_cause_is_told_in_words_with_the_commit_jump() {
    let text = cause_lines(&seed_gap());
    assert!(text.contains("skipped_by_restart"), "{text}");
    assert!(text.contains("jumped 2 → 4 at 12:00:07 UTC"), "{text}");
    assert!(
        text.contains("the restarted job started at latest and skipped offsets 2–3"),
        "{text}"
    );
    assert!(text.contains("unknown here"), "{text}");
    let mut known = seed_gap();
    known.unrecoverable_at = chrono::Utc.with_ymd_and_hms(2024, 5, 8, 12, 0, 2).single();
    let text = cause_lines(&known);
    assert!(
        text.contains("possible until 2024-05-08 12:00:02 UTC"),
        "{text}"
    );
}

/// A repaired gap has no record missing any more: printed as stored, its line read
/// "0 records, repaired", as if nothing had been lost.
#[test]
fn a_repaired_gap_keeps_its_size_on_screen() {
    let mut g = seed_gap();
    g.missing_records = 0;
    g.state = GapState::Repaired;
    assert_eq!(
        gap_line(&g, 2),
        "GAP test-0 offsets 2–3, 2 records, repaired (id dns_logs:test:0:2)"
    );
}

/// The seed field list is the shipped example config's: a test or benchmark built from it
/// audits what a newcomer's config audits.
#[test]
fn seed_fields_are_the_example_configs() {
    let cfg = Config::from_toml_str(EXAMPLE_CONFIG).expect("the example config loads");
    assert_eq!(cfg.audits[0].record.fields, SEED_FIELDS);
}
