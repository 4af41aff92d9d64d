//! Issue 41, "a takeover reads a bounded amount", on the real broker: two instances with a
//! handover topic; A's partition holds `n` given-up gaps (retired: in the store only) and a
//! few live ones; B takes it over. Before record format 3 a base carried every retired gap
//! (about 500 B each): the takeover read and decoded all of them in memory, 100 MB at
//! 200,000. Now the state holds their aggregate and the gaps travel as chunks on the side
//! topic, which B imports after the takeover, a bounded number of chunks per round. Run for
//! 2,000 and 200,000 given-up gaps: what the takeover reads (the handover topic up to its
//! end when B took over) must be the same within a small constant, B's gauges must count
//! every gap at once, and B's store must hold exactly A's gaps (ids, offsets, states)
//! within a bounded time, none detected again.

use super::handover_idle::{bulk_produce, handed, handover_bytes, handover_end, prefill_retired};
use super::*;

/// Live gaps: every second record of the `2 * LIVE` after the given-up ones is lost.
pub(super) const LIVE: i64 = 50;
/// What the two takeovers' reads may differ by, whatever the retired count: the topic is
/// not compacted yet, so a takeover reads every base the rebalances left (about 40 kB each
/// with the 50 live gaps) and a rebalance more or less is three of them.
const SAME_WITHIN: usize = 128 * 1024;
/// Bytes a takeover of this partition may read at all, whatever its retired gaps: a base
/// of 50 live gaps, a few deltas and bases of the rebalances, each about 30 kB.
const TAKEOVER_BOUND: usize = 512 * 1024;
/// How long B may take to import 200,000 given-up gaps: 6,250 chunks, up to 8 MiB of them a round.
const IMPORT_SECS: u64 = 120;

/// What one takeover showed.
struct Takeover {
    /// Bytes (keys and values) and records of the handover topic B's takeover read.
    read_bytes: usize,
    read_records: usize,
    /// Seconds from the takeover until B's store held every gap of A's.
    import_s: f64,
    /// A's gaps, B's gaps, and B's not A's (none expected).
    a_gaps: usize,
    b_gaps: usize,
    extra: usize,
}

