//! The round's gap log: a bounded number of lines per round, plus a summary.

use crate::gap::{Gap, GapState};

/// A round's gap changes, logged as at most [`GapLog::SHOWN`] lines of each kind plus one
/// summary line: an incident opening 100,000 gaps must not write 100,000 ERROR lines (the
/// store, the API and the metrics hold every one of them).
#[derive(Debug, Default)]
pub(super) struct GapLog {
    opened: Vec<Gap>,
    opened_count: u64,
    opened_records: u64,
    changed: Vec<Gap>,
    changed_count: u64,
}

impl GapLog {
    const SHOWN: usize = 5;

    pub(super) fn add(&mut self, g: &Gap) {
        if g.state == GapState::Open {
            self.opened_count += 1;
            self.opened_records += g.missing_records;
            if self.opened.len() < Self::SHOWN {
                self.opened.push(g.clone());
            }
        } else {
            self.changed_count += 1;
            if self.changed.len() < Self::SHOWN {
                self.changed.push(g.clone());
            }
        }
    }

    pub(super) fn flush(&mut self, pipeline_group: Option<&str>) {
        let log = std::mem::take(self);
        for g in log.opened.iter().chain(&log.changed) {
            log_gap(g, pipeline_group);
        }
        if let Some((more_opened, audit)) = unlogged(&log.opened, log.opened_count) {
            tracing::error!(
                audit,
                gaps = log.opened_count,
                missing_records = log.opened_records,
                "{} gaps opened or grew this round ({} records missing in them); {more_opened} more not logged one by one: see `gap-auditor gaps` or /api/gaps",
                log.opened_count,
                log.opened_records
            );
        }
        if let Some((more_changed, audit)) = unlogged(&log.changed, log.changed_count) {
            tracing::info!(
                audit,
                gaps = log.changed_count,
                "{} gaps changed state this round; {more_changed} more not logged one by one",
                log.changed_count
            );
        }
    }
}

/// How many of `count` gaps were not logged one by one, and their audit (`None`: all were).
fn unlogged(shown: &[Gap], count: u64) -> Option<(u64, &str)> {
    let more = count - shown.len() as u64;
    (more > 0).then(|| (more, shown.first().map_or("", |g| g.audit.as_str())))
}

fn log_gap(g: &Gap, pipeline_group: Option<&str>) {
    // "pipeline group G moved from 2 to 4 at 12:03:10 while records 2–3 were absent".
    let why = match (
        g.pipeline_commit_from,
        g.pipeline_commit_to,
        g.pipeline_commit_at,
    ) {
        (Some(from), Some(to), Some(at)) => format!(
            " — pipeline group {} moved from {from} to {to} at {} while they were absent from the sink ({})",
            pipeline_group.unwrap_or("?"),
            at.format("%H:%M:%S"),
            g.cause.as_str()
        ),
        _ => format!(" ({})", g.cause.as_str()),
    };
    // What the pipeline itself says (Flink's restore evidence, Kafka Connect's task
    // changes), when it was read: the same phrase as the gap page's (review 27c, F-2).
    let why = match g.evidence_phrase() {
        Some(e) => format!("{why}; {e}"),
        None => why,
    };
    match g.state {
        GapState::Open => tracing::error!(
            audit = %g.audit, topic = %g.topic, partition = g.partition, first_offset = g.first_offset,
            last_offset = g.last_offset, missing_records = g.missing_records, gap = %g.id, cause = g.cause.as_str(),
            "records missing in the sink: {}-{} offsets {}–{}, {} records{why}",
            g.topic, g.partition, g.first_offset, g.last_offset, g.missing_records
        ),
        _ => tracing::info!(
            audit = %g.audit, topic = %g.topic, partition = g.partition, first_offset = g.first_offset,
            last_offset = g.last_offset, missing_records = g.missing_records, state = %g.state, gap = %g.id,
            "gap {} is now {}", g.id, g.state
        ),
    }
}
