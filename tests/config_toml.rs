//! The shared config builder (tests/support/config_toml.rs): what it renders, and that
//! the configurations it builds load. Needs no service.

#[path = "support/config_toml.rs"]
mod config_toml;

use config_toml::{AuditToml, ConfigToml, TomlValue};
use gap_auditor::config::Config;

#[test]
fn renders_sections_in_order_with_quoted_values() {
    let text = ConfigToml::new("k:9092")
        .test_group("g")
        .kafka_property("sasl.username", "u")
        .server("listen", "127.0.0.1:0")
        .state_path(std::path::Path::new("/tmp/s"))
        .audit(
            AuditToml::new("a", &["t"])
                .set("batch_size", 100)
                .seed_csv()
                .offset_columns()
                .sql_sink("mysql", "mysql://u@h:3306/d", "x"),
        )
        .render();
    let expected = "
[kafka]
brokers = \"k:9092\"
group_id = \"g\"
start = \"earliest\"
session_timeout = \"6s\"
heartbeat_interval = \"500ms\"
[kafka.properties]
\"sasl.username\" = \"u\"
[server]
listen = \"127.0.0.1:0\"
[state]
path = \"/tmp/s\"
[[audits]]
name = \"a\"
topics = [\"t\"]
batch_size = 100
[audits.record]
format = \"csv\"
delimiter = \"|\"
fields = [\"client_ip\",\"domain\",\"time\",\"target_ip\",\"rcode\",\"query_type\",\"authority_record\",\"add_msg\",\"dns_ip\"]
[audits.record.filter]
field_count = 9
[audits.match]
strategy = \"offset_columns\"
partition_column = \"partition\"
offset_column = \"offset\"
[audits.sink]
kind = \"mysql\"
url = \"mysql://u@h:3306/d\"
table = \"x\"
";
    assert_eq!(text, expected);
}

#[test]
fn strings_are_escaped() {
    assert_eq!("a\"b\\c".toml(), r#""a\"b\\c""#);
}

#[test]
fn built_configs_load() {
    let sql = ConfigToml::new("127.0.0.1:9092")
        .test_group("auditor")
        .audit(
            AuditToml::new("a", &["t"])
                .seed_csv()
                .seed_key_columns()
                .sql_sink("doris", "mysql://root@127.0.0.1:9030/db", "t"),
        )
        .audit(
            AuditToml::new("b", &["t"])
                .record("format", "json")
                .strategy("doc_id")
                .es_sink("http://127.0.0.1:9200", "i"),
        );
    let config = Config::from_toml_str(&sql.render()).expect("the built config loads");
    assert_eq!(config.audits.len(), 2);
    assert_eq!(config.audits[0].record.fields.len(), 9);
    assert_eq!(
        config.audits[0].matching.key,
        ["client_ip", "domain", "time"]
    );
}
