#!/usr/bin/env bash
# Cluster-level tests of the uniqueness guard: what needs several sessions, a crash and restart,
# a server without the library preloaded, or the test clock; and (lifecycle.sh) failover, point-in-
# time recovery and clocks moved under libfaketime; (logical.sh) logical replication switchovers, CDC
# and partial dumps. Each starts its own throwaway cluster
# (scripts/lib.sh). Needs a test build installed (scripts/test.sh does that).
# Ends with the line "N passed, M failed"; exits non-zero if any failed.
source "$(dirname "$0")/../../scripts/lib.sh"
source "$(dirname "$0")/lifecycle.sh"
source "$(dirname "$0")/logical.sh"
stop_clusters_at_exit

# (8 s: 5.6 and 6.7 million ids from 4 sessions in the two modes here, thousands of times the 1,024 a millisecond
# allows; 20 s drew 16-17 million and took 56 s of each run, now 23 s)
SECONDS_CONCURRENT="${CONCURRENT_SECONDS:-8}"
# how far ahead of the wall clock the crash and damaged-lease tests run their ids (the test clock)
LEAD_MS=10000
dups() { q -c "SELECT count(*) - count(DISTINCT id) FROM $1"; }
decreases() { # rows whose millisecond is below the previous row's, in the order of column $2
    q -c "SELECT count(*) FROM (SELECT id, lag(id) OVER (ORDER BY $2) AS prev FROM $1) x
          WHERE shard_id_extract_timestamp(id) < shard_id_extract_timestamp(prev)"
}
lease_line() { as_pg cat "$PGHOST/data/pg_shard_id.lease" 2>/dev/null || true; }
setup_db() {
    q -c "SET client_min_messages = warning; CREATE EXTENSION pg_shard_id" \
      -c "CREATE SEQUENCE s $1" \
      -c "CREATE TABLE t (id bigint DEFAULT next_shard_id('s', 1), n bigserial)"
}
pgbench_rows() { # pgbench_rows ROWS_PER_TX CLIENTS SECONDS
    echo "INSERT INTO t (id) SELECT next_shard_id('s', 1) FROM generate_series(1, $1);" >"$PGHOST/insert.sql"
    pgbench -n -c "$2" -j 2 -T "$3" -f "$PGHOST/insert.sql" >"$PGHOST/pgbench.log" 2>&1
}

test_concurrent_sessions() {
    local mode
    for mode in wait borrow; do
        say "4 sessions for ${SECONDS_CONCURRENT}s, overflow = $mode"
        start_cluster concurrent yes "pg_shard_id.overflow = $mode" "fsync = off"
        setup_db ""
        pgbench_rows 200 4 "$SECONDS_CONCURRENT"
        local rows; rows="$(q -c "SELECT count(*) FROM t")"
        echo "  $rows ids in ${SECONDS_CONCURRENT}s from 4 sessions"
        check "$mode: ids were drawn" "$([ "$rows" -gt 100000 ] && echo yes)" yes
        check "$mode: duplicates among 4 concurrent sessions" "$(dups t)" 0
        check "$mode: the lease covers every id" \
            "$(q -c "SELECT (SELECT lease_until FROM pg_shard_id_info()) >= shard_id_extract_timestamp(max(id)) FROM t")" t
        if [ "$mode" = wait ]; then
            check "wait: the lease is at most one step (1 s) past the newest id" \
                "$(q -c "SELECT (SELECT lease_until FROM pg_shard_id_info()) <= shard_id_extract_timestamp(max(id)) + interval '1 s' FROM t")" t
        fi
        stop_cluster concurrent
    done
}

test_cached_sequence() {
    say "CACHE 1024 sequence, 2 sessions at once"
    start_cluster cached yes "fsync = off"
    setup_db "CACHE 1024"
    pgbench_rows 50 2 5
    echo "  $(q -c "SELECT count(*) FROM t") ids"
    check "CACHE 1024: the sessions drew from several cached blocks" \
        "$(q -c "SELECT last_value >= 4096 FROM s")" t
    check "CACHE 1024: duplicates" "$(dups t)" 0
    stop_cluster cached
}

