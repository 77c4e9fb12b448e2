//! Where the guard's [`SlotTable`] lives, and the hooks that put it there.
//!
//! * Loaded through `shared_preload_libraries`: one table in shared memory, shared by every
//!   backend of the cluster (guard mode `cluster`), sized by `pg_shard_id.max_sequences` and
//!   created anew when the server (re)starts, including the restart after a backend crash. The
//!   lease (`crate::lease`: a file and a WAL record) gives the new table its floor and epoch.
//! * Loaded any other way (`CREATE EXTENSION` alone): a table of [`SESSION_SLOTS`] in this
//!   backend's memory, so one session never repeats an id, but two sessions can (guard mode
//!   `session`). `CREATE EXTENSION` says so with a NOTICE and `pg_shard_id_info()` reports it.
//!
//! Why not pgrx's `PgLwLock` / `pg_shmem_init!`: they place a value of a fixed Rust type, known at
//! compile time, in shared memory. The slot table's size comes from a setting, and it is a header
//! followed by a run of slots with their own spinlocks, laid out by `pg_shard_id_core::slots`; so
//! the hooks below request and initialise the memory themselves, as pg_stat_statements does.

use crate::settings;
use pg_shard_id_core::backfill::SharedReservations;
use pg_shard_id_core::catalog_watch::CatalogWatch;
use pg_shard_id_core::open_draws::{OpenDraws, Record};
use pg_shard_id_core::slots::{OwnedSlotTable, SlotTable};
use pgrx::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::OnceLock;

// Process-wide state. The postmaster sets it before it forks any backend (every platform pgrx
// supports forks; none uses EXEC_BACKEND), and sets it again when it re-creates shared memory
// after a crash, before forking the new backends. Atomics, so no `static mut` is needed.

/// The cluster-wide table's memory (null: none, guard mode `session`).
static SHARED_TABLE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
/// `next_shard_id_at`'s reservations (null: none, the library was not preloaded).
static RESERVATIONS: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
/// The data floor's memory of which databases have defaults that name no sequence
/// (`crate::catalog_watch`; null: none, the library was not preloaded).
static CATALOG_WATCH: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
/// Which transactions hold DEFAULT ids not in an index yet (`crate::open_draws`), one record per
/// backend (null: none, the library was not preloaded), and how many records.
static OPEN_DRAWS: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
static OPEN_DRAWS_BACKENDS: AtomicUsize = AtomicUsize::new(0);
/// Set in `_PG_init` when loaded from `shared_preload_libraries`.
static PRELOADED: AtomicBool = AtomicBool::new(false);

/// Slots of the per-session table. A session rarely uses many sequences, and eviction keeps any
/// number of them unique (`pg_shard_id_core::slots`), so it need not be `max_sequences` large
/// (8192 slots were 1.5 MB in every backend up to 0.4.0; 256 slots of 256 bytes are 64 KB).
pub const SESSION_SLOTS: usize = 256;

/// The per-session table, made on first use when the library was not preloaded. Statics here,
/// not thread-locals: a backend is one thread, and a thread-local of a shared library costs a
/// `__tls_get_addr` call on every access, which the hot path should not pay (`bench/profile.sh`).
static SESSION: OnceLock<OwnedSlotTable> = OnceLock::new();

/// Whether the guard is cluster-wide (the library was preloaded).
pub fn is_cluster() -> bool {
    PRELOADED.load(Ordering::Relaxed)
}

/// `cluster` or `session`.
pub fn mode() -> &'static str {
    if is_cluster() {
        "cluster"
    } else {
        "session"
    }
}

/// The cluster-wide table, if this server has one (the library was preloaded and shared memory
/// is set up). Never calls into PostgreSQL.
#[inline]
pub fn shared_table() -> Option<SlotTable> {
    let mem = SHARED_TABLE.load(Ordering::Acquire);
    // SAFETY: a non-null `mem` was laid out by `SlotTable::init_in` in shared memory, which lives
    // as long as the server.
    (!mem.is_null()).then(|| unsafe { SlotTable::attach(mem) })
}

/// The cluster-wide reservations of `next_shard_id_at` (`crate::backfill`), if the library was
/// preloaded. There is no per-session form: reservations that other sessions cannot see would
/// not keep two sessions' ids apart.
pub fn reservations() -> Option<&'static SharedReservations> {
    let mem = RESERVATIONS.load(Ordering::Acquire);
    // SAFETY: a non-null `mem` is zeroed shared memory of the right size, made at start-up.
    (!mem.is_null()).then(|| unsafe { SharedReservations::attach(mem) })
}

