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
use crate::ledger::{
    Applied, KeyBook, OffsetRun, PartitionLedger, RecheckBudget, Segment, Verdict, runs,
};
use crate::sink::{RangeCount, SinkError, Verifier};
use crate::time_scan::{self, Bucket, Density, Plan, TimeColumn, TimeReads};
use crate::types::{Key, Offset, TopicPartition};
use futures::stream::{self, StreamExt, TryStreamExt};
// foldhash, seeded per map: keys are record contents (see `ledger::sharded`).
use foldhash::HashMap;
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
    /// key_columns read by time: what this round's first read counted
    /// ([`Self::prefetch_due`]).
    round: RoundReads,
}

/// What a round's first read by time counted, for the partitions' own due questions to
/// take ([`Checker::prefetch_due`]); emptied when the round ends.
#[derive(Debug, Default)]
struct RoundReads {
    /// Each partition's due question as the read asked it, until that partition asks it.
    asks: Vec<Prefetched>,
    /// Counts the round's re-checks took after the read: fresher than its own.
    refreshed: foldhash::HashMap<Key, u64>,
}

/// One partition's due question, prepared and counted by the round's first read.
#[derive(Debug)]
struct Prefetched {
    tp: TopicPartition,
    /// The runs of the segments it was prepared from: only a question about the same
    /// records takes it.
    runs: Vec<OffsetRun>,
    ask: KeyAsk,
    /// Per key of `ask`, the read's count; `None` where the plan left the key out.
    counts: Vec<Option<u64>>,
}

/// The strategy, carrying the state it needs: only key matching has any.
#[derive(Debug)]
enum How {
    Offsets,
    Ids,
    /// Boxed: the book is large beside the other strategies' nothing.
    Keys(Box<KeyBook>),
}

impl Checker {
    /// A checker for `strategy` with `batch_size` keys per query; `key_capacity` bounds the
    /// idle keys the key book remembers (key_columns).
    pub fn new(strategy: MatchStrategy, batch_size: usize, key_capacity: usize) -> Self {
        let how = match strategy {
            MatchStrategy::OffsetColumns => How::Offsets,
            MatchStrategy::DocId => How::Ids,
            MatchStrategy::KeyColumns => How::Keys(Box::new(KeyBook::new(key_capacity))),
        };
        Self {
            how,
            limits: Limits::from_batch_size(batch_size),
            round: RoundReads::default(),
        }
    }

    /// The audit's key multiset (key_columns only): fed with every ingested key.
    pub fn book_mut(&mut self) -> Option<&mut KeyBook> {
        match &mut self.how {
            How::Keys(book) => Some(book.as_mut()),
            _ => None,
        }
    }

    /// Hands `ledger`'s stand-in credits (from its last decision, see
    /// `PartitionLedger::take_credited_keys`) to the key book, before any other decision:
    /// an absent record of the same key decided next, on any partition, then stands in for
    /// the dead-lettered record the book confirmed instead of being missing. Without a book
    /// (doc_id, offset_columns) they are dropped: no count lends a row to another record.
    pub fn take_credits(&mut self, ledger: &mut PartitionLedger) {
        let credits = ledger.take_credited_keys();
        if let Some(book) = self.book_mut() {
            for k in &credits {
                book.credit(k);
            }
        }
    }

