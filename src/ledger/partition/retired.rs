//! Retired gaps (issue 41 item 1): a gap whose missing runs were all given up can never
//! change again through a verdict (nothing in it is re-checked), so it leaves the ledger's
//! memory. Its store row is final and exact; the ledger keeps only [`RetiredGaps`], an
//! aggregate that answers the gauges, `missing`, completeness and the log-start watch as the
//! gaps themselves did. What only the store can answer (the log start passing some of them,
//! an acknowledgement of one, a log that diverged under them) is asked of the store by the
//! audit ([`RetiredWork`]), which then hands the recounted aggregate back
//! ([`PartitionLedger::retired_recounted`]).
//!
//! A dead_lettered gap (nothing missing, some records dead-lettered) retires as soon as no
//! dead-lettered record can join it any more (it is not the dead-letter tail): it can no
//! longer change either, and it blocks completeness until acknowledged, so the aggregate
//! must keep it (review of issue 37: it used to be forgotten, and completeness with it).
//!
//! Never retired: the tail gap (the next missing record extends it), the dead-letter tail
//! gap, a range Kafka deleted unread that the sink has not settled yet (`unsettled`), a gap
//! still holding a missing run, and a gap with nothing unconfirmed (late: it is forgotten).

use super::{GapRecord, PartitionLedger, min_opt};
use crate::types::Offset;
use std::collections::BTreeMap;

/// The gaps that left memory, and what the store must do for them.
#[derive(Debug, Clone, Default)]
pub(super) struct Retirement {
    /// The gaps that left memory, as an aggregate.
    pub(super) aggregate: RetiredGaps,
    /// What the store must do for the retired gaps (see
    /// [`PartitionLedger::retired_work`]).
    pub(super) work: RetiredWork,
}
use crate::completeness::{BlockingGap, MAX_LISTED_GAPS, Since};
use crate::gap::GapState;

/// What a partition's retired gaps add to the ledger's answers. Additions are exact in
/// memory; anything that takes from it is recounted from the store. Handed over with a
/// partition's state (record format 3), so the next owner answers at once.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RetiredGaps {
    /// Retired gaps with records missing or dead-lettered (each blocks completeness:
    /// [`GapRecord::unconfirmed`]).
    pub gaps: u64,
    /// Those of them in state `dead_lettered` (not open, nothing missing).
    pub dead_lettered: u64,
    /// Their missing records, over the gaps whose size is known (as [`PartitionLedger::missing`]);
    /// dead-lettered records are not missing.
    pub missing_known: u64,
    /// Those the gauges count open (state `open` or `unrecoverable`), and their missing records.
    pub open: u64,
    /// See [`Self::open`].
    pub open_missing: u64,
    /// Earliest time Kafka was seen deleting the first record of an open one (unix ms).
    pub deleted_ms: Option<i64>,
    /// Oldest record timestamp among the open ones Kafka has not deleted.
    pub oldest_undeleted_ts: Option<i64>,
    /// Open ones Kafka has not deleted without any record timestamp.
    pub undeleted_without_ts: u64,
    /// Lowest first offset among the open ones Kafka has not deleted: a log start beyond it
    /// makes some of them unrecoverable.
    pub undeleted_first: Option<Offset>,
    /// The earliest by (record time, first offset), at most [`MAX_LISTED_GAPS`]: what
    /// completeness lists of them.
    pub earliest: Vec<BlockingGap>,
}

