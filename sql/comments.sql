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
    'Internal: the earliest recorded epoch (Unix ms), then the recorded servers (the libraries of 0.4.0 to 0.6.0 call it; 0.7.0 reads the table itself).';
COMMENT ON FUNCTION _pg_shard_id.origin_databases() IS
    'Internal: the recorded databases, 0 for rows recorded before 0.5.0 (the libraries of 0.5.0 and 0.6.0 call it; 0.7.0 reads the table itself).';
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
COMMENT ON FUNCTION shard_id_convert_plan(regclass, name, regclass, integer, name, boolean, boolean) IS
    'The plan of converting a table''s keys, before anything changes: each step, and each object attached to the key or to a column referencing it, with what is added, built, carried, kept or refused, its lock and its statement. Only the table''s owner.';
COMMENT ON PROCEDURE shard_id_convert_prepare(regclass, name, regclass, integer, name, boolean, boolean) IS
    'Prepares converting a table''s keys to time-ordered ids: a new column with DEFAULT next_shard_id, triggers, and a progress record; no rewrite. Refuses, changing nothing, what its plan refuses. Only the table''s owner.';
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
COMMENT ON FUNCTION _pg_shard_id.conversion_references(regclass, name, name) IS 'The single-column foreign keys that reference a table''s key column, with the new column each gets: what a conversion carries.';
COMMENT ON FUNCTION _pg_shard_id.tree(regclass) IS 'Every relation of a partition tree, the relation itself first.';
COMMENT ON FUNCTION _pg_shard_id.derived_name(text, text) IS 'A name a conversion gives: base and suffix, or, past 63 bytes, base shortened with 8 hex digits of its md5 (the whole name so, when the suffix alone is longer than 54 bytes).';
COMMENT ON FUNCTION _pg_shard_id.conversion_key(regclass) IS 'The key column a conversion replaces: the one column of the primary key besides the partition key (55000 otherwise).';
COMMENT ON FUNCTION _pg_shard_id.conversion_columns(regclass, name, name) IS 'The columns a conversion moves, on every relation that holds them, with their numbers there.';
COMMENT ON FUNCTION _pg_shard_id.own_constraint(oid, regclass, name, name) IS 'Whether a CHECK is one a conversion made on a new column (its NOT NULL CHECKs, a referencing column''s CHECK, a user CHECK''s twin): by its derived name and its columns, both.';
COMMENT ON FUNCTION _pg_shard_id.reference_trigger(name, boolean) IS 'The name of a conversion''s BEFORE INSERT (or UPDATE) trigger on a referencing column: it begins with ~, so that it fires after every trigger whose name begins with an ASCII character.';
COMMENT ON FUNCTION _pg_shard_id.late_firing_triggers(regclass, name, name) IS 'The user''s BEFORE row triggers on the tables that reference a table''s key that would fire after the conversion''s reference triggers (their names sort after): refused by every step.';
COMMENT ON FUNCTION _pg_shard_id.new_column_readers(regclass, name, name, boolean) IS 'What was made after a conversion''s prepare that reads a new column: with also_old, what also reads a column the swap moves (refused by the finish); without, what DROP COLUMN would refuse (refused by abandoning).';
COMMENT ON FUNCTION _pg_shard_id.expression_moved(pg_node_tree, regclass, smallint[], smallint[]) IS 'An index''s or CHECK''s expressions with the given columns moved to others, printed as SQL (the columns moved in the tree, not in text).';
COMMENT ON FUNCTION _pg_shard_id.expression_moved_bytes(pg_node_tree, regclass, smallint[], smallint[]) IS 'expression_moved''s C part: the expressions printed, as the bytes of the text in the database''s encoding.';
COMMENT ON FUNCTION _pg_shard_id.index_statement(regclass, name, smallint[], smallint[], text) IS 'CREATE INDEX for an index with the given columns moved: its twin on the new columns, every part of it kept.';
COMMENT ON FUNCTION _pg_shard_id.conversion_kinds() IS 'What PostgreSQL can attach to a column, and the rule a conversion follows for each kind.';
COMMENT ON FUNCTION _pg_shard_id.conversion_catalog_columns() IS 'The catalog columns that can hold a column number or an expression, with the kind that covers each (checked against the running server by a test).';
COMMENT ON FUNCTION _pg_shard_id.fill_statements(regclass, name, name, name, regclass, integer) IS 'The statements that give rows their ids: one per unit, on a range of blocks, then the sweeps.';
COMMENT ON FUNCTION _pg_shard_id.step(integer, text, text, text, text, text, text, text, boolean) IS 'A step of a conversion''s inventory.';
COMMENT ON FUNCTION _pg_shard_id.conversion_inventory(regclass, name, regclass, integer, name, boolean, boolean) IS 'Everything a conversion does and every object attached to the columns it moves, with what happens to each: what the plan shows and the prepare, the index step and the finish run.';
COMMENT ON FUNCTION _pg_shard_id.conversion_inventory(regclass) IS 'The inventory of a prepared conversion, as recorded.';
COMMENT ON FUNCTION _pg_shard_id.refuse(regclass, _pg_shard_id.conversion_step[]) IS 'The refusals of an inventory as one ERROR (0A000) naming each object.';
COMMENT ON FUNCTION _pg_shard_id.run_quietly(text, bigint, bigint) IS 'A statement of a conversion with session_replication_role = replica: the user''s triggers and rules do not fire.';
COMMENT ON FUNCTION _pg_shard_id.run_firing(text, bigint, bigint, text) IS 'A statement of a conversion under the caller''s search_path, for the user''s triggers when they fire.';
COMMENT ON FUNCTION _pg_shard_id.run(regclass, text, bigint, bigint, text) IS 'A statement of a conversion, the user''s triggers and rules silent unless fire_triggers => true.';
COMMENT ON FUNCTION _pg_shard_id.conversion_triggers(regclass, name, name) IS 'The user''s triggers and rules the batches'' UPDATEs would fire.';
COMMENT ON FUNCTION _pg_shard_id.convert_step(regclass, integer, text) IS 'One transaction of shard_id_convert: a batch, or the sweeps; whether there is more to do.';
COMMENT ON FUNCTION _pg_shard_id.convert_arguments(regclass, integer) IS 'shard_id_convert''s arguments checked (22004, 22023).';
COMMENT ON FUNCTION _pg_shard_id.finish_step(regclass, text) IS 'One transaction of shard_id_convert_finish: a check before the swap, the swap, or a foreign key validated; whether there is more to do.';
COMMENT ON FUNCTION _pg_shard_id.conversion_validations(regclass) IS 'The foreign keys the swap made again NOT VALID, valid before it, not validated yet.';
COMMENT ON FUNCTION _pg_shard_id.swap(regclass, text) IS 'The swap of a conversion: its locks, its inventory read again under them, every swap step in order, in one transaction.';
COMMENT ON FUNCTION _pg_shard_id.wait_for_older_transactions(regclass) IS 'Waits, 10 s at most (55P03), until no other session of the database (or walsender) holds a snapshot older than the swap: through one, the key would read NULL after it.';
COMMENT ON FUNCTION _pg_shard_id.refusals_after_the_batches(_pg_shard_id.conversion_step[]) IS 'The refusals of a conversion''s plan that still stop it after its batches (the finish''s and the swap''s): all but the batches'' triggers and publications.';
COMMENT ON FUNCTION _pg_shard_id.orphaned_references(regclass) IS 'The statements that drop what a conversion''s prepare made on a table whose foreign key to the key was dropped since (its triggers, then its new column).';
COMMENT ON PROCEDURE shard_id_convert_abandon(regclass) IS 'Abandons a conversion before its swap: drops its triggers and new columns (with their twin indexes and CHECKs) and its progress row; the table is as it was before the prepare.';
COMMENT ON FUNCTION _pg_shard_id.rows_per_block(regclass) IS 'Rows per heap block, counted in the first 8 blocks: the batch size of a table never analyzed.';
COMMENT ON FUNCTION _pg_shard_id.conversion_note_deleted() IS 'The AFTER DELETE and UPDATE OF the key triggers of a table being converted: record the new ids of rows deleted or given another key, so that rows referencing one inserted again with its old key follow it (SECURITY DEFINER; reads only the new id, by field selection; records only for a trigger on the table being converted).';
COMMENT ON FUNCTION _pg_shard_id.renamed_columns(regclass) IS 'The columns a prepared conversion names (in its state and its triggers'' arguments) that no longer exist under that name: renamed or dropped after the prepare.';
COMMENT ON FUNCTION _pg_shard_id.trigger_arguments(bytea, smallint) IS 'A trigger''s arguments (pg_trigger.tgargs) as text in the database''s encoding; one that is not valid text there is NULL.';
COMMENT ON FUNCTION _pg_shard_id.refuse_changed(regclass) IS 'Raises 55000 naming each column a conversion names that was renamed or dropped after its prepare, each foreign key to its key added after it, and each of its triggers renamed, dropped or not ENABLE ALWAYS; every step calls it before it changes anything.';
COMMENT ON FUNCTION _pg_shard_id.equality_of_pg_catalog(regclass, name) IS 'Whether a table''s key compares with PostgreSQL''s own equality (its primary key''s btree family''s operator in pg_catalog), as the conversion''s triggers and sweeps compare keys.';
COMMENT ON FUNCTION _pg_shard_id.index_refusal(oid, regclass, name, smallint, text) IS 'Why an index on a moved column cannot follow it (kind: reason), or NULL: nulls not distinct, an index for another type than bigint, an expression or predicate that fails for new ids.';
COMMENT ON FUNCTION _pg_shard_id.sweep(regclass, text, boolean) IS 'The sweeps of a conversion: rows still without a new id, referencing rows whose referenced row was not known, and those of a row deleted and inserted again; then the record of deleted rows loses what they saw.';
COMMENT ON FUNCTION _pg_shard_id.repair_references(regclass, text) IS 'Before the swap: every referencing row whose new reference disagrees with the new id of the row its old one names (written while a trigger of the conversion was off) gets that id; one scan of each referencing table. Returns how many.';
COMMENT ON FUNCTION _pg_shard_id.lock_tables(text) IS 'The swap''s locks, taken without holding one while waiting long for another: attempts of at most 200 ms a lock, for 10 s in all.';
