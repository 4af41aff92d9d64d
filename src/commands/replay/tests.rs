use super::*;
use crate::config::Validated;
use crate::ledger::Observed;

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

const CSV: &str = "format = \"csv\"\nfields = [\"ip\", \"domain\"]";
const MYSQL: &str = "kind = \"mysql\"\nurl = \"mysql://u@h:3306/db\"\ntable = \"t1\"";
const ES: &str = "kind = \"elasticsearch\"\nurl = \"http://es:9200\"\nindex = \"i\"";
const DECLARED: &str = "\n[audits.replay]\npipeline_maps_origin = true";

fn to(topic: &str) -> Destination {
    Destination::Topic(topic.to_string())
}

/// The refusal rule of `--to-topic` (SPEC guarantee 11): where Kafka coordinates identify
/// rows, a re-produced record's row confirms the lost one only if the pipeline maps the
/// origin header (declared), and never from a topic the audit reads itself; keys and
/// coordinate-free doc ids survive a re-production; `--to-sink` is never refused here.
#[test]
fn to_topic_is_refused_where_coordinates_identify_rows_and_no_mapping_is_declared() {
    use guard::check_destination;
    let offsets = config(CSV, r#"strategy = "offset_columns""#, MYSQL);
    let audit = &offsets.config().audits[0];
    let e = check_destination(audit, &to("repair")).expect_err("refused");
    assert!(matches!(e, Refusal::OriginNotMapped { .. }), "{e:?}");
    let text = e.to_string();
    for needle in [
        "audit a",
        "offset_columns: `partition`, `offset`",
        "--to-sink",
        "pipeline_maps_origin = true",
        "[audits.replay]",
        "gap-auditor.origin",
    ] {
        assert!(text.contains(needle), "`{needle}` not in: {text}");
    }
    check_destination(audit, &Destination::Sink).expect("to the sink");
    let e = check_destination(audit, &to("t")).expect_err("its own topic");
    assert!(matches!(e, Refusal::AuditedTopic { .. }), "{e:?}");

    let declared = config(
        CSV,
        r#"strategy = "offset_columns""#,
        &format!("{MYSQL}{DECLARED}"),
    );
    let audit = &declared.config().audits[0];
    check_destination(audit, &to("repair")).expect("the pipeline maps the origin");
    let e = check_destination(audit, &to("t")).expect_err("its own topic, even declared");
    assert!(matches!(e, Refusal::AuditedTopic { .. }), "{e:?}");

    let keys = config(CSV, "strategy = \"key_columns\"\nkey = [\"ip\"]", MYSQL);
    let audit = &keys.config().audits[0];
    check_destination(audit, &to("repair")).expect("keys survive a re-production");
    check_destination(audit, &to("t")).expect("the pipeline's input");

    let coordinate_ids = config("format = \"json\"", r#"strategy = "doc_id""#, ES);
    let audit = &coordinate_ids.config().audits[0];
    let e = check_destination(audit, &to("repair")).expect_err("default {topic}+…");
    assert!(
        e.to_string().contains("{topic}+{partition}+{offset}"),
        "{e}"
    );
    let field_ids = config(
        "format = \"json\"",
        "strategy = \"doc_id\"\nid_template = \"{key}-{domain}\"",
        ES,
    );
    let audit = &field_ids.config().audits[0];
    check_destination(audit, &to("repair")).expect("ids without coordinates");
    check_destination(audit, &to("t")).expect("ids without coordinates");
}

/// A second replay of an open gap with a replay mark is refused, naming when and where the
/// first went; `--force`, a dry run, a gap no longer open or never marked pass.
#[test]
fn a_gap_replayed_and_not_confirmed_refuses_a_second_replay_without_force() {
    use crate::gap::{Gap, GapState};
    use chrono::TimeZone;
    use guard::check_again;
    let at = chrono::Utc.with_ymd_and_hms(2026, 12, 5, 10, 0, 0).unwrap();
    let mut gap = Gap {
        id: "a:t:0:2".into(),
        audit: "a".into(),
        topic: "t".into(),
        partition: 0,
        first_offset: 2,
        last_offset: 3,
        missing_records: 2,
        size_known: true,
        first_timestamp: None,
        last_timestamp: None,
        detected_at: at,
        state: GapState::Open,
        unrecoverable_at: None,
        ack_reason: None,
        cause: Default::default(),
        pipeline_commit_from: None,
        pipeline_commit_to: None,
        pipeline_commit_at: None,
        evidence: None,
        shared_key: false,
        replayed_at: None,
    };
    let last = crate::store::ReplayRecord {
        at,
        gap_id: Some(gap.id.clone()),
        audit: "a".into(),
        topic: "t".into(),
        partition: 0,
        first_offset: 2,
        last_offset: 3,
        to_topic: Some("repair".into()),
        dry_run: false,
        forced: false,
        written: 2,
        present: 0,
        filtered: 0,
        failed: 0,
        partial: false,
        error: None,
    };
    let e = check_again(&gap, Some(at), Some(&last), false, false).expect_err("refused");
    let text = e.to_string();
    for needle in [
        "gap a:t:0:2",
        "2026-12-05T10:00:00Z",
        "2 record(s) to topic repair",
        "not confirmed it yet",
        "--force",
    ] {
        assert!(text.contains(needle), "`{needle}` not in: {text}");
    }
    let e = check_again(&gap, Some(at), None, false, false).expect_err("older mark");
    assert!(e.to_string().contains("destination not recorded"), "{e}");
    check_again(&gap, Some(at), Some(&last), true, false).expect("--force");
    check_again(&gap, Some(at), Some(&last), false, true).expect("a dry run");
    check_again(&gap, None, None, false, false).expect("never replayed");
    for state in [
        GapState::Repaired,
        GapState::Late,
        GapState::Acknowledged,
        GapState::Unrecoverable,
    ] {
        gap.state = state;
        check_again(&gap, Some(at), Some(&last), false, false).expect("not open");
    }
    // Dead-lettered: refused up front (the daemon never re-checks it, so never `repaired`),
    // replayed or not; a dry run and --force go on.
    gap.state = GapState::DeadLettered;
    for mark in [None, Some(at)] {
        let e = check_again(&gap, mark, None, false, false).expect_err("dead_lettered");
        assert!(e.to_string().contains("is dead_lettered"), "{e}");
    }
    check_again(&gap, None, None, true, false).expect("--force");
    check_again(&gap, None, None, false, true).expect("a dry run");
}

/// key_columns into a topic the audit reads: refused where the table keeps every row (the
/// copy is a second record of the key), accepted where one row confirms every record of
/// its key (presence) and for a repair topic the audit does not read.
#[test]
fn to_the_audited_topic_is_refused_for_multiset_keys_only() {
    use crate::key_semantics::KeySemantics;
    use guard::check_audited_keys;
    let keys = config(CSV, "strategy = \"key_columns\"\nkey = [\"ip\"]", MYSQL);
    let audit = &keys.config().audits[0];
    let e = check_audited_keys(audit, &to("t"), KeySemantics::Multiset).expect_err("refused");
    assert!(matches!(e, Refusal::AuditedTopicKeys { .. }), "{e:?}");
    assert!(e.to_string().contains("--to-sink"), "{e}");
    check_audited_keys(audit, &to("t"), KeySemantics::Presence).expect("presence");
    check_audited_keys(audit, &to("repair"), KeySemantics::Multiset).expect("repair topic");
    check_audited_keys(audit, &Destination::Sink, KeySemantics::Multiset).expect("sink");
}

/// Review (issue 34 item 8 in `replay`): a stored ledger item of this partition that is
/// JSON but not a ledger item (the daemon's item-by-item read leaves it out and says so)
/// made replay read the whole ledger as empty: the gap's own missing record counted as one
/// the daemon had confirmed, another record's row of its key looked free, and the replay
/// skipped the lost record as "already in the sink". Now this partition's unreadable
/// state refuses the replay, as the other unreadable forms do.
#[test]
fn a_partition_item_of_the_wrong_shape_refuses_rather_than_guessing_claims() {
    use crate::store::{KeyClaims, PartitionProgress};
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let key = crate::types::Key::new(["1.2.3.4", "a.com"]);
    let gap = |o: i64| {
        json!({"first": o, "last": o, "missing": 1, "size_known": true,
               "min_ts": null, "max_ts": null, "detected_ms": 1})
    };
    let ledger = json!({
        "missing": [
            {"run": {"first": 3, "last": 3}, "gap": 3, "detected_ms": 1, "keys": [key.clone()]},
            {"run": {"first": 7, "last": 7}, "gap": 7, "detected_ms": 1, "keys": [key.clone()]}
        ],
        "gaps": [gap(3), gap(7)]
    });
    let row = PartitionProgress {
        topic: "t".into(),
        partition: 0,
        settled: 10,
        ledger,
        updated_at: chrono::Utc::now(),
        items: None,
    };
    // Offset 1, outside the range, holds the key's one row.
    let claims = [(key.as_bytes().to_vec(), 1u64)];
    store
        .commit_round_with_keys("a", &[], &[row], KeyClaims::Changes(&claims))
        .unwrap();
    let target = Target {
        audit: "a".into(),
        tp: TopicPartition::new("t", 0),
        first: 3,
        last: 3,
        gap_id: None,
    };
    let mut ledger = PartitionLedger::new(3, true);
    ledger.ingest(
        3,
        None,
        Observed::Expected {
            key: Some(key.clone()),
        },
        0,
    );
    let intact = claims_outside(&store, "a", &target, &ledger).unwrap();
    assert_eq!(
        intact,
        vec![(key.clone(), 1)],
        "offset 1's claim stays held"
    );

    // Another connection to the file, as a damaged file or an older writer would leave it.
    let changed = rusqlite::Connection::open(store.path())
        .unwrap()
        .execute(
            "UPDATE ledger_items SET body = '{\"run\": \"not a run\"}' \
             WHERE partition = 0 AND first = 7 AND kind = 0",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    match claims_outside(&store, "a", &target, &ledger) {
        Err(crate::store::StoreError::Corrupt { what, .. }) => {
            assert!(what.contains("a/t-0"), "{what}")
        }
        other => panic!("guessed instead of refusing: {other:?}"),
    }
}

/// `replay --gap` of a gap found on an earlier log of its partition (review of issue 34 item
/// 7): the log was truncated or the topic recreated since, so its offsets now name other
/// records. Replaying them would write the new log's records as the repair of the old loss
/// (a duplicate row that may confirm another record that is really missing). Refused with the
/// reason; a gap of the current log is resolved as before.
#[test]
fn a_gap_of_an_earlier_log_of_its_partition_is_not_replayed() {
    use crate::gap::{Gap, GapState};
    use crate::store::{PartitionProgress, Store};
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("store");
    let gap = |first: i64, epoch: u32| Gap {
        id: Gap::make_id_in("a", "t", 0, first, epoch),
        audit: "a".into(),
        topic: "t".into(),
        partition: 0,
        first_offset: first,
        last_offset: first,
        missing_records: 1,
        size_known: true,
        first_timestamp: None,
        last_timestamp: None,
        detected_at: chrono::Utc::now(),
        state: GapState::Acknowledged,
        unrecoverable_at: None,
        ack_reason: Some("known".into()),
        cause: Default::default(),
        pipeline_commit_from: None,
        pipeline_commit_to: None,
        pipeline_commit_at: None,
        evidence: None,
        shared_key: false,
        replayed_at: None,
    };
    let progress = PartitionProgress {
        topic: "t".into(),
        partition: 0,
        settled: 10,
        ledger: serde_json::json!({"tail_gap": null, "epoch": 1, "topic_id": "B"}),
        updated_at: chrono::Utc::now(),
        items: None,
    };
    store
        .commit_round("a", &[gap(8, 0), gap(9, 1)], &[progress])
        .expect("commit");
    let e = target_of_gap(&store, "a:t:0:8").expect_err("an earlier log's gap");
    let text = format!("{e:#}");
    assert!(text.contains("truncated or recreated"), "{text}");
    let t = target_of_gap(&store, "a:t:0:9@1").expect("a gap of the current log");
    assert_eq!((t.first, t.last), (9, 9));
}
