//! `gap-auditor check`: audits a closed range of the past once, without the daemon.
//!
//! The daemon's due rule applies (SPEC guarantee 9: `check` never reports what `run` would
//! not), through the daemon's own ledger ([`crate::closed_range`],
//! [`crate::ledger::PartitionLedger::due`]): with a `pipeline_group`,
//! only records below its committed offsets are checked, and only `grace` after those commits
//! were read (check waits it out) — records beyond them are lag, listed as not checked — and a
//! group that cannot be read or has no commit at all gives no verdict (exit 2). Without a
//! group, `grace` runs from when a record was appended, never from its CreateTime
//! ([`appended`]): on a LogAppendTime topic records appended less than `grace` ago are
//! listed as not due yet; on a CreateTime topic only the log end check observed proves the
//! append, so check waits `grace` after it. What is checked is decided by the daemon's ledger and
//! [`Checker`]. Bounds are times (RFC 3339, resolved per partition with offsets-for-times) or
//! `offset:N`; `--from` is inclusive, `--to` exclusive (Kafka's "next offset" convention),
//! both clamped to what Kafka holds.

use crate::closed_range::{ClosedRange, DeadLetters, DueRule, NotDue};
use crate::config::{AuditConfig, Config, MatchStrategy, SinkSpec, Validated};
use crate::gap::Gap;
use crate::kafka::{client, range};
use crate::record::{Decoder, RecordMeta, Tag};
use crate::sink::{self, AnySink, Verifier};
use crate::types::{Offset, TopicPartition};
use crate::verify::Checker;
use anyhow::{Context, bail};
use appended::Appended;
use chrono::{DateTime, Utc};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset as KOffset, TopicPartitionList};
use std::collections::HashMap;
use std::str::FromStr;
use std::time::Duration;

mod appended;

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
    /// Expected records absent from the sink that the audit's dead-letter topic names
    /// (`dead_lettered`, not lost).
    pub dead_lettered: u64,
    /// Expected records read but not due yet (grace has not passed since they were
    /// appended): neither confirmed nor missing.
    pub not_due: u64,
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
    let planned = tokio::task::spawn_blocking(move || resolve_ranges(&kafka, &topics, from, to))
        .await
        .context("resolving the range")??;
    let grace_ms = i64::try_from(audit.grace.as_millis()).unwrap_or(i64::MAX);
    let (planned, commits_read_ms) = match pipeline_positions(config, audit, &planned).await? {
        Some((committed, source)) => {
            let read_ms = Utc::now().timestamp_millis();
            let planned = pipeline_ends(&source, &committed, planned)?;
            // The due rule: `grace` after the pipeline's commit was seen. Records below the
            // commits just read are due once grace has passed since.
            if !audit.grace.is_zero() {
                eprintln!(
                    "waiting grace ({}) after reading the {source}'s commits (the due rule)",
                    humantime::format_duration(audit.grace)
                );
                tokio::time::sleep(audit.grace).await;
            }
            (planned, Some(read_ms))
        }
        None => (planned, None),
    };
    let total: u64 = planned
        .iter()
        .map(|p| (p.end - p.first).max(0) as u64)
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
    // Whether one row confirms every record of its key, decided as `run` decides it.
    let semantics = crate::audit::sink_model::key_semantics(sink, audit)
        .await
        .with_context(|| format!("audits.{}", audit.name))?;
    // Due keys read by time where `run` reads them so: the same counts, at its cost.
    let time_column = crate::audit::sink_model::time_column(sink, audit).await;
    if let Some(book) = checker.book_mut() {
        book.set_semantics(semantics);
        book.set_time_column(time_column, crate::time_scan::TIME_BUCKETS);
    }
    let mut waited = false;
    let mut decide = Decide {
        kafka: &config.kafka,
        sink,
        audit,
        grace_ms,
        dead_reader: None,
    };
    // key_columns: every partition is read before any is verified — the key multiset is the
    // audit's, so a row that a record of a later partition holds is never charged as a
    // duplicate. The other strategies verify each partition as soon as it is read, so only
    // one partition's ledger is held at a time.
    let mut read = Vec::new();
    for plan in planned {
        if plan.end <= plan.first {
            report.ranges.push(plan.unread(&audit.name));
            continue;
        }
        let decoder = crate::record::decoder_for(audit)
            .with_context(|| format!("audits.{}.record", audit.name))?
            .with_key_domain(key_domain.clone());
        let kafka = config.kafka.clone();
        let tp = plan.tp.clone();
        let (first, end, observed_ms) = (plan.first, plan.end, plan.observed_ms);
        let b = bar.clone();
        let read_out = tokio::task::spawn_blocking(move || {
            read_range(&kafka, &tp, first, end, observed_ms, &decoder, keyed, &b)
        })
        .await
        .context("reading the range")??;
        let mut range = read_out.range;
        // The daemon's due rule, as `run` sets it up: the pipeline's commit as observed when
        // it was read, or, without a group, the time-only rule on the append clock.
        range.due_input(
            !audit.has_position_source(),
            commits_read_ms.map(|at| (at, plan.end)),
        );
        // Records whose append only the observed log end proves (a CreateTime topic) fall due
        // `grace` after that observation; waiting it out, as for the group's commits above,
        // gives a verdict on them instead of none.
        if commits_read_ms.is_none() && read_out.bounded_by_observation {
            let n = range.pending();
            wait_until(observed_ms.saturating_add(grace_ms), &mut waited, || {
                format!(
                    "{}: {n} records not yet due: Kafka keeps no append time on a CreateTime \
                         topic, so grace ({}) runs from the log end check observed; waiting it out",
                    plan.tp,
                    humantime::format_duration(audit.grace)
                )
            })
            .await;
        }
        report.consumed += range.consumed();
        report.expected += range.expected();
        match checker.book_mut() {
            Some(book) => book.adopt(range.ledger()),
            None => {
                // Verified as soon as read: one partition's ledger held at a time.
                let decided = decide.range(&mut checker, &mut range, report).await?;
                report
                    .ranges
                    .push(plan.checked(&audit.name, decided, audit.grace));
                continue;
            }
        }
        read.push((plan, range));
    }
    for (plan, mut range) in read {
        let decided = decide.range(&mut checker, &mut range, report).await?;
        report
            .ranges
            .push(plan.checked(&audit.name, decided, audit.grace));
    }
    bar.finish_and_clear();
    Ok(())
}

