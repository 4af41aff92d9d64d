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
//! The pure parts (keys, encoding, chunk planning, reassembly, which state wins) are
//! separate from the Kafka I/O ([`Handover`]) and unit-tested below.

use crate::config::KafkaConfig;
use crate::gap::{Gap, Offset, TopicPartition};
use chrono::{DateTime, Utc};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Version of the state document this binary writes; documents of a newer version are
/// ignored (with a warning) rather than misread.
pub const VERSION: u32 = 1;

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

/// The key of a partition's state as a single record: `{audit}\0{topic}\0{partition}`,
/// also the prefix of its chunks' keys ([`chunk_key`]). NUL cannot occur in an audit or
/// topic name, so keys never collide.
pub fn key(audit: &str, tp: &TopicPartition) -> Vec<u8> {
    format!("{audit}\u{0}{}\u{0}{}", tp.topic, tp.partition).into_bytes()
}

/// A partition's state as a JSON document (the value of a single record, the payload a
/// chunked set splits).
pub fn encode(state: &PartitionState) -> Vec<u8> {
    // Serializing plain data (strings, numbers, JSON values) cannot fail.
    serde_json::to_vec(state).unwrap_or_default()
}

/// Decodes a state document read under single-record key `key` (a reassembled set is
/// checked against the key it was assembled for). `Ok(None)`: a tombstone, or a document
/// of a newer format version.
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
/// later write. (Within one partition of the handover topic the log order decides; this
/// decides between partitions, should a partition's state appear in two: written by an
/// older binary to a topic of several partitions, or after a repartitioning.)
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

/// The record size limit the handover producer must respect: `message.max.bytes` as
/// configured in `kafka.properties` (librdkafka refuses a larger record at enqueue), else
/// librdkafka's default. A value librdkafka would not accept either falls back to the
/// default (creating the producer then fails with librdkafka's own message).
pub fn record_limit(kafka: &KafkaConfig) -> usize {
    kafka
        .properties
        .get("message.max.bytes")
        .and_then(|v| v.expose().trim().parse::<usize>().ok())
        .filter(|v| *v > 0)
        .unwrap_or(DEFAULT_MESSAGE_MAX_BYTES)
}

/// The key of chunk `index` of a set in `slot` (0 or 1) of the partition whose single-record
/// key is `base`: `{base}\0{slot}\0{index}`. Keys are per slot and index, not per set, so a
/// compacted topic keeps at most two sets per partition.
pub fn chunk_key(base: &[u8], slot: u8, index: u32) -> Vec<u8> {
    let mut k = base.to_vec();
    k.extend_from_slice(format!("\u{0}{slot}\u{0}{index}").as_bytes());
    k
}

/// What a handover key names: the partition's single record, or one chunk of a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    Single,
    Chunk { slot: u8, index: u32 },
}

/// Splits a handover key into its single-record key (the partition) and what it names;
/// `None` for keys this binary did not write.
fn parse_key(k: &[u8]) -> Option<(&[u8], KeyKind)> {
    let nuls: Vec<usize> = k
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == 0)
        .map(|(i, _)| i)
        .collect();
    match nuls.as_slice() {
        [_, _] => Some((k, KeyKind::Single)),
        [_, _, s, i] => {
            let slot = std::str::from_utf8(&k[s + 1..*i])
                .ok()?
                .parse::<u8>()
                .ok()?;
            let index = std::str::from_utf8(&k[i + 1..]).ok()?.parse::<u32>().ok()?;
            (slot < 2).then_some((&k[..*s], KeyKind::Chunk { slot, index }))
        }
        _ => None,
    }
}

