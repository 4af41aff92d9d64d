//! The MySQL-protocol verifier for Apache Doris (and MySQL/MariaDB).
//!
//! Doris before 2.0 has no server-side prepared statements, so every query goes over the TEXT
//! protocol (`COM_QUERY`) with values escaped by [`super::sql`] (but MariaDB's full key
//! batches, see below). Connection setup sends no
//! statement at all (no `SET`, no `SELECT @@socket`/`@@max_allowed_packet` probes) and
//! pooled connections are not reset on return: Doris rejects some session statements and
//! commands that MySQL clients send by default.
//!
//! **Session checks.** How a literal must be escaped is a property of the SESSION: its
//! `sql_mode` (`NO_BACKSLASH_ESCAPES`) and its character set (backslash escaping is only
//! sound in a character set where no multi-byte character contains the byte `0x5C`, as GBK,
//! Big5 and SJIS characters can; and the values are sent as UTF-8). A pool behind a proxy,
//! or a server whose global `sql_mode` changed, can hand out sessions that differ. So each
//! physical connection is checked once, the first time it is used (cached by its
//! connection id, re-checked after any error and every [`SESSION_RECHECK`]):
//! `SELECT @@sql_mode, @@character_set_client, @@character_set_connection`. A session whose
//! character set is not utf8mb4 (on Doris also `utf8`) gets `SET NAMES utf8mb4` (which Doris, MySQL
//! and MariaDB accept), checked again, and refused with a clear error if it did not take.
//! The query is then escaped for THAT session and sent on it.
//!
//! **Key columns (kind `mysql` only).** `key_columns` counts rows per key with one JOIN
//! query per batch ([`sql::count_keys_joined`]; up to [`POOL_SIZE`] batches at once, and for
//! kind `doris` at most [`DORIS_MAX_KEY_ROWS`] derived key rows each), and the auditor's keys are exact byte
//! strings, so the sink must compare exactly too. Doris does; MySQL/MariaDB compare with the
//! column's collation, and a PAD SPACE one (MariaDB `utf8mb4_bin` and every `_ci`/`_cs`;
//! MySQL 5.7 `_bin`) finds `'a.com'` equal to `'a.com '` (`_ci`: to `'A.com'` too). So before
//! the first key query (and again after any error, like the session check) the sink reads
//! the key columns' collations from `information_schema.COLUMNS`; every string column
//! whose collation is not a NO PAD binary one is compared as `CAST(c AS BINARY)` beside the
//! plain comparison (which the key index serves), and one
//! WARN names them, recommending `utf8mb4_nopad_bin` (docs/SINK-DDL.md). Non-string
//! columns (`DATETIME`) stay plain: their literal may be written differently. A key column
//! information_schema does not list is left plain (the query's own error will say why) and
//! nothing is cached, so the next query looks again. With the collations the sink reads
//! `@@version`: on MariaDB 10.3.3 and later the derived key rows are written as a value list
//! ([`sql::KeyRows::Values`], about a quarter less server CPU per key than `UNION ALL
//! SELECT`), and full batches go as a prepared statement over the binary protocol
//! ([`sql::KeyRows::Prepared`], [`sql::count_keys_prepared`]: no value in the SQL text,
//! prepared once per connection and [`sql::PreparedShape`]) where every key column compares
//! a parameter as it does a literal ([`sql::prepared_compares_alike`]: utf8mb4 or not a
//! string; a `latin1_nopad_bin` column was compared case-insensitively); should the server
//! refuse to prepare, the batch and every later one for [`PREPARED_RETRY`] go as text. Doris
//! gets the plain SQL with `UNION ALL SELECT` rows, unchanged.
//!
//! **Rows.** Every answer is read as untyped [`Row`]s and converted value by value
//! ([`column`]): an unexpected type or a NULL (a `VARCHAR` offset column holding `abc`) is a
//! [`SinkError::Rejected`] naming the query and the column, never a panic (mysql_async's
//! typed `query::<(i64, i64)>` panics on a value it cannot convert).

use super::sql::{self, KeyCompare, KeyRows, OffsetQuery};
use super::tls::TlsSettings;
use super::{OffsetExtent, RangeCount, SinkError, Verifier};
use crate::config::SinkColumns;
use crate::ledger::OffsetRun;
use crate::time_scan::{self, TimeColumn, TimeRange};
use crate::types::{Key, Offset, TopicPartition};
use mysql_async::prelude::Queryable;
use mysql_async::{Opts, OptsBuilder, Params, Pool, PoolConstraints, PoolOpts, Row, Value};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod columns;
mod values;

use crate::key_domain::{Fraction, KeyDomain};
use crate::key_semantics::{self, KeySemantics, Learned};
use columns::{ColumnInfo, check_key_columns, utf8_charset};
use std::borrow::Cow;
use values::{classify, column, count, redact_url_error, text};

/// How long a session check of one connection is trusted (errors clear it sooner).
pub const SESSION_RECHECK: Duration = Duration::from_secs(300);
/// Session checks kept at most (the pool holds 4 connections; ids of closed ones linger).
const MAX_SESSIONS: usize = 64;
/// Connections in the pool, and so key batches counted at once.
pub const POOL_SIZE: usize = 4;
/// How long a pooled connection may idle before it is closed (rounds run every
/// `verify_interval`, seconds apart, so a working audit keeps its connections).
const IDLE_CONNECTION_TTL: Duration = Duration::from_secs(60);
/// How long key counts go as text after the server refused a prepared one (then they are
/// prepared again).
pub const PREPARED_RETRY: Duration = Duration::from_secs(300);

/// How long a look at whether the table can still be read by time holds
/// ([`MysqlSink::still_readable`]).
const TIME_RECHECK: Duration = Duration::from_secs(300);
/// Prepared key counts kept per connection (one per shape, least recently used closed):
/// a key column set takes a handful of shapes, from its batch sizes and value lengths.
const PREPARED_SHAPES: usize = 16;
/// kind `doris`: derived-key rows per key count. Doris refuses an expression deeper than
/// `expr_depth_limit` (3000) or with more than `expr_children_limit` (10000) children; the
/// join form has no expression that grows with the batch, only its `UNION ALL` does, and
/// this keeps that below both limits as well (should a planner count it as one).
pub const DORIS_MAX_KEY_ROWS: usize = 2_000;

/// Where the sink rows are and how a record is matched to them.
#[derive(Debug, Clone)]
pub struct MysqlTarget {
    /// `table` or `db.table`.
    pub table: String,
    /// The columns the audit's strategy queries.
    pub columns: SinkColumns,
}

/// What the session check found out about one connection.
#[derive(Debug, Clone, Copy)]
struct Session {
    no_backslash_escapes: bool,
    checked_at: Instant,
}

