//! `gap-auditor wait`: the sensor a batch job runs before reading an hour from the sink. It
//! polls `GET /api/completeness` of the running daemon (or of every instance of a scaled-out
//! audit) until the answer is complete (exit 0), a gap blocks it (exit 1, naming the gap),
//! or the timeout passes (exit 3). While no daemon answers, the store's unresolved gaps can
//! still say "blocked"; nothing in the store can prove "complete" (pending records live in
//! the daemon's memory only), so the wait goes on.

use crate::completeness::{Answer, Decision, coverage, decide};
use crate::config::Config;
use crate::store::{GapFilter, StateFilter, Store};
use chrono::{DateTime, Utc};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Exit codes of `wait` (SPEC's command table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// Everything produced before `until` is in the sink.
    Complete = 0,
    /// A gap blocks it.
    Blocked = 1,
    /// Bad arguments or config, unknown audit, refused token.
    Error = 2,
    /// The timeout passed first.
    TimedOut = 3,
}

/// The command line of `wait`.
#[derive(Debug, Clone)]
pub struct Args {
    /// `-c FILE`.
    pub config: Option<PathBuf>,
    /// `--audit`.
    pub audit: String,
    /// `--until`.
    pub until: DateTime<Utc>,
    /// `--timeout` (`None`: no limit).
    pub timeout: Option<Duration>,
    /// `--poll`.
    pub poll: Duration,
    /// `--url`, repeated (empty: the config's `server.listen`).
    pub urls: Vec<String>,
    /// `--format json`.
    pub json: bool,
}

/// Why one instance gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// Nothing listens, or it does not answer in time.
    #[error("no daemon answers at {url}: {reason}")]
    Unreachable {
        /// The daemon asked.
        url: String,
        /// What the connection said.
        reason: String,
    },
    /// The daemon runs other audits (a misspelt name).
    #[error("{url} runs no audit {audit:?} (it runs: {known})")]
    UnknownAudit {
        /// The daemon asked.
        url: String,
        /// The name asked for.
        audit: String,
        /// The audits it runs.
        known: String,
    },
    /// `server.api_token` is set on the daemon and the token sent is missing or wrong.
    #[error(
        "{url} refused the request (HTTP 401): give the daemon's server.api_token (-c with \
         server.api_token_file, or GAP_AUDITOR__SERVER__API_TOKEN)"
    )]
    Unauthorized {
        /// The daemon asked.
        url: String,
    },
    /// Any other refusal.
    #[error("{url}: HTTP {status}: {body}")]
    Http {
        /// The daemon asked.
        url: String,
        /// Status code.
        status: u16,
        /// Its body, cut short.
        body: String,
    },
}

impl WaitError {
    fn is_unreachable(&self) -> bool {
        matches!(self, WaitError::Unreachable { .. })
    }
}

/// One instance's reply: an answer, or "starting" (it has not published any audit yet).
enum Reply {
    Answer(Answer),
    Starting,
}

/// Runs `wait`; returns the exit code.
pub fn run(args: Args) -> Exit {
    // Without --url the daemon's address comes from the config; with it, a config is read
    // only when named (the sensor's host may have none).
    let cfg = if args.config.is_some() || args.urls.is_empty() {
        match Config::load(args.config.as_deref()) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!("error: invalid configuration: {e}");
                return Exit::Error;
            }
        }
    } else {
        None
    };
    if let Some(c) = &cfg
        && c.audit(&args.audit).is_none()
    {
        let known: Vec<&str> = c.audits.iter().map(|a| a.name.as_str()).collect();
        eprintln!(
            "error: --audit: the configuration has no audit {:?} (it has: {})",
            args.audit,
            known.join(", ")
        );
        return Exit::Error;
    }
    let urls: Vec<String> = if args.urls.is_empty() {
        cfg.iter().map(|c| url_of(c.server.listen)).collect()
    } else {
        args.urls
            .iter()
            .map(|u| u.trim_end_matches('/').to_string())
            .collect()
    };
    let token = cfg
        .as_ref()
        .and_then(|c| c.server.api_token.as_ref().map(|t| t.expose().to_string()))
        .or_else(|| std::env::var("GAP_AUDITOR__SERVER__API_TOKEN").ok())
        .filter(|t| !t.is_empty());
    let store_path = cfg.as_ref().map(|c| c.state.path.clone());
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return Exit::Error;
        }
    };
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot build the HTTP client: {e}");
            return Exit::Error;
        }
    };
    let w = Waiter {
        client,
        urls,
        token,
        store_path,
        args,
    };
    rt.block_on(w.run())
}

