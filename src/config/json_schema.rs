//! The configuration's JSON Schema (`gap-auditor config schema`), derived from the serde
//! structs of `schema` so that the loader stays the one authority: every key, its type, its
//! default and its doc comment come from the code that reads it. Only the value types the
//! derive cannot see through (custom deserializers, secrets, the string enumerations) get a
//! hand-written schema here, each saying what that deserializer accepts.

use std::borrow::Cow;
use std::time::Duration;

use schemars::generate::SchemaSettings;
use schemars::transform::RecursiveTransform;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Serializer;

use super::{Config, Secret, SecretUrl, StartPosition};

/// The JSON Schema (draft 2020-12) of a configuration file, as `config schema` prints it.
///
/// It describes the file as written (TOML or YAML turned into JSON): unknown keys are
/// refused where the loader refuses them (`additionalProperties: false`), and each key's
/// `description` and `default` are the ones the loader applies. Rules that span several
/// keys (`audits[0].sink.table` for a doris sink, ...) stay with `validate-config`.
/// Secret values (passwords, API keys, every `kafka.properties` value) carry
/// `"writeOnly": true`.
pub fn config_json_schema() -> serde_json::Value {
    let generator = SchemaSettings::draft2020_12()
        .for_deserialize()
        .with_transform(RecursiveTransform(tidy))
        .into_generator();
    let mut schema = generator.into_root_schema_for::<Config>();
    schema.insert(
        "title".to_owned(),
        "gap-auditor configuration (gap-auditor.toml)".into(),
    );
    schema.to_value()
}

/// Two touches on every subschema the derive wrote:
/// - an optional key left out defaults to "not set", which the derive writes as
///   `"default": null`. A TOML file cannot hold a null, so that default would be a value no
///   file can write: dropped (the description says what an unset key means);
/// - descriptions are doc comments wrapped at 100 columns: the lines of a paragraph are
///   joined (editors show a description as one paragraph; blank lines are kept), and
///   rustdoc's link brackets (`[`Config::load`]`) are dropped.
fn tidy(schema: &mut Schema) {
    if schema
        .get("default")
        .is_some_and(serde_json::Value::is_null)
    {
        schema.remove("default");
    }
    if let Some(serde_json::Value::String(text)) = schema.get_mut("description") {
        *text = join_wrapped_lines(text)
            .replace("[`", "`")
            .replace("`]", "`");
    }
}

/// `text` with each paragraph's lines joined by a space; paragraphs stay apart.
fn join_wrapped_lines(text: &str) -> String {
    text.split("\n\n")
        .map(|paragraph| {
            paragraph
                .lines()
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// A duration as `de_duration` reads it: text such as `30s`, `5m`, `1h 30m`, `250ms`, or a
/// non-negative number of seconds.
pub(super) struct DurationText;

impl JsonSchema for DurationText {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "anyOf": [
                {
                    "type": "string",
                    // Leading digits: what every humantime spelling starts with.
                    "pattern": "^\\s*[0-9]",
                    "examples": ["30s", "5m", "1h 30m", "250ms"]
                },
                { "type": "number", "minimum": 0 }
            ]
        })
    }
}

/// A list as `de_string_list` reads it: an array of strings, or one comma-separated string
/// (the form environment overrides use).
pub(super) struct StringList;

impl JsonSchema for StringList {
    fn schema_name() -> Cow<'static, str> {
        "StringList".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "anyOf": [
                { "type": "array", "items": { "type": "string" } },
                { "type": "string", "description": "comma-separated" }
            ]
        })
    }
}

/// Writes a duration default the way a config file would: `30s`, `5m`, `24h`, `250ms`
/// (the largest unit that divides it), so the schema's defaults can be pasted into a file.
pub(super) fn se_duration<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&duration_text(*d))
}

/// `d` in the largest of h, m, s, ms that divides it exactly; sub-millisecond durations
/// (which no default has) in seconds with a fraction.
pub(super) fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    if d.is_zero() {
        return "0s".to_owned();
    }
    if !d.subsec_nanos().is_multiple_of(1_000_000) {
        return format!("{}s", d.as_secs_f64());
    }
    for (unit, per) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms > 0 && ms.is_multiple_of(per) {
            return format!("{}{unit}", ms / per);
        }
    }
    format!("{ms}ms")
}

impl JsonSchema for Secret {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "Secret".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // The deserializer takes scalars as text (librdkafka properties such as
        // `"fetch.max.bytes" = 1048576` are numbers in TOML).
        json_schema!({
            "type": ["string", "boolean", "integer", "number"],
            "writeOnly": true
        })
    }
}

impl JsonSchema for SecretUrl {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "SecretUrl".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "string", "format": "uri" })
    }
}

impl JsonSchema for StartPosition {
    fn inline_schema() -> bool {
        true
    }
    fn schema_name() -> Cow<'static, str> {
        "StartPosition".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "examples": ["latest", "earliest", "2024-05-01T00:00:00Z", "-1h"]
        })
    }
}

/// The schema of a string enumeration (`kinds`): its canonical spellings. The loader also
/// takes them in any letter case; the schema names the documented ones.
pub(super) fn string_enum_schema(names: &[&str]) -> Schema {
    json_schema!({ "type": "string", "enum": names })
}
