//! Key claims: the key book of `key_columns` audits (confirmed counts per packed key), kept
//! as a log: each round appends the counts that changed; a key's last entry holds its
//! count, 0 meaning the key is no longer kept.
//!
//! The log of an audit is its `key_log` rows (schema v8, one claim a row) in seq order,
//! then the claims of its `key_chunks` rows (v9, up to [`CHUNK_CLAIMS`] packed in a row, see
//! key_chunk.rs) in chunk seq and position order. Only chunks are written; the v8 rows are
//! still read, so a v8 file needs no data migration, and they go with the audit's first
//! whole write.

use super::{Store, StoreError};
use crate::store::key_chunk;
use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, Transaction, params};
use std::collections::HashMap;
use std::hash::BuildHasher;

/// Claims a `key_chunks` row holds at most. One row per claim cost ~1 µs a claim, nearly
/// all SQLite's work per row (a statement step, a B-tree cell); per few thousand claims
/// that work is noise next to copying the bytes.
const CHUNK_CLAIMS: usize = 4096;

/// A chunk is closed once it holds this many bytes (long keys): what a write and a load
/// hold of it at once stays small.
const CHUNK_BYTES: usize = 256 * 1024;

/// How a round writes its key claims ([`Store::commit_round_with_keys`]).
#[derive(Debug, Clone, Copy)]
pub enum KeyClaims<'a, K> {
    /// Counts that changed since the last write, appended; 0 forgets the key.
    Changes(&'a [(K, u64)]),
    /// The whole book (every key with a count above 0): the audit's log is replaced by
    /// exactly these, which drops the dead entries the changes left behind.
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
    /// Entries of the audit's log (v8 rows and chunk claims), dead ones included: what the
    /// next appends add to.
    pub rows: u64,
}

/// The entries of a log being read, each key's last one kept ([`Store::load_key_log`]).
#[derive(Default)]
struct LastEntries {
    /// Every entry so far in log order, `(key, confirmed)`; one a later entry of its key
    /// overrides is left with no key and count 0, so the live ones stay in the order of
    /// their last entries with no sort.
    entries: Vec<(Vec<u8>, u64)>,
    /// `(hash, index in entries)` of each key's last entry. Hashed like the key book (the
    /// keys are record contents; `ledger/sharded.rs` says why foldhash). The hash is kept so
    /// that growing the table does not read every key again: those reads, a cache miss or
    /// two each, were most of a million-key load.
    last: HashTable<(u64, usize)>,
    hasher: foldhash::fast::RandomState,
}

impl LastEntries {
    fn push(&mut self, key: &[u8], confirmed: u64) {
        let at = self.entries.len();
        let hash = self.hasher.hash_one(key);
        let entries = &mut self.entries;
        let found = self.last.entry(
            hash,
            |&(h, i)| h == hash && entries[i].0 == key,
            |&(h, _)| h,
        );
        match found {
            Entry::Occupied(mut last) => {
                let before = std::mem::replace(&mut last.get_mut().1, at);
                let key = std::mem::take(&mut entries[before].0);
                entries[before].1 = 0;
                entries.push((key, confirmed));
            }
            Entry::Vacant(first) => {
                first.insert((hash, at));
                entries.push((key.to_vec(), confirmed));
            }
        }
    }

