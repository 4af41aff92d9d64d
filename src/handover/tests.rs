use super::*;
use crate::gap::GapState;
use crate::handover::codec::{KeyKind, parse_key};
use chrono::TimeZone;

fn state(settled: Offset, at_s: i64) -> PartitionState {
    PartitionState {
        version: VERSION,
        audit: "dns".into(),
        topic: "logs".into(),
        partition: 3,
        settled,
        ledger: serde_json::json!({"missing": [], "gaps": [], "tail_gap": null}),
        gaps: vec![Gap {
            id: Gap::make_id("dns", "logs", 3, 10),
            audit: "dns".into(),
            topic: "logs".into(),
            partition: 3,
            first_offset: 10,
            last_offset: 12,
            missing_records: 3,
            size_known: true,
            first_timestamp: None,
            last_timestamp: None,
            detected_at: Utc.timestamp_opt(1_700_000_000, 0).unwrap(),
            state: GapState::Acknowledged,
            unrecoverable_at: None,
            cause: crate::gap::GapCause::DroppedInFlight,
            pipeline_commit_from: Some(9),
            pipeline_commit_to: Some(20),
            pipeline_commit_at: None,
            evidence: None,
            shared_key: false,
            replayed_at: None,
            ack_reason: Some("known".into()),
        }],
        replayed: vec![Gap::make_id("dns", "logs", 3, 10)],
        retired: Vec::new(),
        retired_gaps: None,
        key_claims: vec![(vec!["10.0.0.1".into(), "a.com".into()], 2)],
        generation: 0,
        base: None,
        base_id: None,
        prev: None,
        term: 0,
        removed: Vec::new(),
        claims_kept: false,
        written_at: Utc.timestamp_opt(at_s, 0).unwrap(),
        owner: "h:1".into(),
        owner_url: None,
    }
}

#[test]
fn round_trips_with_every_gap_field() {
    let s = state(42, 1_700_000_100);
    let k = key("dns", &s.tp());
    assert_eq!(decode(&k, Some(&encode(&s))).unwrap(), Some(s));
}

#[test]
fn keys_separate_audit_topic_and_partition() {
    let a = key("a", &TopicPartition::new("b.c", 1));
    assert_eq!(a, b"a\0b.c\x001".to_vec());
    assert_ne!(a, key("a\0b", &TopicPartition::new("c", 1)));
    assert_ne!(a, key("a", &TopicPartition::new("b.c", 11)));
}

#[test]
fn tombstones_and_newer_versions_are_skipped_garbage_is_an_error() {
    let s = state(1, 1);
    let k = key("dns", &s.tp());
    assert_eq!(decode(&k, None).unwrap(), None);
    let mut v: serde_json::Value = serde_json::from_slice(&encode(&s)).unwrap();
    v["version"] = serde_json::json!(VERSION + 1);
    assert_eq!(
        decode(&k, Some(&serde_json::to_vec(&v).unwrap())).unwrap(),
        None
    );
    let e = decode(&k, Some(b"{")).unwrap_err().to_string();
    assert!(e.contains("dns/logs/3"), "{e}");
    assert!(decode(&k, Some(b"{\"version\":1}")).is_err());
    assert!(decode(&k, Some(b"{\"settled\":1}")).is_err(), "no version");
}

#[test]
fn a_document_under_another_key_is_refused() {
    let s = state(1, 1);
    let other = key("dns", &TopicPartition::new("logs", 4));
    let e = decode(&other, Some(&encode(&s))).unwrap_err().to_string();
    assert!(e.contains("does not match"), "{e}");
}

#[test]
fn newer_prefers_the_higher_watermark_then_the_higher_generation() {
    let at = |settled, at_s, generation| PartitionState {
        generation,
        ..state(settled, at_s)
    };
    assert_eq!(newer(state(10, 5), state(9, 6)).settled, 10);
    assert_eq!(newer(state(9, 6), state(10, 5)).settled, 10);
    // A higher watermark wins over a higher generation.
    assert_eq!(newer(at(10, 5, 1), at(9, 6, 2)).settled, 10);
    assert_eq!(newer(at(9, 6, 2), at(10, 5, 1)).settled, 10);
    // Equal watermarks: the generation decides, in either order (the clock is ignored).
    assert_eq!(newer(at(10, 5, 2), at(10, 6, 1)).generation, 2);
    assert_eq!(newer(at(10, 6, 1), at(10, 5, 2)).generation, 2);
}

