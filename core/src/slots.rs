//! A fixed-size table of [`GuardState`]s, one per sequence, that lives in one block of memory
//! shared by many processes (PostgreSQL shared memory in the extension, a `Vec` in tests).
//!
//! * Each slot has its own spinlock; the guard's critical section is short (about 150 instructions
//!   per id by `bench/profile.sh`, and one read of the clock), so a spinlock is the right tool (as
//!   for PostgreSQL's own `slock_t`). Nothing that can raise an error runs while a lock is held.
//! * A slot's key is `(database oid, sequence oid)`. A key lives in its *window*: the
//!   [`WINDOW_SLOTS`] slots from the one its hash names. Keys are claimed under one table-wide
//!   claim lock, so one key never gets two slots, and slots never become empty again, so a lookup
//!   stops at the window's first empty slot. Lock order: the claim lock, then one slot lock.
//! * **Costs do not grow with the table.** Finding a key reads at most its window, without the
//!   claim lock; claiming reads at most its window with it (before 0.4.0 a claim in a full table
//!   scanned every slot, twice: 17 ms with the lock held at 2^20 slots, `examples/claim_cost.rs`).
//! * **The table is never full.** When a key's window is taken, the least recently used slot of
//!   the window is given to the new sequence, and the evicted guard's last millisecond, plus one,
//!   goes into the table's *floor*: every guard created from then on starts at or above it. A
//!   sequence that comes back after its slot was taken therefore issues above everything it issued
//!   before, and no amount of churn (say, a role creating thousands of temporary sequences) can
//!   make another sequence fail or repeat. The same floor carries the lease file's value after a
//!   restart.
//! * Claiming a slot and issuing its first id happen in one critical section, so a claimed slot
//!   cannot be evicted before its claimer has used it: every call makes progress.

use crate::guard::{Counts, Decision, GuardState, Overflow};
use crate::layout::LayoutError;
use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// `(database oid << 32) | sequence oid`; 0 marks an empty slot.
pub type SlotKey = u64;

/// The key of a sequence in a database.
pub const fn slot_key(database_oid: u32, sequence_oid: u32) -> SlotKey {
    ((database_oid as u64) << 32) | sequence_oid as u64
}

/// The sequence oid of a key.
pub const fn sequence_of(key: SlotKey) -> u32 {
    key as u32
}

/// The database oid of a key.
pub const fn database_of(key: SlotKey) -> u32 {
    (key >> 32) as u32
}

/// How many slots a key may live in: the one its hash names and the ones after it (wrapping).
/// Lookups, claims and evictions read at most this many slots, whatever the table's size. 32:
/// at the default 8192 slots, a window is full (so a claim evicts although other slots are free)
/// with a chance below 1e-9 while a quarter of the slots are taken.
pub const WINDOW_SLOTS: usize = 32;

/// Shared memory per slot, in bytes (the `pg_shard_id.max_sequences` description quotes it).
pub const SLOT_BYTES: usize = std::mem::size_of::<Slot>();

/// A test-and-test-and-set spinlock on one 32-bit word, usable across processes.
#[repr(C)]
pub struct SpinLock(AtomicU32);

impl SpinLock {
    const fn new() -> Self {
        SpinLock(AtomicU32::new(0))
    }

    fn lock(&self) -> SpinGuard<'_> {
        let mut spins = 0u32;
        loop {
            if self
                .0
                .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                return SpinGuard(self);
            }
            while self.0.load(Ordering::Relaxed) != 0 {
                spins = spins.wrapping_add(1);
                if spins.is_multiple_of(128) {
                    // The holder may have been descheduled: give it the core.
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

struct SpinGuard<'a>(&'a SpinLock);

impl Drop for SpinGuard<'_> {
    fn drop(&mut self) {
        (self.0).0.store(0, Ordering::Release);
    }
}

#[repr(C)]
struct Header {
    capacity: usize,
    in_use: AtomicUsize,
    evictions: AtomicU64,
    /// How many times the lease was extended (file, WAL record, flush).
    lease_writes: AtomicU64,
    /// 1 when the server started without a lease file (a new data directory).
    started_without_lease: AtomicU64,
    /// The lease in force (Unix ms), see [`crate::lease`]: no id above it may be issued.
    lease: AtomicI64,
    /// The epoch recorded for this server's ids (Unix ms) when the configured one is later, so
    /// that ids are refused; `i64::MIN`: not refused. Here, not in a process's memory, because the
    /// startup process (replaying a lease record) may set it, and every backend must see it.
    refused_epoch: AtomicI64,
    /// The floor under fresh guards, in the guards' units (ms since the epoch); `i64::MIN`: none.
    floor: AtomicI64,
    /// 1 when fresh guards wait for their data floor ([`SlotTable::ask_for_data_floors`]).
    data_floors: AtomicU64,
    /// The data floor of sequences that no column's DEFAULT draws from, in a database whose ids
    /// were made by another server or database (ms since the epoch; `i64::MIN`: none).
    elsewhere_floor: AtomicI64,
    claim_lock: SpinLock,
}

#[repr(C)]
struct Slot {
    lock: SpinLock,
    key: AtomicU64,
    /// The clock reading of the last claim or issue: what "least recently used" means.
    last_used: AtomicI64,
    /// Written only with `lock` held.
    state: UnsafeCell<GuardState>,
}

/// One slot's sequence and its guard's statistics, copied under the slot's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SequenceStats {
    pub key: SlotKey,
    /// The last millisecond issued (ms since the epoch), or the floor it starts from.
    pub last_ms: Option<i64>,
    /// The data floor that raised the guard, if one did (ms since the epoch).
    pub data_floor: Option<i64>,
    pub counts: Counts,
}

