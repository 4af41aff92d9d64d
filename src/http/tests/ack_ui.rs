//! `POST /api/gaps/{id}/ack` and `GET /ui`.

use super::super::ack::{BadBody, MAX_BODY, ROUTE, parse_reason, read_body};
use super::super::ui_page::{ack_command, cause_words, replay_command, shell_quote, time_left};
use super::*;
use crate::gap::GapCause;

const TOKEN: &str = "ack-T0ken_42";

fn bearer() -> String {
    format!("Authorization: Bearer {TOKEN}\r\n")
}

/// `POST path` with `auth` header lines (may be empty) and a JSON `body`.
async fn post(addr: SocketAddr, path: &str, auth: &str, body: &str) -> Reply {
    let headers = format!(
        "{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    request_with(addr, "POST", path, &headers).await
}

fn ack_path(id: &str) -> String {
    let encoded: String =
        percent_encoding::utf8_percent_encode(id, percent_encoding::NON_ALPHANUMERIC).collect();
    format!("/api/gaps/{encoded}/ack")
}

#[test]
fn ack_route_and_body() {
    assert_eq!(
        ROUTE.id_of("/api/gaps/a:t:0:5/ack").as_deref(),
        Some("a:t:0:5")
    );
    assert_eq!(
        ROUTE
            .id_of("/api/gaps/a%3At%2Fx%3A0%3A5%405/ack")
            .as_deref(),
        Some("a:t/x:0:5@5")
    );
    assert_eq!(ROUTE.id_of("/api/gaps//ack"), None);
    assert_eq!(ROUTE.id_of("/api/gaps/a:t:0:5"), None);
    assert_eq!(ROUTE.id_of("/api/gaps"), None);
    assert_eq!(ROUTE.id_of("/api/gaps/%FF/ack"), None, "not UTF-8");

    assert_eq!(
        parse_reason(br#"{"reason":"known outage"}"#).as_deref(),
        Ok("known outage")
    );
    assert_eq!(parse_reason(br#"{"reason":"  "}"#), Err(BadBody::NoReason));
    assert_eq!(parse_reason(br#"{"reason":""}"#), Err(BadBody::NoReason));
    assert_eq!(parse_reason(br#"{"reason":7}"#), Err(BadBody::NoReason));
    assert_eq!(parse_reason(br#"{"why":"x"}"#), Err(BadBody::NoReason));
    assert!(matches!(
        parse_reason(b"reason=x"),
        Err(BadBody::NotJson(_))
    ));
    assert!(matches!(
        parse_reason(br#"["x"]"#),
        Err(BadBody::NotJson(_))
    ));
}

/// The cap holds for a body that declares no length (chunked), not only for a declared one.
#[tokio::test]
async fn ack_body_cap_without_a_declared_length() {
    let body =
        |n: usize| Request::new(http_body_util::Full::new(bytes::Bytes::from(vec![b' '; n])));
    assert_eq!(
        read_body(body(MAX_BODY)).await.map(|b| b.len()),
        Ok(MAX_BODY)
    );
    assert_eq!(read_body(body(MAX_BODY + 1)).await, Err(BadBody::TooLarge));
    let mut declared = body(10);
    declared
        .headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from_static("65537"));
    assert_eq!(read_body(declared).await, Err(BadBody::TooLarge));
}

#[tokio::test]
async fn ack_refused_without_a_configured_token() {
    let srv = start().await;
    let gap = sample_gap("a", 10, GapState::Open);
    srv.state
        .store
        .commit_round("a", std::slice::from_ref(&gap), &[])
        .unwrap();
    let r = post(srv.addr, &ack_path(&gap.id), "", r#"{"reason":"x"}"#).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("server.api_token"), "{}", r.body);
    // Even a bearer header changes nothing: there is no token to match.
    let r = post(srv.addr, &ack_path(&gap.id), &bearer(), r#"{"reason":"x"}"#).await;
    assert_eq!(r.status, 403);
    let stored = srv.state.store.get_gap(&gap.id).unwrap().unwrap();
    assert_eq!(stored.state, GapState::Open);
    srv.shutdown.cancel();
}

#[tokio::test]
async fn ack_over_http() {
    let srv = start_with(Some(Secret::new(TOKEN))).await;
    let gap = sample_gap("a", 10, GapState::Open);
    srv.state
        .store
        .commit_round("a", std::slice::from_ref(&gap), &[])
        .unwrap();
    let path = ack_path(&gap.id);
    let body = r#"{"reason":"known outage"}"#;

    // No token, wrong token: 401, nothing written.
    let r = post(srv.addr, &path, "", body).await;
    assert_eq!(r.status, 401);
    let r = post(srv.addr, &path, "Authorization: Bearer nope\r\n", body).await;
    assert_eq!(r.status, 401);
    assert!(r.headers.contains("error=\"invalid_token\""));
    // Bad bodies: 400 naming the field, 413 beyond the cap (refused from its length).
    for bad in [
        "",
        "{}",
        r#"{"reason":""}"#,
        r#"{"reason":null}"#,
        "not json",
    ] {
        let r = post(srv.addr, &path, &bearer(), bad).await;
        assert_eq!(r.status, 400, "{bad:?}: {}", r.body);
    }
    let r = post(srv.addr, &path, &bearer(), "{}").await;
    assert_eq!(r.json()["parameter"], "reason", "{}", r.body);
    let big = format!(
        "{}Content-Type: application/json\r\nContent-Length: {}\r\n",
        bearer(),
        MAX_BODY + 1
    );
    let r = request_with(srv.addr, "POST", &path, &big).await;
    assert_eq!(r.status, 413, "{}", r.body);
    let r = get_with(srv.addr, "/api/gaps?state=all", &bearer()).await;
    assert!(
        r.status == 200 && r.json()[0]["state"] == "open",
        "{}",
        r.body
    );
    // Unknown gap: 404 saying where it may be.
    let r = post(srv.addr, &ack_path("a:test:0:999"), &bearer(), body).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(r.body.contains("another instance"), "{}", r.body);
    // Other methods on the ack path: 405 naming POST.
    for method in ["GET", "PUT", "DELETE"] {
        let r = request_with(srv.addr, method, &path, &bearer()).await;
        assert_eq!(r.status, 405, "{method}");
        assert!(r.headers.contains("allow: post"), "{}", r.headers);
    }

    // The ack: the gap as /api/gaps lists it.
    let r = post(srv.addr, &path, &bearer(), body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let acked = r.json();
    assert_eq!(acked["id"], gap.id.as_str());
    assert_eq!(acked["state"], "acknowledged");
    assert_eq!(acked["ack_reason"], "known outage");
    let listed = get_with(srv.addr, "/api/gaps?state=all", &bearer())
        .await
        .json();
    assert_eq!(listed[0], acked);
    // Again: 200 like `gap-auditor ack` (exit 0), the new reason kept; hostile text stays
    // JSON text.
    let again = r#"{"reason":"re-checked \"by\" <ops>\n"}"#;
    let r = post(srv.addr, &path, &bearer(), again).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["ack_reason"], "re-checked \"by\" <ops>\n");
    assert_eq!(r.json()["state"], "acknowledged");
    // The daemon's rounds read it from the ack log.
    assert_eq!(srv.state.store.ack_position().unwrap(), 2);
    // A gap whose records arrived (late): 409 saying so, its state kept.
    let late = sample_gap("a", 50, GapState::Late);
    srv.state
        .store
        .commit_round("a", std::slice::from_ref(&late), &[])
        .unwrap();
    let r = post(srv.addr, &ack_path(&late.id), &bearer(), body).await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(r.body.contains("reached the sink"), "{}", r.body);
    let stored = srv.state.store.get_gap(&late.id).unwrap().unwrap();
    assert_eq!(stored.state, GapState::Late);
    assert_eq!(srv.state.store.ack_position().unwrap(), 2, "nothing logged");
    srv.shutdown.cancel();
}

fn hostile_gap(first: i64) -> Gap {
    let mut g = sample_gap("a\"u'dit", first, GapState::Open);
    g.topic = "<script>alert(\"t\")</script>".to_string();
    g.id = Gap::make_id(&g.audit, &g.topic, 0, first);
    g.ack_reason = Some("<b>'quoted' & \"double\"</b>".to_string());
    g.cause = GapCause::SkippedByRestart;
    g.pipeline_commit_from = Some(first);
    g.pipeline_commit_to = Some(first + 5);
    g
}

#[tokio::test]
async fn ui_escapes_everything_from_outside() {
    let srv = start().await;
    let gap = hostile_gap(2);
    srv.state
        .store
        .commit_round(&gap.audit, std::slice::from_ref(&gap), &[])
        .unwrap();
    let mut status = audit_status(&gap.audit, Some(Utc::now()));
    status.partitions[0].topic = gap.topic.clone();
    status.sink_error = Some("<img src=x onerror=alert(1)>".to_string());
    srv.state.status.update(status);

    let r = get(srv.addr, "/ui?state=all").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.headers.contains("content-type: text/html; charset=utf-8"));
    assert!(
        r.headers
            .contains("content-security-policy: default-src 'none'")
    );
    for raw in ["<script", "<img", "<b>", "a\"u'dit"] {
        assert!(!r.body.contains(raw), "{raw} unescaped:\n{}", r.body);
    }
    assert!(
        r.body
            .contains("&lt;script&gt;alert(&quot;t&quot;)&lt;/script&gt;")
    );
    assert!(r.body.contains("&lt;img src=x onerror=alert(1)&gt;"));
    assert!(r.body.contains("&lt;b&gt;"));
    // The id shell-quoted in the commands, the quote inside it closed and reopened.
    let quoted = maud::html! { (shell_quote(&gap.id)) }.into_string();
    assert!(quoted.contains(r"'\''"), "{quoted}");
    assert!(r.body.contains(&quoted), "{quoted} in\n{}", r.body);
    assert!(r.body.contains("skipped by restart"));
    assert!(r.body.contains("pipeline group moved from 2 to 7"));
    srv.shutdown.cancel();
}

#[tokio::test]
async fn ui_shows_partitions_and_pages_gaps() {
    let srv = start().await;
    let gaps: Vec<Gap> = (0..450)
        .map(|i| sample_gap("a", i * 10, GapState::Open))
        .collect();
    srv.state.store.commit_round("a", &gaps, &[]).unwrap();
    srv.state.status.update(audit_status("a", Some(Utc::now())));
    srv.state.status.update(audit_status("b", Some(Utc::now())));

    let r = get(srv.addr, "/ui?audit=a").await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("audit a") && !r.body.contains("audit b"));
    // consumed, settled, pipeline committed, log end, pending of the partition.
    assert!(
        r.body
            .contains("<td>100</td><td>90</td><td>95</td><td>100</td><td>10</td>")
    );

    let mut seen = std::collections::BTreeSet::new();
    let mut target = "/ui?audit=a&state=open".to_string();
    let mut pages = Vec::new();
    loop {
        let r = get(srv.addr, &target).await;
        assert_eq!(r.status, 200, "{target}: {}", r.body);
        let rows = r.body.matches("gap-auditor ack -c CONFIG --gap").count();
        pages.push(rows);
        for g in &gaps {
            if r.body
                .contains(&format!("--gap {} --to-sink", shell_quote(&g.id)))
            {
                assert!(seen.insert(g.id.clone()), "{} twice", g.id);
            }
        }
        let Some(at) = r.body.find("rel=\"next\"") else {
            break;
        };
        let head = &r.body[..at];
        let href = head.rsplit("href=\"").next().unwrap();
        let href = &href[..href.find('"').unwrap()];
        assert!(
            href.starts_with("/ui?") && href.contains("after="),
            "{href}"
        );
        target = href.replace("&amp;", "&");
    }
    assert_eq!(pages, vec![200, 200, 50]);
    assert_eq!(seen.len(), 450);
    // A smaller page on request; never a bigger one.
    let r = get(srv.addr, "/ui?limit=5").await;
    assert_eq!(r.body.matches("gap-auditor ack -c CONFIG").count(), 5);
    let r = get(srv.addr, "/ui?limit=1000").await;
    assert_eq!(r.body.matches("gap-auditor ack -c CONFIG").count(), 200);
    // Bad filters: 400, as HTML.
    let r = get(srv.addr, "/ui?state=bogus").await;
    assert_eq!(r.status, 400);
    assert!(r.body.contains("&quot;bogus&quot;"), "{}", r.body);
    assert_eq!(request(srv.addr, "POST", "/ui").await.status, 405);
    srv.shutdown.cancel();
}

#[tokio::test]
async fn ui_under_the_token_rule_when_one_is_set() {
    let srv = start_with(Some(Secret::new(TOKEN))).await;
    let gap = sample_gap("a", 10, GapState::Open);
    srv.state
        .store
        .commit_round("a", std::slice::from_ref(&gap), &[])
        .unwrap();
    let r = get(srv.addr, "/ui").await;
    assert_eq!(r.status, 401);
    assert!(!r.body.contains(&gap.id));
    let r = get_with(srv.addr, "/ui", &bearer()).await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains(&gap.id));
    srv.shutdown.cancel();
}

#[test]
fn page_helpers() {
    let now = Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap();
    assert_eq!(time_left(None, now), "unknown");
    assert!(time_left(Some(now), now).starts_with("deleted by retention"));
    let later = now + chrono::TimeDelta::seconds(3 * 3600 + 12 * 60 + 59);
    assert_eq!(
        time_left(Some(later), now),
        "3h 12m left (until 2024-05-01T15:12:59Z)"
    );
    assert!(
        time_left(Some(now + chrono::TimeDelta::seconds(30)), now).starts_with("under a minute")
    );
    assert_eq!(shell_quote("a:t:0:5"), "'a:t:0:5'");
    assert_eq!(shell_quote("it's"), r"'it'\''s'");
    assert_eq!(
        replay_command("a:t:0:5"),
        "gap-auditor replay -c CONFIG --gap 'a:t:0:5' --to-sink --dry-run"
    );
    assert_eq!(
        ack_command("a:t:0:5"),
        "gap-auditor ack -c CONFIG --gap 'a:t:0:5' --reason '…'"
    );
    let mut g = sample_gap("a", 2, GapState::Open);
    assert!(cause_words(&g).starts_with("unknown"));
    g.cause = GapCause::DeletedUnread;
    assert!(cause_words(&g).starts_with("deleted unread"));
}
