//! Horizontal scale (issue 8, item 5): two auditor PROCESSES in one auditor group on a
//! 6-partition topic, each with its own store, sharing a handover topic. Kafka's group
//! protocol splits the partitions; instance A runs alone, B joins mid-run (split), A stops
//! (B takes all), A comes back mid-run (split again). Losses happen before and after every
//! rebalance, and a gap A detected is repaired (`replay --to-sink` against B's store) after
//! its partition moved to B. At the end: the union of the stores' gaps is exactly the
//! truth, no gap was detected twice, the lost counters summed over the process lifetimes
//! are the truth, and the owners' `records_missing` are the unrepaired losses. The same
//! with `kill -9` of an owner, and (issue 14) with 2,000 gaps through a 100 kB record limit.

use crate::figures;
use crate::support::*;
use gap_auditor::gap::{Gap, GapState};
use gap_auditor::store::Store;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

mod handover_further;
mod handover_idle;
mod handover_retired;

const PARTITIONS: i32 = 6;
/// Records produced per partition per phase.
const PHASE: i64 = 30;
const PHASES: i64 = 4;

/// The pipeline "loses" these offsets (per partition). Runs never touch a phase boundary,
/// so each is one gap. Phase 1 loses on every partition: whichever partitions move to B,
/// some carry a gap A detected.
fn lost(p: i32, o: i64) -> bool {
    let p = p as i64;
    match o / PHASE {
        0 => (3 + p..=4 + p).contains(&o),
        1 => match p {
            0 => o == 40,
            2 => (45..=47).contains(&o),
            3 => o == 35,
            5 => (50..=51).contains(&o),
            _ => false,
        },
        2 => match p {
            1 => (70..=72).contains(&o),
            4 => o == 65,
            5 => o == 80,
            _ => false,
        },
        _ => match p {
            0 => (100..=101).contains(&o),
            3 => o == 110,
            4 => (95..=96).contains(&o),
            _ => false,
        },
    }
}

/// The gaps `lost` implies: (partition, first, last, records).
fn expected_gaps() -> Vec<(i64, i64, i64, i64)> {
    let mut out = Vec::new();
    for p in 0..PARTITIONS {
        let mut run: Option<(i64, i64)> = None;
        for o in 0..PHASE * PHASES + 1 {
            match (lost(p, o), run) {
                (true, None) => run = Some((o, o)),
                (true, Some((f, _))) => run = Some((f, o)),
                (false, Some((f, l))) => {
                    out.push((p as i64, f, l, l - f + 1));
                    run = None;
                }
                (false, None) => {}
            }
        }
    }
    out.sort();
    out
}

/// One auditor process of the group.
struct Instance {
    name: &'static str,
    daemon: Option<Daemon>,
    config: PathBuf,
    log: PathBuf,
    store: PathBuf,
    addr: SocketAddr,
}

impl Instance {
    fn new(s: &Scenario, name: &'static str, handover: &str) -> Instance {
        Self::with_properties(s, name, handover, &[])
    }

    /// An instance whose `kafka.properties` (librdkafka settings) include `properties`.
    fn with_properties(
        s: &Scenario,
        name: &'static str,
        handover: &str,
        properties: &[(&str, &str)],
    ) -> Instance {
        let store = s.state.path().join(name);
        let port = free_port();
        let listen = format!("127.0.0.1:{port}");
        let spec = AuditSpec {
            state_dir: &store,
            listen: &listen,
            ..s.spec("offset_columns", "1s", "300ms")
        };
        let toml = config_toml(&spec).replace(
            "[state]\n",
            &format!("[state]\nhandover_topic = \"{handover}\"\n"),
        );
        assert!(toml.contains("handover_topic"), "{toml}");
        let props: String = properties
            .iter()
            .map(|(k, v)| format!("\"{k}\" = \"{v}\"\n"))
            .collect();
        let toml = if props.is_empty() {
            toml
        } else {
            toml.replace(
                "[server]\n",
                &format!("[kafka.properties]\n{props}[server]\n"),
            )
        };
        let config = s.state.path().join(format!("{name}.toml"));
        std::fs::write(&config, toml).expect("config");
        Instance {
            name,
            daemon: None,
            config,
            log: s.state.path().join(format!("{name}.log")),
            store,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        }
    }

    fn start(&mut self) {
        assert!(self.daemon.is_none());
        self.daemon = Some(Daemon::spawn(
            &self.config,
            vec![("GAP_AUDITOR_LOG", "info,gap_auditor=debug".into())],
            self.log.clone(),
        ));
    }

    /// SIGTERM; it must exit 0.
    fn stop(&mut self) {
        self.daemon.take().expect("running").stop();
    }

