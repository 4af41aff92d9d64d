//! Classification: the ONE place where Elasticsearch statuses and error bodies are
//! interpreted. Every result means "unknown", never "missing".

use crate::sink::SinkError;
use serde_json::Value;
use std::time::Duration;

// ------------------------------------------------------------------------ classification

/// What an Elasticsearch error answer means — the ONE place where statuses and error bodies
/// are interpreted. 408, 429 and 5xx are transient (retried next round); other 4xx are
/// configuration problems the operator must fix, reported with Elasticsearch's error `type`
/// and `reason`; a missing index says so. Every result means "unknown", never "missing".
pub fn classify(status: u16, body: &[u8]) -> SinkError {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => match v.get("error") {
            Some(e) => classify_error(Some(status), e),
            None => by_status(status, String::new(), snippet(body)),
        },
        Err(_) => by_status(status, String::new(), snippet(body)),
    }
}

/// [`classify`] for an `error` object (top level, or per item of `_mget`/`_msearch`).
pub fn classify_error(status: Option<u16>, e: &Value) -> SinkError {
    let (kind, reason) = describe(e);
    let status = status.unwrap_or_else(|| match kind.as_str() {
        "index_not_found_exception" => 404,
        k if TRANSIENT.contains(&k) => 503,
        _ => 400,
    });
    by_status(status, kind, reason)
}

/// Error types that mean "try again later", for per-item errors that carry no status.
const TRANSIENT: &[&str] = &[
    "es_rejected_execution_exception",
    "circuit_breaking_exception",
    "no_shard_available_action_exception",
    "unavailable_shards_exception",
    "node_not_connected_exception",
    "timeout_exception",
];

fn by_status(status: u16, kind: String, reason: String) -> SinkError {
    let what = if kind.is_empty() {
        reason.clone()
    } else if reason.is_empty() {
        kind.clone()
    } else {
        format!("{kind}: {reason}")
    };
    match status {
        408 | 429 | 500..=599 => SinkError::Unavailable(format!("HTTP {status} {what}")),
        404 if kind == "index_not_found_exception" => SinkError::Rejected(format!(
            "index not found ({what}): check sink.index; nothing is declared missing while \
             it does not exist"
        )),
        401 => SinkError::Rejected(format!(
            "HTTP 401 authentication failed ({what}): check sink.username/password or api_key"
        )),
        403 => SinkError::Rejected(format!(
            "HTTP 403 not allowed ({what}): the user needs the `read` privilege on the index"
        )),
        _ => SinkError::Rejected(format!("HTTP {status} {what}")),
    }
}

/// (type, reason) of an error object, with the root cause when it says more.
pub(super) fn describe(e: &Value) -> (String, String) {
    if let Some(s) = e.as_str() {
        return (String::new(), s.to_string());
    }
    let kind = e
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mut reason = e
        .get("reason")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let cause = e
        .pointer("/root_cause/0")
        .or_else(|| e.get("caused_by"))
        .filter(|c| c.get("type").and_then(Value::as_str) != Some(kind.as_str()));
    if let Some(c) = cause {
        let ct = c.get("type").and_then(Value::as_str).unwrap_or("");
        let cr = c.get("reason").and_then(Value::as_str).unwrap_or("");
        reason = format!("{reason} (caused by {ct}: {cr})");
    }
    (kind, reason)
}

/// Transport failures (refused, reset, DNS, TLS, timeout) are all transient.
pub(super) fn transport_error(e: &elasticsearch::Error, timeout: Duration) -> SinkError {
    if e.is_timeout() {
        SinkError::Unavailable(format!("request timed out after {timeout:?}"))
    } else {
        SinkError::Unavailable(format!("cannot reach elasticsearch: {e}"))
    }
}

pub(super) fn prefix(what: &str, e: SinkError) -> SinkError {
    match e {
        SinkError::Unavailable(m) => SinkError::Unavailable(format!("{what}: {m}")),
        SinkError::Rejected(m) => SinkError::Rejected(format!("{what}: {m}")),
    }
}

/// `_mget` refuses patterns and aliases of several indices.
pub(super) fn multi_index_refusal(m: &str) -> bool {
    m.contains("illegal_argument_exception")
        && (m.contains("alias") || m.contains("more than one") || m.contains("wildcard"))
}

pub(super) fn snippet(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(body);
    let s = crate::logging::printable(&s, 200);
    if s.is_empty() {
        "(empty body)".into()
    } else {
        s
    }
}
