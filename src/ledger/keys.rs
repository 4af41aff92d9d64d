//! The audit-wide key multiset of `key_columns` (SPEC "Matching strategies"), pure.
//!
//! Sink rows carry no Kafka coordinates, so a row only says "some record with this key was
//! written". Records sharing a key are therefore matched against that key's rows as a
//! multiset over the whole AUDIT — every partition, every round:
//!
//! - per key the book counts the records that are `pending` (ingested, not decided), the ones
//!   `confirmed` (each holds one row) and the ones `missing` (declared absent, re-checked);
//! - due records of a key with `rows` sink rows: `rows − confirmed` rows are free, and that
//!   many due records are confirmed; only the shortfall is missing. So a record is never
//!   declared missing while the sink holds at least as many rows for its key as there are
//!   due and confirmed records with it;
//! - a row beyond every record of its key is a duplicate, charged only once no record with the
//!   key is pending or missing anywhere (the row may still be the one that record needs);
//! - a missing record turns late when a free row appears;
//! - a key's claims never exceed the rows the sink last showed for it: every answer about a
//!   key (a due decision, a re-check, a claim refresh) caps its `confirmed` count at the
//!   rows it shows, so rows the sink deleted (a TTL, a `DELETE`, a dropped Doris partition)
//!   free the claims of the records they confirmed. A cap only frees rows, so it can only
//!   turn a later verdict towards "confirmed", never invent a loss;
//! - a record ingested while its key holds claims is queued for a *claim refresh*: its key
//!   is counted in the next round, before the record is due ([`KeyBook::take_refresh`]),
//!   so that a deletion that happened before the new row was written is seen as a key
//!   with fewer rows than claims. Row counts cannot tell "the old row was deleted and the
//!   new one written" from "the old row is there and the new write was lost" once both
//!   changes happened before a look: the claim then stands, and the new record is missing
//!   (docs/SEMANTICS.md, "rows deleted by the sink").
//!
//! Under `presence` semantics ([`KeySemantics::Presence`]: the table merges rows with equal
//! keys, an upsert table) a key's rows are not counted against its records: one row
//! confirms every record of the key, however many, and no row is ever a duplicate.
//!
//! What the book cannot know, and why it errs only towards "confirmed": records it has not
//! ingested yet (another partition read later, another instance's partitions) and keys it
//! has forgotten (see [`KeyBook::new`]) hold no claim on rows, so rows they own may confirm a
//! record that is really missing — a loss missed, never a loss invented. docs/SEMANTICS.md
//! states the limits.

use super::PartitionLedger;
use super::sharded::{ShardedMap, in_map_order};
use crate::key_semantics::KeySemantics;
use crate::time_scan::{TimeColumn, TimeReads};
use crate::types::Key;
use hashbrown::HashTable;
use hashbrown::hash_table::Entry as Slot;
use std::collections::VecDeque;

/// A key the store must write: `(key, confirmed, hash)`, the hash being the book's
/// ([`ShardedMap::hash`]).
type Dirty = (Key, u64, u64);

/// One key's records, as the book knows them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Entry {
    pending: u64,
    confirmed: u64,
    missing: u64,
    /// Extra rows already counted as duplicates (so a row is counted once). Saturating
    /// u32 (four billion extra rows of one key are not a count anyone reads), so that
    /// `stand_ins` fits beside it and the entry stays 40 bytes: the book holds up to
    /// millions of them.
    duplicates: u32,
    /// Confirmations held by records the dead-letter topic named ("present wins"): the row
    /// they were given may be another record's of the key, written while the named one was
    /// rejected. An absent record of the key decided later, on any partition, takes one of
    /// them and is dead-lettered as a stand-in instead of missing ([`Self::credit`],
    /// `DueOutcome::stand_ins`). Never more than `confirmed`.
    stand_ins: u32,
    /// Bumped whenever the entry becomes idle (nothing pending or missing), so a stale queue
    /// slot of an entry that was busy again since is recognised.
    idle_since: u64,
}

impl Entry {
    fn busy(&self) -> bool {
        self.pending > 0 || self.missing > 0
    }
}

/// What one decision about a key's due records found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DueOutcome {
    /// Due records confirmed (the first ones, in the order given).
    pub confirmed: u64,
    /// Extra rows newly counted as duplicates.
    pub duplicates: u64,
    /// Another record (on any partition, decided or not) carries the same key: a shortfall
    /// cannot say which of them is the absent one.
    pub shared: bool,
    /// Of the due records not confirmed, how many stand in for a dead-lettered record the
    /// book confirmed earlier (see `Entry::stand_ins`): dead-lettered, never missing.
    pub stand_ins: u64,
}

