//! Behaviour that needs a broker with exact watermarks and retention, without an external
//! service: librdkafka's mock cluster (`rdkafka::mocking`), which deletes a partition's
//! oldest records once it holds more than ~5 MiB, and exact control of backpressure. (It
//! was chosen when the test broker was tansu, whose memory storage never deleted anything;
//! retention and DeleteRecords on the real broker, Apache Kafka 4.4, are covered end to end
//! in tests/it/real_broker.rs.)

#[path = "it/support.rs"]
mod support;

use gap_auditor::app::AnySink;
use gap_auditor::gap::GapState;
use gap_auditor::sink::memory::MemorySink;
use gap_auditor::store::{PartitionProgress, Store};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{Auditor, ConfigToml, MockKafka};

/// The auditor stopped at offset 0 long ago; meanwhile Kafka retention deleted the start of
/// the partition. On restart it must report the deleted range as a gap of unknown size
/// (state `unverifiable`, counted in `records_unverifiable_total`), never skip it silently —
/// and never count it as lost: nobody checked those offsets (SPEC guarantee 8).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn resume_below_log_start_is_an_unknown_size_gap() {
    let kafka = MockKafka::new();
    kafka.produce(8_000, &"x".repeat(1024));
    let (low, high) = kafka.watermarks();
    assert!(
        low > 0,
        "the mock cluster must have deleted old records (low={low}, high={high})"
    );

    let state = tempfile::tempdir().expect("tempdir");
    Store::open(state.path())
        .expect("store")
        .commit_round(
            "a",
            &[],
            &[PartitionProgress {
                topic: "t".into(),
                partition: 0,
                settled: 0,
                ledger: serde_json::json!({}),
                updated_at: chrono::Utc::now(),
                items: None,
            }],
        )
        .expect("seed progress");
    let config = kafka.config(
        state.path(),
        "",
        "grace = \"1s\"\nverify_interval = \"500ms\"",
    );
    let auditor = Auditor::start_with(config, AnySink::Memory(Arc::new(MemorySink::new()))).await;
    auditor
        .wait_for(30, "a gap for the deleted range", |a| {
            !a.stored_gaps().is_empty()
        })
        .await;
    let gaps = auditor.stored_gaps();
    let lost = auditor.lost("t", 0);
    auditor
        .wait_for(10, "the unverifiable range counted", |a| {
            a.counter(&a.metrics.records_unverifiable, "t", 0) == low as u64
        })
        .await;
    auditor.stop().await;
    assert_eq!(gaps.len(), 1);
    let g = &gaps[0];
    assert_eq!((g.first_offset, g.last_offset), (0, low - 1));
    assert!(!g.size_known);
    assert_eq!(g.state, GapState::Unverifiable);
    assert_eq!(lost, 0, "unchecked offsets are not a verdict");
}

fn paused(a: &Auditor) -> bool {
    a.status
        .snapshot()
        .first()
        .is_some_and(|s| s.partitions.iter().any(|p| p.paused))
}

/// Retention racing a lagging auditor. The auditor is paused by backpressure
/// (`max_pending`) while Kafka deletes records it has not read. When it resumes, its fetch
/// position is below the log start: the deleted range must become ONE gap of unknown size,
/// never offset holes, and reading must continue at the log start. With offset_columns the
/// sink settles what it holds of the range (SPEC guarantee 8): the pipeline wrote all but
/// 150..160 before retention deleted them, so those 10 stay in the gap, `unverifiable` —
/// counted in `records_unverifiable_total`, never in `records_lost_total`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_deleted_while_paused_are_an_unknown_size_gap_not_holes() {
    let kafka = MockKafka::new();
    // Every offset but 150..160 is in the sink.
    let sink = Arc::new(MemorySink::new());
    for o in (0..20_000).filter(|o| !(150..160).contains(o)) {
        sink.insert_offset("t", 0, o);
    }
    let state = tempfile::tempdir().expect("tempdir");
    let config = kafka.config(
        state.path(),
        "start = \"earliest\"",
        "grace = \"4s\"\nverify_interval = \"250ms\"\nbatch_size = 50\nmax_pending = 100",
    );
    let auditor = Auditor::start_with(config, AnySink::Memory(sink)).await;
    kafka.produce(200, "small record");
    // The pause can show before the audit task has ingested the records in flight.
    auditor
        .wait_for(30, "paused with 100 records read", |a| {
            paused(a) && a.consumed("t", 0) == 100
        })
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        auditor.consumed("t", 0),
        100,
        "paused exactly at max_pending"
    );
    // While it is paused (records not due before 4 s), retention deletes past offset 200:
    // 100..200 were produced before the pause but never read; they are part of the loss.
    kafka.produce(8_000, &"x".repeat(1024));
    let (low, _) = kafka.watermarks();
    assert!(
        low > 200,
        "the mock must have deleted unread records (low={low})"
    );
    // Reading continues AT the log start. (Counting 300 confirmed records used to stand for
    // this, but the sink settling the deleted range confirms records too: it could reach 300
    // before a single record past the log start was read.)
    let next_offset = |a: &Auditor| {
        a.status
            .snapshot()
            .first()
            .and_then(|s| s.partitions.first().map(|p| p.consumed))
            .unwrap_or(0)
    };
    auditor
        .wait_for(60, "reading past the log start", |a| next_offset(a) > low)
        .await;
    auditor
        .wait_for(60, "300 confirmed", |a| a.confirmed("t", 0) >= 300)
        .await;
    auditor
        .wait_for(10, "the deleted range settled", |a| {
            a.counter(&a.metrics.records_unverifiable, "t", 0) > 0
        })
        .await;
    let lost = auditor.lost("t", 0);
    let unverifiable = auditor.counter(&auditor.metrics.records_unverifiable, "t", 0);
    let gaps = auditor.stored_gaps();
    auditor.stop().await;
    assert_eq!(gaps.len(), 1, "{gaps:?}");
    let g = &gaps[0];
    assert_eq!((g.first_offset, g.last_offset), (100, low - 1));
    assert!(!g.size_known);
    assert_eq!(g.state, GapState::Unverifiable);
    assert_eq!(g.missing_records, 10, "the sink settled the rest: {g:?}");
    assert_eq!(unverifiable, 10);
    assert_eq!(lost, 0, "unchecked offsets are not a verdict");
}