/// A view of a slot table in memory that [`SlotTable::init_in`] laid out.
#[derive(Clone, Copy)]
pub struct SlotTable {
    header: NonNull<Header>,
    slots: NonNull<Slot>,
}

// SAFETY: the view is two pointers into memory that outlives it (a contract of `init_in` and
// `attach`); all access to that memory goes through atomics and the per-slot spinlocks.
unsafe impl Send for SlotTable {}
// SAFETY: as for `Send`.
unsafe impl Sync for SlotTable {}

const fn slots_offset() -> usize {
    let align = std::mem::align_of::<Slot>();
    std::mem::size_of::<Header>().div_ceil(align) * align
}

impl SlotTable {
    /// Bytes needed for a table of `capacity` slots.
    pub const fn size_of(capacity: usize) -> usize {
        slots_offset() + capacity * SLOT_BYTES
    }

    /// Alignment the memory block needs.
    pub const fn align() -> usize {
        let (a, b) = (std::mem::align_of::<Header>(), std::mem::align_of::<Slot>());
        if a > b {
            a
        } else {
            b
        }
    }

    /// Lays out an empty table of `capacity` slots in `mem`.
    ///
    /// # Safety
    /// `mem` must be valid for writes of [`SlotTable::size_of`]`(capacity)` bytes, aligned to
    /// [`SlotTable::align`], not used by anyone else until this returns, and outlive every use of
    /// the table.
    pub unsafe fn init_in(mem: *mut u8, capacity: usize) -> SlotTable {
        assert!(capacity > 0);
        let header = mem.cast::<Header>();
        // SAFETY: the caller guarantees `mem` is writable, aligned and large enough for the header
        // and `capacity` slots at `slots_offset()`.
        unsafe {
            header.write(Header {
                capacity,
                in_use: AtomicUsize::new(0),
                evictions: AtomicU64::new(0),
                lease_writes: AtomicU64::new(0),
                started_without_lease: AtomicU64::new(0),
                lease: AtomicI64::new(i64::MIN),
                refused_epoch: AtomicI64::new(i64::MIN),
                floor: AtomicI64::new(i64::MIN),
                data_floors: AtomicU64::new(0),
                elsewhere_floor: AtomicI64::new(i64::MIN),
                claim_lock: SpinLock::new(),
            });
            let slots = mem.add(slots_offset()).cast::<Slot>();
            for i in 0..capacity {
                slots.add(i).write(Slot {
                    lock: SpinLock::new(),
                    key: AtomicU64::new(0),
                    last_used: AtomicI64::new(i64::MIN),
                    state: UnsafeCell::new(GuardState::new()),
                });
            }
            SlotTable::attach(mem)
        }
    }

    /// A view of a table that [`SlotTable::init_in`] laid out at `mem`.
    ///
    /// # Safety
    /// `mem` must point to such a table, which must outlive every use of the view.
    pub unsafe fn attach(mem: *mut u8) -> SlotTable {
        SlotTable {
            header: NonNull::new(mem.cast()).expect("slot table at a null address"),
            // SAFETY: the table's slots start `slots_offset()` bytes in (caller's contract).
            slots: NonNull::new(unsafe { mem.add(slots_offset()) }.cast()).expect("null slots"),
        }
    }

    fn header(&self) -> &Header {
        // SAFETY: `header` points to an initialised `Header` that outlives `self` (constructor
        // contracts); it is only read through shared references and atomics.
        unsafe { self.header.as_ref() }
    }

