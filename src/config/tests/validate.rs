//! Validation rules, one test per rule.

use super::*;

#[test]
fn handover_topic_is_optional_and_validated() {
    assert_eq!(base().state.handover_topic, None);
    let with = format!("{BASE}\n[state]\nhandover_topic = \"gap-auditor.handover\"\n");
    let cfg = Config::from_toml_str(&with).expect("a valid handover topic");
    assert_eq!(
        cfg.state.handover_topic.as_deref(),
        Some("gap-auditor.handover")
    );
    let e = invalid(|c| c.state.handover_topic = Some("bad topic".into()));
    assert_err(&e, "state.handover_topic", "not a valid topic name");
    let e = invalid(|c| c.state.handover_topic = Some("test".into()));
    assert_err(&e, "state.handover_topic", "audited by audits[0]");
}

#[test]
fn avro_and_protobuf_load_with_their_registry() {
    let cfg = avro();
    let r = &cfg.audits[0].record;
    assert_eq!(r.format, RecordFormat::Avro);
    assert_eq!(r.timestamp_format, TimestampText::Iso8601);
    let reg = r.schema_registry.as_ref().expect("registry");
    assert_eq!(reg.timeout, Duration::from_secs(5), "default timeout");
    assert!(!format!("{cfg:?}").contains("registry-secret"), "redacted");
    let proto = Config::from_toml_str(&AVRO.replace("\"avro\"", "\"protobuf\"")).expect("protobuf");
    assert_eq!(proto.audits[0].record.format, RecordFormat::Protobuf);
    // json with the Confluent header, no registry needed.
    let framed = BASE.replace(
            "format = \"csv\"\ndelimiter = \"|\"\nfields = [\"client_ip\",\"domain\",\"time\",\"target_ip\",\"rcode\",\"query_type\",\"authority_record\",\"add_msg\",\"dns_ip\"]",
            "format = \"json\"\nframing = \"confluent\"",
        );
    let cfg = Config::from_toml_str(&framed.replace("field_count = 9", "")).expect("framed json");
    assert_eq!(cfg.audits[0].record.framing, Framing::Confluent);
    let e = toml_err(&AVRO.replace("\"iso8601\"", "\"unix\""));
    assert!(e.to_string().contains("timestamp format"), "{e}");
}

#[test]
fn schema_formats_need_a_registry() {
    let e = invalid_avro(|c| c.audits[0].record.schema_registry = None);
    assert_err(
        &e,
        "audits[0].record.schema_registry.url",
        "format avro needs the schema registry",
    );
}

#[test]
fn schema_formats_take_no_field_list() {
    let e = invalid_avro(|c| c.audits[0].record.fields = vec!["client_ip".into()]);
    assert_err(&e, "audits[0].record.fields", "writer schema");
}

#[test]
fn registry_url_is_http_without_credentials() {
    let e = invalid_avro(|c| registry(c).url = "ftp://registry:8081".into());
    assert_err(
        &e,
        "audits[0].record.schema_registry.url",
        "scheme must be http or https",
    );
    let e = invalid_avro(|c| registry(c).url = "not a url".into());
    assert_err(
        &e,
        "audits[0].record.schema_registry.url",
        "not a valid URL",
    );
    let e = invalid_avro(|c| registry(c).url = "http://u:url-secret@registry:8081".into());
    assert_err(
        &e,
        "audits[0].record.schema_registry.url",
        "must not embed credentials",
    );
    assert!(!e.to_string().contains("url-secret"), "{e}");
}

#[test]
fn registry_password_rules() {
    let e = invalid_avro(|c| registry(c).password_file = Some("/run/secrets/pw".into()));
    assert_err(
        &e,
        "audits[0].record.schema_registry.password_file",
        "not both",
    );
    let e = invalid_avro(|c| registry(c).username = None);
    assert_err(
        &e,
        "audits[0].record.schema_registry.username",
        "a password needs a username",
    );
    let e = invalid_avro(|c| registry(c).timeout = Duration::ZERO);
    assert_err(
        &e,
        "audits[0].record.schema_registry.timeout",
        "must be > 0",
    );
}