#[test]
fn handover_wins_unless_the_local_store_is_further() {
    let h = state(100, 1);
    assert!(prefer_handover(None, &h));
    assert!(prefer_handover(Some(99), &h), "stale local store");
    assert!(
        prefer_handover(Some(100), &h),
        "equal: gap states may be newer"
    );
    assert!(!prefer_handover(Some(101), &h));
}

// ---------------------------------------------------------------- chunked states

/// A state with `n` open gaps (and a ledger naming each), about 600 bytes per gap.
fn big(settled: Offset, n: usize) -> PartitionState {
    let mut s = state(settled, 1_700_000_000 + settled);
    let proto = s.gaps[0].clone();
    s.gaps = (0..n)
        .map(|i| {
            let first = 2 * i as Offset + 1;
            Gap {
                id: Gap::make_id("dns", "logs", 3, first),
                first_offset: first,
                last_offset: first,
                missing_records: 1,
                state: GapState::Open,
                ack_reason: None,
                ..proto.clone()
            }
        })
        .collect();
    s.ledger = serde_json::json!({
        "gaps": (0..n).map(|i| serde_json::json!({"first": 2 * i + 1, "last": 2 * i + 1})).collect::<Vec<_>>(),
    });
    s
}

/// A handover log: (handover partition, key, value) in offset order.
type Log = Vec<(i32, Vec<u8>, Option<Vec<u8>>)>;

fn base() -> Vec<u8> {
    key("dns", &TopicPartition::new("logs", 3))
}

fn tps() -> Vec<TopicPartition> {
    vec![TopicPartition::new("logs", 3)]
}

/// A writer as [`Handover::publish`] drives [`plan`]: its own [`Slots`], updated as a
/// publish succeeds or fails.
struct Writer {
    slots: Slots,
    n: u32,
}

impl Writer {
    fn new() -> Writer {
        Writer {
            slots: Slots::default(),
            n: 0,
        }
    }

    fn plan(&mut self, s: &PartitionState, limit: usize) -> Plan {
        self.n += 1;
        plan(
            &encode(s),
            &base(),
            &self.slots,
            limit,
            &format!("w/{}", self.n),
        )
        .expect("limit leaves room")
    }

    /// The whole publish: records, then (acknowledged) the tombstones.
    fn publish(&mut self, log: &mut Log, s: &PartitionState, limit: usize) -> Plan {
        let p = self.plan(s, limit);
        log.extend(
            p.records
                .iter()
                .map(|(k, v)| (0, k.clone(), Some(v.clone()))),
        );
        log.extend(p.cleanup.iter().map(|k| (0, k.clone(), None)));
        self.slots = p.done;
        p.clone()
    }

    /// A crash after the first `sent` records of the publish.
    fn crash(&mut self, log: &mut Log, s: &PartitionState, limit: usize, sent: usize) {
        let p = self.plan(s, limit);
        assert!(sent < p.records.len(), "the crash must cut the set short");
        log.extend(
            p.records
                .iter()
                .take(sent)
                .map(|(k, v)| (0, k.clone(), Some(v.clone()))),
        );
        self.slots = p.failed;
    }
}

fn read(log: &Log) -> (Option<PartitionState>, Slots) {
    let mut r = Reassembler::new("dns", &tps());
    for (p, k, v) in log {
        r.push(*p, k, v.as_deref());
    }
    let (mut states, slots, _, _) = r.finish();
    (
        states.remove(&TopicPartition::new("logs", 3)),
        slots
            .get(&base())
            .copied()
            .expect("slots of a wanted partition"),
    )
}

/// What log compaction keeps: the last record of each key, at its offset (tombstones
/// included, as before `delete.retention.ms`; `drop_tombstones` for after it).
fn compact(log: &Log, drop_tombstones: bool) -> Log {
    let last: HashMap<(i32, &[u8]), usize> = log
        .iter()
        .enumerate()
        .map(|(i, (p, k, _))| ((*p, k.as_slice()), i))
        .collect();
    log.iter()
        .enumerate()
        .filter(|(i, (p, k, v))| {
            last.get(&(*p, k.as_slice())) == Some(i) && !(drop_tombstones && v.is_none())
        })
        .map(|(_, r)| r.clone())
        .collect()
}

