//! Issue 14: assignment work runs outside librdkafka's rebalance callback. The audit task
//! answers a new assignment with each partition's start, which takes a store read, a
//! handover-topic read and watermark/time lookups (tens of seconds on a bad day). The old
//! tailing thread waited for that answer inside the callback, so for as long as it took it
//! read nothing, not even the partitions it already had (cooperative rebalancing keeps
//! them), and served no commits.
//!
//! Driven here: the real tailing thread (`kafka::tail::start`) on the shared broker (Apache
//! Kafka 4.4), two members of one auditor group with `cooperative-sticky` assignment, and a
//! stand-in for the audit task that answers one assignment only after [`SLOW_ANSWER`].
//! Member A owns both partitions; B joins and takes one; B leaves, so A is assigned it
//! again, and that answer is the slow one. Meanwhile records keep arriving on the partition
//! A kept. Asserted: A delivers them during the wait (the old thread delivered none), the
//! partition given back delivers nothing before its answer and then starts exactly at the
//! offset answered, and a commit asked for during the wait is done during the wait.

use crate::support::*;
use gap_auditor::config::KafkaConfig;
use gap_auditor::kafka::tail::{self, Command, TailEvent, TailHandle};
use gap_auditor::record::{DecodeFormat, Decoder, DecoderSpec};
use gap_auditor::types::TopicPartition;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset as KOffset, TopicPartitionList};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How long the stand-in audit task takes to answer the slow assignment.
const SLOW_ANSWER: Duration = Duration::from_secs(8);
/// Where the partition given back to A starts (the answer), below its end.
const RESTART_AT: i64 = 3;

/// A one-field csv decoder without a key (offset_columns): every record is expected.
pub(crate) fn decoder() -> Decoder {
    Decoder::new(DecoderSpec {
        format: DecodeFormat::Csv,
        delimiter: "|".into(),
        quote: false,
        fields: vec!["v".into()],
        field_count: None,
        min_fields: None,
        require: Vec::new(),
        key: None,
        id_template: None,
        ..DecoderSpec::default()
    })
    .expect("decoder")
}

/// The test broker with short group timeouts and cooperative-sticky assignment.
pub(crate) fn kafka_config() -> KafkaConfig {
    let mut k = KafkaConfig {
        brokers: kafka(),
        session_timeout: Some(Duration::from_secs(6)),
        heartbeat_interval: Some(Duration::from_millis(500)),
        ..KafkaConfig::default()
    };
    k.properties.insert(
        "partition.assignment.strategy".into(),
        "cooperative-sticky".into(),
    );
    k
}

/// What one member saw, with when.
#[derive(Default)]
struct Seen {
    records: Vec<(i32, i64, Instant)>,
    assigned: Vec<(Vec<i32>, Instant)>,
    revoked: Vec<(Vec<i32>, Instant)>,
    /// When the slow answer was sent.
    answered: Option<Instant>,
}

/// The stand-in audit task: answers every assignment at offset 0, except the `slow_from`th
/// one (counting from 0) and later, answered after [`SLOW_ANSWER`] at [`RESTART_AT`].
/// `stop` asks the thread to leave the group; the task ends when the thread has.
fn serve(
    mut tail: TailHandle,
    slow_from: usize,
    seen: Arc<Mutex<Seen>>,
    stop: Arc<Notify>,
) -> tokio::task::JoinHandle<TailHandle> {
    tokio::spawn(async move {
        let mut assigns = 0usize;
        loop {
            let ev = tokio::select! {
                ev = tail.events.recv() => ev,
                _ = stop.notified() => {
                    tail.stop();
                    continue;
                }
            };
            let Some(ev) = ev else { break };
            match ev {
                TailEvent::Records(batch) => {
                    let now = Instant::now();
                    let n = batch.len() as u64;
                    let mut s = seen.lock().expect("seen");
                    for t in batch {
                        s.records.push((t.partition, t.offset, now));
                    }
                    drop(s);
                    tail.flow.ingested(n);
                }
                TailEvent::Assigned { partitions, reply } if partitions.is_empty() => {
                    // The first phase of a cooperative rebalance (the old thread sent it).
                    let _ = reply.send(Vec::new());
                }
                TailEvent::Assigned { partitions, reply } => {
                    let ps: Vec<i32> = partitions.iter().map(|tp| tp.partition).collect();
                    seen.lock()
                        .expect("seen")
                        .assigned
                        .push((ps, Instant::now()));
                    if assigns < slow_from {
                        let _ = reply.send(partitions.into_iter().map(|tp| (tp, 0)).collect());
                    } else {
                        // Answered later without holding up the events (as the audit task
                        // runs the slow lookups on blocking threads).
                        let seen = seen.clone();
                        tokio::spawn(async move {
                            tokio::time::sleep(SLOW_ANSWER).await;
                            seen.lock().expect("seen").answered = Some(Instant::now());
                            let _ = reply
                                .send(partitions.into_iter().map(|tp| (tp, RESTART_AT)).collect());
                        });
                    }
                    assigns += 1;
                }
                TailEvent::Revoked {
                    partitions, reply, ..
                } => {
                    let ps: Vec<i32> = partitions.iter().map(|tp| tp.partition).collect();
                    seen.lock()
                        .expect("seen")
                        .revoked
                        .push((ps, Instant::now()));
                    let _ = reply.send(Vec::new());
                }
                // Positions: these tests look at records and rebalances only.
                TailEvent::ReadTo(_) | TailEvent::Repositioned(_) => {}
                TailEvent::Error(e) => eprintln!("tail error: {e}"),
                TailEvent::OffsetOutOfRange => panic!("offset out of range"),
            }
        }
        tail
    })
}

