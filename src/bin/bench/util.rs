//! Shared helpers of the benchmark: payloads, decoder, result rows, RSS and formatting.

use anyhow::{Context, Result};
use gap_auditor::record::{DecodeFormat, Decoder, DecoderSpec};
use std::time::Duration;

/// Partitions of the tailing topic.
pub const PARTITIONS: i32 = 4;
/// Field names of the seed's DNS log lines.
pub use gap_auditor::commands::demo::SEED_FIELDS as FIELDS;
/// The seed's key columns.
pub const KEY: [&str; 3] = ["client_ip", "domain", "time"];

/// One row of the result table.
pub struct Row {
    pub what: String,
    pub value: String,
    pub baseline: String,
    pub ratio: String,
    pub target: String,
}

pub fn row(what: &str, value: String, baseline: &str, ratio: String, target: &str) -> Row {
    Row {
        what: what.to_string(),
        value,
        baseline: baseline.to_string(),
        ratio,
        target: target.to_string(),
    }
}

/// A seed-shaped DNS log line of about 200 bytes; `i` makes it unique.
pub fn dns_line(i: usize) -> String {
    format!(
        "10.{}.{}.{}|host{i:08}.subdomain.example-cdn-provider.com.cn|2024-05-01 12:{:02}:{:02}|93.184.216.34|NOERROR|A|ns1.authoritative-dns.example-cdn-provider.com|query-from-recursive-resolver-pool-{:04}|8.8.8.8",
        (i / 65_536) % 256,
        (i / 256) % 256,
        i % 256,
        (i / 60) % 60,
        i % 60,
        i % 10_000
    )
}

pub fn dns_json(i: usize) -> String {
    let line = dns_line(i);
    let obj: serde_json::Map<String, serde_json::Value> = FIELDS
        .iter()
        .zip(line.split('|'))
        .map(|(k, v)| (k.to_string(), serde_json::Value::from(v)))
        .collect();
    serde_json::Value::Object(obj).to_string()
}

pub fn decoder(format: DecodeFormat, keyed: bool) -> Result<Decoder> {
    let spec = DecoderSpec {
        format,
        delimiter: "|".into(),
        quote: false,
        fields: FIELDS.iter().map(|s| s.to_string()).collect(),
        field_count: matches!(format, DecodeFormat::Csv).then_some(9),
        min_fields: None,
        require: Vec::new(),
        key: keyed.then(|| KEY.iter().map(|s| s.to_string()).collect()),
        id_template: None,
        ..DecoderSpec::default()
    };
    Decoder::new(spec).context("decoder")
}

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// Resident set size in bytes (/proc/self/statm).
pub fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

pub fn per_sec(n: u64, d: Duration) -> f64 {
    n as f64 / d.as_secs_f64().max(1e-9)
}

pub fn fmt_rate(r: f64) -> String {
    if r >= 1e6 {
        format!("{:.2} M rec/s", r / 1e6)
    } else {
        format!("{:.0} k rec/s", r / 1e3)
    }
}

pub fn mib(b: u64) -> String {
    format!("{:.2} MiB", b as f64 / (1024.0 * 1024.0))
}

pub fn unique(prefix: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    format!("{prefix}_{}_{t}", std::process::id())
}

/// CPU time (user + system) of the process whose `/proc/PID/stat` is at `path` (fields 14
/// and 15, in clock ticks).
pub fn cpu_of(path: &str) -> Duration {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    // The command name (field 2) is in parentheses and may hold spaces: count after it.
    let rest = text.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // After ")": field 3 is index 0, so utime (14) is 11 and stime (15) is 12.
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_micros(ticks * 1_000_000 / hz)
}

/// CPU time (user + system) of this process so far, to the microsecond.
pub fn cpu_self() -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    Duration::from_micros(us(u.ru_utime) + us(u.ru_stime))
}

/// The pair of the median pass by `by` (tailing: rate and CPU; key forms: both rates).
pub fn median_pair(xs: &[(f64, f64)], by: impl Fn(&(f64, f64)) -> f64) -> (f64, f64) {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| by(a).total_cmp(&by(b)));
    v.get(v.len() / 2).copied().unwrap_or((0.0, 0.0))
}

/// Every pass's figure, in pass order: "0.91, 0.88, 0.95".
pub fn spread(xs: &[f64], unit: &str) -> String {
    xs.iter()
        .map(|x| format!("{x:.2}{unit}"))
        .collect::<Vec<_>>()
        .join(", ")
}
