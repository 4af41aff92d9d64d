//! Where the consumer has read each partition to (issue 35, SPEC "Completeness").
//!
//! Under read_committed no fetch delivers a transaction's marker, nor an aborted batch: a
//! partition whose log ends in one is never read "to its log end" by records alone, and the
//! audit would never count it caught up. librdkafka's position (`rd_kafka_position`, the
//! application's position) does pass them: it moves past a control record when the
//! application's read of the queue takes it, as it moves past a record handed over. So the
//! tailing thread reports positions, after flushing the batch: every record below a
//! reported position was taken from librdkafka before the position was asked for, hence is
//! in that batch or an earlier one, and the audit task, reading one ordered channel, has
//! ingested it before it sees the position ([`super::TailEvent::ReadTo`]).
//!
//! A partition's position is not trusted right after the thread (re)starts it: librdkafka
//! resets it only when the previous fetcher has stopped, which happens asynchronously, and
//! until then `position()` still answers the old fetcher's position — ahead of a restart at
//! a lower offset, and trusting it would turn unread records into holes. A (re)started
//! partition is trusted again once its position is seen reset (negative: nothing taken
//! since the start) or once a record of it has been handed over (its fetcher then runs from
//! the start: librdkafka starts it only after the old one stopped).
//!
//! Nor is it trusted after an error message of the partition: the thread's batch read
//! (`rd_kafka_consume_batch_queue`) moves a partition's position to `offset + 1` of every
//! message it hands over, error messages included (librdkafka 2.12.1, rdkafka_queue.c
//! `rd_kafka_q_serve_rkmessages`), and a consumer error carries the partition's fetch
//! offset F (out of range under auto.offset.reset=error, authorization failed, message too
//! large, any fetch error): the position says F + 1 though the record at F was never
//! delivered — the fetcher retries F, or waits to be re-positioned. Reported, it would make
//! that record a hole. The thread looks at each batch's messages in order: an error of a
//! partition makes it unproven, a later record of it (the fetcher delivers again, from F)
//! proves it again, as does a reset position. (`BaseConsumer::poll`, the consumer queue's
//! read, moves positions only for records: rdkafka_op.c `rd_kafka_fetch_op_app_prepare`.)

use crate::types::{Offset, TopicPartition};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// How often positions are asked for: often enough that a quiet partition counts as read
/// to its end well within a verify round, cheap for thousands of partitions.
pub(super) const EVERY: Duration = Duration::from_millis(500);

/// What the tailing thread knows of the positions it reported.
#[derive(Debug, Default)]
pub(super) struct ReadTo {
    /// The position last reported per assigned partition: only changes are sent.
    sent: HashMap<TopicPartition, Offset>,
    /// (Re)started partitions whose position may still be the previous fetcher's.
    unproven: HashSet<TopicPartition>,
    /// When positions are asked for next (`None`: at once).
    next_at: Option<Instant>,
}

impl ReadTo {
    /// Whether positions are to be asked for now.
    pub(super) fn due(&self, now: Instant) -> bool {
        self.next_at.is_none_or(|t| t <= now)
    }

    /// Whether some partition waits for a record to be trusted (see [`Self::delivered`]).
    pub(super) fn any_unproven(&self) -> bool {
        !self.unproven.is_empty()
    }

    /// `tp` was (re)started; `reset`: its position, asked for right after, was none (the
    /// previous fetcher had stopped, or there was none). Otherwise its position is reported
    /// again only once it is proven to be the new fetcher's.
    pub(super) fn started(&mut self, tp: TopicPartition, reset: bool) {
        self.sent.remove(&tp);
        if reset {
            self.unproven.remove(&tp);
        } else {
            self.unproven.insert(tp);
        }
    }

    /// An error message of `tp` was handed over: its position may be the error's offset + 1,
    /// past a record never delivered. Trusted again once a record of it is handed over
    /// after this ([`Self::delivered`]) or its position is seen reset.
    pub(super) fn errored(&mut self, tp: TopicPartition) {
        self.unproven.insert(tp);
    }

    /// Positions could not be asked for: next time.
    pub(super) fn later(&mut self, now: Instant) {
        self.next_at = Some(now + EVERY);
    }

    /// A record of `topic`/`partition` was handed over: its partition's fetcher runs from
    /// its start, so its position is its own; and it delivers again after any error handed
    /// over before this record, so the position is that record's or a later one's.
    pub(super) fn delivered(&mut self, topic: &str, partition: i32) {
        self.unproven
            .retain(|tp| !(tp.partition == partition && tp.topic == topic));
    }

