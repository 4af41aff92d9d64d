//! Kafka semantics only a real broker has (issue 36), end to end through the daemon: the
//! test broker is Apache Kafka 4.4 (scripts/test-env.sh, a single-node KRaft broker from
//! Maven Central). tansu, the broker these tests ran on before, cannot stand in for any of
//! them: it has no last stable offset to hold, never deletes records and refuses
//! CreatePartitions.
//!
//! - an open transaction holds the last stable offset: what lies behind it is lag, never
//!   loss, and completeness does not claim it;
//! - partitions added to a live topic are audited from their first offset;
//! - compacted offsets are holes, never loss;
//! - DeleteRecords moving the log start under an auditor that had not read that far: the
//!   unread range is settled by the sink where it can be (offset_columns) and unverifiable
//!   where it cannot, never lost;
//! - the retention countdown from the topic's `retention.ms` (DescribeConfigs), and the
//!   gap turning `unrecoverable` once the log start passes it.

use crate::completeness::api as complete_at;
use crate::support::*;
use chrono::Utc;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
use rdkafka::client::DefaultClientContext;
use std::time::Duration;

fn admin() -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .create()
        .expect("admin client")
}

fn opts() -> AdminOptions {
    AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)))
}

/// Offsets 0–3 plain records the pipeline writes, 4–6 an open transaction's records (left
/// open: the returned producer commits it), 7–8 plain records behind them.
async fn behind_an_open_transaction(s: &Scenario, lines: &[String]) -> TxnProducer {
    assert_eq!(s.send(&lines[0..4]).await, vec![0, 1, 2, 3]);
    s.pipeline().records(4).run().await;
    let txn = TxnProducer::new(&s.topic).await;
    assert_eq!(txn.open(0, &lines[4..7]).await, vec![4, 5, 6]);
    assert_eq!(s.send(&lines[7..9]).await, vec![7, 8]);
    txn
}

/// The first partition's entry of the auditor's `/api/status` (and the whole body).
async fn partition_status(auditor: &Auditor) -> (serde_json::Value, String) {
    let (code, body) = auditor.get("/api/status").await;
    assert_eq!(code, 200, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).expect("status json");
    (status["audits"][0]["partitions"][0].clone(), body)
}

