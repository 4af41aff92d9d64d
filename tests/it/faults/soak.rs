//! What the long soaks (keys_total_loss, giveup_soak) share: the records they produce, the
//! daemon's figures read from /metrics and /proc, the pipeline's last checkpoint and the
//! clean-up of their topic.

use super::sample;
use crate::support::*;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset as KOffset, TopicPartitionList};
use std::time::Duration;

/// A DNS line like [`dns_line`] (9 fields, unique key `client_ip, domain, time`), but with
/// fields of a FIXED width: [`dns_line`]'s keys grow by a byte at records 1 M and 2.5 M,
/// which moves many of them into a larger allocator size class — memory growth that would
/// come from the test's numbering, not from what the daemon keeps.
pub fn line(i: usize) -> String {
    format!(
        "10.{:03}.{:03}.{:03}|host{i:010}.example.com|2024-05-01 12:{:02}:{:02}|93.184.216.34|NOERROR|A|ns1.example.com|-|8.8.8.8",
        (i >> 16) & 255,
        (i >> 8) & 255,
        i & 255,
        (i / 60) % 60,
        i % 60
    )
}

/// Sum over the partitions (0..16, every one a soak uses) of a per-partition sample of
/// `topic`; absent partitions count 0.
pub fn per_partitions(text: &str, name: &str, topic: &str) -> f64 {
    (0..16)
        .map(|p| {
            let p = p.to_string();
            sample(text, name, &[("topic", topic), ("partition", &p)]).unwrap_or(0.0)
        })
        .sum()
}

/// CPU seconds the process used (utime + stime of /proc/PID/stat, 100 ticks a second).
pub fn cpu_secs(pid: u32) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = s.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// Bytes the process passed to write(2) and friends (`wchar` of /proc/PID/io).
pub fn written_bytes(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/io")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("wchar:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Peak resident memory of the process (VmHWM of /proc/PID/status), KiB.
pub fn peak_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// The pipeline group commits `counts` (the last checkpoint).
pub fn commit_final(group: &str, topic: &str, counts: &[i64]) {
    let c: BaseConsumer = group_client(group).create().expect("pipeline consumer");
    let mut tpl = TopicPartitionList::new();
    for (p, n) in counts.iter().enumerate() {
        tpl.add_partition_offset(topic, p as i32, KOffset::Offset(*n))
            .expect("tpl");
    }
    c.assign(&tpl).expect("assign");
    commit_retrying(&c, &tpl, "final commit");
}

/// Deletes the topic (best effort): the broker would keep the millions of records.
pub async fn delete_topic(topic: &str, who: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .create()
        .expect("admin");
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    if let Err(e) = admin.delete_topics(&[topic], &opts).await {
        eprintln!("{who}: topic {topic} not deleted: {e}");
    }
}
