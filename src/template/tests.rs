//! The template parser: pieces, placeholder names and every malformed shape.

use super::*;

#[test]
fn literals_and_names_alternate() {
    assert_eq!(
        parse("{topic}+{partition}+{offset}"),
        Ok(vec![
            Piece::Name("topic"),
            Piece::Literal("+"),
            Piece::Name("partition"),
            Piece::Literal("+"),
            Piece::Name("offset"),
        ])
    );
    assert_eq!(
        parse("id-{key}.v1"),
        Ok(vec![
            Piece::Literal("id-"),
            Piece::Name("key"),
            Piece::Literal(".v1"),
        ])
    );
}

#[test]
fn text_without_braces_is_one_literal() {
    assert_eq!(parse("plain"), Ok(vec![Piece::Literal("plain")]));
    assert_eq!(parse(""), Ok(vec![]));
    assert_eq!(placeholders("plain"), Ok(vec![]));
}

#[test]
fn placeholders_are_the_names_in_order() {
    assert_eq!(placeholders("{a}-{b}{c}"), Ok(vec!["a", "b", "c"]));
}

#[test]
fn malformed_templates_say_what_is_wrong() {
    for (template, problem) in [
        ("a}b", "`}` without a matching `{`"),
        ("{a}}", "`}` without a matching `{`"),
        ("{a", "`{` without a matching `}`"),
        ("x{", "`{` without a matching `}`"),
        ("{}", "empty or nested"),
        ("{{a}}", "empty or nested"),
    ] {
        match parse(template) {
            Err(e) => assert!(e.contains(problem), "{template}: {e}"),
            Ok(pieces) => panic!("{template} parsed as {pieces:?}"),
        }
        assert!(placeholders(template).is_err(), "{template}");
    }
}
