-- shard_id_convert's refusals (issues 37, 49): each with its SQLSTATE, before anything is
-- changed; the plan. The conversion itself, under traffic, killed and resumed, with every kind of
-- object on the key, is tests/guarantee/test_convert.py and test_convert_schema.py.
SET TimeZone = 'UTC';
SET client_min_messages = notice;
\set SHOW_CONTEXT never
CREATE SEQUENCE conv_seq;
CREATE TABLE conv_nopk (created_at timestamptz);
CREATE TABLE conv_text (id bigserial PRIMARY KEY, created_at text);
CREATE TABLE conv_ok (id bigserial PRIMARY KEY, created_at timestamptz, note text);
INSERT INTO conv_ok (created_at) VALUES ('2026-02-01'), (NULL), ('2025-06-01'), (now() + interval '1 day');
CREATE TABLE conv_two (a int, b int, created_at timestamptz, PRIMARY KEY (a, b));
CREATE TABLE conv_pair (id bigserial PRIMARY KEY, tenant int, created_at timestamptz, UNIQUE (id, tenant));
CREATE TABLE conv_pair_ref (id bigint, tenant int, FOREIGN KEY (id, tenant) REFERENCES conv_pair (id, tenant));

CALL shard_id_convert_prepare(NULL, 'created_at', 'conv_seq', 1);
CALL shard_id_convert(NULL);
CALL shard_id_convert('conv_ok', 0);
CALL shard_id_convert('conv_ok');
CALL shard_id_convert_prepare('conv_nopk', 'created_at', 'conv_seq', 1);
CALL shard_id_convert_prepare('conv_text', 'created_at', 'conv_seq', 1);
CALL shard_id_convert_prepare('conv_ok', 'note', 'conv_seq', 1);
CALL shard_id_convert_prepare('conv_ok', 'created_at', 'conv_seq', 1, new_column => 'note');
CALL shard_id_convert_prepare('conv_two', 'created_at', 'conv_seq', 1);
CALL shard_id_convert_prepare('conv_pair', 'created_at', 'conv_seq', 1);
-- NULL and before the epoch: two rows, counted (the one ahead of the clock would get a live id)
CALL shard_id_convert_prepare('conv_ok', 'created_at', 'conv_seq', 1);
CALL shard_id_convert_finish('conv_ok');
-- only the owner
CREATE ROLE regress_shard_id_converter;
SET ROLE regress_shard_id_converter;
CALL shard_id_convert_prepare('conv_ok', 'created_at', 'conv_seq', 1);
RESET ROLE;
DROP ROLE regress_shard_id_converter;
-- the SQLSTATE of each
SELECT q AS statement, sqlstate_of(q) AS sqlstate FROM (VALUES
    ('CALL shard_id_convert_prepare(NULL, ''created_at'', ''conv_seq'', 1)'),
    ('CALL shard_id_convert(''conv_ok'', 0)'),
    ('CALL shard_id_convert(''conv_ok'')'),
    ('CALL shard_id_convert_prepare(''conv_nopk'', ''created_at'', ''conv_seq'', 1)'),
    ('CALL shard_id_convert_prepare(''conv_text'', ''created_at'', ''conv_seq'', 1)'),
    ('CALL shard_id_convert_prepare(''conv_ok'', ''created_at'', ''conv_seq'', 1, new_column => ''note'')'),
    ('CALL shard_id_convert_prepare(''conv_two'', ''created_at'', ''conv_seq'', 1)'),
    ('CALL shard_id_convert_prepare(''conv_pair'', ''created_at'', ''conv_seq'', 1)'),
    ('CALL shard_id_convert_prepare(''conv_ok'', ''created_at'', ''conv_seq'', 1)'),
    ('CALL shard_id_convert_finish(''conv_ok'')')
) v(q);
-- nothing was changed
SELECT count(*) AS added_columns FROM pg_attribute WHERE attrelid = 'conv_ok'::regclass AND attname = 'shard_id';
SELECT count(*) AS conversions FROM shard_id_conversions;

