//! Item 8: bounded memory under a sink that never answers. A [`Proxy`] accepts the
//! auditor's connections and never replies. The real binary must stop consuming once
//! `max_pending` records are undecided, keep its resident memory flat while paused
//! (VmRSS sampled every second for 30 s), say it is not ready, and when the sink returns
//! consume the rest, dropping nothing and reporting exactly the known losses.

use super::proxy::{Mode, Proxy};
use super::*;
use crate::support::*;
use std::time::{Duration, Instant};

const MAX_PENDING: i64 = 1000;
const N: usize = 6000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sink_that_never_answers_pauses_consumption_with_flat_memory() {
    let lost = |o: i64| (2500..2510).contains(&o) || o == 5000;
    let expected = expected_gaps(N as i64, lost);
    let s = Scenario::new("blackhole").await;
    let topic = s.topic.clone();
    produce_bulk(&topic, N).await;
    let bulk = BulkPipeline::new(&s);
    for c in 0..(N as i64 / 1000) {
        bulk.chunk(c * 1000..(c + 1) * 1000, |o| usize::from(!lost(o)))
            .await;
    }

    let proxy = Proxy::start(mysql_addr()).await;
    proxy.set(Mode::Blackhole);
    let listen = format!("127.0.0.1:{}", free_port());
    let addr: std::net::SocketAddr = listen.parse().expect("addr");
    let spec = AuditSpec {
        listen: &listen,
        ..s.spec("offset_columns", "1s", "500ms")
    };
    let toml = via_proxy(&config_toml(&spec), proxy.addr).replace(
        "batch_size = 100",
        &format!("batch_size = 100\nmax_pending = {MAX_PENDING}"),
    );
    let cfg = s.state.path().join("gap-auditor.toml");
    std::fs::write(&cfg, toml).expect("config");
    let mut daemon = Daemon::spawn(
        &cfg,
        vec![("GAP_AUDITOR_LOG", "info".into())],
        s.state.path().join("auditor.log"),
    );
    let pid = daemon.pid();
    let labels = [("topic", topic.as_str())];
    let gauge = |t: &str, name: &str| sample(t, name, &labels).unwrap_or(-1.0) as i64;

    // It fills up to max_pending and pauses.
    let text = daemon
        .wait_until(90, || async {
            let t = scrape(addr).await.ok_or("no /metrics yet")?;
            let pending = gauge(&t, "gap_auditor_records_pending");
            let (code, status) = try_http_get(addr, "/api/status").await.ok_or("no status")?;
            if pending >= MAX_PENDING && code == 200 && status.contains("\"paused\":true") {
                Ok(t)
            } else {
                Err(format!("pending {pending}, status {status}"))
            }
        })
        .await;
    let consumed_at_pause = gauge(&text, "gap_auditor_consumed_offset");
    assert_eq!(
        sample(&text, "gap_auditor_sink_up", &[]),
        Some(0.0),
        "sink_up while it never answers"
    );
    assert_eq!(try_http_get(addr, "/readyz").await.map(|r| r.0), Some(503));

    // Paused for 30 s: memory, consumption and pending stay put, nothing is declared lost.
    let mut rss = Vec::new();
    let mut peak_pending = 0;
    for _ in 0..30 {
        rss.push(rss_kib(pid).expect("VmRSS of the daemon"));
        let t = scrape(addr).await.expect("/metrics while paused");
        peak_pending = peak_pending.max(gauge(&t, "gap_auditor_records_pending"));
        assert_eq!(
            gauge(&t, "gap_auditor_consumed_offset"),
            consumed_at_pause,
            "consumption paused"
        );
        assert_eq!(
            sample(&t, "gap_auditor_records_lost_total", &labels).unwrap_or(0.0),
            0.0,
            "an unanswering sink is not loss"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (min, max) = (
        *rss.iter().min().expect("samples"),
        *rss.iter().max().expect("samples"),
    );
    let held = proxy.accepted();

    // The sink comes back: the rest is consumed and decided.
    proxy.set(Mode::Pass);
    let back = Instant::now();
    let confirmed_all = (N as u64 - missing(&expected)) as f64;
    daemon
        .wait_until(120, || async {
            let t = scrape(addr).await.ok_or("no /metrics")?;
            let confirmed =
                sample(&t, "gap_auditor_records_confirmed_total", &labels).unwrap_or(0.0);
            let pending = gauge(&t, "gap_auditor_records_pending");
            if confirmed == confirmed_all && pending == 0 {
                Ok(())
            } else {
                Err(format!(
                    "confirmed {confirmed}/{confirmed_all}, pending {pending}"
                ))
            }
        })
        .await;
    let drained = back.elapsed();
    let t = scrape(addr).await.expect("/metrics");
    let consumed = sample(&t, "gap_auditor_records_consumed_total", &labels).unwrap_or(0.0);
    let reported_lost = sample(&t, "gap_auditor_records_lost_total", &labels).unwrap_or(0.0);
    let (_, body) = http_get(addr, "/api/gaps?state=all").await;
    let gaps: Vec<serde_json::Value> = serde_json::from_str(&body).expect("gaps json");
    let reported = gap_tuples(&gaps);
    daemon.stop();
    record(
        "sink_never_answers_bounded_memory",
        1,
        1,
        &expected,
        &reported,
        reported_lost as u64,
        format!(
            "sink accepts and never replies ({held} connections held); consumption paused at \
             offset {consumed_at_pause} with records_pending peak {peak_pending} (max_pending \
             {MAX_PENDING}) of {N}; VmRSS over 30 s paused: min {min} KiB, max {max} KiB \
             (+{} KiB); after the sink returned all {N} consumed ({consumed} counted), \
             drained in {:.1} s",
            max - min,
            drained.as_secs_f64()
        ),
    );
    assert_eq!(peak_pending, MAX_PENDING, "pending capped at max_pending");
    assert!(
        max - min < 16 * 1024,
        "RSS grew {} KiB while paused: {rss:?}",
        max - min
    );
    assert_eq!(
        consumed, N as f64,
        "every record consumed once, none dropped"
    );
    assert_eq!(reported, expected);
    assert_eq!(reported_lost as u64, missing(&expected));
}
