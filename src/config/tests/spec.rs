//! What validation returns: the typed sink spec of each audit.

use super::*;

#[test]
fn the_seed_doris_audit_becomes_a_sql_spec() {
    let valid = Validated::from_toml_str(BASE).expect("base");
    assert_eq!(valid.sinks().len(), 1);
    assert_eq!(valid.sinks()[0].kind(), SinkKind::Doris);
    let sql = sql_spec(&valid, 0);
    assert_eq!(sql.kind, SqlKind::Doris);
    assert_eq!(sql.kind.as_str(), "doris");
    assert_eq!(sql.url.expose(), "mysql://root@127.0.0.1:9030/example_db");
    assert_eq!(sql.table, "dns_logs_from_flink01");
    assert_eq!(sql.database, "example_db");
    assert_eq!((&sql.username, &sql.password), (&None, &None));
    assert_eq!(sql.stream_load, None);
    assert_eq!(sql.query_timeout, Duration::from_secs(10));
    assert_eq!(
        sql.tls,
        SqlTls {
            mode: SinkTls::Disabled,
            ca_file: None,
            client_identity_file: None,
            client_identity_password: None,
        }
    );
    assert_eq!(
        sql.columns,
        SinkColumns {
            partition: "partition".into(),
            offset: "offset".into(),
            topic: None,
            key: vec!["client_ip".into(), "domain".into(), "time".into()],
        }
    );
    let (audit, spec) = valid.audit("dns_logs").expect("by name");
    assert_eq!(audit.name, "dns_logs");
    assert_eq!(spec, &valid.sinks()[0]);
    assert!(valid.audit("nope").is_none());
}

#[test]
fn match_columns_and_tls_reach_the_spec() {
    let mut cfg = base();
    cfg.audits[0].matching.columns = vec!["ip".into(), "name".into(), "ts".into()];
    cfg.audits[0].sink.ca_file = Some("/etc/ca.pem".into());
    cfg.audits[0].sink.client_identity_file = Some("/etc/client.p12".into());
    cfg.audits[0].sink.client_identity_password = Some(Secret::new("p12-secret"));
    let valid = cfg.validate().expect("valid");
    let sql = sql_spec(&valid, 0);
    assert_eq!(sql.columns.key, ["ip", "name", "ts"]);
    // `tls` defaults to verify_identity once ca_file is set.
    assert_eq!(sql.tls.mode, SinkTls::VerifyIdentity);
    assert_eq!(sql.tls.ca_file.as_deref(), Some(Path::new("/etc/ca.pem")));
    assert_eq!(
        sql.tls.client_identity_file.as_deref(),
        Some(Path::new("/etc/client.p12"))
    );
    assert_eq!(
        sql.tls.client_identity_password,
        Some(Secret::new("p12-secret"))
    );
}

#[test]
fn stream_load_gets_database_table_and_the_effective_credentials() {
    let mut cfg = base();
    cfg.audits[0].sink.url = SecretUrl::new("mysql://loader:url-pw@127.0.0.1:9030/example_db");
    cfg.audits[0].sink.stream_load_url = Some("http://127.0.0.1:8030".into());
    let valid = cfg.validate().expect("valid");
    let sql = sql_spec(&valid, 0);
    // The MySQL client takes the url's credentials itself: no override.
    assert_eq!((&sql.username, &sql.password), (&None, &None));
    assert_eq!(
        sql.stream_load,
        Some(StreamLoadSpec {
            url: "http://127.0.0.1:8030".into(),
            database: "example_db".into(),
            table: "dns_logs_from_flink01".into(),
            username: "loader".into(),
            password: Some(SecretSource::Value(Secret::new("url-pw"))),
        })
    );

    // database.table, and the credentials set as keys.
    cfg.audits[0].sink.url = SecretUrl::new("mysql://127.0.0.1:9030");
    cfg.audits[0].sink.table = Some("other_db.events".into());
    cfg.audits[0].sink.username = Some("writer".into());
    cfg.audits[0].sink.password = Some(Secret::new("key-pw"));
    let valid = cfg.validate().expect("valid");
    let sql = sql_spec(&valid, 0);
    assert_eq!(sql.table, "other_db.events");
    assert_eq!(sql.database, "other_db");
    assert_eq!(sql.username.as_deref(), Some("writer"));
    let load = sql.stream_load.as_ref().expect("stream load");
    assert_eq!(
        (load.database.as_str(), load.table.as_str()),
        ("other_db", "events")
    );
    assert_eq!(load.username, "writer");
    assert_eq!(
        load.password,
        Some(SecretSource::Value(Secret::new("key-pw")))
    );
}

