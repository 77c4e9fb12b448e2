//! Feeds `pg_shard_id_core::catalog_watch` (whether a database has defaults that name no
//! sequence, remembered across backends): PostgreSQL's `object_access_hook` counts every object
//! created or altered, and [`Pg`] answers which transactions still run. Installed only with the
//! library preloaded (the watch is in shared memory, and then every backend runs the hook, the
//! one making a change included); not used while the server is in recovery (a standby replays
//! changes without running hooks: what it remembered before its promotion is not trusted, since
//! it never records anything).

use crate::shmem;
use pg_shard_id_core::backfill::widen_xid;
use pg_shard_id_core::catalog_watch::{Ticket, Transactions};
use pgrx::pg_sys;
use pgrx::prelude::*;
use std::sync::OnceLock;

static PREV_OBJECT_ACCESS_HOOK: OnceLock<pg_sys::object_access_hook_type> = OnceLock::new();

/// Installs the hook. Called from `_PG_init` when the library is preloaded (in the postmaster:
/// every backend forked after it inherits the hook).
pub fn register() {
    // SAFETY: _PG_init runs once per process, before any hook can run; chaining to the previous
    // hook is the documented protocol.
    unsafe {
        PREV_OBJECT_ACCESS_HOOK.get_or_init(|| pg_sys::object_access_hook);
        pg_sys::object_access_hook = Some(object_access);
    }
}

/// Counts a change for every object created or altered (any kind: over-counting costs one more
/// read of the catalog, under-counting a repeated id), with the transaction that made it.
#[pg_guard]
unsafe extern "C-unwind" fn object_access(
    access: pg_sys::ObjectAccessType::Type,
    class: pg_sys::Oid,
    object: pg_sys::Oid,
    sub: std::ffi::c_int,
    arg: *mut std::ffi::c_void,
) {
    // SAFETY: the previous hook, called with the arguments PostgreSQL gave this one.
    unsafe {
        if let Some(Some(prev)) = PREV_OBJECT_ACCESS_HOOK.get() {
            prev(access, class, object, sub, arg);
        }
    }
    if access != pg_sys::ObjectAccessType::OAT_POST_CREATE
        && access != pg_sys::ObjectAccessType::OAT_POST_ALTER
    {
        return;
    }
    if let Some(watch) = shmem::catalog_watch() {
        // SAFETY: in a transaction (the catalog was just written).
        watch.changed(unsafe { pg_sys::GetTopFullTransactionIdIfAny() }.value);
    }
}

/// Transactions as PostgreSQL's process array sees them.
struct Pg;

impl Transactions for Pg {
    fn running(&self, xid: u64) -> bool {
        // SAFETY: a plain call into the process array, in a transaction.
        unsafe { pg_sys::TransactionIdIsInProgress(pg_sys::TransactionId::from(xid as u32)) }
    }

    fn oldest_running(&self) -> u64 {
        // SAFETY: plain calls into the transaction manager, not in recovery (see `known`).
        unsafe {
            let next = pg_sys::ReadNextFullTransactionId().value;
            widen_xid(next, pg_sys::GetOldestActiveTransactionId().into_inner())
        }
    }
}

/// Whether this database has no default that names no sequence, if that is known and still
/// holds: `Ok(true)` none, `Ok(false)` some; else how to record what the caller reads next
/// ([`record`]).
pub fn known() -> Result<bool, Ticket> {
    // SAFETY: backend globals, read in a transaction.
    let (database, recovering) = unsafe { (pg_sys::MyDatabaseId, pg_sys::RecoveryInProgress()) };
    match shmem::catalog_watch() {
        Some(watch) if !recovering => watch.known(database.to_u32(), &Pg),
        _ => Err(Ticket::never()),
    }
}

/// Records `none`, read after [`known`] gave `ticket`, unless the catalog changed since.
pub fn record(ticket: Ticket, none: bool) {
    if let Some(watch) = shmem::catalog_watch() {
        // SAFETY: a backend global.
        watch.record(unsafe { pg_sys::MyDatabaseId }.to_u32(), ticket, none);
    }
}
