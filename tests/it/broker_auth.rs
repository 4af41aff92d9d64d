//! The auditor against an authenticating, authorising broker (issue 36): the test broker's
//! SASL_PLAINTEXT listener (SCRAM users, `GAP_AUDITOR_TEST_KAFKA_SASL`) and its TLS
//! listener (the test CA's server certificate, `GAP_AUDITOR_TEST_KAFKA_SSL`), both with
//! Kafka's StandardAuthorizer enforcing ACLs (scripts/test-env.sh). Apache Kafka only:
//! tansu, the broker before it, had neither a SASL mechanism librdkafka could use nor ACLs.
//!
//! The pipeline stand-in and the producer use the PLAINTEXT listener, whose ANONYMOUS
//! principal is a super user; only the auditor is limited.

use crate::support::*;
use std::process::Command;
use std::time::Duration;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: run scripts/test.sh"))
}

/// `kafka-acls --add` through Kafka's own AclCommand (rdkafka has no CreateAcls), as the
/// super user on the PLAINTEXT listener: `--allow-principal User:USER --operation OP` on
/// `resource` (`["--topic", T]`, `["--group", G]`).
fn allow(user: &str, ops: &[&str], resource: &[&str]) {
    let mut cmd = Command::new("java");
    cmd.args(["-Xmx128m", "-cp", &env("GAP_AUDITOR_TEST_KAFKA_CLASSPATH")])
        .arg("org.apache.kafka.tools.AclCommand")
        .args(["--bootstrap-server", &kafka(), "--add", "--allow-principal"])
        .arg(format!("User:{user}"));
    for op in ops {
        cmd.args(["--operation", op]);
    }
    let out = cmd.args(resource).output().expect("run AclCommand");
    assert!(
        out.status.success(),
        "AclCommand {ops:?} {resource:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What the auditor needs of its topic and its own group: read records, watermarks, time
/// lookups and retention (DescribeConfigs), commit its offsets.
fn allow_auditor(user: &str, s: &Scenario) {
    allow(
        user,
        &["Read", "Describe", "DescribeConfigs"],
        &["--topic", &s.topic],
    );
    allow(user, &["Read", "Describe"], &["--group", &s.auditor_group]);
}

/// The scenario's audit reaching Kafka at `brokers` with these librdkafka properties.
fn toml_at(s: &Scenario, brokers: &str, props: &[(&str, String)]) -> String {
    let mut c = config_builder(&s.spec("offset_columns", "2s", "500ms"));
    for (k, v) in props {
        c = c.kafka_property(k, v.as_str());
    }
    let toml = c.render();
    let plain = format!("brokers = \"{}\"", kafka());
    assert!(toml.contains(&plain), "{toml}");
    toml.replace(&plain, &format!("brokers = \"{brokers}\""))
}

fn scram(mechanism: &str) -> Vec<(&'static str, String)> {
    vec![
        ("security.protocol", "sasl_plaintext".to_string()),
        ("sasl.mechanism", mechanism.to_string()),
        ("sasl.username", env("GAP_AUDITOR_TEST_KAFKA_SCRAM_USER")),
        (
            "sasl.password",
            env("GAP_AUDITOR_TEST_KAFKA_SCRAM_PASSWORD"),
        ),
    ]
}

/// 0–3 produced, the pipeline drops 2: exactly that gap, found through `toml`.
async fn finds_the_loss(s: &Scenario, toml: &str) {
    let auditor = Auditor::start(toml).await;
    s.send(&dns_lines(0..4)).await;
    s.pipeline()
        .records(4)
        .copies(|o| usize::from(o != 2))
        .run()
        .await;
    let topic = &s.topic;
    auditor
        .wait_decided(60, "2 lost, 3 confirmed", |a| {
            a.lost(topic, 0) == 1 && a.confirmed(topic, 0) == 3
        })
        .await;
    let gaps = api_gaps(&auditor).await;
    assert_eq!(gap_tuples(&gaps), vec![(0, 2, 2, 1)], "{gaps:?}");
    auditor.stop().await;
}

/// SASL/SCRAM (both mechanisms) with ACLs granting exactly what the auditor needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sasl_scram_with_acls_finds_a_loss() {
    for mechanism in ["SCRAM-SHA-512", "SCRAM-SHA-256"] {
        let s = Scenario::new("scram").await;
        let user = env("GAP_AUDITOR_TEST_KAFKA_SCRAM_USER");
        allow_auditor(&user, &s);
        allow(&user, &["Describe"], &["--group", &s.pipeline_group]);
        let toml = toml_at(&s, &env("GAP_AUDITOR_TEST_KAFKA_SASL"), &scram(mechanism));
        finds_the_loss(&s, &toml).await;
    }
}

/// A wrong SCRAM password: the broker refuses the auditor; it reports Kafka down and never
/// gives a verdict.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wrong_scram_password_is_kafka_down_never_a_verdict() {
    let s = Scenario::new("scram_bad").await;
    let mut props = scram("SCRAM-SHA-512");
    props[3].1 = "not-the-password".to_string();
    let toml = toml_at(&s, &env("GAP_AUDITOR_TEST_KAFKA_SASL"), &props);
    let auditor = Auditor::start(&toml).await;
    s.send(&dns_lines(0..4)).await;
    s.pipeline()
        .records(4)
        .copies(|o| usize::from(o != 2))
        .run()
        .await;
    let audit = auditor.audit.clone();
    auditor
        .wait_for(30, "kafka_up 0", |a| {
            a.metrics.kafka_up.with_label_values(&[&audit]).get() == 0
        })
        .await;
    keep_checking(Duration::from_secs(4), Duration::from_millis(200), || {
        assert_eq!(auditor.lost(&s.topic, 0), 0);
        assert_eq!(auditor.confirmed(&s.topic, 0), 0);
    })
    .await;
    auditor.stop().await;
}

