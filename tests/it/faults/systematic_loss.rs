//! Issue 14: the bad day — a pipeline that drops every second record. 1,000,000 records on
//! the real broker, the 500,000 even offsets written to the real MariaDB, the real binary
//! auditing with offset_columns. The report must be exact (500,000 one-record gaps, read
//! back from the store), the peak resident memory bounded, and once everything is decided
//! an idle round must cost at most 2 sink queries per partition and write O(1) bytes.
//!
//! What the old code did: every idle round re-checked every missing run (256 per query:
//! ~1,950 queries a round at 500,000 gaps), rewrote the partition's whole ledger JSON
//! (tens of MB) whenever a round decided anything, walked every gap for the gauges, and
//! logged one ERROR line per gap.

use super::*;
use crate::support::*;
use std::time::{Duration, Instant};

/// Records produced; every odd offset is lost. `GAP_AUDITOR_SYSTEMATIC_N` shrinks it for a
/// quick local run (the figures say which size ran).
fn n() -> i64 {
    std::env::var("GAP_AUDITOR_SYSTEMATIC_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// Peak resident memory (VmHWM of /proc/PID/status), KiB.
fn peak_rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Bytes the process passed to write(2) and friends so far (`wchar` of /proc/PID/io):
/// store writes, logs, sockets — everything it writes.
fn written_bytes(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("wchar:"))
        .and_then(|v| v.trim().parse().ok())
}

const PEAK_RSS_BOUND_KIB: u64 = 256 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_second_record_lost_stays_exact_bounded_and_cheap_when_idle() {
    let n = n();
    let lost = |o: i64| o % 2 == 1;
    let s = Scenario::new("systematic").await;
    let topic = s.topic.clone();
    let t0 = Instant::now();
    produce_bulk(&topic, n as usize).await;
    let bulk = BulkPipeline::new(&s);
    let chunk = 10_000;
    let mut c = 0;
    while c < n {
        let end = (c + chunk).min(n);
        bulk.chunk(c..end, |o| usize::from(!lost(o))).await;
        c = end;
    }
    let setup = t0.elapsed();

    let listen = format!("127.0.0.1:{}", free_port());
    let addr: std::net::SocketAddr = listen.parse().expect("addr");
    let spec = AuditSpec {
        listen: &listen,
        ..s.spec("offset_columns", "1s", "1s")
    };
    let toml = config_toml(&spec).replace("batch_size = 100", "batch_size = 1000");
    let cfg = s.state.path().join("gap-auditor.toml");
    std::fs::write(&cfg, toml).expect("config");
    let log = s.state.path().join("auditor.log");
    let mut daemon = Daemon::spawn(&cfg, vec![("GAP_AUDITOR_LOG", "info".into())], log.clone());
    let pid = daemon.pid();
    let labels = [("topic", topic.as_str())];
    let want_lost = (n / 2) as f64;

    let started = Instant::now();
    daemon
        .wait_until(900, || async {
            let t = scrape(addr).await.ok_or("no /metrics yet")?;
            let lost = sample(&t, "gap_auditor_records_lost_total", &labels).unwrap_or(0.0);
            let settled = sample(&t, "gap_auditor_settled_offset", &labels).unwrap_or(0.0);
            if lost == want_lost && settled == n as f64 {
                Ok(())
            } else {
                Err(format!("lost {lost}/{want_lost}, settled {settled}/{n}"))
            }
        })
        .await;
    let decided_in = started.elapsed();
    // A few rounds for the first probe and its look to settle the baseline.
    tokio::time::sleep(Duration::from_secs(5)).await;

    // Idle: nothing arrives, nothing is due. Ten rounds of verify_interval = 1 s.
    let t = scrape(addr).await.expect("/metrics");
    let queries =
        |t: &str| sample(t, "gap_auditor_sink_queries_total", &[("result", "ok")]).unwrap_or(0.0);
    let (q0, w0) = (queries(&t), written_bytes(pid).expect("/proc/PID/io"));
    let idle = Duration::from_secs(10);
    tokio::time::sleep(idle).await;
    let t = scrape(addr).await.expect("/metrics");
    let (q1, w1) = (queries(&t), written_bytes(pid).expect("/proc/PID/io"));
    let rounds = idle.as_secs_f64(); // verify_interval = 1 s
    let per_round = (q1 - q0) / rounds;
    let bytes_per_round = (w1 - w0) as f64 / rounds;
    let peak = peak_rss_kib(pid).expect("VmHWM of the daemon");
    let idle_rss = rss_kib(pid).expect("VmRSS of the daemon");
    let open = sample(&t, "gap_auditor_gaps_open", &labels).unwrap_or(0.0);
    let reported_lost = sample(&t, "gap_auditor_records_lost_total", &labels).unwrap_or(0.0);
    let error_lines = std::fs::read_to_string(&log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("ERROR"))
        .count();
    daemon.stop();

    // The report, read from the store (500,000 gaps: not through /api/gaps).
    let db = rusqlite::Connection::open_with_flags(
        s.state.path().join("gaps.sqlite"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("gap store");
    let mut stmt = db
        .prepare("SELECT partition, first_offset, last_offset, missing_records FROM gaps WHERE topic = ?1 ORDER BY first_offset")
        .expect("query");
    let reported: Vec<(i64, i64, i64, i64)> = stmt
        .query_map([&topic], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
        })
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("gap rows");
    let expected = expected_gaps(n, lost);
    record(
        "systematic_loss_every_second_record",
        1,
        1,
        &expected,
        &reported,
        reported_lost as u64,
        format!(
            "{n} records, every odd offset lost ({} gaps); produced and written in {:.0} s; all \
             decided {:.1} s after start; peak VmHWM {} MiB (bound {} MiB), VmRSS {} MiB when idle; idle: {per_round:.2} \
             sink queries per round (1 partition), {bytes_per_round:.0} bytes written per round; \
             {open} gaps open; {error_lines} ERROR log lines",
            n / 2,
            setup.as_secs_f64(),
            decided_in.as_secs_f64(),
            peak / 1024,
            PEAK_RSS_BOUND_KIB / 1024,
            idle_rss / 1024,
        ),
    );
    assert_eq!(reported.len(), expected.len(), "one gap per lost record");
    assert_eq!(reported, expected, "the report is exact");
    assert_eq!(reported_lost, want_lost);
    assert_eq!(open, want_lost, "every gap open");
    assert!(
        per_round <= 2.0,
        "an idle round cost {per_round} sink queries on 1 partition"
    );
    assert!(
        bytes_per_round < 64.0 * 1024.0,
        "an idle round wrote {bytes_per_round} bytes: state written per idle round must not grow with the gaps"
    );
    assert!(
        peak <= PEAK_RSS_BOUND_KIB,
        "peak RSS {} MiB over the bound",
        peak / 1024
    );
    // One summary line per round, not one line per gap.
    assert!(
        error_lines < 2_000,
        "{error_lines} ERROR lines for {} gaps",
        n / 2
    );
}
