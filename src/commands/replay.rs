//! `gap-auditor replay`: re-reads exactly the lost offsets from Kafka and writes them again,
//! to a topic the pipeline reads or straight into the sink. Idempotent: the sink is asked
//! first which of the records are still absent, and only those are written, so running the
//! same replay twice changes nothing.
//!
//! Sinks:
//! - MySQL/Doris by `INSERT` over the text protocol (csv records: `record.fields` name the
//!   columns, key fields map to `match.columns`, and `offset_columns` audits also write the
//!   partition/offset/topic columns);
//! - Doris by Stream Load when `sink.stream_load_url` is set ([`crate::sink::stream_load`]):
//!   the same rows as JSON lines (json records as they are), ONE load per replay under a
//!   deterministic label, so a repeated load is refused as `Label Already Exists`
//!   (reported as already in the sink);
//! - Elasticsearch by `_bulk` `create` actions with the audit's document id (`doc_id`), so
//!   an existing document answers 409 (already in the sink) and is never overwritten;
//!   documents are the JSON record as it is, or an object of `record.fields` for csv, plus
//!   the partition/offset(/topic) fields for `offset_columns`. Per-item errors name their
//!   offset.
//! - the in-process table of `gap-auditor demo`, through the same [`run`], so the demo
//!   repairs with this code and not a copy of it.

use crate::closed_range::{ClosedRange, DueRule};
use crate::config::{AuditConfig, Config, MatchStrategy, RecordFormat, SinkSpec};
use crate::kafka::range;
use crate::ledger::{OffsetRun, PartitionLedger};
use crate::record::{RecordMeta, Tag};
use crate::sink::{AnySink, Verifier};
use crate::store::Store;
use crate::types::{Offset, TopicPartition};
use crate::verify::Checker;
use anyhow::{Context, bail};
use rdkafka::consumer::Consumer;
use rdkafka::message::{Header, Headers, Message};
use std::collections::HashMap;
use std::time::Duration;

mod documents;
pub mod guard;
mod repair;
mod sink;
mod topic;

pub use guard::Refusal;
pub use repair::Request;

#[cfg(test)]
use sink::insert_statement;
use sink::to_sink;
use topic::to_topic;

const TIMEOUT: Duration = Duration::from_secs(10);

/// Header added to re-produced records: `topic/partition/offset` of the original.
pub const ORIGIN_HEADER: &str = "gap-auditor.origin";

/// Exactly which offsets to replay.
#[derive(Debug, Clone)]
pub struct Target {
    /// Audit name.
    pub audit: String,
    /// Topic and partition.
    pub tp: TopicPartition,
    /// First offset (inclusive).
    pub first: Offset,
    /// Last offset (inclusive).
    pub last: Offset,
    /// The gap being repaired, when replaying by `--gap`.
    pub gap_id: Option<String>,
}

/// Where the records go.
#[derive(Debug, Clone)]
pub enum Destination {
    /// Re-produce to this topic (the pipeline's input, or a repair topic it also reads).
    Topic(String),
    /// Write into the audit's sink directly.
    Sink,
}

/// What happened to each offset.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "result")]
pub enum Outcome {
    /// Written (or, with `--dry-run`, would be written).
    Written {
        /// The offset.
        offset: Offset,
    },
    /// Already in the sink: nothing to do.
    Present {
        /// The offset.
        offset: Offset,
    },
    /// Not expected in the sink (filter, undecodable, tombstone).
    Filtered {
        /// The offset.
        offset: Offset,
        /// Why.
        reason: String,
    },
    /// Could not be written.
    Failed {
        /// The offset.
        offset: Offset,
        /// Why.
        error: String,
    },
}

