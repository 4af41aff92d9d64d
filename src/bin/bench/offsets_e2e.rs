//! offset_columns end to end through the real daemon, beside a bare consumer in the same run.
//!
//! A 4-partition topic of seed-shaped DNS lines; a sink table carrying each record's Kafka
//! coordinates (`kafka_partition`, `kafka_offset`, the line) with the index
//! docs/SINK-DDL.md recommends, holding a row for every record, loaded server-side; the
//! pipeline group committed past every record before the daemon starts. The daemon
//! (`gap-auditor run`, offset_columns, kind `mysql`, `grace` 1 s, `verify_interval` 1 s)
//! reads the topic from the start. /metrics is scraped every 100 ms for the records
//! consumed, confirmed and settled (the sum of `gap_auditor_settled_offset` over the
//! partitions: offsets start at 0 and have no holes here, so it counts settled records).
//!
//! - rate: first record consumed → every record settled and confirmed;
//! - how far settled trails consumed: for every level L that settled reached at a scrape,
//!   the time from the first scrape where consumed was ≥ L to that scrape (the largest over
//!   the run, and the one for L = all records), in `verify_interval`s ("rounds behind");
//! - CPU per record: the daemon's user + system time over its whole run (start to all
//!   settled), the bare consumer's the bench process's own while it alone consumes.
//!
//! The run fails if any record is reported lost. `GAP_AUDITOR_BENCH_KEEP_LOG=FILE` keeps a
//! copy of the daemon's log, `GAP_AUDITOR_BENCH_SAMPLES=FILE` the scrapes as CSV.

use crate::daemon::{self, Daemon};
use crate::e2e;
use crate::keys_e2e::SEED_ROW_SQL;
use crate::util::{PARTITIONS, Row, fmt_rate, per_sec, row};
use anyhow::{Context, Result, bail};
use std::path::Path;
use std::time::{Duration, Instant};

/// The audit's `verify_interval`, seconds (the unit of "rounds behind").
const VERIFY_INTERVAL_S: f64 = 1.0;
/// Time between two scrapes of /metrics.
const SCRAPE: Duration = Duration::from_millis(100);

/// offset_columns over the table of [`SETUP`] (one topic: no topic column).
const MATCH: &str = r#"strategy = "offset_columns"
partition_column = "kafka_partition"
offset_column = "kafka_offset""#;

/// The metrics every scrape reads, in this order.
const SCRAPED: [&str; 4] = [
    "gap_auditor_records_consumed_total",
    "gap_auditor_records_confirmed_total",
    "gap_auditor_settled_offset",
    "gap_auditor_records_lost_total",
];

/// One scrape: seconds since the daemon started, consumed, confirmed, settled.
#[derive(Clone, Copy)]
struct Sample {
    t: f64,
    consumed: f64,
    confirmed: f64,
    settled: f64,
}

/// One measured run.
struct Measured {
    daemon_rate: f64,
    daemon_cpu_us: f64,
    bare_rate: f64,
    bare_cpu_us: f64,
    queries: f64,
    lag: Lag,
    /// Verify rounds inside the window that verified something: count, median, max ms.
    rounds: (usize, f64, f64),
}

/// How far settled trailed consumed, seconds.
#[derive(Debug, PartialEq)]
struct Lag {
    /// The largest over every settled level reached.
    max: f64,
    /// For the last level: consumed reaching every record → settled reaching it.
    end: f64,
}

