//! `max_open_gaps` end to end (issue 41 item 1, SPEC guarantee 12): beyond the budget the
//! oldest gaps fold into their partition's overflow gap, which `/api/gaps` shows spanning
//! them and counting their missing records, and `gap_auditor_gaps_folded_total` counts them.

use crate::support::*;
use std::time::Duration;

/// Twenty isolated losses (every odd offset of 0..40) against `max_open_gaps = 5`: one
/// overflow gap (cause `folded`) over the sixteen oldest, the four newest exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn beyond_max_open_gaps_the_oldest_fold_into_an_overflow_gap() {
    let s = Scenario::new("overflow").await;
    let toml = config_toml(&s.spec("offset_columns", "2s", "500ms")).replacen(
        "batch_size = 100",
        "batch_size = 100\nmax_open_gaps = 5",
        1,
    );
    assert!(toml.contains("max_open_gaps = 5"), "{toml}");
    let auditor = Auditor::start(&toml).await;
    s.send(&dns_lines(0..40)).await;
    s.pipeline().commit_start().records(0).run().await;
    auditor
        .wait_for(30, "pipeline commit 0 seen", |a| {
            pipeline_committed(a) == Some(0)
        })
        .await;
    s.pipeline()
        .records(40)
        .copies(|o| usize::from(o % 2 == 0))
        .commit_every(40, Duration::ZERO)
        .run()
        .await;
    let topic = &s.topic;
    auditor
        .wait_for(60, "20 confirmed, 20 lost", |a| {
            a.confirmed(topic, 0) == 20 && a.lost(topic, 0) == 20
        })
        .await;
    // A few more rounds: nothing else may change.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let gaps = api_gaps(&auditor).await;
    assert_eq!(
        gap_tuples(&gaps),
        vec![
            (0, 1, 31, 16),
            (0, 33, 33, 1),
            (0, 35, 35, 1),
            (0, 37, 37, 1),
            (0, 39, 39, 1)
        ],
        "{gaps:?}"
    );
    let overflow = gaps
        .iter()
        .find(|g| g["first_offset"] == 1)
        .expect("overflow gap");
    assert_eq!(overflow["cause"], "folded", "{overflow}");
    assert_eq!(overflow["state"], "open", "{overflow}");
    assert_eq!(
        auditor
            .metrics
            .gaps_folded
            .with_label_values(&["dns_logs"])
            .get(),
        16,
        "every folded gap counted"
    );
    let (_, metrics) = auditor.get("/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("gap_auditor_gaps_folded_total") && l.ends_with(" 16")),
        "gaps_folded_total 16 in /metrics"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("gap_auditor_records_missing")
                && l.contains(&format!("topic=\"{topic}\""))
                && l.ends_with(" 20")),
        "every missing record still counted"
    );
    auditor.stop().await;
}
