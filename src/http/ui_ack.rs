//! `POST /ui/gaps/{id}/ack`: the gap page's ack form (`reason`, `token`, form-encoded).
//! It acknowledges exactly as `POST /api/gaps/{id}/ack` and `gap-auditor ack` do (the same
//! [`super::ack::ack_and_read`], one implementation) and answers a browser: 303 back to
//! the page, or a page saying what was refused.
//!
//! The form carries `server.api_token` in a password field and is checked against it on
//! every post; credentials the browser sends by itself (a cached `Authorization: Basic`
//! for reading the page) are ignored here. So another site cannot make a logged-in
//! browser acknowledge a gap (no cross-site request forgery): it would have to know the
//! token. Without a token configured the form is not shown and a post is 403, as for the
//! API: an open write would let anyone on the network silence a loss.

use super::ack::{BadBody, ack_and_read, gap_id_between, read_body};
use super::ui::{html, message_page};
use super::{Body, HttpState};
use crate::config::Secret;
use crate::store::{Store, StoreError};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use std::sync::Arc;

const PREFIX: &str = "/ui/gaps/";
const SUFFIX: &str = "/ack";

/// The gap id of a form-ack path (`/ui/gaps/{id}/ack`, percent-decoded), `None` otherwise.
pub(super) fn route(path: &str) -> Option<String> {
    gap_id_between(path, PREFIX, SUFFIX)
}

/// The form's action for gap `id` (the inverse of [`route`]).
pub(super) fn action(id: &str) -> String {
    let encoded: String =
        percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC).collect();
    format!("{PREFIX}{encoded}{SUFFIX}")
}

/// What a posted ack form holds.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct AckForm {
    /// Why the gap is acceptable (non-blank).
    pub reason: String,
    /// The token typed into the form (compared with `server.api_token`).
    pub token: String,
}

/// Why a posted form is refused before the token or the store is looked at.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum BadForm {
    /// `reason` absent or blank.
    #[error("a reason is required: say why the gap is acceptable")]
    NoReason,
    /// `token` absent or empty.
    #[error("the token (server.api_token) is required to acknowledge from the page")]
    NoToken,
}

/// Parses an `application/x-www-form-urlencoded` body; the last value of a repeated field
/// wins, other fields are ignored.
pub(super) fn parse_form(body: &[u8]) -> Result<AckForm, BadForm> {
    let (mut reason, mut token) = (None, None);
    for (k, v) in form_urlencoded::parse(body) {
        match k.as_ref() {
            "reason" => reason = Some(v.into_owned()),
            "token" => token = Some(v.into_owned()),
            _ => {}
        }
    }
    let reason = reason
        .filter(|r| !r.trim().is_empty())
        .ok_or(BadForm::NoReason)?;
    let token = token.filter(|t| !t.is_empty()).ok_or(BadForm::NoToken)?;
    Ok(AckForm { reason, token })
}

/// Constant-time comparison of the typed token with the configured one.
fn token_matches(typed: &str, expected: &Secret) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(typed.as_bytes().ct_eq(expected.expose().as_bytes()))
}

/// Where a browser goes after an ack: the page of the gap's audit, every state shown, so
/// the gap is seen acknowledged with its reason.
pub(super) fn back_to_page(audit: &str) -> String {
    let audit: String = form_urlencoded::byte_serialize(audit.as_bytes()).collect();
    format!("/ui?audit={audit}&state=all")
}

fn refused(status: StatusCode, message: &str) -> Response<Body> {
    html(status, &message_page(message))
}

/// `POST /ui/gaps/{id}/ack`.
pub(super) async fn form_ack(
    state: &HttpState,
    id: String,
    req: Request<Incoming>,
) -> Response<Body> {
    let Some(expected) = &state.api_token else {
        return refused(
            StatusCode::FORBIDDEN,
            "acknowledging from the page needs server.api_token to be configured; without \
             it use `gap-auditor ack` on this host",
        );
    };
    let form_encoded = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';').next().is_some_and(|m| {
                m.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            })
        });
    if !form_encoded {
        return refused(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "the ack form is sent as application/x-www-form-urlencoded (reason, token); \
             programs use POST /api/gaps/{id}/ack with JSON",
        );
    }
    let form = match read_body(req).await.map(|b| parse_form(&b)) {
        Ok(Ok(form)) => form,
        Ok(Err(bad)) => return refused(StatusCode::BAD_REQUEST, &bad.to_string()),
        Err(BadBody::TooLarge) => {
            return refused(
                StatusCode::PAYLOAD_TOO_LARGE,
                &BadBody::TooLarge.to_string(),
            );
        }
        Err(bad) => return refused(StatusCode::BAD_REQUEST, &bad.to_string()),
    };
    if !token_matches(&form.token, expected) {
        // The typed value is never logged: it may be a near miss of the real token.
        tracing::debug!(gap = %id, "ui ack refused: wrong token");
        return refused(
            StatusCode::FORBIDDEN,
            "wrong token: the form needs this daemon's server.api_token; nothing was changed",
        );
    }
    let store: Arc<Store> = state.store.clone();
    let acked = {
        let (id, reason) = (id.clone(), form.reason.clone());
        tokio::task::spawn_blocking(move || ack_and_read(&store, &id, &reason)).await
    };
    match acked {
        Ok(Ok(Some(gap))) => {
            tracing::info!(gap = %id, reason = %form.reason, "gap acknowledged from the gap page");
            let mut resp = Response::new(super::full(String::new()));
            *resp.status_mut() = StatusCode::SEE_OTHER;
            if let Ok(location) = HeaderValue::from_str(&back_to_page(&gap.audit)) {
                resp.headers_mut().insert(header::LOCATION, location);
            }
            resp
        }
        Ok(Ok(None)) => refused(
            StatusCode::NOT_FOUND,
            &format!(
                "no gap with id {id:?} in this instance's store: it may belong to another \
                 instance of the auditor group (the one assigned its partition); ack it there"
            ),
        ),
        Ok(Err(e @ StoreError::Resolved { .. })) => refused(StatusCode::CONFLICT, &e.to_string()),
        Ok(Err(e)) => {
            tracing::error!(gap = %id, error = %e, "ui ack: store write failed");
            refused(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("the store write failed: {e}"),
            )
        }
        Err(e) => {
            tracing::error!(gap = %id, error = %e, "ui ack: store task failed");
            refused(StatusCode::INTERNAL_SERVER_ERROR, "store task failed")
        }
    }
}
