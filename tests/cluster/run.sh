#!/usr/bin/env bash
# Cluster-level tests of the uniqueness guard: what needs several sessions, a crash and restart,
# a server without the library preloaded, or the test clock. Each starts its own throwaway
# cluster (scripts/lib.sh). Needs a test build installed (scripts/test.sh does that).
# Ends with the line "N passed, M failed"; exits non-zero if any failed.
source "$(dirname "$0")/../../scripts/lib.sh"

SECONDS_CONCURRENT="${CONCURRENT_SECONDS:-20}"
q() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }
dups() { q -c "SELECT count(*) - count(DISTINCT id) FROM $1"; }
decreases() { # rows whose millisecond is below the previous row's, in the order of column $2
    q -c "SELECT count(*) FROM (SELECT id, lag(id) OVER (ORDER BY $2) AS prev FROM $1) x WHERE (id >> 23) < (prev >> 23)"
}
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
        if [ "$mode" = wait ]; then
            check "wait: never far enough ahead of the clock to need the lease file" \
                "$(as_pg test -e "$PGHOST/data/pg_shard_id.lease" && echo written || echo none)" none
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
    say "the clock steps back 2 s in the middle of a stream (test clock)"
    start_cluster clock yes
    setup_db ""
    psql -X -q -v ON_ERROR_STOP=1 >/dev/null 2>"$PGHOST/step.err" <<'SQL'
INSERT INTO t (id) SELECT next_shard_id('s', 1) FROM generate_series(1, 50000);
SET pg_shard_id.test_clock_offset_ms = -2000;
INSERT INTO t (id) SELECT next_shard_id('s', 1) FROM generate_series(1, 50000);
INSERT INTO t (id) SELECT next_shard_id('s', 1) FROM generate_series(1, 50000);
SQL
    cat "$PGHOST/step.err" | sed 's/^/  /'
    check "clock step: WARNINGs" "$(grep -c '^WARNING' "$PGHOST/step.err")" 1
    local step; step="$(grep -o 'stepped back by [0-9]* ms' "$PGHOST/step.err" | grep -o '[0-9]*' || true)"
    check "clock step: the WARNING gives the step (1900..2000 ms)" \
        "$([ "${step:-0}" -ge 1900 ] && [ "${step:-0}" -le 2000 ] && echo yes)" yes
    check "clock step: duplicates" "$(dups t)" 0
    check "clock step: millisecond decreases in nextval order" "$(decreases t n)" 0
    stop_cluster clock
}

test_not_preloaded() {
    say "not in shared_preload_libraries: per-session guard"
    start_cluster nopreload no
    local notice
    notice="$(psql -X -q -c "CREATE EXTENSION pg_shard_id" 2>&1)"
    echo "  $notice" | head -1
    check "no preload: CREATE EXTENSION says so" \
        "$(echo "$notice" | grep -c 'NOTICE:  pg_shard_id is not in shared_preload_libraries')" 1
    check "no preload: guard mode" "$(q -c "SELECT guard FROM pg_shard_id_info()")" session
    q -c "CREATE SEQUENCE s" -c "CREATE TABLE t (id bigint DEFAULT next_shard_id('s', 1), n bigserial)" \
      -c "INSERT INTO t (n) SELECT g FROM generate_series(1, 1000000) g"
    check "no preload: duplicates in one session's 1,000,000 ids" "$(dups t)" 0
    check "no preload: millisecond decreases" "$(decreases t n)" 0
    stop_cluster nopreload
}

test_crash_restart() {
    say "SIGKILL right after a borrow burst ran ahead of the clock; the server restarts; the burst goes on"
    start_cluster crash yes "pg_shard_id.overflow = borrow" "restart_after_crash = on"
    setup_db ""
    # 6,000,000 ids at full speed straight to a file: borrow runs seconds ahead of the clock (the
    # layout holds 1,024 per ms); then crash at once, while that lead is still there.
    q -c "COPY (SELECT next_shard_id('s', 1) FROM generate_series(1, 6000000)) TO '$PGHOST/before.txt'"
    local crash_ms; crash_ms="$(date +%s%3N)"
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
    q -c "COPY (SELECT next_shard_id('s', 1) FROM generate_series(1, 1000000)) TO '$PGHOST/after.txt'"
    q -c "COPY t (id) FROM '$PGHOST/before.txt'" -c "COPY t (id) FROM '$PGHOST/after.txt'"
    echo "  at the crash the last id was $(q -c "SELECT (max(id) >> 23) + 1767225600000 - $crash_ms FROM t WHERE n <= 6000000") ms ahead of the clock;" \
         "after the restart ids start $(q -c "SELECT (min(id) FILTER (WHERE n > 6000000) >> 23) - (max(id) FILTER (WHERE n <= 6000000) >> 23) FROM t") ms after the last one"
    check "crash: ids from both sides of the crash" "$(q -c "SELECT count(*) FROM t")" 7000000
    check "crash: duplicates across the crash" "$(dups t)" 0
    check "crash: the lease file exists" "$(as_pg test -s "$PGHOST/data/pg_shard_id.lease" && echo yes)" yes
    stop_cluster crash
}

test_many_shards() {
    say "3 clusters, 12 logical shards, a shard move (scripts/many_shards.sh)"
    if bash "$REPO/scripts/many_shards.sh" 2>&1 | sed 's/^/  /'; then
        check "many shards: unique ids, routing, shard move" passed passed
    else
        check "many shards: unique ids, routing, shard move" failed passed
    fi
}

tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(concurrent_sessions cached_sequence clock_step_back not_preloaded crash_restart many_shards)
for t in "${tests[@]}"; do "test_$t"; done
echo
echo "cluster: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
