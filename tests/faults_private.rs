//! Fault scenarios that take a broker away (issue 8, item 3): they run against a PRIVATE
//! tansu on free ports, never the shared one other tests use at the same time. Two faults
//! in a row: the broker unreachable for a minute, then its process frozen (SIGSTOP) for
//! 30 s; after each the auditor must resume at its settled watermark, counting nothing twice.
//!
//! The broker is first made unavailable by a [`proxy::Proxy`] the test controls: tansu listens on
//! one port and advertises the proxy's, so every client connection (bootstrap and the
//! broker connections from metadata) goes through the proxy, which resets them all and
//! refuses new ones for the outage. Why not stop the tansu process: the prebuilt tansu
//! 0.6.0 the suite uses has memory storage only (`sqlite://` answers "feature libsql not
//! enabled", `file://` is not a storage engine), so a restarted broker would come back
//! EMPTY — a different fault (topic recreated, handled by the out-of-range path), not an
//! outage. To the auditor, refused connections for a minute are what a broker restart or a
//! network partition looks like.

#[path = "it/figures.rs"]
mod figures;
#[path = "it/faults/proxy.rs"]
mod proxy;
#[path = "it/support.rs"]
mod support;
#[path = "it/faults/tools.rs"]
mod tools;

use proxy::{Mode, Proxy};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::*;
use tools::*;

const OUTAGE: Duration = Duration::from_secs(60);
/// The second fault: the broker process frozen (SIGSTOP): connections stay open, nothing
/// answers, requests time out instead of being refused.
const FROZEN: Duration = Duration::from_secs(30);

/// A private tansu (memory storage) listening on `port` and advertising `advertised`;
/// killed when dropped.
struct Tansu(Child);

impl Tansu {
    async fn start(port: u16, advertised: u16, log: &std::path::Path) -> Tansu {
        let bin = std::env::var("GAP_AUDITOR_TEST_TANSU")
            .expect("GAP_AUDITOR_TEST_TANSU is not set: run scripts/test.sh");
        let log = std::fs::File::create(log).expect("tansu log");
        let child = Command::new(bin)
            .args([
                "broker",
                "--listener-url",
                &format!("tcp://127.0.0.1:{port}"),
                "--advertised-listener-url",
                &format!("tcp://127.0.0.1:{advertised}"),
                "--storage-engine",
                "memory://tansu/",
            ])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn tansu");
        let deadline = Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(Instant::now() < deadline, "private tansu did not listen");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Tansu(child)
    }
}

impl Tansu {
    /// Sends `signal` (STOP, CONT) to the broker process.
    fn signal(&self, signal: &str) {
        let st = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.0.id().to_string())
            .status()
            .expect("kill");
        assert!(st.success(), "kill -{signal} tansu");
    }
}

impl Drop for Tansu {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn kafka_up(a: &Auditor) -> i64 {
    a.metrics.kafka_up.with_label_values(&[&a.audit]).get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn broker_unavailable_or_frozen_resumes_at_the_settled_watermark() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let advertised = listener.local_addr().expect("addr").port();
    let port = free_port();
    let tansu = Tansu::start(port, advertised, &dir.path().join("tansu.log")).await;
    let proxy = Proxy::on(listener, format!("127.0.0.1:{port}").parse().expect("addr"));
    KAFKA_OVERRIDE
        .set(format!("127.0.0.1:{advertised}"))
        .expect("the only test of this binary sets the broker");

    let lost = |o: i64| o == 10 || (70..73).contains(&o) || o == 120;
    let expected = expected_gaps(100, lost);
    let s = Scenario::new("brokerout").await;
    let topic = &s.topic;
    let auditor = s.start_auditor("offset_columns", "1s", "500ms").await;
    let lines = dns_lines(0..150);
    s.send(&lines[..50]).await;
    s.pipeline()
        .records(50)
        .copies(move |o| usize::from(!lost(o)))
        .commit_every(10, Duration::ZERO)
        .run()
        .await;
    auditor
        .wait_for(60, "first 50 decided and settled", |a| {
            a.confirmed(topic, 0) == 49 && a.lost(topic, 0) == 1 && a.settled() == Some(50)
        })
        .await;
    assert_eq!(kafka_up(&auditor), 1);