/// The first line of a chunk's value (JSON), followed by `\n` and the chunk's bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkHeader {
    /// Envelope version ([`CHUNK_VERSION`]).
    pub chunk: u32,
    /// The set this chunk belongs to: unique per publish (`owner/nanos/sequence`), so
    /// chunks of two publishes are never joined even when their slots and indexes match.
    pub set: String,
    /// Position of the chunk in the document, from 0.
    pub index: u32,
    /// Chunks in the set.
    pub count: u32,
    /// Length of the whole document.
    pub bytes: u64,
    /// FNV-1a 64 of the whole document: catches chunks joined wrongly whatever the cause.
    pub fnv: u64,
}

/// FNV-1a, 64 bits: no dependency, and enough to tell two documents apart.
fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn chunk_value(h: &ChunkHeader, data: &[u8]) -> Vec<u8> {
    // Serializing plain data cannot fail; JSON text has no raw newline.
    let mut v = serde_json::to_vec(h).unwrap_or_default();
    v.push(b'\n');
    v.extend_from_slice(data);
    v
}

fn parse_chunk(v: &[u8]) -> Option<(ChunkHeader, &[u8])> {
    let nl = v.iter().position(|b| *b == b'\n')?;
    let h: ChunkHeader = serde_json::from_slice(&v[..nl]).ok()?;
    (h.chunk <= CHUNK_VERSION && h.count > 0 && h.index < h.count).then_some((h, &v[nl + 1..]))
}

/// Where the latest complete state of a partition is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Latest {
    /// The single record.
    Single,
    /// The set in this slot.
    Chunks(u8),
}

/// What the handover keys of one partition hold, as far as this process knows (from its
/// read at assignment and its own publishes since).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slots {
    /// The latest complete state; `None`: unknown, or nothing.
    pub latest: Option<Latest>,
    /// Per slot, how many chunk keys (indexes `0..n`) may hold a record: those beyond a new
    /// set's count are deleted once it is acknowledged.
    pub written: [u32; 2],
    /// The single-record key may hold a record (deleted when a set replaces it).
    pub single_live: bool,
}

impl Default for Slots {
    /// Nothing known: write slot 0, and delete a single record that may be there.
    fn default() -> Self {
        Slots {
            latest: None,
            written: [0, 0],
            single_live: true,
        }
    }
}

/// What one partition's publish sends.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The records that carry the state: one single record, or a set's chunks.
    pub records: Vec<(Vec<u8>, Vec<u8>)>,
    /// Tombstones sent once `records` are acknowledged: chunks of older sets that no
    /// longer belong to a live state, or the single record a set replaces.
    pub cleanup: Vec<Vec<u8>>,
    /// What the keys hold once `records` are acknowledged.
    pub done: Slots,
    /// What the keys may hold if the publish fails part way: the latest complete state is
    /// unchanged (or is the single record, which is atomic), and the slot written may hold
    /// more chunks.
    pub failed: Slots,
}

