use super::*;
use crate::gap::GapState;
use chrono::TimeZone;

const AUDIT: &str = "dns";

fn tp() -> TopicPartition {
    TopicPartition::new("logs", 3)
}

fn gap(first: Offset, state: GapState) -> Gap {
    Gap {
        id: Gap::make_id(AUDIT, "logs", 3, first),
        audit: AUDIT.into(),
        topic: "logs".into(),
        partition: 3,
        first_offset: first,
        last_offset: first,
        missing_records: 1,
        size_known: true,
        first_timestamp: None,
        last_timestamp: None,
        detected_at: Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
        state,
        unrecoverable_at: None,
        cause: crate::gap::GapCause::DroppedInFlight,
        pipeline_commit_from: None,
        pipeline_commit_to: None,
        pipeline_commit_at: None,
        shared_key: false,
        replayed_at: None,
        ack_reason: None,
    }
}

fn run(first: Offset) -> serde_json::Value {
    serde_json::json!({"run": {"first": first, "last": first}, "gap": first, "detected_ms": 1})
}

fn lgap(first: Offset) -> serde_json::Value {
    serde_json::json!({"first": first, "last": first, "missing": 1})
}

/// A whole state with `n` gaps at 10, 20, …, each with a missing run and a ledger gap.
fn whole(settled: Offset, n: i64) -> PartitionState {
    let firsts: Vec<Offset> = (1..=n).map(|i| i * 10).collect();
    PartitionState {
        version: VERSION,
        audit: AUDIT.into(),
        topic: "logs".into(),
        partition: 3,
        settled,
        ledger: serde_json::json!({
            "tail_gap": null,
            "epoch": 2,
            "missing": firsts.iter().map(|f| run(*f)).collect::<Vec<_>>(),
            "gaps": firsts.iter().map(|f| lgap(*f)).collect::<Vec<_>>(),
        }),
        gaps: firsts.iter().map(|f| gap(*f, GapState::Open)).collect(),
        replayed: vec![Gap::make_id(AUDIT, "logs", 3, 10)],
        retired: vec![Gap::make_id(AUDIT, "logs", 3, 20)],
        key_claims: Vec::new(),
        generation: 0,
        base: None,
        removed: Vec::new(),
        claims_kept: false,
        written_at: Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
        owner: "a:1".into(),
    }
}

/// A delta at `settled` with nothing changed but the head.
fn idle(settled: Offset) -> PartitionState {
    PartitionState {
        ledger: serde_json::json!({"tail_gap": null, "epoch": 2}),
        gaps: Vec::new(),
        replayed: Vec::new(),
        retired: Vec::new(),
        base: Some(0),
        ..whole(settled, 0)
    }
}

fn firsts(v: &serde_json::Value, field: &str) -> Vec<Offset> {
    v[field]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| item_first(i).unwrap())
        .collect()
}

#[test]
fn a_delta_replaces_the_head_and_the_items_it_names_only() {
    let mut d = idle(100);
    d.ledger = serde_json::json!({
        "tail_gap": 95,
        "missing": [run(30), run(50)],
        "missing_removed": [10],
        "gaps": [lgap(50)],
        "gaps_removed": [10],
    });
    // Gap 10 resolved (dropped), 30 acknowledged, 50 new and replayed.
    d.gaps = vec![gap(30, GapState::Acknowledged), gap(50, GapState::Open)];
    d.removed = vec![Gap::make_id(AUDIT, "logs", 3, 10)];
    d.replayed = vec![Gap::make_id(AUDIT, "logs", 3, 50)];
    d.generation = 7;
    let s = apply(whole(90, 3), d);
    assert_eq!((s.settled, s.generation, s.base), (100, 7, None));
    assert_eq!(s.ledger["tail_gap"], serde_json::json!(95));
    assert!(s.ledger.get("epoch").is_none(), "the head is the delta's");
    assert_eq!(firsts(&s.ledger, "missing"), vec![20, 30, 50]);
    assert_eq!(firsts(&s.ledger, "gaps"), vec![20, 30, 50]);
    let gaps: Vec<(Offset, GapState)> = s.gaps.iter().map(|g| (g.first_offset, g.state)).collect();
    assert_eq!(
        gaps,
        vec![
            (20, GapState::Open),
            (30, GapState::Acknowledged),
            (50, GapState::Open)
        ]
    );
    assert_eq!(s.replayed, vec![Gap::make_id(AUDIT, "logs", 3, 50)]);
    assert_eq!(
        s.retired,
        vec![Gap::make_id(AUDIT, "logs", 3, 20)],
        "untouched"
    );
}

