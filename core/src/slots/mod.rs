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
//!   is *kept for its sequence* ([`KEPT_PER_SLOT`] entries per slot, after the slots, in windows
//!   as the slots are), with whether its data floor was read: a sequence that comes back after its
//!   slot was taken starts above everything it issued before, without reading its data floor
//!   again (issue 51: coming back costs a claim, not a catalog read), and a lead one sequence had
//!   (its data floor put it an hour ahead: rows copied in, a temporary table of its own) moves no
//!   other sequence. When a kept entry's window is full, the smallest goes into the table's
//!   *floor*, under every guard created from then on (and its sequence reads its data floor when
//!   it comes back). No amount of churn (say, a role creating thousands of temporary sequences)
//!   can make another sequence fail or repeat. The same floor carries the lease file's value
//!   after a restart.
//! * Claiming a slot and issuing its first id happen in one critical section, so a claimed slot
//!   cannot be evicted before its claimer has used it: every call makes progress.

use crate::guard::{Decision, GuardState, Overflow, Previous};
use crate::layout::LayoutError;
use spinlock::SpinLock;
use std::cell::UnsafeCell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};

mod data_floor;
mod owned;
mod server;
pub(crate) mod spinlock;
mod stats;
pub use owned::OwnedSlotTable;
pub use stats::SequenceStats;

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

/// How many evicted sequences the table keeps per slot (their last millisecond, and whether their
/// data floor was read), each for its own sequence, before the smallest of a window goes into the
/// floor under every sequence. 4: at the default 8192 slots, 32,768 sequences beyond those in
/// slots come back without a catalog read, for 24 bytes each (768 KiB). A role that wants to move
/// every sequence's ids ahead through evictions must fill a window of 32 entries with sequences
/// whose own data floors are ahead, and moves them at most as far as the data floor trusts
/// (1 h 10 min).
pub const KEPT_PER_SLOT: usize = 4;

/// An evicted sequence, kept for itself. Read and written only with the claim lock held.
#[derive(Clone, Copy)]
#[repr(C)]
struct Kept {
    /// 0: a free entry.
    key: SlotKey,
    /// One past the last millisecond it issued (or the floor it started from).
    next_ms: i64,
    /// 1 when its data floor was read (and is below `next_ms`): it comes back without reading it.
    settled: u64,
}

const FREE: Kept = Kept {
    key: 0,
    next_ms: i64::MIN,
    settled: 0,
};

/// Shared memory per slot, in bytes (the `pg_shard_id.max_sequences` description quotes it).
pub const SLOT_BYTES: usize = std::mem::size_of::<Slot>();

/// Shared memory per slot with its kept evicted sequences, in bytes (quoted as `SLOT_BYTES`).
pub const BYTES_PER_SLOT: usize = SLOT_BYTES + KEPT_PER_SLOT * std::mem::size_of::<Kept>();

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
    /// 0, or (fresh guards wait for their data floor: [`SlotTable::ask_for_data_floors`]) the
    /// next [`crate::guard::FloorRequest`]'s number.
    data_floor_requests: AtomicU64,
    /// The data floor of sequences that no column's DEFAULT draws from, in a database whose ids
    /// were made by another server or database (ms since the epoch; `i64::MIN`: none).
    elsewhere_floor: AtomicI64,
    claim_lock: SpinLock,
}

/// 64-byte aligned (a cache line): an id writes the line of the lock, the key, the guard's
/// millisecond and its id count, and one line of the remainder bit set. With two backends drawing
/// from one sequence on two cores every line written moves between them; a 248-byte slot
/// straddled lines and shared them with its neighbours (another sequence's hot lines). Measured
/// (issue 40, `bench/insert_gap.sh`): no change of the interleaved insert ratio within its noise.
#[repr(C, align(64))]
struct Slot {
    lock: SpinLock,
    key: AtomicU64,
    /// The clock reading of the last claim or issue: what "least recently used" means.
    last_used: AtomicI64,
    /// Written only with `lock` held.
    state: UnsafeCell<GuardState>,
}

