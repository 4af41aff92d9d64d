//! Doris Stream Load, the writer of `replay --to-sink` when `sink.stream_load_url` is set.
//!
//! One HTTP `PUT {stream_load_url}/api/{db}/{table}/_stream_load` per replay, body = JSON
//! lines (`format: json`, `read_json_by_line: true`), HTTP basic auth, `Expect:
//! 100-continue`, and a `label` derived from the audit, topic, partition and offsets: a
//! repeated replay is refused by Doris with `Label Already Exists` instead of loading the
//! rows twice. The FE answers with a 307 to a BE; HTTP clients drop `Authorization` on a
//! redirect to another host, so redirects are followed here by hand, re-sending the same
//! credentials (what `curl --location-trusted` does). The BE answers with the load's JSON
//! result ([`LoadResult`]).
//!
//! Not tested against a real Doris (none runs here): tests/stream_load.rs drives it
//! against a fake FE + BE that follow Doris's documented behaviour.

use crate::sink::tls::TlsSettings;
use serde::Deserialize;
use std::time::Duration;

/// Redirects followed at most (FE → BE is one).
const MAX_REDIRECTS: usize = 5;

/// Where and how to load.
#[derive(Clone)]
pub struct StreamLoad {
    client: reqwest::Client,
    base: url::Url,
    db: String,
    table: String,
    username: String,
    password: String,
}

impl std::fmt::Debug for StreamLoad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamLoad")
            .field("base", &self.base.as_str())
            .field("db", &self.db)
            .field("table", &self.table)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// The JSON result of a Stream Load (the fields read here; Doris sends more).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase", default)]
pub struct LoadResult {
    /// `Success`, `Publish Timeout`, `Label Already Exists` or `Fail`.
    pub status: String,
    /// The label the load ran under.
    pub label: String,
    /// `OK`, or why it failed.
    pub message: String,
    /// Rows read from the body.
    pub number_total_rows: u64,
    /// Rows loaded.
    pub number_loaded_rows: u64,
    /// Rows rejected as malformed (see `ErrorURL`).
    pub number_filtered_rows: u64,
    /// Rows dropped by a `where` condition.
    pub number_unselected_rows: u64,
    /// Where the BE keeps the rejected rows, when there are some.
    #[serde(rename = "ErrorURL")]
    pub error_url: Option<String>,
    /// With `Label Already Exists`: the state of the load that owns the label.
    pub existing_job_status: Option<String>,
}

impl StreamLoad {
    /// `base` is the FE HTTP address (`http://fe:8030`), without credentials; over https,
    /// `tls` says which CA to trust and how strictly ([`crate::sink::tls`]).
    pub fn new(
        base: &str,
        db: &str,
        table: &str,
        username: &str,
        password: &str,
        timeout: Duration,
        tls: &TlsSettings,
    ) -> Result<Self, String> {
        let mut base = url::Url::parse(base).map_err(|e| format!("stream_load_url: {e}"))?;
        if !base.path().ends_with('/') {
            let p = format!("{}/", base.path());
            base.set_path(&p);
        }
        let builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout);
        // The CA and verification of the sink's MySQL connection apply here too.
        let client = tls
            .http_client(builder)
            .map_err(|e| e.to_string())?
            .build()
            .map_err(|e| format!("http client: {e}"))?;
        Ok(Self {
            client,
            base,
            db: db.into(),
            table: table.into(),
            username: username.into(),
            password: password.into(),
        })
    }

    /// The load URL on the FE.
    pub fn url(&self) -> Result<url::Url, String> {
        self.base
            .join(&format!("api/{}/{}/_stream_load", self.db, self.table))
            .map_err(|e| format!("stream_load_url: {e}"))
    }

    /// Loads `body` (JSON lines) under `label`; follows redirects keeping the credentials.
    pub async fn load(&self, label: &str, body: Vec<u8>) -> Result<LoadResult, String> {
        let mut url = self.url()?;
        for _ in 0..=MAX_REDIRECTS {
            let resp = self
                .client
                .put(url.clone())
                .basic_auth(&self.username, Some(&self.password))
                .header("Expect", "100-continue")
                .header("label", label)
                .header("format", "json")
                .header("read_json_by_line", "true")
                .header("Content-Type", "text/plain; charset=UTF-8")
                .body(body.clone())
                .send()
                .await
                .map_err(|e| format!("stream load to {}: {}", redacted(&url), chain(&e)))?;
            let status = resp.status();
            if status.is_redirection() {
                let location = resp
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| {
                        format!("HTTP {status} from {} without Location", redacted(&url))
                    })?
                    .to_string();
                url = url
                    .join(&location)
                    .map_err(|e| format!("redirect to {location:?}: {e}"))?;
                continue;
            }
            let text = resp
                .text()
                .await
                .map_err(|e| format!("stream load answer from {}: {e}", redacted(&url)))?;
            if !status.is_success() {
                return Err(format!(
                    "stream load: HTTP {status} from {}: {}",
                    redacted(&url),
                    snippet(&text)
                ));
            }
            return serde_json::from_str(&text)
                .map_err(|_| format!("stream load: not a JSON result: {}", snippet(&text)));
        }
        Err(format!("stream load: more than {MAX_REDIRECTS} redirects"))
    }
}

