//! Dead letters, review of issue 37 (second round), end to end on the real broker and
//! MariaDB: a dead_lettered gap blocks completeness until acknowledged; the dead-letter
//! reader reads committed records only; dead letters beyond the audited log end are ignored.

use crate::completeness::{api, completeness, record_ts, wait_bin};
use crate::dead_letters::{DeadLetterProducer, dead_lettered, start_auditor};
use crate::support::*;
use std::time::Duration;

/// SPEC "Completeness": `wait` exits 0 once everything produced before T is *confirmed*.
/// A dead-lettered record is absent from the sink: its gap blocks (gauge, `/api/completeness`
/// naming its id, `wait` exit 1) until acknowledged. Before the fix the gap was forgotten
/// as soon as a confirmed record followed it, and completeness ran past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_lettered_gap_blocks_completeness_until_acknowledged() {
    let s = Scenario::new("dlq_cpl").await;
    let topic = s.topic.clone();
    let dlq = unique("dlq_cpl_errors");
    create_topic(&dlq, 1).await;
    let lines = dns_lines(0..10);
    s.send(&lines).await;
    let auditor = start_auditor(&s, &dlq).await;
    let dl = DeadLetterProducer::new(&dlq);
    dl.names(&topic, 0, 3, lines[3].as_bytes()).await;
    s.pipeline()
        .records(10)
        .copies(|o| usize::from(o != 3))
        .run()
        .await;
    auditor
        .wait_decided(60, "9 confirmed, 3 dead-lettered", |a| {
            a.confirmed(&topic, 0) == 9 && dead_lettered(a, &topic) == 1
        })
        .await;
    let (t3, t9) = (record_ts(&topic, 0, 3), record_ts(&topic, 0, 9));
    let id = format!("{}:{topic}:0:3", auditor.audit);
    // Held at or before the dead-lettered record (its gap's first timestamp is a bound),
    // round after round.
    auditor
        .wait_for(20, "a published round", |a| {
            completeness(a).complete_until_ms.is_some()
        })
        .await;
    keep_checking(Duration::from_secs(2), Duration::from_millis(100), || {
        let c = completeness(&auditor).complete_until_ms;
        assert!(c.is_some_and(|c| c <= t3), "{c:?} runs past {t3}");
    })
    .await;
    let gauge = auditor
        .metrics
        .complete_until_timestamp_seconds
        .with_label_values(&[auditor.audit.as_str()])
        .get();
    assert!(gauge <= t3 as f64 / 1000.0, "gauge {gauge}");
    let v = api(&auditor, t9 + 1).await;
    assert_eq!(v["complete"], false, "{v}");
    assert_eq!(v["blocking"], serde_json::json!([id]), "{v}");
    assert_eq!(v["blockers"][0]["state"], "dead_lettered", "{v}");
    let (code, out, err) = wait_bin(&auditor, t9 + 1, "0s").await;
    assert_eq!(code, 1, "blocked by the dead_lettered gap\n{out}{err}");
    assert!(
        out.contains(&format!(
            "gap {id} (dead_lettered): 1 record(s) dead-lettered"
        )),
        "{out}"
    );

    // Acknowledged (the store write `gap-auditor ack` makes): no longer blocking.
    assert!(
        auditor
            .store
            .ack(&id, "rejected rows accepted")
            .expect("ack")
    );
    auditor
        .wait_for(30, "the acknowledged gap stops blocking", |a| {
            completeness(a).complete_until_ms.is_some_and(|c| c > t9)
        })
        .await;
    let (code, out, err) = wait_bin(&auditor, t9 + 1, "30s").await;
    assert_eq!(code, 0, "acknowledged: complete\n{out}{err}");
    auditor.stop().await;
}

/// Dead letters written in transactions, as a transactional Flink side output writes them.
struct TxnDeadLetters(DeadLetterProducer);

impl TxnDeadLetters {
    async fn new(topic: &str) -> Self {
        Self(DeadLetterProducer::transactional(topic))
    }

    /// A transaction holding one dead letter naming `topic`-0@`offset` (in the log before
    /// the transaction ends), then aborted (`commit` false) or committed.
    async fn one(&self, topic: &str, offset: i64, commit: bool) {
        self.open(topic, offset).await;
        self.end(commit);
    }

    /// Begins a transaction and writes one dead letter naming `topic`-0@`offset` in it
    /// (acknowledged: in the log); [`Self::end`] ends it.
    async fn open(&self, topic: &str, offset: i64) {
        self.0.begin();
        self.0.names(topic, 0, offset, b"rejected").await;
    }

    /// Commits (or aborts) the transaction [`Self::open`] began.
    fn end(&self, commit: bool) {
        self.0.end(commit);
    }
}

