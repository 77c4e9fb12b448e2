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
INSERT INTO df_events VALUES (shard_id_compose(now() + interval '40 minutes', 5, 9), 2);
INSERT INTO df_events (k) SELECT 1 FROM generate_series(1, 100);
SELECT (SELECT min(id) FROM df_events_1) > (SELECT max(id) FROM df_events_2) AS above_the_other_partition;
-- a table partitioned by range on the id (days by shard_id_partition_bounds, until today; today's
-- ids in the default partition): its leaves are read from the newest down, the default one
-- always, and the first id is above the newest stored, with no lock kept on the parent
CREATE SEQUENCE df_days_s;
CREATE TABLE df_days (id bigint PRIMARY KEY DEFAULT next_shard_id('df_days_s', 5), n int) PARTITION BY RANGE (id);
DO $$ DECLARE r record; k int := 0; BEGIN
    FOR r IN SELECT * FROM shard_id_partition_bounds(date_trunc('day', now()) - interval '3 days', date_trunc('day', now()), '1 day') LOOP
        EXECUTE format('CREATE TABLE df_days_%s PARTITION OF df_days FOR VALUES FROM (%s) TO (%s)', k, r.lower, r.upper);
        k := k + 1;
    END LOOP; END $$;
CREATE TABLE df_days_other PARTITION OF df_days DEFAULT;
INSERT INTO df_days VALUES (shard_id_compose(now() - interval '2 days', 5, 1), 0),
                           (shard_id_compose(now() + interval '40 minutes', 5, 2), 0);
BEGIN;
SELECT next_shard_id('df_days_s', 5) > 0 AS issued;
SELECT count(*) AS locks_kept FROM pg_locks WHERE pid = pg_backend_pid() AND relation = 'df_days'::regclass;
COMMIT;
INSERT INTO df_days (n) VALUES (1);
SELECT min(id) FILTER (WHERE n = 1) > max(id) FILTER (WHERE n = 0) AS above_the_default_partition FROM df_days;
DROP TABLE df_days;
DROP SEQUENCE df_days_s;
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
INSERT INTO df_photos VALUES (shard_id_compose(now() + interval '65 minutes', 4, 0), -1);
SELECT shard_id_resync('df_photos'::regclass);
SELECT shard_id_resync('df_s') - shard_id_extract_timestamp((SELECT id FROM df_photos WHERE n = -1)) AS floor_above_the_loaded_row;
INSERT INTO df_photos (n) VALUES (5000);
SELECT (SELECT id FROM df_photos WHERE n = 5000) > (SELECT id FROM df_photos WHERE n = -1) AS above_the_loaded_row;
SET ROLE regress_df_writer;
SELECT shard_id_resync('df_rls_s');
RESET ROLE;
-- an id no guard could have made (hand-written, far in the future) is not taken as a floor: one
-- row must not move every new id decades ahead; a WARNING names it, shard_id_check() too
CREATE SEQUENCE df_far_s;
CREATE TABLE df_far (id bigint PRIMARY KEY DEFAULT next_shard_id('df_far_s', 8));
-- 1,024 copied rows 30 minutes ahead, and above them one row no guard could have made: the
-- floor is the newest plausible id (a second, bounded read of the index), not the column's max
INSERT INTO df_far SELECT shard_id_compose(now() + interval '30 minutes', 8, g) FROM generate_series(0, 1023) g;
INSERT INTO df_far VALUES (9223372036854775807);
INSERT INTO df_far DEFAULT VALUES;
SELECT min(id) FILTER (WHERE shard_id_extract_timestamp(id) > now() + interval '31 minutes')
         > (SELECT max(id) FROM df_far WHERE id < 9223372036854775807 AND shard_id_extract_timestamp(id) < now() + interval '31 minutes')
       AS above_the_plausible_rows,
       shard_id_extract_timestamp(max(id) FILTER (WHERE id < 9223372036854775807)) < now() + interval '31 minutes' AS not_decades
