//! Partition handover between auditor instances of one auditor group (`state.handover_topic`).
//!
//! Each instance keeps its own SQLite store, which only it can read. When Kafka's group
//! protocol moves a partition to another instance, the new owner needs what the old one
//! knew: the settled watermark, the ledger snapshot (missing runs under re-check, open
//! gaps, the tail gap) and the open gaps as reported (state, acknowledgement, cause). The
//! old owner publishes that, per partition, to a compacted Kafka topic keyed
//! `{audit}\0{topic}\0{partition}` on every persist — acknowledged by the broker BEFORE the
//! settled offset is committed, the same ordering the store follows — and the new owner
//! reads the latest record per assigned partition when it is assigned one.
//!
//! The pure parts (record key, encoding, which record is newest, which state wins) are
//! separate from the Kafka I/O ([`Handover`]) and unit-tested below.

use crate::config::KafkaConfig;
use crate::gap::{Gap, Offset, TopicPartition};
use chrono::{DateTime, Utc};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Version of the record format this binary writes; records of a newer version are ignored
/// (with a warning) rather than misread.
pub const VERSION: u32 = 1;

/// How long a handover produce (all partitions of one persist) may take before the persist
/// counts as failed and the settled offset stays uncommitted.
const PRODUCE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long reading the handover topic up to its high watermark may take at assignment.
const READ_TIMEOUT: Duration = Duration::from_secs(20);

/// Errors of the handover topic. Each names the topic.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    /// A Kafka client could not be created or a Kafka call failed.
    #[error("handover topic {topic}: {context}: {source}")]
    Kafka {
        /// The handover topic.
        topic: String,
        /// What was being done.
        context: String,
        /// The Kafka error (boxed: it is large).
        source: Box<rdkafka::error::KafkaError>,
    },
    /// The topic was not read up to its high watermark in time.
    #[error("handover topic {topic}: read only to {reached:?} of {high:?} within {secs} s")]
    ReadTimeout {
        /// The handover topic.
        topic: String,
        /// Offsets reached per partition.
        reached: Vec<Offset>,
        /// High watermarks per partition.
        high: Vec<Offset>,
        /// The limit.
        secs: u64,
    },
    /// A record is not a handover document.
    #[error("handover record {key:?}: {what}")]
    Decode {
        /// The record key, lossily as text.
        key: String,
        /// What is wrong.
        what: String,
    },
}

/// What one owner knew about one partition, as published to the handover topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionState {
    /// Record format version ([`VERSION`]).
    pub version: u32,
    /// Audit name.
    pub audit: String,
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// Settled watermark: every expected record below it is confirmed or in a gap.
    pub settled: Offset,
    /// The ledger snapshot (`ledger::Snapshot` as JSON, the store's `progress.ledger`).
    pub ledger: serde_json::Value,
    /// The gaps the ledger still tracks, as the owner's store holds them (state, cause,
    /// acknowledgement and all).
    pub gaps: Vec<Gap>,
    /// Ids of those gaps whose records `gap-auditor replay` wrote again (so that the next
    /// owner reports them `repaired`, not merely `late`, once it confirms them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replayed: Vec<String>,
    /// key_columns: the owner's confirmed counts of the keys its missing records carry
    /// (each key's values), so the next owner does not take a row those confirmed records
    /// hold for a missing record's (a shared-key loss closed as late).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_claims: Vec<(Vec<String>, u64)>,
    /// When the owner wrote this record.
    pub written_at: DateTime<Utc>,
    /// Who wrote it (`host:pid`), for operators.
    pub owner: String,
}

impl PartitionState {
    /// The partition this state is about.
    pub fn tp(&self) -> TopicPartition {
        TopicPartition::new(self.topic.clone(), self.partition)
    }
}

/// The compaction key of a partition's state: `{audit}\0{topic}\0{partition}`. NUL cannot
/// occur in an audit or topic name, so keys never collide.
pub fn key(audit: &str, tp: &TopicPartition) -> Vec<u8> {
    format!("{audit}\u{0}{}\u{0}{}", tp.topic, tp.partition).into_bytes()
}

/// The record value of a partition's state.
pub fn encode(state: &PartitionState) -> Vec<u8> {
    // Serializing plain data (strings, numbers, JSON values) cannot fail.
    serde_json::to_vec(state).unwrap_or_default()
}

