-- run once after the regression database is (re)created
CREATE EXTENSION pg_shard_id;
-- the SQLSTATE a statement fails with ('no error' if it does not), for tables of refusals
CREATE FUNCTION sqlstate_of(q text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE q;
    RETURN 'no error';
EXCEPTION WHEN others THEN
    RETURN SQLSTATE;
END $$;