test_clock_step_back() {
    # both guards: the cluster one (preloaded) and the per-session one, whose common case differs
    # (no lease, so any lead is taken without the slow path that a preloaded server takes here)
    local preload guard label
    for preload in yes no; do
        guard="$([ "$preload" = yes ] && echo cluster || echo session)"
        label="clock step ($guard guard)"
        say "the clock steps back 5 s in the middle of a stream (test clock, $guard guard)"
        start_cluster clock "$preload"
        setup_db ""
        # (a failing psql must not stop the script before its stderr is shown: set -e)
        local stream=0
        psql -X -q -v ON_ERROR_STOP=1 >/dev/null 2>"$PGHOST/step.err" <<'SQL' || stream=$?
INSERT INTO t (id) SELECT next_shard_id('s', 1) FROM generate_series(1, 50000);
SET pg_shard_id.test_clock_offset_ms = -5000;
INSERT INTO t (id) SELECT next_shard_id('s', 1) FROM generate_series(1, 50000);
INSERT INTO t (id) SELECT next_shard_id('s', 1) FROM generate_series(1, 50000);
SQL
        cat "$PGHOST/step.err" | sed 's/^/  /'
        check "$label: the stream ran (psql's status)" "$stream" 0
        check "$label: guard mode" "$(q -c "SELECT guard FROM pg_shard_id_info()")" "$guard"
        check "$label: WARNINGs" "$(grep -c '^WARNING' "$PGHOST/step.err")" 1
        local step; step="$(grep -o 'stepped back by [0-9]* ms' "$PGHOST/step.err" | grep -o '[0-9]*' || true)"
        # the step seen is 5 s minus the time between the last id before the SET and the first
        # after it (a round trip or two; up to ~0.5 s on a loaded 2-core machine)
        check "$label: the WARNING gives the step (4000..5000 ms)" \
            "$([ "${step:-0}" -ge 4000 ] && [ "${step:-0}" -le 5000 ] && echo yes)" yes
        check "$label: duplicates" "$(dups t)" 0
        check "$label: millisecond decreases in nextval order" "$(decreases t n)" 0
        stop_cluster clock
    done
}

test_not_preloaded() {
    say "not in shared_preload_libraries: per-session guard"
    start_cluster nopreload no
    local notice
    notice="$(psql -X -q -c "CREATE EXTENSION pg_shard_id" 2>&1)"
    # (its first line, without a pipe: head closing it early killed echo with SIGPIPE, and
    # pipefail failed the stage with 141)
    echo "  ${notice%%$'\n'*}"
    check "no preload: CREATE EXTENSION says so" \
        "$(echo "$notice" | grep -c 'NOTICE:  pg_shard_id is not in shared_preload_libraries')" 1
    check "no preload: guard mode" "$(q -c "SELECT guard FROM pg_shard_id_info()")" session
    # without preloading, a SET before the library loads is only a placeholder: ignored at load
    check "no preload: a SET before the library loads is ignored" \
        "$(psql -X -q -At -c "SET pg_shard_id.epoch = '2011-01-01 00:00:00+00'" \
             -c "SELECT epoch = '2026-01-01 00:00:00+00' FROM pg_shard_id_info()" 2>/dev/null)" t
    check "no preload: a SET after it loads fails (55P02)" \
        "$(error_of -c "SELECT FROM pg_shard_id_info(); SET pg_shard_id.epoch = '2011-01-01 00:00:00+00'" | grep -o 55P02)" 55P02
    q -c "CREATE SEQUENCE s" -c "CREATE TABLE t (id bigint DEFAULT next_shard_id('s', 1), n bigserial)" \
      -c "INSERT INTO t (n) SELECT g FROM generate_series(1, 1000000) g"
    check "no preload: duplicates in one session's 1,000,000 ids" "$(dups t)" 0
    check "no preload: millisecond decreases" "$(decreases t n)" 0
    stop_cluster nopreload
}

test_crash_restart() {
    say "SIGKILL while ids run 10 s ahead of the clock; the server restarts; ids go on"
    # The server's clock (the test clock) reads 10 s behind the wall clock. One session draws a
    # burst with the wall clock, then returns to the server's: the clock stepped back 10 s, and
    # the guard goes on from the burst, 10 s ahead of its clock (as after a real step back, or a
    # borrow burst faster than 1,024 ids per ms; such a burst was used here first, but how far it
    # gets ahead depends on the machine: a loaded CI run once ended 69 ms behind the clock). Then
    # crash at once. After the restart the clock is still 10 s behind those ids, so only the lease
    # file keeps the new ids above them.
    start_cluster crash yes "pg_shard_id.overflow = borrow" "restart_after_crash = on" \
        "pg_shard_id.test_clock_offset_ms = -$LEAD_MS"
    setup_db ""
    local before_max; before_max="$(q -c "SET pg_shard_id.test_clock_offset_ms = 0" \
        -c "SELECT count(next_shard_id('s', 1)) FROM generate_series(1, 300000)" \
        -c "RESET pg_shard_id.test_clock_offset_ms" -c "SELECT next_shard_id('s', 1)" 2>/dev/null | tail -1)"
    local crash_ms; crash_ms="$(( $(date +%s%3N) - LEAD_MS ))"
    psql -X -q -c "SELECT pg_sleep(60)" >/dev/null 2>&1 &
    local victim=""
    for _ in $(seq 100); do
        victim="$(q -c "SELECT pid FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(60)%'")"
        [ -n "$victim" ] && break
        sleep 0.02
    done
    kill -9 "$victim"
    wait || true
    for _ in $(seq 600); do
        q -c "SELECT 1" >/dev/null 2>&1 && break
        sleep 0.02
    done
    check "crash: the server restarted after SIGKILL" \
        "$(grep -c 'terminated by signal 9' "$PGHOST/server.log")" 1
    q -c "INSERT INTO t (id) SELECT next_shard_id('s', 1) FROM generate_series(1, 1000000)"
    local ms_of="(extract(epoch FROM shard_id_extract_timestamp(%s)) * 1000)::bigint"
    local lead; lead="$(q -c "SELECT $(printf "$ms_of" "$before_max") - $crash_ms")"
    echo "  at the crash the last id was $lead ms ahead of the server's clock;" \
         "after the restart ids start $(q -c "SELECT $(printf "$ms_of" 'min(id)') - $(printf "$ms_of" "$before_max") FROM t") ms after it"
    check "crash: the burst was ahead of the clock when the server crashed (> 5000 ms)" \
        "$([ "$lead" -gt 5000 ] && echo yes)" yes
    check "crash: every id after the restart is above every id before it" \
        "$(q -c "SELECT min(id) > $before_max FROM t")" t
    check "crash: duplicates after the restart" "$(dups t)" 0
    check "crash: the lease covers the burst" \
        "$(q -c "SELECT lease_until > shard_id_extract_timestamp($before_max) FROM pg_shard_id_info()")" t
    stop_cluster crash
}