/// TLS to the broker, the test CA trusted: the loss is found. With another CA the
/// handshake fails: Kafka down, no verdict.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tls_to_the_broker_finds_a_loss_and_refuses_an_unknown_ca() {
    let s = Scenario::new("tls").await;
    let tls = |ca: &str| {
        vec![
            ("security.protocol", "ssl".to_string()),
            ("ssl.ca.location", env(ca)),
        ]
    };
    let toml = toml_at(
        &s,
        &env("GAP_AUDITOR_TEST_KAFKA_SSL"),
        &tls("GAP_AUDITOR_TEST_TLS_CA"),
    );
    finds_the_loss(&s, &toml).await;

    let s = Scenario::new("tls_bad").await;
    let toml = toml_at(
        &s,
        &env("GAP_AUDITOR_TEST_KAFKA_SSL"),
        &tls("GAP_AUDITOR_TEST_TLS_OTHER_CA"),
    );
    let auditor = Auditor::start(&toml).await;
    s.send(&dns_lines(0..2)).await;
    let audit = auditor.audit.clone();
    auditor
        .wait_for(30, "kafka_up 0", |a| {
            a.metrics.kafka_up.with_label_values(&[&audit]).get() == 0
        })
        .await;
    keep_checking(Duration::from_secs(3), Duration::from_millis(200), || {
        assert_eq!(
            auditor.consumed(&s.topic, 0),
            0,
            "read through an untrusted CA"
        );
    })
    .await;
    auditor.stop().await;
}

