//! `gap-auditor replay`: re-reads exactly the lost offsets from Kafka and writes them again,
//! to a topic the pipeline reads or straight into the sink. Idempotent: the sink is asked
//! first which of the records are still absent, and only those are written, so running the
//! same replay twice changes nothing.
//!
//! Sinks: MySQL/Doris by `INSERT` over the text protocol (csv records: `record.fields` name
//! the columns, key fields map to `match.columns`, and `offset_columns` audits also write the
//! partition/offset/topic columns). Doris Stream Load and Elasticsearch `_bulk` are not in
//! this build.

use crate::app::{self, AnySink};
use crate::config::{AuditConfig, Config, MatchStrategy, RecordFormat, SinkKind};
use crate::gap::{Offset, TopicPartition};
use crate::kafka::client;
use crate::ledger::{Observed, OffsetRun, PartitionLedger, Verdict, runs};
use crate::record::{Decoder, DecoderSpec, Tag};
use crate::sink::sql;
use crate::store::Store;
use crate::verify::{self, KeyHistory, Limits};
use anyhow::{Context, bail};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders, Timestamp};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset as KOffset, TopicPartitionList};
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
    target: &Target,
    dest: &Destination,
    dry_run: bool,
) -> Result<Vec<Outcome>, ReplayError> {
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
    let decoder = Decoder::new(DecoderSpec::from_config(&audit.record, &audit.matching))
        .with_context(|| format!("audits.{}.record", audit.name))?;
    let sink = app::build_sink(audit)?;

    // Which expected records are still absent from the sink?
    let keyed = matches!(
        audit.matching.strategy,
        MatchStrategy::KeyColumns | MatchStrategy::DocId
    );
    let mut ledger = PartitionLedger::new(target.first, keyed);
    let mut outcomes = Vec::new();
    for r in &records {
        match decoder.tag(r.value.as_deref()) {
            Tag::Expected { key } => {
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
    let limits = Limits::from_batch_size(audit.batch_size);
    let obs = |_d: Duration, _ok: bool| {};
    let verdicts: Vec<Verdict> = match audit.matching.strategy {
        MatchStrategy::KeyColumns => {
            let mut history = KeyHistory::new(1);
            verify::by_keys(&sink, &segs, &mut history, limits, &obs).await
        }
        MatchStrategy::DocId => verify::by_ids(&sink, &segs, limits, &obs).await,
        MatchStrategy::OffsetColumns => {
            verify::by_offsets(&sink, &target.tp, &segs, limits, &obs).await
        }
    }
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
            Destination::Sink => outcomes.extend(to_sink(audit, &sink, target, &missing).await),
        }
    }
    outcomes.sort_by_key(|o| match o {
        Outcome::Written { offset }
        | Outcome::Present { offset }
        | Outcome::Filtered { offset, .. }
        | Outcome::Failed { offset, .. } => *offset,
    });
    Ok(outcomes)
}

fn sink_supported(audit: &AuditConfig) -> anyhow::Result<()> {
    match audit.sink.kind {
        SinkKind::Doris | SinkKind::Mysql if audit.record.format == RecordFormat::Csv => Ok(()),
        SinkKind::Doris | SinkKind::Mysql => bail!(
            "--to-sink writes csv records (record.fields name the columns); audit {} uses {:?}: use --to-topic",
            audit.name,
            audit.record.format
        ),
        SinkKind::Elasticsearch => {
            bail!("--to-sink for Elasticsearch (_bulk) is not in this build: use --to-topic")
        }
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
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&t.tp.topic, t.tp.partition, KOffset::Offset(t.first))
        .context("building the assignment")?;
    consumer.assign(&tpl).context("assigning the partition")?;
    let mut out = Vec::new();
    let mut idle = 0;
    loop {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                idle = 0;
                if m.offset() > t.last {
                    break;
                }
                let headers = m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|Header { key, value }| {
                                (key.to_string(), value.map(<[u8]>::to_vec))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                out.push(Record {
                    offset: m.offset(),
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                    timestamp: match m.timestamp() {
                        Timestamp::CreateTime(t) | Timestamp::LogAppendTime(t) if t >= 0 => Some(t),
                        _ => None,
                    },
                    headers,
                });
                if m.offset() >= t.last {
                    break;
                }
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => break,
            Some(Err(e)) => return Err(anyhow::anyhow!("reading {}: {e}", t.tp).into()),
            None => {
                idle += 1;
                if idle > 50 {
                    return Err(anyhow::anyhow!("reading {}: no record for 10 s", t.tp).into());
                }
            }
        }
    }
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

/// Inserts the records' rows into the SQL sink, one statement per record (a failure names
/// its offset and does not hide the others).
async fn to_sink(
    audit: &AuditConfig,
    sink: &AnySink,
    target: &Target,
    records: &[&Record],
) -> Vec<Outcome> {
    let AnySink::Mysql(mysql) = sink else {
        return records
            .iter()
            .map(|r| Outcome::Failed {
                offset: r.offset,
                error: "this sink cannot be written by replay".into(),
            })
            .collect();
    };
    let nbe = match mysql.no_backslash_escapes().await {
        Ok(v) => v,
        Err(e) => {
            return records
                .iter()
                .map(|r| Outcome::Failed {
                    offset: r.offset,
                    error: e.to_string(),
                })
                .collect();
        }
    };
    let mut out = Vec::new();
    for r in records {
        let statement = insert_statement(audit, target, r, nbe);
        out.push(match statement {
            Err(e) => Outcome::Failed {
                offset: r.offset,
                error: e,
            },
            Ok(q) => match mysql.execute(&q).await {
                Ok(()) => Outcome::Written { offset: r.offset },
                Err(e) => Outcome::Failed {
                    offset: r.offset,
                    error: e.to_string(),
                },
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
    let text = text.strip_suffix('\n').unwrap_or(text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    let fields: Vec<&str> = text.split(audit.record.delimiter.as_str()).collect();
    let mut columns = Vec::new();
    let mut values = Vec::new();
    let key_columns = audit.matching.sink_columns();
    for (name, v) in audit.record.fields.iter().zip(&fields) {
        let column = audit
            .matching
            .key
            .iter()
            .position(|k| k == name)
            .and_then(|i| key_columns.get(i))
            .unwrap_or(name);
        columns.push(sql::ident(column));
        values.push(sql::string_literal(v, nbe));
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
}