    fn slot(&self, index: usize) -> &Slot {
        assert!(index < self.capacity());
        // SAFETY: `index` is in bounds, and the slots were initialised by `init_in`.
        unsafe { &*self.slots.as_ptr().add(index) }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.header().capacity
    }

    /// Number of slots that hold a sequence.
    pub fn in_use(&self) -> usize {
        self.header().in_use.load(Ordering::Relaxed)
    }

    /// How many times a slot was taken from one sequence and given to another.
    pub fn evictions(&self) -> u64 {
        self.header().evictions.load(Ordering::Relaxed)
    }

    /// How many times the lease was extended since the server started.
    pub fn lease_writes(&self) -> u64 {
        self.header().lease_writes.load(Ordering::Relaxed)
    }

    /// Whether the server started without a lease file: a new data directory (initdb, the target
    /// of pg_upgrade or of a restore), or the file was deleted.
    pub fn started_without_lease(&self) -> bool {
        self.header().started_without_lease.load(Ordering::Relaxed) != 0
    }

    /// Records that the server started without a lease file.
    pub fn mark_started_without_lease(&self) {
        self.header()
            .started_without_lease
            .store(1, Ordering::Relaxed);
    }

    /// Counts one extension of the lease.
    pub fn count_lease_write(&self) {
        self.header().lease_writes.fetch_add(1, Ordering::Relaxed);
    }

    /// The lease in force, in Unix ms (shared by every process): no id above it may be issued.
    pub fn lease(&self) -> &AtomicI64 {
        &self.header().lease
    }

    /// The recorded epoch (Unix ms) when ids are refused because the configured one is later.
    pub fn refused_epoch(&self) -> Option<i64> {
        let epoch = self.header().refused_epoch.load(Ordering::Acquire);
        (epoch != i64::MIN).then_some(epoch)
    }

    /// Refuses ids (`Some(recorded epoch)`) or allows them (`None`).
    pub fn set_refused_epoch(&self, recorded: Option<i64>) {
        self.header()
            .refused_epoch
            .store(recorded.unwrap_or(i64::MIN), Ordering::Release);
    }

    /// Puts a lease in force: the lease (Unix ms) never goes down, the floor (ms since the epoch)
    /// is raised, and a refused epoch (Unix ms), once set, stays. The one way the lease's
    /// effects reach the table, at start-up from the file and in WAL replay from a record.
    pub fn put_lease_in_force(
        &self,
        lease_unix_ms: i64,
        floor: Option<i64>,
        refused_epoch: Option<i64>,
    ) {
        self.lease().fetch_max(lease_unix_ms, Ordering::AcqRel);
        if let Some(floor) = floor {
            self.raise_floor(floor);
        }
        if refused_epoch.is_some() {
            self.set_refused_epoch(refused_epoch);
        }
    }

    /// The floor under guards created from now on (ms since the epoch; `i64::MIN` for none).
    pub fn floor(&self) -> i64 {
        self.header().floor.load(Ordering::Acquire)
    }

    /// Raises the floor to at least `ms`.
    pub fn raise_floor(&self, ms: i64) {
        self.header().floor.fetch_max(ms, Ordering::AcqRel);
    }

    /// Where ids of a sequence that no column's DEFAULT draws from start, when data made
    /// elsewhere was taken in (its rows cannot tell: ids drawn by explicit calls may be anywhere).
    pub fn elsewhere_floor(&self) -> Option<i64> {
        let floor = self.header().elsewhere_floor.load(Ordering::Acquire);
        (floor != i64::MIN).then_some(floor)
    }

    /// Raises [`SlotTable::elsewhere_floor`] to at least `ms`.
    pub fn raise_elsewhere_floor(&self, ms: i64) {
        self.header()
            .elsewhere_floor
            .fetch_max(ms, Ordering::AcqRel);
    }

    /// From now on, a guard given a slot (a sequence's first id since the server started, or
    /// since its slot was taken from it) issues nothing until it is told the newest id stored for
    /// its sequence: it answers [`Decision::ReadDataFloor`] and the caller reads the data and
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

