//! Inclusive offset runs and sorted sets of them: the unit the ledger, the verifier and the
//! SQL builder talk in, so that memory and query counts grow with runs, not with records.

use crate::types::Offset;
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

/// Gaps of at most this many offsets between two runs are bridged in a query predicate:
/// the runs are asked as one span with the gap's offsets excluded by name (`NOT IN`), so
/// records filtered between expected ones (or transaction markers) no longer split the
/// predicate into one range per expected run (docs/SEMANTICS.md, "Filtered records inside a
/// counted range").
pub const MAX_BRIDGED_GAP: u64 = 4;
/// Most excluded offsets one predicate names: below Doris's `expr_children_limit` (10000)
/// for the `NOT IN` list, and ES's default `index.max_terms_count` (65536).
pub const MAX_EXCLUDED: u64 = 8_000;

/// The predicate form of a set of runs: offsets in one of `spans` and in none of
/// `excluded`. The same offset set as the runs, written with fewer ranges.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Cover {
    /// Disjoint ranges, ascending.
    pub spans: Vec<OffsetRun>,
    /// The bridged gaps inside the spans (each at most [`MAX_BRIDGED_GAP`] offsets).
    pub excluded: Vec<OffsetRun>,
}

impl Cover {
    /// Offsets named in the exclusion list.
    pub fn excluded_count(&self) -> u64 {
        count(&self.excluded)
    }
}

/// The [`Cover`] of `runs` (normalized): neighbouring runs whose gap is at most
/// [`MAX_BRIDGED_GAP`] share a span.
pub fn cover(runs: &[OffsetRun]) -> Cover {
    let mut out = Cover::default();
    for r in runs {
        match out.spans.last_mut() {
            Some(span)
                if r.first > span.last && (r.first - span.last - 1) as u64 <= MAX_BRIDGED_GAP =>
            {
                if r.first > span.last + 1 {
                    out.excluded
                        .push(OffsetRun::new(span.last + 1, r.first - 1));
                }
                span.last = r.last;
            }
            _ => out.spans.push(*r),
        }
    }
    out
}

/// Splits `runs` (normalized) into consecutive slices whose [`cover`]s have at most
/// `max_spans` spans and [`MAX_EXCLUDED`] excluded offsets each: one query each.
pub fn query_chunks(runs: &[OffsetRun], max_spans: usize) -> Vec<&[OffsetRun]> {
    let max_spans = max_spans.max(1);
    let mut out = Vec::new();
    let mut start = 0;
    let mut spans = 0usize;
    let mut excluded = 0u64;
    for i in 0..runs.len() {
        // What adding run i costs: a bridged gap, or a new span.
        let (new_span, gap) = match i.checked_sub(1).map(|p| runs[p]) {
            Some(prev) if i > start => {
                let gap = (runs[i].first - prev.last - 1).max(0) as u64;
                if gap <= MAX_BRIDGED_GAP {
                    (false, gap)
                } else {
                    (true, 0)
                }
            }
            _ => (true, 0),
        };
        if i > start && ((new_span && spans + 1 > max_spans) || excluded + gap > MAX_EXCLUDED) {
            out.push(&runs[start..i]);
            start = i;
            spans = 1;
            excluded = 0;
            continue;
        }
        if new_span {
            spans += 1;
        }
        excluded += gap;
    }
    if start < runs.len() {
        out.push(&runs[start..]);
    }
    out
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

    #[test]
    fn cover_bridges_short_gaps_only() {
        // Every second offset filtered, then a long gap.
        let runs = [r(0, 0), r(2, 2), r(4, 5), r(100, 101)];
        assert_eq!(
            cover(&runs),
            Cover {
                spans: vec![r(0, 5), r(100, 101)],
                excluded: vec![r(1, 1), r(3, 3)],
            }
        );
        let gap = MAX_BRIDGED_GAP as i64;
        assert_eq!(cover(&[r(0, 0), r(gap + 1, gap + 1)]).spans.len(), 1);
        assert_eq!(cover(&[r(0, 0), r(gap + 2, gap + 2)]).spans.len(), 2);
        assert_eq!(cover(&[]), Cover::default());
    }

    #[test]
    fn half_filtered_due_records_are_one_query() {
        // 50,000 due records with a filtered one after each: 50,000 runs, one span.
        let runs: Vec<OffsetRun> = (0..50_000).map(|i| r(2 * i, 2 * i)).collect();
        let chunks = query_chunks(&runs, 256);
        // 49,999 excluded offsets at MAX_EXCLUDED per query.
        assert_eq!(chunks.len(), 49_999usize.div_ceil(MAX_EXCLUDED as usize));
        for c in &chunks {
            let cv = cover(c);
            assert_eq!(cv.spans.len(), 1);
            assert!(cv.excluded_count() <= MAX_EXCLUDED);
        }
    }

    proptest! {
        #![proptest_config(crate::test_seed::config())]
        #[test]
        fn a_cover_is_the_same_offset_set(runs in arb_runs()) {
            let n = normalize(runs);
            let c = cover(&n);
            let mut want = expand(&c.spans);
            for o in expand(&c.excluded) {
                prop_assert!(want.remove(&o), "excluded {} outside the spans", o);
            }
            prop_assert_eq!(want, expand(&n));
            for e in &c.excluded {
                prop_assert!(e.len() <= MAX_BRIDGED_GAP);
            }
        }

        #[test]
        fn query_chunks_keep_every_run_within_bounds(runs in arb_runs(), max_spans in 1usize..4) {
            let n = normalize(runs);
            let chunks = query_chunks(&n, max_spans);
            let joined: Vec<OffsetRun> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
            prop_assert_eq!(&joined, &n);
            for c in chunks {
                prop_assert!(!c.is_empty());
                let cv = cover(c);
                prop_assert!(cv.spans.len() <= max_spans);
                prop_assert!(cv.excluded_count() <= MAX_EXCLUDED);
            }
        }

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
