//! Confluent Schema Registry: the wire framing of a record value, a small typed client for
//! the documented REST calls the auditor needs, and the per-id schema cache.
//!
//! Wire format (Confluent's serializers, Flink's `avro-confluent`, Kafka Connect's
//! converters): byte 0 is the magic `0`, bytes 1–4 the schema id (big-endian), then the
//! encoded record. The schema comes from `GET /schemas/ids/{id}` (`{"schema": "...",
//! "schemaType": "AVRO"|"PROTOBUF"|"JSON", "references": [...]}`, no `schemaType` meaning
//! Avro); each reference is fetched with `GET /subjects/{subject}/versions/{version}`.
//!
//! No crate client here: the maintained Rust registry clients pull a second HTTP stack or
//! an Avro/Protobuf version of their own, and two GETs are all the auditor needs.
//!
//! The tailing thread never waits for the registry: [`Registry::lookup`] answers from the
//! cache only; the audit asks [`Registry::run_fetcher`] (a task of the audit) for the id of
//! the first record each partition holds back ([`Registry::want`], from [`crate::held`]),
//! never for the ids behind it, so a stuck id cannot make the fetcher's maps grow with every
//! id read after it. The record waits, unknown, until [`Registry::arrivals`] moves. `check`
//! and `replay` are not on a hot path and await [`Registry::resolve`].
//!
//! An id the registry answers 404 for is retried like an unreachable registry, but not for
//! ever: after [`NOT_FOUND_FINAL_COUNT`] consecutive 404s spanning at least
//! [`NOT_FOUND_FINAL_AFTER`] the id is final — its records are `undecodable` (counted, and
//! watched by the coverage alert) and its partition goes on. A registry that is down (no
//! answer, 5xx) or refuses (401/403) never makes an id final: those records wait, unknown.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::config::{SchemaRegistryConfig, Secret};

/// The first byte of a Confluent-framed value.
pub const MAGIC: u8 = 0;
/// Magic byte plus schema id.
pub const HEADER_LEN: usize = 5;

/// Splits a Confluent-framed value into (schema id, payload); `None` when the value is too
/// short or does not start with the magic byte.
pub fn split_frame(bytes: &[u8]) -> Option<(u32, &[u8])> {
    if bytes.len() < HEADER_LEN || bytes[0] != MAGIC {
        return None;
    }
    let id = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
    Some((id, &bytes[HEADER_LEN..]))
}

/// Why a schema could not be had. Every variant is retried (a record waiting for its schema
/// stays unknown, never filtered); only a [`RegistryError::NotFound`] repeated long enough
/// becomes final (see the module docs), like a schema the registry served but the auditor
/// cannot use ([`SchemaError`]): their records are `undecodable`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// No answer: connection refused, timeout, TLS failure, a 5xx.
    #[error("schema registry unavailable: {0}")]
    Unavailable(String),
    /// The registry does not know the id (HTTP 404): another registry's records, or a
    /// schema deleted since.
    #[error("schema id {0} is not in the schema registry (404)")]
    NotFound(u32),
    /// Another answer than 200/404 (401, 403, ...), with the registry's message.
    #[error("schema registry answered {status} for schema id {id}: {message}")]
    Refused {
        /// The schema id asked for.
        id: u32,
        /// The HTTP status.
        status: u16,
        /// The registry's `message`, or the body's first bytes.
        message: String,
    },
}

/// A schema the registry served that cannot be used (not parseable, an unsupported type).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("schema id {id}: {reason}")]
pub struct SchemaError {
    /// The schema id.
    pub id: u32,
    /// What is wrong with it.
    pub reason: String,
}

/// The schema types the registry knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaType {
    /// `AVRO` (also: no `schemaType` at all).
    Avro,
    /// `PROTOBUF`.
    Protobuf,
    /// `JSON` (JSON Schema).
    Json,
}

