//! Offset lookups with group-less or never-joining clients: the auditor's own committed
//! offsets, watermarks, time lookups, and the pipeline group's commits.
//!
//! A consumer created with a `group.id` joins that group only when it subscribes; these
//! clients never subscribe, never assign and never commit, so the pipeline's group sees no
//! member, no rebalance and no offset change from the auditor (OffsetFetch is read-only).

use super::client;
use crate::config::KafkaConfig;
use crate::types::{Offset, TopicPartition};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Offset as KOffset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(10);

/// How long a topic id lookup may take. Short: it runs inside every assignment, and a
/// broker that never answers DescribeTopics (librdkafka's mock cluster does not) must not
/// hold a rebalance for the full [`TIMEOUT`].
const TOPIC_ID_TIMEOUT: Duration = Duration::from_secs(3);

/// After a topic id lookup failed, how long the next ones answer "unknown" at once.
const TOPIC_ID_BACKOFF: Duration = Duration::from_secs(600);

/// Blocking offset lookups for the auditor's own group. Call from `spawn_blocking`.
pub struct Lookup {
    consumer: BaseConsumer,
    /// Until when topic id lookups are not tried (the last one failed).
    ids_unavailable_until: Mutex<Option<Instant>>,
}

impl Lookup {
    /// A lookup client for `group` (the auditor's own group).
    pub fn new(kafka: &KafkaConfig, group: &str) -> Result<Self, KafkaError> {
        let consumer: BaseConsumer = client::consumer(kafka, group).create()?;
        Ok(Self {
            consumer,
            ids_unavailable_until: Mutex::new(None),
        })
    }

    /// The group's committed offsets (`None` where it has none).
    pub fn committed(
        &self,
        tps: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, Option<Offset>>, KafkaError> {
        committed_of(&self.consumer, tps)
    }

    /// (log start, log end) of a partition.
    pub fn watermarks(&self, tp: &TopicPartition) -> Result<(Offset, Offset), KafkaError> {
        self.consumer
            .fetch_watermarks(&tp.topic, tp.partition, TIMEOUT)
    }

    /// The first offset with a timestamp at or after `ms` (`None`: no such record yet).
    pub fn offset_for_time(
        &self,
        tp: &TopicPartition,
        ms: i64,
    ) -> Result<Option<Offset>, KafkaError> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&tp.topic, tp.partition, KOffset::Offset(ms))?;
        let out = self.consumer.offsets_for_times(tpl, TIMEOUT)?;
        Ok(out
            .find_partition(&tp.topic, tp.partition)
            .and_then(|e| match e.offset() {
                KOffset::Offset(o) if o >= 0 => Some(o),
                _ => None,
            }))
    }

    /// The id of `topic` (which incarnation of the name: see [`super::topic_id`]); `None`
    /// when the broker gives none, or when a lookup failed less than
    /// [`TOPIC_ID_BACKOFF`] ago (unknown: never read as a change).
    pub fn topic_id(&self, topic: &str) -> Result<Option<String>, KafkaError> {
        let mut until = self
            .ids_unavailable_until
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if until.is_some_and(|t| Instant::now() < t) {
            return Ok(None);
        }
        let r = super::topic_id::topic_id(self.consumer.client(), topic, TOPIC_ID_TIMEOUT);
        *until = r.is_err().then(|| Instant::now() + TOPIC_ID_BACKOFF);
        r
    }

    /// Partitions of `topic`, from metadata (also a cheap liveness probe of the cluster).
    pub fn partitions(&self, topic: &str) -> Result<Vec<i32>, KafkaError> {
        let md = self.consumer.fetch_metadata(Some(topic), TIMEOUT)?;
        Ok(md
            .topics()
            .iter()
            .filter(|t| t.name() == topic)
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect())
    }
}

/// Read-only view of the pipeline group's committed offsets.
pub struct PipelineReader {
    consumer: BaseConsumer,
    group: String,
}

impl PipelineReader {
    /// A reader for the pipeline's group. It never joins it (see module docs).
    pub fn new(kafka: &KafkaConfig, group: &str) -> Result<Self, KafkaError> {
        let consumer: BaseConsumer = client::consumer(kafka, group).create()?;
        Ok(Self {
            consumer,
            group: group.to_string(),
        })
    }

    /// The pipeline group's name.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// Committed offsets of the pipeline group (`None`: no commit on that partition).
    /// A partition the broker answered with an error (a transactional commit not yet
    /// stable, a coordinator moving) is left out: unknown this round, not "no commit" —
    /// the auditor reports a group whose commits disappear, and must not on a blip.
    pub fn committed(
        &self,
        tps: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, Option<Offset>>, KafkaError> {
        let out = committed_list(&self.consumer, tps)?;
        Ok(tps
            .iter()
            .filter_map(|tp| {
                let e = out.find_partition(&tp.topic, tp.partition)?;
                if let Err(err) = e.error() {
                    tracing::debug!(%tp, group = %self.group, error = %err,
                        "the pipeline group's commit on this partition is unknown this round");
                    return None;
                }
                let o = match e.offset() {
                    KOffset::Offset(o) if o >= 0 => Some(o),
                    _ => None,
                };
                Some((tp.clone(), o))
            })
            .collect())
    }
}

fn committed_of(
    c: &BaseConsumer,
    tps: &[TopicPartition],
) -> Result<BTreeMap<TopicPartition, Option<Offset>>, KafkaError> {
    let out = committed_list(c, tps)?;
    Ok(tps
        .iter()
        .map(|tp| {
            let o = out
                .find_partition(&tp.topic, tp.partition)
                .and_then(|e| match e.offset() {
                    KOffset::Offset(o) if o >= 0 => Some(o),
                    _ => None,
                });
            (tp.clone(), o)
        })
        .collect())
}

/// One OffsetFetch of `tps` for the client's group.
fn committed_list(
    c: &BaseConsumer,
    tps: &[TopicPartition],
) -> Result<TopicPartitionList, KafkaError> {
    let mut tpl = TopicPartitionList::new();
    for tp in tps {
        tpl.add_partition(&tp.topic, tp.partition);
    }
    c.committed_offsets(tpl, TIMEOUT)
}
