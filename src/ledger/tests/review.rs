//! Review: deltas and restores agree on every path, and the late-arrival probe.

use super::*;

/// One step of the adversarial delta/restore property below.
#[derive(Debug, Clone)]
enum Op {
    /// Read `n` records (every `filter_every`-th filtered), the pipeline commits them.
    Read { n: u8, filter_every: u8 },
    /// A verify round: due records present per `mask`; then late arrivals per `late`, and a
    /// re-check with a budget of `runs` runs / `records` records.
    Round {
        mask: u64,
        late: u64,
        runs: u8,
        records: u8,
    },
    /// `give_up` with this age.
    GiveUp { age: u8 },
    /// The operator acknowledges the `i`-th gap.
    Ack { i: u8 },
    /// The operator acknowledges the `i`-th gap as it was when it ended `keep` offsets
    /// after its first (a round extended it while the ack was on its way).
    AckThrough { i: u8, keep: u8 },
    /// `max_missing_keys` gives up `n` keys.
    DropKeys { n: u8 },
    /// The log start moves forward by `d`.
    LogStart { d: u8 },
    /// The auditor's resume point fell `n` offsets below the log start.
    Skip { n: u8 },
    /// The deleted ranges' next pieces (at most `piece` offsets each) are settled, the sink
    /// holding the offsets per `mask`: a range may stay partly settled across a crash.
    Settle { mask: u64, piece: u8 },
    /// Persist (the delta), then kill -9 and restore from what is stored.
    Crash,
    /// `max_open_gaps` folds the oldest gaps until `n` fewer are in memory.
    Fold { n: u8 },
    /// The log is truncated `back` offsets below the settled offset (an unclean leader
    /// election): the ledger resumes there on the new log.
    Truncate { back: u8 },
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (1u8..12, 0u8..4).prop_map(|(n, filter_every)| Op::Read { n, filter_every }),
        6 => (any::<u64>(), any::<u64>(), 1u8..4, 1u8..6)
            .prop_map(|(mask, late, runs, records)| Op::Round { mask, late, runs, records }),
        1 => (0u8..40).prop_map(|age| Op::GiveUp { age }),
        1 => (0u8..4).prop_map(|i| Op::Ack { i }),
        1 => (0u8..4, 0u8..12).prop_map(|(i, keep)| Op::AckThrough { i, keep }),
        1 => (1u8..6).prop_map(|n| Op::DropKeys { n }),
        1 => (0u8..20).prop_map(|d| Op::LogStart { d }),
        1 => (1u8..5).prop_map(|n| Op::Skip { n }),
        1 => (any::<u64>(), 1u8..4).prop_map(|(mask, piece)| Op::Settle { mask, piece }),
        2 => Just(Op::Crash),
        1 => (1u8..4).prop_map(|n| Op::Fold { n }),
        1 => (0u8..12).prop_map(|back| Op::Truncate { back }),
    ]
}

/// The persisted view of a gap (`is_new` is not persisted).
fn persisted_gaps(l: &PartitionLedger) -> Vec<GapRecord> {
    l.gaps()
        .cloned()
        .map(|mut g| {
            g.is_new = false;
            g
        })
        .collect()
}

fn check_invariants(l: &mut PartitionLedger, step: usize) -> Result<(), TestCaseError> {
    // Gaps in memory, and those retired (in the store only).
    let in_gaps: u64 = l
        .gaps()
        .filter(|g| g.size_known)
        .map(|g| g.missing)
        .sum::<u64>()
        + l.retired().missing_known;
    prop_assert_eq!(l.missing(), in_gaps, "step {}: missing() vs the gaps", step);
    for g in l.gaps().filter(|g| g.size_known) {
        prop_assert!(
            g.missing <= (g.last - g.first + 1) as u64,
            "step {}: gap {}..={} says {} missing",
            step,
            g.first,
            g.last,
            g.missing
        );
    }
    let snap = l.snapshot();
    let keys: u64 = snap.missing.iter().map(|m| m.keys.len() as u64).sum();
    prop_assert_eq!(l.missing_key_count(), keys, "step {}: key count", step);
    for m in &snap.missing {
        if !m.keys.is_empty() {
            prop_assert_eq!(
                m.keys.len() as u64,
                m.run.len(),
                "step {}: keys per offset",
                step
            );
        }
        let g = snap.gaps.iter().find(|g| g.first == m.gap);
        prop_assert!(
            g.is_some_and(|g| g.first <= m.run.first && m.run.last <= g.last),
            "step {}: run {:?} outside its gap",
            step,
            m.run
        );
    }
    // The cached gauges are the gauges of the ledger as it is.
    let cached = l.gauges();
    let mut fresh = PartitionLedger::restore(0, true, l.snapshot());
    // The daemon counts the retired gaps from the store at assignment.
    fresh.retired_recounted(0, l.retired().clone());
    prop_assert_eq!(cached, fresh.gauges(), "step {}: stale cached gauges", step);
    Ok(())
}

