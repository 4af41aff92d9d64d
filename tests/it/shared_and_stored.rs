//! Issue 34 items 4, 6 and 8, on the real broker and MariaDB: a sink table another topic
//! writes too (offset_columns without `topic_column`), a key field added between restarts,
//! and a store whose state of one partition cannot be read.

use crate::faults::record;
use crate::support::*;
use std::time::Duration;

/// (partition, first, last, missing) of the gaps still missing records, from the API.
async fn open_gaps(a: &Auditor) -> Vec<(i64, i64, i64, i64)> {
    let mut g = gap_tuples(&api_gaps(a).await);
    g.retain(|t| t.3 > 0);
    g
}

/// The audit's SQLite store in `dir`, opened beside the (stopped) auditor.
fn open_store(dir: &std::path::Path) -> rusqlite::Connection {
    rusqlite::Connection::open(dir.join(gap_auditor::store::DB_FILE)).expect("open the store")
}

/// The status of partition `p` of the first audit, once assigned.
fn part(a: &Auditor, p: i32) -> Option<gap_auditor::status::PartitionStatus> {
    a.status
        .snapshot()
        .first()
        .and_then(|s| s.partitions.iter().find(|x| x.partition == p).cloned())
}

/// Item 4: topics `test` and `other` written into one table (a Connect sink with
/// `topics.regex`); the audit of `test` has no `topic_column`. `test`'s record at
/// partition 0 offset 5 is dropped, and `other` has a row at (0, 5) — and rows up to offset
/// 19, beyond `test`'s log end (10). Before: the other topic's row confirmed the lost
/// record, all 10 confirmed, nothing reported, nothing said. Now: the audit's first look
/// sees rows its topic cannot have and it refuses to start (SPEC "The sink's model"), its
/// error naming `topic_column`, nothing confirmed or lost before. (Fails on 1297840: the
/// audit runs on and the record at offset 5 is confirmed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn another_topics_rows_make_an_offset_audit_without_a_topic_column_refuse_to_start() {
    let s = Scenario::new("shared_tbl").await;
    // The other topic's rows are there before the audit starts: 20 records on partition 0.
    for (o, line) in dns_lines(100..120).iter().enumerate() {
        s.db.insert_line(&s.table, line.as_bytes(), 0, o as i64)
            .await;
    }
    assert_eq!(
        s.send(&dns_lines(0..10)).await,
        (0..10).collect::<Vec<i64>>()
    );
    s.pipeline()
        .records(10)
        .copies(|o| usize::from(o != 5))
        .run()
        .await;
    let auditor = s.start_auditor("offset_columns", "1s", "300ms").await;
    let status = auditor.status.clone();
    let (metrics, topic) = (auditor.metrics.clone(), s.topic.clone());
    // SPEC "The sink's model": the auditor refuses to start when it can see another
    // topic's rows, naming the key to add; nothing was decided either way before it did.
    let result = tokio::time::timeout(Duration::from_secs(60), auditor.handle)
        .await
        .expect("the audit stops by itself")
        .expect("no panic");
    let error = format!("{:#}", result.expect_err("refused"));
    assert!(
        error.contains("refusing to start")
            && error.contains("topic_column")
            && error.contains("partition 0 offset 19"),
        "{error}"
    );
    let counted =
        |f: &prometheus::IntCounterVec| f.with_label_values(&["dns_logs", &topic, "0"]).get();
    assert_eq!(
        counted(&metrics.records_confirmed),
        0,
        "no foreign row confirms"
    );
    assert_eq!(
        counted(&metrics.records_lost),
        0,
        "unknown is never missing"
    );
    drop(status);

    // The cure the refusal names: a `topic` column (what a Connect sink writes with
    // `topics.regex` and a topic field) and `topic_column` set. Started again on a fresh
    // state, the audit sees only `test`'s rows: the other topic's row at (0, 5) no longer
    // confirms the dropped record, which is reported exactly.
    {
        use mysql_async::prelude::Queryable;
        let mut c = s.db.pool.get_conn().await.expect("conn");
        c.query_drop(format!(
            "ALTER TABLE `{}` ADD COLUMN topic VARCHAR(255) NOT NULL DEFAULT 'other'",
            s.table
        ))
        .await
        .expect("add the topic column");
        let ours: Vec<String> = dns_lines(0..10)
            .iter()
            .map(|l| format!("'{}'", l.split('|').nth(1).expect("domain")))
            .collect();
        c.query_drop(format!(
            "UPDATE `{}` SET topic = '{}' WHERE domain IN ({})",
            s.table,
            topic,
            ours.join(",")
        ))
        .await
        .expect("tag the audited topic's rows");
    }
    let fresh = tempfile::tempdir().expect("state dir");
    let mut spec = s.spec("offset_columns", "1s", "300ms");
    spec.state_dir = fresh.path();
    let toml = config_builder(&spec).render().replace(
        "offset_column = \"offset\"",
        "offset_column = \"offset\"\ntopic_column = \"topic\"",
    );
    assert!(toml.contains("topic_column"), "{toml}");
    let auditor = Auditor::start(&toml).await;
    auditor
        .wait_decided(60, "all 10 records decided", |a| {
            a.confirmed(&topic, 0) + a.lost(&topic, 0) >= 10
        })
        .await;
    let reported = open_gaps(&auditor).await;
    let expected = [(0, 5, 5, 1)];
    record(
        "shared_table_topic_column",
        1,
        1,
        &expected,
        &reported,
        reported.iter().map(|g| g.3 as u64).sum(),
        format!(
            "without `topic_column`: refused to start ({}); with it: {} confirmed, {} lost",
            error.lines().next().unwrap_or_default(),
            auditor.confirmed(&topic, 0),
            auditor.lost(&topic, 0)
        ),
    );
    assert_eq!(reported, expected);
    auditor.stop().await;
}

