//! Completeness (SPEC "Completeness"): up to which record time the sink is PROVEN to hold
//! every expected record of an audit. Pure: the ledgers hand in their cached aggregates
//! ([`LedgerCompleteness`]), the audit loop says which partitions are caught up, and
//! [`evaluate`] combines them; [`answer`] turns the result into the `/api/completeness`
//! reply for one `until`, and [`decide`] into `gap-auditor wait`'s exit code.
//!
//! The rule, per partition (docs/SEMANTICS.md "Completeness" says why):
//! - a pending record (read, not confirmed yet: lag, grace, a sink that is down) holds the
//!   partition back at its record timestamp;
//! - a gap with records the sink does not hold — missing (open, unrecoverable,
//!   unverifiable) or dead-lettered (the pipeline rejected them: not lost, but not in the
//!   sink either) — holds it back at its first record's timestamp until acknowledged;
//!   acknowledged gaps have left the ledger, and late or repaired ones have nothing
//!   missing, so neither holds anything back;
//! - a partition the auditor has not read to its log end holds it back at the newest record
//!   it read there (what lies beyond is unknown), or at an unknown time before its first;
//! - an IDLE partition — read to its log end, nothing pending — holds nothing back of its
//!   own: it counts as complete up to the later of its newest record and `now − horizon`,
//!   where the horizon (grace + statistics interval + verify interval) is how long a record
//!   produced to it may take to show up in the log end the auditor sees.
//!
//! The audit's `complete_until` is the earliest of its partitions' holds, and never later
//! than `now`: a record stamped in the future proves nothing about records not produced
//! yet (the ledgers clamp such timestamps to when they were read, and count them). A hold
//! at an unknown time (a record without a timestamp, a range Kafka deleted unread) makes it
//! unknown: nothing is proven, and the gauge is not exported.

use crate::gap::GapState;
use crate::types::Offset;
use chrono::{DateTime, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod cover;
pub use cover::{Coverage, coverage};

/// Blocking gaps a ledger lists (the earliest by record time): enough to name the culprits
/// of any `until`, without a round's cost growing with an incident's 100,000s of gaps.
pub const MAX_LISTED_GAPS: usize = 16;

/// The record time something holds completeness back at. `Unknown` sorts first: a record
/// whose time nobody knows could be older than anything.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Since {
    /// No timestamp (a record without one, a range Kafka deleted before it was read).
    Unknown,
    /// Unix milliseconds.
    At(i64),
}

impl Since {
    /// From an optional timestamp.
    pub fn of(ts: Option<i64>) -> Since {
        ts.map_or(Since::Unknown, Since::At)
    }

    /// Whether something held back here blocks "everything produced before `until_ms`".
    pub fn before(self, until_ms: i64) -> bool {
        match self {
            Since::Unknown => true,
            Since::At(t) => t < until_ms,
        }
    }

    fn ms(self) -> Option<i64> {
        match self {
            Since::Unknown => None,
            Since::At(t) => Some(t),
        }
    }
}

/// A gap that holds completeness back, as a ledger lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlockingGap {
    /// The gap's first offset (its identity within the partition).
    pub first: Offset,
    /// Its first record's timestamp.
    pub since: Since,
    /// Records still missing (an upper bound when its size is unknown); a dead_lettered
    /// gap's dead-lettered records (its `missing_records`).
    pub missing: u64,
    /// Its state as reported (`open`, `unrecoverable`, `unverifiable`, `dead_lettered`).
    pub state: GapState,
    /// Its log epoch, the rest of its id ([`crate::gap::Gap::make_id_in`]).
    pub epoch: u32,
}

/// What one partition's ledger knows about completeness, cached per ledger change
/// ([`crate::ledger::PartitionLedger::completeness`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerCompleteness {
    /// The oldest record time among pending records; `None`: nothing pending.
    pub pending: Option<Since>,
    /// The earliest blocking gaps by record time, at most [`MAX_LISTED_GAPS`].
    pub gaps: Vec<BlockingGap>,
    /// Every blocking gap of the partition (more than `gaps` lists when truncated).
    pub blocking_gaps: u64,
    /// The newest record timestamp read on the partition since the ledger started.
    pub newest_ts: Option<i64>,
}

/// One partition as [`evaluate`] needs it.
#[derive(Debug, Clone)]
pub struct PartitionInput {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// The ledger's aggregate.
    pub ledger: LedgerCompleteness,
    /// The auditor has read the partition up to the log end it last learnt.
    pub caught_up: bool,
    /// Why it has not, when something other than the auditor's own pace is known to stop
    /// it (an open transaction holding the last stable offset).
    pub unread_cause: Option<String>,
}

