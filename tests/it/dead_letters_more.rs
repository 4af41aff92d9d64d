//! Dead letters, review of issue 37 (second round), end to end on the real broker and
//! MariaDB: a dead_lettered gap blocks completeness until acknowledged; the dead-letter
//! reader reads committed records only; dead letters beyond the audited log end are ignored.

use crate::completeness::{api, completeness, record_ts, wait_bin};
use crate::dead_letters::{DeadLetterProducer, dead_lettered, start_auditor};
use crate::support::*;

/// SPEC "Completeness": `wait` exits 0 once everything produced before T is *confirmed*.
/// A dead-lettered record is absent from the sink: its gap blocks (gauge, `/api/completeness`
/// naming its id, `wait` exit 1) until acknowledged. Before the fix the gap was forgotten
/// as soon as a confirmed record followed it, and completeness ran past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_lettered_gap_blocks_completeness_until_acknowledged() {
    let s = Scenario::new("dlq_cpl").await;
    let topic = s.topic.clone();
    let dlq = unique("dlq_cpl_errors");
    create_topic(&dlq, 1).await;
    let lines = dns_lines(0..10);
    s.send(&lines).await;
    let auditor = start_auditor(&s, &dlq).await;
    let dl = DeadLetterProducer::new(&dlq);
    dl.names(&topic, 0, 3, lines[3].as_bytes()).await;
    s.pipeline()
        .records(10)
        .copies(|o| usize::from(o != 3))
        .run()
        .await;
    auditor
        .wait_decided(60, "9 confirmed, 3 dead-lettered", |a| {
            a.confirmed(&topic, 0) == 9 && dead_lettered(a, &topic) == 1
        })
        .await;
    let (t3, t9) = (record_ts(&topic, 0, 3), record_ts(&topic, 0, 9));
    let id = format!("{}:{topic}:0:3", auditor.audit);
    // Held at or before the dead-lettered record (its gap's first timestamp is a bound),
    // round after round.
    auditor
        .wait_for(20, "a published round", |a| {
            completeness(a).complete_until_ms.is_some()
        })
        .await;
    keep_checking(
        std::time::Duration::from_secs(2),
        std::time::Duration::from_millis(100),
        || {
            let c = completeness(&auditor).complete_until_ms;
            assert!(c.is_some_and(|c| c <= t3), "{c:?} runs past {t3}");
        },
    )
    .await;
    let gauge = auditor
        .metrics
        .complete_until_timestamp_seconds
        .with_label_values(&[auditor.audit.as_str()])
        .get();
    assert!(gauge <= t3 as f64 / 1000.0, "gauge {gauge}");
    let v = api(&auditor, t9 + 1).await;
    assert_eq!(v["complete"], false, "{v}");
    assert_eq!(v["blocking"], serde_json::json!([id]), "{v}");
    assert_eq!(v["blockers"][0]["state"], "dead_lettered", "{v}");
    let (code, out, err) = wait_bin(&auditor, t9 + 1, "0s").await;
    assert_eq!(code, 1, "blocked by the dead_lettered gap\n{out}{err}");
    assert!(
        out.contains(&format!(
            "gap {id} (dead_lettered): 1 record(s) dead-lettered"
        )),
        "{out}"
    );

    // Acknowledged (the store write `gap-auditor ack` makes): no longer blocking.
    assert!(
        auditor
            .store
            .ack(&id, "rejected rows accepted")
            .expect("ack")
    );
    auditor
        .wait_for(30, "the acknowledged gap stops blocking", |a| {
            completeness(a).complete_until_ms.is_some_and(|c| c > t9)
        })
        .await;
    let (code, out, err) = wait_bin(&auditor, t9 + 1, "30s").await;
    assert_eq!(code, 0, "acknowledged: complete\n{out}{err}");
    auditor.stop().await;
}
