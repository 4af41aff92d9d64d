//! Flow control: how many records each partition holds pending in the audit, and the plan
//! of which partitions to pause and resume so the total stays under `max_pending`.

use crate::types::TopicPartition;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Backpressure between the audit task and the tailing thread, decided per partition.
///
/// A partition's load is its undecided records: pending in the ledger, plus read and not
/// yet ingested. With `M = max_pending` and `n` partitions assigned to this audit, the
/// thread pauses:
/// - while the total load is at least `M / 2`, every partition holding at least its fair
///   share `M / n`; such a partition resumes once it holds less than 90 % of its share, or
///   once the total falls below 90 % of `M / 2`;
/// - when the total reaches `M`, every partition, until the total falls below 90 % of `M`.
///
/// Why per partition: the due rule keeps a partition's records undecided for as long as its
/// pipeline does not commit, so one stalled partition grows without bound. Pausing on the
/// sum alone let it fill `max_pending` and stop the reading of the healthy partitions, whose
/// losses then went undetected, and whose unread ranges became unverifiable once the pause
/// outlasted retention. Here a stalled partition stops once the total reaches `M / 2` (or at
/// its share, when that is more), which leaves the other half of the budget to the rest: a
/// partition below its share is never paused while the total is under `M`, and the total
/// reaches `M` only when the healthy traffic itself needs more than the budget left to it
/// (`max_pending` too small for it). A partition over its share whose records keep being
/// decided falls back under 90 % of it within a round or two and resumes: throttled, never
/// blinded.
///
/// Memory stays capped at `M` records plus the one record a poll hands over (librdkafka
/// drops a paused partition's prefetched records and fetches them again on resume), and
/// nothing is dropped: a paused partition resumes where it stopped. With one assigned
/// partition its share is `M`: a plain cap at `M`, as before.
#[derive(Debug)]
pub struct Flow {
    pub(super) max: u64,
    /// Ledger pending of all partitions: the thread's per-record check reads only atomics.
    pub(super) pending: AtomicU64,
    pub(super) in_flight: AtomicU64,
    /// Bumped whenever loads change by something else than the thread reading a record.
    pub(super) version: AtomicU64,
    loads: Mutex<Loads>,
    /// What the thread has paused, for the status page.
    pub(super) paused: Mutex<HashSet<TopicPartition>>,
}

/// Per-partition loads, as the audit and the thread last reported them.
#[derive(Debug, Default)]
struct Loads {
    pending: HashMap<TopicPartition, u64>,
    in_flight: HashMap<TopicPartition, u64>,
    /// Records per partition of each batch sent and not yet ingested, oldest first: the
    /// audit acknowledges batches in order and by size only.
    sent: VecDeque<Vec<(TopicPartition, u64)>>,
}

impl Flow {
    /// A flow capped at `max_pending` records.
    pub fn new(max_pending: u64) -> Self {
        Self {
            max: max_pending.max(1),
            pending: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            version: AtomicU64::new(0),
            loads: Mutex::default(),
            paused: Mutex::default(),
        }
    }

