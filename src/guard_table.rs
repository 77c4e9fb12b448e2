//! Where the uniqueness guard lives, and the loop that asks it for a millisecond.
//!
//! * Loaded through `shared_preload_libraries`: one [`SlotTable`] in shared memory, shared by every
//!   backend of the cluster (guard mode `cluster`).
//! * Loaded any other way (`CREATE EXTENSION` alone): a table in this backend's memory, so one
//!   session never repeats an id, but two sessions can (guard mode `session`). `CREATE EXTENSION`
//!   says so with a NOTICE and `pg_shard_id_info()` reports it.
//!
//! The shared table is sized by `pg_shard_id.max_sequences` and is created anew when the server
//! (re)starts, including the restart after a backend crash. Ids issued ahead of the clock are first
//! covered by the lease file `$PGDATA/pg_shard_id.lease` (see `pg_shard_id_core::lease`), whose
//! value becomes the floor under the new table's guards.

use crate::settings;
use pg_shard_id_core::guard::Overflow;
use pg_shard_id_core::lease;
use pg_shard_id_core::slots::{OwnedSlotTable, SlotKey, SlotTable, TableFull};
use pgrx::prelude::*;
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;

/// The cluster-wide table, set in the postmaster by the shared-memory startup hook and inherited
/// by every backend it forks.
static mut SHARED: Option<SlotTable> = None;
/// Set in `_PG_init` when loaded from `shared_preload_libraries`.
static mut PRELOADED: bool = false;

thread_local! {
    /// The per-session table, made on first use when the library was not preloaded.
    static SESSION: OnceLock<OwnedSlotTable> = const { OnceLock::new() };
    /// Slot index of each sequence this backend has used, so the claim lock is taken once per
    /// sequence per backend, not per id.
    static SLOT_OF: RefCell<HashMap<SlotKey, usize>> = RefCell::new(HashMap::new());
    /// The last (key, slot index) used: a bulk insert draws from one sequence, and this spares it
    /// the hash lookup.
    static LAST_SLOT: Cell<(SlotKey, usize)> = const { Cell::new((0, 0)) };
}

fn cached_slot(key: SlotKey) -> Option<usize> {
    match LAST_SLOT.get() {
        (k, index) if k == key => Some(index),
        _ => SLOT_OF
            .with(|m| m.borrow().get(&key).copied())
            .inspect(|&i| LAST_SLOT.set((key, i))),
    }
}

fn remember_slot(key: SlotKey, index: usize) {
    SLOT_OF.with(|m| m.borrow_mut().insert(key, index));
    LAST_SLOT.set((key, index));
}

fn forget_slot(key: SlotKey) {
    SLOT_OF.with(|m| m.borrow_mut().remove(&key));
    LAST_SLOT.set((0, 0));
}

/// Whether the guard is cluster-wide (the library was preloaded).
fn is_cluster() -> bool {
    unsafe { PRELOADED }
}

/// `cluster` or `session`.
pub fn mode() -> &'static str {
    if is_cluster() {
        "cluster"
    } else {
        "session"
    }
}

/// A lead over the clock that needs no lease: `wait` runs up to 1 ms ahead, and no restart is that
/// quick, so after one the clock is past such ids anyway.
const UNLEASED_LEAD_MS: i64 = 1;

/// The lease file, relative to the data directory (every server process runs there).
const LEASE_FILE: &str = "pg_shard_id.lease";

fn with_table<R>(f: impl FnOnce(&SlotTable) -> R) -> R {
    // SAFETY: SHARED is written once, in the postmaster before any backend exists.
    match unsafe { *std::ptr::addr_of!(SHARED) } {
        Some(table) => f(&table),
        None => {
            if is_cluster() {
                error!("pg_shard_id: the shared guard table was not created");
            }
            SESSION.with(|s| {
                f(
                    s.get_or_init(|| OwnedSlotTable::new(settings::max_sequences()))
                        .table(),
                )
            })
        }
    }
}

/// (slots, slots in use) of the table this backend uses.
pub fn usage() -> (usize, usize) {
    with_table(|t| (t.capacity(), t.in_use()))
}

/// The millisecond for an id of sequence `key` whose sequence field is `remainder`, by the guard.
/// `clock` reads ms since the epoch; it is called while the slot's lock is held.
/// Errors: 22008 when the clock is before the epoch or the id would pass the horizon, 54000 when
/// the table is full.
pub fn issue_ms(
    key: SlotKey,
    remainder: u16,
    overflow: Overflow,
    epoch_unix_ms: i64,
    clock: impl Fn() -> i64,
) -> i64 {
    with_table(|table| loop {
        let index = match cached_slot(key) {
            Some(index) => index,
            None => {
                let floor = table.floor().saturating_sub(epoch_unix_ms);
                let index = table
                    .slot_for(key, clock(), floor)
                    .unwrap_or_else(|e| table_full(e));
                remember_slot(key, index);
                index
            }
        };
        let Some(outcome) = table.issue(index, key, remainder, overflow, &clock) else {
            // The slot went to another sequence after a long idle spell: look it up again.
            forget_slot(key);
            continue;
        };
        let outcome = outcome.unwrap_or_else(|e| crate::errors::raise(e, epoch_unix_ms));
        if let Some(step) = outcome.clock_stepped_back_by {
            // a step back makes the guard recover, never wait: `ms` is set
            warn_clock_step(key, step, outcome.ms.unwrap_or(outcome.waiting_for));
        }
        match outcome.ms {
            Some(ms) => {
                if ms > outcome.clock + UNLEASED_LEAD_MS && is_cluster() {
                    cover_by_lease(table, ms + epoch_unix_ms);
                }
                break ms;
            }
            None => wait_until_past(outcome.waiting_for, &clock),
        }
    })
}

