//! Retired gaps on the handover (record format 3, issue 41): a partition's base and deltas
//! carry only what its ledger holds in memory and the *aggregate* of its retired gaps
//! ([`crate::ledger::RetiredGaps`]: enough for completeness, the gauges and DataLoss at
//! once); the retired gaps themselves (given up, final, possibly millions after a day-long
//! incident) travel apart, on a compacted side topic `{handover topic}.retired`
//! ([`side_topic`]), in *chunks*: one record per partition and [`SPAN`] offsets, keyed
//! `{audit}\0{topic}\0{partition}\0r\0{chunk}\0{term}` ([`chunk_key`]), whose value is every retired
//! gap of the owner's store starting in that range, whatever its state (an acknowledged
//! one too, so an acknowledgement rewrites only its own chunk and a reader that applies
//! the chunks in log order ends with the latest of each).
//!
//! So a takeover reads the handover topic only (bounded by the ledger's own bounds) and the
//! new owner imports the chunks into its store afterwards, a bounded number of records per
//! round ([`IMPORT_RECORDS`]), from a cursor on the side topic; a chunk holds at most
//! `SPAN` gaps (gaps of one epoch never share an offset), so a record stays far below a
//! broker's default limit.
//!
//! The pure parts (layout, encoding, validation) live here; the Kafka I/O is in
//! [`Handover::publish_retired`] and [`Handover::read_retired`].

use super::{Handover, HandoverError, PARTITION, is_zero};
use crate::gap::Gap;
use crate::handover::codec::key;
use crate::types::{Offset, TopicPartition};
use chrono::{DateTime, Utc};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::FutureRecord;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Offsets per chunk. 64: a chunk of one-record gaps at every second offset (the densest a
/// loss can be) holds 32 gaps, about 30 kB of JSON: within a 1 MB record limit by far, and
/// within the 100 kB some brokers are set to.
pub const SPAN: i64 = 64;

/// Rows of one chunk a read of the store takes at most: a chunk holds at most [`SPAN`]
/// gaps of one log epoch, so more only guards against a store that says otherwise (a read
/// that reaches it is refused, never published cut).
pub const CHUNK_ROWS: usize = 64 * SPAN as usize;

/// Version of the chunk document this binary writes; newer chunks are refused (the import
/// stops with the reason: never a guess).
pub const RETIRED_VERSION: u32 = 1;

/// Chunks of the imported partitions one round of an import applies at most (each at most
/// [`SPAN`] gaps), and their bytes ([`IMPORT_BYTES`]), whichever comes first: bounds the
/// memory and the store work of an import round. Sparse given-up gaps (one per chunk,
/// about 1 kB) go 8,192 a round; dense chunks (about 30 kB) about 280 (review item 8:
/// 256 chunks a round made a day of sparse gaps an import of days).
pub const IMPORT_RECORDS: usize = 8192;

/// Bytes of chunk values of the imported partitions one import round applies at most.
pub const IMPORT_BYTES: usize = 8 << 20;

/// Changed chunks (of gaps retired, acknowledged or marked since the last publish) one
/// round publishes at most, over all partitions; the rest go in the next rounds, their
/// partitions' states waiting for them (review item 9). 256 chunks are at most 8,192 gaps,
/// as a sweep step.
pub const CHANGED_CHUNKS: usize = 256;

/// Retired gap rows one round of a sweep (publishing a store's retired gaps as chunks,
/// see the audit) reads at most.
pub const SWEEP_ROWS: usize = 8192;

/// Side-topic keys of older terms an owner tombstones at most per round, once its state
/// under its own term is acknowledged (see the audit's `retired_flow`).
pub const GARBAGE_KEYS: usize = 1024;

/// The side topic of handover topic `topic`.
pub fn side_topic(topic: &str) -> String {
    format!("{topic}.retired")
}

/// The chunk a gap starting at `first` belongs to.
pub fn chunk_of(first: Offset) -> i64 {
    first.div_euclid(SPAN)
}

/// The offsets of chunk `chunk`: `[lo, hi)`.
pub fn chunk_range(chunk: i64) -> (Offset, Offset) {
    let lo = chunk.saturating_mul(SPAN);
    (lo, lo.saturating_add(SPAN))
}

/// The key of chunk `chunk` of partition `tp` of `audit` as written by `owner` under its
/// ownership term `term`: each owner writes its own keys, and a state names the term and
/// owner whose keys hold its given-up gaps (its own: [`PartitionState::term`] and
/// [`PartitionState::owner`]), so a version written by anyone else (a zombie, a newer owner
/// before its first state landed, another owner that computed the same term) never
/// replaces the chunk a state counts, whatever compaction keeps.
///
/// [`PartitionState::term`]: super::PartitionState::term
/// [`PartitionState::owner`]: super::PartitionState::owner
pub fn chunk_key(audit: &str, tp: &TopicPartition, chunk: i64, term: u64, owner: &str) -> Vec<u8> {
    let mut k = key(audit, tp);
    k.extend_from_slice(format!("\0r\0{chunk}\0{term}\0{owner}").as_bytes());
    k
}

/// A chunk key's partition key (as [`key`]), chunk, term and owner, `None` for any other
/// key.
pub fn parse_chunk_key(k: &[u8]) -> Option<(&[u8], i64, u64, &str)> {
    let nuls: Vec<usize> = k
        .iter()
        .enumerate()
        .filter(|(_, b)| **b == 0)
        .map(|(i, _)| i)
        .collect();
    match nuls.as_slice() {
        [_, _, r, c, t, o] if &k[r + 1..*c] == b"r" => {
            let chunk = std::str::from_utf8(&k[c + 1..*t]).ok()?.parse().ok()?;
            let term = std::str::from_utf8(&k[t + 1..*o]).ok()?.parse().ok()?;
            let owner = std::str::from_utf8(&k[o + 1..]).ok()?;
            Some((&k[..*r], chunk, term, owner))
        }
        _ => None,
    }
}

/// One chunk of a partition's retired gaps, as published to the side topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetiredChunk {
    /// Document version ([`RETIRED_VERSION`]).
    pub retired: u32,
    /// Audit name.
    pub audit: String,
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The chunk: its gaps start in [`chunk_range`] of it.
    pub chunk: i64,
    /// The retired gaps of the owner's store starting in the chunk, in offset order.
    pub gaps: Vec<Gap>,
    /// The writer's ownership term of the partition ([`PartitionState::term`], stamped by
    /// [`Handover::publish_retired`]), also in the key ([`chunk_key`]): an import applies
    /// only versions of the term the state it took names.
    ///
    /// [`PartitionState::term`]: super::PartitionState::term
    #[serde(default, skip_serializing_if = "is_zero")]
    pub term: u64,
    /// When the owner wrote it (for operators only).
    pub written_at: DateTime<Utc>,
    /// Who wrote it (`host:pid`), for operators.
    pub owner: String,
}

