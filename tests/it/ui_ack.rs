//! The gap page and the HTTP ack, through the real binary: the seed incident's gap shown
//! on `GET /ui` (offsets, cause, commands), acknowledged with `POST /api/gaps/{id}/ack`,
//! then acknowledged in `/api/gaps` and out of `gap_auditor_gaps_open` within a round;
//! and the same page in a real headless Chromium (JavaScript off), acked from its form.

use crate::support::*;
use std::path::Path;

pub(crate) const TOKEN: &str = "ui-ack-test-token";

/// One HTTP/1.1 request with the bearer token; (status, body).
pub(crate) async fn call(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, String) {
    call_with(addr, method, path, "application/json", "", body).await
}

/// [`call`] with another content type and extra header lines (each ending in `\r\n`).
pub(crate) async fn call_with(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    content_type: &str,
    headers: &str,
    body: &str,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
         Authorization: Bearer {TOKEN}\r\nContent-Type: {content_type}\r\n{headers}\
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

/// A daemon (token [`TOKEN`]) that has reported the seed incident's gap: the scenario, the
/// daemon, its address, the gap page as it first showed the gap, and the gap's id.
async fn daemon_with_the_seed_gap() -> (Scenario, Daemon, std::net::SocketAddr, String, String) {
    daemon_with_the_seed_gap_and(|_| Vec::new()).await
}

/// [`daemon_with_the_seed_gap`], with more settings (given the daemon's port) in its
/// environment.
pub(crate) async fn daemon_with_the_seed_gap_and(
    more: impl FnOnce(u16) -> Vec<(&'static str, std::ffi::OsString)>,
) -> (Scenario, Daemon, std::net::SocketAddr, String, String) {
    let s = Scenario::with_seed_table("test").await;
    let port = free_port();
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/gap-auditor.toml");
    let mut env = more(port);
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
        ]
        .into_iter()
        .chain(env.drain(..))
        .collect(),
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
    (s, auditor, addr, page, id)
}

/// Waits until the gap is acknowledged in the listing and out of the open-gap gauges.
pub(crate) async fn wait_acknowledged(
    auditor: &mut Daemon,
    addr: std::net::SocketAddr,
    topic: &str,
    id: &str,
    reason: &str,
) {
    auditor
        .wait_until(30, || {
            let topic = topic.to_string();
            let id = id.to_string();
            async move {
                let (_, all) = call(addr, "GET", "/api/gaps?state=all", "").await;
                let all: Vec<serde_json::Value> = serde_json::from_str(&all).unwrap_or_default();
                let (_, open) = call(addr, "GET", "/api/gaps", "").await;
                let (_, metrics) = http_get(addr, "/metrics").await;
                let gap = all.iter().find(|g| g["id"] == id.as_str());
                let state = gap.map(|g| g["state"].clone());
                let ack_reason = gap.map(|g| g["ack_reason"].clone());
                let open_gauge = gauge(&metrics, "gap_auditor_gaps_open", &topic);
                let missing = gauge(&metrics, "gap_auditor_records_missing", &topic);
                if state == Some("acknowledged".into())
                    && ack_reason == Some(reason.into())
                    && open.trim() == "[]"
                    && open_gauge == Some(0.0)
                    && missing == Some(0.0)
                {
                    Ok(())
                } else {
                    Err(format!(
                        "state {state:?} ({ack_reason:?}), open {open}, gaps_open {open_gauge:?}, records_missing {missing:?}"
                    ))
                }
            }
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ui_shows_the_seed_gap_and_the_ack_closes_it() {
    let (s, mut auditor, addr, page, id) = daemon_with_the_seed_gap().await;
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
    wait_acknowledged(&mut auditor, addr, &s.topic, &id, "replayed by hand").await;
    auditor.stop();
}

/// Where the suite keeps what a person would look at: `GAP_AUDITOR_ARTIFACTS`, default
/// `target/artifacts` of this repository.
fn artifacts_dir() -> std::path::PathBuf {
    std::env::var_os("GAP_AUDITOR_ARTIFACTS")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/artifacts"))
}

/// The gap page in Debian's Chromium (scripts/ui-browser.sh, tests/browser/ui.mjs), with
/// JavaScript off: the seed gap shown with its offsets, cause, retention countdown and
/// commands; its replay dry-run pressed (token typed) and the plan it shows checked; acked
/// from its form with the token typed in; back on the page acknowledged, and out of the
/// daemon's open gaps and gauges. Screenshots of the three pages are kept in
/// `target/artifacts/ui/`. Skipped (with a message) where chromium or node is missing,
/// except under CI, which installs them (scripts/test-env.sh).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_gap_page_in_a_browser_shows_the_seed_gap_and_acks_it() {
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    let missing: Vec<&str> = ["chromium", "node", "npm"]
        .into_iter()
        .filter(|t| {
            !std::process::Command::new("sh")
                .args(["-c", &format!("command -v {t}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .collect();
    if !missing.is_empty() {
        assert!(
            !ci,
            "{missing:?} not installed, and CI requires this test (scripts/test-env.sh installs them)"
        );
        eprintln!("SKIPPED: {missing:?} not installed (Debian packages chromium, nodejs, npm)");
        return;
    }
    let (s, mut auditor, addr, _, id) = daemon_with_the_seed_gap().await;
    let out = artifacts_dir().join("ui");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/ui-browser.sh");
    let run = tokio::process::Command::new("bash")
        .arg(script)
        .env("UI_URL", format!("http://{addr}"))
        .env("UI_TOKEN", TOKEN)
        .env("UI_GAP", &id)
        .env("UI_OUT", &out)
        .output()
        .await
        .expect("run scripts/ui-browser.sh");
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "the browser run failed:\n{stdout}\n{stderr}"
    );
    let seen: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("not the script's JSON ({e}):\n{stdout}\n{stderr}"));

    assert_eq!(seen["anonymousStatus"], 401, "without the login: {seen}");
    let before = seen["before"]["text"].as_str().unwrap_or_default();
    assert_eq!(seen["before"]["status"], 200, "{seen}");
    for shown in [
        id.as_str(),
        "2–3",
        "skipped by restart",
        "pipeline group moved from 2 to 4",
        " left (until ",
        "--to-sink --dry-run",
        "gap-auditor ack -c CONFIG --gap",
    ] {
        assert!(
            before.contains(shown),
            "the page does not show {shown:?}:\n{before}"
        );
    }
    // The replay dry-run's plan: the seed gap's two records would be written into the sink
    // (they are absent), nothing written, the CLI command it stands for and the real one.
    let plan = seen["plan"]["text"].as_str().unwrap_or_default();
    assert_eq!(seen["plan"]["status"], 200, "{seen}");
    let tp = format!("{}-0", s.topic);
    for shown in [
        format!("replay dry-run of gap {id}"),
        "written into the audit's sink".to_string(),
        "No record was written".to_string(),
        format!("{tp} offset 2: would write"),
        format!("{tp} offset 3: would write"),
        "2 record(s) would write, 0 failed".to_string(),
        format!("gap-auditor replay -c CONFIG --gap '{id}' --to-sink --dry-run"),
        format!("To do it: gap-auditor replay -c CONFIG --gap '{id}' --to-sink"),
    ] {
        assert!(
            plan.contains(&shown),
            "the plan does not show {shown:?}:\n{plan}"
        );
    }
    let row = seen["after"]["row"].as_str().unwrap_or_default();
    assert!(
        row.contains("acknowledged") && row.contains("replayed by hand (browser test)"),
        "after the ack the row says: {row}"
    );
    assert_eq!(
        seen["after"]["forms"], 0,
        "no ack form for an acknowledged gap: {seen}"
    );
    for shot in [
        "ui-seed-gap.png",
        "ui-replay-dry-run.png",
        "ui-acknowledged.png",
    ] {
        let len = std::fs::metadata(out.join(shot))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(len > 10_000, "{shot}: {len} bytes");
    }
    wait_acknowledged(
        &mut auditor,
        addr,
        &s.topic,
        &id,
        "replayed by hand (browser test)",
    )
    .await;
    eprintln!("ui browser test: screenshots in {}", out.display());
    auditor.stop();
}