/// An auditor without DESCRIBE on the pipeline group cannot read its commits: it holds
/// every verdict (the due rule needs them) and says so with `pipeline_group_up` 0, for
/// several times `grace`, although a record is missing. Granted DESCRIBE, it finds the loss.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_describe_on_the_pipeline_group_holds_verdicts_and_says_so() {
    let s = Scenario::new("acl").await;
    let user = env("GAP_AUDITOR_TEST_KAFKA_SCRAM_USER");
    allow_auditor(&user, &s);
    let toml = toml_at(
        &s,
        &env("GAP_AUDITOR_TEST_KAFKA_SASL"),
        &scram("SCRAM-SHA-512"),
    );
    let auditor = Auditor::start(&toml).await;
    s.send(&dns_lines(0..4)).await;
    s.pipeline()
        .records(4)
        .copies(|o| usize::from(o != 2))
        .run()
        .await;
    let topic = s.topic.clone();
    let audit = auditor.audit.clone();
    let group_up = |a: &Auditor| {
        a.metrics
            .pipeline_group_up
            .with_label_values(&[&audit])
            .get()
    };
    auditor
        .wait_for(30, "all 4 read, pipeline_group_up 0", |a| {
            a.consumed(&topic, 0) == 4 && group_up(a) == 0
        })
        .await;
    keep_checking(Duration::from_secs(6), Duration::from_millis(200), || {
        assert_eq!(
            auditor.lost(&topic, 0),
            0,
            "a verdict without the group's commits"
        );
        assert_eq!(group_up(&auditor), 0);
    })
    .await;

    allow(&user, &["Describe"], &["--group", &s.pipeline_group]);
    auditor
        .wait_decided(60, "granted: 2 lost, 3 confirmed", |a| {
            a.lost(&topic, 0) == 1 && a.confirmed(&topic, 0) == 3 && group_up(a) == 1
        })
        .await;
    auditor.stop().await;
}

/// A dead-letter topic the auditor may not read (no ACL on it; reviewer's finding on issue
/// 37): the broker answers its metadata with an authorization error. Taken for "no dead
/// letters", every record it names was decided lost while it could not be read. Verdicts
/// wait instead; once granted, the record it names is dead_lettered and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreadable_dead_letter_topic_holds_verdicts_never_a_loss() {
    let s = Scenario::new("acldlq").await;
    let user = env("GAP_AUDITOR_TEST_KAFKA_SCRAM_USER");
    allow_auditor(&user, &s);
    allow(&user, &["Describe"], &["--group", &s.pipeline_group]);
    let dlq = unique("acldlq_errors");
    create_topic(&dlq, 1).await;
    let mut toml = toml_at(
        &s,
        &env("GAP_AUDITOR_TEST_KAFKA_SASL"),
        &scram("SCRAM-SHA-512"),
    );
    toml.push_str(&format!(
        "\n[audits.pipeline]\ndead_letter_topic = \"{dlq}\"\n"
    ));
    let lines = dns_lines(0..4);
    s.send(&lines).await;
    crate::dead_letters::DeadLetterProducer::new(&dlq)
        .names(&s.topic, 0, 2, lines[2].as_bytes())
        .await;
    let auditor = Auditor::start(&toml).await;
    s.pipeline()
        .records(4)
        .copies(|o| usize::from(o != 2))
        .run()
        .await;
    let topic = s.topic.clone();
    let dead = |a: &Auditor| a.counter(&a.metrics.records_dead_lettered, &topic, 0);
    auditor
        .wait_for(30, "all 4 read", |a| a.consumed(&topic, 0) == 4)
        .await;
    keep_checking(Duration::from_secs(6), Duration::from_millis(200), || {
        assert_eq!(
            (auditor.lost(&topic, 0), dead(&auditor)),
            (0, 0),
            "a verdict without the dead-letter topic"
        );
    })
    .await;

    allow(&user, &["Read", "Describe"], &["--topic", &dlq]);
    allow(
        &user,
        &["Read", "Describe"],
        &["--group", &format!("{}.dead-letters", s.auditor_group)],
    );
    auditor
        .wait_decided(60, "granted: offset 2 dead-lettered, 3 confirmed", |a| {
            dead(a) == 1 && a.confirmed(&topic, 0) == 3
        })
        .await;
    assert_eq!(auditor.lost(&topic, 0), 0, "nothing lost");
    auditor.stop().await;
}
