//! Figures of the reliability suite: each fault scenario ends by recording what it injected
//! and what it compared, one JSON line per scenario run, in the file named by
//! `GAP_AUDITOR_FIGURES` (nothing is written when it is unset). `scripts/reliability.sh`
//! sets it, runs the suite and renders `docs/RELIABILITY.md` from those lines, so the
//! document only ever shows numbers a test produced.

use serde::Serialize;
use std::io::Write;

/// What one scenario run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    /// Stable scenario id, e.g. `kill9_random_moments` (one table row per id).
    pub scenario: &'static str,
    /// Runs of the scenario (loop iterations) this line covers.
    pub runs: u32,
    /// Faults injected (kills, outages, rebalances, hostile records...).
    pub faults: u32,
    /// Records (or offsets) the ground truth says are lost.
    pub expected_lost: u64,
    /// Records the auditor reported lost.
    pub reported_lost: u64,
    /// Gaps in the ground truth.
    pub expected_gaps: u64,
    /// Gaps the auditor reported.
    pub reported_gaps: u64,
    /// Records reported lost that were not (must be 0).
    pub false_positives: u64,
    /// Lost records not reported (must be 0).
    pub false_negatives: u64,
    /// Free-form measured facts: durations, peaks, RSS, counts.
    pub notes: String,
}

/// Appends `f` to the figures file, when one is configured. Panics on I/O failure: a suite
/// asked to produce figures must not silently produce none.
pub fn record(f: &Figures) {
    let Ok(path) = std::env::var("GAP_AUDITOR_FIGURES") else {
        return;
    };
    let line = serde_json::to_string(f).expect("figures serialize");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("cannot open GAP_AUDITOR_FIGURES={path}: {e}"));
    writeln!(file, "{line}").unwrap_or_else(|e| panic!("cannot write {path}: {e}"));
}
