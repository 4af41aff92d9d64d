//! The key columns' types and collations, checked once so that an exact `IN` comparison can be
//! trusted (or the audit refused with the fix), and each key value written the way its
//! column stores it ([`crate::key_domain`]).

use crate::key_domain::{ColumnType, Fraction, KeyColumn, KeyDomain};
use crate::sink::sql::{self, KeyCompare};

/// One column as `information_schema.COLUMNS` describes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct ColumnInfo {
    pub(super) name: String,
    pub(super) data_type: String,
    pub(super) collation: Option<String>,
    pub(super) charset: Option<String>,
    /// `COLUMN_TYPE`: the declaration (`datetime(3)`, `int(10) unsigned`).
    pub(super) column_type: String,
    /// `DATETIME_PRECISION`: fractional second digits of a temporal column.
    pub(super) datetime_precision: Option<u32>,
    /// `NUMERIC_PRECISION` / `NUMERIC_SCALE` of a numeric column.
    pub(super) numeric_precision: Option<u32>,
    pub(super) numeric_scale: Option<u32>,
}

impl ColumnInfo {
    /// What a key value of this column is converted to. `DATA_TYPE` names the type (MySQL
    /// and MariaDB: `datetime`, `decimal`; Doris also `datetimev2`, `decimalv3`, `datev2`,
    /// `largeint`); the precision comes from `DATETIME_PRECISION` or, where a server leaves
    /// it NULL, from the declaration's `(p)`.
    pub(super) fn column_type(&self) -> ColumnType {
        let data_type = self.data_type.trim().to_ascii_lowercase();
        let declared = self.column_type.to_ascii_lowercase();
        let unsigned = declared.contains("unsigned");
        let int = |bits: u32| {
            if unsigned {
                ColumnType::Integer {
                    min: 0,
                    max: (1i128 << bits) - 1,
                }
            } else {
                ColumnType::Integer {
                    min: -(1i128 << (bits - 1)),
                    max: (1i128 << (bits - 1)) - 1,
                }
            }
        };
        match data_type.as_str() {
            "datetime" | "datetimev2" | "timestamp" => ColumnType::Datetime {
                precision: self
                    .datetime_precision
                    .or_else(|| declared_arguments(&declared).first().copied())
                    .unwrap_or(0)
                    .min(6) as u8,
            },
            "date" | "datev2" => ColumnType::Date,
            "decimal" | "decimalv2" | "decimalv3" | "numeric" => {
                let args = declared_arguments(&declared);
                let precision = self.numeric_precision.or(args.first().copied());
                let scale = self.numeric_scale.or(args.get(1).copied()).unwrap_or(0);
                match precision {
                    Some(p) if p > 0 && p <= 76 && scale <= p => ColumnType::Decimal {
                        precision: p as u8,
                        scale: scale as u8,
                    },
                    // A declaration the auditor cannot read: compared as sent, as before.
                    _ => ColumnType::Other,
                }
            }
            "tinyint" => int(8),
            "smallint" => int(16),
            "mediumint" => int(24),
            "int" | "integer" => int(32),
            "bigint" => int(64),
            // Doris's 128-bit LARGEINT: all of i128 (the shift above would overflow).
            "largeint" => ColumnType::Integer {
                min: i128::MIN,
                max: i128::MAX,
            },
            "char" | "varchar" | "text" | "tinytext" | "mediumtext" | "longtext" | "string"
            | "binary" | "varbinary" | "blob" | "tinyblob" | "mediumblob" | "longblob" => {
                ColumnType::Text
            }
            _ => ColumnType::Other,
        }
    }
}

