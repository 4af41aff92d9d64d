//! The command line's shape: the clap definitions of every command, flag and help text.
//! What each command does is in [`commands`]; how its outcome becomes an exit code is in
//! `main.rs`.

pub mod commands;
mod output;
mod replay;

use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;

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
pub struct Cli {
    /// Configuration file (TOML or YAML); before or after the command. Default:
    /// ./gap-auditor.toml, then ./config/gap-auditor.toml, else the environment only.
    #[arg(
        short,
        long,
        value_name = "FILE",
        global = true,
        env = "GAP_AUDITOR_CONFIG"
    )]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Cmd,
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
  `gap-auditor config schema` prints the file's JSON Schema (every key, its default and
  description) for editors and the Helm chart (deploy/helm/gap-auditor).

Exit codes: 0 success / no loss, 1 loss found (check) or partial (replay), 2 bad
configuration or error; `wait`: 3 timed out.

Examples:
  gap-auditor demo
  gap-auditor validate-config -c gap-auditor.toml
  gap-auditor config schema > gap-auditor.schema.json
  GAP_AUDITOR_CONFIG=/etc/gap-auditor/gap-auditor.toml gap-auditor run
  gap-auditor -c gap-auditor.toml check --from 2024-05-01T10:00:00Z --to 2024-05-01T11:00:00Z
  gap-auditor gaps --state open --format json
  gap-auditor replay --gap dns_logs:test:0:2 --to-sink --dry-run
  gap-auditor ack --gap dns_logs:test:0:2 --reason \"accepted: test data\"
  gap-auditor wait --audit dns_logs --until 2024-05-01T11:00:00Z --timeout 2h

Docs: README.md, docs/OPERATOR.md (deploying, tuning), docs/METRICS.md, docs/RUNBOOK.md.";

/// The commands (SPEC's command table).
#[derive(Subcommand, Debug)]
pub enum Cmd {
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
        /// (open, late, repaired, unrecoverable, unverifiable, acknowledged, dead_lettered).
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
        /// Gap id as shown by `gaps` (audit:topic:partition:first_offset[@epoch]).
        #[arg(long)]
        gap: String,
        /// Why it is acceptable (kept in the store and shown in the API).
        #[arg(long)]
        reason: String,
    },
    /// Load and validate the configuration; connect to nothing. Exit 0 valid, 2 invalid.
    ValidateConfig,
    /// The configuration file's own tools: `config schema` prints its JSON Schema.
    Config {
        #[command(subcommand)]
        command: ConfigCmd,
    },
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
        from: gap_auditor::commands::check::Bound,
        /// End: RFC 3339 time or offset:N (exclusive).
        #[arg(long)]
        to: gap_auditor::commands::check::Bound,
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
    ///
    /// Refused up front (exit 2, with the reason) when the auditor could never confirm the
    /// repair: --to-topic for an audit whose rows are found by Kafka coordinates
    /// (offset_columns, a doc_id template with {topic}/{partition}/{offset}) unless the
    /// pipeline maps the `gap-auditor.origin` header to them ([audits.replay]
    /// pipeline_maps_origin), and --to-topic into a topic the audit reads itself (for
    /// key_columns only where the table keeps every row: multiset key semantics). A gap
    /// replayed before and not confirmed yet is refused without --force, by --gap or by
    /// --offsets overlapping it; --offsets marks the open gaps it covers whole as --gap
    /// does. Every replay is logged in the store (state.path).
    #[command(group(clap::ArgGroup::new("what").required(true).args(["gap", "audit"])))]
    #[command(group(clap::ArgGroup::new("dest").required(true).args(["to_topic", "to_sink"])))]
    Replay(ReplayArgs),
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

/// `gap-auditor config ...`.
#[derive(Subcommand, Debug)]
pub enum ConfigCmd {
    /// Print the configuration's JSON Schema (draft 2020-12) on stdout.
    ///
    /// Every key of gap-auditor.toml with its type, default and description, derived from
    /// the code that loads the file: unknown keys are refused as the loader refuses them.
    /// For editors (taplo, the YAML language server) and for the Helm chart's
    /// values.schema.json (scripts/render-helm.py). Rules spanning several keys stay with
    /// `validate-config`. Reads no configuration; exit 0.
    #[command(after_long_help = "Examples:\n  \
        gap-auditor config schema > gap-auditor.schema.json\n  \
        # taplo (TOML): #:schema ./gap-auditor.schema.json as the file's first line")]
    Schema,
}

/// The flags of `replay` (its help text is the variant's, in [`Cmd`]).
#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// The gap to repair (id from `gaps`).
    #[arg(long, conflicts_with_all = ["audit", "partition", "offsets"])]
    pub gap: Option<String>,
    /// Audit (with --partition and --offsets).
    #[arg(long, requires_all = ["partition", "offsets"])]
    pub audit: Option<String>,
    /// Topic (default: the audit's only topic).
    #[arg(long, requires = "audit")]
    pub topic: Option<String>,
    /// Partition.
    #[arg(long)]
    pub partition: Option<i32>,
    /// Inclusive offset range A-B.
    #[arg(long, value_parser = gap_auditor::commands::replay::parse_offsets)]
    pub offsets: Option<(i64, i64)>,
    /// Re-produce to this topic, a repair topic the pipeline also reads, each record with a
    /// `gap-auditor.origin` header (topic/partition/offset of the lost record). For
    /// offset_columns and coordinate doc ids the pipeline must write that header into the
    /// coordinate columns / doc id (docs/OPERATOR.md), or the replay is refused.
    #[arg(long)]
    pub to_topic: Option<String>,
    /// Write into the audit's sink (MySQL/Doris INSERT).
    #[arg(long)]
    pub to_sink: bool,
    /// Show what would be written; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Replay a gap again although its last replay is not confirmed yet (the gap is still
    /// open). Without it such a replay is refused: through a repair topic the pipeline may
    /// still be writing the first copy. Still writes only what the sink lacks right now;
    /// check with --dry-run first.
    #[arg(long)]
    pub force: bool,
}

/// `--format`: how results are printed.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    // No doc comments on the variants: clap would print them in `--help`.
    Table,
    Json,
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
