//! Test doubles of the registry, shared by the tests of the modules that use it.

use super::NotFoundPolicy;
use crate::config::SchemaRegistryConfig;
use std::sync::Arc;
use std::time::Duration;

/// A registry config for `url` with nothing else set (tests: `http://127.0.0.1:9/` is a
/// registry nobody answers).
pub(crate) fn test_config(url: &str) -> SchemaRegistryConfig {
    SchemaRegistryConfig {
        url: url.into(),
        username: None,
        password: None,
        password_file: None,
        ca_file: None,
        timeout: Duration::from_secs(2),
    }
}

/// A registry that answers every request with `status` (and counts them).
pub(crate) async fn answering(status: &'static str) -> (String, Arc<std::sync::atomic::AtomicU32>) {
    answering_with(
        status,
        r#"{"error_code":40403,"message":"Schema not found"}"#,
    )
    .await
}

/// A server that answers every request with `status` and `body` (and counts them).
pub(crate) async fn answering_with(
    status: &'static str,
    body: &'static str,
) -> (String, Arc<std::sync::atomic::AtomicU32>) {
    let hits = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let h = hits.clone();
    let url = serving(move |_| {
        h.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        (status, body)
    })
    .await;
    (url, hits)
}

/// A server that answers each request with what `answer` says for its request line
/// (`GET /path?query HTTP/1.1`): a status and a JSON body. Returns its base URL.
pub(crate) async fn serving(
    answer: impl Fn(&str) -> (&'static str, &'static str) + Send + 'static,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = vec![0u8; 4096];
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            let text = String::from_utf8_lossy(&got);
            let (status, body) = answer(text.lines().next().unwrap_or_default());
            let resp = format!(
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(resp.as_bytes()).await;
        }
    });
    url
}

/// 404s are final after 3 of them, however short the time they span.
pub(crate) const QUICK: NotFoundPolicy = NotFoundPolicy {
    count: 3,
    after: Duration::from_millis(1),
    reprobe: Duration::from_secs(3600),
};
