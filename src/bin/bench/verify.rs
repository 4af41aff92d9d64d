//! Verification against MariaDB through the crate's own verifier (`verify::by_offsets`,
//! `verify::by_keys` over `sink::mysql::MysqlSink`): queries per round with no loss, queries
//! to locate 1, 10 and 100 random missing rows, and key_columns keys/s.
//!
//! Queries are counted by the `QueryObserver` the daemon itself feeds its
//! `gap_auditor_sink_query_seconds` histogram from, so a count here is a count there. The
//! one `SELECT @@sql_mode` per pool (escaping mode) is not an audit query and is not counted.
//!
//! Tables are loaded server-side (`INSERT ... SELECT` over MariaDB's SEQUENCE engine
//! `seq_0_to_N`) with the index docs/SINK-DDL.md recommends, added after the load (a sorted
//! index build is much faster than maintaining it row by row). Every table is dropped at
//! the end.

use crate::util::{Row, unique};
use anyhow::{Context, Result};
use gap_auditor::sink::mysql::{MysqlSink, MysqlTarget};
use gap_auditor::sink::tls::TlsSettings;
use mysql_async::prelude::Queryable;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod keys;
mod offsets;

pub use keys::key_rows;
pub use offsets::offset_rows;

/// Partitions of the offset_columns table (the tailing topic's count).
const PARTITIONS: i32 = 4;
/// Rows per `INSERT ... SELECT` statement while loading (keeps each transaction small).
const LOAD_CHUNK: u64 = 1_000_000;
/// The daemon's default `batch_size`.
pub const BATCH_SIZE: usize = 1_000;

/// Everything measured here goes to the table; EXPLAIN output goes to the notes.
pub struct Report {
    /// Result rows.
    pub rows: Vec<Row>,
    /// Markdown lines: EXPLAIN of the shipped queries on the bench tables.
    pub explain: String,
}

/// A query counter in the shape of `verify::QueryObserver`.
#[derive(Default)]
struct Counter {
    queries: AtomicU64,
    failed: AtomicU64,
}

impl Counter {
    fn observe(&self, _took: Duration, ok: bool) {
        self.queries.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn take(&self) -> u64 {
        self.queries.swap(0, Ordering::Relaxed)
    }
}

/// A small deterministic generator (xorshift64*): the same "random" losses every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn secs(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{:.0} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

/// `⌈log2(x)⌉` for x ≥ 1 (0 below).
fn ceil_log2(x: f64) -> u64 {
    if x <= 1.0 { 0 } else { x.log2().ceil() as u64 }
}

/// A table made for one measurement on its own pool, dropped afterwards whatever the
/// measurement's outcome (the bench leaves nothing behind in the shared database).
struct ScratchTable {
    pool: mysql_async::Pool,
    conn: mysql_async::Conn,
    name: String,
}

impl ScratchTable {
    /// Creates a table named `prefix` plus a unique suffix with the column definitions `ddl`.
    async fn create(url: &str, prefix: &str, ddl: &str) -> Result<ScratchTable> {
        let pool = mysql_async::Pool::new(url);
        let mut conn = pool.get_conn().await.context("MariaDB connection")?;
        let name = unique(prefix);
        conn.query_drop(format!("CREATE TABLE {name} ({ddl}) ENGINE=InnoDB"))
            .await?;
        Ok(ScratchTable { pool, conn, name })
    }

