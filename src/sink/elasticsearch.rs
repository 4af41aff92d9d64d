//! The Elasticsearch verifier (REST API of Elasticsearch 8; OpenSearch speaks the same
//! requests used here), built on the official `elasticsearch` crate.
//!
//! Every answer must be exact, in spite of what Elasticsearch makes easy:
//!
//! - **Range counts** (`offset_columns`): one `_search` with `size: 0` and
//!   `track_total_hits: true` (an exact document count) over a `bool` filter — `term` on the
//!   partition (and topic) field, `should` of one `range` per due run — plus a `histogram`
//!   of the offset field with `interval: 1, min_doc_count: 2`. The histogram lists only the
//!   offsets held by two or more documents, so `distinct = rows − Σ(count − 1)` exactly,
//!   whatever the number of shards; a plain `_count` cannot tell a duplicate from a present
//!   record, and `cardinality` is approximate. A histogram is exact by construction (every
//!   shard returns every bucket; there is no top-N cut as in `terms`). Ranges are split at
//!   65,535 offsets, so one search can never hold more buckets than the smallest default
//!   `search.max_buckets` (65,535 on Elasticsearch 7.x and OpenSearch; 65,536 on 8.x),
//!   however the server counts them; several pieces go in one `_msearch`, so a count is
//!   always ONE HTTP request.
//! - **Listing** (small ranges only): `_source: false` hits sorted by the offset field, paged
//!   with `search_after` (never `from`, so `max_result_window` never applies). No tiebreaker
//!   is needed because only per-offset counts are kept: a full page drops its last offset and
//!   the next page starts again at it (`search_after: [last − 1]`), so documents sharing an
//!   offset are never split across pages. An offset with a full page of copies is counted
//!   with `_count`.
//! - **Key counts** (`key_columns`): one `_search` with a keyed `filters` aggregation, one
//!   filter per key (`bool` of `term`s), under a `terms` pre-filter on the first key field.
//!   `filters` buckets are exact document counts. At most 10,000 keys per search
//!   (`index.max_terms_count` is 65,536); more go in one `_msearch`.
//! - **Document ids** (`doc_id`): `_mget` with `_source=false` in the audit's batches. `_mget`
//!   is real-time (it reads documents before a refresh). An id names one document of an
//!   index, so duplicates are impossible by construction. When the index is a pattern or an
//!   alias of several indices, where `_mget` cannot work, an `ids` query is used instead.
//!
//! **Field mappings.** A field the queries name that is not in the index mapping matches no
//! document, and a `text` field (analyzed) matches exact values only by accident: either
//! would make every record read as missing while the server answers 200. So before the
//! first question that names fields (and again after any failed question, and every
//! [`MAPPING_RECHECK`]), ONE `_field_caps` request checks them ([`check_field_caps`]): a
//! missing field, a `text`-like or object field, a non-numeric offset field, a keyword-less
//! topic field is a [`SinkError::Rejected`] naming the field, the index and the fix — never
//! "0 found". `_field_caps` needs only the `read` privilege (`_mapping` needs
//! `view_index_metadata`) and merges the mappings of every index a pattern or alias covers,
//! listing conflicting types per index. In the steady state a question is still ONE request.
//!
//! Wildcards that match nothing are an error (`allow_no_indices=false`): an index that does
//! not exist is reported as such, never as "everything missing". Answers with failed shards
//! or `timed_out: true` are incomplete, hence unknown. Every status and error body is
//! interpreted in ONE place, [`classify`].

use super::{RangeCount, SinkError, Verifier};
use crate::gap::{Offset, TopicPartition};
use crate::ledger::OffsetRun;
use crate::record::Key;
use elasticsearch::auth::Credentials;
use elasticsearch::cert::{Certificate, CertificateValidation};
use elasticsearch::http::request::JsonBody;
use elasticsearch::http::response::Response;
use elasticsearch::http::transport::{SingleNodeConnectionPool, TransportBuilder};
use elasticsearch::{
    BulkParts, CountParts, Elasticsearch, FieldCapsParts, MgetParts, MsearchParts, SearchParts,
};
use serde_json::{Map, Value, json};
use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Offsets covered by one histogram search: at most this many buckets per search, within the
/// default `search.max_buckets` of Elasticsearch 7.x and OpenSearch (65,535).
pub const COUNT_SPAN: u64 = 65_535;
/// How long a successful mapping check is trusted (it is also redone after any failed
/// question): an index pattern can gain an index with another mapping.
pub const MAPPING_RECHECK: Duration = Duration::from_secs(600);
/// Keys in one `filters` search.
pub const KEYS_PER_SEARCH: usize = 10_000;
/// Hits per `search_after` page (`index.max_result_window` default).
pub const MAX_PAGE: usize = 10_000;