/// A schema as the registry served it, with its references fetched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawSchema {
    /// Its type.
    pub schema_type: SchemaType,
    /// The schema text (Avro JSON, `.proto` text or a base64 `FileDescriptorProto`).
    pub text: String,
    /// The referenced schemas, each as (reference name, text), dependencies first.
    pub references: Vec<(String, String)>,
}

#[derive(Deserialize)]
struct SchemaResponse {
    schema: String,
    #[serde(rename = "schemaType", default)]
    schema_type: Option<String>,
    #[serde(default)]
    references: Vec<Reference>,
}

#[derive(Deserialize)]
struct Reference {
    name: String,
    subject: String,
    version: i64,
}

/// Most references followed for one schema (a cycle or a hostile registry cannot loop).
const MAX_REFERENCES: usize = 64;

/// A typed client of the two registry calls, with basic auth and TLS like the sinks.
#[derive(Clone)]
pub struct RegistryClient {
    http: reqwest::Client,
    base: url::Url,
    auth: Option<(String, Secret)>,
}

impl std::fmt::Debug for RegistryClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryClient")
            .field("base", &self.base.as_str())
            .field("auth", &self.auth.as_ref().map(|(u, _)| u))
            .finish()
    }
}

impl RegistryClient {
    /// A client for `cfg` (validated by the config layer: the URL parses, the CA file was
    /// readable, the password was read from its file). Errors name the config key.
    pub fn new(cfg: &SchemaRegistryConfig) -> Result<Self, String> {
        let mut base: url::Url = cfg
            .url
            .parse()
            .map_err(|e| format!("schema_registry.url: {e}"))?;
        if !base.path().ends_with('/') {
            let p = format!("{}/", base.path());
            base.set_path(&p);
        }
        let mut b = reqwest::Client::builder()
            .timeout(cfg.timeout)
            .connect_timeout(cfg.timeout)
            .redirect(reqwest::redirect::Policy::none());
        if let Some(path) = &cfg.ca_file {
            let pem = std::fs::read(path).map_err(|e| {
                format!(
                    "schema_registry.ca_file: cannot read {}: {e}",
                    path.display()
                )
            })?;
            let cert = reqwest::Certificate::from_pem(&pem)
                .map_err(|e| format!("schema_registry.ca_file: {e}"))?;
            b = b.add_root_certificate(cert);
        }
        let http = b
            .build()
            .map_err(|e| format!("schema registry client: {e}"))?;
        let auth = cfg
            .username
            .clone()
            .map(|u| (u, cfg.password.clone().unwrap_or_else(|| Secret::from(""))));
        Ok(Self { http, base, auth })
    }

