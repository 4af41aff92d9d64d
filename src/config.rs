//! Configuration: the `gap-auditor.toml` file, environment overrides, validation.
//!
//! # Where the configuration comes from
//!
//! 1. A file, TOML or YAML (chosen by extension: `.toml`, `.yaml`, `.yml`), parsed with the
//!    `config` crate. `-c/--config FILE` names it ([`Config::load`] with `Some(path)`); a
//!    file named explicitly must exist. Without one, `./gap-auditor.toml` is used if present,
//!    else `./config/gap-auditor.toml`, else the configuration comes from the environment
//!    only. `config/gap-auditor.toml` in the repository is the documented example.
//! 2. Environment variables `GAP_AUDITOR__SECTION__KEY`, which override the file:
//!    - the part after `GAP_AUDITOR__` is split on `__` (double underscore) into key
//!      segments, each lower-cased: `GAP_AUDITOR__KAFKA__BROKERS` sets `kafka.brokers`,
//!      `GAP_AUDITOR__KAFKA__GROUP_ID` sets `kafka.group_id` (single underscores belong to
//!      the key name);
//!    - a numeric segment indexes an array: `GAP_AUDITOR__AUDITS__0__GRACE=10s` sets
//!      `audits[0].grace`, `GAP_AUDITOR__AUDITS__0__SINK__PASSWORD=...` the first audit's
//!      sink password, `GAP_AUDITOR__AUDITS__0__MATCH__STRATEGY=offset_columns` its match
//!      strategy. An index past the end of the file's array adds a new entry (which must
//!      then be complete to validate);
//!    - under `kafka.properties` and `kafka.property_files` the rest of the name is the
//!      librdkafka property, with `_` and `__` read as `.`:
//!      `GAP_AUDITOR__KAFKA__PROPERTIES__SASL_PASSWORD` sets `kafka.properties."sasl.password"`;
//!    - values are strings and are converted by the key's own parser: numbers
//!      (`batch_size=500`), booleans (`quote=true`), durations (`30s`, or `30` = seconds) and
//!      lists (`topics=a,b` — comma-separated — or `TOPICS__0=a`) all work;
//!    - an empty value clears optional text keys such as `pipeline_group` or `group_id`.
//!
//! Then the result is checked by [`Config::validate`]; the first problem is reported as a
//! [`ConfigError`] naming the key path and what is wrong, e.g.
//! `audits[0].sink.url: scheme must be mysql, http or https`. Unknown keys are refused
//! (`audits[0].sink: unknown field `tabel``), so typos never pass silently.
//!
//! Durations are written like `30s`, `5m`, `1h`, `250ms`, `1h 30m`; a bare number means
//! seconds.
//!
//! # Secrets
//!
//! Sink passwords and API keys ([`Secret`]), credentials embedded in a sink URL
//! ([`SecretUrl`]) and every `kafka.properties` value (SASL passwords, SSL key passwords)
//! print as `[redacted]` in `Debug` and `Display`, so logging a `Config` is safe. They can
//! also be read from files: `password_file`, `api_key_file` and `kafka.property_files`
//! are read once at load time (relative paths are relative to the working directory) and
//! one trailing newline sequence is trimmed. Errors name the key and the file, never the
//! content.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use config::{FileFormat, Format, Map, Value as CValue, ValueKind};
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// Prefix of environment overrides: `GAP_AUDITOR__KAFKA__BROKERS=...`.
pub const ENV_PREFIX: &str = "GAP_AUDITOR__";

/// Files tried, in order, when no config file is given explicitly.
pub const DEFAULT_CONFIG_PATHS: [&str; 2] = ["./gap-auditor.toml", "./config/gap-auditor.toml"];

/// Default `match.id_template` for the `doc_id` strategy.
pub const DEFAULT_ID_TEMPLATE: &str = "{topic}+{partition}+{offset}";

/// Largest array index accepted in an environment override (`AUDITS__<n>__...`).
const MAX_ENV_INDEX: usize = 10_000;

/// Path used for errors that concern the document as a whole.
const ROOT_PATH: &str = "(top level)";

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

/// An invalid configuration: which key (`audits[0].sink.url`, or a file / environment
/// variable name when the problem is there) and what is wrong with it.
///
/// Messages never contain secret values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct ConfigError {
    /// Key path such as `audits[0].sink.url`, or the file / environment variable at fault.
    pub path: String,
    /// What is wrong, for a human.
    pub message: String,
}

impl ConfigError {
    /// Builds an error for `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            message: message.into(),
        }
    }
}

fn err<T>(path: impl Into<String>, message: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError::new(path, message))
}

// ---------------------------------------------------------------------------------------
// Secrets
// ---------------------------------------------------------------------------------------

/// A secret string (password, API key, SASL credential). `Debug` and `Display` print
/// `[redacted]`; use [`Secret::expose`] exactly where the value is handed to a client.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret value itself. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True when the secret is the empty string.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[redacted]")
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct SecretVisitor;
        impl Visitor<'_> for SecretVisitor {
            type Value = Secret;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Secret, E> {
                Ok(Secret(v.to_owned()))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Secret, E> {
                Ok(Secret(v))
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Secret, E> {
                Ok(Secret(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Secret, E> {
                Ok(Secret(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Secret, E> {
                Ok(Secret(v.to_string()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Secret, E> {
                Ok(Secret(v.to_string()))
            }
        }
        d.deserialize_string(SecretVisitor)
    }
}

/// A URL that may embed `user:password@`. [`SecretUrl::expose`] gives the full URL for the
/// client; `Debug` and `Display` print it with the password replaced by `[redacted]`.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// Wraps a URL (surrounding whitespace is trimmed).
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into().trim().to_owned())
    }

    /// The full URL, password included. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Parses the URL.
    pub fn parse(&self) -> Result<url::Url, url::ParseError> {
        url::Url::parse(&self.0)
    }

    /// Lower-cased scheme (`mysql`, `http`, `https`), if the URL parses.
    pub fn scheme(&self) -> Option<String> {
        self.parse().ok().map(|u| u.scheme().to_ascii_lowercase())
    }

    /// User name embedded in the URL, percent-decoded; `None` when absent.
    pub fn username(&self) -> Option<String> {
        let url = self.parse().ok()?;
        let user = url.username();
        if user.is_empty() {
            None
        } else {
            Some(percent_decode(user))
        }
    }

    /// Password embedded in the URL, percent-decoded; `None` when absent.
    pub fn password(&self) -> Option<Secret> {
        let url = self.parse().ok()?;
        url.password().map(|p| Secret(percent_decode(p)))
    }

    /// The URL with user name and password removed (safe to log, usable as a base URL
    /// when credentials are sent separately). Falls back to [`SecretUrl::redacted`] if the
    /// URL does not parse.
    pub fn without_credentials(&self) -> String {
        match self.parse() {
            Ok(mut url) => {
                // Both only fail for URLs that cannot carry credentials at all.
                let _ = url.set_password(None);
                let _ = url.set_username("");
                url.to_string()
            }
            Err(_) => self.redacted(),
        }
    }

    /// The URL with the password (if any) replaced by `[redacted]`.
    ///
    /// Works on the raw text and errs on the side of redacting too much: everything
    /// between the first `:` after `scheme://` and the last `@` is hidden.
    pub fn redacted(&self) -> String {
        redact_url(&self.0)
    }
}

fn redact_url(raw: &str) -> String {
    let Some(scheme_end) = raw.find("://") else {
        // Not an URL we understand: hide it entirely if it could carry credentials.
        return if raw.contains('@') {
            "[redacted]".to_owned()
        } else {
            raw.to_owned()
        };
    };
    let auth_start = scheme_end + 3;
    let rest = &raw[auth_start..];
    let Some(at) = rest.rfind('@') else {
        return raw.to_owned();
    };
    let userinfo = &rest[..at];
    match userinfo.find(':') {
        None => raw.to_owned(),
        Some(colon) => format!(
            "{}{}:[redacted]{}",
            &raw[..auth_start],
            &userinfo[..colon],
            &rest[at..]
        ),
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.redacted())
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl<'de> Deserialize<'de> for SecretUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Secret::deserialize(d).map(|s| SecretUrl::new(s.0))
    }
}

// ---------------------------------------------------------------------------------------
// Enumerations spelled as strings
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Field deserializers
// ---------------------------------------------------------------------------------------

/// Parses `30s`, `5m`, `1h 30m`, `250ms`, or a bare number of seconds (`30`, `1.5`).
fn parse_duration_str(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty duration; write e.g. 30s, 5m, 1h or 250ms".to_owned());
    }
    if t.starts_with('-') {
        return Err(format!("duration `{t}` must not be negative"));
    }
    if let Ok(secs) = t.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    if let Ok(secs) = t.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).map_err(|_| format!("invalid duration `{t}`"));
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("invalid duration `{t}` ({e}); write e.g. 30s, 5m, 1h or 250ms"))
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration such as \"30s\", \"5m\", \"1h\" or a number of seconds")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
        parse_duration_str(v).map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
        u64::try_from(v)
            .map(Duration::from_secs)
            .map_err(|_| E::custom(format!("duration `{v}` must not be negative")))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
        Ok(Duration::from_secs(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Duration, E> {
        Duration::try_from_secs_f64(v)
            .map_err(|_| E::custom(format!("duration `{v}` must be a non-negative number")))
    }
}

fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    d.deserialize_any(DurationVisitor)
}

/// `sink.tls`: MySQL's spelling (`VERIFY_CA`) is accepted too.
fn de_opt_tls<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SinkTls>, D::Error> {
    let Some(s) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    if s.trim().is_empty() {
        return Ok(None);
    }
    s.trim()
        .to_ascii_lowercase()
        .parse()
        .map(Some)
        .map_err(de::Error::custom)
}

/// A duration that may be left out (`None`: the key was not written).
fn de_opt_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
    de_duration(d).map(Some)
}

/// A list of strings, or one comma-separated string (handy in environment overrides).
fn de_string_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct ListVisitor;
    impl<'de> Visitor<'de> for ListVisitor {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of strings or a comma-separated string")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<String>, E> {
            Ok(v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect())
        }
        fn visit_unit<E: de::Error>(self) -> Result<Vec<String>, E> {
            Ok(Vec::new())
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(item) = seq.next_element::<String>()? {
                out.push(item);
            }
            Ok(out)
        }
    }
    d.deserialize_any(ListVisitor)
}

/// Optional text where an empty (or blank) string means "not set".
fn de_opt_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.trim().is_empty()))
}

/// The csv delimiter; the two-character spelling `\t` means a tab.
fn de_delimiter<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    Ok(if s == "\\t" { "\t".to_owned() } else { s })
}

// ---------------------------------------------------------------------------------------
// The configuration tree
// ---------------------------------------------------------------------------------------

/// The whole configuration: one Kafka connection, the HTTP server, the local store, and
/// one or more audits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[kafka]`: how to reach Kafka, shared by every audit.
    #[serde(default)]
    pub kafka: KafkaConfig,
    /// `[server]`: the HTTP endpoint for `/metrics`, `/healthz`, `/readyz` and `/api/*`.
    #[serde(default)]
    pub server: ServerConfig,
    /// `[state]`: the embedded store for gaps and audit progress.
    #[serde(default)]
    pub state: StateConfig,
    /// `[[audits]]`: one entry per (topics → sink table/index) pair. At least one.
    #[serde(default)]
    pub audits: Vec<AuditConfig>,
}

/// `[kafka]`: the Kafka connection shared by all audits.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    /// Bootstrap brokers, comma-separated `host:port` (librdkafka `bootstrap.servers`).
    /// Required.
    pub brokers: String,
    /// The auditor's OWN consumer group (default `gap-auditor`); never the pipeline's.
    /// With several audits each gets `{group_id}.{audit name}` unless it sets its own
    /// `group_id`. The auditor commits only its settled watermark to this group.
    pub group_id: String,
    /// Where to start on the very first run, when the group has no committed offset:
    /// `latest` (default), `earliest`, an RFC 3339 time (`2024-05-01T00:00:00Z`) or a
    /// negative duration (`-1h`).
    pub start: StartPosition,
    /// `read_committed` (default) or `read_uncommitted`: match what the pipeline reads.
    pub isolation_level: IsolationLevel,
    /// Extra librdkafka properties passed as is (SASL, SSL, tuning such as
    /// `fetch.max.bytes`), e.g. `"security.protocol" = "SASL_SSL"`. Every value is treated
    /// as a secret in logs. Refused: only the properties whose change would break the
    /// audit's semantics (`group.id`, `bootstrap.servers`/`metadata.broker.list`,
    /// `enable.auto.commit`, `enable.auto.offset.store`, `auto.offset.reset`,
    /// `isolation.level`); each error names the key to use instead. `session.timeout.ms`,
    /// `heartbeat.interval.ms` and `statistics.interval.ms` may be set here OR with their
    /// dedicated key (`session_timeout`, ...), not both: setting both is an error naming
    /// both keys. Unquoted dotted TOML keys (`sasl.mechanism = "PLAIN"`) work too.
    pub properties: BTreeMap<String, Secret>,
    /// librdkafka properties whose value is read from a file at load time (one trailing
    /// newline trimmed), e.g. `"sasl.password" = "/run/secrets/kafka_password"`. After
    /// loading, the values are in `properties` and this map is empty.
    pub property_files: BTreeMap<String, PathBuf>,
    /// Consumer group session timeout (librdkafka `session.timeout.ms`), default `10s`.
    /// Or `properties."session.timeout.ms"` (milliseconds), not both. Read the value in
    /// effect with [`KafkaConfig::session_timeout`].
    #[serde(deserialize_with = "de_opt_duration")]
    pub session_timeout: Option<Duration>,
    /// Consumer heartbeat interval (librdkafka `heartbeat.interval.ms`), default `1s`;
    /// must be shorter than the session timeout. Or `properties."heartbeat.interval.ms"`,
    /// not both.
    #[serde(deserialize_with = "de_opt_duration")]
    pub heartbeat_interval: Option<Duration>,
    /// How often librdkafka reports statistics (`statistics.interval.ms`), default `1s`;
    /// the source of log start/end offsets (lag, retention deadlines), so it cannot be
    /// turned off. Or `properties."statistics.interval.ms"`, not both.
    #[serde(deserialize_with = "de_opt_duration")]
    pub statistics_interval: Option<Duration>,
}

/// librdkafka timing properties that also have a dedicated key: (property, dedicated key,
/// default). Either one may be set; setting both is a config error.
pub const TIMING_PROPERTIES: &[(&str, &str, Duration)] = &[
    (
        "session.timeout.ms",
        "kafka.session_timeout",
        Duration::from_secs(10),
    ),
    (
        "heartbeat.interval.ms",
        "kafka.heartbeat_interval",
        Duration::from_secs(1),
    ),
    (
        "statistics.interval.ms",
        "kafka.statistics_interval",
        Duration::from_secs(1),
    ),
];

impl KafkaConfig {
    /// The session timeout in effect: `session_timeout`, else the property, else `10s`.
    pub fn session_timeout(&self) -> Duration {
        self.timing(0, self.session_timeout)
    }

    /// The heartbeat interval in effect: `heartbeat_interval`, else the property, else `1s`.
    pub fn heartbeat_interval(&self) -> Duration {
        self.timing(1, self.heartbeat_interval)
    }

    /// The statistics interval in effect: `statistics_interval`, else the property, else `1s`.
    pub fn statistics_interval(&self) -> Duration {
        self.timing(2, self.statistics_interval)
    }

    /// Whether `name` is one of [`TIMING_PROPERTIES`]: the client builder sets those from
    /// the values in effect rather than copying the property.
    pub fn is_timing_property(name: &str) -> bool {
        TIMING_PROPERTIES.iter().any(|(p, _, _)| *p == name)
    }

    fn timing(&self, i: usize, dedicated: Option<Duration>) -> Duration {
        let (property, _, default) = TIMING_PROPERTIES[i];
        dedicated
            .or_else(|| {
                self.properties
                    .get(property)
                    .and_then(|v| parse_millis(v.expose()).ok())
            })
            .unwrap_or(default)
    }
}

/// A librdkafka `*.ms` value: whole milliseconds.
fn parse_millis(v: &str) -> Result<Duration, ()> {
    v.trim()
        .parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|_| ())
}

impl Default for KafkaConfig {
    fn default() -> Self {
        Self {
            brokers: String::new(),
            group_id: "gap-auditor".to_owned(),
            start: StartPosition::Latest,
            isolation_level: IsolationLevel::ReadCommitted,
            properties: BTreeMap::new(),
            property_files: BTreeMap::new(),
            session_timeout: None,
            heartbeat_interval: None,
            statistics_interval: None,
        }
    }
}

/// `[server]`: the HTTP endpoint.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address and port to listen on, default `0.0.0.0:9464`.
    pub listen: SocketAddr,
    /// Optional bearer token required on `/api/*` (`Authorization: Bearer TOKEN`);
    /// `/metrics`, `/healthz` and `/readyz` stay open for scrapers and probes. Prefer
    /// `api_token_file` or `GAP_AUDITOR__SERVER__API_TOKEN`. Unset: `/api/*` is open.
    pub api_token: Option<Secret>,
    /// File holding the API token (read at load, one trailing newline trimmed). Exclusive
    /// with `api_token`; after loading, the value is in `api_token` and this is `None`.
    pub api_token_file: Option<PathBuf>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], 9464)),
            api_token: None,
            api_token_file: None,
        }
    }
}

/// `[state]`: where gaps and audit progress are persisted.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// Directory of the embedded store, default `./gap-auditor-state`. Keep it on
    /// persistent storage: it is what makes restarts exact.
    pub path: PathBuf,
    /// Compacted Kafka topic through which instances of one auditor group hand a
    /// partition's state (settled watermark, ledger, open gaps) to its next owner. Unset:
    /// a single instance per group (see docs/SCALING.md).
    #[serde(deserialize_with = "de_opt_string")]
    pub handover_topic: Option<String>,
}

impl Default for StateConfig {
    fn default() -> Self {
        Self {
            path: PathBuf::from("./gap-auditor-state"),
            handover_topic: None,
        }
    }
}

