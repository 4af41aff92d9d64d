//! The enumerations of the configuration, each spelled as a string (`key_columns`,
//! `read_committed`, ...), and the start position.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::de::{self, Deserializer};
use serde::{Deserialize, Serialize, Serializer};

use super::deserializers::parse_duration_str;

fn one_of(names: &[&str]) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [init @ .., last] => format!("{} or {}", init.join(", "), last),
    }
}

macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($what:literal) {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every accepted spelling, in documentation order.
            pub const NAMES: &'static [&'static str] = &[$($text),+];

            /// The configuration spelling of this value.
            pub fn as_str(&self) -> &'static str {
                match self {
                    $( Self::$variant => $text, )+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                let t = s.trim();
                $( if t.eq_ignore_ascii_case($text) { return Ok(Self::$variant); } )+
                Err(format!("unknown {} `{}`; expected {}", $what, s, one_of(Self::NAMES)))
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(de::Error::custom)
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }
            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }
            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                super::json_schema::string_enum_schema(Self::NAMES)
            }
        }
    };
}

string_enum! {
    /// Which records the consumer reads: only committed transactional records
    /// (`read_committed`) or also open and aborted ones (`read_uncommitted`). Match what the
    /// pipeline reads, or aborted records will be reported as missing.
    pub enum IsolationLevel ("isolation level") {
        /// `read_committed` (default).
        ReadCommitted = "read_committed",
        /// `read_uncommitted`.
        ReadUncommitted = "read_uncommitted",
    }
}

impl IsolationLevel {
    /// Value of the librdkafka `isolation.level` property.
    pub fn as_librdkafka(&self) -> &'static str {
        self.as_str()
    }
}

string_enum! {
    /// `[audits.pipeline] kind`: where the pipeline's committed position (the due rule's
    /// input) comes from (SPEC "Pipeline position and evidence").
    #[derive(Default)]
    pub enum PipelineKind ("pipeline kind") {
        /// The pipeline's Kafka consumer group (`group`), as `pipeline_group` (default).
        #[default]
        KafkaGroup = "kafka_group",
        /// A Doris Routine Load job (`url`, `job`): named by SPEC, not built yet.
        DorisRoutineLoad = "doris_routine_load",
    }
}

string_enum! {
    /// How a Kafka record value is decoded.
    pub enum RecordFormat ("record format") {
        /// Delimited text (`delimiter`, named `fields`).
        Csv = "csv",
        /// A JSON object; fields addressed by name or JSON pointer (`/a/b`).
        Json = "json",
        /// The whole value as one field.
        Raw = "raw",
        /// Avro in the Confluent wire format; the schema from `schema_registry`.
        Avro = "avro",
        /// Protobuf in the Confluent wire format; the schema from `schema_registry`.
        Protobuf = "protobuf",
    }
}

string_enum! {
    /// Whether record values carry the Confluent Schema Registry header.
    pub enum Framing ("framing") {
        /// Plain values (default for csv, json and raw).
        None = "none",
        /// A magic byte and a 4-byte schema id before the value (always for avro and
        /// protobuf; for json: JSON Schema serializers). The schema of a json value is not
        /// needed to decode it and is not fetched.
        Confluent = "confluent",
    }
}

string_enum! {
    /// How avro/protobuf timestamps are rendered for matching (docs/OPERATOR.md).
    pub enum TimestampText ("timestamp format") {
        /// `2024-05-01 12:00:00.123` (default; Flink's SQL text, DATETIME columns).
        Sql = "sql",
        /// `2024-05-01T12:00:00.123`.
        Iso8601 = "iso8601",
        /// `1714564800123`.
        EpochMillis = "epoch_millis",
    }
}

string_enum! {
    /// How a record is found in the sink.
    pub enum MatchStrategy ("match strategy") {
        /// Sink rows carry the Kafka partition and offset; verified by offset range.
        OffsetColumns = "offset_columns",
        /// Sink rows carry record fields; verified by batched key lookups.
        KeyColumns = "key_columns",
        /// Elasticsearch documents whose `_id` is built from a template.
        DocId = "doc_id",
    }
}

