//! Issue 34 item 2: key_columns on a typed key column, the README's seed DDL (`time
//! DATETIME`, VARCHAR for the rest, the server's default collation), on the real MariaDB.
//!
//! MariaDB stores `2024-01-01 10:00:05.185` in a DATETIME as `10:00:05` (truncated) but
//! compares the column with the string at its full precision, so before the audit wrote
//! keys in the column's domain every record whose milliseconds were not 000 read as lost;
//! and two spellings of one DATETIME (`T` or space) were two keys, the JOIN form counted
//! their rows under the first and the other read as lost.

use crate::faults::record;
use crate::support::*;
use std::time::Duration;

/// Record `i`: its own client and name, `time` at second `i` with milliseconds (never 000).
fn ms_line(i: usize) -> String {
    let ms = (185 + 29 * i) % 1000;
    format!(
        "10.0.1.{i}|host{i}.example.com|2024-01-01 10:00:{i:02}.{ms:03}|1.1.1.1|NOERROR|A|-|-|8.8.8.8"
    )
}

/// 30 records with millisecond times, 2 truly dropped by the pipeline: exactly those 2 are
/// reported (before: 29, every record with milliseconds), and the status shows the key
/// columns' types.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn millisecond_times_in_a_datetime_key_are_exact() {
    let s = Scenario::with_seed_ddl("msdt", 1).await;
    let topic = &s.topic;
    let auditor = s.start_auditor("key_columns", "1s", "300ms").await;
    let lines: Vec<String> = (0..30).map(ms_line).collect();
    assert_eq!(s.send(&lines).await, (0..30).collect::<Vec<i64>>());
    let dropped = [7i64, 19];
    s.pipeline()
        .records(30)
        .copies(move |o| usize::from(!dropped.contains(&o)))
        .run()
        .await;
    assert_eq!(s.rows().await, 28);
    auditor
        .wait_decided(60, "all 30 records decided", |a| {
            a.confirmed(topic, 0) + a.lost(topic, 0) >= 30
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let reported = gap_tuples(&api_gaps(&auditor).await);
    let expected = [(0, 7, 7, 1), (0, 19, 19, 1)];
    record(
        "typed_key_datetime_milliseconds",
        1,
        2,
        &expected,
        &reported,
        auditor.lost(topic, 0),
        format!(
            "30 records with millisecond times, key (client_ip, domain, time DATETIME), 2 \
             dropped: confirmed {}, lost {}, duplicated {}",
            auditor.confirmed(topic, 0),
            auditor.lost(topic, 0),
            auditor.duplicated(topic, 0)
        ),
    );
    assert_eq!(reported, expected);
    assert_eq!(
        (auditor.confirmed(topic, 0), auditor.lost(topic, 0)),
        (28, 2)
    );
    assert_eq!(auditor.duplicated(topic, 0), 0);

    // The model the verdicts were computed in (SPEC "The sink's model").
    let (code, body) = auditor.get("/api/status").await;
    assert_eq!(code, 200, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).expect("status json");
    let model = &status["audits"][0]["sink_model"]["key_columns"];
    assert_eq!(model["fraction"], "truncate", "{body}");
    let time = &model["columns"][2];
    assert_eq!(time["name"], "time", "{body}");
    assert_eq!(time["declared"], "datetime", "{body}");
    assert_eq!(time["type"]["kind"], "datetime", "{body}");
    assert_eq!(time["type"]["precision"], 0, "{body}");
    assert_eq!(model["columns"][0]["type"]["kind"], "text", "{body}");
    auditor.stop().await;
}

/// Two spellings of one DATETIME (`…T12:00:00` and `… 12:00:00`) in one key batch, both rows
/// written, and one record truly dropped: the two are one key of two records with two rows
/// (before: the JOIN form counted both rows under the first spelling, the second read as
/// lost and the first as duplicated), and only the dropped record is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_spellings_of_one_datetime_in_one_batch_are_one_key() {
    let s = Scenario::with_seed_ddl("dtspell", 1).await;
    let topic = &s.topic;
    let auditor = s.start_auditor("key_columns", "1s", "300ms").await;
    let lines = vec![
        "10.0.2.1|a.example|2024-01-01T12:00:00|1.1.1.1|NOERROR|A|-|-|8.8.8.8".to_string(),
        "10.0.2.1|a.example|2024-01-01 12:00:00|::1|NOERROR|AAAA|-|-|8.8.8.8".to_string(),
        "10.0.2.2|b.example|2024-01-01 12:00:01.5|1.1.1.2|NOERROR|A|-|-|8.8.8.8".to_string(),
        "10.0.2.3|c.example|2024-01-01 12:00:02|1.1.1.3|NOERROR|A|-|-|8.8.8.8".to_string(),
    ];
    assert_eq!(s.send(&lines).await, vec![0, 1, 2, 3]);
    // Every row is written before the pipeline's one commit: all four fall due together
    // and go to the sink in one batch (batch_size 100).
    s.pipeline()
        .records(4)
        .copies(|o| usize::from(o != 3))
        .commit_every(4, Duration::ZERO)
        .run()
        .await;
    assert_eq!(s.rows().await, 3);
    auditor
        .wait_decided(60, "all 4 records decided", |a| {
            a.confirmed(topic, 0) + a.lost(topic, 0) >= 4
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let reported = gap_tuples(&api_gaps(&auditor).await);
    record(
        "typed_key_two_datetime_spellings",
        1,
        1,
        &[(0, 3, 3, 1)],
        &reported,
        auditor.lost(topic, 0),
        format!(
            "`T` and space spellings of one DATETIME in one key batch, both rows written, one \
             other record dropped: confirmed {}, lost {}, duplicated {}",
            auditor.confirmed(topic, 0),
            auditor.lost(topic, 0),
            auditor.duplicated(topic, 0)
        ),
    );
    assert_eq!(reported, vec![(0, 3, 3, 1)]);
    assert_eq!(
        (
            auditor.confirmed(topic, 0),
            auditor.lost(topic, 0),
            auditor.duplicated(topic, 0)
        ),
        (3, 1, 0)
    );
    auditor.stop().await;
}

/// A key value the DATETIME column cannot store (`yesterday`): a strict server refuses the
/// row, a lenient one stores a zero date; either way the record is unverifiable, counted as
/// `unconvertible_key`, never reported lost (before: lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unconvertible_key_value_is_unverifiable_not_lost() {
    let s = Scenario::with_seed_ddl("dtbad", 1).await;
    let topic = &s.topic;
    let auditor = s.start_auditor("key_columns", "1s", "300ms").await;
    let lines = vec![
        "10.0.3.1|a.example|2024-01-01 12:00:00.250|1.1.1.1|NOERROR|A|-|-|8.8.8.8".to_string(),
        "10.0.3.2|b.example|yesterday|1.1.1.2|NOERROR|A|-|-|8.8.8.8".to_string(),
        "10.0.3.3|c.example|2024-01-01 12:00:02|1.1.1.3|NOERROR|A|-|-|8.8.8.8".to_string(),
    ];
    assert_eq!(s.send(&lines).await, vec![0, 1, 2]);
    // MariaDB's default sql_mode is strict: the row of `yesterday` is refused.
    s.pipeline()
        .records(3)
        .copies(|o| usize::from(o != 1))
        .run()
        .await;
    auditor
        .wait_decided(60, "the two convertible records decided", |a| {
            a.confirmed(topic, 0) + a.lost(topic, 0) >= 2
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(gap_tuples(&api_gaps(&auditor).await), vec![]);
    assert_eq!(
        (auditor.confirmed(topic, 0), auditor.lost(topic, 0)),
        (2, 0)
    );
    assert_eq!(auditor.filtered(topic, 0, "unconvertible_key"), 1);
    auditor.stop().await;
}
