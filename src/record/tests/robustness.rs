//! Any input: never panics, round trips, hostile sizes and nesting (issue 8, item 6).

use super::*;

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
    #![proptest_config(crate::test_seed::config())]
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
    #![proptest_config(crate::test_seed::with_cases(20_000))]

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
