//! An open transaction holding a partition's last stable offset (issue 37): under
//! read_committed nobody — neither the pipeline nor the auditor — reads past the LSO while
//! the transaction that starts there is open, so the records behind it are lag, never loss
//! (the due rule already holds them: the pipeline cannot commit past what it cannot read).
//! This step names that cause, with how long the LSO has stood there, instead of the bare
//! "not read to its log end yet".
//!
//! The figures are librdkafka's, from its last fetch response (statistics `ls_offset`,
//! `hi_offset`): only a read_committed consumer learns the LSO (a read_uncommitted one
//! reports the high watermark for both, and this step then sees no hold). They can be old:
//! no hold is named while the partition is paused (backpressure: nothing is fetched), nor
//! unless the auditor stands exactly at the LSO (a read_committed consumer cannot pass it,
//! so a position elsewhere means figures from before a seek or a reassignment); during a
//! broker outage they are the last ones fetched. librdkafka 2.12 has no
//! DescribeProducers/DescribeTransactions (KIP-664), so the transaction's producer is not
//! named.

use crate::types::Offset;
use serde::Serialize;

/// An LSO standing below the log end with the auditor read up to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Hold {
    /// The last stable offset: the first offset of the oldest open transaction.
    pub last_stable: Offset,
    /// The log end (high watermark) when last seen.
    pub log_end: Offset,
    /// Since when (unix ms) the LSO has stood at `last_stable` below the log end.
    pub since_ms: i64,
}

impl Hold {
    /// Offsets produced behind the LSO (open transactions' records and any after them).
    pub fn behind(&self) -> i64 {
        self.log_end - self.last_stable
    }

    /// The hold as a reason: what holds the partition, where and since when.
    pub fn describe(&self, now_ms: i64) -> String {
        format!(
            "an open transaction holds its last stable offset at {} ({} offset(s) below the \
             log end {}) for {} s: nothing after it can be read under read_committed until \
             the transaction commits or aborts (lag, never loss)",
            self.last_stable,
            self.behind(),
            self.log_end,
            (now_ms - self.since_ms).max(0) / 1000
        )
    }
}

/// A partition's LSO as last observed: the step's own state.
#[derive(Debug, Default)]
pub struct TransactionHold {
    /// (LSO, since ms) while it stands below the log end.
    below_end: Option<(Offset, i64)>,
}

impl TransactionHold {
    /// Observes the partition's LSO and log end as librdkafka last reported them, the
    /// offset the auditor has read up to and whether it is paused; returns the hold when an
    /// open transaction is what stops reading: the LSO stands below the log end and the
    /// auditor stands at it (below it, the auditor is merely behind; past it, the figures
    /// are older than its position).
    pub fn observe(
        &mut self,
        last_stable: Option<Offset>,
        log_end: Option<Offset>,
        read_to: Offset,
        paused: bool,
        now_ms: i64,
    ) -> Option<Hold> {
        let (Some(ls), Some(end)) = (last_stable, log_end) else {
            self.below_end = None;
            return None;
        };
        if ls < 0 || ls >= end {
            self.below_end = None;
            return None;
        }
        // The same LSO keeps its age; a moved one (a transaction ended, another is open)
        // starts a new one.
        let since = match self.below_end {
            Some((at, since)) if at == ls => since,
            _ => now_ms,
        };
        self.below_end = Some((ls, since));
        (read_to == ls && !paused).then_some(Hold {
            last_stable: ls,
            log_end: end,
            since_ms: since,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_lso_below_the_log_end_with_everything_before_it_read_is_a_hold_that_ages() {
        let mut h = TransactionHold::default();
        let first = h
            .observe(Some(4), Some(10), 4, false, 1_000)
            .expect("a hold");
        assert_eq!(
            first,
            Hold {
                last_stable: 4,
                log_end: 10,
                since_ms: 1_000
            }
        );
        assert_eq!(first.behind(), 6);
        // Later, the log grew; the LSO did not move: the hold keeps its start.
        let later = h
            .observe(Some(4), Some(12), 4, false, 31_000)
            .expect("a hold");
        assert_eq!(later.since_ms, 1_000);
        assert!(
            later
                .describe(31_000)
                .contains("at 4 (8 offset(s) below the log end 12) for 30 s")
        );
    }

    #[test]
    fn no_hold_without_an_lso_below_the_end_or_while_the_auditor_is_behind_it() {
        let mut h = TransactionHold::default();
        // No transaction: the LSO is the log end.
        assert_eq!(h.observe(Some(10), Some(10), 10, false, 0), None);
        // Unknown figures (no fetch yet; librdkafka's -1001).
        assert_eq!(h.observe(None, Some(10), 10, false, 0), None);
        assert_eq!(h.observe(Some(-1001), Some(10), 10, false, 0), None);
        // Behind the LSO: ordinary lag, not the transaction's doing.
        assert_eq!(h.observe(Some(4), Some(10), 3, false, 0), None);
        // Once read up to it, the age counts from when the LSO was first seen there.
        assert_eq!(
            h.observe(Some(4), Some(10), 4, false, 5_000)
                .map(|x| x.since_ms),
            Some(0)
        );
    }

    #[test]
    fn no_hold_while_paused_or_past_the_lso() {
        let mut h = TransactionHold::default();
        // Paused for backpressure: nothing is fetched, the figures may be old.
        assert_eq!(h.observe(Some(4), Some(10), 4, true, 0), None);
        // Past the LSO: a read_committed consumer cannot be there, so the figures predate
        // its position (reassigned at a later commit, say).
        assert_eq!(h.observe(Some(4), Some(10), 50, false, 0), None);
        // The age still counts from the first sight of the LSO there.
        assert_eq!(
            h.observe(Some(4), Some(10), 4, false, 7_000)
                .map(|x| x.since_ms),
            Some(0)
        );
    }

    #[test]
    fn an_lso_that_moves_starts_a_new_hold() {
        let mut h = TransactionHold::default();
        h.observe(Some(4), Some(10), 4, false, 0);
        let moved = h
            .observe(Some(7), Some(10), 7, false, 9_000)
            .expect("a hold");
        assert_eq!(moved.since_ms, 9_000);
        // Committed: the LSO reaches the log end; a later transaction ages from its own start.
        assert_eq!(h.observe(Some(10), Some(10), 10, false, 10_000), None);
        assert_eq!(
            h.observe(Some(10), Some(14), 10, false, 11_000)
                .map(|x| x.since_ms),
            Some(11_000)
        );
    }
}
