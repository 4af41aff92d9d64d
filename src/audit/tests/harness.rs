//! An audit loop without a broker or a database server: the in-memory sink, a fake Kafka
//! view, a SQLite store in a temporary directory and a clock the test moves.

use crate::audit::*;
use crate::config::Config;
use crate::kafka::tail::Flow;
use crate::kafka::{Command, Tagged};
use crate::record::{FilterReason, Tag};
use crate::sink::AnySink;
use crate::sink::memory::MemorySink;
use crate::store::{GapFilter, StateFilter};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, channel};

/// The audit's name in every test.
pub const AUDIT: &str = "a";
/// The audit's topic.
pub const TOPIC: &str = "t";
/// `grace` of the test audits.
pub const GRACE_MS: i64 = 10_000;

/// What the fake cluster answers.
#[derive(Default)]
pub struct FakeKafka {
    /// (log start, log end) per partition; a missing entry fails the lookup.
    pub watermarks: Mutex<HashMap<TopicPartition, (Offset, Offset)>>,
    /// The auditor group's commits.
    pub committed: Mutex<kafka_view::Commits>,
    /// The pipeline group's commits; `None`: no pipeline group is configured.
    pub pipeline: Mutex<Option<kafka_view::Commits>>,
    /// Topic ids; a missing entry: the broker gives none (unknown).
    pub topic_ids: Mutex<HashMap<String, String>>,
}

fn unavailable() -> KafkaError {
    KafkaError::MetadataFetch(RDKafkaErrorCode::BrokerTransportFailure)
}

impl KafkaView for FakeKafka {
    fn watermarks(&self, tp: &TopicPartition) -> Result<(Offset, Offset), KafkaError> {
        let w = self.watermarks.lock().unwrap_or_else(|e| e.into_inner());
        w.get(tp).copied().ok_or_else(unavailable)
    }

    fn committed(&self, tps: &[TopicPartition]) -> Result<kafka_view::Commits, KafkaError> {
        let c = self.committed.lock().unwrap_or_else(|e| e.into_inner());
        Ok(tps
            .iter()
            .map(|tp| (tp.clone(), c.get(tp).copied().flatten()))
            .collect())
    }

    fn offset_for_time(&self, _: &TopicPartition, _: i64) -> Result<Option<Offset>, KafkaError> {
        Ok(None)
    }

    fn partitions(&self, _: &str) -> Result<Vec<i32>, KafkaError> {
        Ok(vec![0])
    }

    fn topic_id(&self, topic: &str) -> Result<Option<String>, KafkaError> {
        let ids = self.topic_ids.lock().unwrap_or_else(|e| e.into_inner());
        Ok(ids.get(topic).cloned())
    }

    fn pipeline_committed(
        &self,
        tps: &[TopicPartition],
    ) -> Option<Result<kafka_view::Commits, KafkaError>> {
        let p = self.pipeline.lock().unwrap_or_else(|e| e.into_inner());
        p.as_ref().map(|c| {
            Ok(tps
                .iter()
                .map(|tp| (tp.clone(), c.get(tp).copied().flatten()))
                .collect())
        })
    }
}

/// One audit and the handles a test drives it with.
pub struct Harness {
    /// The loop under test.
    pub audit: Audit,
    /// Rows the "pipeline" wrote.
    pub sink: Arc<MemorySink>,
    /// The cluster's answers.
    pub kafka: Arc<FakeKafka>,
    /// What the loop asked the tailing thread to do (commits, re-positions).
    pub commands: Receiver<Command>,
    /// The loop's clock.
    pub clock: Clock,
    /// The metric families the loop reports to.
    pub families: Arc<Metrics>,
    /// The gap store.
    pub store: Arc<Store>,
    _dir: tempfile::TempDir,
}

/// An offset_columns audit of topic `t`; `extra` adds keys to its `[[audits]]` table.
pub fn harness(extra: &str) -> Harness {
    harness_matching(extra, r#"strategy = "offset_columns""#)
}

/// A key_columns audit of topic `t` on its one field `x` (keys: [`keyed`]); `extra` adds
/// keys to its `[[audits]]` table.
pub fn keyed_harness(extra: &str) -> Harness {
    harness_matching(extra, "strategy = \"key_columns\"\nkey = [\"x\"]")
}

fn harness_matching(extra: &str, matching: &str) -> Harness {
    let toml = format!(
        r#"
[kafka]
brokers = "127.0.0.1:9"
[[audits]]
name = "{AUDIT}"
topics = ["{TOPIC}"]
grace = "{}s"
{extra}
[audits.record]
format = "csv"
fields = ["x"]
[audits.match]
{matching}
[audits.sink]
kind = "mysql"
url = "mysql://u@h:3306/db"
table = "t1"
"#,
        GRACE_MS / 1000
    );
    let mut cfg = Config::from_toml_str(&toml).expect("test config");
    let config = cfg.audits.remove(0);
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(dir.path()).expect("store"));
    let families = Arc::new(Metrics::new());
    let sink = Arc::new(MemorySink::new());
    let kafka = Arc::new(FakeKafka::default());
    if config.pipeline_group.is_some() {
        *kafka.pipeline.lock().expect("lock") = Some(Default::default());
    }
    let (tx, commands) = channel();
    let clock = Clock::manual(1_000_000_000);
    let decoder = crate::record::decoder_for(&config).expect("decoder");
    let deps = AuditDeps {
        kafka: cfg.kafka.clone(),
        group: "auditor".to_string(),
        sink: AnySink::Memory(sink.clone()),
        store: store.clone(),
        metrics: families.clone(),
        status: StatusBoard::new(),
        handover_topic: None,
        advertised_url: None,
        config,
    };
    let wiring = Wiring {
        kafka_view: kafka.clone(),
        commands: tx,
        watermarks: Default::default(),
        last_stable: Default::default(),
        flow: Arc::new(Flow::new(1_000_000)),
        admin: None,
        handover: None,
        decoder,
        cancel: CancellationToken::new(),
        clock: clock.clone(),
        dead_letters: None,
    };
    Harness {
        audit: Audit::new(deps, wiring),
        sink,
        kafka,
        commands,
        clock,
        families,
        store,
        _dir: dir,
    }
}

