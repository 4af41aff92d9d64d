//! Offsets on the consumer: commits, the partitions it holds, and where new and revoked-then-
//! kept partitions start reading.

use crate::kafka::tail::rebalance::TailContext;
use crate::types::{Offset, TopicPartition};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, RebalanceProtocol};
use rdkafka::{Offset as KOffset, TopicPartitionList};
use std::collections::HashSet;

pub(super) fn commit(consumer: &BaseConsumer<TailContext>, offsets: &[(TopicPartition, Offset)]) {
    let mut tpl = TopicPartitionList::new();
    for (tp, o) in offsets {
        if let Err(e) = tpl.add_partition_offset(&tp.topic, tp.partition, KOffset::Offset(*o)) {
            tracing::error!(%tp, error = %e, "cannot build commit");
        }
    }
    if let Err(e) = consumer.commit(&tpl, CommitMode::Sync) {
        tracing::warn!(error = %e, "commit of the settled watermark failed; retried next round");
    }
}

/// The partitions in librdkafka's assignment.
pub(super) fn held(consumer: &BaseConsumer<TailContext>) -> HashSet<(String, i32)> {
    consumer
        .assignment()
        .map(|a| {
            a.elements()
                .iter()
                .map(|e| (e.topic().to_string(), e.partition()))
                .collect()
        })
        .unwrap_or_default()
}

/// Adds partitions to librdkafka's assignment at the starts the audit task resolved.
pub(super) fn start_at(consumer: &BaseConsumer<TailContext>, starts: &[(TopicPartition, Offset)]) {
    let cooperative = matches!(
        consumer.rebalance_protocol(),
        RebalanceProtocol::Cooperative
    );
    // Cooperative rebalances add to the assignment. An eager one hands over the whole
    // assignment in one event, so its starts are the whole assignment: `assign` replaces
    // what is held, which is nothing or (after a `Command::Reposition` for an offset out
    // of range) some of these same partitions. Not kept from `position()`: a partition not
    // fetched yet has no position, and assigning it that logical offset would restart it
    // at the group's commit.
    let mut tpl = TopicPartitionList::new();
    for (tp, o) in starts {
        // A negative start is librdkafka's logical end (-1) or beginning (-2): the audit
        // could not resolve it to an offset and anchors on the first record.
        let r = tpl.add_partition_offset(&tp.topic, tp.partition, KOffset::from_raw(*o));
        if let Err(e) = r {
            tracing::error!(%tp, error = %e, "cannot set start offset");
        }
    }
    let r = if cooperative {
        consumer.incremental_assign(&tpl)
    } else {
        consumer.assign(&tpl)
    };
    if let Err(e) = r {
        tracing::error!(error = %e, "assigning the new partitions at their starts failed");
    }
}

pub(super) fn reposition(
    consumer: &BaseConsumer<TailContext>,
    offsets: &[(TopicPartition, Offset)],
) {
    // Only what librdkafka holds: a partition revoked since the audit sent this would make
    // the cooperative unassign refuse the whole list, and nothing would restart.
    let held = held(consumer);
    let mut tpl = TopicPartitionList::new();
    for (tp, o) in offsets {
        if !held.contains(&(tp.topic.to_string(), tp.partition)) {
            tracing::debug!(%tp, "not re-positioned: no longer assigned");
            continue;
        }
        if let Err(e) = tpl.add_partition_offset(&tp.topic, tp.partition, KOffset::Offset(*o)) {
            tracing::error!(%tp, error = %e, "cannot build the new position");
        }
    }
    let r = if matches!(
        consumer.rebalance_protocol(),
        RebalanceProtocol::Cooperative
    ) {
        consumer
            .incremental_unassign(&tpl)
            .and_then(|_| consumer.incremental_assign(&tpl))
    } else {
        // Same partitions as owned (the audit sends every assigned one): only positions change.
        consumer.assign(&tpl)
    };
    if let Err(e) = r {
        tracing::error!(error = %e, "re-positioning the consumer failed");
    }
}
