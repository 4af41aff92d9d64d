//! `gap-auditor check`: audits a closed range of the past once, without the daemon.
//!
//! The daemon's due rule applies (SPEC guarantee 9: `check` never reports what `run` would
//! not): with a `pipeline_group`, only records below its committed offsets are checked, and
//! only `grace` after those commits were read (check waits it out) — records beyond them are
//! lag, listed as not checked — and a group that cannot be read or has no commit at all
//! gives no verdict (exit 2). Without a group, records younger than `grace` by their Kafka
//! timestamp (or without one) are not checked. What is checked is decided by the daemon's ledger and
//! [`Checker`]. Bounds are times (RFC 3339, resolved per partition with offsets-for-times) or
//! `offset:N`; `--from` is inclusive, `--to` exclusive (Kafka's "next offset" convention),
//! both clamped to what Kafka holds.

use crate::config::{AuditConfig, Config, MatchStrategy, SinkSpec, Validated};
use crate::gap::{Gap, Offset, TopicPartition};
use crate::kafka::{client, range};
use crate::ledger::{Observed, PartitionLedger, Verdict};
use crate::record::{Decoder, RecordMeta, Tag};
use crate::sink::{self, AnySink, Verifier};
use crate::verify::Checker;
use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset as KOffset, TopicPartitionList};
use std::str::FromStr;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(10);

/// One end of the checked range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// The first offset whose record timestamp is at or after this time.
    Time(DateTime<Utc>),
    /// An offset.
    Offset(Offset),
}

impl FromStr for Bound {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(o) = s.strip_prefix("offset:") {
            return o
                .trim()
                .parse::<Offset>()
                .ok()
                .filter(|o| *o >= 0)
                .map(Bound::Offset)
                .ok_or_else(|| format!("`{s}`: offset:N needs a non-negative integer"));
        }
        DateTime::parse_from_rfc3339(s.trim())
            .map(|t| Bound::Time(t.with_timezone(&Utc)))
            .map_err(|e| format!("`{s}`: expected an RFC 3339 time such as 2024-05-01T12:00:00Z or offset:N ({e})"))
    }
}

/// What `check` found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Report {
    /// Partitions checked with their offset ranges `[from, to)`.
    pub ranges: Vec<CheckedRange>,
    /// Records read.
    pub consumed: u64,
    /// Records expected in the sink.
    pub expected: u64,
    /// Expected records found.
    pub confirmed: u64,
    /// Expected records absent.
    pub lost: u64,
    /// Extra rows.
    pub duplicated: u64,
    /// The gaps, as the daemon would report them.
    pub gaps: Vec<Gap>,
}

/// One partition's checked range.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CheckedRange {
    /// Audit name.
    pub audit: String,
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
    /// First offset (inclusive).
    pub from: Offset,
    /// End offset (exclusive) of what was checked.
    pub to: Offset,
    /// The end asked for, when the due rule checked less (`to` < `requested_to`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_to: Option<Offset>,
    /// Why the records in `[to, requested_to)` were not checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_checked: Option<String>,
}

/// Checks `[from, to)` for the named audit (or every audit).
pub async fn run(
    config: &Validated,
    audit: Option<&str>,
    from: Bound,
    to: Bound,
    progress: bool,
) -> anyhow::Result<Report> {
    let audits: Vec<(&AuditConfig, &SinkSpec)> =
        match audit {
            Some(name) => vec![config.audit(name).with_context(|| {
                format!("--audit: no audit named {name:?} in the configuration")
            })?],
            None => config.audits().collect(),
        };
    let mut report = Report::default();
    for (a, spec) in audits {
        let sink = sink::build_sink(&a.name, spec)?;
        check_audit(config.config(), a, &sink, from, to, progress, &mut report).await?;
    }
    Ok(report)
}

