//! Criterion benches of the SQL text builders: literal escaping and the per-batch key
//! query (`sql::count_keys_joined`, the shipped form, and `sql::count_keys`, the CASE form
//! it replaced; 1000 keys) and the offset range count. `cargo bench --bench sql`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gap_auditor::ledger::OffsetRun;
use gap_auditor::sink::sql::{self, OffsetQuery};
use std::hint::black_box;

fn escaping(c: &mut Criterion) {
    let plain: Vec<String> = (0..1_000).map(|i| format!("h{i:08}.example.io")).collect();
    let nasty: Vec<String> = (0..1_000)
        .map(|i| format!("it's a \"{i}\"\\ \n\0 value"))
        .collect();
    let mut g = c.benchmark_group("sql_string_literal");
    g.throughput(Throughput::Elements(1_000));
    for (name, values) in [("plain", &plain), ("needs_escaping", &nasty)] {
        g.bench_function(name, |b| {
            b.iter(|| {
                for v in values {
                    black_box(sql::string_literal(v, false));
                }
            })
        });
    }
    g.finish();
}

fn queries(c: &mut Criterion) {
    let columns: Vec<String> = ["client_ip", "domain", "time"].map(String::from).into();
    let keys: Vec<Vec<String>> = (0..1_000)
        .map(|i| {
            vec![
                format!("10.0.{}.{}", i / 256, i % 256),
                format!("h{i:08}.example.io"),
                format!("12:{:02}:{:02}", (i / 60) % 60, i % 60),
            ]
        })
        .collect();
    let refs: Vec<&[String]> = keys.iter().map(Vec::as_slice).collect();
    let mut g = c.benchmark_group("sql_queries");
    g.bench_function("count_keys_joined_1000", |b| {
        b.iter(|| {
            black_box(sql::count_keys_joined(
                "db.dns_logs",
                &columns,
                &[],
                sql::KeyRows::Values,
                &refs,
                false,
            ))
        })
    });
    g.bench_function("count_keys_1000", |b| {
        b.iter(|| black_box(sql::count_keys("db.dns_logs", &columns, &refs, false)))
    });
    // Every second offset filtered: the runs are bridged into one range and a NOT IN list.
    let interleaved: Vec<OffsetRun> = (0..4_000).map(|i| OffsetRun::new(2 * i, 2 * i)).collect();
    let q = OffsetQuery {
        table: "db.dns_logs",
        partition_column: "kafka_partition",
        offset_column: "kafka_offset",
        topic_column: Some("kafka_topic"),
        topic: "dns",
        partition: 3,
    };
    let runs: Vec<OffsetRun> = (0..256)
        .map(|i| OffsetRun::new(i * 10, i * 10 + 5))
        .collect();
    g.bench_function("count_offsets_256_runs", |b| {
        b.iter(|| black_box(sql::count_offsets(&q, &runs, false)))
    });
    g.bench_function("count_offsets_4000_interleaved", |b| {
        b.iter(|| black_box(sql::count_offsets(&q, &interleaved, false)))
    });
    g.finish();
}

criterion_group!(benches, escaping, queries);
criterion_main!(benches);