    /// SIGKILL: no revoke, no last handover, no commit.
    fn kill9(&mut self) {
        self.daemon.take().expect("running").kill9();
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// (partition, settled) of each partition it owns, `None` while it does not answer.
    async fn owned(&self) -> Option<BTreeMap<i32, i64>> {
        let (code, body) = try_http_get(self.addr, "/api/status").await?;
        if code != 200 {
            return None;
        }
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        let parts = v["audits"].get(0)?["partitions"].as_array()?.clone();
        Some(
            parts
                .iter()
                .filter_map(|p| Some((p["partition"].as_i64()? as i32, p["settled"].as_i64()?)))
                .collect(),
        )
    }

    /// Sum of every series of a metric family, read from /metrics.
    async fn metric(&self, family: &str) -> f64 {
        let (code, body) = http_get(self.addr, "/metrics").await;
        assert_eq!(code, 200);
        sum_family(&body, family)
    }

    /// As [`Self::metric`], `None` while the family has no series (no partition owned: a
    /// rebalance between a revoke and the next assignment).
    async fn metric_owned(&self, family: &str) -> Option<f64> {
        let (code, body) = http_get(self.addr, "/metrics").await;
        assert_eq!(code, 200);
        let any = body.lines().any(|l| {
            l.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with('{'))
        });
        any.then(|| sum_family(&body, family))
    }

    /// Gaps from `/api/gaps?state=open`.
    async fn open_gaps(&self) -> Vec<serde_json::Value> {
        let (code, body) = http_get(self.addr, "/api/gaps?state=open").await;
        assert_eq!(code, 200, "{body}");
        serde_json::from_str(&body).expect("gaps json")
    }

    /// Ids from `/api/gaps?state=open`.
    async fn open_gap_ids(&self) -> BTreeSet<String> {
        let (code, body) = http_get(self.addr, "/api/gaps?state=open").await;
        assert_eq!(code, 200, "{body}");
        let v: Vec<serde_json::Value> = serde_json::from_str(&body).expect("gaps json");
        v.iter()
            .filter_map(|g| g["id"].as_str().map(str::to_string))
            .collect()
    }

    fn gaps(&self) -> Vec<Gap> {
        stored_gaps(&Store::open(&self.store).expect("store"))
    }
}

