//! Key values in the sink column's own domain (SPEC "The sink's model", guarantee 10).
//!
//! The sink converts a key value on INSERT: a `DATETIME` column keeps whole seconds of
//! `2024-01-01 10:00:05.185` (MariaDB truncates, MySQL and Doris round), a `DECIMAL(6,2)`
//! keeps `1.01` of `1.005`, an `INT` keeps `1` of `1.0`. It then compares a `DATETIME`
//! column with the string `'…05.185'` at the string's full precision, so the row the record
//! became never equals the record's own text: every such record read as lost. And two
//! spellings the column equates (`…T12:00:00`, `… 12:00:00`) were two keys of the audit, so
//! one row was counted under one of them and the other read as lost.
//!
//! So every key value is converted here, before the key exists, the way its column stores
//! it, and written canonically: the audit's key multiset, the SQL (both forms) and the
//! store all see the stored value, and spellings the sink equates are one key. String
//! columns are left as sent (their collation is the sink's to handle, `sink::sql`). Pure:
//! the column types come from the sink ([`crate::sink::Verifier::key_domain`]).

pub mod keyword;
mod numeric;
mod temporal;

use crate::types::Key;
use std::borrow::Cow;

/// How a column of type `DATETIME(p)` / `TIMESTAMP(p)` stores more fractional digits than
/// `p`: decided by the server and its `sql_mode` (MySQL and Doris round, MariaDB
/// truncates; `TIME_TRUNCATE_FRACTIONAL` makes MySQL truncate, `TIME_ROUND_FRACTIONAL`
/// makes MariaDB round).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fraction {
    /// Digits past `p` are dropped (MariaDB; MySQL under `TIME_TRUNCATE_FRACTIONAL`).
    Truncate,
    /// Rounded half up at digit `p`, carrying into the seconds (MySQL; Doris 2.x, whose
    /// loads and Nereids inserts round; MariaDB under `TIME_ROUND_FRACTIONAL`).
    Round,
}

impl Fraction {
    /// The rule of the server whose `@@version` is `version` and whose session runs with
    /// `sql_mode`: Doris (`kind` `doris`) rounds, as its DATETIME documentation says of
    /// both Stream Load and INSERT; MariaDB (its version contains `MariaDB`) truncates
    /// unless `TIME_ROUND_FRACTIONAL` is set; anything else is MySQL, which rounds unless
    /// `TIME_TRUNCATE_FRACTIONAL` is set. The pipeline's sessions are taken to run with the
    /// server's default `sql_mode`, as the auditor's do (the startup log and
    /// `/api/status` show the rule taken).
    pub fn for_server(kind: &str, version: &str, sql_mode: &str) -> Fraction {
        let mode = |m: &str| {
            sql_mode
                .split(',')
                .any(|x| x.trim().eq_ignore_ascii_case(m))
        };
        if kind == "doris" {
            Fraction::Round
        } else if version.to_ascii_lowercase().contains("mariadb") {
            if mode("TIME_ROUND_FRACTIONAL") {
                Fraction::Round
            } else {
                Fraction::Truncate
            }
        } else if mode("TIME_TRUNCATE_FRACTIONAL") {
            Fraction::Truncate
        } else {
            Fraction::Round
        }
    }
}

/// What a key column stores, as far as converting a key value goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ColumnType {
    /// Character and binary strings: kept byte for byte (the collation is handled by the
    /// sink's comparison).
    Text,
    /// `DATETIME(p)` and `TIMESTAMP(p)`, `p` fractional digits (0–6).
    Datetime {
        /// Fractional second digits kept.
        precision: u8,
    },
    /// `DATE`.
    Date,
    /// `DECIMAL(p, s)`.
    Decimal {
        /// Digits in all.
        precision: u8,
        /// Digits after the point.
        scale: u8,
    },
    /// An integer column and its range (`TINYINT` … `BIGINT UNSIGNED`).
    Integer {
        /// Smallest value stored.
        min: i128,
        /// Largest value stored.
        max: i128,
    },
    /// Anything else (`FLOAT`, `TIME`, `ENUM`, `JSON`, …): compared as sent, as before.
    Other,
    /// An Elasticsearch/OpenSearch `keyword`-like field ([`keyword`]): a value longer than
    /// `ignore_above` is not indexed (no search finds its document), and a `lowercase`
    /// normalizer indexes and searches the value lowercased.
    Keyword {
        /// The smallest `ignore_above` over the indices that map the field, in UTF-16 code
        /// units (Java `String.length()`, what the server compares); `None`: unlimited.
        ignore_above: Option<u32>,
        /// Whether every index that maps the field applies the `lowercase` normalizer.
        lowercase: bool,
    },
}

