//! Across audits: an offset_columns audit without `match.topic_column` counts every row of
//! its table at a (partition, offset) as its own record's, so no other topic may write that
//! table (SPEC "The sink's model"). Where the config shows it (another audit on the same
//! table reading other topics), it is refused here; rows the config cannot show are looked
//! for at start (`audit::shared_table`).

use super::super::spec::{SinkSpec, SqlKind};
use super::super::{AuditConfig, ConfigError, MatchStrategy, err};

/// Where an audit's rows land as far as the config shows it: server, database and table
/// (or index). Compared case-insensitively: MySQL and Doris may fold table names, and a
/// false match only asks for `topic_column`, where a missed one would hide a loss. The
/// same server under two names (an IP and a host name) is not seen: the start-time check
/// is there for what the config cannot show.
pub(super) fn sink_place(spec: &SinkSpec) -> Option<String> {
    match spec {
        SinkSpec::Sql(s) => {
            let url = s.url.parse().ok()?;
            let port = url.port().unwrap_or(match s.kind {
                SqlKind::Doris => 9030,
                SqlKind::Mysql => 3306,
            });
            let table = s.table.rsplit('.').next().unwrap_or(&s.table);
            Some(
                format!(
                    "sql|{}:{port}|{}|{table}",
                    url.host_str().unwrap_or_default(),
                    s.database
                )
                .to_lowercase(),
            )
        }
        SinkSpec::Elasticsearch(e) => {
            let url = url::Url::parse(&e.url).ok()?;
            Some(
                format!(
                    "es|{}:{}|{}",
                    url.host_str().unwrap_or_default(),
                    url.port_or_known_default().unwrap_or(0),
                    e.index
                )
                .to_lowercase(),
            )
        }
    }
}

/// Refuses an offset_columns audit without `topic_column` whose sink table another audit
/// also verifies with other topics: that audit's topics write the table too, and their rows
/// at the same (partition, offset) would confirm this audit's lost records.
pub(super) fn check_shared_tables(
    audits: &[AuditConfig],
    sinks: &[SinkSpec],
) -> Result<(), ConfigError> {
    let places: Vec<Option<String>> = sinks.iter().map(sink_place).collect();
    for (i, audit) in audits.iter().enumerate() {
        let m = &audit.matching;
        if m.strategy != MatchStrategy::OffsetColumns || m.topic_column.is_some() {
            continue;
        }
        let Some(place) = &places[i] else { continue };
        let mine: std::collections::BTreeSet<&String> = audit.topics.iter().collect();
        let other = audits.iter().enumerate().find(|&(j, a)| {
            j != i
                && places[j].as_ref() == Some(place)
                && a.topics.iter().collect::<std::collections::BTreeSet<_>>() != mine
        });
        if let Some((j, other)) = other {
            return err(
                format!("audits[{i}].match.topic_column"),
                format!(
                    "is required: audits[{j}] (`{}`, topics {:?}) verifies the same sink table, \
                     so other topics write it too, and their rows at the same partition and \
                     offset would confirm this audit's lost records; add a column holding the \
                     record's topic and name it here",
                    other.name, other.topics
                ),
            );
        }
    }
    Ok(())
}
