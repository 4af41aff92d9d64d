//! The ledger of one partition: what the auditor has read, what it still has to verify, what
//! is missing, and which gaps that makes. Pure: no clock (callers pass `now_ms`), no I/O.
//!
//! Offsets below `next_offset` are all *observed*. Each observed offset is exactly one of:
//! - a hole (no record: transaction marker, aborted record, compaction) — never expected;
//! - filtered (a record the pipeline is not supposed to write) — never expected;
//! - pending (expected, not yet decided), kept in `pending` as runs in offset order;
//! - confirmed (found in the sink) — forgotten once decided;
//! - missing (due and absent) — kept in `missing` as runs, each inside exactly one gap.
//!
//! Decisions are applied strictly in offset order on a prefix of `pending`, so "no confirmed
//! expected record between two missing ones" (the gap definition) reduces to remembering
//! whether the last decided record was missing (`tail_gap`).

use super::due::{CommitStep, Frontier, PipelineCommits};
use super::runs::{self, OffsetRun};
use crate::gap::{GapCause, Offset};
use crate::record::Key;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A pending run is extended by a new record only while it is younger than this, so that the
/// time-only due rule (which uses the run's LAST seen time, the conservative choice) never
/// delays a record by more than this much.
const RUN_SEEN_SPAN_MS: i64 = 1_000;

/// Most keys one merged missing run carries (see `declare_missing`): it bounds what a round
/// rewrites when the run changes.
const MERGED_KEYS_MAX: usize = 4096;

/// What the decoder said about one consumed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Observed {
    /// The pipeline should write it; `key` is set for the `key_columns` strategy.
    Expected {
        /// Match key (key_columns only).
        key: Option<Key>,
    },
    /// Not expected in the sink.
    Filtered,
}

/// Contiguous expected offsets read close together in time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PendingRun {
    run: OffsetRun,
    first_seen_ms: i64,
    last_seen_ms: i64,
    min_ts: Option<i64>,
    max_ts: Option<i64>,
    /// One key per offset when keyed; empty otherwise.
    keys: Vec<Key>,
}

impl PendingRun {
    /// Splits off offsets `>= at` into a new run (keys follow their offsets). Timestamps are
    /// inherited by both halves as bounds: they are exact only for unsplit runs.
    fn split_off(&mut self, at: Offset) -> PendingRun {
        debug_assert!(self.run.first < at && at <= self.run.last);
        let keys = if self.keys.is_empty() {
            Vec::new()
        } else {
            self.keys.split_off((at - self.run.first) as usize)
        };
        let right = PendingRun {
            run: OffsetRun::new(at, self.run.last),
            keys,
            ..self.clone()
        };
        self.run.last = at - 1;
        right
    }
}

/// A run of missing records awaiting re-checks (late arrival) or given up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissingRun {
    /// The offsets.
    pub run: OffsetRun,
    /// First offset of the gap the run belongs to.
    pub gap: Offset,
    /// When these records were declared missing (unix ms).
    pub detected_ms: i64,
    /// Keys per offset (key_columns / doc_id).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<Key>,
    /// Read only: versions before 6 kept given-up runs (now they leave the ledger; their
    /// timestamps, which nothing read, are no longer kept either: 500,000 runs, 16 MB).
    #[serde(default, skip_serializing)]
    pub given_up: bool,
}

impl MissingRun {
    fn key_of(&self, o: Offset) -> Option<&Key> {
        self.keys.get((o - self.run.first) as usize)
    }

    fn sub(&self, r: OffsetRun) -> MissingRun {
        let keys = if self.keys.is_empty() {
            Vec::new()
        } else {
            let a = (r.first - self.run.first) as usize;
            let b = (r.last - self.run.first) as usize + 1;
            self.keys.get(a..b).map(<[Key]>::to_vec).unwrap_or_default()
        };
        MissingRun {
            run: r,
            keys,
            ..self.clone()
        }
    }
}

/// The ledger's view of one gap (the audit turns it into a [`crate::gap::Gap`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GapRecord {
    /// First offset at detection: the gap's identity.
    pub first: Offset,
    /// Last offset (grows while the gap is extended).
    pub last: Offset,
    /// Records still missing.
    pub missing: u64,
    /// Whether `missing` is exact (false: Kafka deleted the records before they were read).
    pub size_known: bool,
    /// Record timestamp bounds (unix ms).
    pub min_ts: Option<i64>,
    /// Record timestamp bounds (unix ms).
    pub max_ts: Option<i64>,
    /// When first detected (unix ms).
    pub detected_ms: i64,
    /// Why the records went missing.
    #[serde(default)]
    pub cause: GapCause,
    /// The pipeline commit step that passed over the gap's first record.
    #[serde(default)]
    pub commit: Option<CommitStep>,
    /// When the auditor saw Kafka's log start pass the gap's first offset (unix ms): its
    /// records can no longer be replayed.
    #[serde(default)]
    pub deleted_ms: Option<i64>,
    /// A range Kafka deleted unread, not yet asked about: the sink may still settle it
    /// (offset_columns counts its offsets; SPEC guarantee 8). Until then nothing about it is
    /// counted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unsettled: bool,
    /// Some missing record of the gap carries a key other records share (key_columns).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shared_key: bool,
    /// Set on the first report of a new gap only (not persisted).
    #[serde(skip)]
    pub is_new: bool,
}

impl GapRecord {
    /// The gap as reported (API, store, CLI). `unrecoverable_at` is when the log start was
    /// seen passing it; callers that know the topic's retention fill in the deadline.
    pub fn to_gap(&self, audit: &str, tp: &crate::gap::TopicPartition) -> crate::gap::Gap {
        use crate::gap::{Gap, GapState};
        use chrono::{TimeZone, Utc};
        let time = |ms: i64| Utc.timestamp_millis_opt(ms).single();
        Gap {
            id: Gap::make_id(audit, &tp.topic, tp.partition, self.first),
            audit: audit.to_string(),
            topic: tp.topic.clone(),
            partition: tp.partition,
            first_offset: self.first,
            last_offset: self.last,
            missing_records: self.missing,
            size_known: self.size_known,
            first_timestamp: self.min_ts.and_then(time),
            last_timestamp: self.max_ts.and_then(time),
            detected_at: time(self.detected_ms).unwrap_or_else(Utc::now),
            state: if self.missing == 0
                && (self.size_known || self.cause == crate::gap::GapCause::DeletedUnread)
            {
                GapState::Late
            } else if !self.size_known && self.cause == crate::gap::GapCause::DeletedUnread {
                GapState::Unverifiable
            } else if self.deleted_ms.is_some() {
                GapState::Unrecoverable
            } else {
                GapState::Open
            },
            unrecoverable_at: self.deleted_ms.and_then(time),
            ack_reason: None,
            cause: self.cause,
            pipeline_commit_from: self.commit.map(|c| c.from),
            pipeline_commit_to: self.commit.map(|c| c.to),
            pipeline_commit_at: self.commit.and_then(|c| time(c.at_ms)),
            shared_key: self.shared_key,
        }
    }
}

