//! Doris Stream Load (`replay --to-sink` with `sink.stream_load_url`) against a FAKE Doris:
//! no real Doris runs here. [`FakeDoris`] is a minimal FE + BE over raw HTTP/1.1 that follows
//! Doris's documented behaviour: the FE checks basic auth and answers `307 Temporary
//! Redirect` with a `Location` on a BE (without reading the body, as Doris does with
//! `Expect: 100-continue`); the BE checks the `Authorization` header again (clients that drop
//! it on the redirect fail here, as they do against Doris), answers `100 Continue`, reads the
//! JSON lines, and answers the documented JSON result: `Success` with the row counts,
//! `Label Already Exists` (with `ExistingJobStatus`) for a label already used, or `Fail`
//! with `NumberFilteredRows` and an `ErrorURL` when a row is malformed (the default
//! `max_filter_ratio` is 0). What it does NOT prove: Doris's real column mapping, types,
//! transactions and publish timing.
//!
//! Over https the fake FE presents the server certificate of the test CA that
//! scripts/test-env.sh makes (`GAP_AUDITOR_TEST_TLS_*`), to show that Stream Load trusts
//! `sink.ca_file` the way the sink's MySQL connection does.

#[path = "it/support.rs"]
mod support;

use gap_auditor::config::SinkTls;
use gap_auditor::sink::stream_load::{StreamLoad, label};
use gap_auditor::sink::tls::TlsSettings;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const AUTH: &str = "Basic cm9vdDpzM2NyZXQ="; // root:s3cret
/// gap:gap, the MariaDB test user of `GAP_AUDITOR_TEST_MYSQL` (the e2e test's credentials).
const GAP_AUTH: &str = "Basic Z2FwOmdhcA==";

#[derive(Default)]
struct State {
    /// label → rows loaded under it.
    labels: HashMap<String, Vec<Value>>,
    /// Requests the FE redirected, the BE served.
    fe_requests: usize,
    be_requests: usize,
    /// Authorization header seen by the BE, per request.
    be_auth: Vec<Option<String>>,
    /// (header, value) of the last BE request.
    be_headers: HashMap<String, String>,
    be_path: String,
}

struct FakeDoris {
    fe: String,
    auth: &'static str,
    state: Arc<Mutex<State>>,
}

struct Request {
    path: String,
    headers: HashMap<String, String>,
    /// Body bytes already read along with the head.
    early: Vec<u8>,
}

async fn read_head(s: &mut TcpStream) -> Option<Request> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let end = loop {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = head.split("\r\n");
    let path = lines.next()?.split(' ').nth(1)?.to_string();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some(Request {
        path,
        headers,
        early: buf[end..].to_vec(),
    })
}

