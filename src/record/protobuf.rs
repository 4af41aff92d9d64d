//! Protobuf record values (Confluent framing, schema from the registry) decoded into a JSON
//! tree, so that fields are addressed like `json` records (`name`, `/a/b`) by their proto
//! field names (what Flink's `protobuf` format and Kafka Connect's converter map columns by).
//!
//! Confluent's Protobuf framing puts the *message indexes* after the schema id: a zigzag
//! varint count, then that many zigzag varint indexes into the schema file's messages
//! (nested by level); a count of 0 means the first message. The registry serves the schema
//! as `.proto` text or, as Confluent's Python serializer registers it, a base64
//! `FileDescriptorProto`: both are accepted, and so are references to other schemas and
//! the `google/protobuf/*.proto` well-known types.
//!
//! Mapping: proto3 scalars without presence decode to their default (0, "", false) like the
//! columns Flink and Kafka Connect write for them; fields with presence (messages,
//! `optional`, oneof members) that are unset are absent; enums → their value's name;
//! 64-bit integers → their decimal text; bytes → base64; `google.protobuf.Timestamp` → the
//! timestamp text of [`super::logical`]; wrappers (`google.protobuf.StringValue`, ...) → their
//! value.

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

/// Serves the schema and its references to the compiler, then the well-known types.
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
}
