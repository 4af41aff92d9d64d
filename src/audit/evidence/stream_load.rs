//! The audit's side of the Doris Stream Load evidence (src/evidence/stream_load): starts
//! the poller, reads what it published when a gap is found and when the status is
//! published. Evidence only: nothing here holds or decides a verdict.

use crate::clock::Clock;
use crate::config::AuditConfig;
use crate::evidence::poll::{self as evidence_poll, read as read_view};
#[cfg(test)]
use crate::evidence::stream_load::StreamLoadView;
use crate::evidence::stream_load::history::window;
use crate::evidence::stream_load::{SharedView, StreamLoadSource};
use crate::gap::GapCause;
use crate::ledger::GapRecord;
use crate::status::{StreamLoadEventStatus, StreamLoadStatus};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The shortest time between two polls of the FE, whatever `verify_interval` is: the FE
/// refreshes its list of loads far less often (every
/// `fetch_stream_load_record_interval_second`), and each poll lists up to 200 of them.
const MIN_POLL: Duration = Duration::from_secs(5);

/// Loads `/api/status` lists (the newest).
const STATUS_LOADS: usize = 10;

/// The Doris Stream Load evidence of one audit.
pub(in crate::audit) struct StreamLoadWatch {
    view: SharedView,
    url: String,
    prefix: String,
    /// How late the FE lists a finished load (`stream_load_record_delay`).
    delay_ms: i64,
}

impl StreamLoadWatch {
    /// With `doris_fe_url` and `doris_label_prefix` (validated: both or neither), starts
    /// the poller (every `verify_interval`, at least [`MIN_POLL`], each poll bounded by
    /// `sink.query_timeout`) until `cancel`. A URL the driver refuses is not fatal: the
    /// source shows the error and gaps carry no evidence, as without it.
    pub(in crate::audit) fn start(
        cfg: &AuditConfig,
        clock: &Clock,
        cancel: &CancellationToken,
    ) -> Option<Self> {
        let pl = &cfg.pipeline;
        let (url, prefix) = (pl.doris_fe_url.as_ref()?, pl.doris_label_prefix.as_ref()?);
        let table = cfg.sink.table.as_deref().unwrap_or_default();
        let every = cfg.verify_interval.max(MIN_POLL);
        let (view, url) = evidence_poll::start(
            StreamLoadSource::new(url, prefix, table, cfg.sink.query_timeout),
            &url.without_credentials(),
            every,
            &cfg.name,
            clock,
            cancel,
        );
        Some(Self {
            view,
            url,
            prefix: prefix.clone(),
            delay_ms: millis(pl.stream_load_record_delay),
        })
    }

    /// A watch over a view filled by hand (unit tests: no FE).
    #[cfg(test)]
    pub(in crate::audit) fn fixed(view: StreamLoadView, delay_ms: i64) -> Self {
        Self {
            view: std::sync::Arc::new(std::sync::RwLock::new(view)),
            url: "mysql://fe:9030/example_db".into(),
            prefix: "doris_sink".into(),
            delay_ms,
        }
    }

    /// What the pipeline's loads tell of a new `dropped_in_flight` gap: the loads that left
    /// rows out in its commit step's window. Records the sink filtered were read and
    /// committed past, so only that cause is explained (a skipped record never reached a
    /// load).
    pub(in crate::audit) fn explain(&self, g: &GapRecord) -> Option<String> {
        if g.cause != GapCause::DroppedInFlight {
            return None;
        }
        let c = g.commit?;
        let span = window(c.since_ms, c.from_seen_ms, c.at_ms);
        evidence_poll::with(&self.view, |view| view.history.explain(span))
    }

    /// Whether the loads may explain `g` but were last read before the FE could list the
    /// loads of its window (its step, plus `stream_load_record_delay`).
    pub(in crate::audit) fn behind(&self, g: &GapRecord) -> bool {
        if g.cause != GapCause::DroppedInFlight {
            return false;
        }
        let Some(c) = g.commit else {
            return false;
        };
        let read = evidence_poll::with(&self.view, |view| view.read_as_of_ms);
        read.is_none_or(|r| r < c.at_ms.saturating_add(self.delay_ms))
    }

    /// How long past the usual wait a gap's evidence may wait for this source.
    pub(in crate::audit) fn extra_wait_ms(&self) -> i64 {
        self.delay_ms
    }

    /// The source for `/api/status`.
    pub(in crate::audit) fn status(&self) -> StreamLoadStatus {
        let view = read_view(&self.view);
        let h = &view.history;
        let mut loads: Vec<StreamLoadEventStatus> = h
            .loads()
            .rev()
            .take(STATUS_LOADS)
            .map(StreamLoadEventStatus::of)
            .collect();
        loads.reverse();
        StreamLoadStatus {
            url: self.url.clone(),
            label_prefix: self.prefix.clone(),
            source: view.state,
            checked_at: view.checked_at,
            clock_skew_ms: h.clock().map(|c| c.skew_ms),
            zone_offset_minutes: h.clock().map(|c| c.zone_offset_ms / 60_000),
            listed: h.listed(),
            problem: view.partial,
            loads,
        }
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
