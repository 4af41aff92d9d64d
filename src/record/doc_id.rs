//! `doc_id` matching: the `{name}` template of a document id, parsed once, and the id of one
//! record rendered from it.

use super::*;

/// Renders a document id; a field or Kafka key that is absent or empty filters the record,
/// a Kafka key that is not UTF-8 makes it undecodable.
pub(super) fn build_id(
    parts: &[IdPart],
    decoded: &Decoded<'_>,
    meta: &RecordMeta<'_>,
) -> Result<String, FilterReason> {
    use std::fmt::Write;
    let mut id = String::new();
    for part in parts {
        match part {
            IdPart::Literal(l) => id.push_str(l),
            IdPart::Topic => id.push_str(meta.topic),
            IdPart::Partition => {
                let _ = write!(id, "{}", meta.partition);
            }
            IdPart::Offset => {
                let _ = write!(id, "{}", meta.offset);
            }
            IdPart::KafkaKey => {
                let bytes = meta
                    .key
                    .filter(|k| !k.is_empty())
                    .ok_or(FilterReason::Filter)?;
                id.push_str(std::str::from_utf8(bytes).map_err(|_| FilterReason::Undecodable)?);
            }
            IdPart::Field(loc) => {
                let v = decoded
                    .get(loc)
                    .filter(|v| !v.is_empty())
                    .ok_or(FilterReason::Filter)?;
                id.push_str(&v);
            }
        }
    }
    Ok(id)
}

/// A piece of a `{name}` template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TemplatePiece<'a> {
    Literal(&'a str),
    Name(&'a str),
}

/// Splits `a{b}c` into literals and placeholder names (no escapes: `{` and `}` are always
/// delimiters, as `config` validates).
pub(super) fn parse_template(template: &str) -> Result<Vec<TemplatePiece<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with('}') {
            return Err("has a `}` without a matching `{`".to_owned());
        }
        if open > 0 {
            out.push(TemplatePiece::Literal(&rest[..open]));
        }
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            return Err("has a `{` without a matching `}`".to_owned());
        };
        let name = &after[..close];
        if name.is_empty() || name.contains('{') {
            return Err("has an empty or nested `{}` placeholder".to_owned());
        }
        out.push(TemplatePiece::Name(name));
        rest = &after[close + 1..];
    }
    if !rest.is_empty() {
        out.push(TemplatePiece::Literal(rest));
    }
    Ok(out)
}

/// The placeholder names of a `{name}` template, in order, or what is wrong with it. The
/// same parser the decoder renders ids with, so config validation and decoding cannot
/// disagree about what a template means.
pub fn template_placeholders(template: &str) -> Result<Vec<&str>, String> {
    Ok(parse_template(template)?
        .into_iter()
        .filter_map(|p| match p {
            TemplatePiece::Name(n) => Some(n),
            TemplatePiece::Literal(_) => None,
        })
        .collect())
}
