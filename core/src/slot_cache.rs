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
    /// The last id it took from it, if remembered.
    pub previous: Option<Previous>,
}

/// See the module documentation.
pub struct SlotCache {
    /// 0: empty (never a slot key).
    keys: [AtomicU64; CACHE_ENTRIES],
    slots: [AtomicU32; CACHE_ENTRIES],
    /// [`pack`]ed previous ids; 0: none.
    previous: [AtomicU64; CACHE_ENTRIES],
}

impl Default for SlotCache {
    fn default() -> Self {
        Self::new()
    }
}

/// A previous id in one word: `(ms + 1) << 16 | remainder`, 0 for none (and for a millisecond
/// outside `0 .. 2^47`, which no id has).
fn pack(previous: Option<Previous>) -> u64 {
    match previous {
        Some(p) if (0..1 << 47).contains(&p.ms) => {
            ((p.ms as u64 + 1) << 16) | u64::from(p.remainder)
        }
        _ => 0,
    }
}

fn unpack(word: u64) -> Option<Previous> {
    (word != 0).then(|| Previous {
        ms: (word >> 16) as i64 - 1,
        remainder: word as u16,
    })
}

impl SlotCache {
    pub const fn new() -> Self {
        SlotCache {
            keys: [const { AtomicU64::new(0) }; CACHE_ENTRIES],
            slots: [const { AtomicU32::new(0) }; CACHE_ENTRIES],
            previous: [const { AtomicU64::new(0) }; CACHE_ENTRIES],
        }
    }

    #[inline(always)]
    fn entry(key: SlotKey) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (u64::BITS - CACHE_ENTRIES.ilog2())) as usize
    }

    /// What was last remembered for `key`, if its entry still holds it.
    #[inline(always)]
    pub fn get(&self, key: SlotKey) -> Option<Entry> {
        let entry = Self::entry(key);
        (self.keys[entry].load(Ordering::Relaxed) == key).then(|| Entry {
            slot: self.slots[entry].load(Ordering::Relaxed) as usize,
            previous: unpack(self.previous[entry].load(Ordering::Relaxed)),
        })
    }

    /// Remembers that `key` is in slot `slot` and that the last id taken from it is `previous`
    /// (replacing whatever its entry held).
    #[inline]
    pub fn put(&self, key: SlotKey, slot: usize, previous: Option<Previous>) {
        let entry = Self::entry(key);
        let slot = u32::try_from(slot).expect("slot indexes fit in 32 bits");
        self.slots[entry].store(slot, Ordering::Relaxed);
        self.previous[entry].store(pack(previous), Ordering::Relaxed);
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
        let previous = Some(Previous {
            ms: 3,
            remainder: 1023,
        });
        cache.put(a, 7, previous);
        assert_eq!(cache.get(a), Some(Entry { slot: 7, previous }));
        let b = (1..)
            .map(|o| slot_key(1, o))
            .find(|&k| k != a && SlotCache::entry(k) == SlotCache::entry(a))
            .unwrap();
        cache.put(b, 9, None);
        assert_eq!(
            cache.get(b),
            Some(Entry {
                slot: 9,
                previous: None
            }),
            "b's entry carries none of a's previous id"
        );
        assert_eq!(cache.get(a), None, "b took a's entry");
    }

    #[test]
    fn previous_ids_round_trip_through_one_word() {
        for (ms, remainder) in [(0, 0), (0, 1023), (1, 5), (crate::layout::MAX_MS, 1023)] {
            let p = Some(Previous { ms, remainder });
            assert_eq!(unpack(pack(p)), p, "{ms} {remainder}");
        }
        assert_eq!(unpack(pack(None)), None);
        assert_eq!(
            pack(Some(Previous {
                ms: -1,
                remainder: 3
            })),
            0,
            "no id is before the epoch: remembered as none"
        );
    }

    #[test]
    fn a_million_sequences_leave_it_the_same_size_and_the_recent_ones_found() {
        let cache = SlotCache::new();
        for n in 0..1_000_000u32 {
            cache.put(slot_key(5, 16_384 + n), n as usize % 8192, None);
        }
        assert_eq!(std::mem::size_of::<SlotCache>(), CACHE_ENTRIES * 20);
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