/// A deterministic Doris label (`[-_A-Za-z0-9:]`, at most 128 characters) for a replay of
/// `first..=last` (`n` records) of `topic`/`partition` under `audit`. The same records give
/// the same label, so Doris refuses a second load of them.
pub fn label(audit: &str, topic: &str, partition: i32, first: i64, last: i64, n: usize) -> String {
    let mut raw = format!("gap_auditor-{audit}-{topic}-{partition}-{first}-{last}");
    if n as i64 != last - first + 1 {
        raw.push_str(&format!("-n{n}"));
    }
    let clean: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() <= 128 && clean == raw {
        return clean;
    }
    // Replaced characters or length: a hash of the original keeps labels distinct.
    let hash = fnv1a(raw.as_bytes());
    let keep: String = clean.chars().take(128 - 17).collect();
    format!("{keep}-{hash:016x}")
}

fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn redacted(u: &url::Url) -> String {
    let mut u = u.clone();
    let _ = u.set_password(None);
    let _ = u.set_username("");
    u.to_string()
}

/// An error with its causes: reqwest's own text ("error sending request") hides why (a
/// refused certificate, a refused connection).
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = cause.source();
    }
    out
}

fn snippet(s: &str) -> String {
    let s = crate::logging::printable(s, 300);
    if s.is_empty() {
        "(empty body)".into()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_deterministic_and_valid() {
        let a = label("dns_logs", "dns", 0, 2, 3, 2);
        assert_eq!(a, "gap_auditor-dns_logs-dns-0-2-3");
        assert_eq!(a, label("dns_logs", "dns", 0, 2, 3, 2));
        assert_ne!(a, label("dns_logs", "dns", 1, 2, 3, 2));
        let odd = label("a", "logs.v1", 0, 2, 9, 3);
        assert!(odd.ends_with(&format!(
            "{:016x}",
            fnv1a(b"gap_auditor-a-logs.v1-0-2-9-n3")
        )));
        let long = label(&"x".repeat(200), "t", 0, 0, 0, 1);
        assert_eq!(long.len(), 128);
        for l in [a, odd, long] {
            assert!(
                l.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':'))
            );
        }
    }

    #[test]
    fn documented_results_parse() {
        // Doris's documented answers (Stream Load manual; the label-reuse answer of
        // apache/doris#42700).
        let ok: LoadResult = serde_json::from_str(
            r#"{"TxnId":451170,"Label":"l","TwoPhaseCommit":"false","Status":"Success",
            "Message":"OK","NumberTotalRows":3,"NumberLoadedRows":3,"NumberFilteredRows":0,
            "NumberUnselectedRows":0,"LoadBytes":30,"LoadTimeMs":51}"#,
        )
        .expect("success");
        assert_eq!((ok.status.as_str(), ok.number_loaded_rows), ("Success", 3));
        let dup: LoadResult = serde_json::from_str(
            r#"{"TxnId":-1,"Label":"l","Status":"Label Already Exists","ExistingJobStatus":"FINISHED",
            "Message":"Label [l] has already been used, relate to txn [602531767123968]",
            "NumberTotalRows":0,"NumberLoadedRows":0,"NumberFilteredRows":0,"NumberUnselectedRows":0}"#,
        )
        .expect("dup");
        assert_eq!(dup.existing_job_status.as_deref(), Some("FINISHED"));
        let fail: LoadResult = serde_json::from_str(
            r#"{"Status":"Fail","Message":"too many filtered rows","NumberTotalRows":2,
            "NumberLoadedRows":0,"NumberFilteredRows":2,"NumberUnselectedRows":0,
            "ErrorURL":"http://be:8040/api/_load_error_log?file=x"}"#,
        )
        .expect("fail");
        assert_eq!(fail.number_filtered_rows, 2);
        assert!(fail.error_url.is_some());
    }
}