    async fn get(&self, path: &str, id: u32) -> Result<SchemaResponse, RegistryError> {
        let url = self
            .base
            .join(path)
            .map_err(|e| RegistryError::Unavailable(format!("bad path {path}: {e}")))?;
        let mut req = self.http.get(url).header(
            reqwest::header::ACCEPT,
            "application/vnd.schemaregistry.v1+json, application/json",
        );
        if let Some((user, password)) = &self.auth {
            req = req.basic_auth(user, Some(password.expose()));
        }
        // Credentials go in a header, never in the URL the error could print.
        let resp = req
            .send()
            .await
            .map_err(|e| RegistryError::Unavailable(chain(&e)))?;
        let status = resp.status();
        let body = resp
            .bytes()
            .await
            .map_err(|e| RegistryError::Unavailable(chain(&e)))?;
        if status.is_success() {
            return serde_json::from_slice(&body).map_err(|e| RegistryError::Refused {
                id,
                status: status.as_u16(),
                message: format!("not a schema response: {e}"),
            });
        }
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(RegistryError::NotFound(id));
        }
        let message = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned());
        if status.is_server_error() {
            return Err(RegistryError::Unavailable(format!(
                "HTTP {status}: {message}"
            )));
        }
        Err(RegistryError::Refused {
            id,
            status: status.as_u16(),
            message,
        })
    }

    /// `GET /schemas/ids/{id}`, then every reference, depth first (dependencies first).
    pub async fn fetch(&self, id: u32) -> Result<RawSchema, RegistryError> {
        let top = self.get(&format!("schemas/ids/{id}"), id).await?;
        let schema_type = match top.schema_type.as_deref() {
            None | Some("AVRO") => SchemaType::Avro,
            Some("PROTOBUF") => SchemaType::Protobuf,
            Some("JSON") => SchemaType::Json,
            Some(other) => {
                return Err(RegistryError::Refused {
                    id,
                    status: 200,
                    message: format!("unknown schemaType {other:?}"),
                });
            }
        };
        let mut references = Vec::new();
        let mut seen = HashSet::new();
        let mut stack: Vec<(Reference, bool)> = top
            .references
            .into_iter()
            .rev()
            .map(|r| (r, false))
            .collect();
        // Post-order walk: a reference is emitted after its own references.
        let mut texts: HashMap<String, String> = HashMap::new();
        while let Some((r, expanded)) = stack.pop() {
            if expanded {
                if let Some(t) = texts.remove(&r.name) {
                    references.push((r.name, t));
                }
                continue;
            }
            if !seen.insert(r.name.clone()) {
                continue;
            }
            if seen.len() > MAX_REFERENCES {
                return Err(RegistryError::Refused {
                    id,
                    status: 200,
                    message: format!("more than {MAX_REFERENCES} schema references"),
                });
            }
            let path = format!(
                "subjects/{}/versions/{}",
                utf8_percent_encode(&r.subject),
                r.version
            );
            let resp = self.get(&path, id).await?;
            texts.insert(r.name.clone(), resp.schema);
            let children: Vec<Reference> = resp.references;
            stack.push((r, true));
            stack.extend(children.into_iter().rev().map(|c| (c, false)));
        }
        Ok(RawSchema {
            schema_type,
            text: top.schema,
            references,
        })
    }
}

/// An error with its causes ("error sending request: ... Connection refused"): reqwest's
/// own text names only the outermost.
fn chain(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// A path segment with everything but unreserved characters percent-encoded (subjects may
/// hold `/`, `:` and spaces).
fn utf8_percent_encode(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

/// What the cache knows about an id.
#[derive(Debug, Clone)]
pub enum Lookup<S> {
    /// The compiled schema.
    Ready(Arc<S>),
    /// Served, but unusable: its records are `undecodable`.
    Broken(Arc<SchemaError>),
    /// Not here yet: asked for, the record waits.
    Waiting,
}

enum Entry<S> {
    Ready(Arc<S>),
    Broken(Arc<SchemaError>),
}

/// Why the last fetch of an id failed, and when it may be tried again.
#[derive(Debug, Clone)]
struct Failure {
    error: RegistryError,
    retry_at: Instant,
    backoff: Duration,
    /// When the id was first asked for and failed (health: how long it has waited).
    since: Instant,
    /// Consecutive 404s, and when the first of them came; any other error resets both.
    not_found: u32,
    not_found_since: Option<Instant>,
    /// Fetch attempts that failed in a row.
    attempts: u32,
    /// When the last warning naming the id was logged.
    warned_at: Instant,
}

impl Failure {
    /// The bookkeeping after the fetch of an id failed with `error` at `now`, following the
    /// previous failure of that id (if any): the backoff doubles, a 404 extends the 404
    /// streak, anything else ends it.
    fn next(prev: Option<&Failure>, error: RegistryError, now: Instant) -> Failure {
        let backoff = prev.map_or(RETRY_FIRST, |p| (p.backoff * 2).min(RETRY_MAX));
        let (not_found, not_found_since) = match (&error, prev) {
            (RegistryError::NotFound(_), Some(p)) if p.not_found > 0 => {
                (p.not_found + 1, p.not_found_since.or(Some(now)))
            }
            (RegistryError::NotFound(_), _) => (1, Some(now)),
            _ => (0, None),
        };
        Failure {
            error,
            retry_at: now + backoff,
            backoff,
            since: prev.map_or(now, |p| p.since),
            not_found,
            not_found_since,
            attempts: prev.map_or(1, |p| p.attempts.saturating_add(1)),
            warned_at: prev.map_or(now, |p| p.warned_at),
        }
    }

    /// Whether the 404s are final under `policy` at `now`.
    fn not_found_is_final(&self, policy: NotFoundPolicy, now: Instant) -> bool {
        self.not_found >= policy.count
            && self
                .not_found_since
                .is_some_and(|s| now.saturating_duration_since(s) >= policy.after)
    }
}

/// First and last pause before re-asking the registry for an id that failed.
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Consecutive 404s after which an id is final (its records `undecodable`), provided they
/// span [`NOT_FOUND_FINAL_AFTER`]. A registry being restored from a backup, or a producer
/// registering the schema just after writing with it, answers 404 for seconds; a schema
/// deleted for good, or a topic written against another registry, answers it for ever.
pub const NOT_FOUND_FINAL_COUNT: u32 = 5;
/// How long an id must have answered nothing but 404 before it is final (with the backoff
/// capped at 30 s, some 10 to 15 attempts).
pub const NOT_FOUND_FINAL_AFTER: Duration = Duration::from_secs(5 * 60);
/// How often a warning names an id that still waits for its schema.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// When 404s for an id become final: after `count` consecutive ones spanning `after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotFoundPolicy {
    /// Consecutive 404s needed.
    pub count: u32,
    /// Time they must span.
    pub after: Duration,
}

impl Default for NotFoundPolicy {
    fn default() -> Self {
        Self {
            count: NOT_FOUND_FINAL_COUNT,
            after: NOT_FOUND_FINAL_AFTER,
        }
    }
}

/// One id that records wait for, as [`Registry::waiting_ids`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingId {
    /// The schema id.
    pub id: u32,
    /// The last fetch error, `None` before the first attempt ended.
    pub error: Option<String>,
    /// Failed attempts in a row.
    pub attempts: u32,
    /// Consecutive 404s (0 when the last error was something else).
    pub not_found: u32,
    /// Seconds since the first failed attempt.
    pub waiting_secs: u64,
}

