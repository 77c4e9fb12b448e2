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

-- Masked public ids (src/mask.rs): FF1-AES-256 with the keys of pg_shard_id.keys.
CREATE FUNCTION shard_id_mask("id" bigint, "tweak" text DEFAULT '') RETURNS bigint
    STABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_mask_wrapper';
CREATE FUNCTION shard_id_mask("id" bigint, "tweak" text, "key_id" integer) RETURNS bigint
    IMMUTABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_mask_with_key_wrapper';
CREATE FUNCTION shard_id_unmask("masked" bigint, "tweak" text DEFAULT '') RETURNS bigint
    STABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_unmask_wrapper';
REVOKE EXECUTE ON FUNCTION shard_id_unmask(bigint, text) FROM PUBLIC;
CREATE FUNCTION shard_id_unmask("masked" bigint, "tweak" text, "key_id" integer) RETURNS bigint
    IMMUTABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_unmask_with_key_wrapper';
REVOKE EXECUTE ON FUNCTION shard_id_unmask(bigint, text, integer) FROM PUBLIC;
CREATE FUNCTION shard_id_mask_shortcode("id" bigint, "tweak" text DEFAULT '') RETURNS text
    STABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_mask_shortcode_wrapper';
CREATE FUNCTION shard_id_unmask_shortcode("code" text, "tweak" text DEFAULT '') RETURNS bigint
    IMMUTABLE STRICT PARALLEL SAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_unmask_shortcode_wrapper';
REVOKE EXECUTE ON FUNCTION shard_id_unmask_shortcode(text, text) FROM PUBLIC;
COMMENT ON FUNCTION shard_id_mask(bigint, text) IS
    'The id masked with the current key of pg_shard_id.keys (FF1-AES-256 over the non-negative bigints) under a tweak: reveals no time, shard or order.';
COMMENT ON FUNCTION shard_id_mask(bigint, text, integer) IS
    'The id masked with the named key (IMMUTABLE: a key id''s key never changes), for generated columns and indexes.';
COMMENT ON FUNCTION shard_id_unmask(bigint, text) IS
    'The id of a value masked with the current key (EXECUTE revoked from PUBLIC).';
COMMENT ON FUNCTION shard_id_unmask(bigint, text, integer) IS
    'The id of a value masked with the named key (EXECUTE revoked from PUBLIC).';
COMMENT ON FUNCTION shard_id_mask_shortcode(bigint, text) IS
    'A URL-safe masked id: the current key''s id as one character, then the masked value''s shortcode (12 characters).';
COMMENT ON FUNCTION shard_id_unmask_shortcode(text, text) IS
    'The id of a masked shortcode, with the key it names (EXECUTE revoked from PUBLIC).';
