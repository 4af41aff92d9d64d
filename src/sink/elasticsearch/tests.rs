//! Request bodies checked against the documented request shapes, and answers parsed from
//! fixtures copied from Elasticsearch's documentation (reference pages for bulk, multi get,
//! count, search_after paging and errors; 8.x shapes, `_type` dropped where 8.x drops it).

use super::*;
use crate::config::SinkColumns;
use crate::sink::RangeCount;
use crate::sink::elasticsearch::responses::push_counts;

fn target() -> EsTarget {
    EsTarget {
        index: "dns_logs".into(),
        columns: SinkColumns {
            partition: "partition".into(),
            offset: "offset".into(),
            topic: Some("topic".into()),
            key: vec!["client_ip".into(), "time".into()],
        },
    }
}

fn tp() -> TopicPartition {
    TopicPartition::new("dns", 3)
}

fn j(s: &str) -> Value {
    serde_json::from_str(s).expect("fixture is JSON")
}

#[test]
fn range_count_request() {
    let b = count_body(
        &target(),
        &tp(),
        &[OffsetRun::new(0, 9), OffsetRun::new(20, 20)],
    );
    assert_eq!(
        b,
        j(r#"{
          "size": 0,
          "track_total_hits": true,
          "query": { "bool": { "filter": [
            { "term": { "partition": 3 } },
            { "term": { "topic": "dns" } },
            { "bool": { "should": [
                { "range": { "offset": { "gte": 0, "lte": 9 } } },
                { "range": { "offset": { "gte": 20, "lte": 20 } } }
              ], "minimum_should_match": 1 } }
          ] } },
          "aggs": { "dups": { "histogram": { "field": "offset", "interval": 1, "min_doc_count": 2 } } }
        }"#)
    );
    // Never `cardinality` (approximate), never `from`.
    let text = b.to_string();
    assert!(!text.contains("cardinality") && !text.contains("\"from\""));
}

/// Filtered records between expected ones: one range, their offsets excluded with a
/// `terms` query in `must_not` (the documented bool query clauses), so a document at a
/// filtered offset is never counted.
#[test]
fn filtered_offsets_between_runs_are_excluded_by_terms() {
    let b = count_body(
        &target(),
        &tp(),
        &[
            OffsetRun::new(0, 0),
            OffsetRun::new(2, 2),
            OffsetRun::new(5, 6),
        ],
    );
    assert_eq!(
        b["query"],
        j(r#"{ "bool": {
          "filter": [
            { "term": { "partition": 3 } },
            { "term": { "topic": "dns" } },
            { "bool": { "should": [
                { "range": { "offset": { "gte": 0, "lte": 6 } } }
              ], "minimum_should_match": 1 } }
          ],
          "must_not": [ { "terms": { "offset": [1, 3, 4] } } ]
        } }"#)
    );
}

#[test]
fn range_count_answer_counts_duplicates_apart() {
    // Search response shape of the reference (hits.total with relation, _shards), with the
    // histogram buckets of the documented histogram aggregation response.
    let a = j(r#"{
      "took": 5, "timed_out": false,
      "_shards": { "total": 1, "successful": 1, "skipped": 0, "failed": 0 },
      "hits": { "total": { "value": 11, "relation": "eq" }, "max_score": null, "hits": [] },
      "aggregations": { "dups": { "buckets": [ { "key": 4.0, "doc_count": 3 } ] } }
    }"#);
    assert_eq!(
        parse_count(&a).expect("ok"),
        RangeCount {
            rows: 11,
            distinct: 9
        }
    );
    // A lower bound is not a count.
    let gte = j(
        r#"{"_shards":{"total":1,"failed":0},"hits":{"total":{"value":10000,"relation":"gte"},"hits":[]},
                  "aggregations":{"dups":{"buckets":[]}}}"#,
    );
    assert!(matches!(parse_count(&gte), Err(SinkError::Rejected(_))));
}

#[test]
fn partial_answers_are_unknown() {
    // Shard failure section as in the reference's search response docs.
    let a = j(r#"{
      "took": 1, "timed_out": false,
      "_shards": { "total": 5, "successful": 4, "skipped": 0, "failed": 1,
        "failures": [ { "shard": 0, "index": "dns_logs", "node": "n1",
          "reason": { "type": "node_not_connected_exception", "reason": "[n1] Node not connected" } } ] },
      "hits": { "total": { "value": 8, "relation": "eq" }, "hits": [] },
      "aggregations": { "dups": { "buckets": [] } }
    }"#);
    let e = parse_count(&a).expect_err("partial");
    assert!(
        matches!(&e, SinkError::Unavailable(m) if m.contains("1 of 5 shards failed")),
        "{e}"
    );
    let t = j(
        r#"{"timed_out": true, "_shards": {"total":1,"failed":0}, "hits": {"total": {"value": 0, "relation": "eq"}, "hits": []}}"#,
    );
    assert!(matches!(parse_count(&t), Err(SinkError::Unavailable(_))));
}

