-- pg_shard_id 0.4.0 -> 0.5.0, run by ALTER EXTENSION pg_shard_id UPDATE TO '0.5.0'.
--
-- Install the 0.5.0 library and restart PostgreSQL first (the library is preloaded: a running
-- server keeps the old one), then run ALTER EXTENSION pg_shard_id UPDATE in each database.
--
-- New: the view pg_shard_id_stats (and its function), pg_shard_id_stats_reset() and
-- shard_id_check(); _pg_shard_id.origin records the database too (a copy into another database
-- of the same server starts new ids above the server's lease; rows from 0.4.0 name no database,
-- so the first id after this update does that once: at most a second or so ahead of the clock).
-- Nothing else changes: user tables, DEFAULTs, indexes and views are not touched. The
-- statements are copies of the generated install script, sql/stats.sql, sql/origin.sql and
-- sql/comments.sql; tests/upgrade checks that the result equals a fresh 0.5.0 install.
ALTER TABLE _pg_shard_id.origin ADD COLUMN database oid;

CREATE OR REPLACE FUNCTION _pg_shard_id.record_origin() RETURNS boolean
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog
BEGIN ATOMIC
    DELETE FROM _pg_shard_id.origin
        WHERE system_identifier <> (SELECT c.system_identifier FROM pg_catalog.pg_control_system() c)
           OR database IS DISTINCT FROM (SELECT d.oid FROM pg_catalog.pg_database d
                                          WHERE d.datname = pg_catalog.current_database());
    INSERT INTO _pg_shard_id.origin (epoch, system_identifier, database)
        SELECT i.epoch, c.system_identifier, d.oid
        FROM @extschema@.pg_shard_id_info() i, pg_catalog.pg_control_system() c,
             pg_catalog.pg_database d
        WHERE d.datname = pg_catalog.current_database();
    SELECT true;
END;

CREATE FUNCTION _pg_shard_id.origin_databases() RETURNS oid[]
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog
BEGIN ATOMIC
    SELECT coalesce(array_agg(DISTINCT coalesce(o.database, 0::oid)), '{}')
    FROM _pg_shard_id.origin o;
END;
REVOKE EXECUTE ON FUNCTION _pg_shard_id.origin_databases() FROM PUBLIC;
COMMENT ON FUNCTION _pg_shard_id.origin_databases() IS
    'Internal: the recorded databases, 0 for rows recorded before 0.5.0 (next_shard_id calls it).';

CREATE FUNCTION "pg_shard_id_stats"() RETURNS TABLE (
	"database" oid,
	"sequence_oid" oid,
	"ids" bigint,
	"exhausted_ms" bigint,
	"waits" bigint,
	"wait_seconds" double precision,
	"lead_ms" bigint,
	"clock_steps" bigint,
	"last_issued" timestamp with time zone,
	"lease_writes" bigint
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c
AS 'MODULE_PATHNAME', 'pg_shard_id_stats_wrapper';

CREATE FUNCTION "pg_shard_id_stats_reset"() RETURNS void
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'pg_shard_id_stats_reset_wrapper';

CREATE FUNCTION "shard_id_check"() RETURNS TABLE (
	"check" TEXT,
	"status" TEXT,
	"detail" TEXT
)
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'shard_id_check_wrapper';

-- The guard's statistics per sequence (src/stats.rs), with the database's name and, in this
-- database, the sequence as a regclass (NULL for another database's sequences, and for one that
-- was dropped). Readable by everyone, like pg_stat_user_tables; resetting is not.
CREATE VIEW pg_shard_id_stats AS
SELECT d.datname,
       CASE WHEN s.database = (SELECT oid FROM pg_catalog.pg_database
                                WHERE datname = pg_catalog.current_database())
            THEN (SELECT c.oid::pg_catalog.regclass FROM pg_catalog.pg_class c
                   WHERE c.oid = s.sequence_oid)
       END AS sequence,
       s.sequence_oid, s.ids, s.exhausted_ms, s.waits, s.wait_seconds, s.lead_ms,
       s.clock_steps, s.last_issued, s.lease_writes
  FROM @extschema@.pg_shard_id_stats() s
  LEFT JOIN pg_catalog.pg_database d ON d.oid = s.database;
GRANT SELECT ON pg_shard_id_stats TO PUBLIC;
COMMENT ON VIEW pg_shard_id_stats IS
    'pg_shard_id''s guard statistics per sequence since start-up or pg_shard_id_stats_reset(): ids, exhausted milliseconds, waits, lead over the clock, clock steps, lease writes.';
REVOKE EXECUTE ON FUNCTION pg_shard_id_stats_reset() FROM PUBLIC;

COMMENT ON FUNCTION pg_shard_id_stats() IS
    'The guard''s statistics per sequence (read them through the view pg_shard_id_stats).';
COMMENT ON FUNCTION pg_shard_id_stats_reset() IS
    'Sets the statistics in pg_shard_id_stats to zero (superusers and roles granted EXECUTE).';
COMMENT ON FUNCTION shard_id_check() IS
    'Checks the setup (preload, lease, epoch, clock, shard numbers, Citus nodes); each row that is not ok says what to fix.';
