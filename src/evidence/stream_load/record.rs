//! One row of `SHOW STREAM LOAD` as Doris documents it (apache/doris `ShowStreamLoadStmt`:
//! `Label, Db, Table, ClientIp, Status, Message, Url, TotalRows, LoadedRows, FilteredRows,
//! UnselectedRows, LoadBytes, StartTime, FinishTime, User, Comment`, every value as text),
//! and the label scheme of flink-doris-connector's two-phase commit,
//! `<prefix>_<db>_<table>_<subtask>_<checkpoint>` (its `LabelGenerator.generateTableLabel`;
//! a `.` in the table identifier becomes `_`). Pure: no I/O.

use crate::doris_fe::Columns;
use chrono::NaiveDateTime;

/// A Stream Load the FE listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadRecord {
    /// Its label.
    pub label: String,
    /// The database and table it loaded into.
    pub db: String,
    pub table: String,
    /// `Success` or `Fail` (Doris's words).
    pub status: String,
    /// Doris's message (`OK`, or why it failed or filtered rows).
    pub message: String,
    /// The error log of the rows it filtered (`Url`; `N/A` or empty: none).
    pub error_url: Option<String>,
    /// Rows it read, loaded, filtered (could not convert: `max_filter_ratio` let the load
    /// succeed without them) and left out by its `WHERE`.
    pub total_rows: u64,
    pub loaded_rows: u64,
    pub filtered_rows: u64,
    pub unselected_rows: u64,
    /// When it finished, on the BE's wall clock in its time zone (Doris writes no zone).
    pub finished: NaiveDateTime,
    /// The Flink subtask and checkpoint its label names, when it has the 2PC scheme.
    pub checkpoint: Option<(u32, u64)>,
}

/// Why a row could not be read as a Stream Load (the row is skipped; the others are read).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// A column Doris documents is missing.
    #[error("SHOW STREAM LOAD answered without the {0} column Doris documents")]
    Missing(&'static str),
    /// A value is not what Doris documents.
    #[error("SHOW STREAM LOAD answered {column} = {value:?}, not {what}")]
    Invalid {
        /// The column.
        column: &'static str,
        /// Its value, shortened.
        value: String,
        /// What it should be.
        what: &'static str,
    },
}

impl LoadRecord {
    /// Reads one answer row (columns by name).
    pub fn from_columns(cols: &Columns) -> Result<Self, RecordError> {
        let text = |name: &'static str| -> Result<String, RecordError> {
            match cols.get(name) {
                None => Err(RecordError::Missing(name)),
                Some(v) => Ok(v.clone().unwrap_or_default()),
            }
        };
        let invalid =
            |column: &'static str, value: &str, what: &'static str| RecordError::Invalid {
                column,
                value: crate::logging::printable(value, 40),
                what,
            };
        let rows = |name: &'static str| -> Result<u64, RecordError> {
            let v = text(name)?;
            v.trim()
                .parse()
                .map_err(|_| invalid(name, &v, "a row count"))
        };
        let finish = text("FinishTime")?;
        let finished = local_time(&finish)
            .ok_or_else(|| invalid("FinishTime", &finish, "a time as yyyy-MM-dd HH:mm:ss"))?;
        let label = text("Label")?;
        let url = text("Url")?;
        Ok(Self {
            checkpoint: checkpoint_of(&label),
            label,
            db: text("Db")?,
            table: text("Table")?,
            status: text("Status")?,
            message: text("Message")?,
            error_url: (!url.trim().is_empty() && url.trim() != "N/A").then_some(url),
            total_rows: rows("TotalRows")?,
            loaded_rows: rows("LoadedRows")?,
            filtered_rows: rows("FilteredRows")?,
            unselected_rows: rows("UnselectedRows")?,
            finished,
        })
    }

    /// It loaded into `table` (`table` or `db.table`, as `sink.table` names it; the FE's
    /// database is the URL's) with a label of the pipeline's `prefix` (`<prefix>_...`: a
    /// pipeline whose prefix is this one's followed by `_` and more, loading the same
    /// table, is not told apart).
    pub fn is_of(&self, prefix: &str, db: &str, table: &str) -> bool {
        let (want_db, want_table) = table.split_once('.').unwrap_or((db, table));
        self.label
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('_'))
            && self.db.eq_ignore_ascii_case(want_db)
            && self.table.eq_ignore_ascii_case(want_table)
    }

    /// It succeeded (`Success`, or `Publish Timeout`: committed, its data visible a
    /// little later), so the rows it left out stay out.
    pub fn succeeded(&self) -> bool {
        let s = self.status.trim();
        s.eq_ignore_ascii_case("Success") || s.eq_ignore_ascii_case("Publish Timeout")
    }

    /// It left rows out: filtered (data quality) or unselected (its `WHERE`).
    pub fn dropped_rows(&self) -> bool {
        self.filtered_rows > 0 || self.unselected_rows > 0
    }
}

