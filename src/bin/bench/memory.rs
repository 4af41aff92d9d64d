//! Ledger memory: RSS growth for contiguous unkeyed offsets and for keyed records.

use crate::util::{Row, mib, now_ms, row, rss_bytes};
use gap_auditor::ledger::PartitionLedger;
use gap_auditor::ledger::partition::Observed;
use gap_auditor::types::Key;

/// RSS growth of one unkeyed ledger holding `n` contiguous pending offsets.
pub fn ledger_offsets_memory(n: u64) -> u64 {
    let before = rss_bytes();
    let mut ledger = PartitionLedger::new(0, false);
    let mut now = now_ms();
    for o in 0..n as i64 {
        if o % 4096 == 0 {
            now = now_ms();
        }
        ledger.ingest(o, Some(now), Observed::Expected { key: None }, now);
    }
    let grown = rss_bytes().saturating_sub(before);
    assert_eq!(ledger.pending(), n);
    drop(ledger);
    grown
}

/// RSS growth of one keyed ledger holding `n` pending records with ~40-byte keys, and the
/// key bytes themselves.
pub fn ledger_keys_memory(n: u64) -> (u64, u64) {
    let before = rss_bytes();
    let mut ledger = PartitionLedger::new(0, true);
    let mut key_bytes = 0u64;
    let mut now = now_ms();
    for o in 0..n as i64 {
        if o % 4096 == 0 {
            now = now_ms();
        }
        let i = o as usize;
        // client_ip (~11 B) + domain (~17 B) + time (~12 B) ≈ 40 bytes of key.
        let key = Key::new([
            format!("10.{}.{}.{}", (i / 65_536) % 256, (i / 256) % 256, i % 256),
            format!("h{i:08}.example.io"),
            format!("12:{:02}:{:02}.{:03}", (i / 60) % 60, i % 60, i % 1000),
        ]);
        key_bytes += key.text_len() as u64;
        ledger.ingest(o, Some(now), Observed::Expected { key: Some(key) }, now);
    }
    let grown = rss_bytes().saturating_sub(before);
    assert_eq!(ledger.pending(), n);
    drop(ledger);
    (grown, key_bytes)
}

/// Adds the two ledger memory rows. Run first, while the heap is fresh (freed memory would
/// hide growth later).
pub fn rows(offsets: u64, keys: u64, rows: &mut Vec<Row>) {
    let grown = ledger_offsets_memory(offsets);
    eprintln!("ledger, {} contiguous offsets: +{}", offsets, mib(grown));
    rows.push(row(
        &format!("Ledger RSS growth, {} contiguous unkeyed offsets", offsets),
        mib(grown),
        "—",
        "—".into(),
        "< 16 MiB",
    ));
    let (grown, key_bytes) = ledger_keys_memory(keys);
    let per = grown as f64 / keys.max(1) as f64;
    let key_per = key_bytes as f64 / keys.max(1) as f64;
    eprintln!(
        "ledger, {} keyed records: +{} ({per:.0} B/record, keys {key_per:.0} B)",
        keys,
        mib(grown)
    );
    rows.push(row(
        &format!("Ledger RSS growth, {} keyed records", keys),
        format!("{} = {per:.0} B/record", mib(grown)),
        &format!("key bytes {key_per:.0} B/record"),
        format!("{:.0} B overhead/record", per - key_per),
        "< 64 B + key bytes",
    ));
}
