//! Where an assigned partition starts: the store, the auditor group's commit, or
//! `kafka.start`, and whether Kafka deleted records below that point.

use super::KafkaView;
use super::divergence::{Divergence, diverged};
use crate::config::StartPosition;
use crate::types::{Offset, TopicPartition};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// (log start, log end) of a partition.
type LogRange = (Offset, Offset);

/// librdkafka's logical offsets, for a start that could not be resolved (see
/// [`PartitionLedger::is_anchored`]).
const LOGICAL_END: Offset = -1;
const LOGICAL_BEGINNING: Offset = -2;

/// Where a partition starts and whether Kafka deleted records below that point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Start {
    pub(super) resume: Offset,
    pub(super) deleted: Option<(Offset, Offset)>,
}

/// A partition's start with what was found of its log under the position it resumes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Resolved {
    pub(super) tp: TopicPartition,
    pub(super) start: Start,
    pub(super) log: Option<LogRange>,
    /// The topic was recreated under the position (its id changed): `start.resume` is
    /// where this says, and the offset is the position on the old log.
    pub(super) diverged: Option<(Divergence, Offset)>,
}

/// The topic ids a start compares: as stored with each partition's progress, and as the
/// brokers give them now (by topic). Absent: unknown.
#[derive(Debug, Clone, Default)]
pub(super) struct TopicIds {
    pub(super) stored: HashMap<TopicPartition, String>,
    pub(super) now: HashMap<String, String>,
}

pub(super) fn resolve_starts(
    lookup: &dyn KafkaView,
    tps: &[TopicPartition],
    stored: &HashMap<TopicPartition, Offset>,
    ids: &TopicIds,
    start: StartPosition,
) -> Vec<Resolved> {
    let committed = match lookup.committed(tps) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the auditor group's committed offsets");
            Default::default()
        }
    };
    // Each partition's lookups (up to 3 watermark reads and 3 time lookups, seconds each
    // when the broker is slow) run in parallel: this runs while the consumer waits in its
    // rebalance callback, and one after another they took minutes for a large assignment.
    const PARALLEL: usize = 32;
    let mut out = Vec::with_capacity(tps.len());
    for chunk in tps.chunks(PARALLEL) {
        let resolved: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|tp| {
                    let committed = &committed;
                    scope.spawn(move || resolve_start(lookup, tp, stored, ids, committed, start))
                })
                .collect();
            handles.into_iter().map(|h| h.join()).collect()
        });
        for (tp, r) in chunk.iter().zip(resolved) {
            match r {
                Ok(r) => out.push(r),
                // A lookup thread that panicked: the partition starts as if nothing could be
                // read (its audit anchors on the first record), never at a guessed offset.
                Err(_) => {
                    tracing::error!(%tp, "start offset lookup panicked: starting at the log end as the consumer finds it");
                    out.push(Resolved {
                        tp: tp.clone(),
                        start: Start {
                            resume: LOGICAL_END,
                            deleted: None,
                        },
                        log: None,
                        diverged: None,
                    });
                }
            }
        }
    }
    out
}