/// Where the documents are and which fields carry what.
#[derive(Debug, Clone)]
pub struct EsTarget {
    /// Index, alias or pattern (`logs-*`).
    pub index: String,
    /// offset_columns: numeric field holding the Kafka partition.
    pub partition_field: String,
    /// offset_columns: numeric field holding the Kafka offset.
    pub offset_field: String,
    /// offset_columns: optional keyword field holding the topic.
    pub topic_field: Option<String>,
    /// key_columns: keyword (or numeric/date) fields, in key order.
    pub key_fields: Vec<String>,
}

/// How the auditor authenticates.
#[derive(Clone)]
pub enum EsAuth {
    /// No credentials.
    None,
    /// HTTP basic.
    Basic {
        /// User name.
        username: String,
        /// Password.
        password: String,
    },
    /// An API key: the base64 `id:key` form Elasticsearch returns as `encoded`, or `id:key`.
    ApiKey(String),
}

impl std::fmt::Debug for EsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EsAuth::None => f.write_str("None"),
            EsAuth::Basic { username, .. } => write!(f, "Basic({username}, [redacted])"),
            EsAuth::ApiKey(_) => f.write_str("ApiKey([redacted])"),
        }
    }
}

/// A verifier over one Elasticsearch index (or alias, or pattern).
pub struct ElasticsearchSink {
    client: Elasticsearch,
    target: EsTarget,
    timeout: Duration,
    page_size: usize,
    /// doc_id: `_mget` cannot address this target (pattern, multi-index alias): use `ids`
    /// searches.
    ids_by_search: AtomicBool,
    /// When the fields of each [`FieldSet`] last passed the mapping check (`None`: never, or
    /// a question using them failed since).
    fields_checked: [Mutex<Option<Instant>>; 2],
    /// Per key field, whether every index maps it as a keyword-like (string) type, from the
    /// last mapping check: an EMPTY key value can only be a `term` on those; on any other
    /// type (date, ip, numbers) `term ""` is a 400 for the whole batch, and the empty field
    /// can only be absent from the document.
    key_fields_are_strings: Mutex<Vec<bool>>,
}

/// The fields one kind of question names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldSet {
    /// Range counts and listings (offset_columns): partition, offset and topic fields.
    Offsets = 0,
    /// Key counts (key_columns): the key fields.
    Keys = 1,
}

/// What a queried field is used for, which decides the mapping types it may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldRole {
    /// `term` on the Kafka partition: numeric or keyword.
    Partition,
    /// `range`, `histogram` and sort on the Kafka offset: numeric, with doc values.
    Offset,
    /// `term` on the topic: keyword.
    Topic,
    /// `term` on a key value: any exact-value type (keyword, numeric, date, ip, ...).
    Key,
}

impl FieldRole {
    fn describe(self) -> &'static str {
        match self {
            FieldRole::Partition => "partition field (match.partition_column)",
            FieldRole::Offset => "offset field (match.offset_column)",
            FieldRole::Topic => "topic field (match.topic_column)",
            FieldRole::Key => "key field (match.columns / match.key)",
        }
    }
}

