//! `POST /ui/gaps/{id}/replay`: the gap page's replay dry-run (form-encoded `token`, and
//! `to_topic`, empty for the sink). It shows what `gap-auditor replay --gap ID --to-sink
//! --dry-run` (or `--to-topic T --dry-run`) would do, by running exactly that:
//! [`crate::commands::replay::run`] with `dry_run` set (the CLI's own implementation; the lines
//! are [`crate::commands::replay::Outcome::line`], the CLI's wording). No record is written, to a
//! topic or to the sink; like the CLI's dry-run it adds a dry-run row to the store's
//! replay log, and marks the gap unrecoverable when Kafka no longer holds its records (a
//! fact the dry-run found, as the CLI records it).
//!
//! Authenticated like the page's ack (the token typed into the form, constant-time; a
//! browser's own credentials never authorize it): a dry-run reads Kafka and queries the
//! sink, work nobody should be able to trigger from another site. One dry-run at a time
//! (503 while one runs), each at most [`DRY_RUN_TIMEOUT`]. A gap this instance's store
//! does not hold is 404 (its owner's page offers the button).

use super::ack::GapRoute;
use super::ui::html;
use super::ui_ack::{FormWords, posted_form, refused};
use super::ui_page::{replay_command, shell_quote};
use super::{Body, HttpState};
use crate::commands::replay::{Destination, ReplayError, Replayed, Request, Target};
use crate::config::Config;
use crate::store::Store;
use hyper::body::Incoming;
use hyper::{Request as HttpRequest, Response, StatusCode};
use std::sync::Arc;
use std::time::Duration;

/// The page's dry-run form's path, `/ui/gaps/{id}/replay`.
pub(super) const ROUTE: GapRoute = GapRoute::new("/ui/gaps/", "/replay");

/// The longest a dry-run may take: it reads the gap's records from Kafka and asks the sink
/// about them, as the CLI does; a person is waiting.
pub(super) const DRY_RUN_TIMEOUT: Duration = Duration::from_secs(60);

/// The most offsets a dry-run from the page covers: the daemon reads them into its own
/// memory (the CLI does so in a process of its own), and an overflow gap can span millions.
/// A larger gap is refused with the CLI command to run instead.
pub(super) const MAX_DRY_RUN_OFFSETS: i64 = 10_000;

/// What a posted dry-run form holds.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct ReplayForm {
    /// The token typed into the form.
    pub token: String,
    /// `--to-topic`; `None`: `--to-sink`.
    pub to_topic: Option<String>,
}

/// Parses the form (the last value of a repeated field wins; others ignored). `None`
/// without a token.
pub(super) fn parse_form(body: &[u8]) -> Option<ReplayForm> {
    let (mut token, mut to_topic) = (None, None);
    for (k, v) in form_urlencoded::parse(body) {
        match k.as_ref() {
            "token" => token = Some(v.into_owned()),
            "to_topic" => to_topic = Some(v.trim().to_string()),
            _ => {}
        }
    }
    Some(ReplayForm {
        token: token.filter(|t| !t.is_empty())?,
        to_topic: to_topic.filter(|t| !t.is_empty()),
    })
}

/// The command the dry-run stands for, and the one that does it for real.
pub(super) fn commands(id: &str, to_topic: Option<&str>) -> (String, String) {
    let dry = match to_topic {
        None => replay_command(id),
        Some(t) => format!(
            "gap-auditor replay -c CONFIG --gap {} --to-topic {} --dry-run",
            shell_quote(id),
            shell_quote(t)
        ),
    };
    let real = dry.trim_end_matches(" --dry-run").to_string();
    (dry, real)
}

/// Why a dry-run showed no plan.
#[derive(Debug, thiserror::Error)]
enum DryRunError {
    /// This instance's store holds no such gap.
    #[error("no such gap in this store")]
    NotHere,
    /// The replay refused or failed (its message).
    #[error("{0}")]
    Failed(String),
}

