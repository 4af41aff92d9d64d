//! The clock of `check`'s time-only due rule (SPEC "Due rule", the `check` row): when a record
//! was appended at the latest, as far as `check` can prove it.
//!
//! `run` starts `grace` when it reads a record, which is never before the record was
//! appended. `check` reads the past, so it needs another proof of the append: the broker's
//! LogAppendTime where the topic has one, or else the log end `check` observed — every record
//! below it was appended by then. A producer's CreateTime proves nothing (a backfill, an
//! event-time producer, a skewed clock): counting from it would report records `run` would
//! still wait for.

use rdkafka::Timestamp;

/// When a record was appended at the latest (unix ms), and what proves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    /// The broker stamped it (a LogAppendTime topic): its due time is known exactly.
    Stamped(i64),
    /// Below the log end observed at this time (a CreateTime topic, or no timestamp): it is
    /// due `grace` after that observation, whatever its timestamp says.
    BeforeObserved(i64),
}

impl Appended {
    /// The record with timestamp `ts`, read below a log end observed at `observed_ms`.
    /// A LogAppendTime later than the observation (the broker's clock ahead of ours) is
    /// taken as the observation: the record was there when the log end was read.
    pub fn of(ts: Timestamp, observed_ms: i64) -> Appended {
        match ts {
            Timestamp::LogAppendTime(t) if t >= 0 => Appended::Stamped(t.min(observed_ms)),
            _ => Appended::BeforeObserved(observed_ms),
        }
    }

    /// The time the due rule counts `grace` from: what the ledger takes as "seen at".
    pub fn ms(self) -> i64 {
        match self {
            Appended::Stamped(t) | Appended::BeforeObserved(t) => t,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_create_time_counts_from_the_observed_log_end() {
        // A backfill: CreateTime ten minutes before the observation.
        let observed = 1_000_000;
        assert_eq!(
            Appended::of(Timestamp::CreateTime(observed - 600_000), observed),
            Appended::BeforeObserved(observed)
        );
        // A CreateTime in the future proves nothing either.
        assert_eq!(
            Appended::of(Timestamp::CreateTime(observed + 600_000), observed).ms(),
            observed
        );
        assert_eq!(
            Appended::of(Timestamp::NotAvailable, observed),
            Appended::BeforeObserved(observed)
        );
    }

    #[test]
    fn a_log_append_time_is_the_append_never_after_the_observation() {
        let observed = 1_000_000;
        assert_eq!(
            Appended::of(Timestamp::LogAppendTime(observed - 5_000), observed),
            Appended::Stamped(observed - 5_000)
        );
        assert_eq!(
            Appended::of(Timestamp::LogAppendTime(observed + 5_000), observed),
            Appended::Stamped(observed)
        );
    }
}
