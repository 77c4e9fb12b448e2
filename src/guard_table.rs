//! Where the uniqueness guard lives, and the loop that asks it for a millisecond.
//!
//! * Loaded through `shared_preload_libraries`: one [`SlotTable`] in shared memory, shared by every
//!   backend of the cluster (guard mode `cluster`).
//! * Loaded any other way (`CREATE EXTENSION` alone): a table in this backend's memory, so one
//!   session never repeats an id, but two sessions can (guard mode `session`). `CREATE EXTENSION`
//!   says so with a NOTICE and `pg_shard_id_info()` reports it.
//!
//! The shared table is sized by `pg_shard_id.max_sequences` and is created anew when the server
//! (re)starts, including the restart after a backend crash. Every id is first covered by the lease
//! (`crate::lease`: a file and a WAL record), whose value plus one becomes the floor under the new
//! table's guards, and which records the epoch.
//!
//! Why not pgrx's `PgLwLock` / `pg_shmem_init!`: they place a value of a fixed Rust type, known at
//! compile time, in shared memory. The slot table's size comes from a setting
//! (`pg_shard_id.max_sequences`), and it is a header followed by a run of slots with their own
//! spinlocks, laid out by `pg_shard_id_core::slots`; so the hooks below request and initialise the
//! memory themselves, as pg_stat_statements does.

use crate::settings;
use pg_shard_id_core::guard::{Decision, Overflow};
use pg_shard_id_core::layout::{LayoutError, MAX_MS};
use pg_shard_id_core::slots::{sequence_of, OwnedSlotTable, SlotKey, SlotTable};
use pg_shard_id_core::time::format_unix_ms;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

// Process-wide state. The postmaster sets it before it forks any backend (every platform pgrx
// supports forks; none uses EXEC_BACKEND), and sets it again when it re-creates shared memory
// after a crash, before forking the new backends. Atomics, so no `static mut` is needed.

/// The cluster-wide table's memory (null: none, guard mode `session`).
static SHARED_TABLE: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
/// Set in `_PG_init` when loaded from `shared_preload_libraries`.
static PRELOADED: AtomicBool = AtomicBool::new(false);

/// The per-session table, made on first use when the library was not preloaded. Statics here,
/// not thread-locals: a backend is one thread, and a thread-local of a shared library costs a
/// `__tls_get_addr` call on every access, which the hot path should not pay (`bench/profile.sh`).
static SESSION: OnceLock<OwnedSlotTable> = OnceLock::new();

thread_local! {
    /// Slot index of each sequence this backend has used, so the claim lock is taken once per
    /// sequence per backend, not per id. Read only when the sequence is not the last one used.
    static SLOT_OF: RefCell<HashMap<SlotKey, usize>> = RefCell::new(HashMap::new());
}

/// The last (key, slot index) used: a bulk insert draws from one sequence, and this spares it
/// the hash lookup. Key 0 is never a slot key, so the initial value matches nothing.
static LAST_KEY: AtomicU64 = AtomicU64::new(0);
static LAST_INDEX: AtomicUsize = AtomicUsize::new(0);

#[inline]
fn cached_slot(key: SlotKey) -> Option<usize> {
    if LAST_KEY.load(Ordering::Relaxed) == key {
        return Some(LAST_INDEX.load(Ordering::Relaxed));
    }
    looked_up_slot(key)
}

#[cold]
#[inline(never)]
fn looked_up_slot(key: SlotKey) -> Option<usize> {
    let index = SLOT_OF.with(|m| m.borrow().get(&key).copied())?;
    remember_last(key, index);
    Some(index)
}

fn remember_last(key: SlotKey, index: usize) {
    LAST_INDEX.store(index, Ordering::Relaxed);
    LAST_KEY.store(key, Ordering::Relaxed);
}

#[cold]
#[inline(never)]
fn remember_slot(key: SlotKey, index: usize) {
    SLOT_OF.with(|m| m.borrow_mut().insert(key, index));
    remember_last(key, index);
}

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

/// The named LWLock tranche that serialises creating the shared table.
const TRANCHE: &std::ffi::CStr = c"pg_shard_id";

/// The cluster-wide table, if this server has one (the library was preloaded and shared memory
/// is set up).
pub fn shared_table() -> Option<SlotTable> {
    let mem = SHARED_TABLE.load(Ordering::Acquire);
    // SAFETY: `mem` was laid out by `SlotTable::init_in` in shared memory, which lives as long
    // as the server.
    (!mem.is_null()).then(|| unsafe { SlotTable::attach(mem) })
}