/// Runs the dry-run of gap `id` through the library's replay, as `gap-auditor replay
/// --dry-run` does. Blocking (store reads, a runtime handle to drive the replay): call it
/// from `spawn_blocking`.
fn dry_run(
    config: &Config,
    store: &Store,
    id: &str,
    dest: Destination,
    rt: &tokio::runtime::Handle,
) -> Result<(Target, Replayed), DryRunError> {
    let failed = |e: anyhow::Error| DryRunError::Failed(format!("{e:#}"));
    if store.get_gap(id).map_err(|e| failed(e.into()))?.is_none() {
        return Err(DryRunError::NotHere);
    }
    let target = crate::commands::replay::target_of_gap(store, id).map_err(failed)?;
    let audit = config.audit(&target.audit).ok_or_else(|| {
        DryRunError::Failed(format!(
            "no audit named {:?} in the configuration",
            target.audit
        ))
    })?;
    let sink = crate::app::build_sink(audit).map_err(failed)?;
    let req = Request {
        target: target.clone(),
        dest,
        dry_run: true,
        force: false,
    };
    let run = rt.block_on(async {
        tokio::time::timeout(
            DRY_RUN_TIMEOUT,
            crate::commands::replay::run(config, store, &req, &sink),
        )
        .await
    });
    match run {
        Ok(Ok(r)) => Ok((target, r)),
        Ok(Err(e @ (ReplayError::Deleted { .. } | ReplayError::Refused(_)))) => {
            Err(DryRunError::Failed(e.to_string()))
        }
        Ok(Err(e)) => Err(DryRunError::Failed(format!("{e:#}"))),
        Err(_) => Err(DryRunError::Failed(format!(
            "the dry-run took longer than {} s (Kafka or the sink slow to answer); nothing \
             was written",
            DRY_RUN_TIMEOUT.as_secs()
        ))),
    }
}

/// `POST /ui/gaps/{id}/replay`.
pub(super) async fn form_replay(
    state: &HttpState,
    id: String,
    req: HttpRequest<Incoming>,
) -> Response<Body> {
    let Some(expected) = &state.api_token else {
        return refused(
            StatusCode::FORBIDDEN,
            "a replay dry-run from the page needs server.api_token to be configured; without \
             it run the dry-run command shown on the page",
        );
    };
    let words = FormWords {
        encoding: "the dry-run form is sent as application/x-www-form-urlencoded (token, to_topic)",
        undone: "nothing was run",
        logged: "ui replay dry-run refused: wrong token",
    };
    let parse = |body: &[u8]| {
        parse_form(body).ok_or_else(|| {
            "the token (server.api_token) is required for a dry-run from the page".to_string()
        })
    };
    let form = match posted_form(req, &id, expected, &words, parse, |f| &f.token).await {
        Ok(form) => form,
        Err(refusal) => return refusal,
    };
    if let Some(why) = form
        .to_topic
        .as_deref()
        .and_then(crate::config::topic_problem)
    {
        return refused(StatusCode::BAD_REQUEST, &format!("to_topic: {why}"));
    }
    // Before any work: a gap the page would read too much of is the CLI's.
    if let Ok(Some(g)) = state.store.get_gap(&id) {
        let span = g
            .last_offset
            .saturating_sub(g.first_offset)
            .saturating_add(1);
        if span > MAX_DRY_RUN_OFFSETS {
            let (dry, _) = commands(&id, form.to_topic.as_deref());
            return refused(
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!(
                    "the gap spans {span} offsets, more than a dry-run from the page reads \
                     ({MAX_DRY_RUN_OFFSETS}): run it on the daemon's host instead: {dry}"
                ),
            );
        }
    }
    let Some(config) = state.config.clone() else {
        return refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "this server has no audit configuration to replay with",
        );
    };
    let Ok(running) = state.dry_runs.clone().try_acquire_owned() else {
        return refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "another replay dry-run is running on this daemon; try again when it is done",
        );
    };
    let store: Arc<Store> = state.store.clone();
    let dest = match &form.to_topic {
        Some(t) => Destination::Topic(t.clone()),
        None => Destination::Sink,
    };
    let (dry, real) = commands(&id, form.to_topic.as_deref());
    let ran = {
        let id = id.clone();
        let rt = tokio::runtime::Handle::current();
        // The permit goes with the work: a dry-run past its timeout still holds it until
        // its reads end, so clicks cannot stack reads up.
        tokio::task::spawn_blocking(move || {
            let _running = running;
            dry_run(&config, &store, &id, dest, &rt)
        })
        .await
    };
    let result = match ran {
        Ok(Err(DryRunError::NotHere)) => {
            return refused(
                StatusCode::NOT_FOUND,
                &format!(
                    "no gap with id {id:?} in this instance's store: it may belong to another \
                     instance of the auditor group; use the dry-run on that instance's page"
                ),
            );
        }
        Ok(Err(DryRunError::Failed(e))) => Err(e),
        Ok(Ok(r)) => Ok(r),
        Err(e) => {
            tracing::error!(gap = %id, error = %e, "ui replay dry-run: task failed");
            Err("the dry-run task failed".to_string())
        }
    };
    tracing::info!(gap = %id, ok = result.is_ok(), "replay dry-run from the gap page");
    let status = if result.is_ok() {
        StatusCode::OK
    } else {
        StatusCode::UNPROCESSABLE_ENTITY
    };
    html(
        status,
        &plan_page(&id, form.to_topic.as_deref(), &dry, &real, &result),
    )
}

