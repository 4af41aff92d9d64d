//! Issue 41 item 2: an outage longer than retention leaves a huge range Kafka deleted
//! before the auditor read it. On the real broker (DeleteRecords, as retention does) and
//! the shared MariaDB, in process.
//!
//! Partition 0: read and confirmed up to 2, the auditor stops; `N` more records are
//! produced, the pipeline writes every second one and commits; DeleteRecords moves the log
//! start past all of them; the auditor restarts below the log start. Partition 1: records
//! with three losses are written and committed once the restarted auditor runs.
//!
//! Before pieces, the first round asked about the whole deleted range before any partition's
//! due work: a count over `N` offsets, then a bisection down to `batch_size` leaves — tens of
//! thousands of queries in ONE round (or a `query_timeout` that tripped every round): partition
//! 1's losses waited for all of it. Now the range is settled in bounded pieces after each
//! round's verdicts: partition 1's losses are reported within `grace` + 2 rounds of the
//! pipeline's commit, and the range ends exact: the first `max_deleted_checked` offsets
//! asked (those the sink holds confirmed, the others unverifiable), the rest unverifiable
//! without a question, nothing lost.
//!
//! `GAP_AUDITOR_DELETED_N` sets `N` (default 2,000,000; `scripts/reliability.sh` runs
//! 20,000,000).

use super::*;
use crate::support::*;
use mysql_async::prelude::Queryable;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset as KOffset, TopicPartitionList};
use std::time::{Duration, Instant};

const GRACE: Duration = Duration::from_secs(2);
const VERIFY: Duration = Duration::from_millis(500);
/// Polling every 50 ms and the sink query itself, on top of grace + 2 rounds (as
/// stalled_partition).
const MEASURING: Duration = Duration::from_millis(300);
/// Offsets of the deleted range the sink is asked about (`max_deleted_checked`): ten
/// pieces of 16 × `batch_size` (100 in the tests).
const CHECKED: i64 = 16_000;
/// Records partition 0 held before the outage.
const HEAD: i64 = 2;
/// Records of partition 1, and the ones its pipeline loses.
const P1: i64 = 20;
fn lost_p1(o: i64) -> bool {
    o == 5 || (11..=12).contains(&o)
}

