//! The gap page and the HTTP ack, through the real binary: the seed incident's gap shown
//! on `GET /ui` (offsets, cause, commands), acknowledged with `POST /api/gaps/{id}/ack`,
//! then acknowledged in `/api/gaps` and out of `gap_auditor_gaps_open` within a round.

use crate::support::*;
use std::path::Path;

const TOKEN: &str = "ui-ack-test-token";

/// One HTTP/1.1 request with the bearer token; (status, body).
async fn call(addr: std::net::SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
         Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.expect("read");
    split_response(&buf)
}

/// The value of gauge `name` for `topic`, when exported.
fn gauge(metrics: &str, name: &str, topic: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(topic))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ui_shows_the_seed_gap_and_the_ack_closes_it() {
    let s = Scenario::with_seed_table("test").await;
    let port = free_port();
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/gap-auditor.toml");
    let mut auditor = Daemon::spawn(
        Path::new(config),
        vec![
            ("GAP_AUDITOR__KAFKA__BROKERS", kafka().into()),
            (
                "GAP_AUDITOR__KAFKA__GROUP_ID",
                s.auditor_group.as_str().into(),
            ),
            ("GAP_AUDITOR__KAFKA__START", "earliest".into()),
            ("GAP_AUDITOR__KAFKA__SESSION_TIMEOUT", "6s".into()),
            ("GAP_AUDITOR__KAFKA__HEARTBEAT_INTERVAL", "500ms".into()),
            (
                "GAP_AUDITOR__SERVER__LISTEN",
                format!("127.0.0.1:{port}").into(),
            ),
            ("GAP_AUDITOR__SERVER__API_TOKEN", TOKEN.into()),
            (
                "GAP_AUDITOR__STATE__PATH",
                s.state.path().join("store").into(),
            ),
            ("GAP_AUDITOR__AUDITS__0__TOPICS", s.topic.as_str().into()),
            (
                "GAP_AUDITOR__AUDITS__0__PIPELINE_GROUP",
                s.pipeline_group.as_str().into(),
            ),
            ("GAP_AUDITOR__AUDITS__0__GRACE", "2s".into()),
            ("GAP_AUDITOR__AUDITS__0__VERIFY_INTERVAL", "500ms".into()),
            (
                "GAP_AUDITOR__AUDITS__0__SINK__URL",
                s.db_url.as_str().into(),
            ),
        ],
        s.state.path().join("auditor.log"),
    );
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    s.play_seed_incident(|o| async move {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            return false; // still starting
        }
        let (code, body) = call(addr, "GET", "/api/status", "").await;
        let status: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        code == 200 && status["audits"][0]["partitions"][0]["pipeline_committed"] == o
    })
    .await;

    // The page shows the gap once it is reported (the page is under the token rule).
    let (page, id) = auditor
        .wait_until(60, || async move {
            let (code, body) = call(addr, "GET", "/ui", "").await;
            let (_, gaps) = call(addr, "GET", "/api/gaps", "").await;
            let gaps: Vec<serde_json::Value> = serde_json::from_str(&gaps).unwrap_or_default();
            match gaps.first().and_then(|g| g["id"].as_str()) {
                Some(id) if code == 200 && body.contains(id) => Ok((body, id.to_string())),
                _ => Err(format!("no gap on the page yet ({code})")),
            }
        })
        .await;
    let (unauthenticated, _) = http_get(addr, "/ui").await;
    assert_eq!(unauthenticated, 401, "the page shows what /api/gaps guards");
    assert!(page.contains("<td>2–3</td>"), "offsets 2–3:\n{page}");
    assert!(page.contains("skipped by restart"), "{page}");
    assert!(page.contains("pipeline group moved from 2 to 4"), "{page}");
    assert!(
        page.contains(&format!(
            "gap-auditor replay -c CONFIG --gap '{id}' --to-sink --dry-run"
        )),
        "{page}"
    );
    assert!(
        page.contains(&format!("gap-auditor ack -c CONFIG --gap '{id}' --reason")),
        "{page}"
    );
    let (_, metrics) = http_get(addr, "/metrics").await;
    assert_eq!(
        gauge(&metrics, "gap_auditor_gaps_open", &s.topic),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        gauge(&metrics, "gap_auditor_records_missing", &s.topic),
        Some(2.0),
        "{metrics}"
    );

    // The ack, as an operator would send it.
    let encoded: String =
        percent_encoding::utf8_percent_encode(&id, percent_encoding::NON_ALPHANUMERIC).collect();
    let (code, body) = call(
        addr,
        "POST",
        &format!("/api/gaps/{encoded}/ack"),
        r#"{"reason":"replayed by hand"}"#,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let acked: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(acked["state"], "acknowledged");
    assert_eq!(acked["ack_reason"], "replayed by hand");

    // Within a round or two: acknowledged in the listing, out of the open-gap gauge.
    let topic = s.topic.clone();
    auditor
        .wait_until(30, || {
            let topic = topic.clone();
            let id = id.clone();
            async move {
                let (_, all) = call(addr, "GET", "/api/gaps?state=all", "").await;
                let all: Vec<serde_json::Value> = serde_json::from_str(&all).unwrap_or_default();
                let (_, open) = call(addr, "GET", "/api/gaps", "").await;
                let (_, metrics) = http_get(addr, "/metrics").await;
                let state = all
                    .iter()
                    .find(|g| g["id"] == id.as_str())
                    .map(|g| g["state"].clone());
                let open_gauge = gauge(&metrics, "gap_auditor_gaps_open", &topic);
                let missing = gauge(&metrics, "gap_auditor_records_missing", &topic);
                if state == Some("acknowledged".into())
                    && open.trim() == "[]"
                    && open_gauge == Some(0.0)
                    && missing == Some(0.0)
                {
                    Ok(())
                } else {
                    Err(format!(
                        "state {state:?}, open {open}, gaps_open {open_gauge:?}, records_missing {missing:?}"
                    ))
                }
            }
        })
        .await;
    auditor.stop();
}