test_epoch_is_fixed_and_checked_at_start() {
    say "the epoch: fixed while the server runs, recorded in the lease file, checked at every start"
    start_cluster epoch yes
    setup_db ""
    q -c "INSERT INTO t (id) SELECT next_shard_id('s', 1) FROM generate_series(1, 10000)"
    check "epoch: the lease file records it" "$(lease_line | grep -o 'epoch [0-9]*')" "epoch 00000001767225600000"
    check "epoch: SET cannot change it (55P02)" \
        "$(error_of -c "SET pg_shard_id.epoch = '2011-01-01 00:00:00+00'" | grep -o 55P02)" 55P02
    check "epoch: PGOPTIONS cannot change it" \
        "$(PGOPTIONS="-c pg_shard_id.epoch=2011-01-01T00:00:00Z" psql -X -q -At -c "SHOW pg_shard_id.epoch" 2>&1 | grep -c 'cannot be changed' | sed 's/^[1-9][0-9]*$/refused/')" refused

    restart_cluster epoch "pg_shard_id.epoch = '2026-06-01 00:00:00+00'"
    local err; err="$(error_of -c "SELECT next_shard_id('s', 1)")"
    echo "  $err"
    check "epoch: a later epoch at start is refused (55000)" "$(echo "$err" | grep -o 55000)" 55000
    check "epoch: ... naming both epochs" \
        "$(echo "$err" | grep -c '2026-06-01 00:00:00.000+00.*2026-01-01 00:00:00.000+00')" 1
    check "epoch: ... and a WARNING in the server log" \
        "$(grep -c 'later than the epoch 2026-01-01' "$PGHOST/server.log")" 1
    check "epoch: decoding still works meanwhile" "$(q -c "SELECT count(shard_id_extract_timestamp(id)) FROM t")" 10000

    restart_cluster epoch "pg_shard_id.epoch = '2025-01-01 00:00:00+00'"
    q -c "INSERT INTO t (id) SELECT next_shard_id('s', 1) FROM generate_series(1, 10000)"
    check "epoch: an earlier epoch is allowed and logged" "$(grep -c 'moved earlier' "$PGHOST/server.log")" 1
    check "epoch: ... and every new id is above every old one" \
        "$(q -c "SELECT min(id) FILTER (WHERE n > 10000) > max(id) FILTER (WHERE n <= 10000) FROM t")" t
    check "epoch: ... and is recorded" "$(lease_line | grep -o 'epoch [0-9]*')" "epoch 00000001735689600000"
    # (unique, but every id decodes to another time: the check fails, naming both, and its alert
    # fires; before issue 58 it said ok)
    local row; row="$(q -c "SELECT status || ': ' || detail FROM shard_id_check() WHERE \"check\" = 'epoch'")"
    check "epoch: ... and shard_id_check() fails it, naming both epochs" \
        "$(echo "$row" | grep -c '^failed: pg_shard_id.epoch (2025-01-01 00:00:00.000+00) is earlier than the epoch .* (2026-01-01 00:00:00.000+00)')" 1
    restart_cluster epoch "pg_shard_id.epoch = '2026-01-01 00:00:00+00'"
    check "epoch: going back to the first epoch is now a later one: refused" \
        "$(error_of -c "SELECT next_shard_id('s', 1)" | grep -o 55000)" 55000
    check "epoch: duplicates" "$(dups t)" 0
    stop_cluster epoch
}

