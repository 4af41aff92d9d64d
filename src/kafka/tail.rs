//! The tailing consumer: one OS thread per audit owns the librdkafka consumer, polls it,
//! decodes and tags every record (so payloads never cross the channel), and sends batches and
//! rebalance events to the audit task over ONE bounded channel, which keeps their order:
//! every record of a partition is delivered before that partition's revocation.
//!
//! The rebalance callback does no work. On revoke it flushes the pending batch, sends the
//! event and blocks until the audit task answers with the settled offsets to commit (they
//! must be committed before the partitions go). On assign it completes librdkafka's side of
//! the rebalance with none of the new partitions fetching, sends the event and returns: the
//! audit task resolves the starts (store, handover topic, watermark and time lookups: up to
//! tens of seconds) while this thread keeps reading the partitions it had, serving commits
//! and backpressure; the new partitions are assigned at their starts once the answer comes
//! ([`Starting`]). The audit task runs on the tokio runtime, never on this thread, so no
//! wait here can deadlock.

use super::client;
use crate::config::KafkaConfig;
use crate::gap::{Offset, TopicPartition};
use crate::record::{Decoder, Tag};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Message, Timestamp};
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset as KOffset, TopicPartitionList};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

/// Records per batch sent to the audit task.
const BATCH: usize = 4096;
/// Longest time a record waits in a batch.
const BATCH_AGE: Duration = Duration::from_millis(50);

/// One consumed record, decoded and tagged; the payload stays behind.
#[derive(Debug, Clone)]
pub struct Tagged {
    /// Topic (shared string).
    pub topic: Arc<str>,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: Offset,
    /// Kafka timestamp (unix ms), when the record has one.
    pub timestamp_ms: Option<i64>,
    /// Expected (with key) or filtered (with reason).
    pub tag: Tag,
}

/// What the tailing thread tells the audit task.
#[derive(Debug)]
pub enum TailEvent {
    /// Records in offset order per partition.
    Records(Vec<Tagged>),
    /// Partitions assigned to this auditor; answer with the offset to start each at.
    Assigned {
        /// The new partitions.
        partitions: Vec<TopicPartition>,
        /// The audit task's answer.
        reply: oneshot::Sender<Vec<(TopicPartition, Offset)>>,
    },
    /// Partitions taken away; answer with the settled offsets to commit for them.
    Revoked {
        /// The partitions.
        partitions: Vec<TopicPartition>,
        /// The audit task's answer.
        reply: oneshot::Sender<Vec<(TopicPartition, Offset)>>,
    },
    /// A consumer error worth surfacing (broker down, authorization...).
    Error(String),
    /// A fetch position fell outside the log (retention deleted unread records, or the
    /// topic was recreated). librdkafka does not say which partition: the audit checks all
    /// of them against their watermarks and answers with [`Command::Seek`].
    OffsetOutOfRange,
}

/// What the audit task asks of the tailing thread.
#[derive(Debug)]
pub enum Command {
    /// Commit these offsets for the auditor's own group.
    Commit(Vec<(TopicPartition, Offset)>),
    /// Restart fetching of these partitions at these offsets (after
    /// [`TailEvent::OffsetOutOfRange`]). librdkafka stops fetching a partition whose position
    /// is out of range and refuses to seek it; re-assigning the same partitions with explicit
    /// offsets restarts their fetchers without leaving the group.
    Reposition(Vec<(TopicPartition, Offset)>),
}

