//! Turning sink counts into verdicts, exactly and cheaply.
//!
//! `offset_columns`: one `COUNT(*), COUNT(DISTINCT offset)` over all due runs of a partition.
//! When the distinct count equals the expected count every record is present (the predicate
//! is restricted to expected offsets, so rows at other offsets cannot compensate for a
//! missing one, and duplicates only raise `rows`). Otherwise the runs are bisected — the right
//! half's count is derived from the parent's, so each split costs one query — and ranges of
//! at most `list_threshold` records are listed offset by offset. With no loss this is one
//! query per partition per round, whatever the record rate.
//!
//! `key_columns`: distinct keys are counted in batches (several at once, as many as the
//! sink's pool allows; every batch answers before anything is decided) and matched against the audit's
//! [`KeyBook`]: a key carried by `m` due records needs `m` rows beyond those already held by
//! confirmed records of the same key on any partition, so neither repeated keys nor
//! duplicated rows hide a missing record, and a row a pending record of another partition
//! still needs is never charged as a duplicate.
//!
//! Any error makes the whole partition's answer Unknown for the round: unknown is not missing.

use crate::config::MatchStrategy;
use crate::gap::{Offset, TopicPartition};
use crate::ledger::{
    Applied, KeyBook, OffsetRun, PartitionLedger, RecheckBudget, Segment, Verdict, runs,
};
use crate::record::Key;
use crate::sink::{RangeCount, SinkError, Verifier};
use futures::stream::{self, StreamExt, TryStreamExt};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Knobs of the verification algorithms.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Keys per query (`batch_size`).
    pub batch_size: usize,
    /// Upper bound of SQL text spent on keys in one query, in bytes.
    pub max_key_bytes: usize,
    /// Most offset ranges OR-ed in one predicate (runs separated by at most
    /// [`runs::MAX_BRIDGED_GAP`] offsets share one range).
    pub max_runs_per_query: usize,
    /// Ranges with at most this many expected records are listed rather than bisected.
    pub list_threshold: u64,
}

impl Limits {
    /// Defaults derived from the audit's `batch_size`.
    pub fn from_batch_size(batch_size: usize) -> Self {
        Self {
            batch_size: batch_size.max(1),
            max_key_bytes: 1 << 20,
            max_runs_per_query: 256,
            list_threshold: batch_size.clamp(1, 10_000) as u64,
        }
    }
}

/// The one dispatch from a matching strategy to its verification, shared by `run`, `check`
/// and `replay` (SPEC guarantee 9: a copy drifts, and a drifted copy gives a wrong answer).
/// Owns the audit's [`KeyBook`] for `key_columns`.
#[derive(Debug)]
pub struct Checker {
    how: How,
    limits: Limits,
}

/// The strategy, carrying the state it needs: only key matching has any.
#[derive(Debug)]
enum How {
    Offsets,
    Ids,
    Keys(KeyBook),
}

impl Checker {
    /// A checker for `strategy` with `batch_size` keys per query; `key_capacity` bounds the
    /// idle keys the key book remembers (key_columns).
    pub fn new(strategy: MatchStrategy, batch_size: usize, key_capacity: usize) -> Self {
        let how = match strategy {
            MatchStrategy::OffsetColumns => How::Offsets,
            MatchStrategy::DocId => How::Ids,
            MatchStrategy::KeyColumns => How::Keys(KeyBook::new(key_capacity)),
        };
        Self {
            how,
            limits: Limits::from_batch_size(batch_size),
        }
    }

    /// The audit's key multiset (key_columns only): fed with every ingested key.
    pub fn book_mut(&mut self) -> Option<&mut KeyBook> {
        match &mut self.how {
            How::Keys(book) => Some(book),
            _ => None,
        }
    }

    /// The audit's key multiset, read-only.
    pub fn book(&self) -> Option<&KeyBook> {
        match &self.how {
            How::Keys(book) => Some(book),
            _ => None,
        }
    }

    /// Verifies due segments of one partition. One verdict per segment.
    pub async fn due<V: Verifier>(
        &mut self,
        sink: &V,
        tp: &TopicPartition,
        segs: &[Segment],
        obs: QueryObserver<'_>,
    ) -> Result<Vec<Verdict>, SinkError> {
        self.ask(sink, tp, segs, KeyRound::Due, obs).await
    }

    /// Re-checks missing segments of one partition (late arrivals). One verdict per segment.
    pub async fn recheck<V: Verifier>(
        &mut self,
        sink: &V,
        tp: &TopicPartition,
        segs: &[Segment],
        obs: QueryObserver<'_>,
    ) -> Result<Vec<Verdict>, SinkError> {
        self.ask(sink, tp, segs, KeyRound::Recheck, obs).await
    }

    /// offset_columns: whether re-checks go through a probe (one range count over a
    /// partition's missing span, see [`crate::ledger::Probe`]) before any run is looked at.
    pub fn probes(&self) -> bool {
        matches!(self.how, How::Offsets)
    }