impl ElasticsearchSink {
    /// Builds the client (connects lazily). `url` must carry no credentials (pass them in
    /// `auth`); `ca_pem` is a PEM bundle trusted in addition to the system roots; `timeout`
    /// bounds every request.
    pub fn new(
        url: &str,
        auth: EsAuth,
        ca_pem: Option<&[u8]>,
        target: EsTarget,
        timeout: Duration,
    ) -> Result<Self, SinkError> {
        let mut base = url::Url::parse(url)
            .map_err(|e| SinkError::Rejected(format!("invalid sink url: {e}")))?;
        if !base.username().is_empty() || base.password().is_some() {
            return Err(SinkError::Rejected(
                "the sink url must not carry credentials here".into(),
            ));
        }
        // A path prefix (a proxy in front of the cluster) must end with `/` to be joined.
        if !base.path().ends_with('/') {
            let p = format!("{}/", base.path());
            base.set_path(&p);
        }
        let mut b = TransportBuilder::new(SingleNodeConnectionPool::new(base))
            .timeout(timeout)
            .enable_meta_header(false);
        b = match auth {
            EsAuth::None => b,
            EsAuth::Basic { username, password } => b.auth(Credentials::Basic(username, password)),
            EsAuth::ApiKey(k) => match k.split_once(':') {
                Some((id, key)) => b.auth(Credentials::ApiKey(id.into(), key.into())),
                None => b.auth(Credentials::EncodedApiKey(k)),
            },
        };
        if let Some(pem) = ca_pem {
            let cert = Certificate::from_pem(pem)
                .map_err(|e| SinkError::Rejected(format!("sink.ca_file: {e}")))?;
            b = b.cert_validation(CertificateValidation::Full(cert));
        }
        let transport = b
            .build()
            .map_err(|e| SinkError::Rejected(format!("elasticsearch client: {e}")))?;
        let pattern = target.index.contains(['*', ',']);
        Ok(Self {
            client: Elasticsearch::new(transport),
            target,
            timeout,
            page_size: MAX_PAGE,
            ids_by_search: AtomicBool::new(pattern),
            fields_checked: [Mutex::new(None), Mutex::new(None)],
            key_fields_are_strings: Mutex::new(Vec::new()),
        })
    }

    /// Hits per listing page (tests use small pages to exercise the paging).
    pub fn with_page_size(mut self, n: usize) -> Self {
        self.page_size = n.clamp(2, MAX_PAGE);
        self
    }

    fn index(&self) -> [&str; 1] {
        [self.target.index.as_str()]
    }

    /// Checks the mapping of the fields `set` names, unless a check passed within
    /// [`MAPPING_RECHECK`] and no question using them failed since: ONE `_field_caps`.
    async fn ensure_fields(&self, set: FieldSet) -> Result<(), SinkError> {
        let slot = &self.fields_checked[set as usize];
        let fresh = slot
            .lock()
            .ok()
            .and_then(|g| *g)
            .is_some_and(|at| at.elapsed() < MAPPING_RECHECK);
        if fresh {
            return Ok(());
        }
        let reqs = field_requirements(&self.target, set);
        if reqs.is_empty() {
            return Ok(());
        }
        let names = field_caps_fields(&reqs);
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let index = self.index();
        let v = self
            .call(
                "field caps",
                self.client
                    .field_caps(FieldCapsParts::Index(&index))
                    .fields(&names)
                    .allow_no_indices(false)
                    .request_timeout(self.timeout)
                    .send(),
            )
            .await?;
        check_field_caps(&v, &self.target.index, &reqs)?;
        if set == FieldSet::Keys
            && let Ok(mut g) = self.key_fields_are_strings.lock()
        {
            *g = self
                .target
                .key_fields
                .iter()
                .map(|f| field_is_string(&v, f))
                .collect();
        }
        if let Ok(mut g) = slot.lock() {
            *g = Some(Instant::now());
        }
        Ok(())
    }

    /// A question using `set` failed: check its fields again before the next one.
    fn forget_fields(&self, set: FieldSet) {
        if let Ok(mut g) = self.fields_checked[set as usize].lock() {
            *g = None;
        }
    }

    /// Runs `question` after the mapping check of `set`; a failure re-arms the check.
    async fn checked<T>(
        &self,
        set: FieldSet,
        question: impl std::future::Future<Output = Result<T, SinkError>>,
    ) -> Result<T, SinkError> {
        self.ensure_fields(set).await?;
        let r = question.await;
        if r.is_err() {
            self.forget_fields(set);
        }
        r
    }

