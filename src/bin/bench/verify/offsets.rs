//! `offset_columns` verification rates: whole-partition rounds, range counts and listing.

use super::{
    BATCH_SIZE, Counter, PARTITIONS, Report, Rng, ScratchTable, abbreviate, ceil_log2, explain,
    load, secs, sink,
};
use crate::util::row;
use anyhow::{Result, bail};
use gap_auditor::ledger::{OffsetRun, Segment, Verdict};
use gap_auditor::sink::mysql::{MysqlSink, MysqlTarget};
use gap_auditor::sink::sql::{self, OffsetQuery};
use gap_auditor::types::TopicPartition;
use gap_auditor::verify::{self, Limits};
use mysql_async::prelude::Queryable;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// One offset_columns round over `segments` (per partition), as the audit runs it: returns
/// the missing offsets per partition.
async fn offsets_round(
    sink: &MysqlSink,
    topic: &str,
    segments: &[(i32, Vec<Segment>)],
    counter: &Counter,
) -> Result<BTreeSet<(i32, i64)>> {
    let obs = |d: Duration, ok: bool| counter.observe(d, ok);
    let limits = Limits::from_batch_size(BATCH_SIZE);
    let mut missing = BTreeSet::new();
    for (p, segs) in segments {
        let tp = TopicPartition {
            topic: topic.to_string(),
            partition: *p,
        };
        let verdicts = verify::by_offsets(sink, &tp, segs, limits, &obs)
            .await
            .map_err(|e| anyhow::anyhow!("by_offsets: {e}"))?;
        for (s, v) in segs.iter().zip(verdicts) {
            let Verdict::Known { present, .. } = v else {
                bail!("verdict unknown for partition {p}");
            };
            for gap in gap_auditor::ledger::runs::subtract(s.run, &present) {
                for o in gap.first..=gap.last {
                    missing.insert((*p, o));
                }
            }
        }
    }
    Ok(missing)
}

/// [`offsets_round`] on a complete table: its queries and wall time, an error if anything
/// was reported missing.
async fn no_loss_round(
    sink: &MysqlSink,
    topic: &str,
    segments: &[(i32, Vec<Segment>)],
    counter: &Counter,
) -> Result<(u64, Duration)> {
    let t = Instant::now();
    let missing = offsets_round(sink, topic, segments, counter).await?;
    let wall = t.elapsed();
    let queries = counter.take();
    if !missing.is_empty() {
        bail!(
            "{} offsets reported missing from a complete table",
            missing.len()
        );
    }
    Ok((queries, wall))
}

fn whole_partitions(per_partition: i64, from: i64) -> Vec<(i32, Vec<Segment>)> {
    (0..PARTITIONS)
        .map(|p| {
            (
                p,
                vec![Segment {
                    run: OffsetRun::new(from, per_partition - 1),
                    keys: Vec::new(),
                    max_ts: None,
                }],
            )
        })
        .collect()
}

/// offset_columns on a table of `total` rows over 4 partitions.
pub async fn offset_rows(url: &str, total: u64, report: &mut Report) -> Result<()> {
    let per_partition = (total / PARTITIONS as u64) as i64;
    let total = per_partition as u64 * PARTITIONS as u64;
    let mut t = ScratchTable::create(
        url,
        "bench_offsets",
        "kafka_partition INT NOT NULL, kafka_offset BIGINT NOT NULL, \
         domain VARCHAR(255) NOT NULL",
    )
    .await?;
    let result = offset_rows_on(url, &mut t.conn, &t.name, per_partition, total, report).await;
    t.remove().await;
    result
}