/// A gap's (partition, first offset, last offset, shared key): what the tests compare.
pub fn span(g: &crate::gap::Gap) -> (i32, Offset, Offset, bool) {
    (g.partition, g.first_offset, g.last_offset, g.shared_key)
}

/// Partition `p` of the test topic.
pub fn tp(p: i32) -> TopicPartition {
    TopicPartition::new(TOPIC, p)
}

/// Expected records at `offsets` of partition 0.
pub fn expected(offsets: std::ops::Range<Offset>) -> Vec<Tagged> {
    offsets
        .map(|offset| Tagged {
            topic: Arc::from(TOPIC),
            partition: 0,
            offset,
            timestamp_ms: Some(1),
            tag: Tag::Expected { key: None },
        })
        .collect()
}

/// A record of partition 0 the filter dropped.
pub fn filtered(offset: Offset, reason: FilterReason) -> Tagged {
    Tagged {
        topic: Arc::from(TOPIC),
        partition: 0,
        offset,
        timestamp_ms: Some(1),
        tag: Tag::Filtered(reason),
    }
}

impl Harness {
    /// Assigns partition 0 with the log at `(start, end)` and reads `records`.
    pub async fn assign_and_read(&mut self, log: (Offset, Offset), records: Vec<Tagged>) {
        self.kafka
            .watermarks
            .lock()
            .expect("lock")
            .insert(tp(0), log);
        let starts = self.audit.assign(vec![tp(0)]).await;
        assert_eq!(starts, vec![(tp(0), log.1)], "a first start at the log end");
        self.audit.ingest(records);
    }

    /// The sink holds these offsets of partition 0.
    pub fn in_sink(&self, offsets: impl IntoIterator<Item = Offset>) {
        for o in offsets {
            self.sink.insert_offset(TOPIC, 0, o);
        }
    }

    /// One counter of partition 0 (`records_lost`, ...).
    pub fn counter(&self, f: impl Fn(&Metrics) -> &prometheus::IntCounterVec) -> u64 {
        self.counter_of(0, f)
    }

    /// One counter of partition `p`.
    pub fn counter_of(&self, p: i32, f: impl Fn(&Metrics) -> &prometheus::IntCounterVec) -> u64 {
        f(&self.families)
            .with_label_values(&[AUDIT, TOPIC, &p.to_string()])
            .get()
    }

    /// The stored gaps as [`span`]s, sorted.
    pub fn gap_spans(&self) -> Vec<(i32, Offset, Offset, bool)> {
        let mut spans: Vec<_> = self.stored_gaps().iter().map(span).collect();
        spans.sort_unstable();
        spans
    }

    /// Every offset commit the loop asked for so far, in order.
    pub fn commits(&self) -> Vec<Vec<(TopicPartition, Offset)>> {
        self.commands
            .try_iter()
            .filter_map(|c| match c {
                Command::Commit(o) => Some(o),
                Command::Reposition(_) => None,
            })
            .collect()
    }

    /// The gaps the store holds for this audit.
    pub fn stored_gaps(&self) -> Vec<crate::gap::Gap> {
        self.store
            .list_gaps(&GapFilter {
                state: StateFilter::All,
                audit: Some(AUDIT.to_string()),
            })
            .expect("list gaps")
    }

    /// Makes every write of progress fail (a full disk, a broken file) until [`Self::heal`].
    pub fn break_store(&self) {
        self.sql(
            "CREATE TRIGGER refuse_progress BEFORE INSERT ON progress \
             BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;",
        );
    }

    /// Undoes [`Self::break_store`].
    pub fn heal_store(&self) {
        self.sql("DROP TRIGGER refuse_progress;");
    }

    /// Makes reading the acknowledgement log fail (as if an ack landed just after the round
    /// read it) until [`Self::restore_ack_log`].
    pub fn hide_ack_log(&self) {
        self.sql("ALTER TABLE ack_log RENAME TO ack_log_hidden;");
    }

    /// Undoes [`Self::hide_ack_log`].
    pub fn restore_ack_log(&self) {
        self.sql("ALTER TABLE ack_log_hidden RENAME TO ack_log;");
    }

    /// The directory of the store's file.
    pub fn store_dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    fn sql(&self, sql: &str) {
        let conn =
            rusqlite::Connection::open(self._dir.path().join(crate::store::DB_FILE)).expect("db");
        conn.execute_batch(sql).expect("sql");
    }
}
