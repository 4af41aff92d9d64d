//! The one HTTP client of the evidence sources (src/evidence/flink, src/evidence/connect):
//! a bounded, read-only GET against one configured base URL.
//!
//! What every source needs, and must not get wrong twice: each request bounded by a timeout;
//! redirects never followed (review 37, F7: a redirect could make the auditor fetch any URL
//! and show parts of its answer in `/api/status`); an answer larger than [`MAX_BODY`]
//! refused, a chunk at a time whether it states its length or not (review 37, F6: anything
//! answering at the URL could exhaust the daemon's memory); credentials in the URL sent as
//! HTTP Basic auth and never shown (the URL shown has neither them nor its query).

use crate::config::SecretUrl;
use serde::Serialize;
use std::time::Duration;

/// The largest answer read from an evidence source: a REST answer the evidence reads is tens
/// of kilobytes; more is not the answer asked for.
pub const MAX_BODY: usize = 4 << 20;

/// Why a GET gave no usable body. Never holds the URL's credentials; each source words it
/// with its own name (its `SourceError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpGetError {
    /// The URL is not an http(s) URL with a host, or a path does not join it.
    #[error("not a valid http(s) URL")]
    Url,
    /// The request failed: connection refused, timeout, TLS (reqwest's words, without the
    /// URL).
    #[error("{0}")]
    Http(String),
    /// The answer was larger than [`MAX_BODY`]: not read further.
    #[error("{path} answered with more than {max} bytes: not read")]
    TooLarge {
        /// The path asked, without its query.
        path: String,
        /// The limit.
        max: usize,
    },
    /// A status other than 2xx (a redirect included: not followed).
    #[error("{path} answered HTTP {status}")]
    Status {
        /// The path asked, without its query.
        path: String,
        /// The HTTP status.
        status: u16,
        /// The body (at most [`MAX_BODY`]), for the source to read its error shape from.
        body: Vec<u8>,
    },
}

/// Why an answer of an evidence source's REST API could not be used (the URL is never part
/// of it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestError {
    /// The body is not the source's documented JSON.
    #[error("{what} is not {kind}'s documented JSON: {why}")]
    Shape {
        /// The source ("Flink", "Kafka Connect").
        kind: &'static str,
        /// Which answer (`/jobs/overview`, `/connectors/{name}/status`).
        what: &'static str,
        /// What did not parse (cleaned, capped).
        why: String,
    },
    /// The source answered an error status.
    #[error("{what} answered HTTP {status}: {message}")]
    Status {
        /// Which answer.
        what: String,
        /// The HTTP status.
        status: u16,
        /// The source's own error words (or the start of the body), cleaned.
        message: String,
    },
}

impl RestError {
    /// `what` of `kind` did not parse as documented: serde's words, without control
    /// characters and capped (they may quote the hostile body).
    pub fn shape(kind: &'static str, what: &'static str, e: &serde_json::Error) -> Self {
        RestError::Shape {
            kind,
            what,
            why: crate::logging::printable(&e.to_string(), 200),
        }
    }
}

/// Whether an evidence source could be read, for `/api/status`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(tag = "state", content = "reason", rename_all = "snake_case")]
pub enum SourceState {
    /// Not read yet.
    #[default]
    Pending,
    /// The last poll read it.
    Ok,
    /// The last poll failed, and why.
    Error(String),
}

/// A configured URL, already without credentials, as logs and `/api/status` show it:
/// without its query and fragment either (review 37, F8: `?access_token=…` was shown),
/// even when it does not parse.
pub fn shown_url(without_credentials: &str) -> String {
    match url::Url::parse(without_credentials) {
        Ok(mut u) => {
            u.set_query(None);
            u.set_fragment(None);
            u.to_string()
        }
        Err(_) => without_credentials
            .split(['?', '#'])
            .next()
            .unwrap_or_default()
            .to_owned(),
    }
}

/// A client for one evidence source's REST API.
pub struct EvidenceClient {
    client: reqwest::Client,
    /// The base URL without credentials, query or fragment, ending in `/`.
    base: url::Url,
    auth: Option<(String, Option<String>)>,
}

