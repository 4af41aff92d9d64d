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
//!
//! The types and constructors live here; the ledger's jobs each have a file: `ingest`
//! (records read), `settle` (due rule, verdicts, give-up), `recheck` (probe, rechecks,
//! acknowledgements), `keys` (missing keys, confirmations), `report` (gauges, deltas, views),
//! `completeness`, and `diverge` (a log truncated or recreated under the ledger).

use super::due::{CommitStep, PipelineCommits};
use super::runs::OffsetRun;
use crate::gap::GapCause;
use crate::types::{Key, Offset};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

mod completeness;
mod dead_letters;
mod deleted;
mod diverge;
mod fold;
mod gaps;
mod ingest;
mod keys;
mod missing;
mod recheck;
mod report;
mod retired;
mod settle;
mod unstored;

use completeness::CompletenessCache;
pub use deleted::{DeletedRest, NextPiece};
use diverge::LogPosition;
use fold::Fold;
use gaps::Gaps;
use ingest::PendingQueue;
use keys::KeyChanges;
use missing::MissingRuns;
use recheck::Rotation;
use report::Compaction;
use retired::Retirement;
pub use retired::{RetiredGaps, RetiredOp, RetiredWork};
use unstored::Unstored;

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
/// Every field of a gap the ledger persists and reports (the store's ledger item and the
/// handover carry it whole).
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
    /// What an evidence source told of the cause when the gap was found
    /// ([`crate::gap::Gap::evidence`]); kept with the gap, so a restart or the next owner
    /// of the partition reports it too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
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
    /// The incarnation of the partition's log the gap was found on ([`Snapshot::epoch`]):
    /// part of its id, so a gap of a log truncated or recreated under the ledger and a new
    /// gap at the same offset of the new log are two gaps, never one store row.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub epoch: u32,
    /// Set on the first report of a new gap only (not persisted).
    #[serde(skip)]
    pub is_new: bool,
    /// A range Kafka deleted unread that is settled piece by piece ([`Self::unsettled`],
    /// `ledger::partition::deleted`): the next offset the sink is to be asked about. The
    /// offsets below it were asked, and those found are already off `missing`. At or below
    /// `first` (0, the default of gaps stored before pieces): nothing asked yet. Persisted,
    /// so a restart resumes the settlement where it stopped instead of counting a piece twice.
    #[serde(default, skip_serializing_if = "is_zero_offset")]
    pub settle_cursor: Offset,
    /// Records of the gap absent from the sink that the pipeline's dead-letter topic names
    /// (`dead_letters.rs`): counted here, not in `missing`. A gap whose records are all
    /// dead-lettered or late, at least one dead-lettered, is `dead_lettered`.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub dead_lettered: u64,
}

impl GapRecord {
    /// Whether the gap holds records the sink is not proven to hold: missing ones (open,
    /// unrecoverable, unverifiable) or dead-lettered ones. Such a gap blocks completeness
    /// until it is acknowledged (SPEC "Completeness": only confirmed records complete a
    /// time; a dead-lettered record is absent from the sink).
    pub fn unconfirmed(&self) -> bool {
        self.missing > 0 || self.dead_lettered > 0
    }

    /// The gap's id ([`crate::gap::Gap::make_id_in`]).
    pub fn id(&self, audit: &str, tp: &crate::types::TopicPartition) -> String {
        crate::gap::Gap::make_id_in(audit, &tp.topic, tp.partition, self.first, self.epoch)
    }

