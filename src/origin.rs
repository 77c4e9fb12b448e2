//! The database's record of where its ids came from (`pg_shard_id_core::origin`), read once per
//! backend, before its first id: the table `_pg_shard_id.origin` (`sql/origin.sql`).
//!
//! This runs on the slow path only: [`checked`] is one load of a process-local flag on the fast
//! path, and everything else here runs inside pgrx's guard (it queries through SPI and may raise
//! 55000). A backend serves one database for its life, so one flag per process is exact.

use pg_shard_id_core::origin::{decide, floor_for_other_servers, Here, Recorded, Verdict};
use pg_shard_id_core::slots::SlotTable;
use pg_shard_id_core::time::format_unix_ms;
use pgrx::prelude::*;
use pgrx::{PgSubXactCallbackEvent, PgXactCallbackEvent};
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once this backend has checked its database's origin and may issue ids.
static CHECKED: AtomicBool = AtomicBool::new(false);

/// Whether this backend's database was checked (the fast path's question).
#[inline]
pub fn checked() -> bool {
    CHECKED.load(Ordering::Relaxed)
}

/// Reads `_pg_shard_id.origin` and acts on [`decide`]: raises 55000 when the configured epoch is later
/// than the recorded one; raises `table`'s floor when the ids were made by another server; records
/// this server. Call inside pgrx's guard, before the guard decides.
pub fn check(table: &SlotTable, epoch_unix_ms: i64) {
    if checked() {
        return;
    }
    let now = crate::clock::now_unix_ms();
    let Some(recorded) = read_recorded() else {
        // The SQL of a version before 0.4.0 (ALTER EXTENSION ... UPDATE not run yet): nothing is
        // recorded. On a server whose data directory started without a lease file (a new
        // cluster: the target of pg_upgrade or of a restore), the ids may have been made
        // elsewhere, so new ones start above anything another server could have issued.
        if table.started_without_lease() {
            raise_floor(
                table,
                epoch_unix_ms,
                floor_for_other_servers(now),
                "made before 0.4.0",
            );
        }
        CHECKED.store(true, Ordering::Relaxed);
        return;
    };
    let here = Here {
        // SAFETY: reads the control file's copy in shared memory, set at start-up.
        server: unsafe { pg_sys::GetSystemIdentifier() } as i64,
        // SAFETY: a backend global, set once at connection.
        database: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        lease_unix_ms: crate::shmem::is_cluster()
            .then(|| table.lease().load(std::sync::atomic::Ordering::Acquire)),
    };
    match decide(&recorded, &here, epoch_unix_ms, now) {
        Verdict::Refuse {
            recorded_epoch_unix_ms,
        } => crate::errors::epoch_later_than_recorded(
            recorded_epoch_unix_ms,
            epoch_unix_ms,
            crate::errors::Recorded::Origin,
        ),
        Verdict::Issue {
            floor_unix_ms,
            record,
        } => {
            if let Some(floor) = floor_unix_ms {
                let made_by = format!(
                    "system identifiers {:?}, databases {:?}",
                    recorded.system_identifiers,
                    recorded.databases.as_deref().unwrap_or_default()
                );
                raise_floor(table, epoch_unix_ms, floor, &made_by);
            }
            // SAFETY: a backend global of the transaction state.
            let read_only = unsafe { pg_sys::XactReadOnly };
            if record && read_only {
                // (nextval() of a temporary sequence works in a read-only transaction; the row
                // cannot be written there: check again at the next id)
                return;
            }
            // (the fast path asks whether the transaction published its draws, which the slow
            // path does after this check: forgetting the check forgets that too)
            let again = || {
                CHECKED.store(false, Ordering::Relaxed);
                crate::open_draws::forget();
            };
            match record.then(record_without_failing) {
                Some(Recording::Recorded) => {
                    // The row is part of this transaction: if it, or a subtransaction around
                    // it, aborts, the next id checks again (the rows will say whether to record).
                    pgrx::register_xact_callback(PgXactCallbackEvent::Abort, again);
                    pgrx::register_subxact_callback(
                        PgSubXactCallbackEvent::AbortSub,
                        move |_, _| again(),
                    );
                }
                Some(Recording::Later) => {
                    // Another transaction records (or did, after this one's snapshot): this
                    // backend's next transaction checks again, and reads what it wrote.
                    pgrx::register_xact_callback(PgXactCallbackEvent::Commit, again);
                    pgrx::register_xact_callback(PgXactCallbackEvent::Abort, again);
                }
                Some(Recording::Failed) | None => {}
            }
        }
    }
    CHECKED.store(true, Ordering::Relaxed);
}

