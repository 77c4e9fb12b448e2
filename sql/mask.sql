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
