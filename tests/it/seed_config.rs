//! The repository's documented example, `config/gap-auditor.toml`, used as is by the real
//! binary against the seed's table (`dns_logs_from_flink01`, Doris DDL translated for
//! MariaDB, `time` a DATETIME as in Doris), with only the deployment-specific keys
//! overridden through `GAP_AUDITOR__…` environment variables — which also proves the
//! override mechanism end to end.

use crate::support::*;
use std::path::Path;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn documented_config_catches_the_seed_incident() {
    // The seed's table, in its own database so the documented table name is used as is.
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

    // The incident: seed-shaped lines; the pipeline's rows go into the seed table.
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().expect("addr");
    s.play_seed_incident(|o| async move {
        // The daemon may still be starting: nothing listening yet is "not seen".
        let Some((200, body)) = try_http_get(addr, "/api/status").await else {
            return false;
        };
        let status: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        status["audits"][0]["partitions"][0]["pipeline_committed"] == o
    })
    .await;

    let gaps = auditor
        .wait_until(60, || async move {
            let body = match try_http_get(addr, "/api/gaps").await {
                Some((200, body)) => body,
                _ => String::new(),
            };
            let gaps: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap_or_default();
            if gaps.is_empty() {
                Err("no gap reported".to_string())
            } else {
                Ok(gaps)
            }
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, metrics) = http_get(addr, "/metrics").await;
    let (_, body) = http_get(addr, "/api/gaps").await;
    let gaps_now: Vec<serde_json::Value> = serde_json::from_str(&body).expect("json");
    // Clean exit on SIGTERM.
    auditor.stop();
    assert_eq!(gap_tuples(&gaps), vec![(0, 2, 3, 2)]);
    assert_eq!(gap_tuples(&gaps_now), vec![(0, 2, 3, 2)]);
    let confirmed = metrics
        .lines()
        .find(|l| l.starts_with("gap_auditor_records_confirmed_total{") && l.contains(&s.topic))
        .unwrap_or_default()
        .to_string();
    assert!(confirmed.ends_with(" 4"), "{confirmed}");
    let log_text = auditor.log_text();
    assert!(
        log_text.contains("offsets 2–3, 2 records"),
        "the gap is logged:\n{log_text}"
    );
    // The gap log line names the commit that skipped the records.
    let line = format!("pipeline group {} moved from 2 to 4 at", s.pipeline_group);
    assert!(log_text.contains(&line), "{line:?} in the log:\n{log_text}");
    assert!(log_text.contains("(skipped_by_restart)"), "{log_text}");
    assert_eq!(gaps_now[0]["cause"], "skipped_by_restart");
}
