//! The audit loop: one task per audit ties the flow together.
//!
//! ```text
//! tail thread ──events──▶ ingest into the ledger (per partition)
//! every verify_interval:
//!   poll the pipeline group's commits ─▶ due rule
//!   due records ─▶ verify (sink) ─▶ ledger verdicts ─▶ gaps
//!   store.commit_round(gaps, progress)   ── persisted FIRST
//!   commit settled offsets to our group  ── then Kafka
//!   metrics + status
//! ```
//!
//! Crash safety: gaps and progress are written in one SQLite transaction before the settled
//! watermark is committed to Kafka; on restart the store's progress wins (it is never behind
//! Kafka's commit), so nothing decided is decided twice and nothing unread is skipped.

use crate::audit::held::Held;
use crate::clock::Clock;
use crate::config::{AuditConfig, KafkaConfig, MatchStrategy};
use crate::handover::Handover;
use crate::kafka::dead_letters::DeadLetters;
use crate::kafka::tail::Flow;
use crate::kafka::{
    self, Command, LastStable, Lookup, PipelineReader, TailEvent, TailHandle, Watermarks,
};
use crate::ledger::PartitionLedger;
use crate::metrics::{AuditMetrics, Metrics};
use crate::record::Decoder;
use crate::sink::{AnySink, Verifier};
use crate::status::StatusBoard;
use crate::store::Store;
use crate::types::{Offset, TopicPartition};
use crate::verify::Checker;
use anyhow::Context;
use chrono::{DateTime, TimeZone, Utc};
use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

mod blocking;
mod coverage;
pub(crate) mod divergence;
mod evidence;
mod gap_log;
mod hand_over;
pub mod held;
mod ingest;
mod kafka_view;
mod own_proof;
mod partitions;
mod persist;
mod pipeline;
mod read_to;
mod report;
mod retired_flow;
mod round;
mod schedule;
mod shared_table;
pub(crate) mod sink_model;
mod starts;
pub(crate) mod transaction_hold;

pub use shared_table::foreign_rows;

use evidence::EvidenceSources;
use gap_log::GapLog;
use hand_over::HandoverState;
pub use ingest::{Ledgers, ingest_batch};
use kafka_view::{Cluster, KafkaView};
use persist::Persisting;
use report::Watches;
use shared_table::SharedTableWatch;

/// Most offset_columns records one round verifies on one partition: at most half as many new
/// gaps (every second record lost), so a round's transient memory stays bounded however
/// large the backlog. Rounds follow each other at once while a partition has more due.
const OFFSET_ROUND_RECORDS: u64 = 50_000;

/// A round that wrote at least this many gaps returns its transient memory to the system
/// afterwards ([`crate::memory::release_free`]).
const TRIM_AFTER_GAPS: usize = 10_000;

/// How often topic retention settings are read again.
const RETENTION_REFRESH: Duration = Duration::from_secs(600);

/// Everything one audit needs.
pub struct AuditDeps {
    /// The audit's configuration.
    pub config: AuditConfig,
    /// Kafka connection settings.
    pub kafka: KafkaConfig,
    /// The auditor's own consumer group for this audit.
    pub group: String,
    /// The sink to verify against.
    pub sink: AnySink,
    /// The gap store.
    pub store: Arc<Store>,
    /// Metric families.
    pub metrics: Arc<Metrics>,
    /// Live status board.
    pub status: StatusBoard,
    /// `state.handover_topic`: where partition state is handed to the next owner.
    pub handover_topic: Option<String>,
    /// `server.advertised_url`: published with each partition's handover state, so that
    /// other instances forward acks of this instance's gaps here.
    pub advertised_url: Option<String>,
}