/// Plans the records of one partition's state `doc` under single-record key `base`, each
/// record (key + value + [`FRAMING`]) within `limit` bytes. A document that fits stays one
/// single record (version 1, readable by older binaries); a larger one becomes a set of
/// chunks in the slot that does NOT hold the latest complete state. `Err(need)`: `limit`
/// leaves no room for a chunk; `need` is the smallest that would.
pub fn plan(
    doc: &[u8],
    base: &[u8],
    slots: &Slots,
    limit: usize,
    set: &str,
) -> Result<Plan, usize> {
    if base.len() + doc.len() + FRAMING <= limit {
        let cleanup = (0..2u8)
            .flat_map(|s| (0..slots.written[usize::from(s)]).map(move |i| chunk_key(base, s, i)))
            .collect();
        return Ok(Plan {
            records: vec![(base.to_vec(), doc.to_vec())],
            cleanup,
            done: Slots {
                latest: Some(Latest::Single),
                written: [0, 0],
                single_live: true,
            },
            failed: Slots {
                single_live: true,
                ..*slots
            },
        });
    }
    let slot: u8 = match slots.latest {
        Some(Latest::Chunks(s)) => 1 - s.min(1),
        _ => 0,
    };
    // Worst-case widths: the header and key must fit whatever the final count and index.
    let widest = ChunkHeader {
        chunk: CHUNK_VERSION,
        set: set.to_string(),
        index: u32::MAX,
        count: u32::MAX,
        bytes: u64::MAX,
        fnv: u64::MAX,
    };
    let reserve = FRAMING + chunk_key(base, slot, u32::MAX).len() + chunk_value(&widest, &[]).len();
    let room = limit.saturating_sub(reserve);
    if room < MIN_CHUNK {
        return Err(reserve + MIN_CHUNK);
    }
    let pieces: Vec<&[u8]> = doc.chunks(room).collect();
    let count = u32::try_from(pieces.len()).map_err(|_| usize::MAX)?;
    let (bytes, fnv) = (doc.len() as u64, fnv1a(doc));
    let records = pieces
        .iter()
        .zip(0u32..)
        .map(|(data, index)| {
            let h = ChunkHeader {
                chunk: CHUNK_VERSION,
                set: set.to_string(),
                index,
                count,
                bytes,
                fnv,
            };
            (chunk_key(base, slot, index), chunk_value(&h, data))
        })
        .collect();
    let s = usize::from(slot);
    let mut cleanup: Vec<Vec<u8>> = (count..slots.written[s])
        .map(|i| chunk_key(base, slot, i))
        .collect();
    if slots.single_live {
        cleanup.push(base.to_vec());
    }
    let mut done = Slots {
        latest: Some(Latest::Chunks(slot)),
        written: slots.written,
        single_live: false,
    };
    done.written[s] = count;
    let mut failed = *slots;
    failed.written[s] = failed.written[s].max(count);
    Ok(Plan {
        records,
        cleanup,
        done,
        failed,
    })
}

/// The set a chunk belongs to: everything its header says about the whole, so a chunk
/// whose header disagrees is of another set.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SetId {
    slot: u8,
    set: String,
    count: u32,
    bytes: u64,
    fnv: u64,
}

/// A complete state as read, decoded only at the end (a partition's log may hold many
/// complete states; only the last one is used).
#[derive(Debug, Clone)]
struct Complete {
    doc: Vec<u8>,
    from: Latest,
}

/// One partition's keys in one handover partition, replayed in log order.
#[derive(Debug, Default)]
struct KeyLog {
    /// The live record of each chunk key (slot, index): its set and bytes.
    chunks: HashMap<(u8, u32), (SetId, Vec<u8>)>,
    /// Live chunks per set.
    live: HashMap<SetId, u32>,
    single_live: bool,
    /// The latest complete state, and the one before it (used if the latest does not
    /// decode).
    latest: Option<Complete>,
    before: Option<Complete>,
}

impl KeyLog {
    fn complete(&mut self, c: Complete) {
        self.before = self.latest.replace(c);
    }

    fn forget_chunk(&mut self, at: (u8, u32)) {
        if let Some((id, _)) = self.chunks.remove(&at)
            && let Some(n) = self.live.get_mut(&id)
        {
            *n -= 1;
            if *n == 0 {
                self.live.remove(&id);
            }
        }
    }

    fn push(&mut self, base: &[u8], kind: KeyKind, value: Option<&[u8]>) {
        match (kind, value) {
            (KeyKind::Single, Some(v)) => {
                self.single_live = true;
                self.complete(Complete {
                    doc: v.to_vec(),
                    from: Latest::Single,
                });
            }
            // A tombstone of the single record forgets the state it held, not a set's.
            (KeyKind::Single, None) => {
                self.single_live = false;
                if self
                    .latest
                    .as_ref()
                    .is_some_and(|c| c.from == Latest::Single)
                {
                    self.latest = None;
                    self.before = None;
                }
            }
            (KeyKind::Chunk { slot, index }, v) => {
                // Any record under a chunk key replaces the one before it, as compaction
                // will: that chunk no longer counts for its set.
                self.forget_chunk((slot, index));
                let Some(v) = v else { return };
                let Some((h, data)) = parse_chunk(v).filter(|(h, _)| h.index == index) else {
                    tracing::warn!(key = %String::from_utf8_lossy(base).replace('\0', "/"), slot, index,
                        "unreadable handover chunk (or of a newer gap-auditor) ignored");
                    return;
                };
                let id = SetId {
                    slot,
                    set: h.set,
                    count: h.count,
                    bytes: h.bytes,
                    fnv: h.fnv,
                };
                self.chunks
                    .insert((slot, index), (id.clone(), data.to_vec()));
                let n = self.live.entry(id.clone()).or_insert(0);
                *n += 1;
                if *n == id.count {
                    self.assemble(base, &id);
                }
            }
        }
    }

