//! SQL text for sinks spoken to over the MySQL protocol (Apache Doris, MySQL, MariaDB).
//!
//! Doris before 2.0 has no server-side prepared statements, so every value is written into
//! the SQL text as an escaped literal. Record contents are attacker controlled: nothing here
//! concatenates a value without [`string_literal`], an identifier without [`ident`], and
//! integers (partitions, offsets) are formatted by Rust, never taken from strings. Pure: no
//! I/O, the caller sends the text.
//!
//! Escaping, and why it differs from `mysql_real_escape_string` in one place: a `'` is
//! written `''`, never `\'`. Doris's legacy parser (every version before 2.0, and the
//! fallback planner after) unescapes a literal in two passes, backslash escapes first and
//! then `''` → `'`, so `\'\'` (two adjacent quotes) would come out as ONE quote; `''''`
//! comes out as two, as in MySQL and MariaDB. Doris 2.x's Nereids parser collapses `''` and
//! `""` first and then backslash escapes, which is why `"` is written `\"` (a bare `""` pair
//! would collapse to one `"` there). The tests decode every literal with a reference model
//! of each of the three parsers.
//!
//! Key matching never uses row constructors (`(a, b) IN ((..))`, rejected by Doris) and
//! never compares returned column values on the client (a DATETIME column comes back
//! reformatted): the server compares, and says which key matched by its index. The sink
//! sends the JOIN form ([`count_keys_joined`]: one index lookup per key, no expression that
//! grows with the batch, so Doris's `expr_depth_limit` / `expr_children_limit` bound only
//! the derived table, see [`derived_rows`]); the CASE form ([`count_keys_compared`], O(batch²)
//! on the server) is kept as the reference the JOIN form is tested against, key by key, on
//! real MariaDB (tests/it/key_forms.rs).

use std::fmt::Write as _;

/// Quotes a string as a MySQL string literal. With `no_backslash_escapes == false` (the
/// server default, and Doris), backslash is an escape character: `\` `"` NUL `\n` `\r` and
/// Ctrl-Z are written `\\` `\"` `\0` `\n` `\r` `\Z`; `'` is doubled (see the module docs).
/// With `true` (sql_mode NO_BACKSLASH_ESCAPES) only `'` is doubled. `%` and `_` stay as they
/// are: values are compared with `=`, never `LIKE`.
pub fn string_literal(s: &str, no_backslash_escapes: bool) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_string_literal(&mut out, s, no_backslash_escapes);
    out
}

/// [`string_literal`], appended to `out` (the key query writes thousands of them into one
/// statement).
pub fn push_string_literal(out: &mut String, s: &str, no_backslash_escapes: bool) {
    out.reserve(s.len() + 2);
    out.push('\'');
    // Every character that needs escaping is ASCII, so plain stretches between them are
    // copied whole (the common case: a value with nothing to escape is one copy).
    let special = |b: u8| {
        b == b'\''
            || (!no_backslash_escapes && matches!(b, b'\\' | b'"' | 0 | b'\n' | b'\r' | 0x1a))
    };
    let mut plain = 0;
    for (i, b) in s.bytes().enumerate() {
        if !special(b) {
            continue;
        }
        out.push_str(&s[plain..i]);
        out.push_str(match b {
            b'\'' => "''",
            b'\\' => "\\\\",
            b'"' => "\\\"",
            0 => "\\0",
            b'\n' => "\\n",
            b'\r' => "\\r",
            _ => "\\Z",
        });
        plain = i + 1;
    }
    out.push_str(&s[plain..]);
    out.push('\'');
}

/// Quotes one identifier (column, table or database name) with backticks, doubling any
/// embedded backtick. Dots are kept inside the quotes: see [`table_ident`] for `db.table`.
pub fn ident(name: &str) -> String {
    format!("`{}`", name.replace('`', "``"))
}

/// Quotes a possibly qualified table name: `db.table` is split on `.` and each part quoted
/// (`` `db`.`table` ``). A name whose parts themselves contain dots cannot be written this way.
pub fn table_ident(name: &str) -> String {
    name.split('.').map(ident).collect::<Vec<_>>().join(".")
}

/// An inclusive run of Kafka offsets (`first..=last`, both `i64`): the ledger's own type,
/// re-exported so that the runs the [`Verifier`](super::Verifier) receives go straight in.
pub use crate::ledger::OffsetRun;

/// Where the rows of one Kafka partition are, for the `offset_columns` strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetQuery<'a> {
    /// The sink table, optionally qualified as `db.table`.
    pub table: &'a str,
    /// The column holding the Kafka partition.
    pub partition_column: &'a str,
    /// The column holding the Kafka offset.
    pub offset_column: &'a str,
    /// The column holding the topic, when the table receives several topics.
    pub topic_column: Option<&'a str>,
    /// The topic, compared only when `topic_column` is set.
    pub topic: &'a str,
    /// The Kafka partition.
    pub partition: i32,
}

