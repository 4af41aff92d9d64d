//! Loading: the example files, key-path errors, YAML, the default paths.

use super::*;

#[test]
fn example_toml_validates() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/gap-auditor.toml");
    let cfg = Config::load_with_env(Some(&path), Vec::new()).expect("example validates");
    assert_eq!(cfg.kafka.brokers, "127.0.0.1:9092");
    assert_eq!(cfg.audits.len(), 1);
    let a = &cfg.audits[0];
    assert_eq!(a.name, "dns_logs");
    assert_eq!(a.topics, vec!["test"]);
    assert_eq!(a.pipeline_group.as_deref(), Some("FlinkSQLFromKafka2Doris"));
    assert_eq!(a.record.delimiter, "|");
    assert_eq!(a.record.fields.len(), 9);
    assert_eq!(a.record.filter.field_count, Some(9));
    assert_eq!(a.matching.strategy, MatchStrategy::KeyColumns);
    assert_eq!(a.matching.columns, a.matching.key);
    assert_eq!(a.sink.kind, SinkKind::Doris);
    assert_eq!(a.sink.table.as_deref(), Some("dns_logs_from_flink01"));
    assert_eq!(
        a.sink.url.expose(),
        "mysql://root@127.0.0.1:9030/example_db"
    );
    assert_eq!(cfg.consumer_group(a), "gap-auditor");
}

#[test]
fn example_yaml_twin_matches_toml() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let toml = Config::load_with_env(Some(&dir.join("gap-auditor.toml")), Vec::new());
    let yaml = Config::load_with_env(Some(&dir.join("gap-auditor.yaml")), Vec::new());
    let (toml, yaml) = (toml.expect("toml"), yaml.expect("yaml"));
    assert_eq!(format!("{toml:?}"), format!("{yaml:?}"));
}

#[test]
fn unknown_keys_are_refused_with_their_path() {
    let e = toml_err(&BASE.replace("table = ", "tabel = \"x\"\ntable = "));
    assert_err(&e, "audits[0].sink", "unknown field `tabel`");
    let e = toml_err(&format!("kafak = 1\n{BASE}"));
    assert!(e.message.contains("unknown field `kafak`"), "{e}");
    let e = toml_err(&BASE.replace("[kafka]", "[kafka]\nbroker = \"x\""));
    assert_err(&e, "kafka", "unknown field `broker`");
}

#[test]
fn missing_and_mistyped_keys_name_their_path() {
    let without_sink = match BASE.split_once("[audits.sink]") {
        Some((head, _)) => head.to_owned(),
        None => panic!("base has a sink"),
    };
    assert_err(&toml_err(&without_sink), "audits[0].sink", "required");
    assert_err(
        &toml_err(&BASE.replace("kind = \"doris\"\n", "")),
        "audits[0].sink.kind",
        "required",
    );
    let e = toml_err(&BASE.replace(
        "name = \"dns_logs\"",
        "name = \"dns_logs\"\nbatch_size = \"lots\"",
    ));
    assert_eq!(e.path, "audits[0].batch_size", "{e}");
    let e = toml_err(&BASE.replace("kind = \"doris\"", "kind = \"postgres\""));
    assert_err(
        &e,
        "audits[0].sink.kind",
        "expected doris, mysql or elasticsearch",
    );
    let e = toml_err(&BASE.replace("[kafka]", "[server]\nlisten = \"nowhere\"\n[kafka]"));
    assert_eq!(e.path, "server.listen", "{e}");
    let e = toml_err("[kafka\nbrokers = 1");
    assert_eq!(e.path, "(toml)");
}

#[test]
fn parse_errors_do_not_quote_the_source_line() {
    let e = toml_err(&BASE.replace("table = ", "password = \"hunter2\nxx\ntable = "));
    assert!(!e.to_string().contains("hunter2"), "{e}");
}

