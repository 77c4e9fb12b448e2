-- Masked public ids (docs/masking.md): FF1-AES-256 with the keys of the
-- file pg_shard_id.keys in the data directory.
-- Without a key file: a clear error, never an identity mapping.
SELECT shard_id_mask(42);
-- A key file readable by others is refused: plain COPY TO a file makes it with mode 0644.
DO $$ BEGIN
    EXECUTE format('COPY (SELECT %L) TO %L', 'current 1', current_setting('data_directory') || '/pg_shard_id.keys');
END $$;
SELECT shard_id_mask(42);
-- A superuser can write the key file from SQL as the server's OS user, owner-only, replaced
-- atomically (the program runs in the data directory).
CREATE FUNCTION mask_write_keys(VARIADIC lines text[]) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('COPY (SELECT unnest(%L::text[])) TO PROGRAM %L', lines,
                   'umask 077 && cat > pg_shard_id.keys.new && mv pg_shard_id.keys.new pg_shard_id.keys');
END $$;
SELECT mask_write_keys('# regress keys', 'key 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f', 'current 1');
-- (the same session reads the new file at its next transaction)
-- the check value of each key, recorded by a superuser; the second call records nothing new
SELECT * FROM shard_id_mask_keys_record();
SELECT key_id, recorded FROM shard_id_mask_keys_record();
SELECT status FROM shard_id_check() WHERE "check" = 'mask_keys';
SELECT shard_id_mask(42) <> 42 AS masked, shard_id_unmask(shard_id_mask(42)) AS unmasked;
SELECT shard_id_mask(11637205501278089, 'photos') AS photos, shard_id_mask(11637205501278089, 'users') AS users,
       shard_id_mask(11637205501278089, 'photos', 1) = shard_id_mask(11637205501278089, 'photos') AS key_1_is_current;
SELECT shard_id_mask_shortcode(11637205501278089, 'photos') AS code;
SELECT shard_id_unmask_shortcode(shard_id_mask_shortcode(11637205501278089, 'photos'), 'photos') AS id;
-- consecutive ids give unrelated values
SELECT shard_id_mask(g, 'photos') FROM generate_series(11637205501278089, 11637205501278091) g;
-- a generated masked column, looked up by masked value through its index
CREATE SEQUENCE mask_s;
CREATE TABLE mask_photos (
    id bigint PRIMARY KEY DEFAULT next_shard_id('mask_s', 3),
    public_id bigint GENERATED ALWAYS AS (shard_id_mask(id, 'photos', 1)) STORED UNIQUE
);
INSERT INTO mask_photos SELECT FROM generate_series(1, 1000);
ANALYZE mask_photos;
SET enable_seqscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM mask_photos WHERE public_id = 123;
SELECT count(*) AS found_by_public_id
FROM mask_photos p WHERE (SELECT q.id FROM mask_photos q WHERE q.public_id = p.public_id) = p.id;
RESET enable_seqscan;
SELECT bool_and(shard_id_unmask(public_id, 'photos', 1) = id) AS every_row_unmasks FROM mask_photos;
-- rotation: key 2 becomes current, key 1 stays to unmask what it made
SELECT shard_id_mask_shortcode(11637205501278089, 'photos') AS code_of_key_1 \gset
SELECT mask_write_keys('key 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f', 'key 2 202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f', 'current 2');
-- a rotation reaches this session at its next transaction (no reconnect); key 2 is not recorded yet
SELECT left(shard_id_mask_shortcode(1, 'photos'), 1) AS codes_now_start;
SELECT status, detail FROM shard_id_check() WHERE "check" = 'mask_keys';
SELECT key_id, recorded FROM shard_id_mask_keys_record();
SELECT shard_id_mask(11637205501278089, 'photos') <> shard_id_mask(11637205501278089, 'photos', 1) AS a_new_key,
       shard_id_unmask(shard_id_mask(11637205501278089, 'photos', 1), 'photos', 1) AS old_values_unmask;
SELECT shard_id_unmask_shortcode(:'code_of_key_1', 'photos') AS old_code, left(shard_id_mask_shortcode(1, 'photos'), 1) AS new_codes_start;
SELECT count(*) AS stored_values_still_unmask FROM mask_photos WHERE shard_id_unmask(public_id, 'photos', 1) = id;
-- errors
SELECT shard_id_mask(-1);
SELECT shard_id_unmask(5, '', 9);
SELECT shard_id_unmask_shortcode('AClX-gwU94k', 'photos');
SELECT shard_id_unmask_shortcode('ZAAAAAAAAAAA', 'photos');
-- an ordinary role may neither mask (it would find ids by trying candidates) nor unmask, nor
-- record check values; the role shard_id_masker may do both
CREATE ROLE regress_mask_app;
SET ROLE regress_mask_app;
SELECT shard_id_mask(42, 'photos');
SELECT shard_id_mask(42, 'photos', 2);
SELECT shard_id_mask_shortcode(42, 'photos');
SELECT shard_id_unmask(1, 'photos');
SELECT shard_id_unmask(1, 'photos', 2);
SELECT shard_id_unmask_shortcode('BAAAAAAAAAAA', 'photos');
SELECT * FROM shard_id_mask_keys_record();
RESET ROLE;
GRANT shard_id_masker TO regress_mask_app;
SET ROLE regress_mask_app;
SELECT shard_id_unmask(shard_id_mask(42, 'photos'), 'photos') AS unmasked_as_a_masker,
       shard_id_unmask_shortcode(shard_id_mask_shortcode(42, 'photos'), 'photos') AS from_its_code;
RESET ROLE;
-- a key id whose key is not the one recorded (a restored copy given another key file) is
-- refused, by every form, and shard_id_check() says so
SELECT mask_write_keys('key 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f', 'key 2 ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff', 'current 1');
SELECT shard_id_mask(42, 'photos', 1);
SELECT shard_id_mask(42, 'photos');
SELECT * FROM shard_id_mask_keys_record();
SELECT status, detail FROM shard_id_check() WHERE "check" = 'mask_keys';
-- a symbolic link is not followed (nor is a file another OS user owns: tests/mask)
SELECT mask_write_keys('key 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f', 'key 2 202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f', 'current 2');
COPY (SELECT) TO PROGRAM 'cat >/dev/null; mv pg_shard_id.keys pg_shard_id.keys.real && ln -s pg_shard_id.keys.real pg_shard_id.keys';
SELECT shard_id_mask(42, 'photos');
SELECT status, detail FROM shard_id_check() WHERE "check" = 'mask_keys';
COPY (SELECT) TO PROGRAM 'cat >/dev/null; mv -f pg_shard_id.keys.real pg_shard_id.keys';
SELECT shard_id_mask(42, 'photos') = shard_id_mask(42, 'photos', 2) AS key_2_again;
-- an invalid key file: a clear error naming the line
SELECT mask_write_keys('key 1 not-hex', 'current 1');
\c
SELECT shard_id_mask(42);
SELECT mask_write_keys('key 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f', 'key 1 202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f', 'current 1');
\c
SELECT shard_id_mask(42);
SELECT mask_write_keys('key 1 000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f');
\c
SELECT shard_id_mask(42);
DROP TABLE mask_photos;
DROP FUNCTION mask_write_keys(text[]);
DROP SEQUENCE mask_s;
REVOKE shard_id_masker FROM regress_mask_app;
DROP ROLE regress_mask_app;
DELETE FROM _pg_shard_id.mask_keys;