#[test]
fn a_gap_named_again_takes_its_new_marks_only() {
    let mut d = idle(100);
    // Gap 20 given up: retired, no longer replayed; gap 10 named again without marks.
    let mut g20 = gap(20, GapState::Unrecoverable);
    g20.missing_records = 1;
    d.gaps = vec![gap(10, GapState::Open), g20];
    d.retired = vec![Gap::make_id(AUDIT, "logs", 3, 20)];
    let s = apply(whole(90, 2), d);
    assert!(s.replayed.is_empty(), "{:?}", s.replayed);
    assert_eq!(s.retired, vec![Gap::make_id(AUDIT, "logs", 3, 20)]);
    assert_eq!(s.gaps[1].state, GapState::Unrecoverable);
}

#[test]
fn a_replacing_delta_drops_the_ledger_items_it_does_not_name() {
    let mut d = idle(100);
    d.ledger = serde_json::json!({"tail_gap": null, "replace": true, "missing": [run(30)], "gaps": [lgap(30)]});
    let s = apply(whole(90, 3), d);
    assert_eq!(firsts(&s.ledger, "missing"), vec![30]);
    assert_eq!(firsts(&s.ledger, "gaps"), vec![30]);
    assert!(s.ledger.get("replace").is_none());
    assert_eq!(s.gaps.len(), 3, "reported gaps are not the ledger's");
}

// ------------------------------------------------------------- on the log

type Log = Vec<(i32, Vec<u8>, Option<Vec<u8>>)>;

fn records(doc: &PartitionState, limit: usize, set: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    let base = key(AUDIT, &tp());
    let record = match doc.base {
        Some(_) => delta_key(&base, doc.generation),
        None => base.clone(),
    };
    let slots = match doc.base {
        Some(_) => Slots {
            latest: None,
            written: [0, 0],
            single_live: false,
        },
        None => Slots::default(),
    };
    plan(&encode(doc), &record, &slots, limit, set)
        .expect("room")
        .records
}

fn write(log: &mut Log, doc: &PartitionState, limit: usize) {
    let set = format!("s{}", log.len());
    log.extend(
        records(doc, limit, &set)
            .into_iter()
            .map(|(k, v)| (0, k, Some(v))),
    );
}

fn read(log: &Log) -> (Option<PartitionState>, Chain) {
    let mut r = Reassembler::new(AUDIT, &[tp()]);
    for (p, k, v) in log {
        r.push(*p, k, v.as_deref());
    }
    let (mut states, _, mut chains) = r.finish();
    (
        states.remove(&tp()),
        chains.remove(&key(AUDIT, &tp())).unwrap_or_default(),
    )
}

fn at(mut s: PartitionState, generation: u64, base: Option<u64>) -> PartitionState {
    s.generation = generation;
    s.base = base;
    s
}

fn delta_with_gap(settled: Offset, first: Offset) -> PartitionState {
    let mut d = idle(settled);
    d.ledger =
        serde_json::json!({"tail_gap": null, "missing": [run(first)], "gaps": [lgap(first)]});
    d.gaps = vec![gap(first, GapState::Open)];
    d
}

#[test]
fn the_reader_applies_every_complete_delta_of_the_latest_base_in_order() {
    let mut log = Log::new();
    let b = at(whole(90, 2), 1, None);
    write(&mut log, &b, 100_000);
    let d2 = at(delta_with_gap(100, 30), 2, Some(1));
    let d3 = at(idle(110), 3, Some(1));
    write(&mut log, &d2, 100_000);
    write(&mut log, &d3, 100_000);
    let want = apply(apply(b.clone(), d2.clone()), d3.clone());
    let (got, chain) = read(&log);
    assert_eq!(got.as_ref(), Some(&want));
    assert_eq!(
        (want.settled, want.generation, want.gaps.len()),
        (110, 3, 3)
    );
    assert!(chain.live && chain.base == 1);
    assert_eq!(
        chain.deltas.iter().map(|(g, _)| *g).collect::<Vec<_>>(),
        vec![2, 3]
    );
}

#[test]
fn a_delta_cut_short_by_a_crash_is_never_taken_the_state_before_it_is() {
    let mut log = Log::new();
    let b = at(whole(90, 2), 1, None);
    write(&mut log, &b, 100_000);
    // A delta of 2,000 new gaps, chunked at a 20 kB limit, cut after its first chunk.
    let mut big = idle(500);
    let firsts: Vec<Offset> = (0..2000).map(|i| 1000 + i).collect();
    big.ledger = serde_json::json!({"tail_gap": null, "missing": firsts.iter().map(|f| run(*f)).collect::<Vec<_>>()});
    big.gaps = firsts.iter().map(|f| gap(*f, GapState::Open)).collect();
    let big = at(big, 2, Some(1));
    let recs = records(&big, 20_000, "crashed");
    assert!(recs.len() > 2, "chunked: {}", recs.len());
    log.push((0, recs[0].0.clone(), Some(recs[0].1.clone())));
    assert_eq!(read(&log).0, Some(b.clone()), "the base alone");
    // The next publish (the same changes, under the next generation) completes.
    let big3 = at(big.clone(), 3, Some(1));
    write(&mut log, &big3, 20_000);
    assert_eq!(read(&log).0, Some(apply(b, big3)));
}