    /// Takes the positions of the assigned partitions (`None`: librdkafka has none) and
    /// returns those to report: trusted, and changed since they were last reported.
    /// Partitions no longer assigned are forgotten.
    pub(super) fn observe(
        &mut self,
        now: Instant,
        positions: impl IntoIterator<Item = (TopicPartition, Option<Offset>)>,
    ) -> Vec<(TopicPartition, Offset)> {
        self.next_at = Some(now + EVERY);
        let mut assigned = HashSet::new();
        let mut out = Vec::new();
        for (tp, position) in positions {
            assigned.insert(tp.clone());
            let Some(p) = position else {
                // Reset: the previous fetcher stopped; whatever comes now is the new one's.
                self.unproven.remove(&tp);
                continue;
            };
            if self.unproven.contains(&tp) || self.sent.get(&tp) == Some(&p) {
                continue;
            }
            self.sent.insert(tp.clone(), p);
            out.push((tp, p));
        }
        self.sent.retain(|tp, _| assigned.contains(tp));
        self.unproven.retain(|tp| assigned.contains(tp));
        out
    }
}

/// A position as librdkafka gives it: an offset, or nothing (invalid, logical).
pub(super) fn offset_of(o: rdkafka::Offset) -> Option<Offset> {
    match o {
        rdkafka::Offset::Offset(n) if n >= 0 => Some(n),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("t", p)
    }

    #[test]
    fn only_changed_positions_are_reported() {
        let mut r = ReadTo::default();
        let now = Instant::now();
        assert!(r.due(now));
        assert_eq!(
            r.observe(now, [(tp(0), Some(9)), (tp(1), None)]),
            vec![(tp(0), 9)]
        );
        assert!(!r.due(now));
        assert!(r.due(now + EVERY));
        assert!(r.observe(now, [(tp(0), Some(9))]).is_empty());
        assert_eq!(r.observe(now, [(tp(0), Some(12))]), vec![(tp(0), 12)]);
    }

    /// A restart at a lower offset: the old fetcher's position (100) must never be
    /// reported for the new start (50), or records 50-99 would be taken for holes.
    #[test]
    fn a_restarted_partition_is_trusted_once_its_position_is_reset() {
        let mut r = ReadTo::default();
        let now = Instant::now();
        r.observe(now, [(tp(0), Some(100))]);
        r.started(tp(0), false);
        assert!(r.any_unproven());
        assert!(r.observe(now, [(tp(0), Some(100))]).is_empty(), "stale");
        assert!(r.observe(now, [(tp(0), None)]).is_empty(), "reset");
        assert!(!r.any_unproven());
        // After the reset only the new fetcher moves it, past a marker here.
        assert_eq!(r.observe(now, [(tp(0), Some(51))]), vec![(tp(0), 51)]);
    }

    #[test]
    fn a_restarted_partition_is_trusted_once_a_record_of_it_is_handed_over() {
        let mut r = ReadTo::default();
        let now = Instant::now();
        r.started(tp(0), false);
        r.started(tp(1), false);
        r.delivered("t", 0);
        assert_eq!(
            r.observe(now, [(tp(0), Some(53)), (tp(1), Some(7))]),
            vec![(tp(0), 53)]
        );
        // Started with no position: trusted at once.
        r.started(tp(2), true);
        assert!(r.any_unproven(), "partition 1 still waits");
        assert_eq!(r.observe(now, [(tp(2), Some(4))]), vec![(tp(2), 4)]);
        assert!(!r.any_unproven(), "partition 1 is no longer assigned");
    }

    /// The review's fetch error (issue 35): an error message of partition 0 at its fetch
    /// offset 1010 moves librdkafka's position to 1011; the record at 1010 comes later, when
    /// the fetcher retries. Reporting 1011 before it would make 1010 a hole.
    #[test]
    fn a_partition_is_not_trusted_after_an_error_until_a_record_of_it_follows() {
        let mut r = ReadTo::default();
        let now = Instant::now();
        assert_eq!(
            r.observe(now, [(tp(0), Some(1010)), (tp(1), Some(5))]),
            vec![(tp(0), 1010), (tp(1), 5)]
        );
        r.errored(tp(0));
        assert!(r.any_unproven());
        assert!(
            r.observe(now, [(tp(0), Some(1011)), (tp(1), Some(5))])
                .is_empty(),
            "the error's offset + 1: nothing at 1010 was delivered"
        );
        // Another partition's record proves nothing of partition 0.
        r.delivered("t", 1);
        assert!(r.observe(now, [(tp(0), Some(1011))]).is_empty());
        // The retried fetch delivers 1010: the position is the record's.
        r.delivered("t", 0);
        assert!(!r.any_unproven());
        assert_eq!(r.observe(now, [(tp(0), Some(1011))]), vec![(tp(0), 1011)]);
    }

    /// An error after a start proven by its reset position: unproven again.
    #[test]
    fn an_error_after_a_start_makes_the_partition_unproven_again() {
        let mut r = ReadTo::default();
        let now = Instant::now();
        r.started(tp(0), true);
        r.errored(tp(0));
        assert!(r.observe(now, [(tp(0), Some(11))]).is_empty());
    }

    #[test]
    fn a_partition_started_again_reports_its_position_again() {
        let mut r = ReadTo::default();
        let now = Instant::now();
        assert_eq!(r.observe(now, [(tp(0), Some(9))]), vec![(tp(0), 9)]);
        r.started(tp(0), true);
        // The same position, now of the new ledger the audit made for the partition.
        assert_eq!(r.observe(now, [(tp(0), Some(9))]), vec![(tp(0), 9)]);
    }
}
