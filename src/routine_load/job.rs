//! One `SHOW ROUTINE LOAD FOR job` answer, read into what the audit needs (pure: no I/O).
//!
//! Doris documents the statement's columns (`Id`, `Name`, `CreateTime`, `PauseTime`,
//! `EndTime`, `DbName`, `TableName`, `State`, `DataSourceType`, `CurrentTaskNum`,
//! `JobProperties`, `DataSourceProperties`, `CustomProperties`, `Statistic`, `Progress`,
//! `Lag`, `ReasonOfStateChanged`, `ErrorLogUrls`, `OtherMsg`, ...; later versions add more).
//! The audit reads five of them by name, so added or reordered columns change nothing:
//! - `State`: `NEED_SCHEDULE`, `RUNNING`, `PAUSED`, `STOPPED`, `CANCELLED`.
//! - `Progress`: a JSON object, Kafka partition → the last offset the job *committed*
//!   (Doris keeps the next offset to consume and shows it minus one, `KafkaProgress`), or
//!   `OFFSET_ZERO` (next is 0: nothing consumed), `OFFSET_END` / `OFFSET_BEGINNING` (nothing
//!   committed yet since creation or since an `ALTER ... kafka_offsets`).
//! - `PauseTime`: when the job was last paused (`NULL` if never).
//! - `ReasonOfStateChanged`: why it was paused, stopped or cancelled.
//! - `DataSourceProperties`: a JSON object whose `topic` is the job's one Kafka topic.

use crate::types::Offset;
use std::collections::BTreeMap;
use std::fmt;

/// What is wrong with an answer of `SHOW ROUTINE LOAD` (the FE's words never hold secrets).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// The statement answered no row: no job of that name in the database.
    #[error(
        "no Routine Load job {0:?} (SHOW ROUTINE LOAD FOR it answered no row: is the job name or database right?)"
    )]
    NotFound(String),
    /// A column the audit reads is missing from the answer.
    #[error("SHOW ROUTINE LOAD answered without a {0:?} column")]
    MissingColumn(&'static str),
    /// The `Progress` column is not the documented JSON object.
    #[error("the job's Progress {progress:?} is not a JSON object of partition to offset: {why}")]
    Progress {
        /// The column's text (offsets and partition numbers only).
        progress: String,
        /// What did not parse.
        why: String,
    },
}

/// The job's state (`State`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    /// Created or resumed, its tasks not yet scheduled.
    NeedSchedule,
    /// Consuming.
    Running,
    /// Paused by a user or by Doris itself (too many errors, a Kafka problem): resumable.
    Paused,
    /// Stopped by a user: final.
    Stopped,
    /// Cancelled (by a user or by Doris on an error it cannot recover from): final.
    Cancelled,
    /// A state this build does not know (a later Doris): shown as is.
    Other(String),
}

impl JobState {
    /// Parses the `State` column.
    pub fn parse(s: &str) -> Self {
        match s.trim() {
            "NEED_SCHEDULE" => Self::NeedSchedule,
            "RUNNING" => Self::Running,
            "PAUSED" => Self::Paused,
            "STOPPED" => Self::Stopped,
            "CANCELLED" => Self::Cancelled,
            other => Self::Other(other.to_owned()),
        }
    }

    /// Whether the job consumes (or is about to): its position can move by consuming.
    pub fn consumes(&self) -> bool {
        matches!(self, Self::Running | Self::NeedSchedule)
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NeedSchedule => "NEED_SCHEDULE",
            Self::Running => "RUNNING",
            Self::Paused => "PAUSED",
            Self::Stopped => "STOPPED",
            Self::Cancelled => "CANCELLED",
            Self::Other(s) => s,
        })
    }
}

/// One job's answer, as the audit uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    /// `State`.
    pub state: JobState,
    /// Per Kafka partition, the job's committed position in Kafka's sense: the next offset
    /// it will read, every record before it loaded (`None`: nothing committed yet).
    pub committed: BTreeMap<i32, Option<Offset>>,
    /// `PauseTime` (`None` for `NULL`, never paused).
    pub pause_time: Option<String>,
    /// `ReasonOfStateChanged` (`None` when empty).
    pub reason: Option<String>,
    /// The job's Kafka topic (`DataSourceProperties.topic`), when the answer names it.
    pub topic: Option<String>,
}