#[test]
fn brokers_must_not_be_empty() {
    assert_err(
        &invalid(|c| c.kafka.brokers = " ".into()),
        "kafka.brokers",
        "required",
    );
    assert_err(
        &invalid(|c| c.kafka.brokers = "a:1,,b:2".into()),
        "kafka.brokers",
        "empty entry",
    );
}

#[test]
fn at_least_one_audit() {
    assert_err(
        &invalid(|c| c.audits.clear()),
        "audits",
        "at least one [[audits]] is required",
    );
}

#[test]
fn audit_names_are_well_formed() {
    assert_err(
        &invalid(|c| c.audits[0].name = String::new()),
        "audits[0].name",
        "required",
    );
    assert_err(
        &invalid(|c| c.audits[0].name = "dns logs".into()),
        "audits[0].name",
        "not a valid audit name",
    );
}

#[test]
fn audit_names_are_unique() {
    let e = invalid(|c| {
        let mut second = c.audits[0].clone();
        second.group_id = Some("other".into());
        c.audits.push(second);
    });
    assert_err(&e, "audits[1].name", "duplicate audit name `dns_logs`");
}

#[test]
fn topics_are_required_and_valid() {
    assert_err(
        &invalid(|c| c.audits[0].topics.clear()),
        "audits[0].topics",
        "at least one topic",
    );
    assert_err(
        &invalid(|c| c.audits[0].topics.push("bad topic".into())),
        "audits[0].topics[1]",
        "not a valid topic name",
    );
    assert_err(
        &invalid(|c| c.audits[0].topics.push("x".repeat(250))),
        "audits[0].topics[1]",
        "249",
    );
    assert_err(
        &invalid(|c| c.audits[0].topics.push("test".into())),
        "audits[0].topics[1]",
        "duplicate topic",
    );
}

#[test]
fn url_scheme_must_fit_the_kind() {
    let e = invalid(|c| c.audits[0].sink.url = SecretUrl::new("postgres://h:5432/db"));
    assert_err(
        &e,
        "audits[0].sink.url",
        "scheme must be mysql, http or https",
    );
    assert_eq!(
        toml_err(&BASE.replace("mysql://root@", "ftp://root@")).to_string(),
        "audits[0].sink.url: scheme must be mysql, http or https (got `ftp`)"
    );
    let e = invalid(|c| c.audits[0].sink.url = SecretUrl::new("http://h:9030/db"));
    assert_err(&e, "audits[0].sink.url", "kind doris needs mysql://");
    let e = invalid(|c| {
        c.audits[0].sink.kind = SinkKind::Elasticsearch;
        c.audits[0].sink.table = None;
        c.audits[0].sink.index = Some("dns".into());
    });
    assert_err(
        &e,
        "audits[0].sink.url",
        "scheme must be mysql, http or https",
    );
    assert_err(
        &invalid(|c| c.audits[0].sink.url = SecretUrl::new("not a url")),
        "audits[0].sink.url",
        "not a valid URL",
    );
}

#[test]
fn table_is_required_for_sql_sinks() {
    assert_err(
        &invalid(|c| c.audits[0].sink.table = None),
        "audits[0].sink.table",
        "required for kind doris",
    );
    let e = invalid(|c| c.audits[0].sink.url = SecretUrl::new("mysql://root@127.0.0.1:9030"));
    assert_err(&e, "audits[0].sink.table", "names no database");
    let mut cfg = base();
    cfg.audits[0].sink.url = SecretUrl::new("mysql://root@127.0.0.1:9030");
    cfg.audits[0].sink.table = Some("example_db.dns_logs_from_flink01".into());
    let valid = cfg.validate().expect("database.table names the database");
    let sql = sql_spec(&valid, 0);
    assert_eq!(sql.table, "example_db.dns_logs_from_flink01");
    assert_eq!(sql.database, "example_db");
}

