//! The seed records (DNS log lines like the pipeline's) and a stored gap.

#![allow(dead_code)]

use gap_auditor::gap::{Gap, GapState};

/// A seed-like DNS log line (9 pipe-separated fields); `i` makes it unique.
pub fn dns_line(i: usize) -> String {
    format!(
        "10.0.{}.{}|host{i}.example.com|2024-05-01 12:{:02}:{:02}|93.184.216.34|NOERROR|A|ns1.example.com|-|8.8.8.8",
        i / 250,
        i % 250,
        (i / 60) % 60,
        i % 60
    )
}

/// A seed-shaped line with the given key values (`client_ip|domain|time|...`).
pub fn seed_line(ip: &str, domain: &str, time: &str) -> String {
    format!("{ip}|{domain}|{time}|1.1.1.1|NOERROR|A|-|-|8.8.8.8")
}

/// [`dns_line`] for each of `range`.
pub fn dns_lines(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(dns_line).collect()
}

/// An open gap of `[first, last]` on partition 0 of `topic`, as the daemon would store it,
/// for tests of the commands that read the store (`gaps`, `ack`, `replay`).
pub fn open_gap(audit: &str, topic: &str, first: i64, last: i64) -> Gap {
    Gap {
        id: Gap::make_id(audit, topic, 0, first),
        audit: audit.into(),
        topic: topic.into(),
        partition: 0,
        first_offset: first,
        last_offset: last,
        missing_records: (last - first + 1) as u64,
        size_known: true,
        first_timestamp: None,
        last_timestamp: None,
        detected_at: chrono::Utc::now(),
        state: GapState::Open,
        unrecoverable_at: None,
        ack_reason: None,
        cause: Default::default(),
        pipeline_commit_from: None,
        pipeline_commit_to: None,
        pipeline_commit_at: None,
        evidence: None,
        shared_key: false,
        replayed_at: None,
    }
}