/// Decodes a record. `Ok(None)`: a tombstone, or a record of a newer format version.
pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Option<PartitionState>, HandoverError> {
    let Some(value) = value else {
        return Ok(None);
    };
    let bad = |what: String| HandoverError::Decode {
        key: String::from_utf8_lossy(key).replace('\0', "/"),
        what,
    };
    let doc: serde_json::Value =
        serde_json::from_slice(value).map_err(|e| bad(format!("not JSON: {e}")))?;
    let version = doc.get("version").and_then(serde_json::Value::as_u64);
    match version {
        Some(v) if v > u64::from(VERSION) => {
            tracing::warn!(key = %String::from_utf8_lossy(key).replace('\0', "/"), version = v,
                "handover record written by a newer gap-auditor: ignored");
            return Ok(None);
        }
        None => return Err(bad("no version".into())),
        Some(_) => {}
    }
    let state: PartitionState =
        serde_json::from_value(doc).map_err(|e| bad(format!("not a handover document: {e}")))?;
    if self::key(&state.audit, &state.tp()) != key {
        return Err(bad(format!(
            "key does not match its document ({} {})",
            state.audit,
            state.tp()
        )));
    }
    Ok(Some(state))
}

/// Of two states of one partition, the one to keep: the higher settled watermark, then the
/// later write. (Records of one key are read in log order; this decides between partitions
/// of the handover topic should a key appear in two, after a repartitioning.)
pub fn newer(a: PartitionState, b: PartitionState) -> PartitionState {
    if (b.settled, b.written_at) >= (a.settled, a.written_at) {
        b
    } else {
        a
    }
}

/// Whether the handover state should replace the local store's progress of a partition
/// just assigned: when it is at least as far (`settled` ≥ the local one). A partition that
/// comes back to a former owner finds a stale local store; an equal watermark still prefers
/// the handover, whose gap states may be newer.
pub fn prefer_handover(local_settled: Option<Offset>, handover: &PartitionState) -> bool {
    local_settled.is_none_or(|l| handover.settled >= l)
}

/// The identity written into [`PartitionState::owner`]: host name and process id.
pub fn owner_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    format!("{host}:{}", std::process::id())
}

/// The Kafka side: a producer for the states and short-lived readers at assignment.
pub struct Handover {
    topic: String,
    base: ClientConfig,
    producer: FutureProducer,
    owner: String,
}