FROM df_far WHERE id NOT IN (SELECT shard_id_compose(now() + interval '30 minutes', 8, g) FROM generate_series(0, 1023) g);
SELECT status, detail ~ 'df_far.id \(9223372036854775807\)' AS names_it FROM shard_id_check() WHERE "check" = 'data_floor';
-- a role that may not read df_far (no grant, or row security that shows it no row) learns that a
-- row is too far ahead, never the row's id; with SELECT and no row security it sees the id
CREATE ROLE regress_df_reader;
SET ROLE regress_df_reader;
SELECT status, detail ~ 'df_far.id' AS names_the_column, detail ~ '9223372036854775807' AS shows_the_id
FROM shard_id_check() WHERE "check" = 'data_floor';
RESET ROLE;
GRANT SELECT ON df_far TO regress_df_reader;
ALTER TABLE df_far ENABLE ROW LEVEL SECURITY;
SET ROLE regress_df_reader;
SELECT status, detail ~ '9223372036854775807' AS shows_the_id FROM shard_id_check() WHERE "check" = 'data_floor';
-- with row_security off, the role's SELECT on df_far fails instead of filtering: still not shown
SET row_security = off;
SELECT status, detail ~ '9223372036854775807' AS shows_the_id FROM shard_id_check() WHERE "check" = 'data_floor';
RESET row_security;
RESET ROLE;
ALTER TABLE df_far DISABLE ROW LEVEL SECURITY;
SET ROLE regress_df_reader;
SELECT status, detail ~ '9223372036854775807' AS shows_the_id FROM shard_id_check() WHERE "check" = 'data_floor';
RESET ROLE;
REVOKE SELECT ON df_far FROM regress_df_reader;
DROP ROLE regress_df_reader;
DELETE FROM df_far WHERE id = 9223372036854775807;
-- a DEFAULT that is not the call itself (a wrapper, a cast, shard_id_mask): what it stores is
-- not the id as issued, and may still repeat it (a masked id repeats when the id does), so the
-- column counts as "cannot tell": ids start 10 minutes ahead, and shard_id_check() names it
CREATE SEQUENCE df_wrapped_s;
CREATE TABLE df_wrapped (id bigint PRIMARY KEY DEFAULT abs(next_shard_id('df_wrapped_s', 9)));
INSERT INTO df_wrapped VALUES (shard_id_compose(now() + interval '5 minutes', 9, 0));
SELECT shard_id_extract_timestamp(next_shard_id('df_wrapped_s', 9)) > now() + interval '9 minutes' AS ten_minutes_ahead;
SELECT detail ~ 'df_wrapped.id \(its DEFAULT is not the plain next_shard_id call\)' AS names_it_and_why
FROM shard_id_check() WHERE "check" = 'data_floor';
-- every shape of DEFAULT that draws from the sequence is seen: a domain's default (at any depth),
-- a numeric or text column (a cast around the call), coalesce(...), a sequence named by text
-- (no dependency on it: counts for every sequence). Copied rows 30 to 34 minutes ahead.
CREATE SEQUENCE df_shape_s;
CREATE DOMAIN df_sid AS bigint DEFAULT next_shard_id('df_shape_s', 13);
CREATE DOMAIN df_sid_over AS df_sid;
CREATE TABLE df_dom (id df_sid PRIMARY KEY);
CREATE TABLE df_dom_over (id df_sid_over PRIMARY KEY);
CREATE TABLE df_late (id bigint PRIMARY KEY DEFAULT next_shard_id('df_shape_s'::text, 13));
SELECT shard_id_resync('df_shape_s');  -- a guard that has read its (empty) floor
INSERT INTO df_dom VALUES (shard_id_compose(now() + interval '30 minutes', 13, 0));
SELECT shard_id_resync('df_shape_s') - now() > interval '29 minutes' AS domain_default_seen;
INSERT INTO df_dom_over VALUES (shard_id_compose(now() + interval '31 minutes', 13, 0));
SELECT shard_id_resync('df_shape_s') - now() > interval '30 minutes' AS domain_over_domain_seen;
INSERT INTO df_late VALUES (shard_id_compose(now() + interval '32 minutes', 13, 0));
SELECT shard_id_resync('df_shape_s') - now() > interval '31 minutes' AS late_bound_seen;
INSERT INTO df_dom DEFAULT VALUES;
INSERT INTO df_late DEFAULT VALUES;
SELECT (SELECT max(id) FROM df_dom) > (SELECT min(id) FROM df_late) AS new_ids_above_every_copied_row;
CREATE TABLE df_num (id numeric PRIMARY KEY DEFAULT next_shard_id('df_shape_s', 13));
CREATE TABLE df_coalesce (id bigint PRIMARY KEY DEFAULT coalesce(next_shard_id('df_shape_s', 13), 0));
INSERT INTO df_num VALUES (shard_id_compose(now() + interval '33 minutes', 13, 0));
SELECT shard_id_resync('df_shape_s') - now() > interval '9 minutes' AS numeric_column_jumps;
SELECT detail ~ 'df_num.id \(its DEFAULT is not the plain' AS numeric_named,
       detail ~ 'df_coalesce.id' AS empty_table_not_named
