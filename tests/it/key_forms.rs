//! Issue 15: the key count's JOIN form (`sql::count_keys_joined`, what the sink sends) gives
//! every key the same row count as the CASE form (`sql::count_keys_compared`, what it sent
//! before), on real MariaDB.
//!
//! The CASE form defines the semantics the key book was built and tested on: a row is
//! counted once, under the FIRST key of the batch it matches (compared exactly on columns
//! whose collation is not byte-exact), and an empty key value matches `''` or NULL. The
//! JOIN form reaches the same answer differently (derived key table, groups of equal rows,
//! `MIN(k.i)`), so it is checked against the CASE form on random batches drawn from small
//! pools built to collide: trailing spaces and case (equal under PAD SPACE and `_ci`),
//! hostile bytes (quotes, backslashes, NUL, injections, CJK), empty values against NULL and
//! `''` rows, duplicate rows, and DATETIME texts the server equates
//! (`2024-05-01 12:00:00` = `2024-05-01T12:00:00` = `2024-5-1 12:0:0`) or cannot read.
//! Both the product's sink (kind `mysql`, collations read from information_schema, derived
//! rows as a value list on MariaDB; kind `doris`, plain comparisons, `UNION ALL SELECT`
//! rows) and the bare statements, with the derived rows written either way
//! (`sql::KeyRows`), are compared.

use crate::faults::Rng;
use crate::support::*;
use gap_auditor::sink::Verifier;
use gap_auditor::sink::mysql::{MysqlSink, MysqlTarget};
use gap_auditor::sink::sql::{self, KeyCompare, KeyRows};
use gap_auditor::types::Key;
use mysql_async::prelude::Queryable;
use std::time::Duration;

const IPS: &[&str] = &["10.0.0.1", "10.0.0.1 ", "", "10.0.0.2"];
const DOMAINS: &[&str] = &[
    "a.example",
    "a.example ",
    "a.example  ",
    "A.example",
    "",
    "o'reilly''s.com",
    "back\\slash\\",
    "x\"y",
    "é.example",
    "日本.example",
    "' OR '1'='1",
    "nul\0byte",
    "tab\t",
];
/// Texts of one time: the first four are equal as DATETIME.
const TIMES: &[&str] = &[
    "2024-05-01 12:00:00",
    "2024-05-01T12:00:00",
    "2024-05-01 12:00:00.000",
    "2024-5-1 12:0:0",
    "2024-05-01 12:00:01",
    "",
    "not a time",
];

fn columns() -> Vec<String> {
    ["client_ip", "domain", "time"].map(String::from).to_vec()
}

fn pick<'a>(rng: &mut Rng, pool: &[&'a str]) -> &'a str {
    pool[rng.range(0, pool.len() as u64) as usize]
}

/// A table with key columns in `collation` and `time` of `time_type`, indexed as
/// docs/SINK-DDL.md recommends.
async fn create(db: &Db, table: &str, collation: &str, time_type: &str) {
    let time = if time_type.starts_with("VARCHAR") {
        format!("{time_type} COLLATE {collation}")
    } else {
        time_type.to_string()
    };
    let mut c = db.pool.get_conn().await.expect("mysql conn");
    c.query_drop(format!(
        "CREATE TABLE `{table}` (client_ip VARCHAR(80) COLLATE {collation}, \
         domain VARCHAR(200) COLLATE {collation}, time {time}, \
         KEY k (client_ip, domain, time)) DEFAULT CHARSET = utf8mb4 COLLATE = {collation}"
    ))
    .await
    .expect("create table");
}

/// Inserts rows with a prepared statement (independent of the auditor's escaping); `None`
/// is NULL.
async fn insert(db: &Db, table: &str, rows: &[[Option<&str>; 3]]) {
    let mut c = db.pool.get_conn().await.expect("mysql conn");
    for r in rows {
        c.exec_drop(
            format!("INSERT INTO `{table}` (client_ip, domain, time) VALUES (?, ?, ?)"),
            (r[0], r[1], r[2]),
        )
        .await
        .expect("insert");
    }
}