async fn read_body(s: &mut TcpStream, r: &Request) -> Vec<u8> {
    let len: usize = r
        .headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = r.early.clone();
    let mut chunk = [0u8; 4096];
    while body.len() < len {
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    body
}

async fn respond(s: &mut TcpStream, status: &str, extra: &str, body: &str) {
    let msg = format!(
        "HTTP/1.1 {status}\r\n{extra}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = s.write_all(msg.as_bytes()).await;
    let _ = s.flush().await;
}

fn result(
    label: &str,
    status: &str,
    message: &str,
    total: usize,
    loaded: usize,
    filtered: usize,
) -> Value {
    json!({
        "TxnId": if status == "Success" { 1001 } else { -1 },
        "Label": label,
        "Comment": "",
        "TwoPhaseCommit": "false",
        "Status": status,
        "Message": message,
        "NumberTotalRows": total,
        "NumberLoadedRows": loaded,
        "NumberFilteredRows": filtered,
        "NumberUnselectedRows": 0,
        "LoadBytes": 0,
        "LoadTimeMs": 1,
        "BeginTxnTimeMs": 0,
        "StreamLoadPutTimeMs": 0,
        "ReadDataTimeMs": 0,
        "WriteDataTimeMs": 0,
        "CommitAndPublishTimeMs": 0
    })
}

impl FakeDoris {
    /// FE and BE on free ports, accepting the credentials `auth` (an Authorization value).
    async fn start(auth: &'static str) -> FakeDoris {
        let state = Arc::new(Mutex::new(State::default()));
        let be = TcpListener::bind("127.0.0.1:0").await.expect("be");
        let be_addr = be.local_addr().expect("be addr");
        let fe = TcpListener::bind("127.0.0.1:0").await.expect("fe");
        let fe_addr = fe.local_addr().expect("fe addr");
        let st = state.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = fe.accept().await {
                let st = st.clone();
                tokio::spawn(async move {
                    let Some(r) = read_head(&mut s).await else {
                        return;
                    };
                    st.lock().unwrap().fe_requests += 1;
                    if r.headers.get("authorization").map(String::as_str) != Some(auth) {
                        let _ = read_body(&mut s, &r).await;
                        respond(
                            &mut s,
                            "401 Unauthorized",
                            "",
                            r#"{"status":"FAILED","msg":"Access denied"}"#,
                        )
                        .await;
                        return;
                    }
                    // Doris's FE redirects at once, before the body (Expect: 100-continue);
                    // the fake then drains what the client sent anyway before closing.
                    let location = format!("Location: http://{be_addr}{}\r\n", r.path);
                    respond(&mut s, "307 Temporary Redirect", &location, "").await;
                    let _ = read_body(&mut s, &r).await;
                });
            }
        });
        let st = state.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = be.accept().await {
                let st = st.clone();
                tokio::spawn(async move {
                    let Some(r) = read_head(&mut s).await else {
                        return;
                    };
                    let got = r.headers.get("authorization").cloned();
                    {
                        let mut g = st.lock().unwrap();
                        g.be_requests += 1;
                        g.be_auth.push(got.clone());
                        g.be_headers = r.headers.clone();
                        g.be_path = r.path.clone();
                    }
                    if got.as_deref() != Some(auth) {
                        let _ = read_body(&mut s, &r).await;
                        respond(
                            &mut s,
                            "401 Unauthorized",
                            "",
                            r#"{"status":"FAILED","msg":"no valid Basic authorization"}"#,
                        )
                        .await;
                        return;
                    }
                    if r.headers
                        .get("expect")
                        .map(|v| v.eq_ignore_ascii_case("100-continue"))
                        == Some(true)
                    {
                        let _ = s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await;
                    }
                    let body = read_body(&mut s, &r).await;
                    let label = r.headers.get("label").cloned().unwrap_or_default();
                    let json_lines = r.headers.get("format").map(String::as_str) == Some("json")
                        && r.headers.get("read_json_by_line").map(String::as_str) == Some("true");
                    let answer = {
                        let mut g = st.lock().unwrap();
                        if g.labels.contains_key(&label) {
                            let mut v = result(
                                &label,
                                "Label Already Exists",
                                &format!(
                                    "Label [{label}] has already been used, relate to txn [1001]"
                                ),
                                0,
                                0,
                                0,
                            );
                            v["ExistingJobStatus"] = json!("FINISHED");
                            v
                        } else {
                            let lines: Vec<&[u8]> = body
                                .split(|b| *b == b'\n')
                                .filter(|l| !l.is_empty())
                                .collect();
                            let rows: Vec<Value> = lines
                                .iter()
                                .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
                                .filter(|v| json_lines && v.is_object())
                                .collect();
                            let filtered = lines.len() - rows.len();
                            if filtered > 0 {
                                let mut v = result(
                                    &label,
                                    "Fail",
                                    "[DATA_QUALITY_ERROR]too many filtered rows",
                                    lines.len(),
                                    0,
                                    filtered,
                                );
                                v["ErrorURL"] =
                                    json!(format!("http://{be_addr}/api/_load_error_log?file=x"));
                                v
                            } else {
                                let n = rows.len();
                                g.labels.insert(label.clone(), rows);
                                result(&label, "Success", "OK", n, n, 0)
                            }
                        }
                    };
                    respond(&mut s, "200 OK", "", &answer.to_string()).await;
                });
            }
        });
        FakeDoris {
            fe: format!("http://{fe_addr}"),
            auth,
            state,
        }
    }
}

fn lines(rows: &[Value]) -> Vec<u8> {
    let mut b = Vec::new();
    for r in rows {
        b.extend(r.to_string().into_bytes());
        b.push(b'\n');
    }
    b
}

fn loader(fe: &str, password: &str) -> StreamLoad {
    StreamLoad::new(
        fe,
        "db1",
        "dns",
        "root",
        password,
        Duration::from_secs(10),
        &TlsSettings::default(),
    )
    .expect("loader")
}