    /// Called when all `count` chunk keys of `id`'s slot below its count hold its chunks.
    fn assemble(&mut self, base: &[u8], id: &SetId) {
        let mut doc = Vec::with_capacity(usize::try_from(id.bytes).unwrap_or(0));
        for i in 0..id.count {
            match self.chunks.get(&(id.slot, i)) {
                Some((c, data)) if c == id => doc.extend_from_slice(data),
                _ => return,
            }
        }
        if doc.len() as u64 != id.bytes || fnv1a(&doc) != id.fnv {
            tracing::warn!(key = %String::from_utf8_lossy(base).replace('\0', "/"), set = %id.set,
                "handover chunks do not add up to their document (size or checksum): set ignored");
            return;
        }
        self.complete(Complete {
            doc,
            from: Latest::Chunks(id.slot),
        });
    }

    /// What the keys hold, for the next publish.
    fn slots(&self) -> Slots {
        let mut written = [0u32, 0];
        for (slot, index) in self.chunks.keys() {
            let w = &mut written[usize::from(*slot)];
            *w = (*w).max(index + 1);
        }
        Slots {
            latest: self.latest.as_ref().map(|c| c.from),
            written,
            single_live: self.single_live,
        }
    }

    /// The latest complete state that decodes (the one before it if the latest does not).
    fn state(&self, base: &[u8]) -> Option<PartitionState> {
        for c in [&self.latest, &self.before].into_iter().flatten() {
            match decode(base, Some(&c.doc)) {
                Ok(Some(s)) => return Some(s),
                Ok(None) => return None,
                Err(e) => tracing::warn!(error = %e, "unreadable handover state skipped"),
            }
        }
        None
    }
}

/// Rebuilds the latest complete state of some partitions from the handover topic's records,
/// fed in log order per handover partition ([`Reassembler::push`]).
#[derive(Debug)]
pub struct Reassembler {
    /// Single-record key → partition, of the partitions wanted.
    wanted: HashMap<Vec<u8>, TopicPartition>,
    logs: HashMap<(i32, Vec<u8>), KeyLog>,
}

impl Reassembler {
    /// A reassembler for partitions `tps` of `audit`; records of others are skipped.
    pub fn new(audit: &str, tps: &[TopicPartition]) -> Reassembler {
        Reassembler {
            wanted: tps.iter().map(|tp| (key(audit, tp), tp.clone())).collect(),
            logs: HashMap::new(),
        }
    }

    /// Feeds one record of handover partition `partition` (`value` `None`: a tombstone).
    pub fn push(&mut self, partition: i32, key: &[u8], value: Option<&[u8]>) {
        let Some((base, kind)) = parse_key(key) else {
            return;
        };
        if !self.wanted.contains_key(base) {
            return;
        }
        self.logs
            .entry((partition, base.to_vec()))
            .or_default()
            .push(base, kind, value);
    }