/// A time as Doris prints it, `2026-12-07 10:14:03` (a fraction of a second accepted).
pub fn local_time(s: &str) -> Option<NaiveDateTime> {
    let s = s.trim();
    NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f").ok()
}

/// The subtask and checkpoint a 2PC label ends with (`..._<subtask>_<checkpoint>`).
fn checkpoint_of(label: &str) -> Option<(u32, u64)> {
    let mut parts = label.rsplitn(3, '_');
    let checkpoint = parts.next()?.parse().ok()?;
    let subtask = parts.next()?.parse().ok()?;
    parts.next()?;
    Some((subtask, checkpoint))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A row as a Doris FE answers it for a load of flink-doris-connector that filtered 3
    /// of 1,000 rows.
    pub(crate) fn row(label: &str, finish: &str, filtered: u64) -> Columns {
        [
            ("Label", Some(label)),
            ("Db", Some("example_db")),
            ("Table", Some("dns_logs")),
            ("ClientIp", Some("10.0.0.7")),
            ("Status", Some("Success")),
            ("Message", Some("OK")),
            (
                "Url",
                Some(if filtered > 0 {
                    "http://be1:8040/api/_load_error_log?file=__shard_3/error_log_insert_stmt_a1"
                } else {
                    "N/A"
                }),
            ),
            ("TotalRows", Some("1000")),
            ("LoadedRows", Some(&*(1000 - filtered).to_string())),
            ("FilteredRows", Some(&*filtered.to_string())),
            ("UnselectedRows", Some("0")),
            ("LoadBytes", Some("201000")),
            ("StartTime", Some("2026-12-07 10:13:58.120")),
            ("FinishTime", Some(finish)),
            ("User", Some("flink")),
            ("Comment", Some("")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.map(str::to_owned)))
        .collect()
    }

    #[test]
    fn a_documented_row_reads_with_its_checkpoint() {
        let r = LoadRecord::from_columns(&row(
            "doris_sink_example_db_dns_logs_0_12",
            "2026-12-07 10:14:03.480",
            3,
        ))
        .expect("reads");
        assert_eq!(r.checkpoint, Some((0, 12)));
        assert_eq!(
            (r.total_rows, r.loaded_rows, r.filtered_rows),
            (1000, 997, 3)
        );
        assert_eq!(
            r.finished.format("%H:%M:%S%.3f").to_string(),
            "10:14:03.480"
        );
        assert!(r.error_url.is_some());
        assert!(r.dropped_rows());
        assert!(r.is_of("doris_sink", "example_db", "dns_logs"));
        assert!(r.is_of("doris_sink", "other", "example_db.dns_logs"));
        // A prefix the label only contains, a prefix ending mid-word, another table.
        assert!(!r.is_of("sink", "example_db", "dns_logs"));
        assert!(!r.is_of("doris_si", "example_db", "dns_logs"));
        assert!(!r.is_of("doris_sink", "example_db", "other"));
        let clean =
            LoadRecord::from_columns(&row("p_1_2", "2026-12-07 10:14:03", 0)).expect("reads");
        assert_eq!(clean.error_url, None);
        assert!(!clean.dropped_rows());
    }

    #[test]
    fn labels_outside_the_2pc_scheme_have_no_checkpoint() {
        // Without 2PC the connector appends a UUID.
        assert_eq!(
            checkpoint_of("p_db_t_0_12_5b9c1f2e-8a7d-4a6b-9a51-0c2f2f3e1a11"),
            None
        );
        assert_eq!(checkpoint_of("12"), None);
        assert_eq!(checkpoint_of("0_12"), None);
        assert_eq!(checkpoint_of("p_3_12"), Some((3, 12)));
    }

    #[test]
    fn an_odd_row_is_an_error_naming_the_column() {
        let mut r = row("p_0_1", "yesterday", 0);
        assert!(matches!(
            LoadRecord::from_columns(&r),
            Err(RecordError::Invalid {
                column: "FinishTime",
                ..
            })
        ));
        r.insert("FinishTime".into(), Some("2026-12-07 10:14:03".into()));
        r.insert("FilteredRows".into(), Some("-1".into()));
        assert!(matches!(
            LoadRecord::from_columns(&r),
            Err(RecordError::Invalid {
                column: "FilteredRows",
                ..
            })
        ));
        r.remove("Label");
        assert_eq!(
            LoadRecord::from_columns(&r),
            Err(RecordError::Missing("Label"))
        );
    }
}
