//! What each command does, ending in an [`Outcome`]; `main.rs` turns it into the exit code.

use std::fmt::Display;
use std::future::Future;
use std::path::{Path, PathBuf};

use gap_auditor::config::Validated;
use gap_auditor::store::{GapFilter, StateFilter, Store};
use tokio_util::sync::CancellationToken;

use super::output::{print_check, print_gaps};
use super::{Cli, Cmd, ConfigCmd, Format};
use crate::Outcome;

/// Runs the command of `cli`.
pub fn dispatch(cli: Cli) -> Outcome {
    let config = cli.config;
    match cli.command {
        Cmd::ValidateConfig => validate_config(config.as_deref()),
        Cmd::Config {
            command: ConfigCmd::Schema,
        } => config_schema(),
        Cmd::Run => {
            let cfg = match load(config.as_deref()) {
                Ok(c) => c,
                Err(outcome) => return outcome,
            };
            daemon(|cancel| gap_auditor::app::run(cfg, cancel))
        }
        Cmd::Gaps {
            state,
            audit,
            format,
        } => gaps(config, &state, audit, format),
        Cmd::Ack { gap, reason } => ack(config, &gap, &reason),
        Cmd::Check {
            audit,
            from,
            to,
            format,
        } => check(config.as_deref(), audit.as_deref(), from, to, format),
        Cmd::Replay(args) => match load(config.as_deref()) {
            Ok(cfg) => super::replay::replay(&cfg, args),
            Err(outcome) => outcome,
        },
        Cmd::Wait {
            audit,
            until,
            timeout,
            poll,
            urls,
            format,
        } => Outcome::from(gap_auditor::commands::wait::run(
            gap_auditor::commands::wait::Args {
                config,
                audit,
                until,
                timeout,
                poll,
                urls,
                json: format == Format::Json,
            },
        )),
        Cmd::Demo { listen } => daemon(|cancel| gap_auditor::commands::demo::run(listen, cancel)),
    }
}

/// Prints `error: {message}` and gives the error outcome (exit 2).
pub(super) fn fail(message: impl Display) -> Outcome {
    eprintln!("error: {message}");
    Outcome::Error
}

/// Loads and validates the configuration; a bad one is reported as such (exit 2).
fn load(config: Option<&Path>) -> Result<Validated, Outcome> {
    Validated::load(config).map_err(|e| fail(format_args!("invalid configuration: {e}")))
}

/// `config schema`: the JSON Schema on stdout, pretty-printed (a file people read and diff).
fn config_schema() -> Outcome {
    match serde_json::to_string_pretty(&gap_auditor::config::config_json_schema()) {
        Ok(text) => {
            println!("{text}");
            Outcome::Success
        }
        Err(e) => fail(format_args!("cannot print the schema: {e}")),
    }
}

fn validate_config(config: Option<&Path>) -> Outcome {
    let c = match load(config) {
        Ok(c) => c.into_config(),
        Err(outcome) => return outcome,
    };
    for w in c.warnings() {
        eprintln!("warning: {w}");
    }
    println!(
        "configuration OK: {} audit(s): {}",
        c.audits.len(),
        c.audits
            .iter()
            .map(|a| a.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Outcome::Success
}

fn gaps(config: Option<PathBuf>, state: &str, audit: Option<String>, format: Format) -> Outcome {
    let Some(state) = StateFilter::parse(state) else {
        return fail(format_args!(
            "--state: expected open, all, late, repaired, unrecoverable, unverifiable, acknowledged or dead_lettered, got {state:?}"
        ));
    };
    let store = match open_store(config.as_deref()) {
        Ok(s) => s,
        Err(outcome) => return outcome,
    };
    match store.list_gaps(&GapFilter { state, audit }) {
        Ok(gaps) => {
            print_gaps(&gaps, format);
            Outcome::Success
        }
        Err(e) => fail(e),
    }
}

fn ack(config: Option<PathBuf>, gap: &str, reason: &str) -> Outcome {
    let store = match open_store(config.as_deref()) {
        Ok(s) => s,
        Err(outcome) => return outcome,
    };
    match store.ack(gap, reason) {
        Ok(true) => {
            println!("gap {gap} acknowledged");
            Outcome::Success
        }
        Ok(false) => fail(format_args!(
            "no gap with id {gap:?} (see `gap-auditor gaps --state all`)"
        )),
        Err(e) => fail(e),
    }
}

fn check(
    config: Option<&Path>,
    audit: Option<&str>,
    from: gap_auditor::commands::check::Bound,
    to: gap_auditor::commands::check::Bound,
    format: Format,
) -> Outcome {
    let cfg = match load(config) {
        Ok(c) => c,
        Err(outcome) => return outcome,
    };
    let rt = match tokio_runtime() {
        Ok(rt) => rt,
        Err(outcome) => return outcome,
    };
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    match rt.block_on(gap_auditor::commands::check::run(
        &cfg, audit, from, to, tty,
    )) {
        Ok(report) => {
            print_check(&report, format);
            if report.lost > 0 {
                Outcome::Loss
            } else {
                Outcome::Success
            }
        }
        Err(e) => fail(format_args!("{e:#}")),
    }
}

/// The runtime for one-shot commands; failing to start it is an error (exit 2).
pub(super) fn tokio_runtime() -> Result<tokio::runtime::Runtime, Outcome> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| fail(format_args!("cannot start the runtime: {e}")))
}

/// Runs a long-lived command (`run`, `demo`) until SIGINT/SIGTERM; a failure, including
/// one to start the runtime, is a runtime failure (exit 1), not a usage error.
fn daemon<F, Fut>(f: F) -> Outcome
where
    F: FnOnce(CancellationToken) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return Outcome::Failed;
        }
    };
    let result = rt.block_on(async move {
        let cancel = CancellationToken::new();
        spawn_signal_handler(cancel.clone());
        f(cancel).await
    });
    match result {
        Ok(()) => Outcome::Success,
        Err(e) => {
            eprintln!("error: {e:#}");
            Outcome::Failed
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

fn open_store(config: Option<&Path>) -> Result<Store, Outcome> {
    let cfg = load(config)?;
    Store::open(&cfg.config().state.path).map_err(fail)
}