/// Backpressure between the audit task and the tailing thread, decided per partition.
///
/// A partition's load is its undecided records: pending in the ledger, plus read and not
/// yet ingested. With `M = max_pending` and `n` partitions assigned to this audit, the
/// thread pauses:
/// - while the total load is at least `M / 2`, every partition holding at least its fair
///   share `M / n`; such a partition resumes once it holds less than 90 % of its share, or
///   once the total falls below 90 % of `M / 2`;
/// - when the total reaches `M`, every partition, until the total falls below 90 % of `M`.
///
/// Why per partition: the due rule keeps a partition's records undecided for as long as its
/// pipeline does not commit, so one stalled partition grows without bound. Pausing on the
/// sum alone let it fill `max_pending` and stop the reading of the healthy partitions, whose
/// losses then went undetected, and whose unread ranges became unverifiable once the pause
/// outlasted retention. Here a stalled partition stops once the total reaches `M / 2` (or at
/// its share, when that is more), which leaves the other half of the budget to the rest: a
/// partition below its share is never paused while the total is under `M`, and the total
/// reaches `M` only when the healthy traffic itself needs more than the budget left to it
/// (`max_pending` too small for it). A partition over its share whose records keep being
/// decided falls back under 90 % of it within a round or two and resumes: throttled, never
/// blinded.
///
/// Memory stays capped at `M` records plus the one record a poll hands over (librdkafka
/// drops a paused partition's prefetched records and fetches them again on resume), and
/// nothing is dropped: a paused partition resumes where it stopped. With one assigned
/// partition its share is `M`: a plain cap at `M`, as before.
#[derive(Debug)]
pub struct Flow {
    max: u64,
    /// Ledger pending of all partitions: the thread's per-record check reads only atomics.
    pending: AtomicU64,
    in_flight: AtomicU64,
    /// Bumped whenever loads change by something else than the thread reading a record.
    version: AtomicU64,
    loads: Mutex<Loads>,
    /// What the thread has paused, for the status page.
    paused: Mutex<HashSet<TopicPartition>>,
}

/// Per-partition loads, as the audit and the thread last reported them.
#[derive(Debug, Default)]
struct Loads {
    pending: HashMap<TopicPartition, u64>,
    in_flight: HashMap<TopicPartition, u64>,
    /// Records per partition of each batch sent and not yet ingested, oldest first: the
    /// audit acknowledges batches in order and by size only.
    sent: VecDeque<Vec<(TopicPartition, u64)>>,
}

impl Flow {
    /// A flow capped at `max_pending` records.
    pub fn new(max_pending: u64) -> Self {
        Self {
            max: max_pending.max(1),
            pending: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            version: AtomicU64::new(0),
            loads: Mutex::default(),
            paused: Mutex::default(),
        }
    }

    /// The audit ingested `n` records handed over by the thread (a whole batch, in order).
    pub fn ingested(&self, n: u64) {
        let _ = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                Some(v.saturating_sub(n))
            });
        if let Ok(mut l) = self.loads.lock() {
            let Loads {
                in_flight, sent, ..
            } = &mut *l;
            let mut left = n;
            while left > 0 {
                let Some(batch) = sent.front_mut() else { break };
                for (tp, c) in batch.iter_mut() {
                    let take = (*c).min(left);
                    *c -= take;
                    left -= take;
                    if let Some(f) = in_flight.get_mut(tp) {
                        *f = f.saturating_sub(take);
                        if *f == 0 {
                            in_flight.remove(tp);
                        }
                    }
                }
                batch.retain(|(_, c)| *c > 0);
                if batch.is_empty() {
                    sent.pop_front();
                }
            }
        }
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// The ledger now holds these undecided records per partition (every partition the
    /// audit owns; others count as empty).
    pub fn set_pending<'a>(&self, parts: impl IntoIterator<Item = (&'a TopicPartition, u64)>) {
        let map: HashMap<TopicPartition, u64> = parts
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(tp, n)| (tp.clone(), n))
            .collect();
        let total = map.values().sum();
        if let Ok(mut l) = self.loads.lock() {
            l.pending = map;
        }
        self.pending.store(total, Ordering::Release);
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// Records not yet decided, counting those in transit.
    pub fn load(&self) -> u64 {
        self.pending.load(Ordering::Acquire) + self.in_flight.load(Ordering::Acquire)
    }

    /// Whether consumption of `tp` is paused right now.
    pub fn is_paused(&self, tp: &TopicPartition) -> bool {
        self.paused.lock().map(|p| p.contains(tp)).unwrap_or(false)
    }

    /// A batch left the thread with these records per partition.
    fn sent(&self, counts: Vec<(TopicPartition, u64)>) {
        if counts.is_empty() {
            return;
        }
        if let Ok(mut l) = self.loads.lock() {
            for (tp, c) in &counts {
                *l.in_flight.entry(tp.clone()).or_default() += c;
            }
            l.sent.push_back(counts);
        }
    }

    /// Load of each of `tps`, adding `unsent` (records still in the thread's batch).
    fn loads_of(&self, tps: &[TopicPartition], unsent: &[(Arc<str>, i32, u64)]) -> Vec<u64> {
        let Ok(l) = self.loads.lock() else {
            return vec![0; tps.len()];
        };
        tps.iter()
            .map(|tp| {
                let held = unsent
                    .iter()
                    .filter(|(t, p, _)| *p == tp.partition && **t == *tp.topic)
                    .map(|(_, _, c)| c)
                    .sum::<u64>();
                l.pending.get(tp).copied().unwrap_or(0)
                    + l.in_flight.get(tp).copied().unwrap_or(0)
                    + held
            })
            .collect()
    }

    fn soft_mark(&self) -> u64 {
        (self.max / 2).max(1)
    }
}

