//! Reading: the handover topic read to its end, and the latest complete state of each
//! partition reassembled from single records and chunk sets.

use super::*;
use std::collections::BTreeMap;

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

    /// The latest complete state that decodes (the one before it if the latest does not),
    /// and its size.
    fn state(&self, base: &[u8]) -> Option<(PartitionState, usize)> {
        for c in [&self.latest, &self.before].into_iter().flatten() {
            match decode(base, Some(&c.doc)) {
                Ok(Some(s)) => return Some((s, c.doc.len())),
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
    /// Per handover partition, partition key and delta generation (`None`: the base).
    logs: HashMap<(i32, Vec<u8>, Option<u64>), KeyLog>,
}

/// What [`Reassembler::finish`] found: the latest complete state of each wanted partition,
/// what its base keys in handover partition 0 hold, and its chain of base and deltas.
pub type Found = (
    HashMap<TopicPartition, PartitionState>,
    HashMap<Vec<u8>, Slots>,
    HashMap<Vec<u8>, Chain>,
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
    /// with every complete delta of that base applied in generation order), what its base
    /// keys in handover partition 0 hold (for [`plan`]; every wanted partition has an
    /// entry), and its chain there.
    pub fn finish(self) -> Found {
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
        let mut chains: HashMap<Vec<u8>, Chain> = HashMap::new();
        // Deltas per (handover partition, partition key), by generation.
        let mut deltas: HashMap<(i32, &[u8]), BTreeMap<u64, &KeyLog>> = HashMap::new();
        for ((partition, base, delta), log) in &self.logs {
            if let Some(g) = delta {
                deltas
                    .entry((*partition, base.as_slice()))
                    .or_default()
                    .insert(*g, log);
            }
        }
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
            let mine = deltas.remove(&(*partition, base.as_slice()));
            let mut chain = Chain::default();
            if let Some(m) = &mine {
                chain.deltas = m.iter().map(|(g, l)| (*g, l.slots())).collect();
            }
            let found = log.state(base).filter(|(s, _)| s.base.is_none());
            if let Some((s, bytes)) = found {
                // A version-1 base takes no deltas (see `with_deltas`): the next publish
                // must be a base.
                chain.live = s.version >= 2;
                chain.base = s.generation;
                chain.base_bytes = bytes as u64;
                let s = with_deltas(s, base, mine.iter().flatten(), &mut chain);
                let s = match states.remove(tp) {
                    Some(prev) => newer(prev, s),
                    None => s,
                };
                states.insert(tp.clone(), s);
            }
            if *partition == PARTITION {
                slots.insert(base.clone(), log.slots());
                chains.insert(base.clone(), chain);
            }
        }
        // Deltas whose base key holds nothing: left over, deleted with the next base.
        for ((partition, base), m) in deltas {
            if partition == PARTITION {
                chains.entry(base.to_vec()).or_default().deltas =
                    m.iter().map(|(g, l)| (*g, l.slots())).collect();
            }
        }
        (states, slots, chains)
    }
}

/// Base `s` with the deltas of `chain`'s base among `deltas` (generation → key log, in
/// order) applied: only deltas of this base, after it, under their own generation's key,
/// each decoded and applied in turn (a chain may hold a hundred thousand); their sizes are
/// added to the chain's. A base without deltas is taken as written.
fn with_deltas<'a>(
    s: PartitionState,
    base: &[u8],
    deltas: impl Iterator<Item = (&'a u64, &'a &'a KeyLog)>,
    chain: &mut Chain,
) -> PartitionState {
    // A version-1 base (written by an older binary during an upgrade) has no deltas: its
    // generation may repeat a version-2 base's.
    if s.version < 2 {
        return s;
    }
    /// The base as read, or once a delta applies, the state being rebuilt.
    enum Acc {
        Base(Box<PartitionState>),
        Built(Box<Rebuild>),
    }
    let mut acc = Acc::Base(Box::new(s));
    for (g, log) in deltas {
        let Some((d, n)) = log.state(base) else {
            continue;
        };
        if d.base != Some(chain.base) || d.generation != *g || *g <= chain.base {
            continue;
        }
        chain.delta_bytes += n as u64;
        let mut w = match acc {
            Acc::Base(b) => Box::new(Rebuild::new(*b)),
            Acc::Built(w) => w,
        };
        w.apply(d);
        acc = Acc::Built(w);
    }
    match acc {
        Acc::Base(b) => *b,
        Acc::Built(w) => w.finish(),
    }
}

impl Handover {
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
            let mut c = self.chains.lock().unwrap_or_else(|p| p.into_inner());
            for tp in tps {
                m.remove(&key(audit, tp));
                c.remove(&key(audit, tp));
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
        let (states, slots, mut chains) = r.finish();
        {
            let mut m = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            m.extend(slots);
        }
        // This process's next publish of a partition continues after the generation it
        // took over (a partition never written starts at 1), and after every delta left on
        // the topic: a new base's generation never names leftover deltas as its own.
        let mut g = self.generations.lock().unwrap_or_else(|p| p.into_inner());
        let mut m = self.chains.lock().unwrap_or_else(|p| p.into_inner());
        for tp in tps {
            let base = key(audit, tp);
            let chain = chains.remove(&base);
            let left = chain
                .as_ref()
                .and_then(|c| c.deltas.iter().map(|(d, _)| *d).max());
            match states.get(tp).map(|s| s.generation).max(left) {
                Some(n) => g.insert(base.clone(), n),
                None => g.remove(&base),
            };
            // A chain continues only on a base that was read; without one the next publish
            // is a base (and deletes leftover deltas).
            match chain {
                Some(c) => m.insert(base, c),
                None => m.remove(&base),
            };
        }
        drop(m);
        drop(g);
        Ok(states)
    }
}