/// The columns of one answer row, by name (`None`: SQL `NULL`).
pub type Columns = BTreeMap<String, Option<String>>;

impl JobRow {
    /// Reads one row of `SHOW ROUTINE LOAD` (columns by name).
    pub fn from_columns(cols: &Columns) -> Result<Self, JobError> {
        let get = |name: &'static str| -> Result<Option<&str>, JobError> {
            cols.get(name)
                .map(|v| v.as_deref())
                .ok_or(JobError::MissingColumn(name))
        };
        let state = JobState::parse(get("State")?.unwrap_or(""));
        let committed = parse_progress(get("Progress")?.unwrap_or("{}"))?;
        let pause_time = get("PauseTime")?
            .map(str::trim)
            .filter(|s| !s.is_empty() && !s.eq_ignore_ascii_case("NULL"))
            .map(str::to_owned);
        let reason = cols
            .get("ReasonOfStateChanged")
            .and_then(|v| v.as_deref())
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        let topic = cols
            .get("DataSourceProperties")
            .and_then(|v| v.as_deref())
            .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok())
            .and_then(|v| v.get("topic")?.as_str().map(str::to_owned));
        Ok(Self {
            state,
            committed,
            pause_time,
            reason,
            topic,
        })
    }
}

/// Parses `Progress`: `{"0":"13","1":"OFFSET_END","2":"OFFSET_ZERO"}` into the committed
/// position of each partition in Kafka's sense (the next offset to read): the shown offset
/// plus one, 0 for `OFFSET_ZERO`, `None` for `OFFSET_END` and `OFFSET_BEGINNING` (nothing
/// committed: the job reads from the log's end or start once it runs).
pub fn parse_progress(json: &str) -> Result<BTreeMap<i32, Option<Offset>>, JobError> {
    let bad = |why: String| JobError::Progress {
        progress: json.chars().take(200).collect(),
        why,
    };
    let map: BTreeMap<String, serde_json::Value> =
        serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
    let mut out = BTreeMap::new();
    for (k, v) in map {
        let partition: i32 = k
            .trim()
            .parse()
            .ok()
            .filter(|p: &i32| *p >= 0)
            .ok_or_else(|| bad(format!("partition {k:?} is not a partition number")))?;
        // Gson writes the values as strings; a number is taken too.
        let text = match &v {
            serde_json::Value::String(s) => s.trim().to_owned(),
            serde_json::Value::Number(n) => n.to_string(),
            other => {
                return Err(bad(format!(
                    "partition {partition}: {other} is not an offset"
                )));
            }
        };
        let committed = match text.as_str() {
            "OFFSET_END" | "OFFSET_BEGINNING" => None,
            "OFFSET_ZERO" => Some(0),
            n => {
                let last: Offset = n
                    .parse()
                    .map_err(|_| bad(format!("partition {partition}: {n:?} is not an offset")))?;
                if last < 0 {
                    return Err(bad(format!("partition {partition}: offset {last} < 0")));
                }
                Some(last.checked_add(1).ok_or_else(|| {
                    bad(format!("partition {partition}: offset {last} too large"))
                })?)
            }
        };
        out.insert(partition, committed);
    }
    Ok(out)
}

/// The statement that reads the job: `SHOW ROUTINE LOAD FOR [db.]job`, each name part
/// quoted as a Doris identifier (backquotes, a backquote inside doubled): the job name is
/// configuration, and nothing from it reaches the FE unquoted.
pub fn show_statement(job: &str) -> String {
    let quoted: Vec<String> = match job.split_once('.') {
        Some((db, name)) if !db.is_empty() && !name.is_empty() => vec![quote(db), quote(name)],
        _ => vec![quote(job)],
    };
    format!("SHOW ROUTINE LOAD FOR {}", quoted.join("."))
}

