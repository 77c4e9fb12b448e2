-- shard_id_adopt(tbl regclass, col name, shard integer) RETURNS text
--
-- Turns a serial, bigserial, GENERATED ... AS IDENTITY or plain DEFAULT nextval(...) column into
-- DEFAULT next_shard_id(<its sequence>, shard), in the caller's transaction, and returns the new
-- default expression:
--
--   SELECT shard_id_adopt('orders', 'id', 5);
--   -- public.next_shard_id('public.orders_id_seq'::regclass, 5)
--
-- Decisions (README, "Adopting an existing table"):
-- * Existing ids stay. The table is locked (ACCESS EXCLUSIVE) before anything is read, and the
--   call refuses (55000) when the table already holds an id at or above the first id the new
--   default can make, shard_id_compose(now, shard, 0); so every new id is above every old one.
-- * An integer or smallint column, or a foreign key column referencing it that is not bigint, is
--   refused (42804) with the ALTER statements to run first. Widening rewrites the table and every
--   referencing table under an ACCESS EXCLUSIVE lock: minutes to hours for big tables, a step the
--   owner schedules, not a side effect of this call.
-- * A smallint or integer sequence becomes AS bigint (no rewrite; only its limits change), so it
--   does not run out after 2^31 ids. A limit set by hand (MAXVALUE, or MINVALUE descending)
--   without CYCLE is refused (22023): the ids would stop there, though only nextval mod 1024 goes
--   into them. An increment that is a multiple of 1024 is refused (22023): every id would get the
--   same low bits, one id per millisecond.
-- * Identity: DROP IDENTITY would drop the identity's sequence, so the sequence is recreated with
--   the same name, settings and position, AS bigint, owned by the column (pg_dump/pg_restore
--   round-trip it). Roles that could INSERT into the column without sequence privileges (an
--   identity needs none) get USAGE on it, so they still can. GENERATED ALWAYS becomes a plain
--   DEFAULT: explicit ids are accepted afterwards.
--
-- Errors: 22004 for a NULL argument; 22003 for a shard outside 0..8191; 42501 unless the caller
-- owns the table; 42809 for anything but an ordinary table; 42703 for a missing column; 55000
-- for a column with no nextval or identity default (also one already adopted) or a table holding
-- ids too large; 42804 for non-bigint columns (the hint lists them); 22023 for a sequence with a
-- limit of its own and no CYCLE, or an increment that is a multiple of 1024.
--
-- PL/pgSQL with search_path pinned to pg_catalog: the extension's own functions are reached
-- through its schema read from pg_extension, so a renamed extension schema still works.
CREATE FUNCTION shard_id_adopt(tbl regclass, col name, shard integer) RETURNS text
    LANGUAGE plpgsql VOLATILE PARALLEL UNSAFE
    SET search_path = pg_catalog, pg_temp
AS $adopt$
DECLARE
    ext text;               -- the extension's schema, quoted
    owner oid;
    att record;             -- the column
    seq regclass;           -- its sequence
    seq_row record;         -- the sequence's settings (pg_sequence)
    type_max bigint;        -- the largest value of the sequence's type
    seq_schema text;
    seq_name text;
    seq_state record;       -- last_value, is_called
    default_text text;
    narrow_columns text[];  -- the columns that are not bigint
    narrow text[];          -- and the ALTER statements that widen them
    max_id bigint;
    first_new bigint;
    grantee text;
    result text;