impl ColumnType {
    /// Whether values of this column are converted (everything but text and other).
    pub fn converts(&self) -> bool {
        match self {
            ColumnType::Text | ColumnType::Other => false,
            ColumnType::Keyword {
                ignore_above,
                lowercase,
            } => ignore_above.is_some() || *lowercase,
            _ => true,
        }
    }
}

/// One key column as the sink described it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeyColumn {
    /// The sink column.
    pub name: String,
    /// The column's declared type, as the sink writes it (`datetime`, `varchar(64)`).
    pub declared: String,
    /// What a key value is converted to.
    #[serde(rename = "type")]
    pub ty: ColumnType,
    /// The column's collation (string columns).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collation: Option<String>,
}

/// The key columns of a sink table, in key order, and the server's fraction rule: how a
/// record's key is written the way the table stores it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeyDomain {
    /// Per key field, in key order.
    pub columns: Vec<KeyColumn>,
    /// DATETIME/TIMESTAMP fractional digits past the precision.
    pub fraction: Fraction,
}

/// A key value the column cannot store as the record wrote it: what the sink did with it
/// (a zero date or NULL in a lenient mode, a refused row in a strict one) cannot be told
/// from the record, so the record is unverifiable, never missing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unconvertible {
    /// Not a date and time in a spelling every MySQL-protocol sink reads alike.
    #[error("key column {column} ({declared}): not a date-time")]
    Datetime { column: String, declared: String },
    /// Not a date.
    #[error("key column {column} ({declared}): not a date")]
    Date { column: String, declared: String },
    /// Not a number, or beyond the column's range.
    #[error("key column {column} ({declared}): not a number the column holds")]
    Number { column: String, declared: String },
    /// Longer than the Elasticsearch field's `ignore_above`: the document is stored but the
    /// value is not indexed, so no key query can find it (written or lost alike).
    #[error(
        "key field {column} ({declared}): a value of {length} characters is over its \
         ignore_above {limit}, so Elasticsearch does not index it"
    )]
    Unindexable {
        column: String,
        declared: String,
        length: usize,
        limit: u32,
    },
    /// A character whose lowercase the normalizer and this process may spell differently.
    #[error(
        "key field {column} ({declared}): a character the lowercase normalizer may map otherwise"
    )]
    Unnormalizable { column: String, declared: String },
}

/// What one printed row says of the key columns' types ([`KeyDomain::printed`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Printed {
    /// A converting column's value is printed otherwise than its type stores.
    pub changed: bool,
    /// The converting columns (bits) whose value is printed as its type stores.
    pub vouched: u64,
}

impl KeyDomain {
    /// Whether no key value changes (every column text or other): the decoder skips it.
    pub fn is_identity(&self) -> bool {
        !self.columns.iter().any(|c| c.ty.converts())
    }