#[tokio::test]
async fn redirect_keeps_auth_and_a_repeated_label_is_refused() {
    let d = FakeDoris::start(AUTH).await;
    let l = loader(&d.fe, "s3cret");
    let rows = vec![
        json!({"client_ip": "1.2.3.4", "offset": 2}),
        json!({"client_ip": "5.6.7.8", "offset": 3}),
    ];
    let lab = label("dns_logs", "dns", 0, 2, 3, 2);
    let r = l.load(&lab, lines(&rows)).await.expect("load");
    assert_eq!(r.status, "Success", "{r:?}");
    assert_eq!(
        (
            r.number_loaded_rows,
            r.number_filtered_rows,
            r.number_unselected_rows
        ),
        (2, 0, 0)
    );
    {
        let g = d.state.lock().unwrap();
        assert_eq!(
            (g.fe_requests, g.be_requests),
            (1, 1),
            "FE redirected once to the BE"
        );
        assert_eq!(
            g.be_auth,
            vec![Some(AUTH.to_string())],
            "credentials kept across the 307"
        );
        assert_eq!(g.be_path, "/api/db1/dns/_stream_load");
        assert_eq!(g.be_headers.get("label"), Some(&lab));
        assert_eq!(
            g.be_headers.get("expect").map(String::as_str),
            Some("100-continue")
        );
        assert_eq!(g.labels[&lab], rows);
    }
    // The same replay again: refused by label, nothing loaded twice.
    let again = l.load(&lab, lines(&rows)).await.expect("load");
    assert_eq!(again.status, "Label Already Exists", "{again:?}");
    assert_eq!(again.existing_job_status.as_deref(), Some("FINISHED"));
    assert_eq!(d.state.lock().unwrap().labels.len(), 1);
}

#[tokio::test]
async fn wrong_password_and_malformed_rows_are_reported() {
    let d = FakeDoris::start(AUTH).await;
    let e = loader(&d.fe, "wrong")
        .load("l1", lines(&[json!({"a": 1})]))
        .await
        .expect_err("401");
    assert!(e.contains("401") && e.contains("Access denied"), "{e}");

    let mut body = lines(&[json!({"a": 1})]);
    body.extend(b"not json\n");
    let r = loader(&d.fe, "s3cret")
        .load("l2", body)
        .await
        .expect("answer");
    assert_eq!(r.status, "Fail");
    assert_eq!((r.number_total_rows, r.number_filtered_rows), (2, 1));
    assert!(
        r.error_url
            .as_deref()
            .is_some_and(|u| u.contains("_load_error_log")),
        "{r:?}"
    );
    assert!(d.state.lock().unwrap().labels.is_empty());
}

/// The real binary: a doris audit with `stream_load_url` on the fake FE. The presence check
/// asks MariaDB (the MySQL-protocol stand-in for Doris's FE), which never receives the
/// rows (the fake BE keeps them), so the second replay finds the records still absent and
/// sends them again: Doris refuses the repeated label, reported as already in the sink,
/// exit 0, nothing loaded twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replay_to_doris_by_stream_load_is_idempotent_by_label() {
    use support::*;
    let d = FakeDoris::start(GAP_AUTH).await;
    assert_eq!(d.auth, GAP_AUTH);
    let s = Scenario::new("streamload").await;
    assert_eq!(s.send(&dns_lines(0..4)).await, vec![0, 1, 2, 3]);
    let spec = s.spec("offset_columns", "1s", "300ms");
    let toml = config_toml(&spec).replace(
        "kind = \"mysql\"",
        &format!("kind = \"doris\"\nstream_load_url = \"{}\"", d.fe),
    );
    assert!(toml.contains("stream_load_url"), "{toml}");
    let config = s.state.path().join("gap-auditor.toml");
    std::fs::write(&config, &toml).expect("config");
    let args = [
        "--audit",
        "dns_logs",
        "--partition",
        "0",
        "--offsets",
        "2-3",
        "--to-sink",
    ];

    let (code, out, err) = run_replay(&config, &args);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("offset 2: written") && out.contains("offset 3: written"),
        "{out}"
    );
    assert!(
        out.contains("Success: 2 loaded, 0 filtered, 0 unselected of 2 sent"),
        "{out}"
    );
    let lab = label("dns_logs", &s.topic, 0, 2, 3, 2);
    {
        let g = d.state.lock().unwrap();
        assert_eq!(
            g.be_auth,
            vec![Some(GAP_AUTH.to_string())],
            "auth kept across the 307"
        );
        let rows = &g.labels[&lab];
        assert_eq!(rows.len(), 2);
        // csv fields by name plus the partition/offset columns of offset_columns.
        assert_eq!(rows[0]["offset"], json!(2), "{rows:?}");
        assert_eq!(rows[1]["partition"], json!(0), "{rows:?}");
        assert!(
            rows[0].get("topic").is_none(),
            "no topic_column in this audit"
        );
    }

    let (code, out, err) = run_replay(&config, &args);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Label Already Exists"), "{out}");
    assert!(out.contains("offset 2: already in the sink"), "{out}");
    assert!(out.contains("0 record(s) written, 0 failed"), "{out}");
    assert_eq!(
        d.state.lock().unwrap().labels.len(),
        1,
        "nothing loaded twice"
    );
}

