//! The gap page's ack form: `POST /ui/gaps/{id}/ack` and the form on `GET /ui`.

use super::super::ui_ack::{AckForm, BadForm, ROUTE, back_to_page, parse_form};
use super::super::ui_replay::ROUTE as REPLAY;
use super::*;
use base64::Engine;

const TOKEN: &str = "f0rm-T0ken_7";

fn basic(password: &str) -> String {
    let creds = base64::engine::general_purpose::STANDARD.encode(format!("oncall:{password}"));
    format!("Authorization: Basic {creds}\r\n")
}

/// `POST path` with a form body, `extra` header lines first (may be empty).
async fn post_form(addr: SocketAddr, path: &str, extra: &str, body: &str) -> Reply {
    let headers = format!(
        "{extra}Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    request_with(addr, "POST", path, &headers).await
}

fn form(reason: &str, token: &str) -> String {
    form_urlencoded::Serializer::new(String::new())
        .append_pair("reason", reason)
        .append_pair("token", token)
        .finish()
}

#[test]
fn form_parsing_and_paths() {
    assert_eq!(
        parse_form(b"reason=known+outage&token=a%26b"),
        Ok(AckForm {
            reason: "known outage".into(),
            token: "a&b".into()
        })
    );
    assert_eq!(parse_form(b"token=x"), Err(BadForm::NoReason));
    assert_eq!(parse_form(b"reason=+++&token=x"), Err(BadForm::NoReason));
    assert_eq!(parse_form(b"reason=r"), Err(BadForm::NoToken));
    assert_eq!(parse_form(b"reason=r&token="), Err(BadForm::NoToken));
    // A hostile id survives the round trip through the form's action.
    let id = "a/u dit?:t#p:0:5";
    let path = ROUTE.path(id);
    let segment = &path["/ui/gaps/".len()..path.len() - "/ack".len()];
    assert!(!segment.contains(['/', '?', '#', ' ']), "{path}");
    assert_eq!(ROUTE.id_of(&path).as_deref(), Some(id));
    assert_eq!(ROUTE.id_of("/ui/gaps//ack"), None);
    assert_eq!(ROUTE.id_of("/ui/gaps/x"), None);
    assert_eq!(back_to_page("a&b c"), "/ui?audit=a%26b+c&state=all");
}

#[tokio::test]
async fn the_form_acks_with_the_typed_token_only() {
    let srv = start_with(Some(Secret::new(TOKEN))).await;
    let open = sample_gap("a", 10, GapState::Open);
    let late = sample_gap("a", 50, GapState::Late);
    srv.state
        .store
        .commit_round("a", &[open.clone(), late.clone()], &[])
        .unwrap();
    let path = ROUTE.path(&open.id);

    // The page, read with Basic (what a browser sends): a form for the open gap only.
    let r = get_with(srv.addr, "/ui?state=all", &basic(TOKEN)).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // One ack form and one replay dry-run form, both for the open gap only.
    assert_eq!(r.body.matches("method=\"post\"").count(), 2, "{}", r.body);
    assert_eq!(r.body.matches("class=\"ack\"").count(), 1, "{}", r.body);
    assert_eq!(r.body.matches("class=\"replay\"").count(), 1, "{}", r.body);
    assert!(
        r.body
            .contains(&format!("action=\"{}\"", REPLAY.path(&open.id)))
    );
    assert!(!r.body.contains(&REPLAY.path(&late.id)));
    assert!(r.body.contains(&format!("action=\"{path}\"")), "{}", r.body);
    assert!(!r.body.contains(&ROUTE.path(&late.id)));
    assert!(r.body.contains("type=\"password\""));
    assert!(!r.body.contains(TOKEN), "the page never carries the token");
    // A wrong password: 401 offering Basic, so a browser asks for it.
    let r = get_with(srv.addr, "/ui", &basic("nope")).await;
    assert_eq!(r.status, 401);
    assert!(
        r.headers.contains("www-authenticate: basic realm"),
        "{}",
        r.headers
    );
    assert!(!r.body.contains(&open.id));
    // The API stays bearer-only.
    let r = get_with(srv.addr, "/api/gaps", &basic(TOKEN)).await;
    assert_eq!(r.status, 401);

    // Refused, nothing written: the browser's own credentials without the typed token (what
    // a forged cross-site post carries), a wrong token, no reason, not a form.
    let r = post_form(srv.addr, &path, &basic(TOKEN), "reason=forged").await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = post_form(srv.addr, &path, &basic(TOKEN), &form("r", "nope")).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("wrong token"), "{}", r.body);
    let r = post_form(srv.addr, &path, "", &form(" ", TOKEN)).await;
    assert_eq!(r.status, 400, "{}", r.body);
    let body = r#"{"reason":"r","token":"f0rm-T0ken_7"}"#;
    let json_post = format!(
        "Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let r = request_with(srv.addr, "POST", &path, &json_post).await;
    assert_eq!(r.status, 415, "{}", r.body);
    assert_eq!(srv.state.store.ack_position().unwrap(), 0, "nothing logged");
    assert_eq!(
        srv.state.store.get_gap(&open.id).unwrap().unwrap().state,
        GapState::Open
    );
    let r = request_with(srv.addr, "GET", &path, "").await;
    assert_eq!(r.status, 405);

    // The ack: 303 back to the audit's page, where the gap shows acknowledged with its
    // reason (escaped).
    let r = post_form(srv.addr, &path, "", &form("<b>known</b> outage", TOKEN)).await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert!(
        r.headers.contains("location: /ui?audit=a&state=all"),
        "{}",
        r.headers
    );
    let stored = srv.state.store.get_gap(&open.id).unwrap().unwrap();
    assert_eq!(stored.state, GapState::Acknowledged);
    assert_eq!(stored.ack_reason.as_deref(), Some("<b>known</b> outage"));
    assert_eq!(srv.state.store.ack_position().unwrap(), 1);
    let r = get_with(srv.addr, "/ui?audit=a&state=all", &basic(TOKEN)).await;
    assert!(r.body.contains("acknowledged"), "{}", r.body);
    assert!(
        r.body.contains("&lt;b&gt;known&lt;/b&gt; outage"),
        "{}",
        r.body
    );

    // A gap whose records arrived: 409, kept late; an unknown gap: 404.
    let r = post_form(srv.addr, &ROUTE.path(&late.id), "", &form("r", TOKEN)).await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(
        srv.state.store.get_gap(&late.id).unwrap().unwrap().state,
        GapState::Late
    );
    let r = post_form(srv.addr, &ROUTE.path("a:test:0:999"), "", &form("r", TOKEN)).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(srv.state.store.ack_position().unwrap(), 1);
    srv.shutdown.cancel();
}

#[tokio::test]
async fn without_a_token_there_is_no_form_and_a_post_is_refused() {
    let srv = start().await;
    let open = sample_gap("a", 10, GapState::Open);
    srv.state
        .store
        .commit_round("a", std::slice::from_ref(&open), &[])
        .unwrap();
    let r = get(srv.addr, "/ui").await;
    assert_eq!(r.status, 200);
    assert!(!r.body.contains("method=\"post\""), "{}", r.body);
    assert!(r.body.contains("needs server.api_token"), "{}", r.body);
    let r = post_form(srv.addr, &ROUTE.path(&open.id), "", &form("r", "anything")).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(srv.state.store.ack_position().unwrap(), 0);
    let r = post_form(srv.addr, &REPLAY.path(&open.id), "", "token=anything").await;
    assert_eq!(r.status, 403, "{}", r.body);
    srv.shutdown.cancel();
}

/// The page's replay dry-run is refused before anything is read: the browser's own
/// credentials without the typed token, a wrong token, not a form, not a POST. (What it
/// shows is tested on the real broker: tests/it/ui_ack.rs.)
#[tokio::test]
async fn the_replay_dry_run_needs_the_typed_token() {
    let srv = start_with(Some(Secret::new(TOKEN))).await;
    let open = sample_gap("a", 10, GapState::Open);
    srv.state
        .store
        .commit_round("a", std::slice::from_ref(&open), &[])
        .unwrap();
    let path = REPLAY.path(&open.id);
    let r = post_form(srv.addr, &path, &basic(TOKEN), "to_topic=").await;
    assert_eq!(r.status, 400, "{}", r.body);
    let r = post_form(srv.addr, &path, &basic(TOKEN), "token=nope").await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("wrong token"), "{}", r.body);
    let json_post = "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
    let r = request_with(srv.addr, "POST", &path, json_post).await;
    assert_eq!(r.status, 415, "{}", r.body);
    let r = request_with(srv.addr, "GET", &path, "").await;
    assert_eq!(r.status, 405);
    // Review: a destination that is no topic name is refused before it is used or stored.
    let bad = format!("token={TOKEN}&to_topic=..%2Fx%20y");
    let r = post_form(srv.addr, &path, "", &bad).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("to_topic"), "{}", r.body);
    // The right token, but this server has no audit configuration: nothing run.
    let r = post_form(srv.addr, &path, "", &format!("token={TOKEN}")).await;
    assert_eq!(r.status, 503, "{}", r.body);
    assert!(srv.state.store.replays_of_gap(&open.id).unwrap().is_empty());
    srv.shutdown.cancel();
}

/// Review: the daemon reads a page dry-run's records into its own memory, so a gap wider
/// than `MAX_DRY_RUN_OFFSETS` (an overflow gap can span millions) is refused with the CLI
/// command, before anything is read.
#[tokio::test]
async fn a_dry_run_of_a_huge_gap_is_the_clis() {
    let srv = start_with(Some(Secret::new(TOKEN))).await;
    let mut huge = sample_gap("a", 10, GapState::Open);
    huge.last_offset = huge.first_offset + super::super::ui_replay::MAX_DRY_RUN_OFFSETS;
    srv.state
        .store
        .commit_round("a", std::slice::from_ref(&huge), &[])
        .unwrap();
    let r = post_form(
        srv.addr,
        &REPLAY.path(&huge.id),
        "",
        &format!("token={TOKEN}"),
    )
    .await;
    assert_eq!(r.status, 413, "{}", r.body);
    assert!(r.body.contains("--dry-run"), "{}", r.body);
    assert!(srv.state.store.replays_of_gap(&huge.id).unwrap().is_empty());
    srv.shutdown.cancel();
}
