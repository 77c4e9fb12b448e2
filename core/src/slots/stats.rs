//! The guards' statistics (`pg_shard_id_stats`): read, reset and added to one slot lock at a time.

use super::{SlotKey, SlotTable};
use crate::guard::Counts;
use std::sync::atomic::Ordering;

/// One slot's sequence and its guard's statistics, copied under the slot's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceStats {
    pub key: SlotKey,
    /// The last millisecond issued (ms since the epoch), or the floor it starts from.
    pub last_ms: Option<i64>,
    /// The data floor that raised the guard, if one did (ms since the epoch).
    pub data_floor: Option<i64>,
    /// Whether the guard still waits for its data floor (it has issued nothing since its slot
    /// was claimed or it was told to read again).
    pub awaiting_data_floor: bool,
    pub counts: Counts,
}

impl SlotTable {
    /// The statistics of every sequence that has a slot (`pg_shard_id_stats`). Takes each slot's
    /// lock in turn, briefly: a reader never holds two.
    pub fn stats(&self) -> Vec<SequenceStats> {
        (0..self.capacity())
            .filter_map(|i| {
                let slot = self.slot(i);
                if slot.key.load(Ordering::Acquire) == 0 {
                    return None;
                }
                let _lock = slot.lock.lock();
                // SAFETY: the slot's lock is held.
                let state = unsafe { &*slot.state.get() };
                Some(SequenceStats {
                    key: slot.key.load(Ordering::Relaxed),
                    last_ms: state.last_ms(),
                    data_floor: state.data_floor(),
                    awaiting_data_floor: state.is_awaiting_data_floor(),
                    counts: state.counts,
                })
            })
            .collect()
    }

    /// Zeroes every sequence's statistics (`pg_shard_id_stats_reset()`).
    pub fn reset_stats(&self) {
        for i in 0..self.capacity() {
            let slot = self.slot(i);
            let _lock = slot.lock.lock();
            // SAFETY: the slot's lock is held.
            unsafe { (*slot.state.get()).counts = Counts::default() };
        }
    }

    /// Adds to the statistics of `key`'s guard, if `key` still has a slot (a caller that waited
    /// or extended the lease reports it afterwards, on its slow path).
    pub fn count(&self, key: SlotKey, add: impl FnOnce(&mut Counts)) {
        let Some(index) = self.find(key) else { return };
        let slot = self.slot(index);
        let _lock = slot.lock.lock();
        if slot.key.load(Ordering::Relaxed) == key {
            // SAFETY: the slot's lock is held.
            add(unsafe { &mut (*slot.state.get()).counts });
        }
    }
}
