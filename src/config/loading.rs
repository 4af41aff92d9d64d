//! Loading: the file (TOML or YAML through the `config` crate), the environment overrides,
//! key-path error fixing, defaults that depend on other keys, then validation.

use std::path::{Path, PathBuf};

use config::{FileFormat, Format, Map, Value as CValue, ValueKind};

use super::env::{apply_env, has_env_prefix};
use super::{
    AuditConfig, Config, ConfigError, DEFAULT_CONFIG_PATHS, DEFAULT_ID_TEMPLATE, MatchStrategy,
    PipelineKind, Validated, err,
};

/// Path used for errors that concern the document as a whole.
const ROOT_PATH: &str = "(top level)";

impl Config {
    /// Loads the file (TOML or YAML by extension; a missing explicitly given file is an
    /// error; `None` searches [`DEFAULT_CONFIG_PATHS`]), applies the process environment
    /// overrides `GAP_AUDITOR__SECTION__KEY`, reads `*_file` secrets and validates
    /// ([`Validated::load`] without the sink specs).
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        Validated::load(path).map(Validated::into_config)
    }

    /// Like [`Config::load`], with the environment given explicitly (variables without
    /// the `GAP_AUDITOR__` prefix are ignored).
    pub fn load_with_env<I>(path: Option<&Path>, env: I) -> Result<Config, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        Validated::load_with_env(path, env).map(Validated::into_config)
    }

    /// Parses a TOML document and validates it (no environment overrides). `*_file`
    /// secrets are read.
    pub fn from_toml_str(s: &str) -> Result<Config, ConfigError> {
        Validated::from_toml_str(s).map(Validated::into_config)
    }

    /// Parses a YAML document and validates it (no environment overrides).
    pub fn from_yaml_str(s: &str) -> Result<Config, ConfigError> {
        Validated::from_str_format(s, FileFormat::Yaml, "(yaml)").map(Validated::into_config)
    }

    /// What a valid configuration sets that nothing reads, one line each with its key path:
    /// `[audits.pipeline] connect_connector` without `connect_url` or `dead_letter_topic`
    /// (SPEC lets an evidence source that cannot be used degrade with a warning).
    /// `validate-config` prints them, `run` logs them.
    pub fn warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, a) in self.audits.iter().enumerate() {
            for key in a.pipeline.ignored_evidence_keys() {
                out.push(format!(
                    "audits[{i}].pipeline.{key}: is read only with connect_url (Kafka Connect \
                     evidence) or dead_letter_topic and is ignored: gaps carry no Kafka \
                     Connect evidence"
                ));
            }
        }
        out
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

impl Validated {
    /// [`Config::load`], keeping what validation returned: the configuration with the sink
    /// spec of every audit.
    pub fn load(path: Option<&Path>) -> Result<Validated, ConfigError> {
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

    /// [`Config::load_with_env`], keeping the sink specs.
    pub fn load_with_env<I>(path: Option<&Path>, env: I) -> Result<Validated, ConfigError>
    where
        I: IntoIterator<Item = (String, String)>,
    {
        let defaults: Vec<PathBuf> = DEFAULT_CONFIG_PATHS.iter().map(PathBuf::from).collect();
        load_from(path, &defaults, env)
    }

    /// [`Config::from_toml_str`], keeping the sink specs.
    pub fn from_toml_str(s: &str) -> Result<Validated, ConfigError> {
        Self::from_str_format(s, FileFormat::Toml, "(toml)")
    }

    fn from_str_format(
        s: &str,
        format: FileFormat,
        origin: &str,
    ) -> Result<Validated, ConfigError> {
        let mut tree = parse_text(s, format, origin)?;
        prepare_tree(&mut tree);
        from_tree(tree)
    }
}

pub(super) fn load_from<I>(
    path: Option<&Path>,
    defaults: &[PathBuf],
    env: I,
) -> Result<Validated, ConfigError>
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

fn from_tree(tree: Map<String, CValue>) -> Result<Validated, ConfigError> {
    let mut config: Config = CValue::new(None, ValueKind::Table(tree))
        .try_deserialize()
        .map_err(from_config_crate_error)?;
    config.normalize()?;
    // Every rule before any secret file is opened, so a broken rule is what gets reported
    // (`password` and `password_file` both set, say, not the file's absence).
    config.check()?;
    config.read_secret_files()?;
    // Once more with the secrets read, for specs that hold their values rather than their
    // files. Reading only moved each `*_file` into its value key, which the first pass
    // allowed, so this pass passes too.
    let sinks = config.check()?;
    Ok(Validated::new(config, sinks))
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
    /// `match.id_template` for doc_id) and folds `[audits.pipeline] kind = "kafka_group"`,
    /// `group` into `pipeline_group`, its exact equivalent (both set: refused, since which
    /// one wins would be a guess).
    fn normalize(&mut self) -> Result<(), ConfigError> {
        for (i, audit) in self.audits.iter_mut().enumerate() {
            if let Some(group) = audit.pipeline.group.take() {
                if audit.pipeline_group.is_some() {
                    return err(
                        format!("audits[{i}].pipeline.group"),
                        format!(
                            "set either audits[{i}].pipeline_group or audits[{i}].pipeline.group \
                             (its long form), not both"
                        ),
                    );
                }
                if audit.pipeline.kind != PipelineKind::KafkaGroup {
                    return err(
                        format!("audits[{i}].pipeline.group"),
                        format!(
                            "only applies to kind = \"kafka_group\", not \"{}\"",
                            audit.pipeline.kind
                        ),
                    );
                }
                audit.pipeline_group = Some(group);
            }
            let m = &mut audit.matching;
            if m.columns.is_empty() {
                m.columns = m.key.clone();
            }
            if m.strategy == MatchStrategy::DocId && m.id_template.is_none() {
                m.id_template = Some(DEFAULT_ID_TEMPLATE.to_owned());
            }
        }
        Ok(())
    }
}
