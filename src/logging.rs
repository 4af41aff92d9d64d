//! The log subscriber: plain text by default, one JSON object per line with
//! `GAP_AUDITOR_LOG_FORMAT=json`, filtered by `GAP_AUDITOR_LOG` (an `EnvFilter` directive).
//!
//! JSON lines are flat: an event's fields (`audit`, `topic`, `error`, …) are top-level keys
//! beside `timestamp`, `level`, `target` and `message`, so a log collector indexes them
//! without a nested `fields` object. The current span, when there is one, is the `span`
//! object (its fields and `name`); the list of enclosing spans is left out, since the
//! auditor's events carry their context as their own fields.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// Text from outside (a server's error body, a path or state a REST API reported) as logs,
/// terminals and the API may show it: control characters dropped (no escape sequence or
/// forged log line reaches an operator), and the invisible ones that reorder or hide text
/// (bidirectional overrides and isolates, zero-width characters, line and paragraph
/// separators), at most `max_chars` characters.
pub fn printable(s: &str, max_chars: usize) -> String {
    s.chars()
        .filter(|&c| !c.is_control() && !invisible(c))
        .take(max_chars)
        .collect()
}

/// Unicode format characters and separators that change how text around them shows.
fn invisible(c: char) -> bool {
    matches!(c,
        '\u{061C}' | '\u{180E}' | '\u{200B}'..='\u{200F}' | '\u{2028}'..='\u{202E}'
        | '\u{2060}'..='\u{206F}' | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}')
}

/// Installs the global subscriber on stderr. `demo` tells its story on stdout: its log
/// keeps to what needs attention (the gap's alert) unless `GAP_AUDITOR_LOG` says otherwise.
pub fn init(demo: bool) {
    let default = if demo { "warn" } else { "info,rdkafka=warn" };
    let filter =
        EnvFilter::try_from_env("GAP_AUDITOR_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let json = std::env::var("GAP_AUDITOR_LOG_FORMAT").is_ok_and(|v| v == "json");
    if json {
        tracing::subscriber::set_global_default(json_subscriber(filter, std::io::stderr))
            .unwrap_or_else(|e| eprintln!("cannot install the log subscriber: {e}"));
    } else {
        // Colours only for a terminal: logs redirected to a file or a collector stay plain.
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(ansi)
            .with_writer(std::io::stderr)
            .init();
    }
}

/// The JSON subscriber writing to `writer` (see the module docs for the line format).
pub fn json_subscriber<W>(filter: EnvFilter, writer: W) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .json()
        .flatten_event(true)
        .with_current_span(true)
        .with_span_list(false)
        .finish()
}

/// The most characters of a text [`redact`] reads (its callers show at most a few hundred).
const REDACT_CHARS: usize = 4_096;

/// What marks a secret's value: the text replacing it.
const REDACTED: &str = "[redacted]";

/// Names whose value is a secret (`password`, `db.password`, `api_key`, `access_token`, ...).
const SECRET_NAMES: [&str; 9] = [
    "password",
    "passwd",
    "pwd",
    "secret",
    "token",
    "key",
    "signature",
    "sig",
    "authorization",
];

/// Whether `name` (a property, a header, a JSON key; quotes around it ignored) names a
/// secret.
fn is_secret_name(name: &str) -> bool {
    let name = name.trim_matches(['"', '\'']).to_ascii_lowercase();
    !name.is_empty() && SECRET_NAMES.iter().any(|s| name.ends_with(s))
}

