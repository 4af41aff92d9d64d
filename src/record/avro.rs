//! Avro record values (Confluent framing, schema from the registry) decoded into a JSON
//! tree, so that fields are addressed exactly like `json` records (`name`, `/a/b`).
//!
//! Mapping: records → objects; unions → the branch's value (`null` counts as absent, as in
//! json); enums → their symbol; arrays and maps → arrays and objects; bytes and fixed →
//! base64 (Flink's JSON text for BYTES); logical types → the text of [`super::logical`].

use std::collections::HashMap;

use apache_avro::Schema;
use apache_avro::schema::{Name, ResolvedSchema};
use apache_avro::types::Value as Avro;
use base64::Engine;
use serde_json::{Map, Number, Value};

use super::logical::{self, TimestampFormat};
use super::registry::{RawSchema, SchemaError, SchemaType};

/// Most bytes apache-avro allocates for one value: a hostile length prefix (a string "of"
/// 500 MB in a 100-byte record) fails when the bytes run out, but only after the allocation;
/// the crate's default lets that be 512 MiB, on the tailing thread. Kafka records this size
/// are far past any broker's default limit.
const MAX_ALLOCATION: usize = 64 * 1024 * 1024;

/// Steps the recursion check may take before it calls a schema recursive (a schema with
/// many shared named types is walked once per path to them).
const RECURSION_CHECK_STEPS: usize = 100_000;

/// Whether a named type in `s` contains itself (through fields, unions, arrays, maps or
/// references); also true when the walk needs more than `budget` steps.
fn recursive(
    s: &Schema,
    names: &HashMap<Name, Schema>,
    path: &mut Vec<Name>,
    budget: &mut usize,
) -> bool {
    if *budget == 0 {
        return true;
    }
    *budget -= 1;
    match s {
        Schema::Record(r) => {
            if path.contains(&r.name) {
                return true;
            }
            path.push(r.name.clone());
            let found = r
                .fields
                .iter()
                .any(|f| recursive(&f.schema, names, path, budget));
            path.pop();
            found
        }
        Schema::Ref { name } => {
            path.contains(name)
                || names
                    .get(name)
                    .is_some_and(|t| recursive(t, names, path, budget))
        }
        Schema::Array(a) => recursive(&a.items, names, path, budget),
        Schema::Map(m) => recursive(&m.types, names, path, budget),
        Schema::Union(u) => u
            .variants()
            .iter()
            .any(|v| recursive(v, names, path, budget)),
        _ => false,
    }
}

/// The schema text with `logicalType: uuid` taken off string types. apache-avro parses such
/// a string into a UUID and prints it back canonical (lowercase), and fails the record when
/// the text is not a UUID; Flink and Kafka Connect read the field as a string and write the
/// producer's text, which the key comparison (byte-exact) must see unchanged.
fn keep_uuid_text(text: &str) -> String {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(o) => {
                if o.get("type").and_then(Value::as_str) == Some("string")
                    && o.get("logicalType").and_then(Value::as_str) == Some("uuid")
                {
                    o.remove("logicalType");
                }
                o.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    match serde_json::from_str::<Value>(text) {
        Ok(mut v) => {
            strip(&mut v);
            v.to_string()
        }
        // Not JSON: the parser below says why.
        Err(_) => text.to_string(),
    }
}

/// Most array items and map entries one record may hold over all its collections together:
/// apache-avro caps each collection at [`MAX_ALLOCATION`] bytes of values, but not their sum.
/// An item of `null` (or of an empty record) takes no byte, and an empty array one: a few
/// bytes could declare a million of them per collection, in as many collections as the
/// record has bytes, each allocated in full.
const MAX_ITEMS: usize = MAX_ALLOCATION / std::mem::size_of::<Avro>();

/// A walk over one encoded datum, before apache-avro decodes it: it counts the collection
/// items against [`MAX_ITEMS`], and it finds a datum cut short. apache-avro reads a boolean,
/// a string or a union index at the end of the input as `null` (for its own default
/// handling), so a truncated record would decode with its last fields absent — a record
/// filtered, or expected with another key, instead of undecodable.
struct Walk<'a> {
    buf: &'a [u8],
    names: &'a HashMap<Name, Schema>,
    items: usize,
}

