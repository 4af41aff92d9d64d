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
        count_offsets(&q(None), &[run(7, 7), run(19, 22), run(35, 35)], false),
        "SELECT COUNT(*), COUNT(DISTINCT `offset`) FROM `example_db`.`dns_logs` \
             WHERE `partition` = 3 AND (`offset` = 7 OR `offset` BETWEEN 19 AND 22 OR `offset` = 35)"
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
        list_offsets(&q(Some("topic")), &[run(1, 2), run(14, 14)], false),
        "SELECT `offset`, COUNT(*) FROM `example_db`.`dns_logs` \
             WHERE `partition` = 3 AND `topic` = 'test' \
             AND (`offset` BETWEEN 1 AND 2 OR `offset` = 14) GROUP BY `offset`"
    );
    // A filtered record between two runs: one range, its offset excluded.
    assert_eq!(
        list_offsets(&q(Some("topic")), &[run(1, 2), run(4, 4)], false),
        "SELECT `offset`, COUNT(*) FROM `example_db`.`dns_logs` \
             WHERE `partition` = 3 AND `topic` = 'test' \
             AND (`offset` BETWEEN 1 AND 4) AND `offset` NOT IN (3) GROUP BY `offset`"
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
fn filtered_offsets_between_runs_are_excluded_by_name() {
    assert_eq!(
        count_offsets(
            &q(None),
            &[run(0, 0), run(2, 4), run(6, 6), run(100, 100)],
            false
        ),
        "SELECT COUNT(*), COUNT(DISTINCT `offset`) FROM `example_db`.`dns_logs` \
             WHERE `partition` = 3 AND (`offset` BETWEEN 0 AND 6 OR `offset` = 100) \
             AND `offset` NOT IN (1, 5)"
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
fn an_empty_key_value_matches_empty_or_null() {
    let columns = strings(&["client_ip", "time"]);
    let k = strings(&["10.0.0.1", ""]);
    let q = count_keys("t", &columns, &[k.as_slice()], false);
    assert!(
        q.contains("(`client_ip` = '10.0.0.1' AND (`time` = '' OR `time` IS NULL))"),
        "{q}"
    );
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

#[test]
fn count_keys_compared_exact_in_the_case_plain_in_the_where() {
    let columns = strings(&["client_ip", "domain", "time"]);
    let compare = [
        KeyCompare::Binary,
        KeyCompare::Utf8Binary,
        KeyCompare::Plain,
    ];
    let k0 = strings(&["10.0.0.1", "a.com ", "2024-01-01T10:00:00"]);
    let k1 = strings(&["10.0.0.1", "A.com", "2024-01-01 10:00:01"]);
    assert_eq!(
        count_keys_compared("db.t", &columns, &compare, &[&k0, &k1], false),
        "SELECT CASE \
             WHEN (CAST(`client_ip` AS BINARY) = '10.0.0.1' AND CAST(CONVERT(`domain` USING utf8mb4) AS BINARY) = 'a.com ' AND `time` = '2024-01-01T10:00:00') THEN 0 \
             WHEN (CAST(`client_ip` AS BINARY) = '10.0.0.1' AND CAST(CONVERT(`domain` USING utf8mb4) AS BINARY) = 'A.com' AND `time` = '2024-01-01 10:00:01') THEN 1 \
             END AS k, COUNT(*) FROM `db`.`t` \
             WHERE (`client_ip` = '10.0.0.1' AND `domain` = 'a.com ' AND `time` = '2024-01-01T10:00:00') \
             OR (`client_ip` = '10.0.0.1' AND `domain` = 'A.com' AND `time` = '2024-01-01 10:00:01') \
             GROUP BY 1"
    );
}

#[test]
fn count_keys_compared_plain_is_count_keys() {
    let columns = strings(&["client_ip", "domain", "time"]);
    let k0 = strings(&["192.168.1.10", "www.example.com", "2024-01-01 10:00:00"]);
    let k1 = strings(&["10.0.0.1", "o'reilly.com", "2024-01-01 10:00:01"]);
    let plain = count_keys("t", &columns, &[&k0, &k1], true);
    for compare in [
        &[][..],
        &[KeyCompare::Plain; 3][..],
        &[KeyCompare::Plain][..],
    ] {
        assert_eq!(
            count_keys_compared("t", &columns, compare, &[&k0, &k1], true),
            plain
        );
    }
    // One exact column: only its comparison changes, only in the CASE.
    let one = count_keys_compared(
        "t",
        &columns,
        &[KeyCompare::Plain, KeyCompare::Binary],
        &[&k0],
        false,
    );
    assert_eq!(
        one,
        "SELECT CASE WHEN (`client_ip` = '192.168.1.10' AND CAST(`domain` AS BINARY) = \
             'www.example.com' AND `time` = '2024-01-01 10:00:00') THEN 0 END AS k, COUNT(*) \
             FROM `t` WHERE (`client_ip` = '192.168.1.10' AND `domain` = 'www.example.com' \
             AND `time` = '2024-01-01 10:00:00') GROUP BY 1"
    );
    assert_eq!(
        count_keys_compared::<&[String], String>("t", &columns, &[KeyCompare::Binary], &[], false),
        "SELECT CASE WHEN 1 = 0 THEN 0 END AS k, COUNT(*) FROM `t` WHERE 1 = 0 GROUP BY 1"
    );
}

#[test]
fn count_keys_joined_sql() {
    let columns = strings(&["client_ip", "domain", "time"]);
    let k0 = strings(&["10.0.0.1", "o'reilly.com", "2024-01-01 10:00:00"]);
    let k1 = strings(&["10.0.0.2", "b.com", "2024-01-01T10:00:01"]);
    assert_eq!(
        count_keys_joined(
            "db.t",
            &columns,
            &[],
            KeyRows::UnionSelect,
            &[&k0, &k1],
            false
        ),
        "SELECT MIN(k.i), COUNT(*), COUNT(DISTINCT k.j) FROM (\
             SELECT 0 AS i, 0 AS j, '10.0.0.1' AS c0, 'o''reilly.com' AS c1, '2024-01-01 10:00:00' AS c2 \
             UNION ALL SELECT 1, 1, '10.0.0.2', 'b.com', '2024-01-01T10:00:01') k \
             JOIN `db`.`t` t ON t.`client_ip` = k.c0 AND t.`domain` = k.c1 AND t.`time` = k.c2 \
             GROUP BY t.`client_ip`, t.`domain`, t.`time`"
    );
    // Exact columns: compared (and grouped) by their bytes beside the plain comparison
    // the index serves; a non-UTF-8 column through its UTF-8 conversion.
    let compare = [
        KeyCompare::Binary,
        KeyCompare::Utf8Binary,
        KeyCompare::Plain,
    ];
    assert_eq!(
        count_keys_joined("t", &columns, &compare, KeyRows::UnionSelect, &[&k0], true),
        "SELECT MIN(k.i), COUNT(*), COUNT(DISTINCT k.j) FROM (\
             SELECT 0 AS i, 0 AS j, '10.0.0.1' AS c0, 'o''reilly.com' AS c1, '2024-01-01 10:00:00' AS c2) k \
             JOIN `t` t ON t.`client_ip` = k.c0 AND CAST(t.`client_ip` AS BINARY) = k.c0 \
             AND CONVERT(t.`domain` USING utf8mb4) = k.c1 \
             AND CAST(CONVERT(t.`domain` USING utf8mb4) AS BINARY) = k.c1 AND t.`time` = k.c2 \
             GROUP BY CAST(t.`client_ip` AS BINARY), CAST(CONVERT(t.`domain` USING utf8mb4) AS BINARY), t.`time`"
    );
}

/// A table that merges rows its collation equates (`presence`): the columns are compared
/// by the sink, and a group of rows counts for every key of the batch it equals (grouped by
/// key too), so `Example.COM` and `example.com`, one row in a `_ci` upsert table, are both
/// present; elsewhere a group counts for the first key it equals only.
#[test]
fn count_keys_joined_by_collation_counts_a_row_for_every_key_it_equals() {
    let columns = strings(&["client_ip", "domain"]);
    let k0 = strings(&["10.0.0.1", "Example.COM"]);
    let k1 = strings(&["10.0.0.1", "example.com"]);
    let compare = [KeyCompare::Plain, KeyCompare::Collation];
    assert_eq!(
        count_keys_joined(
            "t",
            &columns,
            &compare,
            KeyRows::UnionSelect,
            &[&k0, &k1],
            true
        ),
        "SELECT k.i, COUNT(*), COUNT(DISTINCT k.j) FROM (\
             SELECT 0 AS i, 0 AS j, '10.0.0.1' AS c0, 'Example.COM' AS c1 \
             UNION ALL SELECT 1, 1, '10.0.0.1', 'example.com') k \
             JOIN `t` t ON t.`client_ip` = k.c0 AND t.`domain` = k.c1 \
             GROUP BY k.i, t.`client_ip`, t.`domain`"
    );
    // The CASE form (the bench's) compares such a column as the sink does too, though it
    // gives a row to the first key it equals.
    let case = count_keys_compared("t", &columns, &compare, &[&k0], true);
    assert!(!case.contains("BINARY"), "{case}");
}

#[test]
fn an_empty_value_is_asked_as_empty_and_as_null() {
    let columns = strings(&["a", "b", "c"]);
    let k0 = strings(&["", "x", ""]);
    let k1 = strings(&["y", "z", "w"]);
    assert_eq!(derived_rows(&k0), 4);
    assert_eq!(derived_rows(&k1), 1);
    assert_eq!(
        count_keys_joined("t", &columns, &[], KeyRows::UnionSelect, &[&k0, &k1], false),
        "SELECT MIN(k.i), COUNT(*), COUNT(DISTINCT k.j) FROM (\
             SELECT 0 AS i, 0 AS j, '' AS c0, 'x' AS c1, '' AS c2 \
             UNION ALL SELECT 0, 1, NULL, 'x', '' \
             UNION ALL SELECT 0, 2, '', 'x', NULL \
             UNION ALL SELECT 0, 3, NULL, 'x', NULL \
             UNION ALL SELECT 1, 4, 'y', 'z', 'w') k \
             JOIN `t` t ON t.`a` <=> k.c0 AND t.`b` = k.c1 AND t.`c` <=> k.c2 \
             GROUP BY t.`a`, t.`b`, t.`c`"
    );
}

#[test]
fn count_keys_joined_as_a_value_list() {
    let columns = strings(&["client_ip", "domain", "time"]);
    let k0 = strings(&["10.0.0.1", "o'reilly.com", "2024-01-01 10:00:00"]);
    let k1 = strings(&["", "b.com", "2024-01-01T10:00:01"]);
    let k2 = strings(&["10.0.0.3", "c.com", "x"]);
    // The first row names the columns; the others, empty values doubled as for
    // UNION ALL SELECT, follow in one value list.
    assert_eq!(
        count_keys_joined("t", &columns, &[], KeyRows::Values, &[&k0, &k1, &k2], false),
        "SELECT MIN(k.i), COUNT(*), COUNT(DISTINCT k.j) FROM (\
             SELECT 0 AS i, 0 AS j, '10.0.0.1' AS c0, 'o''reilly.com' AS c1, '2024-01-01 10:00:00' AS c2 \
             UNION ALL VALUES (1, 1, '', 'b.com', '2024-01-01T10:00:01'), \
             (1, 2, NULL, 'b.com', '2024-01-01T10:00:01'), (2, 3, '10.0.0.3', 'c.com', 'x')) k \
             JOIN `t` t ON t.`client_ip` <=> k.c0 AND t.`domain` = k.c1 AND t.`time` = k.c2 \
             GROUP BY t.`client_ip`, t.`domain`, t.`time`"
    );
    // One key, one row: no value list at all.
    assert_eq!(
        count_keys_joined("t", &columns, &[], KeyRows::Values, &[&k0], false),
        count_keys_joined("t", &columns, &[], KeyRows::UnionSelect, &[&k0], false),
    );
}

#[test]
fn which_servers_take_a_value_list() {
    for (version, want) in [
        ("10.11.19-MariaDB-0+deb12u1", KeyRows::Prepared),
        ("11.4.2-MariaDB", KeyRows::Prepared),
        ("10.3.3-MariaDB", KeyRows::Prepared),
        ("5.5.5-10.6.1-MariaDB-log", KeyRows::Prepared),
        ("5.5.5-10.2.1-MariaDB-log", KeyRows::UnionSelect),
        ("10.3.2-MariaDB", KeyRows::UnionSelect),
        ("10.2.44-MariaDB-log", KeyRows::UnionSelect),
        ("8.0.36", KeyRows::UnionSelect),
        ("8.0.36-0ubuntu0.22.04.1", KeyRows::UnionSelect),
        ("5.7.44-log", KeyRows::UnionSelect),
        ("5.7.99", KeyRows::UnionSelect),
        ("", KeyRows::UnionSelect),
        ("mariadb", KeyRows::UnionSelect),
        ("10.x-MariaDB", KeyRows::UnionSelect),
    ] {
        assert_eq!(key_rows_for(version), want, "{version:?}");
    }
}

/// `n` distinct keys of three columns, the i-th with values of `len` characters or more.
fn keys_of(n: usize, len: usize) -> Vec<Vec<String>> {
    (0..n)
        .map(|i| {
            let v = format!("{i:0>len$}");
            vec![v.clone(), format!("d{v}"), "2024-01-01 10:00:00".into()]
        })
        .collect()
}

#[test]
fn prepared_shapes_round_up_and_leave_what_they_cannot_hold_to_text() {
    let shape = |keys: &[Vec<String>]| PreparedShape::of(keys, 3);
    // Too few keys: text.
    assert_eq!(shape(&keys_of(PREPARED_MIN_KEYS - 1, 4)), None);
    // Rows to a power of two, lengths too, at least 16.
    assert_eq!(
        shape(&keys_of(PREPARED_MIN_KEYS, 4)),
        Some(PreparedShape {
            rows: 64,
            lengths: vec![16, 16, 32]
        })
    );
    assert_eq!(shape(&keys_of(1000, 20)).map(|s| s.rows), Some(1024));
    assert_eq!(
        shape(&keys_of(1000, 20)).map(|s| s.lengths),
        Some(vec![32, 32, 32])
    );
    // The longest value decides, wherever it is in the batch.
    let mut keys = keys_of(100, 4);
    keys[77][1] = "x".repeat(200);
    assert_eq!(shape(&keys).map(|s| s.lengths), Some(vec![16, 256, 32]));
    // Characters, not bytes: 40 two-byte characters are 40 (CHAR(n) counts characters),
    // 40 four-byte ones too.
    keys[77][1] = "é".repeat(40);
    assert_eq!(shape(&keys).map(|s| s.lengths), Some(vec![16, 64, 32]));
    keys[77][1] = "😀".repeat(40);
    assert_eq!(shape(&keys).map(|s| s.lengths), Some(vec![16, 64, 32]));
    keys[77][1] = "😀".repeat(PREPARED_MAX_CHARS);
    assert_eq!(
        shape(&keys).map(|s| s.lengths),
        Some(vec![16, PREPARED_MAX_CHARS, 32])
    );
    // Longer than the most a column declares: text.
    keys[77][1] = "x".repeat(PREPARED_MAX_CHARS + 1);
    assert_eq!(shape(&keys), None);
    // An empty value needs a NULL row beside it: text.
    keys[77][1] = String::new();
    assert_eq!(shape(&keys), None);
    // More parameters than the protocol counts: text. 21,845 keys of 3 columns round up
    // to 32,768 rows, 98,304 parameters; 16,384 keys are 49,152.
    assert_eq!(shape(&keys_of(16_384, 4)).map(|s| s.rows), Some(16_384));
    assert_eq!(shape(&keys_of(16_385, 4)), None);
    assert!(PreparedShape::of(&keys_of(20_000, 4)[..], 3).is_none());
    // A key that does not fit the columns: text (whose writer refuses it too).
    let mut keys = keys_of(100, 4);
    keys[3].pop();
    assert_eq!(shape(&keys), None);
}

#[test]
fn prepared_params_are_the_keys_row_by_row_then_nulls() {
    let keys = keys_of(65, 4);
    let shape = PreparedShape::of(&keys, 3).expect("a shape");
    assert_eq!(shape.rows, 128);
    let params = shape.params(&keys);
    assert_eq!(params.len(), 128 * 3);
    for (i, key) in keys.iter().enumerate() {
        let want: Vec<Option<&str>> = key.iter().map(|v| Some(v.as_str())).collect();
        assert_eq!(&params[i * 3..i * 3 + 3], want.as_slice(), "key {i}");
    }
    assert!(params[65 * 3..].iter().all(Option::is_none));
}

#[test]
fn count_keys_prepared_declares_the_first_row_and_places_every_value() {
    let columns = strings(&["client_ip", "domain", "time"]);
    let shape = PreparedShape {
        rows: 4,
        lengths: vec![16, 64, 32],
    };
    let compare = [KeyCompare::Plain, KeyCompare::Binary, KeyCompare::Plain];
    let q = count_keys_prepared("db.t", &columns, &compare, &shape);
    assert_eq!(
        q,
        "SELECT MIN(k.i), COUNT(*), COUNT(DISTINCT k.j) FROM (\
             SELECT 0 AS i, 0 AS j, CAST(? AS CHAR(16)) AS c0, CAST(? AS CHAR(64)) AS c1, \
             CAST(? AS CHAR(32)) AS c2 \
             UNION ALL VALUES (1, 1, ?, ?, ?), (2, 2, ?, ?, ?), (3, 3, ?, ?, ?)) k \
             JOIN `db`.`t` t ON t.`client_ip` = k.c0 AND t.`domain` = k.c1 \
             AND CAST(t.`domain` AS BINARY) = k.c1 AND t.`time` = k.c2 \
             GROUP BY t.`client_ip`, CAST(t.`domain` AS BINARY), t.`time`"
    );
    // As many placeholders as parameters, at every size.
    for n in [PREPARED_MIN_KEYS, 100, 1000, 4096] {
        let keys = keys_of(n, 4);
        let shape = PreparedShape::of(&keys, 3).expect("a shape");
        let q = count_keys_prepared("t", &columns, &[], &shape);
        assert_eq!(
            q.matches('?').count(),
            shape.params(&keys).len(),
            "{n} keys"
        );
    }
}

#[test]
fn count_keys_joined_empty_or_invalid_batch_selects_nothing() {
    let want = "SELECT MIN(k.i), COUNT(*), COUNT(DISTINCT k.j) FROM (SELECT 0 AS i, 0 AS j) k \
                    JOIN `t` t ON 1 = 0 GROUP BY k.i";
    for form in [KeyRows::UnionSelect, KeyRows::Values, KeyRows::Prepared] {
        assert_eq!(
            count_keys_joined::<&[String], String>("t", &strings(&["c"]), &[], form, &[], false),
            want
        );
    }
}

/// The shape of a statement as Doris's planners see its expressions: the deepest
/// expression (parentheses nest; `a AND b AND c` is a left-deep binary tree, one level
/// per operator) and the most children of one node (operands of one AND/OR chain,
/// items of one comma list, WHEN arms of one CASE, branches of one UNION ALL). Literals
/// and identifiers are lexed away first ([`skeleton`]).
fn doris_shape(sql: &str) -> (usize, usize) {
    let sk = skeleton(sql, false).expect("lexes");
    // One frame per open parenthesis: (AND/OR operators, commas, WHENs, UNIONs,
    // deepest child).
    let mut stack: Vec<[usize; 5]> = vec![[0; 5]];
    let mut children = 0usize;
    let mut depth = 0usize;
    let words: Vec<String> = sk
        .replace('(', " ( ")
        .replace(')', " ) ")
        .replace(',', " , ")
        .split_whitespace()
        .map(str::to_ascii_uppercase)
        .collect();
    let close = |f: [usize; 5]| -> (usize, usize) {
        let kids = (f[0] + 1).max(f[1] + 1).max(f[2] * 2 + 1).max(f[3] + 1);
        (f[0] + f[4] + 1, kids)
    };
    for w in &words {
        let top = stack.last_mut().expect("frame");
        match w.as_str() {
            "(" => stack.push([0; 5]),
            ")" => {
                let f = stack.pop().expect("balanced");
                let (d, k) = close(f);
                children = children.max(k);
                let parent = stack.last_mut().expect("balanced");
                parent[4] = parent[4].max(d);
            }
            "AND" | "OR" => top[0] += 1,
            "," => top[1] += 1,
            "WHEN" => top[2] += 1,
            "UNION" => {
                // Each branch has its own select list.
                children = children.max(top[1] + 1);
                top[1] = 0;
                top[3] += 1;
            }
            _ => {}
        }
    }
    let (d, k) = close(stack.pop().expect("top"));
    depth = depth.max(d);
    (depth, children.max(k))
}

#[test]
fn doris_expression_limits_hold_for_the_join_form_at_its_bound() {
    use crate::sink::mysql::DORIS_MAX_KEY_ROWS;
    const EXPR_DEPTH_LIMIT: usize = 3000;
    const EXPR_CHILDREN_LIMIT: usize = 10_000;
    // The bound in keys of one derived row each, and in keys with empty values (four
    // derived rows each), over 3 and over 8 key columns.
    for width in [3usize, 8] {
        let columns: Vec<String> = (0..width).map(|c| format!("c{c}")).collect();
        let full: Vec<Vec<String>> = (0..DORIS_MAX_KEY_ROWS)
            .map(|i| (0..width).map(|c| format!("v{i}-{c}")).collect())
            .collect();
        let empties: Vec<Vec<String>> = (0..DORIS_MAX_KEY_ROWS / 4)
            .map(|i| {
                (0..width)
                    .map(|c| {
                        if c < 2 {
                            String::new()
                        } else {
                            format!("v{i}")
                        }
                    })
                    .collect()
            })
            .collect();
        for keys in [&full, &empties] {
            let rows: usize = keys.iter().map(derived_rows).sum();
            assert!(rows <= DORIS_MAX_KEY_ROWS);
            let (depth, children) = doris_shape(&count_keys_joined(
                "db.t",
                &columns,
                &[],
                KeyRows::UnionSelect,
                keys,
                false,
            ));
            assert!(
                depth < 50 && children <= DORIS_MAX_KEY_ROWS,
                "width {width}: depth {depth}, children {children}"
            );
            assert!(depth < EXPR_DEPTH_LIMIT && children < EXPR_CHILDREN_LIMIT);
        }
    }
    // The measure sees what the limits are about: the CASE form's OR chain and WHEN
    // arms grow with the batch, past both limits at 5,000 keys.
    let columns = strings(&["a", "b", "c"]);
    let keys: Vec<Vec<String>> = (0..5_000)
        .map(|i| vec![format!("a{i}"), format!("b{i}"), format!("c{i}")])
        .collect();
    let (depth, children) = doris_shape(&count_keys("t", &columns, &keys, false));
    assert!(
        depth > EXPR_DEPTH_LIMIT && children > EXPR_CHILDREN_LIMIT,
        "CASE form at 5,000 keys: depth {depth}, children {children}"
    );
}

#[test]
fn which_collations_are_compared_exactly() {
    use KeyCompare::*;
    let cases = [
        // Byte-exact already: no collation (DATETIME, INT, VARBINARY), NO PAD binary.
        (None, None, Plain),
        (Some("binary"), Some("binary"), Plain),
        (Some("utf8mb4_nopad_bin"), Some("utf8mb4"), Plain),
        (Some("utf8mb3_nopad_bin"), Some("utf8mb3"), Plain),
        (Some("utf8mb4_0900_bin"), Some("utf8mb4"), Plain),
        (Some("UTF8MB4_NOPAD_BIN"), None, Plain),
        // PAD SPACE binary (MariaDB, MySQL 5.7 and 8).
        (Some("utf8mb4_bin"), Some("utf8mb4"), Binary),
        (Some("utf8_bin"), Some("utf8"), Binary),
        (Some("utf8mb3_bin"), None, Binary),
        // Case-insensitive, or NO PAD but not binary.
        (Some("utf8mb4_general_ci"), Some("utf8mb4"), Binary),
        (Some("utf8mb4_unicode_ci"), Some("utf8mb4"), Binary),
        (Some("utf8mb4_nopad_general_ci"), Some("utf8mb4"), Binary),
        (Some("utf8mb4_0900_ai_ci"), Some("utf8mb4"), Binary),
        (Some("utf8mb4_0900_as_cs"), Some("utf8mb4"), Binary),
        (Some("utf8mb4_uca1400_as_cs"), Some("utf8mb4"), Binary),
        // Not UTF-8: compared as its UTF-8 conversion.
        (Some("latin1_swedish_ci"), Some("latin1"), Utf8Binary),
        (Some("latin1_bin"), None, Utf8Binary),
        (Some("ascii_general_ci"), Some("ascii"), Utf8Binary),
        // NO PAD binary in another character set: MariaDB refuses to compare it with a
        // non-ASCII UTF-8 literal (illegal mix of collations).
        (Some("latin1_nopad_bin"), Some("latin1"), Utf8Binary),
        (Some("latin1_nopad_bin"), None, Utf8Binary),
        (Some("ucs2_nopad_bin"), Some("ucs2"), Utf8Binary),
    ];
    for (collation, charset, want) in cases {
        assert_eq!(key_compare_for(collation, charset), want, "{collation:?}");
    }
}

#[test]
fn column_collations_sql() {
    assert_eq!(
        column_collations("dns_logs", false).as_deref(),
        Some(
            "SELECT COLUMN_NAME, DATA_TYPE, COLLATION_NAME, CHARACTER_SET_NAME, COLUMN_TYPE, \
                 DATETIME_PRECISION, NUMERIC_PRECISION, NUMERIC_SCALE \
                 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() \
                 AND TABLE_NAME = 'dns_logs'"
        )
    );
    assert_eq!(
        column_collations("ex'db.t\\x", false).as_deref(),
        Some(
            "SELECT COLUMN_NAME, DATA_TYPE, COLLATION_NAME, CHARACTER_SET_NAME, COLUMN_TYPE, \
                 DATETIME_PRECISION, NUMERIC_PRECISION, NUMERIC_SCALE \
                 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'ex''db' \
                 AND TABLE_NAME = 't\\\\x'"
        )
    );
    assert_eq!(
        column_collations("db.t\\x", true).as_deref(),
        Some(
            "SELECT COLUMN_NAME, DATA_TYPE, COLLATION_NAME, CHARACTER_SET_NAME, COLUMN_TYPE, \
                 DATETIME_PRECISION, NUMERIC_PRECISION, NUMERIC_SCALE \
                 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = 'db' \
                 AND TABLE_NAME = 't\\x'"
        )
    );
    assert_eq!(column_collations("a.b.c", false), None);
}

proptest! {
    #![proptest_config(crate::test_seed::config())]
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

/// The escaping as first written, one character at a time: the reference the copying
/// version must match byte for byte.
fn literal_by_chars(s: &str, nbe: bool) -> String {
    let mut out = String::from("'");
    for c in s.chars() {
        match c {
            '\'' => out.push_str("''"),
            _ if nbe => out.push(c),
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

proptest! {
    #![proptest_config(crate::test_seed::with_cases(20_000))]

    #[test]
    fn literal_equals_the_character_by_character_escaping(s in hostile_string(), nbe in any::<bool>()) {
        prop_assert_eq!(string_literal(&s, nbe), literal_by_chars(&s, nbe));
    }

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
        // Only emptiness shapes the statement (an empty value also matches NULL).
        let tame_keys: Vec<Vec<String>> = keys
            .iter()
            .map(|k| k.iter().map(|v| if v.is_empty() { String::new() } else { "v".into() }).collect())
            .collect();
        let tame: Vec<&[String]> = tame_keys.iter().map(Vec::as_slice).collect();
        let got = skeleton(&count_keys("db.t", &columns, &hostile, nbe), nbe);
        let want = skeleton(&count_keys("db.t", &columns, &tame, nbe), nbe);
        prop_assert!(want.is_some());
        prop_assert_eq!(got, want);
        let compare = [KeyCompare::Binary, KeyCompare::Utf8Binary];
        let got = skeleton(&count_keys_compared("db.t", &columns, &compare, &hostile, nbe), nbe);
        let want = skeleton(&count_keys_compared("db.t", &columns, &compare, &tame, nbe), nbe);
        prop_assert!(want.is_some());
        prop_assert_eq!(got, want);
    }
}
