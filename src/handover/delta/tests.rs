use super::*;
use crate::gap::GapState;
use crate::handover::VERSION;
use crate::handover::codec::{delta_key, encode, key};
use crate::handover::publish::{plan, policy_warning};
use crate::handover::read::Reassembler;
use crate::types::TopicPartition;
use chrono::{TimeZone, Utc};

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
        evidence: None,
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
        retired_gaps: None,
        key_claims: Vec::new(),
        generation: 0,
        base: None,
        base_id: None,
        prev: None,
        term: 0,
        removed: Vec::new(),
        claims_kept: false,
        written_at: Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
        owner: "a:1".into(),
        owner_url: None,
    }
}

/// A delta at `settled` with nothing changed but the head.
fn idle(settled: Offset) -> PartitionState {
    PartitionState {
        ledger: serde_json::json!({"tail_gap": null, "epoch": 2}),
        gaps: Vec::new(),
        replayed: Vec::new(),
        retired: Vec::new(),
        retired_gaps: None,
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
        Some(_) => delta_key(&base, doc.generation, doc.base_id.as_deref().unwrap_or("")),
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
    let (s, chain, _) = read_why(log);
    (s, chain)
}

/// As [`read`], with why the partition's state was not usable, if it was not.
fn read_why(log: &Log) -> (Option<PartitionState>, Chain, Option<String>) {
    let mut r = Reassembler::new(AUDIT, &[tp()]);
    for (p, k, v) in log {
        r.push(*p, k, v.as_deref());
    }
    let (mut states, _, mut chains, mut unusable) = r.finish();
    (
        states.remove(&tp()),
        chains.remove(&key(AUDIT, &tp())).unwrap_or_default(),
        unusable.remove(&tp()),
    )
}

/// `s` as published at `generation`: a base (`base` `None`, id `b{generation}`) or a delta
/// on the base of generation `base` (id `b{base}`), built on the generation before it.
fn at(mut s: PartitionState, generation: u64, base: Option<u64>) -> PartitionState {
    s.generation = generation;
    s.base = base;
    s.base_id = Some(format!("b{}", base.unwrap_or(generation)));
    s.prev = base.map(|_| generation - 1);
    s
}

/// `s` built on generation `prev`.
fn on(mut s: PartitionState, prev: u64) -> PartitionState {
    s.prev = Some(prev);
    s
}

/// `s` written under ownership term `term`.
fn term(mut s: PartitionState, term: u64) -> PartitionState {
    s.term = term;
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
    // Known, not continued: the next owner starts a chain of its own.
    assert!(!chain.live && chain.base == 1);
    assert_eq!(
        chain
            .deltas
            .iter()
            .map(|((g, _), _)| *g)
            .collect::<Vec<_>>(),
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
    let big3 = on(at(big.clone(), 3, Some(1)), 1);
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
    let d5 = on(at(idle(140), 5, Some(3)), 3);
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
    let k = delta_key(&key(AUDIT, &tp()), 12, "h:1/17/0");
    let nuls = k.iter().filter(|b| **b == 0).count();
    assert_eq!(nuls, 4);
    let third = k.split(|b| *b == 0).nth(3).unwrap();
    assert!(std::str::from_utf8(third).unwrap().parse::<u8>().is_err());
}

#[test]
fn a_new_base_is_wanted_when_none_is_known_or_the_deltas_outweigh_it() {
    let now = std::time::Instant::now();
    let mut c = Chain::default();
    assert!(c.wants_base(now, false), "nothing known");
    c.base_confirmed(1, "b1", 10 * REBASE_MIN_BYTES, now);
    assert!(!c.wants_base(now, false));
    c.delta_confirmed(2, 10 * REBASE_MIN_BYTES);
    assert!(!c.wants_base(now, false));
    c.delta_confirmed(3, 1);
    assert!(c.wants_base(now, false), "the deltas outweigh the base");
    let small = Chain {
        live: true,
        base_bytes: 100,
        delta_bytes: REBASE_MIN_BYTES,
        based_at: Some(now),
        ..Chain::default()
    };
    assert!(
        !small.wants_base(now, false),
        "deltas below the floor never rebase"
    );
}

/// The slow timer: a chain that took deltas gets a new base after [`REBASE_EVERY`]; one
/// that took none (nothing changed) does not.
#[test]
fn a_chain_that_took_deltas_is_rebased_after_rebase_every() {
    let t0 = std::time::Instant::now();
    let mut c = Chain::default();
    c.base_confirmed(1, "b1", 50 << 20, t0);
    let later = t0 + REBASE_EVERY;
    assert!(!c.wants_base(later, true), "no delta since the base");
    c.delta_confirmed(2, 300);
    assert!(!c.wants_base(t0 + REBASE_EVERY / 2, true));
    assert!(c.wants_base(later, true));
}

/// Review item 3: on a compacted-only topic the base stays for ever, so no timer: an idle
/// round an hour on sends a small delta, never the whole state again (tens of MB at
/// 100,000 open gaps); the size rule still holds.
#[test]
fn a_compacted_topic_never_rebases_on_the_timer() {
    let t0 = std::time::Instant::now();
    let mut c = Chain::default();
    c.base_confirmed(1, "b1", 50 << 20, t0);
    c.delta_confirmed(2, 300);
    let much_later = t0 + 24 * REBASE_EVERY;
    assert!(
        !c.wants_base(much_later, false),
        "a compacted topic keeps its base: no whole state on an idle round"
    );
    c.delta_confirmed(3, 51 << 20);
    assert!(c.wants_base(t0, false), "the size rule stays");
}

/// Point 4: a base reported failed may have landed. Deltas on the old base would then be
/// skipped by every reader (the state frozen at the landed base): the next publish is a
/// base again, under a new id, whatever the deltas weigh.
#[test]
fn after_a_failed_base_the_next_publish_is_a_base() {
    let now = std::time::Instant::now();
    let mut c = Chain::default();
    c.base_confirmed(1, "b1", 50 << 20, now);
    c.delta_confirmed(2, 300);
    assert!(!c.wants_base(now, false));
    c.base_failed();
    assert!(
        c.wants_base(now, false),
        "never deltas on a base no reader may hold"
    );
    // And the reader's side: a landed base of the failure takes no delta of the old base,
    // nor any of its own id but the writer's (none were written).
    let mut log = Log::new();
    let b1 = at(whole(90, 2), 1, None);
    write(&mut log, &b1, 100_000);
    let landed = at(whole(95, 2), 3, None);
    write(&mut log, &landed, 100_000);
    write(&mut log, &at(delta_with_gap(100, 30), 4, Some(1)), 100_000);
    assert_eq!(
        read(&log).0,
        Some(landed),
        "frozen if deltas went on naming b1"
    );
}

/// Point 1: a writer that could not read the topic starts over at generation 1 with a new
/// base; another owner's deltas of a base of generation 1 are left on the topic. They name
/// another base id: never applied to the new base.
#[test]
fn a_new_base_with_a_reused_generation_adopts_no_leftover_delta() {
    let mut log = Log::new();
    let mut old = at(whole(90, 2), 1, None);
    old.base_id = Some("x:1/aa/0".into());
    write(&mut log, &old, 100_000);
    let mut d2 = at(delta_with_gap(100, 30), 2, Some(1));
    d2.base_id = old.base_id.clone();
    write(&mut log, &d2, 100_000);
    // The new owner's base: generation 1 again, its own id, fewer gaps.
    let mut new = at(whole(80, 1), 1, None);
    new.base_id = Some("y:2/bb/0".into());
    write(&mut log, &new, 100_000);
    let (got, chain) = read(&log);
    assert_eq!(
        got,
        Some(new),
        "the leftover delta 2 of base x is not applied"
    );
    assert_eq!(
        chain.deltas.len(),
        1,
        "known, to be deleted with the next base"
    );
}

/// Point 2: a zombie owner (term 1) writes a delta of the same generation as the new owner
/// (term 2) on its own base: it lands under its own key and replaces nothing; the new
/// owner's chain reads whole. And if the zombie writes a base over the new owner's, the
/// new owner's later records (a higher term) make the state unusable: never the zombie's.
#[test]
fn a_zombie_owner_never_replaces_the_new_owners_state() {
    let mut log = Log::new();
    let z = term(at(whole(90, 2), 1, None), 1);
    write(&mut log, &z, 100_000);
    write(&mut log, &term(at(idle(95), 2, Some(1)), 1), 100_000);
    // The new owner read generations up to 2 and term 1: base 3, term 2.
    let n = term(at(whole(100, 3), 3, None), 2);
    write(&mut log, &n, 100_000);
    let n4 = term(at(delta_with_gap(110, 40), 4, Some(3)), 2);
    write(&mut log, &n4, 100_000);
    // The zombie's revoke publish: generation 4 too (its own count), on its base b1.
    write(&mut log, &on(term(at(idle(96), 4, Some(1)), 1), 2), 100_000);
    let n5 = term(at(idle(120), 5, Some(3)), 2);
    write(&mut log, &n5, 100_000);
    let want = apply(apply(n.clone(), n4.clone()), n5.clone());
    assert_eq!(read(&log).0, Some(want));
    // The zombie rebases over the new owner's base key.
    write(&mut log, &term(at(whole(97, 2), 6, None), 1), 100_000);
    let (got, _, why) = read_why(&log);
    assert_eq!(got, None, "not the zombie's state");
    assert!(why.expect("unusable").contains("term 2"));
}

/// An unreadable delta of the chain is never skipped: later deltas would apply over a hole.
#[test]
fn an_unreadable_delta_mid_chain_makes_the_state_unusable() {
    let mut log = Log::new();
    let b = at(whole(90, 2), 1, None);
    write(&mut log, &b, 100_000);
    write(&mut log, &at(delta_with_gap(100, 30), 2, Some(1)), 100_000);
    let n = log.len();
    write(&mut log, &at(delta_with_gap(110, 40), 3, Some(1)), 100_000);
    write(&mut log, &at(idle(120), 4, Some(1)), 100_000);
    assert!(read(&log).0.is_some());
    let (_, _, v) = &mut log[n];
    *v = Some(b"{not json".to_vec());
    let (got, chain, why) = read_why(&log);
    assert_eq!(got, None, "not the base with deltas 2 and 4 over the hole");
    assert!(why.expect("unusable").contains("does not decode"));
    assert!(chain.wants_base(std::time::Instant::now(), false));
}

/// A delta built on a generation the chain does not hold (lost: its records deleted, or a
/// crash cut it short and the writer went on as if it had landed) is a hole.
#[test]
fn a_delta_built_on_a_generation_the_chain_lacks_makes_the_state_unusable() {
    let mut log = Log::new();
    write(&mut log, &at(whole(90, 2), 1, None), 100_000);
    write(&mut log, &at(delta_with_gap(100, 30), 2, Some(1)), 100_000);
    write(&mut log, &at(idle(110), 4, Some(1)), 100_000);
    let (got, _, why) = read_why(&log);
    assert_eq!(got, None);
    assert!(why.expect("unusable").contains("generation Some(3)"));
}

/// A delta whose publish failed (landed or not) is followed by one built on the last
/// acknowledged generation with every change since: both orders read the same state.
#[test]
fn a_failed_delta_landed_or_not_is_covered_by_the_next() {
    let mut log = Log::new();
    let b = at(whole(90, 2), 1, None);
    write(&mut log, &b, 100_000);
    let d2 = at(delta_with_gap(100, 30), 2, Some(1));
    let mut d3 = on(at(delta_with_gap(110, 30), 3, Some(1)), 1);
    d3.gaps[0].state = crate::gap::GapState::Acknowledged;
    let mut without = log.clone();
    write(&mut log, &d2, 100_000);
    write(&mut log, &d3, 100_000);
    write(&mut without, &d3, 100_000);
    assert_eq!(read(&log).0, read(&without).0);
    assert_eq!(read(&log).0, Some(apply(b, d3)));
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
        chain.wants_base(std::time::Instant::now(), false),
        "deltas would not apply to it: a base next"
    );
}

/// A topic that deletes by retention is named with its policy and the config key; a
/// compacted-only one is not.
#[test]
fn a_handover_topic_that_deletes_by_retention_is_warned_about() {
    use crate::kafka::retention::Retention;
    let r = |policy: &str| {
        Retention::from_entries([
            ("cleanup.policy", Some(policy)),
            ("retention.ms", Some("3600000")),
        ])
    };
    assert_eq!(policy_warning("h", &r("compact")), None);
    let w = policy_warning("h", &r("delete")).expect("warned");
    assert!(
        w.contains("state.handover_topic") && w.contains("cleanup.policy=delete"),
        "{w}"
    );
    assert!(w.contains("3600000 ms"), "{w}");
    let w = policy_warning("h", &r("compact,delete")).expect("warned");
    assert!(w.contains("cleanup.policy=compact,delete"), "{w}");
}
