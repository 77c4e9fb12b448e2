//! A process's memory of which slot of the [`SlotTable`](crate::slots::SlotTable) holds each
//! sequence it used, and of the last id it took from it: [`CACHE_ENTRIES`] entries, direct-mapped
//! by the key's hash, so it stays the same size however many sequences a backend goes through
//! (0.4.0 and earlier kept a map that grew by one entry per sequence: 1,000,000 temporary
//! sequences left it holding 1,000,000).
//!
//! An entry is a hint, never trusted: the table re-checks the key under the slot's lock, and a
//! miss (never seen, or pushed out by another key with the same hash) costs one window lookup
//! (`SlotTable::issue`). The previous id only tells the guard's wrap rule which remainder this
//! process drew last ([`GuardState::issue_after`](crate::guard::GuardState::issue_after)); a
//! miss there falls back to the millisecond's highest remainder, and uniqueness never depends on
//! it. Atomics only so that a `static` can hold it: a backend is one thread.

use crate::guard::Previous;
use crate::slots::SlotKey;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// How many sequences a process remembers the slot of.
pub const CACHE_ENTRIES: usize = 256;

/// What a process remembers of one sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// The slot that held it.
    pub slot: usize,
    /// The last id it took from it, or [`Previous::UNKNOWN`].
    pub previous: Previous,
}

/// See the module documentation.
pub struct SlotCache {
    entries: [Remembered; CACHE_ENTRIES],
}

/// One entry, its words side by side: 32 bytes at a multiple of 32, so that an entry never
/// straddles two cache lines (one line to read and write per id).
#[repr(C, align(32))]
struct Remembered {
    /// 0: empty (never a slot key).
    key: AtomicU64,
    /// [`Previous::to_bits`].
    previous: AtomicU64,
    slot: AtomicU32,
}

impl Default for SlotCache {
    fn default() -> Self {
        Self::new()
    }
}

impl SlotCache {
    pub const fn new() -> Self {
        SlotCache {
            entries: [const {
                Remembered {
                    key: AtomicU64::new(0),
                    previous: AtomicU64::new(0),
                    slot: AtomicU32::new(0),
                }
            }; CACHE_ENTRIES],
        }
    }

    #[inline(always)]
    fn entry(key: SlotKey) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (u64::BITS - CACHE_ENTRIES.ilog2())) as usize
    }

    /// What was last remembered for `key`, if its entry still holds it.
    #[inline(always)]
    pub fn get(&self, key: SlotKey) -> Option<Entry> {
        let e = &self.entries[Self::entry(key)];
        (e.key.load(Ordering::Relaxed) == key).then(|| Entry {
            slot: e.slot.load(Ordering::Relaxed) as usize,
            previous: Previous::from_bits(e.previous.load(Ordering::Relaxed)),
        })
    }

    /// Remembers `previous` as the last id taken from `key`, whose entry [`SlotCache::get`] just
    /// found (if another key took the entry since, the hint only misleads the wrap rule of that
    /// key's next id, never uniqueness; a backend is one thread, so it does not happen).
    #[inline(always)]
    pub fn set_previous(&self, key: SlotKey, previous: Previous) {
        self.entries[Self::entry(key)]
            .previous
            .store(previous.to_bits(), Ordering::Relaxed);
    }

    /// Remembers that `key` is in slot `slot` and that the last id taken from it is `previous`
    /// (replacing whatever its entry held).
    #[inline(always)]
    pub fn put(&self, key: SlotKey, slot: usize, previous: Previous) {
        let e = &self.entries[Self::entry(key)];
        let slot = u32::try_from(slot).expect("slot indexes fit in 32 bits");
        e.slot.store(slot, Ordering::Relaxed);
        e.previous.store(previous.to_bits(), Ordering::Relaxed);
        e.key.store(key, Ordering::Relaxed);
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
        let previous = Previous::new(3, 1023);
        cache.put(a, 7, previous);
        assert_eq!(cache.get(a), Some(Entry { slot: 7, previous }));
        let b = (1..)
            .map(|o| slot_key(1, o))
            .find(|&k| k != a && SlotCache::entry(k) == SlotCache::entry(a))
            .unwrap();
        cache.put(b, 9, Previous::UNKNOWN);
        assert_eq!(
            cache.get(b),
            Some(Entry {
                slot: 9,
                previous: Previous::UNKNOWN
            }),
            "b's entry carries none of a's previous id"
        );
        assert_eq!(cache.get(a), None, "b took a's entry");
    }

    #[test]
    fn a_million_sequences_leave_it_the_same_size_and_the_recent_ones_found() {
        let cache = SlotCache::new();
        for n in 0..1_000_000u32 {
            cache.put(
                slot_key(5, 16_384 + n),
                n as usize % 8192,
                Previous::UNKNOWN,
            );
        }
        assert_eq!(std::mem::size_of::<SlotCache>(), CACHE_ENTRIES * 32);
        assert_eq!(std::mem::align_of::<SlotCache>(), 32);
        let last = slot_key(5, 16_384 + 999_999);
        assert_eq!(cache.get(last).map(|e| e.slot), Some(999_999 % 8192));
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