test_guard_table_churn() {
    say "a role with no grants churns a 16-slot guard table with temporary sequences"
    start_cluster churn yes "pg_shard_id.max_sequences = 16" "fsync = off"
    setup_db ""
    q -c "CREATE ROLE churner LOGIN" -c "CREATE TABLE tv (id bigint, seq int)"
    # 2 sessions x 200 temporary sequences (25 x the table), each used over and over for ~12 s
    local churn_sql="DO \$\$ DECLARE i int; t0 timestamptz := clock_timestamp(); BEGIN
        FOR i IN 1..200 LOOP EXECUTE format('CREATE TEMP SEQUENCE c%s', i); END LOOP;
        WHILE clock_timestamp() < t0 + interval '12 s' LOOP
            FOR i IN 1..200 LOOP PERFORM next_shard_id(format('c%s', i)::regclass, 1); END LOOP;
        END LOOP; END \$\$"
    local pids=() c
    for c in 1 2; do
        (PGUSER=churner psql -X -q -v ON_ERROR_STOP=1 -c "$churn_sql" >"$PGHOST/churn$c.log" 2>&1; echo "exit $?" >>"$PGHOST/churn$c.log") &
        pids+=($!)
    done
    sleep 1
    # meanwhile another role's existing sequence (2 pgbench clients) and 20 new ones keep issuing
    pgbench_rows 100 2 8 &
    local bench=$!
    for c in $(seq 1 20); do
        q -c "CREATE SEQUENCE v$c" \
          -c "INSERT INTO tv SELECT next_shard_id('v$c', 100 + $c), $c FROM generate_series(1, 2000)"
    done
    local bench_status=0
    wait "$bench" || bench_status=$?
    for p in "${pids[@]}"; do wait "$p"; done
    local evictions; evictions="$(q -c "SELECT guard_evictions FROM pg_shard_id_info()")"
    echo "  $(q -c "SELECT count(*) FROM t") ids from the existing sequence, $(q -c "SELECT count(*) FROM tv") from 20 new ones; $evictions slot evictions"
    check "churn: the churners ran without an error" "$(cat "$PGHOST"/churn*.log | grep -c '^exit 0')" 2
    check "churn: the table was churned (more evictions than 25 x its slots)" "$([ "$evictions" -gt 400 ] && echo yes)" yes
    check "churn: pgbench on the existing sequence had no error" "$bench_status:$(grep -c ERROR "$PGHOST/pgbench.log")" "0:0"
    check "churn: ids were drawn from the existing sequence" "$([ "$(q -c "SELECT count(*) FROM t")" -gt 10000 ] && echo yes)" yes
    check "churn: new sequences issued every id" "$(q -c "SELECT count(*) FROM tv")" 40000
    check "churn: duplicates (existing sequence)" "$(dups t)" 0
    check "churn: duplicates (new sequences)" "$(dups tv)" 0
    check "churn: millisecond decreases per new sequence" \
        "$(q -c "SELECT count(*) FROM (SELECT id, lag(id) OVER (PARTITION BY seq ORDER BY ctid) AS prev FROM tv) x
                 WHERE shard_id_extract_timestamp(id) < shard_id_extract_timestamp(prev)")" 0
    stop_cluster churn
}

test_damaged_lease() {
    say "a damaged lease file: the server starts, warns, and issues above every earlier id"
    start_cluster lease yes "pg_shard_id.overflow = borrow"
    setup_db ""
    local kind lease="$RUN_DIR/lease/data/pg_shard_id.lease" warnings=0
    for kind in empty truncated garbage flipped unreadable; do
        # the first round's ids are 10 s ahead of the clock (drawn with the test clock 10 s fast;
        # the file is not written for them, so only the damaged-lease margin can cover them)
        local lead_ms=0
        [ "$kind" = empty ] && lead_ms=$LEAD_MS
        local before; before="$(q -c "SET pg_shard_id.test_clock_offset_ms = $lead_ms" \
            -c "SELECT max(next_shard_id('s', 1)) FROM generate_series(1, 300000)")"
        if [ "$kind" = empty ]; then
            check "lease $kind: ids were ahead of the clock at the stop (> 5 s)" \
                "$(q -c "SELECT shard_id_extract_timestamp($before) > clock_timestamp() + interval '5 s'")" t
        fi
        as_pg "$PG_BIN/pg_ctl" -D "$RUN_DIR/lease/data" -m fast -w stop >/dev/null
        case "$kind" in
            # the file's time counts as a clock reading: set it an hour back, so that only the
            # margin covers the lead
            empty) as_pg truncate -s 0 "$lease" && as_pg touch -d '1 hour ago' "$lease" ;;
            truncated) as_pg truncate -s 30 "$lease" ;;
            garbage) echo "not a lease" | as_pg tee "$lease" >/dev/null ;;
            flipped) as_pg sed -i 's/lease 0000000/lease 0000001/' "$lease" ;;
            unreadable) as_pg chmod 000 "$lease" ;;
        esac
        local started=no
        as_pg "$PG_BIN/pg_ctl" -D "$RUN_DIR/lease/data" -l "$RUN_DIR/lease/server.log" -w -t 60 start >/dev/null && started=yes
        check "lease $kind: the server starts" "$started" yes
        warnings=$((warnings + 1))
        check "lease $kind: a WARNING says what happened" \
            "$(grep -c 'the lease file is damaged' "$RUN_DIR/lease/server.log")" "$warnings"
        q -c "INSERT INTO t (id) SELECT next_shard_id('s', 1) FROM generate_series(1, 1000)"
        check "lease $kind: new ids are above every earlier one" \
            "$(q -c "SELECT min(id) > $before FROM (SELECT id FROM t ORDER BY n DESC LIMIT 1000) x")" t
        check "lease $kind: the file is rewritten" "$(lease_line | grep -c '^pg_shard_id lease .* check ')" 1
    done
    check "lease: duplicates" "$(dups t)" 0
    # a lease far in the future (a 0.1.0-format record for 2100-01-01)
    as_pg "$PG_BIN/pg_ctl" -D "$RUN_DIR/lease/data" -m fast -w stop >/dev/null
    printf '%020d\n' 4102444800000 | as_pg tee "$lease" >/dev/null
    as_pg "$PG_BIN/pg_ctl" -D "$RUN_DIR/lease/data" -l "$RUN_DIR/lease/server.log" -w -t 60 start >/dev/null
    local err; err="$(error_of -c "SELECT next_shard_id('s', 1)")"
    echo "  $err"
    check "lease in 2100: 22008 naming the lease file" "$(echo "$err" | grep -c '22008: pg_shard_id: the lease file')" 1
    check "lease in 2100: the server log warned at start" "$(grep -c 'WARNING:.*records ids up to 2100' "$RUN_DIR/lease/server.log")" 1
    check "lease in 2100: everything else works" "$(q -c "SELECT count(*) > 0 FROM t WHERE shard_id_extract_shard(id) = 1")" t
    stop_cluster lease
}