impl std::fmt::Debug for Handover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handover")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl Handover {
    /// A handover client for `topic`: an idempotent producer with `acks=all`, by default
    /// one record per batch (some brokers, tansu among them, report a wrong high watermark
    /// for multi-record batches, and the reader stops at the high watermark);
    /// `kafka.properties` may raise `linger.ms` and `batch.num.messages`.
    pub fn new(kafka: &KafkaConfig, topic: &str) -> Result<Handover, HandoverError> {
        let base = crate::kafka::client::base(kafka);
        let mut p = base.clone();
        for (k, v) in [("linger.ms", "0"), ("batch.num.messages", "1")] {
            if !kafka.properties.contains_key(k) {
                p.set(k, v);
            }
        }
        p.set("acks", "all").set("enable.idempotence", "true").set(
            "message.timeout.ms",
            PRODUCE_TIMEOUT.as_millis().to_string(),
        );
        let producer: FutureProducer = p.create().map_err(|e| HandoverError::Kafka {
            topic: topic.to_string(),
            context: "creating the producer".into(),
            source: Box::new(e),
        })?;
        Ok(Handover {
            topic: topic.to_string(),
            base,
            producer,
            owner: owner_id(),
        })
    }

    /// The handover topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// This process's owner id.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    fn kafka_err(&self, context: &str) -> impl FnOnce(rdkafka::error::KafkaError) -> HandoverError {
        let topic = self.topic.clone();
        let context = context.to_string();
        move |e| HandoverError::Kafka {
            topic,
            context,
            source: Box::new(e),
        }
    }

    /// Creates the topic (one partition, `cleanup.policy=compact`) unless it exists. A
    /// broker that ignores the config still works: only the latest record per key is ever
    /// used, compaction only bounds the topic's size.
    pub async fn ensure_topic(&self) -> Result<(), HandoverError> {
        let admin: AdminClient<DefaultClientContext> = self
            .base
            .create()
            .map_err(self.kafka_err("creating the admin client"))?;
        let topic = NewTopic::new(&self.topic, 1, TopicReplication::Fixed(-1))
            .set("cleanup.policy", "compact");
        let r = admin
            .create_topics(
                &[topic],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            )
            .await
            .map_err(self.kafka_err("creating the topic"))?;
        for x in r {
            match x {
                Ok(_) => tracing::info!(topic = %self.topic, "handover topic created (compacted)"),
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code)) => {
                    return Err(HandoverError::Kafka {
                        topic: self.topic.clone(),
                        context: "creating the topic".into(),
                        source: Box::new(rdkafka::error::KafkaError::AdminOp(code)),
                    });
                }
            }
        }
        Ok(())
    }

    /// Produces one record per state and waits until the broker acknowledged every one
    /// (`acks=all`). Only then may the settled offsets of these partitions be committed.
    pub async fn publish(&self, states: &[PartitionState]) -> Result<(), HandoverError> {
        let mut pending = Vec::with_capacity(states.len());
        for s in states {
            let k = key(&s.audit, &s.tp());
            let v = encode(s);
            let rec = FutureRecord::to(&self.topic).key(&k).payload(&v);
            let fut = self
                .producer
                .send_result(rec)
                .map_err(|(e, _)| e)
                .map_err(self.kafka_err("enqueueing a state"))?;
            pending.push(fut);
        }
        for fut in pending {
            match fut.await {
                Ok(Ok(_)) => {}
                Ok(Err((e, _))) => return Err(self.kafka_err("producing a state")(e)),
                Err(_) => {
                    return Err(self.kafka_err("producing a state")(
                        rdkafka::error::KafkaError::Canceled,
                    ));
                }
            }
        }
        Ok(())
    }

    /// Reads the topic from the beginning to its high watermark (blocking: call it from
    /// `spawn_blocking`) and returns the latest state of each of `tps` of `audit`.
    pub fn read(
        &self,
        audit: &str,
        tps: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, PartitionState>, HandoverError> {
        let mut c = self.base.clone();
        // A group id is needed by librdkafka for a consumer; assign() never joins it and
        // nothing is committed.
        c.set(
            "group.id",
            format!("gap-auditor-handover-reader-{}", self.owner),
        )
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest");
        let consumer: BaseConsumer = c.create().map_err(self.kafka_err("creating a reader"))?;
        let timeout = Duration::from_secs(10);
        let md = consumer
            .fetch_metadata(Some(&self.topic), timeout)
            .map_err(self.kafka_err("reading its metadata"))?;
        let parts: Vec<i32> = md
            .topics()
            .iter()
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        let mut tpl = rdkafka::TopicPartitionList::new();
        let mut high = HashMap::new();
        for p in &parts {
            let (low, hi) = consumer
                .fetch_watermarks(&self.topic, *p, timeout)
                .map_err(self.kafka_err("reading its watermarks"))?;
            if hi > low {
                high.insert(*p, hi);
                tpl.add_partition_offset(&self.topic, *p, rdkafka::Offset::Offset(low))
                    .map_err(self.kafka_err("assigning"))?;
            }
        }
        let wanted: std::collections::HashSet<Vec<u8>> =
            tps.iter().map(|tp| key(audit, tp)).collect();
        // Per partition state: the handover partition it was read from and the state.
        let mut out: HashMap<TopicPartition, (i32, PartitionState)> = HashMap::new();
        if high.is_empty() {
            return Ok(HashMap::new());
        }
        consumer.assign(&tpl).map_err(self.kafka_err("assigning"))?;
        let mut reached: HashMap<i32, Offset> = HashMap::new();
        let deadline = Instant::now() + READ_TIMEOUT;
        while high
            .iter()
            .any(|(p, h)| reached.get(p).is_none_or(|r| r < h))
        {
            if Instant::now() > deadline {
                let mut ps: Vec<i32> = high.keys().copied().collect();
                ps.sort();
                return Err(HandoverError::ReadTimeout {
                    topic: self.topic.clone(),
                    reached: ps
                        .iter()
                        .map(|p| reached.get(p).copied().unwrap_or(-1))
                        .collect(),
                    high: ps
                        .iter()
                        .map(|p| high.get(p).copied().unwrap_or(-1))
                        .collect(),
                    secs: READ_TIMEOUT.as_secs(),
                });
            }
            let Some(m) = consumer.poll(Duration::from_millis(200)) else {
                continue;
            };
            let m = m.map_err(self.kafka_err("reading"))?;
            reached.insert(m.partition(), m.offset() + 1);
            let Some(k) = m.key() else { continue };
            if !wanted.contains(k) {
                continue;
            }
            match decode(k, m.payload()) {
                Ok(Some(s)) => {
                    let tp = s.tp();
                    let s = match out.remove(&tp) {
                        // Within one handover partition the log order decides; across
                        // partitions (the topic was repartitioned) the state itself.
                        Some((p, prev)) if p != m.partition() => newer(prev, s),
                        _ => s,
                    };
                    out.insert(tp, (m.partition(), s));
                }
                // A tombstone forgets the partition's state.
                Ok(None) if m.payload().is_none() => {
                    out.remove(&k_tp(audit, tps, k));
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "unreadable handover record skipped"),
            }
        }
        Ok(out.into_iter().map(|(tp, (_, s))| (tp, s)).collect())
    }
}

