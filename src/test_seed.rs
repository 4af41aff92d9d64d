//! The seed of every property test (issue 36: a retry must replay the failing case).
//!
//! Every `proptest!` block of the crate starts with
//! `#![proptest_config(crate::test_seed::config())]` (or [`with_cases`] where it runs more
//! or fewer cases than proptest's default), so that:
//!
//! - the cases come from `PROPTEST_RNG_SEED` (a `u64`; `.ci/run` derives it from the
//!   commit, `scripts/test.sh` from the commit too unless it is set). proptest itself reads
//!   that variable as well (`contextualize_config`), so the two always agree;
//! - without it, one seed is drawn for the whole test process (not one per test), so one
//!   number replays the run;
//! - each test prints the seed to its stderr, which libtest captures and shows only with
//!   a failing test's output: `PROPTEST_RNG_SEED=<n> cargo test --lib <test name>` replays
//!   the same cases (proptest also persists the shrunk case under `proptest-regressions/`).

use proptest::test_runner::{Config, RngSeed};
use std::sync::OnceLock;

/// The seed of this test process: `PROPTEST_RNG_SEED`, else one drawn from the clock.
pub(crate) fn seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| {
        if let Ok(v) = std::env::var("PROPTEST_RNG_SEED") {
            match v.trim().parse() {
                Ok(seed) => return seed,
                Err(_) => eprintln!("proptest: PROPTEST_RNG_SEED={v:?} is not a u64: ignored"),
            }
        }
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(42, |d| d.as_nanos() as u64)
    })
}

/// proptest's default configuration (its default case count), seeded by [`seed`].
pub(crate) fn config() -> Config {
    seeded(Config::default())
}

/// [`config`] with `cases` cases.
pub(crate) fn with_cases(cases: u32) -> Config {
    seeded(Config {
        cases,
        ..Config::default()
    })
}

fn seeded(config: Config) -> Config {
    let seed = seed();
    eprintln!("proptest: PROPTEST_RNG_SEED={seed} (set it to replay these cases)");
    Config {
        rng_seed: RngSeed::Fixed(seed),
        ..config
    }
}
