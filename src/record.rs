//! Record decoding: turns one Kafka record value into a [`Tag`], either *expected* in the
//! sink (with the match key when the audit matches by key columns) or *filtered* with the
//! reason that labels `gap_auditor_records_filtered_total`.
//!
//! Pure and allocation-light: no I/O, no clock, no panics on any input (record contents
//! are attacker controlled). All configuration work (delimiter check, field-name to index
//! resolution, JSON pointer detection) happens once in [`Decoder::new`], so [`Decoder::tag`]
//! is a straight pass over the bytes.
//!
//! Order of the checks in [`Decoder::tag`], each one ending the classification:
//! 1. no value → `tombstone`;
//! 2. not UTF-8, invalid JSON, malformed quoting → `undecodable`;
//! 3. `field_count` / `min_fields`, then `require`, then the key fields (absent) → `filter`:
//!    a record whose key cannot be built can never be found in the sink, so it is not
//!    expected there. An EMPTY key field is a value like any other (SPEC: empty matches
//!    empty): the pipeline writes such records, so they are audited, never skipped.
//!
//! The number of fields a record has: csv, the fields after the split; json, avro and
//! protobuf, the members of the top-level object (0 for any other document); raw, always 1.
//!
//! Schema Registry formats (`avro`, `protobuf`; and any format with `framing =
//! "confluent"`): the value starts with the Confluent header (magic byte, schema id), a
//! value without it is `undecodable`. Avro and Protobuf records are decoded with the writer
//! schema of that id ([`registry`]) into a JSON tree and addressed like json records
//! ([`avro`], [`protobuf`], logical types in [`logical`]). A record whose schema is not in
//! the cache yet is neither expected nor filtered: [`Tag::Unresolved`] keeps its bytes, and
//! the audit decodes it again once the schema arrives (unknown is never filtered). A schema
//! the registry served but that cannot be used makes its records `undecodable`.
//!
//! `doc_id` matching (Elasticsearch): the document `_id` is rendered from a template over
//! `{topic}`, `{partition}`, `{offset}`, `{key}` (the Kafka message key, UTF-8) and record
//! fields, with the Kafka coordinates passed in by [`Decoder::tag_record`]. The id travels
//! as the record's match key, a one-value [`Key`], so the ledger keeps it like a `key_columns`
//! key. A record whose id cannot be built (a field absent or empty, no Kafka key where the
//! template needs one) is `filter`ed; a Kafka key that is not UTF-8 is `undecodable`. The
//! built-in names win over record fields of the same name.

pub mod avro;
pub mod logical;
pub mod protobuf;
pub mod registry;

use std::borrow::Cow;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use logical::TimestampFormat;

/// The values of the match key fields of one record, in key order.
///
/// Packed in ONE allocation, because the ledger holds a key per pending record (millions):
/// each value's UTF-8 bytes followed by a `0xFF` terminator, a byte UTF-8 never contains.
/// That is 16 bytes plus the key's bytes and one byte per value, instead of a `Vec` of
/// `String`s (24 + 24 per value, and an allocation each). It also means one free per key
/// when the audit task drops it, not four, on memory the tailing thread allocated.
/// Shared (`Arc`), because the ledger, the key book and each round's due list all hold
/// the same key: a clone is a count, not a copy (a copy each was 3-5 allocations per
/// record, and the churn of those small blocks grew the heap over a long total loss).
/// Serialized as a list of strings, as before (stored ledger snapshots stay readable).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(Arc<[u8]>);

/// Ends every value inside a [`Key`]; never part of valid UTF-8.
const KEY_END: u8 = 0xFF;

impl Key {
    /// A key of these values, in key order.
    pub fn new<I, S>(values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut buf = Vec::new();
        for v in values {
            buf.extend_from_slice(v.as_ref().as_bytes());
            buf.push(KEY_END);
        }
        Self(Arc::from(buf))
    }

    /// A key of the values `values` yields, or `None` as soon as one is `None` (a field
    /// missing). Built in a per-thread scratch buffer, so the only allocation is the key's
    /// own: this runs once per consumed record on the tailing thread.
    pub fn try_collect<'a>(values: impl Iterator<Item = Option<Cow<'a, str>>>) -> Option<Self> {
        thread_local! {
            static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        fn build<'a>(
            buf: &mut Vec<u8>,
            values: impl Iterator<Item = Option<Cow<'a, str>>>,
        ) -> Option<Key> {
            buf.clear();
            for v in values {
                buf.extend_from_slice(v?.as_bytes());
                buf.push(KEY_END);
            }
            Some(Key(Arc::from(&buf[..])))
        }
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut buf) => {
                let key = build(&mut buf, values);
                // One huge hostile key must not pin its size for the thread's lifetime.
                if buf.capacity() > 64 * 1024 {
                    *buf = Vec::new();
                }
                key
            }
            Err(_) => build(&mut Vec::new(), values),
        })
    }

    /// The packed form (each value's UTF-8 bytes, then `0xFF`): how the store keeps keys.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// A key from its packed form ([`Self::as_bytes`]); `None` unless every value is UTF-8
    /// ended by `0xFF`.
    pub fn from_bytes(b: &[u8]) -> Option<Key> {
        if !b.is_empty() && b.last() != Some(&KEY_END) {
            return None;
        }
        let body = b.strip_suffix(&[KEY_END]).unwrap_or(b);
        if !b.is_empty()
            && !body
                .split(|&c| c == KEY_END)
                .all(|v| std::str::from_utf8(v).is_ok())
        {
            return None;
        }
        Some(Key(Arc::from(b)))
    }

    /// The values, in key order.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        KeyValues {
            rest: &self.0,
            left: self.len(),
        }
    }

    /// The first value (the document id for `doc_id`).
    pub fn first(&self) -> Option<&str> {
        self.values().next()
    }

    /// How many values the key has.
    pub fn len(&self) -> usize {
        self.0.iter().filter(|&&b| b == KEY_END).count()
    }

    /// Whether the key has no value at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The values as owned strings.
    pub fn to_vec(&self) -> Vec<String> {
        self.values().map(str::to_string).collect()
    }

    /// Bytes of key text (without the terminators): what the key costs beyond its header.
    pub fn text_len(&self) -> usize {
        self.0.len() - self.len()
    }
}

struct KeyValues<'a> {
    rest: &'a [u8],
    left: usize,
}

impl<'a> Iterator for KeyValues<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let end = self.rest.iter().position(|&b| b == KEY_END)?;
        let (value, rest) = self.rest.split_at(end);
        self.rest = rest.get(1..).unwrap_or_default();
        self.left = self.left.saturating_sub(1);
        // Only `Key::new` fills the buffer, from `&str`s: every value is valid UTF-8.
        Some(std::str::from_utf8(value).unwrap_or_default())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for KeyValues<'_> {}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Key").field(&self.to_vec()).finish()
    }
}

impl Serialize for Key {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.values())
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<String>::deserialize(d).map(Key::new)
    }
}

/// Why a consumed record is not expected in the sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FilterReason {
    /// Decoded, but rejected by the audit's filter or missing a key field.
    Filter,
    /// Not UTF-8, not JSON, or malformed CSV quoting.
    Undecodable,
    /// A null value (a compaction delete marker).
    Tombstone,
}

impl FilterReason {
    /// Every reason, so that metric series can be created up front with a zero value.
    pub const ALL: [FilterReason; 3] = [
        FilterReason::Filter,
        FilterReason::Undecodable,
        FilterReason::Tombstone,
    ];

    /// The `reason` label value of `gap_auditor_records_filtered_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            FilterReason::Filter => "filter",
            FilterReason::Undecodable => "undecodable",
            FilterReason::Tombstone => "tombstone",
        }
    }
}

/// The Kafka side of a record: what `doc_id` templates can use besides the value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecordMeta<'a> {
    /// The topic.
    pub topic: &'a str,
    /// The partition.
    pub partition: i32,
    /// The offset.
    pub offset: i64,
    /// The message key, when the record has one.
    pub key: Option<&'a [u8]>,
}

/// The classification of one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tag {
    /// The pipeline must write this record. `key` is set for the `key_columns` strategy only.
    Expected {
        /// The match key (`key_columns`), or the document id as a one-value key
        /// (`doc_id`); `None` for `offset_columns`.
        key: Option<Key>,
    },
    /// Not expected in the sink, for this reason.
    Filtered(FilterReason),
    /// Cannot be decided yet: its schema is not in the cache (being fetched). Carries what
    /// [`Decoder::retag`] needs to decode it once the schema is there.
    Unresolved(Box<Unresolved>),
}

/// A record waiting for its schema: its value and Kafka key, kept as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unresolved {
    /// The schema id from the record's framing.
    pub schema_id: u32,
    /// The record value.
    pub value: Box<[u8]>,
    /// The Kafka message key (doc_id templates may use it).
    pub key: Option<Box<[u8]>>,
}

/// A compiled writer schema, of the audit's record format.
#[derive(Debug)]
pub enum Compiled {
    /// An Avro schema.
    Avro(avro::AvroSchema),
    /// A Protobuf schema.
    Protobuf(protobuf::ProtoSchema),
}

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

