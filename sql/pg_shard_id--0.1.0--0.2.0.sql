-- pg_shard_id 0.1.0 -> 0.2.0, run by ALTER EXTENSION pg_shard_id UPDATE TO '0.2.0'.
--
-- Install the 0.2.0 library and restart PostgreSQL first (the library is preloaded: a running
-- server keeps the old one), then run ALTER EXTENSION pg_shard_id UPDATE in each database.
--
-- Nothing here drops or rewrites user data: tables, DEFAULTs, generated columns, indexes and views
-- that use the extension's functions keep pointing at the same functions (same oids). Every change
-- is CREATE (a new function), CREATE OR REPLACE or COMMENT, except pg_shard_id_info(), whose result gained two columns
-- (a function's result type cannot be replaced): it is dropped and created again, so a user view
-- over pg_shard_id_info() makes this update fail (2BP01) and has to be dropped and re-created
-- around it. tests/upgrade/run.sh checks that the result equals a fresh 0.2.0 install.

-- next_shard_id(seq): the node number (pg_shard_id.node, or the Citus group id) as the shard.
CREATE FUNCTION next_shard_id("seq" regclass) RETURNS bigint
    VOLATILE STRICT PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'next_shard_id_for_node_wrapper';
COMMENT ON FUNCTION next_shard_id(regclass) IS
    'Next 64-bit id with this server''s node number as the shard (pg_shard_id.node, or the Citus group id): one DEFAULT for every node.';

-- pg_shard_id_info(): + guard_evictions, + lease_until.
DROP FUNCTION pg_shard_id_info();
CREATE FUNCTION pg_shard_id_info() RETURNS TABLE (
    "epoch" timestamp with time zone,
    "positive_until" timestamp with time zone,
    "overflow" text,
    "guard" text,
    "guard_slots" integer,
    "guard_slots_in_use" integer,
    "guard_evictions" bigint,
    "lease_until" timestamp with time zone
)
    STRICT VOLATILE PARALLEL RESTRICTED
    LANGUAGE c AS 'MODULE_PATHNAME', 'pg_shard_id_info_wrapper';

-- shard_id_decode: SQL-standard bodies, bound to the extract functions by oid when created, so
-- that ALTER SCHEMA ... RENAME of the extension's schema does not break them (0.1.0 wrote the
-- schema's name into a string body). The update runs with search_path = the extension's schema.
CREATE OR REPLACE FUNCTION shard_id_decode(id bigint, OUT ts timestamptz, OUT shard integer, OUT seq integer)
    RETURNS record LANGUAGE sql STABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT shard_id_extract_timestamp(id), shard_id_extract_shard(id), shard_id_extract_seq(id);
END;

CREATE OR REPLACE FUNCTION shard_id_decode(id bigint, epoch timestamptz,
                                           OUT ts timestamptz, OUT shard integer, OUT seq integer)
    RETURNS record LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT shard_id_extract_timestamp(id, epoch), shard_id_extract_shard(id), shard_id_extract_seq(id);
END;

-- shard_id_partition_bounds: PL/pgSQL -> Rust (checked per step, at most 100,000 ranges). Same
-- arguments and result columns; CREATE OR REPLACE resets 0.1.0's SET search_path.
CREATE OR REPLACE FUNCTION shard_id_partition_bounds(
    "from_ts" timestamp with time zone,
    "to_ts" timestamp with time zone,
    "step" interval
) RETURNS TABLE (
    "lower" bigint,
    "upper" bigint
)
    STRICT STABLE PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_partition_bounds_wrapper';

-- One COMMENT per SQL function, as in a fresh install (sql/comments.sql).
COMMENT ON FUNCTION next_shard_id(regclass, integer) IS
    'Next 64-bit id of a logical shard: ms since pg_shard_id.epoch | shard | nextval(seq) mod 1024; never repeats.';
COMMENT ON FUNCTION shard_id_extract_timestamp(bigint) IS
    'The time an id was made, to the millisecond, by pg_shard_id.epoch.';
COMMENT ON FUNCTION shard_id_extract_timestamp(bigint, timestamptz) IS
    'The time an id was made, to the millisecond, by an explicit epoch.';
COMMENT ON FUNCTION shard_id_extract_shard(bigint) IS
    'The logical shard of an id.';
COMMENT ON FUNCTION shard_id_extract_seq(bigint) IS
    'The sequence field of an id (nextval mod 1024).';
COMMENT ON FUNCTION shard_id_decode(bigint) IS
    'The fields of an id: (ts, shard, seq), by pg_shard_id.epoch.';
COMMENT ON FUNCTION shard_id_decode(bigint, timestamptz) IS
    'The fields of an id: (ts, shard, seq), by an explicit epoch.';
COMMENT ON FUNCTION shard_id_compose(timestamptz, integer, integer) IS
    'The id with these fields, by pg_shard_id.epoch: the inverse of shard_id_decode.';
COMMENT ON FUNCTION shard_id_compose(timestamptz, integer, integer, timestamptz) IS
    'The id with these fields, by an explicit epoch: the inverse of shard_id_decode.';
COMMENT ON FUNCTION shard_id_lower_bound(timestamptz) IS
    'The smallest id made at or after a time, by pg_shard_id.epoch: id >= lower_bound(a) AND id < lower_bound(b) is a time range.';
COMMENT ON FUNCTION shard_id_lower_bound(timestamptz, timestamptz) IS
    'The smallest id made at or after a time, by an explicit epoch.';
COMMENT ON FUNCTION shard_id_shard_for(bigint, integer) IS
    'The logical shard of an integer key: key mod shard_count.';
COMMENT ON FUNCTION shard_id_shard_for(text, integer) IS
    'The logical shard of a text key: 64-bit FNV-1a of its UTF-8 bytes, mod shard_count.';
COMMENT ON FUNCTION shard_id_to_shortcode(bigint) IS
    'The 11-character URL-safe base64 code of an id.';
COMMENT ON FUNCTION shard_id_from_shortcode(text) IS
    'The id of a shortcode made by shard_id_to_shortcode.';
COMMENT ON FUNCTION shard_id_partition_bounds(timestamptz, timestamptz, interval) IS
    'Contiguous (lower, upper) id ranges per time step, for PARTITION BY RANGE (id).';
COMMENT ON FUNCTION pg_shard_id_info() IS
    'The epoch, overflow policy, guard mode, guard table use and lease in force.';
