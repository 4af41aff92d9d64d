//! Field mappings: which fields a question names, and the `_field_caps` check that they
//! exist with a type exact queries can use.

use super::{EsTarget, FieldRole, FieldSet};
use crate::sink::SinkError;
use serde_json::Value;

// ------------------------------------------------------------------------ field mappings

/// The fields a [`FieldSet`] names, with what each is used for.
pub fn field_requirements(t: &EsTarget, set: FieldSet) -> Vec<(FieldRole, &str)> {
    match set {
        FieldSet::Offsets => {
            let mut v = vec![
                (FieldRole::Partition, t.columns.partition.as_str()),
                (FieldRole::Offset, t.columns.offset.as_str()),
            ];
            if let Some(f) = &t.columns.topic {
                v.push((FieldRole::Topic, f.as_str()));
            }
            v
        }
        FieldSet::Keys => t
            .columns
            .key
            .iter()
            .map(|f| (FieldRole::Key, f.as_str()))
            .collect(),
    }
}

/// The `fields` of the `_field_caps` request: each field, and its `.keyword` sub-field (the
/// dynamic mapping of a string), so that an error can point at it.
pub fn field_caps_fields(reqs: &[(FieldRole, &str)]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, f) in reqs {
        for name in [f.to_string(), format!("{f}.keyword")] {
            if !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

const NUMERIC: &[&str] = &[
    "long",
    "integer",
    "short",
    "byte",
    "unsigned_long",
    "double",
    "float",
    "half_float",
    "scaled_float",
];
const KEYWORD: &[&str] = &["keyword", "constant_keyword", "wildcard"];
/// Whether `_field_caps` maps `field` as a keyword-like type in every index (an empty
/// string is a value there; on other types it cannot be asked for).
pub(super) fn field_is_string(v: &Value, field: &str) -> bool {
    v.get("fields")
        .and_then(|f| f.get(field))
        .and_then(Value::as_object)
        .is_some_and(|types| {
            !types.is_empty() && types.keys().all(|t| KEYWORD.contains(&t.as_str()))
        })
}

/// Analyzed (full-text) types: a `term` on them compares against tokens, not the value.
const FULL_TEXT: &[&str] = &[
    "text",
    "match_only_text",
    "annotated_text",
    "search_as_you_type",
    "semantic_text",
    "completion",
];
/// Containers: no value of their own to compare.
const CONTAINER: &[&str] = &["object", "nested"];

/// Checks a `_field_caps` answer for the fields of `reqs` (see the module docs): every field
/// exists in the mapping of `index` (in every index of a pattern that maps it, with types
/// fit for its role: numeric offsets, numeric or keyword partitions, keyword topics, no
/// full-text or object key fields) and is searchable. An error names the field, the index
/// and what is wrong.
pub fn check_field_caps(
    v: &Value,
    index: &str,
    reqs: &[(FieldRole, &str)],
) -> Result<(), SinkError> {
    let fields = v.get("fields").and_then(Value::as_object).ok_or_else(|| {
        SinkError::Rejected(format!(
            "field caps of index `{index}`: answer without `fields`"
        ))
    })?;
    for (role, name) in reqs {
        let Some(types) = fields.get(*name).and_then(Value::as_object) else {
            return Err(SinkError::Rejected(format!(
                "field `{name}` ({}) does not exist in the mapping of index `{index}`: no                  document could match, so every record would read as missing; check the                  field name in the audit's match section",
                role.describe()
            )));
        };
        let keyword_sub = fields
            .get(&format!("{name}.keyword"))
            .and_then(Value::as_object)
            .is_some_and(|t| t.keys().any(|k| KEYWORD.contains(&k.as_str())));
        for (ty, caps) in types {
            if ty == "unmapped" {
                // Only with include_unmapped, which is not asked: indices without the field
                // hold no document of the pipeline.
                continue;
            }
            let where_ = listed(caps, "indices").unwrap_or_else(|| format!("in index `{index}`"));
            let ty = ty.as_str();
            let problem = if FULL_TEXT.contains(&ty) {
                Some(format!(
                    "is mapped as `{ty}` (analyzed full text) {where_}: term and range queries                      compare its tokens, not the value, so records would read as missing; map                      it as {}{}",
                    expected(*role),
                    if keyword_sub {
                        format!(" or name its keyword sub-field `{name}.keyword`")
                    } else {
                        String::new()
                    }
                ))
            } else if CONTAINER.contains(&ty) {
                Some(format!(
                    "is an `{ty}` {where_}, not a value; name the leaf field (`{name}.sub`)"
                ))
            } else {
                let fits = match role {
                    FieldRole::Offset => NUMERIC.contains(&ty),
                    FieldRole::Partition => NUMERIC.contains(&ty) || KEYWORD.contains(&ty),
                    FieldRole::Topic => KEYWORD.contains(&ty),
                    FieldRole::Key => true,
                };
                (!fits).then(|| {
                    format!(
                        "is mapped as `{ty}` {where_}; it must be {}",
                        expected(*role)
                    )
                })
            };
            let problem = problem.or_else(|| {
                if caps.get("searchable").and_then(Value::as_bool) == Some(false) {
                    return Some(format!(
                        "is not searchable (`index: false`) {}",
                        listed(caps, "non_searchable_indices").unwrap_or(where_.clone())
                    ));
                }
                if let Some(ix) = listed(caps, "non_searchable_indices") {
                    return Some(format!("is not searchable (`index: false`) {ix}"));
                }
                if *role == FieldRole::Offset {
                    if caps.get("aggregatable").and_then(Value::as_bool) == Some(false) {
                        return Some(format!(
                            "has no doc values {} (the duplicate histogram and the listing's                              sort need them)",
                            listed(caps, "non_aggregatable_indices").unwrap_or(where_.clone())
                        ));
                    }
                    if let Some(ix) = listed(caps, "non_aggregatable_indices") {
                        return Some(format!("has no doc values {ix}"));
                    }
                }
                None
            });
            if let Some(p) = problem {
                return Err(SinkError::Rejected(format!(
                    "field `{name}` ({}) of index `{index}` {p}",
                    role.describe()
                )));
            }
        }
    }
    Ok(())
}

fn expected(role: FieldRole) -> &'static str {
    match role {
        FieldRole::Offset => "a numeric type (`long`)",
        FieldRole::Partition => "a numeric type (`integer`) or `keyword`",
        FieldRole::Topic => "`keyword`",
        FieldRole::Key => "`keyword` (or another exact-value type)",
    }
}

/// `in `a`, `b`` from a list of indices in a field caps entry, if there is one.
fn listed(caps: &Value, key: &str) -> Option<String> {
    let ix: Vec<String> = caps
        .get(key)?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .map(|i| format!("`{i}`"))
        .collect();
    (!ix.is_empty()).then(|| format!("in {}", ix.join(", ")))
}
