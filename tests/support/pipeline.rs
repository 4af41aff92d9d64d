//! [`Scenario`] (fresh names for one test) and the pipeline stand-in it starts.

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset as KOffset, TopicPartitionList};
use std::time::{Duration, Instant};

use super::*;

/// Everything one end-to-end test needs, each name fresh: a topic, a sink table, the
/// pipeline's consumer group, the auditor's own group, a state dir and a producer.
pub struct Scenario {
    pub topic: String,
    /// The sink table the pipeline stand-in writes and the auditor verifies.
    pub table: String,
    pub shape: TableShape,
    /// The pipeline's consumer group, which the auditor reads (`pipeline_group`).
    pub pipeline_group: String,
    /// The auditor's own consumer group.
    pub auditor_group: String,
    pub state: tempfile::TempDir,
    pub db: Db,
    /// URL of the database holding `table`.
    pub db_url: String,
    pub producer: TestProducer,
}

impl Scenario {
    /// One partition and a [`TableShape::DnsWithCoordinates`] table in the test database.
    pub async fn new(name: &str) -> Self {
        Self::with_partitions(name, 1).await
    }

    pub async fn with_partitions(name: &str, partitions: i32) -> Self {
        let db = Db::new();
        let table = unique(&format!("{name}_t"));
        db.create_dns_table(&table).await;
        Self::build(
            name,
            partitions,
            db,
            mysql_url(),
            table,
            TableShape::DnsWithCoordinates,
        )
        .await
    }

    /// `partitions` partitions and a table of the README's seed DDL
    /// ([`Db::create_seed_ddl_table`]: `time DATETIME`, VARCHAR key columns) in the test
    /// database: the shape key_columns audits meet (issue 34).
    pub async fn with_seed_ddl(name: &str, partitions: i32) -> Self {
        let db = Db::new();
        let table = unique(&format!("{name}_t"));
        db.create_seed_ddl_table(&table).await;
        Self::build(name, partitions, db, mysql_url(), table, TableShape::Seed).await
    }

    /// `partitions` partitions and a seed-DDL table with a PRIMARY KEY on the seed key,
    /// which the pipeline stand-in writes with an upsert ([`TableShape::SeedUpsert`]).
    pub async fn with_upsert_table(name: &str, partitions: i32) -> Self {
        let db = Db::new();
        let table = unique(&format!("{name}_t"));
        db.create_upsert_table(&table).await;
        Self::build(
            name,
            partitions,
            db,
            mysql_url(),
            table,
            TableShape::SeedUpsert,
        )
        .await
    }

    /// One partition and the seed's own table ([`Db::create_seed_table`]) in a database of
    /// its own, so the documented table name is used as is.
    pub async fn with_seed_table(name: &str) -> Self {
        let dbname = unique("gap_auditor_test_seed");
        let url = Db::new().create_seed_table(&dbname).await;
        let db = Db::at(&url);
        Self::build(name, 1, db, url, SEED_TABLE.to_string(), TableShape::Seed).await
    }

    async fn build(
        name: &str,
        partitions: i32,
        db: Db,
        db_url: String,
        table: String,
        shape: TableShape,
    ) -> Self {
        let topic = unique(name);
        create_topic(&topic, partitions).await;
        Self {
            producer: TestProducer::new(&topic),
            topic,
            table,
            shape,
            pipeline_group: unique(&format!("{name}_pipeline")),
            auditor_group: unique("auditor"),
            state: tempfile::tempdir().expect("tempdir"),
            db,
            db_url,
        }
    }

    /// Sends `values` to partition 0, one record per batch; returns their offsets.
    pub async fn send(&self, values: &[String]) -> Vec<i64> {
        self.producer.send_all(0, values).await
    }

    /// Writes one record's row as this scenario's pipeline would ([`TableShape`]): with
    /// its coordinates, as the seed's nine fields, or as an upsert of them.
    pub async fn write_row(&self, line: &[u8], partition: i32, offset: i64) {
        match self.shape {
            TableShape::DnsWithCoordinates => {
                self.db
                    .insert_line(&self.table, line, partition, offset)
                    .await
            }
            TableShape::Seed => self.db.insert_seed_line(&self.table, line).await,
            TableShape::SeedUpsert => self.db.upsert_seed_line(&self.table, line).await,
        }
    }

