//! offset_columns without `match.topic_column`: every row of the table at a (partition,
//! offset) counts as the audited topic's record there, so a table another topic writes
//! too (a Kafka Connect sink with `topics.regex`, two jobs into one table) would confirm a
//! lost record with the other topic's row (issue 34 item 4). Config validation refuses
//! what the config shows (two audits on one table); this looks at the table itself, at
//! start and after every sink outage, before any verdict: rows the audited topic cannot
//! have (a partition it does not have, an offset at or beyond its log end) prove another
//! writer. Until the look has answered, verdicts are held (nothing is decided, nothing
//! missing). Found by the first look, the audit refuses to start (its error names the key
//! to add); found later (after an outage), verdicts stay held with that error.
//!
//! Sound, not complete: another topic whose offsets stay below this topic's log end on
//! the same partitions leaves no trace here. Only `topic_column` rules it out; the docs say
//! so (SEMANTICS "Verification").

use super::Audit;
use super::blocking::blocking;
use crate::config::MatchStrategy;
use crate::sink::{OffsetExtent, SinkError, Verifier};
use crate::types::{Offset, TopicPartition};

/// Where the look at the table stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) enum SharedTable {
    /// Not needed: another strategy, or `topic_column` is set.
    #[default]
    NotNeeded,
    /// Not answered yet (start, or the sink was down since): verdicts held.
    Pending,
    /// The table holds no row the topic cannot have.
    Clear,
    /// It does: verdicts held for good, with this reason.
    Foreign(String),
}

/// The look at the sink table for another topic's rows, and what came of it.
pub(super) struct SharedTableWatch {
    /// The look's state.
    pub(super) table: SharedTable,
    /// A look has found no other topic's rows since the start.
    pub(super) cleared: bool,
    /// Why the audit refuses to start (the first look found another topic's rows): the
    /// run loop stops on it.
    pub(super) start_refused: Option<String>,
}

impl SharedTableWatch {
    /// The state an audit starts in.
    pub(super) fn for_audit(cfg: &crate::config::AuditConfig) -> Self {
        Self {
            table: SharedTable::for_audit(cfg),
            cleared: false,
            start_refused: None,
        }
    }
}

impl SharedTable {
    /// The state an audit starts in.
    pub(super) fn for_audit(cfg: &crate::config::AuditConfig) -> Self {
        let m = &cfg.matching;
        if m.strategy == MatchStrategy::OffsetColumns && m.topic_column.is_none() {
            SharedTable::Pending
        } else {
            SharedTable::NotNeeded
        }
    }
}

/// The rows of `extent` topic `topic` cannot have written, described (`None`: none).
/// `partitions` and `log_ends` are read from Kafka AFTER the table was: a row the topic
/// wrote before that read is below its log end then, and within its partitions (they only
/// grow). A partition whose log end is unknown proves nothing.
pub fn foreign_rows(
    topic: &str,
    extent: &OffsetExtent,
    partitions: &[i32],
    log_ends: &[(i32, Offset)],
) -> Option<String> {
    if let Some((lo, hi)) = extent.partitions {
        let known = |p: i64| i32::try_from(p).is_ok_and(|p| partitions.contains(&p));
        for p in [lo, hi] {
            if !known(p) {
                return Some(format!(
                    "the table has rows on partition {p}, which topic `{topic}` does not have \
                     ({} partitions)",
                    partitions.len()
                ));
            }
        }
    }
    for (p, max) in &extent.max_offsets {
        let Some(max) = max else { continue };
        let Some((_, end)) = log_ends.iter().find(|(q, _)| q == p) else {
            continue;
        };
        if max >= end {
            return Some(format!(
                "the table has a row at partition {p} offset {max}, at or beyond the log end \
                 ({end}) of topic `{topic}`"
            ));
        }
    }
    None
}