    /// The keys whose last count is above 0, in the order of their last entries.
    fn into_claims(self) -> Vec<(Vec<u8>, u64)> {
        let mut entries = self.entries;
        entries.retain(|(_, n)| *n > 0);
        entries
    }
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
        let ctx = format!("load the key book of audit {audit}");
        // Last entries win in memory, not in SQL: the whole log's entries are held, but the
        // rewrite rule keeps those under 1.5 times the live keys plus LOG_REWRITE_SLACK
        // (`KeyBook::claims_to_write`), the same order as the key book the caller builds.
        let mut log = LastEntries::default();
        let rows = self.scan_key_log(&conn, audit, &ctx, |key, n| log.push(key, n))?;
        Ok(StoredKeys {
            claims: log.into_claims(),
            rows,
        })
    }

    /// Writes stand-in credits that changed, `(packed key, credits)`: 0 deletes the key's
    /// row (schema v13, see `KeyBook::credits_to_write`).
    pub fn write_key_credits<K: AsRef<[u8]>>(
        &self,
        audit: &str,
        credits: &[(K, u64)],
    ) -> Result<(), StoreError> {
        if credits.is_empty() {
            return Ok(());
        }
        let mut conn = self.lock();
        let ctx = format!("write the key credits of audit {audit}");
        let sq = |source| StoreError::Sqlite {
            path: self.path.clone(),
            context: ctx.clone(),
            source,
        };
        let tx = conn.transaction().map_err(sq)?;
        {
            let mut put = tx
                .prepare_cached(
                    "INSERT INTO key_credits (audit, key, credits) VALUES (?1, ?2, ?3)
                     ON CONFLICT (audit, key) DO UPDATE SET credits = excluded.credits",
                )
                .map_err(sq)?;
            let mut del = tx
                .prepare_cached("DELETE FROM key_credits WHERE audit = ?1 AND key = ?2")
                .map_err(sq)?;
            for (k, n) in credits {
                let n = i64::try_from(*n).unwrap_or(i64::MAX);
                if n == 0 {
                    del.execute(params![audit, k.as_ref()]).map_err(sq)?;
                } else {
                    put.execute(params![audit, k.as_ref(), n]).map_err(sq)?;
                }
            }
        }
        tx.commit().map_err(sq)
    }

    /// The audit's stand-in credits, `(packed key, credits)` (see [`Self::write_key_credits`]).
    pub fn load_key_credits(&self, audit: &str) -> Result<Vec<(Vec<u8>, u64)>, StoreError> {
        let conn = self.lock();
        let sq = |source| StoreError::Sqlite {
            path: self.path.clone(),
            context: format!("load the key credits of audit {audit}"),
            source,
        };
        let mut stmt = conn
            .prepare_cached("SELECT key, credits FROM key_credits WHERE audit = ?1")
            .map_err(sq)?;
        let rows = stmt
            .query_map(params![audit], |r| {
                Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, i64>(1)?))
            })
            .map_err(sq)?;
        let mut out = Vec::new();
        for row in rows {
            let (k, n) = row.map_err(sq)?;
            out.push((k, u64::try_from(n).unwrap_or(0)));
        }
        Ok(out)
    }

    /// Confirmed counts of the given keys (packed), for `replay`; absent keys are 0. One
    /// pass over the audit's log, whatever the number of keys asked about.
    pub fn key_confirmed(&self, audit: &str, keys: &[Vec<u8>]) -> Result<Vec<u64>, StoreError> {
        let mut wanted: HashMap<&[u8], u64> = keys.iter().map(|k| (k.as_slice(), 0)).collect();
        let conn = self.lock();
        let ctx = format!("read the key book of audit {audit}");
        self.scan_key_log(&conn, audit, &ctx, |key, n| {
            if let Some(count) = wanted.get_mut(key) {
                *count = n;
            }
        })?;
        Ok(keys
            .iter()
            .map(|k| wanted.get(k.as_slice()).copied().unwrap_or(0))
            .collect())
    }

    /// Calls `each(key, confirmed)` for every entry of the audit's log in order (see the
    /// module docs) and returns how many there were. `ctx` names the operation.
    fn scan_key_log(
        &self,
        conn: &Connection,
        audit: &str,
        ctx: &str,
        mut each: impl FnMut(&[u8], u64),
    ) -> Result<u64, StoreError> {
        let sq = |source| StoreError::Sqlite {
            path: self.path.clone(),
            context: ctx.to_string(),
            source,
        };
        let mut at = 0u64;
        let mut old = conn
            .prepare_cached("SELECT key, confirmed FROM key_log WHERE audit = ?1 ORDER BY seq")
            .map_err(sq)?;
        let mut rows = old.query(params![audit]).map_err(sq)?;
        while let Some(row) = rows.next().map_err(sq)? {
            let key = row.get_ref(0).map_err(sq)?;
            let key = self.blob(key, || format!("{ctx}: a key_log key"))?;
            let n: i64 = row.get(1).map_err(sq)?;
            each(key, n.max(0) as u64);
            at += 1;
        }
        let mut chunks = conn
            .prepare_cached("SELECT seq, claims FROM key_chunks WHERE audit = ?1 ORDER BY seq")
            .map_err(sq)?;
        let mut rows = chunks.query(params![audit]).map_err(sq)?;
        while let Some(row) = rows.next().map_err(sq)? {
            let seq: i64 = row.get(0).map_err(sq)?;
            let chunk = row.get_ref(1).map_err(sq)?;
            let chunk = self.blob(chunk, || format!("{ctx}: chunk {seq}"))?;
            for claim in key_chunk::claims(chunk) {
                let (key, n) = claim.map_err(|e| StoreError::Corrupt {
                    path: self.path.clone(),
                    what: format!("{ctx}: chunk {seq} does not decode: {e}"),
                })?;
                each(key, n);
                at += 1;
            }
        }
        Ok(at)
    }

    /// The bytes of a BLOB value; anything else is corrupt (`what` names it).
    fn blob<'v>(
        &self,
        value: ValueRef<'v>,
        what: impl FnOnce() -> String,
    ) -> Result<&'v [u8], StoreError> {
        match value {
            ValueRef::Blob(b) => Ok(b),
            other => Err(StoreError::Corrupt {
                path: self.path.clone(),
                what: format!("{} is {}, not a BLOB", what(), other.data_type()),
            }),
        }
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
        // Both tables: the audit's v8 rows are part of its log until this write.
        tx.prepare_cached("DELETE FROM key_log WHERE audit = ?1")?
            .execute(params![audit])?;
        tx.prepare_cached("DELETE FROM key_chunks WHERE audit = ?1")?
            .execute(params![audit])?;
        0
    } else {
        tx.prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM key_chunks WHERE audit = ?1")?
            .query_row(params![audit], |r| r.get(0))?
    };
    let mut insert =
        tx.prepare_cached("INSERT INTO key_chunks (audit, seq, claims) VALUES (?1, ?2, ?3)")?;
    let kept = list
        .iter()
        .filter(|(_, n)| !(whole && *n == 0))
        .map(|(k, n)| (k.as_ref(), *n));
    key_chunk::pack(kept, CHUNK_CLAIMS, CHUNK_BYTES, |chunk| {
        seq += 1;
        insert.execute(params![audit, seq, chunk]).map(drop)
    })
}
