//! The connector's and its tasks' states as successive polls saw them, the changes between
//! them, and the explanation of a gap from them (pure: no I/O, times passed in).
//!
//! What Kafka Connect does that decides the rules here:
//! - The status API says where things are now, not what happened: a task that failed and
//!   was restarted between two polls is only seen RUNNING (perhaps on another worker). So a
//!   change is what one poll shows against the previous one, and it is placed at the
//!   auditor's clock of the poll that saw it: at most one poll interval after it happened.
//! - A FAILED task does not restart by itself: an operator or a supervisor restarts it
//!   (`POST /connectors/{name}/tasks/{id}/restart`), a rebalance may move it to another
//!   worker. What it skipped then depends on the offsets its consumer group committed: the
//!   evidence names the failures and restarts, the commit step (the ledger's) says what
//!   was skipped.
//! - With `errors.tolerance=all` a sink connector skips records it cannot convert or
//!   transform; without `errors.deadletterqueue.topic.name` they go nowhere. That explains
//!   records committed in normal progress and never written (`dropped_in_flight`) whatever
//!   the window.

use super::rest::{ConnectorConfig, ConnectorStatus, ErrorHandling, StateInfo};
use crate::logging::printable;
use chrono::DateTime;
use std::collections::{BTreeMap, VecDeque};

/// Events kept (newest kept): a restart loop must not grow memory.
pub const MAX_EVENTS: usize = 64;
/// Events kept of one task, of the connector, or of the times not read (newest kept): one
/// task failing and restarting in a loop must not push every other task's changes out
/// (review 27c, F-6).
const MAX_EVENTS_OF_ONE: usize = 8;
/// Tasks followed (lowest ids): a connector's tasks are bounded by its `tasks.max`; a
/// larger answer is not followed further.
const MAX_TASKS: usize = 1024;
/// Events a gap names in words; the others in its window are counted.
const NAMED_EVENTS: usize = 4;
/// The longest trace line kept (the exception and its message).
const TRACE_CHARS: usize = 300;
/// The longest state kept (the documented ones are at most 10 characters).
const STATE_CHARS: usize = 32;
/// The longest worker id kept (`host:port`).
const WORKER_CHARS: usize = 128;
/// The longest reason kept for a time the REST API did not answer.
const WHY_CHARS: usize = 160;
/// The longest connector name shown (Connect allows long names; words stay readable).
const NAME_CHARS: usize = 200;

/// Where the connector or one task was at a poll: its state and worker, cleaned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// `RUNNING`, `FAILED`, ...
    pub state: String,
    /// The worker (`host:port`).
    pub worker_id: String,
}

impl Seen {
    fn of(info: &StateInfo) -> Self {
        Self {
            state: printable(info.state.trim(), STATE_CHARS),
            worker_id: printable(info.worker_id.trim(), WORKER_CHARS),
        }
    }
}

/// A change one poll saw against the previous one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateEvent {
    /// The auditor's clock at the poll that saw it (unix ms).
    pub at_ms: i64,
    /// The task's id; `None` for the connector itself.
    pub task: Option<i32>,
    /// The state before; `None`: the task appeared.
    pub from: Option<String>,
    /// The state after; `None`: the task is no longer listed.
    pub to: Option<String>,
    /// The worker after the change (`None` when no longer listed).
    pub worker_id: Option<String>,
    /// It is on another worker than before.
    pub moved: bool,
    /// The first line of its trace (the exception) and its root cause, when it is FAILED
    /// with one ([`trace_words`]).
    pub trace: Option<String>,
    /// Not a change: the REST API did not answer from this time (the auditor's clock)
    /// until `at_ms`, and why; what the connector and its tasks did then was not seen
    /// (review 27c, F-1).
    pub not_read: Option<(i64, String)>,
    /// The previous read (the auditor's clock): the change happened after it and by
    /// `at_ms`. `None`: seen at the first read, it happened at any time before.
    pub after_ms: Option<i64>,
    /// Not a state: the connector's config changed since the previous read (a new
    /// `topics`, an offset reset override, ...; which keys is not kept: they may hold
    /// secrets).
    pub reconfigured: bool,
    /// A task listed again after it was not: `from` is the state it was last listed in.
    /// A real worker lists no task of a STOPPED connector, so the usual way of skipping a
    /// poison record (stop, move the offsets, resume) shows the task going and coming back
    /// with the same id: that is a restart, not a new task.
    pub returned: bool,
}

impl StateEvent {
    /// An event of the connector at `at_ms` that is not a change of state (a time not
    /// read, a reconfiguration: the caller sets which).
    fn of_connector(at_ms: i64) -> Self {
        Self {
            at_ms,
            task: None,
            from: None,
            to: None,
            worker_id: None,
            moved: false,
            trace: None,
            not_read: None,
            reconfigured: false,
            after_ms: None,
            returned: false,
        }
    }

    /// Since when it may have happened: after the previous read, or, for a time not read,
    /// its start (review 28, R28-3: a change is seen a poll after it happened, so the poll
    /// that saw it may come after the window it explains).
    fn since_ms(&self) -> i64 {
        match (&self.not_read, self.after_ms) {
            (Some((from, _)), _) => *from,
            (None, Some(after)) => after,
            (None, None) => i64::MIN,
        }
    }

    /// Whose change it is, for the bound on each: a task, the connector, or a time not read.
    fn of(&self) -> (bool, Option<i32>) {
        (self.not_read.is_some(), self.task)
    }

    /// Named before other changes when a gap's window holds more than it names: a failure,
    /// a reconfiguration or a time nothing was seen is what most explains missing records.
    fn telling(&self) -> bool {
        self.not_read.is_some() || self.reconfigured || self.to.as_deref() == Some("FAILED")
    }

    /// The change in words, without its subject: `FAILED at T (exception)`, `RUNNING again
    /// at T on worker W`, `moved to worker W at T`, `no longer listed at T`.
    pub fn phrase(&self) -> String {
        let at = rfc3339(self.at_ms);
        if let Some((from, why)) = &self.not_read {
            return format!("not observed from {} to {at} ({why})", rfc3339(*from));
        }
        if self.reconfigured {
            return format!("reconfigured at {at} (its config changed)");
        }
        let on = match (&self.worker_id, self.moved) {
            (Some(w), true) if !w.is_empty() => format!(" on worker {w}"),
            _ => String::new(),
        };
        let trace = self
            .trace
            .as_ref()
            .map(|t| format!(" ({t})"))
            .unwrap_or_default();
        // "again" only for the state that means it runs again: a task listed back
        // UNASSIGNED or PAUSED was never in that state before (review 28b, R28b-8).
        if let (true, Some(to)) = (self.returned, &self.to) {
            return if to == "RUNNING" {
                format!("RUNNING again at {at}{on}")
            } else {
                format!("listed again, {to}, at {at}{trace}{on}")
            };
        }
        match (&self.from, &self.to) {
            (_, None) => format!("no longer listed at {at}"),
            (None, Some(to)) => format!("listed {to} at {at}{on}{trace}"),
            (Some(from), Some(to)) if from == to => match &self.worker_id {
                Some(w) => format!("moved to worker {w} at {at}"),
                None => format!("{to} at {at}"),
            },
            (Some(_), Some(to)) if to == "RUNNING" => format!("RUNNING again at {at}{on}"),
            (Some(_), Some(to)) => format!("{to} at {at}{trace}{on}"),
        }
    }
}

