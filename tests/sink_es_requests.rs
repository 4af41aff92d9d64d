//! What the Elasticsearch verifier sends, request by request, to a stub server on loopback
//! that answers with Elasticsearch's documented response shapes (`_field_caps`, `_search`
//! with `hits.total` and a histogram, a 503 error body). No real server is involved: this
//! counts requests, which a real server does not report.
//!
//! The mapping check (`_field_caps`) happens once, before the first question; in the steady
//! state every range count is ONE request; after a failed question the next one checks
//! the mapping again.

use gap_auditor::ledger::OffsetRun;
use gap_auditor::sink::Verifier;
use gap_auditor::sink::elasticsearch::{ElasticsearchSink, EsAuth, EsTarget};
use gap_auditor::types::TopicPartition;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Field caps of the test index (shape of the `_field_caps` reference page).
const CAPS: &str = r#"{"indices":["dns"],"fields":{
  "partition":{"integer":{"type":"integer","metadata_field":false,"searchable":true,"aggregatable":true}},
  "offset":{"long":{"type":"long","metadata_field":false,"searchable":true,"aggregatable":true}},
  "topic":{"keyword":{"type":"keyword","metadata_field":false,"searchable":true,"aggregatable":true}}}}"#;

/// A range count answer: 5 documents, no duplicated offset.
const COUNT: &str = r#"{"took":1,"timed_out":false,
  "_shards":{"total":1,"successful":1,"skipped":0,"failed":0},
  "hits":{"total":{"value":5,"relation":"eq"},"max_score":null,"hits":[]},
  "aggregations":{"dups":{"buckets":[]}}}"#;

const UNAVAILABLE: &str = r#"{"error":{"root_cause":[],"type":"search_phase_execution_exception",
  "reason":"all shards failed"},"status":503}"#;

#[derive(Default)]
struct Stub {
    /// (method, path without the query string) of every request.
    log: Mutex<Vec<(String, String)>>,
    /// Searches still to answer 503.
    fail_searches: AtomicUsize,
}

impl Stub {
    fn paths(&self) -> Vec<String> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .map(|(m, p)| format!("{m} {p}"))
            .collect()
    }

    async fn serve(self: Arc<Self>, mut s: TcpStream) {
        let mut buf: Vec<u8> = Vec::new();
        loop {
            // Head.
            let head_end = loop {
                if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break i + 4;
                }
                let mut chunk = [0u8; 4096];
                match s.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            while buf.len() < head_end + len {
                let mut chunk = [0u8; 4096];
                match s.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            buf.drain(..head_end + len);
            let mut first = head.lines().next().unwrap_or("").split(' ');
            let method = first.next().unwrap_or("").to_string();
            let target = first.next().unwrap_or("");
            let path = target.split('?').next().unwrap_or("").to_string();
            self.log.lock().unwrap().push((method, path.clone()));
            let (status, body) = if path.ends_with("/_field_caps") {
                (200, CAPS)
            } else if path.ends_with("/_search") {
                let fail = self
                    .fail_searches
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                    .is_ok();
                if fail {
                    (503, UNAVAILABLE)
                } else {
                    (200, COUNT)
                }
            } else if path.ends_with("/_count") {
                (
                    200,
                    r#"{"count":0,"_shards":{"total":1,"successful":1,"skipped":0,"failed":0}}"#,
                )
            } else {
                (404, r#"{"error":"no such route","status":404}"#)
            };
            let resp = format!(
                "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\nx-elastic-product: \
                 Elasticsearch\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            if s.write_all(resp.as_bytes()).await.is_err() {
                return;
            }
        }
    }
}

async fn stub() -> (Arc<Stub>, String) {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", l.local_addr().expect("addr"));
    let stub = Arc::new(Stub::default());
    let st = stub.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            tokio::spawn(st.clone().serve(s));
        }
    });
    (stub, url)
}

#[tokio::test]
async fn one_mapping_check_then_one_request_per_count_and_again_after_an_error() {
    let (stub, url) = stub().await;
    let sink = ElasticsearchSink::new(
        &url,
        EsAuth::None,
        None,
        EsTarget {
            index: "dns".into(),
            columns: gap_auditor::config::SinkColumns {
                partition: "partition".into(),
                offset: "offset".into(),
                topic: Some("topic".into()),
                key: Vec::new(),
            },
        },
        Duration::from_secs(5),
    )
    .expect("sink");
    let tp = TopicPartition::new("t", 0);
    let runs = [OffsetRun::new(0, 4)];
    for _ in 0..3 {
        assert_eq!(
            sink.count_offsets(&tp, &runs)
                .await
                .expect("count")
                .distinct,
            5
        );
    }
    let caps = "GET /dns/_field_caps".to_string();
    let search = "POST /dns/_search".to_string();
    assert_eq!(
        stub.paths(),
        vec![caps.clone(), search.clone(), search.clone(), search.clone()],
        "one mapping check, then one request per count"
    );
    // A failed question re-arms the check.
    stub.fail_searches.store(1, Ordering::SeqCst);
    assert!(sink.count_offsets(&tp, &runs).await.is_err());
    assert_eq!(
        sink.count_offsets(&tp, &runs)
            .await
            .expect("count")
            .distinct,
        5
    );
    assert_eq!(
        sink.count_offsets(&tp, &runs)
            .await
            .expect("count")
            .distinct,
        5
    );
    assert_eq!(
        stub.paths()[4..].to_vec(),
        vec![search.clone(), caps, search.clone(), search],
        "after the error: check, then one request per count again"
    );
    // A ping names no field: no mapping check, one `_count`.
    sink.ping().await.expect("ping");
    assert_eq!(
        stub.paths()[8..].to_vec(),
        vec!["POST /dns/_count".to_string()]
    );
}