/// Turns a fetched schema into what the decoder uses.
type Compile<S> = dyn Fn(u32, &RawSchema) -> Result<S, SchemaError> + Send + Sync;

/// The registry as one audit sees it: the client, the per-id cache of compiled schemas
/// (`S`: what the decoder compiles a [`RawSchema`] into) and the ids waiting to be fetched.
pub struct Registry<S> {
    client: RegistryClient,
    compile: Box<Compile<S>>,
    cache: RwLock<HashMap<u32, Entry<S>>>,
    wanted: Mutex<HashSet<u32>>,
    failures: Mutex<HashMap<u32, Failure>>,
    wake: tokio::sync::Notify,
    arrivals: tokio::sync::watch::Sender<u64>,
    /// The last fetch's outcome: `None` before any, else whether it succeeded (and why not).
    health: Mutex<Option<Result<(), String>>>,
    not_found: NotFoundPolicy,
}

impl<S> std::fmt::Debug for Registry<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("client", &self.client)
            .finish()
    }
}

impl<S: Send + Sync + 'static> Registry<S> {
    /// A registry of `client` whose schemas `compile` turns into `S`.
    pub fn new(
        client: RegistryClient,
        compile: impl Fn(u32, &RawSchema) -> Result<S, SchemaError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            client,
            compile: Box::new(compile),
            cache: RwLock::new(HashMap::new()),
            wanted: Mutex::new(HashSet::new()),
            failures: Mutex::new(HashMap::new()),
            wake: tokio::sync::Notify::new(),
            arrivals: tokio::sync::watch::channel(0).0,
            health: Mutex::new(None),
            not_found: NotFoundPolicy::default(),
        }
    }

    /// This registry with another rule for when 404s are final (tests; the daemon uses
    /// [`NotFoundPolicy::default`]).
    pub fn with_not_found_policy(mut self, policy: NotFoundPolicy) -> Self {
        self.not_found = policy;
        self
    }

    /// The cached schema of `id`, or [`Lookup::Waiting`]. Never blocks on the network and
    /// never asks the fetcher: this runs on the tailing thread for every record, most of
    /// them behind a held one whose id is all that is worth fetching ([`Self::want`]).
    pub fn lookup(&self, id: u32) -> Lookup<S> {
        self.lookup_cached(id).unwrap_or(Lookup::Waiting)
    }

    /// Asks the fetcher for `id` (idempotent; cheap when already asked). An id cached
    /// meanwhile (a record tagged before its schema arrived) moves [`Self::arrivals`]
    /// instead, so the record waiting for it is decoded at once.
    pub fn want(&self, id: u32) {
        if self.lookup_cached(id).is_some() {
            self.arrivals.send_modify(|n| *n += 1);
            return;
        }
        if let Ok(mut w) = self.wanted.lock()
            && w.insert(id)
        {
            self.wake.notify_one();
        }
    }

    /// Moves each time a schema enters the cache: waiting records can be decoded again.
    pub fn arrivals(&self) -> tokio::sync::watch::Receiver<u64> {
        self.arrivals.subscribe()
    }

    /// `None` before the first fetch; else the last fetch's outcome (the error's text).
    pub fn health(&self) -> Option<Result<(), String>> {
        self.health.lock().ok().and_then(|h| h.clone())
    }

    /// Ids asked for and not in the cache yet, with how long and why each has waited: the
    /// health of each id records wait for (the status board and the fetcher's warnings).
    pub fn waiting_ids(&self) -> Vec<WaitingId> {
        let wanted: Vec<u32> = self
            .wanted
            .lock()
            .map(|w| w.iter().copied().collect())
            .unwrap_or_default();
        let failures = self.failures.lock().ok();
        let now = Instant::now();
        let mut out: Vec<WaitingId> = wanted
            .into_iter()
            .map(|id| {
                let f = failures.as_ref().and_then(|f| f.get(&id));
                WaitingId {
                    id,
                    error: f.map(|f| f.error.to_string()),
                    attempts: f.map_or(0, |f| f.attempts),
                    not_found: f.map_or(0, |f| f.not_found),
                    waiting_secs: f.map_or(0, |f| now.saturating_duration_since(f.since).as_secs()),
                }
            })
            .collect();
        out.sort_by_key(|w| w.id);
        out
    }

    /// Ids asked for and not in the cache yet, with the last error of each (if any).
    pub fn waiting(&self) -> Vec<(u32, Option<String>)> {
        let wanted: Vec<u32> = self
            .wanted
            .lock()
            .map(|w| w.iter().copied().collect())
            .unwrap_or_default();
        let failures = self.failures.lock();
        let mut out: Vec<(u32, Option<String>)> = wanted
            .into_iter()
            .map(|id| {
                let e = failures
                    .as_ref()
                    .ok()
                    .and_then(|f| f.get(&id).map(|f| f.error.to_string()));
                (id, e)
            })
            .collect();
        out.sort();
        out
    }

    fn store(&self, id: u32, entry: Entry<S>) {
        if let Ok(mut c) = self.cache.write() {
            c.insert(id, entry);
        }
        if let Ok(mut w) = self.wanted.lock() {
            w.remove(&id);
        }
        if let Ok(mut f) = self.failures.lock() {
            f.remove(&id);
        }
        self.arrivals.send_modify(|n| *n += 1);
    }

    /// Fetches and compiles `id` once, caching the outcome; a fetch error is returned and
    /// not cached (the next call tries again).
    pub async fn resolve(&self, id: u32) -> Result<Lookup<S>, RegistryError> {
        if let Some(l) = self.lookup_cached(id) {
            return Ok(l);
        }
        let raw = match self.client.fetch(id).await {
            Ok(raw) => raw,
            Err(e) => {
                if let Ok(mut h) = self.health.lock() {
                    // Named by id: "unavailable" alone does not say which records wait.
                    *h = Some(Err(format!("schema id {id}: {e}")));
                }
                return Err(e);
            }
        };
        if let Ok(mut h) = self.health.lock() {
            *h = Some(Ok(()));
        }
        let entry = match (self.compile)(id, &raw) {
            Ok(s) => Entry::Ready(Arc::new(s)),
            Err(e) => {
                tracing::error!(schema_id = id, error = %e, "the schema registry served a schema the auditor cannot use: its records are undecodable");
                Entry::Broken(Arc::new(e))
            }
        };
        self.store(id, entry);
        Ok(self.lookup_cached(id).unwrap_or(Lookup::Waiting))
    }

    /// Compiles and caches a schema known without asking the registry (tests, a schema
    /// pinned by an operator tool); the same path a fetched schema takes.
    pub fn insert(&self, id: u32, raw: &RawSchema) {
        let entry = match (self.compile)(id, raw) {
            Ok(s) => Entry::Ready(Arc::new(s)),
            Err(e) => Entry::Broken(Arc::new(e)),
        };
        self.store(id, entry);
    }

    fn lookup_cached(&self, id: u32) -> Option<Lookup<S>> {
        let cache = self.cache.read().ok()?;
        match cache.get(&id)? {
            Entry::Ready(s) => Some(Lookup::Ready(s.clone())),
            Entry::Broken(e) => Some(Lookup::Broken(e.clone())),
        }
    }

    /// Notes a failed fetch of `id`: logs it by id (at once, then once a minute while it
    /// fails), and either schedules the retry (returned) or, for 404s that are final under
    /// the policy, caches the id as broken so its records are `undecodable`.
    fn failed(&self, id: u32, e: RegistryError) -> Option<Instant> {
        let now = Instant::now();
        let mut f = self.failures.lock().ok()?;
        let prev = f.get(&id);
        let first = prev.is_none();
        let mut next = Failure::next(prev, e, now);
        if next.not_found_is_final(self.not_found, now) {
            drop(f);
            let waited = next
                .not_found_since
                .map_or(0, |s| now.saturating_duration_since(s).as_secs());
            tracing::error!(
                schema_id = id,
                not_found = next.not_found,
                waited_secs = waited,
                "schema id {id} is not in the schema registry ({} consecutive 404s over {waited} s): its records are undecodable from now on",
                next.not_found
            );
            self.store(
                id,
                Entry::Broken(Arc::new(SchemaError {
                    id,
                    reason: format!(
                        "not in the schema registry: {} consecutive 404s over {waited} s",
                        next.not_found
                    ),
                })),
            );
            return None;
        }
        if first {
            tracing::warn!(schema_id = id, error = %next.error, "cannot fetch a schema: its records wait, unknown, and it is retried");
        } else if now.saturating_duration_since(next.warned_at) >= WARN_EVERY {
            next.warned_at = now;
            tracing::warn!(schema_id = id, error = %next.error, attempts = next.attempts,
                not_found = next.not_found, waiting_secs = now.saturating_duration_since(next.since).as_secs(),
                "schema id {id} still cannot be fetched: its partition's records wait, unknown");
        } else {
            tracing::debug!(schema_id = id, error = %next.error, "schema fetch retry failed");
        }
        let at = next.retry_at;
        f.insert(id, next);
        Some(at)
    }

    /// The audit's fetcher: fetches every wanted id, retrying failed ones with a backoff
    /// (500 ms doubling to 30 s), until `cancel`. The only place the daemon waits for the
    /// registry.
    pub async fn run_fetcher(self: Arc<Self>, cancel: tokio_util::sync::CancellationToken) {
        loop {
            let now = Instant::now();
            let ids: Vec<u32> = self
                .wanted
                .lock()
                .map(|w| w.iter().copied().collect())
                .unwrap_or_default();
            let mut next_retry: Option<Instant> = None;
            for id in ids {
                if cancel.is_cancelled() {
                    return;
                }
                let due_at = self
                    .failures
                    .lock()
                    .ok()
                    .and_then(|f| f.get(&id).map(|f| f.retry_at));
                if let Some(at) = due_at
                    && at > now
                {
                    next_retry = Some(next_retry.map_or(at, |n| n.min(at)));
                    continue;
                }
                match self.resolve(id).await {
                    Ok(_) => {
                        // Cached by another path (`check`'s resolve, an insert) since it was
                        // asked for: nothing was stored here, so it is still marked wanted.
                        if let Ok(mut w) = self.wanted.lock() {
                            w.remove(&id);
                        }
                        tracing::info!(schema_id = id, "schema fetched from the registry");
                    }
                    Err(e) => {
                        if let Some(at) = self.failed(id, e) {
                            next_retry = Some(next_retry.map_or(at, |n| n.min(at)));
                        }
                    }
                }
            }
            let sleep = next_retry
                .map(|at| at.saturating_duration_since(Instant::now()))
                .unwrap_or(RETRY_MAX);
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
            }
        }
    }
}