    /// The latest complete state of each wanted partition that has one, and what its keys
    /// in handover partition 0 hold (for [`plan`]; every wanted partition has an entry).
    pub fn finish(
        self,
    ) -> (
        HashMap<TopicPartition, PartitionState>,
        HashMap<Vec<u8>, Slots>,
    ) {
        let mut states: HashMap<TopicPartition, PartitionState> = HashMap::new();
        let mut slots: HashMap<Vec<u8>, Slots> = self
            .wanted
            .keys()
            .map(|k| {
                (
                    k.clone(),
                    Slots {
                        single_live: false,
                        ..Slots::default()
                    },
                )
            })
            .collect();
        for ((partition, base), log) in &self.logs {
            if *partition == PARTITION {
                slots.insert(base.clone(), log.slots());
            }
            let Some(tp) = self.wanted.get(base) else {
                continue;
            };
            if let Some(s) = log.state(base) {
                let s = match states.remove(tp) {
                    Some(prev) => newer(prev, s),
                    None => s,
                };
                states.insert(tp.clone(), s);
            }
        }
        (states, slots)
    }
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
    /// What each partition's keys hold (single-record key → [`Slots`]), from the read at
    /// assignment and this process's publishes since.
    slots: Mutex<HashMap<Vec<u8>, Slots>>,
    /// Makes set ids unique within this process.
    sets: AtomicU64,
}

impl std::fmt::Debug for Handover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handover")
            .field("topic", &self.topic)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

/// One record in flight, and which state it carries.
struct Sent {
    state: usize,
    delivery: DeliveryFuture,
}

/// Whether a produce failed because the record is over a size limit (librdkafka's at
/// enqueue, or the broker's / topic's).
fn too_large(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::MessageBatchTooLarge)
    )
}

impl Handover {
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
            slots: Mutex::new(HashMap::new()),
            sets: AtomicU64::new(0),
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

    fn slots_of(&self, base: &[u8]) -> Slots {
        let m = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        m.get(base).copied().unwrap_or_default()
    }

    fn set_slots(&self, base: &[u8], s: Slots) {
        let mut m = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        m.insert(base.to_vec(), s);
    }

    fn new_set_id(&self) -> String {
        let nanos = Utc::now().timestamp_nanos_opt().unwrap_or_default();
        let seq = self.sets.fetch_add(1, Ordering::Relaxed);
        format!("{}/{nanos:x}/{seq}", self.owner)
    }

