//! `[audits.pipeline]` (SPEC "Pipeline position and evidence"): the long form of
//! `pipeline_group`, the dead-letter topic, and the keys this build refuses or ignores.

use super::*;

/// BASE without its `pipeline_group`, then `table` appended as the audit's
/// `[audits.pipeline]` table.
fn with_pipeline(table: &str) -> String {
    format!(
        "{}\n[audits.pipeline]\n{table}\n",
        BASE.replace("pipeline_group = \"FlinkSQLFromKafka2Doris\"\n", "")
    )
}

#[test]
fn kafka_group_long_form_is_exactly_pipeline_group() {
    let long = Config::from_toml_str(&with_pipeline(
        "kind = \"kafka_group\"\ngroup = \"FlinkSQLFromKafka2Doris\"",
    ))
    .expect("the long form loads");
    let short = base();
    assert_eq!(
        long.audits[0].pipeline_group,
        short.audits[0].pipeline_group
    );
    assert_eq!(long.audits[0].pipeline.kind, PipelineKind::KafkaGroup);
    // kind defaults to kafka_group.
    let default_kind = Config::from_toml_str(&with_pipeline("group = \"g\""))
        .expect("kind defaults to kafka_group");
    assert_eq!(default_kind.audits[0].pipeline_group.as_deref(), Some("g"));
    // A pipeline table with no group keeps the time-only rule.
    let none = Config::from_toml_str(&with_pipeline("kind = \"kafka_group\"")).expect("kind alone");
    assert_eq!(none.audits[0].pipeline_group, None);
    assert!(none.warnings().is_empty());
}

#[test]
fn both_group_forms_are_refused_naming_both_keys() {
    let both = format!("{BASE}\n[audits.pipeline]\ngroup = \"other\"\n");
    let e = toml_err(&both);
    assert_err(&e, "audits[0].pipeline.group", "audits[0].pipeline_group");
}

#[test]
fn the_long_form_is_checked_against_the_auditors_own_group() {
    let e = toml_err(&with_pipeline("group = \"gap-auditor\""));
    assert_err(
        &e,
        "audits[0].pipeline_group",
        "auditor's own consumer group",
    );
}

#[test]
fn doris_routine_load_is_a_position_source() {
    let cfg = Config::from_toml_str(&with_pipeline(
        "kind = \"doris_routine_load\"\nurl = \"mysql://auditor@doris-fe:9030/example_db\"\njob = \"dns_logs_load\"",
    ))
    .expect("a Routine Load position");
    let a = &cfg.audits[0];
    assert!(
        a.has_position_source(),
        "records are due by the job's progress"
    );
    assert_eq!(a.pipeline_group, None);
    assert_eq!(a.pipeline.job.as_deref(), Some("dns_logs_load"));
    // A job reads one topic: an audit of two would leave one without any position.
    let two =
        with_pipeline("kind = \"doris_routine_load\"\nurl = \"mysql://fe:9030/db\"\njob = \"j\"")
            .replace("topics = [\"test\"]", "topics = [\"test\", \"other\"]");
    assert_err(&toml_err(&two), "audits[0].topics", "exactly one topic");
    // Its own keys are checked first.
    let e = toml_err(&with_pipeline("kind = \"doris_routine_load\"\njob = \"j\""));
    assert_err(&e, "audits[0].pipeline.url", "is required");
    let e = toml_err(&with_pipeline(
        "kind = \"doris_routine_load\"\nurl = \"mysql://fe:9030/db\"",
    ));
    assert_err(&e, "audits[0].pipeline.job", "is required");
    let e = toml_err(&with_pipeline(
        "kind = \"doris_routine_load\"\nurl = \"mysql://fe:9030/db\"\njob = \"j\"\ngroup = \"g\"",
    ));
    assert_err(&e, "audits[0].pipeline.group", "kafka_group");
    let e = toml_err(&format!(
        "{BASE}\n[audits.pipeline]\nkind = \"doris_routine_load\"\nurl = \"mysql://fe:9030/db\"\njob = \"j\"\n"
    ));
    assert_err(&e, "audits[0].pipeline_group", "set one of them");
    // Routine Load keys under kafka_group are a misunderstanding, not ignored.
    let e = toml_err(&with_pipeline("group = \"g\"\njob = \"j\""));
    assert_err(&e, "audits[0].pipeline.job", "doris_routine_load");
    let e = toml_err(&with_pipeline("kind = \"flink\""));
    assert!(e.to_string().contains("unknown pipeline kind"), "{e}");
}

