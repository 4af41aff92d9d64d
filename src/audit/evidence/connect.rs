//! The audit's side of the Kafka Connect evidence (src/evidence/connect): starts the
//! poller, reads what it published when a gap is found and when the status is published.
//! Evidence only: nothing here holds or decides a verdict.

use crate::clock::Clock;
use crate::config::AuditConfig;
#[cfg(test)]
use crate::evidence::connect::ConnectView;
use crate::evidence::connect::{ConnectSource, SharedView};
use crate::evidence::poll::{self as evidence_poll, read as read_view};
use crate::gap::GapCause;
use crate::ledger::GapRecord;
use crate::status::{ConnectEventStatus, ConnectStatus, ConnectTaskStatus};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The shortest time between two polls of the Connect REST API, whatever
/// `verify_interval` is.
const MIN_POLL: Duration = Duration::from_secs(1);

/// Changes `/api/status` lists (the newest).
const STATUS_EVENTS: usize = 10;

/// The Kafka Connect evidence of one audit.
pub(in crate::audit) struct ConnectWatch {
    view: SharedView,
    url: String,
    connector: String,
    /// Between two polls: how late a poll may see a change.
    poll_ms: i64,
}

impl ConnectWatch {
    /// With `connect_url` (validated: with `connect_connector`), starts the poller (every
    /// `verify_interval`, each request bounded by `sink.query_timeout`, changes placed on
    /// the audit's `clock`) until `cancel`. A URL the client refuses is not fatal: the
    /// source shows the error and gaps carry no evidence, as without it.
    pub(in crate::audit) fn start(
        cfg: &AuditConfig,
        clock: &Clock,
        cancel: &CancellationToken,
    ) -> Option<Self> {
        let (url, connector) = (
            cfg.pipeline.connect_url.as_ref()?,
            cfg.pipeline.connect_connector.as_ref()?,
        );
        let every = cfg.verify_interval.max(MIN_POLL);
        let (view, url) = evidence_poll::start(
            ConnectSource::new(url, connector, cfg.sink.query_timeout),
            &url.without_credentials(),
            every,
            &cfg.name,
            clock,
            cancel,
        );
        Some(Self {
            view,
            url,
            connector: connector.clone(),
            poll_ms: i64::try_from(every.as_millis()).unwrap_or(i64::MAX),
        })
    }

    /// A watch over a view filled by hand (unit tests: no Connect worker).
    #[cfg(test)]
    pub(in crate::audit) fn fixed(view: ConnectView, poll_ms: i64) -> Self {
        Self {
            view: std::sync::Arc::new(std::sync::RwLock::new(view)),
            url: "http://connect:8083/".into(),
            connector: "es-sink".into(),
            poll_ms,
        }
    }

    /// What the connector's history tells of a new gap: for `skipped_by_restart` and
    /// `dropped_in_flight`, the changes seen in its commit step's window and whether the
    /// connector was STOPPED between the commits (offsets set by an operator); for the
    /// latter, and for the former when nothing else explains it, whether the connector
    /// skips records silently.
    pub(in crate::audit) fn explain(&self, g: &GapRecord) -> Option<String> {
        let in_flight = match g.cause {
            GapCause::SkippedByRestart => false,
            GapCause::DroppedInFlight => true,
            _ => return None,
        };
        let words = |in_flight| {
            evidence_poll::with(&self.view, |view| match g.commit {
                Some(c) => view.history.explain_step(
                    &self.connector,
                    c.since_ms,
                    c.at_ms,
                    self.poll_ms,
                    in_flight,
                ),
                None => view.history.explain(&self.connector, None, in_flight),
            })
        };
        // A jump that begins at the gap is also what a record skipped at the start of a
        // batch looks like (the ledger's heuristic limit): on a real worker a record the
        // converter failed with errors.tolerance=all, right after a commit, was called
        // skipped_by_restart with no evidence. With no restart seen, the connector's
        // tolerance is the explanation.
        match (words(in_flight), g.cause) {
            (None, GapCause::SkippedByRestart) => words(true),
            (w, _) => w,
        }
    }

    /// Whether the connector's history may explain `g` (as [`ConnectWatch::explain`] would
    /// read it) but was last read before its commit step was seen (a read sent after it
    /// saw every change that may have happened in its window), or, without a step, never.
    pub(in crate::audit) fn behind(&self, g: &GapRecord) -> bool {
        if !matches!(
            g.cause,
            GapCause::SkippedByRestart | GapCause::DroppedInFlight
        ) {
            return false;
        }
        let read = evidence_poll::with(&self.view, |view| view.read_as_of_ms);
        match g.commit {
            Some(c) => read.is_none_or(|r| r < c.at_ms),
            None => read.is_none(),
        }
    }

    /// The source for `/api/status`.
    pub(in crate::audit) fn status(&self) -> ConnectStatus {
        let view = read_view(&self.view);
        let h = &view.history;
        let errors = h.error_handling();
        let mut events: Vec<ConnectEventStatus> = h
            .events()
            .rev()
            .take(STATUS_EVENTS)
            .map(ConnectEventStatus::of)
            .collect();
        events.reverse();
        ConnectStatus {
            url: self.url.clone(),
            connector: self.connector.clone(),
            source: view.state,
            checked_at: view.checked_at,
            connector_state: h.connector().map(|c| c.state.clone()),
            tasks: h
                .tasks()
                .iter()
                .map(|(&id, t)| ConnectTaskStatus {
                    id,
                    state: t.state.clone(),
                    worker_id: t.worker_id.clone(),
                })
                .collect(),
            errors_tolerance: errors.map(|e| e.tolerance.clone()),
            dead_letter_queue: errors.map(|e| e.dead_letter_queue),
            config_problem: view.partial,
            events,
        }
    }
}
