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
use std::borrow::Cow;

/// The parts of a date-time text: the whole seconds, and the fraction's digits as written.
struct Parsed<'a> {
    at: NaiveDateTime,
    /// Fractional digits, `""` when none.
    fraction: &'a str,
}

/// `v` (trimmed) stored in a `DATETIME(precision)` column. Borrowed when `v` is already
/// written so: the decoder converts every record's key with this, and the sink converts
/// every key again before it asks, so the common case (a pipeline that writes the stored
/// form) must cost no allocation (a `format!` per value was a fifth of the daemon's CPU
/// under key_columns).
pub(super) fn datetime(v: &str, precision: u8, rule: Fraction) -> Option<Cow<'_, str>> {
    if is_stored_form(v.as_bytes(), usize::from(precision.min(6))) {
        return Some(Cow::Borrowed(v));
    }
    convert(v, precision, rule)
}

/// [`datetime`] without the check for a value already in stored form (the tests compare
/// the two).
pub(super) fn convert(v: &str, precision: u8, rule: Fraction) -> Option<Cow<'_, str>> {
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
    if at.year() > 9999 || !in_sink_calendar(at.date()) {
        return None;
    }
    let mut out = Written::default();
    out.date(at.date());
    out.push(b' ');
    out.number(at.hour(), 2);
    out.push(b':');
    out.number(at.minute(), 2);
    out.push(b':');
    out.number(at.second(), 2);
    if precision > 0 {
        out.push(b'.');
        out.number(kept, precision);
    }
    Some(out.into_cow(v))
}

/// Whether `b` is already `YYYY-MM-DD HH:MM:SS` with exactly `precision` fraction digits,
/// a date the calendar has and a time of day: what the general path would write back
/// unchanged. The decoder's keys are written so, and the sink checks every key again
/// before it asks; parsing them in full was a tenth of the daemon's CPU under key_columns.
pub(super) fn is_stored_form(b: &[u8], precision: usize) -> bool {
    let len = if precision == 0 { 19 } else { 20 + precision };
    if b.len() != len || (precision > 0 && b[19] != b'.') {
        return false;
    }
    let digits = |r: std::ops::Range<usize>| -> Option<u32> {
        b[r].iter().try_fold(0u32, |n, &c| {
            c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
        })
    };
    let seps = [(4, b'-'), (7, b'-'), (10, b' '), (13, b':'), (16, b':')];
    if seps.iter().any(|&(at, c)| b[at] != c) || (precision > 0 && digits(20..len).is_none()) {
        return false;
    }
    let (Some(y), Some(mo), Some(d), Some(h), Some(mi), Some(s)) = (
        digits(0..4),
        digits(5..7),
        digits(8..10),
        digits(11..13),
        digits(14..16),
        digits(17..19),
    ) else {
        return false;
    };
    h < 24
        && mi < 60
        && s < 60
        && i32::try_from(y)
            .ok()
            .and_then(|y| NaiveDate::from_ymd_opt(y, mo, d))
            .is_some_and(in_sink_calendar)
}

/// Whether the sinks' calendar has `date`. chrono's proleptic Gregorian calendar makes the
/// year 0 a leap year; MariaDB, MySQL and Doris count it a common one (their day count
/// tests `year % 400 == 0 && year != 0`): `0000-02-29` is refused there (MariaDB: ERROR
/// 1292), so a key holding it is one the column cannot store, not a lost record.
fn in_sink_calendar(date: NaiveDate) -> bool {
    !(date.year() == 0 && date.month() == 2 && date.day() == 29)
}

/// `v` (trimmed) stored in a `DATE` column: its date. A time part is dropped, as MariaDB,
/// MySQL and Doris do when they store a date-time text in a DATE column. Borrowed when `v`
/// is already written so (see [`datetime`]).
pub(super) fn date(v: &str) -> Option<Cow<'_, str>> {
    let p = parse(v)?;
    let mut out = Written::default();
    out.date(p.at.date());
    Some(out.into_cow(v))
}

/// A stored value written on the stack: `YYYY-MM-DD HH:MM:SS.ffffff` is 26 bytes at most.
#[derive(Default)]
struct Written {
    buf: [u8; 26],
    len: usize,
}

impl Written {
    fn push(&mut self, b: u8) {
        self.buf[self.len] = b;
        self.len += 1;
    }

    /// `n` in exactly `width` digits, zero-padded (callers keep `n < 10^width`).
    fn number(&mut self, mut n: u32, width: usize) {
        for i in (0..width).rev() {
            self.buf[self.len + i] = b'0' + (n % 10) as u8;
            n /= 10;
        }
        self.len += width;
    }

    /// `YYYY-MM-DD` (the year is 0..=9999: four digits are read, and callers refuse more).
    fn date(&mut self, d: NaiveDate) {
        self.number(d.year().unsigned_abs(), 4);
        self.push(b'-');
        self.number(d.month(), 2);
        self.push(b'-');
        self.number(d.day(), 2);
    }

    /// `v` itself when it reads the same, else the written text.
    fn into_cow(self, v: &str) -> Cow<'_, str> {
        let out = &self.buf[..self.len];
        if out == v.as_bytes() {
            Cow::Borrowed(v)
        } else {
            // Only ASCII digits and separators were written.
            Cow::Owned(out.iter().map(|&b| char::from(b)).collect())
        }
    }
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
    let date = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)
        .filter(|&d| in_sink_calendar(d))?;
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