    /// Sends one request and returns its JSON body; any failure is classified here.
    async fn call(
        &self,
        what: &str,
        req: impl std::future::Future<Output = Result<Response, elasticsearch::Error>>,
    ) -> Result<Value, SinkError> {
        // The client enforces the timeout; this outer one also covers reading the body.
        let limit = self.timeout + Duration::from_secs(1);
        let exchange = async {
            let resp = req.await.map_err(|e| transport_error(&e, self.timeout))?;
            let status = resp.status_code().as_u16();
            let body = resp
                .bytes()
                .await
                .map_err(|e| transport_error(&e, self.timeout))?;
            Ok::<_, SinkError>((status, body))
        };
        let (status, body) = match tokio::time::timeout(limit, exchange).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(SinkError::Unavailable(format!(
                    "{what}: no answer within {:?}",
                    self.timeout
                )));
            }
        };
        if !(200..300).contains(&status) {
            return Err(prefix(what, classify(status, &body)));
        }
        serde_json::from_slice(&body).map_err(|_| {
            SinkError::Rejected(format!(
                "{what}: HTTP {status} but not a JSON answer: {}",
                snippet(&body)
            ))
        })
    }

    /// One `_search`, or one `_msearch` carrying several; answers in order, each checked.
    async fn searches(&self, what: &str, bodies: Vec<Value>) -> Result<Vec<Value>, SinkError> {
        if bodies.len() == 1 {
            let body = bodies.into_iter().next().unwrap_or_default();
            let index = self.index();
            let v = self
                .call(
                    what,
                    self.client
                        .search(SearchParts::Index(&index))
                        .allow_no_indices(false)
                        .request_timeout(self.timeout)
                        .body(body)
                        .send(),
                )
                .await?;
            return Ok(vec![v]);
        }
        let n = bodies.len();
        let mut lines: Vec<JsonBody<Value>> = Vec::with_capacity(n * 2);
        for b in bodies {
            lines.push(json!({ "allow_no_indices": false }).into());
            lines.push(b.into());
        }
        let index = self.index();
        let v = self
            .call(
                what,
                self.client
                    .msearch(MsearchParts::Index(&index))
                    .request_timeout(self.timeout)
                    .body(lines)
                    .send(),
            )
            .await?;
        parse_msearch(&v, n).map_err(|e| prefix(what, e))
    }

    async fn count_one_offset(&self, tp: &TopicPartition, o: Offset) -> Result<u64, SinkError> {
        let index = self.index();
        let q = json!({ "query": offsets_query(&self.target, tp, &[OffsetRun::new(o, o)]) });
        let v = self
            .call(
                "count",
                self.client
                    .count(CountParts::Index(&index))
                    .allow_no_indices(false)
                    .request_timeout(self.timeout)
                    .body(q)
                    .send(),
            )
            .await?;
        check_complete(&v)?;
        v.get("count")
            .and_then(Value::as_u64)
            .ok_or_else(|| SinkError::Rejected("count: answer without `count`".into()))
    }

    async fn ids_by_mget(&self, ids: &[&str]) -> Result<Option<Vec<bool>>, SinkError> {
        let v = self
            .call(
                "mget",
                self.client
                    .mget(MgetParts::Index(&self.target.index))
                    ._source(&["false"])
                    .request_timeout(self.timeout)
                    .body(json!({ "ids": ids }))
                    .send(),
            )
            .await;
        let v = match v {
            Err(SinkError::Rejected(m)) if multi_index_refusal(&m) => return Ok(None),
            other => other?,
        };
        match parse_mget(&v, ids) {
            Err(SinkError::Rejected(m)) if multi_index_refusal(&m) => Ok(None),
            other => other.map(Some),
        }
    }

    async fn ids_by_query(&self, ids: &[&str]) -> Result<Vec<bool>, SinkError> {
        let mut bodies = Vec::new();
        for chunk in ids.chunks(MAX_PAGE / 2) {
            bodies.push(json!({
                "size": MAX_PAGE,
                "_source": false,
                "track_total_hits": true,
                "query": { "ids": { "values": chunk } },
            }));
        }
        let answers = self.searches("ids search", bodies).await?;
        let mut found: HashSet<String> = HashSet::new();
        for a in &answers {
            check_complete(a)?;
            let hits = hits_of(a)?;
            let total = total_hits(a)?;
            if total as usize > hits.len() {
                return Err(SinkError::Rejected(format!(
                    "ids search: {total} documents for at most {} ids (copies in several \
                     indices of {}); cannot list them in one page",
                    MAX_PAGE / 2,
                    self.target.index
                )));
            }
            for h in hits {
                if let Some(id) = h.get("_id").and_then(Value::as_str) {
                    found.insert(id.to_string());
                }
            }
        }
        Ok(ids.iter().map(|id| found.contains(*id)).collect())
    }
}