/// Reads `log` as written and after compaction: both must give `want`.
fn assert_reads(log: &Log, want: Option<&PartitionState>, what: &str) {
    assert_eq!(read(log).0.as_ref(), want, "{what}: as written");
    assert_eq!(
        read(&compact(log, false)).0.as_ref(),
        want,
        "{what}: compacted"
    );
    assert_eq!(
        read(&compact(log, true)).0.as_ref(),
        want,
        "{what}: compacted, tombstones gone"
    );
}

const LIMIT: usize = 100_000;

#[test]
fn a_large_state_is_cut_into_chunks_within_the_limit_and_reassembled() {
    let s = big(4000, 2000);
    let doc = encode(&s);
    assert!(doc.len() > 8 * LIMIT, "{} bytes", doc.len());
    let mut log = Log::new();
    let p = Writer::new().publish(&mut log, &s, LIMIT);
    assert!(p.records.len() > 8, "{} chunks", p.records.len());
    for (k, v) in &p.records {
        assert!(
            k.len() + v.len() + FRAMING <= LIMIT,
            "{} bytes",
            k.len() + v.len()
        );
        assert!(k.starts_with(&base()));
    }
    assert_reads(&log, Some(&s), "one set");
    // Only the pieces of the document travel, plus a header line per chunk.
    let payload: usize = p.records.iter().map(|(_, v)| v.len()).sum();
    assert!(payload < doc.len() + 200 * p.records.len());
}

#[test]
fn a_state_that_fits_stays_one_record_and_version_1_records_still_read() {
    let s = state(42, 1_700_000_100);
    let mut log = Log::new();
    let p = Writer::new().publish(&mut log, &s, LIMIT);
    assert_eq!(
        p.records,
        vec![(base(), encode(&s))],
        "one record under the partition's key"
    );
    assert_reads(&log, Some(&s), "single record");
    // And an older binary's record (version 1: always a whole state) is read as a base.
    let v1 = PartitionState {
        version: 1,
        ..s.clone()
    };
    assert_reads(
        &vec![(0, base(), Some(encode(&v1)))],
        Some(&v1),
        "v1 record",
    );
}

#[test]
fn a_set_cut_short_by_a_crash_is_never_taken_the_previous_state_is() {
    let (a, b, c) = (big(100, 1000), big(200, 1200), big(300, 1100));
    let mut w = Writer::new();
    let mut log = Log::new();
    // Nothing complete yet: no state at all, not a piece of one.
    w.crash(&mut log, &a, LIMIT, 3);
    assert_reads(&log, None, "only a partial set");
    w.publish(&mut log, &a, LIMIT);
    assert_reads(&log, Some(&a), "A complete");
    for sent in [1, 5] {
        w.crash(&mut log, &b, LIMIT, sent);
        assert_reads(&log, Some(&a), "B cut short: A stays");
    }
    // The retry after the crash writes B's slot again, never A's.
    let slot_of = |p: &Plan| match parse_key(&p.records[0].0) {
        Some((_, None, KeyKind::Chunk { slot, .. })) => slot,
        other => panic!("not a chunk: {other:?}"),
    };
    let a_slot = match read(&log).1.latest {
        Some(Latest::Chunks(s)) => s,
        other => panic!("A is the latest complete state: {other:?}"),
    };
    let p = w.publish(&mut log, &c, LIMIT);
    assert_ne!(slot_of(&p), a_slot);
    assert_reads(&log, Some(&c), "C complete");
}

#[test]
fn a_writer_never_writes_into_the_slot_of_the_latest_complete_state() {
    let mut w = Writer::new();
    let mut log = Log::new();
    let mut last = None;
    for i in 0..6 {
        let p = w.publish(&mut log, &big(i, 300 + 50 * i as usize), LIMIT);
        let Some(Latest::Chunks(slot)) = p.done.latest else {
            panic!("chunked")
        };
        assert_ne!(
            Some(slot),
            last,
            "publish {i} overwrote the latest complete set"
        );
        last = Some(slot);
        // A crash in the next publish would only touch the other slot.
        let next = w.plan(&big(99, 400), LIMIT);
        assert!(
            next.records.iter().all(|(k, _)| matches!(parse_key(k),
                Some((_, None, KeyKind::Chunk { slot: s, .. })) if s != slot)),
            "the next set goes to the other slot"
        );
    }
}

