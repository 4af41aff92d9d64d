//! The HTTP server (`server.listen`): Prometheus scrape endpoint, health and readiness
//! probes, and the JSON API over the gap store and the live status board.
//!
//! | route | answer |
//! |---|---|
//! | `GET /metrics` | Prometheus text format 0.0.4 |
//! | `GET /healthz` | 200 `ok` while the process runs |
//! | `GET /readyz` | 200 when Kafka and every sink answered recently (and the last schema fetch succeeded), else 503 saying what is stale |
//! | `GET /api/gaps?state=open\|all\|<state>&audit=NAME` | JSON array of gaps, newest first |
//! | `GET /api/status` | `{"audits": [...]}` |
//! | `GET /api/completeness?audit=NAME&until=RFC3339` | `{"complete", "complete_until", "blocking", ...}` ([`crate::completeness::Answer`]) |
//!
//! Unknown paths get 404, other methods on a known path 405 (`HEAD` is served like `GET`,
//! as load balancers probe with it). The API is read-only: every method but `GET`/`HEAD`
//! anywhere under `/api/` is 405, so nothing reachable over HTTP changes a gap (`ack` is a
//! CLI command on the host). The server is plain hyper 1 over HTTP/1.1: a scrape endpoint
//! needs no framework, and fewer dependencies means less to audit in a sidecar.
//!
//! With `server.api_token` set, every request under `/api/` must carry
//! `Authorization: Bearer TOKEN`; otherwise it gets 401 with `WWW-Authenticate: Bearer`
//! before anything else is looked at (method, path, query), so an unauthenticated client
//! learns nothing but that a token is needed. `/metrics`, `/healthz` and `/readyz` stay
//! open: Prometheus and orchestrator probes rarely carry credentials, and they expose no
//! record contents. The token is compared in constant time (`subtle`) and never logged.

use crate::config::Secret;
use crate::metrics::Metrics;
use crate::status::StatusBoard;
use crate::store::{GapFilter, StateFilter, Store};
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Serialize;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How long a client may take to send its request headers: an idle or slow client must not
/// pin a connection (and its task) forever.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// How long shutdown waits for in-flight requests before giving up on them; the process
/// exit must not hang on a stuck client.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Back-off after a failed `accept` (e.g. EMFILE), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Content type of the Prometheus text exposition format.
const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What the handlers need. Cheap to clone: every field is shared.
#[derive(Clone)]
pub struct HttpState {
    /// Metric families rendered by `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Live status for `/api/status` and `/readyz`.
    pub status: StatusBoard,
    /// Gap store for `/api/gaps`.
    pub store: Arc<Store>,
    /// `server.api_token`: when set, `/api/*` requires `Authorization: Bearer` with it.
    pub api_token: Option<Secret>,
}

/// Serves HTTP on `listener` until `shutdown` is cancelled, then stops accepting, lets
/// in-flight requests finish (closing idle keep-alive connections at once, waiting at most
/// 10 s) and returns. Takes a bound listener so tests can bind port 0 and callers report
/// bind errors with the configured address. Failed accepts are logged and retried, never
/// fatal: the scrape endpoint must outlive a burst of connection errors.
pub async fn serve(
    listener: TcpListener,
    state: HttpState,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let connections = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(error = %e, "http accept failed");
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                }
            }
        };
        let state = state.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            let service = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(handle(&state, req).await) }
            });
            let mut builder = http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            let result = tokio::select! {
                result = conn.as_mut() => result,
                _ = shutdown.cancelled() => {
                    // Finish the request in flight, then close; idle connections close now.
                    conn.as_mut().graceful_shutdown();
                    conn.await
                }
            };
            if let Err(e) = result {
                tracing::debug!(%peer, error = %e, "http connection ended with an error");
            }
        });
    }
    drop(listener); // stop accepting before draining: new clients get a refusal, not a hang
    connections.close();
    if tokio::time::timeout(DRAIN_TIMEOUT, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            remaining = connections.len(),
            "http shutdown: gave up waiting for in-flight requests"
        );
    }
    Ok(())
}

/// True for every path the API owns: `/api` itself and anything below it.
fn is_api_path(path: &str) -> bool {
    path == "/api" || path.starts_with("/api/")
}

/// Why a request under `/api/` was refused; the variants differ only in the
/// `WWW-Authenticate` error code (RFC 6750 section 3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AuthFailure {
    /// No `Authorization: Bearer` header at all.
    Missing,
    /// A header that is not a bearer token, or the wrong token.
    Invalid,
}