/// Item 6: a key field added between restarts. The audit ran with the key (client_ip,
/// domain) and stored a missing record (offset 3) with a two-value key; restarted with
/// (client_ip, domain, time), a new record (offset 8) goes missing, then its row arrives.
/// Before: the re-check batch held both arities, was built as a query that selects
/// nothing, and counted 0 for every key in release builds: offset 8 never turned late.
/// Now: the old-arity record is given up at restore with one WARN (it stays missing), and
/// offset 8 is found late. (Fails on main: offset 8 stays missing; checked there.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_field_added_between_restarts_does_not_blind_rechecks() {
    let s = Scenario::with_seed_ddl("arity", 1).await;
    let three = config_toml(&s.spec("key_columns", "1s", "300ms"));
    let seed_key = "key = [\"client_ip\",\"domain\",\"time\"]";
    assert!(three.contains(seed_key), "{three}");
    let two = three.replace(seed_key, "key = [\"client_ip\",\"domain\"]");
    let lines = dns_lines(0..10);
    assert_eq!(s.send(&lines[0..5]).await, vec![0, 1, 2, 3, 4]);
    s.pipeline()
        .records(5)
        .copies(|o| usize::from(o != 3))
        .run()
        .await;
    let auditor = Auditor::start(&two).await;
    auditor
        .wait_decided(30, "offset 3 missing with the old key", |a| {
            a.lost(&s.topic, 0) == 1 && a.confirmed(&s.topic, 0) == 4
        })
        .await;
    auditor.stop().await;

    let auditor = Auditor::start(&three).await;
    assert_eq!(s.send(&lines[5..10]).await, vec![5, 6, 7, 8, 9]);
    s.pipeline()
        .start_at(5)
        .records(5)
        .copies(|o| usize::from(o != 8))
        .run()
        .await;
    auditor
        .wait_decided(30, "offset 8 missing with the new key", |a| {
            a.lost(&s.topic, 0) == 1 && a.confirmed(&s.topic, 0) == 4
        })
        .await;
    // The row of offset 8 arrives: found late, in a re-check of its own arity.
    s.db.insert_seed_line(&s.table, lines[8].as_bytes()).await;
    let late = |a: &Auditor| a.counter(&a.metrics.records_late, &s.topic, 0);
    auditor
        .wait_decided(20, "offset 8 found late", |a| late(a) == 1)
        .await;
    assert_eq!(auditor.sink_errors(), 0);
    // Offset 3 is still missing: given up, not confirmed (its row was never written).
    let reported = open_gaps(&auditor).await;
    let expected = [(0, 3, 3, 1)];
    record(
        "key_arity_changed_between_restarts",
        1,
        1,
        &expected,
        &reported,
        reported.iter().map(|g| g.3 as u64).sum(),
        format!(
            "key (client_ip, domain) then (client_ip, domain, time): offset 3 (old key) given \
             up and still missing, offset 8 (new key) late {}; sink errors {}",
            late(&auditor),
            auditor.sink_errors()
        ),
    );
    assert_eq!(reported, expected);
    auditor.stop().await;
}

