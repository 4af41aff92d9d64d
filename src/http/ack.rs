//! `POST /api/gaps/{id}/ack` with `{"reason": "…"}`: acknowledges a gap exactly as
//! `gap-auditor ack` does (the same [`Store::ack`], one implementation), through this
//! instance's store. The daemon's next round reads the store's ack log
//! (`refresh_acknowledged`) and takes the gap out of its open gaps and gauges.
//!
//! Needs `server.api_token` (a write must never be open): 403 when none is configured; the
//! 401 for a missing or wrong token is answered earlier, by the `/api/` bearer check.
//! Acknowledging an already acknowledged gap is 200, like the CLI (exit 0): the reason is
//! replaced by the new one. A gap this instance's store does not hold is forwarded to the
//! instance that owns its partition ([`super::forward`]: the owner's answer passed
//! through; 404 saying why when forwarding is off or no owner is known, 508 for a request
//! already forwarded once, 502 when the owner cannot be reached).

use super::forward::{self, Outcome};
use super::{ApiError, Body, HttpState, json};
use crate::gap::Gap;
use crate::store::{Store, StoreError};
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode, header};
use std::sync::Arc;

/// The largest request body accepted: a reason is a sentence, not a document.
pub(super) const MAX_BODY: usize = 64 * 1024;

/// The API's ack path, `/api/gaps/{id}/ack`.
pub(super) const ROUTE: GapRoute = GapRoute::new("/api/gaps/", "/ack");

/// A path naming one gap, `{prefix}{id}{suffix}` with the id percent-encoded: the API's
/// ack and the page's forms.
#[derive(Debug, Clone, Copy)]
pub(super) struct GapRoute {
    prefix: &'static str,
    suffix: &'static str,
}

impl GapRoute {
    /// The paths between `prefix` and `suffix`.
    pub(super) const fn new(prefix: &'static str, suffix: &'static str) -> GapRoute {
        GapRoute { prefix, suffix }
    }

    /// The percent-decoded gap id of `path`, `None` for any other path. An empty id, or one
    /// that does not decode to UTF-8, is no id of ours.
    pub(super) fn id_of(self, path: &str) -> Option<String> {
        let raw = path.strip_prefix(self.prefix)?.strip_suffix(self.suffix)?;
        if raw.is_empty() {
            return None;
        }
        percent_encoding::percent_decode_str(raw)
            .decode_utf8()
            .ok()
            .map(|id| id.into_owned())
    }

    /// The path of gap `id` (the inverse of [`Self::id_of`]): the page's form actions.
    pub(super) fn path(self, id: &str) -> String {
        let encoded: String =
            percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC).collect();
        format!("{}{encoded}{}", self.prefix, self.suffix)
    }
}

/// Why a request body is refused, before the store is touched.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum BadBody {
    /// Larger than [`MAX_BODY`].
    #[error("request body larger than {MAX_BODY} bytes")]
    TooLarge,
    /// Not a JSON object.
    #[error("request body is not a JSON object: {0}")]
    NotJson(String),
    /// `reason` absent, not a string, or blank.
    #[error("field `reason` is required: a non-empty string saying why the gap is acceptable")]
    NoReason,
}

/// The reason of a request body `{"reason": "…"}` (other fields ignored).
pub(super) fn parse_reason(body: &[u8]) -> Result<String, BadBody> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| BadBody::NotJson(e.to_string()))?;
    let object = value
        .as_object()
        .ok_or_else(|| BadBody::NotJson("expected an object such as {\"reason\": \"…\"}".into()))?;
    match object.get("reason").and_then(|r| r.as_str()) {
        Some(r) if !r.trim().is_empty() => Ok(r.to_string()),
        _ => Err(BadBody::NoReason),
    }
}

/// Reads the body, at most [`MAX_BODY`] bytes (a declared larger length is refused unread).
/// Generic over the body so that the cap is tested without a socket.
pub(super) async fn read_body<B>(req: Request<B>) -> Result<Bytes, BadBody>
where
    B: hyper::body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY as u64) {
        return Err(BadBody::TooLarge);
    }
    match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(BadBody::TooLarge),
        Err(e) => Err(BadBody::NotJson(format!("cannot read the body: {e}"))),
    }
}

