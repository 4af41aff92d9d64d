//! Records held back while their schema is being fetched (avro/protobuf audits).
//!
//! The ledger takes a partition's records strictly in offset order, and an offset it
//! skipped is a hole, never expected. So a record that cannot be decided yet
//! ([`Tag::Unresolved`]) cannot be set aside while later ones go on: from the first such
//! record, every later record of its partition waits behind it here, in offset order, until
//! its schema arrives; then the decided prefix goes to the ledger. Nothing here is counted
//! (consumed, expected, filtered) before it reaches the ledger, and the ledger's position
//! (and so the settled watermark the auditor commits) stays before the first held record:
//! after a crash, a rebalance or a re-positioning they are read again. The tail's
//! backpressure counts held records as pending, so a registry that stays down pauses
//! consumption at `max_pending` instead of filling memory. It counts their bytes too
//! ([`Held::flow_load`]): a record waiting for its schema keeps its whole value, and
//! `max_pending` records of a megabyte each would be a terabyte, so [`HELD_BYTES_MAX`] of
//! held values weigh as much as `max_pending` records.
//!
//! Only the first held record's schema is asked for ([`SchemaRegistry::want`]): the ids
//! behind it are asked for when they come to the front, so one id the registry cannot give
//! does not make the fetcher chase every id read after it.
//!
//! Held records with a match key are *pending* in the audit-wide key multiset
//! ([`KeyBook`]) from the moment they are held: they are records the sink must hold rows
//! for, so those rows are not free for the same key on another partition (where they would
//! be charged as duplicates, or confirm a missing record). They leave the book when they go
//! to the ledger (which pends them again) or are forgotten ([`Held::clear`]).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::kafka::Tagged;
use crate::ledger::KeyBook;
use crate::record::{Decoder, RecordMeta, SchemaRegistry, Tag};
use crate::types::Key;

/// Bytes of held record values (and Kafka keys) that weigh as much as `max_pending`
/// records in the tail's flow control: with the registry down, an audit holds about this
/// much before its waiting partitions pause (they pause earlier when other partitions need
/// the budget, see [`crate::kafka::tail::Flow`]).
pub const HELD_BYTES_MAX: u64 = 256 * 1024 * 1024;

/// Bytes a held record keeps: what [`Tag::Unresolved`] carries (decided records keep only
/// their tag).
fn held_bytes(r: &Tagged) -> u64 {
    match &r.tag {
        Tag::Unresolved(u) => (u.value.len() + u.key.as_ref().map_or(0, |k| k.len())) as u64,
        _ => 0,
    }
}

/// One partition's held records, oldest first.
#[derive(Debug, Default)]
pub struct Held {
    records: VecDeque<Tagged>,
    /// Sum of [`held_bytes`] over `records`.
    bytes: u64,
    /// Where the first held record's schema is asked for (`None`: nobody asks, tests).
    registry: Option<Arc<SchemaRegistry>>,
}

/// The key a held record holds pending in the [`KeyBook`]: decided records only (a record
/// waiting for its schema has no key yet).
fn pended_key(r: &Tagged) -> Option<&Key> {
    match &r.tag {
        Tag::Expected { key } => key.as_ref(),
        _ => None,
    }
}

