//! Ledger tests: the seed incident, holes, late arrivals, restore, and properties that
//! compare the ledger with a brute-force model of SPEC's gap definition.

use super::*;
use crate::types::{Key, Offset};
use proptest::prelude::*;
use std::collections::BTreeSet;

mod dead_letters;
mod deleted;
mod lifecycle;
mod model;
mod position;
mod retired;
mod review;
mod scenarios;

const GRACE: i64 = 1_000;

fn exp() -> Observed {
    Observed::Expected { key: None }
}

fn r(a: Offset, b: Offset) -> OffsetRun {
    OffsetRun::new(a, b)
}

/// Answers like a sink holding exactly `present`.
fn oracle(segs: &[Segment], present: &BTreeSet<Offset>) -> Vec<Verdict> {
    segs.iter()
        .map(|s| Verdict::Known {
            present: runs::normalize(
                (s.run.first..=s.run.last)
                    .filter(|o| present.contains(o))
                    .map(|o| r(o, o))
                    .collect(),
            ),
            duplicate_rows: 0,
            shared_keys: Vec::new(),
            stand_ins: Vec::new(),
        })
        .collect()
}
