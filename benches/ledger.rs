//! Criterion benches of the pure ledger: ingest, the due rule, a whole
//! ingest → due → apply cycle (what one verify round does per partition), and the key
//! book's share of a key_columns round (pends entered, then every due key decided).
//!
//! `cargo bench --bench ledger`. Built (not timed) by `cargo test --all-targets`.

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use gap_auditor::ledger::{KeyBook, Observed, PartitionLedger, PipelineCommits, Verdict};
use gap_auditor::types::Key;
use std::hint::black_box;

const N: i64 = 10_000;

fn key(i: i64) -> Key {
    Key::new([
        format!("10.0.{}.{}", (i / 256) % 256, i % 256),
        format!("h{i:08}.example.io"),
        format!("12:{:02}:{:02}", (i / 60) % 60, i % 60),
    ])
}

fn filled(keyed: bool) -> PartitionLedger {
    let mut l = PartitionLedger::new(0, keyed);
    for o in 0..N {
        let key = keyed.then(|| key(o));
        l.ingest(o, Some(1_000), Observed::Expected { key }, 1_000);
    }
    l
}

fn ingest(c: &mut Criterion) {
    let mut g = c.benchmark_group("ledger_ingest");
    g.throughput(Throughput::Elements(N as u64));
    g.bench_function("contiguous_unkeyed", |b| {
        b.iter(|| black_box(filled(false)).pending())
    });
    let keys: Vec<Key> = (0..N).map(key).collect();
    g.bench_function("contiguous_keyed", |b| {
        b.iter_batched(
            || keys.clone(),
            |keys| {
                let mut l = PartitionLedger::new(0, true);
                for (o, k) in keys.into_iter().enumerate() {
                    let o = o as i64;
                    l.ingest(o, Some(1_000), Observed::Expected { key: Some(k) }, 1_000);
                }
                black_box(l.pending())
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

fn due_rule(c: &mut Criterion) {
    let mut g = c.benchmark_group("due_rule");
    // The frontier of a partition with a commit observed every second for 10 minutes.
    g.bench_function("frontier_600_observations", |b| {
        b.iter_batched(
            || {
                let mut p = PipelineCommits::default();
                for s in 0..600i64 {
                    p.observe(s * 1_000, Some(s * 100));
                }
                p
            },
            |mut p| black_box(p.frontier(600_000, 30_000)),
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn round(c: &mut Criterion) {
    let mut g = c.benchmark_group("ledger_round");
    g.throughput(Throughput::Elements(N as u64));
    for keyed in [false, true] {
        let name = if keyed { "keyed" } else { "unkeyed" };
        // A round in which every record is due and found: due() then apply().
        g.bench_function(format!("due_apply_all_present_{name}"), |b| {
            b.iter_batched(
                || {
                    let mut l = filled(keyed);
                    l.pipeline.observe(1_000, Some(N));
                    l
                },
                |mut l| {
                    let segs = l.due(100_000, 0, u64::MAX);
                    let verdicts: Vec<Verdict> = segs
                        .iter()
                        .map(|s| Verdict::Known {
                            present: vec![s.run],
                            duplicate_rows: 0,
                            shared_keys: Vec::new(),
                            stand_ins: Vec::new(),
                        })
                        .collect();
                    black_box(l.apply(&verdicts, 100_000))
                },
                BatchSize::LargeInput,
            )
        });
    }
    g.finish();
}

/// Keys a key_columns round decides (4 partitions of 100,000: the daemon's round limit at
/// the default `batch_size`).
const ROUND_KEYS: i64 = 400_000;

/// A round of the key book on key_columns: [`ROUND_KEYS`] new records pended, then every
/// one decided found (its key's row counted once), in a book that already holds a million
/// decided keys (its idle capacity), as in the daemon's steady state. The daemon settles
/// the pends at the round's first call on the book and decides partition by partition.
fn key_book_round(c: &mut Criterion) {
    let mut g = c.benchmark_group("key_book");
    g.sample_size(10);
    g.throughput(Throughput::Elements(ROUND_KEYS as u64));
    let warm = {
        let mut book = KeyBook::new(1_000_000);
        let keys: Vec<Key> = (0..1_000_000).map(|i| key(-1 - i)).collect();
        for k in &keys {
            book.pend(k);
        }
        let asks: Vec<(&Key, u64, u64)> = keys.iter().map(|k| (k, 1, 1)).collect();
        book.decide_due_all(&asks);
        // Written to the store, as every round's end does.
        book.persisted();
        book
    };
    let fresh: Vec<Key> = (0..ROUND_KEYS).map(key).collect();
    g.bench_function("pend_and_decide_400k_in_a_1m_book", |b| {
        b.iter_batched(
            || warm.clone(),
            |mut book| {
                for k in &fresh {
                    book.pend(k);
                }
                for part in fresh.chunks(ROUND_KEYS as usize / 4) {
                    let asks: Vec<(&Key, u64, u64)> = part.iter().map(|k| (k, 1, 1)).collect();
                    black_box(book.decide_due_all(&asks));
                }
                book
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, ingest, due_rule, round, key_book_round);
criterion_main!(benches);
