//! Keeps the benchmark harness (`src/bin/bench/`) from rotting: runs it in `--smoke` mode
//! (20k records, tiny ledgers, 20k-row MariaDB tables, 20k records end to end per
//! strategy, 5 injected losses, 10 partitions through the daemon binary) against the test
//! broker and MariaDB and checks it completes and prints every row of its table. No timing
//! is asserted: the figures of a smoke run mean nothing.

use std::process::Command;
use std::time::Instant;

#[test]
fn bench_smoke_runs_and_prints_the_table() {
    let brokers = std::env::var("GAP_AUDITOR_TEST_KAFKA").expect(
        "GAP_AUDITOR_TEST_KAFKA is not set: run scripts/test.sh (it starts Kafka and MariaDB)",
    );
    let mysql = std::env::var("GAP_AUDITOR_TEST_MYSQL").expect(
        "GAP_AUDITOR_TEST_MYSQL is not set: run scripts/test.sh (it starts Kafka and MariaDB)",
    );
    let started = Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args([
            "--smoke",
            "--brokers",
            &brokers,
            "--mysql",
            &mysql,
            "--daemon",
        ])
        .arg(env!("CARGO_BIN_EXE_gap-auditor"))
        .output()
        .expect("run the bench binary");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench --smoke failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(
        stdout.contains("| Measure | Value | Baseline (same run) | Ratio | Target |"),
        "no table header in:\n{stdout}"
    );
    for row in [
        "Bare BaseConsumer",
        // kcat's row, measured or saying kcat is not installed.
        "| kcat",
        "Auditor tail + decode + ledger, key_columns",
        "Auditor tail + decode + ledger, offset_columns",
        "Decoder::tag, json",
        "Ledger RSS growth",
        "offset_columns round, no loss",
        "offset_columns, locate 1 random missing",
        "offset_columns, locate 100 random missing",
        "key_columns verify",
        "derived rows as a value list (MariaDB) vs UNION ALL SELECT",
        "full batches prepared (MariaDB, binary protocol) vs the same value list as SQL text",
        "CPU per record: tail, key_columns vs bare consumer",
        "CPU per record: tail, offset_columns vs bare consumer",
        "key_columns end to end, real daemon",
        "CPU per record: key_columns daemon",
        "offset_columns end to end, real daemon",
        "offset_columns end to end: settled behind consumed",
        "offset_columns end to end: verify rounds",
        "CPU per record: offset_columns daemon",
        "Detection latency",
        "Scale, verify-round time",
        "Scale, sink queries per round",
        "Scale, daemon RSS",
    ] {
        assert!(stdout.contains(row), "no {row:?} row in:\n{stdout}");
    }
    eprintln!("bench --smoke took {:?}", started.elapsed());
}