async fn check_audit(
    config: &Config,
    audit: &AuditConfig,
    sink: &AnySink,
    from: Bound,
    to: Bound,
    progress: bool,
    report: &mut Report,
) -> anyhow::Result<()> {
    // Keys are written in the sink columns' types, as `run` writes them (guarantee 9).
    let key_domain = match audit.matching.strategy {
        MatchStrategy::KeyColumns => sink.key_domain().await.with_context(|| {
            format!("audits.{}: reading the sink's key column types", audit.name)
        })?,
        _ => None,
    };
    let kafka = config.kafka.clone();
    let topics = audit.topics.clone();
    let ranges = tokio::task::spawn_blocking(move || resolve_ranges(&kafka, &topics, from, to))
        .await
        .context("resolving the range")??;
    let ranges = match &audit.pipeline_group {
        Some(group) => {
            let kafka = config.kafka.clone();
            let group = group.clone();
            let ends = tokio::task::spawn_blocking(move || pipeline_ends(&kafka, &group, ranges))
                .await
                .context("reading the pipeline group")??;
            // The due rule: `grace` after the pipeline's commit was seen. Records below the
            // commits just read are due once grace has passed since.
            if !audit.grace.is_zero() {
                eprintln!(
                    "waiting grace ({}) after reading the pipeline group's commits (the due rule)",
                    humantime::format_duration(audit.grace)
                );
                tokio::time::sleep(audit.grace).await;
            }
            ends
        }
        None => ranges
            .into_iter()
            .map(|(tp, f, t)| (tp, f, t, None))
            .collect(),
    };
    // Without a pipeline group (the time-only rule) a record is due `grace` after it was
    // produced, by its Kafka timestamp; with one, the commits above already waited it out.
    let grace_cutoff = match audit.pipeline_group {
        Some(_) => i64::MAX,
        None => Utc::now().timestamp_millis() - audit.grace.as_millis() as i64,
    };
    let total: u64 = ranges
        .iter()
        .map(|(_, f, t, _)| (t - f).max(0) as u64)
        .sum();
    let bar = progress_bar(total, progress);
    let keyed = matches!(
        audit.matching.strategy,
        MatchStrategy::KeyColumns | MatchStrategy::DocId
    );
    let mut checker = Checker::new(
        audit.matching.strategy,
        audit.batch_size,
        audit.max_pending.min(1_000_000),
    );
    // key_columns: every partition is read before any is verified — the key multiset is the
    // audit's, so a row that a record of a later partition holds is never charged as a
    // duplicate. The other strategies verify each partition as soon as it is read, so only
    // one partition's ledger is held at a time.
    let mut read = Vec::new();
    for (tp, first, end, lag) in ranges {
        let mut checked = CheckedRange {
            audit: audit.name.clone(),
            topic: tp.topic.clone(),
            partition: tp.partition,
            from: first,
            to: end,
            requested_to: lag.as_ref().map(|(asked, _)| *asked),
            not_checked: lag.map(|(_, why)| why),
        };
        if end <= first {
            report.ranges.push(checked);
            continue;
        }
        let decoder = crate::record::decoder_for(audit)
            .with_context(|| format!("audits.{}.record", audit.name))?
            .with_key_domain(key_domain.clone());
        let kafka = config.kafka.clone();
        let tp2 = tp.clone();
        let b = bar.clone();
        let (ledger, consumed, expected, young) = tokio::task::spawn_blocking(move || {
            read_range(&kafka, &tp2, first, end, &decoder, keyed, grace_cutoff, &b)
        })
        .await
        .context("reading the range")??;
        // Records within `grace` of now are not due yet: the range ends before the first.
        if let Some(at) = young {
            checked.requested_to = Some(checked.requested_to.unwrap_or(end));
            checked.to = at;
            checked.not_checked = Some(match checked.not_checked.take() {
                Some(why) => why,
                None => format!(
                    "records from offset {at} are younger than grace ({}): not due yet",
                    humantime::format_duration(audit.grace)
                ),
            });
        }
        report.ranges.push(checked);
        report.consumed += consumed;
        report.expected += expected;
        match checker.book_mut() {
            Some(book) => {
                book.adopt(&ledger);
                read.push((tp, end, ledger));
            }
            None => verify_range(&mut checker, sink, audit, &tp, end, ledger, report).await?,
        }
    }
    for (tp, end, ledger) in read {
        verify_range(&mut checker, sink, audit, &tp, end, ledger, report).await?;
    }
    bar.finish_and_clear();
    Ok(())
}

