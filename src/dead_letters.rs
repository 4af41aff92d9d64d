//! Dead letters (SPEC "Pipeline position and evidence", issue 37): which audited records the
//! pipeline's dead-letter topic names. Pure: the headers of one dead-letter record read into
//! coordinates, and the bounded index the verdicts consult. The Kafka side is
//! `kafka::dead_letters`; the verdicts are `ledger::partition::dead_letters`.
//!
//! A dead-letter record names its source record with Kafka Connect's error headers
//! `__connect.errors.topic`, `__connect.errors.partition` and `__connect.errors.offset`, whose
//! values Connect writes as UTF-8 text (`"dns"`, `"0"`, `"42"`). A Flink side output that
//! writes the same headers works the same way. Anything else in the topic (headers missing,
//! not UTF-8, not numbers, negative, a topic this audit does not read) names nothing and is
//! counted by reason, never a crash.
//!
//! # Memory bound
//!
//! The index keeps a coordinate only while it can still change a verdict: every round the
//! audit first moves the missing records the coordinates name to dead-lettered, then makes
//! the index forget what lies below each owned partition's *floor*, its first undecided
//! record (`PartitionLedger::dead_letter_floor`). So what stays is what names records not
//! decided yet (or not read yet by the auditor). A coordinate enters the index only once
//! placed ([`Unplaced`]): one at or beyond its partition's high watermark, asked after it
//! was read, names no record of the log and is ignored, so it can never fill the index.
//! Beyond that the index holds at most [`MAX_DEAD_LETTERS`] runs of coordinates (about 80
//! MB at the worst, ~70 bytes each; consecutive named offsets share one run): when full,
//! the reader stops reading the dead-letter topic until floors free room, and verdicts
//! wait for it (lag, never a false loss).

use crate::ledger::OffsetRun;
use crate::types::{Offset, TopicPartition};
use std::collections::{BTreeMap, HashMap};

/// Kafka Connect's header naming the source record's topic.
pub const HEADER_TOPIC: &str = "__connect.errors.topic";
/// Kafka Connect's header naming the source record's partition.
pub const HEADER_PARTITION: &str = "__connect.errors.partition";
/// Kafka Connect's header naming the source record's offset.
pub const HEADER_OFFSET: &str = "__connect.errors.offset";
/// The connector that wrote the dead letter (Kafka Connect).
pub const HEADER_CONNECTOR: &str = "__connect.errors.connector.name";

/// Most coordinates the index holds (see the module's memory bound).
pub const MAX_DEAD_LETTERS: usize = 1_000_000;

/// Why a dead-letter record names no audited record (the `reason` label of
/// `gap_auditor_dead_letters_ignored_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Ignored {
    /// A `__connect.errors.*` header is missing, not UTF-8, or not a valid number.
    #[error("missing or unreadable __connect.errors.topic/partition/offset headers")]
    Headers,
    /// It names a topic this audit does not read.
    #[error("names a topic this audit does not read")]
    OtherTopic,
    /// `connect_connector` is set and the dead letter was written by another connector
    /// (or names none).
    #[error("written by another connector than connect_connector")]
    OtherConnector,
    /// It names an offset at or beyond the audited partition's high watermark read after the
    /// dead letter was read: no record of this incarnation of the topic (a dead letter of an
    /// earlier incarnation of a recreated topic, or a wrong coordinate).
    #[error("names an offset beyond the audited partition's log end")]
    BeyondLogEnd,
}

impl Ignored {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Ignored::Headers => "headers",
            Ignored::OtherTopic => "other_topic",
            Ignored::OtherConnector => "other_connector",
            Ignored::BeyondLogEnd => "beyond_log_end",
        }
    }
}

