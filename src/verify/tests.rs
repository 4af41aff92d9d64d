use super::*;
use crate::sink::memory::MemorySink;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

fn tp() -> TopicPartition {
    TopicPartition::new("t", 0)
}

fn seg(a: Offset, b: Offset) -> Segment {
    Segment {
        run: OffsetRun::new(a, b),
        keys: Vec::new(),
        max_ts: None,
    }
}

fn present_of(v: &[Verdict]) -> Vec<Offset> {
    v.iter()
        .flat_map(|v| match v {
            Verdict::Known { present, .. } => {
                present.iter().flat_map(|r| r.first..=r.last).collect()
            }
            Verdict::Unknown => Vec::new(),
        })
        .collect()
}

fn dups_of(v: &[Verdict]) -> u64 {
    v.iter()
        .map(|v| match v {
            Verdict::Known { duplicate_rows, .. } => *duplicate_rows,
            Verdict::Unknown => 0,
        })
        .sum()
}

#[tokio::test]
async fn no_loss_costs_one_query_per_partition() {
    let sink = MemorySink::new();
    for o in 0..100_000 {
        sink.insert_offset("t", 0, o);
    }
    let n = AtomicUsize::new(0);
    let obs = |_d: Duration, _ok: bool| {
        n.fetch_add(1, Ordering::Relaxed);
    };
    let segs = vec![seg(0, 49_999), seg(50_000, 99_999)];
    let v = by_offsets(&sink, &tp(), &segs, Limits::from_batch_size(1000), &obs)
        .await
        .expect("ok");
    assert_eq!(present_of(&v).len(), 100_000);
    assert_eq!(n.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn rows_at_unexpected_offsets_never_compensate() {
    let sink = MemorySink::new();
    // Expected: 0 and 2 (1 is filtered). Sink: 0 and 1 (the filtered one, written anyway).
    sink.insert_offset("t", 0, 0);
    sink.insert_offset("t", 0, 1);
    let segs = vec![seg(0, 0), seg(2, 2)];
    let v = by_offsets(
        &sink,
        &tp(),
        &segs,
        Limits::from_batch_size(1000),
        &|_, _| {},
    )
    .await
    .expect("ok");
    assert_eq!(present_of(&v), vec![0]);
}

#[tokio::test]
async fn a_duplicate_never_hides_a_missing_offset() {
    let sink = MemorySink::new();
    for o in [0, 1, 1, 3] {
        sink.insert_offset("t", 0, o);
    }
    let v = by_offsets(
        &sink,
        &tp(),
        &[seg(0, 3)],
        Limits::from_batch_size(1000),
        &|_, _| {},
    )
    .await
    .expect("ok");
    assert_eq!(present_of(&v), vec![0, 1, 3]);
    assert_eq!(dups_of(&v), 1);
}

#[tokio::test]
async fn bisection_queries_grow_with_log_of_the_range() {
    let sink = MemorySink::new();
    for o in 0..1_000_000 {
        if o != 777_777 {
            sink.insert_offset("t", 0, o);
        }
    }
    let n = AtomicUsize::new(0);
    let obs = |_d: Duration, _ok: bool| {
        n.fetch_add(1, Ordering::Relaxed);
    };
    let v = by_offsets(
        &sink,
        &tp(),
        &[seg(0, 999_999)],
        Limits::from_batch_size(1000),
        &obs,
    )
    .await
    .expect("ok");
    assert_eq!(present_of(&v).len(), 999_999);
    assert!(!present_of(&v).contains(&777_777));
    let q = n.load(Ordering::Relaxed);
    assert!(q <= 12, "{q} queries");
}

/// A sink whose rows land while a round is bisecting: the right half's derived count
/// (parent − left) reads 0 although its rows are there by now.
struct Landing {
    inner: MemorySink,
    queries: AtomicUsize,
}

impl Verifier for Landing {
    fn kind(&self) -> &'static str {
        "landing"
    }
    async fn ping(&self) -> Result<(), SinkError> {
        Ok(())
    }
    async fn count_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<RangeCount, SinkError> {
        // After the first (parent) query, offsets 0..=9 land.
        if self.queries.fetch_add(1, Ordering::SeqCst) == 1 {
            for o in 0..10 {
                self.inner.insert_offset("t", 0, o);
            }
        }
        self.inner.count_offsets(tp, runs).await
    }
    async fn list_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<Vec<(Offset, u64)>, SinkError> {
        self.inner.list_offsets(tp, runs).await
    }
    async fn count_keys(&self, keys: &[&Key]) -> Result<Vec<u64>, SinkError> {
        self.inner.count_keys(keys).await
    }
}

#[tokio::test]
async fn a_derived_zero_is_asked_about_not_declared_missing() {
    // Parent 0..=19: 10..=19 present (distinct 10 of 20). Then 0..=9 land; the left half
    // 0..=9 now counts 10, so the derived right half 10..=19 reads 0 — yet all are there.
    let sink = Landing {
        inner: MemorySink::new(),
        queries: AtomicUsize::new(0),
    };
    for o in 10..20 {
        sink.inner.insert_offset("t", 0, o);
    }
    let limits = Limits {
        batch_size: 10,
        max_key_bytes: 1 << 20,
        max_runs_per_query: 8,
        list_threshold: 1,
    };
    let v = by_offsets(&sink, &tp(), &[seg(0, 19)], limits, &|_, _| {})
        .await
        .expect("ok");
    assert_eq!(present_of(&v), (0..20).collect::<Vec<_>>());
}

#[tokio::test]
async fn errors_are_unknown_not_missing() {
    let sink = MemorySink::new();
    sink.set_down(true);
    let r = by_offsets(
        &sink,
        &tp(),
        &[seg(0, 3)],
        Limits::from_batch_size(10),
        &|_, _| {},
    )
    .await;
    assert!(r.is_err());
    let mut b = KeyBook::new(10);
    let s = Segment {
        run: OffsetRun::new(0, 0),
        keys: vec![Key::new(["a"])],
        max_ts: None,
    };
    pended(&mut b, std::slice::from_ref(&s));
    assert!(
        by_keys(
            &sink,
            &[s],
            &mut b,
            KeyRound::Due,
            Limits::from_batch_size(10),
            &|_, _| {}
        )
        .await
        .is_err()
    );
    assert_eq!(
        b.counts(&Key::new(["a"])),
        (1, 0, 0),
        "an error decides nothing"
    );
}

fn kseg(first: Offset, keys: &[&str]) -> Segment {
    Segment {
        run: OffsetRun::new(first, first + keys.len() as Offset - 1),
        keys: keys.iter().map(|k| Key::new([k])).collect(),
        max_ts: None,
    }
}

/// Ingests the segments' keys into the book (the daemon does it as it reads them).
fn pended(book: &mut KeyBook, segs: &[Segment]) {
    for s in segs {
        for k in &s.keys {
            book.pend(k);
        }
    }
}

async fn due_keys(sink: &MemorySink, book: &mut KeyBook, segs: &[Segment]) -> Vec<Verdict> {
    by_keys(
        sink,
        segs,
        book,
        KeyRound::Due,
        Limits::from_batch_size(2),
        &|_, _| {},
    )
    .await
    .expect("ok")
}

async fn recheck_keys(sink: &MemorySink, book: &mut KeyBook, segs: &[Segment]) -> Vec<Verdict> {
    by_keys(
        sink,
        segs,
        book,
        KeyRound::Recheck,
        Limits::from_batch_size(2),
        &|_, _| {},
    )
    .await
    .expect("ok")
}

#[tokio::test]
async fn repeated_keys_are_a_multiplicity() {
    let sink = MemorySink::new();
    sink.insert_key(&Key::new(["a"]));
    let mut b = KeyBook::new(100);
    // Two records with key a, one row: one of them is missing, and it says so.
    let segs = [kseg(0, &["a", "b", "a"])];
    pended(&mut b, &segs);
    let v = due_keys(&sink, &mut b, &segs).await;
    assert_eq!(present_of(&v), vec![0]);
    assert!(
        matches!(&v[0], Verdict::Known { shared_keys, .. } if shared_keys == &vec![OffsetRun::new(2, 2)]),
        "{v:?}"
    );
    // A later record with key a: the one row is already held by offset 0.
    let segs = [kseg(3, &["a"])];
    pended(&mut b, &segs);
    let v = due_keys(&sink, &mut b, &segs).await;
    assert!(present_of(&v).is_empty());
}

#[tokio::test]
async fn a_shared_key_across_partitions_and_rounds_is_no_loss() {
    // FINDINGS: one key on p0 and p1 (A and AAAA in one second), both rows present.
    let sink = MemorySink::new();
    let a = Key::new(["a"]);
    sink.insert_key(&a);
    sink.insert_key(&a);
    let mut b = KeyBook::new(100);
    let p0 = [kseg(0, &["a"])];
    let p1 = [kseg(0, &["a"])];
    pended(&mut b, &p0);
    pended(&mut b, &p1);
    let v0 = due_keys(&sink, &mut b, &p0).await;
    assert_eq!((present_of(&v0), dups_of(&v0)), (vec![0], 0));
    let v1 = due_keys(&sink, &mut b, &p1).await;
    assert_eq!((present_of(&v1), dups_of(&v1)), (vec![0], 0));
}

#[tokio::test]
async fn rechecks_find_late_rows_of_shared_keys() {
    let sink = MemorySink::new();
    let a = Key::new(["a"]);
    sink.insert_key(&a);
    let mut b = KeyBook::new(100);
    let segs = [kseg(0, &["a", "a"])];
    pended(&mut b, &segs);
    let v = due_keys(&sink, &mut b, &segs).await;
    assert_eq!(present_of(&v), vec![0]);
    let missing = [kseg(1, &["a"])];
    assert!(present_of(&recheck_keys(&sink, &mut b, &missing).await).is_empty());
    sink.insert_key(&a);
    assert_eq!(
        present_of(&recheck_keys(&sink, &mut b, &missing).await),
        vec![1]
    );
    assert_eq!(b.counts(&a), (0, 2, 0));
}

#[tokio::test]
async fn duplicated_rows_are_counted_once_nothing_waits_for_the_key() {
    let sink = MemorySink::new();
    let a = Key::new(["a"]);
    sink.insert_key(&a);
    sink.insert_key(&a);
    let mut b = KeyBook::new(100);
    let segs = [kseg(0, &["a"])];
    pended(&mut b, &segs);
    let v = due_keys(&sink, &mut b, &segs).await;
    assert_eq!((present_of(&v), dups_of(&v)), (vec![0], 1));
    // SPEC: never missing while rows >= due + confirmed: the extra row (counted as a
    // duplicate before this record was read) confirms a later record with the key.
    let segs = [kseg(1, &["a"])];
    pended(&mut b, &segs);
    let v = due_keys(&sink, &mut b, &segs).await;
    assert_eq!((present_of(&v), dups_of(&v)), (vec![1], 0));
    let segs = [kseg(2, &["a"])];
    pended(&mut b, &segs);
    let v = due_keys(&sink, &mut b, &segs).await;
    assert!(present_of(&v).is_empty(), "two rows, three records");
}

fn idseg(first: Offset, ids: &[&str]) -> Segment {
    kseg(first, ids)
}

#[tokio::test]
async fn ids_found_missing_and_shared() {
    let sink = MemorySink::new();
    for id in ["t+0+0", "t+0+2", "shared"] {
        sink.insert_id(id);
    }
    let n = AtomicUsize::new(0);
    let obs = |_d: Duration, _ok: bool| {
        n.fetch_add(1, Ordering::Relaxed);
    };
    let segs = vec![
        idseg(0, &["t+0+0", "t+0+1", "t+0+2"]),
        idseg(5, &["shared", "shared", "t+0+6"]),
    ];
    let v = by_ids(&sink, &segs, Limits::from_batch_size(2), &obs)
        .await
        .expect("ok");
    assert_eq!(present_of(&v), vec![0, 2, 5, 6]);
    assert_eq!(dups_of(&v), 0);
    // 5 distinct ids in batches of 2: 3 queries.
    assert_eq!(n.load(Ordering::Relaxed), 3);
}

#[tokio::test]
async fn ids_errors_are_unknown_and_keyless_segments_stay_unknown() {
    let sink = MemorySink::new();
    sink.insert_id("a");
    let keyless = seg(0, 1);
    let v = by_ids(
        &sink,
        &[keyless, idseg(2, &["a"])],
        Limits::from_batch_size(10),
        &|_, _| {},
    )
    .await
    .expect("ok");
    assert_eq!(v[0], Verdict::Unknown);
    assert_eq!(present_of(&v[1..]), vec![2]);
    sink.set_down(true);
    assert!(
        by_ids(
            &sink,
            &[idseg(0, &["a"])],
            Limits::from_batch_size(10),
            &|_, _| {}
        )
        .await
        .is_err()
    );
}

#[tokio::test]
async fn sql_sinks_refuse_ids() {
    struct NoIds;
    impl Verifier for NoIds {
        fn kind(&self) -> &'static str {
            "none"
        }
        async fn ping(&self) -> Result<(), SinkError> {
            Ok(())
        }
        async fn count_offsets(
            &self,
            _: &TopicPartition,
            _: &[OffsetRun],
        ) -> Result<RangeCount, SinkError> {
            Ok(RangeCount::default())
        }
        async fn list_offsets(
            &self,
            _: &TopicPartition,
            _: &[OffsetRun],
        ) -> Result<Vec<(Offset, u64)>, SinkError> {
            Ok(Vec::new())
        }
        async fn count_keys(&self, _: &[&Key]) -> Result<Vec<u64>, SinkError> {
            Ok(Vec::new())
        }
    }
    let e = by_ids(
        &NoIds,
        &[idseg(0, &["a"])],
        Limits::from_batch_size(10),
        &|_, _| {},
    )
    .await
    .expect_err("refused");
    assert!(matches!(e, SinkError::Rejected(m) if m.contains("doc_id")));
}

