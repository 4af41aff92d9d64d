//! Ingest: records from the tailing thread, and held records whose schema arrived, into
//! the partition ledgers, counted once per partition and reason.

use super::{Audit, Part};
use crate::audit::held::Held;
use crate::kafka::Tagged;
use crate::ledger::{KeyBook, Observed, PartitionLedger};
use crate::metrics::{AuditMetrics, Ingested};
use crate::record::{Decoder, FilterReason, Tag};
use crate::types::TopicPartition;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

impl Audit {
    pub(super) fn ingest(&mut self, batch: Vec<Tagged>) {
        ingest_batch(
            &self.metrics,
            &mut self.parts,
            self.checker.book_mut(),
            batch,
            self.io.clock.now_ms(),
        );
    }

    /// Hands every held record whose schema is now cached to the ledger, in offset order,
    /// and refreshes the flow control (held records count as pending there).
    pub(super) fn release_held(&mut self) {
        let released = release_held(
            &self.metrics,
            &mut self.parts,
            &self.io.decoder,
            self.checker.book_mut(),
            self.io.clock.now_ms(),
        );
        if released > 0 {
            self.update_flow();
        }
    }
}

/// Where [`ingest_batch`] finds each partition's ledger and held records.
pub trait Ledgers {
    /// The ledger of `tp` and the records held before it, when the partition is assigned.
    /// Without a [`Held`] (the benchmark, whose formats never wait for a schema) a record
    /// that waits for its schema is counted undecodable.
    fn slot_mut(
        &mut self,
        tp: &TopicPartition,
    ) -> Option<(&mut PartitionLedger, Option<&mut Held>)>;
}

impl Ledgers for BTreeMap<TopicPartition, Part> {
    fn slot_mut(
        &mut self,
        tp: &TopicPartition,
    ) -> Option<(&mut PartitionLedger, Option<&mut Held>)> {
        self.get_mut(tp).map(|p| (&mut p.ledger, Some(&mut p.held)))
    }
}

impl Ledgers for HashMap<TopicPartition, PartitionLedger> {
    fn slot_mut(
        &mut self,
        tp: &TopicPartition,
    ) -> Option<(&mut PartitionLedger, Option<&mut Held>)> {
        self.get_mut(tp).map(|l| (l, None))
    }
}

/// Hands every held record whose schema is now cached to its ledger, in offset order
/// ([`Audit::release_held`]). Returns how many records were new.
pub(super) fn release_held(
    metrics: &AuditMetrics,
    parts: &mut BTreeMap<TopicPartition, Part>,
    decoder: &Decoder,
    mut book: Option<&mut KeyBook>,
    now: i64,
) -> u64 {
    let mut ready = Vec::new();
    for part in parts.values_mut() {
        if !part.held.is_empty() {
            ready.extend(part.held.release(decoder, book.as_deref_mut()));
        }
    }
    if ready.is_empty() {
        return 0;
    }
    let n = ingest_batch(metrics, parts, book, ready, now);
    // Positions held back behind the released records apply now (see `read_to.rs`).
    for part in parts.values_mut() {
        part.catch_up();
    }
    n
}

/// Whether `r` is of `topic`/`partition`. The tailing thread interns a batch's topic names,
/// so the pointer comparison decides nearly always.
fn same_partition(r: &Tagged, topic: &Arc<str>, partition: i32) -> bool {
    r.partition == partition && (Arc::ptr_eq(&r.topic, topic) || *r.topic == **topic)
}

