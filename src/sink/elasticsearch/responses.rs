//! Answers: counts, pages, key buckets, `_mget`/`_msearch` and bulk results parsed, with
//! incomplete answers (timed out, failed shards) refused as unknown.

use crate::sink::elasticsearch::errors::{classify_error, describe, prefix};
use crate::sink::{RangeCount, SinkError};
use crate::types::Offset;
use serde_json::Value;

// ------------------------------------------------------------------------ answers

/// An answer that skipped shards or ran out of time is incomplete: unknown, never "missing".
pub(super) fn check_complete(v: &Value) -> Result<(), SinkError> {
    if v.get("timed_out").and_then(Value::as_bool) == Some(true) {
        return Err(SinkError::Unavailable(
            "the search timed out on the server (partial results)".into(),
        ));
    }
    let failed = v.pointer("/_shards/failed").and_then(Value::as_u64);
    if let Some(n) = failed.filter(|n| *n > 0) {
        let total = v
            .pointer("/_shards/total")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let why = v
            .pointer("/_shards/failures/0/reason")
            .map(|r| describe(r).1)
            .unwrap_or_default();
        return Err(SinkError::Unavailable(format!(
            "{n} of {total} shards failed{}",
            if why.is_empty() {
                String::new()
            } else {
                format!(": {why}")
            }
        )));
    }
    Ok(())
}

pub(super) fn total_hits(v: &Value) -> Result<u64, SinkError> {
    let t = v.pointer("/hits/total");
    match t {
        Some(Value::Number(n)) => n.as_u64(),
        Some(t) => {
            if t.get("relation").and_then(Value::as_str).unwrap_or("eq") != "eq" {
                return Err(SinkError::Rejected(
                    "the server gave a lower bound for the hit count, not the count".into(),
                ));
            }
            t.get("value").and_then(Value::as_u64)
        }
        None => None,
    }
    .ok_or_else(|| SinkError::Rejected("answer without hits.total".into()))
}

pub(super) fn hits_of(v: &Value) -> Result<&Vec<Value>, SinkError> {
    v.pointer("/hits/hits")
        .and_then(Value::as_array)
        .ok_or_else(|| SinkError::Rejected("answer without hits.hits".into()))
}

/// Rows and distinct offsets from a [`count_body`] answer.
///
/// [`count_body`]: crate::sink::elasticsearch::requests::count_body
pub fn parse_count(v: &Value) -> Result<RangeCount, SinkError> {
    check_complete(v)?;
    let rows = total_hits(v)?;
    let buckets = v
        .pointer("/aggregations/dups/buckets")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            SinkError::Rejected(
                "the answer lacks the duplicate histogram (aggregations.dups)".into(),
            )
        })?;
    let extra: u64 = buckets
        .iter()
        .filter_map(|b| b.get("doc_count").and_then(Value::as_u64))
        .map(|n| n.saturating_sub(1))
        .sum();
    Ok(RangeCount {
        rows,
        distinct: rows.saturating_sub(extra),
    })
}

/// The offsets of a listing page, in order (from each hit's `sort` value).
pub fn parse_page(v: &Value) -> Result<Vec<Offset>, SinkError> {
    check_complete(v)?;
    hits_of(v)?
        .iter()
        .map(|h| {
            h.pointer("/sort/0")
                .and_then(|s| s.as_i64().or_else(|| s.as_f64().map(|f| f as i64)))
                .ok_or_else(|| SinkError::Rejected("a listed hit has no numeric sort value".into()))
        })
        .collect()
}

/// What to do after a listing page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Page {
    /// Fewer hits than the page size: everything is listed.
    Last,
    /// Keep the first `keep` hits; continue with `search_after: [resume_after]`, which starts
    /// again at the dropped last offset.
    More {
        /// Hits to count from this page.
        keep: usize,
        /// The next page's `search_after` value.
        resume_after: Offset,
    },
    /// A full page of one offset: count it exactly, continue after it.
    AllOneOffset(Offset),
}

/// Decides the paging step (see the module docs: no tiebreaker needed).
pub fn next_page(offsets: &[Offset], page_size: usize) -> Page {
    if offsets.len() < page_size {
        return Page::Last;
    }
    let last = offsets[offsets.len() - 1];
    let keep = offsets.iter().position(|o| *o == last).unwrap_or(0);
    if keep == 0 {
        Page::AllOneOffset(last)
    } else {
        Page::More {
            keep,
            resume_after: last - 1,
        }
    }
}

pub(super) fn push_counts(out: &mut Vec<(Offset, u64)>, sorted: &[Offset]) {
    for o in sorted {
        match out.last_mut() {
            Some((last, n)) if last == o => *n += 1,
            _ => out.push((*o, 1)),
        }
    }
}

