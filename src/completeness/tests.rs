use super::*;
use proptest::prelude::*;

const T0: i64 = 1_714_564_800_000; // 2024-05-01T12:00:00Z

fn part(name: i32, ledger: LedgerCompleteness, caught_up: bool) -> PartitionInput {
    PartitionInput {
        topic: "t".to_string(),
        partition: name,
        ledger,
        caught_up,
        unread_cause: None,
    }
}

fn gap(first: Offset, ts: Option<i64>) -> BlockingGap {
    BlockingGap {
        first,
        since: Since::of(ts),
        missing: 2,
        state: GapState::Open,
        epoch: 0,
    }
}

fn idle(newest: i64) -> LedgerCompleteness {
    LedgerCompleteness {
        newest_ts: Some(newest),
        ..Default::default()
    }
}

#[test]
fn an_open_gap_blocks_at_its_first_record() {
    let l = LedgerCompleteness {
        gaps: vec![gap(2, Some(T0 + 2_000))],
        blocking_gaps: 1,
        newest_ts: Some(T0 + 5_000),
        ..Default::default()
    };
    let c = evaluate("dns", &[part(0, l, true)], T0 + 60_000, 3_000);
    assert_eq!(c.complete_until_ms, Some(T0 + 2_000));
    let a = answer("dns", &c, T0 + 2_000);
    assert!(a.complete, "everything before the lost record is in: {a:?}");
    assert!(a.blocking.is_empty());
    let a = answer("dns", &c, T0 + 2_001);
    assert!(!a.complete);
    assert_eq!(a.blocking, vec!["dns:t:0:2"]);
    assert!(a.blocked_by_gap());
    assert_eq!(decide(&[a]), Decision::Blocked(vec!["dns:t:0:2".into()]));
}

#[test]
fn pending_records_hold_back_without_a_gap() {
    let l = LedgerCompleteness {
        pending: Some(Since::At(T0 + 1_000)),
        newest_ts: Some(T0 + 9_000),
        ..Default::default()
    };
    let c = evaluate("dns", &[part(3, l, true)], T0 + 60_000, 3_000);
    assert_eq!(c.complete_until_ms, Some(T0 + 1_000));
    let a = answer("dns", &c, T0 + 5_000);
    assert_eq!(a.blocking, vec!["pending", "pending:t-3"]);
    assert!(!a.blocked_by_gap());
    assert_eq!(decide(&[a]), Decision::NotYet);
    assert!(a_reason_mentions(&c, T0 + 5_000, "not confirmed yet"));
}

fn a_reason_mentions(c: &AuditCompleteness, until: i64, text: &str) -> bool {
    answer("dns", c, until).reason.contains(text)
}

#[test]
fn an_idle_partition_does_not_freeze_completeness() {
    // Partition 1 went quiet at T0; partition 0 is read to its end with records up to
    // T0 + 50 s, all confirmed. At T0 + 60 s with a 3 s horizon, partition 1 counts up
    // to T0 + 57 s: the audit is complete up to partition 0's newest record.
    let c = evaluate(
        "dns",
        &[part(0, idle(T0 + 50_000), true), part(1, idle(T0), true)],
        T0 + 60_000,
        3_000,
    );
    assert_eq!(c.complete_until_ms, Some(T0 + 57_000));
    assert!(c.blockers.is_empty());
    // Quiet everywhere: complete up to now − horizon, not stuck at the last record.
    let c = evaluate("dns", &[part(1, idle(T0), true)], T0 + 60_000, 3_000);
    assert_eq!(c.complete_until_ms, Some(T0 + 57_000));
    // A record newer than now − horizon that is already confirmed counts.
    let c = evaluate(
        "dns",
        &[part(1, idle(T0 + 59_000), true)],
        T0 + 60_000,
        3_000,
    );
    assert_eq!(c.complete_until_ms, Some(T0 + 59_000));
    // Empty partitions (nothing ever read) count too.
    let c = evaluate(
        "dns",
        &[part(0, LedgerCompleteness::default(), true)],
        T0,
        1_000,
    );
    assert_eq!(c.complete_until_ms, Some(T0 - 1_000));
}

