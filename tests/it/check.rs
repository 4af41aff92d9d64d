//! `gap-auditor check`: a one-shot audit of a past range by the real binary, against the
//! real broker and MariaDB. Exit 1 with exactly the known losses, exit 0 on a clean range,
//! a progress bar on a terminal (driven through `script`, which gives the binary a pty) and
//! none when piped.

use crate::support::*;
use std::process::Command;

fn check_cmd(config: &std::path::Path, from: &str, to: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gap-auditor"));
    c.args(["check", "-c"])
        .arg(config)
        .args(["--from", from, "--to", to]);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_reports_exactly_the_losses_of_a_range() {
    let s = Scenario::new("check").await;
    s.send(&dns_lines(0..20)).await;
    let lost = |o: i64| [4, 9, 15].contains(&o);
    s.pipeline()
        .records(20)
        .copies(move |o| usize::from(!lost(o)))
        .run()
        .await;
    let config = s.state.path().join("gap-auditor.toml");
    std::fs::write(
        &config,
        config_toml(&s.spec("offset_columns", "1s", "500ms")),
    )
    .expect("config");
    // The daemon's due rule holds for check too: records within grace (1 s) of now are not
    // due yet. A real check runs over the past; this one waits out grace.
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;

    // Three losses: exit 1, exactly those offsets.
    let out = check_cmd(&config, "offset:0", "offset:20")
        .args(["--format", "json"])
        .output()
        .expect("run check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    let gaps = report["gaps"].as_array().expect("gaps");
    assert_eq!(
        gap_tuples(gaps),
        vec![(0, 4, 4, 1), (0, 9, 9, 1), (0, 15, 15, 1)],
        "{report}"
    );
    assert_eq!(report["confirmed"], 17);
    assert_eq!(report["lost"], 3);
    assert!(
        !stderr.contains("records"),
        "no progress bar when piped: {stderr}"
    );

    // A clean sub-range: exit 0.
    let out = check_cmd(&config, "offset:0", "offset:4")
        .output()
        .expect("run check");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("no gaps"));

    // Under a terminal the progress bar is drawn (`script` runs the command on a pty).
    let cmd = format!(
        "{} check -c {} --from offset:0 --to offset:20",
        env!("CARGO_BIN_EXE_gap-auditor"),
        config.display()
    );
    let out = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .output()
        .expect("run script");
    let tty = String::from_utf8_lossy(&out.stdout);
    // indicatif limits its redraw rate, so which counts get drawn varies; some do.
    assert!(tty.contains("/20 records"), "progress bar on a tty: {tty}");
    assert!(tty.contains("3 missing"), "{tty}");
}

/// Guarantee 9 (`check` never reports what `run` would not): records the pipeline group has
/// not passed are lag, not checked and never missing; a misspelt group gives no verdict
/// (exit 2) instead of calling every record lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_applies_the_due_rule() {
    let s = Scenario::new("check_due").await;
    s.send(&dns_lines(0..10)).await;
    // The pipeline has written and committed 0..6; 6..10 are still on their way.
    s.pipeline().records(6).run().await;
    let config = s.state.path().join("gap-auditor.toml");
    std::fs::write(
        &config,
        config_toml(&s.spec("offset_columns", "1s", "500ms")),
    )
    .expect("config");
    tokio::time::sleep(std::time::Duration::from_millis(1_500)).await;
    let out = check_cmd(&config, "offset:0", "offset:10")
        .args(["--format", "json"])
        .output()
        .expect("run check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "lag is not loss: {stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json report");
    assert_eq!(report["lost"], 0, "{report}");
    assert_eq!(report["confirmed"], 6, "{report}");
    let range = &report["ranges"][0];
    assert_eq!(
        (range["to"].as_i64(), range["requested_to"].as_i64()),
        (Some(6), Some(10)),
        "{report}"
    );
    assert!(
        range["not_checked"]
            .as_str()
            .is_some_and(|w| w.contains("lag")),
        "{report}"
    );

    // The pipeline group misspelt: no verdict, exit 2, and the error says why.
    let typo = format!("{}x", s.pipeline_group);
    let mut spec = s.spec("offset_columns", "1s", "500ms");
    spec.pipeline_group = Some(&typo);
    std::fs::write(&config, config_toml(&spec)).expect("config");
    let out = check_cmd(&config, "offset:0", "offset:10")
        .output()
        .expect("run check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no committed offset"), "{stderr}");
}
