//! The database's record of where its ids came from (`pg_shard_id_core::origin`), read once per
//! backend, before its first id: the table `shard_id_origin` (`sql/origin.sql`).
//!
//! This runs on the slow path only: [`checked`] is one load of a process-local flag on the fast
//! path, and everything else here runs inside pgrx's guard (it queries through SPI and may raise
//! 55000). A backend serves one database for its life, so one flag per process is exact.

use pg_shard_id_core::origin::{decide, Recorded, Verdict};
use pg_shard_id_core::slots::SlotTable;
use pg_shard_id_core::time::format_unix_ms;
use pgrx::pg_sys::panic::ErrorReport;
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

/// Reads `shard_id_origin` and acts on [`decide`]: raises 55000 when the configured epoch is later
/// than the recorded one; raises `table`'s floor when the ids were made by another server; records
/// this server. Call inside pgrx's guard, before the guard decides.
pub fn check(table: &SlotTable, epoch_unix_ms: i64) {
    if checked() {
        return;
    }
    let names = Spi::get_two::<String, String>(
        "SELECT format('%I.shard_id_origin', n.nspname), \
                format('%I.shard_id_origin_record()', n.nspname) \
         FROM pg_catalog.pg_extension e JOIN pg_catalog.pg_namespace n ON n.oid = e.extnamespace \
         WHERE e.extname = 'pg_shard_id' \
           AND EXISTS (SELECT FROM pg_catalog.pg_class c \
                       WHERE c.relnamespace = e.extnamespace AND c.relname = 'shard_id_origin')",
    )
    .ok();
    let Some((Some(origin), Some(record_function))) = names else {
        // The SQL of a version before 0.4.0 (ALTER EXTENSION ... UPDATE not run yet): nothing is
        // recorded, so there is nothing to check.
        CHECKED.store(true, Ordering::Relaxed);
        return;
    };
    let (epoch, identifiers) = Spi::get_two::<i64, Vec<i64>>(&format!(
        "SELECT (extract(epoch FROM min(epoch)) * 1000)::bigint, \
                array_agg(DISTINCT system_identifier) FROM {origin}"
    ))
    .unwrap_or_else(|e| error!("pg_shard_id: could not read {origin}: {e}"));
    let recorded = Recorded {
        epoch_unix_ms: epoch,
        system_identifiers: identifiers.unwrap_or_default(),
    };
    // SAFETY: reads the control file's copy in shared memory, set at start-up.
    let this_server = unsafe { pg_sys::GetSystemIdentifier() } as i64;
    let now = crate::clock::now_unix_ms();
    match decide(&recorded, this_server, epoch_unix_ms, now) {
        Verdict::Refuse {
            recorded_epoch_unix_ms,
        } => epoch_later_than_recorded(recorded_epoch_unix_ms, epoch_unix_ms),
        Verdict::Issue {
            floor_unix_ms,
            record,
        } => {
            if let Some(floor) = floor_unix_ms {
                table.raise_floor(floor.saturating_sub(epoch_unix_ms));
                log!(
                    "pg_shard_id: this database holds ids made by another server (system \
                     identifiers {:?}; restored or upgraded from it); new ids start at {}, above \
                     any id that server could have issued",
                    recorded.system_identifiers,
                    format_unix_ms(floor)
                );
            }
            if record {
                record_this_server(&record_function);
                // The row is part of this transaction: if it, or a subtransaction around it,
                // aborts, the next id checks again (the rows will say whether to record).
                let again = || CHECKED.store(false, Ordering::Relaxed);
                pgrx::register_xact_callback(PgXactCallbackEvent::Abort, again);
                pgrx::register_subxact_callback(PgSubXactCallbackEvent::AbortSub, move |_, _| {
                    again()
                });
            }
        }
    }
    CHECKED.store(true, Ordering::Relaxed);
}

/// Runs `shard_id_origin_record()` through the function manager: it is SECURITY DEFINER and
/// nobody has EXECUTE on it, so only the extension (and superusers) can record a server.
fn record_this_server(function: &str) {
    let oid = Spi::get_one::<pg_sys::Oid>(&format!(
        "SELECT pg_catalog.to_regprocedure({})::oid",
        spi::quote_literal(function)
    ))
    .ok()
    .flatten()
    .unwrap_or_else(|| error!("pg_shard_id: {function} is missing; reinstall the extension"));
    // SAFETY: a function of this extension that takes no arguments and returns a boolean.
    unsafe { pg_sys::OidFunctionCall0Coll(oid, pg_sys::InvalidOid) };
}

#[cold]
#[inline(never)]
fn epoch_later_than_recorded(recorded_unix_ms: i64, epoch_unix_ms: i64) -> ! {
    let (recorded, configured) = (
        format_unix_ms(recorded_unix_ms),
        format_unix_ms(epoch_unix_ms),
    );
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "pg_shard_id: pg_shard_id.epoch ({configured}) is later than the epoch this \
             database's ids were made with ({recorded})"
        ),
        "pg_shard_id",
    )
    .set_detail(
        "With a later epoch, new ids could repeat existing ones, so none are issued. The epoch is \
         recorded in the table shard_id_origin, which pg_dump and pg_upgrade carry; \
         postgresql.conf is not carried.",
    )
    .set_hint(format!(
        "Set pg_shard_id.epoch = '{recorded}' (or earlier) in postgresql.conf and restart \
         PostgreSQL."
    ))
    .report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}
