//! Issue 14: a sink that accepts connections and never answers, for 5 minutes, while the
//! pipeline keeps writing and committing on 8 partitions. The real binary must stay in its
//! group (no rebalance), declare nothing missing, and resume its verdicts within 2 rounds
//! of the sink's return, finding exactly the losses made during the outage.
//!
//! What the old code did: a round asked every partition in turn, each question waiting out
//! `query_timeout` (8 × 3 s here), while the tail thread, its event channel full, stopped
//! polling Kafka; past `max.poll.interval.ms` (10 s here) the consumer left its group, and
//! the group churned for as long as the sink hung. Now the first failure ends the round's
//! sink work: one timeout per round.

use super::proxy::{Mode, Proxy};
use super::*;
use crate::support::*;
use rdkafka::Offset as KOffset;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::BaseConsumer;
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 8;

/// The outage; `GAP_AUDITOR_HUNG_SECS` shortens it for a quick local run (the figures say
/// which ran).
fn outage() -> Duration {
    Duration::from_secs(
        std::env::var("GAP_AUDITOR_HUNG_SECS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(300),
    )
}

/// Writes rows straight to MariaDB and commits for the pipeline group, per partition.
struct Writer<'a> {
    s: &'a Scenario,
    consumer: BaseConsumer,
    next: Vec<i64>,
}

impl<'a> Writer<'a> {
    fn new(s: &'a Scenario) -> Self {
        let consumer: BaseConsumer = group_client(&s.pipeline_group)
            .create()
            .expect("pipeline consumer");
        Self {
            s,
            consumer,
            next: vec![0; PARTITIONS as usize],
        }
    }

