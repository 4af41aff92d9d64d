//! Reading: the handover topic read to its end, and the latest complete state of each
//! partition reassembled from single records and chunk sets.

use super::{Handover, HandoverError, PARTITION, PartitionState, READ_TIMEOUT, owner_id};
use crate::config::KafkaConfig;
use crate::handover::codec::{
    KeyKind, Latest, Slots, decode, fnv1a, key, newer, parse_chunk, parse_key,
};
use crate::handover::delta::{Chain, DeltaId, Rebuild};
use crate::types::{Offset, TopicPartition};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

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
    /// The latest complete state.
    latest: Option<Complete>,
}

impl KeyLog {
    fn complete(&mut self, c: Complete) {
        self.latest = Some(c);
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

    /// The latest complete state and its size: `Ok(None)` when no state is complete (a
    /// publish cut short, a tombstone, or a document of a newer version), `Err` when the
    /// latest complete one does not decode. Never the one before it: a chain moved on from
    /// it (its deltas may be deleted), so it would be an older state taken for the latest.
    fn state(&self, base: &[u8]) -> Result<Option<(PartitionState, usize)>, String> {
        let Some(c) = &self.latest else {
            return Ok(None);
        };
        match decode(base, Some(&c.doc)) {
            Ok(s) => Ok(s.map(|s| (s, c.doc.len()))),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Rebuilds the latest complete state of some partitions from the handover topic's records,
/// fed in log order per handover partition ([`Reassembler::push`]).
#[derive(Debug)]
pub struct Reassembler {
    /// Single-record key → partition, of the partitions wanted.
    wanted: HashMap<Vec<u8>, TopicPartition>,
    /// Per handover partition, partition key and delta (`None`: the base).
    logs: HashMap<(i32, Vec<u8>, Option<DeltaId>), KeyLog>,
}

/// What [`Reassembler::finish`] found: the latest complete state of each wanted partition,
/// what its base keys in handover partition 0 hold, its chain of base and deltas, and why
/// the state of a partition whose records were found was not usable.
pub type Found = (
    HashMap<TopicPartition, PartitionState>,
    HashMap<Vec<u8>, Slots>,
    HashMap<Vec<u8>, Chain>,
    HashMap<TopicPartition, String>,
);

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
        let Some((base, delta, kind)) = parse_key(key) else {
            return;
        };
        if !self.wanted.contains_key(base) {
            return;
        }
        self.logs
            .entry((partition, base.to_vec(), delta))
            .or_default()
            .push(base, kind, value);
    }

    /// The latest complete state of each wanted partition that has one (its latest base
    /// with every complete delta of that base applied in chain order, see [`with_deltas`]),
    /// what its base keys in handover partition 0 hold (for [`plan`]; every wanted partition
    /// has an entry), its chain there (never live: the next owner starts its own), and the
    /// partitions whose records make no usable state (with the reason).
    ///
    /// [`plan`]: crate::handover::publish::plan
    pub fn finish(self) -> Found {
        let mut states: HashMap<TopicPartition, PartitionState> = HashMap::new();
        let mut unusable: HashMap<TopicPartition, String> = HashMap::new();
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
        let mut chains: HashMap<Vec<u8>, Chain> = HashMap::new();
        // Deltas per (handover partition, partition key), in generation order.
        type Deltas<'a> = BTreeMap<&'a DeltaId, &'a KeyLog>;
        let mut deltas: HashMap<(i32, &[u8]), Deltas<'_>> = HashMap::new();
        for ((partition, base, delta), log) in &self.logs {
            if let Some(d) = delta {
                deltas
                    .entry((*partition, base.as_slice()))
                    .or_default()
                    .insert(d, log);
            }
        }
        let known = |m: &Deltas<'_>| -> Vec<(DeltaId, Slots)> {
            m.iter().map(|(d, l)| ((*d).clone(), l.slots())).collect()
        };
        // In handover-partition order, so that a tie in [`newer`] goes the same way on
        // every reader (a HashMap's order differs per process).
        let mut logs: Vec<_> = self
            .logs
            .iter()
            .filter(|((_, _, delta), _)| delta.is_none())
            .collect();
        logs.sort_unstable_by_key(|((partition, base, _), _)| (*partition, base.clone()));
        for ((partition, base, _), log) in logs {
            let Some(tp) = self.wanted.get(base) else {
                continue;
            };
            let mine = deltas
                .remove(&(*partition, base.as_slice()))
                .unwrap_or_default();
            let mut chain = Chain {
                deltas: known(&mine),
                ..Chain::default()
            };
            let found = match log.state(base) {
                Ok(Some((s, bytes))) if s.base.is_none() => {
                    chain.base = s.generation;
                    chain.base_bytes = bytes as u64;
                    with_deltas(s, base, &mine, &mut chain)
                }
                Ok(Some(_)) => Err("a delta under the base's key".to_string()),
                Ok(None) => Ok(None),
                Err(e) => Err(format!("its latest base does not decode: {e}")),
            };
            // The next owner's term passes every record's, whatever was usable.
            chain.term = chain.term.max(max_term(base, &mine));
            match found {
                Ok(Some(s)) => {
                    let s = match states.remove(tp) {
                        Some(prev) => newer(prev, s),
                        None => s,
                    };
                    states.insert(tp.clone(), s);
                }
                Ok(None) => {}
                Err(why) => {
                    unusable.insert(tp.clone(), why);
                }
            }
            if *partition == PARTITION {
                slots.insert(base.clone(), log.slots());
                chains.insert(base.clone(), chain);
            }
        }
        // Deltas whose base key holds nothing: left over, deleted with the next base.
        for ((partition, base), m) in deltas {
            let c = chains.entry(base.to_vec()).or_default();
            c.term = c.term.max(max_term(base, &m));
            if partition == PARTITION {
                c.deltas = known(&m);
            }
        }
        // A partition found unusable in one handover partition has no state from another.
        for tp in unusable.keys() {
            states.remove(tp);
        }
        (states, slots, chains, unusable)
    }
}

/// The highest ownership term among the decodable records of `deltas`.
fn max_term(base: &[u8], deltas: &BTreeMap<&DeltaId, &KeyLog>) -> u64 {
    deltas
        .values()
        .filter_map(|l| l.state(base).ok().flatten())
        .map(|(d, _)| d.term)
        .max()
        .unwrap_or(0)
}

/// Base `s` with the deltas of its chain among `deltas` applied: those naming its id, after
/// it, in generation order, each decoded and applied in turn (a chain may hold a hundred
/// thousand) and only over a state holding the generation it was built on; their sizes are
/// added to `chain`'s, and the highest term seen is `chain.term`. A base without deltas is
/// taken as written. `Err` (the state is not usable: the new owner falls back to its store,
/// never to a mixture): a delta of the chain that does not decode, one built on a
/// generation the chain does not hold (a hole), or a record of a higher ownership term than
/// the base (a newer owner's chain whose base was written over).
fn with_deltas(
    s: PartitionState,
    base: &[u8],
    deltas: &BTreeMap<&DeltaId, &KeyLog>,
    chain: &mut Chain,
) -> Result<Option<PartitionState>, String> {
    chain.term = s.term;
    // A version-1 base (written by an older binary during an upgrade, which reads no
    // version-2 record) has no deltas: its generation may repeat a version-2 base's.
    if s.version < 2 {
        return Ok(Some(s));
    }
    // Decoded by key, not yet applied: a record of any chain may tell of a newer owner.
    let id = s.base_id.clone().unwrap_or_default();
    let mut newest = 0;
    for ((_, of), log) in deltas {
        match log.state(base) {
            Ok(Some((d, _))) => newest = newest.max(d.term),
            Ok(None) => {}
            Err(e) if !id.is_empty() && *of == id => {
                return Err(format!("a delta of its chain does not decode: {e}"));
            }
            // Another chain's unreadable record: nothing of this one.
            Err(_) => {}
        }
    }
    if newest > s.term {
        chain.term = newest;
        return Err(format!(
            "a record of ownership term {newest} follows a base of term {}: a newer owner's base was written over",
            s.term
        ));
    }
    /// The base as read, or once a delta applies, the state being rebuilt.
    enum Acc {
        Base(Box<PartitionState>),
        Built(Box<Rebuild>),
    }
    let mut held: HashSet<u64> = HashSet::from([s.generation]);
    let first = s.generation;
    let mut acc = Acc::Base(Box::new(s));
    for ((g, of), log) in deltas {
        // A base without an id (of an earlier build) takes no delta.
        if id.is_empty() || *of != id || *g <= first {
            continue;
        }
        // Not complete (a publish cut short): a later delta holds its changes, or the
        // owner did not go on (and committed nothing past the state before it).
        let Some((d, n)) = log.state(base)? else {
            continue;
        };
        if d.base_id.as_deref() != Some(id.as_str()) || d.generation != *g || d.base.is_none() {
            return Err(format!("delta {g} does not match its key"));
        }
        match d.prev {
            Some(p) if held.contains(&p) => {}
            p => {
                return Err(format!(
                    "delta {g} is built on generation {p:?}, which its chain does not hold"
                ));
            }
        }
        held.insert(*g);
        chain.delta_bytes += n as u64;
        let mut w = match acc {
            Acc::Base(b) => Box::new(Rebuild::new(*b)),
            Acc::Built(w) => w,
        };
        w.apply(d);
        acc = Acc::Built(w);
    }
    Ok(Some(match acc {
        Acc::Base(b) => *b,
        Acc::Built(w) => w.finish(),
    }))
}

impl Handover {
    /// Whether the partition keyed `base` was assigned and its read has not succeeded since
    /// (see [`HandoverError::NotRead`]).
    pub(super) fn is_unread(&self, base: &[u8]) -> bool {
        self.known().unread.contains(base)
    }