fn default_grace() -> Duration {
    Duration::from_secs(30)
}
fn default_verify_interval() -> Duration {
    Duration::from_secs(5)
}
fn default_give_up_after() -> Duration {
    Duration::from_secs(24 * 3600)
}
fn default_stall_after() -> Duration {
    Duration::from_secs(300)
}
fn default_batch_size() -> usize {
    1000
}
fn default_max_pending() -> usize {
    2_000_000
}
fn default_max_missing_keys() -> usize {
    1_000_000
}
fn default_query_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_delimiter() -> String {
    ",".to_owned()
}
fn default_partition_column() -> String {
    "partition".to_owned()
}
fn default_offset_column() -> String {
    "offset".to_owned()
}

/// `[[audits]]`: one (topics → sink table/index) pair being checked.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// Unique name of the audit (letters, digits, `_`, `.`, `-`); the `audit` label of
    /// every metric. Required.
    #[serde(default)]
    pub name: String,
    /// Kafka topics the pipeline reads into this sink. Required, at least one.
    #[serde(default, deserialize_with = "de_string_list")]
    pub topics: Vec<String>,
    /// The pipeline's consumer group (e.g. the Flink job's `group.id`). Optional but
    /// recommended: a record is only due once this group has committed past it; without
    /// it, once it was first seen more than `grace` ago.
    #[serde(default, deserialize_with = "de_opt_string")]
    pub pipeline_group: Option<String>,
    /// Overrides the auditor's own consumer group for this audit (see
    /// [`AuditConfig::consumer_group`]).
    #[serde(default, deserialize_with = "de_opt_string")]
    pub group_id: Option<String>,
    /// The sink's visibility delay (checkpoint interval, Doris publish, ES refresh): how
    /// long after the pipeline passed a record it must be visible. Default `30s`.
    #[serde(default = "default_grace", deserialize_with = "de_duration")]
    pub grace: Duration,
    /// How often due records are checked against the sink. Default `5s`, must be > 0.
    #[serde(default = "default_verify_interval", deserialize_with = "de_duration")]
    pub verify_interval: Duration,
    /// Stop re-checking a missing record this long after it was declared missing.
    /// Default `24h`.
    #[serde(default = "default_give_up_after", deserialize_with = "de_duration")]
    pub give_up_after: Duration,
    /// Report the pipeline group as stalled when its committed offset has not moved for
    /// this long while the log grew (lag, not loss). Set it above the pipeline's commit
    /// interval (Flink: the checkpoint interval). Default `5m`.
    #[serde(default = "default_stall_after", deserialize_with = "de_duration")]
    pub stall_after: Duration,
    /// Keys per sink query for `key_columns` / `doc_id`. Default 1000, 1..=100000.
    #[serde(default = "default_batch_size")]
    pub batch_size: usize,
    /// Backpressure: consuming pauses while more records than this are pending.
    /// Default 2000000, at least `batch_size`. Nothing is ever dropped.
    #[serde(default = "default_max_pending")]
    pub max_pending: usize,
    /// `key_columns` / `doc_id`: most keys kept for missing records, across the audit's
    /// partitions, so that they can be re-checked (late arrivals). Beyond it the oldest
    /// missing records stop being re-checked early, as after `give_up_after`: they stay
    /// missing, counted in `gap_auditor_missing_keys_dropped_total`. Default 1000000.
    #[serde(default = "default_max_missing_keys")]
    pub max_missing_keys: usize,
    /// `[audits.record]`: how Kafka record values are decoded and filtered.
    #[serde(default)]
    pub record: RecordConfig,
    /// `[audits.match]`: how a record is found in the sink.
    #[serde(rename = "match")]
    pub matching: MatchConfig,
    /// `[audits.sink]`: the database or index the pipeline writes to.
    pub sink: SinkConfig,
}

/// `[audits.record]`: decoding of record values.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RecordConfig {
    /// `csv` (default), `json` or `raw`.
    pub format: RecordFormat,
    /// csv: the field separator, exactly one character (may be multi-byte UTF-8);
    /// default `,`. `\t` (backslash, t) means a tab.
    #[serde(deserialize_with = "de_delimiter")]
    pub delimiter: String,
    /// csv: honour `"` quoting (RFC 4180). Default `false`: plain split on the delimiter.
    pub quote: bool,
    /// csv: the names of the columns, in order (required). json: optional list of the
    /// fields used (names or JSON pointers `/a/b`).
    #[serde(deserialize_with = "de_string_list")]
    pub fields: Vec<String>,
    /// `[audits.record.filter]`: which decoded records the pipeline is expected to write.
    pub filter: FilterConfig,
    /// `none` (default) or `confluent`: values start with the Schema Registry header.
    /// avro and protobuf are always framed.
    pub framing: Framing,
    /// avro/protobuf: how timestamps are rendered, `sql` (default), `iso8601` or
    /// `epoch_millis`.
    pub timestamp_format: TimestampText,
    /// `[audits.record.schema_registry]`: where avro/protobuf schemas come from.
    pub schema_registry: Option<SchemaRegistryConfig>,
}

impl Default for RecordConfig {
    fn default() -> Self {
        Self {
            format: RecordFormat::Csv,
            delimiter: default_delimiter(),
            quote: false,
            fields: Vec::new(),
            filter: FilterConfig::default(),
            framing: Framing::None,
            timestamp_format: TimestampText::Sql,
            schema_registry: None,
        }
    }
}

/// `[audits.record.schema_registry]`: the Confluent-compatible Schema Registry holding the
/// writer schemas of avro/protobuf records (`GET /schemas/ids/{id}`). Schemas are cached
/// per id for the life of the process.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemaRegistryConfig {
    /// `http(s)://host:8081` (a path prefix is kept). Required. Credentials go in
    /// `username`/`password`, not here.
    pub url: String,
    /// Basic auth user.
    #[serde(default, deserialize_with = "de_opt_string")]
    pub username: Option<String>,
    /// Basic auth password. Prefer `password_file` or the environment
    /// (`GAP_AUDITOR__AUDITS__0__RECORD__SCHEMA_REGISTRY__PASSWORD`).
    #[serde(default)]
    pub password: Option<Secret>,
    /// File holding the password; exclusive with `password`; moved into it at load.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// PEM CA bundle to verify the registry's TLS certificate.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Timeout of one registry request, default `5s`. A schema that cannot be fetched
    /// leaves its records unknown (retried), never filtered.
    #[serde(default = "default_registry_timeout", deserialize_with = "de_duration")]
    pub timeout: Duration,
}

fn default_registry_timeout() -> Duration {
    Duration::from_secs(5)
}

impl SchemaRegistryConfig {
    fn validate(&self, p: &str) -> Result<(), ConfigError> {
        let url: url::Url = match self.url.parse() {
            Ok(u) => u,
            Err(e) => return err(format!("{p}.url"), format!("not a valid URL ({e})")),
        };
        if !matches!(url.scheme(), "http" | "https") {
            return err(format!("{p}.url"), "scheme must be http or https");
        }
        if !url.username().is_empty() || url.password().is_some() {
            return err(
                format!("{p}.url"),
                "must not embed credentials: set username and password (or password_file)",
            );
        }
        if self.password.is_some() && self.password_file.is_some() {
            return err(
                format!("{p}.password_file"),
                "set either password or password_file, not both",
            );
        }
        if self.username.is_none() && (self.password.is_some() || self.password_file.is_some()) {
            return err(format!("{p}.username"), "a password needs a username");
        }
        if self.timeout.is_zero() {
            return err(format!("{p}.timeout"), "must be > 0");
        }
        Ok(())
    }
}

/// `[audits.record.filter]`: records failing the filter are counted as `filtered`, never
/// as missing. Mirror the pipeline's own filter here.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FilterConfig {
    /// csv: a record is expected only with exactly this many fields.
    pub field_count: Option<usize>,
    /// Fields that must be present and non-empty.
    #[serde(deserialize_with = "de_string_list")]
    pub require: Vec<String>,
    /// A record is expected only with at least this many fields.
    pub min_fields: Option<usize>,
}

/// `[audits.match]`: how a record is found in the sink.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchConfig {
    /// `offset_columns`, `key_columns` or `doc_id` (elasticsearch only). Required.
    pub strategy: MatchStrategy,
    /// key_columns: the record fields forming the key.
    #[serde(default, deserialize_with = "de_string_list")]
    pub key: Vec<String>,
    /// key_columns: the sink columns holding those fields, same order; default = `key`.
    #[serde(default, deserialize_with = "de_string_list")]
    pub columns: Vec<String>,
    /// offset_columns: the sink column holding the Kafka partition, default `partition`.
    #[serde(default = "default_partition_column")]
    pub partition_column: String,
    /// offset_columns: the sink column holding the Kafka offset, default `offset`.
    #[serde(default = "default_offset_column")]
    pub offset_column: String,
    /// offset_columns: the sink column holding the topic; required when the audit reads
    /// more than one topic.
    #[serde(default, deserialize_with = "de_opt_string")]
    pub topic_column: Option<String>,
    /// doc_id: template of the document `_id` over `{topic}`, `{partition}`, `{offset}`,
    /// `{key}` (the Kafka key) and record fields; default `{topic}+{partition}+{offset}`.
    #[serde(default, deserialize_with = "de_opt_string")]
    pub id_template: Option<String>,
}

impl MatchConfig {
    /// The sink columns matched against `key`: `columns`, or `key` when empty.
    pub fn sink_columns(&self) -> &[String] {
        if self.columns.is_empty() {
            &self.key
        } else {
            &self.columns
        }
    }

    /// The `doc_id` template, defaulted.
    pub fn id_template(&self) -> &str {
        self.id_template.as_deref().unwrap_or(DEFAULT_ID_TEMPLATE)
    }
}

/// `[audits.sink]`: where the pipeline writes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    /// `doris`, `mysql` or `elasticsearch`. Required.
    pub kind: SinkKind,
    /// doris/mysql: `mysql://user[:password]@host:9030/database`; elasticsearch:
    /// `http(s)://host:9200`. Required. An embedded password is redacted in logs.
    pub url: SecretUrl,
    /// doris/mysql: the table, `table` (database from the url) or `database.table`.
    #[serde(default, deserialize_with = "de_opt_string")]
    pub table: Option<String>,
    /// elasticsearch: the index (or alias).
    #[serde(default, deserialize_with = "de_opt_string")]
    pub index: Option<String>,
    /// User name, when not in the url.
    #[serde(default, deserialize_with = "de_opt_string")]
    pub username: Option<String>,
    /// Password, when not in the url. Prefer `password_file` or the environment
    /// (`GAP_AUDITOR__AUDITS__0__SINK__PASSWORD`).
    #[serde(default)]
    pub password: Option<Secret>,
    /// File holding the password (read at load; trailing newline trimmed). Exclusive
    /// with `password`; after loading, the value is in `password` and this is `None`.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    /// elasticsearch: API key (the base64 `id:key` form), instead of username/password.
    #[serde(default)]
    pub api_key: Option<Secret>,
    /// File holding the API key; exclusive with `api_key`; moved into `api_key` at load.
    #[serde(default)]
    pub api_key_file: Option<PathBuf>,
    /// PEM CA bundle to verify the sink's TLS certificate. Elasticsearch (https url):
    /// trusted besides the system roots. doris/mysql: for `tls = "verify_ca"` or
    /// `"verify_identity"` (the default `tls` once this is set) and for Stream Load over an
    /// https `stream_load_url`; only these CAs are trusted there (MySQL's `--ssl-ca`).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// doris/mysql: TLS on the MySQL protocol, `disabled` | `required` | `verify_ca` |
    /// `verify_identity` (MySQL's `--ssl-mode` names; upper case accepted). Default
    /// `disabled`, or `verify_identity` when `ca_file` is set. Also how Stream Load
    /// verifies an https `stream_load_url` (`required`: not at all; `verify_ca`: no host
    /// name check). Read the mode in effect with [`SinkConfig::tls_mode`].
    #[serde(default, deserialize_with = "de_opt_tls")]
    pub tls: Option<SinkTls>,
    /// doris/mysql: client certificate and key as a PKCS#12 archive (`openssl pkcs12
    /// -export -in client.pem -inkey client.key -out client.p12`), for servers that
    /// require one (`REQUIRE X509`). Needs `tls` other than `disabled`.
    #[serde(default)]
    pub client_identity_file: Option<PathBuf>,
    /// Password of `client_identity_file`, if it has one; prefer the environment
    /// (`GAP_AUDITOR__AUDITS__0__SINK__CLIENT_IDENTITY_PASSWORD`).
    #[serde(default)]
    pub client_identity_password: Option<Secret>,
    /// doris: the FE HTTP address used by `replay --to-sink` (Stream Load), e.g.
    /// `http://127.0.0.1:8030`. Credentials come from username/password, not this url.
    #[serde(default, deserialize_with = "de_opt_string")]
    pub stream_load_url: Option<String>,
    /// Timeout of one sink query, default `10s`. A timed-out query is "unknown", never
    /// "missing".
    #[serde(default = "default_query_timeout", deserialize_with = "de_duration")]
    pub query_timeout: Duration,
}

impl SinkConfig {
    /// The TLS mode in effect (doris/mysql): `tls`, else `verify_identity` when `ca_file`
    /// is set, else `disabled`.
    pub fn tls_mode(&self) -> SinkTls {
        match (self.tls, &self.ca_file) {
            (Some(mode), _) => mode,
            (None, Some(_)) => SinkTls::VerifyIdentity,
            (None, None) => SinkTls::Disabled,
        }
    }

    /// The user name to authenticate with: `username`, else the url's.
    pub fn effective_username(&self) -> Option<String> {
        self.username.clone().or_else(|| self.url.username())
    }

    /// The password to authenticate with: `password` (or `password_file`, once loaded),
    /// else the url's.
    pub fn effective_password(&self) -> Option<Secret> {
        self.password.clone().or_else(|| self.url.password())
    }
}

impl AuditConfig {
    /// The auditor's own consumer group for this audit: the `group_id` override, else
    /// `kafka.group_id` when it is the only audit, else `"{kafka.group_id}.{name}"`.
    pub fn consumer_group(&self, kafka: &KafkaConfig, audit_count: usize) -> String {
        if let Some(group) = &self.group_id {
            return group.clone();
        }
        if audit_count <= 1 {
            kafka.group_id.clone()
        } else {
            format!("{}.{}", kafka.group_id, self.name)
        }
    }
}

// ---------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------

impl Config {
    /// Loads the file (TOML or YAML by extension; a missing explicitly given file is an
    /// error; `None` searches [`DEFAULT_CONFIG_PATHS`]), applies the process environment
    /// overrides `GAP_AUDITOR__SECTION__KEY`, reads `*_file` secrets and validates.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        let mut env = Vec::new();
        for (name, value) in std::env::vars_os() {
            let Some(name) = name.to_str() else { continue };
            if !has_env_prefix(name) {
                continue;
            }
            match value.into_string() {
                Ok(value) => env.push((name.to_owned(), value)),
                Err(_) => return err(name, "value is not valid UTF-8"),
            }
        }
        Self::load_with_env(path, env)
    }

    /// Like [`Config::load`], with the environment given explicitly (variables without
    /// the `GAP_AUDITOR__` prefix are ignored).
    pub fn load_with_env<I>(path: Option<&Path>, env: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let defaults: Vec<PathBuf> = DEFAULT_CONFIG_PATHS.iter().map(PathBuf::from).collect();
        load_from(path, &defaults, env)
    }

    /// Parses a TOML document and validates it (no environment overrides). `*_file`
    /// secrets are read.
    pub fn from_toml_str(s: &str) -> Result<Config, ConfigError> {
        Self::from_str_format(s, FileFormat::Toml, "(toml)")
    }

    /// Parses a YAML document and validates it (no environment overrides).
    pub fn from_yaml_str(s: &str) -> Result<Config, ConfigError> {
        Self::from_str_format(s, FileFormat::Yaml, "(yaml)")
    }

    fn from_str_format(s: &str, format: FileFormat, origin: &str) -> Result<Config, ConfigError> {
        let mut tree = parse_text(s, format, origin)?;
        prepare_tree(&mut tree);
        from_tree(tree)
    }

    /// The audit named `name`.
    pub fn audit(&self, name: &str) -> Option<&AuditConfig> {
        self.audits.iter().find(|a| a.name == name)
    }

    /// The auditor's own consumer group for `audit` (see [`AuditConfig::consumer_group`]).
    pub fn consumer_group(&self, audit: &AuditConfig) -> String {
        audit.consumer_group(&self.kafka, self.audits.len())
    }
}

fn has_env_prefix(name: &str) -> bool {
    name.len() >= ENV_PREFIX.len()
        && name.is_char_boundary(ENV_PREFIX.len())
        && name[..ENV_PREFIX.len()].eq_ignore_ascii_case(ENV_PREFIX)
}

fn load_from<I>(path: Option<&Path>, defaults: &[PathBuf], env: I) -> Result<Config, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let file = match path {
        Some(p) => Some(p.to_path_buf()),
        None => defaults.iter().find(|p| p.is_file()).cloned(),
    };
    let mut tree = match &file {
        Some(p) => read_config_file(p)?,
        None => Map::new(),
    };
    prepare_tree(&mut tree);
    apply_env(&mut tree, env)?;
    from_tree(tree).map_err(|mut e| {
        if file.is_none() {
            let tried: Vec<String> = defaults.iter().map(|p| p.display().to_string()).collect();
            e.message.push_str(&format!(
                " (no config file found: tried {}; pass -c FILE)",
                tried.join(", ")
            ));
        }
        e
    })
}

fn read_config_file(path: &Path) -> Result<Map<String, CValue>, ConfigError> {
    let name = path.display().to_string();
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let format = match ext.as_deref() {
        Some("toml") => FileFormat::Toml,
        Some("yaml") | Some("yml") => FileFormat::Yaml,
        _ => {
            return err(
                name,
                "unknown config format: use a .toml, .yaml or .yml file",
            );
        }
    };
    let text = match std::fs::read(path) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(_) => return err(name, "file is not valid UTF-8"),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return err(name, "config file not found");
        }
        Err(e) => return err(name, format!("cannot read config file: {e}")),
    };
    parse_text(&text, format, &name)
}

fn parse_text(
    text: &str,
    format: FileFormat,
    origin: &str,
) -> Result<Map<String, CValue>, ConfigError> {
    Format::parse(&format, None, text)
        .map_err(|e| ConfigError::new(origin, strip_source_excerpts(&e.to_string())))
}

