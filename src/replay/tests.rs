use super::*;

/// A one-audit configuration (audit `a` on topic `t`) with these `record`, `match` and
/// `sink` sections.
fn config(record: &str, matching: &str, sink: &str) -> Validated {
    Validated::from_toml_str(&format!(
        "[kafka]\nbrokers = \"k:9092\"\n[[audits]]\nname = \"a\"\ntopics = [\"t\"]\n\
         [audits.record]\n{record}\n[audits.match]\n{matching}\n[audits.sink]\n{sink}\n"
    ))
    .expect("config")
}

#[test]
fn offsets_parse() {
    assert_eq!(parse_offsets("2-3"), Ok((2, 3)));
    assert_eq!(parse_offsets("7"), Ok((7, 7)));
    assert!(parse_offsets("3-2").is_err());
    assert!(parse_offsets("a-b").is_err());
}

#[test]
fn insert_maps_fields_to_columns_and_escapes_values() {
    let cfg = config(
        r#"format = "csv"
delimiter = "|"
fields = ["ip", "domain"]"#,
        r#"strategy = "key_columns"
key = ["ip", "domain"]
columns = ["client_ip", "domain"]"#,
        r#"kind = "mysql"
url = "mysql://u@h:3306/db"
table = "t1""#,
    );
    let r = Record {
        offset: 5,
        key: None,
        value: Some(b"1.2.3.4|o'reilly\\.com\n".to_vec()),
        timestamp: None,
        headers: vec![],
    };
    let target = Target {
        audit: "a".into(),
        tp: TopicPartition::new("t", 0),
        first: 5,
        last: 5,
        gap_id: None,
    };
    let (audit, spec) = cfg.audits().next().expect("one audit");
    let SinkSpec::Sql(sql) = spec else {
        panic!("a mysql sink: {spec:?}");
    };
    let q = insert_statement(audit, &sql.table, &target, &r, false, false).expect("statement");
    assert_eq!(
        q,
        "INSERT INTO `t1` (`client_ip`, `domain`) VALUES ('1.2.3.4', 'o''reilly\\\\.com')"
    );
    // Under presence semantics, an upsert: the key's row takes the replayed values.
    let q = insert_statement(audit, &sql.table, &target, &r, false, true).expect("statement");
    assert_eq!(
        q,
        "INSERT INTO `t1` (`client_ip`, `domain`) VALUES ('1.2.3.4', 'o''reilly\\\\.com') \
         ON DUPLICATE KEY UPDATE `client_ip` = VALUES(`client_ip`), `domain` = VALUES(`domain`)"
    );
}

#[test]
fn to_sink_refuses_schema_registry_formats_up_front() {
    for (kind, url) in [
        ("elasticsearch", "http://es:9200"),
        ("doris", "mysql://u@h:9030/db"),
    ] {
        let target = if kind == "elasticsearch" {
            "index = \"i\""
        } else {
            "table = \"t\""
        };
        let cfg = config(
            r#"format = "avro"
[audits.record.schema_registry]
url = "http://registry:8081""#,
            r#"strategy = "offset_columns""#,
            &format!("kind = \"{kind}\"\nurl = \"{url}\"\n{target}"),
        );
        let (audit, spec) = cfg.audits().next().expect("one audit");
        let e = sink_supported(audit, spec).expect_err("refused");
        assert!(e.to_string().contains("--to-topic"), "{kind}: {e}");
    }
}
