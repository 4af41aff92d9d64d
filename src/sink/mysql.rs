//! The MySQL-protocol verifier for Apache Doris (and MySQL/MariaDB).
//!
//! Doris before 2.0 has no server-side prepared statements, so every query goes over the TEXT
//! protocol (`COM_QUERY`) with values escaped by [`super::sql`]. Connection setup sends no
//! statement at all (no `SET`, no `SELECT @@socket`/`@@max_allowed_packet` probes) and
//! pooled connections are not reset on return: Doris rejects some session statements and
//! commands that MySQL clients send by default. The server's
//! `NO_BACKSLASH_ESCAPES` mode decides how literals are escaped; it is read once per pool
//! (re-read after any error) with `SELECT @@sql_mode`.

use super::sql::{self, OffsetQuery};
use super::{RangeCount, SinkError, Verifier};
use crate::gap::{Offset, TopicPartition};
use crate::ledger::OffsetRun;
use crate::record::Key;
use mysql_async::prelude::Queryable;
use mysql_async::{Opts, OptsBuilder, Pool, PoolConstraints, PoolOpts};
use std::sync::Mutex;
use std::time::Duration;

/// Where the sink rows are and how a record is matched to them.
#[derive(Debug, Clone)]
pub struct MysqlTarget {
    /// `table` or `db.table`.
    pub table: String,
    /// offset_columns: column holding the Kafka partition.
    pub partition_column: String,
    /// offset_columns: column holding the Kafka offset.
    pub offset_column: String,
    /// offset_columns: optional column holding the topic.
    pub topic_column: Option<String>,
    /// key_columns: sink columns in key order.
    pub key_columns: Vec<String>,
}

/// A pooled MySQL-protocol connection to the sink.
pub struct MysqlSink {
    pool: Pool,
    target: MysqlTarget,
    timeout: Duration,
    kind: &'static str,
    no_backslash_escapes: Mutex<Option<bool>>,
}

impl MysqlSink {
    /// Builds the pool (connects lazily). `url` is `mysql://user[:password]@host:port/db`;
    /// `user`/`password`, when given, override the url's. Errors never echo the URL (it may
    /// hold a password).
    pub fn new(
        url: &str,
        user: Option<&str>,
        password: Option<&str>,
        target: MysqlTarget,
        timeout: Duration,
        kind: &'static str,
    ) -> Result<Self, SinkError> {
        let opts = Opts::from_url(url).map_err(|e| {
            SinkError::Rejected(format!(
                "invalid sink url: {}",
                redact_url_error(&e.to_string())
            ))
        })?;
        let mut b = OptsBuilder::from_opts(opts)
            .prefer_socket(false)
            .max_allowed_packet(Some(16 << 20))
            .wait_timeout(Some(28_800))
            .stmt_cache_size(0)
            .pool_opts(
                PoolOpts::default()
                    .with_constraints(PoolConstraints::new(0, 4).unwrap_or_default())
                    // No COM_RESET_CONNECTION when a connection returns to the pool: older
                    // Doris FEs do not implement it, and the auditor sets no session state.
                    .with_reset_connection(false),
            );
        if let Some(u) = user {
            b = b.user(Some(u.to_string()));
        }
        if let Some(p) = password {
            b = b.pass(Some(p.to_string()));
        }
        Ok(Self {
            pool: Pool::new(b),
            target,
            timeout,
            kind,
            no_backslash_escapes: Mutex::new(None),
        })
    }

    async fn with_timeout<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, mysql_async::Error>>,
    ) -> Result<T, SinkError> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                self.forget_mode();
                Err(classify(&e))
            }
            Err(_) => {
                self.forget_mode();
                Err(SinkError::Unavailable(format!(
                    "query timed out after {:?}",
                    self.timeout
                )))
            }
        }
    }

    fn forget_mode(&self) {
        if let Ok(mut m) = self.no_backslash_escapes.lock() {
            *m = None;
        }
    }

    async fn nbe(&self, conn: &mut mysql_async::Conn) -> Result<bool, SinkError> {
        if let Ok(m) = self.no_backslash_escapes.lock()
            && let Some(v) = *m
        {
            return Ok(v);
        }
        let mode: Option<String> = self
            .with_timeout(conn.query_first("SELECT @@sql_mode"))
            .await?;
        let v = mode.is_some_and(|m| m.to_ascii_uppercase().contains("NO_BACKSLASH_ESCAPES"));
        if let Ok(mut m) = self.no_backslash_escapes.lock() {
            *m = Some(v);
        }
        Ok(v)
    }

    async fn conn(&self) -> Result<mysql_async::Conn, SinkError> {
        self.with_timeout(self.pool.get_conn()).await
    }

    fn offset_query<'a>(&'a self, tp: &'a TopicPartition) -> OffsetQuery<'a> {
        OffsetQuery {
            table: &self.target.table,
            partition_column: &self.target.partition_column,
            offset_column: &self.target.offset_column,
            topic_column: self.target.topic_column.as_deref(),
            topic: &tp.topic,
            partition: tp.partition,
        }
    }

    /// Runs one arbitrary statement (tests and `replay` use it to write rows).
    pub async fn execute(&self, sql: &str) -> Result<(), SinkError> {
        let mut c = self.conn().await?;
        self.with_timeout(c.query_drop(sql)).await
    }

    /// Whether the server runs with NO_BACKSLASH_ESCAPES (for callers that build SQL).
    pub async fn no_backslash_escapes(&self) -> Result<bool, SinkError> {
        let mut c = self.conn().await?;
        self.nbe(&mut c).await
    }

    /// Closes the pool.
    pub async fn close(self) {
        let _ = self.pool.disconnect().await;
    }
}

