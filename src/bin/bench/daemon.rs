//! The real daemon binary for the end-to-end figures (key_columns and offset_columns end to
//! end, detection latency, scale): its
//! config, process, /metrics, RSS and debug log; plus the pipeline stand-in's pieces
//! (topics, sink table, producer, committing consumer).

// The integration tests' config builder, so the bench's daemon runs the same
// configuration shape the suite checks.
#[path = "../../../tests/support/config_toml.rs"]
mod config_toml;

use anyhow::{Context, Result, bail};
use config_toml::{AuditToml, ConfigToml};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Offset as KOffset, TopicPartitionList};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The daemon binary: `--daemon`, else `gap-auditor` next to this bench binary.
pub fn binary(arg: Option<&Path>) -> Result<PathBuf> {
    let path = match arg {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .context("locating the bench binary")?
            .with_file_name("gap-auditor"),
    };
    if !path.is_file() {
        bail!(
            "daemon binary {} not found: build it first (`cargo build --release --bins`) or pass --daemon",
            path.display()
        );
    }
    Ok(path)
}

/// Creates `topics`, each with `partitions` partitions, in one admin request.
pub async fn create_topics(brokers: &str, topics: &[String], partitions: i32) -> Result<()> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()?;
    let new: Vec<NewTopic> = topics
        .iter()
        .map(|t| NewTopic::new(t, partitions, TopicReplication::Fixed(1)))
        .collect();
    let r = admin
        .create_topics(
            &new,
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await?;
    for x in r {
        x.map_err(|(t, e)| anyhow::anyhow!("create topic {t}: {e}"))?;
    }
    Ok(())
}

/// Deletes the topics a bench created (best effort: the shared broker outlives the run).
pub async fn delete_topics(brokers: &str, topics: &[String]) {
    let admin: Result<AdminClient<DefaultClientContext>, _> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create();
    let Ok(admin) = admin else { return };
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    match admin.delete_topics(&names, &opts).await {
        Ok(results) => {
            for r in results {
                if let Err((t, e)) = r {
                    eprintln!("could not delete topic {t}: {e}");
                }
            }
        }
        Err(e) => eprintln!("could not delete topics: {e}"),
    }
}

/// A producer that sends each record at once (`linger.ms` 0: the latency figure starts
/// from the commit after the send, so a record must not wait for a batch) and reports where
/// it landed. (It used to force one record per batch for tansu, whose ListOffsets "latest"
/// was wrong for multi-record batches; on Apache Kafka the end offsets are right.)
pub fn producer(brokers: &str) -> Result<FutureProducer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "0")
        .create()?)
}

/// Sends one record and returns its offset.
pub async fn send(p: &FutureProducer, topic: &str, partition: i32, line: &str) -> Result<i64> {
    let rec = FutureRecord::<(), str>::to(topic)
        .partition(partition)
        .payload(line);
    match p.send(rec, Duration::from_secs(30)).await {
        Ok(d) => Ok(d.offset),
        Err((e, _)) => bail!("produce to {topic}/{partition}: {e}"),
    }
}

/// The pipeline group's committer: commits offsets without joining the group (assign-less
/// commits), as the test suite's `Pipeline` stand-in does.
pub fn committer(brokers: &str, group: &str) -> Result<BaseConsumer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()?)
}

/// Commits `next` (the offset after the last processed record) for each (topic, partition).
pub fn commit(c: &BaseConsumer, offsets: &[(String, i32, i64)]) -> Result<()> {
    let mut tpl = TopicPartitionList::new();
    for (t, p, next) in offsets {
        tpl.add_partition_offset(t, *p, KOffset::Offset(*next))?;
    }
    c.commit(&tpl, CommitMode::Sync)
        .context("pipeline commit")?;
    Ok(())
}

/// Commits the pipeline group `group` past every one of the `n` records [`crate::tail::produce`]
/// wrote round-robin to `topic` (as if the pipeline had processed them all).
pub fn commit_past_all(brokers: &str, group: &str, topic: &str, n: u64) -> Result<()> {
    let p = crate::util::PARTITIONS;
    let per_partition: Vec<(String, i32, i64)> = (0..p)
        .map(|i| {
            let count = (n + (p - 1 - i) as u64) / p as u64;
            (topic.to_string(), i, count as i64)
        })
        .collect();
    commit(&committer(brokers, group)?, &per_partition)
}

