use super::{Bucket, Density, SCAN_RANGES, SCAN_RATIO, SCAN_ROWS, TimeColumn, TimeRange, TimeUnit};
use super::{bucket_of, bucket_text, plan};
use crate::types::Key;
use proptest::prelude::*;

#[test]
fn a_bucket_is_the_canonical_text_as_digits() {
    let s = TimeUnit::Second;
    assert_eq!(bucket_of("2024-05-01 12:03:04", s), Some(20240501120304));
    assert_eq!(bucket_of("2024-05-01 12:03:04.5", s), Some(20240501120304));
    assert_eq!(
        bucket_of("2024-05-01 12:03:04.999999", s),
        Some(20240501120304)
    );
    assert_eq!(bucket_of("2024-05-01", TimeUnit::Day), Some(20240501));
    // Anything not written canonically has no bucket: it is counted by key.
    for bad in [
        "",
        "2024-05-01",
        "2024-05-01T12:03:04",
        "2024-5-01 12:03:04",
        "2024-05-01 12:03:04.",
        "2024-05-01 12:03:04.5x",
        "2024-05-01 12:03:04 ",
        "２024-05-01 12:03:04",
        "+024-05-01 12:03:04",
    ] {
        assert_eq!(bucket_of(bad, s), None, "{bad:?}");
    }
    assert_eq!(bucket_of("2024-05-01 00:00:00", TimeUnit::Day), None);
}

#[test]
fn a_bucket_gives_its_text_back_and_a_range_covers_every_fraction() {
    let b = bucket_of("0999-12-31 23:59:59", TimeUnit::Second).unwrap();
    assert_eq!(bucket_text(b, TimeUnit::Second), "0999-12-31 23:59:59");
    let r = TimeRange {
        first: 20240501120304,
        last: 20240501120310,
    };
    assert_eq!(
        r.bounds(TimeUnit::Second),
        (
            "2024-05-01 12:03:04".to_string(),
            "2024-05-01 12:03:10.999999".to_string()
        )
    );
    let d = TimeRange {
        first: 20240501,
        last: 20240502,
    };
    assert_eq!(
        d.bounds(TimeUnit::Day),
        ("2024-05-01".to_string(), "2024-05-02".to_string())
    );
}

#[test]
fn the_time_column_is_found_by_position() {
    let col = TimeColumn {
        index: 2,
        name: "time".into(),
        unit: TimeUnit::Second,
        typed: vec![2],
    };
    let k = Key::new(["10.0.0.1", "a.example", "2024-05-01 12:03:04"]);
    assert_eq!(col.bucket(&k), Some(20240501120304));
    assert_eq!(col.bucket(&Key::new(["10.0.0.1", "a.example"])), None);
    assert_eq!(col.bucket(&Key::new(["10.0.0.1", "a.example", ""])), None);
}

#[test]
fn density_forgets_the_oldest_buckets_beyond_its_cap() {
    let mut d = Density::new(2);
    for b in [5, 5, 1, 9, 9, 9] {
        d.add(b);
    }
    assert_eq!(d.rows(9), Some(3));
    assert_eq!(d.rows(5), Some(2));
    assert_eq!(d.rows(1), None, "the oldest bucket is forgotten");
    assert_eq!(d.len(), 2);
}

#[test]
fn seconds_in_time_order_are_read_in_one_range() {
    let mut d = Density::new(100);
    for b in 10..20 {
        for _ in 0..3 {
            d.add(b);
        }
    }
    // Due: every key of 10..=18, one key of 19 (whose other two rows are not due).
    let buckets: Vec<Option<Bucket>> = (10..19)
        .flat_map(|b| [Some(b); 3])
        .chain([Some(19), None])
        .collect();
    let p = plan(&buckets, &mut d);
    assert_eq!(p.scans.len(), 1);
    assert_eq!(
        p.scans[0].ranges,
        vec![TimeRange {
            first: 10,
            last: 19
        }]
    );
    assert_eq!(p.scans[0].expected, 30);
    assert_eq!(p.by_key, vec![28], "the key without a bucket");
}

#[test]
fn a_crowded_or_unknown_second_is_counted_by_key() {
    let mut d = Density::new(100);
    for _ in 0..(SCAN_RATIO + 1) {
        d.add(7);
    }
    d.add(8);
    // One key in 7 (5 rows there), one in 8, one in 9 (never read: forgotten or restored).
    let p = plan(&[Some(7), Some(8), Some(9)], &mut d);
    assert_eq!(p.by_key, vec![0, 2]);
    assert_eq!(p.scans.len(), 1);
    assert_eq!(p.scans[0].keys, vec![1]);
}

#[test]
fn a_second_the_audit_read_between_two_due_ones_splits_the_range() {
    let mut d = Density::new(100);
    for b in [1, 2, 3] {
        d.add(b);
    }
    let p = plan(&[Some(1), Some(3)], &mut d);
    assert_eq!(p.scans.len(), 1);
    assert_eq!(
        p.scans[0].ranges,
        vec![
            TimeRange { first: 1, last: 1 },
            TimeRange { first: 3, last: 3 }
        ]
    );
}

