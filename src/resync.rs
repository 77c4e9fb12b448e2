//! `shard_id_resync(seq)`: the data floor read again for a live guard, after rows were loaded into
//! a table whose sequence is already issuing (`crate::data_floor` reads it for fresh guards).

use crate::errors::relation_name;
use pgrx::prelude::*;

/// Makes sequence `seq`'s guard read the rows stored in its `DEFAULT` columns again, now, after
/// rows were loaded into a table it already issues ids for (`COPY`, a data-only restore, `INSERT`
/// of explicit ids from another server): its next ids start above them. A sequence's first id
/// after a restart, or after its guard slot was reused and its kept entry lost, does this by
/// itself; an evicted sequence that still has its entry reads them when it comes back.
///
/// ```sql
/// shard_id_resync(seq regclass) RETURNS timestamptz
///     VOLATILE STRICT PARALLEL UNSAFE
/// \copy photos FROM 'photos-from-shard-7.csv'
/// SELECT shard_id_resync('photos_id_seq');   -- 2026-11-24 15:02:11.533+00
/// ```
///
/// Returns the data floor it found: one millisecond above the newest stored id (10 minutes ahead
/// of the clock when a column holds rows no index can tell about, or when the newest id is more
/// than 1 h 10 min ahead and so not trusted), NULL when nothing is stored.
/// The next ids start at it, or at the clock, or above what the guard issued before, whichever is
/// latest. A backend that began reading the rows before this call (its sequence's first id) cannot
/// settle the guard with what it read: the guard waits for an answer to a new request.
///
/// Errors: 42809 if `seq` is not a sequence; 42501 without UPDATE on it (as for `setval`). It
/// reads rows the caller may not be allowed to SELECT (row security, no grant), and returns only
/// the newest one's millisecond.
#[pg_extern(sql = r#"
CREATE FUNCTION shard_id_resync("seq" regclass) RETURNS timestamptz
    VOLATILE STRICT PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_resync_wrapper';
"#)]
fn shard_id_resync(seq: pg_sys::Oid) -> Option<TimestampWithTimeZone> {
    use pg_shard_id_core::slots::slot_key;
    // SAFETY: catalog lookups by oid, inside a transaction.
    let (relkind, allowed) = unsafe {
        (
            pg_sys::get_rel_relkind(seq),
            pg_sys::pg_class_aclcheck(
                seq,
                pg_sys::GetUserId(),
                pg_sys::ACL_UPDATE as pg_sys::AclMode,
            ) == pg_sys::AclResult::ACLCHECK_OK,
        )
    };
    let name = relation_name(seq);
    if relkind != pg_sys::RELKIND_SEQUENCE as std::ffi::c_char {
        crate::errors::raise_with_hint(
            PgSqlErrorCode::ERRCODE_WRONG_OBJECT_TYPE,
            format!("pg_shard_id: \"{name}\" is not a sequence"),
            "Pass the sequence that next_shard_id draws from.",
        );
    }
    if !allowed {
        crate::errors::raise_with_hint(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!("pg_shard_id: permission denied for sequence {name}"),
            "shard_id_resync needs UPDATE on the sequence, as setval does.",
        );
    }
    let epoch = crate::settings::epoch_unix_ms();
    let table = crate::shmem::table();
    // SAFETY: a backend global, set once at connection.
    let key = slot_key(unsafe { pg_sys::MyDatabaseId }.to_u32(), seq.to_u32());
    // the guard forgets what it read (never what it issued) and waits on a new request, which
    // only a read begun from now on answers; then this reads the rows (no slot: the sequence's
    // next id reads them itself)
    let request = table.forget_data_floor(key);
    let now = crate::clock::now_since_epoch(epoch);
    let floor = crate::data_floor::settle(&table, key, request, epoch, now);
    let micros = pg_shard_id_core::time::unix_ms_to_pg_micros(floor? + epoch)?;
    TimestampWithTimeZone::try_from(micros).ok()
}
