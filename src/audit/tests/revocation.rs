//! Revocation: the settled offset goes back to the tail once stored; gauges leave with the
//! partition, counters stay.

use super::harness::*;

/// A handover client of topic `unread` on a broker nothing answers at (127.0.0.1:1): its
/// reads fail (after librdkafka's timeouts), its publishes never complete.
fn unreachable_handover() -> crate::handover::Handover {
    let k = crate::config::KafkaConfig {
        brokers: "127.0.0.1:1".into(),
        ..Default::default()
    };
    crate::handover::Handover::new(&k, "unread").expect("handover client")
}

#[tokio::test]
async fn a_revoked_partition_hands_back_its_stored_settled_offset() {
    let mut h = harness("");
    h.assign_and_read((0, 0), expected(0..6)).await;
    h.in_sink(0..6);
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert!(h.families.render().contains("gap_auditor_records_pending{"));
    let out = h.audit.revoke(&[tp(0)]).await;
    assert_eq!(out, vec![(tp(0), 6)]);
    assert!(h.audit.parts.is_empty());
    let page = h.families.render();
    assert!(!page.contains("gap_auditor_records_pending{"), "{page}");
    assert!(!page.contains("gap_auditor_settled_offset{"), "{page}");
    assert_eq!(h.counter(|m| &m.records_confirmed), 6, "counters stay");
    assert_eq!(
        h.store.load_progress(AUDIT).expect("progress")[0].settled,
        6
    );
}

#[tokio::test]
async fn a_revoke_whose_store_write_fails_hands_back_nothing_and_counts_nothing() {
    let mut h = harness("");
    h.assign_and_read((0, 0), expected(0..6)).await;
    h.in_sink(0..3);
    h.break_store();
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    let out = h.audit.revoke(&[tp(0)]).await;
    // The next owner resumes from what Kafka holds and decides these records again.
    assert!(out.is_empty(), "{out:?}");
    assert!(
        h.audit.persisting.writes.verdicts.is_empty(),
        "its verdicts are the next owner's to count"
    );
    h.heal_store();
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_lost), 0);
    assert_eq!(h.counter(|m| &m.records_confirmed), 0);
}

#[tokio::test]
async fn a_partition_assigned_again_resumes_at_its_stored_offset() {
    let mut h = harness("");
    h.assign_and_read((0, 0), expected(0..6)).await;
    h.in_sink(0..6);
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    h.audit.revoke(&[tp(0)]).await;
    h.kafka
        .watermarks
        .lock()
        .expect("lock")
        .insert(tp(0), (0, 20));
    let starts = h.audit.assign(vec![tp(0)]).await;
    assert_eq!(starts, vec![(tp(0), 6)], "the store wins over the log end");
}

/// Issue 41 item 3, point 3: an acknowledgement given after the last round and before a
/// revoke goes with the revoke's write (and so with its handover publish): the stored
/// ledger no longer holds the gap. Before, revoke wrote the ledger as the last round left
/// it, and the next owner took the acknowledged gap back as open.
#[tokio::test]
async fn an_ack_given_just_before_a_revoke_goes_with_it() {
    let mut h = harness("");
    h.assign_and_read((0, 0), expected(0..5)).await;
    h.in_sink(0..2);
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    let gaps = h.stored_gaps();
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    let ledger_gaps = |h: &Harness| -> usize {
        let p = h.store.load_progress(AUDIT).expect("progress");
        p[0].ledger["gaps"].as_array().map_or(0, Vec::len)
    };
    assert_eq!(ledger_gaps(&h), 1);
    assert!(h.store.ack(&gaps[0].id, "known").expect("ack"));
    let out = h.audit.revoke(&[tp(0)]).await;
    assert_eq!(out, vec![(tp(0), 5)]);
    assert_eq!(
        ledger_gaps(&h),
        0,
        "the acknowledged gap left the ledger the revoke stored and handed over"
    );
}