async fn takeover(retired: i64) -> Takeover {
    let fill = 2 * retired;
    let live_end = fill + 2 * LIVE;
    let s = Scenario::with_partitions("handover_retired", 1).await;
    let handover = unique("handover");
    let mut a = Instance::new(&s, "a", &handover);
    let mut b = Instance::new(&s, "b", &handover);
    prefill_retired(&a.store, &s.topic, retired);
    let topic = s.topic.clone();
    tokio::task::spawn_blocking(move || bulk_produce(&topic, live_end))
        .await
        .expect("produce task");
    a.start();
    s.pipeline()
        .start_at(fill)
        .records((2 * LIVE) as usize)
        .copies(|o| usize::from(o % 2 == 0))
        .commit_every(25, Duration::ZERO)
        .deadline(Duration::from_secs(120))
        .run()
        .await;
    wait_settled(&a, live_end, "A decides the live phase").await;
    // A commits once its retired gaps are on the side topic and its state acknowledged.
    let committed = committed_within(&s.auditor_group, &s.topic, live_end, 180).await;
    assert_eq!(
        committed,
        Some(live_end),
        "A's commit; log tail:\n{}",
        tail(&a.log_text(), 30)
    );
    let a_gaps = handed(&a.store);
    assert_eq!(a_gaps.len() as i64, retired + LIVE);

    b.start();
    tokio::time::sleep(Duration::from_secs(4)).await;
    a.stop();
    // B holds the partition (publishes nothing) until its import is done: the handover
    // topic as B's takeover read it is the topic now.
    let end = handover_end(&handover);
    let t = std::time::Instant::now();
    wait_settled(&b, live_end, "B takes over from A").await;
    let open = b.metric("gap_auditor_gaps_open").await;
    assert_eq!(
        open,
        (retired + LIVE) as f64,
        "B's gauges count A's given-up gaps at once (the handed-over aggregate); B log tail:\n{}",
        tail(&b.log_text(), 30)
    );
    let (read_records, read_bytes, _) = {
        let h = handover.clone();
        tokio::task::spawn_blocking(move || handover_bytes(&h, 0, end))
            .await
            .expect("read task")
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(IMPORT_SECS);
    let mut b_gaps = handed(&b.store);
    while b_gaps != a_gaps && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        b_gaps = handed(&b.store);
    }
    let import_s = t.elapsed().as_secs_f64();
    let differ: Vec<_> = a_gaps
        .iter()
        .filter(|(id, v)| b_gaps.get(*id) != Some(*v))
        .take(5)
        .collect();
    assert!(
        differ.is_empty() && a_gaps.len() == b_gaps.len(),
        "B's store holds A's gaps within {IMPORT_SECS} s: {} vs {}, e.g. {differ:?}; B log tail:\n{}",
        a_gaps.len(),
        b_gaps.len(),
        tail(&b.log_text(), 30)
    );
    assert_eq!(
        b.metric("gap_auditor_gaps_detected_total").await,
        0.0,
        "B detected none of A's gaps again"
    );
    // Once imported, B counts them from its store: the same. (Polled: once, in 8 runs, B
    // exported no series of the partition at this point, as between a revoke and an
    // assignment of a late rebalance; the log tail says so if it happens again.)
    let mut now_open = b.metric("gap_auditor_gaps_open").await;
    let gauge_deadline = std::time::Instant::now() + Duration::from_secs(10);
    while now_open != open && std::time::Instant::now() < gauge_deadline {
        eprintln!(
            "handover_retired: B's gaps_open {now_open}, want {open}; B log tail:\n{}",
            tail(&b.log_text(), 20)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        now_open = b.metric("gap_auditor_gaps_open").await;
    }
    assert_eq!(now_open, open, "B's gauges once imported");
    b.stop();
    Takeover {
        read_bytes,
        read_records,
        import_s,
        a_gaps: a_gaps.len(),
        b_gaps: b_gaps.len(),
        extra: b_gaps.keys().filter(|id| !a_gaps.contains_key(*id)).count(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takeover_reads_the_same_for_two_thousand_and_two_hundred_thousand_given_up_gaps() {
    let small = takeover(2_000).await;
    let large = takeover(200_000).await;
    eprintln!(
        "handover_retired: takeover read {} bytes in {} records with 2,000 given-up gaps, {} \
         bytes in {} records with 200,000; imported in {:.1} s and {:.1} s",
        small.read_bytes,
        small.read_records,
        large.read_bytes,
        large.read_records,
        small.import_s,
        large.import_s
    );
    assert!(
        large.read_bytes <= small.read_bytes + SAME_WITHIN,
        "a takeover reads {} bytes with 200,000 given-up gaps, {} with 2,000",
        large.read_bytes,
        small.read_bytes
    );
    assert!(
        large.read_bytes <= TAKEOVER_BOUND,
        "a takeover read {} bytes (bound {TAKEOVER_BOUND})",
        large.read_bytes
    );
    figures::record(&figures::Figures {
        scenario: "handover_retired_200k",
        runs: 2,
        faults: 1,
        expected_lost: large.a_gaps as u64,
        reported_lost: large.b_gaps as u64,
        expected_gaps: large.a_gaps as u64,
        reported_gaps: large.b_gaps as u64,
        false_positives: large.extra as u64,
        false_negatives: (large.a_gaps + large.extra).saturating_sub(large.b_gaps) as u64,
        notes: format!(
            "takeover read {} B / {} records (2,000 given-up gaps) vs {} B / {} records \
             (200,000); the next owner's store held every gap exactly after {:.1} s and {:.1} s",
            small.read_bytes,
            small.read_records,
            large.read_bytes,
            large.read_records,
            small.import_s,
            large.import_s
        ),
    });
}

/// The chunks of partition 0 of `topic` on handover side topic `side`, decoded, the latest
/// of each key: their gap ids.
fn side_topic_gaps(side: &str, topic: &str) -> BTreeSet<String> {
    use gap_auditor::handover::retired::{decode_chunk, parse_chunk_key};
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    let c: BaseConsumer = group_client(&unique("side_reader"))
        .create()
        .expect("reader");
    let Ok((_, high)) = c.fetch_watermarks(side, 0, Duration::from_secs(10)) else {
        return BTreeSet::new();
    };
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(side, 0, rdkafka::Offset::Beginning)
        .expect("tpl");
    c.assign(&tpl).expect("assign");
    let mut latest: BTreeMap<Vec<u8>, BTreeSet<String>> = BTreeMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut reached = 0;
    while reached < high && std::time::Instant::now() < deadline {
        let Some(m) = c.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.expect("read the side topic");
        reached = m.offset() + 1;
        let (Some(k), Some(v)) = (m.key(), m.payload()) else {
            continue;
        };
        assert!(
            parse_chunk_key(k).is_some(),
            "only chunks on the side topic"
        );
        let chunk = decode_chunk(k, v).expect("a chunk decodes");
        if chunk.topic == topic {
            latest.insert(k.to_vec(), chunk.gaps.into_iter().map(|g| g.id).collect());
        }
    }
    latest.into_values().flatten().collect()
}

/// An upgrade: the handover topic holds a format-2 base with the retired gaps inline (what
/// the previous build wrote). The new owner takes it over right (the retired gaps in its
/// store, counted), publishes them as chunks to the side topic before it commits, and a
/// third owner then gets them through the side topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_format_2_base_with_retired_gaps_inline_is_taken_over_and_its_gaps_chunked() {
    use gap_auditor::handover::{Handover, PartitionState};
    const RETIRED: i64 = 300;
    const SETTLED: i64 = 2 * RETIRED;
    let s = Scenario::with_partitions("handover_format2", 1).await;
    let handover = unique("handover");
    let topic = s.topic.clone();
    tokio::task::spawn_blocking(move || bulk_produce(&topic, SETTLED))
        .await
        .expect("produce task");
    // What the previous build published: version 2, every retired gap inline.
    let gaps: Vec<Gap> = (0..RETIRED)
        .map(|i| open_gap(super::handover_idle::AUDIT, &s.topic, 2 * i + 1, 2 * i + 1))
        .collect();
    let old = Handover::new(
        &gap_auditor::config::KafkaConfig {
            brokers: kafka(),
            ..Default::default()
        },
        &handover,
    )
    .expect("handover client");
    old.ensure_topic().await.expect("handover topic");
    old.publish(&[PartitionState {
        version: 2,
        audit: super::handover_idle::AUDIT.into(),
        topic: s.topic.clone(),
        partition: 0,
        settled: SETTLED,
        ledger: serde_json::json!({"tail_gap": null}),
        retired: gaps.iter().map(|g| g.id.clone()).collect(),
        gaps,
        replayed: Vec::new(),
        retired_gaps: None,
        key_claims: Vec::new(),
        generation: 0,
        base: None,
        base_id: None,
        prev: None,
        term: 0,
        removed: Vec::new(),
        claims_kept: false,
        written_at: chrono::Utc::now(),
        owner: "previous-build".into(),
        owner_url: None,
    }])
    .await
    .expect("the format-2 base");

    let mut b = Instance::new(&s, "b", &handover);
    b.start();
    wait_settled(&b, SETTLED, "B takes the format-2 base over").await;
    assert_eq!(
        b.metric("gap_auditor_gaps_open").await,
        RETIRED as f64,
        "B counts the inline retired gaps"
    );
    let b_gaps = handed(&b.store);
    assert_eq!(b_gaps.len() as i64, RETIRED);
    assert!(
        b_gaps.values().all(|v| v.contains("retired=1")),
        "{:?}",
        b_gaps.values().next()
    );
    // B commits only once the side topic holds every one of them.
    let committed = committed_within(&s.auditor_group, &s.topic, SETTLED, 60).await;
    assert_eq!(committed, Some(SETTLED), "B's commit");
    let side = gap_auditor::handover::retired::side_topic(&handover);
    let on_side = {
        let (side, topic) = (side.clone(), s.topic.clone());
        tokio::task::spawn_blocking(move || side_topic_gaps(&side, &topic))
            .await
            .expect("side task")
    };
    let want: BTreeSet<String> = b_gaps.keys().cloned().collect();
    assert_eq!(on_side, want, "every retired gap is on the side topic");

    // A third owner gets them from the side topic.
    let mut c = Instance::new(&s, "c", &handover);
    c.start();
    tokio::time::sleep(Duration::from_secs(4)).await;
    b.stop();
    wait_settled(&c, SETTLED, "C takes over from B").await;
    assert_eq!(c.metric("gap_auditor_gaps_open").await, RETIRED as f64);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut c_gaps = handed(&c.store);
    while c_gaps != b_gaps && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        c_gaps = handed(&c.store);
    }
    assert_eq!(c_gaps, b_gaps, "C's store holds B's retired gaps");
    c.stop();
}

/// Given-up gaps and live gaps of the held-chunk tests: A's store starts with `HELD_RETIRED`
/// given-up gaps at `1, 3, ..` (chunk 0), then every second record of the `2 * LIVE` after
/// them is lost (live gaps from `HELD_FILL + 1`).
pub(super) const HELD_RETIRED: i64 = 10;
const HELD_FILL: i64 = 2 * HELD_RETIRED;
pub(super) const HELD_END: i64 = HELD_FILL + 2 * LIVE;

/// A has decided and committed the partition (its given-up gaps published as chunk 0); B is
/// created, not started. Returns A's gaps.
pub(super) async fn a_decided(
    name: &str,
) -> (
    Scenario,
    String,
    Instance,
    Instance,
    BTreeMap<String, String>,
) {
    let s = Scenario::with_partitions(name, 1).await;
    let handover = unique("handover");
    let mut a = Instance::new(&s, "a", &handover);
    let b = Instance::new(&s, "b", &handover);
    prefill_retired(&a.store, &s.topic, HELD_RETIRED);
    let topic = s.topic.clone();
    tokio::task::spawn_blocking(move || bulk_produce(&topic, HELD_END))
        .await
        .expect("produce task");
    a.start();
    s.pipeline()
        .start_at(HELD_FILL)
        .records((2 * LIVE) as usize)
        .copies(|o| usize::from(o % 2 == 0))
        .commit_every(25, Duration::ZERO)
        .deadline(Duration::from_secs(120))
        .run()
        .await;
    wait_settled(&a, HELD_END, "A decides the live phase").await;
    let committed = committed_within(&s.auditor_group, &s.topic, HELD_END, 180).await;
    assert_eq!(committed, Some(HELD_END), "A's commit");
    let a_gaps = handed(&a.store);
    assert_eq!(a_gaps.len() as i64, HELD_RETIRED + LIVE);
    (s, handover, a, b, a_gaps)
}

/// A's given-up gaps (chunk 0 of the side topic).
pub(super) fn held_retired_rows(topic: &str) -> Vec<Gap> {
    (0..HELD_RETIRED)
        .map(|i| open_gap(super::handover_idle::AUDIT, topic, 2 * i + 1, 2 * i + 1))
        .collect()
}

/// B takes over from A and ends its import; B's `gaps_open` must then stay `want`.
async fn b_imports(a: &mut Instance, b: &mut Instance, want: f64, what: &str) {
    b.start();
    tokio::time::sleep(Duration::from_secs(4)).await;
    a.stop();
    wait_settled(b, HELD_END, "B takes over from A").await;
    let done = "the previous owner's retired gaps are in the store";
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !b.log_text().contains(done) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        b.log_text().contains(done),
        "B imports; log tail:\n{}",
        tail(&b.log_text(), 30)
    );
    // Then its gauges count from its store: every sample while B owns the partition (a
    // late rebalance of the two instances' group can leave it a moment without the
    // partition, its series gone: not a count), ten of them.
    let (mut seen, mut samples) = (0, 0);
    while seen < 10 && samples < 40 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        samples += 1;
        let Some(open) = b.metric_owned("gap_auditor_gaps_open").await else {
            continue;
        };
        seen += 1;
        assert_eq!(
            open,
            want,
            "{what}; B log tail:\n{}",
            tail(&b.log_text(), 30)
        );
    }
    assert_eq!(
        seen, 10,
        "B owned the partition for ten samples of {samples}"
    );
}