async fn offset_rows_on(
    url: &str,
    conn: &mut mysql_async::Conn,
    table: &str,
    per_partition: i64,
    total: u64,
    report: &mut Report,
) -> Result<()> {
    let took = load(
        conn,
        table,
        "kafka_partition, kafka_offset, domain",
        &format!(
            "seq % {PARTITIONS}, seq DIV {PARTITIONS}, \
             CONCAT('host', LPAD(seq, 8, '0'), '.subdomain.example-cdn-provider.com.cn')"
        ),
        total,
    )
    .await?;
    let t = Instant::now();
    conn.query_drop(format!(
        "ALTER TABLE {table} ADD INDEX idx_partition_offset (kafka_partition, kafka_offset)"
    ))
    .await?;
    conn.query_drop(format!("ANALYZE TABLE {table}")).await?;
    eprintln!(
        "verify: loaded {total} rows into {table} in {} + index {}",
        secs(took),
        secs(t.elapsed())
    );
    let topic = "bench";
    let target = MysqlTarget {
        table: table.to_string(),
        columns: gap_auditor::config::SinkColumns {
            partition: "kafka_partition".into(),
            offset: "kafka_offset".into(),
            topic: None,
            key: Vec::new(),
        },
    };
    let sink = sink(url, target)?;
    let counter = Counter::default();
    let q = OffsetQuery {
        table,
        partition_column: "kafka_partition",
        offset_column: "kafka_offset",
        topic_column: None,
        topic,
        partition: 1,
    };
    let count_q = sql::count_offsets(&q, &[OffsetRun::new(1000, 1999)], false);
    let list_q = sql::list_offsets(
        &q,
        &[OffsetRun::new(1000, 1499), OffsetRun::new(1501, 1999)],
        false,
    );
    for (what, query) in [("range count", &count_q), ("listing", &list_q)] {
        let e = explain(conn, query).await?;
        report.explain.push_str(&format!(
            "- offset_columns {what}, {total} rows: `` {} `` → {e}\n",
            abbreviate(query)
        ));
    }

    // A steady-state round: the last 10 000 offsets of each partition became due.
    let recent = (per_partition - 10_000).max(0);
    let segs = whole_partitions(per_partition, recent);
    let (queries, wall) = no_loss_round(&sink, topic, &segs, &counter).await?;
    report.rows.push(row(
        &format!(
            "offset_columns round, no loss, {PARTITIONS} × {} due of {total} rows",
            per_partition - recent
        ),
        format!("{queries} queries, {}", secs(wall)),
        &format!("P = {PARTITIONS}"),
        format!("{:.2}", queries as f64 / PARTITIONS as f64),
        "≤ P queries",
    ));

    // Every row due at once (catch-up after a long outage): still one query per partition.
    let segs = whole_partitions(per_partition, 0);
    let (queries, wall) = no_loss_round(&sink, topic, &segs, &counter).await?;
    eprintln!("verify: no-loss round over {total} rows: {queries} queries, {wall:?}");
    report.rows.push(row(
        &format!("offset_columns round, no loss, all {total} rows due"),
        format!("{queries} queries, {}", secs(wall)),
        &format!("P = {PARTITIONS}"),
        format!("{:.2}", queries as f64 / PARTITIONS as f64),
        "≤ P queries",
    ));

    // Locate g random missing rows among all of them (a catch-up round), then among the
    // steady-state round's due records.
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let recent_segs = whole_partitions(per_partition, recent);
    let cases = [
        (1usize, 0, &segs, false),
        (10, 0, &segs, false),
        (100, 0, &segs, false),
        (10, recent, &recent_segs, true),
    ];
    for (g, from, segs, steady) in cases {
        let due = (per_partition - from) as u64 * PARTITIONS as u64;
        let levels = ceil_log2(due as f64 / BATCH_SIZE as f64);
        let mut lost = BTreeSet::new();
        while lost.len() < g {
            let p = (rng.next() % PARTITIONS as u64) as i32;
            let o = from + (rng.next() % (per_partition - from) as u64) as i64;
            lost.insert((p, o));
        }
        let cond: Vec<String> = lost
            .iter()
            .map(|(p, o)| format!("(kafka_partition = {p} AND kafka_offset = {o})"))
            .collect();
        conn.query_drop(format!("DELETE FROM {table} WHERE {}", cond.join(" OR ")))
            .await?;
        let t = Instant::now();
        let missing = offsets_round(&sink, topic, segs, &counter).await;
        let wall = t.elapsed();
        let queries = counter.take();
        // Put the rows back before judging, so the next case starts complete.
        let values: Vec<String> = lost
            .iter()
            .map(|(p, o)| format!("({p}, {o}, 'restored')"))
            .collect();
        conn.query_drop(format!(
            "INSERT INTO {table} (kafka_partition, kafka_offset, domain) VALUES {}",
            values.join(", ")
        ))
        .await?;
        let missing = missing?;
        if missing != lost {
            bail!(
                "located {} missing rows, deleted {}: the verifier got it wrong",
                missing.len(),
                lost.len()
            );
        }
        let bound = PARTITIONS as u64 + g as u64 * levels;
        let among = if !steady {
            format!("{total} rows")
        } else {
            format!("the {due} due of a steady-state round ({total}-row table)")
        };
        eprintln!("verify: {g} missing among {among}: {queries} queries (bound {bound}), {wall:?}");
        report.rows.push(row(
            &format!("offset_columns, locate {g} random missing among {among}"),
            format!("{queries} queries, {}", secs(wall)),
            &format!(
                "P + g·⌈log2(n/b)⌉ = {PARTITIONS} + {g}·{levels} = {bound} (b = {BATCH_SIZE})"
            ),
            format!("{:.2}", queries as f64 / bound as f64),
            "≤ bound (ratio ≤ 1)",
        ));
    }
    sink.close().await;
    Ok(())
}
