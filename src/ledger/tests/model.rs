//! Properties against a brute-force model of SPEC's gap definition, whatever the round boundaries
//! and restores.

use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Hole,
    Filtered,
    Present,
    Absent,
}

fn arb_kind() -> impl Strategy<Value = Kind> {
    prop_oneof![1 => Just(Kind::Hole), 1 => Just(Kind::Filtered), 4 => Just(Kind::Present), 2 => Just(Kind::Absent)]
}

/// SPEC's gap definition, brute force: maximal runs of absent expected records with no
/// present expected record between them.
fn model_gaps(kinds: &[Kind]) -> Vec<(Offset, Offset, u64)> {
    let mut out: Vec<(Offset, Offset, u64)> = Vec::new();
    let mut open = false;
    for (o, k) in kinds.iter().enumerate() {
        let o = o as Offset;
        match k {
            Kind::Present => open = false,
            Kind::Absent => {
                if open {
                    let g = out.last_mut().expect("open gap");
                    g.1 = o;
                    g.2 += 1;
                } else {
                    out.push((o, o, 1));
                    open = true;
                }
            }
            _ => {}
        }
    }
    out
}

/// Runs the ledger over `kinds` with rounds of `limits` (cycled), the pipeline committing
/// `step` offsets per round, and Unknown answers where `flaky` says so.
fn run_ledger(
    kinds: &[Kind],
    limits: &[u64],
    step: i64,
    flaky: &[bool],
) -> (PartitionLedger, Vec<GapRecord>, Applied) {
    let present: BTreeSet<Offset> = kinds
        .iter()
        .enumerate()
        .filter(|(_, k)| **k == Kind::Present)
        .map(|(o, _)| o as Offset)
        .collect();
    let mut l = PartitionLedger::new(0, false);
    for (o, k) in kinds.iter().enumerate() {
        match k {
            Kind::Hole => {}
            Kind::Filtered => {
                l.ingest(o as Offset, None, Observed::Filtered, 0);
            }
            _ => {
                l.ingest(o as Offset, None, exp(), 0);
            }
        }
    }
    let mut all_gaps: std::collections::BTreeMap<Offset, GapRecord> = Default::default();
    let mut total = Applied::default();
    let mut committed = 0;
    let end = kinds.len() as Offset;
    let mut round = 0usize;
    let mut now = 0;
    while l.pending() > 0 || committed < end {
        committed = (committed + step).min(end);
        l.pipeline.observe(now, Some(committed));
        now += GRACE;
        let limit = limits[round % limits.len()].max(1);
        let segs = l.due(now, GRACE, limit);
        let before = l.settled();
        let verdicts: Vec<Verdict> = if flaky[round % flaky.len()] {
            segs.iter().map(|_| Verdict::Unknown).collect()
        } else {
            oracle(&segs, &present)
        };
        let (rev, snap) = (l.revision(), l.snapshot());
        let a = l.apply(&verdicts, now);
        total = total.merge(a);
        let dirty = l.take_dirty_gaps();
        // Callers persist only on a new revision: an unchanged one must mean an unchanged snapshot.
        if l.revision() == rev {
            assert_eq!(
                l.snapshot(),
                snap,
                "snapshot changed without a revision bump"
            );
        }
        // The settled watermark never passes a pending record and never moves back.
        assert!(l.settled() >= before);
        if let Some(first_pending) = l.pending_runs().first() {
            assert!(l.settled() <= first_pending.first);
        }
        for g in dirty {
            all_gaps.insert(g.first, g);
        }
        round += 1;
        assert!(round < 10_000, "no progress");
    }
    (l, all_gaps.into_values().collect(), total)
}