impl ElasticsearchSink {
    /// Writes `docs` with ONE `_bulk` of `create` actions into the index (`replay
    /// --to-sink`). With an id, `create` is idempotent: an existing document answers 409 per
    /// item ([`BulkCreate::Exists`]) and is left untouched; without one the server picks
    /// the id. Per-item outcomes are aligned with `docs`; an error of the whole request
    /// (transport, 4xx/5xx) is returned as such.
    pub async fn bulk_create(
        &self,
        docs: &[(Option<String>, Value)],
    ) -> Result<Vec<BulkCreate>, SinkError> {
        if docs.is_empty() {
            return Ok(Vec::new());
        }
        let mut body: Vec<JsonBody<Value>> = Vec::with_capacity(docs.len() * 2);
        for (id, doc) in docs {
            let meta = match id {
                Some(id) => json!({ "create": { "_id": id } }),
                None => json!({ "create": {} }),
            };
            body.push(meta.into());
            body.push(doc.clone().into());
        }
        let v = self
            .call(
                "bulk",
                self.client
                    .bulk(BulkParts::Index(&self.target.index))
                    .request_timeout(self.timeout)
                    .body(body)
                    .send(),
            )
            .await?;
        parse_bulk_create(&v, docs.len()).map_err(|e| prefix("bulk", e))
    }
}

impl Verifier for ElasticsearchSink {
    fn kind(&self) -> &'static str {
        "elasticsearch"
    }

    async fn ping(&self) -> Result<(), SinkError> {
        // Proves the index exists and is readable with these credentials, reads nothing.
        let index = self.index();
        let v = self
            .call(
                "ping",
                self.client
                    .count(CountParts::Index(&index))
                    .allow_no_indices(false)
                    .request_timeout(self.timeout)
                    .body(json!({ "query": { "match_none": {} } }))
                    .send(),
            )
            .await?;
        check_complete(&v)
    }

    async fn count_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<RangeCount, SinkError> {
        if runs.is_empty() {
            return Ok(RangeCount::default());
        }
        self.checked(FieldSet::Offsets, async {
            let bodies = count_bodies(&self.target, tp, runs);
            let mut total = RangeCount::default();
            for a in self.searches("range count", bodies).await? {
                let c = parse_count(&a)?;
                total.rows += c.rows;
                total.distinct += c.distinct;
            }
            Ok(total)
        })
        .await
    }

    async fn list_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<Vec<(Offset, u64)>, SinkError> {
        self.checked(FieldSet::Offsets, self.list_pages(tp, runs))
            .await
    }

    async fn count_keys(&self, keys: &[&Key]) -> Result<Vec<u64>, SinkError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        if let Some(k) = keys
            .iter()
            .find(|k| k.len() != self.target.key_fields.len())
        {
            return Err(SinkError::Rejected(format!(
                "a key has {} values for {} key fields",
                k.len(),
                self.target.key_fields.len()
            )));
        }
        self.checked(FieldSet::Keys, async {
            let strings = self
                .key_fields_are_strings
                .lock()
                .map(|g| g.clone())
                .unwrap_or_default();
            let bodies: Vec<Value> = keys
                .chunks(KEYS_PER_SEARCH)
                .map(|c| keys_body_typed(&self.target.key_fields, c, &strings))
                .collect();
            let mut out = Vec::with_capacity(keys.len());
            let answers = self.searches("key count", bodies).await?;
            for (a, c) in answers.iter().zip(keys.chunks(KEYS_PER_SEARCH)) {
                out.extend(parse_keys(a, c.len())?);
            }
            Ok(out)
        })
        .await
    }

    async fn find_ids(&self, ids: &[&str]) -> Result<Vec<bool>, SinkError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        if !self.ids_by_search.load(Ordering::Relaxed) {
            if let Some(found) = self.ids_by_mget(ids).await? {
                return Ok(found);
            }
            tracing::info!(index = %self.target.index, "the index is an alias of several indices: verifying document ids with `ids` searches instead of _mget");
            self.ids_by_search.store(true, Ordering::Relaxed);
        }
        self.ids_by_query(ids).await
    }
}