impl Audit {
    /// Whether verdicts wait for the look at the table (see the module): runs the look
    /// when it is pending. Called at the start of every round; a sink error of the look is
    /// the round's (it counts as the sink's answer: no second question that round).
    pub(super) async fn hold_for_shared_table(&mut self) -> (bool, Option<SinkError>) {
        match &self.shared.table {
            SharedTable::NotNeeded | SharedTable::Clear => return (false, None),
            SharedTable::Foreign(_) => return (true, None),
            SharedTable::Pending => {}
        }
        let Some(topic) = self.cfg.topics.first().cloned() else {
            return (false, None);
        };
        let view = self.io.kafka_view.clone();
        let t = topic.clone();
        let before = match blocking(move || view.partitions(&t)).await {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(audit = %self.cfg.name, error = %e, "topic partitions unknown: the look at the sink table waits");
                return (true, None);
            }
        };
        let t = std::time::Instant::now();
        let extent = self.io.sink.offset_extent(&before).await;
        // A sink that does not say asked nothing.
        if !matches!(extent, Ok(None)) {
            self.metrics.sink_query(t.elapsed(), extent.is_ok());
        }
        let extent = match extent {
            Ok(Some(x)) => x,
            Ok(None) => {
                self.shared.table = SharedTable::Clear;
                return (false, None);
            }
            Err(e) => {
                tracing::debug!(audit = %self.cfg.name, error = %e, "the look at the sink table waits for the sink");
                return (true, Some(e));
            }
        };
        // Kafka after the table: see `foreign_rows`.
        let view = self.io.kafka_view.clone();
        let t = topic.clone();
        let after = blocking(move || {
            let partitions = view.partitions(&t)?;
            let ends = partitions
                .iter()
                .filter_map(|&p| {
                    view.watermarks(&TopicPartition::new(t.clone(), p))
                        .ok()
                        .map(|(_, end)| (p, end))
                })
                .collect::<Vec<_>>();
            Ok::<_, rdkafka::error::KafkaError>((partitions, ends))
        })
        .await;
        let (partitions, ends) = match after {
            Ok(a) => a,
            Err(e) => {
                tracing::debug!(audit = %self.cfg.name, error = %e, "log ends unknown: the look at the sink table waits");
                return (true, None);
            }
        };
        // The topic's own log reached further on a partition whose log was truncated under
        // the auditor (or is about to be found so: a position beyond the log end): its
        // rows up to there are its own, not another writer's (`divergence.rs`).
        let ends: Vec<(i32, Offset)> = ends
            .into_iter()
            .map(|(p, end)| {
                let own = self
                    .parts
                    .iter()
                    .filter(|(tp, _)| tp.topic == topic && tp.partition == p)
                    .filter_map(|(_, part)| {
                        let l = &part.ledger;
                        let at = l.is_anchored().then(|| l.next_offset());
                        at.max(l.truncated_from())
                    })
                    .max();
                (p, own.map_or(end, |o| o.max(end)))
            })
            .collect();
        match foreign_rows(&topic, &extent, &partitions, &ends) {
            None => {
                tracing::info!(audit = %self.cfg.name, %topic, "the sink table holds no row topic's partitions and log ends rule out (no topic_column: another topic writing it stays unseen below them)");
                self.shared.table = SharedTable::Clear;
                self.shared.cleared = true;
                (false, None)
            }
            Some(evidence) => {
                let reason = format!(
                    "another topic writes the sink table: {evidence}; without \
                     audits.match.topic_column its rows would confirm this topic's lost \
                     records, so verdicts are held: add a column with the record's topic and \
                     set match.topic_column (or, if the topic was deleted and recreated, \
                     empty the table of the old topic's rows)"
                );
                tracing::error!(audit = %self.cfg.name, %topic, "{reason}");
                // SPEC "The sink's model": the auditor refuses to start when it can see
                // another topic's rows. Seen only after a look had cleared the table (a
                // failover to another table, rows written since), verdicts are held
                // instead: the audit keeps its state and says why in its status.
                if !self.shared.cleared {
                    self.shared.start_refused = Some(reason.clone());
                }
                self.shared.table = SharedTable::Foreign(reason);
                (true, None)
            }
        }
    }

    /// After a sink outage the table is looked at again before the next verdict: what
    /// answers now may be another table (a failover, a restored backup).
    pub(super) fn sink_was_down(&mut self) {
        if self.shared.table == SharedTable::Clear {
            self.shared.table = SharedTable::Pending;
        }
    }

    /// The reason verdicts are held for the sink table, for the status.
    pub(super) fn shared_table_hold(&self) -> Option<String> {
        match &self.shared.table {
            SharedTable::Foreign(r) => Some(r.clone()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn extent(partitions: Option<(i64, i64)>, max: &[(i32, Option<Offset>)]) -> OffsetExtent {
        OffsetExtent {
            partitions,
            max_offsets: max.to_vec(),
        }
    }

    #[test]
    fn rows_within_the_topic_are_not_foreign() {
        let x = extent(Some((0, 1)), &[(0, Some(9)), (1, None)]);
        assert_eq!(foreign_rows("t", &x, &[0, 1], &[(0, 10), (1, 0)]), None);
        assert_eq!(foreign_rows("t", &OffsetExtent::default(), &[0], &[]), None);
    }

    #[test]
    fn a_row_at_or_beyond_the_log_end_is_foreign() {
        let x = extent(Some((0, 0)), &[(0, Some(10))]);
        let why = foreign_rows("test", &x, &[0], &[(0, 10)]).expect("foreign");
        assert!(
            why.contains("partition 0 offset 10") && why.contains("(10)"),
            "{why}"
        );
    }

    #[test]
    fn a_partition_the_topic_lacks_is_foreign() {
        let x = extent(Some((0, 3)), &[(0, Some(1))]);
        let why = foreign_rows("test", &x, &[0, 1], &[(0, 10)]).expect("foreign");
        assert!(why.contains("partition 3"), "{why}");
        let x = extent(Some((-1, 0)), &[]);
        assert!(foreign_rows("test", &x, &[0], &[]).is_some(), "negative");
    }

    #[test]
    fn an_unknown_log_end_proves_nothing() {
        let x = extent(Some((0, 0)), &[(0, Some(1_000))]);
        assert_eq!(foreign_rows("t", &x, &[0], &[]), None);
    }
}