    /// Counts the distinct offsets the sink holds in `span` (the probe; offset_columns).
    pub async fn probe<V: Verifier>(
        &self,
        sink: &V,
        tp: &TopicPartition,
        span: OffsetRun,
        obs: QueryObserver<'_>,
    ) -> Result<u64, SinkError> {
        Ok(observed(obs, sink.count_offsets(tp, &[span]))
            .await?
            .distinct)
    }

    /// Re-checks one partition's missing records (late arrivals) within `budget`, the one
    /// sequence `run` and the models share: with a probe (offset_columns) one range count
    /// first, and the runs only when it moved or a look is under way. `None`: the sink was
    /// not asked. On error nothing is decided and the rotation does not advance.
    pub async fn recheck_ledger<V: Verifier>(
        &mut self,
        sink: &V,
        tp: &TopicPartition,
        ledger: &mut PartitionLedger,
        budget: RecheckBudget,
        obs: QueryObserver<'_>,
    ) -> Result<Option<Applied>, SinkError> {
        let mut asked = false;
        if self.probes() && !ledger.look_in_progress() {
            let Some(probe) = ledger.probe() else {
                return Ok(None);
            };
            let distinct = self.probe(sink, tp, probe.span, obs).await?;
            asked = true;
            if !ledger.probe_answered(distinct) {
                return Ok(Some(Applied::default()));
            }
        }
        let checks = ledger.rechecks(budget);
        let verdicts = if checks.is_empty() {
            Vec::new()
        } else {
            asked = true;
            self.recheck(sink, tp, &checks, obs).await?
        };
        // Applied even when empty: it moves the rotation on (and may complete a look).
        let applied = ledger.apply_rechecks(&checks, &verdicts);
        Ok(asked.then_some(applied))
    }

    /// What one round may re-check on one partition: 16 queries' worth (runs OR-ed per
    /// query for offsets, keys per query otherwise), so that a massive incident costs the
    /// sink a bounded load per round and the rotation covers it over several rounds.
    pub fn recheck_budget(&self) -> RecheckBudget {
        const QUERIES: usize = 16;
        match self.how {
            How::Offsets => RecheckBudget {
                runs: self.limits.max_runs_per_query.max(1) * QUERIES,
                records: u64::MAX,
            },
            How::Ids | How::Keys(_) => RecheckBudget {
                runs: usize::MAX,
                records: (self.limits.batch_size.max(1) * QUERIES) as u64,
            },
        }
    }

    async fn ask<V: Verifier>(
        &mut self,
        sink: &V,
        tp: &TopicPartition,
        segs: &[Segment],
        round: KeyRound,
        obs: QueryObserver<'_>,
    ) -> Result<Vec<Verdict>, SinkError> {
        if segs.is_empty() {
            return Ok(Vec::new());
        }
        match &mut self.how {
            How::Keys(book) => by_keys(sink, segs, book, round, self.limits, obs).await,
            How::Ids => by_ids(sink, segs, self.limits, obs).await,
            How::Offsets => by_offsets(sink, tp, segs, self.limits, obs).await,
        }
    }
}

/// Called after every sink query with its latency and whether it succeeded.
pub type QueryObserver<'a> = &'a (dyn Fn(Duration, bool) + Send + Sync);

async fn observed<T>(
    obs: QueryObserver<'_>,
    fut: impl std::future::Future<Output = Result<T, SinkError>>,
) -> Result<T, SinkError> {
    let t = Instant::now();
    let r = fut.await;
    obs(t.elapsed(), r.is_ok());
    r
}

/// Verifies segments of one partition by offset ranges. Returns one verdict per segment.
pub async fn by_offsets<V: Verifier>(
    sink: &V,
    tp: &TopicPartition,
    segments: &[Segment],
    limits: Limits,
    obs: QueryObserver<'_>,
) -> Result<Vec<Verdict>, SinkError> {
    if segments.is_empty() {
        return Ok(Vec::new());
    }
    let all: Vec<OffsetRun> = runs::normalize(segments.iter().map(|s| s.run).collect());
    let mut present: Vec<OffsetRun> = Vec::new();
    let mut duplicates = 0u64;
    // One query per chunk: a chunk bridges the filtered offsets between its runs (see
    // `runs::cover`), so interleaved filtered records do not multiply the queries.
    for chunk in runs::query_chunks(&all, limits.max_runs_per_query) {
        let known = observed(obs, sink.count_offsets(tp, chunk)).await?;
        let (p, d) = resolve(sink, tp, chunk.to_vec(), known, limits, obs).await?;
        present.extend(p);
        duplicates += d;
    }
    let present = runs::normalize(present);
    // Duplicates are reported once, with the first segment: they are a partition-level count.
    Ok(segments
        .iter()
        .enumerate()
        .map(|(i, s)| Verdict::Known {
            present: runs::intersect(s.run, &present),
            duplicate_rows: if i == 0 { duplicates } else { 0 },
            shared_keys: Vec::new(),
        })
        .collect())
}

