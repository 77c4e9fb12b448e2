#!/usr/bin/env bash
# Instructions per INSERT (issue 40: where does a timed insert's gap against bigserial go?):
# callgrind over a single-user backend that runs one prepared INSERT per line, N and 2N times,
# for a table whose id is next_shard_id('s', 1), bigserial, and an identity column; the figure is
# marginal ((2N run - N run) / N), so start-up, catalog loads and a sequence's first id cancel
# out. Every statement is its own transaction, as in pgbench without -t batching.
#   bench/insert_cost.sh            N=2000, the build installed in the selected PostgreSQL
# Prints one line per table. (WAL per insert, the other half of the question, is read from
# pg_stat_wal around a pgbench run; on 2026-11-25 it was the same for the three: 3.033 records
# and 170.1-170.4 bytes per insert, no WAL flush, PostgreSQL 15, synchronous_commit off.)
source "$(dirname "$0")/../scripts/lib.sh"
stop_clusters_at_exit
N="${N:-2000}"
start_cluster inscost yes >/dev/null
stop_cluster inscost
dir="$RUN_DIR/inscost"
as_pg "$PG_BIN/postgres" --single -D "$dir/data" postgres >/dev/null <<<"CREATE EXTENSION pg_shard_id; CREATE SEQUENCE s; CREATE TABLE t_shard (id bigint PRIMARY KEY DEFAULT next_shard_id('s', 1), v int); CREATE TABLE t_serial (id bigserial PRIMARY KEY, v int); CREATE TABLE t_ident (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v int);"
count() { # count TABLE STATEMENTS: callgrind's total for a backend running that many inserts
    local f="$dir/$1-$2.sql" out="$dir/$1-$2.callgrind"
    { echo "PREPARE p AS INSERT INTO $1 (v) VALUES (1);"; for _ in $(seq 1 "$2"); do echo "EXECUTE p;"; done; } >"$f"
    chmod 644 "$f"
    as_pg valgrind --tool=callgrind --callgrind-out-file="$out" "$PG_BIN/postgres" --single -D "$dir/data" \
        -c jit=off -c pg_shard_id.overflow=borrow postgres <"$f" >"$out.log" 2>&1
    sed -n 's/^summary: //p' "$out" | head -1
}
say "instructions per prepared INSERT (callgrind, $N and $((2 * N)) statements, PostgreSQL $PG_MAJOR)"
for t in t_shard t_serial t_ident; do
    a="$(count "$t" "$N")"
    b="$(count "$t" $((2 * N)))"
    echo "  $t: $(((b - a) / N)) instructions per INSERT"
done