/// One statement for [`super::OffsetExtent`]: the smallest and largest partition of any
/// row (`k = -1`), then the largest offset of each of `partitions` (`k` = the partition).
/// Each branch is one index lookup where (partition, offset) is indexed (the offset
/// queries need that index anyway). Only integers and identifiers: nothing to escape.
///
/// `SELECT -1 AS k, MIN(p) AS lo, MAX(p) AS hi FROM t UNION ALL SELECT 0, MAX(o), NULL
/// FROM t WHERE p = 0 ...`
pub fn offset_extent(
    table: &str,
    partition_column: &str,
    offset_column: &str,
    partitions: &[i32],
) -> String {
    let t = table_ident(table);
    let p = ident(partition_column);
    let o = ident(offset_column);
    let mut sql = format!("SELECT -1 AS k, MIN({p}) AS lo, MAX({p}) AS hi FROM {t}");
    for n in partitions {
        sql.push_str(&format!(
            " UNION ALL SELECT {n}, MAX({o}), NULL FROM {t} WHERE {p} = {n}"
        ));
    }
    sql
}

/// The WHERE condition shared by the offset queries: this partition (and topic), and an
/// offset inside one of the runs. Only the expected offsets are selected so that rows at
/// offsets outside them (filtered records, transaction markers) can never make up for a
/// missing one: short gaps between runs are bridged into one `BETWEEN` and their offsets
/// excluded by `NOT IN` ([`crate::ledger::runs::cover`]), longer ones separate ranges.
fn offsets_predicate(q: &OffsetQuery<'_>, runs: &[OffsetRun], nbe: bool) -> String {
    let offset = ident(q.offset_column);
    let mut sql = format!("{} = {}", ident(q.partition_column), q.partition);
    if let Some(topic_column) = q.topic_column {
        sql.push_str(&format!(
            " AND {} = {}",
            ident(topic_column),
            string_literal(q.topic, nbe)
        ));
    }
    sql.push_str(" AND (");
    if runs.is_empty() {
        // Nothing expected: match nothing rather than emit invalid SQL.
        sql.push_str("1 = 0");
    }
    // Runs separated by a few unexpected offsets (filtered records) are asked as one span
    // with those offsets excluded by name: the same offset set, one range instead of many.
    let cover = crate::ledger::runs::cover(&crate::ledger::runs::normalize(runs.to_vec()));
    for (i, run) in cover.spans.iter().enumerate() {
        if i > 0 {
            sql.push_str(" OR ");
        }
        debug_assert!(run.first <= run.last, "inverted run {run:?}");
        if run.first == run.last {
            sql.push_str(&format!("{offset} = {}", run.first));
        } else {
            sql.push_str(&format!("{offset} BETWEEN {} AND {}", run.first, run.last));
        }
    }
    sql.push(')');
    if !cover.excluded.is_empty() {
        let names: Vec<String> = cover
            .excluded
            .iter()
            .flat_map(|r| r.first..=r.last)
            .map(|o| o.to_string())
            .collect();
        sql.push_str(&format!(" AND {offset} NOT IN ({})", names.join(", ")));
    }
    sql
}

/// `SELECT COUNT(*), COUNT(DISTINCT offset)` over the expected runs of one partition: rows
/// (duplicates included) and distinct offsets present. The caller compares the distinct
/// count with the number of expected records and bisects the runs that disagree.
pub fn count_offsets(q: &OffsetQuery<'_>, runs: &[OffsetRun], nbe: bool) -> String {
    format!(
        "SELECT COUNT(*), COUNT(DISTINCT {}) FROM {} WHERE {}",
        ident(q.offset_column),
        table_ident(q.table),
        offsets_predicate(q, runs, nbe)
    )
}

/// `SELECT offset, COUNT(*) ... GROUP BY offset` over the expected runs of one partition:
/// each present offset with its row count (above 1 = duplicated). For small ranges only.
pub fn list_offsets(q: &OffsetQuery<'_>, runs: &[OffsetRun], nbe: bool) -> String {
    let offset = ident(q.offset_column);
    format!(
        "SELECT {offset}, COUNT(*) FROM {} WHERE {} GROUP BY {offset}",
        table_ident(q.table),
        offsets_predicate(q, runs, nbe)
    )
}

/// How one key column is compared in the ATTRIBUTION of a key count (the `CASE` of
/// [`count_keys_compared`]); the `WHERE` always compares plainly so that the column's index
/// narrows the candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyCompare {
    /// `c = 'v'`: the sink's own comparison. Doris (it compares bytes), string columns with
    /// a byte-exact collation (NO PAD binary), and every non-string column (a `DATETIME`
    /// equals its record's text however that text writes it).
    #[default]
    Plain,
    /// `CAST(c AS BINARY) = 'v'`: byte-exact, for a UTF-8 string column whose collation is
    /// PAD SPACE or ignores case. The literal is UTF-8 (the session check makes sure), so
    /// both sides are compared as UTF-8 bytes.
    Binary,
    /// `CAST(CONVERT(c USING utf8mb4) AS BINARY) = 'v'`: the same for a string column in
    /// another character set (`latin1`), compared as its UTF-8 bytes.
    Utf8Binary,
    /// `c = 'v'` in a table that merges rows this column's collation equates (a PRIMARY or
    /// UNIQUE key within the key columns, key semantics `presence`): the row kept one of
    /// several spellings, and every key it equals is present. Compared as [`Self::Plain`],
    /// but a row counts for every key of the batch it equals, not the first one only
    /// ([`count_keys_joined`]).
    Collation,
}