    /// Rows in the sink table.
    pub async fn rows(&self) -> i64 {
        self.db.count(&self.table).await
    }

    /// Runs `statement` on the test database (`{table}` in it names this scenario's table).
    pub async fn exec(&self, statement: &str) {
        use mysql_async::prelude::Queryable;
        let q = statement.replace("{table}", &format!("`{}`", self.table));
        let mut c = self.db.pool.get_conn().await.expect("conn");
        c.query_drop(&q)
            .await
            .unwrap_or_else(|e| panic!("{q}: {e}"));
    }

    /// The audit of this scenario, with the pipeline group set, state in the state dir and
    /// the HTTP server on a free port.
    pub fn spec<'a>(&'a self, strategy: &'a str, grace: &'a str, verify: &'a str) -> AuditSpec<'a> {
        AuditSpec {
            topic: &self.topic,
            table: &self.table,
            pipeline_group: Some(&self.pipeline_group),
            strategy,
            grace,
            verify_interval: verify,
            state_dir: self.state.path(),
            group: &self.auditor_group,
            listen: "127.0.0.1:0",
        }
    }

    /// An in-process auditor running [`Scenario::spec`].
    pub async fn start_auditor(&self, strategy: &str, grace: &str, verify: &str) -> Auditor {
        Auditor::start(&config_toml(&self.spec(strategy, grace, verify))).await
    }