impl RetiredChunk {
    /// The partition.
    pub fn tp(&self) -> TopicPartition {
        TopicPartition::new(self.topic.clone(), self.partition)
    }
}

/// Bytes of an acknowledgement's reason a chunk carries at most (an operator's reason is
/// free text of any length; 32 of them unbounded could pass any record limit, and a chunk
/// refused as too large holds its partition for ever: review item 9). A longer one is cut
/// at a character boundary and ends with [`REASON_CUT`]; the owner's store keeps it whole.
pub const CHUNK_REASON_BYTES: usize = 1024;

/// What ends a reason cut to [`CHUNK_REASON_BYTES`].
pub const REASON_CUT: &str = " […]";

/// `reason` as a chunk carries it (see [`CHUNK_REASON_BYTES`]).
pub fn chunk_reason(reason: String) -> String {
    if reason.len() <= CHUNK_REASON_BYTES {
        return reason;
    }
    let mut end = CHUNK_REASON_BYTES - REASON_CUT.len();
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{REASON_CUT}", &reason[..end])
}

/// Splits `gaps` (retired gaps of partition `tp` of `audit`, any order) into chunk
/// documents, in chunk order, each with its gaps in offset order, their acknowledgement
/// reasons cut to [`CHUNK_REASON_BYTES`].
pub fn chunks(
    audit: &str,
    tp: &TopicPartition,
    gaps: Vec<Gap>,
    owner: &str,
    now: DateTime<Utc>,
) -> Vec<RetiredChunk> {
    let mut by: BTreeMap<i64, Vec<Gap>> = BTreeMap::new();
    for mut g in gaps {
        g.ack_reason = g.ack_reason.map(chunk_reason);
        by.entry(chunk_of(g.first_offset)).or_default().push(g);
    }
    by.into_iter()
        .map(|(chunk, mut gaps)| {
            gaps.sort_by(|a, b| (a.first_offset, &a.id).cmp(&(b.first_offset, &b.id)));
            RetiredChunk {
                retired: RETIRED_VERSION,
                audit: audit.to_string(),
                topic: tp.topic.clone(),
                partition: tp.partition,
                chunk,
                gaps,
                term: 0,
                written_at: now,
                owner: owner.to_string(),
            }
        })
        .collect()
}

