//! `pg_shard_id_info()`: the settings and guard in force, in one row.

use crate::{settings, shmem};
use pg_shard_id_core::layout::MAX_MS;
use pg_shard_id_core::time::unix_ms_to_pg_micros;
use pgrx::prelude::*;

fn timestamptz(unix_ms: i64) -> TimestampWithTimeZone {
    unix_ms_to_pg_micros(unix_ms)
        .and_then(|micros| TimestampWithTimeZone::try_from(micros).ok())
        .expect("epoch and horizon are well inside the timestamptz range")
}

/// What pg_shard_id is doing in this session.
///
/// ```sql
/// pg_shard_id_info() RETURNS TABLE (epoch timestamptz, positive_until timestamptz,
///     overflow text, guard text, guard_slots integer, guard_slots_in_use integer,
///     guard_evictions bigint, lease_until timestamptz)
/// SELECT * FROM pg_shard_id_info();
/// ```
///
/// `positive_until` is the last millisecond for which ids stay positive (epoch + 2^40 - 1 ms).
/// `guard` is `cluster` when the library is in `shared_preload_libraries` (no two sessions of
/// the cluster repeat an id), `session` otherwise (only one session's ids are guarded).
/// `guard_evictions` counts slots handed from one sequence to another since start-up;
/// `lease_until` is the lease in force in guard mode `cluster`: no id is later than this (it is
/// extended 1 s past the id that needed it, in the lease file and the WAL, before that id is
/// returned); NULL in guard mode `session`.
/// VOLATILE and PARALLEL RESTRICTED: it reads live guard state, which is per backend in
/// `session` mode. Raises no errors.
// The tuple of `name!`s is the SQL signature; a type alias would hide it.
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_restricted)]
fn pg_shard_id_info() -> TableIterator<
    'static,
    (
        name!(epoch, TimestampWithTimeZone),
        name!(positive_until, TimestampWithTimeZone),
        name!(overflow, String),
        name!(guard, String),
        name!(guard_slots, i32),
        name!(guard_slots_in_use, i32),
        name!(guard_evictions, i64),
        name!(lease_until, Option<TimestampWithTimeZone>),
    ),
> {
    let epoch = settings::epoch_unix_ms();
    let usage = shmem::usage();
    TableIterator::once((
        timestamptz(epoch),
        timestamptz(epoch + MAX_MS),
        settings::overflow_name().to_string(),
        shmem::mode().to_string(),
        usage.slots as i32,
        usage.in_use as i32,
        usage.evictions as i64,
        usage
            .lease_unix_ms
            .and_then(unix_ms_to_pg_micros)
            .and_then(|micros| TimestampWithTimeZone::try_from(micros).ok()),
    ))
}