/// The settings of one audit that the benches vary.
pub struct Spec<'a> {
    /// Topics audited.
    pub topics: &'a [String],
    /// Sink table (columns kafka_topic, kafka_partition, kafka_offset).
    pub table: &'a str,
    /// The pipeline's consumer group.
    pub pipeline_group: &'a str,
    /// `grace`.
    pub grace: &'a str,
    /// `verify_interval`.
    pub verify_interval: &'a str,
    /// The `[audits.match]` table's body: [`OFFSET_MATCH`] for offset_columns.
    pub matching: &'a str,
    /// `max_pending` (the daemon's default when `None`).
    pub max_pending: Option<u64>,
}

/// The offset_columns match of the latency and scale runs (sink columns as
/// [`create_sink_table`] makes them).
pub const OFFSET_MATCH: &str = r#"strategy = "offset_columns"
topic_column = "kafka_topic"
partition_column = "kafka_partition"
offset_column = "kafka_offset""#;

/// The seed's key_columns match (sink columns as [`seed_table_sql`] creates them).
pub const KEY_MATCH: &str = r#"strategy = "key_columns"
key = ["client_ip","domain","time"]"#;

/// A daemon process running one audit against MariaDB.
pub struct Daemon {
    child: Child,
    /// `host:port` of its HTTP server.
    pub addr: String,
    /// Its stderr (JSON log lines).
    pub log: PathBuf,
    dir: PathBuf,
    http: reqwest::Client,
}

impl Daemon {
    /// Writes the config and starts `gap-auditor run -c` with JSON logs at debug level for
    /// the audit loop (the per-round timing line).
    pub fn start(bin: &Path, brokers: &str, mysql: &str, spec: &Spec<'_>) -> Result<Daemon> {
        let dir = std::env::temp_dir().join(crate::util::unique("gap_auditor_bench"));
        std::fs::create_dir_all(&dir)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let addr = format!("127.0.0.1:{port}");
        let mut audit = AuditToml::new("bench", spec.topics)
            .set("pipeline_group", spec.pipeline_group)
            .set("grace", spec.grace)
            .set("verify_interval", spec.verify_interval);
        if let Some(n) = spec.max_pending {
            audit = audit.set("max_pending", n);
        }
        let config = ConfigToml::new(brokers)
            .test_group(&crate::util::unique("bench_auditor"))
            .server("listen", addr.as_str())
            .state_path(dir.join("state.db"))
            .audit(
                audit
                    .seed_csv()
                    .match_lines(spec.matching)
                    .sql_sink("mysql", mysql, spec.table)
                    .sink("query_timeout", "30s"),
            )
            .render();
        let cfg = dir.join("gap-auditor.toml");
        std::fs::write(&cfg, config)?;
        let log = dir.join("daemon.log");
        let child = Command::new(bin)
            .args(["run", "-c"])
            .arg(&cfg)
            .env(
                "GAP_AUDITOR_LOG",
                "info,gap_auditor::audit=debug,rdkafka=warn",
            )
            .env("GAP_AUDITOR_LOG_FORMAT", "json")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Daemon {
            child,
            addr,
            log,
            dir,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()?,
        })
    }

    /// The sum over all series of metric `name` (0 when absent).
    pub async fn metric(&self, name: &str) -> Result<f64> {
        Ok(self.metrics(&[name]).await?[0])
    }

    /// The sums of several metrics from one scrape (0 for each absent one), in `names` order.
    pub async fn metrics(&self, names: &[&str]) -> Result<Vec<f64>> {
        let text = self
            .http
            .get(format!("http://{}/metrics", self.addr))
            .send()
            .await?
            .text()
            .await?;
        Ok(names.iter().map(|n| sum_metric(&text, n)).collect())
    }

    /// Waits until `metric(name) >= at_least`.
    pub async fn wait_metric(
        &mut self,
        name: &str,
        at_least: f64,
        within: Duration,
    ) -> Result<f64> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("daemon exited ({status}); log: {}", self.log.display());
            }
            if let Ok(v) = self.metric(name).await
                && v >= at_least
            {
                return Ok(v);
            }
            if Instant::now() > deadline {
                bail!(
                    "{name} did not reach {at_least} within {within:?}; log: {}",
                    self.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// CPU time (user + system) the daemon process has used so far.
    pub fn cpu(&self) -> Duration {
        crate::util::cpu_of(&format!("/proc/{}/stat", self.child.id()))
    }

    /// Resident set size of the daemon process, bytes.
    pub fn rss(&self) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|k| k.parse::<u64>().ok())
            })
            .map_or(0, |kb| kb * 1024)
    }

    /// (partitions, took_ms) of every "verify round finished" debug line so far.
    pub fn rounds(&self) -> Vec<(u64, u64)> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            // JSON log lines carry the event's fields at the top level (src/logging.rs).
            .filter(|v| v["message"] == "verify round finished")
            .filter_map(|v| Some((v["partitions"].as_u64()?, v["took_ms"].as_u64()?)))
            .collect()
    }

    /// (took_ms, verified_ms) of every "verify round finished" line that verified
    /// something (took at least 50 ms): the round's whole time, and its time before the store
    /// write.
    pub fn round_split(&self) -> Vec<(u64, u64)> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            // Top-level fields, as in `rounds` (the JSON logs are flat since src/logging.rs:
            // reading `fields` here reported "0 rounds" from then on).
            .filter(|v| v["message"] == "verify round finished")
            .filter_map(|v| Some((v["took_ms"].as_u64()?, v["verified_ms"].as_u64()?)))
            .filter(|(took, _)| *took >= 50)
            .collect()
    }

    /// Stops it with SIGTERM (a clean shutdown), SIGKILL after 20 s; removes its files.
    pub async fn stop(mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sums the samples of `name` in a Prometheus text exposition.
pub fn sum_metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>()
        // An empty f64 sum is -0.0, which prints as "-0".
        + 0.0
}

