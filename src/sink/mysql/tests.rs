use super::*;

#[test]
fn url_errors_lose_their_credentials() {
    let s = redact_url_error("bad url mysql://root:hunter2@db:9030/x here");
    assert!(!s.contains("hunter2"), "{s}");
    assert!(s.contains("mysql://[redacted]@db:9030/x"));
}

fn info(name: &str, data_type: &str, collation: Option<&str>) -> ColumnInfo {
    ColumnInfo {
        name: name.into(),
        data_type: data_type.into(),
        collation: collation.map(Into::into),
        charset: collation.map(|c| c.split('_').next().unwrap_or_default().to_string()),
        ..ColumnInfo::default()
    }
}

fn columns(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn key_columns_by_collation() {
    let table = [
        info("client_ip", "varchar", Some("utf8mb4_nopad_bin")),
        info("Domain", "longtext", Some("utf8mb4_bin")),
        info("time", "datetime", None),
        info("host", "varchar", Some("utf8mb4_general_ci")),
        info("legacy", "varchar", Some("latin1_swedish_ci")),
        info("raw", "varbinary", None),
    ];
    let got = check_key_columns(
        &columns(&["client_ip", "domain", "time", "host", "legacy", "raw"]),
        &table,
        false,
    );
    assert_eq!(
        got.compare,
        vec![
            KeyCompare::Plain,
            KeyCompare::Binary,
            KeyCompare::Plain,
            KeyCompare::Binary,
            KeyCompare::Utf8Binary,
            KeyCompare::Plain,
        ]
    );
    assert_eq!(
        got.inexact,
        vec![
            "domain (longtext, utf8mb4_bin)",
            "host (varchar, utf8mb4_general_ci)",
            "legacy (varchar, latin1_swedish_ci)",
        ]
    );
    assert!(got.missing.is_empty());
    assert!(got.merged.is_empty());

    // A table that merges rows with equal keys compares its UTF-8 columns as it merges
    // them, never prepared; another character set stays compared as its UTF-8 bytes.
    let got = check_key_columns(
        &columns(&["client_ip", "domain", "time", "host", "legacy", "raw"]),
        &table,
        true,
    );
    assert_eq!(
        got.compare,
        vec![
            KeyCompare::Plain,
            KeyCompare::Collation,
            KeyCompare::Plain,
            KeyCompare::Collation,
            KeyCompare::Utf8Binary,
            KeyCompare::Plain,
        ]
    );
    assert_eq!(got.merged, vec!["domain", "host"]);
    assert_eq!(got.inexact, vec!["legacy (varchar, latin1_swedish_ci)"]);
    assert!(!got.prepared);
}

#[test]
fn only_columns_compared_alike_let_key_counts_go_prepared() {
    let check = |cols: &[ColumnInfo]| {
        let names: Vec<String> = cols.iter().map(|c| c.name.clone()).collect();
        check_key_columns(&names, cols, false).prepared
    };
    // The seed's table: utf8mb4_nopad_bin strings and a DATETIME.
    assert!(check(&[
        info("client_ip", "varchar", Some("utf8mb4_nopad_bin")),
        info("domain", "varchar", Some("utf8mb4_bin")),
        info("host", "varchar", Some("utf8mb4_general_ci")),
        info("time", "datetime", None),
        info("raw", "varbinary", None),
    ]));
    // Another character set (converted and compared in the connection's general_ci), or a
    // utf8mb4 collation the server refuses to mix with the parameter's: text.
    for other in [
        "latin1_nopad_bin",
        "utf8mb3_nopad_bin",
        "ascii_bin",
        "latin1_swedish_ci",
        "utf8mb4_unicode_ci",
        "utf8mb4_unicode_520_nopad_ci",
        "utf16_nopad_bin",
    ] {
        assert!(
            !check(&[
                info("client_ip", "varchar", Some("utf8mb4_nopad_bin")),
                info("domain", "varchar", Some(other)),
            ]),
            "{other}"
        );
    }
    // A column information_schema does not list: unknown, so text.
    let got = check_key_columns(
        &columns(&["client_ip", "domain"]),
        &[info("domain", "varchar", None)],
        false,
    );
    assert!(!got.prepared);
    // The charset decides where the name alone would mislead.
    assert!(!sql::prepared_compares_alike(
        Some("utf8mb4_bin"),
        Some("latin1")
    ));
    assert!(sql::prepared_compares_alike(
        Some("UTF8MB4_NOPAD_BIN"),
        None
    ));
}

#[test]
fn a_key_column_information_schema_does_not_list_stays_plain() {
    let table = [info("domain", "varchar", Some("utf8mb4_bin"))];
    let got = check_key_columns(&columns(&["client_ip", "domain"]), &table, false);
    assert_eq!(got.compare, vec![KeyCompare::Plain, KeyCompare::Binary]);
    assert_eq!(got.missing, vec!["client_ip"]);
    // No table at all: everything plain, everything missing.
    let got = check_key_columns(&columns(&["a"]), &[], false);
    assert_eq!(
        (got.compare, got.missing),
        (vec![KeyCompare::Plain], columns(&["a"]))
    );
}

/// information_schema rows of MariaDB 10.11 (and Doris's type names) to what a key value
/// is converted to.
#[test]
fn key_column_types_from_information_schema() {
    use crate::key_domain::{ColumnType, Fraction};
    let typed =
        |data_type: &str, column_type: &str, dp: Option<u32>, np: Option<u32>, ns: Option<u32>| {
            ColumnInfo {
                name: "c".into(),
                data_type: data_type.into(),
                column_type: column_type.into(),
                datetime_precision: dp,
                numeric_precision: np,
                numeric_scale: ns,
                ..ColumnInfo::default()
            }
            .column_type()
        };
    assert_eq!(
        typed("datetime", "datetime", Some(0), None, None),
        ColumnType::Datetime { precision: 0 }
    );
    assert_eq!(
        typed("timestamp", "timestamp(3)", Some(3), None, None),
        ColumnType::Datetime { precision: 3 }
    );
    // Doris: DATETIMEV2(3) with no DATETIME_PRECISION: read from the declaration.
    assert_eq!(
        typed("datetimev2", "datetimev2(3)", None, None, None),
        ColumnType::Datetime { precision: 3 }
    );
    assert_eq!(typed("date", "date", None, None, None), ColumnType::Date);
    assert_eq!(
        typed("decimal", "decimal(10,2)", None, Some(10), Some(2)),
        ColumnType::Decimal {
            precision: 10,
            scale: 2
        }
    );
    assert_eq!(
        typed("decimalv3", "decimalv3(18, 4)", None, None, None),
        ColumnType::Decimal {
            precision: 18,
            scale: 4
        }
    );
    assert_eq!(
        typed("int", "int(10) unsigned", None, Some(10), Some(0)),
        ColumnType::Integer {
            min: 0,
            max: i128::from(u32::MAX)
        }
    );
    assert_eq!(
        typed("tinyint", "tinyint(4)", None, Some(3), Some(0)),
        ColumnType::Integer {
            min: -128,
            max: 127
        }
    );
    assert_eq!(
        typed("bigint", "bigint(20) unsigned", None, None, None),
        ColumnType::Integer {
            min: 0,
            max: i128::from(u64::MAX)
        }
    );
    assert_eq!(
        typed("varchar", "varchar(64)", None, None, None),
        ColumnType::Text
    );
    assert_eq!(
        typed("double", "double", None, None, None),
        ColumnType::Other
    );
    assert_eq!(
        typed("decimal", "decimal", None, None, None),
        ColumnType::Other
    );

    // The domain keeps key order, declarations and collations; a key column that is not
    // listed gives no domain (nothing converted).
    let mut time = info("time", "datetime", None);
    time.column_type = "datetime".into();
    time.datetime_precision = Some(0);
    let table = [info("client_ip", "varchar", Some("utf8mb4_bin")), time];
    let d = columns::key_domain(&columns(&["TIME", "client_ip"]), &table, Fraction::Truncate)
        .expect("listed");
    assert_eq!(d.columns[0].name, "TIME");
    assert_eq!(d.columns[0].ty, ColumnType::Datetime { precision: 0 });
    assert_eq!(d.columns[1].ty, ColumnType::Text);
    assert_eq!(d.columns[1].collation.as_deref(), Some("utf8mb4_bin"));
    assert_eq!(
        columns::key_domain(&columns(&["time", "nope"]), &table, Fraction::Truncate),
        None
    );
}
