//! What the audit loop asks of Kafka besides the tail's stream of records: blocking
//! lookups, behind a trait so the loop's unit tests run without a broker.

use crate::kafka::{Lookup, PipelineReader};
use crate::types::{Offset, TopicPartition};
use rdkafka::error::KafkaError;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Committed offsets per partition (`None`: no commit on it).
pub type Commits = BTreeMap<TopicPartition, Option<Offset>>;

/// Blocking Kafka lookups of one audit (call them through [`super::blocking::blocking`]).
pub trait KafkaView: Send + Sync + 'static {
    /// (log start, log end) of a partition.
    fn watermarks(&self, tp: &TopicPartition) -> Result<(Offset, Offset), KafkaError>;
    /// The auditor group's committed offsets.
    fn committed(&self, tps: &[TopicPartition]) -> Result<Commits, KafkaError>;
    /// The first offset with a timestamp at or after `ms` (`None`: no such record yet).
    fn offset_for_time(&self, tp: &TopicPartition, ms: i64) -> Result<Option<Offset>, KafkaError>;
    /// The id of `topic`, which changes when the topic is deleted and created again
    /// (`None`: the broker gives none). By default unknown: a view that cannot tell never
    /// reports a change.
    fn topic_id(&self, _topic: &str) -> Result<Option<String>, KafkaError> {
        Ok(None)
    }
    /// Partitions of `topic` (also the liveness probe without a pipeline group).
    fn partitions(&self, topic: &str) -> Result<Vec<i32>, KafkaError>;
    /// The pipeline group's commits; `None` without a configured pipeline group.
    fn pipeline_committed(&self, tps: &[TopicPartition]) -> Option<Result<Commits, KafkaError>>;
}

/// The daemon's view: rdkafka clients that never join a group.
pub struct Cluster {
    /// The auditor group's lookups.
    pub lookup: Arc<Lookup>,
    /// The pipeline group's commits, with a configured `pipeline_group`.
    pub pipeline: Option<PipelineReader>,
}

impl KafkaView for Cluster {
    fn watermarks(&self, tp: &TopicPartition) -> Result<(Offset, Offset), KafkaError> {
        self.lookup.watermarks(tp)
    }

    fn committed(&self, tps: &[TopicPartition]) -> Result<Commits, KafkaError> {
        self.lookup.committed(tps)
    }

    fn offset_for_time(&self, tp: &TopicPartition, ms: i64) -> Result<Option<Offset>, KafkaError> {
        self.lookup.offset_for_time(tp, ms)
    }

    fn partitions(&self, topic: &str) -> Result<Vec<i32>, KafkaError> {
        self.lookup.partitions(topic)
    }

    fn topic_id(&self, topic: &str) -> Result<Option<String>, KafkaError> {
        self.lookup.topic_id(topic)
    }

    fn pipeline_committed(&self, tps: &[TopicPartition]) -> Option<Result<Commits, KafkaError>> {
        self.pipeline.as_ref().map(|p| p.committed(tps))
    }
}
