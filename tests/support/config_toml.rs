//! One typed builder for the auditor's configuration file, shared by every test binary and
//! the benchmark's daemon (each includes this file with `#[path]`), so that the key names,
//! the seed record layout and the test timings are written once.
//!
//! The output is plain `key = value` lines under `[section]` headers, in the order the
//! calls were made; tests that still edit the text (`.replace("batch_size = 100", …)`)
//! keep working because a value is always rendered the same way.

#![allow(dead_code)]

use std::fmt::Write as _;

/// The seed record: the columns of the pipeline's `dns_logs` csv lines, in order.
pub use gap_auditor::commands::demo::SEED_FIELDS;

/// The seed's delimiter.
pub const SEED_DELIMITER: &str = "|";

/// The seed's key for `key_columns`: the record fields that identify a row.
pub const SEED_KEY: [&str; 3] = ["client_ip", "domain", "time"];

/// A value as TOML text.
pub trait TomlValue {
    /// The value written after `key = `.
    fn toml(&self) -> String;
}

impl TomlValue for str {
    fn toml(&self) -> String {
        let mut out = String::with_capacity(self.len() + 2);
        out.push('"');
        for c in self.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                c => out.push(c),
            }
        }
        out.push('"');
        out
    }
}

impl TomlValue for String {
    fn toml(&self) -> String {
        self.as_str().toml()
    }
}

impl TomlValue for std::path::Path {
    fn toml(&self) -> String {
        self.display().to_string().toml()
    }
}

impl TomlValue for std::path::PathBuf {
    fn toml(&self) -> String {
        self.as_path().toml()
    }
}

macro_rules! bare_toml {
    ($($t:ty),*) => {$(
        impl TomlValue for $t {
            fn toml(&self) -> String {
                self.to_string()
            }
        }
    )*};
}
bare_toml!(bool, i32, i64, u16, u32, u64, usize);

impl<T: TomlValue + ?Sized> TomlValue for &T {
    fn toml(&self) -> String {
        (**self).toml()
    }
}

impl<T: TomlValue> TomlValue for [T] {
    fn toml(&self) -> String {
        let items: Vec<String> = self.iter().map(TomlValue::toml).collect();
        format!("[{}]", items.join(","))
    }
}

impl<T: TomlValue, const N: usize> TomlValue for [T; N] {
    fn toml(&self) -> String {
        self.as_slice().toml()
    }
}

impl<T: TomlValue> TomlValue for Vec<T> {
    fn toml(&self) -> String {
        self.as_slice().toml()
    }
}

/// The lines of one `[section]`, in order.
#[derive(Debug, Clone, Default)]
struct Section {
    lines: Vec<String>,
}

impl Section {
    fn set(&mut self, key: &str, value: &(impl TomlValue + ?Sized)) {
        self.lines.push(format!("{key} = {}", value.toml()));
    }

    fn quoted(&mut self, key: &str, value: &(impl TomlValue + ?Sized)) {
        self.lines
            .push(format!("{} = {}", key.toml(), value.toml()));
    }

    /// Verbatim lines (a test's own extra keys); blank text adds nothing.
    fn raw(&mut self, text: &str) {
        if !text.trim().is_empty() {
            self.lines.push(text.trim_end_matches('\n').to_owned());
        }
    }

    fn render(&self, out: &mut String, header: &str, always: bool) {
        if self.lines.is_empty() && !always {
            return;
        }
        let _ = writeln!(out, "{header}");
        for line in &self.lines {
            let _ = writeln!(out, "{line}");
        }
    }
}

/// A whole configuration: `[kafka]`, `[server]`, `[state]` and the audits.
#[derive(Debug, Clone, Default)]
pub struct ConfigToml {
    kafka: Section,
    kafka_properties: Section,
    server: Section,
    state: Section,
    audits: Vec<AuditToml>,
}

impl ConfigToml {
    /// A configuration whose Kafka is `brokers`.
    pub fn new(brokers: &str) -> Self {
        let mut c = Self::default();
        c.kafka.set("brokers", brokers);
        c
    }

    /// The auditor's own group, started at `earliest`, with the tests' short group timings
    /// (a 6s session, 500ms heartbeats): how every integration test reads its topic.
    pub fn test_group(self, group: &str) -> Self {
        self.kafka("group_id", group)
            .kafka("start", "earliest")
            .kafka("session_timeout", "6s")
            .kafka("heartbeat_interval", "500ms")
    }

    /// Sets `kafka.KEY`.
    pub fn kafka(mut self, key: &str, value: impl TomlValue) -> Self {
        self.kafka.set(key, &value);
        self
    }

    /// Adds verbatim lines to `[kafka]`.
    pub fn kafka_lines(mut self, text: &str) -> Self {
        self.kafka.raw(text);
        self
    }

    /// Sets the librdkafka property `kafka.properties."NAME"`.
    pub fn kafka_property(mut self, name: &str, value: impl TomlValue) -> Self {
        self.kafka_properties.quoted(name, &value);
        self
    }