/// The sink's answer about one due segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The sink could not be asked (error, timeout): nothing is decided.
    Unknown,
    /// The offsets of the segment found in the sink, and extra rows beyond one per offset.
    Known {
        /// Present offsets (normalized runs inside the segment).
        present: Vec<OffsetRun>,
        /// Rows beyond the first per present offset.
        duplicate_rows: u64,
        /// Absent offsets whose key other records share (key_columns): the gap says so,
        /// since the sink cannot tell which record of the key is the absent one.
        shared_keys: Vec<OffsetRun>,
    },
}

/// A due segment handed to the verifier: contiguous expected offsets (+ keys when keyed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// The offsets.
    pub run: OffsetRun,
    /// One key per offset (key_columns), else empty.
    pub keys: Vec<Key>,
    /// Record timestamp bounds, for the visibility histogram.
    pub max_ts: Option<i64>,
}

/// Counts produced by applying verdicts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    /// Records found on time.
    pub confirmed: u64,
    /// Records newly declared missing.
    pub lost: u64,
    /// Missing records found later.
    pub late: u64,
    /// Extra rows seen.
    pub duplicates: u64,
    /// Records Kafka deleted before they could be checked (never counted as lost).
    pub unverifiable: u64,
    /// (record max timestamp, count) of confirmed runs, for the visibility histogram.
    pub confirmed_ts: Vec<(Option<i64>, u64)>,
}

impl Applied {
    fn add(&mut self, other: Applied) {
        self.confirmed += other.confirmed;
        self.lost += other.lost;
        self.unverifiable += other.unverifiable;
        self.late += other.late;
        self.duplicates += other.duplicates;
        self.confirmed_ts.extend(other.confirmed_ts);
    }
}

/// What survives a restart: the decided-but-unresolved part of the ledger. Pending records
/// are not persisted: they lie at or above the settled watermark and are read again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Missing runs.
    #[serde(default)]
    pub missing: Vec<MissingRun>,
    /// Gaps still open, or the tail gap.
    #[serde(default)]
    pub gaps: Vec<GapRecord>,
    /// First offset of the gap the next missing record extends.
    pub tail_gap: Option<Offset>,
}

/// The ledger of one partition.
#[derive(Debug, Clone)]
pub struct PartitionLedger {
    next_offset: Offset,
    keyed: bool,
    pending: VecDeque<PendingRun>,
    pending_count: u64,
    missing: BTreeMap<Offset, MissingRun>,
    missing_count: u64,
    gaps: BTreeMap<Offset, GapRecord>,
    dirty_gaps: std::collections::BTreeSet<Offset>,
    tail_gap: Option<Offset>,
    /// Keys of missing records given up since [`Self::take_released_keys`]: the audit's
    /// key book stops holding claims for them.
    released_keys: Vec<Key>,
    /// Keys of records confirmed since [`Self::stored`] (keyed ledgers): taken back from the
    /// key book if the ledger is dropped before its verdicts reach the store.
    unstored_confirmations: Vec<Key>,
    /// Whether confirmations are tracked at all: only an audit-wide key book (key_columns)
    /// needs them; doc_id ledgers are keyed too and must not clone every confirmed id.
    track_confirmations: bool,
    /// Bumped whenever [`Self::snapshot`] would change, so callers persist only changes.
    revision: u64,
    /// Missing runs and gaps (by first offset) changed since [`Self::stored`]: the next
    /// store write carries only these ([`Self::delta`]), so a round's write does not grow
    /// with the number of gaps.
    unstored_missing: BTreeSet<Offset>,
    unstored_gaps: BTreeSet<Offset>,
    /// A fresh ledger: whatever the store holds for the partition is stale, so the first
    /// write replaces it whole.
    unstored_replace: bool,
    /// offset_columns re-checks: one range count tells whether anything arrived late.
    probe: Option<Probe>,
    /// Confirmed offsets decided beyond the probe's span, not yet inside it: they join the
    /// baseline when a later missing run extends the span over them.
    confirmed_beyond_probe: u64,
    /// Where the next budgeted re-check pass continues (rotation over the missing runs).
    recheck_cursor: Offset,
    /// Where the cursor goes once the last [`Self::rechecks`] is answered (`None` inside:
    /// the rotation passed the last run).
    recheck_next: Option<Option<Offset>>,
    /// The last missing offset when the current rotation started: the rotation ends there,
    /// not at the last run (runs declared since are behind it only if they arrive slower
    /// than the budget; otherwise a rotation, and a look, would never end and the runs it
    /// passed would never be re-checked again). `None`: set by the next [`Self::rechecks`].
    recheck_lap_end: Option<Offset>,
    /// Gauges computed at a revision: idle rounds do not walk every gap.
    gauges: Option<(u64, GapGauges)>,
    /// Keys held by `missing` runs.
    missing_keys: u64,
    /// Map sizes at the last [`Self::compact`].
    compacted_at: usize,
    /// The log start last passed to [`Self::log_start_moved`].
    log_start: Offset,
    /// Gaps that stopped being the tail since [`Self::take_dirty_gaps`]: forgotten there
    /// if nothing in them is missing.
    untailed: Vec<Offset>,
    /// The pipeline group's commits on this partition (due rule input).
    pub pipeline: PipelineCommits,
    // --- Completeness (issue 18); see the block at the end of this file. ---
    /// Newest record timestamp read, and the completeness aggregate cached per change.
    completeness: CompletenessCache,
}

/// The range count that stands for re-checking every missing run of a partition
/// (offset_columns): `baseline` is how many distinct offsets of `span` the sink held at the
/// last full look (kept exact as new missing runs extend the span, from the verdicts that
/// confirmed the records in between). A count that differs means something changed in the
/// span — a late arrival, or rows at offsets the ledger never expected — and only then are
/// the runs re-checked one by one, within a per-round budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// From the first missing offset to the last (grows only, until nothing is missing).
    pub span: OffsetRun,
    /// Distinct offsets present in `span` at the last complete look; `None`: unknown (a
    /// restored ledger), so the first answer starts a look.
    pub baseline: Option<u64>,
    /// A look in progress: the count that started it, which becomes the baseline once the
    /// rotation over the missing runs completes.
    pub look: Option<u64>,
    /// Answers equal to the baseline since the last look (see [`FORCE_LOOK_EVERY`]).
    pub unchanged: u32,
}

