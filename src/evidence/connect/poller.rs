//! Reads the Connect REST API, polled on a timer by the shared loop
//! (src/evidence/poll.rs) into a [`ConnectView`]: a slow or dead Connect worker never
//! delays a round, and nothing is asked per record.
//!
//! Read-only: `GET /connectors/{name}/status` and `GET /connectors/{name}/config`, nothing
//! else (the name percent-encoded as one path segment). The URL may carry credentials
//! (`http://user:pass@connect:8083`, for a proxy in front of the REST port): they are sent
//! as HTTP Basic auth, and the URL shown in logs and `/api/status` has them removed.

use super::history::History;
use super::rest::{self, RestError};
use crate::clock::Clock;
use crate::config::SecretUrl;
use crate::evidence::http::{EvidenceClient, HttpGetError};
use crate::evidence::poll::{Shared, Source, View};
use crate::logging::printable;
use std::time::Duration;

/// Why the Connect REST API could not be read this time (gaps then carry no Connect
/// evidence; no verdict waits for it). Never holds the URL's credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// `connect_url` is not an http(s) URL, or the connector's name makes no path segment.
    #[error(
        "audits.pipeline.connect_url is not a valid http(s) URL (or connect_connector is not a connector's name)"
    )]
    Url,
    /// The request failed: connection refused, timeout, TLS (reqwest's words, without the
    /// URL).
    #[error("cannot reach Kafka Connect at {url}: {why}")]
    Http {
        /// The URL without credentials.
        url: String,
        /// What failed.
        why: String,
    },
    /// The answer was not usable.
    #[error(transparent)]
    Rest(#[from] RestError),
    /// The answer was larger than [`crate::evidence::http::MAX_BODY`]: not read further.
    #[error("Kafka Connect at {url} answered {path} with more than {max} bytes: not read")]
    TooLarge {
        /// The URL without credentials.
        url: String,
        /// The path asked.
        path: String,
        /// The limit.
        max: usize,
    },
    /// The worker knows no connector of that name (404).
    #[error(
        "Kafka Connect at {url} has no connector named {connector:?} (is connect_connector spelt as GET /connectors lists it?)"
    )]
    NoConnector {
        /// The URL without credentials.
        url: String,
        /// The name asked.
        connector: String,
    },
}

/// What the poller learnt, shared with the audit loop (`partial`: why the connector's
/// config could not be read; its status was read all the same).
pub type ConnectView = View<History>;

/// The shared view: written by the poller after each poll, read by the audit loop.
pub type SharedView = Shared<History>;

/// One Connect REST API and the connector's name.
pub struct ConnectSource {
    http: EvidenceClient,
    connector: String,
    status: url::Url,
    config: url::Url,
}

impl ConnectSource {
    /// A source reading connector `connector` at the Connect REST API at `url`; every
    /// request is bounded by `timeout`.
    pub fn new(url: &SecretUrl, connector: &str, timeout: Duration) -> Result<Self, SourceError> {
        let http = EvidenceClient::new(url, timeout).map_err(|e| match e {
            HttpGetError::Http(why) => SourceError::Http {
                url: crate::evidence::http::shown_url(&url.without_credentials()),
                why,
            },
            _ => SourceError::Url,
        })?;
        let at = |what: &str| {
            http.segments(&["connectors", connector, what])
                .map_err(|_| SourceError::Url)
        };
        Ok(Self {
            status: at("status")?,
            config: at("config")?,
            http,
            connector: connector.to_owned(),
        })
    }

    /// The Connect REST URL without credentials or query (safe to log and show).
    pub fn shown_url(&self) -> String {
        self.http.shown_url()
    }

    /// The connector's name, cleaned for logs.
    pub fn connector(&self) -> String {
        printable(&self.connector, 200)
    }

    async fn get(&self, url: &url::Url, what: &str) -> Result<Vec<u8>, SourceError> {
        self.http.get_url(url.clone()).await.map_err(|e| match e {
            HttpGetError::Url => SourceError::Url,
            HttpGetError::Http(why) => SourceError::Http {
                url: self.shown_url(),
                why,
            },
            // The path shown is the template: the name is the config's, not the server's.
            HttpGetError::TooLarge { max, .. } => SourceError::TooLarge {
                url: self.shown_url(),
                path: what.to_owned(),
                max,
            },
            HttpGetError::Status { status: 404, .. } => SourceError::NoConnector {
                url: self.shown_url(),
                connector: self.connector(),
            },
            HttpGetError::Status { status, body, .. } => RestError::Status {
                what: what.to_owned(),
                status,
                message: rest::error_message(&body),
            }
            .into(),
        })
    }

    /// Polls once into `history`: the status (its changes placed at `clock`'s reading when
    /// it was read), then the config. Returns why the config could not be read, if it could
    /// not (the status was: the changes are evidence without it).
    pub async fn read_once(
        &self,
        history: &mut History,
        clock: &Clock,
    ) -> Result<Option<String>, SourceError> {
        let body = self.get(&self.status, "/connectors/{name}/status").await?;
        let status = rest::parse_status(&body)?;
        history.observe_status(&status, clock.now_ms());
        let config = match self.get(&self.config, "/connectors/{name}/config").await {
            Ok(body) => rest::parse_config(&body).map_err(SourceError::from),
            Err(e) => Err(e),
        };
        Ok(match config {
            Ok(errors) => {
                history.observe_config(errors, clock.now_ms());
                None
            }
            Err(e) => Some(e.to_string()),
        })
    }
}

impl Source for ConnectSource {
    type History = History;
    const KIND: &'static str = "Kafka Connect";

    fn subject(&self) -> String {
        self.connector()
    }

