//! WAL checkpoints on a thread of their own, for the daemon.
//!
//! SQLite's automatic checkpoint runs inside the commit that grows the WAL past 1,000
//! pages, on the committing thread. The daemon's round commits carry the key book's claims
//! (megabytes a round under key_columns), so nearly every round paid for a checkpoint
//! before its settled watermark could go to Kafka: in the key_columns end-to-end bench, the
//! store write took 0.57 s with it and 0.23 s without, and the daemon's CPU per record fell
//! from ~3.0 to ~2.4 µs.
//!
//! With [`super::Store::checkpoint_in_background`] the daemon's connection no longer
//! checkpoints; after each round's commit a thread with its own connection runs
//! `PRAGMA wal_checkpoint(PASSIVE)`, which copies what it can without waiting for readers or
//! the writer. Durability does not change (a commit is durable once its WAL frames are
//! synced, `synchronous = FULL`); only who copies the frames into the database file does.
//! Requests coalesce: one checkpoint queued at most, so a slow one is followed by one more,
//! not by one per round that committed meanwhile.

use super::StoreError;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;

/// The checkpoint thread and its doorbell. Dropped with the store: the thread finishes the
/// checkpoint under way, if any, and ends.
#[derive(Debug)]
pub(super) struct Checkpointer {
    wake: Option<SyncSender<Wake>>,
    thread: Option<JoinHandle<()>>,
    /// Checkpoints that copied every frame of the WAL (the next commit starts it over).
    complete: Arc<AtomicU64>,
}

impl Checkpointer {
    /// Opens a connection of its own to `path` and starts the thread.
    pub(super) fn start(path: &Path) -> Result<Self, StoreError> {
        let sq = |context: &str| {
            let context = context.to_string();
            move |source| StoreError::Sqlite {
                path: path.to_path_buf(),
                context,
                source,
            }
        };
        let conn = rusqlite::Connection::open(path).map_err(sq("open for checkpoints"))?;
        conn.busy_timeout(super::BUSY_TIMEOUT)
            .map_err(sq("set busy_timeout"))?;
        let (wake, rx) = sync_channel(1);
        let name = path.display().to_string();
        let complete = Arc::new(AtomicU64::new(0));
        let counted = complete.clone();
        let thread = std::thread::Builder::new()
            .name("store-checkpoint".into())
            .spawn(move || run(conn, rx, &name, &counted))
            .map_err(|source| StoreError::CheckpointThread {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Self {
            wake: Some(wake),
            thread: Some(thread),
            complete,
        })
    }

    /// How many checkpoints copied the whole WAL so far.
    pub(super) fn complete(&self) -> u64 {
        self.complete.load(Ordering::Relaxed)
    }

    /// Asks for a checkpoint; returns at once (one already queued covers this one too).
    /// `false`: the thread has stopped, and no checkpoint will come from it.
    pub(super) fn request(&self) -> bool {
        match self.wake.as_ref().map(|w| w.try_send(Wake::Checkpoint)) {
            Some(Ok(())) | Some(Err(TrySendError::Full(_))) => true,
            Some(Err(TrySendError::Disconnected(_))) | None => false,
        }
    }

    /// Ends the thread, as its death would (tests of what the store does then).
    #[cfg(test)]
    pub(super) fn stop(&self) {
        if let Some(w) = &self.wake {
            let _ = w.send(Wake::Exit);
        }
        while self.request() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.wake.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the thread is woken for.
#[derive(Debug)]
enum Wake {
    Checkpoint,
    #[cfg(test)]
    Exit,
}

fn run(conn: rusqlite::Connection, wake: Receiver<Wake>, path: &str, complete: &AtomicU64) {
    while let Ok(w) = wake.recv() {
        match w {
            Wake::Checkpoint => {}
            #[cfg(test)]
            Wake::Exit => return,
        }
        // (busy, frames in the WAL, frames checkpointed): busy when a writer or a reader
        // kept it from finishing; the next request goes on from there.
        let r = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, i64>(1)?,
                row.get::<_, i64>(2)?,
            ))
        });
        match r {
            Ok((busy, log, done)) => {
                if busy == 0 && done == log {
                    complete.fetch_add(1, Ordering::Relaxed);
                }
                tracing::trace!(store = %path, busy, log, done, "WAL checkpoint");
            }
            Err(e) => {
                tracing::warn!(store = %path, error = %e, "WAL checkpoint failed; retried after the next commit");
            }
        }
    }
}