impl<'a> Walk<'a> {
    /// Whether `payload` is exactly one datum of `schema` within the item budget.
    fn check(
        schema: &Schema,
        names: &'a HashMap<Name, Schema>,
        payload: &'a [u8],
    ) -> Result<(), String> {
        let mut w = Walk {
            buf: payload,
            names,
            items: 0,
        };
        w.skip(schema)?;
        if !w.buf.is_empty() {
            return Err(format!("{} bytes after the record", w.buf.len()));
        }
        Ok(())
    }

    fn take(&mut self, n: usize) -> Result<(), String> {
        if n > self.buf.len() {
            return Err("truncated: the record ends before its schema does".into());
        }
        self.buf = &self.buf[n..];
        Ok(())
    }

    /// A zigzag varint (int or long).
    fn long(&mut self) -> Result<i64, String> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let Some((&b, rest)) = self.buf.split_first() else {
                return Err("truncated: the record ends before its schema does".into());
            };
            self.buf = rest;
            v |= u64::from(b & 0x7F) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(((v >> 1) as i64) ^ -((v & 1) as i64));
            }
        }
        Err("a varint longer than 10 bytes".into())
    }

    fn len(&mut self) -> Result<usize, String> {
        let n = self.long()?;
        usize::try_from(n).map_err(|_| format!("negative length {n}"))
    }

    /// Array or map blocks: a count (negative: followed by the block's byte size), that many
    /// items, until a count of 0.
    fn blocks(
        &mut self,
        mut item: impl FnMut(&mut Self) -> Result<(), String>,
    ) -> Result<(), String> {
        loop {
            let count = match self.long()? {
                0 => return Ok(()),
                c if c < 0 => {
                    self.long()?;
                    c.unsigned_abs()
                }
                c => c.unsigned_abs(),
            };
            let count = usize::try_from(count).unwrap_or(usize::MAX);
            self.items = self.items.saturating_add(count);
            if self.items > MAX_ITEMS {
                return Err(format!(
                    "more than {MAX_ITEMS} array items and map entries in one record"
                ));
            }
            for _ in 0..count {
                item(self)?;
            }
        }
    }

    fn skip(&mut self, s: &Schema) -> Result<(), String> {
        use apache_avro::schema::{DecimalSchema, InnerDecimalSchema, UuidSchema};
        match s {
            Schema::Null => Ok(()),
            Schema::Boolean => self.take(1),
            Schema::Int
            | Schema::Long
            | Schema::Enum(_)
            | Schema::Date
            | Schema::TimeMillis
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => self.long().map(drop),
            Schema::Float => self.take(4),
            Schema::Double => self.take(8),
            Schema::Bytes
            | Schema::String
            | Schema::BigDecimal
            | Schema::Uuid(UuidSchema::String | UuidSchema::Bytes)
            | Schema::Decimal(DecimalSchema {
                inner: InnerDecimalSchema::Bytes,
                ..
            }) => {
                let n = self.len()?;
                if n > self.buf.len() {
                    // Said before apache-avro would allocate `n` bytes for it.
                    return Err(format!(
                        "a length of {n} bytes with {} left: truncated (nothing allocated)",
                        self.buf.len()
                    ));
                }
                self.take(n)
            }
            Schema::Fixed(f)
            | Schema::Duration(f)
            | Schema::Uuid(UuidSchema::Fixed(f))
            | Schema::Decimal(DecimalSchema {
                inner: InnerDecimalSchema::Fixed(f),
                ..
            }) => self.take(f.size),
            Schema::Union(u) => {
                let i = self.long()?;
                let branch = usize::try_from(i)
                    .ok()
                    .and_then(|i| u.variants().get(i))
                    .ok_or_else(|| format!("union branch {i} does not exist"))?;
                self.skip(branch)
            }
            Schema::Record(r) => r.fields.iter().try_for_each(|f| self.skip(&f.schema)),
            Schema::Array(a) => self.blocks(|w| w.skip(&a.items)),
            Schema::Map(m) => self.blocks(|w| {
                w.skip(&Schema::String)?;
                w.skip(&m.types)
            }),
            Schema::Ref { name } => {
                let names = self.names;
                let t = names
                    .get(name)
                    .ok_or_else(|| format!("unresolved name {name}"))?;
                self.skip(t)
            }
        }
    }
}