/// Sleeps until `at_ms` (unix ms), saying why once per audit.
async fn wait_until(at_ms: i64, announced: &mut bool, why: impl FnOnce() -> String) {
    let left = at_ms.saturating_sub(Utc::now().timestamp_millis());
    if left <= 0 {
        return;
    }
    if !*announced {
        eprintln!("{}", why());
        *announced = true;
    }
    tokio::time::sleep(Duration::from_millis(left.unsigned_abs())).await;
}

/// What deciding a read range needs, for every partition of one audit.
struct Decide<'a> {
    kafka: &'a crate::config::KafkaConfig,
    sink: &'a AnySink,
    audit: &'a AuditConfig,
    grace_ms: i64,
    /// The audit's dead-letter topic, read once for the whole check and then only what was
    /// appended since.
    dead_reader: Option<crate::kafka::dead_letters::CheckReader>,
}

impl Decide<'_> {
    /// Decides every record of `range` due now under the daemon's due rule
    /// ([`ClosedRange::decide`]) and adds the verdicts and gaps to the report. Returns what
    /// is not due yet.
    async fn range(
        &mut self,
        checker: &mut Checker,
        range: &mut ClosedRange,
        report: &mut Report,
    ) -> anyhow::Result<NotDue> {
        let audit = self.audit;
        let now = Utc::now().timestamp_millis();
        // With a dead-letter topic, as the daemon: it is read up to now, and only records due
        // before that reading began are decided (`kafka::dead_letters`).
        if let Some(t) = &audit.pipeline.dead_letter_topic {
            let (kafka, t, topics) = (self.kafka.clone(), t.clone(), audit.topics.clone());
            let connector = audit.pipeline.connect_connector.clone();
            let reader = self.dead_reader.take();
            let reader = tokio::task::spawn_blocking(move || {
                let mut reader = match reader {
                    Some(r) => r,
                    None => crate::kafka::dead_letters::CheckReader::new(
                        &kafka,
                        crate::kafka::dead_letters::Source {
                            topic: &t,
                            audited: &topics,
                            connector: connector.as_deref(),
                        },
                    )?,
                };
                reader.refresh()?;
                Ok::<_, anyhow::Error>(reader)
            })
            .await
            .context("reading the dead-letter topic")??;
            self.dead_reader = Some(reader);
        }
        let tp = range.tp().clone();
        let named = |run| match self.dead_reader.as_ref() {
            Some(r) => r.index().named_in(&tp, run),
            None => Vec::new(),
        };
        let dead = self.dead_reader.as_ref().map(|r| DeadLetters {
            named: &named,
            read_at_ms: r.read_at(),
        });
        let rule = DueRule::At {
            grace_ms: self.grace_ms,
        };
        let decided = range
            .decide(checker, self.sink, rule, now, dead.as_ref())
            .await
            .map_err(|e| {
                anyhow::anyhow!("audit {}: {e}: cannot decide, nothing reported", audit.name)
            })?;
        report.confirmed += decided.confirmed;
        report.lost += decided.lost;
        report.dead_lettered += decided.dead_lettered;
        report.duplicated += decided.duplicates;
        report.gaps.extend(range.take_gaps(&audit.name, Utc::now()));
        let not_due = range.not_due(self.grace_ms);
        report.not_due += not_due.records;
        Ok(not_due)
    }
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

