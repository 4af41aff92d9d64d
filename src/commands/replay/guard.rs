//! What `replay` refuses before it reads anything (SPEC guarantee 11): a repair the auditor
//! could never confirm, and a second replay of a gap whose first one the daemon has not
//! confirmed yet. Pure: the caller reads the gap and its replay log from the store.

use crate::config::{AuditConfig, MatchStrategy};
use crate::gap::{Gap, GapState};
use crate::key_semantics::KeySemantics;
use crate::store::ReplayRecord;
use chrono::{DateTime, SecondsFormat, Utc};

use super::Destination;

/// A replay refused up front: the reason, and what to do instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// `--to-topic` where Kafka coordinates identify the audit's rows and the pipeline is
    /// not declared to carry the origin header over.
    #[error(
        "replay --to-topic {topic} refused for audit {audit}: it finds {identity}. A record \
         re-produced to {topic} gets {topic}'s coordinates, so the row the pipeline writes \
         for it can never confirm the lost record, and every replay would write it again. \
         Use --to-sink; or, if the pipeline writes the `gap-auditor.origin` header \
         (topic/partition/offset of the lost record) into {mapped} for what it reads from \
         {topic}, declare it with `pipeline_maps_origin = true` in [audits.replay] of audit \
         {audit} (docs/OPERATOR.md, \"Repairing through a topic\")"
    )]
    OriginNotMapped {
        /// The audit.
        audit: String,
        /// The destination topic.
        topic: String,
        /// How the audit identifies rows, in words.
        identity: String,
        /// What the pipeline would have to fill from the header, in words.
        mapped: String,
    },
    /// `--to-topic` naming a topic the audit reads, where coordinates identify its rows.
    #[error(
        "replay --to-topic {topic} refused for audit {audit}: {topic} is a topic the audit \
         reads, and it finds {identity}. A record re-produced there is a new record of the \
         audit at new coordinates: the one row the pipeline writes for it cannot confirm \
         both it and the lost record, so the gap would stay open or a new one would be \
         reported. Use --to-sink, or a repair topic the pipeline also reads and the audit \
         does not"
    )]
    AuditedTopic {
        /// The audit.
        audit: String,
        /// The destination topic, one of the audit's own.
        topic: String,
        /// How the audit identifies rows, in words.
        identity: String,
    },
    /// `--to-topic` naming a topic a key_columns audit reads, where the table keeps every
    /// row (multiset semantics): the re-produced record is a second record of the key.
    #[error(
        "replay --to-topic {topic} refused for audit {audit}: {topic} is a topic the audit \
         reads, and its table keeps every row (key semantics multiset). A record \
         re-produced there is a new record of the audit with the lost record's key: the one \
         row the pipeline writes for it cannot confirm both, so the gap would stay open or \
         the copy would be reported lost. Use --to-sink, or a repair topic the pipeline \
         also reads and the audit does not"
    )]
    AuditedTopicKeys {
        /// The audit.
        audit: String,
        /// The destination topic, one of the audit's own.
        topic: String,
    },
    /// The gap's records were dead-lettered by the pipeline: the daemon no longer re-checks
    /// them, so a replay could never turn the gap `repaired`.
    #[error(
        "gap {gap} is dead_lettered: the pipeline rejected its records (its dead-letter topic \
         names them), and the daemon does not re-check dead-lettered records, so a replay \
         could never turn it repaired. Fix what made the pipeline reject them and replay from \
         the dead-letter topic, see what the sink lacks with --dry-run, or pass --force to \
         write them anyway (the gap stays dead_lettered)"
    )]
    DeadLettered {
        /// The gap id.
        gap: String,
    },
    /// The gap was replayed and the daemon has not confirmed its records yet.
    #[error(
        "gap {gap} was already replayed at {at} ({destination}) and the daemon has not \
         confirmed it yet: the gap is still open. Replaying again now may write its records \
         twice (a pipeline may still be reading them from a repair topic). Wait for the \
         daemon's next rounds (`gap-auditor gaps --state all` shows `repaired`), see what \
         the sink still lacks with --dry-run, or pass --force to replay anyway (only records \
         the sink lacks are written)"
    )]
    NotConfirmedYet {
        /// The gap id.
        gap: String,
        /// When it was marked replayed (RFC 3339).
        at: String,
        /// Where the last replay that wrote sent its records, in words.
        destination: String,
    },
}

