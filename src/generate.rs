//! `next_shard_id`: the generator.

use crate::{clock, errors, guard_table, node, settings};
use pg_shard_id_core::layout::{check_shard, compose, seq_field, IdParts};
use pg_shard_id_core::slots::slot_key;
use pgrx::prelude::*;

unsafe extern "C-unwind" {
    /// PostgreSQL's own `nextval()` (commands/sequence.c): resolves the sequence, checks USAGE or
    /// UPDATE privilege when asked to, honours CACHE, CYCLE, INCREMENT, MINVALUE/MAXVALUE and
    /// read-only transactions, and raises the same errors `nextval()` does. Same signature from
    /// PostgreSQL 10 to 18; pgrx does not bind commands/sequence.h, so it is declared here.
    fn nextval_internal(relid: pg_sys::Oid, check_permissions: bool) -> i64;
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
/// CREATE SEQUENCE photos_id_seq;
/// CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_shard_id('photos_id_seq', 5), url text);
/// ```
///
/// Errors: 22003 if `shard` is outside 0..8191 (before the sequence is touched); whatever
/// `nextval(seq)` raises: 42809 if `seq` is not a sequence, 42501 without USAGE or UPDATE on it,
/// 2200H when it is exhausted, 25006 in a read-only transaction; 22008 when the clock is before
/// the epoch or past the 2^40 ms horizon (or the lease file is); 55000 when the server was
/// restarted with a later epoch than its ids were made with; 58030 when the lease file cannot be
/// written; 0A000 in a database with Citus, where every node would issue the same shard number
/// (use `next_shard_id(seq)` there).
#[pg_extern(sql = r#"
CREATE FUNCTION next_shard_id("seq" regclass, "shard" integer) RETURNS bigint
    VOLATILE STRICT PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'next_shard_id_wrapper';
"#)]
fn next_shard_id(seq: pg_sys::Oid, shard: i32) -> i64 {
    let epoch = settings::epoch_unix_ms();
    let shard = check_shard(i64::from(shard)).unwrap_or_else(|e| errors::raise(e, epoch));
    node::refuse_explicit_shard_on_citus();
    issue(seq, shard, epoch)
}

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
    issue(seq, shard, epoch)
}

/// `nextval(seq)`, the guard, the id: what both forms share. `shard` is checked.
#[inline]
fn issue(seq: pg_sys::Oid, shard: i64, epoch: i64) -> i64 {
    // SAFETY: PostgreSQL's own function with the declared signature; an ERROR inside it is
    // caught and re-raised by the boundary.
    let value = unsafe { pg_sys::ffi::pg_guard_ffi_boundary(|| nextval_internal(seq, true)) };
    let remainder = seq_field(value);
    // SAFETY: a backend global, set once at connection.
    let database = unsafe { pg_sys::MyDatabaseId };
    let key = slot_key(database.to_u32(), seq.to_u32());
    let ms = guard_table::issue_ms(key, remainder as u16, settings::overflow(), epoch, || {
        clock::now_since_epoch(epoch)
    });
    compose(IdParts {
        ms,
        shard,
        seq: remainder,
    })
    .unwrap_or_else(|e| errors::raise(e, epoch))
}