fn sink(table: &str, kind: &'static str) -> MysqlSink {
    MysqlSink::new(
        &mysql_url(),
        None,
        None,
        MysqlTarget {
            table: table.to_string(),
            columns: gap_auditor::config::SinkColumns {
                partition: String::new(),
                offset: String::new(),
                topic: None,
                key: columns(),
            },
        },
        Duration::from_secs(30),
        kind,
        &gap_auditor::sink::tls::TlsSettings::default(),
    )
    .expect("sink")
}

/// Counts per key of the CASE form, sent as is.
async fn case_counts(db: &Db, table: &str, compare: &[KeyCompare], keys: &[Key]) -> Vec<u64> {
    let values: Vec<Vec<&str>> = keys.iter().map(|k| k.values().collect()).collect();
    let q = sql::count_keys_compared(table, &columns(), compare, &values, false);
    let mut c = db.pool.get_conn().await.expect("mysql conn");
    c.query_drop("SET NAMES utf8mb4").await.expect("names");
    let mut out = vec![0u64; keys.len()];
    for (k, n) in c
        .query::<(Option<i64>, i64), _>(q)
        .await
        .expect("CASE form")
    {
        if let Some(k) = k {
            out[k as usize] += n as u64;
        }
    }
    out
}

/// Counts per key of the JOIN form with its derived rows written as `form`, sent as is.
async fn join_counts(
    db: &Db,
    table: &str,
    compare: &[KeyCompare],
    form: KeyRows,
    keys: &[Key],
) -> Vec<u64> {
    let values: Vec<Vec<&str>> = keys.iter().map(|k| k.values().collect()).collect();
    let q = sql::count_keys_joined(table, &columns(), compare, form, &values, false);
    let mut c = db.pool.get_conn().await.expect("mysql conn");
    c.query_drop("SET NAMES utf8mb4").await.expect("names");
    let mut out = vec![0u64; keys.len()];
    for (k, n, per_row) in c
        .query::<(Option<i64>, i64, i64), _>(q)
        .await
        .expect("JOIN form")
    {
        assert!(per_row > 0 && n % per_row == 0, "{n} joined over {per_row}");
        if let Some(k) = k {
            out[k as usize] += (n / per_row) as u64;
        }
    }
    out
}

/// Counts per key of the prepared JOIN form (`sql::count_keys_prepared`, the batch's values
/// as parameters over the binary protocol), as the sink sends full batches to MariaDB.
async fn prepared_counts(db: &Db, table: &str, compare: &[KeyCompare], keys: &[Key]) -> Vec<u64> {
    let values: Vec<Vec<&str>> = keys.iter().map(|k| k.values().collect()).collect();
    let shape = sql::PreparedShape::of(&values, 3).expect("a batch the prepared form takes");
    let q = sql::count_keys_prepared(table, &columns(), compare, &shape);
    let params: Vec<mysql_async::Value> = shape
        .params(&values)
        .into_iter()
        .map(|v| v.map_or(mysql_async::Value::NULL, |v| v.as_bytes().into()))
        .collect();
    let mut c = db.pool.get_conn().await.expect("mysql conn");
    c.query_drop("SET NAMES utf8mb4").await.expect("names");
    let mut out = vec![0u64; keys.len()];
    for (k, n, per_row) in c
        .exec::<(Option<i64>, i64, i64), _, _>(q, mysql_async::Params::Positional(params))
        .await
        .expect("prepared JOIN form")
    {
        assert!(per_row > 0 && n % per_row == 0, "{n} joined over {per_row}");
        if let Some(k) = k {
            out[k as usize] += (n / per_row) as u64;
        }
    }
    out
}

