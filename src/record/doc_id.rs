//! `doc_id` matching: the id of one record rendered from its parsed `{name}` template
//! ([`crate::template`]).

use super::{FilterReason, IdPart, RecordMeta};
use crate::record::text::Decoded;

/// Renders a document id; a field or Kafka key that is absent or empty filters the record,
/// a Kafka key that is not UTF-8 makes it undecodable.
pub(super) fn build_id(
    parts: &[IdPart],
    decoded: &Decoded<'_>,
    meta: &RecordMeta<'_>,
) -> Result<String, FilterReason> {
    use std::fmt::Write;
    let mut id = String::new();
    for part in parts {
        match part {
            IdPart::Literal(l) => id.push_str(l),
            IdPart::Topic => id.push_str(meta.topic),
            IdPart::Partition => {
                let _ = write!(id, "{}", meta.partition);
            }
            IdPart::Offset => {
                let _ = write!(id, "{}", meta.offset);
            }
            IdPart::KafkaKey => {
                let bytes = meta
                    .key
                    .filter(|k| !k.is_empty())
                    .ok_or(FilterReason::Filter)?;
                id.push_str(std::str::from_utf8(bytes).map_err(|_| FilterReason::Undecodable)?);
            }
            IdPart::Field(loc) => {
                let v = decoded
                    .get(loc)
                    .filter(|v| !v.is_empty())
                    .ok_or(FilterReason::Filter)?;
                id.push_str(&v);
            }
        }
    }
    Ok(id)
}
