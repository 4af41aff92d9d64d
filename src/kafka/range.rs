//! One bounded, group-less read of a partition's offsets `[first, end)`: what `check` and
//! `replay` both need (SPEC guarantee 9: one implementation, or the copies drift). The
//! consumer is `assign`ed, never subscribed: it joins no group and commits nothing, and its
//! `group.id` only names it in the broker's logs.

use crate::config::KafkaConfig;
use crate::kafka::client;
use crate::types::{Offset, TopicPartition};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{BorrowedMessage, Message, Timestamp};
use rdkafka::{Offset as KOffset, TopicPartitionList};
use std::time::Duration;

/// How long a read waits for the next record before it gives up.
const IDLE: Duration = Duration::from_secs(10);

/// What the reader does after a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// Read the next one.
    Continue,
    /// Stop here (the caller has what it needs).
    Stop,
}

/// Why a range could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RangeError {
    /// The consumer could not be created or assigned.
    #[error("reading {tp}: {source}")]
    Kafka {
        /// The partition.
        tp: TopicPartition,
        /// librdkafka's error.
        source: rdkafka::error::KafkaError,
    },
    /// Nothing arrived for [`IDLE`] before the end of the range.
    #[error("reading {tp}: no record for {} s before offset {end}", IDLE.as_secs())]
    Stalled {
        /// The partition.
        tp: TopicPartition,
        /// The end of the range.
        end: Offset,
    },
}

/// A record's Kafka timestamp in unix ms (create or log-append time), when it has one.
pub fn timestamp_ms(m: &impl Message) -> Option<i64> {
    match m.timestamp() {
        Timestamp::CreateTime(t) | Timestamp::LogAppendTime(t) if t >= 0 => Some(t),
        _ => None,
    }
}

/// The consumer a range read uses, unassigned: group-less in effect (`name` is its
/// `group.id`, never joined), nothing committed or stored, the audit's isolation level, an
/// error rather than a silent jump when an offset is gone, and end-of-partition reported.
/// Also what a caller asks for watermarks before reading, so both see the same log end.
pub fn consumer(
    kafka: &KafkaConfig,
    name: &str,
) -> Result<BaseConsumer, rdkafka::error::KafkaError> {
    let mut cfg = client::base(kafka);
    cfg.set("group.id", name)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", kafka.isolation_level.as_librdkafka())
        .set("auto.offset.reset", "error")
        .set("enable.partition.eof", "true");
    cfg.create()
}

/// Reads `tp` from `first` until `end` (exclusive), the partition's end, or `each` says
/// stop, handing every record to `each`. `name` is the consumer's `group.id` (never joined).
pub fn read(
    kafka: &KafkaConfig,
    name: &str,
    tp: &TopicPartition,
    first: Offset,
    end: Offset,
    mut each: impl FnMut(&BorrowedMessage<'_>) -> Flow,
) -> Result<(), RangeError> {
    let fail = |source| RangeError::Kafka {
        tp: tp.clone(),
        source,
    };
    if end <= first {
        return Ok(());
    }
    let consumer = consumer(kafka, name).map_err(fail)?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&tp.topic, tp.partition, KOffset::Offset(first))
        .map_err(fail)?;
    // assign(), never subscribe(): no group membership, no commit.
    consumer.assign(&tpl).map_err(fail)?;
    let poll = Duration::from_millis(200);
    let mut idle = Duration::ZERO;
    loop {
        match consumer.poll(poll) {
            Some(Ok(m)) => {
                idle = Duration::ZERO;
                if m.offset() >= end || each(&m) == Flow::Stop || m.offset() + 1 >= end {
                    return Ok(());
                }
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => return Ok(()),
            Some(Err(e)) => return Err(fail(e)),
            None => {
                idle += poll;
                if idle > IDLE {
                    return Err(RangeError::Stalled {
                        tp: tp.clone(),
                        end,
                    });
                }
            }
        }
    }
}