impl KeyCompare {
    /// Whether the auditor compares this column itself (bytes), not the sink's equality.
    fn is_exact(self) -> bool {
        matches!(self, Self::Binary | Self::Utf8Binary)
    }
}

/// How a MySQL/MariaDB key column must be compared, from its `information_schema.COLUMNS`
/// `COLLATION_NAME` and `CHARACTER_SET_NAME`: no collation (not a string column, or a binary
/// string) or a UTF-8 NO PAD binary one (`binary`, MariaDB `utf8mb4_nopad_bin`, MySQL 8
/// `utf8mb4_0900_bin`) is byte-exact already; every other UTF-8 collation — PAD SPACE
/// (`utf8mb4_bin` on MariaDB and MySQL, every `_ci`/`_cs`/`_bin` of MySQL 5.7) or NO PAD but
/// not binary (`*_nopad_*_ci`, `utf8mb4_0900_ai_ci`, `utf8mb4_0900_as_cs`, which ignore
/// case or equate some distinct strings) — gets an exact comparison, and a column of any
/// other character set (`latin1_nopad_bin` too) is compared as its UTF-8 conversion.
pub fn key_compare_for(collation: Option<&str>, charset: Option<&str>) -> KeyCompare {
    let Some(collation) = collation.map(|c| c.trim().to_ascii_lowercase()) else {
        return KeyCompare::Plain;
    };
    if collation.is_empty() || collation == "binary" {
        return KeyCompare::Plain;
    }
    if !matches!(
        column_charset(&collation, charset).as_str(),
        "utf8mb4" | "utf8mb3" | "utf8"
    ) {
        // Even a NO PAD binary collation: MariaDB refuses `latin1_nopad_bin = 'é'` (any
        // non-ASCII UTF-8 literal) as an illegal mix of collations, which failed every key
        // count of a batch holding such a key, round after round.
        return KeyCompare::Utf8Binary;
    }
    if collation.ends_with("_nopad_bin") || collation.ends_with("_0900_bin") {
        KeyCompare::Plain
    } else {
        KeyCompare::Binary
    }
}

/// Whether [`count_keys_prepared`] compares a key column of this `information_schema`
/// collation and character set as the text form does. Its derived column is a parameter,
/// IMPLICIT in the connection's `utf8mb4_general_ci`, where the text form's literal is
/// COERCIBLE and takes the column's collation: against a column of another character set
/// (`latin1_nopad_bin`, `utf8mb3_nopad_bin`) MariaDB 10.11 then converted the column and
/// compared in `utf8mb4_general_ci`, ignoring case, accents and trailing spaces (a present
/// `a.example` counted 0, an absent `A.EXAMPLE` 2); other utf8mb4 collations
/// (`utf8mb4_unicode_ci`) are refused as an illegal mix. So only what was checked alike
/// goes prepared: no collation (not a string column, or a binary string) and utf8mb4 in
/// `utf8mb4_nopad_bin`, `utf8mb4_bin` or `utf8mb4_general_ci` (tests/it/key_forms.rs).
pub fn prepared_compares_alike(collation: Option<&str>, charset: Option<&str>) -> bool {
    let Some(collation) = collation.map(|c| c.trim().to_ascii_lowercase()) else {
        return true;
    };
    column_charset(&collation, charset) == "utf8mb4"
        && matches!(
            collation.as_str(),
            "utf8mb4_nopad_bin" | "utf8mb4_bin" | "utf8mb4_general_ci"
        )
}

/// A string column's character set, lowercase: `information_schema`'s, or when it gives
/// none, the one the (lowercase) collation's name starts with (`utf8mb4_bin`).
fn column_charset(collation: &str, charset: Option<&str>) -> String {
    match charset {
        Some(c) => c.trim().to_ascii_lowercase(),
        None => collation.split('_').next().unwrap_or_default().to_string(),
    }
}

/// `table`'s schema and name as SQL for an information_schema filter: `DATABASE()` (the
/// session's) or `'db'`, and `'t'`, split as [`table_ident`] splits it; `None` for a name
/// of more parts (which [`table_ident`] cannot write as a valid table either).
fn schema_and_name(table: &str, nbe: bool) -> Option<(String, String)> {
    match table.split('.').collect::<Vec<_>>().as_slice() {
        [name] => Some(("DATABASE()".to_string(), string_literal(name, nbe))),
        [db, name] => Some((string_literal(db, nbe), string_literal(name, nbe))),
        _ => None,
    }
}

