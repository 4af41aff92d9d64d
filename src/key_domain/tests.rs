use super::*;
use proptest::prelude::*;

fn column(name: &str, declared: &str, ty: ColumnType) -> KeyColumn {
    KeyColumn {
        name: name.into(),
        declared: declared.into(),
        ty,
        collation: None,
    }
}

fn domain(ty: ColumnType, fraction: Fraction) -> KeyDomain {
    KeyDomain {
        columns: vec![column("c", "t", ty)],
        fraction,
    }
}

fn one(ty: ColumnType, fraction: Fraction, v: &str) -> Option<String> {
    domain(ty, fraction)
        .value(0, v)
        .ok()
        .map(|c| c.into_owned())
}

const DT0: ColumnType = ColumnType::Datetime { precision: 0 };
const DT3: ColumnType = ColumnType::Datetime { precision: 3 };

#[test]
fn datetime_truncates_on_mariadb_and_rounds_on_mysql_and_doris() {
    let v = "2024-01-01 10:00:05.985";
    assert_eq!(
        one(DT0, Fraction::Truncate, v).as_deref(),
        Some("2024-01-01 10:00:05")
    );
    assert_eq!(
        one(DT0, Fraction::Round, v).as_deref(),
        Some("2024-01-01 10:00:06")
    );
    assert_eq!(
        one(DT0, Fraction::Round, "2024-01-01 10:00:05.499").as_deref(),
        Some("2024-01-01 10:00:05")
    );
    // Rounding carries through the day and the year.
    assert_eq!(
        one(DT0, Fraction::Round, "2023-12-31T23:59:59.5").as_deref(),
        Some("2024-01-01 00:00:00")
    );
    // ... but not past year 9999 (the column cannot hold it).
    assert_eq!(one(DT0, Fraction::Round, "9999-12-31 23:59:59.5"), None);
    assert_eq!(
        one(DT0, Fraction::Truncate, "9999-12-31 23:59:59.5").as_deref(),
        Some("9999-12-31 23:59:59")
    );
    // DATETIME(3): padded and cut to three digits (MariaDB prints `.100`).
    assert_eq!(
        one(DT3, Fraction::Truncate, "2024-1-1 1:2:3.1").as_deref(),
        Some("2024-01-01 01:02:03.100")
    );
    assert_eq!(
        one(DT3, Fraction::Truncate, "2024-01-01 10:00:05.98549").as_deref(),
        Some("2024-01-01 10:00:05.985")
    );
    assert_eq!(
        one(DT3, Fraction::Round, "2024-01-01 10:00:05.9995").as_deref(),
        Some("2024-01-01 10:00:06.000")
    );
}

#[test]
fn datetime_spellings_are_one_value() {
    for v in [
        "2024-01-01 12:00:00",
        "2024-01-01T12:00:00",
        "2024-01-01 12:00:00.000",
        "2024-1-1 12:0:0",
        "2024-01-01 12:00",
        " 2024-01-01T12:00:00.4 ",
    ] {
        assert_eq!(
            one(DT0, Fraction::Truncate, v).as_deref(),
            Some("2024-01-01 12:00:00"),
            "{v:?}"
        );
    }
    assert_eq!(
        one(DT0, Fraction::Truncate, "2024-01-01").as_deref(),
        Some("2024-01-01 00:00:00")
    );
}

#[test]
fn what_no_datetime_column_stores_alike_is_unconvertible() {
    for v in [
        "not a time",
        "2024-02-30 00:00:00",
        "2024-01-01 24:00:00",
        "2024-01-01 10:00:00Z",
        "2024-01-01T10:00:00+02:00",
        "2024-01-01 10:00:00.",
        "24-01-01 10:00:00",
        "2024/01/01 10:00:00",
        "1704103205185",
        // The sinks count the year 0 a common year (chrono a leap one): MariaDB refuses it.
        "0000-02-29 00:00:00",
        "0000-02-29",
    ] {
        let err = domain(DT0, Fraction::Truncate).value(0, v);
        assert!(
            matches!(err, Err(Unconvertible::Datetime { .. })),
            "{v:?}: {err:?}"
        );
    }
    // An empty value is empty (it matches '' or NULL), never unconvertible.
    assert_eq!(one(DT0, Fraction::Truncate, "").as_deref(), Some(""));
    // Rounding into the year 0's 29 February is a day the sinks do not have either (they
    // would carry into 1 March): unconvertible, not a key of chrono's calendar.
    let err = domain(DT0, Fraction::Round).value(0, "0000-02-28 23:59:59.9");
    assert!(
        matches!(err, Err(Unconvertible::Datetime { .. })),
        "{err:?}"
    );
    // Every other day of the year 0 is one they store.
    assert_eq!(
        one(DT0, Fraction::Truncate, "0000-03-01 00:00:00").as_deref(),
        Some("0000-03-01 00:00:00")
    );
}

