//! The record format: keys, single documents, chunk headers and the two chunk slots of a
//! partition (docs/SCALING.md, "Record format").

use super::{CHUNK_VERSION, HandoverError, PartitionState, VERSION};
use crate::handover::delta::DeltaId;
use crate::types::{Offset, TopicPartition};
use serde::{Deserialize, Serialize};

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
/// higher generation, then `b` (the caller feeds them in the topic's own order). Never the
/// writers' clocks: those of two hosts do not order their writes. (Within one partition of
/// the handover topic the log order decides; this decides between partitions, should a
/// partition's state appear in two: written by an older binary to a topic of several
/// partitions, or after a repartitioning.)
pub fn newer(a: PartitionState, b: PartitionState) -> PartitionState {
    if (b.settled, b.generation) >= (a.settled, a.generation) {
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

/// The key of chunk `index` of a set in `slot` (0 or 1) of the partition whose single-record
/// key is `base`: `{base}\0{slot}\0{index}`. Keys are per slot and index, not per set, so a
/// compacted topic keeps at most two sets per partition.
pub fn chunk_key(base: &[u8], slot: u8, index: u32) -> Vec<u8> {
    let mut k = base.to_vec();
    k.extend_from_slice(format!("\u{0}{slot}\u{0}{index}").as_bytes());
    k
}

/// The key of the delta of generation `generation` on the base `base_id` of the partition
/// whose single-record key is `base`: `{base}\0d\0{generation}.{base_id}` (record format 2).
/// A delta too large for one record is chunked under it as a state is under `base`
/// ([`chunk_key`]). Each delta has its own key, never another chain's: a delta is never
/// overwritten in place, not even by another owner writing the same generation on its own
/// base (a zombie owner's record cannot replace the new owner's).
pub fn delta_key(base: &[u8], generation: u64, base_id: &str) -> Vec<u8> {
    let mut k = base.to_vec();
    k.extend_from_slice(format!("\u{0}d\u{0}{generation}.{base_id}").as_bytes());
    k
}

/// What a handover key names: the partition's single record, or one chunk of a set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyKind {
    Single,
    Chunk { slot: u8, index: u32 },
}

/// Splits a handover key into its partition's single-record key, the delta it belongs to
/// (`None`: the partition's base state) and what it names; `None` for keys this binary did
/// not write.
pub(super) fn parse_key(k: &[u8]) -> Option<(&[u8], Option<DeltaId>, KeyKind)> {
    let nuls: Vec<usize> = k
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == 0)
        .map(|(i, _)| i)
        .collect();
    let num = |from: usize, to: usize| std::str::from_utf8(&k[from..to]).ok();
    let chunk = |s: usize, i: usize| -> Option<KeyKind> {
        let slot = num(s + 1, i)?.parse::<u8>().ok()?;
        let index = num(i + 1, k.len())?.parse::<u32>().ok()?;
        (slot < 2).then_some(KeyKind::Chunk { slot, index })
    };
    // `{generation}.{base id}`; a key of an earlier build without the id names no base.
    let delta = |from: usize, to: usize| -> Option<DeltaId> {
        let text = num(from, to)?;
        let (g, id) = text.split_once('.').unwrap_or((text, ""));
        Some((g.parse::<u64>().ok()?, id.to_string()))
    };
    match nuls.as_slice() {
        [_, _] => Some((k, None, KeyKind::Single)),
        [_, _, d, g] if &k[d + 1..*g] == b"d" => {
            Some((&k[..*d], Some(delta(g + 1, k.len())?), KeyKind::Single))
        }
        [_, _, s, i] => Some((&k[..*s], None, chunk(*s, *i)?)),
        [_, _, d, g, s, i] if &k[d + 1..*g] == b"d" => {
            Some((&k[..*d], Some(delta(g + 1, *s)?), chunk(*s, *i)?))
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
pub(super) fn fnv1a(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

pub(super) fn chunk_value(h: &ChunkHeader, data: &[u8]) -> Vec<u8> {
    // Serializing plain data cannot fail; JSON text has no raw newline.
    let mut v = serde_json::to_vec(h).unwrap_or_default();
    v.push(b'\n');
    v.extend_from_slice(data);
    v
}

pub(super) fn parse_chunk(v: &[u8]) -> Option<(ChunkHeader, &[u8])> {
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
