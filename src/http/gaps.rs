//! `GET /api/gaps`: the gap listing, paged (`limit`, `after`, a `Link: rel="next"` header)
//! or, without `limit`, the whole list streamed as one JSON array a page at a time.
//!
//! Both read through a [`GapReader`] of their own (never the store connection the verify
//! rounds write through), one short read per page, so a listing of any size, or a client
//! that reads it slowly, costs the audit nothing and the process a bounded amount of memory:
//! at most [`STREAM_PAGE`] gaps a listing serialized at a time, and two chunks queued.

use super::{ApiError, Body, json};
use crate::store::{GapCursor, GapFilter, GapReader, MAX_PAGE, StateFilter, StoreError};
use bytes::Bytes;
use hyper::body::Frame;
use hyper::header::{self, HeaderValue};
use hyper::{Response, StatusCode};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// Gaps per store read of a streamed listing: ~250 kB of JSON, one chunk of the answer.
const STREAM_PAGE: usize = 500;
/// Chunks a streamed listing may have ready ahead of its client: the listing's memory is
/// this plus the page being read, whatever the gap count.
const STREAM_AHEAD: usize = 2;

/// The parameters of `/api/gaps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct GapQuery {
    /// `state` and `audit`.
    pub(super) filter: GapFilter,
    /// `limit`: a page of at most this many gaps (1..=[`MAX_PAGE`]); `None` streams all.
    pub(super) limit: Option<usize>,
    /// `after`: start after the gap with this id.
    pub(super) after: Option<String>,
    /// `at`: the `detected_at` the `after` gap had when listed (the `Link` carries it), so
    /// the page starts there even if that gap moved since; without it, where it is now.
    pub(super) at: Option<String>,
}

/// Parses `state` (default `open`), `audit` (empty means every audit), `limit` and `after`
/// (empty means unset). Unknown parameters are ignored, as HTTP APIs conventionally do; a
/// repeated parameter keeps its last value.
pub(super) fn parse_gap_query(query: &str) -> Result<GapQuery, ApiError> {
    let mut q = GapQuery {
        filter: GapFilter::default(),
        limit: None,
        after: None,
        at: None,
    };
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "state" => {
                q.filter.state = StateFilter::parse(&value).ok_or_else(|| {
                    ApiError::new(
                        Some("state"),
                        format!(
                            "invalid value {value:?} for query parameter `state`: expected open, \
                             all, late, repaired, unrecoverable, unverifiable, acknowledged or dead_lettered"
                        ),
                    )
                })?;
            }
            "audit" => q.filter.audit = (!value.is_empty()).then(|| value.into_owned()),
            "limit" if value.is_empty() => q.limit = None,
            "limit" => {
                let n = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| {
                        ApiError::new(
                            Some("limit"),
                            format!(
                                "invalid value {value:?} for query parameter `limit`: expected a \
                                 whole number from 1 to {MAX_PAGE} (leave it out to stream every gap)"
                            ),
                        )
                    })?;
                q.limit = Some(n);
            }
            "after" => q.after = (!value.is_empty()).then(|| value.into_owned()),
            "at" => q.at = (!value.is_empty()).then(|| value.into_owned()),
            _ => {}
        }
    }
    Ok(q)
}

/// The `Link` header value of the page after `after`: the same filters and limit, so a
/// client follows it without rebuilding the query. A path-absolute reference (RFC 8288
/// resolves it against the request's origin); every value form-encoded. Without `at`: the
/// answers carry [`next_link_at`]'s; this form is what a client may build itself.
#[cfg(test)]
pub(super) fn next_link(filter: &GapFilter, limit: usize, after: &str) -> String {
    link(filter, limit, after, None)
}

/// [`next_link`] for `cursor`, with its `at`: a gap's `detected_at` can move earlier
/// between two pages (the store keeps the earliest), and a next page resolved from the
/// id alone would start at its new place and skip every gap in between.
pub(super) fn next_link_at(filter: &GapFilter, limit: usize, cursor: &GapCursor) -> String {
    format!(
        "<{}>; rel=\"next\"",
        next_href("/api/gaps", filter, limit, cursor)
    )
}

