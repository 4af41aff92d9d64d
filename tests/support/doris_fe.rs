//! A fake Doris FE for Routine Load: NOT Doris. No Doris runs on these machines, so this
//! answers the one statement the auditor sends, `SHOW [ALL] ROUTINE LOAD FOR [db.]job`, over the
//! MySQL protocol (opensrv-mysql, a maintained server-side implementation of it) with the
//! columns Doris documents for that statement, in its order, every value as text:
//! `Id, Name, CreateTime, PauseTime, EndTime, DbName, TableName, State, DataSourceType,
//! CurrentTaskNum, JobProperties, DataSourceProperties, CustomProperties, Statistic,
//! Progress, Lag, ReasonOfStateChanged, ErrorLogUrls, OtherMsg`. `Progress` is what Doris's
//! `KafkaProgress.toJsonString` writes: a JSON object of partition → the last loaded offset
//! as a string (the next offset to consume minus one), or `OFFSET_ZERO`, `OFFSET_END`,
//! `OFFSET_BEGINNING`. The test drives what a real job would do through [`FeJob`], as
//! apache/doris's `RoutineLoadJob`/`KafkaRoutineLoadJob` do it: `load` (a task committed:
//! Progress moves), `pause` (State PAUSED, PauseTime set, the reason Doris gives for a
//! user's pause), `alter_offset` (`ALTER ROUTINE LOAD ... "kafka_offsets"`: only while
//! PAUSED; the new offset shows at once, OFFSET_END already turned into the log end's
//! offset by the FE), `resume` (NEED_SCHEDULE, PauseTime back to NULL), `stop` (STOPPED:
//! left out of `SHOW ROUTINE LOAD`, listed by `SHOW ALL ROUTINE LOAD`). Every other
//! statement is refused with an error, as an FE would refuse unknown syntax. Unlike a real
//! FE it has no users or privileges (any login is accepted) and one job.
//!
//! It also answers what the Stream Load evidence asks (src/evidence/stream_load):
//! `SELECT UNIX_TIMESTAMP(), NOW(), @@system_time_zone, @@time_zone` (its clock, in the
//! zone Doris users mostly run, Asia/Shanghai, UTC+8; load times with milliseconds, as the
//! FE prints them) and `SHOW STREAM LOAD FROM db WHERE Label LIKE "x" ORDER BY
//! FinishTime DESC LIMIT n` with `ShowStreamLoadStmt`'s columns in their order, matching
//! `LIKE` as Doris's `StreamLoadRecordMgr` does (the label contains the value). Its loads
//! are the ones a test adds with [`FeJob::add_stream_load`], listed at once (a real FE
//! lists them up to `fetch_stream_load_record_interval_second` later).

use opensrv_mysql::{
    AsyncMysqlIntermediary, AsyncMysqlShim, Column, ColumnFlags, ColumnType, ErrorKind, InitWriter,
    OkResponse, ParamParser, QueryResultWriter, StatementMetaWriter,
};
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use tokio::io::AsyncWrite;
use tokio::net::TcpListener;

/// The job's state as a test sets it.
#[derive(Debug, Clone)]
struct JobState {
    name: String,
    state: &'static str,
    pause_time: Option<String>,
    reason: String,
    topic: String,
    /// Partition → the next offset to consume (Doris's own `partitionIdToOffset`), or -1
    /// (OFFSET_END) / -2 (OFFSET_BEGINNING).
    next: BTreeMap<i32, i64>,
    /// SHOW ROUTINE LOAD statements answered.
    shows: u64,
    /// The last statement received.
    last_sql: String,
    /// Stream Loads the FE lists, each its 16 columns.
    stream_loads: Vec<Vec<Option<String>>>,
}

/// The FE's zone: UTC+8.
const ZONE_OFFSET_S: i64 = 8 * 3_600;

/// The FE's local wall time `ago` before now, as `NOW()` prints it (whole seconds) or, with
/// `millis`, as the FE prints a load's times (`yyyy-MM-dd HH:mm:ss.SSS`).
fn fe_time(ago: std::time::Duration, millis: bool) -> String {
    let t = chrono::Utc::now() - ago + chrono::Duration::seconds(ZONE_OFFSET_S);
    t.format(if millis {
        "%Y-%m-%d %H:%M:%S%.3f"
    } else {
        "%Y-%m-%d %H:%M:%S"
    })
    .to_string()
}

/// One Routine Load job on a fake FE, and the FE's address.
#[derive(Clone)]
pub struct FeJob {
    state: Arc<Mutex<JobState>>,
    pub addr: SocketAddr,
}

