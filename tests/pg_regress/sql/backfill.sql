-- next_shard_id_at: ids at past times (issue 37). Every error with its SQLSTATE; ids in the
-- asked millisecond, spilling forward when it is full, never equal to a stored id.
SET TimeZone = 'UTC';
SET DateStyle = 'ISO';
CREATE SEQUENCE hist_seq;
CREATE TABLE hist (id bigint PRIMARY KEY DEFAULT next_shard_id('hist_seq', 3), created_at timestamptz);

-- the id carries the row's own time, shard and a remainder of the sequence's
INSERT INTO hist SELECT next_shard_id_at('hist_seq', 3, '2026-03-01 10:00:00.123456+00'), '2026-03-01 10:00:00.123456+00';
SELECT shard_id_extract_timestamp(id) AS ts, shard_id_extract_shard(id) AS shard FROM hist;

-- 1,030 rows asked at one millisecond: 1,024 there (one was taken above), the rest in the next
INSERT INTO hist SELECT next_shard_id_at('hist_seq', 3, '2026-03-01 10:00:00.123+00'), '2026-03-01 10:00:00.123+00'
  FROM generate_series(1, 1030);
SELECT shard_id_extract_timestamp(id) AS ts, count(*) FROM hist GROUP BY 1 ORDER BY 1;

-- rows written by hand before the draw are stepped over
INSERT INTO hist VALUES (shard_id_compose('2026-03-02+00', 3, 0), '2026-03-02'), (shard_id_compose('2026-03-02+00', 3, 1), '2026-03-02');
SELECT setval('hist_seq', 1024, false);  -- the next draw starts at remainder 0
SELECT shard_id_extract_seq(next_shard_id_at('hist_seq', 3, '2026-03-02+00')) AS remainder;

-- the errors
SELECT next_shard_id_at('hist_seq', 8192, '2026-03-01');
SELECT next_shard_id_at('hist_seq', -1, '2026-03-01');
SELECT next_shard_id_at('hist_seq', 3, '2025-12-31 23:59:59+00');
SELECT next_shard_id_at('hist_seq', 3, 'infinity');
SELECT next_shard_id_at('hist_seq', 3, '-infinity');
\set VERBOSITY terse
SELECT next_shard_id_at('hist_seq', 3, now());
SELECT next_shard_id_at('hist_seq', 3, clock_timestamp() - interval '0.5 s');
SELECT next_shard_id_at('hist_seq', 3, clock_timestamp() + interval '1 hour');
\set VERBOSITY default
-- (not a sequence: nextval's error, worded differently by PostgreSQL 18; its SQLSTATE below)
SELECT next_shard_id_at(NULL, 3, '2026-03-01') IS NULL AS strict_null;
CREATE SEQUENCE unused_seq;
SELECT next_shard_id_at('unused_seq', 3, '2026-03-01');
CREATE TABLE masked (id bigint DEFAULT shard_id_mask(next_shard_id('unused_seq', 3)));
SELECT next_shard_id_at('unused_seq', 3, '2026-03-01');

-- the SQLSTATE of each
SELECT q AS statement, sqlstate_of(q) AS sqlstate FROM (VALUES
    ('SELECT next_shard_id_at(''hist_seq'', 8192, ''2026-03-01'')'),
    ('SELECT next_shard_id_at(''hist_seq'', 3, ''2025-12-31'')'),
    ('SELECT next_shard_id_at(''hist_seq'', 3, ''infinity'')'),
    ('SELECT next_shard_id_at(''hist_seq'', 3, now())'),
    ('SELECT next_shard_id_at(''hist'', 3, ''2026-03-01'')'),
    ('SELECT next_shard_id_at(''unused_seq'', 3, ''2026-03-01'')')
) v(q);

-- privileges: the sequence's, as nextval() checks them
CREATE ROLE regress_shard_id_backfiller;
SET ROLE regress_shard_id_backfiller;
SELECT next_shard_id_at('hist_seq', 3, '2026-03-01');
RESET ROLE;
GRANT USAGE ON SEQUENCE hist_seq TO regress_shard_id_backfiller;
-- and the tables holding its ids: a role that may not read one is refused (42501), naming it,
-- before anything is locked (issue 50)
SET ROLE regress_shard_id_backfiller;
SELECT next_shard_id_at('hist_seq', 3, '2026-03-01');
SELECT sqlstate_of('SELECT next_shard_id_at(''hist_seq'', 3, ''2026-03-01'')') AS sqlstate;
RESET ROLE;
GRANT SELECT ON hist TO regress_shard_id_backfiller;
SET ROLE regress_shard_id_backfiller;
SELECT shard_id_extract_shard(next_shard_id_at('hist_seq', 3, '2026-03-01')) AS shard;
RESET ROLE;
DROP OWNED BY regress_shard_id_backfiller;
DROP ROLE regress_shard_id_backfiller;

-- labels: drawing is volatile and parallel unsafe, like nextval()
SELECT proname, provolatile, proparallel, proisstrict FROM pg_proc WHERE proname = 'next_shard_id_at';
SELECT count(*) AS rows, count(DISTINCT id) AS distinct_ids FROM hist;
DROP TABLE hist, masked;
DROP SEQUENCE hist_seq, unused_seq;
