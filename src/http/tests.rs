use super::*;
use crate::gap::{Gap, GapState};
use crate::status::{AuditStatus, PartitionStatus, SinkState};
use chrono::{TimeZone, Utc};
use serde_json::Value;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;

struct Server {
    addr: SocketAddr,
    state: HttpState,
    shutdown: CancellationToken,
    task: JoinHandle<std::io::Result<()>>,
    _dir: tempfile::TempDir,
}

async fn start() -> Server {
    start_with(None).await
}

async fn start_with(api_token: Option<Secret>) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let state = HttpState {
        metrics: Arc::new(Metrics::new()),
        status: StatusBoard::new(),
        store: Arc::new(Store::open(dir.path()).unwrap()),
        api_token,
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(serve(listener, state.clone(), shutdown.clone()));
    Server {
        addr,
        state,
        shutdown,
        task,
        _dir: dir,
    }
}

struct Reply {
    status: u16,
    headers: String,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

/// A minimal HTTP/1.1 client: one request per connection, `Connection: close`.
async fn request(addr: SocketAddr, method: &str, target: &str) -> Reply {
    request_with(addr, method, target, "").await
}

/// Like [`request`], with extra header lines (each ending in `\r\n`).
async fn request_with(addr: SocketAddr, method: &str, target: &str, headers: &str) -> Reply {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req =
        format!("{method} {target} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n{headers}\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut raw))
        .await
        .expect("response in time")
        .unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").expect("header/body separator");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    Reply {
        status,
        headers: head.to_ascii_lowercase(),
        body: body.to_string(),
    }
}

async fn get(addr: SocketAddr, target: &str) -> Reply {
    request(addr, "GET", target).await
}

fn sample_gap(audit: &str, first: i64, state: GapState) -> Gap {
    let t = Utc.with_ymd_and_hms(2024, 5, 1, 12, 0, 0).unwrap();
    Gap {
        id: Gap::make_id(audit, "test", 0, first),
        audit: audit.to_string(),
        topic: "test".to_string(),
        partition: 0,
        first_offset: first,
        last_offset: first + 4,
        missing_records: 5,
        size_known: true,
        first_timestamp: Some(t),
        last_timestamp: None,
        detected_at: t + chrono::TimeDelta::seconds(first),
        state,
        unrecoverable_at: Some(t + chrono::TimeDelta::days(7)),
        ack_reason: None,
        cause: Default::default(),
        pipeline_commit_from: None,
        pipeline_commit_to: None,
        pipeline_commit_at: None,
        shared_key: false,
    }
}

fn audit_status(audit: &str, ok_at: Option<chrono::DateTime<Utc>>) -> AuditStatus {
    AuditStatus {
        audit: audit.to_string(),
        consumer_group: "gap-auditor".to_string(),
        pipeline_group: None,
        pipeline_group_hold: None,
        sink_kind: "doris".to_string(),
        sink_state: SinkState::Up,
        sink_error: None,
        last_sink_ok: ok_at,
        last_kafka_ok: ok_at,
        verify_interval_ms: 5_000,
        schema_registry_error: None,
        sink_model: None,
        partitions: vec![PartitionStatus {
            topic: "test".to_string(),
            partition: 0,
            consumed: 100,
            settled: 90,
            pipeline_committed: Some(95),
            log_end: Some(100),
            log_start: None,
            pending: 10,
            missing: 0,
            paused: false,
            awaiting_schema: 0,
            divergence: None,
        }],
        completeness: Default::default(),
    }
}

/// The seed incident as the ledgers would publish it: the gap {2, 3} of partition 0
/// (first record at 12:00:02), records of partition 1 pending since 12:00:05.
fn seed_completeness(audit: &str) -> crate::completeness::AuditCompleteness {
    use crate::completeness::{BlockingGap, LedgerCompleteness, PartitionInput, Since, evaluate};
    let t0 = Utc
        .with_ymd_and_hms(2024, 5, 1, 12, 0, 0)
        .unwrap()
        .timestamp_millis();
    let p0 = LedgerCompleteness {
        gaps: vec![BlockingGap {
            first: 2,
            since: Since::At(t0 + 2_000),
            missing: 2,
            state: GapState::Open,
        }],
        blocking_gaps: 1,
        newest_ts: Some(t0 + 5_000),
        ..Default::default()
    };
    let p1 = LedgerCompleteness {
        pending: Some(Since::At(t0 + 5_000)),
        newest_ts: Some(t0 + 6_000),
        ..Default::default()
    };
    let part = |partition, ledger| PartitionInput {
        topic: "test".to_string(),
        partition,
        ledger,
        caught_up: true,
    };
    evaluate(audit, &[part(0, p0), part(1, p1)], t0 + 60_000, 3_000)
}

#[tokio::test]
async fn health_metrics_and_errors() {
    let srv = start().await;
    let r = get(srv.addr, "/healthz").await;
    assert_eq!((r.status, r.body.as_str()), (200, "ok"));

    srv.state
        .metrics
        .records_lost
        .with_label_values(&["a", "t", "0"])
        .inc_by(3);
    let r = get(srv.addr, "/metrics").await;
    assert_eq!(r.status, 200);
    assert!(
        r.headers
            .contains("content-type: text/plain; version=0.0.4"),
        "{}",
        r.headers
    );
    assert!(r.body.contains("# TYPE gap_auditor_build_info gauge"));
    assert!(
        r.body
            .contains("gap_auditor_records_lost_total{audit=\"a\",partition=\"0\",topic=\"t\"} 3")
    );

    assert_eq!(get(srv.addr, "/nope").await.status, 404);
    assert_eq!(get(srv.addr, "/metrics/").await.status, 404);
    let r = request(srv.addr, "POST", "/api/gaps").await;
    assert_eq!(r.status, 405);
    assert!(r.headers.contains("allow: get, head"));
    assert_eq!(request(srv.addr, "DELETE", "/metrics").await.status, 405);
    let r = request(srv.addr, "HEAD", "/healthz").await;
    assert_eq!((r.status, r.body.as_str()), (200, ""));
    srv.shutdown.cancel();
}

#[tokio::test]
async fn api_gaps_fields_and_filters() {
    let srv = start().await;
    let open = sample_gap("dns logs", 10, GapState::Open);
    let late = sample_gap("dns logs", 50, GapState::Late);
    let other = sample_gap("other", 10, GapState::Open);
    srv.state
        .store
        .commit_round("dns logs", &[open.clone(), late.clone()], &[])
        .unwrap();
    srv.state
        .store
        .commit_round("other", std::slice::from_ref(&other), &[])
        .unwrap();

    // Default: unresolved gaps of every audit.
    let r = get(srv.addr, "/api/gaps").await;
    assert_eq!(r.status, 200);
    assert!(r.headers.contains("content-type: application/json"));
    let v = r.json();
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 2);
    let g = arr
        .iter()
        .find(|g| g["id"] == open.id.as_str())
        .unwrap()
        .as_object()
        .unwrap();
    let mut keys: Vec<&str> = g.keys().map(String::as_str).collect();
    keys.sort_unstable();
    let mut want = vec![
        "id",
        "audit",
        "topic",
        "partition",
        "first_offset",
        "last_offset",
        "missing_records",
        "first_timestamp",
        "last_timestamp",
        "detected_at",
        "state",
        "unrecoverable_at",
        "size_known",
        "ack_reason",
        // Root cause (issue 6): the pipeline commit step that passed over the gap.
        "cause",
        "pipeline_commit_from",
        "pipeline_commit_to",
        "pipeline_commit_at",
        // key_columns: a missing record's key was shared by other records.
        "shared_key",
    ];
    want.sort_unstable();
    assert_eq!(keys, want);
    assert_eq!(g["audit"], "dns logs");
    assert_eq!(g["partition"], 0);
    assert_eq!(g["first_offset"], 10);
    assert_eq!(g["last_offset"], 14);
    assert_eq!(g["missing_records"], 5);
    assert_eq!(g["state"], "open");
    assert_eq!(g["first_timestamp"], "2024-05-01T12:00:00Z");
    assert_eq!(g["last_timestamp"], Value::Null);
    assert_eq!(g["unrecoverable_at"], "2024-05-08T12:00:00Z");