impl Verifier for MysqlSink {
    fn kind(&self) -> &'static str {
        self.kind
    }

    async fn ping(&self) -> Result<(), SinkError> {
        let mut c = self.conn().await?;
        let _: Option<i64> = self.with_timeout(c.query_first("SELECT 1")).await?;
        Ok(())
    }

    async fn count_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<RangeCount, SinkError> {
        let mut c = self.conn().await?;
        let nbe = self.nbe(&mut c).await?;
        let q = sql::count_offsets(&self.offset_query(tp), runs, nbe);
        let row: Option<(Option<i64>, Option<i64>)> = self.with_timeout(c.query_first(q)).await?;
        let (rows, distinct) = row.unwrap_or((Some(0), Some(0)));
        Ok(RangeCount {
            rows: rows.unwrap_or(0).max(0) as u64,
            distinct: distinct.unwrap_or(0).max(0) as u64,
        })
    }

    async fn list_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<Vec<(Offset, u64)>, SinkError> {
        let mut c = self.conn().await?;
        let nbe = self.nbe(&mut c).await?;
        let q = sql::list_offsets(&self.offset_query(tp), runs, nbe);
        let rows: Vec<(Option<i64>, i64)> = self.with_timeout(c.query(q)).await?;
        Ok(rows
            .into_iter()
            .filter_map(|(o, n)| o.map(|o| (o, n.max(0) as u64)))
            .collect())
    }

    async fn count_keys(&self, keys: &[&Key]) -> Result<Vec<u64>, SinkError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut c = self.conn().await?;
        let nbe = self.nbe(&mut c).await?;
        let values: Vec<Vec<&str>> = keys.iter().map(|k| k.values().collect()).collect();
        let q = sql::count_keys(&self.target.table, &self.target.key_columns, &values, nbe);
        let rows: Vec<(Option<i64>, i64)> = self.with_timeout(c.query(q)).await?;
        let mut out = vec![0u64; keys.len()];
        for (k, n) in rows {
            if let Some(slot) = k
                .and_then(|k| usize::try_from(k).ok())
                .and_then(|k| out.get_mut(k))
            {
                *slot += n.max(0) as u64;
            }
        }
        Ok(out)
    }

    async fn find_ids(&self, _ids: &[&str]) -> Result<Vec<bool>, SinkError> {
        // Config validation already refuses doc_id with a SQL sink; this is the backstop.
        Err(SinkError::Rejected(format!(
            "match.strategy doc_id needs an elasticsearch sink; {} rows have no document id \
             (use offset_columns or key_columns)",
            self.kind
        )))
    }
}

/// Server errors (bad table, syntax, access) are the operator's to fix; the rest is transient.
fn classify(e: &mysql_async::Error) -> SinkError {
    match e {
        mysql_async::Error::Server(s) => {
            SinkError::Rejected(format!("{} ({}): {}", s.code, s.state, s.message))
        }
        other => SinkError::Unavailable(redact_url_error(&other.to_string())),
    }
}

/// Error texts of URL parsing and connection can quote the URL; strip anything that looks
/// like `user:password@`.
fn redact_url_error(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for word in s.split_inclusive(char::is_whitespace) {
        match (word.find("://"), word.rfind('@')) {
            (Some(a), Some(b)) if b > a => {
                out.push_str(&word[..a + 3]);
                out.push_str("[redacted]");
                out.push_str(&word[b..]);
            }
            _ => out.push_str(word),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_errors_lose_their_credentials() {
        let s = redact_url_error("bad url mysql://root:hunter2@db:9030/x here");
        assert!(!s.contains("hunter2"), "{s}");
        assert!(s.contains("mysql://[redacted]@db:9030/x"));
    }
}
