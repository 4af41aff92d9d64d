//! Fixtures for the Elasticsearch tests (tests/es.rs, tests/es_outage.rs).
//!
//! The server is a real **OpenSearch 2.19** node (one JVM, scripts/opensearch), started by
//! `scripts/test-env.sh` at `GAP_AUDITOR_TEST_ES`. OpenSearch is the Elasticsearch 7.10 fork
//! and answers the APIs the verifier uses (`_mget`, `_search` with `track_total_hits`,
//! `filters`, `histogram`, `search_after`, `_field_caps`, `_mapping`, `_bulk`) as
//! Elasticsearch does; Elasticsearch 8 itself is not run here. Behaviour that only a larger
//! cluster has (several nodes, replicas) is covered by the unit tests with fixtures from
//! Elasticsearch's documentation (src/sink/elasticsearch/tests.rs).
//!
//! [`EsPipeline`] is the pipeline stand-in (Flink's Elasticsearch sink or Kafka Connect):
//! it reads with the pipeline's consumer group, writes documents with `_bulk?refresh=true`
//! and only then commits, like a sink that flushes before its checkpoint completes. The
//! explicit refresh makes each write visible before the commit that passes it, so the tests
//! do not depend on the server's refresh timing (OpenSearch refreshes every second by
//! default); a real deployment gets the same guarantee from `grace` > refresh_interval +
//! the pipeline's flush interval (docs/SEMANTICS.md). Every bulk answer is read item by
//! item: a `_bulk` answers 200 even when items fail.

#![allow(dead_code)]

use crate::support::*;
use elasticsearch::http::request::JsonBody;
use elasticsearch::http::transport::Transport;
use elasticsearch::indices::{IndicesCreateParts, IndicesDeleteParts};
use elasticsearch::params::Refresh;
use elasticsearch::{BulkParts, Elasticsearch};
use gap_auditor::sink::elasticsearch::bulk_item_errors;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset as KOffset, TopicPartitionList};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Base URL of the test server. Fails loudly: these tests need it.
pub fn es_url() -> String {
    std::env::var("GAP_AUDITOR_TEST_ES").expect(
        "GAP_AUDITOR_TEST_ES is not set: run scripts/test.sh (scripts/test-env.sh starts OpenSearch)",
    )
}

pub fn es_client() -> Elasticsearch {
    Elasticsearch::new(Transport::single_node(&es_url()).expect("es transport"))
}

/// The DNS fields of [`dns_line`], in order.
pub const DNS_FIELDS: [&str; 9] = SEED_FIELDS;

/// Creates `index` with the Kafka coordinates as numbers and every DNS field as keyword.
pub async fn create_index(index: &str) {
    let mut props = serde_json::Map::new();
    props.insert("partition".into(), json!({"type": "integer"}));
    props.insert("offset".into(), json!({"type": "long"}));
    props.insert("topic".into(), json!({"type": "keyword"}));
    for f in DNS_FIELDS {
        props.insert(f.into(), json!({"type": "keyword"}));
    }
    let r = es_client()
        .indices()
        .create(IndicesCreateParts::Index(index))
        .body(json!({ "mappings": { "properties": props } }))
        .send()
        .await
        .expect("create index");
    assert!(
        r.status_code().is_success(),
        "create index {index}: {}",
        r.text().await.unwrap_or_default()
    );
}

pub async fn delete_index(index: &str) {
    let _ = es_client()
        .indices()
        .delete(IndicesDeleteParts::Index(&[index]))
        .send()
        .await;
}

/// One document of a record: its fields, topic, partition and offset.
pub fn doc_of(topic: &str, partition: i32, offset: i64, line: &str) -> Value {
    let mut m = serde_json::Map::new();
    for (f, v) in DNS_FIELDS.iter().zip(line.split('|')) {
        m.insert((*f).into(), json!(v));
    }
    m.insert("topic".into(), json!(topic));
    m.insert("partition".into(), json!(partition));
    m.insert("offset".into(), json!(offset));
    Value::Object(m)
}

/// Writes `(id, doc)` pairs with `_bulk?refresh=true`; fails on any item error.
pub async fn bulk_write(index: &str, docs: &[(Option<String>, Value)]) {
    if docs.is_empty() {
        return;
    }
    let mut body: Vec<JsonBody<Value>> = Vec::with_capacity(docs.len() * 2);
    for (id, d) in docs {
        let meta = match id {
            Some(id) => json!({"index": {"_index": index, "_id": id}}),
            None => json!({"index": {"_index": index}}),
        };
        body.push(meta.into());
        body.push(d.clone().into());
    }
    let r = es_client()
        .bulk(BulkParts::None)
        .refresh(Refresh::True)
        .body(body)
        .send()
        .await
        .expect("bulk");
    let status = r.status_code();
    let v: Value = r.json().await.expect("bulk answer");
    assert!(status.is_success(), "bulk: HTTP {status}: {v}");
    let errors = bulk_item_errors(&v);
    assert!(errors.is_empty(), "bulk items failed: {errors:?}");
}

