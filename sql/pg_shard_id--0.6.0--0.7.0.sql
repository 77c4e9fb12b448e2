-- pg_shard_id 0.6.0 -> 0.7.0, run by ALTER EXTENSION pg_shard_id UPDATE TO '0.7.0'.
--
-- Install the 0.7.0 library and restart PostgreSQL first (the library is preloaded: a running
-- server keeps the old one), then run ALTER EXTENSION pg_shard_id UPDATE in each database.
--
-- Masking under a threat model (issue 38, src/mask.rs):
-- * masking is the key holder's privilege, like unmasking: a role that may mask finds the id
--   behind a masked value by trying the ids of one second and shard. EXECUTE on every masking
--   function goes from PUBLIC to the role shard_id_masker. Before updating, GRANT
--   shard_id_masker TO the roles that mask, and to the roles that insert into or update a table
--   with a masked generated column or a masked expression index (they execute the function), and
--   to the owners of such tables (ANALYZE, REINDEX and CREATE INDEX run as the owner); grants you
--   made to other roles stay;
-- * the forms that use the current key are PARALLEL RESTRICTED: a parallel worker could read a
--   newer key file than its leader;
-- * _pg_shard_id.mask_keys records each key id's check value (shard_id_mask_keys_record()).

ALTER FUNCTION shard_id_mask(bigint, text) PARALLEL RESTRICTED;
ALTER FUNCTION shard_id_unmask(bigint, text) PARALLEL RESTRICTED;
ALTER FUNCTION shard_id_mask_shortcode(bigint, text) PARALLEL RESTRICTED;

CREATE FUNCTION shard_id_mask_keys_record() RETURNS TABLE ("key_id" integer, "check_value" bigint, "recorded" text)
    VOLATILE STRICT PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'shard_id_mask_keys_record_wrapper';
REVOKE EXECUTE ON FUNCTION shard_id_mask_keys_record() FROM PUBLIC;
-- Masking's privileges and records (src/mask.rs, docs/masking.md).
--
-- Both directions are the key holder's: a role that may mask finds the id behind a masked value
-- by trying the 1,024,000 ids of one second and one shard (0.77 s, docs/masking.md), so EXECUTE on
-- every masking function is revoked from PUBLIC and granted to one role, shard_id_masker
-- (NOLOGIN; created here when missing, kept when the extension is dropped, as roles are
-- cluster-wide): GRANT shard_id_masker TO the roles that make or resolve public ids. (Names
-- starting with pg_ are reserved for PostgreSQL's own roles.)
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = 'shard_id_masker') THEN
        CREATE ROLE shard_id_masker NOLOGIN;
    ELSIF (SELECT rolcanlogin OR rolsuper FROM pg_catalog.pg_roles WHERE rolname = 'shard_id_masker') THEN
        -- a role of that name made by someone else: it gets masking's grants all the same, so say so
        RAISE WARNING 'pg_shard_id: the existing role shard_id_masker can log in or is a superuser; it is granted masking'
            USING HINT = 'Masking is granted to the role shard_id_masker, meant as a NOLOGIN group role: ALTER ROLE shard_id_masker NOLOGIN NOSUPERUSER, and check who is a member of it.';
    END IF;
