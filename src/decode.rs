//! Decoding ids and composing them: the primary key as a time index and a routing key.
//!
//! Functions that read `pg_shard_id.epoch` are STABLE: their result depends on a setting, not only
//! on their arguments (the setting is fixed while a server runs, but another server, or this one
//! after a restart, may have another; an index must not keep values computed with it);
//! each has an overload with a trailing `epoch timestamptz` argument that is IMMUTABLE, for
//! indexes, generated columns and ids made with another epoch (Instagram's was
//! `2011-01-01 00:00:00+00`). Functions that do not involve time are IMMUTABLE. All are STRICT and
//! PARALLEL SAFE.

use crate::{errors, settings};
use pg_shard_id_core::layout::{self, IdParts, LayoutError};
use pg_shard_id_core::time::{
    pg_micros_to_unix_ms_ceil, pg_micros_to_unix_ms_floor, unix_ms_to_pg_micros,
};
use pgrx::prelude::*;

/// An explicit `epoch` argument in Unix ms: finite and a whole millisecond (22023 otherwise).
fn epoch_arg(epoch: TimestampWithTimeZone) -> i64 {
    let micros = i64::from(epoch);
    match pg_micros_to_unix_ms_floor(micros) {
        Some(ms) if epoch.is_finite() && micros % 1000 == 0 => ms,
        _ => errors::raise_with_hint(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("epoch {epoch} is not a finite timestamp with whole milliseconds"),
            "Pass the epoch the ids were made with, e.g. '2026-01-01 00:00:00+00'.",
        ),
    }
}

/// Milliseconds since `epoch_ms` of `ts`, rounded down (`ceil = false`) or up.
pub(crate) fn ms_since_epoch(ts: TimestampWithTimeZone, epoch_ms: i64, ceil: bool) -> i64 {
    let micros = i64::from(ts);
    let unix_ms = if !ts.is_finite() {
        None
    } else if ceil {
        pg_micros_to_unix_ms_ceil(micros)
    } else {
        pg_micros_to_unix_ms_floor(micros)
    };
    match unix_ms {
        Some(ms) => ms - epoch_ms,
        None => errors::raise_with_hint(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!("timestamp {ts} is outside the id layout"),
            "Ids hold finite timestamps within 2^40 ms after the epoch.",
        ),
    }
}

fn or_raise<T>(result: Result<T, LayoutError>, epoch_ms: i64) -> T {
    result.unwrap_or_else(|e| errors::raise(e, epoch_ms))
}

fn timestamp_of(id: i64, epoch_ms: i64) -> TimestampWithTimeZone {
    let ms = or_raise(layout::ms_of(id), epoch_ms);
    unix_ms_to_pg_micros(epoch_ms + ms)
        .and_then(|micros| TimestampWithTimeZone::try_from(micros).ok())
        .unwrap_or_else(|| or_raise(Err(LayoutError::PastHorizon(ms)), epoch_ms))
}

fn compose_at(ts: TimestampWithTimeZone, shard: i32, seq: i32, epoch_ms: i64) -> i64 {
    let ms = ms_since_epoch(ts, epoch_ms, false);
    let parts = IdParts {
        ms,
        shard: i64::from(shard),
        seq: i64::from(seq),
    };
    or_raise(layout::compose(parts), epoch_ms)
}

pub(crate) fn lower_bound_at(ts: TimestampWithTimeZone, epoch_ms: i64) -> i64 {
    or_raise(
        layout::lower_bound(ms_since_epoch(ts, epoch_ms, true)),
        epoch_ms,
    )
}

/// The time an id was made, to the millisecond, by the epoch in force.
///
/// `shard_id_extract_timestamp(id bigint) RETURNS timestamptz` STABLE STRICT PARALLEL SAFE
///
/// ```sql
/// SELECT shard_id_extract_timestamp(id) FROM photos;
/// ```
/// Errors: 22003 for a negative id.
#[pg_extern(stable, strict, parallel_safe)]
fn shard_id_extract_timestamp(id: i64) -> TimestampWithTimeZone {
    timestamp_of(id, settings::epoch_unix_ms())
}

/// The time an id was made, by an explicit epoch.
///
/// `shard_id_extract_timestamp(id bigint, epoch timestamptz) RETURNS timestamptz` IMMUTABLE
///
/// ```sql
/// SELECT shard_id_extract_timestamp(11637205501278089, '2011-01-01 00:00:00+00');
/// ```
/// Errors: 22003 for a negative id; 22023 for an epoch that is infinite or finer than 1 ms.
#[pg_extern(immutable, strict, parallel_safe, name = "shard_id_extract_timestamp")]
fn shard_id_extract_timestamp_epoch(
    id: i64,
    epoch: TimestampWithTimeZone,
) -> TimestampWithTimeZone {
    timestamp_of(id, epoch_arg(epoch))
}