    /// Produces `n` records to every partition, writes those `lost` does not name, and
    /// commits past them.
    async fn step(&mut self, n: usize, lost: impl Fn(i32, i64) -> bool) {
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            let base = self.next[p as usize];
            let lines = dns_lines(base as usize..base as usize + n);
            let offsets = self.s.producer.send_all(p, &lines).await;
            for (line, o) in lines.iter().zip(&offsets) {
                if !lost(p, *o) {
                    self.s
                        .db
                        .insert_line(&self.s.table, line.as_bytes(), p, *o)
                        .await;
                }
            }
            self.next[p as usize] = offsets.last().map_or(base, |o| o + 1);
            tpl.add_partition_offset(&self.s.topic, p, KOffset::Offset(self.next[p as usize]))
                .expect("tpl");
        }
        commit_retrying(&self.consumer, &tpl, "pipeline commit");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sink_that_never_answers_costs_no_rebalance_and_no_false_loss() {
    let s = Scenario::with_partitions("hung", PARTITIONS).await;
    let topic = s.topic.clone();
    let proxy = Proxy::start(mysql_addr()).await;
    let listen = format!("127.0.0.1:{}", free_port());
    let addr: std::net::SocketAddr = listen.parse().expect("addr");
    let spec = AuditSpec {
        listen: &listen,
        ..s.spec("offset_columns", "1s", "1s")
    };
    let toml = format!(
        "{}\n[kafka.properties]\n\"max.poll.interval.ms\" = \"10000\"\n",
        via_proxy(&config_toml(&spec), proxy.addr)
    );
    let cfg = s.state.path().join("gap-auditor.toml");
    std::fs::write(&cfg, toml).expect("config");
    let log = s.state.path().join("auditor.log");
    let mut daemon = Daemon::spawn(&cfg, vec![("GAP_AUDITOR_LOG", "info".into())], log.clone());
    let total = |t: &str, name: &str| -> f64 {
        (0..PARTITIONS)
            .map(|p| {
                sample(
                    t,
                    name,
                    &[("topic", topic.as_str()), ("partition", &p.to_string())],
                )
                .unwrap_or(0.0)
            })
            .sum()
    };
    let mut w = Writer::new(&s);
    w.step(20, |_, _| false).await;
    daemon
        .wait_until(90, || async {
            let t = scrape(addr).await.ok_or("no /metrics")?;
            let c = total(&t, "gap_auditor_records_confirmed_total");
            if c == f64::from(PARTITIONS) * 20.0 {
                Ok(())
            } else {
                Err(format!("confirmed {c}"))
            }
        })
        .await;

    // The sink hangs; the pipeline keeps writing (with real losses) on every partition.
    proxy.set(Mode::Blackhole);
    let lost = |p: i32, o: i64| (p == 1 && (30..33).contains(&o)) || (p == 6 && o == 45);
    let hung_at = Instant::now();
    let mut false_loss = 0.0f64;
    let mut steps = 0;
    while hung_at.elapsed() < outage() {
        w.step(5, lost).await;
        steps += 1;
        if let Some(t) = scrape(addr).await {
            false_loss = false_loss.max(total(&t, "gap_auditor_records_lost_total"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let t = scrape(addr).await.expect("/metrics during the outage");
    let sink_up = sample(&t, "gap_auditor_sink_up", &[]);

    // The sink returns: verdicts within 2 rounds (a round may be waiting out a timeout).
    proxy.set(Mode::Pass);
    let back = Instant::now();
    let want_lost = 4.0;
    daemon
        .wait_until(120, || async {
            let t = scrape(addr).await.ok_or("no /metrics")?;
            let lost = total(&t, "gap_auditor_records_lost_total");
            if lost >= want_lost {
                Ok(())
            } else {
                Err(format!("lost {lost}"))
            }
        })
        .await;
    let resumed = back.elapsed();
    let produced = f64::from(PARTITIONS) * (20.0 + 5.0 * steps as f64);
    daemon
        .wait_until(120, || async {
            let t = scrape(addr).await.ok_or("no /metrics")?;
            let c = total(&t, "gap_auditor_records_confirmed_total");
            if c == produced - want_lost {
                Ok(())
            } else {
                Err(format!("confirmed {c}/{}", produced - want_lost))
            }
        })
        .await;
    let t = scrape(addr).await.expect("/metrics");
    let reported_lost = total(&t, "gap_auditor_records_lost_total");
    let (_, body) = http_get(addr, "/api/gaps?state=all").await;
    let gaps: Vec<serde_json::Value> = serde_json::from_str(&body).expect("gaps json");
    let reported = gap_tuples(&gaps);
    // Read before the stop, whose shutdown revokes every partition.
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    daemon.stop();
    let assigned = text.matches("partition assigned").count();
    let revoked = text.matches("partition revoked").count();
    let poll_exceeded = text.contains("max.poll.interval.ms") || text.contains("MAX_POLL_EXCEEDED");
    let expected = vec![(1, 30, 32, 3), (6, 45, 45, 1)];
    record(
        "sink_hangs_five_minutes",
        1,
        1,
        &expected,
        &reported,
        reported_lost as u64,
        format!(
            "sink accepts and never answers for {} s on {PARTITIONS} partitions while the \
             pipeline wrote {steps} steps (query_timeout 3 s, verify_interval 1 s, \
             max.poll.interval.ms 10 s); sink_up {sink_up:?} during it; {assigned} partition \
             assignments and {revoked} revocations before shutdown; max lost during the outage \
             {false_loss}; verdicts resumed {:.1} s after the sink returned",
            outage().as_secs(),
            resumed.as_secs_f64()
        ),
    );
    assert_eq!(false_loss, 0.0, "a hung sink produced missing records");
    assert_eq!(sink_up, Some(0.0), "sink_up while it hangs");
    assert_eq!(
        (assigned, revoked),
        (PARTITIONS as usize, 0),
        "the auditor's group rebalanced during the outage"
    );
    assert!(!poll_exceeded, "the consumer passed max.poll.interval.ms");
    // 2 rounds: one possibly stuck in a 3 s timeout when the sink returned, one that asks.
    assert!(
        resumed <= Duration::from_secs(2 * (1 + 3)),
        "verdicts resumed {resumed:?} after the sink returned"
    );
    assert_eq!(reported, expected);
    assert_eq!(reported_lost, want_lost);
}
