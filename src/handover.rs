//! Partition handover between auditor instances of one auditor group (`state.handover_topic`).
//!
//! Each instance keeps its own SQLite store, which only it can read. When Kafka's group
//! protocol moves a partition to another instance, the new owner needs what the old one
//! knew: the settled watermark, the ledger snapshot (missing runs under re-check, open
//! gaps, the tail gap) and the open gaps as reported (state, acknowledgement, cause). The
//! old owner publishes that, per partition, to a compacted Kafka topic on every persist —
//! acknowledged by the broker BEFORE the settled offset is committed, the same ordering the
//! store follows — and the new owner reads the latest complete state per assigned partition
//! when it is assigned one.
//!
//! A partition's state (one JSON document, [`PartitionState`]) grows with its open gaps and
//! soon passes a broker's message size limit (`message.max.bytes`, 1 MB by default). So it
//! travels in one of two shapes (docs/SCALING.md, "Record format"):
//!
//! - **single**: the document as one record keyed `{audit}\0{topic}\0{partition}`, when it
//!   fits the limit — the format of version 1, which older binaries read and write;
//! - **chunked**: a *set* of records keyed `{audit}\0{topic}\0{partition}\0{slot}\0{index}`,
//!   each value a one-line JSON [`ChunkHeader`] (set id, index, count, total size,
//!   checksum), a newline and a slice of the document. A set counts only once every one of
//!   its `count` chunks is the live record of its key (what log compaction would keep), so
//!   a set cut short by a crash is never taken: the reader keeps the state that completed
//!   before it. Sets alternate between two slots, and a writer never writes into the slot
//!   of the latest complete set, so even after compaction a crash mid-publish cannot destroy
//!   the previous complete state; chunks an older, longer set left behind in a slot are
//!   deleted (tombstones) once a newer set is acknowledged, and are never mixed into it
//!   (they carry another set id).
//!
//! Every record of this binary goes to partition 0 of the handover topic: a set's chunks
//! must share one log to be ordered.
//!
//! Given-up (retired) gaps are not part of a partition's state (record format 3): it
//! carries their aggregate, and the gaps travel as chunks on a side topic ([`retired`]),
//! so a takeover reads an amount bounded by the ledger's own bounds.
//!
//! The pure parts (keys, encoding, chunk planning, reassembly, which state wins) are
//! separate from the Kafka I/O ([`Handover`]) and unit-tested below.

use crate::config::KafkaConfig;
use crate::gap::Gap;
use crate::types::{Offset, TopicPartition};
use chrono::{DateTime, Utc};
use rdkafka::ClientConfig;
use rdkafka::error::KafkaError;
use rdkafka::producer::FutureProducer;
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

mod codec;
pub mod delta;
mod publish;
mod read;
pub mod retired;

pub use codec::{
    ChunkHeader, Latest, Slots, chunk_key, decode, delta_key, encode, key, newer, prefer_handover,
};
pub use delta::{Chain, DeltaId, Rebuild, apply};
pub use publish::{Plan, Published, plan, policy_warning, record_limit, side_policy_problem};
pub use read::{Reassembler, lookup};

/// Version of the state document this binary writes; documents of a newer version are
/// ignored (with a warning) rather than misread. Version 2 (issue 41 item 3): a partition's
/// state is a base plus deltas ([`delta`]); binaries of version 1 ignore version-2 records
/// with a warning (they resume without the handed-over state, as with no handover topic)
/// rather than take a base without its deltas. Version-1 documents are read as bases.
/// Version 3 (issue 41, "a takeover reads a bounded amount"): retired gaps are not in the
/// state any more but counted in [`PartitionState::retired_gaps`] and carried as chunks on
/// a side topic ([`retired`]); binaries of version 2 ignore version-3 records (they would
/// take a state without its retired gaps) and resume from their store.
pub const VERSION: u32 = 3;

