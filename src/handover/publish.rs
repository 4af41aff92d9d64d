//! Publishing: the plan of which records a state needs (single or a chunk set in the free
//! slot, tombstones for what an older set left), and the produce that waits for every ack.

use super::{
    CHUNK_VERSION, DEFAULT_MESSAGE_MAX_BYTES, FRAMING, Handover, HandoverError, MAX_SHRINKS,
    MIN_CHUNK, PARTITION, PartitionState,
};
use crate::config::KafkaConfig;
use crate::handover::codec::{
    ChunkHeader, KeyKind, Latest, Slots, chunk_key, chunk_value, delta_key, encode, fnv1a, key,
    parse_key,
};
use crate::handover::delta::{Chain, DeltaId};
use crate::handover::retired;
use crate::types::TopicPartition;
use chrono::Utc;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryFuture, FutureRecord};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

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

/// The warning for a handover topic whose `cleanup.policy` deletes records by retention
/// (`delete`, with or without `compact`): a partition's base goes once it is older than
/// `retention.ms`, whatever it holds. `None` for a compacted-only topic.
pub fn policy_warning(topic: &str, r: &crate::kafka::retention::Retention) -> Option<String> {
    if r.compact && !r.delete {
        return None;
    }
    let policy = match (r.compact, r.delete) {
        (true, _) => "compact,delete",
        _ => "delete",
    };
    let after =
        r.ms.filter(|ms| *ms >= 0)
            .map_or("retention.ms".to_string(), |ms| {
                format!("retention.ms ({ms} ms)")
            });
    Some(format!(
        "state.handover_topic {topic:?} has cleanup.policy={policy}: a partition idle for longer than {after} loses its base (its next owner then resumes from its store or the group's commit, without the handed-over open gaps); set cleanup.policy=compact on the topic"
    ))
}

/// The error for side topic `topic` of retired gaps unless its `cleanup.policy` is
/// `compact` alone: with `delete` (also `compact,delete`) a chunk goes after `retention.ms`
/// whatever it holds, and nothing rewrites a chunk whose gaps do not change.
pub fn side_policy_problem(
    topic: &str,
    r: &crate::kafka::retention::Retention,
) -> Option<HandoverError> {
    let policy = match (r.compact, r.delete) {
        (true, false) => return None,
        (true, true) => "compact,delete",
        (false, true) => "delete",
        (false, false) => "none",
    };
    Some(HandoverError::SidePolicy {
        topic: topic.to_string(),
        policy: policy.to_string(),
    })
}

/// What one publish of several partitions' states achieved
/// ([`Handover::publish_each`]).
#[derive(Debug)]
pub struct Published {
    /// Per state given, in order: whether the broker acknowledged every record of it (only
    /// then may that partition's settled offset be committed).
    pub acked: Vec<bool>,
    /// The first error met; `Some` whenever a state is not acknowledged.
    pub error: Option<HandoverError>,
}

/// One state to publish.
struct Doc {
    /// Its index among the states given.
    state: usize,
    /// Its partition's single-record key.
    base: Vec<u8>,
    /// The key it is written under (the partition's for a base, its delta's for a delta).
    record: Vec<u8>,
    doc: Vec<u8>,
    generation: u64,
    /// For a base: its id; for a delta: the id of its base.
    base_id: String,
    delta: bool,
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
    fn slots_of(&self, base: &[u8]) -> Slots {
        self.known().slots.get(base).copied().unwrap_or_default()
    }

    fn set_slots(&self, base: &[u8], s: Slots) {
        self.known().slots.insert(base.to_vec(), s);
    }

    /// The generation of the next state of the partition whose single-record key is `base`:
    /// one more than the last one read or published (see [`PartitionState::generation`]).
    fn next_generation(&self, base: &[u8]) -> u64 {
        let mut k = self.known();
        let g = k.generations.entry(base.to_vec()).or_insert(0);
        *g = g.saturating_add(1);
        *g
    }