/// A decoder specification that cannot work. Messages name the offending setting; the
/// config layer prefixes the key path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The csv delimiter is empty or longer than one character.
    #[error("delimiter must be exactly one character, got {0:?}")]
    Delimiter(String),
    /// With `quote = true` the delimiter cannot be the quote character itself.
    #[error("delimiter {0:?} cannot be used with quote = true")]
    QuoteDelimiter(char),
    /// A field name appears twice in `fields`, so it would address two columns.
    #[error("field {0:?} is listed twice in fields")]
    DuplicateField(String),
    /// A `require` or `key` entry names no field of the record.
    #[error("{role} field {name:?} is not one of the record fields {known:?}")]
    UnknownField {
        /// `"require"` or `"key"`.
        role: &'static str,
        /// The unknown name.
        name: String,
        /// The names that are valid here.
        known: Vec<String>,
    },
    /// `key_columns` matching with an empty key list.
    #[error("the match key names no field")]
    EmptyKey,
    /// A `doc_id` template that cannot be parsed.
    #[error("id_template: {0}")]
    IdTemplate(String),
    /// avro/protobuf without `record.schema_registry`.
    #[error("format avro and protobuf need record.schema_registry.url")]
    NoRegistry,
    /// The registry client cannot be built.
    #[error("{0}")]
    Registry(String),
}

/// Where a named field is found in a decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Locator {
    /// csv: the field at this index.
    Index(usize),
    /// json: a top-level member of the object.
    Name(String),
    /// json: an RFC 6901 pointer (`/a/b`).
    Pointer(String),
    /// raw: the whole value.
    Whole,
}

/// One piece of a parsed `doc_id` template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum IdPart {
    Literal(String),
    Topic,
    Partition,
    Offset,
    KafkaKey,
    Field(Locator),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Csv { delimiter: char, quote: bool },
    Json,
    Raw,
    Avro,
    Protobuf,
}

/// Classifies record values for one audit. Build once with [`Decoder::new`]; `tag` is pure
/// and can be called from any thread.
#[derive(Debug, Clone)]
pub struct Decoder {
    kind: Kind,
    field_count: Option<usize>,
    min_fields: Option<usize>,
    require: Vec<Locator>,
    key: Option<Vec<Locator>>,
    id: Option<Vec<IdPart>>,
    /// csv: fields a record usually has, so splitting allocates once instead of growing.
    width: usize,
    /// Values start with the Confluent header.
    framed: bool,
    timestamp_format: TimestampFormat,
    /// avro/protobuf: where schemas come from (none: every record is undecodable).
    registry: Option<Arc<SchemaRegistry>>,
}

/// The name a raw record's single field goes by when `fields` is empty.
const RAW_FIELD: &str = "value";

impl Decoder {
    /// Validates the spec and resolves every field name to its locator.
    pub fn new(spec: DecoderSpec) -> Result<Decoder, RecordError> {
        let kind = match spec.format {
            DecodeFormat::Csv => {
                let mut chars = spec.delimiter.chars();
                let delimiter = match (chars.next(), chars.next()) {
                    (Some(c), None) => c,
                    _ => return Err(RecordError::Delimiter(spec.delimiter)),
                };
                if spec.quote && delimiter == '"' {
                    return Err(RecordError::QuoteDelimiter(delimiter));
                }
                Kind::Csv {
                    delimiter,
                    quote: spec.quote,
                }
            }
            DecodeFormat::Json => Kind::Json,
            DecodeFormat::Raw => Kind::Raw,
            DecodeFormat::Avro => Kind::Avro,
            DecodeFormat::Protobuf => Kind::Protobuf,
        };
        for (i, name) in spec.fields.iter().enumerate() {
            if spec.fields[..i].contains(name) {
                return Err(RecordError::DuplicateField(name.clone()));
            }
        }
        if spec.key.as_ref().is_some_and(Vec::is_empty) {
            return Err(RecordError::EmptyKey);
        }

        let locate = |role: &'static str, name: &String| -> Result<Locator, RecordError> {
            match kind {
                Kind::Csv { .. } => spec
                    .fields
                    .iter()
                    .position(|f| f == name)
                    .map(Locator::Index)
                    .ok_or_else(|| RecordError::UnknownField {
                        role,
                        name: name.clone(),
                        known: spec.fields.clone(),
                    }),
                // JSON fields need not be listed in `fields`: the document (or the writer
                // schema) names them.
                Kind::Json | Kind::Avro | Kind::Protobuf if name.starts_with('/') => {
                    Ok(Locator::Pointer(name.clone()))
                }
                Kind::Json | Kind::Avro | Kind::Protobuf => Ok(Locator::Name(name.clone())),
                Kind::Raw => {
                    let raw_name = spec.fields.first().map_or(RAW_FIELD, String::as_str);
                    if name == raw_name {
                        Ok(Locator::Whole)
                    } else {
                        Err(RecordError::UnknownField {
                            role,
                            name: name.clone(),
                            known: vec![raw_name.to_string()],
                        })
                    }
                }
            }
        };
        let require = spec
            .require
            .iter()
            .map(|n| locate("require", n))
            .collect::<Result<Vec<_>, _>>()?;
        let key = match &spec.key {
            Some(names) => Some(
                names
                    .iter()
                    .map(|n| locate("key", n))
                    .collect::<Result<Vec<_>, _>>()?,
            ),
            None => None,
        };
        let id = match &spec.id_template {
            Some(template) => {
                let mut parts = Vec::new();
                for piece in parse_template(template).map_err(RecordError::IdTemplate)? {
                    parts.push(match piece {
                        TemplatePiece::Literal(l) => IdPart::Literal(l.to_string()),
                        TemplatePiece::Name("topic") => IdPart::Topic,
                        TemplatePiece::Name("partition") => IdPart::Partition,
                        TemplatePiece::Name("offset") => IdPart::Offset,
                        TemplatePiece::Name("key") => IdPart::KafkaKey,
                        TemplatePiece::Name(name) => {
                            IdPart::Field(locate("id_template", &name.to_string())?)
                        }
                    });
                }
                if !parts.iter().any(|p| !matches!(p, IdPart::Literal(_))) {
                    return Err(RecordError::IdTemplate(
                        "must contain at least one placeholder such as {offset}".into(),
                    ));
                }
                Some(parts)
            }
            None => None,
        };
        Ok(Decoder {
            kind,
            width: spec.field_count.unwrap_or(spec.fields.len()).clamp(1, 64),
            field_count: spec.field_count,
            min_fields: spec.min_fields,
            require,
            key,
            id,
            framed: spec.confluent_framing || spec.format.needs_registry(),
            timestamp_format: spec.timestamp_format,
            registry: None,
        })
    }

    /// This decoder, taking avro/protobuf schemas from `registry`.
    pub fn with_registry(mut self, registry: Arc<SchemaRegistry>) -> Self {
        self.registry = Some(registry);
        self
    }

    /// The schema registry, for formats that need one.
    pub fn registry(&self) -> Option<&Arc<SchemaRegistry>> {
        self.registry.as_ref()
    }

    /// Decodes a record that waited for its schema, with the Kafka coordinates of `meta`
    /// (its key comes from the record itself). `Unresolved` again while the schema is
    /// still not in the cache.
    pub fn retag(&self, u: &Unresolved, meta: &RecordMeta<'_>) -> Tag {
        let meta = RecordMeta {
            key: u.key.as_deref(),
            ..*meta
        };
        self.tag_record(Some(&u.value), &meta)
    }

    /// Like [`Decoder::tag_record`], but a record whose schema is not cached yet is fetched
    /// (and awaited) rather than left unresolved: for `check` and `replay`, which must give
    /// the daemon's verdicts. Errors when the registry cannot give the schema.
    pub async fn tag_resolved(
        &self,
        value: Option<&[u8]>,
        meta: &RecordMeta<'_>,
    ) -> Result<Tag, registry::RegistryError> {
        match self.tag_record(value, meta) {
            Tag::Unresolved(u) => {
                if let Some(r) = &self.registry {
                    r.resolve(u.schema_id).await?;
                }
                match self.retag(&u, meta) {
                    // Only if the cache dropped it between the fetch and here.
                    Tag::Unresolved(_) => Err(registry::RegistryError::Unavailable(format!(
                        "schema id {} fetched but not cached",
                        u.schema_id
                    ))),
                    tag => Ok(tag),
                }
            }
            tag => Ok(tag),
        }
    }

    /// Classifies one Kafka record value without its Kafka metadata (all zero/empty, no key):
    /// enough for every strategy but `doc_id`, whose ids need [`Decoder::tag_record`].
    pub fn tag(&self, value: Option<&[u8]>) -> Tag {
        self.tag_record(value, &RecordMeta::default())
    }

    /// Classifies one Kafka record, its value (`None` = tombstone) and its coordinates and
    /// key (for `doc_id` templates). Never panics on any input.
    pub fn tag_record(&self, value: Option<&[u8]>, meta: &RecordMeta<'_>) -> Tag {
        let Some(mut bytes) = value else {
            return Tag::Filtered(FilterReason::Tombstone);
        };
        if self.framed {
            let Some((id, payload)) = registry::split_frame(bytes) else {
                return Tag::Filtered(FilterReason::Undecodable);
            };
            match self.kind {
                Kind::Avro | Kind::Protobuf => return self.tag_schema(id, bytes, payload, meta),
                _ => bytes = payload,
            }
        }
        // One UTF-8 check for every format: non-UTF-8 input is `undecodable` by the same
        // rule everywhere, and the decoders below work on `&str` and can borrow from it.
        let Ok(text) = std::str::from_utf8(bytes) else {
            return Tag::Filtered(FilterReason::Undecodable);
        };
        let decoded = match self.kind {
            Kind::Csv { delimiter, quote } => {
                let line = strip_line_end(text);
                let fields = if quote {
                    match split_quoted(line, delimiter) {
                        Some(fields) => fields,
                        None => return Tag::Filtered(FilterReason::Undecodable),
                    }
                } else {
                    let mut fields = Vec::with_capacity(self.width);
                    fields.extend(line.split(delimiter).map(Cow::Borrowed));
                    fields
                };
                Decoded::Csv(fields)
            }
            Kind::Json => match serde_json::from_str::<Value>(text) {
                Ok(doc) => Decoded::Json(doc),
                Err(_) => return Tag::Filtered(FilterReason::Undecodable),
            },
            Kind::Raw => Decoded::Raw(text),
            // Framed formats returned above.
            Kind::Avro | Kind::Protobuf => return Tag::Filtered(FilterReason::Undecodable),
        };
        self.classify(&decoded, meta)
    }

    /// An avro/protobuf record of schema `id`: decoded with the cached schema, or left
    /// unresolved (with its bytes) while the schema is being fetched.
    fn tag_schema(&self, id: u32, value: &[u8], payload: &[u8], meta: &RecordMeta<'_>) -> Tag {
        let Some(registry) = &self.registry else {
            return Tag::Filtered(FilterReason::Undecodable);
        };
        let schema = match registry.lookup(id) {
            registry::Lookup::Ready(s) => s,
            registry::Lookup::Broken(_) => return Tag::Filtered(FilterReason::Undecodable),
            registry::Lookup::Waiting => {
                return Tag::Unresolved(Box::new(Unresolved {
                    schema_id: id,
                    value: Box::from(value),
                    key: meta.key.map(Box::from),
                }));
            }
        };
        let doc = match &*schema {
            Compiled::Avro(s) => s.decode(payload, self.timestamp_format),
            Compiled::Protobuf(s) => s.decode(payload, self.timestamp_format),
        };
        match doc {
            Ok(doc) => self.classify(&Decoded::Json(doc), meta),
            Err(_) => Tag::Filtered(FilterReason::Undecodable),
        }
    }

    /// Why a value is undecodable, in words, for the startup check's log line: `None` when
    /// it decodes (or is still waiting for its schema). Never prints record contents.
    pub fn explain(&self, value: &[u8]) -> Option<String> {
        let framed = registry::split_frame(value);
        let looks_framed = framed.is_some();
        let bytes = if self.framed {
            match framed {
                Some((id, payload)) => {
                    if let (Kind::Avro | Kind::Protobuf, Some(r)) = (self.kind, &self.registry) {
                        return match r.lookup(id) {
                            registry::Lookup::Ready(s) => match &*s {
                                Compiled::Avro(s) => s.decode(payload, self.timestamp_format),
                                Compiled::Protobuf(s) => s.decode(payload, self.timestamp_format),
                            }
                            .err()
                            .map(|e| format!("schema id {id}: {e}")),
                            registry::Lookup::Broken(e) => Some(e.to_string()),
                            registry::Lookup::Waiting => None,
                        };
                    }
                    payload
                }
                None => {
                    return Some(
                        "no Confluent Schema Registry header (magic byte 0, 4-byte schema id)"
                            .into(),
                    );
                }
            }
        } else {
            value
        };
        if !self.framed && looks_framed {
            return Some(
                "starts with a Confluent Schema Registry header (magic byte 0, schema id): \
                 set record.format = \"avro\" or \"protobuf\", or framing = \"confluent\""
                    .into(),
            );
        }
        match std::str::from_utf8(bytes) {
            Err(e) => Some(format!("not UTF-8 ({e})")),
            Ok(text) if self.kind == Kind::Json => serde_json::from_str::<Value>(text)
                .err()
                .map(|e| format!("not JSON ({e})")),
            Ok(_) if matches!(self.kind, Kind::Csv { quote: true, .. }) => {
                Some("malformed quoting".into())
            }
            Ok(_) => None,
        }
    }

    /// Applies the field-count filters and `require`, and builds the key or document id.
    fn classify(&self, decoded: &Decoded<'_>, meta: &RecordMeta<'_>) -> Tag {
        let count = decoded.field_count();
        if self.field_count.is_some_and(|n| count != n)
            || self.min_fields.is_some_and(|n| count < n)
        {
            return Tag::Filtered(FilterReason::Filter);
        }
        let present = |loc: &Locator| decoded.get(loc).filter(|v| !v.is_empty());
        if !self.require.iter().all(|loc| present(loc).is_some()) {
            return Tag::Filtered(FilterReason::Filter);
        }
        let key = match &self.key {
            None => None,
            Some(locators) => match Key::try_collect(locators.iter().map(|l| decoded.get(l))) {
                Some(key) => Some(key),
                None => return Tag::Filtered(FilterReason::Filter),
            },
        };
        if let Some(parts) = &self.id {
            return match build_id(parts, decoded, meta) {
                Ok(id) => Tag::Expected {
                    key: Some(Key::new([id])),
                },
                Err(reason) => Tag::Filtered(reason),
            };
        }
        Tag::Expected { key }
    }
}

