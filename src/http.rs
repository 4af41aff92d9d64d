//! The HTTP server (`server.listen`): Prometheus scrape endpoint, health and readiness
//! probes, the JSON API over the gap store and the live status board, the gap page, and
//! the one write, acknowledging a gap.
//!
//! | route | answer |
//! |---|---|
//! | `GET /metrics` | Prometheus text format 0.0.4 |
//! | `GET /healthz` | 200 `ok` while the process runs |
//! | `GET /readyz` | 200 when Kafka and every sink answered recently (and the last schema fetch succeeded), else 503 saying what is stale |
//! | `GET /api/gaps?state=open\|all\|<state>&audit=NAME[&limit=N][&after=ID]` | JSON array of gaps, newest first; paged with `limit` (a `Link: rel="next"` while more remain), streamed without ([`gaps`]) |
//! | `POST /api/gaps/{id}/ack` with `{"reason": "…"}` | acknowledges the gap like `gap-auditor ack` and answers it as `/api/gaps` lists it; 403 without `server.api_token`, 400 without a reason, 413 over 64 KiB, a gap this instance's store does not hold forwarded to its partition's owner ([`forward`]) ([`ack`]) |
//! | `GET /api/status` | `{"audits": [...]}` |
//! | `GET /api/completeness?audit=NAME&until=RFC3339` | `{"complete", "complete_until", "blocking", ...}` ([`crate::completeness::Answer`]) |
//! | `GET /ui?audit=NAME&state=open\|all[&after=ID]` | the gap page: server-rendered HTML, no script; partitions per audit, open gaps 200 a page with cause, retention countdown and the replay/ack commands, and an ack form when a token is configured ([`ui`]) |
//! | `POST /ui/gaps/{id}/replay` with a form (`token`, `to_topic`) | the page's replay dry-run: the plan `gap-auditor replay --dry-run` prints, from the same code; no record written; 403 without `server.api_token` or with the wrong token typed ([`ui_replay`]) |
//! | `POST /ui/gaps/{id}/ack` with a form (`reason`, `token`) | the page's ack: the same store write as the API's, then 303 back to the page; 403 without `server.api_token` or with the wrong token typed ([`ui_ack`]) |
//!
//! Unknown paths get 404, other methods on a known path 405 (`HEAD` is served like `GET`,
//! as load balancers probe with it). Everything is read-only but the ack: every method but
//! `GET`/`HEAD` anywhere under `/api/` is 405, except `POST` on `/api/gaps/{id}/ack` (which
//! takes nothing else: 405 with `Allow: POST`). An ack over HTTP needs a configured token
//! (403 without one: an open write would let anyone on the network silence a loss); one for
//! a gap another instance of the group owns is forwarded there ([`forward`]). The server is
//! plain hyper 1 over HTTP/1.1: a scrape endpoint needs no framework, and fewer
//! dependencies means less to audit in a sidecar.
//!
//! With `server.api_token` set, every request under `/api/` and to `/ui` must carry
//! `Authorization: Bearer TOKEN`; otherwise it gets 401 with `WWW-Authenticate: Bearer`
//! before anything else is looked at (method, path, query), so an unauthenticated client
//! learns nothing but that a token is needed. `/ui` shows what `/api/gaps` and
//! `/api/status` show (topics, offsets, ack reasons), so it is under the same rule: without
//! a token configured it is readable by anyone, like the API; with one, it must not leak
//! what the API guards; for it a browser may send HTTP Basic instead (any user name, the
//! token as password: the 401 of `/ui` also offers a Basic challenge, so the browser asks).
//! The page's ack form posts the token typed into it, and only that is checked: the
//! credentials a browser replays by itself never authorize a write (no cross-site request
//! forgery). `/metrics`, `/healthz` and `/readyz` stay open: Prometheus and
//! orchestrator probes rarely carry credentials, and they expose no record contents. The
//! token is compared in constant time (`subtle`) and never logged.

use crate::config::Secret;
use crate::metrics::Metrics;
use crate::status::StatusBoard;
use crate::store::Store;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
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

/// A response body: whole (most answers) or streamed (a whole `/api/gaps` listing). An
/// error ends a streamed answer by aborting it.
type Body = BoxBody<Bytes, std::io::Error>;

/// A whole response body.
fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

