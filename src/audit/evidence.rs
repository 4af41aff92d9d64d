//! A new gap's evidence: what every evidence source read tells of it (Flink's restore,
//! Kafka Connect's task changes, Doris Stream Loads that filtered rows), joined with "; ". Decided once per gap (persist.rs
//! `report_gap`); never part of a verdict.
//!
//! A source's view is as old as its last poll that read it. A gap whose commit step was
//! seen after that (the source was failing, or a poll was slow) would be explained by a
//! history that cannot hold the restart behind it yet (review 27, G7 and F-5): its evidence
//! waits, a round at a time, until every source's view was read after the step, or
//! [`EVIDENCE_WAIT_MS`] passed (then what is known is said: Connect names the time it
//! could not read). The gap itself is reported, stored and counted at once.

use super::Audit;
use crate::gap::GapCause;
use crate::ledger::{GapRecord, PartitionLedger};
use crate::types::{Offset, TopicPartition};
use connect::ConnectWatch;
use flink::FlinkWatch;
use std::collections::BTreeMap;
use stream_load::StreamLoadWatch;

// Each source's watch: started with the audit, read when a gap is found and when the
// status is published.
pub(super) mod connect;
pub(super) mod flink;
pub(super) mod stream_load;

/// Longest a new gap's evidence waits for a source's view to be read past its commit step:
/// a JobManager or Connect worker coming back after a failover answers within seconds; one
/// still down after this says nothing more by waiting.
pub(super) const EVIDENCE_WAIT_MS: i64 = 30_000;
/// Most gaps waiting for evidence at once; past it, a new gap is explained at once with
/// what the views hold (memory stays bounded in an incident opening thousands).
const MAX_WAITING: usize = 4_096;

/// The pipeline's own account of gap causes, from each configured source.
#[derive(Default)]
pub(super) struct EvidenceSources {
    /// `[audits.pipeline] flink_rest_url`: Flink's restarts and restores (flink.rs).
    pub(super) flink: Option<FlinkWatch>,
    /// `[audits.pipeline] connect_url`: Kafka Connect's task changes (connect.rs).
    pub(super) connect: Option<ConnectWatch>,
    /// `[audits.pipeline] doris_fe_url`: Doris Stream Loads that filtered rows
    /// (stream_load.rs).
    pub(super) stream_load: Option<StreamLoadWatch>,
    /// New gaps whose evidence waits for a source's view to be read past their commit
    /// step, and since when (the audit's clock).
    pub(super) waiting: BTreeMap<(TopicPartition, Offset), i64>,
}

impl Audit {
    /// The words of every source that explains `g` now, or `None`: no source, none tells
    /// anything of it, it already carries evidence, or a source's view is older than its
    /// commit step (then it waits: [`Audit::settle_waiting_evidence`]).
    pub(super) fn new_gap_evidence(
        &mut self,
        tp: &TopicPartition,
        g: &GapRecord,
    ) -> Option<String> {
        if g.evidence.is_some() {
            return None;
        }
        if self.evidence_behind(g) && self.evidence.waiting.len() < MAX_WAITING {
            let now = self.io.clock.now_ms();
            self.evidence
                .waiting
                .entry((tp.clone(), g.first))
                .or_insert(now);
            return None;
        }
        self.evidence_words(g)
    }

    /// Gives each gap waiting for evidence its words once every source's view was read past
    /// its commit step, or it waited [`EVIDENCE_WAIT_MS`]; stored with the round's write.
    pub(super) fn settle_waiting_evidence(&mut self) {
        if self.evidence.waiting.is_empty() {
            return;
        }
        let now = self.io.clock.now_ms();
        let waiting: Vec<((TopicPartition, Offset), i64)> = self
            .evidence
            .waiting
            .iter()
            .map(|(k, since)| (k.clone(), *since))
            .collect();
        for ((tp, first), since) in waiting {
            // Gone (confirmed, split at another offset, handed over): nothing to explain.
            let Some(g) = self
                .parts
                .get(&tp)
                .and_then(|p| p.ledger.gap(first))
                .cloned()
            else {
                self.evidence.waiting.remove(&(tp, first));
                continue;
            };
            if g.evidence.is_some() {
                self.evidence.waiting.remove(&(tp, first));
                continue;
            }
            if self.evidence_behind(&g) && now - since < self.evidence_wait_ms() {
                continue;
            }
            self.evidence.waiting.remove(&(tp.clone(), first));
            let Some(words) = self.evidence_words(&g) else {
                continue;
            };
            if let Some(p) = self.parts.get_mut(&tp) {
                p.ledger.set_gap_evidence(first, words.clone());
            }
            let gap = self.to_gap(
                &tp,
                &GapRecord {
                    evidence: Some(words),
                    ..g
                },
            );
            if let Some(e) = gap.evidence_phrase() {
                tracing::info!(audit = %gap.audit, gap = %gap.id, "gap {}: {e}", gap.id);
            }
            self.persisting.writes.gaps.insert(gap.id.clone(), gap);
        }
    }

    /// Queues the recent gaps of a ledger restored at assignment that a source may still
    /// explain: a process stopped, or a partition handed over, while a gap's evidence
    /// waited would otherwise leave it without words for good (review 28, R28-5; which gaps
    /// wait is not stored). Their wait counts from when they were found.
    pub(super) fn requeue_unexplained(&mut self, tp: &TopicPartition, ledger: &PartitionLedger) {
        if self.evidence.flink.is_none()
            && self.evidence.connect.is_none()
            && self.evidence.stream_load.is_none()
        {
            return;
        }
        let now = self.io.clock.now_ms();
        let wait = self.evidence_wait_ms();
        for g in ledger.gaps() {
            if self.evidence.waiting.len() >= MAX_WAITING {
                break;
            }
            if g.evidence.is_none()
                && matches!(
                    g.cause,
                    GapCause::SkippedByRestart | GapCause::DroppedInFlight
                )
                && now.saturating_sub(g.detected_ms) < wait
            {
                // Found by another instance (a handover), on its clock: one ahead of this
                // one must not stretch the wait past [`Self::evidence_wait_ms`] from now
                // (review 28b, R28b-5).
                self.evidence
                    .waiting
                    .entry((tp.clone(), g.first))
                    .or_insert(g.detected_ms.min(now));
            }
        }
    }

    /// Whether a source that may explain `g` has a view read before `g`'s commit step
    /// (Stream Load: before the FE could list the loads of its window).
    fn evidence_behind(&self, g: &GapRecord) -> bool {
        self.evidence.flink.as_ref().is_some_and(|f| f.behind(g))
            || self.evidence.connect.as_ref().is_some_and(|c| c.behind(g))
            || self
                .evidence
                .stream_load
                .as_ref()
                .is_some_and(|s| s.behind(g))
    }

    /// Longest a gap's evidence waits: [`EVIDENCE_WAIT_MS`], and with Stream Load evidence
    /// as long again as the FE takes to list a finished load.
    fn evidence_wait_ms(&self) -> i64 {
        EVIDENCE_WAIT_MS.saturating_add(
            self.evidence
                .stream_load
                .as_ref()
                .map_or(0, |s| s.extra_wait_ms()),
        )
    }

    fn evidence_words(&self, g: &GapRecord) -> Option<String> {
        let words: Vec<String> = [
            self.evidence.flink.as_ref().and_then(|f| f.explain(g)),
            self.evidence.connect.as_ref().and_then(|c| c.explain(g)),
            self.evidence
                .stream_load
                .as_ref()
                .and_then(|s| s.explain(g)),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!words.is_empty()).then(|| words.join("; "))
    }
}
