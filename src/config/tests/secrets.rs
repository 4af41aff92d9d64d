//! Secrets: `*_file` keys, redaction in Debug, Display and errors.

use super::*;

#[test]
fn registry_password_file_is_read_at_load() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pw = write_temp(&dir, "registry-pw", "from-a-file\n");
    let toml = AVRO.replace(
        "password = \"registry-secret\"",
        &format!("password_file = {:?}", pw.display().to_string()),
    );
    let cfg = Config::from_toml_str(&toml).expect("password_file");
    assert_eq!(registry_password(&cfg), Some("from-a-file"));
    let reg = cfg.audits[0].record.schema_registry.as_ref();
    assert_eq!(reg.and_then(|r| r.password_file.as_ref()), None);
    cfg.validate().expect("a loaded config stays valid");
    let missing = AVRO.replace(
        "password = \"registry-secret\"",
        "password_file = \"/nonexistent/registry-pw\"",
    );
    let e = toml_err(&missing);
    assert_eq!(e.path, "audits[0].record.schema_registry.password_file");
    let ca = AVRO.replace(
        "username = \"auditor\"",
        "username = \"auditor\"\nca_file = \"/nonexistent/ca.pem\"",
    );
    let e = toml_err(&ca);
    assert_err(
        &e,
        "audits[0].record.schema_registry.ca_file",
        "cannot read",
    );
}

#[test]
fn password_and_password_file_are_exclusive() {
    let e = invalid(|c| {
        c.audits[0].sink.password = Some(Secret::new("pw"));
        c.audits[0].sink.password_file = Some("/run/secrets/pw".into());
    });
    assert_err(&e, "audits[0].sink.password_file", "not both");
    let e = invalid(|c| {
        c.audits[0].sink.url = SecretUrl::new("mysql://root:x@127.0.0.1:9030/example_db");
        c.audits[0].sink.password = Some(Secret::new("pw"));
    });
    assert_err(
        &e,
        "audits[0].sink.password",
        "url already carries a password",
    );
}

#[test]
fn secret_files_are_read_and_trimmed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pw = write_temp(&dir, "pw", "s3cret-from-file\n");
    let toml = BASE.replace(
        "table = ",
        &format!("password_file = {:?}\ntable = ", pw.display().to_string()),
    );
    let cfg = Config::from_toml_str(&toml).expect("password_file");
    let sink = &cfg.audits[0].sink;
    assert_eq!(
        sink.password.as_ref().map(Secret::expose),
        Some("s3cret-from-file")
    );
    assert_eq!(sink.password_file, None);
    assert_eq!(sink.effective_username().as_deref(), Some("root"));
    let valid = cfg.validate().expect("a loaded config stays valid");
    // The spec holds the value read, not the file.
    assert_eq!(
        sql_spec(&valid, 0).password,
        Some(SecretSource::Value(Secret::new("s3cret-from-file")))
    );
}

#[test]
fn unreadable_secret_file_names_key_and_path_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-file");
    let toml = BASE.replace(
        "table = ",
        &format!(
            "password_file = {:?}\ntable = ",
            missing.display().to_string()
        ),
    );
    let e = toml_err(&toml);
    assert_eq!(e.path, "audits[0].sink.password_file");
    assert!(e.message.contains(&missing.display().to_string()), "{e}");
    // Invalid UTF-8 content is reported without echoing it.
    let binary = dir.path().join("binary");
    std::fs::write(&binary, [0xff, b'p', b'w']).expect("write");
    let toml = BASE.replace(
        "table = ",
        &format!(
            "password_file = {:?}\ntable = ",
            binary.display().to_string()
        ),
    );
    let e = toml_err(&toml);
    assert_err(&e, "audits[0].sink.password_file", "not valid UTF-8");
    // The path is named (its random temp directory may spell "pw" itself): the content
    // must not be, anywhere else in the message.
    let without_path = e.message.replace(&binary.display().to_string(), "");
    assert!(!without_path.contains("pw"), "{e}");
}

#[test]
fn ca_file_must_exist() {
    let e = toml_err(&BASE.replace("table = ", "ca_file = \"/nonexistent/ca.pem\"\ntable = "));
    assert_err(&e, "audits[0].sink.ca_file", "/nonexistent/ca.pem");
}

