-- The data floor: a sequence's first id (since start-up, or since its guard slot was reused) starts
-- above the newest id already stored in every column whose DEFAULT draws from it, as after a
-- logical switchover, a partial dump or COPY from another server (README, guarantee 9).
CREATE SEQUENCE df_s;
CREATE TABLE df_photos (id bigint PRIMARY KEY DEFAULT next_shard_id('df_s', 4), n int);
-- rows copied in before this server drew from df_s: their newest id is an hour ahead
INSERT INTO df_photos VALUES (shard_id_compose(now() + interval '1 hour', 4, 0), 0),
                             (shard_id_compose(now() + interval '1 minute', 4, 1), 0);
INSERT INTO df_photos (n) SELECT g FROM generate_series(1, 3000) g;
SELECT count(*) FILTER (WHERE n > 0) = 3000 AS all_new,
       min(id) FILTER (WHERE n > 0) > max(id) FILTER (WHERE n = 0) AS above_the_copied_rows,
       shard_id_extract_timestamp(min(id) FILTER (WHERE n > 0))
         - shard_id_extract_timestamp(max(id) FILTER (WHERE n = 0)) BETWEEN interval '0' AND interval '1 s'
         AS right_above_them
FROM df_photos;
-- a partitioned table: every partition's newest id counts, whichever partition holds it
CREATE SEQUENCE df_p_s;
CREATE TABLE df_events (id bigint DEFAULT next_shard_id('df_p_s', 5), k int) PARTITION BY LIST (k);
CREATE TABLE df_events_1 PARTITION OF df_events FOR VALUES IN (1);
CREATE TABLE df_events_2 PARTITION OF df_events FOR VALUES IN (2);
CREATE INDEX ON df_events (id);
INSERT INTO df_events VALUES (shard_id_compose(now() + interval '2 hours', 5, 9), 2);
INSERT INTO df_events (k) SELECT 1 FROM generate_series(1, 100);
SELECT (SELECT min(id) FROM df_events_1) > (SELECT max(id) FROM df_events_2) AS above_the_other_partition;
-- a column with rows and no index: the data cannot tell, so ids start 10 minutes ahead
CREATE SEQUENCE df_plain_s;
CREATE TABLE df_plain (id bigint DEFAULT next_shard_id('df_plain_s', 6));
INSERT INTO df_plain VALUES (shard_id_compose(now(), 6, 0));
INSERT INTO df_plain DEFAULT VALUES;
SELECT shard_id_extract_timestamp(max(id)) > now() + interval '9 minutes' AS ten_minutes_ahead FROM df_plain;
SELECT "check", status, detail ~ 'df_plain.id' AS names_the_column
FROM shard_id_check() WHERE "check" = 'data_floor';
CREATE INDEX ON df_plain (id);
SELECT "check", status FROM shard_id_check() WHERE "check" = 'data_floor';
-- a role that may only insert (no SELECT, row security on) still gets ids above every row
CREATE SEQUENCE df_rls_s;
CREATE TABLE df_rls (id bigint PRIMARY KEY DEFAULT next_shard_id('df_rls_s', 7), owner name DEFAULT current_user);
INSERT INTO df_rls (id, owner) VALUES (shard_id_compose(now() + interval '30 minutes', 7, 0), 'someone_else');
ALTER TABLE df_rls ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_rows ON df_rls USING (owner = current_user);
CREATE ROLE regress_df_writer;
GRANT INSERT ON df_rls TO regress_df_writer;
GRANT USAGE ON SEQUENCE df_rls_s TO regress_df_writer;
SET ROLE regress_df_writer;
INSERT INTO df_rls DEFAULT VALUES;
RESET ROLE;
SELECT min(id) FILTER (WHERE owner = 'regress_df_writer') > max(id) FILTER (WHERE owner = 'someone_else') AS above_rows_it_cannot_see
FROM df_rls;
-- rows loaded into a table whose sequence is already issuing: shard_id_resync() reads them again
INSERT INTO df_photos VALUES (shard_id_compose(now() + interval '3 hours', 4, 0), -1);
SELECT shard_id_resync('df_photos'::regclass);
SELECT shard_id_resync('df_s') - shard_id_extract_timestamp((SELECT id FROM df_photos WHERE n = -1)) AS floor_above_the_loaded_row;
INSERT INTO df_photos (n) VALUES (5000);
SELECT (SELECT id FROM df_photos WHERE n = 5000) > (SELECT id FROM df_photos WHERE n = -1) AS above_the_loaded_row;
SET ROLE regress_df_writer;
SELECT shard_id_resync('df_rls_s');
RESET ROLE;
-- DEFAULTs of other kinds are not counted as next_shard_id DEFAULTs
SELECT detail ~ ('^' || (SELECT count(*) FROM pg_attrdef
                           WHERE pg_get_expr(adbin, adrelid) ~ 'next_shard_id\(''.*''::regclass, \d+\)')
                  || ' next_shard_id DEFAULTs') AS counted_exactly
FROM shard_id_check() WHERE "check" = 'shard_numbers';
DROP TABLE df_photos, df_events, df_plain, df_rls;
DROP SEQUENCE df_s, df_p_s, df_plain_s, df_rls_s;
DROP ROLE regress_df_writer;
