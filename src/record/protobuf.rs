//! Protobuf record values (Confluent framing, schema from the registry) decoded into a JSON
//! tree, so that fields are addressed like `json` records (`name`, `/a/b`) by their proto
//! field names (what Flink's `protobuf` format and Kafka Connect's converter map columns by).
//!
//! Confluent's Protobuf framing puts the *message indexes* after the schema id: a zigzag
//! varint count, then that many zigzag varint indexes into the schema file's messages
//! (nested by level); a count of 0 means the first message. The registry serves the schema
//! as `.proto` text or, as Confluent's Python serializer registers it, a base64
//! `FileDescriptorProto`: both are accepted, and so are references to other schemas, the
//! `google/protobuf/*.proto` well-known types and the other files Confluent's registry
//! knows without a reference (`google/type/*.proto`, `confluent/meta.proto`,
//! `confluent/type/*.proto`: bundled from their sources, see `protos/README.md`), which
//! Confluent's serializers never register as references.
//!
//! Mapping: proto3 scalars without presence decode to their default (0, "", false) like the
//! columns Flink and Kafka Connect write for them; fields with presence (messages,
//! `optional`, oneof members) that are unset are absent; enums → their value's name;
//! 64-bit integers → their decimal text; bytes → base64; `google.protobuf.Timestamp` → the
//! timestamp text of [`super::logical`]; wrappers (`google.protobuf.StringValue`, ...) → their
//! value; `google.type.Date` → `2024-05-01` (a partial date stays its fields),
//! `google.type.TimeOfDay` → `12:00:00.5`, `confluent.type.Decimal` → its decimal text: the
//! DATE, TIME and DECIMAL columns Kafka Connect's Protobuf converter maps them to.

use base64::Engine;
use prost_reflect::prost::bytes::Buf;
use prost_reflect::{
    DescriptorPool, DynamicMessage, Kind, MapKey, MessageDescriptor, ReflectMessage, Value as Pb,
};
use serde_json::{Map, Number, Value};

use super::logical::{self, TimestampFormat};
use super::registry::{RawSchema, SchemaError, SchemaType};

/// A writer schema from the registry: its file's descriptors with every dependency.
#[derive(Debug)]
pub struct ProtoSchema {
    pool: DescriptorPool,
    file: String,
}

/// The name the main schema goes by when the registry serves `.proto` text (references
/// keep their own names: the imports name them).
const MAIN_FILE: &str = "gap_auditor_schema.proto";

/// The files Confluent's Protobuf provider resolves itself (its built-in locations besides
/// `google/protobuf/`, which protox bundles): the registry's references win over these.
const BUNDLED: &[(&str, &str)] = &[
    (
        "confluent/meta.proto",
        include_str!("protos/confluent/meta.proto"),
    ),
    (
        "confluent/type/decimal.proto",
        include_str!("protos/confluent/type/decimal.proto"),
    ),
    (
        "confluent/type/variant.proto",
        include_str!("protos/confluent/type/variant.proto"),
    ),
    (
        "google/type/calendar_period.proto",
        include_str!("protos/google/type/calendar_period.proto"),
    ),
    (
        "google/type/color.proto",
        include_str!("protos/google/type/color.proto"),
    ),
    (
        "google/type/date.proto",
        include_str!("protos/google/type/date.proto"),
    ),
    (
        "google/type/datetime.proto",
        include_str!("protos/google/type/datetime.proto"),
    ),
    (
        "google/type/dayofweek.proto",
        include_str!("protos/google/type/dayofweek.proto"),
    ),
    (
        "google/type/decimal.proto",
        include_str!("protos/google/type/decimal.proto"),
    ),
    (
        "google/type/expr.proto",
        include_str!("protos/google/type/expr.proto"),
    ),
    (
        "google/type/fraction.proto",
        include_str!("protos/google/type/fraction.proto"),
    ),
    (
        "google/type/interval.proto",
        include_str!("protos/google/type/interval.proto"),
    ),
    (
        "google/type/latlng.proto",
        include_str!("protos/google/type/latlng.proto"),
    ),
    (
        "google/type/money.proto",
        include_str!("protos/google/type/money.proto"),
    ),
    (
        "google/type/month.proto",
        include_str!("protos/google/type/month.proto"),
    ),
    (
        "google/type/phone_number.proto",
        include_str!("protos/google/type/phone_number.proto"),
    ),
    (
        "google/type/postal_address.proto",
        include_str!("protos/google/type/postal_address.proto"),
    ),
    (
        "google/type/quaternion.proto",
        include_str!("protos/google/type/quaternion.proto"),
    ),
    (
        "google/type/timeofday.proto",
        include_str!("protos/google/type/timeofday.proto"),
    ),
];