    /// Value `v` of key column `column`, as the column stores it (`v` itself when the
    /// column converts nothing, or `column` is out of range). An empty value stays empty:
    /// it matches `''` or NULL (SPEC "Matching strategies").
    pub fn value<'a>(&self, column: usize, v: &'a str) -> Result<Cow<'a, str>, Unconvertible> {
        let Some(c) = self.columns.get(column) else {
            return Ok(Cow::Borrowed(v));
        };
        if v.is_empty() || !c.ty.converts() {
            return Ok(Cow::Borrowed(v));
        }
        // Servers skip surrounding spaces when they read a number or a date.
        let t = v.trim_matches(|ch: char| ch.is_ascii_whitespace());
        let out: Cow<'_, str> = match c.ty {
            ColumnType::Datetime { precision } => temporal::datetime(t, precision, self.fraction)
                .ok_or_else(|| Unconvertible::Datetime {
                    column: c.name.clone(),
                    declared: c.declared.clone(),
                }),
            ColumnType::Date => temporal::date(t).ok_or_else(|| Unconvertible::Date {
                column: c.name.clone(),
                declared: c.declared.clone(),
            }),
            ColumnType::Decimal { precision, scale } => numeric::decimal(t, precision, scale)
                .map(Cow::Owned)
                .ok_or_else(|| Unconvertible::Number {
                    column: c.name.clone(),
                    declared: c.declared.clone(),
                }),
            ColumnType::Integer { min, max } => numeric::integer(t, min, max)
                .map(Cow::Owned)
                .ok_or_else(|| Unconvertible::Number {
                    column: c.name.clone(),
                    declared: c.declared.clone(),
                }),
            ColumnType::Keyword {
                ignore_above,
                lowercase,
            } => return keyword::value(c, v, ignore_above, lowercase),
            ColumnType::Text | ColumnType::Other => return Ok(Cow::Borrowed(v)),
        }?;
        Ok(if out == v {
            Cow::Borrowed(v)
        } else {
            Cow::Owned(out.into_owned())
        })
    }

    /// The converting columns ([`Self::printed`]'s subjects) as a bit mask, the first 64.
    pub fn converting(&self) -> u64 {
        self.columns
            .iter()
            .take(64)
            .enumerate()
            .filter(|(_, c)| c.ty.converts())
            .fold(0, |m, (i, _)| m | (1 << i))
    }

    /// What a row the sink printed (`packed`: each column's bytes ended by `0xFF`, as a
    /// read by time selects them) says of these column types. `changed`: a converting
    /// column's value is not in the form its type stores (an `ALTER TABLE` since the types
    /// were read: `DATETIME` made `DATETIME(3)` prints `… 10:00:05.000`, which no key
    /// written for the old type equals). `vouched`: the converting columns (bits, as
    /// [`Self::converting`]) whose value is in stored form. An empty value (NULL), a value
    /// that is not UTF-8 or one the type refuses (a zero date the server's `sql_mode`
    /// allows), and every value of a row of another arity, say nothing either way.
    pub fn printed(&self, packed: &[u8]) -> Printed {
        let mut out = Printed::default();
        let body = packed.strip_suffix(&[0xFF]).unwrap_or(packed);
        let values = body.split(|&b| b == 0xFF);
        if values.clone().count() != self.columns.len() {
            return out;
        }
        for (i, raw) in values.enumerate().take(64) {
            if raw.is_empty() || !self.columns.get(i).is_some_and(|c| c.ty.converts()) {
                continue;
            }
            match std::str::from_utf8(raw).map(|v| self.value(i, v)) {
                Ok(Ok(Cow::Borrowed(_))) => out.vouched |= 1 << i,
                Ok(Ok(Cow::Owned(_))) => out.changed = true,
                Ok(Err(_)) | Err(_) => {}
            }
        }
        out
    }

    /// `key` as the sink stores it: `Ok(None)` when no value changes (the common case,
    /// no allocation), `Ok(Some(stored))` otherwise. A key of another arity than the
    /// columns is returned unchanged (config validation ties them; the query reports it).
    pub fn key(&self, key: &Key) -> Result<Option<Key>, Unconvertible> {
        if self.is_identity() || key.len() != self.columns.len() {
            return Ok(None);
        }
        // The values are collected only from the first one that changes: the decoder runs
        // this for every record (and a read by time for every due key), and nearly every
        // key is already written as stored. Only the values of columns that convert are
        // read as text: checking every value's UTF-8 was most of this call's cost.
        let mut values: Option<Vec<Cow<'_, str>>> = None;
        for (i, raw) in key.raw_values().enumerate() {
            let converts = self.columns.get(i).is_some_and(|c| c.ty.converts());
            if !converts && values.is_none() {
                continue;
            }
            let v = std::str::from_utf8(raw).unwrap_or_default();
            let n = self.value(i, v)?;
            match (&mut values, n) {
                (Some(vs), n) => vs.push(n),
                (None, Cow::Borrowed(_)) => {}
                (None, Cow::Owned(o)) => {
                    let mut vs = Vec::with_capacity(self.columns.len());
                    vs.extend(key.values().take(i).map(Cow::Borrowed));
                    vs.push(Cow::Owned(o));
                    values = Some(vs);
                }
            }
        }
        Ok(values.map(Key::new))
    }

    /// `column type [collation]` per key column and the fraction rule, for the startup log.
    pub fn describe(&self) -> String {
        let columns: Vec<String> = self
            .columns
            .iter()
            .map(|c| match &c.collation {
                Some(coll) => format!("{} {} {}", c.name, c.declared, coll),
                None => format!("{} {}", c.name, c.declared),
            })
            .collect();
        let fraction = match self.fraction {
            Fraction::Truncate => "truncated",
            Fraction::Round => "rounded",
        };
        // An Elasticsearch domain has no fraction rule: its fields say their own limits.
        if self
            .columns
            .iter()
            .any(|c| matches!(c.ty, ColumnType::Keyword { .. }))
        {
            return columns.join(", ");
        }
        format!(
            "{}; fractional seconds past a column's precision {fraction}",
            columns.join(", ")
        )
    }
}

#[cfg(test)]
mod tests;
