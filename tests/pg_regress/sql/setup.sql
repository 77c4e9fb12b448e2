-- run once after the regression database is (re)created
CREATE EXTENSION pg_shard_id;