FROM shard_id_check() WHERE "check" = 'data_floor';
-- a DEFAULT that calls the user's own function that calls next_shard_id (a string body in SQL or
-- PL/pgSQL, or a SQL-standard body): counted, as "cannot tell" (ids 10 minutes ahead)
CREATE SEQUENCE df_own_s;
CREATE FUNCTION df_new_id() RETURNS bigint LANGUAGE sql VOLATILE AS $$SELECT next_shard_id('df_own_s', 16)$$;
CREATE FUNCTION df_new_id_pl() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$BEGIN RETURN next_shard_id('df_own_s', 16); END$$;
CREATE FUNCTION df_new_id_std() RETURNS bigint LANGUAGE sql VOLATILE RETURN next_shard_id('df_own_s', 16);
CREATE TABLE df_own (id bigint PRIMARY KEY DEFAULT df_new_id());
CREATE TABLE df_own_pl (id bigint PRIMARY KEY DEFAULT df_new_id_pl());
CREATE TABLE df_own_std (id bigint PRIMARY KEY DEFAULT df_new_id_std());
INSERT INTO df_own VALUES (shard_id_compose(now() + interval '5 minutes', 16, 0));
SELECT shard_id_resync('df_own_s') - now() > interval '9 minutes' AS sql_function_seen;
TRUNCATE df_own;
INSERT INTO df_own_pl VALUES (shard_id_compose(now() + interval '5 minutes', 16, 0));
SELECT shard_id_resync('df_own_s') - now() > interval '9 minutes' AS plpgsql_function_seen;
TRUNCATE df_own_pl;
INSERT INTO df_own_std VALUES (shard_id_compose(now() + interval '5 minutes', 16, 0));
SELECT shard_id_resync('df_own_s') - now() > interval '9 minutes' AS sql_standard_function_seen;
SELECT detail ~ 'df_own_std.id \(its DEFAULT is not the plain' AS named FROM shard_id_check() WHERE "check" = 'data_floor';
DROP TABLE df_own, df_own_pl, df_own_std;
DROP FUNCTION df_new_id(), df_new_id_pl(), df_new_id_std();
DROP SEQUENCE df_own_s;
DROP TABLE df_dom, df_dom_over, df_late, df_num, df_coalesce;
DROP DOMAIN df_sid_over, df_sid;
DROP SEQUENCE df_shape_s;
-- a role that may not draw from a sequence cannot move its floor with a table of its own
CREATE SEQUENCE df_victim_s;
CREATE TABLE df_victim (id bigint PRIMARY KEY DEFAULT next_shard_id('df_victim_s', 14));
CREATE ROLE regress_df_mallory;
CREATE SCHEMA df_m AUTHORIZATION regress_df_mallory;
SET ROLE regress_df_mallory;
CREATE TABLE df_m.t (id bigint PRIMARY KEY DEFAULT next_shard_id('public.df_victim_s', 14));
INSERT INTO df_m.t VALUES (shard_id_compose(now() + interval '65 minutes', 14, 0));
RESET ROLE;
INSERT INTO df_victim DEFAULT VALUES;
SELECT shard_id_extract_timestamp(id) < now() + interval '2 s' AS not_moved FROM df_victim;
-- but new ids can repeat its rows: shard_id_check() names it, with the fix
SELECT status, detail ~ 'df_m\.t\.id \(sequence public\.df_victim_s\) hold rows in a table whose owner may not draw' AS named,
       detail ~ 'GRANT USAGE' AS fix_given
  FROM shard_id_check() WHERE "check" = 'data_floor';
-- with USAGE on the sequence, the role's table counts
GRANT USAGE ON SEQUENCE df_victim_s TO regress_df_mallory;
SELECT shard_id_resync('df_victim_s') > now() + interval '64 minutes' AS counted_with_usage;
SELECT detail !~ 'owner may not draw' AS no_longer_named FROM shard_id_check() WHERE "check" = 'data_floor';
DROP SCHEMA df_m CASCADE;
DROP TABLE df_victim;
DROP SEQUENCE df_victim_s;
DROP ROLE regress_df_mallory;
-- a view with a DEFAULT: never "empty" (its rows are elsewhere), so ids start 10 minutes ahead
CREATE SEQUENCE df_view_s;
CREATE TABLE df_base (id bigint, n int);
CREATE VIEW df_view AS SELECT * FROM df_base;
ALTER VIEW df_view ALTER COLUMN id SET DEFAULT next_shard_id('df_view_s', 10);
INSERT INTO df_view (n) VALUES (1);
SELECT shard_id_extract_timestamp(id) > now() + interval '9 minutes' AS ten_minutes_ahead FROM df_base;
-- the first id releases the locks it took to read the rows (no lock on every partition until commit)
CREATE SEQUENCE df_lock_s;
CREATE TABLE df_lock (id bigint PRIMARY KEY DEFAULT next_shard_id('df_lock_s', 11));
INSERT INTO df_lock VALUES (shard_id_compose(now(), 11, 0));
BEGIN;
SELECT next_shard_id('df_lock_s', 11) > 0 AS issued;
SELECT count(*) AS locks_kept FROM pg_locks
 WHERE pid = pg_backend_pid() AND relation IN ('df_lock'::regclass, 'df_lock_pkey'::regclass);
