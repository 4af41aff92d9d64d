use super::*;

#[test]
fn offsets_parse() {
    assert_eq!(parse_offsets("2-3"), Ok((2, 3)));
    assert_eq!(parse_offsets("7"), Ok((7, 7)));
    assert!(parse_offsets("3-2").is_err());
    assert!(parse_offsets("a-b").is_err());
}

#[test]
fn insert_maps_fields_to_columns_and_escapes_values() {
    let cfg = Config::from_toml_str(
        r#"
[kafka]
brokers = "k:9092"
[[audits]]
name = "a"
topics = ["t"]
[audits.record]
format = "csv"
delimiter = "|"
fields = ["ip", "domain"]
[audits.match]
strategy = "key_columns"
key = ["ip", "domain"]
columns = ["client_ip", "domain"]
[audits.sink]
kind = "mysql"
url = "mysql://u@h:3306/db"
table = "t1"
"#,
    )
    .expect("config");
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
    let q = insert_statement(&cfg.audits[0], &target, &r, false).expect("statement");
    assert_eq!(
        q,
        "INSERT INTO `t1` (`client_ip`, `domain`) VALUES ('1.2.3.4', 'o''reilly\\\\.com')"
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
        let cfg = Config::from_toml_str(&format!(
            r#"
[kafka]
brokers = "k:9092"
[[audits]]
name = "a"
topics = ["t"]
[audits.record]
format = "avro"
[audits.record.schema_registry]
url = "http://registry:8081"
[audits.match]
strategy = "offset_columns"
[audits.sink]
kind = "{kind}"
url = "{url}"
{target}
"#
        ))
        .expect("config");
        let e = sink_supported(&cfg.audits[0]).expect_err("refused");
        assert!(e.to_string().contains("--to-topic"), "{kind}: {e}");
    }
}
