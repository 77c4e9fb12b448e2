//! How layout errors reach the user: one message, one SQLSTATE, one hint each.

use pg_shard_id_core::layout::{LayoutError, MAX_MS, MAX_SEQ, MAX_SHARD, SEQ_BITS, SHARD_BITS};
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