/// Text from outside shown to more people than its source shows it to (a Kafka Connect
/// trace line, a Flink checkpoint path or error message) with what may be a credential
/// taken out (review 27c, F-3; review 28, R28-10): sink exceptions quote the URL or
/// properties they failed on (`jdbc:mysql://u:pw@db/x?password=pw2`,
/// `http://elastic:changeme@es:9200`, `{"api_key":"K"}`, `password: hunter2`). Out go a
/// URL's user info and the value after `=` or `:` of any name ending in `password`,
/// `passwd`, `pwd`, `secret`, `token` or `key`. Redacting more than needed is safe; the
/// caller cleans and caps the result ([`printable`]).
pub fn redact(line: &str) -> String {
    // Every caller shows a few hundred characters; redacting a whole 4 MiB answer would
    // cost a copy per secret found (quadratic). A value cut here is cut from the output.
    let line = match line.char_indices().nth(REDACT_CHARS) {
        Some((end, _)) => &line[..end],
        None => line,
    };
    let mut out = String::with_capacity(line.len());
    let mut value_next = false;
    // The word before was a secret's name alone (`"password" : "x"`, `password = x`).
    let mut named = false;
    for (i, word) in line.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        if word.is_empty() {
            continue;
        }
        // `Authorization: Bearer <token>`, `Basic <credentials>`.
        if word.eq_ignore_ascii_case("bearer") || word.eq_ignore_ascii_case("basic") {
            out.push_str(word);
            value_next = true;
            continue;
        }
        if value_next {
            out.push_str(REDACTED);
            value_next = false;
            named = false;
            continue;
        }
        if named && matches!(word, "=" | ":") {
            out.push_str(word);
            value_next = true;
            continue;
        }
        let (w, dangling) = redact_word(word);
        out.push_str(&w);
        value_next = dangling;
        named = !dangling && is_secret_name(word);
    }
    out
}

