//! A topic's id: which incarnation of a topic name a partition's offsets belong to.
//!
//! Kafka gives every topic a UUID at creation (KIP-516); a topic deleted and created again
//! under the same name gets a new one, and its partitions start again at offset 0. The
//! auditor keeps the id with each partition's progress and compares it at start and when a
//! fetch position leaves the log (`audit::divergence`): offsets of the old incarnation say
//! nothing about the new one.
//!
//! rust-rdkafka 0.39 wraps no call that returns the id; librdkafka (2.12) has
//! `rd_kafka_DescribeTopics` (Metadata v12 with topic ids), used here through the raw
//! bindings, on a client the caller already has (admin requests work on any client type).
//! Brokers before Kafka 2.8 and Kafka-compatible servers that send no ids answer the zero
//! UUID: read as "unknown", never as a change.

use rdkafka::ClientContext;
use rdkafka::bindings as rdsys;
use rdkafka::client::Client;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use std::ffi::{CStr, CString, c_char};
use std::ptr;
use std::time::Duration;

/// The id of `topic` as librdkafka prints it (base64), `None` when the broker gave none
/// (the zero UUID) or the topic does not exist.
pub fn topic_id<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    timeout: Duration,
) -> Result<Option<String>, KafkaError> {
    let client = client.native_ptr();
    let name = CString::new(topic)
        .map_err(|_| KafkaError::MetadataFetch(RDKafkaErrorCode::InvalidTopic))?;
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: every object created here is destroyed here, once, after its last use: the
    // topic collection and the options after the request is enqueued (librdkafka copies
    // them), the result's descriptions (owned by the event) before the event, the event
    // before the queue. `client` is live while the caller's handle is borrowed.
    unsafe {
        let mut names: [*const c_char; 1] = [name.as_ptr()];
        let topics = rdsys::rd_kafka_TopicCollection_of_topic_names(names.as_mut_ptr(), 1);
        let options = rdsys::rd_kafka_AdminOptions_new(
            client,
            rdsys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS,
        );
        if !options.is_null() {
            // An error only means the value was refused; the default (socket.timeout.ms)
            // then applies, and the poll below still waits at most `timeout`.
            let _ =
                rdsys::rd_kafka_AdminOptions_set_request_timeout(options, ms, ptr::null_mut(), 0);
        }
        let queue = rdsys::rd_kafka_queue_new(client);
        rdsys::rd_kafka_DescribeTopics(client, topics, options, queue);
        rdsys::rd_kafka_TopicCollection_destroy(topics);
        if !options.is_null() {
            rdsys::rd_kafka_AdminOptions_destroy(options);
        }
        let event = rdsys::rd_kafka_queue_poll(queue, ms.saturating_add(1000));
        let out = if event.is_null() {
            Err(KafkaError::MetadataFetch(RDKafkaErrorCode::RequestTimedOut))
        } else {
            let r = read_result(event, topic);
            rdsys::rd_kafka_event_destroy(event);
            r
        };
        rdsys::rd_kafka_queue_destroy(queue);
        out
    }
}

/// The id of `topic` in a DescribeTopics result event.
///
/// # Safety
/// `event` is a live event returned by `rd_kafka_queue_poll`.
unsafe fn read_result(
    event: *mut rdsys::rd_kafka_event_t,
    topic: &str,
) -> Result<Option<String>, KafkaError> {
    // SAFETY: `event` is live (caller); the pointers read from it live as long as it does.
    unsafe {
        let err = rdsys::rd_kafka_event_error(event);
        if err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(KafkaError::MetadataFetch(err.into()));
        }
        let result = rdsys::rd_kafka_event_DescribeTopics_result(event);
        if result.is_null() {
            return Err(KafkaError::MetadataFetch(RDKafkaErrorCode::Fail));
        }
        let mut n = 0usize;
        let descs = rdsys::rd_kafka_DescribeTopics_result_topics(result, &mut n);
        for i in 0..n {
            let d = *descs.add(i);
            if d.is_null() {
                continue;
            }
            let name = rdsys::rd_kafka_TopicDescription_name(d);
            if name.is_null() || CStr::from_ptr(name).to_bytes() != topic.as_bytes() {
                continue;
            }
            let e = rdsys::rd_kafka_TopicDescription_error(d);
            if !e.is_null() {
                let code = rdsys::rd_kafka_error_code(e);
                if code == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART {
                    return Ok(None);
                }
                return Err(KafkaError::MetadataFetch(code.into()));
            }
            let id = rdsys::rd_kafka_TopicDescription_topic_id(d);
            if id.is_null() {
                return Ok(None);
            }
            let most = rdsys::rd_kafka_Uuid_most_significant_bits(id);
            let least = rdsys::rd_kafka_Uuid_least_significant_bits(id);
            if most == 0 && least == 0 {
                return Ok(None);
            }
            let text = rdsys::rd_kafka_Uuid_base64str(id);
            if text.is_null() {
                return Ok(Some(format!("{most:016x}{least:016x}")));
            }
            return Ok(Some(CStr::from_ptr(text).to_string_lossy().into_owned()));
        }
        Ok(None)
    }
}
