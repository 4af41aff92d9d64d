//! Record decoding: turns one Kafka record value into a [`Tag`], either *expected* in the
//! sink (with the match key when the audit matches by key columns) or *filtered* with the
//! reason that labels `gap_auditor_records_filtered_total`.
//!
//! Pure and allocation-light: no I/O, no clock, no panics on any input (record contents
//! are attacker controlled). All configuration work (delimiter check, field-name to index
//! resolution, JSON pointer detection) happens once in [`Decoder::new`], so
//! [`Decoder::tag_record`] is a straight pass over the bytes.
//!
//! Order of the checks in [`Decoder::tag_record`], each one ending the classification:
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

use serde_json::Value;

pub use logical::TimestampFormat;

mod doc_id;
mod spec;
mod text;

use crate::key_domain::KeyDomain;
use crate::template::{Piece as TemplatePiece, parse as parse_template};
use crate::types::Key;
use doc_id::build_id;
pub use spec::{DecodeFormat, DecoderSpec, SchemaRegistry, decoder_for, schema_registry};
use text::{Decoded, ascii_byte, split_ascii, split_quoted, strip_line_end};

/// Why a consumed record is not expected in the sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FilterReason {
    /// Decoded, but rejected by the audit's filter or missing a key field.
    Filter,
    /// Not UTF-8, not JSON, or malformed CSV quoting.
    Undecodable,
    /// A null value (a compaction delete marker).
    Tombstone,
    /// A key value its sink column cannot store as written (`DATETIME` `yesterday`, a
    /// number beyond a `DECIMAL`'s range): what the sink made of it (a zero date, NULL, a
    /// refused row) cannot be told from the record, so it is unverifiable, never missing
    /// ([`crate::key_domain`]).
    UnconvertibleKey,
}

impl FilterReason {
    /// Every reason, so that metric series can be created up front with a zero value.
    pub const ALL: [FilterReason; 4] = [
        FilterReason::Filter,
        FilterReason::Undecodable,
        FilterReason::Tombstone,
        FilterReason::UnconvertibleKey,
    ];

    /// The `reason` label value of `gap_auditor_records_filtered_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            FilterReason::Filter => "filter",
            FilterReason::Undecodable => "undecodable",
            FilterReason::Tombstone => "tombstone",
            FilterReason::UnconvertibleKey => "unconvertible_key",
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

/// Classifies record values for one audit. Build once with [`Decoder::new`]; `tag_record` is
/// pure and can be called from any thread.
#[derive(Debug, Clone)]
pub struct Decoder {
    kind: Kind,
    widths: Widths,
    require: Vec<Locator>,
    key: Option<Vec<Locator>>,
    id: Option<Vec<IdPart>>,
    /// csv: fields a record usually has, so splitting allocates once instead of growing.
    width: usize,
    /// Some filter, key or id reads a field's text; when none does (offset_columns with only
    /// `field_count`/`min_fields`), a csv record's fields are counted, never split.
    reads_fields: bool,
    /// Values start with the Confluent header.
    framed: bool,
    timestamp_format: TimestampFormat,
    /// avro/protobuf: where schemas come from (none: every record is undecodable).
    registry: Option<Arc<SchemaRegistry>>,
    /// key_columns: the key columns' types as the sink described them (none: not read).
    key_domain: Option<Arc<KeyDomain>>,
    /// Whether `key_domain` converts any value: each key value is then written the way its
    /// column stores it.
    convert_keys: bool,
}

/// The field-count filters: how many fields a kept record has (`field_count`), or at
/// least (`min_fields`).
#[derive(Debug, Clone, Copy)]
struct Widths {
    exactly: Option<usize>,
    at_least: Option<usize>,
}

impl Widths {
    fn admit(self, count: usize) -> bool {
        self.exactly.is_none_or(|n| count == n) && self.at_least.is_none_or(|n| count >= n)
    }
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
            reads_fields: !require.is_empty() || key.is_some() || id.is_some(),
            widths: Widths {
                exactly: spec.field_count,
                at_least: spec.min_fields,
            },
            require,
            key,
            id,
            framed: spec.confluent_framing || spec.format.needs_registry(),
            timestamp_format: spec.timestamp_format,
            registry: None,
            key_domain: None,
            convert_keys: false,
        })
    }

    /// This decoder, writing each key the way the sink's key columns store it (`domain`
    /// from the sink, [`crate::sink::Verifier::key_domain`]). A domain that converts
    /// nothing (text columns only) costs a key nothing.
    pub fn with_key_domain(mut self, domain: Option<KeyDomain>) -> Self {
        self.convert_keys = domain.as_ref().is_some_and(|d| !d.is_identity());
        self.key_domain = domain.map(Arc::new);
        self
    }

    /// The key columns' domain this decoder writes keys in, when the sink described it.
    pub fn key_domain(&self) -> Option<&KeyDomain> {
        self.key_domain.as_deref()
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
        let Ok(text) = simdutf8::basic::from_utf8(bytes) else {
            return Tag::Filtered(FilterReason::Undecodable);
        };
        let decoded = match self.kind {
            Kind::Csv { delimiter, quote } => {
                let line = strip_line_end(text);
                if quote {
                    match split_quoted(line, delimiter) {
                        Some(fields) => Decoded::Csv(fields),
                        None => return Tag::Filtered(FilterReason::Undecodable),
                    }
                } else if let Some(d) = ascii_byte(delimiter) {
                    // The tailing thread's main cost was this split (issue 15): an ASCII
                    // delimiter is found by one vectorised scan, and counted only when no
                    // field's text is read.
                    if self.reads_fields {
                        Decoded::Csv(split_ascii(line, d, self.width))
                    } else {
                        Decoded::Count(memchr::memchr_iter(d, line.as_bytes()).count() + 1)
                    }
                } else {
                    let mut fields = Vec::with_capacity(self.width);
                    fields.extend(line.split(delimiter).map(Cow::Borrowed));
                    Decoded::Csv(fields)
                }
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
        if !self.widths.admit(count) {
            return Tag::Filtered(FilterReason::Filter);
        }
        let present = |loc: &Locator| decoded.get(loc).filter(|v| !v.is_empty());
        if !self.require.iter().all(|loc| present(loc).is_some()) {
            return Tag::Filtered(FilterReason::Filter);
        }
        let key = match &self.key {
            None => None,
            Some(locators) => match Key::try_collect(locators.iter().map(|l| decoded.get(l))) {
                Some(key) => match self
                    .key_domain
                    .as_deref()
                    .filter(|_| self.convert_keys)
                    .map(|d| d.key(&key))
                {
                    None | Some(Ok(None)) => Some(key),
                    Some(Ok(Some(stored))) => Some(stored),
                    Some(Err(_)) => return Tag::Filtered(FilterReason::UnconvertibleKey),
                },
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

#[cfg(test)]
mod tests;
