//! The node number: which server of a multi-server setup made an id, for `next_shard_id(seq)`.
//!
//! On Citus a column DEFAULT is evaluated on whichever node runs the insert (the coordinator, or a
//! worker for `INSERT ... SELECT`, MX inserts, `ALTER TABLE ... ADD COLUMN` backfills),
//! each with its own copy of the sequence and its own guard. Ids from two nodes are only distinct
//! if their shard fields differ, so the one-argument generator puts the *node* there:
//!
//! 1. `pg_shard_id.node` when it is set (0..8191; postgresql.conf or `ALTER SYSTEM`, a superuser's
//!    setting: no session can change it);
//! 2. otherwise, in a database with Citus, the node's Citus group id (`pg_dist_local_group`:
//!    0 on the coordinator, 1, 2, ... on the workers, unique in the cluster);
//! 3. otherwise an ERROR (55000): there is nothing that makes this server's ids distinct.
//!
//! It also refuses (55000) on a server without the library preloaded: the per-session guard lets
//! two sessions repeat ids, which a node of a cluster must never do (Citus's `citus_add_node`
//! creates the extension on a new node whether or not it is preloaded there).
//!
//! The group id is read once per backend and read again when Citus changes it (Citus sends a
//! relcache invalidation for `pg_dist_local_group` whenever it writes it).
//!
//! The two-argument form takes the shard from its caller, so on Citus every node would issue the
//! same shard number: in a database with Citus it refuses (0A000) instead of repeating ids.

use crate::errors;
use pg_shard_id_core::layout::{check_shard, MAX_SHARD};
use pgrx::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, Ordering};
use std::sync::OnceLock;

/// The cached group id, or `UNKNOWN`. Backends are single-threaded; atomics keep it safe Rust.
static GROUP_ID: AtomicI64 = AtomicI64::new(UNKNOWN);
/// The oid of `pg_dist_local_group` when the group id was read (its invalidations reset the cache).
static GROUP_RELATION: AtomicU32 = AtomicU32::new(0);
static CALLBACK_REGISTERED: AtomicBool = AtomicBool::new(false);
const UNKNOWN: i64 = -1;

/// The shard field for `next_shard_id(seq)`: the node number (see the module docs).
pub fn node_shard() -> i64 {
    if !crate::shmem::is_cluster() {
        // Two sessions of a server with per-session guards can repeat ids, whatever the shard:
        // a setup of several servers writing one table is exactly where that must not happen.
        errors::raise_with_hint(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "pg_shard_id: next_shard_id(seq) needs pg_shard_id in shared_preload_libraries on \
             this server"
                .into(),
            "Add pg_shard_id to shared_preload_libraries on every node (with Citus: \
             'citus,pg_shard_id') and restart.",
        );
    }
    let configured = crate::settings::node();
    if configured >= 0 {
        return configured;
    }
    let cached = GROUP_ID.load(Ordering::Relaxed);
    if cached != UNKNOWN {
        return cached;
    }
    let Some(relation) = citus_local_group_relation() else {
        errors::raise_with_hint(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "pg_shard_id: next_shard_id(seq) needs a node number: pg_shard_id.node is not set and \
             this database has no Citus"
                .into(),
            &format!(
                "Set pg_shard_id.node to a number (0 to {MAX_SHARD}) that no other server writing \
                 ids of the same tables uses, in postgresql.conf or with ALTER SYSTEM, and reload; \
                 or use next_shard_id(seq, shard)."
            ),
        );
    };
    let group = read_group_id();
    let Ok(shard) = check_shard(group) else {
        errors::raise_with_hint(
            PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!(
                "pg_shard_id: this node's Citus group id ({group}) is not a shard number (0 to \
                 {MAX_SHARD})"
            ),
            &format!(
                "Set pg_shard_id.node on every node to distinct numbers from 0 to {MAX_SHARD} and \
                 reload."
            ),
        );
    };
    register_callback();
    GROUP_RELATION.store(relation.to_u32(), Ordering::Relaxed);
    GROUP_ID.store(shard, Ordering::Relaxed);
    shard
}

/// Refuses the two-argument form in a database with Citus (see the module docs). Costs nothing
/// on a server without the Citus library: one cached check per backend.
pub fn refuse_explicit_shard_on_citus() {
    if citus_library_loaded() && citus_local_group_relation().is_some() {
        errors::raise_with_hint(
            PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "pg_shard_id: next_shard_id(seq, shard) would repeat ids on Citus: every node would \
             issue the same shard number from its own copy of the sequence"
                .into(),
            "Use next_shard_id(seq): it puts the node's Citus group id (or pg_shard_id.node) in \
             the shard field, so every node's ids are distinct.",
        );
    }
}

static CITUS_LOADED: OnceLock<bool> = OnceLock::new();

/// Whether this backend has already found that Citus is not loaded (so that
/// [`refuse_explicit_shard_on_citus`] has nothing to refuse): the entry point of
/// `next_shard_id(seq, shard)` then skips the check without calling into PostgreSQL.
#[inline]
pub fn known_without_citus() -> bool {
    CITUS_LOADED.get() == Some(&false)
}

/// Whether the Citus library is loaded in this backend (it must be preloaded to work at all, so
/// this cannot change while the backend lives; a `SET citus.x` placeholder only costs a lookup).
fn citus_library_loaded() -> bool {
    // SAFETY: a GUC lookup by a NUL-terminated name; missing_ok returns NULL.
    *CITUS_LOADED.get_or_init(|| unsafe {
        !pg_sys::GetConfigOption(c"citus.version".as_ptr(), true, false).is_null()
    })
}

/// `pg_catalog.pg_dist_local_group` in this database, if Citus is installed here.
fn citus_local_group_relation() -> Option<pg_sys::Oid> {
    // SAFETY: a syscache lookup by name in a backend inside a transaction.
    let oid = unsafe {
        pg_sys::get_relname_relid(
            c"pg_dist_local_group".as_ptr(),
            pg_sys::Oid::from(pg_sys::PG_CATALOG_NAMESPACE),
        )
    };
    (oid != pg_sys::InvalidOid).then_some(oid)
}

fn read_group_id() -> i64 {
    crate::read::one::<i32>("SELECT groupid FROM pg_catalog.pg_dist_local_group")
        .ok()
        .flatten()
        .map_or(i64::from(i32::MIN), i64::from)
}

fn register_callback() {
    if !CALLBACK_REGISTERED.swap(true, Ordering::Relaxed) {
        // SAFETY: registers a callback that only resets two atomics; called in a backend.
        unsafe {
            pg_sys::CacheRegisterRelcacheCallback(Some(forget_group_id), pg_sys::Datum::from(0))
        };
    }
}

/// Relcache invalidation: of `pg_dist_local_group` (Citus wrote it), or of everything.
unsafe extern "C-unwind" fn forget_group_id(_arg: pg_sys::Datum, relid: pg_sys::Oid) {
    if relid == pg_sys::InvalidOid || relid.to_u32() == GROUP_RELATION.load(Ordering::Relaxed) {
        GROUP_ID.store(UNKNOWN, Ordering::Relaxed);
    }
}