    /// Runs the guard of sequence `key` for `remainder`, reading the clock (`clock`, in the
    /// guard's units) under the slot's lock. `cached` is the slot index this caller last used for
    /// `key`, if any; the index actually used is returned with the decision, to cache for the
    /// next call. A slot that no longer holds `key` (it was given to another sequence) is found
    /// or claimed again, which never fails.
    pub fn issue(
        &self,
        cached: Option<usize>,
        key: SlotKey,
        remainder: u16,
        overflow: Overflow,
        clock: impl FnOnce() -> i64,
    ) -> (usize, Result<Decision, LayoutError>) {
        assert_ne!(key, 0, "slot key 0 is reserved for empty slots");
        if let Some(index) = cached.filter(|&i| i < self.capacity()) {
            let slot = self.slot(index);
            let _lock = slot.lock.lock();
            if slot.key.load(Ordering::Relaxed) == key {
                return (index, Self::run_guard(slot, remainder, overflow, clock));
            }
        }
        if let Some(index) = self.find(key) {
            let slot = self.slot(index);
            let _lock = slot.lock.lock();
            // Re-checked under the slot's lock: it may have been given to another key since.
            if slot.key.load(Ordering::Relaxed) == key {
                return (index, Self::run_guard(slot, remainder, overflow, clock));
            }
        }
        let _claim = self.header().claim_lock.lock();
        let index = self.find_or_claim(key);
        let slot = self.slot(index);
        let _lock = slot.lock.lock();
        (index, Self::run_guard(slot, remainder, overflow, clock))
    }

    /// The guard's decision; the slot's lock must be held.
    fn run_guard(
        slot: &Slot,
        remainder: u16,
        overflow: Overflow,
        clock: impl FnOnce() -> i64,
    ) -> Result<Decision, LayoutError> {
        let now = clock();
        // Written only under the slot's lock, so a plain load and store suffice (the eviction
        // scan reads it without the lock, as a hint).
        if now > slot.last_used.load(Ordering::Relaxed) {
            slot.last_used.store(now, Ordering::Relaxed);
        }
        // SAFETY: the caller holds the slot's lock, the only way to the state.
        unsafe { (*slot.state.get()).issue(now, remainder, overflow) }
    }

    /// The slots of `key`'s window, in probe order.
    fn window(&self, key: SlotKey) -> impl Iterator<Item = usize> {
        let capacity = self.capacity();
        let home = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % capacity;
        (0..WINDOW_SLOTS.min(capacity)).map(move |probe| (home + probe) % capacity)
    }

    /// The slot holding `key`, if any, read without the claim lock (a hint: the caller re-checks
    /// the key under the slot's lock). A key is claimed into the first empty slot of its window
    /// and slots never empty again, so the first empty slot ends the search.
    fn find(&self, key: SlotKey) -> Option<usize> {
        for index in self.window(key) {
            match self.slot(index).key.load(Ordering::Acquire) {
                k if k == key => return Some(index),
                0 => return None,
                _ => {}
            }
        }
        None
    }

    /// The slot of `key`, claiming one in its window if there is none. The claim lock must be
    /// held.
    fn find_or_claim(&self, key: SlotKey) -> usize {
        for index in self.window(key) {
            let slot = self.slot(index);
            match slot.key.load(Ordering::Acquire) {
                k if k == key => return index,
                0 => {
                    let _lock = slot.lock.lock();
                    self.hand_over(slot, key);
                    self.header().in_use.fetch_add(1, Ordering::Relaxed);
                    return index;
                }
                _ => {}
            }
        }
        self.evict_least_recently_used(key)
    }

    /// Gives the least recently used slot of `key`'s window to `key`. The claim lock must be
    /// held.
    fn evict_least_recently_used(&self, key: SlotKey) -> usize {
        const ATTEMPTS: usize = 4;
        for attempt in 1..=ATTEMPTS {
            let (index, seen) = self
                .window(key)
                .map(|i| (i, self.slot(i).last_used.load(Ordering::Relaxed)))
                .min_by_key(|&(_, used)| used)
                .expect("capacity > 0");
            let slot = self.slot(index);
            let _lock = slot.lock.lock();
            // Re-check under the slot's lock that it is still the one chosen: used since the scan
            // means another slot may now be older. (Evicting any slot would be safe, the floor
            // sees to that; this keeps busy sequences in their slots.)
            if slot.last_used.load(Ordering::Relaxed) != seen && attempt < ATTEMPTS {
                continue;
            }
            // SAFETY: the slot's lock is held.
            let evicted_last = unsafe { (*slot.state.get()).last_ms() };
            if let Some(last) = evicted_last {
                self.raise_floor(last.saturating_add(1));
            }
            self.hand_over(slot, key);
            self.header().evictions.fetch_add(1, Ordering::Relaxed);
            return index;
        }
        unreachable!("the last attempt always evicts")
    }

