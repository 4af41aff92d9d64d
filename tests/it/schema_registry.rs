//! Avro and Protobuf topics (issue 19), end to end on the real broker (Apache Kafka 4.4)
//! and MariaDB.
//!
//! The records are encoded by the reference libraries: Confluent's Python serializers
//! (`AvroSerializer` on fastavro, `ProtobufSerializer` on Google's protobuf runtime), run by
//! `tests/support/sr_produce.py` with the Python that `scripts/test-env.sh` installs
//! (`GAP_AUDITOR_TEST_SR_PYTHON`). They register their schema in [`FakeRegistry`] (no real
//! Schema Registry can be installed here; see its docs) and frame each value with the id.
//!
//! The pipeline stand-in writes each record's row from the SOURCE values the test produced
//! (not by decoding the topic), the way Flink's JDBC/Doris sink stores them: `time` a
//! DATETIME(3) bound as a date-time value, `day` a DATE, `price` a DECIMAL(10,2), with
//! prepared statements. So the auditor's decoding and logical-type rendering are checked
//! against rows it had no hand in. Broker behaviour relied on: one record per batch (the
//! producer flushes after each), see tests/support/env.md.

use crate::fake_registry::FakeRegistry;
use crate::support::*;
use mysql_async::prelude::Queryable;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset as KOffset, TopicPartitionList};
use serde_json::{Value, json};
use std::io::Write;
use std::time::{Duration, Instant};

/// The Python with confluent-kafka, fastavro and protobuf (scripts/test-env.sh).
fn python() -> String {
    std::env::var("GAP_AUDITOR_TEST_SR_PYTHON").expect(
        "GAP_AUDITOR_TEST_SR_PYTHON is not set: run scripts/test.sh (scripts/test-env.sh installs \
         the Schema Registry serializers)",
    )
}

/// One source record, as the test knows it.
#[derive(Clone)]
struct Source {
    client_ip: String,
    domain: Option<String>,
    time_ms: i64,
    price: String,
}

impl Source {
    fn nth(i: usize) -> Source {
        Source {
            client_ip: format!("10.1.{}.{}", i / 250, i % 250),
            // Hostile text, as record contents are.
            domain: Some(format!("host{i}.example.com' OR '1'='1")),
            // 2024-05-01 12:00:00 UTC plus i seconds and i*7 ms: fractions of 1, 2 and 3
            // digits, and a whole second at i = 0.
            time_ms: 1_714_564_800_000 + i as i64 * 1_007,
            price: format!("{}.{:02}", i * 3, i % 100),
        }
    }

    fn json(&self) -> Value {
        json!({"client_ip": self.client_ip, "domain": self.domain, "time_ms": self.time_ms,
               "price": self.price, "query_type": "AAAA"})
    }

    /// `time` as Flink hands it to the JDBC driver: a TIMESTAMP(3) (UTC wall time).
    fn datetime(&self) -> mysql_async::Value {
        let t = chrono::DateTime::from_timestamp_millis(self.time_ms)
            .expect("in range")
            .naive_utc();
        use chrono::{Datelike, Timelike};
        mysql_async::Value::Date(
            t.year() as u16,
            t.month() as u8,
            t.day() as u8,
            t.hour() as u8,
            t.minute() as u8,
            t.second() as u8,
            t.nanosecond() / 1000,
        )
    }
}

/// Produces `records` to partition 0 with the reference serializer; returns their offsets.
fn produce(
    topic: &str,
    registry: &str,
    format: &str,
    records: &[Source],
    auth: Option<(&str, &str)>,
) -> Vec<i64> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/sr_produce.py");
    let mut cmd = std::process::Command::new(python());
    cmd.arg(script)
        .args([
            "--brokers",
            &kafka(),
            "--topic",
            topic,
            "--registry",
            registry,
        ])
        .args(["--format", format]);
    if let Some((u, p)) = auth {
        cmd.args(["--user", u, "--password", p]);
    }
    let mut child = cmd
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run sr_produce.py");
    {
        let mut stdin = child.stdin.take().expect("stdin");
        for r in records {
            writeln!(stdin, "{}", r.json()).expect("write record");
        }
    }
    let out = child.wait_with_output().expect("sr_produce.py");
    assert!(
        out.status.success(),
        "sr_produce.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().parse().expect("an offset per line"))
        .collect()
}

