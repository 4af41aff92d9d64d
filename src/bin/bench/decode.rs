//! Decoding rate of `Decoder::tag_record` on one core.

use crate::util::{Row, decoder, dns_json, dns_line, fmt_rate, per_sec, row};
use anyhow::Result;
use gap_auditor::record::{DecodeFormat, Decoder, RecordMeta, Tag};
use std::time::{Duration, Instant};

/// Records/s of `Decoder::tag_record` on one core over pre-built payloads; runs at least `min`.
pub fn decode_rate(decoder: &Decoder, payloads: &[Vec<u8>], min: Duration) -> f64 {
    let mut n = 0u64;
    let mut expected = 0u64;
    let start = Instant::now();
    while start.elapsed() < min || n == 0 {
        for p in payloads {
            if matches!(
                decoder.tag_record(Some(p), &RecordMeta::default()),
                Tag::Expected { .. }
            ) {
                expected += 1;
            }
        }
        n += payloads.len() as u64;
    }
    let rate = per_sec(n, start.elapsed());
    assert_eq!(expected, n, "every bench payload must decode as expected");
    rate
}

/// Adds the decode-rate rows (csv keyed, csv unkeyed, json keyed) and returns the average
/// csv and json payload sizes.
pub fn rows(smoke: bool, rows: &mut Vec<Row>) -> Result<(usize, usize)> {
    let count = if smoke { 2_000 } else { 100_000 };
    let min = if smoke {
        Duration::from_millis(100)
    } else {
        Duration::from_secs(2)
    };
    let csv: Vec<Vec<u8>> = (0..count).map(|i| dns_line(i).into_bytes()).collect();
    let json: Vec<Vec<u8>> = (0..count).map(|i| dns_json(i).into_bytes()).collect();
    let avg = csv.iter().map(Vec::len).sum::<usize>() / csv.len();
    let javg = json.iter().map(Vec::len).sum::<usize>() / json.len();
    for (name, payloads, format, keyed) in [
        ("csv, key_columns (3 fields)", &csv, DecodeFormat::Csv, true),
        (
            "csv, offset_columns (no key)",
            &csv,
            DecodeFormat::Csv,
            false,
        ),
        (
            "json, key_columns (3 fields)",
            &json,
            DecodeFormat::Json,
            true,
        ),
    ] {
        let r = decode_rate(&decoder(format, keyed)?, payloads, min);
        eprintln!("decode {name}: {}", fmt_rate(r));
        rows.push(row(
            &format!("Decoder::tag, {name}, one core"),
            fmt_rate(r),
            "—",
            "—".into(),
            "—",
        ));
    }

    Ok((avg, javg))
}