string_enum! {
    /// `match.key_semantics`: how the sink table treats rows with equal key_columns (SPEC
    /// "The sink's model").
    #[derive(Default)]
    pub enum KeySemanticsSetting ("key semantics") {
        /// Read from the table at start (default); refuse to start when unclear.
        #[default]
        Auto = "auto",
        /// The table keeps every row (Doris DUPLICATE KEY, no covering unique index).
        Multiset = "multiset",
        /// The table keeps one row per key (Doris UNIQUE/AGGREGATE KEY, PRIMARY/UNIQUE index).
        Presence = "presence",
    }
}

string_enum! {
    /// The kind of sink being audited.
    pub enum SinkKind ("sink kind") {
        /// Apache Doris, queried over the MySQL protocol (FE query port, usually 9030).
        Doris = "doris",
        /// MySQL or any MySQL-protocol database.
        Mysql = "mysql",
        /// Elasticsearch (or OpenSearch) over HTTP.
        Elasticsearch = "elasticsearch",
    }
}

string_enum! {
    /// `sink.tls` of a doris/mysql sink, named after MySQL's `--ssl-mode` (MySQL's own
    /// `PREFERRED`, falling back to plain text, is not offered: a setting that silently
    /// drops encryption is no security setting).
    #[derive(Default)]
    pub enum SinkTls ("sink tls mode") {
        /// Plain text (the default without `ca_file`).
        #[default]
        Disabled = "disabled",
        /// Encrypted, the server certificate NOT verified (MySQL `REQUIRED`).
        Required = "required",
        /// Encrypted, the certificate chain verified against `ca_file` (else the system
        /// roots), the host name not checked (MySQL `VERIFY_CA`).
        VerifyCa = "verify_ca",
        /// As `verify_ca`, and the certificate must name the url's host (MySQL
        /// `VERIFY_IDENTITY`; the default when `ca_file` is set).
        VerifyIdentity = "verify_identity",
    }
}

impl SinkKind {
    /// True for the kinds queried with SQL over the MySQL protocol.
    pub fn is_sql(&self) -> bool {
        matches!(self, SinkKind::Doris | SinkKind::Mysql)
    }
}

/// Where the auditor's own consumer group starts on its very first run (when it has no
/// committed offset yet). Afterwards it always resumes from its settled watermark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartPosition {
    /// `latest`: only records produced from now on.
    Latest,
    /// `earliest`: everything Kafka still retains.
    Earliest,
    /// An RFC 3339 time such as `2024-05-01T00:00:00Z`: the first offset at or after it.
    Time(DateTime<Utc>),
    /// A negative duration such as `-1h`: that long before the start of the process.
    Ago(Duration),
}

impl FromStr for StartPosition {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("latest") {
            return Ok(Self::Latest);
        }
        if t.eq_ignore_ascii_case("earliest") {
            return Ok(Self::Earliest);
        }
        if let Some(ago) = t.strip_prefix('-') {
            let d = parse_duration_str(ago)?;
            if d.is_zero() {
                return Err("`-0s` is not a start position; use `latest`".to_owned());
            }
            return Ok(Self::Ago(d));
        }
        match DateTime::parse_from_rfc3339(t) {
            Ok(time) => Ok(Self::Time(time.with_timezone(&Utc))),
            Err(_) => Err(format!(
                "unknown start position `{s}`; expected latest, earliest, an RFC 3339 time \
                 (2024-05-01T00:00:00Z) or a negative duration (-1h)"
            )),
        }
    }
}

impl fmt::Display for StartPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Latest => f.write_str("latest"),
            Self::Earliest => f.write_str("earliest"),
            Self::Time(t) => f.write_str(&t.to_rfc3339()),
            Self::Ago(d) => write!(f, "-{}", humantime::format_duration(*d)),
        }
    }
}

impl<'de> Deserialize<'de> for StartPosition {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(de::Error::custom)
    }
}

impl Serialize for StartPosition {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}