/// Review item 3 of format 3: the previous owner published the chunk of a gap it retired
/// and stopped before the state that retired it, so the state the next owner takes over
/// still holds that gap in memory while the side topic has it retired. The next owner must
/// not import it as retired: it would count twice (`gaps_open` one too high for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_chunk_gap_the_taken_over_ledger_holds_is_not_counted_twice() {
    use gap_auditor::handover::retired;
    let (s, handover, mut a, mut b, a_gaps) = a_decided("handover_held_chunk").await;
    // The crash between chunk and state: chunk 0 as A would publish it had it retired its
    // live gap at HELD_FILL + 1 (A's ledger, and so its state, still holds that gap).
    let held = open_gap(
        super::handover_idle::AUDIT,
        &s.topic,
        HELD_FILL + 1,
        HELD_FILL + 1,
    );
    assert!(
        a_gaps[&held.id].contains("retired=0"),
        "{:?}",
        a_gaps.get(&held.id)
    );
    let mut rows = held_retired_rows(&s.topic);
    rows.push(held.clone());
    assert!(rows.iter().all(|g| retired::chunk_of(g.first_offset) == 0));
    let tp = gap_auditor::types::TopicPartition::new(s.topic.clone(), 0);
    let (term, owner) = state_writer(&handover, &tp).await;
    publish_raw_chunk(
        &handover,
        &retired::RetiredChunk {
            term,
            ..retired::chunks(
                super::handover_idle::AUDIT,
                &tp,
                rows,
                &owner,
                chrono::Utc::now(),
            )
            .remove(0)
        },
    );
    b_imports(
        &mut a,
        &mut b,
        (HELD_RETIRED + LIVE) as f64,
        "B counts the gap its ledger holds once",
    )
    .await;
    let b_gaps = handed(&b.store);
    assert!(
        b_gaps.get(&held.id).is_none_or(|v| v.contains("retired=0")),
        "B's row of the held gap is not retired: {:?}",
        b_gaps.get(&held.id)
    );
    b.stop();
}