/// Finds the present offsets among `runs` given their aggregate count, by bisection.
async fn resolve<V: Verifier>(
    sink: &V,
    tp: &TopicPartition,
    runs_in: Vec<OffsetRun>,
    known: RangeCount,
    limits: Limits,
    obs: QueryObserver<'_>,
) -> Result<(Vec<OffsetRun>, u64), SinkError> {
    let mut present = Vec::new();
    let mut duplicates = 0u64;
    // (runs, count, derived): a derived count is the parent's minus its left half's.
    let mut stack = vec![(runs_in, known, false)];
    while let Some((rs, mut c, derived)) = stack.pop() {
        let expected = runs::count(&rs);
        if derived && c.distinct == 0 {
            // Never declare a range missing on a derived count: rows that landed between the
            // parent's query and the left half's (a replay, an ES refresh, a Doris observer
            // behind a load balancer) make the difference too small. Ask the sink.
            c = observed(obs, sink.count_offsets(tp, &rs)).await?;
        }
        if c.distinct >= expected {
            // Every expected offset is there (distinct can't exceed: the predicate only
            // matches expected offsets; a sink that says more is answering something else).
            present.extend(rs);
            duplicates += c.rows.saturating_sub(c.distinct);
        } else if c.distinct == 0 {
            duplicates += 0;
        } else if expected <= limits.list_threshold {
            let listed = observed(obs, sink.list_offsets(tp, &rs)).await?;
            for (o, n) in listed {
                if rs.iter().any(|r| r.contains(o)) {
                    present.push(OffsetRun::new(o, o));
                    duplicates += n.saturating_sub(1);
                }
            }
        } else {
            let (left, right) = runs::split_at_count(&rs, expected / 2);
            let lc = observed(obs, sink.count_offsets(tp, &left)).await?;
            let rc = RangeCount {
                rows: c.rows.saturating_sub(lc.rows),
                distinct: c.distinct.saturating_sub(lc.distinct),
            };
            stack.push((right, rc, true));
            stack.push((left, lc, false));
        }
    }
    Ok((runs::normalize(present), duplicates))
}

/// Which records a key round decides: due pending ones, or missing ones re-checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRound {
    /// Due records, pending until now.
    Due,
    /// Missing records, asked about again (late arrivals).
    Recheck,
}

/// Verifies segments (of any partitions) by key against the audit's [`KeyBook`], which it
/// updates (SPEC "key_columns": one multiset per audit, across partitions and rounds).
/// Returns one verdict per segment; on error nothing is decided and the book is unchanged.
///
/// Within a key, records are matched to rows in the order given: when a key has fewer free
/// rows than due records, the LAST of them are declared missing (the sink cannot say which
/// copy is absent; the verdict marks them `shared` when another record carries the key).
pub async fn by_keys<V: Verifier>(
    sink: &V,
    segments: &[Segment],
    book: &mut KeyBook,
    round: KeyRound,
    limits: Limits,
    obs: QueryObserver<'_>,
) -> Result<Vec<Verdict>, SinkError> {
    // Distinct keys in first-seen order, each with the (segment, offset) slots carrying it.
    let mut index: HashMap<&Key, usize> = HashMap::new();
    let mut keys: Vec<&Key> = Vec::new();
    let mut slots: Vec<Vec<(usize, Offset)>> = Vec::new();
    for (si, s) in segments.iter().enumerate() {
        for (i, k) in s.keys.iter().enumerate() {
            let o = s.run.first + i as Offset;
            let ki = *index.entry(k).or_insert_with(|| {
                keys.push(k);
                slots.push(Vec::new());
                keys.len() - 1
            });
            slots[ki].push((si, o));
        }
    }
    // Batches are counted `parallelism` at a time (the sink's pool), answers kept in batch
    // order; nothing is decided before every batch has answered, so the verdicts cannot
    // depend on which query came back first.
    let batches = key_batches(&keys, limits, sink.max_key_rows());
    let mut asked = Vec::with_capacity(batches.len());
    for batch in &batches {
        asked.push(count_batch(sink, batch, obs));
    }
    let answers: Vec<Vec<u64>> = stream::iter(asked)
        .buffered(sink.parallelism().max(1))
        .try_collect()
        .await?;
    let counts: Vec<u64> = answers.into_iter().flatten().collect();
    let mut present: Vec<Vec<OffsetRun>> = vec![Vec::new(); segments.len()];
    let mut shared: Vec<Vec<OffsetRun>> = vec![Vec::new(); segments.len()];
    let mut dups: Vec<u64> = vec![0; segments.len()];
    for (ki, k) in keys.iter().enumerate() {
        let rows = counts[ki];
        let m = slots[ki].len() as u64;
        let (found, duplicates, is_shared) = match round {
            KeyRound::Due => {
                let o = book.decide_due(k, m, rows);
                (o.confirmed, o.duplicates, o.shared)
            }
            KeyRound::Recheck => {
                let o = book.recheck(k, m, rows);
                (o.late, o.duplicates, false)
            }
        };
        for (i, &(si, o)) in slots[ki].iter().enumerate() {
            if (i as u64) < found {
                present[si].push(OffsetRun::new(o, o));
            } else if is_shared {
                shared[si].push(OffsetRun::new(o, o));
            }
        }
        if let Some(&(si, _)) = slots[ki].first() {
            dups[si] += duplicates;
        }
    }
    Ok(present
        .into_iter()
        .zip(dups)
        .zip(shared)
        .map(|((p, d), sh)| Verdict::Known {
            present: runs::normalize(p),
            duplicate_rows: d,
            shared_keys: runs::normalize(sh),
        })
        .collect())
}

