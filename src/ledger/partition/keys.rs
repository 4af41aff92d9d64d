//! Keys: the bounded set of missing keys, and the confirmations the key book must store.

use super::PartitionLedger;
use crate::ledger::runs::OffsetRun;
use crate::types::{Key, Offset};

/// Keys the audit's key book must hear about, gathered between its reads.
#[derive(Debug, Clone, Default)]
pub(super) struct KeyChanges {
    /// Keys of missing records given up since [`PartitionLedger::take_released_keys`]: the
    /// audit's key book stops holding claims for them.
    pub(super) released: Vec<Key>,
    /// Stand-in credits for the key book since [`PartitionLedger::take_credited_keys`] (one
    /// entry per credit): named records confirmed that no absent record of their key took
    /// the place of, and lent credits no record needed (`KeyBook::credit`).
    pub(super) credited: Vec<Key>,
    /// Keys of records confirmed since [`PartitionLedger::stored`] (keyed ledgers): taken
    /// back from the key book if the ledger is dropped before its verdicts reach the store.
    pub(super) unstored_confirmations: Vec<Key>,
    /// Whether confirmations are tracked at all: only an audit-wide key book (key_columns)
    /// needs them; doc_id ledgers are keyed too and must not clone every confirmed id.
    pub(super) track_confirmations: bool,
}

impl PartitionLedger {
    /// Keys held for missing records (re-checks need them).
    pub fn missing_key_count(&self) -> u64 {
        self.missing.keys
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
                .runs
                .iter()
                .find(|(_, m)| !m.keys.is_empty())
                .map(|(f, _)| *f)
            else {
                break;
            };
            // A run holding more keys than are to go (runs of a total loss merge into one
            // per gap) gives up only its oldest records: the rest keep being re-checked.
            let keys = self
                .missing
                .runs
                .get(&first)
                .map_or(0, |m| m.keys.len() as u64);
            if keys > excess
                && let Some(m) = self.remove_missing(first)
            {
                let cut = first + excess as Offset;
                let (old, rest) = (
                    m.sub(OffsetRun::new(first, cut - 1)),
                    m.sub(OffsetRun::new(cut, m.run.last)),
                );
                self.key_changes.released.extend(old.keys);
                self.insert_missing(rest);
                self.unstored.changed();
                dropped += excess;
                break;
            }
            let n = self.give_up_run(first);
            dropped += n;
            excess = excess.saturating_sub(n);
        }
        dropped
    }

    /// Gives up the missing runs holding a key of another arity than `arity`: keys stored
    /// before `match.key` gained or lost a field. Re-checked, such a key fits no query of
    /// the configured key columns; its records stay missing in their gap (an operator
    /// settles them with `check` or `replay`), never re-checked with the wrong arity.
    /// Returns how many records were given up.
    pub fn give_up_other_arity(&mut self, arity: usize) -> u64 {
        let stale: Vec<Offset> = self
            .missing
            .runs
            .iter()
            .filter(|(_, m)| m.keys.iter().any(|k| k.len() != arity))
            .map(|(f, _)| *f)
            .collect();
        stale.into_iter().map(|f| self.give_up_run(f)).sum()
    }

    /// Tracks the keys of confirmations until [`Self::stored`] (see
    /// [`Self::take_unstored_confirmations`]); off by default.
    pub fn track_confirmations(&mut self, on: bool) {
        self.key_changes.track_confirmations = on;
    }

    /// The store now holds this ledger's verdicts (see [`Self::take_unstored_confirmations`]).
    pub fn stored(&mut self) {
        self.key_changes.unstored_confirmations.clear();
        self.unstored.all_stored();
    }

    /// A fresh ledger for a partition whose stored state could not be read: its writes
    /// carry only its own items, never a replacement of what the store holds (items it
    /// could not read stay for an operator, or a later version, to recover).
    pub fn keep_stored_items(&mut self) {
        self.unstored.replace = false;
    }

    /// Keys of records confirmed since the last [`Self::stored`].
    pub fn take_unstored_confirmations(&mut self) -> Vec<Key> {
        std::mem::take(&mut self.key_changes.unstored_confirmations)
    }

    /// Keys of missing records given up since the last call (see [`crate::ledger::KeyBook`]).
    pub fn take_released_keys(&mut self) -> Vec<Key> {
        std::mem::take(&mut self.key_changes.released)
    }

    /// Stand-in credits for the key book since the last call, a key per credit (see
    /// `KeyBook::credit`): the caller hands them to the book before the next decision.
    pub fn take_credited_keys(&mut self) -> Vec<Key> {
        std::mem::take(&mut self.key_changes.credited)
    }

    /// Keys of pending records (each once per record).
    pub fn pending_keys(&self) -> impl Iterator<Item = &Key> {
        self.queue.runs.iter().flat_map(|p| p.keys.iter())
    }

    /// Keys of missing records still re-checked (each once per record).
    pub fn missing_keys(&self) -> impl Iterator<Item = &Key> {
        self.missing
            .runs
            .values()
            .filter(|m| !m.given_up)
            .flat_map(|m| m.keys.iter())
    }

    /// The key of a missing offset (for replay tooling and tests).
    pub fn missing_key(&self, o: Offset) -> Option<&Key> {
        self.missing
            .runs
            .range(..=o)
            .next_back()
            .and_then(|(_, m)| if m.run.contains(o) { m.key_of(o) } else { None })
    }
}
