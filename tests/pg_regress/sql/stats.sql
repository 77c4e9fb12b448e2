-- pg_shard_id_stats: the guard's counts per sequence; pg_shard_id_stats_reset(); shard_id_check()
CREATE SEQUENCE stats_seq;
CREATE TABLE stats_t (id bigint PRIMARY KEY DEFAULT next_shard_id('stats_seq', 9), n int);
INSERT INTO stats_t (n) SELECT g FROM generate_series(1, 100) g;
-- 100 ids, no millisecond used up (100 remainders), no wait, no clock step
SELECT sequence, ids, exhausted_ms, waits, wait_seconds, clock_steps, lead_ms >= 0 AS lead_ok,
       last_issued >= (SELECT shard_id_extract_timestamp(max(id)) FROM stats_t) AS last_issued_ok,
       datname = current_database() AS this_database
  FROM pg_shard_id_stats WHERE sequence = 'stats_seq'::regclass;
SELECT pg_shard_id_stats_reset();
SELECT ids FROM pg_shard_id_stats WHERE sequence = 'stats_seq'::regclass;
-- resetting needs EXECUTE, which PUBLIC does not have; reading does not
CREATE ROLE stats_role;
SET ROLE stats_role;
SELECT pg_shard_id_stats_reset();
SELECT count(*) > 0 AS readable FROM pg_shard_id_stats;
RESET ROLE;
DROP ROLE stats_role;
-- the checks, in order, and their states here (one server, preloaded, a sane clock)
SELECT "check", status FROM shard_id_check() WHERE "check" IN ('preload', 'epoch', 'shard_numbers', 'citus');
-- a second sequence with shard 9: named, with the fix
CREATE SEQUENCE stats_seq2;
CREATE TABLE stats_t2 (id bigint DEFAULT next_shard_id('stats_seq2', 9));
SELECT status, detail FROM shard_id_check() WHERE "check" = 'shard_numbers';
DROP TABLE stats_t2;
-- in a database without the extension there is no view
\c postgres
SELECT * FROM pg_shard_id_stats;
