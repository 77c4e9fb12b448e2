//! A process's memory of which slot of the [`SlotTable`](crate::slots::SlotTable) holds each
//! sequence it used: [`CACHE_ENTRIES`] entries, direct-mapped by the key's hash, so it stays the
//! same size however many sequences a backend goes through (0.4.0 and earlier kept a map that
//! grew by one entry per sequence: 1,000,000 temporary sequences left it holding 1,000,000).
//!
//! An entry is a hint, never trusted: the table re-checks the key under the slot's lock, and a
//! miss (never seen, or pushed out by another key with the same hash) costs one window lookup
//! (`SlotTable::issue`). Atomics only so that a `static` can hold it: a backend is one thread.

use crate::slots::SlotKey;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// How many sequences a process remembers the slot of.
pub const CACHE_ENTRIES: usize = 256;

/// See the module documentation.
pub struct SlotCache {
    /// 0: empty (never a slot key).
    keys: [AtomicU64; CACHE_ENTRIES],
    slots: [AtomicU32; CACHE_ENTRIES],
}

impl Default for SlotCache {
    fn default() -> Self {
        Self::new()
    }
}

impl SlotCache {
    pub const fn new() -> Self {
        SlotCache {
            keys: [const { AtomicU64::new(0) }; CACHE_ENTRIES],
            slots: [const { AtomicU32::new(0) }; CACHE_ENTRIES],
        }
    }

    #[inline(always)]
    fn entry(key: SlotKey) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (u64::BITS - CACHE_ENTRIES.ilog2())) as usize
    }

    /// The slot index last remembered for `key`, if its entry still holds it.
    #[inline(always)]
    pub fn get(&self, key: SlotKey) -> Option<usize> {
        let entry = Self::entry(key);
        (self.keys[entry].load(Ordering::Relaxed) == key)
            .then(|| self.slots[entry].load(Ordering::Relaxed) as usize)
    }

    /// Remembers that `key` is in slot `index` (replacing whatever its entry held).
    #[inline]
    pub fn put(&self, key: SlotKey, index: usize) {
        let entry = Self::entry(key);
        let index = u32::try_from(index).expect("slot indexes fit in 32 bits");
        self.slots[entry].store(index, Ordering::Relaxed);
        self.keys[entry].store(key, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slots::slot_key;

    #[test]
    fn remembers_and_forgets_by_entry() {
        let cache = SlotCache::new();
        let a = slot_key(1, 100);
        assert_eq!(cache.get(a), None);
        cache.put(a, 7);
        assert_eq!(cache.get(a), Some(7));
        let b = (1..)
            .map(|o| slot_key(1, o))
            .find(|&k| k != a && SlotCache::entry(k) == SlotCache::entry(a))
            .unwrap();
        cache.put(b, 9);
        assert_eq!(cache.get(b), Some(9));
        assert_eq!(cache.get(a), None, "b took a's entry");
    }

    #[test]
    fn a_million_sequences_leave_it_the_same_size_and_the_recent_ones_found() {
        let cache = SlotCache::new();
        for n in 0..1_000_000u32 {
            cache.put(slot_key(5, 16_384 + n), n as usize % 8192);
        }
        assert_eq!(std::mem::size_of::<SlotCache>(), CACHE_ENTRIES * 12);
        let last = slot_key(5, 16_384 + 999_999);
        assert_eq!(cache.get(last), Some(999_999 % 8192));
        let remembered = (0..1_000_000u32)
            .filter(|n| cache.get(slot_key(5, 16_384 + n)).is_some())
            .count();
        assert!(remembered <= CACHE_ENTRIES, "{remembered}");
    }

    #[test]
    fn sequences_of_one_database_spread_over_the_entries() {
        let used: std::collections::HashSet<usize> = (0..CACHE_ENTRIES as u32)
            .map(|n| SlotCache::entry(slot_key(16_384, 16_400 + n)))
            .collect();
        assert!(
            used.len() > CACHE_ENTRIES / 2,
            "{} entries used",
            used.len()
        );
    }
}
