-- With the library preloaded, its catalog hook sees every object created, altered or dropped. It
-- must not give the transaction an id for an index: DROP INDEX CONCURRENTLY must be the first
-- action of a transaction that has none (it failed on every server that preloaded the library:
-- the twenty-fifth review). Each statement is its own transaction here.
CREATE TABLE ddl_t (a int, b int DEFAULT 1);
CREATE UNIQUE INDEX CONCURRENTLY ddl_a ON ddl_t (a);
REINDEX INDEX CONCURRENTLY ddl_a;
DROP INDEX CONCURRENTLY ddl_a;
CREATE INDEX ddl_b ON ddl_t (b);
DROP INDEX CONCURRENTLY IF EXISTS ddl_b;
SELECT count(*) AS indexes_left FROM pg_index WHERE indrelid = 'ddl_t'::regclass;
DROP TABLE ddl_t;
