//! A partition's log that no longer holds the auditor's position (issue 34 item 7), pure.
//!
//! Two ways it happens, and what each means for the offsets the auditor already decided:
//! - **truncated**: an unclean leader election made a replica that lacked the last records
//!   the leader; the log now ends below the auditor's position and grows again from there
//!   with other records. Offsets below the new log end still name the records decided
//!   before; the ones from it on name new records. Resuming at the log START would decide
//!   the old records again, and under `key_columns` each would ask its key for a second row
//!   (its first confirmation still holds the one there): every record read again missing.
//! - **recreated**: the topic was deleted and created with the same name; every offset of
//!   the new log names a new record. Known for sure only from the topic's id (Kafka gives
//!   each incarnation its own, see `kafka::topic_id`).
//!
//! The id is compared at every assignment (`starts.rs`) and on an out-of-range fetch
//! (`Audit::out_of_range`); the log end only on an out-of-range fetch.
//!
//! Where the id cannot tell (unknown before or now: a broker that gives none, a lookup that
//! failed, a store from before ids were kept), a position beyond the log end is taken as a
//! truncation: resuming at the log end skips the records of a recreated log below it (a
//! loss there is missed), resuming at its start would decide a truncated log's records twice
//! (losses invented). A recreated topic whose new log already reached the old position is not
//! seen at all without ids: it reads as the same log.

pub use crate::status::DivergenceNote;
use crate::types::Offset;

/// How a partition's log diverged from the one the auditor's position was taken on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Divergence {
    /// The topic's id changed: a new topic under the old name. Resume at its log start.
    Recreated {
        /// The new log's start.
        resume: Offset,
    },
    /// The log ends below the auditor's position. Resume at the divergence point: the log
    /// end, or the settled offset when that is lower (records read but not decided yet
    /// below the log end are still there, and read again).
    Truncated {
        /// Where reading resumes.
        resume: Offset,
    },
}

impl Divergence {
    /// Where reading resumes.
    pub(crate) fn resume(&self) -> Offset {
        match self {
            Divergence::Recreated { resume } | Divergence::Truncated { resume } => *resume,
        }
    }

    /// `recreated` or `truncated` (metric label, status, log).
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Divergence::Recreated { .. } => "recreated",
            Divergence::Truncated { .. } => "truncated",
        }
    }
}

/// Whether the log `(start, end)` still holds a partition read to `position` (the next
/// offset the auditor reads) and settled to `settled` (`settled <= position`), the topic's
/// id being `known` when that position was taken and `now` today (`None`: unknown).
pub(crate) fn diverged(
    position: Offset,
    settled: Offset,
    (start, end): (Offset, Offset),
    known: Option<&str>,
    now: Option<&str>,
) -> Option<Divergence> {
    // A logical position (not anchored yet) was never on any log.
    if position < 0 {
        return None;
    }
    if let (Some(k), Some(n)) = (known, now)
        && k != n
    {
        return Some(Divergence::Recreated { resume: start });
    }
    (position > end).then(|| Divergence::Truncated {
        resume: settled.min(end).max(start),
    })
}

impl DivergenceNote {
    /// The note for `d`, seen at `detected_at`, the position being `from` and the log
    /// `(start, end)`.
    pub(crate) fn new(
        d: &Divergence,
        from: Offset,
        (start, end): (Offset, Offset),
        detected_at: String,
    ) -> Self {
        let resumed_at = d.resume();
        let reason = match d {
            Divergence::Recreated { .. } => format!(
                "the topic was deleted and created again (its id changed): its new log is read \
                 from its start ({resumed_at}); the old topic's records (offsets below {from}) \
                 are gone: neither lost nor confirmed again"
            ),
            Divergence::Truncated { .. } => format!(
                "the log ends at {end}, below the auditor's position {from} (truncated by an \
                 unclean leader election, or recreated where the broker gives no topic id): \
                 reading resumed at {resumed_at}; the records that were at offsets {end}..{} are \
                 gone: neither lost nor confirmed again",
                from - 1
            ),
        };
        DivergenceNote {
            kind: d.kind(),
            from,
            resumed_at,
            log_start: start,
            log_end: end,
            detected_at,
            reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_inside_the_log_has_not_diverged() {
        assert_eq!(diverged(10, 10, (0, 10), None, None), None);
        assert_eq!(diverged(5, 3, (0, 10), Some("a"), Some("a")), None);
        // Retention moving the log start past the position is not a divergence (the
        // deleted range is `deleted_unread`, handled apart).
        assert_eq!(diverged(5, 5, (8, 20), Some("a"), Some("a")), None);
    }

    #[test]
    fn a_position_beyond_the_log_end_resumes_at_the_log_end() {
        assert_eq!(
            diverged(20, 20, (0, 15), None, None),
            Some(Divergence::Truncated { resume: 15 })
        );
        // The same id: truncated, whatever the log start.
        assert_eq!(
            diverged(20, 20, (3, 15), Some("a"), Some("a")),
            Some(Divergence::Truncated { resume: 15 })
        );
    }

    #[test]
    fn undecided_records_below_the_log_end_are_read_again() {
        assert_eq!(
            diverged(20, 12, (0, 15), None, None),
            Some(Divergence::Truncated { resume: 12 })
        );
        // Never below the log start.
        assert_eq!(
            diverged(20, 2, (5, 15), None, None),
            Some(Divergence::Truncated { resume: 5 })
        );
    }

    #[test]
    fn a_changed_topic_id_resumes_at_the_new_log_start_wherever_its_end_is() {
        assert_eq!(
            diverged(20, 20, (0, 15), Some("a"), Some("b")),
            Some(Divergence::Recreated { resume: 0 })
        );
        // The new log already reached the old position: only the id tells.
        assert_eq!(
            diverged(20, 20, (0, 50), Some("a"), Some("b")),
            Some(Divergence::Recreated { resume: 0 })
        );
    }

    #[test]
    fn an_unknown_id_never_reads_as_a_change() {
        for (known, now) in [(None, Some("b")), (Some("a"), None), (None, None)] {
            assert_eq!(diverged(20, 20, (0, 50), known, now), None);
            assert_eq!(
                diverged(20, 20, (0, 15), known, now),
                Some(Divergence::Truncated { resume: 15 })
            );
        }
    }

    #[test]
    fn an_unanchored_position_never_diverges() {
        assert_eq!(diverged(-1, -1, (0, 15), Some("a"), Some("b")), None);
    }

    #[test]
    fn the_note_names_the_gone_offsets() {
        let d = Divergence::Truncated { resume: 15 };
        let n = DivergenceNote::new(&d, 20, (0, 15), "t".into());
        assert_eq!((n.kind, n.from, n.resumed_at), ("truncated", 20, 15));
        assert!(n.reason.contains("15..19"), "{}", n.reason);
    }
}