/// One partition's range as planned: `[first, end)`, clamped to what Kafka holds and, with a
/// pipeline group, ended at its commit.
struct Planned {
    tp: TopicPartition,
    first: Offset,
    end: Offset,
    /// When the log end was observed (unix ms, once the broker had answered): every record
    /// below it was appended by then.
    observed_ms: i64,
    /// When the pipeline's commit shortened the range: the end asked for, and why.
    lag: Option<(Offset, String)>,
}

impl Planned {
    /// The report of a range with nothing to read.
    fn unread(&self, audit: &str) -> CheckedRange {
        CheckedRange {
            audit: audit.to_string(),
            topic: self.tp.topic.clone(),
            partition: self.tp.partition,
            from: self.first,
            to: self.end,
            requested_to: self.lag.as_ref().map(|(asked, _)| *asked),
            not_checked: self.lag.as_ref().map(|(_, why)| why.clone()),
        }
    }

    /// The report of a range once decided: it ends before the first record not due yet.
    fn checked(&self, audit: &str, not_due: NotDue, grace: Duration) -> CheckedRange {
        let mut r = self.unread(audit);
        let Some(at) = not_due.first else {
            return r;
        };
        r.requested_to = Some(r.requested_to.unwrap_or(self.end));
        r.to = at;
        let due_at = not_due
            .due_at_ms
            .and_then(|ms| chrono::TimeZone::timestamp_millis_opt(&Utc, ms).single())
            .map_or_else(String::new, |t| {
                format!(
                    "; the first falls due at {}",
                    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                )
            });
        let why = format!(
            "{} records not yet due: grace ({}) has not passed since they were appended{due_at}",
            not_due.records,
            humantime::format_duration(grace)
        );
        r.not_checked = Some(match r.not_checked.take() {
            Some(lag) => format!("{why}; {lag}"),
            None => why,
        });
        r
    }
}

/// Resolves the bounds to `[from, to)` per partition, clamped to `[log start, log end)`.
fn resolve_ranges(
    kafka: &crate::config::KafkaConfig,
    topics: &[String],
    from: Bound,
    to: Bound,
) -> anyhow::Result<Vec<Planned>> {
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
            // Taken after the answer: a record appended while the request was in flight is
            // below `high` too, and was appended before this.
            let observed_ms = Utc::now().timestamp_millis();
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
            out.push(Planned {
                tp,
                first,
                end,
                observed_ms,
                lag: None,
            });
        }
    }
    Ok(out)
}

/// The pipeline group's committed offsets end each range: records it has not passed are
/// lag, never loss. A group that cannot be read, or that has no commit on any partition of
/// the range (a misspelt name), gives no verdict at all. Returns the ranges and when the
/// commits were read (unix ms), from which the due rule counts `grace`.
/// The pipeline's committed position on each partition of the range, as `run` reads it (the
/// pipeline group's commits, or the Doris Routine Load job's progress), with the source in
/// words; `None` without a position source (the time-only rule).
async fn pipeline_positions(
    config: &Config,
    audit: &AuditConfig,
    ranges: &[Planned],
) -> anyhow::Result<Option<(HashMap<TopicPartition, Option<Offset>>, String)>> {
    let tps: Vec<TopicPartition> = ranges.iter().map(|p| p.tp.clone()).collect();
    if let Some(group) = &audit.pipeline_group {
        let kafka = config.kafka.clone();
        let group = group.clone();
        let source = format!("pipeline group {group:?}");
        let committed = tokio::task::spawn_blocking(move || {
            let reader = crate::kafka::PipelineReader::new(&kafka, &group)
                .with_context(|| format!("creating a reader of pipeline group {group:?}"))?;
            reader.committed(&tps).with_context(|| {
                format!(
                    "cannot read the committed offsets of pipeline group {group:?} (no DESCRIBE \
                     permission on it, or its coordinator is unavailable): check gives no verdict \
                     without them, lag is never loss"
                )
            })
        })
        .await
        .context("reading the pipeline group")??;
        return Ok(Some((committed.into_iter().collect(), source)));
    }
    let (crate::config::PipelineKind::DorisRoutineLoad, Some(url), Some(job)) = (
        &audit.pipeline.kind,
        &audit.pipeline.url,
        &audit.pipeline.job,
    ) else {
        return Ok(None);
    };
    let source = format!("Routine Load job {job:?}");
    let reader = crate::routine_load::JobReader::new(url, job, audit.sink.query_timeout)
        .with_context(|| format!("audits.{}.pipeline.url", audit.name))?;
    let row = reader.read().await;
    reader.close().await;
    let row = row.with_context(|| {
        format!("cannot read the {source}: check gives no verdict without its progress, lag is never loss")
    })?;
    // One read, as `run`'s first: a PAUSED job's shown progress may be an ALTER not yet
    // applied, so it gives no position (src/routine_load/track.rs).
    let reading = crate::routine_load::JobTrack::default().read(&row);
    let Some(topic) = reading.topic.clone() else {
        bail!(
            "the {source} names no topic (DataSourceProperties.topic): its progress cannot be tied to audit {}'s partitions",
            audit.name
        );
    };
    if !audit.topics.contains(&topic) {
        bail!(
            "the {source} reads topic {topic:?}, which audit {} does not audit (is pipeline.job the right job?)",
            audit.name
        );
    }
    let committed = tps
        .into_iter()
        .map(|tp| {
            let c = (tp.topic == topic)
                .then(|| reading.positions.get(&tp.partition).and_then(|&(c, _)| c))
                .flatten();
            (tp, c)
        })
        .collect();
    Ok(Some((committed, source)))
}

