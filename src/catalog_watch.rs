//! Feeds `pg_shard_id_core::catalog_watch` (whether a database has defaults that name no
//! sequence, remembered across backends): PostgreSQL's `object_access_hook` counts every object
//! created, altered or dropped, and [`Pg`] answers which transactions still run. Installed only with the
//! library preloaded (the watch is in shared memory, and then every backend runs the hook, the
//! one making a change included); not used while the server is in recovery (a standby replays
//! changes without running hooks: what it remembered before its promotion is not trusted, since
//! it never records anything).

use crate::shmem;
use pg_shard_id_core::backfill::widen_xid;
use pg_shard_id_core::catalog_watch::{Ticket, Transactions};
use pg_shard_id_core::slots::slot_key;
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

/// Counts a change of this database for every object created, altered or dropped (over-counting
/// costs one more read of the catalog, under-counting a repeated id), with the transaction that
/// made it; but for indexes, sequences and TOAST tables, which cannot hold a DEFAULT. A sequence
/// dropped also loses what its guard knew of its data floor: a sequence that later takes its
/// oid reads its own.
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
    use pg_sys::ObjectAccessType::{OAT_DROP, OAT_POST_ALTER, OAT_POST_CREATE};
    if access != OAT_POST_CREATE && access != OAT_POST_ALTER && access != OAT_DROP {
        return;
    }
    let Some(watch) = shmem::catalog_watch() else {
        return;
    };
    // SAFETY: a catalog lookup by oid and a backend global, in the transaction that changes the
    // object (a lookup that cannot see it yet answers 0: counted).
    let (relkind, database) = unsafe {
        let relkind = if class == pg_sys::RelationRelationId {
            pg_sys::get_rel_relkind(object) as u8
        } else {
            0
        };
        (relkind, pg_sys::MyDatabaseId)
    };
    if relkind == pg_sys::RELKIND_SEQUENCE && access == OAT_DROP {
        let key = slot_key(database.to_u32(), object.to_u32());
        shmem::table().forget_data_floor(key);
    }
    let cannot_hold_a_default = [
        pg_sys::RELKIND_INDEX,
        pg_sys::RELKIND_PARTITIONED_INDEX,
        pg_sys::RELKIND_SEQUENCE,
        pg_sys::RELKIND_TOASTVALUE,
    ];
    if cannot_hold_a_default.contains(&relkind) {
        // (before the transaction gets an id: DROP INDEX CONCURRENTLY must be the first action of
        // a transaction that has none, and with the library preloaded it failed on every
        // server, the conversion's rebuild of an interrupted twin among them: the twenty-fifth
        // review)
        return;
    }
    // SAFETY: the transaction that changes the object; in parallel mode an id cannot be assigned
    // (and the leader's is there already, if any).
    let xid = unsafe {
        if pg_sys::IsInParallelMode() {
            pg_sys::GetTopFullTransactionIdIfAny()
        } else {
            pg_sys::GetTopFullTransactionId()
        }
    };
    watch.changed(database.to_u32(), xid.value);
    // A database created, altered or dropped is changed itself (the hook runs in the database
    // of the session that runs the command): what was remembered of a dropped database must not
    // hold for one that gets its oid again (`CREATE DATABASE ... OID`, or the counter wrapping;
    // the review of issue 57's change).
    if class == pg_sys::DatabaseRelationId && object != database {
        watch.changed(object.to_u32(), xid.value);
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
        // (PostgreSQL 19 adds an argument: all databases' transactions are the ones meant here.)
        unsafe {
            let next = pg_sys::ReadNextFullTransactionId().value;
            widen_xid(next, pg_sys::GetOldestActiveTransactionId().into_inner())
        }
    }

    fn newest_prepared(&self) -> u64 {
        let newest = crate::read::one::<i64>(
            "SELECT max(transaction::text::bigint) FROM pg_catalog.pg_prepared_xacts",
        );
        match newest {
            Ok(Some(xid)) => {
                // SAFETY: a plain call into the transaction manager.
                let next = unsafe { pg_sys::ReadNextFullTransactionId().value };
                widen_xid(next, xid as u32)
            }
            Ok(None) => 0, // none prepared
            // (the view is readable by every role; should it fail, every transaction up to the
            // newest assigned stands in for the prepared ones)
            Err(_) => {
                // SAFETY: a plain call into the transaction manager.
                unsafe { pg_sys::ReadNextFullTransactionId().value.saturating_sub(1) }
            }
        }
    }
}

/// Whether this database has no default that names no sequence, if that is known and still
/// holds for this transaction: `Ok((true, at))` none, `Ok((false, at))` some, `at` the watch's
/// clock then; else how to record what the caller reads next ([`record`]). A caller that reads
/// less on "none" asks [`unchanged_since`]`(at)` after its read.
pub fn known() -> Result<(bool, u64), Ticket> {
    match (shmem::catalog_watch(), watch_args()) {
        (Some(watch), Some((database, own))) => watch.known_at(database, own, &Pg),
        _ => Err(Ticket::never()),
    }
}

/// Whether nothing was counted in this database since `known` answered at `at` (then what the
/// caller read after it missed no change).
pub fn unchanged_since(at: u64) -> bool {
    match (shmem::catalog_watch(), watch_args()) {
        (Some(watch), Some((database, own))) => watch.unchanged_since(database, own, at, &Pg),
        _ => false,
    }
}

/// This database and this transaction's id (0: none assigned), when the watch may be used:
/// not in recovery.
fn watch_args() -> Option<(u32, u64)> {
    // SAFETY: backend globals and the transaction's own id, read in a transaction.
    unsafe {
        (!pg_sys::RecoveryInProgress()).then(|| {
            (
                pg_sys::MyDatabaseId.to_u32(),
                pg_sys::GetTopFullTransactionIdIfAny().value,
            )
        })
    }
}

/// Records `none`, read after [`known`] gave `ticket`, unless the catalog changed since.
pub fn record(ticket: Ticket, none: bool) {
    if let Some(watch) = shmem::catalog_watch() {
        // SAFETY: a backend global.
        watch.record(unsafe { pg_sys::MyDatabaseId }.to_u32(), ticket, none);
    }
}