/// Version of the chunk envelope ([`ChunkHeader::chunk`]); chunks of a newer envelope are
/// ignored rather than misread.
pub const CHUNK_VERSION: u32 = 1;

/// librdkafka's default `message.max.bytes`: the record limit when `kafka.properties` sets
/// none.
pub const DEFAULT_MESSAGE_MAX_BYTES: usize = 1_000_000;

/// Bytes of the record limit kept for what is neither key nor value: librdkafka counts its
/// per-message wire overhead against `message.max.bytes` at enqueue, and a broker counts the
/// record batch header (61 bytes) and the record's framing against its own limit.
pub const FRAMING: usize = 512;

/// The smallest chunk payload worth sending: a limit that leaves less room next to the key
/// and header is a configuration error, not something to work around with 10,000 chunks.
const MIN_CHUNK: usize = 1024;

/// How often one publish halves its record size after the broker refused a record as too
/// large (the broker's or topic's own limit is below the producer's `message.max.bytes`).
const MAX_SHRINKS: u32 = 8;

/// The handover topic partition every record of this binary is produced to.
const PARTITION: i32 = 0;

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
    /// `message.max.bytes` (or what the broker accepted) leaves no room for a chunk next
    /// to a record's key, header and framing.
    #[error(
        "handover topic {topic}: a record limit of {limit} bytes leaves no room for a chunk of partition state (at least {need} bytes needed; raise kafka.properties.\"message.max.bytes\" and the topic's max.message.bytes)"
    )]
    LimitTooSmall {
        /// The handover topic.
        topic: String,
        /// The record limit in force.
        limit: usize,
        /// The smallest limit that works for this key.
        need: usize,
    },
    /// A delta was asked for a partition whose base this process does not know.
    #[error("handover topic {topic}: no base state of {partition} known to publish a delta on")]
    NoBase {
        /// The handover topic.
        topic: String,
        /// The partition.
        partition: String,
    },
    /// The partition's handover topic was not read since it was assigned (the read failed):
    /// what another owner wrote is unknown, so nothing of it is published.
    #[error(
        "handover topic {topic}: {partition} not published: its state on the topic was not read since its assignment (retried in the background)"
    )]
    NotRead {
        /// The handover topic.
        topic: String,
        /// The partition.
        partition: String,
    },
    /// A record is not a handover document.
    #[error("handover record {key:?}: {what}")]
    Decode {
        /// The record key, lossily as text.
        key: String,
        /// What is wrong.
        what: String,
    },
    /// The side topic of retired gaps deletes records by retention (review item 6): a
    /// chunk older than `retention.ms` would go, and a next owner would lack its gaps.
    #[error(
        "handover side topic {topic} has cleanup.policy={policy}: its chunks of given-up gaps would be deleted after retention.ms and a next owner would lack those gaps; set cleanup.policy=compact on it (kafka-configs.sh --alter --entity-type topics --entity-name {topic} --add-config cleanup.policy=compact) or delete it so that the auditor creates it compacted"
    )]
    SidePolicy {
        /// The side topic.
        topic: String,
        /// Its `cleanup.policy`.
        policy: String,
    },
}

