use super::*;

fn keys() -> Vec<String> {
    ["client_ip", "domain", "time"].map(String::from).to_vec()
}

fn idx(rows: &[(&str, &str)]) -> Vec<(String, String)> {
    rows.iter()
        .map(|(i, c)| ((*i).to_owned(), (*c).to_owned()))
        .collect()
}

#[test]
fn a_primary_key_on_the_key_columns_is_presence() {
    let m = from_unique_indexes(
        &keys(),
        &idx(&[
            ("PRIMARY", "client_ip"),
            ("PRIMARY", "domain"),
            ("PRIMARY", "time"),
        ]),
    );
    assert_eq!(m.semantics, KeySemantics::Presence);
    assert!(m.reason.contains("PRIMARY KEY"), "{}", m.reason);
}

#[test]
fn a_unique_index_on_a_subset_of_the_key_columns_is_presence() {
    // Rows with equal (client_ip, domain, time) have equal (domain): merged.
    let m = from_unique_indexes(&keys(), &idx(&[("u_domain", "DOMAIN")]));
    assert_eq!(m.semantics, KeySemantics::Presence);
    assert!(m.reason.contains("u_domain"), "{}", m.reason);
}

#[test]
fn a_unique_index_with_a_column_outside_the_key_is_multiset() {
    // An auto-increment id, or a unique key that also names `answer`: rows with one audit
    // key are all kept.
    let m = from_unique_indexes(
        &keys(),
        &idx(&[
            ("PRIMARY", "id"),
            ("u", "client_ip"),
            ("u", "domain"),
            ("u", "time"),
            ("u", "answer"),
        ]),
    );
    assert_eq!(m.semantics, KeySemantics::Multiset);
}

#[test]
fn no_unique_index_is_multiset() {
    assert_eq!(
        from_unique_indexes(&keys(), &[]).semantics,
        KeySemantics::Multiset
    );
}

/// Doris's documented `SHOW CREATE TABLE` text (data model pages).
const DORIS_UNIQUE: &str = "CREATE TABLE `dns_log` (\n  `client_ip` varchar(64) NOT NULL,\n  \
`domain` varchar(255) NOT NULL,\n  `time` datetime NOT NULL,\n  `answer` text NULL\n\
) ENGINE=OLAP\nUNIQUE KEY(`client_ip`, `domain`, `time`)\nCOMMENT 'OLAP'\n\
DISTRIBUTED BY HASH(`client_ip`) BUCKETS 10\nPROPERTIES (\n\
\"replication_allocation\" = \"tag.location.default: 1\",\n\
\"enable_unique_key_merge_on_write\" = \"true\"\n);";

#[test]
fn doris_unique_key_is_presence() {
    let m = from_doris_ddl(&keys(), DORIS_UNIQUE).expect("a key model");
    assert_eq!(m.semantics, KeySemantics::Presence);
    assert_eq!(m.reason, "Doris UNIQUE KEY(client_ip, domain, time)");
}

#[test]
fn doris_aggregate_key_is_presence() {
    let ddl = "CREATE TABLE `example_tbl_agg1` (\n  `user_id` largeint(40) NOT NULL COMMENT \"user id\",\n  \
`date` date NOT NULL,\n  `cost` bigint(20) SUM NULL DEFAULT \"0\"\n) ENGINE=OLAP\n\
AGGREGATE KEY(`user_id`, `date`)\nDISTRIBUTED BY HASH(`user_id`) BUCKETS 1";
    let keys = ["user_id", "date"].map(String::from).to_vec();
    let m = from_doris_ddl(&keys, ddl).expect("a key model");
    assert_eq!(m.semantics, KeySemantics::Presence);
}

#[test]
fn doris_duplicate_key_is_multiset() {
    let ddl = DORIS_UNIQUE.replace("UNIQUE KEY", "DUPLICATE KEY");
    let m = from_doris_ddl(&keys(), &ddl).expect("a key model");
    assert_eq!(m.semantics, KeySemantics::Multiset);
}

#[test]
fn doris_unique_key_beyond_the_key_columns_is_multiset() {
    let ddl = DORIS_UNIQUE.replace("`time`)", "`time`, `answer`)");
    let m = from_doris_ddl(&keys(), &ddl).expect("a key model");
    assert_eq!(m.semantics, KeySemantics::Multiset);
    assert!(m.reason.contains("not within"), "{}", m.reason);
}

#[test]
fn words_in_comments_and_names_do_not_decide() {
    let ddl = "CREATE TABLE `t` (\n  `unique` int COMMENT 'UNIQUE KEY(a)',\n  \
`key` int -- AGGREGATE KEY(x)\n) ENGINE=OLAP /* UNIQUE KEY(y) */\nDUPLICATE KEY(`unique`)";
    let keys = ["unique"].map(String::from).to_vec();
    let m = from_doris_ddl(&keys, ddl).expect("a key model");
    assert_eq!(m.semantics, KeySemantics::Multiset);
    assert!(from_doris_ddl(&keys, "CREATE TABLE t (a int)").is_none());
}

#[test]
fn a_mysql_ddl_is_no_doris_key_model() {
    // What a MySQL-protocol server that is not Doris answers: its unique index is not a
    // Doris UNIQUE KEY model (the sink reads it from information_schema instead).
    let ddl = "CREATE TABLE `t` (\n  `client_ip` varchar(64) NOT NULL,\n  \
`domain` varchar(512) NOT NULL,\n  `time` datetime NOT NULL,\n  \
PRIMARY KEY (`client_ip`,`domain`,`time`),\n  UNIQUE KEY `u` (`domain`)\n\
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4";
    assert!(from_doris_ddl(&keys(), ddl).is_none());
    assert!(!is_doris_olap(ddl));
    assert!(is_doris_olap(DORIS_UNIQUE));
}

fn known(s: KeySemantics) -> Learned {
    Learned::Known(TableModel {
        semantics: s,
        reason: "PRIMARY KEY (a) within the key columns".into(),
    })
}

#[test]
fn resolve_follows_the_table_under_auto_and_refuses_a_contradiction() {
    use KeySemanticsSetting as S;
    let p = KeySemantics::Presence;
    let m = KeySemantics::Multiset;
    assert_eq!(resolve(S::Auto, &known(p)), Ok(p));
    assert_eq!(resolve(S::Auto, &known(m)), Ok(m));
    assert_eq!(resolve(S::Presence, &known(p)), Ok(p));
    let e = resolve(S::Presence, &known(m)).expect_err("contradicted");
    assert!(e.to_string().contains("match.key_semantics"), "{e}");
    assert!(resolve(S::Multiset, &known(p)).is_err());
    // A table not there yet: the configured value, multiset for auto.
    assert_eq!(resolve(S::Auto, &Learned::NoTable), Ok(m));
    assert_eq!(resolve(S::Presence, &Learned::NoTable), Ok(p));
    let e = resolve(S::Auto, &Learned::Unreadable("no key model".into())).expect_err("undecided");
    assert!(e.to_string().contains("match.key_semantics"), "{e}");
}