/// What holds completeness back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockerKind {
    /// A gap with records missing or dead-lettered.
    Gap,
    /// Records read and not confirmed yet (lag, grace, a sink that does not answer).
    Pending,
    /// Records not read yet: the auditor is behind the partition's log end.
    Unread,
}

/// One thing that holds completeness back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocker {
    /// A gap id, or `pending:<topic>-<partition>`.
    pub id: String,
    /// What it is.
    pub kind: BlockerKind,
    /// The record time it holds completeness back at.
    pub since: Since,
    /// Gaps: records still missing.
    pub missing: Option<u64>,
    /// Gaps: their state.
    pub state: Option<GapState>,
    /// Unread: what stops the auditor reading, when known.
    pub cause: Option<String>,
}

/// An audit's completeness after one round, as the status board publishes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditCompleteness {
    /// Everything expected with a record time before this (unix ms) is confirmed; `None`:
    /// unknown (nothing assigned, nothing read yet, or a hold at an unknown time).
    pub complete_until_ms: Option<i64>,
    /// Every blocker the ledgers listed, earliest first.
    pub blockers: Vec<Blocker>,
    /// Among partitions with more blocking gaps than listed, the latest listed gap's time of
    /// the one that lists the least: an `until` after it may be blocked by unlisted gaps.
    pub unlisted_gaps_from: Option<Since>,
    /// Partitions this instance owns.
    pub partitions: usize,
    /// Which partitions those are, per topic: what this answer speaks for.
    pub covers: BTreeMap<String, Vec<i32>>,
    /// How many partitions each audited topic has, as this instance last read it from
    /// Kafka's metadata (set by the audit loop; empty: unknown). With `covers` it lets
    /// several instances' answers be checked for a partition nobody speaks for.
    pub topic_partitions: BTreeMap<String, usize>,
}

/// Combines the partitions of one audit at `now_ms` (see the module docs). `horizon_ms`: how
/// long a record produced to an idle partition may take to appear in its log end as the
/// auditor sees it.
pub fn evaluate(
    audit: &str,
    parts: &[PartitionInput],
    now_ms: i64,
    horizon_ms: i64,
) -> AuditCompleteness {
    let idle_floor = now_ms.saturating_sub(horizon_ms.max(0));
    let mut hold: Option<Since> = None;
    let mut blockers = Vec::new();
    let mut unlisted: Option<Since> = None;
    for p in parts {
        let l = &p.ledger;
        for g in &l.gaps {
            lower(&mut hold, g.since);
            blockers.push(Blocker {
                id: crate::gap::Gap::make_id_in(audit, &p.topic, p.partition, g.first, g.epoch),
                kind: BlockerKind::Gap,
                since: g.since,
                missing: Some(g.missing),
                state: Some(g.state),
                cause: None,
            });
        }
        if l.blocking_gaps > l.gaps.len() as u64
            && let Some(last) = l.gaps.last()
        {
            unlisted = Some(unlisted.map_or(last.since, |u| u.min(last.since)));
        }
        // Records beyond what was read are unknown: held at the newest one read (the
        // partition's records are taken to be appended in timestamp order).
        let unread = (!p.caught_up).then(|| Since::of(l.newest_ts));
        let pending = match (l.pending, unread) {
            (Some(s), u) => Some((BlockerKind::Pending, u.map_or(s, |u| s.min(u)))),
            (None, Some(u)) => Some((BlockerKind::Unread, u)),
            (None, None) => None,
        };
        if let Some((kind, since)) = pending {
            lower(&mut hold, since);
            blockers.push(Blocker {
                id: pending_id(&p.topic, p.partition),
                kind,
                since,
                missing: None,
                state: None,
                cause: (kind == BlockerKind::Unread)
                    .then(|| p.unread_cause.clone())
                    .flatten(),
            });
        }
        if p.caught_up {
            // Idle or not, what was read is all there is (up to the horizon): the partition
            // is complete up to its newest record, and up to `now − horizon` when quiet.
            let own = l.newest_ts.map_or(idle_floor, |n| n.max(idle_floor));
            lower(&mut hold, Since::At(own));
        }
    }
    blockers.sort_by(|a, b| a.since.cmp(&b.since).then_with(|| a.id.cmp(&b.id)));
    let mut covers: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for p in parts {
        covers.entry(p.topic.clone()).or_default().push(p.partition);
    }
    for ps in covers.values_mut() {
        ps.sort_unstable();
        ps.dedup();
    }
    AuditCompleteness {
        // Never ahead of the wall clock, whatever a timestamp claims.
        complete_until_ms: hold.and_then(Since::ms).map(|cu| cu.min(now_ms)),
        blockers,
        unlisted_gaps_from: unlisted,
        partitions: parts.len(),
        covers,
        topic_partitions: BTreeMap::new(),
    }
}

