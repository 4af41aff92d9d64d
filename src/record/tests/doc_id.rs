//! `doc_id` templates: ids from Kafka coordinates, keys and fields, and template checks.

use super::*;

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
