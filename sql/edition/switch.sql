-- pg_shard_id, SQL edition: moving a database to the native extension without a repeat
-- (docs/managed.md#to-native). The native extension's first id of a sequence is above every id
-- stored in the tables whose DEFAULT draws from it (its data floor), but an id this edition handed
-- out and nobody stored (a transaction rolled back, or still open) is in no table. This edition
-- knows how far its ids may have gone: a value's millisecond is its block plus the offset, and no
-- value was drawn past the sequence's last value, so every id it issued for a sequence is at or
-- below its high water: (last value >> 10) + the offset. The switch waits until the clock is past
-- it before the native DEFAULT takes over; the native ids then start at the clock's millisecond,
-- above.

-- The highest millisecond any id of seq may have had (NULL without a guard), as a time.
--
-- shard_id_high_water(seq regclass) RETURNS timestamptz
--   SELECT shard_id_high_water('photos_id_seq');
CREATE FUNCTION @extschema@.shard_id_high_water(seq regclass) RETURNS timestamptz
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    reg_o regclass := @extschema@._shard_id_register(seq, 'o');
    o bigint;
    l bigint;
BEGIN
    IF reg_o IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format('SELECT last_value FROM %s', reg_o) INTO o;
    l := @extschema@._shard_id_last_value(seq);  -- (the jump's reading: any value any session holds)
    RETURN timestamptz 'epoch' + ((@extschema@._shard_id_epoch_ms() + (l >> 10) + o) * 1000) * interval '1 microsecond';
END $$;
-- (the edition's owner's: it tells how far a sequence has gone, which a role without privileges on
-- it may not learn; shard_id_switch_to_native is run by the owner too)
REVOKE ALL ON FUNCTION @extschema@.shard_id_high_water(regclass) FROM PUBLIC;

-- Points every DEFAULT of the database that calls this edition's next_shard_id at the native
-- extension's, installed in native_schema (CREATE EXTENSION pg_shard_id SCHEMA ...; the library
-- preloaded). One transaction: each table is locked (ACCESS EXCLUSIVE: its inserts wait, a few ms
-- each), the clock is awaited past its sequence's high water (at once unless this edition's ids
-- ran ahead of the clock: a burst past 1,024 ids per ms, or a clock stepped back; more than 10 s
-- ahead is refused), then its DEFAULT is changed. Returns one row per DEFAULT changed.
--
-- shard_id_switch_to_native(native_schema regnamespace)
--     RETURNS TABLE (tbl regclass, col name, new_default text)
--   SELECT * FROM shard_id_switch_to_native('shard_ids');
-- Errors: 55000 the native extension is not in native_schema, or the ids run more than 10 s ahead
-- of the clock; 42501 the caller does not own a table (as ALTER TABLE).
CREATE FUNCTION @extschema@.shard_id_switch_to_native(native_schema regnamespace)
RETURNS TABLE (tbl regclass, col name, new_default text)
LANGUAGE plpgsql VOLATILE STRICT SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    d record;
    ours oid[] := ARRAY['@extschema@.next_shard_id(regclass, integer)'::regprocedure,
                        '@extschema@.next_shard_id(regclass)'::regprocedure]::oid[];
    high timestamptz;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_extension e WHERE e.extname = 'pg_shard_id' AND e.extnamespace = native_schema) THEN
        RAISE EXCEPTION 'pg_shard_id: the native extension is not in schema %', native_schema
            USING ERRCODE = '55000', HINT = format('CREATE EXTENSION pg_shard_id SCHEMA %s, with pg_shard_id in shared_preload_libraries.', native_schema);
    END IF;
    FOR d IN SELECT a.adrelid::regclass AS rel, att.attname, pg_get_expr(a.adbin, a.adrelid) AS expr,
                    (SELECT dp.refobjid::regclass FROM pg_depend dp JOIN pg_class s ON s.oid = dp.refobjid AND s.relkind = 'S'
                      WHERE dp.classid = 'pg_attrdef'::regclass AND dp.objid = a.oid AND dp.refclassid = 'pg_class'::regclass LIMIT 1) AS seq
               FROM pg_attrdef a JOIN pg_attribute att ON att.attrelid = a.adrelid AND att.attnum = a.adnum
              WHERE EXISTS (SELECT FROM pg_depend dp WHERE dp.classid = 'pg_attrdef'::regclass AND dp.objid = a.oid
                               AND dp.refclassid = 'pg_proc'::regclass AND dp.refobjid = ANY (ours))
              ORDER BY a.adrelid, a.adnum LOOP
        EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', d.rel);
        high := @extschema@.shard_id_high_water(d.seq);
        IF high > clock_timestamp() + interval '10 s' THEN
            RAISE EXCEPTION 'pg_shard_id: the ids of % run % ahead of the clock', d.seq, high - clock_timestamp()
                USING ERRCODE = '55000', HINT = format('Switch after %s, when the clock has passed them.', high);
        END IF;
        WHILE clock_timestamp() <= high + interval '1 ms' LOOP
            PERFORM pg_sleep(0.001);
        END LOOP;
        tbl := d.rel;
        col := d.attname;
        -- (the expression as printed with a pinned search_path: every name schema-qualified, the
        -- schema as @extschema@ was written into this script)
        new_default := replace(d.expr, '@extschema@.next_shard_id(', native_schema::text || '.next_shard_id(');
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET DEFAULT %s', d.rel, d.attname, new_default);
        RETURN NEXT;
    END LOOP;
END $$;