test_many_shards() {
    say "3 clusters, 12 logical shards, a shard move (tests/cluster/many_shards.sh)"
    if bash "$REPO/tests/cluster/many_shards.sh" 2>&1 | sed 's/^/  /'; then
        check "many shards: unique ids, routing, shard move" passed passed
    else
        check "many shards: unique ids, routing, shard move" failed passed
    fi
}

test_adopt_under_load() {
    say "shard_id_adopt while 2 sessions insert (prepared statements), then pg_dump/pg_restore"
    start_cluster adopt yes "fsync = off"
    q -c "SET client_min_messages = warning; CREATE EXTENSION pg_shard_id" \
      -c "CREATE TABLE legacy (id bigserial PRIMARY KEY, n int, seqno bigserial)" \
      -c "CREATE TABLE legacy_child (legacy_id bigint REFERENCES legacy)" \
      -c "CREATE TABLE legacy_identity (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, n int)" \
      -c "INSERT INTO legacy (n) SELECT 0 FROM generate_series(1, 50000)" \
      -c "INSERT INTO legacy_child SELECT id FROM legacy WHERE id % 10 = 0" \
      -c "INSERT INTO legacy_identity (n) SELECT 0 FROM generate_series(1, 1000)"
    echo "INSERT INTO legacy (n) VALUES (1);" >"$PGHOST/legacy.sql"
    # prepared statements are planned with the old DEFAULT and must switch to the new one
    pgbench -n -M prepared -c 2 -j 2 -T 6 -f "$PGHOST/legacy.sql" >"$PGHOST/pgbench.log" 2>&1 &
    local bench=$!
    sleep 2
    local adopted; adopted="$(q -c "SELECT shard_id_adopt('legacy', 'id', 9)")"
    q -c "SELECT shard_id_adopt('legacy_identity', 'id', 9)" >/dev/null
    wait "$bench"
    local rows; rows="$(q -c "SELECT count(*) FILTER (WHERE n = 1) FROM legacy")"
    local new; new="$(q -c "SELECT count(*) FROM legacy WHERE id > 50000 AND shard_id_extract_shard(id) = 9 AND id > 2^40")"
    echo "  $adopted; $rows rows inserted during the run, $new of them with shard ids"
    check "adopt: pgbench inserted before and after, no failed transaction" \
        "$(grep -c 'number of failed transactions: 0' "$PGHOST/pgbench.log")" 1
    check "adopt: rows with shard ids after adoption" "$([ "$new" -gt 1000 ] && echo yes)" yes
    check "adopt: every insert after the first shard id got one (prepared plans switched)" \
        "$(q -c "SELECT max(seqno) FILTER (WHERE id < 2^40) < min(seqno) FILTER (WHERE id >= 2^40) FROM legacy")" t
    check "adopt: duplicates" "$(dups legacy)" 0
    check "adopt: rows from before are all there" "$(q -c "SELECT count(*) FROM legacy WHERE n = 0")" 50000
    check "adopt: an explicit old-style id is still accepted" \
        "$(q -c "INSERT INTO legacy (id, n) VALUES (60000000, 2) RETURNING id")" 60000000
    check "adopt: the identity table issues shard ids" \
        "$(q -c "INSERT INTO legacy_identity (n) VALUES (1) RETURNING shard_id_extract_shard(id) = 9 AND id > 2^40")" t

    local before after
    before="$(q -c "SELECT md5(string_agg(id::text || ',' || n, ';' ORDER BY id)) FROM legacy")"
    "$PG_BIN/pg_dump" -Fc -f "$PGHOST/adopt.dump" postgres
    q -c "CREATE DATABASE restored"
    "$PG_BIN/pg_restore" -d restored "$PGHOST/adopt.dump" 2>"$PGHOST/restore.log"
    check "adopt: pg_restore without errors" "$(wc -c <"$PGHOST/restore.log")" 0
    after="$(q -d restored -c "SELECT md5(string_agg(id::text || ',' || n, ';' ORDER BY id)) FROM legacy")"
    check "adopt: restored rows" "$after" "$before"
    check "adopt: restored defaults" \
        "$(q -d restored -c "SELECT string_agg(pg_get_expr(adbin, adrelid), ' ' ORDER BY adrelid::regclass::text) FROM pg_attrdef WHERE adnum = 1")" \
        "next_shard_id('legacy_id_seq'::regclass, 9) next_shard_id('legacy_identity_id_seq'::regclass, 9)"
    check "adopt: restored sequences still owned by their columns" \
        "$(q -d restored -c "SELECT pg_get_serial_sequence('legacy', 'id') || ' ' || pg_get_serial_sequence('legacy_identity', 'id')")" \
        "public.legacy_id_seq public.legacy_identity_id_seq"
    check "adopt: the restored table makes new ids above every restored one" \
        "$(q -d restored -c "WITH m AS (SELECT max(id) AS m FROM legacy) INSERT INTO legacy (n) SELECT 3 FROM generate_series(1, 1000) RETURNING id > (SELECT m FROM m)" | sort -u)" t
    stop_cluster adopt
}