/// Serves the schema and its references to the compiler, then the files Confluent's
/// registry knows built in, then the well-known types.
struct Sources {
    files: Vec<(String, String)>,
    google: protox::file::GoogleFileResolver,
}

/// A base64 `FileDescriptorProto`, when `text` is one.
fn descriptor(text: &str) -> Option<prost_reflect::prost_types::FileDescriptorProto> {
    use prost_reflect::prost::Message;
    let t = text.trim();
    if t.is_empty() || t.contains([' ', ';', '\n', '{']) {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(t).ok()?;
    prost_reflect::prost_types::FileDescriptorProto::decode(bytes.as_slice()).ok()
}

impl protox::file::FileResolver for Sources {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        if let Some((_, text)) = self.files.iter().find(|(n, _)| n == name) {
            return match descriptor(text) {
                Some(mut fd) => {
                    fd.name = Some(name.to_owned());
                    Ok(protox::file::File::from_file_descriptor_proto(fd))
                }
                None => protox::file::File::from_source(name, text),
            };
        }
        if let Some((_, text)) = BUNDLED.iter().find(|(n, _)| *n == name) {
            return protox::file::File::from_source(name, text);
        }
        self.google.open_file(name)
    }
}

impl ProtoSchema {
    /// Compiles a registry schema (with its references) of type PROTOBUF.
    pub fn compile(id: u32, raw: &RawSchema) -> Result<Self, SchemaError> {
        let bad = |reason: String| SchemaError { id, reason };
        if raw.schema_type != SchemaType::Protobuf {
            return Err(bad(format!(
                "is a {:?} schema, and record.format is protobuf",
                raw.schema_type
            )));
        }
        let mut files = raw.references.clone();
        files.push((MAIN_FILE.to_owned(), raw.text.clone()));
        let mut compiler = protox::Compiler::with_file_resolver(Sources {
            files,
            google: protox::file::GoogleFileResolver::new(),
        });
        compiler.include_imports(true);
        compiler
            .open_file(MAIN_FILE)
            .map_err(|e| bad(format!("not a valid Protobuf schema: {e}")))?;
        Ok(Self {
            pool: compiler.descriptor_pool(),
            file: MAIN_FILE.to_owned(),
        })
    }

    /// The message the indexes name: the first level indexes the file's messages, each
    /// further level the previous message's nested ones.
    fn message(&self, indexes: &[i64]) -> Option<MessageDescriptor> {
        let file = self.pool.get_file_by_name(&self.file)?;
        let (first, rest) = indexes.split_first()?;
        let mut m = file.messages().nth(usize::try_from(*first).ok()?)?;
        for i in rest {
            let child = m.child_messages().nth(usize::try_from(*i).ok()?)?;
            m = child;
        }
        Some(m)
    }

    /// Decodes one payload (the bytes after the schema id: message indexes, then the
    /// message) into a JSON tree.
    pub fn decode(&self, mut payload: &[u8], ts: TimestampFormat) -> Result<Value, String> {
        let indexes = read_indexes(&mut payload)?;
        let desc = self
            .message(&indexes)
            .ok_or_else(|| format!("message indexes {indexes:?} name no message of the schema"))?;
        let msg = DynamicMessage::decode(desc, payload).map_err(|e| e.to_string())?;
        Ok(message_json(&msg, ts))
    }
}

/// Most message-index levels read (a hostile count cannot allocate).
const MAX_INDEXES: u64 = 64;

fn zigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Reads Confluent's message indexes; `[0]` for the count 0.
fn read_indexes(buf: &mut &[u8]) -> Result<Vec<i64>, String> {
    use prost_reflect::prost::encoding::decode_varint;
    let bad = |e: prost_reflect::prost::DecodeError| format!("message indexes: {e}");
    let count = zigzag(decode_varint(buf).map_err(bad)?);
    if count == 0 {
        return Ok(vec![0]);
    }
    if count < 0 || count as u64 > MAX_INDEXES {
        return Err(format!("message indexes: bad count {count}"));
    }
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        if !buf.has_remaining() {
            return Err("message indexes: truncated".into());
        }
        out.push(zigzag(decode_varint(buf).map_err(bad)?));
    }
    Ok(out)
}

/// Largest `confluent.type.Decimal` scale rendered (a hostile one must not allocate a
/// string of 2^31 zeros); Doris and MySQL DECIMALs stop at 30 and 38 fraction digits.
const MAX_DECIMAL_SCALE: usize = 100;