fn with_table<R>(f: impl FnOnce(&SlotTable) -> R) -> R {
    let mem = SHARED_TABLE.load(Ordering::Acquire);
    if !mem.is_null() {
        // SAFETY: `mem` was laid out by `SlotTable::init_in` in shared memory, which lives as long
        // as the server.
        return f(&unsafe { SlotTable::attach(mem) });
    }
    if is_cluster() {
        error!("pg_shard_id: the shared guard table was not created");
    }
    f(SESSION
        .get_or_init(|| OwnedSlotTable::new(settings::max_sequences()))
        .table())
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
    with_table(|t| Usage {
        slots: t.capacity(),
        in_use: t.in_use(),
        evictions: t.evictions(),
        lease_unix_ms: is_cluster().then(|| t.lease().load(Ordering::Relaxed)),
    })
}

/// The millisecond for an id of sequence `key` whose sequence field is `remainder`, by the guard,
/// when the common case decides it: an id at a millisecond the lease already covers, in a backend
/// that has checked its database's origin. Plain Rust: it never calls into PostgreSQL and never
/// raises an ERROR, so it may run outside pgrx's guard. `clock` reads ms since the epoch; it is
/// called while the slot's lock is held.
///
/// Anything else (waiting, a clock-step WARNING, extending the lease, an error, a table or origin
/// check not made yet) comes back as [`Slow`], which the caller must finish inside pgrx's guard:
/// [`Slow::finish`] raises 55000 when the epoch is later than the recorded one, 22008 when the
/// clock is before the epoch or the id would pass the horizon (naming the lease file when it is
/// the cause), and 58030 when the lease file cannot be written.
#[inline]
pub fn issue_ms<C: Fn() -> i64>(
    key: SlotKey,
    remainder: u16,
    overflow: Overflow,
    epoch_unix_ms: i64,
    clock: C,
) -> Result<i64, Slow<C>> {
    let draw = Draw {
        key,
        remainder,
        overflow,
        epoch_unix_ms,
        clock,
    };
    let quick = with_ready_table(|table| match draw.decide(table) {
        Ok(Decision::Issue {
            ms,
            clock_stepped_back_by: None,
            ..
        }) if !is_cluster() || table.lease().load(Ordering::Acquire) >= ms + epoch_unix_ms => {
            Ok(ms)
        }
        other => Err(other),
    });
    match quick {
        Some(Ok(ms)) => Ok(ms),
        Some(Err(decision)) => Err(Slow {
            draw,
            decided: Some(decision),
        }),
        None => Err(Slow {
            draw,
            decided: None,
        }),
    }
}

/// An id that [`issue_ms`] could not finish by plain Rust: the draw, and the guard's decision if
/// one was taken (it is final: the remainder is already marked used at its millisecond).
#[must_use = "a Slow draw holds a decision of the guard; finish it inside pgrx's guard"]
pub struct Slow<C> {
    draw: Draw<C>,
    decided: Option<Result<Decision, LayoutError>>,
}

impl<C: Fn() -> i64> Slow<C> {
    /// Finishes the draw: checks the database's origin, raises the errors, waits, warns, extends
    /// the lease. May raise an ERROR and calls into PostgreSQL: call it only inside pgrx's guard,
    /// which is what `crate::errors::Boundary` is for.
    #[cold]
    #[inline(never)]
    pub fn finish(self) -> i64 {
        self.draw.issue_slowly(self.decided)
    }
}

/// What one call of [`issue_ms`] asks the guard for: a millisecond for `remainder` of sequence
/// `key`, under `overflow`, with `clock` reading ms since the epoch that starts at
/// `epoch_unix_ms`. Carried whole through the uncommon cases, which may decide again.
struct Draw<C> {
    key: SlotKey,
    remainder: u16,
    overflow: Overflow,
    epoch_unix_ms: i64,
    clock: C,
}

impl<C: Fn() -> i64> Draw<C> {
    /// The guard's decision, in the slot this backend last used for `key` (or a slot found or
    /// claimed now). Plain Rust: no call into PostgreSQL, no error raised.
    #[inline]
    fn decide(&self, table: &SlotTable) -> Result<Decision, LayoutError> {
        let cached = cached_slot(self.key);
        let (index, decision) =
            table.issue(cached, self.key, self.remainder, self.overflow, &self.clock);
        if cached != Some(index) {
            remember_slot(self.key, index);
        }
        decision
    }