/// What changed, in words: `Kafka Connect task 0 of es-sink` or `Kafka Connect connector
/// es-sink`.
fn subject(task: Option<i32>, connector: &str) -> String {
    match task {
        Some(id) => format!("Kafka Connect task {id} of {connector}"),
        None => format!("Kafka Connect connector {connector}"),
    }
}

/// The connector as successive polls saw it.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// The connector at the last poll that read it; `None` before the first.
    connector: Option<Seen>,
    /// Its tasks at that poll, by id.
    tasks: BTreeMap<i32, Seen>,
    /// Tasks listed before and not at that poll, as last listed (at most [`MAX_TASKS`]): one
    /// listed again is a restart ([`StateEvent::returned`]).
    gone: BTreeMap<i32, Seen>,
    /// The changes, oldest first, at most [`MAX_EVENTS`].
    events: VecDeque<StateEvent>,
    /// Its error handling, from the last config read; `None` before one.
    errors: Option<ErrorHandling>,
    /// Whether it is a sink connector (`type` of the last status; `None` when not said).
    sink: Option<bool>,
    /// Since when (the auditor's clock) the status could not be read, and why; `None` while
    /// it can.
    not_read_since: Option<(i64, String)>,
    /// The fingerprint of the last config read; `None` before one.
    fingerprint: Option<u64>,
    /// When the status was last read (the auditor's clock); `None` before the first read.
    last_read_ms: Option<i64>,
    /// When the config was last read; `None` before the first read.
    config_read_ms: Option<i64>,
}

impl History {
    /// Takes one `/connectors/{name}/status`, read at `at_ms` on the auditor's clock, and
    /// records what changed since the previous one, and the time before it when the status
    /// could not be read, if there was one. The first read sets the baseline (when its
    /// states began is not known): of it, only what is not RUNNING is an event. Returns how
    /// many events it added.
    pub fn observe_status(&mut self, status: &ConnectorStatus, at_ms: i64) -> usize {
        self.sink = status.kind.as_deref().map(|k| k == "sink");
        let connector = Seen::of(&status.connector);
        let mut tasks: BTreeMap<i32, (Seen, Option<&str>)> = status
            .tasks
            .iter()
            .map(|t| (t.id, (Seen::of(&t.info), t.info.trace.as_deref())))
            .collect();
        while tasks.len() > MAX_TASKS {
            tasks.pop_last();
        }
        let mut new = Vec::new();
        let previous_read = self.last_read_ms.replace(at_ms);
        if let Some(since) = self.not_read_since.take() {
            new.push(StateEvent {
                not_read: Some(since),
                ..StateEvent::of_connector(at_ms)
            });
        }
        let Some(before) = self.connector.replace(connector.clone()) else {
            // The first read: when its states began is not known, but a connector or task
            // not RUNNING already is worth naming (it may be why records are missing).
            new.extend(
                std::iter::once((None, &connector, status.connector.trace.as_deref()))
                    .chain(
                        tasks
                            .iter()
                            .map(|(id, (seen, trace))| (Some(*id), seen, *trace)),
                    )
                    .filter(|(_, seen, _)| seen.state != "RUNNING")
                    .filter_map(|(id, seen, trace)| change(id, None, Some(seen), trace, at_ms)),
            );
            self.tasks = tasks.into_iter().map(|(id, (s, _))| (id, s)).collect();
            return self.keep(new, previous_read);
        };
        if let Some(e) = change(
            None,
            Some(&before),
            Some(&connector),
            status.connector.trace.as_deref(),
            at_ms,
        ) {
            new.push(e);
        }
        for (id, (seen, trace)) in &tasks {
            let before = self.tasks.get(id);
            let e = match before.is_none().then(|| self.gone.remove(id)).flatten() {
                // Listed again (after a stop and resume, a rebalance): an event even in the
                // state it left in, or its restart would not be named.
                Some(last) => change(Some(*id), Some(&last), Some(seen), *trace, at_ms)
                    .or_else(|| change(Some(*id), None, Some(seen), *trace, at_ms))
                    .map(|e| StateEvent {
                        from: Some(last.state.clone()),
                        moved: last.worker_id != seen.worker_id,
                        returned: true,
                        ..e
                    }),
                None => change(Some(*id), before, Some(seen), *trace, at_ms),
            };
            new.extend(e);
        }
        for (id, seen) in &self.tasks {
            if !tasks.contains_key(id) {
                // A STOPPED connector lists no tasks (Kafka >= 3.5): its STOPPED says it.
                if connector.state != "STOPPED" {
                    new.extend(change(Some(*id), Some(seen), None, None, at_ms));
                }
                self.gone.insert(*id, seen.clone());
            }
        }
        while self.gone.len() > MAX_TASKS {
            self.gone.pop_last();
        }
        self.tasks = tasks.into_iter().map(|(id, (s, _))| (id, s)).collect();
        self.keep(new, previous_read)
    }

    /// Keeps `new` events, seen by a read after the one at `after_ms`: the oldest of one
    /// subject go past [`MAX_EVENTS_OF_ONE`], then the oldest of all past [`MAX_EVENTS`],
    /// failures, reconfigurations and blind times last (review 28, R28-2: a hundred tasks
    /// moving at once pushed a failure seen with them out). Returns how many were added.
    fn keep(&mut self, new: Vec<StateEvent>, after_ms: Option<i64>) -> usize {
        let added = new.len();
        for mut e in new {
            e.after_ms = after_ms;
            let of = e.of();
            if self.events.iter().filter(|k| k.of() == of).count() >= MAX_EVENTS_OF_ONE
                && let Some(oldest) = self.events.iter().position(|k| k.of() == of)
            {
                self.events.remove(oldest);
            }
            self.events.push_back(e);
        }
        // Over the cap, what goes first: older events before this read's (newer news wins;
        // review 28b, R28b-4: 64 kept failures made every later change go on arrival), an
        // ordinary change before a failure, a blind time or a reconfiguration (review 28,
        // R28-2: a crowd of moves pushed out the failure seen with them), the oldest first.
        while self.events.len() > MAX_EVENTS {
            let old = self.events.len().saturating_sub(added);
            let untelling_old = self.events.iter().take(old).position(|e| !e.telling());
            let untelling_new = self
                .events
                .iter()
                .skip(old)
                .position(|e| !e.telling())
                .map(|i| old + i);
            let at = match (untelling_old, old > 0, untelling_new) {
                (Some(i), _, _) => i,
                (None, true, _) => 0,
                (None, false, Some(i)) => i,
                (None, false, None) => 0,
            };
            self.events.remove(at);
        }
        added
    }