    /// The audit's key multiset, read-only.
    pub fn book(&self) -> Option<&KeyBook> {
        match &self.how {
            How::Keys(book) => Some(book.as_ref()),
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

    /// key_columns read by time: reads the seconds of every key due this round, on every
    /// partition (`parts`, each partition's due segments), once, and keeps each partition's
    /// question with the read's counts for the partition's own question ([`Self::due`]),
    /// which then reads nothing again: one partition's keys are a partition-th of a
    /// second's rows, so reading per partition read each row once per partition, and past
    /// [`time_scan::SCAN_RATIO`] partitions read nothing at all. The counts are the sink's
    /// at this read, as one batch's are at its query; a re-check later in the round counts
    /// afresh and its count replaces the read's, so that the looks at a key in a round only
    /// ever see the sink later, as partition-by-partition counts did. Keys the plan leaves
    /// out are counted as before, by the partitions' questions. Nothing is decided.
    ///
    /// The questions are prepared here, once ([`KeyAsk::new`]): the partition's question
    /// takes its prepared one when it asks about the same records, where before it prepared
    /// its own and looked each key's count up in a map of the read's (three hash tables of
    /// every due key, 5 % of the daemon's samples on key_columns).
    pub async fn prefetch_due<V: Verifier>(
        &mut self,
        sink: &V,
        parts: &[(TopicPartition, Vec<Segment>)],
        obs: QueryObserver<'_>,
    ) -> Result<(), SinkError> {
        self.round = RoundReads::default();
        let How::Keys(book) = &mut self.how else {
            return Ok(());
        };
        let Some(reads) = book.time_mut() else {
            return Ok(());
        };
        let mut buckets: Vec<Option<Bucket>> = Vec::new();
        let asks: Vec<(&TopicPartition, &[Segment], KeyAsk)> = parts
            .iter()
            .filter(|(_, segs)| !segs.is_empty())
            .map(|(tp, segs)| {
                let (ask, b) = KeyAsk::new_with(segs, |k| reads.column.bucket(k));
                buckets.extend(b);
                (tp, segs.as_slice(), ask)
            })
            .collect();
        // Every partition's distinct keys in one list. A key due on two partitions is
        // listed twice: a read counts a key's rows for each of its places (the plan puts
        // both in one read, as it never splits a second), and each partition's question
        // takes its own.
        let keys: Vec<&Key> = asks.iter().flat_map(|(_, _, a)| a.keys.iter()).collect();
        let plan = time_scan::plan(&buckets, &mut reads.density);
        let mut counts: Vec<Option<u64>> = vec![None; keys.len()];
        if !plan.scans.is_empty() {
            let column = reads.column.clone();
            let counted =
                read_planned(sink, &column, &plan, &keys, &mut reads.density, obs).await?;
            for (i, c) in counted {
                counts[i] = Some(c);
            }
        }
        drop(keys);
        let mut counts = counts.into_iter();
        for (tp, segs, ask) in asks {
            let mine: Vec<Option<u64>> = counts.by_ref().take(ask.keys.len()).collect();
            self.round.asks.push(Prefetched {
                tp: tp.clone(),
                runs: segs.iter().map(|s| s.run).collect(),
                ask,
                counts: mine,
            });
        }
        Ok(())
    }

    /// The round is over: what its first read counted goes ([`Self::prefetch_due`]).
    pub fn end_round(&mut self) {
        self.round = RoundReads::default();
    }

    /// The verification knobs.
    pub fn limits(&self) -> Limits {
        self.limits
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

    /// key_columns: counts the keys of records ingested while their key held claims from
    /// earlier records, up to `max_keys` of them, and caps each key's claims at the rows
    /// found ([`KeyBook::take_refresh`], [`KeyBook::cap_all`]): rows the sink deleted since
    /// those claims were made are seen before the new records are decided. Decides no
    /// record. Returns the claims freed, `None` when the sink was not asked (nothing to
    /// look at, or not key_columns); on error nothing changes and the keys wait for the next
    /// round.
    pub async fn refresh_claims<V: Verifier>(
        &mut self,
        sink: &V,
        max_keys: usize,
        obs: QueryObserver<'_>,
    ) -> Result<Option<u64>, SinkError> {
        let How::Keys(book) = &mut self.how else {
            return Ok(None);
        };
        let mut keys = book.take_refresh(max_keys);
        if keys.is_empty() {
            return Ok(None);
        }
        // Sorted as a due question's keys are (see `KeyAsk::new`): neighbours in the
        // sink's index cost it fewer page visits.
        keys.sort_unstable_by(|a, b| a.sort_prefix().cmp(&b.sort_prefix()).then_with(|| a.cmp(b)));
        let sorted: Vec<&Key> = keys.iter().collect();
        let counts = match count_sorted(sink, &sorted, self.limits, obs).await {
            Ok(counts) => counts,
            Err(e) => {
                book.requeue_refresh(keys);
                return Err(e);
            }
        };
        let asks: Vec<(&Key, u64)> = keys.iter().zip(counts).collect();
        Ok(Some(book.cap_all(&asks).into_iter().sum()))
    }

    /// Keys one round may count for a claim refresh ([`Self::refresh_claims`]): 16 queries'
    /// worth, as a partition's re-checks ([`Self::recheck_budget`]).
    pub fn refresh_budget(&self) -> usize {
        self.limits.batch_size.max(1) * 16
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
            How::Keys(book) => {
                let q = KeyQuestion {
                    round,
                    limits: self.limits,
                    reads: &mut self.round,
                    tp,
                };
                by_keys_in_round(sink, segs, book, q, obs).await
            }
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
            stand_ins: Vec::new(),
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
///
/// One [`KeyAsk`]: prepared, counted, decided.
pub async fn by_keys<V: Verifier>(
    sink: &V,
    segments: &[Segment],
    book: &mut KeyBook,
    round: KeyRound,
    limits: Limits,
    obs: QueryObserver<'_>,
) -> Result<Vec<Verdict>, SinkError> {
    let mut reads = RoundReads::default();
    let tp = TopicPartition::new(String::new(), 0);
    let q = KeyQuestion {
        round,
        limits,
        reads: &mut reads,
        tp: &tp,
    };
    by_keys_in_round(sink, segments, book, q, obs).await
}

/// A key question's place in its round.
struct KeyQuestion<'a> {
    round: KeyRound,
    limits: Limits,
    /// What the round's first read counted ([`Checker::prefetch_due`]).
    reads: &'a mut RoundReads,
    /// The partition asking: a due question takes the one the round's read prepared for it.
    tp: &'a TopicPartition,
}

/// [`by_keys`] within a round: a due question about the records the round's first read
/// prepared it for takes that question and its counts; a re-check's counts replace the
/// read's for the rest of the round.
async fn by_keys_in_round<V: Verifier>(
    sink: &V,
    segments: &[Segment],
    book: &mut KeyBook,
    q: KeyQuestion<'_>,
    obs: QueryObserver<'_>,
) -> Result<Vec<Verdict>, SinkError> {
    let KeyQuestion {
        round,
        limits,
        reads: prefetched,
        tp,
    } = q;
    let taken = match round {
        KeyRound::Due => prefetched.take(tp, segments),
        KeyRound::Recheck => None,
    };
    let fresh = taken.is_none();
    let (ask, counted) = match taken {
        Some(p) => (p.ask, Some(p.counts)),
        None => (KeyAsk::new(segments), None),
    };
    // Due keys are read by time where the sink keeps its rows so (`time_scan`); re-checks
    // ask after a few missing keys scattered over the past, which no read of seconds serves.
    let (counts, read) = match (round, book.time_mut()) {
        (KeyRound::Due, Some(reads)) => {
            let (counts, read) = ask
                .count_by_time(sink, reads, counted, &prefetched.refreshed, limits, obs)
                .await?;
            // Counted afresh while prepared questions wait (a question about other records
            // than the read prepared for): later partitions defer to these counts as to a
            // re-check's, so no key is decided on an older count than one already seen.
            if fresh {
                prefetched.saw(&ask.keys, &counts);
            }
            (counts, read)
        }
        (KeyRound::Recheck, Some(_)) => {
            let counts = ask.count(sink, limits, obs).await?;
            // A re-check counts afresh; a key the round's read counted takes the fresher
            // count for the rest of the round. Deciding a due record on the read's older
            // count after a re-check saw more rows would let the book give a row the read
            // did not see to the missing record and call the due one lost.
            prefetched.saw(&ask.keys, &counts);
            (counts, 0)
        }
        _ => (ask.count(sink, limits, obs).await?, 0),
    };
    if round == KeyRound::Due {
        let keys = ask.keys.len() as u64;
        book.note_counted(read, keys - read);
    }
    Ok(ask.decide(book, round, &counts))
}

impl RoundReads {
    /// The sink was counted afresh for `keys` (`counts`) after the round's read: while
    /// prepared questions wait, their counts of these keys give way to these.
    fn saw(&mut self, keys: &[Key], counts: &[u64]) {
        if self.asks.is_empty() {
            return;
        }
        for (k, &c) in keys.iter().zip(counts) {
            self.refreshed.insert(k.clone(), c);
        }
    }

    /// The question the round's read prepared for `tp`, if it was about `segments`' records
    /// (the same runs): taken, so that it is used once. One prepared about other records (a
    /// partition that gave records up in between) is dropped; its partition asks afresh.
    fn take(&mut self, tp: &TopicPartition, segments: &[Segment]) -> Option<Prefetched> {
        let i = self.asks.iter().position(|p| &p.tp == tp)?;
        let p = self.asks.swap_remove(i);
        let same =
            p.runs.len() == segments.len() && p.runs.iter().zip(segments).all(|(r, s)| *r == s.run);
        same.then_some(p)
    }
}

/// One key question, prepared from its segments before the sink is asked: the distinct
/// keys in first-seen order and the (segment, offset) slots carrying each in the order
/// given. Holds clones of the keys (one reference count each), so that it can outlive the
/// segments.
#[derive(Debug)]
struct KeyAsk {
    /// Distinct keys, first-seen order.
    keys: Vec<Key>,
    /// `slots[starts[ki]..starts[ki + 1]]` are key `ki`'s (one flat array, not a vector
    /// per key: a round decides up to hundreds of thousands of keys).
    starts: Vec<usize>,
    slots: Vec<(usize, Offset)>,
    /// How many segments the verdicts are for.
    segments: usize,
}

impl KeyAsk {
    /// The question for `segments`' keys.
    pub fn new(segments: &[Segment]) -> Self {
        Self::new_with(segments, |_| ()).0
    }

    /// [`Self::new`], with `per_key` of each distinct key, in the question's key order:
    /// taken as the key is first seen, while its bytes are in the cache (a pass of its
    /// own over a round's keys missed it on each).
    pub fn new_with<T>(segments: &[Segment], mut per_key: impl FnMut(&Key) -> T) -> (Self, Vec<T>) {
        let records: usize = segments.iter().map(|s| s.keys.len()).sum();
        // Sized for every record up front: growing it rehashed every key seen so far, each
        // a read of bytes no longer in the cache (1.8 % of the daemon's samples on a
        // million keys). It is dropped before the sink is asked.
        let mut index: HashMap<&Key, usize> =
            HashMap::with_capacity_and_hasher(records, Default::default());
        let mut keys: Vec<Key> = Vec::new();
        let mut taken: Vec<T> = Vec::new();
        let mut key_of: Vec<usize> = Vec::with_capacity(records);
        for s in segments {
            for k in &s.keys {
                let ki = *index.entry(k).or_insert_with(|| {
                    keys.push(k.clone());
                    taken.push(per_key(k));
                    keys.len() - 1
                });
                key_of.push(ki);
            }
        }
        // Freed before the queries, which hold the round for as long as the sink takes.
        drop(index);
        let mut starts: Vec<usize> = vec![0; keys.len() + 1];
        for &ki in &key_of {
            starts[ki + 1] += 1;
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        let mut slots: Vec<(usize, Offset)> = vec![(0, 0); records];
        let mut fill = starts.clone();
        let mut r = 0;
        for (si, s) in segments.iter().enumerate() {
            for i in 0..s.keys.len() {
                let ki = key_of[r];
                slots[fill[ki]] = (si, s.run.first + i as Offset);
                fill[ki] += 1;
                r += 1;
            }
        }
        drop((key_of, fill));
        let ask = Self {
            keys,
            starts,
            slots,
            segments: segments.len(),
        };
        (ask, taken)
    }

    /// Key indices `which` in the order the sink is asked about them. Keys are asked in
    /// sorted order: a batch of keys that lie near each other in the sink's key index costs
    /// the sink fewer page visits (+16–24 % on MariaDB against the same keys in arrival
    /// order, which for a DNS log is time order, scattered over an index that starts with
    /// client_ip). Each key's count is its own, so the order changes no verdict. (On each
    /// key's `sort_prefix` first: the same order, fewer visits to the keys.) Sorted only
    /// for the keys asked by key: a round that reads its keys by time sorts none.
    fn asking_order(&self, which: impl Iterator<Item = usize>) -> Vec<usize> {
        let mut order: Vec<(u128, usize)> =
            which.map(|ki| (self.keys[ki].sort_prefix(), ki)).collect();
        order.sort_unstable_by(|a, b| {
            a.0.cmp(&b.0)
                .then_with(|| self.keys[a.1].cmp(&self.keys[b.1]))
        });
        order.into_iter().map(|(_, ki)| ki).collect()
    }

    /// The sink's row count of every key, in first-seen order. Batches are counted
    /// `parallelism` at a time (the sink's pool), answers kept in batch order; nothing is
    /// decided here, so the verdicts cannot depend on which query came back first.
    pub async fn count<V: Verifier>(
        &self,
        sink: &V,
        limits: Limits,
        obs: QueryObserver<'_>,
    ) -> Result<Vec<u64>, SinkError> {
        let order = self.asking_order(0..self.keys.len());
        let sorted: Vec<&Key> = order.iter().map(|&ki| &self.keys[ki]).collect();
        let answers = count_sorted(sink, &sorted, limits, obs).await?;
        let mut counts: Vec<u64> = vec![0; self.keys.len()];
        for (&ki, rows) in order.iter().zip(answers) {
            counts[ki] = rows;
        }
        Ok(counts)
    }

    /// [`Self::count`] where the audit reads by time: keys this round's first read counted
    /// (`counted`, per key, from [`Checker::prefetch_due`]) take its counts, or a re-check's
    /// fresher one (`refreshed`); the keys of the plan's reads are counted from the rows of
    /// their seconds ([`read_planned`]), and the rest by key, in the asking order. Nothing
    /// is decided here. Returns the counts and how many keys were counted by time.
    pub async fn count_by_time<V: Verifier>(
        &self,
        sink: &V,
        reads: &mut TimeReads,
        counted: Option<Vec<Option<u64>>>,
        refreshed: &foldhash::HashMap<Key, u64>,
        limits: Limits,
        obs: QueryObserver<'_>,
    ) -> Result<(Vec<u64>, u64), SinkError> {
        let n = self.keys.len();
        let mut counts: Vec<u64> = vec![0; n];
        let mut done: Vec<bool> = vec![false; n];
        let mut by_time = 0u64;
        for (i, c) in counted.into_iter().flatten().enumerate().take(n) {
            let Some(c) = c else { continue };
            counts[i] = if refreshed.is_empty() {
                c
            } else {
                refreshed.get(&self.keys[i]).copied().unwrap_or(c)
            };
            done[i] = true;
            by_time += 1;
        }
        let open: Vec<usize> = (0..n).filter(|&i| !done[i]).collect();
        let buckets: Vec<Option<Bucket>> = open
            .iter()
            .map(|&i| reads.column.bucket(&self.keys[i]))
            .collect();
        let plan = time_scan::plan(&buckets, &mut reads.density);
        let keys: Vec<&Key> = open.iter().map(|&i| &self.keys[i]).collect();
        let column = reads.column.clone();
        let read = read_planned(sink, &column, &plan, &keys, &mut reads.density, obs).await?;
        for (j, c) in read {
            counts[open[j]] = c;
            done[open[j]] = true;
            by_time += 1;
        }
        let sorted: Vec<usize> = self.asking_order((0..n).filter(|&i| !done[i]));
        tracing::debug!(
            keys = n,
            by_time,
            reads = plan.scans.len(),
            by_key = sorted.len(),
            "due keys counted"
        );
        if !sorted.is_empty() {
            let keys: Vec<&Key> = sorted.iter().map(|&i| &self.keys[i]).collect();
            let answers = count_sorted(sink, &keys, limits, obs).await?;
            for (&i, c) in sorted.iter().zip(answers) {
                counts[i] = c;
            }
        }
        Ok((counts, by_time))
    }

    /// Decides every key with its row count (`counts`, from [`Self::count`]) in one call,
    /// in the book's own order (see [`KeyBook::decide_due_all`]), and updates the book.
    /// One verdict per segment.
    ///
    /// Counts of another question (a length that does not match) decide nothing: every
    /// verdict is Unknown and the book is unchanged.
    pub fn decide(&self, book: &mut KeyBook, round: KeyRound, counts: &[u64]) -> Vec<Verdict> {
        if counts.len() != self.keys.len() {
            debug_assert!(
                false,
                "{} counts for {} keys",
                counts.len(),
                self.keys.len()
            );
            return vec![Verdict::Unknown; self.segments];
        }
        let mut present: Vec<Vec<OffsetRun>> = vec![Vec::new(); self.segments];
        let mut shared: Vec<Vec<OffsetRun>> = vec![Vec::new(); self.segments];
        let mut lent: Vec<Vec<OffsetRun>> = vec![Vec::new(); self.segments];
        let mut dups: Vec<u64> = vec![0; self.segments];
        let asks: Vec<(&Key, u64, u64)> = self
            .keys
            .iter()
            .enumerate()
            .map(|(ki, k)| {
                let records = (self.starts[ki + 1] - self.starts[ki]) as u64;
                (k, records, counts[ki])
            })
            .collect();
        // (found, duplicates, shared, stand-in credits lent) per key.
        let outcomes: Vec<(u64, u64, bool, u64)> = match round {
            KeyRound::Due => book
                .decide_due_all(&asks)
                .into_iter()
                .map(|o| (o.confirmed, o.duplicates, o.shared, o.stand_ins))
                .collect(),
            KeyRound::Recheck => book
                .recheck_all(&asks)
                .into_iter()
                .map(|o| (o.late, o.duplicates, false, o.stand_ins))
                .collect(),
        };
        drop(asks);
        for (ki, &(found, duplicates, is_shared, stand_ins)) in outcomes.iter().enumerate() {
            let slots = &self.slots[self.starts[ki]..self.starts[ki + 1]];
            for (i, &(si, o)) in slots.iter().enumerate() {
                let i = i as u64;
                if i < found {
                    present[si].push(OffsetRun::new(o, o));
                    continue;
                }
                if i < found + stand_ins {
                    lent[si].push(OffsetRun::new(o, o));
                }
                if is_shared {
                    shared[si].push(OffsetRun::new(o, o));
                }
            }
            if let Some(&(si, _)) = slots.first() {
                dups[si] += duplicates;
            }
        }
        present
            .into_iter()
            .zip(dups)
            .zip(shared)
            .zip(lent)
            .map(|(((p, d), sh), l)| Verdict::Known {
                present: runs::normalize(p),
                duplicate_rows: d,
                shared_keys: runs::normalize(sh),
                stand_ins: runs::normalize(l),
            })
            .collect()
    }
}

/// Row counts of distinct `sorted` keys, in their order: batches counted `parallelism` at a
/// time (the sink's pool), answers kept in batch order.
async fn count_sorted<V: Verifier>(
    sink: &V,
    sorted: &[&Key],
    limits: Limits,
    obs: QueryObserver<'_>,
) -> Result<Vec<u64>, SinkError> {
    let batches = key_batches(sorted, limits, sink.max_key_rows());
    let mut asked = Vec::with_capacity(batches.len());
    for batch in &batches {
        asked.push(count_batch(sink, batch, obs));
    }
    let answers: Vec<Vec<u64>> = stream::iter(asked)
        .buffered(sink.parallelism().max(1))
        .try_collect()
        .await?;
    Ok(answers.into_iter().flatten().collect())
}

/// The reads of `plan` (over `keys`, its indices), `parallelism` at a time: `(index,
/// count)` of every key a read counted. A read over its limit counts none of its keys;
/// its seconds, and those of a read that failed, are `density`'s crowded ones from then on
/// (counted by key). Any failed read fails the question, as a key count would.
async fn read_planned<V: Verifier>(
    sink: &V,
    column: &TimeColumn,
    plan: &Plan,
    keys: &[&Key],
    density: &mut Density,
    obs: QueryObserver<'_>,
) -> Result<Vec<(usize, u64)>, SinkError> {
    // The futures in a vector first, as `count_sorted` does: a lazy map over the scans
    // made the round's future not `Send` for every lifetime (a rustc limitation).
    let mut reads = Vec::with_capacity(plan.scans.len());
    for scan in &plan.scans {
        let asked: Vec<&Key> = scan.keys.iter().map(|&i| keys[i]).collect();
        reads.push(read_by_time(sink, column, scan, asked, obs));
    }
    let results: Vec<Result<Option<Vec<u64>>, SinkError>> = stream::iter(reads)
        .buffered(sink.parallelism().max(1))
        .collect()
        .await;
    let mut failed = None;
    let mut out = Vec::new();
    for (scan, r) in plan.scans.iter().zip(results) {
        match r {
            Ok(Some(c)) if c.len() == scan.keys.len() => {
                out.extend(scan.keys.iter().copied().zip(c));
            }
            Ok(Some(c)) => {
                failed.get_or_insert(SinkError::Rejected(format!(
                    "sink answered {} counts for {} keys read by time",
                    c.len(),
                    scan.keys.len()
                )));
            }
            // Over its limit, or failed (a timeout: the seconds hold more than one read
            // takes): not asked again.
            Ok(None) | Err(_) => {
                for &range in &scan.ranges {
                    density.crowded(range);
                }
                if let Err(e) = r {
                    failed.get_or_insert(e);
                }
            }
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// One read by time ([`Verifier::count_keys_in_time`]) of `scan`'s ranges for its `keys`.
async fn read_by_time<V: Verifier>(
    sink: &V,
    column: &TimeColumn,
    scan: &time_scan::Scan,
    keys: Vec<&Key>,
    obs: QueryObserver<'_>,
) -> Result<Option<Vec<u64>>, SinkError> {
    observed(
        obs,
        sink.count_keys_in_time(column, &scan.ranges, &keys, scan.limit()),
    )
    .await
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
    let mut index: HashMap<&Key, usize> = HashMap::default();
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
                stand_ins: Vec::new(),
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
        // Σ (value length × 2 + 16) over the values, from the packed bytes (value bytes
        // and one terminator each).
        let (values, empty) = k.value_counts();
        let size = (k.as_bytes().len() - values) * 2 + values * 16;
        let weight = crate::sink::sql::derived_rows_for(empty);
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
mod tests;
