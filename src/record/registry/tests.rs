//! The registry: framing, the client against test servers, the cache and its give-up rule.

use super::client::utf8_percent_encode;
use super::test_support::*;
use super::*;

#[test]
fn frames_split_into_id_and_payload() {
    assert_eq!(
        split_frame(&[0, 0, 0, 1, 2, 9, 9]),
        Some((258, &[9u8, 9][..]))
    );
    assert_eq!(split_frame(&[0, 0, 0, 0, 7]), Some((7, &[][..])));
    assert_eq!(split_frame(&[0, 0, 0, 1]), None, "too short");
    assert_eq!(split_frame(&[1, 0, 0, 0, 1, 5]), None, "wrong magic");
    assert_eq!(split_frame(b"10.0.0.1|a"), None);
}

fn at(base: Instant, secs: u64) -> Instant {
    base + Duration::from_secs(secs)
}

#[test]
fn only_404s_spanning_the_policy_are_final_and_an_unreachable_registry_never_is() {
    let policy = NotFoundPolicy::default();
    let t0 = Instant::now();
    let nf = || RegistryError::NotFound(9);
    let down = || RegistryError::Unavailable("connection refused".into());
    // Five 404s within a minute: a schema registered just after its records, not final.
    let mut f = Failure::next(None, nf(), t0);
    for s in 1..5 {
        f = Failure::next(Some(&f), nf(), at(t0, s * 10));
    }
    assert_eq!(f.not_found, 5);
    assert!(!f.not_found_is_final(policy, at(t0, 40)));
    // Still 404 five minutes after the first: final.
    f = Failure::next(Some(&f), nf(), at(t0, 300));
    assert!(f.not_found_is_final(policy, at(t0, 300)));
    // A registry down in between starts the streak again.
    let mut g = Failure::next(None, nf(), t0);
    for s in 1..10 {
        g = Failure::next(Some(&g), nf(), at(t0, s * 30));
    }
    g = Failure::next(Some(&g), down(), at(t0, 310));
    assert_eq!((g.not_found, g.not_found_since), (0, None));
    assert!(!g.not_found_is_final(policy, at(t0, 310)));
    g = Failure::next(Some(&g), nf(), at(t0, 320));
    assert!(!g.not_found_is_final(policy, at(t0, 320)));
    // Down for a day: retried for ever, never final.
    let mut h = Failure::next(None, down(), t0);
    for s in 1..3000 {
        h = Failure::next(Some(&h), down(), at(t0, s * 30));
    }
    assert!(!h.not_found_is_final(policy, at(t0, 90_000)));
    assert_eq!(h.backoff, RETRY_MAX);
    assert_eq!(h.attempts, 3000);
    assert_eq!(h.since, t0, "waiting since the first failure");
}

fn registry(url: &str, policy: NotFoundPolicy) -> Arc<Registry<()>> {
    let client = RegistryClient::new(&test_config(url)).expect("client");
    Arc::new(Registry::new(client, |_, _| Ok(())).with_not_found_policy(policy))
}

async fn wait_until(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..200 {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test]
async fn an_id_answered_404_for_good_becomes_undecodable() {
    let (url, hits) = answering("404 Not Found").await;
    let r = registry(&url, QUICK);
    let cancel = tokio_util::sync::CancellationToken::new();
    tokio::spawn(r.clone().run_fetcher(cancel.clone()));
    let mut arrivals = r.arrivals();
    r.want(9);
    assert!(
        wait_until(|| matches!(r.lookup(9), Lookup::Broken(_))).await,
        "final after 3 consecutive 404s, not retried for ever"
    );
    assert!(
        arrivals.has_changed().unwrap_or(false),
        "held records are released"
    );
    arrivals.borrow_and_update();
    assert!(r.waiting_ids().is_empty(), "no longer wanted");
    let Lookup::Broken(e) = r.lookup(9) else {
        panic!("broken")
    };
    assert!(e.to_string().contains("3 consecutive 404s"), "{e}");
    let n = hits.load(std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1600)).await;
    assert_eq!(
        hits.load(std::sync::atomic::Ordering::SeqCst),
        n,
        "not asked again"
    );
    cancel.cancel();
}

/// Review of issue 19: a given-up id stayed given up until a restart, so a registry
/// restored from a backup, or a replica catching up after more than the give-up time of
/// 404s, left every later record of that id undecodable for good. The fetcher now asks for
/// given-up ids again (without holding any record), and one served again decodes.
#[tokio::test]
async fn a_given_up_id_served_again_decodes() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let serve = Arc::new(AtomicBool::new(false));
    let s2 = serve.clone();
    let url = serving(move |_| {
        if s2.load(Ordering::SeqCst) {
            ("200 OK", r#"{"schema":"\"string\""}"#)
        } else {
            (
                "404 Not Found",
                r#"{"error_code":40403,"message":"Schema not found"}"#,
            )
        }
    })
    .await;
    let policy = NotFoundPolicy {
        reprobe: Duration::from_millis(300),
        ..QUICK
    };
    let r = registry(&url, policy);
    let cancel = tokio_util::sync::CancellationToken::new();
    tokio::spawn(r.clone().run_fetcher(cancel.clone()));
    r.want(9);
    assert!(
        wait_until(|| matches!(r.lookup(9), Lookup::Broken(_))).await,
        "given up after 3 consecutive 404s"
    );
    // Probed while still 404: stays given up, and nothing waits for it.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(matches!(r.lookup(9), Lookup::Broken(_)));
    assert!(r.waiting_ids().is_empty());
    let mut arrivals = r.arrivals();
    arrivals.borrow_and_update();
    serve.store(true, Ordering::SeqCst);
    assert!(
        wait_until(|| matches!(r.lookup(9), Lookup::Ready(_))).await,
        "served again: its records decode"
    );
    assert!(arrivals.has_changed().unwrap_or(false), "decoders are told");
    cancel.cancel();
}

