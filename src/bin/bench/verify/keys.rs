//! `key_columns` verification rates: key rounds through the key book, and one key
//! question at a time for comparison.

use super::{
    BATCH_SIZE, Counter, PARTITIONS, Report, ScratchTable, abbreviate, explain, load, secs, sink,
};
use crate::util::row;
use anyhow::{Context, Result, bail};
use gap_auditor::ledger::{KeyBook, OffsetRun, Segment, Verdict};
use gap_auditor::sink::mysql::{MysqlSink, MysqlTarget};
use gap_auditor::sink::sql::{self, KeyCompare, KeyRows};
use gap_auditor::sink::{RangeCount, SinkError, Verifier};
use gap_auditor::types::{Key, TopicPartition};
use gap_auditor::verify::{self, KeyRound, Limits};
use mysql_async::prelude::Queryable;
use std::time::{Duration, Instant};

/// The key of sequence number `i`, exactly as the SQL load builds it: ~40 bytes over
/// (client_ip, domain, time).
fn key_of(i: u64) -> Key {
    Key::new([
        format!("10.{}.{}.{}", (i / 65_536) % 256, (i / 256) % 256, i % 256),
        format!("h{i:08}.example.io"),
        format!("12:{:02}:{:02}.{:03}", (i / 60) % 60, i % 60, i % 1000),
    ])
}

/// key_columns: verifies `asked` keys spread over a table of `total` rows, in batches of
/// `BATCH_SIZE`, through `verify::by_keys`.
pub async fn key_rows(url: &str, total: u64, asked: u64, report: &mut Report) -> Result<()> {
    let mut t = ScratchTable::create(
        url,
        "bench_keys",
        "client_ip VARCHAR(45) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
         domain VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
         time VARCHAR(32) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
         rcode VARCHAR(16) NOT NULL",
    )
    .await?;
    let result = key_rows_on(url, &mut t.conn, &t.name, total, asked, report).await;
    t.remove().await;
    result
}

