//! A fixed-size table of [`GuardState`]s, one per sequence, that lives in one block of memory
//! shared by many processes (PostgreSQL shared memory in the extension, a `Vec` in tests).
//!
//! * Each slot has its own spinlock; the guard's critical section is a few dozen instructions and
//!   reads the clock, so a spinlock is the right tool (as for PostgreSQL's own `slock_t`). Nothing
//!   that can raise an error runs while a lock is held.
//! * A slot's key is `(database oid, sequence oid)`. Keys are claimed under one table-wide claim
//!   lock, so one key never gets two slots. Slots never become empty again, so open-addressing
//!   probe chains never break.
//! * When every slot is taken, a slot is reused only if its last millisecond is more than
//!   [`REUSE_AFTER_MS`] behind the clock: a sequence that comes back after that gets a fresh
//!   guard, which is safe because its next id is at least that much later than its last one.
//!   Otherwise the caller gets [`TableFull`] and raises an error.

use crate::guard::{GuardState, Outcome, Overflow};
use crate::layout::LayoutError;
use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// A slot whose last id is older than this (in ms) may be given to another sequence when the
/// table is full.
pub const REUSE_AFTER_MS: i64 = 60_000;

/// `(database oid << 32) | sequence oid`; 0 marks an empty slot.
pub type SlotKey = u64;

/// The key of a sequence in a database.
pub const fn slot_key(database_oid: u32, sequence_oid: u32) -> SlotKey {
    ((database_oid as u64) << 32) | sequence_oid as u64
}

/// Every slot is in use by a sequence that issued an id within [`REUSE_AFTER_MS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableFull {
    pub capacity: usize,
}

/// A test-and-test-and-set spinlock on one 32-bit word, usable across processes.
#[repr(C)]
pub struct SpinLock(AtomicU32);

impl SpinLock {
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
    /// The lease written so far (Unix ms), see [`crate::lease`].
    lease: AtomicI64,
    /// The lease found at start-up (Unix ms): the floor under every fresh guard.
    floor: AtomicI64,
    claim_lock: SpinLock,
}

#[repr(C)]
struct Slot {
    lock: SpinLock,
    key: AtomicU64,
    state: UnsafeCell<GuardState>,
}

/// A view of a slot table in memory that [`SlotTable::init_in`] laid out.
#[derive(Clone, Copy)]
pub struct SlotTable {
    header: NonNull<Header>,
    slots: NonNull<Slot>,
}

// SAFETY: all access to the shared memory goes through atomics and the per-slot spinlocks.
unsafe impl Send for SlotTable {}
unsafe impl Sync for SlotTable {}

const fn slots_offset() -> usize {
    let align = std::mem::align_of::<Slot>();
    std::mem::size_of::<Header>().div_ceil(align) * align
}