    // Percent-decoded audit name, state filters.
    let ids = |v: Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|g| g["id"].as_str().unwrap().to_string())
            .collect()
    };
    let r = get(srv.addr, "/api/gaps?audit=dns%20logs&state=all").await;
    assert_eq!(ids(r.json()), vec![late.id.clone(), open.id.clone()]);
    let r = get(srv.addr, "/api/gaps?state=late&audit=dns+logs").await;
    assert_eq!(ids(r.json()), vec![late.id.clone()]);
    let r = get(srv.addr, "/api/gaps?state=%6Fpen&audit=other").await;
    assert_eq!(ids(r.json()), vec![other.id.clone()]);
    let r = get(srv.addr, "/api/gaps?state=acknowledged").await;
    assert_eq!(r.json(), serde_json::json!([]));

    // A bad state is a 400 naming the parameter.
    let r = get(srv.addr, "/api/gaps?state=bogus%27").await;
    assert_eq!(r.status, 400);
    let e = r.json();
    assert_eq!(e["parameter"], "state");
    assert!(e["error"].as_str().unwrap().contains("state"), "{e}");
    srv.shutdown.cancel();
}

/// Every method but GET/HEAD, on every path under /api (known or not), is 405 and
/// changes nothing in the store.
#[tokio::test]
async fn api_is_read_only() {
    let srv = start().await;
    let gap = sample_gap("a", 10, GapState::Open);
    srv.state
        .store
        .commit_round("a", std::slice::from_ref(&gap), &[])
        .unwrap();
    let before = get(srv.addr, "/api/gaps?state=all").await.body;
    for method in ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "ACK"] {
        for path in [
            "/api",
            "/api/",
            "/api/gaps",
            "/api/gaps?state=all",
            "/api/status",
            "/api/ack",
            &format!("/api/gaps/{}", gap.id),
        ] {
            let r = request_with(
                srv.addr,
                method,
                path,
                "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
            )
            .await;
            assert_eq!(r.status, 405, "{method} {path}: {}", r.body);
            assert!(r.headers.contains("allow: get, head"), "{}", r.headers);
        }
    }
    assert_eq!(get(srv.addr, "/api/gaps?state=all").await.body, before);
    srv.shutdown.cancel();
}

