use super::*;
use proptest::prelude::*;

/// [`Decoder::tag_record`] without Kafka coordinates, which every strategy but `doc_id`
/// ignores: the decoding tests are about values.
trait TagValue {
    fn tag_value(&self, value: Option<&[u8]>) -> Tag;
}

impl TagValue for Decoder {
    fn tag_value(&self, value: Option<&[u8]>) -> Tag {
        self.tag_record(value, &RecordMeta::default())
    }
}

const SEED_LINE: &str = "192.168.1.10|www.example.com|2024-01-01 10:00:00|93.184.216.34|NOERROR|A|ns1.example.com|-|8.8.8.8";

fn seed_fields() -> Vec<String> {
    [
        "client_ip",
        "domain",
        "time",
        "target_ip",
        "rcode",
        "query_type",
        "authority_record",
        "add_msg",
        "dns_ip",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// The seed audit: `|`-separated DNS lines, 9 fields, key on the first three.
fn seed_decoder() -> Decoder {
    Decoder::new(DecoderSpec {
        delimiter: "|".into(),
        fields: seed_fields(),
        field_count: Some(9),
        key: Some(strings(&["client_ip", "domain", "time"])),
        ..DecoderSpec::default()
    })
    .expect("seed spec is valid")
}

fn expected(key: &[&str]) -> Tag {
    Tag::Expected {
        key: Some(Key::new(key)),
    }
}

const FILTERED: Tag = Tag::Filtered(FilterReason::Filter);
const UNDECODABLE: Tag = Tag::Filtered(FilterReason::Undecodable);

fn json_decoder(key: &[&str]) -> Decoder {
    Decoder::new(DecoderSpec {
        format: DecodeFormat::Json,
        key: Some(strings(key)),
        ..DecoderSpec::default()
    })
    .expect("json spec is valid")
}

/// A registry nobody answers at (port 9 on loopback): only `insert` fills its cache.
fn offline_registry(format: DecodeFormat) -> Arc<SchemaRegistry> {
    let cfg = crate::config::SchemaRegistryConfig {
        url: "http://127.0.0.1:9".into(),
        username: None,
        password: None,
        password_file: None,
        ca_file: None,
        timeout: std::time::Duration::from_millis(200),
    };
    Arc::new(schema_registry(&cfg, format).expect("client"))
}

const DNS_AVRO: &str = r#"{"type":"record","name":"Dns","fields":[
        {"name":"client_ip","type":"string"},
        {"name":"domain","type":["null","string"]},
        {"name":"time","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#;

/// Confluent framing of schema `id` around an Avro datum of [`DNS_AVRO`].
fn dns_avro(id: u32, ip: &str, domain: Option<&str>, ms: i64) -> Vec<u8> {
    use apache_avro::types::Value as A;
    let schema = apache_avro::Schema::parse_str(DNS_AVRO).expect("schema");
    let mut r = apache_avro::types::Record::new(&schema).expect("record");
    r.put("client_ip", ip);
    r.put(
        "domain",
        match domain {
            Some(d) => A::Union(1, Box::new(A::String(d.into()))),
            None => A::Union(0, Box::new(A::Null)),
        },
    );
    r.put("time", A::TimestampMillis(ms));
    let mut out = vec![0];
    out.extend(id.to_be_bytes());
    out.extend(
        apache_avro::writer::datum::GenericDatumWriter::builder(&schema)
            .build()
            .expect("writer")
            .write_value_to_vec(r)
            .expect("encode"),
    );
    out
}

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
    assert_eq!(registry.waiting(), vec![(7, None)], "asked for");
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

#[test]
fn reason_labels() {
    let labels: Vec<_> = FilterReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(labels, ["filter", "undecodable", "tombstone"]);
}

#[test]
fn seed_line_is_expected_with_its_key() {
    let tag = seed_decoder().tag_value(Some(SEED_LINE.as_bytes()));
    assert_eq!(
        tag,
        expected(&["192.168.1.10", "www.example.com", "2024-01-01 10:00:00"])
    );
}

#[test]
fn seed_line_with_trailing_newline() {
    let d = seed_decoder();
    for end in ["\n", "\r\n"] {
        let line = format!("{SEED_LINE}{end}");
        assert!(matches!(
            d.tag_value(Some(line.as_bytes())),
            Tag::Expected { key: Some(_) }
        ));
    }
    // Only one line end is stripped: the ninth field of this one is "8.8.8.8\n".
    let line = format!("{SEED_LINE}\n\n");
    let d = Decoder::new(DecoderSpec {
        delimiter: "|".into(),
        fields: seed_fields(),
        key: Some(strings(&["dns_ip"])),
        ..DecoderSpec::default()
    })
    .expect("valid");
    assert_eq!(d.tag_value(Some(line.as_bytes())), expected(&["8.8.8.8\n"]));
}

#[test]
fn wrong_field_counts_are_filtered() {
    let d = seed_decoder();
    let eight = SEED_LINE.rsplit_once('|').expect("has fields").0;
    let ten = format!("{SEED_LINE}|extra");
    assert_eq!(d.tag_value(Some(eight.as_bytes())), FILTERED);
    assert_eq!(d.tag_value(Some(ten.as_bytes())), FILTERED);
}

#[test]
fn empty_lines_are_filtered() {
    let d = seed_decoder();
    for line in ["", "\n", "\r\n"] {
        assert_eq!(d.tag_value(Some(line.as_bytes())), FILTERED, "{line:?}");
    }
    // Without a field count, an empty line is one empty field: its key is empty, and
    // empty matches empty (SPEC), so it is audited like any record the pipeline writes.
    let d = Decoder::new(DecoderSpec {
        delimiter: "|".into(),
        fields: seed_fields(),
        key: Some(strings(&["client_ip"])),
        ..DecoderSpec::default()
    })
    .expect("valid");
    assert_eq!(d.tag_value(Some(b"")), expected(&[""]));
    // A key field the line does not have at all still cannot be built.
    let d = Decoder::new(DecoderSpec {
        delimiter: "|".into(),
        fields: seed_fields(),
        key: Some(strings(&["domain"])),
        ..DecoderSpec::default()
    })
    .expect("valid");
    assert_eq!(d.tag_value(Some(b"1.2.3.4")), FILTERED);
}

#[test]
fn keys_round_trip_through_their_packed_form() {
    for k in [
        Key::new(["a", "", "é\0"]),
        Key::new([""]),
        Key::new([] as [&str; 0]),
    ] {
        assert_eq!(Key::from_bytes(k.as_bytes()), Some(k.clone()));
    }
    assert_eq!(Key::from_bytes(b"a"), None, "no terminator");
    assert_eq!(Key::from_bytes(b"\xfe\xff"), None, "not UTF-8");
}

#[test]
fn empty_key_fields_are_audited() {
    // FINDINGS: a record whose key fields are empty was counted filtered{reason="filter"}
    // and never audited, although the pipeline writes it. Empty matches empty.
    let line = SEED_LINE.replacen("www.example.com", "", 1);
    let Tag::Expected { key: Some(k) } = seed_decoder().tag_value(Some(line.as_bytes())) else {
        panic!("an empty key field must be expected");
    };
    assert_eq!(k.to_vec()[1], "");
    let empty = "||||||||";
    assert!(matches!(
        seed_decoder().tag_value(Some(empty.as_bytes())),
        Tag::Expected { key: Some(k) } if k.to_vec() == vec!["", "", ""]
    ));
}

#[test]
fn non_utf8_is_undecodable_in_every_format() {
    let bad: &[u8] = b"192.168.1.10|\xff\xfe|2024";
    for format in [DecodeFormat::Csv, DecodeFormat::Json, DecodeFormat::Raw] {
        let d = Decoder::new(DecoderSpec {
            format,
            delimiter: "|".into(),
            ..DecoderSpec::default()
        })
        .expect("valid");
        assert_eq!(d.tag_value(Some(bad)), UNDECODABLE, "{format:?}");
        // Truncated multi-byte sequence.
        assert_eq!(
            d.tag_value(Some(&"é".as_bytes()[..1])),
            UNDECODABLE,
            "{format:?}"
        );
    }
}

#[test]
fn tombstone_in_every_format() {
    for format in [DecodeFormat::Csv, DecodeFormat::Json, DecodeFormat::Raw] {
        let d = Decoder::new(DecoderSpec {
            format,
            ..DecoderSpec::default()
        })
        .expect("valid");
        assert_eq!(d.tag_value(None), Tag::Filtered(FilterReason::Tombstone));
    }
}

#[test]
fn offset_strategies_get_no_key() {
    let d = Decoder::new(DecoderSpec {
        delimiter: "|".into(),
        fields: seed_fields(),
        field_count: Some(9),
        ..DecoderSpec::default()
    })
    .expect("valid");
    assert_eq!(
        d.tag_value(Some(SEED_LINE.as_bytes())),
        Tag::Expected { key: None }
    );
    // The filter still applies without a key.
    assert_eq!(d.tag_value(Some(b"a|b")), FILTERED);
}

#[test]
fn min_fields_and_require() {
    let d = Decoder::new(DecoderSpec {
        fields: strings(&["a", "b", "c"]),
        min_fields: Some(2),
        require: strings(&["b"]),
        ..DecoderSpec::default()
    })
    .expect("valid");
    assert_eq!(d.tag_value(Some(b"1")), FILTERED);
    assert_eq!(d.tag_value(Some(b"1,")), FILTERED, "b present but empty");
    assert_eq!(d.tag_value(Some(b"1,2")), Tag::Expected { key: None });
    assert_eq!(d.tag_value(Some(b"1,2,3,4")), Tag::Expected { key: None });
}

#[test]
fn multibyte_delimiter() {
    let d = Decoder::new(DecoderSpec {
        delimiter: "¦".into(),
        fields: strings(&["a", "b"]),
        key: Some(strings(&["b", "a"])),
        ..DecoderSpec::default()
    })
    .expect("valid");
    assert_eq!(
        d.tag_value(Some("x|y¦zé".as_bytes())),
        expected(&["zé", "x|y"])
    );
}

#[test]
fn plain_split_keeps_quotes() {
    let d = Decoder::new(DecoderSpec {
        fields: strings(&["a", "b", "c"]),
        key: Some(strings(&["a", "b", "c"])),
        ..DecoderSpec::default()
    })
    .expect("valid");
    assert_eq!(
        d.tag_value(Some(br#""x,y",z"#)),
        expected(&["\"x", "y\"", "z"])
    );
}

/// A quoting CSV decoder over `fields`, all of them the key.
fn quoted_keyed(fields: &[&str]) -> Decoder {
    Decoder::new(DecoderSpec {
        quote: true,
        fields: strings(fields),
        field_count: Some(fields.len()),
        key: Some(strings(fields)),
        ..DecoderSpec::default()
    })
    .expect("valid")
}

#[test]
fn quoted_csv() {
    let d = quoted_keyed(&["a", "b", "c"]);
    assert_eq!(
        d.tag_value(Some(br#""x,y","say ""hi""",z"#)),
        expected(&["x,y", "say \"hi\"", "z"])
    );
    assert_eq!(
        d.tag_value(Some(b"\"multi\nline\",b,c\r\n")),
        expected(&["multi\nline", "b", "c"])
    );
    // A stray quote inside an unquoted field is data.
    assert_eq!(
        d.tag_value(Some(br#"a"b,c,d"#)),
        expected(&["a\"b", "c", "d"])
    );
    // A quoted empty field is empty, a value like any other.
    assert_eq!(d.tag_value(Some(br#""",b,c"#)), expected(&["", "b", "c"]));
    // Malformed quoting cannot be decoded.
    assert_eq!(d.tag_value(Some(br#""unterminated,b,c"#)), UNDECODABLE);
    assert_eq!(d.tag_value(Some(br#""x"y,b,c"#)), UNDECODABLE);
    // Trailing delimiter after a quoted field gives an empty last field.
    assert_eq!(d.tag_value(Some(br#"a,"b","#)), expected(&["a", "b", ""]));
}

#[test]
fn json_by_name_and_pointer() {
    let d = json_decoder(&["client_ip", "/q/name", "/q/type"]);
    let doc = br#"{"client_ip":"10.0.0.1","q":{"name":"example.com","type":"A"}}"#;
    assert_eq!(
        d.tag_value(Some(doc)),
        expected(&["10.0.0.1", "example.com", "A"])
    );
}

#[test]
fn json_nested_arrays_and_escaped_pointers() {
    let d = json_decoder(&["/answers/1/ip", "/a~1b", "/m~0n"]);
    let doc = br#"{"answers":[{"ip":"1.1.1.1"},{"ip":"2.2.2.2"}],"a/b":"slash","m~n":"tilde"}"#;
    assert_eq!(
        d.tag_value(Some(doc)),
        expected(&["2.2.2.2", "slash", "tilde"])
    );
    // A top-level name is not split on '/' or '.'.
    let d = json_decoder(&["a.b"]);
    assert_eq!(
        d.tag_value(Some(br#"{"a.b":"x","a":{"b":"y"}}"#)),
        expected(&["x"])
    );
}

#[test]
fn json_scalars_and_containers() {
    let d = json_decoder(&["i", "f", "b", "o", "a", "s"]);
    let doc =
        br#"{"i":42,"f":1.5,"b":false,"o":{"z":1,"y":[true,null]},"a":[1,"x"],"s":"\u00e9\"q"}"#;
    assert_eq!(
        d.tag_value(Some(doc)),
        expected(&[
            "42",
            "1.5",
            "false",
            r#"{"y":[true,null],"z":1}"#,
            r#"[1,"x"]"#,
            "é\"q"
        ])
    );
}

#[test]
fn json_absent_and_null_are_filtered_empty_is_audited() {
    let d = json_decoder(&["k"]);
    assert_eq!(d.tag_value(Some(br#"{"other":1}"#)), FILTERED);
    // NULL in the sink never equals a literal: no key to look for.
    assert_eq!(d.tag_value(Some(br#"{"k":null}"#)), FILTERED);
    assert_eq!(d.tag_value(Some(br#"{"k":""}"#)), expected(&[""]));
    assert_eq!(d.tag_value(Some(br#"{"k":0}"#)), expected(&["0"]));
}

#[test]
fn json_non_object_is_filtered_not_undecodable() {
    let d = json_decoder(&["k"]);
    for doc in [&b"[1,2]"[..], b"\"k\"", b"17", b"null", b"true"] {
        assert_eq!(d.tag_value(Some(doc)), FILTERED);
    }
    // A pointer can address into an array root.
    let d = json_decoder(&["/1"]);
    assert_eq!(d.tag_value(Some(b"[1,2]")), expected(&["2"]));
    // Without key or require, any valid JSON is expected.
    let d = Decoder::new(DecoderSpec {
        format: DecodeFormat::Json,
        ..DecoderSpec::default()
    })
    .expect("valid");
    assert_eq!(d.tag_value(Some(b"[1,2]\n")), Tag::Expected { key: None });
}

#[test]
fn json_field_counts_are_top_level_members() {
    let d = Decoder::new(DecoderSpec {
        format: DecodeFormat::Json,
        min_fields: Some(2),
        ..DecoderSpec::default()
    })
    .expect("valid");
    assert_eq!(d.tag_value(Some(br#"{"a":{"b":1,"c":2}}"#)), FILTERED);
    assert_eq!(d.tag_value(Some(br#"[1,2,3]"#)), FILTERED);
    assert_eq!(
        d.tag_value(Some(br#"{"a":1,"b":null}"#)),
        Tag::Expected { key: None }
    );
    let d = Decoder::new(DecoderSpec {
        format: DecodeFormat::Json,
        field_count: Some(1),
        ..DecoderSpec::default()
    })
    .expect("valid");
    assert_eq!(
        d.tag_value(Some(br#"{"a":1}"#)),
        Tag::Expected { key: None }
    );
    assert_eq!(d.tag_value(Some(br#"{"a":1,"b":2}"#)), FILTERED);
}

#[test]
fn raw_has_one_field() {
    let spec = |field_count, min_fields| DecoderSpec {
        format: DecodeFormat::Raw,
        field_count,
        min_fields,
        ..DecoderSpec::default()
    };
    let tag = |spec| Decoder::new(spec).expect("valid").tag_value(Some(b"x"));
    assert_eq!(tag(spec(Some(1), Some(1))), Tag::Expected { key: None });
    assert_eq!(tag(spec(Some(2), None)), FILTERED);
    assert_eq!(tag(spec(None, Some(2))), FILTERED);
}

#[test]
fn invalid_json_is_undecodable() {
    let d = json_decoder(&["k"]);
    let deep = "[".repeat(10_000);
    for doc in [
        &b""[..],
        b"{",
        b"{\"k\":1} trailing",
        b"{'k':1}",
        b"{\"k\":1,}",
        SEED_LINE.as_bytes(),
        deep.as_bytes(),
    ] {
        assert_eq!(
            d.tag_value(Some(doc)),
            UNDECODABLE,
            "{:?}",
            String::from_utf8_lossy(doc)
        );
    }
}

#[test]
fn raw_value() {
    let d = Decoder::new(DecoderSpec {
        format: DecodeFormat::Raw,
        key: Some(strings(&["value"])),
        ..DecoderSpec::default()
    })
    .expect("valid");
    assert_eq!(
        d.tag_value(Some(SEED_LINE.as_bytes())),
        expected(&[SEED_LINE])
    );
    // raw keeps the bytes as they are, line end included.
    assert_eq!(d.tag_value(Some(b"x\n")), expected(&["x\n"]));
    // An empty value (not a tombstone) is an empty key: audited, empty matches empty.
    assert_eq!(d.tag_value(Some(b"")), expected(&[""]));

    let named = Decoder::new(DecoderSpec {
        format: DecodeFormat::Raw,
        fields: strings(&["line"]),
        require: strings(&["line"]),
        key: Some(strings(&["line"])),
        ..DecoderSpec::default()
    })
    .expect("valid");
    assert_eq!(named.tag_value(Some(b"abc")), expected(&["abc"]));
}

#[test]
fn invalid_specs_are_refused() {
    let err = |spec: DecoderSpec| Decoder::new(spec).expect_err("invalid spec");
    assert_eq!(
        err(DecoderSpec {
            delimiter: "".into(),
            ..DecoderSpec::default()
        }),
        RecordError::Delimiter(String::new())
    );
    assert_eq!(
        err(DecoderSpec {
            delimiter: "||".into(),
            ..DecoderSpec::default()
        }),
        RecordError::Delimiter("||".into())
    );
    assert_eq!(
        err(DecoderSpec {
            delimiter: "\"".into(),
            quote: true,
            ..DecoderSpec::default()
        }),
        RecordError::QuoteDelimiter('"')
    );
    assert_eq!(
        err(DecoderSpec {
            fields: strings(&["a", "b", "a"]),
            ..DecoderSpec::default()
        }),
        RecordError::DuplicateField("a".into())
    );
    assert!(matches!(
        err(DecoderSpec {
            fields: strings(&["a"]),
            key: Some(strings(&["b"])),
            ..DecoderSpec::default()
        }),
        RecordError::UnknownField { role: "key", .. }
    ));
    assert!(matches!(
        err(DecoderSpec {
            fields: strings(&["a"]),
            require: strings(&["z"]),
            ..DecoderSpec::default()
        }),
        RecordError::UnknownField {
            role: "require",
            ..
        }
    ));
    assert_eq!(
        err(DecoderSpec {
            key: Some(Vec::new()),
            ..DecoderSpec::default()
        }),
        RecordError::EmptyKey
    );
    assert!(matches!(
        err(DecoderSpec {
            format: DecodeFormat::Raw,
            key: Some(strings(&["line"])),
            ..DecoderSpec::default()
        }),
        RecordError::UnknownField { role: "key", .. }
    ));
    let msg = err(DecoderSpec {
        fields: strings(&["a"]),
        key: Some(strings(&["b"])),
        ..DecoderSpec::default()
    })
    .to_string();
    assert_eq!(
        msg,
        r#"key field "b" is not one of the record fields ["a"]"#
    );
}

fn values_of<'a>(v: &'a [&'a str]) -> impl Iterator<Item = Option<Cow<'a, str>>> {
    v.iter().map(|s| Some(Cow::Borrowed(*s)))
}

#[test]
fn key_keeps_values_apart() {
    let cases: [&[&str]; 6] = [
        &[],
        &[""],
        &["", ""],
        &["a", "b"],
        &["ab"],
        &["\0", "\u{7f}|é😀", ""],
    ];
    for values in cases {
        let key = Key::new(values);
        assert_eq!(key.to_vec(), values, "{values:?}");
        assert_eq!(key.len(), values.len());
        assert_eq!(key.values().len(), values.len());
        assert_eq!(key.is_empty(), values.is_empty());
        assert_eq!(key.first(), values.first().copied());
        assert_eq!(
            key.text_len(),
            values.iter().map(|v| v.len()).sum::<usize>()
        );
    }
    let collected = Key::try_collect(values_of(&["a", "", "é"]));
    assert_eq!(collected, Some(Key::new(["a", "", "é"])));
    let missing = [Some(Cow::Borrowed("a")), None, Some(Cow::Borrowed("c"))];
    assert_eq!(Key::try_collect(missing.into_iter()), None);
    // The scratch buffer is reset: a failed key leaves nothing for the next one.
    assert_eq!(Key::try_collect(values_of(&["z"])), Some(Key::new(["z"])));
    // Values never run into each other.
    assert_ne!(Key::new(["a", "b"]), Key::new(["ab"]));
    assert_ne!(Key::new(["a", ""]), Key::new(["a"]));
    assert_ne!(Key::new([""]), Key::new([] as [&str; 0]));
}

#[test]
fn key_serde_round_trip() {
    let key = Key::new(["a", "b"]);
    let json = serde_json::to_string(&key).expect("serializes");
    assert_eq!(json, r#"["a","b"]"#);
    let back: Key = serde_json::from_str(&json).expect("deserializes");
    assert_eq!(back, key);
}

fn id_decoder(template: &str, format: DecodeFormat, fields: &[&str]) -> Decoder {
    Decoder::new(DecoderSpec {
        format,
        delimiter: "|".into(),
        fields: strings(fields),
        id_template: Some(template.into()),
        ..DecoderSpec::default()
    })
    .expect("valid")
}

fn meta<'a>(key: Option<&'a [u8]>) -> RecordMeta<'a> {
    RecordMeta {
        topic: "dns",
        partition: 3,
        offset: 1234,
        key,
    }
}

#[test]
fn doc_id_from_kafka_coordinates() {
    // Kafka Connect's convention with key.ignore=true.
    let d = id_decoder("{topic}+{partition}+{offset}", DecodeFormat::Raw, &[]);
    assert_eq!(
        d.tag_record(Some(b"anything"), &meta(None)),
        expected(&["dns+3+1234"])
    );
    // The value's filters still apply first.
    assert_eq!(
        d.tag_record(None, &meta(None)),
        Tag::Filtered(FilterReason::Tombstone)
    );
    assert_eq!(d.tag_record(Some(b"\xff"), &meta(None)), UNDECODABLE);
}

#[test]
fn doc_id_from_kafka_key_and_fields() {
    let d = id_decoder(
        "{key}:{client_ip}/{time}",
        DecodeFormat::Csv,
        &["client_ip", "domain", "time"],
    );
    assert_eq!(
        d.tag_record(Some(b"1.2.3.4|x.org|10:00"), &meta(Some(b"k1"))),
        expected(&["k1:1.2.3.4/10:00"])
    );
    // No Kafka key, or an empty one, where the template needs it: not expected.
    assert_eq!(
        d.tag_record(Some(b"1.2.3.4|x.org|10:00"), &meta(None)),
        FILTERED
    );
    assert_eq!(
        d.tag_record(Some(b"1.2.3.4|x.org|10:00"), &meta(Some(b""))),
        FILTERED
    );
    // A Kafka key that is not UTF-8 cannot become an id.
    assert_eq!(
        d.tag_record(Some(b"1.2.3.4|x.org|10:00"), &meta(Some(b"\xff"))),
        UNDECODABLE
    );
    // An empty field in the template: not expected.
    assert_eq!(
        d.tag_record(Some(b"|x.org|10:00"), &meta(Some(b"k"))),
        FILTERED
    );
}

#[test]
fn doc_id_json_pointer_and_builtins_win() {
    let d = id_decoder("{/a/b}-{offset}", DecodeFormat::Json, &[]);
    assert_eq!(
        d.tag_record(Some(br#"{"a":{"b":7},"offset":"field"}"#), &meta(None)),
        expected(&["7-1234"])
    );
}

#[test]
fn doc_id_templates_are_checked() {
    let err = |t: &str| {
        Decoder::new(DecoderSpec {
            fields: strings(&["a"]),
            id_template: Some(t.into()),
            ..DecoderSpec::default()
        })
        .expect_err("invalid template")
    };
    assert!(matches!(err("x{"), RecordError::IdTemplate(_)));
    assert!(matches!(err("x}"), RecordError::IdTemplate(_)));
    assert!(matches!(err("{}"), RecordError::IdTemplate(_)));
    assert!(matches!(err("plain"), RecordError::IdTemplate(_)));
    assert!(matches!(
        err("{zz}"),
        RecordError::UnknownField {
            role: "id_template",
            ..
        }
    ));
}

/// Every decoder shape `tag` must survive: each format, quoting on and off, one- and
/// multi-byte delimiters, names and pointers, filters.
fn all_decoders() -> Vec<Decoder> {
    let mut specs = Vec::new();
    for quote in [false, true] {
        for delimiter in ["|", ",", "¦", "\n"] {
            specs.push(DecoderSpec {
                delimiter: delimiter.into(),
                quote,
                fields: strings(&["a", "b", "c"]),
                min_fields: Some(2),
                require: strings(&["b"]),
                key: Some(strings(&["c", "a"])),
                ..DecoderSpec::default()
            });
        }
    }
    specs.push(DecoderSpec {
        format: DecodeFormat::Json,
        require: strings(&["/x/0"]),
        key: Some(strings(&["a", "/b/c", "/", "/~", "/~2"])),
        ..DecoderSpec::default()
    });
    specs.push(DecoderSpec {
        format: DecodeFormat::Raw,
        key: Some(strings(&["value"])),
        ..DecoderSpec::default()
    });
    specs
        .into_iter()
        .map(|s| Decoder::new(s).expect("valid"))
        .collect()
}

/// Byte strings biased towards the characters the decoders treat specially.
fn tricky_bytes() -> impl Strategy<Value = Vec<u8>> {
    let special = prop::sample::select(vec![
        b'"', b',', b'|', b'\n', b'\r', b'{', b'}', b'[', b']', b':', b'\\', b'/', b'~', 0xc2,
        0xa6, 0xff, 0x00,
    ]);
    prop::collection::vec(prop_oneof![any::<u8>(), special], 0..64)
}

proptest! {
    #[test]
    fn tag_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256),
                        tricky in tricky_bytes()) {
        for d in all_decoders() {
            let _ = d.tag_value(Some(&bytes));
            let _ = d.tag_value(Some(&tricky));
        }
    }

    #[test]
    fn tag_never_panics_on_json_shaped_text(text in r#"[\{\}\[\]":,/a-c0-9 ~\\.-]{0,64}"#) {
        for d in all_decoders() {
            let _ = d.tag_value(Some(text.as_bytes()));
        }
    }

    #[test]
    fn plain_csv_round_trips(
        fields in prop::collection::vec("[^|\r\n]{1,12}", 1..12),
    ) {
        let names: Vec<String> = (0..fields.len()).map(|i| format!("f{i}")).collect();
        let d = Decoder::new(DecoderSpec {
            delimiter: "|".into(),
            fields: names.clone(),
            field_count: Some(fields.len()),
            key: Some(names),
            ..DecoderSpec::default()
        }).expect("valid");
        let line = fields.join("|");
        prop_assert_eq!(d.tag_value(Some(line.as_bytes())), Tag::Expected { key: Some(Key::new(&fields)) });
    }

    #[test]
    fn plain_csv_round_trips_multibyte_delimiter(
        fields in prop::collection::vec("[^→\r\n]{1,12}", 1..12),
    ) {
        let names: Vec<String> = (0..fields.len()).map(|i| format!("f{i}")).collect();
        let d = Decoder::new(DecoderSpec {
            delimiter: "→".into(),
            fields: names.clone(),
            key: Some(names),
            ..DecoderSpec::default()
        }).expect("valid");
        let line = format!("{}\n", fields.join("→"));
        prop_assert_eq!(d.tag_value(Some(line.as_bytes())), Tag::Expected { key: Some(Key::new(&fields)) });
    }

    #[test]
    fn quoted_csv_round_trips(fields in prop::collection::vec(".{1,12}", 1..8)) {
        let names: Vec<String> = (0..fields.len()).map(|i| format!("f{i}")).collect();
        let d = Decoder::new(DecoderSpec {
            quote: true,
            fields: names.clone(),
            field_count: Some(fields.len()),
            key: Some(names),
            ..DecoderSpec::default()
        }).expect("valid");
        let line: Vec<String> = fields
            .iter()
            .map(|f| format!("\"{}\"", f.replace('"', "\"\"")))
            .collect();
        let line = line.join(",");
        prop_assert_eq!(d.tag_value(Some(line.as_bytes())), Tag::Expected { key: Some(Key::new(&fields)) });
    }
}

// ---- hostile input (issue 8, item 6) ------------------------------------------

/// Runs `f` on a thread with a deliberately small stack: a decoder that recursed per
/// byte or per nesting level of its input would overflow it (an abort, not a panic).
fn on_small_stack(f: impl FnOnce() + Send + 'static) {
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(f)
        .expect("spawn")
        .join()
        .expect("no panic");
}

/// serde_json refuses documents nested 128 levels deep or more (its default recursion
/// limit, kept on: `disable_recursion_limit` is never called), so a nesting bomb is a
/// parse error, i.e. `undecodable`, found without deep recursion. Pins the boundary so a
/// serde_json upgrade that changed it would show here.
#[test]
fn json_nesting_bombs_are_undecodable() {
    on_small_stack(|| {
        let d = json_decoder(&["/a"]);
        let any = Decoder::new(DecoderSpec {
            format: DecodeFormat::Json,
            ..DecoderSpec::default()
        })
        .expect("valid");
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        // The deepest document accepted, and one level more.
        assert_eq!(
            any.tag_value(Some(nested(127).as_bytes())),
            Tag::Expected { key: None }
        );
        assert_eq!(any.tag_value(Some(nested(128).as_bytes())), UNDECODABLE);
        // Objects count the same; a key can point 127 levels down.
        let deep_obj = format!("{}1{}", r#"{"a":"#.repeat(127), "}".repeat(127));
        let pointer = "/a".repeat(127);
        let d_deep = json_decoder(&[pointer.as_str()]);
        assert_eq!(
            d_deep.tag_value(Some(deep_obj.as_bytes())),
            expected(&["1"])
        );
        let too_deep = format!("{}1{}", r#"{"a":"#.repeat(128), "}".repeat(128));
        assert_eq!(d_deep.tag_value(Some(too_deep.as_bytes())), UNDECODABLE);
        for bomb in [
            "[".repeat(100_000),
            nested(100_000),
            r#"{"a":"#.repeat(100_000),
            format!("{}1{}", r#"{"a":"#.repeat(100_000), "}".repeat(100_000)),
            format!(r#"{{"a":{}}}"#, "[{".repeat(200_000)),
            "[".repeat(1 << 20),
        ] {
            assert_eq!(
                d.tag_value(Some(bomb.as_bytes())),
                UNDECODABLE,
                "{}",
                &bomb[..20]
            );
            assert_eq!(any.tag_value(Some(bomb.as_bytes())), UNDECODABLE);
        }
        // A wide (not deep) document of 1 MiB is fine.
        let wide = format!("{{\"a\":[{}0]}}", "0,".repeat(512 * 1024));
        assert!(matches!(
            d.tag_value(Some(wide.as_bytes())),
            Tag::Expected { .. }
        ));
    });
}

/// 1 MiB values in every format: kept whole in the key, or filtered with a reason; never
/// truncated, never a panic.
#[test]
fn one_mebibyte_values() {
    on_small_stack(|| {
        const MIB: usize = 1 << 20;
        let big = "a'\\\"|,\u{1a}é\0".repeat(MIB / 10 + 1);
        assert!(big.len() >= MIB);
        let big_no_pipe = big.replace('|', "");

        // csv: a 1 MiB domain field (no delimiter in it) is part of the key, whole.
        let line = format!(
            "192.168.1.10|{big_no_pipe}|2024-01-01 10:00:00|{}",
            "x|".repeat(5) + "y"
        );
        assert_eq!(
            seed_decoder().tag_value(Some(line.as_bytes())),
            expected(&["192.168.1.10", &big_no_pipe, "2024-01-01 10:00:00"])
        );
        // ... 1 MiB of delimiters: a million fields, not nine.
        assert_eq!(
            seed_decoder().tag_value(Some("|".repeat(MIB).as_bytes())),
            FILTERED
        );
        // ... quoted, with delimiters, doubled quotes and line breaks inside.
        let quoted_field = "x,\"\r\n".repeat(MIB / 5);
        let q = quoted_keyed(&["a", "b"]);
        let line = format!("\"{}\",b", quoted_field.replace('"', "\"\""));
        assert_eq!(
            q.tag_value(Some(line.as_bytes())),
            expected(&[&quoted_field, "b"])
        );
        // ... 1 MiB of quote characters: unbalanced → undecodable; balanced → one field.
        assert_eq!(
            q.tag_value(Some("\"".repeat(MIB + 1).as_bytes())),
            UNDECODABLE
        );
        let quotes = "\"".repeat(MIB);
        assert!(matches!(
            q.tag_value(Some(quotes.as_bytes())),
            Tag::Filtered(_)
        ));

        // json: a 1 MiB string member, escapes and all.
        let doc = serde_json::json!({ "k": big }).to_string();
        assert_eq!(
            json_decoder(&["k"]).tag_value(Some(doc.as_bytes())),
            expected(&[&big])
        );
        // raw: the whole 1 MiB value.
        let raw = Decoder::new(DecoderSpec {
            format: DecodeFormat::Raw,
            key: Some(strings(&["value"])),
            ..DecoderSpec::default()
        })
        .expect("valid");
        assert_eq!(raw.tag_value(Some(big.as_bytes())), expected(&[&big]));

        // 1 MiB that is valid UTF-8 except for its last byte, or a truncated sequence at
        // the end: undecodable in every format.
        let mut bad = big.clone().into_bytes();
        bad.push(0xff);
        let mut cut = big.clone().into_bytes();
        cut.extend_from_slice(&"🦀".as_bytes()[..3]);
        for d in all_decoders() {
            assert_eq!(d.tag_value(Some(&bad)), UNDECODABLE);
            assert_eq!(d.tag_value(Some(&cut)), UNDECODABLE);
        }
    });
}

/// CSV with delimiters, quotes and line breaks inside fields, quoted (RFC 4180) and not.
#[test]
fn csv_embedded_delimiters_quotes_and_newlines() {
    let q = quoted_keyed(&["a", "b", "c"]);
    assert_eq!(
        q.tag_value(Some(b"\"x,y\",\"say \"\"hi\"\"\",\"l1\nl2\r\nl3\"")),
        expected(&["x,y", "say \"hi\"", "l1\nl2\r\nl3"])
    );
    // A line break outside quotes is just another character of the field (records are
    // whole Kafka values, not lines of a file); only one trailing line end is dropped.
    assert_eq!(
        q.tag_value(Some(b"a\nb,c\rd,e\r\n")),
        expected(&["a\nb", "c\rd", "e"])
    );
    // Four fields where three are expected: an unquoted delimiter splits.
    assert_eq!(q.tag_value(Some(b"x,y,\"z\",w")), FILTERED);
    // Malformed quoting: text after a closing quote, an unterminated field.
    assert_eq!(q.tag_value(Some(b"\"x\"y,b,c")), UNDECODABLE);
    assert_eq!(q.tag_value(Some(b"a,b,\"c\nd")), UNDECODABLE);
    // Without quoting, quotes are data and every delimiter splits.
    let plain = Decoder::new(DecoderSpec {
        fields: strings(&["a", "b", "c"]),
        field_count: Some(3),
        key: Some(strings(&["a", "b", "c"])),
        ..DecoderSpec::default()
    })
    .expect("valid");
    assert_eq!(
        plain.tag_value(Some(b"\"x,y\",z")),
        expected(&["\"x", "y\"", "z"])
    );
}

/// RFC 4180 encoding of one field: always quoted, quotes doubled.
fn rfc4180(field: &str) -> String {
    format!("\"{}\"", field.replace('"', "\"\""))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    /// Any bytes, any decoder shape (doc_id included, with any Kafka key): `tag` returns
    /// (no panic), is deterministic, and non-UTF-8 is `undecodable` whatever the format.
    #[test]
    fn hostile_bytes_are_classified(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        tricky in tricky_bytes(),
        key in prop::option::of(prop::collection::vec(any::<u8>(), 0..16)),
    ) {
        let m = RecordMeta { topic: "t", partition: 0, offset: 7, key: key.as_deref() };
        let mut decoders = all_decoders();
        decoders.push(id_decoder("{key}-{offset}", DecodeFormat::Raw, &[]));
        decoders.push(id_decoder("{/a}:{key}", DecodeFormat::Json, &[]));
        decoders.push(id_decoder("{b}{topic}", DecodeFormat::Csv, &["a", "b"]));
        for value in [&bytes, &tricky] {
            for d in &decoders {
                let tag = d.tag_record(Some(value), &m);
                prop_assert_eq!(&tag, &d.tag_record(Some(value), &m));
                if std::str::from_utf8(value).is_err() {
                    prop_assert_eq!(tag, UNDECODABLE);
                } else if let Tag::Expected { key: Some(key) } = tag {
                    // Every expected record has a key to look for (its parts may be
                    // empty: empty matches empty); a document id is never empty.
                    prop_assert!(!key.is_empty());
                }
            }
        }
    }

    /// The key builder over quoted CSV: fields full of delimiters, quotes and line breaks
    /// come back exactly.
    #[test]
    fn quoted_csv_key_round_trips(
        fields in prop::collection::vec("[a-c,|\"\r\n é\u{1a}\0\\\\']{1,10}", 1..8),
        delimiter in prop::sample::select(vec![",", "|", "¦", "\t"]),
    ) {
        let names: Vec<String> = (0..fields.len()).map(|i| format!("f{i}")).collect();
        let d = Decoder::new(DecoderSpec {
            delimiter: delimiter.into(),
            quote: true,
            fields: names.clone(),
            field_count: Some(fields.len()),
            key: Some(names),
            ..DecoderSpec::default()
        }).expect("valid");
        let line: Vec<String> = fields.iter().map(|f| rfc4180(f)).collect();
        let line = line.join(delimiter);
        prop_assert_eq!(d.tag_value(Some(line.as_bytes())), Tag::Expected { key: Some(Key::new(&fields)) });
    }

    /// The key builder over JSON: any member names and string values serialized by
    /// serde_json come back exactly (an empty value is a value).
    #[test]
    fn json_key_round_trips(
        members in prop::collection::btree_map("[^/].{0,8}", ".{0,16}", 1..6),
    ) {
        let names: Vec<String> = members.keys().cloned().collect();
        let values: Vec<String> = members.values().cloned().collect();
        let doc = serde_json::to_string(&members).expect("serializes");
        let d = Decoder::new(DecoderSpec {
            format: DecodeFormat::Json,
            key: Some(names),
            ..DecoderSpec::default()
        }).expect("valid");
        let want = Tag::Expected { key: Some(Key::new(&values)) };
        prop_assert_eq!(d.tag_value(Some(doc.as_bytes())), want);
    }

    /// The `doc_id` builder with any Kafka key bytes: the id is the key's text, or the
    /// record is filtered (no or empty key) or undecodable (key not UTF-8).
    #[test]
    fn doc_id_with_any_kafka_key(key in prop::option::of(prop::collection::vec(any::<u8>(), 0..24))) {
        let d = id_decoder("{key}/{partition}", DecodeFormat::Raw, &[]);
        let m = RecordMeta { topic: "t", partition: 5, offset: 1, key: key.as_deref() };
        let want = match key.as_deref() {
            None | Some([]) => FILTERED,
            Some(k) => match std::str::from_utf8(k) {
                Ok(k) => expected(&[&format!("{k}/5")]),
                Err(_) => UNDECODABLE,
            },
        };
        prop_assert_eq!(d.tag_record(Some(b"v"), &m), want);
    }
}

#[test]
fn template_placeholders_name_the_fields_or_the_problem() {
    assert_eq!(
        template_placeholders("{topic}-{partition}/{ip}x"),
        Ok(vec!["topic", "partition", "ip"])
    );
    assert_eq!(template_placeholders("plain"), Ok(vec![]));
    for bad in ["a}", "{a", "{}", "{a{b}"] {
        assert!(template_placeholders(bad).is_err(), "{bad}");
    }
}