/// A DATETIME key column (the seed's DDL) on both forms: the server converts the key's text
/// the same way for a literal and for a derived-table value, so every text it reads as
/// the row's time finds the row; a text it cannot read, or another time, does not; an
/// empty value finds the NULL row; within one batch the row goes to the first equal text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datetime_key_column_converts_alike_in_both_forms() {
    let db = Db::new();
    let t = unique("keyforms_dt");
    create(&db, &t, "utf8mb4_nopad_bin", "DATETIME").await;
    insert(
        &db,
        &t,
        &[
            [
                Some("10.0.0.1"),
                Some("a.example"),
                Some("2024-05-01 12:00:00"),
            ],
            [Some("10.0.0.1"), Some("a.example"), None],
        ],
    )
    .await;
    let k = |time: &str| Key::new(["10.0.0.1", "a.example", time]);
    let alone = [
        ("2024-05-01 12:00:00", 1),
        ("2024-05-01T12:00:00", 1),
        ("2024-05-01 12:00:00.000", 1),
        ("2024-5-1 12:0:0", 1),
        ("2024-05-01 12:00:01", 0),
        ("not a time", 0),
        ("", 1),
    ];
    let product = sink(&t, "mysql");
    let doris = sink(&t, "doris");
    for (time, want) in alone {
        let keys = [k(time)];
        for (form, got) in [
            ("CASE", case_counts(&db, &t, &[], &keys).await),
            (
                "JOIN",
                join_counts(&db, &t, &[], KeyRows::UnionSelect, &keys).await,
            ),
            (
                "JOIN values",
                join_counts(&db, &t, &[], KeyRows::Values, &keys).await,
            ),
            (
                "sink mysql",
                product.count_keys(&[&keys[0]]).await.expect("count"),
            ),
            (
                "sink doris",
                doris.count_keys(&[&keys[0]]).await.expect("count"),
            ),
        ] {
            assert_eq!(got, vec![want], "{form}: time {time:?}");
        }
    }
    // Equal texts in one batch: the row is counted once, under the first of them.
    let batch = [
        k("2024-05-01 12:00:01"),
        k("2024-05-01T12:00:00"),
        k("2024-05-01 12:00:00"),
        k(""),
    ];
    let refs: Vec<&Key> = batch.iter().collect();
    for (form, got) in [
        ("CASE", case_counts(&db, &t, &[], &batch).await),
        (
            "JOIN",
            join_counts(&db, &t, &[], KeyRows::UnionSelect, &batch).await,
        ),
        (
            "JOIN values",
            join_counts(&db, &t, &[], KeyRows::Values, &batch).await,
        ),
        (
            "sink mysql",
            product.count_keys(&refs).await.expect("count"),
        ),
        ("sink doris", doris.count_keys(&refs).await.expect("count")),
    ] {
        assert_eq!(got, vec![0, 1, 0, 1], "{form}");
    }
    product.close().await;
    doris.close().await;
}

/// The property: random batches over colliding pools, on PAD SPACE, case-insensitive and
/// byte-exact key columns, DATETIME and string times; every form agrees with the CASE form
/// key by key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_join_form_counts_every_key_as_the_case_form_does() {
    let db = Db::new();
    let mut rng = Rng::from_env("key forms");
    let tables = [
        ("utf8mb4_bin", "DATETIME"),
        ("utf8mb4_general_ci", "VARCHAR(40)"),
        ("utf8mb4_nopad_bin", "DATETIME"),
        ("utf8mb4_nopad_bin", "VARCHAR(40)"),
    ];
    let mut checked = 0u64;
    let mut nonzero = 0u64;
    for (collation, time_type) in tables {
        let t = unique("keyforms_prop");
        create(&db, &t, collation, time_type).await;
        let datetime = time_type == "DATETIME";
        // Rows: 80 draws, each 1–3 copies, some values NULL.
        let mut rows: Vec<[Option<&str>; 3]> = Vec::new();
        for _ in 0..80 {
            let null = |rng: &mut Rng, v: &'static str| (rng.range(0, 8) != 0).then_some(v);
            let ip = pick(&mut rng, IPS);
            let domain = pick(&mut rng, DOMAINS);
            // A DATETIME column stores only readable times (strict mode refuses the rest).
            let time = if datetime {
                pick(&mut rng, &TIMES[..5])
            } else {
                pick(&mut rng, TIMES)
            };
            let row = [
                null(&mut rng, ip),
                null(&mut rng, domain),
                null(&mut rng, time),
            ];
            for _ in 0..rng.range(1, 4) {
                rows.push(row);
            }
        }
        insert(&db, &t, &rows).await;
        let string = sql::key_compare_for(Some(collation), Some("utf8mb4"));
        let compare = [
            string,
            string,
            if datetime { KeyCompare::Plain } else { string },
        ];
        let product = sink(&t, "mysql");
        let doris = sink(&t, "doris");
        for case in 0..40 {
            let mut keys: Vec<Key> = Vec::new();
            for _ in 0..rng.range(1, 17) {
                let k = Key::new([
                    pick(&mut rng, IPS),
                    pick(&mut rng, DOMAINS),
                    pick(&mut rng, TIMES),
                ]);
                // The verifier passes distinct keys.
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
            let refs: Vec<&Key> = keys.iter().collect();
            let want = case_counts(&db, &t, &compare, &keys).await;
            let what = format!("{collation}/{time_type}, case {case}, keys {keys:?}");
            for form in [KeyRows::UnionSelect, KeyRows::Values] {
                assert_eq!(
                    join_counts(&db, &t, &compare, form, &keys).await,
                    want,
                    "JOIN {form:?}: {what}"
                );
            }
            assert_eq!(
                product.count_keys(&refs).await.expect("count"),
                want,
                "sink mysql: {what}"
            );
            // Plain comparisons (what kind doris sends) agree with the plain CASE form.
            let plain = case_counts(&db, &t, &[], &keys).await;
            for form in [KeyRows::UnionSelect, KeyRows::Values] {
                assert_eq!(
                    join_counts(&db, &t, &[], form, &keys).await,
                    plain,
                    "plain JOIN {form:?}: {what}"
                );
            }
            assert_eq!(
                doris.count_keys(&refs).await.expect("count"),
                plain,
                "sink doris: {what}"
            );
            checked += keys.len() as u64;
            nonzero += want.iter().filter(|&&n| n > 0).count() as u64;
        }
        product.close().await;
        doris.close().await;
    }
    eprintln!("key forms: {checked} key counts compared, {nonzero} of them non-zero");
    // The pools collide often enough that the property is about rows, not empty answers.
    assert!(nonzero * 10 >= checked, "{nonzero} of {checked}");
}

