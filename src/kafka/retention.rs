//! How long Kafka keeps a topic's records: the deadline before which a gap can still be
//! repaired by replaying from Kafka. Read with the admin API (DescribeConfigs).

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::KafkaError;
use std::time::Duration;

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

/// Reads the retention settings of `topic`.
pub async fn describe(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
) -> Result<Retention, KafkaError> {
    let spec = ResourceSpecifier::Topic(topic);
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
    let results = admin.describe_configs([&spec], &opts).await?;
    let resource = results
        .into_iter()
        .next()
        .ok_or_else(|| KafkaError::AdminOpCreation("empty DescribeConfigs answer".into()))?
        .map_err(KafkaError::AdminOp)?;
    // A real Kafka lists every topic config; an empty answer (some Kafka-compatible brokers)
    // would turn into Kafka's defaults, which may be wrong: treat it as unknown.
    if resource.entries.is_empty() {
        return Err(KafkaError::AdminOpCreation(format!(
            "the broker returned no configuration for topic {topic}"
        )));
    }
    Ok(Retention::from_entries(
        resource
            .entries
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_deref())),
    ))
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
mod tests {
    use super::*;

    #[test]
    fn defaults_and_parsing() {
        let r = Retention::from_entries([]);
        assert_eq!(r.ms, Some(604_800_000));
        assert!(r.delete && !r.compact);
        let r = Retention::from_entries([
            ("retention.ms", Some("60000")),
            ("retention.bytes", Some("-1")),
            ("cleanup.policy", Some("compact,delete")),
        ]);
        assert_eq!(
            (r.ms, r.bytes, r.delete, r.compact),
            (Some(60_000), None, true, true)
        );
        let r = Retention::from_entries([
            ("retention.ms", Some("-1")),
            ("cleanup.policy", Some("compact")),
        ]);
        assert_eq!((r.ms, r.delete), (None, false));
    }

    #[test]
    fn deadline_is_timestamp_plus_retention() {
        let r = Retention::from_entries([("retention.ms", Some("60000"))]);
        assert_eq!(r.deadline_ms(Some(1_000)), Some(61_000));
        assert_eq!(r.deadline_ms(None), None);
        let compact = Retention::from_entries([("cleanup.policy", Some("compact"))]);
        assert_eq!(
            compact.deadline_ms(Some(1_000)),
            None,
            "compaction never deletes by time"
        );
    }

    #[test]
    fn the_countdown_decreases_and_stops_at_zero() {
        let d = [Some(61_000), None, Some(90_000)];
        assert_eq!(seconds_left(d, 1_000), Some(60.0));
        assert_eq!(seconds_left(d, 31_000), Some(30.0));
        assert_eq!(seconds_left(d, 70_000), Some(0.0));
        assert_eq!(seconds_left([None], 0), None);
    }
}
