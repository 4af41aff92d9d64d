//! The configuration tree: the serde structs (their doc comments are the user docs), their
//! defaults and the accessors that read a value in effect.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

use super::deserializers::{
    de_delimiter, de_duration, de_opt_duration, de_opt_secret_url, de_opt_string, de_opt_tls,
    de_string_list,
};
use super::json_schema::{DurationText, StringList, se_duration};
use super::{
    DEFAULT_ID_TEMPLATE, Framing, IsolationLevel, KeySemanticsSetting, MatchStrategy, PipelineKind,
    RecordFormat, Secret, SecretUrl, SinkKind, SinkTls, StartPosition, TimestampText,
};

/// The whole configuration: one Kafka connection, the HTTP server, the local store, and
/// one or more audits.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
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
#[derive(Debug, Clone, Deserialize, JsonSchema)]
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
    #[schemars(with = "Option<DurationText>")]
    pub session_timeout: Option<Duration>,
    /// Consumer heartbeat interval (librdkafka `heartbeat.interval.ms`), default `1s`;
    /// must be shorter than the session timeout. Or `properties."heartbeat.interval.ms"`,
    /// not both.
    #[serde(deserialize_with = "de_opt_duration")]
    #[schemars(with = "Option<DurationText>")]
    pub heartbeat_interval: Option<Duration>,
    /// How often librdkafka reports statistics (`statistics.interval.ms`), default `1s`;
    /// the source of log start/end offsets (lag, retention deadlines), so it cannot be
    /// turned off. Or `properties."statistics.interval.ms"`, not both.
    #[serde(deserialize_with = "de_opt_duration")]
    #[schemars(with = "Option<DurationText>")]
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

    /// Whether the auditor's own group uses KIP-848's consumer group protocol
    /// (`properties."group.protocol" = "consumer"`): the broker then owns the session
    /// timeout, the heartbeat interval and the assignor, which librdkafka refuses to be given.
    pub fn consumer_group_protocol(&self) -> bool {
        self.properties
            .get("group.protocol")
            .is_some_and(|v| v.expose().trim().eq_ignore_ascii_case("consumer"))
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
pub(super) fn parse_millis(v: &str) -> Result<Duration, ()> {
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
#[derive(Debug, Clone, Deserialize, JsonSchema)]
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
    /// The base URL other instances of the auditor group reach this one's API at (e.g.
    /// `http://gap-auditor-0.gap-auditor:9464`), published with each partition's handover
    /// state so that an ack sent to an instance that does not own the gap is forwarded to
    /// the one that does. Unset: acks are not forwarded (a gap this instance does not hold
    /// is 404). Needs `state.handover_topic` to be of use.
    pub advertised_url: Option<String>,
    /// The other instances' `advertised_url`s an ack may be forwarded to (base URLs, e.g.
    /// `["https://gap-auditor-1.gap-auditor:9464"]`). The owner a handover record names is
    /// another process's word, and a forwarded ack carries the bearer token: it is sent
    /// only to a URL listed here, or, with none listed, to one with this instance's own
    /// scheme and port on a sibling DNS name (the same domain after the first label, as
    /// a StatefulSet's pods have), with no path. An instance advertised by IP address or
    /// a one-label name needs the list.
    #[serde(default, deserialize_with = "de_string_list")]
    #[schemars(with = "StringList")]
    pub forward_peers: Vec<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([0, 0, 0, 0], 9464)),
            api_token: None,
            api_token_file: None,
            advertised_url: None,
            forward_peers: Vec::new(),
        }
    }
}

