//! The markup of `GET /ui`, apart from any I/O: a pure function of what the handler read
//! (status board, one page of gaps, the time). Rendered with `maud`, which HTML-escapes
//! every interpolated value: topic names, audit names, ack reasons and sink errors come
//! from outside and must never become markup. No JavaScript; one inline style sheet.

use crate::gap::{Gap, GapCause, GapState};
use crate::ledger::CommitStep;
use crate::status::{AuditStatus, SinkState};
use crate::store::GapFilter;
use chrono::{DateTime, SecondsFormat, Utc};
use maud::{DOCTYPE, Markup, html};

/// What one `/ui` page shows.
pub(super) struct UiPage<'a> {
    /// The audits to show partitions of (already filtered by `audit`).
    pub audits: &'a [AuditStatus],
    /// One page of gaps, in listing order.
    pub gaps: &'a [Gap],
    /// The filter the gaps were listed with.
    pub filter: &'a GapFilter,
    /// The href of the next page, when more gaps match.
    pub next: Option<String>,
    /// The time countdowns are computed against.
    pub now: DateTime<Utc>,
    /// Whether gaps get an ack form and a replay dry-run form (`server.api_token` is
    /// configured: the forms post it).
    pub ack_form: bool,
}

/// The whole HTML document.
pub(super) fn render(page: &UiPage<'_>) -> String {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "gap-auditor" }
                style { (STYLE) }
            }
            body {
                h1 { "gap-auditor" }
                (filter_form(page.filter))
                @if page.audits.is_empty() {
                    p { "No audit has published its status yet (the daemon may be starting)." }
                }
                @for audit in page.audits {
                    (audit_section(audit))
                }
                (gaps_section(page))
                p.note {
                    @if !page.ack_form {
                        "Acknowledging from this page needs server.api_token in the daemon's \
                         configuration; until then use the ack command. "
                    }
                    "CONFIG in the commands stands for this daemon's configuration file. "
                    "Shown at " (ts(page.now)) "."
                }
            }
        }
    };
    markup.into_string()
}

const STYLE: &str = "body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;\
margin-bottom:1em}td,th{border:1px solid #ccc;padding:.2em .5em;text-align:left;\
vertical-align:top}code{white-space:pre-wrap;word-break:break-all}.note{color:#555}\
form.ack,form.replay{margin-top:.4em}ol.commits{margin:.3em 0 0 1.2em;padding:0;\
font-size:.9em}";

fn filter_form(filter: &GapFilter) -> Markup {
    let audit = filter.audit.clone().unwrap_or_default();
    let state = filter.state.as_str();
    html! {
        form method="get" action="/ui" {
            label { "audit " input type="text" name="audit" value=(audit); }
            " "
            label {
                "gaps "
                select name="state" {
                    option value="open" selected[state == "open"] { "open" }
                    option value="all" selected[state == "all"] { "all" }
                }
            }
            " "
            button type="submit" { "show" }
        }
    }
}

fn opt(v: Option<i64>) -> String {
    v.map_or_else(|| "–".to_string(), |v| v.to_string())
}

fn sink_state(s: SinkState) -> &'static str {
    match s {
        SinkState::Up => "up",
        SinkState::Down => "down",
        SinkState::Unknown => "unknown",
    }
}

fn audit_section(a: &AuditStatus) -> Markup {
    html! {
        h2 { "audit " (a.audit) }
        p {
            "sink " (a.sink_kind) ": " (sink_state(a.sink_state))
            @if let Some(e) = &a.sink_error { " (" (e) ")" }
            @if let Some(g) = &a.pipeline_group { "; pipeline group " (g) }
            @if let Some(j) = &a.pipeline_job { "; Routine Load job " (j) }
            @if let Some(s) = &a.pipeline_job_state { " (" (s) ")" }
            @if let Some(h) = &a.pipeline_group_hold { "; verdicts held: " (h) }
        }
        table {
            tr {
                th { "topic" } th { "partition" } th { "consumed" } th { "settled" }
                th { "pipeline committed" } th { "log end" } th { "pending" } th { "missing" }
            }
            @for p in &a.partitions {
                tr {
                    td { (p.topic) } td { (p.partition) } td { (p.consumed) } td { (p.settled) }
                    td { (opt(p.pipeline_committed)) } td { (opt(p.log_end)) }
                    td { (p.pending) } td { (p.missing) }
                }
            }
        }
    }
}

