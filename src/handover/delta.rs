//! Record format 2 (issue 41 item 3): a partition's state as a *base* (a whole state, under
//! the partition's own key, single or chunked as in version 1) plus *deltas*, each under its
//! own key `{base key}\0d\0{generation}` (single or chunked likewise), each naming the base
//! generation it applies to and holding only what changed since the publish before it: the
//! settled watermark and ledger head always (small), the ledger's missing runs and gaps that
//! changed (or all of them when the ledger was replaced), the reported gaps that changed and
//! the ids of those that no longer need handing over. An idle round publishes one small
//! delta, not every gap again.
//!
//! Each delta is complete or absent for the reader (a chunked delta counts only whole, as a
//! chunk set does), and never overwritten in place: a crash mid-publish leaves the state of
//! the publish before it. The reader applies, to the latest complete base, every complete
//! delta naming that base's id in generation order ([`apply`]), each only over a state that
//! holds the generation it was built on ([`PartitionState::prev`]); deltas of other bases
//! are left over from before a rebase (or another owner's) and skipped. A delta of the base
//! that does not decode, a hole in the chain, or a record of a higher ownership term than
//! the base makes the partition's handover unusable: the new owner falls back to its store,
//! never to a mixture. Once the deltas of a chain outweigh its base (at least
//! [`REBASE_MIN_BYTES`]) or, on a topic deleting by retention, it took deltas for
//! [`REBASE_EVERY`], the next publish is a new
//! base, and the old chain's deltas are deleted (tombstones) once it is acknowledged: what
//! a takeover reads stays within about twice the partition's state.

use super::PartitionState;
use crate::gap::Gap;
use crate::handover::codec::Slots;
use crate::types::Offset;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Deltas below this many bytes in all never make a new base (a base of a few gaps would
/// otherwise be rewritten every few rounds).
pub const REBASE_MIN_BYTES: u64 = 1 << 20;

/// On a topic whose `cleanup.policy` deletes by time, a chain that took deltas is given a
/// new base at least this often, whatever their size, so the topic still holds a recent
/// base (see docs/SCALING.md). A compacted-only topic keeps the base: no timer there. An hour: a few bases a day even of a partition of 100,000 open gaps
/// (tens of MB each) is small next to one idle round a second; shorter would make those
/// bases the topic's main traffic.
pub const REBASE_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// A delta's identity: its generation and the id of the base it applies to.
pub type DeltaId = (u64, String);

/// What one process knows of a partition's chain on the handover topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chain {
    /// A base this process published and the broker acknowledged: deltas may follow it.
    /// Never a base another owner wrote (each owner starts its own chain: a zombie owner
    /// still writing on its chain can then never write into the new owner's).
    pub live: bool,
    /// Generation of the base the deltas apply to.
    pub base: u64,
    /// Id of that base ([`PartitionState::base_id`]).
    pub base_id: String,
    /// Generation of the chain's last publish the broker acknowledged: the next delta is
    /// built on it ([`PartitionState::prev`]).
    pub last: u64,
    /// Read at assignment: the highest ownership term of the partition's records.
    pub term: u64,
    /// Size of the base document.
    pub base_bytes: u64,
    /// Size of the deltas written on it.
    pub delta_bytes: u64,
    /// The delta keys that may hold records (delta, what they hold), of this chain or
    /// older ones: deleted once a new base is acknowledged.
    pub deltas: Vec<(DeltaId, Slots)>,
    /// When the base was acknowledged (for [`REBASE_EVERY`]).
    pub based_at: Option<std::time::Instant>,
}

impl Chain {
    /// Whether the next publish must be a base: none is known, the deltas outweigh it, or
    /// — `timed`: the topic deletes by retention — the chain took deltas for
    /// [`REBASE_EVERY`]. On a compacted-only topic the base stays for ever, and a timed
    /// rebase would send the whole state (tens of MB at 100,000 open gaps) on an otherwise
    /// idle round.
    pub fn wants_base(&self, now: std::time::Instant, timed: bool) -> bool {
        !self.live
            || self.delta_bytes > self.base_bytes.max(REBASE_MIN_BYTES)
            || (timed
                && self.delta_bytes > 0
                && self
                    .based_at
                    .is_some_and(|t| now.saturating_duration_since(t) >= REBASE_EVERY))
    }

    /// A base of generation `generation`, id `id` and `bytes` bytes was acknowledged: the
    /// chain starts on it. Returns the deltas of older chains, to delete.
    pub fn base_confirmed(
        &mut self,
        generation: u64,
        id: &str,
        bytes: u64,
        now: std::time::Instant,
    ) -> Vec<(DeltaId, Slots)> {
        let old = std::mem::take(&mut self.deltas);
        *self = Chain {
            live: true,
            base: generation,
            base_id: id.to_string(),
            last: generation,
            term: self.term,
            base_bytes: bytes,
            delta_bytes: 0,
            deltas: Vec::new(),
            based_at: Some(now),
        };
        old
    }

    /// A base publish failed. It may have landed all the same (a timeout says nothing of
    /// the broker's side): deltas on the old base would then be skipped by every reader,
    /// the state frozen at that base. So the next publish is a base again, with a new id.
    pub fn base_failed(&mut self) {
        self.live = false;
    }

    /// A delta of generation `generation` and `bytes` bytes on this chain was acknowledged.
    pub fn delta_confirmed(&mut self, generation: u64, bytes: u64) {
        self.last = self.last.max(generation);
        self.delta_bytes += bytes;
    }
}

/// The offset a ledger item is keyed by: a missing run's `run.first`, a gap's `first`.
fn item_first(item: &serde_json::Value) -> Option<Offset> {
    item.get("first")
        .or_else(|| item.get("run").and_then(|r| r.get("first")))
        .and_then(serde_json::Value::as_i64)
}