#[test]
fn key_batches_respect_count_and_bytes() {
    let big = Key::new(["x".repeat(100_000)]);
    let small = Key::new(["y"]);
    let keys: Vec<&Key> = vec![&small, &big, &big, &small, &small, &small];
    let limits = Limits {
        batch_size: 2,
        max_key_bytes: 150_000,
        max_runs_per_query: 8,
        list_threshold: 8,
    };
    let b = key_batches(&keys, limits, usize::MAX);
    assert_eq!(
        b.iter().map(|b| b.len()).collect::<Vec<_>>(),
        vec![1, 1, 1, 2, 1]
    );
}

#[test]
fn key_batches_respect_the_sinks_derived_row_bound() {
    let plain = Key::new(["a", "b"]);
    let one_empty = Key::new(["", "b"]);
    let two_empty = Key::new(["", ""]);
    let keys: Vec<&Key> = vec![&plain, &one_empty, &two_empty, &plain, &plain, &two_empty];
    // Weights 1, 2, 4, 1, 1, 4 under a bound of 4 rows per query.
    let b = key_batches(&keys, Limits::from_batch_size(100), 4);
    assert_eq!(
        b.iter().map(|b| b.len()).collect::<Vec<_>>(),
        vec![2, 1, 2, 1]
    );
    // A key heavier than the bound still goes, alone.
    let b = key_batches(&keys, Limits::from_batch_size(100), 1);
    assert_eq!(b.len(), 6);
}

