//! The pipeline's Stream Loads that left rows out, as the polls saw them, placed on the
//! auditor's clock, and what they tell of a `dropped_in_flight` gap. Pure: no I/O.
//!
//! Doris writes a load's `FinishTime` on the BE's wall clock in its time zone, without the
//! zone. Each poll measures the FE's zone and its clock against the auditor's in the same
//! answer (`SELECT UNIX_TIMESTAMP(), NOW()`: [`FeClock`]); the BE is taken to share the
//! FE's zone and clock (one cluster, one NTP: documented in OPERATOR.md).

use super::record::LoadRecord;
use crate::evidence::connect::history::rfc3339;
use crate::logging::{printable, redact};
use chrono::NaiveDateTime;
use std::collections::VecDeque;

/// Most loads kept: an incident that filters rows in every checkpoint of every subtask
/// keeps the newest (a gap's words may wait minutes for the FE: its window's loads must
/// still be here then; review of 497b384, M3).
pub const MAX_LOADS: usize = 4_096;
/// Loads that finished longer ago than this before a poll are forgotten: no gap's words
/// wait that long (30 s and `stream_load_record_delay`, at most 1 h).
const MAX_AGE_MS: i64 = 2 * 3_600_000;
/// Most loads a gap's words name (the rest are counted).
const NAMED: usize = 3;
/// Characters of Doris's message and error URL shown.
const TEXT_CHARS: usize = 200;
/// What a load's time placed on the auditor's clock may be off by (the FE's clock is
/// measured in whole seconds), each side of a window.
pub const SLACK_MS: i64 = 1_000;

/// The FE's time zone and clock, as one poll measured them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeClock {
    /// Local time minus UTC (whole quarter hours, as every zone is).
    pub zone_offset_ms: i64,
    /// The FE's clock minus the auditor's (ms; measured to about a second).
    pub skew_ms: i64,
}

impl FeClock {
    /// From `UNIX_TIMESTAMP()` (seconds) and `NOW()` of one answer, asked at `sent_ms` and
    /// answered at `received_ms` on the auditor's clock; `None` when the answer is
    /// unusable.
    pub fn measure(
        unix_s: i64,
        now: NaiveDateTime,
        sent_ms: i64,
        received_ms: i64,
    ) -> Option<Self> {
        const QUARTER_HOUR_S: i64 = 900;
        let local_s = now.and_utc().timestamp();
        let offset_s = local_s.checked_sub(unix_s)?;
        // Both read in the same statement, a second apart at most: round to the zone.
        let zone_s = (offset_s as f64 / QUARTER_HOUR_S as f64).round() as i64 * QUARTER_HOUR_S;
        if zone_s.abs() > 15 * 3_600 {
            return None;
        }
        // The middle of the FE's second against the middle of the round trip.
        let mid_ms = sent_ms + (received_ms - sent_ms) / 2;
        let skew_ms = unix_s.checked_mul(1_000)?.checked_add(500)? - mid_ms;
        Some(Self {
            zone_offset_ms: zone_s * 1_000,
            skew_ms,
        })
    }

    /// `t` (the BE's local wall time) on the auditor's clock.
    pub fn auditor_ms(&self, t: NaiveDateTime) -> i64 {
        t.and_utc().timestamp_millis() - self.zone_offset_ms - self.skew_ms
    }
}

/// A load that left rows out, placed on the auditor's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedLoad {
    /// What the FE listed.
    pub record: LoadRecord,
    /// When it finished, on the auditor's clock.
    pub finished_ms: i64,
}

impl DroppedLoad {
    /// The load in words: "Doris Stream Load L (checkpoint 12, subtask 0) filtered 3 of
    /// 1000 rows at T (message; error log: URL)".
    pub fn phrase(&self) -> String {
        let r = &self.record;
        let label = printable(&r.label, 160);
        let of = r
            .checkpoint
            .map(|(subtask, chk)| format!(" (checkpoint {chk}, subtask {subtask})"))
            .unwrap_or_default();
        let mut what = Vec::new();
        if r.filtered_rows > 0 {
            what.push(format!(
                "filtered {} of {} rows (could not convert them; max_filter_ratio let it succeed without them)",
                r.filtered_rows, r.total_rows
            ));
        }
        if r.unselected_rows > 0 {
            what.push(format!(
                "left {} of {} rows out by its WHERE",
                r.unselected_rows, r.total_rows
            ));
        }
        let mut detail = Vec::new();
        let message = printable(&redact(&r.message), TEXT_CHARS);
        if !message.is_empty() && message != "OK" {
            detail.push(message);
        }
        if let Some(url) = &r.error_url {
            detail.push(format!(
                "error log: {}",
                printable(&redact(url), TEXT_CHARS)
            ));
        }
        let detail = if detail.is_empty() {
            String::new()
        } else {
            format!(" ({})", detail.join("; "))
        };
        format!(
            "Doris Stream Load {label}{of} {} at {}{detail}",
            what.join(" and "),
            rfc3339(self.finished_ms)
        )
    }
}