/// The answer to a body refused.
fn bad_body(bad: BadBody) -> Response<Body> {
    let (status, field) = match bad {
        BadBody::TooLarge => (StatusCode::PAYLOAD_TOO_LARGE, None),
        BadBody::NotJson(_) => (StatusCode::BAD_REQUEST, None),
        BadBody::NoReason => (StatusCode::BAD_REQUEST, Some("reason")),
    };
    json(status, &ApiError::new(field, bad.to_string()))
}

/// Acknowledges `id` with `reason` and reads the gap back as `/api/gaps` lists it.
/// `Ok(None)`: the store holds no gap with this id.
pub(super) fn ack_and_read(
    store: &Store,
    id: &str,
    reason: &str,
) -> Result<Option<Gap>, StoreError> {
    if !store.ack(id, reason)? {
        return Ok(None);
    }
    store.get_gap(id)
}

/// `POST /api/gaps/{id}/ack`; the bearer token was checked by the caller when one is set.
pub(super) async fn api_ack(
    state: &HttpState,
    id: String,
    req: Request<Incoming>,
) -> Response<Body> {
    let Some(token) = &state.api_token else {
        return json(
            StatusCode::FORBIDDEN,
            &ApiError::new(
                None,
                "acknowledging over HTTP needs server.api_token to be configured; without it \
                 use `gap-auditor ack` on this host"
                    .into(),
            ),
        );
    };
    let hop = forward::hop_of(req.headers());
    let reason = match read_body(req).await {
        Ok(body) => match parse_reason(&body) {
            Ok(r) => r,
            Err(bad) => return bad_body(bad),
        },
        Err(bad) => return bad_body(bad),
    };
    if let Some(o) = forward::forward_first(state, &id, &reason, token, hop.as_deref()).await {
        return api_answer(o);
    }
    let store: Arc<Store> = state.store.clone();
    let acked = {
        let (id, reason) = (id.clone(), reason.clone());
        tokio::task::spawn_blocking(move || ack_and_read(&store, &id, &reason)).await
    };
    match acked {
        Ok(Ok(Some(gap))) => {
            tracing::info!(gap = %id, reason = %reason, "gap acknowledged over HTTP");
            json(StatusCode::OK, &gap)
        }
        Ok(Ok(None)) => {
            api_answer(forward::forward_ack(state, &id, &reason, token, hop.as_deref()).await)
        }
        Ok(Err(e @ StoreError::Resolved { .. })) => {
            json(StatusCode::CONFLICT, &ApiError::new(None, e.to_string()))
        }
        Ok(Err(e)) => {
            tracing::error!(gap = %id, error = %e, "api ack: store write failed");
            json(
                StatusCode::INTERNAL_SERVER_ERROR,
                &ApiError::new(None, e.to_string()),
            )
        }
        Err(e) => {
            tracing::error!(gap = %id, error = %e, "api ack: store task failed");
            json(
                StatusCode::INTERNAL_SERVER_ERROR,
                &ApiError::new(None, "store task failed".into()),
            )
        }
    }
}

/// The API's answer to an ack forwarded (or not) to the gap's owner: the owner's status
/// and body as it sent them (with `X-Gap-Auditor-Owner` naming it), or this instance's
/// refusal as JSON.
fn api_answer(outcome: Outcome) -> Response<Body> {
    let status = outcome.status();
    match outcome {
        Outcome::Answered {
            owner,
            content_type,
            body,
            ..
        } => {
            let mut resp = Response::new(super::full(body));
            *resp.status_mut() = status;
            let headers = resp.headers_mut();
            if let Some(ct) = content_type.and_then(|c| header::HeaderValue::from_str(&c).ok()) {
                headers.insert(header::CONTENT_TYPE, ct);
            }
            if let Ok(o) = header::HeaderValue::from_str(&owner) {
                headers.insert(forward::OWNER_HEADER, o);
            }
            resp
        }
        Outcome::NotForwarded(m)
        | Outcome::Loop(m)
        | Outcome::Unreachable(m)
        | Outcome::OwnedHere(m)
        | Outcome::BetweenOwners(m) => json(status, &ApiError::new(None, m)),
    }
}