/// `word` redacted, and whether it ends with a secret's name and its separator
/// (`password:`): its value is the next word.
fn redact_word(word: &str) -> (String, bool) {
    // A URL's user info: `scheme://user:pass@host` (to the last `@` before its query: a
    // password may hold a `/`).
    let mut w = match word.find("://") {
        Some(i) => {
            let rest = &word[i + 3..];
            let end = rest.find(['?', '#']).unwrap_or(rest.len());
            match rest[..end].rfind('@') {
                Some(at) => format!("{}://{REDACTED}@{}", &word[..i], &rest[at + 1..]),
                None => word.to_owned(),
            }
        }
        // `user/password@host` after a driver prefix (Oracle's `jdbc:oracle:thin:u/p@db`).
        None => match word.rfind('@') {
            Some(at) => {
                let start = word[..at].rfind(':').map_or(0, |c| c + 1);
                match word[start..at].contains('/') {
                    true => format!("{}{REDACTED}{}", &word[..start], &word[at..]),
                    false => word.to_owned(),
                }
            }
            None => word.to_owned(),
        },
    };
    let name_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    let mut from = 0;
    let mut dangling = false;
    while let Some(sep) = w[from..].find(['=', ':']).map(|e| from + e) {
        // The name before the separator, its closing quote skipped (`"api_key":`).
        let name_end = match w[..sep].chars().next_back() {
            Some(q @ ('"' | '\'')) => sep - q.len_utf8(),
            _ => sep,
        };
        let name_start = w[..name_end]
            .char_indices()
            .rev()
            .find(|&(_, c)| !name_char(c))
            .map_or(0, |(p, c)| p + c.len_utf8());
        let secret = is_secret_name(&w[name_start..name_end]);
        // The value, its opening quote skipped.
        let mut value_start = sep + 1;
        if let Some(q @ ('"' | '\'')) = w[value_start..].chars().next() {
            value_start += q.len_utf8();
        }
        let value_end = w[value_start..]
            .find(['&', ';', ',', ')', '}', '\'', '"'])
            .map_or(w.len(), |e| value_start + e);
        if secret && value_end > value_start {
            w.replace_range(value_start..value_end, REDACTED);
            from = value_start + REDACTED.len();
        } else {
            dangling = secret && value_start >= w.len();
            from = sep + 1;
        }
    }
    (w, dangling)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;
    use std::sync::{Arc, Mutex};

    /// Collects what the subscriber writes.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .map_err(|_| std::io::Error::other("poisoned"))?
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Capture {
        type Writer = Capture;
        fn make_writer(&'w self) -> Capture {
            self.clone()
        }
    }

    /// The JSON lines written while `f` runs.
    fn json_lines(f: impl FnOnce()) -> Vec<Value> {
        let out = Capture::default();
        let subscriber = json_subscriber(EnvFilter::new("info"), out.clone());
        tracing::subscriber::with_default(subscriber, f);
        let bytes = out.0.lock().expect("capture").clone();
        String::from_utf8(bytes)
            .expect("utf-8")
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    #[test]
    fn event_fields_are_top_level_keys() {
        let lines = json_lines(|| {
            tracing::warn!(
                audit = "dns_logs",
                partition = 3,
                first_offset = 2_i64,
                "gap detected"
            );
        });
        assert_eq!(lines.len(), 1, "{lines:?}");
        let l = &lines[0];
        assert_eq!(l["message"], "gap detected", "{l}");
        assert_eq!(l["audit"], "dns_logs", "{l}");
        assert_eq!(l["partition"], 3, "{l}");
        assert_eq!(l["first_offset"], 2, "{l}");
        assert_eq!(l["level"], "WARN", "{l}");
        assert!(l.get("fields").is_none(), "nested fields: {l}");
        assert!(
            l.get("timestamp").is_some() && l.get("target").is_some(),
            "{l}"
        );
    }

    /// A span's fields stay in `span` (they are not the event's), the event's are still
    /// flat, and the redundant span list is not written.
    #[test]
    fn the_current_span_is_one_object_beside_the_flat_fields() {
        let lines = json_lines(|| {
            let span = tracing::info_span!("audit", audit = "dns_logs");
            let _entered = span.enter();
            tracing::info!(topic = "test", "verify round");
        });
        assert_eq!(lines.len(), 1, "{lines:?}");
        let l = &lines[0];
        assert_eq!(l["topic"], "test", "{l}");
        assert_eq!(l["message"], "verify round", "{l}");
        assert_eq!(l["span"]["name"], "audit", "{l}");
        assert_eq!(l["span"]["audit"], "dns_logs", "{l}");
        assert!(l.get("spans").is_none(), "{l}");
        assert!(l.get("fields").is_none(), "{l}");
    }

    /// Record contents in a field are serialised, never spliced: quotes and newlines
    /// cannot forge a second line or key.
    #[test]
    fn hostile_values_stay_inside_their_string() {
        let lines = json_lines(|| {
            tracing::info!(value = "x\",\"level\":\"ERROR\"}\n{\"forged\":1", "decoded");
        });
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert_eq!(lines[0]["level"], "INFO");
        assert!(lines[0].get("forged").is_none());
    }

    #[test]
    fn printable_text_has_no_control_or_reordering_characters() {
        let hostile = "a\x1b[2J\nb\u{202E}c\u{2066}d\u{200B}e\u{2028}f";
        assert_eq!(printable(hostile, 100), "a[2Jbcdef");
        assert_eq!(printable("ééé", 2), "éé");
    }

    /// Hostile text: no panic at any character next to a separator or a quote, and a
    /// 4 MiB line of secrets costs what its first 4,096 characters cost (redacted whole,
    /// it cost a copy of the rest per secret).
    #[test]
    fn redact_takes_any_text_and_a_bounded_part_of_it() {
        for s in [
            "é=é",
            "ü:\"é",
            "password=é€",
            "key:\"",
            "=\"",
            "pwd:",
            "a://é@",
            "é://@?é",
            "token= x",
        ] {
            let _ = redact(s);
        }
        assert_eq!(redact("token= x"), "token= [redacted]");
        // Review 28b, R28b-6.
        for (text, secret) in [
            ("jdbc:oracle:thin:scott/tiger@db:1521/x", "tiger"),
            ("Authorization: Bearer eyJhbGci.x.y", "eyJ"),
            (r#"{"password" : "hunter2"}"#, "hunter2"),
            ("password = hunter2", "hunter2"),
            (
                "https://acct.blob.core.windows.net/c?sv=1&sig=S1GN%3D",
                "S1GN",
            ),
            ("?X-Amz-Signature=abc123&X-Amz-Date=1", "abc123"),
        ] {
            let r = redact(text);
            assert!(!r.contains(secret), "{text} -> {r}");
        }
        assert_eq!(redact("the key: is fine"), "the key: [redacted] fine");
        assert_eq!(redact("a config=1 : b"), "a config=1 : b");
        let huge = "password=x&".repeat(400_000);
        let r = redact(&huge);
        assert_eq!(
            r,
            format!("{}pass", "password=[redacted]&".repeat(REDACT_CHARS / 11))
        );
        assert!(!r.contains("=x"), "{}", &r[..100]);
    }
}