/// Feeds one batch from the tailing thread into the ledgers and counts it, once per
/// partition and reason (one label lookup per batch, not per record). Records of
/// unassigned partitions and re-delivered offsets are not counted. Returns how many records
/// were new. The daemon's hot path, public so the benchmark measures this very code.
pub fn ingest_batch(
    metrics: &AuditMetrics,
    ledgers: &mut impl Ledgers,
    mut book: Option<&mut KeyBook>,
    batch: Vec<Tagged>,
    now: i64,
) -> u64 {
    let mut counts: HashMap<(Arc<str>, i32), Ingested> = HashMap::new();
    let mut total = 0;
    // One lookup key reused for the whole batch: no String allocated per record.
    let mut key = TopicPartition::new(String::new(), 0);
    // librdkafka hands out a partition's records in runs: look the ledger and the counters
    // up once per run, not per record (two hashes of the topic name per record showed as
    // the audit task's main cost in the tailing benchmark).
    // Each record's topic handle is dropped after the loop, all together: dropped one by
    // one in the loop, each atomic decrement waited for the ledger's stores before it
    // (a locked instruction drains the store buffer), 12 % of the audit task's samples on
    // key_columns.
    let mut spent: Vec<Arc<str>> = Vec::with_capacity(batch.len());
    let mut records = batch.into_iter().peekable();
    while let Some(first) = records.next() {
        let topic = first.topic.clone();
        let partition = first.partition;
        key.topic.clear();
        key.topic.push_str(&topic);
        key.partition = partition;
        let mut slot = ledgers.slot_mut(&key);
        let mut c = Ingested::default();
        let mut ignored = 0u64;
        let mut next = Some(first);
        while let Some(r) = next {
            match slot.as_mut() {
                None => ignored += 1,
                Some((ledger, held)) => {
                    // Records waiting for their schema, and everything behind them, wait.
                    let r = match held.as_deref_mut() {
                        Some(h) if r.offset >= ledger.next_offset() => match h
                            .admit(r, book.as_deref_mut())
                        {
                            Some(r) => r,
                            None => {
                                next = records.next_if(|n| same_partition(n, &topic, partition));
                                continue;
                            }
                        },
                        _ => r,
                    };
                    let fresh = r.offset >= ledger.next_offset();
                    let Tagged {
                        topic: handle,
                        offset,
                        timestamp_ms,
                        tag,
                        ..
                    } = r;
                    spent.push(handle);
                    let (filtered, observed) = match tag {
                        Tag::Unresolved(_) => (Some(FilterReason::Undecodable), Observed::Filtered),
                        Tag::Expected { key } => {
                            // The audit-wide multiset learns of the record as it is read, so
                            // a row it will need is never charged as another's duplicate.
                            if fresh
                                && let (Some(book), Some(k)) = (book.as_deref_mut(), key.as_ref())
                            {
                                book.pend(k);
                            }
                            (None, Observed::Expected { key })
                        }
                        Tag::Filtered(reason) => (Some(reason), Observed::Filtered),
                    };
                    // A record delivered again after a re-positioning is not counted twice.
                    if ledger.ingest(offset, timestamp_ms, observed, now) {
                        if ledger.note_record_ts(timestamp_ms, now) {
                            c.future_ts += 1;
                            // Once per partition: a producer whose clock runs ahead stamps
                            // every record, and the counter says how many.
                            if ledger.future_timestamps() == 1 {
                                tracing::warn!(%topic, partition, offset,
                                    timestamp_ms, now_ms = now,
                                    "a record on {topic}-{partition} is stamped ahead of the \
                                     auditor's clock (a producer's clock or event time in the \
                                     future): completeness counts it as read now, never ahead \
                                     of the wall clock; further ones are only counted in \
                                     gap_auditor_records_future_timestamp_total");
                            }
                        }
                        total += 1;
                        c.add(filtered);
                    }
                }
            }
            next = records.next_if(|n| same_partition(n, &topic, partition));
        }
        if ignored > 0 {
            tracing::debug!(%topic, partition, records = ignored, "records of an unassigned partition ignored");
        }
        if c.consumed > 0 {
            counts.entry((topic, partition)).or_default().merge(&c);
        }
    }
    drop(spent);
    for ((topic, p), c) in counts {
        metrics
            .partition(&TopicPartition::new(topic.to_string(), p))
            .ingested(&c);
    }
    total
}
