//! What the real `gap-auditor run` binary shows an operator beside its verdicts (issue 17),
//! against Apache Kafka 4.4 + MariaDB: the process metrics of ITS OWN process and the
//! per-audit info metric on its real /metrics, and JSON logs
//! (`GAP_AUDITOR_LOG_FORMAT=json`) whose event fields are top-level keys. A clean stream
//! (every record written), so nothing else in the log distracts.

use crate::support::*;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The value of the un-labelled series `name` in an exposition.
fn sample(exposition: &str, name: &str) -> Option<f64> {
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// `VmRSS` of `/proc/<pid>/status`, in bytes.
fn vm_rss(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib * 1024.0
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn daemon_serves_process_and_audit_info_metrics_and_logs_flat_json() {
    let s = Scenario::new("surface").await;
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let cfg_path = s.state.path().join("gap-auditor.toml");
    let store_dir = s.state.path().join("store");
    let spec = AuditSpec {
        listen: &listen,
        state_dir: &store_dir,
        ..s.spec("offset_columns", "1s", "300ms")
    };
    std::fs::write(&cfg_path, config_toml(&spec)).expect("write config");
    let before = unix_now();
    let mut daemon = Daemon::spawn(
        Path::new(&cfg_path),
        vec![("GAP_AUDITOR_LOG_FORMAT", "json".into())],
        s.state.path().join("auditor.log"),
    );
    assert_eq!(s.send(&dns_lines(0..3)).await, vec![0, 1, 2]);
    s.pipeline().records(3).run().await;
    let addr: std::net::SocketAddr = listen.parse().expect("addr");
    let topic = s.topic.clone();
    let exposition = daemon
        .wait_until(60, || {
            let topic = topic.clone();
            async move {
                match try_http_get(addr, "/metrics").await {
                    Some((200, body))
                        if body.lines().any(|l| {
                            l.starts_with("gap_auditor_records_confirmed_total{")
                                && l.contains(&topic)
                                && l.ends_with(" 3")
                        }) =>
                    {
                        Ok(body)
                    }
                    other => Err(format!("3 records not confirmed yet: {other:?}")),
                }
            }
        })
        .await;
    let pid = daemon.pid();
    let rss_now = vm_rss(pid);
    let fds_now = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("/proc fd")
        .count() as f64;
    let after = unix_now();

    // The process metrics describe the daemon: it started during this test (whole seconds,
    // hence the slack of one), its RSS and open descriptors are /proc's within a margin
    // (both move a little between the scrape and the reading here).
    let start = sample(&exposition, "process_start_time_seconds").expect("start time");
    assert!(
        start >= before.floor() - 1.0 && start <= after,
        "process_start_time_seconds {start}, daemon spawned at {before}"
    );
    let rss = sample(&exposition, "process_resident_memory_bytes").expect("rss");
    assert!(
        rss > rss_now / 2.0 && rss < rss_now * 2.0,
        "process_resident_memory_bytes {rss}, /proc VmRSS {rss_now}"
    );
    let fds = sample(&exposition, "process_open_fds").expect("open fds");
    assert!(
        fds >= 5.0 && (fds - fds_now).abs() <= 20.0,
        "process_open_fds {fds}, /proc/{pid}/fd {fds_now}"
    );
    assert!(sample(&exposition, "process_max_fds").expect("max fds") >= fds);
    assert!(sample(&exposition, "process_cpu_seconds_total").expect("cpu") >= 0.0);

    // One info series for the one audit, with what a lag exporter joins on.
    let info = format!(
        "gap_auditor_audit_info{{audit=\"dns_logs\",pipeline_group=\"{}\",sink_kind=\"mysql\",strategy=\"offset_columns\"}} 1",
        s.pipeline_group
    );
    let infos: Vec<&str> = exposition
        .lines()
        .filter(|l| l.starts_with("gap_auditor_audit_info{"))
        .collect();
    assert_eq!(infos, vec![info.as_str()], "{exposition}");

    daemon.stop();

    // Every line is one JSON object; event fields are top-level keys, never under "fields".
    let log = daemon.log_text();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(lines.len() >= 2, "{log}");
    for l in &lines {
        assert!(l.get("fields").is_none(), "nested fields: {l}");
        assert!(l["message"].is_string() && l["level"].is_string(), "{l}");
    }
    let serving = lines
        .iter()
        .find(|l| {
            l["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("serving /metrics"))
        })
        .unwrap_or_else(|| panic!("no `serving /metrics` line:\n{log}"));
    assert_eq!(serving["listen"], listen.as_str(), "{serving}");
}
