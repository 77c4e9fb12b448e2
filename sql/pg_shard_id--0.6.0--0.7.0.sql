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
--
-- A backend's first id reads _pg_shard_id.origin itself (src/origin.rs, issue 57): the SQL
-- functions the older libraries call stay, for a server that runs one of them against this SQL
-- during a rolling upgrade.

COMMENT ON FUNCTION _pg_shard_id.read_origin() IS
    'Internal: the earliest recorded epoch (Unix ms), then the recorded servers (the libraries of 0.4.0 to 0.6.0 call it; 0.7.0 reads the table itself).';
COMMENT ON FUNCTION _pg_shard_id.origin_databases() IS
    'Internal: the recorded databases, 0 for rows recorded before 0.5.0 (the libraries of 0.5.0 and 0.6.0 call it; 0.7.0 reads the table itself).';

ALTER FUNCTION shard_id_mask(bigint, text) PARALLEL RESTRICTED;
ALTER FUNCTION shard_id_unmask(bigint, text) PARALLEL RESTRICTED;
ALTER FUNCTION shard_id_mask_shortcode(bigint, text) PARALLEL RESTRICTED;

CREATE FUNCTION shard_id_mask_keys_record() RETURNS TABLE ("key_id" integer, "check_value" bigint, "recorded" text)
    VOLATILE STRICT PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp
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
-- shard_id_check() runs its SQL with the search_path pinned (issue 49: no name in the
-- extension's SQL is resolved through the caller's path)
ALTER FUNCTION shard_id_check() SET search_path = pg_catalog, pg_temp;
COMMENT ON FUNCTION shard_id_check() IS
    'Checks the setup (preload, lease, epoch, clock, shard numbers, data floor, replication, publications, mask keys, Citus nodes); each row that is not ok says what to fix.';

-- next_shard_id_at (issue 37): ids at past times
CREATE FUNCTION next_shard_id_at("seq" regclass, "shard" integer, "ts" timestamptz) RETURNS bigint
    VOLATILE STRICT PARALLEL UNSAFE
    LANGUAGE c AS 'MODULE_PATHNAME', 'next_shard_id_at_wrapper';
COMMENT ON FUNCTION next_shard_id_at(regclass, integer, timestamptz) IS
    'An id of the sequence and shard at a past time (at least 1 second ago), for history, imports and converting keys: in that millisecond or the first later one with a free remainder, equal to no id stored in a column whose DEFAULT draws from the sequence, nor to one another session holds. Needs shared_preload_libraries.';

-- shard_id_convert (issues 37, 49): sql/convert.sql, whose header explains it
CREATE TABLE _pg_shard_id.conversions (
    relid oid PRIMARY KEY,
    table_name text NOT NULL,
    key_column name NOT NULL,
    time_column name NOT NULL,
    seq regclass NOT NULL,
    shard integer NOT NULL,
    new_column name NOT NULL,
    -- the batches fire the user's triggers (true), or run with session_replication_role = replica
    fire_triggers boolean NOT NULL DEFAULT false,
    -- the caller said every subscriber of the table's publications has the new columns
    subscribers_ready boolean NOT NULL DEFAULT false,
    -- prepared: the column, its DEFAULT and the triggers exist; filling: batches run (unit,
    -- next_block say where); filled: every row has its id; finished: swapped
    phase text NOT NULL DEFAULT 'prepared',
    unit integer NOT NULL DEFAULT 0,
    next_block bigint NOT NULL DEFAULT 0,
    rows_done bigint NOT NULL DEFAULT 0,
    rows_estimate bigint,
    started_at timestamptz,
    updated_at timestamptz,
    rows_per_second double precision,
    -- the foreign keys the swap made again NOT VALID that were valid before it: validated after it
    -- (one the user left NOT VALID stays so)
    validate_after oid[] NOT NULL DEFAULT '{}'
);
ALTER TABLE _pg_shard_id.conversions ENABLE ROW LEVEL SECURITY;
-- (a policy and a view are bound to the objects they name when they are created, by the
-- extension's script: no search_path is read when they run)
CREATE POLICY owner_only ON _pg_shard_id.conversions
    USING (pg_has_role((SELECT c.relowner FROM pg_class c WHERE c.oid = relid), 'USAGE'));
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
LANGUAGE sql STABLE STRICT PARALLEL SAFE ROWS 8 SET search_path = pg_catalog, pg_temp AS $$
    SELECT t.relid FROM pg_partition_tree(rel) t WHERE t.isleaf
    UNION
    SELECT c.oid::regclass FROM pg_class c WHERE c.oid = rel AND c.relkind IN ('r', 'f')
$$;

-- Every relation of a relation's partition tree, the relation itself first.
CREATE FUNCTION _pg_shard_id.tree(rel regclass) RETURNS SETOF regclass
LANGUAGE sql STABLE STRICT PARALLEL SAFE ROWS 8 SET search_path = pg_catalog, pg_temp AS $$
    SELECT rel
    UNION ALL
    SELECT t.relid FROM pg_partition_tree(rel) t WHERE t.relid <> rel
$$;

-- A name the conversion makes: base || suffix, or, when that is longer than PostgreSQL's 63
-- bytes (which would cut it, and two cut names could be one), base shortened on a character
-- boundary with 8 hex digits of its md5 before the suffix. The same inputs, the same name (the
-- prepare, the index step and the finish each find what the others made by it).
CREATE FUNCTION _pg_shard_id.derived_name(base text, suffix text) RETURNS name
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    SELECT CASE WHEN octet_length(base || suffix) <= 63 THEN (base || suffix)::name
           -- (a suffix of more than 54 bytes leaves no room to shorten the base: the whole name
           -- is shortened then, with the md5 of the whole; two long referencing columns that
           -- began alike had one trigger name: the eighteenth review)
           WHEN octet_length(suffix) > 63 - 9 THEN
                ((SELECT substring(base || suffix FOR k) FROM generate_series(length(base || suffix), 0, -1) k
                   WHERE octet_length(substring(base || suffix FOR k)) <= 63 - 9 LIMIT 1)
                 || '_' || left(md5(base || suffix), 8))::name
           ELSE ((SELECT substring(base FOR k) FROM generate_series(length(base), 0, -1) k
                   WHERE octet_length(substring(base FOR k)) <= 63 - 9 - octet_length(suffix) LIMIT 1)
                 || '_' || left(md5(base), 8) || suffix)::name END
$$;

-- The names of the BEFORE INSERT and BEFORE UPDATE triggers that give a referencing column's
-- rows their new reference. PostgreSQL fires the BEFORE ROW triggers of a table in the byte order
-- of their names; these begin with '~', which sorts after every ASCII character, so that they run
-- after the user's triggers and read the reference those left: a user's trigger that set or
-- changed it after them (trg_..., update_...) left the new column naming the old parent, or NULL
-- and the writer failed the finish's CHECK (the twenty-eighth review). A user's BEFORE ROW
-- trigger whose name sorts after them anyway is refused (_pg_shard_id.late_firing_triggers).
CREATE FUNCTION _pg_shard_id.reference_trigger(fk_new_column name, on_update boolean) RETURNS name
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    -- (the INSERT trigger's as '~' and a suffix: derived_name shortens a base to nothing when the
    -- suffix takes its room, and one of a 54-byte column began with '_': the twenty-ninth review)
    SELECT CASE WHEN on_update THEN _pg_shard_id.derived_name('~shard_id_convert_' || fk_new_column, '_update')
                ELSE _pg_shard_id.derived_name('~', 'shard_id_convert_' || fk_new_column) END
$$;

-- The key a conversion replaces: the one column of the table's primary key (of a partitioned
-- table: the one that is not in the partition key, which its primary key must hold). 55000
-- otherwise.
CREATE FUNCTION _pg_shard_id.conversion_key(tbl regclass) RETURNS name
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    found name[];
BEGIN
    SELECT array_agg(a.attname ORDER BY a.attnum) INTO found
      FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
     WHERE c.conrelid = tbl AND c.contype = 'p'
       AND a.attnum <> ALL (coalesce((SELECT p.partattrs::int2[] FROM pg_partitioned_table p WHERE p.partrelid = tbl), '{}'));
    IF cardinality(found) IS DISTINCT FROM 1 THEN
        RAISE EXCEPTION 'pg_shard_id: % has no single-column primary key to convert', tbl
            USING ERRCODE = '55000',
                  DETAIL = CASE WHEN found IS NULL THEN 'It has no primary key, or only partition key columns in it.'
                                ELSE format('Its primary key has %s columns besides the partition key: %s.',
                                            cardinality(found), array_to_string(found, ', ')) END;
    END IF;
    RETURN found[1];
END $$;

-- The foreign keys that reference the key column of a table (one column each, declared on the
-- referencing table, not a partition's copy): what a conversion carries, with the new column each
-- referencing column gets, whether it is validated, and its comment. A foreign key to another
-- unique column of the table is not touched (its values do not change).
CREATE FUNCTION _pg_shard_id.conversion_references(tbl regclass, key_column name, new_column name)
RETURNS TABLE (rel regclass, conname name, fk_column name, fk_new_column name, not_null boolean, def text,
               validated boolean, note text)
LANGUAGE sql STABLE STRICT PARALLEL SAFE ROWS 4 SET search_path = pg_catalog, pg_temp AS $$
    SELECT c.conrelid::regclass, c.conname, a.attname, _pg_shard_id.derived_name(a.attname, '_' || new_column),
           a.attnotnull, pg_get_constraintdef(c.oid), c.convalidated, obj_description(c.oid, 'pg_constraint')
      FROM pg_constraint c
      JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
     WHERE c.contype = 'f' AND c.confrelid = tbl AND c.conparentid = 0
       AND c.confkey = ARRAY[(SELECT k.attnum FROM pg_attribute k WHERE k.attrelid = tbl AND k.attname = key_column)]
       AND cardinality(c.conkey) = 1
     ORDER BY c.conrelid, c.conname
$$;

-- The work of a conversion, in a fixed order: each leaf of the table (its blocks get ids), then
-- each leaf of each referencing table (its blocks get the referenced row's new id).
CREATE FUNCTION _pg_shard_id.conversion_units(tbl regclass, key_column name, new_column name)
RETURNS TABLE (unit integer, kind text, rel regclass, fk_column name, fk_new_column name, fk_name name)
LANGUAGE sql STABLE STRICT PARALLEL SAFE ROWS 16 SET search_path = pg_catalog, pg_temp AS $$
    WITH leaves AS (
        SELECT 'table'::text AS kind, t AS rel, NULL::name AS fk_column,
               NULL::name AS fk_new_column, NULL::name AS fk_name
          FROM _pg_shard_id.leaves(tbl) t
        UNION ALL
        SELECT 'child', t, r.fk_column, r.fk_new_column, r.conname
          FROM _pg_shard_id.conversion_references(tbl, key_column, new_column) r
          CROSS JOIN LATERAL _pg_shard_id.leaves(r.rel) t
    )
    SELECT (row_number() OVER (ORDER BY kind DESC, rel::oid, fk_name))::integer - 1, *
      FROM leaves
$$;

-- The columns a conversion moves, on every relation that holds them: the key, on the table and
-- each relation of its partition tree, and each referencing column, on its table and theirs, with
-- the column numbers there (a partition may number its columns otherwise than its parent), the
-- new column's (NULL before the prepare) and the name the old column is kept under.
CREATE FUNCTION _pg_shard_id.conversion_columns(tbl regclass, key_column name, new_column name)
RETURNS TABLE (rel regclass, top regclass, role text, old_column name, new_column name, kept_as name,
               old_attnum smallint, new_attnum smallint)
LANGUAGE sql STABLE STRICT PARALLEL SAFE ROWS 16 SET search_path = pg_catalog, pg_temp AS $$
    WITH moved AS (
        SELECT tbl AS top, 'key'::text AS role, key_column AS old_column, new_column AS new_column
        UNION
        SELECT r.rel, 'reference', r.fk_column, r.fk_new_column
          FROM _pg_shard_id.conversion_references(tbl, key_column, new_column) r
    )
    SELECT t, m.top, m.role, m.old_column, m.new_column,
           _pg_shard_id.derived_name(m.old_column, '_before_shard_id'), o.attnum, n.attnum
      FROM moved m CROSS JOIN LATERAL _pg_shard_id.tree(m.top) t
      JOIN pg_attribute o ON o.attrelid = t AND o.attname = m.old_column AND NOT o.attisdropped
      LEFT JOIN pg_attribute n ON n.attrelid = t AND n.attname = m.new_column AND NOT n.attisdropped
     ORDER BY m.role, m.top::oid, t::oid
$$;

-- Whether a CHECK is one the conversion made (on a new column): by its name, as the conversion
-- derives it, and by its columns. Neither alone: derived_name shortens long names, and a user's
-- CHECK may name the new column (CHECK (shard_id <> id), taken for the conversion's own, got a
-- twin that failed every writer: the eighteenth review). The conversion's own: the new key's
-- NOT NULL CHECK; on a referencing table, its new column's CHECK (old column NULL or new column
-- not) and NOT NULL CHECK; and the twin of a user's CHECK, on the same columns with the moved
-- ones replaced by their new columns.
CREATE FUNCTION _pg_shard_id.own_constraint(con oid, tbl regclass, key_column name, new_column name) RETURNS boolean
LANGUAGE sql STABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    WITH moves AS (
        SELECT cc.* FROM _pg_shard_id.conversion_columns(tbl, key_column, new_column) cc WHERE cc.new_attnum IS NOT NULL
    )
    SELECT EXISTS (
        SELECT FROM pg_constraint k JOIN moves m ON m.rel = k.conrelid
         WHERE k.oid = con AND k.contype = 'c'
           AND (   (m.role = 'key' AND k.conkey = ARRAY[m.new_attnum]
                    AND k.conname = _pg_shard_id.derived_name('shard_id_convert_' || own_constraint.new_column, '_not_null'))
                OR (m.role = 'reference' AND k.conkey = ARRAY[m.new_attnum]
                    AND k.conname = _pg_shard_id.derived_name('shard_id_convert_' || m.new_column, '_not_null'))
                OR (m.role = 'reference' AND k.conkey::int2[] @> ARRAY[m.old_attnum, m.new_attnum] AND k.conkey::int2[] <@ ARRAY[m.old_attnum, m.new_attnum]
                    AND k.conname = _pg_shard_id.derived_name('shard_id_convert_', m.new_column))
                OR EXISTS (SELECT FROM pg_constraint o
                            WHERE o.conrelid = k.conrelid AND o.contype = 'c' AND o.oid <> k.oid
                              AND k.conname = _pg_shard_id.derived_name(o.conname, '_shard_id_twin')
                              AND NOT o.conkey && ARRAY(SELECT n.new_attnum FROM moves n WHERE n.rel = o.conrelid)
                              AND ARRAY(SELECT DISTINCT coalesce(n.new_attnum, a) FROM unnest(o.conkey) a
                                          LEFT JOIN moves n ON n.rel = o.conrelid AND n.old_attnum = a ORDER BY 1)
                                  = ARRAY(SELECT DISTINCT a FROM unnest(k.conkey) a ORDER BY 1))))
$$;

-- An expression of a relation's catalog (an index's expressions or predicate, a CHECK) with the
-- given columns moved to others, printed as SQL: src/convert.rs. Its argument is a pg_node_tree,
-- which no role can make from text, so only a catalog's own trees reach the C code.
CREATE FUNCTION _pg_shard_id.expression_moved_bytes(tree pg_node_tree, rel regclass, from_columns smallint[],
                                                    to_columns smallint[]) RETURNS bytea[]
LANGUAGE c STABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp
AS 'MODULE_PATHNAME', 'expression_moved_bytes_wrapper';
-- ... as text: the C function hands over the bytes PostgreSQL printed, in the database's
-- encoding, which a Rust string could not hold in a LATIN1 database (the ninth review).
CREATE FUNCTION _pg_shard_id.expression_moved(tree pg_node_tree, rel regclass, from_columns smallint[],
                                              to_columns smallint[]) RETURNS text[]
LANGUAGE sql STABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    SELECT ARRAY(SELECT convert_from(b, getdatabaseencoding())
                   FROM unnest(_pg_shard_id.expression_moved_bytes(tree, rel, from_columns, to_columns)) WITH ORDINALITY u(b, n)
                  ORDER BY n)
$$;