/// Point 2: a revocation the consumer reports as a lost assignment (another member may own
/// the partitions already) hands back no offset to commit.
#[tokio::test]
async fn a_lost_assignment_commits_nothing() {
    let mut h = harness("");
    h.assign_and_read((0, 0), expected(0..6)).await;
    h.in_sink(0..6);
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    let out = h.audit.revoke_as(&[tp(0)], true).await;
    assert!(out.is_empty(), "{out:?}");
    assert!(h.audit.parts.is_empty());
    assert!(
        h.audit.handover.lost.is_empty(),
        "forgotten with the partition"
    );
}

/// Review item 1 (the audit's side): a partition whose handover read failed at assignment
/// is audited (verdicts go on) but neither handed over nor committed, not even at its
/// revoke, until a read succeeds (retried every round): a newer owner may have written a
/// higher term this instance does not know. Here no broker answers at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_whose_handover_read_failed_is_neither_committed_nor_handed_back() {
    let mut h = harness("");
    let client = unreachable_handover();
    h.audit.handover.link = Some(std::sync::Arc::new(client));
    h.assign_and_read((0, 0), expected(0..6)).await;
    h.in_sink(0..6);
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(h.counter(|m| &m.records_confirmed), 6, "verdicts go on");
    let commits = h.commits();
    assert!(
        commits.iter().flatten().all(|(t, _)| *t != tp(0)),
        "{commits:?}"
    );
    assert!(h.audit.handover.held.contains(&tp(0)));
    let out = h.audit.revoke(&[tp(0)]).await;
    assert!(out.is_empty(), "{out:?}");
}

/// Issue 41: a failed handover read is retried in the background. Against a broker that
/// never answers a read takes its 10 s metadata timeout; a round no longer waits for it
/// (it did, every round), and the partition stays held meanwhile: verdicts go on, nothing
/// is published or committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_handover_read_is_retried_without_holding_up_the_rounds() {
    let mut h = harness("");
    let client = unreachable_handover();
    h.audit.handover.link = Some(std::sync::Arc::new(client));
    h.assign_and_read((0, 0), expected(0..6)).await;
    h.in_sink(0..6);
    h.clock.advance(GRACE_MS + 1);
    for round in 0..3 {
        let started = std::time::Instant::now();
        h.audit.round().await;
        let took = started.elapsed();
        assert!(
            took < std::time::Duration::from_secs(3),
            "round {round} took {took:?}: it waited for the handover read"
        );
    }
    assert_eq!(h.counter(|m| &m.records_confirmed), 6, "verdicts go on");
    assert!(h.audit.handover.held.contains(&tp(0)), "still held");
    let commits = h.commits();
    assert!(
        commits.iter().flatten().all(|(t, _)| *t != tp(0)),
        "{commits:?}"
    );
    assert!(h.audit.handover.reading.is_some(), "a read runs meanwhile");
    // Review 26, F1: a revoke of another partition keeps it (dropped, the read finished in
    // the background would clear the partition's `unread` without `read_done`), and the
    // partition is held while it is pending, whatever the client says.
    let out = h.audit.revoke(&[tp(1)]).await;
    assert!(out.is_empty(), "{out:?}");
    assert!(h.audit.handover.reading.is_some(), "kept for partition 0");
    let hh = h.audit.handover.link.clone().expect("a handover");
    assert!(h.audit.awaiting_read(&hh, &tp(0)));
    let out = h.audit.revoke(&[tp(0)]).await;
    assert!(out.is_empty(), "{out:?}");
    assert!(h.audit.handover.reading.is_none(), "dropped at the revoke");
}

