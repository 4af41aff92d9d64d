//! Forwarding an ack to the instance that owns the gap's partition (SPEC "HTTP": "forwarded
//! to the owning instance when needed"). One implementation for both writes,
//! `POST /api/gaps/{id}/ack` and the page's `POST /ui/gaps/{id}/ack`.
//!
//! An ack whose gap this instance's store does not hold is sent on when forwarding is on
//! (`server.advertised_url` and `state.handover_topic` both set): the gap id names its
//! audit, topic and partition ([`partition_of`]); the partition's latest handover state
//! names its owner's `server.advertised_url` ([`crate::handover::lookup`]); the ack is
//! POSTed there (`/api/gaps/{id}/ack`, the same bearer token, a [`HOP_HEADER`], a
//! [`TIMEOUT`]) and the owner's status and body are the answer. A request that already
//! carries the hop header is never sent on again (508): two instances that each believe
//! the other owns a partition must not bounce a request between them. An owner that cannot
//! be reached is 502 naming it. Nothing is guessed: without an owner URL on the topic, or
//! when the topic names this instance, the answer is 404 saying why.
//!
//! The token travels only in the `Authorization` header of the forwarded request and is
//! never logged; the owner URL is published on the handover topic, so it must carry no
//! credentials (the config check refuses them).

use super::HttpState;
use crate::config::{KafkaConfig, Secret};
use crate::types::TopicPartition;
use bytes::Bytes;
use hyper::StatusCode;
use std::time::Duration;

/// The header a forwarded ack carries (its value: the forwarding instance's URL, for the
/// owner's logs). A request with it is answered from the local store only.
pub const HOP_HEADER: &str = "x-gap-auditor-forwarded-by";

/// The header naming the owner that answered a forwarded ack.
pub const OWNER_HEADER: &str = "x-gap-auditor-owner";

/// The [`HOP_HEADER`] of a request, if it carries one (an unreadable value counts as one:
/// it was set by someone).
pub fn hop_of(headers: &hyper::HeaderMap) -> Option<String> {
    headers
        .get(HOP_HEADER)
        .map(|v| v.to_str().unwrap_or("an instance").to_string())
}

/// How long the owner may take to answer a forwarded ack: an ack is one short store write,
/// and the person who pressed the button waits for it.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// The largest owner answer passed through (an ack answer is one gap as JSON).
const MAX_ANSWER: usize = 64 * 1024;

/// Forwards at once: each reads the handover topic (seconds) before it sends; more wait
/// their turn, so a burst of acks costs the broker a few reads at a time.
const MAX_IN_FLIGHT: usize = 2;

/// What forwarding needs; built once at start-up.
#[derive(Clone)]
pub struct Forwarding {
    /// Kafka, to read the handover topic.
    pub kafka: KafkaConfig,
    /// `state.handover_topic`.
    pub handover_topic: Option<String>,
    /// `server.advertised_url` of this instance.
    pub advertised_url: Option<String>,
    /// `server.forward_peers`, parsed: the only owners an ack is sent to when not empty
    /// (see [`peer_allowed`]).
    peers: Vec<url::Url>,
    /// Forwards in flight at most ([`MAX_IN_FLIGHT`]): each reads the handover topic.
    in_flight: std::sync::Arc<tokio::sync::Semaphore>,
    /// The client forwarded acks are sent with (no redirects followed, [`TIMEOUT`]); `None`
    /// when it could not be built (the TLS backend failed): forwarding then answers 502.
    client: Option<reqwest::Client>,
}

impl std::fmt::Debug for Forwarding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarding")
            .field("handover_topic", &self.handover_topic)
            .field("advertised_url", &self.advertised_url)
            .finish_non_exhaustive()
    }
}