/// Parser errors quote the offending source line, which may hold a secret: keep only the
/// position and the explanation.
fn strip_source_excerpts(message: &str) -> String {
    let kept: Vec<&str> = message
        .lines()
        .filter(|line| {
            let t = line.trim_start();
            let digits = t.chars().take_while(char::is_ascii_digit).count();
            let after = t[digits..].trim_start();
            let is_excerpt = after.starts_with('|') && (digits > 0 || t.starts_with('|'));
            !is_excerpt && !t.is_empty()
        })
        .map(str::trim)
        .collect();
    kept.join("; ")
}

/// Normalizes the raw tree: drops `null` entries of tables (YAML `key:` with no value
/// means "not set") and flattens nested tables under `kafka.properties` /
/// `kafka.property_files` into dotted librdkafka keys.
fn prepare_tree(tree: &mut Map<String, CValue>) {
    prune_nil(tree);
    if let Some(ValueKind::Table(kafka)) = tree.get_mut("kafka").map(|v| &mut v.kind) {
        for section in ["properties", "property_files"] {
            if let Some(ValueKind::Table(props)) = kafka.get_mut(section).map(|v| &mut v.kind) {
                let mut flat = Map::new();
                flatten_into(&mut flat, "", std::mem::take(props));
                *props = flat;
            }
        }
    }
}

fn prune_nil(table: &mut Map<String, CValue>) {
    table.retain(|_, v| !matches!(v.kind, ValueKind::Nil));
    for value in table.values_mut() {
        prune_nil_value(value);
    }
}

fn prune_nil_value(value: &mut CValue) {
    match &mut value.kind {
        ValueKind::Table(t) => prune_nil(t),
        ValueKind::Array(items) => items.iter_mut().for_each(prune_nil_value),
        _ => {}
    }
}

fn flatten_into(out: &mut Map<String, CValue>, prefix: &str, table: Map<String, CValue>) {
    for (key, value) in table {
        let full = if prefix.is_empty() {
            key
        } else {
            format!("{prefix}.{key}")
        };
        match value.kind {
            ValueKind::Table(inner) => flatten_into(out, &full, inner),
            _ => {
                out.insert(full, value);
            }
        }
    }
}

/// Applies `GAP_AUDITOR__A__B__0__C=value` overrides (see the module docs).
fn apply_env<I>(tree: &mut Map<String, CValue>, env: I) -> Result<(), ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let mut vars: Vec<(String, String)> = env
        .into_iter()
        .filter(|(name, _)| has_env_prefix(name))
        .collect();
    vars.sort();
    let mut root = CValue::new(None, ValueKind::Table(std::mem::take(tree)));
    let result = vars.into_iter().try_for_each(|(name, value)| {
        let rest = &name[ENV_PREFIX.len()..];
        let mut segments: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
        if segments.iter().any(|s| s.is_empty()) {
            return err(
                name.as_str(),
                "empty key segment: separate keys with exactly `__`",
            );
        }
        if segments.len() >= 3
            && segments[0] == "kafka"
            && (segments[1] == "properties" || segments[1] == "property_files")
        {
            let property = segments[2..].join(".").replace('_', ".");
            segments.truncate(2);
            segments.push(property);
        }
        set_path(&mut root, &segments, 0, value, &name)
    });
    if let ValueKind::Table(t) = root.kind {
        *tree = t;
    }
    result
}

fn set_path(
    node: &mut CValue,
    segments: &[String],
    depth: usize,
    value: String,
    var: &str,
) -> Result<(), ConfigError> {
    let Some(segment) = segments.get(depth) else {
        *node = CValue::new(None, ValueKind::String(value));
        return Ok(());
    };
    if matches!(node.kind, ValueKind::Nil) {
        node.kind = if segment.parse::<usize>().is_ok() {
            ValueKind::Array(Vec::new())
        } else {
            ValueKind::Table(Map::new())
        };
    }
    let here = segments[..depth].join(".");
    match &mut node.kind {
        ValueKind::Table(map) => {
            let child = map
                .entry(segment.clone())
                .or_insert_with(|| CValue::new(None, ValueKind::Nil));
            set_path(child, segments, depth + 1, value, var)
        }
        ValueKind::Array(items) => {
            let Ok(index) = segment.parse::<usize>() else {
                return err(
                    var,
                    format!("`{here}` is a list: the next segment must be an index, e.g. `__0__`"),
                );
            };
            if index > MAX_ENV_INDEX {
                return err(var, format!("index {index} is too large"));
            }
            while items.len() <= index {
                items.push(CValue::new(None, ValueKind::Nil));
            }
            set_path(&mut items[index], segments, depth + 1, value, var)
        }
        _ => err(
            var,
            format!("`{here}` is a single value, not a section: it has no key `{segment}`"),
        ),
    }
}

fn from_tree(tree: Map<String, CValue>) -> Result<Config, ConfigError> {
    let mut config: Config = CValue::new(None, ValueKind::Table(tree))
        .try_deserialize()
        .map_err(from_config_crate_error)?;
    config.normalize();
    config.validate()?;
    config.read_secret_files()?;
    Ok(config)
}

/// The config crate builds key paths like `audits[0]grace`; restore the dot.
fn fix_key_path(key: &str) -> String {
    let mut out = String::with_capacity(key.len() + 4);
    let mut chars = key.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == ']' && chars.peek().is_some_and(|n| *n != '[' && *n != '.') {
            out.push('.');
        }
    }
    out
}

fn key_or_root(key: Option<String>) -> String {
    match key {
        Some(k) if !k.is_empty() => fix_key_path(&k),
        _ => ROOT_PATH.to_owned(),
    }
}

fn from_config_crate_error(e: config::ConfigError) -> ConfigError {
    match e {
        config::ConfigError::NotFound(key) => {
            ConfigError::new(key_or_root(Some(key)), "is required")
        }
        config::ConfigError::Type {
            unexpected,
            expected,
            key,
            ..
        } => ConfigError::new(
            key_or_root(key),
            format!("invalid type: {unexpected}, expected {expected}"),
        ),
        config::ConfigError::At { error, key, .. } => {
            let inner = from_config_crate_error(*error);
            let path = match key {
                Some(k) if !k.is_empty() => fix_key_path(&k),
                _ => inner.path.clone(),
            };
            ConfigError::new(path, inner.message)
        }
        config::ConfigError::Message(message) => ConfigError::new(ROOT_PATH, message),
        other => ConfigError::new(ROOT_PATH, other.to_string()),
    }
}

impl Config {
    /// Fills defaults that depend on other keys (`match.columns` = `match.key`,
    /// `match.id_template` for doc_id).
    fn normalize(&mut self) {
        for audit in &mut self.audits {
            let m = &mut audit.matching;
            if m.columns.is_empty() {
                m.columns = m.key.clone();
            }
            if m.strategy == MatchStrategy::DocId && m.id_template.is_none() {
                m.id_template = Some(DEFAULT_ID_TEMPLATE.to_owned());
            }
        }
    }

    /// Reads `*_file` secrets into their value keys and checks `ca_file` and
    /// `client_identity_file` are readable.
    fn read_secret_files(&mut self) -> Result<(), ConfigError> {
        if let Some(path) = self.server.api_token_file.take() {
            let token = read_secret_file("server.api_token_file", &path)?;
            check_api_token("server.api_token_file", &token)?;
            self.server.api_token = Some(token);
        }
        let files = std::mem::take(&mut self.kafka.property_files);
        for (key, path) in files {
            let value = read_secret_file(&format!("kafka.property_files[\"{key}\"]"), &path)?;
            self.kafka.properties.insert(key, value);
        }
        for (i, audit) in self.audits.iter_mut().enumerate() {
            let sink = &mut audit.sink;
            if let Some(path) = sink.password_file.take() {
                sink.password = Some(read_secret_file(
                    &format!("audits[{i}].sink.password_file"),
                    &path,
                )?);
            }
            if let Some(path) = sink.api_key_file.take() {
                sink.api_key = Some(read_secret_file(
                    &format!("audits[{i}].sink.api_key_file"),
                    &path,
                )?);
            }
            for (key, file) in [
                ("ca_file", &sink.ca_file),
                ("client_identity_file", &sink.client_identity_file),
            ] {
                if let Some(path) = file
                    && let Err(e) = std::fs::File::open(path)
                {
                    return err(
                        format!("audits[{i}].sink.{key}"),
                        format!("cannot read {}: {e}", path.display()),
                    );
                }
            }
            if let Some(reg) = &mut audit.record.schema_registry {
                let p = format!("audits[{i}].record.schema_registry");
                if let Some(path) = reg.password_file.take() {
                    if reg.password.is_some() {
                        return err(
                            format!("{p}.password_file"),
                            "set either password or password_file, not both",
                        );
                    }
                    reg.password = Some(read_secret_file(&format!("{p}.password_file"), &path)?);
                }
                if let Some(path) = &reg.ca_file
                    && let Err(e) = std::fs::File::open(path)
                {
                    return err(
                        format!("{p}.ca_file"),
                        format!("cannot read {}: {e}", path.display()),
                    );
                }
            }
        }
        Ok(())
    }
}

/// Reads a secret file. Errors name the key and the file, never the content.
fn read_secret_file(key: &str, path: &Path) -> Result<Secret, ConfigError> {
    let bytes = std::fs::read(path)
        .map_err(|e| ConfigError::new(key, format!("cannot read {}: {e}", path.display())))?;
    let mut text = String::from_utf8(bytes)
        .map_err(|_| ConfigError::new(key, format!("{} is not valid UTF-8", path.display())))?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    Ok(Secret(text))
}

// ---------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------

/// librdkafka properties the auditor sets itself because the audit's semantics depend on
/// them (which brokers and group, offsets moved only by its own commits, what it reads),
/// with the key to use instead. Every other property, tuning included, passes through.
const MANAGED_PROPERTIES: &[(&str, &str)] = &[
    ("bootstrap.servers", "use kafka.brokers"),
    ("metadata.broker.list", "use kafka.brokers"),
    ("group.id", "use kafka.group_id or audits[].group_id"),
    (
        "enable.auto.commit",
        "gap-auditor commits only its settled watermark",
    ),
    (
        "enable.auto.offset.store",
        "gap-auditor commits only its settled watermark",
    ),
    ("auto.offset.reset", "use kafka.start"),
    ("isolation.level", "use kafka.isolation_level"),
];

const MAX_BATCH_SIZE: usize = 100_000;

fn is_valid_audit_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

fn topic_problem(topic: &str) -> Option<String> {
    if topic.is_empty() {
        return Some("topic name must not be empty".to_owned());
    }
    if topic.len() > 249 {
        return Some(format!(
            "topic name is longer than 249 characters ({})",
            topic.len()
        ));
    }
    if topic == "." || topic == ".." {
        return Some(format!("`{topic}` is not a valid topic name"));
    }
    if !topic
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Some(format!(
            "`{topic}` is not a valid topic name (letters, digits, `.`, `_`, `-`)"
        ));
    }
    None
}

/// A SQL identifier (column, table or database name) that the sink quotes with backticks.
fn identifier_problem(name: &str) -> Option<String> {
    if name.trim().is_empty() {
        return Some("must not be empty".to_owned());
    }
    if name.contains('`') || name.chars().any(char::is_control) {
        return Some(format!(
            "`{}` is not a usable identifier (no backticks or control characters)",
            name.escape_default()
        ));
    }
    None
}

fn check_identifier(path: &str, name: &str) -> Result<(), ConfigError> {
    match identifier_problem(name) {
        Some(problem) => err(path, problem),
        None => Ok(()),
    }
}

/// Placeholders of an id template, or what is wrong with it.
fn template_placeholders(template: &str) -> Result<Vec<&str>, String> {
    let mut names = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with('}') {
            return Err("has a `}` without a matching `{`".to_owned());
        }
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            return Err("has a `{` without a matching `}`".to_owned());
        };
        let name = &after[..close];
        if name.is_empty() || name.contains('{') {
            return Err("has an empty or nested `{}` placeholder".to_owned());
        }
        names.push(name);
        rest = &after[close + 1..];
    }
    Ok(names)
}

fn check_duration_ms(path: &str, d: Duration) -> Result<(), ConfigError> {
    if d < Duration::from_millis(1) {
        return err(path, "must be at least 1ms");
    }
    if d.as_millis() > i32::MAX as u128 {
        return err(path, "is too long for librdkafka (max ~24 days)");
    }
    Ok(())
}

impl Config {
    /// Checks every rule; the first problem wins and names its key path. Pure: reads no
    /// files, connects to nothing.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.audits.is_empty() {
            return err("audits", "at least one [[audits]] is required");
        }
        self.validate_kafka()?;
        self.server.validate()?;
        if self.state.path.as_os_str().is_empty() {
            return err("state.path", "must not be empty");
        }
        if let Some(t) = &self.state.handover_topic {
            if let Some(problem) = topic_problem(t) {
                return err("state.handover_topic", problem);
            }
            if let Some(i) = self.audits.iter().position(|a| a.topics.contains(t)) {
                return err(
                    "state.handover_topic",
                    format!(
                        "`{t}` is audited by audits[{i}]; the handover topic must be a topic of its own"
                    ),
                );
            }
        }
        let mut names: HashMap<&str, usize> = HashMap::new();
        let mut groups: HashMap<String, usize> = HashMap::new();
        for (i, audit) in self.audits.iter().enumerate() {
            let p = format!("audits[{i}]");
            audit.validate(&p)?;
            if let Some(first) = names.insert(audit.name.as_str(), i) {
                return err(
                    format!("{p}.name"),
                    format!(
                        "duplicate audit name `{}` (also audits[{first}])",
                        audit.name
                    ),
                );
            }
            let group = self.consumer_group(audit);
            if audit.pipeline_group.as_deref() == Some(group.as_str()) {
                return err(
                    format!("{p}.pipeline_group"),
                    format!(
                        "`{group}` is also the auditor's own consumer group; the auditor must \
                         never share the pipeline's group (set kafka.group_id or {p}.group_id)"
                    ),
                );
            }
            if let Some(first) = groups.insert(group.clone(), i) {
                return err(
                    format!("{p}.group_id"),
                    format!("consumer group `{group}` is already used by audits[{first}]"),
                );
            }
        }
        Ok(())
    }

    /// Checks the timing `i` of [`TIMING_PROPERTIES`] and names the key its value comes
    /// from: the dedicated key or the property, never both.
    fn timing_source(&self, i: usize, dedicated: Option<Duration>) -> Result<String, ConfigError> {
        let k = &self.kafka;
        let (property, key, _) = TIMING_PROPERTIES[i];
        if k.property_files.contains_key(property) {
            return err(
                format!("kafka.property_files[\"{property}\"]"),
                format!("is not a secret: set it in kafka.properties or as {key}"),
            );
        }
        let path = format!("kafka.properties[\"{property}\"]");
        match (dedicated, k.properties.get(property)) {
            (Some(_), Some(_)) => err(path, format!("is also set as {key}; set one of them")),
            (Some(d), None) => {
                check_duration_ms(key, d)?;
                Ok(key.to_owned())
            }
            (None, Some(v)) => {
                // Not quoted: every property value is treated as a secret.
                let d = parse_millis(v.expose()).map_err(|()| {
                    ConfigError::new(&path, "must be a whole number of milliseconds")
                })?;
                check_duration_ms(&path, d)?;
                Ok(path)
            }
            (None, None) => Ok(key.to_owned()),
        }
    }

    fn validate_kafka(&self) -> Result<(), ConfigError> {
        let k = &self.kafka;
        if k.brokers.trim().is_empty() {
            return err(
                "kafka.brokers",
                "is required (comma-separated host:port list)",
            );
        }
        if k.brokers.split(',').any(|b| b.trim().is_empty()) {
            return err("kafka.brokers", "has an empty entry in the broker list");
        }
        if k.group_id.trim().is_empty() {
            return err("kafka.group_id", "must not be empty");
        }
        let session = self.timing_source(0, k.session_timeout)?;
        let heartbeat = self.timing_source(1, k.heartbeat_interval)?;
        self.timing_source(2, k.statistics_interval)?;
        if k.heartbeat_interval() >= k.session_timeout() {
            return err(heartbeat, format!("must be shorter than {session}"));
        }
        let keys = (k.properties.keys().map(|key| ("properties", key)))
            .chain(k.property_files.keys().map(|key| ("property_files", key)));
        for (section, key) in keys {
            // Name the map the key was written in, so the user edits the right line.
            let path = format!("kafka.{section}[\"{key}\"]");
            if key.trim().is_empty() {
                return err(path, "property name must not be empty");
            }
            if let Some((_, instead)) = MANAGED_PROPERTIES
                .iter()
                .find(|(name, _)| key.eq_ignore_ascii_case(name))
            {
                return err(path, format!("is managed by gap-auditor; {instead}"));
            }
        }
        if let Some(key) = k
            .property_files
            .keys()
            .find(|key| k.properties.contains_key(*key))
        {
            return err(
                format!("kafka.property_files[\"{key}\"]"),
                "is also set in kafka.properties; set it in one place",
            );
        }
        Ok(())
    }
}

/// A bearer token must be non-empty and a valid HTTP header value (visible ASCII), or no
/// client could ever send it. Messages never quote the token.
fn check_api_token(path: &str, token: &Secret) -> Result<(), ConfigError> {
    let t = token.expose();
    if t.is_empty() {
        return err(path, "must not be empty (omit it to leave /api open)");
    }
    if !t.bytes().all(|b| b.is_ascii_graphic()) {
        return err(
            path,
            "must be printable ASCII without spaces (it is sent in an HTTP header)",
        );
    }
    Ok(())
}

impl ServerConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        if self.api_token.is_some() && self.api_token_file.is_some() {
            return err(
                "server.api_token_file",
                "set either api_token or api_token_file, not both",
            );
        }
        if let Some(token) = &self.api_token {
            check_api_token("server.api_token", token)?;
        }
        Ok(())
    }
}