#[test]
fn dotted_property_keys_are_flattened() {
    let toml = BASE.replace(
        "[[audits]]",
        "[kafka.properties]\nsasl.mechanism = \"PLAIN\"\n\"security.protocol\" = \"SASL_SSL\"\n\
             \"socket.keepalive.enable\" = true\n\n[[audits]]",
    );
    let cfg = Config::from_toml_str(&toml).expect("properties");
    let props: Vec<(&str, &str)> = cfg
        .kafka
        .properties
        .iter()
        .map(|(k, v)| (k.as_str(), v.expose()))
        .collect();
    assert_eq!(
        props,
        [
            ("sasl.mechanism", "PLAIN"),
            ("security.protocol", "SASL_SSL"),
            ("socket.keepalive.enable", "true")
        ]
    );
}

/// Parsing: every key with its own parser (enums, durations, numbers, booleans, lists,
/// the listen address, start positions) and every section's unknown-key check, given a
/// bad value, names the key path. `(anchor, replacement, path, word of the message)`:
/// the anchor is replaced once in [`BASE`].
#[test]
fn every_parse_error_names_its_key() {
    let name = "name = \"dns_logs\"";
    let kafka = "[kafka]";
    let record = "[audits.record]";
    let filter = "[audits.record.filter]";
    let matching = "[audits.match]";
    let sink = "[audits.sink]";
    let cases: Vec<(&str, String, &str, &str)> = vec![
        (
            kafka,
            format!("{kafka}\nstart = \"soon\""),
            "kafka.start",
            "start position",
        ),
        (
            kafka,
            format!("{kafka}\nisolation_level = \"dirty\""),
            "kafka.isolation_level",
            "read_committed",
        ),
        (
            kafka,
            format!("{kafka}\nsession_timeout = \"soon\""),
            "kafka.session_timeout",
            "soon",
        ),
        (
            kafka,
            format!("{kafka}\nheartbeat_interval = \"-1s\""),
            "kafka.heartbeat_interval",
            "negative",
        ),
        (
            kafka,
            format!("{kafka}\nstatistics_interval = [1]"),
            "kafka.statistics_interval",
            "duration",
        ),
        (
            kafka,
            format!("{kafka}\nproperties = 5"),
            "kafka.properties",
            "invalid type",
        ),
        (
            kafka,
            format!("{kafka}\ngroupid = \"x\""),
            "kafka",
            "unknown field `groupid`",
        ),
        (
            kafka,
            format!("[server]\nlisten = \"localhost\"\n{kafka}"),
            "server.listen",
            "invalid",
        ),
        (
            kafka,
            format!("[server]\nlisten_on = 1\n{kafka}"),
            "server",
            "unknown field `listen_on`",
        ),
        (
            kafka,
            format!("[server]\napi_token = [\"t\"]\n{kafka}"),
            "server.api_token",
            "invalid type",
        ),
        (
            kafka,
            format!("[state]\ndir = \"x\"\n{kafka}"),
            "state",
            "unknown field `dir`",
        ),
        (
            name,
            format!("{name}\ngrace = \"soon\""),
            "audits[0].grace",
            "soon",
        ),
        (
            name,
            format!("{name}\nverify_interval = \"-5s\""),
            "audits[0].verify_interval",
            "negative",
        ),
        (
            name,
            format!("{name}\ngive_up_after = \"x\""),
            "audits[0].give_up_after",
            "duration",
        ),
        (
            name,
            format!("{name}\nstall_after = true"),
            "audits[0].stall_after",
            "duration",
        ),
        (
            name,
            format!("{name}\nbatch_size = \"lots\""),
            "audits[0].batch_size",
            "invalid",
        ),
        (
            name,
            format!("{name}\nmax_pending = -1"),
            "audits[0].max_pending",
            "invalid",
        ),
        (
            name,
            format!("{name}\ntopic = \"x\""),
            "audits[0]",
            "unknown field `topic`",
        ),
        (
            name,
            format!("{name}\ngroup_id = [1]"),
            "audits[0].group_id",
            "invalid type",
        ),
        (
            "format = \"csv\"",
            "format = \"xml\"".to_string(),
            "audits[0].record.format",
            "csv",
        ),
        (
            record,
            format!("{record}\nquote = \"maybe\""),
            "audits[0].record.quote",
            "invalid",
        ),
        (
            record,
            format!("{record}\nseparator = \"|\""),
            "audits[0].record",
            "unknown field `separator`",
        ),
        (
            filter,
            format!("{filter}\nmin_fields = \"some\""),
            "audits[0].record.filter.min_fields",
            "invalid",
        ),
        (
            filter,
            format!("{filter}\nrequired = [\"a\"]"),
            "audits[0].record.filter",
            "unknown field `required`",
        ),
        (
            matching,
            format!("{matching}\ntopic_column = {{ a = 1 }}"),
            "audits[0].match.topic_column",
            "invalid type",
        ),
        (
            matching,
            format!("{matching}\nkeys = [\"a\"]"),
            "audits[0].match",
            "unknown field `keys`",
        ),
        (
            sink,
            format!("{sink}\nquery_timeout = \"later\""),
            "audits[0].sink.query_timeout",
            "later",
        ),
        (
            sink,
            format!("{sink}\npassword = {{ a = 1 }}"),
            "audits[0].sink.password",
            "invalid type",
        ),
        (
            sink,
            format!("{sink}\npasword = \"x\""),
            "audits[0].sink",
            "unknown field `pasword`",
        ),
    ];
    let count = cases.len();
    for (anchor, replacement, path, needle) in cases {
        assert_eq!(BASE.matches(anchor).count(), 1, "{anchor}");
        let e = toml_err(&BASE.replacen(anchor, &replacement, 1));
        assert_err(&e, path, needle);
    }
    // The strategy enum sits after `[audits.match]`, so it is replaced, not added.
    let e = toml_err(&BASE.replace("\"key_columns\"", "\"fuzzy\""));
    assert_err(&e, "audits[0].match.strategy", "key_columns");
    eprintln!("{} parse errors checked", count + 1);
}

