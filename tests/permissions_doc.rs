//! docs/PERMISSIONS.md is derived from the calls the code makes: this keeps it so. Every
//! Kafka request, Elasticsearch API and SQL statement kind the source uses must be named
//! on the page (with the privilege it needs), and a call the maps below do not know fails
//! until someone decides which permission it needs. Reads files only.

use std::path::Path;

fn read(path: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A source file without its unit tests (their calls and strings are not the program's).
fn code(path: &str) -> String {
    let text = read(path);
    match text.find("\n#[cfg(test)]") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// Occurrences of `.name(` in `text` (whitespace allowed before the dot, as rustfmt puts
/// chained calls on their own lines).
fn calls<'a>(text: &str, names: &[&'a str]) -> Vec<&'a str> {
    let squeezed: String = text.split_whitespace().collect();
    names
        .iter()
        .copied()
        .filter(|n| squeezed.contains(&format!(".{n}(")))
        .collect()
}

/// rdkafka calls that send a Kafka request needing an ACL, and the request's name on the
/// page. `fetch_metadata` is the Metadata request (`Describe` on the topic).
const KAFKA_CALLS: &[(&str, &str)] = &[
    ("subscribe", "JoinGroup"),
    ("commit", "OffsetCommit"),
    ("committed_offsets", "OffsetFetch"),
    ("fetch_watermarks", "ListOffsets"),
    ("offsets_for_times", "ListOffsets"),
    ("fetch_metadata", "metadata"),
    ("describe_configs", "DescribeConfigs"),
    ("create_topics", "CreateTopics"),
    ("send_result", "Write"),
    ("send", "Write"),
];

/// rdkafka calls that would need a permission the page does not grant.
const UNGRANTED_KAFKA_CALLS: &[&str] = &[
    "delete_topics",
    "create_partitions",
    "alter_configs",
    "delete_groups",
    "delete_records",
    "alter_consumer_group_offsets",
];

/// The files that talk to Kafka in the daemon and the commands (not the bench or the
/// demo's mock cluster).
const KAFKA_FILES: &[&str] = &[
    "src/kafka/tail.rs",
    "src/kafka/lookup.rs",
    "src/kafka/range.rs",
    "src/kafka/retention.rs",
    "src/handover.rs",
    "src/audit/blocking.rs",
    "src/audit/gap_log.rs",
    "src/audit/ingest.rs",
    "src/audit/kafka_view.rs",
    "src/audit/mod.rs",
    "src/audit/partitions.rs",
    "src/audit/persist.rs",
    "src/audit/pipeline.rs",
    "src/audit/report.rs",
    "src/audit/round.rs",
    "src/audit/starts.rs",
    "src/check.rs",
    "src/replay.rs",
];

const ES_CALLS: &[(&str, &str)] = &[
    ("count", "_count"),
    ("search", "_search"),
    ("msearch", "_msearch"),
    ("mget", "_mget"),
    ("field_caps", "_field_caps"),
    ("bulk", "_bulk"),
];

#[test]
fn every_kafka_request_is_on_the_permissions_page() {
    let page = read("docs/PERMISSIONS.md");
    let names: Vec<&str> = KAFKA_CALLS.iter().map(|(n, _)| *n).collect();
    for file in KAFKA_FILES {
        let src = code(file);
        let bad = calls(&src, UNGRANTED_KAFKA_CALLS);
        assert!(
            bad.is_empty(),
            "{file} calls {bad:?}: decide the ACL it needs and add it to docs/PERMISSIONS.md"
        );
        for call in calls(&src, &names) {
            let request = KAFKA_CALLS
                .iter()
                .find(|(n, _)| *n == call)
                .map(|(_, r)| *r)
                .unwrap_or_default();
            assert!(
                page.contains(request),
                "{file} calls .{call}() ({request}): docs/PERMISSIONS.md does not name it"
            );
        }
    }
}

/// The never-joined readers' `group.id`s: librdkafka still looks up their coordinator.
#[test]
fn every_reader_group_id_is_on_the_permissions_page() {
    let page = read("docs/PERMISSIONS.md");
    for file in KAFKA_FILES {
        let src = code(file);
        for (i, _) in src.match_indices("\"gap-auditor-") {
            let name: String = src[i + 1..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            assert!(
                page.contains(&name),
                "{file} uses the group id {name}: docs/PERMISSIONS.md does not name it"
            );
        }
    }
}

#[test]
fn every_elasticsearch_api_is_on_the_permissions_page() {
    let page = read("docs/PERMISSIONS.md");
    let src = code("src/sink/elasticsearch.rs");
    let squeezed: String = src.split_whitespace().collect();
    // Every request goes through `self.client.<api>(`: an API the map does not know fails.
    for (i, _) in squeezed.match_indices(".client.") {
        let api: String = squeezed[i + ".client.".len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let Some((_, name)) = ES_CALLS.iter().find(|(n, _)| *n == api) else {
            panic!(
                "src/sink/elasticsearch.rs calls {api}: add its index privilege to docs/PERMISSIONS.md and ES_CALLS"
            );
        };
        assert!(
            page.contains(name),
            "docs/PERMISSIONS.md does not name {name}"
        );
    }
}

#[test]
fn every_sql_statement_kind_is_on_the_permissions_page() {
    let page = read("docs/PERMISSIONS.md");
    let sql = code("src/sink/sql.rs") + &code("src/sink/mysql.rs") + &code("src/replay.rs");
    for (needle, on_page) in [
        ("information_schema.COLUMNS", "information_schema.COLUMNS"),
        ("SET NAMES", "SET NAMES"),
        ("INSERT INTO", "INSERT"),
        ("COUNT(", "SELECT"),
    ] {
        assert!(
            sql.contains(needle),
            "the code no longer uses {needle}: update this test"
        );
        assert!(
            page.contains(on_page),
            "docs/PERMISSIONS.md does not name {on_page}"
        );
    }
    let stream_load = code("src/sink/stream_load.rs");
    assert!(stream_load.contains("_stream_load") && page.contains("LOAD_PRIV"));
    for forbidden in ["DELETE FROM", "UPDATE ", "CREATE TABLE", "DROP "] {
        assert!(
            !sql.contains(forbidden),
            "the code uses {forbidden}: docs/PERMISSIONS.md grants nothing for it"
        );
    }
}

#[test]
fn the_page_is_linked_from_the_readme_and_the_operator_guide() {
    for doc in ["README.md", "docs/OPERATOR.md"] {
        assert!(
            read(doc).contains("PERMISSIONS.md"),
            "{doc} does not link docs/PERMISSIONS.md"
        );
    }
}