impl Forwarding {
    /// Forwarding for an instance with these settings; off unless both `handover_topic`
    /// and `advertised_url` are set.
    pub fn new(
        kafka: KafkaConfig,
        handover_topic: Option<String>,
        advertised_url: Option<String>,
    ) -> Forwarding {
        let https = advertised_url
            .as_deref()
            .is_some_and(|u| u.starts_with("https:"));
        let client = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .connect_timeout(TIMEOUT)
            // A redirect would re-send the token somewhere the handover topic did not name.
            .redirect(reqwest::redirect::Policy::none())
            // Nor may a proxy from the environment see it.
            .no_proxy()
            // An instance reached over TLS never sends the token in clear.
            .https_only(https)
            .build();
        let client = match client {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::error!(error = %e, "cannot build the HTTP client for forwarded acks; acks of other instances' gaps will be refused");
                None
            }
        };
        Forwarding {
            kafka,
            handover_topic,
            advertised_url,
            peers: Vec::new(),
            in_flight: std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            client,
        }
    }

    /// The owners acks may be sent to (`server.forward_peers`, validated at load; an entry
    /// that does not parse is left out, so it allows nothing).
    pub fn with_peers(mut self, peers: &[String]) -> Forwarding {
        self.peers = peers
            .iter()
            .filter_map(|p| url::Url::parse(p).ok())
            .collect();
        self
    }

    /// No forwarding (tests, and instances without the two settings).
    pub fn off() -> Forwarding {
        Forwarding::new(KafkaConfig::default(), None, None)
    }
}

/// The audit, topic and partition a gap id names (`{audit}:{topic}:{partition}:{first}`,
/// optionally `@{epoch}`: [`crate::gap::Gap::make_id_in`]). Read from the right: a topic
/// name cannot hold `:`, an audit name may. `None` for any other shape.
pub fn partition_of(id: &str) -> Option<(String, TopicPartition)> {
    let mut parts = id.rsplitn(4, ':');
    let first = parts.next()?;
    let partition = parts.next()?.parse::<i32>().ok()?;
    let topic = parts.next()?;
    let audit = parts.next()?;
    let first = first.split_once('@').map_or(first, |(f, _)| f);
    if first.parse::<i64>().is_err() || topic.is_empty() || audit.is_empty() || partition < 0 {
        return None;
    }
    Some((
        audit.to_string(),
        TopicPartition::new(topic.to_string(), partition),
    ))
}