/// An open transaction holds the last stable offset (LSO). Offsets 0–3 are plain records the
/// pipeline writes; 4–6 are an open transaction's records; 7–8 plain records behind them.
/// Under read_committed neither the pipeline nor the auditor can read past the LSO (4) while
/// the transaction is open: for several times `grace` nothing may be reported lost, and
/// completeness must not claim a time after record 8 (it was produced, not verified). Then
/// the transaction commits, the pipeline reads 4–8 but drops 5: exactly offset 5 is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_open_transaction_holds_the_lso_as_lag_never_loss() {
    let s = Scenario::new("lso").await;
    let topic = s.topic.clone();
    let lines = dns_lines(0..9);
    let auditor = s.start_auditor("offset_columns", "2s", "500ms").await;
    let txn = behind_an_open_transaction(&s, &lines).await;
    let after_last = Utc::now().timestamp_millis() + 1;

    auditor
        .wait_decided(30, "0–3 confirmed", |a| a.confirmed(&topic, 0) == 4)
        .await;
    // 3× grace with the transaction open: lag, never loss, and no claim of completeness.
    keep_checking(Duration::from_secs(6), Duration::from_millis(200), || {
        assert_eq!(
            auditor.lost(&topic, 0),
            0,
            "lag behind the LSO reported as loss"
        );
    })
    .await;
    assert!(api_gaps(&auditor).await.is_empty());
    let c = complete_at(&auditor, after_last).await;
    assert_eq!(
        c["complete"], false,
        "records 4–8 were produced and not verified: {c}"
    );
    // The cause is named: the open transaction holding the LSO at 4, below the log end
    // (9, or past it once the broker counts the transaction's marker), for a few seconds.
    let blocker = &c["blockers"][0];
    assert_eq!(blocker["kind"], "unread", "{c}");
    let cause = blocker["cause"].as_str().unwrap_or_default();
    assert!(
        cause.starts_with("an open transaction holds its last stable offset at 4 ("),
        "{c}"
    );
    assert!(
        c["reason"].as_str().unwrap_or_default().contains(cause),
        "{c}"
    );
    let (p, body) = partition_status(&auditor).await;
    let hold = &p["transaction_hold"];
    assert_eq!(hold["last_stable"], 4, "{body}");
    assert!(hold["log_end"].as_i64().unwrap_or(0) >= 9, "{body}");
    let held_for = Utc::now().timestamp_millis() - hold["since_ms"].as_i64().unwrap_or(0);
    assert!(
        held_for >= 5_000,
        "aged since the transaction opened, not reset each round: {body}"
    );

    txn.commit_open();
    // The pipeline reads 4–8 (the marker at 9 is no record) and drops 5.
    let read = s
        .pipeline()
        .start_at(4)
        .records(5)
        .copies(|o| usize::from(o != 5))
        .run()
        .await;
    assert_eq!(read, vec![4, 5, 6, 7, 8]);
    auditor
        .wait_decided(30, "5 lost, the rest confirmed", |a| {
            a.lost(&topic, 0) == 1 && a.confirmed(&topic, 0) == 8
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let gaps = api_gaps(&auditor).await;
    assert_eq!(gap_tuples(&gaps), vec![(0, 5, 5, 1)], "{gaps:?}");
    // Committed: the LSO reached the log end, no hold left.
    let (p, body) = partition_status(&auditor).await;
    assert!(p.get("transaction_hold").is_none(), "{body}");
    auditor.stop().await;
}

/// The same open transaction seen by a read_uncommitted auditor: it reads the open
/// transaction's records and the ones behind them (librdkafka reports the high watermark
/// as its last stable offset), so no transaction hold is named, and the records the
/// pipeline (read_committed, at the LSO) cannot reach are lag, never loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_uncommitted_auditor_names_no_transaction_hold() {
    let s = Scenario::new("lso_ru").await;
    let topic = s.topic.clone();
    let lines = dns_lines(0..9);
    let toml = config_toml(&s.spec("offset_columns", "2s", "500ms")).replacen(
        "[kafka]\n",
        "[kafka]\nisolation_level = \"read_uncommitted\"\n",
        1,
    );
    assert!(toml.contains("read_uncommitted"), "{toml}");
    let auditor = Auditor::start(&toml).await;
    let txn = behind_an_open_transaction(&s, &lines).await;
    auditor
        .wait_decided(30, "0–3 confirmed, 4–8 read", |a| {
            a.confirmed(&topic, 0) == 4 && a.consumed(&topic, 0) >= 9
        })
        .await;
    keep_checking(Duration::from_secs(6), Duration::from_millis(200), || {
        assert_eq!(
            auditor.lost(&topic, 0),
            0,
            "lag behind the LSO reported as loss"
        );
    })
    .await;
    let (p, body) = partition_status(&auditor).await;
    assert!(p["log_end"].as_i64().unwrap_or(0) >= 9, "{body}");
    assert!(p.get("transaction_hold").is_none(), "{body}");
    txn.commit_open();
    auditor.stop().await;
}