    /// Creates the topic (one partition, `cleanup.policy=compact`) unless it exists. A
    /// broker that ignores the config still works: only the latest complete state per
    /// partition is ever used, compaction only bounds the topic's size.
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
                        source: Box::new(KafkaError::AdminOp(code)),
                    });
                }
            }
        }
        Ok(())
    }

    /// Publishes each state — one record, or a set of chunks each within the record limit —
    /// and waits until the broker acknowledged every record (`acks=all`). Only then may the
    /// settled offsets of these partitions be committed. A state the broker refuses as too
    /// large is cut again at half the size (up to [`MAX_SHRINKS`] times, kept for later
    /// publishes). After the acknowledgement, chunks older sets left behind are deleted
    /// (tombstones; their failure only leaves garbage the reader ignores).
    pub async fn publish(&self, states: &[PartitionState]) -> Result<(), HandoverError> {
        let docs: Vec<(Vec<u8>, Vec<u8>)> = states
            .iter()
            .map(|s| (key(&s.audit, &s.tp()), encode(s)))
            .collect();
        let mut todo: Vec<usize> = (0..docs.len()).collect();
        let mut cleanup: Vec<DeliveryFuture> = Vec::new();
        let mut shrinks = 0;
        loop {
            let limit = self.record_limit();
            let mut sent: Vec<Sent> = Vec::new();
            let mut plans: HashMap<usize, Plan> = HashMap::new();
            let mut refused: HashSet<usize> = HashSet::new();
            let mut failure: Option<HandoverError> = None;
            'states: for &i in &todo {
                let (base, doc) = &docs[i];
                let plan = plan(doc, base, &self.slots_of(base), limit, &self.new_set_id())
                    .map_err(|need| HandoverError::LimitTooSmall {
                        topic: self.topic.clone(),
                        limit,
                        need,
                    })?;
                // From the first enqueue on, the slot may hold this set's chunks.
                self.set_slots(base, plan.failed);
                for (k, v) in &plan.records {
                    let rec = FutureRecord::to(&self.topic)
                        .partition(PARTITION)
                        .key(k)
                        .payload(v);
                    match self.producer.send_result(rec) {
                        Ok(delivery) => sent.push(Sent { state: i, delivery }),
                        Err((e, _)) if too_large(&e) => {
                            refused.insert(i);
                            continue 'states;
                        }
                        Err((e, _)) => {
                            failure = Some(self.kafka_err("enqueueing a state")(e));
                            break 'states;
                        }
                    }
                }
                plans.insert(i, plan);
            }
            // Everything enqueued is awaited, also after a failure: what reached the broker
            // is what the slots must account for.
            let mut ok: HashSet<usize> = plans.keys().copied().collect();
            for s in sent {
                let e = match s.delivery.await {
                    Ok(Ok(_)) => continue,
                    Ok(Err((e, _))) => e,
                    Err(_) => KafkaError::Canceled,
                };
                ok.remove(&s.state);
                if too_large(&e) {
                    refused.insert(s.state);
                } else if failure.is_none() {
                    failure = Some(self.kafka_err("producing a state")(e));
                }
            }
            for i in ok.iter().filter(|i| !refused.contains(i)) {
                let Some(plan) = plans.remove(i) else {
                    continue;
                };
                self.set_slots(&docs[*i].0, plan.done);
                for k in &plan.cleanup {
                    let rec = FutureRecord::<[u8], [u8]>::to(&self.topic)
                        .partition(PARTITION)
                        .key(k);
                    if let Ok(d) = self.producer.send_result(rec) {
                        cleanup.push(d);
                    }
                }
                let records = plan.records.len();
                if records > 1 {
                    tracing::debug!(topic = %self.topic, partition = %states[*i].tp(), records,
                        bytes = docs[*i].1.len(), "partition state published in chunks");
                }
            }
            if let Some(e) = failure {
                return Err(e);
            }
            if refused.is_empty() {
                break;
            }
            shrinks += 1;
            let smaller = limit / 2;
            if shrinks > MAX_SHRINKS {
                return Err(HandoverError::LimitTooSmall {
                    topic: self.topic.clone(),
                    limit: smaller,
                    need: limit,
                });
            }
            tracing::warn!(topic = %self.topic, refused_at = limit, now = smaller,
                "the broker refused a handover record as too large (its limit is below kafka.properties.\"message.max.bytes\"): cutting partition state into smaller chunks");
            self.limit.store(smaller, Ordering::Relaxed);
            todo = refused.into_iter().collect();
            todo.sort_unstable();
        }
        for d in cleanup {
            if let Ok(Err((e, _))) = d.await {
                tracing::debug!(topic = %self.topic, error = %e, "deleting stale handover chunks failed; they stay until the next publish of their partition replaces them");
            }
        }
        Ok(())
    }

    /// Reads the topic from the beginning to its high watermark (blocking: call it from
    /// `spawn_blocking`) and returns the latest complete state of each of `tps` of `audit`.
    pub fn read(
        &self,
        audit: &str,
        tps: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, PartitionState>, HandoverError> {
        // Until this read succeeds, nothing is known about these partitions' keys: what this
        // process knew from an earlier ownership is stale (another owner wrote since).
        {
            let mut m = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            for tp in tps {
                m.remove(&key(audit, tp));
            }
        }
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
        let mut r = Reassembler::new(audit, tps);
        if !high.is_empty() {
            consumer.assign(&tpl).map_err(self.kafka_err("assigning"))?;
        }
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
            if let Some(k) = m.key() {
                r.push(m.partition(), k, m.payload());
            }
        }
        let (states, slots) = r.finish();
        let mut m = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        m.extend(slots);
        Ok(states)
    }
}

#[cfg(test)]
mod tests;