/// The rules checked while loading: secret files (unreadable, not UTF-8, empty token)
/// name the key and the file, never the content.
#[test]
fn every_secret_file_rule_names_its_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("missing");
    let binary = dir.path().join("binary");
    std::fs::write(&binary, [0xff, b'h', b'u', b'n']).expect("write");
    let empty = write_temp(&dir, "empty", "\n");
    let m = format!("{:?}", missing.display().to_string());
    let b = format!("{:?}", binary.display().to_string());
    let e = format!("{:?}", empty.display().to_string());
    let sink = |line: String| BASE.replace("table = ", &format!("{line}\ntable = "));
    let es_sink = |line: String| {
        ES_AUDIT
            .replace("elastic:es-url-secret@", "")
            .replace("index = ", &format!("{line}\nindex = "))
    };
    let server = |line: String| BASE.replace("[kafka]", &format!("[server]\n{line}\n[kafka]"));
    let property = |line: String| {
        BASE.replace(
            "[[audits]]",
            &format!("[kafka.property_files]\n{line}\n[[audits]]"),
        )
    };
    let cases: Vec<(String, &str, &str)> = vec![
        (
            sink(format!("password_file = {m}")),
            "audits[0].sink.password_file",
            "cannot read",
        ),
        (
            sink(format!("password_file = {b}")),
            "audits[0].sink.password_file",
            "not valid UTF-8",
        ),
        (
            sink(format!("ca_file = {m}")),
            "audits[0].sink.ca_file",
            "cannot read",
        ),
        (
            format!(
                "[kafka]\nbrokers = \"127.0.0.1:9092\"\n{}",
                es_sink(format!("api_key_file = {m}"))
            ),
            "audits[0].sink.api_key_file",
            "cannot read",
        ),
        (
            property(format!("\"sasl.password\" = {m}")),
            "kafka.property_files[\"sasl.password\"]",
            "cannot read",
        ),
        (
            server(format!("api_token_file = {m}")),
            "server.api_token_file",
            "cannot read",
        ),
        (
            server(format!("api_token_file = {b}")),
            "server.api_token_file",
            "not valid UTF-8",
        ),
        (
            server(format!("api_token_file = {e}")),
            "server.api_token_file",
            "must not be empty",
        ),
    ];
    for (toml, path, needle) in cases {
        let err = toml_err(&toml);
        assert_err(&err, path, needle);
        assert!(!err.message.contains("hun"), "content echoed: {err}");
    }
}

#[test]
fn debug_output_contains_no_secret() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api_key = write_temp(&dir, "key", "es-api-key-secret\n");
    let kafka_pw = write_temp(&dir, "kpw", "kafka-file-secret");
    let toml = format!(
        "{}{}",
        BASE.replace("mysql://root@", "mysql://root:url-secret%21@")
            .replace(
                "[[audits]]",
                &format!(
                    "[kafka.properties]\n\"sasl.password\" = \"sasl-secret\"\n\
                         [kafka.property_files]\n\"ssl.key.password\" = {:?}\n[[audits]]",
                    kafka_pw.display().to_string()
                )
            ),
        ES_AUDIT.replace("elastic:es-url-secret@", "").replace(
            "index =",
            &format!(
                "api_key_file = {:?}\nindex =",
                api_key.display().to_string()
            )
        )
    );
    let mut cfg = Config::from_toml_str(&toml).expect("valid");
    cfg.audits[0].sink.url = SecretUrl::new("mysql://root@127.0.0.1:9030/example_db");
    cfg.audits[0].sink.password = Some(Secret::new("sink-password-secret"));
    cfg.validate().expect("still valid");
    let all = format!("{cfg:?} {:#?}", cfg);
    for secret in [
        "url-secret",
        "sasl-secret",
        "kafka-file-secret",
        "es-api-key-secret",
        "sink-password-secret",
    ] {
        assert!(!all.contains(secret), "{secret} leaked in {all}");
    }
    assert!(all.contains("[redacted]"));
    assert_eq!(
        cfg.kafka.properties["ssl.key.password"].expose(),
        "kafka-file-secret"
    );
    assert_eq!(
        cfg.audits[1].sink.api_key.as_ref().map(Secret::expose),
        Some("es-api-key-secret")
    );
}

