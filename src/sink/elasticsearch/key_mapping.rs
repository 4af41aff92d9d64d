//! The key fields' mapping facts `_field_caps` does not show: `ignore_above` and the
//! normalizer, read with ONE `GET index/_mapping/field/<fields>?include_defaults=true` for
//! every index the target covers, and turned into the audit's key domain
//! ([`crate::key_domain`], [`ColumnType::Keyword`]).
//!
//! Several indices (a pattern, an alias) may map a field differently: the smallest
//! `ignore_above` is used (a value over it may be indexed in some indices only, so it is
//! unverifiable, never missing), and the `lowercase` normalizer is applied only when every
//! index uses it (a lookup as sent is normalized by the server where the field has one and
//! exact where it has none, so it finds the document either way). Both are said in the
//! notes, which the verifier logs.

use crate::key_domain::{ColumnType, Fraction, KeyColumn, KeyDomain};
use serde_json::Value;
use std::collections::BTreeMap;

/// The `ignore_above` of a string field that dynamic mapping creates (`field.keyword`).
pub const DYNAMIC_IGNORE_ABOVE: u32 = 256;

/// What every index of the target maps one key field as.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyFieldMapping {
    /// The field as configured (`domain.keyword`).
    pub field: String,
    /// Per index that maps the field: its type, `ignore_above` (`None`: unlimited) and
    /// normalizer.
    pub indices: BTreeMap<String, FieldFacts>,
}

/// One index's mapping of one field.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldFacts {
    /// The mapping type (`keyword`, `long`, `date`).
    pub ty: String,
    /// `ignore_above`, when below `i32::MAX` (the server's "unlimited").
    pub ignore_above: Option<u32>,
    /// The normalizer's name, if any.
    pub normalizer: Option<String>,
}

/// Reads the answer of `GET index/_mapping/field/<fields>` (one entry per index, each with
/// `mappings.<field>.mapping.<leaf name>`; an index that does not map a field lists
/// nothing for it). Anything malformed is skipped: the field then counts as not mapped.
pub fn parse_field_mappings(v: &Value, fields: &[String]) -> Vec<KeyFieldMapping> {
    let mut out: Vec<KeyFieldMapping> = fields
        .iter()
        .map(|f| KeyFieldMapping {
            field: f.clone(),
            indices: BTreeMap::new(),
        })
        .collect();
    let Some(indices) = v.as_object() else {
        return out;
    };
    for (index, body) in indices {
        let Some(mappings) = body.get("mappings").and_then(Value::as_object) else {
            continue;
        };
        for m in &mut out {
            // The mapping is keyed by the field's leaf name; there is exactly one.
            let Some(leaf) = mappings
                .get(&m.field)
                .and_then(|f| f.get("mapping"))
                .and_then(Value::as_object)
                .and_then(|o| o.values().next())
            else {
                continue;
            };
            let ignore_above = leaf
                .get("ignore_above")
                .and_then(|n| {
                    n.as_u64()
                        .or_else(|| n.as_str().and_then(|s| s.parse().ok()))
                })
                .filter(|n| *n < i32::MAX as u64)
                .and_then(|n| u32::try_from(n).ok());
            m.indices.insert(
                index.clone(),
                FieldFacts {
                    ty: leaf
                        .get("type")
                        .and_then(Value::as_str)
                        .unwrap_or("object")
                        .to_string(),
                    ignore_above,
                    // With include_defaults OpenSearch lists `"normalizer": "default"` (and
                    // Elasticsearch `null`) for a field without one.
                    normalizer: leaf
                        .get("normalizer")
                        .and_then(Value::as_str)
                        .filter(|n| *n != "default")
                        .map(str::to_string),
                },
            );
        }
    }
    out
}