fn gaps_section(page: &UiPage<'_>) -> Markup {
    html! {
        h2 { "gaps (" (page.filter.state.as_str()) ")" }
        @if page.gaps.is_empty() {
            p { "No gap matches." }
        } @else {
            table {
                tr {
                    th { "gap" } th { "offsets" } th { "records" } th { "timestamps" }
                    th { "state" } th { "cause" } th { "retention" } th { "commands" }
                }
                @for g in page.gaps {
                    (gap_row(g, page.now, page.ack_form, commits_of(page.audits, g)))
                }
            }
        }
        @if let Some(next) = &page.next {
            p { a href=(next) rel="next" { "next page" } }
        }
    }
}

/// The pipeline commits the status board holds for `g`'s partition (empty when its audit
/// or partition is not on this instance's board).
fn commits_of<'a>(audits: &'a [AuditStatus], g: &Gap) -> &'a [CommitStep] {
    audits
        .iter()
        .filter(|a| a.audit == g.audit)
        .flat_map(|a| a.partitions.iter())
        .find(|p| p.topic == g.topic && p.partition == g.partition)
        .map_or(&[], |p| p.pipeline_commits.as_slice())
}

/// Commit movements shown before and after the one that passed a gap.
const AROUND: usize = 3;

/// The pipeline's commits around `g`, oldest first, with whether each is the step that
/// passed the gap: the stored step (`pipeline_commit_from/to/at`) and up to [`AROUND`]
/// movements either side of it among `steps` (the partition's recent ones). A step that is
/// no longer among them (an old gap) is shown alone; a gap with no step, none.
pub(super) fn timeline(g: &Gap, steps: &[CommitStep]) -> Vec<(CommitStep, bool)> {
    let (Some(from), Some(to)) = (g.pipeline_commit_from, g.pipeline_commit_to) else {
        return Vec::new();
    };
    let at_ms = g.pipeline_commit_at.map_or(0, |t| t.timestamp_millis());
    let passed = CommitStep {
        from,
        to,
        at_ms,
        altered: g.cause == GapCause::SkippedByAlter,
        since_ms: None,
        from_seen_ms: None,
    };
    match steps.iter().rposition(|s| s.from == from && s.to == to) {
        Some(i) => {
            let lo = i.saturating_sub(AROUND);
            let hi = (i + AROUND + 1).min(steps.len());
            steps[lo..hi]
                .iter()
                .enumerate()
                .map(|(j, s)| (*s, lo + j == i))
                .collect()
        }
        None => vec![(passed, true)],
    }
}

fn timeline_markup(g: &Gap, steps: &[CommitStep]) -> Markup {
    let t = timeline(g, steps);
    html! {
        @if !t.is_empty() {
            ol.commits {
                @for (s, passed) in &t {
                    li {
                        @let when = DateTime::<Utc>::from_timestamp_millis(s.at_ms)
                            .map(|t| t.format("%H:%M:%S").to_string())
                            .unwrap_or_default();
                        @if *passed {
                            strong { (when) " " (s.from) " → " (s.to) " (passed the gap)" }
                        } @else if s.is_rewind() {
                            (when) " " (s.from) " → " (s.to) " (rewind)"
                        } @else {
                            (when) " " (s.from) " → " (s.to)
                        }
                    }
                }
            }
        }
    }
}

fn gap_row(g: &Gap, now: DateTime<Utc>, ack_form: bool, steps: &[CommitStep]) -> Markup {
    let records = if g.size_known {
        g.missing_records.to_string()
    } else {
        format!("up to {} (deleted unread: size unknown)", g.missing_records)
    };
    html! {
        tr {
            td { code { (g.id) } br; (g.audit) " / " (g.topic) " / " (g.partition) }
            td { (g.first_offset) "–" (g.last_offset) }
            td { (records) }
            td { (opt_ts(g.first_timestamp)) br; (opt_ts(g.last_timestamp)) }
            td {
                (g.state.as_str())
                @if let Some(r) = &g.ack_reason { br; "reason: " (r) }
            }
            td { (cause_words(g)) (timeline_markup(g, steps)) }
            td { (time_left(g.unrecoverable_at, now)) }
            td {
                code { (replay_command(&g.id)) } br;
                code { (ack_command(&g.id)) }
                @if ack_form && ackable(g.state) {
                    form.ack method="post" action=(super::ui_ack::ROUTE.path(&g.id)) {
                        input type="text" name="reason" required placeholder="reason" aria-label="reason";
                        " "
                        input type="password" name="token" required autocomplete="current-password"
                            placeholder="server.api_token" aria-label="token";
                        " "
                        button type="submit" { "acknowledge" }
                    }
                }
                @if ack_form && replayable(g.state) {
                    form.replay method="post" action=(super::ui_replay::ROUTE.path(&g.id)) {
                        input type="password" name="token" required autocomplete="current-password"
                            placeholder="server.api_token" aria-label="token";
                        " "
                        input type="text" name="to_topic" placeholder="to topic (empty: the sink)"
                            aria-label="to topic";
                        " "
                        button type="submit" { "replay dry-run" }
                    }
                }
            }
        }
    }
}