/// The first entries of `items`, joined, with how many more there are.
fn first_few(items: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut s = items
        .iter()
        .take(SHOWN)
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > SHOWN {
        s.push_str(&format!(" and {} more", items.len() - SHOWN));
    }
    s
}

/// 90 % of `x`: the hysteresis of every backpressure mark.
fn ninety(x: u64) -> u64 {
    x - x / 10
}

/// Which backpressure marks are engaged.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Pressure {
    /// The total reached `max_pending / 2`: partitions over their share pause.
    soft: bool,
    /// The total reached `max_pending`: every partition pauses.
    hard: bool,
}

/// What [`plan`] decided.
#[derive(Debug, PartialEq, Eq)]
struct Plan {
    pressure: Pressure,
    /// Per partition (same order as the loads): paused or not.
    pause: Vec<bool>,
    /// Records the thread may read before this plan can change without anything else
    /// happening (at least 1).
    headroom: u64,
}

/// The rule of [`Flow`], on `loads` of the assigned partitions (`was_paused` says which of
/// them are paused now) and the `total` load.
fn plan(max: u64, total: u64, loads: &[u64], was_paused: &[bool], prev: Pressure) -> Plan {
    let max = max.max(1);
    let soft_mark = (max / 2).max(1);
    let share = (max / loads.len().max(1) as u64).max(1);
    let pressure = Pressure {
        hard: if prev.hard {
            total > ninety(max)
        } else {
            total >= max
        },
        soft: if prev.soft {
            total > ninety(soft_mark)
        } else {
            total >= soft_mark
        },
    };
    let pause: Vec<bool> = loads
        .iter()
        .zip(was_paused.iter().copied().chain(std::iter::repeat(false)))
        .map(|(&load, was)| {
            pressure.hard || (pressure.soft && (load >= share || (was && load > ninety(share))))
        })
        .collect();
    let mut headroom = u64::MAX;
    if !pressure.hard {
        headroom = headroom.min(max.saturating_sub(total));
        if pressure.soft {
            for (load, paused) in loads.iter().zip(&pause) {
                if !paused {
                    headroom = headroom.min(share.saturating_sub(*load));
                }
            }
        } else {
            headroom = headroom.min(soft_mark.saturating_sub(total));
        }
    }
    Plan {
        pressure,
        pause,
        headroom: headroom.max(1),
    }
}

/// (log start, log end) per partition as last learnt by librdkafka while fetching.
pub type Watermarks = Arc<Mutex<HashMap<TopicPartition, (Offset, Offset)>>>;

struct TailContext {
    events: mpsc::Sender<TailEvent>,
    batch: Mutex<Vec<Tagged>>,
    watermarks: Watermarks,
    stopping: Arc<AtomicBool>,
    /// Bumped by every rebalance, so a paused thread re-pauses newly assigned partitions.
    generation: AtomicU64,
    flow: Arc<Flow>,
    /// Assignments whose starts the audit task has not answered yet.
    starting: Mutex<Vec<Starting>>,
    /// Whether `starting` holds anything: the poll loop looks before every poll, and an
    /// atomic load is cheaper than the lock there.
    any_starting: AtomicBool,
}

/// Partitions assigned by the group whose start offsets the audit task is still resolving.
/// They are not in librdkafka's assignment yet, so nothing is fetched for them before their
/// start is known (a fetch at the group's committed offset could run ahead of the store's
/// settled offset).
struct Starting {
    /// The partitions still waiting (a revocation takes its own out).
    partitions: HashSet<TopicPartition>,
    reply: oneshot::Receiver<Vec<(TopicPartition, Offset)>>,
}

impl TailContext {
    fn flush(&self) -> bool {
        let batch = match self.batch.lock() {
            // Full capacity up front: a batch grown by doubling copies itself a dozen times.
            Ok(mut b) if !b.is_empty() => std::mem::replace(&mut *b, Vec::with_capacity(BATCH)),
            _ => return true,
        };
        // Registered before sending: the audit acknowledges the batch as soon as it has it.
        self.flow.sent(
            per_partition(&batch)
                .into_iter()
                .map(|(t, p, c)| (TopicPartition::new(&*t, p), c))
                .collect(),
        );
        self.events.blocking_send(TailEvent::Records(batch)).is_ok()
    }