    /// The audit ingested `n` records handed over by the thread (a whole batch, in order).
    pub fn ingested(&self, n: u64) {
        let _ = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                Some(v.saturating_sub(n))
            });
        if let Ok(mut l) = self.loads.lock() {
            let Loads {
                in_flight, sent, ..
            } = &mut *l;
            let mut left = n;
            while left > 0 {
                let Some(batch) = sent.front_mut() else { break };
                for (tp, c) in batch.iter_mut() {
                    let take = (*c).min(left);
                    *c -= take;
                    left -= take;
                    if let Some(f) = in_flight.get_mut(tp) {
                        *f = f.saturating_sub(take);
                        if *f == 0 {
                            in_flight.remove(tp);
                        }
                    }
                }
                batch.retain(|(_, c)| *c > 0);
                if batch.is_empty() {
                    sent.pop_front();
                }
            }
        }
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// The ledger now holds these undecided records per partition (every partition the
    /// audit owns; others count as empty).
    pub fn set_pending<'a>(&self, parts: impl IntoIterator<Item = (&'a TopicPartition, u64)>) {
        let map: HashMap<TopicPartition, u64> = parts
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(tp, n)| (tp.clone(), n))
            .collect();
        let total = map.values().sum();
        if let Ok(mut l) = self.loads.lock() {
            l.pending = map;
        }
        self.pending.store(total, Ordering::Release);
        self.version.fetch_add(1, Ordering::AcqRel);
    }

    /// Records not yet decided, counting those in transit.
    pub fn load(&self) -> u64 {
        self.pending.load(Ordering::Acquire) + self.in_flight.load(Ordering::Acquire)
    }

    /// Whether consumption of `tp` is paused right now.
    pub fn is_paused(&self, tp: &TopicPartition) -> bool {
        self.paused.lock().map(|p| p.contains(tp)).unwrap_or(false)
    }

    /// A batch left the thread with these records per partition.
    pub(super) fn sent(&self, counts: Vec<(TopicPartition, u64)>) {
        if counts.is_empty() {
            return;
        }
        if let Ok(mut l) = self.loads.lock() {
            for (tp, c) in &counts {
                *l.in_flight.entry(tp.clone()).or_default() += c;
            }
            l.sent.push_back(counts);
        }
    }

    /// Load of each of `tps`, adding `unsent` (records still in the thread's batch).
    pub(super) fn loads_of(
        &self,
        tps: &[TopicPartition],
        unsent: &[(Arc<str>, i32, u64)],
    ) -> Vec<u64> {
        let Ok(l) = self.loads.lock() else {
            return vec![0; tps.len()];
        };
        tps.iter()
            .map(|tp| {
                let held = unsent
                    .iter()
                    .filter(|(t, p, _)| *p == tp.partition && **t == *tp.topic)
                    .map(|(_, _, c)| c)
                    .sum::<u64>();
                l.pending.get(tp).copied().unwrap_or(0)
                    + l.in_flight.get(tp).copied().unwrap_or(0)
                    + held
            })
            .collect()
    }

    pub(super) fn soft_mark(&self) -> u64 {
        (self.max / 2).max(1)
    }
}

/// 90 % of `x`: the hysteresis of every backpressure mark.
fn ninety(x: u64) -> u64 {
    x - x / 10
}

/// Which backpressure marks are engaged.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Pressure {
    /// The total reached `max_pending / 2`: partitions over their share pause.
    pub(super) soft: bool,
    /// The total reached `max_pending`: every partition pauses.
    pub(super) hard: bool,
}

/// What [`plan`] decided.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Plan {
    pub(super) pressure: Pressure,
    /// Per partition (same order as the loads): paused or not.
    pub(super) pause: Vec<bool>,
    /// Records the thread may read before this plan can change without anything else
    /// happening (at least 1).
    pub(super) headroom: u64,
}

/// The rule of [`Flow`], on `loads` of the assigned partitions (`was_paused` says which of
/// them are paused now) and the `total` load.
pub(super) fn plan(
    max: u64,
    total: u64,
    loads: &[u64],
    was_paused: &[bool],
    prev: Pressure,
) -> Plan {
    let max = max.max(1);
    let soft_mark = (max / 2).max(1);
    let share = (max / loads.len().max(1) as u64).max(1);
    let pressure = Pressure {
        hard: if prev.hard {
            total > ninety(max)
        } else {
            total >= max
        },
        soft: if prev.soft {
            total > ninety(soft_mark)
        } else {
            total >= soft_mark
        },
    };
    let pause: Vec<bool> = loads
        .iter()
        .zip(was_paused.iter().copied().chain(std::iter::repeat(false)))
        .map(|(&load, was)| {
            pressure.hard || (pressure.soft && (load >= share || (was && load > ninety(share))))
        })
        .collect();
    let mut headroom = u64::MAX;
    if !pressure.hard {
        headroom = headroom.min(max.saturating_sub(total));
        if pressure.soft {
            for (load, paused) in loads.iter().zip(&pause) {
                if !paused {
                    headroom = headroom.min(share.saturating_sub(*load));
                }
            }
        } else {
            headroom = headroom.min(soft_mark.saturating_sub(total));
        }
    }
    Plan {
        pressure,
        pause,
        headroom: headroom.max(1),
    }
}
