//! HTTP for tests: a free port, GET with dechunking, the gaps the API and the store hold.

use gap_auditor::gap::Gap;
use gap_auditor::store::{GapFilter, StateFilter, Store};

use super::*;

/// A port free at the time of the call (for a child process's `server.listen`).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Like [`http_get`], but `None` while nothing listens (a daemon still starting).
pub async fn try_http_get(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    tokio::net::TcpStream::connect(addr).await.ok()?;
    tokio::time::timeout(std::time::Duration::from_secs(2), http_get(addr, path))
        .await
        .ok()
}

/// Minimal HTTP/1.1 GET (no client dependency needed).
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .expect("write");
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.expect("read");
    split_response(&buf)
}

/// (status, body) of a raw HTTP/1.1 answer, the chunk framing of a chunked body removed.
pub fn split_response(raw: &[u8]) -> (u16, String) {
    let (head, body) = head_and_body(raw);
    let status = head.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    (status, body)
}

/// The head of a raw HTTP/1.1 answer as text, and its body with any chunk framing removed.
pub fn head_and_body(raw: &[u8]) -> (String, String) {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(raw.len());
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let body = raw.get(split + 4..).unwrap_or_default();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_vec()
    };
    (head, String::from_utf8_lossy(&body).to_string())
}

/// A chunked body's data, in bytes (chunk sizes count bytes); panics on broken framing, so
/// a test never reads a cut answer as a short one.
fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .unwrap_or_else(|| {
                panic!(
                    "chunked body: no size line in {:?}",
                    String::from_utf8_lossy(rest)
                )
            });
        let size = std::str::from_utf8(&rest[..line]).expect("chunk size is ASCII");
        let size = size.split(';').next().unwrap_or_default().trim();
        let n = usize::from_str_radix(size, 16)
            .unwrap_or_else(|_| panic!("chunked body: bad chunk size {size:?}"));
        rest = &rest[line + 2..];
        if n == 0 {
            return out;
        }
        assert!(rest.len() >= n + 2, "chunked body cut short");
        out.extend_from_slice(&rest[..n]);
        assert_eq!(&rest[n..n + 2], b"\r\n", "chunk not followed by CRLF");
        rest = &rest[n + 2..];
    }
}

/// Gaps from /api/gaps?state=all as JSON values.
pub async fn api_gaps(a: &Auditor) -> Vec<serde_json::Value> {
    let (code, body) = a.get("/api/gaps?state=all").await;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("gaps json")
}

/// /api/status as JSON.
pub async fn api_status(a: &Auditor) -> serde_json::Value {
    let (code, body) = a.get("/api/status").await;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("status json")
}

/// (partition, first, last, missing) of each gap, sorted.
pub fn gap_tuples(gaps: &[serde_json::Value]) -> Vec<(i64, i64, i64, i64)> {
    let mut v: Vec<(i64, i64, i64, i64)> = gaps
        .iter()
        .map(|g| {
            (
                g["partition"].as_i64().expect("partition"),
                g["first_offset"].as_i64().expect("first"),
                g["last_offset"].as_i64().expect("last"),
                g["missing_records"].as_i64().expect("missing"),
            )
        })
        .collect();
    v.sort();
    v
}

/// Every gap in a store, in any state.
pub fn stored_gaps(store: &Store) -> Vec<Gap> {
    store
        .list_gaps(&GapFilter {
            state: StateFilter::All,
            audit: None,
        })
        .expect("gaps")
}

/// [`gap_tuples`] of gaps read from a store.
pub fn stored_gap_tuples(gaps: &[Gap]) -> Vec<(i64, i64, i64, i64)> {
    let mut v: Vec<(i64, i64, i64, i64)> = gaps
        .iter()
        .map(|g| {
            (
                g.partition as i64,
                g.first_offset,
                g.last_offset,
                g.missing_records as i64,
            )
        })
        .collect();
    v.sort();
    v
}
