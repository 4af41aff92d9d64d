//! The handover publish (`state.handover_topic`, record format 2, `handover::delta`): a
//! partition's whole state (a base) when the handover has none to build on or its deltas
//! outweigh it, else a delta of what changed since the last publish — the ledger items the
//! store writes carried, the gaps whose rows changed — so an idle round publishes a few
//! hundred bytes per partition, whatever the number of open gaps (issue 41 item 3).

use super::persist::{ledger_head, with_topic_id};
use super::retired_flow;
use super::{Audit, Part, blocking::blocking};
use crate::gap::Gap;
use crate::handover::{self, Handover, PartitionState};
use crate::store::PartitionProgress;
use crate::types::{Offset, TopicPartition};
use chrono::Utc;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

/// What the audit hands over to the next owner of its partitions, and what it still owes
/// them.
pub(super) struct HandoverState {
    /// Hands partition state to the next owner (several instances in one group).
    pub(super) link: Option<Arc<Handover>>,
    /// Partitions whose state changed since it was last handed over.
    pub(super) dirty: BTreeSet<TopicPartition>,
    /// What changed of each partition since its last handover publish (the next delta).
    pub(super) pending: HashMap<TopicPartition, Pending>,
    /// A hash of the key claims each partition's last handover publish carried: a delta
    /// repeats them only when they changed.
    pub(super) claims: HashMap<TopicPartition, u64>,
    /// Where the store's replay log was read up to for the handover (`None`: not yet).
    pub(super) replays: Option<i64>,
    /// Partitions whose assignment the consumer reports lost (revoked without this
    /// instance leaving cleanly: another instance may own them already): never published
    /// again.
    pub(super) lost: BTreeSet<TopicPartition>,
    /// Partitions whose settled offsets the last persist may not commit: their handover
    /// publish was not acknowledged, or their handover topic was not read since their
    /// assignment (set by each handover publish; the others commit).
    pub(super) held: BTreeSet<TopicPartition>,
    /// Partitions whose retired gaps are still being published (a sweep) or imported from
    /// the handover's side topic: held until done ([`retired_flow`]).
    pub(super) retired_flows: BTreeMap<TopicPartition, retired_flow::Flow>,
    /// Side-topic keys of other terms than this owner's, per partition, seen by its
    /// import: tombstoned once its own state is acknowledged ([`retired_flow::Garbage`]).
    pub(super) retired_garbage: HashMap<TopicPartition, retired_flow::Garbage>,
    /// Where the next round's budget of changed chunks starts among the partitions that
    /// have some: it turns, so no partition waits behind others' chunks for ever (review
    /// of format 3, F7).
    pub(super) chunk_turn: usize,
    /// A retry of the handover read of partitions whose read failed, running in the
    /// background: a round never waits for it ([`Audit::read_unread`]).
    pub(super) reading: Option<Reading>,
}

impl HandoverState {
    /// Nothing handed over yet, through `link` (`None`: no handover topic).
    pub(super) fn new(link: Option<Arc<Handover>>) -> Self {
        Self {
            link,
            dirty: BTreeSet::new(),
            pending: HashMap::new(),
            claims: HashMap::new(),
            replays: None,
            lost: BTreeSet::new(),
            held: BTreeSet::new(),
            retired_flows: BTreeMap::new(),
            retired_garbage: HashMap::new(),
            chunk_turn: 0,
            reading: None,
        }
    }
}

/// What changed of a partition since its last handover publish: the next delta.
#[derive(Debug, Default, Clone)]
pub(super) struct Pending {
    /// The ledger was written whole (a new or restored ledger, a divergence): the next
    /// delta carries all its items, replacing the previous ones.
    pub(super) replace: bool,
    /// Missing runs by first offset (`None`: gone).
    pub(super) missing: BTreeMap<Offset, Option<serde_json::Value>>,
    /// Ledger gaps by first offset (`None`: gone).
    pub(super) ledger_gaps: BTreeMap<Offset, Option<serde_json::Value>>,
    /// Reported gaps whose rows changed (read back from the store at publish).
    pub(super) gaps: BTreeSet<String>,
    /// The side-topic chunks of those gaps not published since they changed (record format
    /// 3): a bounded number goes each round ([`retired::CHANGED_CHUNKS`]); the state waits
    /// until none is left (review item 9: 500,000 gaps retired in one round were half a
    /// million chunk rows published in that round).
    pub(super) chunks: BTreeSet<i64>,
}

