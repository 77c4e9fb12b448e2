//! Two ways to run a piece of SQL-level work so that it cannot leak into the caller's transaction:
//! with a setting changed for its duration only, and in a subtransaction whose ERROR is caught.
//! Call both inside pgrx's guard (the slow path, or a `#[pg_extern]`).

use pgrx::pg_sys::panic::CaughtError;
use pgrx::prelude::*;
use pgrx::PgTryBuilder;
use std::ffi::CStr;

/// Runs `work` with setting `name` = `value`, as a function's SET clause does
/// (`fmgr_security_definer`): a new GUC nest level, popped when `work` returns; an ERROR in
/// `work` pops it with the (sub)transaction it aborts.
pub fn with_setting<T>(name: &CStr, value: &CStr, work: impl FnOnce() -> T) -> T {
    with_settings(&[(name, value)], work)
}

/// [`with_setting`] for several settings at once.
pub fn with_settings<T>(settings: &[(&CStr, &CStr)], work: impl FnOnce() -> T) -> T {
    // SAFETY: GUC calls in a backend inside a transaction; the nest level is pushed and popped
    // here, or popped by the abort of the (sub)transaction an ERROR ends.
    unsafe {
        let nest = pg_sys::NewGUCNestLevel();
        for (name, value) in settings {
            pg_sys::set_config_option(
                name.as_ptr(),
                value.as_ptr(),
                pg_sys::GucContext::PGC_USERSET,
                pg_sys::GucSource::PGC_S_SESSION,
                pg_sys::GucAction::GUC_ACTION_SAVE,
                true,
                0,
                false,
            );
        }
        let result = work();
        pg_sys::AtEOXact_GUC(true, nest);
        result
    }
}

/// Runs `work` in a subtransaction: released when it returns, rolled back when it raises an
/// ERROR, which is caught and returned (PL/pgSQL's EXCEPTION block: pl_exec.c,
/// exec_stmt_block). Locks `work` took are kept until the transaction ends when it returns.
pub fn in_subtransaction<T>(
    work: impl FnOnce() -> T + std::panic::UnwindSafe,
) -> Result<T, Box<CaughtError>> {
    // SAFETY: PL/pgSQL's protocol: begin an internal subtransaction, run, then release it or roll
    // it back, and restore the memory context and resource owner the caller had. The ERROR, if
    // any, was caught and its state flushed by PgTryBuilder before the rollback.
    unsafe {
        let context = pg_sys::CurrentMemoryContext;
        let owner = pg_sys::CurrentResourceOwner;
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(context);
        let outcome = PgTryBuilder::new(|| Ok(work()))
            .catch_others(|caught| Err(Box::new(caught)))
            .execute();
        if outcome.is_ok() {
            pg_sys::ReleaseCurrentSubTransaction();
        } else {
            pg_sys::RollbackAndReleaseCurrentSubTransaction();
        }
        pg_sys::MemoryContextSwitchTo(context);
        pg_sys::CurrentResourceOwner = owner;
        outcome
    }
}

/// The SQLSTATE of a caught ERROR.
pub fn sql_error_code(caught: &CaughtError) -> PgSqlErrorCode {
    report_of(caught).sql_error_code()
}

/// The report of a caught ERROR.
pub fn report_of(caught: &CaughtError) -> &pgrx::pg_sys::panic::ErrorReportWithLevel {
    match caught {
        CaughtError::PostgresError(report)
        | CaughtError::ErrorReport(report)
        | CaughtError::RustPanic {
            ereport: report, ..
        } => report,
    }
}
