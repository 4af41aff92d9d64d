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
//! cache and, on a miss, queues the id for [`Registry::run_fetcher`] (a task of the audit)
//! and says so; the record waits, unknown, until [`Registry::arrivals`] moves. `check` and
//! `replay` are not on a hot path and await [`Registry::resolve`].

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
/// stays unknown, never filtered), except that a schema the registry served but the auditor
/// cannot use ([`SchemaError`]) is final and makes its records `undecodable`.
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
struct Failure {
    error: RegistryError,
    retry_at: Instant,
    backoff: Duration,
}

/// First and last pause before re-asking the registry for an id that failed.
const RETRY_FIRST: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

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
        }
    }

    /// The cached schema of `id`; on a miss the id is queued for the fetcher. Never blocks
    /// on the network: this runs on the tailing thread for every record.
    pub fn lookup(&self, id: u32) -> Lookup<S> {
        if let Ok(cache) = self.cache.read() {
            match cache.get(&id) {
                Some(Entry::Ready(s)) => return Lookup::Ready(s.clone()),
                Some(Entry::Broken(e)) => return Lookup::Broken(e.clone()),
                None => {}
            }
        }
        self.want(id);
        Lookup::Waiting
    }

    /// Asks the fetcher for `id` (idempotent; cheap when already asked).
    pub fn want(&self, id: u32) {
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
                    *h = Some(Err(e.to_string()));
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
                    Ok(_) => tracing::info!(schema_id = id, "schema fetched from the registry"),
                    Err(e) => {
                        let mut f = match self.failures.lock() {
                            Ok(f) => f,
                            Err(_) => continue,
                        };
                        let backoff = f
                            .get(&id)
                            .map_or(RETRY_FIRST, |p| (p.backoff * 2).min(RETRY_MAX));
                        let first = !f.contains_key(&id);
                        if first {
                            tracing::warn!(schema_id = id, error = %e, "cannot fetch a schema: its records wait, unknown, and it is retried");
                        } else {
                            tracing::debug!(schema_id = id, error = %e, "schema fetch retry failed");
                        }
                        let retry_at = Instant::now() + backoff;
                        next_retry = Some(next_retry.map_or(retry_at, |n| n.min(retry_at)));
                        f.insert(
                            id,
                            Failure {
                                error: e,
                                retry_at,
                                backoff,
                            },
                        );
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

#[cfg(test)]
mod tests {
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

    #[test]
    fn subjects_are_one_path_segment() {
        assert_eq!(utf8_percent_encode("a/b c:d"), "a%2Fb%20c%3Ad");
    }
}