    /// A pipeline stand-in of this scenario's pipeline group, from offset 0 of partition 0
    /// into this scenario's table (see [`Pipeline`] for the rest).
    pub fn pipeline(&self) -> Pipeline<'static> {
        Pipeline {
            group: self.pipeline_group.clone(),
            topic: self.topic.clone(),
            partition: 0,
            start: 0,
            count: 0,
            db: self.db.clone(),
            table: self.table.clone(),
            shape: self.shape,
            copies: Box::new(|_| 1),
            commit_every: 1,
            pause_after_commit: Duration::ZERO,
            write_after_commit: None,
            deadline: Duration::from_secs(60),
            commit_start: false,
            map_origin: false,
        }
    }

    /// The seed incident on partition 0: the pipeline writes 0–1 and commits 2; it stops;
    /// 2–3 are produced; it restarts "from latest" (at 4, the end the test knows from the
    /// producer's acks), commits 4 at once like Flink's first checkpoint after the restart,
    /// and writes 4–5, which are produced once the auditor has seen the 2 → 4 jump.
    /// `seen_commit(o)` tells when the auditor has observed the pipeline's commit `o`: a
    /// real auditor runs long before an incident and polls faster than a pipeline restarts,
    /// so it sees commit 2, then the jump to 4, before anything else happens.
    pub async fn play_seed_incident<F, Fut>(&self, seen_commit: F)
    where
        F: Fn(i64) -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let lines = dns_lines(0..6);
        assert_eq!(self.send(&lines[0..2]).await, vec![0, 1]);
        self.pipeline().records(2).run().await;
        let deadline = Instant::now() + Duration::from_secs(60);
        let wait_seen = |offset: i64| {
            let seen = &seen_commit;
            async move {
                while !seen(offset).await {
                    assert!(
                        Instant::now() < deadline,
                        "the auditor never saw the pipeline's commit {offset}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        wait_seen(2).await;
        // The job is killed; records arrive meanwhile.
        assert_eq!(self.send(&lines[2..4]).await, vec![2, 3]);
        // Restart from latest-offset: the end is 4.
        let restarted = tokio::spawn(self.pipeline().start_at(4).commit_start().records(2).run());
        wait_seen(4).await;
        assert_eq!(self.send(&lines[4..6]).await, vec![4, 5]);
        restarted.await.expect("pipeline restarted");
    }

    /// A drop in flight on partition 0: records 0–9 sent, the job's start (0) committed
    /// and seen by `a`, then `between()` (what else happened before the checkpoint), then
    /// one checkpoint over 0–9 that writes all but record 5 and commits 10; returns once
    /// `a` has confirmed 9 and lost 1 (the gap is `dropped_in_flight`, 5–5, commit 0 → 10).
    pub async fn play_drop_in_flight(&self, a: &Auditor, between: impl FnOnce()) {
        self.send(&dns_lines(0..10)).await;
        self.pipeline().commit_start().records(0).run().await;
        until_seen(a, 0).await;
        between();
        self.pipeline()
            .records(10)
            .copies(|o| usize::from(o != 5))
            .commit_every(10, Duration::ZERO)
            .run()
            .await;
        let topic = &self.topic;
        a.wait_for(30, "9 confirmed, 1 lost", |a| {
            a.confirmed(topic, 0) == 9 && a.lost(topic, 0) == 1
        })
        .await;
    }
}

/// Runs `check` every `every` for `how_long` (it asserts: a condition that must hold at
/// every moment, not only at the end).
pub async fn keep_checking(how_long: Duration, every: Duration, check: impl Fn()) {
    let until = Instant::now() + how_long;
    while Instant::now() < until {
        check();
        tokio::time::sleep(every).await;
    }
}

type Check<'a> = Box<dyn Fn() + Send + Sync + 'a>;

/// The pipeline stand-in (made by [`Scenario::pipeline`]): consumer group `group`, reads
/// `partition` from `start`, and for each record writes `copies(offset)` rows (0 = the
/// pipeline loses it, 2 = a duplicate) to `table`, then commits offset+1 (like Flink's
/// exactly-once sink committing on checkpoint; the group passes lost records too, as a real
/// lossy pipeline does). Stops after `count` records. Uses assign(): it never joins the
/// group, so the group has committed offsets but no member, and never waits for a rebalance.
pub struct Pipeline<'a> {
    group: String,
    topic: String,
    partition: i32,
    start: i64,
    count: usize,
    db: Db,
    table: String,
    shape: TableShape,
    copies: Box<dyn Fn(i64) -> usize + Send + Sync + 'a>,
    commit_every: usize,
    pause_after_commit: Duration,
    write_after_commit: Option<(Duration, Check<'a>)>,
    deadline: Duration,
    commit_start: bool,
    map_origin: bool,
}

impl<'a> Pipeline<'a> {
    pub fn partition(mut self, partition: i32) -> Self {
        self.partition = partition;
        self
    }

    /// Reads another topic (e.g. a repair topic the pipeline also consumes).
    pub fn reading(mut self, topic: &str) -> Self {
        self.topic = topic.to_string();
        self
    }

    /// The offset it starts reading at ("restart from latest" = the end the test knows).
    pub fn start_at(mut self, offset: i64) -> Self {
        self.start = offset;
        self
    }

    /// How many records it reads before it stops.
    pub fn records(mut self, count: usize) -> Self {
        self.count = count;
        self
    }

    /// Rows written per record, by offset (default 1).
    pub fn copies(mut self, copies: impl Fn(i64) -> usize + Send + Sync + 'a) -> Self {
        self.copies = Box::new(copies);
        self
    }

    /// Commits only after every `n`th record (and the last), then pauses `pause`: the
    /// pipeline advances in steps.
    pub fn commit_every(mut self, n: usize, pause: Duration) -> Self {
        self.commit_every = n;
        self.pause_after_commit = pause;
        self
    }

    /// Commits each record FIRST and writes its row `delay` later, running `check` every
    /// 50 ms meanwhile: a sink whose writes become visible after a delay.
    pub fn write_after_commit(
        mut self,
        delay: Duration,
        check: impl Fn() + Send + Sync + 'a,
    ) -> Self {
        self.write_after_commit = Some((delay, Box::new(check)));
        self
    }

    /// Commits its start offset as soon as it starts, before reading anything — what a
    /// Flink job restarted from `latest` does at its first checkpoint.
    pub fn commit_start(mut self) -> Self {
        self.commit_start = true;
        self
    }

    /// Writes a record carrying the `gap-auditor.origin` header (`topic/partition/offset`)
    /// with the partition and offset it names, as a Flink SQL job mapping its `headers`
    /// metadata column does ([audits.replay] pipeline_maps_origin); others as read.
    pub fn map_origin(mut self) -> Self {
        self.map_origin = true;
        self
    }

    /// Fails the test when it has not read `count` records by then (default 60 s).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    async fn write(&self, payload: &Option<Vec<u8>>, offset: i64, origin: Option<(i32, i64)>) {
        let Some(p) = payload else { return };
        let (partition, row_offset) = origin.unwrap_or((self.partition, offset));
        for _ in 0..(self.copies)(offset) {
            match self.shape {
                TableShape::DnsWithCoordinates => {
                    self.db
                        .insert_line(&self.table, p, partition, row_offset)
                        .await
                }
                TableShape::Seed => self.db.insert_seed_line(&self.table, p).await,
                TableShape::SeedUpsert => self.db.upsert_seed_line(&self.table, p).await,
            }
        }
    }

    /// Runs it; returns the offsets it read, in order.
    pub async fn run(self) -> Vec<i64> {
        let consumer: BaseConsumer = group_client(&self.group)
            .set("isolation.level", "read_committed")
            .create()
            .expect("pipeline consumer");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, self.partition, KOffset::Offset(self.start))
            .expect("tpl");
        consumer.assign(&tpl).expect("assign");
        if self.commit_start {
            commit_retrying(&consumer, &tpl, "commit the start offset");
        }
        let deadline = Instant::now() + self.deadline;
        let mut seen = Vec::new();
        while seen.len() < self.count {
            assert!(
                Instant::now() < deadline,
                "pipeline stand-in read only {}/{} records: {seen:?}",
                seen.len(),
                self.count
            );
            // A poll error is librdkafka reporting a connection event (AllBrokersDown when
            // the broker dropped its connections for a moment under load): it reconnects by
            // itself, as a real pipeline's consumer goes on. The deadline above bounds it.
            let msg = match consumer.poll(Duration::from_millis(50)) {
                Some(Ok(m)) => {
                    let origin = self.map_origin.then(|| origin_of(&m)).flatten();
                    Some((m.payload().map(<[u8]>::to_vec), m.offset(), origin))
                }
                Some(Err(e)) => {
                    eprintln!("pipeline stand-in: poll: {e} (librdkafka reconnects; polling on)");
                    None
                }
                None => None,
            };
            let Some((payload, offset, origin)) = msg else {
                tokio::task::yield_now().await;
                continue;
            };
            if self.write_after_commit.is_none() {
                self.write(&payload, offset, origin).await;
            }
            seen.push(offset);
            if seen.len().is_multiple_of(self.commit_every) || seen.len() == self.count {
                let mut c = TopicPartitionList::new();
                c.add_partition_offset(&self.topic, self.partition, KOffset::Offset(offset + 1))
                    .expect("tpl");
                commit_retrying(&consumer, &c, "pipeline commit");
                if !self.pause_after_commit.is_zero() {
                    tokio::time::sleep(self.pause_after_commit).await;
                }
            }
            if let Some((delay, check)) = &self.write_after_commit {
                keep_checking(*delay, Duration::from_millis(50), check).await;
                self.write(&payload, offset, origin).await;
            }
        }
        seen
    }
}

/// Partition and offset named by a record's `gap-auditor.origin` header
/// (`topic/partition/offset`; topic names hold no `/`), split as a pipeline would.
fn origin_of(m: &rdkafka::message::BorrowedMessage<'_>) -> Option<(i32, i64)> {
    use rdkafka::message::Headers;
    let value = m
        .headers()?
        .iter()
        .find(|h| h.key == gap_auditor::commands::replay::ORIGIN_HEADER)?
        .value?;
    let text = std::str::from_utf8(value).ok()?;
    let mut parts = text.rsplitn(3, '/');
    let offset = parts.next()?.parse().ok()?;
    let partition = parts.next()?.parse().ok()?;
    Some((partition, offset))
}