/// Reads the coordinates a dead-letter record names from its headers (name, value).
/// The first occurrence of each header counts.
pub fn parse_headers<'a>(
    headers: impl IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
) -> Result<(TopicPartition, Offset), Ignored> {
    let (mut topic, mut partition, mut offset) = (None, None, None);
    for (name, value) in headers {
        let slot = match name {
            HEADER_TOPIC => &mut topic,
            HEADER_PARTITION => &mut partition,
            HEADER_OFFSET => &mut offset,
            _ => continue,
        };
        if slot.is_none() {
            *slot = Some(value);
        }
    }
    let text = |v: Option<Option<&'a [u8]>>| -> Result<&'a str, Ignored> {
        let bytes = v.flatten().ok_or(Ignored::Headers)?;
        std::str::from_utf8(bytes)
            .map(str::trim)
            .map_err(|_| Ignored::Headers)
    };
    let topic = text(topic)?;
    if topic.is_empty() {
        return Err(Ignored::Headers);
    }
    let partition: i32 = text(partition)?.parse().map_err(|_| Ignored::Headers)?;
    let offset: Offset = text(offset)?.parse().map_err(|_| Ignored::Headers)?;
    if partition < 0 || offset < 0 {
        return Err(Ignored::Headers);
    }
    Ok((TopicPartition::new(topic, partition), offset))
}

/// The coordinates read so far, per audited partition, bounded (see the module docs).
/// Whether the dead letter with these headers was written by `connector` (always, when
/// `None`): its `__connect.errors.connector.name` header, trimmed. A dead letter without
/// that header is not this connector's.
pub fn written_by<'a>(
    headers: impl IntoIterator<Item = (&'a str, Option<&'a [u8]>)>,
    connector: Option<&str>,
) -> bool {
    let Some(want) = connector else {
        return true;
    };
    headers
        .into_iter()
        .find(|(name, _)| *name == HEADER_CONNECTOR)
        .and_then(|(_, v)| v)
        .and_then(|b| std::str::from_utf8(b).ok())
        .is_some_and(|v| v.trim() == want)
}

#[derive(Debug, Default)]
pub struct DeadLetterIndex {
    /// Per partition, the named offsets as disjoint, non-adjacent runs (first -> last).
    named: HashMap<TopicPartition, BTreeMap<Offset, Offset>>,
    /// Runs held: what the bound counts.
    runs: usize,
    /// Offsets held.
    len: usize,
}

impl DeadLetterIndex {
    /// Whether no more runs fit ([`MAX_DEAD_LETTERS`]). Runs, not offsets: a pipeline
    /// that dead-letters everything for a while (a bad deploy, a schema change) names long
    /// runs of offsets, which cost one entry each (review of issue 37: counted by offset,
    /// a restart finding more than 1 M such dead letters above its settled offsets filled
    /// the index for good and every verdict waited).
    pub fn is_full(&self) -> bool {
        self.runs >= MAX_DEAD_LETTERS
    }