#[tokio::test]
async fn api_token_guards_api_only() {
    const TOKEN: &str = "s3cr3t-T0ken_with.symbols~+/=";
    let srv = start_with(Some(Secret::new(TOKEN))).await;
    let auth = |value: &str| format!("Authorization: {value}\r\n");

    // No header: 401 with a plain Bearer challenge, before method or path matter.
    for (method, path) in [
        ("GET", "/api/status"),
        ("GET", "/api/gaps?state=all"),
        ("HEAD", "/api/gaps"),
        ("GET", "/api/nope"),
        ("POST", "/api/gaps"),
    ] {
        let r = request(srv.addr, method, path).await;
        assert_eq!(r.status, 401, "{method} {path}");
        assert!(
            r.headers
                .contains("www-authenticate: bearer realm=\"gap-auditor\""),
            "{}",
            r.headers
        );
    }
    // Wrong tokens: a prefix, an extension, another case, another scheme, empty.
    let wrong = [
        auth(&format!("Bearer {}", &TOKEN[..TOKEN.len() - 1])),
        auth(&format!("Bearer {TOKEN}x")),
        auth(&format!("Bearer {}", TOKEN.to_uppercase())),
        auth(&format!("Basic {TOKEN}")),
        auth(&format!("Token {TOKEN}")),
        auth("Bearer"),
        auth("Bearer "),
        auth(TOKEN),
    ];
    for header in &wrong {
        let r = request_with(srv.addr, "GET", "/api/status", header).await;
        assert_eq!(r.status, 401, "{header}");
        assert!(
            r.headers.contains("error=\"invalid_token\""),
            "{}",
            r.headers
        );
        assert!(!r.body.contains(TOKEN) && !r.headers.contains(&TOKEN.to_lowercase()));
    }
    // The right token, with any case of the scheme and extra spaces.
    for header in [
        auth(&format!("Bearer {TOKEN}")),
        auth(&format!("bearer {TOKEN}")),
        auth(&format!("BEARER   {TOKEN}")),
    ] {
        let r = request_with(srv.addr, "GET", "/api/status", &header).await;
        assert_eq!(r.status, 200, "{header}: {}", r.body);
        assert_eq!(r.json(), serde_json::json!({ "audits": [] }));
        let r = request_with(srv.addr, "GET", "/api/gaps", &header).await;
        assert_eq!(r.status, 200, "{header}: {}", r.body);
        // Authenticated is still read-only.
        let r = request_with(srv.addr, "DELETE", "/api/gaps", &header).await;
        assert_eq!(r.status, 405);
    }
    // Scrapes and probes stay open.
    assert_eq!(get(srv.addr, "/metrics").await.status, 200);
    assert_eq!(get(srv.addr, "/healthz").await.status, 200);
    assert_eq!(get(srv.addr, "/readyz").await.status, 503, "no audit yet");
    assert_eq!(get(srv.addr, "/nope").await.status, 404);
    srv.shutdown.cancel();
}

