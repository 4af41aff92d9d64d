//! Unit tests of the configuration, by job; shared fixtures here.

mod deserializers;
mod env;
mod json_schema;
mod loading;
mod pipeline;
mod schema;
mod secrets;
mod spec;
mod validate;
mod validate_table;

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::deserializers::parse_duration_str;
use super::loading::load_from;
use super::*;

const BASE: &str = r#"
[kafka]
brokers = "127.0.0.1:9092"

[[audits]]
name = "dns_logs"
topics = ["test"]
pipeline_group = "FlinkSQLFromKafka2Doris"
[audits.record]
format = "csv"
delimiter = "|"
fields = ["client_ip","domain","time","target_ip","rcode","query_type","authority_record","add_msg","dns_ip"]
[audits.record.filter]
field_count = 9
[audits.match]
strategy = "key_columns"
key = ["client_ip","domain","time"]
[audits.sink]
kind = "doris"
url = "mysql://root@127.0.0.1:9030/example_db"
table = "dns_logs_from_flink01"
"#;

const ES_AUDIT: &str = r#"
[[audits]]
name = "es_logs"
topics = ["test"]
[audits.record]
format = "json"
[audits.match]
strategy = "doc_id"
[audits.sink]
kind = "elasticsearch"
url = "https://elastic:es-url-secret@127.0.0.1:9200"
index = "dns_logs"
"#;

fn base() -> Config {
    match Config::from_toml_str(BASE) {
        Ok(c) => c,
        Err(e) => panic!("base config must validate: {e}"),
    }
}

/// Mutates the valid base config and returns the validation error.
fn invalid(edit: impl FnOnce(&mut Config)) -> ConfigError {
    let mut cfg = base();
    edit(&mut cfg);
    match cfg.validate() {
        Err(e) => e,
        Ok(_) => panic!("expected a validation error"),
    }
}

/// The seed audit on an Avro topic: key fields named by the writer schema.
const AVRO: &str = r#"
[kafka]
brokers = "127.0.0.1:9092"

[[audits]]
name = "dns_avro"
topics = ["dns-avro"]
[audits.record]
format = "avro"
timestamp_format = "iso8601"
[audits.record.schema_registry]
url = "https://registry.example:8081/prefix"
username = "auditor"
password = "registry-secret"
[audits.match]
strategy = "key_columns"
key = ["client_ip", "/geo/country", "time"]
[audits.sink]
kind = "doris"
url = "mysql://root@127.0.0.1:9030/example_db"
table = "dns_logs_from_flink01"
"#;

fn avro() -> Config {
    Config::from_toml_str(AVRO).expect("the avro example is valid")
}

fn invalid_avro(edit: impl FnOnce(&mut Config)) -> ConfigError {
    let mut cfg = avro();
    edit(&mut cfg);
    cfg.validate().expect_err("expected a validation error")
}

/// The schema registry password of the first audit, once loaded.
fn registry_password(c: &Config) -> Option<&str> {
    let registry = c.audits[0].record.schema_registry.as_ref();
    registry
        .and_then(|r| r.password.as_ref())
        .map(Secret::expose)
}

fn registry(c: &mut Config) -> &mut SchemaRegistryConfig {
    c.audits[0]
        .record
        .schema_registry
        .as_mut()
        .expect("registry section")
}

fn toml_err(s: &str) -> ConfigError {
    match Config::from_toml_str(s) {
        Err(e) => e,
        Ok(c) => panic!("expected an error, got {c:?}"),
    }
}

fn assert_err(e: &ConfigError, path: &str, needle: &str) {
    assert_eq!(e.path, path, "wrong path in `{e}`");
    assert!(
        e.message.contains(needle),
        "`{e}` does not mention `{needle}`"
    );
    assert!(e.to_string().starts_with(&format!("{path}: ")));
}

fn env(vars: &[(&str, &str)]) -> Vec<(String, String)> {
    vars.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn write_temp(dir: &tempfile::TempDir, name: &str, content: &str) -> PathBuf {
    let path = dir.path().join(name);
    if let Err(e) = std::fs::write(&path, content) {
        panic!("write {}: {e}", path.display());
    }
    path
}

/// A valid single-audit Elasticsearch config (doc_id, json, basic auth in the url).
fn es_base() -> Config {
    let mut cfg = match Config::from_toml_str(&format!("{BASE}{ES_AUDIT}")) {
        Ok(c) => c,
        Err(e) => panic!("ES base config must validate: {e}"),
    };
    cfg.audits.remove(0);
    let valid = cfg.validate().expect("the ES audit alone stays valid");
    assert!(
        matches!(valid.sinks(), [SinkSpec::Elasticsearch(_)]),
        "{:?}",
        valid.sinks()
    );
    cfg
}

/// The SQL spec of audit `i`.
fn sql_spec(valid: &Validated, i: usize) -> &SqlSinkSpec {
    match &valid.sinks()[i] {
        SinkSpec::Sql(s) => s,
        other => panic!("audits[{i}] is not a SQL sink: {other:?}"),
    }
}

/// The Elasticsearch spec of audit `i`.
fn es_spec(valid: &Validated, i: usize) -> &EsSinkSpec {
    match &valid.sinks()[i] {
        SinkSpec::Elasticsearch(s) => s,
        other => panic!("audits[{i}] is not an Elasticsearch sink: {other:?}"),
    }
}

/// A secret value used in the rules below: no message may echo it.
const SECRET: &str = "hunter2-must-not-appear";

type Edit = Box<dyn FnOnce(&mut Config)>;