/// The term of partition `tp`'s newest state on `handover`, as a reader finds it: the term
/// whose chunk keys that state names.
pub(super) async fn state_term(handover: &str, tp: &gap_auditor::types::TopicPartition) -> u64 {
    state_writer(handover, tp).await.0
}

/// The term and owner of partition `tp`'s newest state on `handover`: whose chunk keys it
/// names.
pub(super) async fn state_writer(
    handover: &str,
    tp: &gap_auditor::types::TopicPartition,
) -> (u64, String) {
    let st = newest_state(handover, tp).await;
    (st.term, st.owner)
}

/// Partition `tp`'s newest state on `handover`.
pub(super) async fn newest_state(
    handover: &str,
    tp: &gap_auditor::types::TopicPartition,
) -> gap_auditor::handover::PartitionState {
    use gap_auditor::handover::Handover;
    let h = Handover::new(
        &gap_auditor::config::KafkaConfig {
            brokers: kafka(),
            ..Default::default()
        },
        handover,
    )
    .expect("handover client");
    let t = tp.clone();
    let mut states = tokio::task::spawn_blocking(move || h.read(super::handover_idle::AUDIT, &[t]))
        .await
        .expect("read task")
        .expect("read the handover topic");
    states.remove(tp).expect("a state")
}

/// Publishes `c` to the side topic as it is (its term included), as an owner of that term.
pub(super) fn publish_raw_chunk(handover: &str, c: &gap_auditor::handover::retired::RetiredChunk) {
    use gap_auditor::handover::retired::{chunk_key, encode_chunk};
    publish_raw(
        handover,
        &chunk_key(&c.audit, &c.tp(), c.chunk, c.term, &c.owner),
        &encode_chunk(c),
    );
}

