//! Detection latency: from a record becoming due to the loss showing in the daemon's
//! /metrics (`gap_auditor_records_lost_total`), over injected losses.
//!
//! The bench is the pipeline: it produces a record the pipeline "loses" (no row) and one it
//! writes, then commits past both as the pipeline group. The lost record is due `grace`
//! after the daemon first sees that commit, so `commit start + grace` is the earliest it can
//! be due; latency is measured from there (a slight over-estimate: the daemon sees the
//! commit at its next round). /metrics is polled every 50 ms; the k-th loss is detected at
//! the first poll where the counter reaches k (losses become due in order).

use crate::daemon::{self, Daemon, Spec};
use crate::util::{Row, dns_line, row, unique};
use anyhow::{Context, Result, bail};
use mysql_async::prelude::Queryable;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const VERIFY_INTERVAL: Duration = Duration::from_secs(1);
const GRACE: Duration = Duration::from_secs(2);
/// Time between two injected losses.
const SPACING: Duration = Duration::from_millis(250);
const LOST: &str = "gap_auditor_records_lost_total";

/// Runs `losses` injected losses against the daemon binary `bin`.
pub async fn rows(
    bin: &Path,
    brokers: &str,
    mysql: &str,
    losses: usize,
    rows: &mut Vec<Row>,
) -> Result<()> {
    let topic = unique("bench_latency");
    daemon::create_topics(brokers, std::slice::from_ref(&topic), 1).await?;
    let pool = mysql_async::Pool::new(mysql);
    let mut conn = pool.get_conn().await.context("MariaDB connection")?;
    let table = unique("bench_latency");
    daemon::create_sink_table(&mut conn, &table).await?;
    let pipeline = unique("bench_pipeline");
    let topics = [topic.clone()];
    let mut d = Daemon::start(
        bin,
        brokers,
        mysql,
        &Spec {
            topics: &topics,
            table: &table,
            pipeline_group: &pipeline,
            matching: daemon::OFFSET_MATCH,
            max_pending: None,
            grace: &format!("{}ms", GRACE.as_millis()),
            verify_interval: &format!("{}ms", VERIFY_INTERVAL.as_millis()),
        },
    )?;
    let result = measure(
        &mut d, brokers, &mut conn, &topic, &table, &pipeline, losses,
    )
    .await;
    d.stop().await;
    daemon::delete_topics(brokers, std::slice::from_ref(&topic)).await;
    let _ = conn
        .query_drop(format!("DROP TABLE IF EXISTS {table}"))
        .await;
    drop(conn);
    let _ = pool.disconnect().await;
    let (median, max) = result?;
    let target = VERIFY_INTERVAL + Duration::from_secs(1);
    eprintln!("latency: {losses} losses: median {median:.3}s, max {max:.3}s");
    rows.push(row(
        &format!(
            "Detection latency, due → records_lost_total, {losses} losses (verify_interval {}s, grace {}s, /metrics every 50 ms)",
            VERIFY_INTERVAL.as_secs(),
            GRACE.as_secs()
        ),
        format!("median {median:.2} s, max {max:.2} s"),
        &format!("verify_interval + 1 s = {:.0} s", target.as_secs_f64()),
        format!("{:.2} (max / target)", max / target.as_secs_f64()),
        "≤ verify_interval + 1 s",
    ));
    Ok(())
}

async fn insert(
    conn: &mut mysql_async::Conn,
    table: &str,
    topic: &str,
    offset: i64,
    line: &str,
) -> Result<()> {
    conn.exec_drop(
        format!(
            "INSERT INTO {table} (kafka_topic, kafka_partition, kafka_offset, line) VALUES (?, 0, ?, ?)"
        ),
        (topic, offset, line),
    )
    .await
    .context("pipeline write")?;
    Ok(())
}