/// The sink table as Flink's JDBC sink into Doris would have it (DDL for MariaDB).
async fn create_table(db: &Db, table: &str) {
    let mut c = db.pool.get_conn().await.expect("conn");
    c.query_drop(format!(
        "CREATE TABLE `{table}` (
            client_ip VARCHAR(64) COLLATE utf8mb4_bin,
            domain VARCHAR(512) COLLATE utf8mb4_bin,
            time DATETIME(3),
            day DATE,
            price DECIMAL(10,2),
            query_type VARCHAR(8)
        ) DEFAULT CHARSET = utf8mb4"
    ))
    .await
    .expect("create table");
}

/// Writes the rows of `records` (prepared statements, binary protocol).
async fn write_rows(db: &Db, table: &str, records: &[&Source]) {
    let mut c = db.pool.get_conn().await.expect("conn");
    for r in records {
        let day = r.time_ms.div_euclid(86_400_000);
        let date = chrono::NaiveDate::from_ymd_opt(1970, 1, 1).expect("epoch")
            + chrono::Duration::days(day);
        use chrono::Datelike;
        c.exec_drop(
            format!("INSERT INTO `{table}` VALUES (?, ?, ?, ?, ?, ?)"),
            (
                &r.client_ip,
                &r.domain,
                r.datetime(),
                mysql_async::Value::Date(
                    date.year() as u16,
                    date.month() as u8,
                    date.day() as u8,
                    0,
                    0,
                    0,
                    0,
                ),
                &r.price,
                "AAAA",
            ),
        )
        .await
        .expect("insert");
    }
}

/// The pipeline group commits `offset` on partition 0 (as a checkpoint completing).
fn commit(group: &str, topic: &str, offset: i64) {
    let consumer: BaseConsumer = group_client(group).create().expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, KOffset::Offset(offset))
        .expect("tpl");
    consumer.assign(&tpl).expect("assign");
    commit_retrying(&consumer, &tpl, "commit");
}

struct Setup {
    topic: String,
    table: String,
    group: String,
    state: tempfile::TempDir,
    db: Db,
}

async fn setup(name: &str) -> Setup {
    let db = Db::new();
    let table = unique(&format!("{name}_t"));
    create_table(&db, &table).await;
    let topic = unique(name);
    create_topic(&topic, 1).await;
    Setup {
        topic,
        table,
        group: unique(&format!("{name}_pipeline")),
        state: tempfile::tempdir().expect("tempdir"),
        db,
    }
}

/// The key fields the audits match on, as the sink's columns are named.
const KEY: [&str; 3] = ["client_ip", "domain", "time"];

/// An audit of `s` in `format` (`avro`, `protobuf`), key_columns on the Avro/Protobuf
/// fields `key`, the registry at `registry` (more registry keys: [`AuditToml::registry`]).
fn sr_audit(s: &Setup, format: &str, registry: &str, key: &[&str], grace: &str) -> AuditToml {
    AuditToml::new("dns_avro", &[&s.topic])
        .set("pipeline_group", &s.group)
        .set("grace", grace)
        .set("verify_interval", "300ms")
        .set("batch_size", 100)
        .record("format", format)
        .registry("url", registry)
        .registry("timeout", "2s")
        .strategy("key_columns")
        .matching("key", key)
        .sql_sink("mysql", &mysql_url(), &s.table)
        .sink("query_timeout", "3s")
}

/// The configuration running `audit` alone, with the auditor's own group and `s`'s store.
fn sr_config(s: &Setup, audit: AuditToml) -> String {
    ConfigToml::new(&kafka())
        .test_group(&unique("auditor"))
        .kafka("statistics_interval", "500ms")
        .server("listen", "127.0.0.1:0")
        .state_path(s.state.path())
        .audit(audit)
        .render()
}

fn committed_seen(a: &Auditor, offset: i64) -> bool {
    a.status
        .snapshot()
        .first()
        .and_then(|st| st.partitions.first())
        .and_then(|p| p.pipeline_committed)
        == Some(offset)
}

async fn wait_seen(a: &Auditor, offset: i64) {
    a.wait_for(
        60,
        &format!("the auditor sees the pipeline's commit {offset}"),
        |a| committed_seen(a, offset),
    )
    .await;
}

fn awaiting(a: &Auditor, topic: &str) -> i64 {
    a.metrics
        .records_awaiting_schema
        .with_label_values(&[a.audit.as_str(), topic, "0"])
        .get()
}