impl RetiredGaps {
    /// The aggregate of `rows`, counted as the store counts its retired rows (the tests'
    /// model of the store; `crate::store` counts with SQL).
    pub fn count<'a>(rows: impl IntoIterator<Item = &'a GapRecord>) -> RetiredGaps {
        let mut out = RetiredGaps::default();
        for g in rows.into_iter().filter(|g| g.unconfirmed()) {
            out.add(&blocking_of(g), g.size_known, g.deleted_ms);
        }
        out
    }

    /// What `op` does to the retired rows `rows` (the tests' model of the store, as
    /// `Store::settle_retired` does it with SQL).
    pub fn apply(op: RetiredOp, rows: &mut BTreeMap<Offset, GapRecord>) {
        let open = |g: &GapRecord| g.missing > 0 && blocking_of(g).state == GapState::Open;
        match op {
            RetiredOp::Deleted { below, at_ms } => {
                for g in rows.range_mut(..below).map(|(_, g)| g) {
                    if open(g) {
                        g.deleted_ms = Some(at_ms);
                    }
                }
            }
            RetiredOp::Gone { from, .. } => {
                rows.retain(|f, _| *f < from);
            }
        }
    }

    /// Adds one gap (as the store reports it: `state`; `missing` as `missing_records`).
    pub fn add(&mut self, g: &BlockingGap, size_known: bool, deleted_ms: Option<i64>) {
        self.gaps += 1;
        if g.state == GapState::DeadLettered {
            self.dead_lettered += 1;
        } else if size_known {
            self.missing_known += g.missing;
        }
        if matches!(g.state, GapState::Open | GapState::Unrecoverable) {
            self.open += 1;
            self.open_missing += g.missing;
            match (g.state, deleted_ms) {
                (GapState::Unrecoverable, d) => self.deleted_ms = min_opt(self.deleted_ms, d),
                _ => {
                    match g.since {
                        Since::At(ts) => {
                            self.oldest_undeleted_ts = min_opt(self.oldest_undeleted_ts, Some(ts))
                        }
                        Since::Unknown => self.undeleted_without_ts += 1,
                    }
                    self.undeleted_first =
                        Some(self.undeleted_first.map_or(g.first, |f| f.min(g.first)));
                }
            }
        }
        self.list(g.clone());
    }

    /// Both aggregates counted together (gaps in both count twice): what an import resumed
    /// after a stop counts until it ends, the handed-over aggregate and the store's rows
    /// (some of them imported already), never less than either.
    pub fn merged(&self, other: &RetiredGaps) -> RetiredGaps {
        let mut out = RetiredGaps {
            gaps: self.gaps + other.gaps,
            dead_lettered: self.dead_lettered + other.dead_lettered,
            missing_known: self.missing_known + other.missing_known,
            open: self.open + other.open,
            open_missing: self.open_missing + other.open_missing,
            deleted_ms: min_opt(self.deleted_ms, other.deleted_ms),
            oldest_undeleted_ts: min_opt(self.oldest_undeleted_ts, other.oldest_undeleted_ts),
            undeleted_without_ts: self.undeleted_without_ts + other.undeleted_without_ts,
            undeleted_first: min_opt(self.undeleted_first, other.undeleted_first),
            earliest: self.earliest.clone(),
        };
        for g in &other.earliest {
            out.list(g.clone());
        }
        out
    }

    /// Keeps `g` among the earliest listed when it is one of them.
    pub fn list(&mut self, g: BlockingGap) {
        let key = |b: &BlockingGap| (b.since, b.first);
        if self.earliest.len() == MAX_LISTED_GAPS
            && self.earliest.last().is_some_and(|l| key(l) <= key(&g))
        {
            return;
        }
        let at = self.earliest.partition_point(|x| key(x) <= key(&g));
        self.earliest.insert(at, g);
        self.earliest.truncate(MAX_LISTED_GAPS);
    }
}

/// A change to retired gaps only the store can make (their rows are there, not here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetiredOp {
    /// Kafka's log start passed `below`: retired `open` gaps starting below it are
    /// unrecoverable since `at_ms` (as `log_start_moved` marks the gaps in memory).
    Deleted {
        /// The new log start.
        below: Offset,
        /// When it was seen (unix ms).
        at_ms: i64,
    },
    /// The log diverged at `from` (truncated there, or recreated: `Offset::MIN`): retired
    /// gaps from it on are no longer followed; `open` ones are unrecoverable since `at_ms`,
    /// as the gaps the diverged ledger took out are reported.
    Gone {
        /// The divergence point.
        from: Offset,
        /// When it was seen (unix ms).
        at_ms: i64,
    },
}