/// Renders a document id; a field or Kafka key that is absent or empty filters the record,
/// a Kafka key that is not UTF-8 makes it undecodable.
fn build_id(
    parts: &[IdPart],
    decoded: &Decoded<'_>,
    meta: &RecordMeta<'_>,
) -> Result<String, FilterReason> {
    use std::fmt::Write;
    let mut id = String::new();
    for part in parts {
        match part {
            IdPart::Literal(l) => id.push_str(l),
            IdPart::Topic => id.push_str(meta.topic),
            IdPart::Partition => {
                let _ = write!(id, "{}", meta.partition);
            }
            IdPart::Offset => {
                let _ = write!(id, "{}", meta.offset);
            }
            IdPart::KafkaKey => {
                let bytes = meta
                    .key
                    .filter(|k| !k.is_empty())
                    .ok_or(FilterReason::Filter)?;
                id.push_str(std::str::from_utf8(bytes).map_err(|_| FilterReason::Undecodable)?);
            }
            IdPart::Field(loc) => {
                let v = decoded
                    .get(loc)
                    .filter(|v| !v.is_empty())
                    .ok_or(FilterReason::Filter)?;
                id.push_str(&v);
            }
        }
    }
    Ok(id)
}

/// A piece of a `{name}` template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TemplatePiece<'a> {
    Literal(&'a str),
    Name(&'a str),
}

/// Splits `a{b}c` into literals and placeholder names (no escapes: `{` and `}` are always
/// delimiters, as `config` validates).
fn parse_template(template: &str) -> Result<Vec<TemplatePiece<'_>>, String> {
    let mut out = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with('}') {
            return Err("has a `}` without a matching `{`".to_owned());
        }
        if open > 0 {
            out.push(TemplatePiece::Literal(&rest[..open]));
        }
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            return Err("has a `{` without a matching `}`".to_owned());
        };
        let name = &after[..close];
        if name.is_empty() || name.contains('{') {
            return Err("has an empty or nested `{}` placeholder".to_owned());
        }
        out.push(TemplatePiece::Name(name));
        rest = &after[close + 1..];
    }
    if !rest.is_empty() {
        out.push(TemplatePiece::Literal(rest));
    }
    Ok(out)
}

/// A record value after format decoding, before filtering.
enum Decoded<'a> {
    Csv(Vec<Cow<'a, str>>),
    Json(Value),
    Raw(&'a str),
}

impl Decoded<'_> {
    /// How many fields the record has, for `field_count` and `min_fields`.
    fn field_count(&self) -> usize {
        match self {
            Decoded::Csv(fields) => fields.len(),
            Decoded::Json(doc) => doc.as_object().map_or(0, serde_json::Map::len),
            Decoded::Raw(_) => 1,
        }
    }

    /// The text of a field, or `None` when the record does not have it.
    fn get(&self, loc: &Locator) -> Option<Cow<'_, str>> {
        match (self, loc) {
            (Decoded::Csv(fields), Locator::Index(i)) => {
                fields.get(*i).map(|f| Cow::Borrowed(f.as_ref()))
            }
            (Decoded::Json(doc), Locator::Name(name)) => doc
                .as_object()
                .and_then(|o| o.get(name))
                .and_then(json_text),
            (Decoded::Json(doc), Locator::Pointer(ptr)) => doc.pointer(ptr).and_then(json_text),
            (Decoded::Raw(text), Locator::Whole) => Some(Cow::Borrowed(text)),
            // Decoder::new only builds locators of the decoder's own format.
            _ => None,
        }
    }
}

