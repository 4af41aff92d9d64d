//! Issue 15: offset_columns rounds stay O(partitions) when filtered records interleave with
//! expected ones, and stay exact when the sink holds rows at the filtered offsets (a
//! pipeline that does not filter what the auditor filters). Real MariaDB, the product's
//! sink (`MysqlSink`) and verifier (`verify::by_offsets`).

use crate::faults::Rng;
use crate::support::*;
use gap_auditor::ledger::{OffsetRun, Segment, Verdict, runs};
use gap_auditor::sink::mysql::{MysqlSink, MysqlTarget};
use gap_auditor::types::TopicPartition;
use gap_auditor::verify::{self, Limits};
use mysql_async::prelude::Queryable;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Every second offset of `0..2n` expected (the odd ones filtered), one segment per run as
/// the ledger hands them.
fn every_second(n: i64) -> Vec<Segment> {
    (0..n)
        .map(|i| Segment {
            run: OffsetRun::new(2 * i, 2 * i),
            keys: Vec::new(),
            max_ts: None,
        })
        .collect()
}

fn missing(segs: &[Segment], v: &[Verdict]) -> BTreeSet<i64> {
    let mut out = BTreeSet::new();
    for (s, v) in segs.iter().zip(v) {
        let Verdict::Known { present, .. } = v else {
            panic!("unknown verdict");
        };
        for r in runs::subtract(s.run, present) {
            out.extend(r.first..=r.last);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interleaved_filtered_records_cost_a_query_or_two_and_never_hide_a_loss() {
    let db = Db::new();
    let t = unique("offsets_interleaved");
    let mut c = db.pool.get_conn().await.expect("mysql conn");
    c.query_drop(format!(
        "CREATE TABLE `{t}` (`partition` INT NOT NULL, `offset` BIGINT NOT NULL, \
         KEY po (`partition`, `offset`))"
    ))
    .await
    .expect("create");
    // 25,000 expected records among 50,000 offsets; the pipeline wrote EVERY record,
    // filtered ones included, except the lost ones.
    const N: i64 = 25_000;
    let mut rng = Rng::from_env("offsets interleaved");
    let mut lost = BTreeSet::new();
    while lost.len() < 7 {
        lost.insert(2 * rng.range(0, N as u64) as i64);
    }
    c.query_drop(format!(
        "INSERT INTO `{t}` SELECT 0, seq FROM seq_0_to_{}",
        2 * N - 1
    ))
    .await
    .expect("rows");
    let sink = MysqlSink::new(
        &mysql_url(),
        None,
        None,
        MysqlTarget {
            table: t.clone(),
            columns: gap_auditor::config::SinkColumns {
                partition: "partition".into(),
                offset: "offset".into(),
                topic: None,
                key: Vec::new(),
            },
        },
        Duration::from_secs(30),
        "mysql",
        &gap_auditor::sink::tls::TlsSettings::default(),
    )
    .expect("sink");
    let tp = TopicPartition::new("t", 0);
    let segs = every_second(N);
    let queries = AtomicUsize::new(0);
    let obs = |_d: Duration, _ok: bool| {
        queries.fetch_add(1, Ordering::Relaxed);
    };
    let limits = Limits::from_batch_size(1000);
    // Nothing lost: 24,999 filtered offsets named in NOT IN lists of at most 8,000.
    let v = verify::by_offsets(&sink, &tp, &segs, limits, &obs)
        .await
        .expect("verify");
    assert!(missing(&segs, &v).is_empty());
    let no_loss = queries.swap(0, Ordering::Relaxed);
    let want = (N as u64 - 1).div_ceil(runs::MAX_EXCLUDED) as usize;
    assert_eq!(no_loss, want, "queries of a round with nothing lost");
    // Lost records, while the rows at the filtered offsets beside them are there: each is
    // found, exactly, and no filtered row stands in for one.
    let cond: Vec<String> = lost.iter().map(|o| o.to_string()).collect();
    c.query_drop(format!(
        "DELETE FROM `{t}` WHERE `offset` IN ({})",
        cond.join(", ")
    ))
    .await
    .expect("delete");
    let v = verify::by_offsets(&sink, &tp, &segs, limits, &obs)
        .await
        .expect("verify");
    let with_loss = queries.swap(0, Ordering::Relaxed);
    eprintln!(
        "no loss: {no_loss} queries; {} lost: {with_loss} queries",
        lost.len()
    );
    assert_eq!(missing(&segs, &v), lost);
    // Bisection per loss, as with contiguous offsets: ~log2(25,000 / 1,000) + a listing.
    assert!(with_loss <= want + lost.len() * 7, "{with_loss} queries");
    // The smallest case, spelt out: expected 0 and 2, 1 filtered; the sink holds 0 and 1.
    let segs = every_second(2);
    c.query_drop(format!("DELETE FROM `{t}` WHERE `offset` < 4"))
        .await
        .expect("delete");
    c.query_drop(format!("INSERT INTO `{t}` VALUES (0, 0), (0, 1)"))
        .await
        .expect("insert");
    let v = verify::by_offsets(&sink, &tp, &segs, limits, &obs)
        .await
        .expect("verify");
    assert_eq!(missing(&segs, &v), BTreeSet::from([2]));
    sink.close().await;
}
