//! The sink table's model, read before the audit reads Kafka (SPEC "The sink's model").
//!
//! key_columns: every key is written the way its sink column stores it
//! ([`crate::key_domain`]) from the moment the record is decoded, so the key columns'
//! types must be known before the first record is: a key read as written and the same key
//! read converted would be two keys of the audit's multiset, one row for both. So the
//! audit waits for the sink to describe them, retrying while it cannot, and reads no
//! record meanwhile (they wait in Kafka; nothing is due, nothing is declared missing).

use crate::config::{AuditConfig, MatchStrategy};
use crate::key_domain::KeyDomain;
use crate::key_semantics::{self, KeySemantics, Learned, SemanticsError};
use crate::sink::{SinkError, Verifier};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How long the audit waits between attempts to read the key columns' types.
const RETRY: Duration = Duration::from_secs(2);

/// The key columns' domain of `config`'s sink, once the sink answers (`None` for the other
/// strategies, for a sink that converts nothing, or when `cancel` fires first). Logged once.
pub(super) async fn learn_key_domain<V: Verifier>(
    sink: &V,
    config: &AuditConfig,
    cancel: &CancellationToken,
) -> Option<KeyDomain> {
    if config.matching.strategy != MatchStrategy::KeyColumns {
        return None;
    }
    let mut warned = false;
    loop {
        match sink.key_domain().await {
            Ok(domain) => {
                if let Some(d) = &domain {
                    tracing::info!(
                        audit = %config.name,
                        key_columns = %d.describe(),
                        "sink key columns: each key value is compared as its column stores it"
                    );
                }
                return domain;
            }
            Err(e) => {
                // Once at WARN, then quieter: a sink down at start is an outage the
                // health checks report; the audit only waits for it.
                if warned {
                    tracing::debug!(audit = %config.name, error = %e, "still waiting for the sink's key column types");
                } else {
                    tracing::warn!(
                        audit = %config.name,
                        error = %e,
                        "cannot read the sink's key column types: records are read from \
                         Kafka once it answers (they wait there; nothing is declared missing)"
                    );
                    warned = true;
                }
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return None,
            _ = tokio::time::sleep(RETRY) => {}
        }
    }
}

/// Why the key semantics could not be settled.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The sink did not answer (run retries; check and replay stop).
    #[error("cannot read the sink table's key model: {0}")]
    Sink(#[from] SinkError),
    /// The configured semantics and the table disagree, or `auto` cannot decide: refused.
    #[error(transparent)]
    Refused(#[from] SemanticsError),
}

/// The key semantics `config` audits with: `match.key_semantics` reconciled with what the
/// sink says of its table (one decision for `run`, `check` and `replay`, guarantee 9).
/// Logged once; `multiset` for the other strategies.
pub async fn key_semantics<V: Verifier>(
    sink: &V,
    config: &AuditConfig,
) -> Result<KeySemantics, ModelError> {
    if config.matching.strategy != MatchStrategy::KeyColumns {
        return Ok(KeySemantics::Multiset);
    }
    let configured = config.matching.key_semantics;
    let learned = sink.key_model().await?;
    let semantics = match &learned {
        None => key_semantics::resolve(configured, &Learned::NoTable)?,
        Some(l) => key_semantics::resolve(configured, l)?,
    };
    sink.audit_semantics(semantics);
    match &learned {
        Some(Learned::Known(t)) => tracing::info!(
            audit = %config.name,
            key_semantics = %semantics,
            table = %t.reason,
            "sink key semantics"
        ),
        Some(Learned::NoTable) => tracing::warn!(
            audit = %config.name,
            key_semantics = %semantics,
            configured = %configured,
            "the sink table does not exist yet: audited with these key semantics until \
             restart (an upsert table read as multiset reports records sharing a key as lost)"
        ),
        _ => tracing::info!(
            audit = %config.name,
            key_semantics = %semantics,
            "sink key semantics (as configured: the sink does not describe its table)"
        ),
    }
    Ok(semantics)
}

/// [`key_semantics`] for the daemon: waits while the sink does not answer (nothing is read
/// meanwhile, as for the key columns' types); a refusal ends the audit. `None` when
/// `cancel` fires first.
pub(super) async fn learn_key_semantics<V: Verifier>(
    sink: &V,
    config: &AuditConfig,
    cancel: &CancellationToken,
) -> Result<Option<KeySemantics>, SemanticsError> {
    let mut warned = false;
    loop {
        match key_semantics(sink, config).await {
            Ok(s) => return Ok(Some(s)),
            Err(ModelError::Refused(e)) => return Err(e),
            // Once at WARN, as for the key columns' types: the sink being down is an
            // outage the health checks report.
            Err(ModelError::Sink(e)) if warned => {
                tracing::debug!(audit = %config.name, error = %e, "still waiting for the sink's key model");
            }
            Err(ModelError::Sink(e)) => {
                tracing::warn!(
                    audit = %config.name,
                    error = %e,
                    "cannot read the sink table's key model: records are read from Kafka \
                     once it answers (they wait there; nothing is declared missing)"
                );
                warned = true;
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(None),
            _ = tokio::time::sleep(RETRY) => {}
        }
    }
}

/// key_columns: the key column due keys are read by time on ([`crate::time_scan`]), or
/// `None` (counted one by one), asked of the sink once; the decision and its reason are
/// logged once (the one decision of `run` and `check`). A sink that does not answer leaves
/// the keys to be counted one by one: the same verdicts, at the old cost.
pub async fn time_column<V: Verifier>(
    sink: &V,
    config: &AuditConfig,
) -> Option<crate::time_scan::TimeColumn> {
    if config.matching.strategy != MatchStrategy::KeyColumns {
        return None;
    }
    match sink.time_scan().await {
        Ok(Ok(column)) => {
            tracing::info!(
                audit = %config.name,
                column = %column.name,
                "due keys are counted from one read of the rows of their seconds (the \
                 table keeps its rows in the order of this column)"
            );
            Some(column)
        }
        Ok(Err(why)) => {
            tracing::info!(audit = %config.name, reason = %why, "due keys are counted one by one");
            None
        }
        Err(e) => {
            tracing::warn!(
                audit = %config.name,
                error = %e,
                "cannot ask the sink whether its rows can be read by time: due keys are \
                 counted one by one until the audit restarts"
            );
            None
        }
    }
}