/// The text a JSON value is matched by: strings as they are, scalars as their JSON text,
/// containers as compact JSON; null counts as absent.
fn json_text(value: &Value) -> Option<Cow<'_, str>> {
    match value {
        Value::Null => None,
        Value::String(s) => Some(Cow::Borrowed(s)),
        Value::Bool(b) => Some(Cow::Borrowed(if *b { "true" } else { "false" })),
        Value::Number(n) => Some(Cow::Owned(n.to_string())),
        // Member order follows serde_json's map (sorted keys), not the source text.
        Value::Array(_) | Value::Object(_) => Some(Cow::Owned(value.to_string())),
    }
}

/// Removes one trailing line end: producers that write log lines often keep the newline.
fn strip_line_end(text: &str) -> &str {
    text.strip_suffix("\r\n")
        .or_else(|| text.strip_suffix('\n'))
        .unwrap_or(text)
}

/// Splits RFC 4180 style: a field that starts with `"` runs to the next lone `"`, with `""`
/// standing for one quote; it may contain the delimiter and line breaks. A quote inside an
/// unquoted field is kept as is (log lines carry stray quotes). Returns `None` for an
/// unterminated quoted field or text between a closing quote and the next delimiter.
fn split_quoted(line: &str, delimiter: char) -> Option<Vec<Cow<'_, str>>> {
    let mut fields = Vec::new();
    let mut rest = line;
    loop {
        if let Some(mut inner) = rest.strip_prefix('"') {
            let mut field = String::new();
            loop {
                let end = inner.find('"')?;
                field.push_str(&inner[..end]);
                inner = &inner[end + 1..];
                match inner.strip_prefix('"') {
                    Some(after) => {
                        field.push('"');
                        inner = after;
                    }
                    None => break,
                }
            }
            fields.push(Cow::Owned(field));
            if inner.is_empty() {
                return Some(fields);
            }
            rest = inner.strip_prefix(delimiter)?;
        } else {
            match rest.find(delimiter) {
                Some(at) => {
                    fields.push(Cow::Borrowed(&rest[..at]));
                    rest = &rest[at + delimiter.len_utf8()..];
                }
                None => {
                    fields.push(Cow::Borrowed(rest));
                    return Some(fields);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const SEED_LINE: &str = "192.168.1.10|www.example.com|2024-01-01 10:00:00|93.184.216.34|NOERROR|A|ns1.example.com|-|8.8.8.8";

    fn seed_fields() -> Vec<String> {
        [
            "client_ip",
            "domain",
            "time",
            "target_ip",
            "rcode",
            "query_type",
            "authority_record",
            "add_msg",
            "dns_ip",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    fn strings(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    /// The seed audit: `|`-separated DNS lines, 9 fields, key on the first three.
    fn seed_decoder() -> Decoder {
        Decoder::new(DecoderSpec {
            delimiter: "|".into(),
            fields: seed_fields(),
            field_count: Some(9),
            key: Some(strings(&["client_ip", "domain", "time"])),
            ..DecoderSpec::default()
        })
        .expect("seed spec is valid")
    }

    fn expected(key: &[&str]) -> Tag {
        Tag::Expected {
            key: Some(Key::new(key)),
        }
    }

    const FILTERED: Tag = Tag::Filtered(FilterReason::Filter);
    const UNDECODABLE: Tag = Tag::Filtered(FilterReason::Undecodable);

    fn json_decoder(key: &[&str]) -> Decoder {
        Decoder::new(DecoderSpec {
            format: DecodeFormat::Json,
            key: Some(strings(key)),
            ..DecoderSpec::default()
        })
        .expect("json spec is valid")
    }

    /// A registry nobody answers at (port 9 on loopback): only `insert` fills its cache.
    fn offline_registry(format: DecodeFormat) -> Arc<SchemaRegistry> {
        let cfg = crate::config::SchemaRegistryConfig {
            url: "http://127.0.0.1:9".into(),
            username: None,
            password: None,
            password_file: None,
            ca_file: None,
            timeout: std::time::Duration::from_millis(200),
        };
        Arc::new(schema_registry(&cfg, format).expect("client"))
    }

    const DNS_AVRO: &str = r#"{"type":"record","name":"Dns","fields":[
        {"name":"client_ip","type":"string"},
        {"name":"domain","type":["null","string"]},
        {"name":"time","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#;

    /// Confluent framing of schema `id` around an Avro datum of [`DNS_AVRO`].
    fn dns_avro(id: u32, ip: &str, domain: Option<&str>, ms: i64) -> Vec<u8> {
        use apache_avro::types::Value as A;
        let schema = apache_avro::Schema::parse_str(DNS_AVRO).expect("schema");
        let mut r = apache_avro::types::Record::new(&schema).expect("record");
        r.put("client_ip", ip);
        r.put(
            "domain",
            match domain {
                Some(d) => A::Union(1, Box::new(A::String(d.into()))),
                None => A::Union(0, Box::new(A::Null)),
            },
        );
        r.put("time", A::TimestampMillis(ms));
        let mut out = vec![0];
        out.extend(id.to_be_bytes());
        out.extend(
            apache_avro::writer::datum::GenericDatumWriter::builder(&schema)
                .build()
                .expect("writer")
                .write_value_to_vec(r)
                .expect("encode"),
        );
        out
    }

    #[test]
    fn avro_records_wait_for_their_schema_then_decode_like_json() {
        let registry = offline_registry(DecodeFormat::Avro);
        let d = Decoder::new(DecoderSpec {
            format: DecodeFormat::Avro,
            key: Some(strings(&["client_ip", "domain", "time"])),
            ..DecoderSpec::default()
        })
        .expect("valid")
        .with_registry(registry.clone());
        let value = dns_avro(7, "10.0.0.1", Some("a.example"), 1_714_564_800_000);
        let meta = RecordMeta {
            key: Some(b"k"),
            ..RecordMeta::default()
        };
        // Not cached: neither expected nor filtered, and the bytes are kept.
        let Tag::Unresolved(u) = d.tag_record(Some(&value), &meta) else {
            panic!("a record without its schema must wait");
        };
        assert_eq!(
            (u.schema_id, &*u.value, u.key.as_deref()),
            (7, &value[..], Some(&b"k"[..]))
        );
        // The tailing thread asks for nothing: the audit's `Held` asks for the id of the
        // first record a partition holds (issue 19 review).
        assert!(registry.waiting().is_empty(), "not asked for by the lookup");
        registry.insert(
            7,
            &registry::RawSchema {
                schema_type: registry::SchemaType::Avro,
                text: DNS_AVRO.into(),
                references: Vec::new(),
            },
        );
        assert_eq!(
            d.retag(&u, &RecordMeta::default()),
            expected(&["10.0.0.1", "a.example", "2024-05-01 12:00:00"])
        );
        // A null union branch is an absent field: the key cannot be built.
        assert_eq!(d.tag(Some(&dns_avro(7, "10.0.0.1", None, 0))), FILTERED);
        // Not framed, garbage after the header, a schema that is not Avro.
        assert_eq!(d.tag(Some(b"10.0.0.1|a")), UNDECODABLE);
        assert_eq!(d.tag(Some(&[0, 0, 0, 0, 7, 0xFF])), UNDECODABLE);
        registry.insert(
            8,
            &registry::RawSchema {
                schema_type: registry::SchemaType::Protobuf,
                text: "syntax = \"proto3\";".into(),
                references: Vec::new(),
            },
        );
        assert_eq!(d.tag(Some(&dns_avro(8, "1", Some("d"), 0))), UNDECODABLE);
        let why = d
            .explain(&dns_avro(8, "1", Some("d"), 0))
            .expect("explained");
        assert!(why.contains("schema id 8"), "{why}");
    }

    #[test]
    fn json_with_confluent_framing_strips_the_header() {
        let d = Decoder::new(DecoderSpec {
            format: DecodeFormat::Json,
            confluent_framing: true,
            key: Some(strings(&["/a/b"])),
            ..DecoderSpec::default()
        })
        .expect("valid");
        let mut v = vec![0, 0, 0, 0, 3];
        v.extend(br#"{"a":{"b":"x"}}"#);
        assert_eq!(d.tag(Some(&v)), expected(&["x"]));
        assert_eq!(d.tag(Some(br#"{"a":{"b":"x"}}"#)), UNDECODABLE, "no header");
    }

    #[test]
    fn without_a_registry_schema_formats_are_undecodable_never_waiting_forever() {
        let d = Decoder::new(DecoderSpec {
            format: DecodeFormat::Protobuf,
            ..DecoderSpec::default()
        })
        .expect("valid");
        assert_eq!(d.tag(Some(&[0, 0, 0, 0, 1, 0])), UNDECODABLE);
    }

    #[test]
    fn reason_labels() {
        let labels: Vec<_> = FilterReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels, ["filter", "undecodable", "tombstone"]);
    }

    #[test]
    fn seed_line_is_expected_with_its_key() {
        let tag = seed_decoder().tag(Some(SEED_LINE.as_bytes()));
        assert_eq!(
            tag,
            expected(&["192.168.1.10", "www.example.com", "2024-01-01 10:00:00"])
        );
    }

    #[test]
    fn seed_line_with_trailing_newline() {
        let d = seed_decoder();
        for end in ["\n", "\r\n"] {
            let line = format!("{SEED_LINE}{end}");
            assert!(matches!(
                d.tag(Some(line.as_bytes())),
                Tag::Expected { key: Some(_) }
            ));
        }
        // Only one line end is stripped: the ninth field of this one is "8.8.8.8\n".
        let line = format!("{SEED_LINE}\n\n");
        let d = Decoder::new(DecoderSpec {
            delimiter: "|".into(),
            fields: seed_fields(),
            key: Some(strings(&["dns_ip"])),
            ..DecoderSpec::default()
        })
        .expect("valid");
        assert_eq!(d.tag(Some(line.as_bytes())), expected(&["8.8.8.8\n"]));
    }

    #[test]
    fn wrong_field_counts_are_filtered() {
        let d = seed_decoder();
        let eight = SEED_LINE.rsplit_once('|').expect("has fields").0;
        let ten = format!("{SEED_LINE}|extra");
        assert_eq!(d.tag(Some(eight.as_bytes())), FILTERED);
        assert_eq!(d.tag(Some(ten.as_bytes())), FILTERED);
    }

    #[test]
    fn empty_lines_are_filtered() {
        let d = seed_decoder();
        for line in ["", "\n", "\r\n"] {
            assert_eq!(d.tag(Some(line.as_bytes())), FILTERED, "{line:?}");
        }
        // Without a field count, an empty line is one empty field: its key is empty, and
        // empty matches empty (SPEC), so it is audited like any record the pipeline writes.
        let d = Decoder::new(DecoderSpec {
            delimiter: "|".into(),
            fields: seed_fields(),
            key: Some(strings(&["client_ip"])),
            ..DecoderSpec::default()
        })
        .expect("valid");
        assert_eq!(d.tag(Some(b"")), expected(&[""]));
        // A key field the line does not have at all still cannot be built.
        let d = Decoder::new(DecoderSpec {
            delimiter: "|".into(),
            fields: seed_fields(),
            key: Some(strings(&["domain"])),
            ..DecoderSpec::default()
        })
        .expect("valid");
        assert_eq!(d.tag(Some(b"1.2.3.4")), FILTERED);
    }

    #[test]
    fn keys_round_trip_through_their_packed_form() {
        for k in [
            Key::new(["a", "", "é\0"]),
            Key::new([""]),
            Key::new([] as [&str; 0]),
        ] {
            assert_eq!(Key::from_bytes(k.as_bytes()), Some(k.clone()));
        }
        assert_eq!(Key::from_bytes(b"a"), None, "no terminator");
        assert_eq!(Key::from_bytes(b"\xfe\xff"), None, "not UTF-8");
    }

    #[test]
    fn empty_key_fields_are_audited() {
        // FINDINGS: a record whose key fields are empty was counted filtered{reason="filter"}
        // and never audited, although the pipeline writes it. Empty matches empty.
        let line = SEED_LINE.replacen("www.example.com", "", 1);
        let Tag::Expected { key: Some(k) } = seed_decoder().tag(Some(line.as_bytes())) else {
            panic!("an empty key field must be expected");
        };
        assert_eq!(k.to_vec()[1], "");
        let empty = "||||||||";
        assert!(matches!(
            seed_decoder().tag(Some(empty.as_bytes())),
            Tag::Expected { key: Some(k) } if k.to_vec() == vec!["", "", ""]
        ));
    }

    #[test]
    fn non_utf8_is_undecodable_in_every_format() {
        let bad: &[u8] = b"192.168.1.10|\xff\xfe|2024";
        for format in [DecodeFormat::Csv, DecodeFormat::Json, DecodeFormat::Raw] {
            let d = Decoder::new(DecoderSpec {
                format,
                delimiter: "|".into(),
                ..DecoderSpec::default()
            })
            .expect("valid");
            assert_eq!(d.tag(Some(bad)), UNDECODABLE, "{format:?}");
            // Truncated multi-byte sequence.
            assert_eq!(d.tag(Some(&"é".as_bytes()[..1])), UNDECODABLE, "{format:?}");
        }
    }

    #[test]
    fn tombstone_in_every_format() {
        for format in [DecodeFormat::Csv, DecodeFormat::Json, DecodeFormat::Raw] {
            let d = Decoder::new(DecoderSpec {
                format,
                ..DecoderSpec::default()
            })
            .expect("valid");
            assert_eq!(d.tag(None), Tag::Filtered(FilterReason::Tombstone));
        }
    }

    #[test]
    fn offset_strategies_get_no_key() {
        let d = Decoder::new(DecoderSpec {
            delimiter: "|".into(),
            fields: seed_fields(),
            field_count: Some(9),
            ..DecoderSpec::default()
        })
        .expect("valid");
        assert_eq!(
            d.tag(Some(SEED_LINE.as_bytes())),
            Tag::Expected { key: None }
        );
        // The filter still applies without a key.
        assert_eq!(d.tag(Some(b"a|b")), FILTERED);
    }

    #[test]
    fn min_fields_and_require() {
        let d = Decoder::new(DecoderSpec {
            fields: strings(&["a", "b", "c"]),
            min_fields: Some(2),
            require: strings(&["b"]),
            ..DecoderSpec::default()
        })
        .expect("valid");
        assert_eq!(d.tag(Some(b"1")), FILTERED);
        assert_eq!(d.tag(Some(b"1,")), FILTERED, "b present but empty");
        assert_eq!(d.tag(Some(b"1,2")), Tag::Expected { key: None });
        assert_eq!(d.tag(Some(b"1,2,3,4")), Tag::Expected { key: None });
    }

    #[test]
    fn multibyte_delimiter() {
        let d = Decoder::new(DecoderSpec {
            delimiter: "¦".into(),
            fields: strings(&["a", "b"]),
            key: Some(strings(&["b", "a"])),
            ..DecoderSpec::default()
        })
        .expect("valid");
        assert_eq!(d.tag(Some("x|y¦zé".as_bytes())), expected(&["zé", "x|y"]));
    }

    #[test]
    fn plain_split_keeps_quotes() {
        let d = Decoder::new(DecoderSpec {
            fields: strings(&["a", "b", "c"]),
            key: Some(strings(&["a", "b", "c"])),
            ..DecoderSpec::default()
        })
        .expect("valid");
        assert_eq!(d.tag(Some(br#""x,y",z"#)), expected(&["\"x", "y\"", "z"]));
    }

    #[test]
    fn quoted_csv() {
        let d = Decoder::new(DecoderSpec {
            quote: true,
            fields: strings(&["a", "b", "c"]),
            field_count: Some(3),
            key: Some(strings(&["a", "b", "c"])),
            ..DecoderSpec::default()
        })
        .expect("valid");
        assert_eq!(
            d.tag(Some(br#""x,y","say ""hi""",z"#)),
            expected(&["x,y", "say \"hi\"", "z"])
        );
        assert_eq!(
            d.tag(Some(b"\"multi\nline\",b,c\r\n")),
            expected(&["multi\nline", "b", "c"])
        );
        // A stray quote inside an unquoted field is data.
        assert_eq!(d.tag(Some(br#"a"b,c,d"#)), expected(&["a\"b", "c", "d"]));
        // A quoted empty field is empty, a value like any other.
        assert_eq!(d.tag(Some(br#""",b,c"#)), expected(&["", "b", "c"]));
        // Malformed quoting cannot be decoded.
        assert_eq!(d.tag(Some(br#""unterminated,b,c"#)), UNDECODABLE);
        assert_eq!(d.tag(Some(br#""x"y,b,c"#)), UNDECODABLE);
        // Trailing delimiter after a quoted field gives an empty last field.
        assert_eq!(d.tag(Some(br#"a,"b","#)), expected(&["a", "b", ""]));
    }

    #[test]
    fn json_by_name_and_pointer() {
        let d = json_decoder(&["client_ip", "/q/name", "/q/type"]);
        let doc = br#"{"client_ip":"10.0.0.1","q":{"name":"example.com","type":"A"}}"#;
        assert_eq!(
            d.tag(Some(doc)),
            expected(&["10.0.0.1", "example.com", "A"])
        );
    }

    #[test]
    fn json_nested_arrays_and_escaped_pointers() {
        let d = json_decoder(&["/answers/1/ip", "/a~1b", "/m~0n"]);
        let doc = br#"{"answers":[{"ip":"1.1.1.1"},{"ip":"2.2.2.2"}],"a/b":"slash","m~n":"tilde"}"#;
        assert_eq!(d.tag(Some(doc)), expected(&["2.2.2.2", "slash", "tilde"]));
        // A top-level name is not split on '/' or '.'.
        let d = json_decoder(&["a.b"]);
        assert_eq!(
            d.tag(Some(br#"{"a.b":"x","a":{"b":"y"}}"#)),
            expected(&["x"])
        );
    }

    #[test]
    fn json_scalars_and_containers() {
        let d = json_decoder(&["i", "f", "b", "o", "a", "s"]);
        let doc = br#"{"i":42,"f":1.5,"b":false,"o":{"z":1,"y":[true,null]},"a":[1,"x"],"s":"\u00e9\"q"}"#;
        assert_eq!(
            d.tag(Some(doc)),
            expected(&[
                "42",
                "1.5",
                "false",
                r#"{"y":[true,null],"z":1}"#,
                r#"[1,"x"]"#,
                "é\"q"
            ])
        );
    }

    #[test]
    fn json_absent_and_null_are_filtered_empty_is_audited() {
        let d = json_decoder(&["k"]);
        assert_eq!(d.tag(Some(br#"{"other":1}"#)), FILTERED);
        // NULL in the sink never equals a literal: no key to look for.
        assert_eq!(d.tag(Some(br#"{"k":null}"#)), FILTERED);
        assert_eq!(d.tag(Some(br#"{"k":""}"#)), expected(&[""]));
        assert_eq!(d.tag(Some(br#"{"k":0}"#)), expected(&["0"]));
    }

    #[test]
    fn json_non_object_is_filtered_not_undecodable() {
        let d = json_decoder(&["k"]);
        for doc in [&b"[1,2]"[..], b"\"k\"", b"17", b"null", b"true"] {
            assert_eq!(d.tag(Some(doc)), FILTERED);
        }
        // A pointer can address into an array root.
        let d = json_decoder(&["/1"]);
        assert_eq!(d.tag(Some(b"[1,2]")), expected(&["2"]));
        // Without key or require, any valid JSON is expected.
        let d = Decoder::new(DecoderSpec {
            format: DecodeFormat::Json,
            ..DecoderSpec::default()
        })
        .expect("valid");
        assert_eq!(d.tag(Some(b"[1,2]\n")), Tag::Expected { key: None });
    }

    #[test]
    fn json_field_counts_are_top_level_members() {
        let d = Decoder::new(DecoderSpec {
            format: DecodeFormat::Json,
            min_fields: Some(2),
            ..DecoderSpec::default()
        })
        .expect("valid");
        assert_eq!(d.tag(Some(br#"{"a":{"b":1,"c":2}}"#)), FILTERED);
        assert_eq!(d.tag(Some(br#"[1,2,3]"#)), FILTERED);
        assert_eq!(
            d.tag(Some(br#"{"a":1,"b":null}"#)),
            Tag::Expected { key: None }
        );
        let d = Decoder::new(DecoderSpec {
            format: DecodeFormat::Json,
            field_count: Some(1),
            ..DecoderSpec::default()
        })
        .expect("valid");
        assert_eq!(d.tag(Some(br#"{"a":1}"#)), Tag::Expected { key: None });
        assert_eq!(d.tag(Some(br#"{"a":1,"b":2}"#)), FILTERED);
    }

    #[test]
    fn raw_has_one_field() {
        let spec = |field_count, min_fields| DecoderSpec {
            format: DecodeFormat::Raw,
            field_count,
            min_fields,
            ..DecoderSpec::default()
        };
        let tag = |spec| Decoder::new(spec).expect("valid").tag(Some(b"x"));
        assert_eq!(tag(spec(Some(1), Some(1))), Tag::Expected { key: None });
        assert_eq!(tag(spec(Some(2), None)), FILTERED);
        assert_eq!(tag(spec(None, Some(2))), FILTERED);
    }

    #[test]
    fn invalid_json_is_undecodable() {
        let d = json_decoder(&["k"]);
        let deep = "[".repeat(10_000);
        for doc in [
            &b""[..],
            b"{",
            b"{\"k\":1} trailing",
            b"{'k':1}",
            b"{\"k\":1,}",
            SEED_LINE.as_bytes(),
            deep.as_bytes(),
        ] {
            assert_eq!(
                d.tag(Some(doc)),
                UNDECODABLE,
                "{:?}",
                String::from_utf8_lossy(doc)
            );
        }
    }

    #[test]
    fn raw_value() {
        let d = Decoder::new(DecoderSpec {
            format: DecodeFormat::Raw,
            key: Some(strings(&["value"])),
            ..DecoderSpec::default()
        })
        .expect("valid");
        assert_eq!(d.tag(Some(SEED_LINE.as_bytes())), expected(&[SEED_LINE]));
        // raw keeps the bytes as they are, line end included.
        assert_eq!(d.tag(Some(b"x\n")), expected(&["x\n"]));
        // An empty value (not a tombstone) is an empty key: audited, empty matches empty.
        assert_eq!(d.tag(Some(b"")), expected(&[""]));

        let named = Decoder::new(DecoderSpec {
            format: DecodeFormat::Raw,
            fields: strings(&["line"]),
            require: strings(&["line"]),
            key: Some(strings(&["line"])),
            ..DecoderSpec::default()
        })
        .expect("valid");
        assert_eq!(named.tag(Some(b"abc")), expected(&["abc"]));
    }

    #[test]
    fn invalid_specs_are_refused() {
        let err = |spec: DecoderSpec| Decoder::new(spec).expect_err("invalid spec");
        assert_eq!(
            err(DecoderSpec {
                delimiter: "".into(),
                ..DecoderSpec::default()
            }),
            RecordError::Delimiter(String::new())
        );
        assert_eq!(
            err(DecoderSpec {
                delimiter: "||".into(),
                ..DecoderSpec::default()
            }),
            RecordError::Delimiter("||".into())
        );
        assert_eq!(
            err(DecoderSpec {
                delimiter: "\"".into(),
                quote: true,
                ..DecoderSpec::default()
            }),
            RecordError::QuoteDelimiter('"')
        );
        assert_eq!(
            err(DecoderSpec {
                fields: strings(&["a", "b", "a"]),
                ..DecoderSpec::default()
            }),
            RecordError::DuplicateField("a".into())
        );
        assert!(matches!(
            err(DecoderSpec {
                fields: strings(&["a"]),
                key: Some(strings(&["b"])),
                ..DecoderSpec::default()
            }),
            RecordError::UnknownField { role: "key", .. }
        ));
        assert!(matches!(
            err(DecoderSpec {
                fields: strings(&["a"]),
                require: strings(&["z"]),
                ..DecoderSpec::default()
            }),
            RecordError::UnknownField {
                role: "require",
                ..
            }
        ));
        assert_eq!(
            err(DecoderSpec {
                key: Some(Vec::new()),
                ..DecoderSpec::default()
            }),
            RecordError::EmptyKey
        );
        assert!(matches!(
            err(DecoderSpec {
                format: DecodeFormat::Raw,
                key: Some(strings(&["line"])),
                ..DecoderSpec::default()
            }),
            RecordError::UnknownField { role: "key", .. }
        ));
        let msg = err(DecoderSpec {
            fields: strings(&["a"]),
            key: Some(strings(&["b"])),
            ..DecoderSpec::default()
        })
        .to_string();
        assert_eq!(
            msg,
            r#"key field "b" is not one of the record fields ["a"]"#
        );
    }

    fn values_of<'a>(v: &'a [&'a str]) -> impl Iterator<Item = Option<Cow<'a, str>>> {
        v.iter().map(|s| Some(Cow::Borrowed(*s)))
    }

    #[test]
    fn key_keeps_values_apart() {
        let cases: [&[&str]; 6] = [
            &[],
            &[""],
            &["", ""],
            &["a", "b"],
            &["ab"],
            &["\0", "\u{7f}|é😀", ""],
        ];
        for values in cases {
            let key = Key::new(values);
            assert_eq!(key.to_vec(), values, "{values:?}");
            assert_eq!(key.len(), values.len());
            assert_eq!(key.values().len(), values.len());
            assert_eq!(key.is_empty(), values.is_empty());
            assert_eq!(key.first(), values.first().copied());
            assert_eq!(
                key.text_len(),
                values.iter().map(|v| v.len()).sum::<usize>()
            );
        }
        let collected = Key::try_collect(values_of(&["a", "", "é"]));
        assert_eq!(collected, Some(Key::new(["a", "", "é"])));
        let missing = [Some(Cow::Borrowed("a")), None, Some(Cow::Borrowed("c"))];
        assert_eq!(Key::try_collect(missing.into_iter()), None);
        // The scratch buffer is reset: a failed key leaves nothing for the next one.
        assert_eq!(Key::try_collect(values_of(&["z"])), Some(Key::new(["z"])));
        // Values never run into each other.
        assert_ne!(Key::new(["a", "b"]), Key::new(["ab"]));
        assert_ne!(Key::new(["a", ""]), Key::new(["a"]));
        assert_ne!(Key::new([""]), Key::new([] as [&str; 0]));
    }

    #[test]
    fn key_serde_round_trip() {
        let key = Key::new(["a", "b"]);
        let json = serde_json::to_string(&key).expect("serializes");
        assert_eq!(json, r#"["a","b"]"#);
        let back: Key = serde_json::from_str(&json).expect("deserializes");
        assert_eq!(back, key);
    }

    fn id_decoder(template: &str, format: DecodeFormat, fields: &[&str]) -> Decoder {
        Decoder::new(DecoderSpec {
            format,
            delimiter: "|".into(),
            fields: strings(fields),
            id_template: Some(template.into()),
            ..DecoderSpec::default()
        })
        .expect("valid")
    }

    fn meta<'a>(key: Option<&'a [u8]>) -> RecordMeta<'a> {
        RecordMeta {
            topic: "dns",
            partition: 3,
            offset: 1234,
            key,
        }
    }

    #[test]
    fn doc_id_from_kafka_coordinates() {
        // Kafka Connect's convention with key.ignore=true.
        let d = id_decoder("{topic}+{partition}+{offset}", DecodeFormat::Raw, &[]);
        assert_eq!(
            d.tag_record(Some(b"anything"), &meta(None)),
            expected(&["dns+3+1234"])
        );
        // The value's filters still apply first.
        assert_eq!(
            d.tag_record(None, &meta(None)),
            Tag::Filtered(FilterReason::Tombstone)
        );
        assert_eq!(d.tag_record(Some(b"\xff"), &meta(None)), UNDECODABLE);
    }

    #[test]
    fn doc_id_from_kafka_key_and_fields() {
        let d = id_decoder(
            "{key}:{client_ip}/{time}",
            DecodeFormat::Csv,
            &["client_ip", "domain", "time"],
        );
        assert_eq!(
            d.tag_record(Some(b"1.2.3.4|x.org|10:00"), &meta(Some(b"k1"))),
            expected(&["k1:1.2.3.4/10:00"])
        );
        // No Kafka key, or an empty one, where the template needs it: not expected.
        assert_eq!(
            d.tag_record(Some(b"1.2.3.4|x.org|10:00"), &meta(None)),
            FILTERED
        );
        assert_eq!(
            d.tag_record(Some(b"1.2.3.4|x.org|10:00"), &meta(Some(b""))),
            FILTERED
        );
        // A Kafka key that is not UTF-8 cannot become an id.
        assert_eq!(
            d.tag_record(Some(b"1.2.3.4|x.org|10:00"), &meta(Some(b"\xff"))),
            UNDECODABLE
        );
        // An empty field in the template: not expected.
        assert_eq!(
            d.tag_record(Some(b"|x.org|10:00"), &meta(Some(b"k"))),
            FILTERED
        );
    }

    #[test]
    fn doc_id_json_pointer_and_builtins_win() {
        let d = id_decoder("{/a/b}-{offset}", DecodeFormat::Json, &[]);
        assert_eq!(
            d.tag_record(Some(br#"{"a":{"b":7},"offset":"field"}"#), &meta(None)),
            expected(&["7-1234"])
        );
    }

    #[test]
    fn doc_id_templates_are_checked() {
        let err = |t: &str| {
            Decoder::new(DecoderSpec {
                fields: strings(&["a"]),
                id_template: Some(t.into()),
                ..DecoderSpec::default()
            })
            .expect_err("invalid template")
        };
        assert!(matches!(err("x{"), RecordError::IdTemplate(_)));
        assert!(matches!(err("x}"), RecordError::IdTemplate(_)));
        assert!(matches!(err("{}"), RecordError::IdTemplate(_)));
        assert!(matches!(err("plain"), RecordError::IdTemplate(_)));
        assert!(matches!(
            err("{zz}"),
            RecordError::UnknownField {
                role: "id_template",
                ..
            }
        ));
    }

    /// Every decoder shape `tag` must survive: each format, quoting on and off, one- and
    /// multi-byte delimiters, names and pointers, filters.
    fn all_decoders() -> Vec<Decoder> {
        let mut specs = Vec::new();
        for quote in [false, true] {
            for delimiter in ["|", ",", "¦", "\n"] {
                specs.push(DecoderSpec {
                    delimiter: delimiter.into(),
                    quote,
                    fields: strings(&["a", "b", "c"]),
                    min_fields: Some(2),
                    require: strings(&["b"]),
                    key: Some(strings(&["c", "a"])),
                    ..DecoderSpec::default()
                });
            }
        }
        specs.push(DecoderSpec {
            format: DecodeFormat::Json,
            require: strings(&["/x/0"]),
            key: Some(strings(&["a", "/b/c", "/", "/~", "/~2"])),
            ..DecoderSpec::default()
        });
        specs.push(DecoderSpec {
            format: DecodeFormat::Raw,
            key: Some(strings(&["value"])),
            ..DecoderSpec::default()
        });
        specs
            .into_iter()
            .map(|s| Decoder::new(s).expect("valid"))
            .collect()
    }

    /// Byte strings biased towards the characters the decoders treat specially.
    fn tricky_bytes() -> impl Strategy<Value = Vec<u8>> {
        let special = prop::sample::select(vec![
            b'"', b',', b'|', b'\n', b'\r', b'{', b'}', b'[', b']', b':', b'\\', b'/', b'~', 0xc2,
            0xa6, 0xff, 0x00,
        ]);
        prop::collection::vec(prop_oneof![any::<u8>(), special], 0..64)
    }

    proptest! {
        #[test]
        fn tag_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256),
                            tricky in tricky_bytes()) {
            for d in all_decoders() {
                let _ = d.tag(Some(&bytes));
                let _ = d.tag(Some(&tricky));
            }
        }

        #[test]
        fn tag_never_panics_on_json_shaped_text(text in r#"[\{\}\[\]":,/a-c0-9 ~\\.-]{0,64}"#) {
            for d in all_decoders() {
                let _ = d.tag(Some(text.as_bytes()));
            }
        }

        #[test]
        fn plain_csv_round_trips(
            fields in prop::collection::vec("[^|\r\n]{1,12}", 1..12),
        ) {
            let names: Vec<String> = (0..fields.len()).map(|i| format!("f{i}")).collect();
            let d = Decoder::new(DecoderSpec {
                delimiter: "|".into(),
                fields: names.clone(),
                field_count: Some(fields.len()),
                key: Some(names),
                ..DecoderSpec::default()
            }).expect("valid");
            let line = fields.join("|");
            prop_assert_eq!(d.tag(Some(line.as_bytes())), Tag::Expected { key: Some(Key::new(&fields)) });
        }

        #[test]
        fn plain_csv_round_trips_multibyte_delimiter(
            fields in prop::collection::vec("[^→\r\n]{1,12}", 1..12),
        ) {
            let names: Vec<String> = (0..fields.len()).map(|i| format!("f{i}")).collect();
            let d = Decoder::new(DecoderSpec {
                delimiter: "→".into(),
                fields: names.clone(),
                key: Some(names),
                ..DecoderSpec::default()
            }).expect("valid");
            let line = format!("{}\n", fields.join("→"));
            prop_assert_eq!(d.tag(Some(line.as_bytes())), Tag::Expected { key: Some(Key::new(&fields)) });
        }

        #[test]
        fn quoted_csv_round_trips(fields in prop::collection::vec(".{1,12}", 1..8)) {
            let names: Vec<String> = (0..fields.len()).map(|i| format!("f{i}")).collect();
            let d = Decoder::new(DecoderSpec {
                quote: true,
                fields: names.clone(),
                field_count: Some(fields.len()),
                key: Some(names),
                ..DecoderSpec::default()
            }).expect("valid");
            let line: Vec<String> = fields
                .iter()
                .map(|f| format!("\"{}\"", f.replace('"', "\"\"")))
                .collect();
            let line = line.join(",");
            prop_assert_eq!(d.tag(Some(line.as_bytes())), Tag::Expected { key: Some(Key::new(&fields)) });
        }
    }

    // ---- hostile input (issue 8, item 6) ------------------------------------------

    /// Runs `f` on a thread with a deliberately small stack: a decoder that recursed per
    /// byte or per nesting level of its input would overflow it (an abort, not a panic).
    fn on_small_stack(f: impl FnOnce() + Send + 'static) {
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(f)
            .expect("spawn")
            .join()
            .expect("no panic");
    }

    /// serde_json refuses documents nested 128 levels deep or more (its default recursion
    /// limit, kept on: `disable_recursion_limit` is never called), so a nesting bomb is a
    /// parse error, i.e. `undecodable`, found without deep recursion. Pins the boundary so a
    /// serde_json upgrade that changed it would show here.
    #[test]
    fn json_nesting_bombs_are_undecodable() {
        on_small_stack(|| {
            let d = json_decoder(&["/a"]);
            let any = Decoder::new(DecoderSpec {
                format: DecodeFormat::Json,
                ..DecoderSpec::default()
            })
            .expect("valid");
            let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            // The deepest document accepted, and one level more.
            assert_eq!(
                any.tag(Some(nested(127).as_bytes())),
                Tag::Expected { key: None }
            );
            assert_eq!(any.tag(Some(nested(128).as_bytes())), UNDECODABLE);
            // Objects count the same; a key can point 127 levels down.
            let deep_obj = format!("{}1{}", r#"{"a":"#.repeat(127), "}".repeat(127));
            let pointer = "/a".repeat(127);
            let d_deep = json_decoder(&[pointer.as_str()]);
            assert_eq!(d_deep.tag(Some(deep_obj.as_bytes())), expected(&["1"]));
            let too_deep = format!("{}1{}", r#"{"a":"#.repeat(128), "}".repeat(128));
            assert_eq!(d_deep.tag(Some(too_deep.as_bytes())), UNDECODABLE);
            for bomb in [
                "[".repeat(100_000),
                nested(100_000),
                r#"{"a":"#.repeat(100_000),
                format!("{}1{}", r#"{"a":"#.repeat(100_000), "}".repeat(100_000)),
                format!(r#"{{"a":{}}}"#, "[{".repeat(200_000)),
                "[".repeat(1 << 20),
            ] {
                assert_eq!(d.tag(Some(bomb.as_bytes())), UNDECODABLE, "{}", &bomb[..20]);
                assert_eq!(any.tag(Some(bomb.as_bytes())), UNDECODABLE);
            }
            // A wide (not deep) document of 1 MiB is fine.
            let wide = format!("{{\"a\":[{}0]}}", "0,".repeat(512 * 1024));
            assert!(matches!(d.tag(Some(wide.as_bytes())), Tag::Expected { .. }));
        });
    }

    /// 1 MiB values in every format: kept whole in the key, or filtered with a reason; never
    /// truncated, never a panic.
    #[test]
    fn one_mebibyte_values() {
        on_small_stack(|| {
            const MIB: usize = 1 << 20;
            let big = "a'\\\"|,\u{1a}é\0".repeat(MIB / 10 + 1);
            assert!(big.len() >= MIB);
            let big_no_pipe = big.replace('|', "");

            // csv: a 1 MiB domain field (no delimiter in it) is part of the key, whole.
            let line = format!(
                "192.168.1.10|{big_no_pipe}|2024-01-01 10:00:00|{}",
                "x|".repeat(5) + "y"
            );
            assert_eq!(
                seed_decoder().tag(Some(line.as_bytes())),
                expected(&["192.168.1.10", &big_no_pipe, "2024-01-01 10:00:00"])
            );
            // ... 1 MiB of delimiters: a million fields, not nine.
            assert_eq!(
                seed_decoder().tag(Some("|".repeat(MIB).as_bytes())),
                FILTERED
            );
            // ... quoted, with delimiters, doubled quotes and line breaks inside.
            let quoted_field = "x,\"\r\n".repeat(MIB / 5);
            let q = Decoder::new(DecoderSpec {
                quote: true,
                fields: strings(&["a", "b"]),
                field_count: Some(2),
                key: Some(strings(&["a", "b"])),
                ..DecoderSpec::default()
            })
            .expect("valid");
            let line = format!("\"{}\",b", quoted_field.replace('"', "\"\""));
            assert_eq!(
                q.tag(Some(line.as_bytes())),
                expected(&[&quoted_field, "b"])
            );
            // ... 1 MiB of quote characters: unbalanced → undecodable; balanced → one field.
            assert_eq!(q.tag(Some("\"".repeat(MIB + 1).as_bytes())), UNDECODABLE);
            let quotes = "\"".repeat(MIB);
            assert!(matches!(q.tag(Some(quotes.as_bytes())), Tag::Filtered(_)));

            // json: a 1 MiB string member, escapes and all.
            let doc = serde_json::json!({ "k": big }).to_string();
            assert_eq!(
                json_decoder(&["k"]).tag(Some(doc.as_bytes())),
                expected(&[&big])
            );
            // raw: the whole 1 MiB value.
            let raw = Decoder::new(DecoderSpec {
                format: DecodeFormat::Raw,
                key: Some(strings(&["value"])),
                ..DecoderSpec::default()
            })
            .expect("valid");
            assert_eq!(raw.tag(Some(big.as_bytes())), expected(&[&big]));

            // 1 MiB that is valid UTF-8 except for its last byte, or a truncated sequence at
            // the end: undecodable in every format.
            let mut bad = big.clone().into_bytes();
            bad.push(0xff);
            let mut cut = big.clone().into_bytes();
            cut.extend_from_slice(&"🦀".as_bytes()[..3]);
            for d in all_decoders() {
                assert_eq!(d.tag(Some(&bad)), UNDECODABLE);
                assert_eq!(d.tag(Some(&cut)), UNDECODABLE);
            }
        });
    }

    /// CSV with delimiters, quotes and line breaks inside fields, quoted (RFC 4180) and not.
    #[test]
    fn csv_embedded_delimiters_quotes_and_newlines() {
        let q = Decoder::new(DecoderSpec {
            quote: true,
            fields: strings(&["a", "b", "c"]),
            field_count: Some(3),
            key: Some(strings(&["a", "b", "c"])),
            ..DecoderSpec::default()
        })
        .expect("valid");
        assert_eq!(
            q.tag(Some(b"\"x,y\",\"say \"\"hi\"\"\",\"l1\nl2\r\nl3\"")),
            expected(&["x,y", "say \"hi\"", "l1\nl2\r\nl3"])
        );
        // A line break outside quotes is just another character of the field (records are
        // whole Kafka values, not lines of a file); only one trailing line end is dropped.
        assert_eq!(
            q.tag(Some(b"a\nb,c\rd,e\r\n")),
            expected(&["a\nb", "c\rd", "e"])
        );
        // Four fields where three are expected: an unquoted delimiter splits.
        assert_eq!(q.tag(Some(b"x,y,\"z\",w")), FILTERED);
        // Malformed quoting: text after a closing quote, an unterminated field.
        assert_eq!(q.tag(Some(b"\"x\"y,b,c")), UNDECODABLE);
        assert_eq!(q.tag(Some(b"a,b,\"c\nd")), UNDECODABLE);
        // Without quoting, quotes are data and every delimiter splits.
        let plain = Decoder::new(DecoderSpec {
            fields: strings(&["a", "b", "c"]),
            field_count: Some(3),
            key: Some(strings(&["a", "b", "c"])),
            ..DecoderSpec::default()
        })
        .expect("valid");
        assert_eq!(
            plain.tag(Some(b"\"x,y\",z")),
            expected(&["\"x", "y\"", "z"])
        );
    }

    /// RFC 4180 encoding of one field: always quoted, quotes doubled.
    fn rfc4180(field: &str) -> String {
        format!("\"{}\"", field.replace('"', "\"\""))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        /// Any bytes, any decoder shape (doc_id included, with any Kafka key): `tag` returns
        /// (no panic), is deterministic, and non-UTF-8 is `undecodable` whatever the format.
        #[test]
        fn hostile_bytes_are_classified(
            bytes in prop::collection::vec(any::<u8>(), 0..512),
            tricky in tricky_bytes(),
            key in prop::option::of(prop::collection::vec(any::<u8>(), 0..16)),
        ) {
            let m = RecordMeta { topic: "t", partition: 0, offset: 7, key: key.as_deref() };
            let mut decoders = all_decoders();
            decoders.push(id_decoder("{key}-{offset}", DecodeFormat::Raw, &[]));
            decoders.push(id_decoder("{/a}:{key}", DecodeFormat::Json, &[]));
            decoders.push(id_decoder("{b}{topic}", DecodeFormat::Csv, &["a", "b"]));
            for value in [&bytes, &tricky] {
                for d in &decoders {
                    let tag = d.tag_record(Some(value), &m);
                    prop_assert_eq!(&tag, &d.tag_record(Some(value), &m));
                    if std::str::from_utf8(value).is_err() {
                        prop_assert_eq!(tag, UNDECODABLE);
                    } else if let Tag::Expected { key: Some(key) } = tag {
                        // Every expected record has a key to look for (its parts may be
                        // empty: empty matches empty); a document id is never empty.
                        prop_assert!(!key.is_empty());
                    }
                }
            }
        }

        /// The key builder over quoted CSV: fields full of delimiters, quotes and line breaks
        /// come back exactly.
        #[test]
        fn quoted_csv_key_round_trips(
            fields in prop::collection::vec("[a-c,|\"\r\n é\u{1a}\0\\\\']{1,10}", 1..8),
            delimiter in prop::sample::select(vec![",", "|", "¦", "\t"]),
        ) {
            let names: Vec<String> = (0..fields.len()).map(|i| format!("f{i}")).collect();
            let d = Decoder::new(DecoderSpec {
                delimiter: delimiter.into(),
                quote: true,
                fields: names.clone(),
                field_count: Some(fields.len()),
                key: Some(names),
                ..DecoderSpec::default()
            }).expect("valid");
            let line: Vec<String> = fields.iter().map(|f| rfc4180(f)).collect();
            let line = line.join(delimiter);
            prop_assert_eq!(d.tag(Some(line.as_bytes())), Tag::Expected { key: Some(Key::new(&fields)) });
        }

        /// The key builder over JSON: any member names and string values serialized by
        /// serde_json come back exactly (an empty value is a value).
        #[test]
        fn json_key_round_trips(
            members in prop::collection::btree_map("[^/].{0,8}", ".{0,16}", 1..6),
        ) {
            let names: Vec<String> = members.keys().cloned().collect();
            let values: Vec<String> = members.values().cloned().collect();
            let doc = serde_json::to_string(&members).expect("serializes");
            let d = Decoder::new(DecoderSpec {
                format: DecodeFormat::Json,
                key: Some(names),
                ..DecoderSpec::default()
            }).expect("valid");
            let want = Tag::Expected { key: Some(Key::new(&values)) };
            prop_assert_eq!(d.tag(Some(doc.as_bytes())), want);
        }

        /// The `doc_id` builder with any Kafka key bytes: the id is the key's text, or the
        /// record is filtered (no or empty key) or undecodable (key not UTF-8).
        #[test]
        fn doc_id_with_any_kafka_key(key in prop::option::of(prop::collection::vec(any::<u8>(), 0..24))) {
            let d = id_decoder("{key}/{partition}", DecodeFormat::Raw, &[]);
            let m = RecordMeta { topic: "t", partition: 5, offset: 1, key: key.as_deref() };
            let want = match key.as_deref() {
                None | Some([]) => FILTERED,
                Some(k) => match std::str::from_utf8(k) {
                    Ok(k) => expected(&[&format!("{k}/5")]),
                    Err(_) => UNDECODABLE,
                },
            };
            prop_assert_eq!(d.tag_record(Some(b"v"), &m), want);
        }
    }
}