#[test]
fn sql_identifiers_must_be_usable() {
    assert_err(
        &invalid(|c| c.audits[0].sink.table = Some("db.".into())),
        "audits[0].sink.table",
        "must not be empty",
    );
    assert_err(
        &invalid(|c| c.audits[0].sink.table = Some("a.b.c".into())),
        "audits[0].sink.table",
        "database.table",
    );
    assert_err(
        &invalid(|c| c.audits[0].sink.table = Some("t`; drop".into())),
        "audits[0].sink.table",
        "backticks",
    );
    assert_err(
        &invalid(|c| c.audits[0].matching.columns[1] = String::new()),
        "audits[0].match.columns[1]",
        "must not be empty",
    );
}

#[test]
fn index_is_required_for_elasticsearch() {
    let e = toml_err(&format!(
        "{BASE}{}",
        ES_AUDIT.replace("index = \"dns_logs\"\n", "")
    ));
    assert_err(&e, "audits[1].sink.index", "required");
    let e = toml_err(&format!("{BASE}{}", ES_AUDIT.replace("dns_logs", "DNS")));
    assert_err(&e, "audits[1].sink.index", "not a valid index name");
}

#[test]
fn key_columns_needs_a_key() {
    let e = invalid(|c| {
        c.audits[0].matching.key.clear();
        c.audits[0].matching.columns.clear();
    });
    assert_err(&e, "audits[0].match.key", "at least one record field");
}

#[test]
fn key_and_columns_pair_up() {
    let e = invalid(|c| {
        c.audits[0]
            .matching
            .columns
            .pop()
            .map(drop)
            .unwrap_or_default()
    });
    assert_err(
        &e,
        "audits[0].match.columns",
        "has 2 entries but match.key has 3",
    );
    let cfg = Config::from_toml_str(&BASE.replace(
        "key = [\"client_ip\",\"domain\",\"time\"]",
        "key = [\"client_ip\",\"domain\",\"time\"]\ncolumns = [\"ip\",\"d\",\"t\"]",
    ))
    .expect("custom columns");
    assert_eq!(cfg.audits[0].matching.sink_columns(), ["ip", "d", "t"]);
}

#[test]
fn key_fields_must_be_record_fields_for_csv() {
    let e = invalid(|c| c.audits[0].matching.key[2] = "timestamp".into());
    assert_err(
        &e,
        "audits[0].match.key[2]",
        "`timestamp` is not in audits[0].record.fields",
    );
}

#[test]
fn offset_columns_need_column_names() {
    let e = invalid(|c| {
        c.audits[0].matching.strategy = MatchStrategy::OffsetColumns;
        c.audits[0].matching.partition_column = String::new();
    });
    assert_err(&e, "audits[0].match.partition_column", "must not be empty");
    let e = invalid(|c| {
        c.audits[0].matching.strategy = MatchStrategy::OffsetColumns;
        c.audits[0].matching.offset_column = " ".into();
    });
    assert_err(&e, "audits[0].match.offset_column", "must not be empty");
    let e = invalid(|c| {
        c.audits[0].matching.strategy = MatchStrategy::OffsetColumns;
        c.audits[0].topics.push("test2".into());
    });
    assert_err(&e, "audits[0].match.topic_column", "more than one topic");
}

/// Issue 34 item 4: two audits verifying one table by offset, each reading its own topic,
/// without `topic_column`: `other`'s row at (0, 5) would confirm `test`'s lost record.
/// Refused where the config shows it; with the topic column, with one topic between them,
/// or on another table, accepted.
#[test]
fn offset_columns_on_a_table_another_audit_verifies_needs_a_topic_column() {
    let two = |edit: &dyn Fn(&mut Config)| {
        let mut c = base();
        c.audits[0].matching.strategy = MatchStrategy::OffsetColumns;
        let mut other = c.audits[0].clone();
        other.name = "other_logs".into();
        other.topics = vec!["other".into()];
        // The same table, spelt as database.table and in another case, on the default port.
        other.sink.url = SecretUrl::new("mysql://root@127.0.0.1/example_db");
        other.sink.table = Some("EXAMPLE_DB.dns_logs_from_flink01".into());
        c.audits.push(other);
        edit(&mut c);
        c.validate()
    };
    let e = two(&|_| {}).expect_err("two topics, one table, no topic column");
    assert_err(
        &e,
        "audits[0].match.topic_column",
        "audits[1] (`other_logs`",
    );
    assert!(e.message.contains("same sink table"), "{e}");
    // The second audit is checked too when only the first names the topic column.
    let e = two(&|c| c.audits[0].matching.topic_column = Some("kafka_topic".into()))
        .expect_err("the other audit still counts foreign rows");
    assert_err(&e, "audits[1].match.topic_column", "audits[0] (`dns_logs`");
    two(&|c| {
        for a in &mut c.audits {
            a.matching.topic_column = Some("kafka_topic".into());
        }
    })
    .expect("both name the topic column");
    two(&|c| c.audits[1].topics = vec!["test".into()]).expect("one topic between them");
    two(&|c| c.audits[1].sink.table = Some("example_db.other_table".into()))
        .expect("another table");
    two(&|c| c.audits[1].sink.url = SecretUrl::new("mysql://root@10.0.0.9/example_db"))
        .expect("another server");
    two(&|c| c.audits[1].matching.strategy = MatchStrategy::KeyColumns)
        .expect_err("a key_columns audit's topic writes the table too");
}

