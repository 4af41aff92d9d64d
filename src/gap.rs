//! The gap: what the auditor reports. Shared by the ledger, the store, the HTTP API and the CLI.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::fmt;

use crate::types::Offset;

/// Lifecycle of a gap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GapState {
    /// At least one of its records is still missing.
    Open,
    /// Every missing record was found later: the sink was slow, not lossy.
    Late,
    /// Its records were replayed and then confirmed.
    Repaired,
    /// Kafka no longer holds (some of) its records; replay is impossible.
    Unrecoverable,
    /// Kafka deleted the records before the auditor could read them: nobody can tell
    /// whether they were expected, or whether they are in the sink (SPEC guarantee 8). Not
    /// counted as lost: `gap_auditor_records_unverifiable_total`.
    Unverifiable,
    /// An operator acknowledged it (`gap-auditor ack`); it no longer alerts.
    Acknowledged,
    /// Its records are absent from the sink, and the pipeline's dead-letter topic names
    /// each of them (`[audits.pipeline] dead_letter_topic`): the pipeline rejected them on
    /// purpose. Not lost (`gap_auditor_records_dead_lettered_total`); its own alert.
    /// `missing_records` counts the dead-lettered records.
    DeadLettered,
}

impl GapState {
    /// The snake_case name used in the API, the store and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            GapState::Open => "open",
            GapState::Late => "late",
            GapState::Repaired => "repaired",
            GapState::Unrecoverable => "unrecoverable",
            GapState::Unverifiable => "unverifiable",
            GapState::Acknowledged => "acknowledged",
            GapState::DeadLettered => "dead_lettered",
        }
    }

    /// Parses the snake_case name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "open" => GapState::Open,
            "late" => GapState::Late,
            "repaired" => GapState::Repaired,
            "unrecoverable" => GapState::Unrecoverable,
            "unverifiable" => GapState::Unverifiable,
            "acknowledged" => GapState::Acknowledged,
            "dead_lettered" => GapState::DeadLettered,
            _ => return None,
        })
    }

    /// Whether the gap still needs an operator: records are (or may be) lost and nobody
    /// acknowledged it. `?state=open` lists these.
    pub fn is_unresolved(self) -> bool {
        matches!(
            self,
            GapState::Open | GapState::Unrecoverable | GapState::Unverifiable
        )
    }
}

impl fmt::Display for GapState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why records went missing, as far as the pipeline group's commits tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GapCause {
    /// The pipeline's committed offset jumped from exactly where the loss begins over
    /// records it never wrote: the signature of a restart from `latest` (or any restart that
    /// did not resume from its checkpoint).
    SkippedByRestart,
    /// The records were committed in the middle of normal progress (records before them in
    /// the same commit step were written) but never written: loss between source and sink.
    DroppedInFlight,
    /// Kafka deleted the records before the auditor could read them.
    DeletedUnread,
    /// No pipeline group configured, or its commit history does not cover the gap.
    #[default]
    Unknown,
    /// The partition's overflow gap: gaps folded together beyond `max_open_gaps` (first and
    /// last offsets span them, `missing_records` is their sum; their own causes are not
    /// kept).
    Folded,
    /// The pipeline wrote the records to its dead-letter topic (a `dead_lettered` gap,
    /// known when its records were decided).
    DeadLettered,
    /// A Doris Routine Load job's position moved forward across a pause of the job, from
    /// exactly where the loss begins: an `ALTER ROUTINE LOAD ... kafka_offsets` (only
    /// accepted while PAUSED) moved it over records it never loaded (src/routine_load).
    SkippedByAlter,
}

impl GapCause {
    /// The snake_case name used in the API, the store, logs and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            GapCause::SkippedByRestart => "skipped_by_restart",
            GapCause::DroppedInFlight => "dropped_in_flight",
            GapCause::DeletedUnread => "deleted_unread",
            GapCause::Unknown => "unknown",
            GapCause::Folded => "folded",
            GapCause::DeadLettered => "dead_lettered",
            GapCause::SkippedByAlter => "skipped_by_alter",
        }
    }

    /// Parses the snake_case name (unknown names are `Unknown`).
    pub fn parse(s: &str) -> Self {
        match s {
            "skipped_by_restart" => GapCause::SkippedByRestart,
            "dropped_in_flight" => GapCause::DroppedInFlight,
            "deleted_unread" => GapCause::DeletedUnread,
            "folded" => GapCause::Folded,
            "dead_lettered" => GapCause::DeadLettered,
            "skipped_by_alter" => GapCause::SkippedByAlter,
            _ => GapCause::Unknown,
        }
    }
}