/// Publishes value `v` under key `k` to the side topic of `handover`.
fn publish_raw(handover: &str, k: &[u8], v: &[u8]) {
    use gap_auditor::handover::retired::side_topic;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let p: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .create()
        .expect("producer");
    p.send(
        BaseRecord::to(&side_topic(handover))
            .partition(0)
            .key(k)
            .payload(v),
    )
    .expect("enqueue");
    p.flush(Duration::from_secs(10)).expect("flush");
}

/// Review of format 3, F5: the newest version of chunk 0 on the side topic does not decode
/// (damaged, or written by a newer binary). Before, the import skipped it with an ERROR and
/// applied the older version before it, so B counted gaps that version may no longer hold
/// and, with no older version, none at all: given-up gaps silently left out. Now an
/// `unverifiable` stand-in gap over chunk 0's offsets replaces the chunk in B's store (it
/// blocks completeness until acknowledged), and the older version's rows are not kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreadable_chunk_leaves_an_unverifiable_stand_in() {
    use gap_auditor::handover::retired;
    let (s, handover, mut a, mut b, _) = a_decided("handover_unreadable_chunk").await;
    let tp = gap_auditor::types::TopicPartition::new(s.topic.clone(), 0);
    let (term, owner) = state_writer(&handover, &tp).await;
    publish_raw(
        &handover,
        &retired::chunk_key(super::handover_idle::AUDIT, &tp, 0, term, &owner),
        b"{not a chunk",
    );
    b_imports(&mut a, &mut b, LIVE as f64, "B counts the live gaps").await;
    let stand_in =
        retired::unreadable_chunk_gap(super::handover_idle::AUDIT, &tp, 0, chrono::Utc::now());
    let after = handed(&b.store);
    assert!(
        after
            .get(&stand_in.id)
            .is_some_and(|v| v.starts_with("unverifiable") && v.contains("retired=1")),
        "the stand-in in B's store: {:?}",
        after.get(&stand_in.id)
    );
    for g in held_retired_rows(&s.topic) {
        assert!(
            g.id == stand_in.id || !after.contains_key(&g.id),
            "the older version's gap {} is not kept",
            g.id
        );
    }
    b.stop();
}

/// Review item 2 of format 3 and R3 of the supersede's review: versions of chunk 0 written
/// under terms other than the one A's state names, later in the log — a zombie's of an
/// older term, and a newer owner's whose own state never landed (it stopped between its
/// chunks and its first state) — each with a gap at an offset that holds a record. B takes
/// A's state over: it imports only the versions of A's term, so neither gap is imported
/// (a loss invented) and A's gaps are all there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn versions_of_another_term_than_the_states_are_not_imported() {
    use gap_auditor::handover::retired;
    let (s, handover, mut a, mut b, _) = a_decided("handover_zombie_chunk").await;
    let tp = gap_auditor::types::TopicPartition::new(s.topic.clone(), 0);
    let (term, owner) = state_writer(&handover, &tp).await;
    let version = |rows: Vec<Gap>, term: u64, owner: &str| retired::RetiredChunk {
        term,
        ..retired::chunks(
            super::handover_idle::AUDIT,
            &tp,
            rows,
            owner,
            chrono::Utc::now(),
        )
        .remove(0)
    };
    let zombie_gap = open_gap(super::handover_idle::AUDIT, &s.topic, 40, 40);
    let unlanded_gap = open_gap(super::handover_idle::AUDIT, &s.topic, 42, 42);
    let mut stale = held_retired_rows(&s.topic);
    stale.push(zombie_gap.clone());
    publish_raw_chunk(&handover, &version(stale, term - 1, "zombie"));
    let mut unlanded = held_retired_rows(&s.topic);
    unlanded.truncate(3);
    unlanded.push(unlanded_gap.clone());
    publish_raw_chunk(&handover, &version(unlanded, term + 1, "unlanded"));
    // Another owner that computed the same term (review T1: it read the same highest term
    // and its state never landed): same term, its own keys.
    let same_term_gap = open_gap(super::handover_idle::AUDIT, &s.topic, 44, 44);
    let mut same = held_retired_rows(&s.topic);
    same.push(same_term_gap.clone());
    assert_ne!(owner, "same-term");
    publish_raw_chunk(&handover, &version(same, term, "same-term"));
    b_imports(
        &mut a,
        &mut b,
        (HELD_RETIRED + LIVE) as f64,
        "B counts A's gaps and none of the other terms' chunks",
    )
    .await;
    let b_gaps = handed(&b.store);
    for g in [&zombie_gap, &unlanded_gap, &same_term_gap] {
        assert!(!b_gaps.contains_key(&g.id), "{} is not in B's store", g.id);
    }
    b.stop();
}