/// Decides every record of a read range (all of it is due: the due rule already ended the
/// range) and adds the verdicts and gaps to the report.
async fn verify_range(
    checker: &mut Checker,
    sink: &AnySink,
    audit: &AuditConfig,
    tp: &TopicPartition,
    end: Offset,
    mut ledger: PartitionLedger,
    report: &mut Report,
) -> anyhow::Result<()> {
    ledger.pipeline.observe(0, Some(end));
    let now = Utc::now().timestamp_millis();
    loop {
        let segs = ledger.due(now, 0, 1_000_000);
        if segs.is_empty() {
            break;
        }
        let obs = |_d: Duration, _ok: bool| {};
        let verdicts: Vec<Verdict> = checker.due(sink, tp, &segs, &obs).await.map_err(|e| {
            anyhow::anyhow!("audit {}: {e}: cannot decide, nothing reported", audit.name)
        })?;
        let applied = ledger.apply(&verdicts, now);
        report.confirmed += applied.confirmed;
        report.lost += applied.lost;
        report.duplicated += applied.duplicates;
    }
    for g in ledger.take_dirty_gaps() {
        let mut gap = g.to_gap(&audit.name, tp);
        gap.detected_at = Utc::now();
        report.gaps.push(gap);
    }
    Ok(())
}

fn progress_bar(total: u64, enabled: bool) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} records  {per_sec}  ETA {eta}",
    ) {
        bar.set_style(style);
    }
    bar
}

/// Resolves the bounds to `[from, to)` per partition, clamped to `[log start, log end)`.
fn resolve_ranges(
    kafka: &crate::config::KafkaConfig,
    topics: &[String],
    from: Bound,
    to: Bound,
) -> anyhow::Result<Vec<(TopicPartition, Offset, Offset)>> {
    let consumer: BaseConsumer = client::base(kafka)
        .create()
        .context("creating the Kafka client")?;
    let mut out = Vec::new();
    for topic in topics {
        let md = consumer
            .fetch_metadata(Some(topic), TIMEOUT)
            .with_context(|| format!("reading metadata of topic {topic}"))?;
        let parts: Vec<i32> = md
            .topics()
            .iter()
            .filter(|t| t.name() == topic)
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        if parts.is_empty() {
            bail!("topic {topic} has no partitions (does it exist?)");
        }
        for p in parts {
            let tp = TopicPartition::new(topic.clone(), p);
            let (low, high) = consumer
                .fetch_watermarks(topic, p, TIMEOUT)
                .with_context(|| format!("reading the watermarks of {tp}"))?;
            let resolve = |b: Bound| -> anyhow::Result<Offset> {
                Ok(match b {
                    Bound::Offset(o) => o,
                    Bound::Time(t) => {
                        let mut tpl = TopicPartitionList::new();
                        tpl.add_partition_offset(topic, p, KOffset::Offset(t.timestamp_millis()))?;
                        let r = consumer.offsets_for_times(tpl, TIMEOUT)?;
                        match r.find_partition(topic, p).map(|e| e.offset()) {
                            Some(KOffset::Offset(o)) if o >= 0 => o,
                            _ => high,
                        }
                    }
                })
            };
            let first = resolve(from)?.clamp(low, high);
            let end = resolve(to)?.clamp(low, high);
            if resolve(from)? < low {
                tracing::warn!(%tp, requested = resolve(from)?, log_start = low,
                    "Kafka no longer holds the start of the range: checking from the log start");
            }
            out.push((tp, first, end));
        }
    }
    Ok(out)
}

/// A partition's range `[first, end)` to check, and, when the due rule shortened it, the end
/// asked for and why.
type DueRange = (TopicPartition, Offset, Offset, Option<(Offset, String)>);

