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
        if !upper.starts_with("SHOW ROUTINE LOAD FOR ")
            && !upper.starts_with("SHOW ALL ROUTINE LOAD FOR ")
        {
            let msg = format!("errCode = 2, detailMessage = Syntax error: {trimmed}");
            return results
                .error(ErrorKind::ER_PARSE_ERROR, msg.as_bytes())
                .await;
        }
        let cols: Vec<Column> = COLUMNS
            .iter()
            .map(|c| Column {
                table: String::new(),
                column: (*c).to_owned(),
                coltype: ColumnType::MYSQL_TYPE_VAR_STRING,
                colflags: ColumnFlags::empty(),
            })
            .collect();
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