/// `wait`: the guard is already 1 ms ahead and its millisecond has no room (full, or the sequence
/// wrapped), so wait until the clock passes `ms`. Usually that is less than a millisecond away, so
/// spin (a sleep would oversleep by far more); if `borrow` left the guard further ahead, sleep in
/// short steps.
fn wait_until_past(ms: i64, clock: &impl Fn() -> i64) {
    loop {
        let now = clock();
        if now > ms {
            return;
        }
        pgrx::check_for_interrupts!();
        if ms - now > 2 {
            unsafe { pg_sys::pg_usleep(500) };
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Makes the lease cover an id that is ahead of the clock before the id is returned.
fn cover_by_lease(table: &SlotTable, unix_ms: i64) {
    if let Err(e) = lease::cover(Path::new(LEASE_FILE), table.lease(), unix_ms) {
        crate::errors::raise_with_hint(
            PgSqlErrorCode::ERRCODE_IO_ERROR,
            format!("pg_shard_id: could not write the lease file \"{LEASE_FILE}\": {e}"),
            "Ids ahead of the clock must be recorded before they are used; check the data directory.",
        );
    }
}

fn table_full(e: TableFull) -> ! {
    crate::errors::raise_with_hint(
        PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
        format!(
            "pg_shard_id: all {} guard slots are held by sequences that issued ids in the last minute",
            e.capacity
        ),
        "Raise pg_shard_id.max_sequences (needs a restart).",
    )
}

fn warn_clock_step(key: SlotKey, step_ms: i64, guard_ms: i64) {
    let sequence = pg_sys::Oid::from((key & 0xffff_ffff) as u32);
    let name = unsafe {
        let name = pg_sys::get_rel_name(sequence);
        if name.is_null() {
            format!("oid {}", sequence.to_u32())
        } else {
            std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned()
        }
    };
    pgrx::pg_sys::panic::ErrorReport::new(
        PgSqlErrorCode::ERRCODE_WARNING,
        format!("pg_shard_id: the system clock stepped back by {step_ms} ms"),
        "pg_shard_id",
    )
    .set_detail(format!(
        "Ids of sequence \"{name}\" continue from millisecond {guard_ms} after the epoch, ahead of \
         the clock, and stay unique; their timestamps run ahead until the clock catches up."
    ))
    .report(PgLogLevel::WARNING);
}

/// Sets up the shared table when loaded from `shared_preload_libraries`. Called from `_PG_init`.
pub fn init() {
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        return;
    }
    unsafe {
        PRELOADED = true;
        #[cfg(any(feature = "pg13", feature = "pg14"))]
        request_shared_memory();
        #[cfg(not(any(feature = "pg13", feature = "pg14")))]
        {
            PREV_SHMEM_REQUEST_HOOK = pg_sys::shmem_request_hook;
            pg_sys::shmem_request_hook = Some(shmem_request);
        }
        PREV_SHMEM_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(shmem_startup);
    }
}

static mut PREV_SHMEM_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;
#[cfg(not(any(feature = "pg13", feature = "pg14")))]
static mut PREV_SHMEM_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;

fn table_bytes() -> usize {
    SlotTable::size_of(settings::max_sequences())
}

unsafe fn request_shared_memory() {
    unsafe { pg_sys::RequestAddinShmemSpace(table_bytes()) };
}

#[cfg(not(any(feature = "pg13", feature = "pg14")))]
#[pg_guard]
unsafe extern "C-unwind" fn shmem_request() {
    unsafe {
        if let Some(prev) = PREV_SHMEM_REQUEST_HOOK {
            prev();
        }
        request_shared_memory();
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn shmem_startup() {
    unsafe {
        if let Some(prev) = PREV_SHMEM_STARTUP_HOOK {
            prev();
        }
        // AddinShmemInitLock is MainLWLockArray[21] in every supported version (lwlocknames.h).
        let init_lock = &raw mut (*pg_sys::MainLWLockArray.add(21)).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let mem = pg_sys::ShmemInitStruct(c"pg_shard_id guard".as_ptr(), table_bytes(), &mut found)
            .cast::<u8>();
        assert_eq!(
            mem as usize % SlotTable::align(),
            0,
            "shared memory is not aligned"
        );
        let table = if found {
            SlotTable::attach(mem)
        } else {
            let table = SlotTable::init_in(mem, settings::max_sequences());
            match lease::read(Path::new(LEASE_FILE)) {
                Ok(Some(floor)) => table.set_floor(floor),
                Ok(None) => {}
                Err(e) => {
                    // An unreadable lease is a lost floor: refuse to start rather than risk repeats.
                    pgrx::error!(
                        "pg_shard_id: cannot read \"{LEASE_FILE}\": {e}; fix or remove it"
                    );
                }
            }
            table
        };
        *std::ptr::addr_of_mut!(SHARED) = Some(table);
        pg_sys::LWLockRelease(init_lock);
    }
}
