//! An in-process table: the sink of `gap-auditor demo` (labelled simulated there) and of
//! unit tests of the verification algorithms. Not for production use.

use super::{RangeCount, SinkError, Verifier};
use crate::ledger::OffsetRun;
use crate::time_scan::{TimeColumn, TimeRange};
use crate::types::{Key, Offset, TopicPartition};
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[derive(Default)]
struct Table {
    offsets: BTreeMap<(String, i32, Offset), u64>,
    keys: HashMap<Key, u64>,
    ids: std::collections::HashSet<String>,
}

/// A thread-safe in-memory table counting rows by Kafka coordinates and by key.
#[derive(Default)]
pub struct MemorySink {
    table: Mutex<Table>,
    down: AtomicBool,
    /// Whether [`Verifier::offset_extent`] answers (off: "this sink does not say", as
    /// before the look at shared tables existed, so tests opt in).
    extent: AtomicBool,
    queries: AtomicU64,
    /// The key column rows are read by time on ([`Verifier::time_scan`]); `None`: keys are
    /// counted one by one, as before reads by time existed, so tests opt in.
    time: Mutex<Option<TimeColumn>>,
    /// Reads by time answered.
    time_reads: AtomicU64,
    /// Reads by time fail as a `query_timeout` does while set (see
    /// [`MemorySink::fail_time_reads`]).
    #[cfg(test)]
    time_fails: AtomicBool,
    /// Rows to add just before the query of this number is answered (see
    /// [`MemorySink::land_before_query`]).
    #[cfg(test)]
    landings: Mutex<Vec<(u64, Key, u64)>>,
    /// Offset questions over more offsets than this time out (0: none does; see
    /// [`MemorySink::time_out_over`]).
    #[cfg(test)]
    time_out_over: AtomicU64,
}

impl MemorySink {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a row carrying Kafka coordinates.
    pub fn insert_offset(&self, topic: &str, partition: i32, offset: Offset) {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        *t.offsets
            .entry((topic.to_string(), partition, offset))
            .or_default() += 1;
    }

    /// Adds a row carrying a match key.
    pub fn insert_key(&self, key: &Key) {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        *t.keys.entry(key.clone()).or_default() += 1;
    }

    /// Deletes every row carrying this match key (a TTL, a `DELETE`): returns how many.
    pub fn delete_key(&self, key: &Key) -> u64 {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.keys.remove(key).unwrap_or(0)
    }

    /// Adds (or overwrites) a document with this id.
    pub fn insert_id(&self, id: &str) {
        let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.ids.insert(id.to_string());
    }

    /// Whether the table answers the look at its offset extent (see the `extent` field).
    pub fn report_extent(&self, on: bool) {
        self.extent.store(on, Ordering::SeqCst);
    }

    /// Reads rows by time on `column` from now on ([`Verifier::time_scan`]).
    pub fn read_by_time(&self, column: TimeColumn) {
        *self.time.lock().unwrap_or_else(|e| e.into_inner()) = Some(column);
    }

    /// Test hook: reads by time fail as a `query_timeout` does while `on` (a second holding
    /// more rows than one read takes).
    #[cfg(test)]
    pub fn fail_time_reads(&self, on: bool) {
        self.time_fails.store(on, Ordering::SeqCst);
    }

    /// Reads by time answered so far ([`Verifier::count_keys_in_time`]).
    pub fn time_reads(&self) -> u64 {
        self.time_reads.load(Ordering::Relaxed)
    }

    /// Simulates an outage: every query fails while set.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Number of queries answered or refused so far.
    pub fn queries(&self) -> u64 {
        self.queries.load(Ordering::Relaxed)
    }

    /// Rows stored in total (offset-addressed).
    pub fn rows(&self) -> u64 {
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.offsets.values().sum()
    }

    /// Rows carrying this match key.
    pub fn rows_of_key(&self, key: &Key) -> u64 {
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        t.keys.get(key).copied().unwrap_or(0)
    }

    /// Test hook: `rows` rows of `key` land just before the sink answers its query number
    /// `n` (counted from 1 over its life, [`Self::queries`] + 1 is the next): rows that
    /// arrive while a round is under way, between two of its questions.
    #[cfg(test)]
    pub fn land_before_query(&self, n: u64, key: &Key, rows: u64) {
        let mut l = self.landings.lock().unwrap_or_else(|e| e.into_inner());
        l.push((n, key.clone(), rows));
    }

    /// Test hook: a count or list of offsets spanning more than `offsets` offsets fails
    /// as a `query_timeout` does (a sink too slow for a question that large); 0: none.
    #[cfg(test)]
    pub fn time_out_over(&self, offsets: u64) {
        self.time_out_over.store(offsets, Ordering::SeqCst);
    }

    /// Whether an offset question over `runs` is too large for the sink (see
    /// [`Self::time_out_over`]).
    fn too_large(&self, runs: &[OffsetRun]) -> Result<(), SinkError> {
        #[cfg(test)]
        {
            let max = self.time_out_over.load(Ordering::SeqCst);
            let span = runs.iter().map(OffsetRun::len).sum::<u64>();
            if max > 0 && span > max {
                return Err(SinkError::Unavailable(format!(
                    "query timed out (the test's sink answers at most {max} offsets)"
                )));
            }
        }
        let _ = runs;
        Ok(())
    }