test_node_form_errors() {
    say "next_shard_id(seq) (a #[pg_extern]): 10,000 errors caught in one session, then ids"
    start_cluster nodeform yes "pg_shard_id.node = 3"
    q -c "SET client_min_messages = warning; CREATE EXTENSION pg_shard_id" \
      -c "CREATE SEQUENCE short_seq MAXVALUE 3" -c "CREATE SEQUENCE s" -c "CREATE TABLE not_a_seq (x int)" \
      -c "CREATE TABLE t (id bigint, n bigserial)" -c "CREATE ROLE nobody LOGIN"
    local outcomes="CREATE FUNCTION pg_temp.outcomes(q text, n int) RETURNS text LANGUAGE plpgsql AS \$\$
        DECLARE codes text[] := '{}';
        BEGIN
            FOR i IN 1..n LOOP
                BEGIN EXECUTE q; codes := codes || 'ok'::text;
                EXCEPTION WHEN others THEN codes := codes || SQLSTATE::text; END;
            END LOOP;
            RETURN (SELECT string_agg(c || ' x ' || k, ', ' ORDER BY c)
                    FROM (SELECT c, count(*) AS k FROM unnest(codes) c GROUP BY c) x);
        END \$\$"
    local got
    got="$(q -c "$outcomes" \
        -c "SELECT pg_temp.outcomes('SELECT next_shard_id(''short_seq'')', 2000)" \
        -c "SELECT pg_temp.outcomes('SELECT next_shard_id(''not_a_seq'')', 2000)" \
        -c "SET pg_shard_id.test_clock_offset_ms = -10000000000000" \
        -c "SELECT pg_temp.outcomes('SELECT next_shard_id(''s'')', 2000)" \
        -c "RESET pg_shard_id.test_clock_offset_ms" \
        -c "BEGIN READ ONLY" -c "SELECT pg_temp.outcomes('SELECT next_shard_id(''s'')', 2000)" -c "COMMIT" \
        -c "INSERT INTO t (id) SELECT next_shard_id('s') FROM generate_series(1, 50000)" | tr '\n' ';')"
    check "node form: exhausted, not a sequence, clock before the epoch (slow path), read-only" "$got" \
        "2200H x 1997, ok x 3;42809 x 2000;22008 x 2000;25006 x 2000;"
    check "node form: no privilege (2,000 x 42501)" \
        "$(PGUSER=nobody q -c "$outcomes" -c "SELECT pg_temp.outcomes('SELECT next_shard_id(''s'')', 2000)")" "42501 x 2000"
    check "node form: then 50,000 ids, distinct, all shard 3" \
        "$(q -c "SELECT count(DISTINCT id) || ' ' || count(*) FILTER (WHERE shard_id_extract_shard(id) = 3) FROM t")" "50000 50000"
    check "node form: increasing in the order drawn" \
        "$(q -c "SELECT count(*) FROM (SELECT id, lag(id) OVER (ORDER BY n) AS prev FROM t) x WHERE id <= prev")" 0
    check "node form: the server log has no crash" "$(grep -c 'terminated by signal' "$PGHOST/server.log" || true)" 0
    stop_cluster nodeform
}