fn tls_env(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: run scripts/test.sh (it makes the test CA)"))
}

/// An https FE that answers every load with the documented `Success` result (no FE → BE
/// redirect: that is covered above), presenting the test CA's certificate for 127.0.0.1.
async fn https_fe() -> String {
    use tokio_native_tls::native_tls;
    let p12 = std::fs::read(tls_env("GAP_AUDITOR_TEST_TLS_SERVER_P12")).expect("server.p12");
    let identity = native_tls::Identity::from_pkcs12(
        &p12,
        &tls_env("GAP_AUDITOR_TEST_TLS_CLIENT_P12_PASSWORD"),
    )
    .expect("server identity");
    let acceptor = tokio_native_tls::TlsAcceptor::from(
        native_tls::TlsAcceptor::new(identity).expect("acceptor"),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                // A client that refuses the certificate ends the handshake: nothing to answer.
                let Ok(mut s) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let head_end = loop {
                    let Ok(n) = s.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                if head.contains("expect: 100-continue") {
                    let _ = s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await;
                }
                let mut body = buf[head_end..].to_vec();
                while body.len() < length {
                    let Ok(n) = s.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    body.extend_from_slice(&chunk[..n]);
                }
                let rows = body
                    .split(|b| *b == b'\n')
                    .filter(|l| !l.is_empty())
                    .count();
                let result = json!({"Status": "Success", "Label": "l", "Message": "OK",
                    "NumberTotalRows": rows, "NumberLoadedRows": rows,
                    "NumberFilteredRows": 0, "NumberUnselectedRows": 0})
                .to_string();
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{result}",
                    result.len()
                );
                let _ = s.write_all(answer.as_bytes()).await;
                let _ = s.shutdown().await;
            });
        }
    });
    format!("https://127.0.0.1:{port}")
}

#[tokio::test]
async fn stream_load_over_https_trusts_the_sink_ca() {
    let fe = https_fe().await;
    let rows = vec![json!({"client_ip": "1.2.3.4", "offset": 2})];
    let ca = |v: &str| Some(PathBuf::from(tls_env(v)));
    let cases = [
        (SinkTls::VerifyIdentity, ca("GAP_AUDITOR_TEST_TLS_CA"), true),
        (SinkTls::VerifyCa, ca("GAP_AUDITOR_TEST_TLS_CA"), true),
        (
            SinkTls::VerifyCa,
            ca("GAP_AUDITOR_TEST_TLS_OTHER_CA"),
            false,
        ),
        // No ca_file: the system roots, which do not know the test CA.
        (SinkTls::Disabled, None, false),
        (SinkTls::Required, None, true),
    ];
    for (mode, ca_file, ok) in cases {
        let tls = TlsSettings {
            mode,
            ca_file: ca_file.clone(),
            ..TlsSettings::default()
        };
        let l = StreamLoad::new(
            &fe,
            "db1",
            "dns",
            "root",
            "s3cret",
            Duration::from_secs(10),
            &tls,
        )
        .expect("loader");
        let r = l.load("l", lines(&rows)).await;
        match (ok, r) {
            (true, Ok(r)) => assert_eq!((r.status.as_str(), r.number_loaded_rows), ("Success", 1)),
            (false, Err(e)) => assert!(
                e.contains("certificate verify failed"),
                "{mode} {ca_file:?}: {e}"
            ),
            (true, Err(e)) => panic!("{mode} {ca_file:?}: {e}"),
            (false, Ok(r)) => {
                panic!("{mode} {ca_file:?}: loaded despite an untrusted certificate: {r:?}")
            }
        }
    }
}