/// The path and query of the page after `cursor` under `route` (`/api/gaps`, `/ui`).
pub(super) fn next_href(
    route: &str,
    filter: &GapFilter,
    limit: usize,
    cursor: &GapCursor,
) -> String {
    href(
        route,
        filter,
        limit,
        cursor.id(),
        Some(cursor.detected_at()),
    )
}

#[cfg(test)]
fn link(filter: &GapFilter, limit: usize, after: &str, at: Option<&str>) -> String {
    format!(
        "<{}>; rel=\"next\"",
        href("/api/gaps", filter, limit, after, at)
    )
}

fn href(route: &str, filter: &GapFilter, limit: usize, after: &str, at: Option<&str>) -> String {
    let mut q = form_urlencoded::Serializer::new(String::new());
    q.append_pair("state", filter.state.as_str());
    if let Some(audit) = &filter.audit {
        q.append_pair("audit", audit);
    }
    q.append_pair("limit", &limit.to_string());
    q.append_pair("after", after);
    if let Some(at) = at {
        q.append_pair("at", at);
    }
    format!("{route}?{}", q.finish())
}

/// What the blocking part of a listing found before any byte of the answer is sent, so
/// that a failure there is still a proper status.
pub(super) enum Start {
    /// `after` names no stored gap.
    UnknownAfter(String),
    /// `at` is not an RFC 3339 time.
    BadAt(String),
    /// A page (`limit` given).
    Page(crate::store::GapPage),
    /// The first page of a streamed listing, and the reader for the rest.
    Stream(GapReader, crate::store::GapPage),
}

/// Opens a reader, resolves `after` and reads the first page.
pub(super) fn start(path: &std::path::Path, q: &GapQuery) -> Result<Start, StoreError> {
    let reader = GapReader::open(path)?;
    let after = match (&q.after, &q.at) {
        (None, _) => None,
        (Some(id), Some(at)) => match GapCursor::at(at, id) {
            Some(c) => Some(c),
            None => return Ok(Start::BadAt(at.clone())),
        },
        (Some(id), None) => match reader.cursor(id)? {
            Some(c) => Some(c),
            None => return Ok(Start::UnknownAfter(id.clone())),
        },
    };
    Ok(match q.limit {
        Some(limit) => Start::Page(reader.page(&q.filter, after.as_ref(), limit)?),
        None => {
            let first = reader.page(&q.filter, after.as_ref(), STREAM_PAGE)?;
            Start::Stream(reader, first)
        }
    })
}

/// `GET /api/gaps`. The store is read on the blocking pool (SQLite calls block).
pub(super) async fn api_gaps(store: &Arc<crate::store::Store>, query: &str) -> Response<Body> {
    let q = match parse_gap_query(query) {
        Ok(q) => q,
        Err(bad) => return json(StatusCode::BAD_REQUEST, &bad),
    };
    let path = store.path().to_path_buf();
    let started = {
        let q = q.clone();
        tokio::task::spawn_blocking(move || start(&path, &q)).await
    };
    match started {
        Ok(Ok(Start::UnknownAfter(id))) => json(
            StatusCode::BAD_REQUEST,
            &ApiError::new(
                Some("after"),
                format!(
                    "no gap with id {id:?} (query parameter `after`): it may have left this \
                     instance's store since (its partition handed over); list again without `after`"
                ),
            ),
        ),
        Ok(Ok(Start::BadAt(at))) => json(
            StatusCode::BAD_REQUEST,
            &ApiError::new(
                Some("at"),
                format!(
                    "invalid value {at:?} for query parameter `at`: expected the RFC 3339 time \
                     a `Link` header carries (leave it out to start after the `after` gap \
                     where it is now)"
                ),
            ),
        ),
        Ok(Ok(Start::Page(page))) => {
            let mut resp = json(StatusCode::OK, &page.gaps);
            if let (Some(next), Some(limit)) = (&page.next, q.limit) {
                // Form-encoded ASCII: always a valid header value; checked all the same.
                match HeaderValue::from_str(&next_link_at(&q.filter, limit, next)) {
                    Ok(v) => {
                        resp.headers_mut().insert(header::LINK, v);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "api/gaps: cannot build the Link header");
                        return store_failed("cannot build the Link header".into());
                    }
                }
            }
            resp
        }
        Ok(Ok(Start::Stream(reader, first))) => stream(reader, q.filter, first),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "api/gaps: store read failed");
            store_failed(e.to_string())
        }
        Err(e) => {
            tracing::error!(error = %e, "api/gaps: store task failed");
            store_failed("store task failed".into())
        }
    }
}