/// Two base URLs naming the same instance (a trailing slash aside).
fn same_url(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// Where a forwarded ack of `id` goes on the instance at `owner` (its base path, then
/// `api/gaps/{id}/ack`, the id one encoded path segment). `None`: not a base URL.
pub fn ack_url(owner: &url::Url, id: &str) -> Option<url::Url> {
    let mut u = owner.clone();
    if u.query().is_some() || u.fragment().is_some() {
        return None;
    }
    u.path_segments_mut()
        .ok()?
        .pop_if_empty()
        .extend(["api", "gaps", id, "ack"]);
    Some(u)
}

/// Whether a forwarded ack (and its bearer token) may go to `peer`, this instance being at
/// `own` (`server.advertised_url`) with `allowed` (`server.forward_peers`). The peer is
/// named by a handover record, another process's word, so: no credentials, query or
/// fragment; then a listed URL, or with none listed a sibling of this instance: the same
/// scheme and port, a DNS name in the same domain after its first label, no path. `Err`
/// says why not.
pub fn peer_allowed(own: &url::Url, allowed: &[url::Url], peer: &url::Url) -> Result<(), String> {
    if !matches!(peer.scheme(), "http" | "https")
        || !peer.username().is_empty()
        || peer.password().is_some()
        || peer.query().is_some()
        || peer.fragment().is_some()
    {
        return Err("not a plain http(s) base URL".into());
    }
    let trim = |u: &url::Url| u.as_str().trim_end_matches('/').to_string();
    if !allowed.is_empty() {
        return if allowed.iter().any(|a| trim(a) == trim(peer)) {
            Ok(())
        } else {
            Err("not listed in server.forward_peers".into())
        };
    }
    if peer.scheme() != own.scheme() {
        return Err(format!(
            "{} while this instance is {} (list it in server.forward_peers to allow it)",
            peer.scheme(),
            own.scheme()
        ));
    }
    if peer.port_or_known_default() != own.port_or_known_default() {
        return Err("on another port than this instance (list it in server.forward_peers)".into());
    }
    if !matches!(peer.path(), "" | "/") {
        return Err("has a path (list it in server.forward_peers)".into());
    }
    let domain = |u: &url::Url| match u.host() {
        Some(url::Host::Domain(d)) => d
            .to_ascii_lowercase()
            .split_once('.')
            .map(|(_, rest)| rest.to_string())
            .filter(|rest| !rest.is_empty()),
        _ => None,
    };
    match (domain(own), domain(peer)) {
        (Some(a), Some(b)) if a == b => Ok(()),
        (None, _) => Err(
            "this instance is advertised by IP address or a one-label name, so its siblings \
             cannot be told from the name: list them in server.forward_peers"
                .into(),
        ),
        _ => Err("not in this instance's domain (list it in server.forward_peers)".into()),
    }
}

/// What became of an ack this instance's store could not take.
#[derive(Debug)]
pub enum Outcome {
    /// The owner answered: its status, content type and body, passed through.
    Answered {
        /// The owner's `server.advertised_url`.
        owner: String,
        /// Its status.
        status: StatusCode,
        /// Its `Content-Type`, when valid.
        content_type: Option<String>,
        /// Its body (at most 64 KiB).
        body: Bytes,
    },
    /// Not forwarded, and nowhere known to send it: 404 with the reason.
    NotForwarded(String),
    /// Already forwarded once: 508, never sent on again.
    Loop(String),
    /// The owner, or the handover topic that names it, could not be reached: 502.
    Unreachable(String),
    /// The handover topic names this very instance as the owner: 404 (the gap is not, or
    /// no longer, open here), unless this instance holds a stale copy of it
    /// ([`forward_first`]: then [`Outcome::BetweenOwners`]).
    OwnedHere(String),
    /// This instance's store holds the gap, but its partition is not assigned here and no
    /// other owner is named (its new owner still takes it over, publishing nothing yet):
    /// 409, retry shortly. Taken here, the ack would never reach the owner (review 26, F4).
    BetweenOwners(String),
}

impl Outcome {
    /// The HTTP status this outcome is answered with.
    pub fn status(&self) -> StatusCode {
        match self {
            Outcome::Answered { status, .. } => *status,
            Outcome::NotForwarded(_) => StatusCode::NOT_FOUND,
            Outcome::Loop(_) => StatusCode::LOOP_DETECTED,
            Outcome::Unreachable(_) => StatusCode::BAD_GATEWAY,
            Outcome::OwnedHere(_) => StatusCode::NOT_FOUND,
            Outcome::BetweenOwners(_) => StatusCode::CONFLICT,
        }
    }
}

/// What to do before anything is read: refuse a second hop, or say why forwarding is off;
/// `Ok((audit, partition, own URL, handover topic))` to look the owner up.
fn precheck(
    fwd: &Forwarding,
    id: &str,
    hop: Option<&str>,
) -> Result<(String, TopicPartition, String, String), Outcome> {
    let here = format!("no gap with id {id:?} in this instance's store");
    if let Some(from) = hop {
        return Err(Outcome::Loop(format!(
            "{here}, and this request was already forwarded once (by {from}): it is not \
             forwarded again. The instances disagree on who owns the gap's partition (a \
             rebalance in progress?); retry in a minute"
        )));
    }
    let (Some(own), Some(topic)) = (&fwd.advertised_url, &fwd.handover_topic) else {
        return Err(Outcome::NotForwarded(format!(
            "{here}: it may belong to another instance of the auditor group (the one \
             assigned its partition). Forwarding to it is off: set server.advertised_url \
             (and state.handover_topic) on every instance; or ack it there, or with \
             `gap-auditor ack` on that instance's host"
        )));
    };
    let Some((audit, tp)) = partition_of(id) else {
        return Err(Outcome::NotForwarded(format!(
            "{here}, and the id does not name an audit, topic and partition \
             (AUDIT:TOPIC:PARTITION:OFFSET), so no owner can be looked up"
        )));
    };
    Ok((audit, tp, own.clone(), topic.clone()))
}

/// What the handover state found says about where to send the ack.
fn owner_from(
    id: &str,
    own: &str,
    allowed: &[url::Url],
    topic: &str,
    tp: &TopicPartition,
    found: Option<crate::handover::PartitionState>,
) -> Result<url::Url, Outcome> {
    let here = format!("no gap with id {id:?} in this instance's store");
    let Some(state) = found else {
        return Err(Outcome::NotForwarded(format!(
            "{here}, and the handover topic {topic:?} holds no state of partition {tp}: no \
             instance is known to own it"
        )));
    };
    let Some(url) = state.owner_url else {
        return Err(Outcome::NotForwarded(format!(
            "{here}; partition {tp} was last published by {} (at {}), which advertises no \
             server.advertised_url, so the ack cannot be forwarded: set it there, or ack it \
             on that instance",
            state.owner, state.written_at
        )));
    };
    if same_url(&url, own) {
        return Err(Outcome::OwnedHere(format!(
            "{here}, and the handover topic names this instance ({own}) as the owner of \
             partition {tp}: the gap is not (or no longer) open here"
        )));
    }
    // The topic is another instance's word: the token goes only where this instance's
    // own settings allow (and a refused URL is not linked from the page either).
    let checked = url::Url::parse(&url)
        .map_err(|e| e.to_string())
        .and_then(|peer| {
            let me = url::Url::parse(own).map_err(|e| e.to_string())?;
            peer_allowed(&me, allowed, &peer).map(|()| peer)
        });
    match checked {
        Ok(peer) => Ok(peer),
        Err(why) => {
            tracing::warn!(partition = %tp, owner = %state.owner, url = %url, reason = %why,
                "ack forwarding: the owner URL on the handover topic is not allowed");
            Err(Outcome::NotForwarded(format!(
                "{here}; partition {tp} was last published by {}, whose advertised URL {url:?} \
                 is not one this instance sends its token to ({why}); ack it on that instance",
                state.owner
            )))
        }
    }
}

/// Whether this instance's status board lists the partition gap `id` names (its audit
/// assigned it here). An id that names no partition counts as here: nothing to forward by.
pub fn on_board(audits: &[crate::status::AuditStatus], id: &str) -> bool {
    let Some((audit, tp)) = partition_of(id) else {
        return true;
    };
    audits.iter().filter(|a| a.audit == audit).any(|a| {
        a.partitions
            .iter()
            .any(|p| p.topic == tp.topic && p.partition == tp.partition)
    })
}

/// An ack to send to the partition's owner BEFORE this instance's store takes it: with
/// forwarding on and the gap's partition not assigned here ([`on_board`]). Its store may
/// still hold the gap from when it owned the partition, but an ack made there is one the
/// owner never sees (it was acknowledged "here" and stays open there). `Some`: the owner's
/// answer, or why it could not be reached, or [`Outcome::BetweenOwners`] when this store
/// holds the gap and no other owner is named (the topic still names this instance while
/// the new owner imports its state, or another instance forwarded the request here for
/// that reason); `None`: the local store takes it (no owner is known at all, or it does
/// not hold the gap: its answer says so).
pub async fn forward_first(
    state: &HttpState,
    id: &str,
    reason: &str,
    token: &Secret,
    hop: Option<&str>,
) -> Option<Outcome> {
    let fwd = &state.forwarding;
    if fwd.advertised_url.is_none() || fwd.handover_topic.is_none() {
        return None;
    }
    let board = state.status.snapshot();
    if on_board(&board, id) {
        return None;
    }
    // A stale copy is "between owners" only for an audit this instance runs: the gaps of an
    // audit taken out of its config have no other owner to wait for (review 26c, G4).
    let audit_here =
        partition_of(id).is_some_and(|(audit, _)| board.iter().any(|a| a.audit == audit));
    if let Some(from) = hop {
        let why = format!(
            "{from} forwarded the ack of gap {id} here, as the handover topic names this \
             instance, but its partition is not assigned here"
        );
        return (audit_here && holds_gap(state, id).await).then(|| between_owners(id, &why));
    }
    match forward_ack(state, id, reason, token, hop).await {
        Outcome::OwnedHere(_) => {
            let why = match partition_of(id) {
                Some((_, tp)) => format!(
                    "the handover topic names this instance as the owner of partition {tp}, \
                     but it is not assigned here"
                ),
                None => "the handover topic names this instance as the owner".to_string(),
            };
            (audit_here && holds_gap(state, id).await).then(|| between_owners(id, &why))
        }
        Outcome::NotForwarded(_) => None,
        other => Some(other),
    }
}

/// Whether this instance's store holds gap `id` (unreadable: no, as before this check).
async fn holds_gap(state: &HttpState, id: &str) -> bool {
    let (store, id) = (state.store.clone(), id.to_string());
    matches!(
        tokio::task::spawn_blocking(move || store.get_gap(&id)).await,
        Ok(Ok(Some(_)))
    )
}

/// [`Outcome::BetweenOwners`] for gap `id`, after `why`.
fn between_owners(id: &str, why: &str) -> Outcome {
    Outcome::BetweenOwners(format!(
        "{why}. This instance's copy of gap {id} is stale: the partition's new owner is \
         still taking it over (it publishes its state, naming itself, once it holds every \
         gap), and an ack taken here would never reach it. Retry in a minute"
    ))
}

/// Forwards the ack of `id` with `reason` to the owner of its partition (see the module
/// doc). `hop`: the [`HOP_HEADER`] of the incoming request, if any; `token`: the bearer
/// token the owner is asked with (this instance's, already checked against the caller's).
pub async fn forward_ack(
    state: &HttpState,
    id: &str,
    reason: &str,
    token: &Secret,
    hop: Option<&str>,
) -> Outcome {
    let fwd = &state.forwarding;
    let (audit, tp, own, topic) = match precheck(fwd, id, hop) {
        Ok(p) => p,
        Err(o) => return o,
    };
    let Ok(_turn) = fwd.in_flight.clone().acquire_owned().await else {
        return Outcome::Unreachable("forwarding is shutting down".into());
    };
    let found = {
        let (kafka, topic, audit, tp) = (fwd.kafka.clone(), topic.clone(), audit, tp.clone());
        tokio::task::spawn_blocking(move || crate::handover::lookup(&kafka, &topic, &audit, &tp))
            .await
    };
    let found = match found {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => {
            tracing::warn!(gap = %id, error = %e, "ack forwarding: cannot read the handover topic");
            return Outcome::Unreachable(format!(
                "no gap with id {id:?} in this instance's store, and the handover topic \
                 that names its owner cannot be read: {e}"
            ));
        }
        Err(e) => {
            tracing::error!(gap = %id, error = %e, "ack forwarding: lookup task failed");
            return Outcome::Unreachable("the handover lookup task failed".into());
        }
    };
    let (owner, url) = match owner_from(id, &own, &fwd.peers, &topic, &tp, found) {
        Ok(peer) => match ack_url(&peer, id) {
            Some(url) => (peer.as_str().trim_end_matches('/').to_string(), url),
            None => return Outcome::NotForwarded(format!("{peer} is not a base URL")),
        },
        Err(o) => return o,
    };
    let Some(client) = &fwd.client else {
        return Outcome::Unreachable(format!(
            "the gap's partition {tp} is owned by {owner}, but this instance has no HTTP \
             client to forward the ack with (see its log)"
        ));
    };
    let body = serde_json::json!({ "reason": reason }).to_string();
    let sent = client
        .post(url)
        .header(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {}", token.expose()),
        )
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(HOP_HEADER, own.as_str())
        .body(body)
        .send()
        .await;
    let mut resp = match sent {
        Ok(r) => r,
        Err(e) => {
            // reqwest's error names the URL (no credentials: the config check refuses them)
            // and never the headers.
            tracing::warn!(gap = %id, owner = %owner, error = %e, "ack forwarding: owner unreachable");
            return Outcome::Unreachable(format!(
                "the gap's partition {tp} is owned by {owner} (handover topic {topic:?}), \
                 which cannot be reached: {}",
                without_url(&e)
            ));
        }
    };
    let status = resp.status().as_u16();
    // Only a final answer is passed on: a 1xx, or a status hyper would answer with no
    // body, from a peer is no answer to an ack.
    if !(200..=599).contains(&status) || matches!(status, 204 | 304) {
        return Outcome::Unreachable(format!(
            "the owner {owner} answered with status {status}, which is no answer to an ack"
        ));
    }
    let content_type = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut body = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(c)) if body.len() + c.len() <= MAX_ANSWER => body.extend_from_slice(&c),
            Ok(Some(_)) => {
                return Outcome::Unreachable(format!(
                    "the owner {owner} answered with more than {MAX_ANSWER} bytes"
                ));
            }
            Ok(None) => break,
            Err(e) => {
                return Outcome::Unreachable(format!(
                    "the owner {owner} did not finish its answer: {}",
                    without_url(&e)
                ));
            }
        }
    }
    tracing::info!(gap = %id, owner = %owner, status, "ack forwarded to the partition's owner");
    Outcome::Answered {
        owner,
        status: StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
        content_type,
        body: Bytes::from(body),
    }
}