/// The key domain of `fields` (in key order) and what the operator should be told about it
/// (differing indices, normalizers not reproduced, fields not mapped yet). A field no index
/// maps yet (the pipeline has written nothing, the index does not exist, the mapping
/// cannot be read) gets the dynamic mapping's defaults: `ignore_above` 256 for a
/// `*.keyword` field, unlimited otherwise — an assumption the notes state and the
/// verifier's next mapping read checks.
pub fn key_domain_of(fields: &[KeyFieldMapping]) -> (KeyDomain, Vec<String>) {
    let mut notes = Vec::new();
    let columns = fields
        .iter()
        .map(|m| {
            let (ty, declared) = column_of(m, &mut notes);
            KeyColumn {
                name: m.field.clone(),
                declared,
                ty,
                collation: None,
            }
        })
        .collect();
    (
        KeyDomain {
            columns,
            // Unused: no key field is a date-time column.
            fraction: Fraction::Truncate,
        },
        notes,
    )
}

fn column_of(m: &KeyFieldMapping, notes: &mut Vec<String>) -> (ColumnType, String) {
    let f = &m.field;
    if m.indices.is_empty() {
        let assumed = f.ends_with(".keyword").then_some(DYNAMIC_IGNORE_ABOVE);
        let declared = match assumed {
            Some(n) => format!("not mapped yet: assumed ignore_above {n} (dynamic mapping)"),
            None => "not mapped yet: assumed no ignore_above".to_string(),
        };
        notes.push(format!(
            "key field `{f}` is not mapped in any index yet (or the mapping cannot be read): \
             {declared}; the mapping is read again before key counts"
        ));
        return (
            ColumnType::Keyword {
                ignore_above: assumed,
                lowercase: false,
            },
            declared,
        );
    }
    let limits: Vec<Option<u32>> = m.indices.values().map(|x| x.ignore_above).collect();
    let smallest = limits.iter().flatten().min().copied();
    if limits.iter().any(|l| *l != limits[0]) {
        let per: Vec<String> = m
            .indices
            .iter()
            .map(|(i, x)| match x.ignore_above {
                Some(n) => format!("{n} in `{i}`"),
                None => format!("none in `{i}`"),
            })
            .collect();
        notes.push(format!(
            "key field `{f}`: ignore_above differs between indices ({}); the smallest, {}, \
             is used: a longer value is counted unverifiable even where an index would hold it",
            per.join(", "),
            smallest.map_or("none".to_string(), |n| n.to_string())
        ));
    }
    let normalizers: Vec<Option<&str>> = m
        .indices
        .values()
        .map(|x| x.normalizer.as_deref())
        .collect();
    let lowercase = normalizers.iter().all(|n| *n == Some("lowercase"));
    let other: Vec<&str> = normalizers
        .iter()
        .flatten()
        .copied()
        .filter(|n| !lowercase || *n != "lowercase")
        .collect();
    if !other.is_empty() {
        notes.push(format!(
            "key field `{f}`: normalizer {} is not reproduced by the auditor (only `lowercase` \
             on every index is): values are compared as sent. The server normalizes the query \
             too, so a written record is found; but two spellings it equates are two keys \
             here, each counting the other's documents, which can hide a missing record",
            other
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let mut types: Vec<&str> = m.indices.values().map(|x| x.ty.as_str()).collect();
    types.sort_unstable();
    types.dedup();
    let mut declared = types.join("/");
    if let Some(n) = smallest {
        declared.push_str(&format!(", ignore_above {n}"));
    }
    if lowercase {
        declared.push_str(", normalizer lowercase");
    } else if !other.is_empty() {
        declared.push_str(&format!(
            ", normalizer {} (not reproduced)",
            other.join("/")
        ));
    }
    let strings = types
        .iter()
        .all(|t| matches!(*t, "keyword" | "constant_keyword" | "wildcard"));
    let ty = if strings || smallest.is_some() || lowercase {
        ColumnType::Keyword {
            ignore_above: smallest,
            lowercase,
        }
    } else {
        // Numbers, dates, ips: compared as sent, as before.
        ColumnType::Other
    };
    (ty, declared)
}

/// The `ignore_above` of each column of `d` (`None`: unlimited or not a keyword field).
pub fn limits_of(d: &KeyDomain) -> Vec<Option<u32>> {
    d.columns
        .iter()
        .map(|c| match c.ty {
            ColumnType::Keyword { ignore_above, .. } => ignore_above,
            _ => None,
        })
        .collect()
}