/// The dry-run's answer: where the records would go, what would happen to each, the
/// CLI's summary line, and the command that does it.
fn plan_page(
    id: &str,
    to_topic: Option<&str>,
    dry: &str,
    real: &str,
    result: &Result<(Target, Replayed), String>,
) -> String {
    maud::html! {
        (maud::DOCTYPE)
        html lang="en" {
            head { meta charset="utf-8"; title { "gap-auditor: replay dry-run" } }
            body {
                h1 { "replay dry-run of gap " code { (id) } }
                p {
                    "Destination: "
                    @match to_topic {
                        Some(t) => { "re-produce to topic " code { (t) } }
                        None => { "written into the audit's sink" }
                    }
                    ". No record was written (to a topic or the sink): this is what " code { (dry) } " reports."
                }
                @match result {
                    Ok((target, replayed)) => {
                        ul.plan {
                            @for o in &replayed.outcomes { li { (o.line(&target.tp, true)) } }
                        }
                        @for n in &replayed.notes { p { (n) } }
                        p.summary { strong { (replayed.summary(true)) } }
                        p { "To do it: " code { (real) } }
                    }
                    Err(e) => { p.error { "The dry-run failed: " (e) } }
                }
                p { a href="/ui?state=all" { "back to the gap page" } }
            }
        }
    }
    .into_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_needs_a_token_and_takes_an_optional_topic() {
        assert_eq!(
            parse_form(b"token=t&to_topic="),
            Some(ReplayForm {
                token: "t".into(),
                to_topic: None
            })
        );
        assert_eq!(
            parse_form(b"token=t&to_topic=+repair+"),
            Some(ReplayForm {
                token: "t".into(),
                to_topic: Some("repair".into())
            })
        );
        assert_eq!(parse_form(b"to_topic=x"), None);
        assert_eq!(parse_form(b"token="), None);
    }

    #[test]
    fn the_page_names_the_cli_command_it_stands_for() {
        let (dry, real) = commands("a:t:0:2", None);
        assert_eq!(
            dry,
            "gap-auditor replay -c CONFIG --gap 'a:t:0:2' --to-sink --dry-run"
        );
        assert_eq!(
            real,
            "gap-auditor replay -c CONFIG --gap 'a:t:0:2' --to-sink"
        );
        let (dry, _) = commands("a:t:0:2", Some("it's"));
        assert!(dry.ends_with("--to-topic 'it'\\''s' --dry-run"), "{dry}");
        assert_eq!(ROUTE.path("a:t:0:2"), "/ui/gaps/a%3At%3A0%3A2/replay");
        assert_eq!(
            ROUTE.id_of(&ROUTE.path("a b:t:0:2")).as_deref(),
            Some("a b:t:0:2")
        );
    }

    #[test]
    fn the_plan_is_escaped() {
        let page = plan_page(
            "<x>",
            Some("<t>"),
            "d",
            "r",
            &Err("<script>alert(1)</script>".into()),
        );
        assert!(!page.contains("<script>"), "{page}");
        assert!(page.contains("&lt;x&gt;"), "{page}");
    }
}