#[test]
fn a_routine_load_url_never_shows_its_password() {
    let e = toml_err(&with_pipeline(
        "kind = \"doris_routine_load\"\nurl = \"mysql://u:fe-secret@fe:9030/db\"",
    ));
    assert!(!e.to_string().contains("fe-secret"), "{e}");
    let cfg = Config::from_toml_str(&with_pipeline(
        "kind = \"doris_routine_load\"\nurl = \"mysql://u:fe-secret@fe:9030/db\"\njob = \"j\"",
    ))
    .expect("valid");
    assert!(!format!("{cfg:?}").contains("fe-secret"));
}

/// Both evidence sources are read by this build (issue 37): their keys parse and no
/// warning names them; `connect_connector` alone (no `connect_url`, no dead-letter topic)
/// is still named, since nothing reads it.
#[test]
fn evidence_keys_parse_and_are_named_as_ignored() {
    let cfg = Config::from_toml_str(&with_pipeline(
        "group = \"g\"\nflink_rest_url = \"http://jobmanager:8081\"\nflink_job = \"job\"\nconnect_url = \"http://connect:8083\"\nconnect_connector = \"es-sink\"",
    ))
    .expect("evidence keys parse");
    assert!(cfg.warnings().is_empty(), "{:?}", cfg.warnings());
    let pl = &cfg.audits[0].pipeline;
    assert_eq!(
        pl.connect_url.as_ref().map(|u| u.expose()),
        Some("http://connect:8083")
    );
    assert_eq!(pl.connect_connector.as_deref(), Some("es-sink"));
    let cfg =
        Config::from_toml_str(&with_pipeline("connect_connector = \"es-sink\"")).expect("parses");
    let w = cfg.warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with("audits[0].pipeline.connect_connector:")
            && w[0].contains("is read only with connect_url"),
        "{w:?}"
    );
}

/// Kafka Connect evidence: `connect_url` needs the connector (refused naming
/// `connect_connector`), is an http(s) URL with a host, prints redacted, and a blank value
/// (an empty Helm or environment value) is no URL at all.
#[test]
fn connect_evidence_keys_are_used_and_checked() {
    let cfg = Config::from_toml_str(&with_pipeline(
        "connect_url = \"https://ops:s3cret@connect:8083\"\nconnect_connector = \"es-sink\"",
    ))
    .expect("parses");
    assert!(cfg.warnings().is_empty(), "{:?}", cfg.warnings());
    let shown = format!("{:?}", cfg.audits[0].pipeline);
    assert!(!shown.contains("s3cret"), "{shown}");

    let e = toml_err(&with_pipeline("connect_url = \"http://connect:8083\""));
    assert_err(
        &e,
        "audits[0].pipeline.connect_connector",
        "is required with connect_url",
    );
    for bad in ["mysql://connect:8083", "connect:8083", "http://"] {
        let e = toml_err(&with_pipeline(&format!(
            "connect_url = \"{bad}\"\nconnect_connector = \"es-sink\""
        )));
        assert_err(&e, "audits[0].pipeline.connect_url", "http:// or https://");
    }
    let e = toml_err(&with_pipeline(
        "connect_url = \"http://u:s3cret@connect:8083\"",
    ));
    assert!(!e.to_string().contains("s3cret"), "{e}");
    // Blank is absent: no evidence source, and nothing to refuse.
    let cfg = Config::from_toml_str(&with_pipeline("connect_url = \"  \"")).expect("blank");
    assert!(cfg.audits[0].pipeline.connect_url.is_none());
}