#[test]
fn chunks_an_older_longer_set_left_are_deleted_and_never_mixed_into_a_newer_one() {
    let long = big(100, 2000);
    let mid = big(150, 600);
    let short = big(200, 500);
    let mut w = Writer::new();
    let mut log = Log::new();
    let p_long = w.publish(&mut log, &long, LIMIT); // slot 0
    w.publish(&mut log, &mid, LIMIT); // slot 1
    let p_short = w.publish(&mut log, &short, LIMIT); // slot 0 again, fewer chunks
    assert!(p_short.records.len() < p_long.records.len());
    // The newer set's tombstones cover exactly the older set's extra chunks.
    let stale: Vec<Vec<u8>> = (p_short.records.len() as u32..p_long.records.len() as u32)
        .map(|i| chunk_key(&base(), 0, i))
        .collect();
    assert_eq!(p_short.cleanup, stale);
    assert_reads(&log, Some(&short), "short over long");
    // Without the tombstones (they failed) the leftovers still do not count.
    let no_cleanup: Log = log
        .iter()
        .filter(|(_, k, v)| v.is_some() || !stale.contains(k))
        .cloned()
        .collect();
    assert_reads(&no_cleanup, Some(&short), "leftovers, no tombstones");
    let (_, slots) = read(&no_cleanup);
    assert_eq!(
        slots.written[0],
        p_long.records.len() as u32,
        "the reader sees the leftovers, so the next owner deletes them"
    );
}

#[test]
fn interleaved_sets_of_two_writers_complete_whole_or_not_at_all() {
    let (x, y) = (big(100, 900), big(101, 900));
    // Two writers that both believe slot 0 is free (a stale owner and the new one).
    let px = Writer::new().plan(&x, LIMIT);
    let py = Writer::new().plan(&y, LIMIT);
    assert_eq!(px.records.len(), py.records.len());
    let n = px.records.len();
    let rec = |p: &Plan, i: usize| (0, p.records[i].0.clone(), Some(p.records[i].1.clone()));
    // x0 y0 y1 x1 ... : y has every key last, so y is complete; x never is.
    let mut log: Log = vec![rec(&px, 0), rec(&py, 0)];
    for i in 1..n {
        log.push(rec(&py, i));
        log.push(rec(&px, i));
    }
    // Keys 1.. end with x's chunk, key 0 with y's: neither set is whole.
    assert_reads(&log, None, "no set whole");
    // y's remaining chunk rewritten last: y whole.
    log.push(rec(&py, 1));
    for i in 2..n {
        log.push(rec(&py, i));
    }
    assert_reads(&log, Some(&y), "y whole, never a mix with x");
    // In different slots both complete: the later completion (log order) wins.
    let mut wx = Writer::new();
    let mut log = Log::new();
    wx.publish(&mut log, &x, LIMIT);
    let py = wx.plan(&y, LIMIT); // the other slot
    let half = py.records.len() / 2;
    let mut mixed: Log = py.records[..half]
        .iter()
        .map(|(k, v)| (0, k.clone(), Some(v.clone())))
        .collect();
    mixed.splice(0..0, log.clone());
    assert_reads(&mixed, Some(&x), "y half written");
    mixed.extend(
        py.records[half..]
            .iter()
            .map(|(k, v)| (0, k.clone(), Some(v.clone()))),
    );
    assert_reads(&mixed, Some(&y), "y complete after x");
}

#[test]
fn a_single_record_and_sets_replace_each_other_in_log_order() {
    let small = state(10, 1_700_000_010);
    let large = big(20, 1500);
    let small2 = state(30, 1_700_000_030);
    let mut w = Writer::new();
    // An older binary's record, then this binary takes over and publishes a set.
    let mut log: Log = vec![(0, base(), Some(encode(&small)))];
    let (_, slots) = read(&log);
    assert!(slots.single_live);
    w.slots = slots;
    let p = w.publish(&mut log, &large, LIMIT);
    assert_eq!(p.cleanup, vec![base()], "the set deletes the single record");
    assert_reads(&log, Some(&large), "set over single record");
    // The state shrinks again: one record, and the set's chunks are deleted.
    let p = w.publish(&mut log, &small2, LIMIT);
    assert_eq!(p.records.len(), 1);
    assert_eq!(p.cleanup.len(), large_chunks(&large));
    assert_reads(&log, Some(&small2), "single record over set");
    // A set cut short after a single record: the single record stays.
    w.crash(&mut log, &large, LIMIT, 2);
    assert_reads(&log, Some(&small2), "single record, partial set after it");
    // A tombstone of the single key (an operator deleting the state) forgets it.
    log.push((0, base(), None));
    assert_reads(&log, None, "single record deleted");
}

