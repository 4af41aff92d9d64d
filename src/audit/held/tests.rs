//! Unit tests of the held records.
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
        h.admit(tagged(0, DECIDED), None).is_some(),
        "nothing held: straight on"
    );
    assert!(h.admit(tagged(1, unresolved(7)), None).is_none());
    assert!(
        h.admit(tagged(2, DECIDED), None).is_none(),
        "decided, but behind a held one"
    );
    assert!(h.admit(tagged(2, DECIDED), None).is_none());
    assert!(h.admit(tagged(1, DECIDED), None).is_none());
    assert_eq!(h.len(), 2, "re-deliveries are not held twice");
    assert_eq!(h.waiting_for(), Some(7));
}

#[test]
fn a_record_released_ahead_of_those_still_held_goes_on() {
    let mut h = Held::default();
    assert!(h.admit(tagged(5, unresolved(7)), None).is_none());
    assert!(h.admit(tagged(6, unresolved(8)), None).is_none());
    // `release` handed offset 5 over while 6 still waits: it comes back through here.
    h.records.pop_front();
    let back = h.admit(tagged(5, DECIDED), None);
    assert_eq!(back.map(|r| r.offset), Some(5));
    assert_eq!(h.len(), 1, "the held one stays");
    assert!(
        h.admit(tagged(6, DECIDED), None).is_none(),
        "a re-delivery of a held one"
    );
}

