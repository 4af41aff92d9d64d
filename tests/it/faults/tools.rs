//! Helpers of the fault suite, shared with tests/faults_private.rs (included there by
//! `#[path]`): seeded randomness, ground truth vs verdict comparison and figures, metrics
//! scraping, RSS, bulk production and a bulk pipeline stand-in.

#![allow(dead_code)] // each test binary uses a part

use crate::support::*;
use mysql_async::prelude::Queryable;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset as KOffset, TopicPartitionList};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

/// A small seeded generator (SplitMix64): the fault moments of a run are reproducible from
/// the seed it prints. `GAP_AUDITOR_FAULT_SEED` replays a given run.
pub struct Rng {
    state: u64,
    /// The seed, for the figures' notes.
    pub seed: u64,
}

impl Rng {
    /// Seeded from `GAP_AUDITOR_FAULT_SEED`, else from the clock; prints the seed.
    pub fn from_env(what: &str) -> Rng {
        let seed = std::env::var("GAP_AUDITOR_FAULT_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(42)
            });
        eprintln!("{what}: GAP_AUDITOR_FAULT_SEED={seed}");
        Rng { state: seed, seed }
    }

    pub fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
}

/// The host:port of the shared MariaDB.
pub fn mysql_addr() -> SocketAddr {
    let url = mysql_url();
    let host = url
        .split_once('@')
        .and_then(|(_, rest)| rest.split_once('/'))
        .map(|(h, _)| h)
        .expect("host:port in GAP_AUDITOR_TEST_MYSQL");
    host.parse()
        .expect("GAP_AUDITOR_TEST_MYSQL host is an ip:port")
}

/// An auditor config whose sink goes through `proxy` instead of straight to MariaDB.
pub fn via_proxy(toml: &str, proxy: SocketAddr) -> String {
    toml.replace(&mysql_addr().to_string(), &proxy.to_string())
}

/// The gaps a loss predicate implies on partition 0 for offsets `0..n`: maximal runs of
/// lost offsets, as (partition, first, last, missing).
pub fn expected_gaps(n: i64, lost: impl Fn(i64) -> bool) -> Vec<(i64, i64, i64, i64)> {
    let mut out = Vec::new();
    let mut o = 0;
    while o < n {
        if lost(o) {
            let first = o;
            while o < n && lost(o) {
                o += 1;
            }
            out.push((0, first, o - 1, o - first));
        } else {
            o += 1;
        }
    }
    out
}

fn offsets(gaps: &[(i64, i64, i64, i64)]) -> BTreeSet<(i64, i64)> {
    gaps.iter()
        .flat_map(|&(p, first, last, _)| (first..=last).map(move |o| (p, o)))
        .collect()
}

/// (false positives, false negatives) in records: offsets reported lost that were not, and
/// lost offsets not reported.
pub fn misses(expected: &[(i64, i64, i64, i64)], reported: &[(i64, i64, i64, i64)]) -> (u64, u64) {
    let (e, r) = (offsets(expected), offsets(reported));
    (
        r.difference(&e).count() as u64,
        e.difference(&r).count() as u64,
    )
}

/// Sum of `missing` over gap tuples.
pub fn missing(gaps: &[(i64, i64, i64, i64)]) -> u64 {
    gaps.iter().map(|g| g.3 as u64).sum()
}

/// Records the figures of a scenario whose truth is `expected` and whose verdict is
/// `reported` (gap tuples) plus the lost counter.
pub fn record(
    scenario: &'static str,
    runs: u32,
    faults: u32,
    expected: &[(i64, i64, i64, i64)],
    reported: &[(i64, i64, i64, i64)],
    reported_lost: u64,
    notes: String,
) {
    let (false_positives, false_negatives) = misses(expected, reported);
    eprintln!("{scenario}: {notes}");
    crate::figures::record(&crate::figures::Figures {
        scenario,
        runs,
        faults,
        expected_lost: missing(expected),
        reported_lost,
        expected_gaps: expected.len() as u64,
        reported_gaps: reported.len() as u64,
        false_positives,
        false_negatives,
        notes,
    });
}

/// GET /metrics of a process on `addr`; `None` while it does not answer.
pub async fn scrape(addr: SocketAddr) -> Option<String> {
    try_http_get(addr, "/metrics")
        .await
        .filter(|(code, _)| *code == 200)
        .map(|(_, body)| body)
}

/// The value of the sample `name{…}` whose labels include every `label="value"` of
/// `labels`; `None` when absent.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .find_map(|l| l.rsplit(' ').next().and_then(|v| v.parse().ok()))
}

