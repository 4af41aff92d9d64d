//! The one way the audit loop runs a blocking call (SQLite, rdkafka lookups): on tokio's
//! blocking pool, with a panic in the call turned into an error like any other, so each
//! caller matches two outcomes, not three. And [`overlap`]: CPU work beside a future.

use std::fmt::Display;
use tokio::task::JoinError;

/// Why a blocking call gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum BlockingError<E: Display> {
    /// The call returned an error.
    #[error("{0}")]
    Failed(E),
    /// The call panicked (or its task was cancelled).
    #[error("panicked: {0}")]
    Panicked(JoinError),
}

/// Runs `f` on the blocking pool and waits for its result.
pub async fn blocking<T, E, F>(f: F) -> Result<T, BlockingError<E>>
where
    F: FnOnce() -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: Display + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(BlockingError::Failed),
        Err(e) => Err(BlockingError::Panicked(e)),
    }
}

/// Runs `cpu` on a thread of its own while `io` is driven on this one, and returns both
/// results: CPU-bound work (deciding verdicts) done while the sink answers the next
/// question. Only on a multi-thread runtime, which can leave this worker to block; on
/// another (the unit tests' current-thread one), or when the system refuses a thread (a
/// container's pids limit), `cpu`, then `io`. A panic in `cpu` goes on in the caller, as
/// it would have inline.
pub async fn overlap<A, B, C>(cpu: C, io: impl Future<Output = B>) -> (A, B)
where
    A: Send,
    C: FnOnce() -> A + Send,
{
    use tokio::runtime::{Handle, RuntimeFlavor};
    let handle = Handle::current();
    if handle.runtime_flavor() != RuntimeFlavor::MultiThread {
        let a = cpu();
        return (a, io.await);
    }
    // Taken by the thread, or here if there is none.
    let cpu = std::sync::Mutex::new(Some(cpu));
    let take = || cpu.lock().ok().and_then(|mut c| c.take());
    tokio::task::block_in_place(|| {
        std::thread::scope(|s| {
            let worker = std::thread::Builder::new()
                .name("decide".into())
                .spawn_scoped(s, || take().map(|f| f()));
            let worker = match worker {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::debug!(error = %e, "no thread for the decision: deciding first");
                    None
                }
            };
            let inline = match worker {
                Some(_) => None,
                None => take().map(|f| f()),
            };
            let b = handle.block_on(io);
            let a = match worker {
                Some(w) => w
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                None => inline,
            };
            // Some either way: the closure is taken exactly once, by the thread or here.
            (a.expect("the decision ran"), b)
        })
    })
}

/// Whether [`overlap`] runs its two parts at once here.
pub fn overlaps() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panic_is_an_error_not_a_crash() {
        let r: Result<(), BlockingError<String>> = blocking(|| panic!("boom")).await;
        assert!(matches!(r, Err(BlockingError::Panicked(_))));
        let r: Result<u8, BlockingError<String>> = blocking(|| Err("no".to_string())).await;
        assert_eq!(r.err().map(|e| e.to_string()).as_deref(), Some("no"));
        assert_eq!(blocking(|| Ok::<_, String>(7)).await.ok(), Some(7));
    }
}