#[test]
fn date_drops_the_time() {
    for v in [
        "2024-03-07",
        "2024-3-7",
        "2024-03-07 23:59:59.9",
        "2024-03-07T01:00",
    ] {
        assert_eq!(
            one(ColumnType::Date, Fraction::Round, v).as_deref(),
            Some("2024-03-07"),
            "{v:?}"
        );
    }
    assert_eq!(one(ColumnType::Date, Fraction::Round, "2024-13-01"), None);
}

#[test]
fn decimal_rounds_half_away_from_zero_as_mariadb_stores_it() {
    let d = ColumnType::Decimal {
        precision: 6,
        scale: 2,
    };
    // Each pair as MariaDB 10.11 stored it (INSERT then SELECT, see the module docs).
    for (v, stored) in [
        ("1.005", "1.01"),
        ("12.345", "12.35"),
        ("-0.004", "0.00"),
        ("-1.005", "-1.01"),
        ("+5", "5.00"),
        ("007.1", "7.10"),
        (".5", "0.50"),
        ("5.", "5.00"),
        ("1e2", "100.00"),
        ("1.5E-1", "0.15"),
        ("9999.994", "9999.99"),
        ("0", "0.00"),
        ("-0", "0.00"),
    ] {
        assert_eq!(
            one(d, Fraction::Truncate, v).as_deref(),
            Some(stored),
            "{v:?}"
        );
    }
    for v in [
        "9999.995", "10000", "abc", "1.2.3", "--1", "1e", "", "1e999",
    ] {
        if v.is_empty() {
            continue;
        }
        assert_eq!(one(d, Fraction::Truncate, v), None, "{v:?}");
    }
    let d0 = ColumnType::Decimal {
        precision: 3,
        scale: 0,
    };
    assert_eq!(one(d0, Fraction::Round, "2.5").as_deref(), Some("3"));
}

#[test]
fn integers_from_numeric_text() {
    let int = ColumnType::Integer {
        min: i128::from(i32::MIN),
        max: i128::from(i32::MAX),
    };
    let tiny = ColumnType::Integer {
        min: -128,
        max: 127,
    };
    for (v, stored) in [
        ("1.0", "1"),
        ("+5", "5"),
        ("007", "7"),
        ("1.5", "2"),
        ("2.5", "3"),
        ("-1.5", "-2"),
        ("-0.4", "0"),
        ("1e2", "100"),
        ("2147483647", "2147483647"),
    ] {
        assert_eq!(
            one(int, Fraction::Truncate, v).as_deref(),
            Some(stored),
            "{v:?}"
        );
    }
    assert_eq!(one(int, Fraction::Truncate, "2147483648"), None);
    assert_eq!(
        one(tiny, Fraction::Truncate, "127.4").as_deref(),
        Some("127")
    );
    assert_eq!(one(tiny, Fraction::Truncate, "127.5"), None);
    assert_eq!(one(tiny, Fraction::Truncate, "x1"), None);
    assert_eq!(
        one(
            int,
            Fraction::Truncate,
            "123456789012345678901234567890123456789012"
        ),
        None
    );
}

#[test]
fn text_and_other_columns_are_left_alone() {
    let d = KeyDomain {
        columns: vec![
            column("a", "varchar(64)", ColumnType::Text),
            column("b", "double", ColumnType::Other),
        ],
        fraction: Fraction::Truncate,
    };
    assert!(d.is_identity());
    let key = Key::new(["2024-01-01T10:00:00.5 ", " 1.0"]);
    assert_eq!(d.key(&key), Ok(None));
}