/// A look is made after this many probes that matched the baseline, whatever they said: a
/// row deleted from the sink inside the span (an operator's DELETE, a partition dropped by
/// TTL, an upsert moving a key's row) as a missing record lands late leaves the count
/// unchanged, and without this the late arrival would stay reported missing until given
/// up. 720 rounds: an hour at the default 5 s verify_interval, a look's cost spread over
/// its rotation.
pub const FORCE_LOOK_EVERY: u32 = 720;

/// How much one round may re-check on one partition: missing runs (each one OR-ed range of
/// a query) and records (each one key of a query). Exhausted, the next round continues
/// where this one stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecheckBudget {
    /// Missing runs per round.
    pub runs: usize,
    /// Records per round (a run longer than what is left is re-checked in part).
    pub records: u64,
}

impl RecheckBudget {
    /// No limit (tests, `check`, the model).
    pub const UNLIMITED: RecheckBudget = RecheckBudget {
        runs: usize::MAX,
        records: u64::MAX,
    };
}

/// Per-partition gap gauges, as [`PartitionLedger::gauges`] computes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GapGauges {
    /// Gaps with missing records that count as open (not unverifiable, not acknowledged).
    pub open: u64,
    /// Their missing records.
    pub missing: u64,
    /// Earliest time Kafka was seen deleting one of their first records (unix ms).
    pub deleted_ms: Option<i64>,
    /// Oldest record timestamp among the open gaps Kafka has not deleted (for the
    /// retention deadline).
    pub oldest_undeleted_ts: Option<i64>,
    /// Open gaps among them without any record timestamp (deadline unknown).
    pub undeleted_without_ts: u64,
}

/// The part of a ledger the store does not hold yet: changed missing runs and gaps (`None`:
/// deleted), and the tail gap.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delta {
    /// Write the whole ledger instead ([`PartitionLedger::snapshot`]): what the store holds
    /// for the partition is not this ledger's past.
    pub replace: bool,
    /// Missing runs by first offset.
    pub missing: Vec<(Offset, Option<MissingRun>)>,
    /// Gaps by first offset.
    pub gaps: Vec<(Offset, Option<GapRecord>)>,
    /// First offset of the gap the next missing record extends.
    pub tail_gap: Option<Offset>,
}

impl Delta {
    /// Nothing but the tail gap changed.
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.gaps.is_empty()
    }
}

impl PartitionLedger {
    /// A fresh ledger whose next record is expected at `next_offset`. `keyed`: keep a match key
    /// per pending record (key_columns); otherwise memory is O(runs).
    pub fn new(next_offset: Offset, keyed: bool) -> Self {
        Self {
            next_offset,
            keyed,
            pending: VecDeque::new(),
            pending_count: 0,
            missing: BTreeMap::new(),
            missing_count: 0,
            gaps: BTreeMap::new(),
            dirty_gaps: Default::default(),
            tail_gap: None,
            released_keys: Vec::new(),
            unstored_confirmations: Vec::new(),
            track_confirmations: false,
            revision: 0,
            unstored_missing: BTreeSet::new(),
            unstored_gaps: BTreeSet::new(),
            unstored_replace: true,
            probe: None,
            confirmed_beyond_probe: 0,
            recheck_cursor: Offset::MIN,
            recheck_next: None,
            recheck_lap_end: None,
            gauges: None,
            untailed: Vec::new(),
            log_start: Offset::MIN,
            missing_keys: 0,
            compacted_at: 0,
            pipeline: PipelineCommits::default(),
            completeness: CompletenessCache::default(),
        }
    }

    /// Restores a ledger from its persisted snapshot, resuming at the settled watermark.
    pub fn restore(settled: Offset, keyed: bool, snap: Snapshot) -> Self {
        let mut l = Self::new(settled, keyed);
        let mut stale = BTreeSet::new();
        for m in snap.missing {
            if m.given_up {
                // Written by a version that kept given-up runs: they leave the store too.
                stale.insert(m.run.first);
                continue;
            }
            l.insert_missing(m);
        }
        // The store holds what was restored; only the stale runs are to write (delete).
        l.unstored_missing = stale;
        l.unstored_replace = false;
        for g in snap.gaps {
            // Given-up runs are not kept: the gaps count every missing record.
            if g.size_known {
                l.missing_count += g.missing;
            }
            l.gaps.insert(g.first, g);
        }
        l.tail_gap = snap.tail_gap;
        // What was re-checked before is unknown: the first probe answer starts a look.
        l.probe = l.span_of_missing().map(|span| Probe {
            span,
            baseline: None,
            look: None,
            unchanged: 0,
        });
        l
    }

    /// Restores a ledger at `at`, which may be beyond the snapshot's settled offset (another
    /// owner decided `[settled, at)`): then the next missing record does not extend the
    /// snapshot's tail gap across records decided elsewhere.
    pub fn restore_at(at: Offset, settled: Offset, keyed: bool, snap: Snapshot) -> Self {
        let mut l = Self::restore(at.max(settled), keyed, snap);
        if at > settled
            && let Some(t) = l.tail_gap.take()
        {
            l.untailed.push(t);
        }
        l
    }

