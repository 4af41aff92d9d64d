//! The auditor under test: its config from an [`AuditSpec`], in this process ([`Auditor`]) or as the real binary ([`Daemon`]).

use gap_auditor::app::{self, AnySink};
use gap_auditor::config::Config;
use gap_auditor::gap::Gap;
use gap_auditor::metrics::Metrics;
use gap_auditor::status::StatusBoard;
use gap_auditor::store::Store;
use std::ffi::OsString;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use super::*;

/// Audit settings a test varies.
pub struct AuditSpec<'a> {
    pub topic: &'a str,
    pub table: &'a str,
    pub pipeline_group: Option<&'a str>,
    pub strategy: &'a str,
    pub grace: &'a str,
    pub verify_interval: &'a str,
    pub state_dir: &'a std::path::Path,
    pub group: &'a str,
    pub listen: &'a str,
}

/// The auditor configuration for a test, as the shared builder: the seed audit
/// `dns_logs` on the test's MySQL table, with the tests' short timings.
pub fn config_builder(s: &AuditSpec) -> ConfigToml {
    let mut audit = AuditToml::new("dns_logs", &[s.topic]);
    if let Some(group) = s.pipeline_group {
        audit = audit.set("pipeline_group", group);
    }
    let audit = audit
        .set("grace", s.grace)
        .set("verify_interval", s.verify_interval)
        .set("batch_size", 100)
        .seed_csv();
    let audit = match s.strategy {
        "key_columns" => audit.seed_key_columns(),
        _ => audit.offset_columns(),
    };
    ConfigToml::new(&kafka())
        .test_group(s.group)
        .kafka("statistics_interval", "500ms")
        .server("listen", s.listen)
        .state_path(s.state_dir)
        .audit(
            audit
                .sql_sink("mysql", &mysql_url(), s.table)
                .sink("query_timeout", "3s"),
        )
}

/// Audit `a` of topic `t`: raw records matched by offset, against a MySQL URL nothing
/// listens on, for tests that run the audit against a memory sink or never query it.
pub fn unreachable_sink_audit() -> AuditToml {
    AuditToml::new("a", &["t"])
        .record("format", "raw")
        .strategy("offset_columns")
        .sql_sink("mysql", "mysql://u@127.0.0.1:1/db", "x")
}

/// `toml` (a [`config_toml`] of a key_columns audit) with `match.key_semantics` set.
pub fn with_key_semantics(toml: &str, semantics: &str) -> String {
    let strategy = "strategy = \"key_columns\"";
    assert!(toml.contains(strategy), "{toml}");
    toml.replacen(
        strategy,
        &format!("{strategy}\nkey_semantics = \"{semantics}\""),
        1,
    )
}

/// The auditor configuration for a test, as TOML (also written to files for the binary).
pub fn config_toml(s: &AuditSpec) -> String {
    config_builder(s).render()
}

/// An auditor running in this process, with its metrics, status and store at hand.
pub struct Auditor {
    /// The name of its (first) audit, the first label of its metrics.
    pub audit: String,
    pub cancel: CancellationToken,
    pub handle: tokio::task::JoinHandle<anyhow::Result<()>>,
    pub metrics: Arc<Metrics>,
    pub status: StatusBoard,
    pub store: Arc<Store>,
    pub addr: std::net::SocketAddr,
}

