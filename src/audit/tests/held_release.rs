//! Issue 19 review: records released from `Held` while later ones still wait must reach
//! the ledger. They went back through `Held::admit`, which dropped them as
//! re-deliveries; the ledger then took the next offset and skipped them as a hole.

use crate::audit::ingest::release_held;
use crate::audit::partitions::reposition_held;
use crate::audit::*;
use crate::config::SchemaRegistryConfig;
use crate::kafka::Tagged;
use crate::record::Tag;
use crate::record::registry::{RawSchema, SchemaType};
use crate::record::{DecodeFormat, DecoderSpec, RecordMeta};

const SCHEMA: &str = r#"{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}"#;

fn decoder() -> Decoder {
    let cfg = SchemaRegistryConfig {
        url: "http://127.0.0.1:9/".into(),
        username: None,
        password: None,
        password_file: None,
        ca_file: None,
        timeout: Duration::from_secs(1),
    };
    let reg = crate::record::schema_registry(&cfg, DecodeFormat::Avro).expect("registry");
    Decoder::new(DecoderSpec {
        format: DecodeFormat::Avro,
        ..DecoderSpec::default()
    })
    .expect("decoder")
    .with_registry(Arc::new(reg))
}

fn record(d: &Decoder, offset: i64, id: u8) -> Tagged {
    // Magic 0, the schema id, then {a: "x"} (a string of length 1: zigzag 2).
    let value = [0u8, 0, 0, 0, id, 2, b'x'];
    let meta = RecordMeta {
        topic: "t",
        partition: 0,
        offset,
        key: None,
    };
    Tagged {
        topic: Arc::from("t"),
        partition: 0,
        offset,
        timestamp_ms: Some(1),
        tag: d.tag_record(Some(&value), &meta),
    }
}

#[test]
fn a_partial_release_reaches_the_ledger() {
    let d = decoder();
    let m = AuditMetrics::new(Arc::new(Metrics::new()), "a");
    let tp = TopicPartition::new("t", 0);
    let mut parts = BTreeMap::new();
    parts.insert(
        tp.clone(),
        Part {
            state_problem: None,
            ledger: PartitionLedger::new(0, false),
            log: None,
            stalled: false,
            held: Held::default(),
            read_to: None,
            repositioning: None,
            topic_id: None,
            divergence: None,
            transaction: Default::default(),
        },
    );
    // Offsets 0, 1 of schema 7 and 2, 3 of schema 8, neither cached yet (a start with an
    // empty cache, or a producer deploy changing the schema).
    let batch = vec![
        record(&d, 0, 7),
        record(&d, 1, 7),
        record(&d, 2, 8),
        record(&d, 3, 8),
    ];
    assert!(matches!(batch[0].tag, Tag::Unresolved(_)));
    assert_eq!(ingest_batch(&m, &mut parts, None, batch, 0), 0, "all held");
    let raw = RawSchema {
        schema_type: SchemaType::Avro,
        text: SCHEMA.into(),
        references: Vec::new(),
    };
    // The fetcher caches ids one at a time: 7 first.
    d.registry().expect("registry").insert(7, &raw);
    assert_eq!(release_held(&m, &mut parts, &d, None, 0), 2);
    assert_eq!(parts[&tp].ledger.next_offset(), 2);
    assert_eq!(parts[&tp].held.len(), 2);
    d.registry().expect("registry").insert(8, &raw);
    assert_eq!(release_held(&m, &mut parts, &d, None, 0), 2);
    assert_eq!(parts[&tp].ledger.next_offset(), 4);
    assert_eq!(
        parts[&tp].ledger.pending(),
        4,
        "all four records are expected"
    );
    assert!(parts[&tp].held.is_empty());
}