#[test]
fn listing_request_uses_search_after_never_from() {
    let b = list_body(&target(), &tp(), &[OffsetRun::new(5, 9)], Some(6), 3);
    assert_eq!(b["size"], 3);
    assert_eq!(b["_source"], false);
    assert_eq!(b["sort"], j(r#"[{"offset":"asc"}]"#));
    assert_eq!(b["search_after"], j("[6]"));
    assert!(b.get("from").is_none());
    assert!(
        list_body(&target(), &tp(), &[OffsetRun::new(5, 9)], None, 3)
            .get("search_after")
            .is_none()
    );
}

#[test]
fn listing_page_from_documented_search_after_answer() {
    // The paginate-search-results example answer: each hit carries its `sort` values.
    let a = j(r#"{
      "took": 17, "timed_out": false,
      "_shards": { "total": 1, "successful": 1, "skipped": 0, "failed": 0 },
      "hits": { "total": { "value": 3, "relation": "eq" }, "max_score": null, "hits": [
        { "_index": "my-index-000001", "_id": "FaslK3QBySSL_rrj9zM5", "_score": null, "sort": [ 4098435132000 ] },
        { "_index": "my-index-000001", "_id": "FqslK3QBySSL_rrj9zM5", "_score": null, "sort": [ 4098435132000 ] },
        { "_index": "my-index-000001", "_id": "F6slK3QBySSL_rrj9zM5", "_score": null, "sort": [ 4098435132001 ] }
      ] }
    }"#);
    assert_eq!(
        parse_page(&a).expect("ok"),
        vec![4098435132000, 4098435132000, 4098435132001]
    );
}

#[test]
fn paging_never_splits_an_offset_across_pages() {
    assert_eq!(next_page(&[1, 2], 3), Page::Last);
    // Full page: keep 1,2,2 and start again at 5 (search_after 4).
    assert_eq!(
        next_page(&[1, 2, 2, 5], 4),
        Page::More {
            keep: 3,
            resume_after: 4
        }
    );
    assert_eq!(next_page(&[7, 7, 7], 3), Page::AllOneOffset(7));
    let mut out = Vec::new();
    push_counts(&mut out, &[1, 2, 2]);
    push_counts(&mut out, &[2, 5]);
    assert_eq!(out, vec![(1, 1), (2, 3), (5, 1)]);
}

#[test]
fn key_count_request_and_answer() {
    let k1 = Key::new(["10.0.0.1", "12:00"]);
    let k2 = Key::new(["10.0.0.1", "12:01\"; DROP"]);
    let b = keys_body(&target().columns.key, &[&k1, &k2]);
    assert_eq!(
        b["query"],
        j(r#"{"bool":{"filter":[{"terms":{"client_ip":["10.0.0.1"]}}]}}"#)
    );
    assert_eq!(
        b["aggs"]["keys"]["filters"]["filters"]["1"],
        j(
            r#"{"bool":{"filter":[{"term":{"client_ip":"10.0.0.1"}},{"term":{"time":"12:01\"; DROP"}}]}}"#
        )
    );
    // The documented keyed `filters` aggregation answer.
    let a = j(r#"{
      "took": 9, "timed_out": false,
      "_shards": { "total": 1, "successful": 1, "skipped": 0, "failed": 0 },
      "hits": { "total": { "value": 3, "relation": "eq" }, "max_score": null, "hits": [] },
      "aggregations": { "keys": { "buckets": { "0": { "doc_count": 1 }, "1": { "doc_count": 2 } } } }
    }"#);
    assert_eq!(parse_keys(&a, 2).expect("ok"), vec![1, 2]);
    assert!(
        parse_keys(&a, 3).is_err(),
        "a key without its bucket is an error"
    );
}

#[test]
fn chunks_cover_runs_exactly() {
    let c = chunk_runs(&[OffsetRun::new(0, 4), OffsetRun::new(10, 12)], 3);
    assert_eq!(
        c,
        vec![
            vec![OffsetRun::new(0, 2)],
            vec![OffsetRun::new(3, 4), OffsetRun::new(10, 10)],
            vec![OffsetRun::new(11, 12)],
        ]
    );
    assert_eq!(chunk_runs(&[OffsetRun::new(0, 99)], COUNT_SPAN).len(), 1);
}

#[test]
fn mget_found_and_missing() {
    // The multi get example of the reference (and the guide's "second document does not
    // exist" answer), 8.x shape: a missing document is `found: false`, not an error.
    let a = j(r#"{
      "docs": [
        { "_index": "twitter", "_id": "1", "_version": 1, "_seq_no": 0, "_primary_term": 1, "found": true },
        { "_index": "twitter", "_id": "2", "found": false }
      ]
    }"#);
    assert_eq!(parse_mget(&a, &["1", "2"]).expect("ok"), vec![true, false]);
    assert!(parse_mget(&a, &["1"]).is_err());
    assert!(
        parse_mget(&a, &["1", "3"]).is_err(),
        "answers must match the ids asked"
    );
}

#[test]
fn mget_on_a_missing_index_is_an_error_not_missing_documents() {
    // Per-document error, as _mget answers when the index does not exist.
    let a = j(r#"{ "docs": [ { "_index": "nope", "_id": "1", "error": {
        "root_cause": [ { "type": "index_not_found_exception", "reason": "no such index [nope]",
          "resource.type": "index_or_alias", "resource.id": "nope", "index_uuid": "_na_", "index": "nope" } ],
        "type": "index_not_found_exception", "reason": "no such index [nope]",
        "resource.type": "index_or_alias", "resource.id": "nope", "index_uuid": "_na_", "index": "nope" } } ] }"#);
    let e = parse_mget(&a, &["1"]).expect_err("error");
    assert!(
        matches!(&e, SinkError::Rejected(m) if m.contains("index not found") && m.contains("no such index [nope]")),
        "{e}"
    );
}