COMMIT;
DROP VIEW df_view;
DROP TABLE df_far, df_wrapped, df_base, df_lock;
DROP SEQUENCE df_far_s, df_wrapped_s, df_view_s, df_lock_s;
-- a search_path that puts a planted = before pg_catalog's does not change what the first id reads
-- (the guard it settles is every session's)
CREATE SCHEMA df_evil;
CREATE FUNCTION df_evil.never(oid, oid) RETURNS boolean LANGUAGE sql AS 'SELECT false';
CREATE OPERATOR df_evil.= (LEFTARG = oid, RIGHTARG = oid, FUNCTION = df_evil.never);
CREATE SEQUENCE df_path_s;
CREATE TABLE df_path (id bigint PRIMARY KEY DEFAULT next_shard_id('df_path_s', 12));
INSERT INTO df_path VALUES (shard_id_compose(now() + interval '20 minutes', 12, 0));
SET search_path = df_evil, pg_catalog, public;
SELECT next_shard_id('df_path_s', 12) > (SELECT max(id) FROM df_path) AS above_the_row;
RESET search_path;
DROP TABLE df_path;
DROP SEQUENCE df_path_s;
DROP SCHEMA df_evil CASCADE;
-- shard numbers are read from every DEFAULT the data floor sees, a domain's too: one shard
-- number with two sequences is named, whatever the shape
CREATE SEQUENCE df_sn_a;
CREATE SEQUENCE df_sn_b;
CREATE DOMAIN df_sn_dom AS bigint DEFAULT next_shard_id('df_sn_a', 8190);
CREATE TABLE df_sn_1 (id df_sn_dom);
CREATE TABLE df_sn_2 (id bigint DEFAULT next_shard_id('df_sn_b', 8190));
SELECT status, detail ~ 'shard 8190: public.df_sn_1.id \(df_sn_a\); public.df_sn_2.id \(df_sn_b\)' AS names_both
FROM shard_id_check() WHERE "check" = 'shard_numbers';
DROP TABLE df_sn_1, df_sn_2;
DROP DOMAIN df_sn_dom;
DROP SEQUENCE df_sn_a, df_sn_b;
-- a child table with a DEFAULT of its own (another sequence) under a parent's: its rows are the
-- other sequence's, so they never count as "stored ids above where the parent's sequence issues"
CREATE SEQUENCE df_pa_s;
CREATE SEQUENCE df_ch_s;
CREATE TABLE df_pa (id bigint DEFAULT next_shard_id('df_pa_s', 17));
CREATE INDEX ON df_pa (id);
CREATE TABLE df_ch (id bigint DEFAULT next_shard_id('df_ch_s', 17)) INHERITS (df_pa);
CREATE INDEX ON df_ch (id);
INSERT INTO df_pa DEFAULT VALUES;
INSERT INTO df_ch VALUES (shard_id_compose(now() + interval '1 minute', 17, 0));
SELECT status <> 'failed' AS not_failed, detail ~ 'holds ids up to' AS above_named
FROM shard_id_check() WHERE "check" = 'data_floor';
DROP TABLE df_ch, df_pa;
DROP SEQUENCE df_pa_s, df_ch_s;
-- rows loaded into a live table: the check fails and names the resync, with the stored ids'
-- time only for a caller who may read the table
CREATE SEQUENCE df_ab_s;
CREATE TABLE df_ab (id bigint PRIMARY KEY DEFAULT next_shard_id('df_ab_s', 18));
INSERT INTO df_ab DEFAULT VALUES;
INSERT INTO df_ab VALUES (shard_id_compose(now() + interval '1 minute', 18, 0));
SELECT status, detail ~ 'public\.df_ab\.id holds ids up to \d{4}-' AS time_shown
FROM shard_id_check() WHERE "check" = 'data_floor';
CREATE ROLE regress_df_reader;
SET ROLE regress_df_reader;
SELECT status, detail ~ 'public\.df_ab\.id holds ids above where sequence df_ab_s issues' AS named,
       detail !~ 'df_ab\.id holds ids up to' AS time_hidden
FROM shard_id_check() WHERE "check" = 'data_floor';
RESET ROLE;
DROP ROLE regress_df_reader;
DROP TABLE df_ab;
DROP SEQUENCE df_ab_s;
DROP TABLE df_photos, df_events, df_plain, df_rls;
DROP SEQUENCE df_s, df_p_s, df_plain_s, df_rls_s;
DROP ROLE regress_df_writer;