/// Documents per key from a [`keys_body`] answer with `n` keys.
///
/// [`keys_body`]: crate::sink::elasticsearch::requests::keys_body
pub fn parse_keys(v: &Value, n: usize) -> Result<Vec<u64>, SinkError> {
    check_complete(v)?;
    let buckets = v
        .pointer("/aggregations/keys/buckets")
        .ok_or_else(|| SinkError::Rejected("the answer lacks aggregations.keys".into()))?;
    (0..n)
        .map(|i| {
            let b = match buckets {
                Value::Object(m) => m.get(&i.to_string()),
                Value::Array(a) => a.get(i),
                _ => None,
            };
            b.and_then(|b| b.get("doc_count"))
                .and_then(Value::as_u64)
                .ok_or_else(|| SinkError::Rejected(format!("no count for key {i}")))
        })
        .collect()
}

/// Found flags from an `_mget` answer, in request order. A per-document error is the
/// answer's error: the index is missing, or a shard cannot be read.
pub fn parse_mget(v: &Value, ids: &[&str]) -> Result<Vec<bool>, SinkError> {
    let docs = v
        .get("docs")
        .and_then(Value::as_array)
        .ok_or_else(|| SinkError::Rejected("mget: answer without docs".into()))?;
    if docs.len() != ids.len() {
        return Err(SinkError::Rejected(format!(
            "mget: {} docs for {} ids",
            docs.len(),
            ids.len()
        )));
    }
    docs.iter()
        .zip(ids)
        .map(|(d, id)| {
            if let Some(e) = d.get("error") {
                return Err(prefix("mget", classify_error(None, e)));
            }
            if d.get("_id")
                .and_then(Value::as_str)
                .is_some_and(|got| got != *id)
            {
                return Err(SinkError::Rejected(format!(
                    "mget: answers out of order (asked {id})"
                )));
            }
            d.get("found")
                .and_then(Value::as_bool)
                .ok_or_else(|| SinkError::Rejected("mget: doc without `found`".into()))
        })
        .collect()
}

/// The answers of an `_msearch`, in order; one failed search fails the whole answer.
pub fn parse_msearch(v: &Value, n: usize) -> Result<Vec<Value>, SinkError> {
    let rs = v
        .get("responses")
        .and_then(Value::as_array)
        .ok_or_else(|| SinkError::Rejected("msearch: answer without responses".into()))?;
    if rs.len() != n {
        return Err(SinkError::Rejected(format!(
            "msearch: {} responses for {n} searches",
            rs.len()
        )));
    }
    for r in rs {
        if let Some(e) = r.get("error") {
            let status = r.get("status").and_then(Value::as_u64).map(|s| s as u16);
            return Err(classify_error(status, e));
        }
    }
    Ok(rs.clone())
}

/// One failed item of a `_bulk` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BulkItemError {
    /// `index`, `create`, `update` or `delete`.
    pub action: String,
    /// The document id.
    pub id: String,
    /// The item's HTTP status.
    pub status: u16,
    /// Elasticsearch's error type.
    pub kind: String,
    /// Its reason.
    pub reason: String,
}

/// The failed items of a `_bulk` answer. A bulk request answers 200 even when items fail
/// (`errors: true`): a writer (the test pipeline stand-in, `replay --to-sink`) must read
/// every item.
pub fn bulk_item_errors(v: &Value) -> Vec<BulkItemError> {
    let Some(items) = v.get("items").and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for item in items {
        let Some((action, r)) = item.as_object().and_then(|m| m.iter().next()) else {
            continue;
        };
        if let Some(e) = r.get("error") {
            let (kind, reason) = describe(e);
            out.push(BulkItemError {
                action: action.clone(),
                id: r.get("_id").and_then(Value::as_str).unwrap_or("").into(),
                status: r.get("status").and_then(Value::as_u64).unwrap_or(0) as u16,
                kind,
                reason,
            });
        }
    }
    out
}

/// What `_bulk` did with one `create` item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BulkCreate {
    /// Written (201).
    Created,
    /// A document with this id already exists (409 `version_conflict_engine_exception`).
    Exists,
    /// Refused: the item's status, error type and reason.
    Failed(String),
}

/// Per-item outcomes of a `_bulk` of `create` actions, aligned with the request.
pub fn parse_bulk_create(v: &Value, n: usize) -> Result<Vec<BulkCreate>, SinkError> {
    let items = v
        .get("items")
        .and_then(Value::as_array)
        .ok_or_else(|| SinkError::Rejected("answer without `items`".into()))?;
    if items.len() != n {
        return Err(SinkError::Rejected(format!(
            "{} items answered for {n} documents",
            items.len()
        )));
    }
    Ok(items
        .iter()
        .map(|item| {
            let r = item
                .as_object()
                .and_then(|m| m.values().next())
                .unwrap_or(&Value::Null);
            let status = r.get("status").and_then(Value::as_u64).unwrap_or(0);
            match (status, r.get("error")) {
                (200..=299, None) => BulkCreate::Created,
                (409, _) => BulkCreate::Exists,
                (_, e) => {
                    let (kind, reason) = e.map(describe).unwrap_or_default();
                    BulkCreate::Failed(format!("HTTP {status} {kind}: {reason}"))
                }
            }
        })
        .collect())
}