/// A reqwest error in words, without the URL it repeats (the message names the owner).
fn without_url(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        format!("no answer within {} s", TIMEOUT.as_secs())
    } else if e.is_connect() {
        "connection failed".to_string()
    } else {
        "request failed".to_string()
    };
    let mut cause = String::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        cause = s.to_string();
        source = s.source();
    }
    if cause.is_empty() {
        kind
    } else {
        format!("{kind} ({cause})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gap_id_names_its_partition() {
        let tp = |t: &str, p| TopicPartition::new(t.to_string(), p);
        assert_eq!(
            partition_of("test:logs:3:17"),
            Some(("test".into(), tp("logs", 3)))
        );
        assert_eq!(
            partition_of("test:logs:0:2@1"),
            Some(("test".into(), tp("logs", 0)))
        );
        // An audit name may hold ':'; a topic name cannot.
        assert_eq!(
            partition_of("a:b:logs:1:5"),
            Some(("a:b".into(), tp("logs", 1)))
        );
        for bad in [
            "",
            "logs:3:17",
            "test:logs:x:17",
            "test:logs:3:x",
            ":logs:3:1",
            "t::3:1",
            "t:l:-1:1",
        ] {
            assert_eq!(partition_of(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_owner_url_takes_the_id_as_one_path_segment() {
        let at = |base: &str, id: &str| {
            let u = url::Url::parse(base).expect("url");
            ack_url(&u, id).map(String::from)
        };
        assert_eq!(
            at("http://h:9464/", "test:logs:0:2").as_deref(),
            Some("http://h:9464/api/gaps/test:logs:0:2/ack")
        );
        assert_eq!(
            at("https://h/base", "a b").as_deref(),
            Some("https://h/base/api/gaps/a%20b/ack")
        );
        // An id never leaves its segment; a base with a query or fragment is no base.
        assert_eq!(
            at("http://h:9464", "x/../../y?z#w").as_deref(),
            Some("http://h:9464/api/gaps/x%2F..%2F..%2Fy%3Fz%23w/ack")
        );
        assert_eq!(at("http://h:9464/api/gaps/VICTIM/ack?", "g"), None);
        assert_eq!(at("http://h:9464/#", "g"), None);
    }

    /// Review of the forwarding (token exfiltration): a handover record is another
    /// process's word; the token goes only to a listed peer, or to a sibling DNS name with
    /// this instance's scheme and port and no path.
    #[test]
    fn the_token_goes_only_to_an_allowed_peer() {
        let u = |s: &str| url::Url::parse(s).expect("url");
        let me = u("https://gap-auditor-0.gap-auditor.ns.svc:9464");
        for ok in [
            "https://gap-auditor-1.gap-auditor.ns.svc:9464",
            "https://GAP-AUDITOR-2.gap-auditor.ns.svc:9464/",
        ] {
            assert_eq!(peer_allowed(&me, &[], &u(ok)), Ok(()), "{ok}");
        }
        for bad in [
            "http://gap-auditor-1.gap-auditor.ns.svc:9464",
            "https://gap-auditor-1.gap-auditor.ns.svc:9465",
            "https://attacker.example:9464",
            "https://gap-auditor-1.gap-auditor.ns.svc.attacker.example:9464",
            "https://gap-auditor-1.gap-auditor.ns.svc:9464/api/gaps/VICTIM/ack",
            "https://gap-auditor-1.gap-auditor.ns.svc:9464/?x",
            "https://u:p@gap-auditor-1.gap-auditor.ns.svc:9464",
            "https://10.0.0.7:9464",
        ] {
            assert!(peer_allowed(&me, &[], &u(bad)).is_err(), "{bad}");
        }
        // By IP or a one-label name, only the list allows anything.
        let local = u("http://127.0.0.1:9464");
        assert!(peer_allowed(&local, &[], &u("http://127.0.0.1:9465")).is_err());
        let list = [u("http://127.0.0.1:9465")];
        assert_eq!(
            peer_allowed(&local, &list, &u("http://127.0.0.1:9465/")),
            Ok(())
        );
        assert!(peer_allowed(&local, &list, &u("http://127.0.0.1:9466")).is_err());
        assert!(peer_allowed(&local, &list, &u("http://127.0.0.1:9465/?x")).is_err());
    }

    fn on() -> Forwarding {
        Forwarding::new(
            KafkaConfig::default(),
            Some("handover".into()),
            Some("http://me:9464".into()),
        )
    }

    #[test]
    fn a_forwarded_request_is_never_forwarded_again() {
        let o = precheck(&on(), "test:logs:0:2", Some("http://peer:9464"));
        assert!(
            matches!(&o, Err(Outcome::Loop(m)) if m.contains("http://peer:9464")),
            "{o:?}"
        );
        assert_eq!(o.err().map(|o| o.status()), Some(StatusCode::LOOP_DETECTED));
    }

    #[test]
    fn forwarding_off_says_which_key_turns_it_on() {
        for fwd in [
            Forwarding::off(),
            Forwarding::new(KafkaConfig::default(), Some("h".into()), None),
            Forwarding::new(KafkaConfig::default(), None, Some("http://me".into())),
        ] {
            match precheck(&fwd, "test:logs:0:2", None) {
                Err(o @ Outcome::NotForwarded(_)) => {
                    assert_eq!(o.status(), StatusCode::NOT_FOUND);
                    let Outcome::NotForwarded(m) = o else {
                        unreachable!()
                    };
                    assert!(m.contains("server.advertised_url"), "{m}");
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(
            precheck(&on(), "nonsense", None),
            Err(Outcome::NotForwarded(_))
        ));
        assert!(precheck(&on(), "test:logs:0:2", None).is_ok());
    }

    fn state(owner_url: Option<&str>) -> crate::handover::PartitionState {
        let text = serde_json::json!({
            "version": 2, "audit": "test", "topic": "logs", "partition": 0, "settled": 5,
            "ledger": {}, "gaps": [], "written_at": "2026-12-06T00:00:00Z", "owner": "host-a:1",
            "owner_url": owner_url,
        });
        serde_json::from_value(text).expect("state")
    }

    #[test]
    fn the_owner_is_the_url_the_latest_state_advertises() {
        let tp = TopicPartition::new("logs".to_string(), 0);
        let url = owner_from(
            "g",
            "http://me.auditors:9464",
            &[],
            "h",
            &tp,
            Some(state(Some("http://a.auditors:9464"))),
        );
        assert_eq!(
            url.ok().map(String::from).as_deref(),
            Some("http://a.auditors:9464/")
        );
        // Nothing guessed: no state, no URL, or this very instance named (told apart: a
        // stale copy here is then between owners, see `forward_first`).
        for found in [
            None,
            Some(state(None)),
            Some(state(Some("javascript:alert(1)"))),
            Some(state(Some("http://u:p@a:9464"))),
            Some(state(Some("http://elsewhere.example:9464"))),
        ] {
            let o = owner_from("g", "http://me:9464", &[], "h", &tp, found);
            assert!(matches!(o, Err(Outcome::NotForwarded(_))), "{o:?}");
        }
        let o = owner_from(
            "g",
            "http://me:9464",
            &[],
            "h",
            &tp,
            Some(state(Some("http://me:9464/"))),
        );
        assert!(matches!(&o, Err(Outcome::OwnedHere(_))), "{o:?}");
        assert_eq!(o.err().map(|o| o.status()), Some(StatusCode::NOT_FOUND));
    }
}