    /// A poll at `at_ms` could not read the status, for `why`: until one does, what the
    /// connector did is not seen, and a gap whose window this covers says so.
    pub fn note_not_read(&mut self, at_ms: i64, why: &str) {
        if self.not_read_since.is_none() {
            self.not_read_since = Some((at_ms, printable(why, WHY_CHARS)));
        }
    }

    /// When the status or the config was last read (the auditor's clock); `None` before a
    /// read.
    pub fn read_ms(&self) -> Option<i64> {
        self.last_read_ms.max(self.config_read_ms)
    }

    /// Takes one `/connectors/{name}/config`, read at `at_ms` on the auditor's clock: its
    /// error handling, and a change of the config since the last read as an event
    /// ("reconfigured").
    pub fn observe_config(&mut self, config: ConnectorConfig, at_ms: i64) {
        let before = self.fingerprint.replace(config.fingerprint);
        let previous_read = self.config_read_ms.replace(at_ms);
        self.errors = Some(config.errors);
        if before.is_some_and(|f| f != config.fingerprint) {
            self.keep(
                vec![StateEvent {
                    reconfigured: true,
                    ..StateEvent::of_connector(at_ms)
                }],
                previous_read,
            );
        }
    }

    /// The connector at the last poll; `None` before one.
    pub fn connector(&self) -> Option<&Seen> {
        self.connector.as_ref()
    }

    /// Its tasks at the last poll, by id.
    pub fn tasks(&self) -> &BTreeMap<i32, Seen> {
        &self.tasks
    }

    /// The changes kept, oldest first.
    pub fn events(&self) -> impl DoubleEndedIterator<Item = &StateEvent> {
        self.events.iter()
    }

    /// The connector's error handling, once its config was read.
    pub fn error_handling(&self) -> Option<&ErrorHandling> {
        self.errors.as_ref()
    }

    /// What the connector's history tells of a gap whose commit step was seen at `at_ms`
    /// (its left position committed after `since_ms`; the poller reads every `poll_ms`):
    /// [`Self::explain`] over the step's [`window`], and whether the connector was STOPPED in
    /// it. A STOPPED connector runs no task, so its offsets move only when an operator sets
    /// them (Connect's offsets API, `PATCH /connectors/{name}/offsets`, or a consumer group
    /// reset: both need the connector stopped): the usual way past a poison record on a
    /// real worker (stop, PATCH, resume). Not "STOPPED at the step": the step and the
    /// states are each seen up to a poll late, and on a real worker the step was seen 0.1 s
    /// after the resume once, 0.1 s after the stop another time.
    pub fn explain_step(
        &self,
        connector: &str,
        since_ms: Option<i64>,
        at_ms: i64,
        poll_ms: i64,
        dropped_in_flight: bool,
    ) -> Option<String> {
        let span = window(since_ms, at_ms, poll_ms);
        let words = self.explain(connector, Some(span), dropped_in_flight);
        if !self.stopped_in(span) {
            return words;
        }
        // Not "never by a task" (review 28b, R28b-2): a sink task commits what it acked as it
        // stops, so a stop can be the jump itself.
        const SET: &str = "was STOPPED between the commits: its offsets then move only through Connect's offsets API, a consumer group reset or its tasks' last commit as they stopped";
        Some(match words {
            Some(w) => format!("{w}; the connector {SET}"),
            None => format!("{} {SET}", subject(None, &printable(connector, NAME_CHARS))),
        })
    }

    /// The connector was seen STOPPED in `(after_ms, by_ms]`: a change to STOPPED seen then,
    /// or its last change seen before then (the first read's state when not RUNNING is
    /// one) left it STOPPED.
    pub fn stopped_in(&self, (after_ms, by_ms): (i64, i64)) -> bool {
        let connector = || {
            self.events
                .iter()
                .filter(|e| e.task.is_none() && e.not_read.is_none())
        };
        let stopped = |e: &StateEvent| e.to.as_deref() == Some("STOPPED");
        // A reconfiguration says nothing of the state (review 28b, R28b-3).
        connector().any(|e| e.at_ms > after_ms && e.since_ms() < by_ms && stopped(e))
            || connector()
                .filter(|e| !e.reconfigured)
                .rfind(|e| e.at_ms <= after_ms)
                .is_some_and(stopped)
    }

    /// What the connector's history tells of a gap, in words, or `None`: the changes with
    /// `after_ms < at_ms <= by_ms` (a few named, the rest counted), and for
    /// `dropped_in_flight` whether the connector skips records silently.
    pub fn explain(
        &self,
        connector: &str,
        window: Option<(i64, i64)>,
        dropped_in_flight: bool,
    ) -> Option<String> {
        let connector = printable(connector, NAME_CHARS);
        let changes = window.and_then(|(after_ms, by_ms)| {
            // A change that may have happened in the window (between the read before the
            // one that saw it and that one), or a time the API did not answer that overlaps
            // it (still going on, or ended by a later read).
            let inside: Vec<&StateEvent> = self
                .events
                .iter()
                .filter(|e| e.at_ms > after_ms && e.since_ms() < by_ms)
                .collect();
            let words = changes_words(&connector, &inside);
            let ongoing = self
                .not_read_since
                .as_ref()
                .filter(|(from, _)| *from < by_ms)
                .map(|(from, why)| {
                    format!(
                        "{} not observed since {} ({why})",
                        subject(None, &connector),
                        rfc3339(*from)
                    )
                });
            match (words, ongoing) {
                (Some(w), Some(o)) => Some(format!("{w}; {o}")),
                (w, o) => w.or(o),
            }
        });
        // Only a sink connector writes what it read (a source connector that feeds the
        // topic has no dead-letter queue and drops nothing of it: review 27c, F-7).
        let silent = dropped_in_flight
            && self.sink != Some(false)
            && self.errors.as_ref().is_some_and(|e| e.skips_silently());
        const SKIPS: &str = "skips records it cannot convert or transform (errors.tolerance=all) \
                             and has no dead-letter queue";
        match (changes, silent) {
            (Some(c), true) => Some(format!("{c}; the connector {SKIPS}")),
            (Some(c), false) => Some(c),
            (None, true) => Some(format!("Kafka Connect connector {connector} {SKIPS}")),
            (None, false) => None,
        }
    }
}

/// The window of a commit step seen at `at_ms`, whose left position was committed after
/// `since_ms`: from one poll interval before `since_ms` to `at_ms`. A change counts in it
/// when it may have happened there: after the read before the one that saw it (review 28,
/// R28-3), so a change the first poll after the step saw is named — on a real worker
/// (docs/TESTING.md "A real Kafka Connect worker") the resume, 0.3 s after the step was
/// seen, was seen 0.9 s after it. The right edge is not moved a poll later as well: that
/// counted the poll's lateness twice and named failures up to two polls after the step
/// (review 28b, R28b-1).
pub fn window(since_ms: Option<i64>, at_ms: i64, poll_ms: i64) -> (i64, i64) {
    (since_ms.unwrap_or(at_ms).saturating_sub(poll_ms), at_ms)
}