/// Review 26b, G3: a revoke whose partition has a background handover read that finished
/// but was not taken yet (`read_done` decides its flows and terms) holds it at the revoke's
/// last persist: neither published nor committed. Before, the revoke dropped the read
/// first, and the partition was published under a term no sweep had run under, and
/// committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoke_holds_a_partition_whose_finished_read_was_not_taken() {
    let mut h = harness("");
    h.assign_and_read((0, 0), Vec::new()).await;
    let client = unreachable_handover();
    h.audit.handover.link = Some(std::sync::Arc::new(client));
    let reading =
        crate::audit::hand_over::Reading::finished(vec![tp(0)], std::collections::HashMap::new());
    while !reading.is_finished() {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    h.audit.handover.reading = Some(reading);
    // Held, nothing is published: the revoke does not wait out a publish to the broker
    // that never answers (10 s; before, it tried, then held it only for the failure).
    let started = std::time::Instant::now();
    let out = h.audit.revoke(&[tp(0)]).await;
    let took = started.elapsed();
    assert!(out.is_empty(), "held, not committed: {out:?}");
    assert!(
        took < std::time::Duration::from_secs(5),
        "the revoke tried to publish the partition ({took:?})"
    );
    assert!(h.audit.handover.reading.is_none(), "dropped with it");
}

/// Review of format 3, F3 and R2: a partition resumed from its store because the handover
/// read failed; the background read then finds a state, another owner's or its own, of any
/// format: the store's given-up gaps are swept under this owner's own term before anything
/// of it is published (before, only a warning, and the next changed chunks replaced that
/// owner's versions in part; with terms in the chunk keys a sweep never replaces them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_read_finding_a_state_sweeps_under_its_own_term_first() {
    use crate::audit::retired_flow::Flow;
    let mut h = harness("");
    let client = unreachable_handover().with_owner("me".into());
    h.audit.handover.link = Some(std::sync::Arc::new(client));
    h.assign_and_read((0, 0), expected(0..6)).await;
    h.audit.drop_reading(&[tp(0)]);
    let state = |version: u32, owner: &str| -> crate::handover::PartitionState {
        serde_json::from_value(serde_json::json!({"version": version, "audit": AUDIT,
            "topic": tp(0).topic, "partition": 0, "settled": 3, "ledger": {}, "gaps": [],
            "written_at": "2026-12-06T00:00:00Z", "owner": owner}))
        .expect("a state")
    };
    for (version, owner) in [(3, "other"), (3, "me"), (2, "other")] {
        h.audit.handover.retired_flows.clear();
        let states = std::collections::HashMap::from([(tp(0), state(version, owner))]);
        h.audit.read_done(vec![tp(0)], Ok(states)).await;
        let flow = h.audit.handover.retired_flows.get(&tp(0));
        assert!(
            matches!(flow, Some(Flow::Sweep(o)) if *o == crate::types::Offset::MIN),
            "format {version} of {owner}: {flow:?}"
        );
    }
    // Review T2: the store marks an import of the state found (or of an older one: N2),
    // cut before this partition resumed from its store: the import resumes (a sweep would
    // publish the part imported under a new term, and the rest would be lost for good),
    // below where the first state was settled. An older state than the mark's is not the
    // newest: swept, and the import it marks is over (its mark goes: review 26c, H5).
    let mark = crate::store::ImportMark {
        owner: "other".into(),
        term: 3,
        below: Some(2),
        generation: Some(0),
    };
    for (term, owner, resumed) in [(2, "other", false), (3, "other", true), (4, "third", true)] {
        h.store
            .set_importing("unread", AUDIT, &tp(0).topic, 0, Some(&mark))
            .expect("mark");
        h.audit.handover.retired_flows.clear();
        let mut st = state(3, owner);
        st.term = term;
        let states = std::collections::HashMap::from([(tp(0), st)]);
        h.audit.read_done(vec![tp(0)], Ok(states)).await;
        let flow = h.audit.handover.retired_flows.get(&tp(0));
        let want = crate::audit::retired_flow::Source {
            term,
            owner: owner.to_string(),
            below: if term == 3 {
                crate::types::Offset::MAX
            } else {
                2
            },
            only_unknown: term != 3,
        };
        assert_eq!(
            matches!(flow, Some(Flow::Import(_, src)) if *src == want),
            resumed,
            "term {term}: {flow:?}"
        );
        let marked = h
            .store
            .importing("unread", AUDIT)
            .expect("marks")
            .contains_key(&(tp(0).topic.clone(), 0));
        assert_eq!(marked, resumed, "term {term}: the mark stays while resumed");
    }
}

