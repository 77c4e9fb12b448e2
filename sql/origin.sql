-- Where this database's ids came from (core/src/origin.rs, src/origin.rs): a row for each server
-- that issued ids here, with the epoch it used. A configuration table of the extension, so
-- pg_dump dumps its rows and pg_upgrade keeps them: the epoch and the origin travel with the data,
-- which postgresql.conf and the lease file in the data directory do not.
CREATE TABLE shard_id_origin (
    epoch timestamptz NOT NULL,
    system_identifier bigint NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
SELECT pg_catalog.pg_extension_config_dump('shard_id_origin', '');
GRANT SELECT ON shard_id_origin TO PUBLIC;
COMMENT ON TABLE shard_id_origin IS
    'The servers (system identifier) that issued ids in this database and their pg_shard_id.epoch; kept by pg_dump and pg_upgrade. Written by pg_shard_id only.';

-- Adds this server's row (and returns true). Called by next_shard_id before a backend's first id, when the rows say
-- so, through the function manager (so no EXECUTE privilege is needed, and none is granted: the
-- row is a fact about this server, which only the extension records).
CREATE FUNCTION shard_id_origin_record() RETURNS boolean
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog
BEGIN ATOMIC
    INSERT INTO @extschema@.shard_id_origin (epoch, system_identifier)
        SELECT i.epoch, c.system_identifier
        FROM @extschema@.pg_shard_id_info() i, pg_catalog.pg_control_system() c;
    SELECT true;
END;
REVOKE EXECUTE ON FUNCTION shard_id_origin_record() FROM PUBLIC;