#[test]
fn mget_request_shape() {
    // GET /twitter/_mget { "ids" : ["1", "2"] } — the documented short form.
    let ids = ["1", "2"];
    assert_eq!(json!({ "ids": ids }), j(r#"{ "ids" : ["1", "2"] }"#));
}

#[test]
fn bulk_item_errors_in_a_200_answer() {
    // The reference's "Example with failed actions".
    let a = j(r#"{
      "took": 486,
      "errors": true,
      "items": [
        { "update": { "_index": "index1", "_id": "5", "status": 404,
            "error": { "type": "document_missing_exception", "reason": "[5]: document missing",
                       "index_uuid": "aAsFqTI0Tc2W0LCWgPNrOA", "shard": "0", "index": "index1" } } },
        { "update": { "_index": "index1", "_id": "6", "status": 404,
            "error": { "type": "document_missing_exception", "reason": "[6]: document missing",
                       "index_uuid": "aAsFqTI0Tc2W0LCWgPNrOA", "shard": "0", "index": "index1" } } },
        { "create": { "_index": "index1", "_id": "7", "_version": 1, "result": "created",
            "_shards": { "total": 2, "successful": 1, "failed": 0 },
            "_seq_no": 0, "_primary_term": 1, "status": 201 } }
      ]
    }"#);
    let e = bulk_item_errors(&a);
    assert_eq!(e.len(), 2);
    assert_eq!(
        e[0],
        BulkItemError {
            action: "update".into(),
            id: "5".into(),
            status: 404,
            kind: "document_missing_exception".into(),
            reason: "[5]: document missing".into(),
        }
    );
    assert!(
        bulk_item_errors(&j(
            r#"{"took":30,"errors":false,"items":[{"index":{"_id":"1","status":201}}]}"#
        ))
        .is_empty()
    );
}

#[test]
fn too_many_requests_is_transient() {
    // 429 with the rejected-execution body Elasticsearch documents for full thread pools.
    let body = br#"{"error":{"root_cause":[{"type":"es_rejected_execution_exception","reason":"rejected execution of coordinating operation [shard_detail=[dns_logs][0][C], shard_coordinating_and_primary_bytes=0, shard_operation_bytes=98615 max_coordinating_and_primary_bytes=1503238553]"}],"type":"es_rejected_execution_exception","reason":"rejected execution of coordinating operation [shard_detail=[dns_logs][0][C], shard_coordinating_and_primary_bytes=0, shard_operation_bytes=98615 max_coordinating_and_primary_bytes=1503238553]"},"status":429}"#;
    let e = classify(429, body);
    assert!(
        matches!(&e, SinkError::Unavailable(m) if m.starts_with("HTTP 429 es_rejected_execution_exception")),
        "{e}"
    );
    for s in [500, 502, 503, 504, 408] {
        assert!(matches!(
            classify(s, b"<html>Bad Gateway</html>"),
            SinkError::Unavailable(_)
        ));
    }
}

#[test]
fn index_not_found_is_a_clear_permanent_error() {
    // The documented 404 answer for a missing index.
    let body = br#"{
      "error": {
        "root_cause": [ { "type": "index_not_found_exception", "reason": "no such index [dns_logs]",
          "resource.type": "index_or_alias", "resource.id": "dns_logs", "index_uuid": "_na_", "index": "dns_logs" } ],
        "type": "index_not_found_exception", "reason": "no such index [dns_logs]",
        "resource.type": "index_or_alias", "resource.id": "dns_logs", "index_uuid": "_na_", "index": "dns_logs"
      },
      "status": 404
    }"#;
    let e = classify(404, body);
    assert_eq!(
        e.to_string(),
        "sink rejected the query: index not found (index_not_found_exception: no such index \
         [dns_logs]): check sink.index; nothing is declared missing while it does not exist"
    );
}

#[test]
fn other_client_errors_name_type_and_root_cause() {
    let body = br#"{"error":{"root_cause":[{"type":"query_shard_exception","reason":"No mapping found for [offset] in order to sort on"}],"type":"search_phase_execution_exception","reason":"all shards failed","phase":"query","grouped":true},"status":400}"#;
    let e = classify(400, body);
    assert_eq!(
        e.to_string(),
        "sink rejected the query: HTTP 400 search_phase_execution_exception: all shards failed \
         (caused by query_shard_exception: No mapping found for [offset] in order to sort on)"
    );
    let auth = br#"{"error":{"root_cause":[{"type":"security_exception","reason":"unable to authenticate user [elastic] for REST request [/_count]"}],"type":"security_exception","reason":"unable to authenticate user [elastic] for REST request [/_count]"},"status":401}"#;
    assert!(
        matches!(classify(401, auth), SinkError::Rejected(m) if m.contains("authentication failed"))
    );
    // A 503 search failure (no shard copy available) is transient.
    let busy = br#"{"error":{"type":"search_phase_execution_exception","reason":"all shards failed"},"status":503}"#;
    assert!(matches!(classify(503, busy), SinkError::Unavailable(_)));
}

#[test]
fn msearch_answers_in_order_and_item_errors() {
    let ok = j(r#"{"took":1,"responses":[
        {"_shards":{"total":1,"failed":0},"hits":{"total":{"value":1,"relation":"eq"},"hits":[]},"status":200},
        {"_shards":{"total":1,"failed":0},"hits":{"total":{"value":2,"relation":"eq"},"hits":[]},"status":200}]}"#);
    assert_eq!(parse_msearch(&ok, 2).expect("ok").len(), 2);
    let bad = j(
        r#"{"responses":[{"error":{"type":"es_rejected_execution_exception","reason":"queue full"},"status":429}]}"#,
    );
    assert!(matches!(
        parse_msearch(&bad, 1),
        Err(SinkError::Unavailable(_))
    ));
}

