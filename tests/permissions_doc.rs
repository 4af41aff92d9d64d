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
/// The product code of a module and every file below it: `src/x.rs` with `src/x/**.rs`, or
/// every file of a directory, each without its tests (files and folders named `tests`, and
/// everything after a file's first `#[cfg(test)]`). A module split into files must not
/// take its calls out of these checks.
fn module_files(path: &str) -> Vec<(String, String)> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        entries.sort();
        for p in entries {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if name == "tests" || name == "tests.rs" {
                continue;
            }
            if p.is_dir() {
                walk(&p, root, out);
            } else if name.ends_with(".rs") {
                let rel = p.strip_prefix(root).unwrap_or(&p).display().to_string();
                out.push((rel.clone(), code(&rel)));
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    let dir = root.join(path.trim_end_matches(".rs"));
    if path.ends_with(".rs") {
        out.push((path.to_string(), code(path)));
    }
    walk(&dir, root, &mut out);
    assert!(!out.is_empty(), "{path}: no source files");
    out
}

/// [`module_files`] of every path, concatenated.
fn modules_code(paths: &[&str]) -> String {
    paths
        .iter()
        .flat_map(|p| module_files(p))
        .map(|(_, c)| c)
        .collect()
}

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
/// Modules (with their files below) that talk to Kafka.
const KAFKA_FILES: &[&str] = &[
    "src/kafka",
    "src/handover.rs",
    "src/audit",
    "src/commands/check.rs",
    "src/commands/replay.rs",
];

const ES_CALLS: &[(&str, &str)] = &[
    ("count", "_count"),
    ("search", "_search"),
    ("msearch", "_msearch"),
    ("mget", "_mget"),
    ("field_caps", "_field_caps"),
    // `indices().get_field_mapping`: the key fields' ignore_above and normalizer.
    ("indices", "_mapping/field"),
    ("bulk", "_bulk"),
];

#[test]
fn every_kafka_request_is_on_the_permissions_page() {
    let page = read("docs/PERMISSIONS.md");
    let names: Vec<&str> = KAFKA_CALLS.iter().map(|(n, _)| *n).collect();
    for (file, src) in KAFKA_FILES.iter().flat_map(|m| module_files(m)) {
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
    for (file, src) in KAFKA_FILES.iter().flat_map(|m| module_files(m)) {
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
    let src = modules_code(&["src/sink/elasticsearch.rs"]);
    let squeezed: String = src.split_whitespace().collect();
    // Every request goes through `self.client.<api>(`: an API the map does not know fails.
    // The count of calls found guards the walk: files the split moved out of view would
    // make this test pass on nothing (4 calls in 3 files when this was written).
    let found = squeezed.matches(".client.").count();
    assert!(
        found >= 4,
        "only {found} `.client.` calls found: is the walk reading the sink?"
    );
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
    let sql = modules_code(&[
        "src/sink/sql.rs",
        "src/sink/mysql.rs",
        "src/commands/replay.rs",
    ]);
    for (needle, on_page) in [
        ("information_schema.COLUMNS", "information_schema.COLUMNS"),
        ("SEQ_IN_INDEX = 1", "SEQ_IN_INDEX = 1"),
        ("SELECT CONCAT(", "SELECT CONCAT("),
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
    let stream_load = modules_code(&["src/sink/stream_load.rs"]);
    assert!(stream_load.contains("_stream_load") && page.contains("LOAD_PRIV"));
    // Two statements that contain a forbidden word but are not that statement: a read of
    // the table's DDL (Doris key model) and replay's upsert; each must be on the page with
    // its privilege, and is taken out before the forbidden words are looked for.
    let mut sql = sql;
    for (allowed, on_page) in [
        ("SHOW CREATE TABLE", "SHOW CREATE TABLE"),
        ("ON DUPLICATE KEY UPDATE ", "`UPDATE` for the upsert"),
    ] {
        assert!(
            sql.contains(allowed),
            "the code no longer uses {allowed}: update this test"
        );
        assert!(
            page.contains(on_page),
            "docs/PERMISSIONS.md does not name {on_page}"
        );
        sql = sql.replace(allowed, "");
    }
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

/// The Flink evidence reads the JobManager's REST API with `GET` only, and every path it
/// asks for is on the page.
#[test]
fn every_flink_rest_call_is_on_the_permissions_page() {
    let page = read("docs/PERMISSIONS.md");
    let code = modules_code(&["src/evidence/flink.rs"]);
    // The evidence sources' one HTTP client (src/evidence/http.rs) sends their requests.
    let client = modules_code(&["src/evidence/http.rs"]);
    for method in [".post(", ".put(", ".patch(", ".delete(", ".request("] {
        assert!(!code.contains(method), "src/evidence/flink uses {method}");
        assert!(
            !client.contains(method),
            "src/evidence/http.rs uses {method}"
        );
    }
    let mut paths = Vec::new();
    for (i, _) in code.match_indices(".get(") {
        let rest = &code[i + 5..];
        let Some(q) = rest.find('"') else { continue };
        // `self.get("jobs/overview")` or `self.get(&format!("jobs/{jid}/checkpoints"))`.
        if !rest[..q].trim_start_matches("&format!(").trim().is_empty() {
            continue;
        }
        let lit = &rest[q + 1..];
        let path = &lit[..lit.find('"').expect("closing quote")];
        paths.push(path.to_owned());
    }
    assert!(paths.len() >= 2, "{paths:?}");
    for path in paths {
        assert!(
            page.contains(&format!("`GET /{path}`")),
            "GET /{path} not on the page"
        );
    }
}

/// The Kafka Connect evidence reads the Connect REST API with `GET` only (through
/// src/evidence/http.rs), and every path it asks for is on the page.
#[test]
fn every_connect_rest_call_is_on_the_permissions_page() {
    let page = read("docs/PERMISSIONS.md");
    let code = modules_code(&["src/evidence/connect.rs", "src/evidence/http.rs"]);
    for method in [".post(", ".put(", ".patch(", ".delete(", ".request("] {
        assert!(!code.contains(method), "the Connect evidence uses {method}");
    }
    // `self.get(&self.status, "/connectors/{name}/status")`: the path asked, as its errors
    // name it; the URL itself is the same segments (`["connectors", name, "status"]`).
    let mut paths = Vec::new();
    for (i, _) in code.match_indices(".get(&self.") {
        let rest = &code[i..];
        let Some(q) = rest.find('"') else { continue };
        let lit = &rest[q + 1..];
        let path = &lit[..lit.find('"').expect("closing quote")];
        let last = path.rsplit('/').next().unwrap_or_default();
        assert!(
            code.contains(&format!("at(\"{last}\")")),
            "{path}: the URL asked is not `connectors/{{name}}/{last}`"
        );
        paths.push(path.to_owned());
    }
    assert_eq!(paths.len(), 2, "{paths:?}");
    for path in paths {
        assert!(
            page.contains(&format!("`GET {path}`")),
            "GET {path} not on the page"
        );
    }
}

/// The Doris Stream Load evidence sends two statements to the FE, both reads, and both are
/// on the page: a statement added or changed in the poller fails here until the page says
/// what it needs.
#[test]
fn every_stream_load_statement_is_on_the_permissions_page() {
    let page = read("docs/PERMISSIONS.md");
    let code = modules_code(&["src/evidence/stream_load.rs", "src/doris_fe.rs"]);
    for write in [
        "INSERT",
        "UPDATE",
        "DELETE",
        "ALTER",
        "DROP",
        "GRANT",
        "exec_drop",
    ] {
        assert!(
            !code.contains(write),
            "the Stream Load evidence uses {write}"
        );
    }
    // The statements it sends: every literal starting with SELECT or SHOW, but the error
    // texts that name the statement ("SHOW STREAM LOAD failed: ...", "... answered ...").
    let mut statements = Vec::new();
    for start in ["\"SELECT ", "\"SHOW "] {
        for (i, _) in code.match_indices(start) {
            let lit = &code[i + 1..];
            let lit = &lit[..lit.find('"').expect("closing quote")];
            if !lit.contains(" answered ") && !lit.contains(" failed") {
                statements.push(lit.to_owned());
            }
        }
    }
    statements.sort();
    statements.dedup();
    assert_eq!(
        statements,
        vec![
            "SELECT UNIX_TIMESTAMP(), NOW(), @@system_time_zone, @@time_zone".to_owned(),
            "SHOW STREAM LOAD FROM {} WHERE Label LIKE {} ORDER BY FinishTime DESC LIMIT {LIMIT}"
                .to_owned(),
        ]
    );
    for needle in [
        "`SELECT UNIX_TIMESTAMP(), NOW(), @@system_time_zone, @@time_zone`",
        "`SHOW STREAM LOAD FROM db WHERE Label LIKE \"<prefix>_\" ORDER BY FinishTime DESC LIMIT 1000`",
    ] {
        assert!(page.contains(needle), "{needle} not on the page");
    }
    assert!(
        code.contains("pub const LIMIT: usize = 1_000;"),
        "the page says LIMIT 1000"
    );
}
