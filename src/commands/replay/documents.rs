//! `--to-sink` for document sinks: Elasticsearch bulk creates and Doris Stream Load, with the
//! document each record becomes.

use super::{Outcome, Record, Replayed, Target};
use crate::config::{
    AuditConfig, MatchStrategy, RecordFormat, Secret, SqlSinkSpec, StreamLoadSpec,
};
use crate::sink::elasticsearch::{BulkCreate, ElasticsearchSink};
use crate::sink::stream_load::{self, StreamLoad};
use crate::sink::tls::TlsSettings;
use crate::types::Offset;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::time::Duration;

/// Bulk requests carry at most this many documents.
const BULK_DOCS: usize = 500;

/// `_bulk` `create` actions, [`BULK_DOCS`] per request; the document id is the audit's
/// (`doc_id`), else the server picks one.
pub(super) async fn to_elasticsearch(
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
pub(super) async fn to_stream_load(
    audit: &AuditConfig,
    sink: (&StreamLoadSpec, &SqlSinkSpec),
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
    let loader = match stream_loader(sink) {
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

/// The Stream Load client of a doris audit: its spec, with the TLS and the timeout (at least
/// a minute) of the sink's.
fn stream_loader((load, sql): (&StreamLoadSpec, &SqlSinkSpec)) -> Result<StreamLoad, String> {
    let password = match &load.password {
        Some(p) => p.read().map_err(|e| e.to_string())?,
        None => Secret::default(),
    };
    StreamLoad::new(
        &load.url,
        &load.database,
        &load.table,
        &load.username,
        password.expose(),
        sql.query_timeout.max(Duration::from_secs(60)),
        &TlsSettings::from(&sql.tls),
    )
}

/// The document (Elasticsearch) or JSON row (Stream Load) of one record: a json record as
/// it is, csv `record.fields` mapped to their columns, raw as `{fields[0]: value}`; plus the
/// partition/offset(/topic) for `offset_columns`.
pub(super) fn document(
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
pub(super) fn csv_columns(audit: &AuditConfig, text: &str) -> Vec<(String, String)> {
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