/// What the polls learnt of the pipeline's loads.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Loads of the pipeline that left rows out, by finish time, at most [`MAX_LOADS`].
    loads: VecDeque<DroppedLoad>,
    /// The FE's zone and clock as the last poll measured them.
    clock: Option<FeClock>,
    /// Loads of the pipeline the last poll listed (all, not only those that left rows out).
    listed: usize,
}

impl History {
    /// Takes one poll's answer at `now_ms`: `records` (the FE's rows already read), the
    /// pipeline's being those of `prefix` into `table` (`table` or `db.table`, the FE URL's
    /// database `db`), on the FE's `clock`. Returns how many loads that left rows out are
    /// new. Only loads that succeeded count: one that failed (too many filtered rows) fails
    /// its checkpoint, and the pipeline reads its records again (review of 497b384, M7).
    pub fn observe(
        &mut self,
        records: Vec<LoadRecord>,
        clock: FeClock,
        (prefix, db, table): (&str, &str, &str),
        now_ms: i64,
    ) -> usize {
        self.clock = Some(clock);
        let ours: Vec<LoadRecord> = records
            .into_iter()
            .filter(|r| r.is_of(prefix, db, table))
            .collect();
        self.listed = ours.len();
        let mut new = 0;
        for record in ours
            .into_iter()
            .filter(|r| r.dropped_rows() && r.succeeded())
        {
            // A label is used again only after its load was CANCELLED: the finish time
            // tells two loads of one label apart.
            let known = self
                .loads
                .iter()
                .any(|l| l.record.label == record.label && l.record.finished == record.finished);
            if known {
                continue;
            }
            new += 1;
            self.loads.push_back(DroppedLoad {
                finished_ms: clock.auditor_ms(record.finished),
                record,
            });
        }
        if new > 0 {
            self.loads.make_contiguous().sort_by_key(|l| l.finished_ms);
        }
        let too_old = now_ms.saturating_sub(MAX_AGE_MS);
        while self.loads.len() > MAX_LOADS
            || self.loads.front().is_some_and(|l| l.finished_ms < too_old)
        {
            self.loads.pop_front();
        }
        new
    }

    /// The loads kept, oldest first.
    pub fn loads(&self) -> impl DoubleEndedIterator<Item = &DroppedLoad> {
        self.loads.iter()
    }

    /// The FE's clock as last measured.
    pub fn clock(&self) -> Option<FeClock> {
        self.clock
    }

    /// How many of the pipeline's loads the last poll listed.
    pub fn listed(&self) -> usize {
        self.listed
    }

    /// What the loads tell of a `dropped_in_flight` gap: every load of the pipeline that
    /// left rows out and finished in `(after_ms, by_ms]` (its step's window, on the
    /// auditor's clock: [`window`]). Doris counts the rows, it does not say which records
    /// they were.
    pub fn explain(&self, (after_ms, by_ms): (i64, i64)) -> Option<String> {
        let inside: Vec<&DroppedLoad> = self
            .loads
            .iter()
            .filter(|l| l.finished_ms > after_ms && l.finished_ms <= by_ms)
            .collect();
        let (first, rest) = inside.split_at(inside.len().min(NAMED));
        if first.is_empty() {
            return None;
        }
        let mut words = first
            .iter()
            .map(|l| l.phrase())
            .collect::<Vec<_>>()
            .join("; ");
        if !rest.is_empty() {
            let left_out: u64 = rest
                .iter()
                .map(|l| l.record.filtered_rows + l.record.unselected_rows)
                .sum();
            words.push_str(&format!(
                "; {} more load{} of the pipeline left {left_out} rows out",
                rest.len(),
                if rest.len() == 1 { "" } else { "s" }
            ));
        }
        Some(words)
    }
}

