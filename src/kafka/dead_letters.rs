//! The dead-letter reader: a thread that reads the pipeline's dead-letter topic from its
//! beginning, keeps the coordinates its records name ([`crate::dead_letters`]) and says up
//! to when it has read everything (`caught_up_ms`), which the due rule waits for.
//!
//! Why from the beginning, every start: a dead-letter record may have been written long
//! before the auditor resumes at its settled watermark, and the topic keeps no index by
//! source offset; the index's floors forget what is decided, so only the read costs time.
//!
//! Why the due rule waits: a record is decided only once it was due at a moment when the
//! reader had read the whole topic (its position at the high watermark fetched after that
//! moment). Kafka Connect writes a record's dead letter before it commits past the record,
//! so under `pipeline_group` every dead letter of a due record is read before its verdict.
//! While the topic cannot be read, nothing is decided (lag, never a false loss).
//!
//! Read committed, whatever the audit's own `isolation_level` (review of issue 37): a
//! dead-letter record of an aborted transaction was never written as far as the pipeline is
//! concerned (a transactional Flink side output aborts it with the checkpoint that failed),
//! and taken as evidence it would turn a real loss into "dead-lettered". Connect's
//! dead-letter producer is not transactional, so its records are read as before. A
//! transaction left open in the topic holds the reader below the high watermark, so nothing
//! is caught up past it: verdicts wait until it ends (lag, never a loss for want of a dead
//! letter it may still commit).

mod once;
mod place;
mod problem;
pub use once::CheckReader;

use crate::config::KafkaConfig;
use crate::dead_letters::{
    DeadLetterIndex, Ignored, MAX_DEAD_LETTERS, Unplaced, parse_headers, written_by,
};
use crate::metrics::Metrics;
use crate::types::{Offset, TopicPartition};
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers};
use rdkafka::{Offset as KOffset, TopicPartitionList};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How often the reader compares its position with the topic's high watermarks.
const CATCH_UP_EVERY: Duration = Duration::from_millis(500);
/// Bounds each metadata and watermark request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// What the reader shares with the audit.
#[derive(Debug, Default)]
pub struct DeadLetters {
    /// The coordinates read and not yet forgotten.
    pub index: Mutex<DeadLetterIndex>,
    /// The last moment (audit clock, unix ms) at which everything written to the topic
    /// before it had been read; 0: not yet.
    caught_up_ms: AtomicI64,
    /// Why the topic cannot be read, while it cannot.
    problem: Mutex<Option<String>>,
    /// The audited partitions this instance owns (`None`: not told yet, every one is kept)
    /// and a generation that moves when one is added: coordinates of partitions another
    /// instance owns are not kept (its verdicts would never free them, and with several
    /// instances they filled the index for good, stalling every verdict), so a partition
    /// assigned later needs the topic read again from its beginning.
    owned: Mutex<Owned>,
}

/// See [`DeadLetters::owned`].
#[derive(Debug, Default)]
struct Owned {
    partitions: Option<HashSet<TopicPartition>>,
    generation: u64,
}

impl DeadLetters {
    /// Records due at or before this moment may be decided ([`Self`] docs).
    pub fn caught_up_ms(&self) -> i64 {
        self.caught_up_ms.load(Ordering::SeqCst)
    }