    /// Records per partition of the batch not sent yet.
    fn unsent(&self) -> Vec<(Arc<str>, i32, u64)> {
        self.batch
            .lock()
            .map(|b| per_partition(&b))
            .unwrap_or_default()
    }
}

/// Records per (topic, partition) of `batch`.
fn per_partition(batch: &[Tagged]) -> Vec<(Arc<str>, i32, u64)> {
    let mut out: Vec<(Arc<str>, i32, u64)> = Vec::new();
    for t in batch {
        // A poll hands over a partition's records in runs: the last entry is nearly always it.
        let same = |(topic, p, _): &(Arc<str>, i32, u64)| {
            *p == t.partition && (Arc::ptr_eq(topic, &t.topic) || **topic == *t.topic)
        };
        if let Some(e) = out.last_mut().filter(|e| same(e)) {
            e.2 += 1;
        } else if let Some(e) = out.iter_mut().find(|e| same(e)) {
            e.2 += 1;
        } else {
            out.push((t.topic.clone(), t.partition, 1));
        }
    }
    out
}

impl TailContext {
    /// Hands a rebalance to the audit task and waits for its answer (`None` when the task
    /// is gone: shutting down).
    fn ask(
        &self,
        alive: bool,
        event: impl FnOnce(oneshot::Sender<Vec<(TopicPartition, Offset)>>) -> TailEvent,
    ) -> Option<Vec<(TopicPartition, Offset)>> {
        if !alive {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        self.events.blocking_send(event(tx)).ok()?;
        rx.blocking_recv().ok()
    }
}

impl ClientContext for TailContext {
    fn stats(&self, s: Statistics) {
        let Ok(mut w) = self.watermarks.lock() else {
            return;
        };
        for (name, t) in &s.topics {
            for (p, ps) in &t.partitions {
                if *p < 0 || ps.hi_offset < 0 {
                    continue;
                }
                w.insert(
                    TopicPartition::new(name.clone(), *p),
                    (ps.lo_offset, ps.hi_offset),
                );
            }
        }
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        let _ = self
            .events
            .try_send(TailEvent::Error(format!("{error}: {reason}")));
    }
}

impl ConsumerContext for TailContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        let partitions: Vec<TopicPartition> = tpl
            .elements()
            .iter()
            .map(|e| TopicPartition::new(e.topic(), e.partition()))
            .collect();
        // Records fetched before the rebalance go first, so the audit task sees them before
        // it settles or forgets their partitions.
        let alive = self.flush();
        self.generation.fetch_add(1, Ordering::AcqRel);
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                // Nothing assigned yet: librdkafka's rebalance completes with the new
                // partitions idle, and they are assigned at their starts when the audit task
                // answers (`Tail::serve_starts`), outside this callback.
                let none = TopicPartitionList::new();
                let r = if cooperative {
                    consumer.incremental_assign(&none)
                } else {
                    consumer.assign(&none)
                };
                if let Err(e) = r {
                    tracing::error!(error = %e, "assign failed");
                }
                // Cooperative rebalances also assign nothing (their first phase): no event.
                if alive && !self.stopping.load(Ordering::SeqCst) && !partitions.is_empty() {
                    let (reply, rx) = oneshot::channel();
                    let waiting: HashSet<TopicPartition> = partitions.iter().cloned().collect();
                    if self
                        .events
                        .blocking_send(TailEvent::Assigned { partitions, reply })
                        .is_ok()
                        && let Ok(mut s) = self.starting.lock()
                    {
                        s.push(Starting {
                            partitions: waiting,
                            reply: rx,
                        });
                        self.any_starting.store(true, Ordering::Release);
                    }
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                // Starts still awaited for these partitions will not be applied: the audit
                // task answered them before this revocation (one ordered channel), and the
                // offsets it commits for them now are those starts.
                if let Ok(mut s) = self.starting.lock() {
                    for st in s.iter_mut() {
                        for tp in &partitions {
                            st.partitions.remove(tp);
                        }
                    }
                    s.retain(|st| !st.partitions.is_empty());
                    self.any_starting.store(!s.is_empty(), Ordering::Release);
                }
                let answer = self.ask(alive, |reply| TailEvent::Revoked { partitions, reply });
                if let Some(offsets) = answer.filter(|o| !o.is_empty()) {
                    commit(consumer, &offsets);
                }
                let r = if cooperative {
                    // Only what librdkafka holds: a partition revoked before its start was
                    // applied is not in its assignment, and unassigning it would fail the
                    // whole call and stall the rebalance.
                    let held = held(consumer);
                    let mut drop = TopicPartitionList::new();
                    for e in tpl.elements() {
                        if held.contains(&(e.topic().to_string(), e.partition())) {
                            drop.add_partition(e.topic(), e.partition());
                        }
                    }
                    consumer.incremental_unassign(&drop)
                } else {
                    consumer.unassign()
                };
                if let Err(e) = r {
                    tracing::error!(error = %e, "unassign failed");
                }
            }
            other => {
                tracing::error!(error = ?other, "rebalance error");
                let _ = consumer.unassign();
            }
        }
    }
}

