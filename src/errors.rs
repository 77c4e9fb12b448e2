//! How errors and warnings reach the user: one message, one SQLSTATE, one hint each. This module
//! depends on nothing of this crate (the other modules depend on it): only on the core crate and
//! pgrx.

use pg_shard_id_core::layout::{LayoutError, MAX_MS, MAX_SEQ, MAX_SHARD, SEQ_BITS, SHARD_BITS};
use pg_shard_id_core::slots::{sequence_of, SlotKey};
use pg_shard_id_core::time::format_unix_ms;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;

/// Raises `error` as an ERROR. `epoch_unix_ms` names the epoch in the hint where time is involved.
pub fn raise(error: LayoutError, epoch_unix_ms: i64) -> ! {
    use PgSqlErrorCode::*;
    let (code, hint) = match error {
        LayoutError::ShardOutOfRange(_) => (
            ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!("Logical shards are numbered 0 to {MAX_SHARD} ({SHARD_BITS} bits)."),
        ),
        LayoutError::SeqOutOfRange(_) => (
            ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!("The sequence field holds 0 to {MAX_SEQ} ({SEQ_BITS} bits)."),
        ),
        LayoutError::BeforeEpoch(_) => (
            ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!(
                "Ids count milliseconds from the epoch {}; check the timestamp and the server \
                 clock.",
                format_unix_ms(epoch_unix_ms)
            ),
        ),
        LayoutError::PastHorizon(_) => (
            ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!(
                "With the epoch {} ids stay positive until {}.",
                format_unix_ms(epoch_unix_ms),
                format_unix_ms(epoch_unix_ms.saturating_add(MAX_MS))
            ),
        ),
        LayoutError::NegativeId(_) => (
            ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            "pg_shard_id never issues negative ids; this value was made some other way."
                .to_string(),
        ),
    };
    ErrorReport::new(code, error.to_string(), "pg_shard_id")
        .set_hint(hint)
        .report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Raises a layout error from the guard. Past the horizon because of a lease floor (`floor`, in
/// ms since the epoch, is past the layout), says so and names the lease file.
#[cold]
#[inline(never)]
pub fn raise_layout_error(error: LayoutError, floor: i64, epoch_unix_ms: i64) -> ! {
    if matches!(error, LayoutError::PastHorizon(_)) && floor > MAX_MS {
        raise_with_hint(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!(
                "pg_shard_id: the lease file \"{}\" records ids up to {}, past the last \
                 millisecond the id layout holds ({})",
                pg_shard_id_core::lease::LEASE_FILE,
                format_unix_ms(floor.saturating_add(epoch_unix_ms)),
                format_unix_ms(epoch_unix_ms + MAX_MS)
            ),
            "No id can be past that horizon, so the lease was written by a clock that was far \
             ahead, or by hand. Check the server clock, then stop the server, delete \
             pg_shard_id.lease in the data directory and start the server again.",
        );
    }
    raise(error, epoch_unix_ms)
}

/// Where the epoch that the configured one is later than was recorded.
pub enum Recorded {
    /// In this server's lease (its file or WAL): the server's own ids.
    Lease,
    /// In the database's table `_pg_shard_id.origin`, carried by pg_dump and pg_upgrade.
    Origin,
}

/// Raises 55000: `pg_shard_id.epoch` is later than the epoch ids were made with, so new ids could
/// repeat old ones.
#[cold]
#[inline(never)]
pub fn epoch_later_than_recorded(recorded_unix_ms: i64, epoch_unix_ms: i64, by: Recorded) -> ! {
    let (recorded, configured) = (
        format_unix_ms(recorded_unix_ms),
        format_unix_ms(epoch_unix_ms),
    );
    let (whose, carried, how) = match by {
        Recorded::Lease => (
            "this server's",
            "",
            format!(
                "Set pg_shard_id.epoch = '{recorded}' (or earlier) in postgresql.conf and \
                 restart. Only if no id made with the old epoch is kept anywhere: stop the \
                 server, delete pg_shard_id.lease in the data directory, and start it again."
            ),
        ),
        Recorded::Origin => (
            "this database's",
            " The epoch is recorded in the table _pg_shard_id.origin, which pg_dump and \
             pg_upgrade carry; postgresql.conf is not carried.",
            format!(
                "Set pg_shard_id.epoch = '{recorded}' (or earlier) in postgresql.conf and \
                 restart PostgreSQL."
            ),
        ),
    };
    ErrorReport::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!(
            "pg_shard_id: pg_shard_id.epoch ({configured}) is later than the epoch {whose} ids \
             were made with ({recorded})"
        ),
        "pg_shard_id",
    )
    .set_detail(format!(
        "With a later epoch, new ids could repeat existing ones, so none are issued.{carried}"
    ))
    .set_hint(how)
    .report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Logs the WARNING for a clock that stepped back by `step_ms`, seen while issuing for `key`.
#[cold]
#[inline(never)]
pub fn warn_clock_step(key: SlotKey, step_ms: i64, issued_ms: i64) {
    let name = relation_name(pg_sys::Oid::from(sequence_of(key)));
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

/// A relation's name for messages (its oid when it is gone).
pub fn relation_name(relation: pg_sys::Oid) -> String {
    // SAFETY: a catalog lookup by oid in a backend inside a transaction; NULL when not found.
    unsafe {
        let name = pg_sys::get_rel_name(relation);
        if name.is_null() {
            format!("oid {}", relation.to_u32())
        } else {
            std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned()
        }
    }
}

/// Raises an ERROR with `code`, `message` and `hint`.
pub fn raise_with_hint(code: PgSqlErrorCode, message: String, hint: &str) -> ! {
    ErrorReport::new(code, message, "pg_shard_id")
        .set_hint(hint)
        .report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Where a function runs, as a type: the code shared by the entry points of `next_shard_id` takes
/// one, so that what may raise an ERROR or call PostgreSQL goes through [`Boundary::run`], and each
/// entry point says by its type whether pgrx's guard is already around it.
pub trait Boundary {
    /// Runs `f`, which may raise an ERROR or call into PostgreSQL, inside pgrx's guard.
    fn run<R>(f: impl FnOnce() -> R) -> R;
}

/// Called by PostgreSQL without pgrx's wrapper (`next_shard_id(seq, shard)`'s raw entry point):
/// [`Boundary::run`] enters pgrx's guard for `f` ([`guarded`]).
pub struct OutsideGuard;

impl Boundary for OutsideGuard {
    #[inline(always)]
    fn run<R>(f: impl FnOnce() -> R) -> R {
        guarded(f)
    }
}

/// Inside a `#[pg_extern]` function: pgrx's guard is already there, and a second one inside it
/// would re-raise an ERROR by longjmp across the outer wrapper's frames (which pgrx forbids), so
/// [`Boundary::run`] just calls `f`.
pub struct InsideGuard;

impl Boundary for InsideGuard {
    #[inline(always)]
    fn run<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
}

/// Runs `f` inside pgrx's guard, for code that PostgreSQL calls without pgrx's wrapper (the
/// entry point of `next_shard_id(seq, shard)`, see `generate`): an ERROR raised in `f`, by this
/// crate or by PostgreSQL through pgrx, and any panic, become a PostgreSQL ERROR once `f`'s frames
/// are gone, exactly as they do in a `#[pg_extern]` function.
#[cold]
#[inline(never)]
pub fn guarded<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: called on the backend's thread, from a function PostgreSQL called; what `f` returns
    // has no destructor that an ERROR could skip (i64 or unit here).
    unsafe { pgrx::pg_sys::panic::pgrx_extern_c_guard(f) }
}

/// `schema.name` of a relation, quoted where SQL needs it: for statements the user copies (a
/// GRANT).
pub fn qualified_relation_name(relation: pg_sys::Oid) -> String {
    // SAFETY: catalog lookups by oid inside a transaction (NULL when not found); the quoted name
    // is palloc'd and copied before the memory context goes.
    unsafe {
        let name = pg_sys::get_rel_name(relation);
        let schema = pg_sys::get_namespace_name(pg_sys::get_rel_namespace(relation));
        if name.is_null() || schema.is_null() {
            return relation_name(relation);
        }
        std::ffi::CStr::from_ptr(pg_sys::quote_qualified_identifier(schema, name))
            .to_string_lossy()
            .into_owned()
    }
}
