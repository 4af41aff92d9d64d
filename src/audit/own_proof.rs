//! Whether a store proves it holds the retired gaps of this owner's own format-3 handover
//! state (review of format 3, F1): an owner taking its own state back counts its given-up
//! gaps from its store and imports nothing only then; otherwise (its rows let go while
//! another instance owned the partition, a store copied or restored from a backup) it
//! imports them from the side topic as another owner's would be.

use crate::handover::PartitionState;
use crate::ledger::RetiredGaps;
use crate::types::TopicPartition;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What the store proves of this owner's own format-3 states (`Audit::own_proofs`).
#[derive(Debug, Default)]
pub(crate) struct OwnProofs {
    /// Partitions the store marks swept, with the term their chunks were swept under.
    pub swept: BTreeMap<TopicPartition, u64>,
    /// Their retired rows' aggregate, as the store counts it now.
    pub counted: HashMap<TopicPartition, RetiredGaps>,
    /// Those of them with chunks noted unpublished (a write retired or changed gaps after
    /// the last state this owner published, which a crash kept from the side topic).
    pub noted: BTreeSet<TopicPartition>,
}

impl OwnProofs {
    /// Whether the store holds the retired gaps `st` counts: marked swept under the term
    /// whose chunk keys `st` names (its own term: the mark goes with the rows when the
    /// store drops a partition owned elsewhere, and a sweep under a newer term whose state
    /// never landed is no proof of the older term's chunks), and either its
    /// count of them is the state's (gaps, records, open ones and their records,
    /// dead-lettered ones: not the times nor the first open offset, which a Kafka
    /// deletion the store marks after the state moves without changing which gaps it
    /// holds) or it noted chunks unpublished (it changed them after the state: it is the
    /// further, and those chunks go first, see `assign`). Another count is no proof: the
    /// import that follows is slower, never short.
    pub fn current(&self, tp: &TopicPartition, st: &PartitionState) -> bool {
        if self.swept.get(tp) != Some(&st.term) {
            return false;
        }
        let Some(c) = self.counted.get(tp) else {
            return false;
        };
        if self.noted.contains(tp) {
            return true;
        }
        let want = st.retired_gaps.clone().unwrap_or_default();
        (
            c.gaps,
            c.missing_known,
            c.open,
            c.open_missing,
            c.dead_lettered,
        ) == (
            want.gaps,
            want.missing_known,
            want.open,
            want.open_missing,
            want.dead_lettered,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(retired: Option<RetiredGaps>) -> PartitionState {
        let mut st: PartitionState =
            serde_json::from_value(serde_json::json!({"version": 3, "audit": "a", "topic": "t",
                "partition": 0, "settled": 10, "ledger": {}, "gaps": [],
                "written_at": "2026-12-06T00:00:00Z", "owner": "me"}))
            .expect("a state");
        st.retired_gaps = retired;
        st
    }

    fn counted(gaps: u64, open: u64) -> RetiredGaps {
        RetiredGaps {
            gaps,
            open,
            missing_known: gaps,
            open_missing: open,
            ..RetiredGaps::default()
        }
    }

    /// F1: only a store marked swept whose count is the state's proves it is current.
    #[test]
    fn only_a_swept_store_counting_what_the_state_counts_is_current() {
        let tp = TopicPartition::new("t", 0);
        let mut p = OwnProofs::default();
        let st = state(Some(counted(3, 3)));
        assert!(
            !p.current(&tp, &st),
            "not swept: its rows may have been let go"
        );
        p.swept.insert(tp.clone(), 0);
        p.counted.insert(tp.clone(), counted(0, 0));
        assert!(!p.current(&tp, &st), "its rows were let go");
        p.counted.insert(tp.clone(), counted(3, 2));
        assert!(!p.current(&tp, &st), "another count");
        p.counted.insert(tp.clone(), counted(3, 3));
        assert!(p.current(&tp, &st));
        assert!(
            !p.current(&tp, &state(None)),
            "the state counts none, the store 3"
        );
        p.counted.insert(tp.clone(), RetiredGaps::default());
        assert!(p.current(&tp, &state(None)));
        // The store changed gaps after the state and noted their chunks: the further.
        p.counted.insert(tp.clone(), counted(4, 4));
        assert!(!p.current(&tp, &st));
        p.noted.insert(tp.clone());
        assert!(p.current(&tp, &st));
        // Swept under another term than the state's chunks: no proof.
        p.swept.insert(tp.clone(), 5);
        assert!(!p.current(&tp, &st));
        p.swept.insert(tp.clone(), 0);
        assert!(p.current(&tp, &st));
        p.swept.clear();
        p.counted.clear();
        assert!(!p.current(&tp, &st), "never without the swept mark");
    }
}