fn large_chunks(s: &PartitionState) -> usize {
    Writer::new().plan(s, LIMIT).records.len()
}

#[test]
fn a_damaged_chunk_spoils_only_its_own_set() {
    let (a, b) = (big(100, 800), big(200, 800));
    let mut w = Writer::new();
    let mut log = Log::new();
    w.publish(&mut log, &a, LIMIT);
    let n = log.len();
    w.publish(&mut log, &b, LIMIT);
    // One byte of B's payload flipped: the checksum refuses B, A stays.
    let (_, _, v) = &mut log[n + 1];
    let v = v.as_mut().expect("a chunk");
    let last = v.len() - 1;
    v[last] ^= 0x20;
    assert_reads(&log, Some(&a), "B damaged");
    // A chunk whose header is not JSON is ignored the same way.
    let (_, _, v) = &mut log[n + 1];
    *v = Some(b"garbage".to_vec());
    assert_reads(&log, Some(&a), "B unreadable");
    // A chunk filed under another index is not taken for that index.
    let mut log2 = Log::new();
    Writer::new().publish(&mut log2, &a, LIMIT);
    let moved = log2[0].2.clone();
    log2[1].2 = moved;
    assert_reads(&log2, None, "chunk 0 under key 1");
}

#[test]
fn states_of_other_partitions_and_audits_are_skipped() {
    let mut log = Log::new();
    let mut other = big(5, 400);
    other.partition = 4;
    let p = plan(
        &encode(&other),
        &key("dns", &other.tp()),
        &Slots::default(),
        LIMIT,
        "o/1",
    )
    .expect("plan");
    log.extend(p.records.into_iter().map(|(k, v)| (0, k, Some(v))));
    log.push((
        0,
        key("dns2", &TopicPartition::new("logs", 3)),
        Some(encode(&state(1, 1))),
    ));
    log.push((0, b"not ours".to_vec(), Some(b"{}".to_vec())));
    let (s, slots) = read(&log);
    assert_eq!(s, None);
    assert_eq!(
        slots,
        Slots {
            latest: None,
            written: [0, 0],
            single_live: false
        },
        "a partition with nothing published: slot 0, nothing to delete"
    );
}

#[test]
fn across_handover_partitions_the_newer_state_wins() {
    let (old, new) = (state(10, 5), state(20, 6));
    let mut r = Reassembler::new("dns", &tps());
    r.push(0, &base(), Some(&encode(&new)));
    r.push(3, &base(), Some(&encode(&old)));
    let (states, _, _, _) = r.finish();
    assert_eq!(states.get(&TopicPartition::new("logs", 3)), Some(&new));
}

#[test]
fn the_record_limit_is_message_max_bytes() {
    let mut k = KafkaConfig::default();
    assert_eq!(record_limit(&k), DEFAULT_MESSAGE_MAX_BYTES);
    k.properties.insert(
        "message.max.bytes".into(),
        crate::config::Secret::new("100000"),
    );
    assert_eq!(record_limit(&k), 100_000);
    k.properties.insert(
        "message.max.bytes".into(),
        crate::config::Secret::new("lots"),
    );
    assert_eq!(record_limit(&k), DEFAULT_MESSAGE_MAX_BYTES);
}

#[test]
fn a_limit_without_room_for_a_chunk_is_refused_with_what_would_do() {
    let s = big(1, 50);
    let need = plan(&encode(&s), &base(), &Slots::default(), 1500, "x/1").unwrap_err();
    assert!(need > 1500);
    assert!(plan(&encode(&s), &base(), &Slots::default(), need, "x/1").is_ok());
}

#[test]
fn chunk_keys_parse_back() {
    let b = base();
    assert_eq!(parse_key(&b), Some((&b[..], None, KeyKind::Single)));
    let k = chunk_key(&b, 1, 17);
    assert_eq!(
        parse_key(&k),
        Some((&b[..], None, KeyKind::Chunk { slot: 1, index: 17 }))
    );
    let d = delta_key(&b, 42, "h:1/17/0");
    let id = Some((42, "h:1/17/0".to_string()));
    assert_eq!(parse_key(&d), Some((&b[..], id.clone(), KeyKind::Single)));
    assert_eq!(
        parse_key(&chunk_key(&d, 0, 3)),
        Some((&b[..], id, KeyKind::Chunk { slot: 0, index: 3 }))
    );
    assert_eq!(parse_key(&chunk_key(&d, 2, 3)), None, "two slots only");
    assert_eq!(parse_key(&chunk_key(&b, 2, 0)), None, "two slots only");
    assert_eq!(parse_key(b"a\0b"), None);
    assert_eq!(parse_key(b"a\0b\0c\0d"), None);
}

