//! The tail thread's loop: poll, tag, batch and send; serve commands and pending starts
//! between polls; pause and resume partitions under backpressure.

use super::{BATCH, BATCH_AGE, Command, Tagged, TailEvent};
use crate::kafka::tail::flow::{Flow, Pressure, plan};
use crate::kafka::tail::positions::{commit, reposition, start_at};
use crate::kafka::tail::queue::{self, MessageQueue, View};
use crate::kafka::tail::read_to::{self, ReadTo};
use crate::kafka::tail::rebalance::TailContext;
use crate::record::Decoder;
use crate::types::{Offset, TopicPartition};
use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Message, Timestamp};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

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

/// The state of the tailing thread.
pub(super) struct Tail {
    /// Declared before `consumer`, so dropped first: librdkafka wants an application's
    /// queues destroyed before the client. `None`: librdkafka gave no queue, and every
    /// message comes through the consumer's `poll`.
    pub(super) queue: Option<MessageQueue>,
    /// When every assigned partition is next forwarded to `queue` again (see `queue.rs`).
    pub(super) forward_at: Instant,
    /// Quick forwardings left after fetchers restarted (see [`Self::forward`]).
    pub(super) reforwards: u32,
    pub(super) consumer: BaseConsumer<TailContext>,
    pub(super) decoder: Decoder,
    pub(super) commands: std::sync::mpsc::Receiver<Command>,
    pub(super) stopping: Arc<AtomicBool>,
    pub(super) flow: Arc<Flow>,
    /// The batch being filled.
    pub(super) filling: Filling,
    pub(super) bp: Backpressure,
    /// The positions reported to the audit task (see `read_to.rs`).
    pub(super) read_to: ReadTo,
    /// How many [`Command::Reposition`]s were served (see [`TailEvent::Repositioned`]).
    pub(super) repositions: u64,
}

/// What the thread keeps of the batch it is filling (the records sit in the consumer
/// context's batch, which the rebalance callbacks flush too).
#[derive(Debug, Default)]
pub(super) struct Filling {
    /// Topic names interned for the batch: an audit reads a handful, so a scan beats
    /// hashing every record.
    topics: Vec<Arc<str>>,
    /// When its first record came.
    started: Option<Instant>,
    /// Records pushed since the last flush.
    pushed: u32,
}

impl Filling {
    /// Empty again for the next batch, keeping the topic list's capacity.
    fn reset(&mut self) {
        self.topics.clear();
        self.started = None;
        self.pushed = 0;
    }
}

/// The thread's side of [`Flow`]: what it has paused, and when to look again.
#[derive(Debug, Default)]
pub(super) struct Backpressure {
    pub(super) pressure: Pressure,
    /// Partitions paused in librdkafka.
    pub(super) paused: HashSet<TopicPartition>,
    /// Rebalance generation the pauses were applied to; `u64::MAX` forces a re-apply
    /// (re-assigned partitions start unpaused).
    pub(super) generation: u64,
    /// [`Flow`] version the plan was made on.
    pub(super) version: u64,
    /// Total load at which the plan must be made again, the audit saying nothing.
    pub(super) recheck_at: u64,
}

impl Backpressure {
    fn calm(&self) -> bool {
        self.pressure == Pressure::default() && self.paused.is_empty()
    }
}

