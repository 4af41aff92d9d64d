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
//! the first record each partition holds back ([`Registry::want`], from [`crate::audit::held`]),
//! never for the ids behind it, so a stuck id cannot make the fetcher's maps grow with every
//! id read after it. The record waits, unknown, until [`Registry::arrivals`] moves. `check`
//! and `replay` are not on a hot path and await [`Registry::resolve`].
//!
//! An id the registry answers 404 for (its own "not found": a body with an `error_code`
//! 40401-40499; another 404, a wrong URL path or a proxy, is an error like a 403) is retried
//! like an unreachable registry, but not for ever: after [`NOT_FOUND_FINAL_COUNT`] consecutive 404s spanning at least
//! [`NOT_FOUND_FINAL_AFTER`] the id is final — its records are `undecodable` (counted, and
//! watched by the coverage alert) and its partition goes on. A registry that is down (no
//! answer, 5xx) or refuses (401/403) never makes an id final: those records wait, unknown.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

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

mod client;
pub use client::RegistryClient;

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

/// When 404s for an id become final: after `count` consecutive ones spanning `after`; and
/// how often a given-up id is asked for again (`reprobe`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotFoundPolicy {
    /// Consecutive 404s needed.
    pub count: u32,
    /// Time they must span.
    pub after: Duration,
    /// How long after giving an id up (or after its last probe) the fetcher asks for it
    /// again, without holding any record for it.
    pub reprobe: Duration,
}

/// A given-up id is asked for again this often ([`NotFoundPolicy::reprobe`]).
pub const NOT_FOUND_REPROBE: Duration = Duration::from_secs(10 * 60);

impl Default for NotFoundPolicy {
    fn default() -> Self {
        Self {
            count: NOT_FOUND_FINAL_COUNT,
            after: NOT_FOUND_FINAL_AFTER,
            reprobe: NOT_FOUND_REPROBE,
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
    /// Ids given up after 404s, with when they were last asked for: a registry restored
    /// from a backup, or a replica catching up, serves them again, and their records must
    /// not stay undecodable until a restart.
    given_up: Mutex<HashMap<u32, Instant>>,
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
            given_up: Mutex::new(HashMap::new()),
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
        if let Ok(mut g) = self.given_up.lock() {
            g.remove(&id);
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
                "schema id {id} is not in the schema registry ({} consecutive 404s over {waited} s): its records are undecodable until it is served again (asked for every {} s)",
                next.not_found,
                self.not_found.reprobe.as_secs()
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
            if let Ok(mut g) = self.given_up.lock() {
                g.insert(id, now);
            }
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

    /// Asks again for each given-up id whose [`NotFoundPolicy::reprobe`] time has come; one
    /// served now replaces its broken entry, so its records decode from then on (those
    /// read meanwhile stay undecodable: counted, never held). Returns the next probe time.
    async fn reprobe_given_up(&self, now: Instant) -> Option<Instant> {
        let every = self.not_found.reprobe;
        let due: Vec<u32> = self
            .given_up
            .lock()
            .map(|g| {
                g.iter()
                    .filter(|(_, at)| **at + every <= now)
                    .map(|(id, _)| *id)
                    .collect()
            })
            .unwrap_or_default();
        for id in due {
            match self.client.fetch(id).await {
                Ok(raw) => {
                    tracing::warn!(
                        schema_id = id,
                        "schema id {id} is served by the schema registry again: its records decode from now on"
                    );
                    self.insert(id, &raw);
                }
                Err(e) => {
                    tracing::debug!(schema_id = id, error = %e, "a given-up schema id is still not served");
                    if let Ok(mut g) = self.given_up.lock() {
                        g.insert(id, Instant::now());
                    }
                }
            }
        }
        self.given_up
            .lock()
            .ok()
            .and_then(|g| g.values().map(|at| *at + every).min())
    }

    /// The audit's fetcher: fetches every wanted id, retrying failed ones with a backoff
    /// (500 ms doubling to 30 s), and asks for given-up ids again now and then, until
    /// `cancel`. The only place the daemon waits for the registry.
    pub async fn run_fetcher(self: Arc<Self>, cancel: tokio_util::sync::CancellationToken) {
        loop {
            let now = Instant::now();
            let mut next_probe = self.reprobe_given_up(now).await;
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
            // An id given up during this pass is probed from its own time on.
            next_probe = next_probe.or_else(|| {
                self.given_up
                    .lock()
                    .ok()
                    .and_then(|g| g.values().map(|at| *at + self.not_found.reprobe).min())
            });
            let next = match (next_retry, next_probe) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let sleep = next
                .map(|at| at.saturating_duration_since(Instant::now()))
                .unwrap_or(RETRY_MAX)
                .min(RETRY_MAX);
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod test_support;

#[cfg(test)]
mod tests;
