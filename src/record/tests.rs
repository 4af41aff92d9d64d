use super::*;
use proptest::prelude::*;

mod csv;
mod doc_id;
mod json;
mod key;
mod robustness;
mod schemas;
mod spec;

/// [`Decoder::tag_record`] without Kafka coordinates, which every strategy but `doc_id`
/// ignores: the decoding tests are about values.
trait TagValue {
    fn tag_value(&self, value: Option<&[u8]>) -> Tag;
}

impl TagValue for Decoder {
    fn tag_value(&self, value: Option<&[u8]>) -> Tag {
        self.tag_record(value, &RecordMeta::default())
    }
}

const SEED_LINE: &str = "192.168.1.10|www.example.com|2024-01-01 10:00:00|93.184.216.34|NOERROR|A|ns1.example.com|-|8.8.8.8";

fn seed_fields() -> Vec<String> {
    crate::commands::demo::SEED_FIELDS
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

/// A quoting CSV decoder over `fields`, all of them the key.
fn quoted_keyed(fields: &[&str]) -> Decoder {
    Decoder::new(DecoderSpec {
        quote: true,
        fields: strings(fields),
        field_count: Some(fields.len()),
        key: Some(strings(fields)),
        ..DecoderSpec::default()
    })
    .expect("valid")
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