/// The pipeline group's committed offsets end each range: records it has not passed are
/// lag, never loss. A group that cannot be read, or that has no commit on any partition of
/// the range (a misspelt name), gives no verdict at all.
fn pipeline_ends(
    kafka: &crate::config::KafkaConfig,
    group: &str,
    ranges: Vec<(TopicPartition, Offset, Offset)>,
) -> anyhow::Result<Vec<DueRange>> {
    let reader = crate::kafka::PipelineReader::new(kafka, group)
        .with_context(|| format!("creating a reader of pipeline group {group:?}"))?;
    let tps: Vec<TopicPartition> = ranges.iter().map(|(tp, ..)| tp.clone()).collect();
    let committed = reader.committed(&tps).with_context(|| {
        format!(
            "cannot read the committed offsets of pipeline group {group:?} (no DESCRIBE              permission on it, or its coordinator is unavailable): check gives no verdict              without them, lag is never loss"
        )
    })?;
    if !committed.values().any(Option::is_some) {
        bail!(
            "pipeline group {group:?} has no committed offset on any partition of the range              (is pipeline_group spelt right? has the job completed its first checkpoint?):              check gives no verdict without it, lag is never loss"
        );
    }
    Ok(ranges
        .into_iter()
        .map(|(tp, first, end)| match committed.get(&tp).copied().flatten() {
            Some(c) if c >= end => (tp, first, end, None),
            Some(c) => {
                let to = c.max(first);
                let why = format!(
                    "the pipeline group {group:?} has committed {c}: records from {to} are lag, not checked"
                );
                (tp, first, to, Some((end, why)))
            }
            None => {
                let why = format!(
                    "the pipeline group {group:?} has no commit on this partition: lag, not checked"
                );
                (tp, first, first, Some((end, why)))
            }
        })
        .collect())
}

/// Reads `[first, end)` of one partition into a fresh ledger. Stops before the first record
/// with a timestamp after `grace_cutoff_ms` (not due yet) and returns its offset.
#[allow(clippy::too_many_arguments)]
fn read_range(
    kafka: &crate::config::KafkaConfig,
    tp: &TopicPartition,
    first: Offset,
    end: Offset,
    decoder: &Decoder,
    keyed: bool,
    grace_cutoff_ms: i64,
    bar: &ProgressBar,
) -> anyhow::Result<(PartitionLedger, u64, u64, Option<Offset>)> {
    let mut ledger = PartitionLedger::new(first, keyed);
    let (mut consumed, mut expected) = (0u64, 0u64);
    let mut young = None;
    // Schemas not cached yet are fetched on the spot (this is a blocking-pool thread): the
    // daemon's decoding, and an error rather than a guess when the registry cannot answer.
    let runtime = tokio::runtime::Handle::current();
    let mut schema_error = None;
    range::read(kafka, "gap-auditor-check", tp, first, end, |m| {
        let ts = range::timestamp_ms(m);
        // Under the time-only rule a record without a timestamp cannot be shown to be
        // older than grace: not due.
        if grace_cutoff_ms < i64::MAX && ts.is_none_or(|t| t > grace_cutoff_ms) {
            young = Some(m.offset());
            return range::Flow::Stop;
        }
        // The record's coordinates, as the daemon's tail passes them: doc_id templates are
        // built from them.
        let meta = RecordMeta {
            topic: m.topic(),
            partition: m.partition(),
            offset: m.offset(),
            key: m.key(),
        };
        let tag = match runtime.block_on(decoder.tag_resolved(m.payload(), &meta)) {
            Ok(tag) => tag,
            Err(e) => {
                schema_error = Some(anyhow::anyhow!("offset {}: {e}", m.offset()));
                return range::Flow::Stop;
            }
        };
        let observed = match tag {
            Tag::Expected { key } => {
                expected += 1;
                Observed::Expected { key }
            }
            Tag::Filtered(_) => Observed::Filtered,
            Tag::Unresolved(u) => {
                schema_error = Some(anyhow::anyhow!(
                    "offset {}: schema id {} unknown",
                    m.offset(),
                    u.schema_id
                ));
                return range::Flow::Stop;
            }
        };
        consumed += 1;
        bar.inc(1);
        ledger.ingest(m.offset(), ts, observed, 0);
        range::Flow::Continue
    })?;
    if let Some(e) = schema_error {
        return Err(e);
    }
    Ok((ledger, consumed, expected, young))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_parse() {
        assert_eq!("offset:42".parse::<Bound>(), Ok(Bound::Offset(42)));
        assert!("offset:-1".parse::<Bound>().is_err());
        assert!(matches!(
            "2024-05-01T12:00:00Z".parse::<Bound>(),
            Ok(Bound::Time(_))
        ));
        let e = "yesterday".parse::<Bound>().unwrap_err();
        assert!(e.contains("RFC 3339"), "{e}");
    }
}
