//! A hash map split into many small tables, so that it grows a little at a time.
//!
//! One hash table doubles when it passes 7/8 full, and holds both tables while it moves:
//! a map whose size hovers around a power of two (the key book in a total loss: pending
//! records plus `max_missing_keys`) jumps by its whole size minutes into a steady state. A
//! B-tree grows smoothly but costs a cache miss per level: ~5x slower per record for a
//! million keys, which the tailing benchmark showed. Here each of [`SHARDS`] tables doubles
//! on its own, when its own share passes its mark. Equal shares would all pass their marks
//! together (one doubling again, in 1,024 pieces), so the shares are unequal on purpose:
//! shard `i` takes a share proportional to `2^(i / SHARDS)`, which spreads their doubling
//! points evenly over every factor of two of the key count. Memory then follows the number
//! of keys nearly linearly, and a lookup costs one hash and a binary search more.

use foldhash::fast::RandomState;
use hashbrown::HashTable;
use std::hash::{BuildHasher, Hash};

/// Tables per map; an empty one costs 32 bytes.
pub const SHARDS: usize = 1024;

/// A shard's table is shrunk only above this many buckets: smaller ones cost little, and
/// they are what a steady key count keeps rebuilding.
const SHRINK_ABOVE: usize = 64;

/// Upper ends of the shards' hash ranges (see the module docs): shard `i` owns hashes up
/// to `BOUNDS[i]`, a range proportional to `2^(i / SHARDS)`.
fn bounds() -> &'static [u64] {
    static BOUNDS: std::sync::OnceLock<Vec<u64>> = std::sync::OnceLock::new();
    BOUNDS.get_or_init(|| {
        let w: Vec<f64> = (0..SHARDS)
            .map(|i| (i as f64 / SHARDS as f64).exp2())
            .collect();
        let total: f64 = w.iter().sum();
        let mut acc = 0.0;
        let mut out: Vec<u64> = w
            .iter()
            .map(|x| {
                acc += x;
                (acc / total * u64::MAX as f64) as u64
            })
            .collect();
        if let Some(last) = out.last_mut() {
            *last = u64::MAX;
        }
        out
    })
}

/// The hash a shard's table files a key under. The shard was chosen by the hash's high
/// bits, so within one shard they are nearly constant: the table must not see them where
/// it takes its 7-bit tags (the top bits), or every probe would match every tag.
fn in_shard(h: u64) -> u64 {
    h.rotate_left(32)
}

/// Top bits of a [`ShardedMap::hash`] that [`in_map_order`] groups by: 1,024 groups, each
/// within one or two shards' ranges.
const ORDER_BITS: u32 = 10;

/// Puts `items` in an order that walks a [`ShardedMap`] shard by shard: grouped by the
/// top bits of `hash(item)` (the item's [`ShardedMap::hash`]), groups ascending, in no
/// particular order within a group. That is all the cache needs of an order by hash (each
/// shard's small table is visited once). Sorting by the whole hash was 4 % of the
/// daemon's samples on key_columns; on 1,024 distinct values the standard unstable sort
/// (pattern-defeating quicksort, which splits off runs of equal keys) did as well as a
/// counting pass into a copy in alternating runs of the criterion bench of the key book's
/// round (399-463 ms against 403-528 ms; docs/BENCHMARKS.md) and better than an in-place
/// radix pass (487-590 ms), and it needs no memory: the key book's queue of pends can
/// hold `max_pending` entries.
pub fn in_map_order<T>(items: &mut [T], hash: impl Fn(&T) -> u64) {
    items.sort_unstable_by_key(|t| hash(t) >> (64 - ORDER_BITS));
}

/// A hash map in [`SHARDS`] parts (see the module docs).
///
/// Hashed once per operation with foldhash, seeded at random per map: the keys are record
/// contents (hostile), and an attacker who cannot see the seed cannot choose colliding
/// keys. foldhash is hashbrown's default hasher for that trade; SipHash, std's, cost two
/// hashes per lookup here (shard and table) and was the daemon's top symbol in the
/// key_columns profile. Should collisions be forced anyway, one shard's table slows down:
/// the auditor gets slower, its verdicts stay the same.
#[derive(Clone)]
pub struct ShardedMap<K, V> {
    /// Each entry keeps the hash its table files it under: a table that grows moves its
    /// entries without reading a key (each one a cache miss on a million keys), and a probe
    /// whose 7-bit tag matches by chance is told apart without reading one either.
    shards: Vec<HashTable<(K, V, u64)>>,
    hasher: RandomState,
    len: usize,
}

