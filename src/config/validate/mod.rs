//! Validation: every rule, pure (no files read, nothing connected); the first problem wins
//! and names its key path.

mod record;
mod shared;
mod sink;

use std::collections::HashMap;
use std::time::Duration;

use super::schema::parse_millis;
use super::spec::{SinkColumns, SinkSpec, Validated};
use super::{
    AuditConfig, Config, ConfigError, MatchStrategy, PipelineKind, RecordFormat, Secret,
    ServerConfig, SinkKind, TIMING_PROPERTIES, err,
};

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

/// Why `topic` is no Kafka topic name (`None`: it is one): also what the page's replay
/// form checks before a name it was sent is used or stored.
pub(crate) fn topic_problem(topic: &str) -> Option<String> {
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

/// A secret given both inline (`{key}`) and as a file (`{key}_file`): which one wins would be
/// a guess, so neither does.
pub(super) fn one_source<T, U>(
    p: &str,
    key: &str,
    value: &Option<T>,
    file: &Option<U>,
) -> Result<(), ConfigError> {
    if value.is_some() && file.is_some() {
        return err(
            format!("{p}.{key}_file"),
            format!("set either {key} or {key}_file, not both"),
        );
    }
    Ok(())
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
    /// files, connects to nothing. A valid configuration comes back as [`Validated`]: a copy
    /// of it with the typed [`SinkSpec`] of every audit.
    pub fn validate(&self) -> Result<Validated, ConfigError> {
        let sinks = self.check()?;
        Ok(Validated::new(self.clone(), sinks))
    }

    /// [`Self::validate`] without the copy: every rule, and the sink spec of every audit in
    /// `audits` order.
    pub(super) fn check(&self) -> Result<Vec<SinkSpec>, ConfigError> {
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
        let mut sinks = Vec::with_capacity(self.audits.len());
        for (i, audit) in self.audits.iter().enumerate() {
            let p = format!("audits[{i}]");
            sinks.push(audit.validate(&p)?);
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
        shared::check_shared_tables(&self.audits, &sinks)?;
        Ok(sinks)
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
        if k.consumer_group_protocol() {
            // KIP-848: the broker owns these; librdkafka would refuse to create the consumer.
            let named = [
                ("kafka.session_timeout", k.session_timeout.is_some()),
                ("kafka.heartbeat_interval", k.heartbeat_interval.is_some()),
            ]
            .into_iter()
            .filter(|&(_, set)| set)
            .map(|(key, _)| key.to_string())
            .chain(
                [
                    "session.timeout.ms",
                    "heartbeat.interval.ms",
                    "partition.assignment.strategy",
                ]
                .into_iter()
                .filter(|p| k.properties.contains_key(*p) || k.property_files.contains_key(*p))
                .map(|p| format!("kafka.properties[\"{p}\"]")),
            )
            .next();
            if let Some(key) = named {
                return err(
                    key,
                    "cannot be set with kafka.properties[\"group.protocol\"] = \"consumer\": \
                     under KIP-848 the broker sets it (group.consumer.* broker configs); \
                     remove it, or use the classic protocol",
                );
            }
        } else if k.heartbeat_interval() >= k.session_timeout() {
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
pub(super) fn check_api_token(path: &str, token: &Secret) -> Result<(), ConfigError> {
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
        one_source("server", "api_token", &self.api_token, &self.api_token_file)?;
        if let Some(token) = &self.api_token {
            check_api_token("server.api_token", token)?;
        }
        if let Some(u) = &self.advertised_url {
            check_advertised_url("server.advertised_url", u)?;
        }
        for (i, u) in self.forward_peers.iter().enumerate() {
            check_advertised_url(&format!("server.forward_peers[{i}]"), u)?;
        }
        Ok(())
    }
}

/// `server.advertised_url`: an absolute http(s) URL with a host, and nothing a base URL
/// cannot carry (credentials, a query, a fragment): forwarded acks are sent to
/// `{url}/api/gaps/{id}/ack`, and the URL is published on the handover topic, where a
/// password would be readable by anyone who reads the topic.
pub(super) fn check_advertised_url(path: &str, value: &str) -> Result<(), ConfigError> {
    let u = match url::Url::parse(value) {
        Ok(u) => u,
        Err(e) => return err(path, format!("not a URL ({e}); e.g. http://host:9464")),
    };
    if !matches!(u.scheme(), "http" | "https") {
        return err(
            path,
            "must be an http:// or https:// URL, e.g. http://host:9464",
        );
    }
    if u.host_str().is_none_or(str::is_empty) {
        return err(path, "must name a host, e.g. http://host:9464");
    }
    if !u.username().is_empty() || u.password().is_some() {
        return err(
            path,
            "must not carry credentials: it is published on the handover topic; forwarded \
             acks carry the caller's bearer token",
        );
    }
    if u.query().is_some() || u.fragment().is_some() {
        return err(path, "must be a base URL without a query or fragment");
    }
    Ok(())
}

impl AuditConfig {
    /// Checks the rules of this one audit, its keys named under `p` (`audits[0]`), and
    /// returns its sink spec. The rules across audits (unique names and consumer groups)
    /// are [`Config::validate`]'s.
    pub fn validate(&self, p: &str) -> Result<SinkSpec, ConfigError> {
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
        if self.max_open_gaps == 0 {
            return err(
                format!("{p}.max_open_gaps"),
                "must be at least 1 (the overflow gap of a partition is one gap)",
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
        self.validate_replay(p)?;
        self.validate_pipeline(p)?;
        let m = &self.matching;
        let columns = SinkColumns {
            partition: m.partition_column.clone(),
            offset: m.offset_column.clone(),
            topic: m.topic_column.clone(),
            key: m.sink_columns().to_vec(),
        };
        self.sink.validate(&format!("{p}.sink"), columns)
    }

    /// Doris Stream Load evidence: the FE and the label prefix together (one alone would
    /// read nothing, silently), a MySQL URL naming the database the loads go into (the
    /// sink table's, when `sink.table` names one), a prefix Doris accepts in a label, and a
    /// sink that is a table.
    fn validate_stream_load_evidence(&self, pp: &str) -> Result<(), ConfigError> {
        let pl = &self.pipeline;
        let prefix = pl.doris_label_prefix.as_deref();
        let Some(u) = &pl.doris_fe_url else {
            if prefix.is_some() {
                return err(
                    format!("{pp}.doris_fe_url"),
                    "is required with doris_label_prefix: the Doris FE's query port and the \
                     database the loads go into (mysql://auditor@fe:9030/example_db)",
                );
            }
            return Ok(());
        };
        let database = u
            .parse()
            .ok()
            .filter(|url| url.scheme() == "mysql" && url.host_str().is_some())
            .map(|url| url.path().trim_start_matches('/').to_owned());
        match database {
            None => {
                return err(
                    format!("{pp}.doris_fe_url"),
                    "must be the Doris FE's query port, mysql:// with a host \
                     (mysql://auditor@fe:9030/example_db)",
                );
            }
            Some(db) if db.is_empty() || db.contains('/') => {
                return err(
                    format!("{pp}.doris_fe_url"),
                    "must name the database the Stream Loads go into as its path \
                     (mysql://auditor@fe:9030/example_db): SHOW STREAM LOAD lists one database",
                );
            }
            // The loads of the sink's table are listed in its database: another one would
            // list none of them, silently.
            Some(db) => {
                if let Some((table_db, _)) =
                    self.sink.table.as_deref().and_then(|t| t.split_once('.'))
                    && !table_db.eq_ignore_ascii_case(&db)
                {
                    return err(
                        format!("{pp}.doris_fe_url"),
                        format!(
                            "names database `{db}`, but sink.table is in `{table_db}`: the FE lists \
                             a table's Stream Loads in its own database"
                        ),
                    );
                }
            }
        }
        match prefix {
            None => {
                return err(
                    format!("{pp}.doris_label_prefix"),
                    "is required with doris_fe_url: the pipeline's Stream Load label prefix \
                     (flink-doris-connector's sink.label-prefix)",
                );
            }
            Some(x)
                if x.is_empty()
                    || x.len() > 100
                    || !x
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':')) =>
            {
                return err(
                    format!("{pp}.doris_label_prefix"),
                    "must be 1 to 100 of the characters Doris allows in a label \
                     (letters, digits, '-', '_', ':')",
                );
            }
            Some(_) => {}
        }
        if self.sink.kind == SinkKind::Elasticsearch {
            return err(
                format!("{pp}.doris_fe_url"),
                "reads Doris Stream Loads, which load tables: the sink is an Elasticsearch index",
            );
        }
        if pl.stream_load_record_delay > Duration::from_secs(3_600) {
            return err(
                format!("{pp}.stream_load_record_delay"),
                "must be at most 1h (Doris lists a finished load within \
                 fetch_stream_load_record_interval_second, default 120 s)",
            );
        }
        Ok(())
    }

    /// `[audits.pipeline]`: the shape of each kind, the dead-letter topic, and what this
    /// build cannot do yet (refused with the key, never silently ignored: a position source
    /// that is not read would leave the audit without the due rule the operator asked for).
    fn validate_pipeline(&self, p: &str) -> Result<(), ConfigError> {
        let pl = &self.pipeline;
        let pp = format!("{p}.pipeline");
        match pl.kind {
            PipelineKind::KafkaGroup => {
                for (key, set) in [("url", pl.url.is_some()), ("job", pl.job.is_some())] {
                    if set {
                        return err(
                            format!("{pp}.{key}"),
                            "only applies to kind = \"doris_routine_load\"",
                        );
                    }
                }
            }
            PipelineKind::DorisRoutineLoad => {
                if self.pipeline_group.is_some() {
                    return err(
                        format!("{p}.pipeline_group"),
                        "is a kafka_group position; with pipeline.kind = \"doris_routine_load\" \
                         the position comes from the Routine Load job: set one of them",
                    );
                }
                match &pl.url {
                    None => {
                        return err(
                            format!("{pp}.url"),
                            "is required for kind = \"doris_routine_load\"",
                        );
                    }
                    Some(u) if !matches!(u.scheme().as_deref(), Some("mysql")) => {
                        return err(
                            format!("{pp}.url"),
                            "scheme must be mysql (the Doris FE's query port)",
                        );
                    }
                    Some(_) => {}
                }
                if pl.job.as_deref().is_none_or(str::is_empty) {
                    return err(
                        format!("{pp}.job"),
                        "is required for kind = \"doris_routine_load\"",
                    );
                }
                // A Routine Load job reads one topic: the audit's other topics would have
                // no position at all, their records never due (a silent gap in the audit).
                if self.topics.len() != 1 {
                    return err(
                        format!("{p}.topics"),
                        "must name exactly one topic with pipeline.kind = \"doris_routine_load\" \
                         (a Routine Load job reads one topic): one audit per job",
                    );
                }
            }
        }
        // Flink evidence: both keys or neither (one alone would read nothing, silently).
        match (&pl.flink_rest_url, pl.flink_job.as_deref()) {
            (Some(u), Some(j)) if !j.is_empty() => {
                let http = matches!(u.scheme().as_deref(), Some("http" | "https"));
                if !http
                    || u.parse()
                        .ok()
                        .and_then(|p| p.host_str().map(str::len))
                        .is_none()
                {
                    return err(
                        format!("{pp}.flink_rest_url"),
                        "must be the JobManager's REST URL, http:// or https:// with a host (http://jobmanager:8081)",
                    );
                }
            }
            (Some(_), _) => {
                return err(
                    format!("{pp}.flink_job"),
                    "is required with flink_rest_url: the Flink job's name as the JobManager lists it",
                );
            }
            (None, Some(_)) => {
                return err(
                    format!("{pp}.flink_rest_url"),
                    "is required with flink_job: the JobManager's REST URL (http://jobmanager:8081)",
                );
            }
            (None, None) => {}
        }
        // Kafka Connect evidence: the URL needs the connector whose status it reads (the
        // connector alone keeps its dead-letter meaning, so it is not required the other way).
        if let Some(u) = &pl.connect_url {
            if pl.connect_connector.is_none() {
                return err(
                    format!("{pp}.connect_connector"),
                    "is required with connect_url: the connector's name as GET /connectors lists it",
                );
            }
            let http = matches!(u.scheme().as_deref(), Some("http" | "https"));
            if !http
                || u.parse()
                    .ok()
                    .and_then(|p| p.host_str().map(str::len))
                    .is_none()
            {
                return err(
                    format!("{pp}.connect_url"),
                    "must be the Kafka Connect REST URL, http:// or https:// with a host (http://connect:8083)",
                );
            }
        }
        self.validate_stream_load_evidence(&pp)?;
        if let Some(t) = &pl.dead_letter_topic {
            if let Some(problem) = topic_problem(t) {
                return err(format!("{pp}.dead_letter_topic"), problem);
            }
            if self.topics.contains(t) {
                return err(
                    format!("{pp}.dead_letter_topic"),
                    format!(
                        "`{t}` is audited by this audit; the dead-letter topic is the pipeline's error output"
                    ),
                );
            }
        }
        Ok(())
    }

    /// `[audits.replay]`: the origin mapping is declared only where coordinates identify
    /// rows; elsewhere it would claim something nothing reads, and hide a misunderstanding.
    fn validate_replay(&self, p: &str) -> Result<(), ConfigError> {
        if self.replay.pipeline_maps_origin && self.matching.identifying_coordinates().is_empty() {
            let how = match self.matching.strategy {
                MatchStrategy::DocId => format!(
                    "match.id_template `{}` uses no Kafka coordinate",
                    self.matching.id_template()
                ),
                _ => "match.strategy key_columns finds rows by key".to_owned(),
            };
            return err(
                format!("{p}.replay.pipeline_maps_origin"),
                format!(
                    "only applies where Kafka coordinates identify rows (offset_columns, or a \
                     doc_id template with {{topic}}, {{partition}} or {{offset}}); {how}, \
                     which a re-produced record keeps: remove it"
                ),
            );
        }
        Ok(())
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
                if m.key.len() > super::MAX_KEY_FIELDS {
                    return err(
                        format!("{mp}.key"),
                        format!(
                            "has {} fields; a key_columns key has at most {} (each empty \
                             value is matched as '' and as NULL, doubling the key's rows in \
                             every query)",
                            m.key.len(),
                            super::MAX_KEY_FIELDS
                        ),
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
                let names = crate::template::placeholders(template)
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
