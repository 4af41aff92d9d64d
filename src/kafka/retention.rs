//! How long Kafka keeps a topic's records: the deadline before which a gap can still be
//! repaired by replaying from Kafka. Read with the admin API (DescribeConfigs).

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use std::time::Duration;

/// Bounds each of the two requests [`describe`] makes; the caller's verify round waits on
/// them.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Why a topic's retention could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RetentionError {
    /// The broker does not implement DescribeConfigs (librdkafka's mock cluster, some
    /// Kafka-compatible brokers): a property of the broker, not a failure; asking again
    /// later gives the same answer.
    #[error("the broker does not implement DescribeConfigs")]
    Unsupported,
    /// The broker answered with no configuration for the topic.
    #[error("the broker returned no configuration for topic {0}")]
    Empty(String),
    /// Kafka could not be asked, or refused.
    #[error(transparent)]
    Kafka(#[from] KafkaError),
}

/// A topic's deletion settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Retention {
    /// `retention.ms` (`None`: infinite, -1).
    pub ms: Option<i64>,
    /// `retention.bytes` per partition (`None`: unlimited, -1).
    pub bytes: Option<i64>,
    /// `cleanup.policy` contains `delete`.
    pub delete: bool,
    /// `cleanup.policy` contains `compact`: only the latest record per key survives; a
    /// replay can recover a key's latest value at most, never superseded records.
    pub compact: bool,
}

impl Retention {
    /// Parses DescribeConfigs entries (`retention.ms`, `retention.bytes`, `cleanup.policy`).
    /// Missing entries take Kafka's defaults (7 days, unlimited, delete).
    pub fn from_entries<'a>(entries: impl IntoIterator<Item = (&'a str, Option<&'a str>)>) -> Self {
        let mut r = Retention {
            ms: Some(7 * 24 * 3_600_000),
            bytes: None,
            delete: true,
            compact: false,
        };
        let limit = |v: Option<&str>| {
            v.and_then(|v| v.trim().parse::<i64>().ok())
                .filter(|n| *n >= 0)
        };
        for (name, value) in entries {
            match name {
                "retention.ms" => r.ms = limit(value),
                "retention.bytes" => r.bytes = limit(value),
                "cleanup.policy" => {
                    let p = value.unwrap_or("delete");
                    r.delete = p.split(',').any(|x| x.trim() == "delete");
                    r.compact = p.split(',').any(|x| x.trim() == "compact");
                }
                _ => {}
            }
        }
        r
    }

    /// When time-based retention deletes a record with timestamp `ts_ms` (unix ms), if it
    /// ever does. Size-based retention (`retention.bytes`) can delete earlier; the log start
    /// offset is watched for that.
    pub fn deadline_ms(&self, ts_ms: Option<i64>) -> Option<i64> {
        if !self.delete {
            return None;
        }
        Some(ts_ms?.saturating_add(self.ms?))
    }
}

/// Reads the retention settings of `topic`, from a broker that leads one of its partitions.
///
/// Topic configs can be read from any broker (Kafka's own admin client sends the request
/// to its least loaded broker); librdkafka sends it to the controller unless told
/// otherwise, and waits out the whole timeout when the controller that metadata names is
/// no broker it knows — librdkafka's mock cluster names broker 0, which does not exist.
pub async fn describe(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
) -> Result<Retention, RetentionError> {
    let broker = blocking(|| some_broker(admin, topic))?;
    let spec = ResourceSpecifier::Topic(topic);
    let opts = AdminOptions::new()
        .request_timeout(Some(TIMEOUT))
        .broker_id(broker);
    let results = match admin.describe_configs([&spec], &opts).await {
        Err(KafkaError::AdminOp(RDKafkaErrorCode::UnsupportedFeature)) => {
            return Err(RetentionError::Unsupported);
        }
        r => r?,
    };
    let resource = match results.into_iter().next() {
        None => return Err(RetentionError::Empty(topic.to_string())),
        Some(Err(RDKafkaErrorCode::UnsupportedFeature)) => {
            return Err(RetentionError::Unsupported);
        }
        Some(r) => r.map_err(KafkaError::AdminOp)?,
    };
    // A real Kafka lists every topic config; an empty answer (some Kafka-compatible brokers)
    // would turn into Kafka's defaults, which may be wrong: treat it as unknown.
    if resource.entries.is_empty() {
        return Err(RetentionError::Empty(topic.to_string()));
    }
    Ok(Retention::from_entries(
        resource
            .entries
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_deref())),
    ))
}

/// A broker leading a partition of `topic`, else any broker the metadata lists; `None`
/// (librdkafka's own choice) when it lists none.
fn some_broker(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
) -> Result<Option<i32>, KafkaError> {
    let md = admin.inner().fetch_metadata(Some(topic), TIMEOUT)?;
    let leader = md
        .topics()
        .iter()
        .flat_map(|t| t.partitions())
        .map(|p| p.leader())
        .find(|id| *id >= 0);
    Ok(leader.or_else(|| md.brokers().first().map(|b| b.id())))
}

/// Runs a blocking librdkafka call from async code without stalling the other tasks of a
/// multi-threaded runtime (a current-thread runtime, as in tests, just waits).
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// Seconds left before the first open gap's records are deleted, for the
/// `gap_auditor_gap_unrecoverable_seconds` gauge: the smallest remaining time over
/// `deadlines` (unix ms; `None`: unknown or never), 0 once any is past. `None` when no
/// deadline is known.
pub fn seconds_left(deadlines: impl IntoIterator<Item = Option<i64>>, now_ms: i64) -> Option<f64> {
    deadlines
        .into_iter()
        .flatten()
        .map(|d| ((d - now_ms).max(0) as f64) / 1000.0)
        .reduce(f64::min)
}

#[cfg(test)]
mod tests;