/// Sends `values` to `partition` in pipelined (multi-record) batches; returns the offsets.
/// Kafka's end offsets are exact for such batches (tansu's, the broker before, were not,
/// which did not matter either: the auditor starts at `earliest`).
pub async fn produce_many(topic: &str, partition: i32, values: &[String]) -> Vec<i64> {
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    let mut out = Vec::with_capacity(values.len());
    for chunk in values.chunks(1000) {
        let sends = chunk.iter().map(|v| {
            producer.send(
                FutureRecord::<(), str>::to(topic)
                    .partition(partition)
                    .payload(v),
                Duration::from_secs(30),
            )
        });
        for r in futures::future::join_all(sends).await {
            let d = r.map_err(|(e, _)| e).expect("produce");
            out.push(d.offset);
        }
    }
    out
}

/// How the stand-in names documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ids {
    /// `_id = topic+partition+offset` (Kafka Connect with key.ignore=true).
    Coordinates,
    /// Server-generated ids (Flink's Elasticsearch sink without a key): duplicates possible.
    Auto,
}

/// The pipeline stand-in (see the module docs).
pub struct EsPipeline {
    pub group: String,
    pub topic: String,
    pub index: String,
    /// (partition, start offset) it reads.
    pub from: Vec<(i32, i64)>,
    /// Records it reads before it stops.
    pub count: usize,
    pub ids: Ids,
    /// Documents written per record (0 = the pipeline loses it).
    pub copies: Box<dyn Fn(i32, i64) -> usize + Send + Sync>,
    /// Records per bulk (then refresh, then commit).
    pub bulk: usize,
    pub deadline: Duration,
}

impl EsPipeline {
    pub fn new(group: &str, topic: &str, index: &str, ids: Ids) -> Self {
        Self {
            group: group.into(),
            topic: topic.into(),
            index: index.into(),
            from: vec![(0, 0)],
            count: 0,
            ids,
            copies: Box::new(|_, _| 1),
            bulk: 500,
            deadline: Duration::from_secs(120),
        }
    }

    pub fn from(mut self, from: Vec<(i32, i64)>) -> Self {
        self.from = from;
        self
    }

    pub fn records(mut self, n: usize) -> Self {
        self.count = n;
        self
    }

    pub fn copies(mut self, f: impl Fn(i32, i64) -> usize + Send + Sync + 'static) -> Self {
        self.copies = Box::new(f);
        self
    }

    /// Runs it; returns how many records it read per partition.
    pub async fn run(self) -> BTreeMap<i32, usize> {
        let consumer: BaseConsumer = group_client(&self.group)
            .set("isolation.level", "read_committed")
            .create()
            .expect("pipeline consumer");
        let mut tpl = TopicPartitionList::new();
        for (p, o) in &self.from {
            tpl.add_partition_offset(&self.topic, *p, KOffset::Offset(*o))
                .expect("tpl");
        }
        consumer.assign(&tpl).expect("assign");
        let deadline = Instant::now() + self.deadline;
        let mut read: BTreeMap<i32, usize> = BTreeMap::new();
        let mut seen = 0usize;
        let mut docs: Vec<(Option<String>, Value)> = Vec::new();
        let mut next: BTreeMap<i32, i64> = BTreeMap::new();
        let mut pending = 0usize;
        while seen < self.count {
            assert!(
                Instant::now() < deadline,
                "ES pipeline stand-in read only {seen}/{} records",
                self.count
            );
            let msg = consumer.poll(Duration::from_millis(20)).map(|m| {
                let m = m.expect("pipeline poll");
                (
                    m.partition(),
                    m.offset(),
                    m.payload().map(|p| String::from_utf8_lossy(p).to_string()),
                )
            });
            let idle = msg.is_none();
            match msg {
                Some((p, o, payload)) => {
                    seen += 1;
                    pending += 1;
                    *read.entry(p).or_default() += 1;
                    next.insert(p, o + 1);
                    if let Some(line) = payload {
                        for _ in 0..(self.copies)(p, o) {
                            let id = match self.ids {
                                Ids::Coordinates => Some(format!("{}+{p}+{o}", self.topic)),
                                Ids::Auto => None,
                            };
                            docs.push((id, doc_of(&self.topic, p, o, &line)));
                        }
                    }
                }
                None => tokio::task::yield_now().await,
            }
            if pending > 0 && (pending >= self.bulk || idle || seen == self.count) {
                bulk_write(&self.index, &docs).await;
                docs.clear();
                pending = 0;
                let mut c = TopicPartitionList::new();
                for (p, o) in &next {
                    c.add_partition_offset(&self.topic, *p, KOffset::Offset(*o))
                        .expect("tpl");
                }
                commit_retrying(&consumer, &c, "pipeline commit");
            }
        }
        read
    }
}