/// A sink that answers key counts several at a time, slowly and out of order, and
/// remembers how many were in flight at once.
struct Concurrent {
    inner: MemorySink,
    in_flight: AtomicUsize,
    most: AtomicUsize,
    calls: AtomicUsize,
}

impl Verifier for Concurrent {
    fn kind(&self) -> &'static str {
        "concurrent"
    }
    async fn ping(&self) -> Result<(), SinkError> {
        Ok(())
    }
    async fn count_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<RangeCount, SinkError> {
        self.inner.count_offsets(tp, runs).await
    }
    async fn list_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<Vec<(Offset, u64)>, SinkError> {
        self.inner.list_offsets(tp, runs).await
    }
    async fn count_keys(&self, keys: &[&Key]) -> Result<Vec<u64>, SinkError> {
        let n = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(n, Ordering::SeqCst);
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        // Earlier batches answer later.
        tokio::time::sleep(Duration::from_millis(20 - (call as u64 % 4) * 5)).await;
        let r = self.inner.count_keys(keys).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        r
    }
    fn max_key_rows(&self) -> usize {
        3
    }
    fn parallelism(&self) -> usize {
        3
    }
}

#[tokio::test]
async fn key_batches_are_counted_concurrently_with_the_same_verdicts() {
    let names: Vec<String> = (0..40).map(|i| format!("k{}", i % 23)).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let segs = [kseg(0, &refs[..20]), kseg(20, &refs[20..])];
    let fill = |sink: &MemorySink| {
        for (i, k) in names.iter().enumerate().take(23) {
            // Some keys have no row, some one, some two.
            for _ in 0..(i % 3) {
                sink.insert_key(&Key::new([k.as_str()]));
            }
        }
    };
    let serial = MemorySink::new();
    fill(&serial);
    let mut book = KeyBook::new(100);
    pended(&mut book, &segs);
    let want = by_keys(
        &serial,
        &segs,
        &mut book,
        KeyRound::Due,
        Limits::from_batch_size(1000),
        &|_, _| {},
    )
    .await
    .expect("ok");
    let concurrent = Concurrent {
        inner: MemorySink::new(),
        in_flight: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
        calls: AtomicUsize::new(0),
    };
    fill(&concurrent.inner);
    let mut book = KeyBook::new(100);
    pended(&mut book, &segs);
    let n = AtomicUsize::new(0);
    let obs = |_d: Duration, _ok: bool| {
        n.fetch_add(1, Ordering::Relaxed);
    };
    let got = by_keys(
        &concurrent,
        &segs,
        &mut book,
        KeyRound::Due,
        Limits::from_batch_size(1000),
        &obs,
    )
    .await
    .expect("ok");
    assert_eq!(got, want);
    // 23 distinct keys, at most 3 per query (the sink's bound): 8 queries, 3 at once.
    assert_eq!(n.load(Ordering::Relaxed), 8);
    assert_eq!(concurrent.most.load(Ordering::SeqCst), 3);
}

