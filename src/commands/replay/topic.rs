//! `--to-topic`: the missing records re-produced, bytes, key, headers and timestamp as read.

use super::{ORIGIN_HEADER, Outcome, Record, TIMEOUT, Target};
use crate::config::Config;
use crate::kafka::client;
use anyhow::Context;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

/// Re-produces key, value, headers and timestamp, plus the origin header, with an
/// idempotent producer.
pub(super) async fn to_topic(
    config: &Config,
    target: &Target,
    topic: &str,
    records: &[&Record],
) -> anyhow::Result<Vec<Outcome>> {
    let producer: FutureProducer = client::base(&config.kafka)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .create()
        .context("creating the producer")?;
    let mut out = Vec::new();
    for r in records {
        let origin = format!("{}/{}/{}", target.tp.topic, target.tp.partition, r.offset);
        let mut headers = OwnedHeaders::new();
        for (k, v) in &r.headers {
            headers = headers.insert(Header {
                key: k,
                value: v.as_deref(),
            });
        }
        headers = headers.insert(Header {
            key: ORIGIN_HEADER,
            value: Some(origin.as_bytes()),
        });
        let mut rec = FutureRecord::<[u8], [u8]>::to(topic).headers(headers);
        if let Some(k) = &r.key {
            rec = rec.key(k.as_slice());
        }
        if let Some(v) = &r.value {
            rec = rec.payload(v.as_slice());
        }
        if let Some(ts) = r.timestamp {
            rec = rec.timestamp(ts);
        }
        out.push(match producer.send(rec, TIMEOUT).await {
            Ok(_) => Outcome::Written { offset: r.offset },
            Err((e, _)) => Outcome::Failed {
                offset: r.offset,
                error: e.to_string(),
            },
        });
    }
    Ok(out)
}

pub(super) fn all_failed(records: &[&Record], error: &str) -> Vec<Outcome> {
    records
        .iter()
        .map(|r| Outcome::Failed {
            offset: r.offset,
            error: error.to_string(),
        })
        .collect()
}