/// The missing offsets of gap `gap` (`None`: of every gap).
fn missing_of(l: &PartitionLedger, gap: Option<Offset>) -> BTreeSet<Offset> {
    l.snapshot()
        .missing
        .iter()
        .filter(|m| gap.is_none_or(|f| m.gap == f))
        .flat_map(|m| m.run.first..=m.run.last)
        .collect()
}

fn run_ops(ops: Vec<Op>, probe: bool) -> Result<(), TestCaseError> {
    let keyed = !probe;
    let key = |o: Offset| Key::new([format!("k{o}")]);
    let mut l = PartitionLedger::new(0, keyed);
    let mut items = crate::model_tests::StoredItems::default();
    let mut stored: (Offset, Snapshot) = (0, Snapshot::default());
    let mut sink: BTreeSet<Offset> = BTreeSet::new();
    let mut now: i64 = 0;
    let mut log_start: Offset = 0;
    let persist = |l: &mut PartitionLedger,
                   items: &mut crate::model_tests::StoredItems,
                   stored: &mut (Offset, Snapshot),
                   step: usize|
     -> Result<(), TestCaseError> {
        l.take_dirty_gaps();
        *stored = (l.settled(), items.write(l));
        prop_assert_eq!(&stored.1, &l.snapshot(), "step {}: the deltas add up", step);
        l.stored();
        items.settle_retired(l);
        Ok(())
    };
    for (step, op) in ops.into_iter().enumerate() {
        now += 10 * GRACE;
        match op {
            Op::Read { n, filter_every } => {
                let from = l.next_offset().max(0);
                for o in from..from + n as Offset {
                    let what = if filter_every > 0 && o % filter_every as Offset == 0 {
                        Observed::Filtered
                    } else {
                        Observed::Expected {
                            key: keyed.then(|| key(o)),
                        }
                    };
                    l.ingest(o, None, what, now);
                }
                l.pipeline.observe(now, Some(from + n as Offset));
            }
            Op::Round {
                mask,
                late,
                runs,
                records,
            } => {
                let segs = l.due(now + GRACE, GRACE, 1_000);
                for s in &segs {
                    for o in s.run.first..=s.run.last {
                        if mask >> (o % 64) & 1 == 1 {
                            sink.insert(o);
                        }
                    }
                }
                l.apply(&oracle(&segs, &sink), now + GRACE);
                for m in l.missing_runs() {
                    for o in m.first..=m.last {
                        if late >> (o % 64) & 1 == 1 && o % 3 == 0 {
                            sink.insert(o);
                        }
                    }
                }
                let budget = RecheckBudget {
                    runs: runs as usize,
                    records: records as u64,
                };
                if probe {
                    probe_round(&mut l, &sink, budget);
                } else {
                    let c = l.rechecks(budget);
                    l.apply_rechecks(&c, &oracle(&c, &sink));
                }
                l.take_dirty_gaps();
            }
            Op::GiveUp { age } => l.give_up(now, age as i64 * GRACE),
            Op::Ack { i } => {
                let first = l.gaps().nth(i as usize).map(|g| g.first);
                if let Some(first) = first {
                    l.acknowledge(first);
                }
            }
            Op::AckThrough { i, keep } => {
                let g = l.gaps().nth(i as usize).cloned();
                if let Some(g) = g {
                    let last = g.first + keep as Offset;
                    let before = missing_of(&l, Some(g.first));
                    l.acknowledge_through(g.first, last);
                    let after = missing_of(&l, None);
                    // The acknowledged records leave; those added after it stay missing
                    // (where the gap counts its records).
                    for o in &before {
                        if *o <= last || !g.size_known {
                            prop_assert!(!after.contains(o), "step {}: {} acknowledged", step, o);
                        } else {
                            prop_assert!(
                                after.contains(o),
                                "step {}: {} folded into the ack",
                                step,
                                o
                            );
                        }
                    }
                }
            }
            Op::DropKeys { n } => {
                l.drop_missing_keys(n as u64);
            }
            Op::Fold { n } => {
                let (before, missing) = (l.gaps_in_memory(), l.missing());
                let down = l.fold_oldest(n as usize);
                prop_assert!(down <= n as usize, "step {}: folded past the excess", step);
                prop_assert_eq!(l.gaps_in_memory(), before - down, "step {}", step);
                prop_assert_eq!(l.missing(), missing, "step {}: a fold drops nothing", step);
                l.take_folded();
                l.take_dirty_gaps();
            }
            Op::LogStart { d } => {
                log_start += d as Offset;
                l.log_start_moved(log_start, now);
                l.take_dirty_gaps();
            }
            Op::Skip { n } => {
                let first = l.next_offset().max(0);
                l.skipped_by_retention(first, first + n as Offset - 1, now);
                l.take_dirty_gaps();
            }
            Op::Settle { mask, piece } => {
                for d in l.deleted_to_settle() {
                    let NextPiece::Ask(run) = d.next(piece as u64, u64::MAX) else {
                        continue;
                    };
                    let present: Vec<OffsetRun> = (run.first..=run.last)
                        .filter(|o| mask >> (o % 64) & 1 == 1)
                        .map(|o| r(o, o))
                        .collect();
                    l.settle_deleted(d.gap, run, &runs::normalize(present));
                }
                l.take_dirty_gaps();
            }
            Op::Truncate { back } => {
                persist(&mut l, &mut items, &mut stored, step)?;
                let at = (stored.0 - back as Offset).max(0);
                let (mut next, gone) =
                    PartitionLedger::restore_diverged(at, keyed, stored.1.clone());
                for g in &gone {
                    prop_assert!(
                        g.first >= at,
                        "step {}: gap {} taken out below {}",
                        step,
                        g.first,
                        at
                    );
                }
                next.retired_gone(at, now);
                for g in next.inherit_unstored(&mut l, at) {
                    prop_assert!(g.first >= at, "step {}", step);
                }
                next.pipeline = l.pipeline.clone();
                next.pipeline.observe(now, Some(at));
                // The new log holds other records from `at` on: the old rows there stay in
                // the sink (documented: they may confirm the new records at their offsets).
                l = next;
                persist(&mut l, &mut items, &mut stored, step)?;
            }
            Op::Crash => {
                persist(&mut l, &mut items, &mut stored, step)?;
                let before = l.clone();
                let mut back = PartitionLedger::restore(stored.0, keyed, stored.1.clone());
                items.settle_retired(&mut back);
                prop_assert_eq!(
                    back.missing(),
                    before.missing(),
                    "step {}: missing after restart",
                    step
                );
                prop_assert_eq!(back.missing_runs(), before.missing_runs(), "step {}", step);
                prop_assert_eq!(
                    persisted_gaps(&back),
                    persisted_gaps(&before),
                    "step {}",
                    step
                );
                prop_assert_eq!(
                    back.gauges(),
                    l.gauges(),
                    "step {}: gauges after restart",
                    step
                );
                prop_assert_eq!(
                    back.missing_key_count(),
                    before.missing_key_count(),
                    "step {}",
                    step
                );
                back.pipeline = before.pipeline.clone();
                l = back;
                // The restored ledger's first write, as the daemon's first persist does.
                persist(&mut l, &mut items, &mut stored, step)?;
            }
        }
        check_invariants(&mut l, step)?;
        if step % 3 == 0 {
            persist(&mut l, &mut items, &mut stored, step)?;
        }
    }
    // Idle rounds with the smallest budget: every record that landed is found late (the
    // sink here only gains rows: no deletion can offset a late arrival in the probe).
    let budget = RecheckBudget {
        runs: 1,
        records: 1,
    };
    for _ in 0..200 {
        if probe {
            probe_round(&mut l, &sink, budget);
        } else {
            let c = l.rechecks(budget);
            l.apply_rechecks(&c, &oracle(&c, &sink));
        }
    }
    for m in l.missing_runs() {
        for o in m.first..=m.last {
            prop_assert!(
                !sink.contains(&o),
                "offset {} in the sink, still missing",
                o
            );
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(crate::test_seed::with_cases(2_000))]

    /// Every path that changes the persisted ledger (settle_deleted, skipped_by_retention,
    /// log_start_moved, acknowledge, give_up, drop_missing_keys, partial re-checks) writes
    /// deltas that add up to its snapshot, and a restart from them is the same ledger.
    #[test]
    fn review_deltas_and_restores_agree_on_every_path(ops in prop::collection::vec(arb_op(), 1..40)) {
        run_ops(ops, false)?;
    }

    /// The same with offset_columns' probe: and a late arrival is always found in the end.
    #[test]
    fn review_deltas_and_restores_agree_with_the_probe(ops in prop::collection::vec(arb_op(), 1..40)) {
        run_ops(ops, true)?;
    }
}

/// Review: a tail gap whose records all turned late (missing 0) when the log start passed
/// its first offset is skipped by `log_start_moved`; a later missing record extends it
/// (no confirmed record in between), and when the log start passes that record too the
/// gap is never marked unrecoverable: the range scan starts at the previous log start.
#[test]
fn review_a_regrown_tail_gap_becomes_unrecoverable_when_the_log_start_passes_it() {
    let mut l = PartitionLedger::new(0, false);
    for o in 0..3 {
        l.ingest(o, None, exp(), 0);
    }
    l.pipeline.observe(0, Some(3));
    let segs = l.due(GRACE, GRACE, 100);
    // 0 present, 1-2 missing: gap at 1, the tail.
    l.apply(&oracle(&segs, &[0].into()), GRACE);
    l.take_dirty_gaps();
    // 1-2 land late: the gap stays (the tail), nothing missing.
    let c = l.rechecks(RecheckBudget::UNLIMITED);
    l.apply_rechecks(&c, &oracle(&c, &[1, 2].into()));
    l.take_dirty_gaps();
    assert_eq!(
        l.gaps().map(|g| (g.first, g.missing)).collect::<Vec<_>>(),
        vec![(1, 0)]
    );
    assert!(
        !l.log_start_moved(3, 2 * GRACE),
        "nothing missing: nothing to mark"
    );
    // Record 3 is missing: no confirmed record since the gap, so it extends the gap at 1.
    l.ingest(3, None, exp(), 3 * GRACE);
    l.pipeline.observe(3 * GRACE, Some(4));
    let segs = l.due(4 * GRACE, GRACE, 100);
    l.apply(&oracle(&segs, &BTreeSet::new()), 4 * GRACE);
    let g = l.take_dirty_gaps().pop().expect("the gap grew");
    assert_eq!((g.first, g.last, g.missing), (1, 3, 1));
    // Kafka deletes record 3: the gap's only missing record cannot be replayed any more.
    l.log_start_moved(4, 5 * GRACE);
    let g = l.gaps().next().expect("gap");
    assert!(
        g.deleted_ms.is_some(),
        "the log start passed every missing record of gap {}..={}, yet it stays recoverable",
        g.first,
        g.last
    );
}

/// Review: a v5 store kept given-up runs in the ledger; migrated to v6 (items), restored,
/// written back by delta and restored again, the ledger keeps every missing record in its
/// gap, follows only the runs not given up, and the store stops holding the stale run.
#[test]
fn review_a_v5_ledger_with_given_up_runs_survives_migration_deltas_and_restarts() {
    use crate::store::{DB_FILE, PartitionProgress, Store};
    // A ledger as v5 wrote it: records 0-1 and 3 of gap 0 missing, run 0-1 given up.
    let mut l = PartitionLedger::new(0, true);
    for o in 0..5 {
        l.ingest(
            o,
            None,
            Observed::Expected {
                key: Some(Key::new([format!("k{o}")])),
            },
            0,
        );
    }
    l.pipeline.observe(0, Some(5));
    let segs = l.due(GRACE, GRACE, 100);
    l.apply(&oracle(&segs, &[2, 4].into()), GRACE);
    l.take_dirty_gaps();
    let mut v5 = serde_json::to_value(l.snapshot()).unwrap();
    let run0 = &mut v5["missing"][0];
    run0["given_up"] = serde_json::json!(true);
    run0.as_object_mut().unwrap().remove("keys");
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    store
        .commit_round(
            "a",
            &[],
            &[PartitionProgress {
                topic: "t".into(),
                partition: 0,
                settled: 5,
                ledger: serde_json::json!({}),
                updated_at: chrono::Utc::now(),
                items: None,
            }],
        )
        .unwrap();
    drop(store);
    {
        // Back to v5: the whole ledger in `progress.ledger`, no items table.
        let conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        conn.execute_batch(
            "DROP TABLE ledger_items;
             DROP TABLE key_log;
             DROP TABLE key_chunks;
             CREATE TABLE key_book (audit TEXT NOT NULL, key BLOB NOT NULL,
                 confirmed INTEGER NOT NULL, PRIMARY KEY (audit, key)) WITHOUT ROWID;",
        )
        .unwrap();
        conn.execute("UPDATE progress SET ledger = ?1", [v5.to_string()])
            .unwrap();
        conn.pragma_update(None, "user_version", 5).unwrap();
    }
    let load = |store: &Store| -> (Offset, Snapshot) {
        let p = store.load_progress("a").unwrap().pop().unwrap();
        (p.settled, serde_json::from_value(p.ledger).unwrap())
    };
    let store = Store::open(dir.path()).unwrap();
    let (settled, snap) = load(&store);
    assert_eq!(snap.missing.len(), 2, "both runs migrated");
    let mut back = PartitionLedger::restore(settled, true, snap);
    assert_eq!(back.missing(), 3, "given-up records stay missing");
    assert_eq!(
        back.missing_runs(),
        vec![r(3, 3)],
        "only the followed run is kept"
    );
    assert_eq!(back.missing_keys().count(), 1);
    // The first write after the restart, as the daemon does it (a delta).
    let d = back.delta();
    assert!(!d.replace);
    assert!(
        d.missing.contains(&(0, None)),
        "the stale run is deleted: {:?}",
        d.missing
    );
    let to_items = |v: Vec<(Offset, Option<String>)>| v;
    let items = crate::store::LedgerItems {
        missing: to_items(
            d.missing
                .iter()
                .map(|(f, m)| (*f, m.as_ref().map(|m| serde_json::to_string(m).unwrap())))
                .collect(),
        ),
        gaps: d
            .gaps
            .iter()
            .map(|(f, g)| (*f, g.as_ref().map(|g| serde_json::to_string(g).unwrap())))
            .collect(),
    };
    store
        .commit_round(
            "a",
            &[],
            &[PartitionProgress {
                topic: "t".into(),
                partition: 0,
                settled: back.settled(),
                ledger: serde_json::json!({ "tail_gap": d.tail_gap }),
                updated_at: chrono::Utc::now(),
                items: Some(items),
            }],
        )
        .unwrap();
    back.stored();
    let (settled, snap) = load(&store);
    assert_eq!(snap, back.snapshot(), "the store holds the ledger");
    let again = PartitionLedger::restore(settled, true, snap);
    assert_eq!(again.missing(), 3);
    assert_eq!(again.missing_runs(), vec![r(3, 3)]);
}

/// One re-check pass as `Checker::recheck_ledger` does it for offset_columns, against a sink
/// holding exactly `sink` (distinct offsets), with `budget`.
fn probe_round(l: &mut PartitionLedger, sink: &BTreeSet<Offset>, budget: RecheckBudget) {
    if !l.look_in_progress() {
        let Some(p) = l.probe() else { return };
        let distinct = sink.range(p.span.first..=p.span.last).count() as u64;
        if !l.probe_answered(distinct) {
            return;
        }
    }
    let c = l.rechecks(budget);
    let v = oracle(&c, sink);
    l.apply_rechecks(&c, &v);
}

/// Review (limitation of the probe): a row deleted from the sink inside the missing span
/// (an operator's DELETE, a Doris partition dropped by TTL, an upsert table moving a
/// business key's row to a newer offset) while a missing record lands late leaves the
/// span's distinct count equal to the baseline: no look ever starts and the late arrival
/// stays reported missing until it is given up. The old code re-checked every run; now a
/// look is forced every [`partition::FORCE_LOOK_EVERY`] unchanged probes.
#[test]
fn review_a_late_arrival_is_found_even_when_a_row_of_the_span_was_deleted() {
    let mut l = PartitionLedger::new(0, false);
    for o in 0..10 {
        l.ingest(o, None, exp(), 0);
    }
    l.pipeline.observe(0, Some(10));
    let mut sink: BTreeSet<Offset> = [0, 1, 3, 4, 5, 6, 8, 9].into();
    let segs = l.due(GRACE, GRACE, 100);
    l.apply(&oracle(&segs, &sink), GRACE);
    l.take_dirty_gaps();
    assert_eq!(l.missing_runs(), vec![r(2, 2), r(7, 7)]);
    probe_round(&mut l, &sink, RecheckBudget::UNLIMITED);
    // Row 4 is deleted, record 7 lands late.
    sink.remove(&4);
    sink.insert(7);
    for _ in 0..=partition::FORCE_LOOK_EVERY {
        probe_round(&mut l, &sink, RecheckBudget::UNLIMITED);
    }
    assert_eq!(l.missing_runs(), vec![r(2, 2)], "record 7 is in the sink");
}

/// Review (liveness of the look): while new missing runs arrive faster than the per-round
/// runs budget (every second record lost at more than 2 × 4,096 records per partition per
/// round), a look that ran to the LAST run never completed and no new look started: a
/// record landing late in a run the rotation had passed was never seen again while the
/// incident lasted (and was given up after `give_up_after`). A rotation now ends at the
/// records missing when it started.
#[test]
fn review_a_late_arrival_behind_the_rotation_is_found_while_runs_keep_coming() {
    let mut l = PartitionLedger::new(0, false);
    let mut sink: BTreeSet<Offset> = BTreeSet::new();
    let budget = RecheckBudget {
        runs: 2,
        records: u64::MAX,
    };
    let mut next = 0;
    for round in 0..200i64 {
        let now = round * 10 * GRACE;
        // Six records a round, every second one lost: three new one-record gaps.
        for o in next..next + 6 {
            l.ingest(o, None, exp(), now);
            if o % 2 == 0 {
                sink.insert(o);
            }
        }
        next += 6;
        l.pipeline.observe(now, Some(next));
        let segs = l.due(now + GRACE, GRACE, 1_000);
        l.apply(&oracle(&segs, &sink), now + GRACE);
        l.take_dirty_gaps();
        // Record 1 lands in round 2 (a look starts and finds it); record 3 in round 5,
        // after the look's rotation passed it.
        if round == 2 {
            sink.insert(1);
        }
        if round == 5 {
            sink.insert(3);
        }
        probe_round(&mut l, &sink, budget);
    }
    assert!(!l.missing_runs().contains(&r(1, 1)), "found by the look");
    assert!(
        !l.missing_runs().contains(&r(3, 3)),
        "record 3 has been in the sink for 195 rounds"
    );
}

/// Review (found by the probe property with an `AckThrough`): an acknowledgement of a gap's
/// head whose run spans the acknowledged end gave the head up while the rest was out of the
/// missing runs, which emptied them for a moment and dropped the probe; the rest went back
/// without one, so a record of it landing late was never looked for (offset_columns): it
/// stayed reported missing.
#[test]
fn review_an_acknowledged_head_keeps_the_probe_over_the_rest() {
    let mut l = PartitionLedger::new(0, false);
    for o in 0..5 {
        l.ingest(o, None, exp(), 0);
    }
    l.pipeline.observe(0, Some(5));
    let segs = l.due(GRACE, GRACE, 100);
    let mut sink: BTreeSet<Offset> = BTreeSet::new();
    l.apply(&oracle(&segs, &sink), GRACE);
    l.take_dirty_gaps();
    assert_eq!(l.missing_runs(), vec![r(0, 4)]);
    // The ack was given when the gap held offset 0 only.
    assert!(l.acknowledge_through(0, 0));
    assert_eq!(l.missing_runs(), vec![r(1, 4)]);
    assert!(l.probe().is_some(), "the rest has a probe");
    // Offset 3 lands late: found within a few smallest-budget rounds.
    sink.insert(3);
    let budget = RecheckBudget {
        runs: 1,
        records: 1,
    };
    for _ in 0..10 {
        probe_round(&mut l, &sink, budget);
    }
    assert_eq!(l.missing_runs(), vec![r(1, 2), r(4, 4)]);
}
