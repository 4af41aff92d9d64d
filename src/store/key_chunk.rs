//! The packed form of a `key_chunks` row (schema v9): claims back to back, each
//!
//! ```text
//! varint(key length)  key bytes  varint(confirmed)
//! ```
//!
//! with nothing before, between or after them. A varint is unsigned LEB128: seven bits a
//! byte, the least significant group first, the high bit set on every byte but the last
//! (300 is `ac 02`); at most ten bytes for a `u64`. A 45-byte key with a count below 128
//! takes 47 bytes. There is no header (no claim count, no version): a chunk ends where its
//! bytes do, and another layout would come with another schema version.
//!
//! Pure: the store (keys.rs) decides what goes in which chunk.

/// Why a chunk does not decode. Offsets are bytes into the chunk; the store adds the audit
/// and the chunk's seq.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkError {
    /// The claim starting at `at` runs past the chunk's end (`len` bytes).
    #[error("the claim at byte {at} runs past the end of the chunk ({len} bytes)")]
    Truncated {
        /// Where the claim starts.
        at: usize,
        /// The chunk's length.
        len: usize,
    },
    /// A varint at `at` has more bits than a `u64` holds.
    #[error("the varint at byte {at} exceeds 64 bits")]
    Overlong {
        /// Where the varint starts.
        at: usize,
    },
}

/// Packs `claims` in order into chunks and hands each to `emit`: a chunk is closed after
/// `max_claims` claims or once it holds `max_bytes` (so one claim larger than that still
/// gets a chunk of its own). No claims, no chunk.
pub(super) fn pack<'k, E>(
    claims: impl IntoIterator<Item = (&'k [u8], u64)>,
    max_claims: usize,
    max_bytes: usize,
    mut emit: impl FnMut(&[u8]) -> Result<(), E>,
) -> Result<(), E> {
    let mut chunk = Vec::new();
    let mut held = 0;
    for (key, confirmed) in claims {
        push_claim(&mut chunk, key, confirmed);
        held += 1;
        if held >= max_claims || chunk.len() >= max_bytes {
            emit(&chunk)?;
            chunk.clear();
            held = 0;
        }
    }
    if held > 0 {
        emit(&chunk)?;
    }
    Ok(())
}

/// Appends one claim to `chunk`.
pub(super) fn push_claim(chunk: &mut Vec<u8>, key: &[u8], confirmed: u64) {
    push_varint(chunk, key.len() as u64);
    chunk.extend_from_slice(key);
    push_varint(chunk, confirmed);
}

fn push_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v & 0x7f) as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The claims of `chunk` in order, as `(key, confirmed)` borrowed from it. After an error
/// the iterator ends: what follows a bad length cannot be told apart from garbage.
pub(super) fn claims(chunk: &[u8]) -> Claims<'_> {
    Claims { chunk, at: 0 }
}

/// Iterator of [`claims`].
#[derive(Debug, Clone)]
pub(super) struct Claims<'a> {
    chunk: &'a [u8],
    /// Where the next claim starts.
    at: usize,
}

impl<'a> Iterator for Claims<'a> {
    type Item = Result<(&'a [u8], u64), ChunkError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.at >= self.chunk.len() {
            return None;
        }
        let claim = self.claim();
        if claim.is_err() {
            self.at = self.chunk.len();
        }
        Some(claim)
    }
}

impl<'a> Claims<'a> {
    fn claim(&mut self) -> Result<(&'a [u8], u64), ChunkError> {
        let start = self.at;
        let len = self.varint(start)?;
        // A length past the chunk (or past usize on a 32-bit target) is a truncation; it is
        // only ever sliced, never allocated.
        let key = usize::try_from(len)
            .ok()
            .and_then(|len| self.chunk.get(self.at..self.at.checked_add(len)?))
            .ok_or_else(|| self.truncated(start))?;
        self.at += key.len();
        let confirmed = self.varint(start)?;
        Ok((key, confirmed))
    }

    /// Reads the varint at `self.at`, part of the claim at `claim`.
    fn varint(&mut self, claim: usize) -> Result<u64, ChunkError> {
        let start = self.at;
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let Some(&byte) = self.chunk.get(self.at) else {
                return Err(self.truncated(claim));
            };
            self.at += 1;
            let bits = u64::from(byte & 0x7f);
            // The tenth byte holds bit 63 alone.
            if shift == 63 && bits > 1 {
                return Err(ChunkError::Overlong { at: start });
            }
            v |= bits << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ChunkError::Overlong { at: start })
    }

    fn truncated(&self, claim: usize) -> ChunkError {
        ChunkError::Truncated {
            at: claim,
            len: self.chunk.len(),
        }
    }
}

#[cfg(test)]
mod tests;