/// The window of a commit step, on the auditor's clock: the load that carried the records
/// the step passed finished before the pipeline committed past them (flink-doris-connector
/// pre-commits a checkpoint's load before the checkpoint completes; the Kafka source
/// commits after it completes), so by `at_ms`, when the step was seen; and after the
/// position it left was committed (the next checkpoint's load pre-commits after the last
/// one completed), which was after `since_ms`, the poll before the one that first saw it
/// (or, when that position was the first seen, about `from_seen_ms`). A second wider each
/// side ([`SLACK_MS`]). The previous checkpoint's load may end in that window too: Doris
/// does not say which records a load dropped, so both are named.
pub fn window(since_ms: Option<i64>, from_seen_ms: Option<i64>, at_ms: i64) -> (i64, i64) {
    let after = since_ms.or(from_seen_ms).unwrap_or(at_ms);
    (
        after.saturating_sub(SLACK_MS),
        at_ms.saturating_add(SLACK_MS),
    )
}

#[cfg(test)]
mod tests {
    use super::super::record::local_time;
    use super::super::record::tests::row;
    use super::*;

    const PIPELINE: (&str, &str, &str) = ("doris_sink", "example_db", "dns_logs");
    /// The auditor's clock at the polls: 2026-12-07T02:20:00Z.
    const NOW: i64 = 1_796_610_000_000;

    fn load(label: &str, finish: &str, filtered: u64) -> LoadRecord {
        LoadRecord::from_columns(&row(label, finish, filtered)).expect("row")
    }

    /// An FE in Asia/Shanghai (UTC+8) whose clock is 3 s ahead of the auditor's, measured
    /// when the auditor's clock read 2026-12-07T02:20:00Z.
    fn shanghai() -> FeClock {
        let auditor = 1_796_610_000_000; // 2026-12-07T02:20:00Z
        let fe_unix = auditor / 1_000 + 3;
        let now = local_time("2026-12-07 10:20:03").expect("time");
        FeClock::measure(fe_unix, now, auditor - 20, auditor + 20).expect("clock")
    }

    #[test]
    fn the_fe_clock_places_a_local_time_on_the_auditors_clock() {
        let c = shanghai();
        assert_eq!(c.zone_offset_ms, 8 * 3_600_000);
        assert_eq!(c.skew_ms, 3_500);
        // 10:14:03 in Shanghai on an FE 3 s ahead: 02:14:00 on the auditor's clock, to
        // within the half second the FE's whole seconds leave.
        let t = c.auditor_ms(local_time("2026-12-07 10:14:03").expect("t"));
        assert_eq!(rfc3339(t), "2026-12-07T02:13:59Z");
        assert!((t - 1_796_609_640_000).abs() <= 1_000, "{t}");
        // A second read a little off still rounds to the zone.
        let now = local_time("2026-12-07 10:20:04").expect("time");
        assert_eq!(
            FeClock::measure(1_796_610_003, now, 0, 0).map(|c| c.zone_offset_ms),
            Some(8 * 3_600_000)
        );
        // Nonsense is refused.
        let far = local_time("2026-12-09 10:20:04").expect("time");
        assert_eq!(FeClock::measure(1_796_610_003, far, 0, 0), None);
    }

    #[test]
    fn a_load_that_filtered_rows_in_the_window_explains_the_gap() {
        let c = shanghai();
        let mut h = History::default();
        let new = h.observe(
            vec![
                load(
                    "doris_sink_example_db_dns_logs_0_11",
                    "2026-12-07 10:13:53",
                    0,
                ),
                load(
                    "doris_sink_example_db_dns_logs_0_12",
                    "2026-12-07 10:14:03",
                    3,
                ),
                // Another pipeline's loads into the same table.
                load("other_example_db_dns_logs_0_12", "2026-12-07 10:14:03", 9),
            ],
            c,
            PIPELINE,
            NOW,
        );
        assert_eq!((new, h.listed()), (1, 2));
        let finished = h.loads().next().expect("kept").finished_ms;
        // A step seen 2 s after the load finished, its left position committed 10 s
        // before.
        let w = h
            .explain(window(Some(finished - 10_000), None, finished + 2_000))
            .expect("explained");
        assert!(
            w.starts_with("Doris Stream Load doris_sink_example_db_dns_logs_0_12 (checkpoint 12, subtask 0) filtered 3 of 1000 rows"),
            "{w}"
        );
        assert!(
            w.contains("error log: http://be1:8040/api/_load_error_log?file="),
            "{w}"
        );
        // The same answer again adds nothing.
        assert_eq!(
            h.observe(
                vec![load(
                    "doris_sink_example_db_dns_logs_0_12",
                    "2026-12-07 10:14:03",
                    3
                )],
                c,
                PIPELINE,
                NOW
            ),
            0
        );
        // A step committed before the load finished, or long after it: not this load.
        assert_eq!(
            h.explain(window(Some(finished - 60_000), None, finished - 5_000)),
            None
        );
        assert_eq!(
            h.explain(window(Some(finished + 30_000), None, finished + 40_000)),
            None
        );
    }