#[test]
fn doc_id_needs_elasticsearch() {
    let e = invalid(|c| c.audits[0].matching.strategy = MatchStrategy::DocId);
    assert_err(
        &e,
        "audits[0].match.strategy",
        "strategy doc_id needs sink.kind = elasticsearch",
    );
}

#[test]
fn doc_id_template_is_checked() {
    let cfg = Config::from_toml_str(&format!("{BASE}{ES_AUDIT}")).expect("es audit");
    assert_eq!(
        cfg.audits[1].matching.id_template.as_deref(),
        Some(DEFAULT_ID_TEMPLATE)
    );
    assert_eq!(cfg.consumer_group(&cfg.audits[1]), "gap-auditor.es_logs");
    let e = toml_err(&format!(
        "{BASE}{}",
        ES_AUDIT.replace(
            "strategy = \"doc_id\"",
            "strategy = \"doc_id\"\nid_template = \"{topic\""
        )
    ));
    assert_err(&e, "audits[1].match.id_template", "without a matching");
    let e = toml_err(&format!(
        "{BASE}{}",
        ES_AUDIT.replace(
            "strategy = \"doc_id\"",
            "strategy = \"doc_id\"\nid_template = \"constant\""
        )
    ));
    assert_err(
        &e,
        "audits[1].match.id_template",
        "at least one placeholder",
    );
}

#[test]
fn csv_needs_fields_and_a_one_char_delimiter() {
    let e = invalid(|c| {
        c.audits[0].record.fields.clear();
    });
    assert_err(
        &e,
        "audits[0].record.fields",
        "format csv needs the column names",
    );
    assert_err(
        &invalid(|c| c.audits[0].record.delimiter = "||".into()),
        "audits[0].record.delimiter",
        "exactly one character",
    );
    assert_err(
        &invalid(|c| c.audits[0].record.delimiter = String::new()),
        "audits[0].record.delimiter",
        "exactly one character",
    );
    let mut cfg = base();
    cfg.audits[0].record.delimiter = "│".into(); // multi-byte UTF-8, one char
    cfg.validate().expect("a one-char multi-byte delimiter");
    let tab = Config::from_toml_str(&BASE.replace("delimiter = \"|\"", "delimiter = '\\t'"))
        .expect("tab");
    assert_eq!(tab.audits[0].record.delimiter, "\t");
}

#[test]
fn field_count_must_be_positive() {
    assert_err(
        &invalid(|c| c.audits[0].record.filter.field_count = Some(0)),
        "audits[0].record.filter.field_count",
        "must be > 0",
    );
    assert_err(
        &invalid(|c| c.audits[0].record.filter.field_count = Some(3)),
        "audits[0].record.filter.field_count",
        "less than the 9 names",
    );
    assert_err(
        &invalid(|c| c.audits[0].record.filter.require = vec!["nope".into()]),
        "audits[0].record.filter.require[0]",
        "not in",
    );
}

#[test]
fn verify_interval_must_be_positive() {
    assert_err(
        &invalid(|c| c.audits[0].verify_interval = Duration::ZERO),
        "audits[0].verify_interval",
        "must be > 0",
    );
}