fn quote(ident: &str) -> String {
    format!("`{}`", ident.replace('`', "``"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(pairs: &[(&str, Option<&str>)]) -> Columns {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.map(str::to_owned)))
            .collect()
    }

    #[test]
    fn progress_is_the_shown_offset_plus_one_and_markers_are_no_commit() {
        let p = parse_progress(
            r#"{"0":"13","1":"OFFSET_END","2":"OFFSET_ZERO","3":"OFFSET_BEGINNING","4":"0"}"#,
        )
        .unwrap();
        assert_eq!(p[&0], Some(14));
        assert_eq!(p[&1], None);
        assert_eq!(p[&2], Some(0));
        assert_eq!(p[&3], None);
        // "0" is shown when the next offset is 1 (offset 0 was loaded).
        assert_eq!(p[&4], Some(1));
        assert_eq!(parse_progress("{}").unwrap().len(), 0);
    }

    #[test]
    fn a_progress_that_is_not_the_documented_shape_is_an_error_not_a_position() {
        for bad in [
            "",
            "[]",
            r#"{"x":"1"}"#,
            r#"{"-1":"1"}"#,
            r#"{"0":"-3"}"#,
            r#"{"0":"abc"}"#,
            r#"{"0":true}"#,
            r#"{"0":"9223372036854775807"}"#,
        ] {
            assert!(
                matches!(parse_progress(bad), Err(JobError::Progress { .. })),
                "{bad:?}"
            );
        }
        // Numbers are taken as well as strings.
        assert_eq!(parse_progress(r#"{"0":5}"#).unwrap()[&0], Some(6));
    }

    #[test]
    fn a_row_is_read_by_column_name() {
        let row = JobRow::from_columns(&cols(&[
            ("Id", Some("10013")),
            ("Name", Some("dns_logs_load")),
            ("PauseTime", Some("2026-12-06 02:14:00")),
            ("State", Some("PAUSED")),
            ("Progress", Some(r#"{"0":"99","1":"41"}"#)),
            (
                "DataSourceProperties",
                Some(r#"{"topic":"dns","currentKafkaPartitions":"0,1","brokerList":"k:9092"}"#),
            ),
            (
                "ReasonOfStateChanged",
                Some("ErrorReason{code=errCode = 100, msg='User root pauses routine load job'}"),
            ),
        ]))
        .unwrap();
        assert_eq!(row.state, JobState::Paused);
        assert!(!row.state.consumes());
        assert_eq!(row.committed[&0], Some(100));
        assert_eq!(row.committed[&1], Some(42));
        assert_eq!(row.pause_time.as_deref(), Some("2026-12-06 02:14:00"));
        assert_eq!(row.topic.as_deref(), Some("dns"));
        assert!(row.reason.unwrap().contains("pauses"));

        let never = JobRow::from_columns(&cols(&[
            ("PauseTime", None),
            ("State", Some("RUNNING")),
            ("Progress", Some("{}")),
            ("ReasonOfStateChanged", Some("")),
        ]))
        .unwrap();
        assert_eq!(
            (never.pause_time, never.reason, never.topic),
            (None, None, None)
        );
        assert!(never.state.consumes());
        assert_eq!(JobState::parse("WEIRD").to_string(), "WEIRD");

        let e = JobRow::from_columns(&cols(&[("State", Some("RUNNING"))])).unwrap_err();
        assert!(matches!(e, JobError::MissingColumn("Progress")), "{e}");
    }

    #[test]
    fn the_job_name_reaches_the_statement_quoted() {
        assert_eq!(
            show_statement("dns_logs_load"),
            "SHOW ROUTINE LOAD FOR `dns_logs_load`"
        );
        assert_eq!(
            show_statement("example_db.dns_logs_load"),
            "SHOW ROUTINE LOAD FOR `example_db`.`dns_logs_load`"
        );
        assert_eq!(
            show_statement("a`; DROP TABLE t; --"),
            "SHOW ROUTINE LOAD FOR `a``; DROP TABLE t; --`"
        );
    }
}
