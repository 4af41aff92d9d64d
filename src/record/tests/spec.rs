//! Decoder specs the constructor refuses.

use super::*;

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
