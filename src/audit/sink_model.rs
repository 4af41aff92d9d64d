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
use crate::sink::Verifier;
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