/// SPEC guarantee 6: pending state is capped by `max_pending`; above it consumption
/// pauses, and nothing is dropped — every record is verified once the backlog drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pending_is_capped_by_max_pending_and_nothing_is_dropped() {
    const N: u64 = 2_000;
    const MAX: u64 = 500;
    let kafka = MockKafka::new();
    kafka.produce(N as usize, "r");
    let sink = Arc::new(MemorySink::new());
    for o in 0..N as i64 {
        sink.insert_offset("t", 0, o);
    }
    let state = tempfile::tempdir().expect("tempdir");
    let config = kafka.config(
        state.path(),
        "start = \"earliest\"",
        &format!(
            "grace = \"3s\"\nverify_interval = \"200ms\"\nbatch_size = 100\nmax_pending = {MAX}"
        ),
    );
    let auditor = Auditor::start_with(config, AnySink::Memory(sink)).await;
    auditor
        .wait_for(30, "assigned", |a| a.consumed("t", 0) > 0)
        .await;
    // Until the first records are due (3 s after they were read) nothing is decided, so
    // everything consumed is pending.
    let mut saw_pause = false;
    let mut peak = 0;
    let until = Instant::now() + Duration::from_millis(2_000);
    while Instant::now() < until {
        assert_eq!(auditor.confirmed("t", 0), 0, "nothing is due yet");
        let consumed = auditor.consumed("t", 0);
        peak = peak.max(consumed);
        assert!(
            consumed <= MAX,
            "pending {consumed} above max_pending {MAX}"
        );
        saw_pause |= paused(&auditor);
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(peak, MAX, "consumption stops exactly at the cap");
    assert!(saw_pause, "status shows the pause");
    auditor
        .wait_for(90, "every record verified", |a| a.confirmed("t", 0) == N)
        .await;
    assert_eq!(auditor.consumed("t", 0), N);
    assert_eq!(auditor.lost("t", 0), 0, "nothing dropped, nothing lost");
    auditor.stop().await;
}

/// Issue 6: an open gap turns `unrecoverable` once Kafka's log start passes it (here the
/// mock deletes old records by size, as `retention.bytes` would), its countdown gauge drops
/// to 0, and `unrecoverable_at` says when.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_open_gap_turns_unrecoverable_when_the_log_start_passes_it() {
    let kafka = MockKafka::new();
    let sink = Arc::new(MemorySink::new());
    for o in (0..20_000).filter(|o| *o != 3) {
        sink.insert_offset("t", 0, o);
    }
    let state = tempfile::tempdir().expect("tempdir");
    let config = kafka.config(
        state.path(),
        "start = \"earliest\"",
        "grace = \"1s\"\nverify_interval = \"250ms\"",
    );
    let auditor = Auditor::start_with(config, AnySink::Memory(sink)).await;
    kafka.produce(10, "r");
    auditor
        .wait_for(30, "the gap at 3 is open", |a| {
            a.stored_gaps()
                .iter()
                .any(|g| g.first_offset == 3 && g.state == GapState::Open)
        })
        .await;
    // Before: no deadline yet (the mock answers no DescribeConfigs) or a positive one.
    assert!(
        countdown(&auditor).is_none_or(|v| v != "0"),
        "{:?}",
        countdown(&auditor)
    );
    kafka.produce(8_000, &"x".repeat(1024));
    let (low, _) = kafka.watermarks();
    assert!(low > 3, "the mock deleted offset 3 (low={low})");
    auditor
        .wait_for(30, "the gap at 3 is unrecoverable", |a| {
            a.stored_gaps()
                .iter()
                .any(|g| g.first_offset == 3 && g.state == GapState::Unrecoverable)
        })
        .await;
    let gaps = auditor.stored_gaps();
    let g = gaps.iter().find(|g| g.first_offset == 3).expect("gap");
    assert!(g.unrecoverable_at.is_some(), "{g:?}");
    assert_eq!(g.missing_records, 1);
    // Read the exposition, not the vector: `with_label_values` would create a 0 series.
    auditor
        .wait_for(10, "the countdown is over", |a| {
            countdown(a).is_some_and(|v| v == "0")
        })
        .await;
    auditor.stop().await;
}

