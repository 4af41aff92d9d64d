//! `--to-sink`: the missing records written where the audit checks them, by sink kind (SQL
//! insert, the in-memory table, or the document sinks of `documents`).

use super::{Outcome, Record, Replayed, Target};
use crate::commands::replay::documents::{csv_columns, to_elasticsearch, to_stream_load};
use crate::commands::replay::topic::all_failed;
use crate::config::{AuditConfig, MatchStrategy, SinkSpec};
use crate::key_semantics::KeySemantics;
use crate::record::{Decoder, RecordMeta, Tag};
use crate::sink::memory::MemorySink;
use crate::sink::{AnySink, Verifier, sql};
use crate::types::Offset;
use std::collections::HashMap;

/// Writes the records into the audit's sink (the client, and the spec it was built from):
/// Elasticsearch `_bulk`, Doris Stream Load, or SQL `INSERT`s.
pub(super) async fn to_sink(
    audit: &AuditConfig,
    (sink, spec): (&AnySink, &SinkSpec),
    decoder: &Decoder,
    (target, semantics): (&Target, KeySemantics),
    records: &[&Record],
    ids: &HashMap<Offset, String>,
    report: &mut Replayed,
) -> Vec<Outcome> {
    if records.is_empty() {
        return Vec::new();
    }
    match (sink, spec) {
        (AnySink::Elasticsearch(es), _) => to_elasticsearch(audit, es, target, records, ids).await,
        (AnySink::Mysql(_), SinkSpec::Sql(sql)) => match &sql.stream_load {
            Some(load) => to_stream_load(audit, (load, sql), target, records, report).await,
            None => to_sql(audit, sink, &sql.table, (target, semantics), records).await,
        },
        // A caller's own sink of another kind than the audit's (the demo's table, see `run`).
        (AnySink::Mysql(_), SinkSpec::Elasticsearch(_)) => all_failed(
            records,
            "the sink is a SQL one but the audit's sink.kind is elasticsearch",
        ),
        (AnySink::Memory(table), _) => to_memory(audit, table, decoder, target, records, ids),
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

/// Inserts the records' rows into the SQL sink, one statement per record (a failure names
/// its offset and does not hide the others).
async fn to_sql(
    audit: &AuditConfig,
    sink: &AnySink,
    table: &str,
    (target, semantics): (&Target, KeySemantics),
    records: &[&Record],
) -> Vec<Outcome> {
    let AnySink::Mysql(mysql) = sink else {
        return all_failed(records, "this sink cannot be written by replay");
    };
    // A table that keeps one row per key refuses a second plain INSERT of a key it holds;
    // MySQL/MariaDB write it with an upsert, as the pipeline does. Doris UNIQUE and
    // AGGREGATE tables upsert a plain INSERT by themselves.
    let upsert = semantics == KeySemantics::Presence && mysql.kind() == "mysql";
    let mut out = Vec::new();
    for r in records {
        // Structural errors (a tombstone, not UTF-8) do not depend on the session.
        if let Err(e) = insert_statement(audit, table, target, r, false, upsert) {
            out.push(Outcome::Failed {
                offset: r.offset,
                error: e,
            });
            continue;
        }
        // Escaped for the session it runs on: NO_BACKSLASH_ESCAPES is per connection.
        let written = mysql
            .execute_escaped(|nbe| {
                insert_statement(audit, table, target, r, nbe, upsert).unwrap_or_default()
            })
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

/// `INSERT INTO table (cols) VALUES (literals)` for one csv record (`table` is the audit's
/// `sink.table`); with `upsert`, `… ON DUPLICATE KEY UPDATE c = VALUES(c), …` (every
/// column takes the replayed record's value, as the pipeline's upsert writes it).
pub(super) fn insert_statement(
    audit: &AuditConfig,
    table: &str,
    target: &Target,
    r: &Record,
    nbe: bool,
    upsert: bool,
) -> Result<String, String> {
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
    let mut q = format!(
        "INSERT INTO {} ({}) VALUES ({})",
        sql::table_ident(table),
        columns.join(", "),
        values.join(", ")
    );
    if upsert && !columns.is_empty() {
        let updates: Vec<String> = columns
            .iter()
            .map(|c| format!("{c} = VALUES({c})"))
            .collect();
        q.push_str(" ON DUPLICATE KEY UPDATE ");
        q.push_str(&updates.join(", "));
    }
    Ok(q)
}
