#!/usr/bin/env bash
# Ids at past times (issue 37): rows per second of INSERT ... SELECT into a table with a btree
# index on its id, from a staging table of N timestamps (one day of history, about 0.1 rows per
# millisecond), in time order and in random order, in one session and in two at once (each
# taking half the rows); for
#   next_shard_id_at('s', 1, ts)                      unique by construction
#   shard_id_compose(ts, 1, (random() * 1023)::int)   the peers' way: random low bits, and the
#                                                     duplicates it made are counted
#   next_shard_id('s', 1)                             the live DEFAULT (now, not the row's time)
#   nextval('s')                                      the floor
# in the same cluster, interleaved by order and sessions. Prints a markdown table.
#   bench/backfill.sh                    N=2000000, PostgreSQL 15 (PG_MAJOR picks another)
#   BACKFILL_ROWS=10000000 bench/backfill.sh
source "$(dirname "$0")/../scripts/lib.sh"
stop_clusters_at_exit
N="${BACKFILL_ROWS:-2000000}"
start_cluster backfill yes "max_wal_size = 8GB" "checkpoint_timeout = 30min" "synchronous_commit = off" >/dev/null
psql -qX -v ON_ERROR_STOP=1 <<SQL
CREATE EXTENSION pg_shard_id;
CREATE SEQUENCE s;
CREATE TABLE staging_time AS
    SELECT g, '2026-06-01'::timestamptz + random() * interval '1 day' AS ts FROM generate_series(1, $N) g;
CREATE TABLE staging_random AS SELECT g, ts FROM staging_time;
-- numbered in time order, and in a random order
CREATE TABLE staging_tmp AS SELECT row_number() OVER (ORDER BY ts) AS g, ts FROM staging_time;
DROP TABLE staging_time; ALTER TABLE staging_tmp RENAME TO staging_time;
CREATE INDEX ON staging_time (g); CREATE INDEX ON staging_random (g);
VACUUM ANALYZE;
SQL
declare -A EXPR=(
    [next_shard_id_at]="next_shard_id_at('s', 1, ts)"
    [compose_random]="shard_id_compose(ts, 1, (random() * 1023)::int)"
    [next_shard_id]="next_shard_id('s', 1)"
    [nextval]="nextval('s')"
)
methods=(next_shard_id_at compose_random next_shard_id nextval)
say "INSERT ... SELECT of $N rows into an indexed table, PostgreSQL $PG_MAJOR ($(nproc) cores)"
echo
echo "| method | order | sessions | rows/s | duplicates |"
echo "|---|---|---:|---:|---:|"
for order in time random; do
    for sessions in 1 2; do
        for m in "${methods[@]}"; do
            psql -qX -v ON_ERROR_STOP=1 -c "DROP TABLE IF EXISTS t; CREATE TABLE t (id bigint NOT NULL DEFAULT next_shard_id('s', 1), ts timestamptz); CREATE INDEX ON t (id); CHECKPOINT;"
            t0="$(date +%s.%N)"
            pids=()
            for k in $(seq 0 $((sessions - 1))); do
                psql -qX -v ON_ERROR_STOP=1 -c "INSERT INTO t (id, ts) SELECT ${EXPR[$m]}, ts FROM staging_$order WHERE g % $sessions = $k ORDER BY g" &
                pids+=($!)
            done
            for p in "${pids[@]}"; do wait "$p"; done
            t1="$(date +%s.%N)"
            dups="$(psql -qXAt -c "SELECT count(*) - count(DISTINCT id) FROM t")"
            rate="$(python3 -c "print(round($N / ($t1 - $t0)))")"
            echo "| $m | $order | $sessions | $rate | $dups |"
        done
    done
done
