//! Item 2: the sink goes away for 2 minutes, and a sink that answers slowly (2× the verify
//! interval). The faults are injected by a [`Proxy`] between the auditor and the shared
//! MariaDB (the pipeline stand-in keeps writing straight to MariaDB, as a real pipeline
//! whose sink is fine while the auditor's path to it is not). Zero false losses at every
//! moment; `gap_auditor_sink_up` and `/readyz` say what happens; the backlog drains after;
//! the known losses are found, nothing else.

use super::proxy::{Mode, Proxy};
use super::*;
use crate::support::*;
use std::time::{Duration, Instant};

/// The outage (default 2 minutes); `GAP_AUDITOR_SINK_OUTAGE_SECS` shortens it (scripts/test.sh
/// and CI; scripts/reliability.sh runs the full length; the figures say which ran).
fn outage() -> Duration {
    Duration::from_secs(
        std::env::var("GAP_AUDITOR_SINK_OUTAGE_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(120),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sink_outage_of_two_minutes_is_unknown_not_missing() {
    let outage = outage();
    const N: usize = 300;
    let lost = |o: i64| (150..155).contains(&o) || o == 260;
    let expected = expected_gaps(N as i64, lost);
    let s = Scenario::new("sinkout").await;
    let topic = &s.topic;
    let proxy = Proxy::start(mysql_addr()).await;
    let toml = via_proxy(
        &config_toml(&s.spec("offset_columns", "1s", "500ms")),
        proxy.addr,
    );
    let auditor = Auditor::start(&toml).await;
    let lines = dns_lines(0..N);
    s.send(&lines[..100]).await;
    s.pipeline()
        .records(100)
        .commit_every(20, Duration::ZERO)
        .run()
        .await;
    auditor
        .wait_for(60, "first 100 confirmed, sink up", |a| {
            a.confirmed(topic, 0) == 100 && a.sink_up() == 1
        })
        .await;
    assert_eq!(auditor.get("/readyz").await.0, 200);

    // The sink goes down; records keep coming and the pipeline keeps writing (with two
    // real losses) during the outage.
    proxy.set(Mode::Refuse);
    let down_at = Instant::now();
    s.send(&lines[100..]).await;
    s.pipeline()
        .start_at(100)
        .records(N - 100)
        .copies(move |o| usize::from(!lost(o)))
        .commit_every(20, Duration::ZERO)
        .run()
        .await;
    auditor
        .wait_for(30, "sink_up 0", |a| {
            assert_eq!(a.lost(topic, 0), 0, "a down sink produced missing records");
            a.sink_up() == 0
        })
        .await;
    let noticed = down_at.elapsed();
    let (code, body) = auditor.get("/readyz").await;
    assert_eq!(code, 503, "not ready while the sink is down: {body}");
    let mut checks = 0u64;
    let mut max_pending = 0i64;
    let pending = |a: &Auditor| {
        a.metrics
            .records_pending
            .with_label_values(&["dns_logs", topic, "0"])
            .get()
    };
    while down_at.elapsed() < outage {
        assert_eq!(
            auditor.lost(topic, 0),
            0,
            "a down sink produced missing records"
        );
        assert_eq!(auditor.sink_up(), 0, "sink_up while the sink is down");
        assert_eq!(auditor.confirmed(topic, 0), 100);
        assert!(auditor.stored_gaps().is_empty());
        max_pending = max_pending.max(pending(&auditor));
        if checks.is_multiple_of(50) {
            let (code, _) = auditor.get("/readyz").await;
            assert_eq!(code, 503, "/readyz while the sink is down");
        }
        checks += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let refused = proxy.accepted();
    proxy.set(Mode::Pass);
    let up_at = Instant::now();
    auditor
        .wait_for(60, "sink_up 1 again", |a| a.sink_up() == 1)
        .await;
    let recovered = up_at.elapsed();
    let confirmed_all = (N - missing(&expected) as usize) as u64;
    auditor
        .wait_for(120, "backlog drained", |a| {
            a.confirmed(topic, 0) == confirmed_all && pending(a) == 0
        })
        .await;
    let drained = up_at.elapsed();
    assert_eq!(auditor.get("/readyz").await.0, 200);
    let reported = gap_tuples(&api_gaps(&auditor).await);
    let reported_lost = auditor.lost(topic, 0);
    record(
        "sink_outage_2m",
        1,
        1,
        &expected,
        &reported,
        reported_lost,
        format!(
            "sink unreachable {:.0} s (proxy resets every connection; {refused} connections \
             refused); sink_up 0 after {:.1} s, /readyz 503 throughout, 0 lost at {checks} \
             checks during the outage; pending peaked at {max_pending}; sink_up 1 again {:.1} s \
             and backlog drained {:.1} s after it came back",
            outage.as_secs_f64(),
            noticed.as_secs_f64(),
            recovered.as_secs_f64(),
            drained.as_secs_f64()
        ),
    );
    assert_eq!(reported, expected);
    assert_eq!(reported_lost, missing(&expected));
    auditor.stop().await;
}

/// Every reply of the sink arrives 1 s late: twice the 500 ms verify interval. Slow is not
/// down and not loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_sink_is_not_loss() {
    const N: usize = 200;
    const DELAY: Duration = Duration::from_secs(1);
    let lost = |o: i64| (30..33).contains(&o) || (120..130).contains(&o);
    let expected = expected_gaps(N as i64, lost);
    let s = Scenario::new("sinkslow").await;
    let topic = &s.topic;
    let proxy = Proxy::start(mysql_addr()).await;
    proxy.set(Mode::Delay(DELAY));
    // query_timeout above the handshake's few delayed round trips.
    let toml = via_proxy(
        &config_toml(&s.spec("offset_columns", "1s", "500ms")),
        proxy.addr,
    )
    .replace("query_timeout = \"3s\"", "query_timeout = \"20s\"");
    let auditor = Auditor::start(&toml).await;
    // Warm up: ready (partition assigned, Kafka contact, the slow sink answered once).
    auditor
        .wait_for(60, "ready", |a| {
            a.sink_up() == 1 && a.status.not_ready_reasons(chrono::Utc::now()).is_empty()
        })
        .await;
    let t0 = Instant::now();
    s.send(&dns_lines(0..N)).await;
    let pipe = s
        .pipeline()
        .records(N)
        .copies(move |o| usize::from(!lost(o)))
        .commit_every(10, Duration::from_millis(200))
        .run();
    // While the pipeline runs: never a false loss, never a failed query, always ready (it
    // requires Kafka contact and a successful sink query within max(2 x verify_interval,
    // 10 s): slow is not down). The reasons it gave are kept for the report.
    let mut not_ready = 0;
    let mut probes = 0;
    let mut reasons = std::collections::BTreeSet::new();
    let watch = async {
        let until = Instant::now() + Duration::from_secs(8);
        while Instant::now() < until {
            let l = auditor.lost(topic, 0);
            assert!(l <= missing(&expected), "more lost than the truth: {l}");
            assert_eq!(auditor.sink_errors(), 0, "a slow sink is not a failing one");
            assert_eq!(auditor.sink_up(), 1, "a slow sink is up");
            let (code, body) = auditor.get("/readyz").await;
            if code != 200 {
                not_ready += 1;
                reasons.insert(body.trim().replace('\n', " "));
            }
            probes += 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    tokio::join!(pipe, watch);
    let confirmed_all = (N - missing(&expected) as usize) as u64;
    auditor
        .wait_for(90, "all decided", |a| {
            a.confirmed(topic, 0) == confirmed_all && a.lost(topic, 0) == missing(&expected)
        })
        .await;
    let took = t0.elapsed();
    assert_eq!(auditor.sink_up(), 1);
    assert_eq!(auditor.sink_errors(), 0);
    auditor
        .wait_for(30, "/readyz 200", |a| {
            a.status.not_ready_reasons(chrono::Utc::now()).is_empty()
        })
        .await;
    let h = auditor
        .metrics
        .sink_query_seconds
        .with_label_values(&["dns_logs"]);
    let (count, sum) = (h.get_sample_count(), h.get_sample_sum());
    let reported = gap_tuples(&api_gaps(&auditor).await);
    record(
        "sink_slow_2x_verify_interval",
        1,
        1,
        &expected,
        &reported,
        auditor.lost(topic, 0),
        format!(
            "every sink reply delayed {} ms (verify_interval 500 ms); {count} sink queries, \
             mean {:.2} s (about 3 delayed replies each); 0 sink query errors and sink_up 1 \
             throughout; /readyz 503 at {not_ready} of {probes} probes while records were due, \
             200 after; {N} records decided in {:.1} s; /readyz said: {reasons:?}",
            DELAY.as_millis(),
            sum / count.max(1) as f64,
            took.as_secs_f64()
        ),
    );
    assert_eq!(not_ready, 0, "a slow sink made /readyz fail: {reasons:?}");
    assert_eq!(reported, expected);
    auditor.stop().await;
}
