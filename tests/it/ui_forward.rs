//! Acks forwarded to the owning instance (SPEC "HTTP", issue 38), with two real daemons on
//! the real broker sharing a handover topic: A owns the seed topic's partition and reports
//! its gap; B (another audit, another group, its own store) does not hold the gap. An ack
//! sent to B is forwarded to A (API route and page form alike), a request already
//! forwarded once is refused rather than sent on, and with A stopped B answers 502 naming A.

use crate::support::*;
use crate::ui_ack::{TOKEN, call, call_with, daemon_with_the_seed_gap_and, wait_acknowledged};
use std::path::Path;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_ack_sent_to_a_non_owner_is_forwarded_to_the_owner() {
    let handover = unique("ui_forward_handover");
    let b_port = free_port();
    let b_url_for_a = format!("http://127.0.0.1:{b_port}");
    let a_url = std::cell::OnceCell::new();
    let (s, mut a, a_addr, _, id) = daemon_with_the_seed_gap_and(|port| {
        let url = format!("http://127.0.0.1:{port}");
        let _ = a_url.set(url.clone());
        vec![
            (
                "GAP_AUDITOR__STATE__HANDOVER_TOPIC",
                handover.clone().into(),
            ),
            ("GAP_AUDITOR__SERVER__ADVERTISED_URL", url.into()),
            // Both on 127.0.0.1: only a listed peer is sent the token.
            (
                "GAP_AUDITOR__SERVER__FORWARD_PEERS",
                b_url_for_a.clone().into(),
            ),
        ]
    })
    .await;
    let a_url = a_url.get().cloned().expect("A's url");

    // B: same handover topic, its own audit name, group and store; not the gap's owner.
    let b_url = b_url_for_a.clone();
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/gap-auditor.toml");
    let mut b = Daemon::spawn(
        Path::new(config),
        vec![
            ("GAP_AUDITOR__KAFKA__BROKERS", kafka().into()),
            (
                "GAP_AUDITOR__KAFKA__GROUP_ID",
                format!("{}-peer", s.auditor_group).into(),
            ),
            ("GAP_AUDITOR__KAFKA__START", "earliest".into()),
            (
                "GAP_AUDITOR__SERVER__LISTEN",
                format!("127.0.0.1:{b_port}").into(),
            ),
            ("GAP_AUDITOR__SERVER__API_TOKEN", TOKEN.into()),
            ("GAP_AUDITOR__SERVER__ADVERTISED_URL", b_url.clone().into()),
            ("GAP_AUDITOR__SERVER__FORWARD_PEERS", a_url.clone().into()),
            (
                "GAP_AUDITOR__STATE__HANDOVER_TOPIC",
                handover.clone().into(),
            ),
            (
                "GAP_AUDITOR__STATE__PATH",
                s.state.path().join("peer-store").into(),
            ),
            ("GAP_AUDITOR__AUDITS__0__NAME", "peer".into()),
            ("GAP_AUDITOR__AUDITS__0__TOPICS", s.topic.as_str().into()),
            (
                "GAP_AUDITOR__AUDITS__0__SINK__URL",
                s.db_url.as_str().into(),
            ),
        ],
        s.state.path().join("peer.log"),
    );
    let b_addr: std::net::SocketAddr = format!("127.0.0.1:{b_port}").parse().expect("addr");
    let encoded: String =
        percent_encoding::utf8_percent_encode(&id, percent_encoding::NON_ALPHANUMERIC).collect();
    let api = format!("/api/gaps/{encoded}/ack");
    b.wait_until(60, || async move {
        match try_http_get(b_addr, "/healthz").await {
            Some((200, _)) => Ok(()),
            other => Err(format!("B not up: {other:?}")),
        }
    })
    .await;

    // A request that was already forwarded once is never sent on: 508, and A's gap stays
    // open.
    let (code, body) = call_with(
        b_addr,
        "POST",
        &api,
        "application/json",
        "X-Gap-Auditor-Forwarded-By: http://127.0.0.1:1\r\n",
        r#"{"reason":"must not arrive"}"#,
    )
    .await;
    assert_eq!(code, 508, "{body}");
    assert!(body.contains("already forwarded"), "{body}");
    let (_, open) = call(a_addr, "GET", "/api/gaps", "").await;
    assert!(
        open.contains(&id),
        "the gap must still be open on A: {open}"
    );

    // The API ack sent to B lands on A (A publishes its URL with the partition's state on
    // its next persist, so B may first find no owner URL: retried until it does).
    let acked = b
        .wait_until(60, || {
            let api = api.clone();
            async move {
                let (code, body) = call(b_addr, "POST", &api, r#"{"reason":"acked via B"}"#).await;
                if code == 200 {
                    Ok(body)
                } else {
                    Err(format!("B answered {code}: {body}"))
                }
            }
        })
        .await;
    let acked: serde_json::Value = serde_json::from_str(&acked).expect("A's JSON passed through");
    assert_eq!(acked["id"], id.as_str());
    assert_eq!(acked["state"], "acknowledged");
    wait_acknowledged(&mut a, a_addr, &s.topic, &id, "acked via B").await;
    let (_, b_gaps) = call(b_addr, "GET", "/api/gaps?state=all", "").await;
    assert!(
        !b_gaps.contains(&id),
        "B's store never held the gap: {b_gaps}"
    );

    // The page's form, posted to B, goes the same way.
    let form = format!(
        "reason={}&token={TOKEN}",
        form_urlencoded::byte_serialize(b"acked from B's page").collect::<String>()
    );
    let (code, page) = call_with(
        b_addr,
        "POST",
        &format!("/ui/gaps/{encoded}/ack"),
        "application/x-www-form-urlencoded",
        "",
        &form,
    )
    .await;
    assert_eq!(code, 200, "{page}");
    assert!(
        page.contains("acknowledged on the instance that owns"),
        "{page}"
    );
    assert!(page.contains(&a_url), "the page names the owner: {page}");
    wait_acknowledged(&mut a, a_addr, &s.topic, &id, "acked from B's page").await;

    // The owner gone: 502 naming it, from both routes.
    a.stop();
    let (code, body) = call(b_addr, "POST", &api, r#"{"reason":"A is down"}"#).await;
    assert_eq!(code, 502, "{body}");
    assert!(body.contains(&a_url), "the 502 names the owner: {body}");
    assert!(!body.contains(TOKEN), "{body}");
    for log in [a.log_text(), b.log_text()] {
        assert!(!log.contains(TOKEN), "the token must never be logged");
    }
    b.stop();
}
