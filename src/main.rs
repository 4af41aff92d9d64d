//! The `gap-auditor` command line: parse, load config, run a command, map errors to exit codes.

use clap::{Parser, Subcommand, ValueEnum};
use gap_auditor::config::{Config, ConfigError};
use gap_auditor::gap::Gap;
use gap_auditor::store::{GapFilter, StateFilter, Store};
use std::path::PathBuf;
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;

/// Proves, record by record, that what a streaming pipeline read from Kafka landed in its
/// sink (Apache Doris, MySQL or Elasticsearch), and names exactly which offsets did not.
///
/// It tails the audited topics with its own consumer group, waits until the pipeline's
/// group has committed past each record and `grace` has passed, then looks the record up in
/// the sink. A record the pipeline has not reached is lag, never loss; a sink that does not
/// answer is unknown, never loss. Missing records are reported as exact offset ranges (gaps)
/// in /metrics, /api/gaps, the log and the local gap store, and `replay` writes them again.
///
/// Start with `gap-auditor demo` (no external services), then write a config from
/// config/gap-auditor.toml and run `gap-auditor validate-config -c FILE` and
/// `gap-auditor run -c FILE`.
#[derive(Parser, Debug)]
#[command(
    name = "gap-auditor",
    version = gap_auditor::LONG_VERSION,
    about,
    long_about,
    after_help = "Sinks: doris, mysql, elasticsearch. Strategies: offset_columns, key_columns, doc_id.\n\
                  Example: gap-auditor run -c /etc/gap-auditor/gap-auditor.toml\n\
                  More (sinks, strategies, configuration, examples): gap-auditor --help",
    after_long_help = AFTER_LONG_HELP
)]
struct Cli {
    /// Configuration file (TOML or YAML); before or after the command. Default:
    /// ./gap-auditor.toml, then ./config/gap-auditor.toml, else the environment only.
    #[arg(
        short,
        long,
        value_name = "FILE",
        global = true,
        env = "GAP_AUDITOR_CONFIG"
    )]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Cmd,
}

/// The rest of `--help`: what an operator needs before writing a config.
const AFTER_LONG_HELP: &str = "\
Sinks (audits[].sink.kind):
  doris          Apache Doris over the MySQL protocol (FE query port, usually 9030);
                 `replay --to-sink` writes through Stream Load (sink.stream_load_url)
  mysql          MySQL, MariaDB or any MySQL-protocol database
  elasticsearch  Elasticsearch or OpenSearch over HTTP(S) (index, username/password or api_key)

Matching strategies (audits[].match.strategy):
  offset_columns  sink rows carry the record's Kafka partition and offset (Flink SQL
                  metadata columns, Kafka Connect's topic+partition+offset): verified by
                  offset ranges, a bounded number of queries per round
  key_columns     rows carry no coordinates: a key of record fields is counted against
                  sink columns in batches (several records per key are a multiplicity)
  doc_id          Elasticsearch documents whose _id is built from a template such as
                  {topic}+{partition}+{offset}, verified in batches by id

Configuration:
  -c FILE or GAP_AUDITOR_CONFIG=FILE picks the file (config/gap-auditor.toml in the
  repository is the documented example). Every key can be overridden by an environment
  variable GAP_AUDITOR__SECTION__KEY, e.g. GAP_AUDITOR__KAFKA__BROKERS=host:9092 or
  GAP_AUDITOR__AUDITS__0__GRACE=2m. Logs: GAP_AUDITOR_LOG (filter, e.g. debug) and
  GAP_AUDITOR_LOG_FORMAT=json (one JSON object per line, fields at the top level).

Exit codes: 0 success / no loss, 1 loss found (check) or partial (replay), 2 bad
configuration or error; `wait`: 3 timed out.

Examples:
  gap-auditor demo
  gap-auditor validate-config -c gap-auditor.toml
  GAP_AUDITOR_CONFIG=/etc/gap-auditor/gap-auditor.toml gap-auditor run
  gap-auditor -c gap-auditor.toml check --from 2024-05-01T10:00:00Z --to 2024-05-01T11:00:00Z
  gap-auditor gaps --state open --format json
  gap-auditor replay --gap dns_logs:test:0:2 --to-sink --dry-run
  gap-auditor ack --gap dns_logs:test:0:2 --reason \"accepted: test data\"
  gap-auditor wait --audit dns_logs --until 2024-05-01T11:00:00Z --timeout 2h