impl Auditor {
    /// Due keys counted from reads by time (`gap_auditor_due_keys_counted_total{how="time"}`),
    /// summed over the labels.
    pub async fn due_keys_counted_by_time(&self) -> f64 {
        let (code, metrics) = self.get("/metrics").await;
        assert_eq!(code, 200);
        metrics
            .lines()
            .filter(|l| {
                l.starts_with("gap_auditor_due_keys_counted_total") && l.contains("how=\"time\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Runs a TOML config whose first audit has a MySQL-protocol sink, built as the daemon
    /// builds it.
    pub async fn start(toml: &str) -> Auditor {
        let config = Config::from_toml_str(toml).expect("test config is valid");
        let sink = app::build_sink(&config.audits[0]).expect("sink");
        Self::start_with(config, sink).await
    }

    /// Runs `config` (one audit) against `sink`, with the store in `config.state.path`.
    pub async fn start_with(config: Config, sink: AnySink) -> Auditor {
        let audit = config.audits[0].name.clone();
        let store = Arc::new(Store::open(&config.state.path).expect("store"));
        let metrics = Arc::new(Metrics::new());
        let status = StatusBoard::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let cancel = CancellationToken::new();
        let handle = tokio::spawn(app::run_with(
            config,
            vec![sink],
            store.clone(),
            metrics.clone(),
            status.clone(),
            listener,
            cancel.clone(),
        ));
        Auditor {
            audit,
            cancel,
            handle,
            metrics,
            status,
            store,
            addr,
        }
    }

    pub fn counter(&self, f: &prometheus::IntCounterVec, topic: &str, partition: i32) -> u64 {
        f.with_label_values(&[self.audit.as_str(), topic, &partition.to_string()])
            .get()
    }

    pub fn lost(&self, topic: &str, p: i32) -> u64 {
        self.counter(&self.metrics.records_lost, topic, p)
    }

    pub fn confirmed(&self, topic: &str, p: i32) -> u64 {
        self.counter(&self.metrics.records_confirmed, topic, p)
    }

    pub fn duplicated(&self, topic: &str, p: i32) -> u64 {
        self.counter(&self.metrics.records_duplicated, topic, p)
    }

    pub fn consumed(&self, topic: &str, p: i32) -> u64 {
        self.counter(&self.metrics.records_consumed, topic, p)
    }

    /// Records of partition `p` not expected, with this reason label.
    pub fn filtered(&self, topic: &str, p: i32, reason: &str) -> u64 {
        self.metrics
            .records_filtered
            .with_label_values(&[self.audit.as_str(), topic, &p.to_string(), reason])
            .get()
    }

    /// Sink queries that failed.
    pub fn sink_errors(&self) -> u64 {
        self.metrics
            .sink_queries
            .with_label_values(&[self.audit.as_str(), "error"])
            .get()
    }

    pub fn sink_up(&self) -> i64 {
        self.metrics
            .sink_up
            .with_label_values(&[self.audit.as_str()])
            .get()
    }

    /// The settled watermark of the first partition of the first audit, from the status.
    pub fn settled(&self) -> Option<i64> {
        self.status
            .snapshot()
            .first()
            .and_then(|s| s.partitions.first())
            .map(|p| p.settled)
    }

    /// Every gap in its store.
    pub fn stored_gaps(&self) -> Vec<Gap> {
        stored_gaps(&self.store)
    }

    /// Waits until `cond` holds, failing the test after `secs`.
    pub async fn wait_for(&self, secs: u64, what: &str, cond: impl Fn(&Auditor) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        while !cond(self) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for: {what}\nstatus: {:?}",
                self.status.snapshot()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Like [`Auditor::wait_for`], but fails at once (not at the timeout) when the auditor
    /// task ended or a sink query failed: for tests whose sink is always up, where any
    /// sink error is a bug.
    pub async fn wait_decided(&self, secs: u64, what: &str, cond: impl Fn(&Auditor) -> bool) {
        self.wait_for(secs, what, |a| {
            cond(a) || a.handle.is_finished() || a.sink_errors() > 0
        })
        .await;
        assert!(
            !self.handle.is_finished(),
            "the auditor task ended while waiting for: {what}"
        );
        assert_eq!(
            self.sink_errors(),
            0,
            "a sink query failed while waiting for: {what}\nstatus: {:?}",
            self.status.snapshot()
        );
    }

    /// GET a path of the auditor's HTTP server, returning (status, body).
    pub async fn get(&self, path: &str) -> (u16, String) {
        http_get(self.addr, path).await
    }

    pub async fn stop(self) {
        self.cancel.cancel();
        let r = tokio::time::timeout(Duration::from_secs(30), self.handle).await;
        r.expect("auditor drains within 30s")
            .expect("auditor task")
            .expect("auditor result");
    }
}

/// The real `gap-auditor run` binary as a child process, its stderr appended to a log file
/// (kept across restarts). Killed (SIGKILL) when dropped while it still runs.
pub struct Daemon {
    child: Child,
    config: PathBuf,
    env: Vec<(&'static str, OsString)>,
    pub log: PathBuf,
}

impl Daemon {
    /// Starts `gap-auditor run -c config` with `env` added to the test's environment.
    pub fn spawn(config: &Path, env: Vec<(&'static str, OsString)>, log: PathBuf) -> Daemon {
        let child = Self::spawn_child(config, &env, &log);
        Daemon {
            child,
            config: config.to_path_buf(),
            env,
            log,
        }
    }

    fn spawn_child(config: &Path, env: &[(&'static str, OsString)], log: &Path) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("log file");
        Command::new(env!("CARGO_BIN_EXE_gap-auditor"))
            .args(["run", "-c"])
            .arg(config)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn gap-auditor")
    }

    /// The process id of the running child.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Starts it again (after [`Daemon::stop`]) with the same config, environment and log.
    pub fn restart(&mut self) {
        self.child = Self::spawn_child(&self.config, &self.env, &self.log);
    }

    /// SIGKILL: no drain, no final commit, no store close.
    pub fn kill9(&mut self) {
        self.child.kill().expect("kill -9");
        let _ = self.child.wait();
    }

    /// [`Daemon::kill9`], then start it again with the same config, environment and log.
    pub fn kill9_and_restart(&mut self) {
        self.kill9();
        self.child = Self::spawn_child(&self.config, &self.env, &self.log);
    }

    /// What it has logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Graceful stop (SIGTERM path): it must exit 0.
    pub fn stop(&mut self) {
        let pid = self.child.id().to_string();
        let st = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill -TERM");
        assert!(st.success(), "kill -TERM {pid}");
        let code: ExitStatus = self.child.wait().expect("wait");
        assert!(
            code.success(),
            "SIGTERM must exit 0, got {code:?}; log:\n{}",
            self.log_text()
        );
    }

    /// Calls `probe` every 200 ms until it returns `Ok`; after `secs`, kills the daemon and
    /// fails the test with the last `Err` and the log.
    pub async fn wait_until<T, F: Future<Output = Result<T, String>>>(
        &mut self,
        secs: u64,
        mut probe: impl FnMut() -> F,
    ) -> T {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            match probe().await {
                Ok(v) => return v,
                Err(e) if Instant::now() > deadline => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    panic!("{e}; log:\n{}", self.log_text());
                }
                Err(_) => {}
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `gap_auditor_pipeline_group_up` of the auditor's first audit (1: its position source is
/// read and usable).
pub fn pipeline_group_up(a: &Auditor) -> i64 {
    a.metrics
        .pipeline_group_up
        .with_label_values(&[a.audit.as_str()])
        .get()
}

/// The pipeline group's committed offset the auditor last saw on partition 0.
pub fn pipeline_committed(a: &Auditor) -> Option<i64> {
    a.status
        .snapshot()
        .first()
        .and_then(|s| s.partitions.first())
        .and_then(|p| p.pipeline_committed)
}

/// Waits until the auditor has seen the pipeline group commit `offset` on partition 0.
pub async fn until_seen(a: &Auditor, offset: i64) {
    a.wait_for(30, &format!("pipeline commit {offset} seen"), |a| {
        pipeline_committed(a) == Some(offset)
    })
    .await;
}

/// Runs `gap-auditor check -c CONFIG --from FROM --to TO --format json` (the real binary)
/// off the async runtime, so services the test serves in this process (a fake FE) answer
/// it: (exit code, the JSON report, stderr).
pub async fn run_check_json(
    config: &std::path::Path,
    from: &str,
    to: &str,
) -> (i32, serde_json::Value, String) {
    let (config, from, to) = (config.to_owned(), from.to_owned(), to.to_owned());
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_gap-auditor"))
            .args(["check", "-c"])
            .arg(&config)
            .args(["--from", &from, "--to", &to, "--format", "json"])
            .output()
            .expect("run check")
    })
    .await
    .expect("check task");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("check printed no JSON report ({e}): {stderr}"));
    (out.status.code().unwrap_or(-1), report, stderr)
}

/// Runs `gap-auditor replay -c CONFIG ARGS…` (the real binary): (exit code, stdout, stderr).
pub fn run_replay(config: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gap-auditor"))
        .args(["replay", "-c"])
        .arg(config)
        .args(args)
        .output()
        .expect("run replay");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
