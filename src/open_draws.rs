//! The database side of `pg_shard_id_core::open_draws`: this backend's number and transaction,
//! the record published before the guard decides a transaction's first DEFAULT id of a sequence
//! ([`note`], on the hot path: plain Rust), and the waits of `next_shard_id_at` ([`settle`],
//! inside pgrx's guard).

use crate::shmem;
use pg_shard_id_core::open_draws::{OpenDraw, Published};
use pg_shard_id_core::slots::SlotKey;
use pgrx::prelude::*;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

// What this backend last published (process-local statics: a backend is one thread, and a
// thread-local would cost a call per id).
static PUBLISHED_TRANSACTION: AtomicU32 = AtomicU32::new(0);
static PUBLISHED_KEY: AtomicU64 = AtomicU64::new(0);

/// This backend's number, the index of its record: `MyBackendId - 1` (PostgreSQL 15, 16) or
/// `MyProcNumber` (17, 18), below `MaxBackends` for every backend that runs SQL.
#[inline(always)]
fn my_backend() -> usize {
    // SAFETY: backend globals, set at connection.
    unsafe {
        #[cfg(any(feature = "pg14", feature = "pg15", feature = "pg16"))]
        return (pg_sys::MyBackendId - 1) as usize;
        #[cfg(any(feature = "pg17", feature = "pg18"))]
        return pg_sys::MyProcNumber as usize;
    }
}

/// The DEFAULT is about to draw an id of sequence `key`: publish this transaction's record first,
/// if it does not cover the sequence yet. Plain Rust: two comparisons on the common path, never
/// calls into PostgreSQL, never raises an ERROR.
#[inline(always)]
pub fn note(key: SlotKey, clock: &impl Fn() -> i64) {
    let transaction = crate::mask::local_transaction();
    let published = Published {
        transaction: PUBLISHED_TRANSACTION.load(Relaxed),
        key: PUBLISHED_KEY.load(Relaxed),
    };
    if !published.covers(transaction, key) {
        publish(transaction, key, clock());
    }
}

#[cold]
#[inline(never)]
fn publish(transaction: u32, key: SlotKey, clock_ms: i64) {
    // without shared memory (guard mode session) nothing reads records: next_shard_id_at refuses
    let published = match shmem::open_draws() {
        Some(draws) => draws.publish(my_backend(), transaction, key, clock_ms),
        None => Published { transaction, key },
    };
    PUBLISHED_TRANSACTION.store(published.transaction, Relaxed);
    PUBLISHED_KEY.store(published.key, Relaxed);
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
/// below (when the milliseconds below the ceiling [`settle`] gave are all taken).
pub fn wait_up_to(key: SlotKey, last_ms: i64) {
    if let Some(draws) = shmem::open_draws() {
        for draw in draws.at_or_below(key, last_ms, my_backend()) {
            wait_for(draw);
        }
    }
}

fn virtual_transaction(draw: OpenDraw) -> pg_sys::VirtualTransactionId {
    #[cfg(any(feature = "pg14", feature = "pg15", feature = "pg16"))]
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