Docs: README.md, docs/OPERATOR.md (deploying, tuning), docs/METRICS.md, docs/RUNBOOK.md.";

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run the daemon: tail the topics, verify against the sink, report gaps.
    ///
    /// Serves /metrics, /healthz, /readyz, /api/gaps, /api/status and /api/completeness on
    /// server.listen.
    /// Exits 0 on SIGINT/SIGTERM after persisting gaps and committing the settled
    /// watermark, 2 on a bad configuration, 1 on a runtime failure.
    Run,
    /// List gaps from the store (state.path). Works while the daemon runs.
    Gaps {
        /// `open` (unresolved: open or unrecoverable), `all`, or one state name
        /// (open, late, repaired, unrecoverable, acknowledged).
        #[arg(long, default_value = "open")]
        state: String,
        /// Only this audit.
        #[arg(long)]
        audit: Option<String>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Mark a gap acknowledged (stops its alert); the reason is kept with the gap.
    Ack {
        /// Gap id as shown by `gaps` (audit:topic:partition:first_offset).
        #[arg(long)]
        gap: String,
        /// Why it is acceptable (kept in the store and shown in the API).
        #[arg(long)]
        reason: String,
    },
    /// Load and validate the configuration; connect to nothing. Exit 0 valid, 2 invalid.
    ValidateConfig,
    /// Audit a closed range of the past once (everything in it is due) and print the gaps.
    ///
    /// Bounds are RFC 3339 times or `offset:N`; --from is inclusive, --to exclusive. Exits 0
    /// when nothing is lost, 1 when records are missing, 2 on an error (including a sink
    /// that cannot be queried: unknown is not missing). Shows a progress bar on a terminal.
    Check {
        /// Only this audit (default: every audit).
        #[arg(long)]
        audit: Option<String>,
        /// Start: RFC 3339 time (e.g. 2024-05-01T12:00:00Z) or offset:N (inclusive).
        #[arg(long)]
        from: gap_auditor::check::Bound,
        /// End: RFC 3339 time or offset:N (exclusive).
        #[arg(long)]
        to: gap_auditor::check::Bound,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Re-read exactly the lost offsets from Kafka and write them again (idempotent: only
    /// records still absent from the sink are written).
    ///
    /// Exits 0 when every record is written or already present, 1 when some could not be
    /// written, 2 on an error — including offsets Kafka already deleted (the gap is then
    /// marked unrecoverable). A replayed gap turns `repaired` once the daemon confirms it.
    #[command(group(clap::ArgGroup::new("what").required(true).args(["gap", "audit"])))]
    #[command(group(clap::ArgGroup::new("dest").required(true).args(["to_topic", "to_sink"])))]
    Replay {
        /// The gap to repair (id from `gaps`).
        #[arg(long, conflicts_with_all = ["audit", "partition", "offsets"])]
        gap: Option<String>,
        /// Audit (with --partition and --offsets).
        #[arg(long, requires_all = ["partition", "offsets"])]
        audit: Option<String>,
        /// Topic (default: the audit's only topic).
        #[arg(long, requires = "audit")]
        topic: Option<String>,
        /// Partition.
        #[arg(long)]
        partition: Option<i32>,
        /// Inclusive offset range A-B.
        #[arg(long, value_parser = gap_auditor::replay::parse_offsets)]
        offsets: Option<(i64, i64)>,
        /// Re-produce to this topic (with a `gap-auditor.origin` header).
        #[arg(long)]
        to_topic: Option<String>,
        /// Write into the audit's sink (MySQL/Doris INSERT).
        #[arg(long)]
        to_sink: bool,
        /// Show what would be written; write nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Wait until everything produced before a time is confirmed in the sink: a sensor for
    /// the batch jobs downstream ("is hour H complete in Doris?").
    ///
    /// Polls the running daemon's GET /api/completeness (server.listen of the config, or
    /// --url) until every expected record with a timestamp before --until is confirmed in
    /// the sink. Exits 0 when complete; 1 as soon as a gap blocks it (the gap is named:
    /// repair it with `replay`, or accept it with `ack`, then wait again); 2 on an error
    /// (bad arguments or config, unknown audit, refused token); 3 when --timeout passes
    /// first (lag, grace, or a sink that does not answer: try again later). While no daemon
    /// answers, the store (state.path) is read instead: a gap found there exits 1; nothing
    /// there proves completeness, so the wait goes on.
    ///
    /// The config (-c) gives server.listen, server.api_token and state.path; it is not
    /// needed with --url (the token then comes from GAP_AUDITOR__SERVER__API_TOKEN).
    ///
    /// `--timeout 0s` checks once (exit 3: not yet), for schedulers that retry by themselves,
    /// e.g. Airflow's BashSensor(retry_exit_code=3). docs/OPERATOR.md has Airflow and cron
    /// examples; docs/SEMANTICS.md says exactly what "complete" means.
    #[command(after_long_help = "Examples:\n  \
        # on the daemon's host: is the hour 10:00-11:00 complete? wait up to 2 hours\n  \
        gap-auditor wait -c gap-auditor.toml --audit dns_logs --until 2024-05-01T11:00:00Z --timeout 2h\n  \
        # from a scheduler's host: one check (exit 3 = not yet, retry later)\n  \
        gap-auditor wait --url http://auditor:9464 --audit dns_logs --until 2024-05-01T11:00:00Z --timeout 0s")]
    Wait {
        /// The audit whose sink is waited on.
        #[arg(long)]
        audit: String,
        /// Everything produced (record timestamp) before this RFC 3339 time must be in the
        /// sink, e.g. 2024-05-01T11:00:00Z for the hour 10:00-11:00; or `now`.
        #[arg(long, value_name = "TIME", value_parser = parse_until)]
        until: chrono::DateTime<chrono::Utc>,
        /// Give up after this long with exit 3 (e.g. 30m, 2h; 0s checks once). Default:
        /// wait until complete or blocked.
        #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
        timeout: Option<std::time::Duration>,
        /// Time between two polls.
        #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
        poll: std::time::Duration,
        /// Daemon to ask (http://host:port), instead of the config's server.listen. Repeat
        /// it for every instance of a scaled-out audit: complete only when each one is.
        #[arg(long = "url", value_name = "URL")]
        urls: Vec<String>,
        /// Output format of the final answer.
        #[arg(long, value_enum, default_value_t = Format::Table)]
        format: Format,
    },
    /// Self-contained demonstration: an in-process Kafka mock cluster, a simulated
    /// pipeline that loses two records across a restart, a simulated sink table, the
    /// auditor naming the cause, and the replay that repairs the gap.
    ///
    /// Needs no configuration: -c and GAP_AUDITOR_CONFIG are ignored.
    Demo {
        /// Where to serve /metrics and the API while the demo runs (a free port of the
        /// same address when it is in use).
        #[arg(long, default_value = "127.0.0.1:9464")]
        listen: std::net::SocketAddr,
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    Table,
    Json,
}

/// jemalloc, not glibc's malloc: under a long total loss the audit churns millions of small
/// keys across threads, and glibc's arenas kept the freed blocks (live heap flat at ~40 MiB
/// while resident memory crept +10-20 % over 5 minutes, measured with heaptrack on the
/// keys_total_loss fault test). jemalloc's size classes and decay give the pages back.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    gap_auditor::memory::limit_arenas();
    let cli = Cli::parse();
    gap_auditor::logging::init(matches!(cli.command, Cmd::Demo { .. }));
    let config = cli.config;
    match cli.command {
        Cmd::ValidateConfig => match Config::load(config.as_deref()) {
            Ok(c) => {
                println!(
                    "configuration OK: {} audit(s): {}",
                    c.audits.len(),
                    c.audits
                        .iter()
                        .map(|a| a.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                ExitCode::SUCCESS
            }
            Err(e) => config_error(&e),
        },
        Cmd::Run => {
            let cfg = match Config::load(config.as_deref()) {
                Ok(c) => c,
                Err(e) => return config_error(&e),
            };
            runtime(|| async move {
                let cancel = CancellationToken::new();
                spawn_signal_handler(cancel.clone());
                gap_auditor::app::run(cfg, cancel).await
            })
        }
        Cmd::Gaps {
            state,
            audit,
            format,
        } => {
            let Some(state) = StateFilter::parse(&state) else {
                eprintln!(
                    "error: --state: expected open, all, late, repaired, unrecoverable or acknowledged, got {state:?}"
                );
                return ExitCode::from(2);
            };
            let store = match open_store(config) {
                Ok(s) => s,
                Err(code) => return code,
            };
            match store.list_gaps(&GapFilter { state, audit }) {
                Ok(gaps) => {
                    print_gaps(&gaps, format);
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Ack { gap, reason } => {
            let store = match open_store(config) {
                Ok(s) => s,
                Err(code) => return code,
            };
            match store.ack(&gap, &reason) {
                Ok(true) => {
                    println!("gap {gap} acknowledged");
                    ExitCode::SUCCESS
                }
                Ok(false) => {
                    eprintln!("error: no gap with id {gap:?} (see `gap-auditor gaps --state all`)");
                    ExitCode::from(2)
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Check {
            audit,
            from,
            to,
            format,
        } => {
            let cfg = match Config::load(config.as_deref()) {
                Ok(c) => c,
                Err(e) => return config_error(&e),
            };
            let rt = match tokio_runtime() {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
            match rt.block_on(gap_auditor::check::run(
                &cfg,
                audit.as_deref(),
                from,
                to,
                tty,
            )) {
                Ok(report) => {
                    print_check(&report, format);
                    if report.lost > 0 {
                        ExitCode::from(1)
                    } else {
                        ExitCode::SUCCESS
                    }
                }
                Err(e) => {
                    eprintln!("error: {e:#}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Replay {
            gap,
            audit,
            topic,
            partition,
            offsets,
            to_topic,
            to_sink,
            dry_run,
        } => {
            let cfg = match Config::load(config.as_deref()) {
                Ok(c) => c,
                Err(e) => return config_error(&e),
            };
            replay(
                &cfg, gap, audit, topic, partition, offsets, to_topic, to_sink, dry_run,
            )
        }
        Cmd::Wait {
            audit,
            until,
            timeout,
            poll,
            urls,
            format,
        } => {
            let code = gap_auditor::wait::run(gap_auditor::wait::Args {
                config,
                audit,
                until,
                timeout,
                poll,
                urls,
                json: format == Format::Json,
            });
            ExitCode::from(code as u8)
        }
        Cmd::Demo { listen } => runtime(|| async move {
            let cancel = CancellationToken::new();
            spawn_signal_handler(cancel.clone());
            gap_auditor::demo::run(listen, cancel).await
        }),
    }
}

/// The runtime for one-shot commands; failing to start it is an error (exit 2).
fn tokio_runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("error: cannot start the runtime: {e}");
            ExitCode::from(2)
        })
}

/// `--until`: RFC 3339, or `now`.
fn parse_until(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    if s.eq_ignore_ascii_case("now") {
        return Ok(chrono::Utc::now());
    }
    chrono::DateTime::parse_from_rfc3339(s.trim())
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|e| format!("{e}: expected an RFC 3339 time such as 2024-05-01T11:00:00Z, or now"))
}

fn config_error(e: &ConfigError) -> ExitCode {
    eprintln!("error: invalid configuration: {e}");
    ExitCode::from(2)
}

fn runtime<F, Fut>(f: F) -> ExitCode
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(f()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn spawn_signal_handler(cancel: CancellationToken) {
    tokio::spawn(async move {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(error = %e, "cannot install the SIGTERM handler");
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = term.recv() => {},
        }
        tracing::info!("signal received: draining");
        cancel.cancel();
    });
}

fn open_store(config: Option<PathBuf>) -> Result<Store, ExitCode> {
    let cfg = Config::load(config.as_deref()).map_err(|e| config_error(&e))?;
    Store::open(&cfg.state.path).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    })
}

#[allow(clippy::too_many_arguments)]
fn replay(
    cfg: &Config,
    gap: Option<String>,
    audit: Option<String>,
    topic: Option<String>,
    partition: Option<i32>,
    offsets: Option<(i64, i64)>,
    to_topic: Option<String>,
    to_sink: bool,
    dry_run: bool,
) -> ExitCode {
    use gap_auditor::replay::{self, Destination, Outcome, ReplayError, Target};
    let store = match Store::open(&cfg.state.path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let target = match (gap, audit, partition, offsets) {
        (Some(id), ..) => replay::target_of_gap(&store, &id),
        (None, Some(audit), Some(partition), Some((first, last))) => {
            let topics = cfg
                .audit(&audit)
                .map(|a| a.topics.clone())
                .unwrap_or_default();
            match topic.or_else(|| (topics.len() == 1).then(|| topics[0].clone())) {
                Some(topic) => Ok(Target {
                    audit,
                    tp: gap_auditor::gap::TopicPartition::new(topic, partition),
                    first,
                    last,
                    gap_id: None,
                }),
                None => Err(anyhow::anyhow!(
                    "--topic: audit {audit:?} reads several topics (or none); name one"
                )),
            }
        }
        _ => Err(anyhow::anyhow!(
            "give --gap ID, or --audit NAME --partition P --offsets A-B"
        )),
    };
    let target = match target {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let dest = match to_topic {
        Some(t) => Destination::Topic(t),
        None if to_sink => Destination::Sink,
        None => {
            eprintln!("error: give --to-topic T or --to-sink");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio_runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    // Marked BEFORE writing: a daemon round that confirms the records between the write and
    // a later mark would store the gap `late` for good, never `repaired`. Taken back below
    // when nothing was written.
    let marked_here = match (&target.gap_id, dry_run) {
        (Some(id), false) => match store.is_replayed(id) {
            Ok(true) => false,
            Ok(false) => match store.mark_replayed(id) {
                Ok(marked) => marked,
                Err(e) => {
                    eprintln!("error: cannot mark gap {id} replayed: {e}");
                    return ExitCode::from(2);
                }
            },
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        },
        _ => false,
    };
    let result = rt.block_on(replay::run(cfg, &store, &target, &dest, dry_run));
    let unmark = |written: usize| {
        if marked_here
            && written == 0
            && let Some(id) = &target.gap_id
            && let Err(e) = store.clear_replayed(id)
        {
            eprintln!("error: cannot take back the replay mark of gap {id}: {e}");
        }
    };
    if result.is_err() {
        unmark(0);
    }
    let replayed = match result {
        Ok(o) => o,
        Err(ReplayError::Deleted {
            tp,
            first,
            log_start,
        }) => {
            eprintln!(
                "error: {}",
                ReplayError::Deleted {
                    tp: tp.clone(),
                    first,
                    log_start
                }
            );
            if let Some(id) = &target.gap_id
                && let Err(e) = store.mark_unrecoverable(id, chrono::Utc::now())
            {
                eprintln!("error: cannot mark gap {id} unrecoverable: {e}");
            }
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let verb = if dry_run { "would write" } else { "written" };
    let (mut written, mut failed) = (0, 0);
    for o in &replayed.outcomes {
        match o {
            Outcome::Written { offset } => {
                written += 1;
                println!(
                    "{}-{} offset {offset}: {verb}",
                    target.tp.topic, target.tp.partition
                );
            }
            Outcome::Present { offset } => {
                println!(
                    "{}-{} offset {offset}: already in the sink, skipped",
                    target.tp.topic, target.tp.partition
                )
            }
            Outcome::Filtered { offset, reason } => {
                println!(
                    "{}-{} offset {offset}: not expected in the sink ({reason}), skipped",
                    target.tp.topic, target.tp.partition
                )
            }
            Outcome::Failed { offset, error } => {
                failed += 1;
                println!(
                    "{}-{} offset {offset}: FAILED: {error}",
                    target.tp.topic, target.tp.partition
                );
            }
        }
    }
    for note in &replayed.notes {
        println!("{note}");
    }
    println!("{written} record(s) {verb}, {failed} failed");
    unmark(written);
    if failed > 0 || replayed.partial {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn print_check(report: &gap_auditor::check::Report, format: Format) {
    if format == Format::Json {
        match serde_json::to_string_pretty(report) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("error: {e}"),
        }
        return;
    }
    for r in &report.ranges {
        println!(
            "checked {} {}-{} offsets [{}, {})",
            r.audit, r.topic, r.partition, r.from, r.to
        );
        if let (Some(asked), Some(why)) = (r.requested_to, &r.not_checked) {
            println!("  not checked [{}, {}): {why}", r.to, asked);
        }
    }
    println!(
        "records: {} read, {} expected, {} confirmed, {} missing, {} duplicate rows\n",
        report.consumed, report.expected, report.confirmed, report.lost, report.duplicated
    );
    print_gaps(&report.gaps, Format::Table);
}

fn print_gaps(gaps: &[Gap], format: Format) {
    if format == Format::Json {
        match serde_json::to_string_pretty(gaps) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("error: {e}"),
        }
        return;
    }
    if gaps.is_empty() {
        println!("no gaps");
        return;
    }
    println!(
        "{:<40} {:>9} {:>12} {:>12} {:>8}  {:<13} {:<20}",
        "ID", "PARTITION", "FIRST", "LAST", "MISSING", "STATE", "DETECTED"
    );
    for g in gaps {
        let missing = if g.size_known {
            g.missing_records.to_string()
        } else {
            format!("≤{}", g.missing_records)
        };
        println!(
            "{:<40} {:>9} {:>12} {:>12} {:>8}  {:<13} {:<20}",
            g.id,
            format!("{}-{}", g.topic, g.partition),
            g.first_offset,
            g.last_offset,
            missing,
            g.state.as_str(),
            g.detected_at.format("%Y-%m-%d %H:%M:%S")
        );
    }
}