impl AuditConfig {
    fn validate(&self, p: &str) -> Result<(), ConfigError> {
        if self.name.is_empty() {
            return err(format!("{p}.name"), "is required");
        }
        if !is_valid_audit_name(&self.name) {
            return err(
                format!("{p}.name"),
                format!(
                    "`{}` is not a valid audit name (letters, digits, `_`, `.`, `-`)",
                    self.name.escape_default()
                ),
            );
        }
        if self.topics.is_empty() {
            return err(format!("{p}.topics"), "at least one topic is required");
        }
        for (j, topic) in self.topics.iter().enumerate() {
            if let Some(problem) = topic_problem(topic) {
                return err(format!("{p}.topics[{j}]"), problem);
            }
            if self.topics[..j].contains(topic) {
                return err(
                    format!("{p}.topics[{j}]"),
                    format!("duplicate topic `{topic}`"),
                );
            }
        }
        if self.verify_interval.is_zero() {
            return err(format!("{p}.verify_interval"), "must be > 0");
        }
        if self.stall_after.is_zero() {
            return err(format!("{p}.stall_after"), "must be > 0");
        }
        if self.give_up_after.is_zero() {
            return err(format!("{p}.give_up_after"), "must be > 0");
        }
        if self.batch_size == 0 || self.batch_size > MAX_BATCH_SIZE {
            return err(
                format!("{p}.batch_size"),
                format!(
                    "must be between 1 and {MAX_BATCH_SIZE}, got {}",
                    self.batch_size
                ),
            );
        }
        if self.max_pending < self.batch_size {
            return err(
                format!("{p}.max_pending"),
                format!(
                    "must be at least batch_size ({}), got {}",
                    self.batch_size, self.max_pending
                ),
            );
        }
        self.record.validate(&format!("{p}.record"))?;
        self.validate_match(p)?;
        self.sink.validate(&format!("{p}.sink"))
    }

    fn validate_match(&self, p: &str) -> Result<(), ConfigError> {
        let m = &self.matching;
        let mp = format!("{p}.match");
        let csv = self.record.format == RecordFormat::Csv;
        match m.strategy {
            MatchStrategy::KeyColumns => {
                if m.key.is_empty() {
                    return err(
                        format!("{mp}.key"),
                        "strategy key_columns needs at least one record field in `key`",
                    );
                }
                for (j, field) in m.key.iter().enumerate() {
                    if field.trim().is_empty() {
                        return err(format!("{mp}.key[{j}]"), "must not be empty");
                    }
                    if csv && !self.record.fields.contains(field) {
                        return err(
                            format!("{mp}.key[{j}]"),
                            format!("field `{field}` is not in {p}.record.fields"),
                        );
                    }
                }
                let columns = m.sink_columns();
                if columns.len() != m.key.len() {
                    return err(
                        format!("{mp}.columns"),
                        format!(
                            "has {} entries but match.key has {}; they pair up in order",
                            columns.len(),
                            m.key.len()
                        ),
                    );
                }
                for (j, column) in columns.iter().enumerate() {
                    check_identifier(&format!("{mp}.columns[{j}]"), column)?;
                }
            }
            MatchStrategy::OffsetColumns => {
                check_identifier(&format!("{mp}.partition_column"), &m.partition_column)?;
                check_identifier(&format!("{mp}.offset_column"), &m.offset_column)?;
                if let Some(topic_column) = &m.topic_column {
                    check_identifier(&format!("{mp}.topic_column"), topic_column)?;
                } else if self.topics.len() > 1 {
                    return err(
                        format!("{mp}.topic_column"),
                        "is required when the audit reads more than one topic (offsets of \
                         different topics overlap)",
                    );
                }
            }
            MatchStrategy::DocId => {
                if self.sink.kind != SinkKind::Elasticsearch {
                    return err(
                        format!("{mp}.strategy"),
                        "strategy doc_id needs sink.kind = elasticsearch",
                    );
                }
                let template = m.id_template();
                let names = template_placeholders(template)
                    .map_err(|problem| ConfigError::new(format!("{mp}.id_template"), problem))?;
                if names.is_empty() {
                    return err(
                        format!("{mp}.id_template"),
                        "must contain at least one placeholder such as {offset}",
                    );
                }
                for name in names {
                    let builtin = matches!(name, "topic" | "partition" | "offset" | "key");
                    if !builtin && csv && !self.record.fields.iter().any(|f| f == name) {
                        return err(
                            format!("{mp}.id_template"),
                            format!(
                                "placeholder {{{name}}} is neither topic, partition, offset, key \
                                 nor a field of {p}.record.fields"
                            ),
                        );
                    }
                }
            }
        }
        Ok(())
    }
}

impl RecordConfig {
    fn validate(&self, p: &str) -> Result<(), ConfigError> {
        let schema_format = matches!(self.format, RecordFormat::Avro | RecordFormat::Protobuf);
        match &self.schema_registry {
            Some(r) => r.validate(&format!("{p}.schema_registry"))?,
            None if schema_format => {
                return err(
                    format!("{p}.schema_registry.url"),
                    format!("format {} needs the schema registry", self.format.as_str()),
                );
            }
            None => {}
        }
        if schema_format && !self.fields.is_empty() {
            return err(
                format!("{p}.fields"),
                format!(
                    "format {} names its fields in the writer schema: address them by name or /pointer, without fields",
                    self.format.as_str()
                ),
            );
        }
        for (j, field) in self.fields.iter().enumerate() {
            if field.trim().is_empty() {
                return err(format!("{p}.fields[{j}]"), "must not be empty");
            }
            if self.fields[..j].contains(field) {
                return err(
                    format!("{p}.fields[{j}]"),
                    format!("duplicate field `{field}`"),
                );
            }
        }
        if self.format == RecordFormat::Csv {
            if self.fields.is_empty() {
                return err(
                    format!("{p}.fields"),
                    "format csv needs the column names, in order",
                );
            }
            let mut chars = self.delimiter.chars();
            let delimiter = match (chars.next(), chars.next()) {
                (Some(c), None) => c,
                _ => {
                    return err(
                        format!("{p}.delimiter"),
                        format!(
                            "must be exactly one character for format csv, got {}",
                            self.delimiter.chars().count()
                        ),
                    );
                }
            };
            if delimiter == '\n' || delimiter == '\r' {
                return err(format!("{p}.delimiter"), "must not be a line break");
            }
            if self.quote && delimiter == '"' {
                return err(format!("{p}.delimiter"), "cannot be `\"` when quote = true");
            }
        }
        let f = &self.filter;
        let fp = format!("{p}.filter");
        if let Some(count) = f.field_count {
            if count == 0 {
                return err(format!("{fp}.field_count"), "must be > 0");
            }
            if self.format == RecordFormat::Csv && count < self.fields.len() {
                return err(
                    format!("{fp}.field_count"),
                    format!(
                        "{count} is less than the {} names in {p}.fields",
                        self.fields.len()
                    ),
                );
            }
        }
        if let Some(min) = f.min_fields {
            if min == 0 {
                return err(
                    format!("{fp}.min_fields"),
                    "must be > 0 (omit it to disable)",
                );
            }
            if let Some(count) = f.field_count
                && min > count
            {
                return err(
                    format!("{fp}.min_fields"),
                    format!("{min} is more than field_count ({count})"),
                );
            }
        }
        for (j, field) in f.require.iter().enumerate() {
            if field.trim().is_empty() {
                return err(format!("{fp}.require[{j}]"), "must not be empty");
            }
            if self.format == RecordFormat::Csv && !self.fields.contains(field) {
                return err(
                    format!("{fp}.require[{j}]"),
                    format!("field `{field}` is not in {p}.fields"),
                );
            }
        }
        Ok(())
    }
}

/// mysql_async's own TLS url parameters: TLS is configured with `sink.tls` instead, so one
/// setting decides.
const URL_TLS_PARAMS: &[&str] = &[
    "require_ssl",
    "verify_ca",
    "verify_identity",
    "built_in_roots",
];

impl SinkConfig {
    /// `tls`, `ca_file` and the client identity of a doris/mysql sink agree.
    fn validate_sql_tls(&self, p: &str, url: &url::Url) -> Result<(), ConfigError> {
        if let Some((name, _)) = url
            .query_pairs()
            .find(|(name, _)| URL_TLS_PARAMS.contains(&name.as_ref()))
        {
            return err(
                format!("{p}.url"),
                format!("TLS is set with {p}.tls, not the url parameter `{name}`"),
            );
        }
        let mode = self.tls_mode();
        if self.ca_file.is_some() {
            match mode {
                SinkTls::Disabled => {
                    return err(
                        format!("{p}.ca_file"),
                        format!(
                            "is set but {p}.tls is \"disabled\": set tls = \"verify_ca\" or \
                             \"verify_identity\", or remove ca_file"
                        ),
                    );
                }
                SinkTls::Required => {
                    return err(
                        format!("{p}.ca_file"),
                        format!(
                            "is set but {p}.tls = \"required\" does not verify the server: \
                             use \"verify_ca\" or \"verify_identity\""
                        ),
                    );
                }
                SinkTls::VerifyCa | SinkTls::VerifyIdentity => {}
            }
        }
        if self.client_identity_file.is_some() && mode == SinkTls::Disabled {
            return err(
                format!("{p}.client_identity_file"),
                format!("needs {p}.tls other than \"disabled\""),
            );
        }
        if self.client_identity_password.is_some() && self.client_identity_file.is_none() {
            return err(
                format!("{p}.client_identity_password"),
                "is set without client_identity_file",
            );
        }
        Ok(())
    }

