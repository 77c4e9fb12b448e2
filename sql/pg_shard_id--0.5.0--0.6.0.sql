-- pg_shard_id 0.5.0 -> 0.6.0, run by ALTER EXTENSION pg_shard_id UPDATE TO '0.6.0'.
--
-- Install the 0.6.0 library and restart PostgreSQL first (the library is preloaded: a running
-- server keeps the old one), then run ALTER EXTENSION pg_shard_id UPDATE in each database.

-- The origin table's replica identity is every column: recording this server deletes rows of
-- other servers, which a publication FOR ALL TABLES (or FOR TABLES IN SCHEMA _pg_shard_id) that
-- publishes deletes refused without one (55000 at the first id of every backend that recorded).
ALTER TABLE _pg_shard_id.origin REPLICA IDENTITY FULL;

CREATE FUNCTION shard_id_resync("seq" regclass) RETURNS timestamptz
    VOLATILE STRICT PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_resync_wrapper';
COMMENT ON FUNCTION shard_id_resync(regclass) IS
    'After loading rows into a live table: the sequence''s next ids start above the newest id stored in its DEFAULT columns; returns that floor.';
COMMENT ON FUNCTION shard_id_check() IS
    'Checks the setup (preload, lease, epoch, clock, shard numbers, data floor, replication, publications, Citus nodes); each row that is not ok says what to fix.';
