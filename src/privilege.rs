//! `nextval()` for the generators, with its privilege check asked of PostgreSQL once per role,
//! sequence and transaction, and remembered until a catalog that can change the answer changes
//! (`pg_shard_id_core::privilege_cache` holds the memory; this module feeds and empties it).
//!
//! Why: `nextval()` runs PostgreSQL's privilege check (`pg_class_aclcheck`) on every call, 348 of
//! its 2,476 instructions per id at CACHE 1, and the answer only changes with a catalog. An
//! INSERT's own table privileges are checked once per statement; this is stricter than that:
//!
//! * The first call of a role on a sequence in a transaction runs `nextval_internal(seq, true)`: PostgreSQL's own
//!   check, errors and all. Only a success is remembered, keyed by the sequence and `GetUserId()`
//!   (so `SET ROLE`, `SET SESSION AUTHORIZATION` and SECURITY DEFINER functions each have their
//!   own entry).
//! * The answer serves the rest of that transaction only: the next transaction's first call runs
//!   the full path again, because `nextval()` takes the sequence's lock before its check and the
//!   lock receives other sessions' invalidations (a REVOKE committed while the lock waited behind
//!   an ALTER SEQUENCE is seen by the check). Within the transaction the lock is held from the
//!   first call on, so no invalidation can arrive between an answer and its use except the ones
//!   PostgreSQL receives elsewhere (another lock, a command's end), and those empty the memory.
//! * A check during which PostgreSQL received an invalidation (it can: a catalog the check reads
//!   for the first time in the transaction is locked, after the sequence's ACL was read) is not
//!   remembered ([`PrivilegeCache::generation`]).
//! * [`register`] makes PostgreSQL call [`forget`] for every invalidation of `pg_class` (the
//!   sequence's ACL and owner), `pg_authid` (superuser, and the roles behind
//!   `has_privs_of_role`), `pg_auth_members` (membership) and `pg_database`
//!   (`pg_database_owner`): the caches PostgreSQL's `acl.c` watches for its own memory of role
//!   memberships, plus the relation's. Any of them forgets every pair.
//! * A role that is refused is never remembered: each call asks again and raises 42501.
//!
//! So the saving is on every call after a sequence's first in a transaction: a statement that draws
//! many ids, not a one-row insert. `tests/guarantee/test_privileges.py` checks it against
//! `nextval()` itself: each way of taking a privilege away, the two races an outside review found
//! in a first version, and a seeded random run of grants, revokes, role changes and memberships
//! from another session, where every call must succeed exactly when `nextval()` does right after.

use pg_shard_id_core::privilege_cache::PrivilegeCache;
use pgrx::pg_sys;

unsafe extern "C-unwind" {
    // Declared here, not called through pgrx's bindings: those put a `sigsetjmp` boundary around
    // every call (220 instructions per id, counted), and this runs on the generator's hot path,
    // under its rule (see `nextval`'s Safety).
    fn GetUserId() -> pg_sys::Oid;
}

/// The (sequence, role) pairs PostgreSQL allowed in this backend's current transaction, since the
/// last invalidation.
static ALLOWED: PrivilegeCache = PrivilegeCache::new();

/// Asks PostgreSQL to empty [`ALLOWED`] whenever a catalog that decides a sequence privilege
/// changes. Called from `_PG_init`; the registration is inherited by every backend forked after
/// it (the postmaster loads a preloaded library), or made by the backend that loads it.
pub fn register() {
    for cache in [
        pg_sys::SysCacheIdentifier::RELOID,
        pg_sys::SysCacheIdentifier::AUTHOID,
        pg_sys::SysCacheIdentifier::AUTHMEMROLEMEM,
        pg_sys::SysCacheIdentifier::DATABASEOID,
    ] {
        // SAFETY: `forget` has the signature PostgreSQL expects and never raises an ERROR.
        unsafe {
            pg_sys::CacheRegisterSyscacheCallback(
                cache as i32,
                Some(forget),
                pg_sys::Datum::from(0),
            )
        };
    }
}

/// PostgreSQL's callback for an invalidation of one of [`register`]'s caches (`hashvalue` 0: all of
/// them, after a reset). Plain Rust: stores only.
unsafe extern "C-unwind" fn forget(_arg: pg_sys::Datum, _cache: i32, _hashvalue: u32) {
    ALLOWED.forget_all();
}

/// `nextval(seq)` as the generators draw it: the value, with the current role's USAGE or UPDATE
/// privilege on `seq` checked by PostgreSQL (see the module documentation for when the check is
/// remembered). Raises what `nextval()` raises.
///
/// # Safety
/// May raise an ERROR, which `longjmp`s through the caller's frame: the caller follows
/// `crate::generate::next_shard_id_wrapper`'s rule (nothing to drop in its frame at this call) or
/// calls it inside `pg_guard_ffi_boundary`.
#[inline(always)]
pub unsafe fn nextval(seq: pg_sys::Oid) -> i64 {
    // SAFETY: PostgreSQL's own functions and globals (MyProc is set before any SQL runs); the
    // caller accepts an ERROR through its frame.
    unsafe {
        let role = GetUserId().to_u32();
        let transaction = crate::mask::local_transaction();
        if ALLOWED.allows(seq.to_u32(), role, transaction) {
            crate::generate::nextval_internal(seq, false)
        } else {
            let began = ALLOWED.generation();
            let value = crate::generate::nextval_internal(seq, true);
            ALLOWED.remember(seq.to_u32(), role, transaction, began);
            value
        }
    }
}

/// Whether the caller may read every row of `relation`: SELECT on the table, and no row security
/// that applies to the caller. `shard_id_check()` and `next_shard_id_at` read indexes as the
/// extension: a stored id is shown only to a caller who could have selected it, and an index is
/// read only for one (issue 50).
pub fn caller_may_read(relation: pg_sys::Oid) -> bool {
    // SAFETY: catalog lookups by oid inside a transaction; check_enable_rls with noError = true
    // raises nothing.
    unsafe {
        pg_sys::pg_class_aclcheck(
            relation,
            pg_sys::GetUserId(),
            pg_sys::ACL_SELECT as pg_sys::AclMode,
        ) == pg_sys::AclResult::ACLCHECK_OK
            && pg_sys::check_enable_rls(relation, pg_sys::InvalidOid, true)
                != pg_sys::CheckEnableRlsResult::RLS_ENABLED as std::ffi::c_int
    }
}
