//! Time partitioning on the id: `shard_id_partition_bounds`.
//!
//! Written in PL/pgSQL over `shard_id_lower_bound`: the calendar arithmetic (`+ interval '1
//! month'`, time zones, DST) is PostgreSQL's own, which no reimplementation should second-guess.

use pgrx::prelude::*;

extension_sql!(
    r#"
-- shard_id_partition_bounds(from_ts, to_ts, step) -> SETOF (lower bigint, upper bigint)
-- Contiguous id ranges, one per step from from_ts until to_ts (the last one ends at to_ts), for
-- PARTITION BY RANGE (id): FOR VALUES FROM (lower) TO (upper) holds exactly the ids made in
-- [from_ts + k * step, from_ts + (k + 1) * step). STABLE: it reads pg_shard_id.epoch.
-- Errors: 22023 when step is not positive or from_ts is not before to_ts; 22008 past the horizon.
CREATE FUNCTION shard_id_partition_bounds(from_ts timestamptz, to_ts timestamptz, step interval,
                                          OUT lower bigint, OUT upper bigint)
    RETURNS SETOF record LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE
    SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    t timestamptz := from_ts;
    next_t timestamptz;
BEGIN
    IF from_ts >= to_ts THEN
        RAISE EXCEPTION 'from_ts (%) must be before to_ts (%)', from_ts, to_ts
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF from_ts + step <= from_ts THEN
        RAISE EXCEPTION 'step % is not positive', step USING ERRCODE = 'invalid_parameter_value';
    END IF;
    WHILE t < to_ts LOOP
        next_t := least(t + step, to_ts);
        lower := @extschema@.shard_id_lower_bound(t);
        upper := @extschema@.shard_id_lower_bound(next_t);
        RETURN NEXT;
        t := next_t;
    END LOOP;
END
$$;
COMMENT ON FUNCTION shard_id_partition_bounds(timestamptz, timestamptz, interval) IS
    'Contiguous (lower, upper) id ranges per time step, for PARTITION BY RANGE (id).';
"#,
    name = "shard_id_partition_bounds",
    requires = [decode::shard_id_lower_bound],
);
