#!/usr/bin/env bash
# What the data floor costs: the time to a sequence's first id after a restart when its DEFAULT
# column holds ROWS rows (default 10,000,000, a primary key), against a sequence whose table is
# empty and against the second id. Each round restarts the server (so every guard is fresh), lets
# a third sequence take the server's one-time work (the origin check, the lease write), then times
# the three calls with clock_timestamp() in one backend. Prints one line per round and the medians.
#   bench/first_id_cost.sh              PostgreSQL 15, the installed build
#   FIRST_ID_PG=18 FIRST_ID_ROWS=1000000 FIRST_ID_ROUNDS=5 bench/first_id_cost.sh
source "$(dirname "$0")/../scripts/lib.sh"
stop_clusters_at_exit
select_pg "${FIRST_ID_PG:-15}"
ROWS="${FIRST_ID_ROWS:-10000000}"
ROUNDS="${FIRST_ID_ROUNDS:-7}"
start_cluster firstid yes "fsync = off" "shared_buffers = '512MB'" "max_wal_size = '4GB'"
say "loading $ROWS rows (PostgreSQL $PG_MAJOR)"
q -c "SET client_min_messages = warning; CREATE EXTENSION pg_shard_id" \
  -c "CREATE SEQUENCE big_s" -c "CREATE SEQUENCE empty_s" -c "CREATE SEQUENCE other_s" \
  -c "CREATE TABLE big (id bigint PRIMARY KEY DEFAULT next_shard_id('big_s', 1))" \
  -c "CREATE TABLE empty_t (id bigint PRIMARY KEY DEFAULT next_shard_id('empty_s', 2))" \
  -c "INSERT INTO big SELECT shard_id_compose(now() - interval '1 day' + (g / 100) * interval '1 ms', 1, (g % 100)::int)
        FROM generate_series(1, $ROWS) g" \
  -c "VACUUM ANALYZE big"
echo "  table big: $(q -c "SELECT pg_size_pretty(pg_table_size('big')) || ' + index ' || pg_size_pretty(pg_indexes_size('big'))")"
dir="$RUN_DIR/firstid"
for round in $(seq "$ROUNDS"); do
    restart_cluster firstid
    q -c "DO \$\$
DECLARE t0 timestamptz; t1 timestamptz; t2 timestamptz; t3 timestamptz; x bigint;
BEGIN
    x := next_shard_id('other_s', 3);   -- the server's first id: origin check, lease write
    t0 := clock_timestamp(); x := next_shard_id('empty_s', 2);
    t1 := clock_timestamp(); x := next_shard_id('big_s', 1);
    t2 := clock_timestamp(); x := next_shard_id('big_s', 1);
    t3 := clock_timestamp();
    RAISE NOTICE 'round % % % %', $round,
        (extract(epoch FROM t1 - t0) * 1e6)::int, (extract(epoch FROM t2 - t1) * 1e6)::int,
        (extract(epoch FROM t3 - t2) * 1e6)::int;
END \$\$" 2>&1 | sed -n 's/^NOTICE:  round //p' | tee -a "$dir/rounds"
done
python3 - "$dir/rounds" "$ROWS" "$PG_MAJOR" <<'PY'
import statistics, sys
rows = [list(map(int, l.split()[1:])) for l in open(sys.argv[1]) if l.strip()]
med = [statistics.median(c) for c in zip(*rows)]
print(f"PostgreSQL {sys.argv[3]}, {len(rows)} restarts, median: first id of a sequence whose table is "
      f"empty {med[0]:.0f} us; first id with {int(sys.argv[2]):,} rows {med[1]:.0f} us; "
      f"the next id {med[2]:.0f} us")
PY