    /// Offsets held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Runs held (what [`MAX_DEAD_LETTERS`] bounds).
    pub fn runs(&self) -> usize {
        self.runs
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keeps `offset` of `tp`. Whether it was kept (false when already held, or when it
    /// would take a new run and the index is full; joining a run never needs room).
    /// Not checked against the floor: floors are the ledger's, which a log truncation or a
    /// partition moving to another instance and back can lower; a coordinate below it is
    /// forgotten at the next [`Self::forget_below`].
    pub fn insert(&mut self, tp: TopicPartition, offset: Offset) -> bool {
        let full = self.is_full();
        let runs = self.named.entry(tp).or_default();
        let before = runs.range(..=offset).next_back().map(|(f, l)| (*f, *l));
        if before.is_some_and(|(_, l)| l >= offset) {
            return false;
        }
        let after = offset
            .checked_add(1)
            .and_then(|n| runs.get(&n).map(|l| (n, *l)));
        let joins_before = before.is_some_and(|(_, l)| l.checked_add(1) == Some(offset));
        match (joins_before, after) {
            (true, Some((n, l))) => {
                // Bridges two runs into one.
                runs.remove(&n);
                if let Some((f, _)) = before {
                    runs.insert(f, l);
                }
                self.runs -= 1;
            }
            (true, None) => {
                if let Some((f, _)) = before {
                    runs.insert(f, offset);
                }
            }
            (false, Some((n, l))) => {
                runs.remove(&n);
                runs.insert(offset, l);
            }
            (false, None) => {
                if full {
                    return false;
                }
                runs.insert(offset, offset);
                self.runs += 1;
            }
        }
        self.len += 1;
        true
    }

    /// Keeps the coordinates of the partitions `keep` says yes to, and drops the others.
    pub fn retain(&mut self, mut keep: impl FnMut(&TopicPartition) -> bool) {
        let (runs, len) = (&mut self.runs, &mut self.len);
        self.named.retain(|tp, set| {
            let k = keep(tp);
            if !k {
                *runs -= set.len();
                *len -= set.iter().map(|(f, l)| span(*f, *l)).sum::<usize>();
            }
            k
        });
    }

    /// Forgets the coordinates of `tp` below `floor` (they can no longer change a
    /// verdict: `PartitionLedger::dead_letter_floor`).
    pub fn forget_below(&mut self, tp: &TopicPartition, floor: Offset) {
        let Some(set) = self.named.get_mut(tp) else {
            return;
        };
        let mut keep = set.split_off(&floor);
        // A run reaching the floor from below keeps its part from the floor on.
        if let Some((&f, &l)) = set.iter().next_back()
            && l >= floor
        {
            set.insert(f, floor - 1);
            keep.insert(floor, l);
            self.runs += 1;
        }
        self.runs -= set.len();
        self.len -= set.iter().map(|(f, l)| span(*f, *l)).sum::<usize>();
        *set = keep;
    }

    /// The offsets of `run` on `tp` the dead-letter topic named, as runs.
    pub fn named_in(&self, tp: &TopicPartition, run: OffsetRun) -> Vec<OffsetRun> {
        let Some(set) = self.named.get(tp) else {
            return Vec::new();
        };
        let from = set
            .range(..=run.first)
            .next_back()
            .map_or(run.first, |(f, _)| *f);
        set.range(from..=run.last)
            .filter(|(_, l)| **l >= run.first)
            .map(|(f, l)| OffsetRun::new((*f).max(run.first), (*l).min(run.last)))
            .collect()
    }

    /// Every offset of `tp` named at or above its floor, as runs.
    pub fn named_on(&self, tp: &TopicPartition) -> Vec<OffsetRun> {
        self.named.get(tp).map_or_else(Vec::new, |set| {
            set.iter().map(|(f, l)| OffsetRun::new(*f, *l)).collect()
        })
    }
}

/// Offsets in `first..=last`.
fn span(first: Offset, last: Offset) -> usize {
    usize::try_from(last - first + 1).unwrap_or(0)
}

/// Coordinates read and not placed yet: each must be compared with its audited partition's
/// high watermark read AFTER it was read (a watermark read before could be older than the
/// record the dead letter names: it would be taken for beyond the log, and the record for
/// lost). [`Self::place`] asks for the watermarks; coordinates below them go to the index,
/// those at or above are ignored ([`Ignored::BeyondLogEnd`]) and never fill it.
#[derive(Debug, Default)]
pub struct Unplaced {
    /// (coordinate, whether its dead letter was already counted as ignored once).
    pending: Vec<(TopicPartition, Offset, bool)>,
}

/// What [`Unplaced::place`] decided.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Placed {
    /// Coordinates naming records of the log: for the index.
    pub kept: Vec<(TopicPartition, Offset)>,
    /// Coordinates beyond the log end whose dead letter was not counted yet.
    pub beyond_uncounted: u64,
    /// Every coordinate beyond the log end.
    pub beyond: u64,
}

impl Unplaced {
    /// Most coordinates held before they must be placed (bounds this buffer: ~7 MB).
    pub const MAX: usize = 100_000;

    /// Holds a coordinate read just now; `counted`: its dead letter was counted before (a
    /// re-read).
    pub fn push(&mut self, tp: TopicPartition, offset: Offset, counted: bool) {
        self.pending.push((tp, offset, counted));
    }