    fn new_set_id(&self) -> String {
        let nanos = Utc::now().timestamp_nanos_opt().unwrap_or_default();
        let seq = self.sets.fetch_add(1, Ordering::Relaxed);
        format!("{}/{nanos:x}/{seq}", self.owner)
    }

    /// This process's ownership term of the partition keyed `base` (set by the read at
    /// assignment; 1 when nothing was read).
    pub(super) fn term_of(&self, base: &[u8]) -> u64 {
        *self.known().terms.entry(base.to_vec()).or_insert(1)
    }

    /// This process's ownership term of partition `tp` of `audit`: its states and the
    /// given-up gaps' chunk keys are written under it.
    pub fn term(&self, audit: &str, tp: &TopicPartition) -> u64 {
        self.term_of(&key(audit, tp))
    }

    /// Raises this process's ownership term of `tp` to at least `at_least`: past every term
    /// this instance used for the partition before (review of the terms, N1: an instance
    /// taking a partition twice with no state landing in between read the same highest term
    /// and wrote under its own old keys again, stale chunks among them).
    pub fn raise_term(&self, audit: &str, tp: &TopicPartition, at_least: u64) {
        let mut k = self.known();
        let t = k.terms.entry(key(audit, tp)).or_insert(1);
        *t = (*t).max(at_least);
    }

    /// Keeps `term`, the term of this owner's own state of `tp` just taken back, as its
    /// ownership term of the partition instead of the next one, when no higher term was
    /// read (the state's chunks are under it, and the store proves it holds them: they are
    /// not published again under a new term). Returns whether it is kept.
    pub fn keep_term(&self, audit: &str, tp: &TopicPartition, term: u64) -> bool {
        let base = key(audit, tp);
        let mut k = self.known();
        let next = *k.terms.entry(base.clone()).or_insert(1);
        let kept = next == term.saturating_add(1) && term > 0;
        if kept {
            k.terms.insert(base, term);
        }
        kept
    }