/// Replay errors that decide the exit code.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Kafka retention already deleted (some of) the records.
    #[error(
        "Kafka no longer holds offsets {first}..{log_start} of {tp} (log start offset {log_start}): the records are unrecoverable"
    )]
    Deleted {
        /// The partition.
        tp: TopicPartition,
        /// First requested offset.
        first: Offset,
        /// The partition's log start offset.
        log_start: Offset,
    },
    /// Refused before anything was read: a repair the auditor could never confirm, or a
    /// gap replayed and not confirmed yet (see [`guard`]).
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// Anything else.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// What a replay did: one outcome per offset read, plus notes on the write as a whole
/// (Stream Load's row counts and status).
#[derive(Debug, Clone, Default)]
pub struct Replayed {
    /// Per offset, in offset order.
    pub outcomes: Vec<Outcome>,
    /// Remarks on the write as a whole, for the operator.
    pub notes: Vec<String>,
    /// The sink accepted the write but not every row of it (Stream Load filtered or
    /// unselected rows): a partial result even though no offset is known to have failed.
    pub partial: bool,
}

impl Outcome {
    /// The offset this outcome is about.
    pub fn offset(&self) -> Offset {
        match self {
            Outcome::Written { offset }
            | Outcome::Present { offset }
            | Outcome::Filtered { offset, .. }
            | Outcome::Failed { offset, .. } => *offset,
        }
    }

    /// The outcome in words, as `gap-auditor replay` prints it and the gap page shows it
    /// (`test-0 offset 2: would write`).
    pub fn line(&self, tp: &TopicPartition, dry_run: bool) -> String {
        let at = format!("{}-{} offset {}", tp.topic, tp.partition, self.offset());
        match self {
            Outcome::Written { .. } => format!("{at}: {}", verb(dry_run)),
            Outcome::Present { .. } => format!("{at}: already in the sink, skipped"),
            Outcome::Filtered { reason, .. } => {
                format!("{at}: not expected in the sink ({reason}), skipped")
            }
            Outcome::Failed { error, .. } => format!("{at}: FAILED: {error}"),
        }
    }
}

/// What a replay does with a missing record, in words.
fn verb(dry_run: bool) -> &'static str {
    if dry_run { "would write" } else { "written" }
}

impl Replayed {
    /// The last line `gap-auditor replay` prints (and the gap page shows).
    pub fn summary(&self, dry_run: bool) -> String {
        let (written, _, _, failed) = self.counts();
        format!("{written} record(s) {}, {failed} failed", verb(dry_run))
    }
}

