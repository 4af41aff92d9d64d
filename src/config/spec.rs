//! What validation hands on: [`Validated`], a configuration that passed every rule, with
//! the typed [`SinkSpec`] of each audit. Whatever [`Config::validate`] proved about a sink
//! (a table or an index is set, a password has a user, the database of the table is known)
//! is in these types, so the code that builds sinks and replays into them checks nothing
//! again.

use std::path::PathBuf;
use std::time::Duration;

use super::secrets::read_secret_file;
use super::{AuditConfig, Config, ConfigError, Secret, SecretUrl, SinkKind, SinkTls};

/// A configuration that passed [`Config::validate`], with the sink spec of every audit.
#[derive(Debug, Clone)]
pub struct Validated {
    config: Config,
    sinks: Vec<SinkSpec>,
}

impl Validated {
    /// Pairs a configuration with the specs its validation produced, one per audit.
    pub(super) fn new(config: Config, sinks: Vec<SinkSpec>) -> Self {
        debug_assert_eq!(config.audits.len(), sinks.len());
        Self { config, sinks }
    }

    /// The configuration itself.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The sink spec of every audit, in `audits` order.
    pub fn sinks(&self) -> &[SinkSpec] {
        &self.sinks
    }

    /// Every audit with its sink spec.
    pub fn audits(&self) -> impl Iterator<Item = (&AuditConfig, &SinkSpec)> {
        self.config.audits.iter().zip(&self.sinks)
    }

    /// The audit named `name`, with its sink spec.
    pub fn audit(&self, name: &str) -> Option<(&AuditConfig, &SinkSpec)> {
        self.audits().find(|(a, _)| a.name == name)
    }

    /// The configuration, the specs dropped.
    pub fn into_config(self) -> Config {
        self.config
    }

    /// The configuration and the sink specs (in `audits` order).
    pub fn into_parts(self) -> (Config, Vec<SinkSpec>) {
        (self.config, self.sinks)
    }
}

/// A secret of a sink spec: its value, or the `*_file` key holding it when the spec was made
/// from a configuration whose secret files were not read yet (one built in code; the loader
/// reads them before it makes the specs, so a loaded spec always holds values).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// The value (`password`, `api_key`, or the url's password).
    Value(Secret),
    /// Still in a file.
    File {
        /// The key that names the file, such as `audits[0].sink.password_file`.
        key: String,
        /// The file.
        path: PathBuf,
    },
}

impl SecretSource {
    /// From a secret given inline (`{key}`) or as a file (`{key}_file`); validation ensured
    /// at most one is set. `p` is the key path of the section.
    pub(super) fn of(
        p: &str,
        key: &str,
        value: &Option<Secret>,
        file: &Option<PathBuf>,
    ) -> Option<Self> {
        match (value, file) {
            (Some(v), _) => Some(Self::Value(v.clone())),
            (None, Some(path)) => Some(Self::File {
                key: format!("{p}.{key}_file"),
                path: path.clone(),
            }),
            (None, None) => None,
        }
    }

    /// The secret: the value, or the file read now (as the loader reads it: one trailing
    /// newline trimmed). Errors name the key and the file, never the content.
    pub fn read(&self) -> Result<Secret, ConfigError> {
        match self {
            Self::Value(v) => Ok(v.clone()),
            Self::File { key, path } => read_secret_file(key, path),
        }
    }
}

/// The sink of one audit, as validated. (Both specs are boxed: they are large, and of
/// quite different sizes.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkSpec {
    /// Doris or MySQL over the MySQL protocol.
    Sql(Box<SqlSinkSpec>),
    /// Elasticsearch (or an API-compatible server) over HTTP.
    Elasticsearch(Box<EsSinkSpec>),
}

impl SinkSpec {
    /// `sink.kind`.
    pub fn kind(&self) -> SinkKind {
        match self {
            Self::Sql(s) => s.kind.into(),
            Self::Elasticsearch(_) => SinkKind::Elasticsearch,
        }
    }
}

/// The SQL sink kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlKind {
    /// Apache Doris (its MySQL-protocol FE).
    Doris,
    /// MySQL or MariaDB.
    Mysql,
}