/// Fields of a ledger document that hold items, or say which items a delta removes.
const ITEM_FIELDS: [&str; 5] = [
    "missing",
    "gaps",
    "missing_removed",
    "gaps_removed",
    "replace",
];

/// Ledger items of `field` in `doc` by first offset.
fn items(doc: &serde_json::Value, field: &str) -> BTreeMap<Offset, serde_json::Value> {
    let mut out = BTreeMap::new();
    if let Some(serde_json::Value::Array(a)) = doc.get(field) {
        for (i, item) in a.iter().enumerate() {
            // An item without an offset cannot be keyed: kept (below every real offset) so
            // the ledger's own reader reports it, as it would in a whole state.
            let k = item_first(item).unwrap_or(i64::MIN + i as i64);
            out.insert(k, item.clone());
        }
    }
    out
}

fn offsets(doc: &serde_json::Value, field: &str) -> Vec<Offset> {
    match doc.get(field) {
        Some(serde_json::Value::Array(a)) => {
            a.iter().filter_map(serde_json::Value::as_i64).collect()
        }
        _ => Vec::new(),
    }
}

/// The head of a ledger document: every field but the items.
fn head(doc: &serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    doc.as_object()
        .map(|o| {
            o.iter()
                .filter(|(k, _)| !ITEM_FIELDS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// A whole state being rebuilt from a base and its deltas, each delta applied in time
/// proportional to its own size (a chain may hold thousands of deltas on a base of a
/// hundred thousand gaps).
#[derive(Debug)]
pub struct Rebuild {
    /// The latest document's own fields (its gaps, ledger and marks are kept below).
    last: PartitionState,
    head: serde_json::Map<String, serde_json::Value>,
    missing: BTreeMap<Offset, serde_json::Value>,
    ledger_gaps: BTreeMap<Offset, serde_json::Value>,
    gaps: HashMap<String, Gap>,
    replayed: BTreeSet<String>,
    retired: BTreeSet<String>,
}

impl Rebuild {
    /// Starts from a whole state (a base).
    pub fn new(mut whole: PartitionState) -> Rebuild {
        let head = head(&whole.ledger);
        let missing = items(&whole.ledger, "missing");
        let ledger_gaps = items(&whole.ledger, "gaps");
        let gaps = std::mem::take(&mut whole.gaps)
            .into_iter()
            .map(|g| (g.id.clone(), g))
            .collect();
        let replayed = std::mem::take(&mut whole.replayed).into_iter().collect();
        let retired = std::mem::take(&mut whole.retired).into_iter().collect();
        whole.ledger = serde_json::Value::Null;
        Rebuild {
            last: whole,
            head,
            missing,
            ledger_gaps,
            gaps,
            replayed,
            retired,
        }
    }

    /// Applies delta `d`: its head fields replace the head; its ledger items replace
    /// items at the same first offset (all items when it says `replace`) and its
    /// `*_removed` offsets go; its gaps replace gaps of the same id (with their marks) and
    /// its `removed` ids go; its settled offset, key claims and generation are the state's.
    pub fn apply(&mut self, mut d: PartitionState) {
        let replace = d.ledger.get("replace").and_then(serde_json::Value::as_bool) == Some(true);
        self.head = head(&d.ledger);
        for (field, removed, m) in [
            ("missing", "missing_removed", &mut self.missing),
            ("gaps", "gaps_removed", &mut self.ledger_gaps),
        ] {
            if replace {
                m.clear();
            }
            for o in offsets(&d.ledger, removed) {
                m.remove(&o);
            }
            m.extend(items(&d.ledger, field));
        }
        for id in d.removed.iter().chain(d.gaps.iter().map(|g| &g.id)) {
            self.gaps.remove(id);
            self.replayed.remove(id);
            self.retired.remove(id);
        }
        self.gaps.extend(
            std::mem::take(&mut d.gaps)
                .into_iter()
                .map(|g| (g.id.clone(), g)),
        );
        self.replayed.extend(std::mem::take(&mut d.replayed));
        self.retired.extend(std::mem::take(&mut d.retired));
        if d.claims_kept {
            d.key_claims = std::mem::take(&mut self.last.key_claims);
        }
        d.ledger = serde_json::Value::Null;
        d.removed = Vec::new();
        self.last = d;
    }

    /// The whole state of the last generation applied.
    pub fn finish(self) -> PartitionState {
        let mut ledger = self.head;
        ledger.insert(
            "missing".into(),
            serde_json::Value::Array(self.missing.into_values().collect()),
        );
        ledger.insert(
            "gaps".into(),
            serde_json::Value::Array(self.ledger_gaps.into_values().collect()),
        );
        let mut gaps: Vec<Gap> = self.gaps.into_values().collect();
        gaps.sort_by(|a, b| (a.first_offset, &a.id).cmp(&(b.first_offset, &b.id)));
        PartitionState {
            ledger: serde_json::Value::Object(ledger),
            gaps,
            replayed: self.replayed.into_iter().collect(),
            retired: self.retired.into_iter().collect(),
            base: None,
            prev: None,
            removed: Vec::new(),
            claims_kept: false,
            ..self.last
        }
    }
}

/// `whole` (a base, or a base with deltas applied) with delta `d` applied: a whole state of
/// `d`'s generation (see [`Rebuild::apply`]).
pub fn apply(whole: PartitionState, d: PartitionState) -> PartitionState {
    let mut r = Rebuild::new(whole);
    r.apply(d);
    r.finish()
}

#[cfg(test)]
mod tests;