/// `SELECT COLUMN_NAME, DATA_TYPE, COLLATION_NAME, CHARACTER_SET_NAME, COLUMN_TYPE,
/// DATETIME_PRECISION, NUMERIC_PRECISION, NUMERIC_SCALE FROM information_schema.COLUMNS
/// WHERE TABLE_SCHEMA = … AND TABLE_NAME = …`: the types (with precision and scale) and
/// collations of `table`'s columns, for [`key_compare_for`] and the key values' conversion
/// ([`crate::key_domain`]). `table` is `t` (the session's
/// `DATABASE()`) or `db.t`, split as [`table_ident`] splits it; `None` for a name of more
/// parts (which [`table_ident`] cannot write as a valid table either).
pub fn column_collations(table: &str, nbe: bool) -> Option<String> {
    let (schema, name) = schema_and_name(table, nbe)?;
    Some(format!(
        "SELECT COLUMN_NAME, DATA_TYPE, COLLATION_NAME, CHARACTER_SET_NAME, COLUMN_TYPE, \
         DATETIME_PRECISION, NUMERIC_PRECISION, NUMERIC_SCALE \
         FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = {schema} AND TABLE_NAME = {}",
        name
    ))
}

/// `(INDEX_NAME, COLUMN_NAME)` of every unique index of `table` (PRIMARY included), in
/// index order (see [`crate::key_semantics::from_unique_indexes`]); `None` where `table` is
/// not `name` or `db.name`.
pub fn unique_index_columns(table: &str, nbe: bool) -> Option<String> {
    let (schema, name) = schema_and_name(table, nbe)?;
    Some(format!(
        "SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS \
         WHERE TABLE_SCHEMA = {schema} AND TABLE_NAME = {} AND NON_UNIQUE = 0 \
         ORDER BY INDEX_NAME, SEQ_IN_INDEX",
        name
    ))
}

/// The first column of each index of `table` (information_schema.STATISTICS,
/// `SEQ_IN_INDEX = 1`), every column of the view (`INDEX_TYPE`, and where the server has
/// them MariaDB's `IGNORED` and MySQL's `IS_VISIBLE`): a time column leading a usable one
/// is one the server reads a range of in order ([`crate::time_scan`]). `None` for a name of
/// more than two parts.
pub fn leading_index_columns(table: &str, nbe: bool) -> Option<String> {
    let (schema, name) = schema_and_name(table, nbe)?;
    Some(format!(
        "SELECT * FROM information_schema.STATISTICS \
         WHERE TABLE_SCHEMA = {schema} AND TABLE_NAME = {} AND SEQ_IN_INDEX = 1",
        name
    ))
}

/// The key of every row of `table` whose `time` column lies in one of `bounds` (inclusive,
/// as text the column compares with), at most `limit` rows: a read of a few seconds' rows
/// whose keys the auditor counts itself ([`crate::time_scan`]). Each row is one value, its
/// key columns packed as [`crate::types::Key::as_bytes`] packs a key (each value, then a
/// `0xFF` byte; NULL as `''`), each column as the key count compares it (`compare`, see
/// [`exact_column`]): one value per row instead of one per column costs the auditor a
/// third of the decoding. A value holding a `0xFF` byte itself (never UTF-8) packs to more
/// terminators than a key has, so it equals no key.
pub fn keys_in_time(
    table: &str,
    columns: &[String],
    compare: &[KeyCompare],
    time: &str,
    bounds: &[(String, String)],
    limit: u64,
    nbe: bool,
) -> String {
    let packed: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let value = exact_column(&ident(c), compare.get(i).copied().unwrap_or_default());
            // Binary throughout: MariaDB refuses a CONCAT of utf8mb4 text and X'FF'.
            format!("CAST(COALESCE({value}, '') AS BINARY), X'FF'")
        })
        .collect();
    let t = ident(time);
    let filter: Vec<String> = bounds
        .iter()
        .map(|(lo, hi)| {
            format!(
                "({t} >= {} AND {t} <= {})",
                string_literal(lo, nbe),
                string_literal(hi, nbe)
            )
        })
        .collect();
    format!(
        "SELECT CONCAT({}) FROM {} WHERE {} LIMIT {limit}",
        packed.join(", "),
        table_ident(table),
        if filter.is_empty() {
            "FALSE".to_string()
        } else {
            filter.join(" OR ")
        }
    )
}

/// `SHOW CREATE TABLE t` (Doris: its key model is in the text, see
/// [`crate::key_semantics::from_doris_ddl`]).
pub fn show_create_table(table: &str) -> String {
    format!("SHOW CREATE TABLE {}", table_ident(table))
}

