//! The audit's side of the Flink evidence (src/evidence/flink): starts the poller, reads
//! what it published when a gap is found and when the status is published. Evidence only:
//! nothing here holds or decides a verdict.

use crate::clock::Clock;
use crate::config::AuditConfig;
#[cfg(test)]
use crate::evidence::flink::FlinkView;
use crate::evidence::flink::{FlinkSource, Restore, SharedView};
use crate::evidence::poll::{self as evidence_poll, read as read_view};
use crate::gap::GapCause;
use crate::ledger::{CommitStep, GapRecord};
use crate::status::{FlinkRunStatus, FlinkStatus};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The shortest time between two polls of the JobManager, whatever `verify_interval` is.
const MIN_POLL: Duration = Duration::from_secs(1);

/// The Flink evidence of one audit.
pub(in crate::audit) struct FlinkWatch {
    view: SharedView,
    url: String,
    job: String,
}

impl FlinkWatch {
    /// With `flink_rest_url` and `flink_job` set (validated: both or neither), starts the
    /// poller (every `verify_interval`, each request bounded by `sink.query_timeout`) until
    /// `cancel`. A URL the client refuses is not fatal: the source shows the error and gaps
    /// carry no evidence, as without it.
    pub(in crate::audit) fn start(
        cfg: &AuditConfig,
        clock: &Clock,
        cancel: &CancellationToken,
    ) -> Option<Self> {
        let (url, job) = (
            cfg.pipeline.flink_rest_url.as_ref()?,
            cfg.pipeline.flink_job.as_ref()?,
        );
        let (view, url) = evidence_poll::start(
            FlinkSource::new(url, job, cfg.sink.query_timeout),
            &url.without_credentials(),
            cfg.verify_interval.max(MIN_POLL),
            &cfg.name,
            clock,
            cancel,
        );
        Some(Self {
            view,
            url,
            job: job.clone(),
        })
    }

    /// A watch over a view filled by hand (unit tests: no JobManager).
    #[cfg(test)]
    pub(in crate::audit) fn fixed(view: FlinkView) -> Self {
        Self {
            view: std::sync::Arc::new(std::sync::RwLock::new(view)),
            url: "http://jobmanager:8081/".into(),
            job: "FlinkSQLFromKafka2Doris".into(),
        }
    }

    /// What the job's runs tell of a new gap: only for `skipped_by_restart`, whose commit
    /// step says in which window the pipeline restarted.
    pub(in crate::audit) fn explain(&self, g: &GapRecord) -> Option<String> {
        if g.cause != GapCause::SkippedByRestart || g.evidence.is_some() {
            return None;
        }
        let CommitStep {
            at_ms,
            since_ms,
            from_seen_ms,
            ..
        } = g.commit?;
        evidence_poll::with(&self.view, |view| {
            view.history
                .explain(since_ms.unwrap_or(at_ms), from_seen_ms, at_ms)
                .map(|e| e.text())
        })
    }

    /// Whether the job's runs may explain `g` (as [`FlinkWatch::explain`] would read it) but
    /// were last read before its commit step was seen: the restart behind it may not be in
    /// them yet.
    pub(in crate::audit) fn behind(&self, g: &GapRecord) -> bool {
        match g.commit {
            Some(c) if g.cause == GapCause::SkippedByRestart && g.evidence.is_none() => {
                evidence_poll::with(&self.view, |view| {
                    view.read_as_of_ms.is_none_or(|r| r < c.at_ms)
                    // A live run whose restore is not known yet (its checkpoint statistics
                    // not read, or not showing its first checkpoint): a later poll tells
                    // (review 28, R28-9).
                    || view
                        .history
                        .explain(c.since_ms.unwrap_or(c.at_ms), c.from_seen_ms, c.at_ms)
                        .is_some_and(|e| e.run.is_live() && e.run.restore == Restore::Unknown)
                })
            }
            _ => false,
        }
    }

    /// The source for `/api/status`.
    pub(in crate::audit) fn status(&self) -> FlinkStatus {
        let view = read_view(&self.view);
        FlinkStatus {
            url: self.url.clone(),
            job: self.job.clone(),
            source: view.state,
            checked_at: view.checked_at,
            clock_skew_ms: view.history.skew_ms(),
            run: view.history.current().map(FlinkRunStatus::of),
            previous_run: view.history.previous().map(FlinkRunStatus::of),
        }
    }
}
