//! Issue 14, partition-local backpressure: one partition's pipeline stops committing while
//! the others keep going. The real binary, the shared Kafka broker and MariaDB.
//!
//! The due rule keeps the stalled partition's records undecided (its pipeline never
//! commits past them), so they pile up towards `max_pending`. The old tailing thread paused
//! EVERY assigned partition once the sum of undecided records reached `max_pending`: the
//! stalled partition alone filled the budget, the healthy partitions were no longer read,
//! their losses went undetected for as long as the stall lasted, and, had it outlasted
//! retention, their unread ranges would have become unverifiable instead of audited. This
//! test fails on that code at the first status sample showing a healthy partition paused
//! (and, without that check, by not detecting their losses at all).
//!
//! Here: 4 partitions, `max_pending` 2000. Partition 0 receives 3000 records its pipeline
//! never commits; it must be paused alone, holding about half the budget (the rule of
//! `kafka::tail::Flow`). Meanwhile partitions 1–3 receive three waves of records with known
//! losses, which their pipeline writes and commits; each loss must be reported within
//! `grace` + 2 verify rounds of the commit, no healthy partition may ever show `paused`, and
//! the total undecided count must stay within `max_pending`. Then partition 0's pipeline
//! catches up (with losses of its own): partition 0 resumes and drains, every record is
//! consumed exactly once, and the gap set equals the truth.
//!
//! Broker behaviour relied on: produced offsets are checked by sending the last record of
//! each range as its own batch (needed on tansu, the broker before Apache Kafka, whose end
//! offsets were right only after a one-record batch; Kafka's are exact either way).

use super::*;
use crate::support::*;
use mysql_async::prelude::Queryable;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset as KOffset, TopicPartitionList};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 4;
const STALLED: i32 = 0;
const MAX_PENDING: i64 = 2000;
/// Records every partition holds before the stall, written and committed.
const HEAD: i64 = 10;
/// Records produced to the stalled partition: more than `max_pending`.
const STALL: i64 = 3000;
/// Waves of healthy traffic during the stall, records per partition per wave.
const WAVES: i64 = 3;
const WAVE: i64 = 200;
const GRACE: Duration = Duration::from_secs(2);
const VERIFY: Duration = Duration::from_millis(500);
/// Scraping every 50 ms and the sink query itself, on top of grace + 2 rounds.
const MEASURING: Duration = Duration::from_millis(300);

/// Offsets the pipeline loses: two gaps per healthy partition per wave, a run and a single
/// one in the stalled partition.
fn lost(p: i32, o: i64) -> bool {
    if p == STALLED {
        return (1500..1505).contains(&o) || o == HEAD + STALL - 2;
    }
    let i = o - HEAD;
    i >= 0 && (i % WAVE == 7 + p as i64 || (120..123).contains(&(i % WAVE)))
}

/// Gap tuples (partition, first, last, missing) that `lost` implies on `p` over `range`.
fn truth(p: i32, range: Range<i64>) -> Vec<(i64, i64, i64, i64)> {
    let mut out = Vec::new();
    let mut o = range.start;
    while o < range.end {
        if lost(p, o) {
            let first = o;
            while o < range.end && lost(p, o) {
                o += 1;
            }
            out.push((p as i64, first, o - 1, o - first));
        } else {
            o += 1;
        }
    }
    out
}

/// The pipeline of every partition: writes the rows of a range (minus `lost`) and commits
/// its end for that partition, like a checkpoint.
struct Pipelines {
    db: Db,
    table: String,
    topic: String,
    consumer: BaseConsumer,
}

