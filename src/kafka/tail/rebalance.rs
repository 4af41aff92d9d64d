//! The consumer context: librdkafka's callbacks (statistics, errors, rebalances), which do no
//! work but flush, send one event and, on revoke, wait for the audit's answer.

use super::{BATCH, LastStable, Tagged, TailEvent, Watermarks};
use crate::kafka::tail::flow::Flow;
use crate::kafka::tail::positions::{commit, held};
use crate::types::{Offset, TopicPartition};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, TopicPartitionList};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, oneshot};

pub(super) struct TailContext {
    pub(super) events: mpsc::Sender<TailEvent>,
    pub(super) batch: Mutex<Vec<Tagged>>,
    pub(super) watermarks: Watermarks,
    pub(super) last_stable: LastStable,
    pub(super) stopping: Arc<AtomicBool>,
    /// Bumped by every rebalance, so a paused thread re-pauses newly assigned partitions.
    pub(super) generation: AtomicU64,
    pub(super) flow: Arc<Flow>,
    /// Assignments whose starts the audit task has not answered yet.
    pub(super) starting: Mutex<Vec<Starting>>,
    /// Whether `starting` holds anything: the poll loop looks before every poll, and an
    /// atomic load is cheaper than the lock there.
    pub(super) any_starting: AtomicBool,
}

/// Partitions assigned by the group whose start offsets the audit task is still resolving.
/// They are not in librdkafka's assignment yet, so nothing is fetched for them before their
/// start is known (a fetch at the group's committed offset could run ahead of the store's
/// settled offset).
pub(super) struct Starting {
    /// The partitions still waiting (a revocation takes its own out).
    pub(super) partitions: HashSet<TopicPartition>,
    pub(super) reply: oneshot::Receiver<Vec<(TopicPartition, Offset)>>,
}

impl TailContext {
    pub(super) fn flush(&self) -> bool {
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
    pub(super) fn unsent(&self) -> Vec<(Arc<str>, i32, u64)> {
        self.batch
            .lock()
            .map(|b| per_partition(&b))
            .unwrap_or_default()
    }
}

/// Records per (topic, partition) of `batch`.
pub(super) fn per_partition(batch: &[Tagged]) -> Vec<(Arc<str>, i32, u64)> {
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
        let Ok(mut ls) = self.last_stable.lock() else {
            return;
        };
        for (name, t) in &s.topics {
            for (p, ps) in &t.partitions {
                if *p < 0 || ps.hi_offset < 0 {
                    continue;
                }
                let tp = TopicPartition::new(name.clone(), *p);
                if ps.ls_offset >= 0 {
                    ls.insert(tp.clone(), ps.ls_offset);
                }
                w.insert(tp, (ps.lo_offset, ps.hi_offset));
            }
        }
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        let _ = self
            .events
            .try_send(TailEvent::Error(format!("{error}: {reason}")));
    }

    /// rust-rdkafka's logging, plus: a partition's error op (a partition gone with its
    /// topic, say) met by the thread's batch read (`queue.rs`) is served by librdkafka
    /// itself, which, without an error callback, logs it with facility "ERROR". It is an
    /// error event on the consumer queue otherwise: surfaced the same way here.
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        use RDKafkaLogLevel as L;
        match level {
            L::Emerg | L::Alert | L::Critical | L::Error => {
                tracing::error!(target: "librdkafka", "librdkafka: {fac} {message}");
                if fac == "ERROR" {
                    let _ = self.events.try_send(TailEvent::Error(message.to_string()));
                }
            }
            L::Warning => tracing::warn!(target: "librdkafka", "librdkafka: {fac} {message}"),
            L::Notice | L::Info => {
                tracing::info!(target: "librdkafka", "librdkafka: {fac} {message}")
            }
            L::Debug => tracing::debug!(target: "librdkafka", "librdkafka: {fac} {message}"),
        }
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
                // Lost (not given up in a rebalance): the group moved on without this
                // member, whose commit would be refused and whose handover publish would
                // replace the new owner's.
                let lost = consumer.assignment_lost();
                let answer = self.ask(alive, |reply| TailEvent::Revoked {
                    partitions,
                    lost,
                    reply,
                });
                if let Some(offsets) = answer.filter(|o| !o.is_empty() && !lost) {
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