/// The range cut at the pipeline's committed positions: records past them are lag, not
/// checked (pure).
fn pipeline_ends(
    source: &str,
    committed: &HashMap<TopicPartition, Option<Offset>>,
    ranges: Vec<Planned>,
) -> anyhow::Result<Vec<Planned>> {
    if !committed.values().any(Option::is_some) {
        let hint = if source.starts_with("Routine Load") {
            "is pipeline.job spelt right? has the job committed its first task?"
        } else {
            "is pipeline_group spelt right? has the job completed its first checkpoint?"
        };
        bail!(
            "{source} has no committed offset on any partition of the range ({hint}): check \
             gives no verdict without it, lag is never loss"
        );
    }
    let planned = ranges
        .into_iter()
        .map(|p| match committed.get(&p.tp).copied().flatten() {
            Some(c) if c >= p.end => p,
            Some(c) => {
                let to = c.max(p.first);
                let why = format!(
                    "the {source} has committed {c}: records from {to} are lag, not checked"
                );
                Planned {
                    lag: Some((p.end, why)),
                    end: to,
                    ..p
                }
            }
            None => {
                let why = format!("the {source} has no commit on this partition: lag, not checked");
                Planned {
                    lag: Some((p.end, why)),
                    end: p.first,
                    ..p
                }
            }
        })
        .collect();
    Ok(planned)
}

/// A range read into a fresh ledger.
struct ReadRange {
    range: ClosedRange,
    /// Some expected record's append is proven only by the observed log end (no
    /// LogAppendTime): it falls due `grace` after that observation.
    bounded_by_observation: bool,
}

/// Reads `[first, end)` of one partition into a fresh ledger, each record seen when it was
/// appended at the latest ([`Appended`]): the clock `run` starts grace on.
#[allow(clippy::too_many_arguments)]
fn read_range(
    kafka: &crate::config::KafkaConfig,
    tp: &TopicPartition,
    first: Offset,
    end: Offset,
    observed_ms: i64,
    decoder: &Decoder,
    keyed: bool,
    bar: &ProgressBar,
) -> anyhow::Result<ReadRange> {
    let mut range_read = ClosedRange::new(tp.clone(), first, keyed);
    let mut bounded_by_observation = false;
    // Schemas not cached yet are fetched on the spot (this is a blocking-pool thread): the
    // daemon's decoding, and an error rather than a guess when the registry cannot answer.
    let runtime = tokio::runtime::Handle::current();
    let mut schema_error = None;
    range::read(kafka, "gap-auditor-check", tp, first, end, |m| {
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
        let expected = matches!(tag, Tag::Expected { .. });
        let appended = Appended::of(m.timestamp(), observed_ms);
        bounded_by_observation |= expected && matches!(appended, Appended::BeforeObserved(_));
        bar.inc(1);
        if let Err(e) = range_read.ingest(m.offset(), range::timestamp_ms(m), tag, appended.ms()) {
            schema_error = Some(e.into());
            return range::Flow::Stop;
        }
        range::Flow::Continue
    })?;
    if let Some(e) = schema_error {
        return Err(e);
    }
    Ok(ReadRange {
        range: range_read,
        bounded_by_observation,
    })
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