/// `(c1 = 'v' AND c2 = 'w')`: the row test for one key, each column compared as
/// `compare` says (missing entries, or an empty `compare`, are [`KeyCompare::Plain`]).
fn key_condition(
    columns: &[String],
    compare: &[KeyCompare],
    key: &[impl AsRef<str>],
    nbe: bool,
) -> String {
    if columns.is_empty() || key.len() != columns.len() {
        // A programming error (config validation ties key and columns together); never
        // matching shows up as "missing", which is loud, instead of matching wrong rows.
        debug_assert!(
            false,
            "a key of {} values does not fit columns {columns:?}",
            key.len()
        );
        return "(1 = 0)".to_string();
    }
    let parts: Vec<String> = columns
        .iter()
        .zip(key)
        .enumerate()
        .map(|(i, (c, v))| {
            let value = string_literal(v.as_ref(), nbe);
            let test = match compare.get(i).copied().unwrap_or_default() {
                KeyCompare::Plain | KeyCompare::Collation => format!("{} = {value}", ident(c)),
                KeyCompare::Binary => format!("CAST({} AS BINARY) = {value}", ident(c)),
                KeyCompare::Utf8Binary => {
                    format!(
                        "CAST(CONVERT({} USING utf8mb4) AS BINARY) = {value}",
                        ident(c)
                    )
                }
            };
            // An empty field (SPEC: empty matches empty) is written as '' or as NULL (a
            // Flink/Doris load turns an empty CSV field into NULL for DATETIME and number
            // columns, where '' cannot be stored).
            if v.as_ref().is_empty() {
                format!("({test} OR {} IS NULL)", ident(c))
            } else {
                test
            }
        })
        .collect();
    format!("({})", parts.join(" AND "))
}

/// Row counts per key for the `key_columns` strategy, one query per batch:
///
/// `SELECT CASE WHEN (c1 = 'v' AND c2 = 'w') THEN 0 WHEN (...) THEN 1 END AS k, COUNT(*)
/// FROM t WHERE (...) OR (...) GROUP BY 1`
///
/// Each result row is `(k, rows)` where `k` is the index of the key in `keys`; keys with no
/// row do not appear. The caller must ignore a NULL or out-of-range `k`. Keys must be
/// distinct: a row is counted under the FIRST key it matches, so pass each key once and
/// account for multiplicity on the client. Every column is compared with `=`, so with the
/// column's collation: right for Doris (it compares bytes) and byte-exact collations; see
/// [`count_keys_compared`] for the others.
///
/// `GROUP BY 1` (the ordinal of the CASE expression) rather than the alias: MySQL and Doris
/// (1.2+, by default) resolve a GROUP BY name against the table's columns before the select
/// aliases, so `GROUP BY k` would silently group by a table column named `k`. Ordinals are
/// accepted by MySQL, MariaDB, Doris's legacy planner and its Nereids planner.
pub fn count_keys<K, S>(table: &str, columns: &[String], keys: &[K], nbe: bool) -> String
where
    K: AsRef<[S]>,
    S: AsRef<str>,
{
    count_keys_compared(table, columns, &[], keys, nbe)
}

/// [`count_keys`] with the `CASE` (which key a row is counted under) comparing column `i`
/// as `compare[i]` says, while the `WHERE` stays plain so that an index on the key columns
/// still selects the candidate rows (`CAST(c AS BINARY)` in the `WHERE` would scan).
///
/// Why: on MySQL/MariaDB a PAD SPACE collation (MariaDB `utf8mb4_bin` and every `_ci`/`_cs`
/// one; MySQL 5.7 `_bin`) finds `'a.com'` equal to `'a.com '` (and a `_ci` one to
/// `'A.com'`), so a row would be counted under whichever of those keys comes first in the
/// batch, or under a lost key asked alone: a loss missed or the wrong record reported,
/// depending on which keys share a batch. The auditor's keys are exact byte strings; with
/// [`KeyCompare::Binary`] on such columns a row is counted only under its own key, and a row
/// the `WHERE` let through that equals no key exactly gets a NULL `k` (ignored).
pub fn count_keys_compared<K, S>(
    table: &str,
    columns: &[String],
    compare: &[KeyCompare],
    keys: &[K],
    nbe: bool,
) -> String
where
    K: AsRef<[S]>,
    S: AsRef<str>,
{
    let exact = compare.iter().any(|c| c.is_exact());
    let conditions: Vec<String> = keys
        .iter()
        .map(|key| key_condition(columns, &[], key.as_ref(), nbe))
        .collect();
    let attributions: Vec<String> = if exact {
        keys.iter()
            .map(|key| key_condition(columns, compare, key.as_ref(), nbe))
            .collect()
    } else {
        conditions.clone()
    };
    let mut case = String::from("CASE");
    for (i, cond) in attributions.iter().enumerate() {
        case.push_str(&format!(" WHEN {cond} THEN {i}"));
    }
    let filter = if conditions.is_empty() {
        // An empty batch: a valid statement that selects no row.
        case.push_str(" WHEN 1 = 0 THEN 0");
        "1 = 0".to_string()
    } else {
        conditions.join(" OR ")
    };
    case.push_str(" END");
    format!(
        "SELECT {case} AS k, COUNT(*) FROM {} WHERE {filter} GROUP BY 1",
        table_ident(table)
    )
}

/// The SQL expression of sink column `c` as compared exactly (`compare`): the column itself,
/// or its UTF-8 bytes. The join form groups rows by these, and compares them with the keys.
fn exact_column(column: &str, compare: KeyCompare) -> String {
    match compare {
        KeyCompare::Plain | KeyCompare::Collation => column.to_string(),
        KeyCompare::Binary => format!("CAST({column} AS BINARY)"),
        KeyCompare::Utf8Binary => format!("CAST(CONVERT({column} USING utf8mb4) AS BINARY)"),
    }
}