    /// The persisted part of the ledger.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            missing: self.missing.values().cloned().collect(),
            gaps: self.gaps.values().cloned().collect(),
            tail_gap: self.tail_gap,
        }
    }

    /// Changes whenever the persisted part ([`Self::snapshot`]) changes.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Whether the ledger knows where it stands: false for a ledger started at a logical
    /// position (negative: the log end or start as the consumer finds it) until its first
    /// record. An unanchored ledger's settled offset must be neither stored nor committed.
    pub fn is_anchored(&self) -> bool {
        self.next_offset >= 0
    }

    /// The next offset the consumer will deliver.
    pub fn next_offset(&self) -> Offset {
        self.next_offset
    }

    /// Expected records not yet decided.
    pub fn pending(&self) -> u64 {
        self.pending_count
    }

    /// Records currently missing (in open gaps).
    pub fn missing(&self) -> u64 {
        self.missing_count
    }

    /// Gaps with missing records.
    pub fn open_gaps(&self) -> usize {
        self.gaps.values().filter(|g| g.missing > 0).count()
    }

    /// Smallest record timestamp among open gaps (for retention deadlines).
    pub fn oldest_open_gap_ts(&self) -> Option<i64> {
        self.gaps
            .values()
            .filter(|g| g.missing > 0)
            .filter_map(|g| g.min_ts)
            .min()
    }

    /// Offset below which every expected record is confirmed or missing (the latter persisted
    /// by the caller before committing this value). The caller commits it to Kafka.
    pub fn settled(&self) -> Offset {
        self.pending
            .front()
            .map_or(self.next_offset, |p| p.run.first)
    }

    /// Takes one consumed record. Offsets at or below an already observed one are ignored
    /// (re-delivery after a seek); the jump from `next_offset` to `offset` is a hole.
    pub fn ingest(
        &mut self,
        offset: Offset,
        ts_ms: Option<i64>,
        what: Observed,
        now_ms: i64,
    ) -> bool {
        if offset < self.next_offset {
            return false;
        }
        self.next_offset = offset + 1;
        let Observed::Expected { key } = what else {
            return true;
        };
        self.pending_count += 1;
        if let Some(last) = self.pending.back_mut()
            && last.run.last + 1 == offset
            && now_ms - last.first_seen_ms < RUN_SEEN_SPAN_MS
        {
            last.run.last = offset;
            last.last_seen_ms = now_ms.max(last.last_seen_ms);
            last.min_ts = min_opt(last.min_ts, ts_ms);
            last.max_ts = max_opt(last.max_ts, ts_ms);
            if self.keyed {
                last.keys
                    .push(key.unwrap_or_else(|| Key::new([] as [&str; 0])));
            }
            return true;
        }
        self.pending.push_back(PendingRun {
            run: OffsetRun::new(offset, offset),
            first_seen_ms: now_ms,
            last_seen_ms: now_ms,
            min_ts: ts_ms,
            max_ts: ts_ms,
            keys: if self.keyed {
                vec![key.unwrap_or_else(|| Key::new([] as [&str; 0]))]
            } else {
                Vec::new()
            },
        });
        true
    }

    /// Records that Kafka deleted offsets `first..=last` before the auditor read them
    /// (its resume point fell below the log start): a gap of unknown size, never silence.
    /// Moves `next_offset` past them.
    pub fn skipped_by_retention(
        &mut self,
        first: Offset,
        last: Offset,
        now_ms: i64,
    ) -> Option<GapRecord> {
        if last < first || last < self.next_offset {
            return None;
        }
        let first = first.max(self.next_offset);
        let g = GapRecord {
            first,
            last,
            missing: (last - first + 1) as u64,
            size_known: false,
            min_ts: None,
            max_ts: None,
            detected_ms: now_ms,
            cause: GapCause::DeletedUnread,
            commit: None,
            deleted_ms: Some(now_ms),
            unsettled: true,
            shared_key: false,
            is_new: true,
        };
        self.next_offset = last + 1;
        // Such a gap is never re-checked: its records are gone. It is not the tail: a later
        // missing record is a different incident.
        if let Some(t) = self.tail_gap.take() {
            self.untailed.push(t);
        }
        self.revision += 1;
        self.dirty_gaps.insert(first);
        self.unstored_gaps.insert(first);
        self.gaps.insert(first, g.clone());
        Some(g)
    }

    /// Ranges Kafka deleted unread that the sink has not been asked about yet.
    pub fn deleted_to_settle(&self) -> Vec<OffsetRun> {
        self.gaps
            .values()
            .filter(|g| g.unsettled)
            .map(|g| OffsetRun::new(g.first, g.last))
            .collect()
    }

    /// The sink's answer about a deleted range (`present`: offsets found there, for
    /// offset_columns; empty where the sink cannot tell): present offsets were written,
    /// the rest stay in the gap, unverifiable. Returns what to count.
    pub fn settle_deleted(&mut self, first: Offset, present: &[OffsetRun]) -> Applied {
        let Some(g) = self.gaps.get_mut(&first).filter(|g| g.unsettled) else {
            return Applied::default();
        };
        let span = OffsetRun::new(g.first, g.last);
        let found = runs::count(&runs::intersect(span, &runs::normalize(present.to_vec())));
        g.unsettled = false;
        g.missing = g.missing.saturating_sub(found);
        self.revision += 1;
        self.dirty_gaps.insert(first);
        self.unstored_gaps.insert(first);
        Applied {
            confirmed: found,
            unverifiable: span.len() - found,
            ..Applied::default()
        }
    }

    /// The due prefix of pending records, split at the due frontier, at most `limit` records,
    /// as segments in offset order. `verdicts` passed to [`Self::apply`] must align with it.
    pub fn due(&mut self, now_ms: i64, grace_ms: i64, limit: u64) -> Vec<Segment> {
        let frontier = self.pipeline.frontier(now_ms, grace_ms);
        let mut out = Vec::new();
        let mut budget = limit;
        let mut i = 0;
        while i < self.pending.len() && budget > 0 {
            let run = self.pending[i].run;
            let due_last = match frontier {
                Frontier::Offset(f) => (f - 1).min(run.last),
                Frontier::SeenBefore(t) => {
                    if self.pending[i].last_seen_ms <= t {
                        run.last
                    } else {
                        break;
                    }
                }
            };
            if due_last < run.first {
                break;
            }
            let cap_last = run.first + (budget.min(run.len()) as Offset) - 1;
            let cut = due_last.min(cap_last);
            if cut < run.last {
                let right = self.pending[i].split_off(cut + 1);
                self.pending.insert(i + 1, right);
            }
            let p = &self.pending[i];
            budget -= p.run.len();
            out.push(Segment {
                run: p.run,
                keys: p.keys.clone(),
                max_ts: p.max_ts,
            });
            i += 1;
            if cut < run.last {
                break;
            }
        }
        out
    }

    /// Applies the verifier's answers for the segments returned by the last [`Self::due`].
    /// Only the longest prefix of Known verdicts is applied; the rest stays pending, so
    /// decisions always advance in offset order.
    pub fn apply(&mut self, verdicts: &[Verdict], now_ms: i64) -> Applied {
        let mut out = Applied::default();
        for v in verdicts {
            let Verdict::Known {
                present,
                duplicate_rows,
                shared_keys,
            } = v
            else {
                break;
            };
            let Some(p) = self.pending.pop_front() else {
                break;
            };
            self.pending_count -= p.run.len();
            out.duplicates += duplicate_rows;
            let present = runs::intersect(p.run, &runs::normalize(present.clone()));
            // Walk the segment in offset order, alternating present and absent runs.
            let absent = runs::subtract(p.run, &present);
            let mut events: Vec<(OffsetRun, bool)> = present.iter().map(|r| (*r, true)).collect();
            events.extend(absent.iter().map(|r| (*r, false)));
            events.sort_unstable_by_key(|(r, _)| r.first);
            for (r, found) in events {
                if found {
                    if self.track_confirmations && !p.keys.is_empty() {
                        let a = (r.first - p.run.first) as usize;
                        self.unstored_confirmations
                            .extend_from_slice(&p.keys[a..a + r.len() as usize]);
                    }
                    out.confirmed += r.len();
                    out.confirmed_ts.push((p.max_ts, r.len()));
                    if self.probe.is_some_and(|pr| r.first > pr.span.last) {
                        self.confirmed_beyond_probe += r.len();
                    }
                    if let Some(t) = self.tail_gap.take() {
                        self.untailed.push(t);
                        self.revision += 1;
                    }
                } else {
                    out.lost += r.len();
                    let keys = if p.keys.is_empty() {
                        Vec::new()
                    } else {
                        let a = (r.first - p.run.first) as usize;
                        p.keys[a..a + r.len() as usize].to_vec()
                    };
                    let shared = !runs::intersect(r, shared_keys).is_empty();
                    self.declare_missing(r, keys, p.min_ts, p.max_ts, shared, now_ms);
                }
            }
        }
        out
    }

    fn declare_missing(
        &mut self,
        r: OffsetRun,
        keys: Vec<Key>,
        min_ts: Option<i64>,
        max_ts: Option<i64>,
        shared_key: bool,
        now_ms: i64,
    ) {
        let gap_first = match self.tail_gap.and_then(|t| self.gaps.get_mut(&t)) {
            Some(g) => {
                g.shared_key |= shared_key;
                g.last = r.last;
                g.missing += r.len();
                g.min_ts = min_opt(g.min_ts, min_ts);
                g.max_ts = max_opt(g.max_ts, max_ts);
                // A gap with nothing missing when the log start passed its first offset was
                // skipped by `log_start_moved` (which never looks below the last log start
                // again): growing again, it is unrecoverable now.
                if g.deleted_ms.is_none() && g.first < self.log_start {
                    g.deleted_ms = Some(now_ms);
                }
                g.first
            }
            None => {
                let (cause, commit) = self.cause_of(r.first);
                // Declared after Kafka deleted its first record (it was read in time, then
                // waited out grace): unrecoverable from the start.
                let deleted_ms = (r.first < self.log_start).then_some(now_ms);
                self.gaps.insert(
                    r.first,
                    GapRecord {
                        first: r.first,
                        last: r.last,
                        missing: r.len(),
                        size_known: true,
                        min_ts,
                        max_ts,
                        detected_ms: now_ms,
                        cause,
                        commit,
                        deleted_ms,
                        unsettled: false,
                        shared_key,
                        is_new: true,
                    },
                );
                r.first
            }
        };
        self.tail_gap = Some(gap_first);
        self.revision += 1;
        self.dirty_gaps.insert(gap_first);
        self.unstored_gaps.insert(gap_first);
        self.missing_count += r.len();
        // The probe's span grows over the records decided since its end: those confirmed
        // are present, so the baseline (and a look's count) grows by exactly them.
        match self.probe.as_mut() {
            Some(p) => {
                let grown = std::mem::take(&mut self.confirmed_beyond_probe);
                p.span.last = p.span.last.max(r.last);
                p.baseline = p.baseline.map(|b| b + grown);
                p.look = p.look.map(|c| c + grown);
            }
            None => {
                // Just counted absent: the sink holds none of these offsets.
                self.confirmed_beyond_probe = 0;
                self.probe = Some(Probe {
                    span: r,
                    baseline: Some(0),
                    look: None,
                    unchanged: 0,
                });
            }
        }
        // Adjacent to the previous run of the same gap (one pending run decided in parts
        // over several rounds): one run, so that a total loss keeps one entry per gap.
        if let Some(mut prev) = self
            .missing
            .range(..r.first)
            .next_back()
            .filter(|(_, m)| {
                m.gap == gap_first
                    && m.run.last + 1 == r.first
                    && m.keys.is_empty() == keys.is_empty()
                    // A run carrying keys is rewritten whole whenever it changes: merged
                    // without bound, a total loss rewrote every missing key each round.
                    && (keys.is_empty() || m.keys.len() + keys.len() <= MERGED_KEYS_MAX)
            })
            .map(|(f, _)| *f)
            .and_then(|f| self.remove_missing(f))
        {
            prev.run.last = r.last;
            // The later detection time: re-checks of the earlier records last a little
            // longer, never shorter.
            prev.detected_ms = prev.detected_ms.max(now_ms);
            let mut keys = keys;
            prev.keys.append(&mut keys);
            self.insert_missing(prev);
            return;
        }
        self.insert_missing(MissingRun {
            run: r,
            gap: gap_first,
            detected_ms: now_ms,
            keys,
            given_up: false,
        });
    }

    /// Every change to `missing` goes through here and [`Self::remove_missing`]: the store
    /// write and the key count follow it.
    fn insert_missing(&mut self, m: MissingRun) {
        self.unstored_missing.insert(m.run.first);
        self.missing_keys += m.keys.len() as u64;
        self.missing.insert(m.run.first, m);
    }

    fn remove_missing(&mut self, first: Offset) -> Option<MissingRun> {
        let m = self.missing.remove(&first)?;
        self.unstored_missing.insert(first);
        self.missing_keys -= m.keys.len() as u64;
        Some(m)
    }

    /// Attributes a new gap starting at `first` to the pipeline commit step that passed over
    /// it. A step starting exactly at the gap means the pipeline's committed position was
    /// the first record it then never wrote: it resumed elsewhere (a restart from `latest`,
    /// a lost checkpoint). A step starting before the gap passed over records it did write:
    /// the gap's records were dropped in flight. Heuristic limit: a batch whose FIRST
    /// record is dropped in flight looks like a restart.
    fn cause_of(&self, first: Offset) -> (GapCause, Option<CommitStep>) {
        match self.pipeline.step_over(first) {
            Some(s) if s.from == first => (GapCause::SkippedByRestart, Some(s)),
            Some(s) => (GapCause::DroppedInFlight, Some(s)),
            None => (GapCause::Unknown, None),
        }
    }

    /// Kafka's log start is now `log_start`: open gaps whose first record it deleted become
    /// unrecoverable (at least their prefix can no longer be replayed). Returns whether any
    /// gap changed (then it is reported by [`Self::take_dirty_gaps`]).
    pub fn log_start_moved(&mut self, log_start: Offset, now_ms: i64) -> bool {
        let mut changed = false;
        if log_start <= self.log_start {
            return false;
        }
        // Only the gaps the log start passed since last time (later gaps below it are born
        // unrecoverable, see `declare_missing`).
        for g in self
            .gaps
            .range_mut(self.log_start..log_start)
            .map(|(_, g)| g)
        {
            if g.missing > 0 && g.deleted_ms.is_none() {
                g.deleted_ms = Some(now_ms);
                self.dirty_gaps.insert(g.first);
                self.unstored_gaps.insert(g.first);
                changed = true;
            }
        }
        self.log_start = log_start;
        if changed {
            self.revision += 1;
        }
        changed
    }

    /// Gives up missing runs older than `give_up_ms`: they stay missing and in their gap,
    /// but leave the ledger (their keys are released, see [`Self::take_released_keys`]), so
    /// neither memory nor re-checks keep growing with an incident's age.
    pub fn give_up(&mut self, now_ms: i64, give_up_ms: i64) {
        // Runs are declared in offset order, so detection times rise with offsets: the scan
        // stops at the first run still young (a clock step back only delays a give-up).
        let old: Vec<Offset> = self
            .missing
            .iter()
            .take_while(|(_, m)| now_ms - m.detected_ms >= give_up_ms)
            .map(|(f, _)| *f)
            .collect();
        for f in old {
            self.give_up_run(f);
        }
    }

    fn give_up_run(&mut self, first: Offset) -> u64 {
        let Some(mut m) = self.remove_missing(first) else {
            return 0;
        };
        self.revision += 1;
        let keys = m.keys.len() as u64;
        self.released_keys.append(&mut m.keys);
        if self.missing.is_empty() {
            self.probe = None;
        }
        keys
    }

    /// Keys held for missing records (re-checks need them).
    pub fn missing_key_count(&self) -> u64 {
        self.missing_keys
    }

    /// Gives up the oldest missing runs until at most `keep` keys are held (the audit's
    /// `max_missing_keys` budget): their records stay missing, never re-checked again.
    /// Returns the keys dropped.
    pub fn drop_missing_keys(&mut self, mut excess: u64) -> u64 {
        let mut dropped = 0;
        while excess > 0 {
            // The oldest first (offset order is detection order): the closest to giving up.
            let Some(first) = self
                .missing
                .iter()
                .find(|(_, m)| !m.keys.is_empty())
                .map(|(f, _)| *f)
            else {
                break;
            };
            // A run holding more keys than are to go (runs of a total loss merge into one
            // per gap) gives up only its oldest records: the rest keep being re-checked.
            let keys = self.missing.get(&first).map_or(0, |m| m.keys.len() as u64);
            if keys > excess
                && let Some(m) = self.remove_missing(first)
            {
                let cut = first + excess as Offset;
                let (old, rest) = (
                    m.sub(OffsetRun::new(first, cut - 1)),
                    m.sub(OffsetRun::new(cut, m.run.last)),
                );
                self.released_keys.extend(old.keys);
                self.insert_missing(rest);
                self.revision += 1;
                dropped += excess;
                break;
            }
            let n = self.give_up_run(first);
            dropped += n;
            excess = excess.saturating_sub(n);
        }
        dropped
    }

    /// offset_columns: the range to count instead of re-checking every missing run, with
    /// what it held (see [`Probe`]). `None`: nothing to re-check.
    pub fn probe(&self) -> Option<Probe> {
        self.probe
    }

    /// The probe's answer: how many distinct offsets of its span the sink holds now.
    /// Returns whether the missing runs must be looked at one by one ([`Self::rechecks`]);
    /// while a look is in progress it continues whatever the count.
    pub fn probe_answered(&mut self, distinct: u64) -> bool {
        let Some(p) = self.probe.as_mut() else {
            return false;
        };
        if p.look.is_some() {
            return true;
        }
        if p.baseline == Some(distinct) && p.unchanged < FORCE_LOOK_EVERY {
            p.unchanged += 1;
            return false;
        }
        p.unchanged = 0;
        p.look = Some(distinct);
        self.recheck_cursor = p.span.first;
        self.recheck_lap_end = None;
        true
    }

    /// Whether a look (offset_columns) or a rotation (keys) is between two rounds.
    pub fn look_in_progress(&self) -> bool {
        self.probe.is_some_and(|p| p.look.is_some())
    }

    fn span_of_missing(&self) -> Option<OffsetRun> {
        let first = self.missing.values().next()?.run.first;
        let last = self.missing.values().next_back()?.run.last;
        Some(OffsetRun::new(first, last))
    }

    /// Missing records to re-check this round, at most `budget`, continuing where the last
    /// call stopped (a rotation: the next call after the last run starts over). A rotation
    /// covers the records missing when it started: records declared since wait for the next
    /// one, so that a rotation ends even while an incident adds runs faster than the budget.
    /// A look started by [`Self::probe_answered`] is complete once its rotation ends: its
    /// count becomes the probe's baseline (rows landing in the span since make the next
    /// probe differ from it, so they start another look).
    pub fn rechecks(&mut self, budget: RecheckBudget) -> Vec<Segment> {
        let mut out = Vec::new();
        let (mut runs_left, mut records_left) = (budget.runs, budget.records);
        let cursor = self.recheck_cursor;
        // A run re-checked in part last round continues at the cursor.
        let start = self
            .missing
            .range(..=cursor)
            .next_back()
            .filter(|(_, m)| m.run.contains(cursor))
            .map_or(cursor, |(f, _)| *f);
        let last_missing = self.missing.values().next_back().map(|m| m.run.last);
        let lap_end = *self
            .recheck_lap_end
            .get_or_insert(last_missing.unwrap_or(Offset::MIN));
        let mut next = None;
        for (f, m) in self.missing.range(start..) {
            // Records declared since the rotation started (new runs, or a run that grew) are
            // the next rotation's.
            let last = m.run.last.min(lap_end);
            let from = m.run.first.max(cursor);
            if from > last {
                break;
            }
            if runs_left == 0 || records_left == 0 {
                next = Some(*f);
                break;
            }
            let avail = (last - from) as u64 + 1;
            let take = avail.min(records_left);
            let part = OffsetRun::new(from, from + take as Offset - 1);
            out.push(Segment {
                run: part,
                keys: m.sub(part).keys,
                max_ts: None,
            });
            runs_left -= 1;
            records_left -= take;
            if take < avail {
                next = Some(part.last + 1);
                break;
            }
        }
        // Advanced only once the answers are applied: a failed query re-checks the same
        // runs next round, and a look never completes on questions the sink did not answer.
        self.recheck_next = Some(next);
        out
    }

    /// Applies re-check answers (aligned with the last [`Self::rechecks`]): offsets found
    /// now are late; they leave their missing run and their gap's missing count.
    pub fn apply_rechecks(&mut self, segments: &[Segment], verdicts: &[Verdict]) -> Applied {
        let mut out = Applied::default();
        let answered = verdicts.len() == segments.len()
            && verdicts.iter().all(|v| matches!(v, Verdict::Known { .. }));
        if let Some(next) = self.recheck_next.take().filter(|_| answered) {
            match next {
                Some(c) => self.recheck_cursor = c,
                None => {
                    self.recheck_cursor = Offset::MIN;
                    self.recheck_lap_end = None;
                    if let Some(p) = self.probe.as_mut()
                        && let Some(c) = p.look.take()
                    {
                        p.baseline = Some(c);
                    }
                }
            }
        }
        for (seg, v) in segments.iter().zip(verdicts) {
            let Verdict::Known {
                present,
                duplicate_rows,
                ..
            } = v
            else {
                continue;
            };
            let present = runs::intersect(seg.run, &runs::normalize(present.clone()));
            if present.is_empty() {
                continue;
            }
            // The run holding the segment (a segment may be part of a run).
            let Some(first) = self
                .missing
                .range(..=seg.run.first)
                .next_back()
                .filter(|(_, m)| m.run.contains(seg.run.first) && m.run.contains(seg.run.last))
                .map(|(f, _)| *f)
            else {
                continue;
            };
            let Some(m) = self.remove_missing(first) else {
                continue;
            };
            out.duplicates += duplicate_rows;
            self.revision += 1;
            let found = runs::count(&present);
            for r in present.iter().filter(|_| self.track_confirmations) {
                for o in r.first..=r.last {
                    if let Some(k) = m.key_of(o) {
                        self.unstored_confirmations.push(k.clone());
                    }
                }
            }
            out.late += found;
            self.missing_count -= found;
            for rest in runs::subtract(m.run, &present) {
                self.insert_missing(m.sub(rest));
            }
            if let Some(g) = self.gaps.get_mut(&m.gap) {
                g.missing = g.missing.saturating_sub(found);
                self.dirty_gaps.insert(m.gap);
                self.unstored_gaps.insert(m.gap);
            }
        }
        if self.missing.is_empty() {
            self.probe = None;
        }
        out
    }

    /// An operator acknowledged the gap starting at `first`: it leaves the hot ledger (no
    /// re-checks, no gauges; its missing runs' keys are released). A missing record right
    /// after it opens a new gap: the operator accepted that incident, not later losses.
    /// Returns whether anything changed.
    pub fn acknowledge(&mut self, first: Offset) -> bool {
        let Some(g) = self.gaps.remove(&first) else {
            return false;
        };
        if g.size_known {
            self.missing_count = self.missing_count.saturating_sub(g.missing);
        }
        self.unstored_gaps.insert(first);
        // A gap's runs lie inside it: not a walk over every run of the partition per
        // acknowledgement (an operator acknowledging an incident's gaps one by one).
        let runs: Vec<Offset> = self
            .missing
            .range(g.first..=g.last)
            .filter(|(_, m)| m.gap == first)
            .map(|(f, _)| *f)
            .collect();
        for f in runs {
            self.give_up_run(f);
        }
        if self.tail_gap == Some(first) {
            self.tail_gap = None;
        }
        self.dirty_gaps.remove(&first);
        self.revision += 1;
        true
    }

    /// Open-gap gauges, recomputed only when the ledger changed (idle rounds cost O(1)).
    pub fn gauges(&mut self) -> GapGauges {
        if let Some((rev, g)) = &self.gauges
            && *rev == self.revision
        {
            return g.clone();
        }
        let mut out = GapGauges::default();
        for g in self.gaps.values() {
            let unverifiable = !g.size_known && g.cause == GapCause::DeletedUnread;
            if g.missing == 0 || unverifiable {
                continue;
            }
            out.open += 1;
            out.missing += g.missing;
            match g.deleted_ms {
                Some(at) => out.deleted_ms = min_opt(out.deleted_ms, Some(at)),
                None => match g.min_ts {
                    Some(ts) => {
                        out.oldest_undeleted_ts = min_opt(out.oldest_undeleted_ts, Some(ts))
                    }
                    None => out.undeleted_without_ts += 1,
                },
            }
        }
        self.gauges = Some((self.revision, out.clone()));
        out
    }

    /// What the store does not hold yet (see [`Self::stored`]).
    pub fn delta(&self) -> Delta {
        Delta {
            replace: self.unstored_replace,
            missing: self
                .unstored_missing
                .iter()
                .map(|f| (*f, self.missing.get(f).cloned()))
                .collect(),
            gaps: self
                .unstored_gaps
                .iter()
                .map(|f| (*f, self.gaps.get(f).cloned()))
                .collect(),
            tail_gap: self.tail_gap,
        }
    }

    /// Gaps changed since the last call. Gaps with nothing missing that are not the tail
    /// are forgotten afterwards (their final state is in the returned list).
    pub fn take_dirty_gaps(&mut self) -> Vec<GapRecord> {
        let dirty = std::mem::take(&mut self.dirty_gaps);
        let out: Vec<GapRecord> = dirty
            .iter()
            .filter_map(|f| {
                let g = self.gaps.get_mut(f)?;
                let out = g.clone();
                g.is_new = false;
                Some(out)
            })
            .collect();
        self.compact();
        // Only gaps that changed, or stopped being the tail, can have become forgettable:
        // a round does not walk every gap.
        let tail = self.tail_gap;
        let mut check: Vec<Offset> = dirty.into_iter().collect();
        check.append(&mut self.untailed);
        for f in check {
            if Some(f) != tail && self.gaps.get(&f).is_some_and(|g| g.missing == 0) {
                self.gaps.remove(&f);
                self.unstored_gaps.insert(f);
                self.revision += 1;
            }
        }
        out
    }

    /// Rebuilds the gap and missing maps once they doubled since the last rebuild. Gaps are
    /// declared in offset order, so a map grows by appends, which leave every node but the
    /// last half full: rebuilt from sorted entries, nodes are full, and an incident with
    /// 500,000 gaps holds about half the memory. Amortized O(1) per gap.
    fn compact(&mut self) {
        const MIN: usize = 4096;
        let len = self.gaps.len().max(self.missing.len());
        if len < MIN || len < 2 * self.compacted_at {
            return;
        }
        self.gaps = std::mem::take(&mut self.gaps).into_iter().collect();
        self.missing = std::mem::take(&mut self.missing).into_iter().collect();
        self.compacted_at = len;
    }

    /// Tracks the keys of confirmations until [`Self::stored`] (see
    /// [`Self::take_unstored_confirmations`]); off by default.
    pub fn track_confirmations(&mut self, on: bool) {
        self.track_confirmations = on;
    }

    /// The store now holds this ledger's verdicts (see [`Self::take_unstored_confirmations`]).
    pub fn stored(&mut self) {
        self.unstored_confirmations.clear();
        self.unstored_missing.clear();
        self.unstored_gaps.clear();
        self.unstored_replace = false;
    }

    /// Keys of records confirmed since the last [`Self::stored`].
    pub fn take_unstored_confirmations(&mut self) -> Vec<Key> {
        std::mem::take(&mut self.unstored_confirmations)
    }

    /// Keys of missing records given up since the last call (see [`super::KeyBook`]).
    pub fn take_released_keys(&mut self) -> Vec<Key> {
        std::mem::take(&mut self.released_keys)
    }

    /// The pending records as segments (offsets with their keys), in offset order.
    pub fn pending_segments(&self) -> impl Iterator<Item = Segment> + '_ {
        self.pending.iter().map(|p| Segment {
            run: p.run,
            keys: p.keys.clone(),
            max_ts: p.max_ts,
        })
    }

    /// Keys of pending records (each once per record).
    pub fn pending_keys(&self) -> impl Iterator<Item = &Key> {
        self.pending.iter().flat_map(|p| p.keys.iter())
    }

    /// Keys of missing records still re-checked (each once per record).
    pub fn missing_keys(&self) -> impl Iterator<Item = &Key> {
        self.missing
            .values()
            .filter(|m| !m.given_up)
            .flat_map(|m| m.keys.iter())
    }

    /// The key of a missing offset (for replay tooling and tests).
    pub fn missing_key(&self, o: Offset) -> Option<&Key> {
        self.missing
            .range(..=o)
            .next_back()
            .and_then(|(_, m)| if m.run.contains(o) { m.key_of(o) } else { None })
    }

    /// All missing offsets as runs (tests, status).
    pub fn missing_runs(&self) -> Vec<OffsetRun> {
        self.missing.values().map(|m| m.run).collect()
    }

    /// Pending offsets as runs (tests).
    pub fn pending_runs(&self) -> Vec<OffsetRun> {
        runs::normalize(self.pending.iter().map(|p| p.run).collect())
    }

    /// The gaps the ledger currently holds.
    pub fn gaps(&self) -> impl Iterator<Item = &GapRecord> {
        self.gaps.values()
    }
}

