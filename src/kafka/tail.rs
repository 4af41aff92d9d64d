//! The tailing consumer: one OS thread per audit owns the librdkafka consumer, polls it,
//! decodes and tags every record (so payloads never cross the channel), and sends batches and
//! rebalance events to the audit task over ONE bounded channel, which keeps their order:
//! every record of a partition is delivered before that partition's revocation.
//!
//! The rebalance callback does no work: it flushes the pending batch, sends the event, and
//! blocks until the audit task answers with the offsets to assign (on assign) or to commit
//! (on revoke). The audit task runs on the tokio runtime, never on this thread, so this wait
//! cannot deadlock.

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
use std::collections::HashMap;
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

/// Backpressure between the audit task and the tailing thread. The thread pauses every
/// assigned partition as soon as undecided records (in the ledger, or read and not yet
/// ingested) reach `max_pending`, and resumes below 90 % of it: pending memory is capped by
/// configuration, and nothing is dropped (paused partitions resume where they stopped).
#[derive(Debug)]
pub struct Flow {
    max: u64,
    pending: AtomicU64,
    in_flight: AtomicU64,
    paused: AtomicBool,
}

impl Flow {
    /// A flow capped at `max_pending` records.
    pub fn new(max_pending: u64) -> Self {
        Self {
            max: max_pending.max(1),
            pending: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            paused: AtomicBool::new(false),
        }
    }

    /// The audit ingested `n` records handed over by the thread.
    pub fn ingested(&self, n: u64) {
        let _ = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                Some(v.saturating_sub(n))
            });
    }

    /// The ledger now holds `n` undecided records.
    pub fn set_pending(&self, n: u64) {
        self.pending.store(n, Ordering::Release);
    }

    /// Records not yet decided, counting those in transit.
    pub fn load(&self) -> u64 {
        self.pending.load(Ordering::Acquire) + self.in_flight.load(Ordering::Acquire)
    }

    /// Whether consumption is paused right now.
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Acquire)
    }

    fn want_pause(&self, paused: bool) -> bool {
        let load = self.load();
        if paused {
            load > self.max / 10 * 9
        } else {
            load >= self.max
        }
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
}

impl TailContext {
    fn flush(&self) -> bool {
        let batch = match self.batch.lock() {
            // Full capacity up front: a batch grown by doubling copies itself a dozen times.
            Ok(mut b) if !b.is_empty() => std::mem::replace(&mut *b, Vec::with_capacity(BATCH)),
            _ => return true,
        };
        self.events.blocking_send(TailEvent::Records(batch)).is_ok()
    }
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
                let answer = if self.stopping.load(Ordering::SeqCst) {
                    None
                } else {
                    self.ask(alive, |reply| TailEvent::Assigned { partitions, reply })
                };
                for (tp, o) in answer.unwrap_or_default() {
                    // A negative start is librdkafka's logical end (-1) or beginning (-2): the
                    // audit could not resolve it to an offset and anchors on the first record.
                    if let Err(e) =
                        tpl.set_partition_offset(&tp.topic, tp.partition, KOffset::from_raw(o))
                    {
                        tracing::error!(%tp, error = %e, "cannot set start offset");
                    }
                }
                let r = if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                };
                if let Err(e) = r {
                    tracing::error!(error = %e, "assign failed");
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                let answer = self.ask(alive, |reply| TailEvent::Revoked { partitions, reply });
                if let Some(offsets) = answer.filter(|o| !o.is_empty()) {
                    commit(consumer, &offsets);
                }
                let r = if cooperative {
                    consumer.incremental_unassign(tpl)
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

fn reposition(consumer: &BaseConsumer<TailContext>, offsets: &[(TopicPartition, Offset)]) {
    let mut tpl = TopicPartitionList::new();
    for (tp, o) in offsets {
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
        kafka.statistics_interval.as_millis().max(100).to_string(),
    );
    let ctx = TailContext {
        events: tx,
        batch: Mutex::new(Vec::with_capacity(BATCH)),
        watermarks: watermarks.clone(),
        stopping: stopping.clone(),
        generation: AtomicU64::new(0),
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
        paused: None,
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
    /// `Some(generation)` while paused: the rebalance generation the pause was applied to.
    paused: Option<u64>,
}

impl Tail {
    fn run(mut self) {
        while !self.stopping.load(Ordering::SeqCst) {
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
                    reposition(&self.consumer, &offsets);
                    // Re-assigned partitions start unpaused: re-apply on the next check.
                    if self.paused.is_some() {
                        self.paused = Some(u64::MAX);
                    }
                }
            }
        }
    }

    /// Pauses every assigned partition while the flow is at its cap (re-applied after a
    /// rebalance), resumes below it.
    fn apply_backpressure(&mut self) {
        let want = self.flow.want_pause(self.paused.is_some());
        let generation = self.consumer.context().generation.load(Ordering::Acquire);
        if want == self.paused.is_some() && (!want || self.paused == Some(generation)) {
            return;
        }
        let Ok(assignment) = self.consumer.assignment() else {
            return;
        };
        let r = if want {
            self.consumer.pause(&assignment)
        } else {
            self.consumer.resume(&assignment)
        };
        match r {
            Ok(()) => {
                if want && self.paused.is_none() {
                    tracing::warn!(
                        undecided = self.flow.load(),
                        max_pending = self.flow.max,
                        "max_pending reached: consumption paused until verification catches up"
                    );
                } else if !want {
                    tracing::info!(undecided = self.flow.load(), "consumption resumed");
                }
                self.paused = want.then_some(generation);
                self.flow.paused.store(want, Ordering::Release);
            }
            Err(e) => tracing::warn!(error = %e, "pause/resume failed"),
        }
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
