//! `pg_shard_id_stats`: one row per sequence in the guard table, counted by the guard itself
//! (`pg_shard_id_core::guard::Counts`), and `pg_shard_id_stats_reset()`. The view
//! (`sql/stats.sql`) adds the database's name and the sequence as a regclass.

use crate::{clock, settings, shmem};
use pg_shard_id_core::slots::{database_of, sequence_of};
use pg_shard_id_core::time::unix_ms_to_pg_micros;
use pgrx::prelude::*;

/// The guard's statistics per sequence, since the server started or the last
/// `pg_shard_id_stats_reset()`. Read it through the view `pg_shard_id_stats`.
///
/// ```sql
/// pg_shard_id_stats() RETURNS TABLE (database oid, sequence_oid oid, ids bigint,
///     exhausted_ms bigint, waits bigint, wait_seconds double precision, lead_ms bigint,
///     clock_steps bigint, last_issued timestamptz, lease_writes bigint)
/// SELECT sequence, ids, waits, lead_ms FROM pg_shard_id_stats ORDER BY ids DESC;
/// ```
///
/// `exhausted_ms`: milliseconds the sequence used up (the remainder was taken, or the sequence
/// wrapped past a multiple of 1024, so the guard moved on before the clock did; per second / 1000,
/// about the share of the 1024 ids/ms cap in use); `waits` / `wait_seconds`: times sessions waited for the clock
/// and for how long; `lead_ms`: how far the last millisecond issued is ahead of the clock now
/// (0 when it is not); `clock_steps`: times the clock was seen stepping back; `lease_writes`:
/// lease extensions this sequence's ids caused. A sequence whose slot is given to another
/// (`pg_shard_id_info().guard_evictions`) starts from zero when it comes back.
///
/// In guard mode `session` there is no server-wide table: no rows, and a NOTICE saying so.
/// The counters are of the whole server: so is a reset, whichever database it is run in.
/// Small inexactnesses, by design (the counters must cost nothing on the hot path): an id counted
/// when the guard decided it is counted even if the lease write after it fails (58030), a wait
/// cancelled by the user is not timed, and a wait or lease write that races with its sequence's
/// slot being given away is not counted.
/// VOLATILE (live counters), PARALLEL RESTRICTED like `pg_shard_id_info()`. Raises no errors.
// The tuple of `name!`s is the SQL signature; a type alias would hide it.
#[allow(clippy::type_complexity)]
#[pg_extern(volatile, parallel_restricted)]
fn pg_shard_id_stats() -> TableIterator<
    'static,
    (
        name!(database, pg_sys::Oid),
        name!(sequence_oid, pg_sys::Oid),
        name!(ids, i64),
        name!(exhausted_ms, i64),
        name!(waits, i64),
        name!(wait_seconds, f64),
        name!(lead_ms, i64),
        name!(clock_steps, i64),
        name!(last_issued, Option<TimestampWithTimeZone>),
        name!(lease_writes, i64),
    ),
> {
    let Some(table) = shmem::shared_table() else {
        // a NOTICE, not a WARNING: a monitoring exporter polls this, and the server log should
        // not fill with one line per scrape
        notice!(
            "pg_shard_id_stats: guard mode session (pg_shard_id is not in \
             shared_preload_libraries): there is no server-wide guard table to report"
        );
        return TableIterator::new(Vec::new());
    };
    let epoch = settings::epoch_unix_ms();
    let now = clock::now_since_epoch(epoch);
    let rows: Vec<_> = table
        .stats()
        .into_iter()
        .map(|s| {
            let c = s.counts;
            (
                pg_sys::Oid::from(database_of(s.key)),
                pg_sys::Oid::from(sequence_of(s.key)),
                c.ids as i64,
                c.exhausted_ms as i64,
                c.waits as i64,
                c.wait_ns as f64 / 1e9,
                s.last_ms.map_or(0, |ms| (ms - now).max(0)),
                c.clock_steps as i64,
                s.last_ms
                    .and_then(|ms| unix_ms_to_pg_micros(ms + epoch))
                    .and_then(|micros| TimestampWithTimeZone::try_from(micros).ok()),
                c.lease_writes as i64,
            )
        })
        .collect();
    TableIterator::new(rows)
}

/// Sets every sequence's statistics in `pg_shard_id_stats` to zero (the guards themselves are
/// untouched).
///
/// ```sql
/// pg_shard_id_stats_reset() RETURNS void
/// SELECT pg_shard_id_stats_reset();
/// GRANT EXECUTE ON FUNCTION pg_shard_id_stats_reset() TO monitoring;
/// ```
///
/// Errors: 42501 for a role without EXECUTE on it (revoked from PUBLIC at install: only
/// superusers and roles they grant it to may reset).
#[pg_extern(volatile, parallel_unsafe)]
fn pg_shard_id_stats_reset() {
    if let Some(table) = shmem::shared_table() {
        table.reset_stats();
    }
}
