-- The columns a sequence's ids may be stored in, for the data floor (src/data_floor/columns.rs)
-- and shard_id_check(). Not part of the extension's install script: src/data_floor/columns.rs
-- runs it with include_str!, under search_path = pg_catalog, pg_temp (set for this query alone,
-- as a function's SET clause does: no role's objects can stand in for the catalog's), with the
-- latest snapshot (a REPEATABLE READ transaction still sees a DEFAULT or a partition added after
-- it began), and it takes no lock (a first id never waits; pg_get_expr would lock each table).
-- Patterns are dollar-quoted: standard_conforming_strings = off would read their backslashes as
-- escapes (the pg_test that runs shard_id_check() with it off catches that).
--
-- $1: the sequence (NULL: every sequence). One row per column of a leaf relation:
--   relid, seq (NULL: the DEFAULT names no sequence, it is chosen from text at run time, so the
--   column counts for every sequence), name, cannot_tell (NULL, or why no index can say what the
--   column holds), index, descending, shard (NULL: not read from the DEFAULT), node_form,
--   owner_may_draw (false: the data floor does not read the column, see below).
--
-- A column counts when its default, the column's own DEFAULT or else the nearest DEFAULT of its
-- domain chain, depends on one of this extension's next_shard_id functions (the dependency that
-- DROP FUNCTION sees, whatever the expression's shape). The data floor reads it only when the
-- table's owner may draw from the sequence (USAGE or UPDATE on it): a role that may not draw from
-- a sequence cannot move its floor with a table of its own; shard_id_check() names such columns
-- when they hold rows, since new ids can repeat those rows. A DEFAULT that calls a function of
-- the user's own that calls next_shard_id counts too (one level deep: its SQL-standard body's
-- dependency, or its body's text), as "cannot tell" for every sequence. What no catalog shows: deeper nesting through
-- functions with string bodies, and ids stored by explicit calls (README, guarantee 9).
WITH RECURSIVE
ours AS (  -- both forms of next_shard_id, this extension's members
    SELECT e.objid AS oid
      FROM pg_depend e JOIN pg_proc p ON p.oid = e.objid
     WHERE e.classid = 'pg_proc'::regclass AND e.refclassid = 'pg_extension'::regclass
       AND e.deptype = 'e' AND p.proname = 'next_shard_id'
       AND e.refobjid = (SELECT x.oid FROM pg_extension x WHERE x.extname = 'pg_shard_id')
),
theirs AS (  -- the user's functions that call one, one level deep: a SQL-standard body (BEGIN
            -- ATOMIC, RETURN) records the dependency; any other body is text that names it
    SELECT d.objid AS oid
      FROM pg_depend d
     WHERE d.classid = 'pg_proc'::regclass AND d.refclassid = 'pg_proc'::regclass
       AND d.refobjid IN (SELECT oid FROM ours)
    UNION
    SELECT p.oid
      FROM pg_proc p
     WHERE p.prolang NOT IN (SELECT l.oid FROM pg_language l WHERE l.lanname IN ('c', 'internal'))
       AND p.prosrc ~* 'next_shard_id'
       AND NOT EXISTS (SELECT FROM pg_depend e  -- an extension's own (shard_id_adopt, ...)
                        WHERE e.classid = 'pg_proc'::regclass AND e.objid = p.oid AND e.deptype = 'e')
),
calls AS (  -- the defaults whose expression calls one: a column's (pg_attrdef), a domain's (pg_type)
    SELECT DISTINCT d.classid, d.objid
      FROM pg_depend d
     WHERE d.refclassid = 'pg_proc'::regclass
       AND d.refobjid IN (SELECT oid FROM ours UNION ALL SELECT oid FROM theirs)
       AND d.classid IN ('pg_attrdef'::regclass, 'pg_type'::regclass)
),
domains AS (  -- such a domain, and every domain over it that has no default of its own
    SELECT t.oid, t.oid AS has_default
      FROM pg_type t
     WHERE t.oid IN (SELECT c.objid FROM calls c WHERE c.classid = 'pg_type'::regclass)
    UNION
    SELECT t.oid, d.has_default
      FROM domains d JOIN pg_type t ON t.typbasetype = d.oid
     WHERE t.typtype = 'd' AND t.typdefaultbin IS NULL
),
defaults AS (  -- (table, column, the object that holds the expression, the expression)
    SELECT ad.adrelid AS relid, a.attname, 'pg_attrdef'::regclass AS classid, ad.oid AS objid,
           ad.adbin AS expr
      FROM pg_attrdef ad
      JOIN pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum
     WHERE ad.oid IN (SELECT c.objid FROM calls c WHERE c.classid = 'pg_attrdef'::regclass)
    UNION ALL
    -- a domain's default applies where the column has none of its own (a view's inserts take the
    -- base table's, which is counted there)
    SELECT a.attrelid, a.attname, 'pg_type'::regclass, d.has_default, t.typdefaultbin
      FROM domains d
      JOIN pg_attribute a ON a.atttypid = d.oid
      JOIN pg_type t ON t.oid = d.has_default
      JOIN pg_class r ON r.oid = a.attrelid
     WHERE a.attnum > 0 AND NOT a.attisdropped AND NOT a.atthasdef AND r.relkind IN ('r', 'p', 'f')
),
named AS (  -- with each sequence the expression names (none: the sequence comes from text), the
            -- stored tree as text, and deparsed (with no relation: pg_get_expr takes no lock then)
    SELECT f.relid, f.attname, f.expr::text AS expr, pg_get_expr(f.expr, 0) AS deparsed, s.seq
      FROM defaults f
      LEFT JOIN LATERAL (
          SELECT d.refobjid AS seq
            FROM pg_depend d JOIN pg_class c ON c.oid = d.refobjid
           WHERE d.classid = f.classid AND d.objid = f.objid
             AND d.refclassid = 'pg_class'::regclass AND c.relkind = 'S') s ON true
     WHERE $1 IS NULL OR s.seq = $1 OR s.seq IS NULL
),
tree AS (  -- every partition and inheritance child below each table, found through pg_inherits
           -- (pg_partition_tree would lock each partition)
    SELECT n.relid AS root, n.relid, n.attname, n.expr, n.deparsed, n.seq FROM named n
    UNION
    SELECT t.root, i.inhrelid, t.attname, t.expr, t.deparsed, t.seq
      FROM tree t JOIN pg_inherits i ON i.inhparent = t.relid
)
-- DISTINCT: a partition made with PARTITION OF is reached twice, through its parent and through
-- its own copy of the DEFAULT; it is read once
SELECT DISTINCT l.relid, l.seq,
       format('%s.%I', l.relid::regclass, a.attname) AS name,
       CASE
           -- a cast, a wrapper, shard_id_mask(...), a function of the user's own: the stored
           -- values may not be the ids as issued
           WHEN NOT coalesce(substring(l.expr FROM $re$^(?:\{COERCETODOMAIN :arg )?\{FUNCEXPR :funcid (\d+) $re$)::oid
                             IN (SELECT oid FROM ours), false) THEN 'expression'
           WHEN NOT base.bigint THEN 'type'
           -- its buffers are another session's
           WHEN c.relpersistence = 't' AND c.relnamespace <> pg_my_temp_schema() THEN 'temporary'
           -- a view, a foreign table, a materialized view, a table of another access method
           WHEN c.relkind <> 'r' OR c.relam <> (SELECT m.oid FROM pg_am m WHERE m.amname = 'heap')
               THEN 'relation'
       END AS cannot_tell,
       i.indexrelid,
       coalesce(i.indoption[0] & 1 = 1, false) AS descending,
       -- the shard number of next_shard_id(seq, N), the sequence named or given as text (NULL
       -- for any other shape), and whether it is the node form, next_shard_id(seq)
       (regexp_match(l.deparsed, $re$next_shard_id\((?:'(?:[^']|'')*'|\('(?:[^']|'')*'::text\))::regclass, (\d{1,9})\)$re$))[1]::bigint AS shard,
       l.deparsed ~ $re$next_shard_id\((?:'(?:[^']|'')*'|\('(?:[^']|'')*'::text\))::regclass\)$re$ AS node_form,
       -- whether the table's owner may draw from the sequence: a role that may not cannot move
       -- its floor with a table of its own (the column is not read; shard_id_check() names it)
       coalesce(l.seq, $1) IS NULL
           OR has_sequence_privilege(root.relowner, coalesce(l.seq, $1), 'USAGE, UPDATE')
              IS NOT FALSE AS owner_may_draw
  FROM tree l
  JOIN pg_class c ON c.oid = l.relid AND c.relkind <> 'p'
  JOIN pg_class root ON root.oid = l.root
  JOIN pg_attribute a ON a.attrelid = l.relid AND a.attname = l.attname AND NOT a.attisdropped
  CROSS JOIN LATERAL (  -- bigint, or a domain (at any depth) over it
      WITH RECURSIVE chain AS (
          SELECT a.atttypid AS typ
          UNION
          SELECT t.typbasetype FROM chain ch JOIN pg_type t ON t.oid = ch.typ WHERE t.typtype = 'd')
      SELECT 'int8'::regtype IN (SELECT typ FROM chain) AS bigint) base
  LEFT JOIN LATERAL (  -- the best index whose first column it is: a valid, non-partial btree in
                       -- bigint's own order (a reversed operator class would give the other end)
      SELECT x.indexrelid, x.indoption
        FROM pg_index x
        JOIN pg_class ic ON ic.oid = x.indexrelid
        JOIN pg_am am ON am.oid = ic.relam
       WHERE x.indrelid = l.relid AND x.indkey[0] = a.attnum AND x.indisvalid AND x.indisready
         AND x.indpred IS NULL AND am.amname = 'btree'
         AND x.indclass[0] = (SELECT o.oid FROM pg_opclass o
                               WHERE o.opcmethod = am.oid AND o.opcdefault
                                 AND o.opcintype = 'int8'::regtype)
       ORDER BY x.indisunique DESC, x.indexrelid
       LIMIT 1) i ON true
 ORDER BY name, seq
