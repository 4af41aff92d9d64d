//! Wiring for `gap-auditor run`: sinks from config, the store, the HTTP server and one audit
//! task per `[[audits]]`, all under one cancellation token.

use crate::audit::{self, AuditDeps};
use crate::config::{AuditConfig, Config, Validated};
use crate::http::{self, HttpState};
use crate::metrics::Metrics;
/// Kept for the callers that still import it from here; new code uses [`crate::sink`].
pub use crate::sink::AnySink;
use crate::status::StatusBoard;
use crate::store::Store;
use anyhow::Context;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The sink of one audit for a caller holding only its configuration (tests, tools):
/// the audit is validated (its keys named `audits.{name}`), then built from its spec by
/// [`crate::sink::build_sink`]. The daemon and the commands build from the specs of
/// [`Validated`] instead.
pub fn build_sink(audit: &AuditConfig) -> anyhow::Result<AnySink> {
    let spec = audit.validate(&format!("audits.{}", audit.name))?;
    crate::sink::build_sink(&audit.name, &spec)
}

/// Runs the daemon until `cancel` fires (SIGINT/SIGTERM), then drains every audit.
pub async fn run(config: Validated, cancel: CancellationToken) -> anyhow::Result<()> {
    let (config, specs) = config.into_parts();
    for w in config.warnings() {
        tracing::warn!("{w}");
    }
    let store =
        Arc::new(Store::open(&config.state.path).with_context(|| {
            format!("opening the gap store in {}", config.state.path.display())
        })?);
    let metrics = Arc::new(Metrics::new());
    let status = StatusBoard::new();
    let mut sinks = Vec::new();
    for (a, spec) in config.audits.iter().zip(&specs) {
        sinks.push(crate::sink::build_sink(&a.name, spec)?);
    }
    let listener = tokio::net::TcpListener::bind(config.server.listen)
        .await
        .with_context(|| format!("server.listen: cannot listen on {}", config.server.listen))?;
    tracing::info!(listen = %config.server.listen, "serving /metrics, /healthz, /readyz, /api/gaps, /api/status");
    run_with(config, sinks, store, metrics, status, listener, cancel).await
}

/// Like [`run`], with the parts supplied (tests and the demo).
pub async fn run_with(
    config: Config,
    sinks: Vec<AnySink>,
    store: Arc<Store>,
    metrics: Arc<Metrics>,
    status: StatusBoard,
    listener: tokio::net::TcpListener,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    // Rounds commit to the store and go on; the WAL is copied into the file beside them.
    store
        .checkpoint_in_background()
        .context("starting the gap store's checkpoint thread")?;
    for a in &config.audits {
        metrics.set_audit_info(
            &a.name,
            a.pipeline_group.as_deref(),
            a.sink.kind.as_str(),
            a.matching.strategy.as_str(),
        );
    }
    let http_state = HttpState {
        metrics: metrics.clone(),
        status: status.clone(),
        store: store.clone(),
        api_token: config.server.api_token.clone(),
        forwarding: Arc::new(
            http::forward::Forwarding::new(
                config.kafka.clone(),
                config.state.handover_topic.clone(),
                config.server.advertised_url.clone(),
            )
            .with_peers(&config.server.forward_peers),
        ),
        config: Some(Arc::new(config.clone())),
        dry_runs: Arc::new(tokio::sync::Semaphore::new(1)),
    };
    let http_cancel = cancel.child_token();
    let server = tokio::spawn(http::serve(listener, http_state, http_cancel.clone()));
    let mut tasks = tokio::task::JoinSet::new();
    let count = config.audits.len();
    for (a, sink) in config.audits.iter().zip(sinks) {
        let deps = AuditDeps {
            config: a.clone(),
            kafka: config.kafka.clone(),
            group: a.consumer_group(&config.kafka, count),
            sink,
            store: store.clone(),
            metrics: metrics.clone(),
            status: status.clone(),
            handover_topic: config.state.handover_topic.clone(),
            advertised_url: config.server.advertised_url.clone(),
        };
        let c = cancel.clone();
        let name = a.name.clone();
        tasks.spawn(async move {
            audit::run(deps, c)
                .await
                .with_context(|| format!("audit {name}"))
        });
    }
    let mut result = Ok(());
    while let Some(r) = tasks.join_next().await {
        let r = match r {
            Ok(r) => r,
            Err(e) => Err(anyhow::anyhow!("audit task panicked: {e}")),
        };
        if let Err(e) = r {
            tracing::error!(error = format!("{e:#}"), "audit stopped");
            // One failed audit stops the process: a half-running auditor would look healthy.
            cancel.cancel();
            if result.is_ok() {
                result = Err(e);
            }
        }
    }
    http_cancel.cancel();
    let _ = server.await;
    result
}