#[test]
fn keys_are_rewritten_only_when_a_value_changes() {
    let d = KeyDomain {
        columns: vec![
            column("client_ip", "varchar(64)", ColumnType::Text),
            column("time", "datetime", DT0),
        ],
        fraction: Fraction::Truncate,
    };
    let stored = Key::new(["10.0.0.1", "2024-01-01 10:00:05"]);
    assert_eq!(d.key(&stored), Ok(None));
    assert_eq!(
        d.key(&Key::new(["10.0.0.1", "2024-01-01T10:00:05.185"])),
        Ok(Some(stored.clone()))
    );
    // A text value is never trimmed, even where the typed one is.
    assert_eq!(
        d.key(&Key::new([" 10.0.0.1", "2024-01-01 10:00:05 "])),
        Ok(Some(Key::new([" 10.0.0.1", "2024-01-01 10:00:05"])))
    );
    assert!(matches!(
        d.key(&Key::new(["10.0.0.1", "yesterday"])),
        Err(Unconvertible::Datetime { .. })
    ));
    assert!(d.describe().contains("time datetime"));
}

#[test]
fn fraction_rule_by_server() {
    let mariadb = "10.11.19-MariaDB-0+deb12u1";
    let default_mode = "STRICT_TRANS_TABLES,ERROR_FOR_DIVISION_BY_ZERO,NO_AUTO_CREATE_USER";
    assert_eq!(
        Fraction::for_server("mysql", mariadb, default_mode),
        Fraction::Truncate
    );
    assert_eq!(
        Fraction::for_server("mysql", mariadb, "STRICT_ALL_TABLES,time_round_fractional"),
        Fraction::Round
    );
    assert_eq!(
        Fraction::for_server("mysql", "8.0.36", default_mode),
        Fraction::Round
    );
    assert_eq!(
        Fraction::for_server(
            "mysql",
            "8.0.36",
            "TIME_TRUNCATE_FRACTIONAL,STRICT_TRANS_TABLES"
        ),
        Fraction::Truncate
    );
    // Doris 2.x rounds on Stream Load and on INSERT (its DATETIME documentation), whatever
    // its version string claims to be.
    assert_eq!(Fraction::for_server("doris", "5.7.99", ""), Fraction::Round);
}

/// A date-time written in one of the spellings the module reads.
fn spelling() -> impl Strategy<Value = (String, chrono::NaiveDateTime, String)> {
    (
        1000i32..=9999,
        1u32..=12,
        1u32..=28,
        0u32..24,
        0u32..60,
        0u32..60,
        "[0-9]{0,9}",
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(y, mo, d, h, mi, s, frac, t, pad)| {
            let at = chrono::NaiveDate::from_ymd_opt(y, mo, d)
                .and_then(|d| d.and_hms_opt(h, mi, s))
                .expect("valid");
            let sep = if t { 'T' } else { ' ' };
            let text = if pad {
                format!("{y:04}-{mo:02}-{d:02}{sep}{h:02}:{mi:02}:{s:02}")
            } else {
                format!("{y}-{mo}-{d}{sep}{h}:{mi}:{s}")
            };
            let text = if frac.is_empty() {
                text
            } else {
                format!("{text}.{frac}")
            };
            (text, at, frac)
        })
}

