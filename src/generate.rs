//! `next_shard_id`: the generator.

use crate::errors::{self, Boundary, InsideGuard, OutsideGuard};
use crate::issue::{self, Request};
use crate::{clock, node, privilege, settings};
use pg_shard_id_core::layout::{check_shard, compose, seq_field, IdParts};
use pg_shard_id_core::slots::slot_key;
use pgrx::prelude::*;

unsafe extern "C-unwind" {
    /// PostgreSQL's own `nextval()` (commands/sequence.c): resolves the sequence, checks USAGE or
    /// UPDATE privilege when asked to, honours CACHE, CYCLE, INCREMENT, MINVALUE/MAXVALUE and
    /// read-only transactions, and raises the same errors `nextval()` does. Same signature from
    /// PostgreSQL 10 to 18; pgrx does not bind commands/sequence.h, so it is declared here.
    pub(crate) fn nextval_internal(relid: pg_sys::Oid, check_permissions: bool) -> i64;
}

/// Draws the next id of logical shard `shard` from sequence `seq`.
///
/// ```sql
/// next_shard_id(seq regclass, shard integer) RETURNS bigint
///     VOLATILE STRICT PARALLEL UNSAFE
/// ```
///
/// The id packs the milliseconds since `pg_shard_id.epoch` (41 bits), `shard` (13 bits) and
/// `nextval(seq) % 1024` (10 bits; widths from `pg_shard_id_core::layout`). The uniqueness guard
/// makes sure no two calls for one sequence ever return the same id (see the README's
/// "Guarantee").
///
/// ```sql
/// CREATE SEQUENCE photos_id_seq CACHE 32;
/// CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_shard_id('photos_id_seq', 5), url text);
/// ```
///
/// `CACHE 32` is the measured recommendation for a sequence several sessions draw from (up to
/// about 32 at once; docs/performance.md#pgedge): the sequence's buffer work once per 32 ids, and
/// sessions holding different blocks share milliseconds, because the guard measures each
/// remainder against the drawing session's own previous id (`crate::issue`).
///
/// Errors: 22003 if `shard` is outside 0..8191 (before the sequence is touched); whatever
/// `nextval(seq)` raises: 42809 if `seq` is not a sequence, 42501 without USAGE or UPDATE on it,
/// 2200H when it is exhausted, 25006 in a read-only transaction; 22008 when the clock is before
/// the epoch or past the 2^40 ms horizon (or the lease file is); 55000 when the server was
/// restarted with a later epoch than its ids were made with; 58030 when the lease file cannot be
/// written; 0A000 in a database with Citus, where every node would issue the same shard number
/// (use `next_shard_id(seq)` there).
///
/// # Why this entry point is not a `#[pg_extern]`
///
/// It is the hot path of every insert, and `bench/profile.sh` showed that a third of the
/// extension's own cost per id was pgrx's wrapper: the panic guard around the function and the
/// `sigsetjmp` boundary around the one call into PostgreSQL (`crate::privilege::nextval`:
/// `GetUserId` and `nextval_internal`). So PostgreSQL
/// calls this function directly (a version-1 C function, declared by the `extension_sql!` below),
/// and it keeps pgrx's rules by other means:
/// * An ERROR inside `privilege::nextval` (not a sequence, no privilege, exhausted, read-only)
///   `longjmp`s past this frame to PostgreSQL's handler, as it does past any C function. Rust
///   leaves deallocating a frame that way unspecified for now (RFC 2945 proposes to allow it for
///   a "plain old frame", one with nothing to drop); pgrx itself stands on the same footing
///   wherever PostgreSQL longjmps through its code. At that call this frame holds only an oid
///   and integers, and no lock, borrow or allocation of ours. **What may never be added to this
///   function's frame before `privilege::nextval` returns**: a value with a destructor (String,
///   Vec, Box, a guard of any lock, a `PgMemoryContexts` switch), a borrow of a `RefCell`, a
///   held spinlock or slot lock, anything `catch_unwind` or pgrx's guard must see.
/// * Everything else that can raise an ERROR or call into PostgreSQL (the shard check's error,
///   the Citus check, the guard's slow path: origin check, waiting, warnings, the lease, the
///   guard's errors) runs inside pgrx's guard: `id_of::<OutsideGuard>` sends it through
///   `OutsideGuard::run`, as the type says; the guard's common case comes back as `Ok` from
///   `issue::fast` and anything else as a `Slow` that must be finished there.
/// * What runs outside the guard is plain Rust: reading the arguments, the clock, the guard's
///   common case and composing the id. The function is `extern "C"`, so a panic there (a bug)
///   aborts the backend instead of unwinding into C.
///
/// The other SQL functions keep pgrx's wrapper; `next_shard_id(seq)` (the Citus form) too.
#[no_mangle]
pub unsafe extern "C" fn next_shard_id_wrapper(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    // SAFETY: PostgreSQL calls this with the two arguments the SQL declaration names, and the
    // function is STRICT, so neither is NULL.
    let (seq, shard) = unsafe {
        let args = (*fcinfo).args.as_slice(2);
        (
            pg_sys::Oid::from(args[0].value.value() as u32),
            args[1].value.value() as i32,
        )
    };
    let epoch = settings::epoch_unix_ms();
    let shard = match check_shard(i64::from(shard)) {
        Ok(shard) => shard,
        Err(e) => OutsideGuard::run(|| errors::raise(e, epoch)),
    };
    if !node::known_without_citus() {
        OutsideGuard::run(node::refuse_explicit_shard_on_citus);
    }
    // SAFETY: PostgreSQL's own nextval (its privilege check remembered, `crate::privilege`). An
    // ERROR in it leaves through this frame, which holds nothing to drop (see above).
    let value = unsafe { privilege::nextval(seq) };
    pg_sys::Datum::from(id_of::<OutsideGuard>(seq, shard, value, epoch))
}