/// Which state a cut import resumes from (`resume_of`, review 26 F2): the very one it began
/// from, as it began (unbounded); a newer one (a higher term, or a later
/// generation of the same owner and term) only with the gaps this store knows nothing of,
/// below the first one's settled offset (never past the found state's); an older one never.
/// A mark of schema v15 (no offset, no generation) resumes a state of its owner and term
/// only, as it began.
#[test]
fn a_cut_import_resumes_from_its_state_or_a_newer_one_below_where_it_began() {
    use crate::audit::partitions::resume_of;
    let mark = |below, generation| crate::store::ImportMark {
        owner: "b".into(),
        term: 5,
        below,
        generation,
    };
    let m = mark(Some(20), Some(9));
    assert_eq!(
        resume_of(&m, ("b", 5, 9, 20)),
        Some((crate::types::Offset::MAX, false)),
        "the same"
    );
    assert_eq!(
        resume_of(&m, ("b", 5, 11, 30)),
        Some((20, true)),
        "its owner's later one"
    );
    assert_eq!(
        resume_of(&m, ("c", 6, 2, 90)),
        Some((20, true)),
        "a newer owner's"
    );
    assert_eq!(
        resume_of(&m, ("b", 7, 1, 10)),
        Some((10, true)),
        "never past it"
    );
    assert_eq!(resume_of(&m, ("c", 4, 30, 90)), None, "older");
    assert_eq!(
        resume_of(&m, ("c", 5, 30, 90)),
        None,
        "another owner's same term"
    );
    assert_eq!(
        resume_of(&m, ("b", 5, 8, 90)),
        None,
        "an earlier generation"
    );
    let legacy = mark(None, None);
    assert_eq!(
        resume_of(&legacy, ("b", 5, 3, 30)),
        Some((crate::types::Offset::MAX, false))
    );
    assert_eq!(resume_of(&legacy, ("c", 6, 3, 30)), None);
}

/// Review of format 3, F1: a store letting go of
/// the gaps of a partition another instance owns now forgets its progress with them. Kept,
/// that progress could later resume the partition as further than the handover's state
/// while its given-up gaps were gone, and the store's chunks would then replace the side
/// topic's without them (lost for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_owned_elsewhere_loses_its_progress_with_its_gaps() {
    let mut h = harness("");
    h.assign_and_read((0, 0), expected(0..6)).await;
    h.in_sink(0..3);
    h.clock.advance(GRACE_MS + 1);
    h.audit.round().await;
    assert_eq!(h.stored_gaps().len(), 1, "a gap of partition 0");
    let out = h.audit.revoke(&[tp(0)]).await;
    assert_eq!(out, vec![(tp(0), 6)]);
    assert!(
        h.store
            .load_progress(AUDIT)
            .expect("progress")
            .iter()
            .any(|p| p.partition == 0),
        "kept at the revoke (the partition may come straight back)"
    );
    let client = unreachable_handover();
    h.audit.handover.link = Some(std::sync::Arc::new(client));
    h.kafka
        .watermarks
        .lock()
        .expect("lock")
        .insert(tp(1), (0, 0));
    h.audit.assign(vec![tp(1)]).await;
    let progress = h.store.load_progress(AUDIT).expect("progress");
    assert!(
        progress.iter().all(|p| p.partition != 0),
        "partition 0 is owned elsewhere: {progress:?}"
    );
    assert!(h.stored_gaps().is_empty(), "{:?}", h.stored_gaps());
}