impl<K, V> std::fmt::Debug for ShardedMap<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedMap")
            .field("len", &self.len)
            .finish()
    }
}

impl<K: Hash + Eq, V> Default for ShardedMap<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Hash + Eq, V> ShardedMap<K, V> {
    /// An empty map (no table allocated until a key arrives in a shard).
    pub fn new() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| HashTable::new()).collect(),
            hasher: RandomState::default(),
            len: 0,
        }
    }

    /// The shard of `k` and the hash its table files it under.
    fn locate(&self, k: &K) -> (usize, u64) {
        Self::locate_hash(self.hash(k))
    }

    /// The shard of a key of hash `h` ([`Self::hash`]) and the hash its table files it under.
    fn locate_hash(h: u64) -> (usize, u64) {
        let s = bounds().partition_point(|b| *b < h).min(SHARDS - 1);
        (s, in_shard(h))
    }

    /// The hash this map files `k` under. Shards own ascending ranges of it, so keys
    /// visited in its order ([`Self::get_or_default_hashed`]) go through the map shard by
    /// shard: a batch of lookups that covers a sizeable part of the map then walks each
    /// small table once, from the cache, where random order missed it on nearly every key.
    pub fn hash(&self, k: &K) -> u64 {
        self.hasher.hash_one(k)
    }

    /// The table hash of an entry already stored (for moving entries when a table resizes).
    fn rehash(e: &(K, V, u64)) -> u64 {
        e.2
    }

    /// The value of `k`.
    pub fn get(&self, k: &K) -> Option<&V> {
        let (s, h) = self.locate(k);
        self.shards[s]
            .find(h, |(x, _, xh)| *xh == h && x == k)
            .map(|(_, v, _)| v)
    }

    /// The value of `k`, to change.
    pub fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        let (s, h) = self.locate(k);
        self.shards[s]
            .find_mut(h, |(x, _, xh)| *xh == h && x == k)
            .map(|(_, v, _)| v)
    }

    /// Whether `k` is in the map.
    pub fn contains_key(&self, k: &K) -> bool {
        self.get(k).is_some()
    }

    /// Sets `k` to `v`; the old value, if any.
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        let (s, h) = self.locate(&k);
        match self.shards[s].entry(h, |(x, _, xh)| *xh == h && *x == k, Self::rehash) {
            hashbrown::hash_table::Entry::Occupied(mut e) => {
                Some(std::mem::replace(&mut e.get_mut().1, v))
            }
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert((k, v, h));
                self.len += 1;
                None
            }
        }
    }

    /// The value of `k`, inserted as `V::default()` when absent (`k` cloned only then).
    pub fn get_or_default(&mut self, k: &K) -> &mut V
    where
        K: Clone,
        V: Default,
    {
        self.get_or_default_hashed(k, self.hash(k))
    }

    /// [`Self::get_or_default`] with `k`'s hash given: `h` must be [`Self::hash`] of `k`.
    pub fn get_or_default_hashed(&mut self, k: &K, h: u64) -> &mut V
    where
        K: Clone,
        V: Default,
    {
        debug_assert_eq!(h, self.hash(k), "a hash from another map or key");
        let (s, h) = Self::locate_hash(h);
        match self.shards[s].entry(h, |(x, _, xh)| *xh == h && x == k, Self::rehash) {
            hashbrown::hash_table::Entry::Occupied(e) => &mut e.into_mut().1,
            hashbrown::hash_table::Entry::Vacant(e) => {
                self.len += 1;
                &mut e.insert((k.clone(), V::default(), h)).into_mut().1
            }
        }
    }

    /// The entry of `k` (moved in as `V::default()` when absent, else dropped), whose hash
    /// [`Self::hash`] is `h`: the key stored and its value.
    pub fn get_or_insert_hashed(&mut self, k: K, h: u64) -> (&K, &mut V)
    where
        V: Default,
    {
        debug_assert_eq!(h, self.hash(&k), "a hash from another map or key");
        let (s, h) = Self::locate_hash(h);
        match self.shards[s].entry(h, |(x, _, xh)| *xh == h && *x == k, Self::rehash) {
            hashbrown::hash_table::Entry::Occupied(e) => {
                let (k, v, _) = e.into_mut();
                (&*k, v)
            }
            hashbrown::hash_table::Entry::Vacant(e) => {
                self.len += 1;
                let (k, v, _) = e.insert((k, V::default(), h)).into_mut();
                (&*k, v)
            }
        }
    }

    /// Takes `k` out.
    pub fn remove(&mut self, k: &K) -> Option<V> {
        let h = self.hash(k);
        self.remove_where(h, |(x, _)| x == k).map(|(_, v)| v)
    }

    /// Removes the entry filed under hash `h` ([`Self::hash`] of its key) whose value
    /// `when` holds for, with one probe and without reading a key: the caller's `when`
    /// must single one entry out (the key book's idle stamps do: each is given once).
    /// The key and value removed.
    pub fn remove_by_hash_if(&mut self, h: u64, when: impl Fn(&V) -> bool) -> Option<(K, V)> {
        self.remove_where(h, |(_, v)| when(v))
    }

    /// Removes the entry filed under hash `h` for which `is` holds.
    fn remove_where(&mut self, h: u64, is: impl Fn((&K, &V)) -> bool) -> Option<(K, V)> {
        let (s, h) = Self::locate_hash(h);
        let shard = &mut self.shards[s];
        let ((k, v, _), _) = shard
            .find_entry(h, |(x, v, xh)| *xh == h && is((x, v)))
            .ok()?
            .remove();
        self.len -= 1;
        // A table never shrinks by itself, so each shard would keep the largest size it
        // ever reached, and over a long incident the sum of 1,024 separate peaks creeps
        // far above the map's own peak (measured: +10 MiB in 4 minutes of a total loss
        // whose key count only fluctuated). Shrinking a shard that is under a quarter
        // full to twice its keys leaves it half full: a shard must lose half its keys
        // again, or double them, before its table moves again, so no key count makes
        // it resize back and forth.
        if shard.capacity() > SHRINK_ABOVE && shard.len() * 4 < shard.capacity() {
            shard.shrink_to(shard.len() * 2, Self::rehash);
        }
        Some((k, v))
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every key and value, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards
            .iter()
            .flat_map(|t| t.iter().map(|(k, v, _)| (k, v)))
    }

    /// Every value, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }

    /// Buckets allocated over all shards (memory tests).
    pub fn capacity(&self) -> usize {
        self.shards.iter().map(HashTable::capacity).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    proptest! {
        #![proptest_config(crate::test_seed::config())]
        /// Same answers as one HashMap, whatever the operations.
        #[test]
        fn behaves_like_a_hash_map(ops in proptest::collection::vec((0u8..4, 0u16..300, any::<u32>()), 0..2000)) {
            let mut a: ShardedMap<u16, u32> = ShardedMap::new();
            let mut b: HashMap<u16, u32> = HashMap::new();
            for (op, k, v) in ops {
                match op {
                    0 => prop_assert_eq!(a.insert(k, v), b.insert(k, v)),
                    1 => prop_assert_eq!(a.remove(&k), b.remove(&k)),
                    2 => {
                        *a.get_or_default(&k) += 1;
                        *b.entry(k).or_default() += 1;
                    }
                    _ => {
                        if let Some(x) = a.get_mut(&k) { *x ^= v; }
                        if let Some(x) = b.get_mut(&k) { *x ^= v; }
                    }
                }
                prop_assert_eq!(a.len(), b.len());
                prop_assert_eq!(a.get(&k), b.get(&k));
                prop_assert_eq!(a.contains_key(&k), b.contains_key(&k));
            }
            let mut av: Vec<u32> = a.values().copied().collect();
            let mut bv: Vec<u32> = b.values().copied().collect();
            av.sort_unstable();
            bv.sort_unstable();
            prop_assert_eq!(av, bv);
        }
    }

    /// The point of the shards: no step in memory. Growing a map from 100,000 to 120,000
    /// keys passes the 7/8 mark of a 131,072-bucket table (one table would double, to
    /// 262,144 buckets); the shards grow by a fraction of that. The keys are what the key
    /// book files (a record's key values as bytes): with sequential `u64` keys, about one
    /// random seed in ten spread them unevenly over the shards under foldhash's fast hash
    /// (1.12x or 1.49x instead of 1.2x; CI of 4e547bf failed at 1.33x), a key shape the
    /// daemon never hashes.
    #[test]
    fn grows_in_small_steps() {
        type Map = ShardedMap<Vec<u8>, u64>;
        let key = |k: u64| {
            format!(
                "10.{}.{}.{}|host{k}.example.com|2026-12-06 02:14:{:02}",
                k >> 16,
                (k >> 8) & 255,
                k & 255,
                k % 60
            )
            .into_bytes()
        };
        let mut m: Map = ShardedMap::new();
        let mut one: HashMap<Vec<u8>, u64> = HashMap::new();
        let step = |n: u64, m: &mut Map, one: &mut HashMap<Vec<u8>, u64>| {
            for k in m.len() as u64..n {
                m.insert(key(k), k);
                one.insert(key(k), k);
            }
            (m.capacity(), one.capacity())
        };
        let (s100, o100) = step(100_000, &mut m, &mut one);
        let (s120, o120) = step(120_000, &mut m, &mut one);
        assert!(o120 >= 2 * o100, "one table doubles: {o100} -> {o120}");
        let growth = s120 as f64 / s100 as f64;
        eprintln!("buckets: one table {o100} -> {o120}, shards {s100} -> {s120} ({growth:.3}x)");
        assert!(
            growth < 1.3,
            "shards grew {growth:.2}x ({s100} -> {s120} buckets) for 1.2x the keys"
        );
    }

    /// A drained map gives its tables back: after 200,000 keys and all but 10,000 of them
    /// removed, the shards hold about what the 10,000 need (at most [`SHRINK_ABOVE`]
    /// buckets each, or twice their keys), not their 200,000-key peak. Without shrinking
    /// they kept over 200,000 buckets.
    #[test]
    fn shrinks_when_drained() {
        let mut m: ShardedMap<u64, u64> = ShardedMap::new();
        for k in 0..200_000 {
            m.insert(k, k);
        }
        let peak = m.capacity();
        for k in 10_000..200_000 {
            m.remove(&k);
        }
        let bound = SHARDS * SHRINK_ABOVE + 4 * m.len();
        eprintln!(
            "buckets: {peak} at 200,000 keys, {} at 10,000",
            m.capacity()
        );
        assert!(peak > bound, "the test needs a peak above the bound");
        assert!(
            m.capacity() <= bound,
            "{} buckets for {} keys (bound {bound})",
            m.capacity(),
            m.len()
        );
        for k in 0..10_000 {
            assert_eq!(m.get(&k), Some(&k));
        }
    }

    /// [`in_map_order`] groups by the hash's top bits, ascending, and loses or repeats
    /// nothing.
    #[test]
    fn map_order_groups_by_the_top_bits_and_keeps_every_item() {
        for n in [0usize, 1, 100, 50_000] {
            let mut rng = 0x9e37_79b9_7f4a_7c15u64;
            let items: Vec<(u64, usize)> = (0..n)
                .map(|i| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    // Few distinct groups too, so that groups hold many items.
                    let h = if i % 3 == 0 {
                        rng & !(u64::MAX >> 3)
                    } else {
                        rng
                    };
                    (h, i)
                })
                .collect();
            let mut out = items.clone();
            in_map_order(&mut out, |t| t.0);
            let group = |t: &(u64, usize)| t.0 >> (64 - ORDER_BITS);
            for w in out.windows(2) {
                assert!(group(&w[0]) <= group(&w[1]), "n {n}: {w:?} out of order");
            }
            let mut seen: Vec<(u64, usize)> = out.clone();
            seen.sort_unstable_by_key(|t| t.1);
            assert_eq!(seen, items, "n {n}: items lost, repeated or changed");
        }
    }

    /// [`ShardedMap::remove_by_hash_if`] removes the one entry under the hash whose value
    /// passes, leaves it when none does, and keeps the count right.
    #[test]
    fn removes_by_hash_and_value_without_the_key() {
        let mut m: ShardedMap<u64, u64> = ShardedMap::new();
        for k in 0..1_000 {
            m.insert(k, k * 10);
        }
        let h = m.hash(&7);
        assert_eq!(
            m.remove_by_hash_if(h, |v| *v == 71),
            None,
            "no value passes"
        );
        assert_eq!(m.len(), 1_000);
        assert_eq!(m.remove_by_hash_if(h, |v| *v == 70), Some((7, 70)));
        assert_eq!(m.len(), 999);
        assert_eq!(m.get(&7), None);
        assert_eq!(m.remove_by_hash_if(h, |_| true), None, "gone");
        assert_eq!(m.get(&8), Some(&80));
    }
}