proptest! {
    #![proptest_config(crate::test_seed::config())]
    #[test]
    fn offsets_verdict_is_exact(
        sink_rows in prop::collection::vec((0i64..300, 1u64..3), 0..300),
        segs in prop::collection::vec((0i64..300, 0i64..30), 1..8),
        threshold in 1u64..50,
        max_runs in 1usize..5,
    ) {
        let sink = MemorySink::new();
        let mut rows: BTreeMap<Offset, u64> = BTreeMap::new();
        for (o, n) in &sink_rows {
            for _ in 0..*n { sink.insert_offset("t", 0, *o); }
            *rows.entry(*o).or_default() += n;
        }
        let segments: Vec<Segment> = runs::normalize(segs.iter().map(|(a, l)| OffsetRun::new(*a, a + l)).collect())
            .into_iter().map(|r| seg(r.first, r.last)).collect();
        let limits = Limits { batch_size: 10, max_key_bytes: 1 << 20, max_runs_per_query: max_runs, list_threshold: threshold };
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("rt");
        let v = rt.block_on(by_offsets(&sink, &tp(), &segments, limits, &|_, _| {})).expect("ok");
        let want: Vec<Offset> = segments.iter().flat_map(|s| s.run.first..=s.run.last).filter(|o| rows.contains_key(o)).collect();
        let want_dups: u64 = want.iter().map(|o| rows[o] - 1).sum();
        prop_assert_eq!(present_of(&v), want);
        prop_assert_eq!(dups_of(&v), want_dups);
    }
}

mod by_time;
mod slot_order;
mod stand_ins;