/// How `audit` identifies a record's row, in words, when Kafka coordinates are part of it;
/// `None` when they are not (a re-produced record keeps what identifies it), with what
/// the pipeline would have to fill from the origin header.
fn coordinate_identity(audit: &AuditConfig) -> Option<(String, String)> {
    let m = &audit.matching;
    let coords = m.identifying_coordinates();
    if coords.is_empty() {
        return None;
    }
    Some(match m.strategy {
        MatchStrategy::DocId => (
            format!(
                "documents by an id built from Kafka coordinates (match.id_template `{}`)",
                m.id_template()
            ),
            format!("the document id (its {})", coords.join(", ")),
        ),
        _ => {
            let mut columns = Vec::new();
            if let Some(t) = &m.topic_column {
                columns.push(format!("`{t}`"));
            }
            columns.push(format!("`{}`", m.partition_column));
            columns.push(format!("`{}`", m.offset_column));
            let columns = columns.join(", ");
            (
                format!("rows by their Kafka coordinates (offset_columns: {columns})"),
                format!("the columns {columns}"),
            )
        }
    })
}

/// Whether `dest` can ever confirm a replay of `audit`'s records: refuses `--to-topic` for
/// audits whose rows are identified by Kafka coordinates unless the pipeline is declared
/// to map the origin header (`replay.pipeline_maps_origin`), and always for a topic the
/// audit reads itself (the new record's coordinates are audited too). `--to-sink` writes
/// the original coordinates itself and is never refused here.
pub fn check_destination(audit: &AuditConfig, dest: &Destination) -> Result<(), Refusal> {
    let Destination::Topic(topic) = dest else {
        return Ok(());
    };
    let Some((identity, mapped)) = coordinate_identity(audit) else {
        return Ok(());
    };
    if audit.topics.iter().any(|t| t == topic) {
        return Err(Refusal::AuditedTopic {
            audit: audit.name.clone(),
            topic: topic.clone(),
            identity,
        });
    }
    if !audit.replay.pipeline_maps_origin {
        return Err(Refusal::OriginNotMapped {
            audit: audit.name.clone(),
            topic: topic.clone(),
            identity,
            mapped,
        });
    }
    Ok(())
}

/// Whether `dest` can confirm a replay of a key_columns `audit` whose table the audit reads
/// under `semantics`: a topic the audit reads itself is refused under multiset semantics
/// (each record needs a row of its own, and the copy is a record too); under presence one
/// row confirms every record of its key, so the copy's row confirms the lost record.
/// Other strategies are [`check_destination`]'s.
pub fn check_audited_keys(
    audit: &AuditConfig,
    dest: &Destination,
    semantics: KeySemantics,
) -> Result<(), Refusal> {
    let Destination::Topic(topic) = dest else {
        return Ok(());
    };
    if audit.matching.strategy != MatchStrategy::KeyColumns
        || semantics != KeySemantics::Multiset
        || !audit.topics.iter().any(|t| t == topic)
    {
        return Ok(());
    }
    Err(Refusal::AuditedTopicKeys {
        audit: audit.name.clone(),
        topic: topic.clone(),
    })
}

/// Whether gap `gap` may be replayed again: not while it is still open with a replay mark
/// (`replayed_at`), i.e. replayed and not confirmed yet, unless `force`. `last` is its
/// newest replay that wrote, quoted for where it went (none for a mark an older
/// gap-auditor set). A dry run writes nothing and is never refused.
pub fn check_again(
    gap: &Gap,
    replayed_at: Option<DateTime<Utc>>,
    last: Option<&ReplayRecord>,
    force: bool,
    dry_run: bool,
) -> Result<(), Refusal> {
    // SPEC guarantee 11: a repair the auditor could never confirm is refused up front.
    if gap.state == GapState::DeadLettered && !force && !dry_run {
        return Err(Refusal::DeadLettered {
            gap: gap.id.clone(),
        });
    }
    let Some(at) = replayed_at else {
        return Ok(());
    };
    if force || dry_run || gap.state != GapState::Open {
        return Ok(());
    }
    let destination = match last {
        Some(r) => format!("{} record(s) to {}", r.written, r.destination()),
        None => "destination not recorded".to_owned(),
    };
    Err(Refusal::NotConfirmedYet {
        gap: gap.id.clone(),
        at: at.to_rfc3339_opts(SecondsFormat::Secs, true),
        destination,
    })
}