/// How [`count_keys_joined`] writes the rows of its derived key table after the first (which
/// is always a `SELECT` naming the columns: MariaDB names a value list's columns after its
/// first row's values, so the names come from a `SELECT` before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyRows {
    /// `... UNION ALL SELECT 1, 1, 'v', 'w' UNION ALL SELECT ...`: every MySQL-protocol
    /// server takes it (Doris, MySQL, MariaDB).
    #[default]
    UnionSelect,
    /// `... UNION ALL VALUES (1, 1, 'v', 'w'), (...)`: a table value constructor, MariaDB
    /// 10.3.3 and later (MySQL 8 spells it `VALUES ROW(...)`, Doris not at all). The same
    /// rows and the same column types (a union's, aggregated over every row either way),
    /// for about a quarter less server CPU per key: MariaDB parses and plans one `SELECT`
    /// per `UNION ALL` branch.
    Values,
    /// [`KeyRows::Values`] with the batch's values as parameters of a prepared statement
    /// (MariaDB's binary protocol), for the batches [`PreparedShape::of`] takes; the rest
    /// are sent as [`KeyRows::Values`] text. The server then parses and plans one statement
    /// per shape and connection instead of a query per batch (~25 % less server CPU per key
    /// than the text on MariaDB 10.11).
    Prepared,
}

/// The [`KeyRows`] form a server takes, from its `@@version` (`10.11.19-MariaDB-0+deb12u1`):
/// [`KeyRows::Prepared`] on MariaDB 10.3.3 and later, [`KeyRows::UnionSelect`] on anything
/// else, or anything it cannot read.
pub fn key_rows_for(version: &str) -> KeyRows {
    if !version.to_ascii_lowercase().contains("mariadb") {
        return KeyRows::UnionSelect;
    }
    // Replication and some proxies still show MariaDB's old handshake prefix.
    let version = version.strip_prefix("5.5.5-").unwrap_or(version);
    let number = version.split(['-', '+', '~']).next().unwrap_or_default();
    let parts: Vec<Option<u32>> = number.split('.').map(|p| p.parse().ok()).collect();
    match parts.as_slice() {
        [Some(major), Some(minor), Some(patch), ..] if (*major, *minor, *patch) >= (10, 3, 3) => {
            KeyRows::Prepared
        }
        _ => KeyRows::UnionSelect,
    }
}

/// How many rows of the derived key table one key takes in [`count_keys_joined`]: each
/// empty value doubles it (the key is written once with `''` and once with `NULL` there).
/// Batches are bounded by this weight (Doris's expression limits, see the module docs).
pub fn derived_rows<S: AsRef<str>>(key: impl IntoIterator<Item = S>) -> usize {
    derived_rows_for(key.into_iter().filter(|v| v.as_ref().is_empty()).count())
}

/// [`derived_rows`] of a key with `empty` empty values.
pub fn derived_rows_for(empty: usize) -> usize {
    // Capped only so the shift cannot overflow: configs hold at most 16 key fields.
    1usize << empty.min(crate::config::MAX_KEY_FIELDS)
}