/// Sum of the values of every series of `family` in a Prometheus exposition.
fn sum_family(text: &str, family: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until the running instances own every partition between them, each owning at
/// least one, and every partition is settled at `settled`; returns who owns what.
async fn wait_owned(running: &[&Instance], settled: i64, what: &str) -> Vec<BTreeSet<i32>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let mut owned = Vec::new();
        for i in running {
            owned.push(i.owned().await.unwrap_or_default());
        }
        let all: BTreeSet<i32> = owned.iter().flat_map(|o| o.keys().copied()).collect();
        let total: usize = owned.iter().map(BTreeMap::len).sum();
        let ok = all.len() == PARTITIONS as usize
            && total == PARTITIONS as usize
            && owned.iter().all(|o| !o.is_empty())
            && owned.iter().flat_map(|o| o.values()).all(|s| *s >= settled);
        if ok {
            return owned.iter().map(|o| o.keys().copied().collect()).collect();
        }
        if std::time::Instant::now() > deadline {
            let last = owned;
            let logs: String = running
                .iter()
                .map(|i| format!("--- {} log:\n{}\n", i.name, i.log_text()))
                .collect();
            panic!("{what}: not reached within 120 s; owned/settled: {last:?}\n{logs}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Produces phase `k` (offsets k*PHASE..) on every partition, one record per batch.
async fn produce_phase(s: &Scenario, k: i64) {
    for p in 0..PARTITIONS {
        let base = (p as usize) * 10_000 + (k * PHASE) as usize;
        let offsets = s
            .producer
            .send_all(p, &dns_lines(base..base + PHASE as usize))
            .await;
        assert_eq!(
            offsets.first().copied(),
            Some(k * PHASE),
            "partition {p} phase {k}"
        );
    }
}

/// The pipeline group commits offset 0 on every partition before any auditor starts, as a
/// running pipeline would have: a partition whose group never committed is checked `grace`
/// after it is read (docs/SEMANTICS.md), and the stand-in below reaches partition 5 seconds
/// after partition 0.
async fn pipeline_starts(s: &Scenario) {
    for p in 0..PARTITIONS {
        s.pipeline()
            .partition(p)
            .commit_start()
            .records(0)
            .run()
            .await;
    }
}

/// The pipeline stand-in over phase `k` of every partition, in steps of 5 records.
fn pipeline_phase(s: &Scenario, k: i64) -> tokio::task::JoinHandle<()> {
    let pipes: Vec<_> = (0..PARTITIONS)
        .map(|p| {
            s.pipeline()
                .partition(p)
                .start_at(k * PHASE)
                .records(PHASE as usize)
                .copies(move |o| usize::from(!lost(p, o)))
                .commit_every(5, Duration::from_millis(100))
        })
        .collect();
    tokio::spawn(async move {
        for pipe in pipes {
            pipe.run().await;
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_split_partitions_and_hand_over_gaps() {
    let s = Scenario::with_partitions("multi", PARTITIONS).await;
    let handover = unique("handover");
    let mut a = Instance::new(&s, "a", &handover);
    let mut b = Instance::new(&s, "b", &handover);
    let expected = expected_gaps();
    let truth_lost: i64 = expected.iter().map(|g| g.3).sum();

    // Phase 1: A alone decides losses on every partition.
    produce_phase(&s, 0).await;
    pipeline_starts(&s).await;
    a.start();
    pipeline_phase(&s, 0).await.expect("pipeline phase 1");
    let owned = wait_owned(&[&a], PHASE, "A alone owns and settles all").await;
    assert_eq!(owned[0].len(), 6);
    let a_gaps_phase1 = a.gaps();
    assert_eq!(
        a_gaps_phase1.len(),
        PARTITIONS as usize,
        "A saw every phase-1 gap"
    );

    // Phase 2: records and pipeline in flight while B joins: a rebalance mid-run.
    produce_phase(&s, 1).await;
    let pipe = pipeline_phase(&s, 1);
    b.start();
    pipe.await.expect("pipeline phase 2");
    let owned = wait_owned(&[&a, &b], 2 * PHASE, "A and B split the partitions").await;
    let (a_owns, b_owns) = (owned[0].clone(), owned[1].clone());
    assert!(a_owns.is_disjoint(&b_owns));

    // A gap A detected on a partition that moved to B is in B's store (handed over), not
    // in A's, and B repairs it: `replay` against B's config finds it by its global id.
    let moved = *b_owns.first().expect("B owns a partition");
    let repaired_id = Gap::make_id("dns_logs", &s.topic, moved, 3 + moved as i64);
    assert!(
        a_gaps_phase1.iter().any(|g| g.id == repaired_id),
        "A detected {repaired_id}"
    );
    let b_copy = b
        .gaps()
        .into_iter()
        .find(|g| g.id == repaired_id)
        .unwrap_or_else(|| panic!("{repaired_id} handed over to B; B log:\n{}", b.log_text()));
    assert_eq!(b_copy.state, GapState::Open);
    assert!(
        !a.gaps().iter().any(|g| g.id == repaired_id),
        "A no longer lists a gap of a partition it handed over"
    );
    let (code, out, err) = run_replay(&b.config, &["--gap", &repaired_id, "--to-sink"]);
    assert_eq!(code, 0, "replay on B: {out}{err}");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !b
        .gaps()
        .iter()
        .any(|g| g.id == repaired_id && g.state == GapState::Repaired)
    {
        assert!(
            std::time::Instant::now() < deadline,
            "B never marked {repaired_id} repaired; B log:\n{}",
            b.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // An operator acknowledges a gap on A (`gap-auditor ack`, A's store); the
    // acknowledgement travels with the partition when A stops.
    let acked_p = *a_owns.first().expect("A owns a partition");
    let acked_id = Gap::make_id("dns_logs", &s.topic, acked_p, 3 + acked_p as i64);
    let open_before = a.metric("gap_auditor_gaps_open").await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gap-auditor"))
        .args(["ack", "-c"])
        .arg(&a.config)
        .args(["--gap", &acked_id, "--reason", "known incident"])
        .output()
        .expect("run ack");
    assert!(out.status.success(), "ack: {out:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while a.metric("gap_auditor_gaps_open").await != open_before - 1.0 {
        assert!(
            std::time::Instant::now() < deadline,
            "A never saw the acknowledgement"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A stops (SIGTERM) once it has decided all it owns; its counters' last values count.
    let a1_lost = a.metric("gap_auditor_records_lost_total").await;
    let a1_detected = a.metric("gap_auditor_gaps_detected_total").await;
    a.stop();
    let owned = wait_owned(&[&b], 2 * PHASE, "B takes all").await;
    assert_eq!(owned[0].len(), 6);
    let b_acked = b.gaps().into_iter().find(|g| g.id == acked_id);
    assert!(
        b_acked
            .as_ref()
            .is_some_and(|g| g.state == GapState::Acknowledged
                && g.ack_reason.as_deref() == Some("known incident")),
        "the acknowledgement reached B: {b_acked:?}"
    );

    // Phase 3: B alone.
    produce_phase(&s, 2).await;
    pipeline_phase(&s, 2).await.expect("pipeline phase 3");
    wait_owned(&[&b], 3 * PHASE, "B settles phase 3").await;

    // Phase 4: A comes back mid-run (split again), with a stale store of its own.
    produce_phase(&s, 3).await;
    let pipe = pipeline_phase(&s, 3);
    a.start();
    pipe.await.expect("pipeline phase 4");
    let owned = wait_owned(&[&a, &b], 4 * PHASE, "A and B split again").await;
    assert!(owned[0].is_disjoint(&owned[1]));

    // Final figures: B ran throughout, A twice.
    let b_lost = b.metric("gap_auditor_records_lost_total").await;
    let b_detected = b.metric("gap_auditor_gaps_detected_total").await;
    let a2_lost = a.metric("gap_auditor_records_lost_total").await;
    let a2_detected = a.metric("gap_auditor_gaps_detected_total").await;
    let missing = a.metric("gap_auditor_records_missing").await
        + b.metric("gap_auditor_records_missing").await;
    // While both run, an open gap is listed by its partition's owner only.
    let (open_a, open_b) = (a.open_gap_ids().await, b.open_gap_ids().await);
    assert!(
        open_a.is_disjoint(&open_b),
        "open on both: {:?}",
        open_a.intersection(&open_b).collect::<Vec<_>>()
    );
    assert_eq!(
        open_a.len() + open_b.len(),
        expected.len() - 2,
        "every gap neither repaired nor acknowledged is open on exactly one instance"
    );
    a.stop();
    wait_owned(&[&b], 4 * PHASE, "B takes all again").await;
    b.stop();

    // Union of the stores, by id: unresolved gaps live only with their owner.
    let mut union: BTreeMap<String, Gap> = BTreeMap::new();
    let mut in_both = Vec::new();
    for g in a.gaps().into_iter().chain(b.gaps()) {
        if let Some(prev) = union.insert(g.id.clone(), g.clone())
            && (prev.state, prev.missing_records) != (g.state, g.missing_records)
        {
            in_both.push((prev, g));
        }
    }
    assert!(
        in_both.is_empty(),
        "a gap differs between stores: {in_both:#?}"
    );
    let reported: Vec<(i64, i64, i64, i64)> = {
        let mut v: Vec<_> = union
            .values()
            .map(|g| {
                // The repaired gap's original size: it had records_missing 0 at the end.
                let n = if g.id == repaired_id {
                    g.last_offset - g.first_offset + 1
                } else {
                    g.missing_records as i64
                };
                (g.partition as i64, g.first_offset, g.last_offset, n)
            })
            .collect();
        v.sort();
        v
    };
    let summed_lost = a1_lost + a2_lost + b_lost;
    let summed_detected = a1_detected + a2_detected + b_detected;
    // Phase-1 gaps are 2 records long.
    let (repaired_size, acked_size) = (2.0, 2.0);
    let exp_set: BTreeSet<_> = expected.iter().copied().collect();
    let rep_set: BTreeSet<_> = reported.iter().copied().collect();
    let false_pos: u64 = rep_set.difference(&exp_set).map(|g| g.3 as u64).sum();
    let false_neg: u64 = exp_set.difference(&rep_set).map(|g| g.3 as u64).sum();
    figures::record(&figures::Figures {
        scenario: "multi_instance_rebalance",
        runs: 1,
        faults: 3,
        expected_lost: truth_lost as u64,
        reported_lost: summed_lost as u64,
        expected_gaps: expected.len() as u64,
        reported_gaps: union.len() as u64,
        false_positives: false_pos,
        false_negatives: false_neg,
        notes: format!(
            "2 processes, 6 partitions, 3 rebalances (join, SIGTERM, rejoin); split {a_owns:?}/{b_owns:?}; \
             lost_total A1 {a1_lost} + B {b_lost} + A2 {a2_lost}; gaps_detected_total summed {summed_detected}; gap {repaired_id} detected by A, repaired on B; \
             gap {acked_id} acknowledged on A, acknowledged on B after the move; \
             records_missing at the end {missing} (truth: lost, neither repaired nor acknowledged, {})",
            truth_lost as f64 - repaired_size - acked_size
        ),
    });
    let story = |i: &Instance| -> String {
        i.log_text()
            .lines()
            .filter(|l| {
                [
                    "handover",
                    "handed",
                    "taken over",
                    "dropped",
                    "revoked",
                    "assigned",
                    "ERROR",
                    "WARN",
                ]
                .iter()
                .any(|k| l.contains(k))
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        reported,
        expected,
        "union of the stores' gaps\n--- A:\n{}\n--- B:\n{}",
        story(&a),
        story(&b)
    );
    assert_eq!(
        union[&repaired_id].state,
        GapState::Repaired,
        "{:?}",
        union[&repaired_id]
    );
    assert_eq!(union[&acked_id].state, GapState::Acknowledged);
    assert!(
        union
            .values()
            .filter(|g| g.id != repaired_id && g.id != acked_id)
            .all(|g| g.state == GapState::Open),
        "{union:#?}"
    );
    assert_eq!(
        summed_detected,
        expected.len() as f64,
        "no gap detected by two instances (gaps_detected_total summed over lifetimes)"
    );
    assert_eq!(
        summed_lost, truth_lost as f64,
        "records_lost_total summed over process lifetimes (A1 {a1_lost}, B {b_lost}, A2 {a2_lost})"
    );
    assert_eq!(
        missing,
        truth_lost as f64 - repaired_size - acked_size,
        "records_missing of the final owners = losses neither repaired nor acknowledged"
    );
}

/// `kill -9` of an instance while it decides: the survivor takes its partitions over from
/// the last state the killed one published (the Kafka commit is never ahead of it), so
/// every verdict survives. Counters of the killed process's last round cannot be read
/// (it dies with them), so the proof is the survivor's view: its open gaps and its
/// `records_missing` are exactly the truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_owner_killed_mid_run_loses_no_verdict() {
    let s = Scenario::with_partitions("multikill", PARTITIONS).await;
    let handover = unique("handover");
    let mut a = Instance::new(&s, "a", &handover);
    let mut b = Instance::new(&s, "b", &handover);
    let expected: Vec<_> = expected_gaps()
        .into_iter()
        .filter(|g| g.1 < 2 * PHASE)
        .collect();
    let truth_lost: i64 = expected.iter().map(|g| g.3).sum();

    produce_phase(&s, 0).await;
    pipeline_starts(&s).await;
    a.start();
    pipeline_phase(&s, 0).await.expect("pipeline phase 1");
    wait_owned(&[&a], PHASE, "A alone owns and settles all").await;
    b.start();
    wait_owned(&[&a, &b], PHASE, "A and B split the partitions").await;

    // Phase 2 in flight; A dies in the middle of deciding it.
    produce_phase(&s, 1).await;
    let pipe = pipeline_phase(&s, 1);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let a_detected = a.metric("gap_auditor_gaps_detected_total").await;
    a.kill9();
    pipe.await.expect("pipeline phase 2");
    let owned = wait_owned(&[&b], 2 * PHASE, "B takes all after the session timeout").await;
    assert_eq!(owned[0].len(), PARTITIONS as usize);
    // One more round so the gauges are those of the settled state.
    tokio::time::sleep(Duration::from_millis(1000)).await;

    let open = gap_tuples(&b.open_gaps().await);
    let missing = b.metric("gap_auditor_records_missing").await;
    let b_detected = b.metric("gap_auditor_gaps_detected_total").await;
    let b_log = b.log_text();
    b.stop();
    let exp_set: BTreeSet<_> = expected.iter().copied().collect();
    let rep_set: BTreeSet<_> = open.iter().copied().collect();
    figures::record(&figures::Figures {
        scenario: "multi_instance_kill9",
        runs: 1,
        faults: 1,
        expected_lost: truth_lost as u64,
        reported_lost: missing as u64,
        expected_gaps: expected.len() as u64,
        reported_gaps: open.len() as u64,
        false_positives: rep_set.difference(&exp_set).map(|g| g.3 as u64).sum(),
        false_negatives: exp_set.difference(&rep_set).map(|g| g.3 as u64).sum(),
        notes: format!(
            "2 processes, 6 partitions; kill -9 of one while it decided; the survivor's open gaps \
             and records_missing ({missing}) against the truth; gaps_detected_total: killed \
             process {a_detected} at its last scrape, survivor {b_detected} (a round the killed \
             one decided but had not handed over is decided again)"
        ),
    });
    assert_eq!(open, expected, "the survivor's open gaps; B log:\n{b_log}");
    assert_eq!(missing, truth_lost as f64, "the survivor's records_missing");
}

// ------------------------------------------------------- handover under a small record limit

/// Records of the 100 kB-limit scenario: phase 1 loses every second record (2,000 gaps of
/// one record), phase 2 every tenth, phase 3 every tenth.
const BIG_PHASES: [(i64, i64); 3] = [(0, 4000), (4000, 4200), (4200, 4300)];

fn big_lost(o: i64) -> bool {
    if o < BIG_PHASES[0].1 {
        o % 2 == 1
    } else {
        o % 10 == 5
    }
}

/// The auditor group's committed offset of partition 0, once it equals `want` (or what it
/// is after `secs`).
async fn committed_within(group: &str, topic: &str, want: i64, secs: u64) -> Option<i64> {
    let deadline = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let (g, t) = (group.to_string(), topic.to_string());
        let got = tokio::task::spawn_blocking(move || crate::faults::group_committed(&g, &t))
            .await
            .expect("committed offsets task");
        if got == Some(want) || std::time::Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until `i` owns partition 0 settled at `settled` or beyond.
async fn wait_settled(i: &Instance, settled: i64, what: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(o) = i.owned().await
            && o.get(&0).is_some_and(|s| *s >= settled)
        {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: {} never owned partition 0 settled at {settled} (owns {:?}); log:\n{}",
            i.name,
            i.owned().await,
            i.log_text()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What the handover topic holds, read back as an outside consumer: records, the largest
/// record (key + value), and how many of them are chunks.
fn handover_topic_facts(topic: &str) -> (usize, usize, usize) {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::Message;
    let c: BaseConsumer = group_client(&unique("handover_reader"))
        .create()
        .expect("reader");
    let (_, high) = c
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .expect("watermarks");
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, rdkafka::Offset::Beginning)
        .expect("tpl");
    c.assign(&tpl).expect("assign");
    let (mut n, mut largest, mut chunks) = (0, 0, 0);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut reached = 0;
    while reached < high && std::time::Instant::now() < deadline {
        let Some(m) = c.poll(Duration::from_millis(200)) else {
            continue;
        };
        let m = m.expect("read the handover topic");
        reached = m.offset() + 1;
        n += 1;
        let k = m.key().unwrap_or_default();
        largest = largest.max(k.len() + m.payload().map_or(0, <[u8]>::len));
        if k.iter().filter(|b| **b == 0).count() == 4 && m.payload().is_some() {
            chunks += 1;
        }
    }
    (n, largest, chunks)
}

/// Whether the test broker refuses a 150 kB record on a topic created with
/// `max.message.bytes=100000` (from a producer allowed 1 MB).
async fn broker_enforces_topic_limit() -> bool {
    let probe = unique("limit_probe");
    create_topic_with(&probe, 1, &[("max.message.bytes", "100000")]).await;
    let p: rdkafka::producer::FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", kafka())
        .create()
        .expect("producer");
    let big = vec![b'x'; 150_000];
    p.send(
        rdkafka::producer::FutureRecord::<(), [u8]>::to(&probe).payload(&big),
        Duration::from_secs(10),
    )
    .await
    .is_err()
}

/// Issue 14: 2,000 gaps handed over on a broker limited to 100 kB messages. Before, a
/// partition's state was ONE handover record (JSON); with 2,000 open gaps it is about 1 MB,
/// above the limit, so every publish failed (`MSG_SIZE_TOO_LARGE`), `hand_over` returned
/// false, the settled offset was never committed again (the group's commit stayed where it
/// was when the state last fit: 0 here, 109 failed publishes in one run of the old code),
/// and the next owner found only that stale state. Now the state is cut into chunks that
/// each fit, and reassembled only when complete.
///
/// The limit: the auditors' own producers are limited with
/// `kafka.properties."message.max.bytes" = "100000"`, which librdkafka enforces client-side
/// (a larger record fails at enqueue), so the test holds on any broker. The handover topic
/// is also created with `max.message.bytes=100000`, which Apache Kafka (the test broker)
/// enforces as well; tansu 0.6, the broker before, accepted it without enforcing it. The
/// test probes which ([`broker_enforces_topic_limit`]) and records it in its figures.
/// Broker behaviour relied on: the high watermark the reader stops at is the true log end
/// (exact on Kafka for any batching; the handover producer's default of one record per
/// batch is what made it right on tansu too).
///
/// A decides 2,000 gaps and commits; B joins, A stops: B takes the state over (all 2,000
/// gaps in its store, none detected again), decides 20 more, commits; A comes back with its
/// stale store, B stops: A takes B's state over and decides 10 more, commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_thousand_gaps_hand_over_through_a_100_kb_record_limit() {
    let started = std::time::Instant::now();
    let s = Scenario::with_partitions("handover_limit", 1).await;
    let handover = unique("handover");
    create_topic_with(
        &handover,
        1,
        &[
            ("cleanup.policy", "compact"),
            ("max.message.bytes", "100000"),
        ],
    )
    .await;
    let enforced = broker_enforces_topic_limit().await;
    let limit = [("message.max.bytes", "100000")];
    let mut a = Instance::with_properties(&s, "a", &handover, &limit);
    let mut b = Instance::with_properties(&s, "b", &handover, &limit);
    let expected: Vec<(i64, i64, i64, i64)> = (0..BIG_PHASES[2].1)
        .filter(|o| big_lost(*o))
        .map(|o| (0, o, o, 1))
        .collect();
    let phase1_gaps = expected.iter().filter(|g| g.1 < BIG_PHASES[0].1).count();
    assert_eq!(phase1_gaps, 2000);
    let pipeline = |(from, to): (i64, i64)| {
        s.pipeline()
            .start_at(from)
            .records((to - from) as usize)
            .copies(|o| usize::from(!big_lost(o)))
            .commit_every(250, Duration::ZERO)
            .deadline(Duration::from_secs(120))
    };
    let produce = |(from, to): (i64, i64)| {
        let s = &s;
        async move {
            let offsets = s
                .producer
                .send_all(0, &dns_lines(from as usize..to as usize))
                .await;
            assert_eq!(offsets.first().copied(), Some(from));
        }
    };

    // Phase 1: A alone decides 2,000 gaps and must commit its settled watermark.
    produce(BIG_PHASES[0]).await;
    pipeline_starts_on(&s, 1).await;
    a.start();
    let t = std::time::Instant::now();
    pipeline(BIG_PHASES[0]).run().await;
    wait_settled(&a, BIG_PHASES[0].1, "A decides phase 1").await;
    let committed1 = committed_within(&s.auditor_group, &s.topic, BIG_PHASES[0].1, 30).await;
    let a_settle_s = t.elapsed().as_secs_f64();
    let a_gaps = a.gaps().len();
    let a1_lost = a.metric("gap_auditor_records_lost_total").await;
    let a1_detected = a.metric("gap_auditor_gaps_detected_total").await;
    let publish_errors = |i: &Instance| {
        i.log_text()
            .matches("cannot publish partition state")
            .count()
    };
    assert_eq!(
        committed1,
        Some(BIG_PHASES[0].1),
        "A's settled watermark committed with {a_gaps} gaps in its store ({} failed handover publishes); A log tail:\n{}",
        publish_errors(&a),
        tail(&a.log_text(), 30)
    );
    assert_eq!(a_gaps, 2000, "A's store");
    let a1_errors = publish_errors(&a);

    // B joins, A stops (SIGTERM): B owns partition 0 with the state A handed over.
    b.start();
    tokio::time::sleep(Duration::from_secs(4)).await;
    a.stop();
    let t = std::time::Instant::now();
    wait_settled(&b, BIG_PHASES[0].1, "B takes over from A").await;
    let b_takeover_s = t.elapsed().as_secs_f64();
    let b_gaps = b.gaps();
    assert_eq!(
        stored_gap_tuples(&b_gaps),
        expected[..phase1_gaps].to_vec(),
        "B's store holds every gap A handed over; B log tail:\n{}",
        tail(&b.log_text(), 30)
    );
    assert!(b_gaps.iter().all(|g| g.state == GapState::Open));
    assert_eq!(
        b.metric("gap_auditor_gaps_detected_total").await,
        0.0,
        "B detected none of A's gaps again"
    );
    assert_eq!(b.metric("gap_auditor_records_missing").await, 2000.0);

    // Phase 2: B decides 20 more and commits, publishing 2,020 gaps.
    produce(BIG_PHASES[1]).await;
    pipeline(BIG_PHASES[1]).run().await;
    wait_settled(&b, BIG_PHASES[1].1, "B decides phase 2").await;
    let committed2 = committed_within(&s.auditor_group, &s.topic, BIG_PHASES[1].1, 30).await;
    assert_eq!(
        committed2,
        Some(BIG_PHASES[1].1),
        "B's settled watermark committed ({} failed handover publishes)",
        publish_errors(&b)
    );

    // A comes back with its stale store (2,000 gaps at 4,000), B stops: A takes B's state.
    a.start();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let b_lost = b.metric("gap_auditor_records_lost_total").await;
    let b_detected = b.metric("gap_auditor_gaps_detected_total").await;
    let b_errors = publish_errors(&b);
    b.stop();
    let t = std::time::Instant::now();
    wait_settled(&a, BIG_PHASES[1].1, "A takes over from B").await;
    let a_takeover_s = t.elapsed().as_secs_f64();
    assert_eq!(
        stored_gap_tuples(&a.gaps()),
        expected
            .iter()
            .filter(|g| g.1 < BIG_PHASES[1].1)
            .copied()
            .collect::<Vec<_>>(),
        "A's store after taking B's state over"
    );
    produce(BIG_PHASES[2]).await;
    pipeline(BIG_PHASES[2]).run().await;
    wait_settled(&a, BIG_PHASES[2].1, "A decides phase 3").await;
    let committed3 = committed_within(&s.auditor_group, &s.topic, BIG_PHASES[2].1, 30).await;
    let a2_lost = a.metric("gap_auditor_records_lost_total").await;
    let a2_detected = a.metric("gap_auditor_gaps_detected_total").await;
    let missing = a.metric("gap_auditor_records_missing").await;
    // A's log holds both of its lifetimes.
    let a2_errors = publish_errors(&a) - a1_errors;
    a.stop();

    let (records, largest, chunks) = {
        let t = handover.clone();
        tokio::task::spawn_blocking(move || handover_topic_facts(&t))
            .await
            .expect("read the handover topic")
    };
    // The final state as a reader reassembles it (what the next owner would take over).
    let final_state = {
        let k = gap_auditor::config::KafkaConfig {
            brokers: kafka(),
            ..Default::default()
        };
        let h = gap_auditor::handover::Handover::new(&k, &handover).expect("handover client");
        let tp = gap_auditor::types::TopicPartition::new(s.topic.clone(), 0);
        let tps = vec![tp.clone()];
        tokio::task::spawn_blocking(move || h.read("dns_logs", &tps))
            .await
            .expect("read task")
            .expect("read the handover topic")
            .remove(&tp)
            .expect("a complete state of partition 0")
    };
    let final_bytes = gap_auditor::handover::encode(&final_state).len();

    let reported = stored_gap_tuples(&a.gaps());
    let exp_set: BTreeSet<_> = expected.iter().copied().collect();
    let rep_set: BTreeSet<_> = reported.iter().copied().collect();
    let truth_lost = expected.len() as f64;
    let summed_lost = a1_lost + b_lost + a2_lost;
    let summed_detected = a1_detected + b_detected + a2_detected;
    figures::record(&figures::Figures {
        scenario: "handover_2000_gaps_100kb_limit",
        runs: 1,
        faults: 2,
        expected_lost: expected.len() as u64,
        reported_lost: summed_lost as u64,
        expected_gaps: expected.len() as u64,
        reported_gaps: reported.len() as u64,
        false_positives: rep_set.difference(&exp_set).map(|g| g.3 as u64).sum(),
        false_negatives: exp_set.difference(&rep_set).map(|g| g.3 as u64).sum(),
        notes: format!(
            "record limit 100000 B (kafka.properties message.max.bytes; the test broker {} \
             a topic's max.message.bytes); \
             2 handovers (A -> B with 2000 gaps, B -> A with 2020); final state {final_bytes} B of JSON \
             ({:.1}x the limit), read back complete; handover topic: {records} records, {chunks} chunks, \
             largest record {largest} B; failed publishes A {a1_errors} + B {b_errors} + A {a2_errors}; \
             commits: {committed1:?} / {committed2:?} / {committed3:?} (settled 4000 / 4200 / 4300); \
             gaps_detected_total A {a1_detected} + B {b_detected} + A {a2_detected}; \
             A settled phase 1 in {a_settle_s:.1} s; takeover A -> B {b_takeover_s:.1} s, B -> A {a_takeover_s:.1} s; \
             records_missing at the end {missing}; whole test {:.0} s",
            if enforced {
                "enforces"
            } else {
                "accepts but does not enforce"
            },
            final_bytes as f64 / 100_000.0,
            started.elapsed().as_secs_f64(),
        ),
    });
    assert_eq!(reported, expected, "the final owner's gaps");
    assert_eq!(
        summed_detected, truth_lost,
        "no gap detected twice (gaps_detected_total over the 3 lifetimes)"
    );
    assert_eq!(
        summed_lost, truth_lost,
        "records_lost_total over the 3 lifetimes"
    );
    assert_eq!(missing, truth_lost, "records_missing of the final owner");
    assert_eq!(
        committed3,
        Some(BIG_PHASES[2].1),
        "A's commit after the second takeover"
    );
    assert_eq!(final_state.gaps.len(), expected.len());
    assert!(
        largest <= 100_000,
        "every handover record within the limit: largest {largest} B"
    );
    assert!(
        final_bytes > 100_000,
        "the state really is larger than one record"
    );
    assert!(chunks > 0);
    assert_eq!(
        a1_errors + b_errors + a2_errors,
        0,
        "no handover publish failed"
    );
}

/// The last `n` lines of a log.
fn tail(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// [`pipeline_starts`] for a topic of `partitions` partitions.
async fn pipeline_starts_on(s: &Scenario, partitions: i32) {
    for p in 0..partitions {
        s.pipeline()
            .partition(p)
            .commit_start()
            .records(0)
            .run()
            .await;
    }
}

/// Rows of `store` marked retired (issue 41 item 1: gaps that left the daemon's memory).
fn retired_rows(store: &std::path::Path) -> BTreeSet<String> {
    let conn = rusqlite::Connection::open(store.join(gap_auditor::store::DB_FILE)).expect("db");
    let mut stmt = conn
        .prepare("SELECT id FROM gaps WHERE retired = 1")
        .expect("query");
    stmt.query_map([], |r| r.get::<_, String>(0))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("ids")
}

/// Gaps whose records were all given up live in the store only (issue 41 item 1): the
/// owner keeps counting them, and when their partition moves the handover carries them, so
/// the next owner lists and counts them and the previous one drops its copies: never both,
/// never neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn given_up_gaps_hand_over_with_their_partition() {
    let s = Scenario::with_partitions("retiredho", PARTITIONS).await;
    let handover = unique("handover");
    let mut a = Instance::new(&s, "a", &handover);
    let mut b = Instance::new(&s, "b", &handover);
    for i in [&a, &b] {
        let toml = std::fs::read_to_string(&i.config).expect("config");
        let toml = toml.replacen(
            "batch_size = 100",
            "batch_size = 100\ngive_up_after = \"2s\"",
            1,
        );
        assert!(toml.contains("give_up_after"), "{toml}");
        std::fs::write(&i.config, toml).expect("config");
    }
    // Phase 1 loses 2 records on every partition: 6 gaps, 12 records.
    produce_phase(&s, 0).await;
    pipeline_starts(&s).await;
    a.start();
    pipeline_phase(&s, 0).await.expect("pipeline phase 1");
    wait_owned(&[&a], PHASE, "A alone owns and settles all").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while retired_rows(&a.store).len() < PARTITIONS as usize {
        assert!(
            std::time::Instant::now() < deadline,
            "given-up gaps not retired: {:?}\n{}",
            retired_rows(&a.store),
            a.log_text()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(a.metric("gap_auditor_gaps_open").await, 6.0);
    assert_eq!(a.metric("gap_auditor_records_missing").await, 12.0);

    b.start();
    let owned = wait_owned(&[&a, &b], PHASE, "A and B split the partitions").await;
    let (a_owns, b_owns) = (owned[0].clone(), owned[1].clone());
    // Together they count every gap once.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let gaps =
            a.metric("gap_auditor_gaps_open").await + b.metric("gap_auditor_gaps_open").await;
        let missing = a.metric("gap_auditor_records_missing").await
            + b.metric("gap_auditor_records_missing").await;
        if (gaps, missing) == (6.0, 12.0) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "gaps {gaps}, missing {missing}\n--- a:\n{}\n--- b:\n{}",
            a.log_text(),
            b.log_text()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let partitions_of = |ids: &BTreeSet<String>| -> BTreeSet<i32> {
        ids.iter()
            .filter_map(|id| id.rsplit(':').nth(1)?.parse().ok())
            .collect()
    };
    assert_eq!(
        partitions_of(&b.open_gap_ids().await),
        b_owns,
        "B lists its partitions' gaps"
    );
    assert_eq!(
        partitions_of(&a.open_gap_ids().await),
        a_owns,
        "A lists its own only"
    );
    assert_eq!(
        partitions_of(&retired_rows(&b.store)),
        b_owns,
        "retired in B's store"
    );
    a.stop();
    b.stop();
}
