//! Key values of an Elasticsearch/OpenSearch `keyword` field, as the server indexes them.
//!
//! The server skips indexing a value longer than the field's `ignore_above` (256 on the
//! `.keyword` sub-field of a dynamically mapped string): the document is stored, but no
//! `term` query finds it, so a key lookup reads it as absent whether it was written or
//! lost. Its record is therefore unverifiable ([`Unconvertible::Unindexable`]), never
//! missing. The length is the Java `String.length()` the server compares against: UTF-16
//! code units, checked on the value as sent, before any normalizer (Elasticsearch and
//! OpenSearch `KeywordFieldMapper` both test `value.length() > ignoreAbove` first).
//!
//! The `lowercase` normalizer is applied to indexed values and to `term` queries alike, so
//! a lookup finds the document either way; converting here makes spellings the field
//! equates (`ABC`, `abc`) one key of the audit's multiset, so one document is never
//! counted for both. Lucene lowercases code point by code point (`Character.toLowerCase`);
//! only characters whose case mapping has been fixed for many Unicode versions are
//! converted here, so the server's Java and this process cannot disagree: any other
//! character that has a lowercase makes the value unverifiable
//! ([`Unconvertible::Unnormalizable`]).

use super::{KeyColumn, Unconvertible};
use std::borrow::Cow;

/// Characters below this code point (Latin, Greek, Cyrillic, Armenian: Unicode 1.1) have
/// had the same simple lowercase mapping in every Unicode version Java and Rust ship.
const STABLE_CASE_BELOW: u32 = 0x0590;

/// `v` as a keyword field with `ignore_above` (UTF-16 code units; `None`: unlimited) and,
/// when `lowercase`, the `lowercase` normalizer indexes it.
pub fn value<'a>(
    c: &KeyColumn,
    v: &'a str,
    ignore_above: Option<u32>,
    lowercase: bool,
) -> Result<Cow<'a, str>, Unconvertible> {
    if let Some(limit) = ignore_above {
        let length = utf16_len(v);
        if length > limit as usize {
            return Err(Unconvertible::Unindexable {
                column: c.name.clone(),
                declared: c.declared.clone(),
                length,
                limit,
            });
        }
    }
    if !lowercase {
        return Ok(Cow::Borrowed(v));
    }
    lower(v)
        .map(|l| {
            if l == v {
                Cow::Borrowed(v)
            } else {
                Cow::Owned(l)
            }
        })
        .ok_or_else(|| Unconvertible::Unnormalizable {
            column: c.name.clone(),
            declared: c.declared.clone(),
        })
}

/// The length Java's `String.length()` gives `v`.
pub fn utf16_len(v: &str) -> usize {
    v.chars().map(char::len_utf16).sum()
}

/// `v` lowercased character by character as Lucene's lowercase filter does, or `None` when
/// a character's mapping is not known to agree with the server's (see the module docs).
fn lower(v: &str) -> Option<String> {
    let mut out = String::with_capacity(v.len());
    for ch in v.chars() {
        if ch.is_ascii() {
            out.push(ch.to_ascii_lowercase());
            continue;
        }
        // Java's simple mapping of U+0130 (İ) is `i`; Rust's full mapping adds a combining dot.
        if ch == '\u{130}' {
            out.push('i');
            continue;
        }
        let mut l = ch.to_lowercase();
        match (l.next(), l.next()) {
            (Some(one), None) if one == ch => out.push(ch),
            (Some(one), None) if (ch as u32) < STABLE_CASE_BELOW => out.push(one),
            _ => return None,
        }
    }
    Some(out)
}
