//! An upsert table merges keys by its columns' collations (found by the adversarial review
//! of session 36): MariaDB's default `utf8mb4_general_ci` makes `Example.COM` and
//! `example.com` one row, PAD SPACE makes `b.example` and `b.example ` one row, and the row
//! keeps one of the spellings. Both records landed (SPEC, "the sink's model": two spellings
//! the sink equates are one key), so neither may read as lost. Before the fix both counts
//! compared the key byte-exactly (`CAST(… AS BINARY)`) under `presence` too, and reported
//! the spelling the table did not keep lost for good. A table that merges that way is not
//! read by time either: a row's bytes cannot be matched to a key.

use crate::support::*;
use std::time::Duration;

/// With an index starting with `time`, which would have the table read by time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spellings_an_upsert_table_merges_are_not_lost_with_a_time_index() {
    spellings_an_upsert_table_merges(true).await;
}

/// Counted key by key (no index starts with `time`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spellings_an_upsert_table_merges_are_not_lost_by_key() {
    spellings_an_upsert_table_merges(false).await;
}

async fn spellings_an_upsert_table_merges(time_index: bool) {
    let s = Scenario::with_upsert_table("collmerge", 1).await;
    let topic = s.topic.clone();
    if time_index {
        s.exec("ALTER TABLE {table} ADD INDEX tk (time, client_ip, domain)")
            .await;
    }
    let auditor = s.start_auditor("key_columns", "1s", "300ms").await;
    let lines = vec![
        seed_line("10.0.8.1", "Example.COM", "2024-01-01 12:00:00"),
        seed_line("10.0.8.1", "example.com", "2024-01-01 12:00:00"),
        seed_line("10.0.8.2", "b.example", "2024-01-01 12:00:01"),
        seed_line("10.0.8.2", "b.example ", "2024-01-01 12:00:01"),
        seed_line("10.0.8.3", "c.example", "2024-01-01 12:00:02"),
        seed_line("10.0.8.4", "d.example", "2024-01-01 12:00:03"),
    ];
    assert_eq!(s.send(&lines).await, (0..6).collect::<Vec<i64>>());
    // One checkpoint: every row written, then the commit.
    s.pipeline()
        .records(6)
        .commit_every(6, Duration::ZERO)
        .run()
        .await;
    assert_eq!(s.rows().await, 4, "the table merged the two pairs");
    auditor
        .wait_decided(60, "all 6 records decided", |a| {
            a.confirmed(&topic, 0) + a.lost(&topic, 0) >= 6
        })
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let by_time = auditor.due_keys_counted_by_time().await;
    let gaps = gap_tuples(&api_gaps(&auditor).await);
    let verdict = (auditor.confirmed(&topic, 0), auditor.lost(&topic, 0));
    auditor.stop().await;
    assert_eq!(
        (verdict, gaps),
        ((6, 0), vec![]),
        "every record was written; the sink merged spellings it equates"
    );
    assert_eq!(
        by_time, 0.0,
        "a table that merges spellings is counted by key, never read by time"
    );
}

/// The same spellings in a table that keeps every row (no PRIMARY/UNIQUE key within the
/// key columns, `multiset`): each spelling is its own row, a record whose spelling has no
/// row is lost however the collation compares, and the table is still read by time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spellings_a_multiset_table_keeps_are_still_compared_exactly() {
    let s = Scenario::with_seed_ddl("collkeep", 1).await;
    let topic = s.topic.clone();
    // The seed DDL's key columns are utf8mb4_nopad_bin: give `domain` a collation that
    // ignores case and trailing spaces, as a table created with the server's default.
    s.exec(
        "ALTER TABLE {table} MODIFY domain VARCHAR(512) CHARACTER SET utf8mb4 \
         COLLATE utf8mb4_general_ci NOT NULL",
    )
    .await;
    s.exec("ALTER TABLE {table} ADD INDEX tk (time, client_ip, domain)")
        .await;
    let auditor = s.start_auditor("key_columns", "1s", "300ms").await;
    let lines = vec![
        seed_line("10.0.8.1", "Example.COM", "2024-01-01 12:00:00"),
        seed_line("10.0.8.1", "example.com", "2024-01-01 12:00:00"),
        seed_line("10.0.8.2", "b.example", "2024-01-01 12:00:01"),
        seed_line("10.0.8.2", "b.example ", "2024-01-01 12:00:01"),
    ];
    assert_eq!(s.send(&lines).await, (0..4).collect::<Vec<i64>>());
    // The pipeline drops offsets 1 and 3: only the first spelling of each pair is written.
    s.pipeline()
        .records(4)
        .copies(|o| usize::from(o != 1 && o != 3))
        .commit_every(4, Duration::ZERO)
        .run()
        .await;
    auditor
        .wait_decided(60, "all 4 records decided", |a| {
            a.confirmed(&topic, 0) + a.lost(&topic, 0) >= 4
        })
        .await;
    let by_time = auditor.due_keys_counted_by_time().await;
    let verdict = (auditor.confirmed(&topic, 0), auditor.lost(&topic, 0));
    auditor.stop().await;
    assert_eq!(
        verdict,
        (2, 2),
        "each spelling is its own row in a multiset table"
    );
    assert!(by_time > 0.0, "a multiset table is still read by time");
}

/// `match.key_semantics = "presence"` while the table does not exist yet (the pipeline
/// creates it later): the audit takes the configured semantics, and the key counts follow
/// them once the table is there, comparing as it merges (found by session 36's review of
/// the fix: the sink followed only a model read from the table, so it stayed byte-exact).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn configured_presence_on_a_table_created_later_compares_as_it_merges() {
    let s = Scenario::with_upsert_table("collater", 1).await;
    let topic = s.topic.clone();
    s.exec("DROP TABLE {table}").await;
    let toml = with_key_semantics(
        &config_toml(&s.spec("key_columns", "1s", "300ms")),
        "presence",
    );
    let auditor = Auditor::start(&toml).await;
    s.db.create_upsert_table(&s.table).await;
    let lines = vec![
        seed_line("10.0.8.1", "Example.COM", "2024-01-01 12:00:00"),
        seed_line("10.0.8.1", "example.com", "2024-01-01 12:00:00"),
        seed_line("10.0.8.3", "c.example", "2024-01-01 12:00:02"),
    ];
    assert_eq!(s.send(&lines).await, (0..3).collect::<Vec<i64>>());
    s.pipeline()
        .records(3)
        .commit_every(3, Duration::ZERO)
        .run()
        .await;
    assert_eq!(s.rows().await, 2, "the table merged the pair");
    auditor
        .wait_decided(60, "all 3 records decided", |a| {
            a.confirmed(&topic, 0) + a.lost(&topic, 0) >= 3
        })
        .await;
    let verdict = (auditor.confirmed(&topic, 0), auditor.lost(&topic, 0));
    auditor.stop().await;
    assert_eq!(
        verdict,
        (3, 0),
        "both spellings landed in the row the table kept"
    );
}