proptest! {
    /// Every key is planned once; a scanned key's bucket lies in one of its scan's ranges;
    /// no range covers a bucket the audit read but did not plan to read; reads stay within
    /// their bounds; a scanned bucket's rows are within the ratio.
    #[test]
    fn a_plan_reads_each_key_once_and_only_what_it_priced(
        read in proptest::collection::vec(0i64..400, 0..3_000),
        due in proptest::collection::vec(proptest::option::of(0i64..420), 0..2_000),
        cap in 1usize..500,
    ) {
        let mut d = Density::new(cap);
        for b in &read {
            d.add(*b);
        }
        let p = plan(&due, &mut d);
        let mut seen = vec![0u32; due.len()];
        for &i in &p.by_key {
            seen[i] += 1;
        }
        let mut planned_buckets = std::collections::BTreeSet::new();
        for s in &p.scans {
            prop_assert!(!s.ranges.is_empty() && s.ranges.len() <= SCAN_RANGES);
            for &i in &s.keys {
                seen[i] += 1;
                let b = due[i].expect("a scanned key has a bucket");
                prop_assert!(s.ranges.iter().any(|r| r.contains(b)));
                planned_buckets.insert(b);
            }
            let mut expected = 0;
            for b in s.keys.iter().filter_map(|&i| due[i]).collect::<std::collections::BTreeSet<_>>() {
                let rows = d.rows(b).expect("a scanned bucket was read");
                let keys = due.iter().filter(|x| **x == Some(b)).count() as u64;
                prop_assert!(rows <= SCAN_RATIO * keys);
                expected += rows;
            }
            prop_assert_eq!(expected, s.expected);
            // A single bucket may exceed the bound; several never do.
            let buckets_in_scan = s.keys.iter().filter_map(|&i| due[i]).collect::<std::collections::BTreeSet<_>>().len();
            prop_assert!(s.expected <= SCAN_ROWS || buckets_in_scan == 1);
        }
        prop_assert!(seen.iter().all(|&n| n == 1));
        // Every bucket the audit read that a range covers is a planned one: no range reads
        // rows it did not price.
        for s in &p.scans {
            for r in &s.ranges {
                for b in r.first..=r.last {
                    if d.rows(b).is_some() {
                        prop_assert!(planned_buckets.contains(&b), "bucket {} read unpriced", b);
                    }
                }
            }
        }
    }
}

#[test]
fn a_crowded_range_is_counted_by_key_from_then_on() {
    let mut d = Density::new(100);
    for b in [1, 2, 3] {
        d.add(b);
    }
    d.crowded(TimeRange { first: 1, last: 2 });
    let p = plan(&[Some(1), Some(2), Some(3)], &mut d);
    assert_eq!(p.by_key, vec![0, 1]);
    assert_eq!(p.scans.len(), 1);
    assert_eq!(p.scans[0].keys, vec![2]);
}

#[test]
fn the_time_column_is_the_first_datetime_or_date_of_a_readable_key() {
    use crate::key_domain::{ColumnType, Fraction, KeyColumn, KeyDomain};
    let col = |name: &str, declared: &str, ty: ColumnType| KeyColumn {
        name: name.into(),
        declared: declared.into(),
        ty,
        collation: None,
    };
    let domain = |columns| KeyDomain {
        columns,
        fraction: Fraction::Truncate,
    };
    let dt = ColumnType::Datetime { precision: 0 };
    let c = super::time_column(&domain(vec![
        col("ip", "varchar(64)", ColumnType::Text),
        col("n", "int(11)", ColumnType::Integer { min: -5, max: 5 }),
        col("time", "datetime", dt),
        col("day", "date", ColumnType::Date),
    ]))
    .expect("readable");
    assert_eq!(
        (c.index, c.unit, c.typed.clone()),
        (2, TimeUnit::Second, vec![1, 2, 3])
    );
    let c = super::time_column(&domain(vec![
        col("day", "date", ColumnType::Date),
        col(
            "n",
            "decimal(6,2)",
            ColumnType::Decimal {
                precision: 6,
                scale: 2,
            },
        ),
    ]))
    .expect("readable");
    assert_eq!((c.index, c.unit), (0, TimeUnit::Day));
    let why = super::time_column(&domain(vec![col(
        "ts",
        "timestamp(3)",
        ColumnType::Datetime { precision: 3 },
    )]))
    .expect_err("a TIMESTAMP prints in the session's zone");
    assert!(why.contains("`ts`"), "{why}");
    let why = super::time_column(&domain(vec![
        col("time", "datetime", dt),
        col(
            "rcode",
            "smallint(3) unsigned zerofill",
            ColumnType::Integer { min: 0, max: 65535 },
        ),
    ]))
    .expect_err("a ZEROFILL number prints its zeros");
    assert!(why.contains("`rcode`"), "{why}");
    let why = super::time_column(&domain(vec![
        col("time", "datetime", dt),
        col("f", "float", ColumnType::Other),
    ]))
    .expect_err("a FLOAT compares by conversion");
    assert!(why.contains("`f`"), "{why}");
}

#[test]
fn a_key_with_an_empty_typed_value_has_no_bucket() {
    let col = TimeColumn {
        index: 1,
        name: "time".into(),
        unit: TimeUnit::Second,
        typed: vec![0, 1],
    };
    assert_eq!(col.bucket(&Key::new(["", "2024-05-01 12:00:00"])), None);
    assert_eq!(
        col.bucket(&Key::new(["1.00", "2024-05-01 12:00:00"])),
        Some(20240501120000)
    );
}

#[test]
fn a_bucket_busier_than_one_read_takes_is_counted_by_key() {
    let mut d = Density::new(10);
    for _ in 0..(super::SCAN_BUCKET_ROWS + 1) {
        d.add(4);
    }
    // Even with as many keys due as rows: one read would be too large.
    let due = vec![Some(4); super::SCAN_BUCKET_ROWS as usize + 1];
    let p = plan(&due, &mut d);
    assert!(p.scans.is_empty());
    assert_eq!(p.by_key.len(), due.len());
}