#[test]
fn credentials_never_reach_debug_output() {
    let a = EsAuth::Basic {
        username: "elastic".into(),
        password: "hunter2".into(),
    };
    assert!(!format!("{a:?}").contains("hunter2"));
    assert!(!format!("{:?}", EsAuth::ApiKey("c2VjcmV0".into())).contains("c2VjcmV0"));
    let e = ElasticsearchSink::new(
        "http://elastic:hunter2@127.0.0.1:9200",
        EsAuth::None,
        None,
        target(),
        Duration::from_secs(1),
    )
    .err()
    .expect("refused");
    assert!(!e.to_string().contains("hunter2"));
}

#[test]
fn bulk_create_items_created_existing_and_failed() {
    // Shape of Elasticsearch 8's documented `_bulk` answer with `create` actions.
    let v = j(r#"{"took":3,"errors":true,"items":[
        {"create":{"_index":"i","_id":"a","_version":1,"result":"created","status":201}},
        {"create":{"_index":"i","_id":"b","status":409,"error":{"type":"version_conflict_engine_exception","reason":"[b]: version conflict, document already exists (current version [1])"}}},
        {"create":{"_index":"i","_id":"c","status":400,"error":{"type":"document_parsing_exception","reason":"failed to parse field [offset]"}}}
    ]}"#);
    let got = parse_bulk_create(&v, 3).expect("parsed");
    assert_eq!(got[0], BulkCreate::Created);
    assert_eq!(got[1], BulkCreate::Exists);
    assert!(
        matches!(&got[2], BulkCreate::Failed(m) if m.contains("400") && m.contains("failed to parse")),
        "{got:?}"
    );
    assert!(parse_bulk_create(&v, 2).is_err(), "misaligned answer");
}