async fn key_rows_on(
    url: &str,
    conn: &mut mysql_async::Conn,
    table: &str,
    total: u64,
    asked: u64,
    report: &mut Report,
) -> Result<()> {
    let took = load(
        conn,
        table,
        "client_ip, domain, time, rcode",
        "CONCAT('10.', (seq DIV 65536) % 256, '.', (seq DIV 256) % 256, '.', seq % 256), \
         CONCAT('h', LPAD(seq, 8, '0'), '.example.io'), \
         CONCAT('12:', LPAD((seq DIV 60) % 60, 2, '0'), ':', LPAD(seq % 60, 2, '0'), '.', \
                LPAD(seq % 1000, 3, '0')), 'NOERROR'",
        total,
    )
    .await?;
    conn.query_drop(format!(
        "ALTER TABLE {table} ADD INDEX idx_key (client_ip, domain, time)"
    ))
    .await?;
    conn.query_drop(format!("ANALYZE TABLE {table}")).await?;
    eprintln!(
        "verify: loaded {total} keyed rows into {table} in {}",
        secs(took)
    );
    let columns: Vec<String> = ["client_ip", "domain", "time"].map(String::from).into();
    let target = MysqlTarget {
        table: table.to_string(),
        columns: gap_auditor::config::SinkColumns {
            partition: String::new(),
            offset: String::new(),
            topic: None,
            key: columns.clone(),
        },
    };
    let sink = sink(url, target.clone())?;
    // Keys spread over the whole table, one segment per partition as the ledger hands them.
    let asked = asked.min(total).max(1);
    let step = (total / asked).max(1);
    let mut segments = Vec::new();
    let per_segment = asked.div_ceil(PARTITIONS as u64);
    let mut next = 0u64;
    while next < asked {
        let n = per_segment.min(asked - next);
        segments.push(Segment {
            run: OffsetRun::new(next as i64, (next + n - 1) as i64),
            keys: (next..next + n).map(|i| key_of(i * step)).collect(),
            max_ts: None,
        });
        next += n;
    }
    let sample: Vec<&Key> = segments[0].keys.iter().take(BATCH_SIZE).collect();
    let values: Vec<Vec<&str>> = sample.iter().map(|k| k.values().collect()).collect();
    let q = sql::count_keys_joined(
        table,
        &columns,
        &[KeyCompare::Binary; 3],
        KeyRows::Values,
        &values,
        false,
    );
    let e = explain(conn, &q).await?;
    report.explain.push_str(&format!(
        "- key_columns count, {} keys per query, {total} rows: `` {} `` → {e}\n",
        values.len(),
        abbreviate(&q)
    ));

    // The shipped verifier at the default batch size (JOIN form, batches over the pool),
    // the same one query at a time, and the CASE form it replaced, on the same keys.
    let (rate, queries, wall) = by_keys_rate(&sink, &segments, asked, BATCH_SIZE).await?;
    eprintln!("verify: {asked} keys, shipped: {queries} queries, {wall:?}: {rate:.0} keys/s");
    let serial = OneAtATime(&sink);
    let (serial_rate, serial_queries, serial_wall) =
        by_keys_rate(&serial, &segments, asked, BATCH_SIZE).await?;
    eprintln!(
        "verify: {asked} keys, one query at a time: {serial_wall:?}: {serial_rate:.0} keys/s"
    );
    let keys: Vec<&Key> = segments.iter().flat_map(|s| s.keys.iter()).collect();
    let compare = [KeyCompare::Binary; 3];
    let t = Instant::now();
    let mut found = 0u64;
    let mut case_queries = 0u64;
    for batch in keys.chunks(BATCH_SIZE) {
        let values: Vec<Vec<&str>> = batch.iter().map(|k| k.values().collect()).collect();
        let q = sql::count_keys_compared(table, &columns, &compare, &values, false);
        let got: Vec<(Option<i64>, i64)> = conn.query(q).await.context("CASE count")?;
        found += got.iter().filter(|(k, _)| k.is_some()).count() as u64;
        case_queries += 1;
    }
    let case_wall = t.elapsed();
    if found != asked {
        bail!("the CASE form found {found} of {asked} keys");
    }
    let case_rate = asked as f64 / case_wall.as_secs_f64().max(1e-9);
    eprintln!("verify: CASE form, {asked} keys: {case_rate:.0} keys/s");
    // The JOIN form with its derived rows as `UNION ALL SELECT` branches (what MariaDB got
    // before the value list, and what Doris gets), one query at a time like the row above.
    let t = Instant::now();
    let mut found = 0u64;
    for batch in keys.chunks(BATCH_SIZE) {
        let values: Vec<Vec<&str>> = batch.iter().map(|k| k.values().collect()).collect();
        let q = sql::count_keys_joined(
            table,
            &columns,
            &compare,
            KeyRows::UnionSelect,
            &values,
            false,
        );
        let got: Vec<(Option<i64>, i64, i64)> = conn.query(q).await.context("UNION count")?;
        found += got.iter().filter(|(k, _, _)| k.is_some()).count() as u64;
    }
    let union_wall = t.elapsed();
    if found != asked {
        bail!("the UNION ALL SELECT form found {found} of {asked} keys");
    }
    let union_rate = asked as f64 / union_wall.as_secs_f64().max(1e-9);
    eprintln!("verify: JOIN form, UNION ALL SELECT rows, {asked} keys: {union_rate:.0} keys/s");
    // The shipped path (batches over the pool) with each derived-row form, interleaved:
    // the server CPU a form saves shows when the cores are busy, not one query at a time.
    // Each pass's ratios are taken within it (this VM's speed drifts within minutes).
    let union_sink = self::sink(url, target.clone())?.with_key_rows(KeyRows::UnionSelect);
    let text_sink = self::sink(url, target)?.with_key_rows(KeyRows::Values);
    let mut forms = Vec::new();
    for _ in 0..3 {
        let (u, _, _) = by_keys_rate(&union_sink, &segments, asked, BATCH_SIZE).await?;
        let (v, _, _) = by_keys_rate(&text_sink, &segments, asked, BATCH_SIZE).await?;
        let (p, _, _) = by_keys_rate(&sink, &segments, asked, BATCH_SIZE).await?;
        forms.push((v, u, p));
    }
    union_sink.close().await;
    text_sink.close().await;
    let value_pairs: Vec<(f64, f64)> = forms.iter().map(|&(v, u, _)| (v, u)).collect();
    let value_ratios: Vec<f64> = value_pairs.iter().map(|(v, u)| v / u).collect();
    let (form_v, form_u) = crate::util::median_pair(&value_pairs, |(v, u)| v / u);
    let prepared_pairs: Vec<(f64, f64)> = forms.iter().map(|&(v, _, p)| (p, v)).collect();
    let prepared_ratios: Vec<f64> = prepared_pairs.iter().map(|(p, v)| p / v).collect();
    let (form_p, form_pv) = crate::util::median_pair(&prepared_pairs, |(p, v)| p / v);
    eprintln!(
        "verify: shipped path, prepared {form_p:.0} vs value list {form_pv:.0} keys/s; \
         value list {form_v:.0} vs UNION ALL SELECT {form_u:.0} keys/s"
    );
    report.rows.push(row(
        &format!(
            "key_columns verify (shipped: JOIN form, {} batches at once), {asked} keys among {total} rows, batches of {BATCH_SIZE}",
            gap_auditor::sink::mysql::POOL_SIZE
        ),
        format!("{:.1} k keys/s ({queries} queries, {})", rate / 1e3, secs(wall)),
        &format!("CASE form (before) {:.1} k keys/s", case_rate / 1e3),
        format!("{:.2}", rate / case_rate.max(1e-9)),
        "≥ 100 k keys/s",
    ));
    report.rows.push(row(
        "key_columns verify, JOIN form one query at a time, same keys",
        format!(
            "{:.1} k keys/s ({serial_queries} queries, {})",
            serial_rate / 1e3,
            secs(serial_wall)
        ),
        &format!("CASE form (before) {:.1} k keys/s", case_rate / 1e3),
        format!("{:.2}", serial_rate / case_rate.max(1e-9)),
        "— (diagnostic)",
    ));
    report.rows.push(row(
        "key_columns verify, JOIN form one query at a time, derived rows as UNION ALL SELECT (before; what Doris gets), same keys",
        format!(
            "{:.1} k keys/s ({} queries, {})",
            union_rate / 1e3,
            keys.len().div_ceil(BATCH_SIZE),
            secs(union_wall)
        ),
        &format!("shipped form, one at a time {:.1} k keys/s", serial_rate / 1e3),
        format!("{:.2}", union_rate / serial_rate.max(1e-9)),
        "— (diagnostic)",
    ));
    report.rows.push(row(
        &format!(
            "key_columns verify, shipped path ({} batches at once): derived rows as a value list (MariaDB) vs UNION ALL SELECT (before; what Doris gets), same keys, 3 interleaved passes",
            gap_auditor::sink::mysql::POOL_SIZE
        ),
        format!("value list {:.1} k keys/s (median pass)", form_v / 1e3),
        &format!("UNION ALL SELECT {:.1} k keys/s", form_u / 1e3),
        format!(
            "{:.2} (passes {})",
            form_v / form_u.max(1e-9),
            crate::util::spread(&value_ratios, "")
        ),
        "— (diagnostic)",
    ));
    report.rows.push(row(
        &format!(
            "key_columns verify, shipped path ({} batches at once): full batches prepared (MariaDB, binary protocol) vs the same value list as SQL text (before), same keys, 3 interleaved passes",
            gap_auditor::sink::mysql::POOL_SIZE
        ),
        format!("prepared {:.1} k keys/s (median pass)", form_p / 1e3),
        &format!("value list as text {:.1} k keys/s", form_pv / 1e3),
        format!(
            "{:.2} (passes {})",
            form_p / form_pv.max(1e-9),
            crate::util::spread(&prepared_ratios, "")
        ),
        "— (diagnostic)",
    ));
    report.rows.push(row(
        "key_columns verify, CASE form (before), one query at a time, same keys",
        format!(
            "{:.1} k keys/s ({case_queries} queries, {})",
            case_rate / 1e3,
            secs(case_wall)
        ),
        "—",
        "—".into(),
        "— (baseline)",
    ));
    sink.close().await;
    Ok(())
}

