//! Review of issue 35: is librdkafka's position (what `report_positions` trusts) ever ahead
//! of what the thread's batch read handed over? Against the test broker
//! (`GAP_AUDITOR_TEST_KAFKA`; skipped without it).

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::bindings as rdsys;
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset as KOffset, TopicPartitionList};
use std::ffi::CString;
use std::time::{Duration, Instant};

use super::queue::View;
use super::read_to::{ReadTo, offset_of};
use crate::types::TopicPartition;

/// A fetch out of range (the auditor's position beyond a truncated or recreated log, here
/// 10 on a log ending at 3) is handed over by `rd_kafka_consume_batch_queue` as an error
/// message carrying offset 10; librdkafka then answers position 11 though nothing at 10
/// exists or was delivered. `Tail::report_positions` sends that as `ReadTo(11)` unless the
/// audit's Reposition came first (see audit/tests/review_read_to.rs for what the audit
/// does with it).
///
/// librdkafka's position is what it is; what must not pass the error is what the thread
/// reports. The messages go through what the thread does with them, in order
/// (`queue::View::of`, then [`ReadTo::errored`] / [`ReadTo::delivered`]), and librdkafka's
/// position through [`ReadTo::observe`], which must report nothing past the log end (3).
#[tokio::test]
async fn review_an_error_message_moves_the_position_past_an_offset_never_delivered() {
    let Ok(brokers) = std::env::var("GAP_AUDITOR_TEST_KAFKA") else {
        eprintln!("skipped: GAP_AUDITOR_TEST_KAFKA not set");
        return;
    };
    let topic = format!(
        "review-position-{}-{}",
        std::process::id(),
        chrono::Utc::now().timestamp_millis()
    );
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .create()
        .expect("admin");
    for r in admin
        .create_topics(
            &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        )
        .await
        .expect("create")
    {
        r.expect("created");
    }
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .create()
        .expect("producer");
    for i in 0..3 {
        producer
            .send(
                BaseRecord::<(), _>::to(&topic)
                    .payload(&format!("r{i}"))
                    .partition(0),
            )
            .expect("send");
    }
    producer.flush(Duration::from_secs(10)).expect("flush");

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("group.id", format!("{topic}-g"))
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "error")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, KOffset::Offset(10))
        .expect("tpl");
    let ctopic = CString::new(topic.clone()).expect("cstr");
    // SAFETY: live client; handles released below.
    let (q, pq) = unsafe {
        let q = rdsys::rd_kafka_queue_new(consumer.client().native_ptr());
        let pq =
            rdsys::rd_kafka_queue_get_partition(consumer.client().native_ptr(), ctopic.as_ptr(), 0);
        rdsys::rd_kafka_queue_forward(pq, q);
        (q, pq)
    };
    consumer.assign(&tpl).expect("assign");
    let mut error_offset = None;
    let mut delivered = Vec::new();
    let mut read_to = ReadTo::default();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf: Vec<*mut rdsys::rd_kafka_message_t> = vec![std::ptr::null_mut(); 16];
    while error_offset.is_none() && Instant::now() < deadline {
        let _ = consumer.poll(Duration::ZERO);
        // SAFETY: room for 16 pointers.
        let n = unsafe { rdsys::rd_kafka_consume_batch_queue(q, 200, buf.as_mut_ptr(), 16) };
        for &m in buf.iter().take(n.max(0) as usize) {
            // SAFETY: a live message until destroyed.
            unsafe {
                if (*m).err == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
                    delivered.push((*m).offset);
                } else {
                    error_offset = Some(((*m).err, (*m).offset));
                }
                // As the thread's `read_queue` does.
                match View::of(&*m) {
                    Ok(v) => read_to.delivered(v.topic, v.partition),
                    Err(f) => {
                        let (t, p) = f.at.expect("an out-of-range error names its partition");
                        read_to.errored(TopicPartition::new(t, p));
                    }
                }
                rdsys::rd_kafka_message_destroy(m);
            }
        }
    }
    let position = consumer.position().expect("position");
    let pos = position
        .find_partition(&topic, 0)
        .map(|e| e.offset())
        .expect("listed");
    let reported = read_to.observe(
        Instant::now(),
        [(TopicPartition::new(topic.as_str(), 0), offset_of(pos))],
    );
    // SAFETY: our references.
    unsafe {
        rdsys::rd_kafka_queue_destroy(pq);
        rdsys::rd_kafka_queue_destroy(q);
    }
    eprintln!(
        "error {error_offset:?}, delivered {delivered:?}, librdkafka's position {pos:?}, \
         reported {reported:?}"
    );
    assert!(error_offset.is_some(), "expected an out-of-range error");
    assert!(delivered.is_empty());
    assert!(
        reported.iter().all(|(_, o)| *o <= 3),
        "nothing was delivered, yet the thread would report {reported:?} (librdkafka's \
         position {pos:?}): a ReadTo of it makes offsets the consumer never read holes \
         (error {error_offset:?})"
    );
}