impl Pipelines {
    fn new(s: &Scenario) -> Self {
        let consumer: BaseConsumer = group_client(&s.pipeline_group)
            .create()
            .expect("pipeline consumer");
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition_offset(&s.topic, p, KOffset::Beginning)
                .expect("tpl");
        }
        consumer.assign(&tpl).expect("assign");
        Self {
            db: s.db.clone(),
            table: s.table.clone(),
            topic: s.topic.clone(),
            consumer,
        }
    }

    async fn write(&self, p: i32, range: Range<i64>) {
        let rows: Vec<i64> = range.filter(|o| !lost(p, *o)).collect();
        let mut c = self.db.pool.get_conn().await.expect("mysql conn");
        for part in rows.chunks(1000) {
            let mut params: Vec<mysql_async::Value> = Vec::with_capacity(part.len() * 11);
            for &o in part {
                let line = dns_line(o as usize);
                params.extend(line.split('|').map(mysql_async::Value::from));
                params.push(p.into());
                params.push(o.into());
            }
            let marks = vec!["(?,?,?,?,?,?,?,?,?,?,?)"; part.len()].join(",");
            c.exec_drop(
                format!(
                    "INSERT INTO `{}` (client_ip, domain, time, target_ip, rcode, query_type, authority_record, add_msg, dns_ip, `partition`, `offset`) VALUES {marks}",
                    self.table
                ),
                mysql_async::Params::Positional(params),
            )
            .await
            .expect("bulk insert");
        }
    }

    fn commit(&self, p: i32, offset: i64) {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, p, KOffset::Offset(offset))
            .expect("tpl");
        commit_retrying(&self.consumer, &tpl, "pipeline commit");
    }
}

/// One look at the daemon: per partition (paused, pending) from /api/status, and
/// /metrics.
struct Look {
    paused: BTreeMap<i32, bool>,
    pending: BTreeMap<i32, i64>,
    metrics: String,
}

async fn look(addr: SocketAddr) -> Result<Look, String> {
    let metrics = scrape(addr).await.ok_or("no /metrics")?;
    let (code, body) = try_http_get(addr, "/api/status")
        .await
        .ok_or("no /api/status")?;
    if code != 200 {
        return Err(format!("/api/status {code}"));
    }
    let v: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    let (mut paused, mut pending) = (BTreeMap::new(), BTreeMap::new());
    for part in v["audits"][0]["partitions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let p = part["partition"].as_i64().ok_or("partition")? as i32;
        paused.insert(p, part["paused"].as_bool().ok_or("paused")?);
        pending.insert(p, part["pending"].as_i64().ok_or("pending")?);
    }
    Ok(Look {
        paused,
        pending,
        metrics,
    })
}

