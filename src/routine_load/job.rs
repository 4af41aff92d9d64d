//! One `SHOW ALL ROUTINE LOAD FOR job` answer, read into what the audit needs (pure: no
//! I/O). `ALL`: without it Doris leaves STOPPED and CANCELLED jobs out and answers an
//! error, so a job that ended would read as an unreadable position instead of a final one.
//!
//! Doris documents the statement's columns (`Id`, `Name`, `CreateTime`, `PauseTime`,
//! `EndTime`, `DbName`, `TableName`, `State`, `DataSourceType`, `CurrentTaskNum`,
//! `JobProperties`, `DataSourceProperties`, `CustomProperties`, `Statistic`, `Progress`,
//! `Lag`, `ReasonOfStateChanged`, `ErrorLogUrls`, `OtherMsg`, ...; later versions add more).
//! The audit reads these by name, so added or reordered columns change nothing:
//! - `Id`: a job dropped and re-created under the same name has a new one.
//! - `State`: `NEED_SCHEDULE`, `RUNNING`, `PAUSED`, `STOPPED`, `CANCELLED`.
//! - `Progress`: a JSON object, Kafka partition → the last offset the job *committed*
//!   (Doris keeps the next offset to consume and shows it minus one, `KafkaProgress`), or
//!   `OFFSET_ZERO` (next is 0: nothing consumed), `OFFSET_END` / `OFFSET_BEGINNING` (nothing
//!   committed yet since creation or since an `ALTER ... kafka_offsets`).
//! - `ReasonOfStateChanged`: why it was paused, stopped or cancelled.
//! - `DataSourceProperties`: a JSON object whose `topic` is the job's one Kafka topic and
//!   `currentKafkaPartitions` the partitions it reads (`"0,1,2"`).

use crate::types::Offset;
use std::collections::BTreeMap;
use std::fmt;

/// What is wrong with an answer of `SHOW ROUTINE LOAD` (the FE's words never hold secrets).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// The statement answered no row: no job of that name in the database.
    #[error(
        "no Routine Load job {0:?} (SHOW ALL ROUTINE LOAD FOR it answered no row: is the job name or database right? can this user see it?)"
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
    /// `Id`.
    pub id: Option<String>,
    /// `State`.
    pub state: JobState,
    /// Per Kafka partition, the job's committed position in Kafka's sense: the next offset
    /// it will read, every record before it loaded (`None`: nothing committed yet).
    pub committed: BTreeMap<i32, Option<Offset>>,
    /// `ReasonOfStateChanged` (`None` when empty).
    pub reason: Option<String>,
    /// The job's Kafka topic (`DataSourceProperties.topic`), when the answer names it.
    pub topic: Option<String>,
    /// The partitions the job reads (`DataSourceProperties.currentKafkaPartitions`), when
    /// the answer names them.
    pub partitions: Option<Vec<i32>>,
}

/// The columns of one answer row, by name (`None`: SQL `NULL`).
pub use crate::doris_fe::Columns;

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
        let reason = cols
            .get("ReasonOfStateChanged")
            .and_then(|v| v.as_deref())
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        let source = cols
            .get("DataSourceProperties")
            .and_then(|v| v.as_deref())
            .and_then(|s| serde_json::from_str::<serde_json::Value>(s).ok());
        let topic = source
            .as_ref()
            .and_then(|v| v.get("topic")?.as_str().map(str::to_owned));
        let partitions = source
            .as_ref()
            .and_then(|v| v.get("currentKafkaPartitions")?.as_str().map(str::to_owned))
            .and_then(|list| {
                list.split(',')
                    .map(|p| p.trim().parse::<i32>().ok())
                    .collect::<Option<Vec<i32>>>()
            });
        let id = cols
            .get("Id")
            .and_then(|v| v.as_deref())
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        Ok(Self {
            id,
            state,
            committed,
            reason,
            topic,
            partitions,
        })
    }
}

/// The job among the rows of `SHOW ALL ROUTINE LOAD FOR name` (the one live job of that
/// name, and the ended ones before it): the one not STOPPED or CANCELLED, else the one
/// created last (the largest `Id`: Doris's order puts the live job first but leaves the
/// ended ones in no useful order).
pub fn pick(rows: Vec<JobRow>) -> Option<JobRow> {
    let id = |r: &JobRow| r.id.as_deref().and_then(|i| i.parse::<i64>().ok());
    let (live, ended): (Vec<JobRow>, Vec<JobRow>) = rows
        .into_iter()
        .partition(|r| !matches!(r.state, JobState::Stopped | JobState::Cancelled));
    live.into_iter()
        .max_by_key(id)
        .or_else(|| ended.into_iter().max_by_key(id))
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

/// The statement that reads the job: `SHOW ALL ROUTINE LOAD FOR [db.]job`, each name part
/// quoted as a Doris identifier (backquotes, a backquote inside doubled): the job name is
/// configuration, and nothing from it reaches the FE unquoted.
pub fn show_statement(job: &str) -> String {
    let quoted: Vec<String> = match job.split_once('.') {
        Some((db, name)) if !db.is_empty() && !name.is_empty() => vec![quote(db), quote(name)],
        _ => vec![quote(job)],
    };
    format!("SHOW ALL ROUTINE LOAD FOR {}", quoted.join("."))
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
        assert_eq!(row.topic.as_deref(), Some("dns"));
        assert_eq!(row.partitions, Some(vec![0, 1]));
        assert_eq!(row.id.as_deref(), Some("10013"));
        assert!(row.reason.unwrap().contains("pauses"));

        let never = JobRow::from_columns(&cols(&[
            ("PauseTime", None),
            ("State", Some("RUNNING")),
            ("Progress", Some("{}")),
            ("ReasonOfStateChanged", Some("")),
        ]))
        .unwrap();
        assert_eq!((never.reason, never.topic), (None, None));
        assert_eq!((never.id, never.partitions), (None, None));
        assert!(never.state.consumes());
        assert_eq!(JobState::parse("WEIRD").to_string(), "WEIRD");

        let e = JobRow::from_columns(&cols(&[("State", Some("RUNNING"))])).unwrap_err();
        assert!(matches!(e, JobError::MissingColumn("Progress")), "{e}");
    }

    #[test]
    fn the_live_job_is_picked_else_the_last_created() {
        let r = |id: &str, state: JobState| JobRow {
            id: Some(id.into()),
            state,
            committed: BTreeMap::new(),
            reason: None,
            topic: None,
            partitions: None,
        };
        let live = pick(vec![
            r("12", JobState::Cancelled),
            r("9", JobState::Stopped),
            r("11", JobState::Paused),
        ])
        .unwrap();
        assert_eq!(live.id.as_deref(), Some("11"));
        let ended = pick(vec![
            r("9", JobState::Stopped),
            r("12", JobState::Cancelled),
            r("10", JobState::Stopped),
        ])
        .unwrap();
        assert_eq!(ended.id.as_deref(), Some("12"));
        assert_eq!(pick(Vec::new()), None);
    }

    #[test]
    fn the_job_name_reaches_the_statement_quoted() {
        assert_eq!(
            show_statement("dns_logs_load"),
            "SHOW ALL ROUTINE LOAD FOR `dns_logs_load`"
        );
        assert_eq!(
            show_statement("example_db.dns_logs_load"),
            "SHOW ALL ROUTINE LOAD FOR `example_db`.`dns_logs_load`"
        );
        assert_eq!(
            show_statement("a`; DROP TABLE t; --"),
            "SHOW ALL ROUTINE LOAD FOR `a``; DROP TABLE t; --`"
        );
    }
}