/// Row counts per key for the `key_columns` strategy, the JOIN form (the one the sink
/// sends): the batch's keys become a derived table, one index lookup per key.
///
/// `SELECT MIN(k.i), COUNT(*), COUNT(DISTINCT k.j) FROM (SELECT 0 AS i, 0 AS j, 'v' AS c0,
/// 'w' AS c1 UNION ALL SELECT 1, 1, ...) k JOIN t ON t.c1 = k.c0 AND t.c2 = k.c1
/// GROUP BY t.c1, t.c2`
///
/// (`form` says how the derived rows after the first are written, see [`KeyRows`].)
///
/// Each answer row is one group of sink rows with equal key columns (compared exactly), so
/// every row of a group matches the same keys: `MIN(k.i)` is the FIRST key of the batch it
/// matches, which is where [`count_keys_compared`] (the CASE form) counts it, and
/// `COUNT(*) / COUNT(DISTINCT k.j)` is the number of rows in the group (each row joins once
/// per derived row it matches). With a [`KeyCompare::Collation`] column (a table that
/// merges rows by it) the groups are per key too (`GROUP BY k.i, ...`, selecting `k.i`): a
/// group counts for every key it equals, where the CASE form still gives it to the first.
/// Otherwise both forms give the same count for every key, including
/// keys the sink equates (a `DATETIME` column equals `'2024-05-01 12:00:00'` and
/// `'2024-05-01T12:00:00'`: the row is counted under the first of them, not under both).
///
/// Comparisons: `c = k.cN`, the sink's own (an index on the key columns is used, and a
/// non-string column converts the derived string as it converts a literal); for a column
/// with a non-exact collation also `CAST(c AS BINARY) = k.cN` (see
/// [`count_keys_compared`]; a non-UTF-8 column is compared through `CONVERT(c USING
/// utf8mb4)`, MariaDB refuses to compare it with a utf8mb4 derived column). An empty value
/// matches `''` or NULL (SPEC: empty matches empty): such a key gets one derived row with
/// `''` and one with `NULL` in that column, compared NULL-safely (`<=>`) in columns where a
/// NULL occurs. Keys must be distinct, as for [`count_keys`].
///
/// No expression grows with the batch (the ON clause has two comparisons per column at
/// most, the GROUP BY one expression per column): only the derived table does, by
/// [`derived_rows`] per key, so the batch bound is a bound on branches of one `UNION ALL`.
pub fn count_keys_joined<K, S>(
    table: &str,
    columns: &[String],
    compare: &[KeyCompare],
    form: KeyRows,
    keys: &[K],
    nbe: bool,
) -> String
where
    K: AsRef<[S]>,
    S: AsRef<str>,
{
    let valid = !columns.is_empty() && keys.iter().all(|k| k.as_ref().len() == columns.len());
    debug_assert!(valid, "keys do not fit columns {columns:?}");
    // The derived table, written straight into one buffer: a batch holds thousands of
    // values, and this runs for every key the audit verifies.
    let mut derived = String::with_capacity(keys.len() * (24 + 24 * columns.len()));
    let mut rows = 0usize;
    // Columns where a derived row holds NULL: compared with `<=>` there.
    let mut nullable = vec![false; columns.len()];
    let mut empty: Vec<usize> = Vec::with_capacity(columns.len());
    for (i, key) in keys.iter().enumerate() {
        let key = key.as_ref();
        if !valid {
            break;
        }
        empty.clear();
        empty.extend((0..key.len()).filter(|&c| key[c].as_ref().is_empty()));
        for &c in &empty {
            nullable[c] = true;
        }
        // Every combination of '' and NULL over the empty values.
        for mask in 0..derived_rows_for(empty.len()) {
            let first = rows == 0;
            // Written in place: `format!` would allocate a string per derived row.
            let _ = match (first, form) {
                (true, _) => write!(derived, "SELECT {i} AS i, {rows} AS j"),
                (false, KeyRows::UnionSelect) => write!(derived, " UNION ALL SELECT {i}, {rows}"),
                (false, KeyRows::Values | KeyRows::Prepared) if rows == 1 => {
                    write!(derived, " UNION ALL VALUES ({i}, {rows}")
                }
                (false, KeyRows::Values | KeyRows::Prepared) => write!(derived, ", ({i}, {rows}"),
            };
            for (c, v) in key.iter().enumerate() {
                derived.push_str(", ");
                let null = empty
                    .iter()
                    .position(|&e| e == c)
                    .is_some_and(|bit| mask & (1 << bit) != 0);
                if null {
                    derived.push_str("NULL");
                } else {
                    push_string_literal(&mut derived, v.as_ref(), nbe);
                }
                if first {
                    let _ = write!(derived, " AS c{c}");
                }
            }
            if !first && form != KeyRows::UnionSelect {
                derived.push(')');
            }
            rows += 1;
        }
    }
    let table = table_ident(table);
    if rows == 0 {
        // An empty (or invalid) batch: a valid statement that selects no row.
        return format!(
            "SELECT MIN(k.i), COUNT(*), COUNT(DISTINCT k.j) FROM (SELECT 0 AS i, 0 AS j) k \
             JOIN {table} t ON 1 = 0 GROUP BY k.i"
        );
    }
    join_keys(&derived, &table, columns, compare, &nullable)
}

/// The JOIN of a derived key table (`derived`, rows `i, j, c0, c1, ...`) with the sink
/// table, grouped by the sink's key values compared exactly (see [`count_keys_joined`]);
/// `nullable` says where a derived row may hold NULL (compared with `<=>` there).
fn join_keys(
    derived: &str,
    table: &str,
    columns: &[String],
    compare: &[KeyCompare],
    nullable: &[bool],
) -> String {
    let compare_of = |i: usize| compare.get(i).copied().unwrap_or_default();
    let mut on: Vec<String> = Vec::new();
    let mut group: Vec<String> = Vec::new();
    for (c, name) in columns.iter().enumerate() {
        let column = format!("t.{}", ident(name));
        let eq = if nullable.get(c).copied().unwrap_or(true) {
            "<=>"
        } else {
            "="
        };
        let exact = compare_of(c);
        match exact {
            KeyCompare::Utf8Binary => {
                on.push(format!("CONVERT({column} USING utf8mb4) {eq} k.c{c}"));
            }
            _ => on.push(format!("{column} {eq} k.c{c}")),
        }
        if exact.is_exact() {
            on.push(format!("{} {eq} k.c{c}", exact_column(&column, exact)));
        }
        group.push(exact_column(&column, exact));
    }
    // A table that merges by collation: each key gets the rows of every group it equals
    // (grouped by key too), where elsewhere a group goes to the first key it equals.
    let (key, by_key) = if compare.contains(&KeyCompare::Collation) {
        ("k.i", "k.i, ")
    } else {
        ("MIN(k.i)", "")
    };
    format!(
        "SELECT {key}, COUNT(*), COUNT(DISTINCT k.j) FROM ({}) k JOIN {table} t ON {} \
         GROUP BY {by_key}{}",
        derived,
        on.join(" AND "),
        group.join(", ")
    )
}

