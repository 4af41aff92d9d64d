//! CSV and the format-independent classification: field counts, empty lines and keys, non-UTF-8,
//! tombstones, delimiters and quoting.

use super::*;

#[test]
fn reason_labels() {
    let labels: Vec<_> = FilterReason::ALL.iter().map(|r| r.as_str()).collect();
    assert_eq!(
        labels,
        ["filter", "undecodable", "tombstone", "unconvertible_key"]
    );
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

proptest! {
    #![proptest_config(crate::test_seed::with_cases(5_000))]

    /// The vectorised split (`split_ascii`) and count (`Decoded::Count`) agree with
    /// `str::split` on any text, multi-byte characters and empty fields included.
    #[test]
    fn ascii_split_and_count_match_str_split(
        line in "[a|,;\t é€😀\"\\\\]{0,64}",
        d in prop::sample::select(vec!['|', ',', ';', '\t', 'a']),
    ) {
        let b = text::ascii_byte(d).expect("ASCII");
        let want: Vec<&str> = line.split(d).collect();
        let got = text::split_ascii(&line, b, 1);
        prop_assert_eq!(got.iter().map(|c| c.as_ref()).collect::<Vec<_>>(), want.clone());
        prop_assert_eq!(memchr::memchr_iter(b, line.as_bytes()).count() + 1, want.len());
    }

    /// A decoder that only counts fields (offset_columns, `field_count`) tags every line
    /// as one that splits them does (a `require` on field 0 that every line passes).
    #[test]
    fn counting_fields_tags_as_splitting_does(line in "x[a|é,]{0,40}", n in 1usize..6) {
        let spec = |require: Vec<String>| DecoderSpec {
            delimiter: "|".into(),
            fields: (0..6).map(|i| format!("f{i}")).collect(),
            field_count: Some(n),
            require,
            ..DecoderSpec::default()
        };
        let counting = Decoder::new(spec(Vec::new())).expect("valid");
        let splitting = Decoder::new(spec(vec!["f0".into()])).expect("valid");
        prop_assert!(!counting.reads_fields && splitting.reads_fields);
        prop_assert_eq!(
            counting.tag_value(Some(line.as_bytes())),
            splitting.tag_value(Some(line.as_bytes()))
        );
    }
}

#[test]
fn a_non_ascii_delimiter_still_splits() {
    let d = Decoder::new(DecoderSpec {
        delimiter: "§".into(),
        fields: strings(&["a", "b"]),
        field_count: Some(2),
        key: Some(strings(&["b"])),
        ..DecoderSpec::default()
    })
    .expect("valid");
    assert_eq!(d.tag_value(Some("x§é".as_bytes())), expected(&["é"]));
    assert_eq!(d.tag_value(Some("x§é§".as_bytes())), FILTERED);
}

/// With the sink's key columns known (the seed's `time DATETIME` on MariaDB), each key is
/// written as the column stores it: milliseconds dropped, `T` and space one key; a time the
/// column cannot store is `unconvertible_key`, not a key that could only read as lost.
#[test]
fn keys_are_written_in_the_sink_columns_domain() {
    use crate::key_domain::{ColumnType, Fraction, KeyColumn, KeyDomain};
    let column = |name: &str, declared: &str, ty| KeyColumn {
        name: name.into(),
        declared: declared.into(),
        ty,
        collation: None,
    };
    let domain = KeyDomain {
        columns: vec![
            column("client_ip", "varchar(64)", ColumnType::Text),
            column("domain", "varchar(512)", ColumnType::Text),
            column("time", "datetime", ColumnType::Datetime { precision: 0 }),
        ],
        fraction: Fraction::Truncate,
    };
    let d = seed_decoder().with_key_domain(Some(domain.clone()));
    assert_eq!(d.key_domain(), Some(&domain));
    let line =
        |time: &str| format!("192.168.1.10|www.example.com|{time}|1.1.1.1|NOERROR|A|-|-|8.8.8.8");
    let stored = expected(&["192.168.1.10", "www.example.com", "2024-01-01 10:00:05"]);
    for time in [
        "2024-01-01 10:00:05.185",
        "2024-01-01T10:00:05",
        "2024-01-01 10:00:05",
    ] {
        assert_eq!(d.tag_value(Some(line(time).as_bytes())), stored, "{time}");
    }
    assert_eq!(
        d.tag_value(Some(line("yesterday").as_bytes())),
        Tag::Filtered(FilterReason::UnconvertibleKey)
    );
    // An empty time is a key like any other (it matches '' or NULL).
    assert_eq!(
        d.tag_value(Some(line("").as_bytes())),
        expected(&["192.168.1.10", "www.example.com", ""])
    );
    // Text columns only: keys as written, and the domain still shows.
    let text = KeyDomain {
        columns: vec![
            column("client_ip", "varchar(64)", ColumnType::Text),
            column("domain", "varchar(512)", ColumnType::Text),
            column("time", "varchar(32)", ColumnType::Text),
        ],
        fraction: Fraction::Truncate,
    };
    let d = seed_decoder().with_key_domain(Some(text));
    assert!(d.key_domain().is_some());
    assert_eq!(
        d.tag_value(Some(line("2024-01-01T10:00:05.185").as_bytes())),
        expected(&["192.168.1.10", "www.example.com", "2024-01-01T10:00:05.185"])
    );
}