/// Creates the offset_columns sink table with the recommended index.
pub async fn create_sink_table(conn: &mut mysql_async::Conn, table: &str) -> Result<()> {
    use mysql_async::prelude::Queryable;
    conn.query_drop(format!(
        "CREATE TABLE {table} (\
           kafka_topic VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
           kafka_partition INT NOT NULL, kafka_offset BIGINT NOT NULL, \
           line VARCHAR(1024) NOT NULL, \
           KEY idx_topic_partition_offset (kafka_topic, kafka_partition, kafka_offset)) \
         ENGINE=InnoDB"
    ))
    .await
    .with_context(|| format!("creating {table}"))?;
    Ok(())
}

/// The `CREATE TABLE` of the seed's table (its Doris DDL for MariaDB: `time` a DATETIME),
/// key columns in byte-exact `utf8mb4_nopad_bin`; the key index docs/SINK-DDL.md recommends
/// is added after the load.
pub fn seed_table_sql(table: &str) -> String {
    format!(
        "CREATE TABLE {table} (\
           client_ip VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL, \
           domain VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL, \
           time DATETIME NOT NULL, target_ip VARCHAR(64), rcode VARCHAR(16), \
           query_type VARCHAR(16), authority_record VARCHAR(512), add_msg VARCHAR(512), \
           dns_ip VARCHAR(64)) ENGINE=InnoDB"
    )
}

/// Median and maximum of `xs` (0, 0 when empty).
pub fn median_max(xs: &mut [f64]) -> (f64, f64) {
    if xs.is_empty() {
        return (0.0, 0.0);
    }
    xs.sort_by(f64::total_cmp);
    let mid = xs.len() / 2;
    let median = if xs.len().is_multiple_of(2) {
        (xs[mid - 1] + xs[mid]) / 2.0
    } else {
        xs[mid]
    };
    (median, xs[xs.len() - 1])
}

/// Rows loaded server-side per statement (MariaDB's SEQUENCE engine).
const LOAD_CHUNK: u64 = 500_000;

