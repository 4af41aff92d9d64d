//! One replay from request to store: the refusals of [`super::guard`], the gap's replay
//! mark, the replay itself, and its row in the store's replay log. `gap-auditor replay` and
//! `gap-auditor demo` both come through here, so they record a replay the same way.

use super::{Destination, Outcome, ReplayError, Replayed, Target, replay};
use crate::commands::replay::guard::{check_again, check_audited_keys, check_destination};
use crate::config::{Config, MatchStrategy, SinkSpec};
use crate::sink::AnySink;
use crate::store::{ReplayRecord, Store};
use anyhow::Context;

/// One replay as asked: what, where, and how.
#[derive(Debug, Clone)]
pub struct Request {
    /// The offsets (and the gap, with `--gap`).
    pub target: Target,
    /// Where the records go.
    pub dest: Destination,
    /// Show what would be written; write nothing.
    pub dry_run: bool,
    /// Replay a gap although an earlier replay of it is not confirmed yet.
    pub force: bool,
}

impl Replayed {
    /// (written, present, filtered, failed) records.
    pub fn counts(&self) -> (u64, u64, u64, u64) {
        let mut n = (0, 0, 0, 0);
        for o in &self.outcomes {
            match o {
                Outcome::Written { .. } => n.0 += 1,
                Outcome::Present { .. } => n.1 += 1,
                Outcome::Filtered { .. } => n.2 += 1,
                Outcome::Failed { .. } => n.3 += 1,
            }
        }
        n
    }
}

/// [`replay`] between the checks and the bookkeeping: refuses what could never be
/// confirmed or was replayed and not confirmed yet (without `force`), marks the gap
/// replayed BEFORE writing (a daemon round confirming the records between the write and a
/// later mark would store the gap `late` for good, never `repaired`) and takes the mark
/// back when nothing was written, marks it unrecoverable when Kafka deleted its records,
/// and logs the replay in the store, whatever came of it.
pub(super) async fn repair(
    config: &Config,
    spec: &SinkSpec,
    store: &Store,
    req: &Request,
    sink: &AnySink,
) -> Result<Replayed, ReplayError> {
    let target = &req.target;
    let audit = config
        .audit(&target.audit)
        .with_context(|| format!("no audit named {:?} in the configuration", target.audit))?;
    check_destination(audit, &req.dest)?;
    if audit.matching.strategy == MatchStrategy::KeyColumns
        && matches!(&req.dest, Destination::Topic(t) if audit.topics.contains(t))
    {
        let semantics = crate::audit::sink_model::key_semantics(sink, audit)
            .await
            .with_context(|| format!("audits.{}", audit.name))?;
        check_audited_keys(audit, &req.dest, semantics)?;
    }
    // The gaps this replay repairs: `--gap`'s, or the open gaps `--offsets` covers. A
    // replay by offsets is the same repair as one by gap id: it is refused on the same
    // grounds and marks the same gaps, or it would write a repair topic's records twice and
    // its gaps would turn `late`, never `repaired`.
    let (overlapping, covered) = gaps_of_target(store, target)?;
    for id in &overlapping {
        let gap = store.get_gap(id).context("reading the gap")?;
        let replayed_at = store.replayed_at(id).context("reading the gap")?;
        if let Some(gap) = &gap {
            let last = store
                .last_write_of_gap(id)
                .context("reading the gap's replays")?;
            check_again(gap, replayed_at, last.as_ref(), req.force, req.dry_run)?;
        }
    }
    let mut marked_here = Vec::new();
    if !req.dry_run {
        for id in &covered {
            if store.replayed_at(id).context("reading the gap")?.is_none()
                && store
                    .mark_replayed(id)
                    .with_context(|| format!("cannot mark gap {id} replayed"))?
            {
                marked_here.push(id.clone());
            }
        }
    }
    let result = replay(config, spec, store, target, &req.dest, req.dry_run, sink).await;
    let mut notes = Vec::new();
    let written = result.as_ref().map_or(0, |r| r.counts().0);
    if written == 0 {
        for id in &marked_here {
            if let Err(e) = store.clear_replayed(id) {
                notes.push(format!(
                    "warning: cannot take back the replay mark of gap {id}: {e}"
                ));
            }
        }
    }
    // With `--offsets` the deleted start of the range may lie before the gaps it covers:
    // only `--gap`'s own gap is known to start in what Kafka deleted.
    if let (Err(ReplayError::Deleted { .. }), Some(id)) = (&result, &target.gap_id)
        && let Err(e) = store.mark_unrecoverable(id, chrono::Utc::now())
    {
        notes.push(format!("warning: cannot mark gap {id} unrecoverable: {e}"));
    }
    if let Err(e) = store.record_replay(&record_of(req, &result)) {
        notes.push(format!(
            "warning: this replay could not be recorded in the store: {e}"
        ));
    }
    match result {
        Ok(mut r) => {
            r.notes.extend(notes);
            Ok(r)
        }
        Err(e) => {
            // The error is what the caller reports; these follow it in the log.
            for note in notes {
                tracing::warn!("{note}");
            }
            Err(e)
        }
    }
}

/// The gaps `target` replays: (every gap whose replay mark may refuse it, the gaps it
/// marks). With `--gap`, that gap for both. With `--offsets`, the partition's open gaps
/// overlapping the range, and of those the ones the range covers whole (a range covering
/// part of a gap leaves it unmarked: the rest was not replayed).
fn gaps_of_target(
    store: &Store,
    target: &Target,
) -> Result<(Vec<String>, Vec<String>), ReplayError> {
    if let Some(id) = &target.gap_id {
        return Ok((vec![id.clone()], vec![id.clone()]));
    }
    let open = store
        .open_gaps_overlapping(
            &target.audit,
            &target.tp.topic,
            target.tp.partition,
            target.first,
            target.last,
        )
        .context("reading the partition's gaps")?;
    let covered = open
        .iter()
        .filter(|g| g.first_offset >= target.first && g.last_offset <= target.last)
        .map(|g| g.id.clone())
        .collect();
    Ok((open.into_iter().map(|g| g.id).collect(), covered))
}

/// The store's row for `req` and what came of it.
fn record_of(req: &Request, result: &Result<Replayed, ReplayError>) -> ReplayRecord {
    let t = &req.target;
    let (counts, partial, error) = match result {
        Ok(r) => (r.counts(), r.partial, None),
        Err(e) => ((0, 0, 0, 0), false, Some(format!("{e:#}"))),
    };
    ReplayRecord {
        at: chrono::Utc::now(),
        gap_id: t.gap_id.clone(),
        audit: t.audit.clone(),
        topic: t.tp.topic.clone(),
        partition: t.tp.partition,
        first_offset: t.first,
        last_offset: t.last,
        to_topic: match &req.dest {
            Destination::Topic(topic) => Some(topic.clone()),
            Destination::Sink => None,
        },
        dry_run: req.dry_run,
        forced: req.force,
        written: counts.0,
        present: counts.1,
        filtered: counts.2,
        failed: counts.3,
        partial,
        error,
    }
}
