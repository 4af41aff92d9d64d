//! The key columns' types and collations, checked once so that an exact `IN` comparison can be
//! trusted (or the audit refused with the fix).

use super::*;

/// One column as `information_schema.COLUMNS` describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ColumnInfo {
    pub(super) name: String,
    pub(super) data_type: String,
    pub(super) collation: Option<String>,
    pub(super) charset: Option<String>,
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
}

/// Matches the key columns to information_schema's rows (column names are
/// case-insensitive in MySQL and MariaDB) and decides each one's comparison.
pub(super) fn check_key_columns(key_columns: &[String], info: &[ColumnInfo]) -> KeyColumnCheck {
    let mut out = KeyColumnCheck {
        compare: Vec::with_capacity(key_columns.len()),
        inexact: Vec::new(),
        missing: Vec::new(),
        prepared: true,
    };
    for column in key_columns {
        let found = info.iter().find(|c| c.name == *column).or_else(|| {
            info.iter()
                .find(|c| c.name.to_lowercase() == column.to_lowercase())
        });
        let Some(c) = found else {
            out.missing.push(column.clone());
            out.compare.push(KeyCompare::Plain);
            out.prepared = false;
            continue;
        };
        out.prepared &= sql::prepared_compares_alike(c.collation.as_deref(), c.charset.as_deref());
        let compare = sql::key_compare_for(c.collation.as_deref(), c.charset.as_deref());
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