/// A writer schema from the registry, with every named type it or its references define.
#[derive(Debug)]
pub struct AvroSchema {
    schema: Schema,
    references: Vec<Schema>,
    names: HashMap<Name, Schema>,
}

impl AvroSchema {
    /// Parses a registry schema (with its references) of type AVRO.
    pub fn compile(id: u32, raw: &RawSchema) -> Result<Self, SchemaError> {
        // Process-wide and set once: before the first Avro value is decoded.
        apache_avro::util::max_allocation_bytes(MAX_ALLOCATION);
        let bad = |reason: String| SchemaError { id, reason };
        if raw.schema_type != SchemaType::Avro {
            return Err(bad(format!(
                "is a {:?} schema, and record.format is avro",
                raw.schema_type
            )));
        }
        let text = keep_uuid_text(&raw.text);
        let (schema, references) = if raw.references.is_empty() {
            (
                Schema::parse_str(&text)
                    .map_err(|e| bad(format!("not a valid Avro schema: {e}")))?,
                Vec::new(),
            )
        } else {
            let refs: Vec<String> = raw
                .references
                .iter()
                .map(|(_, t)| keep_uuid_text(t))
                .collect();
            Schema::parse_str_with_list(&text, refs.iter().map(String::as_str))
                .map_err(|e| bad(format!("not a valid Avro schema: {e}")))?
        };
        let mut all: Vec<&Schema> = references.iter().collect();
        all.push(&schema);
        let names = ResolvedSchema::new_with_schemata(all)
            .map_err(|e| bad(format!("unresolved Avro name: {e}")))?
            .get_names()
            .iter()
            .map(|(n, s)| (n.clone(), (*s).clone()))
            .collect();
        let mut budget = RECURSION_CHECK_STEPS;
        if recursive(&schema, &names, &mut Vec::new(), &mut budget) {
            // apache-avro decodes nested values by recursion without a depth limit, and a
            // type that contains itself lets a record nest one level per byte: a few KB
            // overflowed the tailing thread's stack, which aborts the process (and again at
            // every restart, the record being re-read). Such records are undecodable.
            return Err(bad(
                "a recursive Avro schema (a named type contains itself): not supported, its records are undecodable"
                    .to_string(),
            ));
        }
        Ok(Self {
            schema,
            references,
            names,
        })
    }

    /// Decodes one payload (the bytes after the framing) into a JSON tree. The payload is
    /// walked first ([`Walk`]): it must hold exactly one datum of the schema and at most
    /// [`MAX_ITEMS`] collection items, else it is an error (the record `undecodable`).
    pub fn decode(&self, mut payload: &[u8], ts: TimestampFormat) -> Result<Value, String> {
        Walk::check(&self.schema, &self.names, payload)?;
        let builder = apache_avro::reader::datum::GenericDatumReader::builder(&self.schema);
        let reader = if self.references.is_empty() {
            builder.build()
        } else {
            builder
                .writer_schemata(self.references.iter().collect())
                .and_then(|b| b.build())
        }
        .map_err(|e| e.to_string())?;
        let value = reader.read_value(&mut payload).map_err(|e| e.to_string())?;
        if !payload.is_empty() {
            return Err(format!("{} bytes after the record", payload.len()));
        }
        Ok(self.to_json(value, Some(&self.schema), ts))
    }

    /// The schema behind a `Ref`, else the schema itself.
    fn resolve<'a>(&'a self, schema: Option<&'a Schema>) -> Option<&'a Schema> {
        match schema {
            Some(Schema::Ref { name }) => self.names.get(name),
            s => s,
        }
    }