/// The catalog watch (`crate::catalog_watch`), if the library was preloaded.
pub fn catalog_watch() -> Option<&'static CatalogWatch> {
    let mem = CATALOG_WATCH.load(Ordering::Acquire);
    // SAFETY: a non-null `mem` is zeroed shared memory of the right size, made at start-up.
    (!mem.is_null()).then(|| unsafe { CatalogWatch::attach(mem) })
}

/// The records of transactions drawing DEFAULT ids (`crate::open_draws`), if the library was
/// preloaded. Never calls into PostgreSQL.
#[inline]
pub fn open_draws() -> Option<OpenDraws<'static>> {
    let mem = OPEN_DRAWS.load(Ordering::Acquire);
    let backends = OPEN_DRAWS_BACKENDS.load(Ordering::Acquire);
    // SAFETY: a non-null `mem` is zeroed shared memory for `backends` records, made at start-up.
    (!mem.is_null()).then(|| unsafe { OpenDraws::attach(mem, backends) })
}

/// Records in `open_draws`: one per backend that may run SQL (`MaxBackends`: connections,
/// autovacuum and background workers).
fn open_draws_backends() -> usize {
    // SAFETY: set by the postmaster before shared memory is requested.
    unsafe { pg_sys::MaxBackends }.max(1) as usize
}

/// The per-session table, if this backend made one. Never calls into PostgreSQL.
#[inline]
pub fn session_table() -> Option<&'static SlotTable> {
    SESSION.get().map(OwnedSlotTable::table)
}

/// The table this backend issues from, made now in guard mode `session`. Raises an ERROR if the
/// library was preloaded but the shared table is missing (it cannot be: the start-up hook makes
/// it before any backend starts).
pub fn table() -> SlotTable {
    if let Some(table) = shared_table() {
        return table;
    }
    if is_cluster() {
        error!("pg_shard_id: the shared guard table was not created");
    }
    *SESSION
        .get_or_init(|| {
            let owned = OwnedSlotTable::new(SESSION_SLOTS.min(settings::max_sequences()));
            owned.table().ask_for_data_floors();
            owned
        })
        .table()
}

/// What `pg_shard_id_info()` reports of the table this backend uses.
pub struct Usage {
    pub slots: usize,
    pub in_use: usize,
    pub evictions: u64,
    /// The lease in force (Unix ms), in guard mode `cluster`.
    pub lease_unix_ms: Option<i64>,
}

pub fn usage() -> Usage {
    let t = table();
    Usage {
        slots: t.capacity(),
        in_use: t.in_use(),
        evictions: t.evictions(),
        lease_unix_ms: is_cluster().then(|| t.lease().load(Ordering::Relaxed)),
    }
}

/// What runs when the postmaster creates the table (the lease's start-up: `crate::lease::start`),
/// given by `_PG_init`, so that this module does not depend on the lease's.
static ON_CREATE: OnceLock<fn(&SlotTable)> = OnceLock::new();

/// Sets up the shared table when loaded from `shared_preload_libraries`, and returns whether it
/// was (guard mode `cluster`). `on_create` runs once when the table is created, with
/// `AddinShmemInitLock` held. Called from `_PG_init`.
pub fn init(on_create: fn(&SlotTable)) -> bool {
    // SAFETY: read while PostgreSQL loads the library.
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        return false;
    }
    PRELOADED.store(true, Ordering::Relaxed);
    ON_CREATE.get_or_init(|| on_create);
    // SAFETY: _PG_init runs once per process, in the postmaster here, before any hook can run;
    // chaining to the previous hook is the documented protocol.
    unsafe {
        PREV_SHMEM_REQUEST_HOOK.get_or_init(|| pg_sys::shmem_request_hook);
        pg_sys::shmem_request_hook = Some(shmem_request);
        PREV_SHMEM_STARTUP_HOOK.get_or_init(|| pg_sys::shmem_startup_hook);
        pg_sys::shmem_startup_hook = Some(shmem_startup);
    }
    true
}

static PREV_SHMEM_STARTUP_HOOK: OnceLock<pg_sys::shmem_startup_hook_type> = OnceLock::new();
static PREV_SHMEM_REQUEST_HOOK: OnceLock<pg_sys::shmem_request_hook_type> = OnceLock::new();

