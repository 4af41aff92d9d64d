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
//! reformatted): the server compares, and says which key matched by its index.

/// Quotes a string as a MySQL string literal. With `no_backslash_escapes == false` (the
/// server default, and Doris), backslash is an escape character: `\` `"` NUL `\n` `\r` and
/// Ctrl-Z are written `\\` `\"` `\0` `\n` `\r` `\Z`; `'` is doubled (see the module docs).
/// With `true` (sql_mode NO_BACKSLASH_ESCAPES) only `'` is doubled. `%` and `_` stay as they
/// are: values are compared with `=`, never `LIKE`.
pub fn string_literal(s: &str, no_backslash_escapes: bool) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            _ if no_backslash_escapes => out.push(c),
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\0' => out.push_str("\\0"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{1a}' => out.push_str("\\Z"),
            _ => out.push(c),
        }
    }
    out.push('\'');
    out
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

/// The WHERE condition shared by the offset queries: this partition (and topic), and an
/// offset inside one of the runs. Only the expected runs are listed so that rows at offsets
/// outside them (filtered records, transaction markers) can never make up for a missing one.
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
    for (i, run) in runs.iter().enumerate() {
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

/// `(c1 = 'v' AND c2 = 'w')`: the row test for one key.
fn key_condition(columns: &[String], key: &[impl AsRef<str>], nbe: bool) -> String {
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
        .map(|(c, v)| format!("{} = {}", ident(c), string_literal(v.as_ref(), nbe)))
        .collect();
    format!("({})", parts.join(" AND "))
}

/// Row counts per key for the `key_columns` strategy, one query per batch:
///
/// `SELECT CASE WHEN (c1 = 'v' AND c2 = 'w') THEN 0 WHEN (...) THEN 1 END AS k, COUNT(*)
/// FROM t WHERE (...) OR (...) GROUP BY 1`
///
/// Each result row is `(k, rows)` where `k` is the index of the key in `keys`; keys with no
/// row do not appear. The caller must ignore a NULL or out-of-range `k` (none is produced
/// while `keys` is non-empty). Keys must be distinct: a row is counted under the FIRST key
/// it matches, so pass each key once and account for multiplicity on the client. Note that
/// the comparison uses the column's collation: on MySQL/MariaDB with a case-insensitive or
/// PAD SPACE collation, keys differing only in case or trailing spaces match the same rows
/// (Doris compares bytes).
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
    let conditions: Vec<String> = keys
        .iter()
        .map(|key| key_condition(columns, key.as_ref(), nbe))
        .collect();
    let mut case = String::from("CASE");
    for (i, cond) in conditions.iter().enumerate() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The body of a single-quoted literal, checked to be exactly one token: it must start
    /// and end with `'` and every inner `'` must be part of a `''` pair (after backslash
    /// escapes when `backslash` is set). Returns the raw inner text.
    fn literal_body(lit: &str, backslash: bool) -> Option<&str> {
        let inner = lit.strip_prefix('\'')?.strip_suffix('\'')?;
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' if backslash => {
                    chars.next()?;
                }
                '\'' => match chars.next()? {
                    '\'' => {}
                    _ => return None,
                },
                _ => {}
            }
        }
        Some(inner)
    }

    /// MySQL/MariaDB, as documented in "String Literals": one left-to-right pass.
    fn mysql_unescape(lit: &str, nbe: bool) -> Option<String> {
        let inner = literal_body(lit, !nbe)?;
        let mut out = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' if !nbe => match chars.next()? {
                    '0' => out.push('\0'),
                    'b' => out.push('\u{8}'),
                    'n' => out.push('\n'),
                    'r' => out.push('\r'),
                    't' => out.push('\t'),
                    'Z' => out.push('\u{1a}'),
                    // \% and \_ keep their backslash (they are LIKE escapes).
                    e @ ('%' | '_') => {
                        out.push('\\');
                        out.push(e);
                    }
                    e => out.push(e),
                },
                '\'' => {
                    chars.next()?;
                    out.push('\'');
                }
                _ => out.push(c),
            }
        }
        Some(out)
    }

    /// Doris's `escapeBackSlash` (legacy `sql_scanner.flex` and Nereids
    /// `LogicalPlanBuilderAssistant`): backslash escapes only.
    fn doris_escape_backslash(s: &str) -> String {
        let mut out = String::new();
        let mut chars = s.chars();
        while let Some(c) = chars.next() {
            // A trailing lone backslash is kept, as Java's `(i + 1) < strLen` test does.
            if c == '\\'
                && let Some(e) = chars.next()
            {
                match e {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    'b' => out.push('\u{8}'),
                    '0' => out.push('\0'),
                    'Z' => out.push('\u{1a}'),
                    '_' | '%' => {
                        out.push('\\');
                        out.push(e);
                    }
                    _ => out.push(e),
                }
                continue;
            }
            out.push(c);
        }
        out
    }

    /// Doris legacy planner (< 2.0): `escapeBackSlash(body).replaceAll("''", "'")`.
    fn doris_legacy_unescape(lit: &str) -> Option<String> {
        let inner = literal_body(lit, true)?;
        Some(doris_escape_backslash(inner).replace("''", "'"))
    }

    /// Doris 2.x Nereids: `escapeBackSlash(body.replace("''", "'").replace("\"\"", "\""))`.
    fn doris_nereids_unescape(lit: &str) -> Option<String> {
        let inner = literal_body(lit, true)?;
        Some(doris_escape_backslash(
            &inner.replace("''", "'").replace("\"\"", "\""),
        ))
    }

    fn q<'a>(topic_column: Option<&'a str>) -> OffsetQuery<'a> {
        OffsetQuery {
            table: "example_db.dns_logs",
            partition_column: "partition",
            offset_column: "offset",
            topic_column,
            topic: "test",
            partition: 3,
        }
    }

    fn run(first: i64, last: i64) -> OffsetRun {
        OffsetRun { first, last }
    }

    #[test]
    fn escapes_with_backslashes() {
        let cases = [
            ("plain", "'plain'"),
            ("", "''"),
            ("it's", "'it''s'"),
            ("''", "''''''"),
            ("a\\b", "'a\\\\b'"),
            ("\\", "'\\\\'"),
            ("\\'", "'\\\\'''"),
            ("nul\0", "'nul\\0'"),
            ("l1\nl2", "'l1\\nl2'"),
            ("cr\r", "'cr\\r'"),
            ("z\u{1a}", "'z\\Z'"),
            ("say \"hi\"", "'say \\\"hi\\\"'"),
            ("50% _x_", "'50% _x_'"),
            ("tab\there", "'tab\there'"),
            ("é — 日本 🦀", "'é — 日本 🦀'"),
        ];
        for (input, want) in cases {
            assert_eq!(string_literal(input, false), want, "{input:?}");
            assert_eq!(mysql_unescape(want, false).as_deref(), Some(input));
            assert_eq!(doris_legacy_unescape(want).as_deref(), Some(input));
            assert_eq!(doris_nereids_unescape(want).as_deref(), Some(input));
        }
    }

    #[test]
    fn escapes_without_backslashes() {
        let cases = [
            ("it's", "'it''s'"),
            ("a\\b", "'a\\b'"),
            ("\\'", "'\\'''"),
            ("nul\0\n\r\u{1a}\"", "'nul\0\n\r\u{1a}\"'"),
            ("50%_", "'50%_'"),
        ];
        for (input, want) in cases {
            assert_eq!(string_literal(input, true), want, "{input:?}");
            assert_eq!(mysql_unescape(want, true).as_deref(), Some(input));
        }
    }

    #[test]
    fn injection_attempts_stay_inside_the_literal() {
        for attack in [
            "x' OR '1'='1",
            "x\\' OR 1=1 -- ",
            "x\\\\' OR 1=1 #",
            "'; DROP TABLE t; --",
            "\\",
            "x\0' OR 1=1",
        ] {
            for nbe in [false, true] {
                let lit = string_literal(attack, nbe);
                assert!(literal_body(&lit, !nbe).is_some(), "{lit}");
                assert_eq!(mysql_unescape(&lit, nbe).as_deref(), Some(attack));
            }
        }
    }

    #[test]
    fn large_string() {
        let big: String = "ab'\\\n\"".repeat(64 * 1024 / 6 + 1);
        assert!(big.len() >= 64 * 1024);
        for nbe in [false, true] {
            let lit = string_literal(&big, nbe);
            assert_eq!(mysql_unescape(&lit, nbe).as_deref(), Some(big.as_str()));
        }
        assert_eq!(
            doris_legacy_unescape(&string_literal(&big, false)),
            Some(big)
        );
    }

    /// The scheme `mysql_real_escape_string` uses (`\'`) is corrupted by Doris's legacy
    /// parser on adjacent quotes; this pins down why `string_literal` doubles quotes.
    #[test]
    fn backslash_quote_would_break_doris_legacy() {
        let mysql_style = r"'\'\''";
        assert_eq!(mysql_unescape(mysql_style, false).as_deref(), Some("''"));
        assert_eq!(doris_legacy_unescape(mysql_style).as_deref(), Some("'"));
        // A bare "" pair would collapse in Nereids.
        assert_eq!(doris_nereids_unescape(r#"'a""b'"#).as_deref(), Some("a\"b"));
    }

    #[test]
    fn identifiers() {
        assert_eq!(ident("offset"), "`offset`");
        assert_eq!(ident("we`ird"), "`we``ird`");
        assert_eq!(ident("``"), "``````");
        assert_eq!(ident("a.b"), "`a.b`");
        assert_eq!(ident("sp ace"), "`sp ace`");
        assert_eq!(table_ident("t"), "`t`");
        assert_eq!(table_ident("db.t"), "`db`.`t`");
        assert_eq!(table_ident("d`b.t`x"), "`d``b`.`t``x`");
    }

    #[test]
    fn count_offsets_one_run() {
        assert_eq!(
            count_offsets(&q(None), &[run(100, 199)], false),
            "SELECT COUNT(*), COUNT(DISTINCT `offset`) FROM `example_db`.`dns_logs` \
             WHERE `partition` = 3 AND (`offset` BETWEEN 100 AND 199)"
        );
    }

    #[test]
    fn count_offsets_two_runs_with_topic() {
        assert_eq!(
            count_offsets(&q(Some("topic")), &[run(0, 9), run(20, 29)], false),
            "SELECT COUNT(*), COUNT(DISTINCT `offset`) FROM `example_db`.`dns_logs` \
             WHERE `partition` = 3 AND `topic` = 'test' \
             AND (`offset` BETWEEN 0 AND 9 OR `offset` BETWEEN 20 AND 29)"
        );
    }

    #[test]
    fn single_offset_runs_use_equality() {
        assert_eq!(
            count_offsets(&q(None), &[run(7, 7), run(9, 12), run(15, 15)], false),
            "SELECT COUNT(*), COUNT(DISTINCT `offset`) FROM `example_db`.`dns_logs` \
             WHERE `partition` = 3 AND (`offset` = 7 OR `offset` BETWEEN 9 AND 12 OR `offset` = 15)"
        );
    }

    #[test]
    fn list_offsets_sql() {
        assert_eq!(
            list_offsets(&q(None), &[run(5, 5)], false),
            "SELECT `offset`, COUNT(*) FROM `example_db`.`dns_logs` \
             WHERE `partition` = 3 AND (`offset` = 5) GROUP BY `offset`"
        );
        assert_eq!(
            list_offsets(&q(Some("topic")), &[run(1, 2), run(4, 4)], false),
            "SELECT `offset`, COUNT(*) FROM `example_db`.`dns_logs` \
             WHERE `partition` = 3 AND `topic` = 'test' \
             AND (`offset` BETWEEN 1 AND 2 OR `offset` = 4) GROUP BY `offset`"
        );
    }

    #[test]
    fn offset_queries_escape_topic_and_identifiers() {
        let query = OffsetQuery {
            table: "t`x",
            partition_column: "p`",
            offset_column: "o",
            topic_column: Some("to"),
            topic: "it's\\",
            partition: -1,
        };
        assert_eq!(
            count_offsets(&query, &[run(i64::MAX - 1, i64::MAX)], false),
            "SELECT COUNT(*), COUNT(DISTINCT `o`) FROM `t``x` WHERE `p``` = -1 \
             AND `to` = 'it''s\\\\' AND (`o` BETWEEN 9223372036854775806 AND 9223372036854775807)"
        );
        assert_eq!(
            count_offsets(&query, &[run(1, 1)], true),
            "SELECT COUNT(*), COUNT(DISTINCT `o`) FROM `t``x` WHERE `p``` = -1 \
             AND `to` = 'it''s\\' AND (`o` = 1)"
        );
    }

    #[test]
    fn empty_runs_match_nothing() {
        assert_eq!(
            count_offsets(&q(None), &[], false),
            "SELECT COUNT(*), COUNT(DISTINCT `offset`) FROM `example_db`.`dns_logs` \
             WHERE `partition` = 3 AND (1 = 0)"
        );
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn count_keys_sql() {
        let columns = strings(&["client_ip", "domain", "time"]);
        let k0 = strings(&["192.168.1.10", "www.example.com", "2024-01-01 10:00:00"]);
        let k1 = strings(&["10.0.0.1", "o'reilly.com", "2024-01-01 10:00:01"]);
        assert_eq!(
            count_keys("dns_logs_from_flink01", &columns, &[&k0, &k1], false),
            "SELECT CASE \
             WHEN (`client_ip` = '192.168.1.10' AND `domain` = 'www.example.com' AND `time` = '2024-01-01 10:00:00') THEN 0 \
             WHEN (`client_ip` = '10.0.0.1' AND `domain` = 'o''reilly.com' AND `time` = '2024-01-01 10:00:01') THEN 1 \
             END AS k, COUNT(*) FROM `dns_logs_from_flink01` \
             WHERE (`client_ip` = '192.168.1.10' AND `domain` = 'www.example.com' AND `time` = '2024-01-01 10:00:00') \
             OR (`client_ip` = '10.0.0.1' AND `domain` = 'o''reilly.com' AND `time` = '2024-01-01 10:00:01') \
             GROUP BY 1"
        );
    }

    #[test]
    fn count_keys_single_column_and_escaping() {
        let columns = strings(&["v`al"]);
        let k = strings(&["a\\b\"c%_"]);
        assert_eq!(
            count_keys("db.t", &columns, &[&k], false),
            "SELECT CASE WHEN (`v``al` = 'a\\\\b\\\"c%_') THEN 0 END AS k, COUNT(*) \
             FROM `db`.`t` WHERE (`v``al` = 'a\\\\b\\\"c%_') GROUP BY 1"
        );
    }

    #[test]
    fn count_keys_empty_batch_is_valid_and_selects_nothing() {
        assert_eq!(
            count_keys::<&[String], String>("t", &strings(&["c"]), &[], false),
            "SELECT CASE WHEN 1 = 0 THEN 0 END AS k, COUNT(*) FROM `t` WHERE 1 = 0 GROUP BY 1"
        );
    }

    proptest! {
        #[test]
        fn literal_round_trips(s in any::<String>(), nbe in any::<bool>()) {
            let lit = string_literal(&s, nbe);
            prop_assert!(lit.starts_with('\'') && lit.ends_with('\'') && lit.len() >= 2);
            // literal_body fails on any unescaped quote inside.
            prop_assert!(literal_body(&lit, !nbe).is_some());
            prop_assert_eq!(mysql_unescape(&lit, nbe), Some(s.clone()));
            if !nbe {
                prop_assert_eq!(doris_legacy_unescape(&lit), Some(s.clone()));
                prop_assert_eq!(doris_nereids_unescape(&lit), Some(s));
            }
        }

        #[test]
        fn literal_round_trips_special_heavy(
            s in r#"['"\\\x00\n\r\x1a%_a`é]{0,40}"#,
            nbe in any::<bool>(),
        ) {
            let lit = string_literal(&s, nbe);
            prop_assert!(literal_body(&lit, !nbe).is_some());
            prop_assert_eq!(mysql_unescape(&lit, nbe), Some(s.clone()));
            if !nbe {
                prop_assert_eq!(doris_legacy_unescape(&lit), Some(s.clone()));
                prop_assert_eq!(doris_nereids_unescape(&lit), Some(s));
            }
        }

        #[test]
        fn ident_round_trips(s in any::<String>()) {
            let quoted = ident(&s);
            let inner = quoted.strip_prefix('`').and_then(|q| q.strip_suffix('`'));
            prop_assert!(inner.is_some());
            let inner = inner.unwrap_or_default();
            // Every inner backtick is doubled, so the identifier cannot be closed early.
            prop_assert_eq!(inner.replace("``", ""), inner.replace('`', ""));
            prop_assert_eq!(inner.replace("``", "`"), s);
        }
    }

    /// Replaces every single-quoted literal of `sql` by `?`, lexing as MySQL does (backslash
    /// escapes unless `nbe`, `''` inside a literal). Backtick identifiers are kept whole, so
    /// a quote inside one is not mistaken for a literal. `None` if a literal or identifier
    /// is left open.
    fn skeleton(sql: &str, nbe: bool) -> Option<String> {
        let mut out = String::new();
        let mut chars = sql.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\'' => {
                    loop {
                        match chars.next()? {
                            '\\' if !nbe => {
                                chars.next()?;
                            }
                            '\'' if chars.peek() == Some(&'\'') => {
                                chars.next();
                            }
                            '\'' => break,
                            _ => {}
                        }
                    }
                    out.push('?');
                }
                '`' => {
                    out.push('`');
                    loop {
                        let c = chars.next()?;
                        out.push(c);
                        if c == '`' {
                            if chars.peek() == Some(&'`') {
                                out.push('`');
                                chars.next();
                            } else {
                                break;
                            }
                        }
                    }
                }
                _ => out.push(c),
            }
        }
        Some(out)
    }

    /// Strings with every character the escaper or a parser treats specially, plus Latin-1
    /// range characters (U+0080–U+00FF, two UTF-8 bytes each) and astral ones.
    fn hostile_string() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            "['\"\\\\\\x00\\n\\r\\x1a\\t%_`;#/*\\- a-z\u{80}-\u{ff}\u{2028}\u{202e}\u{1F980}]{0,64}",
            prop::collection::vec(any::<char>(), 0..32).prop_map(|v| v.into_iter().collect()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        /// The escaper against the reference models of the three parsers, 20k hostile
        /// strings per run.
        #[test]
        fn literal_round_trips_hostile(s in hostile_string(), nbe in any::<bool>()) {
            let lit = string_literal(&s, nbe);
            prop_assert!(literal_body(&lit, !nbe).is_some());
            prop_assert_eq!(mysql_unescape(&lit, nbe), Some(s.clone()));
            if !nbe {
                prop_assert_eq!(doris_legacy_unescape(&lit), Some(s.clone()));
                prop_assert_eq!(doris_nereids_unescape(&lit), Some(s));
            }
        }

        /// No value can change the shape of a key query: with every literal lexed away, the
        /// statement is the same as for harmless values (so nothing escaped a literal).
        #[test]
        fn key_values_never_change_the_statement(
            keys in prop::collection::vec(prop::collection::vec(hostile_string(), 2), 1..5),
            nbe in any::<bool>(),
        ) {
            let columns = strings(&["c`1", "c2"]);
            let hostile: Vec<&[String]> = keys.iter().map(Vec::as_slice).collect();
            let tame_keys: Vec<Vec<String>> = keys.iter().map(|_| strings(&["v", "v"])).collect();
            let tame: Vec<&[String]> = tame_keys.iter().map(Vec::as_slice).collect();
            let got = skeleton(&count_keys("db.t", &columns, &hostile, nbe), nbe);
            let want = skeleton(&count_keys("db.t", &columns, &tame, nbe), nbe);
            prop_assert!(want.is_some());
            prop_assert_eq!(got, want);
        }
    }
}