/// Chunk `chunk` of partition `tp` of `audit` holding no gap: published where the owner's
/// store no longer holds a retired gap of the chunk's offsets while the side topic may hold
/// an older version of the owner's with some (its rows all left the store), so a next
/// owner's import drops those instead of taking them.
pub fn empty_chunk(
    audit: &str,
    tp: &TopicPartition,
    chunk: i64,
    owner: &str,
    now: DateTime<Utc>,
) -> RetiredChunk {
    RetiredChunk {
        retired: RETIRED_VERSION,
        audit: audit.to_string(),
        topic: tp.topic.clone(),
        partition: tp.partition,
        chunk,
        gaps: Vec::new(),
        term: 0,
        written_at: now,
        owner: owner.to_string(),
    }
}

/// The stand-in for the gaps of chunk `chunk` of `tp` that an import could not read (its
/// record does not decode, review of format 3, F5): one given-up gap over the chunk's 64
/// offsets, `unverifiable` (this owner does not know which of them the previous owner found
/// missing), size unknown, so it blocks completeness, and shows in `gaps` and /api/gaps,
/// until an operator acknowledges it or a readable version of the chunk replaces it. Never
/// counted as records lost. Its id is the one a gap at the chunk's first offset has, so
/// it travels in this owner's chunks like any given-up gap.
pub fn unreadable_chunk_gap(
    audit: &str,
    tp: &TopicPartition,
    chunk: i64,
    now: DateTime<Utc>,
) -> Gap {
    let (lo, hi) = chunk_range(chunk);
    Gap {
        id: Gap::make_id(audit, &tp.topic, tp.partition, lo),
        audit: audit.to_string(),
        topic: tp.topic.clone(),
        partition: tp.partition,
        first_offset: lo,
        last_offset: hi - 1,
        missing_records: SPAN.unsigned_abs(),
        size_known: false,
        first_timestamp: None,
        last_timestamp: None,
        detected_at: now,
        state: crate::gap::GapState::Unverifiable,
        unrecoverable_at: None,
        cause: crate::gap::GapCause::Unknown,
        pipeline_commit_from: None,
        pipeline_commit_to: None,
        pipeline_commit_at: None,
        evidence: None,
        shared_key: false,
        replayed_at: None,
        ack_reason: None,
    }
}

/// A chunk's record value.
pub fn encode_chunk(c: &RetiredChunk) -> Vec<u8> {
    // Serializing plain data cannot fail.
    serde_json::to_vec(c).unwrap_or_default()
}

/// Decodes the record `key` → `value` of the side topic: the chunk, checked against its
/// key (partition, chunk) and its gaps against the chunk (partition, offset range). Any
/// mismatch is an error: a wrong record must stop the import, never be imported.
pub fn decode_chunk(key: &[u8], value: &[u8]) -> Result<RetiredChunk, HandoverError> {
    let bad = |what: String| HandoverError::Decode {
        key: String::from_utf8_lossy(key).replace('\0', "/"),
        what,
    };
    let (base, chunk, term, owner) =
        parse_chunk_key(key).ok_or_else(|| bad("not a chunk key".into()))?;
    let c: RetiredChunk =
        serde_json::from_slice(value).map_err(|e| bad(format!("not a chunk document: {e}")))?;
    if c.term != term || c.owner != owner {
        return Err(bad(format!(
            "the document is of term {} by {}, its key of term {term} by {owner}",
            c.term, c.owner
        )));
    }
    if c.retired > RETIRED_VERSION {
        return Err(bad(format!(
            "chunk version {} is newer than this binary's {RETIRED_VERSION}",
            c.retired
        )));
    }
    if key_of(&c) != base || c.chunk != chunk {
        return Err(bad(format!(
            "the document is chunk {} of {}/{}-{}, not its key's",
            c.chunk, c.audit, c.topic, c.partition
        )));
    }
    let (lo, hi) = chunk_range(chunk);
    for g in &c.gaps {
        if g.audit != c.audit || g.topic != c.topic || g.partition != c.partition {
            return Err(bad(format!("gap {} is of another partition", g.id)));
        }
        if g.first_offset < lo || g.first_offset >= hi || g.last_offset < g.first_offset {
            return Err(bad(format!(
                "gap {} ({}..={}) does not start in the chunk's offsets {lo}..{hi}",
                g.id, g.first_offset, g.last_offset
            )));
        }
        // The store keys rows by id: a gap whose id names another partition or offset
        // would overwrite that row (e.g. turn another partition's loss 'late').
        if !id_names(g) {
            return Err(bad(format!(
                "gap {} is not the id of {}/{}-{} at offset {}",
                g.id, g.audit, g.topic, g.partition, g.first_offset
            )));
        }
    }
    Ok(c)
}

