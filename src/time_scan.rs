//! key_columns by time: counting a round's keys from the rows of the seconds they lie in,
//! read once, instead of probing the sink's key index once per key (pure, no I/O).
//!
//! The seed's table has no Kafka coordinates, so each due record used to cost the sink one
//! index probe (a join per `batch_size` keys): 11 s of sink time per million records on
//! MariaDB. When a key column holds the record's time (a `DATETIME` or `DATE`) and the sink
//! keeps its rows in that column's order (an index starting with it), the rows of a second
//! are one contiguous read. So a round reads the key columns of every row in the seconds
//! its due keys lie in and counts the rows of each key itself, compared byte for byte as
//! the key count compares them: the counts, and so the verdicts, are the key count's
//! (`tests/it/time_scan.rs` checks the two against each other on MariaDB).
//!
//! A read costs the sink every row of its seconds, the rows of records not due yet and of
//! other writers included. So a second is read only when the rows the audit itself read in
//! it ([`Density`]) are at most [`SCAN_RATIO`] times the keys it decides there; the other
//! keys are counted as before. Records in time order make a round's due seconds nearly
//! all due; records far out of order spread each round over many seconds, and those go
//! by key (docs/BENCHMARKS.md measures both). A read that finds many more rows than the
//! audit read (another writer, a partition this instance does not read) stops at its
//! `LIMIT` and its keys are counted by key: the cost of a round stays bounded.

use crate::key_domain::{ColumnType, KeyDomain};
use crate::types::Key;
use std::collections::BTreeMap;

/// A key column holding the record's time, which the sink keeps its rows ordered by.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TimeColumn {
    /// Its position among the key columns.
    pub index: usize,
    /// The sink column's name.
    pub name: String,
    /// What one bucket of it spans.
    pub unit: TimeUnit,
    /// The key columns the sink converts to a type (see [`Self::bucket`]).
    pub typed: Vec<usize>,
}

/// The span of one bucket: a `DATETIME`'s second or a `DATE`'s day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeUnit {
    /// `DATETIME(p)`: every fraction of one second.
    Second,
    /// `DATE`: one day.
    Day,
}

/// A bucket: the digits of its canonical text as one number (`YYYYMMDDhhmmss` for a
/// second, `YYYYMMDD` for a day), so that their order is time order and the text comes
/// back from the number without a calendar.
pub type Bucket = i64;

/// Rows of a due second, per distinct due key, the sink may be read for at most: a second
/// holding more of them is counted key by key. On MariaDB a key counted by key cost the
/// sink about 11 µs, a row read about 0.6 µs (docs/BENCHMARKS.md): reading up to 8 rows
/// per key is still the cheaper question by half.
pub const SCAN_RATIO: u64 = 8;

/// Most rows one read is planned for (the audit's own count): a round's reads are split
/// into queries of about this many rows, so that no answer holds a whole incident.
pub const SCAN_ROWS: u64 = 50_000;

/// Buckets whose records the audit remembers counting ([`Density`]): three days of
/// seconds, about 10 MB; older ones are counted by key.
pub const TIME_BUCKETS: usize = 1 << 18;

/// Most rows of one bucket the audit reads at once: a busier bucket (a `DATE` column's day,
/// a second of a very busy topic) is counted by key, so that no single read outgrows the
/// sink's `query_timeout`.
pub const SCAN_BUCKET_ROWS: u64 = 500_000;

/// Most keys a round reads for all its partitions at once
/// ([`crate::verify::Checker::prefetch_due`]); the partitions past them read for themselves.
/// Four partitions' default round limit (100 k due records each) fit with room. The
/// partition that reaches them is read too, so a round holds at most this plus one
/// partition's round limit of prepared keys, about 100 bytes each (the key's place, its
/// records' slots and offsets, its count): 60 MB at the default `batch_size`.
pub const PREFETCH_KEYS: usize = 500_000;

/// Most time ranges OR-ed in one read.
pub const SCAN_RANGES: usize = 256;

