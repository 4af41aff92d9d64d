//! Request bodies: offset ranges, counts, listings and key filters.

use super::{COUNT_SPAN, EsTarget};
use crate::ledger::OffsetRun;
use crate::types::{Key, Offset, TopicPartition};
use serde_json::{Map, Value, json};
use std::collections::HashSet;

// ------------------------------------------------------------------------ request bodies

fn obj(k: &str, v: Value) -> Value {
    let mut m = Map::new();
    m.insert(k.to_string(), v);
    Value::Object(m)
}

/// `bool` filter selecting the documents of `tp` whose offset lies in one of `runs`. Only
/// expected offsets are named, so a document at another offset can never stand in for a
/// missing one.
pub fn offsets_query(t: &EsTarget, tp: &TopicPartition, runs: &[OffsetRun]) -> Value {
    let mut filter = vec![obj("term", obj(&t.columns.partition, json!(tp.partition)))];
    if let Some(f) = &t.columns.topic {
        filter.push(obj("term", obj(f, json!(tp.topic))));
    }
    // Short gaps between runs (filtered records) are bridged and their offsets excluded by
    // name, as in the SQL predicate: the same offsets, far fewer range clauses.
    let cover = crate::ledger::runs::cover(&crate::ledger::runs::normalize(runs.to_vec()));
    let should: Vec<Value> = cover
        .spans
        .iter()
        .map(|r| {
            obj(
                "range",
                obj(&t.columns.offset, json!({ "gte": r.first, "lte": r.last })),
            )
        })
        .collect();
    filter.push(json!({ "bool": { "should": should, "minimum_should_match": 1 } }));
    if cover.excluded.is_empty() {
        return json!({ "bool": { "filter": filter } });
    }
    let excluded: Vec<Offset> = cover
        .excluded
        .iter()
        .flat_map(|r| r.first..=r.last)
        .collect();
    json!({ "bool": {
        "filter": filter,
        "must_not": [ obj("terms", obj(&t.columns.offset, json!(excluded))) ],
    } })
}

/// The range count: exact hit total plus the offsets held by two or more documents.
pub fn count_body(t: &EsTarget, tp: &TopicPartition, runs: &[OffsetRun]) -> Value {
    json!({
        "size": 0,
        "track_total_hits": true,
        "query": offsets_query(t, tp, runs),
        "aggs": { "dups": { "histogram": {
            "field": t.columns.offset, "interval": 1, "min_doc_count": 2
        } } },
    })
}

/// The range count of `runs` as searches of at most [`COUNT_SPAN`] offsets each (so at most
/// that many histogram buckets each), sent together in one `_msearch` when there are several.
pub fn count_bodies(t: &EsTarget, tp: &TopicPartition, runs: &[OffsetRun]) -> Vec<Value> {
    chunk_runs(runs, COUNT_SPAN)
        .iter()
        .map(|c| count_body(t, tp, c))
        .collect()
}

/// One listing page: offsets only, ascending, after `after` when given.
pub fn list_body(
    t: &EsTarget,
    tp: &TopicPartition,
    runs: &[OffsetRun],
    after: Option<Offset>,
    size: usize,
) -> Value {
    let mut body = json!({
        "size": size,
        "_source": false,
        "track_total_hits": false,
        "query": offsets_query(t, tp, runs),
        "sort": [ obj(&t.columns.offset, json!("asc")) ],
    });
    if let Some(a) = after {
        body["search_after"] = json!([a]);
    }
    body
}

/// Documents per key: a keyed `filters` aggregation, bucket `i` for `keys[i]`.
pub fn keys_body(fields: &[String], keys: &[&Key]) -> Value {
    keys_body_typed(fields, keys, &[])
}

/// [`keys_body`] knowing which key fields are strings (`strings[i]`; a field not listed is
/// taken for a string). An empty key value (SPEC: empty matches empty) matches a document
/// whose field is `""` or absent (a pipeline writes an empty field either way); on a field
/// that is not a string type only "absent" can be asked (`term ""` on a date is a 400).
pub fn keys_body_typed(fields: &[String], keys: &[&Key], strings: &[bool]) -> Value {
    let is_string = |i: usize| strings.get(i).copied().unwrap_or(true);
    let mut filters = Map::new();
    let mut first: Vec<&str> = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut first_empty = false;
    for (i, k) in keys.iter().enumerate() {
        let terms: Vec<Value> = fields
            .iter()
            .zip(k.values())
            .enumerate()
            .map(|(fi, (f, v))| {
                let missing = json!({ "bool": { "must_not": [ obj("exists", json!({ "field": f })) ] } });
                match (v.is_empty(), is_string(fi)) {
                    (false, _) => obj("term", obj(f, json!(v))),
                    (true, true) => json!({ "bool": { "should": [ obj("term", obj(f, json!(""))), missing ], "minimum_should_match": 1 } }),
                    (true, false) => missing,
                }
            })
            .collect();
        filters.insert(i.to_string(), json!({ "bool": { "filter": terms } }));
        match k.first() {
            Some("") => first_empty = true,
            Some(v) if seen.insert(v) => first.push(v),
            _ => {}
        }
    }
    let pre = match fields.first() {
        Some(f) if !first_empty => {
            json!({ "bool": { "filter": [ obj("terms", obj(f, json!(first))) ] } })
        }
        Some(f) => {
            let mut any = vec![obj("terms", obj(f, json!(first)))];
            if first_empty {
                any.push(
                    json!({ "bool": { "must_not": [ obj("exists", json!({ "field": f })) ] } }),
                );
                if is_string(0) {
                    any.push(obj("term", obj(f, json!(""))));
                }
            }
            json!({ "bool": { "filter": [ { "bool": { "should": any, "minimum_should_match": 1 } } ] } })
        }
        None => json!({ "match_none": {} }),
    };
    json!({
        "size": 0,
        "track_total_hits": false,
        "query": pre,
        "aggs": { "keys": { "filters": { "filters": filters } } },
    })
}

/// Splits runs into groups covering at most `span` offsets each (runs are cut as needed).
pub fn chunk_runs(runs: &[OffsetRun], span: u64) -> Vec<Vec<OffsetRun>> {
    let mut out = Vec::new();
    let mut cur: Vec<OffsetRun> = Vec::new();
    let mut room = span;
    for r in runs {
        let mut first = r.first;
        while first <= r.last {
            let take = (r.last - first + 1).min(room as i64);
            cur.push(OffsetRun::new(first, first + take - 1));
            first += take;
            room -= take as u64;
            if room == 0 {
                out.push(std::mem::take(&mut cur));
                room = span;
            }
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}
