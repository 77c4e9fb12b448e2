-- One COMMENT per SQL function (\df+ and pgAdmin show them). A pg_test checks that none is missing.
COMMENT ON FUNCTION next_shard_id(regclass, integer) IS
    'Next 64-bit id of a logical shard: ms since pg_shard_id.epoch | shard | nextval(seq) mod 1024; never repeats.';
COMMENT ON FUNCTION next_shard_id(regclass) IS
    'Next 64-bit id with this server''s node number as the shard (pg_shard_id.node, or the Citus group id): one DEFAULT for every node.';
COMMENT ON FUNCTION shard_id_extract_timestamp(bigint) IS
    'The time an id was made, to the millisecond, by pg_shard_id.epoch.';
COMMENT ON FUNCTION shard_id_extract_timestamp(bigint, timestamptz) IS
    'The time an id was made, to the millisecond, by an explicit epoch.';
COMMENT ON FUNCTION shard_id_extract_shard(bigint) IS
    'The logical shard of an id.';
COMMENT ON FUNCTION shard_id_extract_seq(bigint) IS
    'The sequence field of an id (nextval mod 1024).';
COMMENT ON FUNCTION shard_id_decode(bigint) IS
    'The fields of an id: (ts, shard, seq), by pg_shard_id.epoch.';
COMMENT ON FUNCTION shard_id_decode(bigint, timestamptz) IS
    'The fields of an id: (ts, shard, seq), by an explicit epoch.';
COMMENT ON FUNCTION shard_id_compose(timestamptz, integer, integer) IS
    'The id with these fields, by pg_shard_id.epoch: the inverse of shard_id_decode.';
COMMENT ON FUNCTION shard_id_compose(timestamptz, integer, integer, timestamptz) IS
    'The id with these fields, by an explicit epoch: the inverse of shard_id_decode.';
COMMENT ON FUNCTION shard_id_lower_bound(timestamptz) IS
    'The smallest id made at or after a time, by pg_shard_id.epoch: id >= lower_bound(a) AND id < lower_bound(b) is a time range.';
COMMENT ON FUNCTION shard_id_lower_bound(timestamptz, timestamptz) IS
    'The smallest id made at or after a time, by an explicit epoch.';
COMMENT ON FUNCTION shard_id_shard_for(bigint, integer) IS
    'The logical shard of an integer key: key mod shard_count.';
COMMENT ON FUNCTION shard_id_shard_for(text, integer) IS
    'The logical shard of a text key: 64-bit FNV-1a of its UTF-8 bytes, mod shard_count.';
COMMENT ON FUNCTION shard_id_to_shortcode(bigint) IS
    'The 11-character URL-safe base64 code of an id.';
COMMENT ON FUNCTION shard_id_from_shortcode(text) IS
    'The id of a shortcode made by shard_id_to_shortcode.';
COMMENT ON FUNCTION shard_id_partition_bounds(timestamptz, timestamptz, interval) IS
    'Contiguous (lower, upper) id ranges per time step, for PARTITION BY RANGE (id).';
COMMENT ON FUNCTION pg_shard_id_info() IS
    'The epoch, overflow policy, guard mode, guard table use and lease in force.';
COMMENT ON FUNCTION shard_id_adopt(regclass, name, integer) IS
    'Switches a serial, bigserial, identity or DEFAULT nextval(...) column to DEFAULT next_shard_id(its sequence, shard); returns the new default.';
COMMENT ON FUNCTION shard_id_to_jsonb(anyelement) IS
    'to_jsonb(value) with every bigint and bigint[] as JSON strings, so ids survive JavaScript and JSON.parse.';
COMMENT ON FUNCTION _pg_shard_id.record_origin() IS
    'Internal: records this server and its epoch in _pg_shard_id.origin (next_shard_id calls it).';
COMMENT ON FUNCTION _pg_shard_id.read_origin() IS
    'Internal: the earliest recorded epoch (Unix ms), then the recorded servers (next_shard_id calls it).';
COMMENT ON FUNCTION _pg_shard_id.origin_databases() IS
    'Internal: the recorded databases, 0 for rows recorded before 0.5.0 (next_shard_id calls it).';
COMMENT ON FUNCTION pg_shard_id_stats() IS
    'The guard''s statistics per sequence (read them through the view pg_shard_id_stats).';
COMMENT ON FUNCTION pg_shard_id_stats_reset() IS
    'Sets the statistics in pg_shard_id_stats to zero (superusers and roles granted EXECUTE).';