    /// [`issue_ms`]'s uncommon cases, inside pgrx's guard: raises a refused epoch's error, makes
    /// the session table if need be, checks the database's origin, decides unless `decided` holds
    /// the decision already taken (on the same table), and carries the decision out.
    fn issue_slowly(&self, decided: Option<Result<Decision, LayoutError>>) -> i64 {
        with_table(|table| {
            if let Some(refused) = table.refused_epoch() {
                epoch_moved_later(refused, self.epoch_unix_ms);
            }
            crate::origin::check(table, self.epoch_unix_ms);
            let decision = decided.unwrap_or_else(|| self.decide(table));
            self.settle(table, decision)
        })
    }

    /// Carries out a decision: raises its error, or warns of a clock step and covers a lead by
    /// the lease before returning the millisecond, or waits and decides again.
    fn settle(&self, table: &SlotTable, mut decision: Result<Decision, LayoutError>) -> i64 {
        loop {
            match decision.unwrap_or_else(|e| layout_error(e, table, self.epoch_unix_ms)) {
                Decision::Issue {
                    ms,
                    clock_stepped_back_by,
                    ..
                } => {
                    if let Some(step) = clock_stepped_back_by {
                        warn_clock_step(self.key, step, ms);
                    }
                    if is_cluster()
                        && table.lease().load(Ordering::Acquire) < ms + self.epoch_unix_ms
                    {
                        crate::lease::extend(table, ms + self.epoch_unix_ms, self.epoch_unix_ms);
                    }
                    return ms;
                }
                Decision::WaitUntilPast(ms) => {
                    wait_until_past(ms, &self.clock);
                    decision = self.decide(table);
                }
            }
        }
    }
}

/// The table, when it is there, this backend checked its database's origin, and ids are not
/// refused; `None` sends the caller to [`Draw::issue_slowly`], which makes the session table,
/// checks the origin, or raises the error. Never calls into PostgreSQL.
#[inline]
fn with_ready_table<R>(f: impl FnOnce(&SlotTable) -> R) -> Option<R> {
    if !crate::origin::checked() {
        return None;
    }
    let mem = SHARED_TABLE.load(Ordering::Acquire);
    if !mem.is_null() {
        // SAFETY: as in `with_table`.
        let table = unsafe { SlotTable::attach(mem) };
        if table.refused_epoch().is_some() {
            return None;
        }
        return Some(f(&table));
    }
    if is_cluster() {
        return None;
    }
    SESSION.get().map(|owned| f(owned.table()))
}

/// The guard is as far ahead of the clock as its policy allows and its millisecond has no room
/// (full, or the sequence wrapped), so wait until the clock passes `ms`, or steps back
/// (`pg_shard_id_core::guard::wait_until_past`). Usually that is less than a millisecond away, so
/// spin (a sleep would oversleep by far more); if the guard is further ahead (`wait` after
/// `borrow` made a lead), sleep in short steps. Interrupts are checked on every round.
#[cold]
#[inline(never)]
fn wait_until_past(ms: i64, clock: &impl Fn() -> i64) {
    pg_shard_id_core::guard::wait_until_past(ms, clock, |left| {
        pgrx::check_for_interrupts!();
        if left > 2 {
            // SAFETY: a plain sleep.
            unsafe { pg_sys::pg_usleep(500) };
        } else {
            std::hint::spin_loop();
        }
    });
}

/// A layout error from the guard. Past the horizon because of a lease floor, say so.
#[cold]
#[inline(never)]
fn layout_error(e: LayoutError, table: &SlotTable, epoch_unix_ms: i64) -> ! {
    let floor = table.floor();
    if matches!(e, LayoutError::PastHorizon(_)) && floor > MAX_MS {
        crate::errors::raise_with_hint(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!(
                "pg_shard_id: the lease file \"{}\" records ids up to {}, past the last \
                 millisecond the id layout holds ({})",
                crate::lease::LEASE_FILE,
                format_unix_ms(floor.saturating_add(epoch_unix_ms)),
                format_unix_ms(epoch_unix_ms + MAX_MS)
            ),
            "No id can be past that horizon, so the lease was written by a clock that was far \
             ahead, or by hand. Check the server clock, then stop the server, delete \
             pg_shard_id.lease in the data directory and start the server again.",
        );
    }
    crate::errors::raise(e, epoch_unix_ms)
}

