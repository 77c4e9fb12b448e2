-- pg_shard_id SQL edition: decoding and composing ids, partition bounds, shortcodes and routing,
-- in plain SQL for managed PostgreSQL (RDS, Cloud SQL, ...) where no shared library can be loaded.
--
-- Each public function has the name, argument names and types, result (OUT parameters, RETURNS
-- TABLE columns), volatility, STRICT and PARALLEL SAFE labels of the native one (src/decode.rs,
-- src/partition.rs, src/shortcode.rs, src/routing.rs, sql/decode.sql), the same results bit for
-- bit, and the same SQLSTATE, message and hint on every error (tests/sql_edition/cases.sql
-- compares them). Differences that remain: an error carries a CONTEXT line (the PL/pgSQL helper
-- that raises it), and in a database that is not UTF8, shard_id_from_shortcode's message quotes
-- non-ASCII characters as they are where the native one writes \u00fc.
--
-- Requires PostgreSQL 14 or later (SQL-standard function bodies), and from settings.sql (loaded
-- first) @extschema@._shard_id_epoch_ms() (the epoch in force, Unix ms) and
-- @extschema@._shard_id_raise(sqlstate text, message text, hint text).
--
-- Name binding: the bodies are SQL-standard (BEGIN ATOMIC / RETURN), parsed when the script runs
-- and stored as parse trees that refer to functions, operators and types by oid, so the caller's
-- search_path cannot redirect them. Built-in functions are written pg_catalog.f(...), and
-- operators are given operands of exactly the types of pg_catalog's (a bigint constant where
-- pg_catalog has only bigint OP bigint), so that no look-alike in the extension's schema can be
-- chosen when the script runs either.
--
-- Cost: every public function is STRICT and raises its errors from CASE branches, so PostgreSQL
-- does not inline it; it runs as a SQL function whose plan is kept for the query (about 5-20 us a
-- call, against 1-3 us natively). Each computes its result in its own body (see "Public
-- functions" below for why), so the only SQL function one calls on its way to a result is
-- @extschema@._shard_id_epoch_ms(), which should therefore be inlinable (LANGUAGE sql, RETURN
-- expr, no SET, not SECURITY DEFINER) or PL/pgSQL or C; a SQL function that cannot be inlined is
-- planned again at every call when called from another SQL function.

-- Exact time arithmetic: a timestamptz becomes microseconds through
-- extract(epoch FROM ts - '2000-01-01+00') (numeric, exact), and Unix milliseconds become a
-- timestamptz by adding two intervals, r * 1 ms (r < 2^26) and q * 67108864 ms (q = ms >> 26),
-- each product exact in float8, so no value is rounded anywhere in the timestamptz range.
--
-- shard_id_shard_for(text, integer) hashes the key's UTF-8 bytes (convert_to) with 64-bit FNV-1a
-- held as two 32-bit halves in bigints (so that no product overflows), one recursive-CTE row per
-- byte: exact, about 25 us a call plus 1.5 to 2 us per byte of key (natively about 1 us).

-- Errors are raised by @extschema@._shard_id_raise(sqlstate, message, hint) RETURNS bigint
-- (settings.sql), called only from CASE branches; it must stay VOLATILE, so that the planner never
-- calls it early for constant arguments inside a branch that is not taken.

-- Unix milliseconds as a timestamptz, exactly (see above). Valid for the timestamptz range.
CREATE FUNCTION @extschema@._shard_id_unix_ms_to_ts(unix_ms bigint) RETURNS timestamptz
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN timestamptz '1970-01-01 00:00:00+00'
       + (unix_ms & 67108863::bigint)::float8 * interval '1 millisecond'
       + (unix_ms >> 26)::float8 * interval '67108864 milliseconds';

-- Unix milliseconds the way the native hints print them (chrono's "%Y-%m-%d %H:%M:%S%.3f+00":
-- a 4-digit year, signed outside 0..9999, year 0 for 1 BC), or "N ms since 1970-01-01" past
-- chrono's last year, 262142 (its last day is 262142-12-31).
CREATE FUNCTION @extschema@._shard_id_format_unix_ms(unix_ms bigint) RETURNS text
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE
        WHEN unix_ms > 8210266876799999 OR unix_ms < -210866803200000
            THEN pg_catalog.format('%s ms since 1970-01-01', unix_ms)
        ELSE CASE
                 WHEN y > 9999 THEN '+' || y::text
                 WHEN y < 0 THEN '-' || pg_catalog.lpad((- y)::text, 4, '0')
                 ELSE pg_catalog.lpad(y::text, 4, '0')
             END || pg_catalog.to_char(t, '-MM-DD HH24:MI:SS.MS') || '+00'
    END
      FROM (SELECT t,
                   CASE WHEN pg_catalog.date_part('year', t) < 0::float8
                        THEN pg_catalog.date_part('year', t)::bigint + 1::bigint
                        ELSE pg_catalog.date_part('year', t)::bigint END AS y
              FROM (SELECT CASE WHEN unix_ms BETWEEN -210866803200000 AND 8210266876799999
                                THEN pg_catalog.timezone('UTC',
                                         @extschema@._shard_id_unix_ms_to_ts(unix_ms)) END AS t
                    OFFSET 0) a) b;
END;

-- Raises the error of a value that does not fit the layout (core/src/layout.rs LayoutError, with
-- src/errors.rs raise()): kind is shard, seq, before_epoch, past_horizon or negative_id; epoch_ms
-- is named in the hints about time.
CREATE FUNCTION @extschema@._shard_id_layout_error(kind text, v bigint, epoch_ms bigint)
    RETURNS bigint LANGUAGE sql VOLATILE PARALLEL SAFE
BEGIN ATOMIC
    SELECT @extschema@._shard_id_raise(
        CASE WHEN kind = 'before_epoch' OR kind = 'past_horizon' THEN '22008' ELSE '22003' END,
        CASE kind
            WHEN 'shard' THEN pg_catalog.format('shard %s is out of range (0 .. 8191)', v)
            WHEN 'seq' THEN pg_catalog.format('seq %s is out of range (0 .. 1023)', v)
            WHEN 'before_epoch'
                THEN pg_catalog.format('timestamp is %s ms before the pg_shard_id epoch',
                                       pg_catalog.abs(v::numeric))
            WHEN 'past_horizon'
                THEN pg_catalog.format('timestamp is %s ms after the epoch, past the layout''s '
                                       'horizon of 1099511627775 ms', v)
            ELSE pg_catalog.format('%s is not a shard id: ids are never negative', v)
        END,
        CASE kind
            WHEN 'shard' THEN 'Logical shards are numbered 0 to 8191 (13 bits).'
            WHEN 'seq' THEN 'The sequence field holds 0 to 1023 (10 bits).'
            WHEN 'before_epoch'
                THEN pg_catalog.format('Ids count milliseconds from the epoch %s; check the '
                                       'timestamp and the server clock.',
                                       @extschema@._shard_id_format_unix_ms(epoch_ms))
            WHEN 'past_horizon'
                THEN pg_catalog.format('With the epoch %s ids stay positive until %s.',
                                       @extschema@._shard_id_format_unix_ms(epoch_ms),
                                       @extschema@._shard_id_format_unix_ms(
                                           epoch_ms + 1099511627775::bigint))
            ELSE 'pg_shard_id never issues negative ids; this value was made some other way.'
        END);
END;

-- The smallest id at ts or later by epoch_ms (src/decode.rs lower_bound_at), for
-- shard_id_partition_bounds, which reads the epoch once. Same body as shard_id_lower_bound.
CREATE FUNCTION @extschema@._shard_id_lower_bound_at(ts timestamptz, epoch_ms bigint)
    RETURNS bigint LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE
        WHEN s.ms > 1099511627775
            THEN @extschema@._shard_id_layout_error('past_horizon', s.ms, s.epoch_ms)
        WHEN s.ms < 0 THEN 0::bigint
        ELSE s.ms << 23
    END
      FROM (SELECT e.epoch_ms,
               CASE
                   WHEN t.us IS NULL OR t.us > 9222425352054775807
                       THEN @extschema@._shard_id_raise('22008',
                                pg_catalog.format('timestamp %s is outside the id layout', ts),
                                'Ids hold finite timestamps within 2^40 ms after the epoch.')
                   ELSE (t.us - ((t.us % 1000::bigint) + 1000::bigint) % 1000::bigint)
                        / 1000::bigint + 946684800000::bigint - e.epoch_ms
                       + CASE WHEN t.us % 1000::bigint = 0::bigint THEN 0::bigint ELSE 1::bigint END
               END AS ms
              FROM (SELECT epoch_ms) e
                   CROSS JOIN (SELECT CASE WHEN pg_catalog.isfinite(ts)
                        THEN (extract(epoch FROM ts - timestamptz '2000-01-01 00:00:00+00')
                              * 1000000::numeric)::bigint END AS us
            OFFSET 0) t
            OFFSET 0) s;
END;

-- ---------------------------------------------------------------------------------------------
-- Public functions. Each computes its result in its own body, calling no other SQL function
-- except on the way to an error: a SQL function called from a SQL function that is not inlined
-- is parsed and planned again at every call (its plan lives in the caller's per-call executor
-- state), which made a call cost about a millisecond. So the pieces of src/decode.rs repeat:
--   epoch in force:  (SELECT _shard_id_epoch_ms() AS epoch_ms OFFSET 0) e
--   epoch argument:  e.epoch_ms, or 22023 for an infinite or sub-millisecond epoch (epoch_arg)
--   ts:              t.us = microseconds since 2000-01-01 (NULL when infinite); its milliseconds
--                    since the epoch, rounded down (compose) or up (lower bound), or 22008
--                    (ms_since_epoch); errors in the native order: epoch, ts, layout.
-- ---------------------------------------------------------------------------------------------

-- The time an id was made, by the epoch in force; 22003 for a negative id.
CREATE FUNCTION @extschema@.shard_id_extract_timestamp(id bigint) RETURNS timestamptz
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE
        WHEN id < 0 THEN
            @extschema@._shard_id_layout_error('negative_id', id, e.epoch_ms)::text::timestamptz
        WHEN e.epoch_ms + (id >> 23) > 9223372036854775 THEN
            @extschema@._shard_id_layout_error('past_horizon', id >> 23, e.epoch_ms)
                ::text::timestamptz
        ELSE timestamptz '1970-01-01 00:00:00+00'
             + ((e.epoch_ms + (id >> 23)) & 67108863::bigint)::float8 * interval '1 millisecond'
             + ((e.epoch_ms + (id >> 23)) >> 26)::float8 * interval '67108864 milliseconds'
    END
      FROM (SELECT @extschema@._shard_id_epoch_ms() AS epoch_ms OFFSET 0) e;
END;

-- The time an id was made, by an explicit epoch; 22023 for an epoch that is infinite or finer
-- than 1 ms (checked first), 22003 for a negative id.
CREATE FUNCTION @extschema@.shard_id_extract_timestamp(id bigint, epoch timestamptz)
    RETURNS timestamptz LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE
        WHEN id < 0 THEN
            @extschema@._shard_id_layout_error('negative_id', id, e.epoch_ms)::text::timestamptz
        WHEN e.epoch_ms + (id >> 23) > 9223372036854775 THEN
            @extschema@._shard_id_layout_error('past_horizon', id >> 23, e.epoch_ms)
                ::text::timestamptz
        ELSE timestamptz '1970-01-01 00:00:00+00'
             + ((e.epoch_ms + (id >> 23)) & 67108863::bigint)::float8 * interval '1 millisecond'
             + ((e.epoch_ms + (id >> 23)) >> 26)::float8 * interval '67108864 milliseconds'
    END
      FROM (SELECT CASE
                       WHEN e0.us IS NULL OR e0.us > 9222425352054775807
                            OR e0.us % 1000::bigint <> 0::bigint
                           THEN @extschema@._shard_id_raise('22023',
                                    pg_catalog.format('epoch %s is not a finite timestamp with '
                                                      'whole milliseconds', epoch),
                                    'Pass the epoch the ids were made with, e.g. '
                                    '''2026-01-01 00:00:00+00''.')
                       ELSE (e0.us + 946684800000000::bigint) / 1000::bigint
                   END AS epoch_ms
              FROM (SELECT CASE WHEN pg_catalog.isfinite(epoch)
                                THEN (extract(epoch FROM
                                          epoch - timestamptz '2000-01-01 00:00:00+00')
                                      * 1000000::numeric)::bigint END AS us
                    OFFSET 0) e0
            OFFSET 0) e;
END;

CREATE FUNCTION @extschema@.shard_id_extract_shard(id bigint) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE
        WHEN id < 0 THEN @extschema@._shard_id_layout_error('negative_id', id, NULL)::integer
        ELSE ((id >> 10) & 8191::bigint)::integer
    END;
END;

CREATE FUNCTION @extschema@.shard_id_extract_seq(id bigint) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE
        WHEN id < 0 THEN @extschema@._shard_id_layout_error('negative_id', id, NULL)::integer
        ELSE (id & 1023::bigint)::integer
    END;
END;

-- (ts, shard, seq) of an id: the timestamp is computed first, so that a negative id raises its
-- error there, as the native shard_id_decode (over the extract functions) does.
CREATE FUNCTION @extschema@.shard_id_decode(id bigint,
                                            OUT ts timestamptz, OUT shard integer, OUT seq integer)
    RETURNS record LANGUAGE sql STABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE
        WHEN id < 0 THEN
            @extschema@._shard_id_layout_error('negative_id', id, e.epoch_ms)::text::timestamptz
        WHEN e.epoch_ms + (id >> 23) > 9223372036854775 THEN
            @extschema@._shard_id_layout_error('past_horizon', id >> 23, e.epoch_ms)
                ::text::timestamptz
        ELSE timestamptz '1970-01-01 00:00:00+00'
             + ((e.epoch_ms + (id >> 23)) & 67108863::bigint)::float8 * interval '1 millisecond'
             + ((e.epoch_ms + (id >> 23)) >> 26)::float8 * interval '67108864 milliseconds'
    END,
           ((id >> 10) & 8191::bigint)::integer,
           (id & 1023::bigint)::integer
      FROM (SELECT @extschema@._shard_id_epoch_ms() AS epoch_ms OFFSET 0) e;
END;

CREATE FUNCTION @extschema@.shard_id_decode(id bigint, epoch timestamptz,
                                            OUT ts timestamptz, OUT shard integer, OUT seq integer)
    RETURNS record LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE
        WHEN id < 0 THEN
            @extschema@._shard_id_layout_error('negative_id', id, e.epoch_ms)::text::timestamptz
        WHEN e.epoch_ms + (id >> 23) > 9223372036854775 THEN
            @extschema@._shard_id_layout_error('past_horizon', id >> 23, e.epoch_ms)
                ::text::timestamptz
        ELSE timestamptz '1970-01-01 00:00:00+00'
             + ((e.epoch_ms + (id >> 23)) & 67108863::bigint)::float8 * interval '1 millisecond'
             + ((e.epoch_ms + (id >> 23)) >> 26)::float8 * interval '67108864 milliseconds'
    END,
           ((id >> 10) & 8191::bigint)::integer,
           (id & 1023::bigint)::integer
      FROM (SELECT CASE
                       WHEN e0.us IS NULL OR e0.us > 9222425352054775807
                            OR e0.us % 1000::bigint <> 0::bigint
                           THEN @extschema@._shard_id_raise('22023',
                                    pg_catalog.format('epoch %s is not a finite timestamp with '
                                                      'whole milliseconds', epoch),
                                    'Pass the epoch the ids were made with, e.g. '
                                    '''2026-01-01 00:00:00+00''.')
                       ELSE (e0.us + 946684800000000::bigint) / 1000::bigint
                   END AS epoch_ms
              FROM (SELECT CASE WHEN pg_catalog.isfinite(epoch)
                                THEN (extract(epoch FROM
                                          epoch - timestamptz '2000-01-01 00:00:00+00')
                                      * 1000000::numeric)::bigint END AS us
                    OFFSET 0) e0
            OFFSET 0) e;
END;

-- The id with these fields, by the epoch in force; ts rounded down to the millisecond. 22008 for
-- an infinite ts, one before the epoch or past the horizon; 22003 for shard or seq out of range.
CREATE FUNCTION @extschema@.shard_id_compose(ts timestamptz, shard integer, seq integer)
    RETURNS bigint LANGUAGE sql STABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE
        WHEN s.ms < 0 THEN @extschema@._shard_id_layout_error('before_epoch', s.ms, s.epoch_ms)
        WHEN s.ms > 1099511627775
            THEN @extschema@._shard_id_layout_error('past_horizon', s.ms, s.epoch_ms)
        WHEN shard < 0 OR shard > 8191
            THEN @extschema@._shard_id_layout_error('shard', shard, s.epoch_ms)
        WHEN seq < 0 OR seq > 1023
            THEN @extschema@._shard_id_layout_error('seq', seq, s.epoch_ms)
        ELSE (s.ms << 23) | (shard::bigint << 10) | seq::bigint
    END
      FROM (SELECT e.epoch_ms,
               CASE
                   WHEN t.us IS NULL OR t.us > 9222425352054775807
                       THEN @extschema@._shard_id_raise('22008',
                                pg_catalog.format('timestamp %s is outside the id layout', ts),
                                'Ids hold finite timestamps within 2^40 ms after the epoch.')
                   ELSE (t.us - ((t.us % 1000::bigint) + 1000::bigint) % 1000::bigint)
                        / 1000::bigint + 946684800000::bigint - e.epoch_ms
               END AS ms
              FROM (SELECT @extschema@._shard_id_epoch_ms() AS epoch_ms OFFSET 0) e
                   CROSS JOIN (SELECT CASE WHEN pg_catalog.isfinite(ts)
                        THEN (extract(epoch FROM ts - timestamptz '2000-01-01 00:00:00+00')
                              * 1000000::numeric)::bigint END AS us
            OFFSET 0) t
            OFFSET 0) s;
END;

CREATE FUNCTION @extschema@.shard_id_compose(ts timestamptz, shard integer, seq integer,
                                             epoch timestamptz)
    RETURNS bigint LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE
        WHEN s.ms < 0 THEN @extschema@._shard_id_layout_error('before_epoch', s.ms, s.epoch_ms)
        WHEN s.ms > 1099511627775
            THEN @extschema@._shard_id_layout_error('past_horizon', s.ms, s.epoch_ms)
        WHEN shard < 0 OR shard > 8191
            THEN @extschema@._shard_id_layout_error('shard', shard, s.epoch_ms)
        WHEN seq < 0 OR seq > 1023
            THEN @extschema@._shard_id_layout_error('seq', seq, s.epoch_ms)
        ELSE (s.ms << 23) | (shard::bigint << 10) | seq::bigint
    END
      FROM (SELECT e.epoch_ms,
               CASE
                   WHEN t.us IS NULL OR t.us > 9222425352054775807
                       THEN @extschema@._shard_id_raise('22008',
                                pg_catalog.format('timestamp %s is outside the id layout', ts),
                                'Ids hold finite timestamps within 2^40 ms after the epoch.')
                   ELSE (t.us - ((t.us % 1000::bigint) + 1000::bigint) % 1000::bigint)
                        / 1000::bigint + 946684800000::bigint - e.epoch_ms
               END AS ms
              FROM (SELECT CASE
                       WHEN e0.us IS NULL OR e0.us > 9222425352054775807
                            OR e0.us % 1000::bigint <> 0::bigint
                           THEN @extschema@._shard_id_raise('22023',
                                    pg_catalog.format('epoch %s is not a finite timestamp with '
                                                      'whole milliseconds', epoch),
                                    'Pass the epoch the ids were made with, e.g. '
                                    '''2026-01-01 00:00:00+00''.')
                       ELSE (e0.us + 946684800000000::bigint) / 1000::bigint
                   END AS epoch_ms
              FROM (SELECT CASE WHEN pg_catalog.isfinite(epoch)
                                THEN (extract(epoch FROM
                                          epoch - timestamptz '2000-01-01 00:00:00+00')
                                      * 1000000::numeric)::bigint END AS us
                    OFFSET 0) e0
            OFFSET 0) e
                   CROSS JOIN (SELECT CASE WHEN pg_catalog.isfinite(ts)
                        THEN (extract(epoch FROM ts - timestamptz '2000-01-01 00:00:00+00')
                              * 1000000::numeric)::bigint END AS us
            OFFSET 0) t
            OFFSET 0) s;
END;

-- The smallest id made at ts or later, by the epoch in force; ts rounded up to the millisecond;
-- 0 before the epoch; 22008 for an infinite ts or one past the horizon.
CREATE FUNCTION @extschema@.shard_id_lower_bound(ts timestamptz) RETURNS bigint
    LANGUAGE sql STABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE
        WHEN s.ms > 1099511627775
            THEN @extschema@._shard_id_layout_error('past_horizon', s.ms, s.epoch_ms)
        WHEN s.ms < 0 THEN 0::bigint
        ELSE s.ms << 23
    END
      FROM (SELECT e.epoch_ms,
               CASE
                   WHEN t.us IS NULL OR t.us > 9222425352054775807
                       THEN @extschema@._shard_id_raise('22008',
                                pg_catalog.format('timestamp %s is outside the id layout', ts),
                                'Ids hold finite timestamps within 2^40 ms after the epoch.')
                   ELSE (t.us - ((t.us % 1000::bigint) + 1000::bigint) % 1000::bigint)
                        / 1000::bigint + 946684800000::bigint - e.epoch_ms
                       + CASE WHEN t.us % 1000::bigint = 0::bigint THEN 0::bigint ELSE 1::bigint END
               END AS ms
              FROM (SELECT @extschema@._shard_id_epoch_ms() AS epoch_ms OFFSET 0) e
                   CROSS JOIN (SELECT CASE WHEN pg_catalog.isfinite(ts)
                        THEN (extract(epoch FROM ts - timestamptz '2000-01-01 00:00:00+00')
                              * 1000000::numeric)::bigint END AS us
            OFFSET 0) t
            OFFSET 0) s;
END;

CREATE FUNCTION @extschema@.shard_id_lower_bound(ts timestamptz, epoch timestamptz)
    RETURNS bigint LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE
        WHEN s.ms > 1099511627775
            THEN @extschema@._shard_id_layout_error('past_horizon', s.ms, s.epoch_ms)
        WHEN s.ms < 0 THEN 0::bigint
        ELSE s.ms << 23
    END
      FROM (SELECT e.epoch_ms,
               CASE
                   WHEN t.us IS NULL OR t.us > 9222425352054775807
                       THEN @extschema@._shard_id_raise('22008',
                                pg_catalog.format('timestamp %s is outside the id layout', ts),
                                'Ids hold finite timestamps within 2^40 ms after the epoch.')
                   ELSE (t.us - ((t.us % 1000::bigint) + 1000::bigint) % 1000::bigint)
                        / 1000::bigint + 946684800000::bigint - e.epoch_ms
                       + CASE WHEN t.us % 1000::bigint = 0::bigint THEN 0::bigint ELSE 1::bigint END
               END AS ms
              FROM (SELECT CASE
                       WHEN e0.us IS NULL OR e0.us > 9222425352054775807
                            OR e0.us % 1000::bigint <> 0::bigint
                           THEN @extschema@._shard_id_raise('22023',
                                    pg_catalog.format('epoch %s is not a finite timestamp with '
                                                      'whole milliseconds', epoch),
                                    'Pass the epoch the ids were made with, e.g. '
                                    '''2026-01-01 00:00:00+00''.')
                       ELSE (e0.us + 946684800000000::bigint) / 1000::bigint
                   END AS epoch_ms
              FROM (SELECT CASE WHEN pg_catalog.isfinite(epoch)
                                THEN (extract(epoch FROM
                                          epoch - timestamptz '2000-01-01 00:00:00+00')
                                      * 1000000::numeric)::bigint END AS us
                    OFFSET 0) e0
            OFFSET 0) e
                   CROSS JOIN (SELECT CASE WHEN pg_catalog.isfinite(ts)
                        THEN (extract(epoch FROM ts - timestamptz '2000-01-01 00:00:00+00')
                              * 1000000::numeric)::bigint END AS us
            OFFSET 0) t
            OFFSET 0) s;
END;

-- src/partition.rs: one row per step, each iteration checked in the native order. The recursive
-- CTE carries n (ranges made so far), t (start of the next range), lo (its lower bound) and the
-- range made in this iteration (emit_lo, emit_up; NULL in the first row and when the last step
-- ends inside the previous range's final millisecond).
CREATE FUNCTION @extschema@.shard_id_partition_bounds(from_ts timestamptz, to_ts timestamptz,
                                                      step interval)
    RETURNS TABLE (lower bigint, upper bigint) LANGUAGE sql STABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    WITH RECURSIVE p AS MATERIALIZED (
        SELECT @extschema@._shard_id_epoch_ms() AS epoch_ms
    ), r(n, t, lo, emit_lo, emit_up) AS (
        SELECT 0, from_ts,
               CASE
                   WHEN NOT (pg_catalog.isfinite(from_ts) AND pg_catalog.isfinite(to_ts))
                       THEN @extschema@._shard_id_raise('22008',
                                pg_catalog.format('from_ts (%s) and to_ts (%s) must be finite '
                                                  'timestamps', from_ts, to_ts),
                                'Partition bounds cover a finite span of time.')
                   WHEN from_ts >= to_ts
                       THEN @extschema@._shard_id_raise('22023',
                                pg_catalog.format('from_ts (%s) must be before to_ts (%s)',
                                                  from_ts, to_ts),
                                'Pass the start of the first partition, then the end of the last.')
                   ELSE @extschema@._shard_id_lower_bound_at(from_ts, p.epoch_ms)
               END,
               NULL::bigint, NULL::bigint
          FROM p
        UNION ALL
        SELECT CASE WHEN c.tail THEN r.n ELSE r.n + 1 END, b.nx, c.up,
               CASE WHEN c.tail THEN NULL ELSE r.lo END,
               CASE WHEN c.tail THEN NULL ELSE c.up END
          FROM r CROSS JOIN p
               CROSS JOIN LATERAL (
                   SELECT CASE
                              WHEN NOT pg_catalog.isfinite(a.nr) OR a.nr <= r.t
                                  THEN @extschema@._shard_id_raise('22023',
                                           pg_catalog.format('step %s does not move forward '
                                                             'from %s', step, r.t),
                                           'Use a step that is positive from every date in the '
                                           'span, such as ''1 month'' or ''7 days''; a mix like '
                                           '''1 mon -30 days'' goes back from some dates.')
                                       ::text::timestamptz
                              WHEN a.nr < to_ts THEN a.nr
                              ELSE to_ts
                          END AS nx
                     FROM (SELECT r.t + step AS nr OFFSET 0) a
                   OFFSET 0) b
               CROSS JOIN LATERAL (
                   SELECT u.up,
                          CASE
                              WHEN u.up <= r.lo THEN
                                  CASE
                                      WHEN u.up = 0 THEN @extschema@._shard_id_raise('22008',
                                          pg_catalog.format('the range from %s to %s is before '
                                                            'the epoch: no id falls in it',
                                                            r.t, b.nx),
                                          'Start from_ts at or after pg_shard_id.epoch (see '
                                          'pg_shard_id_info()).') IS NULL
                                      WHEN b.nx = to_ts AND r.n > 0 THEN true
                                      ELSE @extschema@._shard_id_raise('22023',
                                          pg_catalog.format('step %s from %s stays within one '
                                                            'millisecond', step, r.t),
                                          'Ids have millisecond precision: use a step of at '
                                          'least 1 ms, and bounds at least 1 ms apart.') IS NULL
                                  END
                              WHEN r.n = 100000 THEN @extschema@._shard_id_raise('54000',
                                  pg_catalog.format('more than 100000 ranges from %s to %s by %s',
                                                    from_ts, to_ts, step),
                                  'Use a larger step or a shorter span.') IS NULL
                              ELSE false
                          END AS tail
                     FROM (SELECT @extschema@._shard_id_lower_bound_at(b.nx, p.epoch_ms) AS up
                           OFFSET 0) u
                   OFFSET 0) c
         WHERE r.t < to_ts
    )
    SELECT r.emit_lo, r.emit_up FROM r WHERE r.emit_up IS NOT NULL ORDER BY r.n;
END;

-- src/shortcode.rs, core/src/shortcode.rs: the id's 8 bytes, big-endian, in URL-safe base64
-- without padding.
CREATE FUNCTION @extschema@.shard_id_to_shortcode(id bigint) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE
        WHEN id < 0 THEN @extschema@._shard_id_layout_error('negative_id', id, NULL)::text
        ELSE pg_catalog.translate(
                 pg_catalog.rtrim(pg_catalog.encode(pg_catalog.int8send(id), 'base64'), '='),
                 '+/', '-_')
    END;
END;

-- Strict: exactly 11 characters of the alphabet (length first, then the first character outside
-- it), the unused low 2 bits of the last one zero, and not negative (first character A..f).
CREATE FUNCTION @extschema@.shard_id_from_shortcode(code text) RETURNS bigint
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE
        WHEN n <> 11 OR ok < 11 OR last_v & 3 <> 0 OR first_v >= 32 THEN
            @extschema@._shard_id_raise('22P02',
                pg_catalog.format('"%s" is not a shard id shortcode: %s',
                    CASE WHEN n > 20 THEN pg_catalog."substring"(code, 1, 20) || '...'
                         ELSE code END,
                    CASE
                        WHEN n <> 11 THEN pg_catalog.format('has %s characters, not 11', n)
                        WHEN ok < 11
                            THEN pg_catalog.format('character %s is not in the URL-safe base64 '
                                                   'alphabet', ok + 1)
                        WHEN last_v & 3 <> 0 THEN 'its last character is not one an id produces'
                        ELSE 'it decodes to a negative number, which is not an id'
                    END),
                'A shortcode is 11 characters of A-Z, a-z, 0-9, ''-'' and ''_'', as made by '
                'shard_id_to_shortcode.')
        ELSE ('x' || pg_catalog.encode(
                        pg_catalog.decode(pg_catalog.translate(code, '-_', '+/') || '=', 'base64'),
                        'hex'))::bit(64)::bigint
    END
      FROM (SELECT n, ok,
                   CASE WHEN n = 11 AND ok = 11 THEN
                       pg_catalog.strpos('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_',
                                         pg_catalog."right"(code, 1)) - 1 END AS last_v,
                   CASE WHEN n = 11 AND ok = 11 THEN
                       pg_catalog.strpos('ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_',
                                         pg_catalog."left"(code, 1)) - 1 END AS first_v
              FROM (SELECT pg_catalog.char_length(code) AS n,
                           pg_catalog.char_length(
                               pg_catalog."substring"(code, '^[A-Za-z0-9_-]*')) AS ok
                    OFFSET 0) a) b;
END;

-- src/routing.rs, core/src/routing.rs: key mod shard_count, in 0 .. shard_count - 1.
CREATE FUNCTION @extschema@.shard_id_shard_for(key bigint, shard_count integer) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE
        WHEN shard_count < 1 OR shard_count > 8192 THEN
            @extschema@._shard_id_raise('22003',
                pg_catalog.format('shard_count %s is out of range (1 .. 8192)', shard_count),
                'The 13-bit shard field holds at most 8192 logical shards.')::integer
        ELSE (((key % shard_count::bigint) + shard_count::bigint) % shard_count::bigint)::integer
    END;
END;

-- 64-bit FNV-1a (core/src/hash.rs) of the key's UTF-8 bytes, mod shard_count. The hash is kept
-- as hi and lo, 32 bits each: with h = hi * 2^32 + lo and the prime 2^40 + 435, one step is
-- x = lo XOR byte; lo' = (x * 435) mod 2^32; hi' = (hi * 435 + (x * 435) / 2^32 + x * 2^8) mod 2^32,
-- every term below 2^42. The key is converted to UTF-8 first, as natively (an error for a
-- character with no UTF-8 form comes before the one for shard_count).
CREATE FUNCTION @extschema@.shard_id_shard_for(key text, shard_count integer) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT CASE
        WHEN (shard_count < 1 OR shard_count > 8192)
             AND pg_catalog.convert_to(key, 'UTF8') IS NOT NULL THEN
            @extschema@._shard_id_raise('22003',
                pg_catalog.format('shard_count %s is out of range (1 .. 8192)', shard_count),
                'The 13-bit shard field holds at most 8192 logical shards.')::integer
        ELSE (
            WITH RECURSIVE k AS MATERIALIZED (
                SELECT pg_catalog.convert_to(key, 'UTF8') AS bytes
            ), h(i, hi, lo) AS (
                SELECT 0, 3421674724::bigint, 2216829733::bigint
                UNION ALL
                SELECT h.i + 1,
                       (h.hi * 435::bigint + ((s.x * 435::bigint) >> 32) + (s.x << 8))
                           & 4294967295::bigint,
                       (s.x * 435::bigint) & 4294967295::bigint
                  FROM h CROSS JOIN k
                       CROSS JOIN LATERAL (
                           SELECT h.lo # pg_catalog.get_byte(k.bytes, h.i)::bigint AS x
                       ) s
                 WHERE h.i < pg_catalog.length(k.bytes)
            )
            SELECT (((h.hi % shard_count::bigint) * (4294967296::bigint % shard_count::bigint)
                     + h.lo) % shard_count::bigint)::integer
              FROM h CROSS JOIN k
             WHERE h.i = pg_catalog.length(k.bytes)
        )
    END;
END;