/// Data made elsewhere was taken in: each sequence's first id reads its data floor (the newest
/// id stored in its DEFAULT columns, `crate::data_floor`); a sequence that no DEFAULT draws from
/// has no rows to read, so its ids start above anything the other server could have issued.
fn raise_floor(table: &SlotTable, epoch_unix_ms: i64, floor_unix_ms: i64, made_by: &str) {
    table.raise_elsewhere_floor(floor_unix_ms.saturating_sub(epoch_unix_ms));
    log!(
        "pg_shard_id: this database holds ids that another server or database may have made \
         ({made_by}; restored, upgraded or copied from it); each sequence's new ids start above \
         the newest id stored in its DEFAULT columns, and those of a sequence no DEFAULT draws \
         from at {}, above any id it could have issued",
        format_unix_ms(floor_unix_ms)
    );
}

/// The oid of `signature` (schema-qualified), if it exists and is a member of this extension
/// (so no role can plant a function of that name for `next_shard_id` to call).
fn member_function(signature: &str) -> Option<pg_sys::Oid> {
    let oid = crate::read::one::<pg_sys::Oid>(&format!(
        "SELECT pg_catalog.to_regprocedure({})::pg_catalog.oid",
        spi::quote_literal(signature)
    ))
    .ok()
    .flatten()?;
    of_this_extension(pg_sys::ProcedureRelationId, oid).then_some(oid)
}

/// Whether the object `oid` of catalog `class` is a member of this extension (an object of the
/// same name made by a role is not).
fn of_this_extension(class: pg_sys::Oid, oid: pg_sys::Oid) -> bool {
    // SAFETY: catalog lookups by oid and by name in a backend inside a transaction.
    let (owner, ours) = unsafe {
        (
            pg_sys::getExtensionOfObject(class, oid),
            pg_sys::get_extension_oid(c"pg_shard_id".as_ptr(), true),
        )
    };
    ours != pg_sys::InvalidOid && owner == ours
}