impl TimeColumn {
    /// The bucket of `key`'s time value, `None` when it has none (an empty value, a value
    /// not written in the column's canonical form, a key of another arity) or when the key
    /// is one a read cannot count (an empty value in a column the sink converts: the key
    /// count compares `''` with the column's type, which a read of its text cannot copy).
    pub fn bucket(&self, key: &Key) -> Option<Bucket> {
        // On the packed bytes (each value, then 0xFF): this runs for every record read and
        // every key asked, and walking the values as `str`s was a twelfth of the daemon.
        let bytes = key.as_bytes();
        let mut start = 0;
        let mut time = None;
        for (i, end) in memchr::memchr_iter(0xFF, bytes).enumerate() {
            let v = &bytes[start..end];
            if i == self.index {
                time = Some(v);
            } else if v.is_empty() && self.typed.contains(&i) {
                return None;
            }
            start = end + 1;
        }
        bucket_of_bytes(time?, self.unit)
    }
}

/// The time column of a table with key columns `domain`, if its rows can be counted from a
/// read of their text: the first `DATETIME(p)` or `DATE` key column (a `TIMESTAMP` is
/// printed in the session's time zone, which an hour a year prints twice), and every key
/// column one whose printed value is the key's own (text, date-time, date, decimal,
/// integer). Otherwise why not.
pub fn time_column(domain: &KeyDomain) -> Result<TimeColumn, String> {
    let mut time = None;
    let mut typed = Vec::new();
    for (i, c) in domain.columns.iter().enumerate() {
        let declared = c.declared.trim().to_ascii_lowercase();
        // A ZEROFILL number prints as `003` while the key (and the key count's numeric
        // comparison) has `3`; a TIMESTAMP prints in the session's zone, where an hour
        // that does not exist is stored as the next one: the printed text is not the key.
        if declared.contains("zerofill") || declared.starts_with("timestamp") {
            return Err(format!(
                "key column `{}` ({}) prints otherwise than its key value",
                c.name, c.declared
            ));
        }
        match c.ty {
            ColumnType::Text => {}
            ColumnType::Datetime { .. }
            | ColumnType::Date
            | ColumnType::Decimal { .. }
            | ColumnType::Integer { .. } => typed.push(i),
            ColumnType::Other | ColumnType::Keyword { .. } => {
                return Err(format!(
                    "key column `{}` ({}) is compared by the sink's own conversion, which a \
                     read of its text cannot copy",
                    c.name, c.declared
                ));
            }
        }
        if time.is_some() {
            continue;
        }
        time = match c.ty {
            ColumnType::Datetime { .. } if declared.starts_with("datetime") => {
                Some((i, TimeUnit::Second))
            }
            ColumnType::Date if declared.starts_with("date") => Some((i, TimeUnit::Day)),
            _ => None,
        };
    }
    let Some((index, unit)) = time else {
        return Err("no key column is a DATETIME or a DATE".into());
    };
    Ok(TimeColumn {
        index,
        name: domain.columns[index].name.clone(),
        unit,
        typed,
    })
}

/// The bucket of a canonical `YYYY-MM-DD[ hh:mm:ss[.f…]]` text ([`crate::key_domain`]
/// writes every key value so); `None` for anything else.
pub fn bucket_of(v: &str, unit: TimeUnit) -> Option<Bucket> {
    bucket_of_bytes(v.as_bytes(), unit)
}

/// [`bucket_of`] on bytes.
fn bucket_of_bytes(b: &[u8], unit: TimeUnit) -> Option<Bucket> {
    // Digit positions of `YYYY-MM-DD hh:mm:ss`, and its separators.
    const DIGITS: [usize; 14] = [0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18];
    const SEPS: [(usize, u8); 5] = [(4, b'-'), (7, b'-'), (10, b' '), (13, b':'), (16, b':')];
    let (len, digits, seps) = match unit {
        TimeUnit::Day => (10, &DIGITS[..8], &SEPS[..2]),
        TimeUnit::Second => (19, &DIGITS[..], &SEPS[..]),
    };
    let exact = match unit {
        TimeUnit::Day => b.len() == len,
        // The fraction, if any, is `.` and digits: the bucket is its whole second.
        TimeUnit::Second => {
            b.len() == len
                || (b.len() > len + 1
                    && b[len] == b'.'
                    && b[len + 1..].iter().all(u8::is_ascii_digit))
        }
    };
    if !exact || seps.iter().any(|&(at, sep)| b[at] != sep) {
        return None;
    }
    let mut n: i64 = 0;
    for &at in digits {
        let c = b[at];
        if !c.is_ascii_digit() {
            return None;
        }
        n = n * 10 + i64::from(c - b'0');
    }
    Some(n)
}