    // The broker goes away for a minute.
    proxy.set(Mode::Refuse);
    let down = Instant::now();
    let mut noticed = None;
    while down.elapsed() < OUTAGE {
        assert!(
            !auditor.handle.is_finished(),
            "the auditor stopped during the outage"
        );
        assert_eq!(
            auditor.lost(topic, 0),
            1,
            "an outage produced missing records"
        );
        if noticed.is_none() && kafka_up(&auditor) == 0 {
            noticed = Some(down.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let noticed = noticed.expect("gap_auditor_kafka_up went to 0 during the outage");
    assert_eq!(kafka_up(&auditor), 0, "kafka_up 0 at the end of the outage");
    let (code, _) = auditor.get("/readyz").await;
    assert_eq!(code, 503, "not ready without the broker");
    let refused = proxy.accepted();

    proxy.set(Mode::Pass);
    let up = Instant::now();
    auditor
        .wait_for(60, "kafka_up 1 again", |a| kafka_up(a) == 1)
        .await;
    let reconnected = up.elapsed();
    s.send(&lines[50..100]).await;
    s.pipeline()
        .start_at(50)
        .records(50)
        .copies(move |o| usize::from(!lost(o)))
        .commit_every(10, Duration::ZERO)
        .run()
        .await;
    auditor
        .wait_for(90, "all 100 decided and settled", |a| {
            a.confirmed(topic, 0) == 96 && a.lost(topic, 0) == 4 && a.settled() == Some(100)
        })
        .await;
    let resumed = up.elapsed();
    // Nothing read twice was counted twice: every record consumed, confirmed or lost once.
    let consumed = auditor.consumed(topic, 0);
    let duplicated = auditor.duplicated(topic, 0);
    let reported = gap_tuples(&api_gaps(&auditor).await);
    let reported_lost = auditor.lost(topic, 0);
    let committed =
        group_committed_reaches(&s.auditor_group, topic, 100, Duration::from_secs(15)).await;
    record(
        "broker_unavailable_1m",
        1,
        1,
        &expected,
        &reported,
        reported_lost,
        format!(
            "private tansu unreachable {:.0} s ({refused} connections reset/refused): no crash, \
             kafka_up 0 after {:.1} s, /readyz 503; kafka_up 1 again {:.1} s after, all 100 \
             decided {:.1} s after; records_consumed_total {consumed} (100 produced), \
             duplicates {duplicated}; group committed {committed:?} == settled 100",
            OUTAGE.as_secs_f64(),
            noticed.as_secs_f64(),
            reconnected.as_secs_f64(),
            resumed.as_secs_f64()
        ),
    );
    assert_eq!(consumed, 100, "no record re-counted after the outage");
    assert_eq!(duplicated, 0);
    assert_eq!(committed, Some(100));
    assert_eq!(reported, expected);

    // Second fault: the broker process frozen for 30 s, then resumed.
    let expected = expected_gaps(150, lost);
    tansu.signal("STOP");
    let frozen = Instant::now();
    let mut noticed = None;
    while frozen.elapsed() < FROZEN {
        assert!(
            !auditor.handle.is_finished(),
            "the auditor stopped while the broker hung"
        );
        assert_eq!(
            auditor.lost(topic, 0),
            4,
            "a hung broker produced missing records"
        );
        if noticed.is_none() && kafka_up(&auditor) == 0 {
            noticed = Some(frozen.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tansu.signal("CONT");
    let thawed = Instant::now();
    let noticed = noticed.expect("gap_auditor_kafka_up went to 0 while the broker hung");
    auditor
        .wait_for(90, "kafka_up 1 after the freeze", |a| kafka_up(a) == 1)
        .await;
    let reconnected = thawed.elapsed();
    s.send(&lines[100..]).await;
    s.pipeline()
        .start_at(100)
        .records(50)
        .copies(move |o| usize::from(!lost(o)))
        .commit_every(10, Duration::ZERO)
        .run()
        .await;
    auditor
        .wait_for(90, "all 150 decided and settled", |a| {
            a.confirmed(topic, 0) == 145 && a.lost(topic, 0) == 5 && a.settled() == Some(150)
        })
        .await;
    let resumed = thawed.elapsed();
    let consumed = auditor.consumed(topic, 0);
    let duplicated = auditor.duplicated(topic, 0);
    let reported = gap_tuples(&api_gaps(&auditor).await);
    let reported_lost = auditor.lost(topic, 0);
    auditor.stop().await;
    let committed = group_committed(&s.auditor_group, topic);
    record(
        "broker_frozen_30s",
        1,
        1,
        &expected,
        &reported,
        reported_lost,
        format!(
            "private tansu frozen (SIGSTOP) {:.0} s, connections open and silent: no crash, \
             kafka_up 0 after {:.1} s; after SIGCONT kafka_up 1 again {:.1} s after, all 150 \
             decided {:.1} s after; records_consumed_total {consumed} (150 produced), \
             duplicates {duplicated}; group committed {committed:?} == settled 150",
            FROZEN.as_secs_f64(),
            noticed.as_secs_f64(),
            reconnected.as_secs_f64(),
            resumed.as_secs_f64()
        ),
    );
    assert_eq!(consumed, 150, "no record re-counted after the freeze");
    assert_eq!(duplicated, 0);
    assert_eq!(committed, Some(150));
    assert_eq!(reported, expected);
}