    /// The gap as reported (API, store, CLI). `unrecoverable_at` is when the log start was
    /// seen passing it; callers that know the topic's retention fill in the deadline.
    pub fn to_gap(&self, audit: &str, tp: &crate::types::TopicPartition) -> crate::gap::Gap {
        use crate::gap::{Gap, GapState};
        use chrono::{TimeZone, Utc};
        let time = |ms: i64| Utc.timestamp_millis_opt(ms).single();
        Gap {
            id: self.id(audit, tp),
            audit: audit.to_string(),
            topic: tp.topic.clone(),
            partition: tp.partition,
            first_offset: self.first,
            last_offset: self.last,
            // A dead_lettered gap names how many of its records the sink lacks: those the
            // pipeline dead-lettered (its missing ones are 0, or it would be open).
            missing_records: if self.missing == 0 && self.dead_lettered > 0 {
                self.dead_lettered
            } else {
                self.missing
            },
            size_known: self.size_known,
            first_timestamp: self.min_ts.and_then(time),
            last_timestamp: self.max_ts.and_then(time),
            detected_at: time(self.detected_ms).unwrap_or_else(Utc::now),
            state: if self.missing == 0 && self.dead_lettered > 0 && self.size_known {
                GapState::DeadLettered
            } else if self.missing == 0
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
            evidence: self.evidence.clone(),
            shared_key: self.shared_key,
            replayed_at: None,
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
        /// Absent offsets for whose keys the key book lent a stand-in credit (key_columns:
        /// a record of the key the dead-letter topic named was confirmed earlier, see
        /// `KeyBook::credit`). By key, not by offset: the ledger dead-letters that many
        /// absent records of each key that the topic does not name itself, and gives the
        /// credits none needed back (`PartitionLedger::take_credited_keys`).
        stand_ins: Vec<OffsetRun>,
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
    /// Records absent from the sink that the dead-letter topic names (never counted as lost
    /// when known at decision time; see `dead_letters.rs`).
    pub dead_lettered: u64,
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
        self.dead_lettered += other.dead_lettered;
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
    /// First offset of the dead_lettered gap the next dead-lettered record extends (as
    /// `tail_gap`: without it a restart split such a gap in two at the settled offset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dead_tail: Option<Offset>,
    /// Divergences of the partition's log the ledger resumed over (0: none): the epoch of
    /// the gaps it finds from now on ([`GapRecord::epoch`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub epoch: u32,
    /// The highest position the auditor reached on this log before it was truncated below
    /// it (`None`: never truncated, or recreated since): the topic's own records were there,
    /// and their rows may still be in the sink above the new log's end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated_from: Option<Offset>,
}

/// Serde: a zero settle cursor is not written (the stored shape of every gap but a deleted
/// range being settled).
fn is_zero_offset(o: &Offset) -> bool {
    *o == 0
}

/// Serde: a zero count is not written (gaps without dead-lettered records).
fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

/// Serde: a zero epoch is not written (the stored shape of ledgers that never diverged).
fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Snapshot {
    /// A stored snapshot (its JSON, as the store gives it back) read item by item: a missing
    /// run or gap without the ledger's shape is left out and described, so one bad item
    /// costs only itself, never the partition's other open gaps.
    pub fn from_stored(value: &serde_json::Value) -> (Snapshot, Vec<String>) {
        fn each<T: serde::de::DeserializeOwned>(
            value: &serde_json::Value,
            field: &str,
            problems: &mut Vec<String>,
        ) -> Vec<T> {
            match value.get(field) {
                None | Some(serde_json::Value::Null) => Vec::new(),
                Some(serde_json::Value::Array(items)) => items
                    .iter()
                    .filter_map(|item| match T::deserialize(item) {
                        Ok(v) => Some(v),
                        Err(e) => {
                            let first = item
                                .get("first")
                                .or_else(|| item.get("run").and_then(|r| r.get("first")))
                                .map_or_else(|| "?".to_string(), ToString::to_string);
                            problems.push(format!(
                                "the `{field}` item at offset {first} is unreadable ({e}); left out"
                            ));
                            None
                        }
                    })
                    .collect(),
                Some(_) => {
                    problems.push(format!("`{field}` is not an array; left out"));
                    Vec::new()
                }
            }
        }
        let mut problems = Vec::new();
        let missing: Vec<MissingRun> = each(value, "missing", &mut problems);
        let gaps: Vec<GapRecord> = each(value, "gaps", &mut problems);
        // A run whose gap was left out has nowhere to report to: it goes too (the gap's
        // stored row keeps its records missing).
        let (missing, orphans): (Vec<MissingRun>, Vec<MissingRun>) = missing
            .into_iter()
            .partition(|m| gaps.iter().any(|g| g.first == m.gap));
        for m in orphans {
            problems.push(format!(
                "the missing run at offset {} belongs to the unreadable gap {}; left out",
                m.run.first, m.gap
            ));
        }
        let tail_gap = match value.get("tail_gap") {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => match v.as_i64() {
                Some(t) => Some(t),
                None => {
                    problems.push(format!("the tail gap {v} is not an offset; left out"));
                    None
                }
            },
        };
        // Written by this version only; anything but an offset is as if absent (the next
        // dead-lettered record then opens a gap of its own, as before).
        let dead_tail = value.get("dead_tail").and_then(serde_json::Value::as_i64);
        let epoch = match value.get("epoch") {
            None | Some(serde_json::Value::Null) => 0,
            Some(v) => match v.as_u64().and_then(|e| u32::try_from(e).ok()) {
                Some(e) => e,
                None => {
                    problems.push(format!("the log epoch {v} is not a count; taken as 0"));
                    0
                }
            },
        };
        let truncated_from = value
            .get("truncated_from")
            .and_then(serde_json::Value::as_i64);
        (
            Snapshot {
                missing,
                gaps,
                tail_gap,
                dead_tail,
                epoch,
                truncated_from,
            },
            problems,
        )
    }
}

/// The ledger of one partition: its state split by the job that owns it, each part
/// defined in that job's file.
#[derive(Debug, Clone)]
pub struct PartitionLedger {
    /// Records read and not decided yet (`ingest.rs`).
    queue: PendingQueue,
    /// Missing runs, each inside one gap (`missing.rs`).
    missing: MissingRuns,
    /// The gaps and which of them changed, ended or may be forgotten (`gaps.rs`).
    gaps: Gaps,
    /// Keys the audit's key book must hear about (`keys.rs`).
    key_changes: KeyChanges,
    /// Re-checks of missing runs: the probe and the rotation over the runs (`recheck.rs`).
    rotation: Rotation,
    /// What the store does not hold yet (`unstored.rs`).
    unstored: Unstored,
    /// Which log of the partition this is, and where Kafka's log starts (`diverge.rs`).
    log: LogPosition,
    /// When the gap maps were last rebuilt (`report.rs`).
    compaction: Compaction,
    /// The gaps that left memory (`retired.rs`).
    retirement: Retirement,
    /// The partition's overflow gap (`fold.rs`).
    fold: Fold,
    /// The pipeline group's commits on this partition (due rule input).
    pub pipeline: PipelineCommits,
    /// Newest record timestamp read, and the completeness aggregate cached per change
    /// (`completeness.rs`).
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
            queue: PendingQueue::new(next_offset, keyed),
            missing: MissingRuns::default(),
            gaps: Gaps::default(),
            key_changes: KeyChanges::default(),
            rotation: Rotation::default(),
            unstored: Unstored::default(),
            log: LogPosition::default(),
            compaction: Compaction::default(),
            retirement: Retirement::default(),
            fold: Fold::default(),
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
        l.unstored.missing = stale;
        l.unstored.replace = false;
        for g in snap.gaps {
            // Given-up runs are not kept: the gaps count every missing record.
            if g.size_known {
                l.missing.count += g.missing;
            }
            // Stored by a version that kept given-up gaps: retired at the next round.
            l.gaps.retire_candidates.push(g.first);
            // Only this log's: an earlier epoch's overflow gap retires like any gap.
            if g.cause == GapCause::Folded && g.epoch == snap.epoch {
                l.fold.overflow = Some(l.fold.overflow.map_or(g.first, |o| o.min(g.first)));
            }
            l.gaps.by_first.insert(g.first, g);
        }
        // The retired gaps are in the store only: their aggregate is read from it.
        l.retirement.work.recount = true;
        l.gaps.tail = snap.tail_gap;
        // Only a gap the snapshot holds (an older write may name one it no longer has).
        l.gaps.dead_tail = snap.dead_tail.filter(|t| l.gaps.by_first.contains_key(t));
        l.log.epoch = snap.epoch;
        l.log.truncated_from = snap.truncated_from;
        // What was re-checked before is unknown: the first probe answer starts a look.
        l.rotation.probe = l.span_of_missing().map(|span| Probe {
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
        if at > settled {
            if let Some(t) = l.gaps.tail.take() {
                l.gaps.untailed.push(t);
            }
            l.end_dead_tail();
        }
        l
    }

    /// The persisted part of the ledger.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            missing: self.missing.runs.values().cloned().collect(),
            gaps: self.gaps.by_first.values().cloned().collect(),
            tail_gap: self.gaps.tail,
            dead_tail: self.gaps.dead_tail,
            epoch: self.log.epoch,
            truncated_from: self.log.truncated_from,
        }
    }

    /// See [`Snapshot::dead_tail`].
    pub fn dead_tail(&self) -> Option<Offset> {
        self.gaps.dead_tail
    }

    /// See [`Snapshot::truncated_from`].
    pub fn truncated_from(&self) -> Option<Offset> {
        self.log.truncated_from
    }

    /// The log was truncated below `from`, the position reached on it (see
    /// [`Snapshot::truncated_from`]); the highest such position is kept.
    pub fn note_truncated_from(&mut self, from: Offset) {
        if self.log.truncated_from.is_none_or(|t| t < from) {
            self.log.truncated_from = Some(from);
            self.unstored.changed();
        }
    }

    /// The epoch of the gaps this ledger finds ([`Snapshot::epoch`]).
    pub fn epoch(&self) -> u32 {
        self.log.epoch
    }

    /// Changes whenever the persisted part ([`Self::snapshot`]) changes.
    pub fn revision(&self) -> u64 {
        self.unstored.revision
    }

    /// Whether the ledger knows where it stands: false for a ledger started at a logical
    /// position (negative: the log end or start as the consumer finds it) until its first
    /// record. An unanchored ledger's settled offset must be neither stored nor committed.
    pub fn is_anchored(&self) -> bool {
        self.queue.next_offset >= 0
    }

    /// The next offset the consumer will deliver.
    pub fn next_offset(&self) -> Offset {
        self.queue.next_offset
    }

    /// Expected records not yet decided.
    pub fn pending(&self) -> u64 {
        self.queue.count
    }

    /// Records currently missing (in open gaps), retired gaps' included.
    pub fn missing(&self) -> u64 {
        self.missing.count + self.retirement.aggregate.missing_known
    }

    /// Gaps with missing records, retired ones included.
    pub fn open_gaps(&self) -> usize {
        self.gaps
            .by_first
            .values()
            .filter(|g| g.missing > 0)
            .count()
            + (self.retirement.aggregate.gaps - self.retirement.aggregate.dead_lettered) as usize
    }

    /// Gaps with missing records the ledger holds in memory (not retired).
    pub fn gaps_in_memory(&self) -> usize {
        self.gaps.by_first.len()
    }

    /// Offset below which every expected record is confirmed or missing (the latter persisted
    /// by the caller before committing this value). The caller commits it to Kafka.
    pub fn settled(&self) -> Offset {
        self.queue
            .runs
            .front()
            .map_or(self.queue.next_offset, |p| p.run.first)
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
