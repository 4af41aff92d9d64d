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
//!
//! A gap this instance's store does not hold is forwarded to its partition's owner exactly
//! as the API's ack is ([`super::forward`], one implementation); the answer is then a page
//! here saying what the owner answered, with a link to the owner's own page (a redirect
//! there would be a cross-origin form redirect, which the page's CSP forbids).

use super::ack::{BadBody, GapRoute, ack_and_read, read_body};
use super::forward::{self, Outcome};
use super::ui::{html, message_page};
use super::{Body, HttpState};
use crate::config::Secret;
use crate::store::{Store, StoreError};
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use std::sync::Arc;

/// The page's ack form's path, `/ui/gaps/{id}/ack`.
pub(super) const ROUTE: GapRoute = GapRoute::new("/ui/gaps/", "/ack");

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

/// Whether a request's body is declared form-encoded (what a browser's form posts).
pub(super) fn form_encoded(headers: &hyper::HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';').next().is_some_and(|m| {
                m.trim()
                    .eq_ignore_ascii_case("application/x-www-form-urlencoded")
            })
        })
}

/// Constant-time comparison of the typed token with the configured one.
pub(super) fn token_matches(typed: &str, expected: &Secret) -> bool {
    use subtle::ConstantTimeEq;
    bool::from(typed.as_bytes().ct_eq(expected.expose().as_bytes()))
}

/// Where a browser goes after an ack: the page of the gap's audit, every state shown, so
/// the gap is seen acknowledged with its reason.
pub(super) fn back_to_page(audit: &str) -> String {
    let audit: String = form_urlencoded::byte_serialize(audit.as_bytes()).collect();
    format!("/ui?audit={audit}&state=all")
}

/// A page saying why a post was refused.
pub(super) fn refused(status: StatusCode, message: &str) -> Response<Body> {
    html(status, &message_page(message))
}

/// How a page form is refused before its action runs: its own words.
pub(super) struct FormWords {
    /// 415: how the form is sent.
    pub(super) encoding: &'static str,
    /// 403, after the wrong token: what was not done.
    pub(super) undone: &'static str,
    /// The debug line logged for a wrong token.
    pub(super) logged: &'static str,
}

/// What both page forms (ack, replay dry-run) check before their action, in order: the
/// form encoding, the body's size, the fields (`parse`, or what is wrong with them), then
/// the token typed into the form (`token` takes it from the fields), in constant time. A
/// refusal is the page to answer with.
pub(super) async fn posted_form<F>(
    req: Request<Incoming>,
    id: &str,
    expected: &Secret,
    words: &FormWords,
    parse: impl FnOnce(&[u8]) -> Result<F, String>,
    token: fn(&F) -> &str,
) -> Result<F, Response<Body>> {
    if !form_encoded(req.headers()) {
        return Err(refused(StatusCode::UNSUPPORTED_MEDIA_TYPE, words.encoding));
    }
    let form = match read_body(req).await {
        Ok(body) => parse(&body).map_err(|why| refused(StatusCode::BAD_REQUEST, &why))?,
        Err(BadBody::TooLarge) => {
            return Err(refused(
                StatusCode::PAYLOAD_TOO_LARGE,
                &BadBody::TooLarge.to_string(),
            ));
        }
        Err(bad) => return Err(refused(StatusCode::BAD_REQUEST, &bad.to_string())),
    };
    if !token_matches(token(&form), expected) {
        // The typed value is never logged: it may be a near miss of the real token.
        tracing::debug!(gap = %id, "{}", words.logged);
        return Err(refused(
            StatusCode::FORBIDDEN,
            &format!(
                "wrong token: the form needs this daemon's server.api_token; {}",
                words.undone
            ),
        ));
    }
    Ok(form)
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
    let hop = forward::hop_of(req.headers());
    let words = FormWords {
        encoding: "the ack form is sent as application/x-www-form-urlencoded (reason, token); \
                   programs use POST /api/gaps/{id}/ack with JSON",
        undone: "nothing was changed",
        logged: "ui ack refused: wrong token",
    };
    let parse = |body: &[u8]| parse_form(body).map_err(|bad| bad.to_string());
    let form = match posted_form(req, &id, expected, &words, parse, |f| &f.token).await {
        Ok(form) => form,
        Err(refusal) => return refusal,
    };
    if let Some(o) =
        forward::forward_first(state, &id, &form.reason, expected, hop.as_deref()).await
    {
        return page_answer(&id, o);
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
        Ok(Ok(None)) => page_answer(
            &id,
            forward::forward_ack(state, &id, &form.reason, expected, hop.as_deref()).await,
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

/// The page's answer to an ack forwarded (or not) to the gap's owner: the owner's status,
/// in words, with a link to the owner's page.
fn page_answer(id: &str, outcome: Outcome) -> Response<Body> {
    let status = outcome.status();
    match outcome {
        Outcome::Answered { owner, body, .. } => {
            let page = format!("{}/ui?audit={}&state=all", owner.trim_end_matches('/'), {
                let audit = forward::partition_of(id)
                    .map(|(a, _)| a)
                    .unwrap_or_default();
                form_urlencoded::byte_serialize(audit.as_bytes()).collect::<String>()
            });
            let said = if status.is_success() {
                format!("gap {id} acknowledged on the instance that owns its partition, {owner}")
            } else {
                // The owner's refusal is JSON `{"error": ...}`; anything else is shown as text.
                let text = String::from_utf8_lossy(&body);
                let error = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v["error"].as_str().map(str::to_string))
                    .unwrap_or_else(|| text.chars().take(500).collect());
                format!(
                    "the instance that owns gap {id}, {owner}, refused the ack ({status}): {error}"
                )
            };
            html(status, &forwarded_page(&said, &page))
        }
        Outcome::NotForwarded(m)
        | Outcome::Loop(m)
        | Outcome::Unreachable(m)
        | Outcome::OwnedHere(m)
        | Outcome::BetweenOwners(m) => refused(status, &m),
    }
}

/// A page saying what the owner answered, linking to the owner's gap page.
fn forwarded_page(said: &str, owner_page: &str) -> String {
    maud::html! {
        (maud::DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; title { "gap-auditor" } }
            body {
                h1 { "gap-auditor" }
                p class="forwarded" { (said) }
                p { a href=(owner_page) { "the owner's gap page" } " · " a href="/ui" { "back to this gap page" } }
            }
        }
    }
    .into_string()
}
