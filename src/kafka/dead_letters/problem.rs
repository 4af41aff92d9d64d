//! What the dead-letter reader shows as its problem (`/api/status`, the log): a failed
//! fetch and a failed catch-up check are kept apart, so a successful check (metadata and
//! watermarks answered) never wipes a fetch error (review of issue 37: it did, at the next
//! check, 500 ms later, while the reader still could not read). A fetch error stays until
//! a successful read: a record delivered, or a check finding the reader caught up.

/// The reader's two sources of trouble.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Problems {
    /// The last fetch error, until a successful read.
    read: Option<String>,
    /// The last catch-up check's error, until a check succeeds.
    check: Option<String>,
}

impl Problems {
    /// A poll returned an error.
    pub(super) fn read_failed(&mut self, e: String) {
        self.read = Some(e);
    }

    /// A record was delivered.
    pub(super) fn read_ok(&mut self) {
        self.read = None;
    }

    /// A catch-up check ended: `Ok(true)` when it found the reader caught up.
    pub(super) fn checked(&mut self, result: Result<bool, String>) {
        match result {
            Ok(caught_up) => {
                self.check = None;
                if caught_up {
                    // Everything in the topic was read since the error: reading works.
                    self.read = None;
                }
            }
            Err(e) => self.check = Some(e),
        }
    }

    /// What to show: `None` when all is well.
    pub(super) fn shown(&self) -> Option<String> {
        match (&self.check, &self.read) {
            (Some(c), Some(r)) => Some(format!("{c}; {r}")),
            (Some(p), None) | (None, Some(p)) => Some(p.clone()),
            (None, None) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fetch_error_stays_until_a_successful_read() {
        let mut p = Problems::default();
        p.read_failed("reading failed: broker transport failure".into());
        // The next check answers (metadata, watermarks) but is not caught up.
        p.checked(Ok(false));
        assert_eq!(
            p.shown().as_deref(),
            Some("reading failed: broker transport failure")
        );
        p.checked(Err("metadata: timed out".into()));
        assert_eq!(
            p.shown().as_deref(),
            Some("metadata: timed out; reading failed: broker transport failure")
        );
        p.checked(Ok(false));
        p.read_ok();
        assert_eq!(p.shown(), None, "a record read");
        p.read_failed("reading failed: again".into());
        p.checked(Ok(true));
        assert_eq!(p.shown(), None, "caught up: everything read since");
    }
}