/// One record read back from Kafka.
struct Record {
    offset: Offset,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    timestamp: Option<i64>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

/// Runs `req` against `sink`: refuses what could never be confirmed (or a gap replayed and
/// not confirmed yet, without `force`), replays the target, marks and records it in `store`
/// ([`repair::repair`]). Returns one outcome per offset read. `sink` is the audit's own
/// ([`crate::app::build_sink`]: `gap-auditor replay`, the gap page's dry run) or the demo's
/// in-process table; every caller comes through here, so each records a replay the same way.
pub async fn run(
    config: &Config,
    store: &crate::store::Store,
    req: &Request,
    sink: &AnySink,
) -> Result<Replayed, ReplayError> {
    let audit = config
        .audit(&req.target.audit)
        .with_context(|| format!("no audit named {:?} in the configuration", req.target.audit))?;
    let spec = audit
        .validate(&format!("audits.{}", audit.name))
        .context("invalid configuration")?;
    repair::repair(config, &spec, store, req, sink).await
}

/// [`run`] once the audit's sink spec is validated: `sink` is built from `spec`, or the
/// demo's table.
async fn replay(
    config: &Config,
    spec: &SinkSpec,
    store: &crate::store::Store,
    target: &Target,
    dest: &Destination,
    dry_run: bool,
    sink: &AnySink,
) -> Result<Replayed, ReplayError> {
    let audit = config
        .audit(&target.audit)
        .with_context(|| format!("no audit named {:?} in the configuration", target.audit))?;
    if let Destination::Sink = dest {
        sink_supported(audit, spec)?;
    }
    let kafka = config.kafka.clone();
    let t = target.clone();
    let records = tokio::task::spawn_blocking(move || read_offsets(&kafka, &t))
        .await
        .context("reading from Kafka")??;
    // Keys are written in the sink columns' types, as `run` writes them (guarantee 9).
    let key_domain = match audit.matching.strategy {
        MatchStrategy::KeyColumns => sink
            .key_domain()
            .await
            .context("reading the sink's key column types")?,
        _ => None,
    };
    let decoder = crate::record::decoder_for(audit)
        .with_context(|| format!("audits.{}.record", audit.name))?
        .with_key_domain(key_domain);
    // Whether one row confirms every record of its key, decided as `run` decides it; under
    // presence the sink is written with an upsert.
    let semantics = crate::audit::sink_model::key_semantics(sink, audit)
        .await
        .with_context(|| format!("audits.{}", audit.name))?;

    // Which expected records are still absent from the sink?
    let keyed = matches!(
        audit.matching.strategy,
        MatchStrategy::KeyColumns | MatchStrategy::DocId
    );
    let mut range = ClosedRange::new(target.tp.clone(), target.first, keyed);
    let mut outcomes = Vec::new();
    let mut ids: HashMap<Offset, String> = HashMap::new();
    for r in &records {
        let meta = RecordMeta {
            topic: &target.tp.topic,
            partition: target.tp.partition,
            offset: r.offset,
            key: r.key.as_deref(),
        };
        // The daemon's decoding, schema fetched when not cached (a registry that cannot
        // give it fails the replay: it never guesses).
        let tag = decoder
            .tag_resolved(r.value.as_deref(), &meta)
            .await
            .with_context(|| format!("offset {}: the record's schema", r.offset))?;
        if audit.matching.strategy == MatchStrategy::DocId
            && let Tag::Expected { key: Some(key) } = &tag
            && let Some(id) = key.first()
        {
            ids.insert(r.offset, id.to_string());
        }
        // tag_resolved never leaves a record unresolved; should it, nothing is guessed.
        if let Some(reason) = range
            .ingest(r.offset, r.timestamp, tag, 0)
            .map_err(anyhow::Error::from)?
        {
            outcomes.push(Outcome::Filtered {
                offset: r.offset,
                reason: reason.as_str().to_string(),
            });
        }
    }
    // Room for every claim loaded and every record read: the book must forget none here.
    let mut checker = Checker::new(
        audit.matching.strategy,
        audit.batch_size,
        records.len().saturating_mul(2) + 1,
    );
    if let Some(book) = checker.book_mut() {
        book.set_semantics(semantics);
    }
    if let Some(book) = checker.book_mut() {
        // The daemon's claims on these keys' rows (records it confirmed), so a shared key's
        // row that another record holds is not taken for the missing one's (SPEC guarantee
        // 9: replay decides as run does).
        let claims = claims_outside(store, &audit.name, target, range.ledger())
            .context("reading the key book from the store")?;
        book.load(claims);
        book.adopt(range.ledger());
    }
    // Every record read is due: the offsets asked for are decided as of now, as `run` and
    // `check` decide (one implementation, `closed_range`).
    let now_ms = chrono::Utc::now().timestamp_millis();
    let decided = range
        .decide(&mut checker, sink, DueRule::Everything, now_ms, None)
        .await
        .map_err(|e| anyhow::anyhow!("cannot ask the sink which records are missing: {e}"))?;
    for r in &decided.present {
        outcomes.extend((r.first..=r.last).map(|offset| Outcome::Present { offset }));
    }
    let missing: Vec<&Record> = records
        .iter()
        .filter(|r| decided.absent.iter().any(|a| a.contains(r.offset)))
        .collect();

    let mut report = Replayed::default();
    if dry_run {
        outcomes.extend(
            missing
                .iter()
                .map(|r| Outcome::Written { offset: r.offset }),
        );
    } else {
        match dest {
            Destination::Topic(topic) => {
                outcomes.extend(to_topic(config, target, topic, &missing).await?)
            }
            Destination::Sink => {
                let sink = (sink, spec);
                let written = to_sink(
                    audit,
                    sink,
                    &decoder,
                    (target, semantics),
                    &missing,
                    &ids,
                    &mut report,
                );
                outcomes.extend(written.await)
            }
        }
    }
    outcomes.sort_by_key(|o| match o {
        Outcome::Written { offset }
        | Outcome::Present { offset }
        | Outcome::Filtered { offset, .. }
        | Outcome::Failed { offset, .. } => *offset,
    });
    report.outcomes = outcomes;
    Ok(report)
}

/// Whether `--to-sink` can write this audit's records into its sink (`spec`).
fn sink_supported(audit: &AuditConfig, spec: &SinkSpec) -> anyhow::Result<()> {
    let format = audit.record.format;
    match spec {
        SinkSpec::Sql(_) if format == RecordFormat::Csv => Ok(()),
        SinkSpec::Sql(sql) if sql.stream_load.is_some() && format == RecordFormat::Json => Ok(()),
        SinkSpec::Sql(_) => bail!(
            "--to-sink writes csv records (record.fields name the columns); audit {} uses {:?}: use --to-topic",
            audit.name,
            audit.record.format
        ),
        SinkSpec::Elasticsearch(_)
            if matches!(format, RecordFormat::Avro | RecordFormat::Protobuf) =>
        {
            bail!(
                "--to-sink does not write {} records (the pipeline's own mapping decides their documents); audit {}: use --to-topic, which re-produces the original bytes",
                audit.record.format,
                audit.name
            )
        }
        SinkSpec::Elasticsearch(_) if format == RecordFormat::Raw => bail!(
            "--to-sink for Elasticsearch writes csv or json records; audit {} uses raw: use --to-topic",
            audit.name
        ),
        SinkSpec::Elasticsearch(_) => Ok(()),
    }
}

/// Reads exactly `[first, last]` with an assigned, group-less consumer. Refuses when Kafka
/// retention already deleted the start of the range.
fn read_offsets(
    kafka: &crate::config::KafkaConfig,
    t: &Target,
) -> Result<Vec<Record>, ReplayError> {
    let consumer =
        range::consumer(kafka, "gap-auditor-replay").context("creating the Kafka consumer")?;
    let (low, high) = consumer
        .fetch_watermarks(&t.tp.topic, t.tp.partition, TIMEOUT)
        .with_context(|| format!("reading the watermarks of {}", t.tp))?;
    if t.first < low {
        return Err(ReplayError::Deleted {
            tp: t.tp.clone(),
            first: t.first,
            log_start: low,
        });
    }
    if t.first >= high {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    let end = t.last.saturating_add(1).min(high);
    range::read(kafka, "gap-auditor-replay", &t.tp, t.first, end, |m| {
        let headers = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|Header { key, value }| (key.to_string(), value.map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default();
        out.push(Record {
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().map(<[u8]>::to_vec),
            timestamp: range::timestamp_ms(m),
            headers,
        });
        range::Flow::Continue
    })
    .map_err(anyhow::Error::from)?;
    Ok(out)
}

/// Rows of the range's keys that records OUTSIDE the range hold, as the daemon stored them:
/// its confirmed counts per key, less the range's own records it confirmed (decided below
/// its settled offset and not missing) — those rows are the ones replay looks for.
fn claims_outside(
    store: &crate::store::Store,
    audit: &str,
    target: &Target,
    ledger: &PartitionLedger,
) -> Result<Vec<(crate::types::Key, u64)>, crate::store::StoreError> {
    use std::collections::BTreeMap;
    // Another partition's unreadable state is no reason to refuse this one's replay; this
    // partition's is (the daemon's claims on its keys would be guessed).
    let read = store.load_progress_checked(audit)?;
    let mine = |topic: &str, partition: i32| {
        topic == target.tp.topic.as_str() && partition == target.tp.partition
    };
    if let Some(p) = read.problems.iter().find(|p| mine(&p.topic, p.partition)) {
        return Err(crate::store::StoreError::Corrupt {
            path: store.path().to_path_buf(),
            what: format!(
                "progress of {audit}/{}-{}: {}",
                p.topic, p.partition, p.what
            ),
        });
    }
    let progress = read.rows.into_iter().find(|p| mine(&p.topic, p.partition));
    let (settled, missing) = match progress {
        Some(p) => {
            // Item by item, as the daemon reads it: an item that is JSON but no ledger item
            // is this partition's unreadable state too. Read whole, it emptied the ledger,
            // and the range's missing records counted as confirmed by the daemon.
            let (snap, bad) = crate::ledger::Snapshot::from_stored(&p.ledger);
            if let Some(what) = bad.first() {
                return Err(crate::store::StoreError::Corrupt {
                    path: store.path().to_path_buf(),
                    what: format!(
                        "progress of {audit}/{}-{}: {what}",
                        target.tp.topic, target.tp.partition
                    ),
                });
            }
            let runs: Vec<OffsetRun> = snap.missing.iter().map(|m| m.run).collect();
            (p.settled, runs)
        }
        None => (0, Vec::new()),
    };
    let mut inside: BTreeMap<crate::types::Key, u64> = BTreeMap::new();
    for seg in ledger.pending_segments() {
        for (i, k) in seg.keys.iter().enumerate() {
            let o = seg.run.first + i as Offset;
            let confirmed_by_daemon = o < settled && !missing.iter().any(|r| r.contains(o));
            let n = inside.entry(k.clone()).or_default();
            *n += u64::from(confirmed_by_daemon);
        }
    }
    let keys: Vec<crate::types::Key> = inside.keys().cloned().collect();
    let packed: Vec<Vec<u8>> = keys.iter().map(|k| k.as_bytes().to_vec()).collect();
    let stored = store.key_confirmed(audit, &packed)?;
    Ok(keys
        .into_iter()
        .zip(stored)
        .map(|(k, n)| {
            let own = inside.get(&k).copied().unwrap_or(0);
            (k, n.saturating_sub(own))
        })
        .collect())
}

/// Resolves `--gap ID` from the store.
pub fn target_of_gap(store: &Store, id: &str) -> anyhow::Result<Target> {
    let g = store
        .get_gap(id)?
        .with_context(|| format!("no gap with id {id:?} (see `gap-auditor gaps --state all`)"))?;
    // A gap of an earlier log of its partition (truncated or recreated since, see
    // docs/SEMANTICS.md): its offsets now name other records, which must not be written as
    // its repair. The partition's epoch as stored with its progress; unreadable: unknown.
    let gap_epoch = crate::gap::Gap::epoch_of_id(&g.id);
    let log_epoch = store
        .load_progress_checked(&g.audit)
        .ok()
        .and_then(|read| {
            read.rows
                .into_iter()
                .find(|p| p.topic == g.topic && p.partition == g.partition)
        })
        .and_then(|p| p.ledger.get("epoch").and_then(serde_json::Value::as_u64))
        .unwrap_or(0);
    if log_epoch > u64::from(gap_epoch) {
        anyhow::bail!(
            "gap {id} was found on an earlier log of {}-{}: the log was truncated or recreated \
             under the auditor since (its epoch is {log_epoch}, the gap's {gap_epoch}), so \
             offsets {}..={} now name other records; its own records are gone and cannot be \
             replayed (`--offsets` replays the current log's records at those offsets)",
            g.topic,
            g.partition,
            g.first_offset,
            g.last_offset
        );
    }
    Ok(Target {
        audit: g.audit,
        tp: TopicPartition::new(g.topic, g.partition),
        first: g.first_offset,
        last: g.last_offset,
        gap_id: Some(g.id),
    })
}

/// Parses `--offsets A-B` (inclusive).
pub fn parse_offsets(s: &str) -> Result<(Offset, Offset), String> {
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    let a: Offset = a
        .trim()
        .parse()
        .map_err(|_| format!("`{s}`: expected A-B, e.g. 2-3"))?;
    let b: Offset = b
        .trim()
        .parse()
        .map_err(|_| format!("`{s}`: expected A-B, e.g. 2-3"))?;
    if a < 0 || b < a {
        return Err(format!("`{s}`: need 0 <= A <= B"));
    }
    Ok((a, b))
}

#[cfg(test)]
mod tests;