/// What one re-check of a key's missing records found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecheckOutcome {
    /// Missing records now found (late).
    pub late: u64,
    /// Extra rows newly counted as duplicates.
    pub duplicates: u64,
    /// Missing records still not found that stand in for a dead-lettered record the book
    /// confirmed since (see `Entry::stand_ins`): dead-lettered now, like a late arrival.
    pub stand_ins: u64,
}

/// The audit-wide multiset of keys (see the module docs).
#[derive(Debug, Clone)]
pub struct KeyBook {
    /// Sharded, so it grows a little at a time: one hash table doubles (and holds both
    /// tables while it moves), and in a total loss the live keys (pending +
    /// `max_missing_keys`) hover around a power of two: one doubling minutes into the
    /// incident added 15 MB, +15 % of the daemon's resident memory. A B-tree grows smoothly
    /// too, but at ~800 ns a key for a million keys it halved the tailing rate.
    entries: ShardedMap<Key, Entry>,
    /// Idle keys in the order they became idle; the oldest are forgotten beyond `capacity`.
    /// Each as its hash in `entries` and the stamp it went idle with, which together find
    /// its entry again (a stamp is given once): the queue holds no key, whose clone was
    /// one more cache miss for every key a round decided.
    idle: VecDeque<(u64, u64)>,
    capacity: usize,
    clock: u64,
    /// Keys whose confirmed count changed (or that were forgotten) since the last
    /// [`KeyBook::persisted`]: what the store must write in the same transaction as the
    /// settled offsets those confirmations lie below.
    /// Each with its confirmed count as of its last change (0: forgotten), so a write reads
    /// this map alone: looking each key up in `entries` again was a cache miss per confirmed
    /// key, the larger part of a round's store write on a million keys.
    /// Filed under the hash `entries` files the key under ([`ShardedMap::hash`]): a round
    /// marks every key it confirms, and a hash of its own cost each of them a second pass
    /// over the key's bytes (and a probe to find, another to insert). The hash is kept with
    /// the key, so the table grows without reading any key again.
    dirty: HashTable<Dirty>,
    /// Keys with a confirmed count above 0: what a whole write of the book holds.
    live: u64,
    /// Entries (claims) of the store's key log, dead ones included
    /// ([`Self::claims_to_write`]).
    log_rows: u64,
    /// Dead rows the log may hold beyond half the live ones before it is rewritten.
    rewrite_slack: u64,
    /// Whether the sink's rows are counted (multiset) or only seen (presence).
    semantics: KeySemantics,
    /// Keys that took a pending record while holding claims, oldest first (repeats allowed,
    /// dropped when taken): each is counted once early so that rows the sink deleted since
    /// its claims were made free them before the new record is decided
    /// ([`Self::take_refresh`]). Bounded by the records ingested between two rounds.
    refresh: Vec<Key>,
    /// Keys whose stand-in credits changed since [`Self::credits_written`], with their
    /// count now (0: none left, the store's row goes). Credits are rare (dead letters for
    /// records the book confirmed), so this stays small.
    credits_dirty: std::collections::HashMap<Key, u64>,
    /// The key column rows are read by time on, and the records read per bucket of it
    /// ([`crate::time_scan`]): `None` while keys are counted one by one.
    time: Option<TimeReads>,
    /// Distinct due keys counted since [`Self::take_counted`]: from reads by time, by key.
    counted: (u64, u64),
    /// Keys of records pended since the book last settled ([`Self::pend`],
    /// [`Self::settle`]), as `(the table's hash, the order pended, key)`; the order is the
    /// claim-refresh queue's. At most the records ingested between two rounds (every
    /// round's end settles), which `max_pending` bounds.
    unbooked: Vec<(u64, usize, Key)>,
}

/// Capacity of the pend buffer kept between settles (32 bytes an entry).
const UNBOOKED_KEPT: usize = 1 << 16;

/// Dead rows the store's key log may hold beyond half its live ones (see
/// [`KeyBook::claims_to_write`]): small books are never rewritten for a handful of rows.
pub const LOG_REWRITE_SLACK: u64 = 65_536;

/// What a round writes of the book ([`KeyBook::claims_to_write`]): `(key, confirmed)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimsWrite {
    /// The keys to write; 0 forgets a key.
    pub claims: Vec<(Key, u64)>,
    /// `claims` is the whole book: the store's log is replaced by it, not appended to.
    pub whole: bool,
}

impl Default for KeyBook {
    fn default() -> Self {
        Self::new(1_000_000)
    }
}

