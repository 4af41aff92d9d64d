//! Environment overrides.

use super::*;

#[test]
fn registry_password_from_the_environment() {
    let dir = tempfile::tempdir().expect("tempdir");
    let toml = AVRO.replace("password = \"registry-secret\"\n", "");
    let path = write_temp(&dir, "gap-auditor.toml", &toml);
    let cfg = Config::load_with_env(
        Some(&path),
        env(&[(
            "GAP_AUDITOR__AUDITS__0__RECORD__SCHEMA_REGISTRY__PASSWORD",
            "env-registry-pw",
        )]),
    )
    .expect("env override");
    assert_eq!(registry_password(&cfg), Some("env-registry-pw"));
}

#[test]
fn env_overrides_sections_and_audits_by_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_temp(&dir, "gap-auditor.toml", BASE);
    let cfg = Config::load_with_env(
        Some(&path),
        env(&[
            ("GAP_AUDITOR__KAFKA__BROKERS", "k1:9092,k2:9092"),
            ("GAP_AUDITOR__KAFKA__START", "-2h"),
            ("GAP_AUDITOR__AUDITS__0__GRACE", "10s"),
            ("GAP_AUDITOR__AUDITS__0__SINK__PASSWORD", "env-password"),
            ("GAP_AUDITOR__AUDITS__0__BATCH_SIZE", "500"),
            ("GAP_AUDITOR__AUDITS__0__RECORD__QUOTE", "true"),
            ("GAP_AUDITOR__AUDITS__0__TOPICS", "test, test2"),
            ("GAP_AUDITOR__AUDITS__0__MATCH__KEY__2", "rcode"),
            ("GAP_AUDITOR__AUDITS__0__PIPELINE_GROUP", ""),
            ("GAP_AUDITOR__KAFKA__PROPERTIES__SASL_PASSWORD", "sasl-env"),
            ("GAP_AUDITOR__SERVER__LISTEN", "127.0.0.1:9999"),
            ("OTHER_VARIABLE", "ignored"),
        ]),
    )
    .expect("env overrides");
    assert_eq!(cfg.kafka.brokers, "k1:9092,k2:9092");
    assert_eq!(
        cfg.kafka.start,
        StartPosition::Ago(Duration::from_secs(7200))
    );
    let a = &cfg.audits[0];
    assert_eq!(a.grace, Duration::from_secs(10));
    assert_eq!(
        a.sink.password.as_ref().map(Secret::expose),
        Some("env-password")
    );
    assert_eq!(a.batch_size, 500);
    assert!(a.record.quote);
    assert_eq!(a.topics, ["test", "test2"]);
    assert_eq!(a.matching.key, ["client_ip", "domain", "rcode"]);
    assert_eq!(a.matching.columns, a.matching.key);
    assert_eq!(a.pipeline_group, None);
    assert_eq!(cfg.kafka.properties["sasl.password"].expose(), "sasl-env");
    assert_eq!(cfg.server.listen.port(), 9999);
}

#[test]
fn env_override_errors_name_the_variable_or_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = write_temp(&dir, "gap-auditor.toml", BASE);
    let load = |vars: &[(&str, &str)]| match Config::load_with_env(Some(&path), env(vars)) {
        Err(e) => e,
        Ok(_) => panic!("expected an error for {vars:?}"),
    };
    let e = load(&[("GAP_AUDITOR__AUDITS__0__BATCH_SIZE", "many")]);
    assert_eq!(e.path, "audits[0].batch_size", "{e}");
    let e = load(&[("GAP_AUDITOR__AUDITS__0__GRACE", "-1s")]);
    assert_err(&e, "audits[0].grace", "negative");
    let e = load(&[("GAP_AUDITOR__KAFKA__BROKERS__X", "1")]);
    assert_err(&e, "GAP_AUDITOR__KAFKA__BROKERS__X", "not a section");
    let e = load(&[("GAP_AUDITOR__AUDITS__NAME", "x")]);
    assert_err(&e, "GAP_AUDITOR__AUDITS__NAME", "must be an index");
    let e = load(&[("GAP_AUDITOR__AUDITS__1__NAME", "second")]);
    assert_eq!(e.path, "audits[1].match", "{e}");
    let e = load(&[("GAP_AUDITOR__KAFKA____BROKERS", "x")]);
    assert_err(&e, "GAP_AUDITOR__KAFKA____BROKERS", "empty key segment");
}

#[test]
fn env_can_supply_a_whole_audit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = load_from(
        None,
        &[dir.path().join("absent.toml")],
        env(&[
            ("GAP_AUDITOR__KAFKA__BROKERS", "k:9092"),
            ("GAP_AUDITOR__AUDITS__0__NAME", "env_audit"),
            ("GAP_AUDITOR__AUDITS__0__TOPICS__0", "t1"),
            ("GAP_AUDITOR__AUDITS__0__RECORD__FORMAT", "raw"),
            ("GAP_AUDITOR__AUDITS__0__MATCH__STRATEGY", "offset_columns"),
            ("GAP_AUDITOR__AUDITS__0__SINK__KIND", "mysql"),
            ("GAP_AUDITOR__AUDITS__0__SINK__URL", "mysql://u@db:3306/app"),
            ("GAP_AUDITOR__AUDITS__0__SINK__TABLE", "events"),
        ]),
    )
    .expect("environment only");
    assert_eq!(sql_spec(&cfg, 0).table, "events");
    assert_eq!(sql_spec(&cfg, 0).database, "app");
    let cfg = cfg.into_config();
    assert_eq!(cfg.audits[0].name, "env_audit");
    assert_eq!(cfg.audits[0].topics, ["t1"]);
    assert_eq!(cfg.audits[0].sink.kind, SinkKind::Mysql);
}