    fn to_json(&self, v: Avro, schema: Option<&Schema>, ts: TimestampFormat) -> Value {
        let schema = self.resolve(schema);
        let text =
            |s: Option<String>, raw: i64| Value::String(s.unwrap_or_else(|| raw.to_string()));
        match v {
            Avro::Null => Value::Null,
            Avro::Boolean(b) => Value::Bool(b),
            Avro::Int(i) => Value::from(i),
            Avro::Long(l) => Value::from(l),
            Avro::Float(f) => Number::from_f64(f64::from(f)).map_or(Value::Null, Value::Number),
            Avro::Double(d) => Number::from_f64(d).map_or(Value::Null, Value::Number),
            Avro::Bytes(b) | Avro::Fixed(_, b) => {
                Value::String(base64::engine::general_purpose::STANDARD.encode(b))
            }
            Avro::String(s) => Value::String(s),
            Avro::Enum(_, symbol) => Value::String(symbol),
            Avro::Uuid(u) => Value::String(u.to_string()),
            Avro::Union(i, inner) => {
                let branch = match schema {
                    Some(Schema::Union(u)) => u.variants().get(i as usize),
                    _ => None,
                };
                self.to_json(*inner, branch, ts)
            }
            Avro::Array(items) => {
                let item = match schema {
                    Some(Schema::Array(a)) => Some(&*a.items),
                    _ => None,
                };
                Value::Array(
                    items
                        .into_iter()
                        .map(|x| self.to_json(x, item, ts))
                        .collect(),
                )
            }
            Avro::Map(entries) => {
                let values = match schema {
                    Some(Schema::Map(m)) => Some(&*m.types),
                    _ => None,
                };
                let mut out = Map::new();
                for (k, x) in entries {
                    out.insert(k, self.to_json(x, values, ts));
                }
                Value::Object(out)
            }
            Avro::Record(fields) => {
                let field_schemas = match schema {
                    Some(Schema::Record(r)) => Some(&r.fields),
                    _ => None,
                };
                let mut out = Map::new();
                for (i, (name, x)) in fields.into_iter().enumerate() {
                    let fs = field_schemas.and_then(|f| f.get(i)).map(|f| &f.schema);
                    out.insert(name, self.to_json(x, fs, ts));
                }
                Value::Object(out)
            }
            Avro::Date(d) => text(logical::date(d), i64::from(d)),
            Avro::TimeMillis(t) => {
                text(logical::time_of_day(i64::from(t), 1_000_000), i64::from(t))
            }
            Avro::TimeMicros(t) => text(logical::time_of_day(t, 1000), t),
            Avro::TimestampMillis(t) | Avro::LocalTimestampMillis(t) => {
                text(logical::timestamp_units(ts, t, 1_000_000), t)
            }
            Avro::TimestampMicros(t) | Avro::LocalTimestampMicros(t) => {
                text(logical::timestamp_units(ts, t, 1000), t)
            }
            Avro::TimestampNanos(t) | Avro::LocalTimestampNanos(t) => {
                text(logical::timestamp_units(ts, t, 1), t)
            }
            Avro::Decimal(d) => {
                let scale = match schema {
                    Some(Schema::Decimal(s)) => s.scale,
                    _ => 0,
                };
                let bytes = <Vec<u8>>::try_from(&d).unwrap_or_default();
                Value::String(logical::decimal(
                    &num_bigint::BigInt::from_signed_bytes_be(&bytes),
                    scale,
                ))
            }
            Avro::BigDecimal(b) => Value::String(b.to_plain_string()),
            Avro::Duration(d) => {
                let (m, dd, ms): (u32, u32, u32) =
                    (d.months().into(), d.days().into(), d.millis().into());
                let mut out = Map::new();
                out.insert("months".into(), Value::from(m));
                out.insert("days".into(), Value::from(dd));
                out.insert("millis".into(), Value::from(ms));
                Value::Object(out)
            }
        }
    }
}

#[cfg(test)]
mod tests;
