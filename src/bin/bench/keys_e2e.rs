//! key_columns end to end through the real daemon, beside a bare consumer in the same run.
//!
//! The seed's case: a 4-partition topic of seed-shaped DNS lines, the seed's table (no
//! Kafka coordinates, `time` a DATETIME, key index on `(client_ip, domain, time)`) holding
//! a row for every record, and the pipeline group committed past every record before the
//! daemon starts. The daemon (`gap-auditor run`, key_columns, kind `mysql`, the default
//! `batch_size` 1000) then reads the topic from the start and verifies every record; the
//! rate runs from the first record consumed to the last one confirmed (polled on /metrics
//! every 100 ms), so it holds tailing, decoding, the key book, `grace` (1 s) and every key
//! query. CPU per record is the daemon's user + system time over its whole run (start to
//! all confirmed) divided by the records; the bare consumer's is the bench process's own
//! CPU while it alone consumes the same topic (assign from offset 0, count only; the rate
//! and CPU of the median of `daemon::BARE_PASSES` passes). The
//! daemon's "verify round finished" lines split each round into verifying and writing the
//! store; `GAP_AUDITOR_BENCH_KEEP_LOG=FILE` keeps a copy of its log for a closer look.

use crate::daemon::{self, Daemon};
use crate::e2e;
use crate::util::{Row, fmt_rate, per_sec, row};
use anyhow::{Result, bail};
use std::path::Path;
use std::time::{Duration, Instant};

/// The fields of `util::dns_line(seq)` as SQL over the SEQUENCE engine's `seq` column (the
/// same formulas), in the seed's column order: sink rows built by the server.
pub const SEED_ROW_SQL: &str = "\
CONCAT('10.', (seq DIV 65536) % 256, '.', (seq DIV 256) % 256, '.', seq % 256), \
CONCAT('host', LPAD(seq, 8, '0'), '.subdomain.example-cdn-provider.com.cn'), \
CONCAT('2024-05-01 12:', LPAD((seq DIV 60) % 60, 2, '0'), ':', LPAD(seq % 60, 2, '0')), \
'93.184.216.34', 'NOERROR', 'A', 'ns1.authoritative-dns.example-cdn-provider.com', \
CONCAT('query-from-recursive-resolver-pool-', LPAD(seq % 10000, 4, '0')), '8.8.8.8'";

/// One measured run: records/s and CPU per record, daemon and bare consumer.
struct Measured {
    daemon_rate: f64,
    daemon_cpu_us: f64,
    bare_rate: f64,
    bare_cpu_us: f64,
    queries: f64,
    /// Rounds that verified something: count, seconds before the store write, seconds of it.
    rounds: (usize, f64, f64),
    /// The server's (busy, CPU) seconds for the daemon's connections over the run
    /// ([`crate::keys_ordered::server_time`]).
    server: Option<(f64, f64)>,
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
    eprintln!(
        "keys e2e: daemon {} ({:.2} µs CPU/record, {:.0} sink queries), bare {} ({:.2} µs CPU/record)",
        fmt_rate(m.daemon_rate),
        m.daemon_cpu_us,
        m.queries,
        fmt_rate(m.bare_rate),
        m.bare_cpu_us
    );
    out.push(row(
        &format!(
            "key_columns end to end, real daemon (first record → all {n} confirmed; seed table, DATETIME key column)"
        ),
        format!("{} ({:.0} sink queries)", fmt_rate(m.daemon_rate), m.queries),
        &format!(
            "bare consumer {} (median of {} passes)",
            fmt_rate(m.bare_rate),
            daemon::BARE_PASSES
        ),
        format!("{:.3}", m.daemon_rate / m.bare_rate.max(1e-9)),
        "≥ 0.10 (≥ 100 k rec/s)",
    ));
    if let Some((busy, cpu)) = m.server {
        let per_million = 1e6 / n as f64;
        out.push(row(
            "key_columns end to end (key by key): the server's work",
            format!(
                "{:.2} s busy, {:.2} s CPU per million records",
                busy * per_million,
                cpu * per_million
            ),
            "MariaDB USER_STATISTICS, the daemon's user, over the run",
            "—".into(),
            "— (the baseline of the read-by-time rows)",
        ));
    }
    let (r, verified, stored) = m.rounds;
    eprintln!("keys e2e: {r} rounds, {verified:.2} s verifying, {stored:.2} s writing the store");
    out.push(row(
        "key_columns end to end: where the rounds' time went",
        format!("{r} rounds: {verified:.1} s verifying (queries + key book), {stored:.1} s writing the store"),
        &format!("{:.1} k keys/s while verifying", n as f64 / verified.max(1e-9) / 1e3),
        format!("{:.2} of round time in the store", stored / (verified + stored).max(1e-9)),
        "— (diagnostic)",
    ));
    out.push(row(
        "CPU per record: key_columns daemon (whole run) vs bare consumer",
        format!("{:.2} µs", m.daemon_cpu_us),
        &format!("{:.2} µs", m.bare_cpu_us),
        format!("{:.1}×", m.daemon_cpu_us / m.bare_cpu_us.max(1e-9)),
        "reported",
    ));
    Ok(())
}

