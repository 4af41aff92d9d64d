//! Field deserializers: durations, string lists, optional text, the csv delimiter and the
//! sink TLS mode, each forgiving in the ways environment overrides need.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use super::SinkTls;

/// Parses `30s`, `5m`, `1h 30m`, `250ms`, or a bare number of seconds (`30`, `1.5`).
pub(super) fn parse_duration_str(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty duration; write e.g. 30s, 5m, 1h or 250ms".to_owned());
    }
    if t.starts_with('-') {
        return Err(format!("duration `{t}` must not be negative"));
    }
    if let Ok(secs) = t.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    if let Ok(secs) = t.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).map_err(|_| format!("invalid duration `{t}`"));
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("invalid duration `{t}` ({e}); write e.g. 30s, 5m, 1h or 250ms"))
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a duration such as \"30s\", \"5m\", \"1h\" or a number of seconds")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
        parse_duration_str(v).map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
        u64::try_from(v)
            .map(Duration::from_secs)
            .map_err(|_| E::custom(format!("duration `{v}` must not be negative")))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
        Ok(Duration::from_secs(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Duration, E> {
        Duration::try_from_secs_f64(v)
            .map_err(|_| E::custom(format!("duration `{v}` must be a non-negative number")))
    }
}

pub(super) fn de_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    d.deserialize_any(DurationVisitor)
}

/// `sink.tls`: MySQL's spelling (`VERIFY_CA`) is accepted too.
pub(super) fn de_opt_tls<'de, D: Deserializer<'de>>(d: D) -> Result<Option<SinkTls>, D::Error> {
    let Some(s) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    if s.trim().is_empty() {
        return Ok(None);
    }
    s.trim()
        .to_ascii_lowercase()
        .parse()
        .map(Some)
        .map_err(de::Error::custom)
}

/// A duration that may be left out (`None`: the key was not written).
pub(super) fn de_opt_duration<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Duration>, D::Error> {
    de_duration(d).map(Some)
}

/// A list of strings, or one comma-separated string (handy in environment overrides).
pub(super) fn de_string_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct ListVisitor;
    impl<'de> Visitor<'de> for ListVisitor {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of strings or a comma-separated string")
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<String>, E> {
            Ok(v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect())
        }
        fn visit_unit<E: de::Error>(self) -> Result<Vec<String>, E> {
            Ok(Vec::new())
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(item) = seq.next_element::<String>()? {
                out.push(item);
            }
            Ok(out)
        }
    }
    d.deserialize_any(ListVisitor)
}

/// Optional text where an empty (or blank) string means "not set".
pub(super) fn de_opt_string<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.trim().is_empty()))
}

/// An optional URL that may hold credentials; blank is absent, as for [`de_opt_string`] (an
/// empty Helm or environment value must not read as a URL that is set: review 37, F13).
pub(super) fn de_opt_secret_url<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<super::SecretUrl>, D::Error> {
    Ok(Option::<super::SecretUrl>::deserialize(d)?.filter(|u| !u.expose().trim().is_empty()))
}

/// The csv delimiter; the two-character spelling `\t` means a tab.
pub(super) fn de_delimiter<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    Ok(if s == "\\t" { "\t".to_owned() } else { s })
}