/// Gaps the page offers to acknowledge: not those whose records arrived (`late`,
/// `repaired`: the store refuses those, docs/OPERATOR.md), nor those already acknowledged
/// (a new reason goes through the API or the CLI).
fn ackable(state: GapState) -> bool {
    !matches!(
        state,
        GapState::Late | GapState::Repaired | GapState::Acknowledged
    )
}

/// Gaps the page offers a replay dry-run for: not those whose records arrived (`late`,
/// `repaired`: nothing to replay).
fn replayable(state: GapState) -> bool {
    !matches!(state, GapState::Late | GapState::Repaired)
}

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn opt_ts(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(|| "–".to_string(), ts)
}

/// The cause in words (the cause table of docs/SEMANTICS.md), with the pipeline commit
/// step that passed over the gap when it is known.
pub(super) fn cause_words(g: &Gap) -> String {
    let words = match g.cause {
        GapCause::SkippedByRestart => {
            "skipped by restart: the pipeline's committed position was a record it then never \
             wrote, it resumed elsewhere (restart from latest, lost checkpoint)"
        }
        GapCause::DroppedInFlight => {
            "dropped in flight: the pipeline wrote records of the same commit step but not \
             these (loss between source and sink)"
        }
        GapCause::DeletedUnread => {
            "deleted unread: Kafka deleted the records before the auditor read them"
        }
        GapCause::Unknown => {
            "unknown: no pipeline group, or no observed commit movement covers the gap"
        }
        GapCause::Folded => {
            "overflow gap: gaps folded together beyond max_open_gaps (their own causes are not kept)"
        }
        GapCause::DeadLettered => {
            "dead-lettered: the pipeline rejected the records and wrote them to its dead-letter \
             topic (not lost; see the dead-letter topic for the error)"
        }
        GapCause::SkippedByAlter => {
            "skipped by ALTER: the Routine Load job's position moved forward across a pause of \
             the job, from the first record it then never loaded (ALTER ROUTINE LOAD ... \
             kafka_offsets)"
        }
    };
    let words = match (g.pipeline_commit_from, g.pipeline_commit_to) {
        (Some(from), Some(to)) => {
            let at = g
                .pipeline_commit_at
                .map(|t| format!(" at {}", ts(t)))
                .unwrap_or_default();
            format!("{words}; pipeline group moved from {from} to {to}{at}")
        }
        _ => words.to_string(),
    };
    // The pipeline's own account (Flink's restore evidence, Kafka Connect's task changes),
    // when it was read. Connect's words name their subject; Flink's come first when both.
    match g.evidence_phrase() {
        Some(e) => format!("{words}; {e}"),
        None => words,
    }
}

/// Time left until Kafka retention deletes the gap's first record, from `now`.
pub(super) fn time_left(at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    match at {
        None => "unknown".to_string(),
        Some(t) if t <= now => format!("deleted by retention since {} (replay impossible)", ts(t)),
        Some(t) => {
            let secs = (t - now).num_seconds().max(0).unsigned_abs();
            // Whole minutes are enough for a countdown read by a person.
            let rounded = std::time::Duration::from_secs(secs - secs % 60);
            let left = if secs < 60 {
                "under a minute".to_string()
            } else {
                humantime::format_duration(rounded).to_string()
            };
            format!("{left} left (until {})", ts(t))
        }
    }
}

/// `s` as one POSIX shell word: single-quoted, an embedded `'` closed, escaped, reopened.
pub(super) fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The command that shows what a replay of the gap into the sink would write.
pub(super) fn replay_command(id: &str) -> String {
    format!(
        "gap-auditor replay -c CONFIG --gap {} --to-sink --dry-run",
        shell_quote(id)
    )
}

