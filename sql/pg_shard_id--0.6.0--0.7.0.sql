-- pg_shard_id 0.6.0 -> 0.7.0, run by ALTER EXTENSION pg_shard_id UPDATE TO '0.7.0'.
--
-- Install the 0.7.0 library and restart PostgreSQL first (the library is preloaded: a running
-- server keeps the old one), then run ALTER EXTENSION pg_shard_id UPDATE in each database.
--
-- Masking under a threat model (issue 38, src/mask.rs):
-- * masking is the key holder's privilege, like unmasking: a role that may mask finds the id
--   behind a masked value by trying the ids of one second and shard. EXECUTE on every masking
--   function goes from PUBLIC to the role shard_id_masker. Before updating, GRANT
--   shard_id_masker TO the roles that mask, and to the roles that insert into or update a table
--   with a masked generated column or a masked expression index (they execute the function), and
--   to the owners of such tables (ANALYZE, REINDEX and CREATE INDEX run as the owner); grants you
--   made to other roles stay;
-- * the forms that use the current key are PARALLEL RESTRICTED: a parallel worker could read a
--   newer key file than its leader;
-- * _pg_shard_id.mask_keys records each key id's check value (shard_id_mask_keys_record()).

ALTER FUNCTION shard_id_mask(bigint, text) PARALLEL RESTRICTED;
ALTER FUNCTION shard_id_unmask(bigint, text) PARALLEL RESTRICTED;
ALTER FUNCTION shard_id_mask_shortcode(bigint, text) PARALLEL RESTRICTED;

CREATE FUNCTION shard_id_mask_keys_record() RETURNS TABLE ("key_id" integer, "check_value" bigint, "recorded" text)
    VOLATILE STRICT PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_mask_keys_record_wrapper';
REVOKE EXECUTE ON FUNCTION shard_id_mask_keys_record() FROM PUBLIC;
-- Masking's privileges and records (src/mask.rs, docs/masking.md).
--
-- Both directions are the key holder's: a role that may mask finds the id behind a masked value
-- by trying the 1,024,000 ids of one second and one shard (0.77 s, docs/masking.md), so EXECUTE on
-- every masking function is revoked from PUBLIC and granted to one role, shard_id_masker
-- (NOLOGIN; created here when missing, kept when the extension is dropped, as roles are
-- cluster-wide): GRANT shard_id_masker TO the roles that make or resolve public ids. (Names
-- starting with pg_ are reserved for PostgreSQL's own roles.)
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'shard_id_masker') THEN
        CREATE ROLE shard_id_masker NOLOGIN;
    ELSIF (SELECT rolcanlogin OR rolsuper FROM pg_catalog.pg_roles WHERE rolname = 'shard_id_masker') THEN
        -- a role of that name made by someone else: it gets masking's grants all the same, so say so
        RAISE WARNING 'pg_shard_id: the existing role shard_id_masker can log in or is a superuser; it is granted masking'
            USING HINT = 'Masking is granted to the role shard_id_masker, meant as a NOLOGIN group role: ALTER ROLE shard_id_masker NOLOGIN NOSUPERUSER, and check who is a member of it.';
    END IF;
END
$$;
REVOKE EXECUTE ON FUNCTION shard_id_mask(bigint, text), shard_id_mask(bigint, text, integer),
    shard_id_unmask(bigint, text), shard_id_unmask(bigint, text, integer),
    shard_id_mask_shortcode(bigint, text), shard_id_unmask_shortcode(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION shard_id_mask(bigint, text), shard_id_mask(bigint, text, integer),
    shard_id_unmask(bigint, text), shard_id_unmask(bigint, text, integer),
    shard_id_mask_shortcode(bigint, text), shard_id_unmask_shortcode(text, text) TO shard_id_masker;

-- A check value per key id (the key's masked value of 0 under a reserved tweak: it identifies
-- the key without revealing it), written by shard_id_mask_keys_record() only. A configuration
-- table, so pg_dump and pg_upgrade keep its rows; a physical standby has them through WAL. Every
-- read of the key file compares its keys with these rows and refuses a key id whose key differs.
CREATE TABLE _pg_shard_id.mask_keys (
    key_id smallint PRIMARY KEY CHECK (key_id BETWEEN 1 AND 63),
    check_value bigint NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
SELECT pg_catalog.pg_extension_config_dump('_pg_shard_id.mask_keys', '');
GRANT SELECT ON _pg_shard_id.mask_keys TO PUBLIC;
COMMENT ON TABLE _pg_shard_id.mask_keys IS
    'The check value of each mask key id of pg_shard_id.keys (never the key): a key id whose key differs is refused. Written by shard_id_mask_keys_record().';
COMMENT ON FUNCTION shard_id_mask(bigint, text) IS
    'The id masked with the current key of pg_shard_id.keys (FF1-AES-256 over the non-negative bigints) under a tweak: reveals no time, shard or order. EXECUTE: shard_id_masker.';
COMMENT ON FUNCTION shard_id_mask(bigint, text, integer) IS
    'The id masked with the named key (IMMUTABLE: a key id''s key never changes, checked against _pg_shard_id.mask_keys), for generated columns and indexes. EXECUTE: shard_id_masker.';
COMMENT ON FUNCTION shard_id_unmask(bigint, text) IS
    'The id of a value masked with the current key. EXECUTE: shard_id_masker.';
COMMENT ON FUNCTION shard_id_unmask(bigint, text, integer) IS
    'The id of a value masked with the named key. EXECUTE: shard_id_masker.';
COMMENT ON FUNCTION shard_id_mask_shortcode(bigint, text) IS
    'A URL-safe masked id: the current key''s id as one character, then the masked value''s shortcode (12 characters). EXECUTE: shard_id_masker.';
COMMENT ON FUNCTION shard_id_unmask_shortcode(text, text) IS
    'The id of a masked shortcode, with the key it names. EXECUTE: shard_id_masker.';
COMMENT ON FUNCTION shard_id_mask_keys_record() IS
    'Records the check value of every key of pg_shard_id.keys that has none (superuser); a key id whose key then differs is refused.';
COMMENT ON FUNCTION shard_id_check() IS
    'Checks the setup (preload, lease, epoch, clock, shard numbers, data floor, replication, publications, mask keys, Citus nodes); each row that is not ok says what to fix.';

-- next_shard_id_at (issue 37): ids at past times
CREATE FUNCTION next_shard_id_at("seq" regclass, "shard" integer, "ts" timestamptz) RETURNS bigint
    VOLATILE STRICT PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'next_shard_id_at_wrapper';
COMMENT ON FUNCTION next_shard_id_at(regclass, integer, timestamptz) IS
    'An id of the sequence and shard at a past time (at least 1 second ago), for history, imports and converting keys: in that millisecond or the first later one with a free remainder, equal to no id stored in a column whose DEFAULT draws from the sequence, nor to one another session holds. Needs shared_preload_libraries.';