/// The prepared form (full batches to MariaDB) against the CASE form, on the same colliding
/// pools, tables and collations, in batches large enough for it (no empty value: those go
/// as text). Its derived columns are declared (`CAST(? AS CHAR(n))`) where the text form's
/// take the literals' types, so trailing spaces, case, DATETIME spellings and hostile
/// bytes are each checked through it, and through the product's sink, which sends these
/// batches prepared. Without the declaration MariaDB cuts every value to the first row's
/// length, and this test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prepared_form_counts_every_key_as_the_case_form_does() {
    let db = Db::new();
    let mut rng = Rng::from_env("prepared key forms");
    let full = |pool: &[&'static str]| -> Vec<&'static str> {
        pool.iter().copied().filter(|v| !v.is_empty()).collect()
    };
    let (ips, domains, times) = (full(IPS), full(DOMAINS), full(TIMES));
    let tables = [
        ("utf8mb4_bin", "DATETIME"),
        ("utf8mb4_general_ci", "VARCHAR(40)"),
        ("utf8mb4_nopad_bin", "DATETIME"),
        ("utf8mb4_nopad_bin", "VARCHAR(40)"),
    ];
    let (mut checked, mut nonzero) = (0u64, 0u64);
    for (collation, time_type) in tables {
        let t = unique("keyforms_prep");
        create(&db, &t, collation, time_type).await;
        let datetime = time_type == "DATETIME";
        let mut rows: Vec<[Option<&str>; 3]> = Vec::new();
        for _ in 0..120 {
            let null = |rng: &mut Rng, v: &'static str| (rng.range(0, 8) != 0).then_some(v);
            let time = if datetime {
                pick(&mut rng, &TIMES[..5])
            } else {
                pick(&mut rng, TIMES)
            };
            let (ip, domain) = (pick(&mut rng, IPS), pick(&mut rng, DOMAINS));
            let row = [
                null(&mut rng, ip),
                null(&mut rng, domain),
                null(&mut rng, time),
            ];
            for _ in 0..rng.range(1, 4) {
                rows.push(row);
            }
        }
        insert(&db, &t, &rows).await;
        let string = sql::key_compare_for(Some(collation), Some("utf8mb4"));
        let compare = [
            string,
            string,
            if datetime { KeyCompare::Plain } else { string },
        ];
        let product = sink(&t, "mysql");
        for case in 0..12 {
            let want_keys = rng.range(sql::PREPARED_MIN_KEYS as u64, 150) as usize;
            let mut keys: Vec<Key> = Vec::new();
            while keys.len() < want_keys {
                let k = Key::new([
                    pick(&mut rng, &ips),
                    pick(&mut rng, &domains),
                    pick(&mut rng, &times),
                ]);
                if !keys.contains(&k) {
                    keys.push(k);
                }
            }
            let refs: Vec<&Key> = keys.iter().collect();
            let what = format!("{collation}/{time_type}, case {case}, keys {keys:?}");
            let want = case_counts(&db, &t, &compare, &keys).await;
            assert_eq!(
                prepared_counts(&db, &t, &compare, &keys).await,
                want,
                "prepared: {what}"
            );
            assert_eq!(
                product.count_keys(&refs).await.expect("count"),
                want,
                "sink mysql: {what}"
            );
            let plain = case_counts(&db, &t, &[], &keys).await;
            assert_eq!(
                prepared_counts(&db, &t, &[], &keys).await,
                plain,
                "plain prepared: {what}"
            );
            checked += keys.len() as u64;
            nonzero += want.iter().filter(|&&n| n > 0).count() as u64;
        }
        product.close().await;
    }
    eprintln!("prepared key forms: {checked} key counts compared, {nonzero} of them non-zero");
    assert!(nonzero * 10 >= checked, "{nonzero} of {checked}");
}