proptest! {
    /// Truncation keeps the written digits; rounding differs from it by at most one unit
    /// of the last kept digit, up; both are canonical and idempotent.
    #[test]
    fn datetime_normalisation((text, at, frac) in spelling(), p in 0u8..=6) {
        let ty = ColumnType::Datetime { precision: p };
        let t = one(ty, Fraction::Truncate, &text).expect("truncates");
        let mut want = at.format("%Y-%m-%d %H:%M:%S").to_string();
        if p > 0 {
            let mut kept: String = frac.chars().take(usize::from(p)).collect();
            while kept.len() < usize::from(p) {
                kept.push('0');
            }
            want.push('.');
            want.push_str(&kept);
        }
        prop_assert_eq!(&t, &want);
        prop_assert_eq!(one(ty, Fraction::Truncate, &t), Some(t.clone()));
        if let Some(r) = one(ty, Fraction::Round, &text) {
            prop_assert_eq!(one(ty, Fraction::Round, &r), Some(r.clone()));
            let parse = |s: &str| chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f");
            let (tv, rv) = (parse(&t).expect("t"), parse(&r).expect("r"));
            let unit = chrono::Duration::nanoseconds(10i64.pow(9 - u32::from(p)));
            prop_assert!(rv == tv || rv == tv + unit, "{} → {} / {}", text, t, r);
            let up = frac.as_bytes().get(usize::from(p)).is_some_and(|&d| d >= b'5');
            prop_assert_eq!(rv != tv, up);
        }
    }

    /// DECIMAL: the stored value is the nearest multiple of 10^-s, ties away from zero,
    /// checked against integer arithmetic on the value scaled by 10^4.
    #[test]
    fn decimal_normalisation(n in -99_999_999i64..=99_999_999, s in 0u8..=4) {
        // n / 10^4, written plainly.
        let sign = if n < 0 { "-" } else { "" };
        let text = format!("{sign}{}.{:04}", n.abs() / 10_000, n.abs() % 10_000);
        let ty = ColumnType::Decimal { precision: 20, scale: s };
        let got = one(ty, Fraction::Truncate, &text).expect("fits");
        let unit = 10i64.pow(4 - u32::from(s));
        let q = (n.abs() + unit / 2) / unit * if n < 0 { -1 } else { 1 };
        let scale = 10i64.pow(u32::from(s));
        let sign = if q < 0 { "-" } else { "" };
        let want = if s == 0 {
            format!("{sign}{}", q.abs())
        } else {
            format!("{sign}{}.{:0w$}", q.abs() / scale, q.abs() % scale, w = usize::from(s))
        };
        prop_assert_eq!(&got, &want, "{}", text);
        prop_assert_eq!(one(ty, Fraction::Truncate, &got), Some(got.clone()));
    }
}

const KW256: ColumnType = ColumnType::Keyword {
    ignore_above: Some(256),
    lowercase: false,
};

/// Elasticsearch indexes a keyword value of at most `ignore_above` UTF-16 code units
/// (Java's `String.length()`): 256 characters are a key, 257 are unverifiable, and a
/// character outside the BMP counts twice, whatever its UTF-8 length.
#[test]
fn keyword_values_over_ignore_above_are_unindexable() {
    let at = "a".repeat(256);
    assert_eq!(one(KW256, Fraction::Truncate, &at), Some(at.clone()));
    let over = "a".repeat(257);
    assert!(matches!(
        domain(KW256, Fraction::Truncate).value(0, &over),
        Err(Unconvertible::Unindexable {
            length: 257,
            limit: 256,
            ..
        })
    ));
    // 128 emoji: 512 UTF-8 bytes, 256 UTF-16 units: indexed. One more: not.
    let emoji = "😀".repeat(128);
    assert_eq!(emoji.len(), 512);
    assert!(one(KW256, Fraction::Truncate, &emoji).is_some());
    assert!(one(KW256, Fraction::Truncate, &format!("{emoji}a")).is_none());
    // 256 two-byte characters (512 bytes): still 256 characters, indexed.
    let accented = "é".repeat(256);
    assert!(one(KW256, Fraction::Truncate, &accented).is_some());
    // No limit: any length; the empty value stays empty.
    let unlimited = ColumnType::Keyword {
        ignore_above: None,
        lowercase: false,
    };
    assert!(!unlimited.converts());
    assert_eq!(one(KW256, Fraction::Truncate, ""), Some(String::new()));
    // The error names the field and the limit, for the operator.
    let e = domain(KW256, Fraction::Truncate)
        .key(&Key::new([over.as_str()]))
        .expect_err("over the limit");
    assert!(e.to_string().contains("ignore_above 256"), "{e}");
}

