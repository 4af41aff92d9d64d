//! Reading result rows (a wrong type is a typed error naming the column) and classifying
//! driver errors, with passwords kept out of the messages.

use crate::sink::{SinkError, tls};
use mysql_async::prelude::FromValue;
use mysql_async::{Row, Value};

/// Column `i` of `row` as `T`, or a [`SinkError::Rejected`] naming the query (`what`), the
/// column and the value: a value of another type, or a NULL where `T` has none, is an answer
/// the auditor cannot trust (the table's column types are not what the audit assumes).
pub(super) fn column<T: FromValue>(
    row: &Row,
    i: usize,
    what: &str,
    expected: &str,
) -> Result<T, SinkError> {
    let name = || {
        row.columns_ref()
            .get(i)
            .map(|c| format!("`{}`", c.name_str()))
            .unwrap_or_else(|| format!("#{}", i + 1))
    };
    match row.get_opt::<T, usize>(i) {
        Some(Ok(v)) => Ok(v),
        Some(Err(e)) => Err(SinkError::Rejected(format!(
            "{what}: column {} holds {}, not {expected}: check the column's type in the sink \
             table (the query result cannot be trusted)",
            name(),
            shown(&e.0)
        ))),
        None => Err(SinkError::Rejected(format!(
            "{what}: the answer has no column {}",
            name()
        ))),
    }
}

/// A row count: a non-negative integer, never NULL.
pub(super) fn count(row: &Row, i: usize, what: &str) -> Result<u64, SinkError> {
    let n: i64 = column(row, i, what, "a row count")?;
    u64::try_from(n).map_err(|_| SinkError::Rejected(format!("{what}: a negative row count ({n})")))
}

/// A text value as the server sent it (lossy UTF-8; numbers as digits); `None` for NULL.
pub(super) fn text(row: &Row, i: usize, what: &str) -> Result<Option<String>, SinkError> {
    match row.as_ref(i) {
        None => Err(SinkError::Rejected(format!(
            "{what}: the answer has no column #{}",
            i + 1
        ))),
        Some(Value::NULL) => Ok(None),
        Some(Value::Bytes(b)) => Ok(Some(String::from_utf8_lossy(b).into_owned())),
        Some(v) => Ok(Some(v.as_sql(false).trim_matches('\'').to_string())),
    }
}

/// A value for an error message: its SQL form, cut to 60 characters.
fn shown(v: &Value) -> String {
    match v {
        Value::NULL => "NULL".into(),
        v => {
            let s = v.as_sql(false);
            let mut out: String = s.chars().take(60).collect();
            if s.chars().count() > 60 {
                out.push('…');
            }
            out
        }
    }
}

/// Server errors (bad table, syntax, access) are the operator's to fix; the rest is transient.
pub(super) fn classify(e: &mysql_async::Error, tls_enabled: bool) -> SinkError {
    match e {
        mysql_async::Error::Server(s) => {
            let mut m = format!("{} ({}): {}", s.code, s.state, s.message);
            if !tls_enabled && let Some(hint) = tls::plain_text_hint(s.code) {
                m.push_str(hint);
            }
            SinkError::Rejected(m)
        }
        other => SinkError::Unavailable(
            tls::explain(other).unwrap_or_else(|| redact_url_error(&other.to_string())),
        ),
    }
}

/// Error texts of URL parsing and connection can quote the URL; strip anything that looks
/// like `user:password@`.
pub(super) fn redact_url_error(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for word in s.split_inclusive(char::is_whitespace) {
        match (word.find("://"), word.rfind('@')) {
            (Some(a), Some(b)) if b > a => {
                out.push_str(&word[..a + 3]);
                out.push_str("[redacted]");
                out.push_str(&word[b..]);
            }
            _ => out.push_str(word),
        }
    }
    out
}