/// The seed's table, every row in; the daemon's key_columns match.
const SETUP: e2e::Setup = e2e::Setup {
    name: "keys e2e",
    line: crate::util::dns_line,
    create: daemon::seed_table_sql,
    // The rows of `util::dns_line(i)`, built by the server (the same formulas).
    fill: |table, from, to| {
        format!("INSERT INTO {table} SELECT {SEED_ROW_SQL} FROM seq_{from}_to_{to}")
    },
    index: "ADD INDEX idx_key (client_ip, domain, time)",
    matching: daemon::KEY_MATCH,
    kcat: None,
};

async fn measure(bin: &Path, brokers: &str, mysql: &str, n: u64) -> Result<Measured> {
    let run = e2e::run(bin, (brokers, mysql), n, &SETUP, async |d: &Daemon| {
        let server_before = crate::keys_ordered::server_time();
        let deadline = Instant::now() + Duration::from_secs(1800);
        let mut first: Option<Instant> = None;
        loop {
            if Instant::now() > deadline {
                bail!(
                    "the daemon did not confirm {n} records in time; log: {}",
                    d.log.display()
                );
            }
            let consumed = d
                .metric("gap_auditor_records_consumed_total")
                .await
                .unwrap_or(0.0);
            if consumed > 0.0 {
                first.get_or_insert_with(Instant::now);
            }
            let confirmed = d
                .metric("gap_auditor_records_confirmed_total")
                .await
                .unwrap_or(0.0);
            if confirmed >= n as f64 {
                break;
            }
            let lost = d
                .metric("gap_auditor_records_lost_total")
                .await
                .unwrap_or(0.0);
            if lost > 0.0 {
                bail!(
                    "the daemon reported {lost} records lost from a complete table; log: {}",
                    d.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let window = first.map(|f| f.elapsed()).unwrap_or_default();
        let cpu = d.cpu();
        let queries = d
            .metric("gap_auditor_sink_queries_total")
            .await
            .unwrap_or(0.0);
        let split = d.round_split();
        let verified: u64 = split.iter().map(|r| r.1).sum();
        let stored: u64 = split.iter().map(|r| r.0.saturating_sub(r.1)).sum();
        let rounds = (split.len(), verified as f64 / 1e3, stored as f64 / 1e3);
        let server = server_before
            .zip(crate::keys_ordered::server_time())
            .map(|((b0, c0), (b1, c1))| (b1 - b0, c1 - c0));
        Ok((per_sec(n, window), cpu, queries, rounds, server))
    })
    .await?;
    let (daemon_rate, daemon_cpu, queries, rounds, server) = run.sampled;
    Ok(Measured {
        daemon_rate,
        daemon_cpu_us: daemon_cpu.as_secs_f64() * 1e6 / n as f64,
        bare_rate: run.bare_rate,
        bare_cpu_us: run.bare_cpu.as_secs_f64() * 1e6 / n as f64,
        queries,
        rounds,
        server,
    })
}

/// How the end-to-end key_columns figures are made (written into docs/BENCHMARKS.md).
pub const NOTES: &str = "\
The seed's case through the real daemon binary: a 4-partition topic of seed-shaped DNS \
lines; the seed's table (no Kafka coordinates, `time` a `DATETIME`, key columns in \
`utf8mb4_nopad_bin`, index `(client_ip, domain, time)`) holding a row for every record, \
loaded server-side; the pipeline group committed past every record before the daemon \
starts. `gap-auditor run` (key_columns, kind `mysql`, `batch_size` 1000, `grace` 1 s, \
`verify_interval` 1 s) reads the topic from the start; the rate runs from the first record \
consumed to the last one confirmed (/metrics polled every 100 ms), so it holds tailing, \
decoding, the key book, `grace` and every key query. Baseline: the bare consumer (assign \
from offset 0, count only) on the same topic in the same run, the median of 3 passes. CPU per record: the daemon's \
user + system time over its whole run (from start, group join included, to all confirmed) \
over the records; the bare consumer's is the bench process's own CPU while it alone \
consumes. The run fails if any record is reported lost.\n";