fn lower(hold: &mut Option<Since>, s: Since) {
    *hold = Some(hold.map_or(s, |h| h.min(s)));
}

/// The `blocking` entry of records not confirmed yet on a partition.
pub fn pending_id(topic: &str, partition: i32) -> String {
    format!("pending:{topic}-{partition}")
}

/// One blocker in an [`Answer`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockerView {
    /// A gap id, or `pending:<topic>-<partition>`.
    pub id: String,
    /// `gap`, `pending` or `unread`.
    pub kind: BlockerKind,
    /// The record time it holds completeness back at (`null`: unknown, i.e. any time).
    pub since: Option<DateTime<Utc>>,
    /// Gaps: records still missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing_records: Option<u64>,
    /// Gaps: their state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// `unread`: what stops the auditor reading, when known (an open transaction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
}

/// `GET /api/completeness?audit=NAME&until=T`: is everything produced before `until` in the
/// sink, and if not, what holds it back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// The audit.
    pub audit: String,
    /// The time asked about.
    pub until: DateTime<Utc>,
    /// Every expected record with a timestamp before `until` is confirmed in the sink.
    pub complete: bool,
    /// The sink is proven complete up to this record time (`null`: unknown).
    pub complete_until: Option<DateTime<Utc>>,
    /// What blocks `until`: gap ids, and `pending` followed by each
    /// `pending:<topic>-<partition>`, earliest first.
    pub blocking: Vec<String>,
    /// The same, with their record times, gap states and sizes.
    pub blockers: Vec<BlockerView>,
    /// More blocking gaps exist than are listed (an incident with many gaps).
    #[serde(default)]
    pub truncated: bool,
    /// Partitions this instance owns (0: it cannot say anything about the audit).
    #[serde(default)]
    pub partitions: usize,
    /// The partitions this answer speaks for, per topic. `complete` is about these only:
    /// across instances, the answers must cover every partition of every audited topic
    /// (see [`coverage`]). Missing from an older daemon's answer: it covers nothing.
    #[serde(default)]
    pub covers: BTreeMap<String, Vec<i32>>,
    /// Partitions per audited topic, as this instance last read Kafka's metadata (empty:
    /// unknown).
    #[serde(default)]
    pub topic_partitions: BTreeMap<String, usize>,
    /// One sentence for a human.
    #[serde(default)]
    pub reason: String,
}

impl Answer {
    /// Whether a gap (not lag) blocks `until`.
    pub fn blocked_by_gap(&self) -> bool {
        self.blockers.iter().any(|b| b.kind == BlockerKind::Gap)
    }
}

/// How a blocking gap's records are absent, by its state name: `dead-lettered` ones were
/// rejected by the pipeline on purpose, any other state's are `missing`.
pub fn not_in_sink(state: &str) -> &'static str {
    if state == GapState::DeadLettered.as_str() {
        "dead-lettered"
    } else {
        "missing"
    }
}

/// `blocking` as SPEC names it: gap ids, and `"pending"` for records not confirmed yet,
/// followed here by the partitions holding them (`pending:<topic>-<partition>`), so that a
/// client testing for `"pending"` and one reading which partition both find theirs.
fn blocking_ids(blockers: &[BlockerView]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(blockers.len() + 1);
    for b in blockers {
        if b.kind != BlockerKind::Gap && !out.iter().any(|x| x == "pending") {
            out.push("pending".to_string());
        }
        out.push(b.id.clone());
    }
    out
}

fn time(ms: i64) -> Option<DateTime<Utc>> {
    Utc.timestamp_millis_opt(ms).single()
}

