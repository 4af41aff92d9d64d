//! The audit's clock: wall-clock milliseconds that never step.
//!
//! Every age the ledger measures (`grace` since a commit was seen, `give_up_after` since a
//! record was declared missing, how long a run of records was read) is a difference of
//! these readings. Read from the system clock, a forward step (NTP correcting a VM that was
//! paused, an operator setting the date) would shorten `grace` and make lag look like loss.
//! So the reading is the wall time at the first call plus the MONOTONIC time elapsed since:
//! it tracks the wall clock within the drift accumulated since the process started, and
//! never jumps. Times persisted by an earlier process (a gap's `detected_at`) are compared
//! on the wall scale, which is what they are.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

/// Unix milliseconds, monotonic within the process (see the module docs).
pub fn now_ms() -> i64 {
    static ANCHOR: OnceLock<(Instant, i64)> = OnceLock::new();
    let (at, wall) = ANCHOR.get_or_init(|| (Instant::now(), wall_ms()));
    wall.saturating_add(i64::try_from(at.elapsed().as_millis()).unwrap_or(i64::MAX / 2))
}

/// The audit loop's clock: [`now_ms`] in the daemon; in unit tests one they move by hand,
/// so grace and give-up ages are tested without sleeping.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    manual: Option<Arc<AtomicI64>>,
}

impl Clock {
    /// The process clock ([`now_ms`]).
    pub fn system() -> Self {
        Self::default()
    }

    /// A clock standing at `start_ms` until [`Clock::advance`] moves it.
    pub fn manual(start_ms: i64) -> Self {
        Clock {
            manual: Some(Arc::new(AtomicI64::new(start_ms))),
        }
    }

    /// Moves a manual clock (and its clones) forward by `ms`; the system clock moves itself.
    pub fn advance(&self, ms: i64) {
        if let Some(t) = &self.manual {
            t.fetch_add(ms, Ordering::SeqCst);
        }
    }

    /// Unix milliseconds on this clock.
    pub fn now_ms(&self) -> i64 {
        match &self.manual {
            Some(t) => t.load(Ordering::SeqCst),
            None => now_ms(),
        }
    }
}

/// The system's wall clock (in tests: plus a step the test sets, as NTP or an operator
/// would).
fn wall_ms() -> i64 {
    let now = chrono::Utc::now().timestamp_millis();
    #[cfg(test)]
    let now = now + tests::STEP.load(std::sync::atomic::Ordering::SeqCst);
    now
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicI64, Ordering};

    /// A step of the wall clock, in ms (see [`wall_ms`]).
    pub(super) static STEP: AtomicI64 = AtomicI64::new(0);
    /// The step is process-wide: the tests that read the wall clock take turns.
    static WALL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn a_wall_clock_step_does_not_age_anything() {
        let _turn = WALL.lock().unwrap_or_else(|e| e.into_inner());
        let before = now_ms();
        let wall_before = wall_ms();
        // NTP corrects a VM that was paused: the wall clock jumps an hour ahead.
        STEP.store(3_600_000, Ordering::SeqCst);
        let wall_jump = wall_ms() - wall_before;
        let aged = now_ms() - before;
        STEP.store(0, Ordering::SeqCst);
        assert!(wall_jump >= 3_600_000, "the step is seen by the wall clock");
        assert!(
            aged < 1_000,
            "{aged} ms passed on the audit clock: grace would have been cut short"
        );
    }

    #[test]
    fn never_goes_back_and_follows_the_wall_clock() {
        let _turn = WALL.lock().unwrap_or_else(|e| e.into_inner());
        let mut last = now_ms();
        for _ in 0..10_000 {
            let t = now_ms();
            assert!(t >= last, "{t} < {last}");
            last = t;
        }
        let wall = chrono::Utc::now().timestamp_millis();
        assert!(
            (wall - now_ms()).abs() < 5_000,
            "within the drift of one test run"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(now_ms() - last >= 20, "elapsed time is counted");
    }
}