/// `server.api_token` from the file (trimmed), from the file key, or from the
/// environment; never in `Debug`; unset by default (the API stays open).
#[test]
fn api_token_sources() {
    assert!(base().server.api_token.is_none());
    let dir = tempfile::tempdir().expect("tempdir");
    let file = write_temp(&dir, "token", "tok-from-file\r\n");
    let server = |line: String| BASE.replace("[kafka]", &format!("[server]\n{line}\n[kafka]"));
    let from_file = Config::from_toml_str(&server(format!(
        "api_token_file = {:?}",
        file.display().to_string()
    )))
    .expect("token file");
    assert_eq!(
        from_file.server.api_token.as_ref().map(Secret::expose),
        Some("tok-from-file")
    );
    assert_eq!(from_file.server.api_token_file, None);
    from_file.validate().expect("a loaded config stays valid");
    let inline =
        Config::from_toml_str(&server("api_token = \"tok-inline\"".into())).expect("inline token");
    assert_eq!(
        inline.server.api_token.as_ref().map(Secret::expose),
        Some("tok-inline")
    );
    let toml_path = write_temp(&dir, "c.toml", BASE);
    let from_env = Config::load_with_env(
        Some(&toml_path),
        env(&[("GAP_AUDITOR__SERVER__API_TOKEN", "tok-from-env")]),
    )
    .expect("env token");
    assert_eq!(
        from_env.server.api_token.as_ref().map(Secret::expose),
        Some("tok-from-env")
    );
    // The environment overrides the file's inline token, as for every key.
    let toml_path = write_temp(
        &dir,
        "c2.toml",
        &server("api_token = \"tok-inline\"".into()),
    );
    let both = Config::load_with_env(
        Some(&toml_path),
        env(&[("GAP_AUDITOR__SERVER__API_TOKEN", "tok-from-env")]),
    )
    .expect("env wins");
    assert_eq!(
        both.server.api_token.as_ref().map(Secret::expose),
        Some("tok-from-env")
    );
    for cfg in [&from_file, &inline, &from_env] {
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("tok-"), "token in Debug: {shown}");
    }
}

#[test]
fn secret_url_redaction() {
    let url = SecretUrl::new("mysql://root:p%40ss@127.0.0.1:9030/example_db");
    assert_eq!(
        url.to_string(),
        "mysql://root:[redacted]@127.0.0.1:9030/example_db"
    );
    assert_eq!(
        format!("{url:?}"),
        "\"mysql://root:[redacted]@127.0.0.1:9030/example_db\""
    );
    assert_eq!(
        url.expose(),
        "mysql://root:p%40ss@127.0.0.1:9030/example_db"
    );
    assert_eq!(url.username().as_deref(), Some("root"));
    assert_eq!(url.password().as_ref().map(Secret::expose), Some("p@ss"));
    assert_eq!(
        url.without_credentials(),
        "mysql://127.0.0.1:9030/example_db"
    );
    assert_eq!(url.scheme().as_deref(), Some("mysql"));
    // Unencoded special characters in the password never leak.
    let odd = SecretUrl::new("mysql://root:pa/ss#x@h:9030/db");
    assert!(!odd.to_string().contains("pa/ss"), "{odd}");
    let plain = SecretUrl::new("http://127.0.0.1:9200");
    assert_eq!(plain.to_string(), "http://127.0.0.1:9200");
    assert_eq!(SecretUrl::new("root:pw@host").to_string(), "[redacted]");
    assert_eq!(format!("{:?}", Secret::new("x")), "[redacted]");
    assert_eq!(Secret::new("x").to_string(), "[redacted]");
}

#[test]
fn validation_errors_do_not_echo_url_passwords() {
    let e = invalid(|c| c.audits[0].sink.url = SecretUrl::new("postgres://u:topsecret@h/db"));
    assert!(!e.to_string().contains("topsecret"));
    let e = invalid(|c| c.audits[0].sink.url = SecretUrl::new("mysql://u:topsecret@:9030/db"));
    assert!(!e.to_string().contains("topsecret"), "{e}");
}