    /// The index, even if a holder panicked (its data is plain coordinates).
    pub fn lock(&self) -> std::sync::MutexGuard<'_, DeadLetterIndex> {
        self.index.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why the topic cannot be read, while it cannot (`/api/status`).
    pub fn problem(&self) -> Option<String> {
        self.problem
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Everything written to the topic before `ms` has been read (never moves back, except
    /// when a partition is assigned: [`Self::set_owned`]).
    pub fn mark_caught_up(&self, ms: i64) {
        self.caught_up_ms.fetch_max(ms, Ordering::SeqCst);
    }

    /// [`Self::mark_caught_up`], unless the owned partitions gained one since `generation`
    /// (the reading that reached `ms` did not keep that partition's coordinates).
    fn mark_caught_up_at(&self, generation: u64, ms: i64) {
        let owned = self.owned();
        if owned.generation == generation {
            self.caught_up_ms.fetch_max(ms, Ordering::SeqCst);
        }
    }

    fn owned(&self) -> std::sync::MutexGuard<'_, Owned> {
        self.owned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The generation of the owned partitions (moves when one is added).
    fn generation(&self) -> u64 {
        self.owned().generation
    }

    /// Whether a coordinate on `tp` is kept.
    fn keeps(&self, tp: &TopicPartition) -> bool {
        self.owned()
            .partitions
            .as_ref()
            .is_none_or(|p| p.contains(tp))
    }

    /// The audited partitions this instance owns now (every round). Coordinates of others
    /// are dropped; a partition not owned before makes the reader read the topic again from
    /// its beginning, and until it has, nothing is caught up (verdicts wait: lag, never a
    /// loss for want of a dead letter dropped while another instance owned the partition).
    pub fn set_owned(&self, parts: impl IntoIterator<Item = TopicPartition>) {
        let now: HashSet<TopicPartition> = parts.into_iter().collect();
        let mut owned = self.owned();
        let added = match &owned.partitions {
            None => false,
            Some(before) => now.iter().any(|tp| !before.contains(tp)),
        };
        if owned.partitions.as_ref() == Some(&now) {
            return;
        }
        if added {
            owned.generation += 1;
            self.caught_up_ms.store(0, Ordering::SeqCst);
        }
        self.lock().retain(|tp| now.contains(tp));
        owned.partitions = Some(now);
    }
}

/// What a reading of the dead-letter topic keeps: coordinates on the `audited` topics, from
/// dead letters `connector` wrote (any, when `None`).
#[derive(Debug, Clone, Copy)]
pub struct Source<'a> {
    /// The dead-letter topic.
    pub topic: &'a str,
    /// The audit's topics.
    pub audited: &'a [String],
    /// `connect_connector`.
    pub connector: Option<&'a str>,
}

/// Starts the reader of `source` for `audit`; it stops when `cancel` fires.
pub fn start(
    kafka: &KafkaConfig,
    group: &str,
    audit: &str,
    source: Source<'_>,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
) -> anyhow::Result<Arc<DeadLetters>> {
    let Source {
        topic,
        audited,
        connector,
    } = source;
    let mut cfg = super::client::consumer(kafka, &format!("{group}.dead-letters"));
    // Set last: neither `kafka.isolation_level` nor `kafka.properties` changes it.
    cfg.set("isolation.level", "read_committed");
    let consumer: BaseConsumer = cfg.create()?;
    let watermarks = watermark_client(kafka, group)?;
    let shared = Arc::new(DeadLetters::default());
    let reader = Reader {
        consumer,
        watermarks,
        source: OwnedSource {
            topic: topic.to_owned(),
            audit: audit.to_owned(),
            audited: audited.iter().cloned().collect(),
            connector: connector.map(str::to_owned),
        },
        metrics,
        shared: shared.clone(),
        next: BTreeMap::new(),
        problem: None,
        problems: problem::Problems::default(),
        full_warned: false,
        generation: 0,
        counted: BTreeMap::new(),
        unplaced: Unplaced::default(),
    };
    std::thread::Builder::new()
        .name(format!("dead-letters-{audit}"))
        .spawn(move || reader.run(&cancel))?;
    Ok(shared)
}

/// The reader's [`Source`], owned, and the audit it reads for.
struct OwnedSource {
    /// The dead-letter topic.
    topic: String,
    audit: String,
    /// The audit's topics.
    audited: HashSet<String>,
    /// `connect_connector`: only its dead letters count.
    connector: Option<String>,
}

struct Reader {
    consumer: BaseConsumer,
    /// Asks for high watermarks ([`watermark_client`]).
    watermarks: BaseConsumer,
    /// What it reads, for which audit.
    source: OwnedSource,
    metrics: Arc<Metrics>,
    shared: Arc<DeadLetters>,
    /// Assigned partitions and the next offset to be delivered on each (`None`: none yet).
    next: BTreeMap<i32, Option<Offset>>,
    /// The last problem logged (logged again only when it changes).
    problem: Option<String>,
    /// The fetch and check errors behind it.
    problems: problem::Problems,
    full_warned: bool,
    /// The owned partitions' generation the reading since the last rewind keeps.
    generation: u64,
    /// Per partition, the offset up to which records were read once (ignored ones are
    /// counted once, whatever the rewinds).
    counted: BTreeMap<i32, Offset>,
    /// Coordinates read, waiting for their partition's high watermark (`place.rs`).
    unplaced: Unplaced,
}

impl Reader {
    fn run(mut self, cancel: &CancellationToken) {
        let mut last_check: Option<Instant> = None;
        while !cancel.is_cancelled() {
            let generation = self.shared.generation();
            if generation != self.generation {
                // A partition was assigned: its coordinates were not kept, read it all again
                // (`check` assigns every partition from its beginning once `next` is empty).
                tracing::info!(audit = %self.source.audit, topic = %self.source.topic,
                    "a partition was assigned: reading the dead-letter topic again from its beginning");
                self.generation = generation;
                self.next.clear();
                // Placed first: a dead letter beyond the log end is counted when placed, and
                // the re-read will not count it again. On an error it is only not counted.
                let _ = self.place();
                self.unplaced.clear();
                last_check = None;
            }
            // Unplaced coordinates count against the index's bound: placed, they must fit.
            let full = self.unplaced.is_full()
                || self.shared.lock().runs() + self.unplaced.len() >= MAX_DEAD_LETTERS;
            if full {
                if !self.full_warned {
                    tracing::warn!(audit = %self.source.audit, topic = %self.source.topic,
                        "the dead-letter index is full; reading waits for verdicts to free room (verdicts wait too)");
                    self.full_warned = true;
                }
                std::thread::sleep(Duration::from_millis(200));
            } else {
                self.full_warned = false;
                let connector = self.source.connector.as_deref();
                let polled = self.consumer.poll(Duration::from_millis(100)).map(|r| {
                    r.map(|m| {
                        let headers = m.headers();
                        let pairs = || {
                            headers
                                .iter()
                                .flat_map(|h| h.iter().map(|Header { key, value }| (key, value)))
                        };
                        let named = if written_by(pairs(), connector) {
                            parse_headers(pairs())
                        } else {
                            Err(Ignored::OtherConnector)
                        };
                        (named, m.partition(), m.offset())
                    })
                });
                match polled {
                    Some(Ok((named, partition, offset))) => {
                        self.take(named, partition, offset);
                        self.next.insert(partition, Some(offset + 1));
                        self.problems.read_ok();
                        self.show();
                    }
                    Some(Err(e)) => {
                        self.problems.read_failed(format!("reading failed: {e}"));
                        self.show();
                    }
                    None => {}
                }
            }
            if last_check.is_none_or(|t| t.elapsed() >= CATCH_UP_EVERY) {
                last_check = Some(Instant::now());
                let checked = self.check();
                self.problems.checked(checked);
                self.show();
            }
        }
    }