/// One assigned partition's state.
struct Part {
    ledger: PartitionLedger,
    log: Option<(Offset, Offset)>,
    /// What of the partition's stored state could not be read at assignment (status).
    state_problem: Option<String>,
    /// The pipeline group has stopped committing while the log grows (reported once).
    stalled: bool,
    /// Records waiting for their schema, and every later one behind them.
    held: Held,
    /// The consumer's position last reported, not yet applied while records are held
    /// (see `read_to.rs`).
    read_to: Option<Offset>,
    /// The number of the last [`Command::Reposition`] naming this partition, until the
    /// tailing thread says it served it ([`TailEvent::Repositioned`]): positions are dropped
    /// meanwhile (see `read_to.rs`).
    repositioning: Option<u64>,
    /// The topic's id (which incarnation of its name) the ledger's offsets belong to,
    /// stored with the progress; `None`: unknown (see `divergence.rs`).
    topic_id: Option<String>,
    /// The last time the log was found to no longer hold the position (`/api/status`).
    divergence: Option<divergence::DivergenceNote>,
    /// Whether an open transaction holds the last stable offset where reading stops.
    transaction: transaction_hold::TransactionHold,
}

struct Audit {
    cfg: AuditConfig,
    /// What the audit talks to: Kafka, the sink, the store, the clock.
    io: Io,
    /// The audit's series, one method per event.
    metrics: AuditMetrics,
    /// The tailing thread's side: commands to it, what it learnt, its flow control.
    tail: TailLink,
    parts: BTreeMap<TopicPartition, Part>,
    /// The one verification dispatch, with the audit-wide key multiset (key_columns).
    checker: Checker,
    /// What was decided and is not yet in the store, or in Kafka, and the operator's
    /// acknowledgements (persist.rs).
    persisting: Persisting,
    /// Retention, health, the pipeline group and the topics' partitions (report.rs).
    watch: Watches,
    /// offset_columns without a topic column: whether the sink table holds another
    /// topic's rows (shared_table.rs).
    shared: SharedTableWatch,
    /// Partition state handed to the next owner (several instances in one group;
    /// hand_over.rs, retired_flow.rs).
    handover: HandoverState,
    /// The pipeline's own account of gap causes (evidence.rs).
    evidence: EvidenceSources,
    /// The last round left due records for the next (its per-partition limit was hit).
    backlog: bool,
}

/// What an audit talks to, and the clock it measures ages on.
struct Io {
    kafka: KafkaConfig,
    group: String,
    sink: AnySink,
    store: Arc<Store>,
    status: StatusBoard,
    /// Kafka lookups (the auditor group, watermarks, the pipeline group's commits).
    kafka_view: Arc<dyn KafkaView>,
    /// Shutdown: a round in flight stops asking the sink (its open questions stay unknown,
    /// nothing is decided on them), so SIGTERM never waits for a long backlog round.
    cancel: CancellationToken,
    /// Ages (grace, give-up) are measured on a clock that never steps ([`crate::clock`]);
    /// unit tests move theirs by hand.
    clock: Clock,
    /// The audit's decoder (the tail has a copy): held records are decoded again with it.
    decoder: Decoder,
    /// `[audits.pipeline] dead_letter_topic`: its reader's coordinates and catch-up time
    /// (dead_letters.rs).
    dead_letters: Option<Arc<DeadLetters>>,
}

/// The audit task's end of the tailing thread.
struct TailLink {
    commands: std::sync::mpsc::Sender<Command>,
    /// (log start, log end) per partition, learnt while fetching.
    watermarks: Watermarks,
    /// Last stable offsets per partition, learnt while fetching.
    last_stable: LastStable,
    flow: Arc<Flow>,
    /// How many [`Command::Reposition`]s were sent (see [`Part::repositioning`]).
    repositions: u64,
}

/// The Kafka side of an audit and its decoder: rdkafka clients and the tail's channels in
/// [`run`], fakes in the unit tests.
struct Wiring {
    kafka_view: Arc<dyn KafkaView>,
    commands: std::sync::mpsc::Sender<Command>,
    watermarks: Watermarks,
    last_stable: LastStable,
    flow: Arc<Flow>,
    admin: Option<AdminClient<DefaultClientContext>>,
    handover: Option<Arc<Handover>>,
    decoder: Decoder,
    cancel: CancellationToken,
    clock: Clock,
    dead_letters: Option<Arc<DeadLetters>>,
}