/// The `lowercase` normalizer: spellings it equates are one key; the limit applies to the
/// value as sent (the server tests the length before normalizing); characters whose
/// lowercase may differ between the server's Java and this process are unverifiable.
#[test]
fn keyword_lowercase_normalizer_is_one_key_per_normalized_value() {
    let lc = ColumnType::Keyword {
        ignore_above: None,
        lowercase: true,
    };
    assert_eq!(
        one(lc, Fraction::Truncate, "WWW.Example.COM").as_deref(),
        Some("www.example.com")
    );
    assert_eq!(
        one(lc, Fraction::Truncate, "ÉCOLE").as_deref(),
        Some("école")
    );
    assert_eq!(one(lc, Fraction::Truncate, "İ").as_deref(), Some("i"));
    assert_eq!(one(lc, Fraction::Truncate, "ΣΑΣ").as_deref(), Some("σασ"));
    // No case: unchanged.
    assert_eq!(one(lc, Fraction::Truncate, "日本").as_deref(), Some("日本"));
    // Fullwidth Latin (outside the stable range): not guessed.
    assert_eq!(one(lc, Fraction::Truncate, "Ａ"), None);
    let both = ColumnType::Keyword {
        ignore_above: Some(3),
        lowercase: true,
    };
    assert_eq!(one(both, Fraction::Truncate, "ABC").as_deref(), Some("abc"));
    assert_eq!(one(both, Fraction::Truncate, "ABCD"), None);
}

/// The former `format!` spelling of a stored DATETIME(p) (before the stack-written one):
/// the oracle of `stored_form_matches_the_formatted_one`.
fn formatted(at: chrono::NaiveDateTime, kept: u32, p: usize) -> String {
    use chrono::{Datelike, Timelike};
    let mut out = format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        at.year(),
        at.month(),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    );
    if p > 0 {
        out.push_str(&format!(".{kept:0p$}"));
    }
    out
}

proptest! {
    /// The stored text written on the stack is the formatted one, digit for digit, for any
    /// date-time (year 0 to 9999, every precision), and it borrows the input exactly when
    /// the input already reads so.
    #[test]
    fn stored_form_matches_the_formatted_one(
        y in 0i32..=9999, mo in 1u32..=12, d in 1u32..=28, h in 0u32..24, mi in 0u32..60,
        s in 0u32..60, kept in 0u32..1_000_000, p in 0usize..=6, pad in any::<bool>(),
    ) {
        let at = chrono::NaiveDate::from_ymd_opt(y, mo, d)
            .and_then(|d| d.and_hms_opt(h, mi, s))
            .expect("valid");
        let kept = kept % 10u32.pow(p as u32);
        let want = formatted(at, kept, p);
        let ty = ColumnType::Datetime { precision: p as u8 };
        // The stored form itself: unchanged, borrowed.
        let got = domain(ty, Fraction::Truncate).value(0, &want).expect("stored form");
        prop_assert!(matches!(got, Cow::Borrowed(_)), "{}", want);
        prop_assert_eq!(got.as_ref(), want.as_str());
        // Another spelling of it (padding around, no leading zeros): the stored form, owned.
        let other = if pad {
            format!(" {want} ")
        } else {
            want.replacen("-0", "-", 2)
        };
        if other != want {
            let got = domain(ty, Fraction::Truncate).value(0, &other).expect("converts");
            prop_assert!(matches!(got, Cow::Owned(_)), "{}", other);
            prop_assert_eq!(got.as_ref(), want.as_str());
        }
        // DATE: the date part, borrowed when written so.
        let date = &want[..10];
        let got = domain(ColumnType::Date, Fraction::Truncate).value(0, date).expect("date");
        prop_assert!(matches!(got, Cow::Borrowed(_)));
        prop_assert_eq!(got.as_ref(), date);
    }
}