impl Applied {
    /// Merges two outcomes.
    pub fn merge(mut self, other: Applied) -> Applied {
        self.add(other);
        self
    }
}

fn min_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

fn max_opt(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

// ------------------------------------------------------------------------------------------
// Completeness (issue 18, SPEC "Completeness"): what this partition holds back, computed only
// when the ledger changed. Kept apart from the rest of the ledger on purpose.
// ------------------------------------------------------------------------------------------

/// The newest record time read, and [`PartitionLedger::completeness`]'s last answer with the
/// ledger state it was computed at.
#[derive(Debug, Clone, Default)]
struct CompletenessCache {
    newest_ts: Option<i64>,
    /// ((revision, next offset, pending count), aggregate). Pending records change without a
    /// revision (it follows only the persisted part): every change to them moves the next
    /// offset (a record read) or the pending count (records decided), so the triple changes
    /// whenever the answer can.
    cached: Option<((u64, Offset, u64), crate::completeness::LedgerCompleteness)>,
}

impl PartitionLedger {
    /// Notes the timestamp of a record just taken by [`Self::ingest`], expected or filtered:
    /// a filtered record is decided too, so it moves completeness forward.
    pub fn note_record_ts(&mut self, ts: Option<i64>) {
        if let Some(t) = ts {
            self.completeness.newest_ts = Some(self.completeness.newest_ts.map_or(t, |n| n.max(t)));
        }
    }

    /// What this partition holds completeness back at: its oldest pending record, its
    /// earliest gaps with records missing (acknowledged gaps left the ledger; late and
    /// repaired ones have none missing). Recomputed only after a change, so an idle round
    /// costs O(1); a change costs one pass over the pending runs and the gaps, as
    /// [`Self::gauges`] does. Timestamps are bounds: a pending run split by the due frontier
    /// keeps both halves' bounds, so a hold may be a little earlier than exact, never later.
    pub fn completeness(&mut self) -> crate::completeness::LedgerCompleteness {
        use crate::completeness::{BlockingGap, LedgerCompleteness, MAX_LISTED_GAPS, Since};
        let key = (self.revision, self.next_offset, self.pending_count);
        if let Some((k, c)) = &self.completeness.cached
            && *k == key
        {
            return c.clone();
        }
        let pending = self.pending.iter().map(|p| Since::of(p.min_ts)).min();
        let mut blocking = 0u64;
        // The earliest MAX_LISTED_GAPS by record time, kept sorted while scanning.
        let mut earliest: Vec<(Since, Offset)> = Vec::with_capacity(MAX_LISTED_GAPS + 1);
        for g in self.gaps.values().filter(|g| g.missing > 0) {
            blocking += 1;
            let s = Since::of(g.min_ts);
            if earliest.len() == MAX_LISTED_GAPS
                && earliest.last().is_some_and(|(last, _)| *last <= s)
            {
                continue;
            }
            let at = earliest.partition_point(|(x, f)| (*x, *f) <= (s, g.first));
            earliest.insert(at, (s, g.first));
            earliest.truncate(MAX_LISTED_GAPS);
        }
        // States as reported (the same rule as the API's), for the kept few only.
        let nowhere = crate::gap::TopicPartition::new(String::new(), 0);
        let gaps = earliest
            .into_iter()
            .filter_map(|(since, first)| {
                let g = self.gaps.get(&first)?;
                Some(BlockingGap {
                    first,
                    since,
                    missing: g.missing,
                    state: g.to_gap("", &nowhere).state,
                })
            })
            .collect();
        let out = LedgerCompleteness {
            pending,
            gaps,
            blocking_gaps: blocking,
            newest_ts: self.completeness.newest_ts,
        };
        self.completeness.cached = Some((key, out.clone()));
        out
    }
}
