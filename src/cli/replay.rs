//! `replay`: re-read exactly the lost offsets from Kafka and write them again.

use anyhow::Context;
use gap_auditor::commands::replay::{self, Destination, ReplayError, Request, Target};
use gap_auditor::config::{Config, Validated};
use gap_auditor::store::Store;
use gap_auditor::types::TopicPartition;

use super::ReplayArgs;
use super::commands::tokio_runtime;
use crate::Outcome;

/// Replays what `args` asks for: exit 0 when every record is written or present, 1 when
/// some failed or the read was partial, 2 on an error.
pub(super) fn replay(valid: &Validated, args: ReplayArgs) -> Outcome {
    let cfg = valid.config();
    let dry_run = args.dry_run;
    let store = match Store::open(&cfg.state.path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Outcome::Error;
        }
    };
    let req = match request(cfg, &store, args) {
        Ok(req) => req,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Outcome::Error;
        }
    };
    let rt = match tokio_runtime() {
        Ok(rt) => rt,
        Err(outcome) => return outcome,
    };
    let sink = match valid
        .config()
        .audit(&req.target.audit)
        .with_context(|| format!("no audit named {:?} in the configuration", req.target.audit))
        .and_then(gap_auditor::app::build_sink)
    {
        Ok(sink) => sink,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Outcome::Error;
        }
    };
    // The gap's mark, the refusals and the store's replay log are the library's
    // (`replay::run`), shared with the demo and the gap page.
    let replayed = match rt.block_on(replay::run(cfg, &store, &req, &sink)) {
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

/// The replay `args` ask for: `--gap ID`'s offsets (read from `store`), or `--audit
/// --partition --offsets` on the audit's one topic unless `--topic` names it; written to
/// `--to-topic T` or `--to-sink`.
fn request(cfg: &Config, store: &Store, args: ReplayArgs) -> anyhow::Result<Request> {
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
    let target = match (gap, audit, partition, offsets) {
        (Some(id), ..) => replay::target_of_gap(store, &id)?,
        (None, Some(audit), Some(partition), Some((first, last))) => {
            let topics = cfg
                .audit(&audit)
                .map(|a| a.topics.clone())
                .unwrap_or_default();
            let Some(topic) = topic.or_else(|| (topics.len() == 1).then(|| topics[0].clone()))
            else {
                anyhow::bail!("--topic: audit {audit:?} reads several topics (or none); name one");
            };
            Target {
                audit,
                tp: TopicPartition::new(topic, partition),
                first,
                last,
                gap_id: None,
            }
        }
        _ => anyhow::bail!("give --gap ID, or --audit NAME --partition P --offsets A-B"),
    };
    let dest = match to_topic {
        Some(t) => Destination::Topic(t),
        None if to_sink => Destination::Sink,
        None => anyhow::bail!("give --to-topic T or --to-sink"),
    };
    Ok(Request {
        target,
        dest,
        dry_run,
        force,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(topics: &str) -> Config {
        Config::from_toml_str(&format!(
            r#"
[kafka]
brokers = "127.0.0.1:9"
[[audits]]
name = "a"
topics = {topics}
[audits.record]
format = "csv"
fields = ["x"]
[audits.match]
strategy = "key_columns"
key = ["x"]
[audits.sink]
kind = "mysql"
url = "mysql://u@h:3306/db"
table = "t1"
"#
        ))
        .expect("config")
    }

    fn args() -> ReplayArgs {
        ReplayArgs {
            gap: None,
            audit: Some("a".into()),
            topic: None,
            partition: Some(0),
            offsets: Some((2, 3)),
            to_topic: None,
            to_sink: true,
            dry_run: false,
            force: false,
        }
    }

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("dir");
        let store = Store::open(dir.path()).expect("store");
        (dir, store)
    }

    #[test]
    fn offsets_on_a_one_topic_audit_name_its_topic() {
        let (_dir, store) = store();
        let req = request(&config(r#"["t"]"#), &store, args()).expect("request");
        assert_eq!(req.target.tp, TopicPartition::new("t", 0));
        assert_eq!((req.target.first, req.target.last), (2, 3));
        assert_eq!(req.target.gap_id, None);
        assert!(matches!(req.dest, Destination::Sink));
    }

    #[test]
    fn offsets_on_a_several_topic_audit_need_the_topic() {
        let (_dir, store) = store();
        let cfg = config(r#"["t", "u"]"#);
        let e = request(&cfg, &store, args()).expect_err("which topic?");
        assert!(e.to_string().contains("--topic"), "{e}");
        let named = ReplayArgs {
            topic: Some("u".into()),
            to_topic: Some("repair".into()),
            ..args()
        };
        let req = request(&cfg, &store, named).expect("request");
        assert_eq!(req.target.tp, TopicPartition::new("u", 0));
        assert!(matches!(&req.dest, Destination::Topic(t) if t == "repair"));
    }

    #[test]
    fn a_request_without_a_target_or_a_destination_is_refused() {
        let (_dir, store) = store();
        let cfg = config(r#"["t"]"#);
        let no_offsets = ReplayArgs {
            offsets: None,
            ..args()
        };
        let e = request(&cfg, &store, no_offsets).expect_err("no target");
        assert!(e.to_string().contains("give --gap ID"), "{e}");
        let nowhere = ReplayArgs {
            to_sink: false,
            ..args()
        };
        let e = request(&cfg, &store, nowhere).expect_err("no destination");
        assert!(e.to_string().contains("--to-topic T or --to-sink"), "{e}");
    }

    #[test]
    fn an_unknown_gap_is_refused_with_where_to_look() {
        let (_dir, store) = store();
        let by_gap = ReplayArgs {
            gap: Some("a:t:0:9".into()),
            ..args()
        };
        let e = request(&config(r#"["t"]"#), &store, by_gap).expect_err("no such gap");
        assert!(e.to_string().contains("gap-auditor gaps"), "{e}");
    }

    /// `gap-auditor replay --gap ID --to-sink` (this module's request, the library's run)
    /// and the demo's repair ([`gap_auditor::commands::demo::replay_gap`]) record one replay the same
    /// way: the same outcomes, the same row in the store's replay log, the same replay mark
    /// on the gap, the same rows written. Kafka is librdkafka's mock cluster; the table is
    /// the in-memory one each side gets a copy of (the sink's own I/O is tested elsewhere).
    #[tokio::test]
    async fn the_cli_and_the_demo_record_a_replay_the_same_way() {
        use gap_auditor::gap::{Gap, GapState};
        use gap_auditor::sink::AnySink;
        use gap_auditor::sink::memory::MemorySink;
        use gap_auditor::types::Key;
        use rdkafka::mocking::MockCluster;
        use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
        use std::sync::Arc;

        let cluster = MockCluster::new(1).expect("mock cluster");
        cluster.create_topic("t", 1, 1).expect("topic");
        let producer: BaseProducer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .create()
            .expect("producer");
        for i in 0..6 {
            let line = format!("x{i}");
            producer
                .send(BaseRecord::<(), str>::to("t").partition(0).payload(&line))
                .expect("send");
        }
        producer
            .flush(std::time::Duration::from_secs(10))
            .expect("flush");
        let mut cfg = config(r#"["t"]"#);
        cfg.kafka.brokers = cluster.bootstrap_servers();

        // Offsets 2-4 never landed: one open gap, in two stores and two tables alike.
        let at = chrono::Utc::now();
        let gap = Gap {
            id: Gap::make_id("a", "t", 0, 2),
            audit: "a".into(),
            topic: "t".into(),
            partition: 0,
            first_offset: 2,
            last_offset: 4,
            missing_records: 3,
            size_known: true,
            first_timestamp: Some(at),
            last_timestamp: Some(at),
            detected_at: at,
            state: GapState::Open,
            unrecoverable_at: None,
            ack_reason: None,
            cause: Default::default(),
            pipeline_commit_from: None,
            pipeline_commit_to: None,
            pipeline_commit_at: None,
            evidence: None,
            shared_key: false,
            replayed_at: None,
        };
        let side = || {
            let (dir, store) = store();
            store
                .commit_round("a", std::slice::from_ref(&gap), &[])
                .expect("gap");
            let table = Arc::new(MemorySink::new());
            for i in [0, 1, 5] {
                table.insert_key(&Key::new([format!("x{i}").as_str()]));
            }
            (dir, store, table)
        };
        let (_demo_dir, demo_store, demo_table) = side();
        let (_cli_dir, cli_store, cli_table) = side();

        let (_, demo) = gap_auditor::commands::demo::replay_gap(
            &cfg,
            &demo_store,
            &gap.id,
            &AnySink::Memory(demo_table.clone()),
        )
        .await
        .expect("the demo's replay");
        let by_gap = ReplayArgs {
            gap: Some(gap.id.clone()),
            audit: None,
            partition: None,
            offsets: None,
            ..args()
        };
        let req = request(&cfg, &cli_store, by_gap).expect("request");
        let cli = replay::run(&cfg, &cli_store, &req, &AnySink::Memory(cli_table.clone()))
            .await
            .expect("the CLI's replay");

        assert_eq!(demo.counts(), (3, 0, 0, 0), "{:?}", demo.outcomes);
        assert_eq!(
            format!("{:?}", demo.outcomes),
            format!("{:?}", cli.outcomes)
        );
        assert_eq!((demo.partial, &demo.notes), (cli.partial, &cli.notes));
        let logged = |store: &Store| {
            let mut rows = store.replays_of_gap(&gap.id).expect("replay log");
            for r in &mut rows {
                r.at = at;
            }
            rows
        };
        assert_eq!(logged(&demo_store).len(), 1);
        assert_eq!(logged(&demo_store), logged(&cli_store));
        let marked = |store: &Store| {
            store
                .get_gap(&gap.id)
                .expect("gap")
                .map(|g| (g.state, g.replayed_at.is_some()))
        };
        assert_eq!(marked(&demo_store), Some((GapState::Open, true)));
        assert_eq!(marked(&demo_store), marked(&cli_store));
        let rows = |table: &MemorySink| {
            (0..6)
                .map(|i| table.rows_of_key(&Key::new([format!("x{i}").as_str()])))
                .collect::<Vec<_>>()
        };
        assert_eq!(rows(&demo_table), vec![1; 6]);
        assert_eq!(rows(&demo_table), rows(&cli_table));
    }
}
