//! The shared vocabulary: the few types every layer speaks (the tail thread, the decoder,
//! the ledger, verification, the sinks, the store, the API) — a Kafka offset, a
//! topic-partition and a record's match key. Plain data and their own methods, nothing
//! else, so that any module can use them without depending on another one's logic. This is
//! their one path: the old ones (`gap::Offset`, `gap::TopicPartition`, `record::Key`) are gone.
//!
//! [`Key`]'s unit tests are the decoder's (src/record/tests/key.rs and the packed-form
//! round trip in src/record/tests/csv.rs): keys are built there.

use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// A Kafka offset. Kafka uses signed 64-bit offsets; negative values never reach the ledger.
pub type Offset = i64;

/// One partition of one topic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TopicPartition {
    /// Topic name.
    pub topic: String,
    /// Partition number.
    pub partition: i32,
}

impl TopicPartition {
    /// Builds a topic-partition.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        Self {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// The values of the match key fields of one record, in key order.
///
/// Packed in ONE allocation, because the ledger holds a key per pending record (millions):
/// each value's UTF-8 bytes followed by a `0xFF` terminator, a byte UTF-8 never contains.
/// That is 16 bytes plus 8 of hash, the key's bytes and one byte per value, instead of a
/// `Vec` of `String`s (24 + 24 per value, and an allocation each). It also means one free
/// per key when the audit task drops it, not four, on memory the tailing thread allocated.
/// Shared (`Arc`), because the ledger, the key book and each round's due list all hold
/// the same key: a clone is a count, not a copy (a copy each was 3-5 allocations per
/// record, and the churn of those small blocks grew the heap over a long total loss).
/// Serialized as a list of strings, as before (stored ledger snapshots stay readable).
///
/// The allocation starts with the packed form's hash ([`Key::hash_packed`]), computed once
/// where the key is built: between the tail and its verdict a key is looked up in about
/// eight tables (the book, the round's key sets, the read's index, the round's counts), and
/// hashing its ~80 bytes each time was 7 % of the daemon's CPU on key_columns. [`Hash`]
/// writes that number; each table still mixes it with its own seed.
#[derive(Clone, Eq)]
pub struct Key(Arc<[u8]>);

/// Bytes of the hash before the packed form in a [`Key`]'s allocation.
const HASH_LEN: usize = 8;

/// Two handles on one allocation are equal without reading it: the key book and the
/// ledgers hold clones of the key decoded once, and a round compares each due key with the
/// book's copy of it (comparing the bytes was a fifth of deciding a round's keys, one
/// cache miss each). Unequal keys nearly always differ in their first bytes, the hash.
impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0[..] == other.0[..]
    }
}

/// The packed form's order (the hash in front is not part of it).
impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// The hash carried with the key (equal keys carry equal ones).
impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash64());
    }
}

/// Ends every value inside a [`Key`]; never part of valid UTF-8.
const KEY_END: u8 = 0xFF;

/// The packed form ([`Key::as_bytes`]): how the store writes a key's claims.
impl AsRef<[u8]> for Key {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl Key {
    /// A key of these values, in key order.
    pub fn new<I, S>(values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut buf = vec![0u8; HASH_LEN];
        for v in values {
            buf.extend_from_slice(v.as_ref().as_bytes());
            buf.push(KEY_END);
        }
        Self::sealed(&mut buf)
    }

    /// The key whose allocation is `buf`: `HASH_LEN` bytes, filled in here with the hash
    /// of the packed form behind them.
    fn sealed(buf: &mut [u8]) -> Self {
        let (head, packed) = buf.split_at_mut(HASH_LEN);
        head.copy_from_slice(&Self::hash_packed(packed).to_le_bytes());
        Key(Arc::from(&*buf))
    }

    /// The hash a key of packed form `packed` carries ([`Self::as_bytes`]): one seed per
    /// process, random, because the keys are record contents (hostile) and an attacker who
    /// cannot see the seed cannot choose colliding keys (see `ledger::sharded`). A sink
    /// reading packed keys back files them under it, to find the asked keys without
    /// hashing those again.
    pub fn hash_packed(packed: &[u8]) -> u64 {
        use std::hash::BuildHasher;
        static STATE: std::sync::OnceLock<foldhash::fast::RandomState> = std::sync::OnceLock::new();
        STATE.get_or_init(Default::default).hash_one(packed)
    }

    /// The hash the key carries ([`Self::hash_packed`] of its packed form).
    pub fn hash64(&self) -> u64 {
        self.0
            .get(..HASH_LEN)
            .and_then(|b| <[u8; HASH_LEN]>::try_from(b).ok())
            .map_or(0, u64::from_le_bytes)
    }

