//! Retired gaps on the handover (record format 3, `handover::retired`): this instance's own
//! retired gaps go to the side topic as chunks, and a previous owner's come from it into
//! the store, both a bounded amount per round and both off the takeover path.
//!
//! - **Chunks** of the retired gaps a round changed (retired, acknowledged, marked) are
//!   published before the partition's base or delta, which counts them: a state is never
//!   acknowledged before the chunks of the gaps it counts.
//! - **Terms**: every version is written under the writer's ownership term, in its key
//!   too ([`retired::chunk_key`]), and a state's term names the keys that hold its given-up
//!   gaps. So an owner publishes every given-up gap of its partition under its own term
//!   before its first state (a sweep), and a version of any other term (a zombie's, or a
//!   newer owner's whose state has not landed) never replaces the chunks a state counts.
//! - **Sweep**: after an assignment whose state was not imported (resumed from the local
//!   store, further than the handover's state or with none or an older format's, or found
//!   only by a later read) and after an import ends, every retired gap of the store is
//!   published once under this owner's term, [`retired::SWEEP_ROWS`] rows a round, unless
//!   the store says they are there under that term already (this owner's own state taken
//!   back under its own term). A store further than another owner's state keeps its own
//!   verdicts, as format 2's did: that owner's chunks stay under its term, named by its
//!   state until this owner's first state replaces it.
//! - **Import**: a partition taken over from a format-3 state (another owner's, or this
//!   owner's own its store does not prove it holds) reads the side topic from its start to
//!   where it ended at the takeover, [`retired::IMPORT_RECORDS`] chunks (and
//!   [`retired::IMPORT_BYTES`]) a round, writing the versions of the state's term to the
//!   store as retired rows in log order (the latest version of a chunk wins), then sweeps.
//!   Meanwhile the ledger's aggregate is the handed-over one (completeness, gauges and
//!   DataLoss are right at once) and the store's recount of it waits.
//!
//! While a partition sweeps or imports it is **held**, as a partition whose handover topic
//! was not read: neither published nor committed (a state or chunk published before the
//! topic holds every retired gap could leave a next owner with fewer than counted, or
//! overwrite a chunk not imported yet). Verdicts go on. A Kafka or store failure leaves it
//! held with the reason logged, retried next round; a chunk that does not decode is skipped
//! (an ERROR and the partition's `state_problem` name it) and an import puts an
//! `unverifiable` stand-in gap over its offsets ([`retired::unreadable_chunk_gap`]): its
//! gaps are unknown to this owner, never silently uncounted. It never decides a record:
//! these gaps were decided by their first owner.

use super::{Audit, blocking::blocking};
use crate::gap::Gap;
use crate::handover::retired::{self, ImportCursor};
use crate::types::{Offset, TopicPartition};
use chrono::Utc;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// What a partition's retired gaps still need before it may be handed over again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Flow {
    /// Publish the store's retired gaps, under this owner's term, from this first offset on.
    Sweep(Offset),
    /// Import the side topic's chunks the state taken over names up to the cursor's end,
    /// then sweep them under this owner's own term.
    Import(ImportCursor, Source),
}

/// Which given-up gaps an import takes: the versions of the state's term and owner (its
/// chunk keys).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Source {
    /// The state's term.
    pub term: u64,
    /// The state's owner.
    pub owner: String,
    /// With `only_unknown`: gaps of the partition's current log from here on are not
    /// imported (where the state the cut import began from was settled: this store decided
    /// the offsets after it itself, and the newer owner's gaps there would count twice over
    /// its verdicts; review of format 3, N2). Gaps of an earlier log (a divergence: their
    /// ids carry an older epoch) may lie anywhere. `Offset::MAX` otherwise.
    pub below: Offset,
    /// A cut import resumed from a newer state than the one it began from: the newer
    /// owner decided the first state's open gaps too, as this store's ledger did (found
    /// late, given up, folded into an overflow gap: rows gone), so only gaps this store
    /// has no row of and did not fold are taken (and later versions of those), and nothing
    /// is dropped as lacking from a version (review 26 F2, 26b G1 and G2): what is missing
    /// is the first state's given-up gaps not imported before the cut.
    pub only_unknown: bool,
}

/// The log epoch gap `id` was found on (`Gap::make_id_in`: `@epoch` when above 0).
fn epoch_of_id(id: &str) -> u32 {
    id.rsplit_once('@')
        .and_then(|(_, e)| e.parse().ok())
        .unwrap_or(0)
}

/// Of chunk versions in log order: the last of each chunk, in chunk order.
pub(super) fn latest_per_chunk(versions: Vec<retired::RetiredChunk>) -> Vec<retired::RetiredChunk> {
    let mut last: BTreeMap<i64, retired::RetiredChunk> = BTreeMap::new();
    for c in versions {
        last.insert(c.chunk, c);
    }
    last.into_values().collect()
}

/// Of `gaps` (one chunk version) for an import resumed from a newer state: those the store
/// lets it take (`take`: `Store::resumable_ids`), and below `below` when found on the
/// current log (`epoch`).
pub(super) fn unknown_only(
    gaps: Vec<Gap>,
    take: &HashSet<String>,
    (below, epoch): (Offset, u32),
) -> Vec<Gap> {
    gaps.into_iter()
        .filter(|g| g.first_offset < below || epoch_of_id(&g.id) != epoch)
        .filter(|g| take.contains(&g.id))
        .collect()
}

/// Side-topic keys `(chunk, term, owner)` of a partition under terms below the state its
/// import took: older owners' (no state after that one names them), a zombie's, an owner's
/// whose state never landed. No state names them once this
/// owner's own is acknowledged (`named`): then they are tombstoned, a bounded number a
/// round ([`retired::GARBAGE_KEYS`]), so the side topic holds one term's keys per
/// partition instead of a copy per takeover. Lost at a stop or a revoke: the next import
/// of the partition sees them again.
#[derive(Debug, Default)]
pub(super) struct Garbage {
    keys: BTreeSet<(i64, u64, String)>,
    named: bool,
}