#[test]
fn deltas_of_an_older_base_are_skipped() {
    let mut log = Log::new();
    write(&mut log, &at(whole(90, 2), 1, None), 100_000);
    write(&mut log, &at(delta_with_gap(100, 30), 2, Some(1)), 100_000);
    // A new base (generation 3) whose old deltas were not deleted yet, then a stale delta
    // naming base 1 and a delta of the new base.
    let b3 = at(whole(120, 1), 3, None);
    write(&mut log, &b3, 100_000);
    write(&mut log, &at(delta_with_gap(130, 40), 4, Some(1)), 100_000);
    let d5 = at(idle(140), 5, Some(3));
    write(&mut log, &d5, 100_000);
    let (got, chain) = read(&log);
    assert_eq!(got, Some(apply(b3, d5)));
    assert_eq!(chain.base, 3);
    assert_eq!(
        chain.deltas.len(),
        3,
        "every delta key is known, to be deleted"
    );
}

#[test]
fn version_2_keys_are_not_taken_for_version_1_chunks() {
    // An older reader's key parser (2 NULs: single, 4: chunk with a numeric slot) finds
    // no slot in `d`: it skips deltas rather than misreading them.
    let k = delta_key(&key(AUDIT, &tp()), 12);
    let nuls = k.iter().filter(|b| **b == 0).count();
    assert_eq!(nuls, 4);
    let third = k.split(|b| *b == 0).nth(3).unwrap();
    assert!(std::str::from_utf8(third).unwrap().parse::<u8>().is_err());
}

#[test]
fn a_new_base_is_wanted_when_none_is_known_or_the_deltas_outweigh_it() {
    let mut c = Chain::default();
    assert!(c.wants_base(), "nothing known");
    c.live = true;
    c.base_bytes = 10 * REBASE_MIN_BYTES;
    c.delta_bytes = 10 * REBASE_MIN_BYTES;
    assert!(!c.wants_base());
    c.delta_bytes += 1;
    assert!(c.wants_base());
    c.rebase_after = 20 * REBASE_MIN_BYTES;
    assert!(
        !c.wants_base(),
        "after a failed base: not before the deltas doubled"
    );
    let small = Chain {
        live: true,
        base_bytes: 100,
        delta_bytes: REBASE_MIN_BYTES,
        ..Chain::default()
    };
    assert!(!small.wants_base(), "deltas below the floor never rebase");
}

#[test]
fn a_delta_keeps_the_key_claims_it_does_not_repeat() {
    let mut b = whole(90, 1);
    b.key_claims = vec![(vec!["10.0.0.1".into()], 2)];
    let kept = PartitionState {
        claims_kept: true,
        ..idle(100)
    };
    let s = apply(b.clone(), kept);
    assert_eq!(s.key_claims, b.key_claims);
    assert!(!s.claims_kept);
    let changed = PartitionState {
        key_claims: vec![(vec!["10.0.0.2".into()], 1)],
        ..idle(110)
    };
    assert_eq!(
        apply(s, changed).key_claims,
        vec![(vec!["10.0.0.2".to_string()], 1)]
    );
}

/// Thousands of deltas on a large base rebuild in time proportional to their size, not
/// to the base's size times their number.
#[test]
fn many_deltas_on_a_large_base_rebuild_quickly() {
    let mut log = Log::new();
    write(&mut log, &at(whole(90, 20_000), 1, None), 1_000_000);
    for g in 2..5_002u64 {
        write(&mut log, &at(idle(100 + g as i64), g, Some(1)), 1_000_000);
    }
    let t = std::time::Instant::now();
    let (got, chain) = read(&log);
    let got = got.expect("state");
    assert_eq!((got.generation, got.gaps.len()), (5_001, 20_000));
    assert_eq!(chain.deltas.len(), 5_000);
    assert!(
        t.elapsed() < std::time::Duration::from_secs(20),
        "{:?}",
        t.elapsed()
    );
}

/// During an upgrade an older binary may write a version-1 base over a version-2 chain,
/// its generation counted from what it could read: deltas never apply to it.
#[test]
fn a_version_1_base_takes_no_deltas() {
    let mut log = Log::new();
    write(&mut log, &at(whole(90, 2), 1, None), 100_000);
    write(&mut log, &at(delta_with_gap(100, 30), 2, Some(1)), 100_000);
    let v1 = PartitionState {
        version: 1,
        ..at(whole(95, 1), 1, None)
    };
    write(&mut log, &v1, 100_000);
    let (got, chain) = read(&log);
    assert_eq!(got, Some(v1));
    assert!(
        chain.wants_base(),
        "deltas would not apply to it: a base next"
    );
}