/// The rows of `_pg_shard_id.origin`, read as the extension: a scan of its heap under the
/// caller's snapshot, what the SQL functions `_pg_shard_id.read_origin()` and
/// `origin_databases()` return (the libraries of 0.4.0 to 0.6.0 call them). Not through them:
/// each new backend planned both (and the queries that found them) before its first id, more
/// than half of what that first id cost beyond `nextval()`'s (issue 57). `None` when the table
/// is not there, or not this extension's (the SQL of a version before 0.4.0); `databases` is
/// `None` without its `database` column (before 0.5.0). A column of another type than the
/// extension made it, or an epoch no millisecond holds (`infinity`), is an ERROR, as it was for
/// the SQL functions: never read as something else.
fn read_recorded() -> Option<Recorded> {
    // SAFETY: catalog lookups by name and by oid, in a transaction (the caller's); the table is
    // opened under AccessShareLock (kept to the transaction's end, as a query's), its columns
    // found and their types checked under that lock, scanned with the active snapshot (the
    // transaction's, pushed when none is active), and closed; after an ERROR the transaction's
    // abort releases the scan and the snapshot.
    unsafe {
        let schema = pg_sys::get_namespace_oid(c"_pg_shard_id".as_ptr(), true);
        if schema == pg_sys::InvalidOid {
            return None;
        }
        let relid = pg_sys::get_relname_relid(c"origin".as_ptr(), schema);
        if relid == pg_sys::InvalidOid || !of_this_extension(pg_sys::RelationRelationId, relid) {
            return None;
        }
        let relation = pg_sys::table_open(relid, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        // (under the lock, as the scan: each column by its name and its type, as made)
        let column = |name: &std::ffi::CStr, type_oid: pg_sys::Oid| {
            let attnum = pg_sys::get_attnum(relid, name.as_ptr());
            let at = usize::try_from(attnum).ok()?.checked_sub(1)?;
            if pg_sys::get_atttype(relid, attnum) != type_oid {
                error!(
                    "pg_shard_id: _pg_shard_id.origin.{} is not of the type the extension made it",
                    name.to_string_lossy()
                );
            }
            Some(at)
        };
        let (Some(epoch_at), Some(server_at)) = (
            column(c"epoch", pg_sys::TIMESTAMPTZOID),
            column(c"system_identifier", pg_sys::INT8OID),
        ) else {
            pg_sys::table_close(relation, pg_sys::NoLock as pg_sys::LOCKMODE);
            return None;
        };
        let database_at = column(c"database", pg_sys::OIDOID);
        // (a snapshot the scan keeps alive: the active one, or the transaction's made active)
        let pushed = !pg_sys::ActiveSnapshotSet();
        if pushed {
            pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot());
        }
        let snapshot = pg_sys::GetActiveSnapshot();
        let scan = pg_sys::systable_beginscan(
            relation,
            pg_sys::InvalidOid,
            false,
            snapshot,
            0,
            std::ptr::null_mut(),
        );
        let width = usize::try_from((*(*relation).rd_att).natts).unwrap_or(0);
        let mut values = vec![pg_sys::Datum::from(0usize); width];
        let mut nulls = vec![true; width];
        let mut earliest_micros: Option<i64> = None;
        let mut servers = std::collections::BTreeSet::new();
        let mut databases = std::collections::BTreeSet::new();
        loop {
            let tuple = pg_sys::systable_getnext(scan);
            if tuple.is_null() {
                break;
            }
            pg_sys::heap_deform_tuple(
                tuple,
                (*relation).rd_att,
                values.as_mut_ptr(),
                nulls.as_mut_ptr(),
            );
            // (timestamptz and bigint are by value: the datum is the number)
            if !nulls[epoch_at] {
                let micros = values[epoch_at].value() as i64;
                earliest_micros = Some(earliest_micros.map_or(micros, |e| e.min(micros)));
            }
            if !nulls[server_at] {
                servers.insert(values[server_at].value() as i64);
            }
            if let Some(at) = database_at {
                // (0 for a row recorded before 0.5.0, which did not say)
                databases.insert(if nulls[at] {
                    0
                } else {
                    values[at].value() as u32
                });
            }
        }
        pg_sys::systable_endscan(scan);
        if pushed {
            pg_sys::PopActiveSnapshot();
        }
        pg_sys::table_close(relation, pg_sys::NoLock as pg_sys::LOCKMODE);
        Some(Recorded {
            // (as those functions did: extract(epoch ...) * 1000 rounded; recorded epochs are whole
            // milliseconds)
            epoch_unix_ms: earliest_micros.map(|micros| {
                pg_shard_id_core::time::pg_micros_to_unix_ms_rounded(micros).unwrap_or_else(|| {
                    error!("pg_shard_id: _pg_shard_id.origin records an epoch no millisecond holds")
                })
            }),
            system_identifiers: servers.into_iter().collect(),
            databases: database_at.map(|_| databases.into_iter().collect()),
        })
    }
}

/// What became of recording this server.
enum Recording {
    Recorded,
    /// Not now, and nothing is wrong: another transaction is recording (its lock on the table is
    /// held), or recorded after this transaction's snapshot was taken (REPEATABLE READ), or this
    /// transaction is SERIALIZABLE. The next transaction's first id checks again.
    Later,
    /// A failure of the recording itself (a WARNING was given); the ids are issued all the same.
    Failed,
}

