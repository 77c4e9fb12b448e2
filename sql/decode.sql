-- shard_id_decode(id [, epoch]) -> (ts, shard, seq): one row with the three fields, over the
-- extract functions. SQL-standard bodies (BEGIN ATOMIC, PostgreSQL 14+) are parsed when the
-- extension is created and refer to the extract functions by oid: neither search_path nor
-- ALTER SCHEMA ... RENAME can redirect or break them.
CREATE FUNCTION shard_id_decode(id bigint, OUT ts timestamptz, OUT shard integer, OUT seq integer)
    RETURNS record LANGUAGE sql STABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT shard_id_extract_timestamp(id), shard_id_extract_shard(id), shard_id_extract_seq(id);
END;

CREATE FUNCTION shard_id_decode(id bigint, epoch timestamptz,
                                OUT ts timestamptz, OUT shard integer, OUT seq integer)
    RETURNS record LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
BEGIN ATOMIC
    SELECT shard_id_extract_timestamp(id, epoch), shard_id_extract_shard(id), shard_id_extract_seq(id);
END;
