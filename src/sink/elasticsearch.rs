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
//! **Key fields' limits.** `_field_caps` does not show `ignore_above` (a longer value is
//! not indexed: no search finds its document) or a normalizer. For key fields the audit
//! reads them at start ([`Verifier::key_domain`], [`key_mapping`]) and the decoder counts a
//! record whose key value the field cannot index unverifiable, never missing; the key
//! field check reads them again (one `_mapping/field` request beside `_field_caps`), warns
//! on a change, and a value over a lowered limit is an error, not "0 found".
//!
//! Wildcards that match nothing are an error (`allow_no_indices=false`): an index that does
//! not exist is reported as such, never as "everything missing". Answers with failed shards
//! or `timed_out: true` are incomplete, hence unknown. Every status and error body is
//! interpreted in ONE place, [`classify`].
//!
//! [`Verifier::key_domain`]: super::Verifier::key_domain

use super::SinkError;
use crate::config::SinkColumns;
use crate::key_domain::KeyDomain;
use crate::ledger::OffsetRun;
use crate::types::{Key, Offset, TopicPartition};
use elasticsearch::auth::Credentials;
use elasticsearch::cert::{Certificate, CertificateValidation};
use elasticsearch::http::request::JsonBody;
use elasticsearch::http::response::Response;
use elasticsearch::http::transport::{SingleNodeConnectionPool, TransportBuilder};
use elasticsearch::indices::IndicesGetFieldMappingParts;
use elasticsearch::{
    BulkParts, CountParts, Elasticsearch, FieldCapsParts, MgetParts, MsearchParts, SearchParts,
};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

mod errors;
mod key_mapping;
mod mapping;
mod requests;
mod responses;
mod verifier;

pub use errors::{classify, classify_error};
use errors::{multi_index_refusal, prefix, snippet, transport_error};
pub use key_mapping::{
    DYNAMIC_IGNORE_ABOVE, FieldFacts, KeyFieldMapping, key_domain_of, parse_field_mappings,
};
use mapping::field_is_string;
pub use mapping::{check_field_caps, field_caps_fields, field_requirements};
pub use requests::{
    chunk_runs, count_bodies, count_body, keys_body, keys_body_typed, list_body, offsets_query,
};
pub use responses::{
    BulkCreate, BulkItemError, Page, bulk_item_errors, next_page, parse_bulk_create, parse_count,
    parse_keys, parse_mget, parse_msearch, parse_page,
};
use responses::{check_complete, hits_of, total_hits};

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
    /// The fields the audit's strategy queries: numeric partition and offset fields, an
    /// optional keyword topic field, keyword (or numeric/date) key fields in key order.
    pub columns: SinkColumns,
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
    /// The key fields' mapping the audit took at start ([`Verifier::key_domain`]): the
    /// decoder counts a value over its `ignore_above` unverifiable from then on.
    learned_keys: Mutex<Option<KeyDomain>>,
    /// The key fields' mapping of the last mapping check ([`key_mapping`]), read again with
    /// `_field_caps`; a change from `learned_keys` is warned about once.
    current_keys: Mutex<Option<KeyDomain>>,
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
            learned_keys: Mutex::new(None),
            current_keys: Mutex::new(None),
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
        if set == FieldSet::Keys {
            if let Ok(mut g) = self.key_fields_are_strings.lock() {
                *g = self
                    .target
                    .columns
                    .key
                    .iter()
                    .map(|f| field_is_string(&v, f))
                    .collect();
            }
            // `_field_caps` does not show `ignore_above` or normalizers: one more request,
            // only when the field caps are read (start, after an error, every recheck).
            let (domain, _) = self.read_key_mapping().await?;
            self.note_key_mapping(domain);
        }
        if let Ok(mut g) = slot.lock() {
            *g = Some(Instant::now());
        }
        Ok(())
    }

    /// The key fields' mapping in every index of the target ([`key_mapping`]): ONE
    /// `_mapping/field` request. A refusal (the index does not exist yet, or the user lacks
    /// `view_index_metadata`) gives the dynamic mapping's defaults, said in the notes;
    /// an unreachable server is an error (retried).
    async fn read_key_mapping(&self) -> Result<(KeyDomain, Vec<String>), SinkError> {
        let index = self.index();
        let fields: Vec<&str> = self.target.columns.key.iter().map(String::as_str).collect();
        let answer = self
            .call(
                "key field mapping",
                self.client
                    .indices()
                    .get_field_mapping(IndicesGetFieldMappingParts::IndexFields(&index, &fields))
                    .include_defaults(true)
                    .request_timeout(self.timeout)
                    .send(),
            )
            .await;
        let (v, refused) = match answer {
            Ok(v) => (v, None),
            Err(SinkError::Rejected(m)) => (Value::Null, Some(m)),
            Err(e) => return Err(e),
        };
        let (domain, mut notes) =
            key_domain_of(&parse_field_mappings(&v, &self.target.columns.key));
        if let Some(m) = refused {
            notes.insert(
                0,
                format!(
                    "cannot read the key fields' mapping of `{}` ({m}; reading it needs the \
                     `view_index_metadata` privilege): the dynamic mapping's defaults are assumed",
                    self.target.index
                ),
            );
        }
        Ok((domain, notes))
    }

    /// Keeps `domain` as the key fields' current mapping; a change from the one the audit
    /// started with is warned about once (the decoder keeps the start's limits: keys
    /// already read cannot be re-read, so the restart applies the new ones).
    fn note_key_mapping(&self, domain: KeyDomain) {
        let learned = self.learned_keys.lock().ok().and_then(|g| g.clone());
        if let Ok(mut cur) = self.current_keys.lock() {
            if let Some(l) = &learned
                && l.columns != domain.columns
                && cur.as_ref() != Some(&domain)
            {
                tracing::warn!(
                    index = %self.target.index,
                    at_start = %l.describe(),
                    now = %domain.describe(),
                    "the key fields' mapping changed since the audit started: keys already \
                     read keep the start's limits; a key value over a lowered ignore_above is \
                     an error, not a loss, until the auditor restarts and counts such records \
                     unverifiable"
                );
            }
            *cur = Some(domain);
        }
    }

    /// A key value the decoder let through under the start's mapping that the current
    /// mapping cannot index (its `ignore_above` was lowered since): an error naming the
    /// field and the limit — never "0 found", which would read the record as lost.
    fn check_key_limits(&self, keys: &[&Key]) -> Result<(), SinkError> {
        let (Some(learned), Some(current)) = (
            self.learned_keys.lock().ok().and_then(|g| g.clone()),
            self.current_keys.lock().ok().and_then(|g| g.clone()),
        ) else {
            return Ok(());
        };
        let at_start = key_mapping::limits_of(&learned);
        let now = key_mapping::limits_of(&current);
        for (i, (field, limit)) in self.target.columns.key.iter().zip(&now).enumerate() {
            let Some(limit) = *limit else { continue };
            if at_start
                .get(i)
                .copied()
                .flatten()
                .is_some_and(|s| s <= limit)
            {
                continue;
            }
            if let Some(len) = keys
                .iter()
                .filter_map(|k| k.values().nth(i))
                .map(crate::key_domain::keyword::utf16_len)
                .find(|n| *n > limit as usize)
            {
                return Err(SinkError::Rejected(format!(
                    "key field `{field}` of `{}`: a key value of {len} characters is over the \
                     field's ignore_above {limit}, lowered since the audit started; the server \
                     does not index it, so it can be neither found nor declared missing: \
                     restart the auditor to count such records unverifiable",
                    self.target.index
                )));
            }
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

#[cfg(test)]
mod tests;