/// The table's bytes, and room to align its start to [`SlotTable::align`] (a cache line: PostgreSQL
/// aligns shared memory allocations to one already, which this does not rely on).
fn table_bytes() -> usize {
    SlotTable::size_of(settings::max_sequences()) + SlotTable::align()
}

/// # Safety
/// Call only where PostgreSQL allows requesting shared memory (the request hook).
unsafe fn request_shared_memory() {
    // SAFETY: see the function's contract.
    unsafe {
        pg_sys::RequestAddinShmemSpace(table_bytes());
        pg_sys::RequestAddinShmemSpace(std::mem::size_of::<SharedReservations>());
        pg_sys::RequestAddinShmemSpace(std::mem::size_of::<CatalogWatch>());
        pg_sys::RequestAddinShmemSpace(OpenDraws::size_of(open_draws_backends()));
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn shmem_request() {
    // SAFETY: this is the request hook; the previous hook was saved in _PG_init.
    unsafe {
        if let Some(Some(prev)) = PREV_SHMEM_REQUEST_HOOK.get() {
            prev();
        }
        request_shared_memory();
    }
}

/// `AddinShmemInitLock`, which serialises extensions' `ShmemInitStruct` calls at start-up. A C
/// macro, `&MainLWLockArray[21].lock` (storage/lwlocklist.h, the same index in PostgreSQL 14 to
/// 18), so pgrx has no binding for it; pgrx's own shared-memory code names it the same way.
///
/// # Safety
/// Call only once the main LWLock array exists (in the shared-memory start-up hook or later).
unsafe fn addin_shmem_init_lock() -> *mut pg_sys::LWLock {
    // SAFETY: the caller's contract: MainLWLockArray is set up and has more than 21 entries.
    unsafe { &raw mut (*pg_sys::MainLWLockArray.add(21)).lock }
}

/// Creates the table, or attaches to it. `on_create` (`crate::lease::start`) runs here with
/// `AddinShmemInitLock` held; it only logs and does plain file I/O, so only a panic (a bug) could
/// end it, and in the postmaster that is FATAL: the server would not start.
#[pg_guard]
unsafe extern "C-unwind" fn shmem_startup() {
    // SAFETY: this is the start-up hook: shared memory and the main LWLocks exist.
    unsafe {
        if let Some(Some(prev)) = PREV_SHMEM_STARTUP_HOOK.get() {
            prev();
        }
        pg_sys::LWLockAcquire(addin_shmem_init_lock(), pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let mem = pg_sys::ShmemInitStruct(c"pg_shard_id guard".as_ptr(), table_bytes(), &mut found)
            .cast::<u8>();
        let mem = mem.add(mem.align_offset(SlotTable::align()));
        assert_eq!(
            mem as usize % SlotTable::align(),
            0,
            "shared memory is not aligned"
        );
        if !found {
            let table = SlotTable::init_in(mem, settings::max_sequences());
            table.ask_for_data_floors();
            if let Some(on_create) = ON_CREATE.get() {
                on_create(&table);
            }
        }
        SHARED_TABLE.store(mem, Ordering::Release);
        let zeroed = |name: &std::ffi::CStr, size: usize, align: usize| {
            let mut found = false;
            let mem = pg_sys::ShmemInitStruct(name.as_ptr(), size, &mut found).cast::<u8>();
            assert_eq!(mem as usize % align, 0, "shared memory is not aligned");
            if !found {
                // all zero bytes: empty
                std::ptr::write_bytes(mem, 0, size);
            }
            mem
        };
        let mem = zeroed(
            c"pg_shard_id backfill",
            std::mem::size_of::<SharedReservations>(),
            std::mem::align_of::<SharedReservations>(),
        );
        RESERVATIONS.store(mem, Ordering::Release);
        let mem = zeroed(
            c"pg_shard_id catalog watch",
            std::mem::size_of::<CatalogWatch>(),
            std::mem::align_of::<CatalogWatch>(),
        );
        CATALOG_WATCH.store(mem, Ordering::Release);
        let backends = open_draws_backends();
        let mem = zeroed(
            c"pg_shard_id open draws",
            OpenDraws::size_of(backends),
            std::mem::align_of::<Record>(),
        );
        OPEN_DRAWS_BACKENDS.store(backends, Ordering::Release);
        OPEN_DRAWS.store(mem, Ordering::Release);
        pg_sys::LWLockRelease(addin_shmem_init_lock());
    }
}
