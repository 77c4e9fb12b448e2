//! The database side of `pg_shard_id_core::open_draws`: this backend's number and transaction,
//! the record published before the guard decides a transaction's first DEFAULT id of a sequence
//! ([`publish`], on the slow path; [`published`], the fast path's check: plain Rust), and the waits
//! of `next_shard_id_at` ([`settle`], inside pgrx's guard).

use crate::shmem;
use pg_shard_id_core::open_draws::OpenDraw;
use pg_shard_id_core::slots::SlotKey;
use pgrx::prelude::*;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

// The sequence this backend's transaction last published its draws of (0: none yet in this
// transaction), reset when the transaction ends ([`register`]). A
// process-local static: a backend is one thread, and a thread-local would cost a call per id.
static PUBLISHED: AtomicU64 = AtomicU64::new(0);

/// This backend's number, the index of its record: `MyBackendId - 1` (PostgreSQL 15, 16) or
/// `MyProcNumber` (17, 18), below `MaxBackends` for every backend that runs SQL.
fn my_backend() -> usize {
    // SAFETY: backend globals, set at connection.
    unsafe {
        #[cfg(any(feature = "pg15", feature = "pg16"))]
        return (pg_sys::MyBackendId - 1) as usize;
        #[cfg(any(feature = "pg17", feature = "pg18"))]
        return pg_sys::MyProcNumber as usize;
    }
}

/// Whether this transaction published its draws of sequence `key` last: the fast path's
/// question (one load and one comparison; `bench/cost_gate.sh` counts them). A transaction that
/// draws from several sequences in turn takes the slow path at each change, where [`publish`]
/// finds its record covering them all and returns. Plain Rust: never calls into PostgreSQL.
#[inline(always)]
pub fn published(key: SlotKey) -> bool {
    PUBLISHED.load(Relaxed) == key
}

/// The DEFAULT is about to draw an id of sequence `key` with the clock reading `clock_ms` (since
/// the epoch): publishes this transaction's record first, before the guard decides. The record
/// says a second less than the clock: the guard issues at or above the clock it reads next, which
/// a clock stepping back between the two readings could put below this one.
pub fn publish(key: SlotKey, clock_ms: i64) {
    if published(key) {
        return;
    }
    let transaction = crate::mask::local_transaction();
    // without shared memory (guard mode session) nothing reads records: next_shard_id_at refuses
    if let Some(draws) = shmem::open_draws() {
        draws.publish(
            my_backend(),
            transaction,
            key,
            clock_ms - crate::backfill::LIVE_MARGIN_MS,
        );
    }
    PUBLISHED.store(key, Relaxed);
}

/// Forgets what this transaction published (its next id takes the slow path again): when the
/// origin check is to run again (`crate::origin`).
pub fn forget() {
    PUBLISHED.store(0, Relaxed);
}

/// Registers the callback that forgets, at the end of each transaction, what it published (the
/// record itself stays, naming a virtual transaction that has ended: free to read past). Called
/// from `_PG_init` when preloaded.
pub fn register() {
    // SAFETY: called once per process from _PG_init; the callback lives as long as the library.
    unsafe { pg_sys::RegisterXactCallback(Some(at_transaction_end), std::ptr::null_mut()) };
}

#[pg_guard]
unsafe extern "C-unwind" fn at_transaction_end(
    event: pg_sys::XactEvent::Type,
    _arg: *mut std::ffi::c_void,
) {
    use pg_sys::XactEvent::*;
    if matches!(
        event,
        XACT_EVENT_COMMIT
            | XACT_EVENT_ABORT
            | XACT_EVENT_PREPARE
            | XACT_EVENT_PARALLEL_COMMIT
            | XACT_EVENT_PARALLEL_ABORT
    ) && PUBLISHED.load(Relaxed) != 0
    {
        PUBLISHED.store(0, Relaxed);
        // every row of the transaction is in its indexes now: nothing to wait for (a prepared
        // transaction's virtual id would otherwise lead a waiter to its COMMIT PREPARED)
        if let Some(draws) = shmem::open_draws() {
            draws.clear(my_backend());
        }
    }
}

/// The guard issued `ms`, below the clock this transaction published (the clock stepped back):
/// the record goes down to it.
pub fn lower(ms: i64) {
    if let Some(draws) = shmem::open_draws() {
        draws.lower(my_backend(), crate::mask::local_transaction(), ms);
    }
}

/// Before `next_shard_id_at` hands out ids of sequence `key` from `ms` up to `last_ms` (the
/// guard already raised above `last_ms`): waits for every other transaction whose DEFAULT ids of
/// the sequence may be at `ms` or below and not in an index yet, and returns the last millisecond
/// the call may hand out without waiting for more: below the lowest one a running transaction
/// published above `ms`. May wait (on the transaction's virtual transaction id, as any lock:
/// `lock_timeout`, the deadlock detector and cancelling apply): inside pgrx's guard only.
pub fn settle(key: SlotKey, ms: i64, last_ms: i64) -> i64 {
    let Some(draws) = shmem::open_draws() else {
        return last_ms;
    };
    let mut ceiling = last_ms;
    // the caller's own DEFAULT ids of the sequence (a transaction cannot wait for itself): below
    // the first of them
    if let Some(own) = draws.own(key, my_backend(), crate::mask::local_transaction()) {
        ceiling = ceiling.min(own - 1);
    }
    for draw in draws.at_or_below(key, last_ms, my_backend()) {
        if draw.lowest_ms <= ms {
            wait_for(draw);
        } else if running(draw) {
            ceiling = ceiling.min(draw.lowest_ms - 1);
        }
    }
    ceiling
}

/// Waits for every other transaction whose DEFAULT ids of sequence `key` may be at `last_ms` or
/// below (when the milliseconds below the ceiling [`settle`] gave are all taken), and returns the
/// last millisecond the call may hand out now: `last_ms`, or below the caller's own DEFAULT ids.
pub fn wait_up_to(key: SlotKey, last_ms: i64) -> i64 {
    let Some(draws) = shmem::open_draws() else {
        return last_ms;
    };
    for draw in draws.at_or_below(key, last_ms, my_backend()) {
        wait_for(draw);
    }
    match draws.own(key, my_backend(), crate::mask::local_transaction()) {
        Some(own) => last_ms.min(own - 1),
        None => last_ms,
    }
}

fn virtual_transaction(draw: OpenDraw) -> pg_sys::VirtualTransactionId {
    #[cfg(any(feature = "pg15", feature = "pg16"))]
    return pg_sys::VirtualTransactionId {
        backendId: draw.backend as i32 + 1,
        localTransactionId: draw.transaction,
    };
    #[cfg(any(feature = "pg17", feature = "pg18"))]
    return pg_sys::VirtualTransactionId {
        procNumber: draw.backend as i32,
        localTransactionId: draw.transaction,
    };
}

fn wait_for(draw: OpenDraw) {
    // SAFETY: PostgreSQL's lock manager, in a transaction, inside pgrx's guard (an ERROR there,
    // a cancel or a lock timeout, is re-raised by it).
    unsafe { pg_sys::VirtualXactLock(virtual_transaction(draw), true) };
}

fn running(draw: OpenDraw) -> bool {
    // SAFETY: as in wait_for; without waiting it only checks.
    !unsafe { pg_sys::VirtualXactLock(virtual_transaction(draw), false) }
}