/// Doris Stream Load evidence: the FE URL and the label prefix together (each alone refused
/// naming the other), the URL a mysql:// one naming the database, the prefix in Doris's
/// label alphabet, the delay bounded, the password never shown; BASE's sink is Doris.
#[test]
fn stream_load_evidence_keys_are_used_and_checked() {
    let ok = "doris_fe_url = \"mysql://ops:s3cret@fe:9030/example_db\"\ndoris_label_prefix = \"doris_sink\"";
    let cfg = Config::from_toml_str(&with_pipeline(ok)).expect("parses");
    assert!(cfg.warnings().is_empty(), "{:?}", cfg.warnings());
    let pl = &cfg.audits[0].pipeline;
    assert_eq!(pl.doris_label_prefix.as_deref(), Some("doris_sink"));
    assert_eq!(
        pl.stream_load_record_delay,
        std::time::Duration::from_secs(150)
    );
    assert!(!format!("{pl:?}").contains("s3cret"));
    let cfg = Config::from_toml_str(&with_pipeline(&format!(
        "{ok}\nstream_load_record_delay = \"5s\""
    )))
    .expect("parses");
    assert_eq!(
        cfg.audits[0].pipeline.stream_load_record_delay,
        std::time::Duration::from_secs(5)
    );
    // Without [audits.pipeline] at all, the default delay too.
    assert_eq!(
        base().audits[0].pipeline.stream_load_record_delay,
        std::time::Duration::from_secs(150)
    );

    let e = toml_err(&with_pipeline("doris_label_prefix = \"doris_sink\""));
    assert_err(
        &e,
        "audits[0].pipeline.doris_fe_url",
        "is required with doris_label_prefix",
    );
    let e = toml_err(&with_pipeline(
        "doris_fe_url = \"mysql://ops:s3cret@fe:9030/example_db\"",
    ));
    assert_err(
        &e,
        "audits[0].pipeline.doris_label_prefix",
        "is required with doris_fe_url",
    );
    assert!(!e.to_string().contains("s3cret"), "{e}");
    for bad in [
        "http://fe:8030/example_db",
        "fe:9030",
        "mysql:///example_db",
    ] {
        let e = toml_err(&with_pipeline(&format!(
            "doris_fe_url = \"{bad}\"\ndoris_label_prefix = \"p\""
        )));
        assert_err(&e, "audits[0].pipeline.doris_fe_url", "mysql://");
    }
    let e = toml_err(&with_pipeline(
        "doris_fe_url = \"mysql://fe:9030\"\ndoris_label_prefix = \"p\"",
    ));
    assert_err(
        &e,
        "audits[0].pipeline.doris_fe_url",
        "must name the database",
    );
    for bad in ["a b", "p%", "p'--", "x.y"] {
        let e = toml_err(&with_pipeline(&format!(
            "doris_fe_url = \"mysql://fe:9030/db\"\ndoris_label_prefix = \"{bad}\""
        )));
        assert_err(
            &e,
            "audits[0].pipeline.doris_label_prefix",
            "characters Doris allows",
        );
    }
    let e = toml_err(&with_pipeline(&format!(
        "{ok}\nstream_load_record_delay = \"2h\""
    )));
    assert_err(
        &e,
        "audits[0].pipeline.stream_load_record_delay",
        "at most 1h",
    );
    // A sink table in another database than the FE URL's: none of its loads would be
    // listed.
    let other = with_pipeline(ok).replace(
        "table = \"dns_logs_from_flink01\"",
        "table = \"other_db.dns_logs_from_flink01\"",
    );
    assert_err(
        &toml_err(&other),
        "audits[0].pipeline.doris_fe_url",
        "sink.table is in `other_db`",
    );
    let same = with_pipeline(ok).replace(
        "table = \"dns_logs_from_flink01\"",
        "table = \"example_db.dns_logs_from_flink01\"",
    );
    Config::from_toml_str(&same).expect("the URL's database");
}

#[test]
fn dead_letter_topic_is_a_valid_topic_other_than_the_audited_ones() {
    let e = toml_err(&with_pipeline("dead_letter_topic = \"bad topic\""));
    assert_err(
        &e,
        "audits[0].pipeline.dead_letter_topic",
        "not a valid topic name",
    );
    let e = toml_err(&with_pipeline("dead_letter_topic = \"test\""));
    assert_err(
        &e,
        "audits[0].pipeline.dead_letter_topic",
        "audited by this audit",
    );
    let e = toml_err(&with_pipeline("dead_letter_topc = \"dlq\""));
    assert!(e.to_string().contains("dead_letter_topc"), "{e}");
}

