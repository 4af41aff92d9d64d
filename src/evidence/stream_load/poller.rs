//! Reads the pipeline's Stream Loads from the Doris FE, polled on a timer by the shared
//! loop (src/evidence/poll.rs) into a [`StreamLoadView`]: a slow or dead FE never delays a
//! round, and nothing is asked per record.
//!
//! Read-only, two statements a poll on one connection: `SELECT UNIX_TIMESTAMP(), NOW()`
//! (the FE's zone and clock, [`FeClock`]) and `SHOW STREAM LOAD FROM db WHERE Label LIKE
//! "<prefix>_" ORDER BY FinishTime DESC LIMIT 1000`. Doris matches `LIKE` here as "the
//! label contains" (`StreamLoadRecordMgr.getStreamLoadRecordByDb`, in every version that
//! has the statement), so the value carries no `%`; what it lets through that is not the
//! pipeline's (a label merely containing the prefix, another table) is dropped here.

use super::history::{FeClock, History};
use super::record::{LoadRecord, local_time};
use crate::clock::Clock;
use crate::config::SecretUrl;
use crate::doris_fe::{self, Columns, columns};
use crate::evidence::poll::{Shared, Source, View};
use crate::logging::printable;
use crate::sink::sql::{ident, string_literal};
use mysql_async::Pool;
use mysql_async::prelude::Queryable;
use std::time::Duration;

/// The newest loads one poll reads: the FE adds the loads of a whole fetch cycle at once,
/// and `LIKE` matches every label containing the prefix (every table of a multi-table sink),
/// so this is kept well above one cycle of one table's loads (one per subtask and
/// checkpoint). The FE keeps `max_stream_load_record_size` (default 5000) in all.
pub const LIMIT: usize = 1_000;

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
            shown_url: crate::evidence::http::shown_url(&url.without_credentials()),
            statement: statement(&db, prefix),
            prefix: prefix.to_owned(),
            db,
            table: table.to_owned(),
            timeout,
        })
    }

    async fn read(&self, clock: &Clock) -> Result<Answer, String> {
        let mut conn = self.pool.get_conn().await.map_err(|e| e.to_string())?;
        let sent = clock.now_ms();
        // Read as text by position, never converted by the driver: a conversion it cannot
        // make panics (review of 497b384, H1), and an FE may answer a number as a decimal.
        let row: Option<mysql_async::Row> = conn
            .query_first(CLOCK)
            .await
            .map_err(|e| format!("{CLOCK} failed: {e}"))?;
        let received = clock.now_ms();
        let texts = row.map(doris_fe::texts).unwrap_or_default();
        let text = |i: usize| texts.get(i).cloned().flatten();
        let fe = text(0)
            .and_then(|u| u.trim().parse::<f64>().ok())
            .filter(|u| u.is_finite())
            .zip(text(1).as_deref().and_then(local_time))
            .and_then(|(unix, now)| FeClock::measure(unix as i64, now, sent, received))
            .ok_or_else(|| format!("the FE's {CLOCK} gave no usable time"))?;
        let zones = match (text(2), text(3)) {
            (Some(system), Some(session))
                if !system.eq_ignore_ascii_case(&session)
                    && !session.eq_ignore_ascii_case("SYSTEM") =>
            {
                Some(format!(
                    "the FE's time_zone ({}) is not its system zone ({}): Doris before 2.1 prints \
                     load times in the system zone, so a load may be placed hours off",
                    printable(&session, 64),
                    printable(&system, 64)
                ))
            }
            _ => None,
        };
        // At most LIMIT rows kept, each value cut (the FE's answer is not trusted to honour
        // LIMIT, nor to keep its values short: review of 497b384, H2); the rest is read
        // and dropped by the driver, within the poll's timeout.
        let mut result = conn
            .query_iter(&self.statement)
            .await
            .map_err(|e| format!("SHOW STREAM LOAD failed: {e}"))?;
        let mut rows = Vec::new();
        while let Some(row) = result
            .next()
            .await
            .map_err(|e| format!("SHOW STREAM LOAD failed: {e}"))?
        {
            if rows.len() == LIMIT {
                break;
            }
            let mut cols = columns(row);
            for v in cols.values_mut().flatten() {
                if v.len() > VALUE_BYTES {
                    let mut end = VALUE_BYTES;
                    while !v.is_char_boundary(end) {
                        end -= 1;
                    }
                    v.truncate(end);
                }
            }
            rows.push(cols);
        }
        drop(result);
        Ok(Answer { fe, rows, zones })
    }
}

/// One poll's answer.
struct Answer {
    fe: FeClock,
    rows: Vec<Columns>,
    /// Why the zone of the load times is in doubt, when it is.
    zones: Option<String>,
}

/// The FE's clock and time zones, one row.
const CLOCK: &str = "SELECT UNIX_TIMESTAMP(), NOW(), @@system_time_zone, @@time_zone";

/// The longest value of a row kept (a label is at most 128 characters, Doris's message
/// and error URL a few hundred).
const VALUE_BYTES: usize = 4_096;

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
        let Answer { fe, rows, zones } = tokio::time::timeout(self.timeout, self.read(clock))
            .await
            .map_err(|_| {
                format!(
                    "the Doris FE did not answer SHOW STREAM LOAD within {:?}",
                    self.timeout
                )
            })?
            // The driver's words may quote the FE's error text: hostile, cleaned.
            .map_err(|e| printable(&crate::logging::redact(&e), 300))?;
        let full = rows.len() == LIMIT;
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
        history.observe(
            records,
            fe,
            (&self.prefix, &self.db, &self.table),
            clock.now_ms(),
        );
        let full = full.then(|| {
            format!(
                "the FE listed {LIMIT} loads whose label contains the prefix, the most one poll \
                 reads: older loads of a gap's window may not be seen"
            )
        });
        let problems: Vec<String> = [first_error, zones, full].into_iter().flatten().collect();
        Ok((!problems.is_empty()).then(|| problems.join("; ")))
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
        for l in after.loads().filter(|l| !before.loads().any(|b| b == *l)) {
            tracing::warn!(audit = %audit, evidence = Self::KIND, label = %printable(&l.record.label, 160),
                "{}", l.phrase());
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
            "SHOW STREAM LOAD FROM `example_db` WHERE Label LIKE 'doris_sink_' ORDER BY FinishTime DESC LIMIT 1000"
        );
        assert_eq!(
            statement("we`ird", "p"),
            "SHOW STREAM LOAD FROM `we``ird` WHERE Label LIKE 'p_' ORDER BY FinishTime DESC LIMIT 1000"
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