-- CREATE INDEX for an index with the given columns moved (built on the new columns): form
-- 'concurrently' (a table's index, named name), or 'parent' (a partitioned table's, which
-- attaches each partition's matching index, its twin built before, instead of building one). Every part of the index is kept: method, unique,
-- NULLS NOT DISTINCT, each column's expression, collation, operator class and order, INCLUDE,
-- storage parameters, tablespace and predicate.
CREATE FUNCTION _pg_shard_id.index_statement(idx regclass, name name, from_columns smallint[], to_columns smallint[],
                                             form text) RETURNS text
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    i pg_index;
    c pg_class;
    parts text[] := '{}';
    included text[] := '{}';
    exprs text[];
    nexpr integer := 0;
    k integer;
    col smallint;
    part text;
    option smallint;
    moved boolean;
    opclass_options text;
BEGIN
    SELECT * INTO i FROM pg_index WHERE indexrelid = idx;
    SELECT * INTO c FROM pg_class WHERE oid = idx;
    IF i.indexprs IS NOT NULL THEN
        exprs := _pg_shard_id.expression_moved(i.indexprs, i.indrelid, from_columns, to_columns);
    END IF;
    FOR k IN 0 .. i.indnatts - 1 LOOP
        col := i.indkey[k];
        moved := false;
        IF col = 0 THEN
            nexpr := nexpr + 1;
            part := '(' || exprs[nexpr] || ')';
        ELSE
            moved := col = ANY (from_columns);
            IF moved THEN
                col := to_columns[array_position(from_columns, col)];
            END IF;
            SELECT quote_ident(a.attname) INTO part
              FROM pg_attribute a WHERE a.attrelid = i.indrelid AND a.attnum = col;
        END IF;
        IF k >= i.indnkeyatts THEN
            included := included || part;
            CONTINUE;
        END IF;
        -- (a collation other than the column's, or than the default for an expression; an
        -- operator class that is not the default: omitted, the new column's type gets its own)
        -- (a moved column is bigint now: no collation, and its old type's operator class only if
        -- it is bigint's: a text key's text_pattern_ops is not: the ninth review)
        IF i.indcollation[k] <> 0 AND NOT (col <> 0 AND moved) AND i.indcollation[k] <> (CASE WHEN col = 0 THEN 100
               ELSE (SELECT a.attcollation FROM pg_attribute a WHERE a.attrelid = i.indrelid AND a.attnum = col) END) THEN
            part := part || ' COLLATE ' || (SELECT format('%I.%I', n.nspname, o.collname) FROM pg_collation o
                                              JOIN pg_namespace n ON n.oid = o.collnamespace WHERE o.oid = i.indcollation[k]);
        END IF;
        -- (an operator class's parameters, gist_trgm_ops (siglen = 64), are in the index's own
        -- column's attoptions: the class is then named even when it is the default)
        opclass_options := (SELECT string_agg(format('%s = %L', split_part(o, '=', 1), substr(o, strpos(o, '=') + 1)), ', ')
                              FROM pg_attribute a, unnest(a.attoptions) o WHERE a.attrelid = idx AND a.attnum = k + 1);
        IF (NOT (SELECT o.opcdefault FROM pg_opclass o WHERE o.oid = i.indclass[k]) OR opclass_options IS NOT NULL)
           AND NOT (col <> 0 AND moved AND (SELECT o.opcintype FROM pg_opclass o WHERE o.oid = i.indclass[k]) <> 'bigint'::regtype) THEN
            part := part || ' ' || (SELECT format('%I.%I', n.nspname, o.opcname) FROM pg_opclass o
                                      JOIN pg_namespace n ON n.oid = o.opcnamespace WHERE o.oid = i.indclass[k])
                         || coalesce(' (' || opclass_options || ')', '');
        END IF;
        option := i.indoption[k];
        IF option & 1 = 1 THEN
            part := part || ' DESC' || CASE WHEN option & 2 = 0 THEN ' NULLS LAST' ELSE '' END;
        ELSIF option & 2 = 2 THEN
            part := part || ' NULLS FIRST';
        END IF;
        parts := parts || part;
    END LOOP;
    RETURN format('CREATE %sINDEX %s%I ON %s USING %I (%s)%s%s%s%s%s',
                  CASE WHEN i.indisunique THEN 'UNIQUE ' ELSE '' END,
                  CASE form WHEN 'concurrently' THEN 'CONCURRENTLY ' ELSE '' END,
                  name,
                  _pg_shard_id.qualified(i.indrelid),  -- (a temporary table too: run under the user's path)
                  (SELECT amname FROM pg_am WHERE oid = c.relam),
                  array_to_string(parts, ', '),
                  CASE WHEN cardinality(included) > 0 THEN ' INCLUDE (' || array_to_string(included, ', ') || ')' ELSE '' END,
                  CASE WHEN i.indnullsnotdistinct THEN ' NULLS NOT DISTINCT' ELSE '' END,
                  CASE WHEN c.reloptions IS NOT NULL THEN ' WITH (' || array_to_string(c.reloptions, ', ') || ')' ELSE '' END,
                  CASE WHEN c.reltablespace <> 0 THEN ' TABLESPACE ' || quote_ident((SELECT spcname FROM pg_tablespace WHERE oid = c.reltablespace)) ELSE '' END,
                  CASE WHEN i.indpred IS NOT NULL
                       THEN ' WHERE ' || (_pg_shard_id.expression_moved(i.indpred, i.indrelid, from_columns, to_columns))[1]
                       ELSE '' END);
END $$;

-- Whether tbl's key compares with PostgreSQL's own equality: the equality operator of its primary
-- key's btree operator family is in pg_catalog (text's for varchar). The conversion's triggers and
-- sweeps compare keys under search_path = pg_catalog; a type of an extension (ltree) has no such
-- operator, and one that casts to text (citext) would compare otherwise than its foreign keys do
-- (case-insensitively): its references never resolved (the ninth and twelfth reviews).
CREATE FUNCTION _pg_shard_id.equality_of_pg_catalog(tbl regclass, key_column name) RETURNS boolean
LANGUAGE sql STABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    SELECT coalesce(bool_and(o.oprnamespace = 'pg_catalog'::regnamespace), false)
      FROM pg_constraint c
      JOIN pg_index i ON i.indexrelid = c.conindid
      JOIN pg_attribute a ON a.attrelid = tbl AND a.attname = key_column
      CROSS JOIN LATERAL generate_series(0, i.indnkeyatts - 1) k
      JOIN pg_opclass oc ON oc.oid = i.indclass[k]
      JOIN pg_amop ao ON ao.amopfamily = oc.opcfamily AND ao.amopstrategy = 3
                     AND ao.amoplefttype = oc.opcintype AND ao.amoprighttype = oc.opcintype
      JOIN pg_operator o ON o.oid = ao.amopopr
     WHERE c.conrelid = tbl AND c.contype = 'p' AND i.indkey[k] = a.attnum
$$;

-- Why an index on a moved column (col, number attnum, of type old_type, on rel) cannot follow it,
-- as "kind: reason", or NULL: a unique index whose nulls are not distinct (its twin is built while
-- every new value is still NULL); on a key that is not bigint, an index whose expressions,
-- predicate, operator class or access method were chosen for the old type; an expression or
-- predicate that fails for new ids ((id)::int4: every insert would fail once the twin exists),
-- tried on two of them, the other columns NULL (index expressions are IMMUTABLE). The tenth
-- outside review.
CREATE FUNCTION _pg_shard_id.index_refusal(idx oid, rel regclass, col name, attnum smallint, old_type text) RETURNS text
LANGUAGE plpgsql VOLATILE STRICT SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    i pg_index;
    am name;
    row_of text;
    expr text;
    sample bigint;
BEGIN
    SELECT * INTO i FROM pg_index WHERE indexrelid = idx;
    SELECT a.amname INTO am FROM pg_class c JOIN pg_am a ON a.oid = c.relam WHERE c.oid = idx;
    IF i.indisunique AND coalesce((to_jsonb(i) ->> 'indnullsnotdistinct')::boolean, false) THEN
        RETURN format('index with nulls not distinct: %s: its twin is built before the batches, while every row''s new column is NULL, and two NULLs would be duplicates; drop it (or make it NULLS DISTINCT), convert, create it again',
                      pg_get_indexdef(idx));
    END IF;
    -- (its expressions and predicate are tried below, on bigint: those that do not read the key
    -- pass, and lower(code) fails: function lower(bigint) does not exist)
    IF old_type <> 'bigint' AND attnum = ANY (i.indkey::int2[])
       AND (am NOT IN ('btree', 'hash')
            OR EXISTS (SELECT FROM generate_series(0, i.indnkeyatts - 1) k JOIN pg_opclass o ON o.oid = i.indclass[k]
                        WHERE i.indkey[k] = attnum AND NOT o.opcdefault)) THEN
        RETURN format('expression on a key that is not bigint: %s indexes %s.%I, which is %s, with an operator class or an access method for that type; the new column is bigint: drop it, convert, create it again',
                      pg_get_indexdef(idx), rel, col, old_type);
    END IF;
    IF i.indexprs IS NULL AND i.indpred IS NULL THEN
        RETURN NULL;
    END IF;
    row_of := (SELECT string_agg(CASE WHEN a.attnum = index_refusal.attnum THEN format('$1::bigint AS %I', a.attname)
                                      ELSE format('NULL::%s AS %I', format_type(CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END,
                                                                                CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END), a.attname) END,
                                 ', ' ORDER BY a.attnum)
                 FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
                WHERE a.attrelid = rel AND a.attnum > 0 AND NOT a.attisdropped);
    FOR expr IN SELECT pg_get_indexdef(idx, k + 1, true) FROM generate_series(0, i.indnatts - 1) k WHERE i.indkey[k] = 0
                UNION ALL
                SELECT pg_get_expr(i.indpred, i.indrelid, true) WHERE i.indpred IS NOT NULL LOOP
        FOREACH sample IN ARRAY ARRAY[@extschema@.shard_id_compose(now(), 0, 0),
                                      @extschema@.shard_id_compose(now() + interval '10 years', 8191, 1023)] LOOP
            BEGIN
                EXECUTE format('SELECT (%s) FROM (SELECT %s) AS %I', expr, row_of, (SELECT relname FROM pg_class WHERE oid = rel)) USING sample;
            EXCEPTION WHEN OTHERS THEN
                RETURN format('%s: %s: (%s) fails for the new id %s (%s): %s; drop it or change it, convert, create it again',
                              CASE WHEN old_type <> 'bigint' THEN 'expression on a key that is not bigint' ELSE 'index expression new ids fail' END,
                              pg_get_indexdef(idx), expr, sample, SQLERRM,
                              CASE WHEN old_type <> 'bigint' THEN format('it was written for %s, and the new column is bigint', old_type)
                                   ELSE 'every insert would fail once its twin is built' END);
            END;
        END LOOP;
    END LOOP;
    RETURN NULL;
END $$;

-- What PostgreSQL can attach to a column, and what the conversion does with each kind: the rules
-- a reviewer holds against PostgreSQL's catalogs (the kinds conversion_inventory names, and how it
-- finds them: a dependent in pg_depend, or a property of the column itself). A test reads the
-- catalog of the running server (tests/guarantee/test_convert_schema.py: every catalog column that
-- holds a column number or an expression is listed in conversion_catalog_columns) and fails when
-- one turns up that is not.
CREATE FUNCTION _pg_shard_id.conversion_kinds()
RETURNS TABLE (kind text, found_in text, rule text, how text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE ROWS 32 SET search_path = pg_catalog, pg_temp AS $$
    VALUES
    ('primary key', 'pg_index, pg_constraint', 'build', 'a unique index on the new column built concurrently, made the primary key at the swap (ADD PRIMARY KEY USING INDEX; a partitioned table''s from its partitions''), with its comment'),
    ('index', 'pg_depend: pg_class (an index)', 'build', 'built again concurrently with the new column in the old one''s place (expressions and predicate moved in their trees), then swapped in under the old name: comment, replica identity and CLUSTER mark carried'),
    ('unique constraint', 'pg_depend: pg_class (its index), pg_constraint', 'build', 'its index built again concurrently, the constraint made from it at the swap (ADD CONSTRAINT ... UNIQUE USING INDEX), deferrable as it was, with its comment'),
    ('exclusion constraint', 'pg_depend: pg_class (its index), pg_constraint', 'refuse', 'PostgreSQL cannot make one from an index built before (no USING INDEX): drop it, convert, add it again'),
    ('check constraint', 'pg_depend: pg_constraint', 'build', 'added again on the new column NOT VALID, validated before the swap (no lock against writes), swapped in under the old name'),
    ('not-null constraint', 'pg_attribute.attnotnull (pg_constraint on PostgreSQL 18)', 'own', 'the new column is made NOT NULL at the swap from a CHECK validated before; the old one''s is dropped'),
    ('foreign key to the key', 'pg_depend: pg_constraint', 'own', 'a single-column one is carried: its column gets a new column too, and the constraint is made again on the new columns at the swap from its definition, with its comment, and validated after it unless it was NOT VALID before (it stays so); a composite one is refused'),
    ('foreign key from a moved column', 'pg_depend: pg_constraint', 'refuse', 'the key, or a column that references it, itself references another table, or is referenced by another foreign key: convert that table, or drop the constraint'),
    ('view', 'pg_depend: pg_rewrite (_RETURN of a view)', 'carry', 'CREATE OR REPLACE VIEW from its definition and options, read under the swap''s locks (its owner, privileges, comment and dependents stay); refused when the key is not bigint (its column''s type would change) or the caller cannot act as its owner'),
    ('materialized view', 'pg_depend: pg_rewrite (_RETURN of a materialized view)', 'refuse', 'its rows were computed from the old key: drop it, convert, create it again'),
    ('rule', 'pg_depend: pg_rewrite', 'carry', 'CREATE OR REPLACE RULE from its definition, enabled as it was'),
    ('trigger', 'pg_depend: pg_trigger (UPDATE OF columns, WHEN)', 'carry', 'CREATE OR REPLACE TRIGGER (a constraint trigger: dropped and made again) from its definition, enabled as it was'),
    ('policy', 'pg_depend: pg_policy', 'carry', 'ALTER POLICY with its USING and WITH CHECK expressions'),
    ('statistics object', 'pg_depend: pg_statistic_ext', 'carry', 'dropped and made again from its definition, with its statistics target, owner and comment'),
    ('publication', 'pg_depend: pg_publication_rel (column list, row filter)', 'carry', 'the table dropped from the publication and added again with its column list and row filter'),
    ('function', 'pg_depend: pg_proc (a body in SQL-standard form)', 'carry', 'CREATE OR REPLACE from its definition; refused when the key is not bigint or the caller cannot act as its owner'),
    ('generated column', 'pg_depend: pg_attrdef', 'refuse', 'a stored one: PostgreSQL computes it only by rewriting the table (ALTER ... SET EXPRESSION, PostgreSQL 17 and later, under ACCESS EXCLUSIVE); a virtual one (PostgreSQL 18) is carried: SET EXPRESSION, no rewrite'),
    ('sequence owned by the column', 'pg_depend: pg_class (a sequence)', 'keep', 'stays with the old column, which keeps its DEFAULT (or identity) and draws from it until dropped'),
    ('sequence of the new ids', 'pg_depend: pg_class (a sequence owned by a moved column)', 'refuse', 'the sequence given for the new ids is the old key''s own (its serial or identity): dropping the old column would take it, and the new DEFAULT with it; create one for the new ids'),
    ('partition key', 'pg_partitioned_table.partattrs', 'refuse', 'a referencing column in a partition key: its rows would stay where the old values put them'),
    ('column privileges', 'pg_attribute.attacl', 'carry', 'granted on the new column too (GRANT ... (column) ...), by the caller: a grant another role made is recorded as the caller''s'),
    ('column comment', 'pg_description', 'carry', 'COMMENT ON COLUMN, on the new column'),
    ('column security label', 'pg_seclabel', 'carry', 'SECURITY LABEL, on the new column'),
    ('column settings', 'pg_attribute.attstattarget, attoptions', 'carry', 'SET STATISTICS and SET (n_distinct ...), on the new column'),
    ('column storage', 'pg_attribute.attstorage, attcompression, attcollation', 'keep', 'the new column is bigint: plain storage, no compression or collation'),
    ('planner statistics', 'pg_statistic', 'build', 'ANALYZE of the new column before the swap, so that plans after it see its values'),
    ('inheritance', 'pg_inherits (not partitions)', 'refuse', 'a parent''s UPDATE and ALTER reach its children: convert tables without inheritance'),
    ('row type used', 'pg_attribute.atttypid, pg_class.reloftype', 'refuse', 'PostgreSQL refuses a new column in a table whose row type a column uses, or that is of a type'),
    ('foreign table', 'pg_class.relkind', 'refuse', 'its rows are elsewhere'),
    ('subscription target', 'pg_subscription_rel', 'refuse', 'its rows arrive from a publisher by column name, and would put the old keys in the new key column after the swap: convert on the publisher, the subscriber taking the new columns first'),
    ('domain type', 'pg_attribute.atttypid', 'refuse', 'the key or a referencing column of a domain type: the new column is bigint, without the domain''s constraints'),
    ('row security forced', 'pg_class.relforcerowsecurity', 'refuse', 'row security that applies to the owner would hide rows from the conversion, which reads and writes every row as the owner: NO FORCE ROW LEVEL SECURITY for the conversion'),
    ('Citus distributed table', 'pg_dist_partition', 'refuse', 'the new column''s DEFAULT names a shard, which Citus refuses (it takes next_shard_id(seq)), and its shards are tables on the workers: not supported'),
    ('publication membership', 'pg_publication_rel, pg_publication_namespace, FOR ALL TABLES', 'refuse', 'a subscriber stops at the first change after the prepare unless it has the new columns: add them there first (docs/adopting.md#replicas), then subscribers_ready => true'),
    ('user trigger or rule fired by the batches', 'pg_trigger, pg_rewrite', 'quiet', 'the batches run with session_replication_role = replica: triggers and rules enabled on origin do not fire; refused (with fire_triggers => true to fire them) when the caller may not set it, or when one is enabled ALWAYS or REPLICA'),
    ('name taken', 'pg_class, pg_constraint, pg_trigger, pg_attribute', 'refuse', 'a name the conversion gives what it makes (twins, triggers, CHECKs, lookup indexes, new columns) is taken already, or would be given twice: rename that object, or pass another new_column'),
    ('old key column', 'pg_attribute', 'keep', 'renamed <key>_before_shard_id, with its values, DEFAULT or identity; no longer NOT NULL (unless identity or partition key)'),
    ('partitioned referencing table', 'pg_class.relkind', 'refuse', 'PostgreSQL 15 to 17 refuse the NOT VALID foreign key the swap makes on a partitioned table: drop the foreign key, convert, add it again (18 allows it)'),
    ('no index on the key', 'pg_index', 'refuse', 'next_shard_id_at reads the new ids from a btree index with the new column first, the twin of one with the key first: make one first'),
    ('default of a referencing column', 'pg_attrdef', 'refuse', 'a DEFAULT on a referencing column names an old key: the swap gives the column''s name to the new column, which has no DEFAULT; drop it, convert, set it again to the new id of the row it names'),
    ('index with nulls not distinct', 'pg_index.indnullsnotdistinct (a unique constraint''s index too)', 'refuse', 'its twin is built before the batches, while every row''s new column is still NULL: two rows would be duplicates'),
    ('expression on a key that is not bigint', 'pg_trigger.tgqual, pg_policy, pg_rewrite, pg_statistic_ext.stxexprs, pg_publication_rel.prqual, pg_index', 'refuse', 'written for the old column''s type: on the new bigint column it may resolve to other functions and operators, or none; drop it, convert, create it again'),
    ('index expression new ids fail', 'pg_index.indexprs, indpred', 'refuse', 'an index expression or predicate of the key, tried on two new ids, fails ((id)::int4): every insert would fail once its twin is built'),
    ('another conversion', '_pg_shard_id.conversions', 'refuse', 'another conversion in progress moves a column of one of the same tables (its twins would take the same names): finish or abandon it first'),
    ('key type', 'pg_attribute.atttypid, pg_operator', 'refuse', 'a key whose type''s equality operator is not PostgreSQL''s own (an extension''s type: ltree, citext, isn): the conversion''s triggers and sweeps compare keys with pg_catalog''s operators only, so that no role''s operator runs in them'),
    ('check constraint of the whole row', 'pg_constraint.conkey (0)', 'refuse', 'a CHECK that passes the whole row to a function (CHECK (f(t))): whether the new ids satisfy it cannot be tried; drop it, convert, add it again'),
    ('index of the whole row', 'pg_index.indexprs, indpred (a whole-row Var)', 'refuse', 'an index whose expression or predicate takes the whole row (CREATE INDEX ON t (f(t))): PostgreSQL ties it to the table, not to the key, and after the swap it would hold what it computed from the old values (index scans would miss rows); drop it, convert, create it again'),
    ('check constraint not valid', 'pg_constraint.convalidated', 'refuse', 'every batch UPDATE checks a NOT VALID CHECK (or, on PostgreSQL 18, NOT NULL): validate it (or drop it) first'),
    ('check constraint on the key', 'pg_constraint.conbin', 'refuse', 'a CHECK on the key or a referencing column alone that a new id does not satisfy (id < 2^31), or on a referencing column that a writer''s placeholder (-2) does not: drop or change it first'),
    ('depends on the key''s constraint', 'pg_depend: pg_constraint', 'refuse', 'a view that groups by the key depends on its primary key, which the swap drops: drop it, convert, create it again'),
    ('reads an old column and a new one', 'pg_depend (made after the prepare)', 'refuse', 'a view, rule, policy, function body, trigger, index or statistics object made after the prepare that reads both a column the swap moves and its new column: the swap makes every reader of the old column read the new one under the old name, from its definition, where the new name is gone then; drop it, finish, create it again'),
    ('trigger that fires after the conversion''s', 'pg_trigger.tgname', 'refuse', 'a BEFORE row trigger on a referencing table whose name sorts after the conversion''s reference triggers ("~shard_id_convert_...": PostgreSQL fires them in the byte order of their names): a reference it set or changed would not reach the new column; rename it (any name that begins with an ASCII character sorts before) or drop it'),
    ('reads a new column', 'pg_depend (made after the prepare)', 'refuse', 'abandoning: an object made after the prepare that reads a new column and that DROP COLUMN would refuse (a view, policy, function body, rule, trigger, publication column list); an index, CHECK, statistics object or sequence OWNED BY it is dropped with the column, as ALTER TABLE ... DROP COLUMN does'),
    ('sequence privileges', 'pg_class.relacl, pg_attribute.attacl', 'grant', 'USAGE on the new column''s sequence to each role that may insert into the table (or a partition, or a column of it) and lacks it: its DEFAULT draws from it, from the prepare on; refused when the caller cannot grant it'),
    ('old-style ids', 'pg_constraint', 'build', 'a CHECK that the key is at least the smallest converted id, added NOT VALID at the swap and validated after it: an application still writing the old sequence''s values into the key is refused (23514) instead of mixing them in'),
    ('unknown', 'pg_depend', 'refuse', 'an object no rule here knows: refused, by name')
$$;

-- The catalog columns that can hold a user table's column number, a set of them, or an
-- expression over them, with the kind that covers each (or why none is needed). The catalog test
-- fails when the running server has one that is not listed.
CREATE FUNCTION _pg_shard_id.conversion_catalog_columns()
RETURNS TABLE (catalog text, "column" text, kind text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE ROWS 32 SET search_path = pg_catalog, pg_temp AS $$
    VALUES
    ('pg_attrdef', 'adnum', 'generated column'), ('pg_attrdef', 'adbin', 'generated column'),
    -- pg_attribute: a column's own properties
    ('pg_attribute', 'attrelid', 'old key column'), ('pg_attribute', 'attname', 'old key column'),
    ('pg_attribute', 'atttypid', 'old key column'), ('pg_attribute', 'attlen', 'old key column'),
    ('pg_attribute', 'attnum', 'old key column'), ('pg_attribute', 'attndims', 'old key column'),
    ('pg_attribute', 'attcacheoff', 'old key column'), ('pg_attribute', 'atttypmod', 'old key column'),
    ('pg_attribute', 'attbyval', 'old key column'), ('pg_attribute', 'attalign', 'old key column'),
    ('pg_attribute', 'attisdropped', 'old key column'), ('pg_attribute', 'atthasdef', 'old key column'),
    ('pg_attribute', 'atthasmissing', 'old key column'), ('pg_attribute', 'attmissingval', 'old key column'),
    ('pg_attribute', 'attnotnull', 'not-null constraint'), ('pg_attribute', 'attidentity', 'sequence owned by the column'),
    ('pg_attribute', 'attgenerated', 'generated column'), ('pg_attribute', 'attislocal', 'inheritance'),
    ('pg_attribute', 'attinhcount', 'inheritance'), ('pg_attribute', 'attstorage', 'column storage'),
    ('pg_attribute', 'attcompression', 'column storage'), ('pg_attribute', 'attcollation', 'column storage'),
    ('pg_attribute', 'attacl', 'column privileges'), ('pg_attribute', 'attoptions', 'column settings'),
    ('pg_attribute', 'attstattarget', 'column settings'), ('pg_attribute', 'attfdwoptions', 'foreign table'),
    ('pg_class', 'relpartbound', 'partition key'),
    ('pg_constraint', 'conbin', 'check constraint'), ('pg_constraint', 'conkey', 'check constraint'),
    ('pg_constraint', 'confkey', 'foreign key to the key'), ('pg_constraint', 'confdelsetcols', 'foreign key to the key'),
    ('pg_depend', 'objsubid', 'unknown'), ('pg_depend', 'refobjsubid', 'unknown'),
    ('pg_description', 'objsubid', 'column comment'), ('pg_seclabel', 'objsubid', 'column security label'),
    ('pg_init_privs', 'objsubid', 'column privileges'), ('pg_shdepend', 'objsubid', 'column privileges'),
    ('pg_index', 'indexprs', 'index'), ('pg_index', 'indkey', 'index'), ('pg_index', 'indoption', 'index'),
    ('pg_index', 'indpred', 'index'),
    ('pg_partitioned_table', 'partattrs', 'partition key'), ('pg_partitioned_table', 'partexprs', 'partition key'),
    ('pg_policy', 'polqual', 'policy'), ('pg_policy', 'polwithcheck', 'policy'),
    ('pg_proc', 'prosqlbody', 'function'), ('pg_proc', 'proargdefaults', 'function'),
    ('pg_publication_rel', 'prattrs', 'publication'), ('pg_publication_rel', 'prqual', 'publication'),
    ('pg_rewrite', 'ev_action', 'view'), ('pg_rewrite', 'ev_qual', 'rule'),
    ('pg_statistic', 'staattnum', 'planner statistics'),
    ('pg_statistic_ext', 'stxexprs', 'statistics object'), ('pg_statistic_ext', 'stxkeys', 'statistics object'),
    ('pg_trigger', 'tgattr', 'trigger'), ('pg_trigger', 'tgqual', 'trigger'),
    ('pg_type', 'typdefaultbin', 'unknown'),
    -- (not of a user table's columns: an operator family's support function number)
    ('pg_amproc', 'amprocnum', 'unknown')
$$;

-- One step of a conversion, as the inventory lists it: ord orders the whole conversion; phase is
-- when it runs (prepare, indexes, convert, finish, swap, after the swap; kept: nothing is done);
-- action says what is done (add, build, fill, check, carry, rename, drop, quiet, fire, keep,
-- refuse); statement is the SQL that runs (for a refusal, what the user can run instead); done
-- says whether it has run.
CREATE TYPE _pg_shard_id.conversion_step AS (
    ord integer, phase text, kind text, object text, action text, lock text, statement text,
    detail text, done boolean
);


-- The statements that give rows their ids: one per unit (a leaf of the table: ids at each row's
-- time; a leaf of a referencing table: the new id of the row referenced), run on ranges of heap
-- blocks ($1 to $2), then the sweeps (unit NULL) for rows still without one. The inventory lists
-- them and the batches run them. Every relation named with its schema (a temporary one too: they
-- may run under the caller's search_path, _pg_shard_id.run_firing).
CREATE FUNCTION _pg_shard_id.fill_statements(tbl regclass, key_column name, new_column name, time_column name,
                                             seq regclass, shard integer)
RETURNS TABLE (unit integer, kind text, rel regclass, statement text)
LANGUAGE sql STABLE STRICT PARALLEL SAFE ROWS 16 SET search_path = pg_catalog, pg_temp AS $$
    WITH id AS (SELECT format('_pg_shard_id.conversion_id(%L::pg_catalog.regclass, %s, %I)', _pg_shard_id.qualified(seq), shard, time_column) AS expression,
                       'c.ctid OPERATOR(pg_catalog.>=) pg_catalog.format(''(%s,0)'', $1::pg_catalog.int8)::pg_catalog.tid '
                       'AND c.ctid OPERATOR(pg_catalog.<) pg_catalog.format(''(%s,0)'', $2::pg_catalog.int8)::pg_catalog.tid' AS blocks)
    SELECT u.unit, u.kind, u.rel,
           CASE u.kind WHEN 'table' THEN format('UPDATE %s c SET %I = %s WHERE %s AND c.%I IS NULL', _pg_shard_id.qualified(u.rel), new_column, id.expression, id.blocks, new_column)
                ELSE format('UPDATE %s c SET %I = p.%I FROM %s p WHERE %s AND (c.%I IS NULL OR c.%I OPERATOR(pg_catalog.<) 0) AND p.%I OPERATOR(pg_catalog.=) c.%I',
                            _pg_shard_id.qualified(u.rel), u.fk_new_column, new_column, _pg_shard_id.qualified(tbl), id.blocks, u.fk_new_column, u.fk_new_column, key_column, u.fk_column) END
      FROM _pg_shard_id.conversion_units(tbl, key_column, new_column) u, id
    UNION ALL
    SELECT NULL, 'table', tbl, format('UPDATE %s SET %I = %s WHERE %I IS NULL', _pg_shard_id.qualified(tbl), new_column, id.expression, new_column)
      FROM id
    UNION ALL
    SELECT NULL, 'child', r.rel, format('UPDATE %s c SET %I = p.%I FROM %s p WHERE (c.%I IS NULL OR c.%I OPERATOR(pg_catalog.<) 0) AND c.%I IS NOT NULL AND p.%I OPERATOR(pg_catalog.=) c.%I',
                               _pg_shard_id.qualified(r.rel), r.fk_new_column, new_column, _pg_shard_id.qualified(tbl), r.fk_new_column, r.fk_new_column, r.fk_column, key_column, r.fk_column)
      FROM (SELECT DISTINCT rr.rel, rr.fk_column, rr.fk_new_column FROM _pg_shard_id.conversion_references(tbl, key_column, new_column) rr) r
    UNION ALL
    -- orphans of a foreign key left NOT VALID (or NOT ENFORCED): no row to take an id from; the
    -- placeholder a writer would give them (so the finish's CHECK holds, and they stay orphans)
    SELECT NULL, 'child', r.rel, format('UPDATE %s c SET %I = %s WHERE c.%I IS NULL AND c.%I IS NOT NULL '
                                        'AND NOT EXISTS (SELECT FROM %s p WHERE p.%I OPERATOR(pg_catalog.=) c.%I)',
                               _pg_shard_id.qualified(r.rel), r.fk_new_column,
                               format('CASE WHEN %s THEN -1 OPERATOR(pg_catalog.-) c.%I::pg_catalog.int8 '
                                      'ELSE -1 OPERATOR(pg_catalog.-) (pg_catalog.hashtextextended(c.%I::pg_catalog.text, 0) '
                                      'OPERATOR(pg_catalog.&) 4611686018427387903) END',
                                      CASE WHEN k.atttypid IN ('bigint'::regtype, 'integer'::regtype, 'smallint'::regtype)
                                           THEN format('c.%I OPERATOR(pg_catalog.>=) 0', r.fk_column) ELSE 'false' END,
                                      r.fk_column, r.fk_column),
                               r.fk_new_column, r.fk_column, _pg_shard_id.qualified(tbl), key_column, r.fk_column)
      FROM (SELECT DISTINCT rr.rel, rr.fk_column, rr.fk_new_column FROM _pg_shard_id.conversion_references(tbl, key_column, new_column) rr
             WHERE NOT rr.validated OR rr.def LIKE '%NOT ENFORCED%') r,
           pg_attribute k
     WHERE k.attrelid = tbl AND k.attname = key_column
    UNION ALL
    -- rows that referenced a row deleted meanwhile, which was inserted again with the same old key
    SELECT NULL, 'child', r.rel, format('UPDATE %s c SET %I = p.%I FROM %s p WHERE c.%I OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT d.new_id FROM _pg_shard_id.conversion_deleted d WHERE d.relid OPERATOR(pg_catalog.=) %s::pg_catalog.oid)) '
                                        'AND p.%I OPERATOR(pg_catalog.=) c.%I AND p.%I IS NOT NULL AND p.%I OPERATOR(pg_catalog.<>) c.%I',
                               _pg_shard_id.qualified(r.rel), r.fk_new_column, new_column, _pg_shard_id.qualified(tbl), r.fk_new_column, tbl::oid,
                               key_column, r.fk_column, new_column, new_column, r.fk_new_column)
      FROM (SELECT DISTINCT rr.rel, rr.fk_column, rr.fk_new_column FROM _pg_shard_id.conversion_references(tbl, key_column, new_column) rr) r
     ORDER BY 1 NULLS LAST, 2 DESC, 3
$$;

-- A step, for the inventory's lists (ord: its place in the conversion, made unique when listed).
CREATE FUNCTION _pg_shard_id.step(ord integer, phase text, kind text, object text, action text, lock text,
                                  statement text, detail text, done boolean)
RETURNS _pg_shard_id.conversion_step
LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    SELECT ROW(ord, phase, kind, object, action, lock, statement, detail, done)::_pg_shard_id.conversion_step
$$;

-- Everything a conversion of tbl does, and every object and property attached to the columns it
-- moves, with what happens to each: the one inventory the plan shows, the prepare, the index
-- step and the finish run, and the prepare and the swap refuse by. Reads the catalog only (and
-- each object's definition as it is now: the swap reads it under its locks). Names are
-- schema-qualified (the search_path is pinned), so every statement means the same in any
-- session. The places (ord), in hundreds: 0 refusals, 100 the prepare, 300 the indexes, 400 the
-- batches, 500-520 the finish before the swap, 600-690 the swap (locks, drops, NOT NULL, the
-- partitions' constraints, the twins swapped in, the columns' properties, the renames, the old
-- columns' NOT NULL, the definitions carried, the foreign keys, the record), 700 after it, 900
-- what is kept.
CREATE FUNCTION _pg_shard_id.conversion_inventory(tbl regclass, time_column name, seq regclass, shard integer,
                                                  new_column name, fire_triggers boolean, subscribers_ready boolean)
RETURNS SETOF _pg_shard_id.conversion_step
LANGUAGE plpgsql STABLE PARALLEL SAFE ROWS 32 SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    steps _pg_shard_id.conversion_step[] := '{}';
    key_column name := _pg_shard_id.conversion_key(tbl);
    key_attnum smallint := (SELECT attnum FROM pg_attribute WHERE attrelid = tbl AND attname = key_column);
    prepared boolean := EXISTS (SELECT FROM _pg_shard_id.conversions s WHERE s.relid = tbl);
    finished boolean := EXISTS (SELECT FROM _pg_shard_id.conversions s WHERE s.relid = tbl AND s.phase = 'finished');
    may_quiet boolean := (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)
                         OR has_parameter_privilege('session_replication_role', 'SET');
    ours oid[] := ARRAY['_pg_shard_id.conversion_fill_row()'::regprocedure,
                        '_pg_shard_id.conversion_fill_reference()'::regprocedure,
                        '_pg_shard_id.conversion_note_deleted()'::regprocedure]::oid[];
    new_check name := _pg_shard_id.derived_name('shard_id_convert_' || new_column, '_not_null');
    fill_trigger name := _pg_shard_id.derived_name('shard_id_convert_', new_column);
    indexes oid[][] := '{}';  -- (index, constraint or 0) of every index on a moved column
    c record;
    d record;
    r record;
    x record;
    moves record;  -- (old and new column numbers of a relation; of columns that have their new one: a
                   -- foreign key added after the prepare has none, and every step but abandoning
                   -- refuses it, refuse_changed: its NULL made expression_moved fail abandoning)
    stmt text;
    twin name;
    what text;
    why text;
    kind text;
    enforced boolean;
    -- of the object named as a twin: NULL when none is, true when it is the twin (a constraint
    -- of the conversion's on the table, an index on the new columns; a valid one), false when it
    -- is another object, made after the prepare (the twentieth review: one was taken for the
    -- twin, and the swap renamed it in its place)
    twin_is_ours boolean;
    twin_valid boolean;
    -- every name the conversion gives an object, with where it must be unique (a schema for a
    -- relation, a table for a constraint or trigger): one taken already, or given twice, is
    -- refused before the prepare (the nineteenth review: the index step failed forever on a
    -- lookup index two referencing tables named alike, and an existing CHECK named as a twin was
    -- taken for the twin, which then never existed at the swap)
    made jsonb := '[]';
    trigger_name name;
    validate_after text[] := '{}';  -- (table, name) of each foreign key (and the floor CHECK) validated after the swap
    floor_check name;
    floor_id bigint;
    analyzed boolean;
    -- the relations the swap's carries lock besides the tables (views, rules' and policies'
    -- tables): taken with them, before the table, in the order their readers take them (issue 55)
    locked_first regclass[] := '{}';
BEGIN
    fire_triggers := coalesce(fire_triggers, false);
    subscribers_ready := coalesce(subscribers_ready, false);

    -- ---- the relations it writes: what PostgreSQL or the conversion cannot do there ----
    FOR c IN SELECT cc.*, k.relkind, k.reltype, k.reloftype, k.relrowsecurity AND k.relforcerowsecurity AS forced_row_security,
                    row_number() OVER (PARTITION BY cc.rel ORDER BY cc.role, cc.old_attnum) AS nth
               FROM _pg_shard_id.conversion_columns(tbl, key_column, new_column) cc
               JOIN pg_class k ON k.oid = cc.rel ORDER BY cc.rel, cc.role LOOP
        -- (PostgreSQL records no dependency of a table on its partition key's columns)
        IF EXISTS (SELECT FROM pg_partitioned_table pt WHERE pt.partrelid = c.rel
                      AND (c.old_attnum = ANY (pt.partattrs::int2[])
                           OR pt.partexprs::text ~ ('\{VAR :varno 1 :varattno ' || c.old_attnum || ' '))) THEN
            steps := steps || _pg_shard_id.step(0, 'prepare', 'partition key', format('table %s', c.rel), 'refuse', NULL, NULL,
                                                format('%s is partitioned by %I: its rows would stay in the partitions the old values chose', c.rel, c.old_column), false);
        END IF;
        -- (the relation's own, once)
        IF c.nth = 1 THEN
            IF c.relkind = 'f' THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', 'foreign table', format('foreign table %s', c.rel), 'refuse', NULL, NULL,
                                                    'its rows are in another server: the conversion cannot write them', false);
            END IF;
            IF c.forced_row_security THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', 'row security forced', format('table %s', c.rel), 'refuse', NULL,
                                                    format('ALTER TABLE %s NO FORCE ROW LEVEL SECURITY', c.rel),
                                                    'row security applies to its owner too: the conversion reads and writes every row as the owner (force it again after the finish)', false);
            END IF;
            FOR x IN SELECT s.subname FROM pg_subscription_rel sr JOIN pg_subscription s ON s.oid = sr.srsubid
                      WHERE sr.srrelid = c.rel ORDER BY 1 LOOP
                steps := steps || _pg_shard_id.step(0, 'prepare', 'subscription target', format('table %s', c.rel), 'refuse', NULL, NULL,
                                                    format('its rows arrive from subscription %I, by column name: after the swap the publisher''s old keys would land in the new key column. Convert the table on the publisher; this subscriber takes the new columns first (docs/adopting.md#replicas)', x.subname), false);
            END LOOP;
            FOR x IN SELECT i.inhrelid::regclass AS child, i.inhparent::regclass AS parent FROM pg_inherits i
                      JOIN pg_class k ON k.oid = i.inhrelid
                     WHERE (i.inhparent = c.rel OR i.inhrelid = c.rel) AND NOT k.relispartition LOOP
                steps := steps || _pg_shard_id.step(0, 'prepare', 'inheritance', format('table %s', x.child), 'refuse', NULL,
                                                    format('ALTER TABLE %s NO INHERIT %s', x.child, x.parent),
                                                    format('%s inherits from %s: an UPDATE or ALTER TABLE of the parent reaches it', x.child, x.parent), false);
            END LOOP;
            FOR x IN SELECT a.attrelid::regclass AS rel, a.attname FROM pg_attribute a
                      -- (an array of it too: PostgreSQL refuses the new column then as well)
                      WHERE a.atttypid IN (c.reltype, (SELECT t.typarray FROM pg_type t WHERE t.oid = c.reltype))
                        AND a.attnum > 0 AND NOT a.attisdropped LOOP
                steps := steps || _pg_shard_id.step(0, 'prepare', 'row type used', format('column %s.%I', x.rel, x.attname), 'refuse', NULL, NULL,
                                                    format('its type is the row type of %s, and PostgreSQL adds no column to a table whose row type a column uses', c.rel), false);
            END LOOP;
            IF c.reloftype <> 0 THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', 'row type used', format('table %s', c.rel), 'refuse', NULL,
                                                    format('ALTER TABLE %s NOT OF', c.rel),
                                                    format('a typed table (OF %s): PostgreSQL adds no column to it', c.reloftype::regtype), false);
            END IF;
            IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
                EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition p WHERE p.logicalrelid OPERATOR(pg_catalog.=) $1)'
                   INTO r USING c.rel;
                IF r.exists THEN
                    steps := steps || _pg_shard_id.step(0, 'prepare', 'Citus distributed table', format('table %s', c.rel), 'refuse', NULL, NULL,
                                                        'a Citus distributed table: its rows are in shards on the workers, and Citus refuses the new column''s DEFAULT next_shard_id(seq, shard) (it takes next_shard_id(seq)); not supported', false);
                END IF;
            END IF;
        END IF;
        CONTINUE WHEN c.rel <> c.top;
        IF (SELECT t.typtype FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
             WHERE a.attrelid = c.rel AND a.attnum = c.old_attnum) = 'd' THEN
            steps := steps || _pg_shard_id.step(0, 'prepare', 'domain type', format('column %s.%I', c.rel, c.old_column), 'refuse', NULL, NULL,
                                                format('its type is the domain %s: the new column is bigint, and the domain''s constraints would not apply to the new ids',
                                                       (SELECT a.atttypid::regtype FROM pg_attribute a WHERE a.attrelid = c.rel AND a.attnum = c.old_attnum)), false);
        END IF;
        -- the names the conversion gives on it, taken by something else
        IF NOT prepared AND c.new_attnum IS NOT NULL AND c.role = 'reference' THEN
            steps := steps || _pg_shard_id.step(0, 'prepare', 'old key column', format('column %s.%I', c.rel, c.new_column), 'refuse', NULL, NULL,
                                                format('the conversion gives the new column of %s.%I this name, and it is taken', c.rel, c.old_column), false);
        END IF;
        -- (the name the swap keeps the old column under, and the key's new column, among the
        -- names the conversion gives: a new referencing column named like another column's kept
        -- name stranded the finish, the twentieth review)
        made := made || jsonb_build_object('kind', 'column', 'scope', c.rel::oid, 'name', c.kept_as, 'checked', true)
                     || CASE WHEN c.role = 'key' THEN jsonb_build_object('kind', 'column', 'scope', c.rel::oid, 'name', c.new_column, 'checked', true)
                             ELSE '[]'::jsonb END;
        IF EXISTS (SELECT FROM pg_attribute WHERE attrelid = c.rel AND attname = c.kept_as AND NOT attisdropped) THEN
            steps := steps || _pg_shard_id.step(0, 'prepare', 'old key column', format('column %s.%I', c.rel, c.kept_as), 'refuse', NULL,
                                                format('ALTER TABLE %s RENAME COLUMN %I TO ...', c.rel, c.kept_as),
                                                format('the swap keeps the old %I under this name, and it is taken', c.old_column), false);
        END IF;
    END LOOP;
    -- publications of the relations it writes: each subscriber needs the new columns first
    FOR x IN SELECT DISTINCT p.pubname, cc.top
               FROM _pg_shard_id.conversion_columns(tbl, key_column, new_column) cc
               JOIN pg_class k ON k.oid = cc.rel JOIN pg_namespace ns ON ns.oid = k.relnamespace
               JOIN pg_publication_tables p ON p.schemaname = ns.nspname AND p.tablename = k.relname
              ORDER BY 1, 2 LOOP
        steps := steps || _pg_shard_id.step(CASE WHEN subscribers_ready THEN 900 ELSE 0 END, CASE WHEN subscribers_ready THEN 'kept' ELSE 'prepare' END,
                    'publication membership', format('publication %I', x.pubname), CASE WHEN subscribers_ready THEN 'keep' ELSE 'refuse' END, NULL,
                    (SELECT string_agg(DISTINCT format('ALTER TABLE %s ADD COLUMN %I bigint;', cc.top, cc.new_column), ' ')
                       FROM _pg_shard_id.conversion_columns(tbl, key_column, new_column) cc WHERE cc.top = x.top),
                    format('%s is published: on every subscriber of %I, run this statement first, then pass subscribers_ready => true; the subscribers rename their columns at the swap (docs/adopting.md#replicas). A change-data-capture consumer needs nothing first and sees each converted row as an UPDATE.',
                           x.top, x.pubname), false);
    END LOOP;

    -- ---- what the finish could not complete (issue 55): refused before anything changes ----
    -- a partitioned referencing table: the swap makes its foreign key NOT VALID, which PostgreSQL
    -- before 18 refuses on a partitioned table
    FOR x IN SELECT DISTINCT cc.top FROM _pg_shard_id.conversion_columns(tbl, key_column, new_column) cc
               JOIN pg_class k ON k.oid = cc.top
              WHERE cc.role = 'reference' AND k.relkind = 'p' AND current_setting('server_version_num')::int < 180000 LOOP
        steps := steps || _pg_shard_id.step(0, 'prepare', 'partitioned referencing table', format('table %s', x.top), 'refuse', NULL, NULL,
                    format('%s is partitioned and references the key: the swap makes its foreign key again NOT VALID, which PostgreSQL %s refuses on a partitioned table (18 allows it): drop the foreign key, convert, add it again', x.top,
                           current_setting('server_version_num')::int / 10000), false);
    END LOOP;
    -- the new column must be readable by next_shard_id_at: a btree index with it first
    IF NOT prepared AND NOT EXISTS (
        SELECT FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid JOIN pg_am am ON am.oid = ic.relam
         WHERE i.indrelid = tbl AND am.amname = 'btree' AND i.indkey[0] = key_attnum AND i.indpred IS NULL) THEN
        steps := steps || _pg_shard_id.step(0, 'prepare', 'no index on the key', format('table %s', tbl), 'refuse', NULL,
                    format('CREATE INDEX ON %s (%I)', tbl, key_column),
                    format('no btree index of %s has %I as its first column: the new column''s twin would have none either, and next_shard_id_at reads the ids stored in it there; make one (CONCURRENTLY) first', tbl, key_column), false);
    END IF;
    -- the key's type: its equality operator must be pg_catalog's (the triggers' WHEN clauses and
    -- the sweeps compare keys under search_path = pg_catalog: an extension's type (ltree) made
    -- the prepare fail after the plan said yes: the ninth review)
    IF NOT prepared AND NOT _pg_shard_id.equality_of_pg_catalog(tbl, key_column) THEN
        steps := steps || _pg_shard_id.step(0, 'prepare', 'key type', format('column %s.%I', tbl, key_column), 'refuse', NULL, NULL,
                    format('the primary key of %s compares %I with an equality operator that is not PostgreSQL''s own (an extension''s type, such as ltree or citext): the conversion compares keys with pg_catalog''s operators only, and would compare them otherwise than the foreign keys do', tbl, key_column), false);
    END IF;
    -- another conversion in progress moving a column of one of these tables: the twins of an
    -- index of a table both touch would take the same name (the tenth review)
    FOR x IN WITH mine AS (SELECT cc.rel, cc.top FROM _pg_shard_id.conversion_columns(tbl, key_column, new_column) cc)
             SELECT DISTINCT cv.relid::regclass AS other, m.top
               FROM mine m, _pg_shard_id.conversions cv
               CROSS JOIN LATERAL _pg_shard_id.conversion_columns(cv.relid::regclass, cv.key_column, cv.new_column) oc
              WHERE NOT prepared AND oc.rel = m.rel AND cv.relid <> tbl AND cv.phase <> 'finished' LOOP
        steps := steps || _pg_shard_id.step(0, 'prepare', 'another conversion', format('table %s', x.top), 'refuse', NULL, NULL,
                    format('the conversion of %s, in progress, moves a column of %s too: finish (or abandon) it first', x.other, x.top), false);
    END LOOP;
    -- a CHECK that takes the whole row (CHECK (f(t))): its conkey is {0}, which no column's
    -- dependents show, and whether new ids satisfy it cannot be tried (the ninth review). Listed
    -- after the prepare too: one added since passed the swap, and a writer's row then failed it
    -- (f read the new id: the fifteenth review)
    FOR x IN SELECT DISTINCT con.conname, con.conrelid::regclass AS rel, pg_get_constraintdef(con.oid) AS def
               FROM _pg_shard_id.conversion_columns(tbl, key_column, new_column) cc
               JOIN pg_constraint con ON con.conrelid = cc.rel AND con.contype = 'c' AND 0 = ANY (con.conkey) AND con.conislocal
              LOOP
        steps := steps || _pg_shard_id.step(0, 'prepare', 'check constraint of the whole row', format('constraint %I on %s', x.conname, x.rel), 'refuse', NULL,
                    format('ALTER TABLE %s DROP CONSTRAINT %I', x.rel, x.conname),
                    format('%s takes the whole row, key included: whether the new ids satisfy it cannot be tried here; drop it, convert, add it again', x.def), false);
    END LOOP;
    -- an index whose expression or predicate takes the whole row (CREATE INDEX ON t (f(t)),
    -- computed columns in PostgREST's style): pg_depend ties it to the table, not to the key, so
    -- no rule here sees it, and after the swap it would hold what f computed from the old values:
    -- index scans miss rows (the thirteenth review). Listed after the prepare too, so that the
    -- swap, which reads the inventory again under its locks, refuses one made since (or while it
    -- waited: the fourteenth review). A partition's copy of a parent's index is the parent's.
    FOR x IN SELECT DISTINCT i.indexrelid::regclass AS idx, i.indrelid::regclass AS rel
               FROM _pg_shard_id.conversion_columns(tbl, key_column, new_column) cc
               JOIN pg_index i ON i.indrelid = cc.rel
              WHERE (i.indexprs::text ~ '\{VAR :varno 1 :varattno 0 ' OR i.indpred::text ~ '\{VAR :varno 1 :varattno 0 ')
                AND NOT EXISTS (SELECT FROM pg_inherits h WHERE h.inhrelid = i.indexrelid)
              ORDER BY 1 LOOP
        steps := steps || _pg_shard_id.step(0, 'prepare', 'index of the whole row', format('index %s on %s', x.idx, x.rel), 'refuse', NULL,
                    coalesce((SELECT format('ALTER TABLE %s DROP CONSTRAINT %I', x.rel, con.conname) FROM pg_constraint con
                               WHERE con.conindid = x.idx AND con.conrelid = x.rel),  -- (an exclusion constraint's)
                             format('DROP INDEX %s', x.idx)),
                    format('%s takes the whole row of %s in its expression or predicate: after the swap it would hold what it computed from the old values; drop it, convert, create it again',
                           pg_get_indexdef(x.idx), x.rel), false);
    END LOOP;
    -- a user's NOT VALID CHECK: every batch UPDATE checks it, and a row that breaks it stops them
    FOR x IN SELECT DISTINCT con.oid, con.conname, con.conrelid::regclass AS rel
               FROM _pg_shard_id.conversion_columns(tbl, key_column, new_column) cc
               JOIN pg_constraint con ON con.conrelid = cc.rel AND con.contype IN ('c', 'n') AND NOT con.convalidated AND con.conislocal
              -- (not the conversion's own, each on a new column: by what they hold, not by their
              -- names, which derived_name shortens for long columns: the seventeenth review)
              WHERE NOT _pg_shard_id.own_constraint(con.oid, tbl, key_column, conversion_inventory.new_column)
                AND coalesce((to_jsonb(con) ->> 'conenforced')::boolean, true) LOOP
        steps := steps || _pg_shard_id.step(0, 'prepare', 'check constraint not valid', format('constraint %I on %s', x.conname, x.rel), 'refuse', NULL,
                    format('ALTER TABLE %s VALIDATE CONSTRAINT %I', x.rel, x.conname),
                    'a NOT VALID CHECK or NOT NULL: the conversion updates every row, and PostgreSQL checks it on each; a row that breaks it would stop the batches. Validate it (or fix the rows, or drop it) first', false);
    END LOOP;
    -- a CHECK on a moved column alone that its new values do not satisfy (id < 2^31): tried on two
    -- new ids, and on a referencing column on the placeholder a writer may put there (-2). This
    -- and the next are listed after the prepare too: one added since would be carried as a twin,
    -- which the finish adds NOT VALID and PostgreSQL then enforces on every writer (every insert
    -- failed id < 2^31: the sixteenth review); the finish refuses before it adds any twin
    FOR x IN SELECT con.oid, con.conname, con.conrelid::regclass AS rel, pg_get_expr(con.conbin, con.conrelid) AS expr,
                    cc.old_column, cc.role
               FROM _pg_shard_id.conversion_columns(tbl, key_column, new_column) cc
               JOIN pg_constraint con ON con.conrelid = cc.rel AND con.contype = 'c' AND con.conkey = ARRAY[cc.old_attnum]
              -- (a NOT ENFORCED one, PostgreSQL 18's, is checked on nothing)
              WHERE coalesce((to_jsonb(con) ->> 'conenforced')::boolean, true)
              LOOP
        DECLARE
            sample bigint;
            ok boolean;
        BEGIN
            FOREACH sample IN ARRAY ARRAY[@extschema@.shard_id_compose(now(), coalesce(shard, 0), 0),
                                          @extschema@.shard_id_compose(now() + interval '10 years', coalesce(shard, 0), 1023)]
                                    || CASE WHEN x.role = 'reference' THEN ARRAY[-2::bigint] ELSE '{}'::bigint[] END LOOP
                EXECUTE format('SELECT (%s) FROM (SELECT $1::bigint AS %I) AS %I', x.expr, x.old_column,
                               (SELECT relname FROM pg_class WHERE oid = x.rel))
                   INTO ok USING sample;
                IF ok IS FALSE THEN
                    RAISE EXCEPTION 'false';
                END IF;
            END LOOP;
        EXCEPTION WHEN OTHERS THEN
            steps := steps || _pg_shard_id.step(0, 'prepare', 'check constraint on the key', format('constraint %I on %s', x.conname, x.rel), 'refuse', NULL,
                        format('ALTER TABLE %s DROP CONSTRAINT %I', x.rel, x.conname),
                        CASE WHEN sample < 0
                             THEN format('CHECK (%s) is not satisfied by the negative placeholder (%s) a writer''s row gets while the row it references is not visible to it: drop or change it first', x.expr, sample)
                             ELSE format('CHECK (%s) is not satisfied by a new id (%s): its twin on the new column could never be validated; drop or change it first', x.expr, sample) END, false);
        END;
    END LOOP;
    FOR x IN SELECT DISTINCT con.conname, con.conrelid::regclass AS rel, pg_get_constraintdef(con.oid) AS def, cc.role
               FROM _pg_shard_id.conversion_columns(tbl, key_column, new_column) cc
               JOIN pg_constraint con ON con.conrelid = cc.rel AND con.contype = 'c' AND cc.old_attnum = ANY (con.conkey)
                                     AND cardinality(con.conkey) > 1 AND con.conislocal
                                     -- (not the conversion's own, on the old and new columns)
                                     AND NOT _pg_shard_id.own_constraint(con.oid, tbl, key_column, conversion_inventory.new_column)
              WHERE coalesce((to_jsonb(con) ->> 'conenforced')::boolean, true)
              LOOP
        -- (on the key: whether new ids satisfy it depends on the other columns, of the rows there
        -- and of rows to come: CHECK (kind <> 'legacy' OR id < 100000) would stop the twin's
        -- validation, and every writer of a 'legacy' row from the finish's CHECK on: the eighth
        -- review)
        steps := steps || _pg_shard_id.step(0, 'prepare', 'check constraint on the key', format('constraint %I on %s', x.conname, x.rel), 'refuse', NULL,
                    format('ALTER TABLE %s DROP CONSTRAINT %I', x.rel, x.conname),
                    CASE WHEN x.role = 'reference'
                         THEN format('%s spans a referencing column and others: a writer''s row may hold a negative placeholder in the new column while the row it references is not visible to it, which cannot be tried on it here; drop it, convert, add it again', x.def)
                         ELSE format('%s spans the key and other columns: whether the new ids satisfy it depends on the other columns of each row, there and to come, which cannot be tried here; split it (a CHECK on the key alone is tried on new ids and carried over), or drop it, convert, add it again', x.def) END, false);
    END LOOP;
    -- an object that depends on the key's constraint, not on its column (a view with GROUP BY
    -- the key): the swap drops that constraint
    FOR x IN SELECT DISTINCT dep.classid, dep.objid, pg_describe_object(dep.classid, dep.objid, dep.objsubid) AS what,
                    con.conname, con.conrelid::regclass AS rel
               FROM _pg_shard_id.conversion_columns(tbl, key_column, new_column) cc
               JOIN pg_constraint con ON con.conrelid = cc.rel AND con.contype IN ('p', 'u') AND cc.old_attnum = ANY (con.conkey)
               JOIN pg_depend dep ON dep.refclassid = 'pg_constraint'::regclass AND dep.refobjid = con.oid
              WHERE dep.classid <> 'pg_constraint'::regclass AND dep.deptype = 'n' LOOP
        steps := steps || _pg_shard_id.step(0, 'prepare', 'depends on the key''s constraint', x.what, 'refuse', NULL, NULL,
                    format('%s depends on constraint %I on %s (a view that groups by the key relies on it being unique), which the swap drops and makes again: drop it, convert, create it again', x.what, x.conname, x.rel), false);
    END LOOP;

    -- made after the prepare, reading both a column that moves and a new column: its definition
    -- names a column the swap renames away
    FOR x IN SELECT * FROM _pg_shard_id.new_column_readers(tbl, key_column, new_column, true) LOOP
        steps := steps || _pg_shard_id.step(0, 'prepare', 'reads an old column and a new one', x.what, 'refuse', NULL, NULL,
                    format('made after the prepare, it reads both a column the swap moves and the new column that takes its place (%I for the key): the swap makes every reader of an old column read the new one under the old name, from its definition, which names the new one by a name gone by then; drop it (or make it read one of them), finish, create it again', new_column), false);
    END LOOP;
    -- a user's trigger that would fire after the conversion's reference triggers
    FOR x IN SELECT * FROM _pg_shard_id.late_firing_triggers(tbl, key_column, new_column) LOOP
        steps := steps || _pg_shard_id.step(0, 'prepare', 'trigger that fires after the conversion''s', format('trigger %I on %s', x.tgname, x.rel), 'refuse', NULL, NULL,
                    format('PostgreSQL fires a table''s BEFORE ROW triggers in the byte order of their names, and this one''s sorts after %I, the conversion''s, which gives each row the new id of the row its reference names: a reference it set or changed would not reach the new column. Rename it to a name that sorts before (any that begins with an ASCII character does), or drop it', x.ours), false);
    END LOOP;

    -- ---- every object PostgreSQL records as depending on a column that moves ----
    FOR d IN SELECT DISTINCT ON (dep.classid, dep.objid, dep.objsubid) dep.classid, dep.objid, dep.objsubid, dep.deptype,
                    cc.rel, cc.role, cc.old_column, cc.old_attnum, format_type(a.atttypid, a.atttypmod) AS old_type,
                    pg_describe_object(dep.classid, dep.objid, dep.objsubid) AS what
               FROM _pg_shard_id.conversion_columns(tbl, key_column, new_column) cc
               JOIN pg_depend dep ON dep.refclassid = 'pg_class'::regclass AND dep.refobjid = cc.rel
                                 AND dep.refobjsubid = cc.old_attnum
               JOIN pg_attribute a ON a.attrelid = cc.rel AND a.attnum = cc.old_attnum
              ORDER BY dep.classid, dep.objid, dep.objsubid, cc.role LOOP
        IF d.classid = 'pg_class'::regclass THEN
            SELECT k.relkind INTO x FROM pg_class k WHERE k.oid = d.objid;
            IF x.relkind = 'S' AND d.objid = seq::oid AND NOT prepared THEN
                -- (the new ids' own sequence must outlive the old column: the twenty-fifth review)
                steps := steps || _pg_shard_id.step(0, 'prepare', 'sequence of the new ids', d.what, 'refuse', NULL, NULL,
                                                    format('owned by %s.%I, the old key (its serial or identity), whose column is kept until you drop it, which would drop the sequence, and the new DEFAULT with it: create a sequence for the new ids (CREATE SEQUENCE ...) and pass it',
                                                           d.rel, d.old_column), false);
            ELSIF x.relkind = 'S' THEN
                steps := steps || _pg_shard_id.step(900, 'kept', 'sequence owned by the column', d.what, 'keep', NULL, NULL,
                                                    format('owned by %s.%I (the old key, kept as %I), which keeps its DEFAULT or identity and draws from it until you drop it',
                                                           d.rel, d.old_column, _pg_shard_id.derived_name(d.old_column, '_before_shard_id')), true);
            ELSIF x.relkind IN ('i', 'I') THEN
                -- a partition's index is its parent's business; a constraint's index, its constraint's
                CONTINUE WHEN EXISTS (SELECT FROM pg_inherits WHERE inhrelid = d.objid);
                why := _pg_shard_id.index_refusal(d.objid, d.rel, d.old_column, d.old_attnum, d.old_type);
                IF why IS NOT NULL THEN
                    steps := steps || _pg_shard_id.step(0, 'prepare', split_part(why, ': ', 1), d.what, 'refuse', NULL, NULL,
                                                        substr(why, strpos(why, ': ') + 2), false);
                    CONTINUE;
                END IF;
                CONTINUE WHEN EXISTS (SELECT FROM pg_constraint WHERE conindid = d.objid AND conrelid = d.rel AND contype IN ('p', 'u', 'x'));
                indexes := indexes || ARRAY[[d.objid, 0::oid]];
            ELSIF d.objid = d.rel AND d.objsubid = 0 THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', 'partition key', format('table %s', d.rel), 'refuse', NULL, NULL,
                                                    format('%s is partitioned by %I: its rows would stay in the partitions the old values chose', d.rel, d.old_column), false);
            ELSIF d.objid = d.rel AND d.objsubid > 0 AND EXISTS (SELECT FROM pg_attrdef WHERE adrelid = d.rel AND adnum = d.objsubid) THEN
                -- (a generated column recorded as depending on the column itself)
                d.classid := 'pg_attrdef'::regclass;
                d.objid := (SELECT oid FROM pg_attrdef WHERE adrelid = d.rel AND adnum = d.objsubid);
            ELSE
                d.classid := 0;  -- unknown, refused below
            END IF;
        ELSIF d.classid = 'pg_constraint'::regclass THEN
            SELECT * INTO r FROM pg_constraint con WHERE con.oid = d.objid;
            -- (a partition's copy: the parent's row; NOT NULL: the swap's own; a constraint
            -- trigger's: the trigger's row)
            CONTINUE WHEN r.conparentid <> 0 OR r.contype IN ('n', 't') OR (r.contype = 'c' AND NOT r.conislocal);
            -- (the conversion's own CHECK on a referencing table names the old column too: it is
            -- dropped at the swap, and needs no twin)
            CONTINUE WHEN r.contype = 'c' AND _pg_shard_id.own_constraint(r.oid, tbl, key_column, new_column);
            IF r.contype IN ('p', 'u') THEN
                -- (its index's refusals too: UNIQUE NULLS NOT DISTINCT (id) went through, and its
                -- twin, built while every new column is NULL, could never be: the twenty-fifth review)
                why := _pg_shard_id.index_refusal(r.conindid, d.rel, d.old_column, d.old_attnum, d.old_type);
                IF why IS NOT NULL THEN
                    steps := steps || _pg_shard_id.step(0, 'prepare', split_part(why, ': ', 1), format('constraint %I on %s', r.conname, d.rel), 'refuse', NULL, NULL,
                                                        substr(why, strpos(why, ': ') + 2), false);
                    CONTINUE;
                END IF;
                indexes := indexes || ARRAY[[r.conindid, r.oid]];
            ELSIF r.contype = 'x' THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', 'exclusion constraint', format('constraint %I on %s', r.conname, d.rel), 'refuse', NULL,
                                                    format('ALTER TABLE %s DROP CONSTRAINT %I', d.rel, r.conname),
                                                    'PostgreSQL makes an exclusion constraint only by building its index under the constraint''s lock (no USING INDEX): drop it, convert, add it again', false);
            ELSIF r.contype = 'c' THEN
                SELECT array_agg(cc.old_attnum ORDER BY cc.old_attnum) AS olds, array_agg(cc.new_attnum ORDER BY cc.old_attnum) AS news
                  INTO moves FROM _pg_shard_id.conversion_columns(tbl, key_column, new_column) cc WHERE cc.rel = d.rel AND cc.new_attnum IS NOT NULL;
                twin := _pg_shard_id.derived_name(r.conname, '_shard_id_twin');
                -- (ADD CONSTRAINT on a partitioned or inherited table adds it to every table
                -- below, under the same name: the name is taken if any of them has it, the
                -- twenty-first review)
                made := made || (SELECT jsonb_agg(jsonb_build_object('kind', 'constraint', 'scope', t::oid, 'name', twin))
                                   FROM _pg_shard_id.tree(d.rel) t WHERE t = d.rel OR NOT r.connoinherit);
                what := format('constraint %I on %s', r.conname, d.rel);
                -- (PostgreSQL 18's NOT ENFORCED CHECK: its twin is NOT ENFORCED too, and not
                -- validated; it came back enforced: the nineteenth review)
                enforced := coalesce((to_jsonb(r) ->> 'conenforced')::boolean, true);
                stmt := CASE WHEN prepared THEN format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%s)%s %s', d.rel, twin,
                                                       (_pg_shard_id.expression_moved(r.conbin, d.rel, moves.olds, moves.news))[1],
                                                       CASE WHEN r.connoinherit THEN ' NO INHERIT' ELSE '' END,
                                                       CASE WHEN enforced THEN 'NOT VALID' ELSE 'NOT ENFORCED' END)
                             ELSE format('-- after the prepare: %s, on the new column', pg_get_constraintdef(r.oid)) END;
                twin_is_ours := (SELECT _pg_shard_id.own_constraint(k.oid, tbl, key_column, new_column)
                                   FROM pg_constraint k WHERE k.conrelid = d.rel AND k.conname = twin);
                steps := steps || _pg_shard_id.step(500, 'finish', 'check constraint', what, 'build', format('ACCESS EXCLUSIVE on %s, catalog only', d.rel), stmt,
                                                    format('its twin %I, on the new column', twin), twin_is_ours IS TRUE OR finished);
                steps := steps || _pg_shard_id.step(510, 'finish', 'check constraint', what, 'check', format('SHARE UPDATE EXCLUSIVE on %s (writes go on)', d.rel),
                                                    CASE WHEN enforced THEN format('ALTER TABLE %s VALIDATE CONSTRAINT %I', d.rel, twin) END,
                                                    CASE WHEN enforced THEN 'every row, before the swap' ELSE 'NOT ENFORCED: not validated, as the old one' END,
                                                    (twin_is_ours AND EXISTS (SELECT FROM pg_constraint WHERE conrelid = d.rel AND conname = twin AND convalidated)) IS TRUE
                                                    OR finished OR NOT enforced);
                steps := steps || _pg_shard_id.step(610, 'swap', 'check constraint', what, 'drop', NULL,
                                                    format('ALTER TABLE %s DROP CONSTRAINT %I', d.rel, r.conname), NULL, finished);
                steps := steps || _pg_shard_id.step(630, 'swap', 'check constraint', what, 'rename', NULL,
                                                    format('ALTER TABLE %s RENAME CONSTRAINT %I TO %I', d.rel, twin, r.conname), NULL, finished);
                IF obj_description(r.oid, 'pg_constraint') IS NOT NULL THEN
                    steps := steps || _pg_shard_id.step(640, 'swap', 'check constraint', what, 'carry', NULL,
                                                        format('COMMENT ON CONSTRAINT %I ON %s IS %L', r.conname, d.rel, obj_description(r.oid, 'pg_constraint')),
                                                        'its comment', finished);
                END IF;
            ELSIF r.contype = 'f' AND cardinality(r.conkey) = 1 AND r.confrelid = tbl AND r.confkey = ARRAY[key_attnum]
                  AND (d.role = 'key' OR r.conrelid = d.rel) THEN
                NULL;  -- a foreign key the conversion carries (its own steps, below)
            ELSIF r.contype = 'f' THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', CASE WHEN r.confrelid = tbl THEN 'foreign key to the key' ELSE 'foreign key from a moved column' END,
                                                    format('constraint %I on %s', r.conname, r.conrelid::regclass), 'refuse', NULL,
                                                    format('ALTER TABLE %s DROP CONSTRAINT %I', r.conrelid::regclass, r.conname),
                                                    format('%s; the conversion carries only a single-column foreign key to the key', pg_get_constraintdef(r.oid)), false);
            ELSE
                d.classid := 0;
            END IF;
        ELSIF d.classid = 'pg_rewrite'::regclass THEN
            SELECT w.oid, w.rulename, w.ev_class, w.ev_enabled, k.relkind, k.relowner, k.reloptions INTO r
              FROM pg_rewrite w JOIN pg_class k ON k.oid = w.ev_class WHERE w.oid = d.objid;
            kind := CASE WHEN r.relkind = 'm' THEN 'materialized view' WHEN r.rulename = '_RETURN' THEN 'view' ELSE 'rule' END;
            what := CASE WHEN kind = 'rule' THEN d.what ELSE format('%s %s', kind, r.ev_class::regclass) END;
            IF kind = 'materialized view' THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', kind, what, 'refuse', NULL, format('DROP MATERIALIZED VIEW %s', r.ev_class::regclass),
                                                    'its rows were computed from the old key: drop it, convert, create it again', false);
            ELSIF NOT pg_has_role(r.relowner, 'USAGE') THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', kind, what, 'refuse', NULL, NULL,
                                                    format('owned by %s, whom the caller cannot act as: its owner converts, or the caller gets its role', r.relowner::regrole), false);
            ELSIF kind = 'rule' AND d.old_type <> 'bigint' THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', 'expression on a key that is not bigint', what, 'refuse', NULL, NULL,
                                                    format('it reads %s.%I, which is %s; the new column is bigint: drop it, convert, create it again', d.rel, d.old_column, d.old_type), false);
            ELSIF kind = 'view' AND d.old_type <> 'bigint' THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', kind, what, 'refuse', NULL, format('DROP VIEW %s', r.ev_class::regclass),
                                                    format('%s.%I is %s and its new column bigint: a column of the view may change its type, which CREATE OR REPLACE VIEW cannot do; drop it, convert, create it again',
                                                           d.rel, d.old_column, d.old_type), false);
            ELSIF kind = 'view' THEN
                locked_first := locked_first || r.ev_class::regclass;
                steps := steps || _pg_shard_id.step(670, 'swap', kind, what, 'carry', format('ACCESS EXCLUSIVE on %s', r.ev_class::regclass),
                                                    format('CREATE OR REPLACE VIEW %s%s AS %s', r.ev_class::regclass,
                                                           CASE WHEN r.reloptions IS NOT NULL THEN ' WITH (' || array_to_string(r.reloptions, ', ') || ')' ELSE '' END,
                                                           pg_get_viewdef(r.ev_class)),
                                                    'its definition, read under the swap''s locks, names the key: after the renames, the new column', finished);
            ELSE
                locked_first := locked_first || r.ev_class::regclass;
                steps := steps || _pg_shard_id.step(670, 'swap', kind, what, 'carry', format('ACCESS EXCLUSIVE on %s', r.ev_class::regclass),
                                                    regexp_replace(pg_get_ruledef(r.oid), '^CREATE RULE', 'CREATE OR REPLACE RULE')
                                                    || CASE WHEN r.ev_enabled <> 'O' THEN format(' ALTER TABLE %s %s RULE %I;', r.ev_class::regclass,
                                                                CASE r.ev_enabled WHEN 'D' THEN 'DISABLE' WHEN 'A' THEN 'ENABLE ALWAYS' ELSE 'ENABLE REPLICA' END, r.rulename)
                                                            ELSE '' END,
                                                    'its definition, read under the swap''s locks; enabled as it was', finished);
            END IF;
        ELSIF d.classid = 'pg_trigger'::regclass THEN
            SELECT t.*, k.relowner INTO r FROM pg_trigger t JOIN pg_class k ON k.oid = t.tgrelid WHERE t.oid = d.objid;
            CONTINUE WHEN r.tgisinternal OR r.tgparentid <> 0 OR r.tgfoid = ANY (ours);
            IF d.old_type <> 'bigint' AND r.tgqual IS NOT NULL THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', 'expression on a key that is not bigint', d.what, 'refuse', NULL, NULL,
                                                    format('its WHEN clause reads %s.%I, which is %s; the new column is bigint: drop it, convert, create it again', d.rel, d.old_column, d.old_type), false);
            ELSIF NOT pg_has_role(r.relowner, 'USAGE') THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', 'trigger', d.what, 'refuse', NULL, NULL,
                                                    format('on a table owned by %s, whom the caller cannot act as', r.relowner::regrole), false);
            ELSE
                steps := steps || _pg_shard_id.step(670, 'swap', 'trigger', d.what, 'carry', format('SHARE ROW EXCLUSIVE on %s', r.tgrelid::regclass),
                                                    CASE WHEN r.tgconstraint <> 0
                                                         THEN format('DROP TRIGGER %I ON %s; %s;', r.tgname, r.tgrelid::regclass, pg_get_triggerdef(r.oid))
                                                              || coalesce(format(' COMMENT ON TRIGGER %I ON %s IS %L;', r.tgname, r.tgrelid::regclass, obj_description(r.oid, 'pg_trigger')), '')
                                                         ELSE regexp_replace(pg_get_triggerdef(r.oid), '^CREATE TRIGGER', 'CREATE OR REPLACE TRIGGER') || ';' END
                                                    || CASE WHEN r.tgenabled <> 'O' THEN format(' ALTER TABLE %s %s TRIGGER %I;', r.tgrelid::regclass,
                                                                CASE r.tgenabled WHEN 'D' THEN 'DISABLE' WHEN 'A' THEN 'ENABLE ALWAYS' ELSE 'ENABLE REPLICA' END, r.tgname)
                                                            ELSE '' END
                                                    -- (a partitioned table's trigger: each partition's clone set back to its own state,
                                                    -- which the statements above overwrote)
                                                    || coalesce((WITH RECURSIVE clones AS (
                                                                     SELECT ct.oid, ct.tgrelid, ct.tgname, ct.tgenabled, 1 AS depth FROM pg_trigger ct WHERE ct.tgparentid = r.oid
                                                                     UNION ALL
                                                                     SELECT ct.oid, ct.tgrelid, ct.tgname, ct.tgenabled, cl.depth + 1 FROM pg_trigger ct JOIN clones cl ON ct.tgparentid = cl.oid)
                                                                 SELECT string_agg(format(' ALTER TABLE %s %s TRIGGER %I;', cl.tgrelid::regclass,
                                                                                          CASE cl.tgenabled WHEN 'D' THEN 'DISABLE' WHEN 'A' THEN 'ENABLE ALWAYS'
                                                                                                            WHEN 'R' THEN 'ENABLE REPLICA' ELSE 'ENABLE' END, cl.tgname), '' ORDER BY cl.depth, cl.tgrelid::oid)
                                                                   FROM clones cl), ''),
                                                    'its definition (UPDATE OF columns, WHEN), read under the swap''s locks; enabled as it was, on each partition too', finished);
            END IF;
        ELSIF d.classid = 'pg_policy'::regclass THEN
            SELECT p.*, k.relowner INTO r FROM pg_policy p JOIN pg_class k ON k.oid = p.polrelid WHERE p.oid = d.objid;
            IF d.old_type <> 'bigint' THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', 'expression on a key that is not bigint', d.what, 'refuse', NULL, NULL,
                                                    format('its expressions read %s.%I, which is %s; the new column is bigint: drop it, convert, create it again', d.rel, d.old_column, d.old_type), false);
            ELSIF NOT pg_has_role(r.relowner, 'USAGE') THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', 'policy', d.what, 'refuse', NULL, NULL,
                                                    format('on a table owned by %s, whom the caller cannot act as', r.relowner::regrole), false);
            ELSE
                locked_first := locked_first || r.polrelid::regclass;
                steps := steps || _pg_shard_id.step(670, 'swap', 'policy', d.what, 'carry', format('ACCESS EXCLUSIVE on %s', r.polrelid::regclass),
                                                    format('ALTER POLICY %I ON %s%s%s', r.polname, r.polrelid::regclass,
                                                           CASE WHEN r.polqual IS NOT NULL THEN ' USING (' || pg_get_expr(r.polqual, r.polrelid) || ')' ELSE '' END,
                                                           CASE WHEN r.polwithcheck IS NOT NULL THEN ' WITH CHECK (' || pg_get_expr(r.polwithcheck, r.polrelid) || ')' ELSE '' END),
                                                    'its expressions, read under the swap''s locks', finished);
            END IF;
        ELSIF d.classid = 'pg_statistic_ext'::regclass THEN
            SELECT st.*, format('%I.%I', ns.nspname, st.stxname) AS qname INTO r
              FROM pg_statistic_ext st JOIN pg_namespace ns ON ns.oid = st.stxnamespace WHERE st.oid = d.objid;
            IF d.old_type <> 'bigint' AND r.stxexprs IS NOT NULL THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', 'expression on a key that is not bigint', d.what, 'refuse', NULL, NULL,
                                                    format('its expressions read %s.%I, which is %s; the new column is bigint: drop it, convert, create it again', d.rel, d.old_column, d.old_type), false);
            ELSIF NOT pg_has_role(r.stxowner, 'USAGE') THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', 'statistics object', d.what, 'refuse', NULL, NULL,
                                                    format('owned by %s, whom the caller cannot act as', r.stxowner::regrole), false);
            ELSE
                steps := steps || _pg_shard_id.step(670, 'swap', 'statistics object', d.what, 'carry', format('SHARE UPDATE EXCLUSIVE on %s', r.stxrelid::regclass),
                                                    format('DROP STATISTICS %s; %s;', r.qname, pg_get_statisticsobjdef(r.oid))
                                                    || CASE WHEN coalesce(r.stxstattarget::int, -1) >= 0 THEN format(' ALTER STATISTICS %s SET STATISTICS %s;', r.qname, r.stxstattarget) ELSE '' END
                                                    || CASE WHEN NOT pg_has_role(r.stxowner, 'MEMBER') OR r.stxowner::regrole::text <> current_user::text
                                                            THEN format(' ALTER STATISTICS %s OWNER TO %s;', r.qname, r.stxowner::regrole) ELSE '' END
                                                    || coalesce(format(' COMMENT ON STATISTICS %s IS %L;', r.qname, obj_description(r.oid, 'pg_statistic_ext')), ''),
                                                    'its definition, read under the swap''s locks (the next ANALYZE gathers its statistics)', finished);
            END IF;
        ELSIF d.classid = 'pg_publication_rel'::regclass THEN
            SELECT pr.*, p.pubname, p.pubowner INTO r FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid WHERE pr.oid = d.objid;
            IF d.old_type <> 'bigint' AND r.prqual IS NOT NULL THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', 'expression on a key that is not bigint', d.what, 'refuse', NULL, NULL,
                                                    format('its row filter reads %s.%I, which is %s; the new column is bigint: drop it, convert, add it again', d.rel, d.old_column, d.old_type), false);
            ELSIF NOT pg_has_role(r.pubowner, 'USAGE') THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', 'publication', d.what, 'refuse', NULL, NULL,
                                                    format('owned by %s, whom the caller cannot act as', r.pubowner::regrole), false);
            ELSE
                steps := steps || _pg_shard_id.step(670, 'swap', 'publication', d.what, 'carry', NULL,
                                                    format('ALTER PUBLICATION %I DROP TABLE %s; ALTER PUBLICATION %I ADD TABLE %s%s%s;', r.pubname, r.prrelid::regclass,
                                                           r.pubname, r.prrelid::regclass,
                                                           CASE WHEN r.prattrs IS NOT NULL
                                                                THEN ' (' || (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) FROM pg_attribute a
                                                                               WHERE a.attrelid = r.prrelid AND a.attnum = ANY (r.prattrs::int2[])) || ')' ELSE '' END,
                                                           CASE WHEN r.prqual IS NOT NULL THEN ' WHERE (' || pg_get_expr(r.prqual, r.prrelid) || ')' ELSE '' END),
                                                    'its column list and row filter, read under the swap''s locks', finished);
            END IF;
        ELSIF d.classid = 'pg_proc'::regclass AND (SELECT prosqlbody IS NOT NULL FROM pg_proc WHERE oid = d.objid) THEN
            SELECT p.proowner, p.proleakproof INTO r FROM pg_proc p WHERE p.oid = d.objid;
            IF NOT pg_has_role(r.proowner, 'USAGE') OR d.old_type <> 'bigint'
               OR (r.proleakproof AND NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)) THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', 'function', d.what, 'refuse', NULL, NULL,
                                                    CASE WHEN d.old_type <> 'bigint'
                                                         THEN format('%s.%I is %s and its new column bigint: the types in the function may change; drop it, convert, create it again', d.rel, d.old_column, d.old_type)
                                                         WHEN r.proleakproof
                                                         THEN 'LEAKPROOF: only a superuser may create it again at the swap; a superuser converts, or drop it, convert, create it again'
                                                         ELSE format('owned by %s, whom the caller cannot act as', r.proowner::regrole) END, false);
            ELSE
                steps := steps || _pg_shard_id.step(670, 'swap', 'function', d.what, 'carry', NULL, pg_get_functiondef(d.objid),
                                                    'its SQL-standard body, read under the swap''s locks', finished);
            END IF;
        ELSIF d.classid <> 'pg_attrdef'::regclass THEN
            d.classid := 0;
        END IF;
        IF d.classid = 'pg_attrdef'::regclass THEN
            SELECT ad.adrelid, ad.adnum, ad.adbin, a.attname, a.attgenerated INTO r
              FROM pg_attrdef ad JOIN pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum WHERE ad.oid = d.objid;
            what := format('column %s.%I', r.adrelid::regclass, r.attname);
            IF r.adnum = d.old_attnum AND r.adrelid = d.rel AND d.role = 'reference' AND r.attgenerated = '' THEN
                -- (the swap gives the name to the new column, which has no DEFAULT: inserts that
                -- leave it out, and ON DELETE SET DEFAULT, would get NULL: the tenth review)
                steps := steps || _pg_shard_id.step(0, 'prepare', 'default of a referencing column', what, 'refuse', NULL,
                                                    format('ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT', r.adrelid::regclass, r.attname),
                                                    format('DEFAULT %s names an old key: after the swap the column is the new one, without it; drop it, convert, set it again to the new id of the row it names',
                                                           pg_get_expr(r.adbin, r.adrelid)), false);
            ELSIF r.adnum = d.old_attnum AND r.adrelid = d.rel THEN
                NULL;  -- the old column's own DEFAULT: it keeps it (the 'kept' step)
            ELSIF r.attgenerated = '' THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', 'unknown', d.what, 'refuse', NULL, NULL,
                                                    format('depends on %s.%I, and no rule of the conversion knows it', d.rel, d.old_column), false);
            -- (the user's CHECKs: the conversion's own, on a new column, are dropped at the swap
            -- before SET EXPRESSION: the seventeenth review)
            ELSIF r.attgenerated = 'v' AND EXISTS (SELECT FROM pg_constraint k WHERE k.conrelid = r.adrelid AND k.contype = 'c'
                                                       AND NOT _pg_shard_id.own_constraint(k.oid, tbl, key_column, conversion_inventory.new_column)) THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', 'generated column', what, 'refuse', NULL,
                                                    format('ALTER TABLE %s DROP COLUMN %I', r.adrelid::regclass, r.attname),
                                                    format('virtual and computed from %I, in a table with CHECK constraints: PostgreSQL 18 changes such a column''s expression only without them; drop it, convert and add it again (no rewrite)',
                                                           d.old_column), false);
            -- (PostgreSQL 18 refuses SET EXPRESSION on a virtual column of a table, or of any
            -- partition of it, that a publication names itself (not FOR ALL TABLES or TABLES IN
            -- SCHEMA): the swap could not complete, the eighteenth review)
            ELSIF r.attgenerated = 'v' AND EXISTS (SELECT FROM pg_publication_rel pr
                                                    WHERE pr.prrelid IN (SELECT _pg_shard_id.tree(r.adrelid))) THEN
                steps := steps || _pg_shard_id.step(0, 'prepare', 'generated column', what, 'refuse', NULL,
                                                    format('ALTER TABLE %s DROP COLUMN %I', r.adrelid::regclass, r.attname),
                                                    format('virtual and computed from %I, in a table a publication names (%s): PostgreSQL 18 changes such a column''s expression only outside publications; drop it, convert and add it again (no rewrite), or take the table out of the publication while converting',
                                                           d.old_column,
                                                           (SELECT string_agg(DISTINCT quote_ident(p.pubname), ', ') FROM pg_publication_rel pr JOIN pg_publication p ON p.oid = pr.prpubid
                                                             WHERE pr.prrelid IN (SELECT _pg_shard_id.tree(r.adrelid)))), false);
            ELSIF r.attgenerated = 'v' THEN
                steps := steps || _pg_shard_id.step(670, 'swap', 'generated column', what, 'carry', NULL,
                                                    format('ALTER TABLE %s ALTER COLUMN %I SET EXPRESSION AS (%s)', r.adrelid::regclass, r.attname, pg_get_expr(r.adbin, r.adrelid)),
                                                    'virtual: computed when read, no rewrite', finished);
            ELSE
                steps := steps || _pg_shard_id.step(0, 'prepare', 'generated column', what, 'refuse', NULL,
                                                    format('ALTER TABLE %s ALTER COLUMN %I DROP EXPRESSION', r.adrelid::regclass, r.attname),
                                                    format('stored and computed from %I: PostgreSQL computes it again only by rewriting the table under ACCESS EXCLUSIVE (SET EXPRESSION, PostgreSQL 17 and later); make it a plain column (this statement), or drop it, convert and add it again',
                                                           d.old_column), false);
            END IF;
        ELSIF d.classid = 0 THEN
            steps := steps || _pg_shard_id.step(0, 'prepare', 'unknown', d.what, 'refuse', NULL, NULL,
                                                format('depends on %s.%I (pg_depend, deptype %s), and no rule of the conversion knows it', d.rel, d.old_column, d.deptype), false);
        END IF;
    END LOOP;

    -- ---- each index on a moved column (a constraint's, or plain): a twin built concurrently on
    -- the new column (on each leaf of a partitioned index), swapped in under the old name ----
    FOR i IN 1 .. coalesce(array_length(indexes, 1), 0) LOOP
        SELECT k.oid::regclass AS idx, k.relname, k.relkind, ns.nspname, k.relnamespace AS nspoid, ix.indrelid::regclass AS rel, ix.indisreplident, ix.indisclustered,
               obj_description(k.oid, 'pg_class') AS note, con.conname, con.contype, con.condeferrable, con.condeferred,
               obj_description(con.oid, 'pg_constraint') AS con_note
          INTO r FROM pg_class k JOIN pg_namespace ns ON ns.oid = k.relnamespace JOIN pg_index ix ON ix.indexrelid = k.oid
          LEFT JOIN pg_constraint con ON con.oid = indexes[i][2]
         WHERE k.oid = indexes[i][1];
        kind := CASE r.contype WHEN 'p' THEN 'primary key' WHEN 'u' THEN 'unique constraint' ELSE 'index' END;
        what := CASE WHEN r.conname IS NOT NULL THEN format('constraint %I on %s', r.conname, r.rel) ELSE format('index %I.%I', r.nspname, r.relname) END;
        stmt := CASE r.contype WHEN 'p' THEN 'PRIMARY KEY' WHEN 'u' THEN 'UNIQUE' END;  -- the constraint's kind
        FOR c IN SELECT l.relid::regclass AS leaf_index, lx.indrelid::regclass AS leaf, lk.relname AS leaf_index_name, ln.nspname, ln.oid AS nspoid,
                        (SELECT lc.conname FROM pg_constraint lc WHERE lc.conindid = l.relid AND lc.contype IN ('p', 'u')) AS leaf_conname,
                        (SELECT obj_description(lc.oid, 'pg_constraint') FROM pg_constraint lc
                          WHERE lc.conindid = l.relid AND lc.contype IN ('p', 'u')) AS leaf_con_note,
                        _pg_shard_id.derived_name(lk.relname, '_shard_id_twin') AS twin
                   FROM pg_partition_tree(r.idx) l JOIN pg_index lx ON lx.indexrelid = l.relid
                   JOIN pg_class lk ON lk.oid = l.relid JOIN pg_namespace ln ON ln.oid = lk.relnamespace
                  WHERE l.isleaf
                 UNION ALL
                 SELECT r.idx, r.rel, r.relname, r.nspname, r.nspoid, r.conname, NULL,
                        _pg_shard_id.derived_name(r.relname, '_shard_id_twin')
                  WHERE r.relkind = 'i'
                  ORDER BY 2 LOOP
            SELECT array_agg(cc.old_attnum ORDER BY cc.old_attnum) AS olds, array_agg(cc.new_attnum ORDER BY cc.old_attnum) AS news
              INTO moves FROM _pg_shard_id.conversion_columns(tbl, key_column, new_column) cc WHERE cc.rel = c.leaf AND cc.new_attnum IS NOT NULL;
            -- (the twin: an index on the leaf, on the new columns, of the index's own shape: its
            -- columns with the moved ones replaced, operator classes, options, uniqueness, access
            -- method, expressions and predicate or none; an index of another shape that merely
            -- names a new column was taken for it, the twenty-first review)
            SELECT EXISTS (SELECT FROM pg_index ti JOIN pg_index oi ON oi.indexrelid = c.leaf_index
                            WHERE ti.indexrelid = t.oid AND ti.indrelid = c.leaf
                              AND EXISTS (SELECT FROM pg_depend dd
                                           WHERE dd.classid = 'pg_class'::regclass AND dd.objid = ti.indexrelid
                                             AND dd.refclassid = 'pg_class'::regclass AND dd.refobjid = c.leaf
                                             AND dd.refobjsubid = ANY (moves.news))
                              AND t.relam = (SELECT relam FROM pg_class WHERE oid = oi.indexrelid)
                              AND (ti.indisunique, ti.indnatts, ti.indnkeyatts) = (oi.indisunique, oi.indnatts, oi.indnkeyatts)
                              AND ti.indoption::int2[] = oi.indoption::int2[]
                              -- (the operator classes of the plain columns not moved; a moved
                              -- one's follows its new type, an integer key's twin is on a bigint,
                              -- and so may an expression's: (id % 16) on an integer key is an
                              -- integer, on its bigint twin a bigint, the twenty-second review)
                              AND ARRAY(SELECT CASE WHEN k.a = 0 OR k.a = ANY (moves.olds) THEN 0 ELSE coalesce(k.c, 0) END
                                          FROM unnest(oi.indkey::int2[], oi.indclass::oid[]) WITH ORDINALITY k(a, c, i) ORDER BY k.i)
                                  = ARRAY(SELECT CASE WHEN k.a = 0 OR k.a = ANY (moves.news) THEN 0 ELSE coalesce(k.c, 0) END
                                            FROM unnest(ti.indkey::int2[], ti.indclass::oid[]) WITH ORDINALITY k(a, c, i) ORDER BY k.i)
                              -- (and the collations of all but the moved plain columns, which are
                              -- bigint's, none: an index on (item COLLATE "C", shard_id) was taken
                              -- for the twin of one on (item, id), the twenty-second review)
                              AND ARRAY(SELECT CASE WHEN k.a <> 0 AND k.a = ANY (moves.olds) THEN 0 ELSE coalesce(k.c, 0) END
                                          FROM unnest(oi.indkey::int2[], oi.indcollation::oid[]) WITH ORDINALITY k(a, c, i) ORDER BY k.i)
                                  = ARRAY(SELECT CASE WHEN k.a <> 0 AND k.a = ANY (moves.news) THEN 0 ELSE coalesce(k.c, 0) END
                                            FROM unnest(ti.indkey::int2[], ti.indcollation::oid[]) WITH ORDINALITY k(a, c, i) ORDER BY k.i)
                              AND (ti.indexprs IS NULL) = (oi.indexprs IS NULL) AND (ti.indpred IS NULL) = (oi.indpred IS NULL)
                              -- (both from 1: an int2vector's array counts from 0, and arrays of other
                              -- bounds are never equal)
                              AND ARRAY(SELECT k.a FROM unnest(ti.indkey::int2[]) WITH ORDINALITY k(a, i) ORDER BY k.i)
                                  = ARRAY(SELECT coalesce(moves.news[array_position(moves.olds, k.a)], k.a)
                                            FROM unnest(oi.indkey::int2[]) WITH ORDINALITY k(a, i) ORDER BY k.i)),
                   coalesce((SELECT ti.indisvalid FROM pg_index ti WHERE ti.indexrelid = t.oid), false)
              INTO twin_is_ours, twin_valid
              FROM pg_class t WHERE t.relname = c.twin AND t.relnamespace = c.nspoid;
            made := made || jsonb_build_object('kind', 'relation', 'scope', c.nspoid, 'name', c.twin,
                                               'ours', coalesce(twin_is_ours, false));
            steps := steps || _pg_shard_id.step(300, 'indexes', kind, format('index %I.%I', c.nspname, c.leaf_index_name), 'build',
                                                format('SHARE UPDATE EXCLUSIVE on %s (writes go on)', c.leaf),
                                                CASE WHEN prepared THEN _pg_shard_id.index_statement(c.leaf_index, c.twin, moves.olds, moves.news, 'concurrently')
                                                     ELSE format('-- after the prepare: %s, with the new column in place of the old', pg_get_indexdef(c.leaf_index)) END,
                                                format('its twin %I, swapped in at the finish', c.twin),
                                                finished OR (twin_is_ours AND twin_valid) IS TRUE);
            IF r.relkind = 'I' AND r.contype IS NOT NULL THEN
                steps := steps || _pg_shard_id.step(625, 'swap', kind, format('index %I.%I', c.nspname, c.leaf_index_name), 'build', NULL,
                                                    format('ALTER TABLE %s ADD CONSTRAINT %I %s USING INDEX %I', c.leaf, c.leaf_conname, stmt, c.twin),
                                                    'the partition''s constraint, from its twin (the partitioned table''s, below, attaches it)', finished);
                IF c.leaf_con_note IS NOT NULL THEN
                    steps := steps || _pg_shard_id.step(640, 'swap', kind, format('constraint %I on %s', c.leaf_conname, c.leaf), 'carry', NULL,
                                                        format('COMMENT ON CONSTRAINT %I ON %s IS %L', c.leaf_conname, c.leaf, c.leaf_con_note), 'its comment', finished);
                END IF;
            ELSIF r.relkind = 'I' THEN
                steps := steps || _pg_shard_id.step(635, 'swap', kind, format('index %I.%I', c.nspname, c.leaf_index_name), 'rename', NULL,
                                                    format('ALTER INDEX %I.%I RENAME TO %I', c.nspname, c.twin, c.leaf_index_name),
                                                    'the partition''s twin, attached, takes the old name', finished);
            END IF;
        END LOOP;
        SELECT array_agg(cc.old_attnum ORDER BY cc.old_attnum) AS olds, array_agg(cc.new_attnum ORDER BY cc.old_attnum) AS news
          INTO moves FROM _pg_shard_id.conversion_columns(tbl, key_column, new_column) cc WHERE cc.rel = r.rel AND cc.new_attnum IS NOT NULL;
        twin := _pg_shard_id.derived_name(r.relname, '_shard_id_twin');
        steps := steps || _pg_shard_id.step(610, 'swap', kind, what, 'drop', NULL,
                                            CASE WHEN r.conname IS NOT NULL THEN format('ALTER TABLE %s DROP CONSTRAINT %I', r.rel, r.conname)
                                                 ELSE format('DROP INDEX %I.%I', r.nspname, r.relname) END,
                                            'the old one', finished);
        steps := steps || _pg_shard_id.step(630, 'swap', kind, what, CASE WHEN r.relkind = 'i' AND r.conname IS NULL THEN 'rename' ELSE 'build' END, NULL,
                                            CASE WHEN r.relkind = 'i' AND r.conname IS NULL
                                                 THEN format('ALTER INDEX %I.%I RENAME TO %I', r.nspname, twin, r.relname)
                                                 WHEN r.relkind = 'i'
                                                 THEN format('ALTER TABLE %s ADD CONSTRAINT %I %s USING INDEX %I', r.rel, r.conname, stmt, twin)
                                                 WHEN NOT prepared THEN NULL
                                                 WHEN r.conname IS NULL
                                                 THEN _pg_shard_id.index_statement(r.idx, r.relname, moves.olds, moves.news, 'parent')
                                                 ELSE format('ALTER TABLE %s ADD CONSTRAINT %I %s (%s)', r.rel, r.conname, stmt,
                                                             (SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY k.i)
                                                                FROM unnest((SELECT indkey::int2[] FROM pg_index WHERE indexrelid = r.idx)) WITH ORDINALITY k(attnum, i)
                                                                JOIN pg_attribute a ON a.attrelid = r.rel
                                                                 AND a.attnum = coalesce(moves.news[array_position(moves.olds, k.attnum)], k.attnum)))
                                            END || CASE WHEN r.condeferrable THEN ' DEFERRABLE' || CASE WHEN r.condeferred THEN ' INITIALLY DEFERRED' ELSE '' END ELSE '' END,
                                            CASE WHEN r.relkind = 'i' THEN 'from the twin built concurrently: no scan'
                                                 ELSE 'on the partitioned table: attaches each partition''s twin, builds nothing' END, finished);
        IF r.note IS NOT NULL THEN
            steps := steps || _pg_shard_id.step(640, 'swap', kind, what, 'carry', NULL,
                                                format('COMMENT ON INDEX %I.%I IS %L', r.nspname, r.relname, r.note), 'its comment', finished);
        END IF;
        IF r.con_note IS NOT NULL THEN
            steps := steps || _pg_shard_id.step(640, 'swap', kind, what, 'carry', NULL,
                                                format('COMMENT ON CONSTRAINT %I ON %s IS %L', r.conname, r.rel, r.con_note), 'the constraint''s comment', finished);
        END IF;
        IF r.indisreplident THEN
            steps := steps || _pg_shard_id.step(640, 'swap', kind, what, 'carry', NULL,
                                                format('ALTER TABLE %s REPLICA IDENTITY USING INDEX %I', r.rel, coalesce(r.conname, r.relname)),
                                                'the table''s replica identity', finished);
        END IF;
        IF r.indisclustered THEN
            steps := steps || _pg_shard_id.step(640, 'swap', kind, what, 'carry', NULL,
                                                format('ALTER TABLE %s CLUSTER ON %I', r.rel, coalesce(r.conname, r.relname)),
                                                'the table''s CLUSTER mark', finished);
        END IF;
        IF r.relkind = 'i' THEN
            FOR x IN SELECT a.attnum, a.attstattarget FROM pg_attribute a
                      WHERE a.attrelid = r.idx AND a.attnum > 0 AND coalesce(a.attstattarget::int, -1) >= 0 ORDER BY a.attnum LOOP
                steps := steps || _pg_shard_id.step(640, 'swap', kind, what, 'carry', NULL,
                                                    format('ALTER INDEX %I.%I ALTER COLUMN %s SET STATISTICS %s', r.nspname, coalesce(r.conname, r.relname), x.attnum, x.attstattarget),
                                                    'an expression column''s statistics target', finished);
            END LOOP;
        END IF;
    END LOOP;

    -- ---- the properties of each moved column that are not objects of their own ----
    FOR c IN SELECT cc.*, a.attacl, a.attstattarget, a.attoptions, col_description(cc.rel, cc.old_attnum) AS note
               FROM _pg_shard_id.conversion_columns(tbl, key_column, new_column) cc
               JOIN pg_attribute a ON a.attrelid = cc.rel AND a.attnum = cc.old_attnum LOOP
        what := format('column %s.%I', c.rel, c.old_column);
        FOR x IN SELECT g.privilege_type, g.is_grantable, CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE g.grantee::regrole::text END AS grantee
                   FROM aclexplode(c.attacl) g ORDER BY 3, 1 LOOP
            steps := steps || _pg_shard_id.step(640, 'swap', 'column privileges', what, 'carry', NULL,
                                                format('GRANT %s (%I) ON %s TO %s%s', x.privilege_type, c.new_column, c.rel, x.grantee,
                                                       CASE WHEN x.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END),
                                                'granted on the new column (the old keeps it)', finished);
        END LOOP;
        IF c.note IS NOT NULL THEN
            steps := steps || _pg_shard_id.step(640, 'swap', 'column comment', what, 'carry', NULL,
                                                format('COMMENT ON COLUMN %s.%I IS %L', c.rel, c.new_column, c.note), NULL, finished);
        END IF;
        FOR x IN SELECT l.provider, l.label FROM pg_seclabel l
                  WHERE l.classoid = 'pg_class'::regclass AND l.objoid = c.rel AND l.objsubid = c.old_attnum LOOP
            steps := steps || _pg_shard_id.step(640, 'swap', 'column security label', what, 'carry', NULL,
                                                format('SECURITY LABEL FOR %I ON COLUMN %s.%I IS %L', x.provider, c.rel, c.new_column, x.label), NULL, finished);
        END LOOP;
        IF coalesce(c.attstattarget::int, -1) >= 0 THEN
            steps := steps || _pg_shard_id.step(640, 'swap', 'column settings', what, 'carry', NULL,
                                                format('ALTER TABLE %s ALTER COLUMN %I SET STATISTICS %s', c.rel, c.new_column, c.attstattarget), NULL, finished);
        END IF;
        -- (the options ALTER COLUMN ... SET takes; a server may keep others of its own there)
        stmt := (SELECT string_agg(o, ', ') FROM unnest(c.attoptions) o WHERE o ~ '^(n_distinct|n_distinct_inherited)=');
        IF stmt IS NOT NULL THEN
            steps := steps || _pg_shard_id.step(640, 'swap', 'column settings', what, 'carry', NULL,
                                                format('ALTER TABLE %s ALTER COLUMN %I SET (%s)', c.rel, c.new_column, stmt), NULL, finished);
        END IF;
    END LOOP;

    -- ---- the user's triggers and rules the batches' UPDATEs would fire ----
    FOR x IN SELECT * FROM _pg_shard_id.conversion_triggers(tbl, key_column, new_column) LOOP
        what := format('%s %I on %s', x.what, x.name, x.rel);
        IF fire_triggers THEN
            steps := steps || _pg_shard_id.step(400, 'convert', 'user trigger or rule fired by the batches', what, 'fire', NULL, NULL,
                                                'fires for each row of each batch (fire_triggers => true)', false);
        ELSIF x.enabled IN ('A', 'R') THEN
            steps := steps || _pg_shard_id.step(0, 'prepare', 'user trigger or rule fired by the batches', what, 'refuse', NULL, NULL,
                                                format('enabled %s: it would fire for each row of each batch even with session_replication_role = replica',
                                                       CASE x.enabled WHEN 'A' THEN 'ALWAYS' ELSE 'REPLICA' END), false);
        ELSIF NOT may_quiet THEN
            steps := steps || _pg_shard_id.step(0, 'prepare', 'user trigger or rule fired by the batches', what, 'refuse', NULL, NULL,
                                                'it would fire for each row of each batch: the batches silence it with session_replication_role = replica, which the caller may not set', false);
        ELSE
            steps := steps || _pg_shard_id.step(400, 'convert', 'user trigger or rule fired by the batches', what, 'quiet', NULL, NULL,
                                                'does not fire: the batches run with session_replication_role = replica', false);
        END IF;
    END LOOP;

    -- ---- the conversion's own steps ----
    -- the prepare: the new columns, the new column's DEFAULT, the triggers for rows written meanwhile
    -- (ENABLE ALWAYS: they fire for writers that run with session_replication_role = replica too,
    -- pglogical's or Bucardo's apply, a restore with --disable-triggers' SET, a bulk load; skipped
    -- there, a line moved to another order kept its old order's new id: the eighth review. Their
    -- WHEN clauses keep them silent for the batches' own UPDATEs, which run as replica.)
    steps := steps || _pg_shard_id.step(100, 'prepare', 'old key column', format('table %s', tbl), 'add', format('ACCESS EXCLUSIVE on %s, catalog only (no rewrite)', tbl),
                                        format('ALTER TABLE %s ADD COLUMN %I bigint; ALTER TABLE %s ALTER COLUMN %I SET DEFAULT @extschema@.next_shard_id(%L::regclass, %s);',
                                               tbl, new_column, tbl, new_column, seq::text, shard)
                                        || format(' CREATE TRIGGER %I BEFORE INSERT OR UPDATE ON %s FOR EACH ROW WHEN (NEW.%I IS NULL) EXECUTE FUNCTION _pg_shard_id.conversion_fill_row(%L, %L, %L, %L); ALTER TABLE %s ENABLE ALWAYS TRIGGER %I;',
                                                  fill_trigger, tbl, new_column, new_column, time_column, seq::oid, shard, tbl, fill_trigger)
                                        || format(' CREATE TRIGGER %I AFTER DELETE ON %s FOR EACH ROW WHEN (OLD.%I IS NOT NULL) EXECUTE FUNCTION _pg_shard_id.conversion_note_deleted(%L, %L, %L); ALTER TABLE %s ENABLE ALWAYS TRIGGER %I;',
                                                  _pg_shard_id.derived_name(fill_trigger, '_deleted'), tbl, new_column, tbl::oid, key_column, new_column,
                                                  tbl, _pg_shard_id.derived_name(fill_trigger, '_deleted'))
                                        || format(' CREATE TRIGGER %I AFTER UPDATE OF %I ON %s FOR EACH ROW WHEN (OLD.%I IS NOT NULL AND OLD.%I IS DISTINCT FROM NEW.%I) EXECUTE FUNCTION _pg_shard_id.conversion_note_deleted(%L, %L, %L); ALTER TABLE %s ENABLE ALWAYS TRIGGER %I;',
                                                  _pg_shard_id.derived_name(fill_trigger, '_rekeyed'), key_column, tbl, new_column, key_column, key_column, tbl::oid, key_column, new_column,
                                                  tbl, _pg_shard_id.derived_name(fill_trigger, '_rekeyed')),
                                        'the new column; rows inserted from now on get live ids, a row an UPDATE moves behind the batches gets its id from the trigger', prepared);
    -- the roles that may insert lack nothing they did not lack before: the new column's DEFAULT
    -- draws from seq (issue 55: an inserter without USAGE on it failed from the prepare on)
    SELECT string_agg(g.name, ', ' ORDER BY g.name) INTO stmt
      FROM (WITH RECURSIVE writers_of(oid) AS (
                -- the table and its partitions, then the views and rules' tables that write into
                -- them, and those that write into these (an insert through a view, or a rule of
                -- any event, runs the table's DEFAULTs as the caller: the fourth and fifth reviews)
                SELECT t::oid FROM _pg_shard_id.tree(tbl) t
                UNION
                SELECT w.ev_class FROM writers_of wr
                  JOIN pg_depend dp ON dp.refclassid = 'pg_class'::regclass AND dp.refobjid = wr.oid AND dp.classid = 'pg_rewrite'::regclass
                  JOIN pg_rewrite w ON w.oid = dp.objid)
            -- whoever may write them (any write: a rule of any event may insert), their owners (the
            -- converter may not be the owner, nor own the sequence: the fifth review)
            SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END AS name, a.grantee
              FROM writers_of wr JOIN pg_class k ON k.oid = wr.oid
              CROSS JOIN LATERAL (SELECT (aclexplode(k.relacl)).*
                                  UNION ALL
                                  SELECT (aclexplode(at.attacl)).* FROM pg_attribute at WHERE at.attrelid = k.oid AND at.attacl IS NOT NULL
                                  UNION ALL
                                  SELECT k.relowner, k.relowner, 'INSERT', false) a
             WHERE a.privilege_type IN ('INSERT', 'UPDATE', 'DELETE')
            UNION
            -- and whoever may draw from the old key's sequence (its DEFAULT's or identity's)
            SELECT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(a.grantee)) END, a.grantee
              FROM pg_class sk CROSS JOIN LATERAL aclexplode(sk.relacl) a
             WHERE sk.oid = pg_get_serial_sequence(tbl::text, key_column)::regclass
               AND a.privilege_type IN ('USAGE', 'UPDATE') AND a.grantee <> sk.relowner) g
     WHERE CASE WHEN g.grantee = 0
                THEN NOT EXISTS (SELECT FROM pg_class sq CROSS JOIN LATERAL aclexplode(sq.relacl) sa
                                  WHERE sq.oid = seq AND sa.grantee = 0 AND sa.privilege_type IN ('USAGE', 'UPDATE'))
                ELSE NOT has_sequence_privilege(g.grantee, seq, 'USAGE, UPDATE') END;
    IF stmt IS NOT NULL AND NOT prepared AND NOT has_sequence_privilege(seq, 'USAGE WITH GRANT OPTION')
       AND NOT pg_has_role((SELECT relowner FROM pg_class WHERE oid = seq), 'USAGE') THEN
        steps := steps || _pg_shard_id.step(0, 'prepare', 'sequence privileges', format('sequence %s', seq), 'refuse', NULL,
                                            format('GRANT USAGE ON SEQUENCE %s TO %s', seq, stmt),
                                            'these roles may insert into the table but not draw from the sequence its new column''s DEFAULT draws from, and the caller cannot grant it: its owner grants it first', false);
    ELSIF stmt IS NOT NULL THEN
        steps := steps || _pg_shard_id.step(105, 'prepare', 'sequence privileges', format('sequence %s', seq), 'grant', NULL,
                                            format('GRANT USAGE ON SEQUENCE %s TO %s', seq, stmt),
                                            'the roles that may insert into the table draw the new column''s ids from the prepare on (its DEFAULT), as they drew the old key''s', prepared);
    END IF;
    FOR c IN SELECT DISTINCT ON (ref.rel, ref.fk_column) ref.*,
                    (SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = tbl AND attname = key_column) AS key_type
               FROM _pg_shard_id.conversion_references(tbl, key_column, new_column) ref ORDER BY ref.rel, ref.fk_column LOOP
        trigger_name := _pg_shard_id.reference_trigger(c.fk_new_column, false);
        made := made || (SELECT jsonb_agg(jsonb_build_object('kind', k, 'scope', t::oid, 'name', n))
                           FROM _pg_shard_id.tree(c.rel) t,
                                (VALUES ('column', c.fk_new_column), ('trigger', trigger_name), ('trigger', _pg_shard_id.reference_trigger(c.fk_new_column, true)),
                                        ('constraint', _pg_shard_id.derived_name('shard_id_convert_', c.fk_new_column)),
                                        ('constraint', _pg_shard_id.derived_name('shard_id_convert_' || c.fk_new_column, '_not_null'))) v(k, n));
        steps := steps || _pg_shard_id.step(110, 'prepare', 'foreign key to the key', format('column %s.%I', c.rel, c.fk_column), 'add',
                                            format('ACCESS EXCLUSIVE on %s, catalog only (no rewrite)', c.rel),
                                            format('ALTER TABLE %s ADD COLUMN %I bigint;', c.rel, c.fk_new_column)
                                            -- (a row that comes with the new column set, INSERT ... SELECT * from another
                                            -- row, or an UPDATE that changes it from a new id, gets it again from its
                                            -- reference (one that sets it over NULL or a placeholder looks like the sweeps'
                                            -- own, and is not: the conversion's columns are not for writers): it may name
                                            -- another parent, or one a user's trigger changed: the twenty-eighth review. The
                                            -- batches and the sweeps set it only where it is NULL or a placeholder (< 0),
                                            -- and stay silent: a trigger call per placeholder under the swap's locks made its
                                            -- sweep 15 times slower, the twenty-ninth review)
                                            || format(' CREATE TRIGGER %I BEFORE INSERT ON %s FOR EACH ROW WHEN (NEW.%I IS NOT NULL OR NEW.%I IS NOT NULL) EXECUTE FUNCTION _pg_shard_id.conversion_fill_reference(%L, %L, %L, %L, %L, %L); ALTER TABLE %s ENABLE ALWAYS TRIGGER %I;',
                                                      trigger_name, c.rel, c.fk_column, c.fk_new_column, c.fk_column, c.fk_new_column, tbl::oid, key_column, c.key_type, new_column,
                                                      c.rel, trigger_name)
                                            || format(' CREATE TRIGGER %I BEFORE UPDATE ON %s FOR EACH ROW WHEN (NEW.%I IS DISTINCT FROM OLD.%I OR (NEW.%I IS NOT NULL AND NEW.%I IS NULL) OR (OLD.%I OPERATOR(pg_catalog.>=) 0 AND NEW.%I IS DISTINCT FROM OLD.%I)) EXECUTE FUNCTION _pg_shard_id.conversion_fill_reference(%L, %L, %L, %L, %L, %L); ALTER TABLE %s ENABLE ALWAYS TRIGGER %I;',
                                                      _pg_shard_id.reference_trigger(c.fk_new_column, true), c.rel, c.fk_column, c.fk_column,
                                                      c.fk_column, c.fk_new_column, c.fk_new_column, c.fk_new_column, c.fk_new_column,
                                                      c.fk_column, c.fk_new_column, tbl::oid, key_column, c.key_type, new_column,
                                                      c.rel, _pg_shard_id.reference_trigger(c.fk_new_column, true)),
                                            'the new referencing column; rows written from now on get the new id of the row they reference', prepared);
    END LOOP;
    -- the indexes: a lookup index on each new referencing column, unless a twin of an index of
    -- the old one serves (the primary key's twin, and any other index's, are above)
    FOR c IN SELECT u.*, (SELECT attnum FROM pg_attribute WHERE attrelid = u.rel AND attname = u.fk_column) AS fk_attnum
               FROM _pg_shard_id.conversion_units(tbl, key_column, new_column) u WHERE u.kind = 'child' LOOP
        CONTINUE WHEN EXISTS (SELECT FROM pg_index i WHERE i.indrelid = c.rel AND i.indkey[0] = c.fk_attnum AND i.indpred IS NULL);
        twin := _pg_shard_id.derived_name((SELECT relname FROM pg_class WHERE oid = c.rel) || '_' || c.fk_new_column, '_idx');
        made := made || jsonb_build_object('kind', 'relation', 'scope', (SELECT relnamespace FROM pg_class WHERE oid = c.rel), 'name', twin,
                                           'ours', EXISTS (SELECT FROM pg_class t JOIN pg_index i ON i.indexrelid = t.oid
                                                            JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                                                           WHERE t.relname = twin AND t.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = c.rel)
                                                             AND i.indrelid = c.rel AND i.indnatts = 1 AND a.attname = c.fk_new_column
                                                             AND NOT i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL));
        steps := steps || _pg_shard_id.step(300, 'indexes', 'foreign key to the key', format('column %s.%I', c.rel, c.fk_new_column), 'build',
                                            format('SHARE UPDATE EXCLUSIVE on %s (writes go on)', c.rel),
                                            format('CREATE INDEX CONCURRENTLY %I ON %s (%I)', twin, _pg_shard_id.qualified(c.rel), c.fk_new_column),
                                            'the foreign key''s lookups after the swap (ON DELETE, ON UPDATE)',
                                            finished OR EXISTS (SELECT FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
                                                                 WHERE i.indrelid = c.rel AND a.attname = c.fk_new_column AND i.indisvalid AND i.indpred IS NULL));
    END LOOP;
    -- the batches, by ranges of heap blocks ($1, $2), then the sweeps through the new columns' indexes
    FOR c IN SELECT * FROM _pg_shard_id.fill_statements(tbl, key_column, new_column, time_column, seq, shard) LOOP
        steps := steps || _pg_shard_id.step(CASE WHEN c.unit IS NULL THEN 420 ELSE 410 END, 'convert', 'old key column', format('table %s', c.rel), 'fill',
                                            format('ROW EXCLUSIVE on %s; each batch''s rows', c.rel), c.statement,
                                            CASE WHEN c.unit IS NULL THEN 'the sweep: rows still without an id'
                                                 WHEN c.kind = 'table' THEN 'each row''s id at its own time, a batch of blocks per transaction'
                                                 ELSE 'each referencing row gets the new id of the row it references' END, false);
    END LOOP;
    -- the finish, before the swap: NOT NULL proved by CHECKs validated while writes go on, what
    -- transactions in flight left filled first; the new column's statistics
    steps := steps || _pg_shard_id.step(500, 'finish', 'not-null constraint', format('column %s.%I', tbl, new_column), 'build',
                                        format('ACCESS EXCLUSIVE on %s, catalog only', tbl),
                                        format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%I IS NOT NULL) NOT VALID', tbl, new_check, new_column),
                                        'NOT NULL, proved before the swap', finished OR EXISTS (SELECT FROM pg_constraint WHERE conrelid = tbl AND conname = new_check));
    steps := steps || _pg_shard_id.step(510, 'finish', 'not-null constraint', format('column %s.%I', tbl, new_column), 'check',
                                        format('SHARE UPDATE EXCLUSIVE on %s (writes go on)', tbl),
                                        format('ALTER TABLE %s VALIDATE CONSTRAINT %I', tbl, new_check),
                                        'the sweeps first (rows transactions in flight left without an id), then every row checked',
                                        finished OR EXISTS (SELECT FROM pg_constraint WHERE conrelid = tbl AND conname = new_check AND convalidated));
    FOR c IN SELECT DISTINCT ON (ref.rel, ref.fk_column) ref.* FROM _pg_shard_id.conversion_references(tbl, key_column, new_column) ref
              ORDER BY ref.rel, ref.fk_column LOOP
        trigger_name := _pg_shard_id.derived_name('shard_id_convert_', c.fk_new_column);  -- (its CHECK's name: the insert trigger's until the twenty-eighth review)
        steps := steps || _pg_shard_id.step(500, 'finish', 'foreign key to the key', format('column %s.%I', c.rel, c.fk_new_column), 'build',
                                            format('ACCESS EXCLUSIVE on %s, catalog only', c.rel),
                                            format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%I IS NULL OR %I IS NOT NULL) NOT VALID', c.rel, trigger_name, c.fk_column, c.fk_new_column)
                                            || CASE WHEN c.not_null THEN format('; ALTER TABLE %s ADD CONSTRAINT %I CHECK (%I IS NOT NULL) NOT VALID', c.rel,
                                                                                _pg_shard_id.derived_name('shard_id_convert_' || c.fk_new_column, '_not_null'), c.fk_new_column) ELSE '' END,
                                            'a new id wherever there is an old key', finished OR EXISTS (SELECT FROM pg_constraint WHERE conrelid = c.rel AND conname = trigger_name));
        steps := steps || _pg_shard_id.step(510, 'finish', 'foreign key to the key', format('column %s.%I', c.rel, c.fk_new_column), 'check',
                                            format('SHARE UPDATE EXCLUSIVE on %s (writes go on)', c.rel),
                                            format('ALTER TABLE %s VALIDATE CONSTRAINT %I', c.rel, trigger_name)
                                            || CASE WHEN c.not_null THEN format('; ALTER TABLE %s VALIDATE CONSTRAINT %I', c.rel,
                                                                                _pg_shard_id.derived_name('shard_id_convert_' || c.fk_new_column, '_not_null')) ELSE '' END,
                                            'the sweeps first (rows transactions in flight left without an id), then every row checked',
                                            finished OR EXISTS (SELECT FROM pg_constraint WHERE conrelid = c.rel AND conname = trigger_name AND convalidated));
    END LOOP;
    analyzed := finished OR EXISTS (SELECT FROM pg_stats st JOIN pg_class k ON k.relname = st.tablename
                                      JOIN pg_namespace ns ON ns.oid = k.relnamespace AND ns.nspname = st.schemaname
                                     WHERE k.oid = tbl AND st.attname = new_column);
    IF NOT analyzed AND prepared THEN
        -- ANALYZE records no statistics for a table without rows: nothing to wait for then (the
        -- caller of a prepared conversion owns the table)
        EXECUTE format('SELECT NOT EXISTS (SELECT FROM %s)', tbl) INTO analyzed;
    END IF;
    steps := steps || _pg_shard_id.step(520, 'finish', 'planner statistics', format('column %s.%I', tbl, new_column), 'build',
                                        format('SHARE UPDATE EXCLUSIVE on %s (writes go on)', tbl),
                                        format('ANALYZE %s', tbl), 'plans after the swap see the new column''s values (and every statistics object''s)',
                                        analyzed);
    -- the swap: one transaction
    steps := steps || _pg_shard_id.step(600, 'swap', 'old key column', format('table %s', tbl), 'lock', 'ACCESS EXCLUSIVE on each, lock_timeout 10 s',
                                        (SELECT 'LOCK TABLE ' || string_agg(t.rel::text, ', ' ORDER BY t.tier, t.rel::oid) || ' IN ACCESS EXCLUSIVE MODE'
                                           FROM (SELECT DISTINCT ON (lk.rel) lk.rel, lk.tier
                                                   FROM (SELECT cc.top AS rel, CASE WHEN cc.top = tbl THEN 3 ELSE 1 END AS tier
                                                           FROM _pg_shard_id.conversion_columns(tbl, key_column, new_column) cc
                                                         UNION ALL
                                                         SELECT l, 2 FROM unnest(locked_first) l) lk
                                                  ORDER BY lk.rel, lk.tier DESC) t),
                                        'each referencing table, then the views, rules'' and policies'' tables the swap carries, then the table (the order readers and writers take them in: an insert into a referencing table locks it, then checks the table; a query on a view locks the view, then its tables, and LOCK on a view locks its tables too, so views come after the referencing tables), until the commit; no scan runs under the locks (the referencing rows written since the last sweep are found through the new columns'' indexes)', finished);
    FOR c IN SELECT ref.* FROM _pg_shard_id.conversion_references(tbl, key_column, new_column) ref LOOP
        steps := steps || _pg_shard_id.step(605, 'swap', 'foreign key to the key', format('constraint %I on %s', c.conname, c.rel), 'drop', NULL,
                                            format('ALTER TABLE %s DROP CONSTRAINT %I', c.rel, c.conname), 'made again on the new columns below', finished);
    END LOOP;
    FOR c IN SELECT DISTINCT ON (ref.rel, ref.fk_column) ref.* FROM _pg_shard_id.conversion_references(tbl, key_column, new_column) ref
              ORDER BY ref.rel, ref.fk_column LOOP
        steps := steps || _pg_shard_id.step(605, 'swap', 'foreign key to the key', format('column %s.%I', c.rel, c.fk_column), 'drop', NULL,
                                            format('DROP TRIGGER %I ON %s; DROP TRIGGER %I ON %s', _pg_shard_id.reference_trigger(c.fk_new_column, false), c.rel,
                                                   _pg_shard_id.reference_trigger(c.fk_new_column, true), c.rel),
                                            'the conversion''s triggers', finished);
        IF c.not_null THEN
            steps := steps || _pg_shard_id.step(620, 'swap', 'not-null constraint', format('column %s.%I', c.rel, c.fk_new_column), 'build', NULL,
                                                format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', c.rel, c.fk_new_column), 'proved by the CHECK validated before: no scan', finished);
        END IF;
        steps := steps || _pg_shard_id.step(650, 'swap', 'foreign key to the key', format('column %s.%I', c.rel, c.fk_column), 'rename', NULL,
                                            format('ALTER TABLE %s RENAME COLUMN %I TO %I; ALTER TABLE %s RENAME COLUMN %I TO %I',
                                                   c.rel, c.fk_column, _pg_shard_id.derived_name(c.fk_column, '_before_shard_id'), c.rel, c.fk_new_column, c.fk_column),
                                            'the new column takes the old one''s name', finished);
        steps := steps || _pg_shard_id.step(660, 'swap', 'foreign key to the key', format('column %s.%I', c.rel, c.fk_column), 'drop', NULL,
                                            CASE WHEN c.not_null THEN format('ALTER TABLE %s ALTER COLUMN %I DROP NOT NULL; ALTER TABLE %s DROP CONSTRAINT %I; ',
                                                                             c.rel, _pg_shard_id.derived_name(c.fk_column, '_before_shard_id'),
                                                                             c.rel, _pg_shard_id.derived_name('shard_id_convert_' || c.fk_new_column, '_not_null')) ELSE '' END
                                            || format('ALTER TABLE %s DROP CONSTRAINT %I', c.rel, _pg_shard_id.derived_name('shard_id_convert_', c.fk_new_column)),
                                            'the old column is no longer given; the conversion''s CHECKs', finished);
    END LOOP;
    steps := steps || _pg_shard_id.step(605, 'swap', 'old key column', format('table %s', tbl), 'drop', NULL,
                                        format('DROP TRIGGER %I ON %s; DROP TRIGGER IF EXISTS %I ON %s; DROP TRIGGER IF EXISTS %I ON %s; DELETE FROM _pg_shard_id.conversion_deleted WHERE relid OPERATOR(pg_catalog.=) %L::pg_catalog.regclass::pg_catalog.oid',
                                               fill_trigger, tbl, _pg_shard_id.derived_name(fill_trigger, '_deleted'), tbl,
                                               _pg_shard_id.derived_name(fill_trigger, '_rekeyed'), tbl, tbl::text),
                                        'the conversion''s triggers, and its record of deleted rows', finished);
    steps := steps || _pg_shard_id.step(620, 'swap', 'not-null constraint', format('column %s.%I', tbl, new_column), 'build', NULL,
                                        format('ALTER TABLE %s ALTER COLUMN %I SET NOT NULL', tbl, new_column), 'proved by the CHECK validated before: no scan', finished);
    -- (again, on every partition: one attached since the prepare brought its own column, without
    -- it, and its inserts failed after the swap: the eleventh review)
    steps := steps || _pg_shard_id.step(621, 'swap', 'old key column', format('column %s.%I', tbl, new_column), 'build', NULL,
                                        format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT @extschema@.next_shard_id(%L::regclass, %s)', tbl, new_column, seq::text, shard),
                                        'the new column''s DEFAULT, on every partition', finished);
    steps := steps || _pg_shard_id.step(650, 'swap', 'old key column', format('column %s.%I', tbl, key_column), 'rename', NULL,
                                        format('ALTER TABLE %s RENAME COLUMN %I TO %I; ALTER TABLE %s RENAME COLUMN %I TO %I',
                                               tbl, key_column, _pg_shard_id.derived_name(key_column, '_before_shard_id'), tbl, new_column, key_column),
                                        'the new column takes the key''s name', finished);
    steps := steps || _pg_shard_id.step(660, 'swap', 'old key column', format('column %s.%I', tbl, key_column), 'drop', NULL,
                                        CASE WHEN (SELECT attidentity = '' FROM pg_attribute WHERE attrelid = tbl AND attnum = key_attnum)
                                                  AND key_attnum <> ALL (coalesce((SELECT partattrs::int2[] FROM pg_partitioned_table WHERE partrelid = tbl), '{}'))
                                             THEN format('ALTER TABLE %s ALTER COLUMN %I DROP NOT NULL; ', tbl, _pg_shard_id.derived_name(key_column, '_before_shard_id')) ELSE '' END
                                        || format('ALTER TABLE %s DROP CONSTRAINT %I', tbl, new_check),
                                        'the old key is no longer given (an identity stays NOT NULL); the conversion''s CHECK', finished);
    FOR c IN SELECT ref.* FROM _pg_shard_id.conversion_references(tbl, key_column, new_column) ref LOOP
        -- its definition as read (under the swap's locks): after the renames above, the column
        -- names in it are the new columns'; one the user left NOT VALID (or, on PostgreSQL 18,
        -- NOT ENFORCED) says so in it and stays so
        steps := steps || _pg_shard_id.step(680, 'swap', 'foreign key to the key', format('constraint %I on %s', c.conname, c.rel), 'carry', NULL,
                                            format('ALTER TABLE %s ADD CONSTRAINT %I %s%s', c.rel, c.conname, c.def,
                                                   CASE WHEN c.validated THEN ' NOT VALID' ELSE '' END)
                                            || CASE WHEN c.note IS NOT NULL THEN format('; COMMENT ON CONSTRAINT %I ON %s IS %L', c.conname, c.rel, c.note) ELSE '' END,
                                            CASE WHEN c.validated THEN 'its actions as they were, on the new columns; enforced from here on, validated after the commit'
                                                 ELSE 'its actions as they were, on the new columns; NOT VALID as it was' END, finished);
        CONTINUE WHEN NOT c.validated;
        validate_after := validate_after || format('(%L::pg_catalog.regclass::pg_catalog.oid, %L::pg_catalog.name)', c.rel::text, c.conname);
        steps := steps || _pg_shard_id.step(700, 'after the swap', 'foreign key to the key', format('constraint %I on %s', c.conname, c.rel), 'check',
                                            format('SHARE UPDATE EXCLUSIVE on %s, ROW SHARE on %s (writes go on)', c.rel, tbl),
                                            format('ALTER TABLE %s VALIDATE CONSTRAINT %I', c.rel, c.conname), 'every referencing row',
                                            finished AND EXISTS (SELECT FROM pg_constraint WHERE conrelid = c.rel AND conname = c.conname AND contype = 'f'
                                                                    AND confrelid = tbl AND convalidated));
    END LOOP;
    -- ids the old way after the swap (an application that still takes them from the old sequence
    -- and writes them into the key): refused by a CHECK that every id is at least the smallest one
    -- the conversion stored (issue 55). NOT VALID at the swap, validated after it: true of every
    -- row by then, converted or new. Its value is read under the swap's locks, through the new
    -- column's unique index; a backfill of rows older than the oldest converted one needs it
    -- dropped (docs/adopting.md#old-style-ids).
    floor_check := _pg_shard_id.derived_name(key_column, '_shard_id_floor');
    IF prepared AND NOT finished AND EXISTS (SELECT FROM _pg_shard_id.conversions s WHERE s.relid = tbl AND s.phase = 'filled') THEN
        -- (every row has its new id, and the new column its unique index: one index read)
        EXECUTE format('SELECT least(min(%I), @extschema@.shard_id_lower_bound(pg_catalog.now())) FROM %s', new_column, tbl) INTO floor_id;
        steps := steps || _pg_shard_id.step(685, 'swap', 'old-style ids', format('column %s.%I', tbl, key_column), 'build', NULL,
                                            format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%I OPERATOR(pg_catalog.>=) %s) NOT VALID', tbl, floor_check, key_column, floor_id),
                                            'ids below the smallest converted one (an old sequence''s values written into the key) are refused from the swap on', false);
    ELSIF NOT finished THEN
        steps := steps || _pg_shard_id.step(685, 'swap', 'old-style ids', format('column %s.%I', tbl, key_column), 'build', NULL,
                                            format('-- at the swap: ALTER TABLE %s ADD CONSTRAINT %I CHECK (%I >= the smallest converted id) NOT VALID', tbl, floor_check, key_column),
                                            'ids below the smallest converted one (an old sequence''s values written into the key) are refused from the swap on', false);
    END IF;
    validate_after := validate_after || format('(%L::pg_catalog.regclass::pg_catalog.oid, %L::pg_catalog.name)', tbl::text, floor_check);
    steps := steps || _pg_shard_id.step(700, 'after the swap', 'old-style ids', format('column %s.%I', tbl, key_column), 'check',
                                        format('SHARE UPDATE EXCLUSIVE on %s (writes go on)', tbl),
                                        format('ALTER TABLE %s VALIDATE CONSTRAINT %I', tbl, floor_check), 'every row',
                                        finished AND EXISTS (SELECT FROM pg_constraint WHERE conrelid = tbl AND conname = floor_check AND convalidated));
    steps := steps || _pg_shard_id.step(690, 'swap', 'old key column', format('table %s', tbl), 'record', NULL,
                                        format('UPDATE _pg_shard_id.conversions SET phase = %L, updated_at = pg_catalog.clock_timestamp()%s WHERE relid = %L::pg_catalog.regclass',
                                               'finished',
                                               CASE WHEN cardinality(validate_after) > 0
                                                    THEN format(', validate_after = ARRAY(SELECT k.oid FROM pg_catalog.pg_constraint k WHERE k.contype IN (%L, %L) AND k.conparentid = 0 '
                                                                'AND (k.conrelid, k.conname) IN (%s))', 'f', 'c', array_to_string(validate_after, ', '))
                                                    ELSE '' END,
                                               tbl::text),
                                        NULL, finished);
    steps := steps || _pg_shard_id.step(900, 'kept', 'old key column', format('column %s.%I', tbl, key_column), 'keep', NULL, NULL,
                                        format('kept as %I, with its values and its DEFAULT or identity (it goes on drawing from its sequence until you drop it)',
                                               _pg_shard_id.derived_name(key_column, '_before_shard_id')), true);
    -- the names: before the prepare, none may be taken, nor given twice
    made := made || (SELECT jsonb_agg(jsonb_build_object('kind', k, 'scope', t::oid, 'name', n))
                       FROM _pg_shard_id.tree(tbl) t,
                            (VALUES ('trigger', fill_trigger), ('trigger', _pg_shard_id.derived_name(fill_trigger, '_deleted')),
                                    ('trigger', _pg_shard_id.derived_name(fill_trigger, '_rekeyed')),
                                    ('constraint', new_check), ('constraint', floor_check)) v(k, n));
    -- After the prepare, until the swap, again: an object made meanwhile (a deploy during a long
    -- conversion) under one of those names, that is not the conversion's own, would make a step
    -- fail at every retry or be taken for the conversion's and dropped or renamed at the swap
    -- (the twentieth and twenty-first reviews: a CHECK named like the conversion's NOT NULL
    -- CHECK was dropped, one named like the floor CHECK stopped the swap). The conversion's own:
    -- a CHECK by own_constraint(), a trigger by its function, an index by the entry's 'ours'
    -- (its shape, read where it is listed); the columns have rules of their own after the prepare
    -- (renamed_columns(), the kept name's refusal).
    FOR x IN SELECT e ->> 'kind' AS kind, (e ->> 'scope')::oid AS scope, e ->> 'name' AS name, count(*) AS times,
                    bool_or(coalesce((e ->> 'checked')::boolean, false)) AS checked,
                    bool_or(coalesce((e ->> 'ours')::boolean, false)) AS ours
               FROM jsonb_array_elements(made) e
              WHERE NOT finished AND NOT (prepared AND e ->> 'kind' = 'column')
              GROUP BY 1, 2, 3 ORDER BY 1, 2, 3 LOOP
        -- (a name whose own rule refuses it when taken, the kept old column's and the new key
        -- column's: only when given twice)
        CONTINUE WHEN x.checked AND x.times = 1;
        what := CASE x.kind WHEN 'relation' THEN format('relation %I.%I', (SELECT nspname FROM pg_namespace WHERE oid = x.scope), x.name)
                            ELSE format('%s %I on %s', x.kind, x.name, x.scope::regclass) END;
        why := CASE WHEN x.times > 1 THEN 'the conversion would give this name to two of its objects (derived from two objects'' names that begin alike)'
                    WHEN x.kind = 'relation' AND NOT (prepared AND x.ours)
                         AND EXISTS (SELECT FROM pg_class WHERE relnamespace = x.scope AND relname = x.name) THEN 'a relation of that name exists'
                    WHEN x.kind = 'constraint'
                         AND EXISTS (SELECT FROM pg_constraint k WHERE k.conrelid = x.scope AND k.conname = x.name
                                        AND NOT (prepared AND _pg_shard_id.own_constraint(k.oid, tbl, key_column, new_column))) THEN 'a constraint of that name exists on the table'
                    WHEN x.kind = 'trigger'
                         AND EXISTS (SELECT FROM pg_trigger g WHERE g.tgrelid = x.scope AND g.tgname = x.name
                                        AND NOT (prepared AND g.tgfoid = ANY (ours))) THEN 'a trigger of that name exists on the table'
                    WHEN x.kind = 'column' AND EXISTS (SELECT FROM pg_attribute WHERE attrelid = x.scope AND attname = x.name AND NOT attisdropped) THEN 'a column of that name exists on the table' END;
        CONTINUE WHEN why IS NULL;
        steps := steps || _pg_shard_id.step(0, 'prepare', 'name taken', what, 'refuse', NULL, NULL,
                    why || ': the conversion names what it makes after the objects they stand in for, and finds them by those names; '
                        || CASE WHEN prepared THEN 'rename the object whose name it is (nothing of the conversion''s was changed), then call again'
                                ELSE 'rename the object whose name it is, or pass another new_column => (every name changes with it)' END, false);
    END LOOP;
    -- (each place made unique, in the order the steps were listed)
    RETURN QUERY SELECT u.ord * 100000 + u.i::integer, u.phase, u.kind, u.object, u.action, u.lock, u.statement, u.detail, u.done
                   FROM unnest(steps) WITH ORDINALITY u(ord, phase, kind, object, action, lock, statement, detail, done, i)
                  ORDER BY 1;
END $$;

-- The plan of a conversion, before anything changes: one row per step and per object attached
-- to the key (or to a column that references it), saying what will be added, built, carried,
-- kept or refused, with the lock it takes and the statement that runs. After the prepare, called
-- with the table alone, it reads the recorded conversion and says what is done.
CREATE FUNCTION shard_id_convert_plan(tbl regclass, time_column name DEFAULT NULL, seq regclass DEFAULT NULL,
                                      shard integer DEFAULT NULL, new_column name DEFAULT 'shard_id',
                                      fire_triggers boolean DEFAULT false, subscribers_ready boolean DEFAULT false)
RETURNS TABLE (step integer, phase text, object text, kind text, action text, lock text, statement text, detail text, done boolean)
LANGUAGE plpgsql STABLE PARALLEL SAFE ROWS 64 SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    state _pg_shard_id.conversions;
BEGIN
    IF tbl IS NULL THEN
        RAISE EXCEPTION 'pg_shard_id: shard_id_convert_plan needs a table' USING ERRCODE = '22004';
    END IF;
    IF NOT pg_has_role((SELECT relowner FROM pg_class WHERE oid = tbl), 'USAGE') THEN
        RAISE EXCEPTION 'pg_shard_id: only the owner of % can convert it', tbl USING ERRCODE = '42501';
    END IF;
    SELECT * INTO state FROM _pg_shard_id.conversions c WHERE c.relid = tbl;
    IF state.relid IS NOT NULL THEN
        IF state.phase = 'finished' THEN
            RETURN QUERY SELECT 1, 'after the swap'::text, format('table %s', tbl), 'old key column'::text, 'keep'::text, NULL::text, NULL::text,
                                format('converted: %I holds the time-ordered ids', state.key_column), true;
            RETURN;
        END IF;
        time_column := state.time_column; seq := state.seq; shard := state.shard; new_column := state.new_column;
        fire_triggers := state.fire_triggers; subscribers_ready := state.subscribers_ready;
    ELSIF time_column IS NULL OR seq IS NULL OR shard IS NULL OR new_column IS NULL THEN
        RAISE EXCEPTION 'pg_shard_id: % is not prepared: its plan needs the time column, sequence and shard', tbl
            USING ERRCODE = '22004', HINT = format('SELECT * FROM shard_id_convert_plan(%L, time_column, sequence, shard)', tbl::text);
    END IF;
    RETURN QUERY
        SELECT (row_number() OVER (ORDER BY i.ord))::integer, i.phase, i.object, i.kind, i.action, i.lock, i.statement, i.detail, i.done
          FROM _pg_shard_id.conversion_inventory(tbl, time_column, seq, shard, new_column, fire_triggers, subscribers_ready) i
         ORDER BY i.ord;
END $$;

-- The id a converted row gets: one at its own time (next_shard_id_at), or a live id when its time
-- is less than 1.5 s past, or ahead (next_shard_id_at refuses times within 1 s of the clock, and
-- such a time has no past id yet). The one place of that rule: the row trigger, the batches and
-- the finish's sweep call it. No SET clause and not STRICT, so that the planner inlines it into
-- the batches' UPDATE (a NULL time gives NULL, as next_shard_id_at does); names are qualified.
CREATE FUNCTION _pg_shard_id.conversion_id(seq regclass, shard integer, ts timestamptz)
RETURNS bigint LANGUAGE sql VOLATILE AS $$
    SELECT CASE WHEN ts IS NULL OR ts OPERATOR(pg_catalog.>)
                     (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) pg_catalog.interval '1.5 s')
                THEN @extschema@.next_shard_id(seq, shard)
                ELSE @extschema@.next_shard_id_at(seq, shard, ts) END
$$;

-- Fills the new column of a row an UPDATE or INSERT left without one (a row moved behind the
-- batches, or inserted with the column named and NULL); the trigger's WHEN clause calls it only
-- then. TG_ARGV: new column, time column, sequence (its oid: a rename after the prepare changes
-- nothing), shard.
CREATE FUNCTION _pg_shard_id.conversion_fill_row() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET lock_timeout = '100ms' AS $$
DECLARE
    ts timestamptz := (to_jsonb(NEW) ->> TG_ARGV[1])::timestamptz;
BEGIN
    NEW := jsonb_populate_record(NEW, jsonb_build_object(TG_ARGV[0],
               _pg_shard_id.conversion_id(TG_ARGV[2]::oid::regclass, TG_ARGV[3]::integer, ts)));
    RETURN NEW;
EXCEPTION WHEN data_exception OR program_limit_exceeded THEN
    -- a time no id at a past time can have (before the epoch, -infinity) or a full history: a
    -- live id, as a row inserted now gets, when the writer may draw one (a role that may only
    -- update: the row is left to the batches and the sweeps)
    IF has_sequence_privilege(TG_ARGV[2]::oid, 'USAGE, UPDATE') THEN
        NEW := jsonb_populate_record(NEW, jsonb_build_object(TG_ARGV[0], @extschema@.next_shard_id(TG_ARGV[2]::oid::regclass, TG_ARGV[3]::integer)));
    END IF;
    RETURN NEW;
WHEN object_not_in_prerequisite_state OR insufficient_privilege OR lock_not_available OR deadlock_detected THEN
    -- the new column's index is not built yet (between the prepare and the index build), or the
    -- writer may not read a table that holds the sequence's ids (next_shard_id_at reads only
    -- what its caller may), or next_shard_id_at would wait for another transaction's DEFAULT ids
    -- (its function's lock_timeout: a writer waits 100 ms at most): the row keeps no id for now;
    -- the batches or the finish's sweeps, run by the owner, give it one. Once the finish's NOT
    -- NULL check is in place (step 500) such a row would fail its writer (23514): a live id then,
    -- as a row inserted now gets, when the writer may draw one
    IF EXISTS (SELECT FROM pg_constraint WHERE conrelid = TG_RELID AND contype = 'c'
                  AND conname = _pg_shard_id.derived_name('shard_id_convert_' || TG_ARGV[0], '_not_null'))
       AND has_sequence_privilege(TG_ARGV[2]::oid, 'USAGE, UPDATE') THEN
        NEW := jsonb_populate_record(NEW, jsonb_build_object(TG_ARGV[0], @extschema@.next_shard_id(TG_ARGV[2]::oid::regclass, TG_ARGV[3]::integer)));
    END IF;
    RETURN NEW;
END $$;

-- Gives a referencing row the new id of the row it references (the triggers' WHEN clauses call
-- it for a new row, or an updated reference). TG_ARGV: foreign key column, its new column, the
-- referenced table (its oid: a rename after the prepare changes nothing), its key column and that
-- column's type, its new column.
--
-- A writer never fails because of it (issue 55): a row that references itself takes its own new
-- id; a referenced row the writer cannot see (not inserted yet under a deferred foreign key, hidden
-- by row security, in the same statement, in a table the writer may not read) gives a negative placeholder, "not known yet" (-1 - the
-- old key, or of its hash for a key that is not an integer: one per referenced row, so that a
-- unique index of the referencing columns holds), which satisfies the finish's CHECK and is
-- replaced by the referenced row's new id in the sweeps and again under the swap's locks, through
-- the new column's index (_pg_shard_id.fill_statements).
CREATE FUNCTION _pg_shard_id.conversion_fill_reference() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    new_id bigint;
    row_ jsonb := to_jsonb(NEW);
BEGIN
    -- (the key compared in its own type, so that the lookup uses the primary key; a reference
    -- set to NULL gets NULL)
    IF row_ ->> TG_ARGV[0] IS NOT NULL THEN
        IF row_ ->> TG_ARGV[0] = row_ ->> TG_ARGV[3]
           AND TG_RELID::regclass IN (SELECT t FROM _pg_shard_id.tree(TG_ARGV[2]::oid::regclass) t) THEN
            new_id := (row_ ->> TG_ARGV[5])::bigint;
        ELSE
            -- (a writer that may not read the referenced table gets the placeholder, as for a row
            -- row security hides: its foreign key's check runs as the table's owner, and the insert
            -- succeeds without a conversion; so does one whose lookup fails, a row security policy
            -- raising for this writer (the fifth review), or a column renamed after the prepare)
            BEGIN
                IF has_column_privilege(TG_ARGV[2]::oid, TG_ARGV[3], 'SELECT') AND has_column_privilege(TG_ARGV[2]::oid, TG_ARGV[5], 'SELECT')
                   AND has_schema_privilege((SELECT relnamespace FROM pg_class WHERE oid = TG_ARGV[2]::oid), 'USAGE') THEN
                    EXECUTE format('SELECT %I FROM %s WHERE %I = $1::%s', TG_ARGV[5], TG_ARGV[2]::oid::regclass, TG_ARGV[3], TG_ARGV[4])
                       INTO new_id USING row_ ->> TG_ARGV[0];
                END IF;
            EXCEPTION WHEN OTHERS THEN
                new_id := NULL;
            END;
        END IF;
        -- not known yet: a negative placeholder, one per referenced key (so that a unique index
        -- of the referencing columns holds as it does on the old ones)
        new_id := coalesce(new_id, CASE WHEN TG_ARGV[4] IN ('bigint', 'integer', 'smallint') AND (row_ ->> TG_ARGV[0])::bigint >= 0
                                        THEN -1 - (row_ ->> TG_ARGV[0])::bigint
                                        ELSE -1 - (hashtextextended(row_ ->> TG_ARGV[0], 0) & 4611686018427387903) END);
    END IF;
    NEW := jsonb_populate_record(NEW, jsonb_build_object(TG_ARGV[1], new_id));
    RETURN NEW;
END $$;

-- The new ids of the table's rows deleted while it is converted (issue 55): a row deleted and
-- inserted again with the same old key (under a deferred foreign key, in one transaction) gets
-- another new id, and the rows that referenced it are moved to that one by the sweeps and under
-- the swap's locks, found through the new referencing columns' indexes.
CREATE TABLE _pg_shard_id.conversion_deleted (
    relid oid NOT NULL,
    new_id bigint NOT NULL
);
CREATE INDEX ON _pg_shard_id.conversion_deleted (relid, new_id);
ALTER TABLE _pg_shard_id.conversion_deleted ENABLE ROW LEVEL SECURITY;
-- Read and removed by each table's owner; written only by conversion_note_deleted below.
CREATE POLICY owner_reads ON _pg_shard_id.conversion_deleted FOR SELECT
    USING (pg_has_role((SELECT c.relowner FROM pg_class c WHERE c.oid = relid), 'USAGE'));
CREATE POLICY owner_removes ON _pg_shard_id.conversion_deleted FOR DELETE
    USING (pg_has_role((SELECT c.relowner FROM pg_class c WHERE c.oid = relid), 'USAGE'));
GRANT SELECT, DELETE ON _pg_shard_id.conversion_deleted TO PUBLIC;

-- The AFTER DELETE and AFTER UPDATE OF the key triggers of a table being converted: record the new
-- id of a row deleted, or given another key (whose old key may be inserted again). SECURITY
-- DEFINER, so that the deleting role needs no privilege on the record (a delete cascading from a
-- parent, or through a view, runs its triggers as the role that deleted: the fourth review), and
-- so that no other role can write the record (a function that recorded ids for any caller let any
-- role slow the swap's repair: the seventh review). It runs nothing of the table's: it reads one
-- column of the row, the new id (bigint), by field selection (reading the whole row as json ran a
-- cast a role could define, as the extension's owner: the third review); whether the key changed
-- is the UPDATE trigger's WHEN clause, run as the writer. It records only for a trigger on the
-- table being converted or one of its partitions (another role's trigger that calls it, on its
-- own table, records nothing). TG_ARGV: the converted table's oid, its key, its new column.
CREATE FUNCTION _pg_shard_id.conversion_note_deleted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    new_id bigint;
BEGIN
    IF NOT EXISTS (SELECT FROM _pg_shard_id.conversions c WHERE c.relid = TG_ARGV[0]::oid AND c.phase <> 'finished')
       OR TG_RELID NOT IN (SELECT t FROM _pg_shard_id.tree(TG_ARGV[0]::oid::regclass) t) THEN
        RETURN NULL;
    END IF;
    BEGIN
        EXECUTE format('SELECT ($1).%I', TG_ARGV[2]) INTO new_id USING OLD;
    EXCEPTION WHEN undefined_column THEN
        RETURN NULL;  -- (the new column renamed after the prepare: the steps refuse until it is named back)
    END;
    IF new_id IS NOT NULL THEN
        INSERT INTO _pg_shard_id.conversion_deleted (relid, new_id) VALUES (TG_ARGV[0]::oid, new_id);
    END IF;
    RETURN NULL;
END $$;

-- A trigger's arguments (pg_trigger.tgargs: each followed by a zero byte), as text in the
-- database's encoding; an argument that is not valid text there is NULL (it names no column).
CREATE FUNCTION _pg_shard_id.trigger_arguments(args bytea, n smallint) RETURNS text[]
LANGUAGE plpgsql STABLE STRICT PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    found text[] := '{}';
    cut integer;
BEGIN
    FOR k IN 1 .. n LOOP
        cut := position('\x00'::bytea IN args);
        EXIT WHEN cut = 0;
        BEGIN
            found := found || convert_from(substring(args FROM 1 FOR cut - 1), getdatabaseencoding());
        EXCEPTION WHEN OTHERS THEN
            found := found || NULL::text;
        END;
        args := substring(args FROM cut + 1);
    END LOOP;
    RETURN found;
END $$;

-- The columns a prepared conversion names, in its state and in its triggers' arguments, that no
-- longer exist under that name: renamed (or dropped) after the prepare. The steps find the new
-- columns by the names the prepare derived from the old ones, and the triggers read columns by
-- name; so every step (the index step, the batches, the finish, abandoning) refuses while there is
-- one, naming it, before it changes anything: renaming it back lets the conversion go on (a row
-- written meanwhile was left without its new reference, which the sweeps fill). Writers go on
-- meanwhile: a trigger reads a missing column as NULL.
CREATE FUNCTION _pg_shard_id.renamed_columns(tbl regclass) RETURNS SETOF text
LANGUAGE sql STABLE STRICT PARALLEL UNSAFE ROWS 4 SET search_path = pg_catalog, pg_temp AS $$
    WITH triggers AS MATERIALIZED (
        -- (only the triggers on the table and on the tables whose foreign keys reference it,
        -- whose owners the conversion works for, are read: another role's trigger elsewhere
        -- that calls these functions with made-up arguments is never decoded: the ninth review)
        SELECT t.tgrelid, p.proname, t.tgargs, t.tgnargs
          FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
         WHERE t.tgparentid = 0
           AND p.oid IN ('_pg_shard_id.conversion_fill_row()'::regprocedure, '_pg_shard_id.conversion_fill_reference()'::regprocedure,
                         '_pg_shard_id.conversion_note_deleted()'::regprocedure)
           AND (t.tgrelid = tbl OR t.tgrelid IN (SELECT f.conrelid FROM pg_constraint f WHERE f.contype = 'f' AND f.confrelid = tbl))
    ),
    ours AS (
        SELECT t.tgrelid, t.proname, _pg_shard_id.trigger_arguments(t.tgargs, t.tgnargs) AS args FROM triggers t
    ),
    named (rel, col) AS (
        SELECT c.relid::oid, unnest(ARRAY[c.key_column, c.new_column, c.time_column]::text[])
          FROM _pg_shard_id.conversions c WHERE c.relid = tbl AND c.phase <> 'finished'
        UNION
        SELECT tgrelid, args[i] FROM ours, unnest(CASE proname WHEN 'conversion_fill_row' THEN ARRAY[1, 2]
                                                                    WHEN 'conversion_note_deleted' THEN ARRAY[2, 3]
                                                                    ELSE ARRAY[1, 2] END) i
         WHERE tgrelid = tbl OR args[3] = tbl::oid::text
        UNION
        SELECT tbl::oid, args[i] FROM ours, unnest(ARRAY[4, 6]) i WHERE proname = 'conversion_fill_reference' AND args[3] = tbl::oid::text
    )
    SELECT format('%s has no column %I', n.rel::regclass, n.col)
      FROM named n
     WHERE n.col IS NOT NULL
       AND NOT EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = n.rel AND a.attname = n.col AND NOT a.attisdropped)
     ORDER BY 1
$$;

-- What the prepare made on a table whose foreign key to tbl's key was dropped since: its
-- triggers (found by their function and their third argument, tbl), and the new column they
-- name. Neither the swap nor abandoning would find them by the foreign keys, and the triggers
-- kept writing placeholders, the NOT NULL CHECK failing writers after the finish (the nineteenth
-- review). Only on tables whose owner the caller can act as (another role's trigger with made-up
-- arguments stops nothing). As the statements that drop them: the triggers, then the columns
-- (with their index and CHECKs).
CREATE FUNCTION _pg_shard_id.orphaned_references(tbl regclass) RETURNS SETOF text
LANGUAGE sql STABLE STRICT PARALLEL UNSAFE ROWS 2 SET search_path = pg_catalog, pg_temp AS $$
    WITH orphans AS MATERIALIZED (
        SELECT t.tgrelid::regclass AS rel, t.tgname, (_pg_shard_id.trigger_arguments(t.tgargs, t.tgnargs))[2] AS new_column
          FROM pg_trigger t JOIN pg_class k ON k.oid = t.tgrelid
         WHERE t.tgfoid = '_pg_shard_id.conversion_fill_reference()'::regprocedure AND t.tgparentid = 0
           AND pg_has_role(k.relowner, 'USAGE')
           AND (_pg_shard_id.trigger_arguments(t.tgargs, t.tgnargs))[3] = tbl::oid::text
           -- (by table and column: a table that keeps another foreign key to the key is still
           -- listed by the foreign keys, the twentieth review)
           AND (t.tgrelid, (_pg_shard_id.trigger_arguments(t.tgargs, t.tgnargs))[1])
               NOT IN (SELECT r.rel, r.fk_column::text FROM _pg_shard_id.conversions c,
                              _pg_shard_id.conversion_references(tbl, c.key_column, c.new_column) r
                        WHERE c.relid = tbl)
    )
    SELECT statement FROM (
        SELECT 1 AS k, format('DROP TRIGGER %I ON %s', o.tgname, o.rel) AS statement FROM orphans o
        UNION
        SELECT 2, format('ALTER TABLE %s DROP COLUMN IF EXISTS %I', o.rel, o.new_column) FROM orphans o
    ) q ORDER BY k, statement
$$;

-- The user's BEFORE ROW triggers on a table that references the key of tbl (or on one of its
-- partitions) that PostgreSQL fires after the conversion's trigger of the same event, which gives
-- each row the new id of the row its reference names (their names sort after its, byte by byte:
-- _pg_shard_id.reference_trigger): a reference such a trigger set or changed would not reach the
-- new column, which would name the old parent after the swap, or stay NULL and fail the writer at
-- the finish's CHECK (the twenty-eighth review). A disabled one fires for no one (enabled again,
-- the next step refuses it, and the finish's repair mends what it wrote meanwhile).
CREATE FUNCTION _pg_shard_id.late_firing_triggers(tbl regclass, key_column name, new_column name)
RETURNS TABLE (rel regclass, tgname name, ours name)
LANGUAGE sql STABLE STRICT PARALLEL SAFE ROWS 1 SET search_path = pg_catalog, pg_temp AS $$
    SELECT DISTINCT ON (t.tgrelid, t.tgname) t.tgrelid::regclass, t.tgname, v.ours
      FROM (SELECT DISTINCT rr.rel, rr.fk_new_column FROM _pg_shard_id.conversion_references(tbl, key_column, new_column) rr) r
           CROSS JOIN LATERAL _pg_shard_id.tree(r.rel) k
           CROSS JOIN LATERAL (VALUES (4, _pg_shard_id.reference_trigger(r.fk_new_column, false)),     -- INSERT
                                      (16, _pg_shard_id.reference_trigger(r.fk_new_column, true))) v(event, ours)  -- UPDATE
           JOIN pg_trigger t ON t.tgrelid = k AND t.tgname OPERATOR(pg_catalog.>) v.ours
     WHERE NOT t.tgisinternal AND t.tgtype::integer & 3 = 3 AND t.tgtype::integer & v.event <> 0  -- BEFORE, ROW, the event
       AND t.tgenabled <> 'D'
       AND t.tgfoid NOT IN ('_pg_shard_id.conversion_fill_row()'::regprocedure, '_pg_shard_id.conversion_fill_reference()'::regprocedure,
                            '_pg_shard_id.conversion_note_deleted()'::regprocedure)
     ORDER BY t.tgrelid, t.tgname, v.event  -- (one that fires on both events: once, after the first)
$$;

-- What was made after the prepare of tbl's conversion that reads one of its new columns, not the
-- conversion's own objects nor a partition's copy of another's. With also_old, only those that
-- read a column the swap moves too (a view of id and shard_id): the swap makes every reader of an
-- old column read its new one, under the old name, from its definition, where the new column's
-- name is gone by then, and the finish failed (42703: the twenty-eighth review). Without, those
-- whose dependency stops DROP COLUMN (abandoning failed, 2BP01); PostgreSQL drops the others
-- (an index, a CHECK, a statistics object, a sequence OWNED BY it) with the column.
CREATE FUNCTION _pg_shard_id.new_column_readers(tbl regclass, key_column name, new_column name, also_old boolean)
RETURNS TABLE (what text)
LANGUAGE sql STABLE STRICT PARALLEL SAFE ROWS 1 SET search_path = pg_catalog, pg_temp AS $$
    WITH cc AS MATERIALIZED (
        SELECT c.* FROM _pg_shard_id.conversion_columns(tbl, key_column, new_column) c WHERE c.new_attnum IS NOT NULL
    ), readers AS (
        SELECT DISTINCT dep.classid, dep.objid, dep.objsubid
          FROM cc JOIN pg_depend dep ON dep.refclassid = 'pg_class'::regclass AND dep.refobjid = cc.rel AND dep.refobjsubid = cc.new_attnum
         WHERE (dep.deptype = 'n' OR (dep.deptype = 'a' AND (also_old OR dep.objsubid <> 0)))
           -- (without also_old: what DROP COLUMN would refuse; it drops what also depends on the
           -- column automatically, a CHECK, but not a generated column that reads it, recorded
           -- as a column of the table: the twenty-ninth review and its second read)
           AND (also_old OR dep.objsubid <> 0 OR NOT EXISTS (SELECT FROM pg_depend a
                                         WHERE a.classid = dep.classid AND a.objid = dep.objid AND a.refclassid = dep.refclassid
                                           AND a.refobjid = dep.refobjid AND a.refobjsubid = dep.refobjsubid AND a.deptype = 'a'))
    )
    SELECT coalesce((SELECT format('%s %s', CASE k.relkind WHEN 'm' THEN 'materialized view' ELSE 'view' END, w.ev_class::regclass)
                       FROM pg_rewrite w JOIN pg_class k ON k.oid = w.ev_class
                      WHERE r.classid = 'pg_rewrite'::regclass AND w.oid = r.objid AND w.rulename = '_RETURN'),
                    pg_describe_object(r.classid, r.objid, r.objsubid))
      FROM readers r
     WHERE (NOT also_old OR EXISTS (SELECT FROM cc JOIN pg_depend d ON d.refclassid = 'pg_class'::regclass AND d.refobjid = cc.rel
                                                                    AND d.refobjsubid = cc.old_attnum
                                     WHERE d.classid = r.classid AND d.objid = r.objid AND d.objsubid = r.objsubid))
       AND NOT EXISTS (SELECT FROM pg_trigger t WHERE r.classid = 'pg_trigger'::regclass AND t.oid = r.objid
                          AND (t.tgparentid <> 0 OR t.tgfoid IN ('_pg_shard_id.conversion_fill_row()'::regprocedure,
                                                                 '_pg_shard_id.conversion_fill_reference()'::regprocedure,
                                                                 '_pg_shard_id.conversion_note_deleted()'::regprocedure)))
       AND NOT EXISTS (SELECT FROM pg_constraint k WHERE r.classid = 'pg_constraint'::regclass AND k.oid = r.objid
                          AND (k.conparentid <> 0 OR (k.contype = 'c' AND NOT k.conislocal)
                               OR _pg_shard_id.own_constraint(k.oid, tbl, key_column, new_column)))
       AND NOT EXISTS (SELECT FROM pg_attrdef a JOIN cc ON cc.rel = a.adrelid AND cc.new_attnum = a.adnum
                        WHERE r.classid = 'pg_attrdef'::regclass AND a.oid = r.objid)
       AND NOT EXISTS (SELECT FROM pg_inherits i WHERE r.classid = 'pg_class'::regclass AND i.inhrelid = r.objid)
     ORDER BY 1
$$;

-- 55000 when a column the conversion of tbl names was renamed after its prepare (above), or a
-- foreign key to its key was added after it (its new referencing column, triggers and index were
-- never made: the index step asked for an index on a column that did not exist: the tenth
-- review).
CREATE FUNCTION _pg_shard_id.refuse_changed(tbl regclass) RETURNS void
LANGUAGE plpgsql STABLE STRICT PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    gone text[] := ARRAY(SELECT _pg_shard_id.renamed_columns(tbl));
    late text[];
BEGIN
    IF cardinality(gone) > 0 THEN
        RAISE EXCEPTION 'pg_shard_id: a column the conversion of % names was renamed or dropped after its prepare', tbl
            USING ERRCODE = '55000',
                  DETAIL = array_to_string(gone, E'\n'),
                  HINT = 'Rename it back (ALTER TABLE ... RENAME COLUMN), then call this again: nothing was changed, and rows written meanwhile are filled by the sweeps. Rename it after the conversion is finished.';
    END IF;
    late := ARRAY(SELECT _pg_shard_id.orphaned_references(tbl));
    IF cardinality(late) > 0 THEN
        RAISE EXCEPTION 'pg_shard_id: a foreign key to the key of % was dropped after its prepare', tbl
            USING ERRCODE = '55000',
                  DETAIL = 'The conversion''s new column and triggers stay on the table that had it: ' || array_to_string(late, '; ') || ' drops them (with their index and CHECKs).',
                  HINT = 'Add the foreign key again, or drop its new column, then call this again; abandoning the conversion drops them too. Nothing was changed.';
    END IF;
    -- a referencing table that has the new column but not the triggers that fill it: a
    -- partition detached after the prepare (PostgreSQL drops the cloned triggers, and its
    -- foreign key becomes its own), whose writers then left the new column NULL, and whose swap
    -- failed on every retry (the twentieth review)
    late := ARRAY(SELECT format('%s.%I', r.rel, r.fk_column)
                    FROM _pg_shard_id.conversions c, _pg_shard_id.conversion_references(tbl, c.key_column, c.new_column) r
                   WHERE c.relid = tbl AND c.phase <> 'finished'
                     AND EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = r.rel AND a.attname = r.fk_new_column AND NOT a.attisdropped)
                     AND NOT EXISTS (SELECT FROM pg_trigger t
                                      WHERE t.tgrelid = r.rel AND t.tgfoid = '_pg_shard_id.conversion_fill_reference()'::regprocedure
                                        AND (_pg_shard_id.trigger_arguments(t.tgargs, t.tgnargs))[1] = r.fk_column)
                   ORDER BY 1);
    IF cardinality(late) > 0 THEN
        RAISE EXCEPTION 'pg_shard_id: a table that references the key of % lost the conversion''s triggers after its prepare', tbl
            USING ERRCODE = '55000',
                  DETAIL = 'No trigger fills the new column of ' || array_to_string(late, ', ') || ' (a partition detached from a referencing table drops them).',
                  HINT = 'Attach the partition again (ALTER TABLE ... ATTACH PARTITION), or abandon the conversion (CALL shard_id_convert_abandon(...)) and prepare it again. Nothing was changed.';
    END IF;
    late := ARRAY(SELECT format('column %s.%I', cc.rel, cc.old_column)
                    FROM _pg_shard_id.conversions c,
                         _pg_shard_id.conversion_columns(tbl, c.key_column, c.new_column) cc
                   WHERE c.relid = tbl AND c.phase <> 'finished' AND cc.role = 'reference' AND cc.rel = cc.top
                     AND cc.new_attnum IS NULL
                   ORDER BY 1);
    IF cardinality(late) > 0 THEN
        RAISE EXCEPTION 'pg_shard_id: a foreign key to the key of % was added after its prepare', tbl
            USING ERRCODE = '55000',
                  DETAIL = array_to_string(late, E'\n'),
                  HINT = 'Drop it (ALTER TABLE ... DROP CONSTRAINT), finish the conversion, then add it again: it then references the new key. Or abandon the conversion and prepare it again. Nothing was changed.';
    END IF;
    -- a user's trigger that fires after the conversion's reference triggers, made after the
    -- prepare (or renamed since): checked at every step, the batches too
    late := ARRAY(SELECT format('trigger %I on %s fires after %I', l.tgname, l.rel, l.ours)
                    FROM _pg_shard_id.conversions c, _pg_shard_id.late_firing_triggers(tbl, c.key_column, c.new_column) l
                   WHERE c.relid = tbl AND c.phase <> 'finished');
    IF cardinality(late) > 0 THEN
        RAISE EXCEPTION 'pg_shard_id: a trigger on a table that references the key of % fires after the conversion''s', tbl
            USING ERRCODE = '55000',
                  DETAIL = array_to_string(late, E'\n') || E'\nPostgreSQL fires a table''s BEFORE ROW triggers in the byte order of their names; the conversion''s gives each row the new id of the row its reference names, and a reference changed after it would not reach the new column.',
                  HINT = 'Rename it to a name that sorts before the conversion''s (any name that begins with an ASCII character does), or drop it, then call this again: nothing was changed, and the finish makes every reference agree with its parent before the swap (what was written meanwhile).';
    END IF;
    -- the conversion's triggers under the names it gave them (the swap drops them by name: one
    -- renamed after the prepare made every finish fail, "trigger ... does not exist", the
    -- twenty-second review), and ENABLE ALWAYS on the table and on every partition (one disabled,
    -- or enabled again by a plain ENABLE TRIGGER ALL, as pg_restore --disable-triggers leaves
    -- them, let writers set a referencing column the sweeps do not repair: a reference to
    -- another row after the swap; and writers failed the finish's CHECKs: the twenty-third). A
    -- trigger of its kind (its function, events and first argument) on the same table under
    -- another name is that one renamed; none is one dropped.
    late := ARRAY(
        WITH c AS (  -- the conversion, not finished (none: no trigger expected)
            SELECT s.*, _pg_shard_id.derived_name('shard_id_convert_', s.new_column) AS fill_trigger
              FROM _pg_shard_id.conversions s WHERE s.relid = tbl AND s.phase <> 'finished'
        ),
        expected (rel, tgname, fn, tgtype, arg) AS (
            SELECT c.relid::regclass, c.fill_trigger, '_pg_shard_id.conversion_fill_row()'::regprocedure::oid, 23, c.new_column::text  -- BEFORE INSERT OR UPDATE
              FROM c
            UNION ALL
            SELECT c.relid::regclass, _pg_shard_id.derived_name(c.fill_trigger, s.suffix),
                   '_pg_shard_id.conversion_note_deleted()'::regprocedure::oid, s.tgtype, c.relid::oid::text
              FROM c, (VALUES ('_deleted', 9), ('_rekeyed', 17)) s(suffix, tgtype)  -- AFTER DELETE, AFTER UPDATE
            UNION
            SELECT r.rel, v.n, '_pg_shard_id.conversion_fill_reference()'::regprocedure::oid, v.tgtype, r.fk_column::text
              FROM c, _pg_shard_id.conversion_references(tbl, c.key_column, c.new_column) r,
                   LATERAL (VALUES (_pg_shard_id.reference_trigger(r.fk_new_column, false), 7),  -- BEFORE INSERT
                                   (_pg_shard_id.reference_trigger(r.fk_new_column, true), 19)) v(n, tgtype)  -- BEFORE UPDATE
        ),
        off AS MATERIALIZED (  -- the conversion's triggers not ENABLE ALWAYS, on any table: one scan of pg_trigger
                  -- (usually no row; tree() per trigger cost 20 ms at 3,000 partitions, at every
                  -- batch: the twenty-fourth review)
            SELECT t.tgname, t.tgfoid, t.tgrelid, t.tgenabled
              FROM pg_trigger t
             WHERE t.tgfoid IN ('_pg_shard_id.conversion_fill_row()'::regprocedure, '_pg_shard_id.conversion_note_deleted()'::regprocedure,
                                '_pg_shard_id.conversion_fill_reference()'::regprocedure)
               AND t.tgenabled <> 'A'
        ),
        kin AS (  -- the triggers of each one's kind on its table
            SELECT e.rel, e.tgname, t.tgname AS actual
              FROM expected e JOIN pg_trigger t
                ON t.tgrelid = e.rel AND t.tgfoid = e.fn AND t.tgparentid = 0 AND t.tgtype = e.tgtype
               AND (_pg_shard_id.trigger_arguments(t.tgargs, t.tgnargs))[1] = e.arg
        )
        SELECT format('trigger %I on %s: %s', e.tgname, e.rel, w.what)
          FROM expected e,
               LATERAL (SELECT CASE WHEN EXISTS (SELECT FROM kin k WHERE k.rel = e.rel AND k.tgname = e.tgname AND k.actual = e.tgname) THEN
                                        (SELECT string_agg(format('%s on %s', CASE t.tgenabled WHEN 'D' THEN 'disabled'
                                                                               WHEN 'R' THEN 'ENABLE REPLICA (ordinary writers skip it)'
                                                                               ELSE 'not ENABLE ALWAYS (writers as replica skip it)' END,
                                                                  t.tgrelid::regclass), ', ' ORDER BY t.tgrelid)
                                           FROM off t
                                          WHERE t.tgname = e.tgname AND t.tgfoid = e.fn
                                            AND (t.tgrelid = e.rel OR e.rel IN (SELECT pg_partition_ancestors(t.tgrelid))))
                                    ELSE coalesce('renamed to ' || (SELECT string_agg(quote_ident(k.actual), ' or ' ORDER BY k.actual)
                                                                      FROM kin k WHERE k.rel = e.rel AND k.tgname = e.tgname),
                                                  'dropped') END AS what) w
         WHERE w.what IS NOT NULL
         ORDER BY 1);
    IF cardinality(late) > 0 THEN
        RAISE EXCEPTION 'pg_shard_id: a trigger the conversion of % made was renamed, dropped or disabled after its prepare', tbl
            USING ERRCODE = '55000',
                  DETAIL = array_to_string(late, E'\n'),
                  HINT = 'Renamed: rename it back (ALTER TRIGGER ... ON ... RENAME TO the name above); disabled or not ENABLE ALWAYS: ALTER TABLE ... ENABLE ALWAYS TRIGGER ...; '
                         'then call this again: nothing was changed, and the finish makes every reference agree with its parent before the swap (what was written meanwhile). '
                         'Dropped: abandon the conversion (CALL shard_id_convert_abandon(...)) and prepare it again.';
    END IF;
END $$;

-- The user's triggers and rules that the batches' UPDATEs would fire: on each relation the
-- batches write, enabled, for UPDATE (an UPDATE OF trigger only when it lists the new column, the
-- one the batches set), not the conversion's own.
CREATE FUNCTION _pg_shard_id.conversion_triggers(tbl regclass, key_column name, new_column name)
RETURNS TABLE (rel regclass, what text, name name, enabled "char")
LANGUAGE sql STABLE STRICT PARALLEL SAFE ROWS 16 SET search_path = pg_catalog, pg_temp AS $$
    SELECT u.rel, 'trigger', t.tgname, t.tgenabled
      FROM _pg_shard_id.conversion_units(tbl, key_column, new_column) u JOIN pg_trigger t ON t.tgrelid = u.rel
     WHERE NOT t.tgisinternal AND t.tgtype::int & 16 <> 0 AND t.tgenabled <> 'D'
       AND t.tgfoid NOT IN ('_pg_shard_id.conversion_fill_row()'::regprocedure, '_pg_shard_id.conversion_fill_reference()'::regprocedure,
                            '_pg_shard_id.conversion_note_deleted()'::regprocedure)
       AND (cardinality(t.tgattr::int2[]) = 0
            OR (SELECT attnum FROM pg_attribute WHERE attrelid = u.rel AND attname = coalesce(u.fk_new_column, new_column)) = ANY (t.tgattr::int2[]))
    UNION ALL
    SELECT u.rel, 'rule', w.rulename, w.ev_enabled
      FROM _pg_shard_id.conversion_units(tbl, key_column, new_column) u JOIN pg_rewrite w ON w.ev_class = u.rel
     WHERE w.ev_type = '2' AND w.rulename <> '_RETURN' AND w.ev_enabled <> 'D'
     ORDER BY 1, 2, 3
$$;


-- The inventory of a prepared conversion, as recorded.
CREATE FUNCTION _pg_shard_id.conversion_inventory(tbl regclass) RETURNS SETOF _pg_shard_id.conversion_step
LANGUAGE sql STABLE STRICT PARALLEL SAFE ROWS 64 SET search_path = pg_catalog, pg_temp AS $$
    SELECT i.* FROM _pg_shard_id.conversions c,
           _pg_shard_id.conversion_inventory(c.relid::regclass, c.time_column, c.seq, c.shard, c.new_column,
                                             c.fire_triggers, c.subscribers_ready) i
     WHERE c.relid = tbl
$$;

-- The inventory's refusals as one ERROR (0A000), naming each object with why and what to do.
CREATE FUNCTION _pg_shard_id.refuse(tbl regclass, refusals _pg_shard_id.conversion_step[]) RETURNS void
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF cardinality(refusals) > 0 THEN
        RAISE EXCEPTION 'pg_shard_id: % cannot be converted as it is: % object% would not follow the new key',
                        tbl, cardinality(refusals), CASE WHEN cardinality(refusals) > 1 THEN 's' ELSE '' END
            USING ERRCODE = '0A000',
                  DETAIL = (SELECT string_agg(format('%s (%s): %s%s', r.object, r.kind, r.detail,
                                                     CASE WHEN r.statement IS NOT NULL THEN format(' [%s]', r.statement) ELSE '' END), E'\n' ORDER BY r.ord)
                              FROM unnest(refusals) r),
                  HINT = CASE WHEN EXISTS (SELECT FROM unnest(refusals) r WHERE r.kind = 'user trigger or rule fired by the batches')
                              THEN 'The batches run with session_replication_role = replica so that triggers and rules do not fire: a superuser may convert, or GRANT SET ON PARAMETER session_replication_role TO the owner; or pass fire_triggers => true to fire them for every row. '
                              ELSE '' END
                         || format('SELECT * FROM shard_id_convert_plan(%L, ...) lists every step and object.', tbl::text);
    END IF;
END $$;

-- The refusals of a plan that still stop a conversion once its batches have run (the finish, the
-- swap): all but what the batches would fire and publications, which mattered before them.
CREATE FUNCTION _pg_shard_id.refusals_after_the_batches(plan _pg_shard_id.conversion_step[])
RETURNS _pg_shard_id.conversion_step[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
    SELECT ARRAY(SELECT p FROM unnest(plan) p WHERE p.action = 'refuse'
                   AND p.kind NOT IN ('user trigger or rule fired by the batches', 'publication membership'))
$$;

CREATE PROCEDURE shard_id_convert_prepare(tbl regclass, time_column name, seq regclass, shard integer,
                                          new_column name DEFAULT 'shard_id', fire_triggers boolean DEFAULT false,
                                          subscribers_ready boolean DEFAULT false)
-- (lock_timeout: waiting behind a long transaction, its ACCESS EXCLUSIVE requests would make every
-- writer of the tables wait behind them; it gives up after 10 s instead, having changed nothing)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET lock_timeout = '10s' AS $$
DECLARE
    state _pg_shard_id.conversions;
    key_column name;
    plan _pg_shard_id.conversion_step[];
    step _pg_shard_id.conversion_step;
    bad bigint;
    epoch_ts timestamptz;
BEGIN
    IF tbl IS NULL OR time_column IS NULL OR seq IS NULL OR shard IS NULL OR new_column IS NULL
       OR fire_triggers IS NULL OR subscribers_ready IS NULL THEN
        RAISE EXCEPTION 'pg_shard_id: shard_id_convert_prepare takes no NULL argument' USING ERRCODE = '22004';
    END IF;
    IF NOT pg_has_role((SELECT relowner FROM pg_class WHERE oid = tbl), 'USAGE') THEN
        RAISE EXCEPTION 'pg_shard_id: only the owner of % can convert it', tbl USING ERRCODE = '42501';
    END IF;
    -- One prepare at a time, each reading what the others committed: two at once both planned
    -- before either had written, and the second twinned the first one's twins (the nineteenth
    -- review). Under REPEATABLE READ every read would see the snapshot from before the wait, as
    -- in abandoning: refused.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'pg_shard_id: preparing a conversion runs only at READ COMMITTED, not %', current_setting('transaction_isolation')
            USING ERRCODE = '25000',
                  HINT = 'It reads the catalog and the other conversions after it waits for them, which a snapshot taken before would not show: BEGIN ISOLATION LEVEL READ COMMITTED; CALL shard_id_convert_prepare(...); COMMIT; (or SET default_transaction_isolation = ''read committed'' first). Nothing was changed.';
    END IF;
    -- (two keys: a space no one-key advisory lock of an application shares; 1885827945 is
    -- 'pgsi' in ASCII)
    BEGIN
        PERFORM pg_advisory_xact_lock(1885827945, 1);
    EXCEPTION WHEN lock_not_available THEN
        RAISE EXCEPTION 'pg_shard_id: another conversion''s prepare has held its turn for 10 s' USING ERRCODE = '55P03',
            HINT = 'pg_locks shows the session (locktype advisory, classid 1885827945, objid 1); call again when it has ended. Nothing was changed.';
    END;
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
    key_column := _pg_shard_id.conversion_key(tbl);
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
    -- what would not follow the new key, or cannot be done: nothing is changed
    plan := ARRAY(SELECT i FROM _pg_shard_id.conversion_inventory(tbl, time_column, seq, shard, new_column,
                                                                  fire_triggers, subscribers_ready) i);
    PERFORM _pg_shard_id.refuse(tbl, ARRAY(SELECT p FROM unnest(plan) p WHERE p.action = 'refuse'));
    -- every row needs a time the layout holds (a time less than 1.5 s past, or ahead of the
    -- clock, gets a live id: rows keep being inserted while this runs)
    epoch_ts := (SELECT i.epoch FROM @extschema@.pg_shard_id_info() i);
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
    FOREACH step IN ARRAY plan LOOP
        IF step.phase = 'prepare' AND step.action IN ('add', 'grant') THEN
            EXECUTE step.statement;
        END IF;
    END LOOP;
    INSERT INTO _pg_shard_id.conversions (relid, table_name, key_column, time_column, seq, shard, new_column,
                                          fire_triggers, subscribers_ready, rows_estimate, started_at, updated_at)
    SELECT tbl, tbl::text, key_column, time_column, seq, shard, new_column, fire_triggers, subscribers_ready,
           (SELECT sum(greatest(c.reltuples, 0))::bigint FROM pg_class c
             WHERE c.oid IN (SELECT u.rel FROM _pg_shard_id.conversion_units(tbl, key_column, new_column) u)),
           clock_timestamp(), clock_timestamp();
    RAISE NOTICE '%', format('pg_shard_id: %s is prepared; build its indexes (SELECT * FROM shard_id_convert_indexes(%L) \gexec), then CALL shard_id_convert(%L)',
                             tbl, tbl::text, tbl::text);
END $$;

-- Abandons tbl's conversion before its swap (issue 55): drops what the prepare, the index step
-- and the finish's first steps made (the conversion's triggers, the new columns on the table and
-- each referencing table, and with them the twin indexes and CHECKs on them) and the progress
-- row, in one transaction; the table is as it was, rows, keys and sequence untouched. Takes
-- ACCESS EXCLUSIVE on the table and each referencing table for the catalog changes only (DROP
-- COLUMN rewrites nothing; the space of the new column's values comes back as rows are
-- rewritten, or at VACUUM FULL); waits at most 10 s for those locks. Refused after the swap
-- (the old key is then in <key>_before_shard_id, and the new one in use).
CREATE PROCEDURE shard_id_convert_abandon(tbl regclass)
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp SET lock_timeout = '10s' AS $$
DECLARE
    state _pg_shard_id.conversions;
    x record;
    orphan text;
