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

impl From<gap_auditor::commands::wait::Exit> for Outcome {
    fn from(exit: gap_auditor::commands::wait::Exit) -> Self {
        use gap_auditor::commands::wait::Exit;
        match exit {
            Exit::Complete => Outcome::Success,
            Exit::Blocked => Outcome::Loss,
            Exit::Error => Outcome::Error,
            Exit::TimedOut => Outcome::TimedOut,
        }
    }
}

// jemalloc with the daemon's options (see the macro for why).
gap_auditor::daemon_allocator!();

fn main() -> ExitCode {
    gap_auditor::memory::limit_arenas();
    let cli = cli::Cli::parse();
    gap_auditor::logging::init(matches!(cli.command, cli::Cmd::Demo { .. }));
    ExitCode::from(cli::commands::dispatch(cli).code())
}

#[cfg(test)]
mod tests {
    use super::Outcome;
    use gap_auditor::commands::wait::Exit;

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