/// How this sink's key counts are written ([`sql::count_keys_joined`]).
#[derive(Debug, Clone, Default)]
struct KeyQuery {
    /// How each key column is compared in a count's attribution (see the module docs).
    compare: Vec<KeyCompare>,
    /// How the derived key rows are written: a value list where the server takes one.
    rows: KeyRows,
    /// How each key value is written for its column ([`crate::key_domain`]); `None`: as
    /// sent (the columns are not all listed, or a Doris without information_schema).
    domain: Option<KeyDomain>,
    /// The names of the key columns compared by their own collation because the table
    /// merges rows that collation equates (`presence`, see [`MysqlSink::key_query`]). A row
    /// then keeps one spelling of several keys, so its bytes cannot be matched to a key:
    /// such a table is not read by time.
    merged_by_collation: Vec<String>,
}

/// A prepared key count's statement text and what it was written for (see
/// [`MysqlSink::prepared_text`]).
type PreparedText = (sql::PreparedShape, Vec<KeyCompare>, Arc<str>);

/// Prepared key counts (kind `mysql`).
struct Prepared {
    /// When the server last refused a prepared key count: key counts go as text for
    /// `retry` after it.
    refused: Mutex<Option<Instant>>,
    /// How long key counts go as text after a refused prepared one.
    retry: Duration,
    /// The last prepared key count's text, by the shape and comparisons it was written for:
    /// batches of one round share a shape, and writing ~30 kB of placeholders and row
    /// numbers for each of them showed in the key_columns profile.
    text: Mutex<Option<PreparedText>>,
}

/// What the sink showed at start, so that a later read (after a reconnect) that differs is
/// warned about.
struct AtStart {
    /// The inexact key columns last warned about: one WARN per audit (again only if they
    /// change).
    warned_inexact: Mutex<Option<Vec<String>>>,
    /// The key columns' domain the audit took at start ([`Verifier::key_domain`]).
    domain: Mutex<Option<KeyDomain>>,
    /// The key semantics the table showed at start ([`Verifier::key_model`]).
    model: Mutex<Option<KeySemantics>>,
    /// The key semantics the audit decided on ([`Verifier::audit_semantics`]): the table's,
    /// or the configured one where the table did not say (not there yet). The key
    /// comparison follows it ([`MysqlSink::key_query`]).
    audited: Mutex<Option<KeySemantics>>,
}

/// One look at whether the table can be read by time, and when it was taken.
type TimeLook = (Instant, Result<TimeColumn, String>);

/// A pooled MySQL-protocol connection to the sink.
pub struct MysqlSink {
    pool: Pool,
    target: MysqlTarget,
    timeout: Duration,
    kind: &'static str,
    /// Whether connections are encrypted: only to explain refusals.
    tls_enabled: bool,
    /// Session checks by connection id.
    sessions: Mutex<HashMap<u32, Session>>,
    /// kind `mysql`: how a key count is written for this server (see [`KeyQuery`]). Cleared
    /// with the session checks.
    key_query: Mutex<Option<KeyQuery>>,
    /// kind `mysql`: the derived-row form to use whatever `@@version` says (the bench's
    /// same-run comparison of the forms); `None` in the daemon.
    key_rows: Option<KeyRows>,
    /// Prepared key counts: when the server last refused one, and the last one's text.
    prepared: Prepared,
    /// What the sink showed at start, warned about when a later read differs.
    learned: AtStart,
    /// The last look at whether the table can be read by time, and when
    /// ([`MysqlSink::still_readable`]).
    time_checked: Mutex<Option<Arc<TimeLook>>>,
    /// How long one look holds ([`TIME_RECHECK`] by default).
    time_recheck: Duration,
}