proptest! {
    #![proptest_config(crate::test_seed::config())]
    #[test]
    fn gaps_match_the_model_whatever_the_round_boundaries(
        kinds in prop::collection::vec(arb_kind(), 0..120),
        limits in prop::collection::vec(1u64..40, 1..5),
        step in 1i64..50,
        flaky in prop::collection::vec(prop::bool::weighted(0.2), 1..6),
    ) {
        prop_assume!(flaky.iter().any(|f| !f));
        let (l, gaps, total) = run_ledger(&kinds, &limits, step, &flaky);
        let got: Vec<(Offset, Offset, u64)> = gaps.iter().map(|g| (g.first, g.last, g.missing)).collect();
        prop_assert_eq!(got, model_gaps(&kinds));
        let absent = kinds.iter().filter(|k| **k == Kind::Absent).count() as u64;
        let present = kinds.iter().filter(|k| **k == Kind::Present).count() as u64;
        prop_assert_eq!(total.lost, absent, "each missing record reported exactly once");
        prop_assert_eq!(total.confirmed, present, "nothing present reported");
        // Every missing offset lies in exactly one gap.
        let missing: Vec<Offset> = l.missing_runs().iter().flat_map(|r| r.first..=r.last).collect();
        prop_assert_eq!(missing.len() as u64, absent);
        for o in missing {
            let n = gaps.iter().filter(|g| g.first <= o && o <= g.last).count();
            prop_assert_eq!(n, 1);
        }
        // Trailing holes are only known once a later record arrives.
        let last_record = kinds.iter().rposition(|k| *k != Kind::Hole).map_or(0, |i| i as Offset + 1);
        prop_assert_eq!(l.settled(), last_record);
    }

    #[test]
    fn snapshot_restore_mid_stream_gives_the_same_gaps(
        kinds in prop::collection::vec(arb_kind(), 1..80),
        cut in 0usize..80,
    ) {
        let present: BTreeSet<Offset> =
            kinds.iter().enumerate().filter(|(_, k)| **k == Kind::Present).map(|(o, _)| o as Offset).collect();
        let cut = cut.min(kinds.len());
        // First life: read and decide up to `cut`, then "crash" keeping only the snapshot.
        let mut l = PartitionLedger::new(0, false);
        let feed = |l: &mut PartitionLedger, from: usize, to: usize| {
            for (o, k) in kinds.iter().enumerate().take(to).skip(from) {
                match k {
                    Kind::Hole => {}
                    Kind::Filtered => { l.ingest(o as Offset, None, Observed::Filtered, 0); }
                    _ => { l.ingest(o as Offset, None, exp(), 0); }
                }
            }
        };
        feed(&mut l, 0, cut);
        l.pipeline.observe(0, Some(cut as Offset));
        let segs = l.due(GRACE, GRACE, u64::MAX);
        l.apply(&oracle(&segs, &present), GRACE);
        let mut gaps: std::collections::BTreeMap<Offset, GapRecord> = Default::default();
        for g in l.take_dirty_gaps() { gaps.insert(g.first, g); }
        let settled = l.settled();
        let snap: Snapshot = serde_json::from_str(&serde_json::to_string(&l.snapshot()).expect("ser")).expect("de");
        // Second life resumes at the settled watermark.
        let mut l2 = PartitionLedger::restore(settled, false, snap);
        feed(&mut l2, settled as usize, kinds.len());
        l2.pipeline.observe(0, Some(kinds.len() as Offset));
        let segs = l2.due(GRACE, GRACE, u64::MAX);
        l2.apply(&oracle(&segs, &present), GRACE);
        for g in l2.take_dirty_gaps() { gaps.insert(g.first, g); }
        let got: Vec<(Offset, Offset, u64)> = gaps.values().map(|g| (g.first, g.last, g.missing)).collect();
        prop_assert_eq!(got, model_gaps(&kinds));
    }

    #[test]
    fn memory_is_runs_not_records_without_keys(n in 1usize..5_000) {
        let mut l = PartitionLedger::new(0, false);
        for o in 0..n {
            l.ingest(o as Offset, None, exp(), 0);
        }
        prop_assert_eq!(l.pending_runs().len(), 1);
        prop_assert_eq!(l.pending(), n as u64);
    }
}

proptest! {
    #![proptest_config(crate::test_seed::config())]
    /// The round scheduler's "when does the first pending record fall due" agrees with the
    /// due rule itself at every instant, under either rule, whatever the commits.
    #[test]
    fn next_due_agrees_with_due_at_every_instant(
        mut seen in prop::collection::vec(0i64..5_000, 1..40),
        mut commits in prop::collection::vec((0i64..5_000, 0i64..50), 0..8),
        time_rule in any::<bool>(),
        probe in 0i64..12_000,
        decided in 0u64..20,
    ) {
        seen.sort_unstable();
        commits.sort_unstable();
        let mut l = PartitionLedger::new(0, false);
        l.pipeline.set_time_rule(time_rule);
        for (o, &t) in seen.iter().enumerate() {
            l.ingest(o as Offset, None, exp(), t);
        }
        for &(at, c) in &commits {
            l.pipeline.observe(at, Some(c));
        }
        // Some records already decided, as after earlier rounds.
        let start = seen.iter().chain(commits.iter().map(|(at, _)| at)).copied().max().unwrap_or(0);
        let segs = l.due(start, GRACE, decided.max(1));
        let all: BTreeSet<Offset> = (0..seen.len() as Offset).collect();
        l.apply(&oracle(&segs, &all), start);
        let next = l.next_due_ms(GRACE);
        let now = start + probe;
        let due = !l.clone().due(now, GRACE, u64::MAX).is_empty();
        prop_assert_eq!(due, next.is_some_and(|t| t <= now), "next {:?} now {}", next, now);
    }
}