    fn check(&self) -> Result<(), SinkError> {
        let _n = self.queries.fetch_add(1, Ordering::Relaxed) + 1;
        #[cfg(test)]
        {
            let mut l = self.landings.lock().unwrap_or_else(|e| e.into_inner());
            let mut t = self.table.lock().unwrap_or_else(|e| e.into_inner());
            l.retain(|(at, key, rows)| {
                if *at == _n {
                    *t.keys.entry(key.clone()).or_default() += rows;
                }
                *at != _n
            });
        }
        if self.down.load(Ordering::SeqCst) {
            Err(SinkError::Unavailable("simulated outage".into()))
        } else {
            Ok(())
        }
    }

    fn scan(&self, tp: &TopicPartition, runs: &[OffsetRun]) -> Vec<(Offset, u64)> {
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        for r in runs {
            let lo = (tp.topic.clone(), tp.partition, r.first);
            let hi = (tp.topic.clone(), tp.partition, r.last);
            out.extend(t.offsets.range(lo..=hi).map(|((_, _, o), n)| (*o, *n)));
        }
        out
    }
}

impl Verifier for MemorySink {
    fn kind(&self) -> &'static str {
        "memory"
    }

    async fn offset_extent(
        &self,
        partitions: &[i32],
    ) -> Result<Option<super::OffsetExtent>, SinkError> {
        if !self.extent.load(Ordering::SeqCst) {
            return Ok(None);
        }
        if self.down.load(Ordering::SeqCst) {
            return Err(SinkError::Unavailable("memory sink down".into()));
        }
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let parts = t.offsets.keys().map(|(_, p, _)| i64::from(*p));
        let lo = parts.clone().min();
        let hi = parts.max();
        let max_offsets = partitions
            .iter()
            .map(|&p| {
                let max = t
                    .offsets
                    .keys()
                    .filter(|(_, q, _)| *q == p)
                    .map(|(_, _, o)| *o)
                    .max();
                (p, max)
            })
            .collect();
        Ok(Some(super::OffsetExtent {
            partitions: lo.zip(hi),
            max_offsets,
        }))
    }

    async fn ping(&self) -> Result<(), SinkError> {
        self.check()
    }

    async fn count_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<RangeCount, SinkError> {
        self.check()?;
        self.too_large(runs)?;
        let found = self.scan(tp, runs);
        Ok(RangeCount {
            rows: found.iter().map(|(_, n)| n).sum(),
            distinct: found.len() as u64,
        })
    }

    async fn list_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<Vec<(Offset, u64)>, SinkError> {
        self.check()?;
        self.too_large(runs)?;
        Ok(self.scan(tp, runs))
    }

    async fn count_keys(&self, keys: &[&Key]) -> Result<Vec<u64>, SinkError> {
        self.check()?;
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        Ok(keys
            .iter()
            .map(|k| t.keys.get(*k).copied().unwrap_or(0))
            .collect())
    }

    async fn time_scan(&self) -> Result<Result<TimeColumn, String>, SinkError> {
        // Not a query: it reads the test's setting (and keeps query numbers as they were).
        let t = self.time.lock().unwrap_or_else(|e| e.into_inner());
        Ok(t.clone()
            .ok_or_else(|| "this memory table is not read by time".to_string()))
    }

    async fn count_keys_in_time(
        &self,
        column: &TimeColumn,
        ranges: &[TimeRange],
        keys: &[&Key],
        limit: u64,
    ) -> Result<Option<Vec<u64>>, SinkError> {
        self.check()?;
        #[cfg(test)]
        if self.time_fails.load(Ordering::SeqCst) {
            return Err(SinkError::Unavailable("query timed out".into()));
        }
        self.time_reads.fetch_add(1, Ordering::Relaxed);
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        // Every row of the ranges, as a range read returns them; counted per key here, and
        // each place of a key listed twice given its count.
        let mut index: HashMap<&Key, u64> = keys.iter().map(|k| (*k, 0)).collect();
        let mut read = 0u64;
        for (k, &n) in &t.keys {
            let Some(b) = column.bucket(k) else {
                continue;
            };
            if !ranges.iter().any(|r| r.contains(b)) {
                continue;
            }
            read += n;
            if read > limit {
                return Ok(None);
            }
            if let Some(c) = index.get_mut(k) {
                *c += n;
            }
        }
        Ok(Some(
            keys.iter()
                .map(|k| index.get(*k).copied().unwrap_or(0))
                .collect(),
        ))
    }

    async fn find_ids(&self, ids: &[&str]) -> Result<Vec<bool>, SinkError> {
        self.check()?;
        let t = self.table.lock().unwrap_or_else(|e| e.into_inner());
        Ok(ids.iter().map(|id| t.ids.contains(*id)).collect())
    }
}