#[test]
fn batch_size_range() {
    assert_err(
        &invalid(|c| c.audits[0].batch_size = 0),
        "audits[0].batch_size",
        "between 1 and 100000",
    );
    assert_err(
        &invalid(|c| c.audits[0].batch_size = 100_001),
        "audits[0].batch_size",
        "between 1 and 100000",
    );
}

#[test]
fn max_pending_at_least_batch_size() {
    assert_err(
        &invalid(|c| c.audits[0].max_pending = 999),
        "audits[0].max_pending",
        "at least batch_size (1000)",
    );
}

#[test]
fn sink_tls_modes() {
    let with = |extra: &str| BASE.replace("table = ", &format!("{extra}\ntable = "));
    let mode = |extra: &str| match Config::from_toml_str(&with(extra)) {
        Ok(c) => c.audits[0].sink.tls_mode(),
        Err(e) => panic!("{extra}: {e}"),
    };
    assert_eq!(mode(""), SinkTls::Disabled);
    assert_eq!(mode("tls = \"required\""), SinkTls::Required);
    assert_eq!(
        mode("tls = \"VERIFY_CA\""),
        SinkTls::VerifyCa,
        "MySQL's spelling"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "not checked at load").expect("write");
    let ca_file = format!("ca_file = {:?}", ca.display().to_string());
    assert_eq!(
        mode(&ca_file),
        SinkTls::VerifyIdentity,
        "ca_file alone verifies"
    );
    assert_eq!(
        mode(&format!("{ca_file}\ntls = \"verify_ca\"")),
        SinkTls::VerifyCa
    );
    let e = toml_err(&with("tls = \"preferred\""));
    assert_err(&e, "audits[0].sink.tls", "verify_identity");
    let e = toml_err(&with(
        "tls = \"required\"\nclient_identity_file = \"/nonexistent.p12\"",
    ));
    assert_err(
        &e,
        "audits[0].sink.client_identity_file",
        "/nonexistent.p12",
    );
}

#[test]
fn elasticsearch_auth_rules() {
    let e = toml_err(&format!(
        "{BASE}{}",
        ES_AUDIT.replace("index =", "api_key = \"k\"\nindex =")
    ));
    assert_err(
        &e,
        "audits[1].sink.api_key",
        "either api_key or username/password",
    );
    let e = invalid(|c| c.audits[0].sink.api_key = Some(Secret::new("k")));
    assert_err(&e, "audits[0].sink.api_key", "elasticsearch only");
    let e = invalid(|c| c.audits[0].sink.stream_load_url = Some("http://u:p@fe:8030".into()));
    assert_err(&e, "audits[0].sink.stream_load_url", "credentials");
}

#[test]
fn kafka_rules() {
    let e = invalid(|c| {
        c.kafka
            .properties
            .insert("enable.auto.commit".into(), Secret::new("true"));
    });
    assert_err(
        &e,
        "kafka.properties[\"enable.auto.commit\"]",
        "managed by gap-auditor",
    );
    let e = invalid(|c| c.kafka.heartbeat_interval = Some(Duration::from_secs(10)));
    assert_err(
        &e,
        "kafka.heartbeat_interval",
        "shorter than kafka.session_timeout",
    );
    let e = invalid(|c| c.kafka.statistics_interval = Some(Duration::ZERO));
    assert_err(&e, "kafka.statistics_interval", "at least 1ms");
}

#[test]
fn only_properties_that_break_the_audit_are_refused() {
    for name in [
        "group.id",
        "bootstrap.servers",
        "metadata.broker.list",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "auto.offset.reset",
        "isolation.level",
    ] {
        let e = invalid(|c| {
            c.kafka.properties.insert(name.into(), Secret::new("x"));
        });
        assert_err(
            &e,
            &format!("kafka.properties[\"{name}\"]"),
            "managed by gap-auditor",
        );
    }
    let toml = BASE.replace(
            "[[audits]]",
            "[kafka.properties]\n\"session.timeout.ms\" = \"6000\"\n\
             \"heartbeat.interval.ms\" = \"500\"\n\"statistics.interval.ms\" = \"250\"\n\
             \"fetch.max.bytes\" = \"1048576\"\n\"max.partition.fetch.bytes\" = \"262144\"\n\n[[audits]]",
        );
    let cfg = Config::from_toml_str(&toml).expect("tuning properties are accepted");
    let k = &cfg.kafka;
    assert_eq!(k.session_timeout(), Duration::from_millis(6000));
    assert_eq!(k.heartbeat_interval(), Duration::from_millis(500));
    assert_eq!(k.statistics_interval(), Duration::from_millis(250));
    assert_eq!(k.properties["fetch.max.bytes"].expose(), "1048576");
}

