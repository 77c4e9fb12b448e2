-- shard_id_to_jsonb: to_jsonb with every bigint and bigint[] as a JSON string (ids above 2^53
-- survive JSON.parse); everything else exactly as to_jsonb writes it.
SET TimeZone = 'UTC';
SET DateStyle = 'ISO';
CREATE SEQUENCE json_seq;
CREATE DOMAIN json_id AS bigint;
CREATE TABLE json_photos (
    id bigint PRIMARY KEY DEFAULT next_shard_id('json_seq', 5),
    user_id json_id,
    tag_ids bigint[],
    likes integer,
    price numeric,
    taken timestamptz,
    "odd ""name""" bigint,
    meta jsonb,
    url text
);
INSERT INTO json_photos VALUES
    (11637205501278089, 9007199254740993, '{1,NULL,9223372036854775807}', 7, 1.500,
     '2026-03-01 12:00:00.123+00', -9223372036854775808, '{"n": 12345678901234567890, "id": 1}', 'a "quoted", {braced} url'),
    (42, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL);

-- a table's row: bigint, a domain over bigint, bigint[] and odd column names become strings;
-- integer, numeric (with its trailing zero), timestamps, nested jsonb and text do not
SELECT shard_id_to_jsonb(p) FROM json_photos p ORDER BY id;
-- the same keys and values as to_jsonb, but for the quoting
SELECT bool_and((SELECT count(*) FROM jsonb_object_keys(shard_id_to_jsonb(p))) = (SELECT count(*) FROM jsonb_object_keys(to_jsonb(p)))) AS same_keys,
       bool_and(shard_id_to_jsonb(p) ->> 'id' = to_jsonb(p) ->> 'id') AS same_id_text,
       bool_and(shard_id_to_jsonb(p) -> 'meta' = to_jsonb(p) -> 'meta') AS nested_jsonb_unchanged
  FROM json_photos p;
-- an anonymous row (a subquery's), and the usual API shapes: one object, an array of objects
SELECT shard_id_to_jsonb(s) FROM (SELECT id, likes, id + 1 AS next_id FROM json_photos WHERE id = 42) s;
SELECT jsonb_agg(shard_id_to_jsonb(s) ORDER BY s.id) FROM (SELECT id, url FROM json_photos) s;
SELECT shard_id_to_jsonb(ROW(1::bigint, 'x', 2)) AS row_constructor;
-- a bigint, a bigint[] (any depth), and values of other types as to_jsonb writes them
SELECT shard_id_to_jsonb(11637205501278089::bigint) AS id,
       shard_id_to_jsonb('{{1,2},{3,NULL}}'::bigint[]) AS matrix,
       shard_id_to_jsonb(5) AS int4,
       shard_id_to_jsonb('t'::text) AS text,
       shard_id_to_jsonb('{"a": 1}'::jsonb) AS jsonb,
       shard_id_to_jsonb(NULL::bigint) IS NULL AS strict;
-- what to_jsonb alone does, for contrast: a number that JSON.parse rounds to 11637205501278088
SELECT to_jsonb(p) -> 'id' AS to_jsonb_id FROM json_photos p WHERE id > 42;
-- two columns of one name: jsonb keeps the last, and so does the quoting (0.3.0 quoted the
-- jsonb's number, and failed with 22P02 on a numeric)
SELECT shard_id_to_jsonb(t) FROM (SELECT 1::bigint AS id, '{"n":5}'::jsonb AS id) t;
SELECT shard_id_to_jsonb(t) FROM (SELECT 7::bigint AS v, 2.5::numeric AS v) t;
SELECT shard_id_to_jsonb(t) FROM (SELECT 2.5::numeric AS v, 7::bigint AS v) t;
-- keys inside nested values are never looked at, whatever their names
SELECT shard_id_to_jsonb(t) FROM (SELECT 5::bigint AS id, '{"id": 6, "ids": [7]}'::jsonb AS meta, ROW(8::bigint) AS r) t;
