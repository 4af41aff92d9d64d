//! Unit tests of the Avro decoding.
use super::*;
use apache_avro::types::Record;

const SCHEMA: &str = r#"{
  "type": "record", "name": "DnsLog", "namespace": "example",
  "fields": [
    {"name": "client_ip", "type": "string"},
    {"name": "time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "rcode", "type": ["null", "string"], "default": null},
    {"name": "qtype", "type": {"type": "enum", "name": "QType", "symbols": ["A", "AAAA"]}},
    {"name": "geo", "type": ["null", {"type": "record", "name": "Geo", "fields": [
        {"name": "country", "type": "string"}]}], "default": null},
    {"name": "prev", "type": ["null", "Geo"], "default": null}
  ]}"#;

fn raw(text: &str) -> RawSchema {
    RawSchema {
        schema_type: SchemaType::Avro,
        text: text.into(),
        references: Vec::new(),
    }
}

fn encode(schema: &Schema, fill: impl FnOnce(&mut Record<'_>)) -> Vec<u8> {
    let mut r = Record::new(schema).expect("record schema");
    fill(&mut r);
    apache_avro::writer::datum::GenericDatumWriter::builder(schema)
        .build()
        .expect("writer")
        .write_value_to_vec(r)
        .expect("encode")
}

/// A record of [`SCHEMA`] with every field set (each union on its non-null branch).
fn full(s: &AvroSchema) -> Vec<u8> {
    let geo = Avro::Record(vec![("country".into(), Avro::String("DE".into()))]);
    encode(&s.schema, |r| {
        r.put("client_ip", "10.0.0.1");
        r.put("time", Avro::TimestampMillis(1_714_564_800_123));
        r.put("day", Avro::Date(19844));
        r.put(
            "price",
            Avro::Decimal(apache_avro::Decimal::from(vec![0xFBu8, 0x1E])),
        );
        r.put(
            "rcode",
            Avro::Union(1, Box::new(Avro::String("NOERROR".into()))),
        );
        r.put("qtype", Avro::Enum(1, "AAAA".into()));
        r.put("geo", Avro::Union(1, Box::new(geo.clone())));
        r.put("prev", Avro::Union(1, Box::new(geo)));
    })
}

#[test]
fn logical_types_unions_enums_and_refs() {
    let s = AvroSchema::compile(1, &raw(SCHEMA)).expect("schema");
    let bytes = full(&s);
    let v = s.decode(&bytes, TimestampFormat::Sql).expect("decodes");
    assert_eq!(v["client_ip"], "10.0.0.1");
    assert_eq!(v["time"], "2024-05-01 12:00:00.123");
    assert_eq!(v["day"], "2024-05-01");
    // 0xFB1E = -1250, scale 2.
    assert_eq!(v["price"], "-12.50");
    assert_eq!(v["rcode"], "NOERROR");
    assert_eq!(v["qtype"], "AAAA");
    assert_eq!(v.pointer("/geo/country"), Some(&Value::from("DE")));
    assert_eq!(v.pointer("/prev/country"), Some(&Value::from("DE")));
}

#[test]
fn null_branches_are_null_and_garbage_is_an_error() {
    let s = AvroSchema::compile(1, &raw(SCHEMA)).expect("schema");
    let bytes = encode(&s.schema, |r| {
        r.put("client_ip", "");
        r.put("time", Avro::TimestampMillis(0));
        r.put("day", Avro::Date(0));
        r.put(
            "price",
            Avro::Decimal(apache_avro::Decimal::from(vec![0u8])),
        );
        r.put("rcode", Avro::Union(0, Box::new(Avro::Null)));
        r.put("qtype", Avro::Enum(0, "A".into()));
        r.put("geo", Avro::Union(0, Box::new(Avro::Null)));
        r.put("prev", Avro::Union(0, Box::new(Avro::Null)));
    });
    let v = s
        .decode(&bytes, TimestampFormat::EpochMillis)
        .expect("decodes");
    assert_eq!(v["rcode"], Value::Null);
    assert_eq!(v["time"], "0");
    assert!(s.decode(&[0xFF; 3], TimestampFormat::Sql).is_err());
    assert!(s.decode(&[], TimestampFormat::Sql).is_err());
}

/// Issue 19 review: a record cut short must be undecodable, never a record whose last
/// fields read as absent; bytes after the datum (another writer schema than the id
/// says) are not ignored either.
#[test]
fn a_truncated_or_overlong_payload_is_an_error() {
    let s = AvroSchema::compile(1, &raw(SCHEMA)).expect("schema");
    let bytes = full(&s);
    assert!(s.decode(&bytes, TimestampFormat::Sql).is_ok());
    for cut in 0..bytes.len() {
        assert!(
            s.decode(&bytes[..cut], TimestampFormat::Sql).is_err(),
            "{cut} of {} bytes decoded",
            bytes.len()
        );
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(
        s.decode(&longer, TimestampFormat::Sql).is_err(),
        "a trailing byte"
    );
    // A schema whose last field takes no bytes: the cut is in the field before it.
    let tail = AvroSchema::compile(
        2,
        &raw(r#"{"type":"record","name":"T","fields":[
            {"name":"a","type":["null","string"]},{"name":"z","type":"null"}]}"#),
    )
    .expect("schema");
    assert!(tail.decode(&[2, 2, b'x'], TimestampFormat::Sql).is_ok());
    assert!(tail.decode(&[2, 2], TimestampFormat::Sql).is_err());
    assert!(tail.decode(&[2], TimestampFormat::Sql).is_err());
}

/// Zigzag varint of `v`.
fn varint(v: i64) -> Vec<u8> {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    let mut out = Vec::new();
    loop {
        let b = (z & 0x7F) as u8;
        z >>= 7;
        if z == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// Issue 19 review: items that take no byte (nulls) or one (empty arrays) in nested
/// collections: each collection within apache-avro's cap, their sum not — a few bytes
/// allocating gigabytes on the tailing thread. The record's items are capped together.
#[test]
fn nested_collections_share_one_item_budget() {
    let s = AvroSchema::compile(
        1,
        &raw(r#"{"type":"record","name":"N","fields":[
            {"name":"a","type":{"type":"array","items":{"type":"array","items":"null"}}}]}"#),
    )
    .expect("schema");
    // Four inner arrays of a million nulls each: 17 bytes, 4 M values.
    let mut hostile = varint(4);
    for _ in 0..4 {
        hostile.extend(varint(1_000_000));
        hostile.push(0);
    }
    hostile.push(0);
    let e = s
        .decode(&hostile, TimestampFormat::Sql)
        .expect_err("over the budget");
    assert!(e.contains("array items"), "{e}");
    // Ordinary nesting decodes: 1,000 empty arrays, and one of 10 nulls.
    let mut fine = varint(1001);
    fine.extend(std::iter::repeat_n(0u8, 1000));
    fine.extend(varint(10));
    fine.extend([0, 0]);
    let v = s.decode(&fine, TimestampFormat::Sql).expect("decodes");
    assert_eq!(v["a"].as_array().map(Vec::len), Some(1001));
    assert_eq!(v["a"][1000].as_array().map(Vec::len), Some(10));
}

proptest::proptest! {
    #![proptest_config(crate::test_seed::config())]
    /// Record contents are hostile: any payload decodes or is an error, never a panic,
    /// and a length prefix beyond the payload never allocates past the cap.
    #[test]
    fn any_payload_decodes_or_fails_cleanly(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
        let s = AvroSchema::compile(1, &raw(SCHEMA)).expect("schema");
        let _ = s.decode(&bytes, TimestampFormat::Sql);
    }
}

#[test]
fn a_huge_length_prefix_is_an_error_not_an_allocation() {
    let s = AvroSchema::compile(1, &raw(SCHEMA)).expect("schema");
    // client_ip: a string claiming 100 MiB (over the cap, under the crate's default),
    // then nothing.
    let mut zigzag = (100u64 << 20) << 1;
    let mut bytes = Vec::new();
    while zigzag >= 0x80 {
        bytes.push((zigzag as u8) | 0x80);
        zigzag >>= 7;
    }
    bytes.push(zigzag as u8);
    let e = s
        .decode(&bytes, TimestampFormat::Sql)
        .expect_err("too long");
    assert!(e.contains("alloc") || e.contains("memory"), "{e}");
    assert_eq!(apache_avro::util::max_allocation_bytes(0), MAX_ALLOCATION);
}

#[test]
fn bad_and_foreign_schemas_are_schema_errors() {
    assert!(AvroSchema::compile(3, &raw("{not json")).is_err());
    let mut proto = raw("syntax = \"proto3\";");
    proto.schema_type = SchemaType::Protobuf;
    let e = AvroSchema::compile(3, &proto).expect_err("protobuf is not avro");
    assert!(e.to_string().contains("schema id 3"), "{e}");
}

#[test]
fn a_recursive_schema_is_refused_before_a_record_can_nest_deeply() {
    let err = AvroSchema::compile(
        1,
        &raw(
            r#"{"type":"record","name":"Node","fields":[{"name":"next","type":["null","Node"]}]}"#,
        ),
    )
    .expect_err("recursive");
    assert!(err.reason.contains("recursive"), "{}", err.reason);
    // Through an array and a second type, too.
    let err = AvroSchema::compile(
        1,
        &raw(r#"{"type":"record","name":"A","fields":[{"name":"b","type":{"type":"record","name":"B","fields":[{"name":"as","type":{"type":"array","items":"A"}}]}}]}"#),
    )
    .expect_err("recursive through B");
    assert!(err.reason.contains("recursive"), "{}", err.reason);
    // A named type used twice side by side is not recursion.
    AvroSchema::compile(
        1,
        &raw(r#"{"type":"record","name":"P","fields":[{"name":"a","type":{"type":"record","name":"Pt","fields":[{"name":"x","type":"int"}]}},{"name":"b","type":"Pt"}]}"#),
    )
    .expect("not recursive");
}

#[test]
fn a_uuid_string_keeps_the_producers_text() {
    let s = AvroSchema::compile(
        1,
        &raw(r#"{"type":"record","name":"U","fields":[{"name":"id","type":{"type":"string","logicalType":"uuid"}}]}"#),
    )
    .expect("schema");
    let enc = |t: &str| {
        let mut b = vec![(t.len() as u8) << 1];
        b.extend_from_slice(t.as_bytes());
        b
    };
    let upper = "550E8400-E29B-41D4-A716-446655440000";
    let v = s
        .decode(&enc(upper), TimestampFormat::Sql)
        .expect("decodes");
    assert_eq!(v["id"], upper, "the text the pipeline writes");
    let v = s
        .decode(&enc("order-42"), TimestampFormat::Sql)
        .expect("not a uuid: still a string");
    assert_eq!(v["id"], "order-42");
}

#[test]
fn references_resolve_named_types_of_other_schemas() {
    let geo = r#"{"type":"record","name":"Geo","namespace":"example","fields":[{"name":"country","type":"string"}]}"#;
    let top = r#"{"type":"record","name":"Top","namespace":"example","fields":[{"name":"geo","type":"example.Geo"}]}"#;
    let s = AvroSchema::compile(
        5,
        &RawSchema {
            schema_type: SchemaType::Avro,
            text: top.into(),
            references: vec![("geo".into(), geo.into())],
        },
    )
    .expect("schema with a reference");
    // Geo { country: "FR" }: a string of length 2 (zigzag 4).
    let v = s
        .decode(&[4, b'F', b'R'], TimestampFormat::Sql)
        .expect("decodes");
    assert_eq!(v.pointer("/geo/country"), Some(&Value::from("FR")));
}