/// Whether `g.id` is the id its own fields make ([`Gap::make_id_in`], any epoch).
fn id_names(g: &Gap) -> bool {
    let base = Gap::make_id(&g.audit, &g.topic, g.partition, g.first_offset);
    match g.id.strip_prefix(&base) {
        Some("") => true,
        // `@epoch` as `make_id_in` writes it (above 0, no sign or leading zero), so one
        // gap has one id only.
        Some(rest) => rest.strip_prefix('@').is_some_and(|e| {
            e.parse::<u32>().is_ok_and(|n| {
                n > 0 && Gap::make_id_in(&g.audit, &g.topic, g.partition, g.first_offset, n) == g.id
            })
        }),
        None => false,
    }
}

fn key_of(c: &RetiredChunk) -> Vec<u8> {
    key(&c.audit, &c.tp())
}

/// Of `chunks` (side-topic records of one partition, in log order): those an import applies,
/// the versions written by `owner` under `term` (what the state it took names); of those
/// the later in the log wins, as one owner rewrites a chunk whole at each change. Versions
/// by anyone else are not that state's: a zombie owner's rewrite from a stale store, a newer
/// owner's written before its own state (which would name them) was published, or another
/// owner's that computed the same term.
pub fn of_state(chunks: Vec<RetiredChunk>, term: u64, owner: &str) -> Vec<RetiredChunk> {
    chunks
        .into_iter()
        .filter(|c| c.term == term && c.owner == owner)
        .collect()
}

/// Where an import of retired chunks stands: the next side-topic offset to read and the
/// end (the side topic's high watermark at the import's first read: the previous owner
/// wrote every chunk of its state before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportCursor {
    /// The next offset to read.
    pub next: Offset,
    /// Read up to here (exclusive).
    pub end: Offset,
}

impl ImportCursor {
    /// A new import: from the side topic's start to its high watermark at the first read
    /// (nothing of the side topic is read on the takeover path).
    pub fn start() -> ImportCursor {
        ImportCursor {
            next: 0,
            end: Offset::MAX,
        }
    }

    /// Whether every record up to the end was imported.
    pub fn done(&self) -> bool {
        self.next >= self.end
    }
}

/// One import read of the side topic ([`Handover::read_retired`]).
#[derive(Debug)]
pub struct RetiredRead {
    /// The chunks of the partitions asked for, in log order.
    pub chunks: Vec<RetiredChunk>,
    /// Their records that did not decode (skipped: the cursor passed them).
    pub skipped: Vec<SkippedChunk>,
    /// Where the next read starts.
    pub cursor: ImportCursor,
}

/// A side-topic record of a partition being imported that did not decode: skipped, so the
/// gaps it held (if it held any) are unknown to the importing owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedChunk {
    /// Its partition (from its key).
    pub tp: TopicPartition,
    /// Its chunk (from its key).
    pub chunk: i64,
    /// Its term (from its key).
    pub term: u64,
    /// Its writer (from its key).
    pub owner: String,
    /// Its offset on the side topic.
    pub offset: Offset,
    /// Why it was refused.
    pub error: String,
}

impl SkippedChunk {
    /// What an operator is told (log and the partition's `state_problem`).
    pub fn describe(&self, side: &str) -> String {
        let (lo, hi) = chunk_range(self.chunk);
        format!(
            "retired-gaps chunk {} (offsets {lo}..{hi}) of {} at offset {} of {side} skipped: {}; the given-up gaps it held are unknown to this owner: an unverifiable gap over those offsets stands in for them (it blocks completeness until acknowledged or a readable version of the chunk replaces it)",
            self.chunk, self.tp, self.offset, self.error
        )
    }
}

/// Records of the side topic one import round reads at most, of any partition (those of
/// other partitions are skipped after their key, not kept), and their bytes
/// ([`SCAN_BYTES`]).
const SCAN_RECORDS: usize = 65_536;