/// Review of issue 19: a 404 that is not the registry's "schema not found" (a
/// `schema_registry.url` with a wrong path prefix, a proxy or ingress with no route for
/// it, Confluent's own `{"error_code":404}` for an unknown path) says nothing about the
/// id. Counted as one, every id was given up after 5 minutes: every record undecodable
/// and settled past for good, where a mistyped URL must leave the records waiting.
#[tokio::test]
async fn a_404_that_is_not_the_registrys_answer_is_never_final() {
    for body in [
        "<html><body><h1>404 Not Found</h1>nginx</body></html>",
        r#"{"error_code":404,"message":"HTTP 404 Not Found"}"#,
    ] {
        let (url, _) = answering_with("404 Not Found", body).await;
        let r = registry(&url, QUICK);
        let cancel = tokio_util::sync::CancellationToken::new();
        tokio::spawn(r.clone().run_fetcher(cancel.clone()));
        r.want(9);
        assert!(
            wait_until(|| r.waiting_ids().first().is_some_and(|w| w.attempts >= 4)).await,
            "retried: {:?}",
            r.waiting_ids()
        );
        cancel.cancel();
        assert!(
            matches!(r.lookup(9), Lookup::Waiting),
            "not given up on a 404 of {body}"
        );
        assert_eq!(r.waiting_ids()[0].not_found, 0, "{body}");
    }
}

#[tokio::test]
async fn a_registry_that_is_down_keeps_the_id_waiting_and_says_which() {
    let (url, _) = answering("503 Service Unavailable").await;
    let r = registry(&url, QUICK);
    let cancel = tokio_util::sync::CancellationToken::new();
    tokio::spawn(r.clone().run_fetcher(cancel.clone()));
    r.want(9);
    assert!(
        wait_until(|| r.waiting_ids().first().is_some_and(|w| w.attempts >= 4)).await,
        "retried: {:?}",
        r.waiting_ids()
    );
    assert!(matches!(r.lookup(9), Lookup::Waiting), "never final");
    let w = &r.waiting_ids()[0];
    assert_eq!((w.id, w.not_found), (9, 0));
    assert!(
        w.error.as_deref().is_some_and(|e| e.contains("503")),
        "{w:?}"
    );
    let health = r.health().and_then(Result::err).unwrap_or_default();
    assert!(
        health.starts_with("schema id 9:"),
        "the health names the id: {health}"
    );
    cancel.cancel();
}

#[test]
fn lookup_asks_for_nothing_and_want_asks_once() {
    let r = registry("http://127.0.0.1:9/", QUICK);
    assert!(matches!(r.lookup(7), Lookup::Waiting));
    assert!(
        r.waiting().is_empty(),
        "the tailing thread's lookups fetch nothing"
    );
    r.want(7);
    r.want(7);
    assert_eq!(r.waiting(), vec![(7, None)]);
}

#[test]
fn subjects_are_one_path_segment() {
    assert_eq!(utf8_percent_encode("a/b c:d"), "a%2Fb%20c%3Ad");
}

/// Review of issue 19: a referenced schema version is fetched with `deleted=true`, so a
/// version soft-deleted since (the registry still serves it that way) does not make the
/// schema that references it look absent.
#[tokio::test]
async fn references_are_fetched_including_soft_deleted_versions() {
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let l2 = lines.clone();
    let url = serving(move |line| {
        l2.lock().expect("lines").push(line.to_string());
        let body = if line.contains("/schemas/ids/") {
            r#"{"schema":"syntax = \"proto3\"; import \"dep.proto\"; message A { D d = 1; }","schemaType":"PROTOBUF","references":[{"name":"dep.proto","subject":"dep","version":1}]}"#
        } else {
            r#"{"schema":"syntax = \"proto3\"; message D { string x = 1; }","schemaType":"PROTOBUF"}"#
        };
        ("200 OK", body)
    })
    .await;
    let client = RegistryClient::new(&test_config(&url)).expect("client");
    let raw = client.fetch(5).await.expect("fetched");
    assert_eq!(raw.references.len(), 1);
    let lines = lines.lock().expect("lines").clone();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("GET /subjects/dep/versions/1?deleted=true ")),
        "{lines:?}"
    );
}
