-- next_shard_id(seq, shard) is called by PostgreSQL without pgrx's wrapper (src/generate.rs): an
-- ERROR inside nextval() leaves through its frame, others go through pgrx's guard. Thousands of
-- such errors, caught one by one in one session, must leave the session, the uniqueness guard
-- and the sequences sound: the ids drawn afterwards are all there, distinct and increasing.
CREATE SEQUENCE entry_short MAXVALUE 3;
CREATE SEQUENCE entry_seq;
CREATE TABLE entry_not_a_sequence (x int);
CREATE FUNCTION pg_temp.outcomes(q text, n int) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    codes text[] := '{}';
BEGIN
    FOR i IN 1..n LOOP
        BEGIN
            EXECUTE q;
            codes := codes || 'ok'::text;
        EXCEPTION WHEN others THEN
            codes := codes || SQLSTATE::text;
        END;
    END LOOP;
    RETURN (SELECT string_agg(c || ' x ' || k, ', ' ORDER BY c)
            FROM (SELECT c, count(*) AS k FROM unnest(codes) c GROUP BY c) s);
END $$;

-- errors raised inside nextval(): sequence exhausted, not a sequence
SELECT pg_temp.outcomes('SELECT next_shard_id(''entry_short'', 1)', 2000) AS exhausted;
SELECT pg_temp.outcomes('SELECT next_shard_id(''entry_not_a_sequence'', 1)', 2000) AS not_a_sequence;
-- raised by the extension before nextval(), through pgrx's guard: the sequence is not touched
SELECT pg_temp.outcomes('SELECT next_shard_id(''entry_seq'', 8192)', 2000) AS bad_shard;
SELECT is_called AS touched_by_bad_shards FROM entry_seq;
-- no privilege on the sequence (inside nextval())
CREATE ROLE regress_entry_nobody;
GRANT EXECUTE ON FUNCTION pg_temp.outcomes(text, int) TO regress_entry_nobody;
SET ROLE regress_entry_nobody;
SELECT pg_temp.outcomes('SELECT next_shard_id(''entry_seq'', 1)', 2000) AS no_privilege;
RESET ROLE;
DROP OWNED BY regress_entry_nobody;
DROP ROLE regress_entry_nobody;
-- a read-only transaction (inside nextval())
BEGIN READ ONLY;
SELECT pg_temp.outcomes('SELECT next_shard_id(''entry_seq'', 1)', 2000) AS read_only;
COMMIT;

-- afterwards: every id of one statement distinct, increasing, the shard and remainders right
SELECT count(*) AS ids, count(DISTINCT id) AS distinct_ids,
       bool_and(id > prev) AS increasing,
       bool_and(shard_id_extract_shard(id) = 77) AS shard_77,
       bool_and(shard_id_extract_seq(id) = n % 1024) AS remainders
FROM (SELECT id, n, lag(id, 1, 0::bigint) OVER (ORDER BY n) AS prev
      FROM (SELECT next_shard_id('entry_seq', 77) AS id, g AS n
            FROM generate_series(1, 50000) g) s) t;