    #[test]
    fn the_window_edges_allow_the_fes_whole_seconds() {
        let c = shanghai();
        let mut h = History::default();
        h.observe(
            vec![load("doris_sink_0_7", "2026-12-07 10:14:03", 1)],
            c,
            PIPELINE,
            NOW,
        );
        let f = h.loads().next().expect("kept").finished_ms;
        // Finished up to a second before the poll before the left position was seen: in
        // (the FE's clock is measured in whole seconds); earlier, the load before it.
        assert!(h.explain(window(Some(f + 900), None, f + 10_000)).is_some());
        assert!(
            h.explain(window(Some(f + 1_100), None, f + 10_000))
                .is_none()
        );
        // Without that poll (the left position was the first seen): from when it was.
        assert!(h.explain(window(None, Some(f + 900), f + 10_000)).is_some());
        assert!(
            h.explain(window(None, Some(f + 1_100), f + 10_000))
                .is_none()
        );
        // Seen up to a second before it finished (the FE's second): in.
        assert!(h.explain(window(Some(f - 10_000), None, f - 900)).is_some());
        assert!(
            h.explain(window(Some(f - 10_000), None, f - 1_100))
                .is_none()
        );
    }

    #[test]
    fn loads_kept_and_named_are_bounded() {
        let c = shanghai();
        let mut h = History::default();
        // One a second from 09:00:00 local (01:00:00Z), 5,000 in all.
        let start = local_time("2026-12-07 09:00:00").expect("t");
        let many: Vec<LoadRecord> = (0..5_000)
            .map(|i| {
                let t = start + chrono::Duration::seconds(i);
                load(
                    &format!("doris_sink_{}_{i}", i % 4),
                    &t.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
                    2,
                )
            })
            .collect();
        assert_eq!(h.observe(many, c, PIPELINE, NOW), 5_000);
        assert_eq!(h.loads().count(), MAX_LOADS);
        // The newest kept.
        assert_eq!(
            h.loads().last().map(|l| l.record.label.as_str()),
            Some("doris_sink_3_4999")
        );
        let first = h.loads().next().expect("kept").finished_ms;
        let last = h.loads().last().expect("kept").finished_ms;
        let w = h
            .explain(window(Some(first), None, last))
            .expect("explained");
        assert_eq!(w.matches("Doris Stream Load").count(), 3, "{w}");
        assert!(
            w.ends_with("; 4093 more loads of the pipeline left 8186 rows out"),
            "{w}"
        );
        // Two hours after the newest finished, all are forgotten.
        h.observe(Vec::new(), c, PIPELINE, last + MAX_AGE_MS + 1);
        assert_eq!(h.loads().count(), 0);
    }

    /// A load that failed (too many filtered rows) fails its checkpoint: the pipeline reads
    /// its records again, so it explains nothing (review of 497b384, M7).
    #[test]
    fn a_failed_load_is_not_kept() {
        let mut r = row("doris_sink_0_3", "2026-12-07 10:14:03.480", 5);
        r.insert("Status".into(), Some("Fail".into()));
        r.insert("Message".into(), Some("too many filtered rows".into()));
        let mut h = History::default();
        let failed = LoadRecord::from_columns(&r).expect("row");
        assert_eq!(h.observe(vec![failed], shanghai(), PIPELINE, NOW), 0);
        r.insert("Status".into(), Some("Publish Timeout".into()));
        let late = LoadRecord::from_columns(&r).expect("row");
        assert_eq!(h.observe(vec![late], shanghai(), PIPELINE, NOW), 1);
    }

    #[test]
    fn hostile_text_is_cleaned() {
        let mut r = row("doris_sink_0_1", "2026-12-07 10:14:03", 1);
        r.insert(
            "Message".into(),
            Some("bad\u{1b}[31m row; password=hunter2\nforged line".into()),
        );
        r.insert(
            "Url".into(),
            Some("http://flink:s3cret@be1:8040/api/_load_error_log?file=x".into()),
        );
        let mut h = History::default();
        h.observe(
            vec![LoadRecord::from_columns(&r).expect("row")],
            shanghai(),
            PIPELINE,
            NOW,
        );
        let f = h.loads().next().expect("kept").finished_ms;
        let w = h
            .explain(window(Some(f - 5_000), None, f + 1_000))
            .expect("words");
        assert!(!w.contains('\u{1b}') && !w.contains('\n'), "{w}");
        assert!(!w.contains("hunter2") && !w.contains("s3cret"), "{w}");
    }
}