/// Values of every length the prepared form declares, and past it: a batch whose values
/// differ in length (the first key the shortest) is counted in full, whether it goes
/// prepared (up to `PREPARED_MAX_CHARS` characters, multi-byte ones too) or as text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prepared_form_finds_values_longer_than_the_first() {
    let db = Db::new();
    let t = unique("keyforms_len");
    let mut c = db.pool.get_conn().await.expect("mysql conn");
    c.query_drop(format!(
        "CREATE TABLE `{t}` (client_ip VARCHAR(80) COLLATE utf8mb4_nopad_bin, \
         domain VARCHAR(1000) COLLATE utf8mb4_nopad_bin, time DATETIME, \
         KEY k (client_ip, domain(200), time)) DEFAULT CHARSET = utf8mb4"
    ))
    .await
    .expect("create");
    drop(c);
    let long = |i: usize, n: usize| {
        let base = if i.is_multiple_of(2) { "ä" } else { "x" };
        format!("{i}.{}", base.repeat(n))
    };
    let lens = [
        1usize,
        15,
        16,
        17,
        100,
        300,
        sql::PREPARED_MAX_CHARS - 8,
        700,
    ];
    let mut keys: Vec<Key> = Vec::new();
    for i in 0..100 {
        let n = lens[i % lens.len()];
        keys.push(Key::new([
            format!("10.0.{}.{}", i / 10, i * 7 % 250).as_str(),
            long(i, n).as_str(),
            "2024-05-01 12:00:00",
        ]));
    }
    let rows: Vec<[String; 3]> = keys
        .iter()
        .map(|k| {
            let v: Vec<&str> = k.values().collect();
            [v[0].to_string(), v[1].to_string(), v[2].to_string()]
        })
        .collect();
    let refs: Vec<[Option<&str>; 3]> = rows
        .iter()
        .map(|r| {
            [
                Some(r[0].as_str()),
                Some(r[1].as_str()),
                Some(r[2].as_str()),
            ]
        })
        .collect();
    insert(&db, &t, &refs).await;
    let product = sink(&t, "mysql");
    // Values up to the longest declared length: prepared.
    let short: Vec<Key> = keys
        .iter()
        .filter(|k| {
            k.values()
                .nth(1)
                .is_some_and(|d| d.chars().count() <= sql::PREPARED_MAX_CHARS)
        })
        .cloned()
        .collect();
    assert!(short.len() >= sql::PREPARED_MIN_KEYS, "{}", short.len());
    assert_eq!(
        prepared_counts(&db, &t, &[], &short).await,
        vec![1; short.len()]
    );
    for batch in [&short, &keys] {
        let refs: Vec<&Key> = batch.iter().collect();
        assert_eq!(
            product.count_keys(&refs).await.expect("count"),
            vec![1; batch.len()]
        );
    }
    product.close().await;
}

