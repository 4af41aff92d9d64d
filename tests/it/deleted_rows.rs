//! Issue 34 item 3 (SPEC guarantee 10): a row the sink deleted frees its claim, on the real
//! MariaDB and Kafka, with the README's seed DDL (`time DATETIME`, VARCHAR key columns).
//!
//! Record A is confirmed; the sink deletes its row (a TTL, an operator's `DELETE`, a dropped
//! Doris partition); the same line is produced again as record B and written. Before, B met
//! A's claim on a key with one row and was reported lost (`shared_key`) for good. The
//! auditor now counts B's key in the round after it reads B, before B is due, sees no row
//! for a key holding a claim, and frees the claim: B's row confirms B. The control keeps A's
//! row and drops B's write: B is lost, exactly as before.

use crate::faults::record;
use crate::support::*;
use std::time::Duration;

/// The line produced twice (A, then B): one client, one name, one second.
const REUSED: &str =
    "10.0.9.1|reused.example.com|2024-01-01 10:00:05|1.1.1.1|NOERROR|A|-|-|8.8.8.8";

/// A line of its own key, so that each step has a second record to settle.
fn unique_line(i: usize) -> String {
    format!(
        "10.0.9.{}|u{i}.example.com|2024-01-01 10:00:{i:02}|1.1.1.1|NOERROR|A|-|-|8.8.8.8",
        10 + i
    )
}

/// Runs A's step (A and a unique record written, confirmed), then deletes A's row when
/// `delete_a`, then produces B and a unique record, waits for the auditor's look at B's key,
/// and lets the pipeline write them (B with `b_copies` rows). Returns the auditor and the
/// scenario once all four records are decided.
async fn reuse_a_key(name: &str, delete_a: bool, b_copies: usize) -> (Scenario, Auditor) {
    let s = Scenario::with_seed_ddl(name, 1).await;
    let topic = s.topic.clone();
    let auditor = s.start_auditor("key_columns", "1s", "300ms").await;
    assert_eq!(
        s.send(&[REUSED.to_string(), unique_line(1)]).await,
        vec![0, 1]
    );
    s.pipeline().records(2).run().await;
    auditor
        .wait_decided(60, "A and its neighbour confirmed", |a| {
            a.confirmed(&topic, 0) >= 2
        })
        .await;
    assert_eq!(auditor.lost(&topic, 0), 0);
    if delete_a {
        let mut c = s.db.pool.get_conn().await.expect("conn");
        use mysql_async::prelude::Queryable;
        c.exec_drop(
            format!(
                "DELETE FROM `{}` WHERE client_ip = ? AND domain = ?",
                s.table
            ),
            ("10.0.9.1", "reused.example.com"),
        )
        .await
        .expect("delete A's row");
        assert_eq!(s.rows().await, 1);
    }
    assert_eq!(
        s.send(&[REUSED.to_string(), unique_line(2)]).await,
        vec![2, 3]
    );
    // The auditor reads B long before the pipeline writes it (the pipeline commits after
    // writing, so B is not due yet): a few rounds pass, each may look at B's key.
    auditor
        .wait_decided(60, "B read", |a| a.consumed(&topic, 0) >= 4)
        .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    s.pipeline()
        .start_at(2)
        .records(2)
        .copies(move |o| if o == 2 { b_copies } else { 1 })
        .run()
        .await;
    auditor
        .wait_decided(60, "all 4 records decided", |a| {
            a.confirmed(&topic, 0) + a.lost(&topic, 0) >= 4
        })
        .await;
    // A few more rounds: nothing may change its mind.
    tokio::time::sleep(Duration::from_secs(2)).await;
    (s, auditor)
}

/// A's row deleted before B was written: B's row is B's, nothing is lost (before: B
/// reported lost, a `shared_key` gap that never turned late).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_row_the_sink_deleted_frees_its_claim_for_the_keys_next_record() {
    let (s, auditor) = reuse_a_key("delrow", true, 1).await;
    let topic = &s.topic;
    let reported = gap_tuples(&api_gaps(&auditor).await);
    record(
        "deleted_row_frees_its_claim",
        1,
        1,
        &[],
        &reported,
        auditor.lost(topic, 0),
        format!(
            "record A confirmed, its row deleted, the same line produced again as B and \
             written: confirmed {}, lost {}, duplicated {}",
            auditor.confirmed(topic, 0),
            auditor.lost(topic, 0),
            auditor.duplicated(topic, 0)
        ),
    );
    assert_eq!(reported, Vec::<(i64, i64, i64, i64)>::new());
    assert_eq!(
        (
            auditor.confirmed(topic, 0),
            auditor.lost(topic, 0),
            auditor.duplicated(topic, 0)
        ),
        (4, 0, 0)
    );
    // A's neighbour, B and B's neighbour.
    assert_eq!(s.rows().await, 3);
    auditor.stop().await;
}

/// The control: A's row kept, B's write lost. One row for two records of the key: B is
/// reported lost (the sink's one row is A's claim).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_row_still_there_keeps_its_claim_and_a_lost_write_is_reported() {
    let (s, auditor) = reuse_a_key("keptrow", false, 0).await;
    let topic = &s.topic;
    let gaps = api_gaps(&auditor).await;
    let reported = gap_tuples(&gaps);
    record(
        "kept_row_keeps_its_claim",
        1,
        1,
        &[(0, 2, 2, 1)],
        &reported,
        auditor.lost(topic, 0),
        format!(
            "record A confirmed, its row kept, the same line produced again as B and dropped by \
             the pipeline: confirmed {}, lost {}, duplicated {}",
            auditor.confirmed(topic, 0),
            auditor.lost(topic, 0),
            auditor.duplicated(topic, 0)
        ),
    );
    assert_eq!(reported, vec![(0, 2, 2, 1)]);
    assert_eq!(gaps[0]["state"], "open", "{gaps:?}");
    assert_eq!(
        (auditor.confirmed(topic, 0), auditor.lost(topic, 0)),
        (3, 1)
    );
    // A, A's neighbour and B's neighbour.
    assert_eq!(s.rows().await, 3);
    auditor.stop().await;
}