fn store_failed(message: String) -> Response<Body> {
    json(
        StatusCode::INTERNAL_SERVER_ERROR,
        &ApiError::new(None, message),
    )
}

/// The whole listing as one JSON array, sent in chunks of a page each while later pages
/// are read. A store error after the first byte cannot change the status any more: the
/// body then ends in an error, which aborts the response (no closing chunk), so the client
/// sees a broken answer, never a short list that looks complete.
fn stream(reader: GapReader, filter: GapFilter, first: crate::store::GapPage) -> Response<Body> {
    let (tx, rx) = mpsc::channel(STREAM_AHEAD);
    tokio::spawn(produce(reader, filter, first, tx));
    let mut resp = Response::new(Body::new(ChannelBody { rx }));
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// Feeds a streamed listing: serializes each page, reads the next on the blocking pool
/// while the client takes the previous one, stops when the client goes away (the channel
/// closes). Holds no store lock and no SQLite snapshot while it waits for the client.
async fn produce(
    mut reader: GapReader,
    filter: GapFilter,
    first: crate::store::GapPage,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
) {
    let mut page = first;
    let mut opened = false;
    loop {
        let chunk = match chunk(&page.gaps, !opened, page.next.is_none()) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "api/gaps: cannot serialize a gap");
                let _ = tx.send(Err(std::io::Error::other(e))).await;
                return;
            }
        };
        opened = true;
        if tx.send(Ok(chunk)).await.is_err() {
            return; // the client went away
        }
        let Some(cursor) = page.next.take() else {
            return;
        };
        let filter2 = filter.clone();
        let read = tokio::task::spawn_blocking(move || {
            let page = reader.page(&filter2, Some(&cursor), STREAM_PAGE);
            (reader, page)
        })
        .await;
        match read {
            Ok((r, Ok(next))) => {
                reader = r;
                page = next;
            }
            Ok((_, Err(e))) => {
                tracing::error!(error = %e, "api/gaps: store read failed mid-listing");
                let _ = tx.send(Err(std::io::Error::other(e))).await;
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, "api/gaps: store task failed mid-listing");
                let _ = tx.send(Err(std::io::Error::other(e))).await;
                return;
            }
        }
    }
}

/// One chunk of the JSON array: `[` before the first page, a comma between gaps (and
/// before a later page's first gap), `]` after the last.
pub(super) fn chunk(
    gaps: &[crate::gap::Gap],
    first: bool,
    last: bool,
) -> serde_json::Result<Bytes> {
    let mut buf = Vec::with_capacity(gaps.len() * 512 + 2);
    if first {
        buf.push(b'[');
    }
    for (i, g) in gaps.iter().enumerate() {
        if i > 0 || !first {
            buf.push(b',');
        }
        serde_json::to_writer(&mut buf, g)?;
    }
    if last {
        buf.push(b']');
    }
    Ok(Bytes::from(buf))
}

/// A response body fed by a channel: each message is a data frame, an error aborts the
/// response, the sender's end is the body's end.
struct ChannelBody {
    rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
}

impl hyper::body::Body for ChannelBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        self.rx.poll_recv(cx).map(|m| m.map(|r| r.map(Frame::data)))
    }
}
