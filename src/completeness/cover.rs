//! Whether answers cover an audit: every partition of every audited topic spoken for by
//! some answer. Several instances share an audit's partitions, and partitions move between
//! them; an answer is about the partitions it owns at that moment only, so "each answer is
//! complete" proves nothing about a partition no answer owned (SPEC "Completeness").

use super::{Answer, AuditCompleteness};
use std::collections::{BTreeMap, BTreeSet};

/// Partitions a note names before it says "and N more".
const NAMED: usize = 8;

/// A partition count no real topic reaches: an answer claiming more (answers are outside
/// data) makes coverage unknown instead of a walk over billions of partition ids.
const MAX_PARTITIONS: usize = 1 << 20;

/// What a set of answers covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coverage {
    /// Every partition of every audited topic is covered.
    Full,
    /// `total` partitions are covered by no answer; the first few (`topic-partition`).
    Missing {
        /// The first uncovered partitions, in topic and partition order.
        named: Vec<String>,
        /// How many are uncovered.
        total: usize,
    },
    /// No answer knows how many partitions its topics have: nothing can be proven.
    Unknown,
}

impl Coverage {
    /// One sentence for `wait`'s log; `None` when covered.
    pub fn note(&self) -> Option<String> {
        match self {
            Coverage::Full => None,
            Coverage::Unknown => Some(
                "no instance knows the audited topics' partition counts yet: which partitions \
                 the answers cover cannot be checked"
                    .to_string(),
            ),
            Coverage::Missing { named, total } => {
                let more = total.saturating_sub(named.len());
                let tail = if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                };
                Some(format!(
                    "no instance answers for {}{tail} (moving between instances, or an instance \
                     not asked): unknown",
                    named.join(", ")
                ))
            }
        }
    }
}

/// The coverage of `answers` taken together. A topic's partition count is the largest any
/// answer knows (a topic that grew is known to the instance that saw it grow).
pub fn coverage(answers: &[Answer]) -> Coverage {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for a in answers {
        for (t, n) in &a.topic_partitions {
            let c = counts.entry(t.as_str()).or_default();
            *c = (*c).max(*n);
        }
    }
    let covered: BTreeSet<(&str, i32)> = answers
        .iter()
        .flat_map(|a| {
            a.covers
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (t.as_str(), *p)))
        })
        .collect();
    missing(&counts, &covered)
}

/// The coverage of one instance's own partitions (for its answer's wording).
pub(super) fn own_coverage(c: &AuditCompleteness) -> Coverage {
    let counts: BTreeMap<&str, usize> = c
        .topic_partitions
        .iter()
        .map(|(t, n)| (t.as_str(), *n))
        .collect();
    let covered: BTreeSet<(&str, i32)> = c
        .covers
        .iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| (t.as_str(), *p)))
        .collect();
    missing(&counts, &covered)
}

fn missing(counts: &BTreeMap<&str, usize>, covered: &BTreeSet<(&str, i32)>) -> Coverage {
    if counts.is_empty() || counts.values().any(|n| *n > MAX_PARTITIONS) {
        return Coverage::Unknown;
    }
    let mut named = Vec::new();
    let mut total = 0;
    for (t, n) in counts {
        // Partition ids are 0..n in Kafka (bounded above, so the conversion holds).
        for p in 0..i32::try_from(*n).unwrap_or(0) {
            if !covered.contains(&(*t, p)) {
                total += 1;
                if named.len() < NAMED {
                    named.push(format!("{t}-{p}"));
                }
            }
        }
    }
    if total == 0 {
        Coverage::Full
    } else {
        Coverage::Missing { named, total }
    }
}
