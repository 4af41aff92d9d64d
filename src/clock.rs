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

use std::sync::OnceLock;
use std::time::Instant;

/// Unix milliseconds, monotonic within the process (see the module docs).
pub fn now_ms() -> i64 {
    static ANCHOR: OnceLock<(Instant, i64)> = OnceLock::new();
    let (at, wall) = ANCHOR.get_or_init(|| (Instant::now(), chrono::Utc::now().timestamp_millis()));
    wall.saturating_add(i64::try_from(at.elapsed().as_millis()).unwrap_or(i64::MAX / 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_goes_back_and_follows_the_wall_clock() {
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
