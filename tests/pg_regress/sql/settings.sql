-- The settings: who may change them and what they refuse.
SET TimeZone = 'UTC';
SET DateStyle = 'ISO';
SHOW pg_shard_id.epoch;
SHOW pg_shard_id.overflow;
SHOW pg_shard_id.max_sequences;

-- the epoch is fixed while the server runs: no SET, ALTER DATABASE or ALTER ROLE changes it
SET pg_shard_id.epoch = '2011-01-01 00:00:00+00';
SELECT set_config('pg_shard_id.epoch', '2011-01-01 00:00:00+00', false);
ALTER DATABASE pg_shard_id_regress SET pg_shard_id.epoch = '2011-01-01 00:00:00+00';
ALTER ROLE CURRENT_USER SET pg_shard_id.epoch = '2011-01-01 00:00:00+00';
-- ALTER SYSTEM checks the value and takes effect at the next start
ALTER SYSTEM SET pg_shard_id.epoch = 'soon';
ALTER SYSTEM SET pg_shard_id.epoch = '2026-01-01 00:00:00';
ALTER SYSTEM SET pg_shard_id.epoch = '2011-01-01 00:00:00.0005+00';
-- an epoch in the future is accepted: a server that boots before its clock is set must start
-- (next_shard_id raises 22008 until the clock passes the epoch)
ALTER SYSTEM SET pg_shard_id.epoch = '2999-01-01 00:00:00+00';
-- a long value: our detail quotes its first 40 characters only
SELECT repeat('x', 200) AS long_value \gset
ALTER SYSTEM SET pg_shard_id.epoch = :'long_value';
ALTER SYSTEM SET pg_shard_id.epoch = '2011-01-01 00:00:00+00';
SHOW pg_shard_id.epoch;
ALTER SYSTEM RESET pg_shard_id.epoch;
SET pg_shard_id.overflow = 'panic';
SET pg_shard_id.max_sequences = 10;
SET pg_shard_id.no_such_setting = 1;

SELECT epoch, positive_until FROM pg_shard_id_info();
SELECT shard_id_extract_timestamp(11637205501278089);
SET pg_shard_id.overflow = borrow;
SELECT overflow FROM pg_shard_id_info();
RESET pg_shard_id.overflow;

-- settings that change ids are superuser-only
CREATE ROLE regress_shard_id_plain;
SET ROLE regress_shard_id_plain;
SET pg_shard_id.overflow = borrow;
SET pg_shard_id.epoch = '2020-01-01 00:00:00+00';
SELECT epoch, overflow FROM pg_shard_id_info();
RESET ROLE;
DROP ROLE regress_shard_id_plain;