/// What a FAILED trace says in words: its first line (the exception), and its root cause
/// (the last `Caused by:` line) when it has one. A real worker (Kafka 4.4) wraps whatever a
/// sink task's `put` throws in `ConnectException: Exiting WorkerSinkTask due to unrecoverable
/// exception.`, and a conversion failure in `ConnectException: Tolerance exceeded in error
/// handler`: the same words for every failure, the sink's own reason only in the last
/// `Caused by:` (docs/TESTING.md "A real Kafka Connect worker"). Each part redacted and
/// capped at [`TRACE_CHARS`].
fn trace_words(trace: &str) -> Option<String> {
    let mut lines = trace.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = printable(&crate::logging::redact(lines.next()?), TRACE_CHARS);
    let root = lines
        .filter_map(|l| l.strip_prefix("Caused by:"))
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .map(|l| printable(&crate::logging::redact(l), TRACE_CHARS));
    Some(match root {
        Some(root) if root != first => format!("{first}; caused by {root}"),
        _ => first,
    })
}

/// The event between `before` and `after`, if anything changed.
fn change(
    task: Option<i32>,
    before: Option<&Seen>,
    after: Option<&Seen>,
    trace: Option<&str>,
    at_ms: i64,
) -> Option<StateEvent> {
    if before == after {
        return None;
    }
    let to = after.map(|s| s.state.clone());
    let trace = match (to.as_deref(), trace) {
        (Some("FAILED"), Some(t)) => trace_words(t),
        _ => None,
    };
    Some(StateEvent {
        at_ms,
        task,
        from: before.map(|s| s.state.clone()),
        to,
        worker_id: after.map(|s| s.worker_id.clone()),
        moved: after.is_some_and(|a| before.is_none_or(|b| b.worker_id != a.worker_id)),
        trace,
        not_read: None,
        reconfigured: false,
        after_ms: None,
        returned: false,
    })
}

/// The events in words, grouped by subject in the order each first changed: "Kafka Connect
/// task 0 of es-sink FAILED at T (exception), RUNNING again at T2 on worker W". At most
/// [`NAMED_EVENTS`] are named; the others are counted.
fn changes_words(connector: &str, events: &[&StateEvent]) -> Option<String> {
    if events.is_empty() {
        return None;
    }
    // The failures and blind times first (review 27c, F-6: a restart loop's RUNNING
    // changes named four at a time hid the failure), then the rest; told in time order.
    let mut named: Vec<usize> = (0..events.len()).filter(|&i| events[i].telling()).collect();
    named.extend((0..events.len()).filter(|&i| !events[i].telling()));
    named.truncate(NAMED_EVENTS);
    named.sort_unstable();
    let mut groups: Vec<(Option<i32>, Vec<String>)> = Vec::new();
    for e in named.iter().map(|&i| events[i]) {
        match groups.iter_mut().find(|(t, _)| *t == e.task) {
            Some((_, phrases)) => phrases.push(e.phrase()),
            None => groups.push((e.task, vec![e.phrase()])),
        }
    }
    let mut words = groups
        .iter()
        .map(|(task, phrases)| format!("{} {}", subject(*task, connector), phrases.join(", ")))
        .collect::<Vec<_>>()
        .join("; ");
    let more = events.len().saturating_sub(NAMED_EVENTS);
    if more > 0 {
        words.push_str(&format!(
            "; and {more} more Kafka Connect state change{}",
            if more == 1 { "" } else { "s" }
        ));
    }
    Some(words)
}