/// Review of issue 19: an offset out of range on any partition re-positions every
/// partition, but the tailing thread keeps reading until it sees the command, so batches
/// read before the re-positioning are still on their way. A partition holding records
/// forgot them, and the first of those stale batches went to the ledger, which took the
/// jump over the forgotten offsets as a hole: never expected, never audited. The
/// re-delivery of the forgotten records came too late (old offsets, ignored).
#[test]
fn records_read_before_a_reposition_do_not_skip_the_held_ones() {
    let d = decoder();
    let reg = d.registry().expect("registry").clone();
    let raw = RawSchema {
        schema_type: SchemaType::Avro,
        text: SCHEMA.into(),
        references: Vec::new(),
    };
    reg.insert(7, &raw);
    let m = AuditMetrics::new(Arc::new(Metrics::new()), "a");
    let tp = TopicPartition::new("t", 0);
    let mut parts = BTreeMap::new();
    parts.insert(
        tp.clone(),
        Part {
            state_problem: None,
            ledger: PartitionLedger::new(10, false),
            log: None,
            stalled: false,
            held: Held::for_decoder(&d),
            read_to: None,
            repositioning: None,
            topic_id: None,
            divergence: None,
            transaction: Default::default(),
        },
    );
    // Offset 10 waits for schema 8; 11 and 12 (schema 7) wait behind it.
    let batch = vec![record(&d, 10, 8), record(&d, 11, 7), record(&d, 12, 7)];
    ingest_batch(&m, &mut parts, None, batch, 0);
    assert_eq!(parts[&tp].held.len(), 3);
    // Another partition's offset left the log: this one is re-positioned where its
    // ledger stands.
    let seek = parts[&tp].ledger.next_offset();
    let part = parts.get_mut(&tp).expect("part");
    reposition_held(part, seek, false, None);
    // A batch the tail read before it saw the re-positioning, then the re-delivery.
    let stale = vec![record(&d, 13, 7), record(&d, 14, 7)];
    ingest_batch(&m, &mut parts, None, stale, 0);
    let again = (10..15)
        .map(|o| record(&d, o, if o == 10 { 8 } else { 7 }))
        .collect();
    ingest_batch(&m, &mut parts, None, again, 0);
    reg.insert(8, &raw);
    release_held(&m, &mut parts, &d, None, 0);
    let p = &parts[&tp];
    assert!(p.held.is_empty());
    assert_eq!(p.ledger.next_offset(), 15);
    assert_eq!(
        p.ledger.pending(),
        5,
        "offsets 10 to 14 are all expected, none skipped as a hole"
    );
}

/// Issue 35: a position the consumer reports while records wait for their schema is
/// below-or-past records the ledger has not taken yet. Applied at once, it would move the
/// ledger past them and their release would find them "re-delivered": never audited. It
/// waits for them, and applies (past the marker at 13) once they are released.
#[test]
fn a_position_waits_for_the_records_held_below_it() {
    let d = decoder();
    let reg = d.registry().expect("registry").clone();
    let raw = RawSchema {
        schema_type: SchemaType::Avro,
        text: SCHEMA.into(),
        references: Vec::new(),
    };
    let m = AuditMetrics::new(Arc::new(Metrics::new()), "a");
    let tp = TopicPartition::new("t", 0);
    let mut parts = BTreeMap::new();
    parts.insert(
        tp.clone(),
        Part {
            state_problem: None,
            ledger: PartitionLedger::new(10, false),
            log: None,
            stalled: false,
            held: Held::for_decoder(&d),
            read_to: None,
            repositioning: None,
            topic_id: None,
            divergence: None,
            transaction: Default::default(),
        },
    );
    let batch = vec![record(&d, 10, 8), record(&d, 11, 8), record(&d, 12, 8)];
    ingest_batch(&m, &mut parts, None, batch, 0);
    crate::audit::read_to::apply(&mut parts, vec![(tp.clone(), 14)]);
    assert_eq!(parts[&tp].ledger.next_offset(), 10, "held records first");
    reg.insert(8, &raw);
    assert_eq!(release_held(&m, &mut parts, &d, None, 0), 3);
    let p = &parts[&tp];
    assert_eq!(
        (p.ledger.next_offset(), p.ledger.pending()),
        (14, 3),
        "the three records expected, the marker passed"
    );
}