impl Audit {
    /// An audit owning no partition yet (`deps.handover_topic` is already in `w.handover`).
    fn new(deps: AuditDeps, w: Wiring) -> Self {
        let config = deps.config;
        let key_capacity = config.max_pending.min(1_000_000);
        let metrics = AuditMetrics::new(deps.metrics, &config.name);
        Audit {
            checker: Checker::new(config.matching.strategy, config.batch_size, key_capacity),
            io: Io {
                kafka: deps.kafka,
                group: deps.group,
                sink: deps.sink,
                store: deps.store,
                status: deps.status,
                kafka_view: w.kafka_view,
                cancel: w.cancel,
                clock: w.clock,
                decoder: w.decoder,
                dead_letters: w.dead_letters,
            },
            tail: TailLink {
                commands: w.commands,
                watermarks: w.watermarks,
                last_stable: w.last_stable,
                flow: w.flow,
                repositions: 0,
            },
            parts: BTreeMap::new(),
            persisting: Persisting::default(),
            watch: Watches::new(w.admin),
            shared: SharedTableWatch::for_audit(&config),
            handover: HandoverState::new(w.handover),
            evidence: EvidenceSources::default(),
            backlog: false,
            cfg: config,
            metrics,
        }
    }
}

/// Runs one audit until `cancel` fires, then drains: persists, commits the settled
/// watermark (through the revocation that closing the consumer triggers) and returns.
pub async fn run(deps: AuditDeps, cancel: CancellationToken) -> anyhow::Result<()> {
    let (config, kafka, group) = (&deps.config, &deps.kafka, &deps.group);
    let decoder = crate::record::decoder_for(config)
        .with_context(|| format!("audit {}: record decoding", config.name))?;
    // Before the tail gets its copy of the decoder: keys are written in the sink columns'
    // types from the first record on (see `sink_model`).
    let decoder =
        decoder.with_key_domain(sink_model::learn_key_domain(&deps.sink, config, &cancel).await);
    // Whether one row confirms every record of its key: refused here, before anything is
    // read, when the config and the table disagree.
    let semantics = match sink_model::learn_key_semantics(&deps.sink, config, &cancel).await {
        Ok(Some(s)) => s,
        Ok(None) => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    if cancel.is_cancelled() {
        return Ok(());
    }
    let time_column = sink_model::time_column(&deps.sink, config).await;
    // The only task that waits for the schema registry: the tail asks, this fetches.
    let mut arrivals = match decoder.registry() {
        Some(r) => {
            tokio::spawn(r.clone().run_fetcher(cancel.child_token()));
            Some(r.arrivals())
        }
        None => None,
    };
    let lookup = Arc::new(Lookup::new(kafka, group).context("creating the Kafka lookup client")?);
    let pipeline = match &config.pipeline_group {
        Some(g) => {
            Some(PipelineReader::new(kafka, g).context("creating the pipeline group reader")?)
        }
        None => None,
    };
    // `kind = "doris_routine_load"`: the job's progress is the position (validated: url
    // and job are set).
    let job = match (
        &config.pipeline.kind,
        &config.pipeline.url,
        &config.pipeline.job,
    ) {
        (crate::config::PipelineKind::DorisRoutineLoad, Some(url), Some(job)) => Some(
            crate::routine_load::JobReader::new(url, job, config.sink.query_timeout)
                .context("audits.pipeline.url")?,
        ),
        _ => None,
    };
    // Before the consumer joins the group: the first assignment already reads it.
    let handover = match &deps.handover_topic {
        Some(t) => {
            let h = Handover::new(kafka, t)
                .context("state.handover_topic")?
                .with_advertised_url(deps.advertised_url.clone());
            // An owner that survives a restart: taking its own partitions back, it neither
            // imports their given-up gaps again nor is kept from sweeping them.
            let h = match deps.store.instance_id() {
                Ok(id) => h.with_owner(crate::handover::owner_of(&id)),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the store's instance id: the handover owner is host:pid (after a restart this instance imports its own partitions' given-up gaps again)");
                    h
                }
            };
            if let Err(e) = h.ensure_topic().await {
                tracing::warn!(error = %e, "cannot create the handover topic; it must exist already");
            }
            h.check_policy().await;
            // Review item 6: a side topic that deletes by retention loses given-up gaps.
            h.check_side_policy()
                .await
                .context("state.handover_topic's side topic")?;
            Some(Arc::new(h))
        }
        None => None,
    };
    let mut tail: TailHandle = kafka::tail::start(
        kafka,
        group,
        &config.topics,
        decoder.clone(),
        config.max_pending as u64,
    )
    .context("starting the Kafka consumer")?;
    let dead_letters = match &config.pipeline.dead_letter_topic {
        Some(t) => Some(
            kafka::dead_letters::start(
                kafka,
                group,
                &config.name,
                kafka::dead_letters::Source {
                    topic: t,
                    audited: &config.topics,
                    connector: config.pipeline.connect_connector.as_deref(),
                },
                deps.metrics.clone(),
                cancel.child_token(),
            )
            .context("starting the dead-letter topic reader")?,
        ),
        None => None,
    };
    let admin = match kafka::client::base(kafka).create::<AdminClient<DefaultClientContext>>() {
        Ok(a) => Some(a),
        Err(e) => {
            tracing::warn!(error = %e, "no admin client: retention deadlines unknown");
            None
        }
    };
    let wiring = Wiring {
        kafka_view: Arc::new(Cluster {
            lookup: lookup.clone(),
            pipeline,
        }),
        commands: tail.commands.clone(),
        watermarks: tail.watermarks.clone(),
        last_stable: tail.last_stable.clone(),
        flow: tail.flow.clone(),
        admin,
        handover,
        decoder,
        cancel: cancel.clone(),
        clock: Clock::system(),
        dead_letters,
    };
    let mut a = Audit::new(deps, wiring);
    a.watch.pipeline.job = job.map(pipeline::JobWatch::new);
    a.evidence.flink = evidence::flink::FlinkWatch::start(&a.cfg, &a.io.clock, &cancel);
    a.evidence.connect = evidence::connect::ConnectWatch::start(&a.cfg, &a.io.clock, &cancel);
    a.evidence.stream_load =
        evidence::stream_load::StreamLoadWatch::start(&a.cfg, &a.io.clock, &cancel);
    if let Some(book) = a.checker.book_mut() {
        book.set_semantics(semantics);
        book.set_time_column(time_column, crate::time_scan::TIME_BUCKETS);
    }
    a.load_key_book().await;
    // The coverage guard's startup check: what do the newest records decode to?
    tokio::spawn(crate::audit::coverage::startup_check(
        a.cfg.name.clone(),
        a.io.kafka.clone(),
        lookup,
        a.cfg.topics.clone(),
        a.io.decoder.clone(),
    ));
    tracing::info!(audit = %a.cfg.name, group = %a.io.group, topics = ?a.cfg.topics, sink = a.io.sink.kind(), "audit started");
    a.publish();
    let mut tick = tokio::time::interval(a.cfg.verify_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut timer = schedule::RoundTimer::default();
    loop {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            ev = tail.events.recv() => match ev {
                Some(ev) => {
                    let assigned = matches!(ev, TailEvent::Assigned { .. });
                    a.on_event(ev).await;
                    // New partitions: poll the pipeline's commits now, so that `grace`
                    // starts counting at the assignment, not up to a round later.
                    if assigned {
                        timer.on_assigned(&mut tick);
                    }
                }
                None => anyhow::bail!("audit {}: the Kafka consumer thread stopped", a.cfg.name),
            },
            // A schema arrived: the records waiting for it are decoded and go on.
            Ok(()) = async {
                match arrivals.as_mut() {
                    Some(rx) => rx.changed().await,
                    None => std::future::pending().await,
                }
            } => a.release_held(),
            _ = async {
                match timer.waiting() {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {
                timer.on_wait_over(&mut tick);
                a.run_round(&mut tick).await;
            }
            _ = tick.tick(), if timer.waiting().is_none() => {
                if timer.on_tick(tokio::time::Instant::now(), a.due_soon()) {
                    a.run_round(&mut tick).await;
                }
            }
        }
        if a.shared.start_refused.is_some() {
            break;
        }
    }
    // Drain: persist what is decided, then let the consumer close; its revocation asks for
    // the settled offsets to commit.
    tracing::info!(audit = %a.cfg.name, "shutting down: persisting and committing the settled watermark");
    a.persist().await;
    tail.stop();
    while let Some(ev) = tail.events.recv().await {
        a.on_event(ev).await;
    }
    tokio::task::spawn_blocking(move || tail.join()).await.ok();
    a.io.status.remove(&a.cfg.name);
    if let Some(reason) = a.shared.start_refused.take() {
        anyhow::bail!("audit {}: refusing to start: {reason}", a.cfg.name);
    }
    Ok(())
}

fn ms_to_time(ms: i64) -> Option<DateTime<Utc>> {
    Utc.timestamp_millis_opt(ms).single()
}

/// The longest a round waits, after its tick, for records about to fall due: a tenth of
/// `verify_interval`, at most this.
const DUE_WAIT_MAX: Duration = Duration::from_millis(250);

impl Audit {
    /// One round, then the next at once while a backlog remains.
    async fn run_round(&mut self, tick: &mut tokio::time::Interval) {
        self.release_held();
        self.round().await;
        // A backlog is worked off round after round (events are still drained in
        // between: they come first), not one bounded round per verify_interval.
        if self.backlog {
            tick.reset_immediately();
        }
    }

    /// How long a round due now should wait for records that fall due just after it.
    ///
    /// A commit seen at one round makes its records due `grace` later, measured from when
    /// that poll answered; with `grace` a multiple of `verify_interval` (the defaults) that
    /// instant lands a few milliseconds after a later tick, and the records would wait a
    /// whole round more, by the luck of those milliseconds. When nothing is due yet but
    /// something falls due within a tenth of `verify_interval` (at most
    /// [`DUE_WAIT_MAX`]), the round waits for it: one round, shifted, never an extra one.
    /// `grace` itself is never shortened.
    fn due_soon(&self) -> Option<Duration> {
        let now = self.io.clock.now_ms();
        let grace = self.cfg.grace.as_millis() as i64;
        let window = (self.cfg.verify_interval / 10).min(DUE_WAIT_MAX);
        let next = self
            .parts
            .values()
            .filter_map(|p| p.ledger.next_due_ms(grace))
            .min()?;
        if next <= now {
            return None;
        }
        // One millisecond more: the due rule compares whole milliseconds.
        let wait = Duration::from_millis((next - now) as u64 + 1);
        (wait <= window).then_some(wait)
    }

    /// Whether the ledger keeps one key per pending record: the match key (`key_columns`) or
    /// the document id (`doc_id`).
    fn keyed(&self) -> bool {
        matches!(
            self.cfg.matching.strategy,
            MatchStrategy::KeyColumns | MatchStrategy::DocId
        )
    }

    async fn on_event(&mut self, ev: TailEvent) {
        match ev {
            TailEvent::Records(batch) => {
                let n = batch.len() as u64;
                self.ingest(batch);
                self.tail.flow.ingested(n);
                self.update_flow();
            }
            TailEvent::Assigned { partitions, reply } => {
                let starts = self.assign(partitions).await;
                let _ = reply.send(starts);
            }
            TailEvent::Revoked {
                partitions,
                lost,
                reply,
            } => {
                let offsets = self.revoke_as(&partitions, lost).await;
                let _ = reply.send(offsets);
            }
            TailEvent::ReadTo(positions) => read_to::apply(&mut self.parts, positions),
            TailEvent::OffsetOutOfRange => self.out_of_range().await,
            TailEvent::Repositioned(served) => read_to::repositioned(&mut self.parts, served),
            TailEvent::Error(e) => {
                tracing::warn!(audit = %self.cfg.name, error = %e, "kafka consumer error");
            }
        }
    }

    /// Tells the tailing thread how many records are undecided per partition (it pauses the
    /// partitions holding the backlog, see [`crate::kafka::tail::Flow`]).
    fn update_flow(&self) {
        self.tail.flow.set_pending(self.parts.iter().map(|(tp, p)| {
            (
                tp,
                p.ledger.pending() + p.held.flow_load(self.cfg.max_pending as u64),
            )
        }));
    }

    fn watermarks(&self) -> HashMap<TopicPartition, (Offset, Offset)> {
        // The tail thread owns the map; a copy keeps the lock short.
        self.tail
            .watermarks
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }

    fn last_stable(&self) -> HashMap<TopicPartition, Offset> {
        self.tail
            .last_stable
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
