//! The tailing thread's message queue: every assigned partition's fetch queue forwarded to
//! one queue of the thread's own, read in batches.
//!
//! Why: `BaseConsumer::poll` hands over one message per call, and each call took the
//! queue's lock, read the clock three times (rust-rdkafka's timeout, librdkafka's poll
//! bookkeeping) and built an event: a quarter of the tailing thread's time in a `perf`
//! profile of the offset_columns tail (issue 15). `rd_kafka_consume_batch_queue` pays that
//! once per batch. It cannot read the consumer's own queue (rebalance events there would be
//! served as librdkafka's default, an unassign), so the partitions' fetch queues are
//! forwarded here and rebalances, errors, statistics and commits stay on the consumer queue,
//! which the thread keeps polling.
//!
//! librdkafka clears a fetch queue's forwarding whenever it stops the partition's fetcher
//! (an unassign, a re-assign), and an application forwarding is not restored when the
//! fetcher starts again: its messages would then wait in the partition's own queue. So a
//! partition is forwarded before each start of its fetcher, a few times in the 250 ms after
//! (librdkafka stops the old fetcher asynchronously, and that stop may come after our
//! forwarding), and once a second while assigned; forwarding again is idempotent and moves
//! what waited behind what this queue holds (the stop bumped the partition's version, so
//! what this queue still holds of before is discarded as outdated): a partition's order is
//! kept. A partition whose queue could not be had at its start stays on the consumer queue,
//! which the thread reads as before, and is never forwarded later: its messages would then
//! come through both queues, out of order.

use super::TailContext;
use crate::types::TopicPartition;
use rdkafka::bindings as rdsys;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::time::Duration;

/// Messages taken from the queue per call.
pub(super) const READ: usize = 1024;

/// A queue of the consumer's, owned by the tailing thread, with the partitions forwarded
/// to it.
pub(super) struct MessageQueue {
    ptr: *mut rdsys::rd_kafka_queue_t,
    /// A handle on the fetch queue of each partition forwarded at its start, kept to forward
    /// it again: `rd_kafka_queue_get_partition` takes the client's write lock and marks the
    /// partition desired, which a revoked partition must not become again.
    routed: HashMap<TopicPartition, PartitionQueue>,
    /// The pointers a read fills, kept between reads.
    buf: Vec<*mut rdsys::rd_kafka_message_t>,
}

// SAFETY: librdkafka queues are thread-safe (every operation takes the queue's lock); the
// handles and messages are only used by the tailing thread, and moved to it once.
unsafe impl Send for MessageQueue {}

/// One reference on a partition's fetch queue.
struct PartitionQueue(*mut rdsys::rd_kafka_queue_t);

impl Drop for PartitionQueue {
    fn drop(&mut self) {
        // SAFETY: our one reference, released once.
        unsafe { rdsys::rd_kafka_queue_destroy(self.0) }
    }
}

impl MessageQueue {
    /// A new queue of `consumer`'s; `None` if librdkafka gives none.
    pub(super) fn new(consumer: &BaseConsumer<TailContext>) -> Option<Self> {
        // SAFETY: the client pointer is valid for the consumer's lifetime, which outlives
        // this queue (see `Tail`'s field order).
        let ptr = unsafe { rdsys::rd_kafka_queue_new(consumer.client().native_ptr()) };
        (!ptr.is_null()).then(|| Self {
            ptr,
            routed: HashMap::new(),
            buf: Vec::with_capacity(READ),
        })
    }

    /// Forwards the fetch queue of each partition whose fetcher starts next to this queue.
    /// Returns how many could not be (their messages keep coming through the consumer
    /// queue, and they are never forwarded later, see the module docs).
    pub(super) fn route(
        &mut self,
        consumer: &BaseConsumer<TailContext>,
        tps: &[TopicPartition],
    ) -> usize {
        let mut failed = 0;
        for tp in tps {
            if let Some(q) = self.routed.get(tp) {
                // SAFETY: both queues are live handles.
                unsafe { rdsys::rd_kafka_queue_forward(q.0, self.ptr) };
                continue;
            }
            let Ok(topic) = CString::new(tp.topic.as_bytes()) else {
                failed += 1;
                continue;
            };
            // SAFETY: valid client pointer and NUL-terminated topic; the handle is one
            // reference, kept in `routed` and released by its drop.
            let q = unsafe {
                rdsys::rd_kafka_queue_get_partition(
                    consumer.client().native_ptr(),
                    topic.as_ptr(),
                    tp.partition,
                )
            };
            if q.is_null() {
                failed += 1;
                continue;
            }
            let q = PartitionQueue(q);
            // SAFETY: both queues are live handles.
            unsafe { rdsys::rd_kafka_queue_forward(q.0, self.ptr) };
            self.routed.insert(tp.clone(), q);
        }
        failed
    }

    /// Forwards again every routed partition `keep` holds, and lets the others' handles go
    /// (revoked partitions: a start routes them again).
    pub(super) fn reforward(&mut self, keep: impl Fn(&TopicPartition) -> bool) {
        let ptr = self.ptr;
        self.routed.retain(|tp, q| {
            let kept = keep(tp);
            if kept {
                // SAFETY: both queues are live handles.
                unsafe { rdsys::rd_kafka_queue_forward(q.0, ptr) };
            }
            kept
        });
    }