#[test]
fn elasticsearch_auth_is_decided_by_validation() {
    let cfg = es_base();
    let valid = cfg.validate().expect("valid");
    let es = es_spec(&valid, 0);
    assert_eq!(valid.sinks()[0].kind(), SinkKind::Elasticsearch);
    // Credentials go in `auth`, never in the url handed to the client.
    assert_eq!(es.url, "https://127.0.0.1:9200/");
    assert_eq!(
        es.auth,
        EsAuthSpec::Basic {
            username: "elastic".into(),
            password: Some(SecretSource::Value(Secret::new("es-url-secret"))),
        }
    );
    assert_eq!(es.index, "dns_logs");
    assert_eq!(es.query_timeout, Duration::from_secs(10));

    let mut api = cfg.clone();
    api.audits[0].sink.url = SecretUrl::new("https://127.0.0.1:9200");
    api.audits[0].sink.api_key = Some(Secret::new("key-secret"));
    let valid = api.validate().expect("api key");
    assert_eq!(
        es_spec(&valid, 0).auth,
        EsAuthSpec::ApiKey(SecretSource::Value(Secret::new("key-secret")))
    );

    let mut user_only = cfg.clone();
    user_only.audits[0].sink.url = SecretUrl::new("https://127.0.0.1:9200");
    user_only.audits[0].sink.username = Some("reader".into());
    let valid = user_only.validate().expect("a user without a password");
    assert_eq!(
        es_spec(&valid, 0).auth,
        EsAuthSpec::Basic {
            username: "reader".into(),
            password: None,
        }
    );

    let mut open = cfg;
    open.audits[0].sink.url = SecretUrl::new("http://127.0.0.1:9200");
    let valid = open.validate().expect("no credentials");
    assert_eq!(es_spec(&valid, 0).auth, EsAuthSpec::None);
}

#[test]
fn a_url_password_with_a_separate_user_is_basic_auth() {
    let mut cfg = es_base();
    cfg.audits[0].sink.url = SecretUrl::new("https://:url-only-secret@127.0.0.1:9200");
    cfg.audits[0].sink.username = Some("elastic".into());
    let valid = cfg.validate().expect("user from sink.username");
    assert_eq!(
        es_spec(&valid, 0).auth,
        EsAuthSpec::Basic {
            username: "elastic".into(),
            password: Some(SecretSource::Value(Secret::new("url-only-secret"))),
        }
    );
    // An api_key wins over a url password.
    cfg.audits[0].sink.username = None;
    cfg.audits[0].sink.api_key = Some(Secret::new("key"));
    let valid = cfg.validate().expect("api key");
    assert_eq!(
        es_spec(&valid, 0).auth,
        EsAuthSpec::ApiKey(SecretSource::Value(Secret::new("key")))
    );
}

#[test]
fn unread_secret_files_stay_files_in_the_spec_and_read_like_the_loader() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pw = write_temp(&dir, "pw", "from-the-file\r\n");
    let mut cfg = base();
    cfg.audits[0].sink.password_file = Some(pw.clone());
    let valid = cfg.validate().expect("valid before the file is read");
    let source = sql_spec(&valid, 0).password.clone().expect("a password");
    assert_eq!(
        source,
        SecretSource::File {
            key: "audits[0].sink.password_file".into(),
            path: pw,
        }
    );
    assert_eq!(source.read(), Ok(Secret::new("from-the-file")));

    let mut es = es_base();
    es.audits[0].sink.url = SecretUrl::new("https://127.0.0.1:9200");
    es.audits[0].sink.api_key_file = Some(dir.path().join("absent"));
    let valid = es.validate().expect("valid before the file is read");
    let EsAuthSpec::ApiKey(key) = &es_spec(&valid, 0).auth else {
        panic!("api key auth");
    };
    assert_err(
        &key.read().expect_err("no such file"),
        "audits[0].sink.api_key_file",
        "cannot read",
    );

    // Loading reads the file first: the spec holds the value.
    let toml = BASE.replace(
        "table = ",
        &format!(
            "password_file = {:?}\ntable = ",
            dir.path().join("pw").display().to_string()
        ),
    );
    let loaded = Validated::from_toml_str(&toml).expect("loads");
    assert_eq!(
        sql_spec(&loaded, 0).password,
        Some(SecretSource::Value(Secret::new("from-the-file")))
    );
    assert_eq!(loaded.config().audits[0].sink.password_file, None);
}

#[test]
fn specs_never_print_their_secrets() {
    let mut cfg = base();
    cfg.audits[0].sink.url = SecretUrl::new("mysql://root:url-secret@127.0.0.1:9030/example_db");
    cfg.audits[0].sink.stream_load_url = Some("https://127.0.0.1:8030".into());
    cfg.audits[0].sink.ca_file = Some("/etc/ca.pem".into());
    cfg.audits[0].sink.client_identity_file = Some("/etc/client.p12".into());
    cfg.audits[0].sink.client_identity_password = Some(Secret::new("p12-secret"));
    let mut es = es_base().audits.remove(0);
    es.name = "es".into();
    es.group_id = Some("gap-auditor.es".into());
    let mut api = es.clone();
    es.sink.url = SecretUrl::new("https://127.0.0.1:9200");
    es.sink.username = Some("elastic".into());
    es.sink.password = Some(Secret::new("es-password-secret"));
    api.name = "api".into();
    api.group_id = Some("gap-auditor.api".into());
    api.sink.url = SecretUrl::new("https://127.0.0.1:9200");
    api.sink.api_key = Some(Secret::new("api-key-secret"));
    cfg.audits.extend([es, api]);
    let valid = cfg.validate().expect("valid");
    let printed = format!("{valid:?} {valid:#?}");
    for secret in [
        "url-secret",
        "p12-secret",
        "es-password-secret",
        "api-key-secret",
    ] {
        assert!(!printed.contains(secret), "{secret} printed: {printed}");
    }
    assert!(printed.contains("[redacted]"), "{printed}");
}
