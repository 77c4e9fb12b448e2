#!/usr/bin/env bash
# pg_upgrade from PostgreSQL FROM to TO (default 17 -> 18) with pg_shard_id preloaded on both
# sides, after a 60 s lead (the old server's clock ran 60 s fast: the test clock) and with the
# old epoch (2020-01-01) missing from the new postgresql.conf, which pg_upgrade does not carry;
# nor does it carry the lease file. The new server must refuse (55000, naming both epochs) until
# the epoch is set, then issue ids above every old row.
# Needs test builds (pg_shard_id.test_clock_offset_ms) installed in both (scripts/test.sh does).
# Usage: tests/upgrade/pg_upgrade.sh [FROM [TO]]. Ends with "N passed, M failed".
source "$(dirname "$0")/../../scripts/lib.sh"
source "$REPO/tests/cluster/lifecycle.sh"
stop_clusters_at_exit

FROM="${1:-17}"
TO="${2:-18}"
LEAD_MS=60000

say "pg_upgrade $FROM -> $TO after a 60 s lead, the old epoch missing from the new postgresql.conf"
select_pg "$FROM"
OLD_BIN="$PG_BIN"
start_cluster upgrade_old yes "pg_shard_id.epoch = '2020-01-01 00:00:00+00'"
OLD_PORT="$PGPORT"
lifecycle_db
burst_start="$(date +%s%3N)"
q -c "SET pg_shard_id.test_clock_offset_ms = $LEAD_MS" \
  -c "INSERT INTO t (n) SELECT g FROM generate_series(1, 200000) g"
newest="$(newest_row)"
echo "  200,000 rows on PostgreSQL $FROM, the newest at $newest"
old_identifier="$(q -c "SELECT system_identifier FROM pg_control_system()")"
as_pg "$PG_BIN/pg_ctl" -D "$RUN_DIR/upgrade_old/data" -m fast -w stop >/dev/null

select_pg "$TO"
dir="$RUN_DIR/upgrade_new"
stop_cluster upgrade_new
rm -rf "$dir" && mkdir -p "$dir" && chown postgres: "$dir"
checksums=()
[ "$TO" -ge 18 ] && [ "$FROM" -lt 18 ] && checksums=(--no-data-checksums) # 18 turns them on by default
as_pg "$PG_BIN/initdb" -D "$dir/data" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 \
    "${checksums[@]}" >"$dir/initdb.log"
NEW_PORT="$(free_port)"
{
    echo "port = $NEW_PORT"
    echo "listen_addresses = '127.0.0.1'"
    echo "unix_socket_directories = '$dir'"
    echo "shared_preload_libraries = 'pg_shard_id'"
} | as_pg tee -a "$dir/data/postgresql.conf" >/dev/null
upgraded=yes
(cd "$dir" && as_pg "$PG_BIN/pg_upgrade" -b "$OLD_BIN" -B "$PG_BIN" -d "$RUN_DIR/upgrade_old/data" \
    -D "$dir/data" -p "$OLD_PORT" -P "$NEW_PORT" -s "$dir" >"$dir/pg_upgrade.log" 2>&1) || upgraded=no
check "pg_upgrade $FROM -> $TO: succeeds" "$upgraded" yes
[ "$upgraded" = yes ] || tail -20 "$dir/pg_upgrade.log" | sed 's/^/    /'
STARTED_CLUSTERS+=(upgrade_new)
pg_ctl_as_pg -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null
at upgrade_new
check "upgraded: the rows are there" "$(q -c "SELECT count(*) FROM t")" 200000
check "upgraded: the new server's lease file is a fresh one (pg_upgrade does not carry it)" \
    "$(as_pg cat "$dir/data/pg_shard_id.lease" | grep -c '^pg_shard_id lease 00000001767225600000 epoch 00000001767225600000 ')" 1
err="$(error_of -c "SELECT next_shard_id('s', 1)")"
echo "  $err"
check "upgraded, epoch missing: refused (55000) naming both epochs" \
    "$(echo "$err" | grep -c "55000: .*epoch (2026-01-01 00:00:00.000+00) is later than the epoch this database's ids were made with (2020-01-01 00:00:00.000+00)")" 1
restart_cluster upgrade_new "pg_shard_id.epoch = '2020-01-01 00:00:00+00'"
draw_past_newest "$newest" "$(same_time_again "$LEAD_MS" "$burst_start")"
echo "  $(q -c "SELECT count(*) FROM t_new") ids drawn on PostgreSQL $TO until the clock passed the newest row"
check "upgraded, epoch set: new ids equal to old rows" "$(equal_ids)" 0
check "upgraded, epoch set: every new id is above every old row" "$(all_above)" t
check "upgraded: the new server took the data in (its row replaced the old server's)" \
    "$(q -c "SELECT string_agg(DISTINCT (system_identifier = (SELECT system_identifier FROM pg_control_system()))::text, ',')
             || ' ' || bool_or(system_identifier = $old_identifier) FROM _pg_shard_id.origin")" "true false"
stop_cluster upgrade_new
echo
echo "pg_upgrade: $PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