/// The command that acknowledges the gap.
pub(super) fn ack_command(id: &str) -> String {
    format!(
        "gap-auditor ack -c CONFIG --gap {} --reason '…'",
        shell_quote(id)
    )
}

#[cfg(test)]
mod timeline_tests {
    use super::*;

    fn step(from: i64, to: i64, at_ms: i64) -> CommitStep {
        CommitStep {
            from,
            to,
            at_ms,
            altered: false,
            since_ms: None,
            from_seen_ms: None,
        }
    }

    fn gap_passed_by(from: i64, to: i64, at_ms: i64) -> Gap {
        let at = DateTime::<Utc>::from_timestamp_millis(at_ms).expect("ts");
        Gap {
            id: Gap::make_id("a", "t", 0, from),
            audit: "a".into(),
            topic: "t".into(),
            partition: 0,
            first_offset: from,
            last_offset: to - 1,
            missing_records: 2,
            size_known: true,
            first_timestamp: None,
            last_timestamp: None,
            detected_at: at,
            state: GapState::Open,
            unrecoverable_at: None,
            ack_reason: None,
            cause: GapCause::SkippedByRestart,
            pipeline_commit_from: Some(from),
            pipeline_commit_to: Some(to),
            pipeline_commit_at: Some(at),
            evidence: None,
            shared_key: false,
            replayed_at: None,
        }
    }

    /// Issue 38: the page shows the pipeline's commits around each gap, the step that
    /// passed it marked; an old gap whose step left the recent ones shows that step alone.
    #[test]
    fn the_timeline_is_the_passing_step_with_its_neighbours() {
        let steps: Vec<CommitStep> = (0..10).map(|i| step(i * 2, i * 2 + 2, 1_000 * i)).collect();
        let g = gap_passed_by(8, 10, 4_000);
        let t = timeline(&g, &steps);
        let shown: Vec<(i64, bool)> = t.iter().map(|(s, p)| (s.from, *p)).collect();
        assert_eq!(
            shown,
            vec![
                (2, false),
                (4, false),
                (6, false),
                (8, true),
                (10, false),
                (12, false),
                (14, false)
            ]
        );
        // At the start of the kept steps: fewer before.
        let t = timeline(&gap_passed_by(0, 2, 0), &steps);
        assert_eq!(t.first().map(|(s, p)| (s.from, *p)), Some((0, true)));
        assert_eq!(t.len(), 4);
        // An old gap: its stored step alone.
        let old = gap_passed_by(100, 104, 50);
        assert_eq!(timeline(&old, &steps), vec![(step(100, 104, 50), true)]);
        // No step stored (no pipeline group): nothing.
        let mut none = gap_passed_by(8, 10, 4_000);
        none.pipeline_commit_from = None;
        assert!(timeline(&none, &steps).is_empty());
        let html = timeline_markup(&g, &steps).into_string();
        assert!(html.contains("8 → 10 (passed the gap)"), "{html}");
        assert!(html.contains("6 → 8"), "{html}");
    }

    /// The cause cell ends with the pipeline's own account when the gap carries one.
    #[test]
    fn the_cause_words_end_with_the_flink_evidence() {
        let mut g = gap_passed_by(2, 4, 4_000);
        assert!(!cause_words(&g).contains("Flink"));
        g.evidence = Some(
            "restarted at 2026-12-06T02:14:00Z without restoring a checkpoint (latest-offset)"
                .into(),
        );
        assert!(
            cause_words(&g).ends_with(
                "; the Flink job restarted at 2026-12-06T02:14:00Z without restoring a checkpoint (latest-offset)"
            ),
            "{}",
            cause_words(&g)
        );
        // Kafka Connect's words say whose they are.
        g.evidence = Some(
            "Kafka Connect task 0 of es-sink FAILED at 2026-12-06T02:14:00Z (boom), RUNNING \
             again at 2026-12-06T02:14:30Z on worker connect-2:8083"
                .into(),
        );
        let words = cause_words(&g);
        assert!(
            words.ends_with("Z; Kafka Connect task 0 of es-sink FAILED at 2026-12-06T02:14:00Z (boom), RUNNING again at 2026-12-06T02:14:30Z on worker connect-2:8083")
                && !words.contains("Flink"),
            "{words}"
        );
    }
}