/// Where one assigned partition resumes ([`resolve_starts`]).
fn resolve_start(
    lookup: &dyn KafkaView,
    tp: &TopicPartition,
    stored: &HashMap<TopicPartition, Offset>,
    ids: &TopicIds,
    committed: &BTreeMap<TopicPartition, Option<Offset>>,
    start: StartPosition,
) -> Resolved {
    {
        // Retried: without watermarks a `latest` start would fall back to offset 0 and audit
        // history the pipeline may have expired from the sink long ago.
        let log = (0..3).find_map(|attempt| {
            if attempt > 0 {
                std::thread::sleep(Duration::from_millis(500));
            }
            lookup
                .watermarks(tp)
                .inspect_err(|e| tracing::warn!(%tp, error = %e, attempt, "cannot read watermarks"))
                .ok()
        });
        // A negative stored offset: the partition was assigned before but never anchored.
        let stored_at = stored.get(tp).copied().filter(|s| *s >= 0);
        let resumed = match (stored_at, committed.get(tp).copied().flatten()) {
            // The store is never behind the group commit it made itself (store, then
            // commit): a commit ahead of it comes from another owner that left no handover,
            // an operator's reset, or a store restored from a backup. Records below the
            // commit were decided (and counted) by whoever committed it: not again here.
            (Some(s), Some(c)) if c > s => {
                tracing::warn!(%tp, stored = s, committed = c,
                    "the auditor group's commit is ahead of the local store (another owner without handover, a reset, or a restored backup): resuming at the commit; nothing below it is decided again");
                Some(c)
            }
            (Some(s), _) => Some(s),
            (None, c) => c,
        };
        // A partition with no position while others of its topic have one was added after
        // the audit started following the topic: all of it is new, so all of it is audited
        // (kafka.start applies to the topic's first start, not to partitions added later).
        let added_later = resumed.is_none()
            && !stored.contains_key(tp)
            && stored
                .keys()
                .chain(
                    committed
                        .iter()
                        .filter(|(_, c)| c.is_some())
                        .map(|(k, _)| k),
                )
                .any(|k| k.topic == tp.topic && k.partition != tp.partition);
        // A new topic under the old name (issue 34 item 7, `divergence.rs`): the id stored
        // with the progress is the log's the position was taken on; a position taken from
        // the group commit alone has none (unknown). A position merely beyond the log end is
        // left to the fetch: the high watermark read here can lag the log end for a moment
        // after a leader change, while an out-of-range fetch is the broker's own word that
        // the log no longer reaches it (`Audit::out_of_range` then cuts the ledger there).
        let known = stored_at.and(ids.stored.get(tp)).map(String::as_str);
        let now = ids.now.get(&tp.topic).map(String::as_str);
        let split = match (resumed, log) {
            (Some(r), Some(range)) => diverged(r, r, range, known, now)
                .filter(|d| matches!(d, Divergence::Recreated { .. }))
                .map(|d| (d, r)),
            _ => None,
        };
        if let Some((d, _)) = &split {
            return Resolved {
                tp: tp.clone(),
                start: Start {
                    resume: d.resume(),
                    deleted: None,
                },
                log,
                diverged: split.clone(),
            };
        }
        let s = match (resumed, log) {
            (Some(r), Some((low, _))) if r < low => Start {
                resume: low,
                deleted: Some((r, low - 1)),
            },
            (Some(r), _) => Start {
                resume: r,
                deleted: None,
            },
            // Without the watermarks no start can be resolved to an offset: guessing 0 would
            // audit history the pipeline may have expired from the sink long ago (false
            // loss). The consumer starts at the logical end (or beginning) instead, and the
            // ledger anchors on the first record it reads.
            (None, None) => {
                let (resume, what) = if added_later || start == StartPosition::Earliest {
                    (LOGICAL_BEGINNING, "log start")
                } else {
                    (LOGICAL_END, "log end")
                };
                tracing::error!(%tp, "cannot read the watermarks of {tp}: starting at its {what} as the consumer finds it; its audit begins with the first record read");
                Start {
                    resume,
                    deleted: None,
                }
            }
            (None, Some((low, high))) => {
                // A failed time lookup is retried, then said loudly: never a silent `latest`.
                let at = |ms: i64| {
                    let found = (0..3).find_map(|attempt| {
                        if attempt > 0 {
                            std::thread::sleep(Duration::from_millis(500));
                        }
                        lookup
                            .offset_for_time(tp, ms)
                            .inspect_err(|e| tracing::warn!(%tp, error = %e, attempt, "cannot look up the offset for the start time"))
                            .ok()
                    });
                    match found {
                        Some(o) => o.unwrap_or(high),
                        None => {
                            tracing::error!(%tp, log_end = high, "the offset for kafka.start's time cannot be looked up: starting at the log end; records before it are not audited");
                            high
                        }
                    }
                };
                let resume = match start {
                    _ if added_later => {
                        tracing::info!(%tp, log_start = low,
                            "partition added after the audit started: reading it from its log start");
                        low
                    }
                    StartPosition::Latest => high,
                    StartPosition::Earliest => low,
                    StartPosition::Time(t) => at(t.timestamp_millis()),
                    StartPosition::Ago(d) => at(crate::clock::now_ms() - d.as_millis() as i64),
                };
                Start {
                    resume,
                    deleted: None,
                }
            }
        };
        Resolved {
            tp: tp.clone(),
            start: s,
            log,
            diverged: None,
        }
    }
}