/// A maximal run of missing expected records in one partition, with no confirmed expected
/// record between them. Identity: (audit, topic, partition, first offset at detection).
/// One field per field of a gap in `/api/gaps`, the store and the CLI (SPEC's gap
/// contract).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    /// `audit:topic:partition:first_offset[@epoch]` — deterministic, so a crash and a re-detection
    /// produce the same id and the store's upsert keeps one row.
    pub id: String,
    /// Audit name.
    pub audit: String,
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// First offset of the gap (inclusive).
    pub first_offset: Offset,
    /// Last offset of the gap (inclusive).
    pub last_offset: Offset,
    /// Expected records in the gap that are still missing. For a gap of unknown size
    /// (Kafka deleted the records before the auditor read them) this is the offset span.
    pub missing_records: u64,
    /// Whether `missing_records` is exact (false when Kafka deleted the records unread).
    pub size_known: bool,
    /// Kafka timestamp of the first missing record, when known.
    pub first_timestamp: Option<DateTime<Utc>>,
    /// Kafka timestamp of the last missing record, when known.
    pub last_timestamp: Option<DateTime<Utc>>,
    /// When the auditor first declared records of this gap missing.
    pub detected_at: DateTime<Utc>,
    /// Current state.
    pub state: GapState,
    /// When Kafka retention deletes (or deleted) the gap's first record, when known.
    pub unrecoverable_at: Option<DateTime<Utc>>,
    /// Why the records went missing (see [`GapCause`]).
    #[serde(default)]
    pub cause: GapCause,
    /// The pipeline group's committed offset before the commit step that passed over the
    /// gap's first record.
    #[serde(default)]
    pub pipeline_commit_from: Option<Offset>,
    /// The committed offset after that step.
    #[serde(default)]
    pub pipeline_commit_to: Option<Offset>,
    /// When the auditor first saw that step.
    #[serde(default)]
    pub pipeline_commit_at: Option<DateTime<Utc>>,
    /// What the pipeline itself tells of the cause, when an evidence source was read
    /// (`[audits.pipeline] flink_rest_url`, src/evidence/flink): for a `skipped_by_restart`
    /// gap, "restarted at 2026-12-06T02:14:00Z without restoring a checkpoint
    /// (latest-offset)" or "restarted at T, restored from chk-7 (path)". With `connect_url`
    /// (src/evidence/connect), for `skipped_by_restart` and `dropped_in_flight`: "Kafka
    /// Connect task 0 of es-sink FAILED at T (exception), RUNNING again at T2 on worker W",
    /// after Flink's words with "; " when both tell. Decided once, when the gap is found;
    /// `null` without evidence.
    #[serde(default)]
    pub evidence: Option<String>,
    /// Operator's reason, set by `gap-auditor ack`.
    pub ack_reason: Option<String>,
    /// Some missing record of the gap carries a key other records share (`key_columns`):
    /// the sink holds fewer rows than records for that key, and cannot say which of the
    /// records is the absent one; the gap names the shortfall's position by offset order.
    #[serde(default)]
    pub shared_key: bool,
    /// When `gap-auditor replay` last marked the gap replayed (set before it writes): the
    /// gap turns `repaired` once the daemon confirms its records; while it is still `open`,
    /// another replay of it is refused without `--force`. Kept by the store only; the
    /// daemon's own copies leave it `None`.
    #[serde(default)]
    pub replayed_at: Option<DateTime<Utc>>,
}

impl Gap {
    /// The gap's evidence as one line for people (`gaps`, `check`, the log): "restarted at
    /// T without restoring a checkpoint (latest-offset): offsets 2–3 skipped". A jump skips
    /// only the offsets below where it landed; a gap that grew past them (records the
    /// restarted pipeline lost in flight) says so apart: "...: offsets 2–3 skipped (the gap
    /// continues to 9)". `None` without evidence.
    pub fn evidence_line(&self) -> Option<String> {
        let e = self.evidence.as_deref()?;
        let skip = matches!(
            self.cause,
            GapCause::SkippedByRestart | GapCause::SkippedByAlter
        );
        let what = if skip { "skipped" } else { "missing" };
        let words = |first: Offset, last: Offset| {
            if first == last {
                format!("offset {first}")
            } else {
                format!("offsets {first}–{last}")
            }
        };
        let jump = match (self.pipeline_commit_from, self.pipeline_commit_to) {
            (Some(from), Some(to)) if skip && to > from => Some((from, to - 1)),
            _ => None,
        };
        let (first, last) = (self.first_offset, self.last_offset);
        Some(match jump {
            // The gap lies past where the jump landed (the rest of a gap split by an
            // acknowledgement): the jump skipped others (review 27, G4).
            Some((from, to)) if to < first => format!(
                "{e}: the jump skipped {}; {} missing after it",
                words(from, to),
                words(first, last)
            ),
            Some((_, to)) if to < last => format!(
                "{e}: {} {what} (the gap continues to {last})",
                words(first, to)
            ),
            _ => format!("{e}: {} {what}", words(first, last)),
        })
    }