fn commit(consumer: &BaseConsumer<TailContext>, offsets: &[(TopicPartition, Offset)]) {
    let mut tpl = TopicPartitionList::new();
    for (tp, o) in offsets {
        if let Err(e) = tpl.add_partition_offset(&tp.topic, tp.partition, KOffset::Offset(*o)) {
            tracing::error!(%tp, error = %e, "cannot build commit");
        }
    }
    if let Err(e) = consumer.commit(&tpl, CommitMode::Sync) {
        tracing::warn!(error = %e, "commit of the settled watermark failed; retried next round");
    }
}

/// The partitions in librdkafka's assignment.
fn held(consumer: &BaseConsumer<TailContext>) -> HashSet<(String, i32)> {
    consumer
        .assignment()
        .map(|a| {
            a.elements()
                .iter()
                .map(|e| (e.topic().to_string(), e.partition()))
                .collect()
        })
        .unwrap_or_default()
}

/// Adds partitions to librdkafka's assignment at the starts the audit task resolved.
fn start_at(consumer: &BaseConsumer<TailContext>, starts: &[(TopicPartition, Offset)]) {
    let cooperative = matches!(
        consumer.rebalance_protocol(),
        RebalanceProtocol::Cooperative
    );
    // Cooperative rebalances add to the assignment. An eager one hands over the whole
    // assignment in one event, so its starts are the whole assignment: `assign` replaces
    // what is held, which is nothing or (after a `Command::Reposition` for an offset out
    // of range) some of these same partitions. Not kept from `position()`: a partition not
    // fetched yet has no position, and assigning it that logical offset would restart it
    // at the group's commit.
    let mut tpl = TopicPartitionList::new();
    for (tp, o) in starts {
        // A negative start is librdkafka's logical end (-1) or beginning (-2): the audit
        // could not resolve it to an offset and anchors on the first record.
        let r = tpl.add_partition_offset(&tp.topic, tp.partition, KOffset::from_raw(*o));
        if let Err(e) = r {
            tracing::error!(%tp, error = %e, "cannot set start offset");
        }
    }
    let r = if cooperative {
        consumer.incremental_assign(&tpl)
    } else {
        consumer.assign(&tpl)
    };
    if let Err(e) = r {
        tracing::error!(error = %e, "assigning the new partitions at their starts failed");
    }
}

fn reposition(consumer: &BaseConsumer<TailContext>, offsets: &[(TopicPartition, Offset)]) {
    // Only what librdkafka holds: a partition revoked since the audit sent this would make
    // the cooperative unassign refuse the whole list, and nothing would restart.
    let held = held(consumer);
    let mut tpl = TopicPartitionList::new();
    for (tp, o) in offsets {
        if !held.contains(&(tp.topic.to_string(), tp.partition)) {
            tracing::debug!(%tp, "not re-positioned: no longer assigned");
            continue;
        }
        if let Err(e) = tpl.add_partition_offset(&tp.topic, tp.partition, KOffset::Offset(*o)) {
            tracing::error!(%tp, error = %e, "cannot build the new position");
        }
    }
    let r = if matches!(
        consumer.rebalance_protocol(),
        RebalanceProtocol::Cooperative
    ) {
        consumer
            .incremental_unassign(&tpl)
            .and_then(|_| consumer.incremental_assign(&tpl))
    } else {
        // Same partitions as owned (the audit sends every assigned one): only positions change.
        consumer.assign(&tpl)
    };
    if let Err(e) = r {
        tracing::error!(error = %e, "re-positioning the consumer failed");
    }
}

