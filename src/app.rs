//! Wiring for `gap-auditor run`: sinks from config, the store, the HTTP server and one audit
//! task per `[[audits]]`, all under one cancellation token.

use crate::audit::{self, AuditDeps};
use crate::config::{AuditConfig, Config, SinkKind};
use crate::gap::{Offset, TopicPartition};
use crate::http::{self, HttpState};
use crate::ledger::OffsetRun;
use crate::metrics::Metrics;
use crate::record::Key;
use crate::sink::elasticsearch::{ElasticsearchSink, EsAuth, EsTarget};
use crate::sink::memory::MemorySink;
use crate::sink::mysql::{MysqlSink, MysqlTarget};
use crate::sink::tls::TlsSettings;
use crate::sink::{RangeCount, SinkError, Verifier};
use crate::status::StatusBoard;
use crate::store::Store;
use anyhow::Context;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Any sink the daemon can verify against.
pub enum AnySink {
    /// Doris or MySQL over the MySQL protocol.
    Mysql(MysqlSink),
    /// The in-process table (demo and tests).
    Memory(Arc<MemorySink>),
    /// Elasticsearch (or an API-compatible server) over HTTP.
    Elasticsearch(ElasticsearchSink),
}

impl Verifier for AnySink {
    fn kind(&self) -> &'static str {
        match self {
            AnySink::Mysql(s) => s.kind(),
            AnySink::Memory(s) => s.kind(),
            AnySink::Elasticsearch(s) => s.kind(),
        }
    }

    async fn ping(&self) -> Result<(), SinkError> {
        match self {
            AnySink::Mysql(s) => s.ping().await,
            AnySink::Memory(s) => s.ping().await,
            AnySink::Elasticsearch(s) => s.ping().await,
        }
    }

    async fn count_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<RangeCount, SinkError> {
        match self {
            AnySink::Mysql(s) => s.count_offsets(tp, runs).await,
            AnySink::Memory(s) => s.count_offsets(tp, runs).await,
            AnySink::Elasticsearch(s) => s.count_offsets(tp, runs).await,
        }
    }

    async fn list_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<Vec<(Offset, u64)>, SinkError> {
        match self {
            AnySink::Mysql(s) => s.list_offsets(tp, runs).await,
            AnySink::Memory(s) => s.list_offsets(tp, runs).await,
            AnySink::Elasticsearch(s) => s.list_offsets(tp, runs).await,
        }
    }

    async fn count_keys(&self, keys: &[&Key]) -> Result<Vec<u64>, SinkError> {
        match self {
            AnySink::Mysql(s) => s.count_keys(keys).await,
            AnySink::Memory(s) => s.count_keys(keys).await,
            AnySink::Elasticsearch(s) => s.count_keys(keys).await,
        }
    }

    fn max_key_rows(&self) -> usize {
        match self {
            AnySink::Mysql(s) => s.max_key_rows(),
            AnySink::Memory(s) => s.max_key_rows(),
            AnySink::Elasticsearch(s) => s.max_key_rows(),
        }
    }

    fn parallelism(&self) -> usize {
        match self {
            AnySink::Mysql(s) => s.parallelism(),
            AnySink::Memory(s) => s.parallelism(),
            AnySink::Elasticsearch(s) => s.parallelism(),
        }
    }

    async fn find_ids(&self, ids: &[&str]) -> Result<Vec<bool>, SinkError> {
        match self {
            AnySink::Mysql(s) => s.find_ids(ids).await,
            AnySink::Memory(s) => s.find_ids(ids).await,
            AnySink::Elasticsearch(s) => s.find_ids(ids).await,
        }
    }
}

/// Builds the sink of an audit. Connects lazily: an unreachable sink is "unknown" at run
/// time, not a startup failure.
pub fn build_sink(audit: &AuditConfig) -> anyhow::Result<AnySink> {
    let s = &audit.sink;
    match s.kind {
        SinkKind::Doris | SinkKind::Mysql => {
            let target = MysqlTarget {
                table: s.table.clone().unwrap_or_default(),
                partition_column: audit.matching.partition_column.clone(),
                offset_column: audit.matching.offset_column.clone(),
                topic_column: audit.matching.topic_column.clone(),
                key_columns: audit.matching.sink_columns().to_vec(),
            };
            let kind = if s.kind == SinkKind::Doris {
                "doris"
            } else {
                "mysql"
            };
            let password = s.password.as_ref().map(|p| p.expose().to_string());
            let sink = MysqlSink::new(
                s.url.expose(),
                s.username.as_deref(),
                password.as_deref(),
                target,
                s.query_timeout,
                kind,
                &TlsSettings::from_config(s),
            )
            .map_err(|e| anyhow::anyhow!("audits.{}.sink: {e}", audit.name))?;
            Ok(AnySink::Mysql(sink))
        }
        SinkKind::Elasticsearch => {
            let target = EsTarget {
                index: s.index.clone().unwrap_or_default(),
                partition_field: audit.matching.partition_column.clone(),
                offset_field: audit.matching.offset_column.clone(),
                topic_field: audit.matching.topic_column.clone(),
                key_fields: audit.matching.sink_columns().to_vec(),
            };
            let auth = match (&s.api_key, s.effective_username(), s.effective_password()) {
                (Some(k), _, _) => EsAuth::ApiKey(k.expose().to_string()),
                (None, Some(username), password) => EsAuth::Basic {
                    username,
                    password: password.map(|p| p.expose().to_string()).unwrap_or_default(),
                },
                (None, None, Some(_)) => anyhow::bail!(
                    "audits.{}.sink.password: a password needs a username (sink.username)",
                    audit.name
                ),
                (None, None, None) => EsAuth::None,
            };
            let ca = match &s.ca_file {
                Some(path) => Some(std::fs::read(path).with_context(|| {
                    format!(
                        "audits.{}.sink.ca_file: cannot read {}",
                        audit.name,
                        path.display()
                    )
                })?),
                None => None,
            };
            let sink = ElasticsearchSink::new(
                &s.url.without_credentials(),
                auth,
                ca.as_deref(),
                target,
                s.query_timeout,
            )
            .map_err(|e| anyhow::anyhow!("audits.{}.sink: {e}", audit.name))?;
            Ok(AnySink::Elasticsearch(sink))
        }
    }
}

/// Runs the daemon until `cancel` fires (SIGINT/SIGTERM), then drains every audit.
pub async fn run(config: Config, cancel: CancellationToken) -> anyhow::Result<()> {
    let store =
        Arc::new(Store::open(&config.state.path).with_context(|| {
            format!("opening the gap store in {}", config.state.path.display())
        })?);
    let metrics = Arc::new(Metrics::new());
    let status = StatusBoard::new();
    let mut sinks = Vec::new();
    for a in &config.audits {
        sinks.push(build_sink(a)?);
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