test_health_check() {
    say "shard_id_check() and pg_shard_id_stats: healthy, then each check made unhealthy on purpose"
    start_cluster health yes "fsync = off"
    setup_db ""
    q -c "INSERT INTO t (id) SELECT next_shard_id('s', 1) FROM generate_series(1, 1000)"
    statuses() { q -c "SELECT string_agg(\"check\" || '=' || status, ' ' ORDER BY \"check\") FROM shard_id_check()"; }
    check "health: rows in a next_shard_id column without an index" \
        "$(q -c "SELECT status || ' ' || (detail ~ 't.id \(no btree index has it as first column\) may hold rows whose newest id no index can read') FROM shard_id_check() WHERE \"check\" = 'data_floor'")" "warning true"
    q -c "CREATE INDEX t_id ON t (id)"
    check "health: a healthy server" "$(statuses)" \
        "citus=skipped clock=ok data_floor=ok epoch=ok lease=ok mask_keys=skipped preload=ok publication=ok replication=ok shard_numbers=ok"
    check "stats: 1000 ids of s" "$(q -c "SELECT ids FROM pg_shard_id_stats WHERE sequence = 's'::regclass")" 1000
    q -c "CREATE SEQUENCE s2" -c "CREATE TABLE t2 (id bigint DEFAULT next_shard_id('s2', 1))"
    check "health: shard 1 with two sequences" "$(statuses)" \
        "citus=skipped clock=ok data_floor=ok epoch=ok lease=ok mask_keys=skipped preload=ok publication=ok replication=ok shard_numbers=warning"
    q -c "DROP TABLE t2"
    # ids an hour ahead of the clock (the test clock), then the clock back where it was
    q -c "SET pg_shard_id.test_clock_offset_ms = 3600000" -c "INSERT INTO t (id) SELECT next_shard_id('s', 1)"
    check "health: the newest id an hour ahead of the clock" "$(statuses)" \
        "citus=skipped clock=failed data_floor=ok epoch=ok lease=warning mask_keys=skipped preload=ok publication=ok replication=ok shard_numbers=ok"
    check "stats: the lead over the clock" \
        "$(q -c "SELECT lead_ms BETWEEN 3500000 AND 3700000 FROM pg_shard_id_stats WHERE sequence = 's'::regclass")" t
    check "health: the clock check names the fix" \
        "$(q -c "SELECT detail LIKE '%ahead of the clock%Fix:%' FROM shard_id_check() WHERE \"check\" = 'clock'")" t
    # another database's sequences appear with their database's name, without a regclass
    q -c "CREATE DATABASE other" -c "CREATE DATABASE bare"
    q -d other -c "CREATE EXTENSION pg_shard_id" -c "CREATE SEQUENCE o" -c "SELECT next_shard_id('o', 2)"
    check "stats: another database's sequence" \
        "$(q -c "SELECT datname || ' ' || (sequence IS NULL) || ' ' || ids FROM pg_shard_id_stats WHERE datname = 'other'")" "other true 1"
    check "stats: the view in a database without the extension" \
        "$(error_of -d bare -c "SELECT * FROM pg_shard_id_stats")" \
        'ERROR:  42P01: relation "pg_shard_id_stats" does not exist'
    # a restart with an epoch later than the one the ids were made with: ids are refused
    restart_cluster health "pg_shard_id.epoch = '2026-06-01 00:00:00+00'"
    # (read with the later epoch, the stored ids are months ahead: data_floor says they cannot be
    # a floor, beside the epoch row that says why)
    check "health: a later epoch than the recorded one" "$(statuses)" \
        "citus=skipped clock=ok data_floor=warning epoch=failed lease=failed mask_keys=skipped preload=ok publication=ok replication=ok shard_numbers=ok"
    check "health: the epoch check names the recorded epoch to set" \
        "$(q -c "SELECT detail LIKE '%Fix: set pg_shard_id.epoch = ''2026-01-01 00:00:00.000+00''%' FROM shard_id_check() WHERE \"check\" = 'epoch'")" t
    # no shared_preload_libraries: guard mode session
    restart_cluster health "shared_preload_libraries = ''" "pg_shard_id.epoch = '2026-01-01 00:00:00+00'"
    check "health: not preloaded" "$(statuses)" \
        "citus=skipped clock=ok data_floor=ok epoch=ok lease=skipped mask_keys=skipped preload=failed publication=ok replication=ok shard_numbers=ok"
    check "stats: in guard mode session the view says so and shows nothing" \
        "$(q -c "SELECT count(*) FROM pg_shard_id_stats" 2>&1 | tr '\n' ' ')" \
        "NOTICE:  pg_shard_id_stats: guard mode session (pg_shard_id is not in shared_preload_libraries): there is no server-wide guard table to report 0 "
    stop_cluster health
}

