//! Every validation rule in one table, each naming its key.

use super::*;

/// Issue 8, item 7: every rule of [`Config::validate`] (and of the secret files read at
/// load, below), each with the key path its message must name and a word of the
/// message. Each edit breaks exactly one rule of a valid config, so the path proves the
/// rule fired, not an earlier one. Keep this table in step with the validation code:
/// a new rule without a row here is a rule nobody checked names its key.
#[test]
fn every_validation_rule_names_its_key() {
    fn doris(edit: impl FnOnce(&mut Config) + 'static) -> (bool, Edit) {
        (false, Box::new(edit))
    }
    fn es(edit: impl FnOnce(&mut Config) + 'static) -> (bool, Edit) {
        (true, Box::new(edit))
    }
    fn second_audit(c: &mut Config, name: &str, group: Option<&str>) {
        let mut a = c.audits[0].clone();
        a.name = name.into();
        a.group_id = group.map(str::to_owned);
        c.audits.push(a);
    }
    let days30 = Duration::from_secs(30 * 86_400);
    let offsets = |c: &mut Config| c.audits[0].matching.strategy = MatchStrategy::OffsetColumns;
    let rules: Vec<(&str, &str, (bool, Edit))> = vec![
        // ---- top level and [kafka]
        ("audits", "at least one", doris(|c| c.audits.clear())),
        (
            "kafka.brokers",
            "is required",
            doris(|c| c.kafka.brokers = " ".into()),
        ),
        (
            "kafka.brokers",
            "empty entry",
            doris(|c| c.kafka.brokers = "a:1,,b:2".into()),
        ),
        (
            "kafka.group_id",
            "must not be empty",
            doris(|c| c.kafka.group_id = " ".into()),
        ),
        (
            "kafka.session_timeout",
            "at least 1ms",
            doris(|c| c.kafka.session_timeout = Some(Duration::ZERO)),
        ),
        (
            "kafka.session_timeout",
            "too long",
            doris(move |c| c.kafka.session_timeout = Some(days30)),
        ),
        (
            "kafka.heartbeat_interval",
            "at least 1ms",
            doris(|c| c.kafka.heartbeat_interval = Some(Duration::ZERO)),
        ),
        (
            "kafka.heartbeat_interval",
            "too long",
            doris(move |c| c.kafka.heartbeat_interval = Some(days30)),
        ),
        (
            "kafka.statistics_interval",
            "at least 1ms",
            doris(|c| c.kafka.statistics_interval = Some(Duration::ZERO)),
        ),
        (
            "kafka.statistics_interval",
            "too long",
            doris(move |c| c.kafka.statistics_interval = Some(days30)),
        ),
        (
            "kafka.heartbeat_interval",
            "shorter than kafka.session_timeout",
            doris(|c| c.kafka.heartbeat_interval = Some(c.kafka.session_timeout())),
        ),
        (
            "kafka.properties[\" \"]",
            "must not be empty",
            doris(|c| {
                c.kafka.properties.insert(" ".into(), SECRET.into());
            }),
        ),
        (
            "kafka.properties[\"GROUP.ID\"]",
            "managed by gap-auditor",
            doris(|c| {
                c.kafka.properties.insert("GROUP.ID".into(), SECRET.into());
            }),
        ),
        (
            "kafka.properties[\"session.timeout.ms\"]",
            "also set as kafka.session_timeout",
            doris(|c| {
                c.kafka.session_timeout = Some(Duration::from_secs(6));
                c.kafka
                    .properties
                    .insert("session.timeout.ms".into(), "6000".into());
            }),
        ),
        (
            "kafka.properties[\"heartbeat.interval.ms\"]",
            "whole number of milliseconds",
            doris(|c| {
                c.kafka
                    .properties
                    .insert("heartbeat.interval.ms".into(), SECRET.into());
            }),
        ),
        (
            "kafka.properties[\"statistics.interval.ms\"]",
            "at least 1ms",
            doris(|c| {
                c.kafka
                    .properties
                    .insert("statistics.interval.ms".into(), "0".into());
            }),
        ),
        (
            "kafka.properties[\"heartbeat.interval.ms\"]",
            "shorter than kafka.properties[\"session.timeout.ms\"]",
            doris(|c| {
                let p = &mut c.kafka.properties;
                p.insert("session.timeout.ms".into(), "3000".into());
                p.insert("heartbeat.interval.ms".into(), "3000".into());
            }),
        ),
        (
            "kafka.property_files[\"session.timeout.ms\"]",
            "is not a secret",
            doris(|c| {
                c.kafka
                    .property_files
                    .insert("session.timeout.ms".into(), "/f".into());
            }),
        ),
        (
            "kafka.property_files[\"bootstrap.servers\"]",
            "use kafka.brokers",
            doris(|c| {
                c.kafka
                    .property_files
                    .insert("bootstrap.servers".into(), "/f".into());
            }),
        ),
        (
            "kafka.property_files[\"sasl.password\"]",
            "also set in kafka.properties",
            doris(|c| {
                c.kafka
                    .properties
                    .insert("sasl.password".into(), SECRET.into());
                c.kafka
                    .property_files
                    .insert("sasl.password".into(), "/f".into());
            }),
        ),
        // ---- [server]
        (
            "server.api_token_file",
            "not both",
            doris(|c| {
                c.server.api_token = Some(SECRET.into());
                c.server.api_token_file = Some("/run/secrets/token".into());
            }),
        ),
        (
            "server.api_token",
            "must not be empty",
            doris(|c| c.server.api_token = Some("".into())),
        ),
        (
            "server.api_token",
            "printable ASCII",
            doris(|c| c.server.api_token = Some(format!("{SECRET} x").into())),
        ),
        (
            "server.api_token",
            "printable ASCII",
            doris(|c| c.server.api_token = Some(format!("{SECRET}é").into())),
        ),
        // ---- [state]
        (
            "state.path",
            "must not be empty",
            doris(|c| c.state.path = PathBuf::new()),
        ),
        (
            "state.handover_topic",
            "not a valid topic name",
            doris(|c| c.state.handover_topic = Some("a b".into())),
        ),
        (
            "state.handover_topic",
            "audited by audits[0]",
            doris(|c| c.state.handover_topic = Some("test".into())),
        ),
        // ---- [[audits]] across entries
        (
            "audits[1].name",
            "duplicate audit name",
            doris(|c| second_audit(c, "dns_logs", Some("g2"))),
        ),
        (
            "audits[0].pipeline_group",
            "never share the pipeline's group",
            doris(|c| c.audits[0].pipeline_group = Some("gap-auditor".into())),
        ),
        (
            "audits[1].group_id",
            "already used by audits[0]",
            doris(|c| second_audit(c, "other", Some("gap-auditor.dns_logs"))),
        ),
        // ---- one audit
        (
            "audits[0].name",
            "is required",
            doris(|c| c.audits[0].name = String::new()),
        ),
        (
            "audits[0].name",
            "not a valid audit name",
            doris(|c| c.audits[0].name = "dns logs".into()),
        ),
        (
            "audits[0].topics",
            "at least one topic",
            doris(|c| c.audits[0].topics.clear()),
        ),
        (
            "audits[0].topics[0]",
            "must not be empty",
            doris(|c| c.audits[0].topics[0] = String::new()),
        ),
        (
            "audits[0].topics[0]",
            "longer than 249",
            doris(|c| c.audits[0].topics[0] = "t".repeat(250)),
        ),
        (
            "audits[0].topics[0]",
            "not a valid topic name",
            doris(|c| c.audits[0].topics[0] = "..".into()),
        ),
        (
            "audits[0].topics[0]",
            "not a valid topic name",
            doris(|c| c.audits[0].topics[0] = "a/b".into()),
        ),
        (
            "audits[0].topics[1]",
            "duplicate topic",
            doris(|c| c.audits[0].topics.push("test".into())),
        ),
        (
            "audits[0].verify_interval",
            "> 0",
            doris(|c| c.audits[0].verify_interval = Duration::ZERO),
        ),
        (
            "audits[0].stall_after",
            "> 0",
            doris(|c| c.audits[0].stall_after = Duration::ZERO),
        ),
        (
            "audits[0].give_up_after",
            "> 0",
            doris(|c| c.audits[0].give_up_after = Duration::ZERO),
        ),
        (
            "audits[0].batch_size",
            "between 1 and 100000",
            doris(|c| c.audits[0].batch_size = 0),
        ),
        (
            "audits[0].batch_size",
            "between 1 and 100000",
            doris(|c| c.audits[0].batch_size = 100_001),
        ),
        (
            "audits[0].max_pending",
            "at least batch_size",
            doris(|c| c.audits[0].max_pending = 999),
        ),
        // ---- [audits.record]
        (
            "audits[0].record.fields[1]",
            "must not be empty",
            doris(|c| c.audits[0].record.fields[1] = " ".into()),
        ),
        (
            "audits[0].record.fields[1]",
            "duplicate field",
            doris(|c| c.audits[0].record.fields[1] = "client_ip".into()),
        ),
        (
            "audits[0].record.fields",
            "needs the column names",
            doris(|c| c.audits[0].record.fields.clear()),
        ),
        (
            "audits[0].record.delimiter",
            "exactly one character",
            doris(|c| c.audits[0].record.delimiter = "||".into()),
        ),
        (
            "audits[0].record.delimiter",
            "exactly one character",
            doris(|c| c.audits[0].record.delimiter = String::new()),
        ),
        (
            "audits[0].record.delimiter",
            "line break",
            doris(|c| c.audits[0].record.delimiter = "\r".into()),
        ),
        (
            "audits[0].record.delimiter",
            "quote = true",
            doris(|c| {
                c.audits[0].record.delimiter = "\"".into();
                c.audits[0].record.quote = true;
            }),
        ),
        (
            "audits[0].record.filter.field_count",
            "> 0",
            doris(|c| c.audits[0].record.filter.field_count = Some(0)),
        ),
        (
            "audits[0].record.filter.field_count",
            "less than the 9 names",
            doris(|c| c.audits[0].record.filter.field_count = Some(5)),
        ),
        (
            "audits[0].record.filter.min_fields",
            "> 0",
            doris(|c| c.audits[0].record.filter.min_fields = Some(0)),
        ),
        (
            "audits[0].record.filter.min_fields",
            "more than field_count",
            doris(|c| c.audits[0].record.filter.min_fields = Some(10)),
        ),
        (
            "audits[0].record.filter.require[0]",
            "must not be empty",
            doris(|c| c.audits[0].record.filter.require = vec![" ".into()]),
        ),
        (
            "audits[0].record.filter.require[0]",
            "is not in audits[0].record.fields",
            doris(|c| c.audits[0].record.filter.require = vec!["nope".into()]),
        ),
        // ---- [audits.match]
        (
            "audits[0].match.key",
            "at least one record field",
            doris(|c| {
                c.audits[0].matching.key.clear();
                c.audits[0].matching.columns.clear();
            }),
        ),
        (
            "audits[0].match.key[1]",
            "must not be empty",
            doris(|c| c.audits[0].matching.key[1] = " ".into()),
        ),
        (
            "audits[0].match.key[2]",
            "is not in audits[0].record.fields",
            doris(|c| c.audits[0].matching.key[2] = "timestamp".into()),
        ),
        (
            "audits[0].match.columns",
            "has 2 entries but match.key has 3",
            doris(|c| c.audits[0].matching.columns = vec!["a".into(), "b".into()]),
        ),
        (
            "audits[0].match.columns[0]",
            "must not be empty",
            doris(|c| c.audits[0].matching.columns[0] = String::new()),
        ),
        (
            "audits[0].match.columns[1]",
            "not a usable identifier",
            doris(|c| c.audits[0].matching.columns[1] = "a`b".into()),
        ),
        (
            "audits[0].match.columns[2]",
            "not a usable identifier",
            doris(|c| c.audits[0].matching.columns[2] = "a\nb".into()),
        ),
        (
            "audits[0].match.partition_column",
            "must not be empty",
            doris(move |c| {
                offsets(c);
                c.audits[0].matching.partition_column = String::new();
            }),
        ),
        (
            "audits[0].match.offset_column",
            "not a usable identifier",
            doris(move |c| {
                offsets(c);
                c.audits[0].matching.offset_column = "o`".into();
            }),
        ),
        (
            "audits[0].match.topic_column",
            "not a usable identifier",
            doris(move |c| {
                offsets(c);
                c.audits[0].matching.topic_column = Some("t\tx".into());
            }),
        ),
        (
            "audits[0].match.topic_column",
            "more than one topic",
            doris(move |c| {
                offsets(c);
                c.audits[0].topics.push("test2".into());
            }),
        ),
        (
            "audits[0].match.strategy",
            "needs sink.kind = elasticsearch",
            doris(|c| c.audits[0].matching.strategy = MatchStrategy::DocId),
        ),
        (
            "audits[0].match.id_template",
            "without a matching `}`",
            es(|c| c.audits[0].matching.id_template = Some("{offset".into())),
        ),
        (
            "audits[0].match.id_template",
            "without a matching `{`",
            es(|c| c.audits[0].matching.id_template = Some("offset}".into())),
        ),
        (
            "audits[0].match.id_template",
            "empty or nested",
            es(|c| c.audits[0].matching.id_template = Some("a{}".into())),
        ),
        (
            "audits[0].match.id_template",
            "at least one placeholder",
            es(|c| c.audits[0].matching.id_template = Some("constant".into())),
        ),
        (
            "audits[0].match.id_template",
            "placeholder {b} is neither",
            es(|c| {
                c.audits[0].record.format = RecordFormat::Csv;
                c.audits[0].record.fields = vec!["a".into()];
                c.audits[0].matching.id_template = Some("{a}-{b}".into());
            }),
        ),
        // ---- [audits.sink], every kind
        (
            "audits[0].sink.url",
            "not a valid URL",
            doris(|c| c.audits[0].sink.url = SecretUrl::new(format!("{SECRET}@nowhere"))),
        ),
        (
            "audits[0].sink.url",
            "scheme must be mysql, http or https (got `ftp`)",
            doris(|c| c.audits[0].sink.url = SecretUrl::new(format!("ftp://u:{SECRET}@h/db"))),
        ),
        (
            "audits[0].sink.url",
            "kind doris needs mysql://",
            doris(|c| {
                c.audits[0].sink.url = SecretUrl::new(format!("http://u:{SECRET}@h:9030/db"))
            }),
        ),
        (
            "audits[0].sink.url",
            "kind elasticsearch needs http",
            es(|c| c.audits[0].sink.url = SecretUrl::new(format!("mysql://u:{SECRET}@h:9030/db"))),
        ),
        (
            "audits[0].sink.url",
            "has no host",
            doris(|c| c.audits[0].sink.url = SecretUrl::new("mysql:example_db")),
        ),
        (
            "audits[0].sink.username",
            "differs from the user name in the url",
            doris(|c| c.audits[0].sink.username = Some("other".into())),
        ),
        (
            "audits[0].sink.password_file",
            "not both",
            doris(|c| {
                c.audits[0].sink.password = Some(SECRET.into());
                c.audits[0].sink.password_file = Some("/run/secrets/pw".into());
            }),
        ),
        (
            "audits[0].sink.password",
            "url already carries a password",
            doris(|c| {
                c.audits[0].sink.url = SecretUrl::new(format!("mysql://root:{SECRET}@h:9030/db"));
                c.audits[0].sink.password = Some(SECRET.into());
            }),
        ),
        (
            "audits[0].sink.password_file",
            "url already carries a password",
            doris(|c| {
                c.audits[0].sink.url = SecretUrl::new(format!("mysql://root:{SECRET}@h:9030/db"));
                c.audits[0].sink.password_file = Some("/run/secrets/pw".into());
            }),
        ),
        (
            "audits[0].sink.api_key_file",
            "not both",
            es(|c| {
                c.audits[0].sink.api_key = Some(SECRET.into());
                c.audits[0].sink.api_key_file = Some("/run/secrets/key".into());
            }),
        ),
        (
            "audits[0].sink.query_timeout",
            "> 0",
            doris(|c| c.audits[0].sink.query_timeout = Duration::ZERO),
        ),
        (
            "audits[0].sink.index",
            "applies to elasticsearch",
            doris(|c| c.audits[0].sink.index = Some("i".into())),
        ),
        (
            "audits[0].sink.api_key",
            "elasticsearch only",
            doris(|c| c.audits[0].sink.api_key = Some(SECRET.into())),
        ),
        (
            "audits[0].sink.api_key",
            "elasticsearch only",
            doris(|c| c.audits[0].sink.api_key_file = Some("/run/secrets/key".into())),
        ),
        (
            "audits[0].sink.table",
            "is required for kind doris",
            doris(|c| c.audits[0].sink.table = None),
        ),
        (
            "audits[0].sink.table",
            "`table` or `database.table`",
            doris(|c| c.audits[0].sink.table = Some("a.b.c".into())),
        ),
        (
            "audits[0].sink.table",
            "not a usable identifier",
            doris(|c| c.audits[0].sink.table = Some("db.t`".into())),
        ),
        (
            "audits[0].sink.table",
            "names no database",
            doris(|c| {
                c.audits[0].sink.url = SecretUrl::new(format!("mysql://root:{SECRET}@h:9030"))
            }),
        ),
        (
            "audits[0].sink.url",
            "not the url parameter `require_ssl`",
            doris(|c| {
                c.audits[0].sink.url =
                    SecretUrl::new("mysql://root@127.0.0.1:9030/db?require_ssl=true")
            }),
        ),
        (
            "audits[0].sink.ca_file",
            "tls is \"disabled\"",
            doris(|c| {
                c.audits[0].sink.ca_file = Some("/ca.pem".into());
                c.audits[0].sink.tls = Some(SinkTls::Disabled);
            }),
        ),
        (
            "audits[0].sink.ca_file",
            "does not verify the server",
            doris(|c| {
                c.audits[0].sink.ca_file = Some("/ca.pem".into());
                c.audits[0].sink.tls = Some(SinkTls::Required);
            }),
        ),
        (
            "audits[0].sink.client_identity_file",
            "needs audits[0].sink.tls",
            doris(|c| c.audits[0].sink.client_identity_file = Some("/id.p12".into())),
        ),
        (
            "audits[0].sink.client_identity_password",
            "without client_identity_file",
            doris(|c| {
                c.audits[0].sink.tls = Some(SinkTls::Required);
                c.audits[0].sink.client_identity_password = Some(SECRET.into());
            }),
        ),
        (
            "audits[0].sink.tls",
            "applies to doris/mysql",
            es(|c| c.audits[0].sink.tls = Some(SinkTls::VerifyCa)),
        ),
        (
            "audits[0].sink.client_identity_file",
            "applies to doris/mysql",
            es(|c| c.audits[0].sink.client_identity_file = Some("/id.p12".into())),
        ),
        (
            "audits[0].sink.stream_load_url",
            "applies to kind doris only",
            doris(|c| {
                c.audits[0].sink.kind = SinkKind::Mysql;
                c.audits[0].sink.stream_load_url = Some("http://fe:8030".into());
            }),
        ),
        (
            "audits[0].sink.stream_load_url",
            "not a valid URL",
            doris(|c| c.audits[0].sink.stream_load_url = Some("//fe:8030".into())),
        ),
        (
            "audits[0].sink.stream_load_url",
            "scheme must be http or https",
            doris(|c| c.audits[0].sink.stream_load_url = Some("ftp://fe:8030".into())),
        ),
        (
            "audits[0].sink.stream_load_url",
            "must not carry credentials",
            doris(|c| {
                c.audits[0].sink.stream_load_url = Some(format!("http://u:{SECRET}@fe:8030"))
            }),
        ),
        (
            "audits[0].sink.table",
            "kind elasticsearch uses `index`",
            es(|c| c.audits[0].sink.table = Some("t".into())),
        ),
        (
            "audits[0].sink.stream_load_url",
            "applies to kind doris only",
            es(|c| c.audits[0].sink.stream_load_url = Some("http://fe:8030".into())),
        ),
        (
            "audits[0].sink.index",
            "is required for kind elasticsearch",
            es(|c| c.audits[0].sink.index = None),
        ),
        (
            "audits[0].sink.index",
            "not a valid index name",
            es(|c| c.audits[0].sink.index = Some("Logs".into())),
        ),
        (
            "audits[0].sink.index",
            "not a valid index name",
            es(|c| c.audits[0].sink.index = Some("_x".into())),
        ),
        (
            "audits[0].sink.index",
            "not a valid index name",
            es(|c| c.audits[0].sink.index = Some("a b".into())),
        ),
        (
            "audits[0].sink.api_key",
            "either api_key or username/password",
            es(|c| c.audits[0].sink.api_key = Some(SECRET.into())),
        ),
        (
            "audits[0].sink.password",
            "needs a username",
            es(|c| {
                c.audits[0].sink.url = SecretUrl::new("https://127.0.0.1:9200");
                c.audits[0].sink.password = Some(SECRET.into());
            }),
        ),
        (
            "audits[0].sink.password_file",
            "needs a username",
            es(|c| {
                c.audits[0].sink.url = SecretUrl::new("https://127.0.0.1:9200");
                c.audits[0].sink.password_file = Some("/run/secrets/pw".into());
            }),
        ),
        (
            "audits[0].sink.url",
            "needs a username",
            es(|c| c.audits[0].sink.url = SecretUrl::new(format!("https://:{SECRET}@h:9200"))),
        ),
    ];
    let count = rules.len();
    for (path, needle, (on_es, edit)) in rules {
        let mut cfg = if on_es { es_base() } else { base() };
        edit(&mut cfg);
        let e = match cfg.validate() {
            Err(e) => e,
            Ok(_) => panic!("rule for {path} ({needle}) did not fire"),
        };
        assert_err(&e, path, needle);
        assert!(!e.to_string().contains(SECRET), "secret echoed: {e}");
    }
    eprintln!("{count} validation rules checked");
}
