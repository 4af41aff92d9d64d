//! DATETIME(p) / TIMESTAMP(p) and DATE values as the column stores them, written
//! `YYYY-MM-DD HH:MM:SS[.fff]` (`p` digits) and `YYYY-MM-DD`, the way the server prints them.
//!
//! Read: `YYYY-M-D`, then optionally a space or `T` and `H:M[:S[.fraction]]` (one or two
//! digits each, a fraction of any length): the spellings MySQL, MariaDB and Doris all read
//! alike (ISO 8601 with `T`, Flink's `TIMESTAMP(3)`, Avro timestamp-millis rendered as
//! text). A zone (`Z`, `+02:00`) is refused: MySQL 8 converts it, MariaDB and Doris refuse
//! it, so no one stored value can be named. So is a date the calendar does not have: the
//! server stores a zero date or refuses the row, which the record cannot tell.

use super::Fraction;
use chrono::{Datelike, Duration, NaiveDate, NaiveDateTime, NaiveTime, Timelike};

/// The parts of a date-time text: the whole seconds, and the fraction's digits as written.
struct Parsed<'a> {
    at: NaiveDateTime,
    /// Fractional digits, `""` when none.
    fraction: &'a str,
}

/// `v` (trimmed) stored in a `DATETIME(precision)` column.
pub(super) fn datetime(v: &str, precision: u8, rule: Fraction) -> Option<String> {
    let p = parse(v)?;
    let precision = usize::from(precision.min(6));
    // The kept digits, right-padded with zeros.
    let mut kept: u32 = 0;
    let digits = p.fraction.as_bytes();
    for i in 0..precision {
        kept = kept * 10 + digits.get(i).map_or(0, |d| u32::from(d - b'0'));
    }
    let mut at = p.at;
    // MySQL rounds half up at the first dropped digit, carrying into the seconds (and so,
    // at 23:59:59.9999995, into the next day or year).
    if rule == Fraction::Round && digits.get(precision).is_some_and(|&d| d >= b'5') {
        kept += 1;
        if kept == 10u32.pow(precision as u32) {
            kept = 0;
            at = at.checked_add_signed(Duration::seconds(1))?;
        }
    }
    if at.year() > 9999 {
        return None;
    }
    let mut out = format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
        at.year(),
        at.month(),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    );
    if precision > 0 {
        out.push_str(&format!(".{kept:0precision$}"));
    }
    Some(out)
}

/// `v` (trimmed) stored in a `DATE` column: its date. A time part is dropped, as MariaDB,
/// MySQL and Doris do when they store a date-time text in a DATE column.
pub(super) fn date(v: &str) -> Option<String> {
    let p = parse(v)?;
    Some(format!(
        "{:04}-{:02}-{:02}",
        p.at.year(),
        p.at.month(),
        p.at.day()
    ))
}

/// Splits `v` into its date, time and fraction (see the module docs for what is read).
fn parse(v: &str) -> Option<Parsed<'_>> {
    let b = v.as_bytes();
    let mut pos = 0;
    let year = number(b, &mut pos, 4, 4)?;
    expect(b, &mut pos, b'-')?;
    let month = number(b, &mut pos, 1, 2)?;
    expect(b, &mut pos, b'-')?;
    let day = number(b, &mut pos, 1, 2)?;
    let date = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?;
    if pos == b.len() {
        return Some(Parsed {
            at: date.and_time(NaiveTime::MIN),
            fraction: "",
        });
    }
    if !matches!(b[pos], b' ' | b'T') {
        return None;
    }
    pos += 1;
    let hour = number(b, &mut pos, 1, 2)?;
    expect(b, &mut pos, b':')?;
    let minute = number(b, &mut pos, 1, 2)?;
    let mut second = 0;
    let mut fraction = "";
    if pos < b.len() {
        expect(b, &mut pos, b':')?;
        second = number(b, &mut pos, 1, 2)?;
        if pos < b.len() {
            expect(b, &mut pos, b'.')?;
            let start = pos;
            while pos < b.len() && b[pos].is_ascii_digit() {
                pos += 1;
            }
            if pos == start || pos != b.len() {
                return None;
            }
            fraction = &v[start..];
        }
    }
    let time = NaiveTime::from_hms_opt(hour, minute, second)?;
    Some(Parsed {
        at: date.and_time(time),
        fraction,
    })
}

/// `min..=max` ASCII digits at `pos`, as a number.
fn number(b: &[u8], pos: &mut usize, min: usize, max: usize) -> Option<u32> {
    let start = *pos;
    let mut n: u32 = 0;
    while *pos < b.len() && *pos - start < max && b[*pos].is_ascii_digit() {
        n = n * 10 + u32::from(b[*pos] - b'0');
        *pos += 1;
    }
    (*pos - start >= min).then_some(n)
}

fn expect(b: &[u8], pos: &mut usize, c: u8) -> Option<()> {
    (b.get(*pos) == Some(&c)).then(|| *pos += 1)
}