impl ElasticsearchSink {
    /// The listing of [`Verifier::list_offsets`], page by page.
    async fn list_pages(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<Vec<(Offset, u64)>, SinkError> {
        let mut out: Vec<(Offset, u64)> = Vec::new();
        let mut after: Option<Offset> = None;
        loop {
            let body = list_body(&self.target, tp, runs, after, self.page_size);
            let page = self.searches("listing", vec![body]).await?.remove(0);
            let offsets = parse_page(&page)?;
            match next_page(&offsets, self.page_size) {
                Page::Last => {
                    push_counts(&mut out, &offsets);
                    return Ok(out);
                }
                Page::More { keep, resume_after } => {
                    push_counts(&mut out, &offsets[..keep]);
                    after = Some(resume_after);
                }
                Page::AllOneOffset(o) => {
                    // At least a page of copies of one offset: count them directly.
                    let n = self.count_one_offset(tp, o).await?;
                    out.push((o, n));
                    after = Some(o);
                }
            }
        }
    }
}

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
    let mut filter = vec![obj("term", obj(&t.partition_field, json!(tp.partition)))];
    if let Some(f) = &t.topic_field {
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
                obj(&t.offset_field, json!({ "gte": r.first, "lte": r.last })),
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
        "must_not": [ obj("terms", obj(&t.offset_field, json!(excluded))) ],
    } })
}