/// The first offset of gap `id` (`audit:topic:partition:first[@epoch]`).
fn first_of_id(id: &str) -> Option<Offset> {
    id.rsplit(':').next()?.split('@').next()?.parse().ok()
}

/// The chunks gaps `ids` fall in.
pub(super) fn chunks_of_ids<'a>(ids: impl IntoIterator<Item = &'a String>) -> BTreeSet<i64> {
    ids.into_iter()
        .filter_map(|id| first_of_id(id))
        .map(retired::chunk_of)
        .collect()
}

/// Of the retired rows `rows` (offset order) read with limit `limit` from a sweep's next
/// offset: the rows to publish now and where the next sweep step starts (`None`: done). A
/// full read may end inside a chunk: that chunk waits for the next step, since a chunk is
/// published whole (a chunk published cut would replace the whole one on the side topic and
/// a next owner would lack the rest). A full read inside one chunk cannot be published at
/// all: `Err(chunk)` (see [`sweep_limit`]: a step reads at least [`retired::CHUNK_ROWS`]).
pub(super) fn sweep_step(
    mut rows: Vec<Gap>,
    limit: usize,
) -> Result<(Vec<Gap>, Option<Offset>), i64> {
    if rows.len() < limit {
        return Ok((rows, None));
    }
    let Some(last) = rows.last().map(|g| retired::chunk_of(g.first_offset)) else {
        return Ok((rows, None));
    };
    if rows
        .first()
        .is_some_and(|g| retired::chunk_of(g.first_offset) == last)
    {
        return Err(last);
    }
    let (lo, _) = retired::chunk_range(last);
    rows.retain(|g| g.first_offset < lo);
    Ok((rows, Some(lo)))
}

/// Of the gaps `gaps` read from the side topic: those to import, and the ids skipped because
/// the importing ledger holds them in memory (`held`). A chunk can name a gap the state this
/// owner took over still holds in memory: the previous owner published the chunk of a gap it
/// retired and stopped before the delta that retired it. Imported, that gap would count
/// twice (the ledger's and the store's retired rows); the ledger's copy is the one the state
/// decided, and it reaches the store and the side topic again when this owner retires it.
pub(super) fn not_held(gaps: Vec<Gap>, held: &HashSet<String>) -> (Vec<Gap>, Vec<String>) {
    let (skip, keep): (Vec<Gap>, Vec<Gap>) = gaps.into_iter().partition(|g| held.contains(&g.id));
    (keep, skip.into_iter().map(|g| g.id).collect())
}

/// Whether this owner (`me`) may sweep its store's retired gaps of a partition to the side
/// topic, given the state of the partition it found on the handover topic (`None`: none, or
/// its local store was further: it is the partition's newest owner): a state of record
/// format 3 written by another owner means that owner's chunks may be newer than this
/// store's rows (a stale store, a read that came late), and a sweep would overwrite them
/// (review item 2). A state of an older format carries its retired gaps inline: nothing of
/// it is on the side topic, so they are swept.
pub(super) fn may_sweep(found: Option<(u32, &str)>, me: &str) -> bool {
    found.is_none_or(|(version, owner)| version < 3 || owner == me)
}

/// The row limit of a partition's sweep step with `budget` rows left this round, `None`
/// when it is below one chunk's rows (the partition waits for the next round: a smaller
/// read could only end inside a chunk).
pub(super) fn sweep_limit(budget: usize) -> Option<usize> {
    (budget >= retired::CHUNK_ROWS).then_some(budget)
}

/// Of the changed chunks `wanted` per partition: those published this round, at most
/// `budget` in all, in partition then chunk order, and the partitions with chunks left
/// for the next round (held until then: their state counts gaps of those chunks).
pub(super) fn within_budget(
    wanted: Vec<(TopicPartition, BTreeSet<i64>)>,
    budget: usize,
) -> (
    Vec<(TopicPartition, BTreeSet<i64>)>,
    BTreeSet<TopicPartition>,
) {
    let mut left = budget;
    let mut now = Vec::new();
    let mut carried = BTreeSet::new();
    for (tp, chunks) in wanted.into_iter().filter(|(_, c)| !c.is_empty()) {
        if chunks.len() > left {
            carried.insert(tp.clone());
        }
        let take: BTreeSet<i64> = chunks.into_iter().take(left).collect();
        left -= take.len();
        if !take.is_empty() {
            now.push((tp, take));
        }
    }
    (now, carried)
}

/// The partitions of `wanted` with changed chunks, starting at the `turn`-th of them and
/// wrapping round: [`within_budget`] serves them in this order, so a partition behind
/// others that always have more chunks than the budget is first once every so many rounds
/// (review of format 3, F7: it could wait for ever).
pub(super) fn taking_turns(
    wanted: Vec<(TopicPartition, BTreeSet<i64>)>,
    turn: usize,
) -> Vec<(TopicPartition, BTreeSet<i64>)> {
    let mut wanted: Vec<_> = wanted.into_iter().filter(|(_, c)| !c.is_empty()).collect();
    if !wanted.is_empty() {
        let at = turn % wanted.len();
        wanted.rotate_left(at);
    }
    wanted
}

impl Audit {
    /// Partitions held by their retired gaps' flow (see the module doc).
    pub(super) fn retired_held(&self) -> BTreeSet<TopicPartition> {
        self.handover.retired_flows.keys().cloned().collect()
    }

    /// Whether no gap of `tp` waits for its next handover publish (see
    /// [`Audit::advance_retired_flows`]: only then may a finished sweep or import say the
    /// side topic holds every retired gap of the store).
    fn nothing_pending(&self, tp: &TopicPartition) -> bool {
        self.handover
            .pending
            .get(tp)
            .is_none_or(|p| p.gaps.is_empty())
    }

