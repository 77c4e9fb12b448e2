-- PostgreSQL 18 words nextval's "not a sequence" error differently (same SQLSTATE 42809); errors_1.out is its expected output.
-- Every bad input: a clear message, a hint, a proper SQLSTATE, and nothing written.
SET TimeZone = 'UTC';
SET DateStyle = 'ISO';
CREATE SEQUENCE err_seq;
CREATE TABLE err_t (id bigint PRIMARY KEY DEFAULT next_shard_id('err_seq', 9000), v text);
CREATE TABLE not_a_sequence (x int);

SELECT next_shard_id('err_seq', 8192);
SELECT next_shard_id('err_seq', -1);
INSERT INTO err_t (v) VALUES ('never stored');
SELECT next_shard_id('not_a_sequence', 1);
SELECT next_shard_id('no_such_sequence', 1);
SELECT next_shard_id(NULL, 1) IS NULL AS strict_null;
INSERT INTO err_t (id, v) VALUES (next_shard_id(NULL, 1), 'null id');
SELECT shard_id_extract_timestamp(-1);
SELECT shard_id_decode(-42);
SELECT shard_id_compose(now(), 0, 1024);
SELECT shard_id_compose('2025-12-31 23:59:59+00', 0, 0);
SELECT shard_id_compose('2060-11-03 19:53:47.776+00', 0, 0);
SELECT shard_id_lower_bound('infinity');
SELECT shard_id_extract_timestamp(1, '2011-01-01 00:00:00.0001+00');

-- nothing was drawn from the sequence, nothing was written
SELECT is_called AS sequence_touched FROM err_seq;
SELECT count(*) AS rows_written FROM err_t;

-- the SQLSTATE of each (sqlstate_of: setup.sql)
SELECT q AS statement, sqlstate_of(q) AS sqlstate FROM (VALUES
    ('SELECT next_shard_id(''err_seq'', 8192)'),
    ('SELECT next_shard_id(''not_a_sequence'', 1)'),
    ('SELECT shard_id_extract_shard(-1)'),
    ('SELECT shard_id_compose(now(), 0, 1024)'),
    ('SELECT shard_id_compose(''2025-12-31 23:59:59+00'', 0, 0)'),
    ('SELECT shard_id_extract_timestamp(1, ''infinity'')'),
    ('SET pg_shard_id.epoch = ''2026-01-01'''),
    ('SELECT shard_id_from_shortcode(repeat(''x'', 1000000))'),
    ('SELECT * FROM shard_id_partition_bounds(''2026-01-01+00'', ''2026-06-01+00'', ''1 mon -28 days'')')
) v(q);

-- missing privileges: the same check nextval() makes
ALTER TABLE err_t ALTER id SET DEFAULT next_shard_id('err_seq', 1);
CREATE ROLE regress_shard_id_nobody;
GRANT SELECT, INSERT ON err_t TO regress_shard_id_nobody;
SET ROLE regress_shard_id_nobody;
SELECT next_shard_id('err_seq', 1);
INSERT INTO err_t (v) VALUES ('no usage on the sequence');
RESET ROLE;
GRANT USAGE ON SEQUENCE err_seq TO regress_shard_id_nobody;
SET ROLE regress_shard_id_nobody;
INSERT INTO err_t (v) VALUES ('allowed now');
SELECT shard_id_extract_shard(id) AS shard, v FROM err_t;
RESET ROLE;
DROP OWNED BY regress_shard_id_nobody;
DROP ROLE regress_shard_id_nobody;

-- next_shard_id(seq) needs a node number: pg_shard_id.node (server configuration only) or Citus
SELECT last_value, is_called FROM err_seq;
SELECT next_shard_id('err_seq');
SET pg_shard_id.node = 3;
SELECT set_config('pg_shard_id.node', '3', false);
SHOW pg_shard_id.node;
SELECT last_value, is_called FROM err_seq;