/// What the audit must do in the store for a partition's retired gaps: the operations, in
/// order, then a recount of the aggregate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetiredWork {
    /// Store changes, in order.
    pub ops: Vec<RetiredOp>,
    /// The aggregate must be read again from the store (after `ops`).
    pub recount: bool,
}

impl RetiredWork {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty() && !self.recount
    }
}

impl PartitionLedger {
    /// The aggregate of the retired gaps.
    pub fn retired(&self) -> &RetiredGaps {
        &self.retirement.aggregate
    }

    /// Gaps retired since the last [`Self::stored`]: the store marks their rows retired with
    /// the write that deletes their ledger items (and a lost write writes them again).
    pub fn retired_unstored(&self) -> &[GapRecord] {
        &self.unstored.retired
    }

    /// What the store must do for the retired gaps, once it holds every retirement
    /// ([`Self::retired_unstored`] empty): `None` when nothing. A diverged log's rows are let
    /// go at once (only [`RetiredOp::Gone`] to do): it touches rows from the divergence point
    /// on, and no retirement waiting for the write lies there (see
    /// [`Self::inherit_unstored`]), so the store lets them go while it still says the log
    /// diverged.
    pub fn retired_work(&self) -> Option<&RetiredWork> {
        let only_gone = self
            .retirement
            .work
            .ops
            .iter()
            .all(|op| matches!(op, RetiredOp::Gone { .. }));
        (!self.retirement.work.is_empty() && (self.unstored.retired.is_empty() || only_gone))
            .then_some(&self.retirement.work)
    }

    /// The partition was taken over with the aggregate `handed` of its previous owner's
    /// retired gaps (handover record format 3), whose rows reach this store only later
    /// (imported from the handover's side topic): the aggregate is that one, not a count of
    /// this store, until the import ends and calls [`Self::retired_changed`]. The caller
    /// keeps the store's recount from running meanwhile.
    pub fn retired_handed_over(&mut self, handed: RetiredGaps) {
        let mut agg = handed;
        for g in &self.unstored.retired {
            agg.add(&blocking_of(g), g.size_known, g.deleted_ms);
        }
        self.retirement.work.recount = false;
        if agg != self.retirement.aggregate {
            self.retirement.aggregate = agg;
            self.unstored.changed();
        }
    }

    /// Something changed retired gaps in the store (an acknowledgement of one): the
    /// aggregate is read again.
    pub fn retired_changed(&mut self) {
        if self.retirement.aggregate.gaps > 0 {
            self.retirement.work.recount = true;
        }
    }

    /// Rows were added to this partition's retired gaps in the store (a merge of another
    /// owner's, see the audit's `retired_flow`): the aggregate is read again, even when it
    /// counted none before.
    pub fn retired_recount(&mut self) {
        self.retirement.work.recount = true;
    }

    /// The store did `done` (a prefix of [`Self::retired_work`]'s operations) and counted the
    /// retired gaps it marks: `counted`.
    pub fn retired_recounted(&mut self, done: usize, counted: RetiredGaps) {
        let ops = &mut self.retirement.work.ops;
        ops.drain(..done.min(ops.len()));
        self.retirement.work.recount = !self.retirement.work.ops.is_empty();
        // Retirements the store does not mark yet count on top (none after a write).
        let mut agg = counted;
        for g in std::mem::take(&mut self.unstored.retired) {
            agg.add(&blocking_of(&g), g.size_known, g.deleted_ms);
            self.unstored.retired.push(g);
        }
        if agg != self.retirement.aggregate {
            self.retirement.aggregate = agg;
            self.unstored.changed();
        }
    }