    /// Whether `tp` imports a previous owner's retired gaps (its aggregate is the handed-over
    /// one: the store's recount waits).
    pub(super) fn importing(&self, tp: &TopicPartition) -> bool {
        matches!(self.handover.retired_flows.get(tp), Some(Flow::Import(..)))
    }

    /// One bounded step of every flow: an import read of the side topic (the partitions
    /// sharing the first cursor), then sweep steps up to [`retired::SWEEP_ROWS`] rows.
    pub(super) async fn advance_retired_flows(&mut self) {
        let Some(h) = self.handover.link.clone() else {
            return;
        };
        // Import: the partitions on the first cursor, read together.
        let import: Option<(ImportCursor, Vec<TopicPartition>)> = {
            let mut by: BTreeMap<(Offset, Offset), Vec<TopicPartition>> = BTreeMap::new();
            for (tp, f) in &self.handover.retired_flows {
                if let Flow::Import(c, ..) = f {
                    by.entry((c.next, c.end)).or_default().push(tp.clone());
                }
            }
            by.into_iter()
                .next()
                .map(|((next, end), tps)| (ImportCursor { next, end }, tps))
        };
        if let Some((cursor, tps)) = import {
            let (hh, audit, store, asked) = (
                h.clone(),
                self.cfg.name.clone(),
                self.io.store.clone(),
                tps.clone(),
            );
            // The term and owner of the chunks each partition imports (its state names them)
            // and the offset its import stops at.
            let want: BTreeMap<TopicPartition, Source> = tps
                .iter()
                .filter_map(|tp| match self.handover.retired_flows.get(tp) {
                    Some(Flow::Import(_, src)) => Some((tp.clone(), src.clone())),
                    _ => None,
                })
                .collect();
            // The gaps these partitions' ledgers hold in memory (bounded by max_open_gaps),
            // and those this owner changed since the takeover (waiting for their publish,
            // held until the import ends): never imported as retired (see `not_held`),
            // never deleted as lacking from a chunk.
            let held: HashSet<String> = tps
                .iter()
                .filter_map(|tp| self.parts.get(tp).map(|p| (tp, p)))
                .flat_map(|(tp, p)| p.ledger.gaps().map(|g| g.id(&self.cfg.name, tp)))
                .chain(
                    tps.iter()
                        .filter_map(|tp| self.handover.pending.get(tp))
                        .flat_map(|p| p.gaps.iter().cloned()),
                )
                .collect();
            // The held ids by the chunk they fall in (review of format 3, F8: every chunk
            // used to copy all of them, up to max_open_gaps, for each of up to
            // IMPORT_RECORDS chunks a round). An id that names no offset is kept in every
            // chunk (none does: ids are made by `Gap::make_id`).
            let mut held_by_chunk: BTreeMap<Option<i64>, Vec<String>> = BTreeMap::new();
            for id in &held {
                held_by_chunk
                    .entry(first_of_id(id).map(retired::chunk_of))
                    .or_default()
                    .push(id.clone());
            }
            // The log epochs of the partitions whose import resumed from a newer state (see
            // `Source::below`).
            let epochs: BTreeMap<TopicPartition, u32> = want
                .iter()
                .filter(|(_, src)| src.only_unknown)
                .filter_map(|(tp, _)| self.parts.get(tp).map(|p| (tp.clone(), p.ledger.epoch())))
                .collect();
            let handover = h.topic().to_string();
            let step = blocking(move || {
                // The chunks this owner changed since the takeover (noted, unpublished while
                // the import holds the partition): a version of theirs never drops its rows
                // there (an import resumed after a stop holds them nowhere else: R1).
                let noted = store
                    .unpublished_chunks(&handover, &audit)
                    .map_err(|e| e.to_string())?;
                let retired::RetiredRead {
                    chunks,
                    skipped,
                    cursor: next,
                } = hh
                    .read_retired(&audit, &asked, cursor)
                    .map_err(|e| e.to_string())?;
                // Keys of terms below the imported state's: no state after it names them
                // (review T4: a key of the state's own term may be named again, by its owner
                // taking the partition back under it).
                let seen: Vec<(TopicPartition, i64, u64, String)> = chunks
                    .iter()
                    .map(|c| (c.tp(), c.chunk, c.term, c.owner.clone()))
                    .chain(
                        skipped
                            .iter()
                            .map(|s| (s.tp.clone(), s.chunk, s.term, s.owner.clone())),
                    )
                    .filter(|(tp, _, term, _)| want.get(tp).is_some_and(|w| *term < w.term))
                    .collect();
                let mut by: BTreeMap<TopicPartition, Vec<retired::RetiredChunk>> = BTreeMap::new();
                for c in chunks {
                    by.entry(c.tp()).or_default().push(c);
                }
                let mut n = 0;
                for (tp, chunks) in by {
                    let Some(src) = want.get(&tp) else {
                        continue;
                    };
                    let mut versions = retired::of_state(chunks, src.term, &src.owner);
                    if src.only_unknown {
                        // Gaps are taken only while unknown here: of a chunk's versions in
                        // this read, the latest (taken first, an older one would win).
                        versions = latest_per_chunk(versions);
                    }
                    for c in versions {
                        // The version is the chunk as its owner held it: retired rows of its
                        // offsets it lacks were resolved or let go there.
                        let (lo, hi) = retired::chunk_range(c.chunk);
                        let mut keep: Vec<String> = c.gaps.iter().map(|g| g.id.clone()).collect();
                        for k in [Some(c.chunk), None] {
                            keep.extend(held_by_chunk.get(&k).into_iter().flatten().cloned());
                        }
                        let ours = noted
                            .get(&(tp.topic.clone(), tp.partition))
                            .is_some_and(|set| set.contains(&c.chunk));
                        let dropped = if ours || src.only_unknown {
                            Vec::new()
                        } else {
                            store
                                .drop_retired_lacking(
                                    &audit,
                                    &tp.topic,
                                    tp.partition,
                                    lo,
                                    hi,
                                    &keep,
                                )
                                .map_err(|e| e.to_string())?
                        };
                        if !dropped.is_empty() {
                            tracing::info!(%audit, %tp, chunk = c.chunk, term = c.term, gaps = ?dropped, "retired gaps dropped: the newest version of their chunk lacks them");
                        }
                        let ids: Vec<String> = c.gaps.iter().map(|g| g.id.clone()).collect();
                        let folded = store
                            .folded_under_mark(&handover, &audit, &tp.topic, tp.partition, &ids)
                            .map_err(|e| e.to_string())?;
                        let version: Vec<Gap> =
                            c.gaps.into_iter().filter(|g| !folded.contains(&g.id)).collect();
                        if src.only_unknown {
                            // The newer owner's acknowledgements of gaps this store holds
                            // rows of (imported before the cut, or held): an operator's word
                            // on the gap, taken (review 26c, H1).
                            let acks: Vec<(String, String)> = version
                                .iter()
                                .filter(|g| g.state == crate::gap::GapState::Acknowledged)
                                .map(|g| (g.id.clone(), g.ack_reason.clone().unwrap_or_default()))
                                .collect();
                            let taken = store.take_acks(&acks).map_err(|e| e.to_string())?;
                            if !taken.is_empty() {
                                tracing::info!(%audit, %tp, gaps = ?taken, "acknowledgements the partition's newer owner gave taken over");
                            }
                        }
                        let (mut gaps, skipped) = not_held(version, &held);
                        if src.only_unknown {
                            let ids: Vec<String> = gaps.iter().map(|g| g.id.clone()).collect();
                            let take = store
                                .resumable_ids(&handover, &audit, &tp.topic, tp.partition, &ids)
                                .map_err(|e| e.to_string())?;
                            let epoch = epochs.get(&tp).copied().unwrap_or(0);
                            gaps = unknown_only(gaps, &take, (src.below, epoch));
                            let taken: Vec<String> = gaps.iter().map(|g| g.id.clone()).collect();
                            // Noted first: a crash before the rows leaves a note of a gap
                            // without a row, which a later version may take again.
                            store
                                .note_resumed(&handover, &audit, &tp.topic, tp.partition, &taken)
                                .map_err(|e| e.to_string())?;
                        }
                        if !skipped.is_empty() {
                            tracing::info!(%audit, gaps = ?skipped, "retired gaps of the side topic not imported: the state taken over holds them in memory (their owner stopped between the chunk and the state that retired them), or this owner changed them since");
                        }
                        store
                            .import_retired(&audit, &gaps)
                            .map_err(|e| e.to_string())?;
                        n += gaps.len();
                    }
                }
                // A chunk of the imported term that did not decode: a stand-in gap over its
                // offsets (review of format 3, F5: its gaps were silently left out of the
                // count). After the batch's readable versions: which is the newer is not
                // known here, and the stand-in is the one that blocks; a readable version
                // later in the log replaces it.
                let now = Utc::now();
                let named = |s: &retired::SkippedChunk| {
                    want.get(&s.tp)
                        .is_some_and(|w| (w.term, w.owner.as_str()) == (s.term, s.owner.as_str()))
                };
                for s in skipped.iter().filter(|s| named(s)) {
                    let stand_in = retired::unreadable_chunk_gap(&audit, &s.tp, s.chunk, now);
                    if held.contains(&stand_in.id) {
                        // The ledger holds a gap of that id: its row is the ledger's.
                        continue;
                    }
                    let only_unknown = want.get(&s.tp).is_some_and(|w| w.only_unknown);
                    if only_unknown
                        && store
                            .resumable_ids(
                                &handover,
                                &audit,
                                &s.tp.topic,
                                s.tp.partition,
                                std::slice::from_ref(&stand_in.id),
                            )
                            .map_err(|e| e.to_string())?
                            .is_empty()
                    {
                        // A row of this store's own: never replaced by a stand-in.
                        continue;
                    }
                    if only_unknown {
                        // Noted as the resume's: a readable later version replaces it
                        // (review 26c, H4).
                        store
                            .note_resumed(
                                &handover,
                                &audit,
                                &s.tp.topic,
                                s.tp.partition,
                                std::slice::from_ref(&stand_in.id),
                            )
                            .map_err(|e| e.to_string())?;
                    }
                    let (lo, hi) = retired::chunk_range(s.chunk);
                    let keep: Vec<String> = [Some(s.chunk), None]
                        .iter()
                        .flat_map(|k| held_by_chunk.get(k).into_iter().flatten().cloned())
                        .collect();
                    let ours = noted
                        .get(&(s.tp.topic.clone(), s.tp.partition))
                        .is_some_and(|set| set.contains(&s.chunk));
                    if !ours && !only_unknown {
                        store
                            .drop_retired_lacking(
                                &audit,
                                &s.tp.topic,
                                s.tp.partition,
                                lo,
                                hi,
                                &keep,
                            )
                            .map_err(|e| e.to_string())?;
                    }
                    store
                        .import_retired(&audit, std::slice::from_ref(&stand_in))
                        .map_err(|e| e.to_string())?;
                    n += 1;
                }
                let skipped: Vec<retired::SkippedChunk> =
                    skipped.into_iter().filter(|s| named(s)).collect();
                if next.done() {
                    for tp in want.keys() {
                        store
                            .set_importing(&handover, &audit, &tp.topic, tp.partition, None)
                            .map_err(|e| e.to_string())?;
                    }
                }
                Ok::<_, String>((next, n, skipped, seen))
            })
            .await;
            match step {
                Ok((next, n, skipped, seen)) => {
                    for (tp, chunk, term, owner) in seen {
                        self.handover
                            .retired_garbage
                            .entry(tp)
                            .or_default()
                            .keys
                            .insert((chunk, term, owner));
                    }
                    self.report_skipped_chunks(&skipped, &retired::side_topic(h.topic()));
                    tracing::debug!(audit = %self.cfg.name, partitions = ?tps, gaps = n, next = next.next, end = next.end, "retired gaps imported from the handover");
                    for tp in &tps {
                        if next.done() {
                            // The store holds them now: the aggregate is its count again.
                            // They go to the side topic again under this owner's term (its
                            // first state names that term's keys), held until then.
                            if let Some(p) = self.parts.get_mut(tp) {
                                p.ledger.retired_changed();
                            }
                            self.handover
                                .retired_flows
                                .insert(tp.clone(), Flow::Sweep(Offset::MIN));
                        } else if let Some(Flow::Import(_, src)) =
                            self.handover.retired_flows.get(tp)
                        {
                            let src = src.clone();
                            self.handover
                                .retired_flows
                                .insert(tp.clone(), Flow::Import(next, src));
                        }
                    }
                    if next.done() {
                        tracing::info!(audit = %self.cfg.name, partitions = ?tps, "the previous owner's retired gaps are in the store: they are published under this owner's term next, then these partitions are handed over and committed again");
                    }
                }
                Err(e) => {
                    tracing::warn!(audit = %self.cfg.name, partitions = ?tps, error = %e,
                        "cannot import the previous owner's retired gaps yet: these partitions are neither handed over nor committed (their gauges count the handed-over aggregate); retried next round");
                }
            }
        }
        // Sweeps, up to the row budget.
        let sweeps: Vec<(TopicPartition, Offset)> = self
            .handover
            .retired_flows
            .iter()
            // Not while its handover topic is unread: another owner's chunks may be newer.
            .filter(|(tp, _)| !self.awaiting_read(&h, tp))
            .filter_map(|(tp, f)| match f {
                Flow::Sweep(from) => Some((tp.clone(), *from)),
                Flow::Import(..) => None,
            })
            .collect();
        let mut budget = retired::SWEEP_ROWS;
        for (tp, from) in sweeps {
            let Some(limit) = sweep_limit(budget) else {
                break;
            };
            let (hh, audit, store, t) = (
                h.clone(),
                self.cfg.name.clone(),
                self.io.store.clone(),
                tp.clone(),
            );
            let rows = blocking(move || {
                store.retired_gaps_between(&audit, &t.topic, t.partition, from, Offset::MAX, limit)
            })
            .await;
            let rows = match rows {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(audit = %self.cfg.name, %tp, error = %e, "cannot read retired gaps to hand over; retried next round");
                    continue;
                }
            };
            budget = budget.saturating_sub(rows.len().max(1));
            let (rows, next) = match sweep_step(rows, limit) {
                Ok(step) => step,
                Err(chunk) => {
                    tracing::warn!(audit = %self.cfg.name, %tp, chunk, rows = limit,
                        "cannot hand over retired gaps: the store holds more rows in one chunk than a chunk may hold; the partition is neither handed over nor committed");
                    continue;
                }
            };
            let chunks = retired::chunks(&self.cfg.name, &tp, rows, hh.owner(), Utc::now());
            let term = hh.term(&self.cfg.name, &tp);
            let published = hh.publish_retired(&chunks).await;
            // Done: the store remembers it, and under which term, so the next assignment
            // taking this owner's state of that term back does not sweep again.
            let published = match (published, next) {
                (Ok(()), None) if self.nothing_pending(&tp) => {
                    let (store, audit, t, handover) = (
                        self.io.store.clone(),
                        self.cfg.name.clone(),
                        tp.clone(),
                        hh.topic().to_string(),
                    );
                    blocking(move || {
                        store.set_handover_swept(
                            &handover,
                            &audit,
                            &t.topic,
                            t.partition,
                            Some(term),
                        )
                    })
                    .await
                    .map_err(|e| e.to_string())
                }
                (r, _) => r.map_err(|e| e.to_string()),
            };
            match published {
                Ok(()) => match next {
                    Some(n) => {
                        self.handover
                            .retired_flows
                            .insert(tp.clone(), Flow::Sweep(n));
                    }
                    None => {
                        self.handover.retired_flows.remove(&tp);
                        self.handover.dirty.insert(tp.clone());
                        tracing::debug!(audit = %self.cfg.name, %tp, "retired gaps on the handover side topic");
                    }
                },
                Err(e) => {
                    tracing::warn!(audit = %self.cfg.name, %tp, error = %e,
                        "cannot publish retired gaps to the handover side topic: the partition is neither handed over nor committed; retried next round");
                }
            }
        }
    }

    /// After a read of the handover topic for `tps`: each one's term goes past every term
    /// this instance used for it before (its chunk keys under those are its own, maybe
    /// stale: a later ownership must never write under them again; review of the terms,
    /// N1). Unreadable: the read's terms stand, with a warning.
    pub(super) async fn past_used_terms(&self, tps: &[TopicPartition]) {
        let Some(h) = self.handover.link.clone() else {
            return;
        };
        let (store, audit, topic) = (
            self.io.store.clone(),
            self.cfg.name.clone(),
            h.topic().to_string(),
        );
        match blocking(move || store.used_terms(&topic, &audit)).await {
            Ok(used) => {
                for tp in tps {
                    if let Some(t) = used.get(&(tp.topic.clone(), tp.partition)) {
                        h.raise_term(&self.cfg.name, tp, t.saturating_add(1));
                    }
                }
            }
            Err(e) => {
                tracing::warn!(audit = %self.cfg.name, error = %e, "cannot read the ownership terms this instance used before");
            }
        }
    }

    /// Records the terms this process writes `tps` under (before any chunk goes under
    /// them: the sweeps and imports run in later rounds). Unrecorded (a store failure): a
    /// later ownership may reuse one, as before the record existed; said.
    pub(super) async fn record_used_terms(&self, tps: &[TopicPartition]) {
        let Some(h) = self.handover.link.clone() else {
            return;
        };
        let terms: Vec<(TopicPartition, u64)> = tps
            .iter()
            .map(|tp| (tp.clone(), h.term(&self.cfg.name, tp)))
            .collect();
        let (store, audit, topic) = (
            self.io.store.clone(),
            self.cfg.name.clone(),
            h.topic().to_string(),
        );
        let r = blocking(move || {
            for (tp, t) in terms {
                store.use_term(&topic, &audit, &tp.topic, tp.partition, t)?;
            }
            Ok::<_, crate::store::StoreError>(())
        })
        .await;
        if let Err(e) = r {
            tracing::warn!(audit = %self.cfg.name, error = %e, "cannot record the ownership terms of the assigned partitions");
        }
    }

    /// After a handover publish: the partitions in `acked` have their state under this
    /// owner's term acknowledged, so no state names their keys of other terms any more;
    /// those are tombstoned, up to [`retired::GARBAGE_KEYS`] a round over all partitions
    /// (a failure keeps them for the next round).
    pub(super) async fn tombstone_older_terms(&mut self, acked: &BTreeSet<TopicPartition>) {
        let Some(h) = self.handover.link.clone() else {
            return;
        };
        for tp in acked {
            if let Some(g) = self.handover.retired_garbage.get_mut(tp) {
                g.named = true;
            }
        }
        let mut budget = retired::GARBAGE_KEYS;
        let ready: Vec<TopicPartition> = self
            .handover
            .retired_garbage
            .iter()
            .filter(|(tp, g)| g.named && !self.handover.retired_flows.contains_key(*tp))
            .map(|(tp, _)| tp.clone())
            .collect();
        for tp in ready {
            if budget == 0 {
                break;
            }
            let Some(g) = self.handover.retired_garbage.get_mut(&tp) else {
                continue;
            };
            let batch: Vec<(i64, u64, String)> = g.keys.iter().take(budget).cloned().collect();
            match h.tombstone_retired(&self.cfg.name, &tp, &batch).await {
                Ok(()) => {
                    for k in &batch {
                        g.keys.remove(k);
                    }
                    budget -= batch.len();
                    tracing::debug!(audit = %self.cfg.name, %tp, keys = batch.len(), left = g.keys.len(),
                        "side-topic keys of older terms tombstoned");
                }
                Err(e) => {
                    tracing::warn!(audit = %self.cfg.name, %tp, error = %e,
                        "cannot tombstone the side topic's keys of older terms; retried next round");
                    break;
                }
            }
            if g.keys.is_empty() {
                self.handover.retired_garbage.remove(&tp);
            }
        }
    }

    /// Side-topic records of imported partitions that did not decode, skipped (review item
    /// 4: the import used to stop on one and hold the partition for ever): an ERROR each,
    /// and the partition's `state_problem` (the status board) says which chunk's gaps this
    /// owner does not know.
    fn report_skipped_chunks(&mut self, skipped: &[retired::SkippedChunk], side: &str) {
        for s in skipped {
            let what = s.describe(side);
            tracing::error!(audit = %self.cfg.name, tp = %s.tp, chunk = s.chunk, offset = s.offset, error = %s.error,
                "retired-gaps chunk skipped: it does not decode; the given-up gaps it held are unknown to this owner");
            if let Some(p) = self.parts.get_mut(&s.tp) {
                p.state_problem = Some(match p.state_problem.take() {
                    Some(before) if !before.contains(&what) => format!("{before}; {what}"),
                    Some(before) => before,
                    None => what,
                });
            }
        }
    }

    /// Publishes the changed chunks `wanted` of each partition (their gaps read from the
    /// store), at most [`retired::CHANGED_CHUNKS`] this round ([`within_budget`]); returns
    /// the partitions whose chunks were not all published and acknowledged (to be held:
    /// the rest goes next round, see `Pending::chunks`).
    pub(super) async fn publish_changed_chunks(
        &mut self,
        wanted: Vec<(TopicPartition, BTreeSet<i64>)>,
    ) -> BTreeSet<TopicPartition> {
        let Some(h) = self.handover.link.clone() else {
            return BTreeSet::new();
        };
        let wanted = taking_turns(wanted, self.handover.chunk_turn);
        self.handover.chunk_turn = self.handover.chunk_turn.wrapping_add(1);
        let (wanted, carried) = within_budget(wanted, retired::CHANGED_CHUNKS);
        if !carried.is_empty() {
            tracing::debug!(audit = %self.cfg.name, partitions = ?carried, "changed retired-gap chunks beyond this round's budget: published next round, these partitions held until then");
        }
        if wanted.is_empty() {
            return carried;
        }
        let (store, audit, owner) = (
            self.io.store.clone(),
            self.cfg.name.clone(),
            h.owner().to_string(),
        );
        let tps: Vec<TopicPartition> = wanted.iter().map(|(tp, _)| tp.clone()).collect();
        let read = blocking(move || {
            let now = Utc::now();
            let mut out = Vec::new();
            let mut taken = Vec::new();
            let mut oversize = BTreeMap::new();
            'partition: for (tp, chunks) in wanted {
                let mut rows = Vec::new();
                let mut versions = Vec::new();
                for c in &chunks {
                    let (lo, hi) = retired::chunk_range(*c);
                    // A chunk holds at most SPAN gaps of one log epoch; a read that reaches
                    // the limit may be cut, and a cut chunk is never published. Only this
                    // partition waits (review of format 3, F10: every partition did).
                    let got = store
                        .retired_gaps_between(
                            &audit,
                            &tp.topic,
                            tp.partition,
                            lo,
                            hi,
                            retired::CHUNK_ROWS,
                        )
                        .map_err(|e| e.to_string())?;
                    if got.len() >= retired::CHUNK_ROWS {
                        oversize.insert(tp, *c);
                        continue 'partition;
                    }
                    // None left in the store: an empty version replaces the side topic's
                    // (a chunk whose rows all left): never a stale version of this
                    // owner's term left for a next owner.
                    if got.is_empty() {
                        versions.push(retired::empty_chunk(&audit, &tp, *c, &owner, now));
                    }
                    rows.extend(got);
                }
                versions.extend(retired::chunks(&audit, &tp, rows, &owner, now));
                out.extend(versions);
                taken.push((tp, chunks));
            }
            Ok::<_, String>((out, taken, oversize))
        })
        .await;
        let handover = h.topic().to_string();
        let (result, taken, oversize) = match read {
            Ok((chunks, taken, oversize)) => (
                h.publish_retired(&chunks).await.map_err(|e| e.to_string()),
                taken,
                oversize,
            ),
            Err(e) => (Err(e.to_string()), Vec::new(), BTreeMap::new()),
        };
        for (tp, c) in &oversize {
            tracing::error!(audit = %self.cfg.name, %tp, chunk = c,
                "cannot publish retired gaps: the store holds {} rows or more in one chunk, more than a chunk may hold; this partition is neither handed over nor committed", retired::CHUNK_ROWS);
        }
        let carried: BTreeSet<TopicPartition> =
            carried.into_iter().chain(oversize.into_keys()).collect();
        // Published: the store's note of these chunks goes (a crash before this line only
        // publishes them once more at the next assignment).
        let result = match result {
            Ok(()) => {
                for (tp, chunks) in &taken {
                    if let Some(p) = self.handover.pending.get_mut(tp) {
                        p.chunks.retain(|c| !chunks.contains(c));
                    }
                }
                let (store, audit) = (self.io.store.clone(), self.cfg.name.clone());
                blocking(move || {
                    for (tp, chunks) in taken {
                        store.clear_unpublished_chunks(
                            &handover,
                            &audit,
                            &tp.topic,
                            tp.partition,
                            &chunks,
                        )?;
                    }
                    Ok::<_, crate::store::StoreError>(())
                })
                .await
                .map_err(|e| e.to_string())
            }
            e => e,
        };
        match result {
            Ok(()) => carried,
            Err(e) => {
                tracing::error!(audit = %self.cfg.name, partitions = ?tps, error = %e,
                    "cannot publish retired gaps to the handover side topic; the settled watermark of these partitions stays uncommitted until it succeeds");
                tps.into_iter().chain(carried).collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(first: Offset) -> Gap {
        Gap {
            id: Gap::make_id("a", "t", 0, first),
            audit: "a".into(),
            topic: "t".into(),
            partition: 0,
            first_offset: first,
            last_offset: first,
            missing_records: 1,
            size_known: true,
            first_timestamp: None,
            last_timestamp: None,
            detected_at: Utc::now(),
            state: crate::gap::GapState::Open,
            unrecoverable_at: None,
            cause: crate::gap::GapCause::DroppedInFlight,
            pipeline_commit_from: None,
            pipeline_commit_to: None,
            pipeline_commit_at: None,
            evidence: None,
            shared_key: false,
            replayed_at: None,
            ack_reason: None,
        }
    }

    /// Review 26, F2: an import resumed from a newer state takes only the gaps the store
    /// lets it (`Store::resumable_ids`), below where the first state was settled on the
    /// current log, and of a chunk's versions in one read the latest.
    #[test]
    fn a_resumed_import_from_a_newer_state_takes_only_unknown_gaps() {
        let mut old_log = g(70);
        old_log.id = Gap::make_id_in("a", "t", 0, 70, 1);
        let mut this_log = g(80);
        this_log.id = Gap::make_id_in("a", "t", 0, 80, 2);
        let take: HashSet<String> = [&g(1), &g(31), &this_log, &old_log]
            .iter()
            .map(|x| x.id.clone())
            .collect();
        let taken = unknown_only(vec![g(1), g(3), g(31), this_log, old_log], &take, (50, 2));
        let firsts: Vec<Offset> = taken.iter().map(|x| x.first_offset).collect();
        // Below 50 or of another log (epoch 1); this log's 80 is this store's own range.
        assert_eq!(firsts, vec![1, 31, 70]);
        assert_eq!(epoch_of_id(&Gap::make_id("a", "t:x", 0, 5)), 0);
        assert_eq!(epoch_of_id(&Gap::make_id_in("a", "t", 0, 5, 3)), 3);
        let version = |chunk: i64, gaps: Vec<Gap>, owner: &str| retired::RetiredChunk {
            retired: retired::RETIRED_VERSION,
            audit: "a".into(),
            topic: "t".into(),
            partition: 0,
            chunk,
            gaps,
            term: 4,
            written_at: Utc::now(),
            owner: owner.into(),
        };
        let latest = latest_per_chunk(vec![
            version(1, vec![g(1)], "old"),
            version(0, vec![g(2)], "x"),
            version(1, vec![g(3)], "new"),
        ]);
        let got: Vec<(i64, String)> = latest.iter().map(|c| (c.chunk, c.owner.clone())).collect();
        assert_eq!(got, vec![(0, "x".to_string()), (1, "new".to_string())]);
    }

    /// A sweep publishes whole chunks only, and every row exactly once over its steps.
    #[test]
    fn a_sweep_publishes_whole_chunks_and_every_row_once() {
        let all: Vec<Gap> = (0..1000).map(|i| g(3 * i + 1)).collect();
        let mut from = Offset::MIN;
        let mut seen = Vec::new();
        for _ in 0..100 {
            let rows: Vec<Gap> = all
                .iter()
                .filter(|x| x.first_offset >= from)
                .take(100)
                .cloned()
                .collect();
            let (publish, next) = sweep_step(rows, 100).expect("a full read spans chunks");
            let firsts: BTreeSet<i64> = publish
                .iter()
                .map(|x| retired::chunk_of(x.first_offset))
                .collect();
            for c in firsts {
                let want: Vec<i64> = all
                    .iter()
                    .filter(|x| retired::chunk_of(x.first_offset) == c)
                    .map(|x| x.first_offset)
                    .collect();
                let got: Vec<i64> = publish
                    .iter()
                    .filter(|x| retired::chunk_of(x.first_offset) == c)
                    .map(|x| x.first_offset)
                    .collect();
                assert_eq!(got, want, "chunk {c} whole");
            }
            seen.extend(publish.iter().map(|x| x.first_offset));
            match next {
                Some(n) => from = n,
                None => break,
            }
        }
        assert_eq!(seen, all.iter().map(|x| x.first_offset).collect::<Vec<_>>());
    }

    /// Review item 1: whatever the limit, a sweep step publishes no chunk cut; a full
    /// read inside one chunk publishes nothing; and a round starts no step below one
    /// chunk's rows.
    #[test]
    fn a_sweep_never_publishes_part_of_a_chunk() {
        // Every offset of chunks 0..4: 64 rows a chunk.
        let all: Vec<Gap> = (0..4 * retired::SPAN).map(g).collect();
        for limit in 1..200 {
            let mut from = Offset::MIN;
            for _ in 0..1000 {
                let rows: Vec<Gap> = all
                    .iter()
                    .filter(|x| x.first_offset >= from)
                    .take(limit)
                    .cloned()
                    .collect();
                let Ok((publish, next)) = sweep_step(rows, limit) else {
                    break;
                };
                for c in publish.iter().map(|x| retired::chunk_of(x.first_offset)) {
                    let n = publish
                        .iter()
                        .filter(|x| retired::chunk_of(x.first_offset) == c)
                        .count();
                    assert_eq!(n, retired::SPAN as usize, "chunk {c} cut at limit {limit}");
                }
                match next {
                    Some(n) => from = n,
                    None => break,
                }
            }
        }
        assert_eq!(sweep_limit(retired::CHUNK_ROWS - 1), None);
        assert_eq!(sweep_limit(retired::SWEEP_ROWS), Some(retired::SWEEP_ROWS));
    }

    /// Review item 3: a gap the ledger holds in memory is not imported as retired.
    #[test]
    fn a_gap_held_in_memory_is_not_imported() {
        let held = HashSet::from([g(5).id]);
        let (keep, skipped) = not_held(vec![g(1), g(5), g(9)], &held);
        assert_eq!(
            keep.iter().map(|x| x.first_offset).collect::<Vec<_>>(),
            [1, 9]
        );
        assert_eq!(skipped, [g(5).id]);
    }

    /// Review item 2: a sweep only over no state, an older format's, or this owner's own.
    #[test]
    fn a_sweep_never_follows_another_owners_format_3_state() {
        assert!(may_sweep(None, "me"));
        assert!(may_sweep(Some((2, "other")), "me"));
        assert!(may_sweep(Some((3, "me")), "me"));
        assert!(!may_sweep(Some((3, "other")), "me"));
    }

    /// Review item 9: a round publishes at most the budget of changed chunks; the
    /// partitions with chunks left are carried (held), and every chunk goes exactly once
    /// over the rounds.
    #[test]
    fn changed_chunks_go_within_a_budget_per_round() {
        let tp = |p| TopicPartition::new("t", p);
        let mut wanted = vec![
            (tp(0), (0..600).collect::<BTreeSet<i64>>()),
            (tp(1), BTreeSet::from([7])),
            (tp(2), BTreeSet::new()),
        ];
        let mut seen: BTreeMap<TopicPartition, Vec<i64>> = BTreeMap::new();
        let mut rounds = 0;
        while wanted.iter().any(|(_, c)| !c.is_empty()) {
            rounds += 1;
            let (now, carried) = within_budget(wanted.clone(), 256);
            assert!(now.iter().map(|(_, c)| c.len()).sum::<usize>() <= 256);
            for (t, c) in &now {
                seen.entry(t.clone()).or_default().extend(c);
                for (w, left) in wanted.iter_mut() {
                    if w == t {
                        left.retain(|x| !c.contains(x));
                    }
                }
            }
            let left: BTreeSet<TopicPartition> = wanted
                .iter()
                .filter(|(_, c)| !c.is_empty())
                .map(|(t, _)| t.clone())
                .collect();
            assert_eq!(carried, left, "round {rounds}");
        }
        assert_eq!(rounds, 3);
        assert_eq!(seen[&tp(0)], (0..600).collect::<Vec<_>>());
        assert_eq!(seen[&tp(1)], [7]);
    }

    /// Review of format 3, F7: two partitions that always have more changed chunks than
    /// the budget no longer keep a third waiting for ever: it is served within as many
    /// rounds as there are partitions.
    #[test]
    fn no_partition_waits_for_ever_behind_others_chunks() {
        let tp = |p| TopicPartition::new("t", p);
        let busy: BTreeSet<i64> = (0..1000).collect();
        let wanted = vec![
            (tp(0), busy.clone()),
            (tp(1), busy),
            (tp(2), BTreeSet::from([7])),
            (tp(3), BTreeSet::new()),
        ];
        let served = |turn| {
            let (now, _) = within_budget(taking_turns(wanted.clone(), turn), 256);
            now.into_iter().map(|(t, _)| t).collect::<Vec<_>>()
        };
        assert_eq!(
            served(0),
            [tp(0)],
            "in order the first has the whole budget"
        );
        assert!((0..3).any(|turn| served(turn).contains(&tp(2))));
        assert_eq!(served(2), [tp(2), tp(0)]);
        assert_eq!(
            taking_turns(wanted.clone(), 5).len(),
            3,
            "none without chunks"
        );
    }

    #[test]
    fn ids_name_their_chunks() {
        let ids = vec![
            Gap::make_id("a", "t", 0, 5),
            Gap::make_id("a", "t", 0, 300),
            format!("{}@2", Gap::make_id("a", "t", 0, 600)),
        ];
        assert_eq!(
            chunks_of_ids(&ids),
            BTreeSet::from([5 / retired::SPAN, 300 / retired::SPAN, 600 / retired::SPAN])
        );
    }
}