/// Every search of a range count holds at most 65,535 offsets, hence at most 65,535
/// histogram buckets: within `search.max_buckets` of Elasticsearch 7.x and OpenSearch
/// (65,535), not only of 8.x (65,536); and the pieces cover the runs exactly.
#[test]
fn range_count_requests_fit_the_smallest_default_max_buckets() {
    fn offsets_of(body: &Value) -> Vec<(i64, i64)> {
        body.pointer("/query/bool/filter/2/bool/should")
            .and_then(Value::as_array)
            .expect("the runs' should clause")
            .iter()
            .map(|r| {
                let g = &r["range"]["offset"];
                (
                    g["gte"].as_i64().expect("gte"),
                    g["lte"].as_i64().expect("lte"),
                )
            })
            .collect()
    }
    let cases: Vec<Vec<OffsetRun>> = vec![
        vec![OffsetRun::new(0, 65_534)],
        vec![OffsetRun::new(0, 65_535)],
        vec![OffsetRun::new(10, 200_009)],
        vec![
            OffsetRun::new(0, 40_000),
            OffsetRun::new(50_000, 90_000),
            OffsetRun::new(1 << 40, (1 << 40) + 70_000),
        ],
    ];
    for runs in cases {
        let bodies = count_bodies(&target(), &tp(), &runs);
        let want: u64 = runs.iter().map(|r| (r.last - r.first + 1) as u64).sum();
        assert_eq!(bodies.len() as u64, want.div_ceil(65_535), "{runs:?}");
        let mut covered: Vec<(i64, i64)> = Vec::new();
        for b in &bodies {
            let span: i64 = offsets_of(b).iter().map(|(a, z)| z - a + 1).sum();
            assert!(
                span <= 65_535,
                "one search covers {span} offsets (buckets): {runs:?}"
            );
            // The duplicate histogram is the only bucket aggregation.
            assert_eq!(b["aggs"]["dups"]["histogram"]["interval"], 1);
            covered.extend(offsets_of(b));
        }
        // Exactly the runs, in order, cut where needed.
        let mut merged: Vec<(i64, i64)> = Vec::new();
        for (a, z) in covered {
            match merged.last_mut() {
                Some((_, last)) if *last + 1 == a => *last = z,
                _ => merged.push((a, z)),
            }
        }
        let want_runs: Vec<(i64, i64)> = runs.iter().map(|r| (r.first, r.last)).collect();
        assert_eq!(merged, want_runs);
    }
    assert_eq!(
        count_bodies(&target(), &tp(), &[OffsetRun::new(0, 65_534)]).len(),
        1
    );
    assert_eq!(
        count_bodies(&target(), &tp(), &[OffsetRun::new(0, 65_535)]).len(),
        2
    );
}

/// The field caps response of Elasticsearch's documentation (`GET _field_caps?fields=
/// rating,title`): `rating` is `long` in two indices and `keyword` in two others, `title`
/// is `text`.
fn documented_field_caps() -> Value {
    j(r#"{
      "indices": [ "index1", "index2", "index3", "index4", "index5" ],
      "fields": {
        "rating": {
          "long": {
            "metadata_field": false, "searchable": true, "aggregatable": false,
            "indices": [ "index1", "index2" ],
            "non_aggregatable_indices": [ "index1" ]
          },
          "keyword": {
            "metadata_field": false, "searchable": false, "aggregatable": true,
            "indices": [ "index3", "index4" ],
            "non_searchable_indices": [ "index4" ]
          }
        },
        "title": {
          "text": { "metadata_field": false, "searchable": true, "aggregatable": false }
        }
      }
    }"#)
}