/// Produces `n` records, loads their rows, measures the bare consumer and the daemon.
pub async fn rows(
    bin: &Path,
    brokers: &str,
    mysql: &str,
    n: u64,
    out: &mut Vec<Row>,
) -> Result<()> {
    let m = measure(bin, brokers, mysql, n).await?;
    let rounds = |s: f64| s / VERIFY_INTERVAL_S;
    eprintln!(
        "offsets e2e: daemon {} ({:.2} µs CPU/record, {:.0} sink queries), bare {} ({:.2} µs CPU/record); \
         settled behind consumed: max {:.2} s, at the end {:.2} s; {} verifying rounds (median {:.0} ms, max {:.0} ms)",
        fmt_rate(m.daemon_rate),
        m.daemon_cpu_us,
        m.queries,
        fmt_rate(m.bare_rate),
        m.bare_cpu_us,
        m.lag.max,
        m.lag.end,
        m.rounds.0,
        m.rounds.1,
        m.rounds.2,
    );
    out.push(row(
        &format!(
            "offset_columns end to end, real daemon (first record → all {n} settled; verify_interval 1 s, grace 1 s)"
        ),
        format!("{} ({:.0} sink queries)", fmt_rate(m.daemon_rate), m.queries),
        &format!(
            "bare consumer {} (median of {} passes)",
            fmt_rate(m.bare_rate),
            daemon::BARE_PASSES
        ),
        format!("{:.3}", m.daemon_rate / m.bare_rate.max(1e-9)),
        "settled ≤ 2 rounds behind the tail (next row)",
    ));
    out.push(row(
        "offset_columns end to end: settled behind consumed (consumed reaches N → settled reaches N, /metrics every 100 ms)",
        format!(
            "max {:.1} rounds ({:.2} s); at the end {:.1} rounds ({:.2} s)",
            rounds(m.lag.max),
            m.lag.max,
            rounds(m.lag.end),
            m.lag.end
        ),
        "verify_interval 1 s = 1 round",
        format!("{:.2} (max / 2 rounds)", rounds(m.lag.max) / 2.0),
        "≤ 2 rounds",
    ));
    out.push(row(
        "offset_columns end to end: verify rounds between first record and all settled",
        format!(
            "rounds: {}, median {:.0} ms, max {:.0} ms",
            m.rounds.0, m.rounds.1, m.rounds.2
        ),
        "verify_interval 1 s",
        format!(
            "{:.2} (max / interval)",
            m.rounds.2 / 1e3 / VERIFY_INTERVAL_S
        ),
        "— (diagnostic)",
    ));
    out.push(row(
        "CPU per record: offset_columns daemon (whole run) vs bare consumer",
        format!("{:.2} µs", m.daemon_cpu_us),
        &format!("{:.2} µs", m.bare_cpu_us),
        format!("{:.2}×", m.daemon_cpu_us / m.bare_cpu_us.max(1e-9)),
        "≤ 1.2×",
    ));
    Ok(())
}

/// The offset_columns table of docs/SINK-DDL.md (one topic): an auto-increment key, the
/// coordinates, the record's line, every row in; the `(kafka_partition, kafka_offset)`
/// index is added after the load.
const SETUP: e2e::Setup = e2e::Setup {
    name: "offsets e2e",
    line: crate::util::dns_line,
    create: |table| {
        format!(
            "CREATE TABLE {table} (\
               id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, \
               kafka_partition INT NOT NULL, kafka_offset BIGINT NOT NULL, \
               line VARCHAR(1024) NOT NULL) ENGINE=InnoDB"
        )
    },
    // Record i went to partition i % P at offset i / P (`tail::produce`, a fresh topic).
    fill: |table, from, to| {
        format!(
            "INSERT INTO {table} (kafka_partition, kafka_offset, line) \
             SELECT seq % {PARTITIONS}, seq DIV {PARTITIONS}, CONCAT_WS('|', {SEED_ROW_SQL}) \
             FROM seq_{from}_to_{to}"
        )
    },
    index: "ADD INDEX idx_kafka (kafka_partition, kafka_offset)",
    matching: MATCH,
    kcat: None,
};

async fn measure(bin: &Path, brokers: &str, mysql: &str, n: u64) -> Result<Measured> {
    let run = e2e::run(bin, (brokers, mysql), n, &SETUP, async |d: &Daemon| {
        sample(d, n).await
    })
    .await?;
    let (daemon_rate, daemon_cpu, queries, lag, rounds) = run.sampled;
    Ok(Measured {
        daemon_rate,
        daemon_cpu_us: daemon_cpu.as_secs_f64() * 1e6 / n as f64,
        bare_rate: run.bare_rate,
        bare_cpu_us: run.bare_cpu.as_secs_f64() * 1e6 / n as f64,
        queries,
        lag,
        rounds,
    })
}

