//! Schema formats: avro/protobuf records waiting for and decoded with their registry schema, and
//! Confluent framing.

use super::*;

#[test]
fn avro_records_wait_for_their_schema_then_decode_like_json() {
    let registry = offline_registry(DecodeFormat::Avro);
    let d = Decoder::new(DecoderSpec {
        format: DecodeFormat::Avro,
        key: Some(strings(&["client_ip", "domain", "time"])),
        ..DecoderSpec::default()
    })
    .expect("valid")
    .with_registry(registry.clone());
    let value = dns_avro(7, "10.0.0.1", Some("a.example"), 1_714_564_800_000);
    let meta = RecordMeta {
        key: Some(b"k"),
        ..RecordMeta::default()
    };
    // Not cached: neither expected nor filtered, and the bytes are kept.
    let Tag::Unresolved(u) = d.tag_record(Some(&value), &meta) else {
        panic!("a record without its schema must wait");
    };
    assert_eq!(
        (u.schema_id, &*u.value, u.key.as_deref()),
        (7, &value[..], Some(&b"k"[..]))
    );
    // The tailing thread asks for nothing: the audit's `Held` asks for the id of the
    // first record a partition holds (issue 19 review).
    assert!(registry.waiting().is_empty(), "not asked for by the lookup");
    registry.insert(
        7,
        &registry::RawSchema {
            schema_type: registry::SchemaType::Avro,
            text: DNS_AVRO.into(),
            references: Vec::new(),
        },
    );
    assert_eq!(
        d.retag(&u, &RecordMeta::default()),
        expected(&["10.0.0.1", "a.example", "2024-05-01 12:00:00"])
    );
    // A null union branch is an absent field: the key cannot be built.
    assert_eq!(
        d.tag_value(Some(&dns_avro(7, "10.0.0.1", None, 0))),
        FILTERED
    );
    // Not framed, garbage after the header, a schema that is not Avro.
    assert_eq!(d.tag_value(Some(b"10.0.0.1|a")), UNDECODABLE);
    assert_eq!(d.tag_value(Some(&[0, 0, 0, 0, 7, 0xFF])), UNDECODABLE);
    registry.insert(
        8,
        &registry::RawSchema {
            schema_type: registry::SchemaType::Protobuf,
            text: "syntax = \"proto3\";".into(),
            references: Vec::new(),
        },
    );
    assert_eq!(
        d.tag_value(Some(&dns_avro(8, "1", Some("d"), 0))),
        UNDECODABLE
    );
    let why = d
        .explain(&dns_avro(8, "1", Some("d"), 0))
        .expect("explained");
    assert!(why.contains("schema id 8"), "{why}");
}

#[test]
fn json_with_confluent_framing_strips_the_header() {
    let d = Decoder::new(DecoderSpec {
        format: DecodeFormat::Json,
        confluent_framing: true,
        key: Some(strings(&["/a/b"])),
        ..DecoderSpec::default()
    })
    .expect("valid");
    let mut v = vec![0, 0, 0, 0, 3];
    v.extend(br#"{"a":{"b":"x"}}"#);
    assert_eq!(d.tag_value(Some(&v)), expected(&["x"]));
    assert_eq!(
        d.tag_value(Some(br#"{"a":{"b":"x"}}"#)),
        UNDECODABLE,
        "no header"
    );
}

#[test]
fn without_a_registry_schema_formats_are_undecodable_never_waiting_forever() {
    let d = Decoder::new(DecoderSpec {
        format: DecodeFormat::Protobuf,
        ..DecoderSpec::default()
    })
    .expect("valid");
    assert_eq!(d.tag_value(Some(&[0, 0, 0, 0, 1, 0])), UNDECODABLE);
}