test_copy_within_server() {
    say "a database copied within the server (CREATE DATABASE ... TEMPLATE) while its ids run ahead"
    start_cluster copy yes "fsync = off"
    setup_db ""
    q -c "SET pg_shard_id.test_clock_offset_ms = 600000" \
      -c "INSERT INTO t (id) SELECT next_shard_id('s', 1) FROM generate_series(1, 5000)"
    q -c "CREATE DATABASE copy TEMPLATE postgres"
    q -d copy -c "INSERT INTO t (id) SELECT next_shard_id('s', 1) FROM generate_series(1, 5000)"
    check "copy: 10,000 ids, none repeated" "$(q -d copy -c "SELECT count(DISTINCT id) FROM t")" 10000
    check "copy: the copy's new ids are above the copied ones (10 min ahead of its clock)" \
        "$(q -d copy -c "SELECT min(id) FILTER (WHERE n > 5000) > max(id) FILTER (WHERE n <= 5000) FROM t")" t
    check "copy: the server log says where new ids start" \
        "$(grep -c 'another server or database may have made' "$PGHOST/server.log")" 1
    check "copy: the copy's origin names the copy only" \
        "$(q -d copy -c "SELECT count(*) FILTER (WHERE database = (SELECT oid FROM pg_database WHERE datname = 'copy')) || '/' || count(*) FROM _pg_shard_id.origin")" 1/1
    stop_cluster copy
}

# --server-apis: the tests of what PostgreSQL's C API and catalogs give the library, which differ
# between majors (WAL replay after a crash, on a standby and in point-in-time recovery, a damaged
# lease, shared memory under churn, no preload, the health check's catalogs, logical decoding and
# publications): scripts/test.sh runs these on the majors that do not run every stage (16, 17),
# the rest of the tests being the same SQL on the same library (about 60 s instead of 180 s).
SERVER_APIS=(not_preloaded crash_restart guard_table_churn damaged_lease health_check
    failover_clock point_in_time_recovery cdc_stream publications_of_every_kind)
tests=("$@")
[ "${tests[*]}" = --server-apis ] && tests=("${SERVER_APIS[@]}")
[ ${#tests[@]} -gt 0 ] || tests=(concurrent_sessions cached_sequence clock_step_back not_preloaded crash_restart
    epoch_is_fixed_and_checked_at_start guard_table_churn damaged_lease many_shards adopt_under_load
    node_form_errors health_check copy_within_server
    failover_clock failover_borrow standby_with_an_earlier_epoch point_in_time_recovery restore_elsewhere boot_before_epoch fast_hour
    step_during_wait
    switchover_all_tables_lead switchover_some_tables_lead switchover_all_tables_behind
    switchover_some_tables_behind cdc_stream partial_dumps temp_table_of_another_session
    publications_of_every_kind)
# Two lanes at once (CLUSTER_LANES=1: one): the tests wait on servers, standbys and clocks for
# half of their time (one core of two busy, measured), so the lists below, each about half of the
# time, run side by side, each lane with its own folder for its clusters and its own ports (even
# and odd), its output shown whole after it ends. The tests of one lane run in the order above.
LANE_TWO=" cached_sequence clock_step_back crash_restart damaged_lease adopt_under_load failover_clock
    failover_borrow standby_with_an_earlier_epoch point_in_time_recovery restore_elsewhere
    boot_before_epoch step_during_wait switchover_all_tables_behind switchover_some_tables_behind
    partial_dumps temp_table_of_another_session publications_of_every_kind "
if [ "${CLUSTER_LANES:-2}" = 2 ] && [ ${#tests[@]} -gt 1 ]; then
    lanes=("" "")
    for t in "${tests[@]}"; do
        if [[ "$LANE_TWO" == *[[:space:]]"$t"[[:space:]]* ]]; then lanes[1]+=" $t"; else lanes[0]+=" $t"; fi
    done
    pids=()
    for lane in 0 1; do
        mkdir -p "$RUN_DIR/lane$lane"
        # shellcheck disable=SC2086 # (a list of test names)
        CLUSTER_LANES=1 PG_SHARD_ID_RUN_DIR="$RUN_DIR/lane$lane" PG_SHARD_ID_PORT_LANE="$lane/2" \
            bash "$0" ${lanes[lane]} >"$RUN_DIR/cluster-lane$lane.log" 2>&1 &
        pids+=($!)
    done
    for lane in 0 1; do
        wait "${pids[lane]}" || true
        say "lane $((lane + 1)) of 2:${lanes[lane]}"
        cat "$RUN_DIR/cluster-lane$lane.log"
        # (a lane that ended without its count, killed or failed to start, counts as one failure)
        counts="$(sed -n 's/^cluster: \([0-9]*\) passed, \([0-9]*\) failed$/\1 \2/p' "$RUN_DIR/cluster-lane$lane.log")"
        [ -n "$counts" ] || counts="0 1"
        PASSED=$((PASSED + ${counts% *})) FAILED=$((FAILED + ${counts#* }))
    done
    tests=()
fi
for t in "${tests[@]}"; do
    started=$SECONDS
    "test_$t"
    echo "  ($t: $((SECONDS - started)) s)"
done
echo
echo "cluster: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