#[cold]
#[inline(never)]
fn epoch_moved_later(recorded_unix_ms: i64, epoch_unix_ms: i64) -> ! {
    let (recorded, configured) = (
        format_unix_ms(recorded_unix_ms),
        format_unix_ms(epoch_unix_ms),
    );
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "pg_shard_id: pg_shard_id.epoch ({configured}) is later than the epoch this server's \
             ids were made with ({recorded})"
        ),
        "pg_shard_id",
    )
    .set_detail("With a later epoch, new ids could repeat existing ones, so none are issued.")
    .set_hint(format!(
        "Set pg_shard_id.epoch = '{recorded}' (or earlier) in postgresql.conf and restart. Only if \
         no id made with the old epoch is kept anywhere: stop the server, delete pg_shard_id.lease \
         in the data directory, and start it again."
    ))
    .report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

#[cold]
#[inline(never)]
fn warn_clock_step(key: SlotKey, step_ms: i64, issued_ms: i64) {
    let sequence = pg_sys::Oid::from(sequence_of(key));
    // SAFETY: a catalog lookup by oid in a backend inside a transaction; NULL when not found.
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
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_WARNING,
        format!("pg_shard_id: the system clock stepped back by {step_ms} ms"),
        "pg_shard_id",
    )
    .set_detail(format!(
        "Ids of sequence \"{name}\" continue from millisecond {issued_ms} after the epoch, ahead of \
         the clock, and stay unique; their timestamps run ahead until the clock catches up."
    ))
    .report(PgLogLevel::WARNING);
}

/// Sets up the shared table when loaded from `shared_preload_libraries`. Called from `_PG_init`.
pub fn init() {
    // SAFETY: read while PostgreSQL loads the library.
    if !unsafe { pg_sys::process_shared_preload_libraries_in_progress } {
        return;
    }
    PRELOADED.store(true, Ordering::Relaxed);
    crate::lease::register_wal();
    // SAFETY: _PG_init runs once per process, in the postmaster here, before any hook can run;
    // chaining to the previous hook is the documented protocol.
    unsafe {
        #[cfg(feature = "pg14")]
        request_shared_memory();
        #[cfg(not(feature = "pg14"))]
        {
            PREV_SHMEM_REQUEST_HOOK.get_or_init(|| pg_sys::shmem_request_hook);
            pg_sys::shmem_request_hook = Some(shmem_request);
        }
        PREV_SHMEM_STARTUP_HOOK.get_or_init(|| pg_sys::shmem_startup_hook);
        pg_sys::shmem_startup_hook = Some(shmem_startup);
    }
}

static PREV_SHMEM_STARTUP_HOOK: OnceLock<pg_sys::shmem_startup_hook_type> = OnceLock::new();
#[cfg(not(feature = "pg14"))]
static PREV_SHMEM_REQUEST_HOOK: OnceLock<pg_sys::shmem_request_hook_type> = OnceLock::new();

fn table_bytes() -> usize {
    SlotTable::size_of(settings::max_sequences())
}

/// # Safety
/// Call only where PostgreSQL allows requesting shared memory and LWLocks (the request hook, or
/// `_PG_init` before PostgreSQL 15).
unsafe fn request_shared_memory() {
    // SAFETY: see the function's contract.
    unsafe {
        pg_sys::RequestAddinShmemSpace(table_bytes());
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), 1);
    }
}

#[cfg(not(feature = "pg14"))]
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

#[pg_guard]
unsafe extern "C-unwind" fn shmem_startup() {
    // SAFETY: this is the startup hook: shared memory and the requested LWLock tranche exist. The
    // tranche's lock serialises find-or-create of the table (AddinShmemInitLock's role, by name).
    unsafe {
        if let Some(Some(prev)) = PREV_SHMEM_STARTUP_HOOK.get() {
            prev();
        }
        let init_lock = &raw mut (*pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr())).lock;
        pg_sys::LWLockAcquire(init_lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        let mut found = false;
        let mem = pg_sys::ShmemInitStruct(c"pg_shard_id guard".as_ptr(), table_bytes(), &mut found)
            .cast::<u8>();
        assert_eq!(
            mem as usize % SlotTable::align(),
            0,
            "shared memory is not aligned"
        );
        if !found {
            crate::lease::start(&SlotTable::init_in(mem, settings::max_sequences()));
        }
        SHARED_TABLE.store(mem, Ordering::Release);
        pg_sys::LWLockRelease(init_lock);
    }
}