BEGIN
    IF tbl IS NULL OR col IS NULL OR shard IS NULL THEN
        RAISE EXCEPTION 'shard_id_adopt needs a table, a column and a shard, not NULL'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT quote_ident(n.nspname) INTO ext
      FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
     WHERE e.extname = 'pg_shard_id';
    -- The shard is checked by the extension itself (22003 with its own message).
    EXECUTE format('SELECT %s.shard_id_compose(clock_timestamp(), $1, 0)', ext) USING shard;

    SELECT c.relowner INTO owner FROM pg_class c WHERE c.oid = tbl AND c.relkind = 'r';
    IF NOT FOUND THEN
        RAISE EXCEPTION '"%" is not an ordinary table', tbl
            USING ERRCODE = 'wrong_object_type',
                  HINT = 'shard_id_adopt converts a column of an ordinary table; for a partitioned '
                         'table set the DEFAULT on the parent with ALTER TABLE ... SET DEFAULT.';
    END IF;
    IF NOT pg_has_role(current_user, owner, 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of table %', tbl USING ERRCODE = 'insufficient_privilege';
    END IF;
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', tbl);

    SELECT a.attnum, a.atttypid, a.attidentity INTO att
      FROM pg_attribute a
     WHERE a.attrelid = tbl AND a.attname = col AND a.attnum > 0 AND NOT a.attisdropped;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'column "%" of relation "%" does not exist', col, tbl
            USING ERRCODE = 'undefined_column';
    END IF;

    -- The column's sequence.
    IF att.attidentity <> '' THEN
        seq := pg_get_serial_sequence(tbl::text, col)::regclass;
    ELSE
        SELECT pg_get_expr(d.adbin, d.adrelid),
               (SELECT dep.refobjid::regclass FROM pg_depend dep JOIN pg_class s ON s.oid = dep.refobjid
                 WHERE dep.classid = 'pg_attrdef'::regclass AND dep.objid = d.oid
                   AND dep.refclassid = 'pg_class'::regclass AND s.relkind = 'S' LIMIT 1)
          INTO default_text, seq
          FROM pg_attrdef d WHERE d.adrelid = tbl AND d.adnum = att.attnum;
        IF seq IS NULL OR default_text IS DISTINCT FROM format('nextval(%L::regclass)', seq::text) THEN
            RAISE EXCEPTION 'column "%" of "%" has no sequence default to adopt', col, tbl
                USING ERRCODE = 'object_not_in_prerequisite_state',
                      DETAIL = format('Its default is %s.', coalesce(default_text, 'not set')),
                      HINT = 'shard_id_adopt converts serial, bigserial, GENERATED ... AS IDENTITY '
                             'and DEFAULT nextval(...) columns.';
        END IF;
    END IF;

    -- The column and every foreign key column referencing it must be bigint.
    SELECT array_agg(format('%s.%I (%s)', r.rel, r.attname, format_type(r.typ, NULL))
                     ORDER BY r.self DESC, r.rel::text, r.attname),
           array_agg(format('ALTER TABLE %s ALTER COLUMN %I TYPE bigint;', r.rel, r.attname)
                     ORDER BY r.self DESC, r.rel::text, r.attname)
      INTO narrow_columns, narrow
      FROM (SELECT tbl AS rel, col AS attname, att.atttypid AS typ, true AS self
            UNION ALL
            SELECT c.conrelid::regclass, a.attname, a.atttypid, false
              FROM pg_constraint c
                   CROSS JOIN LATERAL unnest(c.confkey, c.conkey) AS k(referenced, referencing)
                   JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.referencing
             WHERE c.contype = 'f' AND c.confrelid = tbl AND k.referenced = att.attnum) AS r
     WHERE (SELECT coalesce(nullif(t.typbasetype, 0), t.oid) FROM pg_type t WHERE t.oid = r.typ)
           <> 'bigint'::regtype;
    IF narrow IS NOT NULL THEN
        RAISE EXCEPTION 'shard ids need bigint columns: %', array_to_string(narrow_columns, ', ')
            USING ERRCODE = 'datatype_mismatch',
                  DETAIL = format('Column "%s" of "%s" and every foreign key column referencing it '
                                  'must be bigint.', col, tbl),
                  HINT = format('Widening rewrites each table under an ACCESS EXCLUSIVE lock, so it '
                                'is left to you. Run %s then call shard_id_adopt again.',
                                array_to_string(narrow, ' '));
    END IF;

    SELECT * INTO seq_row FROM pg_sequence WHERE seqrelid = seq;
    type_max := CASE seq_row.seqtypid WHEN 'smallint'::regtype THEN 32767
                                      WHEN 'integer'::regtype THEN 2147483647
                                      ELSE 9223372036854775807 END;
    -- Only nextval mod 1024 goes into an id, so a limit of the sequence's own type is lifted with
    -- the type (AS bigint below); a limit set by hand would stop the ids when it is reached.
    IF NOT seq_row.seqcycle AND (seq_row.seqincrement > 0 AND seq_row.seqmax <> type_max
                                 OR seq_row.seqincrement < 0 AND seq_row.seqmin <> -type_max - 1) THEN
        RAISE EXCEPTION 'sequence % stops at %', seq,
                        CASE WHEN seq_row.seqincrement > 0 THEN seq_row.seqmax ELSE seq_row.seqmin END
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'next_shard_id would fail once the sequence reaches its limit; only nextval '
                           'mod 1024 goes into an id, so the limit no longer limits the ids.',
                  HINT = format('ALTER SEQUENCE %s %s; (or CYCLE)', seq,
                                CASE WHEN seq_row.seqincrement > 0 THEN 'NO MAXVALUE' ELSE 'NO MINVALUE' END);
    END IF;
    IF seq_row.seqincrement % 1024 = 0 THEN
        RAISE EXCEPTION 'sequence % increments by %, a multiple of 1024', seq, seq_row.seqincrement
            USING ERRCODE = 'invalid_parameter_value',
                  DETAIL = 'Every id would get the same 10 low bits: one id per millisecond.',
                  HINT = format('ALTER SEQUENCE %s INCREMENT BY 1;', seq);
    END IF;

    -- Every new id is above every id the table holds.
    EXECUTE format('SELECT max(%I) FROM %s', col, tbl) INTO max_id;
    EXECUTE format('SELECT %s.shard_id_compose(clock_timestamp(), $1, 0)', ext) INTO first_new USING shard;
    IF max_id >= first_new THEN
        RAISE EXCEPTION '"%" already holds ids up to %, at or above the first id next_shard_id would make now (%)',
                        tbl, max_id, first_new
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'New ids could fall below existing ones. Such ids come from next_shard_id or '
                         'were set by hand; a column that already holds shard ids needs no adopting.';
    END IF;

    IF att.attidentity <> '' THEN
        SELECT quote_ident(n.nspname), quote_ident(s.relname) INTO seq_schema, seq_name
          FROM pg_class s JOIN pg_namespace n ON n.oid = s.relnamespace WHERE s.oid = seq;
        EXECUTE format('SELECT last_value, is_called FROM %s', seq) INTO seq_state;
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I DROP IDENTITY', tbl, col);  -- drops seq
        EXECUTE format('CREATE SEQUENCE %s.%s AS bigint INCREMENT BY %s %s %s START WITH %s CACHE %s %s',
                       seq_schema, seq_name, seq_row.seqincrement,
                       -- a limit that was the default of its type becomes bigint's default
                       CASE WHEN seq_row.seqmin = CASE WHEN seq_row.seqincrement > 0 THEN 1 ELSE -type_max - 1 END
                            THEN 'NO MINVALUE' ELSE 'MINVALUE ' || seq_row.seqmin END,
                       CASE WHEN seq_row.seqmax = CASE WHEN seq_row.seqincrement > 0 THEN type_max ELSE -1 END
                            THEN 'NO MAXVALUE' ELSE 'MAXVALUE ' || seq_row.seqmax END,
                       seq_row.seqstart, seq_row.seqcache,
                       CASE WHEN seq_row.seqcycle THEN 'CYCLE' ELSE 'NO CYCLE' END);
        seq := format('%s.%s', seq_schema, seq_name)::regclass;
        PERFORM setval(seq, seq_state.last_value, seq_state.is_called);
        EXECUTE format('ALTER SEQUENCE %s OWNER TO %I', seq, pg_get_userbyid(owner));
        EXECUTE format('ALTER SEQUENCE %s OWNED BY %s.%I', seq, tbl, col);
        -- Who could insert into the column needed no privilege on the identity's sequence.
        FOR grantee IN
            SELECT DISTINCT CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(g.grantee)) END
              FROM (SELECT (aclexplode(c.relacl)).* FROM pg_class c WHERE c.oid = tbl
                    UNION ALL
                    SELECT (aclexplode(a.attacl)).* FROM pg_attribute a
                     WHERE a.attrelid = tbl AND a.attnum = att.attnum) AS g
             WHERE g.privilege_type = 'INSERT' AND g.grantee <> owner
        LOOP
            EXECUTE format('GRANT USAGE ON SEQUENCE %s TO %s', seq, grantee);
        END LOOP;
    ELSIF seq_row.seqtypid <> 'bigint'::regtype THEN
        EXECUTE format('ALTER SEQUENCE %s AS bigint', seq);
    END IF;

    EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT %s.next_shard_id(%L::regclass, %s)',
                   tbl, col, ext, seq::text, shard);
    SELECT pg_get_expr(d.adbin, d.adrelid) INTO result
      FROM pg_attrdef d WHERE d.adrelid = tbl AND d.adnum = att.attnum;
    RETURN result;
END;
$adopt$;