/// A takeover must not leave a copy of every chunk per owner on the side topic: once B's
/// state under its own term is acknowledged, B tombstones the keys of terms below the one
/// it imported (here a zombie's, under A's term minus one), so compaction keeps at most the
/// current owner's and the previous one's chunks of the partition. The previous owner's
/// (A's term) stay: A may take the partition back under that term (review T4), and B's
/// successor's import tombstones them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takeover_tombstones_the_older_terms_keys_once_its_state_lands() {
    use gap_auditor::handover::retired;
    let (s, handover, mut a, mut b, _) = a_decided("handover_tombstones").await;
    let tp = gap_auditor::types::TopicPartition::new(s.topic.clone(), 0);
    let a_term = state_term(&handover, &tp).await;
    let older = retired::RetiredChunk {
        term: a_term - 1,
        ..retired::chunks(
            super::handover_idle::AUDIT,
            &tp,
            held_retired_rows(&s.topic),
            "zombie",
            chrono::Utc::now(),
        )
        .remove(0)
    };
    publish_raw_chunk(&handover, &older);
    let side = retired::side_topic(&handover);
    let read_side = |term: u64| {
        let (side, topic) = (side.clone(), s.topic.clone());
        async move {
            tokio::task::spawn_blocking(move || side_topic_states_of(&side, &topic, Some(term)))
                .await
                .expect("side task")
        }
    };
    let before = read_side(a_term).await;
    assert_eq!(before.len() as i64, HELD_RETIRED, "{before:?}");
    assert_eq!(read_side(a_term - 1).await.len() as i64, HELD_RETIRED);
    b_imports(
        &mut a,
        &mut b,
        (HELD_RETIRED + LIVE) as f64,
        "B counts A's gaps",
    )
    .await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let (mut b_term, mut left) = (a_term, before.clone());
    while (b_term <= a_term || !left.is_empty()) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        b_term = state_term(&handover, &tp).await;
        left = read_side(a_term - 1).await;
    }
    assert!(b_term > a_term, "B's state lands under its term");
    assert!(
        left.is_empty(),
        "the older term's keys are tombstoned: {left:?}; B log tail:\n{}",
        tail(&b.log_text(), 30)
    );
    assert_eq!(read_side(a_term).await, before, "A's chunks stay");
    assert_eq!(read_side(b_term).await, before, "B's chunks hold A's gaps");
    b.stop();
}

/// Review item 2 of format 3: the import applies a chunk's newest version of the state's
/// term whole: a gap an older version had (here A's own, published by A's sweep) and the
/// newest version lacks (resolved or let go there) does not stay in B's store.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gap_the_newest_chunk_version_lacks_is_not_kept() {
    use gap_auditor::handover::retired;
    let (s, handover, mut a, mut b, _) = a_decided("handover_newest_chunk").await;
    let tp = gap_auditor::types::TopicPartition::new(s.topic.clone(), 0);
    let mut rows = held_retired_rows(&s.topic);
    let dropped = rows.pop().expect("a given-up gap");
    let (term, owner) = state_writer(&handover, &tp).await;
    let newest = retired::RetiredChunk {
        term,
        ..retired::chunks(
            super::handover_idle::AUDIT,
            &tp,
            rows,
            &owner,
            chrono::Utc::now(),
        )
        .remove(0)
    };
    publish_raw_chunk(&handover, &newest);
    b_imports(
        &mut a,
        &mut b,
        (HELD_RETIRED - 1 + LIVE) as f64,
        "B counts the newest version's gaps",
    )
    .await;
    assert!(
        !handed(&b.store).contains_key(&dropped.id),
        "the gap the newest version lacks is not in B's store"
    );
    b.stop();
}