#[test]
fn a_decoder_without_the_schema_releases_nothing_and_one_that_cannot_use_it_everything() {
    let mut h = Held::default();
    h.admit(tagged(1, unresolved(7)), None);
    h.admit(tagged(2, DECIDED), None);
    // An avro decoder with no registry: the record is undecodable (decided), so the
    // whole prefix goes on, in order.
    let d = Decoder::new(DecoderSpec {
        format: DecodeFormat::Avro,
        ..DecoderSpec::default()
    })
    .expect("valid");
    let out = h.release(&d, None);
    assert_eq!(out.iter().map(|r| r.offset).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(out[0].tag, Tag::Filtered(FilterReason::Undecodable));
    assert!(h.is_empty());
    assert!(h.admit(tagged(3, DECIDED), None).is_some());
}

#[test]
fn forgetting_below_an_offset_takes_those_keys_out_of_the_book() {
    let keyed = || Tag::Expected {
        key: Some(Key::new(["x"])),
    };
    let mut book = KeyBook::default();
    let mut h = Held::default();
    h.admit(tagged(5, unresolved(7)), Some(&mut book));
    h.admit(tagged(6, keyed()), Some(&mut book));
    h.admit(tagged(7, keyed()), Some(&mut book));
    assert_eq!(book.total_pending(), 2);
    h.forget_below(7, Some(&mut book));
    assert_eq!((h.len(), book.total_pending()), (1, 1));
    assert_eq!(h.bytes(), 0, "the one keeping bytes is gone");
    h.forget_below(7, Some(&mut book));
    assert_eq!((h.len(), book.total_pending()), (1, 1), "idempotent");
    h.clear(Some(&mut book));
    assert_eq!(book.total_pending(), 0);
}

/// Issue 19 review: held records were bounded by count only, and each keeps its value.
#[test]
fn held_bytes_weigh_in_the_flow_control() {
    let big = |offset: i64| {
        tagged(
            offset,
            Tag::Unresolved(Box::new(Unresolved {
                schema_id: 7,
                value: vec![0u8; 1 << 20].into_boxed_slice(),
                key: Some(Box::from(&b"k"[..])),
            })),
        )
    };
    let max_pending = 100_000;
    let mut h = Held::default();
    h.admit(big(0), None);
    h.admit(tagged(1, DECIDED), None);
    assert_eq!(
        h.bytes(),
        (1 << 20) + 1,
        "the value and the key; decided ones keep none"
    );
    // 256 records of 1 MiB: far under max_pending by count, at it by bytes.
    for o in 2..257 {
        h.admit(big(o), None);
    }
    assert_eq!(h.len(), 257);
    assert!(
        h.flow_load(max_pending) >= max_pending,
        "{}",
        h.flow_load(max_pending)
    );
    // Small values weigh about their count.
    let mut small = Held::default();
    small.admit(tagged(0, unresolved(7)), None);
    small.admit(tagged(1, unresolved(7)), None);
    assert_eq!(small.flow_load(max_pending), 2);
    h.clear(None);
    assert_eq!((h.bytes(), h.flow_load(max_pending)), (0, 0));
}

/// Issue 19 review: the ledger side of a held partition, through the daemon's own
/// [`crate::audit::ingest_batch`].
mod with_the_ledger {
    use super::*;
    use crate::audit::{Ledgers, ingest_batch};
    use crate::ledger::PartitionLedger;
    use crate::metrics::{AuditMetrics, Metrics};
    use crate::record::registry::{RawSchema, SchemaType};
    use crate::types::TopicPartition;
    use std::collections::BTreeMap;

    const SCHEMA: &str = r#"{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}"#;

    struct Slots(BTreeMap<TopicPartition, (PartitionLedger, Held)>);

    impl Ledgers for Slots {
        fn slot_mut(
            &mut self,
            tp: &TopicPartition,
        ) -> Option<(&mut PartitionLedger, Option<&mut Held>)> {
            self.0.get_mut(tp).map(|(l, h)| (l, Some(h)))
        }
    }

    /// An avro key_columns decoder (key: field `a`) with a registry nobody answers.
    fn decoder() -> Decoder {
        let cfg = crate::record::registry::test_support::test_config("http://127.0.0.1:9/");
        let reg = crate::record::schema_registry(&cfg, DecodeFormat::Avro).expect("registry");
        Decoder::new(DecoderSpec {
            format: DecodeFormat::Avro,
            key: Some(vec!["a".into()]),
            ..DecoderSpec::default()
        })
        .expect("decoder")
        .with_registry(Arc::new(reg))
    }

    fn raw() -> RawSchema {
        RawSchema {
            schema_type: SchemaType::Avro,
            text: SCHEMA.into(),
            references: Vec::new(),
        }
    }

    /// `{a: "x"}` of schema `id` at `partition`/`offset`, tagged as the tail tags it.
    fn record(d: &Decoder, partition: i32, offset: i64, id: u8) -> Tagged {
        let value = [0u8, 0, 0, 0, id, 2, b'x'];
        let meta = RecordMeta {
            topic: "t",
            partition,
            offset,
            key: None,
        };
        Tagged {
            topic: Arc::from("t"),
            partition,
            offset,
            timestamp_ms: Some(1),
            tag: d.tag_record(Some(&value), &meta),
        }
    }

    fn slots(d: &Decoder, n: i32) -> Slots {
        Slots(
            (0..n)
                .map(|p| {
                    (
                        TopicPartition::new("t", p),
                        (PartitionLedger::new(0, true), Held::for_decoder(d)),
                    )
                })
                .collect(),
        )
    }

    fn x() -> Key {
        Key::new(["x"])
    }

    #[test]
    fn a_record_held_behind_another_keeps_its_row_from_being_a_duplicate() {
        let d = decoder();
        let reg = d.registry().expect("registry").clone();
        reg.insert(7, &raw());
        let m = AuditMetrics::new(std::sync::Arc::new(Metrics::new()), "a");
        let mut book = KeyBook::default();
        let mut parts = slots(&d, 2);
        // Partition 0: offset 0 waits for schema 8; offset 1 (key x, schema 7, decided)
        // waits behind it. Partition 1: offset 0, key x, decided.
        let batch = vec![
            record(&d, 0, 0, 8),
            record(&d, 0, 1, 7),
            record(&d, 1, 0, 7),
        ];
        assert!(matches!(batch[0].tag, Tag::Unresolved(_)));
        assert!(matches!(batch[1].tag, Tag::Expected { .. }));
        ingest_batch(&m, &mut parts, Some(&mut book), batch, 0);
        assert_eq!(
            book.counts(&x()).0,
            2,
            "both records with key x are pending"
        );
        // The pipeline wrote both records: two rows for x. Partition 1's record is due.
        let out = book.decide_due(&x(), 1, 2);
        assert_eq!(out.confirmed, 1);
        assert_eq!(
            out.duplicates, 0,
            "the second row is the held record's, not a duplicate"
        );
        assert!(out.shared, "another record carries the key");
    }

    #[test]
    fn held_keys_leave_the_book_when_released_or_forgotten() {
        let d = decoder();
        let reg = d.registry().expect("registry").clone();
        reg.insert(7, &raw());
        let m = AuditMetrics::new(std::sync::Arc::new(Metrics::new()), "a");
        let mut book = KeyBook::default();
        let mut parts = slots(&d, 1);
        let tp = TopicPartition::new("t", 0);
        let batch = vec![
            record(&d, 0, 0, 8),
            record(&d, 0, 1, 7),
            record(&d, 0, 2, 7),
        ];
        ingest_batch(&m, &mut parts, Some(&mut book), batch, 0);
        assert_eq!(book.total_pending(), 2, "the two decided ones");
        // Revoked or re-positioned: read again later, so no claim meanwhile.
        let (_, held) = parts.0.get_mut(&tp).expect("part");
        held.clear(Some(&mut book));
        assert_eq!(book.total_pending(), 0);
        // Read again, then schema 8 arrives: each record pended once, by the ledger.
        let batch = vec![
            record(&d, 0, 0, 8),
            record(&d, 0, 1, 7),
            record(&d, 0, 2, 7),
        ];
        ingest_batch(&m, &mut parts, Some(&mut book), batch, 0);
        reg.insert(8, &raw());
        let (_, held) = parts.0.get_mut(&tp).expect("part");
        assert_eq!(held.bytes(), 7, "the one waiting keeps its value");
        let ready = held.release(&d, Some(&mut book));
        assert_eq!(ready.len(), 3);
        assert_eq!(held.bytes(), 0);
        assert_eq!(book.total_pending(), 0, "out of the held ones");
        ingest_batch(&m, &mut parts, Some(&mut book), ready, 0);
        let (ledger, _) = &parts.0[&tp];
        assert_eq!(ledger.pending(), 3);
        assert_eq!(
            book.total_pending(),
            3,
            "as many as the ledger's pending keys"
        );
    }

    /// A schema id the registry answers 404 for, for good: once the fetcher gives it up
    /// the partition goes on, the record counted undecodable, the one behind it
    /// decided as usual. (Before: held for ever.)
    #[tokio::test]
    async fn an_id_the_registry_never_knows_releases_its_partition_as_undecodable() {
        use crate::record::registry::test_support::{QUICK, answering, test_config};
        let (url, _) = answering("404 Not Found").await;
        let reg = Arc::new(
            crate::record::schema_registry(&test_config(&url), DecodeFormat::Avro)
                .expect("registry")
                .with_not_found_policy(QUICK),
        );
        let d = Decoder::new(DecoderSpec {
            format: DecodeFormat::Avro,
            key: Some(vec!["a".into()]),
            ..DecoderSpec::default()
        })
        .expect("decoder")
        .with_registry(reg.clone());
        reg.insert(7, &raw());
        let cancel = tokio_util::sync::CancellationToken::new();
        tokio::spawn(reg.clone().run_fetcher(cancel.clone()));
        let m = AuditMetrics::new(std::sync::Arc::new(Metrics::new()), "a");
        let mut parts = slots(&d, 1);
        let batch = vec![record(&d, 0, 0, 8), record(&d, 0, 1, 7)];
        ingest_batch(&m, &mut parts, None, batch, 0);
        let tp = TopicPartition::new("t", 0);
        let mut ready = Vec::new();
        for _ in 0..200 {
            let (_, held) = parts.0.get_mut(&tp).expect("part");
            ready = held.release(&d, None);
            if !ready.is_empty() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        cancel.cancel();
        assert_eq!(ready.len(), 2, "released once the 404s are final");
        assert_eq!(ready[0].tag, Tag::Filtered(FilterReason::Undecodable));
        ingest_batch(&m, &mut parts, None, ready, 0);
        let (ledger, held) = &parts.0[&tp];
        assert!(held.is_empty());
        assert_eq!(ledger.next_offset(), 2, "the partition goes on");
        assert_eq!(ledger.pending(), 1, "the record behind it is expected");
        let undecodable = m
            .families()
            .records_filtered
            .with_label_values(&["a", "t", "0", "undecodable"])
            .get();
        assert_eq!(undecodable, 1);
    }

    #[test]
    fn only_the_first_held_records_schema_is_asked_for() {
        let d = decoder();
        let reg = d.registry().expect("registry").clone();
        let m = AuditMetrics::new(std::sync::Arc::new(Metrics::new()), "a");
        let mut parts = slots(&d, 1);
        // Three schema ids behind one another: only the front one is worth fetching.
        let batch = vec![
            record(&d, 0, 0, 7),
            record(&d, 0, 1, 8),
            record(&d, 0, 2, 9),
        ];
        ingest_batch(&m, &mut parts, None, batch, 0);
        assert_eq!(reg.waiting(), vec![(7, None)]);
        reg.insert(7, &raw());
        let tp = TopicPartition::new("t", 0);
        let (_, held) = parts.0.get_mut(&tp).expect("part");
        assert_eq!(held.release(&d, None).len(), 1);
        assert_eq!(
            reg.waiting(),
            vec![(8, None)],
            "the next front is asked for"
        );
    }
}