fn rejected(r: Result<(), SinkError>) -> String {
    match r {
        Err(SinkError::Rejected(m)) => m,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

#[test]
fn field_caps_request_names_each_field_and_its_keyword_sub_field() {
    let t = target();
    let reqs = field_requirements(&t, FieldSet::Offsets);
    assert_eq!(
        reqs,
        vec![
            (FieldRole::Partition, "partition"),
            (FieldRole::Offset, "offset"),
            (FieldRole::Topic, "topic"),
        ]
    );
    assert_eq!(
        field_caps_fields(&reqs),
        [
            "partition",
            "partition.keyword",
            "offset",
            "offset.keyword",
            "topic",
            "topic.keyword"
        ]
    );
    assert_eq!(
        field_requirements(&t, FieldSet::Keys),
        vec![(FieldRole::Key, "client_ip"), (FieldRole::Key, "time")]
    );
}

#[test]
fn a_field_missing_from_the_mapping_is_rejected_not_zero_found() {
    let caps = documented_field_caps();
    let m = rejected(check_field_caps(
        &caps,
        "dns_logs",
        &[(FieldRole::Key, "title_raw")],
    ));
    assert!(
        m.contains("`title_raw`") && m.contains("does not exist"),
        "{m}"
    );
    assert!(m.contains("`dns_logs`"), "names the index: {m}");
    assert!(m.contains("key field"), "names the role: {m}");
    // An empty answer (`fields: {}`) too.
    let m = rejected(check_field_caps(
        &j(r#"{"indices":["dns_logs"],"fields":{}}"#),
        "dns_logs",
        &[(FieldRole::Offset, "kafka_offst")],
    ));
    assert!(
        m.contains("`kafka_offst`") && m.contains("offset_column"),
        "{m}"
    );
    // An answer that is not a field caps answer is no pass either.
    assert!(check_field_caps(&j("{}"), "dns_logs", &[(FieldRole::Key, "a")]).is_err());
}

#[test]
fn a_text_field_is_rejected_with_its_keyword_sub_field_suggested() {
    let m = rejected(check_field_caps(
        &documented_field_caps(),
        "idx",
        &[(FieldRole::Key, "title")],
    ));
    assert!(
        m.contains("`title`") && m.contains("`text`") && m.contains("`idx`"),
        "{m}"
    );
    // The dynamic mapping of a string: `text` with a `keyword` sub-field.
    let dynamic = j(r#"{"indices":["idx"],"fields":{
        "topic":{"text":{"type":"text","metadata_field":false,"searchable":true,"aggregatable":false}},
        "topic.keyword":{"keyword":{"type":"keyword","metadata_field":false,"searchable":true,"aggregatable":true}}}}"#);
    let m = rejected(check_field_caps(
        &dynamic,
        "idx",
        &[(FieldRole::Topic, "topic")],
    ));
    assert!(m.contains("`topic.keyword`"), "suggests the sub-field: {m}");
    // That sub-field itself passes.
    check_field_caps(&dynamic, "idx", &[(FieldRole::Topic, "topic.keyword")]).expect("keyword");
}

#[test]
fn conflicting_or_unfit_types_name_the_indices() {
    let caps = documented_field_caps();
    // As the offset: `keyword` in index3/index4 (and no doc values in index1).
    let m = rejected(check_field_caps(
        &caps,
        "index*",
        &[(FieldRole::Offset, "rating")],
    ));
    assert!(m.contains("`rating`") && m.contains("`index*`"), "{m}");
    assert!(
        m.contains("index1") || m.contains("index3"),
        "names the indices: {m}"
    );
    // As a key: `keyword` is fine, but index4 cannot search it.
    let m = rejected(check_field_caps(
        &caps,
        "index*",
        &[(FieldRole::Key, "rating")],
    ));
    assert!(m.contains("searchable") && m.contains("index4"), "{m}");
    // A keyword offset, an object key field.
    let odd = j(r#"{"indices":["i"],"fields":{
        "offset":{"keyword":{"type":"keyword","searchable":true,"aggregatable":true}},
        "ip":{"object":{"type":"object","searchable":false,"aggregatable":false}}}}"#);
    let m = rejected(check_field_caps(
        &odd,
        "i",
        &[(FieldRole::Offset, "offset")],
    ));
    assert!(m.contains("`keyword`") && m.contains("numeric"), "{m}");
    let m = rejected(check_field_caps(&odd, "i", &[(FieldRole::Key, "ip")]));
    assert!(m.contains("`object`"), "{m}");
}

#[test]
fn a_fitting_mapping_passes() {
    // As Elasticsearch and OpenSearch answer for the test index (integer, long, keyword).
    let caps = j(r#"{"indices":["dns"],"fields":{
        "partition":{"integer":{"type":"integer","metadata_field":false,"searchable":true,"aggregatable":true}},
        "offset":{"long":{"type":"long","metadata_field":false,"searchable":true,"aggregatable":true}},
        "topic":{"keyword":{"type":"keyword","metadata_field":false,"searchable":true,"aggregatable":true}},
        "client_ip":{"keyword":{"type":"keyword","metadata_field":false,"searchable":true,"aggregatable":true}},
        "time":{"date":{"type":"date","metadata_field":false,"searchable":true,"aggregatable":true}}}}"#);
    let t = target();
    check_field_caps(&caps, "dns", &field_requirements(&t, FieldSet::Offsets)).expect("offsets");
    check_field_caps(&caps, "dns", &field_requirements(&t, FieldSet::Keys)).expect("keys");
    // A keyword partition is fine too (a `term` on "3" matches).
    let kw = j(
        r#"{"fields":{"partition":{"keyword":{"type":"keyword","searchable":true,"aggregatable":true}}}}"#,
    );
    check_field_caps(&kw, "dns", &[(FieldRole::Partition, "partition")])
        .expect("keyword partition");
}