/// Checks the request's bearer token against `expected`. The comparison is constant time
/// over the bytes (only the length can be learned from timing), so the token cannot be
/// guessed byte by byte.
fn check_bearer(headers: &hyper::HeaderMap, expected: &Secret) -> Result<(), AuthFailure> {
    use subtle::ConstantTimeEq;
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or(AuthFailure::Missing)?;
    let value = value.as_bytes();
    // The scheme name is case-insensitive (RFC 7235 section 2.1); one or more spaces follow.
    let (scheme, token) = match value.iter().position(|b| *b == b' ') {
        Some(at) => (&value[..at], &value[at..]),
        None => return Err(AuthFailure::Invalid),
    };
    if !scheme.eq_ignore_ascii_case(b"bearer") {
        return Err(AuthFailure::Invalid);
    }
    let token = token.trim_ascii();
    if bool::from(token.ct_eq(expected.expose().as_bytes())) {
        Ok(())
    } else {
        Err(AuthFailure::Invalid)
    }
}

/// 401 with the challenge a client needs to retry with a token.
fn unauthorized(failure: AuthFailure) -> Response<Full<Bytes>> {
    let (challenge, message) = match failure {
        AuthFailure::Missing => (
            r#"Bearer realm="gap-auditor""#,
            "this endpoint needs Authorization: Bearer <server.api_token>",
        ),
        AuthFailure::Invalid => (
            r#"Bearer realm="gap-auditor", error="invalid_token""#,
            "invalid bearer token",
        ),
    };
    let mut resp = json(
        StatusCode::UNAUTHORIZED,
        &ApiError::new(None, message.into()),
    );
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    resp
}

/// 405 naming the methods every route accepts.
fn method_not_allowed() -> Response<Full<Bytes>> {
    let mut resp = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
    resp
}

/// Routes one request. Never fails: every error is an HTTP answer.
async fn handle(state: &HttpState, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let api = is_api_path(req.uri().path());
    if api
        && let Some(token) = &state.api_token
        && let Err(failure) = check_bearer(req.headers(), token)
    {
        // The presented value is never logged: it may be a real token sent to the wrong
        // place, or a near miss of ours.
        tracing::debug!(path = req.uri().path(), ?failure, "api request refused");
        return unauthorized(failure);
    }
    let method = req.method();
    if method != Method::GET && method != Method::HEAD {
        // Read-only: everything under /api/, known route or not, and the probes.
        return match req.uri().path() {
            _ if api => method_not_allowed(),
            "/metrics" | "/healthz" | "/readyz" => method_not_allowed(),
            _ => text(StatusCode::NOT_FOUND, "not found\n"),
        };
    }
    match req.uri().path() {
        "/metrics" => {
            let body = state.metrics.render();
            let mut resp = Response::new(Full::new(Bytes::from(body)));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(METRICS_CONTENT_TYPE),
            );
            resp
        }
        "/healthz" => text(StatusCode::OK, "ok"),
        "/readyz" => {
            let reasons = state.status.not_ready_reasons(chrono::Utc::now());
            if reasons.is_empty() {
                text(StatusCode::OK, "ready\n")
            } else {
                text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!("not ready:\n{}\n", reasons.join("\n")),
                )
            }
        }
        "/api/gaps" => api_gaps(state, req.uri().query().unwrap_or("")).await,
        "/api/status" => json(
            StatusCode::OK,
            &serde_json::json!({ "audits": state.status.snapshot() }),
        ),
        "/api/completeness" => api_completeness(state, req.uri().query().unwrap_or("")),
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// `GET /api/gaps`: parses the (percent-encoded) query, reads the store on the blocking
/// pool — SQLite calls block and may wait up to the busy timeout for a CLI's write lock.
async fn api_gaps(state: &HttpState, query: &str) -> Response<Full<Bytes>> {
    let filter = match parse_gap_query(query) {
        Ok(filter) => filter,
        Err(bad) => return json(StatusCode::BAD_REQUEST, &bad),
    };
    let store = Arc::clone(&state.store);
    match tokio::task::spawn_blocking(move || store.list_gaps(&filter)).await {
        Ok(Ok(gaps)) => json(StatusCode::OK, &gaps),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "api/gaps: store read failed");
            json(
                StatusCode::INTERNAL_SERVER_ERROR,
                &ApiError::new(None, e.to_string()),
            )
        }
        Err(e) => {
            tracing::error!(error = %e, "api/gaps: store task failed");
            json(
                StatusCode::INTERNAL_SERVER_ERROR,
                &ApiError::new(None, "store task failed".into()),
            )
        }
    }
}

