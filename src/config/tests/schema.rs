//! Defaults and the accessors of the configuration tree.

use super::*;

#[test]
fn defaults_are_applied() {
    let cfg = base();
    assert_eq!(cfg.kafka.group_id, "gap-auditor");
    assert_eq!(cfg.kafka.start, StartPosition::Latest);
    assert_eq!(cfg.kafka.isolation_level.as_librdkafka(), "read_committed");
    assert_eq!(cfg.kafka.session_timeout(), Duration::from_secs(10));
    assert_eq!(cfg.kafka.heartbeat_interval(), Duration::from_secs(1));
    assert_eq!(cfg.kafka.statistics_interval(), Duration::from_secs(1));
    assert_eq!(cfg.server.listen, "0.0.0.0:9464".parse().expect("addr"));
    assert_eq!(cfg.state.path, PathBuf::from("./gap-auditor-state"));
    let a = &cfg.audits[0];
    assert_eq!(a.grace, Duration::from_secs(30));
    assert_eq!(a.verify_interval, Duration::from_secs(5));
    assert_eq!(a.give_up_after, Duration::from_secs(86_400));
    assert_eq!(a.batch_size, 1000);
    assert_eq!(a.max_pending, 2_000_000);
    assert!(!a.record.quote);
    assert_eq!(a.matching.partition_column, "partition");
    assert_eq!(a.matching.offset_column, "offset");
    assert_eq!(a.matching.id_template(), DEFAULT_ID_TEMPLATE);
    assert_eq!(a.sink.query_timeout, Duration::from_secs(10));
    let minimal = BASE
        .replace("format = \"csv\"\n", "")
        .replace("delimiter = \"|\"\n", "");
    let cfg = Config::from_toml_str(&minimal).expect("defaults");
    assert_eq!(cfg.audits[0].record.format, RecordFormat::Csv);
    assert_eq!(cfg.audits[0].record.delimiter, ",");
}

#[test]
fn consumer_groups() {
    let cfg = base();
    let a = &cfg.audits[0];
    assert_eq!(a.consumer_group(&cfg.kafka, 1), "gap-auditor");
    assert_eq!(a.consumer_group(&cfg.kafka, 2), "gap-auditor.dns_logs");
    let mut b = a.clone();
    b.group_id = Some("mine".into());
    assert_eq!(b.consumer_group(&cfg.kafka, 2), "mine");
    let e = invalid(|c| c.audits[0].pipeline_group = Some("gap-auditor".into()));
    assert_err(
        &e,
        "audits[0].pipeline_group",
        "never share the pipeline's group",
    );
    let e = invalid(|c| {
        let mut second = c.audits[0].clone();
        second.name = "other".into();
        second.group_id = Some("gap-auditor.dns_logs".into());
        c.audits.push(second);
    });
    assert_err(&e, "audits[1].group_id", "already used by audits[0]");
}
