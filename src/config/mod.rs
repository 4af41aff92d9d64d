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
//! (`audits[0].sink: unknown field `tabel``), so typos never pass silently. What validation
//! proves comes back typed: [`Validated`] holds the configuration and each audit's
//! [`SinkSpec`] (SQL table and database, Elasticsearch index and credentials, TLS), which is
//! all the sinks are built from ([`Validated::load`] loads and validates in one step).
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
//!
//! # Where each job lives
//!
//! `schema` (the structs; their doc comments are the user docs), `kinds` (the enumerations
//! spelled as strings), `deserializers` (durations, lists, the delimiter, the TLS mode),
//! `loading` (files, the `config` crate, key paths in its errors), `env` (the overrides),
//! `secrets` ([`Secret`], [`SecretUrl`], the `*_file` keys), `validate` (every rule, pure),
//! `spec` (what validation returns: [`Validated`], [`SinkSpec`]) and `json_schema` (the
//! JSON Schema `gap-auditor config schema` prints, derived from the structs of `schema`).

mod deserializers;
mod env;
mod json_schema;
mod kinds;
mod loading;
mod schema;
mod secrets;
mod spec;
mod validate;
pub(crate) use validate::topic_problem;

#[cfg(test)]
mod tests;

pub use json_schema::config_json_schema;
pub use kinds::{
    Framing, IsolationLevel, KeySemanticsSetting, MatchStrategy, PipelineKind, RecordFormat,
    SinkKind, SinkTls, StartPosition, TimestampText,
};
pub use schema::{
    AuditConfig, Config, FilterConfig, KafkaConfig, MatchConfig, PipelineConfig, RecordConfig,
    ReplayConfig, SchemaRegistryConfig, ServerConfig, SinkConfig, StateConfig, TIMING_PROPERTIES,
};
pub use secrets::{Secret, SecretUrl};
pub use spec::{
    EsAuthSpec, EsSinkSpec, SecretSource, SinkColumns, SinkSpec, SqlKind, SqlSinkSpec, SqlTls,
    StreamLoadSpec, Validated,
};

/// Prefix of environment overrides: `GAP_AUDITOR__KAFKA__BROKERS=...`.
pub const ENV_PREFIX: &str = "GAP_AUDITOR__";

/// Files tried, in order, when no config file is given explicitly.
pub const DEFAULT_CONFIG_PATHS: [&str; 2] = ["./gap-auditor.toml", "./config/gap-auditor.toml"];

/// Most record fields a `key_columns` key may have. An empty value must match `''` or NULL
/// in the sink (SPEC), so the key query writes a key once per combination of the two over
/// its empty values: 2^16 rows for 16 of them, and a 17th could not be written both ways
/// (its NULL rows would count 0, a false loss).
pub const MAX_KEY_FIELDS: usize = 16;

/// Default `match.id_template` for the `doc_id` strategy.
pub const DEFAULT_ID_TEMPLATE: &str = "{topic}+{partition}+{offset}";

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

/// `Err(ConfigError)` for `path`: every rule ends in one, so this keeps them one line.
fn err<T>(path: impl Into<String>, message: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError::new(path, message))
}
