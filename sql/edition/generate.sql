-- pg_shard_id, SQL edition: the generator and its guard, in PL/pgSQL (issue 56). No library: for
-- managed PostgreSQL (RDS, Aurora, Cloud SQL, AlloyDB, Azure, Supabase, Neon). docs/managed.md
-- says how to install it and what it guarantees; this file says why it holds.
--
-- The ids are the native extension's: ms << 23 | shard << 10 | (nextval(seq) mod 1024). What
-- differs is how the millisecond is chosen. The native guard remembers, in shared memory, which
-- remainders each millisecond has used. A SQL function has no shared memory; what it has that is
-- shared, crash-safe, replicated with the WAL and *not* undone by a rollback is a sequence. So
-- the millisecond is a function of the value drawn:
--
--     ms(n) = (n >> 10) + O        (n >> 10: the value's block of 1024; O: the guard's offset)
--
-- Two values with the same remainder lie in different blocks, so as long as O never decreases
-- and every value is used with the offset of its block's epoch, ms(n) + remainder is unique per
-- sequence: the id is `n + 1024 O` written in the layout, which grows with n. When the clock is
-- ahead of ms(n) (fewer than 1024 ids per ms: nearly always), a *jump* raises O so that the
-- value's block starts at the clock's millisecond. Each sequence's guard is two sequences of
-- ours, `<schema>.shard_id_guard_<oid>_o` (O) and `..._b` (B, the first block of O's epoch):
--
--   jump (its row of shard_id_guards locked, SECURITY DEFINER):
--     1. O's register is made "pending" (setval(.., false): pg_sequence_last_value gives NULL)
--     2. L := the sequence's last value (the highest value any session holds, cached or not)
--     3. B := L >> 10;  O := max(O, clock - B)          4. B written      5. O written, not pending
--   draw (next_shard_id, no lock):
--     a. n := nextval(seq)   b. o := O's register   c. b := B's register
--     d. use ms = (n >> 10) + o if o is not pending, n >> 10 >= b and the clock is not past it;
--        otherwise jump, then use n if its block is still current, or draw again
--
-- Why it holds: a draw that read epoch k's O (final) drew n before epoch k+1's step 1, so n <= L
-- of epoch k+1 and n's block <= B(k+1); it checked n's block >= B(k). So a value used with O(k)
-- lies in blocks B(k) .. B(k+1), and B never decreases (L does not): of two values in different
-- blocks, the later block's was used with the later epoch's offset, which is not smaller. Two
-- values of one block have different remainders. Nothing here is undone by a rollback, a crash
-- (setval and nextval are WAL-logged before they return) or a clock step back (O never
-- decreases: the ids then keep counting up from the highest millisecond until the clock catches
-- up). tests/sql_edition attacks it; fuzz.py --edition sql runs the lifecycle fuzzer against it.
--
-- Its limits (docs/managed.md#guarantee): the guard lives in the database, so it follows the
-- database (a physical standby, point-in-time recovery and pg_upgrade carry it), but a copy of
-- the rows into another database does not carry it (that database's own guard starts from its
-- clock: the native edition's data floor reads the copied rows, this one does not); a sequence
-- set back (setval) or one that cycles or descends is refused or stalls.

-- The guard's registers of seq (NULL when it has none).
CREATE FUNCTION @extschema@._shard_id_register(seq regclass, which text) RETURNS regclass
LANGUAGE sql STABLE STRICT PARALLEL SAFE
RETURN pg_catalog.to_regclass('@extschema@.shard_id_guard_' OPERATOR(pg_catalog.||) seq::oid::text
                              OPERATOR(pg_catalog.||) '_' OPERATOR(pg_catalog.||) which);

-- The guarded sequences: one row each, written by the edition's owner only. A jump locks its
-- sequence's row (FOR UPDATE needs UPDATE on this table, which no other role has: no role can hold
-- the jumps up; an advisory lock could be taken by anyone). `seq` is a regclass, which pg_dump
-- writes as the sequence's name: after a restore it names the restored sequence, whose oid has
-- changed, and `registers_of` the oid the registers are named by (shard_id_guard renames them).
CREATE TABLE @extschema@.shard_id_guards (
    seq regclass PRIMARY KEY,
    registers_of oid NOT NULL
);
REVOKE ALL ON @extschema@.shard_id_guards FROM PUBLIC;
-- (installed as an extension, by pg_tle or a control file: its rows are the user's, dumped by
-- pg_dump; the plain script's table is dumped anyway)
DO $config_dump$
BEGIN
    PERFORM pg_catalog.pg_extension_config_dump('@extschema@.shard_id_guards', '');
    PERFORM pg_catalog.pg_extension_config_dump('@extschema@.shard_id_settings', '');
EXCEPTION WHEN feature_not_supported THEN
    NULL;  -- (not run by CREATE EXTENSION)
END
$config_dump$;

-- The highest value seq has given to any session (cached or not): its last value, or the one
-- before when it was not drawn from since it was made or set. Called by the jump, as its owner.
CREATE FUNCTION @extschema@._shard_id_last_value(seq regclass) RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    l bigint := pg_sequence_last_value(seq);  -- (a function call; NULL when not drawn from)
    called boolean;
BEGIN
    IF l IS NULL THEN
        EXECUTE format('SELECT last_value, is_called FROM %s', seq) INTO l, called;
        IF NOT called THEN
            l := l - 1;  -- (its next value is last_value)
        END IF;
    END IF;
    RETURN l;
END $$;
REVOKE ALL ON FUNCTION @extschema@._shard_id_last_value(regclass) FROM PUBLIC;

-- A jump: see the top of this file. SECURITY DEFINER: only the edition's owner writes the
-- registers (a role that could set them could repeat ids). Anyone may call it: it only ever moves
-- the offset up to the clock's millisecond, which every draw may do.
-- (not STRICT: drawn is NULL when the caller has no value of its own, a jump asked for by hand)
CREATE FUNCTION @extschema@._shard_id_jump(seq regclass, drawn bigint DEFAULT NULL) RETURNS void
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    reg_o regclass := @extschema@._shard_id_register(seq, 'o');
    reg_b regclass := @extschema@._shard_id_register(seq, 'b');
    o bigint;
    l bigint;
    b bigint;
    now_ms bigint;
BEGIN
    -- The jump runs in a subtransaction that always ends rolled back (PSJ00 below, or any error:
    -- a cancel, a timeout): that lets go of the row lock at once, whatever happens, and undoes
    -- nothing the jump did (setval is not transactional). A jump cut short after step 1 leaves O
    -- pending: the next one completes it.
    BEGIN
        PERFORM FROM @extschema@.shard_id_guards g WHERE g.seq = _shard_id_jump.seq AND g.registers_of = _shard_id_jump.seq::oid FOR UPDATE;
        -- (no row: no guard, or a restored one not taken back yet, whose registers are named by
        -- the oid the sequence had in the dumped database: they may be another's now)
        IF NOT FOUND OR reg_o IS NULL OR reg_b IS NULL THEN
            RAISE EXCEPTION 'pg_shard_id: sequence % has no guard', seq
                USING ERRCODE = '55000',
                      HINT = format('Its owner runs SELECT @extschema@.shard_id_guard(%L) once, in a transaction of its own; after a restore, the edition''s owner runs SELECT @extschema@.shard_id_restored().', seq::text);
        END IF;
        -- (the registers read by pg_sequence_last_value, a function call: the statement that
        -- reads a relation's row costs a parse and a plan per jump; it gives NULL for a register
        -- left pending by a jump cut short, which the statement reads)
        -- a sequence set back (setval, ALTER SEQUENCE ... RESTART) below the blocks its guard
        -- has covered would give values again whose ids were made: refused until it passes them
        b := pg_sequence_last_value(reg_b);
        IF (@extschema@._shard_id_last_value(seq) >> 10) < b THEN
            RAISE EXCEPTION 'pg_shard_id: sequence % was set back below the values its guard has covered', seq
                USING ERRCODE = '55000', HINT = format('Move it past them: SELECT setval(%L, %s);', seq::text, b * 1024);
        END IF;
        o := pg_sequence_last_value(reg_o);
        -- the caller's value (drawn) fits the epoch another session's jump made while this one
        -- waited for the lock: nothing to do (two sessions that see the clock move would both jump)
        IF (drawn >> 10) >= b AND (drawn >> 10) + o >= @extschema@._shard_id_clock_ms() THEN
            RAISE SQLSTATE 'PSJ00';
        END IF;
        IF o IS NULL THEN
            EXECUTE format('SELECT last_value FROM %s', reg_o) INTO o;
        END IF;
        PERFORM setval(reg_o, o, false);                                    -- 1. pending
        l := @extschema@._shard_id_last_value(seq);                         -- 2.
        -- 3. (never below the last epoch's: see the refusal above)
        b := greatest(l >> 10, b);
        now_ms := @extschema@._shard_id_clock_ms();
        o := greatest(o, now_ms - b);
        PERFORM setval(reg_b, b, true);                                     -- 4.
        PERFORM setval(reg_o, o, true);                                     -- 5.
        RAISE SQLSTATE 'PSJ00';
    EXCEPTION WHEN SQLSTATE 'PSJ00' THEN
        NULL;  -- (done)
    END;
END $$;

-- Makes seq's guard: its two registers, readable by every role (a draw reads them), written by
-- the edition's owner only. Once per sequence, before its first id, in a transaction that commits
-- (next_shard_id refuses a sequence without one: a guard made by a transaction that then rolled
-- back would be gone, and with it what the ids it gave had used). The sequence must ascend and not
-- cycle. The edition's owner reads the sequence's last value (SELECT, granted here when the caller
-- may grant it).
--
-- shard_id_guard(seq regclass) RETURNS void
--   SELECT shard_id_guard('photos_id_seq');
-- Errors: 42809 not a sequence; 22023 a descending or cycling sequence; 42501 the edition's owner
-- may not read the sequence and the caller cannot grant it.
CREATE FUNCTION @extschema@.shard_id_guard(seq regclass) RETURNS void
LANGUAGE plpgsql VOLATILE STRICT SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    edition_owner regrole := (SELECT p.proowner::regrole FROM pg_proc p
                               WHERE p.oid = '@extschema@._shard_id_jump(regclass, bigint)'::regprocedure);
BEGIN
    IF NOT EXISTS (SELECT FROM pg_sequence WHERE seqrelid = seq) THEN
        RAISE EXCEPTION 'pg_shard_id: % is not a sequence', seq USING ERRCODE = '42809';
    END IF;
    IF NOT has_sequence_privilege(edition_owner, seq, 'SELECT') THEN
        IF NOT (has_sequence_privilege(seq, 'SELECT WITH GRANT OPTION')
                OR pg_has_role((SELECT relowner FROM pg_class WHERE oid = seq), 'USAGE')) THEN
            RAISE EXCEPTION 'pg_shard_id: % may not read sequence %, and you cannot grant it', edition_owner, seq
                USING ERRCODE = '42501', HINT = format('Its owner runs GRANT SELECT ON SEQUENCE %s TO %s, or SELECT shard_id_guard(%L).', seq, edition_owner, seq::text);
        END IF;
        EXECUTE format('GRANT SELECT ON SEQUENCE %s TO %s', seq, edition_owner);
    END IF;
    PERFORM @extschema@._shard_id_make_guard(seq);
END $$;

CREATE FUNCTION @extschema@._shard_id_make_guard(seq regclass) RETURNS void
LANGUAGE plpgsql VOLATILE STRICT SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    s pg_sequence;
    kept oid := (SELECT g.registers_of FROM @extschema@.shard_id_guards g WHERE g.seq = _shard_id_make_guard.seq);
BEGIN
    -- (here, run as the edition's owner, so that no caller can skip them)
    SELECT * INTO s FROM pg_sequence WHERE seqrelid = seq;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pg_shard_id: % is not a sequence', seq USING ERRCODE = '42809';
    END IF;
    IF s.seqincrement < 0 OR s.seqcycle OR (SELECT relpersistence FROM pg_class WHERE oid = seq) = 't' THEN
        RAISE EXCEPTION 'pg_shard_id: sequence % descends, cycles or is temporary', seq
            USING ERRCODE = '22023', HINT = 'The SQL edition guards ascending sequences that do not cycle and outlive a session: ALTER SEQUENCE ... INCREMENT BY 1 NO CYCLE.';
    END IF;
    IF kept = seq::oid THEN
        RETURN;  -- (made already)
    ELSIF kept IS NOT NULL OR EXISTS (SELECT FROM @extschema@.shard_id_guards g WHERE g.registers_of = _shard_id_make_guard.seq::oid) THEN
        -- restored by pg_dump into another database, its registers named by the oids of the
        -- dumped one, which other sequences may have now
        RAISE EXCEPTION 'pg_shard_id: the guards of this database were restored from another and are not taken back yet'
            USING ERRCODE = '55000', HINT = 'The edition''s owner runs SELECT @extschema@.shard_id_restored() first.';
    END IF;
    IF @extschema@._shard_id_register(seq, 'o') IS NOT NULL OR @extschema@._shard_id_register(seq, 'b') IS NOT NULL THEN
        -- registers named by this oid, of a sequence dropped since (no row names them)
        EXECUTE format('DROP SEQUENCE IF EXISTS @extschema@.%I, @extschema@.%I',
                       'shard_id_guard_' || seq::oid || '_o', 'shard_id_guard_' || seq::oid || '_b');
    END IF;
    EXECUTE format('CREATE SEQUENCE @extschema@.%I AS bigint MINVALUE -9223372036854775808 NO MAXVALUE CACHE 1', 'shard_id_guard_' || seq::oid || '_o');
    EXECUTE format('CREATE SEQUENCE @extschema@.%I AS bigint MINVALUE -9223372036854775808 NO MAXVALUE CACHE 1', 'shard_id_guard_' || seq::oid || '_b');
    EXECUTE format('GRANT SELECT ON SEQUENCE @extschema@.%I, @extschema@.%I TO PUBLIC',
                   'shard_id_guard_' || seq::oid || '_o', 'shard_id_guard_' || seq::oid || '_b');
    INSERT INTO @extschema@.shard_id_guards AS g (seq, registers_of) VALUES (_shard_id_make_guard.seq, _shard_id_make_guard.seq::oid);
    -- its first epoch: O at the smallest value, then a jump (the registers are new: no draw has
    -- read them)
    PERFORM setval(@extschema@._shard_id_register(seq, 'o'), -9223372036854775807 - 1, true);
    PERFORM setval(@extschema@._shard_id_register(seq, 'b'), -9223372036854775807 - 1, true);
    PERFORM @extschema@._shard_id_jump(seq);
END $$;

-- The next id of sequence seq in shard `shard`, guarded: the native function's signature, labels
-- and ids (layout, epoch), with the millisecond chosen as the top of this file says.
--
-- next_shard_id(seq regclass, shard integer) RETURNS bigint VOLATILE STRICT PARALLEL UNSAFE
--   CREATE TABLE photos (id bigint PRIMARY KEY DEFAULT next_shard_id('photos_id_seq', 5), ...);
-- Errors: 22003 shard outside 0..8191; 55000 a sequence without a guard (shard_id_guard); 22008
-- the clock before the epoch, or an id past the layout's 2^40 ms; nextval's own (42501 no USAGE
-- on the sequence, 42809 not a sequence, 2200H the sequence at its maximum).
CREATE FUNCTION @extschema@.next_shard_id(seq regclass, shard integer) RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE AS $$
-- (no SET search_path, which costs a quarter of the call: every function and operator is named
-- with its schema, so that none of the caller's can stand in for it)
DECLARE
    n bigint;
    o bigint;
    b bigint;
    now_ms bigint;
    ms bigint;
BEGIN
    IF shard OPERATOR(pg_catalog.<) 0 OR shard OPERATOR(pg_catalog.>) 8191 THEN
        PERFORM @extschema@._shard_id_raise('22003', pg_catalog.format('pg_shard_id: shard %s is outside 0..8191', shard), NULL);
    END IF;
    n := pg_catalog.nextval(seq);
    now_ms := @extschema@._shard_id_clock_ms();
    LOOP
        o := pg_catalog.pg_sequence_last_value(@extschema@._shard_id_register(seq, 'o'));
        b := pg_catalog.pg_sequence_last_value(@extschema@._shard_id_register(seq, 'b'));
        ms := (n OPERATOR(pg_catalog.>>) 10) OPERATOR(pg_catalog.+) o;
        -- (a pending O, or no guard: NULL, not taken)
        EXIT WHEN (n OPERATOR(pg_catalog.>>) 10) OPERATOR(pg_catalog.>=) b AND ms OPERATOR(pg_catalog.>=) now_ms;
        PERFORM @extschema@._shard_id_jump(seq, n);
        b := pg_catalog.pg_sequence_last_value(@extschema@._shard_id_register(seq, 'b'));
        -- (the clock read again: one that stepped back since the first reading would make the
        -- loop wait for it, a jump per turn: the sixth outside review)
        now_ms := LEAST(now_ms, @extschema@._shard_id_clock_ms());  -- (syntax, not a function: no search_path)
        -- values drawn before the jump, in older blocks (a CACHE filled before it): put aside,
        -- without a jump each (a sequence set back after the jump: the next jump refuses it)
        FOR i IN 1..1000000 LOOP
            EXIT WHEN (n OPERATOR(pg_catalog.>>) 10) OPERATOR(pg_catalog.>=) b;
            n := pg_catalog.nextval(seq);
        END LOOP;
    END LOOP;
    IF now_ms OPERATOR(pg_catalog.<) 0 OR ms OPERATOR(pg_catalog.>) 1099511627775 THEN
        PERFORM @extschema@._shard_id_raise('22008', CASE WHEN now_ms OPERATOR(pg_catalog.<) 0
                                                          THEN 'pg_shard_id: the clock is before the epoch'
                                                          ELSE 'pg_shard_id: the id would pass the layout''s horizon (2^40 ms after the epoch)' END,
                                            NULL);
    END IF;
    RETURN (ms OPERATOR(pg_catalog.<<) 23) OPERATOR(pg_catalog.|) (shard::bigint OPERATOR(pg_catalog.<<) 10)
           OPERATOR(pg_catalog.|) (n OPERATOR(pg_catalog.&) 1023);
END $$;

-- next_shard_id(seq regclass) RETURNS bigint: with this database's node number in the shard
-- field (shard_id_configure(node => ...)); 55000 when none is set.
CREATE FUNCTION @extschema@.next_shard_id(seq regclass) RETURNS bigint
LANGUAGE plpgsql VOLATILE STRICT PARALLEL UNSAFE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    node integer := @extschema@._shard_id_node();
BEGIN
    IF node IS NULL THEN
        RAISE EXCEPTION 'pg_shard_id: this database has no node number'
            USING ERRCODE = '55000', HINT = 'Its edition''s owner runs SELECT @extschema@.shard_id_configure(node => 5).';
    END IF;
    RETURN @extschema@.next_shard_id(seq, node);
END $$;



-- After pg_dump and a restore into another database (where every oid is new): gives each guarded
-- sequence its own registers back (restored with their values, named by the oids of the dumped
-- database, which other sequences may have now), and the functions the epoch and node number,
-- then a jump each. The edition's owner runs it once, before the first write: until then a
-- sequence whose new oid is one a guarded sequence had can draw with that sequence's registers
-- (docs/managed.md#guarantee). Returns the sequences taken back.
--
-- shard_id_restored() RETURNS SETOF regclass
--   SELECT * FROM ids.shard_id_restored();
CREATE FUNCTION @extschema@.shard_id_restored() RETURNS SETOF regclass
LANGUAGE plpgsql VOLATILE SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    g record;
BEGIN
    LOCK TABLE @extschema@.shard_id_guards IN EXCLUSIVE MODE;
    EXECUTE format('CREATE OR REPLACE FUNCTION @extschema@._shard_id_epoch_ms() RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN %s',
                   (SELECT epoch_ms FROM @extschema@.shard_id_settings LIMIT 1));
    EXECUTE format('CREATE OR REPLACE FUNCTION @extschema@._shard_id_node() RETURNS integer LANGUAGE sql IMMUTABLE PARALLEL SAFE RETURN %s::integer',
                   coalesce((SELECT node::text FROM @extschema@.shard_id_settings LIMIT 1), 'NULL'));
    -- first out of the way under names no oid gives, then to their sequences' new oids
    FOR g IN SELECT * FROM @extschema@.shard_id_guards WHERE registers_of <> seq::oid LOOP
        EXECUTE format('ALTER SEQUENCE @extschema@.%I RENAME TO %I', 'shard_id_guard_' || g.registers_of || '_o', 'shard_id_moving_' || g.registers_of || '_o');
        EXECUTE format('ALTER SEQUENCE @extschema@.%I RENAME TO %I', 'shard_id_guard_' || g.registers_of || '_b', 'shard_id_moving_' || g.registers_of || '_b');
    END LOOP;
    FOR g IN SELECT * FROM @extschema@.shard_id_guards WHERE registers_of <> seq::oid LOOP
        EXECUTE format('DROP SEQUENCE IF EXISTS @extschema@.%I, @extschema@.%I', 'shard_id_guard_' || g.seq::oid || '_o', 'shard_id_guard_' || g.seq::oid || '_b');
        EXECUTE format('ALTER SEQUENCE @extschema@.%I RENAME TO %I', 'shard_id_moving_' || g.registers_of || '_o', 'shard_id_guard_' || g.seq::oid || '_o');
        EXECUTE format('ALTER SEQUENCE @extschema@.%I RENAME TO %I', 'shard_id_moving_' || g.registers_of || '_b', 'shard_id_guard_' || g.seq::oid || '_b');
        UPDATE @extschema@.shard_id_guards x SET registers_of = g.seq::oid WHERE x.seq = g.seq;
        PERFORM @extschema@._shard_id_jump(g.seq);
        RETURN NEXT g.seq;
    END LOOP;
END $$;
REVOKE ALL ON FUNCTION @extschema@.shard_id_restored() FROM PUBLIC;
