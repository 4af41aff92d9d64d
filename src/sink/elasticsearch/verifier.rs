//! The [`Verifier`] questions, each answered with the requests and parsers of the sibling
//! modules: ping, offset counts and listings, key counts and document ids.

use super::{ElasticsearchSink, FieldSet, KEYS_PER_SEARCH};
use crate::key_domain::KeyDomain;
use crate::ledger::OffsetRun;
use crate::sink::elasticsearch::requests::{count_bodies, keys_body_typed, list_body};
use crate::sink::elasticsearch::responses::{
    Page, check_complete, next_page, parse_count, parse_keys, parse_page, push_counts,
};
use crate::sink::{RangeCount, SinkError, Verifier};
use crate::types::{Key, Offset, TopicPartition};
use elasticsearch::CountParts;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;

impl Verifier for ElasticsearchSink {
    fn kind(&self) -> &'static str {
        "elasticsearch"
    }

    async fn ping(&self) -> Result<(), SinkError> {
        // Proves the index exists and is readable with these credentials, reads nothing.
        let index = self.index();
        let v = self
            .call(
                "ping",
                self.client
                    .count(CountParts::Index(&index))
                    .allow_no_indices(false)
                    .request_timeout(self.timeout)
                    .body(json!({ "query": { "match_none": {} } }))
                    .send(),
            )
            .await?;
        check_complete(&v)
    }

    async fn key_domain(&self) -> Result<Option<KeyDomain>, SinkError> {
        if self.target.columns.key.is_empty() {
            return Ok(None);
        }
        let (domain, notes) = self.read_key_mapping().await?;
        for n in &notes {
            tracing::warn!(index = %self.target.index, "{n}");
        }
        for c in &domain.columns {
            if let crate::key_domain::ColumnType::Keyword {
                ignore_above: Some(limit),
                ..
            } = c.ty
            {
                tracing::info!(
                    index = %self.target.index,
                    field = %c.name,
                    ignore_above = limit,
                    "a record whose key value in this field is longer than ignore_above is \
                     not indexed by the server: counted filtered{{reason=\"unconvertible_key\"}} \
                     (unverifiable), never missing"
                );
            }
        }
        if let Ok(mut g) = self.learned_keys.lock() {
            *g = Some(domain.clone());
        }
        if let Ok(mut g) = self.current_keys.lock() {
            *g = Some(domain.clone());
        }
        Ok(Some(domain))
    }

    async fn count_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<RangeCount, SinkError> {
        if runs.is_empty() {
            return Ok(RangeCount::default());
        }
        self.checked(FieldSet::Offsets, async {
            let bodies = count_bodies(&self.target, tp, runs);
            let mut total = RangeCount::default();
            for a in self.searches("range count", bodies).await? {
                let c = parse_count(&a)?;
                total.rows += c.rows;
                total.distinct += c.distinct;
            }
            Ok(total)
        })
        .await
    }

    async fn list_offsets(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<Vec<(Offset, u64)>, SinkError> {
        self.checked(FieldSet::Offsets, self.list_pages(tp, runs))
            .await
    }

    async fn count_keys(&self, keys: &[&Key]) -> Result<Vec<u64>, SinkError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        if let Some(k) = keys
            .iter()
            .find(|k| k.len() != self.target.columns.key.len())
        {
            return Err(SinkError::Rejected(format!(
                "a key has {} values for {} key fields",
                k.len(),
                self.target.columns.key.len()
            )));
        }
        self.checked(FieldSet::Keys, async {
            self.check_key_limits(keys)?;
            let strings = self
                .key_fields_are_strings
                .lock()
                .map(|g| g.clone())
                .unwrap_or_default();
            let bodies: Vec<Value> = keys
                .chunks(KEYS_PER_SEARCH)
                .map(|c| keys_body_typed(&self.target.columns.key, c, &strings))
                .collect();
            let mut out = Vec::with_capacity(keys.len());
            let answers = self.searches("key count", bodies).await?;
            for (a, c) in answers.iter().zip(keys.chunks(KEYS_PER_SEARCH)) {
                out.extend(parse_keys(a, c.len())?);
            }
            Ok(out)
        })
        .await
    }

    async fn find_ids(&self, ids: &[&str]) -> Result<Vec<bool>, SinkError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        if !self.ids_by_search.load(Ordering::Relaxed) {
            if let Some(found) = self.ids_by_mget(ids).await? {
                return Ok(found);
            }
            tracing::info!(index = %self.target.index, "the index is an alias of several indices: verifying document ids with `ids` searches instead of _mget");
            self.ids_by_search.store(true, Ordering::Relaxed);
        }
        self.ids_by_query(ids).await
    }
}

impl ElasticsearchSink {
    /// The listing of [`Verifier::list_offsets`], page by page.
    async fn list_pages(
        &self,
        tp: &TopicPartition,
        runs: &[OffsetRun],
    ) -> Result<Vec<(Offset, u64)>, SinkError> {
        let mut out: Vec<(Offset, u64)> = Vec::new();
        let mut after: Option<Offset> = None;
        loop {
            let body = list_body(&self.target, tp, runs, after, self.page_size);
            let page = self.searches("listing", vec![body]).await?.remove(0);
            let offsets = parse_page(&page)?;
            match next_page(&offsets, self.page_size) {
                Page::Last => {
                    push_counts(&mut out, &offsets);
                    return Ok(out);
                }
                Page::More { keep, resume_after } => {
                    push_counts(&mut out, &offsets[..keep]);
                    after = Some(resume_after);
                }
                Page::AllOneOffset(o) => {
                    // At least a page of copies of one offset: count them directly.
                    let n = self.count_one_offset(tp, o).await?;
                    out.push((o, n));
                    after = Some(o);
                }
            }
        }
    }
}
