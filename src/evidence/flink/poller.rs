//! Reads the JobManager's REST API, polled on a timer by the shared loop
//! (src/evidence/poll.rs) into a [`FlinkView`]: a slow or dead JobManager never delays a
//! round, and nothing is asked per record.
//!
//! Read-only: `GET /jobs/overview` and `GET /jobs/{jid}/checkpoints`, nothing else. The URL
//! may carry credentials (`http://user:pass@jobmanager:8081`, for a proxy in front of the
//! REST port): they are sent as HTTP Basic auth, and the URL shown in logs and
//! `/api/status` has them removed.

use super::history::History;
use super::rest::{self, RestError};
use crate::clock::Clock;
use crate::config::SecretUrl;
use crate::evidence::http::{EvidenceClient, HttpGetError};
use crate::evidence::poll::{Shared, Source, View};
use crate::logging::printable;
use std::time::Duration;

/// Why the JobManager could not be read this time (gaps then carry no Flink evidence; no
/// verdict waits for it). Never holds the URL's credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// `flink_rest_url` is not an http(s) URL.
    #[error("audits.pipeline.flink_rest_url is not a valid http(s) URL")]
    Url,
    /// The request failed: connection refused, timeout, TLS (reqwest's words, without the
    /// URL).
    #[error("cannot reach the Flink JobManager at {url}: {why}")]
    Http {
        /// The URL without credentials.
        url: String,
        /// What failed.
        why: String,
    },
    /// The answer was not usable.
    #[error(transparent)]
    Rest(#[from] RestError),
    /// The answer was larger than [`MAX_BODY`]: not read further (review 37, F6: a
    /// JobManager, or anything answering at its URL, could exhaust the daemon's memory).
    #[error("the Flink JobManager at {url} answered {path} with more than {max} bytes: not read")]
    TooLarge {
        /// The URL without credentials.
        url: String,
        /// The path asked.
        path: String,
        /// The limit.
        max: usize,
    },
    /// Several runs of the job's name are not ended at once: several pipelines carry the
    /// name (Flink SQL's default `insert-into_…`, a blue/green copy), and which one
    /// restarted cannot be told (review 37, F2).
    #[error(
        "the Flink JobManager lists {runs} running jobs named {job:?}: which one is this audit's pipeline cannot be told, so its restarts explain no gap (give the job a name of its own: pipeline.name)"
    )]
    Ambiguous {
        /// The job's name.
        job: String,
        /// How many runs of it are not ended.
        runs: usize,
    },
    /// No job of that name is on the JobManager.
    #[error(
        "the Flink JobManager lists no job named {0:?} in /jobs/overview (is flink_job spelt as the job's name? was it submitted to this JobManager?)"
    )]
    NoJob(String),
}

/// The state of the evidence source, for `/api/status` (one shape for every source).
pub use crate::evidence::http::SourceState;

/// What the poller learnt, shared with the audit loop (the job's runs as seen so far, kept
/// across failed polls: a JobManager that died with the job took its runs' REST answers
/// with it, not what they said).
pub type FlinkView = View<History>;

/// The shared view: written by the poller after each poll, read by the audit loop.
pub type SharedView = Shared<History>;

/// One JobManager and the job's name.
pub struct FlinkSource {
    /// The JobManager's REST API (bounded reads, no redirects: src/evidence/http.rs).
    http: EvidenceClient,
    job: String,
}

/// The largest answer read from the JobManager: a busy cluster's `/jobs/overview` or a
/// job's checkpoint statistics are tens of kilobytes; more is not a JobManager's answer.
pub use crate::evidence::http::MAX_BODY;

/// Most runs whose checkpoints one poll reads (the live ones and those whose restore is not
/// known yet; a restart loop must not make a poll ask for dozens).
const CHECKPOINT_READS: usize = 4;

impl FlinkSource {
    /// A source reading job `job` on the JobManager at `url`; every request is bounded by
    /// `timeout`.
    pub fn new(url: &SecretUrl, job: &str, timeout: Duration) -> Result<Self, SourceError> {
        let http = EvidenceClient::new(url, timeout).map_err(|e| match e {
            HttpGetError::Http(why) => SourceError::Http {
                url: crate::evidence::http::shown_url(&url.without_credentials()),
                why,
            },
            _ => SourceError::Url,
        })?;
        Ok(Self {
            http,
            job: job.to_owned(),
        })
    }

    /// The JobManager's URL without credentials (safe to log and show).
    pub fn shown_url(&self) -> String {
        self.http.shown_url()
    }

    /// The job's name.
    pub fn job(&self) -> &str {
        &self.job
    }

    async fn get(&self, path: &str) -> Result<Vec<u8>, SourceError> {
        self.http.get(path).await.map_err(|e| match e {
            HttpGetError::Url => SourceError::Url,
            HttpGetError::Http(why) => SourceError::Http {
                url: self.shown_url(),
                why,
            },
            HttpGetError::TooLarge { path, max } => SourceError::TooLarge {
                url: self.shown_url(),
                path,
                max,
            },
            HttpGetError::Status { path, status, body } => RestError::Status {
                what: path,
                status,
                message: rest::error_message(&body),
            }
            .into(),
        })
    }

