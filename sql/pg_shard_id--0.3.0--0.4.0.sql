-- pg_shard_id 0.3.0 -> 0.4.0, run by ALTER EXTENSION pg_shard_id UPDATE TO '0.4.0'.
--
-- Install the 0.4.0 library and restart PostgreSQL first (the library is preloaded: a running
-- server keeps the old one), then run ALTER EXTENSION pg_shard_id UPDATE in each database.
--
-- New: the table shard_id_origin, where a database records the epoch its ids were made with and
-- the servers that made them, so that both travel through pg_dump and pg_upgrade (README,
-- "Restores and pg_upgrade"). Nothing else changes: user tables, DEFAULTs, indexes and views are
-- not touched. The statements are copies of sql/origin.sql and sql/comments.sql; tests/upgrade
-- checks that the result equals a fresh 0.4.0 install.
CREATE TABLE shard_id_origin (
    epoch timestamptz NOT NULL,
    system_identifier bigint NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
SELECT pg_catalog.pg_extension_config_dump('shard_id_origin', '');
GRANT SELECT ON shard_id_origin TO PUBLIC;
COMMENT ON TABLE shard_id_origin IS
    'The servers (system identifier) that issued ids in this database and their pg_shard_id.epoch; kept by pg_dump and pg_upgrade. Written by pg_shard_id only.';

CREATE FUNCTION shard_id_origin_record() RETURNS boolean
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog
BEGIN ATOMIC
    INSERT INTO @extschema@.shard_id_origin (epoch, system_identifier)
        SELECT i.epoch, c.system_identifier
        FROM @extschema@.pg_shard_id_info() i, pg_catalog.pg_control_system() c;
    SELECT true;
END;
REVOKE EXECUTE ON FUNCTION shard_id_origin_record() FROM PUBLIC;
COMMENT ON FUNCTION shard_id_origin_record() IS
    'Internal: records this server and its epoch in shard_id_origin (next_shard_id calls it).';

-- A database of 0.3.0 may hold ids already: record that this server made them, with its epoch.
SELECT shard_id_origin_record();