impl SlotTable {
    /// Bytes needed for a table of `capacity` slots.
    pub const fn size_of(capacity: usize) -> usize {
        slots_offset() + capacity * std::mem::size_of::<Slot>()
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
    /// [`SlotTable::align`], and not used by anyone else until this returns.
    pub unsafe fn init_in(mem: *mut u8, capacity: usize) -> SlotTable {
        assert!(capacity > 0);
        unsafe {
            let header = mem.cast::<Header>();
            header.write(Header {
                capacity,
                in_use: AtomicUsize::new(0),
                lease: AtomicI64::new(i64::MIN),
                floor: AtomicI64::new(i64::MIN),
                claim_lock: SpinLock(AtomicU32::new(0)),
            });
            let slots = mem.add(slots_offset()).cast::<Slot>();
            for i in 0..capacity {
                slots.add(i).write(Slot {
                    lock: SpinLock(AtomicU32::new(0)),
                    key: AtomicU64::new(0),
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
        unsafe {
            SlotTable {
                header: NonNull::new(mem.cast()).expect("slot table at a null address"),
                slots: NonNull::new(mem.add(slots_offset()).cast()).expect("null slots"),
            }
        }
    }

    fn header(&self) -> &Header {
        unsafe { self.header.as_ref() }
    }

    fn slot(&self, index: usize) -> &Slot {
        assert!(index < self.capacity());
        unsafe { &*self.slots.as_ptr().add(index) }
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.header().capacity
    }

    /// The lease written so far, in Unix ms (shared by every process).
    pub fn lease(&self) -> &AtomicI64 {
        &self.header().lease
    }

    /// Sets the floor (Unix ms) under guards created from now on, and the lease to match.
    pub fn set_floor(&self, unix_ms: i64) {
        self.header().floor.store(unix_ms, Ordering::Relaxed);
        self.header().lease.fetch_max(unix_ms, Ordering::AcqRel);
    }

    /// The floor under fresh guards, in Unix ms (`i64::MIN` for none).
    pub fn floor(&self) -> i64 {
        self.header().floor.load(Ordering::Relaxed)
    }

    /// Number of slots that hold a sequence.
    pub fn in_use(&self) -> usize {
        self.header().in_use.load(Ordering::Relaxed)
    }

    /// The slot that holds `key`, claiming one if there is none. `now` (a clock reading in the
    /// guard's units) decides which slots are old enough to reuse when the table is full; a slot
    /// claimed while `floor` is ahead of `now` starts with [`GuardState::with_floor`].
    pub fn slot_for(&self, key: SlotKey, now: i64, floor: i64) -> Result<usize, TableFull> {
        let fresh = if floor > now {
            GuardState::with_floor(floor)
        } else {
            GuardState::new()
        };
        assert_ne!(key, 0, "slot key 0 is reserved for empty slots");
        let header = self.header();
        let capacity = header.capacity;
        let _claim = header.claim_lock.lock();
        let start = (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % capacity;
        for probe in 0..capacity {
            let index = (start + probe) % capacity;
            let slot = self.slot(index);
            match slot.key.load(Ordering::Acquire) {
                k if k == key => return Ok(index),
                0 => {
                    let _lock = slot.lock.lock();
                    unsafe { *slot.state.get() = fresh };
                    slot.key.store(key, Ordering::Release);
                    header.in_use.fetch_add(1, Ordering::Relaxed);
                    return Ok(index);
                }
                _ => {}
            }
        }
        // Full: reuse the slot whose last id is oldest, if it is old enough.
        let (index, last) = (0..capacity)
            .map(|i| {
                let slot = self.slot(i);
                let _lock = slot.lock.lock();
                (
                    i,
                    unsafe { (*slot.state.get()).last_ms() }.unwrap_or(i64::MIN),
                )
            })
            .min_by_key(|&(_, last)| last)
            .expect("capacity > 0");
        if last.saturating_add(REUSE_AFTER_MS) >= now {
            return Err(TableFull { capacity });
        }
        let slot = self.slot(index);
        let _lock = slot.lock.lock();
        slot.key.store(key, Ordering::Release);
        unsafe { *slot.state.get() = fresh };
        Ok(index)
    }

    /// Runs the guard of slot `index` for `key`, reading the clock under the slot's lock.
    /// `None` if the slot no longer holds `key` (it was reused): look it up again.
    pub fn issue(
        &self,
        index: usize,
        key: SlotKey,
        remainder: u16,
        overflow: Overflow,
        clock: impl FnOnce() -> i64,
    ) -> Option<Result<Outcome, LayoutError>> {
        let slot = self.slot(index);
        let _lock = slot.lock.lock();
        if slot.key.load(Ordering::Relaxed) != key {
            return None;
        }
        let now = clock();
        // SAFETY: the slot's lock is held.
        Some(unsafe { (*slot.state.get()).issue(now, remainder, overflow) })
    }

    /// The last millisecond issued for `key`, if it has a slot and issued an id.
    pub fn last_ms(&self, key: SlotKey) -> Option<i64> {
        (0..self.capacity()).find_map(|i| {
            let slot = self.slot(i);
            let _lock = slot.lock.lock();
            if slot.key.load(Ordering::Relaxed) == key {
                unsafe { (*slot.state.get()).last_ms() }
            } else {
                None
            }
        })
    }
}

/// Owned, heap-allocated memory for a table, for tests and for the per-session fallback.
pub struct OwnedSlotTable {
    mem: Vec<u64>,
    table: SlotTable,
}

impl OwnedSlotTable {
    pub fn new(capacity: usize) -> Self {
        assert!(SlotTable::align() <= std::mem::align_of::<u64>());
        let mut mem = vec![0u64; SlotTable::size_of(capacity).div_ceil(8)];
        let table = unsafe { SlotTable::init_in(mem.as_mut_ptr().cast(), capacity) };
        OwnedSlotTable { mem, table }
    }

    pub fn table(&self) -> &SlotTable {
        debug_assert!(!self.mem.is_empty());
        &self.table
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::seq_field;
    use std::collections::HashSet;
    use std::sync::atomic::AtomicI64;
    use std::sync::Arc;

    fn issue_now(t: &SlotTable, key: SlotKey, r: u16, now: i64) -> Option<i64> {
        let index = t.slot_for(key, now, i64::MIN).unwrap();
        t.issue(index, key, r, Overflow::Borrow, || now)
            .unwrap()
            .unwrap()
            .ms
    }

    #[test]
    fn a_slot_is_176_bytes() {
        // pg_shard_id.max_sequences' description and the README quote this size
        assert_eq!(std::mem::size_of::<Slot>(), 176);
        assert_eq!(SlotTable::size_of(8192), 8192 * 176 + slots_offset());
    }

    #[test]
    fn one_key_one_slot_and_separate_guards_per_key() {
        let owned = OwnedSlotTable::new(4);
        let t = owned.table();
        let (a, b) = (slot_key(1, 100), slot_key(1, 101));
        assert_eq!(t.slot_for(a, 0, i64::MIN), t.slot_for(a, 0, i64::MIN));
        assert_ne!(t.slot_for(a, 0, i64::MIN), t.slot_for(b, 0, i64::MIN));
        assert_eq!(t.in_use(), 2);
        assert_eq!(issue_now(t, a, 5, 10), Some(10));
        assert_eq!(
            issue_now(t, b, 5, 10),
            Some(10),
            "another sequence has its own remainders"
        );
        assert_eq!(issue_now(t, a, 5, 10), Some(11));
        assert_eq!(t.last_ms(a), Some(11));
    }

    #[test]
    fn a_full_table_reuses_only_old_slots() {
        let owned = OwnedSlotTable::new(2);
        let t = owned.table();
        issue_now(t, slot_key(1, 1), 0, 1_000);
        issue_now(t, slot_key(1, 2), 0, 50_000);
        assert_eq!(
            t.slot_for(slot_key(1, 3), 60_000, i64::MIN),
            Err(TableFull { capacity: 2 })
        );
        let reused = t.slot_for(slot_key(1, 3), 61_001, i64::MIN).unwrap();
        assert_eq!(t.in_use(), 2);
        // the evicted key's cached index no longer answers for it
        assert!(t
            .issue(reused, slot_key(1, 1), 0, Overflow::Wait, || 61_001)
            .is_none());
        assert_eq!(t.last_ms(slot_key(1, 2)), Some(50_000));
    }

    #[test]
    fn slots_claimed_below_the_floor_start_at_the_floor() {
        let owned = OwnedSlotTable::new(4);
        let t = owned.table();
        t.set_floor(7_000);
        assert_eq!(t.floor(), 7_000);
        assert_eq!(t.lease().load(Ordering::Relaxed), 7_000);
        let index = t.slot_for(slot_key(1, 1), 100, t.floor()).unwrap();
        assert_eq!(
            t.issue(index, slot_key(1, 1), 3, Overflow::Wait, || 100)
                .unwrap()
                .unwrap()
                .ms,
            Some(7_000)
        );
        let index = t.slot_for(slot_key(1, 2), 8_000, t.floor()).unwrap();
        assert_eq!(
            t.issue(index, slot_key(1, 2), 3, Overflow::Wait, || 8_000)
                .unwrap()
                .unwrap()
                .ms,
            Some(8_000)
        );
    }

    /// Threads stand in for backends: each draws from one shared "sequence" (a CACHE-like
    /// pattern: each thread takes blocks of 1024 values, so their remainders coincide all the
    /// time) and asks the table for a millisecond under a shared clock that sometimes steps back.
    /// No (ms, remainder) pair may repeat.
    #[test]
    fn concurrent_backends_never_repeat() {
        for overflow in [Overflow::Wait, Overflow::Borrow] {
            let owned = Arc::new(OwnedSlotTable::new(8));
            let clock = Arc::new(AtomicI64::new(10_000));
            let sequence = Arc::new(AtomicI64::new(0));
            let key = slot_key(5, 16_384);
            let threads: Vec<_> = (0..4)
                .map(|thread| {
                    let (owned, clock, sequence) = (owned.clone(), clock.clone(), sequence.clone());
                    std::thread::spawn(move || {
                        let t = owned.table();
                        let mut out = Vec::with_capacity(40_000);
                        let mut block = 0;
                        for i in 0..40_000i64 {
                            if i % 1024 == 0 {
                                block = sequence.fetch_add(1024, Ordering::Relaxed);
                            }
                            let r = seq_field(block + i % 1024) as u16;
                            if thread == 0 && i % 10_000 == 5_000 {
                                clock.fetch_sub(2_000, Ordering::Relaxed); // a step back
                            } else if i % 64 == 0 {
                                clock.fetch_add(1, Ordering::Relaxed);
                            }
                            let index = t.slot_for(key, 0, i64::MIN).unwrap();
                            let ms = loop {
                                let out = t
                                    .issue(index, key, r, overflow, || {
                                        clock.load(Ordering::Relaxed)
                                    })
                                    .unwrap()
                                    .unwrap();
                                match out.ms {
                                    Some(ms) => break ms,
                                    None => {
                                        clock.fetch_add(1, Ordering::Relaxed);
                                    }
                                }
                            };
                            out.push((ms, r));
                        }
                        out
                    })
                })
                .collect();
            let mut all = HashSet::new();
            for thread in threads {
                for pair in thread.join().unwrap() {
                    assert!(all.insert(pair), "{overflow:?}: {pair:?} issued twice");
                }
            }
            assert_eq!(all.len(), 160_000);
        }
    }
}