/// `[state]`: where gaps and audit progress are persisted.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
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
/// Sized for the 256 MiB bound (issue 41): ~250 bytes per gap held, measured at 909,000
/// gaps in memory (giveup_soak with give_up_after 24 h): 261 MiB resident between rounds,
/// 310 MiB peak. 500,000 leaves room for the round's own allocations and the key_columns
/// keys.
fn default_max_open_gaps() -> usize {
    500_000
}
fn default_max_deleted_checked() -> u64 {
    10_000_000
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

// One field per key of `[[audits]]` (SPEC's config contract); the sections are their own
// structs.
/// `[[audits]]`: one (topics → sink table/index) pair being checked.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// Unique name of the audit (letters, digits, `_`, `.`, `-`); the `audit` label of
    /// every metric. Required.
    #[serde(default)]
    pub name: String,
    /// Kafka topics the pipeline reads into this sink. Required, at least one.
    #[serde(default, deserialize_with = "de_string_list")]
    #[schemars(with = "StringList")]
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
    #[serde(
        default = "default_grace",
        deserialize_with = "de_duration",
        serialize_with = "se_duration"
    )]
    #[schemars(with = "DurationText")]
    pub grace: Duration,
    /// How often due records are checked against the sink. Default `5s`, must be > 0.
    #[serde(
        default = "default_verify_interval",
        deserialize_with = "de_duration",
        serialize_with = "se_duration"
    )]
    #[schemars(with = "DurationText")]
    pub verify_interval: Duration,
    /// Stop re-checking a missing record this long after it was declared missing.
    /// Default `24h`.
    #[serde(
        default = "default_give_up_after",
        deserialize_with = "de_duration",
        serialize_with = "se_duration"
    )]
    #[schemars(with = "DurationText")]
    pub give_up_after: Duration,
    /// Report the pipeline group as stalled when its committed offset has not moved for
    /// this long while the log grew (lag, not loss). Set it above the pipeline's commit
    /// interval (Flink: the checkpoint interval). Default `5m`.
    #[serde(
        default = "default_stall_after",
        deserialize_with = "de_duration",
        serialize_with = "se_duration"
    )]
    #[schemars(with = "DurationText")]
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
    /// Most gaps the audit keeps in memory, across its partitions (SPEC guarantee 12).
    /// Beyond it the oldest (lowest offsets, taken from the partitions holding most) are
    /// folded: their missing records stop being re-checked early, as after
    /// `give_up_after`, and they merge into one *overflow gap* per partition whose first and
    /// last offsets span every folded gap and whose `missing_records` is their sum (cause
    /// `folded`), counted in `gap_auditor_gaps_folded_total`. Default 500000, at least 1.
    #[serde(default = "default_max_open_gaps")]
    pub max_open_gaps: usize,
    /// offset_columns: most offsets of one range Kafka deleted before the auditor read it
    /// (an outage longer than retention) that the sink is asked about, in bounded pieces
    /// per round; the offsets beyond are unverifiable without asking (never lost). 0: none
    /// is asked. Default 10000000 (docs/SEMANTICS.md "Deleted before read").
    #[serde(default = "default_max_deleted_checked")]
    pub max_deleted_checked: u64,
    /// `[audits.record]`: how Kafka record values are decoded and filtered.
    #[serde(default)]
    pub record: RecordConfig,
    /// `[audits.match]`: how a record is found in the sink.
    #[serde(rename = "match")]
    pub matching: MatchConfig,
    /// `[audits.sink]`: the database or index the pipeline writes to.
    pub sink: SinkConfig,
    /// `[audits.replay]`: what `gap-auditor replay` may assume about the pipeline.
    #[serde(default)]
    pub replay: ReplayConfig,
    /// `[audits.pipeline]`: the pipeline's position source and evidence (SPEC "Pipeline
    /// position and evidence"). `kind = "kafka_group"` with `group` is `pipeline_group`;
    /// loading moves `group` there (see `Config::normalize`).
    #[serde(default)]
    pub pipeline: PipelineConfig,
}

