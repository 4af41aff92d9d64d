//! The one poll loop of the evidence sources (src/evidence/flink, src/evidence/connect):
//! each source is read on a timer, in a task of its own, and what it learnt is published
//! whole for the audit loop ([`View`]), so a slow or dead source never delays a round and
//! a reader never sees half a poll.
//!
//! What every source needs and must not get wrong twice: one warning when it starts
//! failing and one line when it answers again (not one per poll); the history kept across
//! failed polls (a JobManager that died with its job took its REST answers with it, not
//! what they said); and when the published history was read, so a gap is not explained by
//! a view older than its window ([`View::read_as_of_ms`], review 27, G7 and F-5).

use crate::clock::Clock;
use crate::evidence::http::SourceState;
use chrono::{DateTime, Utc};
use futures::FutureExt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What a source's poller learnt, shared with the audit loop.
#[derive(Debug, Clone, Default)]
pub struct View<H> {
    /// What the source said so far (kept across failed polls).
    pub history: H,
    /// The last poll's outcome.
    pub state: SourceState,
    /// Why part of the last poll could not be read while the rest was (Connect: the
    /// connector's config, which a proxy may refuse: it holds the connector's secrets).
    pub partial: Option<String>,
    /// When the last poll ended (wall clock, for `/api/status`).
    pub checked_at: Option<DateTime<Utc>>,
    /// When the last poll that read the source was sent, on the audit's clock: the history
    /// holds what happened up to then, and nothing of what came later.
    pub read_as_of_ms: Option<i64>,
}

/// The shared view: written by the poller after each poll, read by the audit loop.
pub type Shared<H> = Arc<RwLock<View<H>>>;

/// Reads a poisoned lock all the same: the writer replaces whole values, never half of one.
pub fn read<H: Clone>(view: &Shared<H>) -> View<H> {
    view.read().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Reads the view in place, under its lock (no copy: a gap's evidence reads it several
/// times, and an incident round explains thousands of gaps; review 28, R28-7). `f` must
/// be quick: the poller waits for it to publish.
pub fn with<H, R>(view: &Shared<H>, f: impl FnOnce(&View<H>) -> R) -> R {
    f(&view.read().unwrap_or_else(|p| p.into_inner()))
}

/// Sets the state of a view no poller writes (the source's URL was refused at start).
fn fail<H>(view: &Shared<H>, why: String) {
    view.write().unwrap_or_else(|p| p.into_inner()).state = SourceState::Error(why);
}

/// Starts polling `made` every `every` until `cancel`, or, when the source could not be
/// made (its URL refused), publishes why: not fatal, gaps then carry no evidence of it, as
/// without it. Returns the view and the URL as `/api/status` shows it (`configured`, the
/// URL without credentials, when no source was made).
pub fn start<S: Source, E: std::fmt::Display>(
    made: Result<S, E>,
    configured: &str,
    every: Duration,
    audit: &str,
    clock: &Clock,
    cancel: &CancellationToken,
) -> (Shared<S::History>, String) {
    let view: Shared<S::History> = Arc::default();
    let kind = S::KIND;
    match made {
        Ok(source) => {
            let url = source.shown_url();
            tracing::info!(audit = %audit, evidence = kind, of = %source.subject(), url = %url,
                "reading {kind} evidence for gap causes");
            tokio::spawn(run(
                source,
                view.clone(),
                every,
                audit.to_owned(),
                clock.clone(),
                cancel.child_token(),
            ));
            (view, url)
        }
        Err(e) => {
            tracing::warn!(audit = %audit, evidence = kind, error = %e,
                "cannot read {kind} evidence; gaps carry none (verdicts are not affected)");
            fail(&view, e.to_string());
            (view, crate::evidence::http::shown_url(configured))
        }
    }
}

/// One evidence source, as the poll loop reads it.
pub trait Source: Send + Sync + 'static {
    /// What it remembers across polls.
    type History: Clone + Default + Send + Sync + 'static;
    /// How logs name the source ("Flink", "Kafka Connect").
    const KIND: &'static str;
    /// What of the pipeline it reads, for logs (the job's or the connector's name, cleaned).
    fn subject(&self) -> String;
    /// Its URL without credentials or query (safe to log and show).
    fn shown_url(&self) -> String;
    /// Reads the source once into `history`, placing what changed on `clock`. `Ok(None)`:
    /// all read; `Ok(Some(why))`: the history was read, a secondary answer not (why);
    /// `Err(why)`: nothing usable this time.
    fn poll(
        &self,
        history: &mut Self::History,
        clock: &Clock,
    ) -> impl Future<Output = Result<Option<String>, String>> + Send;
    /// A poll that read nothing, at `at_ms` (Connect names such times in its windows).
    fn not_read(&self, _history: &mut Self::History, _at_ms: i64, _why: &str) {}
    /// What a gap cannot say while the partial answer is missing (the warning's end).
    fn partial_consequence(&self) -> &'static str {
        "some evidence is missing"
    }
    /// Logs what this poll changed, `before` being the history published by the last one.
    fn log_changes(&self, _audit: &str, _before: &Self::History, _after: &Self::History) {}
}

