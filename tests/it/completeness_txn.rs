//! Completeness on transactional topics (issue 35 item 1, SPEC "Completeness": "Offsets a
//! partition's consumer position has passed without a record (transaction markers, aborted
//! batches under read_committed) are holes: a quiet transactional partition completes like
//! any other") against the real Kafka broker of the test environment, with real
//! transactional producers (commit and abort), an in-process daemon and the real `wait`
//! binary.
//!
//! Broker behaviour relied on: every transaction ends with one control record (its commit
//! or abort marker) that no read_committed fetch delivers, and aborted records stay in the
//! log, skipped by read_committed consumers.

use super::completeness::{api, completeness, record_ts, wait_bin};
use crate::support::*;
use gap_auditor::status::PartitionStatus;
use std::time::{Duration, Instant};

/// Partition `p` of the audit as the status board shows it.
fn part(a: &Auditor, p: i32) -> Option<PartitionStatus> {
    a.status
        .snapshot()
        .first()
        .and_then(|s| s.partitions.iter().find(|x| x.partition == p).cloned())
}

/// Polls `/api/completeness` for `until_ms` until it answers complete; fails with its last
/// answer after `secs`.
async fn wait_complete(a: &Auditor, until_ms: i64, secs: u64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let v = api(a, until_ms).await;
        if v["complete"] == true {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: never complete; last answer {v}\nstatus: {:?}",
            a.status.snapshot()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What the issue saw: 5 records in one committed transaction on partition 0 (its log ends
/// in the commit marker, offset 5), 5 plain records on partition 1, all written by the
/// pipeline and committed. Everything produced is in the sink, so completeness for a time
/// after the last record must turn true, and `wait` must exit 0 — before issue 35 it stayed
/// false forever ("test-0 holds it back: the auditor has not read it to its log end yet").
/// Partition 0 is read, and settled, past its marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quiet_transactional_partition_completes() {
    let s = Scenario::with_partitions("cpl_txn", 2).await;
    let topic = s.topic.clone();
    let auditor = s.start_auditor("offset_columns", "1s", "300ms").await;
    let txn = TxnProducer::new(&topic).await;
    assert_eq!(txn.commit(0, &dns_lines(0..5)).await, vec![0, 1, 2, 3, 4]);
    assert_eq!(
        s.producer.send_all(1, &dns_lines(5..10)).await,
        vec![0, 1, 2, 3, 4]
    );
    assert_eq!(
        log_end_reaching(&topic, 0, 6).await,
        6,
        "partition 0's log ends in the commit marker"
    );
    assert_eq!(s.pipeline().records(5).run().await, vec![0, 1, 2, 3, 4]);
    s.pipeline().partition(1).records(5).run().await;
    auditor
        .wait_decided(30, "all 10 records confirmed", |a| {
            a.confirmed(&topic, 0) == 5 && a.confirmed(&topic, 1) == 5
        })
        .await;
    let t_last = record_ts(&topic, 0, 4).max(record_ts(&topic, 1, 4));
    wait_complete(
        &auditor,
        t_last + 1,
        20,
        "everything produced is in the sink",
    )
    .await;
    let (code, out, err) = wait_bin(&auditor, t_last + 1, "20s").await;
    assert_eq!(code, 0, "wait on a quiet transactional topic\n{out}{err}");
    let p0 = part(&auditor, 0).expect("partition 0");
    assert_eq!(
        (p0.consumed, p0.settled),
        (6, 6),
        "read and settled past the commit marker"
    );
    assert!(completeness(&auditor).blockers.is_empty());
    assert_eq!(auditor.lost(&topic, 0) + auditor.lost(&topic, 1), 0);
    assert!(api_gaps(&auditor).await.is_empty());
    auditor.stop().await;
}

/// Aborted transactions in the middle and at the end of the log, their records flushed
/// into the log before the abort: committed 0-2 (marker 3), aborted 4-5 (marker 6),
/// committed 7-8 (marker 9), aborted 10-11 (marker 12). The pipeline (read_committed) writes
/// the 5 committed records. The aborted offsets and the markers are holes: no loss, no gap
/// (not even unverifiable), every committed record confirmed, the partition read and
/// settled to its log end (13), and completeness turns true.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn aborted_transactions_are_holes_never_loss_nor_unverifiable() {
    let s = Scenario::new("cpl_abort").await;
    let topic = s.topic.clone();
    let auditor = s.start_auditor("offset_columns", "1s", "300ms").await;
    let txn = TxnProducer::new(&topic).await;
    let mut committed = txn.commit(0, &dns_lines(0..3)).await;
    assert_eq!(committed, vec![0, 1, 2]);
    assert_eq!(txn.abort(0, &dns_lines(3..5)).await, vec![4, 5]);
    let more = txn.commit(0, &dns_lines(5..7)).await;
    assert_eq!(more, vec![7, 8]);
    committed.extend(more);
    assert_eq!(txn.abort(0, &dns_lines(7..9)).await, vec![10, 11]);
    assert_eq!(
        log_end_reaching(&topic, 0, 13).await,
        13,
        "the log ends in the abort marker"
    );
    let read = s.pipeline().records(5).run().await;
    assert_eq!(read, committed, "read_committed skips the aborted records");
    auditor
        .wait_decided(30, "the committed records confirmed", |a| {
            a.confirmed(&topic, 0) == 5
        })
        .await;
    let t_last = record_ts(&topic, 0, 8);
    wait_complete(
        &auditor,
        t_last + 1,
        20,
        "everything committed is in the sink",
    )
    .await;
    auditor
        .wait_for(10, "settled at the log end", |a| {
            part(a, 0).is_some_and(|p| p.consumed == 13 && p.settled == 13)
        })
        .await;
    // Rounds go on: the holes never turn into verdicts.
    keep_checking(Duration::from_secs(2), Duration::from_millis(100), || {
        assert_eq!(auditor.lost(&topic, 0), 0, "aborted records reported lost");
        assert_eq!(
            auditor.counter(&auditor.metrics.records_unverifiable, &topic, 0),
            0,
            "aborted records reported unverifiable"
        );
        assert_eq!(
            auditor.consumed(&topic, 0),
            5,
            "only committed records read"
        );
    })
    .await;
    let gaps = api_gaps(&auditor).await;
    assert!(gaps.is_empty(), "holes reported as gaps: {gaps:?}");
    assert!(auditor.stored_gaps().is_empty());
    let (code, out, err) = wait_bin(&auditor, t_last + 1, "20s").await;
    assert_eq!(code, 0, "{out}{err}");
    auditor.stop().await;
}

/// The restart case: a partition whose log ends in a commit marker, all of it
/// confirmed; the daemon stops; retention deletes the partition's records (DeleteRecords up
/// to the log end); the daemon starts again. Before issue 35 it had settled on the marker
/// (5), which Kafka had now deleted unread: a restart turned the marker into an
/// `unverifiable` gap that alerted and blocked every `wait`. Now it settled past it (6) and
/// resumes there: no gap, and the idle partition is complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restart_after_retention_does_not_make_a_trailing_marker_unverifiable() {
    let s = Scenario::new("cpl_txn_restart").await;
    let topic = s.topic.clone();
    let toml = config_toml(&s.spec("offset_columns", "1s", "300ms"));
    let auditor = Auditor::start(&toml).await;
    let txn = TxnProducer::new(&topic).await;
    assert_eq!(txn.commit(0, &dns_lines(0..5)).await, vec![0, 1, 2, 3, 4]);
    s.pipeline().records(5).run().await;
    auditor
        .wait_decided(30, "5 confirmed", |a| a.confirmed(&topic, 0) == 5)
        .await;
    let t_last = record_ts(&topic, 0, 4);
    // A few rounds persist what was decided (and the shutdown persists again).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let settled = part(&auditor, 0).map(|p| p.settled);
    auditor.stop().await;

    assert_eq!(
        delete_records(&topic, 0, 6).await,
        6,
        "retention deleted the records and the marker"
    );
    let auditor = Auditor::start(&toml).await;
    auditor
        .wait_for(30, "partition 0 assigned again", |a| part(a, 0).is_some())
        .await;
    keep_checking(Duration::from_secs(3), Duration::from_millis(100), || {
        let gaps = auditor.stored_gaps();
        assert!(
            gaps.is_empty(),
            "settled at {settled:?} before the restart; gaps after it: {gaps:?}"
        );
        assert_eq!(
            auditor.counter(&auditor.metrics.records_unverifiable, &topic, 0),
            0
        );
    })
    .await;
    assert!(api_gaps(&auditor).await.is_empty());
    let p0 = part(&auditor, 0).expect("partition 0");
    assert_eq!((p0.consumed, p0.settled), (6, 6), "resumed past the marker");
    wait_complete(
        &auditor,
        t_last + 1,
        20,
        "the idle partition after the restart",
    )
    .await;
    auditor.stop().await;
}