/// The logical shard of an id (0..8191).
///
/// `shard_id_extract_shard(id bigint) RETURNS integer` IMMUTABLE STRICT PARALLEL SAFE
///
/// ```sql
/// SELECT shard_id_extract_shard(11637205501278089);  -- 1341
/// ```
/// Errors: 22003 for a negative id.
#[pg_extern(immutable, strict, parallel_safe)]
fn shard_id_extract_shard(id: i64) -> i32 {
    or_raise(layout::shard_of(id), settings::epoch_unix_ms()) as i32
}

/// The sequence field of an id (`nextval % 1024`, 0..1023).
///
/// `shard_id_extract_seq(id bigint) RETURNS integer` IMMUTABLE STRICT PARALLEL SAFE
///
/// ```sql
/// SELECT shard_id_extract_seq(11637205501278089);  -- 905
/// ```
/// Errors: 22003 for a negative id.
#[pg_extern(immutable, strict, parallel_safe)]
fn shard_id_extract_seq(id: i64) -> i32 {
    or_raise(layout::seq_of(id), settings::epoch_unix_ms()) as i32
}

/// The id with these fields, by the epoch in force: the exact inverse of `shard_id_decode`.
/// A timestamp between two milliseconds is rounded down.
///
/// `shard_id_compose(ts timestamptz, shard integer, seq integer) RETURNS bigint` STABLE
///
/// ```sql
/// SELECT shard_id_compose(now(), 5, 0);
/// ```
/// Errors: 22003 for shard outside 0..8191 or seq outside 0..1023; 22008 for a timestamp before
/// the epoch or past the horizon, 22008 for an infinite one.
#[pg_extern(stable, strict, parallel_safe)]
fn shard_id_compose(ts: TimestampWithTimeZone, shard: i32, seq: i32) -> i64 {
    compose_at(ts, shard, seq, settings::epoch_unix_ms())
}

/// `shard_id_compose(ts, shard, seq, epoch timestamptz) RETURNS bigint` IMMUTABLE: as above with
/// an explicit epoch.
///
/// ```sql
/// SELECT shard_id_compose('2011-01-01 00:00:00+00'::timestamptz + interval '1387263 s',
///                         1341, 905, '2011-01-01 00:00:00+00');  -- 11637205501278089
/// ```
#[pg_extern(immutable, strict, parallel_safe, name = "shard_id_compose")]
fn shard_id_compose_epoch(
    ts: TimestampWithTimeZone,
    shard: i32,
    seq: i32,
    epoch: TimestampWithTimeZone,
) -> i64 {
    compose_at(ts, shard, seq, epoch_arg(epoch))
}

/// The smallest id whose timestamp is `ts` or later, by the epoch in force, so that
/// `id >= shard_id_lower_bound(a) AND id < shard_id_lower_bound(b)` selects the ids made in
/// `[a, b)` with an index scan on the primary key. A `ts` before the epoch gives 0.
///
/// `shard_id_lower_bound(ts timestamptz) RETURNS bigint` STABLE STRICT PARALLEL SAFE
///
/// ```sql
/// SELECT count(*) FROM photos
///  WHERE id >= shard_id_lower_bound(now() - interval '1 hour');
/// ```
/// Errors: 22008 for a timestamp past the horizon or infinite.
#[pg_extern(stable, strict, parallel_safe)]
fn shard_id_lower_bound(ts: TimestampWithTimeZone) -> i64 {
    lower_bound_at(ts, settings::epoch_unix_ms())
}

/// `shard_id_lower_bound(ts, epoch timestamptz) RETURNS bigint` IMMUTABLE: as above with an
/// explicit epoch.
#[pg_extern(immutable, strict, parallel_safe, name = "shard_id_lower_bound")]
fn shard_id_lower_bound_epoch(ts: TimestampWithTimeZone, epoch: TimestampWithTimeZone) -> i64 {
    lower_bound_at(ts, epoch_arg(epoch))
}

extension_sql_file!(
    "../sql/decode.sql",
    name = "shard_id_decode",
    requires = [
        shard_id_extract_timestamp,
        shard_id_extract_timestamp_epoch,
        shard_id_extract_shard,
        shard_id_extract_seq
    ],
);