    /// The evidence as a phrase that follows a cause (the gap's log line, the gap page):
    /// Flink's words name no subject ("restarted at T …"), so "the Flink job" goes before
    /// them; Kafka Connect's name their own ("Kafka Connect task 0 of es-sink …"), and come
    /// after Flink's when both explain the gap. `None` without evidence.
    pub fn evidence_phrase(&self) -> Option<String> {
        let e = self.evidence.as_deref()?;
        Some(if e.starts_with("Kafka Connect ") {
            e.to_owned()
        } else {
            format!("the Flink job {e}")
        })
    }

    /// The deterministic id for a gap.
    pub fn make_id(audit: &str, topic: &str, partition: i32, first_offset: Offset) -> String {
        format!("{audit}:{topic}:{partition}:{first_offset}")
    }

    /// The id of a gap found on the `epoch`-th log of its partition (0: the first; one more
    /// at each truncation or re-creation the auditor resumed over, see
    /// `ledger::Snapshot::epoch`): [`Self::make_id`], then `@epoch` when above 0, so that a
    /// gap the old log left and a new one at the same offset are two gaps.
    pub fn make_id_in(
        audit: &str,
        topic: &str,
        partition: i32,
        first_offset: Offset,
        epoch: u32,
    ) -> String {
        let id = Self::make_id(audit, topic, partition, first_offset);
        if epoch == 0 {
            id
        } else {
            format!("{id}@{epoch}")
        }
    }

    /// The log epoch an id made by [`Self::make_id_in`] names (0 without one).
    pub fn epoch_of_id(id: &str) -> u32 {
        let last = id.rsplit(':').next().unwrap_or(id);
        last.split_once('@')
            .and_then(|(_, e)| e.parse().ok())
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed's incident, in the words the `gaps` table prints under its row.
    #[test]
    fn the_evidence_line_names_the_skipped_offsets() {
        let mut g = Gap {
            id: Gap::make_id("dns_logs", "test", 0, 2),
            audit: "dns_logs".into(),
            topic: "test".into(),
            partition: 0,
            first_offset: 2,
            last_offset: 3,
            missing_records: 2,
            size_known: true,
            first_timestamp: None,
            last_timestamp: None,
            detected_at: Utc::now(),
            state: GapState::Open,
            unrecoverable_at: None,
            cause: GapCause::SkippedByRestart,
            pipeline_commit_from: Some(2),
            pipeline_commit_to: Some(4),
            pipeline_commit_at: None,
            evidence: None,
            ack_reason: None,
            shared_key: false,
            replayed_at: None,
        };
        assert_eq!(g.evidence_line(), None);
        g.evidence = Some(
            "restarted at 2026-12-06T02:14:00Z without restoring a checkpoint (latest-offset)"
                .into(),
        );
        assert_eq!(
            g.evidence_line().as_deref(),
            Some(
                "restarted at 2026-12-06T02:14:00Z without restoring a checkpoint (latest-offset): offsets 2–3 skipped"
            )
        );
        // Review 37, F5: the restarted job then lost 4–9 in flight; the jump skipped 2–3.
        g.last_offset = 9;
        assert!(
            g.evidence_line()
                .is_some_and(|l| l.ends_with(": offsets 2–3 skipped (the gap continues to 9)")),
            "{:?}",
            g.evidence_line()
        );
        g.pipeline_commit_to = Some(3);
        assert!(
            g.evidence_line()
                .is_some_and(|l| l.ends_with(": offset 2 skipped (the gap continues to 9)"))
        );
        // Review 27, G4: the rest of a gap split by an acknowledgement, past the landing.
        g.pipeline_commit_to = Some(4);
        g.first_offset = 4;
        assert_eq!(
            g.evidence_line().as_deref(),
            Some(
                "restarted at 2026-12-06T02:14:00Z without restoring a checkpoint (latest-offset): the jump skipped offsets 2–3; offsets 4–9 missing after it"
            )
        );
        g.first_offset = 2;
        g.last_offset = 2;
        assert!(
            g.evidence_line()
                .is_some_and(|l| l.ends_with(": offset 2 skipped"))
        );
        // Review 27c, F-2: the phrase after a cause names whose words they are; Kafka
        // Connect's name their own subject, the log line no longer calls them a Flink job's.
        assert!(
            g.evidence_phrase()
                .is_some_and(|p| p.starts_with("the Flink job restarted at"))
        );
        let mut connect = g.clone();
        connect.evidence = Some("Kafka Connect task 0 of es-sink FAILED at T (boom)".into());
        assert_eq!(
            connect.evidence_phrase().as_deref(),
            Some("Kafka Connect task 0 of es-sink FAILED at T (boom)")
        );
        // The JSON names it (null without).
        let json = serde_json::to_value(&g).expect("serializes");
        assert!(
            json["evidence"]
                .as_str()
                .is_some_and(|e| e.starts_with("restarted at"))
        );
    }
}