    /// Sets `server.KEY`.
    pub fn server(mut self, key: &str, value: impl TomlValue) -> Self {
        self.server.set(key, &value);
        self
    }

    /// Sets `state.path`.
    pub fn state_path(mut self, path: impl TomlValue) -> Self {
        self.state.set("path", &path);
        self
    }

    /// Sets `state.KEY`.
    pub fn state(mut self, key: &str, value: impl TomlValue) -> Self {
        self.state.set(key, &value);
        self
    }

    /// Adds an `[[audits]]` entry.
    pub fn audit(mut self, audit: AuditToml) -> Self {
        self.audits.push(audit);
        self
    }

    /// The TOML text.
    pub fn render(&self) -> String {
        let mut out = String::from("\n");
        self.kafka.render(&mut out, "[kafka]", true);
        self.kafka_properties
            .render(&mut out, "[kafka.properties]", false);
        self.server.render(&mut out, "[server]", false);
        self.state.render(&mut out, "[state]", false);
        for audit in &self.audits {
            audit.render(&mut out);
        }
        out
    }
}

/// One `[[audits]]` entry and its `record`, `match` and `sink` tables.
#[derive(Debug, Clone, Default)]
pub struct AuditToml {
    top: Section,
    record: Section,
    filter: Section,
    registry: Section,
    matching: Section,
    sink: Section,
}

impl AuditToml {
    /// An audit named `name` of `topics`.
    pub fn new<T: AsRef<str>>(name: &str, topics: &[T]) -> Self {
        let topics: Vec<&str> = topics.iter().map(AsRef::as_ref).collect();
        let mut a = Self::default();
        a.top.set("name", name);
        a.top.set("topics", &topics);
        a
    }

    /// Sets `audits[].KEY` (`grace`, `batch_size`, `pipeline_group`, ...).
    pub fn set(mut self, key: &str, value: impl TomlValue) -> Self {
        self.top.set(key, &value);
        self
    }

    /// Adds verbatim lines to the audit's own table.
    pub fn lines(mut self, text: &str) -> Self {
        self.top.raw(text);
        self
    }

    /// Sets `audits[].record.KEY`.
    pub fn record(mut self, key: &str, value: impl TomlValue) -> Self {
        self.record.set(key, &value);
        self
    }

    /// Sets `audits[].record.filter.KEY`.
    pub fn filter(mut self, key: &str, value: impl TomlValue) -> Self {
        self.filter.set(key, &value);
        self
    }

    /// Sets `audits[].record.schema_registry.KEY`.
    pub fn registry(mut self, key: &str, value: impl TomlValue) -> Self {
        self.registry.set(key, &value);
        self
    }

    /// The seed's csv records: `|`-delimited [`SEED_FIELDS`], exactly nine of them.
    pub fn seed_csv(self) -> Self {
        self.record("format", "csv")
            .record("delimiter", SEED_DELIMITER)
            .record("fields", SEED_FIELDS)
            .filter("field_count", SEED_FIELDS.len())
    }

    /// Sets `audits[].match.strategy`.
    pub fn strategy(self, strategy: &str) -> Self {
        self.matching("strategy", strategy)
    }

    /// Sets `audits[].match.KEY`.
    pub fn matching(mut self, key: &str, value: impl TomlValue) -> Self {
        self.matching.set(key, &value);
        self
    }

    /// Adds verbatim lines to `[audits.match]`.
    pub fn match_lines(mut self, text: &str) -> Self {
        self.matching.raw(text);
        self
    }

    /// `strategy = "key_columns"` over [`SEED_KEY`].
    pub fn seed_key_columns(self) -> Self {
        self.strategy("key_columns").matching("key", SEED_KEY)
    }

    /// `strategy = "offset_columns"` with the column names written out.
    pub fn offset_columns(self) -> Self {
        self.strategy("offset_columns")
            .matching("partition_column", "partition")
            .matching("offset_column", "offset")
    }

    /// A MySQL-protocol sink (`kind`: `mysql` or `doris`).
    pub fn sql_sink(self, kind: &str, url: &str, table: &str) -> Self {
        self.sink("kind", kind)
            .sink("url", url)
            .sink("table", table)
    }

    /// An Elasticsearch sink.
    pub fn es_sink(self, url: &str, index: &str) -> Self {
        self.sink("kind", "elasticsearch")
            .sink("url", url)
            .sink("index", index)
    }

    /// Sets `audits[].sink.KEY`.
    pub fn sink(mut self, key: &str, value: impl TomlValue) -> Self {
        self.sink.set(key, &value);
        self
    }

    fn render(&self, out: &mut String) {
        self.top.render(out, "[[audits]]", true);
        self.record.render(out, "[audits.record]", false);
        self.filter.render(out, "[audits.record.filter]", false);
        self.registry
            .render(out, "[audits.record.schema_registry]", false);
        self.matching.render(out, "[audits.match]", false);
        self.sink.render(out, "[audits.sink]", false);
    }
}