/// The seed incident (SPEC: the pipeline restarts from latest-offset, 2 records never
/// arrive) on an Avro topic, key_columns on Avro fields, one of them a timestamp-millis
/// matched against DATETIME(3) rows: exactly `offsets 2–3, 2 records`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn avro_seed_incident_is_caught_exactly_with_key_columns_on_avro_fields() {
    let s = setup("sr_avro_seed").await;
    let registry = FakeRegistry::start().await;
    let src: Vec<Source> = (0..6).map(Source::nth).collect();
    let audit = sr_audit(&s, "avro", &registry.url, &KEY, "1s");
    let a = Auditor::start(&sr_config(&s, audit)).await;

    assert_eq!(
        produce(&s.topic, &registry.url, "avro", &src[0..2], None),
        [0, 1]
    );
    write_rows(&s.db, &s.table, &[&src[0], &src[1]]).await;
    commit(&s.group, &s.topic, 2);
    wait_seen(&a, 2).await;
    // The job is killed; 2–3 arrive meanwhile; it restarts from latest (4), commits at once.
    assert_eq!(
        produce(&s.topic, &registry.url, "avro", &src[2..4], None),
        [2, 3]
    );
    commit(&s.group, &s.topic, 4);
    wait_seen(&a, 4).await;
    assert_eq!(
        produce(&s.topic, &registry.url, "avro", &src[4..6], None),
        [4, 5]
    );
    write_rows(&s.db, &s.table, &[&src[4], &src[5]]).await;
    commit(&s.group, &s.topic, 6);

    a.wait_decided(60, "2 lost, 4 confirmed", |a| {
        a.lost(&s.topic, 0) >= 2 && a.confirmed(&s.topic, 0) >= 4
    })
    .await;
    // A few more rounds: nothing else is reported, nothing is filtered.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(a.lost(&s.topic, 0), 2);
    assert_eq!(
        a.confirmed(&s.topic, 0),
        4,
        "every present row matched, timestamps included"
    );
    assert_eq!(a.filtered(&s.topic, 0, "undecodable"), 0);
    assert_eq!(a.filtered(&s.topic, 0, "filter"), 0);
    assert_eq!(a.consumed(&s.topic, 0), 6);
    let gaps = api_gaps(&a).await;
    assert_eq!(gap_tuples(&gaps), [(0, 2, 3, 2)], "{gaps:?}");
    assert_eq!(registry.id_gets(), 1, "one schema, fetched once, cached");
    assert_eq!(
        a.metrics
            .schema_registry_up
            .with_label_values(&[a.audit.as_str()])
            .get(),
        1
    );
    a.stop().await;
}

