//! `GET /ui?audit=NAME&state=open|all[&after=ID&at=TIME]`: the gap page. Reads what
//! `/api/status` and `/api/gaps` read (the status board; one page of at most [`UI_PAGE`]
//! gaps through a [`crate::store::GapReader`] of its own, the listing's keyset cursor in a
//! "next page" link), so a store of 500,000 gaps is never loaded at once and the audit is
//! never held up. The markup is [`super::ui_page`].

use super::gaps::{GapQuery, Start, next_href, parse_gap_query, start};
use super::ui_page::{UiPage, render};
use super::{Body, HttpState, full};
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};

/// Gaps per page: a page a person reads, and a bounded amount of work per request.
pub(super) const UI_PAGE: usize = 200;

/// The `/ui` query: `/api/gaps`'s parameters, the page size capped at [`UI_PAGE`].
pub(super) fn parse_ui_query(query: &str) -> Result<GapQuery, super::ApiError> {
    let mut q = parse_gap_query(query)?;
    q.limit = Some(q.limit.map_or(UI_PAGE, |l| l.min(UI_PAGE)));
    Ok(q)
}

/// `GET /ui`.
pub(super) async fn ui(state: &HttpState, query: &str) -> Response<Body> {
    let q = match parse_ui_query(query) {
        Ok(q) => q,
        Err(bad) => return html(StatusCode::BAD_REQUEST, &message_page(&bad.error)),
    };
    let path = state.store.path().to_path_buf();
    let started = {
        let q = q.clone();
        tokio::task::spawn_blocking(move || start(&path, &q)).await
    };
    let page = match started {
        // `limit` is always set here, so a listing is never a stream; taken as a page all
        // the same rather than a panic.
        Ok(Ok(Start::Page(page))) | Ok(Ok(Start::Stream(_, page))) => page,
        Ok(Ok(Start::UnknownAfter(id))) => {
            return html(
                StatusCode::BAD_REQUEST,
                &message_page(&format!(
                    "no gap with id {id:?} (parameter `after`): it may have left this \
                     instance's store since; start again from the first page"
                )),
            );
        }
        Ok(Ok(Start::BadAt(at))) => {
            return html(
                StatusCode::BAD_REQUEST,
                &message_page(&format!("invalid value {at:?} for parameter `at`")),
            );
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "ui: store read failed");
            return html(
                StatusCode::INTERNAL_SERVER_ERROR,
                &message_page(&format!("cannot read the gap store: {e}")),
            );
        }
        Err(e) => {
            tracing::error!(error = %e, "ui: store task failed");
            return html(
                StatusCode::INTERNAL_SERVER_ERROR,
                &message_page("cannot read the gap store"),
            );
        }
    };
    let audits: Vec<_> = state
        .status
        .snapshot()
        .into_iter()
        .filter(|a| q.filter.audit.as_ref().is_none_or(|name| *name == a.audit))
        .collect();
    let limit = q.limit.unwrap_or(UI_PAGE);
    let next = page
        .next
        .as_ref()
        .map(|c| next_href("/ui", &q.filter, limit, c));
    let body = render(&UiPage {
        audits: &audits,
        gaps: &page.gaps,
        filter: &q.filter,
        next,
        now: chrono::Utc::now(),
        ack_form: state.api_token.is_some(),
    });
    html(StatusCode::OK, &body)
}

/// A page that only says what went wrong (escaped like everything else).
pub(super) fn message_page(message: &str) -> String {
    maud::html! {
        (maud::DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; title { "gap-auditor" } }
            body { h1 { "gap-auditor" } p { (message) } p { a href="/ui" { "back to the gap page" } } }
        }
    }
    .into_string()
}

pub(super) fn html(status: StatusCode, body: &str) -> Response<Body> {
    let mut resp = Response::new(full(body.to_owned()));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Defence in depth behind the escaping: the page needs no script, no frame, nothing
    // from elsewhere; only its own inline style sheet.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}