/// Field `number` of `msg` (its default when unset), `None` when the message has none.
fn field(msg: &DynamicMessage, number: u32) -> Option<Pb> {
    let f = msg.descriptor().get_field(number)?;
    Some(msg.get_field(&f).into_owned())
}

fn message_json(msg: &DynamicMessage, ts: TimestampFormat) -> Value {
    let desc = msg.descriptor();
    match desc.full_name() {
        "google.protobuf.Timestamp" => {
            let get = |n: u32| desc.get_field(n).map(|f| msg.get_field(&f).into_owned());
            let secs = match get(1) {
                Some(Pb::I64(s)) => s,
                _ => 0,
            };
            let nanos = match get(2) {
                Some(Pb::I32(n)) => n.clamp(0, 999_999_999) as u32,
                _ => 0,
            };
            return logical::timestamp(ts, secs, nanos)
                .map_or_else(|| Value::String(secs.to_string()), Value::String);
        }
        "google.type.Date" => {
            let n = |i: u32| match field(msg, i) {
                Some(Pb::I32(v)) => v,
                _ => 0,
            };
            if let Some(d) = logical::ymd(n(1), n(2), n(3)) {
                return Value::String(d);
            }
        }
        "google.type.TimeOfDay" => {
            let n = |i: u32| match field(msg, i) {
                Some(Pb::I32(v)) => i64::from(v),
                _ => 0,
            };
            let nanos = (n(1) * 3600 + n(2) * 60 + n(3))
                .checked_mul(1_000_000_000)
                .and_then(|s| s.checked_add(n(4)));
            if let Some(t) = nanos.and_then(|v| logical::time_of_day(v, 1)) {
                return Value::String(t);
            }
        }
        "confluent.type.Decimal" => {
            if let (Some(Pb::Bytes(b)), Some(Pb::I32(scale))) = (field(msg, 1), field(msg, 3))
                && let Ok(scale) = usize::try_from(scale)
                && scale <= MAX_DECIMAL_SCALE
            {
                let unscaled = num_bigint::BigInt::from_signed_bytes_be(&b);
                return Value::String(logical::decimal(&unscaled, scale));
            }
        }
        name if name.starts_with("google.protobuf.") && name.ends_with("Value") => {
            if let Some(f) = desc.get_field(1)
                && desc.fields().len() == 1
            {
                return value_json(&msg.get_field(&f), &f.kind(), ts);
            }
        }
        _ => {}
    }
    let mut out = Map::new();
    for f in desc.fields() {
        if f.supports_presence() && !msg.has_field(&f) {
            continue;
        }
        out.insert(
            f.name().to_owned(),
            value_json(&msg.get_field(&f), &f.kind(), ts),
        );
    }
    Value::Object(out)
}