/// Polls `cond` every 50 ms, failing the test after `timeout`.
pub(crate) async fn wait_for(what: &str, timeout: Duration, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn committed(group: &str, topic: &str, partition: i32) -> Option<i64> {
    let c: BaseConsumer = group_client(group).create().expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(topic, partition);
    let got = c.committed_offsets(tpl, Duration::from_secs(5)).ok()?;
    match got.find_partition(topic, partition)?.offset() {
        KOffset::Offset(o) => Some(o),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_start_answer_does_not_stop_the_partitions_already_read() {
    let topic = unique("tail_assign");
    let group = unique("tail_assign_group");
    create_topic(&topic, 2).await;
    let producer = TestProducer::new(&topic);
    for p in 0..2 {
        producer.send_all(p, &dns_lines(0..10)).await;
    }
    let kafka = kafka_config();
    let topics = [topic.clone()];

    // A alone: both partitions, answered at once; it reads all 20 records.
    let seen_a = Arc::new(Mutex::new(Seen::default()));
    let a = tail::start(&kafka, &group, &topics, decoder(), 1_000_000).expect("member A");
    let commands_a = a.commands.clone();
    let stop_a = Arc::new(Notify::new());
    let a_task = serve(a, 1, seen_a.clone(), stop_a.clone());
    wait_for("A to read both partitions", Duration::from_secs(30), || {
        seen_a.lock().expect("seen").records.len() >= 20
    })
    .await;

    // B joins and takes one partition from A.
    let seen_b = Arc::new(Mutex::new(Seen::default()));
    let b = tail::start(&kafka, &group, &topics, decoder(), 1_000_000).expect("member B");
    let stop_b = Arc::new(Notify::new());
    let b_task = serve(b, usize::MAX, seen_b.clone(), stop_b.clone());
    wait_for(
        "A to give a partition to B",
        Duration::from_secs(60),
        || {
            !seen_a.lock().expect("seen").revoked.is_empty()
                && !seen_b.lock().expect("seen").assigned.is_empty()
        },
    )
    .await;
    let moved = seen_a.lock().expect("seen").revoked[0].0.clone();
    assert_eq!(
        moved.len(),
        1,
        "cooperative-sticky moves one partition: {moved:?}"
    );
    let moved = moved[0];
    let kept = 1 - moved;

    // B leaves: A is assigned `moved` again, and answers it only after SLOW_ANSWER.
    stop_b.notify_one();
    let b = b_task.await.expect("B's task");
    b.join();
    wait_for(
        "A to get the partition back",
        Duration::from_secs(60),
        || seen_a.lock().expect("seen").assigned.len() >= 2,
    )
    .await;
    let given_back = seen_a.lock().expect("seen").assigned[1].clone();
    assert_eq!(given_back.0, vec![moved]);

    // During the wait: records on the kept partition, and a commit for the auditor group.
    let commit_asked = Instant::now();
    commands_a
        .send(Command::Commit(vec![(
            TopicPartition::new(&*topic, kept),
            7,
        )]))
        .expect("commit command");
    let mut sent = 0;
    let mut committed_during_wait = None;
    while seen_a.lock().expect("seen").answered.is_none() {
        producer.send(kept, dns_line(100 + sent).as_bytes()).await;
        sent += 1;
        if committed_during_wait.is_none() {
            let (g, t) = (group.clone(), topic.clone());
            let c = tokio::task::spawn_blocking(move || committed(&g, &t, kept))
                .await
                .expect("committed");
            // Only a reading taken before the answer counts.
            if seen_a.lock().expect("seen").answered.is_none() {
                committed_during_wait = c;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_for(
        "A to read the given-back partition",
        Duration::from_secs(30),
        || {
            seen_a
                .lock()
                .expect("seen")
                .records
                .iter()
                .any(|(p, _, at)| *p == moved && *at > given_back.1)
        },
    )
    .await;

    let (answered, records) = {
        let s = seen_a.lock().expect("seen");
        (s.answered.expect("answered"), s.records.clone())
    };
    let during: Vec<i64> = records
        .iter()
        .filter(|(p, _, at)| *p == kept && *at > commit_asked && *at < answered)
        .map(|(_, o, _)| *o)
        .collect();
    eprintln!(
        "tail_assign: {sent} records sent to the kept partition during the {SLOW_ANSWER:?} wait, {} delivered during it; commit seen during the wait: {committed_during_wait:?}",
        during.len()
    );
    assert!(
        during.len() * 2 >= sent,
        "the partition A kept delivered {} of {sent} records while the start of another was being resolved",
        during.len()
    );
    assert_eq!(
        committed_during_wait,
        Some(7),
        "the commit asked for during the wait"
    );
    let back: Vec<(i64, Instant)> = records
        .iter()
        .filter(|(p, _, at)| *p == moved && *at > given_back.1)
        .map(|(_, o, at)| (*o, *at))
        .collect();
    assert!(
        back.iter().all(|(_, at)| *at >= answered),
        "the given-back partition delivered records before its start was answered"
    );
    assert_eq!(
        back[0].0, RESTART_AT,
        "the given-back partition starts at the answer"
    );

    // Leave cleanly.
    stop_a.notify_one();
    a_task.await.expect("A's task").join();
}