fn deleted_n() -> i64 {
    std::env::var("GAP_AUDITOR_DELETED_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000)
}

/// Produces `range` to `partition` (which ends at `range.start`) as one-byte records in
/// large batches: they are deleted unread, only their offsets matter. The last one alone,
/// whose acknowledged offset proves the partition holds `range`.
async fn produce_small(topic: &str, partition: i32, range: std::ops::Range<i64>) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .set("linger.ms", "50")
        .set("batch.size", "1000000")
        .set("enable.idempotence", "true")
        .create()
        .expect("bulk producer");
    for _ in range.start..range.end - 1 {
        let mut rec = BaseRecord::<(), str>::to(topic)
            .partition(partition)
            .payload("d");
        loop {
            match producer.send(rec) {
                Ok(()) => break,
                Err((_, r)) => {
                    rec = r;
                    producer.poll(Duration::from_millis(5));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(300)).expect("flush");
    let last = TestProducer::new(topic).send(partition, b"d").await;
    assert_eq!(last, range.end - 1, "partition {partition} holds {range:?}");
}

/// The pipeline's side: rows of chosen offsets of a partition (multi-row statements), and
/// its group's commits.
struct Writer {
    db: Db,
    table: String,
    topic: String,
    consumer: BaseConsumer,
}

impl Writer {
    fn new(s: &Scenario) -> Self {
        let consumer: BaseConsumer = group_client(&s.pipeline_group)
            .create()
            .expect("pipeline consumer");
        let mut tpl = TopicPartitionList::new();
        for p in 0..2 {
            tpl.add_partition_offset(&s.topic, p, KOffset::Beginning)
                .expect("tpl");
        }
        consumer.assign(&tpl).expect("assign");
        Self {
            db: s.db.clone(),
            table: s.table.clone(),
            topic: s.topic.clone(),
            consumer,
        }
    }

    /// Rows for `offsets` of partition `p`, coordinates only (the offset_columns audit
    /// looks at nothing else), in statements of 5,000 rows.
    async fn write(&self, p: i32, offsets: impl Iterator<Item = i64>) {
        let rows: Vec<i64> = offsets.collect();
        let mut c = self.db.pool.get_conn().await.expect("mysql conn");
        for part in rows.chunks(5_000) {
            let values: Vec<String> = part.iter().map(|o| format!("({p},{o})")).collect();
            c.query_drop(format!(
                "INSERT INTO `{}` (`partition`, `offset`) VALUES {}",
                self.table,
                values.join(",")
            ))
            .await
            .expect("bulk insert");
        }
    }

    fn commit(&self, p: i32, offset: i64) {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, p, KOffset::Offset(offset))
            .expect("tpl");
        commit_retrying(&self.consumer, &tpl, "pipeline commit");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_huge_deleted_range_never_delays_other_partitions_and_ends_exact() {
    let n = deleted_n();
    let s = Scenario::with_partitions("deleted_big", 2).await;
    let topic = s.topic.clone();
    let writer = Writer::new(&s);
    let toml = config_toml(&s.spec(
        "offset_columns",
        &format!("{}ms", GRACE.as_millis()),
        &format!("{}ms", VERIFY.as_millis()),
    ))
    .replace(
        "batch_size = 100",
        &format!("batch_size = 100\nmax_deleted_checked = {CHECKED}"),
    );
    assert!(toml.contains("max_deleted_checked"), "{toml}");

    // Before the outage: partition 0 read, written and confirmed up to HEAD.
    let auditor = Auditor::start(&toml).await;
    produce_range(&topic, 0, 0..HEAD).await;
    writer.write(0, 0..HEAD).await;
    writer.commit(0, HEAD);
    auditor
        .wait_decided(60, "partition 0's head confirmed", |a| {
            a.confirmed(&topic, 0) == HEAD as u64
        })
        .await;
    auditor.stop().await;

    // The outage: N records, every second one written, then deleted by "retention".
    let t = Instant::now();
    produce_small(&topic, 0, HEAD..HEAD + n).await;
    let produced = t.elapsed();
    writer
        .write(0, (HEAD..HEAD + n).filter(|o| o % 2 == 0))
        .await;
    writer.commit(0, HEAD + n);
    assert_eq!(delete_records(&topic, 0, HEAD + n).await, HEAD + n);
    eprintln!(
        "deleted_range: {n} offsets produced in {:.1} s, {} rows written in {:.1} s",
        produced.as_secs_f64(),
        n / 2,
        (t.elapsed() - produced).as_secs_f64()
    );

    // The auditor comes back below the log start; once its rounds run, partition 1 gets
    // records with losses.
    let auditor = Auditor::start(&toml).await;
    let queries = |a: &Auditor| {
        a.metrics
            .sink_queries
            .with_label_values(&[a.audit.as_str(), "ok"])
            .get()
    };
    auditor
        .wait_decided(60, "a round asked the sink", |a| queries(a) > 0)
        .await;
    produce_range(&topic, 1, 0..P1).await;
    writer.write(1, (0..P1).filter(|o| !lost_p1(*o))).await;
    writer.commit(1, P1);
    let committed = Instant::now();
    let bound = GRACE + 2 * VERIFY + MEASURING;
    while auditor.lost(&topic, 1) < 3 {
        assert!(
            committed.elapsed() <= bound,
            "partition 1's losses not reported within grace + 2 rounds ({bound:?}) while partition 0 settles {n} deleted offsets: lost {}",
            auditor.lost(&topic, 1)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reported_in = committed.elapsed();
    assert_eq!(auditor.confirmed(&topic, 1), (P1 - 3) as u64);

    // The deleted range ends exact: CHECKED offsets asked, the sink holding every second.
    let found = (CHECKED / 2) as u64;
    let unverifiable = (n as u64) - found;
    let settle = Instant::now();
    auditor
        .wait_decided(120, "the deleted range settled", |a| {
            a.counter(&a.metrics.records_unverifiable, &topic, 0) == unverifiable
        })
        .await;
    let settled_in = settle.elapsed();
    // Counters are this lifetime's: the head was confirmed by the first.
    assert_eq!(auditor.confirmed(&topic, 0), found);
    assert_eq!(auditor.lost(&topic, 0), 0, "never lost");
    assert_eq!(auditor.lost(&topic, 1), 3);
    let gaps = auditor.stored_gaps();
    let tuple = |g: &gap_auditor::gap::Gap| {
        (
            g.partition as i64,
            g.first_offset,
            g.last_offset,
            g.missing_records as i64,
        )
    };
    let mut reported: Vec<(i64, i64, i64, i64)> = gaps
        .iter()
        .filter(|g| g.state.as_str() == "open")
        .map(tuple)
        .collect();
    reported.sort_unstable();
    let expected = vec![(1, 5, 5, 1), (1, 11, 12, 2)];
    record(
        "deleted_unread_range_in_pieces",
        1,
        1,
        &expected,
        &reported,
        auditor.lost(&topic, 0) + auditor.lost(&topic, 1),
        format!(
            "{n} offsets deleted unread on partition 0 (DeleteRecords), the sink holding every second one; partition 1's 3 losses reported {:.2} s after the pipeline's commit (bound grace + 2 rounds + 0.3 s = {:.2} s); max_deleted_checked {CHECKED}: {found} confirmed, {unverifiable} unverifiable ({} without a question), 0 lost, settled {:.1} s after; sink_up {}",
            reported_in.as_secs_f64(),
            bound.as_secs_f64(),
            n - CHECKED,
            settled_in.as_secs_f64(),
            auditor.sink_up()
        ),
    );
    assert_eq!(reported, expected, "{gaps:?}");
    let g = gaps
        .iter()
        .find(|g| g.partition == 0)
        .expect("the deleted range's gap");
    assert_eq!(
        (
            g.first_offset,
            g.last_offset,
            g.missing_records,
            g.state.as_str(),
            g.size_known
        ),
        (HEAD, HEAD + n - 1, unverifiable, "unverifiable", false),
        "{gaps:?}"
    );
    assert_eq!(auditor.sink_up(), 1);
    auditor.stop().await;
}
