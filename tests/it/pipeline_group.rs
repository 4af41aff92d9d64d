//! The pipeline group's commits disappearing (issue 35 item 5): a group deleted
//! (DeleteGroups) or expired (`offsets.retention.minutes`) on the real broker.

use crate::support::*;
use std::time::Duration;

/// Issue 35 item 5: the pipeline commits, the auditor sees it; the group is deleted. On
/// main the auditor kept the last commits it had seen: `pipeline_group_up` stayed 1 and
/// nothing said why verdicts stopped. The vanished commits are reported within a few
/// seconds (group up 0, the reason in `/api/status`), a record produced meanwhile is not
/// decided, and once the pipeline commits again the group is up and the loss is found.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_pipeline_group_is_reported_and_holds_verdicts() {
    let s = Scenario::new("group_gone").await;
    let topic = &s.topic;
    let auditor = s.start_auditor("offset_columns", "1s", "300ms").await;
    let group_up = || {
        auditor
            .metrics
            .pipeline_group_up
            .with_label_values(&["dns_logs"])
            .get()
    };
    assert_eq!(s.send(&dns_lines(0..2)).await, vec![0, 1]);
    // The stand-in's consumer is closed when it returns: the group is empty, so Kafka lets
    // it be deleted.
    s.pipeline().records(2).run().await;
    auditor
        .wait_decided(30, "both records confirmed", |a| {
            a.confirmed(topic, 0) == 2 && pipeline_committed(a) == Some(2)
        })
        .await;
    assert_eq!(group_up(), 1);

    delete_group(&s.pipeline_group).await;
    // The gauge is set where the round decides to hold, the status board when the round
    // reports: both are waited for (reading /api/status as soon as the gauge fell raced
    // the report under load).
    auditor
        .wait_for(
            10,
            "pipeline_group_up 0 and the hold on the status board after the group was deleted",
            |a| {
                group_up() == 0
                    && a.status
                        .snapshot()
                        .first()
                        .is_some_and(|st| st.pipeline_group_hold.is_some())
            },
        )
        .await;
    let (code, body) = auditor.get("/api/status").await;
    assert_eq!(code, 200, "{body}");
    let status: serde_json::Value = serde_json::from_str(&body).expect("status json");
    let hold = status["audits"][0]["pipeline_group_hold"]
        .as_str()
        .unwrap_or_else(|| panic!("no pipeline_group_hold in {body}"));
    assert!(
        hold.contains(&s.pipeline_group) && hold.contains("disappeared"),
        "{hold}"
    );
    assert_eq!(
        status["audits"][0]["partitions"][0]["pipeline_committed"],
        serde_json::Value::Null,
        "Kafka holds no commit any more: {body}"
    );

    // The pipeline is gone; a record arrives that nobody writes. Nothing guesses.
    assert_eq!(s.send(&dns_lines(2..3)).await, vec![2]);
    keep_checking(Duration::from_secs(3), Duration::from_millis(100), || {
        assert_eq!(auditor.lost(topic, 0), 0, "a loss declared without commits");
        assert_eq!(auditor.confirmed(topic, 0), 2);
        assert_eq!(group_up(), 0, "the vanished commits must stay reported");
    })
    .await;

    // The pipeline restarts "from latest" (3) and commits again: the group is back, and
    // the record it skipped is the loss.
    assert_eq!(s.send(&dns_lines(3..4)).await, vec![3]);
    s.pipeline()
        .start_at(3)
        .commit_start()
        .records(1)
        .run()
        .await;
    auditor
        .wait_decided(30, "offset 2 lost, offset 3 confirmed", |a| {
            a.lost(topic, 0) == 1 && a.confirmed(topic, 0) == 3
        })
        .await;
    assert_eq!(group_up(), 1);
    assert_eq!(gap_tuples(&api_gaps(&auditor).await), vec![(0, 2, 2, 1)]);
    auditor.stop().await;
}