/// Batches of fewer keys go as text: a prepared statement saves the server its parsing,
/// which matters only for large batches, and small ones would add shapes to prepare.
pub const PREPARED_MIN_KEYS: usize = 64;
/// Values of more characters than this send their batch as text: the prepared form
/// declares each column's length (see [`PreparedShape`]), and MariaDB materializes the
/// derived table with rows that wide.
pub const PREPARED_MAX_CHARS: usize = 512;

/// The most placeholders one statement may hold (the binary protocol counts them in 16
/// bits); a larger batch (a `batch_size` in the tens of thousands) goes as text.
pub const PREPARED_MAX_PARAMS: usize = 65_535;

/// The shape of [`count_keys_prepared`]'s statement for a batch: its derived rows (the
/// batch's key count rounded up to a power of two, padded with NULL rows) and each
/// column's declared length (the batch's longest value there, in characters, rounded up
/// to a power of two, at least 16). Rounding lets a few statements, prepared once per
/// connection, serve every batch.
///
/// The lengths are why the shape exists: MariaDB types a prepared derived table's columns
/// from its FIRST row's parameters only (10.11: a first row `('10.0.0.1', ...)` makes the
/// column `CHAR(8)`, and a later `'10.0.0.12'` is cut to `'10.0.0.1'` before the join), so
/// the first row is written `CAST(? AS CHAR(n))`, with `n` at least every value's length.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PreparedShape {
    /// Derived rows: keys, then NULL rows.
    pub rows: usize,
    /// Declared length per key column, in characters.
    pub lengths: Vec<usize>,
}

impl PreparedShape {
    /// The shape for `keys` (distinct, every one with a value per column), or `None` when
    /// the batch goes as text: fewer than [`PREPARED_MIN_KEYS`] keys, an empty value (it
    /// needs extra derived rows, see [`count_keys_joined`]), a value longer than
    /// [`PREPARED_MAX_CHARS`], or more than [`PREPARED_MAX_PARAMS`] parameters.
    pub fn of<K, S>(keys: &[K], columns: usize) -> Option<Self>
    where
        K: AsRef<[S]>,
        S: AsRef<str>,
    {
        if keys.len() < PREPARED_MIN_KEYS || columns == 0 {
            return None;
        }
        let mut longest = vec![0usize; columns];
        for key in keys {
            let key = key.as_ref();
            if key.len() != columns {
                return None;
            }
            for (c, v) in key.iter().enumerate() {
                let v = v.as_ref();
                if v.is_empty() {
                    return None;
                }
                // CHAR(n) counts characters; a value has no more of them than bytes, so
                // they are counted only where that bound could raise the longest.
                if v.len() > longest[c] {
                    longest[c] = longest[c].max(v.chars().count());
                }
            }
        }
        let rows = keys.len().next_power_of_two();
        if longest.iter().any(|&l| l > PREPARED_MAX_CHARS)
            || rows.saturating_mul(columns) > PREPARED_MAX_PARAMS
        {
            return None;
        }
        Some(Self {
            rows,
            lengths: longest
                .iter()
                .map(|&l| l.next_power_of_two().max(16))
                .collect(),
        })
    }

    /// The statement's parameters for `keys` (the batch the shape was made for), row by
    /// row: each key's values, then NULLs for the padding rows (a NULL equals no row).
    pub fn params<'a, K, S>(&self, keys: &'a [K]) -> Vec<Option<&'a str>>
    where
        K: AsRef<[S]>,
        S: AsRef<str> + 'a,
    {
        let mut out = Vec::with_capacity(self.rows * self.lengths.len());
        for key in keys.iter().take(self.rows) {
            out.extend(key.as_ref().iter().map(|v| Some(v.as_ref())));
        }
        out.resize(self.rows * self.lengths.len(), None);
        out
    }
}

/// [`count_keys_joined`] as a statement to prepare: the same JOIN, with the derived table's
/// values as placeholders (`shape` gives its rows and column lengths, see
/// [`PreparedShape`]). Derived row `r` is key `r` of the batch, `i = j = r`; the rows past
/// the batch are NULL and match nothing. No value is in the text, so no escaping and no
/// session's escaping mode matter here.
pub fn count_keys_prepared(
    table: &str,
    columns: &[String],
    compare: &[KeyCompare],
    shape: &PreparedShape,
) -> String {
    let mut derived = String::with_capacity(shape.rows * (16 + 3 * columns.len()));
    derived.push_str("SELECT 0 AS i, 0 AS j");
    for (c, n) in shape.lengths.iter().enumerate() {
        let _ = write!(derived, ", CAST(? AS CHAR({n})) AS c{c}");
    }
    for r in 1..shape.rows {
        if r == 1 {
            let _ = write!(derived, " UNION ALL VALUES ({r}, {r}");
        } else {
            let _ = write!(derived, ", ({r}, {r}");
        }
        for _ in &shape.lengths {
            derived.push_str(", ?");
        }
        derived.push(')');
    }
    let nullable = vec![false; columns.len()];
    join_keys(&derived, &table_ident(table), columns, compare, &nullable)
}

#[cfg(test)]
mod tests;