    /// Drops the table and closes the pool; failures are ignored (it is a clean-up).
    async fn remove(mut self) {
        let _ = self
            .conn
            .query_drop(format!("DROP TABLE IF EXISTS {}", self.name))
            .await;
        drop(self.conn);
        let _ = self.pool.disconnect().await;
    }
}

/// Loads `total` rows `INSERT ... SELECT` from the sequence engine in chunks; `select`
/// maps `seq` to the column list.
async fn load(
    conn: &mut mysql_async::Conn,
    table: &str,
    columns: &str,
    select: &str,
    total: u64,
) -> Result<Duration> {
    let start = Instant::now();
    let mut from = 0u64;
    while from < total {
        let to = (from + LOAD_CHUNK).min(total) - 1;
        conn.query_drop(format!(
            "INSERT INTO {table} ({columns}) SELECT {select} FROM seq_{from}_to_{to}"
        ))
        .await
        .with_context(|| format!("loading rows {from}..={to} into {table}"))?;
        from = to + 1;
    }
    Ok(start.elapsed())
}

/// `EXPLAIN` of `query` as one Markdown line: access type, index used, rows estimate, Extra
/// (identical consecutive rows collapsed, see [`collapse`]).
async fn explain(conn: &mut mysql_async::Conn, query: &str) -> Result<String> {
    let rows: Vec<mysql_async::Row> = conn
        .query(format!("EXPLAIN {query}"))
        .await
        .context("EXPLAIN")?;
    let mut out = Vec::new();
    for r in rows {
        let get = |name: &str| -> String {
            r.get_opt::<Option<String>, _>(name)
                .and_then(|v| v.ok())
                .flatten()
                .unwrap_or_else(|| "NULL".into())
        };
        out.push(format!(
            "type=`{}` key=`{}` rows≈{} Extra=`{}`",
            get("type"),
            get("key"),
            get("rows"),
            get("Extra")
        ));
    }
    Ok(collapse(&out))
}

/// Joins EXPLAIN rows with "; ", a run of identical consecutive rows written once with its
/// count (the key count's derived table has one `No tables used` row per UNION ALL member).
fn collapse(rows: &[String]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < rows.len() {
        let run = rows[i..].iter().take_while(|r| **r == rows[i]).count();
        out.push(if run > 1 {
            format!("{} ×{run}", rows[i])
        } else {
            rows[i].clone()
        });
        i += run;
    }
    out.join("; ")
}

fn abbreviate(q: &str) -> String {
    if q.len() <= 220 {
        q.to_string()
    } else {
        let cut = (0..=200)
            .rev()
            .find(|&i| q.is_char_boundary(i))
            .unwrap_or(0);
        format!("{} … ({} bytes)", &q[..cut], q.len())
    }
}

fn sink(url: &str, target: MysqlTarget) -> Result<MysqlSink> {
    MysqlSink::new(
        url,
        None,
        None,
        target,
        Duration::from_secs(300),
        "mysql",
        &TlsSettings::default(),
    )
    .map_err(|e| anyhow::anyhow!("{e}"))
}

/// How the verification figures are made (written into docs/BENCHMARKS.md by `--write`).
pub const NOTES: &str = "\
Driven through the shipped code: `verify::by_offsets` / `verify::by_keys` over \
`sink::mysql::MysqlSink`, `Limits::from_batch_size(1000)` (the default `batch_size`). \
Queries are counted by the same `QueryObserver` the daemon feeds \
`gap_auditor_sink_query_seconds` from (the one `SELECT @@sql_mode` per connection pool is \
not an audit query and is not counted). Tables are loaded server-side with \
`INSERT ... SELECT` over MariaDB's SEQUENCE engine and carry the index docs/SINK-DDL.md \
recommends: `(kafka_partition, kafka_offset)` for offset_columns, `(client_ip, domain, time)` \
in `utf8mb4_bin` for key_columns.\n\n\
- offset_columns: rows are spread over P = 4 partitions. A round with nothing lost costs one \
`COUNT(*), COUNT(DISTINCT offset)` per partition, however many records are due. Losses are \
random rows DELETEd (seeded, the same every run) and restored afterwards; the bench checks \
the verifier reports exactly the deleted offsets. Bound: P + g·⌈log2(n/b)⌉ with n the rows \
due in the round (all of the table), b = batch_size (ranges of ≤ b records are listed, not \
bisected). The catch-up rows (all of the table due at once) are the worst case for wall \
time: the first count reads every row and each bisection level re-counts half of the range \
above it; in steady state the due range of a round is small and so is every query. Each \
bisection step costs one count (the sibling's count is derived from the \
parent's) and each located gap one listing query; upper levels are shared between gaps.\n\
- key_columns: keys spread evenly over the table, all present, verified in one round in \
batches of 1000 keys through `verify::by_keys` (the JOIN on a derived key table, \
`sql::count_keys_joined`, batches counted 4 at a time over the sink's pool), then the same \
with one query at a time, then the CASE form it replaced (`sql::count_keys_compared`, \
`CASE WHEN … THEN i … END … GROUP BY 1`, one query at a time): same keys, same table, same \
run. The key columns are `utf8mb4_bin` (PAD SPACE), so both forms compare them exactly \
(`CAST(c AS BINARY)`) as the product does.\n\
- The shared test MariaDB runs with its default 128 MiB InnoDB buffer pool, smaller than \
the 10 M-row index: the no-loss catch-up round over all rows reads from the OS page cache. \
Wall times are of this machine; the query counts are the portable figures.\n\
- The CASE form made the server test every row the index returns against every key of the \
batch (and the `OR` filter again), O(batch²) per query; the JOIN form is one index lookup \
per key (EXPLAIN below: `ref` on `idx_key`, driven by the derived table).\n";

#[cfg(test)]
mod tests {
    use super::collapse;

    #[test]
    fn identical_consecutive_explain_rows_are_written_once_with_their_count() {
        let rows: Vec<String> = ["a", "b", "n", "n", "n", "b", "n"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(collapse(&rows), "a; b; n ×3; b; n");
        assert_eq!(collapse(&[]), "");
    }
}