/// `KeyDomain::key` builds a new key only when a value changes, and then keeps the values
/// before and after the changed one as they were.
#[test]
fn key_is_rebuilt_only_when_a_value_changes() {
    let d = KeyDomain {
        columns: vec![
            column("a", "varchar", ColumnType::Text),
            column("t", "datetime", DT0),
            column("b", "varchar", ColumnType::Text),
        ],
        fraction: Fraction::Truncate,
    };
    let stored = Key::new(["x", "2024-05-01 12:00:01", "y"]);
    assert_eq!(d.key(&stored).expect("converts"), None);
    let written = Key::new(["x", "2024-5-1T12:00:01.9", "y"]);
    assert_eq!(d.key(&written).expect("converts"), Some(stored));
    let first = KeyDomain {
        columns: vec![
            column("t", "datetime", DT0),
            column("a", "varchar", ColumnType::Text),
        ],
        fraction: Fraction::Round,
    };
    assert_eq!(
        first
            .key(&Key::new(["2024-05-01 12:00:01.5", "x"]))
            .expect("converts"),
        Some(Key::new(["2024-05-01 12:00:02", "x"]))
    );
    assert!(first.key(&Key::new(["2024-13-01", "x"])).is_err());
}

proptest! {
    /// A value the fast check takes as already stored is one the full conversion writes
    /// back unchanged, under either fraction rule; and every value the conversion writes
    /// is taken by the check.
    #[test]
    fn the_stored_form_check_agrees_with_the_conversion(
        (y, mo, d) in (0u32..=9999, 0u32..=13, 0u32..=32),
        (h, mi, s) in (0u32..=25, 0u32..=61, 0u32..=61),
        frac in proptest::collection::vec(0u8..=9, 0..=7),
        p in 0u8..=6,
        round in any::<bool>(),
    ) {
        use super::temporal::{convert, is_stored_form};
        let rule = if round { Fraction::Round } else { Fraction::Truncate };
        let mut v = format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}");
        if !frac.is_empty() {
            v.push('.');
            v.extend(frac.iter().map(|&f| char::from(b'0' + f)));
        }
        let slow = convert(&v, p, rule);
        if is_stored_form(v.as_bytes(), usize::from(p)) {
            prop_assert_eq!(slow.as_deref(), Some(v.as_str()));
        }
        if let Some(out) = slow {
            prop_assert!(is_stored_form(out.as_bytes(), usize::from(p)), "{} from {}", out, v);
        }
    }
}

/// A row printed by a table whose time column was widened since its types were read
/// (`DATETIME` → `DATETIME(3)`) is not what the old types store; rows printed as they
/// store vouch for their columns; an empty (NULL) value, a value the type refuses (a zero
/// date a lenient `sql_mode` keeps), a non-UTF-8 value and a row of another arity say
/// nothing; a column that converts nothing is not looked at.
#[test]
fn a_row_printed_otherwise_than_the_types_store_is_told() {
    let two = KeyDomain {
        columns: vec![
            column("domain", "varchar(64)", ColumnType::Text),
            column("time", "datetime", DT0),
        ],
        fraction: Fraction::Truncate,
    };
    assert_eq!(two.converting(), 0b10);
    let vouched = |v: u64| Printed {
        changed: false,
        vouched: v,
    };
    let changed = Printed {
        changed: true,
        vouched: 0,
    };
    assert_eq!(
        two.printed(b"a.example\xff2024-01-01 10:00:05\xff"),
        vouched(0b10)
    );
    assert_eq!(
        two.printed(b"a.example\xff2024-01-01 10:00:05.000\xff"),
        changed
    );
    assert_eq!(
        two.printed(b"a.example\xff2024-01-01T10:00:05\xff"),
        changed
    );
    // The text column's bytes are not looked at.
    assert_eq!(
        two.printed(b"\xfe\xff2024-01-01 10:00:05\xff"),
        vouched(0b10)
    );
    // Nothing to tell: an empty time, a zero date, a time that is not UTF-8, another arity.
    for row in [
        &b"a\xff\xff"[..],
        b"a\xff0000-00-00 00:00:00\xff",
        b"a\xff\xfe\xff",
        b"a\xffb\xffc\xff",
    ] {
        assert_eq!(two.printed(row), vouched(0), "{row:?}");
    }
    // The widened type stores the printed form.
    let three = domain(DT3, Fraction::Truncate);
    assert_eq!(three.printed(b"2024-01-01 10:00:05.000\xff"), vouched(1));
    assert_eq!(three.printed(b"2024-01-01 10:00:05\xff"), changed);
}