/// What the handlers need. Cheap to clone: every field is shared.
#[derive(Clone)]
pub struct HttpState {
    /// Metric families rendered by `/metrics`.
    pub metrics: Arc<Metrics>,
    /// Live status for `/api/status` and `/readyz`.
    pub status: StatusBoard,
    /// Gap store. `/api/gaps` and `/ui` use only its path, to open read-only connections of
    /// their own (a listing must never hold the connection the verify rounds write through);
    /// `POST /api/gaps/{id}/ack` writes through it, one short transaction as `gap-auditor
    /// ack` does from its own process.
    pub store: Arc<Store>,
    /// `server.api_token`: when set, `/api/*` and `/ui` require `Authorization: Bearer`
    /// with it; without it, `POST /api/gaps/{id}/ack` is refused (403).
    pub api_token: Option<Secret>,
    /// Where an ack of a gap this store does not hold is sent on ([`forward`]).
    pub forwarding: Arc<forward::Forwarding>,
    /// The configuration the page's replay dry-run replays with (`None`: no dry-run).
    pub config: Option<Arc<crate::config::Config>>,
    /// One replay dry-run at a time ([`ui_replay`]).
    pub dry_runs: Arc<tokio::sync::Semaphore>,
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

/// The gap page's credentials: a bearer token as for the API, or HTTP Basic with the token
/// as the password (any user name), which is what a browser can send.
fn check_page_credentials(
    headers: &hyper::HeaderMap,
    expected: &Secret,
) -> Result<(), AuthFailure> {
    use base64::Engine;
    use subtle::ConstantTimeEq;
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or(AuthFailure::Missing)?
        .as_bytes();
    let Some(encoded) = value
        .iter()
        .position(|b| *b == b' ')
        .filter(|at| value[..*at].eq_ignore_ascii_case(b"basic"))
        .map(|at| value[at..].trim_ascii())
    else {
        return check_bearer(headers, expected);
    };
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|_| AuthFailure::Invalid)?;
    let password = match decoded.iter().position(|b| *b == b':') {
        Some(at) => &decoded[at + 1..],
        None => return Err(AuthFailure::Invalid),
    };
    if bool::from(password.ct_eq(expected.expose().as_bytes())) {
        Ok(())
    } else {
        Err(AuthFailure::Invalid)
    }
}

/// 401 with the challenge a client needs to retry with a token.
fn unauthorized(failure: AuthFailure) -> Response<Body> {
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

/// 405 naming the methods the route accepts (`allow`).
fn method_not_allowed(allow: &'static str) -> Response<Body> {
    let mut resp = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allow));
    resp
}

/// True for the paths under the bearer token rule when `server.api_token` is set: the API,
/// and `/ui`, which shows the same gaps `/api/gaps` lists.
fn is_guarded_path(path: &str) -> bool {
    is_api_path(path) || path == "/ui"
}

/// Routes one request. Never fails: every error is an HTTP answer.
async fn handle(state: &HttpState, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let api = is_api_path(&path);
    let page = path == "/ui";
    if is_guarded_path(&path)
        && let Some(token) = &state.api_token
        && let Err(failure) = if page {
            check_page_credentials(req.headers(), token)
        } else {
            check_bearer(req.headers(), token)
        }
    {
        // The presented value is never logged: it may be a real token sent to the wrong
        // place, or a near miss of ours.
        tracing::debug!(path = %path, ?failure, "api request refused");
        let mut resp = unauthorized(failure);
        if page {
            // Browsers cannot send a bearer token; they answer a Basic challenge with the
            // login dialog (any user name, the token as password).
            resp.headers_mut().append(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static(r#"Basic realm="gap-auditor", charset="UTF-8""#),
            );
        }
        return resp;
    }
    // The page's ack form: checks the token typed into it, not the request's credentials
    // (ui_ack.rs says why).
    if let Some(id) = ui_ack::ROUTE.id_of(&path) {
        return if req.method() == Method::POST {
            ui_ack::form_ack(state, id, req).await
        } else {
            method_not_allowed("POST")
        };
    }
    // The page's replay dry-run: the same typed-token check (ui_replay.rs).
    if let Some(id) = ui_replay::ROUTE.id_of(&path) {
        return if req.method() == Method::POST {
            ui_replay::form_replay(state, id, req).await
        } else {
            method_not_allowed("POST")
        };
    }
    // The one write: `POST /api/gaps/{id}/ack` (ack.rs).
    if let Some(id) = ack::ROUTE.id_of(&path) {
        return if req.method() == Method::POST {
            ack::api_ack(state, id, req).await
        } else {
            method_not_allowed("POST")
        };
    }
    let method = req.method();
    if method != Method::GET && method != Method::HEAD {
        // Read-only: everything else under /api/, known route or not, the page and the probes.
        return match path.as_str() {
            _ if api => method_not_allowed("GET, HEAD"),
            "/metrics" | "/healthz" | "/readyz" | "/ui" => method_not_allowed("GET, HEAD"),
            _ => text(StatusCode::NOT_FOUND, "not found\n"),
        };
    }
    match path.as_str() {
        "/metrics" => {
            let body = state.metrics.render();
            let mut resp = Response::new(full(body));
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
        "/ui" => ui::ui(state, req.uri().query().unwrap_or("")).await,
        "/api/gaps" => gaps::api_gaps(&state.store, req.uri().query().unwrap_or("")).await,
        "/api/status" => json(
            StatusCode::OK,
            &serde_json::json!({ "audits": state.status.snapshot() }),
        ),
        "/api/completeness" => api_completeness(state, req.uri().query().unwrap_or("")),
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

/// `GET /api/completeness`: answered from the round last published on the status board (at
/// most one verify interval old), so a sensor polling it costs the audit nothing.
fn api_completeness(state: &HttpState, query: &str) -> Response<Body> {
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

fn text(status: StatusCode, body: &str) -> Response<Body> {
    let mut resp = Response::new(full(body.to_owned()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn json<T: Serialize + ?Sized>(status: StatusCode, value: &T) -> Response<Body> {
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
    let mut resp = Response::new(full(body));
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

mod ack;
pub mod forward;
mod gaps;
mod ui;
mod ui_ack;
mod ui_page;
mod ui_replay;

#[cfg(test)]
mod tests;