/// The answer for `until_ms` from an audit's published completeness.
pub fn answer(audit: &str, c: &AuditCompleteness, until_ms: i64) -> Answer {
    let complete = c.complete_until_ms.is_some_and(|cu| until_ms <= cu);
    let blockers: Vec<BlockerView> = c
        .blockers
        .iter()
        .filter(|b| b.since.before(until_ms))
        .map(|b| BlockerView {
            id: b.id.clone(),
            kind: b.kind,
            since: b.since.ms().and_then(time),
            missing_records: b.missing,
            state: b.state.map(|s| s.as_str().to_string()),
            cause: b.cause.clone(),
        })
        .collect();
    let truncated = c.unlisted_gaps_from.is_some_and(|s| s.before(until_ms));
    let until = time(until_ms).unwrap_or_else(Utc::now);
    let complete_until = c.complete_until_ms.and_then(time);
    let reason = reason(c, complete, until, complete_until, &blockers);
    Answer {
        audit: audit.to_string(),
        until,
        complete,
        complete_until,
        blocking: blocking_ids(&blockers),
        blockers,
        truncated,
        partitions: c.partitions,
        covers: c.covers.clone(),
        topic_partitions: c.topic_partitions.clone(),
        reason,
    }
}

fn reason(
    c: &AuditCompleteness,
    complete: bool,
    until: DateTime<Utc>,
    complete_until: Option<DateTime<Utc>>,
    blockers: &[BlockerView],
) -> String {
    let at = |t: Option<DateTime<Utc>>| {
        t.map_or_else(
            || "an unknown time".to_string(),
            |t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        )
    };
    if complete {
        let others = match cover::own_coverage(c) {
            Coverage::Full => String::new(),
            Coverage::Missing { total, .. } => format!(
                "; for the partitions this instance owns only: {total} other partition(s) are read by other instances"
            ),
            Coverage::Unknown => {
                "; for the partitions this instance owns only: the topics' partition counts are not known yet".to_string()
            }
        };
        return format!(
            "complete: every record produced before {} is in the sink (proven up to {}){others}",
            at(Some(until)),
            at(complete_until)
        );
    }
    let gaps: Vec<&BlockerView> = blockers
        .iter()
        .filter(|b| b.kind == BlockerKind::Gap)
        .collect();
    if let Some(g) = gaps.first() {
        return format!(
            "blocked by {} gap(s); the first, {}, is {} with {} record(s) {} from {}",
            gaps.len(),
            g.id,
            g.state.as_deref().unwrap_or("open"),
            g.missing_records.unwrap_or(0),
            not_in_sink(g.state.as_deref().unwrap_or("open")),
            at(g.since)
        );
    }
    if let Some(p) = blockers.first() {
        let what = match (p.kind, &p.cause) {
            (BlockerKind::Unread, Some(cause)) => cause.as_str(),
            (BlockerKind::Unread, None) => "the auditor has not read it to its log end yet",
            _ => "records not confirmed yet (pipeline lag, grace, or a sink that does not answer)",
        };
        return format!(
            "not yet: {} holds it back at {}: {what}",
            p.id.trim_start_matches("pending:"),
            at(p.since)
        );
    }
    if c.partitions == 0 {
        return "unknown: this instance owns no partition of the audit (starting, between \
                assignments, or another instance reads them); it proves nothing"
            .to_string();
    }
    format!(
        "not yet: proven up to {}; no record at or after {} has been confirmed, and quiet \
         partitions count only up to now minus grace and the polling delays",
        at(complete_until),
        at(Some(until))
    )
}

/// What `gap-auditor wait` does after one poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Exit 0: complete.
    Complete,
    /// Exit 1: a gap blocks it (the ids).
    Blocked(Vec<String>),
    /// Poll again (or exit 3 at the timeout).
    NotYet,
}

/// Combines the answers of every instance serving an audit (each owns some partitions):
/// complete only when the answers together cover every partition of every audited topic
/// and every answer that covers some is complete; a gap anywhere blocks. An instance that
/// owns nothing (between assignments) proves nothing: partitions moving to it are covered
/// by nobody, so the wait goes on rather than pass over them.
pub fn decide(answers: &[Answer]) -> Decision {
    let gaps: Vec<String> = answers
        .iter()
        .flat_map(|a| {
            a.blockers
                .iter()
                .filter(|b| b.kind == BlockerKind::Gap)
                .map(|b| b.id.clone())
        })
        .collect();
    if !gaps.is_empty() {
        return Decision::Blocked(gaps);
    }
    let owning: Vec<&Answer> = answers.iter().filter(|a| a.partitions > 0).collect();
    let covered = coverage(answers) == Coverage::Full;
    if covered && !owning.is_empty() && owning.iter().all(|a| a.complete) {
        Decision::Complete
    } else {
        Decision::NotYet
    }
}

#[cfg(test)]
mod tests;