impl Pending {
    /// Gaps `ids` changed: their rows go with the next state, their chunks before it.
    pub(super) fn changed<I: IntoIterator<Item = String>>(&mut self, ids: I) {
        for id in ids {
            self.chunks
                .extend(super::retired_flow::chunks_of_ids(std::iter::once(&id)));
            self.gaps.insert(id);
        }
    }
}

/// One store write's changes for the handover of one partition.
pub(super) struct Change {
    tp: TopicPartition,
    /// The ledger items written (`None`: the ledger was written whole), if it was written.
    items: Option<Option<crate::store::LedgerItems>>,
    gaps: Vec<String>,
    /// Those of `gaps` the write retired: their chunks are to be published (the others'
    /// rows are not on the side topic; reading their chunks would only cost store reads
    /// and the round's chunk budget).
    retiring: Vec<String>,
}

/// The handover changes of a store write: its progress rows' items, its gaps, and the
/// gaps that left memory or were folded with it.
pub(super) fn changes(
    audit: &str,
    gaps: &[Gap],
    progress: &[PartitionProgress],
    parts: &BTreeMap<TopicPartition, Part>,
) -> Vec<Change> {
    let mut by: HashMap<TopicPartition, Change> = HashMap::new();
    fn entry(by: &mut HashMap<TopicPartition, Change>, tp: TopicPartition) -> &mut Change {
        by.entry(tp.clone()).or_insert_with(|| Change {
            tp,
            items: None,
            gaps: Vec::new(),
            retiring: Vec::new(),
        })
    }
    for p in progress {
        entry(&mut by, TopicPartition::new(p.topic.clone(), p.partition)).items =
            Some(p.items.clone());
    }
    for g in gaps {
        entry(&mut by, TopicPartition::new(g.topic.clone(), g.partition))
            .gaps
            .push(g.id.clone());
    }
    for (tp, p) in parts {
        let l = &p.ledger;
        let retiring: Vec<String> = l
            .retired_unstored()
            .iter()
            .map(|g| g.id(audit, tp))
            .collect();
        let folded: Vec<String> = l
            .folded_unstored()
            .iter()
            .map(|g| g.id(audit, tp))
            .collect();
        if !retiring.is_empty() || !folded.is_empty() {
            let c = entry(&mut by, tp.clone());
            c.gaps.extend(retiring.iter().cloned().chain(folded));
            c.retiring.extend(retiring);
        }
    }
    by.into_values().collect()
}

/// Ledger items as JSON values (a store item that does not parse is left out of the
/// delta: it is not JSON the ledger wrote).
fn parsed(items: &[(Offset, Option<String>)]) -> Vec<(Offset, Option<serde_json::Value>)> {
    items
        .iter()
        .filter_map(|(o, v)| match v {
            None => Some((*o, None)),
            Some(s) => serde_json::from_str(s).ok().map(|v| (*o, Some(v))),
        })
        .collect()
}

/// A hash of key claims, to tell whether they changed since the last publish.
fn claims_hash(claims: &[(Vec<String>, u64)]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    claims.hash(&mut h);
    h.finish()
}

/// A background read of the handover topic for partitions whose read failed.
pub(super) struct Reading {
    /// The partitions asked.
    tps: Vec<TopicPartition>,
    /// The read (blocking, on tokio's blocking pool).
    handle: tokio::task::JoinHandle<
        Result<HashMap<TopicPartition, PartitionState>, handover::HandoverError>,
    >,
}

#[cfg(test)]
impl Reading {
    /// A read of `tps` that finished with `states` (tests: no broker).
    pub(super) fn finished(
        tps: Vec<TopicPartition>,
        states: HashMap<TopicPartition, PartitionState>,
    ) -> Reading {
        Reading {
            tps,
            handle: tokio::task::spawn_blocking(move || Ok(states)),
        }
    }

    /// Whether the read ended.
    pub(super) fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }
}

/// A state's gaps as read from the store for a publish: rows with (replayed, retired).
type Rows = Vec<(Gap, bool, bool)>;