async fn measure(
    d: &mut Daemon,
    brokers: &str,
    conn: &mut mysql_async::Conn,
    topic: &str,
    table: &str,
    pipeline: &str,
    losses: usize,
) -> Result<(f64, f64)> {
    let producer = daemon::producer(brokers)?;
    let committer = daemon::committer(brokers, pipeline)?;
    // Warm-up: one written record, confirmed, proves the daemon is assigned and verifying.
    let line = dns_line(0);
    let o = daemon::send(&producer, topic, 0, &line).await?;
    insert(conn, table, topic, o, &line).await?;
    daemon::commit(&committer, &[(topic.to_string(), 0, o + 1)])?;
    d.wait_metric(
        "gap_auditor_records_confirmed_total",
        1.0,
        Duration::from_secs(90),
    )
    .await?;
    let base = d.metric(LOST).await?;

    // Poll /metrics every 50 ms in the background: (time, lost records so far).
    let samples: Arc<Mutex<Vec<(Instant, f64)>>> = Arc::default();
    let stop = tokio_util::sync::CancellationToken::new();
    let poller = {
        let samples = samples.clone();
        let stop = stop.clone();
        let url = format!("http://{}/metrics", d.addr);
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            while !stop.is_cancelled() {
                tick.tick().await;
                let Ok(r) = http.get(&url).send().await else {
                    continue;
                };
                let Ok(text) = r.text().await else { continue };
                let v = daemon::sum_metric(&text, LOST) - base;
                if let Ok(mut s) = samples.lock() {
                    s.push((Instant::now(), v));
                }
            }
        })
    };

    let mut due = Vec::with_capacity(losses);
    for i in 0..losses {
        let step = Instant::now();
        let lost = dns_line(2 * i + 1);
        let kept = dns_line(2 * i + 2);
        let _lost_at = daemon::send(&producer, topic, 0, &lost).await?;
        let o = daemon::send(&producer, topic, 0, &kept).await?;
        insert(conn, table, topic, o, &kept).await?;
        let committed = Instant::now();
        daemon::commit(&committer, &[(topic.to_string(), 0, o + 1)])?;
        due.push(committed + GRACE);
        if let Some(rest) = SPACING.checked_sub(step.elapsed()) {
            tokio::time::sleep(rest).await;
        }
    }
    // Wait until every loss is counted (or give up: a missed detection is a failure).
    let deadline = Instant::now() + GRACE + VERIFY_INTERVAL * 10 + Duration::from_secs(10);
    loop {
        let last = samples.lock().ok().and_then(|s| s.last().map(|x| x.1));
        if last.is_some_and(|v| v >= losses as f64) {
            break;
        }
        if Instant::now() > deadline {
            stop.cancel();
            bail!(
                "only {last:?} of {losses} losses reached {LOST}; log: {}",
                d.log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.cancel();
    let _ = poller.await;
    let samples = samples.lock().map(|s| s.clone()).unwrap_or_default();
    if samples.last().is_some_and(|x| x.1 > losses as f64) {
        bail!(
            "{LOST} counted more losses than injected: {:?}",
            samples.last()
        );
    }
    let mut latencies = Vec::with_capacity(losses);
    for (k, due_at) in due.iter().enumerate() {
        let Some(&(at, _)) = samples.iter().find(|(_, v)| *v >= (k + 1) as f64) else {
            bail!("loss {k} never detected");
        };
        latencies.push(at.saturating_duration_since(*due_at).as_secs_f64());
    }
    Ok(daemon::median_max(&mut latencies))
}

/// How the detection-latency figure is made (written into docs/BENCHMARKS.md).
pub const NOTES: &str = "\
The real daemon binary (`gap-auditor run`, offset_columns on MariaDB, `verify_interval` 1 s, \
`grace` 2 s) audits a 1-partition topic. The bench plays the pipeline: every 250 ms it \
produces one record it \"loses\" (no row) and one it writes, then commits past both as the \
pipeline group (assign-less commits, like the test suite's `Pipeline` stand-in). A lost \
record is due `grace` after the daemon first sees that commit, so latency is measured from \
`commit start + grace` — an upper bound: the daemon sees the commit only at its next round, \
up to one `verify_interval` later, and that wait is counted against it. /metrics is polled \
every 50 ms; the k-th loss is detected at the first poll where \
`gap_auditor_records_lost_total` reaches k (losses become due in order). The run fails if a \
loss is never counted or more are counted than injected.\n";
