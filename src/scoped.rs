//! Three ways to run a piece of SQL-level work so that it cannot leak into the caller's
//! transaction: with a setting changed for its duration only, under a resource owner of its own,
//! and in a subtransaction whose ERROR is caught.
//! Call each inside pgrx's guard (the slow path, or a `#[pg_extern]`).

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

/// Runs `work` under a resource owner of its own, a child of the current one, released when
/// `work` returns as a subtransaction's is at its commit: the locks `work` took pass to the
/// caller's owner and are kept until the transaction ends; anything else left open is reported
/// as a leak. An ERROR in `work` leaves it to the abort that follows (it is the child of an owner
/// the abort releases), with the caller's owner current again.
///
/// Why: a resource owner remembers relations in an array until it holds more than 64 at once,
/// then in a hash table for the rest of its life. A query over the catalog opens more than that
/// at once; run under the statement's own owner (a portal's), it left every later `nextval()` of
/// that statement paying for the hash: 46 instructions per id of 2,414 (`bench/cost_gate.sh`).
pub fn with_own_resource_owner<T>(name: &CStr, work: impl FnOnce() -> T) -> T {
    /// Makes `0` the current resource owner again when dropped, on return or unwind.
    struct Restore(pg_sys::ResourceOwner);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: the owner that was current when `with_own_resource_owner` was called,
            // alive for as long as its call.
            unsafe { pg_sys::CurrentResourceOwner = self.0 };
        }
    }
    // SAFETY: the owner is made a child of the current one, current only while `work` runs, then
    // released in its three phases with `isCommit` (CommitSubTransaction's calls) and deleted.
    unsafe {
        let parent = pg_sys::CurrentResourceOwner;
        let own = pg_sys::ResourceOwnerCreate(parent, name.as_ptr());
        let restore = Restore(parent);
        pg_sys::CurrentResourceOwner = own;
        let result = work();
        drop(restore);
        for phase in [
            pg_sys::ResourceReleasePhase::RESOURCE_RELEASE_BEFORE_LOCKS,
            pg_sys::ResourceReleasePhase::RESOURCE_RELEASE_LOCKS,
            pg_sys::ResourceReleasePhase::RESOURCE_RELEASE_AFTER_LOCKS,
        ] {
            pg_sys::ResourceOwnerRelease(own, phase, true, false);
        }
        pg_sys::ResourceOwnerDelete(own);
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
