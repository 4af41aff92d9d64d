//! The handover's side topic of retired gaps (record format 3) on the real broker, through
//! the `Handover` API: review items 4 (a chunk that does not decode is skipped, never a
//! stall) and 6 (a side topic that deletes by retention is refused at start).

use crate::support::*;
use chrono::Utc;
use gap_auditor::config::KafkaConfig;
use gap_auditor::gap::Gap;
use gap_auditor::handover::retired::{self, ImportCursor, chunk_key, side_topic};
use gap_auditor::handover::{Handover, HandoverError};
use gap_auditor::types::TopicPartition;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::sync::Arc;
use std::time::Duration;

const AUDIT: &str = "side";

fn client(topic: &str) -> Arc<Handover> {
    let k = KafkaConfig {
        brokers: kafka(),
        ..Default::default()
    };
    Arc::new(Handover::new(&k, topic).expect("handover client"))
}

fn tp() -> TopicPartition {
    TopicPartition::new("logs", 0)
}

fn gap(first: i64) -> Gap {
    Gap {
        audit: AUDIT.into(),
        id: Gap::make_id(AUDIT, "logs", 0, first),
        ..open_gap(AUDIT, "logs", first, first)
    }
}

/// Review item 4: a record under a chunk key of the partition being imported that does not
/// decode used to stop the import there, every round, holding the partition (no publish,
/// no commit) for ever. It is skipped and named; the chunks after it are imported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_chunk_is_skipped_and_the_import_goes_on() {
    let topic = unique("hside");
    let h = client(&topic);
    h.ensure_topic().await.expect("handover topics");
    let c0 = retired::chunks(AUDIT, &tp(), vec![gap(1)], "a", Utc::now());
    h.publish_retired(&c0).await.expect("chunk 0");
    let p: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .create()
        .expect("producer");
    p.send(
        BaseRecord::to(&side_topic(&topic))
            .partition(0)
            .key(&chunk_key(AUDIT, &tp(), 1, 1, h.owner()))
            .payload(b"{not a chunk"),
    )
    .expect("enqueue");
    p.flush(Duration::from_secs(10)).expect("flush");
    let c2 = retired::chunks(AUDIT, &tp(), vec![gap(130)], "a", Utc::now());
    h.publish_retired(&c2).await.expect("chunk 2");

    let mut cursor = ImportCursor::start();
    let (mut chunks, mut skipped) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        let (hh, c) = (h.clone(), cursor);
        let read = tokio::task::spawn_blocking(move || hh.read_retired(AUDIT, &[tp()], c))
            .await
            .expect("read task")
            .expect("an import read goes past a record that does not decode");
        chunks.extend(read.chunks.into_iter().map(|c| c.chunk));
        skipped.extend(read.skipped);
        cursor = read.cursor;
        if cursor.done() {
            break;
        }
    }
    assert!(cursor.done(), "import stalled at {cursor:?}");
    assert_eq!(chunks, [0, 2]);
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    assert_eq!((skipped[0].tp.clone(), skipped[0].chunk), (tp(), 1));
    let said = skipped[0].describe(&side_topic(&topic));
    assert!(
        said.contains("chunk 1") && said.contains("unknown to this owner"),
        "{said}"
    );
}

/// Review item 6: a side topic with `cleanup.policy=delete` (or `compact,delete`) would
/// lose chunks after retention: refused at start, naming the topic; the one the auditor
/// creates is compacted and passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_side_topic_that_deletes_by_retention_is_refused() {
    for policy in ["delete", "compact,delete"] {
        let topic = unique("hside_policy");
        let side = side_topic(&topic);
        create_topic_with(&side, 1, &[("cleanup.policy", policy)]).await;
        let h = client(&topic);
        h.ensure_topic().await.expect("handover topic");
        match h.check_side_policy().await {
            Err(e @ HandoverError::SidePolicy { .. }) => {
                let said = e.to_string();
                assert!(said.contains(&side) && said.contains(policy), "{said}");
            }
            other => panic!("{policy}: {other:?}"),
        }
    }
    let topic = unique("hside_policy");
    let h = client(&topic);
    h.ensure_topic().await.expect("handover topics");
    h.check_side_policy()
        .await
        .expect("the side topic the auditor creates is compacted");
}

/// Review item 8: sparse given-up gaps (one per chunk) were imported 256 chunks a round, so
/// a day of them took days with the partition held. One import read now takes thousands
/// of small chunks (bounded by bytes and count instead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_import_round_takes_thousands_of_sparse_chunks() {
    let topic = unique("hside_sparse");
    let h = client(&topic);
    h.ensure_topic().await.expect("handover topics");
    // 3,000 chunks of one gap each (a gap every 64 offsets).
    let gaps: Vec<Gap> = (0..3000).map(|i| gap(64 * i + 5)).collect();
    let chunks = retired::chunks(AUDIT, &tp(), gaps, "a", Utc::now());
    assert_eq!(chunks.len(), 3000);
    h.publish_retired(&chunks).await.expect("chunks");
    let hh = h.clone();
    let read =
        tokio::task::spawn_blocking(move || hh.read_retired(AUDIT, &[tp()], ImportCursor::start()))
            .await
            .expect("read task")
            .expect("read");
    assert!(
        read.chunks.len() >= 2000,
        "one round imported {} sparse chunks",
        read.chunks.len()
    );
}