/// `GET /api/completeness`: answered from the round last published on the status board (at
/// most one verify interval old), so a sensor polling it costs the audit nothing.
fn api_completeness(state: &HttpState, query: &str) -> Response<Full<Bytes>> {
    let q = match parse_completeness_query(query) {
        Ok(q) => q,
        Err(bad) => return json(StatusCode::BAD_REQUEST, &bad),
    };
    let audits = state.status.audits();
    let audit = match q.audit {
        Some(a) => a,
        // One audit needs no name; with several, guessing would answer the wrong question.
        None if audits.len() == 1 => audits[0].clone(),
        None => {
            return json(
                StatusCode::BAD_REQUEST,
                &serde_json::json!({
                    "error": "query parameter `audit` is required: this process runs several audits",
                    "parameter": "audit",
                    "audits": audits,
                }),
            );
        }
    };
    let Some(c) = state.status.completeness(&audit) else {
        // `audits` tells a sensor whether the name is wrong (it lists others) or the daemon
        // is still starting (empty).
        return json(
            StatusCode::NOT_FOUND,
            &serde_json::json!({
                "error": format!("no audit {audit:?} in this process"),
                "parameter": "audit",
                "audits": audits,
            }),
        );
    };
    let until = q
        .until_ms
        .unwrap_or_else(|| chrono::Utc::now().timestamp_millis());
    json(
        StatusCode::OK,
        &crate::completeness::answer(&audit, &c, until),
    )
}

/// The parameters of `/api/completeness`.
#[derive(Debug, PartialEq, Eq)]
struct CompletenessQuery {
    audit: Option<String>,
    /// `None`: now.
    until_ms: Option<i64>,
}

fn parse_completeness_query(query: &str) -> Result<CompletenessQuery, ApiError> {
    let mut q = CompletenessQuery {
        audit: None,
        until_ms: None,
    };
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "audit" => q.audit = (!value.is_empty()).then(|| value.into_owned()),
            "until" if !value.is_empty() => {
                q.until_ms = Some(parse_time(&value).ok_or_else(|| {
                    ApiError::new(
                        Some("until"),
                        format!(
                            "invalid value {value:?} for query parameter `until`: expected an \
                             RFC 3339 time such as 2024-05-01T12:00:00Z (percent-encode a `+` \
                             offset as %2B)"
                        ),
                    )
                })?);
            }
            _ => {}
        }
    }
    Ok(q)
}

/// RFC 3339, in ms. A `+hh:mm` offset sent unencoded arrives as a space (form decoding):
/// taken back, since nothing else can have been meant.
fn parse_time(s: &str) -> Option<i64> {
    let parse = |s: &str| chrono::DateTime::parse_from_rfc3339(s.trim()).ok();
    parse(s)
        .or_else(|| parse(&s.trim().replace(' ', "+")))
        .map(|t| t.timestamp_millis())
}

/// JSON error body: `{"error": "...", "parameter": "state"}`.
#[derive(Debug, Serialize, PartialEq, Eq)]
struct ApiError {
    error: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameter: Option<&'static str>,
}

impl ApiError {
    fn new(parameter: Option<&'static str>, error: String) -> ApiError {
        ApiError { error, parameter }
    }
}