/// Test doubles of the registry, shared by the tests of the modules that use it.
#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// A registry config for `url` with nothing else set (tests: `http://127.0.0.1:9/` is a
    /// registry nobody answers).
    pub(crate) fn test_config(url: &str) -> SchemaRegistryConfig {
        SchemaRegistryConfig {
            url: url.into(),
            username: None,
            password: None,
            password_file: None,
            ca_file: None,
            timeout: Duration::from_secs(2),
        }
    }

    /// A registry that answers every request with `status` (and counts them).
    pub(crate) async fn answering(
        status: &'static str,
    ) -> (String, Arc<std::sync::atomic::AtomicU32>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/", listener.local_addr().expect("addr"));
        let hits = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let h = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let body = r#"{"error_code":40403,"message":"Schema not found"}"#;
                let resp = format!(
                    "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(resp.as_bytes()).await;
            }
        });
        (url, hits)
    }

    /// 404s are final after 3 of them, however short the time they span.
    pub(crate) const QUICK: NotFoundPolicy = NotFoundPolicy {
        count: 3,
        after: Duration::from_millis(1),
    };
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;

    #[test]
    fn frames_split_into_id_and_payload() {
        assert_eq!(
            split_frame(&[0, 0, 0, 1, 2, 9, 9]),
            Some((258, &[9u8, 9][..]))
        );
        assert_eq!(split_frame(&[0, 0, 0, 0, 7]), Some((7, &[][..])));
        assert_eq!(split_frame(&[0, 0, 0, 1]), None, "too short");
        assert_eq!(split_frame(&[1, 0, 0, 0, 1, 5]), None, "wrong magic");
        assert_eq!(split_frame(b"10.0.0.1|a"), None);
    }

    fn at(base: Instant, secs: u64) -> Instant {
        base + Duration::from_secs(secs)
    }

    #[test]
    fn only_404s_spanning_the_policy_are_final_and_an_unreachable_registry_never_is() {
        let policy = NotFoundPolicy::default();
        let t0 = Instant::now();
        let nf = || RegistryError::NotFound(9);
        let down = || RegistryError::Unavailable("connection refused".into());
        // Five 404s within a minute: a schema registered just after its records, not final.
        let mut f = Failure::next(None, nf(), t0);
        for s in 1..5 {
            f = Failure::next(Some(&f), nf(), at(t0, s * 10));
        }
        assert_eq!(f.not_found, 5);
        assert!(!f.not_found_is_final(policy, at(t0, 40)));
        // Still 404 five minutes after the first: final.
        f = Failure::next(Some(&f), nf(), at(t0, 300));
        assert!(f.not_found_is_final(policy, at(t0, 300)));
        // A registry down in between starts the streak again.
        let mut g = Failure::next(None, nf(), t0);
        for s in 1..10 {
            g = Failure::next(Some(&g), nf(), at(t0, s * 30));
        }
        g = Failure::next(Some(&g), down(), at(t0, 310));
        assert_eq!((g.not_found, g.not_found_since), (0, None));
        assert!(!g.not_found_is_final(policy, at(t0, 310)));
        g = Failure::next(Some(&g), nf(), at(t0, 320));
        assert!(!g.not_found_is_final(policy, at(t0, 320)));
        // Down for a day: retried for ever, never final.
        let mut h = Failure::next(None, down(), t0);
        for s in 1..3000 {
            h = Failure::next(Some(&h), down(), at(t0, s * 30));
        }
        assert!(!h.not_found_is_final(policy, at(t0, 90_000)));
        assert_eq!(h.backoff, RETRY_MAX);
        assert_eq!(h.attempts, 3000);
        assert_eq!(h.since, t0, "waiting since the first failure");
    }

    fn registry(url: &str, policy: NotFoundPolicy) -> Arc<Registry<()>> {
        let client = RegistryClient::new(&test_config(url)).expect("client");
        Arc::new(Registry::new(client, |_, _| Ok(())).with_not_found_policy(policy))
    }

    async fn wait_until(mut f: impl FnMut() -> bool) -> bool {
        for _ in 0..200 {
            if f() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    #[tokio::test]
    async fn an_id_answered_404_for_good_becomes_undecodable() {
        let (url, hits) = answering("404 Not Found").await;
        let r = registry(&url, QUICK);
        let cancel = tokio_util::sync::CancellationToken::new();
        tokio::spawn(r.clone().run_fetcher(cancel.clone()));
        let mut arrivals = r.arrivals();
        r.want(9);
        assert!(
            wait_until(|| matches!(r.lookup(9), Lookup::Broken(_))).await,
            "final after 3 consecutive 404s, not retried for ever"
        );
        assert!(
            arrivals.has_changed().unwrap_or(false),
            "held records are released"
        );
        arrivals.borrow_and_update();
        assert!(r.waiting_ids().is_empty(), "no longer wanted");
        let Lookup::Broken(e) = r.lookup(9) else {
            panic!("broken")
        };
        assert!(e.to_string().contains("3 consecutive 404s"), "{e}");
        let n = hits.load(std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(1600)).await;
        assert_eq!(
            hits.load(std::sync::atomic::Ordering::SeqCst),
            n,
            "not asked again"
        );
        cancel.cancel();
    }

    #[tokio::test]
    async fn a_registry_that_is_down_keeps_the_id_waiting_and_says_which() {
        let (url, _) = answering("503 Service Unavailable").await;
        let r = registry(&url, QUICK);
        let cancel = tokio_util::sync::CancellationToken::new();
        tokio::spawn(r.clone().run_fetcher(cancel.clone()));
        r.want(9);
        assert!(
            wait_until(|| r.waiting_ids().first().is_some_and(|w| w.attempts >= 4)).await,
            "retried: {:?}",
            r.waiting_ids()
        );
        assert!(matches!(r.lookup(9), Lookup::Waiting), "never final");
        let w = &r.waiting_ids()[0];
        assert_eq!((w.id, w.not_found), (9, 0));
        assert!(
            w.error.as_deref().is_some_and(|e| e.contains("503")),
            "{w:?}"
        );
        let health = r.health().and_then(Result::err).unwrap_or_default();
        assert!(
            health.starts_with("schema id 9:"),
            "the health names the id: {health}"
        );
        cancel.cancel();
    }

    #[test]
    fn lookup_asks_for_nothing_and_want_asks_once() {
        let r = registry("http://127.0.0.1:9/", QUICK);
        assert!(matches!(r.lookup(7), Lookup::Waiting));
        assert!(
            r.waiting().is_empty(),
            "the tailing thread's lookups fetch nothing"
        );
        r.want(7);
        r.want(7);
        assert_eq!(r.waiting(), vec![(7, None)]);
    }

    #[test]
    fn subjects_are_one_path_segment() {
        assert_eq!(utf8_percent_encode("a/b c:d"), "a%2Fb%20c%3Ad");
    }
}
