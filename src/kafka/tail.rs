//! The tailing consumer: one OS thread per audit owns the librdkafka consumer, reads its
//! partitions' messages in batches (`queue.rs`) and polls it for everything else, decodes and
//! tags every record (so payloads never cross the channel), and sends batches and rebalance
//! events to the audit task over ONE bounded channel, which keeps their order: every record
//! of a partition is delivered before that partition's revocation (a batch read is pushed
//! whole before the next poll, which is where rebalance callbacks run).
//!
//! The rebalance callback does no work. On revoke it flushes the pending batch, sends the
//! event and blocks until the audit task answers with the settled offsets to commit (they
//! must be committed before the partitions go). On assign it completes librdkafka's side of
//! the rebalance with none of the new partitions fetching, sends the event and returns: the
//! audit task resolves the starts (store, handover topic, watermark and time lookups: up to
//! tens of seconds) while this thread keeps reading the partitions it had, serving commits
//! and backpressure; the new partitions are assigned at their starts once the answer comes
//! (`rebalance::Starting`). The audit task runs on the tokio runtime, never on this thread, so no
//! wait here can deadlock.

use super::client;
use crate::config::KafkaConfig;
use crate::record::{Decoder, Tag};
use crate::types::{Offset, TopicPartition};
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};

mod flow;
mod positions;
mod queue;
mod read_to;
mod rebalance;
mod thread;

pub use flow::Flow;
use queue::MessageQueue;
use read_to::ReadTo;
use rebalance::TailContext;
use thread::{Backpressure, Tail};

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
        /// The consumer reports the assignment lost (session or poll interval expired):
        /// another member may own the partitions already, so nothing of theirs is handed
        /// over or committed.
        lost: bool,
        /// The audit task's answer.
        reply: oneshot::Sender<Vec<(TopicPartition, Offset)>>,
    },
    /// Where the consumer has read these partitions to (its position): every record below
    /// was sent before this event, so the offsets between the last record and the position
    /// held none the consumer delivers (transaction markers, aborted batches under
    /// read_committed): holes. See `read_to.rs`.
    ReadTo(Vec<(TopicPartition, Offset)>),
    /// A consumer error worth surfacing (broker down, authorization...).
    Error(String),
    /// A fetch position fell outside the log (retention deleted unread records, or the
    /// topic was recreated). librdkafka does not say which partition: the audit checks all
    /// of them against their watermarks and answers with [`Command::Reposition`].
    OffsetOutOfRange,
    /// The thread has served this many [`Command::Reposition`]s since it started (commands
    /// are served in the order sent): every position it reports after this was asked for
    /// after those partitions were re-positioned. Until then a position of a re-positioned
    /// partition may be the stopped fetcher's — past records of the new start, or the
    /// out-of-range error's offset + 1 — and the audit drops it (`audit/read_to.rs`).
    Repositioned(u64),
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

/// (log start, log end) per partition as last learnt by librdkafka while fetching.
pub type Watermarks = Arc<Mutex<HashMap<TopicPartition, (Offset, Offset)>>>;

/// The last stable offset per partition as last learnt by librdkafka while fetching: only a
/// read_committed consumer learns it (a read_uncommitted one reports the log end there).
pub type LastStable = Arc<Mutex<HashMap<TopicPartition, Offset>>>;

/// The running tailing thread.
pub struct TailHandle {
    /// Events for the audit task.
    pub events: mpsc::Receiver<TailEvent>,
    /// Commands for the thread.
    pub commands: std::sync::mpsc::Sender<Command>,
    /// Watermarks learnt from librdkafka statistics.
    pub watermarks: Watermarks,
    /// Last stable offsets learnt from librdkafka statistics.
    pub last_stable: LastStable,
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
    let last_stable: LastStable = Arc::default();
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
        last_stable: last_stable.clone(),
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
        queue: MessageQueue::new(&consumer),
        forward_at: Instant::now(),
        reforwards: 0,
        consumer,
        decoder,
        commands: ctx_rx,
        stopping: stopping.clone(),
        flow: flow.clone(),
        filling: Default::default(),
        bp: Backpressure::default(),
        read_to: ReadTo::default(),
        repositions: 0,
    };
    let thread = std::thread::Builder::new()
        .name(format!("tail-{group}"))
        .spawn(move || tail.run())
        .map_err(|e| rdkafka::error::KafkaError::ClientCreation(e.to_string()))?;
    Ok(TailHandle {
        events: rx,
        commands: ctx_tx,
        watermarks,
        last_stable,
        flow,
        stopping,
        thread: Some(thread),
    })
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod review_position;