impl FeJob {
    /// Starts a fake FE on a free loopback port with job `name` reading `topic`, RUNNING,
    /// nothing committed yet (`OFFSET_BEGINNING` on each of `partitions`).
    pub async fn start(name: &str, topic: &str, partitions: i32) -> Self {
        let state = Arc::new(Mutex::new(JobState {
            name: name.to_owned(),
            state: "RUNNING",
            pause_time: None,
            reason: String::new(),
            topic: topic.to_owned(),
            next: (0..partitions).map(|p| (p, -2)).collect(),
            shows: 0,
            last_sql: String::new(),
            stream_loads: Vec::new(),
        }));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake FE");
        let addr = listener.local_addr().expect("fake FE address");
        let shared = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (r, w) = stream.into_split();
                let shim = Fe(shared.clone());
                tokio::spawn(async move {
                    if let Err(e) = AsyncMysqlIntermediary::run_on(shim, r, w).await {
                        eprintln!("fake FE: connection ended: {e}");
                    }
                });
            }
        });
        Self { state, addr }
    }

    /// The `pipeline.url` of this FE (database `example_db`).
    pub fn url(&self) -> String {
        format!("mysql://auditor@{}/example_db", self.addr)
    }

    fn with<T>(&self, f: impl FnOnce(&mut JobState) -> T) -> T {
        f(&mut self.state.lock().expect("fake FE state"))
    }

    /// A task committed: every record of `partition` before `next` is loaded.
    pub fn load(&self, partition: i32, next: i64) {
        self.with(|s| {
            s.next.insert(partition, next);
        });
    }

    /// `PAUSE ROUTINE LOAD FOR job` (a user's).
    pub fn pause(&self, at: &str) {
        self.with(|s| {
            s.state = "PAUSED";
            s.pause_time = Some(at.to_owned());
            s.reason = "ErrorReason{code=errCode = 100, msg='User root pauses routine load job'}"
                .to_owned();
        });
    }

    /// `ALTER ROUTINE LOAD FOR job FROM KAFKA ("kafka_partitions" = "P", "kafka_offsets" =
    /// "OFFSET_END")`, with the log end's offset `next` the FE resolved it to: refused
    /// unless PAUSED, as Doris refuses it.
    pub fn alter_offset(&self, partition: i32, next: i64) {
        self.with(|s| {
            assert_eq!(s.state, "PAUSED", "Doris only alters a PAUSED job");
            s.next.insert(partition, next);
        });
    }

    /// PAUSE, ALTER to `next`, RESUME and the first task's commit, all between two reads:
    /// what a read sees is only the job RUNNING further on (PauseTime NULL again).
    pub fn alter_between_reads(&self, partition: i32, next: i64) {
        self.with(|s| {
            s.next.insert(partition, next);
            s.state = "RUNNING";
            s.pause_time = None;
            s.reason = String::new();
        });
    }

    /// `RESUME ROUTINE LOAD FOR job` (Doris resets the pause time).
    pub fn resume(&self) {
        self.with(|s| {
            s.state = "NEED_SCHEDULE";
            s.pause_time = None;
            s.reason = String::new();
        });
    }

    /// `STOP ROUTINE LOAD FOR job`: final.
    pub fn stop(&self) {
        self.with(|s| {
            s.state = "STOPPED";
            s.reason =
                "ErrorReason{code=errCode = 100, msg='User root stop routine load job'}".to_owned();
        });
    }

    /// A Stream Load of `label` into `example_db.table` that succeeded `ago` before now,
    /// reading `total` rows of which it filtered `filtered` (with an error log URL when it
    /// filtered any).
    pub fn add_stream_load(
        &self,
        label: &str,
        table: &str,
        (total, filtered): (u64, u64),
        ago: std::time::Duration,
    ) {
        let now = fe_time(ago, true);
        let row = [
            label,
            "example_db",
            table,
            "10.0.0.7",
            "Success",
            "OK",
            &*if filtered > 0 {
                format!("http://be1:8040/api/_load_error_log?file=__shard_3/error_log_{label}")
            } else {
                "N/A".to_owned()
            },
            &*total.to_string(),
            &*(total - filtered).to_string(),
            &*filtered.to_string(),
            "0",
            "201000",
            &now,
            &now,
            "flink",
            "",
        ]
        .map(|v| Some(v.to_owned()))
        .to_vec();
        self.with(|s| s.stream_loads.push(row));
    }

    /// The scheduler picked the job up again.
    pub fn running(&self) {
        self.with(|s| s.state = "RUNNING");
    }

    /// How many `SHOW ROUTINE LOAD` statements were answered.
    pub fn shows(&self) -> u64 {
        self.with(|s| s.shows)
    }

    /// The last statement the FE received.
    pub fn last_sql(&self) -> String {
        self.with(|s| s.last_sql.clone())
    }
}