#[test]
fn a_partition_not_read_to_its_end_holds_back_at_its_newest_record() {
    let c = evaluate(
        "dns",
        &[part(0, idle(T0 + 50_000), true), part(1, idle(T0), false)],
        T0 + 60_000,
        3_000,
    );
    assert_eq!(c.complete_until_ms, Some(T0));
    assert_eq!(c.blockers[0].kind, BlockerKind::Unread);
    assert_eq!(c.blockers[0].id, "pending:t-1");
    // Nothing read there yet: unknown, nothing is proven.
    let c = evaluate(
        "dns",
        &[
            part(0, idle(T0 + 50_000), true),
            part(1, LedgerCompleteness::default(), false),
        ],
        T0 + 60_000,
        3_000,
    );
    assert_eq!(c.complete_until_ms, None);
    let a = answer("dns", &c, T0);
    assert!(!a.complete);
    assert_eq!(a.blocking, vec!["pending", "pending:t-1"]);
    assert_eq!(a.blockers[0].since, None);
}

#[test]
fn an_unread_partitions_cause_is_its_blockers_and_the_reasons() {
    let held = PartitionInput {
        unread_cause: Some("an open transaction holds its last stable offset at 4".into()),
        ..part(1, idle(T0), false)
    };
    let c = evaluate(
        "dns",
        &[part(0, idle(T0 + 50_000), true), held],
        T0 + 60_000,
        3_000,
    );
    let a = answer("dns", &c, T0 + 10_000);
    assert_eq!(a.blockers[0].kind, BlockerKind::Unread);
    assert_eq!(
        a.blockers[0].cause.as_deref(),
        Some("an open transaction holds its last stable offset at 4")
    );
    assert!(
        a.reason
            .ends_with("an open transaction holds its last stable offset at 4"),
        "{}",
        a.reason
    );
    // In the JSON only when known.
    let json = serde_json::to_value(&a).expect("json");
    assert_eq!(
        json["blockers"][0]["cause"],
        "an open transaction holds its last stable offset at 4"
    );
    let c = evaluate("dns", &[part(1, idle(T0), false)], T0 + 60_000, 3_000);
    let json = serde_json::to_value(answer("dns", &c, T0 + 10_000)).expect("json");
    assert!(json["blockers"][0].get("cause").is_none(), "{json}");
}

#[test]
fn a_gap_without_timestamps_blocks_every_until() {
    let l = LedgerCompleteness {
        gaps: vec![BlockingGap {
            state: GapState::Unverifiable,
            ..gap(0, None)
        }],
        blocking_gaps: 1,
        newest_ts: Some(T0),
        ..Default::default()
    };
    let c = evaluate("dns", &[part(0, l, true)], T0 + 60_000, 3_000);
    assert_eq!(c.complete_until_ms, None);
    let a = answer("dns", &c, 0);
    assert_eq!(a.blocking, vec!["dns:t:0:0"]);
    assert_eq!(a.blockers[0].state.as_deref(), Some("unverifiable"));
}

#[test]
fn unlisted_gaps_make_the_answer_truncated() {
    let gaps: Vec<BlockingGap> = (0..MAX_LISTED_GAPS as i64)
        .map(|i| gap(i * 10, Some(T0 + i * 1_000)))
        .collect();
    let l = LedgerCompleteness {
        gaps,
        blocking_gaps: 1_000,
        newest_ts: Some(T0 + 100_000),
        ..Default::default()
    };
    let c = evaluate("dns", &[part(0, l, true)], T0 + 200_000, 3_000);
    assert_eq!(c.complete_until_ms, Some(T0));
    let last = T0 + (MAX_LISTED_GAPS as i64 - 1) * 1_000;
    assert!(!answer("dns", &c, last).truncated);
    let a = answer("dns", &c, last + 1);
    assert!(a.truncated);
    assert_eq!(a.blocking.len(), MAX_LISTED_GAPS);
}

