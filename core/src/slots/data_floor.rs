//! Fresh guards that wait for their data floor: the newest id stored for their sequence, which the
//! extension reads from the sequence's DEFAULT columns (`src/data_floor.rs`) before the first id.

use super::{SlotKey, SlotTable};
use crate::guard::GuardState;
use std::sync::atomic::Ordering;

impl SlotTable {
    /// From now on, a guard given a slot (a sequence's first id since the server started, or
    /// since its slot was taken from it) issues nothing until it is told the newest id stored for
    /// its sequence: it answers [`crate::guard::Decision::ReadDataFloor`] and the caller reads the data and
    /// calls [`SlotTable::settle_data_floor`]. The extension's tables do; tests choose.
    pub fn ask_for_data_floors(&self) {
        self.header().data_floors.store(1, Ordering::Relaxed);
    }

    /// Tells `key`'s guard, if it still has a slot and waits for its data floor, that its ids
    /// must start at `floor` (ms since the epoch) or later; `None`: nothing is stored. A guard
    /// given away meanwhile gets a fresh slot at its next id and asks again.
    pub fn settle_data_floor(&self, key: SlotKey, floor: Option<i64>) {
        let Some(index) = self.find(key) else { return };
        let slot = self.slot(index);
        let _lock = slot.lock.lock();
        if slot.key.load(Ordering::Relaxed) == key {
            // SAFETY: the slot's lock is held.
            unsafe { (*slot.state.get()).settle_data_floor(floor) };
        }
    }

    /// Makes `key`'s guard, if it has a slot, wait for its data floor again before its next id
    /// (rows were loaded into a live table: `shard_id_resync()`). Returns whether it had a slot.
    pub fn forget_data_floor(&self, key: SlotKey) -> bool {
        let Some(index) = self.find(key) else {
            return false;
        };
        let slot = self.slot(index);
        let _lock = slot.lock.lock();
        if slot.key.load(Ordering::Relaxed) != key {
            return false;
        }
        // SAFETY: the slot's lock is held.
        let state = unsafe { &mut *slot.state.get() };
        let counts = state.counts;
        // one past the last millisecond issued: its used remainders are forgotten with the rest
        let floor = state.last_ms().map_or(i64::MIN, |ms| ms.saturating_add(1));
        *state = GuardState::awaiting_data_floor(floor);
        state.counts = counts;
        true
    }
}
