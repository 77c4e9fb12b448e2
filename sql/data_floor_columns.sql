-- The columns a sequence's ids may be stored in, for the data floor (src/data_floor/columns.rs)
-- and shard_id_check(). Not part of the extension's install script: src/data_floor/columns.rs
-- runs it with include_str!, under search_path = pg_catalog, pg_temp (set for this query alone,
-- as a function's SET clause does: no role's objects can stand in for the catalog's) and the
-- planner settings that keep it on the catalogs' indexes (columns.rs: QUERY_SETTINGS), with the
-- latest snapshot (a REPEATABLE READ transaction still sees a DEFAULT or a partition added after
-- it began), and it takes no lock (a first id never waits; pg_get_expr would lock each table).
-- Patterns are dollar-quoted: standard_conforming_strings = off would read their backslashes as
-- escapes (the pg_test that runs shard_id_check() with it off catches that).
--
-- $1: the sequence (NULL: every sequence). $2 (with $1): also the defaults that name no sequence
-- (the sequence is chosen from text at run time, so the column counts for every sequence); false
-- when the caller knows the database has none (src/catalog_watch.rs keeps that
-- answer per database until a catalog change). With $1 and not $2 the cost does not grow with
-- the database (issue 51): the defaults naming $1 are what pg_depend records against it, read
-- through its index, and so are a domain's columns; nothing scans a catalog.
-- One row per column of a leaf relation (or one row of NULLs when none counts):
--   relid, seq (NULL: the DEFAULT names no sequence), name, cannot_tell (NULL, or why no index
--   can say what the column holds), index, descending, shard (NULL: not read from the DEFAULT, or
--   $1 given), node_form (NULL with $1), owner_may_draw (false: the data floor does not read the
--   column, see below), range_parent (the partitioned table whose RANGE partitions on this very
--   column bound what the leaf holds, its bound read by src/data_floor/bounds.rs; NULL: none),
--   defaults_name_none (some default names no sequence; known only when every default was read).
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
ours AS (  -- both forms of next_shard_id, this extension's members (found by name first)
    SELECT p.oid
      FROM pg_proc p
     WHERE p.proname = 'next_shard_id'
       AND EXISTS (SELECT FROM pg_depend e
                    WHERE e.classid = 'pg_proc'::regclass AND e.objid = p.oid
                      AND e.refclassid = 'pg_extension'::regclass AND e.deptype = 'e'
                      AND e.refobjid = (SELECT x.oid FROM pg_extension x
                                         WHERE x.extname = 'pg_shard_id'))
),
naming AS (  -- the defaults (a column's, a domain's) that name sequence $1: what pg_depend
             -- records against the sequence itself, found through its index
    SELECT d.classid, d.objid
      FROM pg_depend d
     WHERE d.refclassid = 'pg_class'::regclass AND d.refobjid = $1
       AND d.classid IN ('pg_attrdef'::regclass, 'pg_type'::regclass)
),
candidates AS (  -- the functions that may be the user's own calling next_shard_id: every one
                 -- where every default is read ($1 NULL, or $2), else those the defaults naming
                 -- $1 call
    SELECT p.oid FROM pg_proc p WHERE $2
    UNION
    SELECT d.refobjid
      FROM naming n JOIN pg_depend d ON d.classid = n.classid AND d.objid = n.objid
     WHERE d.refclassid = 'pg_proc'::regclass
),
theirs AS (  -- the user's functions that call one, one level deep: a SQL-standard body (BEGIN
            -- ATOMIC, RETURN) records the dependency; any other body is text that names it
    -- (OFFSET 0: checked per function through pg_depend's index, never as one hashed list of
    -- everything that depends on next_shard_id, whose size grows with the database)
    SELECT p.oid
      FROM candidates c JOIN pg_proc p ON p.oid = c.oid
     WHERE EXISTS (SELECT FROM pg_depend d
                    WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                      AND d.refclassid = 'pg_proc'::regclass AND d.refobjid IN (SELECT oid FROM ours)
                   OFFSET 0)
        OR (p.prolang NOT IN (SELECT l.oid FROM pg_language l WHERE l.lanname IN ('c', 'internal'))
            AND p.prosrc ~* 'next_shard_id'
            AND NOT EXISTS (SELECT FROM pg_depend e  -- an extension's own (shard_id_adopt, ...)
                             WHERE e.classid = 'pg_proc'::regclass AND e.objid = p.oid
                               AND e.deptype = 'e'))
),
calls AS (  -- the defaults whose expression calls one: a column's (pg_attrdef), a domain's
            -- (pg_type); every such default ($1 NULL, or $2: to find those that name no
            -- sequence), else those that name $1
    SELECT DISTINCT d.classid, d.objid
      FROM pg_depend d
     WHERE $2 AND d.refclassid = 'pg_proc'::regclass
       AND d.refobjid IN (SELECT oid FROM ours UNION ALL SELECT oid FROM theirs)
       AND d.classid IN ('pg_attrdef'::regclass, 'pg_type'::regclass)
    UNION
    SELECT n.classid, n.objid
      FROM naming n
     WHERE EXISTS (SELECT FROM pg_depend d
                    WHERE d.classid = n.classid AND d.objid = n.objid
                      AND d.refclassid = 'pg_proc'::regclass
                      AND d.refobjid IN (SELECT oid FROM ours UNION ALL SELECT oid FROM theirs))
),
domains AS (  -- such a domain, and every domain over it that has no default of its own (a
              -- domain depends on its base type: found through pg_depend's index)
    SELECT t.oid, t.oid AS has_default
      FROM pg_type t
     WHERE t.oid IN (SELECT c.objid FROM calls c WHERE c.classid = 'pg_type'::regclass)
    UNION
    SELECT t.oid, d.has_default
      FROM domains d
      JOIN pg_depend x ON x.refclassid = 'pg_type'::regclass AND x.refobjid = d.oid
                      AND x.classid = 'pg_type'::regclass
      JOIN pg_type t ON t.oid = x.objid
     WHERE t.typtype = 'd' AND t.typbasetype = d.oid AND t.typdefaultbin IS NULL
),
defaults AS (  -- (table, column, the object that holds the expression, the expression)
    SELECT ad.adrelid AS relid, a.attname, 'pg_attrdef'::regclass AS classid, ad.oid AS objid,
           ad.adbin AS expr
      FROM pg_attrdef ad
      JOIN pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum
     WHERE ad.oid IN (SELECT c.objid FROM calls c WHERE c.classid = 'pg_attrdef'::regclass)
    UNION ALL
    -- a domain's default applies where the column has none of its own (a view's inserts take the
    -- base table's, which is counted there); a column depends on its type: pg_depend's index
    SELECT a.attrelid, a.attname, 'pg_type'::regclass, d.has_default, t.typdefaultbin
      FROM domains d
      JOIN pg_depend x ON x.refclassid = 'pg_type'::regclass AND x.refobjid = d.oid
                      AND x.classid = 'pg_class'::regclass AND x.objsubid > 0
      JOIN pg_attribute a ON a.attrelid = x.objid AND a.attnum = x.objsubid AND a.atttypid = d.oid
      JOIN pg_type t ON t.oid = d.has_default
      JOIN pg_class r ON r.oid = a.attrelid
     WHERE NOT a.attisdropped AND NOT a.atthasdef AND r.relkind IN ('r', 'p', 'f')
),
named AS (  -- with each sequence the expression names (none: the sequence comes from text), and
            -- what the expression says, read once per default (not per partition it reaches):
            -- whether it is the call itself (not a cast, a wrapper, shard_id_mask(...), a
            -- function of the user's own: their stored values may not be the ids as issued), the
            -- shard number of next_shard_id(seq, N), the sequence named or given as text (NULL
            -- for any other shape), and whether it is the node form, next_shard_id(seq); from
            -- the expression deparsed with no relation (pg_get_expr takes no lock then), for
            -- every sequence only ($1 NULL: shard_id_check() compares shard numbers; deparsing
            -- is 30 us a default, which thousands of partitions' copies of one DEFAULT add up)
    SELECT f.relid, f.attname, s.seq,
           coalesce(substring(f.expr::text FROM $re$^(?:\{COERCETODOMAIN :arg )?\{FUNCEXPR :funcid (\d+) $re$)::oid
                    IN (SELECT oid FROM ours), false) AS the_call,
           (regexp_match(e.deparsed, $re$next_shard_id\((?:'(?:[^']|'')*'|\('(?:[^']|'')*'::text\))::regclass, (\d{1,9})\)$re$))[1]::bigint AS shard,
           e.deparsed ~ $re$next_shard_id\((?:'(?:[^']|'')*'|\('(?:[^']|'')*'::text\))::regclass\)$re$ AS node_form
      FROM defaults f
      CROSS JOIN LATERAL (SELECT CASE WHEN $1 IS NULL THEN pg_get_expr(f.expr, 0) END AS deparsed) e
      LEFT JOIN LATERAL (
          SELECT d.refobjid AS seq
            FROM pg_depend d JOIN pg_class c ON c.oid = d.refobjid
           WHERE d.classid = f.classid AND d.objid = f.objid
             AND d.refclassid = 'pg_class'::regclass AND c.relkind = 'S') s ON true
     WHERE $1 IS NULL OR s.seq = $1 OR s.seq IS NULL
),
tree AS (  -- every partition and inheritance child below each table, found through pg_inherits
           -- (pg_partition_tree would lock each partition)
    SELECT n.relid AS root, n.relid, n.attname, n.seq, n.the_call, n.shard, n.node_form FROM named n
    UNION
    SELECT t.root, i.inhrelid, t.attname, t.seq, t.the_call, t.shard, t.node_form
      FROM tree t JOIN pg_inherits i ON i.inhparent = t.relid
),
-- DISTINCT: a partition made with PARTITION OF is reached twice, through its parent and through
-- its own copy of the DEFAULT; it is read once. Each relation is looked up through its index, row
-- by row (OFFSET 0 keeps the lookups apart): with thousands of partitions a generic plan's guess
-- of the tree's size joined pg_class by a scan, whose cost grows with the database (issue 51).
found AS (
SELECT DISTINCT l.relid, l.seq,
       format('%s.%I', l.relid::regclass, a.attname) AS name,
       CASE
           WHEN NOT l.the_call THEN 'expression'
           WHEN NOT base.bigint THEN 'type'
           -- its buffers are another session's
           WHEN c.relpersistence = 't' AND c.relnamespace <> pg_my_temp_schema() THEN 'temporary'
           -- a view, a foreign table, a materialized view, a table of another access method
           WHEN c.relkind <> 'r' OR c.relam <> (SELECT m.oid FROM pg_am m WHERE m.amname = 'heap')
               THEN 'relation'
       END AS cannot_tell,
       i.indexrelid,
       coalesce(i.indoption[0] & 1 = 1, false) AS descending,
       l.shard,
       l.node_form,
       -- whether the table's owner may draw from the sequence: a role that may not cannot move
       -- its floor with a table of its own (the column is not read; shard_id_check() names it)
       coalesce(l.seq, $1) IS NULL
           OR has_sequence_privilege(root.relowner, coalesce(l.seq, $1), 'USAGE, UPDATE')
              IS NOT FALSE AS owner_may_draw,
       -- the parent that partitions it BY RANGE on this column alone, in bigint's own order: the
       -- leaf's upper bound then bounds its ids, and the data floor reads the leaves of the
       -- highest bounds first, stopping where the rest cannot hold a newer id (issue 57)
       -- (the leaf's parent first, through pg_inherits' index on the child: OFFSET 0 keeps the
       -- planner from starting at the partitioned table and reading its every child per leaf)
       CASE WHEN c.relispartition THEN
           (SELECT i.inhparent
              FROM (SELECT h.inhparent FROM pg_inherits h WHERE h.inhrelid = l.relid OFFSET 0) i
              JOIN pg_partitioned_table pt ON pt.partrelid = i.inhparent
              JOIN pg_attribute pa ON pa.attrelid = i.inhparent AND pa.attnum = pt.partattrs[0]
             WHERE pt.partstrat = 'r' AND pt.partnatts = 1
               AND pa.attname = l.attname
               AND pt.partclass[0] = (SELECT o.oid FROM pg_opclass o JOIN pg_am am ON am.oid = o.opcmethod
                                       WHERE am.amname = 'btree' AND o.opcdefault
                                         AND o.opcintype = 'int8'::regtype))
       END AS range_parent
  FROM tree l
  CROSS JOIN LATERAL (SELECT c.relkind, c.relpersistence, c.relnamespace, c.relam, c.relispartition
                        FROM pg_class c WHERE c.oid = l.relid OFFSET 0) c
  CROSS JOIN LATERAL (SELECT r.relowner FROM pg_class r WHERE r.oid = l.root OFFSET 0) root
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
       WHERE x.indrelid = l.relid AND x.indkey[0] = a.attnum AND x.indisvalid AND x.indisready
         AND x.indpred IS NULL
         AND ic.relam = (SELECT am.oid FROM pg_am am WHERE am.amname = 'btree')
         AND x.indclass[0] = (SELECT o.oid FROM pg_opclass o JOIN pg_am am ON am.oid = o.opcmethod
                               WHERE am.amname = 'btree' AND o.opcdefault
                                 AND o.opcintype = 'int8'::regtype)
       ORDER BY x.indisunique DESC, x.indexrelid
       LIMIT 1) i ON true
 WHERE c.relkind <> 'p'
)
-- every row, with whether any default calls one and names no sequence (meaningful where every
-- default was read: $1 NULL, or $2); one row of NULLs and that answer when no column counts
SELECT f.*, every.defaults_name_none
  FROM (SELECT EXISTS (SELECT FROM named WHERE seq IS NULL) AS defaults_name_none) every
  LEFT JOIN found f ON true
 ORDER BY f.name, f.seq
