//! What to decode: the record format and fields of an audit, read from its config, and the
//! decoder (with its schema registry) that `run`, `check` and `replay` all build from it.

use super::{Compiled, Decoder, RecordError};
use crate::record::logical::TimestampFormat;
use crate::record::{avro, protobuf, registry};
use std::sync::Arc;

/// The schema registry of an audit, caching compiled schemas by id.
pub type SchemaRegistry = registry::Registry<Compiled>;

/// The registry for an audit of `format` (avro or protobuf): fetched schemas are compiled
/// for that format, a schema of another type is unusable.
pub fn schema_registry(
    cfg: &crate::config::SchemaRegistryConfig,
    format: DecodeFormat,
) -> Result<SchemaRegistry, String> {
    let client = registry::RegistryClient::new(cfg)?;
    Ok(registry::Registry::new(
        client,
        move |id, raw| match format {
            DecodeFormat::Protobuf => {
                protobuf::ProtoSchema::compile(id, raw).map(Compiled::Protobuf)
            }
            _ => avro::AvroSchema::compile(id, raw).map(Compiled::Avro),
        },
    ))
}

/// The decoder of an audit, exactly as `run`, `check` and `replay` use it: its record
/// spec, and the schema registry when the format needs one.
pub fn decoder_for(audit: &crate::config::AuditConfig) -> Result<Decoder, RecordError> {
    let spec = DecoderSpec::from_config(&audit.record, &audit.matching);
    let format = spec.format;
    let decoder = Decoder::new(spec)?;
    if !format.needs_registry() {
        return Ok(decoder);
    }
    let cfg = audit
        .record
        .schema_registry
        .as_ref()
        .ok_or(RecordError::NoRegistry)?;
    let registry = schema_registry(cfg, format).map_err(RecordError::Registry)?;
    Ok(decoder.with_registry(Arc::new(registry)))
}

/// The record formats the decoder understands (mirrors `record.format` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeFormat {
    /// Delimiter-separated text.
    Csv,
    /// A JSON document, fields addressed by top-level name or JSON pointer.
    Json,
    /// The whole value is one field.
    Raw,
    /// Avro, Confluent-framed, the schema from the registry.
    Avro,
    /// Protobuf, Confluent-framed, the schema from the registry.
    Protobuf,
}

impl DecodeFormat {
    /// Whether records of this format are decoded with a registry schema.
    pub fn needs_registry(self) -> bool {
        matches!(self, DecodeFormat::Avro | DecodeFormat::Protobuf)
    }
}

/// Everything the decoder needs, in plain types, so that this module depends on the config
/// structs in [`DecoderSpec::from_config`] only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecoderSpec {
    /// The record format.
    pub format: DecodeFormat,
    /// csv: the field delimiter, exactly one character (may be multi-byte UTF-8).
    pub delimiter: String,
    /// csv: RFC 4180 double-quote handling; off = plain split.
    pub quote: bool,
    /// csv: the names of the columns in order; raw: `fields[0]` names the value.
    pub fields: Vec<String>,
    /// The exact number of fields a record must have (see the module docs for json/raw).
    pub field_count: Option<usize>,
    /// The minimum number of fields a record must have.
    pub min_fields: Option<usize>,
    /// Fields that must be present and non-empty.
    pub require: Vec<String>,
    /// The match key fields, in order; `Some` only for the `key_columns` strategy.
    pub key: Option<Vec<String>>,
    /// The document id template; `Some` only for the `doc_id` strategy.
    pub id_template: Option<String>,
    /// Values carry the Confluent header (always for avro and protobuf).
    pub confluent_framing: bool,
    /// How logical-type timestamps are rendered (avro, protobuf).
    pub timestamp_format: TimestampFormat,
}

impl Default for DecoderSpec {
    /// A csv decoder with the config defaults: `,`, no quoting, no fields, no filter, no key.
    fn default() -> Self {
        DecoderSpec {
            format: DecodeFormat::Csv,
            delimiter: ",".to_string(),
            quote: false,
            fields: Vec::new(),
            field_count: None,
            min_fields: None,
            require: Vec::new(),
            key: None,
            id_template: None,
            confluent_framing: false,
            timestamp_format: TimestampFormat::Sql,
        }
    }
}

impl DecoderSpec {
    /// Builds the spec from an audit's `record` and `match` sections. A key is requested only
    /// for `key_columns`; the other strategies locate records by coordinates.
    pub fn from_config(
        record: &crate::config::RecordConfig,
        matching: &crate::config::MatchConfig,
    ) -> Self {
        use crate::config::{Framing, MatchStrategy, RecordFormat, TimestampText};
        let format = match record.format {
            RecordFormat::Csv => DecodeFormat::Csv,
            RecordFormat::Json => DecodeFormat::Json,
            RecordFormat::Raw => DecodeFormat::Raw,
            RecordFormat::Avro => DecodeFormat::Avro,
            RecordFormat::Protobuf => DecodeFormat::Protobuf,
        };
        DecoderSpec {
            confluent_framing: format.needs_registry() || record.framing == Framing::Confluent,
            timestamp_format: match record.timestamp_format {
                TimestampText::Sql => TimestampFormat::Sql,
                TimestampText::Iso8601 => TimestampFormat::Iso8601,
                TimestampText::EpochMillis => TimestampFormat::EpochMillis,
            },
            format,
            delimiter: record.delimiter.clone(),
            quote: record.quote,
            fields: record.fields.clone(),
            field_count: record.filter.field_count,
            min_fields: record.filter.min_fields,
            require: record.filter.require.clone(),
            key: match matching.strategy {
                MatchStrategy::KeyColumns => Some(matching.key.clone()),
                MatchStrategy::OffsetColumns | MatchStrategy::DocId => None,
            },
            id_template: match matching.strategy {
                MatchStrategy::DocId => Some(matching.id_template().to_string()),
                MatchStrategy::OffsetColumns | MatchStrategy::KeyColumns => None,
            },
        }
    }
}
