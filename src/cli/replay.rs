//! `replay`: re-read exactly the lost offsets from Kafka and write them again.

use gap_auditor::config::Validated;
use gap_auditor::replay::{self, Destination, ReplayError, Request, Target};
use gap_auditor::store::Store;

use super::ReplayArgs;
use super::commands::tokio_runtime;
use crate::Outcome;

/// Replays the target of `request`: exit 0 when every record is written or present, 1 when
/// some failed or the read was partial, 2 on an error.
pub(super) fn replay(valid: &Validated, args: ReplayArgs) -> Outcome {
    let cfg = valid.config();
    let ReplayArgs {
        gap,
        audit,
        topic,
        partition,
        offsets,
        to_topic,
        to_sink,
        dry_run,
        force,
    } = args;
    let store = match Store::open(&cfg.state.path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Outcome::Error;
        }
    };
    let target = match (gap, audit, partition, offsets) {
        (Some(id), ..) => replay::target_of_gap(&store, &id),
        (None, Some(audit), Some(partition), Some((first, last))) => {
            let topics = cfg
                .audit(&audit)
                .map(|a| a.topics.clone())
                .unwrap_or_default();
            match topic.or_else(|| (topics.len() == 1).then(|| topics[0].clone())) {
                Some(topic) => Ok(Target {
                    audit,
                    tp: gap_auditor::types::TopicPartition::new(topic, partition),
                    first,
                    last,
                    gap_id: None,
                }),
                None => Err(anyhow::anyhow!(
                    "--topic: audit {audit:?} reads several topics (or none); name one"
                )),
            }
        }
        _ => Err(anyhow::anyhow!(
            "give --gap ID, or --audit NAME --partition P --offsets A-B"
        )),
    };
    let target = match target {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Outcome::Error;
        }
    };
    let dest = match to_topic {
        Some(t) => Destination::Topic(t),
        None if to_sink => Destination::Sink,
        None => {
            eprintln!("error: give --to-topic T or --to-sink");
            return Outcome::Error;
        }
    };
    let rt = match tokio_runtime() {
        Ok(rt) => rt,
        Err(outcome) => return outcome,
    };
    let req = Request {
        target,
        dest,
        dry_run,
        force,
    };
    // The gap's mark, the refusals and the store's replay log are the library's
    // (`replay::run`), shared with the demo.
    let replayed = match rt.block_on(replay::run(valid, &store, &req)) {
        Ok(o) => o,
        Err(e @ (ReplayError::Deleted { .. } | ReplayError::Refused(_))) => {
            eprintln!("error: {e}");
            return Outcome::Error;
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            return Outcome::Error;
        }
    };
    // The wording is the library's, shared with the gap page's dry-run.
    for o in &replayed.outcomes {
        println!("{}", o.line(&req.target.tp, dry_run));
    }
    for note in &replayed.notes {
        println!("{note}");
    }
    println!("{}", replayed.summary(dry_run));
    let failed = replayed.counts().3;
    if failed > 0 || replayed.partial {
        Outcome::Loss
    } else {
        Outcome::Success
    }
}