/// The version-1 calling convention record of [`next_shard_id_wrapper`] (`PG_FUNCTION_INFO_V1`).
#[no_mangle]
pub extern "C" fn pg_finfo_next_shard_id_wrapper() -> &'static pg_sys::Pg_finfo_record {
    static V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

extension_sql!(
    r#"
CREATE FUNCTION next_shard_id("seq" regclass, "shard" integer) RETURNS bigint
    VOLATILE STRICT PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'next_shard_id_wrapper';
"#,
    name = "next_shard_id",
);

/// Draws the next id of sequence `seq` with this server's node number in the shard field: the
/// form for Citus, and for any setup where one DEFAULT runs on several servers.
///
/// ```sql
/// next_shard_id(seq regclass) RETURNS bigint
///     VOLATILE STRICT PARALLEL UNSAFE
/// ```
///
/// The node number is `pg_shard_id.node` when set (postgresql.conf or `ALTER SYSTEM`; no session
/// can change it), otherwise on Citus the node's group id (0 on the coordinator, 1, 2, ... on the
/// workers). Ids from different nodes differ in the shard field; ids of one node are guarded like
/// those of `next_shard_id(seq, shard)`.
///
/// ```sql
/// CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_shard_id('photos_id_seq'),
///                      user_id bigint NOT NULL);
/// SELECT create_distributed_table('photos', 'user_id');   -- on Citus
/// ```
///
/// Errors: 55000 when `pg_shard_id.node` is not set and the database has no Citus; 22003 when the
/// Citus group id is not 0..8191; otherwise those of `next_shard_id(seq, shard)`.
#[pg_extern(sql = r#"
CREATE FUNCTION next_shard_id("seq" regclass) RETURNS bigint
    VOLATILE STRICT PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'next_shard_id_for_node_wrapper';
"#)]
fn next_shard_id_for_node(seq: pg_sys::Oid) -> i64 {
    let epoch = settings::epoch_unix_ms();
    let shard = node::node_shard();
    // SAFETY: PostgreSQL's own function with the declared signature; an ERROR inside it is
    // caught and re-raised by the boundary.
    let value = unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| privilege::nextval(seq)) };
    id_of::<InsideGuard>(seq, shard, value, epoch)
}

/// The id for `value`, just drawn from sequence `seq`: the guard gives the millisecond. `shard`
/// is checked. `B` says whether pgrx's guard is around the caller: whatever can raise an ERROR
/// (the guard's slow path, a layout error) runs through `B::run`.
#[inline]
fn id_of<B: Boundary>(seq: pg_sys::Oid, shard: i64, value: i64, epoch: i64) -> i64 {
    let remainder = seq_field(value);
    // SAFETY: a backend global, set once at connection.
    let database = unsafe { pg_sys::MyDatabaseId };
    let key = slot_key(database.to_u32(), seq.to_u32());
    let request = Request {
        key,
        remainder: remainder as u16,
        overflow: settings::overflow(),
        epoch_unix_ms: epoch,
        clock: || clock::now_since_epoch(epoch),
    };
    let ms = issue::fast(request).unwrap_or_else(|slow| B::run(|| slow.finish()));
    let parts = IdParts {
        ms,
        shard,
        seq: remainder,
    };
    match compose(parts) {
        Ok(id) => id,
        Err(e) => B::run(|| errors::raise(e, epoch)),
    }
}