/// Whether a gap row goes to the next owner in the state: named in `ids` (the ledger holds
/// it, or it was acknowledged) and not retired — retired rows travel as chunks on the side
/// topic (record format 3, `handover::retired`), the unresolved ones counted in the state's
/// aggregate; a delta names them `removed` when they retire. An acknowledged gap's row is
/// marked retired with the write after its acknowledgement (review item 7: every base
/// inlined every acknowledged gap, about 0.5 kB each, without bound).
fn handed(row: &(Gap, bool, bool), ids: &HashSet<String>) -> bool {
    let (g, _, retired) = row;
    !*retired && ids.contains(&g.id)
}

/// A state to publish: whole (a base) or a delta, and the gap ids to read for it.
struct Build {
    tp: TopicPartition,
    /// A hash of the key claims this state stands for (carried, or kept).
    claims_hash: u64,
    state: PartitionState,
    /// A base: read the partition's unresolved gaps (and `ids` acknowledged); a delta:
    /// read `ids` only.
    whole: bool,
    read: Vec<String>,
    /// The ids a row must be in to be handed over (see [`handed`]).
    ids: HashSet<String>,
}

impl Audit {
    /// Records a store write's changes for the next handover delta.
    pub(super) fn pend(&mut self, changes: Vec<Change>) {
        for c in changes {
            let p = self.handover.pending.entry(c.tp).or_default();
            match c.items {
                Some(None) => {
                    p.replace = true;
                    p.missing.clear();
                    p.ledger_gaps.clear();
                }
                Some(Some(items)) if !p.replace => {
                    p.missing.extend(parsed(&items.missing));
                    p.ledger_gaps.extend(parsed(&items.gaps));
                }
                _ => {}
            }
            p.chunks
                .extend(super::retired_flow::chunks_of_ids(&c.retiring));
            p.gaps.extend(c.gaps);
        }
    }

    /// Gaps `gap-auditor replay` marked since the last look (the store's replay log): their
    /// marks go with the next delta of their partitions.
    async fn pend_replays(&mut self) {
        let store = self.io.store.clone();
        let audit = self.cfg.name.clone();
        let since = self.handover.replays;
        let owned: HashSet<TopicPartition> = self.parts.keys().cloned().collect();
        let read = blocking(move || match since {
            // At the start: from now (a base reads every mark of the gaps it carries).
            None => Ok((Vec::new(), store.replay_position()?)),
            Some(since) => {
                let (rows, position) = store.replays_since(&audit, since)?;
                let mut ids = Vec::new();
                for (id, topic, partition, first, last) in rows {
                    let tp = TopicPartition::new(topic, partition);
                    if !owned.contains(&tp) {
                        continue;
                    }
                    match id {
                        Some(id) => ids.push((tp, id)),
                        None => {
                            for g in store.open_gaps_overlapping(
                                &audit,
                                &tp.topic,
                                tp.partition,
                                first,
                                last,
                            )? {
                                ids.push((tp.clone(), g.id));
                            }
                        }
                    }
                }
                Ok::<_, crate::store::StoreError>((ids, position))
            }
        })
        .await;
        match read {
            Ok((ids, position)) => {
                for (tp, id) in ids {
                    self.handover
                        .pending
                        .entry(tp.clone())
                        .or_default()
                        .changed([id]);
                    self.handover.dirty.insert(tp);
                }
                self.handover.replays = Some(position);
            }
            Err(e) => {
                tracing::warn!(audit = %self.cfg.name, error = %e, "cannot read the replay log for the handover; retried next round");
            }
        }
    }