/// Scrapes the daemon until every record is settled and confirmed: (records/s, CPU,
/// sink queries, lag, rounds).
async fn sample(d: &Daemon, n: u64) -> Result<(f64, Duration, f64, Lag, (usize, f64, f64))> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(1800);
    let mut samples: Vec<Sample> = Vec::new();
    let mut first: Option<(Instant, chrono::DateTime<chrono::Utc>)> = None;
    let all = n as f64;
    loop {
        if Instant::now() > deadline {
            bail!(
                "the daemon did not settle {n} records in time; log: {}",
                d.log.display()
            );
        }
        let t = started.elapsed().as_secs_f64();
        // A failed scrape (the server not up yet) is skipped, not taken for zeros.
        if let Ok(v) = d.metrics(&SCRAPED).await {
            let lost = v[3];
            if lost > 0.0 {
                bail!(
                    "the daemon reported {lost} records lost from a complete table; log: {}",
                    d.log.display()
                );
            }
            if v[0] > 0.0 && first.is_none() {
                first = Some((Instant::now(), chrono::Utc::now()));
            }
            samples.push(Sample {
                t,
                consumed: v[0],
                confirmed: v[1],
                settled: v[2],
            });
            if v[1] >= all && v[2] >= all {
                break;
            }
        }
        tokio::time::sleep(SCRAPE).await;
    }
    let cpu = d.cpu();
    if let Ok(path) = std::env::var("GAP_AUDITOR_BENCH_SAMPLES") {
        let text: String = samples
            .iter()
            .map(|s| format!("{:.3},{},{},{}\n", s.t, s.consumed, s.confirmed, s.settled))
            .collect();
        let _ = std::fs::write(path, format!("t,consumed,confirmed,settled\n{text}"));
    }
    let (first, first_wall) = first.context("no record consumed")?;
    let window = first.elapsed();
    let queries = d
        .metric("gap_auditor_sink_queries_total")
        .await
        .unwrap_or(0.0);
    let settled = lag(&samples, |s| s.settled).context("no samples")?;
    if let Some(c) = lag(&samples, |s| s.confirmed) {
        eprintln!(
            "offsets e2e: confirmed behind consumed: max {:.2} s, at the end {:.2} s",
            c.max, c.end
        );
    }
    let rounds = rounds_since(&d.log, first_wall);
    Ok((per_sec(n, window), cpu, queries, settled, rounds))
}

/// For every level `of` (settled, confirmed) reached at a scrape, the time from the first
/// scrape at which consumed was at least that level to that scrape: the largest, and the
/// last one's.
fn lag(samples: &[Sample], of: impl Fn(&Sample) -> f64) -> Option<Lag> {
    let mut max = 0.0f64;
    let mut end = None;
    let mut level = 0.0;
    for s in samples {
        if of(s) <= level {
            continue;
        }
        level = of(s);
        let consumed_at = samples.iter().find(|c| c.consumed >= level)?.t;
        let lag = (s.t - consumed_at).max(0.0);
        max = max.max(lag);
        end = Some(lag);
    }
    Some(Lag { max, end: end? })
}

/// Verify rounds logged after `since` that took 10 ms or more (a round with nothing due
/// takes less): count, median and max `took_ms`.
fn rounds_since(log: &Path, since: chrono::DateTime<chrono::Utc>) -> (usize, f64, f64) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut took: Vec<f64> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["message"] == "verify round finished")
        .filter(|v| {
            v["timestamp"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .is_some_and(|t| t >= since)
        })
        .filter_map(|v| v["took_ms"].as_f64())
        .filter(|&ms| ms >= 10.0)
        .collect();
    let count = took.len();
    let (median, max) = daemon::median_max(&mut took);
    (count, median, max)
}