/// Runs `gap-auditor check` over `[0, to)` of the scenario's topic with `toml`: its exit
/// code and JSON report (stderr on failure).
async fn run_check(s: &Scenario, toml: &str, to: i64) -> (Option<i32>, serde_json::Value, String) {
    let config = s.state.path().join("check.toml");
    std::fs::write(&config, toml).expect("config");
    let to = format!("offset:{to}");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_gap-auditor"))
            .args(["check", "-c"])
            .arg(&config)
            .args(["--from", "offset:0", "--to", &to, "--format", "json"])
            .output()
            .expect("run check")
    })
    .await
    .expect("check task");
    let report = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (
        out.status.code(),
        report,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Review of issue 37: the dead-letter reader reads committed records only, whatever the
/// audit's own `isolation_level` (here read_uncommitted). A dead letter of an aborted
/// transaction was never written as far as the pipeline is concerned: the record it names
/// was really dropped and is lost, never dead_lettered. A committed transactional dead
/// letter and a plain one after the abort marker count (the reader reads past the marker).
/// `check` reads the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_aborted_dead_letter_never_hides_a_loss() {
    let s = Scenario::new("dlq_txn").await;
    let topic = s.topic.clone();
    let dlq = unique("dlq_txn_errors");
    create_topic(&dlq, 1).await;
    let lines = dns_lines(0..10);
    s.send(&lines).await;
    let mut toml = config_toml(&s.spec("offset_columns", "2s", "300ms"));
    toml = toml.replacen(
        "[kafka]\n",
        "[kafka]\nisolation_level = \"read_uncommitted\"\n",
        1,
    );
    assert!(toml.contains("read_uncommitted"), "{toml}");
    toml.push_str(&format!(
        "\n[audits.pipeline]\ndead_letter_topic = \"{dlq}\"\n"
    ));
    // 3 dropped, its dead letter aborted; 5 dead-lettered in a committed transaction; 6
    // dead-lettered plainly after both.
    let txn = TxnDeadLetters::new(&dlq).await;
    txn.one(&topic, 3, false).await;
    txn.one(&topic, 5, true).await;
    DeadLetterProducer::new(&dlq)
        .names(&topic, 0, 6, lines[6].as_bytes())
        .await;
    let auditor = Auditor::start(&toml).await;
    s.pipeline()
        .records(10)
        .copies(|o| usize::from(![3, 5, 6].contains(&o)))
        .run()
        .await;
    auditor
        .wait_decided(60, "every record decided", |a| {
            a.confirmed(&topic, 0) + a.lost(&topic, 0) + dead_lettered(a, &topic) == 10
        })
        .await;
    assert_eq!(
        (auditor.lost(&topic, 0), dead_lettered(&auditor, &topic)),
        (1, 2),
        "3 lost (its dead letter was aborted), 5 and 6 dead_lettered"
    );
    let open: Vec<i64> = auditor
        .stored_gaps()
        .iter()
        .filter(|g| g.state == gap_auditor::gap::GapState::Open)
        .map(|g| g.first_offset)
        .collect();
    assert_eq!(open, vec![3]);
    auditor.stop().await;

    let (code, report, err) = run_check(&s, &toml, 10).await;
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(
        (&report["lost"], &report["dead_lettered"]),
        (&serde_json::json!(1), &serde_json::json!(2)),
        "{report}"
    );
}

/// A dead letter in a transaction still open may yet be committed: the reader (read
/// committed) cannot pass it, so nothing is caught up and the record it names waits
/// (lag, never lost); once committed, the record is dead_lettered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_open_transaction_in_the_dead_letter_topic_holds_verdicts() {
    let s = Scenario::new("dlq_txn_open").await;
    let topic = s.topic.clone();
    let dlq = unique("dlq_txn_open_errors");
    create_topic(&dlq, 1).await;
    let lines = dns_lines(0..6);
    s.send(&lines).await;
    let txn = TxnDeadLetters::new(&dlq).await;
    txn.open(&topic, 2).await;
    let auditor = start_auditor(&s, &dlq).await;
    s.pipeline()
        .records(6)
        .copies(|o| usize::from(o != 2))
        .run()
        .await;
    // Well past grace (2 s): still nothing decided from 2 on.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        (auditor.lost(&topic, 0), dead_lettered(&auditor, &topic)),
        (0, 0),
        "nothing decided against an open transaction's dead letter"
    );
    // `check` cannot read to the end either: it says so (exit 2), never calls 2 lost.
    let mut toml = config_toml(&s.spec("offset_columns", "2s", "300ms"));
    toml.push_str(&format!(
        "\n[audits.pipeline]\ndead_letter_topic = \"{dlq}\"\n"
    ));
    let (code, report, err) = run_check(&s, &toml, 6).await;
    assert_eq!(code, Some(2), "{report}\n{err}");
    assert!(err.contains("transaction left open"), "{err}");
    txn.end(true);
    auditor
        .wait_decided(60, "every record decided", |a| {
            a.confirmed(&topic, 0) + a.lost(&topic, 0) + dead_lettered(a, &topic) == 6
        })
        .await;
    assert_eq!(
        (auditor.lost(&topic, 0), dead_lettered(&auditor, &topic)),
        (0, 1)
    );
    auditor.stop().await;
}