/// Records this server in a subtransaction, so that the extension's bookkeeping never waits for,
/// nor fails, the insert whose first id it is (README, guarantee 9):
/// * recorders take the origin table's SHARE UPDATE EXCLUSIVE lock, which conflicts with itself,
///   only if it is free at once: a transaction that recorded and is still open (its rows locked
///   until it ends) makes the others record later, never wait for it;
/// * under REPEATABLE READ, a recording that finds the rows changed since its snapshot (another
///   transaction recorded and committed: "could not serialize access due to concurrent
///   delete") is rolled back with its subtransaction and left for later; that error dooms
///   nothing at that isolation level;
/// * under SERIALIZABLE nothing is written: a write to the table every backend reads would let
///   the serializable snapshot isolation fail users' transactions over the extension's own rows
///   (writes by other isolation levels are not tracked by it, so the reads stay harmless).
///
/// Any other failure is a WARNING (once per backend) naming the fix, and the id is issued: with
/// the SQL of a version before 0.6.0, whose `_pg_shard_id.origin` has no replica identity, a
/// publication that publishes deletes refuses the DELETE of other servers' rows (55000), which
/// failed every first id of every backend in a database with a `FOR ALL TABLES` publication. The
/// data floor, not the record, keeps ids above data made elsewhere.
fn record_without_failing() -> Recording {
    // SAFETY: a backend global of the transaction state.
    if unsafe { pg_sys::XactIsoLevel } >= pg_sys::XACT_SERIALIZABLE as i32 {
        return Recording::Later;
    }
    let recorded =
        crate::scoped::in_subtransaction(|| lock_origin_at_once() && record_this_server());
    let caught = match recorded {
        Ok(true) => return Recording::Recorded,
        Ok(false) => return Recording::Later,
        Err(caught) => caught,
    };
    let report = crate::scoped::report_of(&caught);
    use PgSqlErrorCode::*;
    match report.sql_error_code() {
        // the rows changed after this transaction's snapshot: another transaction recorded
        ERRCODE_T_R_SERIALIZATION_FAILURE => return Recording::Later,
        // A cancel, a timeout, a deadlock or a lack of resources is not the recording's own
        // failure: it must end the statement as it would anywhere else (PL/pgSQL's WHEN OTHERS
        // does not catch a cancel either).
        ERRCODE_QUERY_CANCELED
        | ERRCODE_ADMIN_SHUTDOWN
        | ERRCODE_T_R_DEADLOCK_DETECTED
        | ERRCODE_LOCK_NOT_AVAILABLE
        | ERRCODE_OUT_OF_MEMORY
        | ERRCODE_DISK_FULL => (*caught).rethrow(),
        _ => {}
    }
    ereport!(
        PgLogLevel::WARNING,
        PgSqlErrorCode::ERRCODE_WARNING,
        format!(
            "pg_shard_id: could not record this server in _pg_shard_id.origin: {}",
            report.message()
        ),
        "Ids are issued all the same. Run ALTER EXTENSION pg_shard_id UPDATE (0.6.0 gives the \
         table a replica identity); shard_id_check() says what else is wrong."
    );
    Recording::Failed
}

/// Takes `_pg_shard_id.origin`'s SHARE UPDATE EXCLUSIVE lock if it is free at once (held until
/// the transaction ends, as the rows written under it are); false when another transaction holds
/// it or a conflicting lock. It conflicts with itself, so one recorder at a time, and not with
/// the ROW EXCLUSIVE lock of plain writes: a logical replication apply worker writing the table
/// (a `FOR ALL TABLES` subscription) never waits for it. (VACUUM takes the same lock: a recorder
/// that meets one records at its next transaction.)
fn lock_origin_at_once() -> bool {
    let Some(table) = crate::read::one::<pg_sys::Oid>(
        "SELECT pg_catalog.to_regclass('_pg_shard_id.origin')::pg_catalog.oid",
    )
    .ok()
    .flatten() else {
        return true; // (record_origin() says what is missing)
    };
    // SAFETY: a lock on a relation by oid, inside a transaction; never waits.
    unsafe {
        pg_sys::ConditionalLockRelationOid(
            table,
            pg_sys::ShareUpdateExclusiveLock as pg_sys::LOCKMODE,
        )
    }
}

/// Runs `_pg_shard_id.record_origin()` through the function manager: it is SECURITY DEFINER and
/// nobody has EXECUTE on it, so only the extension (and superusers) can record a server.
fn record_this_server() -> bool {
    let oid = member_function("_pg_shard_id.record_origin()").unwrap_or_else(|| {
        error!("pg_shard_id: _pg_shard_id.record_origin() is missing; reinstall the extension")
    });
    // SAFETY: a function of this extension (checked above) that takes no arguments and returns a
    // boolean.
    unsafe { pg_sys::OidFunctionCall0Coll(oid, pg_sys::InvalidOid) };
    true
}
