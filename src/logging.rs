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
/// forged log line reaches an operator), at most `max_chars` characters.
pub fn printable(s: &str, max_chars: usize) -> String {
    s.chars()
        .filter(|c| !c.is_control())
        .take(max_chars)
        .collect()
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
}
