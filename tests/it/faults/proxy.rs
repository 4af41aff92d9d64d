//! A TCP proxy the test controls, between the auditor and a real server (the shared MariaDB;
//! the private tansu of tests/faults_private.rs):
//! the fault injector for outages that must not touch the shared services. Its [`Mode`] can
//! change at any moment:
//!
//! - [`Mode::Pass`]: forwards both ways.
//! - [`Mode::Refuse`]: the server is down: new connections and every open one are reset.
//! - [`Mode::Delay`]: a slow server: every reply reaches the client that much later (each
//!   chunk keeps its own deadline, so latency is added, throughput is not capped).
//! - [`Mode::Blackhole`]: a server that accepts and never answers: connections stay open,
//!   nothing is forwarded either way, until the mode changes (then they are reset).
//!
//! A mode change resets every forwarding connection, so a client's pooled connections see
//! the fault at once instead of when they next connect.

#![allow(dead_code)] // tests/faults_private.rs uses a part

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What the proxy does with traffic (see module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pass,
    Refuse,
    Delay(Duration),
    Blackhole,
}

/// A running proxy; stops when dropped.
pub struct Proxy {
    /// Where clients connect.
    pub addr: SocketAddr,
    mode: watch::Sender<Mode>,
    accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free local port and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy bind");
        Self::on(listener, upstream)
    }

    /// Forwards connections accepted by `listener` to `upstream`.
    pub fn on(listener: TcpListener, upstream: SocketAddr) -> Proxy {
        let addr = listener.local_addr().expect("proxy addr");
        let (mode, watcher) = watch::channel(Mode::Pass);
        let accepted = Arc::new(AtomicU64::new(0));
        let count = accepted.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                count.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(connection(client, upstream, watcher.clone()));
            }
        });
        Proxy {
            addr,
            mode,
            accepted,
            task,
        }
    }

    /// Switches mode; open connections are reset (or held, for [`Mode::Blackhole`]).
    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        // Live connections end with the mode channel's sender.
    }
}

/// Resets the connection (RST, not FIN): what a client sees from a crashed server.
/// (`SO_LINGER` 0 does not block on drop; only a non-zero linger does, hence the allow.)
#[allow(deprecated)]
fn reset(s: TcpStream) {
    let _ = s.set_linger(Some(Duration::ZERO));
    drop(s);
}

/// Holds `client` open without answering until the mode leaves `Blackhole`.
async fn hold(client: TcpStream, mut mode: watch::Receiver<Mode>) {
    while *mode.borrow_and_update() == Mode::Blackhole {
        if mode.changed().await.is_err() {
            break;
        }
    }
    reset(client);
}

async fn connection(client: TcpStream, upstream: SocketAddr, mut mode: watch::Receiver<Mode>) {
    let now = *mode.borrow_and_update();
    let delay = match now {
        Mode::Refuse => return reset(client),
        Mode::Blackhole => return hold(client, mode).await,
        Mode::Pass => Duration::ZERO,
        Mode::Delay(d) => d,
    };
    let Ok(server) = TcpStream::connect(upstream).await else {
        return reset(client);
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, sw) = server.into_split();
    let up = async {
        let mut sw = sw;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match cr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if sw.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            }
        }
    };
    // Replies: read as they come, each written `delay` after it arrived; when the server
    // closes, what it sent last is still delivered.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
    let read_down = async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match sr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let at = tokio::time::Instant::now() + delay;
                    if tx.send((at, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            }
        }
    };
    let write_down = async {
        while let Some((at, bytes)) = rx.recv().await {
            tokio::time::sleep_until(at).await;
            if cw.write_all(&bytes).await.is_err() {
                break;
            }
        }
    };
    let down = async { tokio::join!(read_down, write_down) };
    let mode_changed = tokio::select! {
        _ = up => false,
        _ = down => false,
        _ = mode.changed() => true,
    };
    let client = cr.reunite(cw).expect("same stream");
    if mode_changed && *mode.borrow() == Mode::Blackhole {
        hold(client, mode).await;
    } else {
        reset(client);
    }
}