/// Key columns in a NO PAD binary collation of another character set than the connection's
/// (`utf8mb3_nopad_bin`, `latin1_nopad_bin`): the prepared form's parameter is IMPLICIT
/// utf8mb4, so MariaDB compared such a column in `utf8mb4_general_ci` — a present
/// `a.example` counted 0 (a false loss) and an absent `A.EXAMPLE` counted 2. The product's
/// sink must answer a full batch exactly there (it sends such tables the text form), keys
/// the column cannot hold included: a `latin1_nopad_bin` column compared plainly refused
/// every batch holding a non-ASCII key ("Illegal mix of collations").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_batch_on_columns_of_another_charset_counts_exactly() {
    let db = Db::new();
    for charset in ["utf8mb3", "latin1"] {
        let t = unique(&format!("keyforms_{charset}"));
        let mut c = db.pool.get_conn().await.expect("mysql conn");
        c.query_drop(format!(
            "CREATE TABLE `{t}` (\
             client_ip VARCHAR(45) CHARACTER SET {charset} COLLATE {charset}_nopad_bin NOT NULL, \
             domain VARCHAR(255) CHARACTER SET {charset} COLLATE {charset}_nopad_bin NOT NULL, \
             time DATETIME NOT NULL, KEY k (client_ip, domain, time))"
        ))
        .await
        .expect("create");
        drop(c);
        let time = "2024-05-01 12:00:00";
        let present = ["a.example", "A.example", "b.example ", "é.example"];
        let rows: Vec<[Option<&str>; 3]> = present
            .iter()
            .map(|d| [Some("10.0.0.1"), Some(*d), Some(time)])
            .collect();
        insert(&db, &t, &rows).await;
        // (domain, rows): each present domain beside ones equal to it but for case,
        // trailing spaces or accents, first in the batch where the miscount gave them the
        // rows.
        let mut asked: Vec<(String, u64)> = vec![
            ("A.EXAMPLE".into(), 0),
            ("a.example".into(), 1),
            ("A.example".into(), 1),
            ("b.example".into(), 0),
            ("b.example ".into(), 1),
        ];
        asked.push(("E.example".into(), 0));
        asked.push(("é.example".into(), 1));
        // Keys the column cannot hold (latin1: CJK; utf8mb3: 4-byte UTF-8).
        asked.push(("日本.example".into(), 0));
        asked.push(("😀.example".into(), 0));
        let mut i = 0;
        while asked.len() < sql::PREPARED_MIN_KEYS {
            asked.push((format!("absent{i}.example"), 0));
            i += 1;
        }
        let keys: Vec<Key> = asked
            .iter()
            .map(|(d, _)| Key::new(["10.0.0.1", d.as_str(), time]))
            .collect();
        let want: Vec<u64> = asked.iter().map(|(_, n)| *n).collect();
        let product = sink(&t, "mysql");
        let refs: Vec<&Key> = keys.iter().collect();
        assert_eq!(
            product.count_keys(&refs).await.expect("count"),
            want,
            "{charset}_nopad_bin"
        );
        product.close().await;
    }
}

/// The JOIN form is one index lookup per key: EXPLAIN shows the sink table read by `ref`
/// on the key index, driven by the derived key table, for exact (CAST) and plain columns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_join_form_looks_each_key_up_in_the_key_index() {
    let db = Db::new();
    let t = unique("keyforms_explain");
    create(&db, &t, "utf8mb4_bin", "DATETIME").await;
    let mut c = db.pool.get_conn().await.expect("mysql conn");
    c.query_drop(format!(
        "INSERT INTO `{t}` (client_ip, domain, time) SELECT CONCAT('10.0.', seq DIV 250, '.', \
         seq MOD 250), CONCAT('d', seq, '.example'), '2024-05-01 12:00:00' FROM seq_1_to_5000"
    ))
    .await
    .expect("rows");
    c.query_drop(format!("ANALYZE TABLE `{t}`"))
        .await
        .expect("analyze");
    c.query_drop("SET NAMES utf8mb4").await.expect("names");
    let keys: Vec<[String; 3]> = (1..200)
        .map(|i| {
            [
                format!("10.0.{}.{}", i / 250, i % 250),
                format!("d{i}.example"),
                "2024-05-01T12:00:00".to_string(),
            ]
        })
        .collect();
    for (compare, form) in [
        (
            [KeyCompare::Binary, KeyCompare::Binary, KeyCompare::Plain],
            KeyRows::UnionSelect,
        ),
        ([KeyCompare::Plain; 3], KeyRows::UnionSelect),
        (
            [KeyCompare::Binary, KeyCompare::Binary, KeyCompare::Plain],
            KeyRows::Values,
        ),
        ([KeyCompare::Plain; 3], KeyRows::Values),
    ] {
        let q = sql::count_keys_joined(&t, &columns(), &compare, form, &keys, false);
        let plan: Vec<mysql_async::Row> = c.query(format!("EXPLAIN {q}")).await.expect("explain");
        let lines: Vec<(Option<String>, Option<String>, Option<String>)> = plan
            .iter()
            .map(|r| {
                let f = |name: &str| {
                    r.get_opt::<Option<String>, &str>(name)
                        .and_then(Result::ok)
                        .flatten()
                };
                (f("table"), f("type"), f("key"))
            })
            .collect();
        eprintln!(
            "EXPLAIN {compare:?} {form:?}: {:?}",
            &lines[..lines.len().min(2)]
        );
        let table = lines
            .iter()
            .find(|l| l.0.as_deref() == Some("t"))
            .expect("the sink table in the plan");
        assert_eq!(
            (table.1.as_deref(), table.2.as_deref()),
            (Some("ref"), Some("k")),
            "{lines:?}"
        );
        let rows: Vec<(i64, i64, i64)> = c.query(q).await.expect("count");
        assert_eq!(rows.len(), keys.len(), "every key found once");
    }
}