    fn take(
        &mut self,
        named: Result<(crate::types::TopicPartition, Offset), Ignored>,
        partition: i32,
        at: Offset,
    ) {
        // Read again after a partition was assigned (`set_owned`): an ignored record is
        // counted the first time only.
        let counted = self.counted.get(&partition).is_some_and(|&c| at < c);
        if !counted {
            self.counted.insert(partition, at + 1);
        }
        let reason = match named {
            // Held until placed, owned or not: one beyond the log end is counted then
            // (placing keeps only the owned partitions' coordinates).
            Ok((tp, offset)) if self.source.audited.contains(&tp.topic) => {
                self.unplaced.push(tp, offset, counted);
                return;
            }
            Ok(_) => Ignored::OtherTopic,
            Err(reason) => reason,
        };
        if counted {
            return;
        }
        tracing::debug!(audit = %self.source.audit, topic = %self.source.topic, offset = at, %reason,
            "dead-letter record ignored");
        self.metrics
            .dead_letters_ignored
            .with_label_values(&[&self.source.audit, reason.as_str()])
            .inc();
    }

    /// Follows the topic's partitions and, when the position reached every high watermark
    /// fetched after `t0`, moves `caught_up_ms` to `t0`. Whether it did.
    fn check(&mut self) -> Result<bool, String> {
        let t0 = crate::clock::now_ms();
        // Every coordinate read so far is in the index (or ignored) before anything is
        // marked caught up.
        self.place()?;
        let md = self
            .consumer
            .fetch_metadata(Some(&self.source.topic), REQUEST_TIMEOUT)
            .map_err(|e| format!("metadata: {e}"))?;
        let parts = partitions_of(&md, &self.source.topic)?;
        if parts.iter().any(|p| !self.next.contains_key(p)) {
            let mut tpl = TopicPartitionList::new();
            for &p in &parts {
                let at = match self.next.get(&p).copied().flatten() {
                    Some(o) => KOffset::Offset(o),
                    None => KOffset::Beginning,
                };
                tpl.add_partition_offset(&self.source.topic, p, at)
                    .map_err(|e| format!("assignment: {e}"))?;
                self.next.entry(p).or_insert(None);
            }
            self.consumer
                .assign(&tpl)
                .map_err(|e| format!("assignment: {e}"))?;
        }
        let positions: BTreeMap<i32, Offset> = self
            .consumer
            .position()
            .map(|tpl| {
                tpl.elements()
                    .iter()
                    .filter_map(|e| e.offset().to_raw().map(|o| (e.partition(), o)))
                    .collect()
            })
            .unwrap_or_default();
        for &p in &parts {
            let (low, high) = self
                .watermarks
                .fetch_watermarks(&self.source.topic, p, REQUEST_TIMEOUT)
                .map_err(|e| format!("watermarks of partition {p}: {e}"))?;
            let read = self.next.get(&p).copied().flatten().unwrap_or(-1);
            let pos = read.max(positions.get(&p).copied().unwrap_or(-1));
            if high > low && pos < high {
                return Ok(false);
            }
        }
        self.shared.mark_caught_up_at(self.generation, t0);
        Ok(true)
    }

