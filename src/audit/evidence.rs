//! A new gap's evidence: what every evidence source read tells of it (Flink's restore,
//! Kafka Connect's task changes), joined with "; ". Decided once, when the gap is found
//! (persist.rs `report_gap`); never part of a verdict.

use super::Audit;
use crate::ledger::GapRecord;
use crate::sink::Verifier;

impl<V: Verifier> Audit<V> {
    /// The words of every source that explains `g`, or `None` (no source, or none tells
    /// anything of it; a gap that already carries evidence keeps it).
    pub(super) fn new_gap_evidence(&self, g: &GapRecord) -> Option<String> {
        if g.evidence.is_some() {
            return None;
        }
        let words: Vec<String> = [
            self.flink.as_ref().and_then(|f| f.explain(g)),
            self.connect.as_ref().and_then(|c| c.explain(g)),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!words.is_empty()).then(|| words.join("; "))
    }
}