/// CreatePartitions on a live topic: the new partition is read from its first offset, so a
/// record the pipeline drops there is found. The records reach the new partition before the
/// auditor's next metadata refresh (every 3 s here) shows it the partition, so an auditor
/// that started it at its end (`kafka.start = latest`, the default, is for a topic's first
/// start) would never see them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partition_added_to_a_live_topic_is_audited_from_its_start() {
    let s = Scenario::new("grow").await;
    let topic = s.topic.clone();
    let lines = dns_lines(0..8);
    // librdkafka notices new partitions at its next metadata refresh (5 min by default).
    let toml = config_builder(&s.spec("offset_columns", "2s", "500ms"))
        .kafka_property("topic.metadata.refresh.interval.ms", 3000)
        .render()
        // The default start (the tests' own is earliest): the topic's first start at its
        // end, where partition 0 is empty.
        .replace("start = \"earliest\"", "start = \"latest\"");
    assert!(toml.contains("start = \"latest\""), "{toml}");
    let auditor = Auditor::start(&toml).await;
    // Started at the end of an empty partition 0 before anything is produced.
    auditor
        .wait_for(30, "partition 0 assigned", |a| {
            a.status
                .snapshot()
                .first()
                .is_some_and(|st| st.partitions.len() == 1)
        })
        .await;
    s.send(&lines[0..3]).await;
    s.pipeline().records(3).run().await;
    auditor
        .wait_decided(30, "partition 0 confirmed", |a| a.confirmed(&topic, 0) == 3)
        .await;

    let r = admin()
        .create_partitions(&[NewPartitions::new(&topic, 2)], &opts())
        .await
        .expect("create_partitions");
    for x in r {
        x.expect("partition added");
    }
    // A producer made after the change knows the new partition at once.
    let producer = TestProducer::new(&topic);
    let offsets = producer.send_all(1, &lines[3..8]).await;
    assert_eq!(offsets, vec![0, 1, 2, 3, 4]);
    s.pipeline()
        .partition(1)
        .records(5)
        .copies(|o| usize::from(o != 1))
        .run()
        .await;
    auditor
        .wait_decided(60, "partition 1: 1 lost, 4 confirmed", |a| {
            a.lost(&topic, 1) == 1 && a.confirmed(&topic, 1) == 4
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let gaps = api_gaps(&auditor).await;
    assert_eq!(gap_tuples(&gaps), vec![(1, 1, 1, 1)], "{gaps:?}");
    auditor.stop().await;
}

/// DeleteRecords moves the log start past offsets a stopped auditor never read (as
/// retention does during an outage longer than it). 0–1 are read and confirmed, the
/// auditor stops; 2–9 are produced and written except 3 and 7; the log start moves to 6;
/// the auditor restarts. 2–5 were deleted unread: under offset_columns the sink settles
/// them (2, 4, 5 confirmed, 3 unverifiable: nobody can prove it was expected), under
/// key_columns all four are unverifiable. Never lost: only 7, read and missing, is.
async fn deleted_unread(strategy: &str) {
    let s = Scenario::new("deleted").await;
    let topic = s.topic.clone();
    let lines = dns_lines(0..10);
    let toml = config_toml(&s.spec(strategy, "2s", "500ms"));
    let auditor = Auditor::start(&toml).await;
    s.send(&lines[0..2]).await;
    s.pipeline().records(2).run().await;
    auditor
        .wait_decided(30, "0–1 confirmed", |a| a.confirmed(&topic, 0) == 2)
        .await;
    auditor.stop().await;

    assert_eq!(s.send(&lines[2..10]).await, (2..10).collect::<Vec<_>>());
    s.pipeline()
        .start_at(2)
        .records(8)
        .copies(|o| usize::from(o != 3 && o != 7))
        .run()
        .await;
    assert_eq!(
        delete_records(&topic, 0, 6).await,
        6,
        "the log start moved to 6"
    );

    let auditor = Auditor::start(&toml).await;
    let (confirmed, unverifiable) = if strategy == "offset_columns" {
        (2 + 3 + 3, 1)
    } else {
        (2 + 3, 4)
    };
    auditor
        .wait_for(60, "7 lost, the deleted range settled", |a| {
            a.lost(&topic, 0) == 1
                && a.confirmed(&topic, 0) == confirmed - 2
                && a.counter(&a.metrics.records_unverifiable, &topic, 0) == unverifiable
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(auditor.lost(&topic, 0), 1);
    let gaps = api_gaps(&auditor).await;
    let open: Vec<_> = gaps
        .iter()
        .filter(|g| g["state"] == "open")
        .cloned()
        .collect();
    assert_eq!(gap_tuples(&open), vec![(0, 7, 7, 1)], "{gaps:?}");
    assert!(
        gaps.iter()
            .any(|g| g["state"] == "unverifiable" && g["first_offset"] == 2),
        "the deleted range is an unverifiable gap: {gaps:?}"
    );
    auditor.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_deleted_unread_are_settled_by_offset_columns_never_lost() {
    deleted_unread("offset_columns").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_deleted_unread_are_unverifiable_under_key_columns_never_lost() {
    deleted_unread("key_columns").await;
}

/// Compaction leaves offset holes: a compacted topic whose cleaner removed the older
/// records of each key before the auditor started. The auditor and the pipeline read what
/// is left; the pipeline drops one of those. Exactly that one is lost; the compacted
/// offsets are holes (SPEC guarantee 4), never loss and never unverifiable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compacted_offsets_are_holes_never_loss() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    use rdkafka::producer::{FutureProducer, FutureRecord};

    let s = Scenario::new("compact").await;
    let topic = s.topic.clone();
    let admin = admin();
    let altered = admin
        .alter_configs(
            &[
                rdkafka::admin::AlterConfig::new(rdkafka::admin::ResourceSpecifier::Topic(&topic))
                    .set("cleanup.policy", "compact")
                    .set("segment.ms", "100")
                    .set("min.cleanable.dirty.ratio", "0.001")
                    .set("min.compaction.lag.ms", "0")
                    .set("delete.retention.ms", "0"),
            ],
            &opts(),
        )
        .await
        .expect("alter_configs");
    for r in altered {
        r.expect("compaction configured");
    }
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .set("linger.ms", "0")
        .create()
        .expect("producer");
    // Keys a b a b c a d b e f: compaction keeps the last of each (offsets 4–9) and
    // removes 0–3, once their segment is closed: the last record comes after segment.ms,
    // in a segment of its own.
    let keys = ["a", "b", "a", "b", "c", "a", "d", "b", "e", "f"];
    let lines = dns_lines(0..keys.len());
    for (i, (k, line)) in keys.iter().zip(&lines).enumerate() {
        if i == keys.len() - 1 {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let d = producer
            .send(
                FutureRecord::to(&topic).partition(0).key(*k).payload(line),
                Duration::from_secs(10),
            )
            .await
            .map_err(|(e, _)| e)
            .expect("produce");
        assert_eq!(d.offset, i as i64);
    }
    // The broker's cleaner runs every second or so (test-env.sh): wait for the holes.
    let survivors = || -> Vec<i64> {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", kafka())
            .set("group.id", unique("compact_reader"))
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "true")
            .create()
            .expect("reader");
        c.assign(&{
            let mut t = rdkafka::TopicPartitionList::new();
            t.add_partition_offset(&topic, 0, rdkafka::Offset::Beginning)
                .expect("tpl");
            t
        })
        .expect("assign");
        let mut out = Vec::new();
        while let Some(m) = c.poll(Duration::from_secs(5)) {
            match m {
                Ok(m) => out.push(m.offset()),
                Err(rdkafka::error::KafkaError::PartitionEOF(_)) => break,
                Err(e) => panic!("read: {e}"),
            }
        }
        out
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let kept = loop {
        let kept = survivors();
        if kept.len() < keys.len() {
            break kept;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the topic was not compacted within 60 s: {kept:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    assert!(kept.contains(&9) && kept.contains(&4), "{kept:?}");
    let holes = keys.len() - kept.len();

    let auditor = s.start_auditor("offset_columns", "2s", "500ms").await;
    let dropped = kept[kept.len() / 2];
    let read = s
        .pipeline()
        .records(kept.len())
        .copies(move |o| usize::from(o != dropped))
        .run()
        .await;
    assert_eq!(read, kept);
    auditor
        .wait_decided(60, "one lost, the rest confirmed", |a| {
            a.lost(&topic, 0) == 1 && a.confirmed(&topic, 0) == kept.len() as u64 - 1
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        auditor.counter(&auditor.metrics.records_unverifiable, &topic, 0),
        0,
        "{holes} compacted offsets counted unverifiable"
    );
    let gaps = api_gaps(&auditor).await;
    assert_eq!(
        gap_tuples(&gaps),
        vec![(0, dropped, dropped, 1)],
        "{holes} holes: {gaps:?}"
    );
    auditor.stop().await;
}

/// The auditor's own group under KIP-848's consumer protocol (`group.protocol = consumer`,
/// librdkafka 2.12, Kafka 4.4): the broker assigns the partitions and owns the session
/// timeout, so the auditor sets none; a loss on each of two partitions is found. The
/// classic-protocol settings the tests use otherwise would make librdkafka refuse the
/// consumer, and config validation refuses them with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_auditor_group_under_the_kip_848_protocol_finds_losses() {
    let s = Scenario::with_partitions("kip848", 2).await;
    let topic = s.topic.clone();
    let toml = config_builder(&s.spec("offset_columns", "2s", "500ms"))
        .kafka_property("group.protocol", "consumer")
        .render();
    let classic = [
        "session_timeout = \"6s\"\n",
        "heartbeat_interval = \"500ms\"\n",
    ];
    for line in classic {
        assert!(toml.contains(line), "{toml}");
    }
    let refused = gap_auditor::config::Config::from_toml_str(&toml)
        .expect_err("a session timeout under the consumer protocol");
    assert!(
        refused.to_string().contains("kafka.session_timeout"),
        "{refused}"
    );
    let toml = classic.iter().fold(toml, |t, line| t.replace(line, ""));
    let auditor = Auditor::start(&toml).await;
    let lines = dns_lines(0..8);
    let producer = TestProducer::new(&topic);
    for p in 0..2 {
        producer.send_all(p, &lines[..4]).await;
        s.pipeline()
            .partition(p)
            .records(4)
            .copies(move |o| usize::from(o != 1 + i64::from(p)))
            .run()
            .await;
    }
    auditor
        .wait_decided(60, "one lost on each partition", |a| {
            (0..2).all(|p| a.lost(&topic, p) == 1 && a.confirmed(&topic, p) == 3)
        })
        .await;
    let gaps = api_gaps(&auditor).await;
    assert_eq!(
        gap_tuples(&gaps),
        vec![(0, 1, 1, 1), (1, 2, 2, 1)],
        "{gaps:?}"
    );
    auditor.stop().await;
}

/// The retention countdown reads the topic's real `retention.ms` (DescribeConfigs on the
/// broker): a topic kept one hour, a record the pipeline drops. The gap's
/// `unrecoverable_at` is its record's timestamp + 1 h and the countdown gauge
/// `gap_auditor_gap_unrecoverable_seconds` is what is left of that hour. Then DeleteRecords
/// moves the log start past the gap (as size-based retention would, earlier than
/// `retention.ms`): the gap turns `unrecoverable` and the countdown reads 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_retention_countdown_follows_the_topics_retention_ms_and_log_start() {
    const HOUR_MS: i64 = 3_600_000;
    let s = Scenario::new("retention").await;
    let topic = s.topic.clone();
    let altered = admin()
        .alter_configs(
            &[
                rdkafka::admin::AlterConfig::new(rdkafka::admin::ResourceSpecifier::Topic(&topic))
                    .set("retention.ms", &HOUR_MS.to_string()),
            ],
            &opts(),
        )
        .await
        .expect("alter_configs");
    for r in altered {
        r.expect("retention.ms set");
    }
    let auditor = s.start_auditor("offset_columns", "2s", "500ms").await;
    let lines = dns_lines(0..4);
    assert_eq!(s.send(&lines).await, vec![0, 1, 2, 3]);
    s.pipeline()
        .records(4)
        .copies(|o| usize::from(o != 2))
        .run()
        .await;
    auditor
        .wait_decided(30, "offset 2 lost", |a| a.lost(&topic, 0) == 1)
        .await;
    let gaps = auditor.stored_gaps();
    let gap = gaps
        .iter()
        .find(|g| g.first_offset == 2)
        .unwrap_or_else(|| panic!("the gap at 2: {gaps:?}"));
    let first = gap.first_timestamp.expect("the gap's record timestamp");
    let deadline = gap
        .unrecoverable_at
        .unwrap_or_else(|| panic!("no deadline from retention.ms: {gap:?}"));
    assert_eq!(
        deadline.timestamp_millis(),
        first.timestamp_millis() + HOUR_MS,
        "unrecoverable_at = first record timestamp + retention.ms: {gap:?}"
    );
    let left = countdown(&auditor, &topic)
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("countdown: {:?}", countdown(&auditor, &topic)));
    let expect = (deadline - Utc::now()).num_milliseconds() as f64 / 1000.0;
    assert!(
        left <= 3600.0 && (left - expect).abs() < 30.0,
        "countdown {left} s, deadline in {expect} s"
    );

    assert_eq!(
        delete_records(&topic, 0, 3).await,
        3,
        "log start moved to 3"
    );
    auditor
        .wait_for(60, "the gap is unrecoverable", |a| {
            a.stored_gaps().iter().any(|g| {
                g.first_offset == 2 && g.state == gap_auditor::gap::GapState::Unrecoverable
            })
        })
        .await;
    auditor
        .wait_for(10, "the countdown is over", |a| {
            countdown(a, &topic).is_some_and(|v| v == "0")
        })
        .await;
    auditor.stop().await;
}

/// The exported `gap_auditor_gap_unrecoverable_seconds` of partition 0 of `topic`, if any
/// (read from the exposition: `with_label_values` would create a 0 series).
fn countdown(a: &Auditor, topic: &str) -> Option<String> {
    let label = format!("topic=\"{topic}\"");
    a.metrics
        .render()
        .lines()
        .find(|l| {
            l.starts_with("gap_auditor_gap_unrecoverable_seconds{")
                && l.contains(&label)
                && l.contains("partition=\"0\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .map(str::to_string)
}