/// Bytes of side-topic values one import round reads at most, of any partition.
const SCAN_BYTES: usize = 32 << 20;

/// How long one import round may read the side topic.
const IMPORT_READ_TIMEOUT: Duration = Duration::from_secs(5);

impl Handover {
    /// Publishes `chunks` to the side topic and waits for the broker's acknowledgement of
    /// every one: only then may a state counting them be published (and its settled offset
    /// committed). A chunk the broker or librdkafka refuses as too large is an error (the
    /// partition stays held), never dropped.
    pub async fn publish_retired(&self, chunks: &[RetiredChunk]) -> Result<(), HandoverError> {
        let records = chunks
            .iter()
            .map(|c| {
                let term = self.term_of(&key(&c.audit, &c.tp()));
                let k = chunk_key(&c.audit, &c.tp(), c.chunk, term, &self.owner);
                let v = encode_chunk(&RetiredChunk {
                    term,
                    owner: self.owner.clone(),
                    ..c.clone()
                });
                (k, Some(v))
            })
            .collect();
        self.send_side(records, "retired gaps").await
    }

    /// Tombstones the chunk keys `keys` (`(chunk, term, owner)`) of partition `tp` of
    /// `audit`: versions no state names any more (an owner's state under a newer term
    /// landed), so compaction removes them and the side topic keeps one set of keys per
    /// partition, not one per takeover. Never a key of this process's own.
    pub async fn tombstone_retired(
        &self,
        audit: &str,
        tp: &TopicPartition,
        keys: &[(i64, u64, String)],
    ) -> Result<(), HandoverError> {
        let own = self.term_of(&key(audit, tp));
        let records = keys
            .iter()
            .filter(|(_, term, owner)| (*term, owner.as_str()) != (own, self.owner.as_str()))
            .map(|(chunk, term, owner)| (chunk_key(audit, tp, *chunk, *term, owner), None))
            .collect();
        self.send_side(records, "tombstones of older terms' retired gaps")
            .await
    }