END
$$;
REVOKE EXECUTE ON FUNCTION shard_id_mask(bigint, text), shard_id_mask(bigint, text, integer),
    shard_id_unmask(bigint, text), shard_id_unmask(bigint, text, integer),
    shard_id_mask_shortcode(bigint, text), shard_id_unmask_shortcode(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION shard_id_mask(bigint, text), shard_id_mask(bigint, text, integer),
    shard_id_unmask(bigint, text), shard_id_unmask(bigint, text, integer),
    shard_id_mask_shortcode(bigint, text), shard_id_unmask_shortcode(text, text) TO shard_id_masker;

-- A check value per key id (the key's masked value of 0 under a reserved tweak: it identifies
-- the key without revealing it), written by shard_id_mask_keys_record() only. A configuration
-- table, so pg_dump and pg_upgrade keep its rows; a physical standby has them through WAL. Every
-- read of the key file compares its keys with these rows and refuses a key id whose key differs.
CREATE TABLE _pg_shard_id.mask_keys (
    key_id smallint PRIMARY KEY CHECK (key_id BETWEEN 1 AND 63),
    check_value bigint NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
SELECT pg_catalog.pg_extension_config_dump('_pg_shard_id.mask_keys', '');
GRANT SELECT ON _pg_shard_id.mask_keys TO PUBLIC;
COMMENT ON TABLE _pg_shard_id.mask_keys IS
    'The check value of each mask key id of pg_shard_id.keys (never the key): a key id whose key differs is refused. Written by shard_id_mask_keys_record().';
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
COMMENT ON FUNCTION shard_id_check() IS
    'Checks the setup (preload, lease, epoch, clock, shard numbers, data floor, replication, publications, mask keys, Citus nodes); each row that is not ok says what to fix.';

-- next_shard_id_at (issue 37): ids at past times
CREATE FUNCTION next_shard_id_at("seq" regclass, "shard" integer, "ts" timestamptz) RETURNS bigint
    VOLATILE STRICT PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'next_shard_id_at_wrapper';
COMMENT ON FUNCTION next_shard_id_at(regclass, integer, timestamptz) IS
    'An id of the sequence and shard at a past time (at least 1 second ago), for history, imports and converting keys: in that millisecond or the first later one with a free remainder, equal to no id stored in a column whose DEFAULT draws from the sequence, nor to one another session holds. Needs shared_preload_libraries.';

-- shard_id_convert (issue 37): sql/convert.sql, whose header explains it
CREATE TABLE _pg_shard_id.conversions (
    relid oid PRIMARY KEY,
    table_name text NOT NULL,
    key_column name NOT NULL,
    time_column name NOT NULL,
    seq regclass NOT NULL,
    shard integer NOT NULL,
    new_column name NOT NULL,
    -- prepared: the column, its DEFAULT and the triggers exist; filling: batches run (unit,
    -- next_block say where); filled: every row has its id; finished: swapped
    phase text NOT NULL DEFAULT 'prepared',
    unit integer NOT NULL DEFAULT 0,
    next_block bigint NOT NULL DEFAULT 0,
    rows_done bigint NOT NULL DEFAULT 0,
    rows_estimate bigint,
    started_at timestamptz,
    updated_at timestamptz,
    rows_per_second double precision
);
ALTER TABLE _pg_shard_id.conversions ENABLE ROW LEVEL SECURITY;
CREATE POLICY owner_only ON _pg_shard_id.conversions
    USING (pg_catalog.pg_has_role((SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = relid), 'USAGE'));
GRANT SELECT, INSERT, UPDATE, DELETE ON _pg_shard_id.conversions TO PUBLIC;

CREATE VIEW shard_id_conversions WITH (security_barrier, security_invoker) AS
SELECT table_name, phase, rows_done, rows_estimate,
       round(100.0 * rows_done / nullif(greatest(rows_estimate, rows_done), 0), 1) AS percent_done,
       round(rows_per_second::numeric) AS rows_per_second,
       CASE WHEN rows_per_second > 0 AND phase = 'filling'
            THEN make_interval(secs => round(greatest(rows_estimate - rows_done, 0) / rows_per_second))
       END AS time_left,
       started_at, updated_at
  FROM _pg_shard_id.conversions;
GRANT SELECT ON shard_id_conversions TO PUBLIC;

-- A relation's name with its schema, quoted: what a trigger, run under another search_path, reads.
CREATE FUNCTION _pg_shard_id.qualified(rel regclass) RETURNS text
LANGUAGE sql STABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    SELECT format('%I.%I', n.nspname, c.relname)
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = rel
$$;

-- The leaves of a relation's partition tree, or the table itself when it has none (pg_partition_tree
-- gives no row for a table that is not partitioned).
CREATE FUNCTION _pg_shard_id.leaves(rel regclass) RETURNS SETOF regclass
LANGUAGE sql STABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    SELECT t.relid FROM pg_partition_tree(rel) t WHERE t.isleaf
    UNION
    SELECT c.oid::regclass FROM pg_class c WHERE c.oid = rel AND c.relkind = 'r'
$$;

-- The foreign keys that reference the key column of a table (one column each, declared on the
-- referencing table, not a partition's copy): what a conversion carries. A foreign key to another
-- unique column of the table is not touched (its values do not change).
CREATE FUNCTION _pg_shard_id.conversion_references(tbl regclass, key_column name)
RETURNS TABLE (rel regclass, conname name, fk_column name, not_null boolean, def text)
LANGUAGE sql STABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.conrelid::regclass, c.conname, a.attname, a.attnotnull, pg_get_constraintdef(c.oid)
      FROM pg_constraint c
      JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
     WHERE c.contype = 'f' AND c.confrelid = tbl AND c.conparentid = 0
       AND c.confkey = ARRAY[(SELECT k.attnum FROM pg_attribute k WHERE k.attrelid = tbl AND k.attname = key_column)]
     ORDER BY c.conrelid, c.conname
$$;

-- The work of a conversion, in a fixed order: each leaf of the table (its blocks get ids), then
-- each leaf of each referencing table (its blocks get the referenced row's new id).
CREATE FUNCTION _pg_shard_id.conversion_units(tbl regclass, key_column name, new_column name)
RETURNS TABLE (unit integer, kind text, rel regclass, fk_column name, fk_new_column name, fk_name name)
LANGUAGE sql STABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    WITH leaves AS (
        SELECT 'table'::text AS kind, t AS rel, NULL::name AS fk_column,
               NULL::name AS fk_new_column, NULL::name AS fk_name
          FROM _pg_shard_id.leaves(tbl) t
        UNION ALL
        SELECT 'child', t, r.fk_column, (r.fk_column || '_' || new_column)::name, r.conname
          FROM _pg_shard_id.conversion_references(tbl, key_column) r
          CROSS JOIN LATERAL _pg_shard_id.leaves(r.rel) t
    )
    SELECT (row_number() OVER (ORDER BY kind DESC, rel::oid, fk_name))::integer - 1, *
      FROM leaves
$$;

-- The id a converted row gets: one at its own time (next_shard_id_at), or a live id when its time
-- is less than 1.5 s past, or ahead (next_shard_id_at refuses times within 1 s of the clock, and
-- such a time has no past id yet). The one place of that rule: the row trigger, the batches and
-- the finish's sweep call it. No SET clause and not STRICT, so that the planner inlines it into
-- the batches' UPDATE (a NULL time gives NULL, as next_shard_id_at does); names are qualified.
CREATE FUNCTION _pg_shard_id.conversion_id(seq regclass, shard integer, ts timestamptz)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT CASE WHEN ts OPERATOR(pg_catalog.>)
                     (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) pg_catalog.interval '1.5 s')
                THEN @extschema@.next_shard_id(seq, shard)
                ELSE @extschema@.next_shard_id_at(seq, shard, ts) END
$$;

-- Fills the new column of a row an UPDATE or INSERT left without one (a row moved behind the
-- batches, or inserted with the column named and NULL); the trigger's WHEN clause calls it only
-- then. A row whose time is less than 1 second past (or ahead) gets a live id: its time has no
-- past id yet. TG_ARGV: new column, time column, sequence, shard.
CREATE FUNCTION _pg_shard_id.conversion_fill_row() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    ts timestamptz := (to_jsonb(NEW) ->> TG_ARGV[1])::timestamptz;
BEGIN
    NEW := jsonb_populate_record(NEW, jsonb_build_object(TG_ARGV[0],
               _pg_shard_id.conversion_id(TG_ARGV[2]::regclass, TG_ARGV[3]::integer, ts)));
    RETURN NEW;
EXCEPTION WHEN object_not_in_prerequisite_state THEN
    -- the new column's index is not built yet (between the prepare and the index build): the
    -- row keeps no id for now; the batches, which start once the index exists, give it one
    RETURN NEW;
END $$;

-- Gives a referencing row the new id of the row it references (the triggers' WHEN clauses call
-- it for a new row, or an updated reference). TG_ARGV: foreign key column, its new column, the
-- referenced table, its key column and that column's type, its new column.
CREATE FUNCTION _pg_shard_id.conversion_fill_reference() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    new_id bigint;
BEGIN
    -- (the key compared in its own type, so that the lookup uses the primary key; a reference
    -- set to NULL gets NULL)
    IF to_jsonb(NEW) ->> TG_ARGV[0] IS NOT NULL THEN
        EXECUTE format('SELECT %I FROM %s WHERE %I = $1::%s', TG_ARGV[5], TG_ARGV[2], TG_ARGV[3], TG_ARGV[4])
           INTO new_id USING to_jsonb(NEW) ->> TG_ARGV[0];
    END IF;
    NEW := jsonb_populate_record(NEW, jsonb_build_object(TG_ARGV[1], new_id));
    RETURN NEW;
END $$;

CREATE PROCEDURE shard_id_convert_prepare(tbl regclass, time_column name, seq regclass, shard integer,
                                          new_column name DEFAULT 'shard_id')
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    state _pg_shard_id.conversions;
    key_column name;
    u record;
    missing text[];
    bad bigint;
    epoch_ts timestamptz;
BEGIN
    IF tbl IS NULL OR time_column IS NULL OR seq IS NULL OR shard IS NULL OR new_column IS NULL THEN
        RAISE EXCEPTION 'pg_shard_id: shard_id_convert_prepare takes no NULL argument' USING ERRCODE = '22004';
    END IF;
    IF NOT pg_has_role((SELECT relowner FROM pg_class WHERE oid = tbl), 'USAGE') THEN
        RAISE EXCEPTION 'pg_shard_id: only the owner of % can convert it', tbl USING ERRCODE = '42501';
    END IF;
    SELECT * INTO state FROM _pg_shard_id.conversions c WHERE c.relid = tbl;
    -- the record of a dropped table whose oid came back, or of a conversion whose column was
    -- dropped by hand, is stale
    IF state.relid IS NOT NULL AND state.phase <> 'finished' AND NOT EXISTS (
           SELECT FROM pg_attribute WHERE attrelid = tbl AND attname = state.new_column AND NOT attisdropped) THEN
        DELETE FROM _pg_shard_id.conversions c WHERE c.relid = tbl;
        state := NULL;
    END IF;
    IF state.relid IS NOT NULL THEN
        RAISE NOTICE 'pg_shard_id: % is prepared already (%)', tbl, state.phase;
        RETURN;
    END IF;
    -- the key: the one column of the primary key (of a partitioned table: the one that is not
    -- in the partition key, which its primary key must hold)
    SELECT array_agg(a.attname) INTO missing
      FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
     WHERE c.conrelid = tbl AND c.contype = 'p'
       AND a.attnum <> ALL (coalesce((SELECT p.partattrs::int2[] FROM pg_partitioned_table p WHERE p.partrelid = tbl), '{}'));
    IF cardinality(missing) IS DISTINCT FROM 1 THEN
        RAISE EXCEPTION 'pg_shard_id: % has no single-column primary key to convert', tbl
            USING ERRCODE = '55000',
                  DETAIL = CASE WHEN missing IS NULL THEN 'It has no primary key, or only partition key columns in it.'
                                ELSE format('Its primary key has %s columns besides the partition key: %s.',
                                            cardinality(missing), array_to_string(missing, ', ')) END;
    END IF;
    key_column := missing[1];
    missing := NULL;
    IF (SELECT atttypid FROM pg_attribute WHERE attrelid = tbl AND attname = time_column AND NOT attisdropped)
       IS DISTINCT FROM 'timestamptz'::regtype THEN
        RAISE EXCEPTION 'pg_shard_id: %.% is not a timestamptz column', tbl, time_column
            USING ERRCODE = '42804',
                  HINT = 'Add a timestamptz column holding each row''s time (a timestamp without time zone means nothing without a zone), then convert.';
    END IF;
    IF EXISTS (SELECT FROM pg_attribute WHERE attrelid = tbl AND attname = new_column AND NOT attisdropped) THEN
        RAISE EXCEPTION 'pg_shard_id: % already has a column %', tbl, new_column
            USING ERRCODE = '42701', HINT = 'Name another with new_column => ...';
    END IF;
    SELECT array_agg(format('%s (%s)', c.conrelid::regclass, c.conname)) INTO missing
      FROM pg_constraint c WHERE c.contype = 'f' AND c.confrelid = tbl AND c.conparentid = 0
       AND cardinality(c.confkey) > 1
       AND (SELECT k.attnum FROM pg_attribute k WHERE k.attrelid = tbl AND k.attname = key_column) = ANY (c.confkey);
    IF missing IS NOT NULL THEN
        RAISE EXCEPTION 'pg_shard_id: composite foreign keys reference %: %', tbl, array_to_string(missing, ', ')
            USING ERRCODE = '0A000';
    END IF;
    -- every row needs a time the layout holds (a time less than 1.5 s past, or ahead of the
    -- clock, gets a live id: rows keep being inserted while this runs)
    epoch_ts := (SELECT epoch FROM @extschema@.pg_shard_id_info());
    EXECUTE format('SELECT count(*) FROM %s WHERE %I IS NULL OR %I < $1', tbl, time_column, time_column)
       INTO bad USING epoch_ts;
    IF bad > 0 THEN
        RAISE EXCEPTION 'pg_shard_id: % rows of % have a % that is NULL or before the epoch (%)',
                        bad, tbl, time_column, to_char(epoch_ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"')
            USING ERRCODE = '22023', HINT = 'Fix or delete those rows, then convert.';
    END IF;
    -- the sequence's first id, before its column exists: its data floor is read now (nothing is
    -- stored yet), not at the first insert, when the new column has no index and would make new
    -- ids start 10 minutes ahead of the clock ("cannot tell")
    PERFORM @extschema@.next_shard_id(seq, shard);
    EXECUTE format('ALTER TABLE %s ADD COLUMN %I bigint', tbl, new_column);
    EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT @extschema@.next_shard_id(%L::regclass, %s)',
                   tbl, new_column, seq::text, shard);
    EXECUTE format('CREATE TRIGGER %I BEFORE INSERT OR UPDATE ON %s FOR EACH ROW '
                   'WHEN (NEW.%I IS NULL AND NEW.%I IS NOT NULL) EXECUTE FUNCTION '
                   '_pg_shard_id.conversion_fill_row(%L, %L, %L, %L)',
                   'shard_id_convert_' || new_column, tbl, new_column, time_column,
                   new_column, time_column, _pg_shard_id.qualified(seq), shard);
    FOR u IN SELECT DISTINCT r.rel, r.fk_column, (r.fk_column || '_' || new_column)::name AS fk_new_column
               FROM _pg_shard_id.conversion_references(tbl, key_column) r LOOP
        EXECUTE format('ALTER TABLE %s ADD COLUMN %I bigint', u.rel, u.fk_new_column);
        EXECUTE format('CREATE TRIGGER %I BEFORE INSERT ON %s FOR EACH ROW '
                       'WHEN (NEW.%I IS NOT NULL AND NEW.%I IS NULL) EXECUTE FUNCTION '
                       '_pg_shard_id.conversion_fill_reference(%L, %L, %L, %L, %L, %L)',
                       'shard_id_convert_' || u.fk_new_column, u.rel, u.fk_column, u.fk_new_column,
                       u.fk_column, u.fk_new_column, _pg_shard_id.qualified(tbl), key_column,
                       (SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = tbl AND attname = key_column),
                       new_column);
        EXECUTE format('CREATE TRIGGER %I BEFORE UPDATE ON %s FOR EACH ROW '
                       'WHEN (NEW.%I IS DISTINCT FROM OLD.%I OR (NEW.%I IS NOT NULL AND NEW.%I IS NULL)) '
                       'EXECUTE FUNCTION _pg_shard_id.conversion_fill_reference(%L, %L, %L, %L, %L, %L)',
                       'shard_id_convert_' || u.fk_new_column || '_update', u.rel, u.fk_column, u.fk_column,
                       u.fk_column, u.fk_new_column, u.fk_column, u.fk_new_column, _pg_shard_id.qualified(tbl), key_column,
                       (SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = tbl AND attname = key_column),
                       new_column);
    END LOOP;
    INSERT INTO _pg_shard_id.conversions (relid, table_name, key_column, time_column, seq, shard, new_column,
                                          rows_estimate, started_at, updated_at)
    SELECT tbl, tbl::text, key_column, time_column, seq, shard, new_column,
           (SELECT sum(greatest(c.reltuples, 0))::bigint FROM pg_class c
             WHERE c.oid IN (SELECT rel FROM _pg_shard_id.conversion_units(tbl, key_column, new_column))),
           clock_timestamp(), clock_timestamp()
    RETURNING * INTO state;
    RAISE NOTICE '%', format('pg_shard_id: %s is prepared; build its indexes (SELECT * FROM shard_id_convert_indexes(%L) \gexec), then CALL shard_id_convert(%L)',
                             tbl, tbl::text, tbl::text);
END $$;

-- The CREATE INDEX CONCURRENTLY statements a prepared conversion still needs (none: ready):
-- an index on each new column, which next_shard_id_at reads and the swap turns into the primary
-- key and the foreign keys' lookups. Run them in psql with \gexec.
CREATE FUNCTION shard_id_convert_indexes(tbl regclass) RETURNS SETOF text
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    state _pg_shard_id.conversions;
    pk_columns text;
BEGIN
    SELECT * INTO state FROM _pg_shard_id.conversions c WHERE c.relid = tbl;
    IF state.relid IS NULL OR state.phase = 'finished' THEN
        RETURN;
    END IF;
    SELECT string_agg(quote_ident(CASE a.attname WHEN state.key_column THEN state.new_column ELSE a.attname END), ', ' ORDER BY k.i)
      INTO pk_columns
      FROM pg_constraint c, unnest(c.conkey) WITH ORDINALITY k(attnum, i)
      JOIN pg_attribute a ON a.attrelid = tbl AND a.attnum = k.attnum
     WHERE c.conrelid = tbl AND c.contype = 'p';
    -- an index on each new column: next_shard_id_at reads the converted table's, and the swap
    -- makes the primary key and the foreign keys' lookups from them
    RETURN QUERY SELECT s.s FROM (
        SELECT format('CREATE UNIQUE INDEX CONCURRENTLY ON %s (%I);', tbl, state.new_column) AS s
         WHERE NOT EXISTS (SELECT FROM pg_index i WHERE i.indrelid = tbl AND i.indisunique AND i.indisvalid
                              AND i.indnkeyatts = 1 AND i.indpred IS NULL
                              AND i.indkey[0] = (SELECT attnum FROM pg_attribute WHERE attrelid = tbl AND attname = state.new_column))
           AND NOT EXISTS (SELECT FROM pg_partitioned_table p WHERE p.partrelid = tbl)
        UNION ALL
        -- (a partition's: unique on the primary key's columns with the new one in the key's place,
        -- which the swap attaches to the partitioned table's new primary key)
        SELECT CASE w.kind WHEN 'table' THEN format('CREATE UNIQUE INDEX CONCURRENTLY ON %s (%s);', w.rel, pk_columns)
                           ELSE format('CREATE INDEX CONCURRENTLY ON %s (%I);', w.rel, w.fk_new_column) END
          FROM _pg_shard_id.conversion_units(tbl, state.key_column, state.new_column) w
         WHERE NOT EXISTS (SELECT FROM pg_index i WHERE i.indrelid = w.rel AND i.indisvalid AND i.indpred IS NULL
                              AND (i.indisunique OR w.kind = 'child')
                              AND i.indkey[0] = (SELECT attnum FROM pg_attribute WHERE attrelid = w.rel
                                                    AND attname = CASE w.kind WHEN 'table' THEN state.new_column ELSE w.fk_new_column END))
           AND (w.kind = 'child' OR EXISTS (SELECT FROM pg_partitioned_table p WHERE p.partrelid = tbl))
    ) s ORDER BY 1;
END $$;

CREATE PROCEDURE shard_id_convert(tbl regclass, batch_rows integer DEFAULT 10000)
-- (no SET clause: a procedure with one cannot COMMIT; every object of this extension is named
-- with its schema, and pg_catalog is searched first)
LANGUAGE plpgsql AS $$
DECLARE
    state _pg_shard_id.conversions;
    u record;
    missing text[];
    blocks bigint;
    step bigint;
    done bigint;
    t0 timestamptz;
    id_expression text;
BEGIN
    IF tbl IS NULL OR batch_rows IS NULL THEN
        RAISE EXCEPTION 'pg_shard_id: shard_id_convert takes no NULL argument' USING ERRCODE = '22004';
    END IF;
    IF batch_rows < 1 THEN
        RAISE EXCEPTION 'pg_shard_id: batch_rows must be at least 1, not %', batch_rows USING ERRCODE = '22023';
    END IF;
    SELECT * INTO state FROM _pg_shard_id.conversions c WHERE c.relid = tbl;
    IF state.relid IS NULL THEN
        RAISE EXCEPTION 'pg_shard_id: % is not prepared for conversion', tbl
            USING ERRCODE = '55000', HINT = 'CALL shard_id_convert_prepare(table, time_column, sequence, shard) first.';
    END IF;
    IF state.phase = 'finished' THEN
        RAISE NOTICE 'pg_shard_id: % was converted already', tbl;
        RETURN;
    END IF;
    missing := ARRAY(SELECT @extschema@.shard_id_convert_indexes(tbl));
    IF cardinality(missing) > 0 THEN
        RAISE EXCEPTION 'pg_shard_id: % needs these indexes before its rows get their ids', tbl
            USING ERRCODE = '55000',
                  DETAIL = array_to_string(missing, E'\n'),
                  HINT = format('CREATE INDEX CONCURRENTLY cannot run inside a procedure: SELECT * FROM shard_id_convert_indexes(%L) \gexec in psql runs them. Rows inserted meanwhile already get time-ordered ids from the new column''s DEFAULT.', tbl::text);
    END IF;
    UPDATE _pg_shard_id.conversions c SET phase = 'filling' WHERE c.relid = tbl AND phase = 'prepared';
    COMMIT;
    SELECT * INTO state FROM _pg_shard_id.conversions c WHERE c.relid = tbl;
    -- a row's id at its own time; a time less than 1.5 s past (a row written while the
    -- conversion was prepared) gets a live id, as in the trigger
    id_expression := format('_pg_shard_id.conversion_id(%L::regclass, %s, %I)',
                            state.seq::text, state.shard, state.time_column);
    -- the batches: block ranges of each unit, one transaction each
    FOR u IN SELECT * FROM _pg_shard_id.conversion_units(tbl, state.key_column, state.new_column) un
              WHERE un.unit >= state.unit ORDER BY un.unit LOOP
        IF u.unit > state.unit THEN
            UPDATE _pg_shard_id.conversions c SET unit = u.unit, next_block = 0 WHERE c.relid = tbl
            RETURNING * INTO state;
        END IF;
        LOOP
            blocks := pg_relation_size(u.rel) / current_setting('block_size')::bigint;
            EXIT WHEN state.next_block >= blocks;
            -- blocks for about batch_rows rows, by the rows per block the statistics say
            step := greatest(1, (batch_rows / greatest(1, (SELECT reltuples / nullif(relpages, 0) FROM pg_class WHERE oid = u.rel)))::bigint);
            t0 := clock_timestamp();
            IF u.kind = 'table' THEN
                EXECUTE format('UPDATE %s SET %I = %s '
                               'WHERE ctid >= format(''(%%s,0)'', $1::bigint)::tid AND ctid < format(''(%%s,0)'', $2::bigint)::tid AND %I IS NULL',
                               u.rel, state.new_column, id_expression, state.new_column)
                   USING state.next_block, state.next_block + step;
            ELSE
                EXECUTE format('UPDATE %s c SET %I = p.%I FROM %s p '
                               'WHERE c.ctid >= format(''(%%s,0)'', $1::bigint)::tid AND c.ctid < format(''(%%s,0)'', $2::bigint)::tid '
                               '  AND c.%I IS NULL AND p.%I = c.%I',
                               u.rel, u.fk_new_column, state.new_column, tbl, u.fk_new_column, state.key_column, u.fk_column)
                   USING state.next_block, state.next_block + step;
            END IF;
            GET DIAGNOSTICS done = ROW_COUNT;
            UPDATE _pg_shard_id.conversions c
               SET next_block = state.next_block + step, rows_done = rows_done + done, updated_at = clock_timestamp(),
                   rows_per_second = CASE WHEN done > 0 THEN
                       coalesce(0.8 * rows_per_second, 0) + (CASE WHEN rows_per_second IS NULL THEN 1.0 ELSE 0.2 END)
                       * done / greatest(extract(epoch FROM clock_timestamp() - t0), 0.001) ELSE rows_per_second END
             WHERE c.relid = tbl RETURNING * INTO state;
            COMMIT;
            SELECT * INTO state FROM _pg_shard_id.conversions c WHERE c.relid = tbl;
            RAISE NOTICE 'pg_shard_id: % (%): % of about % rows, % rows/s, about % left',
                tbl, u.rel, state.rows_done, greatest(state.rows_estimate, state.rows_done),
                round(state.rows_per_second::numeric),
                CASE WHEN state.rows_per_second > 0
                     THEN make_interval(secs => round(greatest(state.rows_estimate - state.rows_done, 0) / state.rows_per_second))::text
                     ELSE '?' END;
        END LOOP;
    END LOOP;
    -- the sweep: rows still without an id (an UPDATE that moved a row is filled by the trigger;
    -- this catches anything else) through the new column's index
    EXECUTE format('UPDATE %s SET %I = %s WHERE %I IS NULL AND %I IS NOT NULL',
                   tbl, state.new_column, id_expression, state.new_column, state.time_column);
    GET DIAGNOSTICS done = ROW_COUNT;
    FOR u IN SELECT * FROM _pg_shard_id.conversion_units(tbl, state.key_column, state.new_column) un WHERE un.kind = 'child' LOOP
        EXECUTE format('UPDATE %s c SET %I = p.%I FROM %s p WHERE c.%I IS NULL AND c.%I IS NOT NULL AND p.%I = c.%I',
                       u.rel, u.fk_new_column, state.new_column, tbl, u.fk_new_column, u.fk_column, state.key_column, u.fk_column);
    END LOOP;
    UPDATE _pg_shard_id.conversions c SET phase = 'filled', rows_done = rows_done + done, updated_at = clock_timestamp()
     WHERE c.relid = tbl;
    COMMIT;
    RAISE NOTICE '%', format('pg_shard_id: every row of %s has its time-ordered id in %I; CALL shard_id_convert_finish(%L) swaps it in',
        tbl, state.new_column, tbl::text);
END $$;

CREATE PROCEDURE shard_id_convert_finish(tbl regclass)
LANGUAGE plpgsql AS $$
DECLARE
    state _pg_shard_id.conversions;
    u record;
    pk_name name;
    pk_index regclass;
    old_name name;
    check_name name;
    fks text[] := '{}';
    adds text[] := '{}';
    partitioned boolean := EXISTS (SELECT FROM pg_partitioned_table p WHERE p.partrelid = tbl);
    pk_columns text;
BEGIN
    SELECT * INTO state FROM _pg_shard_id.conversions c WHERE c.relid = tbl;
    IF state.phase = 'finished' THEN
        -- swapped already: validate what an interrupted call left NOT VALID
        FOR u IN SELECT c.conrelid::regclass AS rel, c.conname FROM pg_constraint c
                  WHERE c.contype = 'f' AND c.confrelid = tbl AND c.conparentid = 0 AND NOT c.convalidated LOOP
            EXECUTE format('ALTER TABLE %s VALIDATE CONSTRAINT %I', u.rel, u.conname);
            COMMIT;
        END LOOP;
        RAISE NOTICE 'pg_shard_id: % was converted already; its foreign keys are valid', tbl;
        RETURN;
    END IF;
    IF state.relid IS NULL OR state.phase <> 'filled' THEN
        RAISE EXCEPTION 'pg_shard_id: % is not ready to swap (%)', tbl, coalesce(state.phase, 'never converted')
            USING ERRCODE = '55000', HINT = 'CALL shard_id_convert(...) until it says every row has its id.';
    END IF;
    old_name := (state.key_column || '_before_shard_id')::name;
    check_name := ('shard_id_convert_' || state.new_column || '_not_null')::name;
    -- before any lock: NOT NULL as a validated CHECK (SHARE UPDATE EXCLUSIVE: writes go on), so
    -- that SET NOT NULL under the lock needs no scan
    -- (the CHECK is enforced for new rows once added, which waits for the transactions in flight;
    -- what those left without an id is filled before the validation)
    IF NOT EXISTS (SELECT FROM pg_constraint WHERE conrelid = tbl AND conname = check_name) THEN
        EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%I IS NOT NULL) NOT VALID', tbl, check_name, state.new_column);
        COMMIT;
    END IF;
    EXECUTE format('UPDATE %s SET %I = _pg_shard_id.conversion_id(%L::regclass, %s, %I) WHERE %I IS NULL',
                   tbl, state.new_column, state.seq::text, state.shard, state.time_column, state.new_column);
    COMMIT;
    EXECUTE format('ALTER TABLE %s VALIDATE CONSTRAINT %I', tbl, check_name);
    COMMIT;
    -- each referencing column: its new column holds an id wherever the old one holds a key (a
    -- CHECK, enforced for new rows from here on; added once the transactions in flight ended,
    -- then what they left without one is filled, then validated); NOT NULL in the swap where
    -- the old column is NOT NULL
    FOR u IN SELECT DISTINCT r.rel, r.fk_column, (r.fk_column || '_' || state.new_column)::name AS fk_new_column, r.not_null
               FROM _pg_shard_id.conversion_references(tbl, state.key_column) r LOOP
        IF NOT EXISTS (SELECT FROM pg_constraint WHERE conrelid = u.rel AND conname = ('shard_id_convert_' || u.fk_new_column)::name) THEN
            EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%I IS NULL OR %I IS NOT NULL) NOT VALID',
                           u.rel, 'shard_id_convert_' || u.fk_new_column, u.fk_column, u.fk_new_column);
            COMMIT;
        END IF;
        EXECUTE format('UPDATE %s c SET %I = p.%I FROM %s p WHERE c.%I IS NULL AND c.%I IS NOT NULL AND p.%I = c.%I',
                       u.rel, u.fk_new_column, state.new_column, tbl, u.fk_new_column, u.fk_column, state.key_column, u.fk_column);
        COMMIT;
        EXECUTE format('ALTER TABLE %s VALIDATE CONSTRAINT %I', u.rel, 'shard_id_convert_' || u.fk_new_column);
        COMMIT;
        IF u.not_null THEN  -- proves the new column NOT NULL, so SET NOT NULL needs no scan
            IF NOT EXISTS (SELECT FROM pg_constraint WHERE conrelid = u.rel AND conname = ('shard_id_convert_nn_' || u.fk_new_column)::name) THEN
                EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%I IS NOT NULL) NOT VALID',
                               u.rel, 'shard_id_convert_nn_' || u.fk_new_column, u.fk_new_column);
                COMMIT;
            END IF;
            EXECUTE format('ALTER TABLE %s VALIDATE CONSTRAINT %I', u.rel, 'shard_id_convert_nn_' || u.fk_new_column);
            COMMIT;
        END IF;
    END LOOP;
    -- the swap: one short transaction, no scan
    SET LOCAL lock_timeout = '10s';
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', tbl);
    -- the foreign keys: dropped (the old primary key cannot go while they stand), their columns
    -- swapped; made again on the new columns once the new primary key stands
    FOR u IN SELECT r.rel, r.conname, r.fk_column, (r.fk_column || '_' || state.new_column)::name AS fk_new_column,
                    r.def, r.not_null
               FROM _pg_shard_id.conversion_references(tbl, state.key_column) r LOOP
        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', u.rel);
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', u.rel, u.conname);
        EXECUTE format('DROP TRIGGER %I ON %s', 'shard_id_convert_' || u.fk_new_column, u.rel);
        EXECUTE format('DROP TRIGGER %I ON %s', 'shard_id_convert_' || u.fk_new_column || '_update', u.rel);
        EXECUTE format('ALTER TABLE %s RENAME COLUMN %I TO %I', u.rel, u.fk_column, (u.fk_column || '_before_shard_id')::name);
        EXECUTE format('ALTER TABLE %s RENAME COLUMN %I TO %I', u.rel, u.fk_new_column, u.fk_column);
        IF u.not_null THEN
            -- the old column is no longer given; the new one is NOT NULL (its validated CHECK
            -- proves it: no scan)
            EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP NOT NULL', u.rel, (u.fk_column || '_before_shard_id')::name);
            EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', u.rel, u.fk_column);
            EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', u.rel, 'shard_id_convert_nn_' || u.fk_new_column);
        END IF;
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', u.rel, 'shard_id_convert_' || u.fk_new_column);
        -- the same action clauses, on the new columns; validated after the commit
        adds := adds || format('ALTER TABLE %s ADD CONSTRAINT %I %s NOT VALID', u.rel, u.conname,
                       regexp_replace(u.def, '^FOREIGN KEY \([^)]*\) REFERENCES [^(]*\([^)]*\)',
                                      format('FOREIGN KEY (%I) REFERENCES %s(%I)', u.fk_column, tbl, state.key_column)));
        fks := fks || format('ALTER TABLE %s VALIDATE CONSTRAINT %I', u.rel, u.conname);
    END LOOP;
    SELECT c.conname, c.conindid::regclass,
           (SELECT string_agg(quote_ident(CASE a.attname WHEN state.key_column THEN state.new_column ELSE a.attname END), ', ' ORDER BY k.i)
              FROM unnest(c.conkey) WITH ORDINALITY k(attnum, i)
              JOIN pg_attribute a ON a.attrelid = tbl AND a.attnum = k.attnum)
      INTO pk_name, pk_index, pk_columns
      FROM pg_constraint c WHERE c.conrelid = tbl AND c.contype = 'p';
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', tbl, pk_name);
    EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', tbl, state.new_column);
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', tbl, check_name);
    EXECUTE format('DROP TRIGGER %I ON %s', 'shard_id_convert_' || state.new_column, tbl);
    IF partitioned THEN
        -- each partition's unique index built concurrently becomes its primary key (no scan);
        -- the partitioned table's primary key then attaches them instead of building new ones
        -- (PostgreSQL attaches a partition's index only when a constraint owns it)
        FOR u IN SELECT l AS leaf, (SELECT i.indexrelid::regclass FROM pg_index i
                                     WHERE i.indrelid = l AND i.indisunique AND i.indisvalid AND i.indpred IS NULL
                                       AND i.indkey[0] = (SELECT attnum FROM pg_attribute WHERE attrelid = l AND attname = state.new_column)
                                     ORDER BY i.indexrelid LIMIT 1) AS idx
                   FROM _pg_shard_id.leaves(tbl) l LOOP
            EXECUTE format('ALTER TABLE %s ADD PRIMARY KEY USING INDEX %s', u.leaf, u.idx);
        END LOOP;
        EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I PRIMARY KEY (%s)', tbl, pk_name, pk_columns);
    ELSE
        EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I PRIMARY KEY USING INDEX %s', tbl, pk_name,
                       (SELECT i.indexrelid::regclass FROM pg_index i WHERE i.indrelid = tbl AND i.indisunique AND i.indisvalid
                           AND i.indnkeyatts = 1 AND i.indpred IS NULL
                           AND i.indkey[0] = (SELECT attnum FROM pg_attribute WHERE attrelid = tbl AND attname = state.new_column)
                         LIMIT 1));
    END IF;
    EXECUTE format('ALTER TABLE %s RENAME COLUMN %I TO %I', tbl, state.key_column, old_name);
    EXECUTE format('ALTER TABLE %s RENAME COLUMN %I TO %I', tbl, state.new_column, state.key_column);
    -- the old key need not be given any more (it keeps its DEFAULT, if any); a partition key
    -- stays NOT NULL
    BEGIN
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP NOT NULL', tbl, old_name);
    EXCEPTION WHEN others THEN
        NULL;
    END;
    FOR i IN 1 .. cardinality(adds) LOOP
        EXECUTE adds[i];
    END LOOP;
    UPDATE _pg_shard_id.conversions c SET phase = 'finished', updated_at = clock_timestamp() WHERE c.relid = tbl;
    COMMIT;
    -- the foreign keys are checked now, while inserts and updates go on
    FOR i IN 1 .. cardinality(fks) LOOP
        EXECUTE fks[i];
        COMMIT;
    END LOOP;
    RAISE NOTICE 'pg_shard_id: %.% now holds the time-ordered ids; the old key is in %', tbl, state.key_column, old_name;
END $$;

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
