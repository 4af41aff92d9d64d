//! How logical types (timestamps, dates, times, decimals) are rendered as the text a record
//! field is matched by: the text Flink and Kafka Connect leave in a Doris/MySQL column or
//! an Elasticsearch document for them (docs/OPERATOR.md, "Avro and Protobuf").
//!
//! - timestamps (Avro `timestamp-millis`/`-micros`/`-nanos` and their `local-` forms,
//!   Protobuf `google.protobuf.Timestamp`), in UTC, by `record.timestamp_format`:
//!   - `sql` (default): `2024-05-01 12:00:00.123`, the fraction without trailing zeros and
//!     left out when zero. Flink's SQL timestamp text (its JSON format's default, what its
//!     Elasticsearch sink writes); for a DATETIME/DATETIME(3) column written by Flink's
//!     JDBC or Doris sink or by Kafka Connect's JDBC sink the database compares values,
//!     so this form matches whatever fraction digits the column keeps;
//!   - `iso8601`: `2024-05-01T12:00:00.123` (Flink's `json.timestamp-format.standard =
//!     'ISO-8601'`);
//!   - `epoch_millis`: `1714564800123` (Kafka Connect's JSON converter and its
//!     Elasticsearch sink);
//! - dates (Avro `date`, Protobuf `google.type.Date`): `2024-05-01`; times
//!   (`time-millis`/`-micros`, `google.type.TimeOfDay`): `12:00:00.5`;
//! - decimals: the plain decimal text with the schema's scale, `-12.50` (what a
//!   DECIMAL(p, s) column prints; compared as a value by the database anyway).

use chrono::{DateTime, NaiveDate, NaiveTime, Timelike};
use num_bigint::BigInt;

/// `record.timestamp_format`: how timestamps are rendered (see the module docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TimestampFormat {
    /// `2024-05-01 12:00:00.123`.
    #[default]
    Sql,
    /// `2024-05-01T12:00:00.123`.
    Iso8601,
    /// `1714564800123`.
    EpochMillis,
}

/// The fraction `.123` of `nanos` without trailing zeros; empty for 0.
fn fraction(nanos: u32) -> String {
    if nanos == 0 {
        return String::new();
    }
    let digits = format!("{nanos:09}");
    format!(".{}", digits.trim_end_matches('0'))
}

/// A UTC timestamp of `secs` seconds and `nanos` nanoseconds since the epoch; `None` when
/// out of chrono's range (the caller keeps the raw number).
pub fn timestamp(format: TimestampFormat, secs: i64, nanos: u32) -> Option<String> {
    if format == TimestampFormat::EpochMillis {
        let ms = secs
            .checked_mul(1000)?
            .checked_add(i64::from(nanos / 1_000_000))?;
        return Some(ms.to_string());
    }
    let t = DateTime::from_timestamp(secs, nanos)?.naive_utc();
    let sep = if format == TimestampFormat::Iso8601 {
        'T'
    } else {
        ' '
    };
    Some(format!(
        "{}{sep}{}{}",
        t.format("%Y-%m-%d"),
        t.format("%H:%M:%S"),
        fraction(t.nanosecond() % 1_000_000_000)
    ))
}

/// A timestamp given as a count of `unit_nanos`-long units since the epoch.
pub fn timestamp_units(format: TimestampFormat, value: i64, unit_nanos: i64) -> Option<String> {
    let per_sec = 1_000_000_000 / unit_nanos;
    let secs = value.div_euclid(per_sec);
    let nanos = (value.rem_euclid(per_sec) * unit_nanos) as u32;
    timestamp(format, secs, nanos)
}

/// A date given as days since 1970-01-01.
pub fn date(days: i32) -> Option<String> {
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1)?;
    let d = epoch.checked_add_signed(chrono::Duration::days(i64::from(days)))?;
    Some(d.format("%Y-%m-%d").to_string())
}

/// A calendar date given as its parts (Protobuf `google.type.Date`); `None` for a partial
/// date (a zero year, month or day) or an impossible one.
pub fn ymd(year: i32, month: i32, day: i32) -> Option<String> {
    let d = NaiveDate::from_ymd_opt(year, u32::try_from(month).ok()?, u32::try_from(day).ok()?)?;
    (year > 0).then(|| d.format("%Y-%m-%d").to_string())
}

/// A time of day given as a count of `unit_nanos`-long units since midnight.
pub fn time_of_day(value: i64, unit_nanos: i64) -> Option<String> {
    let nanos_total = value.checked_mul(unit_nanos)?;
    let secs = u32::try_from(nanos_total.div_euclid(1_000_000_000)).ok()?;
    let nanos = nanos_total.rem_euclid(1_000_000_000) as u32;
    let t = NaiveTime::from_num_seconds_from_midnight_opt(secs, nanos)?;
    Some(format!("{}{}", t.format("%H:%M:%S"), fraction(nanos)))
}

/// The plain decimal text of `unscaled × 10^-scale`, keeping `scale` fraction digits.
pub fn decimal(unscaled: &BigInt, scale: usize) -> String {
    let negative = unscaled.sign() == num_bigint::Sign::Minus;
    let digits = unscaled.magnitude().to_string();
    let body = if scale == 0 {
        digits
    } else if digits.len() > scale {
        let (int, frac) = digits.split_at(digits.len() - scale);
        format!("{int}.{frac}")
    } else {
        format!("0.{}{digits}", "0".repeat(scale - digits.len()))
    };
    if negative { format!("-{body}") } else { body }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_in_each_format() {
        // 2024-05-01 12:00:00.123 UTC
        let ms = 1_714_564_800_123;
        let sql = |v, unit| timestamp_units(TimestampFormat::Sql, v, unit);
        assert_eq!(
            sql(ms, 1_000_000).as_deref(),
            Some("2024-05-01 12:00:00.123")
        );
        assert_eq!(
            sql(ms - 123, 1_000_000).as_deref(),
            Some("2024-05-01 12:00:00")
        );
        assert_eq!(
            sql(ms - 3, 1_000_000).as_deref(),
            Some("2024-05-01 12:00:00.12")
        );
        assert_eq!(
            sql(ms * 1000 + 4, 1000).as_deref(),
            Some("2024-05-01 12:00:00.123004")
        );
        assert_eq!(
            timestamp_units(TimestampFormat::Iso8601, ms, 1_000_000).as_deref(),
            Some("2024-05-01T12:00:00.123")
        );
        assert_eq!(
            timestamp_units(TimestampFormat::EpochMillis, ms * 1000 + 999, 1000).as_deref(),
            Some("1714564800123")
        );
        // Before the epoch: floor, not truncation towards zero.
        assert_eq!(
            sql(-1, 1_000_000).as_deref(),
            Some("1969-12-31 23:59:59.999")
        );
        assert_eq!(sql(i64::MAX, 1_000_000), None);
    }

    #[test]
    fn dates_times_and_decimals() {
        assert_eq!(date(19844).as_deref(), Some("2024-05-01"));
        assert_eq!(date(-1).as_deref(), Some("1969-12-31"));
        assert_eq!(
            time_of_day(43_200_500, 1_000_000).as_deref(),
            Some("12:00:00.5")
        );
        assert_eq!(time_of_day(86_400_000, 1_000_000), None);
        assert_eq!(decimal(&BigInt::from(-1250), 2), "-12.50");
        assert_eq!(decimal(&BigInt::from(5), 3), "0.005");
        assert_eq!(decimal(&BigInt::from(-5), 1), "-0.5");
        assert_eq!(decimal(&BigInt::from(42), 0), "42");
        assert_eq!(decimal(&BigInt::from(0), 2), "0.00");
    }
}