#[test]
fn the_spec_example_table_parses() {
    // SPEC's block, with the position source swapped for the supported one.
    let cfg = Config::from_toml_str(&with_pipeline(
        r#"kind = "kafka_group"
group = "connect-es-sink"
flink_rest_url = "http://jobmanager:8081"
flink_job = "FlinkSQLFromKafka2Doris"
connect_url = "http://connect:8083"
connect_connector = "es-sink"
dead_letter_topic = "dlq-dns""#,
    ))
    .expect("SPEC's keys parse");
    assert_eq!(
        cfg.audits[0].pipeline_group.as_deref(),
        Some("connect-es-sink")
    );
}

/// With a dead-letter topic, `connect_connector` filters its dead letters: it is used, so
/// it is not named among the ignored evidence keys; without one it still is.
#[test]
fn connect_connector_is_used_with_a_dead_letter_topic() {
    let cfg = Config::from_toml_str(&with_pipeline(
        "dead_letter_topic = \"dlq\"\nconnect_connector = \"es-sink\"",
    ))
    .expect("parses");
    assert!(cfg.audits[0].pipeline.ignored_evidence_keys().is_empty());
    assert!(cfg.warnings().is_empty(), "{:?}", cfg.warnings());
    let cfg =
        Config::from_toml_str(&with_pipeline("connect_connector = \"es-sink\"")).expect("parses");
    assert_eq!(
        cfg.audits[0].pipeline.ignored_evidence_keys(),
        vec!["connect_connector"]
    );
}

/// Flink evidence is read by this build: no warning names its keys; one key without the
/// other, or a URL that is not the REST port's, is refused with its key path.
#[test]
fn flink_evidence_keys_are_used_and_checked() {
    let cfg = Config::from_toml_str(&with_pipeline(
        "flink_rest_url = \"http://ops:s3cret@jobmanager:8081\"\nflink_job = \"FlinkSQLFromKafka2Doris\"",
    ))
    .expect("parses");
    assert!(cfg.warnings().is_empty(), "{:?}", cfg.warnings());
    let pl = &cfg.audits[0].pipeline;
    assert_eq!(pl.flink_job.as_deref(), Some("FlinkSQLFromKafka2Doris"));
    // A URL with a password prints redacted.
    let shown = format!("{:?}", pl.flink_rest_url);
    assert!(!shown.contains("s3cret"), "{shown}");

    let e = toml_err(&with_pipeline(
        "flink_rest_url = \"http://jobmanager:8081\"",
    ));
    assert_err(
        &e,
        "audits[0].pipeline.flink_job",
        "is required with flink_rest_url",
    );
    let e = toml_err(&with_pipeline("flink_job = \"j\""));
    assert_err(
        &e,
        "audits[0].pipeline.flink_rest_url",
        "is required with flink_job",
    );
    let e = toml_err(&with_pipeline(
        "flink_rest_url = \"mysql://jobmanager:8081\"\nflink_job = \"j\"",
    ));
    assert_err(
        &e,
        "audits[0].pipeline.flink_rest_url",
        "http:// or https://",
    );
    let e = toml_err(&with_pipeline(
        "flink_rest_url = \"http://jobmanager:8081\"\nflink_job = \"\"",
    ));
    assert_err(&e, "audits[0].pipeline.flink_job", "is required");
    // Review 37, F13: a blank URL (an empty Helm or environment value) is absent, as it
    // was before the key was read: alone it is no error, and with the job the refusal
    // names the URL, not the job.
    let cfg = Config::from_toml_str(&with_pipeline("flink_rest_url = \"  \""))
        .expect("a blank URL is no URL");
    assert!(cfg.audits[0].pipeline.flink_rest_url.is_none());
    let e = toml_err(&with_pipeline("flink_rest_url = \"\"\nflink_job = \"j\""));
    assert_err(
        &e,
        "audits[0].pipeline.flink_rest_url",
        "is required with flink_job",
    );
}