/// `state(settled, at_s)` as written by an owner at handover generation `generation`,
/// encoded the way it travels (the field set by [`Handover::publish`]).
fn doc_at_generation(settled: Offset, at_s: i64, generation: u64) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_slice(&encode(&state(settled, at_s))).unwrap();
    v["generation"] = serde_json::json!(generation);
    serde_json::to_vec(&v).unwrap()
}

#[test]
fn equal_watermarks_are_decided_by_generation_never_by_the_writers_clock() {
    // A zombie owner with a clock an hour fast wrote generation 1; the owner that took the
    // partition over from it (generation 2) wrote later, by a slow clock, with the same
    // settled offset and newer gap states. Whatever the clocks say, generation 2 wins.
    let k = key("dns", &state(0, 0).tp());
    let zombie = doc_at_generation(10, 1_700_003_600, 1);
    let owner = doc_at_generation(10, 1_700_000_000, 2);
    let z = decode(&k, Some(&zombie)).unwrap().unwrap();
    let o = decode(&k, Some(&owner)).unwrap().unwrap();
    assert_eq!(
        newer(z.clone(), o.clone()).written_at.timestamp(),
        1_700_000_000
    );
    assert_eq!(newer(o, z).written_at.timestamp(), 1_700_000_000);
    // The same across handover partitions (a state in two of them), in either placement.
    for (p0, p1) in [(&zombie, &owner), (&owner, &zombie)] {
        let mut r = Reassembler::new("dns", &[state(0, 0).tp()]);
        r.push(0, &k, Some(p0));
        r.push(1, &k, Some(p1));
        let (states, _, _, _) = r.finish();
        let s = &states[&state(0, 0).tp()];
        assert_eq!(s.written_at.timestamp(), 1_700_000_000, "the owner's state");
    }
}

/// Review item 1: a partition whose handover read failed (the broker unreachable here) is
/// not published until a read succeeds: a publish under the term it knew from before (or
/// 1) would overwrite a newer owner's base, and every later reader would find the newer
/// owner's deltas over a base of a lower term (the partition unusable).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_whose_read_failed_is_not_published() {
    let k = KafkaConfig {
        // Nothing listens there: every Kafka call fails.
        brokers: "127.0.0.1:1".into(),
        ..Default::default()
    };
    let h = std::sync::Arc::new(Handover::new(&k, "handover_unread").expect("client"));
    let tp = TopicPartition::new("logs", 3);
    assert!(!h.unread("dns", &tp), "never assigned: nothing to fence");
    let r = {
        let h = h.clone();
        let tps = vec![tp.clone()];
        tokio::task::spawn_blocking(move || h.read("dns", &tps))
            .await
            .expect("read task")
    };
    assert!(r.is_err(), "no broker: the read fails");
    assert!(h.unread("dns", &tp));
    let p = h.publish_each(&[state(10, 0)]).await;
    assert_eq!(p.acked, vec![false]);
    assert!(
        matches!(p.error, Some(HandoverError::NotRead { .. })),
        "refused before anything is sent: {:?}",
        p.error
    );
}

/// Review of the terms, N1: an instance taking a partition again goes past every term it
/// used for it before (its own old keys may hold stale chunks), never back; and its own
/// state is kept under its term only when that term is the highest in play.
#[test]
fn terms_go_past_every_term_used_and_an_own_state_is_kept_only_at_the_top() {
    let k = crate::config::KafkaConfig {
        brokers: "127.0.0.1:1".into(),
        ..Default::default()
    };
    let h = Handover::new(&k, "t").expect("handover client");
    let tp = TopicPartition::new("x", 0);
    assert_eq!(h.term("a", &tp), 1, "nothing read");
    h.raise_term("a", &tp, 5);
    assert_eq!(h.term("a", &tp), 5);
    h.raise_term("a", &tp, 3);
    assert_eq!(h.term("a", &tp), 5, "never lowered");
    assert!(
        !h.keep_term("a", &tp, 3),
        "this instance used a term above the state's since"
    );
    assert_eq!(h.term("a", &tp), 5);
    assert!(h.keep_term("a", &tp, 4));
    assert_eq!(h.term("a", &tp), 4);
}
