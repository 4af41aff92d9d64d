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
