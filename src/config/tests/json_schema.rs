//! The JSON Schema of `config schema` against the loader, which stays the authority: the
//! example configs pass both, a misspelt key is refused by the schema exactly where the
//! loader refuses it, and the schema's defaults are the loader's.

use serde_json::{Map, Value, json};

use super::*;
use crate::config::json_schema::duration_text;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The configuration files an operator starts from, as the schema sees them (TOML as JSON).
const EXAMPLES: [&str; 2] = ["config/gap-auditor.toml", "deploy/compose/gap-auditor.toml"];

fn example(rel: &str) -> (String, Value) {
    let text = std::fs::read_to_string(Path::new(ROOT).join(rel))
        .unwrap_or_else(|e| panic!("read {rel}: {e}"));
    let doc: toml::Table = toml::from_str(&text).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let json = serde_json::to_value(doc).unwrap_or_else(|e| panic!("{rel} as JSON: {e}"));
    (text, json)
}

/// The schema compiled by boon (the Rust port of the validator Helm runs on
/// values.schema.json).
struct Checker {
    schemas: boon::Schemas,
    index: boon::SchemaIndex,
    raw: Value,
}

impl Checker {
    fn new() -> Self {
        let raw = config_json_schema();
        let mut compiler = boon::Compiler::new();
        let url = "urn:gap-auditor:config";
        compiler
            .add_resource(url, raw.clone())
            .expect("add the schema");
        let mut schemas = boon::Schemas::new();
        let index = compiler
            .compile(url, &mut schemas)
            .unwrap_or_else(|e| panic!("the schema does not compile: {e:#}"));
        Self {
            schemas,
            index,
            raw,
        }
    }

    fn check(&self, instance: &Value) -> Result<(), String> {
        self.schemas
            .validate(instance, self.index)
            .map_err(|e| e.to_string())
    }

    /// The subschema describing an object or array value: `$ref` followed, and of an
    /// optional value (`anyOf` with null) the non-null branch.
    fn resolve<'a>(&'a self, mut s: &'a Value) -> &'a Value {
        loop {
            if let Some(r) = s.get("$ref").and_then(Value::as_str) {
                let name = r.strip_prefix("#/$defs/").expect("local $ref");
                s = &self.raw["$defs"][name];
            } else if let Some(branches) = s.get("anyOf").and_then(Value::as_array) {
                match branches
                    .iter()
                    .find(|b| b.get("type") != Some(&json!("null")))
                {
                    Some(b) => s = b,
                    None => return s,
                }
            } else {
                return s;
            }
        }
    }
}

/// `v` as the TOML text the loader reads.
fn to_toml(v: &Value) -> String {
    toml::to_string(v).unwrap_or_else(|e| panic!("as TOML: {e}: {v}"))
}

/// The value at a JSON pointer, mutable.
fn at<'a>(v: &'a mut Value, pointer: &str) -> &'a mut Map<String, Value> {
    v.pointer_mut(pointer)
        .and_then(Value::as_object_mut)
        .unwrap_or_else(|| panic!("no object at {pointer}"))
}

#[test]
fn the_example_configs_pass_the_schema_and_the_loader() {
    let checker = Checker::new();
    for rel in EXAMPLES {
        let (text, json) = example(rel);
        Config::from_toml_str(&text).unwrap_or_else(|e| panic!("{rel}: loader: {e}"));
        checker
            .check(&json)
            .unwrap_or_else(|e| panic!("{rel}: schema: {e}"));
    }
}

/// Every table of every example, in turn, gets a key the loader does not know (the
/// table's first key misspelt, so it reads like a real typo). In a struct table
/// (`additionalProperties: false`) the loader must refuse it and so must the schema; in a
/// free map (`kafka.properties`) the schema must let it through, as the loader does.
#[test]
fn a_misspelt_key_is_refused_by_the_schema_exactly_where_the_loader_refuses_it() {
    let checker = Checker::new();
    let mut struct_tables = 0;
    for rel in EXAMPLES {
        let (_, json) = example(rel);
        let mut tables = Vec::new();
        collect_tables(&checker, &json, &checker.raw, String::new(), &mut tables);
        for (pointer, closed, first_key) in tables {
            let typo = match &first_key {
                Some(k) if k.len() > 3 => format!("{}{}", &k[..k.len() - 2], &k[k.len() - 1..]),
                _ => "misspelt_key".to_owned(),
            };
            let mut bad = json.clone();
            let value = first_key
                .as_ref()
                .map(|k| at(&mut bad, &pointer)[k].clone())
                .filter(|v| !v.is_object() && !v.is_array())
                .unwrap_or_else(|| json!("x"));
            at(&mut bad, &pointer).insert(typo.clone(), value);
            let schema = checker.check(&bad);
            if closed {
                struct_tables += 1;
                let loader = Config::from_toml_str(&to_toml(&bad));
                let loader_err = loader
                    .err()
                    .unwrap_or_else(|| panic!("{rel}: the loader took `{typo}` at `{pointer}`"));
                assert!(
                    loader_err.message.contains("unknown field"),
                    "{rel}: `{typo}` at `{pointer}`: {loader_err}"
                );
                let schema_err = schema.err().unwrap_or_else(|| {
                    panic!(
                        "{rel}: the schema took `{typo}` at `{pointer}`; the loader: {loader_err}"
                    )
                });
                assert!(schema_err.contains(&typo), "{rel}: {schema_err}");
            } else {
                schema.unwrap_or_else(|e| panic!("{rel}: a free map refused a key: {e}"));
            }
        }
    }
    // kafka, server, state, audits[0], record, filter, match, sink in both files.
    assert!(
        struct_tables >= 16,
        "only {struct_tables} tables were tried"
    );
}

