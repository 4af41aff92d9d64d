//! Criterion benches of decoding and key building (`Decoder::tag`) for the seed's csv
//! format and for json. `cargo bench --bench record`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use gap_auditor::record::{DecodeFormat, Decoder, DecoderSpec, RecordMeta};
use std::hint::black_box;

use gap_auditor::commands::demo::SEED_FIELDS as FIELDS;

fn line(i: usize) -> String {
    format!(
        "10.0.{}.{}|host{i:08}.subdomain.example-cdn-provider.com.cn|2024-05-01 12:{:02}:{:02}|93.184.216.34|NOERROR|A|ns1.authoritative-dns.example-cdn-provider.com|query-from-recursive-resolver-pool-{:04}|8.8.8.8",
        (i / 256) % 256,
        i % 256,
        (i / 60) % 60,
        i % 60,
        i % 10_000
    )
}

fn json(i: usize) -> String {
    let obj: serde_json::Map<String, serde_json::Value> = FIELDS
        .iter()
        .zip(line(i).split('|'))
        .map(|(k, v)| (k.to_string(), serde_json::Value::from(v)))
        .collect();
    serde_json::Value::Object(obj).to_string()
}

fn decoder(format: DecodeFormat, keyed: bool) -> Decoder {
    Decoder::new(DecoderSpec {
        format,
        delimiter: "|".into(),
        quote: false,
        fields: FIELDS.iter().map(|s| s.to_string()).collect(),
        field_count: matches!(format, DecodeFormat::Csv).then_some(9),
        min_fields: None,
        require: Vec::new(),
        key: keyed.then(|| vec!["client_ip".into(), "domain".into(), "time".into()]),
        id_template: None,
        ..DecoderSpec::default()
    })
    .expect("bench decoder spec is valid")
}

fn tag(c: &mut Criterion) {
    let csv: Vec<Vec<u8>> = (0..1_000).map(|i| line(i).into_bytes()).collect();
    let js: Vec<Vec<u8>> = (0..1_000).map(|i| json(i).into_bytes()).collect();
    let mut g = c.benchmark_group("decoder_tag");
    g.throughput(Throughput::Elements(1_000));
    for (name, payloads, format, keyed) in [
        ("csv_key_columns", &csv, DecodeFormat::Csv, true),
        ("csv_no_key", &csv, DecodeFormat::Csv, false),
        ("json_key_columns", &js, DecodeFormat::Json, true),
    ] {
        let d = decoder(format, keyed);
        g.bench_function(name, |b| {
            b.iter(|| {
                for p in payloads {
                    black_box(d.tag_record(Some(p), &RecordMeta::default()));
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, tag);
criterion_main!(benches);