    /// Sends `records` (key, value or a tombstone) to the side topic and awaits every one.
    async fn send_side(
        &self,
        records: Vec<(Vec<u8>, Option<Vec<u8>>)>,
        what: &str,
    ) -> Result<(), HandoverError> {
        let side = side_topic(&self.topic);
        let err = |context: String, e: KafkaError| HandoverError::Kafka {
            topic: side.clone(),
            context,
            source: Box::new(e),
        };
        let mut sent = Vec::with_capacity(records.len());
        let mut failure = None;
        for (k, v) in &records {
            let mut waited = false;
            loop {
                let mut rec = FutureRecord::to(&side).partition(PARTITION).key(k);
                if let Some(v) = v {
                    rec = rec.payload(v);
                }
                match self.producer.send_result(rec) {
                    Ok(d) => sent.push(d),
                    // A full queue (a sweep of many chunks): what is in flight is awaited
                    // once, then the record is tried again.
                    Err((e, _))
                        if !waited
                            && e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) =>
                    {
                        waited = true;
                        for d in sent.drain(..) {
                            match d.await {
                                Ok(Ok(_)) => {}
                                Ok(Err((e, _))) => {
                                    failure.get_or_insert(err(format!("producing {what}"), e));
                                }
                                Err(_) => {
                                    failure.get_or_insert(err(
                                        format!("producing {what}"),
                                        KafkaError::Canceled,
                                    ));
                                }
                            }
                        }
                        continue;
                    }
                    Err((e, _)) => {
                        failure.get_or_insert(err(format!("enqueueing {what}"), e));
                    }
                }
                break;
            }
            if failure.is_some() {
                break;
            }
        }
        // Everything enqueued is awaited, also after a failure.
        for d in sent {
            match d.await {
                Ok(Ok(_)) => {}
                Ok(Err((e, _))) => {
                    failure.get_or_insert(err(format!("producing {what}"), e));
                }
                Err(_) => {
                    failure.get_or_insert(err(format!("producing {what}"), KafkaError::Canceled));
                }
            }
        }
        failure.map_or(Ok(()), Err)
    }

    fn side_reader(&self) -> Result<BaseConsumer, HandoverError> {
        let mut c = self.base.clone();
        // As the state reader: assign() only, never joins the group, commits nothing.
        c.set(
            "group.id",
            format!("gap-auditor-handover-reader-{}", self.owner),
        )
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        // librdkafka prefetches up to 64 MB by default: an import round reads a few MB.
        .set("queued.max.messages.kbytes", "8192");
        c.create()
            .map_err(self.kafka_err("creating a reader of retired gaps"))
    }

    /// Reads at most [`IMPORT_RECORDS`] records of the side topic from `cursor` (blocking)
    /// and returns the chunks among them of the partitions `tps` of `audit`, in log order,
    /// with the cursor after them. A record of theirs that does not decode is skipped and
    /// returned in [`RetiredRead::skipped`] (review item 4: stopping there held the
    /// partition for ever; its gaps are then unknown to the importer, which says so).
    pub fn read_retired(
        &self,
        audit: &str,
        tps: &[TopicPartition],
        cursor: ImportCursor,
    ) -> Result<RetiredRead, HandoverError> {
        let side = side_topic(&self.topic);
        let c = self.side_reader()?;
        // Compaction may have removed the records below the low watermark: start there. An
        // import's end is the high watermark at its first read ([`ImportCursor::start`]):
        // the previous owner wrote every chunk before its last state, and this instance
        // writes none of the partition while it imports.
        let (low, high) = c
            .fetch_watermarks(&side, PARTITION, Duration::from_secs(10))
            .map_err(self.kafka_err("reading the watermarks of retired gaps"))?;
        let cursor = ImportCursor {
            end: if cursor.end == Offset::MAX {
                high
            } else {
                cursor.end
            },
            ..cursor
        };
        let mut at = cursor.next.max(low);
        if at >= cursor.end {
            return Ok(RetiredRead {
                chunks: Vec::new(),
                skipped: Vec::new(),
                cursor: ImportCursor { next: at, ..cursor },
            });
        }
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset(&side, PARTITION, rdkafka::Offset::Offset(at))
            .map_err(self.kafka_err("assigning the retired gaps"))?;
        c.assign(&tpl)
            .map_err(self.kafka_err("assigning the retired gaps"))?;
        let wanted: HashMap<Vec<u8>, &TopicPartition> =
            tps.iter().map(|tp| (key(audit, tp), tp)).collect();
        let mut out = Vec::new();
        let mut skipped = Vec::new();
        let (mut read, mut scanned, mut taken) = (0, 0, 0);
        let deadline = Instant::now() + IMPORT_READ_TIMEOUT;
        while at < cursor.end
            && out.len() < IMPORT_RECORDS
            && taken < IMPORT_BYTES
            && read < SCAN_RECORDS
            && scanned < SCAN_BYTES
            && Instant::now() < deadline
        {
            let Some(m) = c.poll(Duration::from_millis(200)) else {
                continue;
            };
            let m = m.map_err(self.kafka_err("reading retired gaps"))?;
            if m.offset() < at {
                continue;
            }
            if m.offset() >= cursor.end {
                at = cursor.end;
                break;
            }
            read += 1;
            scanned += m.payload_len();
            if let (Some(k), Some(v)) = (m.key(), m.payload())
                && let Some((tp, chunk, term, owner)) =
                    parse_chunk_key(k).and_then(|(base, chunk, term, owner)| {
                        Some((*wanted.get(base)?, chunk, term, owner))
                    })
            {
                taken += v.len();
                match decode_chunk(k, v) {
                    Ok(c) => out.push(c),
                    Err(e) => skipped.push(SkippedChunk {
                        tp: tp.clone(),
                        chunk,
                        term,
                        owner: owner.to_string(),
                        offset: m.offset(),
                        error: e.to_string(),
                    }),
                }
            }
            at = m.offset() + 1;
        }
        Ok(RetiredRead {
            chunks: out,
            skipped,
            cursor: ImportCursor { next: at, ..cursor },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gap::GapState;
    use crate::handover::FRAMING;
    use crate::handover::codec::{delta_key, parse_key};
    use proptest::prelude::*;

    fn gap(first: Offset) -> Gap {
        Gap {
            id: Gap::make_id("a", "logs", 3, first),
            audit: "a".into(),
            topic: "logs".into(),
            partition: 3,
            first_offset: first,
            last_offset: first,
            missing_records: 1,
            size_known: true,
            first_timestamp: None,
            last_timestamp: None,
            detected_at: Utc::now(),
            state: GapState::Open,
            unrecoverable_at: None,
            cause: crate::gap::GapCause::DroppedInFlight,
            pipeline_commit_from: None,
            pipeline_commit_to: None,
            pipeline_commit_at: None,
            evidence: None,
            shared_key: false,
            replayed_at: None,
            ack_reason: Some("a reason that is long enough to look like a real one".into()),
        }
    }

    #[test]
    fn chunk_keys_round_trip_and_are_not_state_keys() {
        let tp = TopicPartition::new("logs", 3);
        let k = chunk_key("a", &tp, 42, 7, "host:x");
        assert_eq!(
            parse_chunk_key(&k),
            Some((key("a", &tp).as_slice(), 42, 7, "host:x"))
        );
        assert_eq!(parse_chunk_key(&key("a", &tp)), None);
        assert_eq!(parse_chunk_key(&delta_key(&key("a", &tp), 3, "x")), None);
        // The state reader skips chunk keys (they are on another topic, but a mix-up must
        // not make one a state).
        assert!(parse_key(&k).is_none_or(|(b, d, _)| d.is_none() && b != key("a", &tp).as_slice()));
    }

    #[test]
    fn a_chunk_round_trips_and_a_wrong_one_is_refused() {
        let tp = TopicPartition::new("logs", 3);
        let cs = chunks(
            "a",
            &tp,
            vec![gap(300), gap(1), gap(3), gap(257)],
            "me",
            Utc::now(),
        );
        assert_eq!(cs.len(), 2);
        assert_eq!(
            cs[0]
                .gaps
                .iter()
                .map(|g| g.first_offset)
                .collect::<Vec<_>>(),
            [1, 3]
        );
        for c in &cs {
            let k = chunk_key("a", &tp, c.chunk, c.term, &c.owner);
            assert_eq!(&decode_chunk(&k, &encode_chunk(c)).expect("decodes"), c);
            // Under another chunk's or term's key, or with a gap moved out of its range:
            // refused.
            assert!(
                decode_chunk(
                    &chunk_key("a", &tp, c.chunk + 1, c.term, &c.owner),
                    &encode_chunk(c)
                )
                .is_err()
            );
            assert!(
                decode_chunk(
                    &chunk_key("a", &tp, c.chunk, c.term + 1, &c.owner),
                    &encode_chunk(c)
                )
                .is_err()
            );
            assert!(
                decode_chunk(
                    &chunk_key("a", &tp, c.chunk, c.term, "other"),
                    &encode_chunk(c)
                )
                .is_err()
            );
            let mut moved = c.clone();
            moved.gaps[0].first_offset += SPAN;
            moved.gaps[0].last_offset += SPAN;
            assert!(decode_chunk(&k, &encode_chunk(&moved)).is_err());
            let mut newer = c.clone();
            newer.retired = RETIRED_VERSION + 1;
            assert!(decode_chunk(&k, &encode_chunk(&newer)).is_err());
        }
    }

    /// Review item 5: a gap's id must be the one its chunk's partition and its own first
    /// offset make (an epoch allowed), or it would rewrite another gap's row.
    #[test]
    fn a_gap_whose_id_names_another_gap_is_refused() {
        let tp = TopicPartition::new("logs", 3);
        let c = chunks("a", &tp, vec![gap(1), gap(3)], "me", Utc::now()).remove(0);
        let k = chunk_key("a", &tp, c.chunk, c.term, &c.owner);
        let with_id = |id: String| {
            let mut x = c.clone();
            x.gaps[1].id = id;
            decode_chunk(&k, &encode_chunk(&x))
        };
        // Its own id, with or without an epoch: accepted.
        assert!(with_id(Gap::make_id("a", "logs", 3, 3)).is_ok());
        assert!(with_id(Gap::make_id_in("a", "logs", 3, 3, 2)).is_ok());
        // Another partition's, another offset's, another audit's, or a bent epoch: refused.
        for id in [
            Gap::make_id("a", "logs", 4, 3),
            Gap::make_id("a", "logs", 3, 5),
            Gap::make_id("b", "logs", 3, 3),
            Gap::make_id("a", "other", 3, 3),
            format!("{}@0", Gap::make_id("a", "logs", 3, 3)),
            format!("{}@02", Gap::make_id("a", "logs", 3, 3)),
            format!("{}@x", Gap::make_id("a", "logs", 3, 3)),
            format!("{}0", Gap::make_id("a", "logs", 3, 3)),
            "anything".to_string(),
        ] {
            assert!(with_id(id.clone()).is_err(), "{id} accepted");
        }
    }

    #[test]
    fn a_dense_chunk_fits_a_default_record() {
        let tp = TopicPartition::new("logs", 3);
        let cs = chunks(
            "a",
            &tp,
            (0..SPAN / 2).map(|i| gap(2 * i)).collect(),
            "me",
            Utc::now(),
        );
        assert_eq!(cs.len(), 1);
        let bytes = encode_chunk(&cs[0]).len()
            + chunk_key("a", &tp, 0, u64::MAX, "a-long-host-name:0123456789abcdef").len()
            + FRAMING;
        assert!(bytes < 50_000, "{bytes} bytes for the densest chunk");
    }

    /// Review item 9: a chunk of the densest gaps, each acknowledged with a 1 MB reason,
    /// stays within a 100 kB record limit (the reasons cut, at a character boundary).
    #[test]
    fn a_chunk_of_long_acknowledgement_reasons_stays_small() {
        let tp = TopicPartition::new("logs", 3);
        let long = "é".repeat(500_000);
        let cs = chunks(
            "a",
            &tp,
            (0..SPAN / 2)
                .map(|i| Gap {
                    state: GapState::Acknowledged,
                    ack_reason: Some(long.clone()),
                    ..gap(2 * i)
                })
                .collect(),
            "me",
            Utc::now(),
        );
        assert_eq!(cs.len(), 1);
        let bytes = encode_chunk(&cs[0]).len()
            + chunk_key("a", &tp, 0, u64::MAX, "a-long-host-name:0123456789abcdef").len()
            + FRAMING;
        assert!(bytes < 100_000, "{bytes} bytes");
        let r = cs[0].gaps[0].ack_reason.clone().expect("a reason");
        assert!(
            r.len() <= CHUNK_REASON_BYTES && r.ends_with(REASON_CUT),
            "{}",
            r.len()
        );
        assert!(long.starts_with(r.trim_end_matches(REASON_CUT)));
        assert_eq!(chunk_reason("short".into()), "short");
    }

    /// Review item 2, R3 of the supersede's review and T1 of the terms' review: an import
    /// applies only the versions its state names (its term and owner), whatever their order
    /// in the log: a zombie's older term, a newer owner's versions written before its state,
    /// and another owner's of the same term are not that state's.
    #[test]
    fn an_import_applies_only_the_versions_its_state_names() {
        let tp = TopicPartition::new("logs", 3);
        let v = |first: Offset, term: u64, owner: &str| RetiredChunk {
            term,
            ..chunks("a", &tp, vec![gap(first)], owner, Utc::now()).remove(0)
        };
        let got = of_state(
            vec![
                v(1, 2, "me"),
                v(3, 1, "me"),
                v(65, 1, "me"),
                v(7, 2, "me"),
                v(9, 2, "other"),
                v(67, 3, "me"),
            ],
            2,
            "me",
        );
        assert_eq!(
            got.iter()
                .map(|c| (c.chunk, c.term, c.gaps[0].first_offset))
                .collect::<Vec<_>>(),
            [(0, 2, 1), (0, 2, 7)]
        );
        // The term travels in the record and in its key; a record whose term is not its
        // key's is refused.
        let c = v(1, 4, "me");
        let k = chunk_key("a", &tp, 0, 4, "me");
        assert_eq!(
            decode_chunk(&k, &encode_chunk(&c)).expect("decodes").term,
            4
        );
        let mut old: serde_json::Value = serde_json::from_slice(&encode_chunk(&c)).expect("json");
        old.as_object_mut().expect("object").remove("term");
        let old = serde_json::to_vec(&old).expect("json");
        assert!(decode_chunk(&k, &old).is_err());
    }

    proptest! {
        /// Every gap lands in exactly one chunk, the one its first offset names.
        #[test]
        fn chunks_partition_the_gaps(firsts in proptest::collection::btree_set(-2000i64..5000, 0..200)) {
            let tp = TopicPartition::new("logs", 3);
            let cs = chunks("a", &tp, firsts.iter().map(|f| gap(*f)).collect(), "me", Utc::now());
            let mut seen = Vec::new();
            for c in &cs {
                let (lo, hi) = chunk_range(c.chunk);
                for g in &c.gaps {
                    prop_assert!(g.first_offset >= lo && g.first_offset < hi);
                    seen.push(g.first_offset);
                }
            }
            prop_assert_eq!(seen, firsts.into_iter().collect::<Vec<_>>());
        }
    }
}
