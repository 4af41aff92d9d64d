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
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text.get(9..12).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    // The server may answer chunked; strip chunk framing for JSON bodies.
    let body = if text
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(&body)
    } else {
        body
    };
    (status, body)
}

fn dechunk(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

/// Gaps from /api/gaps?state=all as JSON values.
pub async fn api_gaps(a: &Auditor) -> Vec<serde_json::Value> {
    let (code, body) = a.get("/api/gaps?state=all").await;
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("gaps json")
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