impl KeyBook {
    /// A book that remembers at most `capacity` idle keys (confirmed records only). Keys with
    /// pending or missing records are always kept: they are bounded by `max_pending` and by
    /// the missing records. Forgetting an idle key lets a later record with that key be
    /// confirmed by the forgotten record's row (a loss missed, never one invented).
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: ShardedMap::new(),
            idle: VecDeque::new(),
            capacity: capacity.max(1),
            clock: 0,
            dirty: HashTable::new(),
            live: 0,
            log_rows: 0,
            semantics: KeySemantics::Multiset,
            rewrite_slack: LOG_REWRITE_SLACK,
            refresh: Vec::new(),
            credits_dirty: std::collections::HashMap::new(),
            time: None,
            counted: (0, 0),
            unbooked: Vec::new(),
        }
    }

    /// Adds to the due keys counted (see [`Self::take_counted`]).
    pub fn note_counted(&mut self, by_time: u64, by_key: u64) {
        self.counted.0 += by_time;
        self.counted.1 += by_key;
    }

    /// Distinct due keys counted from reads by time and key by key since the last call.
    /// Called at every round's end, it also settles the records pended since (whatever the
    /// round asked of the book), so that they never wait longer than a round.
    pub fn take_counted(&mut self) -> (u64, u64) {
        self.settle();
        std::mem::take(&mut self.counted)
    }

    /// Reads due keys by time on `column` from now on ([`crate::time_scan`]), remembering
    /// the records read in up to `buckets` buckets of it; `None`: one by one.
    pub fn set_time_column(&mut self, column: Option<TimeColumn>, buckets: usize) {
        self.settle();
        self.time = column.map(|c| TimeReads::new(c, buckets));
    }

    /// The audit's reads by time, when due keys are read so.
    pub fn time_mut(&mut self) -> Option<&mut TimeReads> {
        self.settle();
        self.time.as_mut()
    }

    /// The key column due keys are read by time on, if they are.
    pub fn time_column(&self) -> Option<&TimeColumn> {
        self.time.as_ref().map(|t| &t.column)
    }

    /// How the sink table treats rows with equal keys (read from it at start, see
    /// [`crate::key_semantics`]).
    pub fn set_semantics(&mut self, semantics: KeySemantics) {
        self.settle();
        self.semantics = semantics;
    }

    /// How the book reads the sink's row counts.
    pub fn semantics(&self) -> KeySemantics {
        self.semantics
    }

    /// How many rows the store's key log holds (read with the book at start).
    pub fn set_log_rows(&mut self, rows: u64) {
        self.settle();
        self.log_rows = rows;
    }

    /// Sets the dead rows the log may hold beyond half the live ones (tests rewrite often;
    /// `u64::MAX` never rewrites: the store's claims could not be read, and a whole write
    /// would delete the ones this process never loaded).
    pub fn set_rewrite_slack(&mut self, rows: u64) {
        self.settle();
        self.rewrite_slack = rows;
    }

    /// What the next store write must hold. The store keeps the book as a log of changes
    /// (appending is what keeps a round's write sequential), and every change leaves a dead
    /// entry behind: once those outnumber half the live keys (plus a slack), the write holds
    /// the whole book instead and the log starts again from it. The log then never holds
    /// more than 1.5 times the live keys plus the slack (what a restart reads, and holds in
    /// memory while it does), and each changed key costs at most about three claim writes
    /// in all.
    pub fn claims_to_write(&self) -> ClaimsWrite {
        let grown = self.log_rows.saturating_add(self.dirty.len() as u64);
        let bound = self
            .live
            .saturating_add(self.live / 2)
            .saturating_add(self.rewrite_slack);
        if self.has_changes() && grown > bound {
            let claims = self
                .entries
                .iter()
                .filter(|(_, e)| e.confirmed > 0)
                .map(|(k, e)| (k.clone(), e.confirmed))
                .collect();
            return ClaimsWrite {
                claims,
                whole: true,
            };
        }
        ClaimsWrite {
            claims: self.changes(),
            whole: false,
        }
    }

    /// The store now holds `w` (from [`Self::claims_to_write`]).
    pub fn written(&mut self, w: &ClaimsWrite) {
        self.settle();
        let rows = w.claims.len() as u64;
        self.log_rows = if w.whole {
            rows
        } else {
            self.log_rows.saturating_add(rows)
        };
        self.persisted();
    }

    /// Loads confirmed counts persisted with the settled offsets (a restart): the rows those
    /// records hold stay theirs, so a later record with the key needs a row of its own.
    pub fn load(&mut self, confirmed: impl IntoIterator<Item = (Key, u64)>) {
        self.settle();
        let before = std::mem::take(&mut self.dirty);
        for (k, n) in confirmed {
            if n == 0 {
                continue;
            }
            self.change(&k, |e| e.confirmed += n);
        }
        // Loaded counts are what the store holds already; keys forgotten while loading
        // (more rows than the capacity) stay dirty, so the next write deletes their rows.
        let loaded = std::mem::replace(&mut self.dirty, before);
        // Keys changed before the load and not written yet stay dirty, with the count the
        // book holds now (the load may have added to it).
        for (k, n, _) in self.dirty.iter_mut() {
            *n = self.entries.get(k).map_or(0, |e| e.confirmed);
        }
        for (k, _, _) in loaded {
            if !self.entries.contains_key(&k) {
                self.mark_dirty(&k, self.entries.hash(&k), 0);
            }
        }
    }

    /// At least `n` rows of `k` are held by confirmed records (another owner's claims, handed
    /// over with a partition).
    pub fn claim_at_least(&mut self, k: &Key, n: u64) {
        self.settle();
        self.change(k, |e| e.confirmed = e.confirmed.max(n));
    }

    /// A confirmation taken back: the record will be decided again (its partition left
    /// before the verdict could be stored, and resumes below it).
    pub fn unconfirm(&mut self, k: &Key) {
        self.settle();
        self.change(k, |e| {
            e.confirmed = e.confirmed.saturating_sub(1);
            cap_stand_ins(e);
        });
    }

    /// A record with key `k` the book confirmed is named by the dead-letter topic, and no
    /// absent record of its key in the same decision took its place (see
    /// `Entry::stand_ins`): its confirmation becomes a stand-in credit for the key's next
    /// absent record, whichever partition and round decides it. Also gives back a credit
    /// lent by [`Self::decide_due_all`] or [`Self::recheck_all`] that its record did not
    /// need (it was named itself). Nothing under presence semantics (one row confirms every
    /// record of the key: no record of it is absent while a row is there), nor for a key
    /// the book does not hold confirmed, nor beyond the key's records undecided or missing
    /// now: a record read later was not there when the named one took the row, so it
    /// cannot be the row's owner; the credits go when the key has none left
    /// (`change_hashed`).
    pub fn credit(&mut self, k: &Key) {
        self.settle();
        if self.semantics == KeySemantics::Presence {
            return;
        }
        if let Some(e) = self.entries.get_mut(k)
            && e.busy()
        {
            let before = e.stand_ins;
            // Only the key's records there now (undecided or missing) can hold the row.
            let others = u32::try_from(e.pending.saturating_add(e.missing)).unwrap_or(u32::MAX);
            e.stand_ins = e.stand_ins.saturating_add(1).min(others);
            cap_stand_ins(e);
            if e.stand_ins != before {
                self.credits_dirty.insert(k.clone(), u64::from(e.stand_ins));
            }
        }
    }

    /// Stand-in credits that changed since the last [`Self::credits_written`], `(key,
    /// credits)` (0: the key holds none now): what the store must write so that a restart
    /// keeps them.
    pub fn credits_to_write(&self) -> Vec<(Key, u64)> {
        self.credits_dirty
            .iter()
            .map(|(k, n)| (k.clone(), *n))
            .collect()
    }

    /// The store now holds `written` (from [`Self::credits_to_write`]); a key changed again
    /// since stays to be written.
    pub fn credits_written(&mut self, written: &[(Key, u64)]) {
        self.settle();
        for (k, n) in written {
            if self.credits_dirty.get(k) == Some(n) {
                self.credits_dirty.remove(k);
            }
        }
    }

    /// Loads stand-in credits the store kept (a restart), after [`Self::load`]: each capped
    /// at the key's confirmed count like any credit.
    pub fn load_credits(&mut self, credits: impl IntoIterator<Item = (Key, u64)>) {
        self.settle();
        if self.semantics == KeySemantics::Presence {
            return;
        }
        for (k, n) in credits {
            if let Some(e) = self.entries.get_mut(&k) {
                e.stand_ins = u32::try_from(n).unwrap_or(u32::MAX);
                cap_stand_ins(e);
            }
        }
    }

    /// Stand-in credits `k` holds (tests).
    pub fn stand_ins(&self, k: &Key) -> u64 {
        self.entries.get(k).map_or(0, |e| u64::from(e.stand_ins))
    }

    /// Confirmed counts changed since the last [`Self::persisted`], as `(key, confirmed)`;
    /// 0 means the key is no longer kept (delete it).
    pub fn changes(&self) -> Vec<(Key, u64)> {
        self.dirty.iter().map(|(k, n, _)| (k.clone(), *n)).collect()
    }

    /// Whether [`Self::changes`] has anything to write.
    pub fn has_changes(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// The store now holds [`Self::changes`].
    pub fn persisted(&mut self) {
        self.settle();
        self.dirty.clear();
    }

    /// Notes that the store must write `k` with `confirmed` (`h`: its [`ShardedMap::hash`]).
    fn mark_dirty(&mut self, k: &Key, h: u64, confirmed: u64) {
        match self.dirty.entry(h, |(x, _, _)| x == k, |(_, _, h)| *h) {
            Slot::Occupied(mut e) => e.get_mut().1 = confirmed,
            Slot::Vacant(e) => {
                e.insert((k.clone(), confirmed, h));
            }
        }
    }

    /// The count `k` is to be written with, if it is to be written.
    #[cfg(test)]
    fn dirty_count(&self, k: &Key) -> Option<u64> {
        self.dirty
            .find(self.entries.hash(k), |(x, _, _)| x == k)
            .map(|(_, n, _)| *n)
    }

    /// A record with key `k` was ingested and waits for its verdict.
    ///
    /// Entered in the table by the next other call on the book ([`Self::settle`]), all
    /// such keys at once: the daemon's hot path on key_columns, where one insert per
    /// ingested record into a table of a million keys missed the cache two or three times
    /// (a third of the audit task's samples).
    pub fn pend(&mut self, k: &Key) {
        if let Some(t) = &mut self.time
            && let Some(b) = t.column.bucket(k)
        {
            t.density.add(b);
        }
        let seq = self.unbooked.len();
        self.unbooked.push((self.entries.hash(k), seq, k.clone()));
    }

    /// Enters the keys [`Self::pend`] queued, in the table's order ([`in_map_order`]):
    /// they go through it shard by shard, each small table visited once from the cache,
    /// and a new key is moved in without its bytes being read. Every other call on the book settles first,
    /// so nothing can tell a settled book from one pended record by record: distinct keys'
    /// pends commute, and the claim-refresh queue takes its keys in the order pended.
    fn settle(&mut self) {
        if self.unbooked.is_empty() {
            return;
        }
        let mut pends = std::mem::take(&mut self.unbooked);
        in_map_order(&mut pends, |p| p.0);
        let multiset = self.semantics == KeySemantics::Multiset;
        let mut refresh: Vec<(usize, Key)> = Vec::new();
        for (h, seq, k) in pends.drain(..) {
            let (k, e) = self.entries.get_or_insert_hashed(k, h);
            e.pending += 1;
            // Claims from earlier records: the key is looked at before this record is
            // decided (see the module docs). Under presence claims decide nothing.
            if e.confirmed > 0 && multiset {
                refresh.push((seq, k.clone()));
            }
        }
        refresh.sort_unstable_by_key(|r| r.0);
        self.refresh.extend(refresh.into_iter().map(|(_, k)| k));
        // The buffer is kept for the next records unless an incident made it large.
        if pends.capacity() <= UNBOOKED_KEPT {
            self.unbooked = pends;
        }
    }

    /// Up to `max` distinct keys to count for a claim refresh (see the module docs), oldest
    /// first; the rest wait for the next round. Keys that hold no claim any more, or whose
    /// new records were decided meanwhile (their decision counted them), are dropped.
    pub fn take_refresh(&mut self, max: usize) -> Vec<Key> {
        self.settle();
        if self.refresh.is_empty() {
            return Vec::new();
        }
        let queued = std::mem::take(&mut self.refresh);
        let mut seen: foldhash::HashSet<Key> = foldhash::HashSet::default();
        let mut taken = Vec::new();
        for k in queued {
            let wanted = self
                .entries
                .get(&k)
                .is_some_and(|e| e.confirmed > 0 && e.pending > 0);
            if !wanted || !seen.insert(k.clone()) {
                continue;
            }
            if taken.len() < max {
                taken.push(k);
            } else {
                self.refresh.push(k);
            }
        }
        taken
    }

    /// Queues keys taken by [`Self::take_refresh`] again (the sink could not be asked).
    pub fn requeue_refresh(&mut self, keys: Vec<Key>) {
        self.settle();
        let later = std::mem::replace(&mut self.refresh, keys);
        self.refresh.extend(later);
    }

    /// Keys waiting for a claim refresh (repeats included; tests, bounds).
    pub fn refresh_queued(&mut self) -> usize {
        self.settle();
        self.refresh.len()
    }

    /// Caps the claims of distinct keys at the rows the sink showed for each, `(key, rows)`:
    /// what a claim refresh found. Decides no record. Returns the claims freed per key, in
    /// the order given.
    pub fn cap_all(&mut self, asks: &[(&Key, u64)]) -> Vec<u64> {
        self.settle();
        let asks: Vec<(&Key, u64, u64)> = asks.iter().map(|&(k, rows)| (k, 0, rows)).collect();
        self.decide_all(&asks, Self::cap_hashed)
    }

    fn cap_hashed(&mut self, k: &Key, h: u64, _: u64, rows: u64) -> (u64, Option<u64>) {
        let mut freed = 0;
        let presence = self.semantics == KeySemantics::Presence;
        let idle = self.change_hashed(k, h, |e| {
            freed = cap_claims(e, rows_seen(presence, e, rows));
        });
        (freed, idle)
    }

    /// A pending record left without a verdict (its partition was revoked or reset).
    pub fn unpend(&mut self, k: &Key) {
        self.settle();
        self.change(k, |e| e.pending = e.pending.saturating_sub(1));
    }

    /// A missing record restored from the store or a handover: it is missing again here.
    pub fn restore_missing(&mut self, k: &Key) {
        self.settle();
        self.entries.get_or_default(k).missing += 1;
    }

    /// A missing record is no longer followed (given up, or its partition left): it stays in
    /// its gap but holds no claim any more.
    pub fn forget_missing(&mut self, k: &Key) {
        self.settle();
        self.change(k, |e| e.missing = e.missing.saturating_sub(1));
    }

    /// Decides `due` pending records with key `k`, the sink holding `rows` rows for it. The
    /// first `confirmed` of them are present, the rest missing.
    pub fn decide_due(&mut self, k: &Key, due: u64, rows: u64) -> DueOutcome {
        self.settle();
        let (out, idle) = self.decide_due_hashed(k, self.entries.hash(k), due, rows);
        self.queue_idle(k, idle);
        out
    }

    /// [`Self::decide_due`] for many distinct keys, `(key, due, rows)` each; the outcomes in
    /// the order given (see [`Self::decide_all`]).
    pub fn decide_due_all(&mut self, asks: &[(&Key, u64, u64)]) -> Vec<DueOutcome> {
        self.settle();
        self.decide_all(asks, Self::decide_due_hashed)
    }

    /// [`Self::recheck`] for many distinct keys, `(key, missing, rows)` each; the outcomes in
    /// the order given (see [`Self::decide_all`]).
    pub fn recheck_all(&mut self, asks: &[(&Key, u64, u64)]) -> Vec<RecheckOutcome> {
        self.settle();
        self.decide_all(asks, Self::recheck_hashed)
    }

    /// One `decide(book, key, hash, n, rows)` per distinct key of `asks`, outcomes in the
    /// order given: the same decisions, outcomes and book as one after another in that
    /// order, reached in the order that is cheapest for the book. A round decides up to
    /// hundreds of thousands of keys while the sink waits; visited in the book's order
    /// ([`in_map_order`]) they go through its table shard by shard instead of missing
    /// the cache on nearly every key. Decisions on distinct keys touch distinct entries, so
    /// only the idle queue (which key is forgotten first) could tell their order: the keys
    /// that went idle are queued in the order given, then the book forgets beyond capacity.
    /// Forgetting in between could only have touched keys already decided or outside the
    /// batch (its undecided keys are busy), whose entries the rest of it leaves alone.
    fn decide_all<O: Clone + Default>(
        &mut self,
        asks: &[(&Key, u64, u64)],
        decide: impl Fn(&mut Self, &Key, u64, u64, u64) -> (O, Option<u64>),
    ) -> Vec<O> {
        let mut order: Vec<(u64, usize)> = asks
            .iter()
            .enumerate()
            .map(|(i, a)| (self.entries.hash(a.0), i))
            .collect();
        in_map_order(&mut order, |o| o.0);
        let mut out = vec![O::default(); asks.len()];
        let mut idle = Vec::new();
        for (h, i) in order {
            let (k, n, rows) = asks[i];
            let (o, stamp) = decide(self, k, h, n, rows);
            out[i] = o;
            idle.extend(stamp.map(|s| (i, s, h)));
        }
        idle.sort_unstable();
        for (_, stamp, h) in idle {
            self.idle.push_back((h, stamp));
        }
        self.evict();
        out
    }

    /// Queues `k` when a change made it idle (`stamp`), then forgets beyond capacity.
    fn queue_idle(&mut self, k: &Key, stamp: Option<u64>) {
        if let Some(stamp) = stamp {
            self.idle.push_back((self.entries.hash(k), stamp));
            self.evict();
        }
    }

    fn decide_due_hashed(
        &mut self,
        k: &Key,
        h: u64,
        due: u64,
        rows: u64,
    ) -> (DueOutcome, Option<u64>) {
        let mut out = DueOutcome::default();
        let presence = self.semantics == KeySemantics::Presence;
        let idle = self.change_hashed(k, h, |e| {
            let rows = rows_seen(presence, e, rows);
            // Before anything else: claims on rows the sink no longer shows are gone (a
            // freed claim's record is not "another record" holding the key's rows either).
            cap_claims(e, rows);
            let others = e.pending.saturating_sub(due) + e.confirmed + e.missing;
            let free = rows.saturating_sub(e.confirmed);
            let found = free.min(due);
            e.pending = e.pending.saturating_sub(due);
            e.confirmed += found;
            e.missing += due - found;
            out.confirmed = found;
            out.stand_ins = lend_stand_ins(e, due - found);
            out.shared = others > 0 || due > 1;
            out.duplicates = charge_duplicates(presence, e, rows);
        });
        (out, idle)
    }

    /// Re-checks `missing` missing records with key `k`, the sink now holding `rows` rows.
    pub fn recheck(&mut self, k: &Key, missing: u64, rows: u64) -> RecheckOutcome {
        self.settle();
        let (out, idle) = self.recheck_hashed(k, self.entries.hash(k), missing, rows);
        self.queue_idle(k, idle);
        out
    }

    fn recheck_hashed(
        &mut self,
        k: &Key,
        h: u64,
        missing: u64,
        rows: u64,
    ) -> (RecheckOutcome, Option<u64>) {
        let mut out = RecheckOutcome::default();
        let presence = self.semantics == KeySemantics::Presence;
        let idle = self.change_hashed(k, h, |e| {
            let rows = rows_seen(presence, e, rows);
            cap_claims(e, rows);
            let free = rows.saturating_sub(e.confirmed);
            let asked = missing.min(e.missing);
            let late = free.min(asked);
            e.missing -= late;
            e.confirmed += late;
            out.late = late;
            out.stand_ins = lend_stand_ins(e, asked - late);
            out.duplicates = charge_duplicates(presence, e, rows);
        });
        (out, idle)
    }

    /// Applies `f` to the entry of `k` (created when absent) and keeps the idle queue right.
    fn change(&mut self, k: &Key, f: impl FnOnce(&mut Entry)) {
        let idle = self.change_hashed(k, self.entries.hash(k), f);
        self.queue_idle(k, idle);
    }

    /// [`Self::change`] with `k`'s hash in the book's table given ([`ShardedMap::hash`]),
    /// but for the idle queue: returns the stamp to queue `k` with, should it have gone
    /// idle holding a row (the caller queues it, see [`Self::queue_idle`]).
    #[must_use]
    fn change_hashed(&mut self, k: &Key, h: u64, f: impl FnOnce(&mut Entry)) -> Option<u64> {
        let was_busy;
        let now_busy;
        let stamp;
        let holds_nothing;
        let mut changed = None;
        {
            let e = self.entries.get_or_default_hashed(k, h);
            was_busy = e.busy() || e.idle_since == 0;
            let confirmed = e.confirmed;
            let stand_ins = e.stand_ins;
            f(e);
            if !e.busy() {
                // No record of the key is left that the credit's row may belong to: one
                // read later was not there when the named record was confirmed, so its
                // shortfall is a loss (review of issue 37: a retried dead letter's credit
                // hid the key's next record's loss hours later).
                e.stand_ins = 0;
            }
            if e.stand_ins != stand_ins {
                self.credits_dirty.insert(k.clone(), u64::from(e.stand_ins));
            }
            if e.confirmed != confirmed {
                match (confirmed > 0, e.confirmed > 0) {
                    (false, true) => self.live += 1,
                    (true, false) => self.live -= 1,
                    _ => {}
                }
                changed = Some(e.confirmed);
            }
            now_busy = e.busy();
            if !now_busy && was_busy {
                self.clock += 1;
                e.idle_since = self.clock;
            }
            stamp = e.idle_since;
            holds_nothing = e.confirmed == 0 && e.duplicates == 0;
        }
        if let Some(confirmed) = changed {
            self.mark_dirty(k, h, confirmed);
        }
        if !now_busy && was_busy {
            // An idle entry that holds no row (nothing confirmed, no duplicate counted) says
            // nothing an absent one does not: forgotten at once, not queued. In a total loss
            // every dropped missing key became such an entry, and up to the idle capacity
            // (1,000,000 keys, ~250 MB) of them were kept.
            if holds_nothing {
                self.entries.remove(k);
                return None;
            }
            return Some(stamp);
        }
        None
    }

    fn evict(&mut self) {
        let excess = self.idle.len().saturating_sub(self.capacity);
        if excess == 0 {
            return;
        }
        // All at once and in the table's order ([`in_map_order`]): a round that decides
        // hundreds of thousands of keys forgets as many, oldest first, all over the table;
        // one by one in queue order each missed the cache (three lookups of it were the
        // larger part of a round of the book at capacity). Forgetting one key changes
        // nothing another's forgetting looks at, so the order changes nothing else.
        let mut oldest: Vec<(u64, u64)> = self.idle.drain(..excess).collect();
        in_map_order(&mut oldest, |o| o.0);
        for (h, stamp) in oldest {
            // Stale slots (entries busy again since, or idle again later) forget nothing.
            let Some((k, e)) = self
                .entries
                .remove_by_hash_if(h, |e| !e.busy() && e.idle_since == stamp)
            else {
                continue;
            };
            if e.stand_ins > 0 {
                self.credits_dirty.insert(k.clone(), 0);
            }
            if e.confirmed > 0 {
                self.live -= 1;
                self.mark_dirty(&k, h, 0);
            }
        }
        // The queue never holds more than `capacity` plus the keys that became busy again.
    }

    /// Takes a ledger's records into the book (a partition assigned or restored): its
    /// pending keys and the missing keys it still re-checks.
    pub fn adopt(&mut self, l: &PartitionLedger) {
        self.settle();
        for k in l.pending_keys() {
            self.pend(k);
        }
        for k in l.missing_keys() {
            self.restore_missing(k);
        }
    }

    /// Lets a ledger's undecided records go (a partition revoked or reset): what
    /// [`Self::adopt`] and ingesting added, taken back. With `stored` false, its verdicts
    /// since the last successful store write were not kept and will be decided again from
    /// the stored state: their confirmations are taken back too.
    pub fn release(&mut self, l: &mut PartitionLedger, stored: bool) {
        self.settle();
        for k in l.pending_keys() {
            self.unpend(k);
        }
        for k in l.missing_keys() {
            self.forget_missing(k);
        }
        for k in l.take_released_keys() {
            self.forget_missing(&k);
        }
        let unstored = l.take_unstored_confirmations();
        if !stored {
            for k in &unstored {
                self.unconfirm(k);
            }
        }
    }

    /// Keys known (busy or remembered idle), pended ones not yet settled included.
    pub fn len(&self) -> usize {
        let mut new: foldhash::HashSet<&Key> = foldhash::HashSet::default();
        for (_, _, k) in &self.unbooked {
            if !self.entries.contains_key(k) {
                new.insert(k);
            }
        }
        self.entries.len() + new.len()
    }

    /// Whether the book knows no key.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.unbooked.is_empty()
    }

    /// Records with key `k` confirmed (what a handover hands on; pends change nothing of it).
    pub fn confirmed(&self, k: &Key) -> u64 {
        self.entries.get(k).map_or(0, |e| e.confirmed)
    }

    /// Records with key `k` pending, confirmed and missing, as the book counts them (tests:
    /// it reads every pend not settled yet).
    pub fn counts(&self, k: &Key) -> (u64, u64, u64) {
        let unbooked = self.unbooked.iter().filter(|(_, _, x)| x == k).count() as u64;
        self.entries.get(k).map_or((unbooked, 0, 0), |e| {
            (e.pending + unbooked, e.confirmed, e.missing)
        })
    }

    /// Sum of pending records over all keys (tests: must equal the ledgers' pending keys).
    pub fn total_pending(&self) -> u64 {
        self.entries.values().map(|e| e.pending).sum::<u64>() + self.unbooked.len() as u64
    }

    /// Sum of missing records over all keys (tests: must equal the ledgers' followed
    /// missing keys).
    pub fn total_missing(&self) -> u64 {
        self.entries.values().map(|e| e.missing).sum()
    }
}