/// Item 8: one partition's stored state unreadable. Two partitions each with a gap at
/// offset 2; stopped; partition 0's progress row (ledger head) and its missing-run item are
/// corrupted in the SQLite file, and partition 1's row arrives late. Before: the whole load failed, every partition restarted
/// from the group's commit with a fresh ledger, whose first write replaced every stored
/// item: partition 1's open gap was orphaned (its late row never seen). Now: partition 1 is
/// restored whole and its gap turns late; partition 0 says why in its status, resumes
/// from its settled offset, and the unreadable item is still in the store after rounds
/// wrote its partition. (Fails on main: partition 1's late count stays 0; checked there.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreadable_partition_state_costs_only_that_partition() {
    let s = Scenario::with_partitions("corrupt", 2).await;
    let lines = dns_lines(0..12);
    for p in 0..2 {
        let chunk = &lines[p * 6..p * 6 + 6];
        assert_eq!(
            s.producer.send_all(p as i32, chunk).await,
            (0..6).collect::<Vec<i64>>()
        );
        s.pipeline()
            .partition(p as i32)
            .records(6)
            .copies(|o| usize::from(o != 2))
            .run()
            .await;
    }
    let auditor = s.start_auditor("offset_columns", "1s", "300ms").await;
    auditor
        .wait_decided(30, "one gap on each partition", |a| {
            (0..2).all(|p| a.lost(&s.topic, p) == 1 && a.confirmed(&s.topic, p) == 5)
        })
        .await;
    auditor.stop().await;

    {
        let db = open_store(s.state.path());
        let n = db
            .execute(
                "UPDATE progress SET ledger = '{not json' WHERE partition = 0",
                [],
            )
            .expect("corrupt the progress row");
        assert_eq!(n, 1);
        let n = db
            .execute(
                "UPDATE ledger_items SET body = '{broken' WHERE partition = 0 AND kind = 0",
                [],
            )
            .expect("corrupt the missing run");
        assert_eq!(n, 1, "partition 0 stored one missing run");
    }
    // Partition 1's late row arrives while the auditor is stopped; partition 0's never.
    s.db.insert_line(&s.table, lines[8].as_bytes(), 1, 2).await;
    let auditor = s.start_auditor("offset_columns", "1s", "300ms").await;
    let late = |a: &Auditor, p: i32| a.counter(&a.metrics.records_late, &s.topic, p);
    auditor
        .wait_decided(30, "partition 1's gap found late", |a| late(a, 1) == 1)
        .await;
    let p0 = part(&auditor, 0).expect("partition 0 assigned");
    let why = p0.state_problem.clone().expect("partition 0 says why");
    assert!(why.contains("unreadable"), "{why}");
    assert_eq!(p0.settled, 6, "resumed at its stored settled offset");
    assert_eq!(part(&auditor, 1).expect("p1").state_problem, None);
    let (_, body) = auditor.get("/api/status").await;
    assert!(body.contains("state_problem"), "{body}");
    // New records on partition 0 are audited and written: the unreadable item stays.
    assert_eq!(s.producer.send_all(0, &dns_lines(20..22)).await, vec![6, 7]);
    s.pipeline().partition(0).start_at(6).records(2).run().await;
    auditor
        .wait_decided(30, "partition 0 goes on", |a| {
            part(a, 0).is_some_and(|p| p.settled == 8)
        })
        .await;
    let reported = open_gaps(&auditor).await;
    let expected = [(0, 2, 2, 1)];
    record(
        "unreadable_partition_state",
        1,
        2,
        &expected,
        &reported,
        reported.iter().map(|g| g.3 as u64).sum(),
        format!(
            "partition 0's progress row and missing-run item corrupted while stopped: \
             partition 1's gap late {}, partition 0 resumed at {} and says {:?}",
            late(&auditor, 1),
            p0.settled,
            why
        ),
    );
    assert_eq!(reported, expected);
    auditor.stop().await;
    let db = open_store(s.state.path());
    let kept: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM ledger_items WHERE partition = 0 AND body = '{broken'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(kept, 1, "a write never replaces an item it could not read");
}