/// What one owner knew about one partition, as published to the handover topic.
/// One field per field of the handover record (a wire format other owners read), so it is
/// as wide as what a partition's next owner needs.
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
    /// Ids of those gaps that left the owner's memory (every missing run given up): the
    /// next owner marks them retired in its store, where its ledger's aggregate of them is
    /// counted (issue 41 item 1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retired: Vec<String>,
    /// Record format 3: the aggregate of the partition's retired gaps (count, earliest
    /// record time, earliest deletion, the earliest listed: what the ledger keeps of them),
    /// in a base and every delta; the gaps themselves are on the side topic
    /// ([`retired`]). `None` in a format-3 record: none retired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_gaps: Option<crate::ledger::RetiredGaps>,
    /// key_columns: the owner's confirmed counts of the keys its missing records carry
    /// (each key's values), so the next owner does not take a row those confirmed records
    /// hold for a missing record's (a shared-key loss closed as late).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key_claims: Vec<(Vec<String>, u64)>,
    /// The partition's handover generation: one more than the state its writer took over
    /// (or last published). Of two states with equal watermarks the higher generation is
    /// the later one; clocks of different hosts cannot order them (a zombie owner with a
    /// fast clock would win with older gap states). 0 in records of older binaries.
    #[serde(default)]
    pub generation: u64,
    /// Record format 2: `Some(b)` makes this document a *delta* on the partition's base
    /// state of generation `b` (see [`delta`]): only what changed since the state before
    /// it. `None`: a whole state (a base).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<u64>,
    /// Record format 2: in a base, its own id (unique per base: `owner/nanos/sequence`); in
    /// a delta, the id of the base it applies to. A reader applies only deltas naming the
    /// base it took, so a base whose generation repeats another's (a writer that could not
    /// read the topic) never adopts another chain's deltas.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_id: Option<String>,
    /// In a delta: the generation of the publish it was built on (the last one of its chain
    /// the broker acknowledged; the base's for the first delta). It holds every change since
    /// that one, so a reader applies it only over a state that includes that generation: a
    /// chain with a hole (a delta lost or unreadable) is not applied at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev: Option<u64>,
    /// The ownership term of the writer: one more than the highest term it read on the
    /// topic for this partition when it took it over (1 when it read nothing). A record of
    /// a higher term than the base a reader took means a newer owner's chain lost its base
    /// (a zombie owner wrote over it): the state is then not used. 0 in older records.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub term: u64,
    /// In a delta: the key claims are those of the state before it (unchanged since; not
    /// repeated every round).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub claims_kept: bool,
    /// In a delta: ids of gaps that no longer need handing over (resolved, folded into an
    /// overflow gap): the next owner drops them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
    /// When the owner wrote this record (for operators only: it never decides).
    pub written_at: DateTime<Utc>,
    /// Who wrote it (`host:pid`), for operators.
    pub owner: String,
    /// The writer's `server.advertised_url`: where its API answers, so that an instance that
    /// does not own the partition forwards an ack of one of its gaps there. Stamped by
    /// [`Handover::publish`]; `None` when the writer has none configured (or is older).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_url: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl PartitionState {
    /// The partition this state is about.
    pub fn tp(&self) -> TopicPartition {
        TopicPartition::new(self.topic.clone(), self.partition)
    }
}

/// The identity written into [`PartitionState::owner`] by default: host name and process
/// id (the daemon uses [`owner_of`] its store instead: see [`Handover::with_owner`]).
pub fn owner_id() -> String {
    format!("{}:{}", host_name(), std::process::id())
}

/// The owner id of an instance whose store is `instance` (`Store::instance_id`): host name
/// and that id, the same after a restart, so the instance's own states stay its own.
pub fn owner_of(instance: &str) -> String {
    format!("{}:{instance}", host_name())
}

fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The Kafka side: a producer for the states and short-lived readers at assignment.
pub struct Handover {
    topic: String,
    base: ClientConfig,
    producer: FutureProducer,
    owner: String,
    /// The largest record (key + value + framing) sent: `message.max.bytes`, lowered for
    /// good when the broker refuses a record as too large.
    limit: AtomicUsize,
    /// What this process knows of each partition it owns or owned: one lock for the six
    /// maps, because a read at assignment updates several of them together.
    known: Mutex<Known>,
    /// Makes set ids unique within this process.
    sets: AtomicU64,
    /// Numbers the reads.
    read_seq: AtomicU64,
    /// Whether the topic's `cleanup.policy` deletes by retention (read by
    /// [`Handover::check_policy`]): only then does a chain get a new base on a timer
    /// ([`delta::REBASE_EVERY`]); a compacted-only topic keeps a base for ever.
    timed_rebase: std::sync::atomic::AtomicBool,
    /// `server.advertised_url`, stamped into every state published ([`PartitionState::owner_url`]).
    advertised_url: Option<String>,
}