    /// Polls once into `history`: the job's runs, then the checkpoints of those worth
    /// reading. A run whose checkpoints cannot be read (checkpointing off, an archived run
    /// the JobManager forgot) keeps what was known of it.
    pub async fn read_once(&self, history: &mut History, clock: &Clock) -> Result<(), SourceError> {
        // The audit's own clock (it never steps), the one its commit steps are stamped with
        // (review 27, G2); the answer was made between the request and its arrival, so the
        // JobManager's "now" in it is placed at the middle.
        let sent = clock.now_ms();
        let body = self.get("jobs/overview").await?;
        let answered = sent + (clock.now_ms() - sent) / 2;
        let jobs = rest::parse_overview(&body)?;
        let asked = history.observe_jobs(&jobs, &self.job, answered);
        if history.current().is_none() {
            return Err(SourceError::NoJob(self.job.clone()));
        }
        // Newest first: the run that matters most is read even when the cap is reached.
        for jid in asked.iter().rev().take(CHECKPOINT_READS) {
            // Flink's job ids are hex; anything else is not put into a URL.
            if !jid.chars().all(|c| c.is_ascii_alphanumeric()) {
                continue;
            }
            match self.get(&format!("jobs/{jid}/checkpoints")).await {
                Ok(body) => match rest::parse_checkpoints(&body) {
                    Ok(stats) => history.observe_checkpoints(jid, &stats, clock.now_ms()),
                    Err(e) => {
                        tracing::debug!(job = %self.job, %jid, error = %e, "Flink checkpoint statistics unreadable")
                    }
                },
                Err(e) => {
                    tracing::debug!(job = %self.job, %jid, error = %e, "Flink checkpoint statistics unreadable")
                }
            }
        }
        match history.running_runs() {
            n if n > 1 => Err(SourceError::Ambiguous {
                job: self.job.clone(),
                runs: n,
            }),
            _ => Ok(()),
        }
    }
}

impl Source for FlinkSource {
    type History = History;
    const KIND: &'static str = "Flink";

    fn subject(&self) -> String {
        printable(&self.job, 200)
    }

    fn shown_url(&self) -> String {
        FlinkSource::shown_url(self)
    }

    async fn poll(&self, history: &mut History, clock: &Clock) -> Result<Option<String>, String> {
        self.read_once(history, clock)
            .await
            .map(|()| None)
            .map_err(|e| e.to_string())
    }

    /// A new current run, or a change of what is known of its restore.
    fn log_changes(&self, audit: &str, before: &History, after: &History) {
        let Some(run) = after.current() else {
            return;
        };
        let known = before
            .current()
            .map(|r| (r.jid.as_str(), r.started_ms, &r.restore));
        if known != Some((run.jid.as_str(), run.started_ms, &run.restore)) {
            tracing::info!(audit = %audit, job = %self.subject(), jid = %run.jid, state = %run.state,
                "Flink job {:?}: run {} {}", self.subject(), run.jid, run.summary());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_loses_its_credentials_and_gains_a_slash() {
        let s = FlinkSource::new(
            &SecretUrl::new("http://ops:s3cret@jobmanager:8081/flink"),
            "j",
            Duration::from_secs(1),
        )
        .expect("valid");
        assert_eq!(s.shown_url(), "http://jobmanager:8081/flink/");
        assert_eq!(s.http.credentials(), Some(("ops", Some("s3cret"))));
        assert_eq!(
            s.http.join("jobs/overview").map(|u| u.to_string()).ok(),
            Some("http://jobmanager:8081/flink/jobs/overview".to_owned())
        );
        for bad in ["mysql://fe:9030/db", "jobmanager:8081", "not a url"] {
            assert!(
                matches!(
                    FlinkSource::new(&SecretUrl::new(bad), "j", Duration::from_secs(1)),
                    Err(SourceError::Url)
                ),
                "{bad}"
            );
        }
    }

    use crate::evidence::http::tests::answer_once;

    /// Review 37, F6 and F7: an answer larger than `MAX_BODY` is refused, whether it says
    /// its length or not (read whole before, into memory), and a redirect is not followed.
    #[tokio::test]
    async fn an_oversized_answer_is_refused_and_a_redirect_not_followed() {
        for length in [true, false] {
            let port = answer_once("HTTP/1.1 200 OK", MAX_BODY + 1, length).await;
            let s = FlinkSource::new(
                &SecretUrl::new(format!("http://127.0.0.1:{port}")),
                "j",
                Duration::from_secs(10),
            )
            .expect("valid");
            let e = s.get("jobs/overview").await.expect_err("too large");
            assert!(
                matches!(e, SourceError::TooLarge { .. }),
                "length {length}: {e}"
            );
        }
        let port = answer_once(
            "HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/latest/meta-data/",
            0,
            true,
        )
        .await;
        let s = FlinkSource::new(
            &SecretUrl::new(format!("http://127.0.0.1:{port}")),
            "j",
            Duration::from_secs(10),
        )
        .expect("valid");
        let e = s.get("jobs/overview").await.expect_err("not followed");
        assert!(
            matches!(&e, SourceError::Rest(RestError::Status { status: 302, .. })),
            "{e}"
        );
    }

    /// A refused connection is an error naming the URL without its password.
    #[tokio::test]
    async fn an_unreachable_jobmanager_is_an_error_without_secrets() {
        // A port nothing listens on: bound, then closed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("port");
        let s = FlinkSource::new(
            &SecretUrl::new(format!("http://ops:s3cret@127.0.0.1:{port}")),
            "j",
            Duration::from_secs(2),
        )
        .expect("valid");
        let mut h = History::default();
        let e = s
            .read_once(&mut h, &Clock::system())
            .await
            .expect_err("nothing listens");
        let text = e.to_string();
        assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
        assert!(!text.contains("s3cret") && !text.contains("ops:"), "{text}");
    }
}