/// The range count: exact hit total plus the offsets held by two or more documents.
pub fn count_body(t: &EsTarget, tp: &TopicPartition, runs: &[OffsetRun]) -> Value {
    json!({
        "size": 0,
        "track_total_hits": true,
        "query": offsets_query(t, tp, runs),
        "aggs": { "dups": { "histogram": {
            "field": t.offset_field, "interval": 1, "min_doc_count": 2
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
        "sort": [ obj(&t.offset_field, json!("asc")) ],
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

// ------------------------------------------------------------------------ field mappings

/// The fields a [`FieldSet`] names, with what each is used for.
pub fn field_requirements(t: &EsTarget, set: FieldSet) -> Vec<(FieldRole, &str)> {
    match set {
        FieldSet::Offsets => {
            let mut v = vec![
                (FieldRole::Partition, t.partition_field.as_str()),
                (FieldRole::Offset, t.offset_field.as_str()),
            ];
            if let Some(f) = &t.topic_field {
                v.push((FieldRole::Topic, f.as_str()));
            }
            v
        }
        FieldSet::Keys => t
            .key_fields
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
fn field_is_string(v: &Value, field: &str) -> bool {
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

// ------------------------------------------------------------------------ answers

/// An answer that skipped shards or ran out of time is incomplete: unknown, never "missing".
fn check_complete(v: &Value) -> Result<(), SinkError> {
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

fn total_hits(v: &Value) -> Result<u64, SinkError> {
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

fn hits_of(v: &Value) -> Result<&Vec<Value>, SinkError> {
    v.pointer("/hits/hits")
        .and_then(Value::as_array)
        .ok_or_else(|| SinkError::Rejected("answer without hits.hits".into()))
}

/// Rows and distinct offsets from a [`count_body`] answer.
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

fn push_counts(out: &mut Vec<(Offset, u64)>, sorted: &[Offset]) {
    for o in sorted {
        match out.last_mut() {
            Some((last, n)) if last == o => *n += 1,
            _ => out.push((*o, 1)),
        }
    }
}

/// Documents per key from a [`keys_body`] answer with `n` keys.
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

// ------------------------------------------------------------------------ classification

/// What an Elasticsearch error answer means — the ONE place where statuses and error bodies
/// are interpreted. 408, 429 and 5xx are transient (retried next round); other 4xx are
/// configuration problems the operator must fix, reported with Elasticsearch's error `type`
/// and `reason`; a missing index says so. Every result means "unknown", never "missing".
pub fn classify(status: u16, body: &[u8]) -> SinkError {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => match v.get("error") {
            Some(e) => classify_error(Some(status), e),
            None => by_status(status, String::new(), snippet(body)),
        },
        Err(_) => by_status(status, String::new(), snippet(body)),
    }
}

/// [`classify`] for an `error` object (top level, or per item of `_mget`/`_msearch`).
pub fn classify_error(status: Option<u16>, e: &Value) -> SinkError {
    let (kind, reason) = describe(e);
    let status = status.unwrap_or_else(|| match kind.as_str() {
        "index_not_found_exception" => 404,
        k if TRANSIENT.contains(&k) => 503,
        _ => 400,
    });
    by_status(status, kind, reason)
}

/// Error types that mean "try again later", for per-item errors that carry no status.
const TRANSIENT: &[&str] = &[
    "es_rejected_execution_exception",
    "circuit_breaking_exception",
    "no_shard_available_action_exception",
    "unavailable_shards_exception",
    "node_not_connected_exception",
    "timeout_exception",
];

fn by_status(status: u16, kind: String, reason: String) -> SinkError {
    let what = if kind.is_empty() {
        reason.clone()
    } else if reason.is_empty() {
        kind.clone()
    } else {
        format!("{kind}: {reason}")
    };
    match status {
        408 | 429 | 500..=599 => SinkError::Unavailable(format!("HTTP {status} {what}")),
        404 if kind == "index_not_found_exception" => SinkError::Rejected(format!(
            "index not found ({what}): check sink.index; nothing is declared missing while \
             it does not exist"
        )),
        401 => SinkError::Rejected(format!(
            "HTTP 401 authentication failed ({what}): check sink.username/password or api_key"
        )),
        403 => SinkError::Rejected(format!(
            "HTTP 403 not allowed ({what}): the user needs the `read` privilege on the index"
        )),
        _ => SinkError::Rejected(format!("HTTP {status} {what}")),
    }
}

/// (type, reason) of an error object, with the root cause when it says more.
fn describe(e: &Value) -> (String, String) {
    if let Some(s) = e.as_str() {
        return (String::new(), s.to_string());
    }
    let kind = e
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mut reason = e
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let cause = e
        .pointer("/root_cause/0")
        .or_else(|| e.get("caused_by"))
        .filter(|c| c.get("type").and_then(Value::as_str) != Some(kind.as_str()));
    if let Some(c) = cause {
        let ct = c.get("type").and_then(Value::as_str).unwrap_or("");
        let cr = c.get("reason").and_then(Value::as_str).unwrap_or("");
        reason = format!("{reason} (caused by {ct}: {cr})");
    }
    (kind, reason)
}

/// Transport failures (refused, reset, DNS, TLS, timeout) are all transient.
fn transport_error(e: &elasticsearch::Error, timeout: Duration) -> SinkError {
    if e.is_timeout() {
        SinkError::Unavailable(format!("request timed out after {timeout:?}"))
    } else {
        SinkError::Unavailable(format!("cannot reach elasticsearch: {e}"))
    }
}

fn prefix(what: &str, e: SinkError) -> SinkError {
    match e {
        SinkError::Unavailable(m) => SinkError::Unavailable(format!("{what}: {m}")),
        SinkError::Rejected(m) => SinkError::Rejected(format!("{what}: {m}")),
    }
}

/// `_mget` refuses patterns and aliases of several indices.
fn multi_index_refusal(m: &str) -> bool {
    m.contains("illegal_argument_exception")
        && (m.contains("alias") || m.contains("more than one") || m.contains("wildcard"))
}

fn snippet(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(body);
    let s: String = s.chars().filter(|c| !c.is_control()).take(200).collect();
    if s.is_empty() {
        "(empty body)".into()
    } else {
        s
    }
}

#[cfg(test)]
mod tests;