    /// Creates the topic (one partition, `cleanup.policy=compact`) unless it exists. A
    /// broker that ignores the config still works: only the latest complete state per
    /// partition is ever used, compaction only bounds the topic's size.
    pub async fn ensure_topic(&self) -> Result<(), HandoverError> {
        let admin: AdminClient<DefaultClientContext> = self
            .base
            .create()
            .map_err(self.kafka_err("creating the admin client"))?;
        // The side topic of retired gaps (`retired::side_topic`) with it: compacted too.
        let side = retired::side_topic(&self.topic);
        let topics = [
            NewTopic::new(&self.topic, 1, TopicReplication::Fixed(-1))
                .set("cleanup.policy", "compact"),
            NewTopic::new(&side, 1, TopicReplication::Fixed(-1)).set("cleanup.policy", "compact"),
        ];
        let r = admin
            .create_topics(
                &topics,
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            )
            .await
            .map_err(self.kafka_err("creating the topic"))?;
        for x in r {
            match x {
                Ok(t) => tracing::info!(topic = %t, "handover topic created (compacted)"),
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

    /// Warns when the topic's `cleanup.policy` deletes records by retention (see
    /// [`policy_warning`]); a policy that cannot be read is only logged at debug level.
    pub async fn check_policy(&self) {
        let admin: AdminClient<DefaultClientContext> = match self.base.create() {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(topic = %self.topic, error = %e, "cannot create an admin client to read the handover topic's cleanup.policy");
                return;
            }
        };
        match crate::kafka::retention::describe(&admin, &self.topic).await {
            Ok(r) => {
                // Only a topic that deletes by retention needs a recent base; a compacted
                // one keeps it (no timed rebase: idle rounds stay small).
                self.timed_rebase.store(r.delete, Ordering::Relaxed);
                if let Some(w) = policy_warning(&self.topic, &r) {
                    tracing::warn!(topic = %self.topic, "{w}");
                }
            }
            Err(e) => {
                tracing::debug!(topic = %self.topic, error = %e, "cannot read the handover topic's cleanup.policy")
            }
        }
    }

    /// Refuses a side topic of retired gaps (`retired::side_topic`) that deletes records by
    /// retention ([`side_policy_problem`]); a policy that cannot be read (a broker without
    /// DescribeConfigs, no right to describe) is a warning only: the auditor cannot tell.
    pub async fn check_side_policy(&self) -> Result<(), HandoverError> {
        let side = retired::side_topic(&self.topic);
        let admin: AdminClient<DefaultClientContext> = match self.base.create() {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(topic = %side, error = %e, "cannot create an admin client to read the handover side topic's cleanup.policy (it must be compact)");
                return Ok(());
            }
        };
        match crate::kafka::retention::describe(&admin, &side).await {
            Ok(r) => side_policy_problem(&side, &r).map_or(Ok(()), Err),
            Err(e) => {
                tracing::warn!(topic = %side, error = %e, "cannot read the handover side topic's cleanup.policy (it must be compact)");
                Ok(())
            }
        }
    }

    fn chain_of(&self, base: &[u8]) -> Chain {
        self.known().chains.get(base).cloned().unwrap_or_default()
    }

    fn update_chain(&self, base: &[u8], f: impl FnOnce(&mut Chain)) {
        f(self.known().chains.entry(base.to_vec()).or_default());
    }

    /// Whether the next publish of `tp` of `audit` must be a whole state (a base): no base
    /// is known to this process (nothing read or published yet, or what it read was not
    /// taken), or the deltas since the base outweigh it. Otherwise a delta will do.
    pub fn wants_base(&self, audit: &str, tp: &TopicPartition) -> bool {
        let timed = self.timed_rebase.load(Ordering::Relaxed);
        self.chain_of(&key(audit, tp))
            .wants_base(Instant::now(), timed)
    }

    /// Forgets what this process knows of `tp`'s chain: its next publish is a base (the
    /// owner's state is not the chain's, e.g. its local store was further).
    pub fn forget_chain(&self, audit: &str, tp: &TopicPartition) {
        self.update_chain(&key(audit, tp), |c| c.live = false);
    }

    /// Publishes each state — one record, or a set of chunks each within the record limit —
    /// and waits until the broker acknowledged every record (`acks=all`). Only then may the
    /// settled offsets of these partitions be committed. A state with `base: Some(_)` is a
    /// delta ([`delta`]) on the partition's current base (the value given is replaced; the
    /// caller asks [`Handover::wants_base`] first: a delta without a known base is refused);
    /// one with `base: None` is a new base, after whose acknowledgement the old chain's
    /// deltas are deleted. A state the broker refuses as too large is cut again at half the
    /// size (up to [`MAX_SHRINKS`] times, kept for later publishes). After the
    /// acknowledgement, chunks older sets left behind are deleted (tombstones; their failure
    /// only leaves garbage the reader ignores). `Err`: some state was not acknowledged
    /// ([`Handover::publish_each`] tells which).
    ///
    /// [`delta`]: crate::handover::delta
    pub async fn publish(&self, states: &[PartitionState]) -> Result<(), HandoverError> {
        match self.publish_each(states).await.error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// [`Handover::publish`], telling which states the broker acknowledged: one partition's
    /// failure leaves the others' acknowledgements (and commits) standing. A partition whose
    /// handover topic was not read since its assignment ([`HandoverError::NotRead`]) and a
    /// delta without a known base ([`HandoverError::NoBase`]) are refused before anything
    /// is sent.
    pub async fn publish_each(&self, states: &[PartitionState]) -> Published {
        let mut acked = vec![false; states.len()];
        let mut error: Option<HandoverError> = None;
        // Each state is stamped with its partition's next generation here, where the
        // handover's own order is known: the caller's value is not trusted. Each doc:
        // (partition key, record key, document, delta generation).
        let mut docs: Vec<Doc> = Vec::new();
        for (at, s) in states.iter().enumerate() {
            let base = key(&s.audit, &s.tp());
            let chain = self.chain_of(&base);
            if self.is_unread(&base) {
                error.get_or_insert(HandoverError::NotRead {
                    topic: self.topic.clone(),
                    partition: s.tp().to_string(),
                });
                continue;
            }
            if s.base.is_some() && !chain.live {
                error.get_or_insert(HandoverError::NoBase {
                    topic: self.topic.clone(),
                    partition: s.tp().to_string(),
                });
                continue;
            }
            let generation = self.next_generation(&base);
            let delta = s.base.is_some();
            // A base gets an id of its own (unique: never another base's, whatever its
            // generation); a delta names its base and the publish it was built on.
            let base_id = if delta {
                chain.base_id.clone()
            } else {
                self.new_set_id()
            };
            let stamped = PartitionState {
                generation,
                base: delta.then_some(chain.base),
                base_id: Some(base_id.clone()),
                prev: delta.then_some(chain.last),
                term: self.term_of(&base),
                owner_url: self.advertised_url.clone(),
                ..s.clone()
            };
            let record = if delta {
                delta_key(&base, generation, &base_id)
            } else {
                base.clone()
            };
            docs.push(Doc {
                state: at,
                base,
                record,
                doc: encode(&stamped),
                generation,
                base_id,
                delta,
            });
        }
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
                let Doc {
                    state: _,
                    base,
                    record,
                    doc,
                    generation,
                    base_id,
                    delta,
                } = &docs[i];
                // A delta's key is its own: nothing under it yet (a retry after a refusal
                // writes a new set, which the reader never mixes with the refused one).
                let slots = if *delta {
                    Slots {
                        latest: None,
                        written: [0, 0],
                        single_live: false,
                    }
                } else {
                    self.slots_of(base)
                };
                // No room for a chunk: what was enqueued before is awaited and accounted for
                // like any other failure (a base already sent may land).
                let plan = match plan(doc, record, &slots, limit, &self.new_set_id()) {
                    Ok(p) => p,
                    Err(need) => {
                        failure = Some(HandoverError::LimitTooSmall {
                            topic: self.topic.clone(),
                            limit,
                            need,
                        });
                        break 'states;
                    }
                };
                // From the first enqueue on, the slot may hold this set's chunks.
                if *delta {
                    let id: DeltaId = (*generation, base_id.clone());
                    self.update_chain(base, |c| {
                        c.deltas.retain(|(d, _)| *d != id);
                        c.deltas.push((id, plan.failed));
                    });
                } else {
                    self.set_slots(base, plan.failed);
                }
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
                let d = &docs[*i];
                acked[d.state] = true;
                let mut tombstones = plan.cleanup.clone();
                if d.delta {
                    self.update_chain(&d.base, |c| {
                        c.delta_confirmed(d.generation, d.doc.len() as u64)
                    });
                } else {
                    self.set_slots(&d.base, plan.done);
                    // The new base stands: the old chain's deltas go.
                    let now = Instant::now();
                    let mut old = Vec::new();
                    self.update_chain(&d.base, |c| {
                        old = c.base_confirmed(d.generation, &d.base_id, d.doc.len() as u64, now);
                    });
                    tombstones.extend(old.iter().flat_map(|(id, s)| delta_keys(&d.base, id, s)));
                }
                let unsent = self.send_tombstones(&tombstones, &mut cleanup).await;
                // Delta keys not deleted stay known: the next base deletes them.
                let mut left: Vec<(DeltaId, Slots)> = Vec::new();
                for k in &unsent {
                    let Some((_, Some(id), kind)) = parse_key(k) else {
                        continue;
                    };
                    let at = match left.iter().position(|(x, _)| *x == id) {
                        Some(at) => at,
                        None => {
                            let none = Slots {
                                latest: None,
                                written: [0, 0],
                                single_live: false,
                            };
                            left.push((id, none));
                            left.len() - 1
                        }
                    };
                    let s = &mut left[at].1;
                    match kind {
                        KeyKind::Single => s.single_live = true,
                        KeyKind::Chunk { slot, index } => {
                            let w = &mut s.written[usize::from(slot)];
                            *w = (*w).max(index + 1);
                        }
                    }
                }
                if !left.is_empty() {
                    self.update_chain(&d.base, |c| {
                        for (id, slots) in left {
                            if !c.deltas.iter().any(|(x, _)| *x == id) {
                                c.deltas.push((id, slots));
                            }
                        }
                    });
                }
                let records = plan.records.len();
                if records > 1 {
                    tracing::debug!(topic = %self.topic, partition = %states[d.state].tp(), records,
                        bytes = d.doc.len(), "partition state published in chunks");
                }
            }
            if let Some(e) = failure {
                // A base that failed may have landed all the same: the next publish is a
                // base again (never deltas on a base no reader may take).
                for &i in &todo {
                    let d = &docs[i];
                    if !d.delta && !ok.contains(&i) {
                        self.update_chain(&d.base, Chain::base_failed);
                    }
                }
                error.get_or_insert(e);
                break;
            }
            if refused.is_empty() {
                break;
            }
            shrinks += 1;
            let smaller = limit / 2;
            if shrinks > MAX_SHRINKS {
                error.get_or_insert(HandoverError::LimitTooSmall {
                    topic: self.topic.clone(),
                    limit: smaller,
                    need: limit,
                });
                break;
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
        if error.is_none() && acked.iter().any(|a| !a) {
            // Not reached by the paths above; never report success for a state not sent.
            error = Some(HandoverError::Kafka {
                topic: self.topic.clone(),
                context: "publishing".into(),
                source: Box::new(KafkaError::Canceled),
            });
        }
        Published { acked, error }
    }
}

impl Handover {
    /// Sends a tombstone for each of `keys`, their deliveries added to `pending`. A full
    /// producer queue (a burst of thousands of delta keys at a rebase) is waited out by
    /// awaiting what is in flight, then tried again; the keys still not sent are returned
    /// (never dropped silently: the caller keeps them for the next base to delete).
    async fn send_tombstones(
        &self,
        keys: &[Vec<u8>],
        pending: &mut Vec<DeliveryFuture>,
    ) -> Vec<Vec<u8>> {
        let mut unsent = Vec::new();
        for k in keys {
            let mut waited = false;
            loop {
                let rec = FutureRecord::<[u8], [u8]>::to(&self.topic)
                    .partition(PARTITION)
                    .key(k);
                match self.producer.send_result(rec) {
                    Ok(d) => pending.push(d),
                    Err((e, _))
                        if !waited
                            && e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) =>
                    {
                        waited = true;
                        for d in pending.drain(..) {
                            if let Ok(Err((e, _))) = d.await {
                                tracing::debug!(topic = %self.topic, error = %e, "deleting a stale handover record failed; it stays until the next base of its partition");
                            }
                        }
                        continue;
                    }
                    Err((e, _)) => {
                        tracing::debug!(topic = %self.topic, error = %e, "cannot enqueue the deletion of a stale handover record; tried again with the next base");
                        unsent.push(k.clone());
                    }
                }
                break;
            }
        }
        unsent
    }
}

/// The keys delta `id` of the partition keyed `base` may hold records under.
pub(super) fn delta_keys(base: &[u8], id: &DeltaId, slots: &Slots) -> Vec<Vec<u8>> {
    let record = delta_key(base, id.0, &id.1);
    let mut out: Vec<Vec<u8>> = (0..2u8)
        .flat_map(|s| (0..slots.written[usize::from(s)]).map(move |i| (s, i)))
        .map(|(s, i)| chunk_key(&record, s, i))
        .collect();
    if slots.single_live {
        out.push(record);
    }
    out
}
