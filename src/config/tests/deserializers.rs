//! Field deserializers: durations and start positions.

use super::*;

#[test]
fn durations_accept_units_and_seconds() {
    assert_eq!(parse_duration_str("250ms"), Ok(Duration::from_millis(250)));
    assert_eq!(parse_duration_str("5m"), Ok(Duration::from_secs(300)));
    assert_eq!(parse_duration_str("1h 30m"), Ok(Duration::from_secs(5400)));
    assert_eq!(parse_duration_str("45"), Ok(Duration::from_secs(45)));
    assert_eq!(parse_duration_str("1.5"), Ok(Duration::from_millis(1500)));
    assert!(parse_duration_str("soon").is_err());
    let cfg = Config::from_toml_str(&BASE.replace(
        "name = \"dns_logs\"",
        "name = \"dns_logs\"\ngrace = 45\nverify_interval = \"250ms\"",
    ))
    .expect("valid");
    assert_eq!(cfg.audits[0].grace, Duration::from_secs(45));
    assert_eq!(cfg.audits[0].verify_interval, Duration::from_millis(250));
}

#[test]
fn grace_must_not_be_negative() {
    for bad in ["grace = \"-5s\"", "grace = -5", "grace = \"soon\""] {
        let e = toml_err(&BASE.replace(
            "name = \"dns_logs\"",
            &format!("name = \"dns_logs\"\n{bad}"),
        ));
        assert_eq!(e.path, "audits[0].grace", "{e}");
    }
    let e = toml_err(&BASE.replace(
        "name = \"dns_logs\"",
        "name = \"dns_logs\"\ngrace = \"-5s\"",
    ));
    assert!(e.message.contains("negative"), "{e}");
}

#[test]
fn start_positions() {
    assert_eq!("latest".parse(), Ok(StartPosition::Latest));
    assert_eq!("EARLIEST".parse(), Ok(StartPosition::Earliest));
    assert_eq!(
        "-1h".parse(),
        Ok(StartPosition::Ago(Duration::from_secs(3600)))
    );
    let t: StartPosition = "2024-05-01T02:00:00+02:00".parse().expect("time");
    assert_eq!(t.to_string(), "2024-05-01T00:00:00+00:00");
    assert!("yesterday".parse::<StartPosition>().is_err());
    assert!("-0s".parse::<StartPosition>().is_err());
    let e = toml_err(&BASE.replace("brokers", "start = \"soon\"\nbrokers"));
    assert_err(&e, "kafka.start", "unknown start position");
    // An unquoted TOML datetime works too.
    let cfg =
        Config::from_toml_str(&BASE.replace("brokers", "start = 2024-05-01T00:00:00Z\nbrokers"))
            .expect("toml datetime");
    assert!(matches!(cfg.kafka.start, StartPosition::Time(_)));
}