#[test]
fn a_timing_set_both_ways_names_both_keys() {
    for (property, key, _) in TIMING_PROPERTIES {
        let dedicated = key.trim_start_matches("kafka.");
        let toml = BASE.replace(
            "brokers = \"127.0.0.1:9092\"\n",
            &format!(
                "brokers = \"127.0.0.1:9092\"\n{dedicated} = \"500ms\"\n\
                     [kafka.properties]\n\"{property}\" = \"500\"\n"
            ),
        );
        let e = toml_err(&toml);
        assert_err(&e, &format!("kafka.properties[\"{property}\"]"), key);
    }
}

/// Once only `build_sink` refused a password without a user, when it came from the url
/// (`https://:secret@host`), and only when the daemon started; validation refuses it now,
/// naming the key, so `validate-config` and loading do too.
#[test]
fn a_url_password_without_a_user_is_refused_by_validation() {
    let mut cfg = es_base();
    cfg.audits[0].sink.url = SecretUrl::new("https://:url-only-secret@127.0.0.1:9200");
    let e = cfg.validate().expect_err("a password without a user");
    assert_err(&e, "audits[0].sink.url", "needs a username (sink.username");
    assert!(!e.to_string().contains("url-only-secret"), "{e}");

    let toml = format!(
        "{BASE}{}",
        ES_AUDIT.replace("elastic:es-url-secret@", ":es-url-secret@")
    );
    let e = toml_err(&toml);
    assert_err(&e, "audits[1].sink.url", "needs a username");
    assert!(!e.to_string().contains("es-url-secret"), "{e}");

    // With a user named separately, or an api_key (which wins over a url password, as
    // before), it is valid.
    let mut user = cfg.clone();
    user.audits[0].sink.username = Some("elastic".into());
    user.validate().expect("user from sink.username");
    cfg.audits[0].sink.api_key = Some(Secret::new("key"));
    cfg.validate().expect("api key");
}

#[test]
fn a_key_has_at_most_sixteen_fields() {
    // 17 fields: the 17th empty value could not be asked for as NULL too (a false loss).
    let key = |n: usize| -> (Vec<String>, Vec<String>) {
        let fields = base().audits[0].record.fields.clone();
        let key = (0..n).map(|i| fields[i % fields.len()].clone()).collect();
        (key, (0..n).map(|i| format!("c{i}")).collect())
    };
    let e = invalid(|c| (c.audits[0].matching.key, c.audits[0].matching.columns) = key(17));
    assert_err(&e, "audits[0].match.key", "at most 16");
    let mut c = base();
    (c.audits[0].matching.key, c.audits[0].matching.columns) = key(16);
    if let Err(e) = c.validate() {
        panic!("16 key fields must validate: {e}");
    }
}

/// `[audits.replay] pipeline_maps_origin` loads (default off) and is refused where no
/// Kafka coordinate identifies a row: key_columns, a doc_id template without coordinates.
#[test]
fn replay_origin_mapping_only_where_coordinates_identify_rows() {
    assert!(!base().audits[0].replay.pipeline_maps_origin, "default off");
    let with = BASE.replace(
        "[audits.record]",
        "[audits.replay]\npipeline_maps_origin = true\n[audits.record]",
    );
    let e = toml_err(&with);
    assert_err(
        &e,
        "audits[0].replay.pipeline_maps_origin",
        "key_columns finds rows by key",
    );
    let e = toml_err(&with.replace("[audits.replay]", "[audits.replay]\nmaps_origin = 1"));
    assert!(e.to_string().contains("unknown field"), "{e}");
    let cfg = Config::from_toml_str(&with.replace(
        "strategy = \"key_columns\"",
        "strategy = \"offset_columns\"",
    ))
    .expect("offset_columns takes it");
    assert!(cfg.audits[0].replay.pipeline_maps_origin);
    let e = toml_err(&format!(
        "{BASE}{}",
        ES_AUDIT.replace(
            "strategy = \"doc_id\"",
            "strategy = \"doc_id\"\nid_template = \"{key}\"\n[audits.replay]\npipeline_maps_origin = true"
        )
    ));
    assert_err(
        &e,
        "audits[1].replay.pipeline_maps_origin",
        "uses no Kafka coordinate",
    );
}