#[test]
fn bearer_parsing() {
    let token = Secret::new("abc");
    let mut h = hyper::HeaderMap::new();
    assert_eq!(check_bearer(&h, &token), Err(AuthFailure::Missing));
    for (value, want) in [
        ("Bearer abc", Ok(())),
        ("bEaReR abc ", Ok(())),
        ("Bearer  abc", Ok(())),
        ("Bearer ab", Err(AuthFailure::Invalid)),
        ("Bearer abcd", Err(AuthFailure::Invalid)),
        ("Bearer a bc", Err(AuthFailure::Invalid)),
        ("Bearerabc", Err(AuthFailure::Invalid)),
        ("Basic abc", Err(AuthFailure::Invalid)),
        ("", Err(AuthFailure::Invalid)),
    ] {
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
        assert_eq!(check_bearer(&h, &token), want, "{value:?}");
    }
    // Non-UTF-8 header bytes are compared as bytes, never panic.
    h.insert(
        header::AUTHORIZATION,
        HeaderValue::from_bytes(b"Bearer \xff\xfe").unwrap(),
    );
    assert_eq!(check_bearer(&h, &token), Err(AuthFailure::Invalid));
}

#[tokio::test]
async fn readyz_and_status() {
    let srv = start().await;
    let r = get(srv.addr, "/readyz").await;
    assert_eq!(r.status, 503);
    assert!(r.body.contains("no audit"), "{}", r.body);
    let r = get(srv.addr, "/api/status").await;
    assert_eq!(r.json(), serde_json::json!({ "audits": [] }));

    srv.state.status.update(audit_status("dns_logs", None));
    let r = get(srv.addr, "/readyz").await;
    assert_eq!(r.status, 503);
    assert!(
        r.body.contains("dns_logs") && r.body.contains("Kafka"),
        "{}",
        r.body
    );

    srv.state
        .status
        .update(audit_status("dns_logs", Some(Utc::now())));
    let r = get(srv.addr, "/readyz").await;
    assert_eq!(r.status, 200, "{}", r.body);

    let v = get(srv.addr, "/api/status").await.json();
    let a = &v["audits"][0];
    assert_eq!(a["audit"], "dns_logs");
    assert_eq!(a["sink_state"], "up");
    let p = &a["partitions"][0];
    assert_eq!(
        (p["consumed"].as_i64(), p["settled"].as_i64()),
        (Some(100), Some(90))
    );
    assert_eq!(p["pipeline_committed"], 95);
    assert_eq!(p["log_end"], 100);
    srv.shutdown.cancel();
}