/// The rows the book matches `e`'s records against when the sink shows `rows`: as many as
/// shown, but under presence one row stands for every record of the key (the table merged
/// them), so any row at all is as many as the key has records.
fn rows_seen(presence: bool, e: &Entry, rows: u64) -> u64 {
    if presence && rows > 0 {
        e.confirmed
            .saturating_add(e.pending)
            .saturating_add(e.missing)
    } else {
        rows
    }
}

/// Caps `e`'s claims at `rows`, the rows the sink shows for its key (as [`rows_seen`] reads
/// them): a confirmed record whose row is gone holds nothing, and duplicates counted on rows
/// that are gone are forgotten too, so a new extra row is counted again. Returns the claims
/// freed. It never changes the verdict being made with `rows` (free rows are
/// `rows − confirmed`, 0 either way when claims exceed rows), only later ones, and those
/// only towards "confirmed".
fn cap_claims(e: &mut Entry, rows: u64) -> u64 {
    let freed = e.confirmed.saturating_sub(rows);
    e.confirmed -= freed;
    e.duplicates = e
        .duplicates
        .min(u32::try_from(rows - e.confirmed).unwrap_or(u32::MAX));
    cap_stand_ins(e);
    freed
}

/// A stand-in credit is a confirmation: never more of them than confirmed records.
fn cap_stand_ins(e: &mut Entry) {
    e.stand_ins = e
        .stand_ins
        .min(u32::try_from(e.confirmed).unwrap_or(u32::MAX));
}

/// Lends up to `absent` of `e`'s stand-in credits to records of its key found absent;
/// returns how many. The confirmations stay (the named records keep the rows they were
/// given); the absent records are dead-lettered in their place, so the rows, the
/// confirmed records and the dead-lettered ones still add up.
fn lend_stand_ins(e: &mut Entry, absent: u64) -> u64 {
    let lent = u64::from(e.stand_ins).min(absent);
    e.stand_ins -= lent as u32;
    lent
}

/// Rows beyond every record of the key are duplicates once nothing with the key is pending
/// or missing; returns the rows not counted before. Never under presence: a merging table
/// holds no duplicates.
fn charge_duplicates(presence: bool, e: &mut Entry, rows: u64) -> u64 {
    if presence || e.busy() {
        return 0;
    }
    let extra = u32::try_from(rows.saturating_sub(e.confirmed)).unwrap_or(u32::MAX);
    let new = extra.saturating_sub(e.duplicates);
    e.duplicates = e.duplicates.max(extra);
    u64::from(new)
}

#[cfg(test)]
mod tests;