    /// Publishes the state of every partition that changed since its last handover — a
    /// delta of what changed, or the whole state when the handover has no base to build on
    /// or its deltas outweigh it — and waits for the broker's acknowledgement: only then may
    /// their settled offsets be committed. Gap rows are read back from the store (states as
    /// an operator left them): for a delta only those that changed, for a base the
    /// partition's unresolved ones and its acknowledged ones by id, never its resolved
    /// history. A partition whose publish was not acknowledged stays dirty (its changes
    /// pending) for the next round and its settled watermark uncommitted
    /// ([`Audit::handover_held`]), as does one whose handover topic was not read since its
    /// assignment (not published at all); the others are committed.
    pub(super) async fn hand_over(&mut self) {
        self.handover.held.clear();
        let Some(h) = self.handover.link.clone() else {
            return;
        };
        self.pend_replays().await;
        self.advance_retired_flows().await;
        // Unread: what a newer owner wrote is unknown (a publish under the term this process
        // knew would overwrite its base); neither published nor committed until a read
        // succeeds ([`Audit::read_unread`]). Verdicts go on. Likewise a partition whose
        // retired gaps are still swept to or imported from the side topic (`retired_flow`).
        let flows = self.retired_held();
        let unread: BTreeSet<TopicPartition> = self
            .parts
            .keys()
            .filter(|tp| self.awaiting_read(&h, tp) || flows.contains(*tp))
            .cloned()
            .collect();
        let tps: Vec<TopicPartition> = self
            .handover
            .dirty
            .iter()
            .filter(|tp| {
                self.parts.contains_key(*tp)
                    && !self.handover.lost.contains(*tp)
                    && !unread.contains(*tp)
            })
            .cloned()
            .collect();
        self.handover.held = unread;
        if tps.is_empty() {
            let held = &self.handover.held;
            self.handover.dirty.retain(|tp| held.contains(tp));
            // Keys of older terms left from an earlier round's budget.
            self.tombstone_older_terms(&BTreeSet::new()).await;
            return;
        }
        // The chunks of the retired gaps that changed go first: a state is acknowledged only
        // after the chunks of every retired gap it counts.
        let wanted: Vec<(TopicPartition, BTreeSet<i64>)> = tps
            .iter()
            .map(|tp| {
                let chunks = self.handover.pending.get(tp).map(|p| p.chunks.clone());
                (tp.clone(), chunks.unwrap_or_default())
            })
            .collect();
        let unchunked = self.publish_changed_chunks(wanted).await;
        let tps: Vec<TopicPartition> = tps
            .into_iter()
            .filter(|tp| !unchunked.contains(tp))
            .collect();
        self.handover.held.extend(unchunked);
        let now = Utc::now();
        let mut builds = Vec::new();
        for tp in &tps {
            let Some(p) = self.parts.get(tp).filter(|p| p.ledger.is_anchored()) else {
                continue;
            };
            let whole = h.wants_base(&self.cfg.name, tp);
            let pending = self.handover.pending.get(tp).cloned().unwrap_or_default();
            // Ids are `audit:topic:partition:first`; neither name contains `:`.
            let prefix = format!("{}:{}:{}:", self.cfg.name, tp.topic, tp.partition);
            let (ledger, read, ids) = if whole {
                let snap = p.ledger.snapshot();
                let mut ids: HashSet<String> = snap
                    .gaps
                    .iter()
                    .chain(p.ledger.retired_unstored())
                    .map(|g| g.id(&self.cfg.name, tp))
                    .collect();
                // Acknowledged gaps left the ledger, not the partition's story: the next
                // owner learns them from the side topic's chunks, as their rows are marked
                // retired with the write after the acknowledgement; only those not marked
                // yet are named here (none once that write is done).
                ids.extend(
                    self.persisting
                        .acks
                        .unretired
                        .keys()
                        .filter(|id| id.starts_with(&prefix))
                        .cloned(),
                );
                // Read by id besides the unresolved rows: the acknowledged ones, and any the
                // ledger holds in another state (the tail gap).
                let read: Vec<String> = ids.iter().cloned().collect();
                let ledger = with_topic_id(
                    serde_json::to_value(&snap).unwrap_or(serde_json::Value::Null),
                    p.topic_id.as_deref(),
                );
                (ledger, read, ids)
            } else {
                let mut ledger = ledger_head(&p.ledger, p.topic_id.as_deref());
                if let Some(o) = ledger.as_object_mut() {
                    if pending.replace {
                        let snap = p.ledger.snapshot();
                        o.insert("replace".into(), serde_json::Value::Bool(true));
                        o.insert("missing".into(), serde_json::json!(snap.missing));
                        o.insert("gaps".into(), serde_json::json!(snap.gaps));
                    } else {
                        for (field, removed, items) in [
                            ("missing", "missing_removed", &pending.missing),
                            ("gaps", "gaps_removed", &pending.ledger_gaps),
                        ] {
                            let up: Vec<&serde_json::Value> = items.values().flatten().collect();
                            let gone: Vec<Offset> = items
                                .iter()
                                .filter(|(_, v)| v.is_none())
                                .map(|(o, _)| *o)
                                .collect();
                            if !up.is_empty() {
                                o.insert(field.into(), serde_json::json!(up));
                            }
                            if !gone.is_empty() {
                                o.insert(removed.into(), serde_json::json!(gone));
                            }
                        }
                    }
                }
                // The rows that changed; handed over if the ledger holds them, they left
                // memory this round, or they are acknowledged.
                let read: Vec<String> = pending.gaps.iter().cloned().collect();
                let retired_now: HashSet<String> = p
                    .ledger
                    .retired_unstored()
                    .iter()
                    .map(|g| g.id(&self.cfg.name, tp))
                    .collect();
                let ids: HashSet<String> = read
                    .iter()
                    .filter(|id| {
                        retired_now.contains(*id)
                            || self.persisting.acks.ids.contains(*id)
                            || id
                                .rsplit(':')
                                .next()
                                .and_then(|f| f.split('@').next()?.parse::<Offset>().ok())
                                .and_then(|f| p.ledger.gap_epoch(f))
                                == Some(Gap::epoch_of_id(id))
                    })
                    .cloned()
                    .collect();
                (ledger, read, ids)
            };
            let key_claims: Vec<(Vec<String>, u64)> = match self.checker.book() {
                Some(book) => {
                    let mut keys: Vec<&crate::types::Key> = p.ledger.missing_keys().collect();
                    keys.sort_unstable();
                    keys.dedup();
                    keys.into_iter()
                        .map(|k| (k.to_vec(), book.confirmed(k)))
                        .filter(|(_, n)| *n > 0)
                        .collect()
                }
                None => Vec::new(),
            };
            // A delta repeats the claims only when they changed since the last publish.
            let claims_hash = claims_hash(&key_claims);
            let claims_kept = !whole && self.handover.claims.get(tp) == Some(&claims_hash);
            let key_claims = if claims_kept { Vec::new() } else { key_claims };
            builds.push(Build {
                tp: tp.clone(),
                claims_hash,
                state: PartitionState {
                    version: handover::VERSION,
                    audit: self.cfg.name.clone(),
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    settled: p.ledger.settled(),
                    ledger,
                    gaps: Vec::new(),
                    replayed: Vec::new(),
                    retired: Vec::new(),
                    // Format 3: the aggregate, not the retired gaps (they are chunks).
                    retired_gaps: Some(p.ledger.retired().clone())
                        .filter(|r| *r != crate::ledger::RetiredGaps::default()),
                    key_claims,
                    // Stamped by `Handover::publish` from the handover's own order.
                    generation: 0,
                    base: (!whole).then_some(0),
                    base_id: None,
                    prev: None,
                    term: 0,
                    removed: Vec::new(),
                    claims_kept,
                    written_at: now,
                    owner: h.owner().to_string(),
                    owner_url: None,
                },
                whole,
                read,
                ids,
            });
        }
        let store = self.io.store.clone();
        let read = blocking(move || {
            let mut out = Vec::new();
            for b in builds {
                let mut rows: Rows = if b.whole {
                    store.unresolved_gaps_of_partition(
                        &b.state.audit,
                        &b.state.topic,
                        b.state.partition,
                    )?
                } else {
                    Vec::new()
                };
                let have: HashSet<String> = rows.iter().map(|r| r.0.id.clone()).collect();
                let want: Vec<String> = b
                    .read
                    .iter()
                    .filter(|id| !have.contains(*id))
                    .cloned()
                    .collect();
                rows.extend(store.gaps_by_ids(&want)?);
                out.push((b, rows));
            }
            Ok::<_, crate::store::StoreError>(out)
        })
        .await;
        let built = match read {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(audit = %self.cfg.name, error = %e, "cannot read gaps for the handover topic; the settled watermark stays uncommitted");
                self.handover.held.extend(tps);
                return;
            }
        };
        let mut states = Vec::new();
        let mut published = Vec::new();
        for (b, rows) in built {
            let mut st = b.state;
            let mut kept: HashSet<String> = HashSet::new();
            for row in rows {
                if !handed(&row, &b.ids) {
                    continue;
                }
                let (g, replayed, _) = row;
                if replayed {
                    st.replayed.push(g.id.clone());
                }
                kept.insert(g.id.clone());
                st.gaps.push(g);
            }
            if !b.whole {
                // Changed gaps not handed over any more (resolved, folded): the next owner
                // drops them.
                st.removed = b.read.into_iter().filter(|id| !kept.contains(id)).collect();
            }
            published.push((b.tp, b.claims_hash));
            states.push(st);
        }
        let result = h.publish_each(&states).await;
        let (done, held) = outcome(&tps, &published, &result.acked);
        for (p, ok) in published.iter().zip(&result.acked) {
            remember_claims(&mut self.handover.claims, std::iter::once(p), *ok);
        }
        for tp in &done {
            self.handover.dirty.remove(tp);
        }
        for (tp, _) in published.iter().filter(|(tp, _)| done.contains(tp)) {
            self.handover.pending.remove(tp);
        }
        if let Some(e) = result.error {
            tracing::error!(audit = %self.cfg.name, error = %e, partitions = ?held,
                "cannot publish partition state to the handover topic; the settled watermark of these partitions stays uncommitted until it succeeds (the others are committed)");
        }
        self.handover.held.extend(held);
        let acked: BTreeSet<TopicPartition> = published
            .iter()
            .map(|(tp, _)| tp.clone())
            .filter(|tp| done.contains(tp))
            .collect();
        self.tombstone_older_terms(&acked).await;
    }

    /// Reads the handover topic again for the assigned partitions whose read failed (at
    /// assignment or since): until it succeeds they are neither published nor committed.
    /// Their ledgers already run from the local store or the group's commit; a previous
    /// owner's state found now is not taken (the partition is audited from where it
    /// started), but the read gives this process its term above every owner's, and the
    /// next publish is a base of its own. The read runs in the background (up to 20 s
    /// against an unreachable broker): a round starts one and looks at its outcome in a
    /// later round, never waiting for it.
    pub(super) async fn read_unread(&mut self) {
        let Some(h) = self.handover.link.clone() else {
            return;
        };
        match self.handover.reading.take() {
            Some(r) if !r.handle.is_finished() => {
                self.handover.reading = Some(r);
                return;
            }
            Some(r) => {
                let outcome = match r.handle.await {
                    Ok(o) => o.map_err(|e| e.to_string()),
                    Err(e) => Err(format!("the read panicked: {e}")),
                };
                // Only partitions still owned (an assignment or revoke since drops the
                // read, see [`Audit::drop_reading`]).
                let tps: Vec<TopicPartition> = r
                    .tps
                    .into_iter()
                    .filter(|tp| self.parts.contains_key(tp))
                    .collect();
                self.read_done(tps, outcome).await;
                return;
            }
            None => {}
        }
        let tps: Vec<TopicPartition> = self
            .parts
            .keys()
            .filter(|tp| h.unread(&self.cfg.name, tp))
            .cloned()
            .collect();
        if tps.is_empty() {
            return;
        }
        let audit = self.cfg.name.clone();
        let asked = tps.clone();
        self.handover.reading = Some(Reading {
            tps,
            handle: tokio::task::spawn_blocking(move || h.read(&audit, &asked)),
        });
    }

    /// A read started by [`Audit::read_unread`] is of no use any more for `tps`: they were
    /// assigned or revoked since (an assignment reads them itself). Its other partitions
    /// keep it (review 26, F1: a cooperative rebalance of other partitions dropped it, and
    /// the read, finished in the background, cleared their `unread` without `read_done`
    /// ever deciding their flows and terms). Dropped for all, it runs to its end in the
    /// background; `Handover::read` leaves a newer read's findings in place.
    pub(super) fn drop_reading(&mut self, tps: &[TopicPartition]) {
        if let Some(r) = &mut self.handover.reading {
            r.tps.retain(|tp| !tps.contains(tp));
            if r.tps.is_empty() {
                self.handover.reading = None;
            }
        }
    }

    /// Whether `tp`'s handover topic is not read yet for this process: its read failed
    /// and no retry finished, or a retry finished whose outcome `read_done` has not taken
    /// yet (the read clears `unread` on its own thread, possibly in the middle of a round:
    /// until `read_done` decided the partition's flows and terms it is not published).
    pub(super) fn awaiting_read(&self, h: &handover::Handover, tp: &TopicPartition) -> bool {
        h.unread(&self.cfg.name, tp)
            || self
                .handover
                .reading
                .as_ref()
                .is_some_and(|r| r.tps.contains(tp))
    }

    /// The outcome of a background read of the unread partitions `tps`.
    pub(super) async fn read_done(
        &mut self,
        tps: Vec<TopicPartition>,
        outcome: Result<HashMap<TopicPartition, PartitionState>, String>,
    ) {
        match outcome {
            Ok(states) => {
                let me = self
                    .handover
                    .link
                    .as_ref()
                    .map(|h| h.owner().to_string())
                    .unwrap_or_default();
                self.past_used_terms(&tps).await;
                self.record_used_terms(&tps).await;
                // An import of the state found, cut before this partition resumed from its
                // store (review T2): it resumes, as at an assignment.
                let resumable = self.resumable_imports(&states).await;
                // The others resume from their store: an import they began is over.
                let abandoned: Vec<TopicPartition> = tps
                    .iter()
                    .filter(|tp| !resumable.contains_key(*tp))
                    .cloned()
                    .collect();
                self.abandon_imports(abandoned).await;
                for tp in &tps {
                    self.handover.pending.remove(tp);
                    self.handover.claims.remove(tp);
                    self.handover.dirty.insert(tp.clone());
                    // Its store's retired gaps go to the side topic before its first base,
                    // under the term the read gave it (past every term read). A format-3
                    // state found (another owner's, or this owner's own) keeps its chunks
                    // under its own term, named by it until this owner's first state
                    // replaces it: the partition resumed from this store, whose verdicts
                    // stand as they do for a store further than the handover at an
                    // assignment (review of format 3, F3 and R2: nothing of theirs is
                    // overwritten, so nothing of it is lost while theirs is the newest).
                    if let (Some(st), Some((counted, below, only_unknown))) =
                        (states.get(tp), resumable.get(tp))
                    {
                        tracing::info!(audit = %self.cfg.name, %tp, previous_owner = %st.owner,
                            "the import of the previous owner's given-up gaps did not finish before this partition left: resumed, from this store's progress");
                        let handed = st.retired_gaps.clone().unwrap_or_default();
                        if let Some(p) = self.parts.get_mut(tp) {
                            p.ledger.retired_handed_over(handed.merged(counted));
                        }
                        self.handover.retired_flows.insert(
                            tp.clone(),
                            super::retired_flow::Flow::Import(
                                crate::handover::retired::ImportCursor::start(),
                                super::retired_flow::Source {
                                    term: st.term,
                                    owner: st.owner.clone(),
                                    below: *below,
                                    only_unknown: *only_unknown,
                                },
                            ),
                        );
                        continue;
                    }
                    let found = states.get(tp).map(|st| (st.version, st.owner.as_str()));
                    if found.is_some_and(|(version, _)| version >= 3) {
                        tracing::warn!(audit = %self.cfg.name, %tp, previous_owner = ?found.map(|f| f.1), me = %me,
                            "the handover topic, read after this partition resumed, holds a format-3 state: this partition keeps its own verdicts, and its given-up gaps go to the side topic under its own term before it publishes");
                    }
                    self.handover
                        .retired_flows
                        .insert(tp.clone(), super::retired_flow::Flow::Sweep(Offset::MIN));
                }
                for (tp, st) in states {
                    let ours = self.parts.get(&tp).map(|p| p.ledger.settled());
                    if ours.is_some_and(|o| st.settled > o) {
                        tracing::warn!(audit = %self.cfg.name, %tp, settled = ?ours, handed_over = st.settled, previous_owner = %st.owner,
                            "the handover topic was read only after this partition resumed: its previous owner's open gaps below its settled offset are not followed here (they stay in that owner's store)");
                    }
                }
                tracing::info!(audit = %self.cfg.name, partitions = ?tps, "handover topic read: these partitions are published and committed again");
            }
            Err(e) => {
                tracing::warn!(audit = %self.cfg.name, error = %e, partitions = ?tps,
                    "cannot read the handover topic yet: these partitions are neither handed over nor committed; retried next round");
            }
        }
    }
}

