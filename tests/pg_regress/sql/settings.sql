-- The settings: who may change them and what they refuse.
SET TimeZone = 'UTC';
SET DateStyle = 'ISO';
SHOW pg_shard_id.epoch;
SHOW pg_shard_id.overflow;
SHOW pg_shard_id.max_sequences;

SET pg_shard_id.epoch = 'soon';
SET pg_shard_id.epoch = '2026-01-01 00:00:00';
SET pg_shard_id.epoch = '2011-01-01 00:00:00.0005+00';
SET pg_shard_id.epoch = '2999-01-01 00:00:00+00';
SET pg_shard_id.overflow = 'panic';
SET pg_shard_id.max_sequences = 10;
SET pg_shard_id.no_such_setting = 1;

-- accepted spellings of an epoch; the decoders follow it
SET pg_shard_id.epoch = '2011-01-01T00:00:00Z';
SELECT epoch, positive_until FROM pg_shard_id_info();
SELECT shard_id_extract_timestamp(11637205501278089);
SET pg_shard_id.epoch = '2010-12-31 19:00:00-05';
SELECT epoch FROM pg_shard_id_info();
RESET pg_shard_id.epoch;
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
