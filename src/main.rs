//! The `gap-auditor` command line: parse, run the command, map its outcome to an exit code.
//! The clap definitions are in `cli.rs`, the commands in `cli/`.

mod cli;

use std::process::ExitCode;

use clap::Parser;

/// How a command ended; the one place exit codes are decided (SPEC's command table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done; nothing lost (exit 0).
    Success,
    /// Records are missing: `check` found loss, `replay` could not write everything,
    /// `wait` is blocked by a gap (exit 1).
    Loss,
    /// `run` or `demo` failed at runtime (exit 1).
    Failed,
    /// Bad arguments or configuration, or an error that left the answer unknown (exit 2).
    Error,
    /// `wait --timeout` passed first (exit 3).
    TimedOut,
}

impl Outcome {
    /// The process exit code.
    fn code(self) -> u8 {
        match self {
            Outcome::Success => 0,
            Outcome::Loss | Outcome::Failed => 1,
            Outcome::Error => 2,
            Outcome::TimedOut => 3,
        }
    }
}

impl From<gap_auditor::wait::Exit> for Outcome {
    fn from(exit: gap_auditor::wait::Exit) -> Self {
        use gap_auditor::wait::Exit;
        match exit {
            Exit::Complete => Outcome::Success,
            Exit::Blocked => Outcome::Loss,
            Exit::Error => Outcome::Error,
            Exit::TimedOut => Outcome::TimedOut,
        }
    }
}

/// jemalloc, not glibc's malloc: under a long total loss the audit churns millions of small
/// keys across threads, and glibc's arenas kept the freed blocks (live heap flat at ~40 MiB
/// while resident memory crept +10-20 % over 5 minutes, measured with heaptrack on the
/// keys_total_loss fault test). jemalloc's size classes and decay give the pages back.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options (an operator's `_RJEM_MALLOC_CONF` still overrides them): a background
/// thread returns freed pages after 1 s instead of 10 s, and without waiting for the next
/// allocation. With the defaults the dirty pages a busy round leaves made resident memory
/// follow the load (80 to 111 MiB over 10 minutes of a total loss on a loaded machine, live
/// heap flat); with these it stayed within 93-109 MiB from the first minute on. Two arenas,
/// as for glibc (`memory::limit_arenas`): the default (4 per core) took 265 MiB peak for the
/// 500,000-gap round that took 241 MiB with glibc; two, 235 MiB.
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static MALLOC_CONF: &[u8] =
    b"narenas:2,background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0\0";

fn main() -> ExitCode {
    gap_auditor::memory::limit_arenas();
    let cli = cli::Cli::parse();
    gap_auditor::logging::init(matches!(cli.command, cli::Cmd::Demo { .. }));
    ExitCode::from(cli::commands::dispatch(cli).code())
}

#[cfg(test)]
mod tests {
    use super::Outcome;
    use gap_auditor::wait::Exit;

    /// SPEC's command table, as main.rs before the cli/ split returned it: 0 done, 1 loss
    /// (check, replay partial, wait blocked) or a failed run/demo, 2 error, 3 wait timed out.
    #[test]
    fn each_outcome_has_the_exit_code_of_the_command_table() {
        assert_eq!(Outcome::Success.code(), 0);
        assert_eq!(Outcome::Loss.code(), 1);
        assert_eq!(Outcome::Failed.code(), 1);
        assert_eq!(Outcome::Error.code(), 2);
        assert_eq!(Outcome::TimedOut.code(), 3);
        for exit in [Exit::Complete, Exit::Blocked, Exit::Error, Exit::TimedOut] {
            // The old main returned `exit as u8`.
            assert_eq!(Outcome::from(exit).code(), exit as u8, "{exit:?}");
        }
    }
}