/// Review item 2 of format 3: B's store holds a stale given-up gap of a partition another
/// owner (A) has owned since; taking A's format-3 state over, B must not sweep its store's
/// rows to the side topic over A's newer chunk (a next owner would lose A's version).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_takeover_of_another_owners_state_does_not_sweep_over_its_chunks() {
    use gap_auditor::handover::retired;
    const END: i64 = 2 * LIVE;
    const AT: i64 = 1000;
    let s = Scenario::with_partitions("handover_no_sweep_over", 1).await;
    let handover = unique("handover");
    let mut a = Instance::new(&s, "a", &handover);
    let mut b = Instance::new(&s, "b", &handover);
    // B's stale row: given up while B owned the partition long ago, its records arrived
    // late since (a row a takeover keeps). (Not acknowledged: an acknowledgement B reads
    // at its start republishes the chunk from B's store, a path this test does not cover.)
    let mut stale = open_gap(super::handover_idle::AUDIT, &s.topic, AT, AT);
    stale.state = GapState::Late;
    {
        std::fs::create_dir_all(&b.store).expect("store dir");
        let st = Store::open(&b.store).expect("store");
        st.commit_round_retiring(
            super::handover_idle::AUDIT,
            std::slice::from_ref(&stale),
            &[],
            gap_auditor::store::KeyClaims::<&[u8]>::Changes(&[]),
            std::slice::from_ref(&stale.id),
            &[],
        )
        .expect("B's stale row");
    }
    let topic = s.topic.clone();
    tokio::task::spawn_blocking(move || bulk_produce(&topic, END))
        .await
        .expect("produce task");
    a.start();
    s.pipeline()
        .records(END as usize)
        .copies(|o| usize::from(o % 2 == 0))
        .commit_every(25, Duration::ZERO)
        .deadline(Duration::from_secs(120))
        .run()
        .await;
    wait_settled(&a, END, "A decides").await;
    let committed = committed_within(&s.auditor_group, &s.topic, END, 180).await;
    assert_eq!(committed, Some(END), "A's commit");
    // A's newer version of that chunk: another gap there, acknowledged (not counted, so
    // A's state carries no retired aggregate).
    let tp = gap_auditor::types::TopicPartition::new(s.topic.clone(), 0);
    let mut newer = open_gap(super::handover_idle::AUDIT, &s.topic, AT + 2, AT + 2);
    newer.state = GapState::Acknowledged;
    newer.ack_reason = Some("A's".into());
    let (term, owner) = state_writer(&handover, &tp).await;
    let chunk = retired::RetiredChunk {
        term,
        ..retired::chunks(
            super::handover_idle::AUDIT,
            &tp,
            vec![newer.clone()],
            &owner,
            chrono::Utc::now(),
        )
        .remove(0)
    };
    publish_raw_chunk(&handover, &chunk);
    b.start();
    tokio::time::sleep(Duration::from_secs(4)).await;
    a.stop();
    wait_settled(&b, END, "B takes over from A").await;
    // B commits (nothing held it) with its first base: any sweep was before.
    let committed = committed_within(&s.auditor_group, &s.topic, END, 60).await;
    assert_eq!(committed, Some(END), "B's commit");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let side = retired::side_topic(&handover);
    let on_side = {
        let topic = s.topic.clone();
        tokio::task::spawn_blocking(move || side_topic_gaps(&side, &topic))
            .await
            .expect("side task")
    };
    assert_eq!(
        on_side,
        BTreeSet::from([newer.id.clone()]),
        "A's chunk stays the latest; B log tail:\n{}",
        tail(&b.log_text(), 30)
    );
    b.stop();
}

/// "Every restart rescans" (review of format 3): the owner id was `host:pid`, so an
/// instance restarted on its own store took its own format-3 state for another owner's and
/// imported (scanned) the side topic for every partition, held meanwhile. The owner id is
/// now kept in the store: A, stopped and started again, takes its own state back, keeps
/// its given-up gaps' rows and counts them, and imports nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_owner_takes_its_own_state_back_without_an_import() {
    let (_s, _handover, mut a, _b, a_gaps) = a_decided("handover_restart_own").await;
    let imported = "the previous owner's retired gaps are in the store";
    let taken = "partition state taken over from its previous owner";
    assert!(!a.log_text().contains(imported), "A never imported");
    let before = a.log_text().matches(taken).count();
    a.stop();
    a.start();
    wait_settled(&a, HELD_END, "A takes its partition back").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while a.log_text().matches(taken).count() <= before && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        a.log_text().matches(taken).count() > before,
        "A takes its own state from the handover topic; log tail:\n{}",
        tail(&a.log_text(), 30)
    );
    // A few rounds: no import, every gap counted, the store as before.
    for _ in 0..8 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            a.metric("gap_auditor_gaps_open").await,
            (HELD_RETIRED + LIVE) as f64,
            "A counts its gaps; log tail:\n{}",
            tail(&a.log_text(), 30)
        );
    }
    assert!(
        !a.log_text().contains(imported),
        "A imported its own given-up gaps again; log tail:\n{}",
        tail(&a.log_text(), 30)
    );
    a.stop();
    assert_eq!(handed(&a.store), a_gaps, "A's store as before the restart");
}

