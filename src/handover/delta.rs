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
//! delta of that base in generation order ([`apply`]); deltas of other bases are left over
//! from before a rebase and skipped. Once the deltas of a chain outweigh its base (at least
//! [`REBASE_MIN_BYTES`]), the next publish is a new base, and the old chain's deltas are
//! deleted (tombstones) once it is acknowledged: what a takeover reads stays within about
//! twice the partition's state.

use super::*;
use std::collections::BTreeMap;

/// Deltas below this many bytes in all never make a new base (a base of a few gaps would
/// otherwise be rewritten every few rounds).
pub const REBASE_MIN_BYTES: u64 = 1 << 20;

/// What one process knows of a partition's chain on the handover topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chain {
    /// A base is known (read, or published by this process): deltas may follow it.
    pub live: bool,
    /// Generation of the base the deltas apply to.
    pub base: u64,
    /// Size of the base document.
    pub base_bytes: u64,
    /// Size of the deltas written on it.
    pub delta_bytes: u64,
    /// The delta keys that may hold records (generation, what they hold), of this chain or
    /// older ones: deleted once a new base is acknowledged.
    pub deltas: Vec<(u64, Slots)>,
    /// A new base is not tried before the deltas reach this size (raised after a base
    /// publish failed, so a partition too large to rebase within the produce timeout keeps
    /// publishing deltas and its commit keeps moving).
    pub rebase_after: u64,
}

impl Chain {
    /// Whether the next publish must be a base: none is known, or the deltas outweigh it.
    pub fn wants_base(&self) -> bool {
        !self.live
            || self.delta_bytes > self.base_bytes.max(REBASE_MIN_BYTES).max(self.rebase_after)
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

/// The ledger of `whole` with delta ledger `d` applied: `d`'s head fields replace the
/// head; its items replace items at the same first offset (all items when `d` says
/// `replace`), its `*_removed` offsets go.
fn apply_ledger(whole: &serde_json::Value, d: &serde_json::Value) -> serde_json::Value {
    let replace = d.get("replace").and_then(serde_json::Value::as_bool) == Some(true);
    let mut out = serde_json::Map::new();
    // Head: the delta's (fields the writer left out are absent, as in its ledger).
    if let Some(o) = d.as_object() {
        for (k, v) in o {
            if !ITEM_FIELDS.contains(&k.as_str()) {
                out.insert(k.clone(), v.clone());
            }
        }
    }
    for (field, removed) in [("missing", "missing_removed"), ("gaps", "gaps_removed")] {
        let mut m = if replace {
            BTreeMap::new()
        } else {
            items(whole, field)
        };
        for o in offsets(d, removed) {
            m.remove(&o);
        }
        m.extend(items(d, field));
        out.insert(
            field.to_string(),
            serde_json::Value::Array(m.into_values().collect()),
        );
    }
    serde_json::Value::Object(out)
}

/// `whole` (a base, or a base with deltas applied) with delta `d` applied: a whole state of
/// `d`'s generation.
pub fn apply(whole: PartitionState, d: PartitionState) -> PartitionState {
    let ledger = apply_ledger(&whole.ledger, &d.ledger);
    let changed: HashSet<&str> = d
        .removed
        .iter()
        .chain(d.gaps.iter().map(|g| &g.id))
        .map(String::as_str)
        .collect();
    let mut gaps: BTreeMap<String, Gap> = whole
        .gaps
        .into_iter()
        .filter(|g| !changed.contains(g.id.as_str()))
        .map(|g| (g.id.clone(), g))
        .collect();
    let keep_mark = |ids: Vec<String>, new: &[String]| -> Vec<String> {
        let mut v: Vec<String> = ids
            .into_iter()
            .filter(|id| !changed.contains(id.as_str()))
            .chain(new.iter().cloned())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let replayed = keep_mark(whole.replayed, &d.replayed);
    let retired = keep_mark(whole.retired, &d.retired);
    gaps.extend(d.gaps.into_iter().map(|g| (g.id.clone(), g)));
    let mut gaps: Vec<Gap> = gaps.into_values().collect();
    gaps.sort_by_key(|g| g.first_offset);
    PartitionState {
        version: d.version,
        audit: d.audit,
        topic: d.topic,
        partition: d.partition,
        settled: d.settled,
        ledger,
        gaps,
        replayed,
        retired,
        key_claims: d.key_claims,
        generation: d.generation,
        base: None,
        removed: Vec::new(),
        written_at: d.written_at,
        owner: d.owner,
    }
}

#[cfg(test)]
mod tests;
