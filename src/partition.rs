//! Time partitioning on the id: `shard_id_partition_bounds`.
//!
//! The calendar arithmetic (`+ interval '1 month'`, time zones, DST) is PostgreSQL's own
//! `timestamptz + interval`, which no reimplementation should second-guess. The loop is in Rust
//! rather than PL/pgSQL so that it resolves nothing by name (it keeps working after the
//! extension's schema is renamed) and so that every step is checked: an interval such as
//! `'1 mon -30 days'` moves forward from some dates and backward or nowhere from others.

use crate::{decode, errors, settings};
use pgrx::prelude::*;

/// More ranges than any partitioned table can use; refused rather than produced.
const MAX_RANGES: usize = 100_000;

/// `t + step`, by PostgreSQL's `timestamptz + interval` in the session's TimeZone.
fn plus(t: TimestampWithTimeZone, step: Interval) -> TimestampWithTimeZone {
    // SAFETY: PostgreSQL's own operator function, called with two non-NULL arguments of its types.
    unsafe {
        pgrx::direct_function_call::<TimestampWithTimeZone>(
            pg_sys::timestamptz_pl_interval,
            &[t.into_datum(), step.into_datum()],
        )
    }
    .expect("timestamptz + interval is never NULL")
}

fn invalid_parameter(message: String, hint: &str) -> ! {
    errors::raise_with_hint(
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        message,
        hint,
    )
}

/// Contiguous id ranges, one per `step` from `from_ts` until `to_ts` (the last one ends at
/// `to_ts`), for `PARTITION BY RANGE (id)`: `FOR VALUES FROM (lower) TO (upper)` holds exactly the
/// ids made in `[from_ts + k * step, from_ts + (k + 1) * step)`. STABLE: it reads the epoch and the
/// session's TimeZone.
///
/// `shard_id_partition_bounds(from_ts timestamptz, to_ts timestamptz, step interval)
///     RETURNS TABLE (lower bigint, upper bigint)` STABLE STRICT PARALLEL SAFE
///
/// ```sql
/// SELECT * FROM shard_id_partition_bounds('2026-01-01+00', '2027-01-01+00', '1 month');
/// ```
/// Errors: 22008 for an infinite bound, a range wholly before the epoch or past the horizon;
/// 22023 when `from_ts` is not before `to_ts`, or `step` does not move forward by at least a
/// millisecond at every step; 54000 for more than 100,000 ranges.
#[pg_extern(stable, strict, parallel_safe)]
fn shard_id_partition_bounds(
    from_ts: TimestampWithTimeZone,
    to_ts: TimestampWithTimeZone,
    step: Interval,
) -> TableIterator<'static, (name!(lower, i64), name!(upper, i64))> {
    let epoch = settings::epoch_unix_ms();
    if !from_ts.is_finite() || !to_ts.is_finite() {
        errors::raise_with_hint(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!("from_ts ({from_ts}) and to_ts ({to_ts}) must be finite timestamps"),
            "Partition bounds cover a finite span of time.",
        );
    }
    if from_ts >= to_ts {
        invalid_parameter(
            format!("from_ts ({from_ts}) must be before to_ts ({to_ts})"),
            "Pass the start of the first partition, then the end of the last.",
        );
    }
    let mut ranges = Vec::new();
    let mut t = from_ts;
    let mut lower = decode::lower_bound_at(t, epoch);
    while t < to_ts {
        let next = plus(t, step);
        if !next.is_finite() || next <= t {
            invalid_parameter(
                format!("step {step} does not move forward from {t}"),
                "Use a step that is positive from every date in the span, such as '1 month' or \
                 '7 days'; a mix like '1 mon -30 days' goes back from some dates.",
            );
        }
        let next = if next < to_ts { next } else { to_ts };
        let upper = decode::lower_bound_at(next, epoch);
        if upper <= lower {
            if upper == 0 {
                errors::raise_with_hint(
                    PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
                    format!("the range from {t} to {next} is before the epoch: no id falls in it"),
                    "Start from_ts at or after pg_shard_id.epoch (see pg_shard_id_info()).",
                );
            }
            if next == to_ts && !ranges.is_empty() {
                break; // a tail inside the last range's final millisecond: already covered
            }
            invalid_parameter(
                format!("step {step} from {t} stays within one millisecond"),
                "Ids have millisecond precision: use a step of at least 1 ms, and bounds at least \
                 1 ms apart.",
            );
        }
        if ranges.len() == MAX_RANGES {
            errors::raise_with_hint(
                PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
                format!("more than {MAX_RANGES} ranges from {from_ts} to {to_ts} by {step}"),
                "Use a larger step or a shorter span.",
            );
        }
        ranges.push((lower, upper));
        lower = upper;
        t = next;
    }
    TableIterator::new(ranges)
}