/// Parses `state` (default `open`) and `audit` (empty means every audit). Unknown
/// parameters are ignored, as HTTP APIs conventionally do; a repeated parameter keeps its
/// last value.
fn parse_gap_query(query: &str) -> Result<GapFilter, ApiError> {
    let mut filter = GapFilter {
        state: StateFilter::Unresolved,
        audit: None,
    };
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "state" => {
                filter.state = StateFilter::parse(&value).ok_or_else(|| {
                    ApiError::new(
                        Some("state"),
                        format!(
                            "invalid value {value:?} for query parameter `state`: expected open, \
                             all, late, repaired, unrecoverable or acknowledged"
                        ),
                    )
                })?;
            }
            "audit" => filter.audit = (!value.is_empty()).then(|| value.into_owned()),
            _ => {}
        }
    }
    Ok(filter)
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body.to_owned())));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn json<T: Serialize + ?Sized>(status: StatusCode, value: &T) -> Response<Full<Bytes>> {
    let (status, body) = match serde_json::to_vec(value) {
        Ok(body) => (status, body),
        Err(e) => {
            tracing::error!(error = %e, "cannot serialize JSON response");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                br#"{"error":"serialization failed"}"#.to_vec(),
            )
        }
    };
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // Live data: a proxy must not serve yesterday's gap list.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gap::{Gap, GapState};
    use crate::status::{AuditStatus, PartitionStatus, SinkState};
    use chrono::{TimeZone, Utc};
    use serde_json::Value;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::task::JoinHandle;

    struct Server {
        addr: SocketAddr,
        state: HttpState,
        shutdown: CancellationToken,
        task: JoinHandle<std::io::Result<()>>,
        _dir: tempfile::TempDir,
    }

    async fn start() -> Server {
        start_with(None).await
    }

    async fn start_with(api_token: Option<Secret>) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let state = HttpState {
            metrics: Arc::new(Metrics::new()),
            status: StatusBoard::new(),
            store: Arc::new(Store::open(dir.path()).unwrap()),
            api_token,
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(serve(listener, state.clone(), shutdown.clone()));
        Server {
            addr,
            state,
            shutdown,
            task,
            _dir: dir,
        }
    }

    struct Reply {
        status: u16,
        headers: String,
        body: String,
    }

    impl Reply {
        fn json(&self) -> Value {
            serde_json::from_str(&self.body)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
        }
    }

    /// A minimal HTTP/1.1 client: one request per connection, `Connection: close`.
    async fn request(addr: SocketAddr, method: &str, target: &str) -> Reply {
        request_with(addr, method, target, "").await
    }

    /// Like [`request`], with extra header lines (each ending in `\r\n`).
    async fn request_with(addr: SocketAddr, method: &str, target: &str, headers: &str) -> Reply {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let req = format!(
            "{method} {target} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n{headers}\r\n"
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut raw))
            .await
            .expect("response in time")
            .unwrap();
        let raw = String::from_utf8(raw).unwrap();
        let (head, body) = raw.split_once("\r\n\r\n").expect("header/body separator");
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        Reply {
            status,
            headers: head.to_ascii_lowercase(),
            body: body.to_string(),
        }
    }

    async fn get(addr: SocketAddr, target: &str) -> Reply {
        request(addr, "GET", target).await
    }

    fn sample_gap(audit: &str, first: i64, state: GapState) -> Gap {
        let t = Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap();
        Gap {
            id: Gap::make_id(audit, "test", 0, first),
            audit: audit.to_string(),
            topic: "test".to_string(),
            partition: 0,
            first_offset: first,
            last_offset: first + 4,
            missing_records: 5,
            size_known: true,
            first_timestamp: Some(t),
            last_timestamp: None,
            detected_at: t + chrono::TimeDelta::seconds(first),
            state,
            unrecoverable_at: Some(t + chrono::TimeDelta::days(7)),
            ack_reason: None,
            cause: Default::default(),
            pipeline_commit_from: None,
            pipeline_commit_to: None,
            pipeline_commit_at: None,
            shared_key: false,
        }
    }

    fn audit_status(audit: &str, ok_at: Option<chrono::DateTime<Utc>>) -> AuditStatus {
        AuditStatus {
            audit: audit.to_string(),
            consumer_group: "gap-auditor".to_string(),
            pipeline_group: None,
            sink_kind: "doris".to_string(),
            sink_state: SinkState::Up,
            sink_error: None,
            last_sink_ok: ok_at,
            last_kafka_ok: ok_at,
            verify_interval_ms: 5_000,
            schema_registry_error: None,
            partitions: vec![PartitionStatus {
                topic: "test".to_string(),
                partition: 0,
                consumed: 100,
                settled: 90,
                pipeline_committed: Some(95),
                log_end: Some(100),
                log_start: None,
                pending: 10,
                missing: 0,
                paused: false,
                awaiting_schema: 0,
            }],
            completeness: Default::default(),
        }
    }

    /// The seed incident as the ledgers would publish it: the gap {2, 3} of partition 0
    /// (first record at 12:00:02), records of partition 1 pending since 12:00:05.
    fn seed_completeness(audit: &str) -> crate::completeness::AuditCompleteness {
        use crate::completeness::{
            BlockingGap, LedgerCompleteness, PartitionInput, Since, evaluate,
        };
        let t0 = Utc
            .with_ymd_and_hms(2024, 5, 1, 12, 0, 0)
            .unwrap()
            .timestamp_millis();
        let p0 = LedgerCompleteness {
            gaps: vec![BlockingGap {
                first: 2,
                since: Since::At(t0 + 2_000),
                missing: 2,
                state: GapState::Open,
            }],
            blocking_gaps: 1,
            newest_ts: Some(t0 + 5_000),
            ..Default::default()
        };
        let p1 = LedgerCompleteness {
            pending: Some(Since::At(t0 + 5_000)),
            newest_ts: Some(t0 + 6_000),
            ..Default::default()
        };
        let part = |partition, ledger| PartitionInput {
            topic: "test".to_string(),
            partition,
            ledger,
            caught_up: true,
        };
        evaluate(audit, &[part(0, p0), part(1, p1)], t0 + 60_000, 3_000)
    }

    #[tokio::test]
    async fn health_metrics_and_errors() {
        let srv = start().await;
        let r = get(srv.addr, "/healthz").await;
        assert_eq!((r.status, r.body.as_str()), (200, "ok"));

        srv.state
            .metrics
            .records_lost
            .with_label_values(&["a", "t", "0"])
            .inc_by(3);
        let r = get(srv.addr, "/metrics").await;
        assert_eq!(r.status, 200);
        assert!(
            r.headers
                .contains("content-type: text/plain; version=0.0.4"),
            "{}",
            r.headers
        );
        assert!(r.body.contains("# TYPE gap_auditor_build_info gauge"));
        assert!(
            r.body.contains(
                "gap_auditor_records_lost_total{audit=\"a\",partition=\"0\",topic=\"t\"} 3"
            )
        );

        assert_eq!(get(srv.addr, "/nope").await.status, 404);
        assert_eq!(get(srv.addr, "/metrics/").await.status, 404);
        let r = request(srv.addr, "POST", "/api/gaps").await;
        assert_eq!(r.status, 405);
        assert!(r.headers.contains("allow: get, head"));
        assert_eq!(request(srv.addr, "DELETE", "/metrics").await.status, 405);
        let r = request(srv.addr, "HEAD", "/healthz").await;
        assert_eq!((r.status, r.body.as_str()), (200, ""));
        srv.shutdown.cancel();
    }

    #[tokio::test]
    async fn api_gaps_fields_and_filters() {
        let srv = start().await;
        let open = sample_gap("dns logs", 10, GapState::Open);
        let late = sample_gap("dns logs", 50, GapState::Late);
        let other = sample_gap("other", 10, GapState::Open);
        srv.state
            .store
            .commit_round("dns logs", &[open.clone(), late.clone()], &[])
            .unwrap();
        srv.state
            .store
            .commit_round("other", std::slice::from_ref(&other), &[])
            .unwrap();

        // Default: unresolved gaps of every audit.
        let r = get(srv.addr, "/api/gaps").await;
        assert_eq!(r.status, 200);
        assert!(r.headers.contains("content-type: application/json"));
        let v = r.json();
        let arr = v.as_array().unwrap();
        assert_eq!(arr.len(), 2);
        let g = arr
            .iter()
            .find(|g| g["id"] == open.id.as_str())
            .unwrap()
            .as_object()
            .unwrap();
        let mut keys: Vec<&str> = g.keys().map(String::as_str).collect();
        keys.sort_unstable();
        let mut want = vec![
            "id",
            "audit",
            "topic",
            "partition",
            "first_offset",
            "last_offset",
            "missing_records",
            "first_timestamp",
            "last_timestamp",
            "detected_at",
            "state",
            "unrecoverable_at",
            "size_known",
            "ack_reason",
            // Root cause (issue 6): the pipeline commit step that passed over the gap.
            "cause",
            "pipeline_commit_from",
            "pipeline_commit_to",
            "pipeline_commit_at",
            // key_columns: a missing record's key was shared by other records.
            "shared_key",
        ];
        want.sort_unstable();
        assert_eq!(keys, want);
        assert_eq!(g["audit"], "dns logs");
        assert_eq!(g["partition"], 0);
        assert_eq!(g["first_offset"], 10);
        assert_eq!(g["last_offset"], 14);
        assert_eq!(g["missing_records"], 5);
        assert_eq!(g["state"], "open");
        assert_eq!(g["first_timestamp"], "2024-05-01T12:00:00Z");
        assert_eq!(g["last_timestamp"], Value::Null);
        assert_eq!(g["unrecoverable_at"], "2024-05-08T12:00:00Z");

        // Percent-decoded audit name, state filters.
        let ids = |v: Value| -> Vec<String> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|g| g["id"].as_str().unwrap().to_string())
                .collect()
        };
        let r = get(srv.addr, "/api/gaps?audit=dns%20logs&state=all").await;
        assert_eq!(ids(r.json()), vec![late.id.clone(), open.id.clone()]);
        let r = get(srv.addr, "/api/gaps?state=late&audit=dns+logs").await;
        assert_eq!(ids(r.json()), vec![late.id.clone()]);
        let r = get(srv.addr, "/api/gaps?state=%6Fpen&audit=other").await;
        assert_eq!(ids(r.json()), vec![other.id.clone()]);
        let r = get(srv.addr, "/api/gaps?state=acknowledged").await;
        assert_eq!(r.json(), serde_json::json!([]));

        // A bad state is a 400 naming the parameter.
        let r = get(srv.addr, "/api/gaps?state=bogus%27").await;
        assert_eq!(r.status, 400);
        let e = r.json();
        assert_eq!(e["parameter"], "state");
        assert!(e["error"].as_str().unwrap().contains("state"), "{e}");
        srv.shutdown.cancel();
    }

    /// Every method but GET/HEAD, on every path under /api (known or not), is 405 and
    /// changes nothing in the store.
    #[tokio::test]
    async fn api_is_read_only() {
        let srv = start().await;
        let gap = sample_gap("a", 10, GapState::Open);
        srv.state
            .store
            .commit_round("a", std::slice::from_ref(&gap), &[])
            .unwrap();
        let before = get(srv.addr, "/api/gaps?state=all").await.body;
        for method in ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "ACK"] {
            for path in [
                "/api",
                "/api/",
                "/api/gaps",
                "/api/gaps?state=all",
                "/api/status",
                "/api/ack",
                &format!("/api/gaps/{}", gap.id),
            ] {
                let r = request_with(
                    srv.addr,
                    method,
                    path,
                    "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
                )
                .await;
                assert_eq!(r.status, 405, "{method} {path}: {}", r.body);
                assert!(r.headers.contains("allow: get, head"), "{}", r.headers);
            }
        }
        assert_eq!(get(srv.addr, "/api/gaps?state=all").await.body, before);
        srv.shutdown.cancel();
    }

    #[tokio::test]
    async fn api_token_guards_api_only() {
        const TOKEN: &str = "s3cr3t-T0ken_with.symbols~+/=";
        let srv = start_with(Some(Secret::new(TOKEN))).await;
        let auth = |value: &str| format!("Authorization: {value}\r\n");

        // No header: 401 with a plain Bearer challenge, before method or path matter.
        for (method, path) in [
            ("GET", "/api/status"),
            ("GET", "/api/gaps?state=all"),
            ("HEAD", "/api/gaps"),
            ("GET", "/api/nope"),
            ("POST", "/api/gaps"),
        ] {
            let r = request(srv.addr, method, path).await;
            assert_eq!(r.status, 401, "{method} {path}");
            assert!(
                r.headers
                    .contains("www-authenticate: bearer realm=\"gap-auditor\""),
                "{}",
                r.headers
            );
        }
        // Wrong tokens: a prefix, an extension, another case, another scheme, empty.
        let wrong = [
            auth(&format!("Bearer {}", &TOKEN[..TOKEN.len() - 1])),
            auth(&format!("Bearer {TOKEN}x")),
            auth(&format!("Bearer {}", TOKEN.to_uppercase())),
            auth(&format!("Basic {TOKEN}")),
            auth(&format!("Token {TOKEN}")),
            auth("Bearer"),
            auth("Bearer "),
            auth(TOKEN),
        ];
        for header in &wrong {
            let r = request_with(srv.addr, "GET", "/api/status", header).await;
            assert_eq!(r.status, 401, "{header}");
            assert!(
                r.headers.contains("error=\"invalid_token\""),
                "{}",
                r.headers
            );
            assert!(!r.body.contains(TOKEN) && !r.headers.contains(&TOKEN.to_lowercase()));
        }
        // The right token, with any case of the scheme and extra spaces.
        for header in [
            auth(&format!("Bearer {TOKEN}")),
            auth(&format!("bearer {TOKEN}")),
            auth(&format!("BEARER   {TOKEN}")),
        ] {
            let r = request_with(srv.addr, "GET", "/api/status", &header).await;
            assert_eq!(r.status, 200, "{header}: {}", r.body);
            assert_eq!(r.json(), serde_json::json!({ "audits": [] }));
            let r = request_with(srv.addr, "GET", "/api/gaps", &header).await;
            assert_eq!(r.status, 200, "{header}: {}", r.body);
            // Authenticated is still read-only.
            let r = request_with(srv.addr, "DELETE", "/api/gaps", &header).await;
            assert_eq!(r.status, 405);
        }
        // Scrapes and probes stay open.
        assert_eq!(get(srv.addr, "/metrics").await.status, 200);
        assert_eq!(get(srv.addr, "/healthz").await.status, 200);
        assert_eq!(get(srv.addr, "/readyz").await.status, 503, "no audit yet");
        assert_eq!(get(srv.addr, "/nope").await.status, 404);
        srv.shutdown.cancel();
    }

    #[test]
    fn bearer_parsing() {
        let token = Secret::new("abc");
        let mut h = hyper::HeaderMap::new();
        assert_eq!(check_bearer(&h, &token), Err(AuthFailure::Missing));
        for (value, want) in [
            ("Bearer abc", Ok(())),
            ("bEaReR abc ", Ok(())),
            ("Bearer  abc", Ok(())),
            ("Bearer ab", Err(AuthFailure::Invalid)),
            ("Bearer abcd", Err(AuthFailure::Invalid)),
            ("Bearer a bc", Err(AuthFailure::Invalid)),
            ("Bearerabc", Err(AuthFailure::Invalid)),
            ("Basic abc", Err(AuthFailure::Invalid)),
            ("", Err(AuthFailure::Invalid)),
        ] {
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
            assert_eq!(check_bearer(&h, &token), want, "{value:?}");
        }
        // Non-UTF-8 header bytes are compared as bytes, never panic.
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_bytes(b"Bearer \xff\xfe").unwrap(),
        );
        assert_eq!(check_bearer(&h, &token), Err(AuthFailure::Invalid));
    }

    #[tokio::test]
    async fn readyz_and_status() {
        let srv = start().await;
        let r = get(srv.addr, "/readyz").await;
        assert_eq!(r.status, 503);
        assert!(r.body.contains("no audit"), "{}", r.body);
        let r = get(srv.addr, "/api/status").await;
        assert_eq!(r.json(), serde_json::json!({ "audits": [] }));

        srv.state.status.update(audit_status("dns_logs", None));
        let r = get(srv.addr, "/readyz").await;
        assert_eq!(r.status, 503);
        assert!(
            r.body.contains("dns_logs") && r.body.contains("Kafka"),
            "{}",
            r.body
        );

        srv.state
            .status
            .update(audit_status("dns_logs", Some(Utc::now())));
        let r = get(srv.addr, "/readyz").await;
        assert_eq!(r.status, 200, "{}", r.body);

        let v = get(srv.addr, "/api/status").await.json();
        let a = &v["audits"][0];
        assert_eq!(a["audit"], "dns_logs");
        assert_eq!(a["sink_state"], "up");
        let p = &a["partitions"][0];
        assert_eq!(
            (p["consumed"].as_i64(), p["settled"].as_i64()),
            (Some(100), Some(90))
        );
        assert_eq!(p["pipeline_committed"], 95);
        assert_eq!(p["log_end"], 100);
        srv.shutdown.cancel();
    }

    /// The contract's fields; `until` percent-encoded or not; an unknown audit is a 404
    /// listing the known ones; a bad `until` a 400 naming it; one audit needs no name.
    #[tokio::test]
    async fn api_completeness_answers_for_an_until() {
        let srv = start().await;
        let r = get(srv.addr, "/api/completeness?audit=dns_logs").await;
        assert_eq!(r.status, 404, "nothing published yet");
        assert_eq!(r.json()["audits"], serde_json::json!([]));

        let mut st = audit_status("dns_logs", Some(Utc::now()));
        st.completeness = seed_completeness("dns_logs");
        srv.state.status.update(st);

        let v = get(
            srv.addr,
            "/api/completeness?audit=dns_logs&until=2024-05-01T12:00:02Z",
        )
        .await
        .json();
        assert_eq!(v["complete"], true, "{v}");
        assert_eq!(v["complete_until"], "2024-05-01T12:00:02Z");
        assert_eq!(v["blocking"], serde_json::json!([]));

        // 14:00:03+02:00 is 12:00:03Z; the `+` sent raw decodes as a space.
        for until in ["2024-05-01T14:00:03%2B02:00", "2024-05-01T14:00:03+02:00"] {
            let r = get(srv.addr, &format!("/api/completeness?until={until}")).await;
            assert_eq!(r.status, 200, "{}", r.body);
            let v = r.json();
            assert_eq!(v["complete"], false);
            assert_eq!(v["until"], "2024-05-01T12:00:03Z");
            assert_eq!(v["blocking"], serde_json::json!(["dns_logs:test:0:2"]));
            assert_eq!(v["blockers"][0]["state"], "open");
        }
        let v = get(
            srv.addr,
            "/api/completeness?audit=dns_logs&until=2024-05-01T12:00:06Z",
        )
        .await
        .json();
        assert_eq!(
            v["blocking"],
            serde_json::json!(["dns_logs:test:0:2", "pending", "pending:test-1"])
        );
        assert!(
            v["reason"].as_str().unwrap().contains("blocked by 1 gap"),
            "{v}"
        );
        let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        keys.sort();
        assert_eq!(
            keys,
            [
                "audit",
                "blockers",
                "blocking",
                "complete",
                "complete_until",
                "partitions",
                "reason",
                "truncated",
                "until"
            ]
        );

        let r = get(
            srv.addr,
            "/api/completeness?audit=dns&until=2024-05-01T12:00:00Z",
        )
        .await;
        assert_eq!(r.status, 404);
        assert_eq!(r.json()["audits"], serde_json::json!(["dns_logs"]));
        let r = get(srv.addr, "/api/completeness?audit=dns_logs&until=yesterday").await;
        assert_eq!(r.status, 400);
        assert_eq!(r.json()["parameter"], "until");

        // Several audits: the name is required.
        srv.state.status.update(audit_status("other", None));
        let r = get(srv.addr, "/api/completeness?until=2024-05-01T12:00:00Z").await;
        assert_eq!(r.status, 400);
        assert_eq!(r.json()["parameter"], "audit");
        // The status shows the time only.
        let v = get(srv.addr, "/api/status").await.json();
        assert_eq!(v["audits"][0]["complete_until"], "2024-05-01T12:00:02Z");
        assert_eq!(v["audits"][1]["complete_until"], Value::Null);
        srv.shutdown.cancel();
    }

    #[test]
    fn completeness_query_parsing() {
        let q = parse_completeness_query("").unwrap();
        assert_eq!(
            q,
            CompletenessQuery {
                audit: None,
                until_ms: None
            }
        );
        let q = parse_completeness_query("audit=a%20b&until=1970-01-01T00:00:01.5Z").unwrap();
        assert_eq!(q.audit.as_deref(), Some("a b"));
        assert_eq!(q.until_ms, Some(1_500));
        assert_eq!(parse_time("1970-01-01T01:00:00 01:00"), Some(0));
        assert!(parse_completeness_query("until=12:00").is_err());
    }

    #[tokio::test]
    async fn shutdown_returns_even_with_an_idle_keep_alive_connection() {
        let srv = start().await;
        // A keep-alive client that finished one request and stays connected.
        let mut idle = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
        idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 256];
        let n = idle.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));

        srv.shutdown.cancel();
        let result = tokio::time::timeout(Duration::from_secs(5), srv.task)
            .await
            .expect("serve() returns promptly after cancel")
            .unwrap();
        assert!(result.is_ok());
        // The idle connection was closed by the server, and nobody listens any more.
        let n = tokio::time::timeout(Duration::from_secs(5), idle.read(&mut buf))
            .await
            .unwrap();
        assert!(matches!(n, Ok(0) | Err(_)));
        assert!(tokio::net::TcpStream::connect(srv.addr).await.is_err());
    }

    #[test]
    fn gap_query_parsing() {
        let f = parse_gap_query("").unwrap();
        assert_eq!(
            f,
            GapFilter {
                state: StateFilter::Unresolved,
                audit: None
            }
        );
        let f = parse_gap_query("audit=&state=all&x=1").unwrap();
        assert_eq!(
            f,
            GapFilter {
                state: StateFilter::All,
                audit: None
            }
        );
        let f = parse_gap_query("audit=a%26b&state=unrecoverable").unwrap();
        assert_eq!(
            f,
            GapFilter {
                state: StateFilter::Only(GapState::Unrecoverable),
                audit: Some("a&b".into())
            }
        );
        let e = parse_gap_query("state=").unwrap_err();
        assert_eq!(e.parameter, Some("state"));
    }
}