/// Unix ms as `2026-12-06T02:14:00Z` (whole seconds suffice).
pub fn rfc3339(ms: i64) -> String {
    DateTime::from_timestamp_millis(ms).map_or_else(
        || format!("{ms} ms"),
        |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::super::rest::tests::{CONFIG, STATUS};
    use super::super::rest::{parse_config, parse_status};
    use super::*;

    /// 2026-12-06T02:14:00Z.
    const T: i64 = 1_796_523_240_000;
    const EXCEPTION: &str =
        "org.apache.kafka.connect.errors.ConnectException: Tolerance exceeded in error handler";

    /// The status of sink connector `es-sink` (RUNNING on w:1) with tasks `0..n`, task `id`
    /// in `state_of(id)`, all on `worker`.
    fn many_tasks(
        n: usize,
        state_of: impl Fn(usize) -> &'static str,
        worker: &str,
    ) -> ConnectorStatus {
        let tasks: Vec<String> = (0..n)
            .map(|id| {
                let state = state_of(id);
                format!(r#"{{"id":{id},"state":"{state}","worker_id":"{worker}"}}"#)
            })
            .collect();
        parse_status(
            format!(
                r#"{{"name":"es-sink","connector":{{"state":"RUNNING","worker_id":"w:1"}},"tasks":[{}],"type":"sink"}}"#,
                tasks.join(",")
            )
            .as_bytes(),
        )
        .expect("fixture")
    }

    /// The status of connector `es-sink`: the connector on connect-1, task 0 as given.
    fn status(task0: &str, worker: &str, trace: Option<&str>) -> ConnectorStatus {
        let trace = trace.map_or(String::new(), |t| {
            format!(r#","trace":{}"#, serde_json::Value::from(t))
        });
        parse_status(
            format!(
                r#"{{"name":"es-sink","connector":{{"state":"RUNNING","worker_id":"connect-1:8083"}},
                "tasks":[{{"id":0,"state":"{task0}","worker_id":"{worker}"{trace}}}],"type":"sink"}}"#
            )
            .as_bytes(),
        )
        .expect("fixture")
    }

    fn failed_then_running() -> History {
        let mut h = History::default();
        assert_eq!(
            h.observe_status(&status("RUNNING", "connect-1:8083", None), T - 30_000),
            0
        );
        let trace = format!(
            "{EXCEPTION}\n\tat org.apache.kafka.connect.runtime.errors.RetryWithToleranceOperator.execAndHandleError(RetryWithToleranceOperator.java:230)\n"
        );
        assert_eq!(
            h.observe_status(&status("FAILED", "connect-1:8083", Some(&trace)), T),
            1
        );
        // Unchanged: nothing.
        assert_eq!(
            h.observe_status(&status("FAILED", "connect-1:8083", Some(&trace)), T + 5_000),
            0
        );
        assert_eq!(
            h.observe_status(&status("RUNNING", "connect-2:8083", None), T + 30_000),
            1
        );
        h
    }

    /// The first poll is the baseline; a task's failure and its restart on another worker
    /// are two events, named in words with the exception's first line.
    #[test]
    fn a_task_failed_and_running_again_elsewhere_is_named() {
        let h = failed_then_running();
        let events: Vec<_> = h.events().cloned().collect();
        assert_eq!(events.len(), 2);
        assert_eq!(
            (
                events[0].task,
                events[0].from.as_deref(),
                events[0].to.as_deref()
            ),
            (Some(0), Some("RUNNING"), Some("FAILED"))
        );
        assert_eq!(events[0].trace.as_deref(), Some(EXCEPTION));
        assert!(!events[0].moved && events[1].moved);
        assert_eq!(
            h.explain(
                "es-sink",
                Some(window(Some(T - 10_000), T + 30_000, 1_000)),
                false
            )
            .as_deref(),
            Some(
                "Kafka Connect task 0 of es-sink FAILED at 2026-12-06T02:14:00Z \
                 (org.apache.kafka.connect.errors.ConnectException: Tolerance exceeded in error \
                 handler), RUNNING again at 2026-12-06T02:14:30Z on worker connect-2:8083"
            )
        );
        assert_eq!(h.tasks()[&0].worker_id, "connect-2:8083");
    }

    /// The window is `(since - one poll, at]`: a change that cannot have happened in it is
    /// not named (the jump may have another cause), one that may have is, by a millisecond
    /// (a change happened between the read before the one that saw it and that one).
    #[test]
    fn only_changes_seen_in_the_window_are_named() {
        let h = failed_then_running();
        let named = |since: Option<i64>, at: i64| {
            h.explain("es-sink", Some(window(since, at, 1_000)), false)
        };
        // Both before the window (seen at or before since - 1 poll).
        assert_eq!(named(Some(T + 31_000), T + 60_000), None);
        // Both after it: the failure seen at T happened after the read at T - 30 s, which
        // is the window's end (review 28b, R28b-1: the end is not moved a poll later too).
        assert_eq!(named(Some(T - 60_000), T - 30_000), None);
        // Review 28, R28-3: seen by the first read after the jump, it may have happened
        // before it (after the read at T - 30 s): named.
        assert!(named(Some(T - 60_000), T - 29_999).is_some_and(|w| w.contains("FAILED at")));
        // Likewise the restart seen at T + 30 s, after a read at T + 5 s, for a jump seen
        // at T + 20 s.
        assert!(named(Some(T + 10_000), T + 20_000).is_some_and(|w| w.contains("RUNNING again")));
        // The failure alone: the restart was seen after the jump.
        let failure = named(Some(T - 60_000), T).expect("the failure");
        assert!(
            failure.ends_with(&format!("FAILED at 2026-12-06T02:14:00Z ({EXCEPTION})")),
            "{failure}"
        );
        // The restart alone: seen within one poll after since.
        let restart = named(Some(T + 30_999), T + 40_000).expect("the restart");
        assert!(
            restart.contains("RUNNING again") && !restart.contains("FAILED"),
            "{restart}"
        );
        // No since: the window is one poll up to the step.
        assert!(named(None, T + 30_500).is_some());
        assert_eq!(named(None, T + 31_001), None);
        // No commit step: no window, nothing named.
        assert_eq!(h.explain("es-sink", None, false), None);
    }

    /// A restart loop: the last MAX_EVENTS_OF_ONE events of the task are kept; a gap names
    /// NAMED_EVENTS and counts the rest, so its words stay bounded.
    #[test]
    fn events_and_words_are_bounded() {
        let mut h = History::default();
        h.observe_status(&status("RUNNING", "w:1", None), 0);
        for i in 1..=100 {
            let state = if i % 2 == 1 { "FAILED" } else { "RUNNING" };
            h.observe_status(&status(state, "w:1", Some(&"x".repeat(1_000))), i * 1_000);
        }
        assert_eq!(h.events().count(), MAX_EVENTS_OF_ONE);
        assert_eq!(h.events().next().map(|e| e.at_ms), Some(93_000));
        let words = h
            .explain("es-sink", Some((0, 200_000)), false)
            .expect("named");
        assert!(
            words.ends_with("; and 4 more Kafka Connect state changes"),
            "{words}"
        );
        assert_eq!(words.matches(" at 1970-").count(), NAMED_EVENTS, "{words}");
        let trace = h.events().find_map(|e| e.trace.clone()).expect("trace");
        assert_eq!(trace.chars().count(), TRACE_CHARS);
        // Many tasks changing at once: MAX_EVENTS in all.
        h.observe_status(&many_tasks(200, |_| "FAILED", "w:1"), 300_000);
        assert_eq!(h.events().count(), MAX_EVENTS);
    }

    /// Review 28, R28-2: a hundred tasks moving to other workers in the poll that saw one
    /// fail keep the failure (the cap drops other changes first), and it is named first.
    #[test]
    fn a_failure_outlives_a_crowd_of_moves() {
        let mut h = History::default();
        h.observe_status(&many_tasks(100, |_| "RUNNING", "w:1"), T);
        let task_3_fails = |id| if id == 3 { "FAILED" } else { "RUNNING" };
        h.observe_status(&many_tasks(100, task_3_fails, "w:2"), T + 1_000);
        assert_eq!(h.events().count(), MAX_EVENTS);
        assert!(
            h.events()
                .any(|e| e.task == Some(3) && e.to.as_deref() == Some("FAILED"))
        );
        let words = h
            .explain("es-sink", Some((T, T + 1_000)), false)
            .expect("named");
        assert!(
            words.starts_with("Kafka Connect task 3 of es-sink FAILED at"),
            "{words}"
        );
    }

    /// Review 28b, R28b-4: a history full of failures (a database outage failing every
    /// task) still keeps the changes that follow: the oldest failure goes, not the news.
    #[test]
    fn a_history_full_of_failures_keeps_what_follows() {
        let tasks = |state: &'static str| many_tasks(MAX_EVENTS, move |_| state, "w:1");
        let mut h = History::default();
        h.observe_status(&tasks("RUNNING"), T);
        h.observe_status(&tasks("FAILED"), T + 1_000);
        assert_eq!(h.events().filter(|e| e.telling()).count(), MAX_EVENTS);
        h.observe_status(&tasks("RUNNING"), T + 2_000);
        assert_eq!(h.events().count(), MAX_EVENTS);
        assert_eq!(
            h.events().filter(|e| e.at_ms == T + 2_000).count(),
            MAX_EVENTS,
            "the restarts, all kept"
        );
    }

    /// Review 28b, R28b-3: a reconfiguration while the connector is STOPPED says nothing of
    /// its state: a later step still knows it was STOPPED.
    #[test]
    fn a_reconfiguration_does_not_hide_a_stop() {
        let stopped = r#"{"name":"es-sink","connector":{"state":"STOPPED","worker_id":"w:1"},"tasks":[],"type":"sink"}"#;
        let mut h = History::default();
        h.observe_status(&status("RUNNING", "w:1", None), T);
        h.observe_config(parse_config(br#"{"topics":"a"}"#).expect("config"), T);
        h.observe_status(
            &parse_status(stopped.as_bytes()).expect("fixture"),
            T + 1_000,
        );
        h.observe_config(
            parse_config(br#"{"topics":"b"}"#).expect("config"),
            T + 2_000,
        );
        assert!(h.events().any(|e| e.reconfigured));
        assert!(h.stopped_in((T + 3_000, T + 4_000)), "still STOPPED");
    }

    /// Review 27c, F-6: one task failing and restarting in a loop neither pushes another
    /// task's failure out of the history nor out of a gap's words (named first).
    #[test]
    fn a_restart_loop_of_one_task_hides_no_other_failure() {
        let two = |t0: &str, t1: &str| {
            parse_status(
                format!(
                    r#"{{"name":"es-sink","connector":{{"state":"RUNNING","worker_id":"w:1"}},
                    "tasks":[{{"id":0,"state":"{t0}","worker_id":"w:1"}},
                             {{"id":1,"state":"{t1}","worker_id":"w:1","trace":"{EXCEPTION}\n\tat x"}}],"type":"sink"}}"#
                )
                .as_bytes(),
            )
            .expect("fixture")
        };
        let mut h = History::default();
        h.observe_status(&two("RUNNING", "RUNNING"), 0);
        h.observe_status(&two("RUNNING", "FAILED"), 1_000);
        for i in 2..=200 {
            let t0 = if i % 2 == 0 { "FAILED" } else { "RUNNING" };
            h.observe_status(&two(t0, "FAILED"), i * 1_000);
        }
        assert!(
            h.events().any(|e| e.task == Some(1) && e.at_ms == 1_000),
            "task 1's failure kept"
        );
        let words = h
            .explain("es-sink", Some((0, 300_000)), false)
            .expect("named");
        assert!(
            words.starts_with(&format!(
                "Kafka Connect task 1 of es-sink FAILED at 1970-01-01T00:00:01Z ({EXCEPTION}); Kafka Connect task 0 of es-sink FAILED at 1970-01-01T00:03:14Z, FAILED at"
            )) && words.ends_with("; and 5 more Kafka Connect state changes"),
            "{words}"
        );
    }

    /// Tasks appearing and disappearing (a reconfiguration, tasks.max changed) and the
    /// connector's own state are events; control characters from outside never reach the
    /// words.
    #[test]
    fn tasks_appearing_and_the_connector_itself_are_events() {
        let mut h = History::default();
        h.observe_status(&parse_status(STATUS.as_bytes()).expect("fixture"), 0);
        assert_eq!(h.tasks().len(), 2);
        assert_eq!(h.connector().map(|c| c.state.as_str()), Some("RUNNING"));
        let next = r#"{"name":"hdfs-sink-connector",
            "connector":{"state":"PAUSED","worker_id":"fakehost:8083"},
            "tasks":[{"id":0,"state":"PAUSED","worker_id":"fakehost:8083"},
                     {"id":2,"state":"RUNNING","worker_id":"evil\u001b[2J:8083"}]}"#;
        assert_eq!(
            h.observe_status(&parse_status(next.as_bytes()).expect("fixture"), T),
            4
        );
        let words = h
            .explain("hdfs-sink", Some((T - 1, T)), false)
            .expect("named");
        assert_eq!(
            words,
            "Kafka Connect connector hdfs-sink PAUSED at 2026-12-06T02:14:00Z; \
             Kafka Connect task 0 of hdfs-sink PAUSED at 2026-12-06T02:14:00Z; \
             Kafka Connect task 2 of hdfs-sink listed RUNNING at 2026-12-06T02:14:00Z on worker evil[2J:8083; \
             Kafka Connect task 1 of hdfs-sink no longer listed at 2026-12-06T02:14:00Z"
        );
    }

    /// `dropped_in_flight` with `errors.tolerance=all` and no dead-letter queue: the clause
    /// is added, after the changes or alone; never for other causes or with a queue.
    #[test]
    fn the_tolerance_clause_explains_records_dropped_in_flight() {
        let all = CONFIG.replace(
            r#""tasks.max": "10","#,
            r#""tasks.max": "10", "errors.tolerance": "all","#,
        );
        let mut h = failed_then_running();
        assert_eq!(
            h.explain("es-sink", Some((T + 40_000, T + 50_000)), true),
            None,
            "config not read"
        );
        h.observe_config(parse_config(all.as_bytes()).expect("fixture"), T);
        assert_eq!(
            h.explain("es-sink", Some((T + 40_000, T + 50_000)), true)
                .as_deref(),
            Some(
                "Kafka Connect connector es-sink skips records it cannot convert or transform \
                 (errors.tolerance=all) and has no dead-letter queue"
            )
        );
        assert_eq!(
            h.explain("es-sink", Some((T + 40_000, T + 50_000)), false),
            None
        );
        let both = h.explain("es-sink", Some((T - 1, T)), true).expect("both");
        assert!(
            both.ends_with(
                "handler); the connector skips records it cannot convert or transform \
                 (errors.tolerance=all) and has no dead-letter queue"
            ),
            "{both}"
        );
        h.observe_config(parse_config(CONFIG.as_bytes()).expect("fixture"), T);
        assert_eq!(
            h.explain("es-sink", Some((T + 40_000, T + 50_000)), true),
            None
        );
    }

    /// A config that changed between two reads (a new `topics`, an offset reset override)
    /// is an event a gap in its window names; the same config in another key order is not
    /// a change, and the config's values are never kept.
    #[test]
    fn a_changed_config_is_a_reconfiguration() {
        let mut h = History::default();
        h.observe_status(&status("RUNNING", "w:1", None), T);
        let config = |body: &str| parse_config(body.as_bytes()).expect("config");
        h.observe_config(config(r#"{"topics":"a","connection.password":"pw1"}"#), T);
        h.observe_config(
            config(r#"{"connection.password":"pw1","topics":"a"}"#),
            T + 1_000,
        );
        assert_eq!(
            h.events().count(),
            0,
            "the first read and a reordering change nothing"
        );
        h.observe_config(
            config(r#"{"topics":"a,b","connection.password":"pw1"}"#),
            T + 2_000,
        );
        assert_eq!(
            h.explain("es-sink", Some((T + 1_000, T + 2_000)), false)
                .as_deref(),
            Some(
                "Kafka Connect connector es-sink reconfigured at 2026-12-06T02:14:02Z (its config changed)"
            )
        );
        assert!(!format!("{h:?}").contains("pw1"));
    }

    /// What a real Kafka 4.4 worker answered for a sink task whose `put` threw (captured by
    /// scripts/connect-seed.sh): the first line is the runtime's wrapper, the same for every
    /// such failure; the words name the root cause too (it said only the wrapper).
    #[test]
    fn a_real_workers_trace_names_its_root_cause() {
        let real = parse_status(include_bytes!("fixtures/status-task-failed-in-put.json"))
            .expect("the real worker's JSON");
        let mut h = History::default();
        h.observe_status(
            &parse_status(include_bytes!("fixtures/status-running.json")).expect("real"),
            T - 1_000,
        );
        assert_eq!(h.observe_status(&real, T), 1);
        let e = h.events().next_back().expect("the failure");
        assert_eq!(
            e.trace.as_deref(),
            Some(
                "org.apache.kafka.connect.errors.ConnectException: Exiting WorkerSinkTask due to \
                 unrecoverable exception.; caused by org.apache.kafka.connect.errors.ConnectException: \
                 seed sink refuses the poison record at try-topic-31343-0 offset 2"
            )
        );
        // A converter's failure with errors.tolerance=none: the wrapper is the tolerance's.
        let mut h = History::default();
        h.observe_status(
            &parse_status(include_bytes!("fixtures/status-running.json")).expect("real"),
            T - 1_000,
        );
        let converting = parse_status(include_bytes!(
            "fixtures/status-task-failed-converting.json"
        ))
        .expect("the real worker's JSON");
        h.observe_status(&converting, T);
        assert_eq!(
            h.events().next_back().and_then(|e| e.trace.as_deref()),
            Some(
                "org.apache.kafka.connect.errors.ConnectException: Tolerance exceeded in error \
                 handler; caused by org.apache.kafka.connect.errors.DataException: seed \
                 converter cannot read the poison record of try-conv-29511"
            )
        );
        // The innermost cause, a line without one, and one whose cause repeats it.
        let nested = "a.X: outer\n\tat f(F.java:1)\nCaused by: b.Y: middle\n\tat g\nCaused by: c.Z: inner pwd=pw1\n\t... 3 more\n";
        assert_eq!(
            trace_words(nested).as_deref(),
            Some("a.X: outer; caused by c.Z: inner pwd=[redacted]")
        );
        assert_eq!(trace_words("a.X: only\n").as_deref(), Some("a.X: only"));
        assert_eq!(
            trace_words("a.X: same\nCaused by: a.X: same").as_deref(),
            Some("a.X: same")
        );
        assert_eq!(trace_words("\n \n"), None);
    }

    /// The operator's way past a poison record on a real Kafka 4.4 worker (captured by
    /// scripts/connect-seed.sh): task FAILED; `PUT /connectors/{name}/stop` lists the
    /// connector STOPPED with no tasks; `PATCH .../offsets`; `PUT .../resume` lists task 0
    /// RUNNING again. The task's going with the STOPPED connector is no event of its own, and
    /// its coming back is a restart ("RUNNING again"), not a new task ("listed RUNNING"): the
    /// words said "no longer listed", "listed RUNNING" and left the restart uncounted past
    /// the fourth event.
    #[test]
    fn stop_and_resume_on_a_real_worker_is_a_restart() {
        let read = |b: &[u8]| parse_status(b).expect("the real worker's JSON");
        let running = read(include_bytes!("fixtures/status-running.json"));
        let mut h = History::default();
        assert_eq!(h.observe_status(&running, T - 1_000), 0);
        assert_eq!(
            h.observe_status(
                &read(include_bytes!("fixtures/status-task-failed-in-put.json")),
                T
            ),
            1
        );
        let stopped = read(include_bytes!("fixtures/status-stopped.json"));
        assert_eq!(
            h.observe_status(&stopped, T + 2_000),
            1,
            "the connector alone"
        );
        assert!(h.tasks().is_empty());
        assert_eq!(h.observe_status(&running, T + 4_000), 2);
        let last = h.events().next_back().expect("the restart");
        assert_eq!(
            (
                last.task,
                last.from.as_deref(),
                last.to.as_deref(),
                last.returned
            ),
            (Some(0), Some("FAILED"), Some("RUNNING"), true)
        );
        assert_eq!(
            h.explain("try-sink", Some((T - 500, T + 4_000)), false)
                .as_deref(),
            Some(
                "Kafka Connect task 0 of try-sink FAILED at 2026-12-06T02:14:00Z \
                 (org.apache.kafka.connect.errors.ConnectException: Exiting WorkerSinkTask due \
                 to unrecoverable exception.; caused by org.apache.kafka.connect.errors.\
                 ConnectException: seed sink refuses the poison record at try-topic-31343-0 \
                 offset 2), RUNNING again at 2026-12-06T02:14:04Z; Kafka Connect connector \
                 try-sink STOPPED at 2026-12-06T02:14:02Z, RUNNING again at 2026-12-06T02:14:04Z"
            )
        );
        // Stopped and resumed while RUNNING: still a restart; on another worker: said so.
        let mut h = History::default();
        h.observe_status(&running, T);
        h.observe_status(&stopped, T + 1_000);
        h.observe_status(&status("RUNNING", "connect-2:8083", None), T + 2_000);
        let last = h.events().next_back().expect("the restart");
        assert_eq!(
            last.phrase(),
            "RUNNING again at 2026-12-06T02:14:02Z on worker connect-2:8083"
        );
        // Listed back before a worker took it: not "UNASSIGNED again" (it never was).
        let mut h = History::default();
        h.observe_status(&running, T);
        h.observe_status(&stopped, T + 1_000);
        h.observe_status(&status("UNASSIGNED", "connect-1:8083", None), T + 2_000);
        assert_eq!(
            h.events().next_back().map(StateEvent::phrase).as_deref(),
            Some("listed again, UNASSIGNED, at 2026-12-06T02:14:02Z on worker connect-1:8083")
        );
        // A task that goes while the connector runs (tasks.max lowered) is still named.
        let mut h = History::default();
        h.observe_status(&running, T);
        let none = read(br#"{"name":"x","connector":{"state":"RUNNING","worker_id":"127.0.0.1:18083"},"tasks":[]}"#);
        assert_eq!(h.observe_status(&none, T + 1_000), 1);
        assert_eq!(
            h.events().next_back().map(StateEvent::phrase).as_deref(),
            Some("no longer listed at 2026-12-06T02:14:01Z")
        );
    }

    /// The `fail` case of scripts/connect-seed.sh on a real Kafka 4.4 worker, at the times
    /// the auditor's polls saw it (1 s apart): the task FAILED at :31.508, the connector
    /// STOPPED at :34.511 (it was, on the worker, at :33.703), the commit step 2 -> 3 (the
    /// operator's PATCH) seen at :34.622, the resume seen at :35.515 (on the worker :34.954).
    /// The evidence names the failure, the stop, the resume (seen within a poll after the
    /// step) and that the connector was STOPPED between the commits; the window ending at
    /// the step left the resume out, and nothing said who moved the offsets.
    #[test]
    fn offsets_moved_while_stopped_are_named_with_the_late_resume() {
        const S: i64 = 1_796_592_360_000; // 2026-12-06T21:26:00Z
        let read = |b: &[u8]| parse_status(b).expect("the real worker's JSON");
        let running = read(include_bytes!("fixtures/status-running.json"));
        let mut h = History::default();
        h.observe_status(&running, S + 25_511);
        h.observe_status(
            &read(include_bytes!("fixtures/status-task-failed-in-put.json")),
            S + 31_508,
        );
        h.observe_status(
            &read(include_bytes!("fixtures/status-stopped.json")),
            S + 34_511,
        );
        h.observe_status(&running, S + 35_515);
        let words = h
            .explain_step("try-sink", Some(S + 28_000), S + 34_622, 1_000, false)
            .expect("named");
        assert!(
            words.starts_with("Kafka Connect task 0 of try-sink FAILED at 2026-12-06T21:26:31Z ("),
            "{words}"
        );
        assert!(
            words.ends_with(
                "), RUNNING again at 2026-12-06T21:26:35Z; Kafka Connect connector try-sink \
                 STOPPED at 2026-12-06T21:26:34Z, RUNNING again at 2026-12-06T21:26:35Z; the \
                 connector was STOPPED between the commits: its offsets then move only through Connect's offsets API, a consumer group reset or its tasks' last commit as they stopped"
            ),
            "{words}"
        );
        // Another run: the step seen 0.1 s after the resume (the PATCH landed between the
        // stop at :50.5 and the resume at :51.96 on the worker; the auditor saw the stop at
        // :51.230, the resume at :52.233 and commit 3 at :52.336). STOPPED is in the window.
        assert_eq!(
            h.explain_step("try-sink", Some(S + 28_000), S + 35_600, 1_000, false),
            h.explain_step("try-sink", Some(S + 28_000), S + 34_622, 1_000, false)
        );
        assert!(h.stopped_in((S + 34_510, S + 34_511)), "the stop");
        assert!(
            h.stopped_in((S + 34_600, S + 35_000)),
            "stopped at the start"
        );
        // The stop was seen at :34.511 after a read at :31.508: it may have come any time
        // after that read, not before it.
        assert!(!h.stopped_in((S + 30_000, S + 31_508)), "before the stop");
        assert!(h.stopped_in((S + 30_000, S + 31_509)), "may be the stop");
        assert!(!h.stopped_in((S + 35_515, S + 40_000)), "running again");
        // A step while it runs: no such clause. Alone: with its subject.
        let running_step = h.explain_step("try-sink", Some(S + 37_000), S + 40_000, 1_000, false);
        assert_eq!(running_step, None);
        let mut stopped = History::default();
        stopped.observe_status(&read(include_bytes!("fixtures/status-stopped.json")), S);
        assert_eq!(
            stopped
                .explain_step("try-sink", Some(S + 5_000), S + 9_000, 1_000, false)
                .as_deref(),
            Some(
                "Kafka Connect connector try-sink was STOPPED between the commits: its offsets then move only through Connect's offsets API, a consumer group reset or its tasks' last commit as they stopped"
            )
        );
    }

    /// Review 27c, F-3: a trace line that quotes a credential keeps the exception, not the
    /// credential.
    #[test]
    fn credentials_in_a_trace_line_are_redacted() {
        let line = "org.apache.kafka.connect.errors.ConnectException: java.sql.SQLException: No suitable driver found for jdbc:mysql://u:pw@db:3306/x?user=u&password=pw2;trustStorePassword=pw3 (http://elastic:changeme@es:9200/_bulk, api_key=K1)";
        let r = crate::logging::redact(line);
        for secret in ["pw@", "pw2", "pw3", "changeme", "K1"] {
            assert!(!r.contains(secret), "{secret}: {r}");
        }
        assert!(r.contains("SQLException") && r.contains("user=u"), "{r}");
        assert!(r.contains("es:9200/_bulk"), "{r}");
        assert_eq!(
            crate::logging::redact("plain words = fine"),
            "plain words = fine"
        );
        // Outside text: no panic on any character before an `=`.
        assert_eq!(
            crate::logging::redact("é=1 ü€password=x"),
            "é=1 ü€password=[redacted]"
        );
        // Review 28, R28-10: a secret after `name: ` or in JSON, and user info with a `/`.
        assert_eq!(
            crate::logging::redact(r#"login failed, password: hunter2 {"api_key":"K2","x":"y"}"#),
            r#"login failed, password: [redacted] {"api_key":"[redacted]","x":"y"}"#
        );
        assert_eq!(
            crate::logging::redact("s3://AKIA:se/cret@bucket/path"),
            "s3://[redacted]@bucket/path"
        );
    }

    /// Review 27c, F-7: a source connector (it feeds the topic) never explains a drop in
    /// flight by its tolerance.
    #[test]
    fn a_source_connectors_tolerance_explains_nothing() {
        let mut h = History::default();
        let source: ConnectorStatus = serde_json::from_str(
            r#"{"name":"es-sink","connector":{"state":"RUNNING","worker_id":"w:8083"},
                "tasks":[{"id":0,"state":"RUNNING","worker_id":"w:8083"}],"type":"source"}"#,
        )
        .expect("documented shape");
        h.observe_status(&source, 1_000);
        h.observe_config(
            super::super::rest::parse_config(br#"{"errors.tolerance":"all"}"#).expect("config"),
            1_000,
        );
        assert_eq!(h.explain("es-sink", None, true), None);
    }

    /// Review 27c, F-1: a worker restarted, its REST API not answering for a while, and
    /// back with the task RUNNING on the same worker: no change is seen, but the window
    /// says Connect was not observed, instead of nothing.
    #[test]
    fn a_time_the_api_did_not_answer_is_named() {
        let mut h = History::default();
        h.observe_status(&status("RUNNING", "connect-1:8083", None), T);
        h.note_not_read(
            T + 5_000,
            "cannot reach Kafka Connect at http://connect:8083/: refused",
        );
        h.note_not_read(T + 10_000, "later reason");
        // Still not answering when the gap is decided.
        let words = h
            .explain("es-sink", Some((T + 1_000, T + 20_000)), false)
            .expect("named");
        assert!(
            words.starts_with("Kafka Connect connector es-sink not observed since 2026-12-06T02:14:05Z (cannot reach"),
            "{words}"
        );
        h.observe_status(&status("RUNNING", "connect-1:8083", None), T + 30_000);
        let words = h
            .explain("es-sink", Some((T + 1_000, T + 20_000)), false)
            .expect("named");
        assert_eq!(
            words,
            "Kafka Connect connector es-sink not observed from 2026-12-06T02:14:05Z to 2026-12-06T02:14:30Z (cannot reach Kafka Connect at http://connect:8083/: refused)"
        );
        // A window before the outage: nothing.
        assert_eq!(
            h.explain("es-sink", Some((T - 10_000, T + 4_000)), false),
            None
        );
    }

    /// Review 27c, F-1: a task already FAILED at the auditor's first read is named.
    #[test]
    fn a_task_failed_at_the_first_read_is_named() {
        let mut h = History::default();
        assert_eq!(
            h.observe_status(&status("FAILED", "connect-1:8083", Some(EXCEPTION)), T),
            1
        );
        let words = h
            .explain("es-sink", Some((T - 1, T)), false)
            .expect("named");
        assert!(
            words.starts_with(
                "Kafka Connect task 0 of es-sink listed FAILED at 2026-12-06T02:14:00Z"
            ),
            "{words}"
        );
        let mut h = History::default();
        assert_eq!(
            h.observe_status(&status("RUNNING", "connect-1:8083", None), T),
            0,
            "a RUNNING baseline is no event"
        );
    }
}