    /// Gives `slot` to `key` with a fresh guard that starts at the floor. The slot's lock must be
    /// held, and the claim lock (keys change only under it).
    fn hand_over(&self, slot: &Slot, key: SlotKey) {
        let floor = self.floor();
        let fresh = if self.header().data_floors.load(Ordering::Relaxed) != 0 {
            GuardState::awaiting_data_floor(floor)
        } else {
            GuardState::with_floor(floor)
        };
        // SAFETY: the slot's lock is held.
        unsafe { *slot.state.get() = fresh };
        slot.key.store(key, Ordering::Release);
    }

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

    /// The key of every slot, in slot order (0: empty; tests only).
    #[cfg(test)]
    fn keys(&self) -> Vec<SlotKey> {
        (0..self.capacity())
            .map(|i| self.slot(i).key.load(Ordering::Relaxed))
            .collect()
    }

    /// The last millisecond issued for `key`, if it has a slot and issued an id (tests only).
    #[cfg(test)]
    pub fn last_ms(&self, key: SlotKey) -> Option<i64> {
        (0..self.capacity()).find_map(|i| {
            let slot = self.slot(i);
            let _lock = slot.lock.lock();
            if slot.key.load(Ordering::Relaxed) == key {
                // SAFETY: the slot's lock is held.
                unsafe { (*slot.state.get()).last_ms() }
            } else {
                None
            }
        })
    }
}

/// Owned, heap-allocated memory for a table, for tests and for the per-session fallback.
pub struct OwnedSlotTable {
    /// The table's memory; `table` points into it, so it must not move or be dropped first.
    _mem: Vec<u64>,
    table: SlotTable,
}

impl OwnedSlotTable {
    pub fn new(capacity: usize) -> Self {
        assert!(SlotTable::align() <= std::mem::align_of::<u64>());
        let mut mem = vec![0u64; SlotTable::size_of(capacity).div_ceil(8)];
        // SAFETY: `mem` is large enough, u64-aligned (checked above), ours alone, and lives in
        // this struct as long as the view (a Vec's heap buffer does not move with the Vec).
        let table = unsafe { SlotTable::init_in(mem.as_mut_ptr().cast(), capacity) };
        OwnedSlotTable { _mem: mem, table }
    }