BEGIN
    IF tbl IS NULL THEN
        RAISE EXCEPTION 'pg_shard_id: shard_id_convert_abandon takes no NULL argument' USING ERRCODE = '22004';
    END IF;
    IF NOT pg_has_role((SELECT relowner FROM pg_class WHERE oid = tbl), 'USAGE') THEN
        RAISE EXCEPTION 'pg_shard_id: only the owner of % can abandon its conversion', tbl USING ERRCODE = '42501';
    END IF;
    -- (it locks, then reads the catalog: under REPEATABLE READ every read would see the snapshot
    -- taken before its lock wait, and an index of the whole row made meanwhile got past the check
    -- below, left over rows that had the new column: the eighteenth review. A procedure with a
    -- SET clause cannot end the caller's transaction, as the finish does: it refuses)
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'pg_shard_id: abandoning a conversion runs only at READ COMMITTED, not %', current_setting('transaction_isolation')
            USING ERRCODE = '25000',
                  HINT = 'It reads the catalog again after its locks, which a snapshot taken before them would not show: BEGIN ISOLATION LEVEL READ COMMITTED; CALL shard_id_convert_abandon(...); COMMIT; (or SET default_transaction_isolation = ''read committed'' first). Nothing was changed.';
    END IF;
    SELECT * INTO state FROM _pg_shard_id.conversions c WHERE c.relid = tbl;
    IF state.relid IS NULL THEN
        RAISE EXCEPTION 'pg_shard_id: % has no conversion to abandon', tbl USING ERRCODE = '55000';
    END IF;
    IF state.phase = 'finished' THEN
        RAISE EXCEPTION 'pg_shard_id: the conversion of % was swapped in already', tbl
            USING ERRCODE = '55000',
                  HINT = format('%s.%I holds the new ids and %I the old ones; going back is a conversion of its own.',
                                tbl, state.key_column, _pg_shard_id.derived_name(state.key_column, '_before_shard_id'));
    END IF;
    -- (renamed columns only: abandoning drops what the prepare made, by the names it gave, and
    -- touches no foreign key added since, which is no reason to stay: the fourteenth review)
    IF EXISTS (SELECT FROM _pg_shard_id.renamed_columns(tbl)) THEN
        PERFORM _pg_shard_id.refuse_changed(tbl);
    END IF;
    -- each referencing table, then the table (the swap's order, and writers'), for the catalog
    -- changes only
    PERFORM _pg_shard_id.lock_tables((SELECT i.statement FROM _pg_shard_id.conversion_inventory(tbl) i WHERE i.phase = 'swap' AND i.action = 'lock'));
    -- (again under the locks: a finish that held them may have swapped meanwhile, and abandoning
    -- then deleted the record of a finished conversion, its foreign keys left NOT VALID: the
    -- sixteenth review)
    -- (the same conversion: abandoned and prepared again meanwhile, it is another one, maybe with
    -- another new column: the seventeenth review; by what it is and whether it was swapped, not
    -- by its whole row, which each batch changes: abandoning while the batches ran was refused,
    -- the eighteenth review)
    IF (SELECT (c.phase = 'finished', c.started_at, c.table_name, c.key_column, c.time_column, c.seq, c.shard, c.new_column)
          FROM _pg_shard_id.conversions c WHERE c.relid = tbl)
       IS DISTINCT FROM (false, state.started_at, state.table_name, state.key_column, state.time_column, state.seq, state.shard, state.new_column) THEN
        RAISE EXCEPTION 'pg_shard_id: the conversion of % changed while abandoning it waited for its locks (now %)', tbl,
                        coalesce((SELECT c.phase FROM _pg_shard_id.conversions c WHERE c.relid = tbl), 'gone')
            USING ERRCODE = '55000', HINT = 'Nothing was changed: SELECT * FROM shard_id_conversions says where it is.';
    END IF;
    -- an index of the whole row made since the prepare: DROP COLUMN keeps it, built over rows
    -- that had the new column, and index scans would miss rows (the sixteenth review)
    PERFORM _pg_shard_id.refuse(tbl, ARRAY(SELECT i FROM _pg_shard_id.conversion_inventory(tbl) i WHERE i.kind = 'index of the whole row'));
    -- what was made since that reads a new column (a view): DROP COLUMN would refuse it, 2BP01
    -- (the twenty-eighth review); named here, nothing changed
    orphan := (SELECT string_agg(n.what, E'\n') FROM _pg_shard_id.new_column_readers(tbl, state.key_column, state.new_column, false) n);
    IF orphan IS NOT NULL THEN
        RAISE EXCEPTION 'pg_shard_id: the conversion of % cannot be abandoned as it is: what was made since its prepare reads a new column', tbl
            USING ERRCODE = '0A000',
                  DETAIL = orphan,
                  HINT = 'Abandoning drops the new columns, which these read: drop them (or make them read none of the new columns), abandon, create them again. Nothing was changed.';
    END IF;
    -- what the prepare made for a foreign key dropped since, found by its triggers: before the
    -- loop below drops the triggers of every table that still references the key (a table that
    -- keeps another foreign key kept the dropped one's column and CHECKs: the twentieth review)
    FOREACH orphan IN ARRAY ARRAY(SELECT _pg_shard_id.orphaned_references(tbl)) LOOP
        EXECUTE orphan;
    END LOOP;
    FOR x IN SELECT t.tgname, t.tgrelid::regclass AS rel FROM pg_trigger t
              WHERE t.tgfoid IN ('_pg_shard_id.conversion_fill_row()'::regprocedure, '_pg_shard_id.conversion_fill_reference()'::regprocedure,
                                 '_pg_shard_id.conversion_note_deleted()'::regprocedure)
                AND t.tgparentid = 0
                AND t.tgrelid IN (SELECT cc.top FROM _pg_shard_id.conversion_columns(tbl, state.key_column, state.new_column) cc) LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', x.tgname, x.rel);
    END LOOP;
    FOR x IN SELECT DISTINCT cc.top, cc.new_column FROM _pg_shard_id.conversion_columns(tbl, state.key_column, state.new_column) cc
              WHERE cc.rel = cc.top AND cc.new_attnum IS NOT NULL LOOP
        EXECUTE format('ALTER TABLE %s DROP COLUMN %I', x.top, x.new_column);
    END LOOP;
    DELETE FROM _pg_shard_id.conversion_deleted d WHERE d.relid = tbl;
    DELETE FROM _pg_shard_id.conversions c WHERE c.relid = tbl;
    RAISE NOTICE 'pg_shard_id: the conversion of % is abandoned; the table is as it was before the prepare', tbl;
EXCEPTION WHEN deadlock_detected THEN
    RAISE EXCEPTION 'pg_shard_id: abandoning the conversion of % was chosen to end a deadlock: %', tbl, SQLERRM
        USING ERRCODE = '40P01', HINT = 'Nothing was changed; call it again.';
WHEN lock_not_available THEN
    RAISE EXCEPTION 'pg_shard_id: abandoning the conversion of % waited 10 s for a lock: %', tbl, SQLERRM
        USING ERRCODE = '55P03',
              HINT = 'A transaction holds a lock on the table (pg_locks and pg_stat_activity show it; a prepared one, pg_prepared_xacts); nothing was changed. End it, then call again.';
END $$;

-- The CREATE INDEX CONCURRENTLY statements a prepared conversion still needs (none: ready): the
-- twin of each index on a moved column (the primary key's among them), on the new column, and a
-- lookup index on each new referencing column. Run them in psql with \gexec. An index a build
-- left invalid (cancelled, or a duplicate found) is dropped first.
CREATE FUNCTION shard_id_convert_indexes(tbl regclass) RETURNS SETOF text
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE ROWS 8 SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    plan _pg_shard_id.conversion_step[];
    step _pg_shard_id.conversion_step;
    invalid text;
BEGIN
    IF (SELECT c.phase FROM _pg_shard_id.conversions c WHERE c.relid = tbl) = 'finished' THEN
        RETURN;  -- (swapped: no index to make; its inventory has no new column to read any more)
    END IF;
    PERFORM _pg_shard_id.refuse_changed(tbl);
    plan := ARRAY(SELECT i FROM _pg_shard_id.conversion_inventory(tbl) i);
    -- (a twin's name another relation took since the prepare: refused, never dropped below as a
    -- build left invalid, the twenty-first review)
    PERFORM _pg_shard_id.refuse(tbl, ARRAY(SELECT p FROM unnest(plan) p WHERE p.action = 'refuse' AND p.kind = 'name taken'));
    FOR step IN SELECT * FROM unnest(plan) i WHERE i.phase = 'indexes' AND NOT i.done ORDER BY i.ord LOOP
        -- (CREATE [UNIQUE] INDEX CONCURRENTLY name ON table ...: an index of that name on that
        -- table, left invalid)
        SELECT format('%I.%I', n.nspname, k.relname) INTO invalid
          FROM pg_class k JOIN pg_namespace n ON n.oid = k.relnamespace JOIN pg_index i ON i.indexrelid = k.oid
         WHERE NOT i.indisvalid
           AND step.statement LIKE format('CREATE %%INDEX CONCURRENTLY %s ON %s %%', quote_ident(k.relname), _pg_shard_id.qualified(i.indrelid));
        IF invalid IS NOT NULL THEN
            RETURN NEXT format('DROP INDEX CONCURRENTLY %s;', invalid);
        END IF;
        RETURN NEXT step.statement || ';';
    END LOOP;
END $$;

-- One statement of a conversion's batches or finish (with $1 and $2, the batch's blocks; or,
-- when they are NULL, any statements), with the user's triggers and rules silent:
-- session_replication_role = replica for its duration only (the SET clause; it needs what SET
-- needs: a superuser, or GRANT SET ON PARAMETER).
CREATE FUNCTION _pg_shard_id.run_quietly(statement text, from_block bigint, to_block bigint) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET session_replication_role = replica AS $$
DECLARE
    done bigint;
BEGIN
    IF from_block IS NULL THEN
        EXECUTE statement;  -- (it may be several statements: no parameters then)
    ELSE
        EXECUTE statement USING from_block, to_block;
    END IF;
    GET DIAGNOSTICS done = ROW_COUNT;
    RETURN done;
END $$;

-- The same under the caller's search_path, which the user's trigger functions may need when they
-- fire (fire_triggers => true). Its body names nothing, and the statements it runs name
-- everything with its schema.
CREATE FUNCTION _pg_shard_id.run_firing(statement text, from_block bigint, to_block bigint, caller_path text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    done bigint;
BEGIN
    PERFORM pg_catalog.set_config('search_path', caller_path, true);
    IF from_block IS NULL THEN
        EXECUTE statement;
    ELSE
        EXECUTE statement USING from_block, to_block;
    END IF;
    GET DIAGNOSTICS done = ROW_COUNT;
    RETURN done;
END $$;

-- A statement of tbl's conversion, run so that the user's triggers and rules fire only when asked:
-- quietly when the batches would fire some (fire_triggers => false), otherwise under the caller's
-- search_path (restored when this returns).
CREATE FUNCTION _pg_shard_id.run(tbl regclass, statement text, from_block bigint, to_block bigint, caller_path text) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    state _pg_shard_id.conversions;
BEGIN
    SELECT * INTO state FROM _pg_shard_id.conversions c WHERE c.relid = tbl;
    IF NOT state.fire_triggers AND EXISTS (SELECT FROM _pg_shard_id.conversion_triggers(tbl, state.key_column, state.new_column)) THEN
        RETURN _pg_shard_id.run_quietly(statement, from_block, to_block);
    END IF;
    RETURN _pg_shard_id.run_firing(statement, from_block, to_block, caller_path);
END $$;

-- Rows per heap block of rel, counted in its first 8 blocks (a TID range scan): for a table the
-- statistics know nothing of.
CREATE FUNCTION _pg_shard_id.rows_per_block(rel regclass) RETURNS double precision
LANGUAGE plpgsql STABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    n bigint;
    blocks bigint := least(8, pg_relation_size(rel) / current_setting('block_size')::bigint);
BEGIN
    IF blocks = 0 THEN
        RETURN 1;
    END IF;
    EXECUTE format('SELECT count(*) FROM %s WHERE ctid < %L::tid', rel, format('(%s,0)', blocks)) INTO n;
    RETURN greatest(1.0, n::double precision / blocks);
END $$;

-- Takes the swap's locks (statement: LOCK TABLE each referencing table, then the table, IN ACCESS
-- EXCLUSIVE MODE) without ever holding some while waiting long for another: each attempt waits
-- at most 200 ms (or half of deadlock_timeout) per lock, then lets go of what it took and tries
-- again, for 10 s in all (55P03 then). Writers take these tables in either order (an order, then
-- its lines; a line alone, then its order for the foreign key's check): a swap that held one
-- table while waiting for the other deadlocked with one of them (issue 55), and the deadlock
-- detector could end the writer. This way the swap gives way first.
CREATE FUNCTION _pg_shard_id.lock_tables(statement text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET lock_timeout = '10s' AS $$
DECLARE
    deadline timestamptz := clock_timestamp() + interval '10 s';
    attempt text := least(200, greatest(1, (SELECT setting::int FROM pg_settings WHERE name = 'deadlock_timeout') / 2)) || 'ms';
BEGIN
    LOOP
        BEGIN
            PERFORM set_config('lock_timeout', attempt, true);
            EXECUTE statement;
            RETURN;
        EXCEPTION WHEN lock_not_available THEN
            IF clock_timestamp() > deadline THEN
                RAISE EXCEPTION 'pg_shard_id: the tables stayed locked by other transactions for 10 s'
                    USING ERRCODE = '55P03';
            END IF;
        END;
        PERFORM pg_sleep(0.02 + random() * 0.05);
    END LOOP;
END $$;

-- The sweeps of tbl's conversion (children_only: the referencing tables' only, as the swap runs
-- them under its locks): rows still without a new id, referencing rows whose referenced row was not
-- known to their writer (-1 and below), and those that referenced a row deleted (or given another
-- key) and inserted again. The record of deleted rows is kept until the swap: a transaction still
-- open may have written rows referencing a deleted row's new id, which no sweep has seen yet
-- (issue 55). Returns the rows written.
CREATE FUNCTION _pg_shard_id.sweep(tbl regclass, caller_path text, children_only boolean) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    state _pg_shard_id.conversions;
    u record;
    done bigint := 0;
BEGIN
    SELECT * INTO state FROM _pg_shard_id.conversions c WHERE c.relid = tbl;
    FOR u IN SELECT f.statement FROM _pg_shard_id.fill_statements(tbl, state.key_column, state.new_column,
                                                                   state.time_column, state.seq, state.shard) f
              WHERE f.unit IS NULL AND (f.kind = 'child' OR NOT children_only) LOOP
        done := done + _pg_shard_id.run(tbl, u.statement, NULL, NULL, caller_path);
    END LOOP;
    RETURN done;
END $$;

-- Before the swap, every reference made to agree with its parent, found by the old key (one scan
-- of each referencing table, writes going on; it updates only the rows that disagree, their
-- owner's triggers quiet as in the batches). The conversion's triggers keep references right as
-- writers change them, and the sweeps, under the swap's locks too, mend what they left NULL or a
-- placeholder and what referenced a row deleted meanwhile (through the new columns' indexes);
-- but a writer while a trigger was off (disabled, then enabled again between two steps, or
-- within one transaction: no catalog check can see it) left a reference to another row, which
-- the foreign key validated after the swap accepts, that row existing (the twenty-fourth
-- review). Those alone are its business: so it writes nothing when no trigger was off (the
-- sweeps' rows would make every finish repair, commit and come back while writers add them).
-- Returns how many it repaired.
CREATE FUNCTION _pg_shard_id.repair_references(tbl regclass, caller_path text) RETURNS bigint
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    state _pg_shard_id.conversions;
    r record;
    repaired bigint := 0;
    done bigint;
BEGIN
    SELECT * INTO state FROM _pg_shard_id.conversions c WHERE c.relid = tbl;
    FOR r IN SELECT DISTINCT rr.rel, rr.fk_column, rr.fk_new_column
               FROM _pg_shard_id.conversion_references(tbl, state.key_column, state.new_column) rr ORDER BY 1, 2 LOOP
        done := _pg_shard_id.run(tbl, format('UPDATE %s c SET %I = p.%I FROM %s p WHERE p.%I OPERATOR(pg_catalog.=) c.%I '
                                             'AND p.%I IS NOT NULL AND c.%I OPERATOR(pg_catalog.>=) 0 AND c.%I OPERATOR(pg_catalog.<>) p.%I '
                                             'AND c.%I OPERATOR(pg_catalog.<>) ALL (ARRAY(SELECT d.new_id FROM _pg_shard_id.conversion_deleted d '
                                             'WHERE d.relid OPERATOR(pg_catalog.=) %s::pg_catalog.oid))',
                                             _pg_shard_id.qualified(r.rel), r.fk_new_column, state.new_column, _pg_shard_id.qualified(tbl),
                                             state.key_column, r.fk_column, state.new_column, r.fk_new_column, r.fk_new_column, state.new_column,
                                             r.fk_new_column, tbl::oid),
                                 NULL, NULL, caller_path);
        -- (and a reference cleared after the conversion's trigger gave its new one: a user's
        -- trigger that fired after it, the twenty-eighth review; refused at every step, and
        -- mended here for what it wrote before)
        done := done + _pg_shard_id.run(tbl, format('UPDATE %s c SET %I = NULL WHERE c.%I IS NULL AND c.%I IS NOT NULL',
                                                    _pg_shard_id.qualified(r.rel), r.fk_new_column, r.fk_column, r.fk_new_column),
                                        NULL, NULL, caller_path);
        IF done > 0 THEN
            RAISE NOTICE 'pg_shard_id: % rows of %.% referenced another row than their parent''s (written while a trigger of the conversion was off, or before a trigger that fired after it): repaired', done, r.rel, r.fk_column;
        END IF;
        repaired := repaired + done;
    END LOOP;
    RETURN repaired;
END $$;

-- One transaction of shard_id_convert: one batch (a range of heap blocks of the current unit),
-- or, when every unit is done, the sweep. Returns whether there is more to do.
CREATE FUNCTION _pg_shard_id.convert_step(tbl regclass, batch_rows integer, caller_path text) RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    state _pg_shard_id.conversions;
    u record;
    missing text[];
    blocks bigint;
    step bigint;
    done bigint;
    t0 timestamptz := clock_timestamp();
BEGIN
    SELECT * INTO state FROM _pg_shard_id.conversions c WHERE c.relid = tbl;
    IF state.relid IS NULL THEN
        RAISE EXCEPTION 'pg_shard_id: % is not prepared for conversion', tbl
            USING ERRCODE = '55000', HINT = 'CALL shard_id_convert_prepare(table, time_column, sequence, shard) first.';
    END IF;
    IF state.phase IN ('filled', 'finished') THEN
        RAISE NOTICE '%', CASE state.phase WHEN 'finished' THEN format('pg_shard_id: %s was converted already', tbl)
                          ELSE format('pg_shard_id: every row of %s has its time-ordered id in %I; CALL shard_id_convert_finish(%L) swaps it in',
                                      tbl, state.new_column, tbl::text) END;
        RETURN false;
    END IF;
    PERFORM _pg_shard_id.refuse_changed(tbl);
    IF state.phase = 'prepared' THEN
        missing := ARRAY(SELECT @extschema@.shard_id_convert_indexes(tbl));
        IF cardinality(missing) > 0 THEN
            RAISE EXCEPTION 'pg_shard_id: % needs these indexes before its rows get their ids', tbl
                USING ERRCODE = '55000',
                      DETAIL = array_to_string(missing, E'\n'),
                      HINT = format('CREATE INDEX CONCURRENTLY cannot run inside a procedure: SELECT * FROM shard_id_convert_indexes(%L) \gexec in psql runs them. Rows inserted meanwhile already get time-ordered ids from the new column''s DEFAULT.', tbl::text);
        END IF;
        UPDATE _pg_shard_id.conversions c SET phase = 'filling' WHERE c.relid = tbl;
        RETURN true;
    END IF;
    SELECT f.* INTO u FROM _pg_shard_id.fill_statements(tbl, state.key_column, state.new_column, state.time_column, state.seq, state.shard) f
     WHERE f.unit >= state.unit ORDER BY f.unit LIMIT 1;
    IF u.unit IS NULL THEN
        -- the sweeps: rows still without an id (an UPDATE that moved a row is filled by the
        -- trigger; this catches anything else), through the new columns' indexes
        done := 0;
        done := _pg_shard_id.sweep(tbl, caller_path, false);
        UPDATE _pg_shard_id.conversions c SET phase = 'filled', rows_done = rows_done + done, updated_at = clock_timestamp()
         WHERE c.relid = tbl;
        RAISE NOTICE '%', format('pg_shard_id: every row of %s has its time-ordered id in %I; CALL shard_id_convert_finish(%L) swaps it in',
                                 tbl, state.new_column, tbl::text);
        RETURN false;
    END IF;
    IF u.unit > state.unit THEN
        UPDATE _pg_shard_id.conversions c SET unit = u.unit, next_block = 0 WHERE c.relid = tbl RETURNING * INTO state;
    END IF;
    blocks := pg_relation_size(u.rel) / current_setting('block_size')::bigint;
    IF state.next_block >= blocks THEN
        UPDATE _pg_shard_id.conversions c SET unit = u.unit + 1, next_block = 0 WHERE c.relid = tbl;
        RETURN true;
    END IF;
    -- blocks for about batch_rows rows, by the rows per block the statistics say
    -- (a table never analyzed has reltuples -1: the rows of its first 8 blocks are counted instead)
    step := greatest(1, (batch_rows / greatest(1, coalesce(
                (SELECT reltuples / nullif(relpages, 0) FROM pg_class WHERE oid = u.rel AND reltuples >= 0),
                _pg_shard_id.rows_per_block(u.rel))))::bigint);
    -- (waits of at most half of deadlock_timeout: for rows writers hold, or for a transaction's
    -- DEFAULT ids next_shard_id_at waits for; the batch is tried again, never a writer ended)
    BEGIN
        PERFORM set_config('lock_timeout', least(500, greatest(1, (SELECT setting::int FROM pg_settings WHERE name = 'deadlock_timeout') / 2)) || 'ms', true);
        done := _pg_shard_id.run(tbl, u.statement, state.next_block, state.next_block + step, caller_path);
    EXCEPTION WHEN lock_not_available THEN
        PERFORM pg_sleep(0.1);
        RETURN true;
    -- (abandoned while this batch waited for its lock: its statement names a column dropped
    -- meanwhile, the nineteenth review)
    WHEN undefined_column THEN
        IF NOT EXISTS (SELECT FROM _pg_shard_id.conversions c WHERE c.relid = tbl AND c.started_at = state.started_at) THEN
            RAISE EXCEPTION 'pg_shard_id: the conversion of % was abandoned while its batches ran', tbl
                USING ERRCODE = '55000', HINT = 'Nothing is left of it; prepare it again to convert.';
        END IF;
        RAISE;
    END;
    UPDATE _pg_shard_id.conversions c
       SET next_block = state.next_block + step, rows_done = rows_done + done, updated_at = clock_timestamp(),
           rows_per_second = CASE WHEN done > 0 THEN
               coalesce(0.8 * rows_per_second, 0) + (CASE WHEN rows_per_second IS NULL THEN 1.0 ELSE 0.2 END)
               * done / greatest(extract(epoch FROM clock_timestamp() - t0), 0.001) ELSE rows_per_second END
     WHERE c.relid = tbl RETURNING * INTO state;
    RAISE NOTICE 'pg_shard_id: % (%): % of about % rows, % rows/s, about % left',
        tbl, u.rel, state.rows_done, greatest(state.rows_estimate, state.rows_done),
        round(state.rows_per_second::numeric),
        CASE WHEN state.rows_per_second > 0
             THEN make_interval(secs => round(greatest(state.rows_estimate - state.rows_done, 0) / state.rows_per_second))::text
             ELSE '?' END;
    RETURN true;
END $$;

CREATE PROCEDURE shard_id_convert(tbl regclass, batch_rows integer DEFAULT 10000)
LANGUAGE plpgsql AS $$
-- (no SET clause: a procedure with one cannot COMMIT. Each transaction is one call of a function
-- with search_path pinned, named with its schema, whose arguments are of exactly the types
-- given: nothing is resolved through the caller's search_path. The caller's path is passed on
-- for the user's triggers, when they fire)
BEGIN
    IF _pg_shard_id.convert_arguments(tbl, batch_rows) THEN
        -- Every batch READ COMMITTED, as the finish's steps: under REPEATABLE READ (a role's or
        -- database's default_transaction_isolation) a batch whose UPDATE waited for a writer's
        -- row failed with 40001 once the writer committed (the fifteenth review)
        IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
            COMMIT;
        END IF;
        LOOP
            SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
            EXIT WHEN NOT _pg_shard_id.convert_step(tbl, batch_rows, pg_catalog.current_setting('search_path'));
            COMMIT;
        END LOOP;
    END IF;
END $$;

-- shard_id_convert's arguments: 22004 for a NULL, 22023 for a batch under 1 row.
CREATE FUNCTION _pg_shard_id.convert_arguments(tbl regclass, batch_rows integer) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF tbl IS NULL OR batch_rows IS NULL THEN
        RAISE EXCEPTION 'pg_shard_id: shard_id_convert takes no NULL argument' USING ERRCODE = '22004';
    END IF;
    IF batch_rows < 1 THEN
        RAISE EXCEPTION 'pg_shard_id: batch_rows must be at least 1, not %', batch_rows USING ERRCODE = '22023';
    END IF;
    RETURN true;
END $$;

-- One transaction of shard_id_convert_finish: the first step of the finish not done yet (a
-- CHECK added, or filled and validated; the statistics), then the swap, then the validation of
-- each foreign key. Returns whether there is more to do. No step waits more than 10 s for a
-- lock (55P03, and the finish goes on from that step when called again).
CREATE FUNCTION _pg_shard_id.finish_step(tbl regclass, caller_path text) RETURNS boolean
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET lock_timeout = '10s' AS $$
DECLARE
    state _pg_shard_id.conversions;
    plan _pg_shard_id.conversion_step[];
    step _pg_shard_id.conversion_step;
    sweep record;
BEGIN
    SELECT * INTO state FROM _pg_shard_id.conversions c WHERE c.relid = tbl;
    IF state.relid IS NULL OR state.phase NOT IN ('filled', 'finished') THEN
        RAISE EXCEPTION 'pg_shard_id: % is not ready to swap (%)', tbl, coalesce(state.phase, 'never converted')
            USING ERRCODE = '55000', HINT = 'CALL shard_id_convert(...) until it says every row has its id.';
    END IF;
    IF state.phase = 'filled' THEN
        PERFORM _pg_shard_id.refuse_changed(tbl);
        -- what was made since the prepare and cannot follow, before any step (a CHECK's twin
        -- added NOT VALID is enforced on writers at once: the sixteenth review); the swap asks
        -- again under its locks
        plan := ARRAY(SELECT i FROM _pg_shard_id.conversion_inventory(tbl) i);
        -- (and again after the plan, whose snapshot is the earlier one then: what the plan saw,
        -- this sees; a foreign key committed between the first check and the plan got a step of
        -- the plan that ran on its missing column, 42703, where it is refused, 55000: a
        -- fresh-clone run, PostgreSQL 15)
        PERFORM _pg_shard_id.refuse_changed(tbl);
        PERFORM _pg_shard_id.refuse(tbl, _pg_shard_id.refusals_after_the_batches(plan));
        SELECT * INTO step FROM unnest(plan) i WHERE i.phase = 'finish' AND NOT i.done ORDER BY i.ord LIMIT 1;
        IF step.ord IS NOT NULL THEN
            IF step.action = 'check' THEN
                -- what transactions in flight when a CHECK was added left without an id: the
                -- sweeps (as the batches run, the user's triggers silent), then the validation
                PERFORM _pg_shard_id.sweep(tbl, caller_path, false);
            END IF;
            EXECUTE step.statement;
            RETURN true;
        END IF;
        -- (a step of its own, committed before the wait: run in the swap's transaction, a repair
        -- gave it an id and row locks held through the wait, and under load every finish failed
        -- at it, a writer of a repaired row deadlocked: the twenty-sixth review)
        IF _pg_shard_id.repair_references(tbl, caller_path) > 0 THEN
            RETURN true;
        END IF;
        PERFORM _pg_shard_id.wait_for_older_transactions(tbl);
        PERFORM _pg_shard_id.swap(tbl, caller_path);
        RETURN true;
    END IF;
    -- swapped: the foreign keys are checked now, while inserts and updates go on (and again by
    -- a later call, when an earlier one was interrupted)
    SELECT * INTO step FROM _pg_shard_id.conversion_validations(tbl) i ORDER BY i.ord LIMIT 1;
    IF step.ord IS NOT NULL THEN
        EXECUTE step.statement;
        RETURN true;
    END IF;
    RAISE NOTICE 'pg_shard_id: %.% holds the time-ordered ids; the old key is in %', tbl, state.key_column,
        _pg_shard_id.derived_name(state.key_column, '_before_shard_id');
    RETURN false;
EXCEPTION WHEN deadlock_detected THEN
    RAISE EXCEPTION 'pg_shard_id: the finish of % was chosen to end a deadlock: %', tbl, SQLERRM
        USING ERRCODE = '40P01',
              HINT = format('A transaction took the tables'' locks in another order; nothing of this step was done, and it ended so that the other one could go on. CALL shard_id_convert_finish(%L) again: it goes on from its last step.', tbl::text);
WHEN lock_not_available THEN
    -- (the wait for older snapshots says what it waited for itself, not a lock: the thirteenth
    -- review)
    IF position(' s for snapshots older than it: ' in SQLERRM) > 0 THEN
        RAISE;
    END IF;
    -- a step waits at most 10 s for its lock (behind it, every writer of the table would wait
    -- too), then gives up, having done nothing
    RAISE EXCEPTION 'pg_shard_id: the finish of % waited 10 s for a lock: %', tbl, SQLERRM
        USING ERRCODE = '55P03',
              HINT = format('A transaction holds a lock on the table (pg_locks and pg_stat_activity show it; a prepared one, pg_prepared_xacts); nothing of this step was done. End it, then CALL shard_id_convert_finish(%L) again: it goes on from its last step.', tbl::text);
END $$;

-- The foreign keys the swap of tbl made again NOT VALID that are not validated yet (an interrupted
-- finish's): those it recorded, valid before it (one the user left NOT VALID is not touched).
CREATE FUNCTION _pg_shard_id.conversion_validations(tbl regclass) RETURNS SETOF _pg_shard_id.conversion_step
LANGUAGE sql STABLE STRICT PARALLEL SAFE ROWS 16 SET search_path = pg_catalog, pg_temp AS $$
    SELECT _pg_shard_id.step(700, 'after the swap', CASE c.contype WHEN 'f' THEN 'foreign key to the key' ELSE 'old-style ids' END,
                             format('constraint %I on %s', c.conname, c.conrelid::regclass),
                             'check', NULL, format('ALTER TABLE %s VALIDATE CONSTRAINT %I', c.conrelid::regclass, c.conname), NULL, false)
      FROM _pg_shard_id.conversions v JOIN pg_constraint c ON c.oid = ANY (v.validate_after)
     WHERE v.relid = tbl AND NOT c.convalidated
     ORDER BY c.conrelid, c.conname
$$;

-- The swap: one transaction, ACCESS EXCLUSIVE on the table and each referencing table
-- (lock_timeout 10 s), then the inventory read again under the locks (an object made since the
-- prepare is carried too, or refused), every twin checked, and its swap steps run in order.
-- Waits until no other session of this database holds a snapshot older than now (its xmin: the
-- oldest transaction running when it was taken), 10 s at most (20 s for standbys; 55P03, naming
-- them), before the swap takes its locks, as CREATE INDEX CONCURRENTLY waits for older
-- snapshots. The swap renames
-- the new column into the key's place, a catalog change every snapshot sees at once, while a
-- snapshot taken before the batches filled a row still sees that row's version without a new id:
-- read through it after the swap, the key was NULL, and a REPEATABLE READ transaction that took
-- no lock copied NULL into a referencing row without an error (the eleventh review). By the
-- snapshots' xmin, checked again on every pass, not by a list of transactions taken once: a
-- snapshot exported by an old transaction and imported by a new one (SET TRANSACTION SNAPSHOT, a
-- logical replication slot's exported snapshot) carries the old xmin (the twelfth review).
-- Walsenders count too: a standby's hot_standby_feedback is its queries' xmin (in its physical
-- slot's xmin when it streams through one). SECURITY DEFINER: pg_stat_activity shows other
-- roles' backend_type only to superusers and pg_read_all_stats; it says only pids, backend
-- types, slot names and the xids any role sees there.
CREATE FUNCTION _pg_shard_id.wait_for_older_transactions(tbl regclass) RETURNS void
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    horizon xid8 := pg_snapshot_xmax(pg_current_snapshot());
    horizon32 xid := (horizon::text::bigint % 4294967296)::text::xid;
    started timestamptz := clock_timestamp();
    left_ text;
    only_standbys boolean;
    limit_s integer;
    holders text;
BEGIN
    LOOP
        -- (PostgreSQL keeps what pg_stat_activity showed for the rest of the transaction: without
        -- this, every pass saw the first pass's sessions, and a snapshot that ended during the
        -- wait failed the finish after 10 s all the same: the thirteenth review)
        PERFORM pg_stat_clear_snapshot();
        SELECT string_agg(o.what, ', ' ORDER BY o.what), bool_and(o.standby) INTO left_, only_standbys
          FROM (SELECT format('pid %s (%s)', a.pid, a.backend_type) AS what, a.backend_type = 'walsender' AS standby
                  FROM pg_stat_activity a
                 WHERE a.pid <> pg_backend_pid() AND a.backend_xmin IS NOT NULL
                   AND (a.datid = (SELECT oid FROM pg_database WHERE datname = current_database()) OR a.backend_type = 'walsender')
                   AND a.backend_type <> 'autovacuum worker'
                   -- (older: a larger age; the horizon as a 32-bit xid, as backend_xmin is)
                   AND age(a.backend_xmin) > age(horizon32)
                UNION ALL
                -- a standby streaming through a physical slot reports its queries' xmin
                -- (hot_standby_feedback) into the slot, not into its walsender's backend_xmin
                -- (the fifteenth review)
                SELECT format('the standby of replication slot %I', s.slot_name), true
                  FROM pg_replication_slots s
                 WHERE s.slot_type = 'physical' AND s.active AND s.xmin IS NOT NULL AND age(s.xmin) > age(horizon32)) o;
        EXIT WHEN left_ IS NULL;
        -- 10 s; 20 s while only standbys are left: a standby's xmin moves only when its feedback
        -- comes, every wal_receiver_status_interval (10 s by default), so a healthy one needs up
        -- to that long to show it has replayed past the swap (the sixteenth review)
        limit_s := CASE WHEN only_standbys THEN 20 ELSE 10 END;
        IF clock_timestamp() > started + make_interval(secs => limit_s) THEN
            -- a transaction that holds a transaction id older than the horizon (a prepared one,
            -- an idle writer) holds every newer snapshot's xmin back to it: the sessions named
            -- are then not old, it is (the thirteenth review; every such one, not only the
            -- oldest: the fifteenth). Their xids, as pg_stat_activity shows any role
            SELECT string_agg(h.what, ', ' ORDER BY h.what) INTO holders
              FROM (SELECT format('prepared transaction %L (xid %s)', p.gid, p.transaction) AS what
                      FROM pg_prepared_xacts p WHERE age(p.transaction) > age(horizon32)
                    UNION ALL
                    SELECT format('pid %s (xid %s)', a.pid, a.backend_xid)
                      FROM pg_stat_activity a
                     WHERE a.pid <> pg_backend_pid() AND a.backend_xid IS NOT NULL AND age(a.backend_xid) > age(horizon32)) h;
            RAISE EXCEPTION 'pg_shard_id: the swap of % waited % s for snapshots older than it: %', tbl, limit_s, left_
                USING ERRCODE = '55P03',
                      DETAIL = coalesce('These transactions hold a transaction id older than the swap, and with it every newer snapshot''s xmin: ' || holders,
                                        'No prepared transaction or writer holds them back: those sessions hold the snapshots themselves')
                               || CASE WHEN only_standbys THEN ' (a standby reports its oldest query''s xmin every wal_receiver_status_interval: a long query there, or a standby that lags or delays its replay)' ELSE '' END || '.',
                      HINT = format('A snapshot taken before the batches would read the key as NULL after the swap. End those transactions (an idle one: its application commits; a prepared one: COMMIT PREPARED or ROLLBACK PREPARED; a standby query: hot_standby_feedback), then CALL shard_id_convert_finish(%L) again: nothing of this step was done.', tbl::text);
        END IF;
        PERFORM pg_sleep(0.05);
    END LOOP;
END $$;

CREATE FUNCTION _pg_shard_id.swap(tbl regclass, caller_path text) RETURNS void
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp SET lock_timeout = '10s' AS $$
DECLARE
    plan _pg_shard_id.conversion_step[];
    step _pg_shard_id.conversion_step;
BEGIN
    step := (SELECT i FROM _pg_shard_id.conversion_inventory(tbl) i WHERE i.phase = 'swap' AND i.action = 'lock');
    PERFORM _pg_shard_id.lock_tables(step.statement);
    -- (again under the locks: a rename or a foreign key committed while the finish waited got
    -- past its first check: the fourteenth review)
    PERFORM _pg_shard_id.refuse_changed(tbl);
    plan := ARRAY(SELECT i FROM _pg_shard_id.conversion_inventory(tbl) i);
    -- (what the batches would fire, and publications, mattered before the batches: not now)
    PERFORM _pg_shard_id.refuse(tbl, _pg_shard_id.refusals_after_the_batches(plan));
    IF EXISTS (SELECT FROM unnest(plan) p WHERE p.phase IN ('indexes', 'finish') AND NOT p.done) THEN
        RAISE EXCEPTION 'pg_shard_id: % is not ready to swap: these steps have not run', tbl
            USING ERRCODE = '55000',
                  DETAIL = (SELECT string_agg(p.statement, E'\n' ORDER BY p.ord) FROM unnest(plan) p WHERE p.phase IN ('indexes', 'finish') AND NOT p.done),
                  HINT = format('An index made since the prepare needs its twin: SELECT * FROM shard_id_convert_indexes(%L) \gexec, then CALL shard_id_convert_finish(%L) again.',
                                tbl::text, tbl::text);
    END IF;
    -- referencing rows written since the last sweep whose referenced row was not known to their
    -- writer (-1), or was deleted and inserted again: under the locks, through the new columns'
    -- indexes, so that no reference is left behind by the swap (issue 55)
    PERFORM _pg_shard_id.sweep(tbl, caller_path, true);
    FOREACH step IN ARRAY plan LOOP
        IF step.phase = 'swap' AND step.statement IS NOT NULL THEN
            EXECUTE step.statement;
        END IF;
    END LOOP;
END $$;

CREATE PROCEDURE shard_id_convert_finish(tbl regclass)
LANGUAGE plpgsql AS $$
-- (no SET clause: a procedure with one cannot COMMIT; see shard_id_convert)
BEGIN
    -- Every step READ COMMITTED: the swap waits, then locks, then reads the catalog and the rows
    -- again, and each statement must see what committed until then. Under REPEATABLE READ (a
    -- default_transaction_isolation of the role or database) they read the snapshot taken before
    -- the wait: an index of the whole row or a foreign key made meanwhile got past the checks
    -- under the locks (the fifteenth review). A caller's transaction of another level ends first.
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
        COMMIT;
    END IF;
    LOOP
        SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
        EXIT WHEN NOT _pg_shard_id.finish_step(tbl, pg_catalog.current_setting('search_path'));
        COMMIT;
    END LOOP;
END $$;

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
COMMENT ON FUNCTION _pg_shard_id.equality_of_pg_catalog(regclass, name) IS 'Whether a table''s key compares with PostgreSQL''s own equality (its primary key''s btree family''s operator in pg_catalog), as the conversion''s triggers and sweeps compare keys.';
COMMENT ON FUNCTION _pg_shard_id.index_refusal(oid, regclass, name, smallint, text) IS 'Why an index on a moved column cannot follow it (kind: reason), or NULL: nulls not distinct, an index for another type than bigint, an expression or predicate that fails for new ids.';
COMMENT ON FUNCTION _pg_shard_id.expression_moved_bytes(pg_node_tree, regclass, smallint[], smallint[]) IS 'expression_moved''s C part: the expressions printed, as the bytes of the text in the database''s encoding.';
COMMENT ON FUNCTION _pg_shard_id.renamed_columns(regclass) IS 'The columns a prepared conversion names (in its state and its triggers'' arguments) that no longer exist under that name: renamed or dropped after the prepare.';
COMMENT ON FUNCTION _pg_shard_id.trigger_arguments(bytea, smallint) IS 'A trigger''s arguments (pg_trigger.tgargs) as text in the database''s encoding; one that is not valid text there is NULL.';
COMMENT ON FUNCTION _pg_shard_id.refuse_changed(regclass) IS 'Raises 55000 naming each column a conversion names that was renamed or dropped after its prepare, each foreign key to its key added after it, and each of its triggers renamed, dropped or not ENABLE ALWAYS; every step calls it before it changes anything.';
COMMENT ON FUNCTION _pg_shard_id.sweep(regclass, text, boolean) IS 'The sweeps of a conversion: rows still without a new id, referencing rows whose referenced row was not known, and those of a row deleted and inserted again; then the record of deleted rows loses what they saw.';
COMMENT ON FUNCTION _pg_shard_id.repair_references(regclass, text) IS 'Before the swap: every referencing row whose new reference disagrees with the new id of the row its old one names (written while a trigger of the conversion was off) gets that id; one scan of each referencing table. Returns how many.';
COMMENT ON FUNCTION _pg_shard_id.lock_tables(text) IS 'The swap''s locks, taken without holding one while waiting long for another: attempts of at most 200 ms a lock, for 10 s in all.';
COMMENT ON FUNCTION _pg_shard_id.refusals_after_the_batches(_pg_shard_id.conversion_step[]) IS 'The refusals of a conversion''s plan that still stop it after its batches (the finish''s and the swap''s): all but the batches'' triggers and publications.';
COMMENT ON FUNCTION _pg_shard_id.orphaned_references(regclass) IS 'The statements that drop what a conversion''s prepare made on a table whose foreign key to the key was dropped since (its triggers, then its new column).';
COMMENT ON PROCEDURE shard_id_convert_abandon(regclass) IS 'Abandons a conversion before its swap: drops its triggers and new columns (with their twin indexes and CHECKs) and its progress row; the table is as it was before the prepare.';
COMMENT ON FUNCTION _pg_shard_id.rows_per_block(regclass) IS 'Rows per heap block, counted in the first 8 blocks: the batch size of a table never analyzed.';
COMMENT ON FUNCTION _pg_shard_id.conversion_note_deleted() IS 'The AFTER DELETE and UPDATE OF the key triggers of a table being converted: record the new ids of rows deleted or given another key, so that rows referencing one inserted again with its old key follow it (SECURITY DEFINER; reads only the new id, by field selection; records only for a trigger on the table being converted).';