/// Row counts of one key batch, checked to be one per key.
async fn count_batch<V: Verifier>(
    sink: &V,
    batch: &[&Key],
    obs: QueryObserver<'_>,
) -> Result<Vec<u64>, SinkError> {
    let got = observed(obs, sink.count_keys(batch)).await?;
    if got.len() != batch.len() {
        return Err(SinkError::Rejected(format!(
            "sink answered {} counts for {} keys",
            got.len(),
            batch.len()
        )));
    }
    Ok(got)
}

/// Verifies segments (of any partitions) by document id (`doc_id`: each record's key is
/// `Key(vec![id])`). Returns one verdict per segment.
///
/// An id names at most one document of an index, so there is nothing like a duplicate to
/// count. Several records can share an id when the template does not include the offset
/// (`{key}`: the pipeline upserts, the last write wins): the one document confirms all of
/// them, since the sink keeps no trace of the overwritten writes. A segment without one id
/// per offset cannot be asked about and stays unknown.
pub async fn by_ids<V: Verifier>(
    sink: &V,
    segments: &[Segment],
    limits: Limits,
    obs: QueryObserver<'_>,
) -> Result<Vec<Verdict>, SinkError> {
    let mut index: HashMap<&Key, usize> = HashMap::new();
    let mut keys: Vec<&Key> = Vec::new();
    for s in segments {
        if s.keys.len() as u64 != s.run.len() {
            continue;
        }
        for k in &s.keys {
            index.entry(k).or_insert_with(|| {
                keys.push(k);
                keys.len() - 1
            });
        }
    }
    let mut found: Vec<bool> = Vec::with_capacity(keys.len());
    for batch in key_batches(&keys, limits, sink.max_key_rows()) {
        let ids: Vec<&str> = batch.iter().map(|k| k.first().unwrap_or("")).collect();
        let got = observed(obs, sink.find_ids(&ids)).await?;
        if got.len() != ids.len() {
            return Err(SinkError::Rejected(format!(
                "sink answered {} results for {} ids",
                got.len(),
                ids.len()
            )));
        }
        found.extend(got);
    }
    Ok(segments
        .iter()
        .map(|s| {
            if s.keys.len() as u64 != s.run.len() {
                return Verdict::Unknown;
            }
            let present = s
                .keys
                .iter()
                .enumerate()
                .filter(|(_, k)| index.get(k).is_some_and(|&i| found[i]))
                .map(|(i, _)| {
                    let o = s.run.first + i as Offset;
                    OffsetRun::new(o, o)
                })
                .collect();
            Verdict::Known {
                present: runs::normalize(present),
                duplicate_rows: 0,
                shared_keys: Vec::new(),
            }
        })
        .collect())
}

