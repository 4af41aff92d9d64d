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
mod tests {
    use super::*;
    use apache_avro::types::Record;

    const SCHEMA: &str = r#"{
      "type": "record", "name": "DnsLog", "namespace": "example",
      "fields": [
        {"name": "client_ip", "type": "string"},
        {"name": "time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "rcode", "type": ["null", "string"], "default": null},
        {"name": "qtype", "type": {"type": "enum", "name": "QType", "symbols": ["A", "AAAA"]}},
        {"name": "geo", "type": ["null", {"type": "record", "name": "Geo", "fields": [
            {"name": "country", "type": "string"}]}], "default": null},
        {"name": "prev", "type": ["null", "Geo"], "default": null}
      ]}"#;

    fn raw(text: &str) -> RawSchema {
        RawSchema {
            schema_type: SchemaType::Avro,
            text: text.into(),
            references: Vec::new(),
        }
    }

    fn encode(schema: &Schema, fill: impl FnOnce(&mut Record<'_>)) -> Vec<u8> {
        let mut r = Record::new(schema).expect("record schema");
        fill(&mut r);
        apache_avro::writer::datum::GenericDatumWriter::builder(schema)
            .build()
            .expect("writer")
            .write_value_to_vec(r)
            .expect("encode")
    }

    /// A record of [`SCHEMA`] with every field set (each union on its non-null branch).
    fn full(s: &AvroSchema) -> Vec<u8> {
        let geo = Avro::Record(vec![("country".into(), Avro::String("DE".into()))]);
        encode(&s.schema, |r| {
            r.put("client_ip", "10.0.0.1");
            r.put("time", Avro::TimestampMillis(1_714_564_800_123));
            r.put("day", Avro::Date(19844));
            r.put(
                "price",
                Avro::Decimal(apache_avro::Decimal::from(vec![0xFBu8, 0x1E])),
            );
            r.put(
                "rcode",
                Avro::Union(1, Box::new(Avro::String("NOERROR".into()))),
            );
            r.put("qtype", Avro::Enum(1, "AAAA".into()));
            r.put("geo", Avro::Union(1, Box::new(geo.clone())));
            r.put("prev", Avro::Union(1, Box::new(geo)));
        })
    }

    #[test]
    fn logical_types_unions_enums_and_refs() {
        let s = AvroSchema::compile(1, &raw(SCHEMA)).expect("schema");
        let bytes = full(&s);
        let v = s.decode(&bytes, TimestampFormat::Sql).expect("decodes");
        assert_eq!(v["client_ip"], "10.0.0.1");
        assert_eq!(v["time"], "2024-05-01 12:00:00.123");
        assert_eq!(v["day"], "2024-05-01");
        // 0xFB1E = -1250, scale 2.
        assert_eq!(v["price"], "-12.50");
        assert_eq!(v["rcode"], "NOERROR");
        assert_eq!(v["qtype"], "AAAA");
        assert_eq!(v.pointer("/geo/country"), Some(&Value::from("DE")));
        assert_eq!(v.pointer("/prev/country"), Some(&Value::from("DE")));
    }

    #[test]
    fn null_branches_are_null_and_garbage_is_an_error() {
        let s = AvroSchema::compile(1, &raw(SCHEMA)).expect("schema");
        let bytes = encode(&s.schema, |r| {
            r.put("client_ip", "");
            r.put("time", Avro::TimestampMillis(0));
            r.put("day", Avro::Date(0));
            r.put(
                "price",
                Avro::Decimal(apache_avro::Decimal::from(vec![0u8])),
            );
            r.put("rcode", Avro::Union(0, Box::new(Avro::Null)));
            r.put("qtype", Avro::Enum(0, "A".into()));
            r.put("geo", Avro::Union(0, Box::new(Avro::Null)));
            r.put("prev", Avro::Union(0, Box::new(Avro::Null)));
        });
        let v = s
            .decode(&bytes, TimestampFormat::EpochMillis)
            .expect("decodes");
        assert_eq!(v["rcode"], Value::Null);
        assert_eq!(v["time"], "0");
        assert!(s.decode(&[0xFF; 3], TimestampFormat::Sql).is_err());
        assert!(s.decode(&[], TimestampFormat::Sql).is_err());
    }

    /// Issue 19 review: a record cut short must be undecodable, never a record whose last
    /// fields read as absent; bytes after the datum (another writer schema than the id
    /// says) are not ignored either.
    #[test]
    fn a_truncated_or_overlong_payload_is_an_error() {
        let s = AvroSchema::compile(1, &raw(SCHEMA)).expect("schema");
        let bytes = full(&s);
        assert!(s.decode(&bytes, TimestampFormat::Sql).is_ok());
        for cut in 0..bytes.len() {
            assert!(
                s.decode(&bytes[..cut], TimestampFormat::Sql).is_err(),
                "{cut} of {} bytes decoded",
                bytes.len()
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(
            s.decode(&longer, TimestampFormat::Sql).is_err(),
            "a trailing byte"
        );
        // A schema whose last field takes no bytes: the cut is in the field before it.
        let tail = AvroSchema::compile(
            2,
            &raw(r#"{"type":"record","name":"T","fields":[
                {"name":"a","type":["null","string"]},{"name":"z","type":"null"}]}"#),
        )
        .expect("schema");
        assert!(tail.decode(&[2, 2, b'x'], TimestampFormat::Sql).is_ok());
        assert!(tail.decode(&[2, 2], TimestampFormat::Sql).is_err());
        assert!(tail.decode(&[2], TimestampFormat::Sql).is_err());
    }

    /// Zigzag varint of `v`.
    fn varint(v: i64) -> Vec<u8> {
        let mut z = ((v << 1) ^ (v >> 63)) as u64;
        let mut out = Vec::new();
        loop {
            let b = (z & 0x7F) as u8;
            z >>= 7;
            if z == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    /// Issue 19 review: items that take no byte (nulls) or one (empty arrays) in nested
    /// collections: each collection within apache-avro's cap, their sum not — a few bytes
    /// allocating gigabytes on the tailing thread. The record's items are capped together.
    #[test]
    fn nested_collections_share_one_item_budget() {
        let s = AvroSchema::compile(
            1,
            &raw(r#"{"type":"record","name":"N","fields":[
                {"name":"a","type":{"type":"array","items":{"type":"array","items":"null"}}}]}"#),
        )
        .expect("schema");
        // Four inner arrays of a million nulls each: 17 bytes, 4 M values.
        let mut hostile = varint(4);
        for _ in 0..4 {
            hostile.extend(varint(1_000_000));
            hostile.push(0);
        }
        hostile.push(0);
        let e = s
            .decode(&hostile, TimestampFormat::Sql)
            .expect_err("over the budget");
        assert!(e.contains("array items"), "{e}");
        // Ordinary nesting decodes: 1,000 empty arrays, and one of 10 nulls.
        let mut fine = varint(1001);
        fine.extend(std::iter::repeat_n(0u8, 1000));
        fine.extend(varint(10));
        fine.extend([0, 0]);
        let v = s.decode(&fine, TimestampFormat::Sql).expect("decodes");
        assert_eq!(v["a"].as_array().map(Vec::len), Some(1001));
        assert_eq!(v["a"][1000].as_array().map(Vec::len), Some(10));
    }

    proptest::proptest! {
        /// Record contents are hostile: any payload decodes or is an error, never a panic,
        /// and a length prefix beyond the payload never allocates past the cap.
        #[test]
        fn any_payload_decodes_or_fails_cleanly(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let s = AvroSchema::compile(1, &raw(SCHEMA)).expect("schema");
            let _ = s.decode(&bytes, TimestampFormat::Sql);
        }
    }

    #[test]
    fn a_huge_length_prefix_is_an_error_not_an_allocation() {
        let s = AvroSchema::compile(1, &raw(SCHEMA)).expect("schema");
        // client_ip: a string claiming 100 MiB (over the cap, under the crate's default),
        // then nothing.
        let mut zigzag = (100u64 << 20) << 1;
        let mut bytes = Vec::new();
        while zigzag >= 0x80 {
            bytes.push((zigzag as u8) | 0x80);
            zigzag >>= 7;
        }
        bytes.push(zigzag as u8);
        let e = s
            .decode(&bytes, TimestampFormat::Sql)
            .expect_err("too long");
        assert!(e.contains("alloc") || e.contains("memory"), "{e}");
        assert_eq!(apache_avro::util::max_allocation_bytes(0), MAX_ALLOCATION);
    }

    #[test]
    fn bad_and_foreign_schemas_are_schema_errors() {
        assert!(AvroSchema::compile(3, &raw("{not json")).is_err());
        let mut proto = raw("syntax = \"proto3\";");
        proto.schema_type = SchemaType::Protobuf;
        let e = AvroSchema::compile(3, &proto).expect_err("protobuf is not avro");
        assert!(e.to_string().contains("schema id 3"), "{e}");
    }

    #[test]
    fn a_recursive_schema_is_refused_before_a_record_can_nest_deeply() {
        let err = AvroSchema::compile(
            1,
            &raw(r#"{"type":"record","name":"Node","fields":[{"name":"next","type":["null","Node"]}]}"#),
        )
        .expect_err("recursive");
        assert!(err.reason.contains("recursive"), "{}", err.reason);
        // Through an array and a second type, too.
        let err = AvroSchema::compile(
            1,
            &raw(r#"{"type":"record","name":"A","fields":[{"name":"b","type":{"type":"record","name":"B","fields":[{"name":"as","type":{"type":"array","items":"A"}}]}}]}"#),
        )
        .expect_err("recursive through B");
        assert!(err.reason.contains("recursive"), "{}", err.reason);
        // A named type used twice side by side is not recursion.
        AvroSchema::compile(
            1,
            &raw(r#"{"type":"record","name":"P","fields":[{"name":"a","type":{"type":"record","name":"Pt","fields":[{"name":"x","type":"int"}]}},{"name":"b","type":"Pt"}]}"#),
        )
        .expect("not recursive");
    }

    #[test]
    fn a_uuid_string_keeps_the_producers_text() {
        let s = AvroSchema::compile(
            1,
            &raw(r#"{"type":"record","name":"U","fields":[{"name":"id","type":{"type":"string","logicalType":"uuid"}}]}"#),
        )
        .expect("schema");
        let enc = |t: &str| {
            let mut b = vec![(t.len() as u8) << 1];
            b.extend_from_slice(t.as_bytes());
            b
        };
        let upper = "550E8400-E29B-41D4-A716-446655440000";
        let v = s
            .decode(&enc(upper), TimestampFormat::Sql)
            .expect("decodes");
        assert_eq!(v["id"], upper, "the text the pipeline writes");
        let v = s
            .decode(&enc("order-42"), TimestampFormat::Sql)
            .expect("not a uuid: still a string");
        assert_eq!(v["id"], "order-42");
    }

    #[test]
    fn references_resolve_named_types_of_other_schemas() {
        let geo = r#"{"type":"record","name":"Geo","namespace":"example","fields":[{"name":"country","type":"string"}]}"#;
        let top = r#"{"type":"record","name":"Top","namespace":"example","fields":[{"name":"geo","type":"example.Geo"}]}"#;
        let s = AvroSchema::compile(
            5,
            &RawSchema {
                schema_type: SchemaType::Avro,
                text: top.into(),
                references: vec![("geo".into(), geo.into())],
            },
        )
        .expect("schema with a reference");
        // Geo { country: "FR" }: a string of length 2 (zigzag 4).
        let v = s
            .decode(&[4, b'F', b'R'], TimestampFormat::Sql)
            .expect("decodes");
        assert_eq!(v.pointer("/geo/country"), Some(&Value::from("FR")));
    }
}