    /// Whether `tp` of `audit` was assigned and its handover read has not succeeded since:
    /// nothing of it may be published (nor its settled offset committed) until a read does.
    pub fn unread(&self, audit: &str, tp: &TopicPartition) -> bool {
        self.is_unread(&key(audit, tp))
    }

    /// Reads the topic from the beginning to its high watermark (blocking: call it from
    /// `spawn_blocking`) and returns the latest complete state of each of `tps` of `audit`.
    pub fn read(
        &self,
        audit: &str,
        tps: &[TopicPartition],
    ) -> Result<HashMap<TopicPartition, PartitionState>, HandoverError> {
        // This read's number: a newer read of a partition started before this one ends
        // (this one a background retry) is the one whose findings stand.
        let seq = self.read_seq.fetch_add(1, Ordering::Relaxed);
        {
            let mut k = self.known();
            for tp in tps {
                k.reads.insert(key(audit, tp), seq);
            }
        }
        // Until this read succeeds, nothing is known about these partitions' keys: what this
        // process knew from an earlier ownership is stale (another owner wrote since).
        {
            let mut k = self.known();
            for tp in tps {
                k.slots.remove(&key(audit, tp));
                k.chains.remove(&key(audit, tp));
                // Nothing of these is published until this read succeeds: a term kept from
                // an earlier ownership (or 1) may be below a newer owner's, whose base a
                // publish of it would overwrite.
                k.unread.insert(key(audit, tp));
            }
        }
        let (mut states, mut slots, mut chains, unusable) =
            scan(&self.base, &self.topic, &self.owner, audit, tps)?;
        for (tp, why) in &unusable {
            tracing::warn!(topic = %self.topic, partition = %tp, reason = %why,
                "the handover state of this partition is not usable: it resumes from the local store (or the group's commit)");
        }
        // Partitions a newer read started on since: that one's findings stand. Decided under
        // the lock the findings are written under, so no read can start in between.
        let mut k = self.known();
        let tps: Vec<TopicPartition> = tps
            .iter()
            .filter(|tp| k.reads.get(&key(audit, tp)) == Some(&seq))
            .cloned()
            .collect();
        let tps = tps.as_slice();
        let wanted: HashSet<Vec<u8>> = tps.iter().map(|tp| key(audit, tp)).collect();
        states.retain(|tp, _| wanted.contains(&key(audit, tp)));
        slots.retain(|k, _| wanted.contains(k));
        k.slots.extend(slots);
        // This process's next publish of a partition continues after the generation it
        // took over (a partition never written starts at 1), and after every delta left on
        // the topic; it is a base of its own (a chain is never continued from another
        // owner's), under a term past every term read.
        for tp in tps {
            let base = key(audit, tp);
            let chain = chains.remove(&base).unwrap_or_default();
            let left = chain.deltas.iter().map(|((d, _), _)| *d).max();
            match states
                .get(tp)
                .map(|s| s.generation)
                .max(left)
                .max(Some(chain.base))
            {
                Some(n) if n > 0 => k.generations.insert(base.clone(), n),
                _ => k.generations.remove(&base),
            };
            k.terms.insert(base.clone(), chain.term.saturating_add(1));
            k.chains.insert(
                base,
                Chain {
                    live: false,
                    ..chain
                },
            );
        }
        for tp in tps {
            k.unread.remove(&key(audit, tp));
        }
        Ok(states)
    }
}

/// Reads `topic` from the beginning to its high watermark with a consumer of its own
/// (blocking) and reassembles what it holds of `tps` of `audit` ([`Reassembler::finish`]).
/// Touches no client's bookkeeping: [`Handover::read`] takes over partitions with it,
/// [`lookup`] only looks.
fn scan(
    base: &ClientConfig,
    topic: &str,
    owner: &str,
    audit: &str,
    tps: &[TopicPartition],
) -> Result<Found, HandoverError> {
    let mut c = base.clone();
    // A group id is needed by librdkafka for a consumer; assign() never joins it and
    // nothing is committed.
    c.set("group.id", format!("gap-auditor-handover-reader-{}", owner))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest");
    let consumer: BaseConsumer = c.create().map_err(kafka_err(topic, "creating a reader"))?;
    let timeout = Duration::from_secs(10);
    let md = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(kafka_err(topic, "reading its metadata"))?;
    let parts: Vec<i32> = md
        .topics()
        .iter()
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    let mut tpl = rdkafka::TopicPartitionList::new();
    let mut high = HashMap::new();
    for p in &parts {
        let (low, hi) = consumer
            .fetch_watermarks(topic, *p, timeout)
            .map_err(kafka_err(topic, "reading its watermarks"))?;
        if hi > low {
            high.insert(*p, hi);
            tpl.add_partition_offset(topic, *p, rdkafka::Offset::Offset(low))
                .map_err(kafka_err(topic, "assigning"))?;
        }
    }
    let mut r = Reassembler::new(audit, tps);
    if !high.is_empty() {
        consumer
            .assign(&tpl)
            .map_err(kafka_err(topic, "assigning"))?;
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
                topic: topic.to_string(),
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
        let m = m.map_err(kafka_err(topic, "reading"))?;
        reached.insert(m.partition(), m.offset() + 1);
        if let Some(k) = m.key() {
            r.push(m.partition(), k, m.payload());
        }
    }
    Ok(r.finish())
}

fn kafka_err(topic: &str, context: &str) -> impl FnOnce(KafkaError) -> HandoverError {
    let topic = topic.to_string();
    let context = context.to_string();
    move |e| HandoverError::Kafka {
        topic,
        context,
        source: Box::new(e),
    }
}

/// The latest complete state of partition `tp` of `audit` on handover topic `topic`, read
/// with a short-lived consumer of its own and changing nothing (no client's chains, terms
/// or generations; nothing committed): what an instance that does not own the partition
/// needs to find the one that does ([`PartitionState::owner_url`]). Blocking: call it from
/// `spawn_blocking`. `Ok(None)`: the topic holds no usable state of the partition.
pub fn lookup(
    kafka: &KafkaConfig,
    topic: &str,
    audit: &str,
    tp: &TopicPartition,
) -> Result<Option<PartitionState>, HandoverError> {
    let base = crate::kafka::client::base(kafka);
    let owner = format!("lookup-{}", owner_id());
    let (mut states, _, _, _) = scan(&base, topic, &owner, audit, std::slice::from_ref(tp))?;
    Ok(states.remove(tp))
}
