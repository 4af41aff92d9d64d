//! The Doris FE's query port as the auditor's readers of its `SHOW` statements use it
//! (Routine Load's position, Stream Load's evidence): one small pool, text protocol only
//! (the FE's prepared statements differ across versions and a `SHOW` needs none), every
//! answer read as text by column name.

use mysql_async::{Opts, OptsBuilder, Pool, PoolConstraints, PoolOpts, Value};
use std::collections::BTreeMap;

/// One row of a `SHOW` answer: each column's value as text (`None` for NULL), by name.
pub type Columns = BTreeMap<String, Option<String>>;

/// A pool of at most one connection to the FE at `url` (connects lazily), or `None` when
/// `url` is not a MySQL URL (the caller names its key; the URL may hold a password).
pub fn pool(url: &str) -> Option<Pool> {
    let opts = Opts::from_url(url).ok()?;
    let b = OptsBuilder::from_opts(opts)
        .prefer_socket(false)
        // Both set: the driver then asks the FE for neither on connect.
        .max_allowed_packet(Some(16 << 20))
        .wait_timeout(Some(28_800))
        .stmt_cache_size(0)
        .pool_opts(
            PoolOpts::default()
                .with_constraints(PoolConstraints::new(0, 1).unwrap_or_default())
                // The FE may not implement COM_RESET_CONNECTION (as for the sink).
                .with_reset_connection(false),
        );
    Some(Pool::new(b))
}

/// One row's columns by name, every value as text (`None` for NULL).
pub fn columns(row: mysql_async::Row) -> Columns {
    let names: Vec<String> = row
        .columns_ref()
        .iter()
        .map(|c| c.name_str().into_owned())
        .collect();
    names
        .into_iter()
        .zip(row.unwrap())
        .map(|(name, v)| (name, text(v)))
        .collect()
}

/// One row's values as text, by position (`None` for NULL).
pub fn texts(row: mysql_async::Row) -> Vec<Option<String>> {
    row.unwrap().into_iter().map(text).collect()
}

fn text(v: Value) -> Option<String> {
    match v {
        Value::NULL => None,
        Value::Bytes(b) => Some(String::from_utf8_lossy(&b).into_owned()),
        Value::Int(i) => Some(i.to_string()),
        Value::UInt(u) => Some(u.to_string()),
        Value::Float(f) => Some(f.to_string()),
        Value::Double(d) => Some(d.to_string()),
        other => Some(other.as_sql(true).trim_matches('\'').to_owned()),
    }
}