    pub fn table(&self) -> &SlotTable {
        &self.table
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{seq_field, SEQ_VALUES};
    use proptest::prelude::*;
    use std::collections::HashSet;
    use std::sync::atomic::AtomicI64;
    use std::sync::Arc;

    /// Issues one id for `key` at clock `now` (borrow) and returns its millisecond.
    fn issue_now(t: &SlotTable, key: SlotKey, r: u16, now: i64) -> i64 {
        match t.issue(None, key, r, Overflow::Borrow, || now).1.unwrap() {
            Decision::Issue { ms, .. } => ms,
            wait => panic!("borrow never waits here: {wait:?}"),
        }
    }

    #[test]
    fn fresh_guards_wait_for_their_data_floor_when_the_table_asks() {
        let owned = OwnedSlotTable::new(WINDOW_SLOTS);
        let t = owned.table();
        t.ask_for_data_floors();
        let key = slot_key(1, 100);
        let (index, d) = t.issue(None, key, 0, Overflow::Wait, || 50);
        assert_eq!(d.unwrap(), Decision::ReadDataFloor);
        assert_eq!(
            t.issue(Some(index), key, 0, Overflow::Wait, || 50)
                .1
                .unwrap(),
            Decision::ReadDataFloor
        );
        t.settle_data_floor(key, Some(3_000));
        assert_eq!(issue_now(t, key, 0, 50), 3_000);
        assert_eq!(t.stats()[0].data_floor, Some(3_000));
        // rows loaded into the live table later: asked again, and never below what it issued
        assert!(t.forget_data_floor(key));
        assert_eq!(
            t.issue(Some(index), key, 1, Overflow::Wait, || 50)
                .1
                .unwrap(),
            Decision::ReadDataFloor
        );
        t.settle_data_floor(key, None);
        assert_eq!(
            issue_now(t, key, 0, 50),
            3_001,
            "the used remainders of 3_000 are forgotten"
        );
        // every other key of the window evicts it; coming back, it asks again
        for seq in 0..WINDOW_SLOTS as u32 {
            let other = slot_key(2, 1_000 + seq);
            if t.issue(None, other, 0, Overflow::Wait, || 60).1.unwrap() == Decision::ReadDataFloor
            {
                t.settle_data_floor(other, None);
            }
        }
        let (_, d) = t.issue(None, key, 2, Overflow::Wait, || 60);
        assert_eq!(d.unwrap(), Decision::ReadDataFloor);
        t.settle_data_floor(key, None);
        assert!(
            issue_now(t, key, 2, 60) > 3_000,
            "the eviction's floor is above what it issued"
        );
        // a table that does not ask (the core tests' default) issues at once
        let plain = OwnedSlotTable::new(4);
        assert_eq!(issue_now(plain.table(), key, 0, 50), 50);
    }

    #[test]
    fn slot_size_is_what_the_docs_quote() {
        // pg_shard_id.max_sequences' description reads SLOT_BYTES; the README quotes 248 bytes
        // for the default layout (10-bit sequence field: a 1024-bit set per slot; 48 bytes of
        // statistics; the data floor: 16).
        assert_eq!(SLOT_BYTES, 248);
        assert_eq!(SlotTable::size_of(8192), 8192 * SLOT_BYTES + slots_offset());
    }

    #[test]
    fn one_key_one_slot_and_separate_guards_per_key() {
        let owned = OwnedSlotTable::new(4);
        let t = owned.table();
        let (a, b) = (slot_key(1, 100), slot_key(1, 101));
        let (ia, _) = t.issue(None, a, 5, Overflow::Borrow, || 10);
        let (ia2, _) = t.issue(None, a, 6, Overflow::Borrow, || 10);
        let (ib, _) = t.issue(Some(ia), b, 5, Overflow::Borrow, || 10);
        assert_eq!(ia, ia2);
        assert_ne!(ia, ib, "a cached index of another key is not used");
        assert_eq!(t.in_use(), 2);
        assert_eq!(
            issue_now(t, b, 7, 10),
            10,
            "another sequence has its own remainders"
        );
        assert_eq!(issue_now(t, a, 5, 10), 11);
        assert_eq!(t.last_ms(a), Some(11));
        assert_eq!((database_of(a), sequence_of(a)), (1, 100));
    }

    #[test]
    fn a_full_table_evicts_the_least_recently_used_and_carries_its_last_ms_into_the_floor() {
        let owned = OwnedSlotTable::new(2);
        let t = owned.table();
        let (a, b, c) = (slot_key(1, 1), slot_key(1, 2), slot_key(1, 3));
        issue_now(t, a, 0, 1_000);
        // b borrows far ahead of the clock: its last ms is 5_002
        for _ in 0..3 {
            issue_now(t, b, 9, 5_000);
        }
        issue_now(t, a, 1, 6_000); // a is now the more recently used
        assert_eq!(t.floor(), i64::MIN);
        // c evicts b (least recently used), whose last ms becomes the floor
        assert_eq!(issue_now(t, c, 0, 6_000), 6_000);
        assert_eq!(t.evictions(), 1);
        assert_eq!(t.last_ms(b), None, "b lost its slot");
        assert_eq!(t.floor(), 5_003);
        // b comes back with the clock stepped far back: it still issues above all its old ids
        assert_eq!(issue_now(t, b, 9, 100), 6_001);
        assert_eq!(t.in_use(), 2, "never more slots than the capacity");
    }

    #[test]
    fn a_key_lives_in_its_window_and_a_full_window_evicts_within_it() {
        let capacity = 1 << 12;
        let owned = OwnedSlotTable::new(capacity);
        let t = owned.table();
        // keys whose windows start at the same slot, until that window is full
        let home = |k: SlotKey| t.window(k).next().unwrap();
        let first = slot_key(1, 1);
        let same: Vec<SlotKey> = (1..)
            .map(|o| slot_key(1, o))
            .filter(|&k| home(k) == home(first))
            .take(WINDOW_SLOTS + 1)
            .collect();
        for (n, &k) in same[..WINDOW_SLOTS].iter().enumerate() {
            issue_now(t, k, 0, 1_000 + n as i64);
        }
        assert_eq!(t.in_use(), WINDOW_SLOTS);
        assert_eq!(t.evictions(), 0);
        let window: HashSet<usize> = t.window(first).collect();
        let (index, _) = t.issue(None, same[WINDOW_SLOTS], 0, Overflow::Borrow, || 5_000);
        assert!(window.contains(&index), "claimed inside its window");
        assert_eq!(
            t.evictions(),
            1,
            "a full window evicts, though the table has room"
        );
        assert_eq!(
            t.last_ms(first),
            None,
            "the least recently used of the window went"
        );
        assert_eq!(t.floor(), 1_001);
        assert_eq!(t.in_use(), WINDOW_SLOTS);
        // every other key is still found where it was, without a claim
        for &k in &same[1..] {
            assert_eq!(t.find(k).map(|i| window.contains(&i)), Some(true));
        }
    }

    proptest! {
        /// Any mix of sequences, more than the table holds, with a clock that moves on: a key is
        /// never in two slots, and no sequence ever gets one (ms, remainder) twice.
        #[test]
        fn keys_are_unique_and_pairs_never_repeat_under_churn(
            capacity in 16usize..80,
            draws in proptest::collection::vec((1u32..300, 0u16..4, 0i64..3), 1..3_000),
        ) {
            let owned = OwnedSlotTable::new(capacity);
            let t = owned.table();
            let mut now = 1_000;
            let mut seen = HashSet::new();
            let mut cached = std::collections::HashMap::new();
            for (sequence, r, tick) in draws {
                now += tick;
                let key = slot_key(7, sequence);
                let (index, d) = t.issue(cached.get(&key).copied(), key, r, Overflow::Borrow, || now);
                cached.insert(key, index);
                let Decision::Issue { ms, .. } = d.unwrap() else { panic!("borrow waited") };
                prop_assert!(seen.insert((key, ms, r)), "{key} issued ({ms}, {r}) twice");
                let keys = t.keys();
                let taken: HashSet<_> = keys.iter().filter(|&&k| k != 0).collect();
                prop_assert_eq!(taken.len(), keys.iter().filter(|&&k| k != 0).count());
                prop_assert!(taken.len() <= capacity);
            }
        }
    }

    #[test]
    fn a_cached_index_of_an_evicted_key_is_not_used_for_it() {
        let owned = OwnedSlotTable::new(1);
        let t = owned.table();
        let (a, b) = (slot_key(1, 1), slot_key(1, 2));
        let (ia, _) = t.issue(None, a, 3, Overflow::Wait, || 50);
        let (ib, _) = t.issue(None, b, 3, Overflow::Wait, || 60);
        assert_eq!(ia, ib, "one slot: b took a's");
        // a's caller still has the index cached: the slot is b's now, so a is claimed again
        let (_, d) = t.issue(Some(ia), a, 3, Overflow::Wait, || 70);
        assert_eq!(
            d.unwrap(),
            Decision::Issue {
                ms: 70,
                clock: 70,
                clock_stepped_back_by: None
            }
        );
        assert_eq!(t.floor(), 61);
        assert_eq!(t.evictions(), 2);
    }

    #[test]
    fn statistics_count_per_sequence_and_reset() {
        let owned = OwnedSlotTable::new(8);
        let t = owned.table();
        let (a, b) = (slot_key(1, 1), slot_key(1, 2));
        // a: remainder 5 three times at clock 100 under wait: 100, then 101 (moved on), then wait
        let mut decisions = Vec::new();
        for _ in 0..3 {
            decisions.push(t.issue(None, a, 5, Overflow::Wait, || 100).1.unwrap());
        }
        assert!(matches!(decisions[2], Decision::WaitUntilPast(100)));
        issue_now(t, b, 1, 200);
        issue_now(t, b, 2, 150); // the clock stepped back
        t.count(a, |c| c.wait_ns += 1_500);
        t.count(b, |c| c.lease_writes += 1);
        t.count(slot_key(1, 3), |c| c.ids += 1_000); // no slot: nothing counted
        let mut stats = t.stats();
        stats.sort_by_key(|s| s.key);
        let counts: Vec<_> = stats.iter().map(|s| (s.key, s.last_ms, s.counts)).collect();
        assert_eq!(
            counts,
            vec![
                (
                    a,
                    Some(101),
                    Counts {
                        ids: 2,
                        exhausted_ms: 1,
                        waits: 1,
                        wait_ns: 1_500,
                        ..Counts::default()
                    }
                ),
                (
                    b,
                    Some(200),
                    Counts {
                        ids: 2,
                        clock_steps: 1,
                        lease_writes: 1,
                        ..Counts::default()
                    }
                ),
            ]
        );
        t.reset_stats();
        assert!(t.stats().iter().all(|s| s.counts == Counts::default()));
        assert_eq!(
            t.stats().len(),
            2,
            "a reset keeps the sequences and their guards"
        );
        assert_eq!(issue_now(t, a, 5, 100), 102, "and the guard's state");
    }

    #[test]
    fn a_lease_in_force_never_goes_down_and_a_refusal_stays() {
        let owned = OwnedSlotTable::new(4);
        let t = owned.table();
        t.put_lease_in_force(5_000, Some(3_001), None);
        t.put_lease_in_force(4_000, Some(2_001), Some(77));
        t.put_lease_in_force(4_500, None, None);
        assert_eq!(t.lease().load(Ordering::Relaxed), 5_000);
        assert_eq!(t.floor(), 3_001);
        assert_eq!(
            t.refused_epoch(),
            Some(77),
            "a later record without a refusal keeps it"
        );
    }

    #[test]
    fn slots_claimed_below_the_floor_start_at_the_floor() {
        let owned = OwnedSlotTable::new(4);
        let t = owned.table();
        t.raise_floor(7_000);
        t.raise_floor(6_000);
        assert_eq!(t.floor(), 7_000, "the floor never goes down");
        assert_eq!(issue_now(t, slot_key(1, 1), 3, 100), 7_000);
        assert_eq!(issue_now(t, slot_key(1, 2), 3, 8_000), 8_000);
    }

    /// Threads stand in for backends. Four "victims" draw from one shared sequence (a CACHE-like
    /// pattern: blocks of SEQ_VALUES values, so their remainders coincide all the time) under a
    /// shared clock that sometimes steps back; four "churners" claim fresh keys as fast as they
    /// can in a table of 8 slots, so the victims' slot is evicted again and again. No
    /// (ms, remainder) pair of the victims' sequence may repeat, and nobody fails. Every fresh
    /// guard waits for its data floor, which the caller settles (nothing stored), as the extension
    /// does.
    #[test]
    fn concurrent_backends_never_repeat_while_others_churn_the_table() {
        for overflow in [Overflow::Wait, Overflow::Borrow] {
            let owned = Arc::new(OwnedSlotTable::new(8));
            owned.table().ask_for_data_floors();
            let clock = Arc::new(AtomicI64::new(10_000));
            let sequence = Arc::new(AtomicI64::new(0));
            let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let key = slot_key(5, 16_384);
            let churners: Vec<_> = (0..4u32)
                .map(|thread| {
                    let (owned, clock, stop) = (owned.clone(), clock.clone(), stop.clone());
                    std::thread::spawn(move || {
                        let t = owned.table();
                        let mut n = 0u32;
                        while !stop.load(Ordering::Relaxed) {
                            n += 1;
                            let k = slot_key(9, 1 + thread * 1_000_000 + n);
                            let (_, d) =
                                t.issue(None, k, 0, overflow, || clock.load(Ordering::Relaxed));
                            if d.unwrap() == Decision::ReadDataFloor {
                                t.settle_data_floor(k, None);
                            }
                        }
                        n
                    })
                })
                .collect();
            let victims: Vec<_> = (0..4)
                .map(|thread| {
                    let (owned, clock, sequence) = (owned.clone(), clock.clone(), sequence.clone());
                    std::thread::spawn(move || {
                        let t = owned.table();
                        let mut out = Vec::with_capacity(20_000);
                        let mut block = 0;
                        let mut cached = None;
                        for i in 0..20_000i64 {
                            if i % SEQ_VALUES == 0 {
                                block = sequence.fetch_add(SEQ_VALUES, Ordering::Relaxed);
                            }
                            let r = seq_field(block + i % SEQ_VALUES) as u16;
                            if thread == 0 && i % 5_000 == 2_500 {
                                clock.fetch_sub(2_000, Ordering::Relaxed); // a step back
                            } else if i % 64 == 0 {
                                clock.fetch_add(1, Ordering::Relaxed);
                            }
                            let ms = loop {
                                let (index, d) = t.issue(cached, key, r, overflow, || {
                                    clock.load(Ordering::Relaxed)
                                });
                                cached = Some(index);
                                match d.unwrap() {
                                    Decision::Issue { ms, .. } => break ms,
                                    Decision::WaitUntilPast(_) => {
                                        clock.fetch_add(1, Ordering::Relaxed);
                                    }
                                    Decision::ReadDataFloor => t.settle_data_floor(key, None),
                                }
                            };
                            out.push((ms, r));
                        }
                        out
                    })
                })
                .collect();
            let mut all = HashSet::new();
            for thread in victims {
                for pair in thread.join().unwrap() {
                    assert!(all.insert(pair), "{overflow:?}: {pair:?} issued twice");
                }
            }
            stop.store(true, Ordering::Relaxed);
            let churned: u32 = churners.into_iter().map(|c| c.join().unwrap()).sum();
            assert_eq!(all.len(), 80_000);
            let t = owned.table();
            assert!(
                churned > 8 && t.evictions() > 8,
                "{overflow:?}: the table was churned ({churned} keys, {} evictions)",
                t.evictions()
            );
            assert_eq!(t.in_use(), 8);
        }
    }
}