/// `http://` + the listen address, an unspecified address (0.0.0.0, ::) as loopback.
fn url_of(listen: std::net::SocketAddr) -> String {
    let mut a = listen;
    if a.ip().is_unspecified() {
        a.set_ip(match a.ip() {
            std::net::IpAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    format!("http://{a}")
}

struct Waiter {
    client: reqwest::Client,
    urls: Vec<String>,
    token: Option<String>,
    store_path: Option<PathBuf>,
    args: Args,
}

impl Waiter {
    async fn run(&self) -> Exit {
        let started = Instant::now();
        let until = self
            .args
            .until
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        let mut last_note = String::new();
        loop {
            let mut answers = Vec::new();
            let mut notes = Vec::new();
            let mut unreachable = false;
            for url in &self.urls {
                match self.ask(url, &until).await {
                    Ok(Reply::Answer(a)) => answers.push(a),
                    Ok(Reply::Starting) => {
                        notes.push(format!("{url}: the daemon is starting (no audit yet)"))
                    }
                    Err(e) if e.is_unreachable() => {
                        unreachable = true;
                        notes.push(e.to_string());
                    }
                    Err(e) => {
                        eprintln!("error: {e}");
                        return Exit::Error;
                    }
                }
            }
            match decide(&answers) {
                Decision::Blocked(_) => {
                    self.print_answers(&answers, "blocked");
                    return Exit::Blocked;
                }
                Decision::Complete if notes.is_empty() => {
                    self.print_answers(&answers, "complete");
                    return Exit::Complete;
                }
                _ => {}
            }
            if unreachable {
                match self.gaps_in_store() {
                    Ok(gaps) if !gaps.is_empty() => {
                        self.print_store_gaps(&gaps);
                        return Exit::Blocked;
                    }
                    Ok(_) => {}
                    Err(note) => notes.push(note),
                }
            }
            // Each answer speaks for its own partitions; what none of them covers is said
            // too, or a wait would seem stuck on instances that all say "complete".
            let mut note: Vec<String> = answers
                .iter()
                .map(|a| a.reason.clone())
                .chain(coverage(&answers).note())
                .chain(notes)
                .collect();
            note.dedup();
            let note = note.join("; ");
            // Said once per change: a cron log shows what it waited for, not every poll.
            if note != last_note {
                eprintln!("waiting: {note}");
                last_note = note;
            }
            let left = self
                .args
                .timeout
                .map(|t| t.saturating_sub(started.elapsed()));
            if left.is_some_and(|l| l.is_zero()) {
                self.print_answers(&answers, "timed out");
                if !self.args.json {
                    println!(
                        "timed out after {}: not complete before {until}: {last_note}",
                        humantime::format_duration(self.args.timeout.unwrap_or_default())
                    );
                }
                return Exit::TimedOut;
            }
            let nap = left.map_or(self.args.poll, |l| l.min(self.args.poll));
            tokio::time::sleep(nap).await;
        }
    }

    async fn ask(&self, url: &str, until: &str) -> Result<Reply, WaitError> {
        let mut req = self
            .client
            .get(format!("{url}/api/completeness"))
            .query(&[("audit", self.args.audit.as_str()), ("until", until)]);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let unreachable = |e: reqwest::Error| WaitError::Unreachable {
            url: url.to_string(),
            reason: e.to_string(),
        };
        let resp = req.send().await.map_err(unreachable)?;
        let status = resp.status().as_u16();
        let body = resp.text().await.map_err(unreachable)?;
        match status {
            200 => serde_json::from_str::<Answer>(&body)
                .map(Reply::Answer)
                .map_err(|e| WaitError::Http {
                    url: url.to_string(),
                    status,
                    body: format!("not a completeness answer ({e}): {}", cut(&body)),
                }),
            404 => {
                let known: Vec<String> = serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| {
                        v["audits"].as_array().map(|a| {
                            a.iter()
                                .filter_map(|x| x.as_str().map(str::to_string))
                                .collect()
                        })
                    })
                    .ok_or_else(|| WaitError::Http {
                        url: url.to_string(),
                        status,
                        body: format!(
                            "not a gap-auditor, or one without /api/completeness: {}",
                            cut(&body)
                        ),
                    })?;
                if known.is_empty() {
                    Ok(Reply::Starting)
                } else {
                    Err(WaitError::UnknownAudit {
                        url: url.to_string(),
                        audit: self.args.audit.clone(),
                        known: known.join(", "),
                    })
                }
            }
            401 => Err(WaitError::Unauthorized {
                url: url.to_string(),
            }),
            _ => Err(WaitError::Http {
                url: url.to_string(),
                status,
                body: cut(&body),
            }),
        }
    }

    /// Gaps in the store that block completeness (unresolved or dead-lettered: the daemon's
    /// rule, `GapRecord::unconfirmed`) whose first record is before `until` (or unknown).
    fn gaps_in_store(&self) -> Result<Vec<crate::gap::Gap>, String> {
        let Some(path) = &self.store_path else {
            return Ok(Vec::new());
        };
        let store = Store::open(path).map_err(|e| format!("the store cannot be read: {e}"))?;
        let mut gaps = Vec::new();
        for state in [
            StateFilter::Unresolved,
            StateFilter::Only(crate::gap::GapState::DeadLettered),
        ] {
            gaps.extend(
                store
                    .list_gaps(&GapFilter {
                        state,
                        audit: Some(self.args.audit.clone()),
                    })
                    .map_err(|e| format!("the store cannot be read: {e}"))?,
            );
        }
        Ok(gaps
            .into_iter()
            .filter(|g| g.first_timestamp.is_none_or(|t| t < self.args.until))
            .collect())
    }

    fn print_answers(&self, answers: &[Answer], verdict: &str) {
        if self.args.json {
            let out = match answers {
                [one] => serde_json::to_string_pretty(one),
                many => serde_json::to_string_pretty(many),
            };
            match out {
                Ok(s) => println!("{s}"),
                Err(e) => eprintln!("error: {e}"),
            }
            return;
        }
        if verdict == "timed out" {
            return;
        }
        for a in answers {
            println!("{verdict}: audit {}: {}", a.audit, a.reason);
            for b in a.blockers.iter().filter(|_| verdict == "blocked") {
                let since = b.since.map_or_else(
                    || "an unknown time".to_string(),
                    |t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                );
                match (&b.state, b.missing_records) {
                    (Some(state), Some(n)) => println!(
                        "  gap {} ({state}): {n} record(s) {}, the first produced at {since}",
                        b.id,
                        crate::completeness::not_in_sink(state)
                    ),
                    _ => println!("  {}: records not confirmed yet since {since}", b.id),
                }
            }
            if a.truncated {
                println!(
                    "  (more gaps than listed: gap-auditor gaps --audit {})",
                    a.audit
                );
            }
        }
        if verdict == "blocked" {
            println!(
                "repair: gap-auditor replay --gap ID --to-sink (or --to-topic T); accept: \
                 gap-auditor ack --gap ID --reason TEXT; then wait again"
            );
        }
    }

    fn print_store_gaps(&self, gaps: &[crate::gap::Gap]) {
        if self.args.json {
            match serde_json::to_string_pretty(gaps) {
                Ok(s) => println!("{s}"),
                Err(e) => eprintln!("error: {e}"),
            }
            return;
        }
        println!(
            "blocked: audit {}: no daemon answers, and the store holds {} unresolved gap(s) \
             before {}",
            self.args.audit,
            gaps.len(),
            self.args
                .until
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
        );
        for g in gaps {
            println!(
                "  gap {} ({}): {} record(s) {}, the first produced at {}",
                g.id,
                g.state,
                g.missing_records,
                crate::completeness::not_in_sink(g.state.as_str()),
                g.first_timestamp.map_or_else(
                    || "an unknown time".to_string(),
                    |t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                )
            );
        }
    }
}

fn cut(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_become_urls() {
        assert_eq!(
            url_of("0.0.0.0:9464".parse().unwrap()),
            "http://127.0.0.1:9464"
        );
        assert_eq!(url_of("[::]:9464".parse().unwrap()), "http://[::1]:9464");
        assert_eq!(url_of("10.0.0.5:80".parse().unwrap()), "http://10.0.0.5:80");
    }

    #[test]
    fn long_bodies_are_cut() {
        assert_eq!(cut(" short "), "short");
        let long = "é".repeat(300);
        assert_eq!(cut(&long).chars().count(), 201);
    }
}
