//! The text formats: a record decoded as CSV fields, a JSON document or a raw value, and the
//! field lookups the filters, keys and ids read from it.

use super::Locator;
use serde_json::Value;
use std::borrow::Cow;

/// A record value after format decoding, before filtering.
pub(super) enum Decoded<'a> {
    Csv(Vec<Cow<'a, str>>),
    /// A csv record whose fields are only counted: no filter, key or id reads their text
    /// (`Decoder::reads_fields`), so [`Decoded::get`] is never asked.
    Count(usize),
    Json(Value),
    Raw(&'a str),
}

impl Decoded<'_> {
    /// How many fields the record has, for `field_count` and `min_fields`.
    pub(super) fn field_count(&self) -> usize {
        match self {
            Decoded::Csv(fields) => fields.len(),
            Decoded::Count(n) => *n,
            Decoded::Json(doc) => doc.as_object().map_or(0, serde_json::Map::len),
            Decoded::Raw(_) => 1,
        }
    }

    /// The text of a field, or `None` when the record does not have it.
    pub(super) fn get(&self, loc: &Locator) -> Option<Cow<'_, str>> {
        match (self, loc) {
            (Decoded::Csv(fields), Locator::Index(i)) => {
                fields.get(*i).map(|f| Cow::Borrowed(f.as_ref()))
            }
            (Decoded::Json(doc), Locator::Name(name)) => doc
                .as_object()
                .and_then(|o| o.get(name))
                .and_then(json_text),
            (Decoded::Json(doc), Locator::Pointer(ptr)) => doc.pointer(ptr).and_then(json_text),
            (Decoded::Raw(text), Locator::Whole) => Some(Cow::Borrowed(text)),
            // Decoder::new only builds locators of the decoder's own format.
            _ => None,
        }
    }
}

/// The text a JSON value is matched by: strings as they are, scalars as their JSON text,
/// containers as compact JSON; null counts as absent.
fn json_text(value: &Value) -> Option<Cow<'_, str>> {
    match value {
        Value::Null => None,
        Value::String(s) => Some(Cow::Borrowed(s)),
        Value::Bool(b) => Some(Cow::Borrowed(if *b { "true" } else { "false" })),
        Value::Number(n) => Some(Cow::Owned(n.to_string())),
        // Member order follows serde_json's map (sorted keys), not the source text.
        Value::Array(_) | Value::Object(_) => Some(Cow::Owned(value.to_string())),
    }
}

/// Removes one trailing line end: producers that write log lines often keep the newline.
pub(super) fn strip_line_end(text: &str) -> &str {
    text.strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(text)
}

/// The delimiter as a byte when it is ASCII: an ASCII byte never occurs inside a multi-byte
/// UTF-8 sequence, so splitting the bytes at it splits the text at char boundaries.
pub(super) fn ascii_byte(delimiter: char) -> Option<u8> {
    u8::try_from(delimiter).ok().filter(u8::is_ascii)
}

/// Splits `line` at every `delimiter` (an ASCII byte, see [`ascii_byte`]), like
/// `str::split`, in one vectorised scan.
pub(super) fn split_ascii(line: &str, delimiter: u8, width: usize) -> Vec<Cow<'_, str>> {
    let mut fields = Vec::with_capacity(width);
    let mut start = 0;
    for at in memchr::memchr_iter(delimiter, line.as_bytes()) {
        // Char boundaries on both sides (see `ascii_byte`): never panics.
        fields.push(Cow::Borrowed(&line[start..at]));
        start = at + 1;
    }
    fields.push(Cow::Borrowed(&line[start..]));
    fields
}

/// Splits RFC 4180 style: a field that starts with `"` runs to the next lone `"`, with `""`
/// standing for one quote; it may contain the delimiter and line breaks. A quote inside an
/// unquoted field is kept as is (log lines carry stray quotes). Returns `None` for an
/// unterminated quoted field or text between a closing quote and the next delimiter.
pub(super) fn split_quoted(line: &str, delimiter: char) -> Option<Vec<Cow<'_, str>>> {
    let mut fields = Vec::new();
    let mut rest = line;
    loop {
        if let Some(mut inner) = rest.strip_prefix('"') {
            let mut field = String::new();
            loop {
                let end = inner.find('"')?;
                field.push_str(&inner[..end]);
                inner = &inner[end + 1..];
                match inner.strip_prefix('"') {
                    Some(after) => {
                        field.push('"');
                        inner = after;
                    }
                    None => break,
                }
            }
            fields.push(Cow::Owned(field));
            if inner.is_empty() {
                return Some(fields);
            }
            rest = inner.strip_prefix(delimiter)?;
        } else {
            match rest.find(delimiter) {
                Some(at) => {
                    fields.push(Cow::Borrowed(&rest[..at]));
                    rest = &rest[at + delimiter.len_utf8()..];
                }
                None => {
                    fields.push(Cow::Borrowed(rest));
                    return Some(fields);
                }
            }
        }
    }
}
