//! Key claims: the key book of `key_columns` audits (confirmed counts per packed key), kept
//! as a log (schema v8): each round appends the counts that changed; a key's last row holds
//! its count, 0 meaning the key is no longer kept.

use super::*;

/// How a round writes its key claims ([`Store::commit_round_with_keys`]).
#[derive(Debug, Clone, Copy)]
pub enum KeyClaims<'a, K> {
    /// Counts that changed since the last write, appended; 0 forgets the key.
    Changes(&'a [(K, u64)]),
    /// The whole book (every key with a count above 0): the audit's log is replaced by
    /// exactly these, which drops the dead rows the changes left behind.
    Whole(&'a [(K, u64)]),
}

impl<K> KeyClaims<'_, K> {
    /// Whether there is nothing to write.
    pub fn is_empty(&self) -> bool {
        matches!(self, KeyClaims::Changes(c) if c.is_empty())
    }
}

/// The key book as the store holds it ([`Store::load_key_log`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoredKeys {
    /// `(packed key, confirmed)` of every kept key, in the order they were last written.
    pub claims: Vec<(Vec<u8>, u64)>,
    /// Rows of the audit's log, dead ones included: what the next appends add to.
    pub rows: u64,
}

impl Store {
    /// The key_columns confirmed counts of one audit, as `(packed key, confirmed)`, in the
    /// order they were last written.
    pub fn load_key_book(&self, audit: &str) -> Result<Vec<(Vec<u8>, u64)>, StoreError> {
        Ok(self.load_key_log(audit)?.claims)
    }

    /// [`Self::load_key_book`] with the size of the log.
    pub fn load_key_log(&self, audit: &str) -> Result<StoredKeys, StoreError> {
        let conn = self.lock();
        let ctx = || format!("load the key book of audit {audit}");
        let rows: i64 = conn
            .prepare_cached("SELECT COUNT(*) FROM key_log WHERE audit = ?1")
            .and_then(|mut s| s.query_row(params![audit], |r| r.get(0)))
            .map_err(self.sq(ctx()))?;
        // SQLite takes the bare columns of a MAX() aggregate from the row holding the
        // maximum: each key's last count, sorted by SQLite (spilling to disk past its cache),
        // not in a map of every key the log ever held.
        let mut stmt = conn
            .prepare_cached(
                "SELECT key, confirmed FROM (
                     SELECT key, confirmed, MAX(seq) AS last FROM key_log WHERE audit = ?1
                     GROUP BY key
                 ) WHERE confirmed > 0 ORDER BY last",
            )
            .map_err(self.sq(ctx()))?;
        let found = stmt
            .query_map(params![audit], |row| {
                Ok((row.get::<_, Vec<u8>>(0)?, row.get::<_, i64>(1)?))
            })
            .map_err(self.sq(ctx()))?;
        let mut claims = Vec::new();
        for row in found {
            let (k, n) = row.map_err(self.sq(ctx()))?;
            claims.push((k, n.max(0) as u64));
        }
        Ok(StoredKeys {
            claims,
            rows: rows.max(0) as u64,
        })
    }

    /// Confirmed counts of the given keys (packed), for `replay`; absent keys are 0. One
    /// pass over the audit's log, whatever the number of keys asked about.
    pub fn key_confirmed(&self, audit: &str, keys: &[Vec<u8>]) -> Result<Vec<u64>, StoreError> {
        let mut wanted: HashMap<&[u8], u64> = keys.iter().map(|k| (k.as_slice(), 0)).collect();
        let conn = self.lock();
        let ctx = || format!("read the key book of audit {audit}");
        let mut stmt = conn
            .prepare_cached("SELECT key, confirmed FROM key_log WHERE audit = ?1 ORDER BY seq")
            .map_err(self.sq(ctx()))?;
        let mut rows = stmt.query(params![audit]).map_err(self.sq(ctx()))?;
        while let Some(row) = rows.next().map_err(self.sq(ctx()))? {
            let k = row.get_ref(0).map_err(self.sq(ctx()))?;
            let Ok(k) = k.as_blob() else { continue };
            if let Some(n) = wanted.get_mut(k) {
                *n = row.get::<_, i64>(1).map_err(self.sq(ctx()))?.max(0) as u64;
            }
        }
        Ok(keys
            .iter()
            .map(|k| wanted.get(k.as_slice()).copied().unwrap_or(0))
            .collect())
    }
}

/// Writes a round's key claims inside its transaction (see [`KeyClaims`]).
pub(super) fn write_key_claims<K: AsRef<[u8]>>(
    tx: &Transaction<'_>,
    audit: &str,
    claims: KeyClaims<'_, K>,
) -> rusqlite::Result<()> {
    let (list, whole) = match claims {
        KeyClaims::Changes([]) => return Ok(()),
        KeyClaims::Changes(c) => (c, false),
        KeyClaims::Whole(c) => (c, true),
    };
    let mut seq: i64 = if whole {
        tx.prepare_cached("DELETE FROM key_log WHERE audit = ?1")?
            .execute(params![audit])?;
        0
    } else {
        tx.prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM key_log WHERE audit = ?1")?
            .query_row(params![audit], |r| r.get(0))?
    };
    // Rows in statements of CHUNK: stepping one statement per row cost more than the row.
    const CHUNK: usize = 64;
    let kept: Vec<(&[u8], i64)> = list
        .iter()
        .filter(|(_, n)| !(whole && *n == 0))
        .map(|(k, n)| (k.as_ref(), i64::try_from(*n).unwrap_or(i64::MAX)))
        .collect();
    let statement = |rows: usize| {
        let mut sql = String::from("INSERT INTO key_log (audit, seq, key, confirmed) VALUES ");
        for i in 0..rows {
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str("(?1, ?, ?, ?)");
        }
        sql
    };
    let full = statement(CHUNK);
    for chunk in kept.chunks(CHUNK) {
        // The last, shorter chunk is prepared once, not cached (it would push others out).
        let (mut cached, mut fresh);
        let stmt: &mut rusqlite::Statement<'_> = if chunk.len() == CHUNK {
            cached = tx.prepare_cached(&full)?;
            &mut cached
        } else {
            fresh = tx.prepare(&statement(chunk.len()))?;
            &mut fresh
        };
        stmt.raw_bind_parameter(1, audit)?;
        for (i, (k, n)) in chunk.iter().enumerate() {
            seq += 1;
            let at = 2 + 3 * i;
            stmt.raw_bind_parameter(at, seq)?;
            stmt.raw_bind_parameter(at + 1, *k)?;
            stmt.raw_bind_parameter(at + 2, *n)?;
        }
        stmt.raw_execute()?;
    }
    Ok(())
}