/// The numbers in a declaration's parentheses: `decimal(10,2)` → `[10, 2]`.
fn declared_arguments(declared: &str) -> Vec<u32> {
    declared
        .split_once('(')
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(args, _)| {
            args.split(',')
                .filter_map(|a| a.trim().parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The key columns' domain (type, precision, scale, collation, in key order), or `None`
/// when information_schema does not list every key column (the query's own error will
/// say why; nothing is converted meanwhile).
pub(super) fn key_domain(
    key_columns: &[String],
    info: &[ColumnInfo],
    fraction: Fraction,
) -> Option<KeyDomain> {
    let mut columns = Vec::with_capacity(key_columns.len());
    for column in key_columns {
        let c = find(info, column)?;
        columns.push(KeyColumn {
            name: column.clone(),
            declared: if c.column_type.is_empty() {
                c.data_type.clone()
            } else {
                c.column_type.clone()
            },
            ty: c.column_type(),
            collation: c.collation.clone(),
        });
    }
    Some(KeyDomain { columns, fraction })
}

/// Column `column` of `info`: by its exact name, else case-insensitively (column names are
/// case-insensitive in MySQL and MariaDB).
fn find<'a>(info: &'a [ColumnInfo], column: &str) -> Option<&'a ColumnInfo> {
    info.iter().find(|c| c.name == *column).or_else(|| {
        info.iter()
            .find(|c| c.name.to_lowercase() == column.to_lowercase())
    })
}

/// What the collations of the key columns mean for the key count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeyColumnCheck {
    /// Per key column, in key order.
    pub(super) compare: Vec<KeyCompare>,
    /// `column (type, collation)` of each column compared exactly by the auditor.
    pub(super) inexact: Vec<String>,
    /// Key columns information_schema does not list (left plain; nothing cached).
    pub(super) missing: Vec<String>,
    /// Every key column is listed and compared by the prepared key count as by the text
    /// form ([`sql::prepared_compares_alike`]): full batches may go prepared.
    pub(super) prepared: bool,
    /// Names of the columns compared by their own collation ([`KeyCompare::Collation`]):
    /// the table merges rows that collation equates.
    pub(super) merged: Vec<String>,
}

/// Matches the key columns to information_schema's rows (column names are
/// case-insensitive in MySQL and MariaDB) and decides each one's comparison.
///
/// `presence`: the table merges rows with equal keys (a PRIMARY/UNIQUE index within the key
/// columns), and merges them by each column's collation: `Example.COM` and `example.com`
/// in a `_ci` column, `a` and `a ` under PAD SPACE, are one row, which keeps one of the
/// spellings. Both records landed (SPEC: two spellings the sink equates are one key), so
/// such a UTF-8 column is compared as the table compares it ([`KeyCompare::Collation`]),
/// not byte-exactly: the spelling the table did not keep would read as lost. Never
/// prepared: a prepared statement's derived values take the connection's collation, which
/// can outrank the column's (a `_bin` `collation_connection` against a `_ci` column
/// compares case-sensitively), where text literals yield to it. A column of another
/// character set stays compared as its UTF-8 bytes (which collation a UTF-8 literal meets
/// it with depends on the server's coercion rules). A table that keeps every row keeps
/// every spelling, and is compared exactly.
pub(super) fn check_key_columns(
    key_columns: &[String],
    info: &[ColumnInfo],
    presence: bool,
) -> KeyColumnCheck {
    let mut out = KeyColumnCheck {
        compare: Vec::with_capacity(key_columns.len()),
        inexact: Vec::new(),
        missing: Vec::new(),
        prepared: true,
        merged: Vec::new(),
    };
    for column in key_columns {
        let Some(c) = find(info, column) else {
            out.missing.push(column.clone());
            out.compare.push(KeyCompare::Plain);
            out.prepared = false;
            continue;
        };
        out.prepared &= sql::prepared_compares_alike(c.collation.as_deref(), c.charset.as_deref());
        let compare = match sql::key_compare_for(c.collation.as_deref(), c.charset.as_deref()) {
            KeyCompare::Binary if presence => {
                out.merged.push(column.clone());
                out.prepared = false;
                out.compare.push(KeyCompare::Collation);
                continue;
            }
            compare => compare,
        };
        if compare != KeyCompare::Plain {
            out.inexact.push(format!(
                "{} ({}, {})",
                column,
                c.data_type,
                c.collation.as_deref().unwrap_or("?")
            ));
        }
        out.compare.push(compare);
    }
    out
}

/// Whether a session character set carries every UTF-8 value: `utf8mb4`; with `utf8_is_full`
/// (Doris, whose `utf8` is full UTF-8) also `utf8`. MySQL/MariaDB's `utf8` is `utf8mb3`.
pub(super) fn utf8_charset(name: &str, utf8_is_full: bool) -> bool {
    match name.trim().to_ascii_lowercase().as_str() {
        "utf8mb4" => true,
        "utf8" => utf8_is_full,
        _ => false,
    }
}
