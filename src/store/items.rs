//! Ledger items: the missing runs and gaps of a stored ledger, one row each in
//! `ledger_items`, so a round rewrites only what changed instead of the whole ledger JSON.

use super::{LedgerItems, StoreError};
use rusqlite::{Connection, params};
use std::path::Path;

/// `ledger_items.kind` of a missing run.
const ITEM_MISSING: i64 = 0;

/// `ledger_items.kind` of a ledger gap.
const ITEM_GAP: i64 = 1;

/// Where the items of each kind live in the ledger's JSON snapshot, and the path to their
/// first offset.
const ITEM_KINDS: [(i64, &str, &[&str]); 2] = [
    (ITEM_MISSING, "missing", &["run", "first"]),
    (ITEM_GAP, "gaps", &["first"]),
];

/// Fixed-width RFC 3339 (nine fractional digits, `Z`): lossless and text-sortable.
/// Why a ledger's items could not be written or read.
pub(super) enum ItemError {
    Sql(rusqlite::Error),
    Shape(String),
}

impl From<rusqlite::Error> for ItemError {
    fn from(e: rusqlite::Error) -> Self {
        ItemError::Sql(e)
    }
}

impl ItemError {
    /// This error as a [`StoreError`] of the file at `path`: a SQLite failure while doing
    /// `context`, or a malformed item of `what` (empty when the message names it already).
    pub(super) fn into_store(self, path: &Path, context: String, what: &str) -> StoreError {
        match self {
            ItemError::Sql(source) => StoreError::Sqlite {
                path: path.to_path_buf(),
                context,
                source,
            },
            ItemError::Shape(w) if what.is_empty() => StoreError::Corrupt {
                path: path.to_path_buf(),
                what: w,
            },
            ItemError::Shape(w) => StoreError::Corrupt {
                path: path.to_path_buf(),
                what: format!("{what}: {w}"),
            },
        }
    }
}

/// Stores a whole ledger: its `missing` and `gaps` arrays (taken out of `head`) replace
/// every item stored for the partition.
pub(super) fn replace_items(
    conn: &Connection,
    audit: &str,
    topic: &str,
    partition: i32,
    head: &mut serde_json::Value,
) -> Result<(), ItemError> {
    conn.prepare_cached(
        "DELETE FROM ledger_items WHERE audit = ?1 AND topic = ?2 AND partition = ?3",
    )?
    .execute(params![audit, topic, partition])?;
    let mut insert = conn.prepare_cached(
        "INSERT OR REPLACE INTO ledger_items (audit, topic, partition, kind, first, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for (kind, field, path) in ITEM_KINDS {
        let Some(items) = head.as_object_mut().and_then(|o| o.remove(field)) else {
            continue;
        };
        let serde_json::Value::Array(items) = items else {
            return Err(ItemError::Shape(format!("`{field}` is not an array")));
        };
        for item in items {
            let first = path
                .iter()
                .try_fold(&item, |v, k| v.get(k))
                .and_then(serde_json::Value::as_i64)
                .ok_or_else(|| {
                    ItemError::Shape(format!("an item of `{field}` has no {}", path.join(".")))
                })?;
            insert.execute(params![
                audit,
                topic,
                partition,
                kind,
                first,
                item.to_string()
            ])?;
        }
    }
    Ok(())
}

/// Stores the changed items of a ledger (upserts and deletes).
pub(super) fn write_items(
    conn: &Connection,
    audit: &str,
    topic: &str,
    partition: i32,
    items: &LedgerItems,
) -> Result<(), ItemError> {
    let mut upsert = conn.prepare_cached(
        "INSERT OR REPLACE INTO ledger_items (audit, topic, partition, kind, first, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    let mut delete = conn.prepare_cached(
        "DELETE FROM ledger_items
         WHERE audit = ?1 AND topic = ?2 AND partition = ?3 AND kind = ?4 AND first = ?5",
    )?;
    for (kind, list) in [(ITEM_MISSING, &items.missing), (ITEM_GAP, &items.gaps)] {
        for (first, body) in list {
            match body {
                Some(b) => upsert.execute(params![audit, topic, partition, kind, first, b])?,
                None => delete.execute(params![audit, topic, partition, kind, first])?,
            };
        }
    }
    Ok(())
}

/// Puts a partition's stored items back into its ledger's JSON (`missing`, `gaps`), in
/// offset order. An item that cannot be read (not JSON, an unknown kind) is left out and
/// described in the answer; the store keeps it (only the ledger that wrote an item deletes
/// it, see [`write_items`]). Errors only when the query fails.
pub(super) fn read_items(
    conn: &Connection,
    audit: &str,
    topic: &str,
    partition: i32,
    head: &mut serde_json::Value,
) -> Result<Vec<String>, ItemError> {
    let mut stmt = conn.prepare_cached(
        "SELECT kind, first, body FROM ledger_items
         WHERE audit = ?1 AND topic = ?2 AND partition = ?3 ORDER BY kind, first",
    )?;
    let rows: Vec<(i64, i64, rusqlite::types::Value)> = stmt
        .query_map(params![audit, topic, partition], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })?
        .collect::<Result<_, _>>()?;
    let mut skipped = Vec::new();
    if rows.is_empty() {
        return Ok(skipped);
    }
    let Some(obj) = head.as_object_mut() else {
        return Err(ItemError::Shape("ledger is not a JSON object".to_string()));
    };
    for (kind, first, body) in rows {
        let Some((_, field, _)) = ITEM_KINDS.iter().find(|(k, ..)| *k == kind) else {
            skipped.push(format!(
                "ledger item {first} has an unknown kind {kind}; left out"
            ));
            continue;
        };
        let item = match &body {
            rusqlite::types::Value::Text(t) => serde_json::from_str::<serde_json::Value>(t)
                .map_err(|e| format!("is not JSON ({e})")),
            other => Err(format!("is not text ({other:?})")),
        };
        let item = match item {
            Ok(item) => item,
            Err(why) => {
                skipped.push(format!(
                    "the `{field}` item at offset {first} {why}; left out"
                ));
                continue;
            }
        };
        match obj
            .entry(field.to_string())
            .or_insert_with(|| serde_json::Value::Array(Vec::new()))
        {
            serde_json::Value::Array(a) => a.push(item),
            _ => return Err(ItemError::Shape(format!("`{field}` is not an array"))),
        }
    }
    Ok(skipped)
}