/// A key column in a character set that cannot hold every key (`latin1`): the CASE form's
/// `domain = '日本.example'` is refused by the server ("Illegal mix of collations"), which
/// made every key count of a batch holding such a key fail. The JOIN form compares the
/// column's UTF-8 conversion with the key, so it answers: no row for the key latin1 cannot
/// hold, and the same counts as the CASE form for the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latin1_key_column_answers_for_keys_it_cannot_hold() {
    let db = Db::new();
    let t = unique("keyforms_latin1");
    let mut c = db.pool.get_conn().await.expect("mysql conn");
    c.query_drop(format!(
        "CREATE TABLE `{t}` (client_ip VARCHAR(80) COLLATE utf8mb4_nopad_bin, \
         domain VARCHAR(200) CHARACTER SET latin1 COLLATE latin1_swedish_ci, \
         time VARCHAR(40) COLLATE utf8mb4_nopad_bin, KEY k (client_ip, domain, time))"
    ))
    .await
    .expect("create");
    drop(c);
    let rows = [
        [Some("10.0.0.1"), Some("é.example"), Some("t")],
        [Some("10.0.0.1"), Some("a.example"), Some("t")],
        [Some("10.0.0.1"), Some("a.example "), Some("t")],
    ];
    insert(&db, &t, &rows).await;
    let k = |d: &str| Key::new(["10.0.0.1", d, "t"]);
    let tame = [
        k("A.example"),
        k("a.example"),
        k("é.example"),
        k("a.example "),
    ];
    let compare = [
        KeyCompare::Plain,
        sql::key_compare_for(Some("latin1_swedish_ci"), Some("latin1")),
        KeyCompare::Plain,
    ];
    assert_eq!(compare[1], KeyCompare::Utf8Binary);
    let want = case_counts(&db, &t, &compare, &tame).await;
    assert_eq!(want, vec![0, 1, 1, 1]);
    for form in [KeyRows::UnionSelect, KeyRows::Values] {
        assert_eq!(join_counts(&db, &t, &compare, form, &tame).await, want);
    }
    let sink = sink(&t, "mysql");
    let refs: Vec<&Key> = tame.iter().collect();
    assert_eq!(sink.count_keys(&refs).await.expect("count"), want);
    // A key latin1 cannot hold, among the others.
    let cjk = k("日本.example");
    let values: Vec<Vec<&str>> = [&cjk, &tame[1]]
        .iter()
        .map(|k| k.values().collect())
        .collect();
    let q = sql::count_keys_compared(&t, &columns(), &compare, &values, false);
    let mut c = db.pool.get_conn().await.expect("mysql conn");
    c.query_drop("SET NAMES utf8mb4").await.expect("names");
    let refused = c.query::<(Option<i64>, i64), _>(q).await;
    assert!(
        refused
            .as_ref()
            .is_err_and(|e| e.to_string().contains("Illegal mix")),
        "{refused:?}"
    );
    assert_eq!(
        sink.count_keys(&[&cjk, &tame[1]]).await.expect("count"),
        vec![0, 1]
    );
    sink.close().await;
}