    fn validate(&self, p: &str) -> Result<(), ConfigError> {
        let url_path = format!("{p}.url");
        let url = match self.url.parse() {
            Ok(url) => url,
            Err(e) => return err(url_path, format!("not a valid URL ({e})")),
        };
        let scheme = url.scheme().to_ascii_lowercase();
        let expected: &[&str] = if self.kind.is_sql() {
            &["mysql"]
        } else {
            &["http", "https"]
        };
        if !matches!(scheme.as_str(), "mysql" | "http" | "https") {
            return err(
                url_path,
                format!("scheme must be mysql, http or https (got `{scheme}`)"),
            );
        }
        if !expected.contains(&scheme.as_str()) {
            return err(
                url_path,
                format!(
                    "scheme must be mysql, http or https, matching sink.kind: kind {} needs {}, \
                     got {scheme}",
                    self.kind,
                    if self.kind.is_sql() {
                        "mysql://"
                    } else {
                        "http:// or https://"
                    }
                ),
            );
        }
        if url.host_str().is_none_or(str::is_empty) {
            return err(url_path, "has no host");
        }
        let url_user = self.url.username();
        if let (Some(user), Some(from_url)) = (&self.username, &url_user)
            && user != from_url
        {
            return err(
                format!("{p}.username"),
                "differs from the user name in the url; set it in one place",
            );
        }
        if self.password.is_some() && self.password_file.is_some() {
            return err(
                format!("{p}.password_file"),
                "set either password or password_file, not both",
            );
        }
        if url.password().is_some() && (self.password.is_some() || self.password_file.is_some()) {
            let key = if self.password.is_some() {
                "password"
            } else {
                "password_file"
            };
            return err(
                format!("{p}.{key}"),
                "the url already carries a password; set it in one place",
            );
        }
        if self.api_key.is_some() && self.api_key_file.is_some() {
            return err(
                format!("{p}.api_key_file"),
                "set either api_key or api_key_file, not both",
            );
        }
        let has_api_key = self.api_key.is_some() || self.api_key_file.is_some();
        if self.query_timeout.is_zero() {
            return err(format!("{p}.query_timeout"), "must be > 0");
        }
        if self.kind.is_sql() {
            if self.index.is_some() {
                return err(
                    format!("{p}.index"),
                    format!("applies to elasticsearch; kind {} uses `table`", self.kind),
                );
            }
            if has_api_key {
                return err(
                    format!("{p}.api_key"),
                    format!("applies to elasticsearch only, not kind {}", self.kind),
                );
            }
            let table_path = format!("{p}.table");
            let Some(table) = &self.table else {
                return err(table_path, format!("is required for kind {}", self.kind));
            };
            let parts: Vec<&str> = table.split('.').collect();
            if parts.len() > 2 {
                return err(table_path, "must be `table` or `database.table`");
            }
            for part in &parts {
                check_identifier(&table_path, part)?;
            }
            let database_in_url = url.path().trim_matches('/');
            if parts.len() == 1 && database_in_url.is_empty() {
                return err(
                    table_path,
                    format!(
                        "`{table}` names no database: put it in the url \
                         (mysql://host:9030/database) or write database.table"
                    ),
                );
            }
            self.validate_sql_tls(p, &url)?;
            if let Some(stream_load) = &self.stream_load_url {
                let sp = format!("{p}.stream_load_url");
                if self.kind != SinkKind::Doris {
                    return err(sp, "applies to kind doris only");
                }
                match url::Url::parse(stream_load) {
                    Err(e) => return err(sp, format!("not a valid URL ({e})")),
                    Ok(u) if !matches!(u.scheme(), "http" | "https") => {
                        return err(sp, "scheme must be http or https");
                    }
                    Ok(u) if !u.username().is_empty() || u.password().is_some() => {
                        return err(
                            sp,
                            "must not carry credentials; set sink.username / sink.password",
                        );
                    }
                    Ok(_) => {}
                }
            }
        } else {
            if self.table.is_some() {
                return err(
                    format!("{p}.table"),
                    "applies to doris/mysql; kind elasticsearch uses `index`",
                );
            }
            for (key, set) in [
                ("tls", self.tls.is_some()),
                ("client_identity_file", self.client_identity_file.is_some()),
                (
                    "client_identity_password",
                    self.client_identity_password.is_some(),
                ),
            ] {
                if set {
                    return err(
                        format!("{p}.{key}"),
                        "applies to doris/mysql; elasticsearch uses TLS when its url is https \
                         (verified against ca_file or the system roots)",
                    );
                }
            }
            if self.stream_load_url.is_some() {
                return err(format!("{p}.stream_load_url"), "applies to kind doris only");
            }
            let index_path = format!("{p}.index");
            let Some(index) = &self.index else {
                return err(index_path, "is required for kind elasticsearch");
            };
            if index.chars().any(|c| {
                c.is_whitespace()
                    || c.is_control()
                    || c.is_ascii_uppercase()
                    || matches!(c, '\\' | '/' | '"' | '<' | '>' | '|' | '#' | '?')
            }) || index.starts_with(['-', '_', '+'])
            {
                return err(
                    index_path,
                    format!("`{}` is not a valid index name", index.escape_default()),
                );
            }
            let has_basic = self.username.is_some()
                || url_user.is_some()
                || self.password.is_some()
                || self.password_file.is_some();
            if has_api_key && has_basic {
                return err(
                    format!("{p}.api_key"),
                    "use either api_key or username/password, not both",
                );
            }
            // Basic auth needs both halves; a lone password would silently be dropped.
            if self.username.is_none() && url_user.is_none() {
                if self.password.is_some() {
                    return err(format!("{p}.password"), "needs a username (sink.username)");
                }
                if self.password_file.is_some() {
                    return err(
                        format!("{p}.password_file"),
                        "needs a username (sink.username)",
                    );
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
[kafka]
brokers = "127.0.0.1:9092"

[[audits]]
name = "dns_logs"
topics = ["test"]
pipeline_group = "FlinkSQLFromKafka2Doris"
[audits.record]
format = "csv"
delimiter = "|"
fields = ["client_ip","domain","time","target_ip","rcode","query_type","authority_record","add_msg","dns_ip"]
[audits.record.filter]
field_count = 9
[audits.match]
strategy = "key_columns"
key = ["client_ip","domain","time"]
[audits.sink]
kind = "doris"
url = "mysql://root@127.0.0.1:9030/example_db"
table = "dns_logs_from_flink01"
"#;

    const ES_AUDIT: &str = r#"
[[audits]]
name = "es_logs"
topics = ["test"]
[audits.record]
format = "json"
[audits.match]
strategy = "doc_id"
[audits.sink]
kind = "elasticsearch"
url = "https://elastic:es-url-secret@127.0.0.1:9200"
index = "dns_logs"
"#;

    fn base() -> Config {
        match Config::from_toml_str(BASE) {
            Ok(c) => c,
            Err(e) => panic!("base config must validate: {e}"),
        }
    }

    /// Mutates the valid base config and returns the validation error.
    fn invalid(edit: impl FnOnce(&mut Config)) -> ConfigError {
        let mut cfg = base();
        edit(&mut cfg);
        match cfg.validate() {
            Err(e) => e,
            Ok(()) => panic!("expected a validation error"),
        }
    }

    #[test]
    fn handover_topic_is_optional_and_validated() {
        assert_eq!(base().state.handover_topic, None);
        let with = format!("{BASE}\n[state]\nhandover_topic = \"gap-auditor.handover\"\n");
        let cfg = Config::from_toml_str(&with).expect("a valid handover topic");
        assert_eq!(
            cfg.state.handover_topic.as_deref(),
            Some("gap-auditor.handover")
        );
        let e = invalid(|c| c.state.handover_topic = Some("bad topic".into()));
        assert_err(&e, "state.handover_topic", "not a valid topic name");
        let e = invalid(|c| c.state.handover_topic = Some("test".into()));
        assert_err(&e, "state.handover_topic", "audited by audits[0]");
    }

    /// The seed audit on an Avro topic: key fields named by the writer schema.
    const AVRO: &str = r#"
[kafka]
brokers = "127.0.0.1:9092"

[[audits]]
name = "dns_avro"
topics = ["dns-avro"]
[audits.record]
format = "avro"
timestamp_format = "iso8601"
[audits.record.schema_registry]
url = "https://registry.example:8081/prefix"
username = "auditor"
password = "registry-secret"
[audits.match]
strategy = "key_columns"
key = ["client_ip", "/geo/country", "time"]
[audits.sink]
kind = "doris"
url = "mysql://root@127.0.0.1:9030/example_db"
table = "dns_logs_from_flink01"
"#;

    fn avro() -> Config {
        Config::from_toml_str(AVRO).expect("the avro example is valid")
    }

    fn invalid_avro(edit: impl FnOnce(&mut Config)) -> ConfigError {
        let mut cfg = avro();
        edit(&mut cfg);
        cfg.validate().expect_err("expected a validation error")
    }

    fn registry(c: &mut Config) -> &mut SchemaRegistryConfig {
        c.audits[0]
            .record
            .schema_registry
            .as_mut()
            .expect("registry section")
    }

    #[test]
    fn avro_and_protobuf_load_with_their_registry() {
        let cfg = avro();
        let r = &cfg.audits[0].record;
        assert_eq!(r.format, RecordFormat::Avro);
        assert_eq!(r.timestamp_format, TimestampText::Iso8601);
        let reg = r.schema_registry.as_ref().expect("registry");
        assert_eq!(reg.timeout, Duration::from_secs(5), "default timeout");
        assert!(!format!("{cfg:?}").contains("registry-secret"), "redacted");
        let proto =
            Config::from_toml_str(&AVRO.replace("\"avro\"", "\"protobuf\"")).expect("protobuf");
        assert_eq!(proto.audits[0].record.format, RecordFormat::Protobuf);
        // json with the Confluent header, no registry needed.
        let framed = BASE.replace(
            "format = \"csv\"\ndelimiter = \"|\"\nfields = [\"client_ip\",\"domain\",\"time\",\"target_ip\",\"rcode\",\"query_type\",\"authority_record\",\"add_msg\",\"dns_ip\"]",
            "format = \"json\"\nframing = \"confluent\"",
        );
        let cfg =
            Config::from_toml_str(&framed.replace("field_count = 9", "")).expect("framed json");
        assert_eq!(cfg.audits[0].record.framing, Framing::Confluent);
        let e = toml_err(&AVRO.replace("\"iso8601\"", "\"unix\""));
        assert!(e.to_string().contains("timestamp format"), "{e}");
    }

    #[test]
    fn schema_formats_need_a_registry() {
        let e = invalid_avro(|c| c.audits[0].record.schema_registry = None);
        assert_err(
            &e,
            "audits[0].record.schema_registry.url",
            "format avro needs the schema registry",
        );
    }

    #[test]
    fn schema_formats_take_no_field_list() {
        let e = invalid_avro(|c| c.audits[0].record.fields = vec!["client_ip".into()]);
        assert_err(&e, "audits[0].record.fields", "writer schema");
    }

    #[test]
    fn registry_url_is_http_without_credentials() {
        let e = invalid_avro(|c| registry(c).url = "ftp://registry:8081".into());
        assert_err(
            &e,
            "audits[0].record.schema_registry.url",
            "scheme must be http or https",
        );
        let e = invalid_avro(|c| registry(c).url = "not a url".into());
        assert_err(
            &e,
            "audits[0].record.schema_registry.url",
            "not a valid URL",
        );
        let e = invalid_avro(|c| registry(c).url = "http://u:url-secret@registry:8081".into());
        assert_err(
            &e,
            "audits[0].record.schema_registry.url",
            "must not embed credentials",
        );
        assert!(!e.to_string().contains("url-secret"), "{e}");
    }

    #[test]
    fn registry_password_rules() {
        let e = invalid_avro(|c| registry(c).password_file = Some("/run/secrets/pw".into()));
        assert_err(
            &e,
            "audits[0].record.schema_registry.password_file",
            "not both",
        );
        let e = invalid_avro(|c| registry(c).username = None);
        assert_err(
            &e,
            "audits[0].record.schema_registry.username",
            "a password needs a username",
        );
        let e = invalid_avro(|c| registry(c).timeout = Duration::ZERO);
        assert_err(
            &e,
            "audits[0].record.schema_registry.timeout",
            "must be > 0",
        );
    }

    #[test]
    fn registry_password_from_the_environment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let toml = AVRO.replace("password = \"registry-secret\"\n", "");
        let path = write_temp(&dir, "gap-auditor.toml", &toml);
        let cfg = Config::load_with_env(
            Some(&path),
            env(&[(
                "GAP_AUDITOR__AUDITS__0__RECORD__SCHEMA_REGISTRY__PASSWORD",
                "env-registry-pw",
            )]),
        )
        .expect("env override");
        let reg = cfg.audits[0]
            .record
            .schema_registry
            .as_ref()
            .expect("registry");
        assert_eq!(
            reg.password.as_ref().map(Secret::expose),
            Some("env-registry-pw")
        );
    }

    #[test]
    fn registry_password_file_is_read_at_load() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pw = write_temp(&dir, "registry-pw", "from-a-file\n");
        let toml = AVRO.replace(
            "password = \"registry-secret\"",
            &format!("password_file = {:?}", pw.display().to_string()),
        );
        let cfg = Config::from_toml_str(&toml).expect("password_file");
        let reg = cfg.audits[0]
            .record
            .schema_registry
            .as_ref()
            .expect("registry");
        assert_eq!(
            reg.password.as_ref().map(Secret::expose),
            Some("from-a-file")
        );
        assert_eq!(reg.password_file, None);
        assert_eq!(cfg.validate(), Ok(()), "a loaded config stays valid");
        let missing = AVRO.replace(
            "password = \"registry-secret\"",
            "password_file = \"/nonexistent/registry-pw\"",
        );
        let e = toml_err(&missing);
        assert_eq!(e.path, "audits[0].record.schema_registry.password_file");
        let ca = AVRO.replace(
            "username = \"auditor\"",
            "username = \"auditor\"\nca_file = \"/nonexistent/ca.pem\"",
        );
        let e = toml_err(&ca);
        assert_err(
            &e,
            "audits[0].record.schema_registry.ca_file",
            "cannot read",
        );
    }

    fn toml_err(s: &str) -> ConfigError {
        match Config::from_toml_str(s) {
            Err(e) => e,
            Ok(c) => panic!("expected an error, got {c:?}"),
        }
    }

    fn assert_err(e: &ConfigError, path: &str, needle: &str) {
        assert_eq!(e.path, path, "wrong path in `{e}`");
        assert!(
            e.message.contains(needle),
            "`{e}` does not mention `{needle}`"
        );
        assert!(e.to_string().starts_with(&format!("{path}: ")));
    }

    fn env(vars: &[(&str, &str)]) -> Vec<(String, String)> {
        vars.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn write_temp(dir: &tempfile::TempDir, name: &str, content: &str) -> PathBuf {
        let path = dir.path().join(name);
        if let Err(e) = std::fs::write(&path, content) {
            panic!("write {}: {e}", path.display());
        }
        path
    }

    // ---- the example files --------------------------------------------------------

    #[test]
    fn example_toml_validates() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/gap-auditor.toml");
        let cfg = Config::load_with_env(Some(&path), Vec::new()).expect("example validates");
        assert_eq!(cfg.kafka.brokers, "127.0.0.1:9092");
        assert_eq!(cfg.audits.len(), 1);
        let a = &cfg.audits[0];
        assert_eq!(a.name, "dns_logs");
        assert_eq!(a.topics, vec!["test"]);
        assert_eq!(a.pipeline_group.as_deref(), Some("FlinkSQLFromKafka2Doris"));
        assert_eq!(a.record.delimiter, "|");
        assert_eq!(a.record.fields.len(), 9);
        assert_eq!(a.record.filter.field_count, Some(9));
        assert_eq!(a.matching.strategy, MatchStrategy::KeyColumns);
        assert_eq!(a.matching.columns, a.matching.key);
        assert_eq!(a.sink.kind, SinkKind::Doris);
        assert_eq!(a.sink.table.as_deref(), Some("dns_logs_from_flink01"));
        assert_eq!(
            a.sink.url.expose(),
            "mysql://root@127.0.0.1:9030/example_db"
        );
        assert_eq!(cfg.consumer_group(a), "gap-auditor");
    }

    #[test]
    fn example_yaml_twin_matches_toml() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
        let toml = Config::load_with_env(Some(&dir.join("gap-auditor.toml")), Vec::new());
        let yaml = Config::load_with_env(Some(&dir.join("gap-auditor.yaml")), Vec::new());
        let (toml, yaml) = (toml.expect("toml"), yaml.expect("yaml"));
        assert_eq!(format!("{toml:?}"), format!("{yaml:?}"));
    }

    // ---- defaults and parsing -----------------------------------------------------

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
    fn durations_accept_units_and_seconds() {
        assert_eq!(parse_duration_str("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration_str("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration_str("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration_str("45"), Ok(Duration::from_secs(45)));
        assert_eq!(parse_duration_str("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration_str("soon").is_err());
        let cfg = Config::from_toml_str(&BASE.replace(
            "name = \"dns_logs\"",
            "name = \"dns_logs\"\ngrace = 45\nverify_interval = \"250ms\"",
        ))
        .expect("valid");
        assert_eq!(cfg.audits[0].grace, Duration::from_secs(45));
        assert_eq!(cfg.audits[0].verify_interval, Duration::from_millis(250));
    }

    #[test]
    fn grace_must_not_be_negative() {
        for bad in ["grace = \"-5s\"", "grace = -5", "grace = \"soon\""] {
            let e = toml_err(&BASE.replace(
                "name = \"dns_logs\"",
                &format!("name = \"dns_logs\"\n{bad}"),
            ));
            assert_eq!(e.path, "audits[0].grace", "{e}");
        }
        let e = toml_err(&BASE.replace(
            "name = \"dns_logs\"",
            "name = \"dns_logs\"\ngrace = \"-5s\"",
        ));
        assert!(e.message.contains("negative"), "{e}");
    }

    #[test]
    fn start_positions() {
        assert_eq!("latest".parse(), Ok(StartPosition::Latest));
        assert_eq!("EARLIEST".parse(), Ok(StartPosition::Earliest));
        assert_eq!(
            "-1h".parse(),
            Ok(StartPosition::Ago(Duration::from_secs(3600)))
        );
        let t: StartPosition = "2024-05-01T02:00:00+02:00".parse().expect("time");
        assert_eq!(t.to_string(), "2024-05-01T00:00:00+00:00");
        assert!("yesterday".parse::<StartPosition>().is_err());
        assert!("-0s".parse::<StartPosition>().is_err());
        let e = toml_err(&BASE.replace("brokers", "start = \"soon\"\nbrokers"));
        assert_err(&e, "kafka.start", "unknown start position");
        // An unquoted TOML datetime works too.
        let cfg = Config::from_toml_str(
            &BASE.replace("brokers", "start = 2024-05-01T00:00:00Z\nbrokers"),
        )
        .expect("toml datetime");
        assert!(matches!(cfg.kafka.start, StartPosition::Time(_)));
    }

    #[test]
    fn unknown_keys_are_refused_with_their_path() {
        let e = toml_err(&BASE.replace("table = ", "tabel = \"x\"\ntable = "));
        assert_err(&e, "audits[0].sink", "unknown field `tabel`");
        let e = toml_err(&format!("kafak = 1\n{BASE}"));
        assert!(e.message.contains("unknown field `kafak`"), "{e}");
        let e = toml_err(&BASE.replace("[kafka]", "[kafka]\nbroker = \"x\""));
        assert_err(&e, "kafka", "unknown field `broker`");
    }

    #[test]
    fn missing_and_mistyped_keys_name_their_path() {
        let without_sink = match BASE.split_once("[audits.sink]") {
            Some((head, _)) => head.to_owned(),
            None => panic!("base has a sink"),
        };
        assert_err(&toml_err(&without_sink), "audits[0].sink", "required");
        assert_err(
            &toml_err(&BASE.replace("kind = \"doris\"\n", "")),
            "audits[0].sink.kind",
            "required",
        );
        let e = toml_err(&BASE.replace(
            "name = \"dns_logs\"",
            "name = \"dns_logs\"\nbatch_size = \"lots\"",
        ));
        assert_eq!(e.path, "audits[0].batch_size", "{e}");
        let e = toml_err(&BASE.replace("kind = \"doris\"", "kind = \"postgres\""));
        assert_err(
            &e,
            "audits[0].sink.kind",
            "expected doris, mysql or elasticsearch",
        );
        let e = toml_err(&BASE.replace("[kafka]", "[server]\nlisten = \"nowhere\"\n[kafka]"));
        assert_eq!(e.path, "server.listen", "{e}");
        let e = toml_err("[kafka\nbrokers = 1");
        assert_eq!(e.path, "(toml)");
    }

    #[test]
    fn parse_errors_do_not_quote_the_source_line() {
        let e = toml_err(&BASE.replace("table = ", "password = \"hunter2\nxx\ntable = "));
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    // ---- validation rules ---------------------------------------------------------

    #[test]
    fn brokers_must_not_be_empty() {
        assert_err(
            &invalid(|c| c.kafka.brokers = " ".into()),
            "kafka.brokers",
            "required",
        );
        assert_err(
            &invalid(|c| c.kafka.brokers = "a:1,,b:2".into()),
            "kafka.brokers",
            "empty entry",
        );
    }

    #[test]
    fn at_least_one_audit() {
        assert_err(
            &invalid(|c| c.audits.clear()),
            "audits",
            "at least one [[audits]] is required",
        );
    }

    #[test]
    fn audit_names_are_well_formed() {
        assert_err(
            &invalid(|c| c.audits[0].name = String::new()),
            "audits[0].name",
            "required",
        );
        assert_err(
            &invalid(|c| c.audits[0].name = "dns logs".into()),
            "audits[0].name",
            "not a valid audit name",
        );
    }

    #[test]
    fn audit_names_are_unique() {
        let e = invalid(|c| {
            let mut second = c.audits[0].clone();
            second.group_id = Some("other".into());
            c.audits.push(second);
        });
        assert_err(&e, "audits[1].name", "duplicate audit name `dns_logs`");
    }

    #[test]
    fn topics_are_required_and_valid() {
        assert_err(
            &invalid(|c| c.audits[0].topics.clear()),
            "audits[0].topics",
            "at least one topic",
        );
        assert_err(
            &invalid(|c| c.audits[0].topics.push("bad topic".into())),
            "audits[0].topics[1]",
            "not a valid topic name",
        );
        assert_err(
            &invalid(|c| c.audits[0].topics.push("x".repeat(250))),
            "audits[0].topics[1]",
            "249",
        );
        assert_err(
            &invalid(|c| c.audits[0].topics.push("test".into())),
            "audits[0].topics[1]",
            "duplicate topic",
        );
    }

    #[test]
    fn url_scheme_must_fit_the_kind() {
        let e = invalid(|c| c.audits[0].sink.url = SecretUrl::new("postgres://h:5432/db"));
        assert_err(
            &e,
            "audits[0].sink.url",
            "scheme must be mysql, http or https",
        );
        assert_eq!(
            toml_err(&BASE.replace("mysql://root@", "ftp://root@")).to_string(),
            "audits[0].sink.url: scheme must be mysql, http or https (got `ftp`)"
        );
        let e = invalid(|c| c.audits[0].sink.url = SecretUrl::new("http://h:9030/db"));
        assert_err(&e, "audits[0].sink.url", "kind doris needs mysql://");
        let e = invalid(|c| {
            c.audits[0].sink.kind = SinkKind::Elasticsearch;
            c.audits[0].sink.table = None;
            c.audits[0].sink.index = Some("dns".into());
        });
        assert_err(
            &e,
            "audits[0].sink.url",
            "scheme must be mysql, http or https",
        );
        assert_err(
            &invalid(|c| c.audits[0].sink.url = SecretUrl::new("not a url")),
            "audits[0].sink.url",
            "not a valid URL",
        );
    }

    #[test]
    fn table_is_required_for_sql_sinks() {
        assert_err(
            &invalid(|c| c.audits[0].sink.table = None),
            "audits[0].sink.table",
            "required for kind doris",
        );
        let e = invalid(|c| c.audits[0].sink.url = SecretUrl::new("mysql://root@127.0.0.1:9030"));
        assert_err(&e, "audits[0].sink.table", "names no database");
        let mut cfg = base();
        cfg.audits[0].sink.url = SecretUrl::new("mysql://root@127.0.0.1:9030");
        cfg.audits[0].sink.table = Some("example_db.dns_logs_from_flink01".into());
        assert_eq!(cfg.validate(), Ok(()));
    }

    #[test]
    fn sql_identifiers_must_be_usable() {
        assert_err(
            &invalid(|c| c.audits[0].sink.table = Some("db.".into())),
            "audits[0].sink.table",
            "must not be empty",
        );
        assert_err(
            &invalid(|c| c.audits[0].sink.table = Some("a.b.c".into())),
            "audits[0].sink.table",
            "database.table",
        );
        assert_err(
            &invalid(|c| c.audits[0].sink.table = Some("t`; drop".into())),
            "audits[0].sink.table",
            "backticks",
        );
        assert_err(
            &invalid(|c| c.audits[0].matching.columns[1] = String::new()),
            "audits[0].match.columns[1]",
            "must not be empty",
        );
    }

    #[test]
    fn index_is_required_for_elasticsearch() {
        let e = toml_err(&format!(
            "{BASE}{}",
            ES_AUDIT.replace("index = \"dns_logs\"\n", "")
        ));
        assert_err(&e, "audits[1].sink.index", "required");
        let e = toml_err(&format!("{BASE}{}", ES_AUDIT.replace("dns_logs", "DNS")));
        assert_err(&e, "audits[1].sink.index", "not a valid index name");
    }

    #[test]
    fn key_columns_needs_a_key() {
        let e = invalid(|c| {
            c.audits[0].matching.key.clear();
            c.audits[0].matching.columns.clear();
        });
        assert_err(&e, "audits[0].match.key", "at least one record field");
    }

    #[test]
    fn key_and_columns_pair_up() {
        let e = invalid(|c| {
            c.audits[0]
                .matching
                .columns
                .pop()
                .map(drop)
                .unwrap_or_default()
        });
        assert_err(
            &e,
            "audits[0].match.columns",
            "has 2 entries but match.key has 3",
        );
        let cfg = Config::from_toml_str(&BASE.replace(
            "key = [\"client_ip\",\"domain\",\"time\"]",
            "key = [\"client_ip\",\"domain\",\"time\"]\ncolumns = [\"ip\",\"d\",\"t\"]",
        ))
        .expect("custom columns");
        assert_eq!(cfg.audits[0].matching.sink_columns(), ["ip", "d", "t"]);
    }

    #[test]
    fn key_fields_must_be_record_fields_for_csv() {
        let e = invalid(|c| c.audits[0].matching.key[2] = "timestamp".into());
        assert_err(
            &e,
            "audits[0].match.key[2]",
            "`timestamp` is not in audits[0].record.fields",
        );
    }

    #[test]
    fn offset_columns_need_column_names() {
        let e = invalid(|c| {
            c.audits[0].matching.strategy = MatchStrategy::OffsetColumns;
            c.audits[0].matching.partition_column = String::new();
        });
        assert_err(&e, "audits[0].match.partition_column", "must not be empty");
        let e = invalid(|c| {
            c.audits[0].matching.strategy = MatchStrategy::OffsetColumns;
            c.audits[0].matching.offset_column = " ".into();
        });
        assert_err(&e, "audits[0].match.offset_column", "must not be empty");
        let e = invalid(|c| {
            c.audits[0].matching.strategy = MatchStrategy::OffsetColumns;
            c.audits[0].topics.push("test2".into());
        });
        assert_err(&e, "audits[0].match.topic_column", "more than one topic");
    }

    #[test]
    fn doc_id_needs_elasticsearch() {
        let e = invalid(|c| c.audits[0].matching.strategy = MatchStrategy::DocId);
        assert_err(
            &e,
            "audits[0].match.strategy",
            "strategy doc_id needs sink.kind = elasticsearch",
        );
    }

    #[test]
    fn doc_id_template_is_checked() {
        let cfg = Config::from_toml_str(&format!("{BASE}{ES_AUDIT}")).expect("es audit");
        assert_eq!(
            cfg.audits[1].matching.id_template.as_deref(),
            Some(DEFAULT_ID_TEMPLATE)
        );
        assert_eq!(cfg.consumer_group(&cfg.audits[1]), "gap-auditor.es_logs");
        let e = toml_err(&format!(
            "{BASE}{}",
            ES_AUDIT.replace(
                "strategy = \"doc_id\"",
                "strategy = \"doc_id\"\nid_template = \"{topic\""
            )
        ));
        assert_err(&e, "audits[1].match.id_template", "without a matching");
        let e = toml_err(&format!(
            "{BASE}{}",
            ES_AUDIT.replace(
                "strategy = \"doc_id\"",
                "strategy = \"doc_id\"\nid_template = \"constant\""
            )
        ));
        assert_err(
            &e,
            "audits[1].match.id_template",
            "at least one placeholder",
        );
    }

    #[test]
    fn csv_needs_fields_and_a_one_char_delimiter() {
        let e = invalid(|c| {
            c.audits[0].record.fields.clear();
        });
        assert_err(
            &e,
            "audits[0].record.fields",
            "format csv needs the column names",
        );
        assert_err(
            &invalid(|c| c.audits[0].record.delimiter = "||".into()),
            "audits[0].record.delimiter",
            "exactly one character",
        );
        assert_err(
            &invalid(|c| c.audits[0].record.delimiter = String::new()),
            "audits[0].record.delimiter",
            "exactly one character",
        );
        let mut cfg = base();
        cfg.audits[0].record.delimiter = "│".into(); // multi-byte UTF-8, one char
        assert_eq!(cfg.validate(), Ok(()));
        let tab = Config::from_toml_str(&BASE.replace("delimiter = \"|\"", "delimiter = '\\t'"))
            .expect("tab");
        assert_eq!(tab.audits[0].record.delimiter, "\t");
    }

    #[test]
    fn field_count_must_be_positive() {
        assert_err(
            &invalid(|c| c.audits[0].record.filter.field_count = Some(0)),
            "audits[0].record.filter.field_count",
            "must be > 0",
        );
        assert_err(
            &invalid(|c| c.audits[0].record.filter.field_count = Some(3)),
            "audits[0].record.filter.field_count",
            "less than the 9 names",
        );
        assert_err(
            &invalid(|c| c.audits[0].record.filter.require = vec!["nope".into()]),
            "audits[0].record.filter.require[0]",
            "not in",
        );
    }

    #[test]
    fn verify_interval_must_be_positive() {
        assert_err(
            &invalid(|c| c.audits[0].verify_interval = Duration::ZERO),
            "audits[0].verify_interval",
            "must be > 0",
        );
    }

    #[test]
    fn batch_size_range() {
        assert_err(
            &invalid(|c| c.audits[0].batch_size = 0),
            "audits[0].batch_size",
            "between 1 and 100000",
        );
        assert_err(
            &invalid(|c| c.audits[0].batch_size = 100_001),
            "audits[0].batch_size",
            "between 1 and 100000",
        );
    }

    #[test]
    fn max_pending_at_least_batch_size() {
        assert_err(
            &invalid(|c| c.audits[0].max_pending = 999),
            "audits[0].max_pending",
            "at least batch_size (1000)",
        );
    }

    #[test]
    fn password_and_password_file_are_exclusive() {
        let e = invalid(|c| {
            c.audits[0].sink.password = Some(Secret::new("pw"));
            c.audits[0].sink.password_file = Some("/run/secrets/pw".into());
        });
        assert_err(&e, "audits[0].sink.password_file", "not both");
        let e = invalid(|c| {
            c.audits[0].sink.url = SecretUrl::new("mysql://root:x@127.0.0.1:9030/example_db");
            c.audits[0].sink.password = Some(Secret::new("pw"));
        });
        assert_err(
            &e,
            "audits[0].sink.password",
            "url already carries a password",
        );
    }

    #[test]
    fn secret_files_are_read_and_trimmed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pw = write_temp(&dir, "pw", "s3cret-from-file\n");
        let toml = BASE.replace(
            "table = ",
            &format!("password_file = {:?}\ntable = ", pw.display().to_string()),
        );
        let cfg = Config::from_toml_str(&toml).expect("password_file");
        let sink = &cfg.audits[0].sink;
        assert_eq!(
            sink.password.as_ref().map(Secret::expose),
            Some("s3cret-from-file")
        );
        assert_eq!(sink.password_file, None);
        assert_eq!(sink.effective_username().as_deref(), Some("root"));
        assert_eq!(cfg.validate(), Ok(()), "a loaded config stays valid");
    }

    #[test]
    fn unreadable_secret_file_names_key_and_path_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("no-such-file");
        let toml = BASE.replace(
            "table = ",
            &format!(
                "password_file = {:?}\ntable = ",
                missing.display().to_string()
            ),
        );
        let e = toml_err(&toml);
        assert_eq!(e.path, "audits[0].sink.password_file");
        assert!(e.message.contains(&missing.display().to_string()), "{e}");
        // Invalid UTF-8 content is reported without echoing it.
        let binary = dir.path().join("binary");
        std::fs::write(&binary, [0xff, b'p', b'w']).expect("write");
        let toml = BASE.replace(
            "table = ",
            &format!(
                "password_file = {:?}\ntable = ",
                binary.display().to_string()
            ),
        );
        let e = toml_err(&toml);
        assert_err(&e, "audits[0].sink.password_file", "not valid UTF-8");
        // The path is named (its random temp directory may spell "pw" itself): the content
        // must not be, anywhere else in the message.
        let without_path = e.message.replace(&binary.display().to_string(), "");
        assert!(!without_path.contains("pw"), "{e}");
    }

    #[test]
    fn sink_tls_modes() {
        let with = |extra: &str| BASE.replace("table = ", &format!("{extra}\ntable = "));
        let mode = |extra: &str| match Config::from_toml_str(&with(extra)) {
            Ok(c) => c.audits[0].sink.tls_mode(),
            Err(e) => panic!("{extra}: {e}"),
        };
        assert_eq!(mode(""), SinkTls::Disabled);
        assert_eq!(mode("tls = \"required\""), SinkTls::Required);
        assert_eq!(
            mode("tls = \"VERIFY_CA\""),
            SinkTls::VerifyCa,
            "MySQL's spelling"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "not checked at load").expect("write");
        let ca_file = format!("ca_file = {:?}", ca.display().to_string());
        assert_eq!(
            mode(&ca_file),
            SinkTls::VerifyIdentity,
            "ca_file alone verifies"
        );
        assert_eq!(
            mode(&format!("{ca_file}\ntls = \"verify_ca\"")),
            SinkTls::VerifyCa
        );
        let e = toml_err(&with("tls = \"preferred\""));
        assert_err(&e, "audits[0].sink.tls", "verify_identity");
        let e = toml_err(&with(
            "tls = \"required\"\nclient_identity_file = \"/nonexistent.p12\"",
        ));
        assert_err(
            &e,
            "audits[0].sink.client_identity_file",
            "/nonexistent.p12",
        );
    }

    #[test]
    fn ca_file_must_exist() {
        let e = toml_err(&BASE.replace("table = ", "ca_file = \"/nonexistent/ca.pem\"\ntable = "));
        assert_err(&e, "audits[0].sink.ca_file", "/nonexistent/ca.pem");
    }

    #[test]
    fn elasticsearch_auth_rules() {
        let e = toml_err(&format!(
            "{BASE}{}",
            ES_AUDIT.replace("index =", "api_key = \"k\"\nindex =")
        ));
        assert_err(
            &e,
            "audits[1].sink.api_key",
            "either api_key or username/password",
        );
        let e = invalid(|c| c.audits[0].sink.api_key = Some(Secret::new("k")));
        assert_err(&e, "audits[0].sink.api_key", "elasticsearch only");
        let e = invalid(|c| c.audits[0].sink.stream_load_url = Some("http://u:p@fe:8030".into()));
        assert_err(&e, "audits[0].sink.stream_load_url", "credentials");
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

    #[test]
    fn kafka_rules() {
        let e = invalid(|c| {
            c.kafka
                .properties
                .insert("enable.auto.commit".into(), Secret::new("true"));
        });
        assert_err(
            &e,
            "kafka.properties[\"enable.auto.commit\"]",
            "managed by gap-auditor",
        );
        let e = invalid(|c| c.kafka.heartbeat_interval = Some(Duration::from_secs(10)));
        assert_err(
            &e,
            "kafka.heartbeat_interval",
            "shorter than kafka.session_timeout",
        );
        let e = invalid(|c| c.kafka.statistics_interval = Some(Duration::ZERO));
        assert_err(&e, "kafka.statistics_interval", "at least 1ms");
    }

    #[test]
    fn only_properties_that_break_the_audit_are_refused() {
        for name in [
            "group.id",
            "bootstrap.servers",
            "metadata.broker.list",
            "enable.auto.commit",
            "enable.auto.offset.store",
            "auto.offset.reset",
            "isolation.level",
        ] {
            let e = invalid(|c| {
                c.kafka.properties.insert(name.into(), Secret::new("x"));
            });
            assert_err(
                &e,
                &format!("kafka.properties[\"{name}\"]"),
                "managed by gap-auditor",
            );
        }
        let toml = BASE.replace(
            "[[audits]]",
            "[kafka.properties]\n\"session.timeout.ms\" = \"6000\"\n\
             \"heartbeat.interval.ms\" = \"500\"\n\"statistics.interval.ms\" = \"250\"\n\
             \"fetch.max.bytes\" = \"1048576\"\n\"max.partition.fetch.bytes\" = \"262144\"\n\n[[audits]]",
        );
        let cfg = Config::from_toml_str(&toml).expect("tuning properties are accepted");
        let k = &cfg.kafka;
        assert_eq!(k.session_timeout(), Duration::from_millis(6000));
        assert_eq!(k.heartbeat_interval(), Duration::from_millis(500));
        assert_eq!(k.statistics_interval(), Duration::from_millis(250));
        assert_eq!(k.properties["fetch.max.bytes"].expose(), "1048576");
    }

    #[test]
    fn a_timing_set_both_ways_names_both_keys() {
        for (property, key, _) in TIMING_PROPERTIES {
            let dedicated = key.trim_start_matches("kafka.");
            let toml = BASE.replace(
                "brokers = \"127.0.0.1:9092\"\n",
                &format!(
                    "brokers = \"127.0.0.1:9092\"\n{dedicated} = \"500ms\"\n\
                     [kafka.properties]\n\"{property}\" = \"500\"\n"
                ),
            );
            let e = toml_err(&toml);
            assert_err(&e, &format!("kafka.properties[\"{property}\"]"), key);
        }
    }

    #[test]
    fn dotted_property_keys_are_flattened() {
        let toml = BASE.replace(
            "[[audits]]",
            "[kafka.properties]\nsasl.mechanism = \"PLAIN\"\n\"security.protocol\" = \"SASL_SSL\"\n\
             \"socket.keepalive.enable\" = true\n\n[[audits]]",
        );
        let cfg = Config::from_toml_str(&toml).expect("properties");
        let props: Vec<(&str, &str)> = cfg
            .kafka
            .properties
            .iter()
            .map(|(k, v)| (k.as_str(), v.expose()))
            .collect();
        assert_eq!(
            props,
            [
                ("sasl.mechanism", "PLAIN"),
                ("security.protocol", "SASL_SSL"),
                ("socket.keepalive.enable", "true")
            ]
        );
    }

    // ---- every rule, one table ----------------------------------------------------

    /// A valid single-audit Elasticsearch config (doc_id, json, basic auth in the url).
    fn es_base() -> Config {
        let mut cfg = match Config::from_toml_str(&format!("{BASE}{ES_AUDIT}")) {
            Ok(c) => c,
            Err(e) => panic!("ES base config must validate: {e}"),
        };
        cfg.audits.remove(0);
        assert_eq!(cfg.validate(), Ok(()));
        cfg
    }

    /// A secret value used in the rules below: no message may echo it.
    const SECRET: &str = "hunter2-must-not-appear";

    type Edit = Box<dyn FnOnce(&mut Config)>;

    /// Issue 8, item 7: every rule of [`Config::validate`] (and of the secret files read at
    /// load, below), each with the key path its message must name and a word of the
    /// message. Each edit breaks exactly one rule of a valid config, so the path proves the
    /// rule fired, not an earlier one. Keep this table in step with the validation code:
    /// a new rule without a row here is a rule nobody checked names its key.
    #[test]
    fn every_validation_rule_names_its_key() {
        fn doris(edit: impl FnOnce(&mut Config) + 'static) -> (bool, Edit) {
            (false, Box::new(edit))
        }
        fn es(edit: impl FnOnce(&mut Config) + 'static) -> (bool, Edit) {
            (true, Box::new(edit))
        }
        fn second_audit(c: &mut Config, name: &str, group: Option<&str>) {
            let mut a = c.audits[0].clone();
            a.name = name.into();
            a.group_id = group.map(str::to_owned);
            c.audits.push(a);
        }
        let days30 = Duration::from_secs(30 * 86_400);
        let offsets = |c: &mut Config| c.audits[0].matching.strategy = MatchStrategy::OffsetColumns;
        let rules: Vec<(&str, &str, (bool, Edit))> = vec![
            // ---- top level and [kafka]
            ("audits", "at least one", doris(|c| c.audits.clear())),
            (
                "kafka.brokers",
                "is required",
                doris(|c| c.kafka.brokers = " ".into()),
            ),
            (
                "kafka.brokers",
                "empty entry",
                doris(|c| c.kafka.brokers = "a:1,,b:2".into()),
            ),
            (
                "kafka.group_id",
                "must not be empty",
                doris(|c| c.kafka.group_id = " ".into()),
            ),
            (
                "kafka.session_timeout",
                "at least 1ms",
                doris(|c| c.kafka.session_timeout = Some(Duration::ZERO)),
            ),
            (
                "kafka.session_timeout",
                "too long",
                doris(move |c| c.kafka.session_timeout = Some(days30)),
            ),
            (
                "kafka.heartbeat_interval",
                "at least 1ms",
                doris(|c| c.kafka.heartbeat_interval = Some(Duration::ZERO)),
            ),
            (
                "kafka.heartbeat_interval",
                "too long",
                doris(move |c| c.kafka.heartbeat_interval = Some(days30)),
            ),
            (
                "kafka.statistics_interval",
                "at least 1ms",
                doris(|c| c.kafka.statistics_interval = Some(Duration::ZERO)),
            ),
            (
                "kafka.statistics_interval",
                "too long",
                doris(move |c| c.kafka.statistics_interval = Some(days30)),
            ),
            (
                "kafka.heartbeat_interval",
                "shorter than kafka.session_timeout",
                doris(|c| c.kafka.heartbeat_interval = Some(c.kafka.session_timeout())),
            ),
            (
                "kafka.properties[\" \"]",
                "must not be empty",
                doris(|c| {
                    c.kafka.properties.insert(" ".into(), SECRET.into());
                }),
            ),
            (
                "kafka.properties[\"GROUP.ID\"]",
                "managed by gap-auditor",
                doris(|c| {
                    c.kafka.properties.insert("GROUP.ID".into(), SECRET.into());
                }),
            ),
            (
                "kafka.properties[\"session.timeout.ms\"]",
                "also set as kafka.session_timeout",
                doris(|c| {
                    c.kafka.session_timeout = Some(Duration::from_secs(6));
                    c.kafka
                        .properties
                        .insert("session.timeout.ms".into(), "6000".into());
                }),
            ),
            (
                "kafka.properties[\"heartbeat.interval.ms\"]",
                "whole number of milliseconds",
                doris(|c| {
                    c.kafka
                        .properties
                        .insert("heartbeat.interval.ms".into(), SECRET.into());
                }),
            ),
            (
                "kafka.properties[\"statistics.interval.ms\"]",
                "at least 1ms",
                doris(|c| {
                    c.kafka
                        .properties
                        .insert("statistics.interval.ms".into(), "0".into());
                }),
            ),
            (
                "kafka.properties[\"heartbeat.interval.ms\"]",
                "shorter than kafka.properties[\"session.timeout.ms\"]",
                doris(|c| {
                    let p = &mut c.kafka.properties;
                    p.insert("session.timeout.ms".into(), "3000".into());
                    p.insert("heartbeat.interval.ms".into(), "3000".into());
                }),
            ),
            (
                "kafka.property_files[\"session.timeout.ms\"]",
                "is not a secret",
                doris(|c| {
                    c.kafka
                        .property_files
                        .insert("session.timeout.ms".into(), "/f".into());
                }),
            ),
            (
                "kafka.property_files[\"bootstrap.servers\"]",
                "use kafka.brokers",
                doris(|c| {
                    c.kafka
                        .property_files
                        .insert("bootstrap.servers".into(), "/f".into());
                }),
            ),
            (
                "kafka.property_files[\"sasl.password\"]",
                "also set in kafka.properties",
                doris(|c| {
                    c.kafka
                        .properties
                        .insert("sasl.password".into(), SECRET.into());
                    c.kafka
                        .property_files
                        .insert("sasl.password".into(), "/f".into());
                }),
            ),
            // ---- [server]
            (
                "server.api_token_file",
                "not both",
                doris(|c| {
                    c.server.api_token = Some(SECRET.into());
                    c.server.api_token_file = Some("/run/secrets/token".into());
                }),
            ),
            (
                "server.api_token",
                "must not be empty",
                doris(|c| c.server.api_token = Some("".into())),
            ),
            (
                "server.api_token",
                "printable ASCII",
                doris(|c| c.server.api_token = Some(format!("{SECRET} x").into())),
            ),
            (
                "server.api_token",
                "printable ASCII",
                doris(|c| c.server.api_token = Some(format!("{SECRET}é").into())),
            ),
            // ---- [state]
            (
                "state.path",
                "must not be empty",
                doris(|c| c.state.path = PathBuf::new()),
            ),
            (
                "state.handover_topic",
                "not a valid topic name",
                doris(|c| c.state.handover_topic = Some("a b".into())),
            ),
            (
                "state.handover_topic",
                "audited by audits[0]",
                doris(|c| c.state.handover_topic = Some("test".into())),
            ),
            // ---- [[audits]] across entries
            (
                "audits[1].name",
                "duplicate audit name",
                doris(|c| second_audit(c, "dns_logs", Some("g2"))),
            ),
            (
                "audits[0].pipeline_group",
                "never share the pipeline's group",
                doris(|c| c.audits[0].pipeline_group = Some("gap-auditor".into())),
            ),
            (
                "audits[1].group_id",
                "already used by audits[0]",
                doris(|c| second_audit(c, "other", Some("gap-auditor.dns_logs"))),
            ),
            // ---- one audit
            (
                "audits[0].name",
                "is required",
                doris(|c| c.audits[0].name = String::new()),
            ),
            (
                "audits[0].name",
                "not a valid audit name",
                doris(|c| c.audits[0].name = "dns logs".into()),
            ),
            (
                "audits[0].topics",
                "at least one topic",
                doris(|c| c.audits[0].topics.clear()),
            ),
            (
                "audits[0].topics[0]",
                "must not be empty",
                doris(|c| c.audits[0].topics[0] = String::new()),
            ),
            (
                "audits[0].topics[0]",
                "longer than 249",
                doris(|c| c.audits[0].topics[0] = "t".repeat(250)),
            ),
            (
                "audits[0].topics[0]",
                "not a valid topic name",
                doris(|c| c.audits[0].topics[0] = "..".into()),
            ),
            (
                "audits[0].topics[0]",
                "not a valid topic name",
                doris(|c| c.audits[0].topics[0] = "a/b".into()),
            ),
            (
                "audits[0].topics[1]",
                "duplicate topic",
                doris(|c| c.audits[0].topics.push("test".into())),
            ),
            (
                "audits[0].verify_interval",
                "> 0",
                doris(|c| c.audits[0].verify_interval = Duration::ZERO),
            ),
            (
                "audits[0].stall_after",
                "> 0",
                doris(|c| c.audits[0].stall_after = Duration::ZERO),
            ),
            (
                "audits[0].give_up_after",
                "> 0",
                doris(|c| c.audits[0].give_up_after = Duration::ZERO),
            ),
            (
                "audits[0].batch_size",
                "between 1 and 100000",
                doris(|c| c.audits[0].batch_size = 0),
            ),
            (
                "audits[0].batch_size",
                "between 1 and 100000",
                doris(|c| c.audits[0].batch_size = 100_001),
            ),
            (
                "audits[0].max_pending",
                "at least batch_size",
                doris(|c| c.audits[0].max_pending = 999),
            ),
            // ---- [audits.record]
            (
                "audits[0].record.fields[1]",
                "must not be empty",
                doris(|c| c.audits[0].record.fields[1] = " ".into()),
            ),
            (
                "audits[0].record.fields[1]",
                "duplicate field",
                doris(|c| c.audits[0].record.fields[1] = "client_ip".into()),
            ),
            (
                "audits[0].record.fields",
                "needs the column names",
                doris(|c| c.audits[0].record.fields.clear()),
            ),
            (
                "audits[0].record.delimiter",
                "exactly one character",
                doris(|c| c.audits[0].record.delimiter = "||".into()),
            ),
            (
                "audits[0].record.delimiter",
                "exactly one character",
                doris(|c| c.audits[0].record.delimiter = String::new()),
            ),
            (
                "audits[0].record.delimiter",
                "line break",
                doris(|c| c.audits[0].record.delimiter = "\r".into()),
            ),
            (
                "audits[0].record.delimiter",
                "quote = true",
                doris(|c| {
                    c.audits[0].record.delimiter = "\"".into();
                    c.audits[0].record.quote = true;
                }),
            ),
            (
                "audits[0].record.filter.field_count",
                "> 0",
                doris(|c| c.audits[0].record.filter.field_count = Some(0)),
            ),
            (
                "audits[0].record.filter.field_count",
                "less than the 9 names",
                doris(|c| c.audits[0].record.filter.field_count = Some(5)),
            ),
            (
                "audits[0].record.filter.min_fields",
                "> 0",
                doris(|c| c.audits[0].record.filter.min_fields = Some(0)),
            ),
            (
                "audits[0].record.filter.min_fields",
                "more than field_count",
                doris(|c| c.audits[0].record.filter.min_fields = Some(10)),
            ),
            (
                "audits[0].record.filter.require[0]",
                "must not be empty",
                doris(|c| c.audits[0].record.filter.require = vec![" ".into()]),
            ),
            (
                "audits[0].record.filter.require[0]",
                "is not in audits[0].record.fields",
                doris(|c| c.audits[0].record.filter.require = vec!["nope".into()]),
            ),
            // ---- [audits.match]
            (
                "audits[0].match.key",
                "at least one record field",
                doris(|c| {
                    c.audits[0].matching.key.clear();
                    c.audits[0].matching.columns.clear();
                }),
            ),
            (
                "audits[0].match.key[1]",
                "must not be empty",
                doris(|c| c.audits[0].matching.key[1] = " ".into()),
            ),
            (
                "audits[0].match.key[2]",
                "is not in audits[0].record.fields",
                doris(|c| c.audits[0].matching.key[2] = "timestamp".into()),
            ),
            (
                "audits[0].match.columns",
                "has 2 entries but match.key has 3",
                doris(|c| c.audits[0].matching.columns = vec!["a".into(), "b".into()]),
            ),
            (
                "audits[0].match.columns[0]",
                "must not be empty",
                doris(|c| c.audits[0].matching.columns[0] = String::new()),
            ),
            (
                "audits[0].match.columns[1]",
                "not a usable identifier",
                doris(|c| c.audits[0].matching.columns[1] = "a`b".into()),
            ),
            (
                "audits[0].match.columns[2]",
                "not a usable identifier",
                doris(|c| c.audits[0].matching.columns[2] = "a\nb".into()),
            ),
            (
                "audits[0].match.partition_column",
                "must not be empty",
                doris(move |c| {
                    offsets(c);
                    c.audits[0].matching.partition_column = String::new();
                }),
            ),
            (
                "audits[0].match.offset_column",
                "not a usable identifier",
                doris(move |c| {
                    offsets(c);
                    c.audits[0].matching.offset_column = "o`".into();
                }),
            ),
            (
                "audits[0].match.topic_column",
                "not a usable identifier",
                doris(move |c| {
                    offsets(c);
                    c.audits[0].matching.topic_column = Some("t\tx".into());
                }),
            ),
            (
                "audits[0].match.topic_column",
                "more than one topic",
                doris(move |c| {
                    offsets(c);
                    c.audits[0].topics.push("test2".into());
                }),
            ),
            (
                "audits[0].match.strategy",
                "needs sink.kind = elasticsearch",
                doris(|c| c.audits[0].matching.strategy = MatchStrategy::DocId),
            ),
            (
                "audits[0].match.id_template",
                "without a matching `}`",
                es(|c| c.audits[0].matching.id_template = Some("{offset".into())),
            ),
            (
                "audits[0].match.id_template",
                "without a matching `{`",
                es(|c| c.audits[0].matching.id_template = Some("offset}".into())),
            ),
            (
                "audits[0].match.id_template",
                "empty or nested",
                es(|c| c.audits[0].matching.id_template = Some("a{}".into())),
            ),
            (
                "audits[0].match.id_template",
                "at least one placeholder",
                es(|c| c.audits[0].matching.id_template = Some("constant".into())),
            ),
            (
                "audits[0].match.id_template",
                "placeholder {b} is neither",
                es(|c| {
                    c.audits[0].record.format = RecordFormat::Csv;
                    c.audits[0].record.fields = vec!["a".into()];
                    c.audits[0].matching.id_template = Some("{a}-{b}".into());
                }),
            ),
            // ---- [audits.sink], every kind
            (
                "audits[0].sink.url",
                "not a valid URL",
                doris(|c| c.audits[0].sink.url = SecretUrl::new(format!("{SECRET}@nowhere"))),
            ),
            (
                "audits[0].sink.url",
                "scheme must be mysql, http or https (got `ftp`)",
                doris(|c| c.audits[0].sink.url = SecretUrl::new(format!("ftp://u:{SECRET}@h/db"))),
            ),
            (
                "audits[0].sink.url",
                "kind doris needs mysql://",
                doris(|c| {
                    c.audits[0].sink.url = SecretUrl::new(format!("http://u:{SECRET}@h:9030/db"))
                }),
            ),
            (
                "audits[0].sink.url",
                "kind elasticsearch needs http",
                es(|c| {
                    c.audits[0].sink.url = SecretUrl::new(format!("mysql://u:{SECRET}@h:9030/db"))
                }),
            ),
            (
                "audits[0].sink.url",
                "has no host",
                doris(|c| c.audits[0].sink.url = SecretUrl::new("mysql:example_db")),
            ),
            (
                "audits[0].sink.username",
                "differs from the user name in the url",
                doris(|c| c.audits[0].sink.username = Some("other".into())),
            ),
            (
                "audits[0].sink.password_file",
                "not both",
                doris(|c| {
                    c.audits[0].sink.password = Some(SECRET.into());
                    c.audits[0].sink.password_file = Some("/run/secrets/pw".into());
                }),
            ),
            (
                "audits[0].sink.password",
                "url already carries a password",
                doris(|c| {
                    c.audits[0].sink.url =
                        SecretUrl::new(format!("mysql://root:{SECRET}@h:9030/db"));
                    c.audits[0].sink.password = Some(SECRET.into());
                }),
            ),
            (
                "audits[0].sink.password_file",
                "url already carries a password",
                doris(|c| {
                    c.audits[0].sink.url =
                        SecretUrl::new(format!("mysql://root:{SECRET}@h:9030/db"));
                    c.audits[0].sink.password_file = Some("/run/secrets/pw".into());
                }),
            ),
            (
                "audits[0].sink.api_key_file",
                "not both",
                es(|c| {
                    c.audits[0].sink.api_key = Some(SECRET.into());
                    c.audits[0].sink.api_key_file = Some("/run/secrets/key".into());
                }),
            ),
            (
                "audits[0].sink.query_timeout",
                "> 0",
                doris(|c| c.audits[0].sink.query_timeout = Duration::ZERO),
            ),
            (
                "audits[0].sink.index",
                "applies to elasticsearch",
                doris(|c| c.audits[0].sink.index = Some("i".into())),
            ),
            (
                "audits[0].sink.api_key",
                "elasticsearch only",
                doris(|c| c.audits[0].sink.api_key = Some(SECRET.into())),
            ),
            (
                "audits[0].sink.api_key",
                "elasticsearch only",
                doris(|c| c.audits[0].sink.api_key_file = Some("/run/secrets/key".into())),
            ),
            (
                "audits[0].sink.table",
                "is required for kind doris",
                doris(|c| c.audits[0].sink.table = None),
            ),
            (
                "audits[0].sink.table",
                "`table` or `database.table`",
                doris(|c| c.audits[0].sink.table = Some("a.b.c".into())),
            ),
            (
                "audits[0].sink.table",
                "not a usable identifier",
                doris(|c| c.audits[0].sink.table = Some("db.t`".into())),
            ),
            (
                "audits[0].sink.table",
                "names no database",
                doris(|c| {
                    c.audits[0].sink.url = SecretUrl::new(format!("mysql://root:{SECRET}@h:9030"))
                }),
            ),
            (
                "audits[0].sink.url",
                "not the url parameter `require_ssl`",
                doris(|c| {
                    c.audits[0].sink.url =
                        SecretUrl::new("mysql://root@127.0.0.1:9030/db?require_ssl=true")
                }),
            ),
            (
                "audits[0].sink.ca_file",
                "tls is \"disabled\"",
                doris(|c| {
                    c.audits[0].sink.ca_file = Some("/ca.pem".into());
                    c.audits[0].sink.tls = Some(SinkTls::Disabled);
                }),
            ),
            (
                "audits[0].sink.ca_file",
                "does not verify the server",
                doris(|c| {
                    c.audits[0].sink.ca_file = Some("/ca.pem".into());
                    c.audits[0].sink.tls = Some(SinkTls::Required);
                }),
            ),
            (
                "audits[0].sink.client_identity_file",
                "needs audits[0].sink.tls",
                doris(|c| c.audits[0].sink.client_identity_file = Some("/id.p12".into())),
            ),
            (
                "audits[0].sink.client_identity_password",
                "without client_identity_file",
                doris(|c| {
                    c.audits[0].sink.tls = Some(SinkTls::Required);
                    c.audits[0].sink.client_identity_password = Some(SECRET.into());
                }),
            ),
            (
                "audits[0].sink.tls",
                "applies to doris/mysql",
                es(|c| c.audits[0].sink.tls = Some(SinkTls::VerifyCa)),
            ),
            (
                "audits[0].sink.client_identity_file",
                "applies to doris/mysql",
                es(|c| c.audits[0].sink.client_identity_file = Some("/id.p12".into())),
            ),
            (
                "audits[0].sink.stream_load_url",
                "applies to kind doris only",
                doris(|c| {
                    c.audits[0].sink.kind = SinkKind::Mysql;
                    c.audits[0].sink.stream_load_url = Some("http://fe:8030".into());
                }),
            ),
            (
                "audits[0].sink.stream_load_url",
                "not a valid URL",
                doris(|c| c.audits[0].sink.stream_load_url = Some("//fe:8030".into())),
            ),
            (
                "audits[0].sink.stream_load_url",
                "scheme must be http or https",
                doris(|c| c.audits[0].sink.stream_load_url = Some("ftp://fe:8030".into())),
            ),
            (
                "audits[0].sink.stream_load_url",
                "must not carry credentials",
                doris(|c| {
                    c.audits[0].sink.stream_load_url = Some(format!("http://u:{SECRET}@fe:8030"))
                }),
            ),
            (
                "audits[0].sink.table",
                "kind elasticsearch uses `index`",
                es(|c| c.audits[0].sink.table = Some("t".into())),
            ),
            (
                "audits[0].sink.stream_load_url",
                "applies to kind doris only",
                es(|c| c.audits[0].sink.stream_load_url = Some("http://fe:8030".into())),
            ),
            (
                "audits[0].sink.index",
                "is required for kind elasticsearch",
                es(|c| c.audits[0].sink.index = None),
            ),
            (
                "audits[0].sink.index",
                "not a valid index name",
                es(|c| c.audits[0].sink.index = Some("Logs".into())),
            ),
            (
                "audits[0].sink.index",
                "not a valid index name",
                es(|c| c.audits[0].sink.index = Some("_x".into())),
            ),
            (
                "audits[0].sink.index",
                "not a valid index name",
                es(|c| c.audits[0].sink.index = Some("a b".into())),
            ),
            (
                "audits[0].sink.api_key",
                "either api_key or username/password",
                es(|c| c.audits[0].sink.api_key = Some(SECRET.into())),
            ),
            (
                "audits[0].sink.password",
                "needs a username",
                es(|c| {
                    c.audits[0].sink.url = SecretUrl::new("https://127.0.0.1:9200");
                    c.audits[0].sink.password = Some(SECRET.into());
                }),
            ),
            (
                "audits[0].sink.password_file",
                "needs a username",
                es(|c| {
                    c.audits[0].sink.url = SecretUrl::new("https://127.0.0.1:9200");
                    c.audits[0].sink.password_file = Some("/run/secrets/pw".into());
                }),
            ),
        ];
        let count = rules.len();
        for (path, needle, (on_es, edit)) in rules {
            let mut cfg = if on_es { es_base() } else { base() };
            edit(&mut cfg);
            let e = match cfg.validate() {
                Err(e) => e,
                Ok(()) => panic!("rule for {path} ({needle}) did not fire"),
            };
            assert_err(&e, path, needle);
            assert!(!e.to_string().contains(SECRET), "secret echoed: {e}");
        }
        eprintln!("{count} validation rules checked");
    }

    /// Parsing: every key with its own parser (enums, durations, numbers, booleans, lists,
    /// the listen address, start positions) and every section's unknown-key check, given a
    /// bad value, names the key path. `(anchor, replacement, path, word of the message)`:
    /// the anchor is replaced once in [`BASE`].
    #[test]
    fn every_parse_error_names_its_key() {
        let name = "name = \"dns_logs\"";
        let kafka = "[kafka]";
        let record = "[audits.record]";
        let filter = "[audits.record.filter]";
        let matching = "[audits.match]";
        let sink = "[audits.sink]";
        let cases: Vec<(&str, String, &str, &str)> = vec![
            (
                kafka,
                format!("{kafka}\nstart = \"soon\""),
                "kafka.start",
                "start position",
            ),
            (
                kafka,
                format!("{kafka}\nisolation_level = \"dirty\""),
                "kafka.isolation_level",
                "read_committed",
            ),
            (
                kafka,
                format!("{kafka}\nsession_timeout = \"soon\""),
                "kafka.session_timeout",
                "soon",
            ),
            (
                kafka,
                format!("{kafka}\nheartbeat_interval = \"-1s\""),
                "kafka.heartbeat_interval",
                "negative",
            ),
            (
                kafka,
                format!("{kafka}\nstatistics_interval = [1]"),
                "kafka.statistics_interval",
                "duration",
            ),
            (
                kafka,
                format!("{kafka}\nproperties = 5"),
                "kafka.properties",
                "invalid type",
            ),
            (
                kafka,
                format!("{kafka}\ngroupid = \"x\""),
                "kafka",
                "unknown field `groupid`",
            ),
            (
                kafka,
                format!("[server]\nlisten = \"localhost\"\n{kafka}"),
                "server.listen",
                "invalid",
            ),
            (
                kafka,
                format!("[server]\nlisten_on = 1\n{kafka}"),
                "server",
                "unknown field `listen_on`",
            ),
            (
                kafka,
                format!("[server]\napi_token = [\"t\"]\n{kafka}"),
                "server.api_token",
                "invalid type",
            ),
            (
                kafka,
                format!("[state]\ndir = \"x\"\n{kafka}"),
                "state",
                "unknown field `dir`",
            ),
            (
                name,
                format!("{name}\ngrace = \"soon\""),
                "audits[0].grace",
                "soon",
            ),
            (
                name,
                format!("{name}\nverify_interval = \"-5s\""),
                "audits[0].verify_interval",
                "negative",
            ),
            (
                name,
                format!("{name}\ngive_up_after = \"x\""),
                "audits[0].give_up_after",
                "duration",
            ),
            (
                name,
                format!("{name}\nstall_after = true"),
                "audits[0].stall_after",
                "duration",
            ),
            (
                name,
                format!("{name}\nbatch_size = \"lots\""),
                "audits[0].batch_size",
                "invalid",
            ),
            (
                name,
                format!("{name}\nmax_pending = -1"),
                "audits[0].max_pending",
                "invalid",
            ),
            (
                name,
                format!("{name}\ntopic = \"x\""),
                "audits[0]",
                "unknown field `topic`",
            ),
            (
                name,
                format!("{name}\ngroup_id = [1]"),
                "audits[0].group_id",
                "invalid type",
            ),
            (
                "format = \"csv\"",
                "format = \"xml\"".to_string(),
                "audits[0].record.format",
                "csv",
            ),
            (
                record,
                format!("{record}\nquote = \"maybe\""),
                "audits[0].record.quote",
                "invalid",
            ),
            (
                record,
                format!("{record}\nseparator = \"|\""),
                "audits[0].record",
                "unknown field `separator`",
            ),
            (
                filter,
                format!("{filter}\nmin_fields = \"some\""),
                "audits[0].record.filter.min_fields",
                "invalid",
            ),
            (
                filter,
                format!("{filter}\nrequired = [\"a\"]"),
                "audits[0].record.filter",
                "unknown field `required`",
            ),
            (
                matching,
                format!("{matching}\ntopic_column = {{ a = 1 }}"),
                "audits[0].match.topic_column",
                "invalid type",
            ),
            (
                matching,
                format!("{matching}\nkeys = [\"a\"]"),
                "audits[0].match",
                "unknown field `keys`",
            ),
            (
                sink,
                format!("{sink}\nquery_timeout = \"later\""),
                "audits[0].sink.query_timeout",
                "later",
            ),
            (
                sink,
                format!("{sink}\npassword = {{ a = 1 }}"),
                "audits[0].sink.password",
                "invalid type",
            ),
            (
                sink,
                format!("{sink}\npasword = \"x\""),
                "audits[0].sink",
                "unknown field `pasword`",
            ),
        ];
        let count = cases.len();
        for (anchor, replacement, path, needle) in cases {
            assert_eq!(BASE.matches(anchor).count(), 1, "{anchor}");
            let e = toml_err(&BASE.replacen(anchor, &replacement, 1));
            assert_err(&e, path, needle);
        }
        // The strategy enum sits after `[audits.match]`, so it is replaced, not added.
        let e = toml_err(&BASE.replace("\"key_columns\"", "\"fuzzy\""));
        assert_err(&e, "audits[0].match.strategy", "key_columns");
        eprintln!("{} parse errors checked", count + 1);
    }

    /// The rules checked while loading: secret files (unreadable, not UTF-8, empty token)
    /// name the key and the file, never the content.
    #[test]
    fn every_secret_file_rule_names_its_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("missing");
        let binary = dir.path().join("binary");
        std::fs::write(&binary, [0xff, b'h', b'u', b'n']).expect("write");
        let empty = write_temp(&dir, "empty", "\n");
        let m = format!("{:?}", missing.display().to_string());
        let b = format!("{:?}", binary.display().to_string());
        let e = format!("{:?}", empty.display().to_string());
        let sink = |line: String| BASE.replace("table = ", &format!("{line}\ntable = "));
        let es_sink = |line: String| {
            ES_AUDIT
                .replace("elastic:es-url-secret@", "")
                .replace("index = ", &format!("{line}\nindex = "))
        };
        let server = |line: String| BASE.replace("[kafka]", &format!("[server]\n{line}\n[kafka]"));
        let property = |line: String| {
            BASE.replace(
                "[[audits]]",
                &format!("[kafka.property_files]\n{line}\n[[audits]]"),
            )
        };
        let cases: Vec<(String, &str, &str)> = vec![
            (
                sink(format!("password_file = {m}")),
                "audits[0].sink.password_file",
                "cannot read",
            ),
            (
                sink(format!("password_file = {b}")),
                "audits[0].sink.password_file",
                "not valid UTF-8",
            ),
            (
                sink(format!("ca_file = {m}")),
                "audits[0].sink.ca_file",
                "cannot read",
            ),
            (
                format!(
                    "[kafka]\nbrokers = \"127.0.0.1:9092\"\n{}",
                    es_sink(format!("api_key_file = {m}"))
                ),
                "audits[0].sink.api_key_file",
                "cannot read",
            ),
            (
                property(format!("\"sasl.password\" = {m}")),
                "kafka.property_files[\"sasl.password\"]",
                "cannot read",
            ),
            (
                server(format!("api_token_file = {m}")),
                "server.api_token_file",
                "cannot read",
            ),
            (
                server(format!("api_token_file = {b}")),
                "server.api_token_file",
                "not valid UTF-8",
            ),
            (
                server(format!("api_token_file = {e}")),
                "server.api_token_file",
                "must not be empty",
            ),
        ];
        for (toml, path, needle) in cases {
            let err = toml_err(&toml);
            assert_err(&err, path, needle);
            assert!(!err.message.contains("hun"), "content echoed: {err}");
        }
    }

    // ---- secrets ------------------------------------------------------------------

    #[test]
    fn debug_output_contains_no_secret() {
        let dir = tempfile::tempdir().expect("tempdir");
        let api_key = write_temp(&dir, "key", "es-api-key-secret\n");
        let kafka_pw = write_temp(&dir, "kpw", "kafka-file-secret");
        let toml = format!(
            "{}{}",
            BASE.replace("mysql://root@", "mysql://root:url-secret%21@")
                .replace(
                    "[[audits]]",
                    &format!(
                        "[kafka.properties]\n\"sasl.password\" = \"sasl-secret\"\n\
                         [kafka.property_files]\n\"ssl.key.password\" = {:?}\n[[audits]]",
                        kafka_pw.display().to_string()
                    )
                ),
            ES_AUDIT.replace("elastic:es-url-secret@", "").replace(
                "index =",
                &format!(
                    "api_key_file = {:?}\nindex =",
                    api_key.display().to_string()
                )
            )
        );
        let mut cfg = Config::from_toml_str(&toml).expect("valid");
        cfg.audits[0].sink.url = SecretUrl::new("mysql://root@127.0.0.1:9030/example_db");
        cfg.audits[0].sink.password = Some(Secret::new("sink-password-secret"));
        cfg.validate().expect("still valid");
        let all = format!("{cfg:?} {:#?}", cfg);
        for secret in [
            "url-secret",
            "sasl-secret",
            "kafka-file-secret",
            "es-api-key-secret",
            "sink-password-secret",
        ] {
            assert!(!all.contains(secret), "{secret} leaked in {all}");
        }
        assert!(all.contains("[redacted]"));
        assert_eq!(
            cfg.kafka.properties["ssl.key.password"].expose(),
            "kafka-file-secret"
        );
        assert_eq!(
            cfg.audits[1].sink.api_key.as_ref().map(Secret::expose),
            Some("es-api-key-secret")
        );
    }

    /// `server.api_token` from the file (trimmed), from the file key, or from the
    /// environment; never in `Debug`; unset by default (the API stays open).
    #[test]
    fn api_token_sources() {
        assert!(base().server.api_token.is_none());
        let dir = tempfile::tempdir().expect("tempdir");
        let file = write_temp(&dir, "token", "tok-from-file\r\n");
        let server = |line: String| BASE.replace("[kafka]", &format!("[server]\n{line}\n[kafka]"));
        let from_file = Config::from_toml_str(&server(format!(
            "api_token_file = {:?}",
            file.display().to_string()
        )))
        .expect("token file");
        assert_eq!(
            from_file.server.api_token.as_ref().map(Secret::expose),
            Some("tok-from-file")
        );
        assert_eq!(from_file.server.api_token_file, None);
        assert_eq!(from_file.validate(), Ok(()), "a loaded config stays valid");
        let inline = Config::from_toml_str(&server("api_token = \"tok-inline\"".into()))
            .expect("inline token");
        assert_eq!(
            inline.server.api_token.as_ref().map(Secret::expose),
            Some("tok-inline")
        );
        let toml_path = write_temp(&dir, "c.toml", BASE);
        let from_env = Config::load_with_env(
            Some(&toml_path),
            env(&[("GAP_AUDITOR__SERVER__API_TOKEN", "tok-from-env")]),
        )
        .expect("env token");
        assert_eq!(
            from_env.server.api_token.as_ref().map(Secret::expose),
            Some("tok-from-env")
        );
        // The environment overrides the file's inline token, as for every key.
        let toml_path = write_temp(
            &dir,
            "c2.toml",
            &server("api_token = \"tok-inline\"".into()),
        );
        let both = Config::load_with_env(
            Some(&toml_path),
            env(&[("GAP_AUDITOR__SERVER__API_TOKEN", "tok-from-env")]),
        )
        .expect("env wins");
        assert_eq!(
            both.server.api_token.as_ref().map(Secret::expose),
            Some("tok-from-env")
        );
        for cfg in [&from_file, &inline, &from_env] {
            let shown = format!("{cfg:?}");
            assert!(!shown.contains("tok-"), "token in Debug: {shown}");
        }
    }

    #[test]
    fn secret_url_redaction() {
        let url = SecretUrl::new("mysql://root:p%40ss@127.0.0.1:9030/example_db");
        assert_eq!(
            url.to_string(),
            "mysql://root:[redacted]@127.0.0.1:9030/example_db"
        );
        assert_eq!(
            format!("{url:?}"),
            "\"mysql://root:[redacted]@127.0.0.1:9030/example_db\""
        );
        assert_eq!(
            url.expose(),
            "mysql://root:p%40ss@127.0.0.1:9030/example_db"
        );
        assert_eq!(url.username().as_deref(), Some("root"));
        assert_eq!(url.password().as_ref().map(Secret::expose), Some("p@ss"));
        assert_eq!(
            url.without_credentials(),
            "mysql://127.0.0.1:9030/example_db"
        );
        assert_eq!(url.scheme().as_deref(), Some("mysql"));
        // Unencoded special characters in the password never leak.
        let odd = SecretUrl::new("mysql://root:pa/ss#x@h:9030/db");
        assert!(!odd.to_string().contains("pa/ss"), "{odd}");
        let plain = SecretUrl::new("http://127.0.0.1:9200");
        assert_eq!(plain.to_string(), "http://127.0.0.1:9200");
        assert_eq!(SecretUrl::new("root:pw@host").to_string(), "[redacted]");
        assert_eq!(format!("{:?}", Secret::new("x")), "[redacted]");
        assert_eq!(Secret::new("x").to_string(), "[redacted]");
    }

    #[test]
    fn validation_errors_do_not_echo_url_passwords() {
        let e = invalid(|c| c.audits[0].sink.url = SecretUrl::new("postgres://u:topsecret@h/db"));
        assert!(!e.to_string().contains("topsecret"));
        let e = invalid(|c| c.audits[0].sink.url = SecretUrl::new("mysql://u:topsecret@:9030/db"));
        assert!(!e.to_string().contains("topsecret"), "{e}");
    }

    // ---- loading and environment overrides ----------------------------------------

    #[test]
    fn env_overrides_sections_and_audits_by_index() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_temp(&dir, "gap-auditor.toml", BASE);
        let cfg = Config::load_with_env(
            Some(&path),
            env(&[
                ("GAP_AUDITOR__KAFKA__BROKERS", "k1:9092,k2:9092"),
                ("GAP_AUDITOR__KAFKA__START", "-2h"),
                ("GAP_AUDITOR__AUDITS__0__GRACE", "10s"),
                ("GAP_AUDITOR__AUDITS__0__SINK__PASSWORD", "env-password"),
                ("GAP_AUDITOR__AUDITS__0__BATCH_SIZE", "500"),
                ("GAP_AUDITOR__AUDITS__0__RECORD__QUOTE", "true"),
                ("GAP_AUDITOR__AUDITS__0__TOPICS", "test, test2"),
                ("GAP_AUDITOR__AUDITS__0__MATCH__KEY__2", "rcode"),
                ("GAP_AUDITOR__AUDITS__0__PIPELINE_GROUP", ""),
                ("GAP_AUDITOR__KAFKA__PROPERTIES__SASL_PASSWORD", "sasl-env"),
                ("GAP_AUDITOR__SERVER__LISTEN", "127.0.0.1:9999"),
                ("OTHER_VARIABLE", "ignored"),
            ]),
        )
        .expect("env overrides");
        assert_eq!(cfg.kafka.brokers, "k1:9092,k2:9092");
        assert_eq!(
            cfg.kafka.start,
            StartPosition::Ago(Duration::from_secs(7200))
        );
        let a = &cfg.audits[0];
        assert_eq!(a.grace, Duration::from_secs(10));
        assert_eq!(
            a.sink.password.as_ref().map(Secret::expose),
            Some("env-password")
        );
        assert_eq!(a.batch_size, 500);
        assert!(a.record.quote);
        assert_eq!(a.topics, ["test", "test2"]);
        assert_eq!(a.matching.key, ["client_ip", "domain", "rcode"]);
        assert_eq!(a.matching.columns, a.matching.key);
        assert_eq!(a.pipeline_group, None);
        assert_eq!(cfg.kafka.properties["sasl.password"].expose(), "sasl-env");
        assert_eq!(cfg.server.listen.port(), 9999);
    }

    #[test]
    fn env_override_errors_name_the_variable_or_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write_temp(&dir, "gap-auditor.toml", BASE);
        let load = |vars: &[(&str, &str)]| match Config::load_with_env(Some(&path), env(vars)) {
            Err(e) => e,
            Ok(_) => panic!("expected an error for {vars:?}"),
        };
        let e = load(&[("GAP_AUDITOR__AUDITS__0__BATCH_SIZE", "many")]);
        assert_eq!(e.path, "audits[0].batch_size", "{e}");
        let e = load(&[("GAP_AUDITOR__AUDITS__0__GRACE", "-1s")]);
        assert_err(&e, "audits[0].grace", "negative");
        let e = load(&[("GAP_AUDITOR__KAFKA__BROKERS__X", "1")]);
        assert_err(&e, "GAP_AUDITOR__KAFKA__BROKERS__X", "not a section");
        let e = load(&[("GAP_AUDITOR__AUDITS__NAME", "x")]);
        assert_err(&e, "GAP_AUDITOR__AUDITS__NAME", "must be an index");
        let e = load(&[("GAP_AUDITOR__AUDITS__1__NAME", "second")]);
        assert_eq!(e.path, "audits[1].match", "{e}");
        let e = load(&[("GAP_AUDITOR__KAFKA____BROKERS", "x")]);
        assert_err(&e, "GAP_AUDITOR__KAFKA____BROKERS", "empty key segment");
    }

    #[test]
    fn env_can_supply_a_whole_audit() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = load_from(
            None,
            &[dir.path().join("absent.toml")],
            env(&[
                ("GAP_AUDITOR__KAFKA__BROKERS", "k:9092"),
                ("GAP_AUDITOR__AUDITS__0__NAME", "env_audit"),
                ("GAP_AUDITOR__AUDITS__0__TOPICS__0", "t1"),
                ("GAP_AUDITOR__AUDITS__0__RECORD__FORMAT", "raw"),
                ("GAP_AUDITOR__AUDITS__0__MATCH__STRATEGY", "offset_columns"),
                ("GAP_AUDITOR__AUDITS__0__SINK__KIND", "mysql"),
                ("GAP_AUDITOR__AUDITS__0__SINK__URL", "mysql://u@db:3306/app"),
                ("GAP_AUDITOR__AUDITS__0__SINK__TABLE", "events"),
            ]),
        )
        .expect("environment only");
        assert_eq!(cfg.audits[0].name, "env_audit");
        assert_eq!(cfg.audits[0].topics, ["t1"]);
        assert_eq!(cfg.audits[0].sink.kind, SinkKind::Mysql);
    }

    #[test]
    fn environment_only_without_audits_fails_clearly() {
        let dir = tempfile::tempdir().expect("tempdir");
        let e = match load_from(
            None,
            &[dir.path().join("absent.toml")],
            env(&[("GAP_AUDITOR__KAFKA__BROKERS", "k:9092")]),
        ) {
            Err(e) => e,
            Ok(_) => panic!("must fail"),
        };
        assert_err(&e, "audits", "at least one [[audits]] is required");
        assert!(e.message.contains("no config file found"), "{e}");
    }

    #[test]
    fn default_paths_are_searched_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let second = write_temp(&dir, "second.toml", BASE);
        let first = dir.path().join("first.toml");
        let cfg = load_from(None, &[first, second], Vec::new()).expect("second file");
        assert_eq!(cfg.audits[0].name, "dns_logs");
    }

    #[test]
    fn explicit_missing_file_is_an_error() {
        let e = match Config::load_with_env(Some(Path::new("/nonexistent/gap.toml")), Vec::new()) {
            Err(e) => e,
            Ok(_) => panic!("must fail"),
        };
        assert_err(&e, "/nonexistent/gap.toml", "not found");
        let dir = tempfile::tempdir().expect("tempdir");
        let ini = write_temp(&dir, "gap.ini", "x=1");
        let e = match Config::load_with_env(Some(&ini), Vec::new()) {
            Err(e) => e,
            Ok(_) => panic!("must fail"),
        };
        assert!(e.message.contains(".toml, .yaml or .yml"), "{e}");
    }

    #[test]
    fn yaml_files_load_and_null_means_unset() {
        let yaml = r#"
kafka:
  brokers: "127.0.0.1:9092"
  properties:
audits:
  - name: y
    topics: test
    pipeline_group: ~
    record:
      format: json
    match:
      strategy: key_columns
      key: [client_ip]
    sink:
      kind: doris
      url: "mysql://root@127.0.0.1:9030/example_db"
      table: t
"#;
        let cfg = Config::from_yaml_str(yaml).expect("yaml");
        assert_eq!(cfg.audits[0].topics, ["test"]);
        assert_eq!(cfg.audits[0].pipeline_group, None);
        assert!(cfg.kafka.properties.is_empty());
    }
}