/// Review of issue 37: a dead letter naming an offset at or beyond the audited partition's
/// high watermark (read after the dead letter was read) names no record of this topic (an
/// earlier incarnation's, or a wrong coordinate): ignored (`beyond_log_end`) and not held,
/// so such coordinates never fill the index. One naming a record of the log still counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn dead_letters_beyond_the_log_end_are_ignored_and_freed() {
    let s = Scenario::new("dlq_beyond").await;
    let topic = s.topic.clone();
    let dlq = unique("dlq_beyond_errors");
    create_topic(&dlq, 1).await;
    let lines = dns_lines(0..10);
    s.send(&lines).await;
    let dl = DeadLetterProducer::new(&dlq);
    for o in [10, 500, 1_000_000] {
        dl.names(&topic, 0, o, b"from an earlier incarnation").await;
    }
    dl.names(&topic, 0, 3, lines[3].as_bytes()).await;
    let auditor = start_auditor(&s, &dlq).await;
    s.pipeline()
        .records(10)
        .copies(|o| usize::from(o != 3))
        .run()
        .await;
    auditor
        .wait_decided(60, "every record decided", |a| {
            a.confirmed(&topic, 0) + a.lost(&topic, 0) + dead_lettered(a, &topic) == 10
        })
        .await;
    assert_eq!(
        (auditor.lost(&topic, 0), dead_lettered(&auditor, &topic)),
        (0, 1)
    );
    let beyond = auditor
        .metrics
        .dead_letters_ignored
        .with_label_values(&[auditor.audit.as_str(), "beyond_log_end"])
        .get();
    assert_eq!(beyond, 3);
    let (_, status) = auditor.get("/api/status").await;
    let status: serde_json::Value = serde_json::from_str(&status).expect("status json");
    let coords = &status["audits"][0]["dead_letters"]["coordinates"];
    assert_eq!(coords, &serde_json::json!(0), "none held: {status}");
    auditor.stop().await;
}

/// Review of issue 37: `check` read the whole dead-letter topic again for every range it
/// checked (once per audited partition). Its reader now reads the topic once per run and
/// then only what was appended: 5 dead letters over two partitions, read; 2 more appended,
/// read alone. Beyond-the-log-end coordinates are dropped as the daemon drops them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checks_dead_letter_reader_reads_each_record_once() {
    use gap_auditor::kafka::dead_letters::{CheckReader, Source};
    let s = Scenario::new("dlq_once").await;
    let topic = s.topic.clone();
    s.send(&dns_lines(0..10)).await;
    let dlq = unique("dlq_once_errors");
    create_topic(&dlq, 2).await;
    let dl = DeadLetterProducer::new(&dlq);
    for o in [1, 2, 3, 4, 99] {
        dl.names(&topic, 0, o, b"x").await;
    }
    let kafka = gap_auditor::config::KafkaConfig {
        brokers: kafka(),
        ..Default::default()
    };
    let audited = vec![topic.clone()];
    let mut reader = tokio::task::spawn_blocking(move || {
        let mut r = CheckReader::new(
            &kafka,
            Source {
                topic: &dlq,
                audited: &audited,
                connector: None,
            },
        )
        .expect("reader");
        r.refresh().expect("first reading");
        r
    })
    .await
    .expect("task");
    let tp = gap_auditor::types::TopicPartition::new(topic.as_str(), 0);
    assert_eq!(reader.records_read(), 5);
    assert_eq!(reader.index().len(), 4, "99 lies beyond the log end");
    for o in [5, 6] {
        dl.names(&topic, 0, o, b"x").await;
    }
    let first = reader.read_at();
    let reader = tokio::task::spawn_blocking(move || {
        reader.refresh().expect("second reading");
        reader
    })
    .await
    .expect("task");
    assert_eq!(
        reader.records_read(),
        7,
        "only the 2 appended were read again"
    );
    assert!(reader.read_at() >= first);
    assert_eq!(
        reader
            .index()
            .named_on(&tp)
            .iter()
            .map(|r| (r.first, r.last))
            .collect::<Vec<_>>(),
        vec![(1, 6)]
    );
}
