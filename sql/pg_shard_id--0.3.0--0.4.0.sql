-- pg_shard_id 0.3.0 -> 0.4.0, run by ALTER EXTENSION pg_shard_id UPDATE TO '0.4.0'.
--
-- Install the 0.4.0 library and restart PostgreSQL first (the library is preloaded: a running
-- server keeps the old one), then run ALTER EXTENSION pg_shard_id UPDATE in each database.
--
-- New: the schema _pg_shard_id with the table origin, where a database records the epoch its ids
-- were made with and the servers that made them, so that both travel through pg_dump and
-- pg_upgrade (README, "Replicas, backups and upgrades"). Nothing else changes: user tables,
-- DEFAULTs, indexes and views are not touched. The statements are copies of sql/origin.sql and
-- sql/comments.sql; tests/upgrade checks that the result equals a fresh 0.4.0 install.
-- Where this database's ids came from (core/src/origin.rs, src/origin.rs): a row for each server
-- that issued ids here, with the epoch it used. A configuration table of the extension, so
-- pg_dump dumps its rows and pg_upgrade keeps them: the epoch and the origin travel with the data,
-- which postgresql.conf and the lease file in the data directory do not. It lives in a schema of
-- its own, so that tools which compare a schema's tables with an application's models (Alembic's
-- autogenerate, for one) do not see it among the application's tables, named like internal
-- schemas are (a leading underscore), so that no schema-per-shard pattern such as 'shard\_%'
-- matches it.
CREATE SCHEMA _pg_shard_id;
GRANT USAGE ON SCHEMA _pg_shard_id TO PUBLIC;
COMMENT ON SCHEMA _pg_shard_id IS
    'pg_shard_id''s own records (the table origin); written by pg_shard_id only.';
CREATE TABLE _pg_shard_id.origin (
    epoch timestamptz NOT NULL,
    system_identifier bigint NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
SELECT pg_catalog.pg_extension_config_dump('_pg_shard_id.origin', '');
GRANT SELECT ON _pg_shard_id.origin TO PUBLIC;
COMMENT ON TABLE _pg_shard_id.origin IS
    'The servers (system identifier) that issued ids in this database and their pg_shard_id.epoch; kept by pg_dump and pg_upgrade. Written by pg_shard_id only.';

-- Adds this server's row, with this server's epoch (never later than the recorded one: that is
-- refused before), and drops the rows of other servers, whose ids it has now taken in; returns
-- true. Called by next_shard_id before a backend's first id when the rows say so, through the
-- function manager (so no EXECUTE privilege is needed, and none is granted: the rows are facts
-- about servers, which only the extension records).
CREATE FUNCTION _pg_shard_id.record_origin() RETURNS boolean
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog
BEGIN ATOMIC
    DELETE FROM _pg_shard_id.origin
        WHERE system_identifier <> (SELECT c.system_identifier FROM pg_catalog.pg_control_system() c);
    INSERT INTO _pg_shard_id.origin (epoch, system_identifier)
        SELECT i.epoch, c.system_identifier
        FROM @extschema@.pg_shard_id_info() i, pg_catalog.pg_control_system() c;
    SELECT true;
END;
REVOKE EXECUTE ON FUNCTION _pg_shard_id.record_origin() FROM PUBLIC;

-- What next_shard_id reads before a backend's first id: the earliest recorded epoch (Unix ms;
-- NULL without rows), then the system identifiers. Called by OID like record_origin(), and
-- SECURITY DEFINER with its names resolved when it was created, so that no role's search_path
-- or privileges change what it reads.
CREATE FUNCTION _pg_shard_id.read_origin() RETURNS bigint[]
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog
BEGIN ATOMIC
    SELECT ARRAY[(extract(epoch FROM min(o.epoch)) * 1000)::bigint]
           || array_agg(DISTINCT o.system_identifier)
    FROM _pg_shard_id.origin o;
END;
REVOKE EXECUTE ON FUNCTION _pg_shard_id.read_origin() FROM PUBLIC;
COMMENT ON FUNCTION _pg_shard_id.record_origin() IS
    'Internal: records this server and its epoch in _pg_shard_id.origin (next_shard_id calls it).';
COMMENT ON FUNCTION _pg_shard_id.read_origin() IS
    'Internal: the earliest recorded epoch (Unix ms), then the recorded servers (next_shard_id calls it).';

-- A database of 0.3.0 may hold ids, made by this server or by another one it was restored or
-- pg_upgraded from: nothing says which, so it records an unknown server (system identifier 0)
-- with this server's epoch. The first id after the update then starts above anything another
-- server could have issued (README, guarantee 9: up to 10 min 1 s ahead of the clock, once) and
-- records this server.
INSERT INTO _pg_shard_id.origin (epoch, system_identifier)
    SELECT epoch, 0 FROM @extschema@.pg_shard_id_info();
