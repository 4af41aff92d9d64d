//! Completeness across instances (issue 35 item 4): the answers must together cover every
//! partition of every audited topic, on the real broker and MariaDB.

use super::completeness::rfc3339;
use crate::support::*;

/// `gap-auditor wait --url …` (the real binary) for audit `dns_logs` until `until_ms`.
async fn wait_urls(urls: &[String], until_ms: i64, timeout: &str) -> (i32, String) {
    let mut args: Vec<String> = vec!["wait".into()];
    for u in urls {
        args.push("--url".into());
        args.push(u.clone());
    }
    for a in [
        "--audit",
        "dns_logs",
        "--until",
        &rfc3339(until_ms),
        "--timeout",
        timeout,
        "--poll",
        "200ms",
    ] {
        args.push(a.to_string());
    }
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_gap-auditor"))
            .args(&args)
            .output()
            .expect("run gap-auditor");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .expect("binary task")
}

/// Two instances in one auditor group share a 2-partition topic, one partition each,
/// both complete. On main, `wait --url A` alone exited 0: nothing checked that A's answer
/// speaks for one partition of two (the same hole lets a partition moving between
/// instances pass unasked). Now it waits and says which partition nobody answers for;
/// with both instances it is complete.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wait_is_complete_only_when_the_answers_cover_every_partition() {
    let s = Scenario::with_partitions("cover", 2).await;
    let topic = &s.topic;
    let state_b = tempfile::tempdir().expect("tempdir");
    let a = Auditor::start(&config_toml(&s.spec("offset_columns", "1s", "300ms"))).await;
    let mut spec_b = s.spec("offset_columns", "1s", "300ms");
    spec_b.state_dir = state_b.path();
    let b = Auditor::start(&config_toml(&spec_b)).await;
    let owned = |x: &Auditor| {
        x.status
            .snapshot()
            .first()
            .map_or(0, |st| st.partitions.len())
    };
    a.wait_for(60, "the group splits the partitions", |a| {
        owned(a) == 1 && owned(&b) == 1
    })
    .await;
    for p in 0..2 {
        assert_eq!(s.producer.send_all(p, &dns_lines(0..2)).await, vec![0, 1]);
        s.pipeline().partition(p).records(2).run().await;
    }
    let until = chrono::Utc::now().timestamp_millis();
    a.wait_decided(30, "both partitions confirmed", |a| {
        a.confirmed(topic, 0)
            + a.confirmed(topic, 1)
            + b.confirmed(topic, 0)
            + b.confirmed(topic, 1)
            == 4
    })
    .await;
    let urls = [format!("http://{}", a.addr), format!("http://{}", b.addr)];
    let (code, err) = wait_urls(&urls, until, "30s").await;
    assert_eq!(code, 0, "both instances together are complete: {err}");

    // A alone is complete for its own partition, and says it speaks for one of two.
    let answer = super::completeness::api(&a, until).await;
    assert_eq!(answer["complete"], true, "{answer}");
    assert_eq!(answer["topic_partitions"][topic.as_str()], 2, "{answer}");
    assert_eq!(
        answer["covers"][topic.as_str()].as_array().map(Vec::len),
        Some(1),
        "{answer}"
    );
    let (code, err) = wait_urls(&urls[..1], until, "3s").await;
    assert_eq!(
        code, 3,
        "one instance of two never proves the audit complete: {err}"
    );
    assert!(err.contains("no instance answers for"), "{err}");
    a.stop().await;
    b.stop().await;
}