fn value_json(v: &Pb, kind: &Kind, ts: TimestampFormat) -> Value {
    match v {
        Pb::Bool(b) => Value::Bool(*b),
        Pb::I32(i) => Value::from(*i),
        Pb::U32(u) => Value::from(*u),
        Pb::I64(i) => Value::from(*i),
        Pb::U64(u) => Value::from(*u),
        Pb::F32(f) => Number::from_f64(f64::from(*f)).map_or(Value::Null, Value::Number),
        Pb::F64(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
        Pb::String(s) => Value::String(s.clone()),
        Pb::Bytes(b) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        Pb::EnumNumber(n) => match kind {
            Kind::Enum(e) => e
                .get_value(*n)
                .map_or_else(|| Value::from(*n), |ev| Value::String(ev.name().to_owned())),
            _ => Value::from(*n),
        },
        Pb::Message(m) => message_json(m, ts),
        Pb::List(items) => Value::Array(items.iter().map(|x| value_json(x, kind, ts)).collect()),
        Pb::Map(entries) => {
            let value_kind = match kind {
                Kind::Message(entry) => entry.map_entry_value_field().kind(),
                k => k.clone(),
            };
            let mut out = Map::new();
            for (k, x) in entries {
                let key = match k {
                    MapKey::Bool(b) => b.to_string(),
                    MapKey::I32(i) => i.to_string(),
                    MapKey::I64(i) => i.to_string(),
                    MapKey::U32(u) => u.to_string(),
                    MapKey::U64(u) => u.to_string(),
                    MapKey::String(s) => s.clone(),
                };
                out.insert(key, value_json(x, &value_kind, ts));
            }
            Value::Object(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost_reflect::prost::Message;

    const PROTO: &str = r#"
syntax = "proto3";
package example;
import "google/protobuf/timestamp.proto";
message Other { string x = 1; }
message DnsLog {
  string client_ip = 1;
  string domain = 2;
  google.protobuf.Timestamp time = 3;
  int64 bytes = 4;
  enum QType { A = 0; AAAA = 1; }
  QType query_type = 5;
  optional string rcode = 6;
  message Geo { string country = 1; }
  Geo geo = 7;
  map<string, int32> counts = 8;
}
"#;

    fn schema(text: &str) -> ProtoSchema {
        ProtoSchema::compile(
            9,
            &RawSchema {
                schema_type: SchemaType::Protobuf,
                text: text.into(),
                references: Vec::new(),
            },
        )
        .expect("schema compiles")
    }

    fn encode(s: &ProtoSchema, indexes: &[u8], fill: impl FnOnce(&mut DynamicMessage)) -> Vec<u8> {
        let mut path = vec![];
        let mut buf = indexes;
        let idx = read_indexes(&mut buf).expect("indexes");
        path.extend(idx);
        let mut m = DynamicMessage::new(s.message(&path).expect("message"));
        fill(&mut m);
        let mut out = indexes.to_vec();
        out.extend(m.encode_to_vec());
        out
    }

    #[test]
    fn fields_timestamps_enums_presence_and_defaults() {
        let s = schema(PROTO);
        // Indexes [1]: the second top-level message, DnsLog (count 1 = zigzag 2, index 1 = 2).
        let bytes = encode(&s, &[2, 2], |m| {
            m.set_field_by_name("client_ip", Pb::String("10.0.0.1".into()));
            let time_desc = m.descriptor().get_field_by_name("time").expect("time");
            let Kind::Message(td) = time_desc.kind() else {
                panic!("time is a message")
            };
            let mut t = DynamicMessage::new(td);
            t.set_field_by_name("seconds", Pb::I64(1_714_564_800));
            t.set_field_by_name("nanos", Pb::I32(123_000_000));
            m.set_field_by_name("time", Pb::Message(t));
            m.set_field_by_name("bytes", Pb::I64(1 << 40));
            m.set_field_by_name("query_type", Pb::EnumNumber(1));
        });
        let v = s.decode(&bytes, TimestampFormat::Sql).expect("decodes");
        assert_eq!(v["client_ip"], "10.0.0.1");
        assert_eq!(v["domain"], "", "proto3 default, as the pipeline writes it");
        assert_eq!(v["time"], "2024-05-01 12:00:00.123");
        assert_eq!(v["bytes"], 1_099_511_627_776i64);
        assert_eq!(v["query_type"], "AAAA");
        assert!(v.get("rcode").is_none(), "optional and unset: absent");
        assert!(v.get("geo").is_none(), "message and unset: absent");
    }

    #[test]
    fn message_indexes_pick_nested_and_first_messages() {
        let s = schema(PROTO);
        // Count 0: the first message (Other).
        let other = encode(&s, &[0], |m| {
            m.set_field_by_name("x", Pb::String("o".into()))
        });
        assert_eq!(
            s.decode(&other, TimestampFormat::Sql).expect("decodes")["x"],
            "o"
        );
        // [1, 0]: DnsLog.Geo (count 2 = 4, 1 = 2, 0 = 0).
        let geo = encode(&s, &[4, 2, 0], |m| {
            m.set_field_by_name("country", Pb::String("DE".into()))
        });
        assert_eq!(
            s.decode(&geo, TimestampFormat::Sql).expect("decodes")["country"],
            "DE"
        );
        // [7]: no such message; a truncated or hostile count.
        assert!(s.decode(&[2, 14], TimestampFormat::Sql).is_err());
        assert!(s.decode(&[4, 2], TimestampFormat::Sql).is_err());
        assert!(
            s.decode(&[0xFF, 0xFF, 0xFF, 0x0F], TimestampFormat::Sql)
                .is_err()
        );
        assert!(s.decode(&[], TimestampFormat::Sql).is_err());
    }

    #[test]
    fn base64_descriptors_as_confluents_python_serializer_registers_them() {
        let text = schema(PROTO);
        let fd = text
            .pool
            .get_file_by_name(MAIN_FILE)
            .expect("file")
            .file_descriptor_proto()
            .clone();
        let b64 = base64::engine::general_purpose::STANDARD.encode(fd.encode_to_vec());
        let s = schema(&b64);
        let bytes = encode(&s, &[2, 2], |m| {
            m.set_field_by_name("client_ip", Pb::String("10.9.9.9".into()))
        });
        assert_eq!(
            s.decode(&bytes, TimestampFormat::Sql).expect("decodes")["client_ip"],
            "10.9.9.9"
        );
    }

    proptest::proptest! {
        #![proptest_config(crate::test_seed::config())]
        /// Hostile payloads: decoded or an error, never a panic.
        #[test]
        fn any_payload_decodes_or_fails_cleanly(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let s = schema(PROTO);
            let _ = s.decode(&bytes, TimestampFormat::Sql);
        }
    }

    #[test]
    fn bad_schemas_are_schema_errors() {
        let bad = RawSchema {
            schema_type: SchemaType::Protobuf,
            text: "message {".into(),
            references: Vec::new(),
        };
        assert!(ProtoSchema::compile(1, &bad).is_err());
        let avro = RawSchema {
            schema_type: SchemaType::Avro,
            ..bad
        };
        assert!(ProtoSchema::compile(1, &avro).is_err());
    }

    /// Issue 19 review: imports Confluent's registry resolves itself, with no reference
    /// entry (its serializers never register them), compile; their types render like the
    /// columns Kafka Connect maps them to.
    #[test]
    fn confluent_built_in_imports_compile_without_references() {
        let s = schema(
            r#"
syntax = "proto3";
package example;
import "google/type/date.proto";
import "google/type/timeofday.proto";
import "confluent/meta.proto";
import "confluent/type/decimal.proto";
message Row {
  string client_ip = 1 [(confluent.field_meta) = { doc: "the client's address" }];
  google.type.Date day = 2;
  google.type.TimeOfDay at = 3;
  confluent.type.Decimal price = 4;
  google.type.Date partial = 5;
}
"#,
        );
        let bytes = encode(&s, &[0], |m| {
            m.set_field_by_name("client_ip", Pb::String("10.0.0.1".into()));
            let sub = |m: &DynamicMessage, name: &str| {
                let Kind::Message(d) = m.descriptor().get_field_by_name(name).expect(name).kind()
                else {
                    panic!("{name} is a message")
                };
                DynamicMessage::new(d)
            };
            let mut day = sub(m, "day");
            day.set_field_by_name("year", Pb::I32(2024));
            day.set_field_by_name("month", Pb::I32(5));
            day.set_field_by_name("day", Pb::I32(1));
            m.set_field_by_name("day", Pb::Message(day));
            let mut at = sub(m, "at");
            at.set_field_by_name("hours", Pb::I32(12));
            at.set_field_by_name("seconds", Pb::I32(3));
            at.set_field_by_name("nanos", Pb::I32(500_000_000));
            m.set_field_by_name("at", Pb::Message(at));
            let mut price = sub(m, "price");
            // -1250 in two's complement, big-endian, scale 2.
            price.set_field_by_name("value", Pb::Bytes((-1250i16).to_be_bytes().to_vec().into()));
            price.set_field_by_name("scale", Pb::I32(2));
            m.set_field_by_name("price", Pb::Message(price));
            let mut partial = sub(m, "partial");
            partial.set_field_by_name("month", Pb::I32(12));
            partial.set_field_by_name("day", Pb::I32(24));
            m.set_field_by_name("partial", Pb::Message(partial));
        });
        let v = s.decode(&bytes, TimestampFormat::Sql).expect("decodes");
        assert_eq!(v["client_ip"], "10.0.0.1");
        assert_eq!(v["day"], "2024-05-01", "a DATE column's text");
        assert_eq!(v["at"], "12:00:03.5");
        assert_eq!(v["price"], "-12.50");
        assert_eq!(
            v["partial"]["month"], 12,
            "a date without a year is no DATE: its fields"
        );
    }

    #[test]
    fn a_reference_the_registry_supplies_wins_over_the_bundled_file() {
        let own = "syntax = \"proto3\";\npackage google.type;\nmessage Date { string text = 1; }\n";
        let s = ProtoSchema::compile(
            9,
            &RawSchema {
                schema_type: SchemaType::Protobuf,
                text: "syntax = \"proto3\";\nimport \"google/type/date.proto\";\nmessage R { google.type.Date d = 1; }\n".into(),
                references: vec![("google/type/date.proto".into(), own.into())],
            },
        )
        .expect("compiles");
        let d = s
            .pool
            .get_message_by_name("google.type.Date")
            .expect("Date");
        assert!(d.get_field_by_name("text").is_some(), "the registry's text");
    }
}
