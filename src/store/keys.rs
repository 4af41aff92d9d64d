//! Key claims: the key book of `key_columns` audits (confirmed counts per packed key).

use super::*;

impl Store {
    /// The key_columns confirmed counts of one audit, as `(packed key, confirmed)`.
    pub fn load_key_book(&self, audit: &str) -> Result<Vec<(Vec<u8>, u64)>, StoreError> {
        let conn = self.lock();
        let ctx = || format!("load the key book of audit {audit}");
        let mut stmt = conn
            .prepare_cached("SELECT key, confirmed FROM key_book WHERE audit = ?1")
            .map_err(self.sq(ctx()))?;
        let rows = stmt
            .query_map(params![audit], |row| {
                Ok((row.get::<_, Vec<u8>>(0)?, row.get::<_, i64>(1)?))
            })
            .map_err(self.sq(ctx()))?;
        let mut out = Vec::new();
        for row in rows {
            let (k, n) = row.map_err(self.sq(ctx()))?;
            out.push((k, n.max(0) as u64));
        }
        Ok(out)
    }

    /// Confirmed counts of the given keys (packed), for `replay`; absent keys are 0.
    pub fn key_confirmed(&self, audit: &str, keys: &[Vec<u8>]) -> Result<Vec<u64>, StoreError> {
        let conn = self.lock();
        let ctx = || format!("read the key book of audit {audit}");
        let mut stmt = conn
            .prepare_cached("SELECT confirmed FROM key_book WHERE audit = ?1 AND key = ?2")
            .map_err(self.sq(ctx()))?;
        let mut out = Vec::with_capacity(keys.len());
        for k in keys {
            let n: Option<i64> = stmt
                .query_row(params![audit, k], |row| row.get(0))
                .optional()
                .map_err(self.sq(ctx()))?;
            out.push(n.unwrap_or(0).max(0) as u64);
        }
        Ok(out)
    }
}