impl EvidenceClient {
    /// A client for the API at `url` (http or https, with a host); every request is bounded
    /// by `timeout`.
    pub fn new(url: &SecretUrl, timeout: Duration) -> Result<Self, HttpGetError> {
        let parsed = url.parse().map_err(|_| HttpGetError::Url)?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(HttpGetError::Url);
        }
        let auth = url
            .username()
            .map(|u| (u, url.password().map(|p| p.expose().to_owned())));
        let mut base =
            url::Url::parse(&url.without_credentials()).map_err(|_| HttpGetError::Url)?;
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        base.set_query(None);
        base.set_fragment(None);
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            // Only the configured server is asked (review 37, F7).
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| HttpGetError::Http(e.without_url().to_string()))?;
        Ok(Self { client, base, auth })
    }

    /// The URL without credentials or query (safe to log and show).
    pub fn shown_url(&self) -> String {
        self.base.to_string()
    }

    /// `path` (relative, may carry a query) under the base URL.
    pub fn join(&self, path: &str) -> Result<url::Url, HttpGetError> {
        self.base.join(path).map_err(|_| HttpGetError::Url)
    }

    /// The base URL followed by `segments`, each percent-encoded as one path segment: a
    /// name from the config (a connector's) never adds a segment, a query or `..` of its own.
    pub fn segments(&self, segments: &[&str]) -> Result<url::Url, HttpGetError> {
        // The url crate drops these segments instead of encoding them: the path would name
        // another resource.
        if segments.iter().any(|s| matches!(*s, "" | "." | "..")) {
            return Err(HttpGetError::Url);
        }
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|_| HttpGetError::Url)?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    /// GETs `path` (see [`Self::join`]).
    pub async fn get(&self, path: &str) -> Result<Vec<u8>, HttpGetError> {
        let url = self.join(path)?;
        self.get_url(url).await
    }

    /// GETs `url` (made by [`Self::join`] or [`Self::segments`]): the body of a 2xx answer.
    /// Errors name the path asked relative to the base URL, without its query.
    pub async fn get_url(&self, url: url::Url) -> Result<Vec<u8>, HttpGetError> {
        let shown_path = format!(
            "/{}",
            url.path()
                .strip_prefix(self.base.path())
                .unwrap_or(url.path())
                .trim_start_matches('/')
        );
        let http = |e: reqwest::Error| HttpGetError::Http(e.without_url().to_string());
        let mut req = self.client.get(url);
        if let Some((user, password)) = &self.auth {
            req = req.basic_auth(user, password.as_deref());
        }
        let mut resp = req.send().await.map_err(http)?;
        let status = resp.status();
        let too_large = || HttpGetError::TooLarge {
            path: shown_path.clone(),
            max: MAX_BODY,
        };
        if resp.content_length().is_some_and(|n| n > MAX_BODY as u64) {
            return Err(too_large());
        }
        // A chunk at a time up to the limit (a body without a length, or a lying one).
        let mut body: Vec<u8> = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(http)? {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            return Err(HttpGetError::Status {
                path: shown_path,
                status: status.as_u16(),
                body,
            });
        }
        Ok(body)
    }

    /// The user and password sent as Basic auth (tests: they were taken from the URL).
    #[cfg(test)]
    pub(crate) fn credentials(&self) -> Option<(&str, Option<&str>)> {
        self.auth.as_ref().map(|(u, p)| (u.as_str(), p.as_deref()))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// One answer per connection from a local listener: `head` then `body_len` bytes of
    /// `x` (chunked when `length` is false). Returns the port.
    pub(crate) async fn answer_once(head: &'static str, body_len: usize, length: bool) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let port = listener.local_addr().expect("addr").port();
        tokio::spawn(async move {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf).await;
            let framing = if length {
                format!("Content-Length: {body_len}\r\n")
            } else {
                "Transfer-Encoding: chunked\r\n".to_string()
            };
            let _ = s
                .write_all(format!("{head}\r\n{framing}Connection: close\r\n\r\n").as_bytes())
                .await;
            let block = vec![b'x'; 64 * 1024];
            let mut left = body_len;
            while left > 0 {
                let n = left.min(block.len());
                let sent = if length {
                    s.write_all(&block[..n]).await
                } else {
                    let mut c = format!("{n:x}\r\n").into_bytes();
                    c.extend_from_slice(&block[..n]);
                    c.extend_from_slice(b"\r\n");
                    s.write_all(&c).await
                };
                if sent.is_err() {
                    return;
                }
                left -= n;
            }
            if !length {
                let _ = s.write_all(b"0\r\n\r\n").await;
            }
        });
        port
    }

    fn client(url: &str) -> EvidenceClient {
        EvidenceClient::new(&SecretUrl::new(url), Duration::from_secs(10)).expect("valid")
    }

    #[test]
    fn the_url_loses_its_credentials_and_query_and_names_are_one_segment() {
        let c = client("http://ops:s3cret@connect:8083/proxy?token=abc#x");
        assert_eq!(c.shown_url(), "http://connect:8083/proxy/");
        assert_eq!(c.credentials(), Some(("ops", Some("s3cret"))));
        let url = c
            .segments(&["connectors", "es sink/../x?y=1", "status"])
            .expect("joins");
        assert_eq!(
            url.as_str(),
            "http://connect:8083/proxy/connectors/es%20sink%2F..%2Fx%3Fy=1/status"
        );
        assert_eq!(
            client("http://connect:8083")
                .segments(&["connectors", "es-sink"])
                .map(|u| u.to_string()),
            Ok("http://connect:8083/connectors/es-sink".to_owned())
        );
        assert_eq!(c.segments(&["connectors", ".."]), Err(HttpGetError::Url));
        for bad in ["mysql://fe:9030/db", "connect:8083", "not a url"] {
            assert!(
                matches!(
                    EvidenceClient::new(&SecretUrl::new(bad), Duration::from_secs(1)),
                    Err(HttpGetError::Url)
                ),
                "{bad}"
            );
        }
    }

    /// Review 37, F6 and F7: an answer larger than `MAX_BODY` is refused whether it says its
    /// length or not, a redirect is not followed, and an error's body is kept for its words.
    #[tokio::test]
    async fn oversized_answers_are_refused_and_redirects_not_followed() {
        for length in [true, false] {
            let port = answer_once("HTTP/1.1 200 OK", MAX_BODY + 1, length).await;
            let e = client(&format!("http://127.0.0.1:{port}/base"))
                .get("connectors/x/status?expand=1")
                .await
                .expect_err("too large");
            assert_eq!(
                e,
                HttpGetError::TooLarge {
                    path: "/connectors/x/status".into(),
                    max: MAX_BODY
                },
                "length {length}"
            );
        }
        let port = answer_once(
            "HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/latest/meta-data/",
            3,
            true,
        )
        .await;
        let e = client(&format!("http://127.0.0.1:{port}"))
            .get("a")
            .await
            .expect_err("not followed");
        assert_eq!(
            e,
            HttpGetError::Status {
                path: "/a".into(),
                status: 302,
                body: b"xxx".to_vec()
            }
        );
        let port = answer_once("HTTP/1.1 200 OK", 5, false).await;
        assert_eq!(
            client(&format!("http://127.0.0.1:{port}")).get("a").await,
            Ok(b"xxxxx".to_vec())
        );
    }
}