    /// A key of the values `values` yields, or `None` as soon as one is `None` (a field
    /// missing). Built in a per-thread scratch buffer, so the only allocation is the key's
    /// own: this runs once per consumed record on the tailing thread.
    pub fn try_collect<'a>(values: impl Iterator<Item = Option<Cow<'a, str>>>) -> Option<Self> {
        thread_local! {
            static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        fn build<'a>(
            buf: &mut Vec<u8>,
            values: impl Iterator<Item = Option<Cow<'a, str>>>,
        ) -> Option<Key> {
            buf.clear();
            buf.extend_from_slice(&[0u8; HASH_LEN]);
            for v in values {
                buf.extend_from_slice(v?.as_bytes());
                buf.push(KEY_END);
            }
            Some(Key::sealed(buf))
        }
        SCRATCH.with(|cell| match cell.try_borrow_mut() {
            Ok(mut buf) => {
                let key = build(&mut buf, values);
                // One huge hostile key must not pin its size for the thread's lifetime.
                if buf.capacity() > 64 * 1024 {
                    *buf = Vec::new();
                }
                key
            }
            Err(_) => build(&mut Vec::new(), values),
        })
    }

    /// The packed form (each value's UTF-8 bytes, then `0xFF`): how the store keeps keys.
    pub fn as_bytes(&self) -> &[u8] {
        self.0.get(HASH_LEN..).unwrap_or_default()
    }

    /// A key from its packed form ([`Self::as_bytes`]); `None` unless every value is UTF-8
    /// ended by `0xFF`.
    pub fn from_bytes(b: &[u8]) -> Option<Key> {
        if !b.is_empty() && b.last() != Some(&KEY_END) {
            return None;
        }
        let body = b.strip_suffix(&[KEY_END]).unwrap_or(b);
        if !b.is_empty()
            && !body
                .split(|&c| c == KEY_END)
                .all(|v| std::str::from_utf8(v).is_ok())
        {
            return None;
        }
        let mut buf = Vec::with_capacity(HASH_LEN + b.len());
        buf.extend_from_slice(&[0u8; HASH_LEN]);
        buf.extend_from_slice(b);
        Some(Self::sealed(&mut buf))
    }

    /// The values, in key order.
    pub fn values(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        KeyValues {
            rest: self.as_bytes(),
            left: self.len(),
        }
    }

    /// The values' bytes, in key order, each valid UTF-8 ([`Self::values`] without the
    /// check: for callers that read only some of them).
    pub fn raw_values(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let packed = self.as_bytes();
        let body = packed.strip_suffix(&[KEY_END]).unwrap_or(packed);
        // An empty key has no value at all (not one empty value).
        let mut parts = (!packed.is_empty()).then(|| body.split(|&b| b == KEY_END));
        std::iter::from_fn(move || parts.as_mut()?.next())
    }

    /// The first value (the document id for `doc_id`).
    pub fn first(&self) -> Option<&str> {
        self.values().next()
    }

    /// How many values the key has.
    pub fn len(&self) -> usize {
        self.as_bytes().iter().filter(|&&b| b == KEY_END).count()
    }

    /// Whether the key has no value at all.
    pub fn is_empty(&self) -> bool {
        self.as_bytes().is_empty()
    }

    /// The values as owned strings.
    pub fn to_vec(&self) -> Vec<String> {
        self.values().map(str::to_string).collect()
    }

    /// Bytes of key text (without the terminators): what the key costs beyond its header.
    pub fn text_len(&self) -> usize {
        self.as_bytes().len() - self.len()
    }

    /// The first 16 bytes of the packed form, zero-padded, as a big-endian number: keys
    /// ordered by it, then by the key itself on a tie, are in the key's own order (a pad
    /// byte never sorts above a real one). Sorting a round's keys on it reads one flat
    /// array for most comparisons instead of two keys scattered over the heap.
    pub fn sort_prefix(&self) -> u128 {
        let mut b = [0u8; 16];
        let packed = self.as_bytes();
        let n = packed.len().min(16);
        b[..n].copy_from_slice(&packed[..n]);
        u128::from_be_bytes(b)
    }

    /// How many values the key has and how many of them are empty, in one pass over its
    /// bytes (batching a round's keys asks this of each: decoding the values twice per key
    /// was a tenth of the verify round's CPU with the sink idle).
    pub fn value_counts(&self) -> (usize, usize) {
        let (mut values, mut empty) = (0, 0);
        let mut prev_end = true;
        for &b in self.as_bytes() {
            if b == KEY_END {
                values += 1;
                empty += usize::from(prev_end);
                prev_end = true;
            } else {
                prev_end = false;
            }
        }
        (values, empty)
    }
}

struct KeyValues<'a> {
    rest: &'a [u8],
    left: usize,
}

impl<'a> Iterator for KeyValues<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let end = self.rest.iter().position(|&b| b == KEY_END)?;
        let (value, rest) = self.rest.split_at(end);
        self.rest = rest.get(1..).unwrap_or_default();
        self.left = self.left.saturating_sub(1);
        // Only `Key::new` fills the buffer, from `&str`s: every value is valid UTF-8.
        Some(std::str::from_utf8(value).unwrap_or_default())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for KeyValues<'_> {}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Key").field(&self.to_vec()).finish()
    }
}

impl Serialize for Key {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.values())
    }
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Vec::<String>::deserialize(d).map(Key::new)
    }
}