/// A view of a slot table in memory that [`SlotTable::init_in`] laid out.
#[derive(Clone, Copy)]
pub struct SlotTable {
    header: NonNull<Header>,
    slots: NonNull<Slot>,
    // The kept entries ([`KEPT_PER_SLOT`] per slot, after the slots) are found from the header
    // when needed (`kept_window`), not held here: a view is made for every id, and an id never
    // reads them (a third field cost every id 15 instructions, `bench/cost_gate.sh`).
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

/// Where the kept entries start (a slot's size is a multiple of their alignment).
const fn kept_offset(capacity: usize) -> usize {
    slots_offset() + capacity * SLOT_BYTES
}

impl SlotTable {
    /// Bytes needed for a table of `capacity` slots.
    pub const fn size_of(capacity: usize) -> usize {
        kept_offset(capacity) + capacity * KEPT_PER_SLOT * std::mem::size_of::<Kept>()
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
                data_floor_requests: AtomicU64::new(0),
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
            let kept = mem.add(kept_offset(capacity)).cast::<UnsafeCell<Kept>>();
            for i in 0..capacity * KEPT_PER_SLOT {
                kept.add(i).write(UnsafeCell::new(FREE));
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

    /// Runs the guard of sequence `key` for `remainder`, reading the clock (`clock`, in the
    /// guard's units) under the slot's lock. `previous` is the caller's own previous id of `key`,
    /// if it remembers it ([`GuardState::issue_after`]). `cached` is the slot index this caller last used for
    /// `key`, if any; the index actually used is returned with the decision, to cache for the
    /// next call. A slot that no longer holds `key` (it was given to another sequence) is found
    /// or claimed again, which never fails.
    #[inline(always)]
    pub fn issue(
        &self,
        cached: Option<usize>,
        key: SlotKey,
        remainder: u16,
        previous: Previous,
        overflow: Overflow,
        clock: impl FnOnce() -> i64,
    ) -> (usize, Result<Decision, LayoutError>) {
        assert_ne!(key, 0, "slot key 0 is reserved for empty slots");
        if let Some(index) = cached.filter(|&i| i < self.capacity()) {
            let slot = self.slot(index);
            let _lock = slot.lock.lock();
            if slot.key.load(Ordering::Relaxed) == key {
                return (
                    index,
                    Self::run_guard(slot, remainder, previous, overflow, clock),
                );
            }
        }
        self.issue_uncached(key, remainder, previous, overflow, clock)
    }

    /// [`SlotTable::issue`] when the caller's cached index does not hold `key`: found in its
    /// window, or claimed. Out of line, so that the cached case stays small enough to inline.
    #[cold]
    #[inline(never)]
    fn issue_uncached(
        &self,
        key: SlotKey,
        remainder: u16,
        previous: Previous,
        overflow: Overflow,
        clock: impl FnOnce() -> i64,
    ) -> (usize, Result<Decision, LayoutError>) {
        if let Some(index) = self.find(key) {
            let slot = self.slot(index);
            let _lock = slot.lock.lock();
            // Re-checked under the slot's lock: it may have been given to another key since.
            if slot.key.load(Ordering::Relaxed) == key {
                return (
                    index,
                    Self::run_guard(slot, remainder, previous, overflow, clock),
                );
            }
        }
        let _claim = self.header().claim_lock.lock();
        let index = self.find_or_claim(key);
        let slot = self.slot(index);
        let _lock = slot.lock.lock();
        (
            index,
            Self::run_guard(slot, remainder, previous, overflow, clock),
        )
    }

    /// The guard's decision; the slot's lock must be held.
    #[inline(always)]
    fn run_guard(
        slot: &Slot,
        remainder: u16,
        previous: Previous,
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
        unsafe { (*slot.state.get()).issue_after(previous, now, remainder, overflow) }
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
            let state = unsafe { &*slot.state.get() };
            let settled = !state.is_awaiting_data_floor();
            if state.last_ms().is_some() || settled {
                let next_ms = state
                    .last_ms()
                    .map_or(i64::MIN, |last| last.saturating_add(1));
                self.keep_evicted(slot.key.load(Ordering::Relaxed), next_ms, settled);
            }
            self.hand_over(slot, key);
            self.header().evictions.fetch_add(1, Ordering::Relaxed);
            return index;
        }
        unreachable!("the last attempt always evicts")
    }

    /// Gives `slot` to `key` with a fresh guard that starts at the floor, or above what it kept
    /// when it was evicted; it waits for its data floor unless it was read before its eviction.
    /// The slot's lock must be held, and the claim lock (keys change only under it).
    fn hand_over(&self, slot: &Slot, key: SlotKey) {
        let kept = self.take_evicted(key).unwrap_or(FREE);
        let floor = self.floor().max(kept.next_ms);
        let request = if kept.settled == 1 {
            None
        } else {
            self.next_floor_request()
        };
        let fresh = match request {
            Some(request) => GuardState::awaiting_data_floor(floor, request),
            None => GuardState::with_floor(floor),
        };
        // SAFETY: the slot's lock is held.
        unsafe { *slot.state.get() = fresh };
        slot.key.store(key, Ordering::Release);
    }

    /// The kept entries of `key`'s window, in probe order, to read and change.
    ///
    /// # Safety
    /// The claim lock is held (only its holder touches the entries), and no other reference to
    /// an entry is alive while these are.
    #[allow(clippy::mut_from_ref)]
    unsafe fn kept_window(&self, key: SlotKey) -> impl Iterator<Item = &mut Kept> {
        let entries = self.capacity() * KEPT_PER_SLOT;
        // SAFETY: the kept entries start `kept_offset(capacity)` bytes into the table's memory
        // (`init_in`).
        let kept = unsafe {
            self.header
                .as_ptr()
                .cast::<u8>()
                .add(kept_offset(self.capacity()))
        }
        .cast::<UnsafeCell<Kept>>();
        let home = (key.wrapping_mul(0xC2B2_AE3D_27D4_EB4F) >> 32) as usize % entries;
        (0..WINDOW_SLOTS.min(entries)).map(move |probe| {
            // SAFETY: every index is below `entries`, all initialised by `init_in`; the caller's
            // contract makes the reference exclusive.
            unsafe { &mut *(*kept.add((home + probe) % entries)).get() }
        })
    }

    /// Keeps `next_ms` (one past the last ms it issued) for evicted `key`, and whether its data
    /// floor was read (`settled`; an entry already kept for it keeps its own). When the window's
    /// entries are all taken, the smallest of them and `next_ms` goes into the floor, and its
    /// entry to the other. The claim lock must be held. (No allocation: it runs under the lock.)
    fn keep_evicted(&self, key: SlotKey, next_ms: i64, settled: bool) {
        let floor = self.floor();
        let new = Kept {
            key,
            next_ms,
            settled: u64::from(settled),
        };
        // SAFETY: the claim lock is held, and this pass's references end with it (as below).
        if let Some(entry) = unsafe { self.kept_window(key) }.find(|e| e.key == key) {
            entry.next_ms = entry.next_ms.max(next_ms);
            entry.settled |= new.settled;
            return;
        }
        if next_ms <= floor && !settled {
            return; // the floor covers it
        }
        // a free entry, or one the floor covers and that has nothing else to keep
        // SAFETY: as above.
        if let Some(entry) = unsafe { self.kept_window(key) }
            .find(|e| e.key == 0 || (e.next_ms <= floor && e.settled == 0))
        {
            *entry = new;
            return;
        }
        // SAFETY: as above.
        let smallest = unsafe { self.kept_window(key) }
            .min_by_key(|e| e.next_ms)
            .expect("WINDOW_SLOTS > 0");
        if smallest.next_ms < next_ms {
            self.raise_floor(smallest.next_ms);
            *smallest = new;
        } else {
            self.raise_floor(next_ms);
        }
    }

    /// What [`SlotTable::keep_evicted`] kept for `key`, forgotten now that it has a slot again.
    /// The claim lock must be held.
    fn take_evicted(&self, key: SlotKey) -> Option<Kept> {
        // SAFETY: the claim lock is held; the entries are used only in this call.
        let entry = unsafe { self.kept_window(key) }.find(|e| e.key == key)?;
        Some(std::mem::replace(entry, FREE))
    }

    /// Makes evicted `key`, if it is kept, read its data floor when it comes back. The claim lock
    /// must be held.
    fn unsettle_evicted(&self, key: SlotKey) {
        // SAFETY: the claim lock is held; the entries are used only in this call.
        if let Some(entry) = unsafe { self.kept_window(key) }.find(|e| e.key == key) {
            entry.settled = 0;
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

#[cfg(test)]
mod tests;