-- a table in order is prepared; its conversion waits for its index
DELETE FROM conv_ok WHERE created_at IS NULL OR created_at < '2026-01-01' OR created_at > now();
CALL shard_id_convert_prepare('conv_ok', 'created_at', 'conv_seq', 1);
CALL shard_id_convert_prepare('conv_ok', 'created_at', 'conv_seq', 1);
CALL shard_id_convert('conv_ok');
SELECT * FROM shard_id_convert_indexes('conv_ok');
SELECT table_name, phase, rows_done FROM shard_id_conversions;
SELECT pg_get_expr(adbin, adrelid) AS new_default FROM pg_attrdef
 WHERE adrelid = 'conv_ok'::regclass AND adnum = (SELECT attnum FROM pg_attribute WHERE attrelid = 'conv_ok'::regclass AND attname = 'shard_id');

-- the plan, before anything changes: each step, and each object on the key or on a column that
-- references it, with what happens to it
CREATE TABLE conv_plan (id bigserial PRIMARY KEY, created_at timestamptz NOT NULL, item text);
CREATE TABLE conv_plan_lines (id bigserial PRIMARY KEY, plan_id bigint NOT NULL REFERENCES conv_plan, qty int);
CREATE VIEW conv_plan_ids AS SELECT id, item FROM conv_plan;
CREATE INDEX conv_plan_item_id ON conv_plan (item, id);
CREATE MATERIALIZED VIEW conv_plan_mv AS SELECT id FROM conv_plan;
CREATE FUNCTION conv_touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$;
CREATE TRIGGER conv_touch BEFORE UPDATE ON conv_plan FOR EACH ROW EXECUTE FUNCTION conv_touch();
SELECT step, phase, object, kind, action FROM shard_id_convert_plan('conv_plan', 'created_at', 'conv_seq', 1);
-- refused, changing nothing: the materialized view, named with what to do
CALL shard_id_convert_prepare('conv_plan', 'created_at', 'conv_seq', 1);
SELECT count(*) AS added_columns FROM pg_attribute WHERE attrelid = 'conv_plan'::regclass AND attname = 'shard_id';
DROP MATERIALIZED VIEW conv_plan_mv;
-- a role that may not set session_replication_role: the trigger would fire for every row
CREATE ROLE regress_shard_id_owner;
ALTER TABLE conv_plan OWNER TO regress_shard_id_owner;
ALTER TABLE conv_plan_lines OWNER TO regress_shard_id_owner;
ALTER VIEW conv_plan_ids OWNER TO regress_shard_id_owner;
SET ROLE regress_shard_id_owner;
SELECT object, action, detail FROM shard_id_convert_plan('conv_plan', 'created_at', 'conv_seq', 1) WHERE action = 'refuse';
SELECT object, action FROM shard_id_convert_plan('conv_plan', 'created_at', 'conv_seq', 1, fire_triggers => true) WHERE kind LIKE 'user trigger%';
RESET ROLE;
-- after the prepare, the plan with the table alone: the swap's statements, read from the catalog
CALL shard_id_convert_prepare('conv_plan', 'created_at', 'conv_seq', 1);
-- (a view's definition as pg_get_viewdef prints it, which differs between major versions, is left out)
SELECT phase, object, action, statement FROM shard_id_convert_plan('conv_plan')
 WHERE phase IN ('indexes', 'swap') AND kind <> 'view' ORDER BY step;
DROP TABLE conv_plan_lines, conv_plan CASCADE;
DROP FUNCTION conv_touch();
DROP ROLE regress_shard_id_owner;
DROP TABLE conv_nopk, conv_text, conv_ok, conv_pair_ref, conv_pair, conv_two;
DELETE FROM _pg_shard_id.conversions;
DROP SEQUENCE conv_seq;
