//! `check`'s reading of the dead-letter topic: everything it holds, read once per run (then
//! only what is appended), blocking.
//! Read committed as the daemon's reader (`super`), and to the high watermark: a
//! transaction left open holds a read_committed reader at its first record (the last
//! stable offset), and what it may still commit is unknown, so `check` fails rather than
//! decide without it (it says so; run it again once the transaction ended).

use super::{REQUEST_TIMEOUT, Source, partitions_of};
use crate::config::{IsolationLevel, KafkaConfig};
use crate::dead_letters::{DeadLetterIndex, Unplaced, parse_headers, written_by};
use crate::types::{Offset, TopicPartition};
use anyhow::Context;
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers};
use rdkafka::{Offset as KOffset, TopicPartitionList};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// How long the reading of a partition waits without getting closer to its high watermark.
const IDLE: Duration = Duration::from_secs(10);

/// The consumers' `group.id` (never joined).
const NAME: &str = "gap-auditor-check-dead-letters";

/// `check`'s reader of one audit's dead-letter topic, kept for the whole run: the first
/// [`Self::refresh`] reads the topic from its beginning, each later one only what was
/// appended since (review of issue 37: the whole topic was read again for every range
/// checked, once per audited partition).
pub struct CheckReader {
    /// Read committed.
    kafka: KafkaConfig,
    /// Metadata and watermarks, read uncommitted (`super::watermark_client`).
    watermarks: BaseConsumer,
    topic: String,
    audited: HashSet<String>,
    connector: Option<String>,
    index: DeadLetterIndex,
    /// Per partition, where the next refresh starts.
    next: HashMap<i32, Offset>,
    /// When the last refresh began (unix ms, check's wall clock); 0 before the first.
    read_at: i64,
    /// Dead-letter records read so far, over every refresh.
    records_read: u64,
}

impl CheckReader {
    /// A reader of `source`'s topic; nothing read yet.
    pub fn new(kafka: &KafkaConfig, source: Source<'_>) -> anyhow::Result<Self> {
        let mut kafka = kafka.clone();
        kafka.isolation_level = IsolationLevel::ReadUncommitted;
        let watermarks = super::super::range::consumer(&kafka, NAME)
            .context("creating the dead-letter topic reader")?;
        kafka.isolation_level = IsolationLevel::ReadCommitted;
        Ok(Self {
            kafka,
            watermarks,
            topic: source.topic.to_owned(),
            audited: source.audited.iter().cloned().collect(),
            connector: source.connector.map(str::to_owned),
            index: DeadLetterIndex::default(),
            next: HashMap::new(),
            read_at: 0,
            records_read: 0,
        })
    }

    /// The coordinates read on the audited topics (below their log ends).
    pub fn index(&self) -> &DeadLetterIndex {
        &self.index
    }

    /// The moment before the last refresh read the log ends: records due by then may be
    /// decided with [`Self::index`], as the daemon decides.
    pub fn read_at(&self) -> i64 {
        self.read_at
    }

    /// Dead-letter records read so far (each once).
    pub fn records_read(&self) -> u64 {
        self.records_read
    }