/// Doris's `KafkaProgress.getReadableProgress`: next offset minus one, or its markers.
fn progress_json(next: &BTreeMap<i32, i64>) -> String {
    let shown: BTreeMap<String, String> = next
        .iter()
        .map(|(p, &n)| {
            let v = match n {
                0 => "OFFSET_ZERO".to_owned(),
                -1 => "OFFSET_END".to_owned(),
                -2 => "OFFSET_BEGINNING".to_owned(),
                n => (n - 1).to_string(),
            };
            (p.to_string(), v)
        })
        .collect();
    serde_json::to_string(&shown).expect("progress json")
}

const COLUMNS: [&str; 19] = [
    "Id",
    "Name",
    "CreateTime",
    "PauseTime",
    "EndTime",
    "DbName",
    "TableName",
    "State",
    "DataSourceType",
    "CurrentTaskNum",
    "JobProperties",
    "DataSourceProperties",
    "CustomProperties",
    "Statistic",
    "Progress",
    "Lag",
    "ReasonOfStateChanged",
    "ErrorLogUrls",
    "OtherMsg",
];

struct Fe(Arc<Mutex<JobState>>);

#[async_trait::async_trait]
impl<W: AsyncWrite + Send + Unpin> AsyncMysqlShim<W> for Fe {
    type Error = io::Error;

    fn version(&self) -> String {
        // What a Doris 2.1 FE announces.
        "5.7.99".to_owned()
    }

