//! The coverage guard's startup check: at start, each audit decodes the newest records of
//! its partitions with its own decoder and logs what it found, so that a format that does
//! not fit the topic (Avro records audited as csv: every record `undecodable`, nothing
//! expected, nothing ever missing) is said out loud at once instead of looking like health.
//! The running guard is the metric `gap_auditor_records_filtered_total{reason}` and the
//! `GapAuditorRecordsUndecodable` alert (config/alerts/).

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::config::KafkaConfig;
use crate::kafka::{Lookup, range};
use crate::record::{Decoder, FilterReason, RecordMeta, Tag};
use crate::types::TopicPartition;
use rdkafka::message::Message;

/// Records sampled per partition, and partitions sampled per topic.
const PER_PARTITION: i64 = 25;
const PARTITIONS: usize = 8;

/// Undecodable share above which the startup check warns (the alert's default too).
pub const UNDECODABLE_WARN: f64 = 0.01;

/// What the sampled records decoded to.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Records read.
    pub records: u64,
    /// Expected in the sink.
    pub expected: u64,
    /// Filtered, by [`FilterReason::ALL`] order.
    pub filtered: [u64; 3],
    /// Schema ids seen (avro/protobuf).
    pub schema_ids: BTreeSet<u32>,
    /// Why the first undecodable record is undecodable (never its contents).
    pub first_undecodable: Option<String>,
    /// A schema that could not be fetched (the records are unknown, not filtered).
    pub schema_error: Option<String>,
}

impl Summary {
    /// Counts one record's tag.
    pub fn add(&mut self, tag: &Tag) {
        self.records += 1;
        match tag {
            Tag::Expected { .. } => self.expected += 1,
            Tag::Filtered(r) => {
                if let Some(i) = FilterReason::ALL.iter().position(|x| x == r) {
                    self.filtered[i] += 1;
                }
            }
            Tag::Unresolved(_) => {}
        }
    }

    /// Undecodable records.
    pub fn undecodable(&self) -> u64 {
        self.filtered[1]
    }

    /// Whether the sample says the audit cannot see the topic's records.
    pub fn alarming(&self) -> bool {
        self.records > 0 && self.undecodable() as f64 / self.records as f64 > UNDECODABLE_WARN
    }
}

/// Samples the newest records of `topics` and logs what they decode to. Runs beside the
/// audit (never delays it); Kafka or registry trouble is logged, not fatal.
pub async fn startup_check(
    audit: String,
    kafka: KafkaConfig,
    lookup: Arc<Lookup>,
    topics: Vec<String>,
    decoder: Decoder,
) {
    for topic in topics {
        let (k, l, d, t) = (
            kafka.clone(),
            lookup.clone(),
            decoder.clone(),
            topic.clone(),
        );
        let runtime = tokio::runtime::Handle::current();
        let summary = tokio::task::spawn_blocking(move || sample(&k, &l, &t, &d, &runtime)).await;
        let summary = match summary {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::warn!(%audit, %topic, error = %e, "startup check: cannot sample the topic");
                continue;
            }
            Err(_) => continue,
        };
        log(&audit, &topic, &summary);
    }
}

fn log(audit: &str, topic: &str, s: &Summary) {
    let ids: Vec<u32> = s.schema_ids.iter().copied().collect();
    if let Some(e) = &s.schema_error {
        tracing::warn!(%audit, %topic, records = s.records, schema_ids = ?ids, error = %e,
            "startup check: the newest records cannot be decoded yet: their schema cannot be fetched (they wait, unknown, and are retried)");
    } else if s.records == 0 {
        tracing::info!(%audit, %topic, "startup check: no records to sample yet");
    } else if s.alarming() {
        tracing::warn!(%audit, %topic, records = s.records, expected = s.expected,
            undecodable = s.undecodable(), filter = s.filtered[0], tombstone = s.filtered[2],
            schema_ids = ?ids, why = s.first_undecodable.as_deref().unwrap_or("-"),
            "startup check: {} of the {} newest records are undecodable with this audit's record settings: they are not audited",
            s.undecodable(), s.records);
    } else {
        tracing::info!(%audit, %topic, records = s.records, expected = s.expected,
            undecodable = s.undecodable(), filter = s.filtered[0], tombstone = s.filtered[2],
            schema_ids = ?ids, "startup check: sampled the newest records");
    }
}

fn sample(
    kafka: &KafkaConfig,
    lookup: &Lookup,
    topic: &str,
    decoder: &Decoder,
    runtime: &tokio::runtime::Handle,
) -> Result<Summary, String> {
    let mut s = Summary::default();
    let partitions = lookup.partitions(topic).map_err(|e| e.to_string())?;
    for p in partitions.into_iter().take(PARTITIONS) {
        if s.schema_error.is_some() {
            // One registry error is the finding; asking again per record would only wait.
            break;
        }
        let tp = TopicPartition::new(topic, p);
        let (low, high) = lookup.watermarks(&tp).map_err(|e| e.to_string())?;
        let first = low.max(high - PER_PARTITION);
        range::read(kafka, "gap-auditor-startup-check", &tp, first, high, |m| {
            let meta = RecordMeta {
                topic: m.topic(),
                partition: m.partition(),
                offset: m.offset(),
                key: m.key(),
            };
            if let Some((id, _)) = m.payload().and_then(crate::record::registry::split_frame) {
                s.schema_ids.insert(id);
            }
            match runtime.block_on(decoder.tag_resolved(m.payload(), &meta)) {
                Ok(tag) => {
                    if tag == Tag::Filtered(FilterReason::Undecodable)
                        && s.first_undecodable.is_none()
                    {
                        s.first_undecodable = m.payload().and_then(|v| decoder.explain(v));
                    }
                    s.add(&tag);
                }
                Err(e) => {
                    s.records += 1;
                    s.schema_error = Some(e.to_string());
                    return range::Flow::Stop;
                }
            }
            range::Flow::Continue
        })
        .map_err(|e| e.to_string())?;
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::DecoderSpec;

    #[test]
    fn avro_records_read_as_csv_are_alarming_and_explained() {
        let d = Decoder::new(DecoderSpec {
            delimiter: "|".into(),
            fields: vec!["a".into(), "b".into()],
            field_count: Some(2),
            ..DecoderSpec::default()
        })
        .expect("valid");
        let mut s = Summary::default();
        // A Confluent-framed Avro value: magic 0, schema id 1, then binary.
        let avro = [0u8, 0, 0, 0, 1, 0x14, 0xC3, 0x28];
        for _ in 0..99 {
            s.add(&d.tag_record(Some(&avro), &RecordMeta::default()));
        }
        s.add(&d.tag_record(Some(b"x|y"), &RecordMeta::default()));
        assert_eq!((s.records, s.expected, s.undecodable()), (100, 1, 99));
        assert!(s.alarming());
        let why = d.explain(&avro).expect("explained");
        assert!(why.contains("record.format"), "{why}");
        assert_eq!(d.explain(b"x|y"), None);

        let mut ok = Summary::default();
        for _ in 0..100 {
            ok.add(&d.tag_record(Some(b"x|y"), &RecordMeta::default()));
        }
        ok.add(&d.tag_record(Some(&avro), &RecordMeta::default()));
        assert!(!ok.alarming(), "1 in 101 is under 1 %");
    }
}
