-- The 30-second example from the README, and what a user sees of the decode functions.
SET TimeZone = 'UTC';
SET DateStyle = 'ISO';
SELECT epoch, positive_until, overflow, guard FROM pg_shard_id_info();

CREATE SEQUENCE photos_id_seq;
CREATE TABLE photos (
    id  bigint PRIMARY KEY DEFAULT next_shard_id('photos_id_seq', 5),
    url text
);
CREATE TEMP TABLE t AS SELECT clock_timestamp() AS before;
INSERT INTO photos (url) SELECT 'https://example.com/' || g FROM generate_series(1, 3000) g;

-- every row: shard 5, seq = nextval % 1024, a timestamp inside the statement (wait: to 1 ms)
SELECT count(*) AS rows,
       count(DISTINCT id) AS distinct_ids,
       bool_and(shard_id_extract_shard(id) = 5) AS all_shard_5,
       bool_and(shard_id_extract_seq(id) = (substr(url, 21)::int % 1024)) AS seq_is_nextval_mod_1024,
       bool_and(shard_id_extract_timestamp(id) BETWEEN date_trunc('milliseconds', t.before) AND clock_timestamp() + interval '1 ms') AS ts_in_statement
  FROM photos, t
 GROUP BY t.before;

-- COPY fills the DEFAULT too
COPY photos (url) FROM STDIN;
https://example.com/copied/1
https://example.com/copied/2
\.
SELECT count(*) AS copied, bool_and(shard_id_extract_shard(id) = 5) AS all_shard_5,
       count(DISTINCT id) AS distinct_ids
  FROM photos WHERE url LIKE '%/copied/%';

-- decode is the exact inverse of compose
SELECT d.* FROM photos, shard_id_decode(id) d WHERE false;
SELECT count(*) AS round_trip_failures
  FROM photos, shard_id_decode(id) d
 WHERE shard_id_compose(d.ts, d.shard, d.seq) <> id;

-- Instagram's worked example, with its epoch passed explicitly (IMMUTABLE overloads)
SELECT shard_id_compose('2011-01-17 01:21:03+00', 31341 % 2000, 5001 % 1024, '2011-01-01 00:00:00+00') AS instagram_id;
SELECT * FROM shard_id_decode(11637205501278089, '2011-01-01 00:00:00+00');
SELECT shard_id_extract_shard(11637205501278089) AS shard, shard_id_extract_seq(11637205501278089) AS seq;

-- fixed values with the default epoch
SELECT shard_id_compose('2026-01-01 00:00:00+00', 0, 0) AS first_id,
       shard_id_compose('2026-01-01 00:00:00.001+00', 0, 0) AS one_ms_later,
       shard_id_compose('2026-01-01 00:00:00.0019+00', 8191, 1023) AS rounded_down,
       shard_id_compose('2060-11-03 19:53:47.775+00', 8191, 1023) AS last_id;
SELECT shard_id_lower_bound('2026-01-01 00:00:00.0011+00') AS rounds_up,
       shard_id_lower_bound('2025-06-01 00:00:00+00') AS before_epoch_is_zero;

-- the primary key doubles as a time index
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF)
SELECT * FROM photos
 WHERE id >= shard_id_lower_bound('2026-11-01 00:00:00+00')
   AND id <  shard_id_lower_bound('2026-11-02 00:00:00+00');
RESET enable_seqscan;
RESET enable_bitmapscan;
SELECT count(*) AS rows_made_since_before_incl_copied
  FROM photos, t
 WHERE id >= shard_id_lower_bound(date_trunc('milliseconds', t.before));
