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
//! consumption at `max_pending` instead of filling memory.

use std::collections::VecDeque;

use crate::kafka::Tagged;
use crate::record::{Decoder, RecordMeta, Tag};

/// One partition's held records, oldest first.
#[derive(Debug, Default)]
pub struct Held {
    records: VecDeque<Tagged>,
}

impl Held {
    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// How many records are held.
    pub fn len(&self) -> usize {
        self.records.len()
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
    pub fn admit(&mut self, r: Tagged) -> Option<Tagged> {
        if let (Some(first), Some(last)) = (self.records.front(), self.records.back()) {
            if r.offset < first.offset {
                // Released while later records still wait: dropping it here lost it for
                // good (the ledger then saw the next offset and skipped it as a hole).
                return Some(r);
            }
            if r.offset > last.offset {
                self.records.push_back(r);
            }
            return None;
        }
        if matches!(r.tag, Tag::Unresolved(_)) {
            self.records.push_back(r);
            return None;
        }
        Some(r)
    }

    /// Decodes the held records again, in order, and returns the prefix that is decided
    /// now; the first record still waiting for its schema stops it (and is asked for
    /// again).
    pub fn release(&mut self, decoder: &Decoder) -> Vec<Tagged> {
        let mut out = Vec::new();
        while let Some(front) = self.records.front_mut() {
            if let Tag::Unresolved(u) = &front.tag {
                let meta = RecordMeta {
                    topic: &front.topic,
                    partition: front.partition,
                    offset: front.offset,
                    key: None,
                };
                match decoder.retag(u, &meta) {
                    Tag::Unresolved(_) => break,
                    tag => front.tag = tag,
                }
            }
            if let Some(r) = self.records.pop_front() {
                out.push(r);
            }
        }
        if self.records.is_empty() {
            // A burst must not pin its peak size.
            self.records.shrink_to_fit();
        }
        out
    }

    /// Forgets everything (the partition is re-positioned or revoked: the records are read
    /// again from the ledger's position).
    pub fn clear(&mut self) {
        self.records = VecDeque::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{DecodeFormat, DecoderSpec, FilterReason, Unresolved};
    use std::sync::Arc;

    fn tagged(offset: i64, tag: Tag) -> Tagged {
        Tagged {
            topic: Arc::from("t"),
            partition: 0,
            offset,
            timestamp_ms: None,
            tag,
        }
    }

    fn unresolved(id: u32) -> Tag {
        Tag::Unresolved(Box::new(Unresolved {
            schema_id: id,
            value: Box::from(&[0u8, 0, 0, 0, id as u8, 2][..]),
            key: None,
        }))
    }

    const DECIDED: Tag = Tag::Filtered(FilterReason::Filter);

    #[test]
    fn from_the_first_unresolved_record_the_partition_waits_in_order() {
        let mut h = Held::default();
        assert!(
            h.admit(tagged(0, DECIDED)).is_some(),
            "nothing held: straight on"
        );
        assert!(h.admit(tagged(1, unresolved(7))).is_none());
        assert!(
            h.admit(tagged(2, DECIDED)).is_none(),
            "decided, but behind a held one"
        );
        assert!(h.admit(tagged(2, DECIDED)).is_none());
        assert!(h.admit(tagged(1, DECIDED)).is_none());
        assert_eq!(h.len(), 2, "re-deliveries are not held twice");
        assert_eq!(h.waiting_for(), Some(7));
    }

    #[test]
    fn a_record_released_ahead_of_those_still_held_goes_on() {
        let mut h = Held::default();
        assert!(h.admit(tagged(5, unresolved(7))).is_none());
        assert!(h.admit(tagged(6, unresolved(8))).is_none());
        // `release` handed offset 5 over while 6 still waits: it comes back through here.
        h.records.pop_front();
        let back = h.admit(tagged(5, DECIDED));
        assert_eq!(back.map(|r| r.offset), Some(5));
        assert_eq!(h.len(), 1, "the held one stays");
        assert!(
            h.admit(tagged(6, DECIDED)).is_none(),
            "a re-delivery of a held one"
        );
    }

    #[test]
    fn a_decoder_without_the_schema_releases_nothing_and_one_that_cannot_use_it_everything() {
        let mut h = Held::default();
        h.admit(tagged(1, unresolved(7)));
        h.admit(tagged(2, DECIDED));
        // An avro decoder with no registry: the record is undecodable (decided), so the
        // whole prefix goes on, in order.
        let d = Decoder::new(DecoderSpec {
            format: DecodeFormat::Avro,
            ..DecoderSpec::default()
        })
        .expect("valid");
        let out = h.release(&d);
        assert_eq!(out.iter().map(|r| r.offset).collect::<Vec<_>>(), [1, 2]);
        assert_eq!(out[0].tag, Tag::Filtered(FilterReason::Undecodable));
        assert!(h.is_empty());
        assert!(h.admit(tagged(3, DECIDED)).is_some());
    }
}