#[test]
fn environment_only_without_audits_fails_clearly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = match load_from(
        None,
        &[dir.path().join("absent.toml")],
        env(&[("GAP_AUDITOR__KAFKA__BROKERS", "k:9092")]),
    ) {
        Err(e) => e,
        Ok(_) => panic!("must fail"),
    };
    assert_err(&e, "audits", "at least one [[audits]] is required");
    assert!(e.message.contains("no config file found"), "{e}");
}

#[test]
fn default_paths_are_searched_in_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let second = write_temp(&dir, "second.toml", BASE);
    let first = dir.path().join("first.toml");
    let cfg = load_from(None, &[first, second], Vec::new()).expect("second file");
    assert_eq!(cfg.config().audits[0].name, "dns_logs");
}

#[test]
fn explicit_missing_file_is_an_error() {
    let e = match Config::load_with_env(Some(Path::new("/nonexistent/gap.toml")), Vec::new()) {
        Err(e) => e,
        Ok(_) => panic!("must fail"),
    };
    assert_err(&e, "/nonexistent/gap.toml", "not found");
    let dir = tempfile::tempdir().expect("tempdir");
    let ini = write_temp(&dir, "gap.ini", "x=1");
    let e = match Config::load_with_env(Some(&ini), Vec::new()) {
        Err(e) => e,
        Ok(_) => panic!("must fail"),
    };
    assert!(e.message.contains(".toml, .yaml or .yml"), "{e}");
}

#[test]
fn yaml_files_load_and_null_means_unset() {
    let yaml = r#"
kafka:
  brokers: "127.0.0.1:9092"
  properties:
audits:
  - name: y
    topics: test
    pipeline_group: ~
    record:
      format: json
    match:
      strategy: key_columns
      key: [client_ip]
    sink:
      kind: doris
      url: "mysql://root@127.0.0.1:9030/example_db"
      table: t
"#;
    let cfg = Config::from_yaml_str(yaml).expect("yaml");
    assert_eq!(cfg.audits[0].topics, ["test"]);
    assert_eq!(cfg.audits[0].pipeline_group, None);
    assert!(cfg.kafka.properties.is_empty());
}