/// Which coordinates identify a row, per strategy and template: what `replay --to-topic`
/// refuses on.
#[test]
fn identifying_coordinates_per_strategy() {
    let mut m = base().audits[0].matching.clone();
    assert!(m.identifying_coordinates().is_empty(), "key_columns");
    m.strategy = MatchStrategy::OffsetColumns;
    assert_eq!(m.identifying_coordinates(), vec!["partition", "offset"]);
    m.topic_column = Some("topic".into());
    assert_eq!(
        m.identifying_coordinates(),
        vec!["topic", "partition", "offset"]
    );
    m.strategy = MatchStrategy::DocId;
    m.id_template = None;
    assert_eq!(
        m.identifying_coordinates(),
        vec!["topic", "partition", "offset"],
        "the default template"
    );
    m.id_template = Some("{client_ip}-{offset}".into());
    assert_eq!(m.identifying_coordinates(), vec!["offset"]);
    m.id_template = Some("{key}|{domain}".into());
    assert!(m.identifying_coordinates().is_empty());
    m.id_template = Some("{offset".into());
    assert_eq!(
        m.identifying_coordinates().len(),
        3,
        "unparseable: assume all"
    );
}

/// SPEC's `[[audits]]` example carries `max_open_gaps`: a config copied from it loads, the
/// default is 500000 (sized for the 256 MiB bound, see `default_max_open_gaps`), and 0 is
/// refused naming the key (issue 41 item 1).
#[test]
fn max_open_gaps_loads_defaults_and_must_be_positive() {
    assert_eq!(base().audits[0].max_open_gaps, 500_000);
    let with = BASE.replacen(
        "[audits.record]",
        "max_open_gaps = 1000000\n[audits.record]",
        1,
    );
    let cfg = Config::from_toml_str(&with).expect("SPEC's max_open_gaps line loads");
    assert_eq!(cfg.audits[0].max_open_gaps, 1_000_000);
    let five = Config::from_toml_str(&with.replace("max_open_gaps = 1000000", "max_open_gaps = 5"))
        .expect("5");
    assert_eq!(five.audits[0].max_open_gaps, 5);
    let e = invalid(|c| c.audits[0].max_open_gaps = 0);
    assert_err(&e, "audits[0].max_open_gaps", "must be at least 1");
}

/// `server.advertised_url` (forwarded acks): an http(s) base URL with a host; anything
/// else is refused naming the key, credentials above all (the URL is published on the
/// handover topic).
#[test]
fn advertised_url_must_be_an_http_base_url() {
    let server = |v: &str| {
        BASE.replace(
            "[kafka]",
            &format!("[server]\nadvertised_url = {v:?}\n[kafka]"),
        )
    };
    for ok in [
        "http://gap-auditor-0.gap-auditor:9464",
        "https://a.example/base/",
    ] {
        let c = Config::from_toml_str(&server(ok)).expect(ok);
        assert_eq!(c.server.advertised_url.as_deref(), Some(ok));
    }
    for (bad, needle) in [
        ("gap-auditor-0:9464", "http"),
        ("not a url", "not a URL"),
        ("ftp://host/", "http:// or https://"),
        ("http://user:hunter2@host:9464", "credentials"),
        ("http://host:9464/?a=1", "query"),
    ] {
        let e = toml_err(&server(bad));
        assert_err(&e, "server.advertised_url", needle);
        assert!(!e.message.contains("hunter2"), "secret echoed: {e}");
    }
}