/// Resident set size of process `pid`, in KiB (VmRSS of /proc/PID/status).
pub fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Produces `n` DNS lines (values of [`dns_line`]) to partition 0 of a FRESH topic (see
/// [`produce_range`]).
pub async fn produce_bulk(topic: &str, n: usize) {
    assert!(n >= 2);
    produce_range(topic, 0, 0..n as i64).await;
}

/// Produces the lines of `range` to `partition` of a topic whose partition ends at
/// `range.start`, in multi-record batches (fast), then the last one alone: its acknowledged
/// offset proves the partition holds `range` in order (sending it alone was needed on tansu,
/// the broker before Apache Kafka, whose end offset was right only after a one-record batch;
/// see support.rs. Kafka's is exact either way).
pub async fn produce_range(topic: &str, partition: i32, range: Range<i64>) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .set("linger.ms", "20")
        .set("enable.idempotence", "true")
        .create()
        .expect("bulk producer");
    for o in range.start..range.end - 1 {
        let v = dns_line(o as usize);
        let mut rec = BaseRecord::<(), str>::to(topic)
            .partition(partition)
            .payload(&v);
        loop {
            match producer.send(rec) {
                Ok(()) => break,
                Err((_, r)) => {
                    rec = r;
                    producer.poll(Duration::from_millis(5));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
    let last = TestProducer::new(topic)
        .send(partition, dns_line(range.end as usize - 1).as_bytes())
        .await;
    assert_eq!(last, range.end - 1, "partition {partition} holds {range:?}");
}

/// The pipeline's side of a bulk run, without re-reading Kafka: writes the rows of
/// `offsets` (those `copies` says to write, that many times) to the scenario's table in
/// multi-row statements (prepared, like [`Db::insert_line`]), then commits `offsets.end`
/// for the pipeline group — a checkpoint over the chunk.
pub struct BulkPipeline {
    db: Db,
    table: String,
    topic: String,
    consumer: BaseConsumer,
}

impl BulkPipeline {
    pub fn new(s: &Scenario) -> Self {
        let consumer: BaseConsumer = group_client(&s.pipeline_group)
            .create()
            .expect("pipeline consumer");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&s.topic, 0, KOffset::Beginning)
            .expect("tpl");
        consumer.assign(&tpl).expect("assign");
        Self {
            db: s.db.clone(),
            table: s.table.clone(),
            topic: s.topic.clone(),
            consumer,
        }
    }

    /// Writes one chunk and commits its end.
    pub async fn chunk(&self, offsets: std::ops::Range<i64>, copies: impl Fn(i64) -> usize) {
        let rows: Vec<i64> = offsets
            .clone()
            .flat_map(|o| std::iter::repeat_n(o, copies(o)))
            .collect();
        let mut c = self.db.pool.get_conn().await.expect("mysql conn");
        for part in rows.chunks(2000) {
            let mut params: Vec<mysql_async::Value> = Vec::with_capacity(part.len() * 11);
            for &o in part {
                let line = dns_line(o as usize);
                let f: Vec<&str> = line.split('|').collect();
                params.extend(f.iter().map(|v| mysql_async::Value::from(*v)));
                params.push(0i32.into());
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
        drop(c);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, 0, KOffset::Offset(offsets.end))
            .expect("tpl");
        commit_retrying(&self.consumer, &tpl, "pipeline commit");
    }
}

/// The auditor group's committed offset on partition 0 of `topic` (read with the group's
/// id by a client that never joins it).
/// The group's committed offset once it reaches `want`, or the last one seen after
/// `within`: the auditor commits its settled watermark after the round that settled it
/// persisted, so right after `settled` moves the commit may still be on its way.
pub async fn group_committed_reaches(
    group: &str,
    topic: &str,
    want: i64,
    within: Duration,
) -> Option<i64> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let (g, t) = (group.to_string(), topic.to_string());
        let got = tokio::task::spawn_blocking(move || group_committed(&g, &t))
            .await
            .expect("committed offsets task");
        if got == Some(want) || std::time::Instant::now() >= deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The group's committed offset for partition 0 of `topic`.
pub fn group_committed(group: &str, topic: &str) -> Option<i64> {
    let c: BaseConsumer = group_client(group).create().expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    let got = c
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("committed offsets");
    match got.elements().first().map(|e| e.offset()) {
        Some(KOffset::Offset(o)) => Some(o),
        _ => None,
    }
}