/// The shipped sink with its batches asked one at a time (the diagnostic row).
struct OneAtATime<'a>(&'a MysqlSink);

impl Verifier for OneAtATime<'_> {
    fn kind(&self) -> &'static str {
        self.0.kind()
    }
    async fn ping(&self) -> Result<(), SinkError> {
        self.0.ping().await
    }
    async fn count_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<RangeCount, SinkError> {
        self.0.count_offsets(tp, runs).await
    }
    async fn list_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<Vec<(i64, u64)>, SinkError> {
        self.0.list_offsets(tp, runs).await
    }
    async fn count_keys(&self, keys: &[&Key]) -> Result<Vec<u64>, SinkError> {
        self.0.count_keys(keys).await
    }
}

/// Keys/s of `verify::by_keys` over `segments` with `batch` keys per query.
async fn by_keys_rate<V: Verifier>(
    sink: &V,
    segments: &[Segment],
    asked: u64,
    batch: usize,
) -> Result<(f64, u64, Duration)> {
    let counter = Counter::default();
    let obs = |d: Duration, ok: bool| counter.observe(d, ok);
    let mut book = KeyBook::new(asked as usize);
    for s in segments {
        for k in &s.keys {
            book.pend(k);
        }
    }
    let t = Instant::now();
    let verdicts = verify::by_keys(
        sink,
        segments,
        &mut book,
        KeyRound::Due,
        Limits::from_batch_size(batch),
        &obs,
    )
    .await
    .map_err(|e| anyhow::anyhow!("by_keys: {e}"))?;
    let wall = t.elapsed();
    let mut found = 0u64;
    for v in verdicts {
        let Verdict::Known { present, .. } = v else {
            bail!("a key_columns verdict came back unknown");
        };
        found += gap_auditor::ledger::runs::count(&present);
    }
    if found != asked {
        bail!("key_columns found {found} of {asked} keys that are all in the table");
    }
    let rate = asked as f64 / wall.as_secs_f64().max(1e-9);
    Ok((rate, counter.take(), wall))
}