/// Loads the sink table of an end-to-end run: `insert(from, to)` is the statement for rows
/// `from..=to`, then `index` (its ALTER TABLE clause) and ANALYZE. Returns the time it took.
pub async fn load_table(
    conn: &mut mysql_async::Conn,
    table: &str,
    n: u64,
    insert: impl Fn(u64, u64) -> String,
    index: &str,
) -> Result<Duration> {
    use mysql_async::prelude::Queryable;
    let load = Instant::now();
    let mut from = 0u64;
    while from < n {
        let to = (from + LOAD_CHUNK).min(n) - 1;
        conn.query_drop(insert(from, to))
            .await
            .with_context(|| format!("loading rows {from}..={to}"))?;
        from = to + 1;
    }
    conn.query_drop(format!("ALTER TABLE {table} {index}"))
        .await?;
    conn.query_drop(format!("ANALYZE TABLE {table}")).await?;
    Ok(load.elapsed())
}

/// Passes of the bare consumer an end-to-end baseline takes the median of.
pub const BARE_PASSES: usize = 3;

/// The bare consumer on `topic` in this process, [`BARE_PASSES`] times: the median pass's
/// rate and the CPU that pass took. One pass over a million records lasts under half a
/// second, and this VM's speed moves within that (single passes read 1.8 to 2.9 M rec/s
/// minutes apart): a ratio against one pass said more about the moment than the daemon.
pub async fn bare_baseline(brokers: &str, topic: &str, n: u64) -> Result<(f64, Duration)> {
    let mut passes = Vec::with_capacity(BARE_PASSES);
    for _ in 0..BARE_PASSES {
        let (b, t) = (brokers.to_string(), topic.to_string());
        let cpu0 = crate::util::cpu_self();
        let rate =
            tokio::task::spawn_blocking(move || crate::tail::bare_consume(&b, &t, n)).await??;
        let cpu = crate::util::cpu_self().saturating_sub(cpu0);
        passes.push((rate, cpu.as_secs_f64()));
    }
    let rates: Vec<String> = passes.iter().map(|p| crate::util::fmt_rate(p.0)).collect();
    eprintln!("bare consumer passes: {}", rates.join(", "));
    let (rate, cpu) = crate::util::median_pair(&passes, |p| p.0);
    Ok((rate, Duration::from_secs_f64(cpu)))
}

/// kcat on `topic`, [`BARE_PASSES`] times as the bare consumer's baseline is taken: the
/// median pass's rate and that pass's CPU in µs per record (see `tail::kcat_consume`).
/// Issue 40's end-to-end targets are stated against kcat, which reads a topic faster than
/// the bare consumer here (same librdkafka, a consumer loop in C).
pub fn kcat_baseline(
    kcat: &crate::tail::Kcat,
    brokers: &str,
    topic: &str,
    n: u64,
) -> Result<(f64, f64)> {
    let mut passes = Vec::with_capacity(BARE_PASSES);
    for _ in 0..BARE_PASSES {
        passes.push(crate::tail::kcat_consume(&kcat.bin, brokers, topic, n)?);
    }
    let rates: Vec<String> = passes.iter().map(|p| crate::util::fmt_rate(p.0)).collect();
    eprintln!("kcat passes: {}", rates.join(", "));
    Ok(crate::util::median_pair(&passes, |p| p.0))
}

/// An end-to-end run after its table is loaded: the pipeline group committed past all `n`
/// records of `topic`, the bare consumer's baseline on it (rate, CPU), then the daemon
/// started on it with `matching` (grace and verify_interval 1 s). Shared by the key and
/// offset end-to-end sections, so both measure the same way.
pub async fn start_after_baseline(
    bin: &Path,
    brokers: &str,
    mysql: &str,
    topic: &str,
    table: &str,
    n: u64,
    matching: &str,
) -> Result<(Daemon, f64, Duration)> {
    let pipeline = crate::util::unique("bench_pipeline");
    commit_past_all(brokers, &pipeline, topic, n)?;
    let (bare_rate, bare_cpu) = bare_baseline(brokers, topic, n).await?;
    let topics = [topic.to_string()];
    let d = Daemon::start(
        bin,
        brokers,
        mysql,
        &Spec {
            topics: &topics,
            table,
            pipeline_group: &pipeline,
            grace: "1s",
            verify_interval: "1s",
            matching,
            max_pending: Some(n.max(2_000_000)),
        },
    )?;
    Ok((d, bare_rate, bare_cpu))
}
