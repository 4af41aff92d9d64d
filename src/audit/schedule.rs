//! When the audit loop runs its next round: at every `verify_interval` tick, at once after
//! partitions are assigned, and, when a tick comes just before records fall due, at the
//! instant they do ([`super::Audit::due_soon`] says how long that is).

use std::time::Duration;
use tokio::time::{Instant, Interval};

/// The loop's round timing, apart from the loop so that it can be tested on paused time.
#[derive(Debug, Default)]
pub(super) struct RoundTimer {
    /// A round postponed to this instant: records fall due then.
    wait_until: Option<Instant>,
}

impl RoundTimer {
    /// The instant a postponed round waits for. While one waits, the tick is not listened
    /// to: it would only run the same round early.
    pub(super) fn waiting(&self) -> Option<Instant> {
        self.wait_until
    }

    /// The tick fired at `now`. `due_soon`: records fall due after that long (within the
    /// wait window). Returns whether to run the round now; otherwise it waits.
    pub(super) fn on_tick(&mut self, now: Instant, due_soon: Option<Duration>) -> bool {
        match due_soon {
            Some(wait) if !wait.is_zero() => {
                self.wait_until = Some(now + wait);
                false
            }
            _ => true,
        }
    }

    /// The postponed round's instant came: it runs now, and the next tick comes a whole
    /// interval later. Left on the old schedule, each wait would be a little longer than
    /// the one before (the commit poll takes a few ms), until one passed the window and
    /// records waited a round more again.
    pub(super) fn on_wait_over(&mut self, tick: &mut Interval) {
        self.wait_until = None;
        tick.reset();
    }

    /// Partitions were assigned: a round at once (it polls their pipeline commits, so
    /// `grace` starts counting now), unless a postponed one is about to run anyway.
    pub(super) fn on_assigned(&self, tick: &mut Interval) {
        if self.wait_until.is_none() {
            tick.reset_immediately();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::{MissedTickBehavior, interval};

    const PERIOD: Duration = Duration::from_secs(1);

    async fn started() -> Interval {
        let mut tick = interval(PERIOD);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tick.tick().await;
        tick
    }

    #[tokio::test(start_paused = true)]
    async fn a_tick_with_nothing_due_soon_runs_the_round_at_once() {
        let mut t = RoundTimer::default();
        assert!(t.on_tick(Instant::now(), None));
        assert!(t.on_tick(Instant::now(), Some(Duration::ZERO)));
        assert_eq!(t.waiting(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_postponed_round_runs_once_and_the_next_tick_is_a_period_after_it() {
        let mut tick = started().await;
        let mut t = RoundTimer::default();
        tick.tick().await;
        let fired = Instant::now();
        assert!(!t.on_tick(fired, Some(Duration::from_millis(40))));
        assert_eq!(t.waiting(), Some(fired + Duration::from_millis(40)));
        tokio::time::sleep_until(fired + Duration::from_millis(40)).await;
        t.on_wait_over(&mut tick);
        // Cleared: a past instant left here would run rounds back to back.
        assert_eq!(t.waiting(), None);
        let ran = Instant::now();
        tick.tick().await;
        assert_eq!(Instant::now() - ran, PERIOD);
    }

    #[tokio::test(start_paused = true)]
    async fn an_assignment_brings_the_next_tick_forward_unless_a_round_waits() {
        let mut tick = started().await;
        let mut t = RoundTimer::default();
        let before = Instant::now();
        t.on_assigned(&mut tick);
        tick.tick().await;
        assert_eq!(Instant::now(), before, "the round runs at once");
        // A round is waiting: the assignment leaves the tick alone.
        assert!(!t.on_tick(Instant::now(), Some(Duration::from_millis(10))));
        t.on_assigned(&mut tick);
        let at = Instant::now();
        tick.tick().await;
        assert_eq!(Instant::now() - at, PERIOD);
    }
}