    /// Takes up to `limit` (at most [`READ`], at least 1) messages: waits up to `timeout` for
    /// the first, then takes what is there (librdkafka's batch read alone would wait for the
    /// whole batch).
    pub(super) fn read(&mut self, timeout: Duration, limit: usize) -> Messages<'_> {
        let limit = limit.clamp(1, READ);
        let buf = &mut self.buf;
        buf.clear();
        buf.reserve(limit);
        let mut n = 0;
        if !timeout.is_zero() {
            let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
            // SAFETY: room for one pointer; librdkafka writes at most one and says how many.
            n = unsafe { rdsys::rd_kafka_consume_batch_queue(self.ptr, ms, buf.as_mut_ptr(), 1) }
                .clamp(0, 1) as usize;
            if n == 0 {
                return Messages { ptrs: buf };
            }
        }
        if n == limit {
            // SAFETY: librdkafka initialised the first entry.
            unsafe { buf.set_len(n) };
            return Messages { ptrs: buf };
        }
        // SAFETY: room for `limit` pointers from `n`; librdkafka writes at most `limit - n`
        // and returns how many (negative: an error, none written).
        let more = unsafe {
            rdsys::rd_kafka_consume_batch_queue(self.ptr, 0, buf.as_mut_ptr().add(n), limit - n)
        };
        let total = n + usize::try_from(more).unwrap_or(0).min(limit - n);
        // SAFETY: librdkafka initialised the first `total` (≤ limit ≤ capacity) entries.
        unsafe { buf.set_len(total) };
        Messages { ptrs: buf }
    }
}

impl Drop for MessageQueue {
    fn drop(&mut self) {
        self.routed.clear();
        // SAFETY: our one reference, released once.
        unsafe { rdsys::rd_kafka_queue_destroy(self.ptr) }
    }
}

/// Messages read from a [`MessageQueue`], destroyed when this is dropped.
pub(super) struct Messages<'q> {
    ptrs: &'q mut Vec<*mut rdsys::rd_kafka_message_t>,
}

impl Messages<'_> {
    /// How many messages were read.
    pub(super) fn len(&self) -> usize {
        self.ptrs.len()
    }

    /// The messages, in the queue's order.
    pub(super) fn iter(&self) -> impl Iterator<Item = Result<View<'_>, Failed<'_>>> {
        // SAFETY: every pointer is a live message until `self` is dropped.
        self.ptrs.iter().map(|&p| unsafe { View::of(&*p) })
    }
}

impl Drop for Messages<'_> {
    fn drop(&mut self) {
        for &p in self.ptrs.iter() {
            // SAFETY: each message was handed to us once by consume_batch_queue.
            unsafe { rdsys::rd_kafka_message_destroy(p) }
        }
        self.ptrs.clear();
    }
}

/// What the tailing thread reads of one message, from either queue.
#[derive(Debug, Clone, Copy)]
pub(super) struct View<'a> {
    pub(super) topic: &'a str,
    pub(super) partition: i32,
    pub(super) offset: i64,
    pub(super) timestamp_ms: Option<i64>,
    pub(super) key: Option<&'a [u8]>,
    pub(super) payload: Option<&'a [u8]>,
}

/// An error message read from a [`MessageQueue`].
#[derive(Debug)]
pub(super) struct Failed<'a> {
    /// The partition it is of (topic, partition), when it names one. The batch read moves
    /// that partition's position to the error's offset + 1 (librdkafka 2.12.1, rdkafka_queue.c
    /// `rd_kafka_q_serve_rkmessages`) though nothing was delivered there: see `read_to.rs`.
    pub(super) at: Option<(&'a str, i32)>,
    /// The error, as rust-rdkafka's `poll` gives it.
    pub(super) error: KafkaError,
}

impl<'a> View<'a> {
    /// The view of a message, or its error as rust-rdkafka's `poll` gives it, with the
    /// partition it is of.
    ///
    /// # Safety
    /// `m` must be a live message from librdkafka.
    pub(super) unsafe fn of(m: &'a rdsys::rd_kafka_message_t) -> Result<View<'a>, Failed<'a>> {
        // SAFETY: the message and its topic handle live as long as `m`.
        let topic = unsafe { topic_of(m) };
        if m.err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(Failed {
                // Without a topic handle the error has no partition, whose position it
                // could have moved.
                at: topic.map(|t| (t, m.partition)),
                error: if m.err == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__PARTITION_EOF {
                    KafkaError::PartitionEOF(m.partition)
                } else {
                    KafkaError::MessageConsumption(RDKafkaErrorCode::from(m.err))
                },
            });
        }
        let topic = topic.unwrap_or("");
        // SAFETY (whole block): the message and what it points to live as long as `m`.
        unsafe {
            let mut kind = rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
            let t = rdsys::rd_kafka_message_timestamp(m, &mut kind);
            let timestamp_ms = (kind
                != rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE
                && t >= 0)
                .then_some(t);
            let bytes = |p: *mut std::ffi::c_void, len: usize| {
                (!p.is_null()).then(|| std::slice::from_raw_parts(p as *const u8, len))
            };
            Ok(View {
                topic,
                partition: m.partition,
                offset: m.offset,
                timestamp_ms,
                key: bytes(m.key, m.key_len),
                payload: bytes(m.payload, m.len),
            })
        }
    }
}

/// The topic name of a message, if it has a topic handle (and a UTF-8 name: topic names
/// are ASCII).
///
/// # Safety
/// `m` must be a live message from librdkafka.
unsafe fn topic_of(m: &rdsys::rd_kafka_message_t) -> Option<&str> {
    if m.rkt.is_null() {
        return None;
    }
    // SAFETY: a live message's topic handle, whose name lives as long as the handle.
    unsafe {
        let name = rdsys::rd_kafka_topic_name(m.rkt);
        if name.is_null() {
            return None;
        }
        CStr::from_ptr(name).to_str().ok()
    }
}
