//! The one way the audit loop runs a blocking call (SQLite, rdkafka lookups): on tokio's
//! blocking pool, with a panic in the call turned into an error like any other, so each
//! caller matches two outcomes, not three.

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