    /// Reads what the topic holds beyond what was read, up to its high watermarks now.
    pub fn refresh(&mut self) -> anyhow::Result<()> {
        let t0 = chrono::Utc::now().timestamp_millis();
        let topic = self.topic.clone();
        let md = self
            .watermarks
            .fetch_metadata(Some(&topic), REQUEST_TIMEOUT)
            .with_context(|| format!("reading metadata of the dead-letter topic {topic}"))?;
        let parts = partitions_of(&md, &topic).map_err(anyhow::Error::msg)?;
        let mut unplaced = Unplaced::default();
        for p in parts {
            let (low, high) = self
                .watermarks
                .fetch_watermarks(&topic, p, REQUEST_TIMEOUT)
                .with_context(|| format!("reading the watermarks of {topic}-{p}"))?;
            let from = self.next.get(&p).copied().unwrap_or(low).max(low);
            if high <= from {
                continue;
            }
            let reader = super::super::range::consumer(&self.kafka, NAME)
                .context("creating the dead-letter topic reader")?;
            let (audited, connector) = (&self.audited, self.connector.as_deref());
            let mut read = 0u64;
            let mut err = None;
            read_partition(&reader, &topic, p, from, high, |m| {
                read += 1;
                let headers = m.headers();
                let pairs = || {
                    headers
                        .iter()
                        .flat_map(|h| h.iter().map(|Header { key, value }| (key, value)))
                };
                if written_by(pairs(), connector)
                    && let Ok((named, offset)) = parse_headers(pairs())
                    && audited.contains(named.topic.as_str())
                {
                    unplaced.push(named, offset, false);
                    if unplaced.is_full()
                        && let Err(e) =
                            place(&self.watermarks, &topic, &mut unplaced, &mut self.index)
                    {
                        err = Some(e);
                        anyhow::bail!("placing dead-letter coordinates");
                    }
                }
                Ok(())
            })
            .map_err(|e| err.take().unwrap_or(e))?;
            self.records_read += read;
            self.next.insert(p, high);
        }
        place(&self.watermarks, &topic, &mut unplaced, &mut self.index)?;
        self.read_at = t0;
        Ok(())
    }
}

/// Places `unplaced` into `index`: coordinates beyond their partition's log end (asked
/// after they were read) are dropped, as the daemon ignores them; only the others count
/// against the bound.
fn place(
    watermarks: &BaseConsumer,
    topic: &str,
    unplaced: &mut Unplaced,
    index: &mut DeadLetterIndex,
) -> anyhow::Result<()> {
    let placed = unplaced.place(
        |_| true,
        |tp| {
            watermarks
                .fetch_watermarks(&tp.topic, tp.partition, REQUEST_TIMEOUT)
                .map(|(_, high)| high)
                .with_context(|| format!("reading the high watermark of {tp}"))
        },
    )?;
    for (tp, offset) in placed.kept {
        index.insert(tp, offset);
        if index.is_full() {
            anyhow::bail!(
                "the dead-letter topic {topic} names more than {} records: check cannot hold them",
                crate::dead_letters::MAX_DEAD_LETTERS
            );
        }
    }
    Ok(())
}

/// Reads `topic`-`p` from `low` until its position reaches `high` (past markers and aborted
/// records too), handing every committed record to `each`.
fn read_partition(
    consumer: &BaseConsumer,
    topic: &str,
    p: i32,
    low: Offset,
    high: Offset,
    mut each: impl FnMut(&rdkafka::message::BorrowedMessage<'_>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let tp = TopicPartition::new(topic, p);
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, p, KOffset::Offset(low))
        .with_context(|| format!("assigning {tp}"))?;
    consumer
        .assign(&tpl)
        .with_context(|| format!("assigning {tp}"))?;
    // The furthest point reached (a record delivered, or the position past markers and
    // aborted records), and when it last moved.
    let mut reached = low;
    let mut progress = Instant::now();
    loop {
        let mut now = reached;
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                now = now.max(m.offset() + 1);
                if m.offset() < high {
                    each(&m)?;
                }
            }
            // The end of what a read_committed fetch delivers: the position says where.
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) | None => {}
            Some(Err(e)) => {
                return Err(e).with_context(|| format!("reading the dead-letter topic {tp}"));
            }
        }
        let position = consumer
            .position()
            .ok()
            .and_then(|l| l.find_partition(topic, p).and_then(|e| e.offset().to_raw()))
            .unwrap_or(-1);
        now = now.max(position);
        if now >= high {
            return Ok(());
        }
        if now > reached {
            reached = now;
            progress = Instant::now();
        }
        if progress.elapsed() > IDLE {
            anyhow::bail!(
                "the dead-letter topic {tp} cannot be read to its end ({high}) within {} s: \
                 stopped at {reached} (a transaction left open there holds every reader at its \
                 first record; what it commits may name records of this range): check cannot \
                 decide, run it again once the transaction ended",
                IDLE.as_secs()
            );
        }
    }
}
