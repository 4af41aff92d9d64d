//! `check`'s reading of the dead-letter topic: everything it holds now, once, blocking.
//! Read committed as the daemon's reader (`super`), and to the high watermark: a
//! transaction left open holds a read_committed reader at its first record (the last
//! stable offset), and what it may still commit is unknown, so `check` fails rather than
//! decide without it (it says so; run it again once the transaction ended).

use super::{REQUEST_TIMEOUT, Source, partitions_of};
use crate::config::{IsolationLevel, KafkaConfig};
use crate::dead_letters::{DeadLetterIndex, Unplaced, parse_headers, written_by};
use crate::gap::{Offset, TopicPartition};
use anyhow::Context;
use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers};
use rdkafka::{Offset as KOffset, TopicPartitionList};
use std::collections::HashSet;
use std::time::{Duration, Instant};

/// How long the reading of a partition waits without getting closer to its high watermark.
const IDLE: Duration = Duration::from_secs(10);

/// The consumers' `group.id` (never joined).
const NAME: &str = "gap-auditor-check-dead-letters";

/// Reads the dead-letter topic of `source` once. Returns the coordinates it names on the
/// audited topics and the moment (unix ms, check's wall clock) before its log ends were
/// read: records due by then may be decided with it, as the daemon decides.
pub fn read_once(
    kafka: &KafkaConfig,
    source: Source<'_>,
) -> anyhow::Result<(DeadLetterIndex, i64)> {
    let mut kafka = kafka.clone();
    // Watermarks read uncommitted: the true high watermark, open transactions included
    // (`super::watermark_client`).
    kafka.isolation_level = IsolationLevel::ReadUncommitted;
    let t0 = chrono::Utc::now().timestamp_millis();
    let consumer = super::super::range::consumer(&kafka, NAME)
        .context("creating the dead-letter topic reader")?;
    kafka.isolation_level = IsolationLevel::ReadCommitted;
    let topic = source.topic;
    let md = consumer
        .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
        .with_context(|| format!("reading metadata of the dead-letter topic {topic}"))?;
    let parts = partitions_of(&md, topic).map_err(anyhow::Error::msg)?;
    let audited: HashSet<&str> = source.audited.iter().map(String::as_str).collect();
    let mut index = DeadLetterIndex::default();
    let mut unplaced = Unplaced::default();
    // Coordinates beyond their partition's log end (asked after they were read) are
    // dropped, as the daemon ignores them: only the others count against the bound.
    let place = |unplaced: &mut Unplaced, index: &mut DeadLetterIndex| -> anyhow::Result<()> {
        let placed = unplaced.place(
            |_| true,
            |tp| {
                consumer
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
    };
    for p in parts {
        let (low, high) = consumer
            .fetch_watermarks(topic, p, REQUEST_TIMEOUT)
            .with_context(|| format!("reading the watermarks of {topic}-{p}"))?;
        if high <= low {
            continue;
        }
        let reader = super::super::range::consumer(&kafka, NAME)
            .context("creating the dead-letter topic reader")?;
        read_partition(&reader, topic, p, low, high, |m| {
            let headers = m.headers();
            let pairs = || {
                headers
                    .iter()
                    .flat_map(|h| h.iter().map(|Header { key, value }| (key, value)))
            };
            if written_by(pairs(), source.connector)
                && let Ok((named, offset)) = parse_headers(pairs())
                && audited.contains(named.topic.as_str())
            {
                unplaced.push(named, offset, false);
                if unplaced.is_full() {
                    place(&mut unplaced, &mut index)?;
                }
            }
            Ok(())
        })?;
    }
    place(&mut unplaced, &mut index)?;
    Ok((index, t0))
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