/// `[audits.pipeline]`: where the pipeline's committed position comes from, and what else
/// the pipeline tells about its records. Every key is optional.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct PipelineConfig {
    /// `kafka_group` (default) or `doris_routine_load` (the job's progress from `SHOW ROUTINE
    /// LOAD` on the FE at `url`: src/routine_load).
    pub kind: PipelineKind,
    /// `kind = "kafka_group"`: the pipeline's consumer group; exactly `pipeline_group`.
    /// Setting both is refused.
    #[serde(deserialize_with = "de_opt_string")]
    pub group: Option<String>,
    /// `kind = "doris_routine_load"`: the Doris FE (`mysql://user@fe:9030/db`); may hold
    /// credentials, so it prints redacted.
    pub url: Option<SecretUrl>,
    /// `kind = "doris_routine_load"`: the Routine Load job's name, `name` or `db.name` (the
    /// statement is `SHOW ROUTINE LOAD FOR` it, each part quoted as an identifier).
    #[serde(deserialize_with = "de_opt_string")]
    pub job: Option<String>,
    /// Evidence, with `flink_job`: the Flink JobManager's REST URL (`http://jobmanager:8081`;
    /// may hold credentials for a proxy in front of it, sent as Basic auth, printed
    /// redacted). Read-only, polled every `verify_interval` (`/jobs/overview`,
    /// `/jobs/{jid}/checkpoints`): a `skipped_by_restart` gap then says when the job
    /// restarted and which checkpoint it restored, or none (src/evidence/flink). Never holds
    /// or changes a verdict; an unreadable JobManager is a warning and a state in
    /// `/api/status`. Blank is absent.
    #[serde(default, deserialize_with = "de_opt_secret_url")]
    pub flink_rest_url: Option<SecretUrl>,
    /// Evidence, with `flink_rest_url`: the Flink job's name as the JobManager lists it
    /// (`pipeline.name`); the run that started last is the current one.
    #[serde(deserialize_with = "de_opt_string")]
    pub flink_job: Option<String>,
    /// Evidence, with `connect_connector`: the Kafka Connect worker's REST URL
    /// (`http://connect:8083`; may hold credentials for a proxy in front of it, sent as Basic
    /// auth, printed redacted). Read-only, polled every `verify_interval`
    /// (`/connectors/{name}/status`, `/connectors/{name}/config`): a `skipped_by_restart` or
    /// `dropped_in_flight` gap then names the connector's task failures and restarts in its
    /// window, and whether the connector skips records it cannot convert without a
    /// dead-letter queue (src/evidence/connect). Never holds or changes a verdict; an
    /// unreadable Connect REST API is a warning and a state in `/api/status`.
    #[serde(default, deserialize_with = "de_opt_secret_url")]
    pub connect_url: Option<SecretUrl>,
    /// The Kafka Connect connector's name. With `connect_url`: the connector whose status
    /// and config are read (its sink group is `connect-<name>`). With `dead_letter_topic`:
    /// only dead letters this connector wrote (`__connect.errors.connector.name`) count, so a
    /// topic it shares with another connector cannot turn this pipeline's loss into
    /// `dead_lettered`. With neither, read by nothing (a startup warning says so).
    #[serde(deserialize_with = "de_opt_string")]
    pub connect_connector: Option<String>,
    /// The pipeline's dead-letter topic: an audited record whose coordinates a record there
    /// names (Kafka Connect's `__connect.errors.topic`, `__connect.errors.partition`,
    /// `__connect.errors.offset` headers) is `dead_lettered`, not missing.
    #[serde(deserialize_with = "de_opt_string")]
    pub dead_letter_topic: Option<String>,
    /// Evidence, with `doris_label_prefix`: the Doris FE the pipeline's Stream Loads go
    /// through, on its query port, with the database they load into
    /// (`mysql://auditor@fe:9030/example_db`; may hold credentials, printed redacted).
    /// Read-only, polled every `verify_interval` (`SHOW STREAM LOAD`, which needs the BE's
    /// `enable_stream_load_record = true`): a `dropped_in_flight` gap then names the loads in
    /// its window that filtered rows (src/evidence/stream_load). Never holds or changes a
    /// verdict; an unreadable FE is a warning and a state in `/api/status`. Blank is absent.
    #[serde(default, deserialize_with = "de_opt_secret_url")]
    pub doris_fe_url: Option<SecretUrl>,
    /// Evidence, with `doris_fe_url`: the label prefix of the pipeline's Stream Loads
    /// (flink-doris-connector's `sink.label-prefix`; its two-phase-commit labels are
    /// `<prefix>_<db>_<table>_<subtask>_<checkpoint>`). Only loads of the sink's table whose
    /// label starts with `<prefix>_` are read.
    #[serde(deserialize_with = "de_opt_string")]
    pub doris_label_prefix: Option<String>,
    /// With `doris_fe_url`: how long after a Stream Load ends the FE may list it (Doris
    /// pulls the records from the BEs every `fetch_stream_load_record_interval_second`,
    /// default 120 s, at most `stream_load_record_batch_size`, default 50, per BE a pull).
    /// A new gap's Stream Load evidence waits this long past its commit step (the gap
    /// itself is reported at once). Default `150s` (one pull, one poll and a margin), at
    /// most `1h`.
    #[serde(
        default = "default_stream_load_record_delay",
        deserialize_with = "de_duration",
        serialize_with = "se_duration"
    )]
    #[schemars(with = "DurationText")]
    pub stream_load_record_delay: Duration,
}

fn default_stream_load_record_delay() -> Duration {
    Duration::from_secs(150)
}

impl Default for PipelineConfig {
    fn default() -> Self {
        Self {
            kind: PipelineKind::default(),
            group: None,
            url: None,
            job: None,
            flink_rest_url: None,
            flink_job: None,
            connect_url: None,
            connect_connector: None,
            dead_letter_topic: None,
            doris_fe_url: None,
            doris_label_prefix: None,
            stream_load_record_delay: default_stream_load_record_delay(),
        }
    }
}

impl PipelineConfig {
    /// The evidence keys that are set but read by nothing: `connect_connector` without
    /// `connect_url` or `dead_letter_topic` (SPEC lets an evidence source that cannot be
    /// used degrade with a warning).
    pub fn ignored_evidence_keys(&self) -> Vec<&'static str> {
        let unused = self.connect_connector.is_some()
            && self.connect_url.is_none()
            && self.dead_letter_topic.is_none();
        if unused {
            vec!["connect_connector"]
        } else {
            Vec::new()
        }
    }
}

