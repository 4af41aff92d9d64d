//! Inclusive offset runs and sorted sets of them: the unit the ledger, the verifier and the
//! SQL builder talk in, so that memory and query counts grow with runs, not with records.

use crate::gap::Offset;
use serde::{Deserialize, Serialize};

/// An inclusive run of offsets `first..=last` (`first <= last`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OffsetRun {
    /// First offset (inclusive).
    pub first: Offset,
    /// Last offset (inclusive).
    pub last: Offset,
}

impl OffsetRun {
    /// Builds a run; callers guarantee `first <= last`.
    pub fn new(first: Offset, last: Offset) -> Self {
        debug_assert!(first <= last, "run {first}..={last}");
        Self { first, last }
    }

    /// Number of offsets in the run.
    pub fn len(&self) -> u64 {
        (self.last - self.first) as u64 + 1
    }

    /// A run always holds at least one offset; provided for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `o` lies in the run.
    pub fn contains(&self, o: Offset) -> bool {
        self.first <= o && o <= self.last
    }
}

/// Total number of offsets in a slice of runs.
pub fn count(runs: &[OffsetRun]) -> u64 {
    runs.iter().map(OffsetRun::len).sum()
}

/// Normalizes runs: sorts, merges overlapping and adjacent runs.
pub fn normalize(mut runs: Vec<OffsetRun>) -> Vec<OffsetRun> {
    runs.sort_unstable();
    let mut out: Vec<OffsetRun> = Vec::with_capacity(runs.len());
    for r in runs {
        match out.last_mut() {
            Some(prev) if r.first <= prev.last.saturating_add(1) => {
                prev.last = prev.last.max(r.last);
            }
            _ => out.push(r),
        }
    }
    out
}

/// The offsets of `within` that are NOT in `present` (both normalized), as runs.
pub fn subtract(within: OffsetRun, present: &[OffsetRun]) -> Vec<OffsetRun> {
    let mut out = Vec::new();
    let mut cursor = within.first;
    for p in present {
        if p.last < cursor {
            continue;
        }
        if p.first > within.last {
            break;
        }
        if p.first > cursor {
            out.push(OffsetRun::new(cursor, p.first - 1));
        }
        cursor = p.last.saturating_add(1);
        if cursor > within.last {
            return out;
        }
    }
    if cursor <= within.last {
        out.push(OffsetRun::new(cursor, within.last));
    }
    out
}

/// The parts of `runs` (normalized) that fall inside `within`.
pub fn intersect(within: OffsetRun, runs: &[OffsetRun]) -> Vec<OffsetRun> {
    runs.iter()
        .filter(|r| r.last >= within.first && r.first <= within.last)
        .map(|r| OffsetRun::new(r.first.max(within.first), r.last.min(within.last)))
        .collect()
}

/// Splits `runs` (normalized) so that the left part holds the first `n` offsets.
pub fn split_at_count(runs: &[OffsetRun], n: u64) -> (Vec<OffsetRun>, Vec<OffsetRun>) {
    let mut left = Vec::new();
    let mut right = Vec::new();
    let mut remaining = n;
    for r in runs {
        if remaining == 0 {
            right.push(*r);
        } else if r.len() <= remaining {
            remaining -= r.len();
            left.push(*r);
        } else {
            let cut = r.first + remaining as Offset;
            left.push(OffsetRun::new(r.first, cut - 1));
            right.push(OffsetRun::new(cut, r.last));
            remaining = 0;
        }
    }
    (left, right)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    fn r(a: Offset, b: Offset) -> OffsetRun {
        OffsetRun::new(a, b)
    }

    fn expand(runs: &[OffsetRun]) -> BTreeSet<Offset> {
        runs.iter().flat_map(|r| r.first..=r.last).collect()
    }

    #[test]
    fn normalize_merges_adjacent_and_overlapping() {
        assert_eq!(
            normalize(vec![r(5, 6), r(0, 1), r(2, 3), r(6, 9), r(20, 20)]),
            vec![r(0, 3), r(5, 9), r(20, 20)]
        );
    }

    #[test]
    fn subtract_leaves_the_holes() {
        assert_eq!(
            subtract(r(0, 9), &[r(2, 3), r(5, 5)]),
            vec![r(0, 1), r(4, 4), r(6, 9)]
        );
        assert_eq!(subtract(r(0, 9), &[r(0, 9)]), vec![]);
        assert_eq!(subtract(r(3, 4), &[r(0, 1), r(8, 9)]), vec![r(3, 4)]);
    }

    #[test]
    fn split_at_count_cuts_inside_a_run() {
        let (a, b) = split_at_count(&[r(0, 4), r(10, 14)], 7);
        assert_eq!(a, vec![r(0, 4), r(10, 11)]);
        assert_eq!(b, vec![r(12, 14)]);
    }

    fn arb_runs() -> impl Strategy<Value = Vec<OffsetRun>> {
        prop::collection::vec((0i64..200, 0i64..10), 0..20)
            .prop_map(|v| v.into_iter().map(|(a, l)| r(a, a + l)).collect())
    }

    proptest! {
        #[test]
        fn normalize_preserves_the_offset_set(runs in arb_runs()) {
            let n = normalize(runs.clone());
            prop_assert_eq!(expand(&n), expand(&runs));
            for w in n.windows(2) {
                prop_assert!(w[0].last + 1 < w[1].first);
            }
        }

        #[test]
        fn subtract_is_set_difference(runs in arb_runs(), a in 0i64..200, l in 0i64..50) {
            let n = normalize(runs);
            let within = r(a, a + l);
            let got = expand(&subtract(within, &n));
            let want: BTreeSet<Offset> = (a..=a + l).filter(|o| !expand(&n).contains(o)).collect();
            prop_assert_eq!(got, want);
        }

        #[test]
        fn split_keeps_everything(runs in arb_runs(), k in 0u64..300) {
            let n = normalize(runs);
            let (a, b) = split_at_count(&n, k);
            prop_assert_eq!(count(&a), k.min(count(&n)));
            let mut all = expand(&a);
            all.extend(expand(&b));
            prop_assert_eq!(all, expand(&n));
        }
    }
}