    /// Coordinates held.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Whether it must be placed before more is read.
    pub fn is_full(&self) -> bool {
        self.pending.len() >= Self::MAX
    }

    /// Drops everything (the topic is read again from its beginning).
    pub fn clear(&mut self) {
        self.pending.clear();
    }

    /// Places every coordinate: `high` answers an audited partition's high watermark, asked
    /// now (once per partition); below it a coordinate is kept when `keep` says yes (a
    /// partition this instance owns) and dropped otherwise; at or beyond it, it is ignored
    /// whoever owns the partition. Counting does not wait for ownership: the reader reads the
    /// topic again from its beginning when a partition is assigned and then takes every
    /// record read before as counted, so a dead letter beyond the log end read before the
    /// assignment must be counted when first read, or never is. On an error nothing is
    /// placed and everything stays held: the caller retries, and until then is not caught up
    /// (verdicts wait; a coordinate is never dropped for want of an answer).
    pub fn place<E>(
        &mut self,
        mut keep: impl FnMut(&TopicPartition) -> bool,
        mut high: impl FnMut(&TopicPartition) -> Result<Offset, E>,
    ) -> Result<Placed, E> {
        let mut highs: HashMap<TopicPartition, Offset> = HashMap::new();
        for (tp, _, _) in &self.pending {
            if !highs.contains_key(tp) {
                highs.insert(tp.clone(), high(tp)?);
            }
        }
        let mut out = Placed::default();
        for (tp, offset, counted) in self.pending.drain(..) {
            if highs.get(&tp).is_some_and(|h| offset < *h) {
                if keep(&tp) {
                    out.kept.push((tp, offset));
                }
            } else {
                out.beyond += 1;
                out.beyond_uncounted += u64::from(!counted);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn h<'a>(pairs: &'a [(&'a str, &'a str)]) -> Vec<(&'a str, Option<&'a [u8]>)> {
        pairs
            .iter()
            .map(|(k, v)| (*k, Some(v.as_bytes())))
            .collect()
    }

    #[test]
    fn only_the_configured_connectors_dead_letters_count() {
        let ours = h(&[(HEADER_CONNECTOR, " es-sink "), (HEADER_TOPIC, "dns")]);
        let theirs = h(&[(HEADER_CONNECTOR, "jdbc-sink")]);
        let none = h(&[(HEADER_TOPIC, "dns")]);
        assert!(written_by(ours.clone(), Some("es-sink")));
        assert!(!written_by(theirs.clone(), Some("es-sink")));
        assert!(
            !written_by(none.clone(), Some("es-sink")),
            "no header: not ours"
        );
        for any in [ours, theirs, none] {
            assert!(written_by(any, None), "no connector configured: every one");
        }
        assert!(!written_by(
            vec![(HEADER_CONNECTOR, Some(&[0xff, 0xfe][..]))],
            Some("es-sink")
        ));
    }

    #[test]
    fn connect_headers_name_the_source_record() {
        let got = parse_headers(h(&[
            (
                "__connect.errors.exception.class.name",
                "org.apache.kafka.connect.errors.DataException",
            ),
            (HEADER_TOPIC, "dns"),
            (HEADER_PARTITION, "3"),
            (HEADER_OFFSET, "42"),
        ]));
        assert_eq!(got, Ok((TopicPartition::new("dns", 3), 42)));
    }

    #[test]
    fn hostile_headers_name_nothing() {
        let bad: &[&[(&str, &str)]] = &[
            &[],
            &[(HEADER_TOPIC, "dns"), (HEADER_PARTITION, "0")],
            &[
                (HEADER_TOPIC, "dns"),
                (HEADER_PARTITION, "x"),
                (HEADER_OFFSET, "1"),
            ],
            &[
                (HEADER_TOPIC, "dns"),
                (HEADER_PARTITION, "0"),
                (HEADER_OFFSET, "-1"),
            ],
            &[
                (HEADER_TOPIC, "dns"),
                (HEADER_PARTITION, "-2"),
                (HEADER_OFFSET, "1"),
            ],
            &[
                (HEADER_TOPIC, ""),
                (HEADER_PARTITION, "0"),
                (HEADER_OFFSET, "1"),
            ],
            &[
                (HEADER_TOPIC, "dns"),
                (HEADER_PARTITION, "0"),
                (HEADER_OFFSET, "99999999999999999999"),
            ],
            &[
                (HEADER_TOPIC, "dns"),
                (HEADER_PARTITION, "0"),
                (HEADER_OFFSET, "1.5"),
            ],
        ];
        for headers in bad {
            assert_eq!(
                parse_headers(h(headers)),
                Err(Ignored::Headers),
                "{headers:?}"
            );
        }
        let not_utf8: Vec<(&str, Option<&[u8]>)> = vec![
            (HEADER_TOPIC, Some(&[0xff, 0xfe])),
            (HEADER_PARTITION, Some(b"0")),
            (HEADER_OFFSET, Some(b"1")),
        ];
        assert_eq!(parse_headers(not_utf8), Err(Ignored::Headers));
        let null_value: Vec<(&str, Option<&[u8]>)> = vec![
            (HEADER_TOPIC, Some(b"dns")),
            (HEADER_PARTITION, None),
            (HEADER_OFFSET, Some(b"1")),
        ];
        assert_eq!(parse_headers(null_value), Err(Ignored::Headers));
    }

    #[test]
    fn the_index_forgets_below_the_floor_and_answers_by_run() {
        let tp = TopicPartition::new("dns", 0);
        let mut ix = DeadLetterIndex::default();
        for o in [3, 4, 5, 9, 20] {
            assert!(ix.insert(tp.clone(), o));
        }
        assert!(!ix.insert(tp.clone(), 4), "held once");
        assert_eq!(
            ix.named_in(&tp, OffsetRun::new(4, 10)),
            vec![OffsetRun::new(4, 5), OffsetRun::new(9, 9)]
        );
        ix.forget_below(&tp, 9);
        assert_eq!(ix.len(), 2);
        assert_eq!(
            ix.named_on(&tp),
            vec![OffsetRun::new(9, 9), OffsetRun::new(20, 20)]
        );
        assert!(
            ix.named_in(&TopicPartition::new("other", 0), OffsetRun::new(0, 100))
                .is_empty()
        );
    }

    /// Review of issue 37: a coordinate at or beyond its partition's high watermark (asked
    /// after it was read) names no record of the log: ignored, never in the index, so such
    /// coordinates cannot fill it. Below it: kept. An unanswered watermark places nothing.
    #[test]
    fn coordinates_beyond_the_log_end_are_ignored_and_never_indexed() {
        let (a, b, c) = (
            TopicPartition::new("dns", 0),
            TopicPartition::new("dns", 1),
            TopicPartition::new("dns", 2),
        );
        let mut u = Unplaced::default();
        u.push(a.clone(), 5, false);
        u.push(a.clone(), 10, false);
        u.push(a.clone(), 11, true);
        u.push(b.clone(), 0, false);
        u.push(c.clone(), 3, false);
        u.push(c.clone(), 2, false);
        let mut asked = Vec::new();
        let failed: Result<Placed, &str> = u.place(
            |_| true,
            |tp| if *tp == b { Err("timed out") } else { Ok(10) },
        );
        assert_eq!(failed, Err("timed out"));
        assert_eq!(u.len(), 6, "nothing placed, nothing dropped");
        // c is not owned: its record below the log end is dropped, the one beyond it is
        // ignored and counted all the same (a re-read after c's assignment takes it as
        // counted).
        let placed: Result<Placed, &str> = u.place(
            |tp| *tp != c,
            |tp| {
                asked.push(tp.clone());
                Ok(if *tp == b {
                    0
                } else if *tp == c {
                    3
                } else {
                    10
                })
            },
        );
        assert_eq!(
            placed,
            Ok(Placed {
                kept: vec![(a.clone(), 5)],
                beyond_uncounted: 3,
                beyond: 4,
            })
        );
        assert_eq!(asked, vec![a, b, c], "once per partition");
        assert!(u.is_empty());
    }

    /// Review of issue 37: the bound counts runs, so a long run of dead-lettered records
    /// (2 M here, beyond the old 1 M offsets) costs one entry and never fills the index.
    #[test]
    fn a_long_run_of_dead_letters_costs_one_entry() {
        let tp = TopicPartition::new("dns", 0);
        let mut ix = DeadLetterIndex::default();
        for o in 0..2_000_000 {
            assert!(ix.insert(tp.clone(), o), "{o}");
        }
        assert_eq!((ix.runs(), ix.len()), (1, 2_000_000));
        assert!(!ix.is_full());
        ix.forget_below(&tp, 1_500_000);
        assert_eq!((ix.runs(), ix.len()), (1, 500_000));
        assert_eq!(
            ix.named_in(&tp, OffsetRun::new(1_999_990, 2_000_100)),
            vec![OffsetRun::new(1_999_990, 1_999_999)]
        );
    }

    proptest! {
        /// Against a set of offsets: inserts (any order, repeats), floors and retains give
        /// the same offsets, runs and counts.
        #[test]
        fn the_run_index_is_the_set_of_offsets(
            ops in proptest::collection::vec((0u8..10, 0i32..2, 0i64..60), 0..200),
        ) {
            let mut ix = DeadLetterIndex::default();
            let mut model: std::collections::BTreeMap<i32, std::collections::BTreeSet<Offset>> =
                Default::default();
            for (op, p, o) in ops {
                let tp = TopicPartition::new("t", p);
                match op {
                    0 => {
                        ix.forget_below(&tp, o);
                        if let Some(s) = model.get_mut(&p) {
                            *s = s.split_off(&o);
                        }
                    }
                    1 => {
                        ix.retain(|t| t.partition != p);
                        model.remove(&p);
                    }
                    _ => {
                        let kept = ix.insert(tp, o);
                        prop_assert_eq!(kept, model.entry(p).or_default().insert(o));
                    }
                }
                let mut len = 0;
                let mut runs = 0;
                for p in 0..2 {
                    let tp = TopicPartition::new("t", p);
                    let want: Vec<OffsetRun> = model
                        .get(&p)
                        .map(|s| to_runs_model(s.iter().copied()))
                        .unwrap_or_default();
                    prop_assert_eq!(ix.named_on(&tp), want.clone());
                    prop_assert_eq!(
                        ix.named_in(&tp, OffsetRun::new(10, 30)),
                        crate::ledger::runs::intersect(OffsetRun::new(10, 30), &want)
                    );
                    len += model.get(&p).map_or(0, |s| s.len());
                    runs += want.len();
                }
                prop_assert_eq!((ix.len(), ix.runs()), (len, runs));
            }
        }
    }

    /// Ascending offsets as maximal runs (the model's).
    fn to_runs_model(offsets: impl Iterator<Item = Offset>) -> Vec<OffsetRun> {
        let mut out: Vec<OffsetRun> = Vec::new();
        for o in offsets {
            match out.last_mut() {
                Some(r) if r.last + 1 == o => r.last = o,
                _ => out.push(OffsetRun::new(o, o)),
            }
        }
        out
    }

    proptest! {
        /// Arbitrary header bytes never panic, and a success names what was written.
        #[test]
        fn any_headers_parse_or_are_ignored(
            t in proptest::collection::vec(any::<u8>(), 0..12),
            p in proptest::collection::vec(any::<u8>(), 0..12),
            o in proptest::collection::vec(any::<u8>(), 0..24),
        ) {
            let headers: Vec<(&str, Option<&[u8]>)> = vec![
                (HEADER_TOPIC, Some(&t)),
                (HEADER_PARTITION, Some(&p)),
                (HEADER_OFFSET, Some(&o)),
            ];
            if let Ok((tp, off)) = parse_headers(headers) {
                prop_assert!(tp.partition >= 0 && off >= 0);
                prop_assert_eq!(off, String::from_utf8_lossy(&o).trim().parse::<i64>().unwrap_or(-1));
            }
        }
    }
}