fn counter(text: &str, name: &str, topic: &str, p: i32) -> i64 {
    let p = p.to_string();
    sample(text, name, &[("topic", topic), ("partition", &p)]).unwrap_or(0.0) as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stalled_partition_pauses_alone_and_losses_elsewhere_are_still_found() {
    let s = Scenario::with_partitions("stalled", PARTITIONS).await;
    let topic = s.topic.clone();
    let pipelines = Pipelines::new(&s);
    // Every partition starts written and committed: the pipeline group has commits on all.
    for p in 0..PARTITIONS {
        produce_range(&topic, p, 0..HEAD).await;
        pipelines.write(p, 0..HEAD).await;
        pipelines.commit(p, HEAD);
    }

    let listen = format!("127.0.0.1:{}", free_port());
    let addr: SocketAddr = listen.parse().expect("addr");
    let (grace, verify) = (
        format!("{}ms", GRACE.as_millis()),
        format!("{}ms", VERIFY.as_millis()),
    );
    let spec = AuditSpec {
        listen: &listen,
        ..s.spec("offset_columns", &grace, &verify)
    };
    let toml = config_toml(&spec).replace(
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
    daemon
        .wait_until(90, || async {
            let l = look(addr).await?;
            let settled = (0..PARTITIONS).all(|p| {
                counter(&l.metrics, "gap_auditor_records_confirmed_total", &topic, p) == HEAD
            });
            settled
                .then_some(())
                .ok_or_else(|| "head of every partition not confirmed yet".to_string())
        })
        .await;

    // The stall: partition 0 gets more records than max_pending, its pipeline commits none.
    let stall_started = Instant::now();
    produce_range(&topic, STALLED, HEAD..HEAD + STALL).await;
    let at_pause = daemon
        .wait_until(60, || async {
            let l = look(addr).await?;
            match (l.paused.get(&STALLED), l.pending.get(&STALLED)) {
                (Some(true), Some(&n)) if n > 0 => Ok(l),
                _ => Err(format!(
                    "partition 0 not paused: {:?} {:?}",
                    l.paused, l.pending
                )),
            }
        })
        .await;
    let consumed_at_pause = counter(
        &at_pause.metrics,
        "gap_auditor_records_consumed_total",
        &topic,
        STALLED,
    );
    let pending_at_pause = at_pause.pending[&STALLED];
    let paused_after = stall_started.elapsed();

    // Healthy traffic during the stall.
    let mut samples = 0u32;
    let mut healthy_paused = Vec::new();
    let mut stalled_unpaused = 0u32;
    let (mut peak_total, mut peak_stalled) = (0i64, 0i64);
    let mut latencies: Vec<Duration> = Vec::new();
    let mut expected_lost: BTreeMap<i32, i64> = BTreeMap::new();
    for w in 0..WAVES {
        let range = HEAD + w * WAVE..HEAD + (w + 1) * WAVE;
        for p in 1..PARTITIONS {
            produce_range(&topic, p, range.clone()).await;
        }
        let mut committed_at = BTreeMap::new();
        for p in 1..PARTITIONS {
            pipelines.write(p, range.clone()).await;
            pipelines.commit(p, range.end);
            committed_at.insert(p, Instant::now());
            *expected_lost.entry(p).or_default() +=
                range.clone().filter(|o| lost(p, *o)).count() as i64;
        }
        let mut found: BTreeMap<i32, Duration> = BTreeMap::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while found.len() < (PARTITIONS - 1) as usize {
            let l = match look(addr).await {
                Ok(l) => l,
                Err(e) => panic!("daemon gone during the stall: {e}"),
            };
            samples += 1;
            for p in 1..PARTITIONS {
                if l.paused.get(&p) == Some(&true) {
                    healthy_paused.push((p, l.pending.get(&p).copied()));
                }
                let got = counter(&l.metrics, "gap_auditor_records_lost_total", &topic, p);
                assert!(
                    got <= expected_lost[&p],
                    "false loss on partition {p}: {got}"
                );
                if got == expected_lost[&p] && !found.contains_key(&p) {
                    found.insert(p, committed_at[&p].elapsed());
                }
            }
            if l.paused.get(&STALLED) != Some(&true) {
                stalled_unpaused += 1;
            }
            peak_total = peak_total.max(l.pending.values().sum());
            peak_stalled = peak_stalled.max(l.pending.get(&STALLED).copied().unwrap_or(0));
            assert!(
                healthy_paused.is_empty(),
                "healthy partitions paused by partition 0's backlog (partition, pending): \
                 {healthy_paused:?}; status pending {:?}",
                l.pending
            );
            assert!(
                Instant::now() < deadline,
                "wave {w}: losses found on {found:?} only, 30 s after the commits; lost \
                 expected {expected_lost:?}; log:\n{}",
                daemon.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        latencies.extend(found.values().copied());
    }
    let l = look(addr).await.expect("status after the waves");
    let consumed_stalled = counter(
        &l.metrics,
        "gap_auditor_records_consumed_total",
        &topic,
        STALLED,
    );
    let stalled_lost = counter(
        &l.metrics,
        "gap_auditor_records_lost_total",
        &topic,
        STALLED,
    );
    let stall = stall_started.elapsed();

    // Partition 0's pipeline catches up: it resumes and drains.
    let end0 = HEAD + STALL;
    let end = HEAD + WAVES * WAVE;
    pipelines.write(STALLED, HEAD..end0).await;
    pipelines.commit(STALLED, end0);
    let caught_up = Instant::now();
    let all_lost: i64 = (HEAD..end0).filter(|o| lost(STALLED, *o)).count() as i64
        + expected_lost.values().sum::<i64>();
    let last = daemon
        .wait_until(120, || async {
            let l = look(addr).await?;
            let consumed: Vec<i64> = (0..PARTITIONS)
                .map(|p| counter(&l.metrics, "gap_auditor_records_consumed_total", &topic, p))
                .collect();
            let lost_now: i64 = (0..PARTITIONS)
                .map(|p| counter(&l.metrics, "gap_auditor_records_lost_total", &topic, p))
                .sum();
            let pending: i64 = l.pending.values().sum();
            let idle = l.paused.values().all(|p| !p);
            if consumed == [end0, end, end, end] && lost_now == all_lost && pending == 0 && idle {
                Ok(l)
            } else {
                Err(format!(
                    "consumed {consumed:?}, lost {lost_now}/{all_lost}, pending {pending}, paused {:?}",
                    l.paused
                ))
            }
        })
        .await;
    let drained = caught_up.elapsed();
    let consumed: Vec<i64> = (0..PARTITIONS)
        .map(|p| {
            counter(
                &last.metrics,
                "gap_auditor_records_consumed_total",
                &topic,
                p,
            )
        })
        .collect();
    let reported_lost: i64 = (0..PARTITIONS)
        .map(|p| counter(&last.metrics, "gap_auditor_records_lost_total", &topic, p))
        .sum();
    let (_, body) = http_get(addr, "/api/gaps?state=all").await;
    let gaps: Vec<serde_json::Value> = serde_json::from_str(&body).expect("gaps json");
    let reported = gap_tuples(&gaps);
    let mut expected = truth(STALLED, 0..end0);
    for p in 1..PARTITIONS {
        expected.extend(truth(p, 0..end));
    }
    expected.sort();
    daemon.stop();

    let bound = GRACE + VERIFY * 2;
    let worst = latencies.iter().max().copied().unwrap_or_default();
    let best = latencies.iter().min().copied().unwrap_or_default();
    record(
        "stalled_partition_backpressure",
        1,
        1,
        &expected,
        &reported,
        reported_lost as u64,
        format!(
            "{PARTITIONS} partitions, max_pending {MAX_PENDING}, grace {} s, verify_interval \
             {} ms; partition 0's pipeline stopped committing at offset {HEAD} and {STALL} \
             records arrived: partition 0 alone paused after {:.1} s at {consumed_at_pause} \
             consumed, {pending_at_pause} pending (peak {peak_stalled}); during the {:.1} s \
             stall {WAVES} waves of {WAVE} records on each of partitions 1-3, the losses of \
             all {} (wave, partition) pairs reported {:.2}-{:.2} s after the pipeline's \
             commit (bound grace + 2 rounds = {:.1} s), healthy partitions paused in 0 of \
             {samples} status samples (partition \
             0 paused in {} of them), total pending peak {peak_total}, partition 0's losses \
             during the stall {stalled_lost} (consumed {consumed_stalled}); after the \
             pipeline caught up partition 0 drained in {drained:.1?}, consumed {consumed:?} \
             = produced, each record once",
            GRACE.as_secs(),
            VERIFY.as_millis(),
            paused_after.as_secs_f64(),
            stall.as_secs_f64(),
            latencies.len(),
            best.as_secs_f64(),
            worst.as_secs_f64(),
            bound.as_secs_f64(),
            samples - stalled_unpaused,
        ),
    );
    assert!(
        worst <= bound + MEASURING,
        "a loss on a healthy partition took {worst:?} to report (bound {bound:?}): {latencies:?}"
    );
    assert!(
        peak_stalled <= MAX_PENDING / 2,
        "partition 0 held {peak_stalled} pending, past max_pending / 2"
    );
    assert!(
        peak_total <= MAX_PENDING,
        "pending {peak_total} past max_pending"
    );
    assert_eq!(stalled_lost, 0, "a stalled pipeline is lag, not loss");
    assert_eq!(
        consumed,
        [end0, end, end, end],
        "every record consumed once"
    );
    assert_eq!(reported, expected);
    assert_eq!(reported_lost, all_lost);
}