/// Which dirty partitions `tps` a publish of `published` (in order, with `acked` per
/// state) leaves done and which it leaves held (not to be committed): a partition is done
/// when its state was acknowledged or it had none to publish (its ledger not anchored);
/// one partition's failure holds only that partition.
pub(super) fn outcome(
    tps: &[TopicPartition],
    published: &[(TopicPartition, u64)],
    acked: &[bool],
) -> (BTreeSet<TopicPartition>, BTreeSet<TopicPartition>) {
    let failed: BTreeSet<TopicPartition> = published
        .iter()
        .enumerate()
        .filter(|(i, _)| !acked.get(*i).copied().unwrap_or(false))
        .map(|(_, (tp, _))| tp.clone())
        .collect();
    tps.iter().cloned().partition(|tp| !failed.contains(tp))
}

/// What a delta compares its key claims with (`claims_kept`): the claims of the last publish
/// the broker acknowledged, per partition. After a failed publish a partition's entry goes:
/// its delta may have landed with other claims (a timeout says nothing of the broker's
/// side), or others of the publish did, so the next delta repeats its claims.
pub(super) fn remember_claims<'a>(
    memory: &mut HashMap<TopicPartition, u64>,
    published: impl Iterator<Item = &'a (TopicPartition, u64)>,
    ok: bool,
) {
    for (tp, hash) in published {
        if ok {
            memory.insert(tp.clone(), *hash);
        } else {
            memory.remove(tp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Review item 7 (format 3): an acknowledged gap whose row is retired (marked with the
    /// write after its acknowledgement) travels as a side-topic chunk, never inline in a
    /// state, even when named; a row not retired yet still goes inline.
    #[test]
    fn a_retired_acknowledged_gap_is_not_inlined() {
        let mut g = Gap {
            id: Gap::make_id("a", "t", 0, 5),
            audit: "a".into(),
            topic: "t".into(),
            partition: 0,
            first_offset: 5,
            last_offset: 5,
            missing_records: 1,
            size_known: true,
            first_timestamp: None,
            last_timestamp: None,
            detected_at: Utc::now(),
            state: crate::gap::GapState::Acknowledged,
            unrecoverable_at: None,
            cause: crate::gap::GapCause::DroppedInFlight,
            pipeline_commit_from: None,
            pipeline_commit_to: None,
            pipeline_commit_at: None,
            evidence: None,
            shared_key: false,
            replayed_at: None,
            ack_reason: Some("known".into()),
        };
        let ids = HashSet::from([g.id.clone()]);
        assert!(
            !handed(&(g.clone(), false, true), &ids),
            "retired, acknowledged"
        );
        assert!(handed(&(g.clone(), false, false), &ids), "not retired yet");
        g.state = crate::gap::GapState::Open;
        assert!(!handed(&(g.clone(), false, true), &ids), "retired, open");
        assert!(handed(&(g.clone(), false, false), &ids), "held, open");
        assert!(!handed(&(g, false, false), &HashSet::new()), "not named");
    }

    /// A delta whose publish failed may have landed with new claims: the claims are sent
    /// again, never kept (a later delta with the earlier claims would otherwise say
    /// "kept", and a reader holding the failed delta's claims would keep those).
    #[test]
    fn claims_are_remembered_only_once_the_broker_acknowledged_them() {
        let tp = TopicPartition::new("logs", 0);
        let mut memory = HashMap::new();
        remember_claims(&mut memory, [(tp.clone(), 1)].iter(), true);
        assert_eq!(memory.get(&tp), Some(&1));
        remember_claims(&mut memory, [(tp.clone(), 2)].iter(), false);
        assert_eq!(
            memory.get(&tp),
            None,
            "after a failure the claims' next publish repeats them"
        );
        remember_claims(&mut memory, [(tp.clone(), 2)].iter(), true);
        assert_eq!(memory.get(&tp), Some(&2));
    }
}

#[cfg(test)]
mod outcome_tests {
    use super::*;

    /// Review item 2: one partition's failed publish holds only that partition's commit;
    /// the acknowledged ones and those with nothing to publish are done.
    #[test]
    fn a_failed_publish_holds_only_its_own_partition() {
        let (a, b, c) = (
            TopicPartition::new("logs", 0),
            TopicPartition::new("logs", 1),
            TopicPartition::new("logs", 2),
        );
        let tps = vec![a.clone(), b.clone(), c.clone()];
        let published = vec![(a.clone(), 1), (b.clone(), 2)];
        let (done, held) = outcome(&tps, &published, &[true, false]);
        assert_eq!(done, BTreeSet::from([a, c]));
        assert_eq!(held, BTreeSet::from([b]));
    }
}
