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
//! - the in-process table of `gap-auditor demo`, through [`run_with`], so the demo repairs
//!   with this code and not a copy of it.

use crate::config::{AuditConfig, Config, MatchStrategy, RecordFormat, SinkKind};
use crate::gap::{Offset, TopicPartition};
use crate::kafka::{client, range};
use crate::ledger::{Observed, OffsetRun, PartitionLedger, Verdict, runs};
use crate::record::RecordMeta;
use crate::record::{Decoder, Tag};
use crate::sink::elasticsearch::{BulkCreate, ElasticsearchSink};
use crate::sink::memory::MemorySink;
use crate::sink::sql;
use crate::sink::stream_load::{self, StreamLoad};
use crate::sink::tls::TlsSettings;
use crate::sink::{self, AnySink};
use crate::store::Store;
use crate::verify::Checker;
use anyhow::{Context, bail};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::time::Duration;

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

/// Bulk requests carry at most this many documents.
const BULK_DOCS: usize = 500;

/// One record read back from Kafka.
struct Record {
    offset: Offset,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    timestamp: Option<i64>,
    headers: Vec<(String, Option<Vec<u8>>)>,
}

/// Replays `target` to `dest`. Returns one outcome per offset read.
pub async fn run(
    config: &Config,
    store: &crate::store::Store,
    target: &Target,
    dest: &Destination,
    dry_run: bool,
) -> Result<Replayed, ReplayError> {
    let audit = config
        .audit(&target.audit)
        .with_context(|| format!("no audit named {:?} in the configuration", target.audit))?;
    let sink = sink::build_sink(audit)?;
    run_with(config, store, target, dest, dry_run, &sink).await
}

/// Like [`run`], against a sink the caller built (the demo's in-process table).
pub async fn run_with(
    config: &Config,
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
        sink_supported(audit)?;
    }
    let kafka = config.kafka.clone();
    let t = target.clone();
    let records = tokio::task::spawn_blocking(move || read_offsets(&kafka, &t))
        .await
        .context("reading from Kafka")??;
    let decoder = crate::record::decoder_for(audit)
        .with_context(|| format!("audits.{}.record", audit.name))?;

    // Which expected records are still absent from the sink?
    let keyed = matches!(
        audit.matching.strategy,
        MatchStrategy::KeyColumns | MatchStrategy::DocId
    );
    let mut ledger = PartitionLedger::new(target.first, keyed);
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
        match tag {
            // tag_resolved never leaves a record unresolved; should it, nothing is guessed.
            Tag::Unresolved(u) => {
                return Err(anyhow::anyhow!(
                    "offset {}: schema id {} unknown",
                    r.offset,
                    u.schema_id
                )
                .into());
            }
            Tag::Expected { key } => {
                if audit.matching.strategy == MatchStrategy::DocId
                    && let Some(id) = key.as_ref().and_then(|k| k.first())
                {
                    ids.insert(r.offset, id.to_string());
                }
                ledger.ingest(r.offset, r.timestamp, Observed::Expected { key }, 0);
            }
            Tag::Filtered(reason) => outcomes.push(Outcome::Filtered {
                offset: r.offset,
                reason: reason.as_str().to_string(),
            }),
        }
    }
    ledger.pipeline.observe(0, Some(target.last + 1));
    let segs = ledger.due(i64::MAX / 2, 0, u64::MAX);
    let obs = |_d: Duration, _ok: bool| {};
    // Room for every claim loaded and every record read: the book must forget none here.
    let mut checker = Checker::new(
        audit.matching.strategy,
        audit.batch_size,
        records.len().saturating_mul(2) + 1,
    );
    if let Some(book) = checker.book_mut() {
        // The daemon's claims on these keys' rows (records it confirmed), so a shared key's
        // row that another record holds is not taken for the missing one's (SPEC guarantee
        // 9: replay decides as run does).
        let claims = claims_outside(store, &audit.name, target, &ledger)
            .context("reading the key book from the store")?;
        book.load(claims);
        book.adopt(&ledger);
    }
    let verdicts: Vec<Verdict> = checker
        .due(sink, &target.tp, &segs, &obs)
        .await
        .map_err(|e| anyhow::anyhow!("cannot ask the sink which records are missing: {e}"))?;
    let mut absent: Vec<OffsetRun> = Vec::new();
    for (seg, v) in segs.iter().zip(&verdicts) {
        if let Verdict::Known { present, .. } = v {
            for r in present {
                outcomes.extend((r.first..=r.last).map(|offset| Outcome::Present { offset }));
            }
            absent.extend(runs::subtract(seg.run, present));
        }
    }
    let missing: Vec<&Record> = records
        .iter()
        .filter(|r| absent.iter().any(|a| a.contains(r.offset)))
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
                let written = to_sink(audit, sink, &decoder, target, &missing, &ids, &mut report);
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