COMMENT ON FUNCTION shard_id_check() IS
    'Checks the setup (preload, lease, epoch, clock, shard numbers, data floor, replication, publications, mask keys, Citus nodes); each row that is not ok says what to fix.';
COMMENT ON FUNCTION shard_id_resync(regclass) IS
    'After loading rows into a live table: the sequence''s next ids start above the newest id stored in its DEFAULT columns; returns that floor.';
COMMENT ON FUNCTION shard_id_mask(bigint, text) IS
    'The id masked with the current key of pg_shard_id.keys (FF1-AES-256 over the non-negative bigints) under a tweak: reveals no time, shard or order. EXECUTE: shard_id_masker.';
COMMENT ON FUNCTION shard_id_mask(bigint, text, integer) IS
    'The id masked with the named key (IMMUTABLE: a key id''s key never changes, checked against _pg_shard_id.mask_keys), for generated columns and indexes. EXECUTE: shard_id_masker.';
COMMENT ON FUNCTION shard_id_unmask(bigint, text) IS
    'The id of a value masked with the current key. EXECUTE: shard_id_masker.';
COMMENT ON FUNCTION shard_id_unmask(bigint, text, integer) IS
    'The id of a value masked with the named key. EXECUTE: shard_id_masker.';
COMMENT ON FUNCTION shard_id_mask_shortcode(bigint, text) IS
    'A URL-safe masked id: the current key''s id as one character, then the masked value''s shortcode (12 characters). EXECUTE: shard_id_masker.';
COMMENT ON FUNCTION shard_id_unmask_shortcode(text, text) IS
    'The id of a masked shortcode, with the key it names. EXECUTE: shard_id_masker.';
COMMENT ON FUNCTION shard_id_mask_keys_record() IS
    'Records the check value of every key of pg_shard_id.keys that has none (superuser); a key id whose key then differs is refused.';
COMMENT ON FUNCTION next_shard_id_at(regclass, integer, timestamptz) IS
    'An id of the sequence and shard at a past time (at least 1 second ago), for history, imports and converting keys: in that millisecond or the first later one with a free remainder, equal to no id stored in a column whose DEFAULT draws from the sequence, nor to one another session holds. Needs shared_preload_libraries.';
COMMENT ON PROCEDURE shard_id_convert_prepare(regclass, name, regclass, integer, name) IS
    'Prepares converting a table''s keys to time-ordered ids: a new column with DEFAULT next_shard_id, triggers, and a progress record; no rewrite. Only the table''s owner.';
COMMENT ON FUNCTION shard_id_convert_indexes(regclass) IS
    'The CREATE INDEX CONCURRENTLY statements a prepared conversion still needs (psql runs them when the query is ended with gexec); none when ready.';
COMMENT ON PROCEDURE shard_id_convert(regclass, integer) IS
    'Gives every existing row of a prepared table its id at its own time (next_shard_id_at), in batches that commit, with a NOTICE per batch; resumable.';
COMMENT ON PROCEDURE shard_id_convert_finish(regclass) IS
    'Swaps the new ids in as the key, in one short transaction without a scan; the old key stays as <key>_before_shard_id and foreign keys follow.';
COMMENT ON VIEW shard_id_conversions IS
    'Conversions of tables'' keys and their progress (rows done, rows per second, time left), for the tables the current role owns.';
COMMENT ON FUNCTION _pg_shard_id.qualified(regclass) IS 'A relation''s name with its schema, quoted (for triggers run under another search_path).';
COMMENT ON FUNCTION _pg_shard_id.leaves(regclass) IS 'The leaf partitions of a relation, or the table itself.';
COMMENT ON FUNCTION _pg_shard_id.conversion_units(regclass, name, name) IS 'The work of a conversion: each leaf of the table, then each leaf of each referencing table.';
COMMENT ON FUNCTION _pg_shard_id.conversion_id(regclass, integer, timestamp with time zone) IS 'The id a converted row gets: at its own time, or a live id for a time less than 1.5 s past or ahead.';
COMMENT ON FUNCTION _pg_shard_id.conversion_fill_row() IS 'Trigger of a conversion: the id of a row an UPDATE moved behind the batches, or inserted without one.';
COMMENT ON FUNCTION _pg_shard_id.conversion_fill_reference() IS 'Trigger of a conversion: the new id of the row a referencing row references.';
COMMENT ON FUNCTION _pg_shard_id.conversion_references(regclass, name) IS 'The single-column foreign keys that reference a table''s key column: what a conversion carries.';
