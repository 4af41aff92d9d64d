//! JSON and raw values: names and pointers, scalars and containers, absent and null fields.

use super::*;

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