/// What an Elasticsearch audit of one test varies.
pub struct EsSpec<'a> {
    pub topic: &'a str,
    pub index: &'a str,
    pub pipeline_group: &'a str,
    pub group: &'a str,
    pub state_dir: &'a std::path::Path,
    /// `doc_id`, `offset_columns` or `key_columns`.
    pub strategy: &'a str,
    pub grace: &'a str,
    pub verify_interval: &'a str,
    pub batch_size: usize,
}

/// The auditor configuration of an Elasticsearch audit named `es_audit`.
pub fn es_config_toml(s: &EsSpec) -> String {
    let audit = AuditToml::new("es_audit", &[s.topic])
        .set("pipeline_group", s.pipeline_group)
        .set("grace", s.grace)
        .set("verify_interval", s.verify_interval)
        .set("batch_size", s.batch_size)
        .seed_csv();
    let audit = match s.strategy {
        "doc_id" => audit
            .strategy("doc_id")
            .matching("id_template", "{topic}+{partition}+{offset}"),
        "key_columns" => audit.seed_key_columns(),
        // Dynamic mapping: the string fields' `.keyword` sub-fields (ignore_above 256).
        "key_columns_dynamic" => audit
            .strategy("key_columns")
            .matching("key", ["client_ip", "domain"])
            .matching("columns", ["client_ip.keyword", "domain.keyword"]),
        _ => audit.offset_columns().matching("topic_column", "topic"),
    };
    ConfigToml::new(&kafka())
        .test_group(s.group)
        .kafka("statistics_interval", "500ms")
        .server("listen", "127.0.0.1:0")
        .state_path(s.state_dir)
        .audit(
            audit
                .es_sink(&es_url(), s.index)
                .sink("query_timeout", "3s"),
        )
        .render()
}

/// A fresh topic, index, groups and state dir.
pub struct EsScenario {
    pub topic: String,
    pub index: String,
    pub pipeline_group: String,
    pub auditor_group: String,
    pub state: tempfile::TempDir,
    pub partitions: i32,
}

impl EsScenario {
    /// With the index created (`create_index = false`: it never exists).
    pub async fn new(name: &str, partitions: i32, with_index: bool) -> Self {
        let topic = unique(name);
        create_topic(&topic, partitions).await;
        let index = unique(&format!("{name}_idx")).to_lowercase();
        if with_index {
            create_index(&index).await;
        }
        Self {
            topic,
            index,
            pipeline_group: unique(&format!("{name}_pipeline")),
            auditor_group: unique("es_auditor"),
            state: tempfile::tempdir().expect("tempdir"),
            partitions,
        }
    }

    pub fn spec<'a>(&'a self, strategy: &'a str, grace: &'a str, verify: &'a str) -> EsSpec<'a> {
        EsSpec {
            topic: &self.topic,
            index: &self.index,
            pipeline_group: &self.pipeline_group,
            group: &self.auditor_group,
            state_dir: self.state.path(),
            strategy,
            grace,
            verify_interval: verify,
            batch_size: 1000,
        }
    }

    pub async fn start_auditor(&self, strategy: &str, grace: &str, verify: &str) -> Auditor {
        Auditor::start(&es_config_toml(&self.spec(strategy, grace, verify))).await
    }

    /// The stand-in for this scenario, ids as the strategy expects.
    pub fn pipeline(&self, strategy: &str) -> EsPipeline {
        let ids = if strategy == "doc_id" {
            Ids::Coordinates
        } else {
            Ids::Auto
        };
        EsPipeline::new(&self.pipeline_group, &self.topic, &self.index, ids)
    }

    pub async fn cleanup(&self) {
        delete_index(&self.index).await;
    }
}

/// Sink queries (ok + error) counted by the auditor so far.
pub fn sink_queries(a: &Auditor) -> u64 {
    ["ok", "error"]
        .iter()
        .map(|r| {
            a.metrics
                .sink_queries
                .with_label_values(&[a.audit.as_str(), r])
                .get()
        })
        .sum()
}
