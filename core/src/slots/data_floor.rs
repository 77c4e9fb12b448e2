//! Fresh guards that wait for their data floor: the newest id stored for their sequence, which the
//! extension reads from the sequence's DEFAULT columns (`src/data_floor/`) before the first id.

use super::{SlotKey, SlotTable};
use crate::guard::{FloorRequest, GuardState};
use std::sync::atomic::Ordering;

impl SlotTable {
    /// From now on, a guard given a slot (a sequence's first id since the server started, or
    /// since its slot was taken from it, unless it comes back with its data floor read before:
    /// `SlotTable::hand_over`) issues nothing until it is told the newest id stored for
    /// its sequence: it answers [`crate::guard::Decision::ReadDataFloor`] and the caller reads the data and
    /// calls [`SlotTable::settle_data_floor`]. The extension's tables do; tests choose.
    pub fn ask_for_data_floors(&self) {
        // request numbers start at 1; asking twice changes nothing
        let _ = self.header().data_floor_requests.compare_exchange(
            0,
            1,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// A new request number for a guard that is to wait for its data floor, if the table asks
    /// for data floors. Unique while the server runs (2^64 requests).
    pub(super) fn next_floor_request(&self) -> Option<FloorRequest> {
        let requests = &self.header().data_floor_requests;
        if requests.load(Ordering::Relaxed) == 0 {
            return None;
        }
        FloorRequest::new(requests.fetch_add(1, Ordering::Relaxed))
    }

    /// Answers `request` of `key`'s guard: if it still has its slot and waits on that request,
    /// its ids must start at `floor` (ms since the epoch) or later; `None`: nothing is stored. A
    /// guard given away meanwhile gets a fresh slot, and a new request, at its next id; a guard
    /// made to wait again (`shard_id_resync()`) waits on a new request.
    pub fn settle_data_floor(&self, key: SlotKey, request: FloorRequest, floor: Option<i64>) {
        let Some(index) = self.find(key) else { return };
        let slot = self.slot(index);
        let _lock = slot.lock.lock();
        if slot.key.load(Ordering::Relaxed) == key {
            // SAFETY: the slot's lock is held.
            unsafe { (*slot.state.get()).settle_data_floor(request, floor) };
        }
    }

    /// Makes `key`'s guard, if it has a slot and the table asks for data floors, wait for its
    /// data floor again before its next id (rows were loaded into a live table:
    /// `shard_id_resync()`), on a new request, which it returns: reads begun before now answer
    /// older requests and settle nothing. An evicted sequence reads it when it comes back.
    pub fn forget_data_floor(&self, key: SlotKey) -> Option<FloorRequest> {
        // keys change only under the claim lock: with it held, a key without a slot gets none
        let _claim = self.header().claim_lock.lock();
        let Some(index) = self.find(key) else {
            // an evicted sequence reads its data floor when it comes back
            self.unsettle_evicted(key);
            return None;
        };
        let slot = self.slot(index);
        let _lock = slot.lock.lock();
        if slot.key.load(Ordering::Relaxed) != key {
            return None;
        }
        let request = self.next_floor_request()?;
        // SAFETY: the slot's lock is held.
        let state = unsafe { &mut *slot.state.get() };
        let counts = state.counts;
        // one past the last millisecond issued: its used remainders are forgotten with the rest
        let floor = state.last_ms().map_or(i64::MIN, |ms| ms.saturating_add(1));
        *state = GuardState::awaiting_data_floor(floor, request);
        state.counts = counts;
        Some(request)
    }

    /// Ids at past times of `key` were handed out in milliseconds up to `ms`, with the clock
    /// reading `now` (`GuardState::keep_above`): its guard issues only above `ms` from here on.
    /// A sequence without a slot keeps it as an evicted one does ([`SlotTable::keep_evicted`]),
    /// so that it costs no slot and its guard starts above it when it gets one (reading its data
    /// floor then unless it was read before its eviction).
    pub fn keep_above(&self, key: SlotKey, ms: i64, now: i64) {
        let apply = |index: usize| {
            let slot = self.slot(index);
            let _lock = slot.lock.lock();
            if slot.key.load(Ordering::Relaxed) != key {
                return false;
            }
            // SAFETY: the slot's lock is held.
            unsafe { (*slot.state.get()).keep_above(ms, now) };
            true
        };
        if self.find(key).is_some_and(apply) {
            return;
        }
        // (keys change only under the claim lock: with it held, a key without a slot keeps none)
        let _claim = self.header().claim_lock.lock();
        if !self.find(key).is_some_and(apply) {
            self.keep_evicted(key, ms.saturating_add(1), false);
        }
    }
}