#[test]
fn no_partition_means_unknown_and_decide_waits() {
    let c = evaluate("dns", &[], T0, 1_000);
    assert_eq!(c.complete_until_ms, None);
    let a = answer("dns", &c, T0);
    assert!(!a.complete && a.blocking.is_empty());
    assert!(a.reason.contains("owns no partition"), "{}", a.reason);
    assert_eq!(decide(std::slice::from_ref(&a)), Decision::NotYet);
    // A standby instance does not veto the one that owns every partition.
    let owner = answer("dns", &owning(&[0], 1), T0);
    assert!(owner.complete);
    assert_eq!(decide(&[a.clone(), owner.clone()]), Decision::Complete);
    assert_eq!(decide(&[owner, incomplete()]), Decision::NotYet);
}

/// `{"t": n}`: topic `t` has `n` partitions.
fn counts(n: usize) -> std::collections::BTreeMap<String, usize> {
    [("t".to_string(), n)]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// An instance owning the idle partitions `ps` of topic `t`, which has `n` partitions.
fn owning(ps: &[i32], n: usize) -> AuditCompleteness {
    let parts: Vec<PartitionInput> = ps.iter().map(|p| part(*p, idle(T0), true)).collect();
    let mut c = evaluate("dns", &parts, T0, 0);
    c.topic_partitions = counts(n);
    c
}

/// Issue 35 item 4: two instances, three partitions; partition 2 is moving from A to B.
/// Each answer is complete for what it owns, and on main `wait` exited 0: nobody spoke for
/// partition 2. Complete only once the answers together cover every partition.
#[test]
fn answers_that_leave_a_partition_uncovered_are_not_complete() {
    let a = answer("dns", &owning(&[0, 1], 3), T0);
    let b = answer("dns", &owning(&[], 3), T0);
    assert!(a.complete, "{a:?}");
    assert!(
        a.reason
            .contains("1 other partition(s) are read by other instances"),
        "{}",
        a.reason
    );
    assert!(
        !b.complete && b.reason.starts_with("unknown"),
        "{}",
        b.reason
    );
    assert_eq!(decide(&[a.clone(), b.clone()]), Decision::NotYet);
    let missing = coverage(&[a.clone(), b]);
    assert_eq!(
        missing,
        Coverage::Missing {
            named: vec!["t-2".into()],
            total: 1
        }
    );
    assert!(missing.note().is_some_and(|n| n.contains("t-2")));
    // B has taken partition 2 over: covered, each complete.
    let b = answer("dns", &owning(&[2], 3), T0);
    assert_eq!(decide(&[a.clone(), b.clone()]), Decision::Complete);
    assert_eq!(coverage(&[a.clone(), b]).note(), None);
    // Alone, A never proves the audit complete, however complete its own share is.
    assert_eq!(decide(std::slice::from_ref(&a)), Decision::NotYet);
    // A partition covered twice (mid-handover) must be complete in both answers.
    let b = answer("dns", &owning(&[1, 2], 3), T0);
    let mut stale = owning(&[0, 1], 3);
    stale.complete_until_ms = Some(T0 - 1);
    let stale = answer("dns", &stale, T0);
    assert_eq!(decide(&[stale, b]), Decision::NotYet);
}

#[test]
fn coverage_needs_the_partition_counts_and_takes_the_largest() {
    // Nobody knows how many partitions there are: nothing can be proven.
    let a = answer(
        "dns",
        &evaluate("dns", &[part(0, idle(T0), true)], T0, 0),
        T0,
    );
    assert!(a.complete);
    assert_eq!(coverage(std::slice::from_ref(&a)), Coverage::Unknown);
    assert_eq!(decide(std::slice::from_ref(&a)), Decision::NotYet);
    // The topic grew to 2 partitions; one instance has seen it grow.
    let old = answer("dns", &owning(&[0], 1), T0);
    let new = answer("dns", &owning(&[], 2), T0);
    assert_eq!(decide(std::slice::from_ref(&old)), Decision::Complete);
    assert_eq!(decide(&[old, new]), Decision::NotYet);
    // An answer claiming an absurd count (outside data) is unknown, not a long walk.
    let mut huge = owning(&[0], 1);
    huge.topic_partitions = [("t".to_string(), usize::MAX)].into_iter().collect();
    let huge = answer("dns", &huge, T0);
    assert_eq!(coverage(&[huge]), Coverage::Unknown);
}

#[test]
fn coverage_travels_in_the_json_answer() {
    let a = answer("dns", &owning(&[0, 2], 3), T0);
    let v = serde_json::to_value(&a).expect("json");
    assert_eq!(v["covers"], serde_json::json!({"t": [0, 2]}));
    assert_eq!(v["topic_partitions"], serde_json::json!({"t": 3}));
    let back: Answer = serde_json::from_value(v).expect("parses back");
    assert_eq!(back, a);
    // An answer without them (an older daemon) covers nothing.
    let mut v = serde_json::to_value(&a).expect("json");
    v.as_object_mut().expect("object").remove("covers");
    v.as_object_mut()
        .expect("object")
        .remove("topic_partitions");
    let old: Answer = serde_json::from_value(v).expect("parses");
    assert!(old.covers.is_empty());
    assert_eq!(decide(&[old]), Decision::NotYet);
}

fn incomplete() -> Answer {
    let l = LedgerCompleteness {
        pending: Some(Since::At(T0 - 1)),
        ..Default::default()
    };
    answer("dns", &evaluate("dns", &[part(9, l, true)], T0, 0), T0)
}

#[test]
fn the_answer_serializes_as_the_contract_says() {
    let l = LedgerCompleteness {
        gaps: vec![gap(2, Some(T0 + 2_000))],
        blocking_gaps: 1,
        pending: Some(Since::At(T0 + 3_000)),
        newest_ts: Some(T0 + 5_000),
    };
    let c = evaluate("dns", &[part(0, l, true)], T0 + 60_000, 3_000);
    let v = serde_json::to_value(answer("dns", &c, T0 + 10_000)).unwrap();
    assert_eq!(v["complete"], false);
    assert_eq!(v["complete_until"], "2024-05-01T12:00:02Z");
    assert_eq!(v["until"], "2024-05-01T12:00:10Z");
    assert_eq!(
        v["blocking"],
        serde_json::json!(["dns:t:0:2", "pending", "pending:t-0"])
    );
    assert_eq!(v["blockers"][0]["kind"], "gap");
    assert_eq!(v["blockers"][0]["state"], "open");
    assert_eq!(v["blockers"][0]["missing_records"], 2);
    assert_eq!(v["blockers"][1]["kind"], "pending");
    assert_eq!(v["blockers"][1]["since"], "2024-05-01T12:00:03Z");
    let back: Answer = serde_json::from_value(v).unwrap();
    assert_eq!(back.blocking.len(), 3);
}

/// The ledger side: [`crate::ledger::PartitionLedger::completeness`] on the seed
/// incident, then as the gap is acknowledged, found late, or given up.
mod ledger {
    use super::super::*;
    use crate::ledger::{Observed, OffsetRun, PartitionLedger, RecheckBudget, Verdict};

    const GRACE: i64 = 1_000;

    fn exp() -> Observed {
        Observed::Expected { key: None }
    }

    fn known(present: Vec<OffsetRun>) -> Verdict {
        Verdict::Known {
            present,
            duplicate_rows: 0,
            shared_keys: Vec::new(),
            stand_ins: Vec::new(),
        }
    }

    /// Records 0..6 with timestamps 1000 + offset, read at `now` 0; 0-1 are decided
    /// (confirmed) before 2-5 are read, so 2's run starts at 2 (exact bounds).
    fn seed() -> PartitionLedger {
        let mut l = PartitionLedger::new(0, false);
        for o in 0..2 {
            assert!(l.ingest(o, Some(1_000 + o), exp(), 0));
            l.note_record_ts(Some(1_000 + o), i64::MAX);
        }
        l.pipeline.observe(0, Some(2));
        let segs = l.due(GRACE, GRACE, 100);
        l.apply(&[known(vec![OffsetRun::new(0, 1)])], GRACE);
        assert_eq!(segs.len(), 1);
        for o in 2..6 {
            assert!(l.ingest(o, Some(1_000 + o), exp(), 5_000));
            l.note_record_ts(Some(1_000 + o), i64::MAX);
        }
        l
    }

    #[test]
    fn pending_then_a_gap_then_released_by_a_late_arrival() {
        let mut l = seed();
        let c = l.completeness();
        assert_eq!(c.pending, Some(Since::At(1_002)), "lag holds it back");
        assert!(c.gaps.is_empty());
        assert_eq!(c.newest_ts, Some(1_005));
        // The pipeline jumps 2 -> 6 (restart from latest) and wrote 4-5 only.
        l.pipeline.observe(5_000, Some(6));
        let segs = l.due(5_000 + GRACE, GRACE, 100);
        assert_eq!(segs.len(), 1);
        let a = l.apply(&[known(vec![OffsetRun::new(4, 5)])], 6_000);
        assert_eq!((a.confirmed, a.lost), (2, 2));
        l.take_dirty_gaps();
        let c = l.completeness();
        assert_eq!(c.pending, None);
        assert_eq!(c.blocking_gaps, 1);
        assert_eq!(c.gaps[0].first, 2);
        assert_eq!(c.gaps[0].since, Since::At(1_002), "the lost records' time");
        assert_eq!(c.gaps[0].state, GapState::Open);
        // A replay: both found on re-check, the gap stops blocking.
        let segs = l.rechecks(RecheckBudget::UNLIMITED);
        let a = l.apply_rechecks(&segs, &[known(vec![OffsetRun::new(2, 3)])]);
        assert_eq!(a.late, 2);
        let c = l.completeness();
        assert!(c.gaps.is_empty() && c.blocking_gaps == 0, "{c:?}");
    }

    #[test]
    fn an_acknowledged_gap_stops_blocking_a_given_up_one_does_not() {
        let mut l = seed();
        l.pipeline.observe(5_000, Some(6));
        l.due(5_000 + GRACE, GRACE, 100);
        l.apply(&[known(vec![OffsetRun::new(4, 5)])], 6_000);
        l.take_dirty_gaps();
        // Given up: no more re-checks, still missing, still blocking.
        l.give_up(10_000_000, 1_000);
        assert_eq!(l.completeness().blocking_gaps, 1);
        assert!(l.acknowledge(2));
        let c = l.completeness();
        assert_eq!((c.blocking_gaps, c.gaps.len()), (0, 0));
    }

    #[test]
    fn a_range_deleted_unread_blocks_at_an_unknown_time() {
        let mut l = PartitionLedger::new(0, false);
        l.skipped_by_retention(0, 9, 1_000);
        let c = l.completeness();
        assert_eq!(c.gaps[0].since, Since::Unknown);
        assert_eq!(c.gaps[0].state, GapState::Unverifiable);
        // The sink (offset_columns) found the first piece: the rest, not asked yet, still
        // blocks.
        l.settle_deleted(0, OffsetRun::new(0, 4), &[OffsetRun::new(0, 4)]);
        assert_eq!(l.completeness().blocking_gaps, 1);
        // And the second: nothing is missing any more.
        l.settle_deleted(0, OffsetRun::new(5, 9), &[OffsetRun::new(5, 9)]);
        assert_eq!(l.completeness().blocking_gaps, 0);
    }

    #[test]
    fn only_the_earliest_gaps_are_listed() {
        let mut l = PartitionLedger::new(0, false);
        // Every second record lost, timestamps falling with offsets: the earliest by
        // time are the last by offset. Read 2 s apart: one pending run each, so every
        // gap's bounds are exact (a run read within a second shares its bounds).
        let n = 3 * MAX_LISTED_GAPS as i64;
        for o in 0..2 * n {
            l.ingest(o, Some(1_000_000 - o), exp(), o * 2_000);
        }
        l.pipeline.observe(0, Some(2 * n));
        let segs = l.due(4 * n * 2_000, GRACE, u64::MAX);
        let present: Vec<OffsetRun> = (0..n).map(|i| OffsetRun::new(2 * i, 2 * i)).collect();
        let verdicts: Vec<Verdict> = segs.iter().map(|_| known(present.clone())).collect();
        l.apply(&verdicts, GRACE);
        let c = l.completeness();
        assert_eq!(c.blocking_gaps, n as u64);
        assert_eq!(c.gaps.len(), MAX_LISTED_GAPS);
        let times: Vec<Since> = c.gaps.iter().map(|g| g.since).collect();
        let mut sorted = times.clone();
        sorted.sort();
        assert_eq!(times, sorted, "earliest first");
        assert!(
            c.gaps
                .iter()
                .all(|g| g.first >= 2 * (n - MAX_LISTED_GAPS as i64))
        );
    }

    /// Idle rounds cost O(1): with 20,000 gaps, 1,000 calls on an unchanged ledger take
    /// less than 50 recomputations would (each walks every gap).
    #[test]
    fn a_future_timestamp_is_clamped_to_the_read_and_counted() {
        let mut l = PartitionLedger::new(0, false);
        let read_at = 10_000;
        assert!(l.ingest(0, Some(read_at - 1), exp(), read_at));
        assert!(!l.note_record_ts(Some(read_at - 1), read_at));
        // Stamped an hour ahead of the read.
        assert!(l.ingest(1, Some(read_at + 3_600_000), exp(), read_at));
        assert!(l.note_record_ts(Some(read_at + 3_600_000), read_at));
        assert_eq!(l.future_timestamps(), 1);
        assert_eq!(l.completeness().newest_ts, Some(read_at));
        // Confirmed and idle an hour later: complete up to now − horizon, not the stamp.
        l.pipeline.observe(read_at, Some(2));
        let segs = l.due(read_at + GRACE, GRACE, 100);
        assert_eq!(segs.len(), 1);
        l.apply(&[known(vec![OffsetRun::new(0, 1)])], read_at + GRACE);
        let now = read_at + 60_000;
        let c = evaluate("dns", &[super::part(0, l.completeness(), true)], now, 5_000);
        assert_eq!(c.complete_until_ms, Some(now - 5_000));
        // No timestamp is never counted as a future one.
        assert!(!l.note_record_ts(None, read_at));
        assert_eq!(l.future_timestamps(), 1);
    }

    #[test]
    fn an_unchanged_ledger_is_not_walked_again() {
        let mut l = PartitionLedger::new(0, false);
        let n = 20_000;
        for o in 0..2 * n {
            l.ingest(o, Some(o), exp(), 0);
        }
        l.pipeline.observe(0, Some(2 * n));
        let segs = l.due(GRACE, GRACE, u64::MAX);
        let present: Vec<OffsetRun> = (0..n)
            .map(|i| OffsetRun::new(2 * i + 1, 2 * i + 1))
            .collect();
        let verdicts: Vec<Verdict> = segs.iter().map(|_| known(present.clone())).collect();
        l.apply(&verdicts, GRACE);
        let t = std::time::Instant::now();
        let first = l.completeness();
        let once = t.elapsed();
        assert_eq!(first.blocking_gaps, n as u64);
        let t = std::time::Instant::now();
        for _ in 0..1_000 {
            assert_eq!(l.completeness().blocking_gaps, n as u64);
        }
        assert!(
            t.elapsed() < once * 50,
            "1000 idle calls took {:?}, one computation {once:?}",
            t.elapsed()
        );
        // A change is seen at once.
        l.ingest(2 * n, Some(7), exp(), 0);
        l.note_record_ts(Some(7), i64::MAX);
        assert_eq!(l.completeness().pending, Some(Since::At(7)));
    }
}

fn ledger_strategy() -> impl Strategy<Value = (LedgerCompleteness, bool)> {
    let ts = prop_oneof![1 => Just(None), 9 => (0i64..100_000).prop_map(Some)];
    (
        proptest::option::of(ts.clone()),
        proptest::collection::vec((0i64..1_000, ts.clone()), 0..4),
        proptest::option::of(0i64..100_000),
        any::<bool>(),
    )
        .prop_map(|(pending, gaps, newest, caught_up)| {
            // Distinct first offsets: a gap's identity.
            let mut gaps: Vec<BlockingGap> = gaps
                .into_iter()
                .enumerate()
                .map(|(i, (f, t))| gap(i as i64 * 1_000 + f, t))
                .collect();
            gaps.sort_by_key(|g| g.since);
            (
                LedgerCompleteness {
                    pending: pending.map(Since::of),
                    blocking_gaps: gaps.len() as u64,
                    gaps,
                    newest_ts: newest,
                },
                caught_up,
            )
        })
}

proptest! {
    #![proptest_config(crate::test_seed::config())]
    /// `complete` and `blocking` never contradict each other, a gap blocks exactly the
    /// untils after its first record, and completeness is the earliest hold.
    #[test]
    fn answers_are_consistent(
        ledgers in proptest::collection::vec(ledger_strategy(), 0..5),
        now in 0i64..200_000,
        horizon in 0i64..10_000,
        until in 0i64..200_000,
    ) {
        let parts: Vec<PartitionInput> = ledgers
            .iter()
            .enumerate()
            .map(|(i, (l, c))| part(i as i32, l.clone(), *c))
            .collect();
        let mut c = evaluate("dns", &parts, now, horizon);
        // The instance owns every partition of its topic.
        c.topic_partitions = counts(parts.len());
        let a = answer("dns", &c, until);
        // Complete means nothing listed blocks it.
        if a.complete {
            prop_assert!(a.blocking.is_empty(), "{a:?}");
        }
        // Any blocker before `until` makes it incomplete.
        if !a.blocking.is_empty() {
            prop_assert!(!a.complete);
        }
        // Never ahead of the wall clock, whatever the records' timestamps say.
        prop_assert!(c.complete_until_ms.is_none_or(|cu| cu <= now), "{c:?} at {now}");
        // Every blocker is at or after complete_until.
        if let Some(cu) = c.complete_until_ms {
            for b in &c.blockers {
                prop_assert!(b.since >= Since::At(cu), "{b:?} before {cu}");
            }
        } else if !parts.is_empty() {
            // Unknown only because something holds back at an unknown time.
            prop_assert!(c.blockers.iter().any(|b| b.since == Since::Unknown));
        }
        // Each gap blocks exactly the untils after its first record.
        for (i, (l, _)) in ledgers.iter().enumerate() {
            for g in &l.gaps {
                let id = crate::gap::Gap::make_id("dns", "t", i as i32, g.first);
                prop_assert_eq!(a.blocking.contains(&id), g.since.before(until));
            }
        }
        // A partition caught up with nothing pending and no gap never holds the audit
        // below now − horizon.
        let floor = now - horizon;
        let quiet = ledgers.iter().all(|(l, c)| *c && l.pending.is_none() && l.gaps.is_empty());
        if quiet && !parts.is_empty() {
            prop_assert!(c.complete_until_ms.is_some_and(|cu| cu >= floor));
        }
        prop_assert_eq!(decide(std::slice::from_ref(&a)) == Decision::Complete, a.complete);
    }
}
