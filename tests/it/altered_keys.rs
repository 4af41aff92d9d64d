//! Key columns altered while the audit runs (`ALTER TABLE`): the keys already read keep
//! the types read at start (docs/SEMANTICS.md), and no record whose row is in the sink may
//! read as lost for it.

use crate::support::*;
use std::time::Duration;

/// Widening the time column's precision while the daemon runs (`DATETIME` →
/// `DATETIME(3)`, an online migration to keep milliseconds) is harmless to the sink: every
/// row still holds its record's time, and the key count (`time = '… 11:00:05'`) still
/// finds it. A read by time compares the row's printed text (`… 11:00:05.000`) byte for
/// byte with the key written for the column's type read at start (`… 11:00:05`): before
/// the fix (found by session 36's adversarial review) every record written after the
/// ALTER was declared lost. A read now checks the first rows no key matched against the
/// types it knows, and on a mismatch counts those seconds by key and reads the types again.
async fn widen_time_precision_while_running(read_by_time: bool) {
    let s = Scenario::with_seed_ddl("altertime", 1).await;
    let topic = s.topic.clone();
    if read_by_time {
        s.exec("ALTER TABLE {table} ADD INDEX tk (time, client_ip, domain)")
            .await;
    }
    let auditor = s.start_auditor("key_columns", "1s", "300ms").await;
    let lines: Vec<String> = (0..20)
        .map(|i| {
            seed_line(
                &format!("10.0.7.{i}"),
                &format!("w{i}.example"),
                &format!("2024-01-01 11:00:{i:02}"),
            )
        })
        .collect();
    assert_eq!(s.send(&lines[..10]).await, (0..10).collect::<Vec<i64>>());
    s.pipeline().records(10).run().await;
    auditor
        .wait_decided(60, "the first 10 records decided", |a| {
            a.confirmed(&topic, 0) + a.lost(&topic, 0) >= 10
        })
        .await;
    assert_eq!(
        (auditor.confirmed(&topic, 0), auditor.lost(&topic, 0)),
        (10, 0),
        "before the ALTER"
    );
    s.exec("ALTER TABLE {table} MODIFY time DATETIME(3)").await;
    assert_eq!(s.send(&lines[10..]).await, (10..20).collect::<Vec<i64>>());
    s.pipeline().start_at(10).records(10).run().await;
    assert_eq!(s.rows().await, 20, "the pipeline wrote every record");
    auditor
        .wait_decided(60, "all 20 records decided", |a| {
            a.confirmed(&topic, 0) + a.lost(&topic, 0) >= 20
        })
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let by_time = auditor.due_keys_counted_by_time().await;
    let gaps = gap_tuples(&api_gaps(&auditor).await);
    let verdict = (auditor.confirmed(&topic, 0), auditor.lost(&topic, 0));
    auditor.stop().await;
    if read_by_time {
        assert!(by_time > 0.0, "no due key was read by time");
    }
    assert_eq!(
        (verdict, gaps),
        ((20, 0), vec![]),
        "every record's row is in the sink (read by time: {read_by_time}, keys counted by \
         time: {by_time})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn widening_the_time_column_while_running_is_no_loss_read_by_time() {
    widen_time_precision_while_running(true).await;
}

/// The same input counted key by key (no index starts with `time`), which compares by the
/// column's type and was right before the fix too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn widening_the_time_column_while_running_is_no_loss_counted_by_key() {
    widen_time_precision_while_running(false).await;
}