/// How the end-to-end offset_columns figures are made (written into docs/BENCHMARKS.md).
pub const NOTES: &str = "\
The real daemon binary on a 4-partition topic of seed-shaped DNS lines; the sink table of \
docs/SINK-DDL.md for one topic (`id` auto-increment primary key, `kafka_partition`, \
`kafka_offset`, the line; index `(kafka_partition, kafka_offset)`) holding a row for every \
record, loaded server-side; the pipeline group committed past every record before the \
daemon starts. `gap-auditor run` (offset_columns, kind `mysql`, `grace` 1 s, \
`verify_interval` 1 s) reads the topic from the start. Baseline: the bare consumer (assign \
from offset 0, count only) on the same topic in the same run, the median of 3 passes, before the daemon starts. \
/metrics is scraped every 100 ms for `gap_auditor_records_consumed_total`, \
`gap_auditor_records_confirmed_total` and the sum of `gap_auditor_settled_offset` over the \
partitions (offsets start at 0 with no holes, so that sum is the number of settled \
records).\n\n\
- Rate: from the first scrape that shows a record consumed to the first that shows every \
record settled and confirmed.\n\
- Settled behind consumed: for every value N the settled sum took at a scrape, the time from \
the first scrape at which consumed was ≥ N to that scrape; the row gives the largest over \
the run and the one for N = all records (consumed-all → settled-all), divided by \
`verify_interval` (1 s) as \"rounds behind\". Both ends are read at 100 ms scrapes, so each \
figure is ±0.1 s. It holds `grace` (1 s, one round: a record is due only `grace` after the \
daemon saw the pipeline's commit pass it), the wait for the next round, the round's queries \
and the store write that persists the settled watermark. The largest lag is the first \
records': the daemon sees the pipeline's commit at its first round after the assignment, \
and `grace` runs from there; with `grace` equal to `verify_interval` it expires within a \
few milliseconds of the next round's start, so it is met at that round or only at the one \
after, and the figure moves by about one round between runs. The consumed-all → settled-all \
figure is the steady case (the commit seen long ago): the round after the last record, and \
the rounds it takes to work through what is due (a round verifies at most 50,000 records \
per partition and is then followed at once by another).\n\
- Verify rounds: the daemon's `verify round finished` debug lines after the first record \
(those of 10 ms or more: a round with nothing due takes less), their `took_ms`.\n\
- CPU per record: the daemon's user + system time over its whole run (from start, group \
join included, to all settled) over the records; the bare consumer's is the bench \
process's own CPU while it alone consumes.\n\n\
The run fails if any record is reported lost.\n";

#[cfg(test)]
mod tests {
    use super::{Lag, Sample, lag};

    fn s(t: f64, consumed: f64, settled: f64) -> Sample {
        Sample {
            t,
            consumed,
            confirmed: settled,
            settled,
        }
    }

    #[test]
    fn the_lag_is_the_time_from_consumed_reaching_a_level_to_settled_reaching_it() {
        let samples = [
            s(0.0, 0.0, 0.0),
            s(0.1, 50.0, 0.0),
            s(0.2, 100.0, 0.0),
            s(1.5, 100.0, 50.0),
            s(2.7, 100.0, 100.0),
        ];
        let l = lag(&samples, |s| s.settled).unwrap();
        assert!(
            (l.max - 2.5).abs() < 1e-9 && (l.end - 2.5).abs() < 1e-9,
            "{l:?}"
        );
        // Nothing settled: no figure.
        assert_eq!(lag(&samples[..3], |s| s.settled), None);
        // The largest lag can be an earlier level's.
        let samples = [
            s(0.0, 50.0, 0.0),
            s(2.0, 100.0, 0.0),
            s(3.0, 100.0, 50.0),
            s(3.25, 100.0, 100.0),
        ];
        assert_eq!(
            lag(&samples, |s| s.settled),
            Some(Lag {
                max: 3.0,
                end: 1.25
            })
        );
    }
}