    /// Shows what [`Self::problems`] says (logged when it changes).
    fn show(&mut self) {
        let problem = self.problems.shown();
        self.note(problem);
    }

    fn note(&mut self, problem: Option<String>) {
        if problem == self.problem {
            return;
        }
        match &problem {
            Some(p) => {
                tracing::warn!(audit = %self.source.audit, topic = %self.source.topic, problem = %p,
                "cannot read the dead-letter topic; verdicts wait until it can be read")
            }
            None => tracing::info!(audit = %self.source.audit, topic = %self.source.topic,
                "reading the dead-letter topic"),
        }
        *self
            .shared
            .problem
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = problem.clone();
        self.problem = problem;
    }
}

/// A client that only asks for watermarks, read uncommitted: a read_committed client's
/// "high watermark" is the last stable offset (ListOffsets answers by isolation level), so
/// an open transaction's dead letters would lie beyond it and the reader would count itself
/// caught up without them. The real high watermark is reached only once every transaction
/// in the topic has ended (the committed reader's position passes its marker).
pub(crate) fn watermark_client(
    kafka: &KafkaConfig,
    group: &str,
) -> Result<BaseConsumer, rdkafka::error::KafkaError> {
    let mut cfg = super::client::consumer(kafka, &format!("{group}.dead-letters"));
    cfg.set("isolation.level", "read_uncommitted");
    cfg.create()
}

/// The dead-letter topic's partitions from a metadata answer. A topic that does not exist
/// (Connect creates it on the first error) holds no dead letter: no partitions, nothing to
/// wait for. Any other error of the topic (authorization, leader not available) is not
/// "empty": taken for empty, every record it names would be decided lost while it cannot be
/// read, so it is an error and verdicts wait.
fn partitions_of(md: &rdkafka::metadata::Metadata, topic: &str) -> Result<Vec<i32>, String> {
    use rdkafka::types::RDKafkaRespErr;
    let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
        return Ok(Vec::new());
    };
    match t.error() {
        None => Ok(t.partitions().iter().map(|p| p.id()).collect()),
        Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) => Ok(Vec::new()),
        Some(e) => Err(format!(
            "metadata of the dead-letter topic {topic}: {}",
            rdkafka::error::RDKafkaErrorCode::from(e)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    /// Review of issue 37: with several instances, coordinates of partitions another
    /// instance owns were kept and never freed (only this instance's verdicts free them),
    /// filling the index for good. Only owned partitions' coordinates are kept; a partition
    /// assigned later sets the catch-up back so that the topic is read again first.
    #[test]
    fn only_owned_partitions_are_kept_and_an_assigned_one_sets_the_catch_up_back() {
        let d = DeadLetters::default();
        // Not told yet: everything is kept.
        assert!(d.keeps(&tp(0)) && d.keeps(&tp(1)));
        d.lock().insert(tp(0), 5);
        d.lock().insert(tp(1), 7);
        d.mark_caught_up(1_000);
        let g0 = d.generation();

        // The first assignment: partition 0 only. Nothing was dropped before it, so no
        // re-read: the catch-up stands; partition 1's coordinate goes.
        d.set_owned([tp(0)]);
        assert_eq!((d.generation(), d.caught_up_ms()), (g0, 1_000));
        assert!(d.keeps(&tp(0)) && !d.keeps(&tp(1)));
        assert_eq!(d.lock().len(), 1);

        // Partition 1 assigned: its coordinates were dropped meanwhile, so nothing is
        // caught up until the reader read the topic again.
        d.set_owned([tp(0), tp(1)]);
        let g1 = d.generation();
        assert_ne!(g1, g0);
        assert_eq!(d.caught_up_ms(), 0);
        assert!(d.keeps(&tp(1)));
        // A reading that started before the assignment does not count.
        d.mark_caught_up_at(g0, 2_000);
        assert_eq!(d.caught_up_ms(), 0);
        d.mark_caught_up_at(g1, 3_000);
        assert_eq!(d.caught_up_ms(), 3_000);

        // The same set again, or one partition fewer: no re-read; the revoked one's
        // coordinates go.
        d.set_owned([tp(1), tp(0)]);
        assert_eq!((d.generation(), d.caught_up_ms()), (g1, 3_000));
        d.lock().insert(tp(0), 9);
        d.set_owned([tp(1)]);
        assert_eq!((d.generation(), d.caught_up_ms()), (g1, 3_000));
        assert_eq!(d.lock().len(), 0);
    }
}