    async fn on_prepare<'a>(
        &'a mut self,
        _: &'a str,
        info: StatementMetaWriter<'a, W>,
    ) -> io::Result<()> {
        info.error(
            ErrorKind::ER_UNKNOWN_ERROR,
            b"prepared statements are not served here",
        )
        .await
    }

    async fn on_execute<'a>(
        &'a mut self,
        _: u32,
        _: ParamParser<'a>,
        results: QueryResultWriter<'a, W>,
    ) -> io::Result<()> {
        results
            .error(ErrorKind::ER_UNKNOWN_ERROR, b"no prepared statement")
            .await
    }

    async fn on_close(&mut self, _: u32) {}

    // The database named at login (`mysql://…/example_db`) or by COM_INIT_DB: accepted. The
    // trait's default answers nothing, and the client waits for its OK forever.
    async fn on_init<'a>(&'a mut self, _: &'a str, w: InitWriter<'a, W>) -> io::Result<()> {
        w.ok().await
    }

    async fn on_query<'a>(
        &'a mut self,
        sql: &'a str,
        results: QueryResultWriter<'a, W>,
    ) -> io::Result<()> {
        let snapshot = {
            let mut s = self.0.lock().expect("fake FE state");
            s.last_sql = sql.to_owned();
            s.clone()
        };
        let trimmed = sql.trim();
        let upper = trimmed.to_ascii_uppercase();
        let all = upper.starts_with("SHOW ALL ");
        let named = trimmed
            .splitn(if all { 6 } else { 5 }, ' ')
            .last()
            .unwrap_or_default();
        let wanted = [
            format!("`{}`", snapshot.name),
            format!("`example_db`.`{}`", snapshot.name),
        ];
        if trimmed.eq_ignore_ascii_case("SET NAMES utf8mb4") || trimmed.starts_with("SET ") {
            return results.completed(OkResponse::default()).await;
        }
        if upper == "SELECT UNIX_TIMESTAMP(), NOW(), @@SYSTEM_TIME_ZONE, @@TIME_ZONE" {
            return clock_answer(results).await;
        }
        if upper.starts_with("SHOW STREAM LOAD ") {
            return stream_load_answer(trimmed, &snapshot.stream_loads, results).await;
        }
        if !upper.starts_with("SHOW ROUTINE LOAD FOR ")
            && !upper.starts_with("SHOW ALL ROUTINE LOAD FOR ")
        {
            let msg = format!("errCode = 2, detailMessage = Syntax error: {trimmed}");
            return results
                .error(ErrorKind::ER_PARSE_ERROR, msg.as_bytes())
                .await;
        }
        let cols = text_columns(&COLUMNS);
        // Another job's name, or an ended job without ALL (Doris leaves those out): the
        // error Doris answers (`RoutineLoadManager`), not an empty result.
        let ended = matches!(snapshot.state, "STOPPED" | "CANCELLED");
        if !wanted.iter().any(|q| q == named) || (ended && !all) {
            let msg = format!(
                "errCode = 2, detailMessage = There is no job named {} in db example_db. Include history? {all}",
                named.trim_matches('`')
            );
            return results
                .error(ErrorKind::ER_UNKNOWN_ERROR, msg.as_bytes())
                .await;
        }
        let mut w = results.start(&cols).await?;
        {
            self.0.lock().expect("fake FE state").shows += 1;
            let s = &snapshot;
            let data_source = serde_json::json!({
                "topic": s.topic,
                "currentKafkaPartitions": s.next.keys().map(|p| p.to_string()).collect::<Vec<_>>().join(","),
                "brokerList": "127.0.0.1:9092",
            })
            .to_string();
            let values: [Option<String>; 19] = [
                Some("10013".into()),
                Some(s.name.clone()),
                Some("2026-12-06 00:00:00".into()),
                s.pause_time.clone(),
                None,
                Some("example_db".into()),
                Some("dns_logs".into()),
                Some(s.state.into()),
                Some("KAFKA".into()),
                Some("1".into()),
                Some(r#"{"format":"csv","maxErrorNum":"0"}"#.into()),
                Some(data_source),
                Some(r#"{"kafka_default_offsets":"OFFSET_BEGINNING"}"#.into()),
                Some(r#"{"receivedBytes":0,"loadedRows":0,"errorRows":0}"#.into()),
                Some(progress_json(&s.next)),
                Some("{}".into()),
                Some(s.reason.clone()),
                Some(String::new()),
                Some(String::new()),
            ];
            for v in values {
                w.write_col(v)?;
            }
            w.end_row().await?;
        }
        w.finish().await
    }
}

fn text_columns(names: &[&str]) -> Vec<Column> {
    names
        .iter()
        .map(|c| Column {
            table: String::new(),
            column: (*c).to_owned(),
            coltype: ColumnType::MYSQL_TYPE_VAR_STRING,
            colflags: ColumnFlags::empty(),
        })
        .collect()
}

/// `SELECT UNIX_TIMESTAMP(), NOW(), @@system_time_zone, @@time_zone`: the FE's clock, its
/// local time in UTC+8 and its zones (the same).
async fn clock_answer<W: AsyncWrite + Send + Unpin>(
    results: QueryResultWriter<'_, W>,
) -> io::Result<()> {
    let cols = text_columns(&[
        "UNIX_TIMESTAMP()",
        "NOW()",
        "@@system_time_zone",
        "@@time_zone",
    ]);
    let mut w = results.start(&cols).await?;
    w.write_col(Some(chrono::Utc::now().timestamp().to_string()))?;
    w.write_col(Some(fe_time(std::time::Duration::ZERO, false)))?;
    w.write_col(Some("Asia/Shanghai"))?;
    w.write_col(Some("Asia/Shanghai"))?;
    w.end_row().await?;
    w.finish().await
}

/// `ShowStreamLoadStmt`'s columns, in order.
const STREAM_LOAD_COLUMNS: [&str; 16] = [
    "Label",
    "Db",
    "Table",
    "ClientIp",
    "Status",
    "Message",
    "Url",
    "TotalRows",
    "LoadedRows",
    "FilteredRows",
    "UnselectedRows",
    "LoadBytes",
    "StartTime",
    "FinishTime",
    "User",
    "Comment",
];

/// `SHOW STREAM LOAD FROM example_db WHERE Label LIKE 'x' ORDER BY FinishTime DESC LIMIT n`:
/// the loads whose label contains `x`, newest first, at most `n`. Another shape is refused
/// (the auditor sends only this one).
async fn stream_load_answer<W: AsyncWrite + Send + Unpin>(
    sql: &str,
    loads: &[Vec<Option<String>>],
    results: QueryResultWriter<'_, W>,
) -> io::Result<()> {
    let shape = sql
        .strip_prefix("SHOW STREAM LOAD FROM `example_db` WHERE Label LIKE '")
        .and_then(|rest| rest.split_once("' ORDER BY FinishTime DESC LIMIT "));
    let Some((value, limit)) = shape else {
        let msg = format!("errCode = 2, detailMessage = Syntax error: {sql}");
        return results
            .error(ErrorKind::ER_PARSE_ERROR, msg.as_bytes())
            .await;
    };
    let limit: usize = limit.trim().parse().unwrap_or(usize::MAX);
    let mut rows: Vec<&Vec<Option<String>>> = loads
        .iter()
        .filter(|r| r[0].as_deref().is_some_and(|l| l.contains(value)))
        .collect();
    rows.sort_by(|a, b| b[13].cmp(&a[13]));
    let cols = text_columns(&STREAM_LOAD_COLUMNS);
    let mut w = results.start(&cols).await?;
    for row in rows.into_iter().take(limit) {
        for v in row {
            w.write_col(v.clone())?;
        }
        w.end_row().await?;
    }
    w.finish().await
}
