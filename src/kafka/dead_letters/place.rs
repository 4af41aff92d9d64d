//! Placing the coordinates the reader read ([`crate::dead_letters::Unplaced`]): each is
//! compared with its audited partition's high watermark, asked after it was read, so a
//! dead letter naming an offset this incarnation of the topic never held (an earlier
//! incarnation's, or a wrong coordinate) is ignored (`beyond_log_end`) instead of being
//! kept for good (nothing ever decides such an offset, so no floor would free it).

use super::{REQUEST_TIMEOUT, Reader};
use crate::dead_letters::Ignored;
use rdkafka::consumer::Consumer;

impl Reader {
    /// Places every unplaced coordinate: into the index, or ignored beyond the log end. An
    /// unanswered high watermark places nothing (the caller is then not caught up).
    pub(super) fn place(&mut self) -> Result<(), String> {
        if self.unplaced.is_empty() {
            return Ok(());
        }
        let shared = self.shared.clone();
        let watermarks = &self.watermarks;
        // The true high watermark (read uncommitted: open transactions' records are in the
        // log, and a pipeline may have read them).
        let placed = self.unplaced.place(
            |tp| shared.keeps(tp),
            |tp| {
                watermarks
                    .fetch_watermarks(&tp.topic, tp.partition, REQUEST_TIMEOUT)
                    .map(|(_, high)| high)
                    .map_err(|e| format!("high watermark of the audited partition {tp}: {e}"))
            },
        )?;
        {
            let mut index = shared.lock();
            for (tp, offset) in placed.kept {
                index.insert(tp, offset);
            }
        }
        if placed.beyond > 0 {
            tracing::debug!(audit = %self.source.audit, topic = %self.source.topic, beyond = placed.beyond,
                reason = %Ignored::BeyondLogEnd, "dead-letter records ignored");
        }
        if placed.beyond_uncounted > 0 {
            self.metrics
                .dead_letters_ignored
                .with_label_values(&[&self.source.audit, Ignored::BeyondLogEnd.as_str()])
                .inc_by(placed.beyond_uncounted);
        }
        Ok(())
    }
}