/// The canonical text of bucket `b`'s start (`YYYY-MM-DD hh:mm:ss` or `YYYY-MM-DD`).
pub fn bucket_text(b: Bucket, unit: TimeUnit) -> String {
    match unit {
        TimeUnit::Day => format!("{:04}-{:02}-{:02}", b / 10_000, b / 100 % 100, b % 100),
        TimeUnit::Second => format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02}",
            b / 10_000_000_000,
            b / 100_000_000 % 100,
            b / 1_000_000 % 100,
            b / 10_000 % 100,
            b / 100 % 100,
            b % 100
        ),
    }
}

/// Buckets `first..=last`, as far as the audit has seen them: every row of a time value
/// within is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    pub first: Bucket,
    pub last: Bucket,
}

impl TimeRange {
    /// The inclusive bounds of the range as text the column compares with: whole seconds
    /// from `first`'s to the last microsecond of `last`'s (a `DATETIME(6)` keeps no finer
    /// fraction), or the two days.
    pub fn bounds(&self, unit: TimeUnit) -> (String, String) {
        let lo = bucket_text(self.first, unit);
        let mut hi = bucket_text(self.last, unit);
        if unit == TimeUnit::Second {
            hi.push_str(".999999");
        }
        (lo, hi)
    }

    /// Whether bucket `b` lies in the range.
    pub fn contains(&self, b: Bucket) -> bool {
        self.first <= b && b <= self.last
    }
}

/// An audit's reads by time: its time column and the records read per bucket (the counts
/// a round's first read found are the round's: [`crate::verify::Checker::prefetch_due`]).
#[derive(Debug, Clone)]
pub struct TimeReads {
    pub column: TimeColumn,
    pub density: Density,
}

impl TimeReads {
    /// Reads on `column`, remembering records in up to `buckets` buckets.
    pub fn new(column: TimeColumn, buckets: usize) -> Self {
        Self {
            column,
            density: Density::new(buckets),
        }
    }
}

/// How many records the audit read in each bucket of its time column: what reading a
/// bucket's rows will cost the sink, at least. Bounded: beyond `cap` buckets the oldest
/// are forgotten, and a forgotten bucket is counted key by key.
#[derive(Debug, Clone)]
pub struct Density {
    counts: BTreeMap<Bucket, u64>,
    cap: usize,
    /// The last bucket added to and what was added since: records mostly come in time
    /// order, and one comparison is cheaper than a tree walk per record.
    last: Option<(Bucket, u64)>,
}

impl Density {
    /// An empty count that remembers up to `cap` buckets.
    pub fn new(cap: usize) -> Self {
        Self {
            counts: BTreeMap::new(),
            cap: cap.max(1),
            last: None,
        }
    }

    /// One record read in bucket `b`.
    pub fn add(&mut self, b: Bucket) {
        match &mut self.last {
            Some((at, n)) if *at == b => *n += 1,
            _ => {
                self.flush();
                self.last = Some((b, 1));
            }
        }
    }

    fn flush(&mut self) {
        if let Some((b, n)) = self.last.take() {
            *self.counts.entry(b).or_insert(0) += n;
            while self.counts.len() > self.cap {
                self.counts.pop_first();
            }
        }
    }

    /// Records read in `b`, `None` when the audit has none there (or forgot them).
    pub fn rows(&mut self, b: Bucket) -> Option<u64> {
        self.flush();
        self.counts.get(&b).copied()
    }