/// `GET index/_mapping/field/...?include_defaults=true` (shape of the get-field-mapping
/// reference page and of OpenSearch 2.19's answer: one entry per index, the mapping keyed by
/// the field's leaf name, `"normalizer": "default"` for none; an index that does not map a
/// field lists nothing for it).
const FIELD_MAPPINGS: &str = r#"{
  "logs-a": { "mappings": {
    "domain.keyword": { "full_name": "domain.keyword",
      "mapping": { "keyword": { "type": "keyword", "ignore_above": 256,
                                "normalizer": "default" } } },
    "client_ip": { "full_name": "client_ip",
      "mapping": { "client_ip": { "type": "keyword", "ignore_above": 2147483647,
                                  "normalizer": "lowercase" } } }
  } },
  "logs-b": { "mappings": {
    "domain.keyword": { "full_name": "domain.keyword",
      "mapping": { "keyword": { "type": "keyword", "ignore_above": 1024 } } },
    "client_ip": { "full_name": "client_ip",
      "mapping": { "client_ip": { "type": "keyword", "normalizer": "lowercase" } } },
    "n": { "full_name": "n", "mapping": { "n": { "type": "long" } } }
  } },
  "logs-c": { "mappings": {} }
}"#;

fn key_fields(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

#[test]
fn key_field_mappings_take_the_smallest_ignore_above_and_say_so() {
    let fields = key_fields(&["domain.keyword", "client_ip", "n", "later.keyword", "later"]);
    let m = parse_field_mappings(&j(FIELD_MAPPINGS), &fields);
    assert_eq!(m[0].indices.len(), 2, "logs-c does not map it");
    assert_eq!(m[0].indices["logs-a"].ignore_above, Some(256));
    // The server's "unlimited" (and a missing ignore_above) is no limit.
    assert_eq!(m[1].indices["logs-a"].ignore_above, None);
    assert_eq!(m[1].indices["logs-b"].ignore_above, None);
    let (d, notes) = key_domain_of(&m);
    let ty = |i: usize| d.columns[i].ty;
    use crate::key_domain::ColumnType;
    assert_eq!(
        ty(0),
        ColumnType::Keyword {
            ignore_above: Some(256),
            lowercase: false
        }
    );
    assert_eq!(d.columns[0].declared, "keyword, ignore_above 256");
    assert!(
        notes.iter().any(|n| n.contains("`domain.keyword`")
            && n.contains("256 in `logs-a`")
            && n.contains("1024 in `logs-b`")),
        "{notes:?}"
    );
    // lowercase on every index that maps it: converted.
    assert_eq!(
        ty(1),
        ColumnType::Keyword {
            ignore_above: None,
            lowercase: true
        }
    );
    // A long field converts nothing.
    assert_eq!(ty(2), ColumnType::Other);
    // Not mapped anywhere yet: the dynamic defaults, said.
    assert_eq!(
        ty(3),
        ColumnType::Keyword {
            ignore_above: Some(DYNAMIC_IGNORE_ABOVE),
            lowercase: false
        }
    );
    assert_eq!(
        ty(4),
        ColumnType::Keyword {
            ignore_above: None,
            lowercase: false
        }
    );
    assert!(
        notes
            .iter()
            .any(|n| n.contains("`later.keyword` is not mapped"))
    );
    // A 300-character domain is unverifiable; the rest pass.
    let long = "d".repeat(300);
    let k = crate::types::Key::new(["x", "ABC", "1", "y", "z"]);
    assert_eq!(
        d.key(&k).expect("fits"),
        Some(crate::types::Key::new(["x", "abc", "1", "y", "z"]))
    );
    let k = crate::types::Key::new([long.as_str(), "a", "1", "y", "z"]);
    assert!(matches!(
        d.key(&k),
        Err(crate::key_domain::Unconvertible::Unindexable {
            limit: 256,
            length: 300,
            ..
        })
    ));
    // The startup line names the fields and their limits, without a fraction rule.
    let described = d.describe();
    assert!(
        described.contains("domain.keyword keyword, ignore_above 256"),
        "{described}"
    );
    assert!(!described.contains("fractional"), "{described}");
}

#[test]
fn a_normalizer_not_on_every_index_or_not_lowercase_is_compared_as_sent() {
    let v = j(r#"{
      "a": { "mappings": { "f": { "full_name": "f",
        "mapping": { "f": { "type": "keyword", "normalizer": "lowercase" } } } } },
      "b": { "mappings": { "f": { "full_name": "f",
        "mapping": { "f": { "type": "keyword" } } },
        "g": { "full_name": "g",
        "mapping": { "g": { "type": "keyword", "normalizer": "my_folding" } } } } }
    }"#);
    let (d, notes) = key_domain_of(&parse_field_mappings(&v, &key_fields(&["f", "g"])));
    assert!(d.is_identity(), "{d:?}");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("`f`") && n.contains("not reproduced")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|n| n.contains("`my_folding`")),
        "{notes:?}"
    );
    assert!(
        d.columns[1]
            .declared
            .contains("my_folding (not reproduced)")
    );
    // A refused read (no answer to parse) gives the assumptions.
    let (d, _) = key_domain_of(&parse_field_mappings(
        &Value::Null,
        &key_fields(&["x.keyword"]),
    ));
    assert_eq!(
        d.columns[0].ty,
        crate::key_domain::ColumnType::Keyword {
            ignore_above: Some(256),
            lowercase: false
        }
    );
}

