-- Every function keeps working after the extension's schema is renamed (nothing resolves the
-- extension's functions by schema name at run time).
CREATE DATABASE regress_shard_id_rename;
\c regress_shard_id_rename
SET client_min_messages = warning;
SET TimeZone = 'UTC';
SET DateStyle = 'ISO';
CREATE SCHEMA ext;
CREATE EXTENSION pg_shard_id SCHEMA ext;
CREATE SEQUENCE s;
CREATE TABLE t (id bigint PRIMARY KEY DEFAULT ext.next_shard_id('s', 3), v text);
ALTER SCHEMA ext RENAME TO ext_renamed;

INSERT INTO t (v) VALUES ('a'), ('b');
SELECT count(*) AS rows, bool_and(ext_renamed.shard_id_extract_shard(id) = 3) AS shard_3 FROM t;
SELECT d.shard, d.seq FROM t, ext_renamed.shard_id_decode(id) d ORDER BY id;
SELECT * FROM ext_renamed.shard_id_decode(11637205501278089, '2011-01-01 00:00:00+00');
SELECT * FROM ext_renamed.shard_id_partition_bounds('2026-01-01+00', '2026-03-01+00', '1 month');
SELECT ext_renamed.shard_id_compose('2026-01-01 00:00:00.001+00', 1, 2) AS composed,
       ext_renamed.shard_id_lower_bound('2026-01-01 00:00:00.001+00') AS lower_bound,
       ext_renamed.shard_id_extract_timestamp(8388608) AS ts,
       ext_renamed.shard_id_extract_timestamp(8388608, '2026-01-01+00') AS ts_epoch,
       ext_renamed.shard_id_extract_seq(1023) AS seq;
SELECT ext_renamed.shard_id_shard_for(31341, 2000) AS int_key,
       ext_renamed.shard_id_shard_for('alice@example.com', 2000) AS text_key,
       ext_renamed.shard_id_from_shortcode(ext_renamed.shard_id_to_shortcode(42)) AS shortcode_round_trip;
SELECT guard FROM ext_renamed.pg_shard_id_info();
SELECT ext_renamed.shard_id_to_jsonb(t) ->> 'v' AS v, jsonb_typeof(ext_renamed.shard_id_to_jsonb(t) -> 'id') AS id_type
  FROM t ORDER BY id LIMIT 1;
CREATE TABLE old (id bigserial PRIMARY KEY);
SELECT ext_renamed.shard_id_adopt('old', 'id', 4);
INSERT INTO old DEFAULT VALUES RETURNING ext_renamed.shard_id_extract_shard(id) AS shard;

\c pg_shard_id_regress
DROP DATABASE regress_shard_id_rename;