impl Held {
    /// Held records of a partition audited with `decoder`: the first one's schema is asked
    /// of its registry.
    pub fn for_decoder(decoder: &Decoder) -> Self {
        Self {
            records: VecDeque::new(),
            bytes: 0,
            registry: decoder.registry().cloned(),
        }
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// How many records are held.
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Bytes the held records keep (their values and Kafka keys).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// What the held records weigh in the tail's flow control of an audit capped at
    /// `max_pending` records: one per record, and `max_pending` per [`HELD_BYTES_MAX`]
    /// bytes kept, so large values pause their partition by memory, not only by count.
    pub fn flow_load(&self, max_pending: u64) -> u64 {
        let by_bytes =
            u128::from(self.bytes) * u128::from(max_pending) / u128::from(HELD_BYTES_MAX);
        (self.records.len() as u64).saturating_add(u64::try_from(by_bytes).unwrap_or(u64::MAX))
    }

    /// The schema id the first held record waits for.
    pub fn waiting_for(&self) -> Option<u32> {
        match &self.records.front()?.tag {
            Tag::Unresolved(u) => Some(u.schema_id),
            _ => None,
        }
    }

    /// Takes a record from the tail: given back when it can go to the ledger now (decided,
    /// and nothing held before it), else kept. A record before the first held one is given
    /// back: it is one [`Self::release`] handed over (the ledger takes offsets below the
    /// held ones only from there). Offsets from the first held one to the last are
    /// re-deliveries and dropped (the ledger ignores old offsets the same way).
    ///
    /// A record kept with a match key is pended in `book` (see the module docs); the first
    /// record kept has its schema asked for.
    pub fn admit(&mut self, r: Tagged, book: Option<&mut KeyBook>) -> Option<Tagged> {
        if let (Some(first), Some(last)) = (self.records.front(), self.records.back()) {
            if r.offset < first.offset {
                // Released while later records still wait: dropping it here lost it for
                // good (the ledger then saw the next offset and skipped it as a hole).
                return Some(r);
            }
            if r.offset > last.offset {
                self.keep(r, book);
            }
            return None;
        }
        if let Tag::Unresolved(u) = &r.tag {
            if let Some(reg) = &self.registry {
                reg.want(u.schema_id);
            }
            self.keep(r, book);
            return None;
        }
        Some(r)
    }

    fn keep(&mut self, r: Tagged, book: Option<&mut KeyBook>) {
        if let (Some(book), Some(k)) = (book, pended_key(&r)) {
            book.pend(k);
        }
        self.bytes += held_bytes(&r);
        self.records.push_back(r);
    }

    /// Decodes the held records again, in order, and returns the prefix that is decided
    /// now; the first record still waiting for its schema stops it (and is asked for: it
    /// may be another id than the one just fetched). The returned records leave `book`
    /// (the ledger pends the ones it takes).
    pub fn release(&mut self, decoder: &Decoder, mut book: Option<&mut KeyBook>) -> Vec<Tagged> {
        let mut out = Vec::new();
        while let Some(front) = self.records.front_mut() {
            let kept = held_bytes(front);
            let mut pended = true;
            if let Tag::Unresolved(u) = &front.tag {
                let meta = RecordMeta {
                    topic: &front.topic,
                    partition: front.partition,
                    offset: front.offset,
                    key: None,
                };
                match decoder.retag(u, &meta) {
                    Tag::Unresolved(u) => {
                        if let Some(reg) = decoder.registry() {
                            reg.want(u.schema_id);
                        }
                        break;
                    }
                    tag => front.tag = tag,
                }
                // Decided only now: it was never in the book.
                pended = false;
            }
            if let Some(r) = self.records.pop_front() {
                // Counted as kept, whatever it was retagged to meanwhile.
                self.bytes = self.bytes.saturating_sub(kept);
                if pended && let (Some(book), Some(k)) = (book.as_deref_mut(), pended_key(&r)) {
                    book.unpend(k);
                }
                out.push(r);
            }
        }
        if self.records.is_empty() {
            // A burst must not pin its peak size.
            self.records.shrink_to_fit();
        }
        out
    }

    /// Forgets the records below `offset` (the partition is re-positioned there, its ledger
    /// not started again), taking their keys out of `book`; the others stay. The tailing
    /// thread may still hand over records it read before the re-positioning: kept, those
    /// after the held ones are held behind them, as before; forgotten, the first of them
    /// would reach the ledger, which takes the jump over the forgotten offsets as a hole.
    /// The re-delivered ones are dropped like any re-delivery.
    pub fn forget_below(&mut self, offset: i64, mut book: Option<&mut KeyBook>) {
        while self.records.front().is_some_and(|r| r.offset < offset) {
            if let Some(r) = self.records.pop_front() {
                self.bytes = self.bytes.saturating_sub(held_bytes(&r));
                if let (Some(book), Some(k)) = (book.as_deref_mut(), pended_key(&r)) {
                    book.unpend(k);
                }
            }
        }
        if let Some(Tag::Unresolved(u)) = self.records.front().map(|r| &r.tag)
            && let Some(reg) = &self.registry
        {
            // A new front: its schema is the one worth fetching now.
            reg.want(u.schema_id);
        }
    }

    /// Forgets everything (the partition is revoked, or its ledger started again: the
    /// records are read again from the ledger's position), taking their keys out of `book`.
    pub fn clear(&mut self, book: Option<&mut KeyBook>) {
        let records = std::mem::take(&mut self.records);
        self.bytes = 0;
        if let Some(book) = book {
            for k in records.iter().filter_map(pended_key) {
                book.unpend(k);
            }
        }
    }
}

#[cfg(test)]
mod tests;
