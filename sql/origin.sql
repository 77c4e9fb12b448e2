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
    recorded_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    -- the database the ids were made in (NULL: recorded before 0.5.0); a copy into another
    -- database of this server (pg_restore, CREATE DATABASE ... TEMPLATE) has another oid
    database oid
);
-- Every column is its replica identity, so that the DELETE in record_origin() works in a database
-- with a publication FOR ALL TABLES or FOR TABLES IN SCHEMA _pg_shard_id that publishes deletes
-- (what CDC tools create), on a publisher and on a subscriber, and a subscriber applies a
-- publisher's deletes of its rows (a table without a key has no other identity).
ALTER TABLE _pg_shard_id.origin REPLICA IDENTITY FULL;
SELECT pg_catalog.pg_extension_config_dump('_pg_shard_id.origin', '');
GRANT SELECT ON _pg_shard_id.origin TO PUBLIC;
COMMENT ON TABLE _pg_shard_id.origin IS
    'The servers (system identifier) that issued ids in this database and their pg_shard_id.epoch; kept by pg_dump and pg_upgrade. Written by pg_shard_id only.';

-- Adds this server's row, with this server's epoch (never later than the recorded one: that is
-- refused before) and this database, and drops the rows of other servers and other databases,
-- whose ids it has now taken in; returns true. Called by next_shard_id before a backend's first id when the rows say so, through the
-- function manager (so no EXECUTE privilege is needed, and none is granted: the rows are facts
-- about servers, which only the extension records).
CREATE FUNCTION _pg_shard_id.record_origin() RETURNS boolean
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
REVOKE EXECUTE ON FUNCTION _pg_shard_id.record_origin() FROM PUBLIC;

-- What the libraries of 0.4.0 to 0.6.0 read before a backend's first id: the earliest recorded
-- epoch (Unix ms; NULL without rows), then the system identifiers. 0.7.0's library reads the
-- table itself (src/origin.rs: each new backend planned these two SQL functions); they stay for
-- a server that still runs an older library against this SQL (a standby not yet restarted in a
-- rolling upgrade). Called by OID like record_origin(), and SECURITY DEFINER with its names
-- resolved when it was created, so that no role's search_path or privileges change what it
-- reads.
CREATE FUNCTION _pg_shard_id.read_origin() RETURNS bigint[]
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog
BEGIN ATOMIC
    SELECT ARRAY[(extract(epoch FROM min(o.epoch)) * 1000)::bigint]
           || array_agg(DISTINCT o.system_identifier)
    FROM _pg_shard_id.origin o;
END;
REVOKE EXECUTE ON FUNCTION _pg_shard_id.read_origin() FROM PUBLIC;

-- The databases of the rows (0 for a row recorded before 0.5.0, which did not say), read with
-- read_origin() and in the same way.
CREATE FUNCTION _pg_shard_id.origin_databases() RETURNS oid[]
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog
BEGIN ATOMIC
    SELECT coalesce(array_agg(DISTINCT coalesce(o.database, 0::oid)), '{}')
    FROM _pg_shard_id.origin o;
END;
REVOKE EXECUTE ON FUNCTION _pg_shard_id.origin_databases() FROM PUBLIC;