/// The value of `gap_auditor_gap_unrecoverable_seconds` for a/t/0 in /metrics, if exported.
fn countdown(a: &Auditor) -> Option<String> {
    a.metrics
        .render()
        .lines()
        .find(|l| l.starts_with("gap_auditor_gap_unrecoverable_seconds{"))
        .and_then(|l| l.rsplit(' ').next())
        .map(str::to_string)
}

/// Replaying offsets Kafka already deleted: exit 2, a message naming the log start offset,
/// and the gap becomes `unrecoverable`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replay_of_deleted_offsets_is_refused_and_the_gap_is_unrecoverable() {
    let kafka = MockKafka::new();
    kafka.produce(8_000, &"x".repeat(1024));
    let (low, _) = kafka.watermarks();
    assert!(low > 10, "the mock deleted the start (low={low})");
    let state = tempfile::tempdir().expect("tempdir");
    let store = Store::open(state.path()).expect("store");
    let mut gap = support::open_gap("a", "t", 2, 3);
    store.commit_round("a", &[gap.clone()], &[]).expect("gap");
    let config = state.path().join("c.toml");
    let toml = ConfigToml::new(&kafka.brokers)
        .state_path(state.path())
        .audit(support::unreachable_sink_audit());
    // A repair topic the pipeline maps the origin header from: an offset_columns replay
    // into the audited topic itself is refused before Kafka is read.
    let toml = format!(
        "{}[audits.replay]\npipeline_maps_origin = true\n",
        toml.render()
    );
    std::fs::write(&config, toml).expect("config");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gap-auditor"))
        .args(["replay", "-c"])
        .arg(&config)
        .args(["--gap", &gap.id, "--to-topic", "repair"])
        .output()
        .expect("run replay");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("log start offset {low}")), "{err}");
    gap = store.get_gap(&gap.id).expect("get").expect("gap");
    assert_eq!(gap.state, GapState::Unrecoverable);
    assert!(gap.unrecoverable_at.is_some());
}

/// Issue 13 item 12: at the first start (no stored position, no commit) the watermark
/// lookups fail. The old code resolved `start = "latest"` to offset 0 and audited the
/// whole history — 100 records the sink never had (the pipeline's history expired there):
/// 100 false losses. Now the consumer starts at its logical end and the ledger anchors on
/// the first record it reads: the 100 old records are not audited, the 10 new ones are.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failed_watermark_lookups_at_first_start_never_audit_history() {
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    let kafka = MockKafka::new();
    kafka.produce(100, "old");
    // The ListOffsets requests of the auditor's start resolution (3 attempts, low and high
    // watermark each) fail, non-retriably; the consumer's own lookups after them succeed.
    kafka.cluster.request_errors(
        RDKafkaApiKey::ListOffsets,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED; 6],
    );
    let sink = Arc::new(MemorySink::new());
    for o in 100..110 {
        sink.insert_offset("t", 0, o);
    }
    let state = tempfile::tempdir().expect("tempdir");
    let config = kafka.config(
        state.path(),
        "start = \"latest\"",
        "grace = \"1s\"\nverify_interval = \"250ms\"",
    );
    let auditor = Auditor::start_with(config, AnySink::Memory(sink)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while auditor
        .status
        .snapshot()
        .first()
        .is_none_or(|s| s.partitions.is_empty())
    {
        assert!(Instant::now() < deadline, "never assigned");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    kafka.produce(10, "new");
    auditor
        .wait_for(30, "the 10 new records confirmed", |a| {
            a.confirmed("t", 0) == 10
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(auditor.lost("t", 0), 0, "history was audited");
    assert_eq!(auditor.confirmed("t", 0), 10);
    assert!(
        auditor.stored_gaps().is_empty(),
        "{:?}",
        auditor.stored_gaps()
    );
    auditor.stop().await;
}