/// Protobuf (message index [1], a `google.protobuf.Timestamp`, an enum), the registry behind
/// basic auth with the password from `password_file`: one record the pipeline dropped is
/// reported, the five others match their rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn protobuf_records_through_an_authenticated_registry_are_audited_exactly() {
    let s = setup("sr_proto").await;
    let registry = FakeRegistry::start_with_auth(Some(("auditor", "s3cr3t"))).await;
    let pw = s.state.path().join("registry-password");
    std::fs::write(&pw, "s3cr3t\n").expect("password file");
    let src: Vec<Source> = (0..6).map(Source::nth).collect();
    assert_eq!(
        produce(
            &s.topic,
            &registry.url,
            "protobuf",
            &src,
            Some(("auditor", "s3cr3t"))
        ),
        [0, 1, 2, 3, 4, 5]
    );
    let written: Vec<&Source> = src
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3)
        .map(|(_, r)| r)
        .collect();
    write_rows(&s.db, &s.table, &written).await;
    commit(&s.group, &s.topic, 6);

    let audit = sr_audit(&s, "protobuf", &registry.url, &KEY, "1s")
        .registry("username", "auditor")
        .registry("password_file", &pw);
    let a = Auditor::start(&sr_config(&s, audit)).await;
    a.wait_decided(60, "1 lost, 5 confirmed", |a| {
        a.lost(&s.topic, 0) >= 1 && a.confirmed(&s.topic, 0) >= 5
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!((a.lost(&s.topic, 0), a.confirmed(&s.topic, 0)), (1, 5));
    assert_eq!(a.filtered(&s.topic, 0, "undecodable"), 0);
    assert_eq!(gap_tuples(&api_gaps(&a).await), [(0, 3, 3, 1)]);
    // The password never reaches the status API.
    let (_, status) = a.get("/api/status").await;
    assert!(!status.contains("s3cr3t"), "{status}");
    a.stop().await;
}

/// Protobuf importing files Confluent's registry knows built in (`google/type/date.proto`
/// for the `day` key field, `confluent/meta.proto` for a field option), which the reference
/// serializer never registers as references: the schema compiles from the bundled texts
/// and `day` matches the DATE column (issue 19 review: every such record was undecodable).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn protobuf_importing_confluents_built_in_files_is_audited_exactly() {
    let s = setup("sr_proto_imports").await;
    let registry = FakeRegistry::start().await;
    let src: Vec<Source> = (0..4).map(Source::nth).collect();
    assert_eq!(
        produce(&s.topic, &registry.url, "protobuf-imports", &src, None),
        [0, 1, 2, 3]
    );
    write_rows(&s.db, &s.table, &[&src[0], &src[2], &src[3]]).await;
    commit(&s.group, &s.topic, 4);
    let key = &["client_ip", "day", "time"];
    let toml = sr_config(&s, sr_audit(&s, "protobuf", &registry.url, key, "1s"));
    let a = Auditor::start(&toml).await;
    a.wait_decided(60, "1 lost, 3 confirmed", |a| {
        a.lost(&s.topic, 0) >= 1 && a.confirmed(&s.topic, 0) >= 3
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(a.filtered(&s.topic, 0, "undecodable"), 0);
    assert_eq!((a.lost(&s.topic, 0), a.confirmed(&s.topic, 0)), (1, 3));
    assert_eq!(gap_tuples(&api_gaps(&a).await), [(0, 1, 1, 1)]);
    a.stop().await;
}

/// A registry that is down when the auditor starts: the records wait, unknown — never
/// filtered, never lost, the settled watermark does not pass them, `schema_registry_up` is 0
/// — and are decided exactly once the registry answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_whose_schema_cannot_be_fetched_wait_unknown_and_are_decided_when_it_can() {
    let s = setup("sr_down").await;
    let registry = FakeRegistry::start().await;
    let src: Vec<Source> = (0..5).map(Source::nth).collect();
    assert_eq!(
        produce(&s.topic, &registry.url, "avro", &src, None),
        [0, 1, 2, 3, 4]
    );
    let before = registry.requests();
    let written: Vec<&Source> = src
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 1)
        .map(|(_, r)| r)
        .collect();
    write_rows(&s.db, &s.table, &written).await;
    commit(&s.group, &s.topic, 5);
    registry.set_down(true);

    let audit = sr_audit(&s, "avro", &registry.url, &KEY, "500ms");
    let a = Auditor::start(&sr_config(&s, audit)).await;
    let up = |a: &Auditor| {
        a.metrics
            .schema_registry_up
            .with_label_values(&[a.audit.as_str()])
            .get()
    };
    a.wait_for(30, "all 5 records held, the registry reported down", |a| {
        awaiting(a, &s.topic) == 5 && up(a) == 0
    })
    .await;
    let (_, status) = a.get("/api/status").await;
    assert!(status.contains(r#""awaiting_schema":5"#), "{status}");
    assert!(status.contains(r#""schema_registry_error":"#), "{status}");
    let (code, ready) = a.get("/readyz").await;
    assert_eq!(code, 503, "{ready}");
    assert!(ready.contains("the last schema fetch failed"), "{ready}");
    // Far past grace (500 ms) and the pipeline's commit: still nothing decided.
    keep_checking(Duration::from_secs(4), Duration::from_millis(100), || {
        assert_eq!(a.lost(&s.topic, 0), 0, "unknown is never missing");
        assert_eq!(
            a.filtered(&s.topic, 0, "undecodable"),
            0,
            "unknown is never filtered"
        );
        assert_eq!(
            a.consumed(&s.topic, 0),
            0,
            "nothing decided, nothing counted"
        );
        assert_eq!(
            a.settled(),
            Some(0),
            "the settled watermark waits before them"
        );
    })
    .await;
    let tried = registry.requests() - before;
    assert!(
        tried >= 3,
        "the fetch is retried while the registry is down: {tried} requests"
    );

    let started = Instant::now();
    registry.set_down(false);
    a.wait_decided(
        40,
        "1 lost, 4 confirmed after the registry came back",
        |a| a.lost(&s.topic, 0) >= 1 && a.confirmed(&s.topic, 0) >= 4,
    )
    .await;
    eprintln!(
        "decided {:?} after the registry came back",
        started.elapsed()
    );
    assert_eq!(awaiting(&a, &s.topic), 0);
    assert_eq!(up(&a), 1);
    a.wait_for(10, "ready again", |a| {
        a.status
            .snapshot()
            .first()
            .is_some_and(|s| s.schema_registry_error.is_none())
    })
    .await;
    assert_eq!(gap_tuples(&api_gaps(&a).await), [(0, 1, 1, 1)]);
    assert_eq!(a.consumed(&s.topic, 0), 5);
    a.stop().await;
}

/// Avro records audited with the seed's csv settings (the wrong format) are all
/// `undecodable`: the coverage guard's input. The alert itself is a promtool test
/// (config/alerts/coverage.rules.test.yml).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn avro_records_read_as_csv_count_as_undecodable() {
    let s = Scenario::new("sr_wrong_format").await;
    let registry = FakeRegistry::start().await;
    let src: Vec<Source> = (0..3).map(Source::nth).collect();
    assert_eq!(
        produce(&s.topic, &registry.url, "avro", &src, None),
        [0, 1, 2]
    );
    let a = s.start_auditor("offset_columns", "1s", "300ms").await;
    a.wait_decided(30, "3 undecodable", |a| {
        a.filtered(&s.topic, 0, "undecodable") >= 3
    })
    .await;
    assert_eq!(a.filtered(&s.topic, 0, "undecodable"), 3);
    assert_eq!(
        a.lost(&s.topic, 0),
        0,
        "nothing expected: the silence the alert is for"
    );
    a.stop().await;
}

/// Logical types against the columns Flink's JDBC sink writes them to: the key is a DATE
/// (`date`), a DECIMAL(10,2) (`decimal`, scale 2) and a DATETIME(3) (`timestamp-millis`)
/// besides client_ip. Then `gap-auditor check` (the binary: a fresh process, an empty schema
/// cache, so the schema is fetched on the spot) gives the daemon's verdict (SPEC
/// guarantee 9).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn avro_logical_types_match_date_decimal_and_datetime_columns_and_check_agrees() {
    let s = setup("sr_logical").await;
    let registry = FakeRegistry::start().await;
    let src: Vec<Source> = (0..5).map(Source::nth).collect();
    assert_eq!(
        produce(&s.topic, &registry.url, "avro", &src, None),
        [0, 1, 2, 3, 4]
    );
    let written: Vec<&Source> = src
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 2)
        .map(|(_, r)| r)
        .collect();
    write_rows(&s.db, &s.table, &written).await;
    commit(&s.group, &s.topic, 5);
    let key = &["client_ip", "day", "price", "time"];
    let toml = sr_config(&s, sr_audit(&s, "avro", &registry.url, key, "1s"));
    let a = Auditor::start(&toml).await;
    a.wait_decided(60, "1 lost, 4 confirmed", |a| {
        a.lost(&s.topic, 0) >= 1 && a.confirmed(&s.topic, 0) >= 4
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!((a.lost(&s.topic, 0), a.confirmed(&s.topic, 0)), (1, 4));
    assert_eq!(gap_tuples(&api_gaps(&a).await), [(0, 2, 2, 1)]);
    a.stop().await;

    let config = s.state.path().join("check.toml");
    std::fs::write(&config, &toml).expect("config");
    let gets = registry.id_gets();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gap-auditor"))
        .args(["check", "-c"])
        .arg(&config)
        .args(["--from", "offset:0", "--to", "offset:5", "--format", "json"])
        .output()
        .expect("run check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).expect("json report");
    assert_eq!(
        gap_tuples(report["gaps"].as_array().expect("gaps")),
        [(0, 2, 2, 1)],
        "{report}"
    );
    assert_eq!(
        (report["lost"].as_i64(), report["confirmed"].as_i64()),
        (Some(1), Some(4))
    );
    assert!(registry.id_gets() > gets, "check fetched the schema itself");

    // The registry down: check cannot decode, so it gives no verdict (exit 2), never "no loss".
    registry.set_down(true);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gap-auditor"))
        .args(["check", "-c"])
        .arg(&config)
        .args(["--from", "offset:0", "--to", "offset:5"])
        .output()
        .expect("run check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("schema registry unavailable"), "{stderr}");
}
