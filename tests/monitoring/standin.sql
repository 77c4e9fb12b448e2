-- A stand-in for the extension's pg_shard_id_stats view, for developing the monitoring recipe
-- without a build of pg_shard_id (tests/monitoring/run.sh with MONITORING_STANDIN=1). The view has
-- the columns and types of the real one; its numbers come from a table that standin_draw updates
-- as the guard would count a burst at the layout's cap of 1,024 ids per millisecond:
-- every full 1,024 ids exhaust a millisecond; in wait mode the session sleeps until the clock
-- reaches the milliseconds it needed (waits, wait_seconds); in borrow mode it does not and the
-- last millisecond issued runs ahead of the clock (lead_ms). Not the extension: plumbing only.
CREATE FUNCTION standin_this_database() RETURNS oid STABLE LANGUAGE sql
    AS $$ SELECT oid FROM pg_database WHERE datname = current_database() $$;

CREATE TABLE standin_counters (
    database oid NOT NULL DEFAULT standin_this_database(),
    sequence_oid oid NOT NULL,
    ids bigint NOT NULL DEFAULT 0,
    exhausted_ms bigint NOT NULL DEFAULT 0,
    waits bigint NOT NULL DEFAULT 0,
    wait_seconds double precision NOT NULL DEFAULT 0,
    clock_steps bigint NOT NULL DEFAULT 0,
    last_issued timestamptz,
    lease_writes bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (database, sequence_oid)
);

-- as the extension's view (sql/stats.sql) shows the guard's rows: a database's name (NULL once it
-- is dropped), the sequence as a regclass only in this database
CREATE VIEW pg_shard_id_stats AS
SELECT d.datname,
       CASE WHEN s.database = standin_this_database()
            THEN (SELECT c.oid::regclass FROM pg_class c WHERE c.oid = s.sequence_oid)
       END AS sequence,
       s.sequence_oid, s.ids, s.exhausted_ms, s.waits, s.wait_seconds,
       greatest(0, floor(extract(epoch FROM s.last_issued - clock_timestamp()) * 1000))::bigint
           AS lead_ms,
       s.clock_steps, s.last_issued, s.lease_writes
  FROM standin_counters s
  LEFT JOIN pg_database d ON d.oid = s.database;

-- CALL standin_draw(seq, n, mode): draws n values from seq in chunks of 102,400 (100 ms at the
-- cap), counting and committing each chunk as the guard would, so that scrapes see a burst grow.
CREATE PROCEDURE standin_draw(seq regclass, n bigint, mode text DEFAULT 'wait')
LANGUAGE plpgsql AS $$
DECLARE
    chunk constant bigint := 102400;
    t0 constant timestamptz := clock_timestamp();
    done bigint := 0;
    k bigint;
    short_ms double precision;
BEGIN
    WHILE done < n LOOP
        k := least(chunk, n - done);
        PERFORM count(nextval(seq)) FROM generate_series(1, k);
        done := done + k;
        -- the clock has to be past the milliseconds that done ids need at 1,024 per millisecond
        short_ms := greatest(0, ceil(done / 1024.0)
                                - extract(epoch FROM clock_timestamp() - t0) * 1000);
        IF mode = 'wait' AND short_ms > 0 THEN
            PERFORM pg_sleep(short_ms / 1000);
        END IF;
        INSERT INTO standin_counters AS c (sequence_oid, ids, exhausted_ms, waits, wait_seconds,
                                           last_issued)
        VALUES (seq, k, k / 1024, CASE WHEN mode = 'wait' THEN ceil(short_ms) ELSE 0 END,
                CASE WHEN mode = 'wait' THEN short_ms / 1000 ELSE 0 END,
                t0 + ceil(done / 1024.0) * interval '1 ms')
        ON CONFLICT (database, sequence_oid) DO UPDATE
           SET ids = c.ids + excluded.ids,
               exhausted_ms = c.exhausted_ms + excluded.exhausted_ms,
               waits = c.waits + excluded.waits,
               wait_seconds = c.wait_seconds + excluded.wait_seconds,
               last_issued = greatest(c.last_issued, excluded.last_issued);
        COMMIT;
    END LOOP;
    UPDATE standin_counters SET lease_writes = lease_writes + 1
     WHERE sequence_oid = seq AND database = standin_this_database();
END $$;

-- shard_id_check()'s rows, set by hand (standin_check_rows): the monitoring query reads them
CREATE TABLE standin_check_rows ("check" text PRIMARY KEY, status text NOT NULL, detail text NOT NULL);
INSERT INTO standin_check_rows VALUES ('preload', 'ok', 'stand-in'), ('data_floor', 'ok', 'stand-in'),
                                      ('shard_numbers', 'ok', 'stand-in'), ('mask_keys', 'skipped', 'stand-in');
CREATE FUNCTION shard_id_check() RETURNS TABLE ("check" text, status text, detail text) STABLE LANGUAGE sql
    AS $$ SELECT "check", status, detail FROM standin_check_rows ORDER BY 1 $$;

-- pg_shard_id_info()'s guard table columns: 64 slots, those of the sequences counted in use
CREATE FUNCTION pg_shard_id_info() RETURNS TABLE (guard_slots integer, guard_slots_in_use integer, guard_evictions bigint)
    STABLE LANGUAGE sql
    AS $$ SELECT 64, (SELECT count(*)::integer FROM standin_counters), 0::bigint $$;