/// The contract's fields; `until` percent-encoded or not; an unknown audit is a 404
/// listing the known ones; a bad `until` a 400 naming it; one audit needs no name.
#[tokio::test]
async fn api_completeness_answers_for_an_until() {
    let srv = start().await;
    let r = get(srv.addr, "/api/completeness?audit=dns_logs").await;
    assert_eq!(r.status, 404, "nothing published yet");
    assert_eq!(r.json()["audits"], serde_json::json!([]));

    let mut st = audit_status("dns_logs", Some(Utc::now()));
    st.completeness = seed_completeness("dns_logs");
    srv.state.status.update(st);

    let v = get(
        srv.addr,
        "/api/completeness?audit=dns_logs&until=2024-05-01T12:00:02Z",
    )
    .await
    .json();
    assert_eq!(v["complete"], true, "{v}");
    assert_eq!(v["complete_until"], "2024-05-01T12:00:02Z");
    assert_eq!(v["blocking"], serde_json::json!([]));

    // 14:00:03+02:00 is 12:00:03Z; the `+` sent raw decodes as a space.
    for until in ["2024-05-01T14:00:03%2B02:00", "2024-05-01T14:00:03+02:00"] {
        let r = get(srv.addr, &format!("/api/completeness?until={until}")).await;
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        assert_eq!(v["complete"], false);
        assert_eq!(v["until"], "2024-05-01T12:00:03Z");
        assert_eq!(v["blocking"], serde_json::json!(["dns_logs:test:0:2"]));
        assert_eq!(v["blockers"][0]["state"], "open");
    }
    let v = get(
        srv.addr,
        "/api/completeness?audit=dns_logs&until=2024-05-01T12:00:06Z",
    )
    .await
    .json();
    assert_eq!(
        v["blocking"],
        serde_json::json!(["dns_logs:test:0:2", "pending", "pending:test-1"])
    );
    assert!(
        v["reason"].as_str().unwrap().contains("blocked by 1 gap"),
        "{v}"
    );
    // Which partitions the answer speaks for, per topic: what lets several instances'
    // answers be checked for a partition none of them covers.
    assert_eq!(v["covers"], serde_json::json!({"test": [0, 1]}), "{v}");
    let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "audit",
            "blockers",
            "blocking",
            "complete",
            "complete_until",
            "covers",
            "partitions",
            "reason",
            "topic_partitions",
            "truncated",
            "until"
        ]
    );

    let r = get(
        srv.addr,
        "/api/completeness?audit=dns&until=2024-05-01T12:00:00Z",
    )
    .await;
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["audits"], serde_json::json!(["dns_logs"]));
    let r = get(srv.addr, "/api/completeness?audit=dns_logs&until=yesterday").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["parameter"], "until");

    // Several audits: the name is required.
    srv.state.status.update(audit_status("other", None));
    let r = get(srv.addr, "/api/completeness?until=2024-05-01T12:00:00Z").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["parameter"], "audit");
    // The status shows the time only.
    let v = get(srv.addr, "/api/status").await.json();
    assert_eq!(v["audits"][0]["complete_until"], "2024-05-01T12:00:02Z");
    assert_eq!(v["audits"][1]["complete_until"], Value::Null);
    srv.shutdown.cancel();
}

#[test]
fn completeness_query_parsing() {
    let q = parse_completeness_query("").unwrap();
    assert_eq!(
        q,
        CompletenessQuery {
            audit: None,
            until_ms: None
        }
    );
    let q = parse_completeness_query("audit=a%20b&until=1970-01-01T00:00:01.5Z").unwrap();
    assert_eq!(q.audit.as_deref(), Some("a b"));
    assert_eq!(q.until_ms, Some(1_500));
    assert_eq!(parse_time("1970-01-01T01:00:00 01:00"), Some(0));
    assert!(parse_completeness_query("until=12:00").is_err());
}

#[tokio::test]
async fn shutdown_returns_even_with_an_idle_keep_alive_connection() {
    let srv = start().await;
    // A keep-alive client that finished one request and stays connected.
    let mut idle = tokio::net::TcpStream::connect(srv.addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));

    srv.shutdown.cancel();
    let result = tokio::time::timeout(Duration::from_secs(5), srv.task)
        .await
        .expect("serve() returns promptly after cancel")
        .unwrap();
    assert!(result.is_ok());
    // The idle connection was closed by the server, and nobody listens any more.
    let n = tokio::time::timeout(Duration::from_secs(5), idle.read(&mut buf))
        .await
        .unwrap();
    assert!(matches!(n, Ok(0) | Err(_)));
    assert!(tokio::net::TcpStream::connect(srv.addr).await.is_err());
}

#[test]
fn gap_query_parsing() {
    let f = parse_gap_query("").unwrap();
    assert_eq!(
        f,
        GapFilter {
            state: StateFilter::Unresolved,
            audit: None
        }
    );
    let f = parse_gap_query("audit=&state=all&x=1").unwrap();
    assert_eq!(
        f,
        GapFilter {
            state: StateFilter::All,
            audit: None
        }
    );
    let f = parse_gap_query("audit=a%26b&state=unrecoverable").unwrap();
    assert_eq!(
        f,
        GapFilter {
            state: StateFilter::Only(GapState::Unrecoverable),
            audit: Some("a&b".into())
        }
    );
    let e = parse_gap_query("state=").unwrap_err();
    assert_eq!(e.parameter, Some("state"));
}