/// The latest chunk of each key of partition 0 of `topic` on `side`: gap id → state.
pub(super) fn side_topic_states(side: &str, topic: &str) -> BTreeMap<String, String> {
    side_topic_states_of(side, topic, None)
}

/// As [`side_topic_states`], of the keys of `term` only (`None`: every term).
pub(super) fn side_topic_states_of(
    side: &str,
    topic: &str,
    term: Option<u64>,
) -> BTreeMap<String, String> {
    use gap_auditor::handover::retired::decode_chunk;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    let c: BaseConsumer = group_client(&unique("side_reader"))
        .create()
        .expect("reader");
    let Ok((_, high)) = c.fetch_watermarks(side, 0, Duration::from_secs(10)) else {
        return BTreeMap::new();
    };
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(side, 0, rdkafka::Offset::Beginning)
        .expect("tpl");
    c.assign(&tpl).expect("assign");
    let mut latest: BTreeMap<Vec<u8>, Vec<(String, String)>> = BTreeMap::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut reached = 0;
    while reached < high && std::time::Instant::now() < deadline {
        let Some(m) = c.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.expect("read the side topic");
        reached = m.offset() + 1;
        let Some(k) = m.key() else {
            continue;
        };
        let Some(v) = m.payload() else {
            // A tombstone: the key holds nothing any more.
            latest.remove(k);
            continue;
        };
        let chunk = decode_chunk(k, v).expect("a chunk decodes");
        if chunk.topic == topic && term.is_none_or(|t| t == chunk.term) {
            latest.insert(
                k.to_vec(),
                chunk
                    .gaps
                    .into_iter()
                    .map(|g| (g.id, g.state.as_str().to_string()))
                    .collect(),
            );
        }
    }
    latest.into_values().flatten().collect()
}

/// Review item 9 of format 3: a store write that retires gaps (or marks an acknowledged
/// one) notes their chunks before it; an owner stopped before their publish republishes
/// those chunks at its next start, before its first state (before, the write cleared the
/// partition's swept mark and the restart swept every given-up gap of it). Here: A's store
/// holds given-up gap 1 changed (made unrecoverable: nothing at a start rewrites its chunk
/// for another reason, as the full reload of acknowledgements would) and the note of its
/// chunk, as a crash right after that write would leave it; restarted, A publishes chunk 0
/// with the gap unrecoverable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_chunk_noted_before_a_crash_is_published_at_the_next_start() {
    let (s, handover, mut a, _b, _a_gaps) = a_decided("handover_noted_chunk").await;
    a.stop();
    let side = gap_auditor::handover::retired::side_topic(&handover);
    let gap1 = gap_auditor::gap::Gap::make_id(super::handover_idle::AUDIT, &s.topic, 0, 1);
    let (sd, t) = (side.clone(), s.topic.clone());
    let before = tokio::task::spawn_blocking(move || side_topic_states(&sd, &t))
        .await
        .expect("read task");
    assert_eq!(
        before.get(&gap1).map(String::as_str),
        Some("open"),
        "{before:?}"
    );
    {
        let store = Store::open(&a.store).expect("store");
        let mut noted = gap_auditor::store::PartitionChunks::new();
        noted.insert((s.topic.clone(), 0), BTreeSet::from([0]));
        store
            .note_unpublished_chunks(&handover, super::handover_idle::AUDIT, &noted)
            .expect("note");
        drop(store);
        let conn =
            rusqlite::Connection::open(a.store.join(gap_auditor::store::DB_FILE)).expect("db");
        let n = conn
            .execute(
                "UPDATE gaps SET state = 'unrecoverable',
                    unrecoverable_at = '2026-12-06T00:00:00.000000000Z' WHERE id = ?1",
                [&gap1],
            )
            .expect("unrecoverable");
        assert_eq!(n, 1);
    }
    a.start();
    wait_settled(&a, HELD_END, "A takes its partition back").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut after = BTreeMap::new();
    while std::time::Instant::now() < deadline {
        let (sd, t) = (side.clone(), s.topic.clone());
        after = tokio::task::spawn_blocking(move || side_topic_states(&sd, &t))
            .await
            .expect("read task");
        if after.get(&gap1).map(String::as_str) == Some("unrecoverable") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(
        after.get(&gap1).map(String::as_str),
        Some("unrecoverable"),
        "the noted chunk was not published again; A log tail:\n{}",
        tail(&a.log_text(), 30)
    );
    assert_eq!(after.len(), before.len(), "{after:?}");
    let left = Store::open(&a.store)
        .expect("store")
        .unpublished_chunks(&handover, super::handover_idle::AUDIT)
        .expect("notes");
    assert!(left.is_empty(), "the note stays: {left:?}");
    a.stop();
}