    /// Retires the gaps among `candidates` that are done (see the module doc).
    pub(super) fn retire_done(&mut self, candidates: impl IntoIterator<Item = Offset>) {
        for f in candidates {
            let Some(g) = self.gaps.by_first.get(&f) else {
                continue;
            };
            let done = Some(f) != self.gaps.tail
                && Some(f) != self.fold.overflow
                && Some(f) != self.gaps.dead_tail
                && !g.unsettled
                && g.unconfirmed()
                && !self
                    .missing
                    .runs
                    .range(g.first..=g.last)
                    .any(|(_, m)| m.gap == f);
            if !done {
                continue;
            }
            let Some(g) = self.gaps.by_first.remove(&f) else {
                continue;
            };
            if g.size_known {
                self.missing.count = self.missing.count.saturating_sub(g.missing);
            }
            self.retirement
                .aggregate
                .add(&blocking_of(&g), g.size_known, g.deleted_ms);
            self.gaps.dirty.remove(&f);
            self.unstored.gap(f);
            self.unstored.retired.push(g);
            self.unstored.changed();
        }
    }

    /// The log start moved to `log_start` at `now_ms`: retired gaps it passed are made
    /// unrecoverable by the store. Returns whether any is concerned.
    pub(super) fn retired_log_start(&mut self, log_start: Offset, now_ms: i64) -> bool {
        let passed = self
            .retirement
            .aggregate
            .undeleted_first
            .is_some_and(|f| f < log_start)
            || self
                .unstored
                .retired
                .iter()
                .any(|g| g.first < log_start && g.deleted_ms.is_none());
        if passed {
            // At least the open retired gap at `undeleted_first` is unrecoverable now: the
            // aggregate says so at once (the countdown reaches 0), also while the store's
            // recount waits (a partition importing a previous owner's retired gaps, review
            // item 4); the recount after the operation gives the same earliest time.
            if self
                .retirement
                .aggregate
                .undeleted_first
                .is_some_and(|f| f < log_start)
                && self
                    .retirement
                    .aggregate
                    .deleted_ms
                    .is_none_or(|d| d > now_ms)
            {
                self.retirement.aggregate.deleted_ms = Some(now_ms);
                self.unstored.changed();
            }
            self.retirement.work.ops.push(RetiredOp::Deleted {
                below: log_start,
                at_ms: now_ms,
            });
            self.retirement.work.recount = true;
        }
        passed
    }

    /// This ledger replaces `old` (the same partition, its log diverged at `cut`:
    /// `Offset::MIN` for a recreated topic): the store marks and deletions `old` had not
    /// written yet are this ledger's to write, so a gap it retired or folded just before is
    /// neither lost nor counted twice. Its retired gaps from `cut` on are not retired but
    /// gone, as the gaps the cut took out: returned, for the caller to report them so.
    pub fn inherit_unstored(&mut self, old: &mut PartitionLedger, cut: Offset) -> Vec<GapRecord> {
        let mut gone = Vec::new();
        for g in std::mem::take(&mut old.unstored.retired) {
            if g.first >= cut {
                gone.push(g);
                continue;
            }
            self.retirement
                .aggregate
                .add(&blocking_of(&g), g.size_known, g.deleted_ms);
            self.unstored.retired.push(g);
            self.unstored.changed();
        }
        self.unstored.folded.append(&mut old.unstored.folded);
        gone
    }

    /// The ledger resumes on a log that diverged at `from`: the retired gaps from there on
    /// are no longer followed (see [`RetiredOp::Gone`]).
    pub fn retired_gone(&mut self, from: Offset, now_ms: i64) {
        self.retirement.work.ops.push(RetiredOp::Gone {
            from,
            at_ms: now_ms,
        });
        self.retirement.work.recount = true;
    }
}

/// A gap as completeness lists it (as its store row says: `missing_records`, `state`).
fn blocking_of(g: &GapRecord) -> BlockingGap {
    let nowhere = crate::types::TopicPartition::new(String::new(), 0);
    let gap = g.to_gap("", &nowhere);
    BlockingGap {
        first: g.first,
        since: Since::of(g.min_ts),
        missing: gap.missing_records,
        state: gap.state,
        epoch: g.epoch,
    }
}