    /// A read of `range` found more rows than the audit read there (another writer, a
    /// partition another instance reads), or failed (a timeout): its buckets are counted
    /// by key from now on.
    pub fn crowded(&mut self, range: TimeRange) {
        self.flush();
        for (_, n) in self.counts.range_mut(range.first..=range.last) {
            *n = u64::MAX / 4;
        }
    }

    /// Whether the audit read any record strictly between buckets `a` and `b`.
    fn any_between(&self, a: Bucket, b: Bucket) -> bool {
        a < b && self.counts.range(a + 1..b).next().is_some()
    }

    /// Buckets remembered (tests, bounds).
    pub fn len(&self) -> usize {
        self.counts.len() + usize::from(self.last.is_some())
    }

    /// Whether no bucket is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One read: its ranges, the keys (indices into the planned keys) it counts, and the rows
/// the audit expects it to find.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scan {
    pub ranges: Vec<TimeRange>,
    pub keys: Vec<usize>,
    pub expected: u64,
}

impl Scan {
    /// The most rows the read may return before it is given up (its keys then go by key):
    /// four times what the audit read there, and some room, and never more than twice
    /// [`SCAN_BUCKET_ROWS`]. The sink may hold more rows of a second than the audit read
    /// so far without another writer: a backlog read out of time order (the pipeline wrote
    /// the second's records, the audit has read some of them). A read given up costs at
    /// most `4 × SCAN_RATIO` rows per key, on top of the key counts that follow.
    pub fn limit(&self) -> u64 {
        self.expected
            .saturating_mul(4)
            .saturating_add(1_000)
            .min(SCAN_BUCKET_ROWS * 2)
    }
}

/// Which keys a round reads by time and which it counts by key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub scans: Vec<Scan>,
    /// Indices of the keys counted one by one.
    pub by_key: Vec<usize>,
}

/// Plans the reads for `buckets` (one per key, `None`: the key has no bucket; a key due on
/// several partitions is there once for each, which counts it as many times below):
/// a bucket is read when the audit's own rows there are at most [`SCAN_RATIO`] times its
/// keys and at most [`SCAN_BUCKET_ROWS`]; neighbouring read buckets with no record of the audit between them share one
/// range; reads hold at most [`SCAN_ROWS`] expected rows (a bucket is never split) and
/// [`SCAN_RANGES`] ranges. Every key is in exactly one scan or in `by_key`.
pub fn plan(buckets: &[Option<Bucket>], density: &mut Density) -> Plan {
    let mut out = Plan::default();
    let mut by_bucket: BTreeMap<Bucket, Vec<usize>> = BTreeMap::new();
    for (i, b) in buckets.iter().enumerate() {
        match b {
            Some(b) => by_bucket.entry(*b).or_default().push(i),
            None => out.by_key.push(i),
        }
    }
    density.flush();
    let mut current: Option<Scan> = None;
    for (b, keys) in by_bucket {
        let rows = density.counts.get(&b).copied();
        let Some(rows) = rows.filter(|&r| {
            r <= SCAN_RATIO.saturating_mul(keys.len() as u64) && r <= SCAN_BUCKET_ROWS
        }) else {
            out.by_key.extend(keys);
            continue;
        };
        if let Some(scan) = current.as_mut() {
            let full = scan.expected + rows > SCAN_ROWS;
            let last = scan.ranges.last().map(|r| r.last);
            let joins = last.is_some_and(|l| !density.any_between(l, b));
            if !full && joins {
                if let Some(r) = scan.ranges.last_mut() {
                    r.last = b;
                }
                scan.keys.extend(keys);
                scan.expected += rows;
                continue;
            }
            if !full && scan.ranges.len() < SCAN_RANGES {
                scan.ranges.push(TimeRange { first: b, last: b });
                scan.keys.extend(keys);
                scan.expected += rows;
                continue;
            }
            out.scans.extend(current.take());
        }
        current = Some(Scan {
            ranges: vec![TimeRange { first: b, last: b }],
            keys,
            expected: rows,
        });
    }
    out.scans.extend(current);
    out
}

#[cfg(test)]
mod tests;
