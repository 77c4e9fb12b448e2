-- pg_shard_id, SQL edition: the settings of a database (its epoch and node number), read by every
-- id and decoder, and the helpers the other parts share. See generate.sql for the guard.

-- The guard finds each sequence's registers (and its own helpers) by name in this schema: a role
-- that may create objects here, or owns the schema, could make them first, or swap them, and
-- whatever runs as the edition's owner would run its code (the fifth and sixth outside reviews:
-- a schema owner made itself superuser so). Refused: the schema must be the installing role's.
DO $schema_check$
BEGIN
    IF (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.oid OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace)
       OPERATOR(pg_catalog.<>) (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER) THEN
        RAISE EXCEPTION 'pg_shard_id: schema @extschema@ is not owned by %, who installs the SQL edition', CURRENT_USER
            USING ERRCODE = '42501',
                  HINT = 'Install it into a schema of its own, made by the role that installs it (psql -v schema=ids ... makes one).';
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace n CROSS JOIN LATERAL pg_catalog.aclexplode(n.nspacl) a
                WHERE n.oid OPERATOR(pg_catalog.=) '@extschema@'::pg_catalog.regnamespace
                  AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE' AND a.grantee OPERATOR(pg_catalog.<>) n.nspowner) THEN
        RAISE EXCEPTION 'pg_shard_id: roles other than its owner may create objects in schema @extschema@'
            USING ERRCODE = '42501',
                  HINT = 'Install the SQL edition into a schema of its own (psql -v schema=ids ...), or REVOKE CREATE ON SCHEMA from the others.';
    END IF;
END
$schema_check$;

-- Raises an ERROR with this SQLSTATE, message and hint (NULL: none); for the SQL functions.
-- VOLATILE, so that the planner never calls it early for constant arguments in a CASE branch not
-- taken; PARALLEL SAFE, as the functions that call it.
CREATE FUNCTION @extschema@._shard_id_raise(sqlstate text, message text, hint text) RETURNS bigint
LANGUAGE plpgsql VOLATILE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF hint IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = sqlstate, MESSAGE = message;
    END IF;
    RAISE EXCEPTION USING ERRCODE = sqlstate, MESSAGE = message, HINT = hint;
END $$;

-- The epoch and node of this database, in force for every id: set by the edition's owner only
-- (shard_id_configure below), never by a session (a session that could change them could repeat
-- ids). Kept as the bodies of two SQL functions, which the planner inlines: no table read per id.
CREATE FUNCTION @extschema@._shard_id_epoch_ms() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN 1767225600000;

CREATE FUNCTION @extschema@._shard_id_node() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN NULL::integer;

-- Milliseconds since the epoch by the server's clock.
CREATE FUNCTION @extschema@._shard_id_clock_ms() RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL SAFE
RETURN pg_catalog.floor(pg_catalog.extract('epoch', pg_catalog.clock_timestamp()) OPERATOR(pg_catalog.*) 1000)::bigint
       OPERATOR(pg_catalog.-) @extschema@._shard_id_epoch_ms();

-- Sets this database's epoch or node number (the edition's owner only). The epoch may change only
-- while no sequence has a guard (no id was made by the old one).
--
-- shard_id_configure(epoch timestamptz DEFAULT NULL, node integer DEFAULT NULL) RETURNS void
--   SELECT shard_id_configure(node => 5);
-- Errors: 55000 an epoch changed after ids were made; 22023 an epoch that is not a whole
-- millisecond; 22003 a node outside 0..8191.
-- The settings as recorded, one row: what shard_id_restored puts back into the two functions above
-- after a restore (installed as an extension, they are made again by CREATE EXTENSION with their
-- defaults; the row is the user's, dumped: the fifth outside review).
CREATE TABLE @extschema@.shard_id_settings (
    epoch_ms bigint NOT NULL,
    node integer
);
INSERT INTO @extschema@.shard_id_settings VALUES (1767225600000, NULL);
REVOKE ALL ON @extschema@.shard_id_settings FROM PUBLIC;
GRANT SELECT ON @extschema@.shard_id_settings TO PUBLIC;

CREATE FUNCTION @extschema@.shard_id_configure(epoch timestamptz DEFAULT NULL, node integer DEFAULT NULL) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    new_epoch_ms numeric := floor(extract(epoch FROM epoch) * 1000);
BEGIN
    IF epoch IS NOT NULL THEN
        IF NOT isfinite(epoch) OR extract(epoch FROM epoch) * 1000 <> new_epoch_ms THEN
            RAISE EXCEPTION 'pg_shard_id: epoch % is not a finite timestamp with whole milliseconds', epoch USING ERRCODE = '22023';
        END IF;
        IF new_epoch_ms <> @extschema@._shard_id_epoch_ms() AND EXISTS (SELECT FROM @extschema@.shard_id_guards) THEN
            RAISE EXCEPTION 'pg_shard_id: ids were made with epoch %', to_timestamp(@extschema@._shard_id_epoch_ms() / 1000.0)
                USING ERRCODE = '55000', HINT = 'The epoch is fixed once a sequence has a guard: ids made by another would repeat or run backwards.';
        END IF;
        EXECUTE format('CREATE OR REPLACE FUNCTION @extschema@._shard_id_epoch_ms() RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN %s', new_epoch_ms);
        UPDATE @extschema@.shard_id_settings SET epoch_ms = new_epoch_ms;
    END IF;
    IF node IS NOT NULL THEN
        IF node < 0 OR node > 8191 THEN
            RAISE EXCEPTION 'pg_shard_id: node % is outside 0..8191', node USING ERRCODE = '22003';
        END IF;
        EXECUTE format('CREATE OR REPLACE FUNCTION @extschema@._shard_id_node() RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN %s', node);
        UPDATE @extschema@.shard_id_settings SET node = shard_id_configure.node;
    END IF;
END $$;
REVOKE ALL ON FUNCTION @extschema@.shard_id_configure(timestamptz, integer) FROM PUBLIC;