/// The running tailing thread.
pub struct TailHandle {
    /// Events for the audit task.
    pub events: mpsc::Receiver<TailEvent>,
    /// Commands for the thread.
    pub commands: std::sync::mpsc::Sender<Command>,
    /// Watermarks learnt from librdkafka statistics.
    pub watermarks: Watermarks,
    /// Backpressure shared with the thread.
    pub flow: Arc<Flow>,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl TailHandle {
    /// Asks the thread to close the consumer (which revokes its partitions through the
    /// event channel: keep answering events until [`Self::events`] ends).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }

    /// Waits for the thread after the event channel ended.
    pub fn join(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts tailing `topics` with `group`, decoding with `decoder`, pausing at `max_pending`
/// undecided records.
pub fn start(
    kafka: &KafkaConfig,
    group: &str,
    topics: &[String],
    decoder: Decoder,
    max_pending: u64,
) -> Result<TailHandle, rdkafka::error::KafkaError> {
    let (tx, rx) = mpsc::channel(16);
    let (ctx_tx, ctx_rx) = std::sync::mpsc::channel::<Command>();
    let watermarks: Watermarks = Arc::default();
    let stopping = Arc::new(AtomicBool::new(false));
    let flow = Arc::new(Flow::new(max_pending));
    let mut cfg = client::tailing_consumer(kafka, group);
    cfg.set(
        "statistics.interval.ms",
        kafka.statistics_interval().as_millis().max(100).to_string(),
    );
    let ctx = TailContext {
        events: tx,
        batch: Mutex::new(Vec::with_capacity(BATCH)),
        watermarks: watermarks.clone(),
        stopping: stopping.clone(),
        generation: AtomicU64::new(0),
        flow: flow.clone(),
        starting: Mutex::default(),
        any_starting: AtomicBool::new(false),
    };
    let consumer: BaseConsumer<TailContext> = cfg.create_with_context(ctx)?;
    let refs: Vec<&str> = topics.iter().map(String::as_str).collect();
    consumer.subscribe(&refs)?;
    let tail = Tail {
        consumer,
        decoder,
        commands: ctx_rx,
        stopping: stopping.clone(),
        flow: flow.clone(),
        topics: Vec::new(),
        batch_started: None,
        pushed: 0,
        bp: Backpressure::default(),
    };
    let thread = std::thread::Builder::new()
        .name(format!("tail-{group}"))
        .spawn(move || tail.run())
        .map_err(|e| rdkafka::error::KafkaError::ClientCreation(e.to_string()))?;
    Ok(TailHandle {
        events: rx,
        commands: ctx_tx,
        watermarks,
        flow,
        stopping,
        thread: Some(thread),
    })
}

/// The state of the tailing thread.
struct Tail {
    consumer: BaseConsumer<TailContext>,
    decoder: Decoder,
    commands: std::sync::mpsc::Receiver<Command>,
    stopping: Arc<AtomicBool>,
    flow: Arc<Flow>,
    /// Topic names interned for the current batch: an audit reads a handful, so a scan
    /// beats hashing every record.
    topics: Vec<Arc<str>>,
    batch_started: Option<Instant>,
    /// Records pushed since the last flush.
    pushed: u32,
    bp: Backpressure,
}

/// The thread's side of [`Flow`]: what it has paused, and when to look again.
#[derive(Debug, Default)]
struct Backpressure {
    pressure: Pressure,
    /// Partitions paused in librdkafka.
    paused: HashSet<TopicPartition>,
    /// Rebalance generation the pauses were applied to; `u64::MAX` forces a re-apply
    /// (re-assigned partitions start unpaused).
    generation: u64,
    /// [`Flow`] version the plan was made on.
    version: u64,
    /// Total load at which the plan must be made again, the audit saying nothing.
    recheck_at: u64,
}

impl Backpressure {
    fn calm(&self) -> bool {
        self.pressure == Pressure::default() && self.paused.is_empty()
    }
}

impl Tail {
    fn run(mut self) {
        while !self.stopping.load(Ordering::SeqCst) {
            // Starts first: a command may name partitions whose start was answered before
            // it was sent (see `Command::Reposition`).
            self.serve_starts();
            self.serve_commands();
            self.apply_backpressure();
            let polled = self.consumer.poll(Duration::from_millis(100));
            let keep_going = match polled {
                Some(Ok(m)) => {
                    let tagged = tag(&mut self.topics, &self.decoder, &m);
                    drop(m);
                    self.push(tagged)
                }
                Some(Err(e)) => self.flush() && self.report(e),
                None => self.flush(),
            };
            if !keep_going {
                break;
            }
        }
        // Flush what was read, then leave the group: closing revokes the partitions through
        // the rebalance callback, whose answer carries the final settled offsets to commit.
        self.flush();
        if let Err(e) = self.consumer.unsubscribe_and_close() {
            tracing::debug!(error = %e, "consumer close");
        }
    }

    fn serve_commands(&mut self) {
        while let Ok(cmd) = self.commands.try_recv() {
            match cmd {
                Command::Commit(offsets) => commit(&self.consumer, &offsets),
                Command::Reposition(offsets) => {
                    // The audit answered these partitions' starts before it sent this: apply
                    // them, so that every partition named is held when it is re-positioned.
                    self.serve_starts();
                    reposition(&self.consumer, &offsets);
                    // Re-assigned partitions start unpaused: re-apply on the next check.
                    self.bp.generation = u64::MAX;
                }
            }
        }
    }

    /// Assigns the partitions whose starts the audit task has answered, at those starts.
    fn serve_starts(&mut self) {
        let ctx = self.consumer.context();
        if !ctx.any_starting.load(Ordering::Acquire) {
            return;
        }
        let ready: Vec<Vec<(TopicPartition, Offset)>> = {
            let Ok(mut s) = ctx.starting.lock() else {
                return;
            };
            let mut ready = Vec::new();
            s.retain_mut(|st| match st.reply.try_recv() {
                Ok(starts) => {
                    ready.push(
                        starts
                            .into_iter()
                            .filter(|(tp, _)| st.partitions.contains(tp))
                            .collect(),
                    );
                    false
                }
                Err(oneshot::error::TryRecvError::Empty) => true,
                // The audit task is gone: the event channel ends and so does this thread.
                Err(oneshot::error::TryRecvError::Closed) => false,
            });
            ctx.any_starting.store(!s.is_empty(), Ordering::Release);
            ready
        };
        for starts in ready {
            if !starts.is_empty() {
                start_at(&self.consumer, &starts);
                // Newly assigned partitions start unpaused: re-apply on the next check.
                self.bp.generation = u64::MAX;
            }
        }
    }

    /// Applies the rule of [`Flow`]. Runs before every poll, so the common cases cost a few
    /// atomic loads: nothing paused and the total under `max_pending / 2`, or nothing changed
    /// since the last plan and no partition can have reached a mark by reading.
    fn apply_backpressure(&mut self) {
        let total = self.flow.load();
        if self.bp.calm() && total < self.flow.soft_mark() {
            return;
        }
        let version = self.flow.version.load(Ordering::Acquire);
        let generation = self.consumer.context().generation.load(Ordering::Acquire);
        if version == self.bp.version
            && generation == self.bp.generation
            && total < self.bp.recheck_at
        {
            return;
        }
        let Ok(assignment) = self.consumer.assignment() else {
            return;
        };
        let tps: Vec<TopicPartition> = assignment
            .elements()
            .iter()
            .map(|e| TopicPartition::new(e.topic(), e.partition()))
            .collect();
        let loads = self.flow.loads_of(&tps, &self.consumer.context().unsent());
        let was: Vec<bool> = tps.iter().map(|tp| self.bp.paused.contains(tp)).collect();
        let plan = plan(self.flow.max, total, &loads, &was, self.bp.pressure);
        // After a rebalance librdkafka's pause state is not ours any more (new partitions
        // start unpaused, kept ones may stay paused): state every partition again.
        let fresh = generation != self.bp.generation;
        let (mut pause, mut resume) = (TopicPartitionList::new(), TopicPartitionList::new());
        let (mut paused_now, mut resumed_now) = (Vec::new(), Vec::new());
        let mut want = HashSet::new();
        for (i, tp) in tps.iter().enumerate() {
            let (now, before) = (plan.pause[i], was[i]);
            if fresh || now != before {
                let list = if now { &mut pause } else { &mut resume };
                list.add_partition(&tp.topic, tp.partition);
            }
            if now != before {
                let changed = if now {
                    &mut paused_now
                } else {
                    &mut resumed_now
                };
                changed.push(format!("{tp} ({} undecided)", loads[i]));
            }
            if now {
                want.insert(tp.clone());
            }
        }
        let mut r = Ok(());
        if pause.count() > 0 {
            r = self.consumer.pause(&pause);
        }
        if r.is_ok() && resume.count() > 0 {
            r = self.consumer.resume(&resume);
        }
        if let Err(e) = r {
            // Planned again at the next poll.
            tracing::warn!(error = %e, "pause/resume failed");
            self.bp.generation = u64::MAX;
            return;
        }
        // One line per change of plan, naming the first few partitions: a cap reached on a
        // thousand partitions must not log a thousand lines.
        if !paused_now.is_empty() {
            tracing::warn!(
                partitions = paused_now.len(),
                first = %first_few(&paused_now),
                paused = want.len(),
                assigned = tps.len(),
                undecided = total,
                max_pending = self.flow.max,
                "backpressure: partitions paused until their records are decided"
            );
        }
        if !resumed_now.is_empty() {
            tracing::info!(
                partitions = resumed_now.len(),
                first = %first_few(&resumed_now),
                paused = want.len(),
                undecided = total,
                "backpressure: partitions resumed"
            );
        }
        if let Ok(mut p) = self.flow.paused.lock() {
            p.clone_from(&want);
        }
        self.bp = Backpressure {
            pressure: plan.pressure,
            paused: want,
            generation,
            version,
            recheck_at: total.saturating_add(plan.headroom),
        };
    }

    /// Adds a record to the batch; sends the batch when full or old. False: audit gone.
    fn push(&mut self, tagged: Tagged) -> bool {
        self.flow.in_flight.fetch_add(1, Ordering::AcqRel);
        let full = match self.consumer.context().batch.lock() {
            Ok(mut b) => {
                b.push(tagged);
                b.len() >= BATCH
            }
            Err(_) => true,
        };
        if full {
            return self.flush();
        }
        // Reading the clock costs as much as the rest of this function: past the first
        // records of a batch (a slow topic, where age matters) look at it every 64th.
        let len = self.pushed;
        self.pushed += 1;
        let started = *self.batch_started.get_or_insert_with(Instant::now);
        if (len < 64 || len.is_multiple_of(64)) && started.elapsed() >= BATCH_AGE {
            return self.flush();
        }
        true
    }

    fn flush(&mut self) -> bool {
        self.batch_started = None;
        self.pushed = 0;
        // Fresh topic names for the next batch: every record clones its topic's Arc here and
        // the audit task drops it on another core; sharing one Arc across batches would make
        // both threads fight over its reference count's cache line for every record.
        self.topics.clear();
        self.consumer.context().flush()
    }

    fn report(&self, e: KafkaError) -> bool {
        let event = match e {
            KafkaError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset) => {
                TailEvent::OffsetOutOfRange
            }
            e => TailEvent::Error(e.to_string()),
        };
        self.consumer.context().events.blocking_send(event).is_ok()
    }
}

/// Decodes and tags one message; the topic name is interned.
fn tag(
    topics: &mut Vec<Arc<str>>,
    decoder: &Decoder,
    m: &rdkafka::message::BorrowedMessage<'_>,
) -> Tagged {
    let name = m.topic();
    let topic = match topics.iter().find(|t| ***t == *name) {
        Some(t) => t.clone(),
        None => {
            let t: Arc<str> = Arc::from(name);
            topics.push(t.clone());
            t
        }
    };
    let timestamp_ms = match m.timestamp() {
        Timestamp::CreateTime(t) | Timestamp::LogAppendTime(t) if t >= 0 => Some(t),
        _ => None,
    };
    let meta = crate::record::RecordMeta {
        topic: m.topic(),
        partition: m.partition(),
        offset: m.offset(),
        key: m.key(),
    };
    Tagged {
        topic,
        partition: m.partition(),
        offset: m.offset(),
        timestamp_ms,
        tag: decoder.tag_record(m.payload(), &meta),
    }
}

trait CloseExt {
    fn unsubscribe_and_close(&self) -> Result<(), rdkafka::error::KafkaError>;
}

impl CloseExt for BaseConsumer<TailContext> {
    fn unsubscribe_and_close(&self) -> Result<(), rdkafka::error::KafkaError> {
        self.unsubscribe();
        // Serve the revoke callback that unsubscribing triggers.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match self.poll(Duration::from_millis(100)) {
                Some(_) => continue,
                None => {
                    if self.assignment().map(|a| a.count() == 0).unwrap_or(true) {
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