fn keyword_domain(limit: Option<u32>) -> KeyDomain {
    use crate::key_domain::{ColumnType, Fraction, KeyColumn};
    KeyDomain {
        columns: vec![KeyColumn {
            name: "domain.keyword".into(),
            declared: "keyword".into(),
            ty: ColumnType::Keyword {
                ignore_above: limit,
                lowercase: false,
            },
            collation: None,
        }],
        fraction: Fraction::Truncate,
    }
}

/// The decoder keeps the limits the audit started with: a key it let through under them
/// that a later mapping check cannot index (ignore_above lowered) is an error for the
/// batch — unknown, retried — never a count of 0 that reads it as lost. A raised or
/// unchanged limit asks as before.
#[test]
fn a_key_over_a_limit_lowered_since_start_is_an_error_not_zero_found() {
    let mut t = target();
    t.columns.key = vec!["domain.keyword".into()];
    let sink = ElasticsearchSink::new(
        "http://127.0.0.1:9",
        EsAuth::None,
        None,
        t,
        Duration::from_secs(1),
    )
    .expect("sink");
    let long = crate::types::Key::new(["d".repeat(300)]);
    let short = crate::types::Key::new(["d".repeat(100)]);
    // Nothing learned (a verifier used without key_domain): no check.
    assert!(sink.check_key_limits(&[&long]).is_ok());
    *sink.learned_keys.lock().unwrap() = Some(keyword_domain(None));
    sink.note_key_mapping(keyword_domain(None));
    assert!(sink.check_key_limits(&[&long]).is_ok());
    // The mapping gains ignore_above 256: the 300-character key cannot be asked.
    sink.note_key_mapping(keyword_domain(Some(256)));
    match sink.check_key_limits(&[&short, &long]) {
        Err(SinkError::Rejected(m)) => {
            assert!(
                m.contains("`domain.keyword`") && m.contains("ignore_above 256"),
                "{m}"
            );
            assert!(m.contains("restart"), "{m}");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert!(sink.check_key_limits(&[&short]).is_ok());
    // Started at 256 (the decoder filtered longer values): a later 256 or 1024 is fine.
    *sink.learned_keys.lock().unwrap() = Some(keyword_domain(Some(256)));
    sink.note_key_mapping(keyword_domain(Some(1024)));
    assert!(sink.check_key_limits(&[&long]).is_ok());
}
