//! Reads the pipeline's Stream Loads from the Doris FE, polled on a timer by the shared
//! loop (src/evidence_poll.rs) into a [`StreamLoadView`]: a slow or dead FE never delays a
//! round, and nothing is asked per record.
//!
//! Read-only, two statements a poll on one connection: `SELECT UNIX_TIMESTAMP(), NOW()`
//! (the FE's zone and clock, [`FeClock`]) and `SHOW STREAM LOAD FROM db WHERE Label LIKE
//! "<prefix>_" ORDER BY FinishTime DESC LIMIT 200`. Doris matches `LIKE` here as "the
//! label contains" (`StreamLoadRecordMgr.getStreamLoadRecordByDb`, in every version that
//! has the statement), so the value carries no `%`; what it lets through that is not the
//! pipeline's (a label merely containing the prefix, another table) is dropped here.

use super::history::{FeClock, History};
use super::record::{LoadRecord, local_time};
use crate::clock::Clock;
use crate::config::SecretUrl;
use crate::doris_fe::{self, Columns, columns};
use crate::evidence_poll::{Shared, Source, View};
use crate::logging::printable;
use crate::sink::sql::{ident, string_literal};
use mysql_async::Pool;
use mysql_async::prelude::Queryable;
use std::time::Duration;

/// The newest loads one poll reads: the pipeline's loads between two polls (one per
/// subtask and checkpoint) are far fewer.
pub const LIMIT: usize = 200;

/// Why the FE could not be read as a Stream Load source. Never holds the URL's credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// `doris_fe_url` is not a MySQL URL with a database.
    #[error("audits.pipeline.doris_fe_url is not a valid mysql:// URL naming a database")]
    Url,
}

/// What the poller learnt, shared with the audit loop.
pub type StreamLoadView = View<History>;

/// The shared view: written by the poller after each poll, read by the audit loop.
pub type SharedView = Shared<History>;

/// The FE and what of its loads is the pipeline's.
pub struct StreamLoadSource {
    pool: Pool,
    shown_url: String,
    prefix: String,
    db: String,
    table: String,
    statement: String,
    timeout: Duration,
}

impl StreamLoadSource {
    /// A source reading the loads of `prefix` into `table` (`table` or `db.table`) through
    /// the FE at `url` (its path names the database); every poll is bounded by `timeout`.
    pub fn new(
        url: &SecretUrl,
        prefix: &str,
        table: &str,
        timeout: Duration,
    ) -> Result<Self, SourceError> {
        let db = mysql_async::Opts::from_url(url.expose())
            .ok()
            .and_then(|o| o.db_name().map(str::to_owned))
            .filter(|d| !d.is_empty())
            .ok_or(SourceError::Url)?;
        let pool = doris_fe::pool(url.expose()).ok_or(SourceError::Url)?;
        Ok(Self {
            pool,
            shown_url: crate::evidence_http::shown_url(&url.without_credentials()),
            statement: statement(&db, prefix),
            prefix: prefix.to_owned(),
            db,
            table: table.to_owned(),
            timeout,
        })
    }

    async fn read(&self, clock: &Clock) -> Result<(FeClock, Vec<Columns>), String> {
        let mut conn = self.pool.get_conn().await.map_err(|e| e.to_string())?;
        let sent = clock.now_ms();
        let now: Option<(i64, String)> = conn
            .query_first("SELECT UNIX_TIMESTAMP(), NOW()")
            .await
            .map_err(|e| e.to_string())?;
        let received = clock.now_ms();
        let fe = now
            .and_then(|(unix, now)| FeClock::measure(unix, local_time(&now)?, sent, received))
            .ok_or_else(|| {
                "the FE's SELECT UNIX_TIMESTAMP(), NOW() gave no usable time".to_owned()
            })?;
        let rows: Vec<mysql_async::Row> = conn
            .query(&self.statement)
            .await
            .map_err(|e| e.to_string())?;
        Ok((fe, rows.into_iter().map(columns).collect()))
    }
}

/// The statement listing the newest loads whose label contains `prefix_`.
fn statement(db: &str, prefix: &str) -> String {
    format!(
        "SHOW STREAM LOAD FROM {} WHERE Label LIKE {} ORDER BY FinishTime DESC LIMIT {LIMIT}",
        ident(db),
        string_literal(&format!("{prefix}_"), false)
    )
}

impl Source for StreamLoadSource {
    type History = History;
    const KIND: &'static str = "Doris Stream Load";

    fn subject(&self) -> String {
        printable(&self.prefix, 100)
    }

    fn shown_url(&self) -> String {
        self.shown_url.clone()
    }

    async fn poll(&self, history: &mut History, clock: &Clock) -> Result<Option<String>, String> {
        let (fe, rows) = tokio::time::timeout(self.timeout, self.read(clock))
            .await
            .map_err(|_| {
                format!(
                    "the Doris FE did not answer SHOW STREAM LOAD within {:?}",
                    self.timeout
                )
            })?
            .map_err(|e| format!("SHOW STREAM LOAD failed: {}", crate::logging::redact(&e)))?;
        let mut first_error = None;
        let mut records = Vec::with_capacity(rows.len());
        for cols in &rows {
            match LoadRecord::from_columns(cols) {
                Ok(r) => records.push(r),
                // One odd row must not hide the others' filtered rows.
                Err(e) => {
                    first_error.get_or_insert(e.to_string());
                }
            }
        }
        history.observe(records, fe, (&self.prefix, &self.db, &self.table));
        Ok(first_error)
    }

    fn partial_consequence(&self) -> &'static str {
        "loads in rows that could not be read explain no gap"
    }

    /// Each new load that left rows out, once: the sink dropped records the pipeline read.
    /// The first read lists what the FE still holds from before: one line for all of it.
    fn log_changes(&self, audit: &str, before: &History, after: &History) {
        if before.clock().is_none() {
            if let Some(newest) = after.loads().last() {
                tracing::info!(audit = %audit, evidence = Self::KIND,
                    "the FE lists {} earlier load(s) of the pipeline that left rows out, the newest: {}",
                    after.loads().count(), newest.phrase());
            }
            return;
        }
        let newest_before = before.loads().last().map(|l| l.finished_ms);
        for l in after.loads() {
            let seen = before.loads().any(|b| b == l);
            if !seen && newest_before.is_none_or(|n| l.finished_ms >= n) {
                tracing::warn!(audit = %audit, evidence = Self::KIND, label = %printable(&l.record.label, 160),
                    "{}", l.phrase());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_statement_quotes_the_database_and_carries_no_wildcard() {
        assert_eq!(
            statement("example_db", "doris_sink"),
            "SHOW STREAM LOAD FROM `example_db` WHERE Label LIKE 'doris_sink_' ORDER BY FinishTime DESC LIMIT 200"
        );
        assert_eq!(
            statement("we`ird", "p"),
            "SHOW STREAM LOAD FROM `we``ird` WHERE Label LIKE 'p_' ORDER BY FinishTime DESC LIMIT 200"
        );
    }

    #[test]
    fn a_url_without_a_database_is_refused() {
        let no_db = SecretUrl::new("mysql://u:p@fe:9030");
        assert_eq!(
            StreamLoadSource::new(&no_db, "p", "t", Duration::from_secs(1)).err(),
            Some(SourceError::Url)
        );
    }
}