/// `[audits.replay]`: what the pipeline does with records `gap-auditor replay --to-topic`
/// re-produces, which decides whether the auditor can ever confirm them.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ReplayConfig {
    /// The pipeline writes the `gap-auditor.origin` header (`topic/partition/offset` of the
    /// lost record) into the coordinate columns (offset_columns) or the document id
    /// (doc_id templates over `{topic}`/`{partition}`/`{offset}`) of the records it reads
    /// from a repair topic. Default `false`: such audits refuse `replay --to-topic`, since a
    /// re-produced record's own coordinates name the repair topic and its row could never
    /// confirm the gap. Only for those strategies (key_columns rows keep their key anyway).
    pub pipeline_maps_origin: bool,
}

/// `[audits.record]`: decoding of record values.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
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
    #[schemars(with = "StringList")]
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
#[derive(Debug, Clone, Deserialize, JsonSchema)]
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
    #[serde(
        default = "default_registry_timeout",
        deserialize_with = "de_duration",
        serialize_with = "se_duration"
    )]
    #[schemars(with = "DurationText")]
    pub timeout: Duration,
}

fn default_registry_timeout() -> Duration {
    Duration::from_secs(5)
}

/// `[audits.record.filter]`: records failing the filter are counted as `filtered`, never
/// as missing. Mirror the pipeline's own filter here.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct FilterConfig {
    /// csv: a record is expected only with exactly this many fields.
    pub field_count: Option<usize>,
    /// Fields that must be present and non-empty.
    #[serde(deserialize_with = "de_string_list")]
    #[schemars(with = "StringList")]
    pub require: Vec<String>,
    /// A record is expected only with at least this many fields.
    pub min_fields: Option<usize>,
}

/// `[audits.match]`: how a record is found in the sink.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MatchConfig {
    /// `offset_columns`, `key_columns` or `doc_id` (elasticsearch only). Required.
    pub strategy: MatchStrategy,
    /// key_columns: the record fields forming the key.
    #[serde(default, deserialize_with = "de_string_list")]
    #[schemars(with = "StringList")]
    pub key: Vec<String>,
    /// key_columns: the sink columns holding those fields, same order; default = `key`.
    #[serde(default, deserialize_with = "de_string_list")]
    #[schemars(with = "StringList")]
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
    /// key_columns: `auto` (default: read from the table), `multiset` (every row is kept,
    /// so rows are counted against records) or `presence` (the table keeps one row per key,
    /// so one row confirms every record of its key). A value the table contradicts, or an
    /// `auto` the table cannot decide, refuses to start.
    #[serde(default)]
    pub key_semantics: KeySemanticsSetting,
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

    /// The Kafka coordinates (`topic`, `partition`, `offset`) that identify a record's row
    /// or document: offset_columns' columns (`topic` with `topic_column`), the coordinate
    /// placeholders of the doc_id template; none for key_columns. A record re-produced to
    /// another topic gets new coordinates, so where this is not empty its row confirms the
    /// lost record only if the pipeline carries the origin over. An unparseable template
    /// (refused by validation) counts as all three: never assume less than may be there.
    pub fn identifying_coordinates(&self) -> Vec<&'static str> {
        const ALL: [&str; 3] = ["topic", "partition", "offset"];
        match self.strategy {
            MatchStrategy::KeyColumns => Vec::new(),
            MatchStrategy::OffsetColumns if self.topic_column.is_some() => ALL.to_vec(),
            MatchStrategy::OffsetColumns => vec!["partition", "offset"],
            MatchStrategy::DocId => match crate::template::placeholders(self.id_template()) {
                Ok(names) => ALL.into_iter().filter(|c| names.contains(c)).collect(),
                Err(_) => ALL.to_vec(),
            },
        }
    }
}

// One field per key of `[audits.sink]` (SPEC's config contract).
/// `[audits.sink]`: where the pipeline writes.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
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
    #[serde(
        default = "default_query_timeout",
        deserialize_with = "de_duration",
        serialize_with = "se_duration"
    )]
    #[schemars(with = "DurationText")]
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

    /// Whether the pipeline's committed position is read (a Kafka group, or a Doris
    /// Routine Load job): then records are due by its commits; without one, by time alone.
    pub fn has_position_source(&self) -> bool {
        self.pipeline_group.is_some() || self.pipeline.kind == PipelineKind::DorisRoutineLoad
    }
}