/// The partition of `tps` whose key is `k` (only called with a wanted key).
fn k_tp(audit: &str, tps: &[TopicPartition], k: &[u8]) -> TopicPartition {
    tps.iter()
        .find(|tp| key(audit, tp) == k)
        .cloned()
        .unwrap_or_else(|| TopicPartition::new(String::new(), -1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gap::GapState;
    use chrono::TimeZone;

    fn state(settled: Offset, at_s: i64) -> PartitionState {
        PartitionState {
            version: VERSION,
            audit: "dns".into(),
            topic: "logs".into(),
            partition: 3,
            settled,
            ledger: serde_json::json!({"missing": [], "gaps": [], "tail_gap": null}),
            gaps: vec![Gap {
                id: Gap::make_id("dns", "logs", 3, 10),
                audit: "dns".into(),
                topic: "logs".into(),
                partition: 3,
                first_offset: 10,
                last_offset: 12,
                missing_records: 3,
                size_known: true,
                first_timestamp: None,
                last_timestamp: None,
                detected_at: Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
                state: GapState::Acknowledged,
                unrecoverable_at: None,
                cause: crate::gap::GapCause::DroppedInFlight,
                pipeline_commit_from: Some(9),
                pipeline_commit_to: Some(20),
                pipeline_commit_at: None,
                shared_key: false,
                ack_reason: Some("known".into()),
            }],
            replayed: vec![Gap::make_id("dns", "logs", 3, 10)],
            key_claims: vec![(vec!["10.0.0.1".into(), "a.com".into()], 2)],
            written_at: Utc.timestamp_opt(at_s, 0).unwrap(),
            owner: "h:1".into(),
        }
    }

    #[test]
    fn round_trips_with_every_gap_field() {
        let s = state(42, 1_700_000_100);
        let k = key("dns", &s.tp());
        assert_eq!(decode(&k, Some(&encode(&s))).unwrap(), Some(s));
    }

    #[test]
    fn keys_separate_audit_topic_and_partition() {
        let a = key("a", &TopicPartition::new("b.c", 1));
        assert_eq!(a, b"a\0b.c\x001".to_vec());
        assert_ne!(a, key("a\0b", &TopicPartition::new("c", 1)));
        assert_ne!(a, key("a", &TopicPartition::new("b.c", 11)));
    }

    #[test]
    fn tombstones_and_newer_versions_are_skipped_garbage_is_an_error() {
        let s = state(1, 1);
        let k = key("dns", &s.tp());
        assert_eq!(decode(&k, None).unwrap(), None);
        let mut v: serde_json::Value = serde_json::from_slice(&encode(&s)).unwrap();
        v["version"] = serde_json::json!(VERSION + 1);
        assert_eq!(
            decode(&k, Some(&serde_json::to_vec(&v).unwrap())).unwrap(),
            None
        );
        let e = decode(&k, Some(b"{")).unwrap_err().to_string();
        assert!(e.contains("dns/logs/3"), "{e}");
        assert!(decode(&k, Some(b"{\"version\":1}")).is_err());
        assert!(decode(&k, Some(b"{\"settled\":1}")).is_err(), "no version");
    }

    #[test]
    fn a_document_under_another_key_is_refused() {
        let s = state(1, 1);
        let other = key("dns", &TopicPartition::new("logs", 4));
        let e = decode(&other, Some(&encode(&s))).unwrap_err().to_string();
        assert!(e.contains("does not match"), "{e}");
    }

    #[test]
    fn newer_prefers_the_higher_watermark_then_the_later_write() {
        assert_eq!(newer(state(10, 5), state(9, 6)).settled, 10);
        assert_eq!(newer(state(9, 6), state(10, 5)).settled, 10);
        assert_eq!(newer(state(10, 5), state(10, 6)).written_at.timestamp(), 6);
        assert_eq!(newer(state(10, 6), state(10, 5)).written_at.timestamp(), 6);
    }

    #[test]
    fn handover_wins_unless_the_local_store_is_further() {
        let h = state(100, 1);
        assert!(prefer_handover(None, &h));
        assert!(prefer_handover(Some(99), &h), "stale local store");
        assert!(
            prefer_handover(Some(100), &h),
            "equal: gap states may be newer"
        );
        assert!(!prefer_handover(Some(101), &h));
    }
}
