//! The audit's side of the Flink evidence (src/flink_evidence): starts the poller, reads
//! what it published when a gap is found and when the status is published. Evidence only:
//! nothing here holds or decides a verdict.

use crate::config::AuditConfig;
use crate::flink_evidence::poller::{self, read_view};
use crate::flink_evidence::{FlinkSource, FlinkView, SharedView, SourceState};
use crate::gap::GapCause;
use crate::ledger::{CommitStep, GapRecord};
use crate::status::{FlinkRunStatus, FlinkStatus};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The URL as `/api/status` shows it: without its query and fragment, which the poller
/// never sends either (review 37, F8: `?access_token=…` was shown), even when the URL was
/// refused.
fn shown_url(without_credentials: &str) -> String {
    match url::Url::parse(without_credentials) {
        Ok(mut u) => {
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => without_credentials
            .split(['?', '#'])
            .next()
            .unwrap_or_default()
            .to_owned(),
    }
}

/// The shortest time between two polls of the JobManager, whatever `verify_interval` is.
const MIN_POLL: Duration = Duration::from_secs(1);

/// The Flink evidence of one audit.
pub(super) struct FlinkWatch {
    view: SharedView,
    url: String,
    job: String,
}

impl FlinkWatch {
    /// With `flink_rest_url` and `flink_job` set (validated: both or neither), starts the
    /// poller (every `verify_interval`, each request bounded by `sink.query_timeout`) until
    /// `cancel`. A URL the client refuses is not fatal: the source shows the error and gaps
    /// carry no evidence, as without it.
    pub(super) fn start(cfg: &AuditConfig, cancel: &CancellationToken) -> Option<Self> {
        let (url, job) = (
            cfg.pipeline.flink_rest_url.as_ref()?,
            cfg.pipeline.flink_job.as_ref()?,
        );
        let view: SharedView = Arc::new(RwLock::new(FlinkView::default()));
        let shown = shown_url(&url.without_credentials());
        match FlinkSource::new(url, job, cfg.sink.query_timeout) {
            Ok(source) => {
                tracing::info!(audit = %cfg.name, job = %job, url = %source.shown_url(),
                    "reading Flink restore evidence for gap causes");
                tokio::spawn(poller::run(
                    source,
                    view.clone(),
                    cfg.verify_interval.max(MIN_POLL),
                    cfg.name.clone(),
                    cancel.child_token(),
                ));
            }
            Err(e) => {
                tracing::warn!(audit = %cfg.name, job = %job, error = %e,
                    "cannot read Flink evidence; gaps carry none (verdicts are not affected)");
                view.write().unwrap_or_else(|p| p.into_inner()).state =
                    SourceState::Error(e.to_string());
            }
        }
        Some(Self {
            view,
            url: shown,
            job: job.clone(),
        })
    }

    /// A watch over a view filled by hand (unit tests: no JobManager).
    #[cfg(test)]
    pub(super) fn fixed(view: FlinkView) -> Self {
        Self {
            view: Arc::new(RwLock::new(view)),
            url: "http://jobmanager:8081/".into(),
            job: "FlinkSQLFromKafka2Doris".into(),
        }
    }

    /// What the job's runs tell of a new gap: only for `skipped_by_restart`, whose commit
    /// step says in which window the pipeline restarted.
    pub(super) fn explain(&self, g: &GapRecord) -> Option<String> {
        if g.cause != GapCause::SkippedByRestart || g.evidence.is_some() {
            return None;
        }
        let CommitStep {
            at_ms,
            since_ms,
            from_seen_ms,
            ..
        } = g.commit?;
        let view = read_view(&self.view);
        view.history
            .explain(since_ms.unwrap_or(at_ms), from_seen_ms, at_ms)
            .map(|e| e.text())
    }

    /// The source for `/api/status`.
    pub(super) fn status(&self) -> FlinkStatus {
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