impl Tail {
    pub(super) fn run(mut self) {
        while !self.stopping.load(Ordering::SeqCst) {
            // Starts first: a command may name partitions whose start was answered before
            // it was sent (see `Command::Reposition`).
            self.serve_starts();
            self.serve_commands();
            self.apply_backpressure();
            let now = Instant::now();
            if self.forward_at <= now {
                self.forward_all();
            }
            if self.read_to.due(now) && !self.report_positions(now) {
                break;
            }
            // The partitions' messages, in batches, then the consumer queue: its events
            // (rebalances, errors, statistics) and the messages of any partition not
            // forwarded. Neither waits while the other had something.
            let Some(read) = self.read_queue(Duration::ZERO) else {
                break;
            };
            let keep_going = match self.poll_consumer(Duration::ZERO) {
                Some(Some(_)) => true,
                Some(None) if read == 0 => {
                    // Nothing anywhere: send what waits, then wait for messages (events
                    // are served at the next turn, within 100 ms).
                    self.flush() && self.read_queue(Duration::from_millis(100)).is_some()
                }
                Some(None) => true,
                None => false,
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
                    self.restarted(offsets.iter().map(|(tp, _)| tp.clone()).collect());
                    // Their fetchers restart, without our forwarding (see `queue.rs`).
                    self.forward(offsets.iter().map(|(tp, _)| tp.clone()).collect(), false);
                    // Re-assigned partitions start unpaused: re-apply on the next check.
                    self.bp.generation = u64::MAX;
                    // After `restarted`: positions reported from now on are guarded by it,
                    // and the audit may apply them. A send error means the audit is gone,
                    // which the next event sent finds out.
                    self.repositions += 1;
                    let _ = self
                        .consumer
                        .context()
                        .events
                        .blocking_send(TailEvent::Repositioned(self.repositions));
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
                self.forward(starts.iter().map(|(tp, _)| tp.clone()).collect(), true);
                start_at(&self.consumer, &starts);
                self.restarted(starts.iter().map(|(tp, _)| tp.clone()).collect());
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

    /// Forwards these partitions' fetch queues to the thread's queue (see `queue.rs`):
    /// `starting` ones (their fetcher starts next) are routed; others are forwarded again if
    /// they are. Either way their fetchers restart, and librdkafka's stop of the old ones
    /// may clear this forwarding after it is made: it is made again in the next 250 ms.
    fn forward(&mut self, tps: Vec<TopicPartition>, starting: bool) {
        let Some(q) = &mut self.queue else {
            return;
        };
        if starting {
            let failed = q.route(&self.consumer, &tps);
            if failed > 0 {
                tracing::debug!(
                    partitions = failed,
                    "fetch queues not forwarded; read through the consumer queue"
                );
            }
        } else {
            // Every routed one: harmless for the others, and none is let go here.
            q.reforward(|_| true);
        }
        self.reforwards = REFORWARDS;
        self.forward_at = Instant::now() + REFORWARD_AFTER;
    }

    /// Forwards every assigned routed partition again: librdkafka drops a forwarding
    /// whenever it restarts a fetcher (see `queue.rs`); this bounds how long messages wait.
    fn forward_all(&mut self) {
        let next = if self.reforwards > 0 {
            self.reforwards -= 1;
            REFORWARD_AFTER
        } else {
            FORWARD_EVERY
        };
        self.forward_at = Instant::now() + next;
        let Some(q) = &mut self.queue else {
            return;
        };
        let Ok(assignment) = self.consumer.assignment() else {
            return;
        };
        let elements = assignment.elements();
        let assigned: HashSet<(&str, i32)> = elements
            .iter()
            .map(|e| (e.topic(), e.partition()))
            .collect();
        q.reforward(|tp| assigned.contains(&(tp.topic.as_str(), tp.partition)));
    }

    /// Reads a batch from the thread's queue into the batch, waiting up to `timeout` for
    /// it. Returns how many messages it read; `None`: the audit is gone.
    fn read_queue(&mut self, timeout: Duration) -> Option<usize> {
        let limit = self.read_limit();
        let Some(q) = &mut self.queue else {
            // No queue: the consumer queue's poll waits instead.
            if timeout.is_zero() {
                return Some(0);
            }
            return self
                .poll_consumer(timeout)
                .map(|got| usize::from(got == Some(true)));
        };
        let messages = q.read(timeout, limit);
        let n = messages.len();
        if n == 0 {
            return Some(0);
        }
        let mut tagged = Vec::with_capacity(n);
        let mut errors = Vec::new();
        // In the queue's order (see `read_to.rs`): an error makes its partition's position
        // untrusted, a record of the partition after it makes it trusted again. `last`: the
        // partition of the run of records going on, already proven.
        let mut last: Option<(&str, i32)> = None;
        for m in messages.iter() {
            match m {
                Ok(v) => {
                    if last != Some((v.topic, v.partition)) && self.read_to.any_unproven() {
                        self.read_to.delivered(v.topic, v.partition);
                        last = Some((v.topic, v.partition));
                    }
                    tagged.push(tag(&mut self.filling.topics, &self.decoder, &v));
                }
                Err(f) => {
                    if let Some((topic, partition)) = f.at {
                        self.read_to.errored(TopicPartition::new(topic, partition));
                    }
                    last = None;
                    // Kept in place: a partition's error follows the records before it.
                    errors.push((tagged.len(), f.error));
                }
            }
        }
        // The messages go back to librdkafka before anything here can block.
        drop(messages);
        let mut rest = tagged.into_iter();
        let mut done = 0;
        for (at, e) in errors {
            if !(self.push_all(rest.by_ref().take(at - done)) && self.flush() && self.report(e)) {
                return None;
            }
            done = at;
        }
        self.push_all(rest).then_some(n)
    }

    /// Polls the consumer queue once: serves its events (rebalance callbacks run here) and
    /// takes a message of a partition not forwarded to the thread's queue. `Some(Some(true))`:
    /// a record, `Some(Some(false))`: an error reported, `Some(None)`: nothing; `None`: the
    /// audit is gone.
    fn poll_consumer(&mut self, timeout: Duration) -> Option<Option<bool>> {
        let ok = match self.consumer.poll(timeout) {
            Some(Ok(m)) => {
                let tagged = tag(&mut self.filling.topics, &self.decoder, &view(&m));
                drop(m);
                if self.read_to.any_unproven() {
                    self.read_to_delivered(std::slice::from_ref(&tagged));
                }
                return self.push(tagged).then_some(Some(true));
            }
            Some(Err(e)) => self.flush() && self.report(e),
            None => return Some(None),
        };
        ok.then_some(Some(false))
    }

    /// How many records may be read before the flow must be looked at again: up to the
    /// next mark [`Self::apply_backpressure`] plans at, and never past `max_pending`, so a
    /// batch read overshoots neither (one record always may be, as one poll would).
    fn read_limit(&self) -> usize {
        let total = self.flow.load();
        let next = if self.bp.calm() {
            self.flow.soft_mark()
        } else {
            self.bp.recheck_at
        };
        let room = next.min(self.flow.max).saturating_sub(total).max(1);
        usize::try_from(room).unwrap_or(usize::MAX).min(queue::READ)
    }

    /// Adds records to the batch under one lock; sends it when full or old. False: audit
    /// gone.
    fn push_all(&mut self, records: impl ExactSizeIterator<Item = Tagged>) -> bool {
        let n = records.len();
        if n == 0 {
            return true;
        }
        self.flow.in_flight.fetch_add(n as u64, Ordering::AcqRel);
        let full = match self.consumer.context().batch.lock() {
            Ok(mut b) => {
                b.extend(records);
                b.len() >= BATCH
            }
            Err(_) => true,
        };
        let started = *self.filling.started.get_or_insert_with(Instant::now);
        if full || started.elapsed() >= BATCH_AGE {
            return self.flush();
        }
        true
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
        let len = self.filling.pushed;
        self.filling.pushed += 1;
        let started = *self.filling.started.get_or_insert_with(Instant::now);
        if (len < 64 || len.is_multiple_of(64)) && started.elapsed() >= BATCH_AGE {
            return self.flush();
        }
        true
    }

    pub(super) fn flush(&mut self) -> bool {
        // Fresh topic names for the next batch too: every record clones its topic's Arc
        // here and the audit task drops it on another core; sharing one Arc across batches
        // would make both threads fight over its reference count's cache line for every
        // record.
        self.filling.reset();
        self.consumer.context().flush()
    }

    /// Asks librdkafka where the assigned partitions have been read to and reports the
    /// changed, trusted positions after the batch holding every record below them (see
    /// `read_to.rs`). False: audit gone.
    fn report_positions(&mut self, now: Instant) -> bool {
        let positions = match self.consumer.position() {
            Ok(list) => positions_of(&list),
            Err(e) => {
                tracing::debug!(error = %e, "consumer positions unavailable; asked again later");
                self.read_to.later(now);
                return true;
            }
        };
        let changed = self.read_to.observe(now, positions);
        if changed.is_empty() {
            return true;
        }
        // Flushed first: the records below the positions reach the audit task before them.
        self.flush()
            && self
                .consumer
                .context()
                .events
                .blocking_send(TailEvent::ReadTo(changed))
                .is_ok()
    }

    /// These partitions' fetchers were just (re)started: their positions are trusted again
    /// once proven the new fetchers' (see `read_to.rs`).
    fn restarted(&mut self, tps: Vec<TopicPartition>) {
        let now: HashMap<TopicPartition, Option<Offset>> = self
            .consumer
            .position()
            .map(|l| positions_of(&l).into_iter().collect())
            .unwrap_or_default();
        for tp in tps {
            // Unknown (the query failed, or the partition is not listed): not trusted yet.
            let reset = matches!(now.get(&tp), Some(None));
            self.read_to.started(tp, reset);
        }
    }

    /// Records were handed over: their partitions' positions are their fetchers' own.
    fn read_to_delivered(&mut self, records: &[Tagged]) {
        let mut last: Option<(&str, i32)> = None;
        for r in records {
            let here = (&*r.topic, r.partition);
            if last != Some(here) {
                self.read_to.delivered(here.0, here.1);
                last = Some(here);
            }
        }
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

/// How often every assigned partition is forwarded to the thread's queue again.
const FORWARD_EVERY: Duration = Duration::from_secs(1);
/// After fetchers restarted: forwarded again this often, [`REFORWARDS`] times.
const REFORWARD_AFTER: Duration = Duration::from_millis(50);
const REFORWARDS: u32 = 5;

/// (partition, position) of each entry of a position list.
fn positions_of(list: &TopicPartitionList) -> Vec<(TopicPartition, Option<Offset>)> {
    list.elements()
        .iter()
        .map(|e| {
            (
                TopicPartition::new(e.topic(), e.partition()),
                read_to::offset_of(e.offset()),
            )
        })
        .collect()
}

/// The view of a message the consumer queue handed over.
fn view<'a>(m: &'a rdkafka::message::BorrowedMessage<'_>) -> View<'a> {
    let timestamp_ms = match m.timestamp() {
        Timestamp::CreateTime(t) | Timestamp::LogAppendTime(t) if t >= 0 => Some(t),
        _ => None,
    };
    View {
        topic: m.topic(),
        partition: m.partition(),
        offset: m.offset(),
        timestamp_ms,
        key: m.key(),
        payload: m.payload(),
    }
}

/// Decodes and tags one message; the topic name is interned.
pub(super) fn tag(topics: &mut Vec<Arc<str>>, decoder: &Decoder, m: &View<'_>) -> Tagged {
    let name = m.topic;
    let topic = match topics.iter().find(|t| ***t == *name) {
        Some(t) => t.clone(),
        None => {
            let t: Arc<str> = Arc::from(name);
            topics.push(t.clone());
            t
        }
    };
    let meta = crate::record::RecordMeta {
        topic: name,
        partition: m.partition,
        offset: m.offset,
        key: m.key,
    };
    Tagged {
        topic,
        partition: m.partition,
        offset: m.offset,
        timestamp_ms: m.timestamp_ms,
        tag: decoder.tag_record(m.payload, &meta),
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