fn sink_supported(audit: &AuditConfig) -> anyhow::Result<()> {
    match audit.sink.kind {
        SinkKind::Doris | SinkKind::Mysql if audit.record.format == RecordFormat::Csv => Ok(()),
        SinkKind::Doris
            if audit.sink.stream_load_url.is_some()
                && audit.record.format == RecordFormat::Json =>
        {
            Ok(())
        }
        SinkKind::Doris | SinkKind::Mysql => bail!(
            "--to-sink writes csv records (record.fields name the columns); audit {} uses {:?}: use --to-topic",
            audit.name,
            audit.record.format
        ),
        SinkKind::Elasticsearch
            if matches!(
                audit.record.format,
                RecordFormat::Avro | RecordFormat::Protobuf
            ) =>
        {
            bail!(
                "--to-sink does not write {} records (the pipeline's own mapping decides their documents); audit {}: use --to-topic, which re-produces the original bytes",
                audit.record.format,
                audit.name
            )
        }
        SinkKind::Elasticsearch if audit.record.format == RecordFormat::Raw => bail!(
            "--to-sink for Elasticsearch writes csv or json records; audit {} uses raw: use --to-topic",
            audit.name
        ),
        SinkKind::Elasticsearch => Ok(()),
    }
}

/// Reads exactly `[first, last]` with an assigned, group-less consumer. Refuses when Kafka
/// retention already deleted the start of the range.
fn read_offsets(
    kafka: &crate::config::KafkaConfig,
    t: &Target,
) -> Result<Vec<Record>, ReplayError> {
    let mut cfg = client::base(kafka);
    cfg.set("group.id", "gap-auditor-replay")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", kafka.isolation_level.as_librdkafka())
        .set("auto.offset.reset", "error")
        .set("enable.partition.eof", "true");
    let consumer: BaseConsumer = cfg.create().context("creating the Kafka consumer")?;
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

/// Re-produces key, value, headers and timestamp, plus the origin header, with an
/// idempotent producer.
async fn to_topic(
    config: &Config,
    target: &Target,
    topic: &str,
    records: &[&Record],
) -> anyhow::Result<Vec<Outcome>> {
    let producer: FutureProducer = client::base(&config.kafka)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .create()
        .context("creating the producer")?;
    let mut out = Vec::new();
    for r in records {
        let origin = format!("{}/{}/{}", target.tp.topic, target.tp.partition, r.offset);
        let mut headers = OwnedHeaders::new();
        for (k, v) in &r.headers {
            headers = headers.insert(Header {
                key: k,
                value: v.as_deref(),
            });
        }
        headers = headers.insert(Header {
            key: ORIGIN_HEADER,
            value: Some(origin.as_bytes()),
        });
        let mut rec = FutureRecord::<[u8], [u8]>::to(topic).headers(headers);
        if let Some(k) = &r.key {
            rec = rec.key(k.as_slice());
        }
        if let Some(v) = &r.value {
            rec = rec.payload(v.as_slice());
        }
        if let Some(ts) = r.timestamp {
            rec = rec.timestamp(ts);
        }
        out.push(match producer.send(rec, TIMEOUT).await {
            Ok(_) => Outcome::Written { offset: r.offset },
            Err((e, _)) => Outcome::Failed {
                offset: r.offset,
                error: e.to_string(),
            },
        });
    }
    Ok(out)
}

fn all_failed(records: &[&Record], error: &str) -> Vec<Outcome> {
    records
        .iter()
        .map(|r| Outcome::Failed {
            offset: r.offset,
            error: error.to_string(),
        })
        .collect()
}

/// Writes the records into the audit's sink: Elasticsearch `_bulk`, Doris Stream Load, or
/// SQL `INSERT`s.
async fn to_sink(
    audit: &AuditConfig,
    sink: &AnySink,
    decoder: &Decoder,
    target: &Target,
    records: &[&Record],
    ids: &HashMap<Offset, String>,
    report: &mut Replayed,
) -> Vec<Outcome> {
    if records.is_empty() {
        return Vec::new();
    }
    match sink {
        AnySink::Elasticsearch(es) => to_elasticsearch(audit, es, target, records, ids).await,
        AnySink::Mysql(_) if audit.sink.stream_load_url.is_some() => {
            to_stream_load(audit, target, records, report).await
        }
        AnySink::Mysql(_) => to_sql(audit, sink, target, records).await,
        AnySink::Memory(table) => to_memory(audit, table, decoder, target, records, ids),
    }
}

/// Adds the records' rows to the in-process table, as the audit's strategy finds them: by
/// offset, by key, or by document id.
fn to_memory(
    audit: &AuditConfig,
    table: &MemorySink,
    decoder: &Decoder,
    target: &Target,
    records: &[&Record],
    ids: &HashMap<Offset, String>,
) -> Vec<Outcome> {
    let tp = &target.tp;
    records
        .iter()
        .map(|r| {
            let offset = r.offset;
            match audit.matching.strategy {
                MatchStrategy::OffsetColumns => {
                    table.insert_offset(&tp.topic, tp.partition, offset)
                }
                MatchStrategy::DocId => match ids.get(&offset) {
                    Some(id) => table.insert_id(id),
                    None => {
                        let error = "no document id".to_string();
                        return Outcome::Failed { offset, error };
                    }
                },
                MatchStrategy::KeyColumns => {
                    let meta = RecordMeta {
                        topic: &tp.topic,
                        partition: tp.partition,
                        offset,
                        key: r.key.as_deref(),
                    };
                    match decoder.tag_record(r.value.as_deref(), &meta) {
                        Tag::Expected { key: Some(k) } => table.insert_key(&k),
                        _ => {
                            let error = "no match key".to_string();
                            return Outcome::Failed { offset, error };
                        }
                    }
                }
            }
            Outcome::Written { offset }
        })
        .collect()
}

/// Rows of the range's keys that records OUTSIDE the range hold, as the daemon stored them:
/// its confirmed counts per key, less the range's own records it confirmed (decided below
/// its settled offset and not missing) — those rows are the ones replay looks for.
fn claims_outside(
    store: &crate::store::Store,
    audit: &str,
    target: &Target,
    ledger: &PartitionLedger,
) -> Result<Vec<(crate::record::Key, u64)>, crate::store::StoreError> {
    use std::collections::BTreeMap;
    let progress = store
        .load_progress(audit)?
        .into_iter()
        .find(|p| p.topic == target.tp.topic && p.partition == target.tp.partition);
    let (settled, missing) = match progress {
        Some(p) => {
            let snap: crate::ledger::Snapshot =
                serde_json::from_value(p.ledger).unwrap_or_default();
            let runs: Vec<OffsetRun> = snap.missing.iter().map(|m| m.run).collect();
            (p.settled, runs)
        }
        None => (0, Vec::new()),
    };
    let mut inside: BTreeMap<crate::record::Key, u64> = BTreeMap::new();
    for seg in ledger.pending_segments() {
        for (i, k) in seg.keys.iter().enumerate() {
            let o = seg.run.first + i as Offset;
            let confirmed_by_daemon = o < settled && !missing.iter().any(|r| r.contains(o));
            let n = inside.entry(k.clone()).or_default();
            *n += u64::from(confirmed_by_daemon);
        }
    }
    let keys: Vec<crate::record::Key> = inside.keys().cloned().collect();
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

/// `_bulk` `create` actions, [`BULK_DOCS`] per request; the document id is the audit's
/// (`doc_id`), else the server picks one.
async fn to_elasticsearch(
    audit: &AuditConfig,
    es: &ElasticsearchSink,
    target: &Target,
    records: &[&Record],
    ids: &HashMap<Offset, String>,
) -> Vec<Outcome> {
    let mut out = Vec::new();
    let mut batch: Vec<(Offset, (Option<String>, Value))> = Vec::new();
    for r in records {
        match document(audit, target, r) {
            Err(error) => out.push(Outcome::Failed {
                offset: r.offset,
                error,
            }),
            Ok(doc) => batch.push((r.offset, (ids.get(&r.offset).cloned(), Value::Object(doc)))),
        }
    }
    for chunk in batch.chunks(BULK_DOCS) {
        let docs: Vec<(Option<String>, Value)> = chunk.iter().map(|(_, d)| d.clone()).collect();
        match es.bulk_create(&docs).await {
            Err(e) => out.extend(chunk.iter().map(|(offset, _)| Outcome::Failed {
                offset: *offset,
                error: e.to_string(),
            })),
            Ok(items) => {
                for ((offset, _), item) in chunk.iter().zip(items) {
                    let offset = *offset;
                    out.push(match item {
                        BulkCreate::Created => Outcome::Written { offset },
                        BulkCreate::Exists => Outcome::Present { offset },
                        BulkCreate::Failed(error) => Outcome::Failed { offset, error },
                    });
                }
            }
        }
    }
    out
}

/// ONE Stream Load of all the records as JSON lines, under a label derived from the audit,
/// partition and offsets.
async fn to_stream_load(
    audit: &AuditConfig,
    target: &Target,
    records: &[&Record],
    report: &mut Replayed,
) -> Vec<Outcome> {
    let mut out = Vec::new();
    let mut body = Vec::new();
    let mut loaded: Vec<Offset> = Vec::new();
    for r in records {
        match document(audit, target, r) {
            Err(error) => out.push(Outcome::Failed {
                offset: r.offset,
                error,
            }),
            Ok(doc) => {
                body.extend(Value::Object(doc).to_string().into_bytes());
                body.push(b'\n');
                loaded.push(r.offset);
            }
        }
    }
    let (Some(&first), Some(&last)) = (loaded.first(), loaded.last()) else {
        return out;
    };
    let per_offset =
        |f: &dyn Fn(Offset) -> Outcome| loaded.iter().map(|o| f(*o)).collect::<Vec<_>>();
    let loader = match stream_loader(audit) {
        Ok(l) => l,
        Err(e) => {
            out.extend(per_offset(&|offset| Outcome::Failed {
                offset,
                error: e.clone(),
            }));
            return out;
        }
    };
    let label = stream_load::label(
        &audit.name,
        &target.tp.topic,
        target.tp.partition,
        first,
        last,
        loaded.len(),
    );
    let n = loaded.len() as u64;
    match loader.load(&label, body).await {
        Err(e) => out.extend(per_offset(&|offset| Outcome::Failed {
            offset,
            error: e.clone(),
        })),
        Ok(res) => {
            let counts = format!(
                "{} loaded, {} filtered, {} unselected of {} sent",
                res.number_loaded_rows, res.number_filtered_rows, res.number_unselected_rows, n
            );
            let error_url = res
                .error_url
                .as_deref()
                .map(|u| format!(" (rejected rows: {u})"))
                .unwrap_or_default();
            match res.status.as_str() {
                "Success" | "Publish Timeout" => {
                    report.notes.push(format!(
                        "stream load {label}: {}: {counts}{error_url}{}",
                        res.status,
                        if res.status == "Publish Timeout" {
                            " (committed; the rows become visible once published)"
                        } else {
                            ""
                        }
                    ));
                    if res.number_filtered_rows > 0
                        || res.number_unselected_rows > 0
                        || res.number_loaded_rows < n
                    {
                        report.partial = true;
                    }
                    out.extend(per_offset(&|offset| Outcome::Written { offset }));
                }
                "Label Already Exists" => {
                    report.notes.push(format!(
                        "stream load {label}: Label Already Exists (existing load {}): these \
                         records were loaded by an earlier replay; nothing written",
                        res.existing_job_status.as_deref().unwrap_or("?")
                    ));
                    out.extend(per_offset(&|offset| Outcome::Present { offset }));
                }
                other => {
                    let error = format!(
                        "stream load {label}: {other}: {} ({counts}){error_url}",
                        res.message
                    );
                    out.extend(per_offset(&|offset| Outcome::Failed {
                        offset,
                        error: error.clone(),
                    }));
                }
            }
        }
    }
    out
}

/// The Stream Load client of a doris audit: database from `sink.table` (`db.table`) or the
/// url, credentials from `sink.username`/`password` (or the url's).
fn stream_loader(audit: &AuditConfig) -> Result<StreamLoad, String> {
    let s = &audit.sink;
    let base = s
        .stream_load_url
        .as_deref()
        .ok_or("sink.stream_load_url is not set")?;
    let table = s.table.as_deref().ok_or("sink.table is not set")?;
    let (db, table) = match table.split_once('.') {
        Some((db, t)) => (db.to_string(), t.to_string()),
        None => {
            let u = url::Url::parse(s.url.expose()).map_err(|e| format!("sink.url: {e}"))?;
            (u.path().trim_matches('/').to_string(), table.to_string())
        }
    };
    let user = s.effective_username().unwrap_or_default();
    let password = s
        .effective_password()
        .map(|p| p.expose().to_string())
        .unwrap_or_default();
    StreamLoad::new(
        base,
        &db,
        &table,
        &user,
        &password,
        s.query_timeout.max(Duration::from_secs(60)),
        &TlsSettings::from_config(s),
    )
}

/// The document (Elasticsearch) or JSON row (Stream Load) of one record: a json record as
/// it is, csv `record.fields` mapped to their columns, raw as `{fields[0]: value}`; plus the
/// partition/offset(/topic) for `offset_columns`.
fn document(
    audit: &AuditConfig,
    target: &Target,
    r: &Record,
) -> Result<Map<String, Value>, String> {
    let mut value = r.value.as_deref().ok_or("tombstone")?;
    if audit.record.framing == crate::config::Framing::Confluent {
        value = crate::record::registry::split_frame(value)
            .ok_or("no Confluent Schema Registry header")?
            .1;
    }
    let text = std::str::from_utf8(value).map_err(|_| "not UTF-8")?;
    let mut doc = match audit.record.format {
        RecordFormat::Avro | RecordFormat::Protobuf => {
            return Err(
                "replay --to-sink does not write avro/protobuf records (the pipeline's own \
                 column mapping decides their rows): use --to-topic"
                    .into(),
            );
        }
        RecordFormat::Json => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return Err("the JSON record is not an object".into()),
            Err(e) => return Err(format!("not JSON: {e}")),
        },
        RecordFormat::Csv => csv_columns(audit, text)
            .into_iter()
            .map(|(c, v)| (c, Value::String(v)))
            .collect(),
        RecordFormat::Raw => {
            let name = audit
                .record
                .fields
                .first()
                .ok_or("record.fields names no field for the raw value")?;
            let mut m = Map::new();
            m.insert(
                name.clone(),
                Value::String(strip_line_end(text).to_string()),
            );
            m
        }
    };
    if audit.matching.strategy == MatchStrategy::OffsetColumns {
        doc.insert(
            audit.matching.partition_column.clone(),
            Value::from(target.tp.partition),
        );
        doc.insert(audit.matching.offset_column.clone(), Value::from(r.offset));
        if let Some(t) = &audit.matching.topic_column {
            doc.insert(t.clone(), Value::String(target.tp.topic.clone()));
        }
    }
    Ok(doc)
}

fn strip_line_end(text: &str) -> &str {
    let text = text.strip_suffix('\n').unwrap_or(text);
    text.strip_suffix('\r').unwrap_or(text)
}

/// (column, value) of a csv record: `record.fields` in order, key fields renamed to their
/// `match.columns`.
fn csv_columns(audit: &AuditConfig, text: &str) -> Vec<(String, String)> {
    let text = strip_line_end(text);
    let key_columns = audit.matching.sink_columns();
    audit
        .record
        .fields
        .iter()
        .zip(text.split(audit.record.delimiter.as_str()))
        .map(|(name, v)| {
            let column = audit
                .matching
                .key
                .iter()
                .position(|k| k == name)
                .and_then(|i| key_columns.get(i))
                .unwrap_or(name);
            (column.clone(), v.to_string())
        })
        .collect()
}

/// Inserts the records' rows into the SQL sink, one statement per record (a failure names
/// its offset and does not hide the others).
async fn to_sql(
    audit: &AuditConfig,
    sink: &AnySink,
    target: &Target,
    records: &[&Record],
) -> Vec<Outcome> {
    let AnySink::Mysql(mysql) = sink else {
        return all_failed(records, "this sink cannot be written by replay");
    };
    let mut out = Vec::new();
    for r in records {
        // Structural errors (no table, a tombstone, not UTF-8) do not depend on the session.
        if let Err(e) = insert_statement(audit, target, r, false) {
            out.push(Outcome::Failed {
                offset: r.offset,
                error: e,
            });
            continue;
        }
        // Escaped for the session it runs on: NO_BACKSLASH_ESCAPES is per connection.
        let written = mysql
            .execute_escaped(|nbe| insert_statement(audit, target, r, nbe).unwrap_or_default())
            .await;
        out.push(match written {
            Ok(()) => Outcome::Written { offset: r.offset },
            Err(e) => Outcome::Failed {
                offset: r.offset,
                error: e.to_string(),
            },
        });
    }
    out
}

/// `INSERT INTO t (cols) VALUES (literals)` for one csv record.
fn insert_statement(
    audit: &AuditConfig,
    target: &Target,
    r: &Record,
    nbe: bool,
) -> Result<String, String> {
    let table = audit.sink.table.as_deref().ok_or("sink.table is not set")?;
    let value = r.value.as_deref().ok_or("tombstone")?;
    let text = std::str::from_utf8(value).map_err(|_| "not UTF-8")?;
    let mut columns = Vec::new();
    let mut values = Vec::new();
    for (column, v) in csv_columns(audit, text) {
        columns.push(sql::ident(&column));
        values.push(sql::string_literal(&v, nbe));
    }
    if audit.matching.strategy == MatchStrategy::OffsetColumns {
        columns.push(sql::ident(&audit.matching.partition_column));
        values.push(target.tp.partition.to_string());
        columns.push(sql::ident(&audit.matching.offset_column));
        values.push(r.offset.to_string());
        if let Some(t) = &audit.matching.topic_column {
            columns.push(sql::ident(t));
            values.push(sql::string_literal(&target.tp.topic, nbe));
        }
    }
    Ok(format!(
        "INSERT INTO {} ({}) VALUES ({})",
        sql::table_ident(table),
        columns.join(", "),
        values.join(", ")
    ))
}

/// Resolves `--gap ID` from the store.
pub fn target_of_gap(store: &Store, id: &str) -> anyhow::Result<Target> {
    let g = store
        .get_gap(id)?
        .with_context(|| format!("no gap with id {id:?} (see `gap-auditor gaps --state all`)"))?;
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
mod tests {
    use super::*;

    #[test]
    fn offsets_parse() {
        assert_eq!(parse_offsets("2-3"), Ok((2, 3)));
        assert_eq!(parse_offsets("7"), Ok((7, 7)));
        assert!(parse_offsets("3-2").is_err());
        assert!(parse_offsets("a-b").is_err());
    }

    #[test]
    fn insert_maps_fields_to_columns_and_escapes_values() {
        let cfg = Config::from_toml_str(
            r#"
[kafka]
brokers = "k:9092"
[[audits]]
name = "a"
topics = ["t"]
[audits.record]
format = "csv"
delimiter = "|"
fields = ["ip", "domain"]
[audits.match]
strategy = "key_columns"
key = ["ip", "domain"]
columns = ["client_ip", "domain"]
[audits.sink]
kind = "mysql"
url = "mysql://u@h:3306/db"
table = "t1"
"#,
        )
        .expect("config");
        let r = Record {
            offset: 5,
            key: None,
            value: Some(b"1.2.3.4|o'reilly\\.com\n".to_vec()),
            timestamp: None,
            headers: vec![],
        };
        let target = Target {
            audit: "a".into(),
            tp: TopicPartition::new("t", 0),
            first: 5,
            last: 5,
            gap_id: None,
        };
        let q = insert_statement(&cfg.audits[0], &target, &r, false).expect("statement");
        assert_eq!(
            q,
            "INSERT INTO `t1` (`client_ip`, `domain`) VALUES ('1.2.3.4', 'o''reilly\\\\.com')"
        );
    }

    #[test]
    fn to_sink_refuses_schema_registry_formats_up_front() {
        for (kind, url) in [
            ("elasticsearch", "http://es:9200"),
            ("doris", "mysql://u@h:9030/db"),
        ] {
            let target = if kind == "elasticsearch" {
                "index = \"i\""
            } else {
                "table = \"t\""
            };
            let cfg = Config::from_toml_str(&format!(
                r#"
[kafka]
brokers = "k:9092"
[[audits]]
name = "a"
topics = ["t"]
[audits.record]
format = "avro"
[audits.record.schema_registry]
url = "http://registry:8081"
[audits.match]
strategy = "offset_columns"
[audits.sink]
kind = "{kind}"
url = "{url}"
{target}
"#
            ))
            .expect("config");
            let e = sink_supported(&cfg.audits[0]).expect_err("refused");
            assert!(e.to_string().contains("--to-topic"), "{kind}: {e}");
        }
    }
}
