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

    /// Decodes one payload (the bytes after the framing) into a JSON tree.
    pub fn decode(&self, mut payload: &[u8], ts: TimestampFormat) -> Result<Value, String> {
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

    #[test]
    fn logical_types_unions_enums_and_refs() {
        let s = AvroSchema::compile(1, &raw(SCHEMA)).expect("schema");
        let geo = Avro::Record(vec![("country".into(), Avro::String("DE".into()))]);
        let bytes = encode(&s.schema, |r| {
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
        });
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