/// What a [`Handover`] knows of each partition, keyed by the partition's single-record key
/// (see [`key`]): from the read at assignment and this process's publishes since.
#[derive(Default)]
struct Known {
    /// What each partition's keys hold (single-record key → [`Slots`]), from the read at
    /// assignment and this process's publishes since.
    slots: HashMap<Vec<u8>, Slots>,
    /// The handover generation of each partition's latest state (single-record key →
    /// generation), from the read at assignment and this process's publishes since.
    generations: HashMap<Vec<u8>, u64>,
    /// Each partition's chain of base and deltas (single-record key → [`Chain`]), from the
    /// read at assignment and this process's publishes since; none: the next publish of
    /// the partition must be a base.
    chains: HashMap<Vec<u8>, Chain>,
    /// This process's ownership term of each partition (single-record key → term, see
    /// [`PartitionState::term`]), set by the read at assignment.
    terms: HashMap<Vec<u8>, u64>,
    /// Partitions (single-record keys) whose last read did not succeed: this process does
    /// not know the term or chain another owner may have written since, so it publishes
    /// nothing of them (a lower-term base would overwrite a newer owner's) until a read
    /// succeeds.
    unread: HashSet<Vec<u8>>,
    /// The latest read started for each partition (single-record key → its number): a read
    /// that finishes after a newer one started (a retry in the background, then an
    /// assignment) leaves what the newer one found in place.
    reads: HashMap<Vec<u8>, u64>,
}

impl std::fmt::Debug for Handover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handover")
            .field("topic", &self.topic)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl Handover {
    /// What this process knows of its partitions (a poisoned lock still holds it: every
    /// update leaves the maps consistent).
    fn known(&self) -> std::sync::MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A handover client for `topic`: an idempotent producer with `acks=all`, by default
    /// one record per batch (some brokers, tansu among them, report a wrong high watermark
    /// for multi-record batches, and the reader stops at the high watermark) and lz4
    /// compression (state documents are repetitive JSON); `kafka.properties` may raise
    /// `linger.ms` and `batch.num.messages` and choose `compression.type`. Records are cut
    /// to `kafka.properties."message.max.bytes"` ([`record_limit`]).
    pub fn new(kafka: &KafkaConfig, topic: &str) -> Result<Handover, HandoverError> {
        let base = crate::kafka::client::base(kafka);
        let mut p = base.clone();
        let user_set = |k: &str| {
            kafka.properties.contains_key(k)
                || (k == "compression.type" && kafka.properties.contains_key("compression.codec"))
        };
        for (k, v) in [
            ("linger.ms", "0"),
            ("batch.num.messages", "1"),
            ("compression.type", "lz4"),
        ] {
            if !user_set(k) {
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
            limit: AtomicUsize::new(record_limit(kafka)),
            known: Mutex::new(Known::default()),
            read_seq: AtomicU64::new(0),
            timed_rebase: std::sync::atomic::AtomicBool::new(false),
            sets: AtomicU64::new(0),
            advertised_url: None,
        })
    }

    /// This client with owner id `owner` (see [`owner_of`]) instead of `host:pid`.
    pub fn with_owner(mut self, owner: String) -> Handover {
        self.owner = owner;
        self
    }

    /// This client with `url` (`server.advertised_url`) stamped into every state it
    /// publishes, naming where this instance's API answers.
    pub fn with_advertised_url(mut self, url: Option<String>) -> Handover {
        self.advertised_url = url;
        self
    }

    /// The handover topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// This process's owner id.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The largest record this client sends now (key, value and framing), in bytes.
    pub fn record_limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    fn kafka_err(&self, context: &str) -> impl FnOnce(KafkaError) -> HandoverError {
        let topic = self.topic.clone();
        let context = context.to_string();
        move |e| HandoverError::Kafka {
            topic,
            context,
            source: Box::new(e),
        }
    }
}

#[cfg(test)]
mod tests;