impl MysqlSink {
    /// Builds the pool (connects lazily). `url` is `mysql://user[:password]@host:port/db`;
    /// `user`/`password`, when given, override the url's; `tls` decides encryption and
    /// verification ([`super::tls`]). Errors never echo the URL (it may hold a password).
    pub fn new(
        url: &str,
        user: Option<&str>,
        password: Option<&str>,
        target: MysqlTarget,
        timeout: Duration,
        kind: &'static str,
        tls: &TlsSettings,
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
            // Prepared statements only for kind `mysql` (MariaDB's key counts): Doris
            // before 2.0 has none. A few shapes serve every batch (`sql::PreparedShape`).
            .stmt_cache_size(if kind == "mysql" { PREPARED_SHAPES } else { 0 })
            .ssl_opts(tls.ssl_opts())
            .pool_opts(
                PoolOpts::default()
                    .with_constraints(PoolConstraints::new(0, POOL_SIZE).unwrap_or_default())
                    // Idle connections are kept (and closed after this long idle): with no
                    // TTL, mysql_async keeps only the `min` (0) and closed every connection
                    // as it came back, so each query paid a connect, a login and a session
                    // check, and no prepared statement outlived its query.
                    .with_inactive_connection_ttl(IDLE_CONNECTION_TTL)
                    // No COM_RESET_CONNECTION when a connection returns to the pool: older
                    // Doris FEs do not implement it, and the auditor sets no session state
                    // (but `SET NAMES utf8mb4` where a session needs it, see the module docs).
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
            tls_enabled: tls.mode != crate::config::SinkTls::Disabled,
            sessions: Mutex::new(HashMap::new()),
            key_query: Mutex::new(None),
            key_rows: None,
            prepared: Prepared {
                refused: Mutex::new(None),
                retry: PREPARED_RETRY,
                text: Mutex::new(None),
            },
            learned: AtStart {
                warned_inexact: Mutex::new(None),
                domain: Mutex::new(None),
                model: Mutex::new(None),
                audited: Mutex::new(None),
            },
            time_checked: Mutex::new(None),
            time_recheck: TIME_RECHECK,
        })
    }

    /// Tries prepared key counts again this long after the server refused one (default
    /// [`PREPARED_RETRY`]; tests shorten it).
    pub fn with_prepared_retry(mut self, after: Duration) -> Self {
        self.prepared.retry = after;
        self
    }

    /// Whether key counts go as text now: the server refused a prepared one less than
    /// `prepared_retry` ago.
    fn prepared_refused_now(&self) -> bool {
        self.prepared
            .refused
            .lock()
            .map(|at| at.is_some_and(|at| at.elapsed() < self.prepared.retry))
            .unwrap_or(true)
    }

    /// Looks again whether the table can still be read by time this long after the last
    /// look (default 5 minutes; tests shorten it).
    pub fn with_time_recheck(mut self, after: Duration) -> Self {
        self.time_recheck = after;
        self
    }

    /// Writes the derived key rows of kind `mysql`'s key counts as `rows`, whatever the
    /// server's version (benchmarks compare the forms on one server with it).
    pub fn with_key_rows(mut self, rows: KeyRows) -> Self {
        self.key_rows = Some(rows);
        self
    }

    async fn with_timeout<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, mysql_async::Error>>,
    ) -> Result<T, SinkError> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                self.forget_sessions();
                Err(classify(&e, self.tls_enabled))
            }
            Err(_) => {
                self.forget_sessions();
                Err(SinkError::Unavailable(format!(
                    "query timed out after {:?}",
                    self.timeout
                )))
            }
        }
    }

    /// After any failure every connection is checked again before its next query, and the
    /// key columns' collations are read again before the next key count.
    fn forget_sessions(&self) {
        if let Ok(mut m) = self.sessions.lock() {
            m.clear();
        }
        if let Ok(mut k) = self.key_query.lock() {
            *k = None;
        }
    }

    /// How a key count is written (see [`KeyQuery`]), read on `conn` (its session checked,
    /// `nbe` its mode) from `@@version` and information_schema, and cached until the next
    /// error (a reconnect reads it again): for Doris plain comparisons and `UNION ALL
    /// SELECT` rows; for MySQL/MariaDB the collation checks and the row form the server
    /// takes. Both convert key values to their columns' types ([`crate::key_domain`]).
    async fn key_query(
        &self,
        conn: &mut mysql_async::Conn,
        nbe: bool,
    ) -> Result<KeyQuery, SinkError> {
        if let Ok(k) = self.key_query.lock()
            && let Some(k) = k.as_ref()
        {
            return Ok(k.clone());
        }
        let doris = self.kind != "mysql";
        let info = match self.read_columns(conn, nbe).await {
            Ok(info) => info,
            // A Doris that cannot list its columns (an old FE, no privilege on
            // information_schema) is still asked, comparing key values as sent: the one
            // behaviour it had before column types were read. Said once per reconnect.
            Err(e) if doris => {
                tracing::warn!(
                    table = %self.target.table,
                    error = %e,
                    "cannot read the key columns' types from the sink: key values are \
                     compared as written (a DATETIME or DECIMAL key column can then read \
                     records as lost whose value the sink converted on load)"
                );
                let q = KeyQuery::default();
                if let Ok(mut k) = self.key_query.lock() {
                    *k = Some(q.clone());
                }
                return Ok(q);
            }
            Err(e) => return Err(e),
        };
        let Some((server, info)) = info else {
            // Not a table name the key query can write either: its error will say so.
            return Ok(KeyQuery {
                rows: self.key_rows.unwrap_or_default(),
                ..KeyQuery::default()
            });
        };
        let domain = columns::key_domain(
            &self.target.columns.key,
            &info,
            Fraction::for_server(self.kind, &server.version, &server.sql_mode),
        );
        self.check_learned(domain.as_ref());
        self.check_learned_model(conn, nbe).await;
        if doris {
            // Doris compares bytes: plain comparisons, `UNION ALL SELECT` rows.
            let q = KeyQuery {
                domain,
                ..KeyQuery::default()
            };
            if let Ok(mut k) = self.key_query.lock() {
                *k = Some(q.clone());
            }
            return Ok(q);
        }
        let rows = self
            .key_rows
            .unwrap_or_else(|| sql::key_rows_for(&server.version));
        let presence = self
            .learned
            .audited
            .lock()
            .ok()
            .and_then(|m| *m)
            .is_some_and(|m| m == KeySemantics::Presence);
        let check = check_key_columns(&self.target.columns.key, &info, presence);
        let merged_by_collation = check.merged.clone();
        // A column the prepared form would compare otherwise than the text: text.
        let rows = match rows {
            KeyRows::Prepared if !check.prepared => KeyRows::Values,
            rows => rows,
        };
        if !check.missing.is_empty() {
            tracing::debug!(
                table = %self.target.table,
                missing = ?check.missing,
                "key columns not in information_schema.COLUMNS: compared plainly"
            );
            return Ok(KeyQuery {
                compare: check.compare,
                rows,
                domain,
                merged_by_collation,
            });
        }
        if !check.inexact.is_empty()
            && let Ok(mut w) = self.learned.warned_inexact.lock()
            && w.as_ref() != Some(&check.inexact)
        {
            tracing::warn!(
                table = %self.target.table,
                columns = %check.inexact.join(", "),
                "key columns with a collation that is not byte-exact (PAD SPACE ignores \
                 trailing spaces, _ci ignores case) or a character set other than UTF-8: \
                 the auditor compares them byte-exactly itself (CAST(column AS BINARY) when \
                 attributing rows to keys, slower on the sink); give them a \
                 NO PAD binary collation, utf8mb4_nopad_bin on MariaDB or utf8mb4_0900_bin \
                 on MySQL 8 (docs/SINK-DDL.md)"
            );
            *w = Some(check.inexact.clone());
        }
        if !merged_by_collation.is_empty() {
            tracing::info!(
                table = %self.target.table,
                columns = %merged_by_collation.join(", "),
                "the table merges rows whose keys these columns' collations equate (a \
                 PRIMARY/UNIQUE key, key semantics presence): keys are counted by the \
                 table's own comparison, so two spellings it equates are one key, and one \
                 by one (a row keeps one spelling: it cannot be read by time)"
            );
        }
        let query = KeyQuery {
            compare: check.compare,
            rows,
            domain,
            merged_by_collation,
        };
        if let Ok(mut k) = self.key_query.lock() {
            *k = Some(query.clone());
        }
        Ok(query)
    }

    /// What the table says of its key model ([`crate::key_semantics`]): MySQL/MariaDB its
    /// unique indexes, Doris its `SHOW CREATE TABLE`.
    async fn read_model(&self, c: &mut mysql_async::Conn, nbe: bool) -> Result<Learned, SinkError> {
        const WHAT: &str = "key model";
        let doris = self.kind != "mysql";
        // A table that is not there (yet) has no model; its columns say whether it is.
        match self.read_columns(c, nbe).await {
            Ok(Some((_, info))) if info.is_empty() => return Ok(Learned::NoTable),
            Ok(Some(_)) => {}
            Ok(None) => {
                return Ok(Learned::Unreadable(format!(
                    "table `{}` is not `name` or `db.name`",
                    self.target.table
                )));
            }
            // A Doris that cannot list its columns still shows its DDL.
            Err(_) if doris => {}
            Err(e) => return Err(e),
        }
        let keys = &self.target.columns.key;
        if doris {
            let rows = self
                .rows(c, sql::show_create_table(&self.target.table))
                .await?;
            let ddl = rows
                .first()
                .map(|r| text(r, 1, WHAT))
                .transpose()?
                .flatten()
                .unwrap_or_default();
            if let Some(model) = key_semantics::from_doris_ddl(keys, &ddl) {
                return Ok(Learned::Known(model));
            }
            // A Doris OLAP table always names its model: one that does not is unreadable.
            // A table of another engine merges by its unique indexes, as MySQL's do.
            if ddl.is_empty() || key_semantics::is_doris_olap(&ddl) {
                return Ok(Learned::Unreadable(
                    "SHOW CREATE TABLE names no DUPLICATE, UNIQUE or AGGREGATE KEY".into(),
                ));
            }
        }
        let Some(q) = sql::unique_index_columns(&self.target.table, nbe) else {
            return Ok(Learned::Unreadable("no table name".into()));
        };
        let mut indexes = Vec::new();
        for row in self.rows(c, q).await? {
            indexes.push((
                text(&row, 0, WHAT)?.unwrap_or_default(),
                text(&row, 1, WHAT)?.unwrap_or_default(),
            ));
        }
        Ok(Learned::Known(key_semantics::from_unique_indexes(
            keys, &indexes,
        )))
    }

    /// After a reconnect: the key model read again, and one WARN when it is no longer the
    /// one the audit took at start (an ALTER since: the verdicts follow the start's model
    /// until the audit restarts, which re-reads it, or refuses a configured one).
    async fn check_learned_model(&self, c: &mut mysql_async::Conn, nbe: bool) {
        let Some(old) = self.learned.model.lock().ok().and_then(|m| *m) else {
            return;
        };
        match self.read_model(c, nbe).await {
            Ok(Learned::Known(t)) if t.semantics != old => tracing::warn!(
                table = %self.target.table,
                at_start = %old,
                now = %t.semantics,
                reason = %t.reason,
                "the sink table's key model changed since the audit started: verdicts still \
                 follow the model read at start; restart the audit to take the new one"
            ),
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "cannot read the sink's key model again"),
        }
    }

    /// `@@version`, `@@sql_mode` and the table's columns from information_schema
    /// ([`ColumnInfo`]);
    /// `None` for a table name of more than two parts (no query can name it).
    async fn read_columns(
        &self,
        conn: &mut mysql_async::Conn,
        nbe: bool,
    ) -> Result<Option<(ServerInfo, Vec<ColumnInfo>)>, SinkError> {
        const WHAT: &str = "key column check";
        // The sql_mode decides how DATETIME fractions past the precision are stored
        // ([`Fraction::for_server`]).
        let server = self
            .rows(conn, "SELECT @@version, @@sql_mode".into())
            .await?;
        let field = |i: usize| -> Result<String, SinkError> {
            Ok(server
                .first()
                .map(|r| text(r, i, WHAT))
                .transpose()?
                .flatten()
                .unwrap_or_default())
        };
        let (version, sql_mode) = (field(0)?, field(1)?);
        let Some(q) = sql::column_collations(&self.target.table, nbe) else {
            return Ok(None);
        };
        let number = |row: &Row, i: usize| -> Result<Option<u32>, SinkError> {
            Ok(text(row, i, WHAT)?.and_then(|t| t.trim().parse().ok()))
        };
        let mut info = Vec::new();
        for row in self.rows(conn, q).await? {
            info.push(ColumnInfo {
                name: text(&row, 0, WHAT)?.unwrap_or_default(),
                data_type: text(&row, 1, WHAT)?.unwrap_or_default(),
                collation: text(&row, 2, WHAT)?,
                charset: text(&row, 3, WHAT)?,
                column_type: text(&row, 4, WHAT)?.unwrap_or_default(),
                datetime_precision: number(&row, 5)?,
                numeric_precision: number(&row, 6)?,
                numeric_scale: number(&row, 7)?,
            });
        }
        Ok(Some((ServerInfo { version, sql_mode }, info)))
    }

    /// A key column domain read after a reconnect that differs from the one the audit took
    /// at start: the keys already read were written for the old types (the SQL converts
    /// with the new ones, but keys the old types split or joined stay so): one WARN.
    fn check_learned(&self, now: Option<&KeyDomain>) {
        let Ok(learned) = self.learned.domain.lock() else {
            return;
        };
        if let Some(old) = learned.as_ref()
            && now != Some(old)
        {
            tracing::warn!(
                table = %self.target.table,
                at_start = %old.describe(),
                now = %now.map(KeyDomain::describe).unwrap_or_else(|| "unknown".into()),
                "the sink's key column types changed since the audit started: keys read \
                 since are compared with the new types but were written for the old ones; \
                 restart the auditor to read every key in the new types"
            );
        }
    }

    /// The prepared statement's shape for a batch of key `values`, where this server and
    /// the batch take one (see [`sql::PreparedShape`]).
    fn prepared_shape(
        &self,
        how: &KeyQuery,
        values: &[Vec<Cow<'_, str>>],
    ) -> Option<sql::PreparedShape> {
        if how.rows != KeyRows::Prepared || self.prepared_refused_now() {
            return None;
        }
        sql::PreparedShape::of(values, self.target.columns.key.len())
    }

    /// One key count as a prepared statement (mysql_async prepares it once per connection
    /// and shape, see the statement cache in [`Self::new`]).
    async fn count_prepared(
        &self,
        conn: &mut mysql_async::Conn,
        how: &KeyQuery,
        shape: &sql::PreparedShape,
        values: &[Vec<Cow<'_, str>>],
    ) -> Result<Vec<Row>, SinkError> {
        let q = self.prepared_text(how, shape);
        let params: Vec<Value> = shape
            .params(values)
            .into_iter()
            .map(|v| v.map_or(Value::NULL, |v| Value::Bytes(v.as_bytes().to_vec())))
            .collect();
        self.with_timeout(conn.exec::<Row, _, _>(&*q, Params::Positional(params)))
            .await
    }

    /// The text of a prepared key count of `shape` ([`sql::count_keys_prepared`]), written
    /// once per shape and comparisons in a row.
    fn prepared_text(&self, how: &KeyQuery, shape: &sql::PreparedShape) -> Arc<str> {
        let mut last = self
            .prepared
            .text
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((s, c, text)) = last.as_ref()
            && s == shape
            && *c == how.compare
        {
            return Arc::clone(text);
        }
        let text: Arc<str> = sql::count_keys_prepared(
            &self.target.table,
            &self.target.columns.key,
            &how.compare,
            shape,
        )
        .into();
        *last = Some((shape.clone(), how.compare.clone(), Arc::clone(&text)));
        text
    }

    /// After the server refused a prepared key count (the text form then answered): key
    /// counts go as text for `prepared_retry`, then prepared again, so that one passing
    /// error (a server at its `max_prepared_stmt_count` for a moment, a lock wait) does not
    /// cost the server the text form's parsing for the daemon's life. One WARN per refusal
    /// that starts a text period.
    fn refuse_prepared(&self, why: &str) {
        let Ok(mut at) = self.prepared.refused.lock() else {
            return;
        };
        let warn = !at.is_some_and(|t| t.elapsed() < self.prepared.retry);
        *at = Some(Instant::now());
        drop(at);
        if warn {
            tracing::warn!(
                table = %self.target.table,
                error = %why,
                retry_after_s = self.prepared.retry.as_secs(),
                "the sink refused a prepared key count: key counts are sent as SQL text \
                 for a while, then prepared again (slower on the server, same answers)"
            );
        }
    }

    /// Whether the table can be read by time ([`Verifier::time_scan`]), on `conn` with the
    /// key columns as `how` read them: the time column ([`time_scan::time_column`]) and a
    /// usable index starting with it (a B-tree one the optimizer may use: not a HASH one,
    /// not MariaDB's `IGNORED`, not MySQL's invisible), else why not.
    async fn time_readable(
        &self,
        conn: &mut mysql_async::Conn,
        nbe: bool,
        how: &KeyQuery,
    ) -> Result<Result<TimeColumn, String>, SinkError> {
        let Some(domain) = how.domain.as_ref() else {
            return Ok(Err(
                "the key columns' types are not listed in information_schema".into(),
            ));
        };
        let column = match time_scan::time_column(domain) {
            Ok(column) => column,
            Err(why) => return Ok(Err(why)),
        };
        if !how.merged_by_collation.is_empty() {
            return Ok(Err(format!(
                "the table merges keys that the collation of {} equates, and a row keeps one \
                 of their spellings: its bytes cannot be matched to a key",
                how.merged_by_collation.join(", ")
            )));
        }
        let Some(q) = sql::leading_index_columns(&self.target.table, nbe) else {
            return Ok(Err("the table name is not `name` or `db.name`".into()));
        };
        // Columns by name: `IGNORED` (MariaDB 10.6+) and `IS_VISIBLE` (MySQL 8) are not on
        // every server.
        let field = |row: &Row, name: &str| -> Option<String> {
            let i = row
                .columns_ref()
                .iter()
                .position(|c| c.name_str().eq_ignore_ascii_case(name))?;
            text(row, i, "index check").ok().flatten()
        };
        let usable = self.rows(conn, q).await?.iter().any(|row| {
            let named =
                field(row, "COLUMN_NAME").is_some_and(|n| n.eq_ignore_ascii_case(&column.name));
            let btree = field(row, "INDEX_TYPE").is_none_or(|t| t.eq_ignore_ascii_case("BTREE"));
            let ignored = field(row, "IGNORED").is_some_and(|v| v.eq_ignore_ascii_case("YES"));
            let hidden = field(row, "IS_VISIBLE").is_some_and(|v| v.eq_ignore_ascii_case("NO"));
            named && btree && !ignored && !hidden
        });
        if !usable {
            return Ok(Err(format!(
                "no usable index of the table starts with its time column `{}`, so a second's \
                 rows are not one read (add a B-tree one: ALTER TABLE … ADD INDEX (`{}`, …), \
                 docs/SINK-DDL.md)",
                column.name, column.name
            )));
        }
        Ok(Ok(column))
    }

    /// Whether `column` can still be read by time: the answer of [`Self::time_readable`],
    /// read again every `time_recheck` (an index dropped or ignored since start would
    /// make every read a scan of the table; a key column altered since would make its
    /// text another than its keys'). One WARN when it no longer can.
    async fn still_readable(
        &self,
        conn: &mut mysql_async::Conn,
        nbe: bool,
        how: &KeyQuery,
        column: &TimeColumn,
    ) -> Result<bool, SinkError> {
        let fresh = self
            .time_checked
            .lock()
            .ok()
            .and_then(|c| c.clone())
            .filter(|look| look.0.elapsed() < self.time_recheck);
        let look = match fresh {
            Some(look) => look,
            None => {
                let answer = self.time_readable(conn, nbe, how).await?;
                let look = Arc::new((Instant::now(), answer));
                if let Ok(mut checked) = self.time_checked.lock() {
                    let was = checked.replace(Arc::clone(&look));
                    if let (Some(Ok(_)), Err(why)) = (was.as_ref().map(|w| &w.1), &look.1) {
                        tracing::warn!(
                            table = %self.target.table,
                            reason = %why,
                            "the sink table can no longer be read by time: due keys are \
                             counted one by one until a later look (every 5 minutes) finds \
                             it readable again"
                        );
                    }
                }
                look
            }
        };
        let answer = &look.1;
        // The key columns as read now (after a reconnect) must still give this column.
        let now = how.domain.as_ref().map(time_scan::time_column);
        Ok(answer.as_ref() == Ok(column) && now.as_ref() == Some(&Ok(column.clone())))
    }

    /// Runs `q` on `conn` and returns its rows, untyped (see [`column`]).
    async fn rows(&self, conn: &mut mysql_async::Conn, q: String) -> Result<Vec<Row>, SinkError> {
        self.with_timeout(conn.query::<Row, _>(q)).await
    }

    /// The session check of `conn` (see the module docs): whether its literals must be
    /// written for NO_BACKSLASH_ESCAPES. Fixes a non-UTF-8 character set or refuses it.
    async fn session(&self, conn: &mut mysql_async::Conn) -> Result<bool, SinkError> {
        let id = conn.id();
        if let Ok(m) = self.sessions.lock()
            && let Some(s) = m.get(&id)
            && s.checked_at.elapsed() < SESSION_RECHECK
        {
            return Ok(s.no_backslash_escapes);
        }
        let mut state = self.read_session(conn).await?;
        // MySQL/MariaDB's utf8mb3 cannot carry 4-byte characters (emoji in a record value
        // would not compare as sent): only utf8mb4 there. Doris's `utf8` is full UTF-8.
        let full = self.kind != "mysql";
        if !utf8_charset(&state.1, full) || !utf8_charset(&state.2, full) {
            tracing::info!(
                connection = id,
                character_set_client = %state.1,
                character_set_connection = %state.2,
                "the sink session does not use UTF-8: sending SET NAMES utf8mb4"
            );
            self.with_timeout(conn.query_drop("SET NAMES utf8mb4"))
                .await?;
            state = self.read_session(conn).await?;
            if !utf8_charset(&state.1, full) || !utf8_charset(&state.2, full) {
                return Err(SinkError::Rejected(format!(
                    "the sink session's character set is character_set_client={} / \
                     character_set_connection={} and SET NAMES utf8mb4 did not change it: \
                     values are sent as UTF-8 and escaped for it, so the auditor refuses to \
                     query this session (configure the server, proxy or user for utf8mb4)",
                    state.1, state.2
                )));
            }
        }
        let nbe = state
            .0
            .to_ascii_uppercase()
            .contains("NO_BACKSLASH_ESCAPES");
        if let Ok(mut m) = self.sessions.lock() {
            if m.len() >= MAX_SESSIONS {
                m.clear();
            }
            m.insert(
                id,
                Session {
                    no_backslash_escapes: nbe,
                    checked_at: Instant::now(),
                },
            );
        }
        Ok(nbe)
    }

    /// (sql_mode, character_set_client, character_set_connection) of the session.
    async fn read_session(
        &self,
        conn: &mut mysql_async::Conn,
    ) -> Result<(String, String, String), SinkError> {
        const WHAT: &str = "session check";
        let rows = self
            .rows(
                conn,
                "SELECT @@sql_mode, @@character_set_client, @@character_set_connection".into(),
            )
            .await?;
        let row = rows
            .first()
            .ok_or_else(|| SinkError::Rejected(format!("{WHAT}: the server returned no row")))?;
        Ok((
            text(row, 0, WHAT)?.unwrap_or_default(),
            text(row, 1, WHAT)?.unwrap_or_default(),
            text(row, 2, WHAT)?.unwrap_or_default(),
        ))
    }

    /// A connection whose session passed the check, and its NO_BACKSLASH_ESCAPES mode.
    async fn checked_conn(&self) -> Result<(mysql_async::Conn, bool), SinkError> {
        let mut c = self.conn().await?;
        let nbe = self.session(&mut c).await?;
        Ok((c, nbe))
    }

    async fn conn(&self) -> Result<mysql_async::Conn, SinkError> {
        self.with_timeout(self.pool.get_conn()).await
    }

    fn offset_query<'a>(&'a self, tp: &'a TopicPartition) -> OffsetQuery<'a> {
        OffsetQuery {
            table: &self.target.table,
            partition_column: &self.target.columns.partition,
            offset_column: &self.target.columns.offset,
            topic_column: self.target.columns.topic.as_deref(),
            topic: &tp.topic,
            partition: tp.partition,
        }
    }

    /// Runs one arbitrary statement (tests use it to write rows), on a connection whose
    /// session passed the check. A statement that holds escaped literals must be built for
    /// the session it runs on: use [`Self::execute_escaped`].
    pub async fn execute(&self, sql: &str) -> Result<(), SinkError> {
        let (mut c, _) = self.checked_conn().await?;
        self.with_timeout(c.query_drop(sql)).await
    }

    /// Builds a statement for the session it will run on (`build` gets its
    /// NO_BACKSLASH_ESCAPES mode, to pass to [`super::sql::string_literal`]) and runs it on
    /// that same connection. `replay --to-sink` writes rows with it.
    pub async fn execute_escaped(
        &self,
        build: impl FnOnce(bool) -> String,
    ) -> Result<(), SinkError> {
        let (mut c, nbe) = self.checked_conn().await?;
        let sql = build(nbe);
        self.with_timeout(c.query_drop(sql)).await
    }

    /// Whether one (checked) session of the pool runs with NO_BACKSLASH_ESCAPES. Other
    /// sessions may differ: to send a statement built with it, use [`Self::execute_escaped`].
    pub async fn no_backslash_escapes(&self) -> Result<bool, SinkError> {
        self.checked_conn().await.map(|(_, nbe)| nbe)
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
        // No session check: `SELECT 1` has no literal, and the check costs a round trip.
        let mut c = self.conn().await?;
        self.rows(&mut c, "SELECT 1".into()).await.map(drop)
    }

    async fn key_domain(&self) -> Result<Option<KeyDomain>, SinkError> {
        if self.target.columns.key.is_empty() {
            return Ok(None);
        }
        let (mut c, nbe) = self.checked_conn().await?;
        let domain = self.key_query(&mut c, nbe).await?.domain;
        if let Ok(mut learned) = self.learned.domain.lock() {
            learned.clone_from(&domain);
        }
        Ok(domain)
    }

    async fn key_model(&self) -> Result<Option<Learned>, SinkError> {
        if self.target.columns.key.is_empty() {
            return Ok(None);
        }
        let (mut c, nbe) = self.checked_conn().await?;
        let learned = self.read_model(&mut c, nbe).await?;
        if let Learned::Known(t) = &learned
            && let Ok(mut m) = self.learned.model.lock()
        {
            *m = Some(t.semantics);
        }
        Ok(Some(learned))
    }

    fn audit_semantics(&self, semantics: KeySemantics) {
        let changed = self
            .learned
            .audited
            .lock()
            .map(|mut a| a.replace(semantics) != Some(semantics))
            .unwrap_or(false);
        // The key comparison and the read by time depend on it ([`Self::key_query`]):
        // taken again with it.
        if changed {
            if let Ok(mut k) = self.key_query.lock() {
                *k = None;
            }
            if let Ok(mut t) = self.time_checked.lock() {
                *t = None;
            }
        }
    }

    async fn count_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<RangeCount, SinkError> {
        const WHAT: &str = "range count";
        let (mut c, nbe) = self.checked_conn().await?;
        let q = sql::count_offsets(&self.offset_query(tp), runs, nbe);
        let rows = self.rows(&mut c, q).await?;
        let row = rows
            .first()
            .ok_or_else(|| SinkError::Rejected(format!("{WHAT}: the server returned no row")))?;
        Ok(RangeCount {
            rows: count(row, 0, WHAT)?,
            distinct: count(row, 1, WHAT)?,
        })
    }

    async fn list_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<Vec<(Offset, u64)>, SinkError> {
        const WHAT: &str = "offset listing";
        let (mut c, nbe) = self.checked_conn().await?;
        let q = sql::list_offsets(&self.offset_query(tp), runs, nbe);
        let mut out = Vec::new();
        for row in self.rows(&mut c, q).await? {
            let offset: Option<i64> = column(&row, 0, WHAT, "an integer offset")?;
            let n = count(&row, 1, WHAT)?;
            if let Some(o) = offset {
                out.push((o, n));
            }
        }
        Ok(out)
    }

    async fn offset_extent(&self, partitions: &[i32]) -> Result<Option<OffsetExtent>, SinkError> {
        const WHAT: &str = "offset extent";
        if self.target.columns.topic.is_some() {
            return Ok(None);
        }
        let (mut c, _) = self.checked_conn().await?;
        let q = sql::offset_extent(
            &self.target.table,
            &self.target.columns.partition,
            &self.target.columns.offset,
            partitions,
        );
        let mut out = OffsetExtent::default();
        for row in self.rows(&mut c, q).await? {
            let k: Option<i64> = column(&row, 0, WHAT, "a partition number")?;
            let lo: Option<i64> = column(&row, 1, WHAT, "an integer")?;
            match k {
                Some(-1) => {
                    let hi: Option<i64> = column(&row, 2, WHAT, "an integer")?;
                    out.partitions = lo.zip(hi);
                }
                Some(p) => {
                    if let Ok(p) = i32::try_from(p) {
                        out.max_offsets.push((p, lo));
                    }
                }
                None => {}
            }
        }
        Ok(Some(out))
    }

    async fn count_keys(&self, keys: &[&Key]) -> Result<Vec<u64>, SinkError> {
        const WHAT: &str = "key count";
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        // A key that does not fit the key columns (one stored before `match.key` changed)
        // would turn the whole batch into a query that selects nothing: every key of it
        // counted 0. An error instead: the batch's verdicts stay unknown, never missing.
        let columns = self.target.columns.key.len();
        if let Some(k) = keys.iter().find(|k| k.len() != columns) {
            return Err(SinkError::Rejected(format!(
                "{WHAT}: a key of {} values does not fit the {columns} key columns {:?} \
                 (a key stored before match.key changed?)",
                k.len(),
                self.target.columns.key
            )));
        }
        let (mut c, nbe) = self.checked_conn().await?;
        let how = self.key_query(&mut c, nbe).await?;
        // Each value as its column stores it. The decoder wrote keys so already; a key
        // restored from state written before it did is converted here, and one its column
        // cannot store (the decoder counts such records unverifiable) is sent as written,
        // as it always was. Keys that now read alike join the same rows and the row is
        // counted under the first of them (see `sql::count_keys_joined`).
        let domain = how.domain.as_ref().filter(|d| !d.is_identity());
        let values: Vec<Vec<Cow<'_, str>>> = keys
            .iter()
            .map(|k| {
                k.values()
                    .enumerate()
                    .map(|(i, v)| match domain {
                        Some(d) => d.value(i, v).unwrap_or(Cow::Borrowed(v)),
                        None => Cow::Borrowed(v),
                    })
                    .collect()
            })
            .collect();
        let text = || {
            sql::count_keys_joined(
                &self.target.table,
                &self.target.columns.key,
                &how.compare,
                how.rows,
                &values,
                nbe,
            )
        };
        let answer = match self.prepared_shape(&how, &values) {
            None => self.rows(&mut c, text()).await?,
            Some(shape) => match self.count_prepared(&mut c, &how, &shape, &values).await {
                Ok(rows) => rows,
                // Refused: the text form may still be answered (a server at its prepared
                // statement limit, a proxy without the binary protocol). If it is, text
                // from now on; if not, its error is the one to report.
                Err(SinkError::Rejected(e)) => {
                    let rows = self.rows(&mut c, text()).await?;
                    self.refuse_prepared(&e);
                    rows
                }
                Err(e) => return Err(e),
            },
        };
        let mut out = vec![0u64; keys.len()];
        for row in answer {
            let k: Option<i64> = column(&row, 0, WHAT, "a key index")?;
            let joined = count(&row, 1, WHAT)?;
            let per_row = count(&row, 2, WHAT)?;
            // Every row of a group joins the same derived rows (see `sql::count_keys_joined`):
            // anything else is an answer the auditor cannot read as row counts.
            if per_row == 0 || joined % per_row != 0 {
                return Err(SinkError::Rejected(format!(
                    "{WHAT}: a group of {joined} joined rows over {per_row} key rows: \
                     the sink compares the key columns in a way the auditor cannot count"
                )));
            }
            if let Some(slot) = k
                .and_then(|k| usize::try_from(k).ok())
                .and_then(|k| out.get_mut(k))
            {
                *slot += joined / per_row;
            }
        }
        Ok(out)
    }

    async fn time_scan(&self) -> Result<Result<TimeColumn, String>, SinkError> {
        if self.kind != "mysql" {
            // Doris keeps a table's rows in the order of its key columns, not in time
            // order, and no Doris here could measure what reading one second costs it.
            return Ok(Err(
                "Doris tables are read key by key (reading seconds is measured on MySQL and \
                 MariaDB only)"
                    .into(),
            ));
        }
        let (mut c, nbe) = self.checked_conn().await?;
        let how = self.key_query(&mut c, nbe).await?;
        let answer = self.time_readable(&mut c, nbe, &how).await?;
        if let Ok(mut checked) = self.time_checked.lock() {
            *checked = Some(Arc::new((Instant::now(), answer.clone())));
        }
        Ok(answer)
    }

    async fn count_keys_in_time(
        &self,
        column: &TimeColumn,
        ranges: &[TimeRange],
        keys: &[&Key],
        limit: u64,
    ) -> Result<Option<Vec<u64>>, SinkError> {
        if keys.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let columns = &self.target.columns.key;
        let (mut c, nbe) = self.checked_conn().await?;
        let how = self.key_query(&mut c, nbe).await?;
        // No longer readable: the keys go back to be counted by key, in batches.
        if !self.still_readable(&mut c, nbe, &how, column).await? {
            return Ok(None);
        }
        // A key its column would store otherwise (restored from state written before keys
        // were converted, or a column altered since start) may lie in another second than
        // its bucket, or be one the column cannot hold: it is counted by key, as
        // `count_keys` counts it. The rest, each already in its stored form and so distinct
        // from every other, are read.
        let domain = how.domain.as_ref().filter(|d| !d.is_identity());
        let mut by_key: Vec<(usize, Option<Key>)> = Vec::new();
        // The keys read, each in its stored form: filed as each is checked, in the same
        // pass (a key's bytes read once from memory, not once per pass).
        let mut read = ReadIndex::with_capacity(keys.len());
        for (i, k) in keys.iter().enumerate() {
            match domain.map(|d| d.key(k)) {
                Some(Ok(Some(stored))) => by_key.push((i, Some(stored))),
                Some(Err(_)) => by_key.push((i, None)),
                _ => read.file(keys, i),
            }
        }
        let bounds: Vec<(String, String)> = ranges.iter().map(|r| r.bounds(column.unit)).collect();
        let q = sql::keys_in_time(
            &self.target.table,
            columns,
            &how.compare,
            &column.name,
            &bounds,
            limit.saturating_add(1),
            nbe,
        );
        // Counted on the round's task: read on tasks of their own, four reads streamed at
        // once on this 2-core VM and kept the server busy longer per million rows (3.2-3.5 s
        // against 2.0-2.7 s, same runs) for no gain end to end.
        // No key to read (every one goes by key, as after the types changed under the
        // audit): no read.
        let read_nothing = read.index.is_empty();
        let counted = async {
            if read_nothing {
                Ok(Read::Counted(vec![0u64; keys.len()]))
            } else {
                count_read_rows(&mut c, q, keys, read, limit, domain).await
            }
        };
        let mut out = match self.with_timeout(counted).await? {
            Read::Counted(out) => out,
            Read::OverLimit => return Ok(None),
            Read::Restated => {
                // The column types changed under the audit (an ALTER): taken again at the
                // next question, and these seconds counted by key meanwhile, which
                // compares by the column's type, as before the change.
                if let Ok(mut k) = self.key_query.lock() {
                    *k = None;
                }
                if let Ok(mut t) = self.time_checked.lock() {
                    *t = None;
                }
                tracing::warn!(
                    table = %self.target.table,
                    "the sink prints its key columns otherwise than their types read at \
                     start (an ALTER TABLE since?): the seconds read are counted key by \
                     key, and the types are read again; restart the audit to take them \
                     for the keys it reads from now on"
                );
                return Ok(None);
            }
        };
        drop(c);
        // Rare (keys of old state, a column altered): each stored form counted once, in
        // batches of 1,000, and its count given to every key that stores so, as when each
        // partition asked for its own keys (within one batch the row goes to the first of
        // two keys that store alike: the other would read as lost).
        let mut forms: foldhash::HashMap<Vec<u8>, usize> = foldhash::HashMap::default();
        let mut asked: Vec<&Key> = Vec::new();
        let form_of: Vec<(usize, usize)> = by_key
            .iter()
            .map(|(i, stored)| {
                let form = stored.as_ref().unwrap_or(keys[*i]).as_bytes().to_vec();
                let f = *forms.entry(form).or_insert_with(|| {
                    asked.push(keys[*i]);
                    asked.len() - 1
                });
                (*i, f)
            })
            .collect();
        let mut counts: Vec<u64> = Vec::with_capacity(asked.len());
        for batch in asked.chunks(1_000) {
            counts.extend(self.count_keys(batch).await?);
        }
        for (i, f) in form_of {
            out[i] = counts.get(f).copied().unwrap_or(0);
        }
        Ok(Some(out))
    }

    fn max_key_rows(&self) -> usize {
        if self.kind == "doris" {
            DORIS_MAX_KEY_ROWS
        } else {
            usize::MAX
        }
    }

    fn parallelism(&self) -> usize {
        POOL_SIZE
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

/// The keys a read by time counts (indices in its `keys`), filed under the hash each
/// carries (`Key::hash_packed`, seeded per process: the rows are the sink's, their bytes
/// anyone's): a row's packed bytes are hashed once to be found, and no asked key is
/// hashed again.
struct ReadIndex {
    index: hashbrown::HashTable<usize>,
    /// A key asked twice (due on two partitions) takes the first place's count:
    /// `(index, first's index)`.
    repeats: Vec<(usize, usize)>,
}

impl ReadIndex {
    fn with_capacity(n: usize) -> Self {
        Self {
            index: hashbrown::HashTable::with_capacity(n),
            repeats: Vec::new(),
        }
    }

    /// Files `keys[i]`.
    fn file(&mut self, keys: &[&Key], i: usize) {
        let (h, b) = (keys[i].hash64(), keys[i].as_bytes());
        match self.index.find(h, |&x| keys[x].as_bytes() == b) {
            Some(&first) => self.repeats.push((i, first)),
            None => {
                self.index.insert_unique(h, i, |&x| keys[x].hash64());
            }
        }
    }
}

/// What one read by time gave ([`count_read_rows`]).
enum Read {
    /// Each asked key's rows.
    Counted(Vec<u64>),
    /// More rows than the limit: nothing counted.
    OverLimit,
    /// A row the key columns' types (as read at start) would not print so: the table
    /// stores them otherwise now, and no key written for the old types equals its rows.
    Restated,
}

/// Values of each converting key column, in rows matching no asked key, checked against
/// the column's type before that column is taken as unchanged: a type change prints every
/// non-empty value otherwise, so the first few show it, and a read checks a handful of
/// rows, not every row of seconds it shares with other records. Empty values (NULL) say
/// nothing and do not count.
const UNMATCHED_CHECKED: u8 = 8;

/// Runs a read by time (`sql::keys_in_time`) on `c` and counts the rows of each key of
/// `keys` that `read` files (the others count 0): [`Read::OverLimit`] when more than
/// `limit` rows came (the query asks for one more), [`Read::Restated`] when a row no key
/// matched is printed otherwise than `domain`'s types store. A row is one packed key; NULL
/// columns read as `''` there, as the key count's `''`-or-NULL rows do.
async fn count_read_rows(
    c: &mut mysql_async::Conn,
    q: String,
    keys: &[&Key],
    read: ReadIndex,
    limit: u64,
    domain: Option<&KeyDomain>,
) -> Result<Read, mysql_async::Error> {
    let ReadIndex { index, repeats } = read;
    let mut result = c.query_iter(q).await?;
    let mut out = vec![0u64; keys.len()];
    let mut rows = 0u64;
    // Per converting column, its values vouched for; `watching`: the columns below
    // UNMATCHED_CHECKED.
    let mut vouched = [0u8; 64];
    let mut watching = domain.map_or(0, KeyDomain::converting);
    let mut restated = false;
    while let Some(row) = result.next().await? {
        rows += 1;
        // Past the limit, or once restated, nothing is counted; the rest is read to free
        // the connection.
        if rows > limit || restated {
            continue;
        }
        let Some(Value::Bytes(b)) = row.as_ref(0) else {
            continue;
        };
        match index.find(Key::hash_packed(b), |&x| keys[x].as_bytes() == b.as_slice()) {
            Some(&x) => {
                if let Some(slot) = out.get_mut(x) {
                    *slot += 1;
                }
            }
            // `watching` is 0 without a domain.
            None if watching != 0 => {
                let printed = domain.map(|d| d.printed(b)).unwrap_or_default();
                restated = printed.changed;
                let mut bits = printed.vouched & watching;
                while bits != 0 {
                    let i = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    vouched[i] += 1;
                    if vouched[i] >= UNMATCHED_CHECKED {
                        watching &= !(1 << i);
                    }
                }
            }
            None => {}
        }
    }
    if restated {
        return Ok(Read::Restated);
    }
    if rows > limit {
        return Ok(Read::OverLimit);
    }
    for (i, first) in repeats {
        out[i] = out[first];
    }
    Ok(Read::Counted(out))
}

/// What the key comparison needs to know of the server, read with the key columns.
#[derive(Debug, Clone, Default)]
struct ServerInfo {
    /// `@@version` (MariaDB's contains `MariaDB`).
    version: String,
    /// The session's `@@sql_mode`, as the pipeline's sessions get it by default.
    sql_mode: String,
}

#[cfg(test)]
mod tests;