/// Polls `source` every `every` until `cancel`, publishing into `view`; changes are placed
/// on `clock` (the audit's, which its commit steps are on).
pub async fn run<S: Source>(
    source: S,
    view: Shared<S::History>,
    every: Duration,
    audit: String,
    clock: Clock,
    cancel: CancellationToken,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut history = read(&view).history;
    let (kind, subject, url) = (S::KIND, source.subject(), source.shown_url());
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let sent = clock.now_ms();
        // A panic in a poll (a driver's conversion of a hostile answer) would end this task
        // and leave the view "ok" and frozen for good: it is this poll's error instead, and
        // what it half-wrote is dropped (review of 497b384, H1).
        let polled = AssertUnwindSafe(source.poll(&mut history, &clock)).catch_unwind();
        let outcome = match tokio::select! {
            _ = cancel.cancelled() => return,
            r = polled => r,
        } {
            Ok(outcome) => outcome,
            Err(_) => {
                history = read(&view).history;
                Err(format!("reading the {kind} source panicked"))
            }
        };
        let before = read(&view);
        let (state, partial, read_as_of_ms) = match outcome {
            Ok(partial) => (SourceState::Ok, partial, Some(sent)),
            Err(why) => {
                source.not_read(&mut history, clock.now_ms(), &why);
                (SourceState::Error(why), None, before.read_as_of_ms)
            }
        };
        match (&before.state, &state) {
            // Warned once when it started failing; `/api/status` shows the current reason.
            (SourceState::Error(_), SourceState::Error(_)) => {}
            (_, SourceState::Error(why)) => tracing::warn!(
                audit = %audit, evidence = kind, of = %subject, url = %url,
                "cannot read {kind} evidence: {why}; gaps carry no {kind} evidence until it can be read (verdicts are not affected)"
            ),
            (SourceState::Error(_), SourceState::Ok) => tracing::info!(
                audit = %audit, evidence = kind, of = %subject, url = %url,
                "{kind} evidence read again"
            ),
            _ => {}
        }
        match (&before.partial, &partial) {
            (None, Some(why)) => tracing::warn!(
                audit = %audit, evidence = kind, of = %subject, url = %url,
                "{kind} evidence read in part: {why}; {}", source.partial_consequence()
            ),
            (Some(_), None) if state == SourceState::Ok => tracing::info!(
                audit = %audit, evidence = kind, of = %subject, url = %url,
                "{kind} evidence read whole again"
            ),
            _ => {}
        }
        if state == SourceState::Ok {
            source.log_changes(&audit, &before.history, &history);
        }
        *view.write().unwrap_or_else(|p| p.into_inner()) = View {
            history: history.clone(),
            state,
            partial,
            checked_at: Some(Utc::now()),
            read_as_of_ms,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A source answering from a script: each poll takes the next outcome.
    struct Scripted {
        outcomes: Mutex<Vec<Result<Option<String>, String>>>,
    }

    impl Source for Scripted {
        type History = Vec<i64>;
        const KIND: &'static str = "Test";
        fn subject(&self) -> String {
            "job".into()
        }
        fn shown_url(&self) -> String {
            "http://source/".into()
        }
        async fn poll(&self, h: &mut Vec<i64>, clock: &Clock) -> Result<Option<String>, String> {
            let next = self.outcomes.lock().map(|mut o| o.pop()).ok().flatten();
            let out = next.unwrap_or_else(|| Err("script ended".into()));
            if out.is_ok() {
                h.push(clock.now_ms());
            }
            out
        }
        fn not_read(&self, h: &mut Vec<i64>, at_ms: i64, _why: &str) {
            h.push(-at_ms);
        }
    }

    /// A source whose poll panics.
    struct Panicking;

    impl Source for Panicking {
        type History = Vec<i64>;
        const KIND: &'static str = "Test";
        fn subject(&self) -> String {
            "job".into()
        }
        fn shown_url(&self) -> String {
            "http://source/".into()
        }
        async fn poll(&self, h: &mut Vec<i64>, _: &Clock) -> Result<Option<String>, String> {
            h.push(1);
            panic!("a conversion the driver cannot make");
        }
    }

    /// A poll that panics is that poll's error, not the end of the poller: the view says
    /// so (it does not stay "ok"), the half-written history is dropped, and it polls on.
    #[tokio::test(start_paused = true)]
    async fn a_panicking_poll_is_an_error_not_a_frozen_view() {
        let clock = Clock::manual(1_000);
        let view: Shared<Vec<i64>> = Arc::default();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run(
            Panicking,
            view.clone(),
            Duration::from_secs(1),
            "a".into(),
            clock.clone(),
            cancel.clone(),
        ));
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        let v = read(&view);
        assert_eq!(
            v.state,
            SourceState::Error("reading the Test source panicked".into())
        );
        assert!(v.history.is_empty(), "{:?}", v.history);
        assert!(!task.is_finished(), "the poller ended");
        cancel.cancel();
        let _ = task.await;
    }

    /// A failed poll keeps the history and the time it was last read as of; a poll that
    /// reads moves that time to when it was sent, and a partial answer is published.
    #[tokio::test(start_paused = true)]
    async fn a_failed_poll_keeps_what_was_read_and_when() {
        let clock = Clock::manual(1_000);
        let view: Shared<Vec<i64>> = Arc::default();
        let mut script = vec![
            Ok(None),
            Err("refused".to_owned()),
            Ok(Some("config refused".to_owned())),
        ];
        script.reverse();
        let cancel = CancellationToken::new();
        let task = tokio::spawn(run(
            Scripted {
                outcomes: Mutex::new(script),
            },
            view.clone(),
            Duration::from_secs(1),
            "a".into(),
            clock.clone(),
            cancel.clone(),
        ));
        let mut seen = Vec::new();
        // Polls at 0, 1 and 2 s (paused time); each read 10 ms after, before the next tick.
        for i in 0..3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            let v = read(&view);
            seen.push((v.state.clone(), v.partial.clone(), v.read_as_of_ms));
            if i < 2 {
                clock.advance(1_000);
                tokio::time::sleep(Duration::from_millis(990)).await;
            }
        }
        cancel.cancel();
        let _ = task.await;
        assert_eq!(
            seen,
            vec![
                (SourceState::Ok, None, Some(1_000)),
                (SourceState::Error("refused".into()), None, Some(1_000)),
                (
                    SourceState::Ok,
                    Some("config refused".to_owned()),
                    Some(3_000)
                ),
            ]
        );
        assert_eq!(read(&view).history, vec![1_000, -2_000, 3_000]);
    }
}