impl SqlKind {
    /// `doris` or `mysql`, as in `sink.kind`.
    pub fn as_str(self) -> &'static str {
        SinkKind::from(self).as_str()
    }
}

impl From<SqlKind> for SinkKind {
    fn from(kind: SqlKind) -> Self {
        match kind {
            SqlKind::Doris => SinkKind::Doris,
            SqlKind::Mysql => SinkKind::Mysql,
        }
    }
}

/// The columns (SQL) or fields (Elasticsearch) an audit's matching strategy queries, from
/// `[audits.match]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkColumns {
    /// offset_columns: `match.partition_column`.
    pub partition: String,
    /// offset_columns: `match.offset_column`.
    pub offset: String,
    /// offset_columns: `match.topic_column`, if any.
    pub topic: Option<String>,
    /// key_columns: `match.columns` (default `match.key`), in key order.
    pub key: Vec<String>,
}

/// A doris or mysql sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlSinkSpec {
    /// `doris` or `mysql`.
    pub kind: SqlKind,
    /// `sink.url` as written; the client takes the credentials it embeds unless
    /// `username`/`password` override them.
    pub url: SecretUrl,
    /// `sink.username`, overriding the url's user.
    pub username: Option<String>,
    /// `sink.password` (or `password_file`), overriding the url's password.
    pub password: Option<SecretSource>,
    /// `sink.table` as written: `table` or `database.table`.
    pub table: String,
    /// The table's database: the `database.` of `table`, else the url's path.
    pub database: String,
    /// TLS on the MySQL protocol (and for an https Stream Load).
    pub tls: SqlTls,
    /// doris: `replay --to-sink` writes through Stream Load when `stream_load_url` is set.
    pub stream_load: Option<StreamLoadSpec>,
    /// `sink.query_timeout`, > 0.
    pub query_timeout: Duration,
    /// What the audit's strategy queries.
    pub columns: SinkColumns,
}

/// TLS of a doris/mysql sink: the mode in effect and the files it uses (read when the sink
/// is built).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlTls {
    /// The mode in effect ([`super::SinkConfig::tls_mode`]).
    pub mode: SinkTls,
    /// `sink.ca_file`: the CAs to trust (only with `verify_ca` or `verify_identity`).
    pub ca_file: Option<PathBuf>,
    /// `sink.client_identity_file` (only with TLS on).
    pub client_identity_file: Option<PathBuf>,
    /// `sink.client_identity_password` (only with `client_identity_file`).
    pub client_identity_password: Option<Secret>,
}

/// Doris Stream Load, the writer of `replay --to-sink` when `sink.stream_load_url` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamLoadSpec {
    /// `sink.stream_load_url`: http(s), no credentials in it.
    pub url: String,
    /// The database of the table.
    pub database: String,
    /// The table, without its database.
    pub table: String,
    /// `sink.username`, else the url's; empty when neither is set.
    pub username: String,
    /// `sink.password` (or `password_file`), else the url's.
    pub password: Option<SecretSource>,
}

/// An Elasticsearch sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EsSinkSpec {
    /// `sink.url` without its credentials (they are in `auth`).
    pub url: String,
    /// How the auditor authenticates.
    pub auth: EsAuthSpec,
    /// `sink.index`: an index, alias or pattern.
    pub index: String,
    /// `sink.ca_file`: a PEM bundle trusted besides the system roots (read when the sink is
    /// built).
    pub ca_file: Option<PathBuf>,
    /// `sink.query_timeout`, > 0.
    pub query_timeout: Duration,
    /// What the audit's strategy queries.
    pub columns: SinkColumns,
}

/// How the auditor authenticates to Elasticsearch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EsAuthSpec {
    /// No credentials.
    None,
    /// HTTP basic: `sink.username` (else the url's) and `sink.password` (else the url's;
    /// none sends an empty password).
    Basic {
        /// The user name.
        username: String,
        /// The password, if one is set.
        password: Option<SecretSource>,
    },
    /// `sink.api_key` (or `api_key_file`).
    ApiKey(SecretSource),
}
