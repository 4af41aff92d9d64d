use super::rebalance::per_partition;
use super::*;
use crate::kafka::tail::flow::{Pressure, plan};
use std::collections::VecDeque;

fn calm() -> Pressure {
    Pressure::default()
}

#[test]
fn one_partition_is_a_plain_cap_with_hysteresis() {
    let p = plan(1000, 999, &[999], &[false], calm());
    assert_eq!(p.pause, vec![false]);
    assert_eq!(p.headroom, 1, "the next record reaches the cap");
    let p = plan(1000, 1000, &[1000], &[false], calm());
    assert_eq!(p.pause, vec![true]);
    let p2 = plan(1000, 901, &[901], &[true], p.pressure);
    assert_eq!(p2.pause, vec![true], "stays paused down to 90 %");
    let p3 = plan(1000, 900, &[900], &[true], p2.pressure);
    assert_eq!(p3.pause, vec![false]);
}

#[test]
fn only_the_partition_holding_the_backlog_pauses() {
    // max 2000, 4 partitions: share 500, soft mark 1000.
    let p = plan(2000, 999, &[990, 3, 3, 3], &[false; 4], calm());
    assert_eq!(p.pause, vec![false; 4]);
    assert_eq!(p.headroom, 1);
    let p = plan(2000, 1000, &[991, 3, 3, 3], &[false; 4], calm());
    assert_eq!(p.pause, vec![true, false, false, false]);
    assert!(p.pressure.soft && !p.pressure.hard);
    // The others may each read up to their share before anything changes.
    assert_eq!(p.headroom, 497);
    // A healthy partition under its share is never paused below the cap...
    let q = plan(
        2000,
        1990,
        &[991, 499, 499, 1],
        &[true, false, false, false],
        p.pressure,
    );
    assert_eq!(q.pause, vec![true, false, false, false]);
    // ...and only the cap at max_pending pauses everything.
    let q = plan(
        2000,
        2000,
        &[991, 499, 499, 11],
        &[true, false, false, false],
        q.pressure,
    );
    assert_eq!(q.pause, vec![true; 4]);
}

#[test]
fn a_paused_partition_resumes_under_ninety_percent_of_its_share_or_of_the_soft_mark() {
    let soft = Pressure {
        soft: true,
        hard: false,
    };
    let was = [true, false];
    // max 2000, 2 partitions: share 1000, soft mark 1000.
    assert_eq!(
        plan(2000, 1500, &[901, 599], &was, soft).pause,
        vec![true, false]
    );
    assert_eq!(
        plan(2000, 1500, &[900, 600], &was, soft).pause,
        vec![false, false]
    );
    let p = plan(2000, 900, &[899, 1], &was, soft);
    assert_eq!(p.pause, vec![false, false]);
    assert!(!p.pressure.soft, "total under 90 % of the soft mark");
}

/// Steps of a simulated tail: every unpaused partition reads one record per step; the
/// healthy ones decide each record `decide_after` steps after reading it, the stalled
/// partition 0 never does. Returns (peak total, steps partition >0 was paused, peak of
/// partition 0).
fn simulate(max: u64, n: usize, decide_after: usize, steps: usize) -> (u64, usize, u64) {
    let mut read_at: Vec<VecDeque<usize>> = vec![VecDeque::new(); n];
    let mut pressure = calm();
    let mut paused = vec![false; n];
    let (mut peak, mut healthy_paused, mut peak0) = (0, 0, 0);
    for step in 0..steps {
        for q in read_at.iter_mut().skip(1) {
            while q.front().is_some_and(|&t| t + decide_after <= step) {
                q.pop_front();
            }
        }
        for p in 0..n {
            let loads: Vec<u64> = read_at.iter().map(|q| q.len() as u64).collect();
            let total = loads.iter().sum();
            let plan = plan(max, total, &loads, &paused, pressure);
            pressure = plan.pressure;
            paused = plan.pause;
            if !paused[p] {
                read_at[p].push_back(step);
            }
        }
        let total: u64 = read_at.iter().map(|q| q.len() as u64).sum();
        peak = peak.max(total);
        peak0 = peak0.max(read_at[0].len() as u64);
        healthy_paused += paused.iter().skip(1).filter(|p| **p).count();
    }
    (peak, healthy_paused, peak0)
}

#[test]
fn a_stalled_partition_stops_at_half_the_budget_and_never_pauses_the_healthy_ones() {
    // Healthy partitions hold 100 records each in the steady state, under their share.
    let (peak, healthy_paused, peak0) = simulate(2000, 4, 100, 20_000);
    assert!(peak <= 2000, "memory capped: {peak}");
    // The total reached the soft mark (1000) with the healthy ones at 99-100 each.
    assert!(
        (700..=703).contains(&peak0),
        "stalled partition stopped at the soft mark: {peak0}"
    );
    assert_eq!(healthy_paused, 0);
}

#[test]
fn healthy_partitions_over_their_share_are_throttled_within_the_cap() {
    // 600 each in the steady state, over the 500 share: they read in bursts, the total
    // stays capped.
    let (peak, healthy_paused, _) = simulate(2000, 4, 600, 20_000);
    assert!(peak <= 2000, "memory capped: {peak}");
    assert!(healthy_paused > 0);
}

fn tagged(topic: &Arc<str>, partition: i32) -> Tagged {
    Tagged {
        topic: topic.clone(),
        partition,
        offset: 0,
        timestamp_ms: None,
        tag: crate::record::Tag::Filtered(crate::record::FilterReason::Filter),
    }
}

#[test]
fn loads_follow_batches_in_transit_and_the_ledger() {
    let t: Arc<str> = Arc::from("t");
    let batch = vec![tagged(&t, 0), tagged(&t, 0), tagged(&t, 1), tagged(&t, 0)];
    let counts = per_partition(&batch);
    assert_eq!(
        counts.iter().map(|c| (c.1, c.2)).collect::<Vec<_>>(),
        [(0, 3), (1, 1)]
    );

    let flow = Flow::new(100);
    let (p0, p1) = (TopicPartition::new("t", 0), TopicPartition::new("t", 1));
    let tps = [p0.clone(), p1.clone()];
    flow.sent(vec![(p0.clone(), 3), (p1.clone(), 1)]);
    flow.sent(vec![(p1.clone(), 5)]);
    assert_eq!(flow.loads_of(&tps, &[(t.clone(), 0, 2)]), [5, 6]);
    let v = flow.version.load(Ordering::Acquire);
    flow.ingested(4);
    flow.set_pending([(&p0, 3), (&p1, 0)]);
    assert!(flow.version.load(Ordering::Acquire) > v);
    assert_eq!(flow.loads_of(&tps, &[]), [3, 5]);
    flow.ingested(5);
    assert_eq!(flow.loads_of(&tps, &[]), [3, 0]);
    assert_eq!(flow.pending.load(Ordering::Acquire), 3);
}