/// (JSON pointer, whether the schema closes the table, its first key) of every object in
/// `v`, found along the schema.
fn collect_tables(
    checker: &Checker,
    v: &Value,
    schema: &Value,
    pointer: String,
    out: &mut Vec<(String, bool, Option<String>)>,
) {
    let schema = checker.resolve(schema);
    match v {
        Value::Object(map) => {
            let closed = schema.get("additionalProperties") == Some(&json!(false));
            out.push((pointer.clone(), closed, map.keys().next().cloned()));
            for (k, child) in map {
                let sub = &schema["properties"][k];
                let sub = if sub.is_null() {
                    &schema["additionalProperties"]
                } else {
                    sub
                };
                collect_tables(checker, child, sub, format!("{pointer}/{k}"), out);
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                collect_tables(
                    checker,
                    item,
                    &schema["items"],
                    format!("{pointer}/{i}"),
                    out,
                );
            }
        }
        _ => {}
    }
}

/// Writing every default the schema states into a minimal config changes nothing the
/// loader makes of it: the schema's defaults are the loader's.
#[test]
fn the_schema_defaults_are_the_loader_defaults() {
    let checker = Checker::new();
    let minimal: Value = serde_json::to_value(toml::from_str::<toml::Table>(BASE).expect("BASE"))
        .expect("BASE as JSON");
    let mut filled = minimal.clone();
    // The sections the minimal config leaves out entirely: their keys' defaults too.
    for section in ["server", "state"] {
        filled[section] = json!({});
    }
    for audit in ["replay", "pipeline"] {
        filled["audits"][0][audit] = json!({});
    }
    let mut written = Vec::new();
    fill_defaults(&checker, &mut filled, &checker.raw, "", &mut written);
    for key in [
        "/kafka/group_id",
        "/kafka/start",
        "/server/listen",
        "/state/path",
        "/audits/0/grace",
        "/audits/0/give_up_after",
        "/audits/0/batch_size",
        "/audits/0/max_open_gaps",
        "/audits/0/match/offset_column",
        "/audits/0/sink/query_timeout",
        "/audits/0/record/quote",
        "/audits/0/replay/pipeline_maps_origin",
    ] {
        assert!(
            written.iter().any(|w| w == key),
            "no default for {key}: {written:?}"
        );
    }
    checker
        .check(&filled)
        .expect("the filled config passes the schema");
    let plain = Config::from_toml_str(&to_toml(&minimal)).expect("minimal");
    let with_defaults = Config::from_toml_str(&to_toml(&filled))
        .unwrap_or_else(|e| panic!("with the schema's defaults written: {e}"));
    assert_eq!(format!("{with_defaults:?}"), format!("{plain:?}"));
}

/// Writes the schema's `default` of every key `v` leaves out, along the tables `v` has.
fn fill_defaults(
    checker: &Checker,
    v: &mut Value,
    schema: &Value,
    pointer: &str,
    written: &mut Vec<String>,
) {
    let schema = checker.resolve(schema);
    match v {
        Value::Object(map) => {
            let Some(props) = schema.get("properties").and_then(Value::as_object) else {
                return;
            };
            for (k, sub) in props {
                if !map.contains_key(k)
                    && let Some(d) = sub.get("default")
                {
                    map.insert(k.clone(), d.clone());
                    written.push(format!("{pointer}/{k}"));
                }
            }
            for (k, child) in map.iter_mut() {
                if let Some(sub) = props.get(k) {
                    fill_defaults(checker, child, sub, &format!("{pointer}/{k}"), written);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                fill_defaults(
                    checker,
                    item,
                    &schema["items"],
                    &format!("{pointer}/{i}"),
                    written,
                );
            }
        }
        _ => {}
    }
}

/// Keys, doc comments and secrets reach the schema: what an editor shows and what the Helm
/// chart's schema relies on.
#[test]
fn the_schema_describes_keys_with_their_docs_and_marks_secrets() {
    let checker = Checker::new();
    let audit = &checker.raw["$defs"]["AuditConfig"];
    let grace = &audit["properties"]["grace"];
    assert_eq!(grace["default"], json!("30s"));
    let text = grace["description"]
        .as_str()
        .expect("grace has a description");
    assert!(text.starts_with("The sink's visibility delay"), "{text}");
    assert!(!text.contains('\n'), "wrapped lines are joined: {text}");
    let sink = &checker.raw["$defs"]["SinkConfig"]["properties"];
    assert!(
        sink["password"].to_string().contains("\"writeOnly\":true"),
        "{}",
        sink["password"]
    );
    assert!(
        !sink["url"].to_string().contains("writeOnly"),
        "a url is no secret field"
    );
    // Case and spelling: the canonical names of an enumeration.
    assert_eq!(
        checker.raw["$defs"]["SinkConfig"]["properties"]["kind"]["enum"],
        json!(["doris", "mysql", "elasticsearch"])
    );
    assert_eq!(
        checker.raw["$defs"]["MatchConfig"]["required"],
        json!(["strategy"])
    );
}

#[test]
fn durations_are_written_as_a_config_file_would() {
    for (d, text) in [
        (Duration::from_secs(30), "30s"),
        (Duration::from_secs(300), "5m"),
        (Duration::from_secs(86_400), "24h"),
        (Duration::from_millis(250), "250ms"),
        (Duration::from_millis(1500), "1500ms"),
        (Duration::ZERO, "0s"),
    ] {
        assert_eq!(duration_text(d), text);
        assert_eq!(parse_duration_str(text), Ok(d), "{text} reads back");
    }
}