/// Splits keys into batches bounded by count, by SQL text size and by the sink's bound on
/// derived-key rows per query (`max_rows`, [`crate::sink::sql::derived_rows`] per key).
fn key_batches<'a, 'k>(keys: &'a [&'k Key], limits: Limits, max_rows: usize) -> Vec<&'a [&'k Key]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut bytes = 0usize;
    let mut rows = 0usize;
    for (i, k) in keys.iter().enumerate() {
        let size: usize = k.values().map(|v| v.len() * 2 + 16).sum();
        let weight = crate::sink::sql::derived_rows(k.values());
        if i > start
            && (i - start >= limits.batch_size
                || bytes + size > limits.max_key_bytes
                || rows + weight > max_rows)
        {
            out.push(&keys[start..i]);
            start = i;
            bytes = 0;
            rows = 0;
        }
        bytes += size;
        rows += weight;
    }
    if start < keys.len() {
        out.push(&keys[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::memory::MemorySink;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn tp() -> TopicPartition {
        TopicPartition::new("t", 0)
    }

    fn seg(a: Offset, b: Offset) -> Segment {
        Segment {
            run: OffsetRun::new(a, b),
            keys: Vec::new(),
            max_ts: None,
        }
    }

    fn present_of(v: &[Verdict]) -> Vec<Offset> {
        v.iter()
            .flat_map(|v| match v {
                Verdict::Known { present, .. } => {
                    present.iter().flat_map(|r| r.first..=r.last).collect()
                }
                Verdict::Unknown => Vec::new(),
            })
            .collect()
    }

    fn dups_of(v: &[Verdict]) -> u64 {
        v.iter()
            .map(|v| match v {
                Verdict::Known { duplicate_rows, .. } => *duplicate_rows,
                Verdict::Unknown => 0,
            })
            .sum()
    }

    #[tokio::test]
    async fn no_loss_costs_one_query_per_partition() {
        let sink = MemorySink::new();
        for o in 0..100_000 {
            sink.insert_offset("t", 0, o);
        }
        let n = AtomicUsize::new(0);
        let obs = |_d: Duration, _ok: bool| {
            n.fetch_add(1, Ordering::Relaxed);
        };
        let segs = vec![seg(0, 49_999), seg(50_000, 99_999)];
        let v = by_offsets(&sink, &tp(), &segs, Limits::from_batch_size(1000), &obs)
            .await
            .expect("ok");
        assert_eq!(present_of(&v).len(), 100_000);
        assert_eq!(n.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn rows_at_unexpected_offsets_never_compensate() {
        let sink = MemorySink::new();
        // Expected: 0 and 2 (1 is filtered). Sink: 0 and 1 (the filtered one, written anyway).
        sink.insert_offset("t", 0, 0);
        sink.insert_offset("t", 0, 1);
        let segs = vec![seg(0, 0), seg(2, 2)];
        let v = by_offsets(
            &sink,
            &tp(),
            &segs,
            Limits::from_batch_size(1000),
            &|_, _| {},
        )
        .await
        .expect("ok");
        assert_eq!(present_of(&v), vec![0]);
    }

    #[tokio::test]
    async fn a_duplicate_never_hides_a_missing_offset() {
        let sink = MemorySink::new();
        for o in [0, 1, 1, 3] {
            sink.insert_offset("t", 0, o);
        }
        let v = by_offsets(
            &sink,
            &tp(),
            &[seg(0, 3)],
            Limits::from_batch_size(1000),
            &|_, _| {},
        )
        .await
        .expect("ok");
        assert_eq!(present_of(&v), vec![0, 1, 3]);
        assert_eq!(dups_of(&v), 1);
    }

    #[tokio::test]
    async fn bisection_queries_grow_with_log_of_the_range() {
        let sink = MemorySink::new();
        for o in 0..1_000_000 {
            if o != 777_777 {
                sink.insert_offset("t", 0, o);
            }
        }
        let n = AtomicUsize::new(0);
        let obs = |_d: Duration, _ok: bool| {
            n.fetch_add(1, Ordering::Relaxed);
        };
        let v = by_offsets(
            &sink,
            &tp(),
            &[seg(0, 999_999)],
            Limits::from_batch_size(1000),
            &obs,
        )
        .await
        .expect("ok");
        assert_eq!(present_of(&v).len(), 999_999);
        assert!(!present_of(&v).contains(&777_777));
        let q = n.load(Ordering::Relaxed);
        assert!(q <= 12, "{q} queries");
    }

    /// A sink whose rows land while a round is bisecting: the right half's derived count
    /// (parent − left) reads 0 although its rows are there by now.
    struct Landing {
        inner: MemorySink,
        queries: AtomicUsize,
    }

    impl Verifier for Landing {
        fn kind(&self) -> &'static str {
            "landing"
        }
        async fn ping(&self) -> Result<(), SinkError> {
            Ok(())
        }
        async fn count_offsets(
            &self,
            tp: &TopicPartition,
            runs: &[OffsetRun],
        ) -> Result<RangeCount, SinkError> {
            // After the first (parent) query, offsets 0..=9 land.
            if self.queries.fetch_add(1, Ordering::SeqCst) == 1 {
                for o in 0..10 {
                    self.inner.insert_offset("t", 0, o);
                }
            }
            self.inner.count_offsets(tp, runs).await
        }
        async fn list_offsets(
            &self,
            tp: &TopicPartition,
            runs: &[OffsetRun],
        ) -> Result<Vec<(Offset, u64)>, SinkError> {
            self.inner.list_offsets(tp, runs).await
        }
        async fn count_keys(&self, keys: &[&Key]) -> Result<Vec<u64>, SinkError> {
            self.inner.count_keys(keys).await
        }
    }

    #[tokio::test]
    async fn a_derived_zero_is_asked_about_not_declared_missing() {
        // Parent 0..=19: 10..=19 present (distinct 10 of 20). Then 0..=9 land; the left half
        // 0..=9 now counts 10, so the derived right half 10..=19 reads 0 — yet all are there.
        let sink = Landing {
            inner: MemorySink::new(),
            queries: AtomicUsize::new(0),
        };
        for o in 10..20 {
            sink.inner.insert_offset("t", 0, o);
        }
        let limits = Limits {
            batch_size: 10,
            max_key_bytes: 1 << 20,
            max_runs_per_query: 8,
            list_threshold: 1,
        };
        let v = by_offsets(&sink, &tp(), &[seg(0, 19)], limits, &|_, _| {})
            .await
            .expect("ok");
        assert_eq!(present_of(&v), (0..20).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn errors_are_unknown_not_missing() {
        let sink = MemorySink::new();
        sink.set_down(true);
        let r = by_offsets(
            &sink,
            &tp(),
            &[seg(0, 3)],
            Limits::from_batch_size(10),
            &|_, _| {},
        )
        .await;
        assert!(r.is_err());
        let mut b = KeyBook::new(10);
        let s = Segment {
            run: OffsetRun::new(0, 0),
            keys: vec![Key::new(["a"])],
            max_ts: None,
        };
        pended(&mut b, std::slice::from_ref(&s));
        assert!(
            by_keys(
                &sink,
                &[s],
                &mut b,
                KeyRound::Due,
                Limits::from_batch_size(10),
                &|_, _| {}
            )
            .await
            .is_err()
        );
        assert_eq!(
            b.counts(&Key::new(["a"])),
            (1, 0, 0),
            "an error decides nothing"
        );
    }

    fn kseg(first: Offset, keys: &[&str]) -> Segment {
        Segment {
            run: OffsetRun::new(first, first + keys.len() as Offset - 1),
            keys: keys.iter().map(|k| Key::new([k])).collect(),
            max_ts: None,
        }
    }

    /// Ingests the segments' keys into the book (the daemon does it as it reads them).
    fn pended(book: &mut KeyBook, segs: &[Segment]) {
        for s in segs {
            for k in &s.keys {
                book.pend(k);
            }
        }
    }

    async fn due_keys(sink: &MemorySink, book: &mut KeyBook, segs: &[Segment]) -> Vec<Verdict> {
        by_keys(
            sink,
            segs,
            book,
            KeyRound::Due,
            Limits::from_batch_size(2),
            &|_, _| {},
        )
        .await
        .expect("ok")
    }

    async fn recheck_keys(sink: &MemorySink, book: &mut KeyBook, segs: &[Segment]) -> Vec<Verdict> {
        by_keys(
            sink,
            segs,
            book,
            KeyRound::Recheck,
            Limits::from_batch_size(2),
            &|_, _| {},
        )
        .await
        .expect("ok")
    }

    #[tokio::test]
    async fn repeated_keys_are_a_multiplicity() {
        let sink = MemorySink::new();
        sink.insert_key(&Key::new(["a"]));
        let mut b = KeyBook::new(100);
        // Two records with key a, one row: one of them is missing, and it says so.
        let segs = [kseg(0, &["a", "b", "a"])];
        pended(&mut b, &segs);
        let v = due_keys(&sink, &mut b, &segs).await;
        assert_eq!(present_of(&v), vec![0]);
        assert!(
            matches!(&v[0], Verdict::Known { shared_keys, .. } if shared_keys == &vec![OffsetRun::new(2, 2)]),
            "{v:?}"
        );
        // A later record with key a: the one row is already held by offset 0.
        let segs = [kseg(3, &["a"])];
        pended(&mut b, &segs);
        let v = due_keys(&sink, &mut b, &segs).await;
        assert!(present_of(&v).is_empty());
    }

    #[tokio::test]
    async fn a_shared_key_across_partitions_and_rounds_is_no_loss() {
        // FINDINGS: one key on p0 and p1 (A and AAAA in one second), both rows present.
        let sink = MemorySink::new();
        let a = Key::new(["a"]);
        sink.insert_key(&a);
        sink.insert_key(&a);
        let mut b = KeyBook::new(100);
        let p0 = [kseg(0, &["a"])];
        let p1 = [kseg(0, &["a"])];
        pended(&mut b, &p0);
        pended(&mut b, &p1);
        let v0 = due_keys(&sink, &mut b, &p0).await;
        assert_eq!((present_of(&v0), dups_of(&v0)), (vec![0], 0));
        let v1 = due_keys(&sink, &mut b, &p1).await;
        assert_eq!((present_of(&v1), dups_of(&v1)), (vec![0], 0));
    }

    #[tokio::test]
    async fn rechecks_find_late_rows_of_shared_keys() {
        let sink = MemorySink::new();
        let a = Key::new(["a"]);
        sink.insert_key(&a);
        let mut b = KeyBook::new(100);
        let segs = [kseg(0, &["a", "a"])];
        pended(&mut b, &segs);
        let v = due_keys(&sink, &mut b, &segs).await;
        assert_eq!(present_of(&v), vec![0]);
        let missing = [kseg(1, &["a"])];
        assert!(present_of(&recheck_keys(&sink, &mut b, &missing).await).is_empty());
        sink.insert_key(&a);
        assert_eq!(
            present_of(&recheck_keys(&sink, &mut b, &missing).await),
            vec![1]
        );
        assert_eq!(b.counts(&a), (0, 2, 0));
    }

    #[tokio::test]
    async fn duplicated_rows_are_counted_once_nothing_waits_for_the_key() {
        let sink = MemorySink::new();
        let a = Key::new(["a"]);
        sink.insert_key(&a);
        sink.insert_key(&a);
        let mut b = KeyBook::new(100);
        let segs = [kseg(0, &["a"])];
        pended(&mut b, &segs);
        let v = due_keys(&sink, &mut b, &segs).await;
        assert_eq!((present_of(&v), dups_of(&v)), (vec![0], 1));
        // SPEC: never missing while rows >= due + confirmed: the extra row (counted as a
        // duplicate before this record was read) confirms a later record with the key.
        let segs = [kseg(1, &["a"])];
        pended(&mut b, &segs);
        let v = due_keys(&sink, &mut b, &segs).await;
        assert_eq!((present_of(&v), dups_of(&v)), (vec![1], 0));
        let segs = [kseg(2, &["a"])];
        pended(&mut b, &segs);
        let v = due_keys(&sink, &mut b, &segs).await;
        assert!(present_of(&v).is_empty(), "two rows, three records");
    }

    fn idseg(first: Offset, ids: &[&str]) -> Segment {
        kseg(first, ids)
    }

    #[tokio::test]
    async fn ids_found_missing_and_shared() {
        let sink = MemorySink::new();
        for id in ["t+0+0", "t+0+2", "shared"] {
            sink.insert_id(id);
        }
        let n = AtomicUsize::new(0);
        let obs = |_d: Duration, _ok: bool| {
            n.fetch_add(1, Ordering::Relaxed);
        };
        let segs = vec![
            idseg(0, &["t+0+0", "t+0+1", "t+0+2"]),
            idseg(5, &["shared", "shared", "t+0+6"]),
        ];
        let v = by_ids(&sink, &segs, Limits::from_batch_size(2), &obs)
            .await
            .expect("ok");
        assert_eq!(present_of(&v), vec![0, 2, 5, 6]);
        assert_eq!(dups_of(&v), 0);
        // 5 distinct ids in batches of 2: 3 queries.
        assert_eq!(n.load(Ordering::Relaxed), 3);
    }

    #[tokio::test]
    async fn ids_errors_are_unknown_and_keyless_segments_stay_unknown() {
        let sink = MemorySink::new();
        sink.insert_id("a");
        let keyless = seg(0, 1);
        let v = by_ids(
            &sink,
            &[keyless, idseg(2, &["a"])],
            Limits::from_batch_size(10),
            &|_, _| {},
        )
        .await
        .expect("ok");
        assert_eq!(v[0], Verdict::Unknown);
        assert_eq!(present_of(&v[1..]), vec![2]);
        sink.set_down(true);
        assert!(
            by_ids(
                &sink,
                &[idseg(0, &["a"])],
                Limits::from_batch_size(10),
                &|_, _| {}
            )
            .await
            .is_err()
        );
    }

    #[tokio::test]
    async fn sql_sinks_refuse_ids() {
        struct NoIds;
        impl Verifier for NoIds {
            fn kind(&self) -> &'static str {
                "none"
            }
            async fn ping(&self) -> Result<(), SinkError> {
                Ok(())
            }
            async fn count_offsets(
                &self,
                _: &TopicPartition,
                _: &[OffsetRun],
            ) -> Result<RangeCount, SinkError> {
                Ok(RangeCount::default())
            }
            async fn list_offsets(
                &self,
                _: &TopicPartition,
                _: &[OffsetRun],
            ) -> Result<Vec<(Offset, u64)>, SinkError> {
                Ok(Vec::new())
            }
            async fn count_keys(&self, _: &[&Key]) -> Result<Vec<u64>, SinkError> {
                Ok(Vec::new())
            }
        }
        let e = by_ids(
            &NoIds,
            &[idseg(0, &["a"])],
            Limits::from_batch_size(10),
            &|_, _| {},
        )
        .await
        .expect_err("refused");
        assert!(matches!(e, SinkError::Rejected(m) if m.contains("doc_id")));
    }

    #[test]
    fn key_batches_respect_count_and_bytes() {
        let big = Key::new(["x".repeat(100_000)]);
        let small = Key::new(["y"]);
        let keys: Vec<&Key> = vec![&small, &big, &big, &small, &small, &small];
        let limits = Limits {
            batch_size: 2,
            max_key_bytes: 150_000,
            max_runs_per_query: 8,
            list_threshold: 8,
        };
        let b = key_batches(&keys, limits, usize::MAX);
        assert_eq!(
            b.iter().map(|b| b.len()).collect::<Vec<_>>(),
            vec![1, 1, 1, 2, 1]
        );
    }

    #[test]
    fn key_batches_respect_the_sinks_derived_row_bound() {
        let plain = Key::new(["a", "b"]);
        let one_empty = Key::new(["", "b"]);
        let two_empty = Key::new(["", ""]);
        let keys: Vec<&Key> = vec![&plain, &one_empty, &two_empty, &plain, &plain, &two_empty];
        // Weights 1, 2, 4, 1, 1, 4 under a bound of 4 rows per query.
        let b = key_batches(&keys, Limits::from_batch_size(100), 4);
        assert_eq!(
            b.iter().map(|b| b.len()).collect::<Vec<_>>(),
            vec![2, 1, 2, 1]
        );
        // A key heavier than the bound still goes, alone.
        let b = key_batches(&keys, Limits::from_batch_size(100), 1);
        assert_eq!(b.len(), 6);
    }

    /// A sink that answers key counts several at a time, slowly and out of order, and
    /// remembers how many were in flight at once.
    struct Concurrent {
        inner: MemorySink,
        in_flight: AtomicUsize,
        most: AtomicUsize,
        calls: AtomicUsize,
    }

    impl Verifier for Concurrent {
        fn kind(&self) -> &'static str {
            "concurrent"
        }
        async fn ping(&self) -> Result<(), SinkError> {
            Ok(())
        }
        async fn count_offsets(
            &self,
            tp: &TopicPartition,
            runs: &[OffsetRun],
        ) -> Result<RangeCount, SinkError> {
            self.inner.count_offsets(tp, runs).await
        }
        async fn list_offsets(
            &self,
            tp: &TopicPartition,
            runs: &[OffsetRun],
        ) -> Result<Vec<(Offset, u64)>, SinkError> {
            self.inner.list_offsets(tp, runs).await
        }
        async fn count_keys(&self, keys: &[&Key]) -> Result<Vec<u64>, SinkError> {
            let n = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(n, Ordering::SeqCst);
            let call = self.calls.fetch_add(1, Ordering::SeqCst);
            // Earlier batches answer later.
            tokio::time::sleep(Duration::from_millis(20 - (call as u64 % 4) * 5)).await;
            let r = self.inner.count_keys(keys).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            r
        }
        fn max_key_rows(&self) -> usize {
            3
        }
        fn parallelism(&self) -> usize {
            3
        }
    }

    #[tokio::test]
    async fn key_batches_are_counted_concurrently_with_the_same_verdicts() {
        let names: Vec<String> = (0..40).map(|i| format!("k{}", i % 23)).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let segs = [kseg(0, &refs[..20]), kseg(20, &refs[20..])];
        let fill = |sink: &MemorySink| {
            for (i, k) in names.iter().enumerate().take(23) {
                // Some keys have no row, some one, some two.
                for _ in 0..(i % 3) {
                    sink.insert_key(&Key::new([k.as_str()]));
                }
            }
        };
        let serial = MemorySink::new();
        fill(&serial);
        let mut book = KeyBook::new(100);
        pended(&mut book, &segs);
        let want = by_keys(
            &serial,
            &segs,
            &mut book,
            KeyRound::Due,
            Limits::from_batch_size(1000),
            &|_, _| {},
        )
        .await
        .expect("ok");
        let concurrent = Concurrent {
            inner: MemorySink::new(),
            in_flight: AtomicUsize::new(0),
            most: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
        };
        fill(&concurrent.inner);
        let mut book = KeyBook::new(100);
        pended(&mut book, &segs);
        let n = AtomicUsize::new(0);
        let obs = |_d: Duration, _ok: bool| {
            n.fetch_add(1, Ordering::Relaxed);
        };
        let got = by_keys(
            &concurrent,
            &segs,
            &mut book,
            KeyRound::Due,
            Limits::from_batch_size(1000),
            &obs,
        )
        .await
        .expect("ok");
        assert_eq!(got, want);
        // 23 distinct keys, at most 3 per query (the sink's bound): 8 queries, 3 at once.
        assert_eq!(n.load(Ordering::Relaxed), 8);
        assert_eq!(concurrent.most.load(Ordering::SeqCst), 3);
    }

    proptest! {
        #[test]
        fn offsets_verdict_is_exact(
            sink_rows in prop::collection::vec((0i64..300, 1u64..3), 0..300),
            segs in prop::collection::vec((0i64..300, 0i64..30), 1..8),
            threshold in 1u64..50,
            max_runs in 1usize..5,
        ) {
            let sink = MemorySink::new();
            let mut rows: BTreeMap<Offset, u64> = BTreeMap::new();
            for (o, n) in &sink_rows {
                for _ in 0..*n { sink.insert_offset("t", 0, *o); }
                *rows.entry(*o).or_default() += n;
            }
            let segments: Vec<Segment> = runs::normalize(segs.iter().map(|(a, l)| OffsetRun::new(*a, a + l)).collect())
                .into_iter().map(|r| seg(r.first, r.last)).collect();
            let limits = Limits { batch_size: 10, max_key_bytes: 1 << 20, max_runs_per_query: max_runs, list_threshold: threshold };
            let rt = tokio::runtime::Builder::new_current_thread().build().expect("rt");
            let v = rt.block_on(by_offsets(&sink, &tp(), &segments, limits, &|_, _| {})).expect("ok");
            let want: Vec<Offset> = segments.iter().flat_map(|s| s.run.first..=s.run.last).filter(|o| rows.contains_key(o)).collect();
            let want_dups: u64 = want.iter().map(|o| rows[o] - 1).sum();
            prop_assert_eq!(present_of(&v), want);
            prop_assert_eq!(dups_of(&v), want_dups);
        }
    }
}