    fn shown_url(&self) -> String {
        ConnectSource::shown_url(self)
    }

    async fn poll(&self, history: &mut History, clock: &Clock) -> Result<Option<String>, String> {
        self.read_once(history, clock)
            .await
            .map_err(|e| e.to_string())
    }

    fn not_read(&self, history: &mut History, at_ms: i64, why: &str) {
        history.note_not_read(at_ms, why);
    }

    fn partial_consequence(&self) -> &'static str {
        "gaps cannot say whether the connector skips records silently (errors.tolerance)"
    }

    /// The changes this poll saw, in the words a gap would carry (bounded).
    /// Every change seen since the last poll's reads: the status and the config are read
    /// at two times, so a window ending at the last event's time left out status changes
    /// seen with a reconfiguration (review 28b, R28b-9).
    fn log_changes(&self, audit: &str, before: &History, after: &History) {
        if let Some(words) = changes_since(&self.connector, before, after) {
            tracing::info!(audit = %audit, connector = %self.connector(), "{words}");
        }
    }
}

/// The changes `after` holds that `before` did not, in words (bounded as a gap's are).
fn changes_since(connector: &str, before: &History, after: &History) -> Option<String> {
    let (from, to) = (before.read_ms().unwrap_or(i64::MIN), after.read_ms()?);
    after
        .events()
        .next_back()
        .is_some_and(|e| e.at_ms > from)
        .then(|| after.explain(connector, Some((from, to)), false))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task's failure and a reconfiguration seen by one poll (the config read a little
    /// after the status) are both logged (review 28b, R28b-9: the failure was not).
    #[test]
    fn a_poll_logs_every_change_it_saw() {
        let running = rest::parse_status(
            br#"{"name":"s","connector":{"state":"RUNNING","worker_id":"w:1"},"tasks":[{"id":0,"state":"RUNNING","worker_id":"w:1"}],"type":"sink"}"#,
        )
        .expect("status");
        let failed = rest::parse_status(
            br#"{"name":"s","connector":{"state":"RUNNING","worker_id":"w:1"},"tasks":[{"id":0,"state":"FAILED","worker_id":"w:1","trace":"boom"}],"type":"sink"}"#,
        )
        .expect("status");
        let config = |fingerprint| rest::ConnectorConfig {
            errors: rest::ErrorHandling {
                tolerance: "none".into(),
                dead_letter_queue: false,
            },
            fingerprint,
        };
        let mut before = History::default();
        before.observe_status(&running, 1_000);
        before.observe_config(config(1), 1_010);
        let mut after = before.clone();
        after.observe_status(&failed, 2_000);
        after.observe_config(config(2), 2_010);
        let words = changes_since("s", &before, &after).expect("logged");
        assert!(words.contains("FAILED at"), "{words}");
        assert!(words.contains("reconfigured at"), "{words}");
        // Nothing new: nothing logged.
        let mut quiet = after.clone();
        quiet.observe_status(&failed, 3_000);
        quiet.observe_config(config(2), 3_010);
        assert_eq!(changes_since("s", &after, &quiet), None);
    }
    use crate::evidence::http::tests::answer_once;

    #[test]
    fn the_connector_is_one_path_segment_and_the_url_loses_its_credentials() {
        let s = ConnectSource::new(
            &SecretUrl::new("http://ops:s3cret@connect:8083/kc?x=1"),
            "es sink/../../admin",
            Duration::from_secs(1),
        )
        .expect("valid");
        assert_eq!(s.shown_url(), "http://connect:8083/kc/");
        assert_eq!(
            s.status.as_str(),
            "http://connect:8083/kc/connectors/es%20sink%2F..%2F..%2Fadmin/status"
        );
        assert_eq!(
            s.config.as_str(),
            "http://connect:8083/kc/connectors/es%20sink%2F..%2F..%2Fadmin/config"
        );
        for (url, name) in [("mysql://c:1/", "x"), ("http://connect:8083", "..")] {
            assert!(
                matches!(
                    ConnectSource::new(&SecretUrl::new(url), name, Duration::from_secs(1)),
                    Err(SourceError::Url)
                ),
                "{url} {name}"
            );
        }
    }

    /// A refused connection, a 404 and an oversized answer are errors that name the URL
    /// without its password; the history keeps what it had.
    #[tokio::test]
    async fn failures_are_errors_without_secrets() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("port");
        let clock = Clock::manual(0);
        let source = |port: u16| {
            ConnectSource::new(
                &SecretUrl::new(format!("http://ops:s3cret@127.0.0.1:{port}")),
                "es-sink",
                Duration::from_secs(5),
            )
            .expect("valid")
        };
        let mut h = History::default();
        let e = source(port)
            .read_once(&mut h, &clock)
            .await
            .expect_err("nothing listens");
        let text = e.to_string();
        assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
        assert!(!text.contains("s3cret") && !text.contains("ops:"), "{text}");
        let port = answer_once("HTTP/1.1 404 Not Found", 0, true).await;
        let e = source(port)
            .read_once(&mut h, &clock)
            .await
            .expect_err("404");
        assert!(
            matches!(&e, SourceError::NoConnector { connector, .. } if connector == "es-sink"),
            "{e}"
        );
        let port = answer_once(
            "HTTP/1.1 200 OK",
            crate::evidence::http::MAX_BODY + 1,
            false,
        )
        .await;
        let e = source(port)
            .read_once(&mut h, &clock)
            .await
            .expect_err("too large");
        assert_eq!(
            e.to_string(),
            format!(
                "Kafka Connect at http://127.0.0.1:{port}/ answered /connectors/{{name}}/status with more than 4194304 bytes: not read"
            )
        );
        assert!(h.connector().is_none());
    }
}
